"""A copy of a checkpoint whose files try to run code: the fixture of the "loading runs no shipped code" tests.

:func:`tamper_checkpoint` copies a saved MIEScore or SpatialReward checkpoint and plants code that announces
itself by writing a marker file the moment it is imported:

* ``evil_proc.py`` defines subclasses of the stock ``Qwen3VLProcessor``, ``Qwen2Tokenizer`` and
  ``Qwen2VLImageProcessor``; ``processor_config.json`` (and its nested image processor settings) and
  ``tokenizer_config.json`` name them in an ``auto_map``. ``AutoProcessor.from_pretrained(...,
  trust_remote_code=True)`` imports it; a safe loader never does. It writes :attr:`TamperedCheckpoint.processor_marker`.
* the checkpoint's own configuration file gets a line that writes :attr:`TamperedCheckpoint.model_marker`: it
  runs only when the user loads the model with ``trust_remote_code=True`` themselves, never through
  ``load_scorer`` / ``load_spatialreward``, which use the installed package's classes.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

_EVIL_PROCESSOR_CODE = '''"""Planted by tests/corpus/tampered_checkpoint.py: must never be imported by a safe loader."""
import pathlib

pathlib.Path({marker!r}).write_text("evil_proc.py was imported")

from transformers import Qwen2Tokenizer, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor


class EvilProcessor(Qwen3VLProcessor):
    pass


class EvilTokenizer(Qwen2Tokenizer):
    pass


class EvilImageProcessor(Qwen2VLImageProcessor):
    pass
'''

_CONFIG_FILES = {"miescore": "configuration_miescore.py", "spatialreward": "configuration_spatialreward.py"}


@dataclass
class TamperedCheckpoint:
    path: Path
    processor_marker: Path  # written when evil_proc.py is imported
    model_marker: Path  # written when the checkpoint's own configuration file is imported

    def reset(self) -> None:
        """Forget earlier runs (remove the markers)."""
        for marker in (self.processor_marker, self.model_marker):
            marker.unlink(missing_ok=True)

    def code_ran(self, include_model_code: bool = True) -> list[str]:
        """Which planted code has run so far (empty: none)."""
        markers = [self.processor_marker] + ([self.model_marker] if include_model_code else [])
        return [marker.name for marker in markers if marker.exists()]


def _add_auto_map(path: Path, auto_map: dict, nested_key: str | None = None) -> None:
    data = json.loads(path.read_text())
    (data[nested_key] if nested_key else data)["auto_map"] = auto_map
    path.write_text(json.dumps(data, indent=2))


def tamper_checkpoint(checkpoint, destination) -> TamperedCheckpoint:
    """Copy ``checkpoint`` to ``destination`` and plant the code described in the module docstring."""
    destination = Path(destination)
    shutil.copytree(checkpoint, destination)
    markers = destination.parent / f"{destination.name}-markers"
    markers.mkdir(exist_ok=True)
    tampered = TamperedCheckpoint(destination, markers / "PROCESSOR_CODE_RAN", markers / "MODEL_CODE_RAN")
    (destination / "evil_proc.py").write_text(_EVIL_PROCESSOR_CODE.format(marker=str(tampered.processor_marker)))
    _add_auto_map(destination / "processor_config.json", {"AutoProcessor": "evil_proc.EvilProcessor"})
    _add_auto_map(destination / "processor_config.json", {"AutoImageProcessor": "evil_proc.EvilImageProcessor"},
                  nested_key="image_processor")
    _add_auto_map(destination / "tokenizer_config.json", {"AutoTokenizer": ["evil_proc.EvilTokenizer", None]})
    model_type = json.loads((destination / "config.json").read_text())["model_type"]
    config_file = destination / _CONFIG_FILES[model_type]
    config_file.write_text(config_file.read_text() + "\nimport pathlib as _pathlib\n"
                           f"_pathlib.Path({str(tampered.model_marker)!r}).write_text('checkpoint code ran')\n")
    return tampered


__all__ = ["TamperedCheckpoint", "tamper_checkpoint"]
