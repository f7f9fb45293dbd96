"""Damaged copies of a checkpoint folder: the fixtures of the checkpoint-validation tests and the bad-input corpus.

Each :data:`BAD_CHECKPOINTS` entry is one way a download or an export goes wrong (issue 22, item 14): damaged
safetensors (0 bytes, cut in half, a 2^62-byte header length, a tensor whose offsets run past the data, a
header that is not JSON), a tensor of the wrong shape, pickle-only weights, a missing chat template or
``tokenizer.json``, a ``config.json`` that is a JSON list, a ``max_pixels`` of ``"lots"`` or -5, and a chat
template that breaks out of Jinja's sandbox. ``needle`` is text the one-line error must contain.
"""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

WEIGHTS = "model.safetensors"


def _weights(folder: Path) -> tuple[bytes, int, dict]:
    data = (folder / WEIGHTS).read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    return data, length, json.loads(data[8:8 + length])


def _zero_bytes(folder: Path) -> None:
    (folder / WEIGHTS).write_bytes(b"")


def _truncated(folder: Path) -> None:
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(data[: len(data) // 2])


def _huge_header(folder: Path) -> None:
    data = (folder / WEIGHTS).read_bytes()
    (folder / WEIGHTS).write_bytes(struct.pack("<Q", 2**62) + data[8:])


def _bad_offset(folder: Path) -> None:
    data, length, header = _weights(folder)
    name = next(key for key in header if key != "__metadata__")
    header[name]["data_offsets"][1] += 10**9
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    (folder / WEIGHTS).write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + length:])


def _non_json_header(folder: Path) -> None:
    data, length, _ = _weights(folder)
    (folder / WEIGHTS).write_bytes(data[:8] + b"x" * length + data[8 + length:])


def _wrong_shape(folder: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    tensors = load_file(folder / WEIGHTS)
    name = next((key for key in sorted(tensors) if key.startswith(("head.", "lm_head."))), sorted(tensors)[-1])
    tensors[name] = torch.zeros(tuple(size + 1 for size in tensors[name].shape))
    save_file(tensors, folder / WEIGHTS, metadata={"format": "pt"})


def _pickle_only(folder: Path) -> None:
    (folder / WEIGHTS).unlink()
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")  # a pickle of the integer 1: never opened


def _edit_config(change: Callable[[dict], object]) -> Callable[[Path], None]:
    def damage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        result = change(config)
        (folder / "config.json").write_text(json.dumps(config if result is None else result))

    return damage


def _unlink(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).unlink()


def _sandbox_escape(folder: Path) -> None:
    (folder / "chat_template.jinja").write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")


@dataclass(frozen=True)
class BadCheckpoint:
    name: str
    damage: Callable[[Path], None]
    needle: str  # the one-line error contains it (case-insensitive)
    loads_weights: bool = True  # False: the fault is in the config / processor (also `miescore tokens` sees it)


BAD_CHECKPOINTS = (
    BadCheckpoint("0-byte safetensors", _zero_bytes, "not a valid safetensors file (header too small)"),
    BadCheckpoint("truncated safetensors", _truncated, "not a valid safetensors file"),
    BadCheckpoint("2^62-byte safetensors header", _huge_header, "header too large"),
    BadCheckpoint("safetensors offset past the data", _bad_offset, "not a valid safetensors file"),
    BadCheckpoint("safetensors header not JSON", _non_json_header, "invalid json in header"),
    BadCheckpoint("tensor of the wrong shape", _wrong_shape, "do not fit the config"),
    BadCheckpoint("pickle-only pytorch_model.bin", _pickle_only, "pickle files are never loaded"),
    BadCheckpoint("no chat template", _unlink("chat_template.jinja"), "no chat template", loads_weights=False),
    BadCheckpoint("no tokenizer.json", _unlink("tokenizer.json"), "no tokenizer.json", loads_weights=False),
    BadCheckpoint("config.json a JSON list", _edit_config(lambda c: [c]), "is a json list", loads_weights=False),
    BadCheckpoint("max_pixels 'lots'", _edit_config(lambda c: c.update(max_pixels="lots")),
                  'max_pixels must be a positive integer, got "lots"', loads_weights=False),
    BadCheckpoint("max_pixels -5", _edit_config(lambda c: c.update(max_pixels=-5)),
                  "max_pixels must be a positive integer, got -5", loads_weights=False),
    BadCheckpoint("chat template escapes the Jinja sandbox", _sandbox_escape, "SecurityError", loads_weights=False),
)


def make_bad_checkpoint(checkpoint, destination, bad: BadCheckpoint) -> Path:
    """Copy ``checkpoint`` to ``destination`` (replaced when present) and apply ``bad``'s damage."""
    destination = Path(destination)
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(checkpoint, destination)
    bad.damage(destination)
    return destination


__all__ = ["BAD_CHECKPOINTS", "BadCheckpoint", "make_bad_checkpoint"]
