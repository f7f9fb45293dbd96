"""Shared by the MIEScore training tests: the tiny MIE-Bench fixture and short runs of trainers/train_miescore.py
on trainers/configs/tiny_cpu.yaml."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "trainers"))
import train_miescore  # noqa: E402

SHORT_SKILL = "Rate the edit."
TINY_YAML = ROOT / "trainers" / "configs" / "tiny_cpu.yaml"
PAPER_YAML = ROOT / "trainers" / "configs" / "miescore_qwen3vl_8b.yaml"


def build_dataset(root: Path, n_instances: int, seed: int = 0) -> Path:
    """A Hub-native MIE-Bench folder from the real-photo raw fixture (``root/ds``)."""
    from modeling_miescore.data.builders.mie_bench import build_mie_bench
    from modeling_miescore.testing import make_raw_mie_bench

    make_raw_mie_bench(root / "raw", n_instances=n_instances, seed=seed)
    # hash split: the per-task 3:1:1 default leaves a 6-instance fixture (one per task) without validation rows
    build_mie_bench(root / "raw", root / "ds", overwrite=True, progress=False, split_method="hash")
    return root / "ds"


def config_args(config: Path, **overrides) -> list[str]:
    """``--config config`` and ``--key value`` per override (None values are left out)."""
    argv = ["--config", str(config)]
    for key, value in overrides.items():
        if value is not None:
            argv += [f"--{key}", str(value)]
    return argv


def tiny_run_args(dataset, model, output_dir, **overrides) -> list[str]:
    """tiny_cpu.yaml, shrunk to a few steps on a handful of rows, no evaluation unless asked."""
    base = dict(dataset=dataset, model_name_or_path=model, output_dir=output_dir, skill=SHORT_SKILL,
                per_device_train_batch_size=2, max_train_samples=8, eval_split="", eval_strategy="no",
                save_strategy="no", load_best_model_at_end="false", logging_steps=1, num_train_epochs=1,
                disable_tqdm="true")
    base.update(overrides)
    return config_args(TINY_YAML, **base)


def parse(argv):
    return train_miescore.make_parser().parse_args_and_config(argv)
