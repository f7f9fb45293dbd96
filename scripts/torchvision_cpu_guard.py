"""Make an installed torchvision importable next to a CPU-only torch when its C++ ops cannot load.

PyPI's torchvision wheels for Linux are built against the CUDA torch: their ``_C`` ops library links
``libc10_cuda.so`` / ``libtorch_cuda.so``, which a ``torch==X+cpu`` install does not have. torchvision is made
to run without its ops (``torchvision.extension._has_ops()`` turns False and every meta and autograd
registration is skipped), except two unguarded ``@torch.library.register_fake("torchvision::nms")`` /
``("torchvision::qnms")`` decorators in ``torchvision/_meta_registrations.py``, which then raise "operator
torchvision::nms does not exist" on ``import torchvision`` (pytorch/vision issues 9077 / 9085; the guard below is
the one proposed upstream in pytorch/vision PR 9086). Only detection ops (nms, roi_align, ...) need ``_C``;
``torchvision.transforms`` (what transformers' Qwen-VL image and video processors use) does not.

The matching CPU wheel (``torchvision==0.N.M+cpu`` from https://download.pytorch.org/whl/cpu) is the better fix;
``scripts/vllm_cpu.sh provision`` installs it when that index can be reached and uses this guard only otherwise.

    python scripts/torchvision_cpu_guard.py [SITE_PACKAGES/torchvision]   # default: the importing Python's

Idempotent (a marked file is left alone). Exits 2 with one line when the file does not have the expected layout
(another torchvision version: check its ``_meta_registrations.py`` by hand).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

MARKER = "# miescore: register_fake guarded for torchvision without its C++ ops"
UNGUARDED = '@torch.library.register_fake("torchvision::'
GUARDED = '@_register_fake_if_has_ops("torchvision::'
ANCHOR = "@functools.lru_cache(None)\ndef get_meta_lib"
HELPER = f'''{MARKER}
def _register_fake_if_has_ops(op_name):
    if torchvision.extension._has_ops():
        return torch.library.register_fake(op_name)
    return lambda fn: fn


'''


def guarded_source(text: str) -> str:
    """The text of ``_meta_registrations.py`` with its ``register_fake`` decorators guarded; ``ValueError`` when
    the layout is not the expected one. A text that is already guarded is returned unchanged."""
    if MARKER in text:
        return text
    if UNGUARDED not in text or text.count(ANCHOR) != 1:
        raise ValueError("unexpected layout: no unguarded torch.library.register_fake(\"torchvision::...\") "
                         "decorator, or no get_meta_lib definition")
    return text.replace(ANCHOR, HELPER + ANCHOR, 1).replace(UNGUARDED, GUARDED)


def torchvision_folder() -> Path:
    """The installed torchvision package folder, found without importing it (importing is what fails)."""
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("torchvision is not installed in this Python")
    return Path(list(spec.submodule_search_locations)[0])


def apply(folder: Path) -> bool:
    """Guard ``folder/_meta_registrations.py`` in place (atomically); True when the file changed."""
    target = folder / "_meta_registrations.py"
    text = target.read_text(encoding="utf-8")
    fixed = guarded_source(text)
    if fixed == text:
        return False
    handle, staging = tempfile.mkstemp(prefix=".meta_registrations.", dir=folder)
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(fixed)
    os.chmod(staging, target.stat().st_mode & 0o777)
    os.replace(staging, target)
    return True


def main(argv: list[str]) -> int:
    try:
        folder = Path(argv[0]) if argv else torchvision_folder()
        changed = apply(folder)
    except (OSError, ValueError) as err:
        print(f"error: torchvision guard: {err}", file=sys.stderr)
        return 2
    print(f"torchvision guard {'applied to' if changed else 'already in'} {folder / '_meta_registrations.py'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
