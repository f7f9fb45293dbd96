"""GPU smoke test (issue 32): the package's GPU paths on one device, in bf16, with tiny offline models, in minutes.

Run it first on a lent GPU machine, before ``gpu_throughput.py`` (which takes the rest of the lease):

    python benchmarks/gpu_smoke.py                          # CUDA, bf16 (the default); < 5 minutes on one GPU
    python benchmarks/gpu_smoke.py --device cpu --quick     # the dry run of the default test suite (CPU, smaller)

Each check prints one line, ``PASS name: figures`` or ``FAIL name: reason``; the script stops with exit status 1
at the first failure (2 for a bad option). Checks, all through the package's real entry points:

1. ``environment``: the device, torch, bf16 support;
2. ``recipe <editor>`` for each editor of ``testing.tiny_editors.TINY_EDITOR_BUILDERS``: the tiny editor-RL recipe
   (``trainers/flow_grpo_editor.py --config`` a copy of ``trainers/configs/flow_grpo_editor_tiny_cpu.yaml`` with
   that editor) for 3 steps: exit 0, finite rewards / losses / gradient norms, the first step's ``ratio_mean``
   near 1, the adapter and a sample grid written;
3. ``edit <editor>``: ``miescore edit`` with the run's LoRA (``cli.main.main``): every edit written;
4. ``miescore score``: the tiny MIEScore (``load_scorer``; LM weights sharpened so positions matter) with and
   without shared-prefix reuse, two groups of four edits: the largest difference within 1e-3 points (fp32) or
   1 point and a quarter of the scores' spread (bf16: one rounding step of the last hidden state,
   docs/prefix_reuse.md "How exact");
5. ``spatialreward generate``: the tiny SpatialReward with and without prefix reuse: every greedy text equal
   (fp32) or at least 3 of 4 (bf16: a near-tie may flip a greedy token, docs/prefix_reuse.md);
6. ``server``: ``serving.backends.load_backend`` + ``create_app`` (what ``miescore serve`` runs) on a background
   thread, one ``RewardClient.score_batch`` request: the scores the model gives directly;
7. ``ratio``: the paper's sampling (trainers/configs/flow_grpo_editor_paper.yaml: G = 12, T = 20, noise 0.7, CFG
   4 on 60 % of the steps, clip [1e-4, 5e-4], beta 0.04) on the tiny Qwen-Image-Edit-Plus for one step of one
   update, ``train_batch_size`` 6 vs 12 (issue 32 section 2): prints ``ratio_mean`` and ``clipfrac`` at that
   first update for both (fully on-policy, so any departure from 1 is numerical); fails only when a figure is not
   finite, or in fp32 when the micro-batch equal to G is not exactly on-policy.

Everything is built offline under ``--work`` (a temporary folder by default; nothing is downloaded). Peak device
memory is printed per check on CUDA.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY_RECIPE = ROOT / "trainers" / "configs" / "flow_grpo_editor_tiny_cpu.yaml"
PAPER_RECIPE = ROOT / "trainers" / "configs" / "flow_grpo_editor_paper.yaml"
# the paper's sampling and objective, for the ratio check (read from the paper YAML, not restated here)
PAPER_KEYS = ("num_generations", "num_inference_steps", "noise_level", "sde_type", "train_steps", "train_fraction",
              "cfg_scale", "cfg_fraction", "clip_range_low", "clip_range_high", "beta", "kl_keep_dt", "lora_rank",
              "lora_alpha", "lora_dropout", "learning_rate", "adam_beta1", "adam_beta2", "weight_decay",
              "max_grad_norm", "gradient_checkpointing", "seed")
RATIO_EDITOR = "qwen-image-edit-plus"  # the paper YAML's editor


class CheckFailed(Exception):
    """A check's reason for failing (one line)."""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Checks: see the module docstring "
                                     "(benchmarks/gpu_smoke.py).")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                        help="cuda (the smoke test; the first GPU) or cpu (a dry run of the same code)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"), help="weights dtype")
    parser.add_argument("--steps", type=int, default=3, help="RL steps per editor (default 3)")
    parser.add_argument("--quick", action="store_true", help="smaller runs (2 edits per group, 2 RL steps; the ratio "
                        "check with G = 4, T = 3): the CPU dry run of the test suite")
    parser.add_argument("--work", default=None, help="folder for the tiny models and runs (default: a temporary "
                        "folder, removed at the end)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    return args


class Smoke:
    """The checks (module docstring); :meth:`check` prints one line per check and stops at the first failure."""

    def __init__(self, args):
        import torch

        self.args, self.torch = args, torch
        self.cuda = args.device == "cuda"
        self.memory = self.cuda and torch.cuda.is_available()  # peak memory per check (none before the check)
        self.work = Path(args.work or tempfile.mkdtemp(prefix="miescore-gpu-smoke-"))
        self.steps = min(args.steps, 2) if args.quick else args.steps

    # ------------------------------------------------------------------ running checks
    def check(self, name: str, run) -> None:
        """Run one check with its output held back (shown, last lines first, only when it fails)."""
        if self.memory:
            self.torch.cuda.reset_peak_memory_stats()
        began = time.perf_counter()
        held = io.StringIO()
        try:
            with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held):
                figures = run()
        except Exception as error:  # noqa: BLE001 - any fault of a path is that check's failure, said in one line
            reason = str(error) if isinstance(error, CheckFailed) else f"{type(error).__name__}: {error}"
            print(f"FAIL {name}: {reason}", flush=True)
            tail = held.getvalue().strip().splitlines()[-20:]
            if tail:
                print("  its last output:\n" + "\n".join(f"  | {line}" for line in tail), flush=True)
            raise SystemExit(1) from None
        extra = f", {time.perf_counter() - began:.1f} s"
        if self.memory:
            extra += f", peak {self.torch.cuda.max_memory_allocated() / 2 ** 20:.0f} MiB"
        print(f"PASS {name}: {figures}{extra}", flush=True)

    def run_all(self) -> None:
        from modeling_miescore.testing.tiny_editors import TINY_EDITOR_BUILDERS

        self.check("environment", self.environment)
        for editor in TINY_EDITOR_BUILDERS:
            self.check(f"recipe {editor}", lambda e=editor: self.recipe(e))
            self.check(f"edit {editor}", lambda e=editor: self.edit(e))
        self.check("miescore score", self.miescore_reuse)
        self.check("spatialreward generate", self.spatialreward_reuse)
        self.check("server", self.server)
        self.check("ratio", self.ratio)

    # ------------------------------------------------------------------ inputs (offline)
    def environment(self) -> str:
        torch = self.torch
        if self.cuda and not torch.cuda.is_available():
            raise CheckFailed("--device cuda but torch sees no CUDA device; use --device cpu for a dry run")
        if not self.cuda and torch.cuda.is_available():
            os.environ["ACCELERATE_USE_CPU"] = "true"  # the recipe's Accelerator would take the GPU otherwise
        where = (f"{torch.cuda.get_device_name(0)} (capability {'.'.join(map(str, torch.cuda.get_device_capability(0)))})"
                 if self.cuda else "cpu")
        if self.cuda and self.args.dtype == "bfloat16" and not torch.cuda.is_bf16_supported():
            raise CheckFailed(f"{where} does not support bf16; rerun with --dtype float32")
        return f"{where}, torch {torch.__version__}, {self.args.dtype}, work folder {self.work}"

    def requests(self, editor: str) -> Path:
        """Tiny editing requests (JSONL + PNG sources); single-source ones for editors that take one source."""
        from modeling_miescore.testing.editing_requests import write_editing_requests
        from modeling_miescore.training.editor_rl.editors import EDITORS

        every = self.work / "requests" / "rows.jsonl"
        if not every.is_file():
            write_editing_requests(every)
        if EDITORS[editor].max_sources != 1:
            return every
        single = every.with_name("single-source.jsonl")
        if not single.is_file():
            lines = [line for line in every.read_text().splitlines() if len(json.loads(line)["sources"]) == 1]
            single.write_text("\n".join(lines) + "\n")
        return single

    def run_recipe(self, editor: str, out: Path, **overrides) -> list:
        """The recipe's own CLI on the tiny YAML with ``editor`` and ``overrides``; its metrics, one dict a step."""
        import yaml

        from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS

        fields = yaml.safe_load(TINY_RECIPE.read_text())
        fields.update(build_tiny_editor=editor, editor=editor, editor_options=TINY_EDITOR_OPTIONS[editor],
                      model_name_or_path=str(self.work / "editors" / editor), dataset=str(self.requests(editor)),
                      output_dir=str(out), dtype=self.args.dtype, max_steps=self.steps, save_steps=self.steps,
                      sample_grid_steps=self.steps, sample_grid_groups=1, progress=False, report_to="none",
                      overwrite_output_dir=True)
        if self.args.quick:
            fields.update(num_generations=2, per_device_batch_size=4)
        fields.update(overrides)
        out.parent.mkdir(parents=True, exist_ok=True)
        config = out.parent / f"{out.name}.yaml"
        config.write_text(yaml.safe_dump(fields))
        if str(ROOT / "trainers") not in sys.path:
            sys.path.insert(0, str(ROOT / "trainers"))
        import flow_grpo_editor

        status = flow_grpo_editor.cli(["--config", str(config)])
        if status != 0:
            raise CheckFailed(f"trainers/flow_grpo_editor.py --config {config} exited {status} (its message is above)")
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    # ------------------------------------------------------------------ the checks
    def recipe(self, editor: str) -> str:
        out = self.work / "runs" / editor
        metrics = self.run_recipe(editor, out)
        if len(metrics) != self.steps:
            raise CheckFailed(f"{len(metrics)} metric lines for {self.steps} steps")
        for record in metrics:
            for key in ("reward_mean", "loss", "grad_norm", "ratio_mean"):
                if not math.isfinite(record[key]):
                    raise CheckFailed(f"{key} = {record[key]} at step {record['step']}")
        if abs(metrics[0]["ratio_mean"] - 1) > 0.05:
            raise CheckFailed(f"ratio_mean {metrics[0]['ratio_mean']:.4f} at step 1 (nearly on-policy: ~1)")
        missing = [p for p in ("pytorch_lora_weights.safetensors", f"samples/step-{self.steps:06d}.png")
                   if not (out / p).is_file()]
        if missing:
            raise CheckFailed(f"the run wrote no {', '.join(missing)}")
        rewards = " ".join(f"{r['reward_mean']:.4f}" for r in metrics)
        return (f"{self.steps} steps, reward_mean {rewards}, ratio_mean(step 1) {metrics[0]['ratio_mean']:.6f}, "
                f"{sum(r['seconds_step'] for r in metrics) / len(metrics):.2f} s/step")

    def edit(self, editor: str) -> str:
        from PIL import Image

        from modeling_miescore.cli.main import main
        from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS

        out = self.work / "edits" / editor
        shutil.rmtree(out, ignore_errors=True)  # a rerun with the same --work makes its edits again
        status = main(["edit", "--pipeline", editor, "--model", str(self.work / "editors" / editor), "--lora",
                       str(self.work / "runs" / editor), "--input", str(self.requests(editor)), "--out", str(out),
                       "--limit", "2", "--steps", "4", "--num-images", "2", "--device", self.args.device,
                       "--dtype", self.args.dtype, "--editor-options", json.dumps(TINY_EDITOR_OPTIONS[editor]),
                       "--no-progress"])
        if status != 0:
            raise CheckFailed(f"miescore edit exited {status} (its message is above)")
        lines = [json.loads(line) for line in (out / "edits.jsonl").read_text().splitlines()]
        sizes = {Image.open(out / line["edited"]).size for line in lines}
        if len(lines) != 4:
            raise CheckFailed(f"{len(lines)} edits written, expected 4 (2 requests x 2)")
        return f"{len(lines)} edits with the run's LoRA, sizes {sorted(sizes)}"

    def samples(self) -> list:
        """Two groups of four edits (sources + instruction shared within a group), from the example photos."""
        from modeling_miescore.data.example_edits import example_edits

        examples = example_edits(max_side=96)
        return [{"sources": examples[g]["sources"], "edited": e["edited"], "instruction": examples[g]["instruction"]}
                for g in (0, 2) for e in examples[:4]]

    def miescore_reuse(self) -> str:
        from modeling_miescore.scoring.loading import load_scorer
        from modeling_miescore.testing import build_tiny_miescore
        from modeling_miescore.testing.tiny_models import sharpen_language_model

        path = self.work / "tiny-miescore"
        if not path.exists():
            build_tiny_miescore(path)
        model = sharpen_language_model(load_scorer(str(path), device=self.args.device, dtype=self.args.dtype))
        samples = self.samples()
        plain = model.score_batch(samples, batch_size=4, reuse_prefix=False)
        reused = model.score_batch(samples, batch_size=4, reuse_prefix=True)
        diff = max(abs(a[k] - b[k]) for a, b in zip(plain, reused) for k in a)
        spread = max(r["overall"] for r in plain) - min(r["overall"] for r in plain)
        tolerance = 1e-3 if self.args.dtype == "float32" else min(1.0, spread / 4)
        if not all(math.isfinite(v) for r in plain + reused for v in r.values()):
            raise CheckFailed("a score is not finite")
        if diff > tolerance:
            raise CheckFailed(f"prefix reuse differs by {diff:.4f} points (tolerance {tolerance:.4f})")
        return (f"{len(samples)} edits on {model.device}, reuse vs plain max diff {diff:.2e} points (tolerance "
                f"{tolerance:.2e}), overall spread {spread:.2f}")

    def spatialreward_reuse(self) -> str:
        from modeling_miescore.scoring.loading import load_spatialreward
        from modeling_miescore.testing import build_tiny_spatialreward

        path = self.work / "tiny-spatialreward"
        if not path.exists():
            build_tiny_spatialreward(path, max_new_tokens=8)
        model = load_spatialreward(str(path), device=self.args.device, dtype=self.args.dtype)
        samples = self.samples()
        plain = model.evaluate_edits(samples, batch_size=4, reuse_prefix=False)
        reused = model.evaluate_edits(samples, batch_size=4, reuse_prefix=True)
        same = sum(a.raw_sc == b.raw_sc and a.raw_pq == b.raw_pq for a, b in zip(plain, reused))
        needed = len(samples) if self.args.dtype == "float32" else math.ceil(0.75 * len(samples))
        if same < needed:
            raise CheckFailed(f"{same} of {len(samples)} greedy texts equal with and without prefix reuse "
                              f"(needed {needed})")
        distinct = len({str(r.raw_sc) for r in plain})
        return (f"{same}/{len(samples)} greedy texts equal with and without prefix reuse on {model.device} "
                f"({distinct} distinct SC texts)")

    def server(self) -> str:
        from modeling_miescore.serving.app import serve_in_background
        from modeling_miescore.serving.backends import load_backend
        from modeling_miescore.serving.reward_client import RewardClient
        from modeling_miescore.serving.settings import ServerSettings

        backend = load_backend(str(self.work / "tiny-miescore"), device=self.args.device, dtype=self.args.dtype)
        samples = self.samples()[:4]
        direct = backend.model.score_batch(samples, batch_size=4)
        with serve_in_background(backend, ServerSettings(max_wait_ms=20)) as server, \
                RewardClient(server.url, max_retries=0) as client:
            health = client.health()
            began = time.perf_counter()
            served = client.score_batch(samples)
            seconds = time.perf_counter() - began
        diff = max(abs(a[k] - b[k]) for a, b in zip(direct, served) for k in a)
        tolerance = 1e-3 if self.args.dtype == "float32" else 1.0
        if diff > tolerance:
            raise CheckFailed(f"the served scores differ from the model's by {diff:.4f} points")
        return (f"/health {health.get('status')}, one request of {len(samples)} edits in {seconds:.2f} s, "
                f"served vs direct max diff {diff:.2e}")

    def ratio(self) -> str:
        import yaml

        paper = yaml.safe_load(PAPER_RECIPE.read_text())
        settings = {k: paper[k] for k in PAPER_KEYS}
        if self.args.quick:  # the same comparison (half a group vs the group) at CPU-test size
            settings.update(num_generations=4, num_inference_steps=3)
        group = settings["num_generations"]
        settings.update(per_device_batch_size=group, rollout_batches_per_step=1, updates_per_step=1, max_steps=1,
                        save_steps=1, sample_grid_steps=0, max_train_rows=1)
        figures = {}
        for micro in (group // 2, group):
            metrics = self.run_recipe(RATIO_EDITOR, self.work / "runs" / f"ratio-{micro}", train_batch_size=micro,
                                      **settings)
            record = metrics[0]
            if not (math.isfinite(record["ratio_mean"]) and math.isfinite(record["clipfrac"])):
                raise CheckFailed(f"train_batch_size {micro}: ratio_mean {record['ratio_mean']}, clipfrac "
                                  f"{record['clipfrac']}")
            figures[micro] = record
        equal = figures[group]["ratio_mean"]
        if self.args.dtype == "float32" and abs(equal - 1) > 1e-6:
            raise CheckFailed(f"fp32, train_batch_size = G = {group}: ratio_mean {equal!r} at the first update, "
                              "expected exactly 1 (on-policy)")
        return (f"G = {group}, T = {settings['num_inference_steps']}, first update: " + "; ".join(
            f"train_batch_size {micro}: ratio_mean {r['ratio_mean']:.6f} clipfrac {r['clipfrac']:.4f}"
            for micro, r in figures.items()))

    def close(self) -> None:
        if not self.args.work:
            shutil.rmtree(self.work, ignore_errors=True)


class _CurrentStderr(logging.Handler):
    """Log records to whatever ``sys.stderr`` is when they are emitted (a check's held output)."""

    def emit(self, record):
        sys.stderr.write(self.format(record) + "\n")


def main(argv=None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    logging.basicConfig(level=logging.WARNING, handlers=[_CurrentStderr()])  # before the recipe's INFO config
    smoke = Smoke(args)
    try:
        smoke.run_all()
    except SystemExit as stop:
        return int(stop.code or 0)
    finally:
        smoke.close()
    print("gpu_smoke: every check passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
