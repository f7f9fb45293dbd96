"""A damaged run folder on ``--resume`` is one line naming the file (issue 31, MEDIUM: 20 kinds of damage gave
tracebacks or resumed at step -4), nothing of the folder is changed, and a full disk while a checkpoint is written
stops the run cleanly, after which ``--resume`` gives the uninterrupted result."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from editor_rl_runs import run_recipe, toy_config
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")
CKPT = "checkpoint-2"


@pytest.fixture(scope="module")
def finished_run(toy_editor_path, editing_requests, tmp_path_factory):
    """A 2-step run with a checkpoint after each step (resumed below with max_steps 3)."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("damage") / "run"
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=2, save_steps=1)).train()
    return out


def _write_json(value):
    return lambda path: path.write_text(json.dumps(value))


def _edit_json(edit):
    def apply(path):
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return apply


def _edit_tensors(edit):
    def apply(path):
        tensors = load_file(str(path))
        save_file(edit(tensors), str(path))
    return apply


def _pop_one(tensors):
    tensors.pop(sorted(tensors)[0])
    return tensors


def _nan_one(tensors):
    name = sorted(tensors)[0]
    tensors[name] = torch.full_like(tensors[name], float("nan"))
    return tensors


def _widen(tensors):
    name = sorted(tensors)[0]
    tensors[name] = torch.zeros(*tensors[name].shape[:-1], tensors[name].shape[-1] + 1)
    return tensors


def _truncate(path):
    path.write_bytes(path.read_bytes()[:-10])


def _remove(path):
    path.unlink()


def _folder(path):
    path.unlink()
    path.mkdir()


def _symlinked_from_elsewhere(path):
    """checkpoint-2 replaced by a link to a copy of it in another run folder."""
    other = path.parent.parent / "other-run" / CKPT
    shutil.rmtree(other.parent, ignore_errors=True)
    shutil.copytree(path, other)
    shutil.rmtree(path)
    os.symlink(other, path)


DAMAGE = [  # (file, how, what the line says)
    ("run.json", lambda p: p.write_text("{not json"), "run.json' is not readable JSON"),
    ("run.json", lambda p: p.write_text(""), "run.json' is not readable JSON"),
    ("run.json", _write_json([1, 2]), "run.json' holds a JSON list, not the run's identity"),
    (f"{CKPT}/trainer_state.json", lambda p: p.write_text("garbage"), "trainer_state.json' is not readable JSON"),
    (f"{CKPT}/trainer_state.json", _edit_json(lambda d: d.pop("step")), "says step None, but its folder is "
                                                                        "checkpoint-2"),
    (f"{CKPT}/trainer_state.json", _edit_json(lambda d: d.update(step=-4)), "says step -4, but its folder"),
    (f"{CKPT}/trainer_state.json", _edit_json(lambda d: d.update(python_rng=[3, [1, 2], None])),
     "holds no valid Python RNG state"),
    (f"{CKPT}/trainer_state.json", _edit_json(lambda d: d.update(numpy_rng="MT19937")),
     "holds no valid NumPy RNG state"),
    (f"{CKPT}/trainer_state.json", _edit_json(lambda d: d.update(lr_scheduler=[1])),
     "holds no learning-rate scheduler state"),
    (f"{CKPT}/rng-0.safetensors", lambda p: p.write_bytes(b"\x00" * 64), "rng-0.safetensors' is not a readable "
                                                                          "safetensors file"),
    (f"{CKPT}/rng-0.safetensors", _edit_tensors(lambda t: {"torch": torch.zeros(3)}),
     "rng-0.safetensors' does not hold a usable torch RNG state"),
    (f"{CKPT}/trainable.safetensors", _truncate, "trainable.safetensors' is not a readable safetensors file"),
    (f"{CKPT}/trainable.safetensors", lambda p: p.write_bytes(b""), "trainable.safetensors' is not a readable"),
    (f"{CKPT}/trainable.safetensors", _remove, "trainable.safetensors' is missing"),
    (f"{CKPT}/trainable.safetensors", lambda p: p.write_bytes(pickle.dumps({"w": [1.0]})),
     "(nothing of it was unpickled)"),
    (f"{CKPT}/trainable.safetensors", _edit_tensors(_widen), "trainable.safetensors' holds tensors of another shape"),
    (f"{CKPT}/trainable.safetensors", _edit_tensors(_pop_one), "trainable.safetensors' lacks 1 of this run's"),
    (f"{CKPT}/trainable.safetensors", _edit_tensors(_nan_one), "holds non-finite values (NaN or inf)"),
    (f"{CKPT}/optimizer.safetensors", _remove, "optimizer.safetensors' is missing"),
    (f"{CKPT}/optimizer.safetensors", lambda p: p.write_bytes(b"garbage!" * 10), "optimizer.safetensors' is not a "
                                                                                 "readable safetensors file"),
    (f"{CKPT}/optimizer.safetensors", _edit_tensors(_pop_one), "optimizer.safetensors' does not hold a usable "
                                                               "optimizer state"),
    (f"{CKPT}/optimizer.json", _remove, "optimizer.json' is missing"),
    (f"{CKPT}/optimizer.json", lambda p: p.write_text("[]"), "optimizer.json' holds a JSON list"),
    (CKPT, _symlinked_from_elsewhere, "belongs to another folder"),
    ("metrics.jsonl", _folder, "metrics.jsonl' is not a file"),
]


def _hashes(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "-"
            for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("target,damage,message", DAMAGE, ids=[f"{t}:{m[:30]}" for t, _, m in DAMAGE])
def test_damage_is_one_line_naming_the_file(finished_run, toy_editor_path, editing_requests, tmp_path, target,
                                            damage, message):
    out = Path(shutil.copytree(finished_run, tmp_path / "run", symlinks=True))
    damage(out / target)
    before = _hashes(out)
    with pytest.raises(MIEScoreInputError) as caught:
        FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=3, save_steps=1,
                                         resume=True)).train()
    text = str(caught.value)
    assert message in text and "\n" not in text and "--resume: '" in text, text
    assert _hashes(out) == before  # nothing was changed, nothing half-written


def test_the_recipe_exits_2_on_a_damaged_checkpoint(finished_run, toy_editor_path, editing_requests, tmp_path,
                                                    capsys):
    out = Path(shutil.copytree(finished_run, tmp_path / "run"))
    (out / CKPT / "trainer_state.json").write_text("{")
    assert run_recipe(toy_config(toy_editor_path, editing_requests, out, max_steps=3, resume=True)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("flow_grpo_editor: error: --resume:") and f"remove the folder '{out / CKPT}'" in err


def test_damaged_metrics_lines_are_dropped_and_the_run_resumes(finished_run, toy_editor_path, editing_requests,
                                                               tmp_path):
    out = Path(shutil.copytree(finished_run, tmp_path / "run"))
    good = (out / "metrics.jsonl").read_text()
    (out / "metrics.jsonl").write_text(good + '[1, 2]\n{"step": "x"}\n{"step": 99}\nnot json\n')
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=3, save_steps=1,
                                     resume=True)).train()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]


def test_a_full_disk_during_a_checkpoint_stops_cleanly_and_resume_finishes_the_run(toy_editor_path,
                                                                                     editing_requests, tmp_path,
                                                                                     monkeypatch):
    import safetensors.torch

    from modeling_miescore.training.editor_rl.checkpoints import RunWriteError

    full = tmp_path / "full"
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, full, max_steps=4, save_steps=2)).train()
    out = tmp_path / "run"
    real_save = safetensors.torch.save_file

    def save_file(tensors, filename, *args, **kwargs):
        if "checkpoint-4" in filename and "optimizer" in filename:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real_save(tensors, filename, *args, **kwargs)

    monkeypatch.setattr(safetensors.torch, "save_file", save_file)
    with pytest.raises(RunWriteError, match=r"cannot write checkpoint-4 \(No space left on device\); the last "
                                            r"complete checkpoint is 'checkpoint-2'.*rerun with --resume"):
        FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=4, save_steps=2)).train()
    assert sorted(p.name for p in out.iterdir() if "checkpoint" in p.name) == ["checkpoint-2"]  # no partial folder
    monkeypatch.setattr(safetensors.torch, "save_file", real_save)
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=4, save_steps=2,
                                     resume=True)).train()
    a, b = (load_file(str(d / "pytorch_lora_weights.safetensors")) for d in (full, out))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_full_disk_is_exit_1_from_the_recipe(toy_editor_path, editing_requests, tmp_path, monkeypatch, capsys):
    from modeling_miescore.training.editor_rl import outputs

    def no_space(self, record):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outputs.MetricsLog, "write", no_space)
    assert run_recipe(toy_config(toy_editor_path, editing_requests, tmp_path / "run", max_steps=1)) == 1
    err = capsys.readouterr().err.strip()
    assert err == ("flow_grpo_editor: stopped: cannot write metrics.jsonl (step 1) (No space left on device); no "
                   "checkpoint was written yet: free some space (or fix the folder's permissions), then rerun with "
                   "--resume")


def test_a_resume_with_other_training_settings_is_refused_with_every_difference(finished_run, toy_editor_path,
                                                                                 editing_requests, tmp_path):
    out = Path(shutil.copytree(finished_run, tmp_path / "run"))
    changed = dict(learning_rate=5e-3, beta=0.5, noise_level=0.5, clip_range_high=0.2,
                   editor_options={"height": 8})
    with pytest.raises(MIEScoreInputError) as caught:
        FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=3, resume=True,
                                         **changed)).train()
    text = str(caught.value)
    assert "belongs to another run (5 setting(s) differ: beta: 0.0 there, 0.5 now; clip_range_high" in text
    assert all(f"{name}:" in text for name in changed) and "learning_rate: 0.01 there, 0.005 now" in text


def test_a_resume_may_change_how_long_and_how_it_runs_and_run_json_records_it(finished_run, toy_editor_path,
                                                                              editing_requests, tmp_path):
    out = Path(shutil.copytree(finished_run, tmp_path / "run"))
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, max_steps=3, save_steps=3,
                                     reward_timeout=60.0, resume=True)).train()
    record = json.loads((out / "run.json").read_text())
    assert record["resumes"] == [{"step": 2, "changed": {"reward_timeout": [1800.0, 60.0], "max_steps": [2, 3],
                                                         "save_steps": [1, 3]}}]
    assert record["settings"]["max_steps"] == 3 and record["learning_rate"] == 0.01
