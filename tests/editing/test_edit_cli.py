"""``miescore edit``: edits from an editor (+ a LoRA) in the score-batch format, resumable, scored by
``miescore score-batch``; its bad inputs exit 2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from modeling_miescore.cli.main import main
from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS

pytestmark = pytest.mark.usefixtures("single_thread")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"


def _klein_lora(tiny_editor_path, folder):
    """A LoRA for the tiny Flux2-Klein with non-zero weights, saved the way the trainer saves it."""
    import torch

    from modeling_miescore.training.editor_rl.editors import load_editor
    from modeling_miescore.training.editor_rl.policy import add_lora, lora_metadata, lora_state_dict

    editor = load_editor("flux2-klein", str(tiny_editor_path("flux2-klein")), options=TINY_EDITOR_OPTIONS["flux2-klein"])
    add_lora(editor.transformer, rank=4, alpha=8, targets=editor.lora_targets)
    with torch.no_grad():
        for name, param in editor.transformer.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    editor.save_lora(folder, lora_state_dict(editor.transformer), lora_metadata(editor.transformer))
    return folder


def test_edits_with_a_lora_are_scored_by_score_batch(tiny_editor_path, editing_requests, tiny_miescore_path,
                                                     tiny_miescore, tmp_path, capsys):
    lora = _klein_lora(tiny_editor_path, tmp_path / "lora")
    options = json.dumps(TINY_EDITOR_OPTIONS["flux2-klein"])
    base = ["edit", "--pipeline", "flux2-klein", "--model", str(tiny_editor_path("flux2-klein")), "--input",
            str(editing_requests), "--editor-options", options, "--steps", "3", "--num-images", "2", "--limit", "2",
            "--no-progress"]
    assert main(base + ["--out", str(tmp_path / "with"), "--lora", str(lora)]) == 0
    assert main(base + ["--out", str(tmp_path / "without")]) == 0
    lines = [json.loads(x) for x in (tmp_path / "with" / "edits.jsonl").read_text().splitlines()]
    assert [x["id"] for x in lines] == ["cat-red#0", "cat-red#1", "coffee-cat#0", "coffee-cat#1"]
    assert [(x["key"], x["sample"]) for x in lines] == [("cat-red", 0), ("cat-red", 1), ("coffee-cat", 0),
                                                         ("coffee-cat", 1)]
    first = lines[2]
    assert len(first["sources"]) == 2 and first["instruction"].startswith("Put the cat")
    assert all((tmp_path / "with" / p).is_file() for x in lines for p in [*x["sources"], x["edited"]])
    with_lora = np.asarray(Image.open(tmp_path / "with" / lines[0]["edited"]))
    without = np.asarray(Image.open(tmp_path / "without" / lines[0]["edited"]))
    assert with_lora.shape == (32, 32, 3) and not np.array_equal(with_lora, without)  # the LoRA was applied
    capsys.readouterr()
    assert main(base + ["--out", str(tmp_path / "with"), "--lora", str(lora)]) == 0  # resumes: nothing to do
    err = capsys.readouterr().err
    assert "wrote 0 edit(s)" in err and "(4 already there)" in err  # a rerun resumes: nothing left to do
    preds = tmp_path / "preds.jsonl"
    assert main(["score-batch", "--model", str(tiny_miescore_path), "--input", str(tmp_path / "with" / "edits.jsonl"),
                 "--output", str(preds), "--device", "cpu", "--no-progress"]) == 0
    scored = {x["id"]: x for x in map(json.loads, preds.read_text().splitlines())}
    assert sorted(scored) == sorted(x["id"] for x in lines)
    # the scores are those of the edit's own files (paths relative to edits.jsonl: the sources, then the edit)
    folder = tmp_path / "with"
    samples = [{"sources": [str(folder / p) for p in x["sources"]], "edited": str(folder / x["edited"]),
                "instruction": x["instruction"]} for x in lines]
    reference = tiny_miescore.score_batch(samples, batch_size=2, reuse_prefix=False)
    assert [scored[x["id"]]["overall"] for x in lines] == pytest.approx([r["overall"] for r in reference], abs=1e-3)


def test_a_torn_last_line_is_cut_and_redone(toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "out"
    args = ["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(editing_requests), "--out",
            str(out), "--steps", "2", "--no-progress"]
    assert main(args) == 0
    jsonl = out / "edits.jsonl"
    full = jsonl.read_text()
    jsonl.write_text(full[:-20])  # a kill in the middle of the last line
    assert main(args) == 0
    assert jsonl.read_text() == full  # the same edit again (seeded by the request id)


@pytest.mark.parametrize("extra,message", [
    (["--pipeline", "nope"], "unknown editor 'nope'"),
    (["--lora", "/nonexistent"], "pytorch_lora_weights.safetensors' does not exist"),
    (["--editor-options", "{bad"], "--editor-options is not JSON"),
])
def test_bad_edit_arguments_exit_2(toy_editor_path, editing_requests, tmp_path, capsys, extra, message):
    args = ["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(editing_requests), "--out",
            str(tmp_path / "out"), "--no-progress", *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out" / "edits.jsonl").exists()


def test_missing_source_exits_2(toy_editor_path, tmp_path, capsys):
    rows = tmp_path / "rows.jsonl"
    rows.write_text(json.dumps({"sources": ["gone.png"], "instruction": "x"}) + "\n")
    assert main(["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(rows), "--out",
                 str(tmp_path / "out")]) == 2
    assert "rows.jsonl:1: source 1 'gone.png' does not exist" in capsys.readouterr().err
