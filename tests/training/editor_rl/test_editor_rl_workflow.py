"""The editor-RL workflow as its users live it (issue 33.1-2): train -> ``miescore edit --lora RUN`` ->
``score-batch`` with no option copied by hand; ``--resume_from_checkpoint latest|PATH`` with its "Resuming from"
line and the start summary; ``--push_to_hub`` (huggingface_hub's API object patched, or a local Hub on 127.0.0.1
that fails mid-upload); the reward's components per step in ``metrics.jsonl`` and TensorBoard under grouped tags,
the grid as an image; one log line per step without the progress bar; a grid a person can read; the adapter card."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from safetensors.torch import load_file

from editor_rl_runs import RECIPE, REDNESS, recipe_cli, run_recipe, toy_config, write_run_yaml
from local_http import LocalHTTPServer
from modeling_miescore.cli.main import main as miescore

pytestmark = pytest.mark.usefixtures("single_thread")
TINY = str(RECIPE.parent / "configs" / "flow_grpo_editor_tiny_cpu.yaml")
TRAINER_LOG = "modeling_miescore.training.editor_rl.trainer"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_editor_path, editing_requests):
    """Two steps of the tiny CPU config on the tiny Flux2-Klein (a grid at step 2): a run folder as users get."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("tiny") / "run"
    try:
        assert recipe_cli("--config", TINY, "--model_name_or_path", str(tiny_editor_path("flux2-klein")), "--dataset",
                          str(editing_requests), "--output_dir", str(run), "--max_steps", "2", "--save_steps", "2",
                          "--sample_grid_steps", "2", "--sample_grid_groups", "1", "--no_progress") == 0
    finally:
        torch.set_num_threads(threads)
    return run


def _lines(path) -> list:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_train_then_edit_with_the_run_then_score_batch(tiny_run, tiny_editor_path, editing_requests,
                                                       tiny_miescore_path, tmp_path, capsys):
    sampling = json.loads((tiny_run / "run.json").read_text())["sampling"]
    assert sampling["editor"] == "flux2-klein" and sampling["num_inference_steps"] == 4
    assert sampling["cfg_scale"] == 1.0 and sampling["dtype"] == "float32" and sampling["height"] == 32
    assert sampling["cfg_fraction"] == 0.6 and sampling["last_step"] == "stochastic"
    assert sampling["editor_options"]["call_kwargs"] == {"max_sequence_length": 32, "text_encoder_out_layers": [1]}
    capsys.readouterr()
    # no option but the run: its editor, base, options, T, CFG and dtype come from run.json
    assert miescore(["edit", "--lora", str(tiny_run), "--input", str(editing_requests), "--out",
                     str(tmp_path / "edits"), "--num-images", "2", "--no-progress"]) == 0
    taken = capsys.readouterr().err
    for setting in ("pipeline flux2-klein", "steps 4", "cfg-scale 1.0", "cfg-fraction 0.6", "last-step stochastic",
                    "dtype float32"):
        assert setting in taken, taken
    lines = _lines(tmp_path / "edits" / "edits.jsonl")
    assert len(lines) == 8 and lines[1]["id"] == "cat-red#1" and lines[1]["edited"] == "images/cat-red-1.png"
    assert not [p for p in (tmp_path / "edits").rglob("*") if "#" in p.name]  # no '#' in a file name
    # the same images as with every setting given by hand
    explicit = ["edit", "--pipeline", "flux2-klein", "--model", str(tiny_editor_path("flux2-klein")), "--lora",
                str(tiny_run), "--input", str(editing_requests), "--out", str(tmp_path / "by-hand"),
                "--num-images", "2", "--steps", "4", "--cfg-scale", "1", "--cfg-fraction", "0.6", "--dtype", "float32",
                "--no-progress",
                "--editor-options", json.dumps(sampling["editor_options"])]
    assert miescore(explicit) == 0
    for line in lines:
        assert (Image.open(tmp_path / "edits" / line["edited"]).tobytes()
                == Image.open(tmp_path / "by-hand" / line["edited"]).tobytes())
    preds = tmp_path / "preds.jsonl"
    assert miescore(["score-batch", "--model", str(tiny_miescore_path), "--input",
                     str(tmp_path / "edits" / "edits.jsonl"), "--output", str(preds), "--device", "cpu",
                     "--no-progress"]) == 0
    assert sorted(p["id"] for p in _lines(preds)) == sorted(line["id"] for line in lines)


def test_an_adapter_folder_without_a_run_needs_the_editor(toy_editor_path, editing_requests, tmp_path, capsys):
    (tmp_path / "lora").mkdir()
    (tmp_path / "lora" / "pytorch_lora_weights.safetensors").write_bytes(b"")
    assert miescore(["edit", "--lora", str(tmp_path / "lora"), "--input", str(editing_requests), "--out",
                     str(tmp_path / "out")]) == 2
    assert "--pipeline and --model needed: the --lora folder" in capsys.readouterr().err


def test_the_card_has_its_metadata_image_and_real_paths(tiny_run):
    from card_blocks import python_blocks

    card = (tiny_run / "README.md").read_text()
    meta = card.split("---")[1]
    assert "license: other" in meta and "library_name: diffusers" in meta and "- lora" in meta
    assert "base_model" not in meta  # the base is a local folder: never in the metadata
    assert "![Sample grid" in card and "(samples/step-000002.png)" in card
    assert "path/to/this/folder" not in card and "torch_dtype" not in card
    (code,) = python_blocks(card)
    assert f'ADAPTER = "{tiny_run.resolve()}"' in code and "Flux2KleinPipeline.from_pretrained(BASE" in code
    assert "dtype=torch.float32" in code and "text_encoder_out_layers=[1]" in code and "guidance_scale=1.0" in code
    assert (tiny_run / "samples" / "example-source-0.png").is_file()


@pytest.mark.slow  # a fresh interpreter imports torch + diffusers and runs the pipeline (~18 s on 2 shared cores)
def test_the_card_is_complete_and_its_code_runs_as_written(tiny_run, tmp_path):
    from card_blocks import run_python_blocks

    card = (tiny_run / "README.md").read_text()
    done = run_python_blocks(card, tmp_path / "work", timeout=600)
    assert done.returncode == 0, done.stderr
    assert "deprecated" not in done.stderr.lower()
    edited = Image.open(tmp_path / "work" / "edited.png")
    assert edited.size == (32, 32)


def test_the_pushed_card_names_hub_ids(tiny_run, tmp_path):
    import dataclasses
    import shutil

    from modeling_miescore.hub.model_card import BASE_PLACEHOLDER
    from modeling_miescore.training.editor_rl.publishing import write_adapter_card
    from modeling_miescore.training.editor_rl.config import FlowGRPOConfig
    from modeling_miescore.training.editor_rl.editors import load_editor

    stored = json.loads((tiny_run / "run.json").read_text())
    config = FlowGRPOConfig(editor="flux2-klein", model_name_or_path=stored["sampling"]["model_name_or_path"],
                            dataset="x", reward=REDNESS, output_dir=str(tmp_path), dtype="float32",
                            editor_options=stored["sampling"]["editor_options"], num_inference_steps=4)
    editor = load_editor("flux2-klein", config.model_name_or_path, options=config.editor_options)
    shutil.copytree(tiny_run / "samples", tmp_path / "samples")
    write_adapter_card(tmp_path, config=config, editor=editor, metrics=[], repo_id="someone/klein-rl")
    card = (tmp_path / "README.md").read_text()
    assert 'ADAPTER = "someone/klein-rl"' in card and f'BASE = "{BASE_PLACEHOLDER}"' in card
    assert str(Path(config.model_name_or_path).parent) not in card.split("## Training")[0]
    write_adapter_card(tmp_path, config=dataclasses.replace(config, base_model_id="black-forest-labs/klein"),
                       editor=editor, metrics=[], repo_id="someone/klein-rl")
    card = (tmp_path / "README.md").read_text()
    assert "base_model: black-forest-labs/klein" in card and "base_model_relation: adapter" in card
    assert 'BASE = "black-forest-labs/klein"' in card


def test_resume_from_checkpoint_latest_or_a_path_with_its_line_and_the_start_summary(
        toy_editor_path, editing_requests, tmp_path, caplog, capsys, monkeypatch):
    from safetensors.torch import load_file

    from modeling_miescore.training.editor_rl import publishing

    grids = []
    real = publishing.save_sample_grid
    monkeypatch.setattr(publishing, "save_sample_grid",
                        lambda path, rows, **kw: grids.append(rows) or real(path, rows, **kw))
    caplog.set_level(logging.INFO, logger=TRAINER_LOG)
    out = tmp_path / "run"
    config = toy_config(toy_editor_path, editing_requests, out, max_steps=4, save_steps=2, sample_grid_steps=4,
                        sample_grid_groups=2)
    assert run_recipe(config) == 0
    steps = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert [s.split(" reward")[0] for s in steps] == ["step 1/4", "step 2/4", "step 3/4", "step 4/4"]
    assert "flow-grpo" not in capsys.readouterr().err  # no progress bar with progress: false
    summary = next(r.getMessage() for r in caplog.records if "***** Running training *****" in r.getMessage())
    for part in ("Num processes = 1", "Groups per step = 2 x G 4 = 8 images", "Rollout batches per step and "
                 "process = 1", "Optimizer updates per step = 2", "Trained denoising steps per rollout = 3 of 4",
                 "Total images = 32"):
        assert part in summary, summary
    from modeling_miescore.testing.editor_rewards import redness

    row = grids[-1][0]  # the grid shows each edit's own reward and the request
    assert row.rewards == pytest.approx([redness(e) for e in row.edits]) and row.label.startswith("cat-red: ")
    caplog.clear()
    longer = toy_config(toy_editor_path, editing_requests, out, max_steps=6, save_steps=2, sample_grid_steps=4,
                        sample_grid_groups=2)
    assert run_recipe(longer, "--resume_from_checkpoint", "latest") == 0
    messages = [r.getMessage() for r in caplog.records]
    assert "Resuming from checkpoint-4 (step 4 of 6)" in messages
    assert any("Total steps = 6 (2 to run after step 4)" in m for m in messages)
    latest = load_file(str(out / "pytorch_lora_weights.safetensors"))
    caplog.clear()
    assert run_recipe(longer, "--resume_from_checkpoint", str(out / "checkpoint-2")) == 0
    assert "Resuming from checkpoint-2 (step 2 of 6); dropped the later checkpoint-4, checkpoint-6" in [
        r.getMessage() for r in caplog.records]
    again = load_file(str(out / "pytorch_lora_weights.safetensors"))
    assert latest.keys() == again.keys() and all(np.array_equal(latest[k], again[k]) for k in latest)
    assert [m["step"] for m in _lines(out / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    capsys.readouterr()
    assert run_recipe(longer, "--resume_from_checkpoint", "checkpoint-5") == 2
    err = capsys.readouterr().err
    assert "not a complete checkpoint folder" in err and "checkpoint-2, checkpoint-4, checkpoint-6" in err
    assert run_recipe(toy_config(toy_editor_path, editing_requests, tmp_path / "typo"), "--resume_from_checkpoint",
                      "latest") == 2
    assert "holds no run" in capsys.readouterr().err and not (tmp_path / "typo").exists()


class FakeHfApi:
    """huggingface_hub.HfApi as the push sees it: records each call; ``fail`` names the call that raises."""

    calls: list = []
    fail = None
    token = "hf_test"

    def __init__(self, token=None):
        self.used_token = token

    def _call(self, name, **kw):
        FakeHfApi.calls.append((name, kw))
        if FakeHfApi.fail == name:
            raise ConnectionError("Name or service not known")

    def whoami(self):
        self._call("whoami")
        return {"name": "someone"}

    def create_repo(self, repo_id, **kw):
        self._call("create_repo", repo_id=repo_id, **kw)

    def upload_folder(self, **kw):
        card = (Path(kw["folder_path"]) / "README.md").read_text()
        self._call("upload_folder", card=card, **kw)
        return type("Commit", (), {"commit_url": f"https://huggingface.co/{kw['repo_id']}/commit/1"})()


@pytest.fixture
def fake_hub(monkeypatch):
    import huggingface_hub

    from modeling_miescore.data.builders import output_folder

    monkeypatch.setattr(output_folder, "hub_is_offline", lambda: False)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeHfApi)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: FakeHfApi.token)
    FakeHfApi.calls, FakeHfApi.fail, FakeHfApi.token = [], None, "hf_test"
    return FakeHfApi


def test_push_to_hub_is_checked_before_training_and_uploads_one_commit(toy_editor_path, editing_requests, tmp_path,
                                                                      capsys, monkeypatch, fake_hub):
    from modeling_miescore.data.builders import output_folder
    from modeling_miescore.training.editor_rl.publishing import PUSHED_FILES

    out = tmp_path / "klein-rl"
    config = toy_config(toy_editor_path, editing_requests, out, max_steps=1, save_steps=1)
    monkeypatch.setattr(output_folder, "hub_is_offline", lambda: True)
    assert run_recipe(config, "--push_to_hub") == 2
    assert "--push_to_hub (repository klein-rl): the Hugging Face Hub is in offline mode" in capsys.readouterr().err
    monkeypatch.setattr(output_folder, "hub_is_offline", lambda: False)
    fake_hub.token = None
    assert run_recipe(config, "--push_to_hub") == 2
    assert "no Hugging Face token" in capsys.readouterr().err
    fake_hub.token, fake_hub.fail = "hf_test", "whoami"
    assert run_recipe(config, "--push_to_hub") == 2
    assert "cannot use the Hub (ConnectionError" in capsys.readouterr().err
    assert not out.exists()  # refused before anything was trained or written
    fake_hub.calls, fake_hub.fail = [], None
    assert run_recipe(config, "--push_to_hub", "--hub_private_repo", "true") == 0
    names = [name for name, _ in fake_hub.calls]
    assert names == ["whoami", "create_repo", "upload_folder"]  # checked before training, then one commit
    create, upload = fake_hub.calls[1][1], fake_hub.calls[2][1]
    assert create == {"repo_id": "someone/klein-rl", "repo_type": "model", "private": True, "exist_ok": True}
    assert upload["repo_id"] == "someone/klein-rl" and upload["repo_type"] == "model"
    assert upload["allow_patterns"] == PUSHED_FILES and Path(upload["folder_path"]) == out
    assert 'ADAPTER = "someone/klein-rl"' in upload["card"]  # the pushed card names the repository
    fake_hub.fail = "upload_folder"
    assert run_recipe(config, "--overwrite_output_dir", "--push_to_hub", "--hub_model_id", "org/x") == 1
    err = capsys.readouterr().err
    assert "stopped: push_to_hub org/x failed" in err and "is complete" in err
    assert (out / "pytorch_lora_weights.safetensors").is_file()


def test_reward_components_per_step_in_metrics_and_tensorboard(toy_editor_path, editing_requests, tmp_path,
                                                               tiny_miescore_path):
    """MIEScore's three scores and each term of a weighted sum, per step, in metrics.jsonl (equal to the mean of
    the step's logged edits) and in TensorBoard under reward/ (with train/ and time/ beside, and the grid)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    miescore_term = f"miescore:{tiny_miescore_path}"
    reward = f"0.8*{miescore_term} + 0.2*{REDNESS}"
    assert run_recipe(toy_config(toy_editor_path, editing_requests, out, max_steps=2, save_steps=2, reward=reward,
                                 reward_options={"device": "cpu", "dtype": "float32"}, save_rollouts_steps=1,
                                 sample_grid_steps=2, sample_grid_groups=1, sample_grid_images=2,
                                 report_to="tensorboard")) == 0
    records = _lines(out / "metrics.jsonl")
    rollouts = _lines(out / "rollouts" / "rollouts.jsonl")
    names = {f"{miescore_term}/{n}" for n in ("visual_quality", "instruction_following", "attribute_preservation")}
    for record in records:
        components = record["reward_components"]
        assert names | {miescore_term, REDNESS} <= set(components)
        for name in names | {REDNESS}:
            logged = [r["components"][name] for r in rollouts if r["step"] == record["step"]]
            assert components[name] == pytest.approx(sum(logged) / len(logged))
    events = EventAccumulator(str(next(out.glob("flow_grpo_editor")))).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"reward/mean", "reward/std", "train/loss", "train/clipfrac", "time/step", "time/reward"} <= scalars

    def tag(name):  # a component's tag: reward/ and its name with every run of other characters as one "_"
        return "reward/" + re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_")

    for name in names | {miescore_term, REDNESS}:
        values = [e.value for e in events.Scalars(tag(name))]
        assert values == pytest.approx([r["reward_components"][name] for r in records], rel=1e-5), name
    assert [e.value for e in events.Scalars("reward/mean")] == pytest.approx([r["reward_mean"] for r in records])
    assert "samples/grid" in events.Tags()["images"]


def test_the_grid_goes_to_wandb_as_an_image():
    from modeling_miescore.training.editor_rl.outputs import log_grid_image

    sent = []

    class WandbTracker:
        name = "wandb"

        def log_images(self, values, step=None, **kwargs):
            sent.append((values, step))

    accelerator = type("Accelerator", (), {"trackers": [WandbTracker()]})()
    path = Path(__file__).parents[2] / "_grid_probe.png"
    Image.new("RGB", (8, 4), "red").save(path)
    try:
        assert log_grid_image(accelerator, path, 7) == ["wandb"]
    finally:
        path.unlink()
    (values, step), = sent
    assert step == 7 and values["samples/grid"][0].size == (8, 4)


def test_a_grid_a_person_can_read(tmp_path):
    """Per row: a header (step, request, instruction) in dark text, the sources in one cell (a one-source row has
    no empty cell), a gap between edits, each edit's reward under it."""
    from modeling_miescore.training.editor_rl.outputs import GridRow, save_sample_grid

    def solid(colour):
        return Image.new("RGB", (40, 40), colour)

    rows = [GridRow("cat-red: Make the cat red.", [solid("blue")], [solid("red"), solid("green")], [0.5, None],
                    [None, "nan"]),
            GridRow("two: Put image 2 in image 1.", [solid("blue"), solid("yellow")], [solid("red"), solid("red")],
                    [0.25, 0.75], [None, None])]
    path = save_sample_grid(tmp_path / "grid.png", rows, step=10, cell=64)
    grid = np.asarray(Image.open(path).convert("RGB")).astype(int)
    pad, gap, divider, text_h = 6, 8, 24, 6 + 10  # the layout of save_sample_grid at cell 64 (font 10 px)
    row_h = text_h + 64 + text_h + gap

    def dark(region):
        return (region.sum(axis=-1) < 200).any()

    for r in range(2):
        top = pad + r * row_h
        assert dark(grid[top:top + text_h, pad:pad + 200])  # the header text
        source_cell = grid[top + text_h:top + text_h + 64, pad:pad + 63]
        if r == 0:  # one source fills the cell: no empty cell beside it
            assert (source_cell.sum(axis=-1) >= 3 * 250).mean() < 0.05
        else:  # two sources side by side in the same cell
            assert tuple(source_cell[32, 15]) == (0, 0, 255) and tuple(source_cell[32, 47]) == (255, 255, 0)
        first_edit = pad + 64 + divider
        caption = grid[top + text_h + 64:top + 2 * text_h + 64, first_edit:first_edit + 64]
        assert dark(caption)  # "reward 0.5000" / "reward failed (nan)" under the edit
        between = grid[top + text_h:top + text_h + 64, first_edit + 64:first_edit + 64 + gap]
        assert (between == 255).all()  # a white gap between two edits
    assert tuple(grid[pad + text_h + 32, pad + 32]) == (0, 0, 255)  # the one source fills its cell


def test_component_means_over_processes_skip_failed_samples():
    """SpatialReward's SC / PQ per step: the mean over every process's valid samples (a failed sample's None is
    left out, never counted as a number)."""
    from modeling_miescore.rewards.groups import GroupScores
    from modeling_miescore.training.editor_rl.outputs import (component_means, component_totals, step_line,
                                                                     tracker_values)

    rank0 = [GroupScores([0.5, None], [None, "sc:parse_failed"], {"sc": [20.0, None], "pq": [10.0, None]})]
    rank1 = [GroupScores([0.7, 0.9], [None, None], {"sc": [22.0, 24.0], "pq": [12.0, 14.0]})]
    means = component_means([component_totals(rank0), component_totals(rank1)])
    assert means == {"pq": pytest.approx(12.0), "sc": pytest.approx(22.0)}
    record = {"step": 3, "reward_mean": 0.7, "reward_std": 0.16, "kl": None, "loss": 0.1, "seconds_step": 1.5,
              "reward_components": {**means, "miescore:/ckpt/visual_quality": 71.0}}
    tags = tracker_values(record)
    assert tags == {"reward/mean": 0.7, "reward/std": 0.16, "train/loss": 0.1, "time/step": 1.5,
                    "reward/sc": pytest.approx(22.0), "reward/pq": pytest.approx(12.0),
                    "reward/miescore_ckpt_visual_quality": 71.0}
    line = step_line(record, 10)
    assert line.startswith("step 3/10 reward 0.7000 (std 0.1600) loss 0.1") and "sc 22" in line and "kl" not in line


def test_hf_hub_offline_is_read_as_huggingface_hub_reads_it(monkeypatch):
    """``HF_HUB_OFFLINE=0`` is online (huggingface_hub's truthy parse): before, a value of 1 at import won over the
    0 set now, and ``HF_DATASETS_OFFLINE`` (which huggingface_hub, the push's client, ignores) made it offline."""
    from huggingface_hub import constants

    from modeling_miescore.data.builders.output_folder import hub_is_offline

    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # as when HF_HUB_OFFLINE=1 at import
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    for value, offline in (("0", False), ("false", False), ("no", False), ("1", True), ("TRUE", True), ("on", True)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert hub_is_offline() is offline, value
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "yes")  # huggingface_hub's fallback
    assert hub_is_offline()


def _failing_hub(fail_at: str, seen: list):
    """A Hub on 127.0.0.1 that accepts the token and creates the repository, then fails ``fail_at``:
    ``commit`` answers 500 to the commit, ``preupload`` closes the connection before the files are sent."""
    class Hub(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def _json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            seen.append(self.path)
            if self.path.startswith("/api/whoami"):
                return self._json(200, {"name": "someone", "type": "user"})
            self._json(404, {"error": "not here"})

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(self.path)
            if self.path == "/api/repos/create":
                return self._json(200, {"url": "http://127.0.0.1/org/x", "name": "org/x"})
            if self.path == "/api/validate-yaml":
                return self._json(200, {"errors": [], "warnings": []})
            if "/preupload/" in self.path and fail_at != "preupload":
                files = json.loads(body)["files"]
                return self._json(200, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                                                  for f in files]})
            if "/preupload/" in self.path:
                self.close_connection = True
                return self.connection.shutdown(2)
            self._json(500, {"error": "Internal Error"})

    return Hub


FILES = ("5 file(s) (README.md, metrics.jsonl, pytorch_lora_weights.safetensors, run.json, "
         "samples/example-source-0.png)")


@pytest.mark.slow
@pytest.mark.parametrize("fail_at,state", [
    ("commit", f"the repository org/x exists; the commit of the {FILES} got no usable answer, so the Hub may or may "
               "not hold them"),
    ("preupload", "the repository org/x exists, but nothing was committed to it (uploads are a single commit): none "
                  f"of the {FILES} is on the Hub"),
])
def test_a_hub_failing_mid_upload_keeps_the_run_and_says_what_was_uploaded(toy_editor_path, editing_requests,
                                                                           tmp_path, fail_at, state):
    """The recipe against a real HTTP Hub (HF_ENDPOINT, HF_HUB_OFFLINE=0, a dummy token) that fails after the
    repository was created (huggingface_hub retries the 500s and the closed connections, ~25 s)."""
    out, seen = tmp_path / "x", []
    config = write_run_yaml(tmp_path / "x.yaml", toy_config(toy_editor_path, editing_requests, out, max_steps=1,
                                                             save_steps=1))
    root = str(RECIPE.parents[1])
    with LocalHTTPServer(_failing_hub(fail_at, seen)) as hub:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
               "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub.origin, "HF_TOKEN": "hf_dummy",
               "HF_HOME": str(tmp_path / "hf")}
        done = subprocess.run([sys.executable, str(RECIPE), "--config", config, "--push_to_hub", "--hub_model_id",
                               "org/x"], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "/api/repos/create" in seen and f"/api/models/org/x/{fail_at}/main" in seen
    line = next(x for x in done.stderr.splitlines() if "stopped: push_to_hub org/x failed" in x)
    assert state in line, line
    assert f"the local folder at {out} is complete" in line and "Traceback" not in done.stderr
    assert load_file(out / "pytorch_lora_weights.safetensors")  # the run's outputs, whole
    assert json.loads((out / "run.json").read_text()) and len((out / "metrics.jsonl").read_text().splitlines()) == 1
    assert (out / "checkpoint-1").is_dir()
