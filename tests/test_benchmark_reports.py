"""The report building blocks without the CLI: instance bootstrap settings and notes, the MIE-Bench report on a
hand-made frame, MER-Bench category order, and report/plot files that are replaced atomically."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pandas as pd
import pytest

from modeling_miescore.evaluation.instance_bootstrap import (
    BootstrapSettings,
    InstanceBootstrap,
)
from modeling_miescore.evaluation.metrics.inputs import MetricWarning
from modeling_miescore.evaluation.mie_bench_report import mie_bench_report
from modeling_miescore.evaluation.plots import mer_bench_plots
from modeling_miescore.evaluation.report import (
    mer_categories_in_order,
    render_markdown,
    write_report,
)


def _mie_frame(n_models: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for inst in range(8):
        for m in range(n_models):
            mos = {d: float(rng.uniform(10, 90)) for d in ("vq", "if", "ap", "overall")}
            rows.append({"id": f"{inst}-{m}", "instance_id": str(inst), "editing_model": f"model{m}",
                         "task": "style_transfer" if inst % 2 else "pose_change", "num_sources": 2 + inst % 2,
                         "category": "global" if inst % 2 else "regional",
                         **{f"mos_{k}": v for k, v in mos.items()},
                         "pred_visual_quality": mos["vq"] + rng.normal(0, 5), "pred_overall": mos["overall"]})
    return pd.DataFrame(rows)


def test_no_bootstrap_gives_points_without_intervals():
    report = mie_bench_report(_mie_frame(3), bootstrap=BootstrapSettings(n=0, progress=False))
    assert report["meta"]["dimensions"] == ["visual_quality", "overall"]  # the dimensions with predictions
    assert report["meta"]["bootstrap"] == {"n": 0, "seed": 0, "level": 0.95,
                                           "resampling": "instances, all edits of a drawn instance_id together"}
    srcc = report["correlations"]["overall"]["srcc"]
    assert srcc == {"value": pytest.approx(1.0), "ci": [None, None]}
    assert report["model_ranking"]["available"]
    assert "No confidence intervals (--bootstrap 0)" in render_markdown(report)


def test_mie_report_without_three_models_says_why_ranking_is_missing():
    report = mie_bench_report(_mie_frame(2), bootstrap=BootstrapSettings(n=5, progress=False))
    ranking = report["model_ranking"]
    assert ranking == {"available": False, "models": ["model0", "model1"],
                       "reason": "model-ranking SRCC needs at least 3 editing models, the split has 2"}
    ci = report["correlations"]["visual_quality"]["srcc"]["ci"]
    assert ci[0] is not None and ci[0] <= ci[1]
    assert "Not computed: model-ranking SRCC needs at least 3 editing models" in render_markdown(report)


def test_instance_bootstrap_resamples_whole_instances_and_collects_notes(capsys):
    groups = np.repeat(np.arange(10), 3)
    values = np.repeat(np.arange(10, dtype=float), 3)  # constant within an instance

    def fn(idx):
        if len(idx) == 3:
            warnings.warn("a single instance", MetricWarning, stacklevel=1)
        few = len(np.unique(groups[idx])) < 7  # some resamples: NaN, which bootstrap_ci reports
        return {"mean": float(values[idx].mean()), "size": len(idx), "few": np.nan if few else 1.0}

    boot = InstanceBootstrap(groups, BootstrapSettings(n=200, seed=1, progress=False))
    res = boot(fn, "demo")
    assert res["size"]["ci"] == [30.0, 30.0]  # every draw takes 10 whole instances of 3 rows
    assert res["mean"]["value"] == pytest.approx(4.5) and res["mean"]["ci"][0] < 4.5 < res["mean"]["ci"][1]
    assert boot(fn, "demo") == res  # same seed, same resamples
    assert len(boot.notes) == 1  # recorded once
    assert boot.notes[0].startswith("demo: ") and "of 200 bootstrap resamples gave NaN" in boot.notes[0]
    boot(fn, "quiet", record_notes=False)
    assert len(boot.notes) == 1
    one = boot(fn, "one instance", rows=np.arange(3))
    assert one["mean"] == {"value": 0.0, "ci": [None, None]}  # fewer than 2 instances: no interval
    assert boot.notes[-1] == "one instance: a single instance"  # warnings of the point estimate are kept too
    assert capsys.readouterr().err == ""
    InstanceBootstrap(groups, BootstrapSettings(n=20, progress=True))(fn, "shown")
    assert "bootstrap shown" in capsys.readouterr().err


def test_mer_categories_follow_the_paper_then_the_rest():
    assert mer_categories_in_order({"zzz": 1, "human_fine": 1, "aaa": 1, "general": 1}) == [
        "general", "human_fine", "aaa", "zzz"]


def _mer_report() -> dict:
    metric = {"value": 0.5, "ci": [0.4, 0.6]}
    return {"benchmark": "mer-bench", "meta": {"n_groups": 6, "n_samples": 3, "bootstrap": {"n": 0},
                                               "n_by_size": {"2": 6}, "n_by_category": {"general": 6},
                                               "groups_with_tied_scores": 0, "groups_with_missing_scores": 0,
                                               "definitions": {"accuracy": "a", "tau": "t"}},
            "accuracy": {"overall": metric, "by_size": {"2": metric}, "by_category": {"general": metric}},
            "tau": {"overall": metric, "by_size": {"2": metric}, "by_category": {"general": metric}},
            "accuracy_by_size_and_category": {"2": {"general": 0.5}}, "notes": []}


def test_a_report_that_cannot_be_rendered_leaves_the_old_files(tmp_path):
    json_path, md_path = write_report(tmp_path, _mer_report())
    before = json_path.read_text(), md_path.read_text()
    assert json.loads(before[0])["accuracy"]["overall"] == {"value": 0.5, "ci": [0.4, 0.6]}
    with pytest.raises(ValueError, match="unknown report kind"):
        write_report(tmp_path, {**_mer_report(), "benchmark": "other"})
    assert (json_path.read_text(), md_path.read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.md"]


def test_a_failing_plot_leaves_the_previous_png(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    paths = mer_bench_plots(_mer_report(), tmp_path)
    assert paths == {"accuracy_by_size": "plots/accuracy_by_size.png",
                     "accuracy_by_category": "plots/accuracy_by_category.png"}
    old = (tmp_path / paths["accuracy_by_size"]).read_bytes()
    assert old.startswith(b"\x89PNG")

    def half_written(self, handle, **kwargs):
        handle.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", half_written)
    with pytest.raises(OSError, match="disk full"):
        mer_bench_plots(_mer_report(), tmp_path)
    assert (tmp_path / paths["accuracy_by_size"]).read_bytes() == old
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["accuracy_by_category.png",
                                                                       "accuracy_by_size.png"]
