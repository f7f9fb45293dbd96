# /// script
# dependencies = ["miescore[train]"]
# ///
"""Fine-tune a MIEScore evaluator on MIE-Bench-style human ratings (MIEScore paper, "Multi-Dimensional
Supervised Fine-Tuning"; hyper-parameters in the supplement "Details of Training Configuration").

    # one GPU, the paper's recipe (Qwen3-VL-8B, LoRA r=64 on the LM, Huber + rank + PLCC)
    python trainers/train_miescore.py --config trainers/configs/miescore_qwen3vl_8b.yaml --dataset path/or/repo
    # the ablation of Table 5: another backbone, or one switch of the training strategy
    python trainers/train_miescore.py --config ... --model_name_or_path OpenGVLab/InternVL3_5-8B-HF   # row 8
    python trainers/train_miescore.py --config ... --score_head lm_digits       # row 1: no score head
    python trainers/train_miescore.py --config ... --backbone_tuning frozen     # row 2: no LoRA (head only)
    python trainers/train_miescore.py --config ... --skill_file runs/skill-optimization/skill.txt   # row 5
    python trainers/train_miescore.py --config ... --score_head lm_digits --sft false --skill_file ...  # row 4
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

# modeling_miescore.training first: importing it hides bitsandbytes' known import-time message
# (modeling_miescore.utils.third_party_logs) before transformers, trl or peft load bitsandbytes.
from modeling_miescore.training.losses import LossConfig  # isort: skip

from datasets import load_dataset
from transformers import IntervalStrategy, TrainingArguments

from modeling_miescore.training.miescore_data import MIEScoreCollator, prepare_dataset
from modeling_miescore.cli.skill import read_skill_file
from modeling_miescore.hub.model_card import ModelCardInfo, hub_repo_id
from modeling_miescore.hub.miescore_score_heads import SCORE_HEADS
from modeling_miescore.training.card_inputs import (ModelCardArguments, card_repo_ids, local_folder,
                                                    training_settings)
from modeling_miescore.training.miescore_export import export_model
from modeling_miescore.training.miescore_model import (load_base_model, make_lora_config,
                                                       set_backbone_tuning)
from modeling_miescore.training.miescore_trainer import MIEScoreTrainer, compute_correlation_metrics, resolve_checkpoint
from modeling_miescore.training.recipe_parser import RecipeParser

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
    sft: bool = field(default=True, metadata={
        "help": "False: no fine-tuning; evaluate and export the starting model (Table 5 row 4, with score_head "
                "lm_digits and the optimised skill)."})

    def __post_init__(self):  # a mistake here is the parser's one line and exit status 2
        if not self.dataset:
            raise ValueError("--dataset is required (in the YAML or on the command line)")


@dataclass
class ModelArguments:
    model_name_or_path: str = field(default=None, metadata={
        "help": "A VLM checkpoint (Qwen3-VL as in the paper, Qwen2.5-VL, InternVL3.5 -HF, any transformers-native "
                "image-text-to-text model; a new scorer) or a MIEScore one."})
    dtype: str = field(default="auto", metadata={"help": "auto | bfloat16 | float32 | float16 (weights as loaded)."})
    attn_implementation: str | None = field(default=None, metadata={"help": "sdpa | flash_attention_2 | eager"})
    max_pixels: int = field(default=1_048_576, metadata={"help": "Pixel budget per image (paper: 1,048,576)."})
    min_pixels: int | None = field(default=None, metadata={"help": "Smaller images are upscaled (config default)."})
    head_hidden_size: int | None = field(default=None, metadata={"help": "Head width for a new scorer."})
    skill: str | None = field(default=None, metadata={"help": "Replace the rubric at the start of every prompt."})
    skill_file: str | None = field(default=None, metadata={
        "help": "Read the rubric from a file, e.g. the skill.txt of trainers/optimize_skill.py (Table 5 rows 4-8); "
                "without it (and without skill) the default skill, i.e. no skill optimisation (rows 1-3). Takes "
                "precedence over skill."})
    score_head: str | None = field(default=None, metadata={
        "help": " | ".join(f"{head.name} ({head.description})" for head in SCORE_HEADS.values())
                + ". A MIEScore checkpoint keeps its own."})
    max_length: int | None = field(default=4096, metadata={"help": "Longest sequence in tokens (paper: 4096)."})
    long_sequence_policy: str = field(default="shrink", metadata={"help": "Over-long rows: shrink | drop | error."})
    backbone_tuning: str = field(default="lora", metadata={
        "help": "lora (the paper: LoRA on the LM, head in full) | frozen (only the head trains; Table 5 row 2, "
                "w/o LoRA) | full (every weight trains)."})
    lora_r: int = 64
    lora_alpha: int = 32
    lora_dropout: float = 0.0
    lora_target_modules: str | None = field(default=None, metadata={
        "help": "Regex of the LoRA modules (default: q/k/v/o/gate/up/down of the backbone's language model)."})
    modules_to_save: list[str] = field(default_factory=lambda: ["head"], metadata={
        "help": "Modules trained in full beside LoRA (with score_head lm_digits there is no head: 'head' is left "
                "out, the LM's digit rows stay as pretrained)."})

    def __post_init__(self):
        if not self.model_name_or_path:
            raise ValueError("--model_name_or_path is required (in the YAML or on the command line)")


def make_parser() -> RecipeParser:
    """The recipe's arguments: script, model, loss (``LossConfig`` itself: eq. 13's weights, queues and stage) and
    ``TrainingArguments``, read from ``--config x.yaml`` and the command line."""
    return RecipeParser((ScriptArguments, ModelArguments, LossConfig, TrainingArguments))


def build_model(model_args, tune: bool = True):
    """The scorer to train, made trainable as ``backbone_tuning`` says (left as loaded when not ``tune``); returns
    ``(model, processor, config, config overrides)`` (the overrides are applied again when the export re-loads
    the base)."""
    skill = read_skill_file(model_args.skill_file) if model_args.skill_file else model_args.skill
    overrides = {k: v for k, v in dict(max_pixels=model_args.max_pixels, min_pixels=model_args.min_pixels,
                                           head_hidden_size=model_args.head_hidden_size, skill=skill,
                                           score_head=model_args.score_head).items() if v is not None}
    model, processor = load_base_model(model_args.model_name_or_path, dtype=model_args.dtype,
                                       attn_implementation=model_args.attn_implementation, **overrides)
    config = model.config
    if not tune:
        return model, processor, config, overrides
    lora = None
    if model_args.backbone_tuning == "lora":
        modules_to_save = [m for m in model_args.modules_to_save if m != "head" or model.head.new_weights]
        lora = make_lora_config(model_args.lora_r, model_args.lora_alpha, model_args.lora_dropout,
                                model_args.lora_target_modules, modules_to_save)
    return set_backbone_tuning(model, model_args.backbone_tuning, lora), processor, config, overrides


def check_splits(script_args, data) -> None:
    """The train and eval splits exist in ``data`` (a DatasetDict); otherwise one line naming the missing split,
    the splits there are and the options (a small build can leave a split empty, and empty splits are not
    written)."""
    for option, split in (("--train_split", script_args.train_split), ("--eval_split", script_args.eval_split)):
        if split and split not in data:
            there = ", ".join(data) or "none"
            hint = ("pass --eval_split with one of them, or --eval_split '' to train without evaluation"
                    if option == "--eval_split" else "pass --train_split with one of them")
            raise SystemExit(f"error: the dataset {script_args.dataset} has no split '{split}' ({option}; its "
                             f"splits: {there}); {hint}")


def main(script_args, model_args, loss_config: LossConfig, training_args) -> dict:
    training_args.remove_unused_columns = False  # the collator needs the image columns
    training_args.label_names = ["labels"]
    push, training_args.push_to_hub = training_args.push_to_hub, False  # push the merged export, not checkpoints
    resume = resolve_checkpoint(training_args.resume_from_checkpoint, training_args.output_dir)
    data = load_dataset(script_args.dataset, script_args.dataset_config)
    check_splits(script_args, data)
    model, processor, config, overrides = build_model(model_args, tune=script_args.sft)

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
    if script_args.sft:
        trainer.train(resume_from_checkpoint=resume)
    else:
        logger.info("sft=false: no fine-tuning; the starting model is evaluated and exported as it is")
    metrics = trainer.evaluate() if evaluation is not None else {}
    final_dir = os.path.join(training_args.output_dir, "final")
    trainer.save_model(final_dir)  # gathers sharded (ZeRO-3/FSDP) weights; the best model if load_best_model_at_end
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(final_dir)
    trainer.accelerator.wait_for_everyone()

    exported = {}
    if trainer.accelerator.is_main_process and script_args.export:
        card = _model_card(script_args, model_args, trainer, data, metrics, _card_hyperparameters(
            trainer, script_args, model_args, loss_config, config, report), push)
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
    if push and not base_model:  # a pushed card names no local path
        hyperparameters = {**hyperparameters, "base_checkpoint": "a local folder (--base_model_id names its repo)"}
    return ModelCardInfo(
        model_name=script_args.model_card_name, repo_id=trainer.args.hub_model_id if push else None,
        base_model=base_model, base_path=local_folder(model_args.model_name_or_path), datasets=datasets,
        eval_split=script_args.eval_split or "-", metrics=metrics,
        dataset_split_sizes={split: len(rows) for split, rows in data.items()},
        training_data=(f"Fine-tuned on {where} (MIE-Bench format: one MOS per dimension from 15 raters, "
                       "BT.500-screened, on 0-100; the labels are MOS / 100)."),
        training_procedure=("Multi-dimensional supervised fine-tuning (MIEScore paper, \"Multi-Dimensional "
                            "Supervised Fine-Tuning\"): L = lambda_h Huber + lambda_r rank + lambda_p (1 - PLCC) per "
                            "dimension, the rank and PLCC terms computed against cross-batch memory queues; the "
                            "rank/PLCC weights are raised in the final stage. Settings of this run:"),
        hyperparameters=hyperparameters)


def _card_hyperparameters(trainer, script_args, model_args, loss_config: LossConfig, config, report) -> dict:
    """The settings the model card lists: optimiser and schedule, run size, image budget, head, tuning, loss."""
    training_args = trainer.args
    hyper = training_settings(training_args, (
        "learning_rate", "weight_decay", "adam_beta1", "adam_beta2", "adam_epsilon", "warmup_steps",
        "lr_scheduler_type", "lr_scheduler_kwargs", "max_grad_norm", "per_device_train_batch_size",
        "gradient_accumulation_steps", "num_train_epochs", "max_steps", "bf16", "seed"))
    peft_config = getattr(trainer.model, "peft_config", {}).get("default")
    lora = {"frozen": "frozen backbone (head only)", "full": "full fine-tuning"}.get(model_args.backbone_tuning)
    lora = lora if script_args.sft else "none (no fine-tuning)"
    if peft_config is not None:
        lora = dict(r=model_args.lora_r, alpha=model_args.lora_alpha, dropout=model_args.lora_dropout,
                    target_modules=peft_config.target_modules, modules_to_save=list(peft_config.modules_to_save or []))
    hyper.update(world_size=training_args.world_size, global_steps=trainer.state.global_step,
                 best_checkpoint=os.path.basename(trainer.state.best_model_checkpoint or "") or None,
                 base_checkpoint=(hub_repo_id(model_args.model_name_or_path)
                                  or local_folder(model_args.model_name_or_path)),
                 backbone=config.backbone_config.model_type, score_head=config.score_head, sft=script_args.sft,
                 skill_file=model_args.skill_file, max_length=model_args.max_length, max_pixels=config.max_pixels,
                 min_pixels=config.min_pixels, long_rows_shrunk=report["shrunk"], long_rows_dropped=report["dropped"],
                 lora=lora, loss=loss_config.to_dict())
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
