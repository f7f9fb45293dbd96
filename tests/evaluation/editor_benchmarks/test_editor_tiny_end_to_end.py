"""The editor-RL pieces together (slow): GEdit-Bench and ImgEdit-Bench fixtures in their released formats ->
``miescore convert-benchmark`` -> a LoRA trained on the tiny diffusers Flux2-Klein by the Flow-GRPO recipe ->
``miescore edit`` with the base editor and with the LoRA -> ``miescore benchmark gedit`` / ``imgedit`` with a
scripted OpenAI-compatible judge that scores what it sees -> ``miescore benchmark editors`` (the SpatialReward
paper's Table 3 layout). Every key of both benchmarks is edited and judged, each judged score is the protocol
applied to the saved edit (resized to its source for GEdit), and the comparison's Δ are the two runs'
differences."""

from __future__ import annotations

import json
import math
import statistics

import pytest
from editor_bench_helpers import looking_judge, looking_scores
from editor_rl_runs import RECIPE, recipe_cli
from local_http import RoutedChatServer
from PIL import Image

from modeling_miescore.cli.main import main as miescore
from modeling_miescore.testing import raw_benchmarks as rb
from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("single_thread")]
BENCHMARKS = ("gedit", "imgedit")


def _read_jsonl(path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _as_sent(image):
    """The image as GEdit's GPT-4.1 path sends it: JPEG with Pillow's default quality (75), at full size."""
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    return Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")


def _expected_gedit(report_dir, row) -> tuple:
    source = Image.open(report_dir / row["sources"][0]).convert("RGB")
    edit = Image.open(row["edited"]).convert("RGB").resize(source.size)  # GEdit's scorer resizes to the source
    source, edit = _as_sent(source), _as_sent(edit)
    sc, pq = min(looking_scores("sc", edit, source)), min(looking_scores("pq", edit))
    return sc, pq, math.sqrt(sc * pq)


def _check_judged(report_dir, benchmark: str, keys: set) -> dict:
    """The run judged every key, each as the protocol says; returns the report."""
    report = json.loads((report_dir / "report.json").read_text())
    counts = report["counts"]
    assert counts["judged"] == len(keys) and counts["flagged"] == counts["missing_edits"] == 0, counts
    assert {row["key"] for row in report["per_row"]} == keys
    for row in report["per_row"]:
        if benchmark == "gedit":
            assert (row["sc"], row["pq"], row["o"]) == pytest.approx(_expected_gedit(report_dir, row))
        else:
            scores = looking_scores("imgedit", Image.open(row["edited"]).convert("RGB"))
            assert row["mean"] == round(sum(scores) / 3, 2)
    return report


def test_convert_train_edit_benchmark_and_compare_two_editors(tmp_path, tiny_editor_path, editing_requests):
    # 1. the releases' formats (64 px sources: Flux2-Klein's minimum) converted by the CLI
    rb.make_raw_gedit_bench(tmp_path / "raw-gedit", languages=("en",), source_side=64)
    rb.make_raw_imgedit_bench(tmp_path / "raw-imgedit", images="Benchmark", source_side=64)
    data = {b: tmp_path / "data" / b for b in BENCHMARKS}
    assert miescore(["convert-benchmark", "gedit-bench", "--raw", str(tmp_path / "raw-gedit"), "--out",
                     str(data["gedit"]), "--no-progress"]) == 0
    assert miescore(["convert-benchmark", "imgedit-bench", "--raw", str(tmp_path / "raw-imgedit"), "--images",
                     "Benchmark", "--out", str(data["imgedit"]), "--no-progress"]) == 0
    # 2. a LoRA from the recipe's tiny CPU config (reward: the edit's redness), a few steps
    model, run = tiny_editor_path("flux2-klein"), tmp_path / "runs" / "tuned"
    assert recipe_cli("--config", str(RECIPE.parent / "configs" / "flow_grpo_editor_tiny_cpu.yaml"),
                      "--model_name_or_path", str(model), "--dataset", str(editing_requests), "--output_dir",
                      str(run), "--max_steps", "6", "--save_steps", "6", "--sample_grid_steps", "0",
                      "--progress", "false") == 0
    # 3. edits of both benchmarks by the base editor and by the tuned one (same seeds)
    options = json.dumps(TINY_EDITOR_OPTIONS["flux2-klein"])
    edits = {}
    for name, lora in (("base", []), ("tuned", ["--lora", str(run)])):
        for benchmark in BENCHMARKS:
            edits[benchmark, name] = tmp_path / "edits" / f"{benchmark}-{name}"
            assert miescore(["edit", "--pipeline", "flux2-klein", "--model", str(model), *lora, "--dataset",
                             str(data[benchmark]), "--editor-options", options, "--cfg-scale", "1", "--steps", "4",
                             "--out", str(edits[benchmark, name]), "--no-progress"]) == 0
    keys = {b: {line["id"] for line in _read_jsonl(edits[b, "base"] / "edits.jsonl")} for b in BENCHMARKS}
    assert len(keys["gedit"]) == 5 and len(keys["imgedit"]) == 6  # one edit per benchmark key
    first = _read_jsonl(edits["gedit", "base"] / "edits.jsonl")[0]["edited"]
    assert (Image.open(edits["gedit", "base"] / first).tobytes()
            != Image.open(edits["gedit", "tuned"] / first).tobytes())  # the LoRA changed the edits
    # 4. both benchmarks judged by a scripted judge on loopback; 5. the two editors compared
    reports = {}
    with RoutedChatServer(looking_judge) as server:
        for name in ("base", "tuned"):
            for benchmark, model_name in zip(BENCHMARKS, ("gpt-4.1", "gpt-4.1")):
                reports[benchmark, name] = tmp_path / "rep" / f"{benchmark}-{name}"
                assert miescore(["benchmark", benchmark, "--dataset", str(data[benchmark]), "--edits",
                                 str(edits[benchmark, name] / "edits.jsonl"), "--out", str(reports[benchmark, name]),
                                 "--backend", "openai", "--base-url", server.url, "--model", model_name,
                                 "--no-progress", "--bootstrap", "50"]) == 0
    assert len(server.requests) == 2 * (2 * 5 + 6)  # GEdit: an SC and a PQ request per key; ImgEdit: one
    judged = {(b, n): _check_judged(folder, b, keys[b]) for (b, n), folder in reports.items()}
    cmp = tmp_path / "rep" / "cmp"
    assert miescore(["benchmark", "editors", "--runs",
                     f"base={reports['gedit', 'base']},{reports['imgedit', 'base']}",
                     f"tuned={reports['gedit', 'tuned']},{reports['imgedit', 'tuned']}",
                     "--out", str(cmp), "--bootstrap", "50"]) == 0
    table = json.loads((cmp / "report.json").read_text())["table3"]

    def overall(benchmark, name):  # the benchmark's overall: the mean over categories of the category means
        if benchmark == "gedit":
            return judged[benchmark, name]["results"]["en"]["full"]["o"]["value"]
        return judged[benchmark, name]["results"]["en"]["full"]["mean"]["value"]

    for benchmark in BENCHMARKS:
        delta = table["tuned"][benchmark]["delta"]
        assert delta["value"] == pytest.approx(overall(benchmark, "tuned") - overall(benchmark, "base"))
        assert delta["n_paired"] == len(keys[benchmark]) and 0 < delta["p_value"] <= 1
    rows = judged["gedit", "base"]["per_row"]
    by_type = {}
    for row in rows:
        by_type.setdefault(row["category"], []).append(row["o"])
    assert overall("gedit", "base") == pytest.approx(statistics.mean(statistics.mean(v) for v in by_type.values()))
    md = (cmp / "report.md").read_text()
    print(md[md.index("| Configuration"):md.index("## GEdit-Bench: O per task type")])
    assert "| w/ Ours | 7.64 | 8.01 | 7.32 | +0.90 | 3.72 | +0.28 |" in md and "| tuned † |" in md
