"""The ``miescore`` command line (``python -m modeling_miescore.cli`` runs it too).

One module per command family: :mod:`.main` (parser, ``score``, ``score-batch``, ``demo``,
``build-dataset``), :mod:`.serve`, :mod:`.benchmark`, :mod:`.spatialreward`, :mod:`.skill`.
"""

from .main import main

__all__ = ["main"]
