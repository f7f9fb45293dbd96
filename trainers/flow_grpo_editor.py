# /// script
# dependencies = ["miescore[train,rl]"]
# ///
"""Online RL of an image editor with Flow-GRPO, rewarded by MIEScore, SpatialReward or any callable
(SpatialReward paper, arXiv 2602.07458, sec. 5.3 and appendix B.2; Flow-GRPO, arXiv 2505.05470).

    # the paper's setting (B.2.1) on QwenImageEditPlus: LoRA r32/a64, lr 4e-4, 576 = 48 groups x 12 per step,
    # T = 20, beta 0.04, advantage clip 5; 8 processes x 1 group x 6 accumulation (see the YAML)
    accelerate launch --num_processes 8 trainers/flow_grpo_editor.py \
        --config trainers/configs/flow_grpo_editor_paper.yaml \
        --model_name_or_path Qwen/Qwen-Image-Edit-2509 --dataset <MIE-Bench build or rows.jsonl> \
        --reward <a --reward spec, e.g. a `miescore serve` replica on another machine> --output_dir runs/qwen-rl
    # CPU smoke run: a tiny random editor built offline, the edited image's redness as reward (YAML header)
    python trainers/flow_grpo_editor.py --config trainers/configs/flow_grpo_editor_tiny_cpu.yaml

Every field of `FlowGRPOConfig` (modeling_miescore/training/editor_rl/config.py, each default cited) can be
given in the YAML or on the command line. Inputs: `{"sources": [...], "instruction": "..."}` JSONL, or a
MIE-Bench / MER-Bench / converted editing-benchmark dataset (modeling_miescore/data/editing_inputs.py).
Outputs in `output_dir`: `pytorch_lora_weights.safetensors` + `README.md` (the adapter and its card),
`metrics.jsonl`, `samples/step-*.png`, `checkpoint-<step>/` (rerun with `--resume` after a kill: it continues
exactly). Exit status: 0 done, 1 stopped by the reward or a diverging loss (message says which), 2 bad input.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field

# modeling_miescore.training first: importing it hides bitsandbytes' known import-time message
# (modeling_miescore.utils.third_party_logs) before transformers, trl or peft load bitsandbytes.
from modeling_miescore.training.editor_rl.config import FlowGRPOConfig  # isort: skip

from trl import TrlParser

from modeling_miescore.image_io import MIEScoreInputError
from modeling_miescore.training.editor_rl.policy_update import TrainingDivergedError
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer, RewardUnavailableError

logger = logging.getLogger("flow_grpo_editor")


@dataclass
class ScriptArguments:
    build_tiny_editor: str | None = field(default=None, metadata={
        "help": "Build a tiny random editor of this kind (qwen-image-edit-plus, flux2-klein, flux-kontext) at "
                "model_name_or_path first, if that folder does not exist (CPU smoke runs)."})
    build_tiny_requests: bool = field(default=False, metadata={
        "help": "Write tiny JSONL requests from scikit-image photos at `dataset` first, if it does not exist."})


def prepare_tiny_inputs(script: ScriptArguments, config: FlowGRPOConfig) -> None:
    """The offline inputs of the tiny CPU config (nothing is downloaded)."""
    from pathlib import Path

    if script.build_tiny_editor and not Path(config.model_name_or_path).exists():
        from modeling_miescore.testing.tiny_editors import build_tiny_editor

        build_tiny_editor(script.build_tiny_editor, config.model_name_or_path)
    if script.build_tiny_requests and not Path(config.dataset).exists():
        from modeling_miescore.testing.editing_requests import write_editing_requests

        write_editing_requests(config.dataset)


def main(script: ScriptArguments, config: FlowGRPOConfig) -> dict:
    config.validate()  # every setting before anything is built or loaded
    prepare_tiny_inputs(script, config)
    trainer = FlowGRPOEditorTrainer(config)
    result = trainer.train()
    if result["metrics"]:
        first, last = result["metrics"][0], result["metrics"][-1]
        logger.info("mean reward %.4f at step %d -> %.4f at step %d; adapter in %s", first["reward_mean"],
                    first["step"], last["reward_mean"], last["step"], config.output_dir)
    return result


def cli(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        script, config = TrlParser((ScriptArguments, FlowGRPOConfig)).parse_args_and_config(argv)
        main(script, config)
    except MIEScoreInputError as err:
        print(f"flow_grpo_editor: error: {err}", file=sys.stderr)
        return 2
    except (RewardUnavailableError, TrainingDivergedError) as err:
        print(f"flow_grpo_editor: stopped: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli())
