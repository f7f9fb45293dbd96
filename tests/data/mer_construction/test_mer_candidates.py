"""MER-Bench candidate generation (SpatialReward sec. 4.2): 6 outputs per instruction from a pool of editing
systems, resumable after a failure or a kill, with clear errors for bad system names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from mer_construction_helpers import TOY_SYSTEMS, construction_folder

from modeling_miescore.cli.main import main
from modeling_miescore.data.mer_construction import generate_candidates, parse_system_spec
from modeling_miescore.hub.errors import MIEScoreInputError


def _ledger(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "candidates.jsonl").read_text().splitlines()]


def test_six_candidates_per_instruction_from_the_pool(tmp_path):
    folder = construction_folder(tmp_path, 2, 2)
    ledger = _ledger(folder)
    per_sample = Counter(r["sample_id"] for r in ledger)
    assert len(per_sample) == 4 and set(per_sample.values()) == {6}
    assert len({r["candidate_id"] for r in ledger}) == 24
    for sample_id in per_sample:  # 3 systems for 6 slots: each system twice, with different seeds
        mine = [r for r in ledger if r["sample_id"] == sample_id]
        assert Counter(r["editing_model"] for r in mine) == {"tint": 2, "mirror": 2, "blur": 2}
        assert len({r["seed"] for r in mine}) == 6
    assert all((folder / r["image"]).is_file() for r in ledger)
    again = generate_candidates(folder, [parse_system_spec(s) for s in TOY_SYSTEMS], progress=False)
    assert again.made == 0 and again.already_done == 24 and len(_ledger(folder)) == 24


def test_failed_edits_are_retried_by_the_next_run(tmp_path, capsys):
    folder = construction_folder(tmp_path, 1, 1, per_instruction=2)
    (folder / "candidates.jsonl").unlink()
    flaky = ["--system", "flaky=mer_construction_helpers:flaky_editor"]
    args = ["mer-bench", "candidates", "--folder", str(folder), "--no-progress", *flaky, "--per-instruction", "6"]
    assert main(args) == 1
    assert "failed" in capsys.readouterr().err
    made = len(_ledger(folder))
    assert 0 < made < 12
    runs = 1
    while main(args) == 1:  # every run makes about half of what is left
        runs += 1
        assert runs < 10, "the failed candidates are not retried"
    ledger = _ledger(folder)
    assert len(ledger) == len({r["id"] for r in ledger}) == 12


def test_candidates_kill_and_resume(tmp_path):
    folder = construction_folder(tmp_path, 1, 1, per_instruction=2)
    (folder / "candidates.jsonl").unlink()
    env = {**os.environ, "MIESCORE_TOY_EDITOR_DELAY": "0.2",
           "PYTHONPATH": os.pathsep.join([str(Path.cwd()), os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "modeling_miescore.cli", "mer-bench", "candidates", "--folder", str(folder),
               "--no-progress", *[a for s in TOY_SYSTEMS for a in ("--system", s)]]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if (folder / "candidates.jsonl").exists() and len(_ledger(folder)) >= 4:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    assert process.returncode == -signal.SIGKILL
    at_kill = len(_ledger(folder))
    assert 4 <= at_kill < 12
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"made {12 - at_kill} candidates now, {at_kill} before" in done.stderr
    ledger = _ledger(folder)
    assert len(ledger) == len({r["id"] for r in ledger}) == 12
    assert sorted(p.name for p in (folder / "candidates").iterdir()) == sorted(f"{r['id']}.png" for r in ledger)


def test_bad_systems_exit_2(tmp_path, capsys):
    folder = construction_folder(tmp_path, 1, 1, per_instruction=2)
    base = ["mer-bench", "candidates", "--folder", str(folder), "--no-progress", "--per-instruction", "3"]
    before = (folder / "candidates.jsonl").read_text()
    assert main([*base, "--system", "no-equals-sign"]) == 2
    assert "is not NAME=module:function" in capsys.readouterr().err
    assert main([*base, "--system", "x=no_such_module_here:edit"]) == 2
    assert "'no_such_module_here:edit': cannot import module 'no_such_module_here'" in capsys.readouterr().err
    assert main([*base, "--system", "a=mer_construction_helpers:flaky_editor", "--system",
                 "a=mer_construction_helpers:flaky_editor"]) == 2
    assert "must be unique" in capsys.readouterr().err
    assert main(["mer-bench", "candidates", "--folder", str(tmp_path / "nope"), "--system", TOY_SYSTEMS[0]]) == 2
    assert main([*base, "--system", "bad=mer_construction_helpers:not_an_image"]) == 1
    assert "returned str, not a PIL image" in capsys.readouterr().err
    assert (folder / "candidates.jsonl").read_text() == before  # nothing half-written


def test_diffusers_is_imported_only_when_a_pipeline_is_used(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "diffusers" or m.startswith("diffusers.")]:
        monkeypatch.delitem(sys.modules, name)  # other tests of the session may have imported it; restored after
    system = parse_system_spec("FLUX-Dev=diffusers:black-forest-labs/FLUX.1-Kontext-dev")
    assert system.spec == "diffusers:black-forest-labs/FLUX.1-Kontext-dev" and "diffusers" not in sys.modules
    monkeypatch.setitem(sys.modules, "diffusers", None)  # as if it were not installed
    with pytest.raises(MIEScoreInputError, match="pip install diffusers"):
        system.load("cpu")
