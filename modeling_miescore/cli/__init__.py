"""The ``miescore`` command line (``python -m modeling_miescore.cli`` runs it too).

One module per command family: :mod:`.main` (the parser and ``main``), :mod:`.score` (``score``, ``score-batch``,
``demo``), :mod:`.serve`, :mod:`.benchmark`, :mod:`.spatialreward`, :mod:`.skill`, :mod:`.dataset`
(``build-dataset``).
"""

from .main import main

__all__ = ["main"]
