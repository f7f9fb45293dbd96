"""SpatialReward: a generative edit reward that localises the edited regions, reasons about them and scores.

Paper: arXiv 2602.07458. Two streams per edit (sec. 3.2), run as one batch:

* SC (semantic consistency): source image(s) + edited image + the D.1.1 / D.1.2 prompt ->
  ``{"edit_region": [{"id", "label", "bbox_2d"}], "reasoning": "... <|bbox_i|> ... <|global|> ...",
  "score": [s_if, s_con]}``;
* PQ (perceptual quality): the edited image only + the D.1.3 prompt -> ``{"reasoning", "score": [s_nat, s_art]}``.

Sub-scores are on 0-25; the reward is ``(SC/25)^0.8 * (PQ/25)^0.2`` with ``SC = 0.6 s_if + 0.4 s_con`` and
``PQ = 0.5 s_nat + 0.5 s_art`` (sec. 3.1 / 5.4; ``spatialreward_aggregation.spatial_reward``). A generation
that cannot be parsed gives ``config.failure_reward`` and is flagged; it never raises and never becomes a random number.

Edits of the same sources and instruction (an RL group of G candidates, a MIE-Bench instance) share the SC
prompt up to the edited image; under greedy decoding that prefix runs once and every edit generates from a copy
of its KV cache (``SharedPromptPrefix``; how and why it is exact: ``prefix_reuse``'s module docstring).
The result type, parsing and aggregation live in ``spatialreward_judgement`` (shared with the API backend);
the batching in ``batched_scoring``.

Hub file: copied into every saved checkpoint and loaded with ``trust_remote_code=True``; it imports only
torch, transformers, tqdm (through ``batched_scoring``) and huggingface_hub (through ``model_card``), both hard
dependencies of transformers, and its flat siblings (``pipeline_miescore``: the ``image-edit-scoring`` pipeline).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

from .batched_scoring import PrefixGrouping, checked_batch_size, eval_mode, score_in_batches
from .configuration_spatialreward import SpatialRewardConfig
from .image_io import DEFAULT_MAX_IMAGE_PIXELS
from .prefix_reuse import build_prefix_cache, generate_from_prefix, pack_rows_after_prefix, rope_positions
from .processing_miescore import DEFAULT_MAX_SAMPLE_PIXELS, EditSample, image_size_kwargs, num_image_tokens
from .spatialreward_judgement import SpatialRewardResult, SpatialRewardScoringMixin, assemble_result
from .spatialreward_tokens import strip_control_tokens
from .model_card import CheckpointModel

# ------------------------------------------------------------------------------------------------------------
# Prompts of the two streams (appendix D.1) and the SC prefix that edits of one group share
# ------------------------------------------------------------------------------------------------------------


def sc_messages(config, num_sources: int, instruction: str) -> List[Dict[str, Any]]:
    """Chat messages of the SC stream: the source images, the edited image, then the D.1.1/D.1.2 text (images
    first, as in the released inference code)."""
    content = [{"type": "image"} for _ in range(num_sources + 1)]
    content.append({"type": "text", "text": config.sc_text(instruction, num_sources)})
    return [{"role": "user", "content": content}]


def pq_messages(config) -> List[Dict[str, Any]]:
    """Chat messages of the PQ stream: the edited image alone, then the D.1.3 text (sec. 3.2 input isolation)."""
    return [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": config.pq_text()}]}]


def estimate_prompt_tokens(sample: EditSample, config) -> int:
    """Image tokens of the SC + PQ prompts of a loaded sample (sources, edited image twice): sorts batches by
    length; the text, the same for every sample, is left out."""
    return sum(num_image_tokens(*image.size, min_pixels=config.min_pixels, max_pixels=config.max_pixels)
               for image in [*sample.sources, sample.edited, sample.edited])


class _Prompt(tuple):
    """An ``(images, messages)`` prompt (a plain 2-tuple to every consumer) that may name a shared prefix."""

    shared: Optional["SharedPromptPrefix"] = None


class SharedPromptPrefix:
    """The SC prompt prefix ``[chat start, source images, <|vision_start|>]`` shared by edits of the same sources
    and instruction, run once into a KV cache; each edit's row is its image placeholders + the constant closing
    tokens. Built lazily (:meth:`prepare`), so code that replaces ``_generate_texts`` never runs the model.
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
        self.cache = build_prefix_cache(model.model, self.prefix_ids, self.prefix_positions[:, None],
                                        pixel_values=full["pixel_values"][:source_rows].to(model.device, model.dtype),
                                        image_grid_thw=self.source_grids.to(model.device))


def _decode_rows(new_tokens: torch.Tensor, tokenizer, passes: int) -> List[List[str]]:
    """Generated tokens `(prompts * passes, new)` -> per prompt, ``passes`` texts without chat-control tokens
    (special tokens are kept: grounding tokens may be registered as such)."""
    extra = [tokenizer.pad_token] if tokenizer.pad_token else []
    decoded = [strip_control_tokens(tokenizer.decode(row, skip_special_tokens=False), extra)
               for row in new_tokens.cpu()]
    return [decoded[i * passes:(i + 1) * passes] for i in range(len(decoded) // passes)]


# ------------------------------------------------------------------------------------------------------------
# The transformers model
# ------------------------------------------------------------------------------------------------------------


class SpatialRewardModel(SpatialRewardScoringMixin, CheckpointModel, Qwen3VLForConditionalGeneration):
    """Qwen3-VL judge with SpatialReward's prompts, parsing and aggregation (paper sec. 3, appendix D.1). Loads
    our checkpoints and the authors' plain Qwen3-VL ones (same weights layout; the paper's defaults as config)."""

    config_class = SpatialRewardConfig
    checkpoint_auto_map = {
        "AutoConfig": "configuration_spatialreward.SpatialRewardConfig",
        "AutoModel": "modeling_spatialreward.SpatialRewardModel",
        "AutoModelForImageTextToText": "modeling_spatialreward.SpatialRewardModel",
    }

    def __init__(self, config: SpatialRewardConfig):
        super().__init__(config)
        self.processor = None  # a Qwen3VLProcessor; loaded from the checkpoint folder on first use

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
        """Per ``(images, messages)`` prompt, ``config.num_passes`` decoded texts, from ONE ``generate`` call
        (prompts carrying a ``SharedPromptPrefix`` continue copies of its KV cache: ``_generate_after_prefix``)."""
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
                          **image_size_kwargs(config))
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
        """Prefix reuse is used only where it reproduces the plain path's texts: greedy decoding (a sampled row's
        draws depend on the batch's composition) and no forced ``cache_implementation`` (it conflicts with ours)."""
        config = self.config
        sampling = bool(config.do_sample) or int(config.num_passes) > 1
        forced_cache = getattr(self.generation_config, "cache_implementation", None) is not None
        return not sampling and not forced_cache

    @torch.inference_mode()
    def _generate_after_prefix(self, prompts, processor, shared: SharedPromptPrefix) -> List[List[str]]:
        """One greedy ``generate`` call: prompts of ``shared`` continue its cached prefix, the rest run alone
        (row layout: ``prefix_reuse.pack_rows_after_prefix``; why it is exact: ``prefix_reuse``'s docstring). Only
        the rows' own images are passed, so each edited image is encoded once per row, as in the plain path."""
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

    def evaluate_edits(self, samples: Sequence, batch_size: int = 8, processor=None, progress: bool = False,
                       max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, reuse_prefix: bool = True,
                       groups: Optional[Sequence] = None,
                       max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS) -> List[SpatialRewardResult]:
        """Judge many edits (as :meth:`MIEScoreModel.score_batch` takes them); one :class:`SpatialRewardResult`
        per sample, in input order. Each ``generate`` call runs the SC and PQ prompts of ``batch_size`` samples.

        ``reuse_prefix``: edits that share sources and instruction (by content, or one ``groups`` id per sample,
        checked) run their common SC prefix once; greedy texts equal the plain path's to float rounding (fp32 logits
        differ by ~1e-6, so only exact near-ties could flip; bf16 ~1e-2); sampling always uses the plain path.
        Images are decoded at full size (region boxes are given in its pixels). ``MIEScoreInputError`` for unusable
        inputs; strange generations never raise: they give ``config.failure_reward`` and ``failed=True``.
        """
        batch_size = checked_batch_size(batch_size)
        processor = processor or self.get_processor()
        grouping = None
        if reuse_prefix:  # explicit groups are checked even when sampling keeps the plain path
            grouping = PrefixGrouping(share=self._reuse_is_exact(), batch_size=batch_size,
                                      open=SharedPromptPrefix, close=SharedPromptPrefix.release)
        with eval_mode(self):
            return score_in_batches(
                samples, lambda loaded, shared: self._judge_batch(loaded, processor, shared),
                batch_size=batch_size, max_image_pixels=max_image_pixels, max_sample_pixels=max_sample_pixels,
                length=lambda sample: estimate_prompt_tokens(sample, self.config), group_ids=groups,
                grouping=grouping, progress=progress, desc="SpatialReward")

    def _judge_batch(self, samples: List[EditSample], processor,
                     shared: Optional[SharedPromptPrefix]) -> List[SpatialRewardResult]:
        """SC and PQ prompts of loaded samples in one ``generate`` call (SC rows continue ``shared`` if given)."""
        prompts = [SharedPromptPrefix.prompt([*s.sources, s.edited],
                                             sc_messages(self.config, len(s.sources), s.instruction), shared)
                   for s in samples]
        prompts += [SharedPromptPrefix.prompt([s.edited], pq_messages(self.config)) for s in samples]
        texts = self._generate_texts(prompts, processor)
        return [assemble_result(self.config, len(s.sources), s.edited.size, texts[k], texts[len(samples) + k],
                                sample_id=s.id, backend="transformers") for k, s in enumerate(samples)]


SpatialRewardConfig.register_for_auto_class()
SpatialRewardModel.register_for_auto_class("AutoModelForImageTextToText")

__all__ = ["SharedPromptPrefix", "SpatialRewardModel", "estimate_prompt_tokens", "pq_messages", "sc_messages"]
