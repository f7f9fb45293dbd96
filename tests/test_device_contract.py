"""The device contract (issue 32.1): the package's hot paths run on a second device as strict as CUDA, on a CPU.

``corpus.virtual_device.VirtualDevice`` gives tensors a virtual device (``maia:0``) whose data
stays on the CPU and raises what CUDA raises: a draw whose generator is on another device type than the draw
(the first SDE step of every GPU run raised that before ``utils.random_draws``), a host tensor meeting a device
tensor, ``.numpy()`` of a device tensor. Under it run: the tiny editor-RL recipe's trainer (rollout, rewards,
update, EMA, sample grid, checkpoint, adapter) for one step in fp32 and in bf16, a rollout of each other editor,
``miescore edit`` through the CLI (bf16, with the trained LoRA), MIEScore ``score_batch`` and SpatialReward
generation with and without prefix reuse. The update loop's host syncs are counted: none inside an update.
"""

from __future__ import annotations

import inspect
import json
import random
from pathlib import Path

import pytest
import torch
import yaml

from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS
from corpus.virtual_device import VirtualDevice, accelerator_on
from modeling_miescore.utils.random_draws import randn_tensor

TINY_RECIPE = Path(__file__).resolve().parents[1] / "trainers" / "configs" / "flow_grpo_editor_tiny_cpu.yaml"
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"

# the code whose host syncs are bounded, by name in its module (the SDE step, the loss, the recording, the update)
SDE_STEP = ("rollout", "StepStats noise_std _scalar_on _per_sample_mean sde_step gaussian_kl_on_means")
LOSS = ("objective", "StepLoss step_loss tempflow_weights step_weights")
RECORDING = ("rollout", "SampledStep LogProbScheduler install_log_prob_scheduler kwargs_rows _repeat_rows "
                          "TransformerCalls")
UPDATE = ("objective", "TrainingDivergedError TrainingUnit make_units pad_units _rows _gradient_sync _unit_loss "
                       "update_figures run_updates")


def syncs_within(virtual, code, skip: str = "") -> int:
    """Host syncs counted at call sites inside ``code`` (``(module of editor_rl, "names")``), except those whose
    description contains ``skip``."""
    import importlib

    module = importlib.import_module(f"modeling_miescore.training.editor_rl.{code[0]}")
    spans = []
    for name in code[1].split():
        lines, first = inspect.getsourcelines(getattr(module, name))
        spans.append((first, first + len(lines)))
    count = 0
    for where, n in virtual.host_syncs.items():
        site, _, what = where.partition(" ")
        file, _, line = site.rpartition(":")
        if (file.endswith(f"editor_rl/{code[0]}.py") and line.isdigit() and not (skip and skip in what)
                and any(a <= int(line) < b for a, b in spans)):
            count += n
    return count


def test_the_virtual_device_refuses_what_cuda_refuses():
    generator = torch.Generator("cpu").manual_seed(0)
    with VirtualDevice() as virtual:
        x = torch.zeros(2, 3, device=virtual.device)
        assert x.device == virtual.device and (x + 1).device == virtual.device
        with pytest.raises(RuntimeError, match="Expected a 'maia' device type for generator but found 'cpu'"):
            torch.randn(x.shape, generator=generator, device=x.device)  # the old sde_step's draw
        with pytest.raises(RuntimeError, match="Expected a 'maia' device type for generator but found 'cpu'"):
            torch.empty_like(x).normal_(generator=generator)
        drawn = randn_tensor(x.shape, generator=generator, device=x.device)  # on the generator's device, then moved
        assert drawn.device == virtual.device
        assert torch.equal(drawn.cpu(), torch.randn(x.shape, generator=torch.Generator().manual_seed(0)))
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            x + torch.ones(3)  # a tensor made without device= meets a device tensor
        assert (x * torch.tensor(2.0)).device == virtual.device  # a 0-d host tensor is a "CPU scalar", as on CUDA
        with pytest.raises(TypeError, match="can't convert maia:0 device type tensor to numpy"):
            x.numpy()
        assert x.cpu().numpy().shape == (2, 3)
        layer = torch.nn.Linear(3, 2).to(virtual.device)
        layer(x).sum().backward()
        assert layer.weight.device == layer.weight.grad.device == virtual.device
        float(x.sum())
    assert sum(virtual.host_syncs.values()) >= 2  # .cpu() and float(): host syncs are counted


def _tiny_recipe_config(model, dataset, out, **overrides):
    """The tiny CPU recipe's YAML (trainers/configs/flow_grpo_editor_tiny_cpu.yaml), one step, small groups."""
    from modeling_miescore.training.editor_rl.config import FlowGRPOConfig

    fields = yaml.safe_load(TINY_RECIPE.read_text())
    for script_only in ("build_tiny_editor", "build_tiny_requests"):
        fields.pop(script_only)
    fields.update(model_name_or_path=str(model), dataset=str(dataset), output_dir=str(out), max_steps=1,
                  save_steps=1, sample_grid_steps=1, sample_grid_groups=1, sample_grid_images=2, num_generations=2,
                  per_device_batch_size=4, progress=False, ema_decay=0.9, ema_update_interval=1)
    fields.update(overrides)
    return FlowGRPOConfig(**fields)


@pytest.mark.parametrize("editor, dtype", [("flux2-klein", "float32"), ("qwen-image-edit-plus", "bfloat16")])
def test_a_trainer_step_runs_on_the_device_without_a_host_sync_inside_an_update(editor, dtype, tiny_editor_path,
                                                                               editing_requests, tmp_path,
                                                                               single_thread):
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    config = _tiny_recipe_config(tiny_editor_path(editor), editing_requests, tmp_path / "run", editor=editor,
                                 dtype=dtype, editor_options=TINY_EDITOR_OPTIONS[editor], cfg_scale=2.0)
    with VirtualDevice() as virtual:
        trainer = FlowGRPOEditorTrainer(config, accelerator=accelerator_on(virtual))
        record = trainer.train()["metrics"][-1]
        assert trainer.editor.transformer.device == virtual.device
        assert all(virtual.is_virtual(p) for p in trainer.params)
    assert record["step"] == 1 and record["ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert (tmp_path / "run" / "pytorch_lora_weights.safetensors").is_file()
    assert (tmp_path / "run" / "samples" / "step-000001.png").is_file()
    # inside an update nothing waits for the device: its loss and gradient norm are read once per update
    # (2 updates) and its statistics once; a rollout reads its schedule once (2 groups, and the grid's group at
    # steps 0 and 1: grids sample with the rollouts' CFG schedule through the same scheduler)
    assert syncs_within(virtual, LOSS) == syncs_within(virtual, SDE_STEP) == 0
    assert syncs_within(virtual, RECORDING) <= 2 + 2
    assert syncs_within(virtual, UPDATE, skip="host data") <= 2 * config.updates_per_step + 1, virtual.host_syncs


@pytest.mark.parametrize("editor", ["flux-kontext", "toy"])
def test_rollouts_of_the_other_editors_run_on_the_device(editor, tiny_editor_path, toy_editor_path, single_thread):
    from PIL import Image

    from modeling_miescore.training.editor_rl.editors import load_editor
    from modeling_miescore.training.editor_rl.policy import add_lora
    from modeling_miescore.training.editor_rl.rollout import sample_group
    from modeling_miescore.training.editor_rl.schedule import make_step_plan
    from modeling_miescore.training.editor_rl.objective import recompute_step

    dtype = torch.bfloat16 if editor == "toy" else torch.float32
    source = Image.new("RGB", (64, 64), (40, 120, 200))
    with VirtualDevice() as virtual:
        adapter = (load_editor(TOY, str(toy_editor_path), device=virtual.device, dtype=dtype) if editor == "toy" else
                   load_editor(editor, str(tiny_editor_path(editor)), device=virtual.device, dtype=dtype,
                               options=TINY_EDITOR_OPTIONS[editor]))
        add_lora(adapter.transformer, rank=2, alpha=4, targets=adapter.lora_targets, editor=editor)
        plan = make_step_plan(3, random.Random(0), noise_level=0.8, train_fraction=0.6)
        rollout = sample_group(adapter, key="k", sources=[source], source_ids=["a"], instruction="make it red",
                               num_images=2, plan=plan, seed=1)
        step = rollout.steps[0]
        assert virtual.is_virtual(step.sampled.next_sample) and virtual.is_virtual(step.sampled.log_prob)
        policy = recompute_step(adapter.transformer, adapter, step, plan)
        assert virtual.is_virtual(policy.log_prob)
        ratio = torch.exp(policy.log_prob - step.sampled.log_prob)
        assert float((ratio.detach() - 1).abs().max()) < 1e-2  # on-policy: the rollout's own log-probabilities
    assert len(rollout.images) == 2 and rollout.images[0].mode == "RGB"


def test_miescore_edit_runs_on_the_device_in_bf16_with_a_trained_lora(tiny_editor_path, toy_editor_path,
                                                                      editing_requests, tmp_path, single_thread):
    from modeling_miescore.cli.main import main
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    config = _tiny_recipe_config(tiny_editor_path("flux2-klein"), editing_requests, tmp_path / "run",
                                 sample_grid_steps=0, ema_decay=0.0)
    FlowGRPOEditorTrainer(config).train()  # plain CPU: the adapter to load
    runs = [("flux2-klein", tiny_editor_path("flux2-klein"), TINY_EDITOR_OPTIONS["flux2-klein"],
             ["--lora", str(tmp_path / "run")]),
            (TOY, toy_editor_path, {}, [])]
    with VirtualDevice() as virtual:
        for k, (pipeline, model, options, extra) in enumerate(runs):
            out = tmp_path / f"edits-{k}"
            status = main(["edit", "--pipeline", pipeline, "--model", str(model), "--input", str(editing_requests),
                           "--out", str(out), "--limit", "2", "--steps", "2", "--num-images", "2", "--device",
                           str(virtual.device), "--dtype", "bfloat16", "--editor-options", json.dumps(options),
                           "--no-progress", *extra])
            assert status == 0
            assert len((out / "edits.jsonl").read_text().splitlines()) == 4


def test_scoring_and_spatialreward_generation_run_on_the_device(tiny_miescore_path, tiny_spatialreward_path,
                                                                examples, single_thread):
    from modeling_miescore.scoring.loading import load_scorer, load_spatialreward

    base = examples[0]
    samples = [{"sources": base["sources"], "edited": e["edited"], "instruction": base["instruction"]}
               for e in examples[:3]]
    with VirtualDevice() as virtual:
        scorer = load_scorer(str(tiny_miescore_path), device=str(virtual.device), dtype="float32")
        assert scorer.device == virtual.device
        plain = scorer.score_batch(samples, batch_size=3, reuse_prefix=False)
        reused = scorer.score_batch(samples, batch_size=3, reuse_prefix=True)
        judge = load_spatialreward(str(tiny_spatialreward_path), device=str(virtual.device), dtype="float32")
        texts = [r.raw_sc for r in judge.evaluate_edits(samples, batch_size=3, reuse_prefix=False)]
        texts_reused = [r.raw_sc for r in judge.evaluate_edits(samples, batch_size=3, reuse_prefix=True)]
    assert max(abs(a[k] - b[k]) for a, b in zip(plain, reused) for k in a) < 1e-4
    assert texts == texts_reused


def test_an_update_reads_the_device_once_and_still_names_a_non_finite_loss():
    from types import SimpleNamespace

    from modeling_miescore.training.editor_rl.objective import TrainingDivergedError, update_figures

    def unit(key):
        return SimpleNamespace(rollout=SimpleNamespace(key=key, steps=[SimpleNamespace(sampled=SimpleNamespace(
            index=i)) for i in (2, 5)]))

    a, b = unit("group-a"), unit("group-b")
    finite = [(torch.tensor(0.25), a, 0), (torch.tensor(-0.5), b, 1)]
    with VirtualDevice() as virtual:
        passes = [(loss.to(virtual.device), u, i) for loss, u, i in finite]
        assert update_figures(passes, torch.tensor(3.0, device=virtual.device)) == (-0.25, 3.0)
        assert syncs_within(virtual, UPDATE) == 1  # loss and norm in one read
        passes[1] = (torch.tensor(float("nan"), device=virtual.device), b, 1)
        with pytest.raises(TrainingDivergedError, match=r"non-finite loss \(nan\) at trained step 5 of group group-b"):
            update_figures(passes, torch.tensor(3.0, device=virtual.device))
        with pytest.raises(TrainingDivergedError, match="non-finite gradient norm"):
            update_figures(passes[:1], torch.tensor(float("inf"), device=virtual.device))
