"""Editor RL (Flow-GRPO) on the CPU: the reward phase, measured as ratios within one run.

One function per section, registered in ``SECTIONS`` (``--sections a,b``; default all):

* ``reward_prefix_reuse``: the reward phase of one RL step, ``MIEScoreReward.score_groups`` (the code path of
  ``--reward miescore:CKPT``) on groups of G = 12 edits of 2 sources, with each group's shared prefix run once
  vs every edit's full prompt; at the tiny width and at Qwen3-VL-8B width (one layer each side,
  ``testing.qwen3vl_shapes``). Both paths alternate every repeat; the CPU-time ratio is the steadier figure on
  a shared machine. Next to it the token ceiling G*L / (P + G*S) (L: a full prompt's tokens, P: the shared
  prefix, S: one edit's suffix) and the largest reward difference between the paths.
* ``reward_overlap``: the trainer itself (``FlowGRPOEditorTrainer`` on a tiny random diffusers editor) rewarded by
  the tiny MIEScore (``MIEScoreReward``, the code path of ``--reward miescore:CKPT``, real CPU work), with
  ``--overlap-batches`` rollout batches per step, run twice: sequential (a reward worker whose ``submit`` waits,
  so batch k+1 samples only after batch k's rewards) and overlapped (the trainer's ``RewardWorker``: batch k is
  scored while batch k+1 samples). Overlap exists only across the rollout batches of one step: the last batch's
  reward and the update are never hidden (one batch per step overlaps nothing). From the sequential run's
  measured phase seconds per batch (sampling s, reward r) and per step (update u) the ideal overlapped step is
  ``s + (B - 1) max(s, r) + r + u`` against ``B (s + r) + u``; the table gives both step times (mean over steps
  2.., step 1 warms up), their ratio, that ideal and the share of reward time the loop did not wait for.
* ``variants``: the cost of the Flow-GRPO variants on the tiny recipe (``flow_grpo_editor_tiny_cpu.yaml``: tiny
  Flux2-Klein, redness reward) at ``--variant-denoising-steps`` steps: ``fraction`` (full SDE, OmniGen2-RL),
  ``sde_window`` (per-member ODE prefixes) and ``fast`` (Flow-GRPO-Fast: one shared prefix per group), the last
  two with a window of 2 in ``[0, 0.75) x T``: seconds per step, transformer calls and rows per step (rollout and
  training together, counted by a hook on the transformer), and the mean reward at steps 10 / 20 / 30 for each of
  ``--variant-seeds``.
* ``phases``: the trainer (``FlowGRPOEditorTrainer``, the code path of ``trainers/flow_grpo_editor.py``) on tiny
  random diffusers editors (built offline) with the tiny redness reward, ``--phase-steps`` steps; the seconds of
  each phase per step as the trainer logs them in ``metrics.jsonl``: rollout (the stock pipeline's sampling with
  recording), reward (the reward's own compute, on the worker thread), reward wait (what the loop waited for it),
  update (recomputing the trained steps, clipped ratio + KL, backward, optimizer). Step 1 is a warm-up and left
  out; the table gives the mean of the others and each phase's share of the step.

    python benchmarks/bench_editor_rl.py                                    # both sections, tiny and 8B width
    python benchmarks/bench_editor_rl.py --sections reward_prefix_reuse --widths tiny
    python benchmarks/bench_editor_rl.py --sections phases --editors flux2-klein --phase-steps 6 --threads 1
    python benchmarks/bench_editor_rl.py --sections reward_overlap --threads 1
    python benchmarks/bench_editor_rl.py --sections variants --threads 1
    python benchmarks/bench_editor_rl.py --quick                            # seconds: checks the script

The 8B-wide checkpoint (3.6 GB, minutes to build) is kept in ``--checkpoint-dir`` when one is given.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from bench_common import (group_of_edits, interleaved_best, real_photos, sectioned_args, shaped_checkpoint,
                          tiny_scorer, titled_table)
from realistic_costs import token_counts

OPTIONS = [  # (flag, type, default, help); a string starts the options of a section
    ("--sections", str, "reward_prefix_reuse,reward_overlap,phases,variants", "sections to run, comma-separated"),
    ("--quick", bool, None, "tiny sizes: checks the script in seconds"),
    "reward_prefix_reuse",
    ("--widths", str, "tiny,8b", "backbone widths (tiny, 8b, 2b)"),
    ("--group-size", int, 12, "edits per group (G; the paper's 12, appendix B.2.1)"),
    ("--groups", int, 2, "groups per reward call at the tiny width"),
    ("--image", int, 512, "image side at the tiny width"),
    "reward_prefix_reuse at 8B / 2B width",
    ("--wide-groups", int, 1, "groups per reward call"),
    ("--wide-image", int, 256, "image side"),
    ("--wide-repeats", int, 1, "timed repeats"),
    ("--checkpoint-dir", str, None, "keep the 8B/2B-wide checkpoints here between runs"),
    "reward_overlap",
    ("--steps", int, 4, "RL steps per run (the first is a warm-up)"),
    ("--overlap-batches", int, 3, "rollout batches per step (B)"),
    ("--overlap-editor", str, "flux2-klein", "tiny editor"),
    "phases",
    ("--editors", str, "flux2-klein,qwen-image-edit-plus", "tiny editors"),
    ("--phase-steps", int, 6, "training steps per editor (the first is a warm-up)"),
    ("--phase-group-size", int, 4, "G, edits per group"),
    ("--phase-groups", int, 2, "groups per step"),
    ("--denoising-steps", int, 4, "T, denoising steps per rollout"),
    ("--beta", float, 0.04, "KL weight (0 skips the reference forward)"),
    "variants",
    ("--variant-steps", int, 30, "training steps per run"),
    ("--variant-seeds", str, "0,1,2", "seeds"),
    ("--variant-denoising-steps", int, 8, "T"),
]
QUICK = dict(widths="tiny", group_size=3, groups=2, image=128, steps=2, repeats=1, editors="flux2-klein",
             phase_steps=2, phase_group_size=2, phase_groups=1, denoising_steps=3, overlap_batches=2,
             variant_steps=2, variant_seeds="0", variant_denoising_steps=4)


def rl_groups(count: int, group_size: int, size: int, num_sources: int = 2) -> list:
    """``count`` editor-RL groups of real photos: group g takes its sources from a rotation of the photos and its
    G edits are noisy copies of the other photos (``bench_common.group_of_edits``)."""
    from modeling_miescore.rewards.groups import EditGroup, group_key

    photos = real_photos(size)
    groups = []
    for g in range(count):
        rotated = photos[g % len(photos):] + photos[:g % len(photos)]
        samples = group_of_edits(rotated, num_sources, group_size, seed=g)
        instruction = f"{samples[0]['instruction']} (prompt {g})"
        ids = tuple(f"photo-{(g + i) % len(photos)}" for i in range(num_sources))
        groups.append(EditGroup(group_key(ids, instruction), tuple(samples[0]["sources"]), instruction,
                                tuple(s["edited"] for s in samples), ids))
    return groups


def scorer(width: str, folder: Path):
    if width == "tiny":
        return tiny_scorer()
    from modeling_miescore.scoring.loading import load_scorer

    return load_scorer(str(shaped_checkpoint(width, folder)), device="cpu", dtype="float32")


def _rewards(scores) -> list:
    return [r for group in scores for r in group.rewards]


def _prefix_reuse_row(width: str, args, folder: Path) -> list:
    from modeling_miescore.rewards.backends import MIEScoreReward

    count, size, repeats = (args.groups, args.image, args.repeats) if width == "tiny" else (
        args.wide_groups, args.wide_image, args.wide_repeats)
    model = scorer(width, folder)
    groups = rl_groups(count, args.group_size, size)
    reuse, full = MIEScoreReward(model), MIEScoreReward(model, reuse_prefix=False)
    first = groups[0]
    reuse.score_groups([type(first)(first.key, first.sources, first.instruction, first.edits[:2])])  # warm-up
    (full_t, full_cpu, full_scores), (reuse_t, reuse_cpu, reuse_scores) = interleaved_best(
        [lambda: full.score_groups(groups), lambda: reuse.score_groups(groups)], repeats)
    diff = max(abs(a - b) for a, b in zip(_rewards(full_scores), _rewards(reuse_scores)))
    length, prefix, suffix, _ = token_counts(model, {"sources": list(first.sources), "edited": first.edits[0],
                                                     "instruction": first.instruction})
    ceiling = args.group_size * length / (prefix + args.group_size * suffix)
    return [width, f"{size}²", f"{count} × {args.group_size}", f"{length} / {prefix} / {suffix}", f"{ceiling:.2f}×",
            f"{full_t:.2f}", f"{reuse_t:.2f}",
            f"{full_t / reuse_t:.2f}×", f"**{full_cpu / reuse_cpu:.2f}×**", f"{count * args.group_size / reuse_t:.2f}",
            f"{diff:.1e}"]


def section_reward_prefix_reuse(args, folder: Path) -> str:
    rows = []
    for width in args.widths:
        rows.append(_prefix_reuse_row(width, args, folder))
        print(rows[-1], flush=True)
    title = (f"Reward phase, MIEScore prefix reuse vs none (groups of G = {args.group_size}, 2 sources, CPU "
             f"{args.threads} threads, best of {args.repeats} at tiny / {args.wide_repeats} at 8B width)")
    return titled_table(title, ["width", "image", "groups × G", "L / P / S tokens", "token ceiling", "none s",
                                  "reuse s", "speed-up (wall)",
                                  "speed-up (CPU)", "edits/s with reuse", "largest reward difference"], rows)


def _tiny_run_config(editor: str, folder: Path, name: str, **overrides):
    """A trainer config on the tiny ``editor`` (built in ``folder``) with the tiny requests and the redness reward."""
    from modeling_miescore.testing.editing_requests import write_editing_requests
    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS, build_tiny_editor
    from modeling_miescore.training.editor_rl.config import FlowGRPOConfig

    model = folder / editor
    if not (model / "model_index.json").is_file():
        build_tiny_editor(editor, model)
    requests = folder / "requests" / "rows.jsonl"
    if not requests.is_file():
        write_editing_requests(requests)
    settings = dict(editor=editor, model_name_or_path=str(model), editor_options=TINY_EDITOR_OPTIONS[editor],
                    dtype="float32", dataset=str(requests), reward="modeling_miescore.testing.editor_rewards:"
                    "mean_redness", cfg_scale=1.0, lora_rank=4, lora_alpha=8, learning_rate=1e-2,
                    sample_grid_steps=0, output_dir=str(folder / name), overwrite_output_dir=True, progress=False)
    settings.update(overrides)
    settings.setdefault("save_steps", settings.get("max_steps", 1))
    return FlowGRPOConfig(**settings)


def _metrics(folder: Path) -> list:
    import json

    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


class SequentialRewardWorker:
    """The trainer's reward worker without the overlap: ``submit`` returns only once the batch is scored (on the
    same worker thread as the overlapped run, so the two differ only in the overlap)."""

    def __init__(self, reward):
        from modeling_miescore.rewards.worker import RewardWorker

        self.worker = RewardWorker(reward)

    def submit(self, groups):
        future = self.worker.submit(groups)
        future.exception()  # wait (the trainer's result() then raises what the reward raised)
        return future

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.worker.__exit__(*exc)


def section_reward_overlap(args, folder: Path) -> str:
    from modeling_miescore.rewards.backends import MIEScoreReward
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    scorer_model = scorer("tiny", folder)
    batches, g = args.overlap_batches, args.phase_group_size
    runs = {}
    for name in ("sequential", "overlapped", "sequential", "overlapped")[:2 if args.repeats < 2 else 4]:
        config = _tiny_run_config(args.overlap_editor, folder, f"overlap-{name}", num_generations=g,
                                  num_inference_steps=args.denoising_steps, per_device_batch_size=g,
                                  rollout_batches_per_step=batches, updates_per_step=1, beta=args.beta,
                                  max_steps=args.steps, reward="miescore:tiny")
        trainer = FlowGRPOEditorTrainer(config, reward=MIEScoreReward(scorer_model))
        if name == "sequential":
            trainer.reward_worker_class = SequentialRewardWorker
        trainer.train()
        timed = _metrics(Path(config.output_dir))[1:]
        step = sum(m["seconds_step"] for m in timed) / len(timed)
        if name not in runs or step < runs[name]["step"]:  # the better of the repeats
            runs[name] = {"step": step, **{k: sum(m[f"seconds_{k}"] for m in timed) / len(timed)
                                           for k in ("rollout", "reward", "reward_wait", "update")}}
    seq, over = runs["sequential"], runs["overlapped"]
    s, r = seq["rollout"] / batches, seq["reward"] / batches
    # the sequential step is B (s + r) + the rest (update, advantages, logging), never overlapped
    other = seq["step"] - seq["rollout"] - seq["reward"]
    ideal_step = s + (batches - 1) * max(s, r) + r + other
    hidden = 1 - over["reward_wait"] / over["reward"]
    row = [args.overlap_editor, f"{batches} × (1 × {g})", args.steps - 1, f"{s:.3f}", f"{r:.3f}", f"{other:.3f}",
           f"{seq['step']:.3f}", f"{over['step']:.3f}", f"{ideal_step:.3f}",
           f"**{seq['step'] / over['step']:.2f}×**", f"{seq['step'] / ideal_step:.2f}×", f"{100 * hidden:.0f} %"]
    print(row, flush=True)
    title = (f"Reward overlapped with sampling inside FlowGRPOEditorTrainer (tiny MIEScore reward, T = "
             f"{args.denoising_steps}, CPU {args.threads} threads; phase seconds from the sequential run)")
    return titled_table(title, ["editor", "batches × groups × G", "steps timed", "sample s / batch",
                                "reward s / batch", "update + other s", "sequential s / step",
                                "overlapped s / step", "ideal overlapped s / step", "speed-up", "ideal speed-up",
                                "reward time hidden (overlapped)"], [row])


def _counting(transformer) -> dict:
    """Calls and batch rows the transformer really computes (a hook on its first submodule that takes the
    hidden states: a call the rollout answers without the network never reaches it)."""
    import torch

    counts = {"calls": 0, "rows": 0}
    first = next(m for m in transformer.modules() if isinstance(m, torch.nn.Linear))

    def hook(module, inputs):
        counts["calls"] += 1
        counts["rows"] += inputs[0].shape[0]

    first.register_forward_pre_hook(hook)
    return counts


def section_variants(args, folder: Path) -> str:
    """Module docstring: ``variants``."""
    import yaml

    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS
    from modeling_miescore.training.editor_rl.editors import load_editor
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    recipe = yaml.safe_load((Path(__file__).resolve().parents[1] / "trainers" / "configs" /
                             "flow_grpo_editor_tiny_cpu.yaml").read_text())
    editor_name = recipe["editor"]
    recipe = {k: v for k, v in recipe.items() if not k.startswith("build_") and k not in (
        "editor", "model_name_or_path", "dataset", "output_dir", "editor_options")}
    window = dict(window_size=2, window_start=0.0, window_end=0.75)
    variants = {"fraction (full SDE)": dict(train_steps="fraction"), "sde_window (per-member prefix)":
                dict(train_steps="sde_window", **window), "fast (shared prefix)": dict(train_steps="fast", **window)}
    rows, marks = [], [m for m in (10, 20, 30) if m <= args.variant_steps] or [args.variant_steps]
    for label, overrides in variants.items():
        seconds, calls, rewards = [], [], {}
        for seed in map(int, args.variant_seeds.split(",")):
            config = _tiny_run_config(editor_name, folder, f"variant-{overrides['train_steps']}-{seed}",
                                      **{**recipe, **overrides, "seed": seed, "max_steps": args.variant_steps,
                                         "num_inference_steps": args.variant_denoising_steps, "save_steps":
                                         args.variant_steps, "sample_grid_steps": 0, "progress": False})
            editor = load_editor(config.editor, config.model_name_or_path, options=TINY_EDITOR_OPTIONS[config.editor])
            counts = _counting(editor.transformer)
            FlowGRPOEditorTrainer(config, editor=editor).train()
            metrics = _metrics(Path(config.output_dir))
            seconds.append(sum(m["seconds_step"] for m in metrics[1:] or metrics) / len(metrics[1:] or metrics))
            calls.append((counts["calls"] / len(metrics), counts["rows"] / len(metrics)))
            rewards[seed] = [metrics[m - 1]["reward_mean"] for m in marks]
            print(label, seed, f"{seconds[-1]:.2f} s/step", rewards[seed], flush=True)
        rows.append([label, f"{sum(seconds) / len(seconds):.2f}", f"{sum(c for c, _ in calls) / len(calls):.0f}",
                     f"{sum(r for _, r in calls) / len(calls):.0f}",
                     *[" / ".join(f"{rewards[s][k]:.4f}" for s in rewards) for k in range(len(marks))]])
    title = (f"Flow-GRPO variants on the tiny recipe (T = {args.variant_denoising_steps}, window 2 in [0, 0.75) × T, "
             f"seeds {args.variant_seeds}; CPU {args.threads} threads; calls and rows: rollout + training per step)")
    return titled_table(title, ["train_steps", "s / step", "transformer calls / step", "transformer rows / step",
                                *[f"reward at step {m} (per seed)" for m in marks]], rows)


def _phase_row(editor: str, args, folder: Path) -> list:
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    config = _tiny_run_config(editor, folder, f"run-{editor}", num_generations=args.phase_group_size,
                              num_inference_steps=args.denoising_steps, updates_per_step=1, beta=args.beta,
                              per_device_batch_size=args.phase_group_size * args.phase_groups,
                              max_steps=args.phase_steps)
    FlowGRPOEditorTrainer(config).train()
    lines = _metrics(Path(config.output_dir))
    timed = lines[1:] or lines
    mean = {k: sum(m[f"seconds_{k}"] for m in timed) / len(timed)
            for k in ("rollout", "reward", "reward_wait", "update", "step")}
    share = {k: 100 * mean[k] / mean["step"] for k in ("rollout", "reward_wait", "update")}
    return [editor, f"{args.phase_groups} × {args.phase_group_size}", args.denoising_steps, len(timed),
            f"{mean['rollout']:.2f} ({share['rollout']:.0f} %)", f"{mean['reward']:.4f}",
            f"{mean['reward_wait']:.4f} ({share['reward_wait']:.0f} %)",
            f"{mean['update']:.2f} ({share['update']:.0f} %)", f"{mean['step']:.2f}"]


def section_phases(args, folder: Path) -> str:
    rows = []
    for editor in args.editors.split(","):
        rows.append(_phase_row(editor, args, folder))
        print(rows[-1], flush=True)
    title = (f"Seconds per phase of one Flow-GRPO step (tiny random editors, redness reward, beta {args.beta}, "
             f"CPU {args.threads} threads; mean over steps 2..{args.phase_steps})")
    return titled_table(title, ["editor", "groups × G", "T", "steps timed", "rollout s (share)", "reward s",
                                  "reward wait s (share)", "update s (share)", "step s"], rows)


SECTIONS = {"reward_prefix_reuse": section_reward_prefix_reuse, "reward_overlap": section_reward_overlap,
            "phases": section_phases, "variants": section_variants}


def main(argv=None):
    _, args = sectioned_args(__doc__, OPTIONS, SECTIONS, QUICK, repeats=3, argv=argv)
    args.widths = args.widths.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.checkpoint_dir or tmp)
        for name in args.sections:
            started = time.perf_counter()
            print(SECTIONS[name](args, folder), flush=True)
            print(f"({name}: {time.perf_counter() - started:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main()
