"""Attention maps of a Qwen3-VL generative judge over its input images (SpatialReward paper, appendix C.1).

C.1 builds one map per image from "the cross-modal attention from the generated reasoning tokens (Queries) to
the image tokens (Keys)", "aggregating the attention weights from the last 5 transformer layers", "averaging
... across these selected layers and all attention heads", then "normalizing to a standard 24 x 24 grid".
:func:`extract_attention_maps` does that for one edit:

1. The SC prompt is built and generated exactly as :meth:`SpatialRewardModel.evaluate_edits` builds it
   (``sc_messages``, the chat template, the checkpoint's pixel bounds, its end tokens and token budget), with
   greedy decoding and one pass, so the reasoning analysed is the one the judge gives.
2. Attention weights come only from transformers' eager attention (SDPA and flash kernels never form them), so
   the language model is switched to eager attention, once, with a message (:func:`use_eager_attention`; the
   vision tower keeps its implementation). The switch stays on the model.
3. Forward hooks on the self-attention of the last ``num_layers`` decoder layers keep, at each decoding step,
   only the new token's row over the image-token columns, averaged over heads: ``generated tokens x image
   tokens`` floats per layer. ``output_attentions`` (every layer, every row) is never requested, so memory
   does not grow with the number of layers or with the prompt's own rows. The rows are those of the generated
   tokens that are fed back to the model: all but the last one (normally the end-of-turn token).
4. Query tokens: ``tokens="reasoning"`` (default, as C.1) keeps the tokens of the JSON ``"reasoning"`` string
   of the SC answer (located in character offsets of the decoded text; a token that straddles the string's
   quotes counts). When the answer has no such string (an untrained or malformed judge), all generated tokens
   are used and ``SampleAttention.note`` says so; ``tokens="all"`` always uses them all.
5. Each image's tokens are found in the input ids (the ``<|image_pad|>`` id, split by ``image_grid_thw``:
   ``t * h * w / merge**2`` tokens per image, row-major over the merged ``h/merge x w/merge`` grid), the
   averaged row is reshaped to that grid, resized to ``grid_size x grid_size`` with
   ``torch.nn.functional.interpolate`` and normalised to sum 1. ``resize_mode="area"`` (default): each cell
   is the mean of the tokens it covers when shrinking (a region keeps its share of the mass) and a token is
   repeated over its cells when enlarging (no invented structure); ``"bilinear"`` (antialiased) is smoother.
   The paper does not name its resampling.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..image_io import DEFAULT_MAX_IMAGE_PIXELS
from ..processing_miescore import as_edit_sample, image_size_kwargs
from .attention_metrics import normalize_map, sample_metrics

if TYPE_CHECKING:  # torch is imported where it is used, so `miescore --help` does not pay for it
    import torch

__all__ = ["DEFAULT_GRID_SIZE", "DEFAULT_NUM_LAYERS", "RESIZE_MODES", "TOKEN_SELECTIONS", "GeneratedRowRecorder",
           "SampleAttention", "decoder_attention_layers", "extract_attention_maps", "image_token_spans",
           "reasoning_char_span", "reasoning_token_mask", "resize_to_grid", "sc_prompt_inputs", "use_eager_attention"]

DEFAULT_NUM_LAYERS = 5  # C.1: "the last 5 transformer layers"
DEFAULT_GRID_SIZE = 24  # C.1: "a standard 24 x 24 grid"
TOKEN_SELECTIONS = ("reasoning", "all")
RESIZE_MODES = ("area", "bilinear")


@dataclass
class SampleAttention:
    """The attention maps of one edit.

    Fields:
        id: the sample's id (None when it had none).
        source_maps, edited_map: ``grid x grid`` float64 maps summing to 1, one per source, and the edited one.
        token_maps: per image (sources, then edited), the mean attention on its merged token grid
            (``h/merge x w/merge``) before resizing; not normalised: ``token_maps[k].sum()`` is the share of the
            query tokens' attention that lands on image k (``image_shares``).
        image_shares: those shares (the rest goes to text, chat and vision-marker tokens).
        query_positions: positions in ``sequence_ids`` of the averaged query tokens.
        token_selection: ``"reasoning"`` or ``"all"`` (what was averaged; see ``note``).
        note: why the selection differs from the request (no reasoning string found), else None.
        layers: indices of the decoder layers averaged.
        sequence_ids: prompt + generated token ids; ``prompt_length`` of them are the prompt.
        generated_text: the SC answer (special tokens kept).
    """

    id: str | None
    source_maps: list[np.ndarray]
    edited_map: np.ndarray
    token_maps: list[np.ndarray]
    image_shares: list[float]
    query_positions: list[int]
    token_selection: str
    layers: list[int]
    sequence_ids: list[int]
    prompt_length: int
    generated_text: str
    note: str | None = None
    metrics: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.metrics:
            self.metrics = sample_metrics(self.source_maps, self.edited_map)


# ----------------------------------------------------------------------------------------------------------
# Prompt, image tokens and the attention implementation
# ----------------------------------------------------------------------------------------------------------


def sc_prompt_inputs(model, processor, sample):
    """The SC prompt of one loaded edit as model inputs (on the model's device), as ``evaluate_edits`` builds it."""
    from ..modeling_spatialreward import sc_messages

    messages = sc_messages(model.config, len(sample.sources), sample.instruction)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    batch = processor(text=[text], images=[*sample.sources, sample.edited], return_tensors="pt",
                      **image_size_kwargs(model.config))
    batch = batch.to(model.device)
    batch["pixel_values"] = batch["pixel_values"].to(model.dtype)
    return batch


def image_token_spans(input_ids: torch.Tensor, image_grid_thw: torch.Tensor, image_token_id: int,
                      merge_size: int) -> list[tuple[torch.Tensor, tuple[int, int, int]]]:
    """Per image, in prompt order: the positions of its ``<|image_pad|>`` tokens and its merged grid ``(t, h, w)``.

    ``input_ids`` is one sequence. The tokens of consecutive images are told apart by counting:
    ``t * h * w / merge_size**2`` per image, from ``image_grid_thw`` (patch units).
    """
    positions = (input_ids.reshape(-1) == image_token_id).nonzero().flatten()
    grids = [(int(t), int(h) // merge_size, int(w) // merge_size) for t, h, w in image_grid_thw.tolist()]
    counts = [t * h * w for t, h, w in grids]
    if sum(counts) != positions.numel():
        raise ValueError(f"the prompt has {positions.numel()} image tokens but image_grid_thw describes "
                         f"{sum(counts)}; the processor and the model disagree on the image token")
    spans, start = [], 0
    for count, grid in zip(counts, grids):
        spans.append((positions[start:start + count], grid))
        start += count
    return spans


def decoder_attention_layers(model, num_layers: int) -> list[tuple[int, torch.nn.Module]]:
    """``(index, self-attention module)`` of the last ``num_layers`` decoder layers of a Qwen3-VL model."""
    try:
        layers = model.model.language_model.layers
    except AttributeError:
        raise TypeError(f"{type(model).__name__} is not a Qwen3-VL model (no model.language_model.layers)") from None
    if num_layers < 1:
        raise ValueError(f"num_layers must be >= 1, got {num_layers}")
    first = max(0, len(layers) - num_layers)
    return [(i, layers[i].self_attn) for i in range(first, len(layers))]


def use_eager_attention(model, log: Callable[[str], None] | None = print) -> bool:
    """Switch the language model to eager attention (the only one that returns weights); True if it changed."""
    current = model.config.get_text_config()._attn_implementation
    if current == "eager":
        return False
    if log is not None:
        log(f"attention analysis: switching the language model from {current!r} to 'eager' attention "
            "(only eager attention returns attention weights; generation is slower)")
    model.set_attn_implementation({"text_config": "eager"})
    return True


# ----------------------------------------------------------------------------------------------------------
# Hooks that keep only the generated tokens' rows
# ----------------------------------------------------------------------------------------------------------


class GeneratedRowRecorder:
    """Context manager: forward hooks that keep the generated tokens' attention rows over ``columns``.

    ``modules``: ``(index, self-attention module)`` pairs (eager attention: they return ``(output, weights)``
    with weights ``(1, heads, queries, keys)``). A call's queries sit at positions ``keys - queries ...
    keys - 1`` (causal attention with a cache, one sequence, no padding); rows at positions
    ``>= prompt_length`` are kept, averaged over heads, as float32. :meth:`rows` returns ``(positions,
    (tokens, columns) mean over the layers)``.
    """

    def __init__(self, modules: Sequence[tuple[int, torch.nn.Module]], prompt_length: int, columns: torch.Tensor):
        self.modules, self.prompt_length, self.columns = list(modules), int(prompt_length), columns
        self._rows = {index: [] for index, _ in self.modules}
        self._positions = {index: [] for index, _ in self.modules}
        self._handles = []

    def _hook(self, index: int):
        def keep_rows(module, args, output):
            weights = output[1] if isinstance(output, tuple) and len(output) > 1 else None
            if weights is None:
                raise RuntimeError("the attention module returned no weights; switch the model to eager attention "
                                   "first (use_eager_attention)")
            if weights.shape[0] != 1:
                raise RuntimeError(f"attention hooks handle one sequence at a time, got a batch of {weights.shape[0]}")
            queries, keys = weights.shape[-2], weights.shape[-1]
            first = max(0, self.prompt_length - (keys - queries))
            if first >= queries:
                return
            rows = weights[0, :, first:, :].index_select(-1, self.columns.to(weights.device))
            self._rows[index].append(rows.float().mean(0))
            self._positions[index].extend(range(keys - queries + first, keys))

        return keep_rows

    def __enter__(self):
        self._handles = [module.register_forward_hook(self._hook(index)) for index, module in self.modules]
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return False

    def rows(self) -> tuple[list[int], torch.Tensor]:
        """``(positions, rows)``: the query positions seen and their rows averaged over the hooked layers."""
        import torch

        indices = [index for index, _ in self.modules]
        positions = self._positions[indices[0]]
        if any(self._positions[i] != positions for i in indices):
            raise RuntimeError("the hooked layers saw different query positions")
        if not positions:
            return [], torch.zeros(0, self.columns.numel())
        per_layer = [torch.cat(self._rows[i]) for i in indices]
        return list(positions), torch.stack(per_layer).mean(0)


# ----------------------------------------------------------------------------------------------------------
# Which generated tokens are reasoning tokens
# ----------------------------------------------------------------------------------------------------------

_REASONING_KEY = re.compile(r'"reasoning"\s*:\s*"')


def reasoning_char_span(text: str) -> tuple[int, int] | None:
    """Character span of the ``"reasoning"`` string's content in a JSON-like answer, or None without one.

    The string ends at the first unescaped quote, or at the end of the text when the generation stopped inside it.
    """
    match = _REASONING_KEY.search(text)
    if match is None:
        return None
    i = start = match.end()
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return start, i
        i += 1
    return start, len(text)


def reasoning_token_mask(token_ids: Sequence[int], tokenizer) -> list[bool] | None:
    """Per generated token, whether it overlaps the reasoning string; None when the answer has none (or it is empty).

    Token ``k`` covers the characters between the lengths of the decoded prefixes ``ids[:k]`` and
    ``ids[:k + 1]`` (so multi-token characters and special tokens count as the full decode counts them); the
    reasoning tokens are one run, found by bisection (a few decodes, not one per token).
    """
    token_ids = [int(t) for t in token_ids]
    span = reasoning_char_span(tokenizer.decode(token_ids, skip_special_tokens=False))
    if span is None or span[0] == span[1]:
        return None

    def end(k: int) -> int:  # where token k ends in the decoded text
        return len(tokenizer.decode(token_ids[:k + 1], skip_special_tokens=False))

    tokens = range(len(token_ids))
    first = bisect.bisect_left(tokens, True, key=lambda k: end(k) > span[0])  # first token ending inside
    last = bisect.bisect_left(tokens, True, key=lambda k: end(k) >= span[1])  # the token holding the last char
    return [first <= k <= last for k in tokens]


# ----------------------------------------------------------------------------------------------------------
# Maps
# ----------------------------------------------------------------------------------------------------------


def resize_to_grid(token_map, grid_size: int = DEFAULT_GRID_SIZE, mode: str = "area") -> np.ndarray:
    """A 2-D attention map resized to ``grid_size x grid_size`` (``interpolate``, see the module doc), sum 1."""
    if mode not in RESIZE_MODES:
        raise ValueError(f"resize mode must be one of {RESIZE_MODES}, got {mode!r}")
    import torch

    x = torch.as_tensor(np.asarray(token_map, dtype=np.float64))[None, None]
    size = (int(grid_size), int(grid_size))
    if mode == "area":
        y = torch.nn.functional.interpolate(x, size=size, mode="area")
    else:
        y = torch.nn.functional.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=True)
    return normalize_map(y[0, 0].clamp_min(0).numpy())


def _greedy_generation_config(model, tokenizer, max_new_tokens: int | None):
    """The model's own end tokens, pad and token budget, with one greedy pass."""
    from transformers import GenerationConfig

    own = model._generation_config(tokenizer)  # SpatialRewardModel's decoding settings (end tokens, budget)
    return GenerationConfig(max_new_tokens=int(max_new_tokens or own.max_new_tokens), do_sample=False, num_beams=1,
                            num_return_sequences=1, eos_token_id=own.eos_token_id, pad_token_id=own.pad_token_id,
                            repetition_penalty=1.0, no_repeat_ngram_size=0, temperature=1.0, top_p=1.0, top_k=50)


def _query_rows(positions, rows, generated, prompt_length, tokens, tokenizer):
    """Keep the reasoning tokens' rows (or all); returns ``(positions, rows, selection, note)``."""
    if tokens == "all":
        return positions, rows, "all", None
    mask = reasoning_token_mask(generated, tokenizer)
    keep = [k for k, p in enumerate(positions) if mask is not None and mask[p - prompt_length]]
    if not keep:
        return positions, rows, "all", "no reasoning string in the answer: all generated tokens used"
    return [positions[k] for k in keep], rows[keep], "reasoning", None


def extract_attention_maps(
    model,
    sample,
    processor=None,
    *,
    num_layers: int = DEFAULT_NUM_LAYERS,
    grid_size: int = DEFAULT_GRID_SIZE,
    tokens: str = "reasoning",
    resize_mode: str = "area",
    max_new_tokens: int | None = None,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    log: Callable[[str], None] | None = print,
) -> SampleAttention:
    """Generate the SC answer for one edit and return its C.1 attention maps (see the module docstring).

    Args:
        model: a ``SpatialRewardModel`` (ours, or a plain Qwen3-VL checkpoint loaded as one).
        sample: ``{"sources", "edited", "instruction"[, "id"]}`` or an ``EditSample``; images as paths, PIL or arrays.
        processor: default ``model.get_processor()``.
        num_layers: the last ``num_layers`` decoder layers are averaged (all of them when the model has fewer).
        grid_size, resize_mode: the output grid (C.1: 24) and its resampling (``"area"`` or ``"bilinear"``).
        tokens: ``"reasoning"`` (C.1) or ``"all"`` generated tokens as queries.
        max_new_tokens: override the checkpoint's generation budget.
        log: where the one-time eager-attention message goes (None: silent).
    Raises:
        ``MIEScoreInputError`` for unusable inputs; ``ValueError`` when nothing was generated to take rows from.
    """
    if tokens not in TOKEN_SELECTIONS:
        raise ValueError(f"tokens must be one of {TOKEN_SELECTIONS}, got {tokens!r}")
    if resize_mode not in RESIZE_MODES:
        raise ValueError(f"resize_mode must be one of {RESIZE_MODES}, got {resize_mode!r}")
    import torch

    processor = processor or model.get_processor()
    sample = as_edit_sample(sample).load(max_image_pixels)
    use_eager_attention(model, log)
    model.eval()
    inputs = sc_prompt_inputs(model, processor, sample)
    config = model.config
    spans = image_token_spans(inputs["input_ids"][0], inputs["image_grid_thw"], config.image_token_id,
                              config.vision_config.spatial_merge_size)
    columns = torch.cat([positions for positions, _ in spans])
    prompt_length = inputs["input_ids"].shape[1]
    layers = decoder_attention_layers(model, num_layers)
    generation_config = _greedy_generation_config(model, processor.tokenizer, max_new_tokens)
    with torch.inference_mode(), GeneratedRowRecorder(layers, prompt_length, columns) as recorder:
        sequence = model.generate(**inputs, generation_config=generation_config)[0]
    positions, rows = recorder.rows()
    generated = sequence[prompt_length:].tolist()
    if not positions:
        raise ValueError("the model generated a single token, so no generated token attended to the images")
    positions, rows, selection, note = _query_rows(positions, rows, generated, prompt_length, tokens,
                                                   processor.tokenizer)
    mean_row = rows.mean(0).double().cpu()
    token_maps, start = [], 0
    for image_positions, (t, h, w) in spans:
        token_maps.append(mean_row[start:start + image_positions.numel()].reshape(t, h, w).sum(0).numpy())
        start += image_positions.numel()
    grid_maps = [resize_to_grid(m, grid_size, resize_mode) for m in token_maps]
    return SampleAttention(
        id=sample.id, source_maps=grid_maps[:-1], edited_map=grid_maps[-1], token_maps=token_maps,
        image_shares=[float(m.sum()) for m in token_maps], query_positions=list(positions),
        token_selection=selection, note=note, layers=[i for i, _ in layers], sequence_ids=sequence.tolist(),
        prompt_length=int(prompt_length),
        generated_text=processor.tokenizer.decode(generated, skip_special_tokens=False))
