"""A resume checks its checkpoint's files once before anything loads (``check_run_folder``), then reads them once
to restore (``load_checkpoint``): the main process no longer repeats the up-front check when it claims the
folder."""

from __future__ import annotations

from unittest import mock

import pytest

from editor_rl_runs import toy_config
from modeling_miescore.training.editor_rl import checkpoints
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer


@pytest.mark.usefixtures("single_thread")
def test_a_resume_checks_its_checkpoint_files_once(toy_editor_path, editing_requests, tmp_path):
    out = tmp_path / "run"
    settings = dict(max_steps=1, save_steps=1, updates_per_step=1)
    FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, **settings)).train()
    with mock.patch.object(checkpoints, "check_checkpoint_files", wraps=checkpoints.check_checkpoint_files) as check:
        result = FlowGRPOEditorTrainer(toy_config(toy_editor_path, editing_requests, out, **{
            **settings, "max_steps": 2}, resume_from_checkpoint="latest")).train()
    assert [r["step"] for r in result["metrics"]] == [1, 2]  # resumed after step 1
    assert check.call_count == 1
