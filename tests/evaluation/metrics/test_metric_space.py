"""The `evaluate` metric Space (spaces/miescore_metric) loads offline in a fresh interpreter and returns
exactly the library's numbers (modeling_miescore.evaluation.metrics), for both configs."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from modeling_miescore.evaluation.metrics.correlation import correlations, srcc
from modeling_miescore.evaluation.metrics.group_ranking import group_accuracy, kendall_tau_groups
from modeling_miescore.hub.miescore_overall import overall_score

REPO = Path(__file__).resolve().parents[3]
SPACE = REPO / "spaces" / "miescore_metric"


def _data():
    rng = np.random.default_rng(7)
    mos = rng.uniform(10, 90, size=(120, 3))
    pred = np.clip(mos + rng.normal(scale=12, size=mos.shape), 1, 99)
    pred[:, 1] = np.round(pred[:, 1] / 10) * 10  # coarse IF scores: ties
    sizes = rng.choice([2, 3, 4], size=60)
    groups = [np.round(rng.normal(size=k) - 0.4 * np.arange(k), 1).tolist() for k in sizes]
    groups[0] = [1.0] * len(groups[0])  # a fully tied group
    cats = rng.choice(["General", "Human-Body", "Human-Face"], size=60).tolist()
    return pred.tolist(), mos.tolist(), groups, cats


def _run(tmp_path, code, timeout=240):
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_EVALUATE_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf_home"),
        GRADIO_ANALYTICS_ENABLED="False",
        GRADIO_TEMP_DIR=str(tmp_path / "gradio"),
        PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p]),
    )
    env.pop("HF_MODULES_CACHE", None)
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def space_results(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("metric_space")
    pred, mos, groups, cats = _data()
    (tmp_path / "inputs.json").write_text(json.dumps({"pred": pred, "mos": mos, "groups": groups, "cats": cats}))
    code = f"""
        import json, warnings
        import evaluate
        inp = json.load(open("inputs.json"))
        out = {{}}
        mie = evaluate.load({str(SPACE)!r})
        out["config"] = mie.config_name
        out["default"] = mie.compute(predictions=inp["pred"], references=inp["mos"])
        for i in range(0, len(inp["pred"]), 50):  # streaming use: add_batch, then compute
            mie.add_batch(predictions=inp["pred"][i:i + 50], references=inp["mos"][i:i + 50])
        out["batched"] = mie.compute()
        # the dicts of MIEScoreModel.score_batch and MIE-Bench rows go in as they are
        names = ("visual_quality", "instruction_following", "attribute_preservation")
        as_scores = [dict(zip(names, p), overall=-1.0) for p in inp["pred"]]
        as_rows = [dict(zip(("mos_vq", "mos_if", "mos_ap"), m), id="x") for m in inp["mos"]]
        out["from_dicts"] = mie.compute(predictions=as_scores, references=as_rows)
        for p, m in zip(as_scores[:40], as_rows[:40]):
            mie.add(prediction=p, reference=m)
        out["added_dicts"] = mie.compute()
        for name, kwargs in (("no_references", dict(predictions=inp["pred"])),
                             ("no_predictions", dict(references=inp["mos"])),
                             ("bad_dict", dict(predictions=[dict(vq=1)] * 3, references=inp["mos"][:3]))):
            try:
                mie.compute(**kwargs)
            except ValueError as exc:
                out[name] = str(exc)
        mer = evaluate.load({str(SPACE)!r}, "mer_bench")
        out["mer"] = mer.compute(predictions=inp["groups"], categories=inp["cats"])
        out["mer_ref_tie"] = mer.compute(predictions=inp["groups"], tie_score=1.0)
        try:
            mer.compute(predictions=inp["groups"], references=inp["groups"])
        except ValueError as exc:
            out["mer_refs_error"] = str(exc)
        try:
            evaluate.load({str(SPACE)!r}, "nope")
        except Exception as exc:
            out["bad_config_error"] = repr(exc)
        import sys
        sys.modules["modeling_miescore"] = None  # as if the package were not installed
        try:
            evaluate.load({str(SPACE)!r})
        except ImportError as exc:
            out["missing_pkg_error"] = str(exc)
        json.dump(out, open("out.json", "w"))
    """
    _run(tmp_path, code)
    return json.loads((tmp_path / "out.json").read_text()), (pred, mos, groups, cats)


def test_default_config_equals_library(space_results):
    out, (pred, mos, _, _) = space_results
    pred, mos = np.asarray(pred), np.asarray(mos)
    res = out["default"]
    assert out["config"] == "default"
    columns = {d: (pred[:, i], mos[:, i]) for i, d in enumerate(["vq", "if", "ap"])}
    columns["overall"] = (overall_score(*pred.T), overall_score(*mos.T))
    assert res["n"] == len(pred)
    for dim, (p, m) in columns.items():
        lib = correlations(p, m)
        for name, value in lib.items():
            assert res[f"{dim}_{name}"] == pytest.approx(value, rel=1e-12, abs=1e-12), (dim, name)
    assert set(res) == {f"{d}_{k}" for d in columns for k in ("srcc", "krcc", "plcc", "plcc_logistic")} | {"n"}
    assert out["batched"] == pytest.approx(res, rel=1e-12)
    assert out["from_dicts"] == pytest.approx(res, rel=1e-12)  # dicts give the numbers of the triples
    p, m = pred[:40], mos[:40]
    assert out["added_dicts"]["if_srcc"] == pytest.approx(correlations(p[:, 1], m[:, 1])["srcc"], abs=1e-12)
    assert out["added_dicts"]["n"] == 40


def test_default_config_errors_say_what_to_pass(space_results):
    out, _ = space_results
    assert "references is missing: pass predictions=[[vq, if, ap], ...]" in out["no_references"]
    assert "'mer_bench' config" in out["no_references"]
    assert "predictions is missing" in out["no_predictions"]
    assert "predictions[0] is a dict with keys ['vq']" in out["bad_dict"]
    assert "MIEScoreModel.score / score_batch" in out["bad_dict"]


def test_mer_bench_config_equals_library(space_results):
    out, (_, _, groups, cats) = space_results
    res = out["mer"]
    acc = group_accuracy(groups, categories=cats)
    tau = kendall_tau_groups(groups, categories=cats)
    assert res["accuracy"] == pytest.approx(acc["overall"], abs=1e-15)
    assert res["kendall_tau"] == pytest.approx(tau["overall"], abs=1e-15)
    assert res["n_groups"] == 60
    for k in (2, 3, 4):
        assert res[f"accuracy_{k}pair"] == pytest.approx(acc["by_size"][k], abs=1e-15)
        assert res[f"kendall_tau_{k}pair"] == pytest.approx(tau["by_size"][k], abs=1e-15)
        assert res[f"n_groups_{k}pair"] == acc["n_by_size"][k]
    for cat, values in res["by_category"].items():
        assert values["accuracy"] == pytest.approx(acc["by_category"][cat], abs=1e-15)
        assert values["kendall_tau"] == pytest.approx(tau["by_category"][cat], abs=1e-15)
    ref = kendall_tau_groups(groups, tie_score=1.0)
    assert out["mer_ref_tie"]["kendall_tau"] == pytest.approx(ref["overall"], abs=1e-15)
    assert out["mer_ref_tie"]["kendall_tau"] > res["kendall_tau"]  # the tied group counts +1 there
    assert "takes no references" in out["mer_refs_error"]
    assert "mer_bench" in out["bad_config_error"]


def test_missing_library_error_names_the_pip_package(space_results):
    out, _ = space_results
    assert "pip install miescore" in out["missing_pkg_error"]


def test_space_files_follow_hub_conventions():
    readme = (SPACE / "README.md").read_text()
    assert readme.startswith("---\n")
    front = readme.split("---\n")[1]
    for key in ("title:", "sdk: gradio", "app_file: app.py", "- evaluate", "- metric", "description:"):
        assert key in front, key
    script = (SPACE / "miescore_metric.py").read_text()
    import_lines = [ln for ln in script.splitlines() if ln.startswith(("import ", "from "))]
    assert all("," not in ln.split("#")[0] for ln in import_lines), "one import per line (evaluate's scanner)"
    assert any(ln.startswith("from modeling_miescore.evaluation.metrics.") for ln in import_lines)
    assert "requirements.txt" in os.listdir(SPACE)


def test_metric_card_has_the_evaluate_template_sections_in_order():
    readme = (SPACE / "README.md").read_text()
    sections = ["# Metric Card for MIEScore", "## Metric Description", "## How to Use", "### Inputs",
                "### Output Values", "#### Values from Popular Papers", "### Examples", "## Limitations and Bias",
                "## Citation", "## Further References"]
    headings = [ln for ln in readme.splitlines() if ln.startswith("#") and not ln.startswith("#  ")
                and ln.split(" ", 1)[0].strip("#") == ""]
    assert [h for h in headings if h in sections] == sections
    # the papers' own numbers: MIEScore paper table 3 (MIEScore row), SpatialReward paper table 1 (its row)
    assert "| MIEScore ✻ | 0.8239 / 0.6395 / 0.8257 | 0.8703 / 0.6985 / 0.9077 |" in readme
    assert "| SpatialReward | 0.780 | 0.495 | 0.215 | 0.483 | 0.549 |" in readme


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_gradio_widget_builds_and_computes(tmp_path):
    pred, mos, _, _ = _data()
    (tmp_path / "inputs.json").write_text(json.dumps({"pred": pred[:20], "mos": mos[:20]}))
    code = f"""
        import json, runpy
        import pandas as pd
        inp = json.load(open("inputs.json"))
        ns = runpy.run_path({str(SPACE / "app.py")!r}, run_name="space_app")  # not __main__: no launch
        iface = ns["build_widget"](ns["module"])
        table = pd.DataFrame({{"predictions": [json.dumps(r) for r in inp["pred"]],
                               "references": [json.dumps(r) for r in inp["mos"]]}})
        json.dump(iface.fn(table), open("out.json", "w"))
    """
    _run(tmp_path, code)
    res = json.loads((tmp_path / "out.json").read_text())
    p, m = np.asarray(pred[:20]), np.asarray(mos[:20])
    assert res["if_srcc"] == pytest.approx(srcc(p[:, 1], m[:, 1]), abs=1e-12)
    assert res["n"] == 20
