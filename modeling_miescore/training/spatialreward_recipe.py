"""What the SpatialReward SFT and GRPO recipes (``trainers/sft_spatialreward.py``, ``trainers/grpo_spatialreward.py``)
share: loading the training rows and the model + processor, the LoRA configuration, and saving a finished run
(model, processor, JSON reports, model cards, and beside an adapter what its card's recipe needs; arXiv
2602.07458, appendix B.1)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional

from ..hub.model_card import ModelCardInfo
from ..utils.atomic_files import write_text_atomic
from .miescore_model import LORA_PROJECTIONS
from .card_inputs import card_repo_ids, local_folder, training_settings, write_adapter_card, write_card
from ..data.spatialreward_chat_examples import processor_pixel_range, set_pixel_range
from ..hub.processing_miescore import load_stock_processor
from ..hub.spatialreward_tokens import add_grounding_tokens, grounding_token_ids

logger = logging.getLogger(__name__)

__all__ = ["grounding_token_indices", "load_model_and_processor", "load_rows", "lora_settings",
           "make_lora_config", "resized_vocabulary", "run_card", "save_run", "write_run_cards"]

# What each stage's card says it is (arXiv 2602.07458, sec. 3.4, appendix B.1) and which training arguments it lists.
_STAGES = {
    "sft": ("SpatialReward (SFT)", "Stage 1 of SpatialReward (sec. 3.4, B.1.1): supervised fine-tuning on the "
            "(boxes, grounded reasoning, scores) targets, the loss on the answer tokens only. Settings of this run:",
            ("num_train_epochs", "max_steps", "learning_rate", "lr_scheduler_type", "warmup_steps", "weight_decay",
             "per_device_train_batch_size", "gradient_accumulation_steps", "bf16", "seed")),
    "grpo": ("SpatialReward (GRPO)", "Stage 2 of SpatialReward (sec. 3.4, B.1.2): online RL with GRPO on the rewards "
             "listed below (the paper's: an oracle judge's consistency verdict, appendix D.4). Settings of this run:",
             ("num_generations", "learning_rate", "beta", "loss_type", "importance_sampling_level", "epsilon",
              "epsilon_high", "scale_rewards", "num_iterations", "temperature", "top_p", "top_k",
              "repetition_penalty", "max_completion_length", "reward_weights", "num_train_epochs", "max_steps",
              "lr_scheduler_type", "warmup_steps", "per_device_train_batch_size", "gradient_accumulation_steps",
              "bf16", "seed")),
}



def load_rows(dataset_name: str, dataset_config: Optional[str] = None, split: str = "train",
              max_samples: Optional[int] = None):
    """A split of training rows: a Hub repo id or local folder (``load_dataset``), or a ``.json``/``.jsonl``/
    ``.parquet`` file (image fields may then be file paths, resolved against the current directory).
    ``max_samples``: keep only the first N rows."""
    from datasets import load_dataset

    if not dataset_name:
        raise ValueError("no dataset given: set dataset_name (Hub id, folder, or .jsonl/.json/.parquet file)")
    lowered = dataset_name.lower()
    for suffix, builder in ((".jsonl", "json"), (".json", "json"), (".parquet", "parquet")):
        if lowered.endswith(suffix):
            if not os.path.isfile(dataset_name):
                raise ValueError(f"dataset file {dataset_name!r} does not exist")
            rows = load_dataset(builder, data_files={split: dataset_name}, split=split)
            break
    else:
        rows = load_dataset(dataset_name, dataset_config, split=split)
    return rows.select(range(min(max_samples, len(rows)))) if max_samples else rows


def load_model_and_processor(model_name_or_path: str, dtype: Optional[str] = "auto",
                             attn_implementation: Optional[str] = None, add_tokens: bool = False,
                             min_pixels: Optional[int] = None, max_pixels: Optional[int] = None,
                             revision: Optional[str] = None):
    """Load a SpatialReward or plain Qwen3-VL checkpoint as :class:`SpatialRewardModel` with its processor.

    The model carries the D.1 prompts in its config (plain Qwen3-VL checkpoints get the paper's defaults), so the
    saved result is a self-contained SpatialReward checkpoint. ``add_tokens`` registers the 17 grounding
    tokens (:func:`add_grounding_tokens`); ``min_pixels``/``max_pixels`` set the processor's resize range (and
    the config's, so inference uses the training resolution). Returns ``(model, processor)``.
    """
    from ..hub.modeling_spatialreward import SpatialRewardModel  # deferred: loads torch, transformers
    kwargs: Dict[str, Any] = {"revision": revision} if revision else {}
    if dtype:
        kwargs["dtype"] = dtype
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    model = SpatialRewardModel.from_pretrained(model_name_or_path, **kwargs)
    # The stock classes built from the saved settings: a checkpoint's auto_map must not decide what code runs
    # here, and Qwen3VLProcessor.from_pretrained would ask about config.json's auto_map (see processing_miescore.load_stock_processor).
    processor = load_stock_processor(model_name_or_path, revision=revision)
    if add_tokens:
        added = add_grounding_tokens(model, processor)
        logger.info("grounding tokens: %d added to the tokenizer (%d in total)", added, len(processor.tokenizer))
    if min_pixels or max_pixels:
        set_pixel_range(processor, min_pixels, max_pixels)
        lo, hi = processor_pixel_range(processor)
        model.config.min_pixels, model.config.max_pixels = lo, hi
    model.processor = processor  # saved beside the weights by SpatialRewardModel.save_pretrained
    return model, processor


def resized_vocabulary(model, model_name_or_path: str, revision: Optional[str] = None) -> Optional[int]:
    """The model's embedding rows when they differ from the checkpoint it was loaded from (tokens were added and
    the embeddings grown), else None. Qwen checkpoints over-allocate rows, so added tokens often need none."""
    from ..hub.configuration_spatialreward import SpatialRewardConfig  # deferred: loads transformers

    kwargs = {"revision": revision} if revision else {}
    base_rows = SpatialRewardConfig.from_pretrained(model_name_or_path, **kwargs).get_text_config().vocab_size
    rows = model.get_input_embeddings().num_embeddings
    return int(rows) if rows != base_rows else None


def grounding_token_indices(processor) -> List[int]:
    """Ids of the grounding tokens when each is a single token of the tokenizer, else []."""
    ids = grounding_token_ids(getattr(processor, "tokenizer", processor))
    return sorted(ids.values()) if ids else []


def make_lora_config(model_args, processor=None, train_grounding_tokens: bool = False):
    """A ``peft.LoraConfig`` from TRL's ``ModelConfig`` (None when ``use_peft`` is off).

    Defaults to the language model's linear layers (MIEScore's ``LORA_PROJECTIONS``, matched by suffix: Qwen3-VL's
    vision blocks name their linears qkv/proj/linear_fc*, so they never touch the vision tower; the released
    recipe tunes the LM, B.1.1). With ``train_grounding_tokens`` the
    input embeddings and the LM head are trained in full (``modules_to_save``), so the 17 new tokens do not stay
    at their mean initialisation (they could never be emitted otherwise).
    """
    if not getattr(model_args, "use_peft", False):
        return None
    from peft import LoraConfig

    targets = model_args.lora_target_modules or list(LORA_PROJECTIONS)
    if isinstance(targets, list) and len(targets) == 1 and targets[0] not in ("all-linear",) and \
            any(ch in targets[0] for ch in "*\\|()"):
        targets = targets[0]  # a single regex (PEFT matches a str as a full regex, a list by suffix)
    kwargs: Dict[str, Any] = dict(r=model_args.lora_r, lora_alpha=model_args.lora_alpha,
                                  lora_dropout=model_args.lora_dropout, target_modules=targets,
                                  modules_to_save=model_args.lora_modules_to_save, use_rslora=model_args.use_rslora,
                                  use_dora=model_args.use_dora, bias="none")
    if train_grounding_tokens:
        if processor is None or not grounding_token_indices(processor):
            raise ValueError("train_grounding_tokens needs the grounding tokens in the tokenizer; "
                             "set add_grounding_tokens: true")
        # The new rows must be trained on both sides: input embeddings (to read the tokens) and the LM head (to
        # emit them). PEFT's trainable_token_indices would be cheaper, but TRL's fused LM-head loss reads
        # lm_head.weight directly and would bypass it; full copies of both matrices are what the loss sees.
        # Cost on Qwen3-VL-8B: ~1.2 B extra trainable parameters (2 x 151,936 x 4,096).
        kwargs["modules_to_save"] = list(dict.fromkeys([*(kwargs["modules_to_save"] or []), "embed_tokens",
                                                        "lm_head"]))
        kwargs["ensure_weight_tying"] = True  # tied checkpoints keep one matrix
    return LoraConfig(**kwargs)


def save_run(trainer, processor, training_args, dataset_name: str, reports: Mapping[str, Any],
             on_main_process: Optional[Callable[[], Any]] = None, card: Optional[ModelCardInfo] = None,
             base_config_overrides: Optional[Mapping[str, Any]] = None) -> Any:
    """Save a finished SFT/GRPO run: the model (or adapter) and the processor in ``output_dir``, each of
    ``reports`` (file name -> JSON-serialisable value) as ``output_dir/<name>`` (atomically), then
    ``on_main_process()`` (e.g. merging LoRA: it returns the merged folder) on the main process only, then the
    model cards of ``output_dir`` and of the merged folder (:func:`write_run_cards`, when ``card`` is given). All
    processes wait for it, and ``output_dir`` goes to the Hub when ``push_to_hub`` is set, with this card (TRL's
    generic card would replace it). Returns what ``on_main_process`` returned (None elsewhere)."""
    output_dir = training_args.output_dir
    trainer.save_model(output_dir)
    result = None
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(output_dir)
        for name, value in reports.items():
            write_text_atomic(Path(output_dir) / name, json.dumps(value, indent=2) + "\n")
        if on_main_process is not None:
            result = on_main_process()
        if card is not None:
            card = dataclasses.replace(card, repo_id=training_args.hub_model_id if training_args.push_to_hub else None)
            write_run_cards(output_dir, card, base_config_overrides or {}, merged_dir=result)
    trainer.accelerator.wait_for_everyone()
    if training_args.push_to_hub:
        if card is not None:  # push_to_hub re-saves (PEFT edits README.md) and then writes TRL's card: ours instead
            trainer.create_model_card = lambda *args, **kwargs: write_run_cards(
                output_dir, card, base_config_overrides or {}, copy_code=False)
        trainer.push_to_hub(dataset_name=dataset_name)
    return result


def write_run_cards(output_dir, card: ModelCardInfo, base_config_overrides: Mapping[str, Any],
                    merged_dir: Optional[str] = None, copy_code: bool = True) -> None:
    """README.md of a run's ``output_dir`` -- a full SpatialReward checkpoint, or a PEFT adapter, which also gets
    ``base_config_overrides.json`` and the model code for its card's recipe -- and of ``merged_dir`` if given."""
    from ..hub.modeling_spatialreward import SpatialRewardModel  # deferred: loads torch, transformers

    if (Path(output_dir) / "adapter_config.json").is_file():
        write_adapter_card(output_dir, "spatialreward", card, SpatialRewardModel, base_config_overrides, copy_code)
    else:
        write_card(output_dir, "spatialreward", card)
    if merged_dir:
        write_card(merged_dir, "spatialreward", dataclasses.replace(card, repo_id=None, resized_vocabulary=None))


def run_card(stage: str, trainer, card_args, model_args, dataset_name: str, report,
             settings: Mapping[str, Any]) -> ModelCardInfo:
    """The card of a finished ``stage`` ("sft" or "grpo") run: Hub ids of the base and the data (``card_args``:
    ``--base_model_id`` / ``--dataset_id``), what the data was, the procedure and the settings (the stage's
    training arguments, the run's size and ``settings`` such as LoRA, image budget and rewards)."""
    name, procedure, argument_names = _STAGES[stage]
    base_model, datasets = card_repo_ids(card_args, model_args.model_name_or_path, dataset_name)
    where = f"`{datasets[0]}`" if datasets else "a local dataset"
    reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(report.reasons.items())) or "none"
    data = (f"Rows of {where} in the SpatialReward schema (SC rows: sources, edited image, instruction, regions, "
            "grounded reasoning, scores; PQ rows: edited image, reasoning, scores; the layout is "
            "`modeling_miescore/data/spatialreward_chat_examples.py`). "
            f"{report.kept} of {report.total} rows were used; "
            f"dropped by the checks: {reasons}.")
    hyperparameters = training_settings(trainer.args, argument_names)
    hyperparameters.update(world_size=trainer.args.world_size, global_steps=trainer.state.global_step, **settings)
    return ModelCardInfo(model_name=name, base_model=base_model, datasets=datasets, training_data=data,
                         training_procedure=procedure, hyperparameters=hyperparameters,
                         base_path=local_folder(model_args.model_name_or_path))


def lora_settings(peft_config) -> Any:
    """A model card's view of a ``LoraConfig`` (None: full fine-tuning)."""
    if peft_config is None:
        return "full fine-tuning"
    targets = peft_config.target_modules
    return {"r": peft_config.r, "alpha": peft_config.lora_alpha, "dropout": peft_config.lora_dropout,
            "target_modules": targets if isinstance(targets, str) else sorted(targets),
            "modules_to_save": sorted(peft_config.modules_to_save or [])}
