"""The report building blocks without the CLI: instance bootstrap settings and notes, the MIE-Bench report on a
hand-made frame, MER-Bench category order, report/plot files that are replaced atomically, the self-contained
report.html, and plots that show only what they know."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from modeling_miescore.evaluation.instance_bootstrap import (
    BootstrapSettings,
    InstanceBootstrap,
)
from modeling_miescore.evaluation.metrics.inputs import MetricWarning
from modeling_miescore.evaluation.mie_bench_report import mie_bench_report
from modeling_miescore.evaluation import plots
from modeling_miescore.evaluation.editing_models_report import editing_models_report
from modeling_miescore.evaluation.plots import editing_models_plots, mer_bench_plots, mie_bench_plots
from modeling_miescore.evaluation.report import render_markdown, write_report
from modeling_miescore.evaluation.report_parts import mer_categories_in_order
from modeling_miescore.evaluation.report_html import render_html
from report_checks import assert_html_report, mer_report, mie_frame, two_instance_split


def test_no_bootstrap_gives_points_without_intervals():
    report = mie_bench_report(mie_frame(3), bootstrap=BootstrapSettings(n=0, progress=False))
    assert report["meta"]["dimensions"] == ["visual_quality", "overall"]  # the dimensions with predictions
    assert report["meta"]["bootstrap"] == {"n": 0, "seed": 0, "level": 0.95,
                                           "resampling": "instances, all edits of a drawn instance_id together",
                                           "units": 8, "unit": "instances", "min_units": 10, "omitted": None}
    srcc = report["correlations"]["overall"]["srcc"]
    assert srcc == {"value": pytest.approx(1.0), "ci": [None, None]}
    assert report["model_ranking"]["available"]
    assert "No confidence intervals (--bootstrap 0)" in render_markdown(report)


def test_mie_report_without_three_models_says_why_ranking_is_missing():
    report = mie_bench_report(mie_frame(2, n_instances=12), bootstrap=BootstrapSettings(n=5, progress=False))
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
    assert one["mean"] == {"value": 0.0, "ci": [None, None]}  # too few instances: no interval
    assert boot.notes[-2:] == ["one instance: a single instance",  # warnings of the point estimate are kept too
                               "one instance: no confidence intervals, only 1 instance to resample (1 distinct "
                               "resample); a confidence interval needs at least 10"]
    assert capsys.readouterr().err == ""
    InstanceBootstrap(groups, BootstrapSettings(n=20, progress=True))(fn, "shown")
    assert "bootstrap shown" in capsys.readouterr().err


def test_mer_categories_follow_the_paper_then_the_rest():
    assert mer_categories_in_order({"zzz": 1, "human_fine": 1, "aaa": 1, "general": 1}) == [
        "general", "human_fine", "aaa", "zzz"]


def test_a_report_that_cannot_be_rendered_leaves_the_old_files(tmp_path):
    json_path, md_path = write_report(tmp_path, mer_report())
    before = json_path.read_text(), md_path.read_text(), (tmp_path / "report.html").read_text()
    assert json.loads(before[0])["accuracy"]["overall"] == {"value": 0.5, "ci": [0.4, 0.6]}
    with pytest.raises(ValueError, match="unknown report kind"):
        write_report(tmp_path, {**mer_report(), "benchmark": "other"})
    after = json_path.read_text(), md_path.read_text(), (tmp_path / "report.html").read_text()
    assert after == before
    with pytest.raises(ValueError, match="cannot be read.*draw the plots first"):  # a plot file that is not there
        write_report(tmp_path, {**mer_report(), "plots": {"accuracy_by_size": "plots/accuracy_by_size.png"}})
    assert (json_path.read_text(), md_path.read_text(), (tmp_path / "report.html").read_text()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html", "report.json", "report.md"]


def test_a_failing_plot_leaves_the_previous_png(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    paths = mer_bench_plots(mer_report(), tmp_path)
    assert paths == {"accuracy_by_size": "plots/accuracy_by_size.png",
                     "accuracy_by_category": "plots/accuracy_by_category.png"}
    old = (tmp_path / paths["accuracy_by_size"]).read_bytes()
    assert old.startswith(b"\x89PNG")

    def half_written(self, handle, **kwargs):
        handle.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", half_written)
    with pytest.raises(OSError, match="disk full"):
        mer_bench_plots(mer_report(), tmp_path)
    assert (tmp_path / paths["accuracy_by_size"]).read_bytes() == old
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["accuracy_by_category.png",
                                                                       "accuracy_by_size.png"]


# ---------------------------------------------------------------------------------------------------------
# report.html
# ---------------------------------------------------------------------------------------------------------


def test_report_html_embeds_every_plot_and_table(tmp_path):
    frame = mie_frame(3)
    report = mie_bench_report(frame, bootstrap=BootstrapSettings(n=20, progress=False))
    report["plots"] = mie_bench_plots(frame, report, tmp_path)
    write_report(tmp_path, report)
    page = assert_html_report(tmp_path)
    assert len(page.images) == 5  # 2 scatters, SRCC per task, leaderboard, MOS distributions
    html = (tmp_path / "report.html").read_text()
    assert "<title>MIE-Bench evaluation report</title>" in html
    assert "<details><summary>Per-model means</summary>" in html  # the fold is kept (8 instances: no intervals)
    assert "plots/" not in html.split("</style>")[1]  # no link to a file beside the page


def test_report_html_escapes_markup_and_takes_only_its_own_pngs(tmp_path):
    (tmp_path / "plots").mkdir()
    (tmp_path / "plots" / "fake.png").write_bytes(b"GIF89a not a png")
    (tmp_path / "outside.png").write_bytes(b"\x89PNG\r\n\x1a\n")
    table = "| Model | n |\n| :--- | ---: |\n| <img src=x onerror=alert(1)> | 3 |\n"
    page = render_html("# T\n\n<script>alert(1)</script>\n\n" + table + "\n<details><summary>S</summary>\n\n"
                       "x\n\n</details>\n", tmp_path)
    body = page.split("</style>")[1]
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<img" not in body and "&lt;img src=x onerror=alert(1)&gt;" in body
    assert "<details><summary>S</summary>" in body
    with pytest.raises(ValueError, match="not a PNG"):
        render_html("![a](plots/fake.png)", tmp_path)
    with pytest.raises(ValueError, match="outside the report folder"):
        render_html("![a](../outside.png)", tmp_path / "plots")


def test_mer_markdown_has_both_taus_and_says_when_no_prediction_was_usable():
    report = mer_report()
    report["tau_as_released"] = {"overall": {"value": 0.9, "ci": [0.8, 0.95]}, "by_size": {"2": 0.9},
                                 "by_category": {"general": 0.9}}
    md = render_markdown(report)
    assert "| Overall | τ | τ (as released) |" in md
    assert "| 0.500 [0.400, 0.600] | 0.900 [0.800, 0.950] |" in md
    assert "| τ (as released) | 0.900 | 0.900 |" in md
    assert "no prediction to evaluate" not in md
    report["meta"]["groups_with_missing_scores"] = report["meta"]["n_groups"]
    assert "**Every group has a missing (null) score: there is no prediction to evaluate" in render_markdown(report)


# ---------------------------------------------------------------------------------------------------------
# plots, read as a reader would
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def drawn(monkeypatch):
    """The figures the plot functions save, by name (drawn, so that legend and axes extents are known)."""
    figures = {}
    save = plots.save_figure

    def keep(fig, out_dir, name, folder="plots"):
        fig.canvas.draw()
        figures[name] = fig
        return save(fig, out_dir, name, folder)

    monkeypatch.setattr(plots, "save_figure", keep)
    return figures


def _legends_outside_the_axes(fig):
    assert all(ax.get_legend() is None for ax in fig.axes), "a legend inside the axes covers data"
    assert len(fig.legends) == 1
    box = fig.legends[0].get_window_extent()
    for ax in fig.axes:
        assert not box.overlaps(ax.get_window_extent()), "the figure legend overlaps an axes"


def test_srcc_per_task_shows_no_interval_it_does_not_have(tmp_path, drawn):
    from matplotlib.container import BarContainer

    frame = mie_frame(4, n_instances=22)
    frame.loc[frame["instance_id"] == "0", "task"] = "text_style"  # a task with one instance: no CI
    report = mie_bench_report(frame, bootstrap=BootstrapSettings(n=30, progress=False))
    mie_bench_plots(frame, report, tmp_path)
    fig = drawn["srcc_per_task"]
    _legends_outside_the_axes(fig)
    assert "95% bootstrap CI" in fig.get_suptitle()
    assert "fewer than 10 instances: no CI" in [t.get_text() for t in fig.legends[0].get_texts()]
    tasks = [t["task"] for t in report["per_task"]["tasks"]]
    single = tasks.index("text_style")
    for ax, d in zip(fig.axes, report["meta"]["dimensions"]):
        bars = next(c for c in ax.containers if isinstance(c, BarContainer))
        assert [bool(b.get_hatch()) for b in bars] == [i == single for i in range(len(tasks))]
        segments = bars.errorbar.lines[2][0].get_segments()  # one vertical error bar per task
        drawn_bars = [i for i, seg in enumerate(segments) if seg.size and np.isfinite(seg).all()]
        assert drawn_bars == [i for i in range(len(tasks)) if i != single]  # none, not a zero-width one
        lows = [report["per_task"]["srcc"][d]["tasks"][t]["ci"][0] for t in tasks if t != "text_style"]
        assert ax.get_ylim()[0] <= min(lows) and ax.get_ylim()[1] > 1.0  # whole intervals are visible
    for name in ("leaderboard", "scatter_overall"):
        _legends_outside_the_axes(drawn[name])
    assert len(drawn["leaderboard"].legends[0].get_texts()) == 2  # one entry per series, not per panel


def test_mer_and_editing_model_plots_say_what_they_show(tmp_path, drawn):
    mer_bench_plots(mer_report(), tmp_path)
    fig = drawn["accuracy_by_size"]
    _legends_outside_the_axes(fig)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "chance accuracy 1/K!" in labels and "Kendall τ as released (tie = +1)" in labels
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["2-P\n(n=6)", "Overall\n(n=6)"]
    assert "no error bars (--bootstrap 0)" in fig.get_suptitle()

    frame = mie_frame(3)
    report = editing_models_report(frame, bootstrap=BootstrapSettings(n=0, progress=False))
    editing_models_plots(report, tmp_path)
    _legends_outside_the_axes(drawn["editing_models"])
    for d in report["meta"]["dimensions"]:  # one 0-100 colour scale: colours compare across heat maps
        assert drawn[f"heatmap_{d}"].axes[0].images[0].get_clim() == (0, 100)


# ---------------------------------------------------------------------------------------------------------
# a two-instance split scored by a random-weight evaluator: no intervals, n in every heading, raw PLCC only
# ---------------------------------------------------------------------------------------------------------


def _intervals(tree):
    """Every ``ci`` of a report section."""
    if isinstance(tree, dict):
        return ([tree["ci"]] if "ci" in tree else []) + [c for v in tree.values() for c in _intervals(v)]
    return [c for v in tree for c in _intervals(v)] if isinstance(tree, list) else []


def test_a_two_instance_split_has_no_intervals_and_says_why(tmp_path, drawn):
    frame = two_instance_split()
    report = mie_bench_report(frame, bootstrap=BootstrapSettings(n=1000, progress=False))
    few = "only 2 instances to resample (3 distinct resamples); a confidence interval needs at least 10"
    assert report["meta"]["bootstrap"]["omitted"] == few and report["meta"]["bootstrap"]["units"] == 2
    cis = _intervals([report["correlations"], report["per_task"], report["model_ranking"]])
    assert len(cis) > 50 and all(ci == [None, None] for ci in cis)  # not "0.2246 [0.2246, 0.3636]"
    md = render_markdown(report)
    assert f"**No confidence intervals: {few}.** The numbers are point estimates only." in md
    for heading in ("## Correlation with human MOS (paper table 3): 24 edits, 2 instances",
                    "## SRCC per task (paper tables 12–15): 2 tasks, 24 edits, 2 instances",
                    "## Editing-model leaderboard: human vs predicted (paper table 4): 12 editing models, 24 edits, "
                    "2 instances", "## MOS distributions (paper figure 2): 24 edits",
                    "| Task | Category | Edits | Instances |", "| Pose Change | regional | 12 | 1 |"):
        assert heading in md
    assert "[" not in md.split("## Correlation")[1].split("## Notes")[0].replace("[Per-model", "")
    plots.srcc_per_task_plot(report, ["overall"], tmp_path)  # (one panel: the whole page takes seconds)
    assert f"no error bars: {few}" in drawn["srcc_per_task"].get_suptitle()

    ranked = editing_models_report(frame, bootstrap=BootstrapSettings(n=1000, progress=False))
    assert ranked["meta"]["bootstrap"]["omitted"] == few
    assert all(ci == [None, None] for ci in _intervals(ranked["leaderboard"]))
    md = render_markdown(ranked)
    assert "## Leaderboard: 12 editing models, 24 edits, 2 instances, 2 tasks" in md
    assert "## Overall Score per task (paper tables 8–11 layout): 12 editing models, 24 edits" in md


def test_a_degenerate_logistic_fit_is_reported_as_raw_plcc_with_its_reason(tmp_path, drawn):
    frame = two_instance_split()
    dims = ["visual_quality", "instruction_following"]
    report = mie_bench_report(frame, dims, bootstrap=BootstrapSettings(n=0, progress=False))
    c = report["correlations"]["instruction_following"]
    assert c["logistic"]["status"] == "degenerate" and c["plcc_logistic"] == {"value": None, "ci": [None, None]}
    assert c["plcc"]["value"] == pytest.approx(0.157, abs=1e-3)  # what is reported instead of a step's 0.55
    assert report["correlations"]["visual_quality"]["logistic"]["status"] == "fitted"
    md = render_markdown(report)
    assert "| Instruction Following | 24 | 0.0870 | 0.0435 | 0.1570 | — (degenerate fit: see raw PLCC) |" in md
    notes = {line.split(":")[0]: line for line in md.split("## Notes")[1].splitlines() if "Logistic fit" in line}
    assert notes["- Logistic fit, IF"].startswith("- Logistic fit, IF: degenerate (the fitted curve is a step: 2 of "
                                                  "24 predictions lie on its rise")
    assert "β" not in notes["- Logistic fit, IF"] and "PLCC (logistic) is not reported" in notes["- Logistic fit, IF"]
    assert "β = (7336, -1923" in notes["- Logistic fit, VQ"] and "lies far outside the MOS range" in \
        notes["- Logistic fit, VQ"]  # an extreme β is printed with a word

    plots.scatter_plots(frame, report, dims, tmp_path)
    degenerate, fitted = drawn["scatter_instruction_following"].axes[0], drawn["scatter_visual_quality"].axes[0]
    assert "PLCC (raw; logistic fit degenerate) 0.157" in degenerate.get_title()
    assert not degenerate.lines and "no logistic curve: the fit is degenerate" in degenerate.texts[0].get_text()
    assert "PLCC (logistic) 0.995" in fitted.get_title()
    legend = [t.get_text() for t in drawn["scatter_visual_quality"].legends[0].get_texts()]
    assert len(fitted.lines) == 1 and "4-parameter logistic fit" in legend


def test_mer_report_of_two_samples_has_no_intervals():
    import pandas as pd

    from modeling_miescore.evaluation.mer_bench_report import mer_bench_report

    frame = pd.DataFrame({"pair_id": [f"p{i}" for i in range(6)], "sample_id": ["s0"] * 3 + ["s1"] * 3,
                          "k": [2] * 6, "category": ["general"] * 6, "split": ["2pair"] * 6})
    scores = {f"p{i}": np.array([2.0, 1.0]) if i % 2 else np.array([1.0, 2.0]) for i in range(6)}
    report = mer_bench_report(frame, scores, bootstrap=BootstrapSettings(n=500, progress=False))
    assert report["meta"]["bootstrap"]["omitted"].startswith("only 2 samples to resample (3 distinct resamples)")
    assert report["accuracy"]["overall"] == {"value": 0.5, "ci": [None, None]}
    md = render_markdown(report)
    assert "## Accuracy by group size (paper table 1, MER-Bench columns): 6 groups, 2 samples" in md
    assert "**No confidence intervals: only 2 samples to resample" in md
