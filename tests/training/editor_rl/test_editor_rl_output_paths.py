"""The trainer and ``miescore edit`` never write into their inputs (issue 31, HIGH 1): an output folder equal to,
inside or holding the dataset, the editor's model or another input (spelt ``dir/../dir``, through a symbolic link,
run twice, with ``--overwrite_output_dir`` or ``finetuning: full``) is refused with exit 2 and every input is left
byte-identical; an output folder that cannot be written is one line too."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from editor_rl_runs import recipe_cli, toy_config, write_run_yaml
from modeling_miescore.cli.main import main as miescore
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"


def tree_hashes(*folders) -> dict:
    """sha256 of every file under ``folders`` (and the list of names): what "byte-identical" compares."""
    out = {}
    for folder in folders:
        for path in sorted(Path(folder).rglob("*")):
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return out


@pytest.fixture
def inputs(toy_editor_path, editing_requests, tmp_path):
    """Own copies of the toy editor and the requests (with a dataset card), so a regression harms only them."""
    model = Path(shutil.copytree(toy_editor_path, tmp_path / "models" / "model"))
    data = Path(shutil.copytree(editing_requests.parent, tmp_path / "data"))
    (data / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# the dataset's own card\n")
    return model, data / editing_requests.name


def _refused(config, needle: str) -> None:
    with pytest.raises(MIEScoreInputError, match=needle):
        FlowGRPOEditorTrainer(config).train()


@pytest.mark.parametrize("spelling", ["plain", "dotdot", "symlink"])
def test_the_trainer_refuses_an_output_folder_holding_its_dataset(inputs, tmp_path, spelling):
    model, rows = inputs
    data = rows.parent
    out = {"plain": data, "dotdot": data / ".." / data.name, "symlink": tmp_path / "link"}[spelling]
    if spelling == "symlink":
        os.symlink(data, out)
    before = tree_hashes(data, model)
    for overwrite in (False, True):  # twice, the second time with --overwrite_output_dir
        _refused(toy_config(model, rows, out, max_steps=1, overwrite_output_dir=overwrite),
                 r"output_dir '.*' contains dataset '.*rows.jsonl'")
    assert tree_hashes(data, model) == before


@pytest.mark.parametrize("finetuning", ["lora", "full"])
def test_the_trainer_never_writes_into_the_editors_model_folder(inputs, tmp_path, finetuning):
    model, rows = inputs
    before = tree_hashes(model, rows.parent)
    for out in (model, model / "runs" / "a", model / "."):
        for overwrite in (False, True):
            _refused(toy_config(model, rows, out, max_steps=1, finetuning=finetuning, overwrite_output_dir=overwrite),
                     r"output_dir '.*' (is|lies inside) model_name_or_path \(the editor\)")
    # the parent of the model folder holds it: replacing the output would take the model with it
    _refused(toy_config(model, rows, model.parent, max_steps=1), "contains model_name_or_path")
    assert tree_hashes(model, rows.parent) == before


def test_the_trainer_refuses_an_output_folder_holding_a_source_image(inputs, tmp_path):
    model, rows = inputs
    out = tmp_path / "run"
    out.mkdir()
    moved = rows.read_text().replace('"cat-red-0.png"', f'"{out / "mine.png"}"')
    shutil.copy(rows.parent / "cat-red-0.png", out / "mine.png")
    (rows.parent / "rows2.jsonl").write_text(moved)
    _refused(toy_config(model, rows.parent / "rows2.jsonl", out, max_steps=1),
             r"output_dir '.*' contains source 1 of request 'cat-red'")


def test_the_recipe_exits_2_and_leaves_the_inputs_intact(inputs, tmp_path, capsys):
    model, rows = inputs
    before = tree_hashes(model, rows.parent)
    config = toy_config(model, rows, rows.parent, max_steps=1, finetuning="full", overwrite_output_dir=True)
    assert recipe_cli("--config", write_run_yaml(tmp_path / "c.yaml", config)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flow_grpo_editor: error: output_dir") and "\n" not in err
    assert tree_hashes(model, rows.parent) == before


@pytest.mark.parametrize("case", ["a file", "under a file", "in /proc", "read-only"])
def test_an_output_folder_that_cannot_be_written_is_one_line(inputs, tmp_path, case):
    model, rows = inputs
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir()
    out = {"a file": blocker, "under a file": blocker / "run", "in /proc": Path("/proc/self/rl-run"),
           "read-only": locked}[case]
    if case == "read-only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        locked.chmod(0o555)
    try:
        _refused(toy_config(model, rows, out, max_steps=1), r"output_dir.*(is a file|cannot create|not writable)")
    finally:
        locked.chmod(0o755)
    assert blocker.read_text() == "x" and not list(locked.iterdir())


def test_edit_refuses_to_append_to_its_own_input_or_write_into_the_model(inputs, tmp_path, capsys):
    model, rows = inputs
    out = tmp_path / "edits"
    base = ["edit", "--pipeline", TOY, "--model", str(model), "--steps", "2", "--no-progress"]
    assert miescore(base + ["--input", str(rows), "--out", str(out), "--limit", "1"]) == 0
    before = tree_hashes(out, model, rows.parent)
    capsys.readouterr()
    for argv in (["--input", str(out / "edits.jsonl"), "--out", str(out)],          # its own edits.jsonl
                 ["--input", str(out / "edits.jsonl"), "--out", str(out / ".." / out.name)],
                 ["--input", str(rows), "--out", str(model)],                        # into the model folder
                 ["--input", str(rows), "--out", str(rows.parent)]):                 # the folder holding --input
        assert miescore(base + argv) == 2
        err = capsys.readouterr().err.strip()
        assert "--out" in err and "\n" not in err and "Traceback" not in err, err
    assert tree_hashes(out, model, rows.parent) == before
