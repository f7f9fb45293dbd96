"""Shared settings of the editor-RL trainer tests: a toy-editor or tiny-diffusers run config, the recipe's own
entry on such a config, and a `miescore serve` backend that remembers what it was sent."""

from __future__ import annotations

import sys
from pathlib import Path

from modeling_miescore.serving.backends import MIEScoreBackend
from modeling_miescore.training.editor_rl.config import FlowGRPOConfig

RECIPE = Path(__file__).resolve().parents[1] / "trainers" / "flow_grpo_editor.py"

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


def recipe_cli(*args: str) -> int:
    """``trainers/flow_grpo_editor.py ARGS`` in this process, through the recipe's own ``cli`` (TrlParser, the
    exit statuses)."""
    if str(RECIPE.parent) not in sys.path:
        sys.path.insert(0, str(RECIPE.parent))
    import flow_grpo_editor

    return flow_grpo_editor.cli(list(args))


def run_recipe(config: FlowGRPOConfig, *args: str) -> int:
    """:func:`recipe_cli` on ``--config <config as YAML, beside config.output_dir> ARGS``."""
    out = Path(config.output_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    return recipe_cli("--config", write_run_yaml(out.parent / f"{out.name}.yaml", config), *args)


class RecordingBackend(MIEScoreBackend):
    """MIEScore backend that remembers each sample it prepared: (instruction, group id given by the server)."""

    def __init__(self, model):
        super().__init__(model)
        self.seen = []

    def prepare(self, samples, group_ids=None):
        self.seen += [(s.instruction, gid) for s, gid in zip(samples, group_ids or [None] * len(samples))]
        return super().prepare(samples, group_ids)
