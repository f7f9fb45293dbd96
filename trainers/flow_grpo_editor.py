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
    # CPU smoke run: a tiny random editor built offline under ./miescore-tiny/, the edited image's redness as
    # reward, the run in ./runs/flow-grpo-tiny (YAML header)
    python trainers/flow_grpo_editor.py --config trainers/configs/flow_grpo_editor_tiny_cpu.yaml

Every field of `FlowGRPOConfig` (modeling_miescore/training/editor_rl/config.py, each default cited) can be
given in the YAML or on the command line (exact names: no prefix matching). Inputs: `{"sources": [...],
"instruction": "..."}` JSONL, or a MIE-Bench / MER-Bench / converted editing-benchmark dataset
(modeling_miescore/data/editing_inputs.py). Outputs in `output_dir`: `pytorch_lora_weights.safetensors` +
`README.md` (the adapter and its card), `run.json` (what `miescore edit --lora RUN` samples with),
`metrics.jsonl`, `samples/step-*.png`, `checkpoint-<step>/` (rerun with `--resume_from_checkpoint latest` (or
`--resume`) after a kill: it continues exactly); `--push_to_hub` uploads the adapter and its card (token and
network checked before training). Exit status: 0 done, 1 stopped by the reward or a diverging loss (message says
which) or a failed upload, 2 bad input (one line: an unknown option or YAML key with the closest real one, a
missing path, a missing extra).
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field

# modeling_miescore.training first: importing it hides bitsandbytes' known import-time message
# (modeling_miescore.utils.third_party_logs) before transformers, trl or peft load bitsandbytes.
from modeling_miescore.training.editor_rl.config import FlowGRPOConfig  # isort: skip

from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.utils.credentials import redact
from modeling_miescore.utils.suggestions import missing_extra_message

logger = logging.getLogger("flow_grpo_editor")
PROG = "flow_grpo_editor"


@dataclass
class ScriptArguments:
    build_tiny_editor: str | None = field(default=None, metadata={
        "help": "Build a tiny random editor of this kind (qwen-image-edit-plus, flux2-klein, flux-kontext) at "
                "model_name_or_path first, if that folder does not exist (CPU smoke runs). From the YAML it "
                "applies to the YAML's own model_name_or_path only: a path typed on the command line is built "
                "only with this flag on the command line too."})
    build_tiny_requests: bool = field(default=False, metadata={
        "help": "Write tiny JSONL requests from scikit-image photos at `dataset` first, if it does not exist. From "
                "the YAML it applies to the YAML's own dataset only (as build_tiny_editor)."})


def make_parser():
    from modeling_miescore.training.recipe_parser import RecipeParser

    return RecipeParser((ScriptArguments, FlowGRPOConfig), prog=PROG)


# (script flag, config field it builds, what it builds)
TINY_INPUTS = (("build_tiny_editor", "model_name_or_path", "a tiny random editor"),
               ("build_tiny_requests", "dataset", "tiny editing requests"))


def prepare_tiny_inputs(script: ScriptArguments, config: FlowGRPOConfig, given=frozenset()) -> None:
    """The offline inputs of the tiny CPU config (nothing is downloaded). A build flag builds its path when that
    path does not exist, unless the path was typed on the command line (``given``) and the flag was not: a
    mistyped ``--dataset`` / ``--model_name_or_path`` is one error naming it, and nothing is written anywhere
    (every path is checked before anything is built)."""
    from pathlib import Path

    builds = []
    for flag, name, what in TINY_INPUTS:
        path = getattr(config, name)
        if not path or Path(path).expanduser().exists():
            continue
        value = getattr(script, flag)
        shown = value if flag == "build_tiny_editor" and value else "KIND" if flag == "build_tiny_editor" else "true"
        if not value:
            if name in given and not _could_be_hub_id(path):
                raise MIEScoreInputError(f"--{name} '{path}' does not exist; check the path (or pass --{flag} "
                                         f"{shown} to write {what} there)")
        elif name in given and flag not in given:
            raise MIEScoreInputError(
                f"--{name} '{path}' does not exist, and the config's {flag} builds only its own {name}; check "
                f"the path, or pass --{flag} {shown} on the command line to write {what} there")
        else:
            builds.append((flag, value, Path(path).expanduser(), what))
    for flag, value, path, what in builds:
        logger.info("writing %s to %s (%s)", what, path, flag)
        _build(flag, value, path)


def _could_be_hub_id(path: str) -> bool:
    """A Hub repo id (``org/name``) is loaded by the editor / dataset reader, which reports it if it cannot."""
    from modeling_miescore.hub.model_card import hub_repo_id

    return not path.endswith((".jsonl", ".json")) and hub_repo_id(path) is not None


def _build(flag: str, kind, path) -> None:
    """Build into a sibling folder renamed into place, so a kill never leaves a half-built input behind."""
    import shutil

    if flag == "build_tiny_requests":
        from modeling_miescore.testing.editing_requests import write_editing_requests

        write_editing_requests(path)  # the JSONL (what is checked for) is written last
        return
    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_BUILDERS, build_tiny_editor
    from modeling_miescore.utils.suggestions import did_you_mean

    if kind not in TINY_EDITOR_BUILDERS:
        known = ", ".join(TINY_EDITOR_BUILDERS)
        raise MIEScoreInputError(f"--build_tiny_editor {kind!r}: no tiny builder of that kind"
                                 f"{did_you_mean(kind, TINY_EDITOR_BUILDERS)}; known: {known}")
    staging = path.with_name(f".{path.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    build_tiny_editor(kind, staging)
    staging.rename(path)


def main(script: ScriptArguments, config: FlowGRPOConfig, given=frozenset()) -> dict:
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    trainer = FlowGRPOEditorTrainer(config)  # checks every setting, before anything is built or loaded
    prepare_tiny_inputs(script, config, given)
    result = trainer.train()
    steps = [m for m in result["metrics"] if "reward_mean" in m]  # the training steps' rows, not the evals'
    if steps:
        first, last = steps[0], steps[-1]
        logger.info("mean reward %.4f at step %d -> %.4f at step %d; adapter in %s", first["reward_mean"],
                    first["step"], last["reward_mean"], last["step"], config.output_dir)
    return result


def cli(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    try:
        parser = make_parser()
        script, config = parser.parse_args_and_config(argv)
        try:
            main(script, config, parser.given)
        except RuntimeError as err:  # imported only now: a bad argument is reported before torch loads
            from modeling_miescore.data.builders.output_folder import HubPushError
            from modeling_miescore.training.editor_rl.checkpoints import RunWriteError
            from modeling_miescore.training.editor_rl.objective import TrainingDivergedError
            from modeling_miescore.rewards.groups import RewardUnavailableError

            if not isinstance(err, (RewardUnavailableError, TrainingDivergedError, RunWriteError, HubPushError)):
                raise
            print(f"{PROG}: stopped: {redact(err)}", file=sys.stderr)
            return 1
    except SystemExit as exit_:  # the parser's one-line errors (status 2) and --help (0)
        return exit_.code if isinstance(exit_.code, int) else 2
    except MIEScoreInputError as err:
        print(f"{PROG}: error: {redact(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # a Ctrl-C: TrainingInterrupted says how to resume
        print(f"{PROG}: {str(err) or 'interrupted'}", file=sys.stderr)
        return 130
    except ModuleNotFoundError as err:
        message = missing_extra_message(err, "rl")
        if message is None:
            raise
        print(f"{PROG}: error: {message}", file=sys.stderr)
        return 2
    return 0


def exit_with(status: int) -> None:
    """Exit with ``status``; when a reward call that did not finish is still running on its thread (the worker
    waited for it, then gave up), end the process without finalising the interpreter, which would abort inside
    the reward's torch code (SIGABRT after the stop message; the docstring of modeling_miescore.rewards.worker)."""
    from modeling_miescore.rewards.worker import reward_calls_running

    if reward_calls_running():
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(status)  # the documented way out past a running native call
    sys.exit(status)


if __name__ == "__main__":
    exit_with(cli())
