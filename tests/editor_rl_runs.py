"""Shared settings of the editor-RL trainer tests: a toy-editor or tiny-diffusers run config."""

from __future__ import annotations

from modeling_miescore.training.editor_rl.config import FlowGRPOConfig

TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"
REDNESS = "modeling_miescore.testing.editor_rewards:mean_redness"


def toy_config(model, dataset, output_dir, **overrides) -> FlowGRPOConfig:
    """A fast run on the toy editor: 2 groups of 4 per step, 4 denoising steps, rewards = redness."""
    settings = dict(editor=TOY, model_name_or_path=str(model), dtype="float32", dataset=str(dataset), reward=REDNESS,
                    num_generations=4, num_inference_steps=4, per_device_batch_size=8, updates_per_step=2,
                    learning_rate=1e-2, lora_rank=4, lora_alpha=8, beta=0.0, clip_range_low=1e-2,
                    clip_range_high=1e-2, noise_level=1.0, max_steps=6, save_steps=3, sample_grid_steps=0,
                    output_dir=str(output_dir), progress=False, seed=0)
    settings.update(overrides)
    return FlowGRPOConfig(**settings)


def write_run_yaml(path, config: FlowGRPOConfig) -> str:
    """``config`` as a recipe YAML (every field), for subprocess runs of ``trainers/flow_grpo_editor.py``."""
    import dataclasses

    import yaml

    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    path.write_text(yaml.safe_dump({k: v for k, v in fields.items() if v is not None}))
    return str(path)
