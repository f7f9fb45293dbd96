"""Every supported editor, driven through its stock pipeline: a recorded rollout recomputed at train time gives
the on-policy ratio exactly 1 (fp32, same batch) and, at step 0, the policy equals the reference (KL 0); the
editor registry's bad inputs."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from PIL import Image

from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS
from modeling_miescore.training.editor_rl.editors import EDITORS, EditorSpecError, load_editor
from modeling_miescore.training.editor_rl.policy import add_lora, reference_policy
from modeling_miescore.training.editor_rl.rollout import sample_group
from modeling_miescore.training.editor_rl.rollout import gaussian_kl_on_means
from modeling_miescore.training.editor_rl.schedule import make_step_plan
from modeling_miescore.training.editor_rl.objective import recompute_step

pytestmark = pytest.mark.usefixtures("single_thread")

TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"


def _source(seed: int = 0) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 255, (64, 64, 3), dtype=np.uint8))


def _editor(name, tiny_editor_path, toy_editor_path):
    if name == "toy":
        return load_editor(TOY, str(toy_editor_path))
    return load_editor(name, str(tiny_editor_path(name)), options=TINY_EDITOR_OPTIONS[name])


@pytest.mark.parametrize("name", ["qwen-image-edit-plus", "flux2-klein", "flux-kontext", "toy"])
def test_on_policy_ratio_is_one_and_the_reference_is_the_policy_at_step_0(name, tiny_editor_path,
                                                                         toy_editor_path):
    editor = _editor(name, tiny_editor_path, toy_editor_path)
    if name == "flux-kontext":
        editor.negative_prompt = "blurry"  # exercise its optional true CFG
        editor.cfg_scale = 2.0
    add_lora(editor.transformer, rank=4, alpha=8, targets=editor.lora_targets, editor=name)
    sources = [_source(0), _source(1)] if editor.max_sources is None else [_source(0)]
    plan = make_step_plan(4, random.Random(0), noise_level=0.7, train_fraction=0.75, cfg_fraction=0.5)
    rollout = sample_group(editor, key="k", sources=sources, source_ids=["a", "b"][:len(sources)],
                           instruction="make the sky red", num_images=2, plan=plan, seed=3)
    assert len(rollout.images) == 2 and rollout.images[0].mode == "RGB"
    assert [s.sampled.index for s in rollout.steps] == list(plan.trained) and 3 not in plan.trained
    assert [s.guided for s in rollout.steps] == [plan.cfg[i] for i in plan.trained]  # CFG only on early steps
    for step in rollout.steps:
        policy = recompute_step(editor.transformer, editor, step, plan)
        assert torch.equal(torch.exp(policy.log_prob - step.sampled.log_prob), torch.ones(2))
        assert policy.log_prob.requires_grad
        with torch.no_grad(), reference_policy(editor.transformer):
            reference = recompute_step(editor.transformer, editor, step, plan)
        assert torch.equal(gaussian_kl_on_means(policy.mean, reference.mean, policy.sigma_t, policy.std),
                           torch.zeros(2))
        half = recompute_step(editor.transformer, editor, step, plan, rows=slice(1, 2))
        assert float((half.log_prob.detach() - step.sampled.log_prob[1:]).abs()) < 1e-5  # micro-batches: same up to fp noise


def test_cps_rollouts_are_on_policy_too(tiny_editor_path, toy_editor_path):
    editor = _editor("toy", tiny_editor_path, toy_editor_path)
    add_lora(editor.transformer, rank=4, alpha=8, targets=editor.lora_targets)
    plan = make_step_plan(4, random.Random(1), noise_level=0.8, train_fraction=0.75, sde_type="cps")
    rollout = sample_group(editor, key="k", sources=[_source()], source_ids=["a"], instruction="red",
                           num_images=3, plan=plan, seed=2)
    for step in rollout.steps:
        policy = recompute_step(editor.transformer, editor, step, plan)
        assert torch.equal(policy.log_prob, step.sampled.log_prob)


def test_the_policy_moves_away_from_the_reference_after_an_update(tiny_editor_path, toy_editor_path):
    editor = _editor("toy", tiny_editor_path, toy_editor_path)
    add_lora(editor.transformer, rank=4, alpha=8, targets=editor.lora_targets)
    plan = make_step_plan(3, random.Random(0), noise_level=1.0, train_fraction=1.0)
    rollout = sample_group(editor, key="k", sources=[_source()], source_ids=["a"], instruction="red",
                           num_images=2, plan=plan, seed=0)
    step = rollout.steps[0]
    params = [p for p in editor.transformer.parameters() if p.requires_grad]
    loss = -recompute_step(editor.transformer, editor, step, plan).log_prob.sum()
    loss.backward()
    torch.optim.SGD(params, lr=0.5).step()
    policy = recompute_step(editor.transformer, editor, step, plan)
    with torch.no_grad(), reference_policy(editor.transformer):
        reference = recompute_step(editor.transformer, editor, step, plan)
    assert float(gaussian_kl_on_means(policy.mean, reference.mean, policy.sigma_t, policy.std).min().detach()) > 0
    assert not torch.equal(policy.log_prob, step.sampled.log_prob)


def test_editor_registry_declares_each_editor_once():
    assert set(EDITORS) == {"qwen-image-edit-plus", "flux2-klein", "flux-kontext"}
    assert {cls.pipeline_class for cls in EDITORS.values()} == {"QwenImageEditPlusPipeline", "Flux2KleinPipeline",
                                                                "FluxKontextPipeline"}


def test_qwen_image_size_constants_are_changed_only_during_the_adapters_calls(tiny_editor_path):
    import diffusers.pipelines.qwenimage.pipeline_qwenimage_edit_plus as module

    before = (module.VAE_IMAGE_SIZE, module.CONDITION_IMAGE_SIZE)
    editor = load_editor("qwen-image-edit-plus", str(tiny_editor_path("qwen-image-edit-plus")),
                         options=TINY_EDITOR_OPTIONS["qwen-image-edit-plus"])
    with editor.call_context():
        assert (module.VAE_IMAGE_SIZE, module.CONDITION_IMAGE_SIZE) == (32 * 32, 28 * 28)
    assert (module.VAE_IMAGE_SIZE, module.CONDITION_IMAGE_SIZE) == before == (1024 * 1024, 384 * 384)


def test_bad_editor_inputs(tiny_editor_path, toy_editor_path):
    with pytest.raises(EditorSpecError, match="unknown editor 'qwen-edit'.*qwen-image-edit-plus"):
        load_editor("qwen-edit", "x")
    with pytest.raises(EditorSpecError, match="is a Flux2KleinPipeline, but editor 'flux-kontext' needs"):
        load_editor("flux-kontext", str(tiny_editor_path("flux2-klein")))
    with pytest.raises(EditorSpecError, match="no option.*vae_image_size"):
        load_editor("flux2-klein", str(tiny_editor_path("flux2-klein")), options={"vae_image_size": 4})
    with pytest.raises(EditorSpecError, match="cannot import module"):
        load_editor("no_such_module_xyz:make", "x")
    editor = load_editor("flux2-klein", str(tiny_editor_path("flux2-klein")), options=TINY_EDITOR_OPTIONS["flux2-klein"])
    with pytest.raises(MIEScoreInputError, match="LoRA target module.*attn_fused_qkv.*not found.*to_q"):
        add_lora(editor.transformer, rank=4, alpha=8, targets=["to_q", "attn_fused_qkv"], editor="flux2-klein")
    kontext = EDITORS["flux-kontext"](pipeline=None)
    with pytest.raises(EditorSpecError, match="2 source images.*at most 1"):
        kontext.check_sources([_source(), _source()], "request 'r1'")
    # Flux2-Klein's own rule for its references, checked from the headers before any rollout
    small = Image.new("RGB", (40, 80))
    editor.check_sources([_source(), _source()], "request 'r2'")
    with pytest.raises(EditorSpecError, match=r"request 'r3': source 2: Image too small: 40.80.*at least 64px.*"
                                              "Flux2KleinPipeline's rule"):
        editor.check_sources([_source(), small], "request 'r3'")
