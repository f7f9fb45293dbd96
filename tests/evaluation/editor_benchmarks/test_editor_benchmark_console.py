"""What a user of ``miescore benchmark gedit`` / ``imgedit`` / ``editors`` sees (issues 31 and 33): no raw warnings
with file paths on the console (the metric notes go into the report), no "mos is constant" wording for benchmarks
that have no MOS, the judge's base URL in the report with a ``?key=`` masked everywhere (console, usage log,
report), a chart's title that says which bars carry a CI, and the offline demo's seams."""

from __future__ import annotations

import json

import pytest
from editor_bench_helpers import converted, edit_image, gedit_server_answer
from local_http import RoutedChatServer

from modeling_miescore.cli.main import main

SECRET = "AIza-corpus-secret-key"


@pytest.fixture(scope="module")
def gedit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gedit-console")
    dataset, truth = converted("gedit-bench", folder, languages=("en",))
    for code, t in enumerate(truth):
        edit_image(folder / "edits" / f"{t['key']}.png", code)
    return dataset, folder / "edits", truth


def test_console_holds_no_raw_warnings_and_the_key_in_the_url_is_masked_everywhere(gedit, tmp_path, capfd):
    dataset, edits, truth = gedit
    out = tmp_path / "out"
    with RoutedChatServer(gedit_server_answer({c: ([6, 7], [8, 5]) for c in range(len(truth))})) as server:
        assert main(["benchmark", "gedit", "--dataset", str(dataset), "--edits", str(edits), "--out", str(out),
                     "--backend", "openai", "--base-url", f"{server.url}?key={SECRET}", "--model", "gpt-4.1",
                     "--no-progress", "--bootstrap", "50"]) == 0
        paths = {r["path"] for r in server.requests}
    assert paths == {f"/v1/chat/completions?key={SECRET}"}  # the key still reaches the endpoint, after the path
    captured = capfd.readouterr()
    console = captured.out + captured.err
    assert "Warning" not in console and ".py:" not in console  # no warnings.warn lines with file paths
    written = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.suffix in (".json", ".jsonl", ".md",
                                                                                            ".html"))
    assert SECRET not in console + written
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["judge_endpoint"] == f"{server.url}?key=***"  # the base URL, not only the model name
    assert any("a confidence interval needs at least 10" in note for note in report["notes"])  # kept, as notes
    assert "Warning: only 5 rows to resample" in (out / "report.md").read_text()


def test_a_constant_side_of_a_correlation_is_named_without_mos(gedit, tmp_path, tiny_miescore_path, capfd):
    """Every edit judged alike: the SRCC with the judge is undefined; the note names the judge's O, not 'mos'."""
    dataset, edits, truth = gedit
    out = tmp_path / "out"
    with RoutedChatServer(gedit_server_answer({c: ([6, 6], [6, 6]) for c in range(len(truth))})) as server:
        assert main(["benchmark", "gedit", "--dataset", str(dataset), "--edits", str(edits), "--out", str(out),
                     "--backend", "openai", "--base-url", server.url, "--model", "gpt-4.1", "--judge",
                     f"miescore:{tiny_miescore_path}", "--device", "cpu", "--no-progress", "--bootstrap", "0"]) == 0
    captured = capfd.readouterr()
    assert "mos" not in (captured.out + captured.err).lower()
    view = next(iter(json.loads((out / "report.json").read_text())["reward_judges"].values()))
    overall = view["srcc_with_judge"]["en"]["overall"]
    assert overall["value"] is None and overall["note"] == "the judge's O is the same for every key"


def test_a_chart_title_promises_error_bars_only_where_it_draws_them(gedit, tmp_path, monkeypatch):
    from modeling_miescore.evaluation.editor_benchmarks import editor_report

    dataset, edits, truth = gedit
    out = tmp_path / "out"
    with RoutedChatServer(gedit_server_answer({c: ([c, c], [8, 8]) for c in range(len(truth))})) as server:
        assert main(["benchmark", "gedit", "--dataset", str(dataset), "--edits", str(edits), "--out", str(out),
                     "--backend", "openai", "--base-url", server.url, "--model", "gpt-4.1", "--no-progress",
                     "--bootstrap", "50", "--no-plots"]) == 0
    report = json.loads((out / "report.json").read_text())
    figures = []
    monkeypatch.setattr(editor_report, "save_figure", lambda fig, folder, name: figures.append(fig) or f"plots/{name}.png")

    def title_and_bars(rep):
        figures.clear()
        editor_report.editor_plots(rep, tmp_path)
        import numpy as np
        from matplotlib.container import ErrorbarContainer

        fig = figures[0]
        segments = [segment for c in fig.axes[0].containers if isinstance(c, ErrorbarContainer)
                    for lines in c.lines[2] for segment in lines.get_segments()]
        return fig._suptitle.get_text(), sum(bool(len(segment)) and bool(np.isfinite(segment).all()) for segment in segments)

    title, bars = title_and_bars(report)  # 2, 2 and 1 keys per task type: none can have a CI
    assert bars == 0 and "no error bars: every bar has fewer than 10 resampling units" in title
    cell = report["results"]["en"]["full"]["by_category"]["subject-add"]["o"]
    cell["ci"] = [cell["value"] - 0.5, cell["value"] + 0.5]  # one category with an interval
    title, bars = title_and_bars(report)
    assert bars == 1 and "error bars: 95% bootstrap CI; none on 2 bar(s) of fewer than 10 units" in title


def test_editors_demo_refuses_a_used_folder_and_a_folder_that_is_no_run(tmp_path, capsys):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x.txt").write_text("keep me")
    assert main(["benchmark", "editors-demo", "--out", str(tmp_path / "used")]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert (tmp_path / "used" / "x.txt").read_text() == "keep me"
    (tmp_path / "not-a-run").mkdir()
    assert main(["benchmark", "editors-demo", "--out", str(tmp_path / "demo"), "--lora",
                 str(tmp_path / "not-a-run")]) == 2
    assert "has no run.json from a training run" in capsys.readouterr().err


def test_the_walks_seam_a_runs_sampling_record_gives_the_demos_edit_commands(tmp_path):
    """The editor-RL walk hands ``benchmark editors-demo --lora RUN`` a training run: the base editor samples as
    ``edit --lora RUN`` does (every field of run.json's sampling record that is an ``edit`` option), without the
    adapter; both command lines parse as ``miescore edit`` options and agree on every setting."""
    from types import SimpleNamespace

    from modeling_miescore.cli.edit import resolve_run_settings
    from modeling_miescore.cli.main import build_parser
    from modeling_miescore.cli.editors_demo import demo_editor_args
    from modeling_miescore.training.editor_rl.config import FlowGRPOConfig
    from modeling_miescore.training.editor_rl.outputs import sampling_record

    (tmp_path / "klein").mkdir()
    config = FlowGRPOConfig(editor="flux2-klein", model_name_or_path=str(tmp_path / "klein"), dataset="rows.jsonl",
                            reward="pkg.mod:fn", editor_options={"height": 32, "width": 32}, num_inference_steps=4,
                            dtype="float32", cfg_fraction=0.5, last_step="deterministic")
    run = tmp_path / "run"
    run.mkdir()
    editor = SimpleNamespace(cfg_scale=1.0, height=32, width=32)
    (run / "run.json").write_text(json.dumps(sampling_record(config, editor)))
    base, tuned = demo_editor_args(str(run), tmp_path)
    assert tuned == ["--lora", str(run)]
    common = ["--dataset", str(tmp_path / "data"), "--out", str(tmp_path / "edits")]
    plain, with_run = (build_parser().parse_args(["edit", *map(str, argv), *common]) for argv in (base, tuned))
    for args in (plain, with_run):
        resolve_run_settings(args)
    fields = ("pipeline", "model", "editor_options", "steps", "cfg_scale", "cfg_fraction", "sde_type", "last_step",
              "dtype", "noise_level")
    assert [getattr(plain, f) for f in fields] == [getattr(with_run, f) for f in fields]
    assert (plain.steps, plain.cfg_fraction, plain.last_step, plain.lora) == (4, 0.5, "deterministic", None)
