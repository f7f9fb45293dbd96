"""``miescore edit`` and the trainer refuse what would make nonsense quietly (issue 31, MEDIUM): NUL bytes in an
instruction or an id, a garbage or NaN LoRA (black images with exit 0 before), a non-finite trained adapter, a
LoRA rank no layer can hold, an editor that cannot be loaded offline or a factory that fails."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from editor_rl_runs import toy_config
from modeling_miescore.cli.main import main as miescore
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.training.editor_rl.objective import TrainingDivergedError
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"


def _edit(toy_editor_path, rows, out, *extra) -> list:
    return ["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(rows), "--out", str(out),
            "--steps", "2", "--no-progress", *extra]


def _one_line_exit_2(argv, capsys, needle):
    assert miescore(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("field,value,needle", [
    ("instruction", "make it\x00 red", "instruction holds the chat-control token 'U+0000'"),
    ("id", "cat\x00red", "'id' 'cat\\x00red' holds the control character U+0000"),
    ("instruction", "make it red<|im_end|>", "instruction containing the chat-control token '<|im_end|>'"),
])
def test_edit_refuses_control_characters_in_an_instruction_or_id(toy_editor_path, editing_requests, tmp_path,
                                                                 capsys, field, value, needle):
    data = Path(shutil.copytree(editing_requests.parent, tmp_path / "data"))
    first, *rest = (data / editing_requests.name).read_text().splitlines()
    record = json.loads(first)
    record[field] = value
    (data / "rows.jsonl").write_text("\n".join([json.dumps(record), *rest]) + "\n")
    _one_line_exit_2(_edit(toy_editor_path, data / "rows.jsonl", tmp_path / "out"), capsys, needle)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def trained_lora(toy_editor_path, editing_requests, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora") / "run"
    torch.set_num_threads(1)
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=1)).train()
    return out


def _damaged_lora(trained_lora, folder, how) -> Path:
    from safetensors.torch import load_file, save_file

    folder.mkdir()
    path = folder / "pytorch_lora_weights.safetensors"
    shutil.copy(trained_lora / path.name, path)
    if how == "garbage":
        path.write_bytes(b"not a safetensors file" * 20)
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:-40])
    elif how == "nan":
        tensors = load_file(str(path))
        name = next(k for k in tensors if "lora_B" in k)
        tensors[name] = torch.full_like(tensors[name], float("nan"))
        save_file(tensors, str(path))
    elif how == "missing":
        path.unlink()
    return folder


@pytest.mark.parametrize("how,needle", [("garbage", "is not a readable safetensors adapter"),
                                        ("truncated", "is not a readable safetensors adapter"),
                                        ("nan", "holds non-finite values (NaN or inf) in 1 tensor(s)"),
                                        ("missing", "does not exist")])
def test_edit_refuses_a_garbage_or_nan_lora_before_loading_the_editor(toy_editor_path, editing_requests,
                                                                      trained_lora, tmp_path, capsys, how, needle):
    lora = _damaged_lora(trained_lora, tmp_path / "lora", how)
    _one_line_exit_2(_edit(toy_editor_path, editing_requests, tmp_path / "out", "--lora", str(lora)), capsys, needle)
    assert not (tmp_path / "out").exists()


def test_a_trained_adapter_that_is_not_finite_is_never_written(toy_editor_path, editing_requests, tmp_path):
    trainer = FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, tmp_path / "run", max_steps=1))
    trainer.train()
    (tmp_path / "run" / "pytorch_lora_weights.safetensors").unlink()
    with torch.no_grad():
        trainer.params[0].fill_(float("nan"))
    with pytest.raises(TrainingDivergedError, match="the trained LoRA holds non-finite values"):
        trainer.save_adapter()
    assert not (tmp_path / "run" / "pytorch_lora_weights.safetensors").exists()


def test_a_lora_rank_above_every_layer_is_refused(toy_editor_path, editing_requests, tmp_path):
    with pytest.raises(MIEScoreInputError, match=r"lora_rank 100000 is above the width of every targeted layer "
                                                  r".* use lora_rank <= \d+"):
        FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, tmp_path / "run", lora_rank=100000,
                                         max_steps=1)).train()


@pytest.mark.parametrize("editor,model,needle", [
    ("flux2-klein", "nobody/not-cached-editor", "model 'nobody/not-cached-editor' is not a folder here and could not be loaded from the Hub"),
    ("json:dumps", "x", "editor factory 'json:dumps' failed on model 'x': TypeError"),
    ("json:loads", "x", "editor factory 'json:loads' failed on model 'x'"),
])
def test_an_editor_that_cannot_be_loaded_is_one_line(toy_editor_path, editing_requests, tmp_path, capsys,
                                                     monkeypatch, editor, model, needle):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    argv = ["edit", "--pipeline", editor, "--model", model, "--input", str(editing_requests), "--out",
            str(tmp_path / "out"), "--no-progress"]
    _one_line_exit_2(argv, capsys, needle)
