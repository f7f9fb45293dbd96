"""Known, harmless log messages of third-party libraries, hidden at our entry points (each one named, with why).

* bitsandbytes logs "Failed to load CPU gemm_4bit_forward from kernels-community ..." when imported on CPUs with
  AVX512-BF16 (bitsandbytes 0.50). pyiqa (the ``baselines`` extra) requires it, and peft and transformers'
  ``Trainer`` import it whenever installed, so every training run printed it; nothing here uses bitsandbytes.
  With the Hub offline, the ``kernels`` package (0.19) logs instead that it skips the publisher check of that
  same bitsandbytes kernel.

:func:`quiet_third_party_logs` drops exactly these messages (a filter on the emitting logger, matching the
message's start); the ``miescore`` command, the training package and the training scripts call it before they
import transformers or peft.
"""

from __future__ import annotations

import logging
from .credentials import redact_library_logs

__all__ = ["KNOWN_MESSAGES", "quiet_third_party_logs"]

# logger name -> starts of the messages dropped from it
KNOWN_MESSAGES: dict[str, tuple[str, ...]] = {
    "bitsandbytes.backends.cpu.ops": ("Failed to load CPU gemm_4bit_forward from kernels-community",),
    "kernels._internals.hf_hub": ("Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes'",),
}


class _DropKnown(logging.Filter):
    """Drops a record whose message starts with one of ``starts``."""

    def __init__(self, starts: tuple[str, ...]):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.starts)


def quiet_third_party_logs() -> None:
    """Install the filters for :data:`KNOWN_MESSAGES` and the credential masking of the HTTP libraries' request
    logs (:func:`~modeling_miescore.utils.credentials.redact_library_logs`; idempotent; cheap: imports nothing)."""
    redact_library_logs()
    for name, starts in KNOWN_MESSAGES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnown) for f in logger.filters):
            logger.addFilter(_DropKnown(starts))
