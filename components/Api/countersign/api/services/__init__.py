"""The Api's use cases (Api LLD, module map): one thin service each, over other components'
public APIs only — no SQL on their tables. ``wiring.build_services`` composes them."""

from .chat import Chat
from .codec import CodecDesk
from .durable import DurableLink, HandOff
from .gates import Gates
from .memory import Memory
from .planning import Planning, Proposal
from .records import RuntimeRecords, execution_matcher
from .registry import RegistryDesk
from .runs import Runs
from .runtime import Runtime
from .views import PlanViews

__all__ = [
    "Chat",
    "CodecDesk",
    "DurableLink",
    "Gates",
    "HandOff",
    "Memory",
    "PlanViews",
    "Planning",
    "Proposal",
    "RegistryDesk",
    "Runs",
    "Runtime",
    "RuntimeRecords",
    "execution_matcher",
]
