"""Editor RL (Flow-GRPO) on the CPU: the reward phase, measured as ratios within one run.

One function per section, registered in ``SECTIONS`` (``--sections a,b``; default all):

* ``reward_prefix_reuse``: the reward phase of one RL step, ``MIEScoreReward.score_groups`` (the code path of
  ``--reward miescore:CKPT``) on groups of G = 12 edits of 2 sources, with each group's shared prefix run once
  vs every edit's full prompt; at the tiny width and at Qwen3-VL-8B width (one layer each side,
  ``testing.qwen3vl_shapes``). Both paths alternate every repeat; the CPU-time ratio is the steadier figure on
  a shared machine. Next to it the token ceiling G*L / (P + G*S) (L: a full prompt's tokens, P: the shared
  prefix, S: one edit's suffix) and the largest reward difference between the paths.
* ``reward_overlap``: S RL steps, each sampling a batch of groups and rewarding it, run sequentially (sample,
  then score) and overlapped through ``RewardWorker`` (score batch k while batch k+1 samples). The sampler is
  simulated: it sleeps as long as one reward call took (a policy sampling on another device; the trainer's
  own rollouts are not used here), so the ideal ratio is ``S(s + r) / (S max(s, r) + min(s, r))``. Both paths
  score on the worker's thread, so they differ only in the overlap; "hidden" is the share of the reward time
  the caller did not wait for (``RewardWorker.timing``).
* ``phases``: the trainer (``FlowGRPOEditorTrainer``, the code path of ``trainers/flow_grpo_editor.py``) on tiny
  random diffusers editors (built offline) with the tiny redness reward, ``--phase-steps`` steps; the seconds of
  each phase per step as the trainer logs them in ``metrics.jsonl``: rollout (the stock pipeline's sampling with
  recording), reward (the reward's own compute, on the worker thread), reward wait (what the loop waited for it),
  update (recomputing the trained steps, clipped ratio + KL, backward, optimizer). Step 1 is a warm-up and left
  out; the table gives the mean of the others and each phase's share of the step.

    python benchmarks/bench_editor_rl.py                                    # both sections, tiny and 8B width
    python benchmarks/bench_editor_rl.py --sections reward_prefix_reuse --widths tiny
    python benchmarks/bench_editor_rl.py --sections phases --editors flux2-klein --phase-steps 6 --threads 1
    python benchmarks/bench_editor_rl.py --quick                            # seconds: checks the script

The 8B-wide checkpoint (3.6 GB, minutes to build) is kept in ``--checkpoint-dir`` when one is given.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

from bench_common import (group_of_edits, interleaved_best, real_photos, sectioned_args, shaped_checkpoint,
                          tiny_scorer, titled_table)
from realistic_costs import token_counts

OPTIONS = [  # (flag, type, default, help); a string starts the options of a section
    ("--sections", str, "reward_prefix_reuse,reward_overlap,phases", "sections to run, comma-separated"),
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
    ("--steps", int, 4, "RL steps"),
    "phases",
    ("--editors", str, "flux2-klein,qwen-image-edit-plus", "tiny editors"),
    ("--phase-steps", int, 6, "training steps per editor (the first is a warm-up)"),
    ("--phase-group-size", int, 4, "G, edits per group"),
    ("--phase-groups", int, 2, "groups per step"),
    ("--denoising-steps", int, 4, "T, denoising steps per rollout"),
    ("--beta", float, 0.04, "KL weight (0 skips the reference forward)"),
]
QUICK = dict(widths="tiny", group_size=3, groups=2, image=128, steps=2, repeats=1, editors="flux2-klein",
             phase_steps=2, phase_group_size=2, phase_groups=1, denoising_steps=3)


def rl_groups(count: int, group_size: int, size: int, num_sources: int = 2) -> list:
    """``count`` editor-RL groups of real photos: group g takes its sources from a rotation of the photos and its
    G edits are noisy copies of the other photos (``bench_common.group_of_edits``)."""
    from modeling_miescore.training.editor_rl.reward_types import EditGroup, group_key

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
    from modeling_miescore.training.editor_rl.miescore_reward import MIEScoreReward

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


def section_reward_overlap(args, folder: Path) -> str:
    from modeling_miescore.training.editor_rl.miescore_reward import MIEScoreReward
    from modeling_miescore.training.editor_rl.reward_worker import RewardWorker

    reward = MIEScoreReward(scorer("tiny", folder))
    batches = [rl_groups(args.groups, args.group_size, args.image) for _ in range(args.steps)]
    worker = RewardWorker(reward)  # both paths score on the worker thread: they differ only in the overlap
    worker.submit(batches[0][:1]).result()  # warm-up
    reward_s = min(_timed(lambda: worker.submit(batches[0]).result()) for _ in range(max(1, args.repeats)))
    sample_s = reward_s  # the simulated sampler takes as long as the reward: the most overlap can hide

    def sample(k: int) -> list:
        time.sleep(sample_s)
        return batches[k]

    def sequential():
        for k in range(args.steps):
            worker.submit(sample(k)).result()

    def overlapped():
        pending = None
        for k in range(args.steps):
            batch = sample(k)  # batch k+1 samples while the worker scores batch k
            if pending is not None:
                pending.result()
            pending = worker.submit(batch)
        pending.result()

    hidden = {}

    def measured(name, run):
        def call():
            start = dataclasses.replace(worker.timing)
            run()
            spent = worker.timing
            hidden[name] = 1 - (spent.waited_s - start.waited_s) / (spent.reward_s - start.reward_s)
        return call

    (seq_t, _, _), (over_t, _, _) = interleaved_best(
        [measured("sequential", sequential), measured("overlapped", overlapped)], args.repeats)
    worker.close()
    s, r, n = sample_s, reward_s, args.steps
    ideal = n * (s + r) / (n * max(s, r) + min(s, r))
    row = [n, f"{args.groups} × {args.group_size}", f"{s:.2f}", f"{r:.2f}", f"{seq_t:.2f}", f"{over_t:.2f}",
           f"**{seq_t / over_t:.2f}×**", f"{ideal:.2f}×", f"{100 * max(0.0, hidden['sequential']):.0f} %",
           f"{100 * hidden['overlapped']:.0f} %"]
    print(row, flush=True)
    title = (f"Reward overlapped with sampling vs sequential (tiny MIEScore reward, {args.image}² images, simulated "
             f"sampler, CPU {args.threads} threads)")
    return titled_table(title, ["steps", "groups × G", "sample s", "reward s", "sequential s", "overlapped s",
                                  "speed-up", "ideal", "reward time hidden (sequential)",
                                  "reward time hidden (overlapped)"], [row])


def _phase_row(editor: str, args, folder: Path) -> list:
    import json

    from modeling_miescore.testing.editing_requests import write_editing_requests
    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS, build_tiny_editor
    from modeling_miescore.training.editor_rl.config import FlowGRPOConfig
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    model = build_tiny_editor(editor, folder / editor)
    requests = write_editing_requests(folder / "requests" / "rows.jsonl")
    run = folder / f"run-{editor}"
    config = FlowGRPOConfig(
        editor=editor, model_name_or_path=str(model), editor_options=TINY_EDITOR_OPTIONS[editor], dtype="float32",
        dataset=str(requests), reward="modeling_miescore.testing.editor_rewards:mean_redness",
        num_generations=args.phase_group_size, num_inference_steps=args.denoising_steps,
        per_device_batch_size=args.phase_group_size * args.phase_groups, updates_per_step=1, beta=args.beta,
        cfg_scale=1.0, lora_rank=4, lora_alpha=8, learning_rate=1e-2, max_steps=args.phase_steps,
        save_steps=args.phase_steps, sample_grid_steps=0, output_dir=str(run), overwrite_output_dir=True,
        progress=False)
    FlowGRPOEditorTrainer(config).train()
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
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


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


SECTIONS = {"reward_prefix_reuse": section_reward_prefix_reuse, "reward_overlap": section_reward_overlap,
           "phases": section_phases}


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
