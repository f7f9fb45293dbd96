"""Our reward models as judges of an editor's outputs (``--judge miescore:CKPT`` / ``spatialreward:CKPT``) beside the
scripted MLLM judge, with tiny random-weight checkpoints: every edit gets a score or a flag, the report's
per-category means are those of the scores written, and the rank correlation with the judge is computed over the
keys both judged."""

from __future__ import annotations

import json

import numpy as np
import pytest
from editor_bench_helpers import converted, edit_image, gedit_server_answer
from local_http import RoutedChatServer

from modeling_miescore.cli.main import main

pytestmark = pytest.mark.slow  # ~20 s on 2 shared cores, plus the tiny checkpoints when no other test built them


@pytest.fixture(scope="module")
def gedit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gedit-rewards")
    dataset, truth = converted("gedit-bench", folder, tasks={"background_change": 2, "subject-add": 2},
                               languages=("en",))
    for code, t in enumerate(truth):
        edit_image(folder / "edits" / f"{t['key']}.png", code, size=(52, 36))
    return dataset, folder / "edits", truth


def _records(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_miescore_and_spatialreward_judge_the_same_edits(gedit, tmp_path, tiny_miescore_path,
                                                         tiny_spatialreward_path):
    from scipy.stats import spearmanr

    dataset, edits, truth = gedit
    plan = {0: ([6, 6], [6, 6]), 1: ([4, 4], [9, 9]), 2: ([8, 8], [2, 2]), 3: ([5, 5], [7, 7])}
    out = tmp_path / "out"
    with RoutedChatServer(gedit_server_answer(plan)) as server:
        args = ["benchmark", "gedit", "--dataset", str(dataset), "--edits", str(edits), "--out", str(out),
                "--backend", "openai", "--base-url", server.url, "--model", "gpt-4.1",
                "--judge", f"miescore:{tiny_miescore_path}", "--judge", f"spatialreward:{tiny_spatialreward_path}",
                "--device", "cpu", "--dtype", "float32", "--no-progress", "--bootstrap", "0", "--no-plots"]
        assert main(args) == 0
    report = json.loads((out / "report.json").read_text())
    mie = report["reward_judges"][f"miescore:{tiny_miescore_path.resolve()}"]
    scores = {r["id"].split("#")[0]: r for r in _records(out / "reward-miescore.jsonl")}
    assert set(scores) == {t["key"] for t in truth} and all(not r["failed"] for r in scores.values())
    by_cat = mie["results"]["en"]["full"]["by_category"]
    for category in ("background_change", "subject-add"):
        keys = [t["key"] for t in truth if t["task_type"] == category]
        assert by_cat[category]["overall"]["value"] == pytest.approx(np.mean([scores[k]["overall"] for k in keys]))
    judge_o = {r["row"]: r["o"] for r in report["per_row"]}
    expected = spearmanr([scores[k]["overall"] for k in judge_o], list(judge_o.values())).statistic
    srcc = mie["srcc_with_judge"]["en"]["overall"]
    assert srcc["n"] == 4 and srcc["value"] == pytest.approx(expected)
    sr = report["reward_judges"][f"spatialreward:{tiny_spatialreward_path.resolve()}"]
    records = _records(out / "reward-spatialreward.jsonl")
    assert len(records) == 4 and all((r["reward"] is None) == r["failed"] for r in records)  # flagged, never a made-up reward
    assert sr["counts"] == {"scored": sum(not r["failed"] for r in records),
                            "flagged": sum(r["failed"] for r in records), "not_scored": 0}
    md = (out / "report.md").read_text()
    assert "## Reward models as judges of the same edits" in md and "SRCC with judge" in md
    assert main(args[:args.index("--backend")] + args[args.index("--judge"):args.index("--judge") + 2]
                + args[args.index("--device"):]) == 0  # reward models only, resumed: nothing to score again
    again = json.loads((out / "report.json").read_text())
    assert again["results"] == {} and again["reward_judges"].keys() == {f"miescore:{tiny_miescore_path.resolve()}"}
