"""MIEScore: a VLM backbone with a 3-output regression head (MIEScore paper, "Model Architecture").

The paper's backbone is Qwen3-VL; any transformers-native image-text-to-text model whose base model returns
``last_hidden_state`` can be one (Table 5 compares Qwen2.5-VL and InternVL3.5): ``backbone_families`` says what
differs between families. The score head is ``config.score_head``, one of ``miescore_score_heads.SCORE_HEADS``: the
paper's regression MLP, or none (``lm_digits``, Table 5 rows 1 and 4: the language model's digit probabilities,
``lm_digit_scores``); the model asks its head, never the head's name.

Hub file: copied into every saved checkpoint and loaded with ``trust_remote_code=True``. It imports only
torch, transformers and the flat sibling files below (through them numpy, Pillow, and tqdm and huggingface_hub,
hard dependencies of transformers). Batching: ``batched_scoring``; shared-prefix reuse: ``prefix_reuse``;
the ``image-edit-scoring`` pipeline: ``pipeline_miescore``; the model card: ``model_card``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Sequence

import torch
from torch import nn
from transformers import AutoModel, AutoModelForImageTextToText, PreTrainedModel
from transformers.utils import ModelOutput

from .backbone_families import family_of
from .batched_scoring import PrefixGrouping, checked_batch_size, eval_mode, score_in_batches
from .configuration_miescore import SCORE_NAMES, MIEScoreConfig
from .image_io import DEFAULT_MAX_IMAGE_PIXELS
from .miescore_overall import overall_score
from .miescore_score_heads import last_token_indices, score_head_class
from .prefix_reuse import SharedPrefixInputs, prepare_shared_prefix, shared_prefix_hidden_states
from .processing_miescore import (DEFAULT_MAX_SAMPLE_PIXELS, EditSample, estimate_num_tokens, load_stock_processor,
                                  prepare_inputs)
from .model_card import CheckpointModel


@dataclass
class MIEScoreOutput(ModelOutput):
    """Output of :meth:`MIEScoreModel.forward`.

    Args:
        scores (`torch.FloatTensor` of shape `(batch_size, num_scores)`): sigmoid outputs in [0, 1], one per
            `config.score_names` (multiply by `config.score_scale` for the 0-100 MOS scale).
        logits (`torch.FloatTensor` of shape `(batch_size, num_scores)`): head outputs before the sigmoid
            (`lm_digits`: `(batch_size, num_scores, lm_score_max + 1)`, the digit logits of each score).
        pooled_hidden_state (`torch.FloatTensor` of shape `(batch_size, hidden_size)`): the backbone's last
            hidden state at each row's last non-pad token (`lm_digits`: `(batch_size, num_scores, hidden_size)`,
            where each score was read).
    """

    scores: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    pooled_hidden_state: torch.FloatTensor | None = None


@dataclass
class PreparedScoring:
    """What :meth:`MIEScoreModel.prepare_batch` built: the CPU inputs of each model call (a ``BatchFeature`` of
    full prompts, or a ``prefix_reuse.SharedPrefixInputs`` group), where each sample's result will be
    (``slots[i] = (call, row)``), and the batch size the calls run with."""

    calls: list
    slots: list
    batch_size: int

    def __len__(self) -> int:
        return len(self.slots)


class MIEScoreModel(CheckpointModel, PreTrainedModel):
    """Scores a multi-source edit on visual quality, instruction following and attribute preservation: the
    backbone reads the labelled sources, the instruction and the edited image; the head gives scores in [0, 1]."""

    config_class = MIEScoreConfig
    base_model_prefix = "backbone"
    main_input_name = "input_ids"
    input_modalities = ("image", "text")
    supports_gradient_checkpointing = True
    # _no_split_modules: collected from the backbone by post_init (its decoder layers and vision blocks)
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_attention_backend = True

    def __init__(self, config: MIEScoreConfig):
        super().__init__(config)
        self.backbone = AutoModel.from_config(config.backbone_config)
        hidden_size = config.backbone_config.get_text_config().hidden_size
        self.head = score_head_class(config.score_head).from_config(config, hidden_size)
        self.processor = None  # the backbone's processor; loaded from the checkpoint folder on first use
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, nn.Linear) and any(module is m for m in self.head.modules()):
            std = getattr(self.config.backbone_config.get_text_config(), "initializer_range", 0.02)
            nn.init.normal_(module.weight, mean=0.0, std=std)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        else:
            super()._init_weights(module)

    def get_input_embeddings(self):
        return self.backbone.get_input_embeddings()

    def set_input_embeddings(self, value):
        self.backbone.set_input_embeddings(value)

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        pixel_values: torch.Tensor | None = None,
        image_grid_thw: torch.LongTensor | None = None,
        mm_token_type_ids: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        answer_digits: torch.LongTensor | None = None,
        **kwargs,
    ) -> MIEScoreOutput:
        """Score a batch prepared by :func:`processing_miescore.prepare_inputs` (the backbone processor's inputs).

        ``answer_digits`` `(batch_size, num_scores)`: `lm_digits` training only, the digits written into the
        teacher-forced answer. Inputs that are None are not passed, so each family gets only what its forward takes.
        """
        if attention_mask is None:
            batch, length = (input_ids if input_ids is not None else inputs_embeds).shape[:2]
            device = (input_ids if input_ids is not None else inputs_embeds).device
            attention_mask = torch.ones(batch, length, dtype=torch.long, device=device)
        kwargs.pop("labels", None)  # losses live in the trainer (modeling_miescore.training.losses)
        given = dict(input_ids=input_ids, attention_mask=attention_mask, pixel_values=pixel_values,
                     image_grid_thw=image_grid_thw, mm_token_type_ids=mm_token_type_ids, position_ids=position_ids,
                     inputs_embeds=inputs_embeds, **kwargs)
        inputs = {key: value for key, value in given.items() if value is not None}
        scores, logits, pooled = self.head.score(self.backbone, inputs, attention_mask, self.config, self.training,
                                                 answer_digits)
        return MIEScoreOutput(scores=scores, logits=logits, pooled_hidden_state=pooled)

    # ------------------------------------------------------------------ scoring API

    def scores_to_dicts(self, scores: torch.Tensor) -> list[dict[str, float]]:
        """(B, num_scores) sigmoid outputs -> list of ``{score_name: value, "overall": value}`` on the MOS scale."""
        scaled = scores.float().cpu() * float(self.config.score_scale)
        columns = [scaled[:, i] for i in range(scaled.shape[1])]
        overall = overall_score(*[c.numpy() for c in columns], weights=self.config.overall_weights)
        results = []
        for row in range(scaled.shape[0]):
            entry = {name: float(columns[i][row]) for i, name in enumerate(self.config.score_names)}
            entry["overall"] = float(overall[row])
            results.append(entry)
        return results

    def score(self, sources, edited, instruction: str, processor=None, **kwargs) -> dict[str, float]:
        """Score one edit (images as paths, PIL images or numpy arrays; one source may be given bare):
        ``{"visual_quality", "instruction_following", "attribute_preservation", "overall"}`` on the 0-100 scale."""
        kwargs.setdefault("reuse_prefix", False)  # one edit: no prefix to share
        return self.score_batch([{"sources": sources, "edited": edited, "instruction": instruction}],
                                batch_size=1, processor=processor, **kwargs)[0]

    def score_batch(self, samples: Sequence, batch_size: int = 8, processor=None, progress: bool = False,
                    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, reuse_prefix: bool = True,
                    groups: Sequence | None = None,
                    max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS) -> list[dict[str, float]]:
        """Score many edits (dicts ``{"sources", "edited", "instruction"}``, :class:`EditSample` or 3-tuples);
        results in input order.

        Edits that share sources and instruction (found by content, or one ``groups`` id per sample) run their
        shared prompt prefix once (``reuse_prefix``; exact, tested, for Qwen-VL and InternVL backbones with the
        regression head; elsewhere it warns once with the reason). Images are checked from their headers before
        decoding (``max_image_pixels``, ``max_sample_pixels``, aspect ratio); unusable input raises
        ``MIEScoreInputError`` naming the sample or image.
        """
        checked_batch_size(batch_size)
        processor = processor or self.get_processor()
        share = self._shares_prefix(reuse_prefix)

        def score(loaded: list, shared) -> list:
            return self._run_call(self._prepare_call(loaded, shared, processor), batch_size)

        with eval_mode(self):
            return self._in_batches(samples, score, batch_size, max_image_pixels, max_sample_pixels, share, groups,
                                    progress)

    def prepare_batch(self, samples: Sequence, batch_size: int = 8, processor=None,
                      max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, reuse_prefix: bool = True,
                      groups: Sequence | None = None,
                      max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS) -> PreparedScoring:
        """Everything :meth:`score_batch` does before the forward passes, for all samples at once (CPU tensors):
        ``score_prepared(prepare_batch(samples, ...)) == score_batch(samples, ...)``, so a server can prepare batch
        N+1 on another thread while the model runs batch N."""
        checked_batch_size(batch_size)
        processor = processor or self.get_processor()
        share = self._shares_prefix(reuse_prefix)
        calls: list = []

        def prepare(loaded: list, shared) -> list:
            calls.append(self._prepare_call(loaded, shared, processor))
            return [(len(calls) - 1, row) for row in range(len(loaded))]

        slots = self._in_batches(samples, prepare, batch_size, max_image_pixels, max_sample_pixels, share, groups,
                                 False)
        return PreparedScoring(calls=calls, slots=slots, batch_size=int(batch_size))

    def score_prepared(self, prepared: PreparedScoring) -> list[dict[str, float]]:
        """Run the forward passes of :meth:`prepare_batch`; results in the order of its samples."""
        with eval_mode(self):
            outputs = [self._run_call(call, prepared.batch_size) for call in prepared.calls]
        return [outputs[call][row] for call, row in prepared.slots]

    def _shares_prefix(self, reuse_prefix: bool) -> bool:
        """``reuse_prefix`` where this model can reuse a prefix; warns when it was asked for and cannot."""
        share = reuse_prefix and self.prefix_reuse_available
        if reuse_prefix and not share:
            warnings.warn(f"reuse_prefix: {self.prefix_reuse_unavailable_reason()}; every edit is scored with the "
                          "full prompt (results are the same, only slower)", stacklevel=3)
        return share

    def _in_batches(self, samples, step, batch_size, max_image_pixels, max_sample_pixels, share: bool, groups,
                    progress) -> list:
        return score_in_batches(samples, step, batch_size=batch_size, max_image_pixels=max_image_pixels,
                                max_sample_pixels=max_sample_pixels, target_pixels=int(self.config.max_pixels),
                                length=lambda sample: estimate_num_tokens(sample, self.config), group_ids=groups,
                                grouping=PrefixGrouping() if share else None, progress=progress, desc="scoring")

    def _prepare_call(self, loaded: Sequence[EditSample], shared, processor):
        """The CPU inputs of one model call: a group sharing its prefix, or a padded batch of full prompts."""
        if shared:
            return prepare_shared_prefix(self.backbone, processor, loaded, self.config)
        return prepare_inputs(processor, loaded, self.config)

    def prefix_reuse_unavailable_reason(self) -> str | None:
        """Why :meth:`score_batch` cannot reuse a shared prompt prefix with this model, or None when it can."""
        family = family_of(self.config)
        if not family.prefix_reuse:
            return (f"prefix reuse is implemented (and tested exact) for Qwen-VL and InternVL backbones, not for "
                    f"model_type {self.config.backbone_config.model_type!r}")
        if self.head.prefix_reuse_unavailable:
            return self.head.prefix_reuse_unavailable
        if self.config.image_order != "sources_first":
            return "the edited image is not last in the prompt (image_order='edited_first')"
        return None

    @property
    def prefix_reuse_available(self) -> bool:
        """True when :meth:`score_batch` runs the prompt prefix shared by edits of the same sources once."""
        return self.prefix_reuse_unavailable_reason() is None

    @torch.inference_mode()
    def _run_call(self, inputs, batch_size: int) -> list[dict[str, float]]:
        if isinstance(inputs, SharedPrefixInputs):
            hidden = shared_prefix_hidden_states(self.backbone, inputs, batch_size)
            return self.scores_to_dicts(self.head.scores_from_hidden(hidden))
        batch = inputs.to(self.device)
        if batch.get("pixel_values") is not None:
            batch["pixel_values"] = batch["pixel_values"].to(self.dtype)
        return self.scores_to_dicts(self(**batch).scores)

    # ------------------------------------------------------------------ construction and saving

    @classmethod
    def from_backbone(cls, backbone, processor=None, dtype=None, **config_kwargs) -> "MIEScoreModel":
        """Start a new scorer from a plain VLM checkpoint (path, repo id or loaded model): Qwen3-VL as in the paper
        (``Qwen/Qwen3-VL-8B-Instruct``), Qwen2.5-VL, InternVL3.5 (``OpenGVLab/InternVL3_5-8B-HF``) or any other whose
        base model returns ``last_hidden_state``. ``config_kwargs``: any :class:`MIEScoreConfig` field; the head
        initialises itself (``ScoreHead.init_from_backbone``; ``lm_digits`` keeps the language model's digit rows
        and needs the ``*ForConditionalGeneration`` with its processor)."""
        head = score_head_class(config_kwargs.get("score_head", cls.config_class.score_head))
        if isinstance(backbone, (str, os.PathLike)):
            path = os.fspath(backbone)
            auto = AutoModelForImageTextToText if head.needs_lm_output_layer else AutoModel
            backbone = auto.from_pretrained(path, dtype=dtype) if dtype else auto.from_pretrained(path)
            if processor is None:
                processor = load_stock_processor(path)
        output_layer = backbone.get_output_embeddings()
        base = backbone.base_model if output_layer is not None else backbone  # keep the *Model of a *ForCG
        defaults = {"score_names": list(SCORE_NAMES), "lm_score_max": cls.config_class.lm_score_max}
        config_kwargs.update(head.config_fields(processor, output_layer, {**defaults, **config_kwargs}))
        config = cls.config_class(backbone_config=base.config.to_dict(), **config_kwargs)
        with torch.device("meta"):
            model = cls(config)
        model.backbone = base
        model.head.to_empty(device=base.device)
        model.head.to(base.dtype)
        with torch.no_grad():
            model.head.init_from_backbone(output_layer, config, model._init_weights)
        model.processor = processor
        return model


MIEScoreConfig.register_for_auto_class()
MIEScoreModel.register_for_auto_class("AutoModel")

__all__ = ["MIEScoreModel", "MIEScoreOutput", "PreparedScoring", "last_token_indices"]
