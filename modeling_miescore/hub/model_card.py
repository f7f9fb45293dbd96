"""Model cards (README.md) of MIEScore and SpatialReward checkpoints and of their LoRA adapters.

One renderer for every saved model folder: ``save_pretrained`` of both models (a card that states what the folder
is, how to use it and the papers' recipes, written only when the folder has no README.md yet), the MIEScore export
(``training.miescore_export``: merged checkpoint and adapter) and the SpatialReward recipes (SFT adapter and
``merged/``, GRPO output), which know the training data and settings and replace that generic card.
The metadata is ``huggingface_hub.ModelCardData`` (``library_name``, ``pipeline_tag``, ``license``, ``base_model``
and ``datasets`` as Hub repo ids -- never local paths --, ``tags``, ``metrics`` and a ``model-index`` whose metric
types are the same ids); every ``python`` block of a card runs as written once the placeholder repo id (or the
example image names) point at real files (tests/card_blocks.py checks this for every kind of card).

Hub file: copied into every checkpoint; imports only the standard library and huggingface_hub (a hard dependency
of transformers).
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .processing_miescore import load_checkpoint_processor, strip_auto_maps

# BibTeX from the papers' first pages. The MIEScore paper's text names neither authors nor an arXiv id, only the
# project page, so its entry is a @misc with that URL.
MIESCORE_BIBTEX = """@misc{miescore,
  title        = {MIEScore: Human-Aligned Evaluation for Multi-Source Image Editing},
  note         = {MIE-Bench dataset and MIEScore model},
  howpublished = {\\url{https://github.com/IntMeGroup/MIEScore}}
}"""
SPATIALREWARD_BIBTEX = """@misc{long2026spatialreward,
  title         = {SpatialReward: Bridging the Perception Gap in Online RL for Image Editing via Explicit Spatial
                   Reasoning},
  author        = {Long, Yancheng and Yang, Yankai and Wei, Hongyang and Chen, Wei and Zhang, Tianke and
                   Fan, Haonan and Liu, Changyi and Jiang, Kaiyu and Chen, Jiankang and Tang, Kaiyu and Wen, Bin and
                   Yang, Fan and Gao, Tingting and Li, Han and Yang, Shuo},
  year          = {2026},
  eprint        = {2602.07458},
  archivePrefix = {arXiv},
  url           = {https://arxiv.org/abs/2602.07458}
}"""

# The usage code names the Hub repository when it is known, else this placeholder (replace it with yours).
REPO_PLACEHOLDER = {"miescore": "your-username/miescore", "spatialreward": "your-username/spatialreward"}
ADAPTER_SUFFIX = "-lora"  # an adapter's placeholder repo id: the model's placeholder + this
BASE_PLACEHOLDER = "your-username/base-model"
# Example inputs of the usage code (files in the working directory).
EXAMPLE_SOURCES = ("source_1.png", "source_2.png")
EXAMPLE_EDITED = "edited.png"
EXAMPLE_INSTRUCTION = "Put the cat from the second image on the sofa in the first image"
# The file beside an adapter that holds the run's config overrides of the base (skill, image budget, ...).
BASE_CONFIG_OVERRIDES = "base_config_overrides.json"
# Metric ids (https://hf.co/metrics) of MIEScore's correlations; the card's `metrics` list and the model-index use
# the same ids. The trainer logs them as eval_srcc_<dim> / eval_plcc_<dim>.
CORRELATION_METRICS = {"srcc": ("spearmanr", "SRCC"), "plcc": ("pearsonr", "PLCC")}
MIESCORE_DIMENSIONS = (("vq", "visual quality"), ("if", "instruction following"), ("ap", "attribute preservation"))
# No Hub task means "scores an image edit"; both models read images and text, SpatialReward answers in text.
PIPELINE_TAG = "image-text-to-text"

_DESCRIPTION = {
    "miescore": (
        "A MIEScore evaluator for multi-source image editing (several source images + an instruction -> one edited "
        "image): a Qwen3-VL backbone with a 3-output regression head.\n\n"
        "**Score scale.** Visual quality (VQ), instruction following (IF) and attribute preservation (AP) on the "
        "0-100 MOS scale of MIE-Bench (sigmoid outputs times `config.score_scale`), and `overall` = VQ^0.3 * "
        "IF^0.4 * AP^0.3 (MIEScore paper, eq. 2; the weights are `config.overall_weights`)."),
    "spatialreward": (
        "A SpatialReward judge for image edits (arXiv 2602.07458): a Qwen3-VL model that localises the edited "
        "regions, reasons about them with grounding tokens (`<|bbox_i|>`, `<|global|>`) and scores the edit.\n\n"
        "**Score scale.** Four sub-scores on 0-25 (instruction following and consistency from the semantic-"
        "consistency stream, naturalness and artifacts from the perceptual-quality stream) and the reward "
        "(SC/25)^0.8 * (PQ/25)^0.2 in [0, 1], with SC = 0.6 s_if + 0.4 s_con and PQ = 0.5 s_nat + 0.5 s_art "
        "(paper sec. 3.1 / 5.4; the values are in the config). An output that cannot be parsed gets "
        "`config.failure_reward` and is flagged (`failed`)."),
}
_PAPER_RECIPE = {
    "miescore": (
        "The paper's recipe (MIEScore paper, \"Multi-Dimensional Supervised Fine-Tuning\"): MIE-Bench MOS labels "
        "(15 raters per edit, BT.500-screened), LoRA r = 64 / alpha = 32 on the language model and the head trained "
        "in full, loss lambda_h Huber + lambda_r rank + lambda_p (1 - PLCC) with cross-batch memory queues."),
    "spatialreward": (
        "The paper's recipe (arXiv 2602.07458, sec. 3.3-3.4, appendix B.1): supervised fine-tuning on 260k "
        "(boxes, grounded reasoning, scores) targets (LoRA r = 32 / alpha = 64, lr 1e-4, 10 epochs), then GRPO "
        "against an oracle judge (G = 4, lr 5e-7, beta 0.02)."),
}


@dataclass
class ModelCardInfo:
    """What a model card states besides the model kind.

    ``base_model`` and ``datasets`` must be Hub repo ids (use :func:`hub_repo_id` on a name that may be a local
    path); ``metrics`` holds eval metrics as the trainer logs them (``eval_srcc_vq``, ...). For adapters,
    ``adapter_base`` is what the usage code loads as the base (a repo id), ``base_is_backbone`` says it is a plain
    Qwen3-VL (MIEScore: the scorer is built on it) and ``resized_vocabulary`` is the trained embedding size when
    the run grew it (SpatialReward's grounding tokens). ``base_path`` and ``adapter_folder`` are the local folders
    a run read its base from and wrote the adapter to (never in the metadata): a card that is not pushed
    (``repo_id`` None) loads them when there is no Hub id, so its code runs as written on the machine that trained
    it, and says to replace them before pushing; otherwise the placeholders stand in.
    """

    model_name: str | None = None
    repo_id: str | None = None
    base_model: str | None = None
    datasets: list[str] = field(default_factory=list)
    training_data: str = ""
    dataset_split_sizes: dict[str, int] = field(default_factory=dict)
    training_procedure: str = ""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    eval_split: str = "validation"
    metrics: dict[str, float] = field(default_factory=dict)
    license: str = "apache-2.0"
    tags: list[str] = field(default_factory=list)
    notes: str = ""
    adapter_base: str | None = None
    base_is_backbone: bool = False
    resized_vocabulary: int | None = None
    base_path: str | None = None
    adapter_folder: str | None = None


def hub_repo_id(name: str | os.PathLike | None) -> str | None:
    """``name`` when it is a Hub repo id (``org/name`` or ``name``), None for local paths and anything else."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if not name or not isinstance(name, str) or os.path.exists(name):
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return name


def _correlations(info: ModelCardInfo):
    """``(metric id, label, dimension label, value)`` for every finite SRCC/PLCC in ``info.metrics``."""
    found = []
    for dim, label in MIESCORE_DIMENSIONS:
        for key, (metric_id, short) in CORRELATION_METRICS.items():
            value = info.metrics.get(f"eval_{key}_{dim}", info.metrics.get(f"{key}_{dim}"))
            if value is not None and math.isfinite(float(value)):
                found.append((metric_id, short, label, float(value)))
    return found


def card_metadata(kind: str, info: ModelCardInfo, adapter: bool = False):
    """``huggingface_hub.ModelCardData`` of a card (the YAML header)."""
    from huggingface_hub import EvalResult, ModelCardData

    correlations = _correlations(info) if kind == "miescore" else []
    datasets = [d for d in info.datasets if hub_repo_id(d)]
    results = []
    if correlations and datasets:  # a model-index needs the dataset's Hub id
        results = [EvalResult(task_type=PIPELINE_TAG, task_name="Multi-source image edit assessment",
                              dataset_type=datasets[0], dataset_name=datasets[0],
                              dataset_split=info.eval_split, metric_type=metric_id, metric_value=round(value, 4),
                              metric_name=f"{short} ({label})") for metric_id, short, label, value in correlations]
    kind_tags = {"miescore": ["miescore", "image-quality-assessment"], "spatialreward": ["spatialreward"]}[kind]
    tags = list(dict.fromkeys([*kind_tags, "image-editing", "reward-model", "multi-image", "custom_code",
                               *info.tags, *(["lora", "peft"] if adapter else [])]))
    base_model = hub_repo_id(info.base_model)
    if adapter and base_model:
        tags.append(f"base_model:adapter:{base_model}")
    return ModelCardData(
        license=info.license, library_name="peft" if adapter else "transformers", pipeline_tag=PIPELINE_TAG,
        base_model=base_model, datasets=datasets or None,
        tags=tags, metrics=sorted({m for m, *_ in correlations}) or None,
        model_name=_title(kind, info) if results else None, eval_results=results or None)


def _title(kind: str, info: ModelCardInfo) -> str:
    return info.model_name or {"miescore": "MIEScore", "spatialreward": "SpatialReward"}[kind]


def _code(*lines: str) -> list[str]:
    return ["```python", *lines, "```"]


def _py(value) -> str:
    """A str or list of str as Python source with double quotes (as in the rest of the code blocks)."""
    return json.dumps(value)


def _example_call() -> str:
    return f"{_py(list(EXAMPLE_SOURCES))}, {_py(EXAMPLE_EDITED)},\n    {_py(EXAMPLE_INSTRUCTION)}"


def _usage_lines(kind: str, info: ModelCardInfo) -> list[str]:
    repo = info.repo_id or REPO_PLACEHOLDER[kind]
    sample = (f'{{"sources": {_py(list(EXAMPLE_SOURCES))}, "edited": {_py(EXAMPLE_EDITED)},\n'
              f'         "instruction": {_py(EXAMPLE_INSTRUCTION)}}}')
    if kind == "miescore":
        load = _code("from transformers import AutoModel", "",
                     f"model = AutoModel.from_pretrained({_py(repo)}, trust_remote_code=True)",
                     f"scores = model.score({_example_call()})",
                     "print(scores)  # {'visual_quality': ..., 'instruction_following': ..., "
                     "'attribute_preservation': ..., 'overall': ...}, 0-100")
        returned = "the same score dicts"
    else:
        load = _code("from transformers import AutoModelForImageTextToText", "",
                     f"judge = AutoModelForImageTextToText.from_pretrained({_py(repo)}, trust_remote_code=True)",
                     f"result = judge.evaluate_edit({_example_call()})",
                     "print(result.reward, result.s_if, result.s_con, result.s_nat, result.s_art)",
                     "print(result.regions)  # [{'id', 'label', 'bbox_2d' (0-1000), 'bbox_pixels'}]")
        returned = "the judgements as dicts (reward, sub-scores, regions, reasoning; no raw text)"
    batched = _code("from transformers import pipeline", "",
                    f'scorer = pipeline("image-edit-scoring", model={_py(repo)}, trust_remote_code=True)',
                    f"print(scorer([{sample}], batch_size=8))")
    return [*load, "", f"Many edits at once: the `image-edit-scoring` pipeline (shipped in this folder) returns "
            f"{returned}, batched by the model:", "", *batched, "",
            "Images may be paths, PIL images or numpy arrays; one source image may be given bare."]


def _adapter_names(kind: str, info: ModelCardInfo) -> tuple[str, str, list[str]]:
    """``(ADAPTER, BASE, [the names that are local folders])`` of an adapter card's code (see ModelCardInfo)."""
    unpushed = info.repo_id is None
    repo = info.repo_id or (unpushed and info.adapter_folder) or REPO_PLACEHOLDER[kind] + ADAPTER_SUFFIX
    base = (info.adapter_base or hub_repo_id(info.base_model) or (unpushed and info.base_path)
            or BASE_PLACEHOLDER)
    local = [n for n, v in (("ADAPTER", repo), ("BASE", base)) if v in (info.adapter_folder, info.base_path)]
    return repo, base, local


def _adapter_usage_lines(kind: str, info: ModelCardInfo) -> list[str]:
    repo, base, local = _adapter_names(kind, info)
    module, name = {"miescore": ("modeling_miescore", "MIEScoreModel"),
                    "spatialreward": ("modeling_spatialreward", "SpatialRewardModel")}[kind]
    mark = "  # a folder on the machine that trained: replace it by the Hub repo id before pushing"
    head = ["import json", "from pathlib import Path", "", "from peft import PeftModel",
            "from transformers import AutoProcessor",
            "from transformers.dynamic_module_utils import get_class_from_dynamic_module",
            "from transformers.utils import cached_file", "",
            f"ADAPTER = {_py(repo)}" + (mark if "ADAPTER" in local else ""),
            f"BASE = {_py(base)}" + (mark if "BASE" in local else ""),
            "# the run's config overrides of the base (image budget, rubric, ...) are saved beside the adapter",
            f"overrides = json.loads(Path(cached_file(ADAPTER, {_py(BASE_CONFIG_OVERRIDES)})).read_text())",
            f"{name} = get_class_from_dynamic_module({_py(module + '.' + name)}, ADAPTER)",
            "processor = AutoProcessor.from_pretrained(ADAPTER, trust_remote_code=False)  # stock, runs nothing"]
    build = "from_backbone" if kind == "miescore" and info.base_is_backbone else "from_pretrained"
    body = [f"base = {name}.{build}(BASE, **overrides)"]
    if info.resized_vocabulary:
        body.append(f"base.resize_token_embeddings({info.resized_vocabulary})  # the run added the grounding tokens")
    variable = "model" if kind == "miescore" else "judge"
    body += [f"{variable} = PeftModel.from_pretrained(base, ADAPTER).merge_and_unload()",
             f"{variable}.processor = processor"]
    call = ([f"print(model.score({_example_call()}))"] if kind == "miescore" else
            [f"result = judge.evaluate_edit({_example_call()})", "print(result.reward, result.regions)"])
    what = {"miescore": "the LoRA weights and the regression head in full",
            "spatialreward": "the LoRA weights" + (" and the resized embedding and output matrices in full"
                                                   if info.resized_vocabulary else "")}[kind]
    return [f"This folder is a PEFT LoRA adapter ({what}), with the processor of the run, the run's config overrides "
            f"(`{BASE_CONFIG_OVERRIDES}`) and the model code. Load the base with the class shipped here, apply "
            "the overrides, then the adapter (`AutoPeftModel` cannot import the remote class):", "",
            *_code(*head, *body, *call), "",
            *_local_folders_note(local),
            "The merged checkpoint of the same run gives the same results without PEFT."]


def _local_folders_note(local: list[str]) -> list[str]:
    """The sentence under an adapter card's code when it names local folders (``["ADAPTER", "BASE"]`` or one)."""
    if not local:
        return []
    names = " and ".join(f"`{n}`" for n in local)
    return [f"{names} point at the folders of the run that wrote this card, so the code runs as written on the "
            "machine that trained it. Before pushing the adapter to the Hub, replace them with Hub repo ids (for "
            "the base, `--base_model_id` at training time writes it here).", ""]


def _table(rows: dict[str, Any]) -> list[str]:
    def cell(value: Any) -> str:
        if isinstance(value, float):
            text = f"{value:.6g}"
        elif isinstance(value, (dict, list, tuple)):
            text = "`" + json.dumps(value) + "`"
        else:
            text = f"`{value}`" if isinstance(value, str) else str(value)
        return text.replace("|", "\\|").replace("\n", " ")

    return ["| parameter | value |", "|---|---|", *[f"| {key} | {cell(value)} |" for key, value in rows.items()]]


def _training_lines(kind: str, info: ModelCardInfo) -> list[str]:
    lines = ["## Training data", ""]
    if info.training_data or info.datasets:
        names = ", ".join(f"[`{d}`](https://huggingface.co/datasets/{d})" for d in info.datasets if hub_repo_id(d))
        lines.append(" ".join(filter(None, [f"Dataset: {names}." if names else "", info.training_data])))
    else:
        lines.append("`save_pretrained` does not record how these weights were trained. " + _PAPER_RECIPE[kind])
    if info.dataset_split_sizes:
        lines += ["", "| split | rows |", "|---|---|", *[f"| {s} | {n} |" for s, n in info.dataset_split_sizes.items()]]
    if info.training_procedure or info.hyperparameters:
        lines += ["", "## Training procedure", ""]
        lines += [info.training_procedure, ""] if info.training_procedure else []
        lines += _table(info.hyperparameters) if info.hyperparameters else []
    return lines


def _evaluation_lines(kind: str, info: ModelCardInfo) -> list[str]:
    if not info.metrics:
        return []
    lines = ["", f"## Evaluation ({info.eval_split} split)", ""]
    found = {(short, label): value for _, short, label, value in _correlations(info)} if kind == "miescore" else {}
    if found:
        lines += ["| dimension | SRCC | PLCC |", "|---|---|---|"]
        for _, label in MIESCORE_DIMENSIONS:
            cells = [f"{found[(short, label)]:.4g}" if (short, label) in found else "-" for short in ("SRCC", "PLCC")]
            lines.append(f"| {label} | {' | '.join(cells)} |")
    others = {k: v for k, v in info.metrics.items()
              if isinstance(v, (int, float)) and "srcc_" not in k and "plcc_" not in k}
    if others:
        lines += ["", "Other metrics: " + ", ".join(f"{k} = {float(v):.6g}" for k, v in others.items())]
    return lines


def render_model_card(kind: str, info: ModelCardInfo | None = None, adapter: bool = False) -> str:
    """The README.md of a ``kind`` ("miescore" or "spatialreward") checkpoint, or of its adapter."""
    from huggingface_hub import ModelCard

    if kind not in REPO_PLACEHOLDER:
        raise ValueError(f"kind must be 'miescore' or 'spatialreward', got {kind!r}")
    info = info or ModelCardInfo()
    usage = _adapter_usage_lines(kind, info) if adapter else _usage_lines(kind, info)
    lines = [f"# {_title(kind, info)}", "", _DESCRIPTION[kind], "", "## Usage", "", *usage, "",
             *_training_lines(kind, info), *_evaluation_lines(kind, info)]
    lines += ["", "## Notes", "", info.notes] if info.notes else []
    lines += ["", "## Citation", "", "```bibtex", MIESCORE_BIBTEX, "", SPATIALREWARD_BIBTEX, "```", ""]
    metadata = card_metadata(kind, info, adapter).to_yaml()
    return str(ModelCard(f"---\n{metadata}\n---\n\n" + "\n".join(lines)))


def write_model_card(folder: str | os.PathLike, text: str) -> Path:
    """Write ``folder/README.md`` (through a temporary file, so a reader never sees half a card)."""
    path = Path(folder) / "README.md"
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return path


def save_default_model_card(model, folder: str | os.PathLike) -> Path | None:
    """What ``save_pretrained`` writes: a card for the folder unless it already has a README.md.

    The rule: ``save_pretrained`` never replaces a README.md. A trainer (which knows the data and settings)
    writes its card after saving and replaces the generic one; a card already in the folder (a trainer's, or
    one written by hand) is kept when the model is saved there again.
    """
    if (Path(folder) / "README.md").exists():
        return None
    config = model.config
    kind = config.model_type
    base = getattr(config.backbone_config if kind == "miescore" else config, "_name_or_path", None)
    return write_model_card(folder, render_model_card(kind, ModelCardInfo(base_model=hub_repo_id(base))))


class CheckpointModel:
    """What both models add to their transformers class: the stock processor saved beside the weights and a
    ``save_pretrained`` that writes the whole checkpoint folder."""

    checkpoint_auto_map: dict | None = None  # ``auto_map`` entries beside those ``register_for_auto_class`` adds

    @property
    def is_gradient_checkpointing(self) -> bool:
        """Whether activation checkpointing is on. transformers 5 deprecates this name with a FutureWarning, but
        peft (``get_peft_model``, ``PeftModel.from_pretrained``) and TRL still read it on every LoRA run: answered
        here without the warning (``is_activation_checkpointing`` is the current name)."""
        return self.is_activation_checkpointing

    def get_processor(self):
        """The processor used for scoring; loaded from the checkpoint folder the first time."""
        if self.processor is None:
            self.processor = load_checkpoint_processor(self.config.name_or_path)
        return self.processor

    def save_pretrained(self, save_directory, *args, **kwargs):
        """Weights (safetensors), the config with ``auto_map`` and ``custom_pipelines`` (the
        ``image-edit-scoring`` pipeline) and the model code; then, on the main process, the stock processor (its
        files naming no code: every ``auto_map`` stripped) and the default card (:func:`save_default_model_card`)."""
        from .pipeline_miescore import CUSTOM_PIPELINES  # deferred: loads transformers

        self.config.custom_pipelines = copy.deepcopy(CUSTOM_PIPELINES)
        if self.checkpoint_auto_map:
            self.config.auto_map = {**(getattr(self.config, "auto_map", None) or {}), **self.checkpoint_auto_map}
        super().save_pretrained(save_directory, *args, **kwargs)
        if kwargs.get("is_main_process", True):
            if self.processor is not None:
                self.processor.save_pretrained(save_directory)
                strip_auto_maps(save_directory)
            save_default_model_card(self, save_directory)


__all__ = ["ADAPTER_SUFFIX", "BASE_CONFIG_OVERRIDES", "BASE_PLACEHOLDER", "CheckpointModel", "MIESCORE_BIBTEX",
           "ModelCardInfo", "REPO_PLACEHOLDER", "SPATIALREWARD_BIBTEX", "card_metadata", "hub_repo_id",
           "render_model_card", "save_default_model_card", "write_model_card"]
