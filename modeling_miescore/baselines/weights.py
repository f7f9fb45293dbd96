"""Where each baseline's weights must be, whether they are there, and whether they are safe to load.

Nothing is downloaded here, and nothing is downloaded by the metrics either: every file is looked up, before a
metric is built, in the folder its own library reads, and a missing file is named in a one-line error with that
folder and the address it comes from, so it can be fetched on a machine with network and copied over.

- pyiqa checkpoints: ``<torch hub dir>/pyiqa/`` (pyiqa's ``DEFAULT_CACHE_DIR``), from pyiqa's own tables;
- torchvision backbones: ``<torch hub dir>/checkpoints/``;
- Hugging Face repositories (timm backbones, Q-Align, CLIP): the Hugging Face cache (``HF_HOME`` / ``HF_HUB_CACHE``).

``<torch hub dir>`` is ``$TORCH_HOME/hub`` (default ``~/.cache/torch/hub``).

pyiqa and torchvision open their ``.pth`` files with full unpickling (``torch.load(weights_only=False)``); a
pickle can run code, so each such file is first opened with torch's weights-only loader, and one that holds
anything but tensors and plain containers is refused.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from ..image_io import MIEScoreInputError
from .registry import Baseline, HubSnapshot, PyiqaWeights, TorchHubCheckpoint

__all__ = ["UnsafeWeightsError", "WeightsFile", "WeightsMissingError", "check_weights", "locate", "require_library"]

_LIBRARY_EXTRA = "pip install 'miescore[baselines]'"


class WeightsMissingError(MIEScoreInputError):
    """A weights file a metric needs is not where its library reads it."""


class UnsafeWeightsError(MIEScoreInputError):
    """A checkpoint that torch's weights-only loader refuses (it would run code when unpickled)."""


@dataclass(frozen=True)
class WeightsFile:
    """One required file: where it must be (``path``), where it comes from, and whether it is there."""

    path: Path
    origin: str  # a URL, or the command that fetches a Hub repository
    relocate: str  # the environment variable that moves the folder
    pickled: bool  # opened by its library with full unpickling

    @property
    def present(self) -> bool:
        return self.path.is_file()

    def describe(self) -> str:
        return f"'{self.path.name}' in '{self.path.parent}' (from {self.origin})"


def require_library(baseline: Baseline):
    """Import the library behind ``baseline``; a one-line error naming the extra if it is not installed."""
    try:
        return importlib.import_module(baseline.library)
    except ImportError as err:
        raise MIEScoreInputError(f"metric '{baseline.name}' needs {baseline.library} ({err.name} is missing): "
                                 f"{_LIBRARY_EXTRA}") from None


def _url_name(url: str) -> str:
    return os.path.basename(urlparse(url).path)


def locate(requirement) -> WeightsFile:
    """Where the library behind one registry weights entry reads it (see the module docstring)."""
    import torch

    if isinstance(requirement, PyiqaWeights):
        from pyiqa.utils import download_util

        module = importlib.import_module(f"pyiqa.archs.{requirement.arch_module}")
        url = module.default_model_urls[requirement.url_key]
        return WeightsFile(Path(download_util.DEFAULT_CACHE_DIR) / _url_name(url), url, "TORCH_HOME", True)
    if isinstance(requirement, TorchHubCheckpoint):
        folder = Path(torch.hub.get_dir()) / "checkpoints"
        return WeightsFile(folder / _url_name(requirement.url), requirement.url, "TORCH_HOME", True)
    if isinstance(requirement, HubSnapshot):
        return _locate_hub_file(requirement)
    raise TypeError(f"unknown weights requirement {requirement!r}")


def _locate_hub_file(requirement: HubSnapshot) -> WeightsFile:
    from huggingface_hub import constants, try_to_load_from_cache

    found = try_to_load_from_cache(requirement.repo_id, requirement.filename)
    origin = f"'hf download {requirement.repo_id}' on a machine with network"
    if isinstance(found, str):
        return WeightsFile(Path(found), origin, "HF_HOME", False)
    folder = Path(constants.HF_HUB_CACHE) / ("models--" + requirement.repo_id.replace("/", "--"))
    return WeightsFile(folder / requirement.filename, origin, "HF_HOME", False)


def _check_loadable(weights: WeightsFile) -> None:
    """Refuse a pickled checkpoint that torch's weights-only loader cannot open."""
    import pickle

    import torch

    try:
        torch.load(weights.path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError, OSError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UnsafeWeightsError(
            f"refusing to load '{weights.path}': torch's weights-only loader cannot open it ({reason}); "
            f"replace it with the file from {weights.origin}"
        ) from None


def check_weights(baselines: list[Baseline]) -> dict[str, list[WeightsFile]]:
    """Every weights file of ``baselines``, all present and loadable; otherwise one line naming what is missing.

    Returns ``{metric name: [WeightsFile, ...]}`` in registry order.
    """
    found: dict[str, list[WeightsFile]] = {}
    problems = []
    for baseline in baselines:
        if baseline.weights:
            require_library(baseline)
        try:
            files = [locate(r) for r in baseline.weights]
        except ImportError as err:  # a dependency of the library's model code
            raise MIEScoreInputError(f"metric '{baseline.name}' needs {err.name}, which is not installed: "
                                     f"{_LIBRARY_EXTRA}") from None
        missing = [f for f in files if not f.present]
        if missing:
            moves = sorted({f.relocate for f in missing})
            problems.append(
                f"metric '{baseline.name}' needs {' and '.join(f.describe() for f in missing)}; copy "
                f"{'it' if len(missing) == 1 else 'them'} there ({' / '.join(moves)} moves the folder)")
        found[baseline.name] = files
    if problems:
        raise WeightsMissingError("; ".join(problems))
    for files in found.values():
        for weights in files:
            if weights.pickled:
                _check_loadable(weights)
    return found
