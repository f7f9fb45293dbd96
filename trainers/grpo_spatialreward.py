# /// script
# dependencies = ["miescore[train,serve]"]
# ///
"""Stage 2 of SpatialReward: online RL (GRPO) against an oracle judge (arXiv 2602.07458, sec. 3.4, B.1.2, D.4).

    # the paper's recipe (full fine-tuning, G=4, lr 5e-7, beta 0.02, temperature 0.9, 1024 new tokens); the judge
    # is any OpenAI-compatible endpoint (Gemini's, OpenAI's, or a vLLM server), its key in $OPENAI_API_KEY
    accelerate launch --num_processes 8 trainers/grpo_spatialreward.py \
        --config trainers/configs/grpo_spatialreward_qwen3vl_8b.yaml --model_name_or_path <SFT checkpoint> \
        --dataset_name <rows> --oracle_base_url https://.../v1 --oracle_model <judge>
    # CPU smoke test (tiny checkpoint, offline fixture, no judge): see the YAML's header
    python trainers/grpo_spatialreward.py --config trainers/configs/grpo_spatialreward_tiny_cpu.yaml

Reward functions (`reward_funcs`, weights in `reward_weights`; definitions in
`modeling_miescore/training/spatialreward_grpo_rewards.py`): `oracle_consistency` (the paper's: 1 / 0.5 / 0 from the judge),
`format_grounding` (valid JSON and grounding tokens consistent with the boxes), `reference_agreement`
(1 - |pred - ref| / 25 against the row's scores, when present). Judge failures get the configured values, are
counted, logged as `oracle/<status>` metrics and written to `output_dir/oracle_stats.json`. The objective (loss
type, clipping, reward scaling) is pinned in the paper YAML, with what TRL cannot express of sec. 3.4's equation.
Output: the model (or LoRA adapter, with `base_config_overrides.json` and the model code) in `output_dir`, with a
model card (`--base_model_id` / `--dataset_id` name the Hub repos when the model or data are local folders).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

# modeling_miescore.training first: importing it hides bitsandbytes' known import-time message
# (modeling_miescore.utils.third_party_logs) before transformers, trl or peft load bitsandbytes.
from modeling_miescore.training.card_inputs import ModelCardArguments  # isort: skip

from trl import GRPOConfig, GRPOTrainer, ModelConfig, ScriptArguments

from modeling_miescore.judges.oracle import OracleConfig
from modeling_miescore.training.recipe_parser import RecipeParser
from modeling_miescore.data.spatialreward_chat_examples import prepare_grpo_dataset
from modeling_miescore.training.spatialreward_grpo_rewards import OracleConsistencyReward, build_reward_functions
from modeling_miescore.training.spatialreward_recipe import (load_model_and_processor, load_rows, lora_settings,
                                                              make_lora_config, run_card, save_run)

logger = logging.getLogger("grpo_spatialreward")


@dataclass
class SpatialRewardGRPOArguments(ModelCardArguments):
    reward_funcs: list[str] = field(default_factory=lambda: ["oracle_consistency"], metadata={
        "help": "oracle_consistency | format_grounding | reference_agreement (the paper uses the oracle)."})
    max_pixels: int = field(default=401_408, metadata={"help": "Pixel cap per image (released RL run: 401,408)."})
    min_pixels: int = field(default=65_536, metadata={"help": "Smaller images are upscaled."})
    max_prompt_tokens: int | None = field(default=None, metadata={"help": "Drop prompts estimated longer."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N rows."})
    dataset_num_proc: int | None = field(default=None, metadata={"help": "Processes for data preparation."})
    oracle_base_url: str | None = field(default=None, metadata={"help": "Judge endpoint, e.g. http://host:8000/v1"})
    oracle_model: str | None = field(default=None, metadata={"help": "Judge model name (paper: Gemini-3-Flash)."})
    oracle_api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "Env var holding the judge key."})
    oracle_temperature: float = 0.3
    oracle_max_tokens: int = 512
    oracle_timeout: float = 60.0
    oracle_max_retries: int = 2
    oracle_max_workers: int = 16
    oracle_api_error_value: float | None = 0.5
    oracle_judge_unparsable_value: float | None = 0.5
    oracle_policy_unparsable_value: float | None = 0.0
    oracle_send_images: bool = True
    oracle_max_pixels: int | None = 1_048_576
    oracle_max_answer_bytes: int = field(default=2 * 1024 * 1024, metadata={
        "help": "The most bytes one judge answer may take, on the wire and decompressed (larger: an api_error)."})
    oracle_quote_inputs: bool = field(default=True, metadata={
        "help": "Fill the D.4 prompts' instruction and reasoning as JSON string literals, so that they cannot pose "
                "as prompt text or as the judge's answer (False: raw, as the paper prints the template)."})

    def __post_init__(self):  # a mistake here is the parser's one line and exit status 2
        if bool(self.oracle_base_url) != bool(self.oracle_model):
            raise ValueError("set both oracle_base_url and oracle_model (an OpenAI-compatible judge)")


def make_parser() -> RecipeParser:
    return RecipeParser((ScriptArguments, SpatialRewardGRPOArguments, GRPOConfig, ModelConfig))


def oracle_config(args: SpatialRewardGRPOArguments) -> OracleConfig | None:
    if not args.oracle_base_url:  # both or neither (__post_init__)
        return None
    return OracleConfig(base_url=args.oracle_base_url, model=args.oracle_model, api_key_env=args.oracle_api_key_env,
                        temperature=args.oracle_temperature, max_tokens=args.oracle_max_tokens,
                        timeout=args.oracle_timeout, max_retries=args.oracle_max_retries,
                        max_workers=args.oracle_max_workers, api_error_value=args.oracle_api_error_value,
                        judge_unparsable_value=args.oracle_judge_unparsable_value,
                        policy_unparsable_value=args.oracle_policy_unparsable_value,
                        send_images=args.oracle_send_images, max_pixels=args.oracle_max_pixels,
                        quote_inputs=args.oracle_quote_inputs, max_answer_bytes=args.oracle_max_answer_bytes)


def _check_reference_loading(model, training_args) -> None:
    # With beta > 0 TRL re-loads the reference model from the checkpoint path through the Auto classes; a
    # SpatialReward checkpoint (config.json with auto_map) then needs trust_remote_code. Fail before any work.
    if training_args.beta and getattr(model.config, "auto_map", None) and not training_args.trust_remote_code:
        raise SystemExit("error: beta > 0 re-loads the reference model from the SpatialReward checkpoint, which "
                         "carries its own code: set trust_remote_code: true (or beta: 0)")


def main(script_args, rl_args, training_args, model_args) -> dict:
    reward_funcs = build_reward_functions(rl_args.reward_funcs, oracle_config(rl_args))
    model, processor = load_model_and_processor(
        model_args.model_name_or_path, dtype=model_args.dtype, attn_implementation=model_args.attn_implementation,
        min_pixels=rl_args.min_pixels, max_pixels=rl_args.max_pixels, revision=model_args.model_revision)
    _check_reference_loading(model, training_args)
    rows = load_rows(script_args.dataset_name, script_args.dataset_config, script_args.dataset_train_split,
                     rl_args.max_train_samples)
    with training_args.main_process_first(desc="preparing prompts"):
        train, report = prepare_grpo_dataset(rows, model.config, rl_args.max_pixels, rl_args.max_prompt_tokens,
                                             processor, num_proc=rl_args.dataset_num_proc)

    peft_config = make_lora_config(model_args)
    trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=training_args, train_dataset=train,
                          processing_class=processor, peft_config=peft_config)
    try:
        trainer.train(resume_from_checkpoint=training_args.resume_from_checkpoint)
    finally:
        oracle_stats = {}
        for func in reward_funcs:
            if isinstance(func, OracleConsistencyReward):
                oracle_stats = func.judge.summary()
                func.close()
                logger.info("oracle: %s", oracle_stats["stats"])
                if oracle_stats["failure_rate"] > 0.2:
                    logger.warning("oracle failure rate %.0f%%: check the judge endpoint (see oracle_stats.json)",
                                   100 * oracle_stats["failure_rate"])
    reports = {"data_report.json": report.as_dict(), **({"oracle_stats.json": oracle_stats} if oracle_stats else {})}
    card = run_card("grpo", trainer, rl_args, model_args, script_args.dataset_name, report, dict(
        reward_funcs=list(rl_args.reward_funcs), oracle_model=rl_args.oracle_model, lora=lora_settings(peft_config),
        max_pixels=model.config.max_pixels, min_pixels=model.config.min_pixels))
    save_run(trainer, processor, training_args, script_args.dataset_name, reports, card=card,
             base_config_overrides={"min_pixels": model.config.min_pixels, "max_pixels": model.config.max_pixels})
    return {"trainer": trainer, "report": report, "oracle_stats": oracle_stats}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    main(*make_parser().parse_args_and_config())
