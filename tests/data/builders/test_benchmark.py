"""`miescore benchmark`: MIE-Bench evaluator report, MER-Bench group accuracy, editing-model leaderboard.

Datasets are built from the raw fixtures (real photos, planted truth) with the real builders; expected numbers are
recomputed independently (scipy / numpy) from the predictions written here, so a wrong id alignment, a wrong
column or a wrong metric shows up as a mismatch.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import stats

from modeling_miescore.cli.main import main
from report_checks import assert_html_report

DIMS = ("visual_quality", "instruction_following", "attribute_preservation", "overall")
MOS = {"visual_quality": "mos_vq", "instruction_following": "mos_if", "attribute_preservation": "mos_ap",
       "overall": "mos_overall"}
MIE_PLOTS = ["scatter_visual_quality", "scatter_instruction_following", "scatter_attribute_preservation",
             "scatter_overall", "srcc_per_task", "leaderboard", "mos_distribution"]
MIE_SECTIONS = ["# MIE-Bench evaluation report", "## Run", "## Correlation with human MOS (paper table 3)",
                "## SRCC per task (paper tables 12–15)",
                "## Editing-model leaderboard: human vs predicted (paper table 4)",
                "## MOS distributions (paper figure 2)", "## Notes"]


# ---------------------------------------------------------------------------------------------------------
# fixtures
# ---------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mie_dir(tmp_path_factory):
    from modeling_miescore.data.builders.mie_bench import build_mie_bench
    from modeling_miescore.testing.raw_benchmarks import make_raw_mie_bench

    base = tmp_path_factory.mktemp("mie")
    make_raw_mie_bench(base / "raw", n_instances=20, n_models=4, seed=3, image_size=48)
    build_mie_bench(base / "raw", base / "ds", progress=False, split_method="hash")  # splits sized as the tests expect
    return base / "ds"


def mie_rows(ds_dir: Path, split: str):
    import datasets

    ds = datasets.load_dataset(str(ds_dir), split=split)
    df = ds.select_columns(["id", "instance_id", "task", "editing_model", *MOS.values()]).to_pandas()
    df["task"] = [ds.features["task"].names[t] for t in df["task"]]
    return df


@pytest.fixture(scope="module")
def mer_dir(tmp_path_factory):
    from modeling_miescore.data.builders.mer_bench import build_mer_bench
    from modeling_miescore.testing.raw_benchmarks import make_raw_mer_bench

    base = tmp_path_factory.mktemp("mer")
    make_raw_mer_bench(base / "raw", n_samples=24, seed=0, image_size=48)
    build_mer_bench(base / "raw", base / "ds", groups_per_type=20, progress=False)
    return base / "ds"


@pytest.fixture(scope="module")
def mer_without_3pair_dir(mer_dir):
    """The same raw MER-Bench built without 3-pair groups: the dataset has splits 2pair and 4pair only."""
    from modeling_miescore.data.builders.mer_bench import build_mer_bench

    out = mer_dir.parent / "ds-no-3pair"
    build_mer_bench(mer_dir.parent / "raw", out, groups_per_type={2: 6, 3: 0, 4: 6}, progress=False)
    return out


def mer_rows(ds_dir: Path, splits=("2pair", "3pair", "4pair")):
    import datasets

    rows = []
    for split in splits:
        ds = datasets.load_dataset(str(ds_dir), split=split)
        for r in ds.select_columns(["pair_id", "sample_id", "category", "editing_models"]):
            rows.append({"pair_id": r["pair_id"], "sample_id": r["sample_id"], "category": r["category"],
                         "k": len(r["editing_models"])})
    return rows


def write_jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_pngs(out: Path, names):
    for name in names:
        path = out / "plots" / f"{name}.png"
        assert path.is_file(), f"missing plot {name}"
        with Image.open(path) as im:
            im.load()
            assert im.format == "PNG" and im.width > 200 and im.height > 200


def assert_metric(m, *, with_ci=True):
    assert set(m) == {"value", "ci"} and len(m["ci"]) == 2
    assert m["value"] is not None
    if with_ci:
        lo, hi = m["ci"]  # a percentile interval need not contain the point estimate, so only its order is fixed
        assert lo is not None and hi is not None and lo <= hi


def noisy_predictions(df, rng, noise: float):
    return [{"id": r.id, **{d: float(getattr(r, MOS[d]) + rng.normal(0, noise)) for d in DIMS}}
            for r in df.itertuples()]


# ---------------------------------------------------------------------------------------------------------
# MIE-Bench
# ---------------------------------------------------------------------------------------------------------


def test_mie_bench_end_to_end_with_tiny_model_and_resume(mie_dir, tiny_miescore_path, tmp_path, capsys, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HOME", str(tmp_path / "hf_home"))  # the default cache root
    out = tmp_path / "report"
    argv = ["benchmark", "mie-bench", "--dataset", str(mie_dir), "--split", "validation", "--model",
            str(tiny_miescore_path), "--out", str(out), "--bootstrap", "20", "--device", "cpu", "--no-progress",
            "--batch-size", "16"]
    code, stdout, stderr = run(argv, capsys)
    assert code == 0, stderr
    assert "SRCC with human MOS" in stdout

    df = mie_rows(mie_dir, "validation")
    preds = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert sorted(p["id"] for p in preds) == sorted(df["id"])

    report = json.loads((out / "report.json").read_text())
    for section in ("meta", "correlations", "per_task", "model_ranking", "mos_distribution", "alignment", "plots"):
        assert section in report
    assert report["meta"]["n_items"] == len(df) and report["alignment"]["n_missing"] == 0
    # a 20-instance build leaves a handful of validation instances: too few to resample, so no intervals, and
    # the console says so (a tiny random-weight model's fits may also be degenerate: then raw PLCC only)
    n_instances = report["meta"]["n_instances"]
    assert n_instances < 10 and report["meta"]["bootstrap"]["omitted"].startswith(f"only {n_instances} instances")
    assert f"warning: no confidence intervals: only {n_instances} instances to resample" in stderr
    by_id = {p["id"]: p for p in preds}
    for d in DIMS:
        c = report["correlations"][d]
        for key in ("srcc", "krcc", "plcc"):
            assert_metric(c[key], with_ci=False)
            assert c[key]["ci"] == [None, None]
        if c["logistic"]["success"]:
            assert_metric(c["plcc_logistic"], with_ci=False)
        else:
            assert c["plcc_logistic"]["value"] is None and "the report gives raw PLCC only" in stderr
        # the report correlates the right prediction with the right MOS
        pred = [by_id[i][d] for i in df["id"]]
        assert c["srcc"]["value"] == pytest.approx(stats.spearmanr(pred, df[MOS[d]]).statistic, abs=1e-9)
        assert set(report["per_task"]["srcc"][d]["tasks"]) == set(df["task"])
        assert_metric(report["model_ranking"][d]["srcc"], with_ci=False)
        assert len(report["model_ranking"][d]["table"]) == 4
        assert set(report["mos_distribution"][d]) == {"all", "2_sources", "3plus_sources"}
    assert sorted(report["plots"]) == sorted(MIE_PLOTS)
    assert_pngs(out, MIE_PLOTS)

    md = (out / "report.md").read_text()
    positions = [md.index(s) for s in MIE_SECTIONS]
    assert positions == sorted(positions), "report.md sections out of order"
    assert "SRCC to human" in md and "plots/leaderboard.png" in md
    assert_html_report(out)
    # the exported images are a cache under $HF_HOME/miescore, not part of the report folder
    visible = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))  # not score-batch's lock file
    assert visible == ["plots", "predictions.jsonl", "predictions_source.json", "report.html", "report.json",
                       "report.md"]
    (inputs,) = (tmp_path / "hf_home" / "miescore" / "mie-bench-inputs").glob("*/inputs.jsonl")
    assert len(inputs.read_text().splitlines()) == len(df)

    # rerun: the prediction cache is complete, nothing is rescored and the report is rewritten identically
    before = (out / "predictions.jsonl").read_bytes()
    code, _, stderr = run([*argv, "--no-plots"], capsys)
    assert code == 0 and "already scored" in stderr
    assert (out / "predictions.jsonl").read_bytes() == before
    again = json.loads((out / "report.json").read_text())["correlations"]
    for d in DIMS:
        for key in ("srcc", "krcc", "plcc"):
            assert again[d][key] == report["correlations"][d][key]

    # an interrupted run (10 full lines and half a line on disk) resumes: only the missing edits are scored; the
    # exported images are reused from the cache (same split, same folder), or go where --cache-dir says
    lines = before.decode().splitlines(keepends=True)
    (out / "predictions.jsonl").write_text("".join(lines[:10]) + lines[10][:20])
    exported = {p: p.stat().st_mtime_ns for p in inputs.parent.glob("images/*")}
    code, _, stderr = run([*argv[:11], "0", *argv[12:], "--no-plots"], capsys)
    assert code == 0, stderr
    assert f"scored {len(df) - 10} edits, 10 already" in stderr
    resumed = sorted(json.loads(x)["id"] for x in (out / "predictions.jsonl").read_text().splitlines())
    assert resumed == sorted(df["id"])
    assert {p: p.stat().st_mtime_ns for p in inputs.parent.glob("images/*")} == exported
    (out / "predictions.jsonl").write_text("".join(lines[:10]))
    code, _, stderr = run([*argv, "--no-plots", "--cache-dir", str(tmp_path / "elsewhere")], capsys)
    assert code == 0, stderr
    assert len(list((tmp_path / "elsewhere" / "mie-bench-inputs").glob("*/images/*"))) == len(exported)

    # a different model for the same --out is refused instead of mixing two models' predictions
    import shutil

    other = shutil.copytree(tiny_miescore_path, tmp_path / "other-model")
    code, _, stderr = run([*argv[:7], str(other), *argv[8:]], capsys)
    assert code == 2 and "different run" in stderr


def test_mie_bench_predictions_with_known_srcc(mie_dir, tmp_path, capsys):
    df = mie_rows(mie_dir, "train")
    rng = np.random.default_rng(0)
    good = noisy_predictions(df, rng, noise=0.5)
    write_jsonl(tmp_path / "good.jsonl", good[::-1])  # order of the file must not matter
    shuffled = [{"id": r["id"], **{d: float(v) for d, v in zip(DIMS, vals)}}
                for r, vals in zip(good, rng.permutation(df[[MOS[d] for d in DIMS]].to_numpy()))]
    write_jsonl(tmp_path / "shuffled.jsonl", shuffled)

    reports = {}
    for name in ("good", "shuffled"):
        out = tmp_path / name
        code, _, stderr = run(["benchmark", "mie-bench", "--dataset", str(mie_dir), "--split", "train",
                               "--predictions", str(tmp_path / f"{name}.jsonl"), "--out", str(out),
                               "--bootstrap", "15", "--no-progress", "--no-plots"], capsys)
        assert code == 0, stderr
        assert not (out / "plots").exists()
        reports[name] = json.loads((out / "report.json").read_text())

    for d in DIMS:
        g = reports["good"]["correlations"][d]
        s = reports["shuffled"]["correlations"][d]
        assert g["srcc"]["value"] > 0.97 and g["srcc"]["ci"][0] > 0.9
        assert abs(s["srcc"]["value"]) < 0.5 and s["srcc"]["ci"][0] < 0.2
        assert s["srcc"]["ci"][1] - s["srcc"]["ci"][0] > g["srcc"]["ci"][1] - g["srcc"]["ci"][0]
        # exact agreement with an independent computation, per dimension and per task
        pred = {p["id"]: p[d] for p in shuffled}
        assert s["srcc"]["value"] == pytest.approx(
            stats.spearmanr([pred[i] for i in df["id"]], df[MOS[d]]).statistic, abs=1e-9)
        assert s["krcc"]["value"] == pytest.approx(
            stats.kendalltau([pred[i] for i in df["id"]], df[MOS[d]]).statistic, abs=1e-9)
        for task, sub in df.groupby("task"):
            if len(sub) >= 3:
                expected = stats.spearmanr([pred[i] for i in sub["id"]], sub[MOS[d]]).statistic
                assert reports["shuffled"]["per_task"]["srcc"][d]["tasks"][task]["value"] == pytest.approx(expected)

    # table 4: small noise keeps the editing-model ranking; means are the plain per-model means
    ranking = reports["good"]["model_ranking"]["overall"]
    assert ranking["srcc"]["value"] == pytest.approx(1.0)
    human_means = df.groupby("editing_model")["mos_overall"].mean()
    for row in ranking["table"]:
        assert row["rank_pred"] == row["rank_human"]
        assert row["human"]["value"] == pytest.approx(human_means[row["model"]])
    assert [r["rank_human"] for r in ranking["table"]] == [1, 2, 3, 4]


def test_mie_bench_console_says_when_intervals_and_logistic_fits_are_missing(mie_dir, tmp_path, capsys):
    """The small test split of a 20-instance build, scored like a random-weight model does (every score within
    0.1 of 50, one edit at 60): the console says the CIs are omitted and which fits are degenerate."""
    df = mie_rows(mie_dir, "test")
    rng = np.random.default_rng(0)
    top = df[MOS["instruction_following"]].idxmax()
    preds = [{"id": r.id, **{d: 60.0 if i == top else float(50 + rng.normal(0, 0.05)) for d in DIMS}}
             for i, r in zip(df.index, df.itertuples())]
    out = tmp_path / "out"
    code, stdout, stderr = run(["benchmark", "mie-bench", "--dataset", str(mie_dir), "--split", "test",
                                "--predictions", str(write_jsonl(tmp_path / "p.jsonl", preds)), "--out", str(out),
                                "--no-progress", "--no-plots"], capsys)
    assert code == 0, stderr
    n_instances = df["instance_id"].nunique()
    assert n_instances < 10
    assert f"MIE-Bench test: {len(df)} edits, {n_instances} instances, SRCC with human MOS:" in stdout
    assert f"warning: no confidence intervals: only {n_instances} instances to resample" in stderr
    assert "warning: IF: the 4-parameter logistic fit is degenerate (the fitted curve is a step" in stderr
    assert "the report gives raw PLCC only" in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["correlations"]["instruction_following"]["plcc_logistic"]["value"] is None
    assert "— (degenerate fit: see raw PLCC)" in (out / "report.md").read_text()


def test_mie_bench_mismatched_ids_stop_unless_allowed(mie_dir, tmp_path, capsys):
    df = mie_rows(mie_dir, "train")
    preds = noisy_predictions(df, np.random.default_rng(1), noise=2.0)
    dropped = {p["id"] for p in preds[:3]}
    preds = preds[3:] + [{"id": "not-in-split-1", "overall": 50.0}, {"id": "not-in-split-2", "overall": 40.0}]
    path = write_jsonl(tmp_path / "preds.jsonl", preds)
    argv = ["benchmark", "mie-bench", "--dataset", str(mie_dir), "--split", "train", "--predictions", str(path),
            "--out", str(tmp_path / "out"), "--bootstrap", "10", "--no-progress", "--no-plots"]

    code, _, stderr = run(argv, capsys)
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr
    assert f"3 of {len(df)} dataset ids have no prediction" in lines[0]
    assert "2 of" in lines[0] and "not-in-split-1" in lines[0] and "--allow-missing" in lines[0]
    assert any(i in lines[0] for i in dropped)
    assert not (tmp_path / "out" / "report.json").exists()

    code, _, stderr = run([*argv, "--allow-missing"], capsys)
    assert code == 0 and "warning" in stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["alignment"]["n_missing"] == 3 and report["alignment"]["n_extra"] == 2
    assert report["meta"]["n_items"] == len(df) - 3
    assert "Without prediction (left out):** 3" in (tmp_path / "out" / "report.md").read_text()


@pytest.mark.parametrize("content, message", [
    ('{"id": "a", "overall": 1}\n{"id": \n', ":2: invalid JSON"),
    ('{"id": "x", "overall": 1}\n{"id": "x", "overall": 2}\n', "duplicate id 'x'"),
    ('{"id": "x", "overall": "high"}\n', "'overall' must be a number"),
    ('{"id": "x", "score": 3}\n', "none of the score keys"),
    ('{"overall": 3}\n', "missing 'id'"),
])
def test_bad_predictions_file_is_one_clear_line(mie_dir, tmp_path, capsys, content, message):
    path = tmp_path / "p.jsonl"
    path.write_text(content)
    code, _, stderr = run(["benchmark", "mie-bench", "--dataset", str(mie_dir), "--split", "train",
                           "--predictions", str(path), "--out", str(tmp_path / "o"), "--no-progress"], capsys)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1


def test_bad_dataset_or_split_is_one_clear_line(mie_dir, tmp_path, capsys):
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": "x", "overall": 1.0}])
    code, _, stderr = run(["benchmark", "mie-bench", "--dataset", str(mie_dir), "--split", "tset",
                           "--predictions", str(path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "no split 'tset'" in stderr and "test" in stderr
    code, _, stderr = run(["benchmark", "mie-bench", "--dataset", str(tmp_path / "nope"), "--split", "test",
                           "--predictions", str(path), "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "not a folder" in stderr


def test_overall_is_computed_with_eq2_when_absent(tmp_path):
    from modeling_miescore.evaluation.prediction_files import read_score_predictions

    path = write_jsonl(tmp_path / "p.jsonl", [
        {"id": "a", "visual_quality": 50.0, "instruction_following": 80.0, "attribute_preservation": 20.0}])
    df = read_score_predictions(path)
    assert df.attrs["overall_computed"]
    assert df.loc["a", "overall"] == pytest.approx(50.0 ** 0.3 * 80.0 ** 0.4 * 20.0 ** 0.3)


# ---------------------------------------------------------------------------------------------------------
# MER-Bench
# ---------------------------------------------------------------------------------------------------------


def test_mer_bench_hand_made_predictions(mer_dir, tmp_path, capsys, tiny_miescore_path):
    rows = mer_rows(mer_dir)
    preds, correct, taus, released = [], {}, {}, {}
    three = 0
    for r in rows:
        k = r["k"]
        best_first = [float(k - j) for j in range(k)]
        if k == 2:  # all right
            scores, ok, tau = best_first, True, 1.0
        elif k == 3:  # alternately right and fully reversed
            ok = three % 2 == 0
            scores, tau = (best_first, 1.0) if ok else (best_first[::-1], -1.0)
            three += 1
        else:  # a tie between the two best: wrong; tau-a with the tie scored 0 = 5/6 (as released, +1: 6/6)
            scores, ok, tau = [4.0, 4.0, 2.0, 1.0], False, 5 / 6
        preds.append({"pair_id": r["pair_id"], "scores": scores})
        correct[r["pair_id"]], taus[r["pair_id"]] = ok, tau
        released[r["pair_id"]] = 1.0 if k == 4 else tau
    path = write_jsonl(tmp_path / "mer.jsonl", preds[::-1])
    out = tmp_path / "out"
    code, stdout, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions", str(path),
                                "--out", str(out), "--bootstrap", "20", "--no-progress"], capsys)
    assert code == 0, stderr
    report = json.loads((out / "report.json").read_text())
    acc, tau = report["accuracy"], report["tau"]
    for k in (2, 3, 4):
        ids = [r["pair_id"] for r in rows if r["k"] == k]
        assert acc["by_size"][str(k)]["value"] == pytest.approx(np.mean([correct[i] for i in ids]))
        assert tau["by_size"][str(k)]["value"] == pytest.approx(np.mean([taus[i] for i in ids]))
        assert report["tau_as_released"]["by_size"][str(k)]["value"] == pytest.approx(
            np.mean([released[i] for i in ids]))
    assert acc["by_size"]["2"]["value"] == 1.0 and acc["by_size"]["4"]["value"] == 0.0
    assert acc["overall"]["value"] == pytest.approx(np.mean(list(correct.values())))
    for cat in {r["category"] for r in rows}:
        ids = [r["pair_id"] for r in rows if r["category"] == cat]
        assert acc["by_category"][cat]["value"] == pytest.approx(np.mean([correct[i] for i in ids]))
        # a category whose groups come from fewer than 10 samples has no interval (too few to resample)
        samples = {r["sample_id"] for r in rows if r["category"] == cat}
        assert_metric(acc["by_category"][cat], with_ci=len(samples) >= 10)
        assert (acc["by_category"][cat]["ci"][0] is None) == (len(samples) < 10)
    assert_metric(acc["overall"])
    assert report["meta"]["groups_with_tied_scores"] == sum(r["k"] == 4 for r in rows)
    assert report["tau_as_released"]["overall"]["value"] == pytest.approx(np.mean(list(released.values())))
    assert "Kendall tau (as released)" in stdout and "NO PREDICTIONS" not in stdout
    md = (out / "report.md").read_text()
    for s in ("## Accuracy by group size (paper table 1", "| 2-P | 3-P | 4-P | Overall | τ | τ (as released) |",
              "## Accuracy by editing category (paper table 2)", "General", "Human-B.", "Human-F."):
        assert s in md
    assert_pngs(out, ["accuracy_by_size", "accuracy_by_category"])
    assert_html_report(out)

    # --grid needs the sub-scores that --model writes
    code, _, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions", str(path),
                           "--out", str(tmp_path / "o1"), "--grid", "--no-progress"], capsys)
    assert code == 2 and "needs 'sub_scores'" in stderr and len(stderr.strip().splitlines()) == 1

    # a group with the wrong number of scores, and a non-SpatialReward --model, are clear user errors
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"pair_id": rows[0]["pair_id"], "scores": [1.0] * (rows[0]["k"] + 1)}])
    code, _, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions", str(bad),
                           "--out", str(tmp_path / "o2")], capsys)
    assert code == 2 and f"has {rows[0]['k']} edited images but {rows[0]['k'] + 1} scores" in stderr
    code, _, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--model", str(tiny_miescore_path),
                           "--out", str(tmp_path / "o3")], capsys)
    assert code == 2 and "needs a SpatialReward checkpoint" in stderr


def test_mer_bench_defaults_to_the_splits_the_dataset_has(mer_without_3pair_dir, tmp_path, capsys):
    rows = mer_rows(mer_without_3pair_dir, ("2pair", "4pair"))
    path = write_jsonl(tmp_path / "p.jsonl", [{"pair_id": r["pair_id"], "scores": list(range(r["k"], 0, -1))}
                                              for r in rows])
    argv = ["benchmark", "mer-bench", "--dataset", str(mer_without_3pair_dir), "--predictions", str(path),
            "--bootstrap", "0", "--no-progress", "--no-plots"]
    code, stdout, stderr = run([*argv, "--out", str(tmp_path / "out")], capsys)
    assert code == 0, stderr
    assert "MER-Bench (2pair,4pair)" in stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["meta"]["splits"] == ["2pair", "4pair"] and report["run"]["split"] == "2pair,4pair"
    assert report["accuracy"]["overall"]["value"] == 1.0 and report["meta"]["n_groups"] == len(rows)
    code, _, stderr = run([*argv, "--split", "2pair,3pair,4pair", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "no split '3pair'; available: 2pair, 4pair" in stderr


def test_mer_bench_without_any_usable_score_says_so_on_the_console(mer_dir, tmp_path, capsys):
    rows = mer_rows(mer_dir)
    path = write_jsonl(tmp_path / "p.jsonl", [{"pair_id": r["pair_id"], "scores": [None] * r["k"]} for r in rows])
    code, stdout, _ = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions", str(path),
                           "--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-progress", "--no-plots"], capsys)
    assert code == 0
    assert f"NO PREDICTIONS: every one of the {len(rows)} groups has a missing (null) score" in stdout
    assert stdout.index("NO PREDICTIONS") < stdout.index("Overall accuracy")  # said before the zeros
    assert "no prediction to evaluate" in (tmp_path / "out" / "report.md").read_text()
    some = [{"pair_id": r["pair_id"], "scores": [None] * r["k"] if i < 3 else list(range(r["k"], 0, -1))}
            for i, r in enumerate(rows)]
    code, stdout, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions",
                                str(write_jsonl(tmp_path / "some.jsonl", some)), "--out", str(tmp_path / "o2"),
                                "--bootstrap", "0", "--no-progress", "--no-plots"], capsys)
    assert code == 0 and "NO PREDICTIONS" not in stdout
    assert f"warning: 3 of {len(rows)} groups have a missing (null) score; they count as wrong" in stderr


def _grid_reward(sub, alpha, w_con):
    """The sec. 3.1 reward from sub-score dicts, written out independently of the package."""
    s = np.array([[x["s_if"], x["s_con"], x["naturalness"], x["artifacts"]] for x in sub], dtype=float)
    sc = ((1 - w_con) * s[:, 0] + w_con * s[:, 1]) / 25
    return sc ** alpha * ((s[:, 2] + s[:, 3]) / 50) ** (1 - alpha)


def test_mer_bench_grid_re_aggregates_sub_scores_without_the_model(mer_dir, tmp_path, capsys):
    rng = np.random.default_rng(4)
    preds = []
    for r in mer_rows(mer_dir):
        truth = np.linspace(22, 6, r["k"])  # s_con follows the human order, s_if is noisy
        sub = [{"s_if": float(np.clip(t + rng.normal(0, 8), 0, 25)),
                "s_con": float(np.clip(t + rng.normal(0, 1), 0, 25)), "naturalness": float(t), "artifacts": 20.0}
               for t in truth]
        preds.append({"pair_id": r["pair_id"], "scores": [float(x) for x in _grid_reward(sub, 0.8, 0.4)],
                      "sub_scores": sub})
    path = write_jsonl(tmp_path / "p.jsonl", preds)
    out = tmp_path / "out"
    code, stdout, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions", str(path),
                                "--out", str(out), "--grid", "--grid-alpha", "0.5,0.8,1", "--grid-w-con",
                                "0,0.4,0.6,1", "--bootstrap", "0", "--no-progress"], capsys)
    assert code == 0, stderr
    cells = json.loads((out / "grid.json").read_text())
    assert [(c["alpha"], c["w_con"]) for c in cells] == [(a, w) for a in (0.5, 0.8, 1.0) for w in (0, 0.4, 0.6, 1)]
    for c in cells:
        right = [np.all(np.diff(_grid_reward(p["sub_scores"], c["alpha"], c["w_con"])) < 0) for p in preds]
        assert c["accuracy"] == pytest.approx(np.mean(right)) and c["w_if"] == pytest.approx(1 - c["w_con"])
    report = json.loads((out / "report.json").read_text())
    by = {(c["alpha"], c["w_con"]): c["accuracy"] for c in cells}
    assert report["accuracy"]["overall"]["value"] == pytest.approx(by[(0.8, 0.4)])  # the scores used sec. 3.1
    grid = report["aggregation_grid"]
    assert grid["paper_readings"]["b_1_3"]["accuracy"] > grid["paper_readings"]["sec_3_1"]["accuracy"]
    # searched on the reported groups: no best cell is picked (B.1.3 searches on a disjoint validation set)
    assert grid["best"] == [] and not grid["held_out"] and "in-sample" in grid["best_refused"]
    assert "no best cell picked" in stdout
    md = (out / "report.md").read_text()
    assert "## Aggregation weights: grid search (SpatialReward paper, B.1.3 / figure 10)" in md
    assert "No best cell is picked:" in md and "**Best**" not in md
    assert "![Accuracy over the aggregation-weight grid](grid.png)" in md
    with Image.open(out / "grid.png") as im:
        assert im.format == "PNG"
    assert_html_report(out)
    # held out: search on 2pair, report 3pair + 4pair; the best cell is picked on 2pair and shown on both
    held = tmp_path / "held"
    code, stdout, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions", str(path),
                                "--split", "3pair,4pair", "--out", str(held), "--grid", "--grid-split", "2pair",
                                "--grid-alpha", "0.5,0.8,1", "--grid-w-con", "0,0.4,0.6,1", "--bootstrap", "0",
                                "--no-progress", "--no-plots"], capsys)
    assert code == 0, stderr
    grid = json.loads((held / "report.json").read_text())["aggregation_grid"]
    assert grid["held_out"] and grid["searched_on"] == ["2pair"] and grid["reported_on"] == ["3pair", "4pair"]
    two_pair = {r["pair_id"] for r in mer_rows(mer_dir, ("2pair",))}
    search = [p for p in preds if p["pair_id"] in two_pair]
    reported = [p for p in preds if p["pair_id"] not in two_pair]
    accuracy = {(a, w): np.mean([np.all(np.diff(_grid_reward(p["sub_scores"], a, w)) < 0) for p in search])
                for a in (0.5, 0.8, 1.0) for w in (0, 0.4, 0.6, 1)}
    top = max(accuracy.values())
    assert [(c["alpha"], c["w_con"]) for c in grid["best"]] == [k for k, v in accuracy.items() if v == top]
    for c in grid["best"]:
        assert c["reported_accuracy"] == pytest.approx(
            np.mean([np.all(np.diff(_grid_reward(p["sub_scores"], c["alpha"], c["w_con"])) < 0) for p in reported]))
    assert "on the reported 3pair,4pair:" in stdout
    assert "Accuracy (search) | Accuracy (reported)" in (held / "report.md").read_text()
    code, _, stderr = run(["benchmark", "mer-bench", "--dataset", str(mer_dir), "--predictions", str(path),
                           "--out", str(tmp_path / "overlap"), "--grid", "--grid-split", "2pair", "--no-progress"],
                          capsys)
    assert code == 2 and "--grid-split 2pair is also reported" in stderr


@pytest.mark.slow
def test_mer_bench_with_tiny_spatialreward_model(mer_dir, tmp_path, capsys):
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    ckpt = build_tiny_spatialreward(tmp_path / "sr", max_new_tokens=8)
    out = tmp_path / "out"
    argv = ["benchmark", "mer-bench", "--dataset", str(mer_dir), "--split", "3pair", "--model", str(ckpt),
            "--out", str(out), "--bootstrap", "10", "--device", "cpu", "--no-progress"]
    code, _, stderr = run(argv, capsys)
    assert code == 0, stderr
    lines = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(lines) == len([r for r in mer_rows(mer_dir) if r["k"] == 3])
    assert all(len(x["scores"]) == 3 and len(x["failed"]) == 3 and len(x["sub_scores"]) == 3 for x in lines)
    assert all((s is None) == f for x in lines for s, f in zip(x["scores"], x["failed"]))
    before = (out / "predictions.jsonl").read_bytes()
    assert run(argv, capsys)[0] == 0 and (out / "predictions.jsonl").read_bytes() == before  # resumed, not redone


# ---------------------------------------------------------------------------------------------------------
# editing-model leaderboard
# ---------------------------------------------------------------------------------------------------------


def test_editing_models_leaderboard_ordering(mie_dir, tmp_path, capsys):
    df = mie_rows(mie_dir, "train")
    models = sorted(set(df["editing_model"]))
    level = {m: 80.0 - 20.0 * i for i, m in enumerate(models)}  # models[0] best ... models[-1] worst
    special = sorted(set(df["task"]))[0]  # in this task the second model beats the first
    rng = np.random.default_rng(2)
    preds = []
    for r in df.itertuples():
        base = level[r.editing_model]
        if r.task == special and r.editing_model in models[:2]:
            base = 90.0 if r.editing_model == models[1] else 30.0
        preds.append({"id": r.id, "editing_model": r.editing_model, "task": r.task, "instance_id": r.instance_id,
                      **{d: base + float(rng.normal(0, 1)) for d in DIMS}})
    path = write_jsonl(tmp_path / "p.jsonl", preds)

    boards = {}
    for name, extra in (("with-dataset", ["--dataset", str(mie_dir), "--split", "train", "--bootstrap", "10"]),
                        ("predictions-only", ["--no-plots", "--bootstrap", "5"])):
        out = tmp_path / name
        code, stdout, stderr = run(["benchmark", "editing-models", *extra, "--predictions", str(path),
                                    "--out", str(out), "--no-progress"], capsys)
        assert code == 0, stderr
        boards[name] = json.loads((out / "report.json").read_text())["leaderboard"]
    assert_pngs(tmp_path / "with-dataset", ["editing_models", *[f"heatmap_{d}" for d in DIMS]])
    for board in boards.values():
        for d in DIMS:
            assert [r["model"] for r in board[d]] == models and [r["rank"] for r in board[d]] == [1, 2, 3, 4]
            first, second = board[d][0], board[d][1]
            assert second["tasks"][special]["value"] > first["tasks"][special]["value"]
            for row in board[d]:
                mine = [p[d] for p in preds if p["editing_model"] == row["model"]]
                assert row["all"]["value"] == pytest.approx(np.mean(mine))
                assert_metric(row["all"])
    md = (tmp_path / "with-dataset" / "report.md").read_text()
    assert "## Leaderboard" in md and "## Overall Score per task (paper tables 8–11 layout)" in md
    assert md.index(f"| 1 | {models[0]} |") < md.index(f"| 4 | {models[-1]} |")


def test_judge_names_the_k_pair_split_a_mer_bench_dataset_lacks(mer_without_3pair_dir, tmp_path, capsys):
    """Issue 22 item 21: `judge --dataset` on MER-Bench without a 3-pair split said "no split 'test'"."""
    from local_http import BadChatServer, text_reply

    verdict = json.dumps({"reasoning": "r", "visual_quality": 50, "instruction_following": 50,
                          "attribute_preservation": 50})
    output = tmp_path / "preds.jsonl"
    with BadChatServer(lambda request, index: text_reply(verdict)) as server:
        code = main(["judge", "--backend", "openai", "--base-url", server.url, "--model", "m", "--dataset",
                     str(mer_without_3pair_dir), "--output", str(output), "--api-key-env", "NO_SUCH_KEY",
                     "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0 and "has no '3pair' split; using 2pair, 4pair" in err and "no split 'test'" not in err
    assert len(output.read_text().splitlines()) == len(server.requests) > 0
