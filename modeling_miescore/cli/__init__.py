"""The ``miescore`` command line (``python -m modeling_miescore.cli`` runs it too).

One module per command family; :mod:`.main` holds the parser, ``main`` and the list of command modules
(``COMMAND_MODULES``).
"""

from .main import main

__all__ = ["main"]
