# /// script
# dependencies = ["miescore[train]"]
# ///
"""Stage 1 of SpatialReward: supervised fine-tuning on (B, T, s) targets (arXiv 2602.07458, sec. 3.4, B.1.1).

    # the paper's recipe (Qwen3-VL-8B-Instruct, LoRA r=32/alpha=64, lr 1e-4, batch 128, 10 epochs), 8 GPUs
    accelerate launch --num_processes 8 trainers/sft_spatialreward.py \
        --config trainers/configs/sft_spatialreward_qwen3vl_8b.yaml --dataset_name path/or/repo
    # CPU smoke test with the tiny checkpoint and the offline fixture (see the YAML's header)
    python trainers/sft_spatialreward.py --config trainers/configs/sft_spatialreward_tiny_cpu.yaml

Every field of the dataclasses below, of TRL's `SFTConfig` and of `ModelConfig` can be set in the YAML and
overridden on the command line. The data schema (SC rows: sources + edited + instruction + regions + reasoning +
scores; PQ rows: edited + reasoning + scores) is documented in
`modeling_miescore/data/spatialreward_chat_examples.py`; rows whose grounding tokens are inconsistent with
their regions are dropped and counted (logged, and written to `output_dir/data_report.json`). Output: the trained
model (or LoRA adapter) and processor in `output_dir`; with LoRA and `merge_lora`, a merged SpatialReward
checkpoint in `output_dir/merged`. Each gets a model card
(README.md; `--base_model_id` / `--dataset_id` name the Hub repos when the model or data are local folders). A
LoRA adapter also gets `base_config_overrides.json` (the run's image budget) and the model code, and carries the
grown embeddings in full when grounding tokens were added, so the card's recipe (base + `PeftModel`) generates
what `merged/` generates.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

# modeling_miescore.training first: importing it hides bitsandbytes' known import-time message
# (modeling_miescore.utils.third_party_logs) before transformers, trl or peft load bitsandbytes.
from modeling_miescore.training.card_inputs import ModelCardArguments  # isort: skip

from trl import ModelConfig, ScriptArguments, SFTConfig, SFTTrainer

from modeling_miescore.training.recipe_parser import RecipeParser
from modeling_miescore.data.spatialreward_chat_examples import prepare_sft_dataset
from modeling_miescore.training.spatialreward_recipe import (load_model_and_processor, load_rows, lora_settings,
                                                              make_lora_config, resized_vocabulary, run_card,
                                                              save_run)

logger = logging.getLogger("sft_spatialreward")


@dataclass
class SpatialRewardDataArguments(ModelCardArguments):
    max_pixels: int = field(default=262_144, metadata={"help": "Pixel cap per image; images are downscaled, never "
                                                               "truncated (released SFT recipe: 262,144)."})
    min_pixels: int = field(default=65_536, metadata={"help": "Smaller images are upscaled (Qwen3-VL default)."})
    max_seq_tokens: int | None = field(default=8192, metadata={"help": "Rows estimated longer are dropped and "
                                                                       "counted (B.1.1 max length 8192)."})
    add_grounding_tokens: bool = field(default=False, metadata={"help": "Register <|bbox_0..15|>/<|global|> as "
                                                                        "single tokens (the release keeps text)."})
    train_grounding_tokens: bool = field(default=True, metadata={"help": "With LoRA and added tokens, train their "
                                                                         "embedding rows."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N rows."})
    merge_lora: bool = field(default=True, metadata={"help": "Also save a merged checkpoint in output_dir/merged."})


def make_parser() -> RecipeParser:
    return RecipeParser((ScriptArguments, SpatialRewardDataArguments, SFTConfig, ModelConfig))


def main(script_args, data_args, training_args, model_args) -> dict:
    if training_args.max_length is not None:
        # Truncation would cut through image tokens (a hard error in Qwen3-VL) or through the target JSON.
        logger.warning("max_length=%s ignored: lengths are bounded by max_pixels and max_seq_tokens instead",
                       training_args.max_length)
        training_args.max_length = None
    training_args.assistant_only_loss = True  # the loss covers the answer (B, T, s) only, never prompt/image tokens
    model, processor = load_model_and_processor(
        model_args.model_name_or_path, dtype=model_args.dtype, attn_implementation=model_args.attn_implementation,
        add_tokens=data_args.add_grounding_tokens, min_pixels=data_args.min_pixels,
        max_pixels=data_args.max_pixels, revision=model_args.model_revision)
    grown = resized_vocabulary(model, model_args.model_name_or_path, model_args.model_revision)
    if model_args.use_peft and grown and not data_args.train_grounding_tokens:
        # the new rows would stay at their initialisation and, outside the adapter, could not be restored from it
        raise SystemExit("error: add_grounding_tokens grew the embeddings, so with LoRA they must be trained and saved "
                         "with the adapter: set train_grounding_tokens: true")

    def prepared(split):
        rows = load_rows(script_args.dataset_name, script_args.dataset_config, split, data_args.max_train_samples)
        with training_args.main_process_first(desc=f"preparing {split}"):
            return prepare_sft_dataset(rows, model.config, data_args.max_pixels, data_args.max_seq_tokens, processor,
                                       num_proc=training_args.dataset_num_proc)

    train, report = prepared(script_args.dataset_train_split)
    evaluation = prepared(script_args.dataset_test_split)[0] if training_args.eval_strategy != "no" else None
    peft_config = make_lora_config(model_args, processor,
                                   data_args.add_grounding_tokens and data_args.train_grounding_tokens)

    trainer = SFTTrainer(model=model, args=training_args, train_dataset=train, eval_dataset=evaluation,
                         processing_class=processor, peft_config=peft_config)
    trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)

    def merge() -> str | None:
        sharded = getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False)
        if peft_config is None or not data_args.merge_lora:
            return None
        if sharded:
            # Under ZeRO-3/FSDP the in-memory weights are shards; merge the saved adapter offline instead.
            logger.warning("merge_lora skipped with sharded training: merge %s onto the base with PEFT",
                           training_args.output_dir)
            return None
        merged_dir = os.path.join(training_args.output_dir, "merged")
        merged = trainer.accelerator.unwrap_model(trainer.model).merge_and_unload()
        merged.processor = processor
        merged.save_pretrained(merged_dir)
        logger.info("merged checkpoint saved to %s", merged_dir)
        return merged_dir

    card = run_card("sft", trainer, data_args, model_args, script_args.dataset_name, report, dict(
        lora=lora_settings(peft_config), max_pixels=model.config.max_pixels, min_pixels=model.config.min_pixels,
        max_seq_tokens=data_args.max_seq_tokens,
        grounding_tokens="added as single tokens" if data_args.add_grounding_tokens else "plain text"))
    card.resized_vocabulary = grown
    overrides = {"min_pixels": model.config.min_pixels, "max_pixels": model.config.max_pixels}
    merged_dir = save_run(trainer, processor, training_args, script_args.dataset_name,
                          {"data_report.json": report.as_dict()}, on_main_process=merge, card=card,
                          base_config_overrides=overrides)
    return {"trainer": trainer, "report": report, "merged_dir": merged_dir}

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    main(*make_parser().parse_args_and_config())
