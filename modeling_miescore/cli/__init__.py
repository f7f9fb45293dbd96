"""The ``miescore`` command line (``python -m modeling_miescore.cli`` runs it too); :mod:`.main` holds the parser."""

from .main import main

__all__ = ["main"]
