"""The baseline metrics of the MIEScore paper's Table 3, one declarative entry per row, and their weights.

Each entry says which library computes the metric (and under which id), what it compares (the edited image alone,
with each source, or the instruction with the edited image), whether lower is better, which weights files it needs
and which Table 3 row it stands for. Rows no maintained library implements, or whose package cannot be installed
beside this project's, are listed with the reason and cannot be run; rows that are not per-edit metrics name the
command that runs them (``runs_via``): ``miescore judge`` (♣), ``trainers/train_miescore.py`` (✻), ``miescore
baselines --evaluator`` (✩, :mod:`.scorers`).

Weights are never downloaded: each file is looked up, before a metric is built, where its own library reads it
(pyiqa: ``<torch hub dir>/pyiqa/``; torchvision: ``<torch hub dir>/checkpoints/``; Hugging Face repositories: the
Hub cache; ``<torch hub dir>`` is ``$TORCH_HOME/hub``), and a missing one is named in a one-line error with that
folder and its address. pyiqa and torchvision unpickle their ``.pth`` files, so each is first opened with torch's
weights-only loader and one holding anything but tensors and plain containers is refused.
"""

from __future__ import annotations

import importlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from ..hub.errors import MIEScoreInputError

NO_REFERENCE = "no-reference"  # the edited image alone
FULL_REFERENCE = "full-reference"  # the edited image against each source image
TEXT_IMAGE = "text-image"  # the instruction against the edited image
SINGLE_SOURCE = "single-source evaluator"  # a learned evaluator of (one source, edited, instruction), per source
MLLM_JUDGE = "MLLM judge"  # a general-purpose MLLM asked for the three scores (miescore judge)
FINE_TUNED_MLLM = "fine-tuned MLLM"  # an MLLM trained on MIE-Bench's train split (trainers/train_miescore.py)
KINDS = (NO_REFERENCE, FULL_REFERENCE, TEXT_IMAGE, SINGLE_SOURCE, MLLM_JUDGE, FINE_TUNED_MLLM)


class UnknownBaselineError(MIEScoreInputError):
    """A metric name that is not in :data:`BASELINES`, or one that cannot run here."""


@dataclass(frozen=True)
class PyiqaWeights:
    """A checkpoint pyiqa downloads into its cache (``<torch hub dir>/pyiqa``): ``url_key`` in the
    ``default_model_urls`` table of the pyiqa module ``arch_module`` (read from pyiqa itself, so that the file
    name always matches the installed pyiqa)."""

    arch_module: str
    url_key: str


@dataclass(frozen=True)
class TorchHubCheckpoint:
    """A torchvision backbone that ``torch.hub`` downloads into ``<torch hub dir>/checkpoints``."""

    url: str


@dataclass(frozen=True)
class HubSnapshot:
    """A Hugging Face Hub repository read from the Hugging Face cache; ``filename`` must be in the snapshot."""

    repo_id: str
    filename: str


@dataclass(frozen=True)
class Baseline:
    name: str  # the name used on the command line and in the predictions' "metric" field
    paper_row: str  # the Table 3 row it stands for
    kind: str  # NO_REFERENCE, FULL_REFERENCE or TEXT_IMAGE
    library: str = ""  # "pyiqa" or "torchmetrics"; empty when it cannot run here
    metric_id: str = ""  # the library's name for it
    lower_better: bool = False
    weights: tuple = ()  # PyiqaWeights / TorchHubCheckpoint / HubSnapshot entries; empty = runs offline as is
    options: dict = field(default_factory=dict)  # keyword arguments for the library's constructor
    min_side: int = 0  # the shortest image side the metric accepts (0: no limit of its own)
    note: str = ""  # how this entry differs from the paper's row
    unavailable: str = ""  # why it cannot run here (empty: it can)
    runs_via: str = ""  # the command that runs a row which is not a --metrics metric

    @property
    def needs_weights(self) -> bool:
        return bool(self.weights)

    @property
    def status(self) -> str:
        if self.unavailable:
            return "out of scope"
        if self.runs_via:
            return "runs via another command"
        return "runnable with weights" if self.needs_weights else "runnable here"

    @property
    def how(self) -> str:
        """How this Table 3 row runs here (or why it does not), in one sentence."""
        if self.unavailable:
            return f"does not run: {self.unavailable}"
        if self.runs_via:
            return f"runs via {self.runs_via}" + (f" ({self.note})" if self.note else "")
        command = f"miescore baselines --metrics {self.name}"
        return command + (f"; {self.note}" if self.note else "")


# pyiqa (IQA-PyTorch) hosts its own checkpoints; the torchvision and timm backbones come from their usual places.
_ALEXNET_IMAGENET = TorchHubCheckpoint("https://download.pytorch.org/models/alexnet-owt-7be5be79.pth")
_RESNET50_TIMM = HubSnapshot("timm/resnet50.a1_in1k", "model.safetensors")

_FINE_TUNED = ("the paper's row is this model fine-tuned on the MIE-Bench training split (marked with an "
               "asterisk); this entry runs the library's released weights zero-shot")
_JUDGE = ("miescore judge (--backend openai for any OpenAI-compatible server serving it, --backend transformers for "
          "a transformers-native checkpoint), then miescore benchmark mie-bench --predictions")
_PER_SOURCE = "one source at a time, averaged over the sources, as the paper does for single-source methods"

BASELINES: dict[str, Baseline] = {b.name: b for b in (
    # ---------------------------------------------------------------- no-reference IQA (Table 3, heart rows)
    Baseline("diivine", "DIIVINE (Moorthy and Bovik 2011)", NO_REFERENCE,
             unavailable="no maintained Python implementation (not in pyiqa, piq or torchmetrics; the reference "
                         "code is MATLAB), and this package does not write metrics itself"),
    Baseline("brisque", "BRISQUE (Mittal, Moorthy, and Bovik 2011)", NO_REFERENCE, "pyiqa", "brisque",
             lower_better=True, weights=(PyiqaWeights("brisque_arch", "url"),),
             note="pyiqa's BRISQUE (its 'original' version: the SVM parameters of the authors' release) on the "
                  "luma channel"),
    Baseline("cnniqa", "CNNIQA (Kang et al. 2014), fine-tuned", NO_REFERENCE, "pyiqa", "cnniqa",
             weights=(PyiqaWeights("cnniqa_arch", "koniq10k"),), note=_FINE_TUNED + " (KonIQ-10k)"),
    Baseline("hyperiqa", "HyperIQA (Su et al. 2020), fine-tuned", NO_REFERENCE, "pyiqa", "hyperiqa",
             weights=(PyiqaWeights("hypernet_arch", "resnet50-koniq"), _RESNET50_TIMM),
             note=_FINE_TUNED + " (KonIQ-10k); pyiqa builds the ImageNet ResNet-50 before loading them"),
    Baseline("topiq", "TOPIQ (Chen et al. 2024), fine-tuned", NO_REFERENCE, "pyiqa", "topiq_nr",
             weights=(PyiqaWeights("topiq_arch", "cfanet_nr_koniq_res50"),),
             # the TOPIQ checkpoint holds its ResNet-50 too (pyiqa loads it strictly), so no ImageNet download
             options={"backbone_pretrain": False}, note=_FINE_TUNED + " (KonIQ-10k, ResNet-50)"),
    # ---------------------------------------------------------------- full-reference IQA (spade rows)
    Baseline("ssim", "SSIM (Wang et al. 2004)", FULL_REFERENCE, "pyiqa", "ssim", min_side=11,
             note="pyiqa's MATLAB-style SSIM: luma (Y of YIQ) rounded to 8 bits, 11x11 Gaussian window "
                  "(sigma 1.5), valid region, negative contrast-structure terms clipped to 0"),
    # MS-SSIM: 5 scales, each halving the image, and an 11-pixel window at the coarsest: ceil(side / 16) >= 11
    Baseline("ms_ssim", "MSSIM (Wang, Simoncelli, and Bovik 2003)", FULL_REFERENCE, "pyiqa", "ms_ssim",
             min_side=161, note="pyiqa's MS-SSIM (product form, weights 0.0448/0.2856/0.3001/0.2363/0.1333) "
                                "on the same luma channel as SSIM"),
    Baseline("scssim", "SCSSIM (Gu et al. 2012)", FULL_REFERENCE,
             unavailable="no maintained Python implementation (not in pyiqa, piq or torchmetrics), and this "
                         "package does not write metrics itself"),
    Baseline("lpips", "LPIPS (Zhang et al. 2018)", FULL_REFERENCE, "pyiqa", "lpips", lower_better=True,
             weights=(PyiqaWeights("lpips_arch", "0.1_alex"), _ALEXNET_IMAGENET),
             note="LPIPS v0.1 with the AlexNet backbone (the LPIPS default)"),
    Baseline("qalign", "Q-Align (Wu et al. 2023a), fine-tuned", NO_REFERENCE, "pyiqa", "qalign",
             weights=(HubSnapshot("q-future/one-align", "config.json"),),
             note=_FINE_TUNED + " (OneAlign, quality prompt); Q-Align takes one image, so it scores the edited "
                                "image alone although Table 3 groups the row with the full-reference metrics; "
                                "a 7B model: plan for a GPU"),
    # ---------------------------------------------------------------- vision-language (diamond rows)
    # Hessel et al. 2021 use CLIP ViT-B/32 and the prompt prefix "A photo depicts".
    Baseline("clipscore", "CLIPScore (Hessel et al. 2021)", TEXT_IMAGE, "torchmetrics", "CLIPScore",
             weights=(HubSnapshot("openai/clip-vit-base-patch32", "config.json"),),
             options={"prefix": "A photo depicts"},
             note="torchmetrics' CLIPScore on CLIP ViT-B/32: 100 * max(cos, 0) (Hessel et al. scale by 2.5, "
                  "which changes no correlation); the instruction is the caption"),
    Baseline("imagereward", "ImageReward (Xu et al. 2023)", TEXT_IMAGE,
             unavailable="its package (image-reward 1.5) pins timm==0.6.13 while pyiqa needs timm>=0.8"),
    Baseline("hpsv2", "HPSv2 (Wu et al. 2023b)", TEXT_IMAGE,
             unavailable="its package (hpsv2 1.2.0) pins pytest==7.2.0 and protobuf<4, which would replace this "
                         "project's test and serving dependencies"),
    Baseline("vqascore", "VQAScore (Li et al. 2024a)", TEXT_IMAGE,
             unavailable="its package (t2v-metrics 3.0) pins torch==2.5.1, transformers==4.49.0 and numpy==1.26.4 "
                         "and builds DeepSpeed from source"),
    # ---------------------------------------------------------------- general-purpose MLLMs (club rows)
    *(Baseline(name, row, MLLM_JUDGE, runs_via=_JUDGE) for name, row in (
        ("mplug_owl3", "mPLUG-Owl3 (7B) (Ye et al. 2024)"), ("minicpm_v2_6", "MiniCPM-V2.6 (8B) (Yao et al. 2024)"),
        ("ovis2_5", "Ovis2.5 (8B) (Lu et al. 2025)"), ("qwen3_vl", "Qwen3-VL (7B) (Yang et al. 2025a)"),
        ("internvl3_5", "InternVL3.5 (8B) (Wang et al. 2025b)"),
        ("deepseek_vl2", "DeepSeekVL2 (small) (Liu et al. 2024)"),
        ("gemini_3_1_pro", "Gemini-3.1-Pro (Google DeepMind 2026)"), ("chatgpt_5", "ChatGPT-5 (OpenAI 2025)"))),
    Baseline("deepseek_vl2_ft", "DeepSeekVL2 (small), fine-tuned (Liu et al. 2024)", FINE_TUNED_MLLM,
             unavailable="DeepSeek-VL2 is not a transformers model (docs/backbones.md, Table 5 row 7), so "
                         "train_miescore.py cannot fine-tune it"),
    Baseline("internvl3_5_ft", "InternVL3.5 (8B), fine-tuned (Chen et al. 2025b)", FINE_TUNED_MLLM,
             runs_via="python trainers/train_miescore.py --config trainers/configs/miescore_qwen3vl_8b.yaml "
                      "--model_name_or_path OpenGVLab/InternVL3_5-8B-HF (docs/backbones.md), then miescore benchmark "
                      "mie-bench --model", note="the MIEScore recipe on that backbone; the paper does not say how its "
                                               "fine-tuned comparison rows were trained"),
    # ---------------------------------------------------------------- IEQA-specialized MLLMs (star rows)
    Baseline("editscore", "EditScore (Qwen3) (Luo et al. 2025)", SINGLE_SOURCE,
             runs_via="--evaluator modeling_miescore.baselines.editscore_adapter:editscore --evaluator-option "
                      "model_name_or_path=Qwen/Qwen3-VL-8B-Instruct --evaluator-option "
                      "lora_path=EditScore/EditScore-Qwen3-VL-8B-Instruct (pip install editscore)",
             note=_PER_SOURCE),
    *(Baseline(name, row, SINGLE_SOURCE, runs_via=f"--evaluator your.module:function ({why})", note=_PER_SOURCE)
      for name, row, why in (
          ("lmm4edit", "LMM4Edit (Xu et al. 2025)", "no installable package: LMM4Edit releases a training repository; "
                                                    "wrap its model as evaluate(source, edited, instruction)"),
          ("editreward", "EditReward (MiMo) (Wu et al. 2025c)", "no installable package: EditReward's "
                                                              "EditRewardInferencer is imported from its repository"),
          ("edithf", "EditHF (Xu et al. 2026)", "no installable package: EditHF ships inference.py; wrap its "
                                               "infer_single as evaluate(source, edited, instruction)"))),
)}


def get_baseline(name: str) -> Baseline:
    """The entry called ``name``; :class:`UnknownBaselineError` naming the choices, or why it cannot run."""
    key = name.strip().lower()
    if key not in BASELINES:
        choices = ", ".join(b.name for b in BASELINES.values() if not (b.unavailable or b.runs_via))
        raise UnknownBaselineError(f"unknown metric '{name}'; choose from {choices} (see 'miescore baselines --list')")
    baseline = BASELINES[key]
    if baseline.unavailable:
        raise UnknownBaselineError(f"metric '{key}' ({baseline.paper_row}) cannot run here: {baseline.unavailable}")
    if baseline.runs_via:
        raise UnknownBaselineError(f"'{key}' ({baseline.paper_row}) is not a --metrics metric: it {baseline.how}")
    return baseline


def parse_baseline_names(text: str) -> list[Baseline]:
    """``"ssim,ms_ssim"`` -> their entries, in order, each once; one-line errors for unknown or unavailable ones."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise UnknownBaselineError("no metric given; pass e.g. --metrics ssim,ms_ssim")
    entries = []
    for name in names:
        baseline = get_baseline(name)
        if baseline not in entries:
            entries.append(baseline)
    return entries


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


__all__ = ["BASELINES", "Baseline", "HubSnapshot", "KINDS", "PyiqaWeights", "TorchHubCheckpoint",
           "UnknownBaselineError", "UnsafeWeightsError", "WeightsFile", "WeightsMissingError", "check_weights",
           "get_baseline", "locate", "parse_baseline_names", "require_library"]
