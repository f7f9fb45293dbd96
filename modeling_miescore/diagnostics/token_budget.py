"""Token budgets of MIEScore and SpatialReward prompts, measured with a checkpoint's own processor and config.

The counts are exact: the chat template's rendering of the messages the models build, tokenised by the
checkpoint's tokenizer, plus what its image processor makes of each image (``smart_resize``: one placeholder per
(patch x merge)^2 pixels, plus ``<|vision_start|>`` / ``<|vision_end|>``); the parts add up to the models'
``input_ids``. Parts (``PromptBudget.components``, in order): ``prompt`` (MIEScore's rubric; SpatialReward's D.1
text), ``instruction``, ``labels`` (MIEScore's image labels and template words), ``chat`` (the chat markup),
``source 1`` ... ``source N`` and ``edited``. A token belongs to the part holding its first non-space character.

Prefix reuse: the shared prefix P is everything before the edited image's first placeholder, the suffix S the
rest; G edits of one group run P + G*S tokens instead of G*L. :func:`shrink_to_fit` applies the MIEScore
trainer's ``"shrink"`` length policy: the largest per-image pixel budget at which a prompt fits ``max_length``
(bisection, as the trainer searches), or dropped when it cannot fit even at one token per image.
"""

from __future__ import annotations

import copy
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

from ..hub.backbone_families import backbone_config_of
from ..hub.control_tokens import QWEN_FIRST_ADDED_ID  # the Qwen byte-level vocabulary's ranks, then <|endoftext|>
from ..hub.errors import MIEScoreInputError
from ..utils.markdown_table import markdown_table
from ..hub.processing_miescore import resized_image_size, build_messages, load_checkpoint_processor
from ..scoring.loading import read_checkpoint_config, SPATIALREWARD_MODEL_TYPES
from ..scoring.checkpoint_files import check_processor, validate_checkpoint_folder

# A typical MIE-Bench-length instruction (the counts for another one: --instruction / instruction=...).
DEFAULT_INSTRUCTION = ("Put the cat from the second image on the wooden table of the first image, keeping the warm "
                       "evening light of the first image.")
DEFAULT_SOURCES = (1, 2, 3, 4)
DEFAULT_SIZES = ((512, 512), (1024, 1024))
TEXT_PARTS = ("prompt", "instruction", "labels", "chat")
_MARKER = "\ue000{}\ue001"  # private-use characters: stands in for a field while locating it in the rendered text
# MIEScore supplement, "Supervised Fine-Tuning": "The maximum input sequence length is set to 4096 tokens".
MIESCORE_TRAIN_MAX_LENGTH = 4096
# SpatialReward, appendix B.1.1 / Table 6: SFT "Max Length 8192" (prompt and answer).
SPATIALREWARD_SFT_MAX_LENGTH = 8192
PAPER_TRAINING_LENGTH = {"miescore": MIESCORE_TRAIN_MAX_LENGTH, "spatialreward": SPATIALREWARD_SFT_MAX_LENGTH}
# What training does with a longer row (MIEScore: training.miescore_data "shrink"; SpatialReward SFT drops it).
OVER_LENGTH_POLICY = {"miescore": "MIEScore's trainer shrinks their images to fit",
                      "spatialreward": "SpatialReward SFT drops such rows"}
_CARD_MAX_LENGTH = re.compile(r"^\|\s*max_length\s*\|\s*`?(\d+)`?\s*\|", re.MULTILINE)


@dataclass(frozen=True)
class PromptBudget:
    """The tokens of one prompt, by part (see the module docstring).

    Fields:
        prompt: ``"MIEScore"``, ``"SC (D.1.1)"``, ``"SC (D.1.2)"`` or ``"PQ (D.1.3)"``.
        num_sources: source images in the prompt (0 for PQ, which sees the edited image only).
        image_size / resized_size: ``(width, height)`` of every input image, and after the processor's resize.
        min_pixels / max_pixels: the per-image pixel range used; factor: pixels per token side (patch x merge).
        components: part -> tokens; prefix: P, or None when the prompt has no shared prefix to reuse.
    """

    prompt: str
    num_sources: int
    image_size: tuple
    resized_size: tuple
    min_pixels: int
    max_pixels: int
    factor: int
    components: dict
    prefix: int | None

    @property
    def total(self) -> int:
        return sum(self.components.values())

    @property
    def image_names(self) -> list:
        return [name for name in self.components if name not in TEXT_PARTS]

    @property
    def placeholders(self) -> int:
        """Placeholder tokens of one image (its markers not included)."""
        width, height = self.resized_size
        return width * height // self.factor**2

    @property
    def image_tokens(self) -> int:
        """Tokens of one image, markers included."""
        return self.placeholders + 2

    @property
    def suffix(self) -> int | None:
        return None if self.prefix is None else self.total - self.prefix

    def reuse_ceiling(self, group_size: int = 12) -> float | None:
        """G*L / (P + G*S): the most that prefix reuse can save in tokens for G edits of one group."""
        if self.prefix is None:
            return None
        return group_size * self.total / (self.prefix + group_size * self.suffix)

    def to_dict(self, group_size: int = 12) -> dict:
        return {"prompt": self.prompt, "num_sources": self.num_sources, "image_size": list(self.image_size),
                "resized_size": list(self.resized_size), "min_pixels": self.min_pixels,
                "max_pixels": self.max_pixels, "components": dict(self.components), "image_tokens": self.image_tokens,
                "total": self.total, "prefix": self.prefix, "suffix": self.suffix, "group_size": group_size,
                "reuse_ceiling": self.reuse_ceiling(group_size)}


@dataclass(frozen=True)
class ShrinkResult:
    """What the trainer's "shrink" policy does to a prompt at ``max_length`` tokens.

    ``action``: ``"fits"`` (unchanged), ``"shrunk"`` (images get ``max_pixels`` each, ending up ``resized_size``
    and the prompt ``total`` tokens) or ``"dropped"`` (too long even at one token per image).
    """

    max_length: int
    action: str
    max_pixels: int | None
    resized_size: tuple | None
    total: int | None

    def to_dict(self) -> dict:
        return asdict(self) | {"resized_size": self.resized_size and list(self.resized_size)}


def patch_factor(processor) -> int:
    """Pixels per LLM token side: patch size x merge size (16 x 2 = 32 for Qwen3-VL)."""
    image_processor = processor.image_processor
    return int(image_processor.patch_size) * int(image_processor.merge_size)


def resized_size(size: Sequence[int], factor: int, min_pixels: int, max_pixels: int) -> tuple:
    """``(width, height)`` that the Qwen-VL image processor resizes a ``(width, height)`` image to
    (``processing_miescore.resized_image_size``, i.e. transformers' ``smart_resize``); bad sizes are user errors."""
    width, height = (int(v) for v in size)
    if width < 1 or height < 1:
        raise MIEScoreInputError(f"image size {width}x{height} is empty; give a width and height of at least 1")
    try:
        height, width = resized_image_size(width, height, min_pixels=min_pixels, max_pixels=max_pixels,
                                           factor=factor)
    except ValueError as err:  # an aspect ratio over 200
        raise MIEScoreInputError(f"image size {size[0]}x{size[1]} cannot be processed: {err}") from None
    return width, height


# ------------------------------------------------------------------------------------------------------------
# Measuring one rendered prompt
# ------------------------------------------------------------------------------------------------------------


def _field_spans(rendered_with_marker: str, marker: str, value: str, part: str) -> list:
    """Where ``value`` lies in the real rendering, given a rendering with ``marker`` in its place."""
    spans, shift, start = [], len(value) - len(marker), 0
    while (position := rendered_with_marker.find(marker, start)) >= 0:
        real = position + len(spans) * shift
        spans.append((real, real + len(value), part))
        start = position + len(marker)
    return spans


def _content_spans(text: str, messages: list, image_names: list, text_part: str, processor) -> tuple:
    """Spans of each message part in the rendered ``text`` (images with their markers) and each image's
    placeholder position. The Qwen3-VL template writes texts verbatim and each image as
    ``<|vision_start|><|image_pad|><|vision_end|>``."""
    image_token = processor.image_token
    vision_start = getattr(processor, "vision_start_token", "<|vision_start|>")
    vision_end = getattr(processor, "vision_end_token", "<|vision_end|>")
    spans, pads, cursor, images = [], [], 0, iter(image_names)
    for part in (p for message in messages for p in message["content"]):
        is_image = part["type"] == "image"
        start = text.find(image_token if is_image else part["text"], cursor)
        if start < 0:
            raise MIEScoreInputError("the checkpoint's chat template does not write the prompt's parts verbatim and "
                                     "in order; token budgets need the Qwen-VL chat template")
        if is_image:
            pads.append(start)
            end = start + len(image_token)
            start -= len(vision_start) if text[:start].endswith(vision_start) else 0
            end += len(vision_end) if text.startswith(vision_end, end) else 0
            name = next(images)
        else:
            end, name = start + len(part["text"]), text_part
        spans.append((start, end, name))
        cursor = end
    return spans, pads


def _measure(processor, messages: list, image_names: list, fields: dict, text_part: str, placeholders: int,
             reusable: bool):
    """Tokens per part of one prompt and, when it is ``reusable`` (the edited image comes last, after the
    sources), its shared prefix P.

    ``fields``: part -> ``(value, marker, messages with the marker in place of the value)``.
    """
    def render(chat):
        return processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)

    text = render(messages)
    spans = []  # (start, end, part): field spans first, so they win over the text part that contains them
    for part, (value, marker, marked_messages) in fields.items():
        spans += _field_spans(render(marked_messages), marker, value, part)
    content, pads = _content_spans(text, messages, image_names, text_part, processor)
    spans += content
    offsets = processor.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    counts = dict.fromkeys([*TEXT_PARTS, *image_names], 0)
    for start, end in offsets:
        piece = text[start:end]
        where = start + len(piece) - len(piece.lstrip()) if piece.strip() else start
        counts[next((part for s, e, part in spans if s <= where < e), "chat")] += 1
    for name in image_names:  # the rendered text holds one placeholder per image; the processor expands it
        counts[name] += placeholders - 1
    prefix = None
    if reusable:
        before = sum(1 for start, _ in offsets if start < pads[-1])
        prefix = before + (len(image_names) - 1) * (placeholders - 1)
    return counts, prefix


def _with_pixels(config, max_pixels: int | None):
    """The config, or a copy whose images get at most ``max_pixels`` (min_pixels lowered to it when above)."""
    if max_pixels is None:
        return config
    if int(max_pixels) < 1:
        raise MIEScoreInputError(f"max_pixels must be >= 1, got {max_pixels}")
    config = copy.copy(config)
    config.max_pixels = int(max_pixels)
    config.min_pixels = min(int(config.min_pixels), int(max_pixels))
    return config


def _checked(num_sources: int, instruction: str) -> str:
    if int(num_sources) < 1:
        raise MIEScoreInputError(f"num_sources must be >= 1, got {num_sources}")
    if not isinstance(instruction, str) or not instruction.strip():
        raise MIEScoreInputError("the instruction is empty; pass the editing instruction text")
    return instruction.strip()  # as as_edit_sample stores it


def _budget(prompt: str, processor, config, num_sources: int, size, messages, image_names, fields, text_part,
            reusable: bool):
    factor = patch_factor(processor)
    resized = resized_size(size, factor, int(config.min_pixels), int(config.max_pixels))
    placeholders = resized[0] * resized[1] // factor**2
    counts, prefix = _measure(processor, messages, image_names, fields, text_part, placeholders, reusable)
    return PromptBudget(prompt=prompt, num_sources=num_sources, image_size=tuple(int(v) for v in size),
                        resized_size=resized, min_pixels=int(config.min_pixels), max_pixels=int(config.max_pixels),
                        factor=factor, components=counts, prefix=prefix)


# ------------------------------------------------------------------------------------------------------------
# The two models
# ------------------------------------------------------------------------------------------------------------


def miescore_budget(processor, config, num_sources: int, size: Sequence[int] = (1024, 1024),
                    instruction: str = DEFAULT_INSTRUCTION, max_pixels: int | None = None) -> PromptBudget:
    """Tokens of a MIEScore prompt (``prepare_inputs``) with ``num_sources`` sources, every image ``size``.

    Args:
        processor / config: the checkpoint's ``Qwen3VLProcessor`` and ``MIEScoreConfig``.
        size: ``(width, height)`` of every image; max_pixels: override ``config.max_pixels``.
    """
    instruction = _checked(num_sources, instruction)
    config = _with_pixels(config, max_pixels)
    messages, roles = build_messages(num_sources, instruction, config)
    names = ["edited" if role == "edited" else f"source {int(role.split(':')[1]) + 1}" for role in roles]
    rubric = copy.copy(config)
    rubric.skill = _MARKER.format("prompt")
    marker = _MARKER.format("instruction")
    fields = {"prompt": (config.skill or "", rubric.skill, build_messages(num_sources, instruction, rubric)[0]),
              "instruction": (instruction, marker, build_messages(num_sources, marker, config)[0])}
    reusable = names[-1] == "edited"  # image_order "sources_first", the layout prefix reuse needs
    return _budget("MIEScore", processor, config, num_sources, size, messages, names, fields, "labels", reusable)


def spatialreward_budgets(processor, config, num_sources: int, size: Sequence[int] = (1024, 1024),
                          instruction: str = DEFAULT_INSTRUCTION, max_pixels: int | None = None) -> tuple:
    """Tokens of SpatialReward's two prompts for one edit: ``(SC, PQ)``.

    SC is D.1.1 for one source and D.1.2 for several (``sc_messages``); PQ is D.1.3 on the edited image alone
    (``pq_messages``). Arguments as :func:`miescore_budget`, with a ``SpatialRewardConfig``.
    """
    from ..hub.modeling_spatialreward import pq_messages, sc_messages  # deferred: loads torch, transformers

    instruction = _checked(num_sources, instruction)
    config = _with_pixels(config, max_pixels)
    marker = _MARKER.format("instruction")
    names = [f"source {k + 1}" for k in range(num_sources)] + ["edited"]
    fields = {"instruction": (instruction, marker, sc_messages(config, num_sources, marker))}
    sc = _budget(f"SC ({'D.1.1' if num_sources == 1 else 'D.1.2'})", processor, config, num_sources, size,
                 sc_messages(config, num_sources, instruction), names, fields, "prompt", reusable=True)
    # PQ prompts of one group share only the chat start: SpatialReward runs them without prefix reuse
    pq = _budget("PQ (D.1.3)", processor, config, 0, size, pq_messages(config), ["edited"], {}, "prompt",
                 reusable=False)
    return sc, pq


# ------------------------------------------------------------------------------------------------------------
# Length limits
# ------------------------------------------------------------------------------------------------------------


def _length_at(budget: PromptBudget, pixels: int) -> tuple:
    """``(total tokens, resized size)`` of ``budget``'s prompt when every image gets at most ``pixels``."""
    resized = resized_size(budget.image_size, budget.factor, min(budget.min_pixels, pixels), pixels)
    text = budget.total - len(budget.image_names) * budget.placeholders
    return text + len(budget.image_names) * (resized[0] * resized[1] // budget.factor**2), resized


def shrink_to_fit(budget: PromptBudget, max_length: int) -> ShrinkResult:
    """The trainer's "shrink" length policy applied to one prompt (see the module docstring)."""
    if budget.total <= max_length:
        return ShrinkResult(max_length, "fits", budget.max_pixels, budget.resized_size, budget.total)
    floor = budget.factor**2  # one token per image
    if _length_at(budget, floor)[0] > max_length:
        return ShrinkResult(max_length, "dropped", None, None, None)
    fitting, too_many = floor, budget.max_pixels
    while too_many - fitting > budget.factor:
        middle = (fitting + too_many) // 2
        if _length_at(budget, middle)[0] <= max_length:
            fitting = middle
        else:
            too_many = middle
    total, resized = _length_at(budget, fitting)
    return ShrinkResult(max_length, "shrunk", fitting, resized, total)


# ------------------------------------------------------------------------------------------------------------
# A checkpoint
# ------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainingLength:
    """The sequence length a checkpoint was trained at: ``tokens``, and ``source``: where it was read
    (``"config.json"``, ``"the model card"``) or ``"the paper"`` when the checkpoint records none."""

    tokens: int
    source: str

    @property
    def recorded(self) -> bool:
        return self.source != "the paper"

    def describe(self) -> str:
        where = f"from {self.source}" if self.recorded else "the paper's; the checkpoint records none"
        return f"{self.tokens:,} tokens ({where})"


def training_length(model: str, kind: str) -> TrainingLength:
    """The checkpoint's own training length: an integer ``max_length`` in its config.json, or the
    ``max_length`` row of its model card's training table (``trainers/train_miescore.py`` writes it); else the
    paper's (:data:`PAPER_TRAINING_LENGTH`)."""
    value = read_checkpoint_config(model).get("max_length")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return TrainingLength(value, "config.json")
    card = Path(model).expanduser() / "README.md"
    try:
        match = _CARD_MAX_LENGTH.search(card.read_text(encoding="utf-8")) if card.is_file() else None
    except (OSError, UnicodeDecodeError):
        match = None
    if match and int(match.group(1)) > 0:
        return TrainingLength(int(match.group(1)), "the model card")
    return TrainingLength(PAPER_TRAINING_LENGTH[kind], "the paper")


def position_limit(config) -> int | None:
    """The language model's position limit (``max_position_embeddings`` of its text config), or None."""
    value = getattr(backbone_config_of(config).get_text_config(), "max_position_embeddings", None)
    return int(value) if isinstance(value, int) and value > 0 else None


def vocabulary_note(tokenizer) -> str | None:
    """None for the Qwen vocabulary the released models use; else a note that text counts are not theirs."""
    size = len(tokenizer)
    if size > QWEN_FIRST_ADDED_ID and tokenizer.convert_tokens_to_ids("<|endoftext|>") == QWEN_FIRST_ADDED_ID:
        return None
    return (f"not the Qwen vocabulary ({size:,} tokens; the released Qwen-VL models have {QWEN_FIRST_ADDED_ID:,} "
            "+ added tokens): text counts differ from a released model's, image counts do not")


def load_config_and_processor(model: str) -> tuple:
    """``(kind, config, processor)`` of a MIEScore or SpatialReward checkpoint (no weights are loaded).

    ``kind`` is ``"miescore"`` or ``"spatialreward"`` (our checkpoints or the authors' plain Qwen3-VL release).
    Raises ``MIEScoreInputError`` naming the problem for anything else.
    """
    config_dict = read_checkpoint_config(model)
    kind = checkpoint_kind(model, config_dict)
    if kind == "miescore":
        from ..hub.configuration_miescore import MIEScoreConfig as config_class
    else:
        from ..hub.configuration_spatialreward import SpatialRewardConfig as config_class
    if Path(model).expanduser().is_dir():
        validate_checkpoint_folder(Path(model).expanduser(), config_dict, weights=False)
    try:
        config = config_class.from_pretrained(model)
        processor = load_checkpoint_processor(model)
    except (OSError, ValueError) as err:
        raise MIEScoreInputError(f"cannot read '{model}': {err}") from None
    check_processor(processor, model)
    return kind, config, processor


def checkpoint_kind(model: str, config: dict) -> str:
    """``"miescore"`` or ``"spatialreward"`` (ours, or the authors' plain Qwen3-VL release) for the checkpoint
    ``model`` whose config.json is ``config``; anything else is a user error."""
    model_type = config.get("model_type")
    if model_type in ("miescore", *SPATIALREWARD_MODEL_TYPES):
        return "miescore" if model_type == "miescore" else "spatialreward"
    raise MIEScoreInputError(f"'{model}' is neither a MIEScore nor a SpatialReward checkpoint "
                             f"(model_type={model_type!r}); pass a checkpoint folder of one of them")


def checkpoint_budgets(model: str, sources: Sequence[int] = DEFAULT_SOURCES,
                       sizes: Sequence[Sequence[int]] = DEFAULT_SIZES, max_pixels: int | None = None,
                       instruction: str = DEFAULT_INSTRUCTION, loaded: tuple | None = None) -> list:
    """The budgets of a checkpoint's prompts for every number of sources and image size.

    MIEScore: one prompt per (size, sources). SpatialReward: the SC prompts, then one PQ prompt per size (PQ
    does not depend on the sources). ``loaded``: :func:`load_config_and_processor`'s answer, when already read.
    """
    kind, config, processor = loaded or load_config_and_processor(model)
    budgets, pq_budgets = [], []
    for size in sizes:
        for num_sources in sources:
            if kind == "miescore":
                budgets.append(miescore_budget(processor, config, num_sources, size, instruction, max_pixels))
                continue
            sc, pq = spatialreward_budgets(processor, config, num_sources, size, instruction, max_pixels)
            budgets.append(sc)
            if not any(p.image_size == pq.image_size for p in pq_budgets):
                pq_budgets.append(pq)
    return budgets + pq_budgets


def format_budget_table(budgets: Sequence[PromptBudget], group_size: int = 12, max_length: int | None = None,
                        training: TrainingLength | None = None, answer_tokens: int = 0) -> str:
    """A Markdown table of budgets (one row each), columns named for what they count (:func:`budget_legend`
    explains them); with ``training``, each total plus ``answer_tokens`` (SpatialReward's ``max_new_tokens``:
    SFT sequences hold the answer too) against that length; with ``max_length``, what the shrink policy does
    per row."""
    header = ["prompt", "sources", "image", "resized to", "max_pixels", "rubric / D.1 text", "instruction",
              "labels", "chat markup", "per image", "total"]
    if training is not None:
        header.append(f"vs training {training.tokens:,}")
    header += ["shared prefix P", "per-edit suffix S", f"reuse ceiling G={group_size}"]
    if max_length is not None:
        header.append(f"shrink at {max_length}")
    rows = []
    for b in budgets:
        ceiling = b.reuse_ceiling(group_size)
        row = [b.prompt, str(b.num_sources), "{}x{}".format(*b.image_size), "{}x{}".format(*b.resized_size),
               f"{b.max_pixels:,}", *(str(b.components[p]) for p in TEXT_PARTS), str(b.image_tokens), str(b.total)]
        if training is not None:
            excess = b.total + answer_tokens - training.tokens
            row.append("fits" if excess <= 0 else f"OVER by {excess:,}")
        row += ["-" if b.prefix is None else str(b.prefix), "-" if b.suffix is None else str(b.suffix),
                "-" if ceiling is None else f"{ceiling:.2f}x"]
        if max_length is not None:
            row.append(_describe(shrink_to_fit(b, max_length)))
        rows.append(row)
    return markdown_table(header, rows)


def budget_legend(kind: str, group_size: int = 12, training: TrainingLength | None = None,
                  budgets: Sequence[PromptBudget] = (), answer_tokens: int = 0) -> list:
    """What the columns of :func:`format_budget_table` mean, one line each (and how many rows are over)."""
    lines = [
        "sources: source images in the prompt (0: the PQ prompt sees the edited image only); image / resized to: "
        "every image's size before and after the processor's resize within [min_pixels, max_pixels]",
        "rubric ... chat markup: the text parts' tokens; per image: one image's tokens with its "
        "<|vision_start|>/<|vision_end|> markers; total: the prompt's input_ids (text + every image)",
        f"shared prefix P / per-edit suffix S: prefix reuse runs the tokens before the edited image once for a group "
        f"of edits with the same sources and instruction, and S per edit; reuse ceiling G={group_size}: "
        f"G*total / (P + G*S), the most it can save for {group_size} edits of one group (a MIE-Bench instance)",
    ]
    if training is not None:
        over = sum(b.total + answer_tokens > training.tokens for b in budgets)
        what = f"total + {answer_tokens} answer tokens (max_new_tokens)" if answer_tokens else "total"
        lines.append(f"vs training: {what} against the training length, {training.describe()}; {over} of "
                     f"{len(budgets)} rows are over it: {OVER_LENGTH_POLICY[kind]}, scoring takes them whole"
                     + (f" (--max-length {training.tokens} shows the shrink)" if kind == "miescore" else ""))
    return lines


def _describe(result: ShrinkResult) -> str:
    if result.action == "shrunk":
        return "shrunk to {:,} px ({}x{}), {} tokens".format(result.max_pixels, *result.resized_size, result.total)
    return result.action


__all__ = ["DEFAULT_INSTRUCTION", "MIESCORE_TRAIN_MAX_LENGTH", "PAPER_TRAINING_LENGTH", "PromptBudget",
           "SPATIALREWARD_SFT_MAX_LENGTH", "ShrinkResult", "TrainingLength", "budget_legend", "checkpoint_budgets", "checkpoint_kind",
           "format_budget_table", "load_config_and_processor", "miescore_budget", "patch_factor", "position_limit",
           "resized_size", "shrink_to_fit", "spatialreward_budgets", "training_length", "vocabulary_note"]
