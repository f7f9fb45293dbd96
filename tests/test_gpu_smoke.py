"""benchmarks/gpu_smoke.py (issue 32): ``--help``, a bad option, a failing check's one line and exit status, and
the CPU dry run of every check (``--device cpu --quick``) through the package's real entry points."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_smoke.py"
CHECKS = ["environment", "recipe qwen-image-edit-plus", "edit qwen-image-edit-plus", "recipe flux2-klein",
          "edit flux2-klein", "recipe flux-kontext", "edit flux-kontext", "miescore score", "spatialreward generate",
          "server", "ratio"]


def _smoke():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_and_a_bad_option():
    shown = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "--device" in shown.stdout and "--quick" in shown.stdout
    bad = subprocess.run([sys.executable, str(SCRIPT), "--steps", "0"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--steps must be at least 1" in bad.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine --device cuda runs the whole smoke test")
def test_a_failing_check_is_one_line_and_exit_status_1(capsys, tmp_path):
    assert _smoke().main(["--device", "cuda", "--work", str(tmp_path)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "FAIL environment: --device cuda but torch sees no CUDA device; use --device cpu for a dry run"]


def test_the_cpu_dry_run_passes_every_check(capsys, tmp_path, tiny_editor_path, tiny_miescore_path,
                                             tiny_spatialreward_path, single_thread):
    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_BUILDERS

    (tmp_path / "editors").mkdir()
    for name in TINY_EDITOR_BUILDERS:  # the session's tiny models (the script builds the same when missing)
        (tmp_path / "editors" / name).symlink_to(tiny_editor_path(name), target_is_directory=True)
    (tmp_path / "tiny-miescore").symlink_to(tiny_miescore_path, target_is_directory=True)
    (tmp_path / "tiny-spatialreward").symlink_to(tiny_spatialreward_path, target_is_directory=True)
    status = _smoke().main(["--device", "cpu", "--quick", "--work", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0, "\n".join(lines)
    assert [line.split(":")[0] for line in lines[:-1]] == [f"PASS {name}" for name in CHECKS]
    assert lines[-1] == "gpu_smoke: every check passed"
    ratio = lines[-2]
    assert "train_batch_size 2: ratio_mean" in ratio and "train_batch_size 4: ratio_mean" in ratio  # G = 4 when quick
    assert ratio.count("clipfrac") == 2
    assert (tmp_path / "runs" / "flux2-klein" / "pytorch_lora_weights.safetensors").is_file()


@pytest.mark.slow
def test_the_full_cpu_run_in_fp32_is_exactly_on_policy_at_equal_batch_sizes(capsys, tmp_path, single_thread):
    """The GPU settings (3 steps per editor, the ratio check at G = 12, T = 20) on CPU in fp32 (~1 minute), where
    the micro-batch equal to G must give ratio_mean exactly 1 at the first update."""
    status = _smoke().main(["--device", "cpu", "--dtype", "float32", "--work", str(tmp_path)])
    lines = capsys.readouterr().out.splitlines()
    assert status == 0, "\n".join(lines)
    assert "train_batch_size 12: ratio_mean 1.000000" in lines[-2] and "G = 12, T = 20" in lines[-2]
