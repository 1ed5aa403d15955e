"""``python -m countersign.cli``."""

from .main import main

main()
