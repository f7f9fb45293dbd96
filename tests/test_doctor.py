"""`miescore doctor`: healthy tiny checkpoints have no error; broken ones are found by the check that names the fault.

What is asserted for the healthy tiny MIEScore checkpoint: no error (exit 0 or 1, never 2). Its random weights
miss some expected directions and 4 sources at 1024 px exceed the training length, so "warnings" (exit 1) is the
honest verdict; the test checks that every check is reported by name, including the four direction checks.
The healthy SpatialReward run uses a scripted judge (a `_generate_texts` stand-in that writes valid D.1 answers
from image statistics) because random weights never write parseable JSON; the never-parsing checkpoint is the
real random model with a one-token generation budget.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import ImageFilter

from modeling_miescore.cli.main import main
from modeling_miescore.diagnostics import diagnose_checkpoint, format_report

MIESCORE_CHECKS = ["files", "config_processor", "token_ids", "vision_geometry", "chat_template", "pixel_budget",
                   "token_budget", "fresh_process", "load", "weights", "score_spread", "direction_source_as_edited",
                   "direction_noise", "direction_blur", "direction_swapped_sources", "throughput"]
SPATIALREWARD_SCORE_CHECKS = ["parse_rate", "boxes", "reward_spread"]


def run_cli(capsys, *args) -> tuple:
    code = main(["doctor", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def copy_checkpoint(source, target: Path) -> Path:
    shutil.copytree(source, target)
    return target


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2))


@pytest.fixture(scope="module")
def tiny_sr_path(tmp_path_factory):
    from modeling_miescore.testing import build_tiny_spatialreward

    return build_tiny_spatialreward(tmp_path_factory.mktemp("ckpt") / "tiny-spatialreward")


def test_healthy_tiny_miescore_has_no_error_and_reports_every_check(tiny_miescore_path, capsys):
    code, out, _ = run_cli(capsys, tiny_miescore_path, "--quick", "--json", "--device", "cpu")
    report = json.loads(out)
    assert code == report["exit_code"] and code in (0, 1)
    assert report["kind"] == "miescore" and report["device"] == "cpu" and report["dtype"] == "float32"
    assert [c["name"] for c in report["checks"]] == MIESCORE_CHECKS
    assert report["summary"]["error"] == 0 and sum(report["summary"].values()) == len(MIESCORE_CHECKS)
    assert report["verdict"] == ("warnings" if report["summary"]["warn"] else "healthy")
    checks = {c["name"]: c for c in report["checks"]}
    assert all({"name", "status", "message", "details", "seconds"} == c.keys() for c in report["checks"])
    # the fresh interpreter loaded the checkpoint's own code and agrees with the installed package
    assert checks["fresh_process"]["status"] == "ok"
    assert checks["fresh_process"]["details"]["blocked_imports"] == []
    assert checks["load"]["details"]["fresh_process_difference"] <= checks["load"]["details"]["tolerance"] == 1e-3
    # 4 sources at 1024 px: 5 x 1026 image tokens + the rubric > 4096 (training length)
    assert checks["token_budget"]["status"] == "warn"
    assert any(row["tokens"] > 4096 for row in checks["token_budget"]["details"]["rows"])
    spread = checks["score_spread"]["details"]
    assert spread["edits"] == 3 * 5  # 3 examples x (original + 4 perturbations)
    assert all(s["max"] - s["min"] > 0.05 for s in spread["scores"].values())
    assert checks["throughput"]["details"]["edits_per_second"] > 0


def zero_head(path: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(path / "model.safetensors")
    heads = [name for name in weights if name.startswith("head.")]
    assert heads
    for name in heads:
        weights[name] = weights[name].zero_()
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})


def test_zeroed_head_gives_constant_scores_and_is_broken(tiny_miescore_path, tmp_path, capsys):
    path = copy_checkpoint(tiny_miescore_path, tmp_path / "zeroed")
    zero_head(path)
    code, out, _ = run_cli(capsys, path, "--quick", "--skip-fresh-process", "--device", "cpu")
    assert code == 2
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith(("ok ", "WARN ", "ERROR ", "skip "))}
    assert lines["score_spread"].startswith("ERROR") and "constant (50 for all 15 edits)" in lines["score_spread"]
    assert lines["weights"].startswith("ERROR") and "all-zero" in lines["weights"]
    assert lines["fresh_process"].startswith("skip")
    assert "verdict: broken (exit 2)" in out


@pytest.mark.parametrize("fault", ["patch_size", "image_token_id"])
def test_mismatched_processor_is_broken_naming_the_consistency_check(tiny_miescore_path, tmp_path, fault):
    path = copy_checkpoint(tiny_miescore_path, tmp_path / fault)
    if fault == "patch_size":  # a processor made for 14-px patches (Qwen2-VL) beside a 16-px vision tower
        edit_json(path / "processor_config.json", lambda d: d["image_processor"].update(patch_size=14))
        expected = {"vision_geometry", "pixel_budget"}
    else:  # the config points at another token than the tokenizer's <|image_pad|>
        edit_json(path / "config.json", lambda d: d["backbone_config"].update(image_token_id=13))
        expected = {"token_ids"}
    report = diagnose_checkpoint(path, device="cpu", fresh_process=False, quick=True)
    assert report.exit_code == 2 and report.verdict == "broken"
    assert expected <= set(report.named("error"))
    checks = {c.name: c for c in report.checks}
    if fault == "patch_size":
        assert "patch_size 14 (processor) vs 16 (vision config)" in checks["vision_geometry"].message
    else:
        assert "config.image_token_id is 13 but the tokenizer's <|image_pad|> is 12" in checks["token_ids"].message
    assert {"files", "config_processor", "chat_template"} <= set(report.named("ok"))


def test_spatialreward_whose_generations_never_parse_is_broken(tiny_sr_path, tmp_path, capsys):
    path = copy_checkpoint(tiny_sr_path, tmp_path / "one-token")
    edit_json(path / "config.json", lambda d: d.update(max_new_tokens=1))
    code, out, _ = run_cli(capsys, path, "--quick", "--skip-fresh-process", "--json", "--device", "cpu")
    report = json.loads(out)
    assert code == 2 and report["verdict"] == "broken"
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["parse_rate"]["status"] == "error"
    assert checks["parse_rate"]["details"]["failed"] == checks["parse_rate"]["details"]["edits"] == 15
    assert checks["boxes"]["status"] == checks["reward_spread"]["status"] == "skip"
    assert checks["grounding_tokens"]["status"] == "ok"
    assert report["summary"]["error"] == 1  # everything before the answers is sound


def _gray(image) -> np.ndarray:
    return np.asarray(image.convert("L"), dtype=np.float32)


def scripted_judge(prompts, processor):
    """Valid D.1 answers computed from the images: s_if from how much the edited image differs from source 1,
    s_con from source 1's brightness, naturalness from sharpness, artifacts from speckle noise."""
    texts = []
    for images, _ in prompts:
        edited = images[-1]
        if len(images) > 1:
            source = _gray(images[0].resize(edited.size))
            s_if = min(25.0, float(np.abs(_gray(edited) - source).mean()) / 2)
            s_con = 5.0 + 15.0 * float(source.mean()) / 255
            answer = {"edit_region": [{"id": 0, "label": "edited area", "bbox_2d": [100, 150, 600, 800]}],
                      "reasoning": "<|bbox_0|> The region changed. <|global|> The rest is kept.",
                      "score": [round(s_if, 2), round(s_con, 2)]}
        else:
            noise = float(np.abs(_gray(edited) - _gray(edited.filter(ImageFilter.MedianFilter(3)))).mean())
            gy, gx = np.gradient(_gray(edited.filter(ImageFilter.GaussianBlur(1))))
            sharpness = float(np.hypot(gx, gy).mean())
            answer = {"reasoning": "Plausible lighting.",
                      "score": [round(min(25.0, 2.5 * sharpness), 2), round(max(0.0, 25.0 - noise), 2)]}
        texts.append([json.dumps(answer)])
    return texts


def test_healthy_spatialreward_has_no_error(tiny_sr_path, monkeypatch):
    from modeling_miescore.scoring.loading import load_spatialreward

    model = load_spatialreward(str(tiny_sr_path), device="cpu")
    monkeypatch.setattr(model, "_generate_texts", scripted_judge)
    report = diagnose_checkpoint(tiny_sr_path, device="cpu", fresh_process=False, quick=True, model=model)
    checks = {c.name: c for c in report.checks}
    assert report.named("error") == [] and report.exit_code in (0, 1)
    assert list(checks) == [*MIESCORE_CHECKS[:6], "grounding_tokens", *MIESCORE_CHECKS[6:10],
                            *SPATIALREWARD_SCORE_CHECKS, *MIESCORE_CHECKS[11:]]
    assert checks["load"].details["given_model"] is True
    assert checks["parse_rate"].status == "ok" and checks["parse_rate"].details["failed"] == 0
    assert checks["boxes"].status == "ok" and checks["boxes"].details["boxes"] == 15
    assert checks["reward_spread"].status == "ok"
    # the scripted judge reacts to the perturbations as a good judge should
    for name in ("direction_source_as_edited", "direction_noise", "direction_blur", "direction_swapped_sources"):
        assert checks[name].status == "ok", checks[name].message
    text = format_report(report)
    assert all(name in text for name in checks) and f"verdict: {report.verdict} (exit {report.exit_code})" in text


def test_user_errors_exit_2_with_one_line(tmp_path, capsys):
    code, out, err = run_cli(capsys, tmp_path / "missing")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "does not exist" in err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    code, out, err = run_cli(capsys, tmp_path / "other")
    assert code == 2 and "neither a MIEScore nor a SpatialReward checkpoint" in err
    assert len(err.strip().splitlines()) == 1
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(capsys, tmp_path / "empty")
    assert code == 2 and "has no config.json" in err
