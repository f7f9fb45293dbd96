"""Attention maps of a Qwen3-VL generative judge over its input images, and the attention-collapse metrics on them
(SpatialReward paper, arXiv 2602.07458, sec. 5.4 / Table 5, appendix C.1).

:func:`extract_attention_maps` builds C.1's map per image for one edit: the attention from the generated reasoning
tokens to the image tokens, averaged over the last 5 layers and all heads, on a 24 x 24 grid.

1. The SC prompt is built and generated as :meth:`SpatialRewardModel.evaluate_edits` does (greedy, one pass).
2. Attention weights exist only in eager attention, so the language model is switched to it once, with a message
   (:func:`use_eager_attention`); the switch stays on the model.
3. Hooks on the last ``num_layers`` decoder layers keep, per decoding step, only the new token's row over the
   image-token columns, averaged over heads (``output_attentions`` is never requested, so memory stays small).
4. Query tokens: ``tokens="reasoning"`` (default, as C.1) keeps the tokens of the SC answer's ``"reasoning"``
   string; without one (an untrained judge) all generated tokens are used and ``SampleAttention.note`` says so.
5. Each image's tokens (``<|image_pad|>``, split by ``image_grid_thw``) are reshaped to their merged grid, resized
   to ``grid_size x grid_size`` (``resize_mode="area"`` by default, or ``"bilinear"``; the paper names none) and
   normalised to sum 1.

The metrics are pure numpy on maps of any 2-D shape, each normalised to sum 1 first: :func:`entropy` (nats, so a
uniform 24 x 24 map gives ``log(576)``), :func:`entropy_gap` (``|H(A_src) - H(A_edit)|``),
:func:`concentration_index` (mass of the top 10 % of cells), :func:`inter_sample_stability` (mean Pearson
correlation between distinct samples' source maps; constant maps left out), :func:`source_map` (the mean of the
per-source maps for an edit with several sources) and :func:`summarize` (mean and population std, ``ddof=0``).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..hub.image_io import DEFAULT_MAX_IMAGE_PIXELS
from ..hub.processing_miescore import as_edit_sample, image_size_kwargs

TOP_FRACTION = 0.1  # C.1: "the cumulative probability mass of the top 10% tokens"


def normalize_map(attention_map) -> np.ndarray:
    """``attention_map`` as a float64 array summing to 1; ValueError for negative, non-finite or all-zero maps."""
    array = np.asarray(attention_map, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(f"an attention map must be 2-D (rows x columns), got shape {array.shape}")
    if array.size == 0 or not np.isfinite(array).all():
        raise ValueError("an attention map must be non-empty and finite")
    if (array < 0).any():
        raise ValueError(f"an attention map must be non-negative (minimum {array.min():.3g})")
    total = array.sum()
    if total <= 0:
        raise ValueError("an attention map must have positive mass (all cells are zero)")
    return array / total


def entropy(attention_map) -> float:
    """Shannon entropy in nats of the normalised map (C.1); 0 for a one-hot map, ``log(cells)`` for a uniform one."""
    p = normalize_map(attention_map).ravel()
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


def entropy_gap(source, edited) -> float:
    """Balance ``|H(A_src) - H(A_edit)|`` (C.1)."""
    return abs(entropy(source) - entropy(edited))


def concentration_index(attention_map, top_fraction: float = TOP_FRACTION) -> float:
    """Mass of the ``ceil(top_fraction * cells)`` largest cells of the normalised map (C.1 "Conc.")."""
    if not 0 < top_fraction <= 1:
        raise ValueError(f"top_fraction must lie in (0, 1], got {top_fraction}")
    p = np.sort(normalize_map(attention_map).ravel())[::-1]
    top = max(1, math.ceil(top_fraction * p.size - 1e-9))  # 1e-9: 0.1 * 570 must stay 57, not 58
    return float(p[:top].sum())


def source_map(source_maps: Sequence) -> np.ndarray:
    """``A_src``: the mean of the normalised per-source maps (the map itself for one source); sums to 1."""
    if len(source_maps) == 0:
        raise ValueError("an edit needs at least one source map")
    maps = [normalize_map(m) for m in source_maps]
    if len({m.shape for m in maps}) > 1:
        raise ValueError(f"source maps must share one shape, got {sorted({m.shape for m in maps})}")
    return np.mean(maps, axis=0)


def _flatten(maps: Sequence) -> np.ndarray:
    arrays = [np.asarray(m, dtype=np.float64) for m in maps]
    if len({a.shape for a in arrays}) > 1:
        raise ValueError(f"maps must share one shape, got {sorted({a.shape for a in arrays})}")
    return np.stack([a.ravel() for a in arrays]) if arrays else np.zeros((0, 0))


def pairwise_correlations(maps: Sequence) -> np.ndarray:
    """``(n, n)`` Pearson correlations of the flattened maps; NaN on the diagonal and for constant maps."""
    flat = _flatten(maps)
    centred = flat - flat.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(centred, axis=1)
    constant = norms <= 1e-9 * np.linalg.norm(flat, axis=1)  # rounding leaves ~1e-18 for a uniform map
    safe = np.where(constant, 1.0, norms)
    corr = np.clip((centred @ centred.T) / np.outer(safe, safe), -1.0, 1.0)
    corr[constant, :] = np.nan
    corr[:, constant] = np.nan
    np.fill_diagonal(corr, np.nan)
    return corr


def stability_per_sample(maps: Sequence) -> np.ndarray:
    """For each map, its mean correlation with every other sample's map (NaN when it has none)."""
    corr = pairwise_correlations(maps)
    with np.errstate(invalid="ignore"):
        valid = ~np.isnan(corr)
        counts = valid.sum(axis=1)
        sums = np.where(valid, corr, 0.0).sum(axis=1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def inter_sample_stability(maps: Sequence) -> float:
    """Stability (C.1): the mean Pearson correlation over distinct pairs of maps; NaN with fewer than 2 usable maps."""
    values = _pair_values(pairwise_correlations(maps))
    return float(values.mean()) if values.size else float("nan")


def _pair_values(corr: np.ndarray) -> np.ndarray:
    upper = corr[np.triu_indices(corr.shape[0], k=1)] if corr.size else np.zeros(0)
    return upper[~np.isnan(upper)]


def sample_metrics(source_maps: Sequence, edited_map) -> dict:
    """The per-edit values: ``entropy_gap``, ``source_entropy``, ``edited_entropy``, ``concentration`` (of
    ``A_src``: C.1 groups it with source awareness) and ``edited_concentration``."""
    src = source_map(source_maps)
    h_src, h_edit = entropy(src), entropy(edited_map)
    return {"entropy_gap": abs(h_src - h_edit), "source_entropy": h_src, "edited_entropy": h_edit,
            "concentration": concentration_index(src), "edited_concentration": concentration_index(edited_map)}


def summarize(values: Iterable[float]) -> dict:
    """``{"mean", "std", "n"}`` over the finite values (None for mean / std when there are none)."""
    array = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if array.size == 0:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": float(array.mean()), "std": float(array.std()), "n": int(array.size)}


def stability_summary(maps: Sequence) -> dict:
    """Stability as ``{"mean", "std", "n"}`` over the distinct pairs (Table 5 "Corr." with its spread)."""
    values = _pair_values(pairwise_correlations(maps))
    return summarize(values.tolist())


if TYPE_CHECKING:  # torch is imported where it is used, so `miescore --help` does not pay for it
    import torch


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
    from ..hub.modeling_spatialreward import sc_messages  # deferred: loads torch, transformers

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
    return list(zip(positions.split(counts), grids))


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
    per_image = rows.mean(0).double().cpu().split([image.numel() for image, _ in spans])
    token_maps = [row.reshape(grid).sum(0).numpy() for row, (_, grid) in zip(per_image, spans)]
    grid_maps = [resize_to_grid(m, grid_size, resize_mode) for m in token_maps]
    return SampleAttention(
        id=sample.id, source_maps=grid_maps[:-1], edited_map=grid_maps[-1], token_maps=token_maps,
        image_shares=[float(m.sum()) for m in token_maps], query_positions=list(positions),
        token_selection=selection, note=note, layers=[i for i, _ in layers], sequence_ids=sequence.tolist(),
        prompt_length=int(prompt_length),
        generated_text=processor.tokenizer.decode(generated, skip_special_tokens=False))


__all__ = ["DEFAULT_GRID_SIZE", "DEFAULT_NUM_LAYERS", "GeneratedRowRecorder", "RESIZE_MODES", "SampleAttention",
           "TOKEN_SELECTIONS", "TOP_FRACTION", "concentration_index", "decoder_attention_layers", "entropy",
           "entropy_gap", "extract_attention_maps", "image_token_spans", "inter_sample_stability", "normalize_map",
           "pairwise_correlations", "reasoning_char_span", "reasoning_token_mask", "resize_to_grid",
           "sample_metrics", "sc_prompt_inputs", "source_map", "stability_per_sample", "stability_summary",
           "summarize", "use_eager_attention"]
