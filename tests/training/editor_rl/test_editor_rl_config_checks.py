"""Every setting of the editor-RL trainer is checked where it is declared, before anything is built or loaded: one
line naming the field, the value and what is allowed (issue 31, MEDIUM: 30 values gave tracebacks, more were
trained on with exit 0)."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from pydantic import Field
from pydantic.fields import FieldInfo

from editor_rl_runs import recipe_cli, toy_config, write_run_yaml
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.training.editor_rl.config import RESUMABLE_FIELDS, RUN_IDENTITY_FIELDS, FlowGRPOConfig
from modeling_miescore.utils.declared_settings import field_problems, one_of
from modeling_miescore.utils.suggestions import suggestion

GOOD = dict(editor="pkg.editor:make", model_name_or_path="model", dataset="rows.jsonl", reward="pkg.rewards:fn",
            output_dir="out", num_generations=4, per_device_batch_size=8)

BAD = [  # (override, what the one line must say)
    (dict(per_device_batch_size=0), "per_device_batch_size must be an integer >= 1, got 0"),
    (dict(per_device_batch_size=-8), "per_device_batch_size must be an integer >= 1, got -8"),
    (dict(updates_per_step=0), "updates_per_step must be an integer >= 1, got 0"),
    (dict(save_steps=0), "save_steps must be an integer >= 1, got 0"),
    (dict(ema_update_interval=0), "ema_update_interval must be an integer >= 1, got 0"),
    (dict(learning_rate=-1e-4), "learning_rate must be a finite number > 0, got -0.0001"),
    (dict(learning_rate=float("nan")), "learning_rate must be a finite number > 0, got nan"),
    (dict(learning_rate=0.0), "learning_rate must be a finite number > 0, got 0.0"),
    (dict(lora_rank=0), "lora_rank must be an integer >= 1, got 0"),
    (dict(lora_rank=-2), "lora_rank must be an integer >= 1, got -2"),
    (dict(lora_dropout=2.0), "lora_dropout must be a finite number in [0, 1), got 2.0"),
    (dict(num_inference_steps=0), "num_inference_steps must be an integer >= 2, got 0"),
    (dict(num_inference_steps=1), "num_inference_steps must be an integer >= 2, got 1"),
    (dict(train_fraction=0.0), "train_fraction must be a finite number in (0, 1], got 0.0"),
    (dict(train_fraction=1.5), "train_fraction must be a finite number in (0, 1], got 1.5"),
    (dict(train_steps="windw"), "train_steps must be one of fraction, sde_window, fast, mixgrpo, got 'windw' (did you "
                                "mean 'sde_window'?)"),
    (dict(sde_type="SDE2"), "sde_type must be one of sde, cps, got 'SDE2' (did you mean 'sde'?)"),
    (dict(std_level="grup"), "std_level must be one of group, batch, got 'grup' (did you mean 'group'?)"),
    (dict(report_to="tensorbord"), "report_to must be one of none, all, tensorboard, wandb"),
    (dict(report_to="tensorbord"), "got 'tensorbord' (did you mean 'tensorboard'?)"),
    (dict(train_steps="sde_window", window_size=0), "window_size must be an integer >= 1, got 0"),
    (dict(train_steps="sde_window", window_size=40), "window_size must be in [1, 19] for 20 steps, got 40"),
    (dict(train_steps="sde_window", window_start=0.6), "window_start 0.6 must be below window_end 0.5"),
    (dict(train_steps="sde_window", window_end=1.5), "window_end must be a finite number in [0, 1], got 1.5"),
    (dict(gradient_accumulation_steps=0), "gradient_accumulation_steps must be an integer >= 1 or None, got 0"),
    (dict(gradient_accumulation_steps=-1), "gradient_accumulation_steps must be an integer >= 1 or None, got -1"),
    (dict(rollout_batches_per_step=0), "rollout_batches_per_step must be an integer >= 1, got 0"),
    (dict(train_steps="fast", same_latent=False), "train_steps fast branches one shared trajectory per group"),
    (dict(last_step="determinstic"), "last_step must be one of stochastic, deterministic, got 'determinstic' (did you mean"),
    (dict(step_weighting="tempflo"), "step_weighting must be one of none, tempflow, tempflow_mean_one"),
    (dict(max_steps=0), "max_steps must be an integer >= 1, got 0"),
    (dict(max_steps=-3), "max_steps must be an integer >= 1, got -3"),
    (dict(clip_range_low=-0.1), "clip_range_low must be a finite number in [0, 1), got -0.1"),
    (dict(clip_range_high=-0.1), "clip_range_high must be a finite number >= 0, got -0.1"),
    (dict(beta=float("nan")), "beta must be a finite number >= 0, got nan"),
    (dict(ema_decay=2.0), "ema_decay must be a finite number in [0, 1), got 2.0"),
    (dict(max_grad_norm=-1.0), "max_grad_norm must be a finite number > 0, got -1.0"),
    (dict(advantage_clip=0.0), "advantage_clip must be a finite number > 0, got 0.0"),
    (dict(advantage_clip=-5.0), "advantage_clip must be a finite number > 0, got -5.0"),
    (dict(max_train_rows=0), "max_train_rows must be an integer >= 1 or None, got 0"),
    (dict(max_train_rows=-1), "max_train_rows must be an integer >= 1 or None, got -1"),
    (dict(sample_grid_steps=-1), "sample_grid_steps must be an integer >= 0, got -1"),
    (dict(sample_grid_groups=-2), "sample_grid_groups must be an integer >= 0, got -2"),
    (dict(sample_grid_images=0), "sample_grid_images must be an integer >= 1, got 0"),
    (dict(editor_options={"height": -32}), "editor_options.height must be an integer >= 1 or None, got -32"),
    (dict(editor_options={"width": 0.5}), "editor_options.width must be an integer >= 1 or None, got 0.5"),
    (dict(editor="flux2-klein", editor_options={"heigth": 32}), "has no option(s) heigth; its options: height"),
    (dict(editor="flux2-klein", editor_options={"heigth": 32}), "(did you mean 'height'?)"),
    (dict(per_device_batch_size=True), "per_device_batch_size must be an integer >= 1, got True"),
    (dict(lora_rank=1.5), "lora_rank must be an integer >= 1, got 1.5"),
    (dict(learning_rate="fast"), "learning_rate must be a finite number > 0, got 'fast'"),
    (dict(beta=True), "beta must be a finite number >= 0, got True"),
    (dict(noise_level=float("inf")), "noise_level must be a finite number >= 0, got inf"),
    (dict(seed=-1), "seed must be an integer in [0, 2**63), got -1"),
    (dict(progress="yes"), "progress must be true or false, got 'yes'"),
    (dict(dataset=""), "dataset is required"),
    (dict(reward="  "), "reward is required"),
    (dict(reward=3), "reward must be a list or a string, got 3"),  # a YAML list of terms, or one spec
    (dict(finetuning="ful"), "finetuning must be one of lora, full, got 'ful' (did you mean 'full'?)"),
    (dict(dtype="bf16"), "dtype must be one of auto, float32, bfloat16, float16, got 'bf16'"),
    (dict(max_reward_failure_rate=1.5), "max_reward_failure_rate must be a finite number in [0, 1], got 1.5"),
    (dict(reward_timeout=0.0), "reward_timeout must be a finite number > 0, got 0.0"),
    (dict(per_device_batch_size=6, fsdp=True, finetuning="full"), "fsdp needs whole groups on each process"),
]


@pytest.mark.parametrize("override,message", BAD, ids=[f"{next(iter(o))}={next(iter(o.values()))!r}"
                                                       for o, _ in BAD])
def test_every_bad_value_is_one_line_naming_the_field_the_value_and_what_is_allowed(override, message):
    with pytest.raises(MIEScoreInputError) as caught:
        FlowGRPOConfig(**{**GOOD, **override}).validate()
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_several_bad_values_are_named_together():
    with pytest.raises(MIEScoreInputError, match=r"^lora_rank must be .*, got 0; learning_rate must be .*, got -1$"):
        FlowGRPOConfig(**{**GOOD, "lora_rank": 0, "learning_rate": -1}).validate()


def test_the_defaults_and_the_shipped_configs_pass():
    FlowGRPOConfig(**GOOD).validate(num_processes=1)
    import yaml

    from editor_rl_runs import RECIPE

    for name in ("flow_grpo_editor_tiny_cpu.yaml", "flow_grpo_editor_paper.yaml"):
        values = yaml.safe_load((RECIPE.parent / "configs" / name).read_text())
        names = {f.name for f in dataclasses.fields(FlowGRPOConfig)}
        FlowGRPOConfig(**{**GOOD, **{k: v for k, v in values.items() if k in names and v is not None}}).validate()


def test_every_number_field_declares_its_range_and_every_field_its_resume_role():
    """A field added later without a declared range (or not sorted into the run's identity) fails here."""
    hints = typing.get_type_hints(FlowGRPOConfig, include_extras=True)
    for field in dataclasses.fields(FlowGRPOConfig):
        declared = hints[field.name]
        inner = typing.get_args(declared)[0] if typing.get_origin(declared) is typing.Annotated else declared
        members = typing.get_args(inner) or (inner,)
        if int in members or float in members:
            assert typing.get_origin(declared) is typing.Annotated, f"{field.name} declares no bounds"
            assert any(isinstance(c, FieldInfo) and c.metadata for c in typing.get_args(declared)[1:]), field.name
        assert (field.name in RUN_IDENTITY_FIELDS) != (field.name in RESUMABLE_FIELDS), field.name


def test_the_recipe_refuses_before_it_builds_or_writes_anything(toy_editor_path, editing_requests, tmp_path, capsys):
    out = tmp_path / "run"
    config = toy_config(toy_editor_path, editing_requests, out)
    yaml_path = write_run_yaml(tmp_path / "run.yaml", config)
    text = open(yaml_path).read().replace("per_device_batch_size: 8", "per_device_batch_size: 0")
    (tmp_path / "bad.yaml").write_text(text)
    assert recipe_cli("--config", str(tmp_path / "bad.yaml"), "--build_tiny_editor", "flux2-klein",
                      "--model_name_or_path", str(tmp_path / "tiny"), "--report_to", "tensorbord") == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert "per_device_batch_size must be an integer >= 1, got 0" in err and "did you mean 'tensorboard'" in err
    assert not out.exists() and not (tmp_path / "tiny").exists()  # nothing built, nothing written


def test_field_checks_read_the_declared_types():
    @dataclasses.dataclass
    class Settings:
        size: typing.Annotated[typing.Optional[int], Field(ge=1)] = None
        mode: typing.Annotated[str, one_of("sde", "cps")] = "sde"
        names: typing.Optional[list[str]] = None
        flag: bool = False

    assert field_problems(Settings()) == []
    assert field_problems(Settings(size=3, names=["a"], flag=True)) == []
    assert field_problems(Settings(size=0, mode="cp", names=["a", 2], flag=1)) == [
        "size must be an integer >= 1 or None, got 0", "mode must be one of sde, cps, got 'cp' (did you mean 'cps'?)",
        "names must be a list of strings or None, got ['a', 2]", "flag must be true or false, got 1"]
    assert suggestion("TensorBord", ["none", "tensorboard"]) == " (did you mean 'tensorboard'?)"
    assert suggestion("xyz", ["none", "tensorboard"]) == ""
