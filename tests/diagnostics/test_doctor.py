"""`miescore doctor`: healthy tiny checkpoints have no error; broken ones are found by the check that names the fault.

What is asserted for the tiny MIEScore checkpoint (run on a tampered copy: issue 22 item 1, nothing from the folder
may run unless --trust-remote-code): no error (exit 0 or 1, never 2). Its random weights miss some expected
directions, so "warnings" (exit 1) is the honest verdict; the test checks that every check is reported by name,
including the four direction checks. Its paper pixel budget puts 3-4 sources at 1024 px over the 4,096-token
training length: information, not a warning (issue 27 item 3); with a scorer that reacts to its inputs as a good
one does (`scripted_scorer`) the same paper-config checkpoint is healthy, exit 0.
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


@pytest.fixture(scope="module")
def tampered_miescore(tiny_miescore_path, tmp_path_factory):
    from corpus.tampered_checkpoint import tamper_checkpoint

    return tamper_checkpoint(tiny_miescore_path, tmp_path_factory.mktemp("tampered") / "miescore")


def test_tiny_miescore_has_no_error_reports_every_check_and_runs_no_checkpoint_code(tampered_miescore, capsys):
    tampered_miescore.reset()
    code, out, _ = run_cli(capsys, tampered_miescore.path, "--quick", "--json", "--device", "cpu")
    assert tampered_miescore.code_ran() == []  # neither the planted configuration line nor evil_proc.py ran
    report = json.loads(out)
    assert code == report["exit_code"] and code in (0, 1)
    assert report["kind"] == "miescore" and report["device"] == "cpu" and report["dtype"] == "float32"
    assert [c["name"] for c in report["checks"]] == MIESCORE_CHECKS
    assert report["summary"]["error"] == 0 and sum(report["summary"].values()) == len(MIESCORE_CHECKS)
    assert report["verdict"] == ("warnings" if report["summary"]["warn"] else "healthy")
    checks = {c["name"]: c for c in report["checks"]}
    assert all({"name", "status", "message", "details", "seconds"} == c.keys() for c in report["checks"])
    # the planted code is named: the changed configuration file and the processor's auto_map entries
    assert checks["files"]["status"] == "warn" and "configuration_miescore.py" in checks["files"]["message"]
    assert "evil_proc.EvilProcessor" in checks["files"]["message"]
    # the fresh interpreter loaded it through the installed package and agrees with this process
    fresh = checks["fresh_process"]
    assert fresh["status"] == "ok" and fresh["details"]["trust_remote_code"] is False
    assert fresh["details"]["checkpoint_modules"] == [] and "were not run" in fresh["message"]
    assert checks["load"]["details"]["fresh_process_difference"] <= checks["load"]["details"]["tolerance"] == 1e-3
    assert "its scores equal the fresh process's" in checks["load"]["message"]
    # 4 sources at 1024 px: 5 x 1026 image tokens + the rubric > 4096 (training length): information, not a warning
    budget = checks["token_budget"]
    assert budget["status"] == "ok" and budget["details"]["training_length"] == 4096
    assert any(row["tokens"] > 4096 for row in budget["details"]["rows"])
    assert "training shrinks their images to fit" in budget["message"] and "scoring does not" in budget["message"]
    spread = checks["score_spread"]["details"]
    assert spread["edits"] == 3 * 5  # 3 examples x (original + 4 perturbations)
    assert all(s["max"] - s["min"] > 0.05 for s in spread["scores"].values())
    assert checks["throughput"]["details"]["edits_per_second"] > 0


def test_trust_remote_code_runs_the_strangers_load_and_names_the_code_files(tampered_miescore, monkeypatch):
    """Only --trust-remote-code asks for the stranger's view (the package-less, trust_remote_code load), and the
    finding names the files it ran with their sha256. The child is replaced by a stand-in here (the real one:
    the slow test below and test_hub_boundary)."""
    import hashlib

    import torch

    from modeling_miescore.diagnostics import isolated_load
    from modeling_miescore.diagnostics.doctor import DoctorContext, check_fresh_process

    calls = []

    def stranger(jobs):
        calls.append("trust_remote_code")
        return {"results": [{"classes": {"AutoModel": "transformers_modules.miescore.modeling_miescore.MIEScoreModel"},
                             "scores": []}], "loaded": []}

    def installed(jobs):
        calls.append("installed package")
        return {"results": [{"classes": {"installed": "modeling_miescore.hub.modeling_miescore.MIEScoreModel"},
                             "scores": []}], "checkpoint_modules": []}

    monkeypatch.setattr(isolated_load, "load_and_score_without_package", stranger)
    monkeypatch.setattr(isolated_load, "load_and_score_with_package", installed)
    findings = {}
    for trust in (False, True):
        ctx = DoctorContext(tampered_miescore.path, "miescore", "cpu", torch.float32, quick=True,
                            trust_remote_code=trust)
        try:
            findings[trust] = check_fresh_process(ctx)
        finally:
            ctx.close()
    assert calls == ["installed package", "trust_remote_code"]
    digest = hashlib.sha256((tampered_miescore.path / "configuration_miescore.py").read_bytes()).hexdigest()
    for finding in findings.values():
        assert finding.status == "ok" and {"file": "configuration_miescore.py", "sha256": digest} in \
            finding.details["remote_code"]
    assert "ran the checkpoint's code: " in findings[True].message
    assert f"configuration_miescore.py (sha256 {digest[:12]}...)" in findings[True].message
    assert "were not run" in findings[False].message and "sha256" not in findings[False].message
    assert "evil_proc.py" not in findings[True].message  # the processor's auto_map is never run, even then


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["miescore", "spatialreward"])
def test_doctor_runs_a_tampered_checkpoints_code_only_with_trust_remote_code(kind, tiny_miescore_path, tiny_sr_path,
                                                                          tmp_path, capsys):
    """The real fresh interpreter, both models: `doctor --quick` runs none of the planted code, `doctor --quick
    --trust-remote-code` runs the checkpoint's configuration file (and still not the processor's evil_proc.py)."""
    from corpus.tampered_checkpoint import tamper_checkpoint

    tampered = tamper_checkpoint(tiny_miescore_path if kind == "miescore" else tiny_sr_path, tmp_path / kind)
    run_cli(capsys, tampered.path, "--quick", "--json", "--device", "cpu")
    assert tampered.code_ran() == []
    code, out, _ = run_cli(capsys, tampered.path, "--quick", "--json", "--device", "cpu", "--trust-remote-code")
    assert tampered.code_ran() == ["MODEL_CODE_RAN"]
    fresh = {c["name"]: c for c in json.loads(out)["checks"]}["fresh_process"]
    assert fresh["status"] == "ok" and fresh["details"]["trust_remote_code"] is True
    assert f"configuration_{kind}.py (sha256" in fresh["message"]


def scripted_scorer(samples, batch_size=8, **_):
    """MIEScore scores computed from the images as a good scorer reacts: visual quality from sharpness and
    speckle noise, instruction following from how much the edited image differs from source 1, attribute
    preservation from source 1's brightness (so swapping the sources moves it)."""
    results = []
    for sample in samples:
        edited, first = sample["edited"], sample["sources"][0]
        noise = float(np.abs(_gray(edited) - _gray(edited.filter(ImageFilter.MedianFilter(3)))).mean())
        gy, gx = np.gradient(_gray(edited.filter(ImageFilter.GaussianBlur(1))))
        vq = float(np.clip(40 + 4 * float(np.hypot(gx, gy).mean()) - 2 * noise, 5, 95))
        instruction = float(np.clip(20 + np.abs(_gray(edited) - _gray(first.resize(edited.size))).mean(), 5, 95))
        ap = 20 + 60 * float(_gray(first).mean()) / 255
        results.append({"visual_quality": vq, "instruction_following": instruction, "attribute_preservation": ap,
                        "overall": vq**0.3 * instruction**0.4 * ap**0.3})
    return results


def test_a_paper_config_checkpoint_can_be_healthy(tiny_miescore_path, tiny_miescore, monkeypatch):
    """The tiny checkpoint has the paper's pixel budget (max_pixels 1,048,576; typical inputs over 4,096 tokens):
    with a scorer that reacts to its inputs, nothing is left to warn about and the doctor ends healthy."""
    assert tiny_miescore.config.max_pixels == 1_048_576
    monkeypatch.setattr(tiny_miescore, "score_batch", scripted_scorer)
    report = diagnose_checkpoint(tiny_miescore_path, device="cpu", fresh_process=False, quick=True,
                                 model=tiny_miescore)
    statuses = {c.name: c.status for c in report.checks}
    assert report.verdict == "healthy" and report.exit_code == 0, format_report(report)
    assert statuses["fresh_process"] == "skip" and report.count("warn") == report.count("error") == 0


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
    # the broken head is reported once: the four direction checks do not repeat it as warnings
    for name in ("direction_source_as_edited", "direction_noise", "direction_blur", "direction_swapped_sources"):
        assert lines[name].startswith("skip") and "not meaningful after the error of 'weights'" in lines[name]
    assert "verdict: broken (exit 2)" in out and " 0 warn" in out


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
    """On a tampered copy: the in-process checks run none of its code (issue 22 item 1; the fresh process on a
    tampered SpatialReward checkpoint: the slow test above)."""
    from corpus.tampered_checkpoint import tamper_checkpoint

    tampered = tamper_checkpoint(tiny_sr_path, tmp_path / "one-token")
    edit_json(tampered.path / "config.json", lambda d: d.update(max_new_tokens=1))
    code, out, _ = run_cli(capsys, tampered.path, "--quick", "--skip-fresh-process", "--json", "--device", "cpu")
    assert tampered.code_ran() == []
    report = json.loads(out)
    assert code == 2 and report["verdict"] == "broken"
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["parse_rate"]["status"] == "error"
    assert checks["parse_rate"]["details"]["failed"] == checks["parse_rate"]["details"]["edits"] == 15
    assert checks["boxes"]["status"] == checks["reward_spread"]["status"] == "skip"
    assert all(checks[name]["status"] == "skip" for name in checks if name.startswith("direction_"))
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
    (tmp_path / "weights.safetensors").write_bytes(b"")
    code, _, err = run_cli(capsys, tmp_path / "weights.safetensors")  # issue 22 item 13: a file, not "missing"
    assert code == 2 and "is a file, not a checkpoint folder" in err and "does not exist" not in err


def test_a_relative_path_is_a_local_folder_not_a_hub_id(tiny_miescore_path, tmp_path, monkeypatch):
    """Issue 22 item 13: `doctor ckpt/mie` from the folder above. The fresh interpreter runs in another folder,
    where "ckpt/mie" would read as a Hub repo id: it is handed the absolute folder."""
    from modeling_miescore.diagnostics import doctor, isolated_load
    from modeling_miescore.diagnostics.doctor import check_fresh_process

    copy_checkpoint(tiny_miescore_path, tmp_path / "ckpt" / "mie")
    monkeypatch.chdir(tmp_path)
    handed = []

    def fake_child(jobs):
        handed.extend(job.path for job in jobs)
        raise isolated_load.IsolatedRunError("stopped here")

    monkeypatch.setattr(isolated_load, "load_and_score_with_package", fake_child)
    monkeypatch.setattr(doctor, "_checks", lambda kind: [("fresh_process", check_fresh_process)])
    report = diagnose_checkpoint("ckpt/mie", device="cpu", quick=True)
    assert report.kind == "miescore" and report.checkpoint == "ckpt/mie"
    assert handed == [str(tmp_path / "ckpt" / "mie")]
