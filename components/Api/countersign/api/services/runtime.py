"""What the API learns after it is built (Api LLD, wiring): the step runtime, the Temporal client,
the registry in force and the n8n credentials.

One holder the services read at call time. The lifespan opens the step runtime and connects to
Temporal, ``countersign up`` learns the n8n credentials, an admin's registry edit changes the
registry: each builds a new ``Executor`` (and ``Intake``) from the one before with that
collaborator replaced (``dataclasses.replace``), so no other component's object has a field
changed after construction, and a call already under way keeps the collaborators it began with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from temporalio.client import Client

from countersign.durable import durable_starter
from countersign.execute import Executor
from countersign.intake import Intake
from countersign.registry import Registry
from countersign.steps import StepTransport
from countersign.workflowbuilder import CredentialRef

__all__ = ["Runtime"]


@dataclass
class Runtime:
    """The collaborators that change while the API runs."""

    registry: Registry
    executor: Executor
    intake: Intake
    #: where steps run (None until the lifespan opens the runtime: previews are refused)
    transport: StepTransport | None = None
    #: the Temporal client durable plans run on (None: durable plans are refused)
    temporal: Client | None = None
    #: the n8n credentials generated nodes use
    credentials: Mapping[str, CredentialRef] = field(default_factory=dict)

    def use_transport(self, transport: StepTransport | None) -> None:
        """Where steps run from now on (the API opens its n8n client when it starts)."""
        self.transport = transport
        self.executor = replace(self.executor, transport=transport)

    def use_temporal(self, client: Client) -> None:
        """Durable plans go to Temporal through ``client`` (execute hands them off; approving,
        rejecting or cancelling a running one reaches the workflow)."""
        self.temporal = client
        self.executor = replace(
            self.executor, durable=durable_starter(client, registry=lambda: self.registry)
        )

    def use_registry(self, registry: Registry) -> None:
        """Plan, preview and execute against this registry from now on (plans signed against
        another version are refused: ``registry_changed``)."""
        self.registry = registry
        self.executor = replace(self.executor, registry=registry)
        self.intake = Intake(registry, threshold=self.intake.threshold)

    def use_credentials(self, credentials: Mapping[str, CredentialRef]) -> None:
        """The n8n credentials generated nodes use (learnt when n8n is up)."""
        self.credentials = dict(credentials)
        self.executor = replace(self.executor, credentials=self.credentials)
