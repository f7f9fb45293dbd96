import json
import os
import subprocess
import sys

import pytest

from modeling_miescore.scoring.jsonl_scoring import merge_shards, score_jsonl, shard_path
from modeling_miescore.data.example_edits import save_example_files


@pytest.fixture()
def edits_file(tmp_path, examples):
    files = save_example_files(examples, tmp_path, relative=True)  # paths relative to the JSONL file
    records = [{"id": f"x{i}", **files[i % len(files)]} for i in range(9)]
    path = tmp_path / "edits.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _fake_scorer(samples, batch_size):
    return [{"overall": float(len(s.instruction))} for s in samples]


def _ids(path):
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def test_ranks_take_contiguous_slices_and_merge_in_input_order(edits_file, tmp_path):
    output = tmp_path / "preds.jsonl"
    output.write_text(json.dumps({"id": "x4", "overall": 1.0}) + "\n")  # from an earlier single-process run
    reports = [score_jsonl(_fake_scorer, edits_file, output, progress=False, rank=r, world_size=2) for r in (0, 1)]
    assert _ids(shard_path(output, 0, 2)) == ["x0", "x1", "x2", "x3"]  # lines 0-3
    assert _ids(shard_path(output, 1, 2)) == ["x5", "x6", "x7", "x8"]  # lines 4-8; x4 was already done
    assert reports[1].skipped_existing == 1 and reports[0].skipped_existing == 0
    assert merge_shards(edits_file, output, 2) == 9
    assert _ids(output) == [f"x{i}" for i in range(9)]
    assert not shard_path(output, 0, 2).exists() and not shard_path(output, 1, 2).exists()
    assert json.loads(output.read_text().splitlines()[4])["overall"] == 1.0  # the earlier prediction kept


def test_rank_resumes_its_shard_after_a_crash(edits_file, tmp_path):
    output = tmp_path / "preds.jsonl"
    shard = shard_path(output, 1, 2)
    shard.write_text(json.dumps({"id": "x5", "overall": 7.0}) + "\n" + '{"id": "x6", "ove')
    report = score_jsonl(_fake_scorer, edits_file, output, progress=False, rank=1, world_size=2)
    assert report.repaired_tail and report.skipped_existing == 1 and report.scored == 4
    assert _ids(shard) == ["x5", "x4", "x6", "x7", "x8"]  # x6's cut-off line was dropped and rescored


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_accelerate_launch_two_cpu_processes(edits_file, tmp_path, tiny_miescore_path, tiny_miescore):
    output = tmp_path / "preds.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    # `--multi_gpu` selects accelerate's torchrun-style launcher; without CUDA each process runs on the CPU
    # and the processes meet over gloo (accelerate's `--cpu` mode needs MPI instead).
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "-m", "modeling_miescore.cli", "score-batch", "--model", str(tiny_miescore_path),
               "--input", str(edits_file), "--output", str(output), "--no-progress", "--batch-size", "2"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[rank 0] scored" in result.stderr and "[rank 1] scored" in result.stderr
    assert _ids(output) == [f"x{i}" for i in range(9)]
    records = {json.loads(x)["id"]: json.loads(x) for x in output.read_text().splitlines()}
    single = tiny_miescore.score_batch(
        [{"sources": [edits_file.parent / p for p in r["sources"]], "edited": edits_file.parent / r["edited"],
          "instruction": r["instruction"]} for r in map(json.loads, edits_file.read_text().splitlines())])
    for i, expected in enumerate(single):
        assert records[f"x{i}"]["overall"] == pytest.approx(expected["overall"], abs=1e-4)
