"""SpatialReward: a generative edit reward that localises the edited regions, reasons about them and scores.

Paper: arXiv 2602.07458. Two streams per edit (sec. 3.2), run as one batch:

* SC (semantic consistency): source image(s) + edited image + the D.1.1 / D.1.2 prompt ->
  ``{"edit_region": [{"id", "label", "bbox_2d"}], "reasoning": "... <|bbox_i|> ... <|global|> ...",
  "score": [s_if, s_con]}``;
* PQ (perceptual quality): the edited image only + the D.1.3 prompt -> ``{"reasoning", "score": [s_nat, s_art]}``.

Sub-scores are on 0-25; the reward is ``(SC/25)^0.8 * (PQ/25)^0.2`` with ``SC = 0.6 s_if + 0.4 s_con`` and
``PQ = 0.5 s_nat + 0.5 s_art`` (sec. 3.1 / 5.4; ``aggregation.spatial_reward``). A generation that cannot be
parsed gives ``config.failure_reward`` and is flagged; it never raises and never becomes a random number.

Edits of the same sources and instruction (an RL group of G candidates, a MIE-Bench instance) share the SC
prompt up to the edited image; under greedy decoding that prefix runs once and every edit generates from a copy
of its KV cache (``SharedPromptPrefix``, ``prefix_reuse``; notes/prefix-reuse-qwen3vl.md section 3).

Hub file: copied into every saved checkpoint and loaded with ``trust_remote_code=True``; it imports only
torch, transformers and its flat siblings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

from .aggregation import sc_pq, spatial_reward
from .configuration_spatialreward import SpatialRewardConfig
from .drawing import bbox_to_pixels
from .image_io import DEFAULT_MAX_IMAGE_PIXELS
from .parsing import parse_pq_output, parse_sc_output
from .prefix_reuse import (
    build_prefix_cache,
    find_groups,
    generate_from_prefix,
    pack_rows_after_prefix,
    rope_positions,
)
from .processing_miescore import (
    EditSample,
    as_edit_sample,
    image_size_kwargs,
    load_checkpoint_processor,
    load_samples,
)
from .spatialreward_tokens import strip_control_tokens

# ------------------------------------------------------------------------------------------------------------
# Result type and the backend-independent parts (prompts, parsing, aggregation), shared with openai_backend.
# ------------------------------------------------------------------------------------------------------------


@dataclass
class SpatialRewardResult:
    """The judgement of one edit.

    Fields:
        reward: float in [0, 1] (``config.failure_reward`` when ``failed``).
        failed: the SC or PQ output could not be parsed (or its API request failed); see ``failure_reasons``.
        failure_reasons: e.g. ``["sc:parse_failed"]``, ``["pq:api_error:timeout"]``; empty when not failed.
        s_if, s_con: instruction following and source consistency (SC stream, 0-25), None if missing.
        s_nat, s_art: naturalness and artifacts (PQ stream, 0-25), None if missing.
        sc, pq: the weighted sums ``w_sc . (s_if, s_con)`` and ``w_pq . (s_nat, s_art)`` on 0-25 (sec. 3.1).
        regions: ``[{"id", "label", "bbox_2d": [x1, y1, x2, y2] in 0..1000, "bbox_pixels": [x1, y1, x2, y2] in
            the edited image's pixels}]``.
        reasoning: the SC reasoning, grounding tokens in canonical form (``<|bbox_i|>``, ``<|global|>``).
        region_reasoning: ``{region id: the reasoning segment after its <|bbox_i|>}``.
        global_reasoning: the segment after ``<|global|>`` (None when absent).
        pq_reasoning: the PQ reasoning.
        sc_parse_ok, pq_parse_ok: both scores of that stream were found (``parse_ok`` is both).
        issues: ``{"sc": [...], "pq": [...]}`` parser issue codes (``parsing.ISSUE_CODES``) over all passes,
            plus ``api_error:<kind>`` for failed requests.
        raw_sc, raw_pq: the generated texts, one per pass (chat-control tokens stripped).
        num_sources: number of source images; image_size: ``(width, height)`` of the edited image.
        id: the sample's id when it had one; backend: ``"transformers"`` or ``"openai"``.
    """

    reward: float
    failed: bool
    failure_reasons: List[str] = field(default_factory=list)
    s_if: Optional[float] = None
    s_con: Optional[float] = None
    s_nat: Optional[float] = None
    s_art: Optional[float] = None
    sc: Optional[float] = None
    pq: Optional[float] = None
    regions: List[Dict[str, Any]] = field(default_factory=list)
    reasoning: str = ""
    region_reasoning: Dict[int, str] = field(default_factory=dict)
    global_reasoning: Optional[str] = None
    pq_reasoning: str = ""
    sc_parse_ok: bool = False
    pq_parse_ok: bool = False
    issues: Dict[str, List[str]] = field(default_factory=lambda: {"sc": [], "pq": []})
    raw_sc: List[str] = field(default_factory=list)
    raw_pq: List[str] = field(default_factory=list)
    num_sources: int = 1
    image_size: Tuple[int, int] = (0, 0)
    id: Optional[str] = None
    backend: str = "transformers"

    @property
    def parse_ok(self) -> bool:
        return self.sc_parse_ok and self.pq_parse_ok

    def to_dict(self) -> Dict[str, Any]:
        """JSON-serialisable dict (NaN reward becomes None; region ids as string keys)."""
        reward = self.reward if math.isfinite(self.reward) else None
        return {
            "id": self.id,
            "reward": reward,
            "failed": self.failed,
            "failure_reasons": list(self.failure_reasons),
            "s_if": self.s_if, "s_con": self.s_con, "s_nat": self.s_nat, "s_art": self.s_art,
            "sc": self.sc, "pq": self.pq,
            "regions": [dict(r, bbox_2d=list(r["bbox_2d"]), bbox_pixels=list(r["bbox_pixels"])) for r in self.regions],
            "reasoning": self.reasoning,
            "region_reasoning": {str(k): v for k, v in self.region_reasoning.items()},
            "global_reasoning": self.global_reasoning,
            "pq_reasoning": self.pq_reasoning,
            "parse_ok": self.parse_ok, "sc_parse_ok": self.sc_parse_ok, "pq_parse_ok": self.pq_parse_ok,
            "issues": {k: list(v) for k, v in self.issues.items()},
            "raw_sc": list(self.raw_sc), "raw_pq": list(self.raw_pq),
            "num_sources": self.num_sources, "image_size": list(self.image_size), "backend": self.backend,
        }


def sc_messages(config, num_sources: int, instruction: str) -> List[Dict[str, Any]]:
    """Chat messages of the SC stream: the source images, the edited image, then the D.1.1/D.1.2 text.

    Images precede the text as in the released inference code; ``{"type": "image"}`` entries are placeholders
    filled in order with ``[*sources, edited]``.
    """
    content = [{"type": "image"} for _ in range(num_sources + 1)]
    content.append({"type": "text", "text": config.sc_text(instruction, num_sources)})
    return [{"role": "user", "content": content}]


def pq_messages(config) -> List[Dict[str, Any]]:
    """Chat messages of the PQ stream: the edited image alone, then the D.1.3 text (sec. 3.2 input isolation)."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": config.pq_text()}]}]


def _mean(values: List[float]) -> Optional[float]:
    return float(sum(values) / len(values)) if values else None


def _combine(parsed: List[Any], names: Tuple[str, str]):
    """Self-ensemble: mean of each score over the passes that parsed; the first such pass carries the text."""
    ok = [p for p in parsed if p.parse_ok]
    if ok:
        scores = {n: _mean([p.scores[n] for p in ok]) for n in names}
        return scores, ok[0], True
    first = parsed[0] if parsed else None
    scores = {n: (first.scores.get(n) if first is not None else None) for n in names}
    return scores, first, False


def assemble_result(
    config,
    num_sources: int,
    image_size: Tuple[int, int],
    sc_texts: Sequence[str],
    pq_texts: Sequence[str],
    sc_errors: Optional[Sequence[Optional[str]]] = None,
    pq_errors: Optional[Sequence[Optional[str]]] = None,
    sample_id: Optional[str] = None,
    backend: str = "transformers",
) -> SpatialRewardResult:
    """Parse the SC / PQ generations of one edit (one text per pass) and aggregate them into a result.

    ``sc_errors`` / ``pq_errors``: per pass, None or an error kind (e.g. ``"timeout"``) when the text could not
    be obtained at all (API backend). Never raises for any text.
    """
    score_max = float(config.score_range)
    sc_errors = list(sc_errors) if sc_errors is not None else [None] * len(sc_texts)
    pq_errors = list(pq_errors) if pq_errors is not None else [None] * len(pq_texts)
    issues: Dict[str, List[str]] = {"sc": [], "pq": []}

    def note(stream: str, code: str):
        if code not in issues[stream]:
            issues[stream].append(code)

    sc_parsed, pq_parsed = [], []
    for text, error in zip(sc_texts, sc_errors):
        if error is not None:
            note("sc", f"api_error:{error}")
            continue
        parsed = parse_sc_output(text if isinstance(text, str) else "", num_sources=num_sources, score_max=score_max)
        sc_parsed.append(parsed)
        for code in parsed.issues:
            note("sc", code)
    for text, error in zip(pq_texts, pq_errors):
        if error is not None:
            note("pq", f"api_error:{error}")
            continue
        parsed = parse_pq_output(text if isinstance(text, str) else "", score_max=score_max)
        pq_parsed.append(parsed)
        for code in parsed.issues:
            note("pq", code)

    sc_scores, sc_main, sc_ok = _combine(sc_parsed, ("s_if", "s_con"))
    pq_scores, pq_main, pq_ok = _combine(pq_parsed, ("naturalness", "artifacts"))
    s_if, s_con = sc_scores["s_if"], sc_scores["s_con"]
    s_nat, s_art = pq_scores["naturalness"], pq_scores["artifacts"]

    kwargs = dict(w_sc=config.w_sc, w_pq=config.w_pq, score_range=score_max)
    sc_value = float(sc_pq(s_if, s_con, 0.0, 0.0, **kwargs)[0]) if s_if is not None and s_con is not None else None
    pq_value = float(sc_pq(0.0, 0.0, s_nat, s_art, **kwargs)[1]) if s_nat is not None and s_art is not None else None

    reasons = []
    for stream, ok, errors in (("sc", sc_ok, sc_errors), ("pq", pq_ok, pq_errors)):
        if ok:
            continue
        api = [e for e in errors if e is not None]
        reasons.append(f"{stream}:api_error:{api[0]}" if api and len(api) == len(errors) else f"{stream}:parse_failed")
    reward = float("nan")
    if sc_ok and pq_ok:
        reward = float(spatial_reward(s_if, s_con, s_nat, s_art, mode=config.aggregation_mode,
                                      alpha=config.alpha, **kwargs))
        if not math.isfinite(reward):  # cannot happen for parsed scores; kept so no NaN ever leaks as a reward
            reasons.append("aggregation:non_finite")
    failed = bool(reasons)
    if failed:
        reward = float(config.failure_reward)

    width, height = image_size
    regions = []
    if sc_main is not None:
        for region in sc_main.regions:
            regions.append({"id": region["id"], "label": region["label"], "bbox_2d": list(region["bbox_2d"]),
                            "bbox_pixels": bbox_to_pixels(region["bbox_2d"], width, height)})
    return SpatialRewardResult(
        reward=reward, failed=failed, failure_reasons=reasons,
        s_if=s_if, s_con=s_con, s_nat=s_nat, s_art=s_art, sc=sc_value, pq=pq_value,
        regions=regions,
        reasoning=sc_main.reasoning if sc_main is not None else "",
        region_reasoning=dict(sc_main.region_reasoning) if sc_main is not None else {},
        global_reasoning=sc_main.global_reasoning if sc_main is not None else None,
        pq_reasoning=pq_main.reasoning if pq_main is not None else "",
        sc_parse_ok=sc_ok, pq_parse_ok=pq_ok, issues=issues,
        raw_sc=[t if isinstance(t, str) else "" for t in sc_texts],
        raw_pq=[t if isinstance(t, str) else "" for t in pq_texts],
        num_sources=int(num_sources), image_size=(int(width), int(height)), id=sample_id, backend=backend,
    )


def estimate_prompt_pixels(sample: EditSample, config) -> int:
    """Pixels the SC + PQ prompts of a loaded sample feed the model (sorts batches by length)."""
    total = 0
    for image in [*sample.sources, sample.edited, sample.edited]:
        width, height = image.size
        total += min(max(width * height, config.min_pixels), config.max_pixels)
    return total


class SpatialRewardScoringMixin:
    """Conveniences built on ``evaluate_edits`` (shared by the transformers model and the API backend)."""

    def evaluate_edit(self, sources, edited, instruction: str, **kwargs) -> SpatialRewardResult:
        """Judge one edit; see ``evaluate_edits``."""
        sample = {"sources": sources, "edited": edited, "instruction": instruction}
        return self.evaluate_edits([sample], batch_size=1, **kwargs)[0]

    def score_candidates(self, sources, instruction: str, candidates: Sequence, batch_size: Optional[int] = None,
                         return_results: bool = False, **kwargs):
        """Rewards of K candidate edits of one (sources, instruction): one MER-Bench group or one RL group.

        Args:
            sources: the source image (or list of source images) shared by the candidates.
            instruction: the editing instruction.
            candidates: the K edited images.
            batch_size: samples per batch (default: all K at once, i.e. 2K prompts in one generate call).
        Returns:
            the K rewards (floats, input order), or ``(rewards, results)`` with ``return_results=True``.
            Failed candidates get ``config.failure_reward`` and are flagged in their result.
        """
        candidates = list(candidates)
        if not candidates:
            return ([], []) if return_results else []
        samples = [{"sources": sources, "edited": c, "instruction": instruction} for c in candidates]
        results = self.evaluate_edits(samples, batch_size=batch_size or len(samples), **kwargs)
        rewards = [r.reward for r in results]
        return (rewards, results) if return_results else rewards


class _Prompt(tuple):
    """An ``(images, messages)`` prompt (a plain 2-tuple to every consumer) that may name a shared prefix."""

    shared: Optional["SharedPromptPrefix"] = None


class SharedPromptPrefix:
    """The SC prompt prefix shared by edits of the same sources and instruction, run once into a KV cache.

    The SC prompt is ``[chat start, source images, <|vision_start|>] + [edited image, <|vision_end|>, D.1 text,
    assistant start]``; only the edited image's placeholders differ between edits of one group, so the first part
    is cached once (prefix_reuse.build_prefix_cache) and each edit's row is its placeholders + the constant
    closing tokens. Built lazily by :meth:`prepare` on the first ``generate`` that needs it, so code that
    replaces ``_generate_texts`` never runs the model.
    """

    def __init__(self, sample: EditSample):
        self.sample = sample
        self.cache = None

    def release(self) -> None:
        """Free the cached prefix (a later :meth:`prepare` builds it again)."""
        self.cache = None

    @staticmethod
    def prompt(images, messages, shared: Optional["SharedPromptPrefix"] = None) -> _Prompt:
        prompt = _Prompt((images, messages))
        prompt.shared = shared
        return prompt

    def placeholders(self, count: int) -> torch.Tensor:
        return self.prefix_ids.new_full((count,), self.image_token)

    @torch.inference_mode()
    def prepare(self, model, processor) -> None:
        """Tokenise the first edit's SC prompt, split it before the edited image and run the prefix (once)."""
        if self.cache is not None:
            return
        config = model.config
        sample = self.sample
        self.merge = config.vision_config.spatial_merge_size
        self.image_token = config.image_token_id
        num_sources = len(sample.sources)
        self.messages = sc_messages(config, num_sources, sample.instruction)
        text = processor.apply_chat_template(self.messages, tokenize=False, add_generation_prompt=True)
        full = processor(text=[text], images=[*sample.sources, sample.edited], return_tensors="pt",
                         **image_size_kwargs(config))
        ids, grids = full["input_ids"][0], full["image_grid_thw"]
        self.source_grids = grids[:num_sources]
        source_tokens = int(self.source_grids.prod(-1).sum()) // self.merge**2
        edit_tokens = int(grids[num_sources].prod()) // self.merge**2
        # Cut at the edited image's first placeholder (just after its <|vision_start|>): a special token, so BPE
        # merges are the same on both sides, and located by counting image tokens, not by searching the text.
        cut = int((ids == self.image_token).nonzero().flatten()[source_tokens])
        run = ids[cut:cut + edit_tokens + 1]
        if not (ids[cut - 1] == config.vision_start_token_id and bool((run[:-1] == self.image_token).all())
                and run[-1] != self.image_token):
            raise RuntimeError("unexpected SC prompt layout: cannot split it before the edited image")
        self.prefix_ids, self.closing = ids[:cut], ids[cut + edit_tokens:]
        self.prefix_positions = rope_positions(model.model, ids, grids)[:, :cut]
        source_rows = int(self.source_grids.prod(-1).sum())
        self.cache = build_prefix_cache(model.model, self.prefix_ids, full["pixel_values"][:source_rows],
                                        self.source_grids.to(model.device), self.prefix_positions)


def _decode_rows(new_tokens: torch.Tensor, tokenizer, passes: int) -> List[List[str]]:
    """Generated tokens `(prompts * passes, new)` -> per prompt, ``passes`` texts without chat-control tokens.

    Special tokens are kept (grounding tokens may be registered as such); pads and end markers are stripped.
    """
    extra = [tokenizer.pad_token] if tokenizer.pad_token else []
    decoded = [strip_control_tokens(tokenizer.decode(row, skip_special_tokens=False), extra)
               for row in new_tokens.cpu()]
    return [decoded[i * passes:(i + 1) * passes] for i in range(len(decoded) // passes)]


# ------------------------------------------------------------------------------------------------------------
# The transformers model
# ------------------------------------------------------------------------------------------------------------


class SpatialRewardModel(SpatialRewardScoringMixin, Qwen3VLForConditionalGeneration):
    """Qwen3-VL judge with SpatialReward's prompts, parsing and aggregation (paper sec. 3, appendix D.1).

    Loads our checkpoints (``trust_remote_code``: config with ``auto_map``, code and processor beside the
    weights) and the authors' plain Qwen3-VL checkpoints (``SpatialRewardModel.from_pretrained(path)`` builds
    a :class:`SpatialRewardConfig` from the plain config, with the paper's defaults). The weights layout is
    ``Qwen3VLForConditionalGeneration``'s, unchanged.
    """

    config_class = SpatialRewardConfig

    def __init__(self, config: SpatialRewardConfig):
        super().__init__(config)
        self.processor = None  # a Qwen3VLProcessor; loaded from the checkpoint folder on first use

    # -- processor ----------------------------------------------------------------------------------------------
    def get_processor(self):
        """The processor used by :meth:`evaluate_edits`; loaded from the checkpoint folder the first time."""
        if self.processor is None:
            self.processor = load_checkpoint_processor(self.config.name_or_path)
        return self.processor

    # -- generation ---------------------------------------------------------------------------------------------
    def _generation_config(self, tokenizer) -> GenerationConfig:
        config = self.config
        sample = bool(config.do_sample) or int(config.num_passes) > 1
        eos = [i for i in (tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id,
                           tokenizer.convert_tokens_to_ids("<|endoftext|>")) if isinstance(i, int) and i >= 0]
        eos = list(dict.fromkeys(eos))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos[0]
        # generate() fills every field left None from the checkpoint's generation_config.json (Qwen3-VL ships
        # sampling defaults such as top_k=20, top_p=0.8), so each knob that changes the output is set here.
        kwargs = dict(max_new_tokens=int(config.max_new_tokens), do_sample=sample, num_beams=1,
                      num_return_sequences=int(config.num_passes), pad_token_id=pad, eos_token_id=eos,
                      repetition_penalty=1.0, no_repeat_ngram_size=0)
        if sample:
            kwargs.update(temperature=float(config.sampling_temperature), top_p=float(config.sampling_top_p),
                          top_k=0)  # 0 disables top-k
        else:  # neutral values (transformers' defaults): greedy ignores them, and no "invalid flags" warning
            kwargs.update(temperature=1.0, top_p=1.0, top_k=50)
        return GenerationConfig(**kwargs)

    @torch.inference_mode()
    def _generate_texts(self, prompts: List[Tuple[List[Any], List[Dict[str, Any]]]], processor) -> List[List[str]]:
        """Generate for a list of ``(images, messages)`` prompts in ONE ``generate`` call.

        Prompts that carry a shared prefix (``SharedPromptPrefix.prompt``; all the same one) continue copies of
        its KV cache; the others run as independent rows of the same call (see ``_generate_after_prefix``).
        Without such prompts this is one left-padded call over the full prompts.
        Returns, per prompt, ``config.num_passes`` decoded texts. Decoding keeps special tokens (grounding
        tokens may be registered as such) and strips only chat-control tokens.
        """
        shared = {id(p.shared): p.shared for p in prompts if getattr(p, "shared", None) is not None}
        if shared:
            if len(shared) > 1:
                raise ValueError("one generate call can continue only one shared prompt prefix")
            return self._generate_after_prefix(prompts, processor, next(iter(shared.values())))
        config = self.config
        tokenizer = processor.tokenizer
        texts = [processor.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for _, m in prompts]
        images = [image for imgs, _ in prompts for image in imgs]
        batch = processor(text=texts, images=images, padding=True, padding_side="left", return_tensors="pt",
                          size={"shortest_edge": int(config.min_pixels), "longest_edge": int(config.max_pixels)})
        batch = batch.to(self.device)
        if batch.get("pixel_values") is not None:
            batch["pixel_values"] = batch["pixel_values"].to(self.dtype)
        generation_config = self._generation_config(tokenizer)
        if generation_config.do_sample and config.seed is not None:
            torch.manual_seed(int(config.seed))
        output = self.generate(**batch, generation_config=generation_config)
        n = int(generation_config.num_return_sequences or 1)
        return _decode_rows(output[:, batch["input_ids"].shape[1]:], tokenizer, n)

    def _reuse_is_exact(self) -> bool:
        """Prefix reuse is used only where it reproduces the plain path's texts: greedy decoding.

        With sampling (``do_sample`` or ``num_passes > 1``) each row's random draws depend on how the batch is
        composed, so the plain path is kept there. A checkpoint generation config that forces a
        ``cache_implementation`` conflicts with passing our own cache, so it also keeps the plain path.
        """
        config = self.config
        sampling = bool(config.do_sample) or int(config.num_passes) > 1
        forced_cache = getattr(self.generation_config, "cache_implementation", None) is not None
        return not sampling and not forced_cache

    @torch.inference_mode()
    def _generate_after_prefix(self, prompts, processor, shared: SharedPromptPrefix) -> List[List[str]]:
        """One greedy ``generate`` call: prompts of ``shared`` continue its cached prefix, the rest run alone.

        Row layout (prefix_reuse.pack_rows_after_prefix, notes/prefix-reuse-qwen3vl.md section 3 recipe E):
        ``[prefix | pads | suffix]`` for continuing rows and ``[masked prefix | pads | prompt]`` for the others,
        which then attend to exactly what a left-padded row of the plain path attends to. Positions are explicit:
        ``get_rope_index`` over each row's full sequence. Only the rows' own images are passed, so the vision
        tower and deepstack see each edited image once per row, as in the plain path.
        """
        if not self._reuse_is_exact():
            raise ValueError("prefix reuse needs greedy decoding (do_sample=False, num_passes=1)")
        tokenizer = processor.tokenizer
        size = image_size_kwargs(self.config)
        base = self.model
        shared.prepare(self, processor)
        rows, pixels, grids = [], [], []
        for prompt in prompts:
            images, messages = prompt
            if getattr(prompt, "shared", None) is not None:
                if messages != shared.messages or len(images) != len(shared.sample.sources) + 1:
                    raise ValueError("a prompt marked as continuing a shared prefix has another SC text or "
                                     "number of images than the prefix")
                edited = processor.image_processor(images=[images[-1]], return_tensors="pt", **size)
                grid = edited["image_grid_thw"]
                suffix = torch.cat([shared.placeholders(int(grid.prod()) // shared.merge**2), shared.closing])
                positions = rope_positions(base, torch.cat([shared.prefix_ids, suffix]),
                                           torch.cat([shared.source_grids, grid]))
                rows.append((suffix, positions[:, len(shared.prefix_ids):], True))
            else:
                text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
                edited = processor(text=[text], images=list(images) or None, return_tensors="pt", **size)
                grid = edited.get("image_grid_thw")
                ids = edited["input_ids"][0]
                rows.append((ids, rope_positions(base, ids, grid), False))
            if edited.get("pixel_values") is not None:
                pixels.append(edited["pixel_values"])
                grids.append(edited["image_grid_thw"])
        generation_config = self._generation_config(tokenizer)
        input_ids, attention_mask, position_ids = pack_rows_after_prefix(
            shared.prefix_ids, shared.prefix_positions, rows, generation_config.pad_token_id)
        new_tokens = generate_from_prefix(self, shared.cache, input_ids, attention_mask, position_ids,
                                          torch.cat(pixels) if pixels else None,
                                          torch.cat(grids) if grids else None, generation_config=generation_config)
        return _decode_rows(new_tokens, tokenizer, 1)

    def evaluate_edits(
        self,
        samples: Sequence,
        batch_size: int = 8,
        processor=None,
        progress: bool = False,
        max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
        reuse_prefix: bool = True,
        groups: Optional[Sequence] = None,
    ) -> List[SpatialRewardResult]:
        """Judge many edits; one :class:`SpatialRewardResult` per sample, in input order.

        Args:
            samples: dicts ``{"sources": [...], "edited": ..., "instruction": ...}`` (images as paths, PIL images
                or numpy arrays; one source may be given bare), ``EditSample`` objects or 3-tuples.
            batch_size: samples per ``generate`` call; each call runs the SC and PQ prompts of its samples
                together (2 x batch_size left-padded sequences, times ``num_passes`` when sampling). Samples are
                sorted by image budget first so that a batch holds similar lengths.
            processor: a ``Qwen3VLProcessor`` (default: the one saved beside the weights).
            reuse_prefix: edits that share sources and instruction (found by content, or given by ``groups``) run
                their common SC prefix (chat start + source images) once and generate from copies of its KV
                cache; their PQ prompts join the same ``generate`` calls. Greedy texts equal the plain path's (to
                float rounding: fp32 logits differ by ~1e-6, so only exact near-ties could flip; in bf16 the
                rounding is ~1e-2). Sampling (``do_sample`` / ``num_passes > 1``) always uses the plain path.
            groups: one hashable group id per sample; samples of one group must share sources and instruction
                (checked: ``ValueError`` otherwise). Default: grouped by content.
        Raises:
            ``MIEScoreInputError`` for unusable inputs (missing image, empty instruction, ...). Strange
            generations never raise: they give ``config.failure_reward`` and ``failed=True``.
        """
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        batch_size = int(batch_size)
        processor = processor or self.get_processor()
        normalised = [as_edit_sample(s, where=f"sample {i}") for i, s in enumerate(samples)]
        if groups is not None and len(groups) != len(normalised):
            raise ValueError(f"got {len(groups)} group ids for {len(normalised)} samples")
        results: List[Optional[SpatialRewardResult]] = [None] * len(normalised)
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(normalised), desc="SpatialReward", unit="edit")
        was_training = self.training
        self.eval()
        chunk = batch_size * 16  # images of at most this many samples are decoded at once
        try:
            for start in range(0, len(normalised), chunk):
                loaded = load_samples(normalised[start:start + chunk], max_image_pixels)
                # (sample indices, shared SC prefix or None) per generate call
                batches: List[Tuple[List[int], Optional[SharedPromptPrefix]]] = []
                singles = list(range(len(loaded)))
                if reuse_prefix:
                    # explicit groups are validated even when sampling keeps the plain path
                    chunk_groups = find_groups(loaded, None if groups is None else groups[start:start + chunk])
                    if self._reuse_is_exact():
                        singles = [g[0] for g in chunk_groups if len(g) == 1]
                        for members in (g for g in chunk_groups if len(g) > 1):
                            shared = SharedPromptPrefix(loaded[members[0]])  # run once, on first use
                            members = sorted(members, key=lambda i: estimate_prompt_pixels(loaded[i], self.config))
                            batches += [(members[b:b + batch_size], shared)
                                        for b in range(0, len(members), batch_size)]
                order = sorted(singles, key=lambda i: estimate_prompt_pixels(loaded[i], self.config))
                batches += [(order[b:b + batch_size], None) for b in range(0, len(order), batch_size)]
                for n, (idx, shared) in enumerate(batches):
                    group = [loaded[i] for i in idx]
                    prompts = [SharedPromptPrefix.prompt([*s.sources, s.edited],
                                                         sc_messages(self.config, len(s.sources), s.instruction),
                                                         shared) for s in group]
                    prompts += [SharedPromptPrefix.prompt([s.edited], pq_messages(self.config)) for s in group]
                    texts = self._generate_texts(prompts, processor)
                    if shared is not None and (n + 1 == len(batches) or batches[n + 1][1] is not shared):
                        shared.release()  # a group's batches are consecutive: its prefix KV is no longer needed
                    for k, (i, sample) in enumerate(zip(idx, group)):
                        results[start + i] = assemble_result(
                            self.config, len(sample.sources), sample.edited.size, texts[k], texts[len(group) + k],
                            sample_id=sample.id, backend="transformers")
                    if bar is not None:
                        bar.update(len(idx))
        finally:
            self.train(was_training)
            if bar is not None:
                bar.close()
        return results

    # -- saving -------------------------------------------------------------------------------------------------
    def save_pretrained(self, save_directory, *args, **kwargs):
        """Save weights (safetensors), the config with ``auto_map``, the model code and the processor beside."""
        auto_map = dict(getattr(self.config, "auto_map", None) or {})
        auto_map.update({
            "AutoConfig": "configuration_spatialreward.SpatialRewardConfig",
            "AutoModel": "modeling_spatialreward.SpatialRewardModel",
            "AutoModelForImageTextToText": "modeling_spatialreward.SpatialRewardModel",
        })
        self.config.auto_map = auto_map
        super().save_pretrained(save_directory, *args, **kwargs)
        if self.processor is not None and kwargs.get("is_main_process", True):
            self.processor.save_pretrained(save_directory)


SpatialRewardConfig.register_for_auto_class()
SpatialRewardModel.register_for_auto_class("AutoModelForImageTextToText")

__all__ = [
    "SharedPromptPrefix",
    "SpatialRewardModel",
    "SpatialRewardResult",
    "SpatialRewardScoringMixin",
    "assemble_result",
    "sc_messages",
    "pq_messages",
]
