"""Issue 22 item 14: a damaged checkpoint folder is one line naming the file and the fault, exit status 2, in
every command that loads one (``score``, ``spatialreward``, ``analyze-attention``, ``tokens``, ``doctor``), never
a traceback; the one validation layer is ``scoring.checkpoint_files`` (fixtures: ``corpus.bad_checkpoints``).
Item 12's load-time warning about non-finite weights is here too.
"""

from __future__ import annotations

import json

import pytest

from modeling_miescore.cli.main import main
from corpus.bad_checkpoints import BAD_CHECKPOINTS, make_bad_checkpoint

BY_NAME = {bad.name: bad for bad in BAD_CHECKPOINTS}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from PIL import Image

    folder = tmp_path_factory.mktemp("images")
    for name, colour in (("a.png", (200, 10, 10)), ("e.png", (10, 10, 200))):
        Image.new("RGB", (48, 40), colour).save(folder / name)
    return folder / "a.png", folder / "e.png"


def one_line_exit_2(capsys, argv, needle) -> str:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, (argv, out, err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert needle.lower() in lines[0].lower(), lines[0]
    return lines[0]


def test_every_damaged_miescore_checkpoint_is_one_line_in_score_and_tokens(tiny_miescore_path, tmp_path, images,
                                                                         capsys):
    for k, bad in enumerate(BAD_CHECKPOINTS):
        folder = make_bad_checkpoint(tiny_miescore_path, tmp_path / f"bad{k}", bad)
        line = one_line_exit_2(capsys, ["score", "--model", folder, "--source", images[0], "--edited", images[1],
                                        "--instruction", "make it blue", "--device", "cpu"], bad.needle)
        assert "miescore score: error:" in line
        if not bad.loads_weights:  # the config / processor faults: tokens reads those
            one_line_exit_2(capsys, ["tokens", "--model", folder, "--sources", "1", "--size", "64x64"], bad.needle)


def test_a_pickle_file_is_never_opened(tiny_miescore_path, tmp_path, monkeypatch):
    """Beside valid safetensors, a pytorch_model.bin is not read (torch.load would unpickle it)."""
    import torch

    from modeling_miescore.scoring.loading import load_scorer

    folder = make_bad_checkpoint(tiny_miescore_path, tmp_path / "both", BY_NAME["0-byte safetensors"])
    (folder / "model.safetensors").write_bytes((tiny_miescore_path / "model.safetensors").read_bytes())
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04K\x01.")
    monkeypatch.setattr(torch, "load", lambda *a, **k: pytest.fail("torch.load was called"))
    load_scorer(str(folder), device="cpu", dtype="float32")


@pytest.mark.parametrize("name", ["0-byte safetensors", "pickle-only pytorch_model.bin", "no chat template",
                                  "config.json a JSON list"])
def test_spatialreward_commands_refuse_damaged_checkpoints(tiny_spatialreward_path, tmp_path, images, capsys, name):
    bad = BY_NAME[name]
    folder = make_bad_checkpoint(tiny_spatialreward_path, tmp_path / "bad", bad)
    one_line_exit_2(capsys, ["spatialreward", "--model", folder, "--source", images[0], "--edited", images[1],
                             "--instruction", "make it blue", "--device", "cpu"], bad.needle)
    edits = tmp_path / "edits.jsonl"
    edits.write_text(json.dumps({"id": "x", "sources": [str(images[0])], "edited": str(images[1]),
                                 "instruction": "make it blue"}) + "\n")
    one_line_exit_2(capsys, ["analyze-attention", "--model", folder, "--input", edits, "--out", tmp_path / "out",
                             "--no-overlays", "--device", "cpu"], bad.needle)


def test_doctor_names_the_damaged_file_and_is_broken(tiny_miescore_path, tmp_path, capsys):
    folder = make_bad_checkpoint(tiny_miescore_path, tmp_path / "list", BY_NAME["config.json a JSON list"])
    one_line_exit_2(capsys, ["doctor", folder, "--quick", "--device", "cpu"], "is a json list")
    for name in ("truncated safetensors", "no tokenizer.json", "chat template escapes the Jinja sandbox"):
        bad = BY_NAME[name]
        folder = make_bad_checkpoint(tiny_miescore_path, tmp_path / "bad", bad)
        code = main(["doctor", str(folder), "--quick", "--device", "cpu", "--json"])
        out, err = capsys.readouterr()
        report = json.loads(out)
        checks = {c["name"]: c for c in report["checks"]}
        assert code == 2 and "Traceback" not in err
        faulty = checks["config_processor" if name.startswith("chat template") else "files"]
        assert faulty["status"] == "error" and bad.needle.lower() in faulty["message"].lower(), faulty
        assert report["summary"]["error"] == 1, [c["name"] for c in report["checks"] if c["status"] == "error"]


def test_loading_warns_about_non_finite_weights(tiny_miescore_path, tmp_path, capsys):
    import shutil

    from safetensors.torch import load_file, save_file

    from modeling_miescore.scoring.loading import load_scorer

    folder = tmp_path / "nan"
    shutil.copytree(tiny_miescore_path, folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["head.out_proj.weight"][0, 0] = float("nan")
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    load_scorer(str(folder), device="cpu", dtype="float32")
    err = capsys.readouterr().err
    assert "1 weight tensor(s)" in err and "head.out_proj.weight" in err and "NaN or Inf" in err
    load_scorer(str(tiny_miescore_path), device="cpu", dtype="float32")
    assert "NaN" not in capsys.readouterr().err


def test_a_fifo_or_device_in_a_checkpoint_never_blocks_validation(tiny_miescore_path, tmp_path):
    """Every loader validates through checkpoint_files: a FIFO weight file (safe_open would block) or a
    tokenizer_config.json that is a FIFO / /dev/zero (read whole while looking for a chat template) is named or
    skipped, never opened."""
    import os
    import shutil

    from modeling_miescore.scoring.checkpoint_files import ModelLoadError, check_tokenizer_files, check_weight_files

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_miescore_path, folder)
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")
    with pytest.raises(ModelLoadError, match="is not a regular file"):
        check_weight_files(folder)
    (folder / "chat_template.jinja").unlink()  # the template is then looked for in the configs
    for make in (lambda p: os.mkfifo(p), lambda p: p.symlink_to("/dev/zero")):
        (folder / "tokenizer_config.json").unlink()
        make(folder / "tokenizer_config.json")
        with pytest.raises(ModelLoadError, match="no chat template"):
            check_tokenizer_files(folder)
