"""Editor RL (Flow-GRPO) on the CPU: seconds per phase of a training step, measured in one run.

One function per section, registered in ``SECTIONS`` (``--sections a,b``; default all):

* ``phases``: the trainer (``FlowGRPOEditorTrainer``, the code path of ``trainers/flow_grpo_editor.py``) on a
  tiny random diffusers editor (built offline) with the tiny redness reward, ``--steps`` steps; the seconds of
  each phase per step as the trainer logs them in ``metrics.jsonl``: rollout (the stock pipeline's sampling with
  recording), reward (the reward's own compute, on the worker thread), reward wait (what the loop waited for it),
  update (recomputing the trained steps, clipped ratio + KL, backward, optimizer). Step 1 is a warm-up and left
  out; the table gives the mean of the others and each phase's share of the step.

    python benchmarks/bench_editor_rl.py                                   # flux2-klein and qwen-image-edit-plus
    python benchmarks/bench_editor_rl.py --sections phases --editors flux2-klein --steps 6
    python benchmarks/bench_editor_rl.py --quick                           # seconds: checks the script
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from bench_common import benchmark_args

OPTIONS = [
    ("--sections", str, "phases", "sections to run, comma-separated"),
    ("--editors", str, "flux2-klein,qwen-image-edit-plus", "tiny editors for the phases section"),
    ("--steps", int, 6, "training steps per editor in the phases section (the first is a warm-up)"),
    ("--group-size", int, 4, "G, edits per group"),
    ("--groups", int, 2, "groups per step"),
    ("--denoising-steps", int, 4, "T, denoising steps per rollout"),
    ("--beta", float, 0.04, "KL weight (0 skips the reference forward)"),
    ("--quick", bool, None, "tiny sizes: checks the script in seconds"),
]
QUICK = dict(editors="flux2-klein", steps=2, group_size=2, groups=1, denoising_steps=3)


def _markdown_table(title: str, header: list, rows: list) -> str:
    lines = [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]) + "\n"


def _phase_row(editor: str, args, folder: Path) -> list:
    from modeling_miescore.testing.editing_requests import write_editing_requests
    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS, build_tiny_editor
    from modeling_miescore.training.editor_rl.config import FlowGRPOConfig
    from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

    model = build_tiny_editor(editor, folder / editor)
    requests = write_editing_requests(folder / "requests" / "rows.jsonl")
    config = FlowGRPOConfig(
        editor=editor, model_name_or_path=str(model), editor_options=TINY_EDITOR_OPTIONS[editor], dtype="float32",
        dataset=str(requests), reward="modeling_miescore.testing.editor_rewards:mean_redness",
        num_generations=args.group_size, num_inference_steps=args.denoising_steps,
        per_device_batch_size=args.group_size * args.groups, updates_per_step=1, beta=args.beta, cfg_scale=1.0,
        lora_rank=4, lora_alpha=8, learning_rate=1e-2, max_steps=args.steps, save_steps=args.steps,
        sample_grid_steps=0, output_dir=str(folder / f"run-{editor}"), overwrite_output_dir=True, progress=False)
    FlowGRPOEditorTrainer(config).train()
    lines = [json.loads(x) for x in (folder / f"run-{editor}" / "metrics.jsonl").read_text().splitlines()]
    timed = lines[1:] or lines
    mean = {k: sum(m[f"seconds_{k}"] for m in timed) / len(timed)
            for k in ("rollout", "reward", "reward_wait", "update", "step")}
    share = {k: 100 * mean[k] / mean["step"] for k in ("rollout", "reward_wait", "update")}
    return [editor, f"{args.groups} × {args.group_size}", args.denoising_steps, len(timed),
            f"{mean['rollout']:.2f} ({share['rollout']:.0f} %)", f"{mean['reward']:.4f}",
            f"{mean['reward_wait']:.4f} ({share['reward_wait']:.0f} %)", f"{mean['update']:.2f} ({share['update']:.0f} %)",
            f"{mean['step']:.2f}"]


def section_phases(args, folder: Path) -> str:
    rows = []
    for editor in args.editors.split(","):
        rows.append(_phase_row(editor, args, folder))
        print(rows[-1], flush=True)
    title = (f"Seconds per phase of one Flow-GRPO step (tiny random editors, redness reward, beta {args.beta}, "
             f"CPU {args.threads} threads; mean over steps 2..{args.steps})")
    return _markdown_table(title, ["editor", "groups × G", "T", "steps timed", "rollout s (share)", "reward s",
                                   "reward wait s (share)", "update s (share)", "step s"], rows)


SECTIONS = {"phases": section_phases}


def main(argv=None):
    parser, args = benchmark_args(__doc__, OPTIONS, threads=1, repeats=1, argv=argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    sections = args.sections.split(",")
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in sections:
            started = time.perf_counter()
            print(SECTIONS[name](args, Path(tmp)), flush=True)
            print(f"({name}: {time.perf_counter() - started:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main()
