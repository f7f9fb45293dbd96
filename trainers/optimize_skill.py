"""Skill optimisation, the first training stage of MIEScore (paper, section "Skill Optimization", eqs. 5-8).

A frozen generative evaluator scores MIE-Bench training edits with the current skill (the rubric at the start
of every prompt); an optimiser model reads the worst failures and proposes K bounded line edits of the skill;
the candidate with the best mean validation SRCC over VQ/IF/AP replaces the skill when it beats it.

Both models are either a local checkpoint (Qwen3-VL or any ``AutoModelForImageTextToText``, greedy decoding)
or an OpenAI-compatible server (vLLM, SGLang, OpenAI, ...; the API key comes from an environment variable).

Usage (TRL-scripts style: a YAML config, any field overridable on the command line)::

    python trainers/optimize_skill.py --config trainers/configs/optimize_skill_example.yaml
    python trainers/optimize_skill.py --config my.yaml --num_iterations 8 --output_dir runs/skill

    # serve the evaluator with vLLM and use it through its OpenAI-compatible API
    vllm serve Qwen/Qwen3-VL-8B-Instruct --port 8000
    python trainers/optimize_skill.py --dataset_name data/mie-bench --evaluator_backend openai \\
        --evaluator_model Qwen/Qwen3-VL-8B-Instruct --evaluator_base_url http://127.0.0.1:8000/v1 ...

Outputs in ``output_dir``: ``skill.txt`` (the best skill; written after every run, atomically),
``history.jsonl`` (one record per iteration: skills, candidates, validation SRCC, failures, optimiser errors)
and ``summary.json``. Rerunning the same command resumes after the last completed iteration. Put the skill
into a MIEScore checkpoint before supervised fine-tuning with ``miescore set-skill CHECKPOINT skill.txt``.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional

logger = logging.getLogger("optimize_skill")

BACKENDS = ("transformers", "openai")


@dataclass
class DataArguments:
    """Where the MIE-Bench rows come from."""

    dataset_name: str = field(default="", metadata={
        "help": "Hub-native MIE-Bench folder or Hub repo id (load_dataset)."})
    dataset_config: Optional[str] = field(default=None, metadata={"help": "dataset config name"})
    train_split: str = field(default="train", metadata={"help": "split used for the rollouts (eq. 6)"})
    val_split: str = field(default="validation", metadata={"help": "split used to select candidates (eq. 8)"})
    max_train_samples: Optional[int] = field(default=None, metadata={"help": "cap of the training rows (seeded draw)"})
    max_val_samples: Optional[int] = field(default=256, metadata={
        "help": "cap of the validation rows (seeded draw, fixed for the whole run); every candidate is scored on "
                "all of them, so this bounds the cost of an iteration: K x max_val_samples evaluator calls"})


@dataclass
class ModelArguments:
    """The evaluator f (eq. 5) and the optimiser O (eq. 7)."""

    evaluator_backend: str = field(default="transformers", metadata={"help": "transformers or openai"})
    evaluator_model: str = field(default="Qwen/Qwen3-VL-8B-Instruct",
                                 metadata={"help": "checkpoint path / Hub id, or the server's model name"})
    evaluator_base_url: Optional[str] = field(default=None, metadata={"help": "e.g. http://127.0.0.1:8000/v1 (openai)"})
    evaluator_api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "env variable with the API key"})
    optimizer_backend: str = field(default="transformers", metadata={"help": "transformers or openai"})
    optimizer_model: str = field(default="Qwen/Qwen3-VL-8B-Instruct", metadata={"help": "same as evaluator_model"})
    optimizer_base_url: Optional[str] = field(default=None, metadata={"help": "openai backend only"})
    optimizer_api_key_env: str = field(default="OPENAI_API_KEY", metadata={"help": "env variable with the API key"})
    device: str = field(default="auto", metadata={"help": "transformers backend: cpu, cuda, cuda:1, ..."})
    dtype: str = field(default="auto", metadata={"help": "transformers backend: auto, bfloat16, float16, float32"})
    batch_size: int = field(default=4, metadata={"help": "prompts per generate call (transformers backend)"})
    max_pixels: int = field(default=1_048_576, metadata={"help": "pixel budget per image (paper: 1,048,576)"})
    evaluator_max_new_tokens: int = field(default=256, metadata={"help": "tokens of an evaluator answer"})
    optimizer_max_new_tokens: int = field(default=2048, metadata={"help": "tokens of an optimiser answer"})
    optimizer_temperature: float = field(default=0.0, metadata={"help": "openai optimiser: 0 = greedy"})
    request_timeout: float = field(default=120.0, metadata={"help": "openai backend: seconds per request"})
    max_retries: int = field(default=2, metadata={"help": "openai backend: retries of transient failures"})
    num_workers: int = field(default=8, metadata={"help": "openai backend: concurrent requests"})


@dataclass
class OutputArguments:
    """Where the results go and how the run reports progress. The loop's settings are
    :class:`~modeling_miescore.training.skill.SkillOptConfig`, parsed from the same YAML / command line."""

    output_dir: str = field(default="runs/skill-optimization",
                            metadata={"help": "skill.txt, history.jsonl, summary.json"})
    initial_skill: Optional[str] = field(default=None, metadata={
        "help": "text file with S^(0) (default: MIEScore's default skill)"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})


def make_parser():
    """The recipes' parser (``RecipeParser``: TRL's, with one-line argument errors) over the data, model, output
    and loop (``SkillOptConfig``) arguments."""
    from modeling_miescore.training.recipe_parser import RecipeParser
    from modeling_miescore.training.skill import SkillOptConfig

    return RecipeParser((DataArguments, ModelArguments, OutputArguments, SkillOptConfig))


class UserError(Exception):
    """Bad settings or data: printed as one line, exit status 2."""


def _select(dataset, n: Optional[int], seed: int):
    if n is None or n >= len(dataset):
        return dataset
    if n < 1:
        raise UserError(f"sample caps must be >= 1, got {n}")
    return dataset.shuffle(seed=seed).select(range(n))


def load_splits(data: DataArguments, seed: int):
    if not data.dataset_name:
        raise UserError("no dataset: pass --dataset_name (a MIE-Bench folder built with "
                        "`miescore build-dataset mie-bench`, or a Hub repo id)")
    from datasets import load_dataset

    try:
        ds = load_dataset(data.dataset_name, data.dataset_config)
    except (FileNotFoundError, ValueError, OSError) as err:
        raise UserError(f"could not load dataset '{data.dataset_name}': {' '.join(str(err).split())[:300]}") from None
    missing = [s for s in (data.train_split, data.val_split) if s not in ds]
    if missing:
        raise UserError(f"dataset '{data.dataset_name}' has no split {', '.join(missing)} "
                        f"(it has {', '.join(ds)}); set --train_split / --val_split")
    needed = {"id", "instruction", "source_images", "edited_image", "mos_vq", "mos_if", "mos_ap"}
    lacking = needed - set(ds[data.train_split].column_names)
    if lacking:
        raise UserError(f"dataset '{data.dataset_name}' lacks the column(s) {', '.join(sorted(lacking))}; "
                        "skill optimisation needs MIE-Bench rows")
    return (_select(ds[data.train_split], data.max_train_samples, seed),
            _select(ds[data.val_split], data.max_val_samples, seed))


def make_backend(kind: str, model: str, base_url: Optional[str], api_key_env: str, args: ModelArguments,
                 cache: dict, temperature: float = 0.0):
    from modeling_miescore.training.skill import OpenAIBackend, TransformersBackend

    if kind not in BACKENDS:
        raise UserError(f"unknown backend {kind!r}; choose one of {', '.join(BACKENDS)}")
    if kind == "openai":
        if not base_url:
            raise UserError("the openai backend needs a base URL: set --evaluator_base_url / --optimizer_base_url "
                            "(e.g. http://127.0.0.1:8000/v1)")
        try:
            return OpenAIBackend(base_url, model, api_key_env=api_key_env, timeout=args.request_timeout,
                                 max_retries=args.max_retries, num_workers=args.num_workers, temperature=temperature,
                                 max_pixels=args.max_pixels)
        except ValueError as err:
            raise UserError(str(err)) from None
    if model not in cache:  # the evaluator and the optimiser can share one loaded model
        cache[model] = TransformersBackend(model, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                                           max_pixels=args.max_pixels)
    return cache[model]


def make_models(model_args: ModelArguments, config):
    """The evaluator f (eq. 5) and the optimiser O (eq. 7) on their backends, consistent with ``config``."""
    from modeling_miescore.training.skill import SkillEvaluator, SkillOptimizer

    cache: dict = {}
    eval_backend = make_backend(model_args.evaluator_backend, model_args.evaluator_model, model_args.evaluator_base_url,
                                model_args.evaluator_api_key_env, model_args, cache)
    opt_backend = make_backend(model_args.optimizer_backend, model_args.optimizer_model, model_args.optimizer_base_url,
                               model_args.optimizer_api_key_env, model_args, cache, model_args.optimizer_temperature)
    # an evaluator batch is one progress step; for a server it is also the number of requests in flight
    eval_batch = model_args.num_workers if model_args.evaluator_backend == "openai" else model_args.batch_size
    evaluator = SkillEvaluator(eval_backend, score_max=config.score_max,
                               max_new_tokens=model_args.evaluator_max_new_tokens, batch_size=eval_batch)
    optimizer = SkillOptimizer(opt_backend, k=config.num_candidates, bounds=config.bounds(),
                               max_new_tokens=model_args.optimizer_max_new_tokens, score_max=config.score_max)
    return evaluator, optimizer


def read_initial_skill(path_text: Optional[str]) -> Optional[str]:
    if not path_text:
        return None
    path = Path(path_text)
    if not path.is_file():
        raise UserError(f"initial skill file '{path}' does not exist")
    skill = path.read_text(encoding="utf-8")
    if not skill.strip():
        raise UserError(f"initial skill file '{path}' is empty")
    return skill


def run(data: DataArguments, model_args: ModelArguments, out_args: OutputArguments, config) -> dict:
    from modeling_miescore.training.skill import optimize_skill
    from modeling_miescore.utils.atomic_files import write_text_atomic

    config.validate()
    initial_skill = read_initial_skill(out_args.initial_skill)
    train, val = load_splits(data, config.seed)
    evaluator, optimizer = make_models(model_args, config)
    out = Path(out_args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    result = optimize_skill(train, val, evaluator, optimizer, initial_skill=initial_skill, config=config,
                            history_path=out / "history.jsonl", progress=out_args.progress)
    write_text_atomic(out / "skill.txt", result.skill)
    summary = {
        "iterations": len(result.iterations),
        "initial_val": result.initial_val, "final_val": result.val,
        "chosen": [r["chosen"] for r in result.iterations],
        "skill_chars": len(result.skill),
        "arguments": {"data": asdict(data), "model": asdict(model_args), "output": asdict(out_args),
                      "optimization": asdict(config)},
    }
    write_text_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv=None) -> int:
    data, model_args, out_args, config = make_parser().parse_args_and_config(args=argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from modeling_miescore.hub.errors import MIEScoreInputError

    try:
        summary = run(data, model_args, out_args, config)
    except (UserError, MIEScoreInputError) as err:
        print(f"optimize_skill: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("optimize_skill: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    fmt = lambda v: "n/a" if v["objective"] is None else f"{v['objective']:.4f}"  # noqa: E731
    print(f"{summary['iterations']} iteration(s); mean validation SRCC {fmt(summary['initial_val'])} -> "
          f"{fmt(summary['final_val'])}; skill written to {Path(out_args.output_dir) / 'skill.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
