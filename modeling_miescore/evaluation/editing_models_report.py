"""The editing-model leaderboard: how good are editing models, judged by an evaluator's predicted scores?

Mean predicted VQ/IF/AP/overall per editing model, task and category (layout of the MIEScore paper's tables
8-11), with CIs that resample instances. The rows come from a MIE-Bench split joined with predictions, or
from the predictions alone (:func:`frame_from_predictions`). :func:`editing_models_markdown` lays the result out
as those tables; :mod:`.report` writes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..data.schema import LONG_NAMES, MIE_CATEGORIES, SCORE_KEYS, SHORT_NAMES, TASK_CATEGORY, TASKS
from ..data.dataset_splits import ordered_labels
from ..data.errors import BenchmarkInputError
from .instance_bootstrap import NO_VALUE, BootstrapSettings, InstanceBootstrap, without_ci
from .metrics.model_ranking import per_model_means
from .report_parts import counts_phrase, fmt_ci, notes_section, plot_lines, report_header, report_table, title_case

__all__ = ["editing_models_markdown", "editing_models_report", "frame_from_predictions"]


def editing_models_report(frame, dims: Sequence[str] | None = None, *,
                          bootstrap: BootstrapSettings | None = None) -> dict:
    """Leaderboard of editing models by mean predicted score, per dimension, task and category.

    ``frame``: rows with ``instance_id, task, category, editing_model`` and ``pred_<dim>`` columns. Models are
    ranked by their mean over all their edits (``"all"``). CIs resample instances (``bootstrap``: how;
    default :class:`~.instance_bootstrap.BootstrapSettings`).
    """
    dims = [d for d in (dims or SCORE_KEYS) if f"pred_{d}" in frame.columns]
    if not dims:
        raise BenchmarkInputError("no predicted score column to rank editing models by")
    models = frame["editing_model"].astype(str).to_numpy()
    model_names = sorted(set(models))
    task_names = ordered_labels(frame["task"], TASKS)
    cat_names = ordered_labels(frame["category"], MIE_CATEGORIES)
    boot = InstanceBootstrap(frame["instance_id"].to_numpy(), bootstrap)
    res = boot(_model_means_fn(frame, dims, model_names, task_names, cat_names), "editing-model means")
    _drop_thin_cis(res, boot, frame, models)
    leaderboard = {d: _ranked_rows(res[d], models, model_names, task_names, cat_names) for d in dims}
    tasks = frame["task"].to_numpy()
    cats = frame["category"].to_numpy()
    return {
        "benchmark": "editing-models",
        "meta": {
            "n_items": len(frame),
            "n_instances": int(frame["instance_id"].nunique()),
            "n_editing_models": len(model_names),
            "n_tasks": len(task_names),
            "dimensions": list(dims),
            "tasks": task_names,
            "task_category": {t: TASK_CATEGORY.get(t, str(cats[tasks == t][0])) for t in task_names},
            "categories": cat_names,
            "bootstrap": boot.describe("instances, all edits of a drawn instance_id together"),
        },
        "leaderboard": leaderboard,
        "notes": boot.notes,
    }


def _model_means_fn(frame, dims: list[str], model_names: list[str], task_names: list[str], cat_names: list[str]):
    """``fn(row indices) -> {dim: {"all": {model: mean}, "tasks": {model: {task: mean}}, "categories": ...}}``."""
    pred = {d: frame[f"pred_{d}"].to_numpy(dtype=np.float64) for d in dims}
    # integer codes (model, and model x task / model x category cells): fast np.unique in per_model_means
    mcode = np.searchsorted(np.asarray(model_names), frame["editing_model"].astype(str).to_numpy())
    n_t, n_c = len(task_names), len(cat_names)
    tcell = mcode * n_t + frame["task"].map({t: i for i, t in enumerate(task_names)}).to_numpy()
    ccell = mcode * n_c + frame["category"].map({c: i for i, c in enumerate(cat_names)}).to_numpy()

    def means(values, labels) -> dict[int, float]:
        lab, m = per_model_means(values, labels, nan_policy="omit")
        return dict(zip(lab.tolist(), m.tolist()))

    def fn(idx):
        out = {}
        for d in dims:
            v = pred[d][idx]
            out[d] = {"all": {model_names[k]: x for k, x in means(v, mcode[idx]).items()}}
            for name, cells, names, width in (("tasks", tcell, task_names, n_t), ("categories", ccell, cat_names, n_c)):
                block: dict[str, dict] = {}
                for cell, x in means(v, cells[idx]).items():
                    block.setdefault(model_names[cell // width], {})[names[cell % width]] = x
                out[d][name] = block
        return out

    return fn


def _drop_thin_cis(res: dict, boot: InstanceBootstrap, frame, models: np.ndarray) -> None:
    """Remove the intervals of the model, model x task and model x category means over too few instances."""
    labels = {"tasks": frame["task"].astype(str).to_numpy(), "categories": frame["category"].astype(str).to_numpy()}
    for dim_res in res.values():
        means = [(dim_res["all"], model, models == model) for model in dim_res["all"]]
        means += [(cells, label, (models == model) & (labels[key] == label))
                  for key in labels for model, cells in dim_res[key].items() for label in cells]
        for block, name, rows in means:
            if boot.too_few(np.flatnonzero(rows)):
                block[name] = without_ci(block[name])


def _ranked_rows(res: dict, models: np.ndarray, model_names: list[str], task_names: list[str],
                 cat_names: list[str]) -> list[dict]:
    """One dimension's leaderboard rows, best mean first, with ``rank`` 1, 2, ..."""
    rows = []
    for m in model_names:
        rows.append({
            "model": m,
            "all": res["all"].get(m, NO_VALUE),
            "categories": {c: res["categories"].get(m, {}).get(c, NO_VALUE) for c in cat_names},
            "tasks": {t: res["tasks"].get(m, {}).get(t, NO_VALUE) for t in task_names},
            "n_items": int((models == m).sum()),
        })
    rows.sort(key=lambda r: -(r["all"]["value"] if r["all"]["value"] is not None else -math.inf))
    for rank, r in enumerate(rows, start=1):
        r["rank"] = rank
    return rows


def frame_from_predictions(preds, source: str):
    """Rows for the editing-model leaderboard taken from the predictions themselves (no dataset): each line needs
    ``editing_model`` and ``task``; ``instance_id`` (for the bootstrap) defaults to the id."""
    import pandas as pd

    missing = [k for k in ("editing_model", "task") if k not in preds.columns]
    if missing or preds[["editing_model", "task"]].isna().any().any():
        raise BenchmarkInputError(
            f"without --dataset every line of '{source}' needs 'editing_model' and 'task'; "
            "pass --dataset to take them from a MIE-Bench dataset"
        )
    df = pd.DataFrame({"id": preds.index.astype(str)})
    df["editing_model"] = preds["editing_model"].to_numpy()
    df["task"] = preds["task"].to_numpy()
    df["instance_id"] = preds["instance_id"].to_numpy() if "instance_id" in preds.columns else df["id"]
    df["instance_id"] = df["instance_id"].fillna(df["id"])
    if "category" in preds.columns:
        df["category"] = preds["category"].fillna("other").to_numpy()
    else:
        df["category"] = [TASK_CATEGORY.get(t, "other") for t in df["task"]]
    for d in SCORE_KEYS:
        if d in preds.columns:
            df[f"pred_{d}"] = preds[d].to_numpy(dtype=np.float64)
    return df


def editing_models_markdown(report: dict) -> str:
    meta = report["meta"]
    dims = meta["dimensions"]
    lb = report["leaderboard"]
    order_dim = "overall" if "overall" in dims else dims[-1]
    out = report_header(report, "Editing-model leaderboard (predicted scores)",
                  f"{meta['n_editing_models']} editing models ranked by the evaluator's mean predicted score over "
                  f"{meta['n_items']} edits ({meta['n_instances']} instances, {len(meta['tasks'])} tasks). ")

    counts = counts_phrase(meta, "editing_models", "items", "instances", "tasks")
    out += [f"## Leaderboard: {counts}", ""]
    by_dim = {d: {r["model"]: r for r in lb[d]} for d in dims}
    rows = [[r["rank"], r["model"], r["n_items"]] + [fmt_ci(by_dim[d][r["model"]]["all"], 2) for d in dims]
            for r in lb[order_dim]]
    out += [report_table(["Rank", "Model", "n (edits)", *[SHORT_NAMES[d] for d in dims]], rows,
                   "rl" + "r" * (len(dims) + 1)), ""]
    out += [f"Ranked by mean predicted {SHORT_NAMES[order_dim]}.", ""]
    out += plot_lines(report, "editing_models", "Mean predicted score per editing model")

    cats = meta["categories"]
    tcat = meta["task_category"]
    for d in dims:
        out += [f"## {LONG_NAMES[d]} per task (paper tables 8–11 layout): {counts}", ""]
        for cgroup in ([c for c in cats if c == "regional"], [c for c in cats if c != "regional"]):
            tasks = [t for t in meta["tasks"] if tcat.get(t) in cgroup]
            if not tasks:
                continue
            label = " + ".join(title_case(c) for c in cgroup)
            rows = [[r["model"]] + [fmt_ci(r["tasks"][t], 2, ci=False) for t in tasks] for r in lb[d]]
            out += [f"**{label} editing**", "", report_table(["Model/Task", *[title_case(t) for t in tasks]], rows), ""]
        rows = [[r["model"]] + [fmt_ci(r["categories"][c], 2) for c in cats] + [fmt_ci(r["all"], 2)] for r in lb[d]]
        out += ["**By category**", "", report_table(["Model", *[title_case(c) for c in cats], "All"], rows), ""]
        out += plot_lines(report, f"heatmap_{d}", f"Mean predicted {SHORT_NAMES[d]} per model and task")

    extra = ["Scores are the evaluator's predictions on the 0–100 MOS scale, not human ratings; a model's score is "
             "the mean over its edits (per task: over its edits of that task)."]
    return "\n".join(out + notes_section(report, extra))
