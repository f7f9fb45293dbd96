"""SpatialReward training data: raw rows -> checked chat examples for TRL's SFTTrainer and GRPOTrainer
(arXiv 2602.07458, sec. 3.3-3.4, appendix B.1, D.1, D.2.3). Loading rows and models for the recipes is in
:mod:`.spatialreward_recipe`; a small synthetic set of rows in this schema, for tests, is
:mod:`modeling_miescore.testing.spatialreward_fixture`.

Training-row schema (one row = one pass; a Hub dataset, a list of dicts or a ``datasets.Dataset``)::

    task         "sc" | "pq"
    sources      list of images         SC: the N >= 1 source images, in order; PQ: [] (ignored)
    edited       image                  the edited image
    instruction  str                    SC: the editing instruction; PQ: "" (ignored)
    regions      list of {"id": int, "label": str, "bbox_2d": [x1, y1, x2, y2]}
                                        SC: edited regions, boxes in [0, 1000] (D.1.1); [] for a failed edit.
                                        PQ: [] (sec. 3.2: "B = empty set")
    reasoning    str                    the rationale; SC interleaves <|bbox_i|> / <|global|> (sec. 3.2)
    scores       [float, float]         SC: [s_if, s_con]; PQ: [naturalness, artifacts]; each in [0, 25]

Images may be PIL images, file paths or ``{"bytes": ..., "path": ...}`` dicts (undecoded ``datasets.Image``).
Other columns are ignored.

Each row becomes the paper's input contract: one user turn with the images first (SC: sources then edited;
PQ: edited only) followed by the D.1 prompt text from the model's ``SpatialRewardConfig`` (D.1.1 for one source,
D.1.2 for several, D.1.3 for PQ), and one assistant turn holding the target JSON
``{"edit_region": [...], "reasoning": "...", "score": [a, b]}`` (PQ without ``edit_region``), i.e. Y = (B, T, s).

Interleaving check (D.2.3 "Complete Coverage", the rules the paper's data pipeline enforces). A row is dropped,
with a reason, when its target JSON parsed back with :func:`parse_sc_output` / :func:`parse_pq_output` shows
any grounding issue or does not round-trip its scores: for a single-source SC row exactly one ``<|global|>``;
for every SC row one ``<|bbox_i|>`` per region, no token without a region, ids <= 15, valid boxes; no grounding
tokens in PQ. Multi-source SC rows may omit ``<|global|>`` (D.1.2 does not ask for it) but not repeat it.
Rows with missing fields, no images or scores outside [0, 25] are dropped the same way. The reasons are
counted in a :class:`DropReport`, logged and returned; nothing is silently discarded.

Length: images are downscaled to ``max_pixels`` (aspect ratio kept) instead of truncating token sequences
(truncation inside image tokens breaks Qwen3-VL, and a truncated target teaches broken JSON). Rows still
longer than ``max_seq_tokens`` (estimated from the tokenizer and the Qwen3-VL patch geometry) are dropped
and counted.
"""

from __future__ import annotations

import io
import json
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..hub.spatialreward_parsing import GROUNDING_ISSUES, parse_pq_output, parse_sc_output
from ..hub.processing_miescore import num_image_tokens
from ..utils.text_hygiene import training_text_problem
from ..hub.image_io import load_image, open_image_bytes, resize_to_budget

logger = logging.getLogger(__name__)

__all__ = [
    "DropReport",
    "check_row",
    "control_token_problem",
    "target_text",
    "prompt_messages",
    "to_sft_example",
    "to_grpo_example",
    "prepare_sft_dataset",
    "prepare_grpo_dataset",
    "estimate_num_tokens",
    "default_prompt_config",
    "processor_pixel_range",
    "set_pixel_range",
    "SCORE_MAX",
]

SCORE_MAX = 25.0  # D.1: every sub-score is "from scale 0 to 25"
_TEMPLATE_OVERHEAD = 16  # <|im_start|>user / assistant / <|im_end|> markers around the two turns


@dataclass
class DropReport:
    """What the preparation kept and dropped. ``reasons``: issue code -> number of rows dropped for it."""

    total: int = 0
    kept: int = 0
    reasons: Dict[str, int] = field(default_factory=dict)
    examples: Dict[str, List[str]] = field(default_factory=dict)  # reason -> up to 5 row ids / indices

    @property
    def dropped(self) -> int:
        return self.total - self.kept

    def as_dict(self) -> Dict[str, Any]:
        return {"total": self.total, "kept": self.kept, "dropped": self.dropped, "reasons": dict(self.reasons),
                "examples": {k: list(v) for k, v in self.examples.items()}}

    def log(self, what: str = "SpatialReward data") -> None:
        if self.dropped:
            logger.warning("%s: dropped %d of %d rows: %s (examples: %s)", what, self.dropped, self.total,
                           self.reasons, self.examples)
        else:
            logger.info("%s: kept all %d rows", what, self.total)


def default_prompt_config():
    """The default :class:`SpatialRewardConfig` (holds the D.1 prompts) for base models that are plain Qwen3-VL."""
    from ..hub.configuration_spatialreward import SpatialRewardConfig  # deferred: loads transformers

    return SpatialRewardConfig()


def _prompt_config(model_or_config=None):
    """Anything with ``sc_text``/``pq_text``: a SpatialRewardConfig, or a model whose config is one."""
    if model_or_config is None:
        return default_prompt_config()
    cfg = getattr(model_or_config, "config", model_or_config)
    if hasattr(cfg, "sc_text") and hasattr(cfg, "pq_text"):
        return cfg
    return default_prompt_config()  # a plain Qwen3-VL base (e.g. Qwen3-VL-8B-Instruct, B.1.1)


# ---------------------------------------------------------------------------------------------------------------
# Row checks
# ---------------------------------------------------------------------------------------------------------------

def _number(x: float):
    x = float(x)
    return int(x) if x.is_integer() else x


def target_text(row: Dict[str, Any]) -> str:
    """The assistant's target JSON for a row (D.1 output format; keys in the paper's order)."""
    scores = [_number(s) for s in row["scores"]]
    if str(row["task"]).lower() == "pq":
        return json.dumps({"reasoning": row["reasoning"], "score": scores}, ensure_ascii=False)
    regions = [{"id": int(r["id"]), "label": r.get("label", ""), "bbox_2d": [_number(v) for v in r["bbox_2d"]]}
               for r in (row.get("regions") or [])]
    return json.dumps({"edit_region": regions, "reasoning": row["reasoning"], "score": scores}, ensure_ascii=False)


def _valid_scores(scores: Any) -> bool:
    if not isinstance(scores, (list, tuple)) or len(scores) != 2:
        return False
    for s in scores:
        if isinstance(s, bool) or not isinstance(s, (int, float)):
            return False
        try:
            value = float(s)
        except OverflowError:  # an integer too large for a float
            return False
        if not math.isfinite(value) or not 0.0 <= value <= SCORE_MAX:
            return False
    return True


def control_token_problem(row: Dict[str, Any]) -> Optional[str]:
    """The first chat-control token or control character in the row's texts (reasoning, instruction, region
    labels; :func:`modeling_miescore.utils.text_hygiene.training_text_problem`), else None."""
    labels = [r.get("label") for r in (row.get("regions") or []) if isinstance(r, dict)]
    for name, text in [("reasoning", row.get("reasoning")), ("instruction", row.get("instruction")),
                       *(("region label", label) for label in labels)]:
        problem = training_text_problem(text)
        if problem:
            return f"{name} {problem}"
    return None


def _input_issues(row: Dict[str, Any], task: str) -> List[str]:
    """What makes the inputs of a row of ``task`` unusable (the edited image; SC: sources and instruction)."""
    issues = [] if row.get("edited") is not None else ["no_edited_image"]
    if task == "sc" and not row.get("sources"):
        issues.append("no_sources")
    if task == "sc" and not (isinstance(row.get("instruction"), str) and row["instruction"].strip()):
        issues.append("missing_field:instruction")
    return issues


def check_row(row: Dict[str, Any]) -> Tuple[Optional[str], List[str]]:
    """Validate one training row. Returns ``(reason, issues)``: reason None when the row is usable, else the
    first problem's code; ``issues`` lists every code found (parser issue codes, see
    ``spatialreward_parsing.ISSUE_CODES``, plus ``bad_task``, ``missing_field:<name>``, ``no_sources``,
    ``no_edited_image``, ``bad_scores``,
    ``scores_roundtrip`` and ``control_token``: a chat-control token such as ``<|im_end|>`` or a NUL in the
    reasoning, instruction or a region label, which the tokenizer would turn into the real control token)."""
    task = str(row.get("task", "")).lower()
    if task not in ("sc", "pq"):
        return "bad_task", ["bad_task"]
    issues = [f"missing_field:{name}" for name in ("reasoning", "scores") if row.get(name) is None]
    issues += _input_issues(row, task)
    if task == "sc" and row.get("regions") is None:
        issues.append("missing_field:regions")
    if issues:
        return issues[0], issues
    if not isinstance(row["reasoning"], str):
        return "missing_field:reasoning", ["missing_field:reasoning"]
    if control_token_problem(row):
        return "control_token", ["control_token"]
    if not _valid_scores(row["scores"]):
        return "bad_scores", ["bad_scores"]
    try:
        text = target_text(row)
    except (KeyError, TypeError, ValueError):
        return "region_invalid", ["region_invalid"]
    if task == "sc":
        parsed = parse_sc_output(text, num_sources=len(row["sources"]))
        if len(parsed.regions) != len(row.get("regions") or []):
            issues.append("region_invalid")
    else:
        parsed = parse_pq_output(text)
    issues += [code for code in parsed.issues if code in GROUNDING_ISSUES and code not in issues]
    if not parsed.parse_ok or parsed.score_source != "json":
        issues += [code for code in parsed.issues if code not in issues] or ["scores_roundtrip"]
    elif [float(s) for s in parsed.score_pair] != [float(s) for s in row["scores"]]:
        issues.append("scores_roundtrip")
    return (issues[0] if issues else None), issues


# ---------------------------------------------------------------------------------------------------------------
# Images and lengths
# ---------------------------------------------------------------------------------------------------------------

def _to_pil(image: Any, max_pixels: Optional[int]):
    """Any accepted image form -> upright RGB PIL image within ``max_pixels``; ``info["source_format"]`` keeps
    the original encoding (JPEG, PNG, ...) so that storage can keep lossy sources lossy."""
    # the aspect ratio is checked later, as its own drop reason (extreme_aspect_ratio)
    unlimited = {"max_aspect_ratio": None}
    if isinstance(image, dict):
        if image.get("bytes"):
            # Bytes are decoded by Pillow (never unpickled), in the allowed formats only (image_io); load_image
            # checks the size before decoding pixels.
            opened = open_image_bytes(image["bytes"], "dataset image")
            source_format, image = opened.format, load_image(opened, **unlimited)
        elif image.get("path"):
            image = load_image(image["path"], **unlimited)
            source_format = None
        else:
            raise ValueError("an image dict needs 'bytes' or 'path'")
    else:
        source_format = getattr(image, "format", None)
        image = load_image(image, **unlimited)
    if max_pixels:
        image = resize_to_budget(image, max_pixels)
    image.info["source_format"] = source_format or image.info.get("source_format")
    return image


def _encoded(image) -> Dict[str, Any]:
    """Image bytes for the Arrow cache: JPEG (quality 95) for lossy sources, PNG otherwise. Without this, every
    converted image would be re-encoded as PNG, several times the size of a JPEG training set on disk."""
    buffer = io.BytesIO()
    if image.info.get("source_format") in ("JPEG", "MPO", "WEBP"):
        image.save(buffer, format="JPEG", quality=95)
    else:
        image.save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def processor_pixel_range(processor) -> Tuple[int, int]:
    """``(min_pixels, max_pixels)`` the processor resizes images into (Qwen3-VL defaults when it says nothing)."""
    size = getattr(getattr(processor, "image_processor", None), "size", None)
    lo = getattr(size, "shortest_edge", None) if size is not None else None
    hi = getattr(size, "longest_edge", None) if size is not None else None
    if isinstance(size, dict):
        lo, hi = size.get("shortest_edge"), size.get("longest_edge")
    return int(lo or 65_536), int(hi or 16_777_216)


def estimate_num_tokens(example: Dict[str, Any], processor=None) -> int:
    """Estimated sequence length of a prepared example (``messages`` + ``images``).

    Text: the tokenizer's count when ``processor`` (or a tokenizer) is given, else characters / 3. Images:
    :func:`~modeling_miescore.hub.processing_miescore.num_image_tokens` (transformers' Qwen-VL resize rule) within
    the processor's pixel range, plus the two vision start/end markers. Raises ValueError for an image whose
    aspect ratio the processor rejects (above 200).
    """
    texts = [part.get("text") or "" for message in example["messages"] for part in message["content"]
             if part.get("type") == "text"]
    text = "\n".join(texts)
    tokenizer = getattr(processor, "tokenizer", processor)
    if tokenizer is not None and callable(tokenizer):
        n_text = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    else:
        n_text = len(text) // 3
    lo, hi = processor_pixel_range(processor)
    # + 2: <|vision_start|> / <|vision_end|> around each image's tokens
    n_images = sum(num_image_tokens(im.width, im.height, min_pixels=lo, max_pixels=hi) + 2
                   for im in example["images"])
    return n_text + n_images + _TEMPLATE_OVERHEAD


# ---------------------------------------------------------------------------------------------------------------
# Examples
# ---------------------------------------------------------------------------------------------------------------

def prompt_messages(task: str, num_sources: int, instruction: str, prompt_config=None) -> List[dict]:
    """The user turn (as a one-message list) with ``{"type": "image"}`` placeholders, filled by TRL from the
    ``images`` column: SC = N sources + edited image + D.1.1/D.1.2 text; PQ = edited image + D.1.3 text.

    Built by the model's own ``sc_messages`` / ``pq_messages``, so training sees exactly the inference layout.
    """
    from ..hub.modeling_spatialreward import pq_messages, sc_messages  # deferred: loads torch, transformers

    cfg = _prompt_config(prompt_config)
    messages = sc_messages(cfg, num_sources, instruction) if task == "sc" else pq_messages(cfg)
    # Every content part gets the same keys so that Arrow stores the list as one struct type.
    return [{"role": m["role"], "content": [{"type": p["type"], "text": p.get("text")} for p in m["content"]]}
            for m in messages]


def set_pixel_range(processor, min_pixels: Optional[int] = None, max_pixels: Optional[int] = None) -> None:
    """Make the processor resize every image into [min_pixels, max_pixels] (Qwen3-VL ``size`` semantics), for
    collators that cannot pass ``size=`` per call (TRL). None keeps the processor's current bound."""
    image_processor = getattr(processor, "image_processor", None)
    if image_processor is None:
        raise ValueError("set_pixel_range needs a processor with an image_processor (e.g. Qwen3VLProcessor)")
    lo, hi = processor_pixel_range(processor)
    lo, hi = int(min_pixels or lo), int(max_pixels or hi)
    if not 0 < lo <= hi:
        raise ValueError(f"need 0 < min_pixels <= max_pixels, got {lo} and {hi}")
    image_processor.size = {"shortest_edge": lo, "longest_edge": hi}


def _images(row: Dict[str, Any], task: str, max_pixels: Optional[int]) -> list:
    images = [_to_pil(im, max_pixels) for im in row["sources"]] if task == "sc" else []
    images.append(_to_pil(row["edited"], max_pixels))
    return images


def to_sft_example(row: Dict[str, Any], prompt_config=None, max_pixels: Optional[int] = None) -> Dict[str, Any]:
    """``{"messages": [user, assistant], "images": [...]}`` for one valid row (run :func:`check_row` first)."""
    task = str(row["task"]).lower()
    num_sources = len(row["sources"]) if task == "sc" else 0
    messages = prompt_messages(task, num_sources, row.get("instruction") or "", prompt_config)
    messages.append({"role": "assistant", "content": [{"type": "text", "text": target_text(row)}]})
    return {"messages": messages, "images": _images(row, task, max_pixels)}


def to_grpo_example(row: Dict[str, Any], prompt_config=None, max_pixels: Optional[int] = None) -> Dict[str, Any]:
    """A GRPO prompt row: ``prompt`` (user turn), ``images``, and the columns the reward functions read:
    ``task``, ``instruction``, ``num_sources``, ``ref_scores`` (the row's scores, or None when absent)."""
    task = str(row["task"]).lower()
    num_sources = len(row["sources"]) if task == "sc" else 0
    scores = row.get("scores")
    ref = [float(s) for s in scores] if _valid_scores(scores) else None
    return {"prompt": prompt_messages(task, num_sources, row.get("instruction") or "", prompt_config),
            "images": _images(row, task, max_pixels), "task": task, "instruction": row.get("instruction") or "",
            "num_sources": num_sources, "ref_scores": ref}


def _features(kind: str):
    from datasets import Features, Image, List, Value

    turn = List({"role": Value("string"), "content": List({"type": Value("string"), "text": Value("string")})})
    columns = {"images": List(Image()), "_drop": Value("string"), "_key": Value("string")}
    if kind == "sft":
        columns["messages"] = turn
    else:
        columns.update(prompt=turn, task=Value("string"), instruction=Value("string"), num_sources=Value("int64"),
                       ref_scores=List(Value("float64")))
    return Features(columns)


def _empty(kind: str) -> Dict[str, Any]:
    if kind == "sft":
        return {"messages": [], "images": []}
    return {"prompt": [], "images": [], "task": "", "instruction": "", "num_sources": 0, "ref_scores": None}


def _grpo_reason(row: Dict[str, Any]) -> Optional[str]:
    """GRPO prompts need no target; only the inputs must be usable."""
    task = str(row.get("task", "")).lower()
    return "bad_task" if task not in ("sc", "pq") else next(iter(_input_issues(row, task)), None)


def _length_reason(example: Dict[str, Any], processor, max_seq_tokens: int) -> Optional[str]:
    """``too_long`` when the estimate exceeds ``max_seq_tokens``; ``extreme_aspect_ratio`` for an image the
    Qwen-VL processor would reject (aspect ratio above 200); None when the example fits."""
    try:
        return "too_long" if estimate_num_tokens(example, processor) > max_seq_tokens else None
    except ValueError:
        return "extreme_aspect_ratio"


def _prepare(data, kind: str, prompt_config, max_pixels, max_seq_tokens, processor, num_proc, id_column="id"):
    """Shared SFT/GRPO path: one ``datasets.map`` pass (on-disk Arrow, so 260k rows never sit in memory) that
    converts each row or records why it is dropped; then the reasons are counted and the bad rows filtered."""
    from datasets import Dataset

    what = f"SpatialReward {kind.upper()} data"
    if not isinstance(data, Dataset):
        data = Dataset.from_list(list(data))
    if len(data) == 0:
        raise ValueError(f"{what}: the dataset is empty")
    convert = to_sft_example if kind == "sft" else to_grpo_example
    prompt_config = _prompt_config(prompt_config)  # resolved once, not per row

    def one(row: Dict[str, Any], index: int) -> Dict[str, Any]:
        key = str(row.get(id_column, index)) if row.get(id_column) is not None else str(index)
        reason = check_row(row)[0] if kind == "sft" else _grpo_reason(row)
        if reason is None:
            try:
                example = convert(row, prompt_config, max_pixels)
            except Exception as err:  # an unreadable image, ...: named and counted, never a crash halfway
                logger.warning("%s row %s dropped: %s: %s", what, key, type(err).__name__, err)
                reason = f"unreadable:{type(err).__name__}"
            else:
                if max_seq_tokens is not None:
                    reason = _length_reason(example if kind == "sft" else
                                            {"messages": example["prompt"], "images": example["images"]},
                                            processor, max_seq_tokens)
        if reason is not None:
            example = _empty(kind)
        else:
            example = {**example, "images": [_encoded(im) for im in example["images"]]}
        return {**example, "_drop": reason or "", "_key": key}

    converted = data.map(one, with_indices=True, remove_columns=data.column_names, features=_features(kind),
                         num_proc=num_proc, desc=f"preparing {what}")
    report = DropReport(total=len(converted))
    for reason, key in zip(converted["_drop"], converted["_key"]):
        if reason:
            report.reasons[reason] = report.reasons.get(reason, 0) + 1
            shown = report.examples.setdefault(reason, [])
            if len(shown) < 5:
                shown.append(key)
    report.kept = report.total - sum(report.reasons.values())
    report.log(what)
    if report.kept == 0:
        raise ValueError(f"{what}: no usable rows out of {report.total} (drop reasons: {report.reasons}); check "
                         "the data against the schema in modeling_miescore.data.spatialreward_chat_examples")
    kept = converted.filter(lambda reason: not reason, input_columns="_drop", num_proc=num_proc) \
        if report.dropped else converted
    return kept.remove_columns(["_drop", "_key"]), report


def prepare_sft_dataset(data, prompt_config=None, max_pixels: Optional[int] = None,
                        max_seq_tokens: Optional[int] = None, processor=None, num_proc: Optional[int] = None):
    """Rows (list or ``datasets.Dataset``) -> (``Dataset`` with ``messages`` + ``images``, :class:`DropReport`).

    ``prompt_config``: a ``SpatialRewardConfig`` or a model carrying one (default prompts otherwise).
    ``max_pixels``: per-image pixel cap (downscale only). ``max_seq_tokens``: drop rows estimated longer
    (``processor`` makes the estimate exact for text). Raises ValueError when no row is usable.
    """
    return _prepare(data, "sft", prompt_config, max_pixels, max_seq_tokens, processor, num_proc)


def prepare_grpo_dataset(data, prompt_config=None, max_pixels: Optional[int] = None,
                         max_seq_tokens: Optional[int] = None, processor=None, num_proc: Optional[int] = None):
    """Rows -> (``Dataset`` with ``prompt``, ``images``, ``task``, ``instruction``, ``num_sources``,
    ``ref_scores``; :class:`DropReport`). Reasoning/regions are not needed (the policy writes them); rows
    without valid scores get ``ref_scores=None`` (the agreement reward then skips them)."""
    return _prepare(data, "grpo", prompt_config, max_pixels, max_seq_tokens, processor, num_proc)
