"""Held-out evaluation of an editor-RL run, the reward-hacking alarm and the best checkpoint.

A proxy reward can climb while the edits get worse (SpatialReward sec. 5.3 measures the gain of its RL run with a
second judge, GPT-4.1 on GEdit-Bench, for this reason). With ``eval_steps: N`` and held-out requests
(``eval_dataset``, or ``eval_split_size`` requests of ``dataset`` that are never trained on, listed in ``run.json``'s
``evaluation``) the trainer evaluates at step 0, every N steps and at the end:

- **Eval edits** (:meth:`TrainerEvaluation.start_eval`): ``eval_images_per_request`` edits of each eval request,
  each request with its own fixed seed, under the grids' sampling schedule (ODE unless ``eval_sde_noise``): two
  evals differ only by training, so every change is *paired*, edit with edit.
- **Rewards on them** (:func:`score_eval`): the training reward (``eval/train_reward``) and every ``eval_rewards``
  entry (``{name: spec}``: the ``--reward`` grammar, plus ``gedit-judge:MODEL@URL``, GEdit-Bench's judge behind an
  OpenAI-compatible endpoint), never used for advantages. A failed eval reward is a flagged, counted failure
  (``eval/<name>/failures``), never a number. At the first eval every reward also scores the first source of each
  request as if it were the edit (``eval/<name>/source_as_edit``): "copy the source" is a known way to hack an edit
  reward, and a proxy that rates the policy above doing nothing while a gold rates it below is the picture of
  hacking. When the training reward and every eval reward run elsewhere (``serve:``, ``spatialreward-api:``,
  ``gedit-judge:``), the scoring overlaps the next training step; otherwise it runs at once.
- **Logged** (:func:`eval_row`): a ``metrics.jsonl`` row per eval with ``eval/<name>`` (the mean over the eval
  edits), ``eval/<name>/ci_low`` / ``ci_high`` (a 95% percentile bootstrap over the eval edits, 2,000 resamples;
  null with fewer than 10 edits, the bootstrap's floor), ``eval/<name>/failures``; the trackers of ``report_to``;
  ``evals.jsonl`` (every edit's value per reward: the history a ``--resume`` restores); and ``eval_curves.png``
  (:func:`save_curves`): every reward against step on one plot, each as its change since the first eval in units of
  that eval's spread over the edits, with its ``source_as_edit`` level dashed and the alarms marked.
- **The alarm** (:class:`HackingMonitor`): between two consecutive evals the change of each reward is judged against
  its own noise by a **paired bootstrap** of the per-edit changes (95% interval of their mean, 2,000 resamples,
  seeded): it *rises* when the interval lies above 0, *falls* when below. An alarm is raised for an eval reward
  when, over ``hacking_patience`` consecutive evals, the training reward rose while that reward fell: one console
  line, a ``metrics.jsonl`` row (``hacking_alarm``) and an entry of ``run.json``'s ``hacking_alarms`` (present and
  empty when nothing was raised). ``stop_on_hacking: true`` ends the run there (exit 0; ``run.json``'s ``stopped``
  and the card say why).
- **The best checkpoint** (``metric_for_best_model: eval/<name>``, ``greater_is_better``, as transformers'
  ``TrainingArguments``): every eval step is checkpointed (step 0 too: the untrained adapter), ``run.json``'s
  ``best_model`` names the best; ``save_total_limit`` never deletes it; with ``load_best_model_at_end`` the exported
  adapter (hence the card and ``miescore edit --lora RUN``) is the best checkpoint's. The card lists the eval
  figures at the best and the last eval.
"""

from __future__ import annotations

import concurrent.futures
import json
import logging
import math
import random
import shutil
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from ...hub.errors import MIEScoreInputError
from ...rewards.groups import EditGroup, checked_scores, reward_range_of
from ...utils.atomic_files import atomic_write
from ...utils.credentials import redact
from .checkpoints import checkpoint_folders, checkpoint_step, run_writes, truncate_metrics, update_run_record
from .config import JUDGE_KINDS, TRAIN_REWARD
from .schedule import SamplingSchedule, derived_seed
from ...evaluation.editor_benchmarks.judge_reward import build_gedit_judge_reward
from ...rewards.specs import build_reward, REMOTE_KINDS, reward_kinds
from ...evaluation.metrics.bootstrap import bootstrap_ci
from ...evaluation.report_parts import new_figure
from ...data.editing_inputs import read_editing_inputs
from .rollout import sample_request
from ...utils.markdown_table import markdown_table

__all__ = ["TRAIN_REWARD", "EVALS_FILE", "CURVES_FILE", "JUDGE_BUILDERS", "EvalResult", "HackingMonitor",
           "TrainerEvaluation", "build_eval_reward", "eval_row", "mean_ci", "paired_change",
           "rotate_checkpoints", "save_curves", "score_eval"]

logger = logging.getLogger(__name__.rsplit(".", 1)[0] + ".trainer")

EVALS_FILE = "evals.jsonl"
CURVES_FILE = "eval_curves.png"
RESAMPLES = 2000
LEVEL = 0.95


def _gedit_judge(argument: str, device=None):
    return build_gedit_judge_reward(argument)


# the builder of each of config.JUDGE_KINDS (eval-only kinds besides the --reward grammar)
JUDGE_BUILDERS = {"gedit-judge": _gedit_judge}


def build_eval_reward(spec, device: Optional[str] = None):
    """The reward an ``eval_rewards`` spec names (module docstring)."""
    if isinstance(spec, str) and spec.partition(":")[0] in JUDGE_KINDS:
        kind, _, argument = spec.partition(":")
        return JUDGE_BUILDERS[kind](argument.strip(), device=device)
    return build_reward(spec, **({"device": device} if device else {}))


def _is_remote(spec) -> bool:
    if isinstance(spec, str) and spec.partition(":")[0] in JUDGE_KINDS:
        return True
    try:
        return all(kind in REMOTE_KINDS for kind in reward_kinds(spec))
    except ValueError:
        return False


# ---------------------------------------------------------------------------------------------- statistics
def _bootstrap(values: np.ndarray, seed: int):
    with warnings.catch_warnings():  # too few edits: NaN bounds (null in the logs), said once at the start
        warnings.simplefilter("ignore")
        ci = bootstrap_ci(np.mean, values, n=RESAMPLES, seed=seed % (2 ** 32), level=LEVEL)
    return float(ci.point), ci.low, ci.high


def mean_ci(values: Sequence[Optional[float]], seed: int) -> dict:
    """``{"mean", "ci_low", "ci_high", "n"}`` over the valid values (None where none is)."""
    valid = np.array([v for v in values if v is not None], dtype=np.float64)
    if not len(valid):
        return {"mean": None, "ci_low": None, "ci_high": None, "n": 0}
    mean, low, high = _bootstrap(valid, seed)
    return {"mean": mean, "ci_low": _finite(low), "ci_high": _finite(high), "n": int(len(valid))}


def paired_change(before: Sequence[Optional[float]], after: Sequence[Optional[float]], seed: int) -> dict:
    """The paired bootstrap of the per-edit changes ``after - before`` (edits valid in both): ``{"change", "low",
    "high", "pairs", "direction"}``, ``direction`` 1 (the interval lies above 0), -1 (below) or 0."""
    diffs = np.array([b - a for a, b in zip(before, after) if a is not None and b is not None], dtype=np.float64)
    if not len(diffs):
        return {"change": None, "low": None, "high": None, "pairs": 0, "direction": 0}
    change, low, high = _bootstrap(diffs, seed)
    low, high = _finite(low), _finite(high)
    direction = 0 if low is None or high is None else (1 if low > 0 else -1 if high < 0 else 0)
    return {"change": change, "low": low, "high": high, "pairs": int(len(diffs)), "direction": direction}


def _finite(value) -> Optional[float]:
    return float(value) if value is not None and math.isfinite(value) else None


def _mean(values) -> Optional[float]:
    valid = [v for v in values if v is not None]
    return sum(valid) / len(valid) if valid else None


@dataclass
class EvalResult:
    """One eval: per reward name, every eval edit's value (None where it failed) and failure reason; the
    ``source_as_edit`` means (first eval only)."""

    step: int
    values: Dict[str, List[Optional[float]]]
    failures: Dict[str, List[Optional[str]]]
    source_as_edit: Dict[str, Optional[float]] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"step": self.step, "values": self.values, "failures": self.failures,
                "source_as_edit": self.source_as_edit}

    @classmethod
    def from_json(cls, data: dict) -> "EvalResult":
        return cls(int(data["step"]), dict(data["values"]), dict(data["failures"]),
                   dict(data.get("source_as_edit") or {}))


def _scored(reward, groups: Sequence[EditGroup]):
    """Every edit's value and failure reason under ``reward``; a reward that raises fails every edit (flagged)."""
    count = sum(len(g.edits) for g in groups)
    try:
        scores = reward.score_groups(list(groups))
        if len(scores) != len(groups):
            raise ValueError(f"{len(scores)} results for {len(groups)} groups")
        scores = [checked_scores(s, reward_range_of(reward)) for s in scores]
    except Exception as error:  # noqa: BLE001 - a failed eval reward is flagged and counted, the run goes on
        logger.warning("eval reward %s failed: %s: %s", getattr(reward, "name", reward), type(error).__name__,
                       redact(str(error))[:300])
        return [None] * count, ["reward_failed"] * count
    return [v for s in scores for v in s.rewards], [f for s in scores for f in s.failures]


def score_eval(step: int, groups: Sequence[EditGroup], rewards: Dict[str, object], with_source: bool) -> EvalResult:
    """Every reward of ``rewards`` (name -> :class:`~modeling_miescore.rewards.groups.EditorReward`) on the eval
    edits of ``groups``; with ``with_source``, also on each request's first source as the edit."""
    result = EvalResult(step, {}, {})
    copies = [EditGroup(g.key, g.sources, g.instruction, (g.sources[0],), g.source_ids) for g in groups]
    for name, reward in rewards.items():
        result.values[name], result.failures[name] = _scored(reward, groups)
        if with_source:
            result.source_as_edit[name] = _mean(_scored(reward, copies)[0])
    return result


def eval_row(result: EvalResult, seed: int) -> dict:
    """The ``metrics.jsonl`` row of an eval (module docstring)."""
    row = {"step": result.step}
    for name, values in result.values.items():
        stats = mean_ci(values, derived_seed(seed, "eval-ci", result.step, name))
        row[f"eval/{name}"] = stats["mean"]
        row[f"eval/{name}/ci_low"], row[f"eval/{name}/ci_high"] = stats["ci_low"], stats["ci_high"]
        row[f"eval/{name}/failures"] = sum(f is not None for f in result.failures[name])
        if name in result.source_as_edit:
            row[f"eval/{name}/source_as_edit"] = result.source_as_edit[name]
    return row


class HackingMonitor:
    """The hacking alarm (module docstring): per eval reward, the run of consecutive evals over which the training
    reward rose while it fell; an alarm when the run reaches ``patience`` (then the count starts again)."""

    def __init__(self, patience: int, seed: int):
        self.patience, self.seed = int(patience), seed
        self.runs: Dict[str, List[int]] = {}

    def observe(self, before: EvalResult, after: EvalResult) -> List[dict]:
        seed = derived_seed(self.seed, "eval-paired", after.step)
        proxy = paired_change(before.values[TRAIN_REWARD], after.values[TRAIN_REWARD], seed)
        alarms = []
        for name in after.values:
            if name == TRAIN_REWARD or name not in before.values:
                continue
            gold = paired_change(before.values[name], after.values[name], seed)
            run = self.runs.setdefault(name, [])
            if proxy["direction"] > 0 and gold["direction"] < 0:
                run.append(before.step)
            else:
                run.clear()
            if len(run) >= self.patience:
                alarms.append({"step": after.step, "reward": name, "since_step": run[0], "evals": len(run) + 1,
                               TRAIN_REWARD: {"before": _mean(before.values[TRAIN_REWARD]),
                                              "after": _mean(after.values[TRAIN_REWARD]), **proxy},
                               name: {"before": _mean(before.values[name]), "after": _mean(after.values[name]),
                                      **gold}})
                run.clear()
        return alarms


def alarm_line(alarm: dict) -> str:
    """One console line for an alarm."""
    name, proxy, gold = alarm["reward"], alarm[TRAIN_REWARD], alarm[alarm["reward"]]
    return (f"HACKING ALARM at step {alarm['step']}: over the evals since step {alarm['since_step']} the training "
            f"reward rose on the eval edits ({proxy['before']:.4g} -> {proxy['after']:.4g}, last change "
            f"{proxy['change']:+.4g} [{proxy['low']:+.4g}, {proxy['high']:+.4g}]) while {name} fell "
            f"({gold['before']:.4g} -> {gold['after']:.4g}, last change {gold['change']:+.4g} "
            f"[{gold['low']:+.4g}, {gold['high']:+.4g}]); paired bootstrap over {gold['pairs']} eval edits")


def save_curves(path, history: Sequence[EvalResult], alarms: Sequence[dict]) -> Path:
    """``eval_curves.png``: every reward against step on one plot (module docstring)."""
    fig = new_figure(7.5, 4.2)
    ax = fig.add_subplot()
    first = history[0]
    for k, name in enumerate(first.values):
        color = f"C{k}"
        base = _mean(first.values[name])
        valid = [v for v in first.values[name] if v is not None]
        spread = float(np.std(valid)) if len(valid) > 1 else 0.0
        spread = spread if spread > 1e-12 else (abs(base or 0.0) or 1.0)
        if base is None:
            continue
        steps = [r.step for r in history if _mean(r.values.get(name, [])) is not None]
        means = [(_mean(r.values[name]) - base) / spread for r in history if _mean(r.values.get(name, [])) is not None]
        label = f"{name} (proxy, trained on)" if name == TRAIN_REWARD else f"{name} (eval)"
        ax.plot(steps, means, marker="o", color=color, label=label, linewidth=2 if name == TRAIN_REWARD else 1.5)
        copied = first.source_as_edit.get(name)
        if copied is not None:
            ax.axhline((copied - base) / spread, color=color, linestyle="--", linewidth=1,
                       label=f"{name}: the source as the edit")
    for k, alarm in enumerate(alarms):
        ax.axvline(alarm["step"], color="red", linestyle=":", label="hacking alarm" if k == 0 else None)
    ax.axhline(0, color="gray", linewidth=0.5)
    ax.set_xlabel("training step")
    ax.set_ylabel("change since the first eval\n(in that eval's std over the edits)")
    ax.set_title("The training reward and the eval rewards on the same eval edits", fontsize=10)
    ax.legend(fontsize=7, loc="best")
    path = Path(path)
    with atomic_write(path, "wb") as handle:
        fig.savefig(handle, format="png")
    return path


def rotate_checkpoints(output_dir, limit: int, keep: Sequence[int]) -> List[str]:
    """Remove the oldest ``checkpoint-N`` folders beyond ``limit``, never the last one or a step in ``keep``;
    returns the removed names."""
    found = [c for c in checkpoint_folders(output_dir) if c.is_dir() and not c.is_symlink()]
    protected = set(keep) | ({checkpoint_step(found[-1])} if found else set())
    removed = []
    for checkpoint in found:
        if len(found) - len(removed) <= limit:
            break
        if checkpoint_step(checkpoint) not in protected:
            shutil.rmtree(checkpoint)
            removed.append(checkpoint.name)
    return removed


# ---------------------------------------------------------------------------------------------- the trainer's part
class TrainerEvaluation:
    """The evaluation part of :class:`~.trainer.FlowGRPOEditorTrainer` (a mixin; module docstring). The main process
    scores, logs and decides; a sharded transformer samples the eval edits on every process."""

    eval_rows: list = []
    eval_history: List[EvalResult] = []
    hacking_alarms: List[dict] = []
    best_model: Optional[dict] = None
    stop_reason: Optional[dict] = None

    def split_eval_rows(self, rows: list) -> list:
        """The training requests: ``rows`` less the ``eval_split_size`` held out (drawn with the seed); sets
        ``eval_rows`` (those, or ``eval_dataset``'s)."""
        cfg = self.config
        self.eval_rows, self.pending_evals, self.eval_history, self.hacking_alarms = [], [], [], []
        self.best_model = self.stop_reason = None
        self.eval_executor = None
        if not cfg.eval_steps:
            return rows
        if cfg.eval_dataset:
            self.eval_rows = read_editing_inputs(cfg.eval_dataset)
        else:
            if cfg.eval_split_size >= len(rows):
                raise MIEScoreInputError(f"eval_split_size {cfg.eval_split_size} holds out every request of dataset "
                                         f"({len(rows)}); hold out fewer, or give eval_dataset")
            picked = set(random.Random(derived_seed(cfg.seed, "eval-split")).sample(range(len(rows)),
                                                                                     cfg.eval_split_size))
            self.eval_rows = [row for k, row in enumerate(rows) if k in picked]
            rows = [row for k, row in enumerate(rows) if k not in picked]
        edits = len(self.eval_rows) * cfg.eval_images_per_request
        if edits < 10:
            logger.warning("only %d eval edits (eval requests x eval_images_per_request): the bootstrap needs 10, so "
                           "the eval CIs are null and no hacking alarm can be raised", edits)
        return rows

    def evaluation_record(self) -> dict:
        """What ``run.json`` keeps of the evaluation from the start."""
        cfg = self.config
        if not self.eval_rows:
            return {"hacking_alarms": []}
        return {"evaluation": {"requests": [row.id for row in self.eval_rows],
                               "from": "eval_dataset" if cfg.eval_dataset else "dataset (eval_split_size, never "
                                                                                "trained on)",
                               "images_per_request": cfg.eval_images_per_request,
                               "rewards": [TRAIN_REWARD, *cfg.eval_rewards],
                               "schedule": self.eval_schedule_for().describe(cfg.num_inference_steps)},
                "hacking_alarms": []}

    def eval_schedule_for(self) -> SamplingSchedule:
        cfg = self.config
        return SamplingSchedule.trained(cfg.to_dict(), noise=True) if cfg.eval_sde_noise else self.grid_schedule

    def build_eval_rewards(self) -> None:
        """The eval rewards by name, the training reward first (a second instance of it when the scoring overlaps
        training: the worker's own is busy then)."""
        cfg = self.config
        self.eval_remote = bool(cfg.reward) and _is_remote(cfg.reward) and all(
            _is_remote(spec) for spec in cfg.eval_rewards.values()) and self.reward_from_spec
        self.eval_rewards = {}
        if not self.eval_rows:
            return
        device = str(self.accelerator.device)
        try:
            self.eval_rewards[TRAIN_REWARD] = (build_eval_reward(cfg.reward, device) if self.eval_remote
                                               else self.reward)
            for name, spec in cfg.eval_rewards.items():
                self.eval_rewards[name] = build_eval_reward(spec, device)
        except ValueError as error:
            self.close_eval_rewards()
            raise MIEScoreInputError(f"eval_rewards: {redact(str(error))}") from None

    def close_eval_rewards(self) -> None:
        for name, reward in getattr(self, "eval_rewards", {}).items():
            if reward is not self.reward:
                reward.close()
        if getattr(self, "eval_executor", None) is not None:
            self.eval_executor.shutdown(wait=True)
            self.eval_executor = None

    def eval_due(self, step: int) -> bool:
        cfg = self.config
        return bool(self.eval_rows) and (step == 0 or step % cfg.eval_steps == 0 or step == cfg.max_steps)

    def keeps_eval_checkpoint(self, step: int) -> bool:
        return bool(self.config.metric_for_best_model) and self.eval_due(step)

    def start_eval(self, step: int) -> None:
        """Sample the eval edits of ``step`` and start scoring them (in the background when every reward runs
        elsewhere)."""
        cfg, main = self.config, self.accelerator.is_main_process
        if not (main or self.sharded) or any(r.step == step for r in self.eval_history):
            return
        with torch.no_grad():
            groups = [sample_request(self.editor, row, num_images=cfg.eval_images_per_request,
                                     num_steps=cfg.num_inference_steps, schedule=self.eval_schedule_for(),
                                     seed=derived_seed(cfg.seed, "eval", row.id) % (2 ** 62)) for row in self.eval_rows]
        if not main:
            return
        with_source = not self.eval_history and not self.pending_evals
        if self.eval_remote:
            if self.eval_executor is None:
                self.eval_executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="eval-rewards")
            future = self.eval_executor.submit(score_eval, step, groups, self.eval_rewards, with_source)
        else:
            future = concurrent.futures.Future()
            future.set_result(score_eval(step, groups, self.eval_rewards, with_source))
        self.pending_evals.append((step, future))

    def collect_evals(self) -> Optional[dict]:
        """Finish the evals under way (main process): log them, raise alarms, track the best; every process gets
        the stop reason (None: go on)."""
        if not self.eval_rows:
            return None
        if self.accelerator.is_main_process:
            while self.pending_evals:
                self.record_eval(self.pending_evals.pop(0)[1].result())
        stop = self.stop_reason if self.accelerator.is_main_process else None
        return self._from_every_process(stop)[0]

    def add_eval(self, result: EvalResult) -> tuple:
        """``result`` joins the history (the alarms it raises, the best checkpoint); its ``metrics.jsonl`` row and
        its alarms."""
        before = self.eval_history[-1] if self.eval_history else None
        self.eval_history.append(result)
        row = eval_row(result, self.config.seed)
        alarms = self.monitor.observe(before, result) if before is not None else []
        self.hacking_alarms.extend(alarms)
        self.track_best(result, row)
        return row, alarms

    def record_eval(self, result: EvalResult) -> None:
        cfg = self.config
        row, alarms = self.add_eval(result)
        with run_writes(f"the eval of step {result.step}", self.out):
            with open(self.out / EVALS_FILE, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(result.to_json()) + "\n")
            self.metrics.write(row)
        logger.info("eval at step %d: %s", result.step, " | ".join(
            f"{name} {row[f'eval/{name}']:.4g} [{_shown(row[f'eval/{name}/ci_low'])}, "
            f"{_shown(row[f'eval/{name}/ci_high'])}]" if row[f"eval/{name}"] is not None else f"{name} failed"
            for name in result.values))
        for alarm in alarms:
            logger.warning("%s", alarm_line(alarm))
            with run_writes("metrics.jsonl (hacking alarm)", self.out):
                self.metrics.write({"step": result.step, "hacking_alarm": alarm})
        record = {"hacking_alarms": self.hacking_alarms, "best_model": self.best_model}
        if alarms and cfg.stop_on_hacking:
            self.stop_reason = {"step": result.step, "reason": "stop_on_hacking: " + alarm_line(alarms[0])}
            record["stopped"] = self.stop_reason
        update_run_record(self.out, **record)
        with run_writes(CURVES_FILE, self.out):
            path = save_curves(self.out / CURVES_FILE, self.eval_history, self.hacking_alarms)
        if self.accelerator.trackers:
            from .outputs import log_grid_image

            log_grid_image(self.accelerator, path, result.step, tag="eval/curves")

    def track_best(self, result: EvalResult, row: dict) -> None:
        cfg = self.config
        metric = cfg.metric_for_best_model
        value = row.get(metric) if metric else None
        if value is None or not (self.out / f"checkpoint-{result.step}").is_dir():
            return
        greater = cfg.greater_is_better is not False
        best = self.best_model
        if best is None or (value > best["value"] if greater else value < best["value"]):
            self.best_model = {"metric": metric, "value": value, "step": result.step,
                               "checkpoint": f"checkpoint-{result.step}"}

    def restore_evaluation(self, start: int) -> None:
        """On a resume: ``evals.jsonl`` cut back to ``start`` (all of it when the run starts over), then the
        history, the alarms and the best checkpoint replayed from it (deterministic: the same figures)."""
        self.monitor = HackingMonitor(self.config.hacking_patience, self.config.seed)
        if not self.eval_rows or not self.accelerator.is_main_process:
            return
        path = self.out / EVALS_FILE
        if self.resuming:
            truncate_metrics(path, start if self.resume_from is not None else -1)
        lines = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
        for line in lines:
            self.add_eval(EvalResult.from_json(json.loads(line)))
        if self.resuming:
            update_run_record(self.out, hacking_alarms=self.hacking_alarms, best_model=self.best_model,
                              stopped=None)

    def after_checkpoint(self) -> None:
        """``save_total_limit``: the oldest checkpoints go, never the best nor one whose eval is under way."""
        cfg = self.config
        if not cfg.save_total_limit or not self.accelerator.is_main_process:
            return
        keep = ([self.best_model["step"]] if self.best_model else []) + [step for step, _ in self.pending_evals]
        removed = rotate_checkpoints(self.out, cfg.save_total_limit, keep)
        if removed:
            logger.info("save_total_limit %d: removed %s", cfg.save_total_limit, ", ".join(removed))

    def load_best_for_export(self) -> Optional[int]:
        """With ``load_best_model_at_end``: the best checkpoint's trained parameters (and EMA) in place of the last
        ones, before the adapter is written; returns its step."""
        from safetensors.torch import load_file

        cfg = self.config
        best = self.best_model if self.accelerator.is_main_process else None
        best = self._from_every_process(best)[0]
        if not cfg.load_best_model_at_end or best is None:
            return None
        folder = self.out / best["checkpoint"]
        self._load_trainable(load_file(str(folder / "trainable.safetensors")), folder)
        if self.ema is not None and (folder / "ema.safetensors").is_file():
            self._load_ema(load_file(str(folder / "ema.safetensors")), folder)
        logger.info("load_best_model_at_end: exporting %s (%s %.4g)", best["checkpoint"], best["metric"],
                    best["value"])
        return best["step"]

    def evaluation_card_lines(self) -> List[str]:
        """The card's ``## Evaluation`` section: the eval figures at the best and the last eval, the alarms, why
        the run stopped."""
        if not self.eval_history:
            return []
        rows = {r.step: eval_row(r, self.config.seed) for r in self.eval_history}
        last = self.eval_history[-1].step
        shown = [("last eval", last)]
        if self.best_model:
            shown.insert(0, (f"best ({self.best_model['metric']})", self.best_model["step"]))
        table = [[f"`{name}`", *(_figure(rows[step], name) for _, step in shown)]
                 for name in self.eval_history[-1].values]
        lines = ["## Evaluation", "", f"Held-out edits ({len(self.eval_rows)} requests x "
                 f"{self.config.eval_images_per_request}, fixed seeds); mean [95% bootstrap CI]. `{TRAIN_REWARD}` is "
                 "the training reward on the same edits.", "",
                 markdown_table(["reward", *(f"{label}, step {step}" for label, step in shown)], table), ""]
        if self.best_model and self.config.load_best_model_at_end:
            lines += [f"This adapter is the best checkpoint (step {self.best_model['step']}), not the last.", ""]
        lines += [f"Hacking alarms: {len(self.hacking_alarms)}" + "".join(
            f"; step {a['step']} ({a['reward']} fell while the training reward rose)" for a in self.hacking_alarms)
            + ".", ""]
        if self.stop_reason:
            lines += [f"The run stopped at step {self.stop_reason['step']}: {self.stop_reason['reason']}", ""]
        return lines


def _shown(value) -> str:
    return "-" if value is None else f"{value:.4g}"


def _figure(row: dict, name: str) -> str:
    mean = row.get(f"eval/{name}")
    if mean is None:
        return "failed"
    return f"{mean:.4f} [{_shown(row.get(f'eval/{name}/ci_low'))}, {_shown(row.get(f'eval/{name}/ci_high'))}]"
