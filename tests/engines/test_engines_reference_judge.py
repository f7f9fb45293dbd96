"""The open reference judge on a real vLLM (``-m engines``): a Qwen-VL-family model served by vLLM, greedy
(``--temperature 0``) with a fixed seed (``--judge-seed``), its weights pinned (docs/editor_benchmarks.md,
"Reporting a number others can reproduce"). Two runs of the same benchmark give identical per-sample judgements
and the same protocol fingerprint; a changed setting changes the fingerprint.

The model is the random servable SpatialReward of ``tests/servable_checkpoints.py`` (plain Qwen3-VL layout, the real
Qwen vocabulary): its answers are random text, so every judgement is a flagged one whose raw answers are kept;
identical raw answers are what "the same judgements" means here. Each run has its own folder, so its own answer
cache: the second run asks the server again."""

from __future__ import annotations

import json

import pytest
from editor_bench_helpers import converted, edit_image
from engine_servers import module_server, require_vllm

from modeling_miescore.cli import main
from modeling_miescore.evaluation.protocol import differences

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_vllm()
    from servable_checkpoints import random_servable_spatialreward

    yield from module_server(random_servable_spatialreward(), "reference-judge", tmp_path_factory,
                             env={"MIESCORE_VLLM_MAX_IMAGES": "2", "MIESCORE_VLLM_MAX_MODEL_LEN": "2048"})


def _run(server, dataset, edits, out, *extra) -> dict:
    assert main(["benchmark", "gedit", "--dataset", str(dataset), "--edits", str(edits), "--out", str(out),
                 "--backend", "openai", "--base-url", server.url, "--model", server.name, "--temperature", "0",
                 "--judge-seed", "0", "--parts-order", "images-first", "--max-tokens", "24", "--bootstrap", "0",
                 "--no-progress", "--no-plots", *extra]) == 0
    records = {}
    for line in (out / "judgements.jsonl").read_text().splitlines():
        record = json.loads(line)
        records[record["id"]] = record
    return records


def test_two_runs_of_the_reference_judge_give_the_same_judgements_and_fingerprint(server, tmp_path):
    dataset, truth = converted("gedit-bench", tmp_path, tasks={"subject-add": 2, "color_alter": 1},
                               languages=("en",))
    edits = tmp_path / "edits"
    for code, row in enumerate(truth):
        edit_image(edits / f"{row['key']}.png", code)
    first, second = (_run(server, dataset, edits, tmp_path / name) for name in ("first", "second"))
    assert len(first) == len(truth) and first == second  # every record, raw answers included
    assert all(r["raw"]["gedit-sc"] and r["raw"]["gedit-pq"] for r in first.values())  # the model answered
    protocols = [json.loads((tmp_path / name / "report.json").read_text())["protocol"] for name in ("first", "second")]
    assert protocols[0]["fingerprint"] == protocols[1]["fingerprint"]
    mllm = protocols[0]["judge"]["mllm"]
    assert mllm["endpoint_model"] == [server.name]  # the name the endpoint reported in its answers
    assert mllm["sampling"] == {"temperature": 0.0, "seed": 0}
    _run(server, dataset, edits, tmp_path / "other-seed", "--judge-seed", "1")
    other = json.loads((tmp_path / "other-seed" / "report.json").read_text())["protocol"]
    assert other["fingerprint"] != protocols[0]["fingerprint"]
    assert differences(other, protocols[0]) == ["judge.mllm.sampling.seed: 1 (b: 0)"]
