"""The evaluation settings of an editor-RL run checked before anything loads (:mod:`.config` calls
:func:`evaluation_problems`; what they do is :mod:`.evaluation`)."""

from __future__ import annotations

import re
from typing import List, Optional

from ...utils.credentials import redact
from ...utils.suggestions import did_you_mean

__all__ = ["JUDGE_KINDS", "TRAIN_REWARD", "evaluation_problems"]

TRAIN_REWARD = "train_reward"  # the training reward's name among the eval rewards (eval/train_reward)
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
JUDGE_PATTERN = re.compile(r"^(.+)@(https?://\S+)$")
# eval-only reward kinds besides the --reward grammar: KIND:MODEL@URL, an editor benchmark's judge on an endpoint
JUDGE_KINDS = ("gedit-judge",)


def _spec_problem(spec) -> Optional[str]:
    from ...rewards.specs import reward_spec_problem

    if isinstance(spec, str) and spec.partition(":")[0] in JUDGE_KINDS:
        kind, _, argument = spec.partition(":")
        return None if JUDGE_PATTERN.match(argument.strip()) else f"write {kind}:MODEL@URL (URL with its /v1)"
    return reward_spec_problem(spec)


def evaluation_problems(config) -> List[str]:
    """What is wrong with a config's evaluation fields (each one line), for :meth:`~.config.FlowGRPOConfig.validate`."""
    problems, specs = [], dict(config.eval_rewards or {})
    evaluating, held_out = config.eval_steps > 0, bool(config.eval_dataset) or config.eval_split_size > 0
    if config.eval_dataset and config.eval_split_size:
        problems.append("eval_dataset and eval_split_size both name the eval requests; give one of them")
    if evaluating and not held_out:
        problems.append(f"eval_steps {config.eval_steps} evaluates held-out requests: give eval_dataset (a path) or "
                        "eval_split_size (how many requests of dataset to hold out)")
    if held_out and not evaluating:
        problems.append("eval requests are given but eval_steps is 0 (evaluation off): set eval_steps")
    for name, spec in specs.items():
        if not NAME.match(str(name)) or name == TRAIN_REWARD:
            problems.append(f"eval_rewards name {name!r} must be letters, digits, '_', '.' or '-' and not "
                            f"{TRAIN_REWARD!r} (the training reward's own eval name)")
        problem = _spec_problem(spec)
        if problem:
            problems.append(f"eval_rewards {name}: {redact(str(spec))!r}: {problem}")
    if specs and not evaluating:
        problems.append("eval_rewards are scored at the evals: set eval_steps (and eval_dataset or eval_split_size)")
    if config.stop_on_hacking and not specs:
        problems.append("stop_on_hacking needs a gold reward to compare the training reward with: give eval_rewards")
    metric = config.metric_for_best_model
    if metric:
        names = [f"eval/{n}" for n in (TRAIN_REWARD, *specs)]
        if metric not in names:
            problems.append(f"metric_for_best_model {metric!r} is not an eval metric of this run; it takes "
                            f"{', '.join(names)}{did_you_mean(metric, names)}")
        elif not evaluating:
            problems.append(f"metric_for_best_model {metric} needs evals: set eval_steps")
    if config.load_best_model_at_end and not metric:
        problems.append("load_best_model_at_end needs metric_for_best_model (e.g. eval/<an eval_rewards name>)")
    return problems
