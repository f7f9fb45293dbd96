# /// script
# dependencies = ["miescore[train]"]
# ///
"""Fine-tune a MIEScore evaluator on MIE-Bench-style human ratings (MIEScore paper, "Multi-Dimensional
Supervised Fine-Tuning"; hyper-parameters in the supplement "Details of Training Configuration").

    # one GPU, the paper's recipe (Qwen3-VL-8B, LoRA r=64 on the LM, Huber + rank + PLCC)
    python trainers/train_miescore.py --config trainers/configs/miescore_qwen3vl_8b.yaml --dataset path/or/repo
    # several GPUs / nodes
    accelerate launch --config_file trainers/configs/accelerate_ddp.yaml trainers/train_miescore.py --config ...
    # several CPU processes (gloo): torchrun --nproc_per_node 2 trainers/train_miescore.py --config ... --use_cpu true
    # resume after an interruption (queues and loss stage included)
    python trainers/train_miescore.py --config ... --resume_from_checkpoint true

Every field below and every `TrainingArguments` field can be set in the YAML and overridden on the command line.
Output: checkpoints in `output_dir`, then `output_dir/export/merged` (Hub-native, trust_remote_code) and
`output_dir/export/adapter` (LoRA only), each with a model card; `--push_to_hub` uploads the merged folder.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from datasets import load_dataset
from transformers import IntervalStrategy, TrainingArguments
from trl import TrlParser

from modeling_miescore.training.losses import LossConfig
from modeling_miescore.training.miescore_data import MIEScoreCollator, prepare_dataset
from modeling_miescore.model_card import ModelCardInfo, hub_repo_id
from modeling_miescore.training.card_inputs import ModelCardArguments, card_repo_ids, training_settings
from modeling_miescore.training.miescore_export import export_model
from modeling_miescore.training.miescore_model import LM_LORA_TARGETS, apply_lora, load_base_model, make_lora_config
from modeling_miescore.training.miescore_trainer import MIEScoreTrainer, compute_correlation_metrics, resolve_checkpoint

logger = logging.getLogger("train_miescore")


@dataclass
class ScriptArguments(ModelCardArguments):
    dataset: str = field(default=None, metadata={"help": "MIE-Bench-format dataset: local folder or Hub repo id."})
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset config name."})
    train_split: str = "train"
    eval_split: str | None = field(default="validation", metadata={"help": "Split for per-epoch SRCC/PLCC ('' = none)."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training rows."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N evaluation rows."})
    export_dir: str | None = field(default=None, metadata={"help": "Where merged/ and adapter/ go (output_dir/export)."})
    model_card_name: str = "MIEScore"
    export: bool = field(default=True, metadata={"help": "Write export/merged and export/adapter after training."})


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default=None, metadata={"help": "Qwen3-VL checkpoint (new head) or MIEScore one."})
    dtype: str = field(default="auto", metadata={"help": "auto | bfloat16 | float32 | float16 (weights as loaded)."})
    attn_implementation: str | None = field(default=None, metadata={"help": "sdpa | flash_attention_2 | eager"})
    max_pixels: int = field(default=1_048_576, metadata={"help": "Pixel budget per image (paper: 1,048,576)."})
    min_pixels: int | None = field(default=None, metadata={"help": "Smaller images are upscaled (config default)."})
    head_hidden_size: int | None = field(default=None, metadata={"help": "Head width for a new scorer."})
    skill: str | None = field(default=None, metadata={"help": "Replace the rubric at the start of every prompt."})
    max_length: int | None = field(default=4096, metadata={"help": "Longest sequence in tokens (paper: 4096)."})
    long_sequence_policy: str = field(default="shrink", metadata={"help": "Over-long rows: shrink | drop | error."})
    use_lora: bool = field(default=True, metadata={"help": "LoRA on the LM (paper); False trains all weights."})
    lora_r: int = 64
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: str = field(default=LM_LORA_TARGETS, metadata={"help": "Regex of the LoRA modules."})
    modules_to_save: list[str] = field(default_factory=lambda: ["head"], metadata={"help": "Fully trained modules."})


def make_parser() -> TrlParser:
    """The recipe's arguments: script, model, loss (``LossConfig`` itself: eq. 13's weights, queues and stage) and
    ``TrainingArguments``, read from ``--config x.yaml`` and the command line."""
    return TrlParser((ScriptArguments, ModelArguments, LossConfig, TrainingArguments))


def main(script_args, model_args, loss_config: LossConfig, training_args) -> dict:
    if not script_args.dataset or not model_args.model_name_or_path:
        raise SystemExit("error: --dataset and --model_name_or_path are required (in the YAML or on the command line)")
    training_args.remove_unused_columns = False  # the collator needs the image columns
    training_args.label_names = ["labels"]
    push, training_args.push_to_hub = training_args.push_to_hub, False  # push the merged export, not checkpoints
    resume = resolve_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)

    overrides = {k: v for k, v in dict(max_pixels=model_args.max_pixels, min_pixels=model_args.min_pixels,
                                           head_hidden_size=model_args.head_hidden_size,
                                           skill=model_args.skill).items() if v is not None}
    model, processor = load_base_model(model_args.model_name_or_path, dtype=model_args.dtype,
                                       attn_implementation=model_args.attn_implementation, **overrides)
    config = model.config
    if model_args.use_lora:
        model = apply_lora(model, make_lora_config(model_args.lora_r, model_args.lora_alpha, model_args.lora_dropout,
                                                   model_args.lora_target_modules, model_args.modules_to_save))

    data = load_dataset(script_args.dataset, script_args.dataset_config)
    with training_args.main_process_first(desc="measuring sequence lengths"):
        train, report = prepare_dataset(_head(data[script_args.train_split], script_args.max_train_samples), processor,
                                        config, model_args.max_length, model_args.long_sequence_policy)
        evaluation = None
        if script_args.eval_split:
            evaluation, _ = prepare_dataset(_head(data[script_args.eval_split], script_args.max_eval_samples),
                                            processor, config, model_args.max_length, model_args.long_sequence_policy)
    if evaluation is None and training_args.eval_strategy != "no":
        logger.warning("no eval split: evaluation and best-checkpoint selection are off")
        training_args.eval_strategy, training_args.load_best_model_at_end = IntervalStrategy.NO, False
    logger.info("train rows: %d (shrunk %d, dropped %d, longest %d tokens)", len(train), report["shrunk"],
                report["dropped"], report["longest"])

    trainer = MIEScoreTrainer(
        model=model, args=training_args, train_dataset=train, eval_dataset=evaluation,
        data_collator=MIEScoreCollator(processor, config), compute_metrics=compute_correlation_metrics,
        loss_config=loss_config,
    )
    trainer.train(resume_from_checkpoint=resume)
    metrics = trainer.evaluate() if evaluation is not None else {}
    final_dir = os.path.join(training_args.output_dir, "final")
    trainer.save_model(final_dir)  # gathers sharded (ZeRO-3/FSDP) weights; the best model if load_best_model_at_end
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(final_dir)
    trainer.accelerator.wait_for_everyone()

    exported = {}
    if trainer.accelerator.is_main_process and script_args.export:
        card = _model_card(script_args, model_args, trainer, data, metrics, _card_hyperparameters(
            trainer, model_args, loss_config, config, report), push)
        exported = export_model(model_args.model_name_or_path, final_dir,
                                script_args.export_dir or os.path.join(training_args.output_dir, "export"),
                                card=card, base_config_overrides=overrides)
        logger.info("exported %s", exported)
        if push:
            _push_merged(exported["merged"], training_args)
    return {"metrics": metrics, "exported": exported}


def _model_card(script_args, model_args, trainer, data, metrics: dict, hyperparameters: dict,
                push: bool) -> ModelCardInfo:
    """What the exported cards say: Hub ids of the base and the data, the data, the recipe and the metrics."""
    base_model, datasets = card_repo_ids(script_args, model_args.model_name_or_path, script_args.dataset)
    where = f"`{datasets[0]}`" if datasets else "a local MIE-Bench-format folder"
    return ModelCardInfo(
        model_name=script_args.model_card_name, repo_id=trainer.args.hub_model_id if push else None,
        base_model=base_model, datasets=datasets, eval_split=script_args.eval_split or "-", metrics=metrics,
        dataset_split_sizes={split: len(rows) for split, rows in data.items()},
        training_data=(f"Fine-tuned on {where} (MIE-Bench format: one MOS per dimension from 15 raters, "
                       "BT.500-screened, on 0-100; the labels are MOS / 100)."),
        training_procedure=("Multi-dimensional supervised fine-tuning (MIEScore paper, \"Multi-Dimensional "
                            "Supervised Fine-Tuning\"): L = lambda_h Huber + lambda_r rank + lambda_p (1 - PLCC) per "
                            "dimension, the rank and PLCC terms computed against cross-batch memory queues; the "
                            "rank/PLCC weights are raised in the final stage. Settings of this run:"),
        hyperparameters=hyperparameters)


def _card_hyperparameters(trainer, model_args, loss_config: LossConfig, config, report) -> dict:
    """The settings the model card lists: optimiser and schedule, run size, image budget, LoRA, loss."""
    training_args = trainer.args
    hyper = training_settings(training_args, (
        "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "warmup_steps",
        "lr_scheduler_type", "lr_scheduler_kwargs", "max_grad_norm", "per_device_train_batch_size",
        "gradient_accumulation_steps", "num_train_epochs", "max_steps", "bf16", "seed"))
    lora = (dict(r=model_args.lora_r, alpha=model_args.lora_alpha, dropout=model_args.lora_dropout,
                 target_modules=model_args.lora_target_modules, modules_to_save=model_args.modules_to_save)
            if model_args.use_lora else "full fine-tuning")
    hyper.update(world_size=training_args.world_size, global_steps=trainer.state.global_step,
                 best_checkpoint=os.path.basename(trainer.state.best_model_checkpoint or "") or None,
                 base_checkpoint=hub_repo_id(model_args.model_name_or_path) or "a local folder",
                 max_length=model_args.max_length, max_pixels=config.max_pixels, min_pixels=config.min_pixels,
                 skill="custom (in config.json)" if model_args.skill else "default",
                 long_rows_shrunk=report["shrunk"], long_rows_dropped=report["dropped"], lora=lora,
                 loss=loss_config.to_dict())
    return hyper


def _push_merged(folder: str, training_args) -> None:
    """Upload the merged export (not the training checkpoints) to ``hub_model_id``."""
    from huggingface_hub import HfApi

    api, repo = HfApi(token=training_args.hub_token), training_args.hub_model_id
    repo = repo or os.path.basename(os.path.abspath(training_args.output_dir))
    api.create_repo(repo, private=training_args.hub_private_repo, exist_ok=True)
    api.upload_folder(repo_id=repo, folder_path=folder, commit_message="MIEScore fine-tuned")


def _head(dataset, n):
    return dataset.select(range(min(n, len(dataset)))) if n else dataset


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    main(*make_parser().parse_args_and_config())
