"""Prefix reuse, batching, the reward server and memory at the widths of Qwen3-VL-8B and -2B, on the CPU.

What a layer costs (a 4096-wide matrix product against attention over the sequence, the vision tower against
the language model) decides most speed-ups, not how many layers there are. Each shape here is a MIEScore
checkpoint with the released widths but one layer on each side, random weights and the real Qwen vocabulary
(``modeling_miescore.testing.qwen3vl_shapes``, which cites the released configs). Per shape it prints:

1. prefix reuse vs none for G edits of 3 sources, next to the token ceiling G*L / (P + G*S) and to a FLOP
   model of both paths (this model, and the released depth), with where each path spends its CPU time;
2. batched vs per-sample scoring, and the best batch size;
3. the reward server (``miescore serve``, concurrent single-sample clients) vs direct ``score_batch`` on the
   same payloads, and the CPU time per sample of the server's steps outside the model;
4. the peak memory (RSS) of scoring one sample with 1-4 sources, and of a group with and without prefix reuse.

Both sides of every ratio run in one process, alternating every repeat (``bench_common.interleaved_best``);
the CPU-time ratio is the steadier figure on a shared machine. Memory is measured in processes of their own.

    python benchmarks/bench_realistic.py                          # 8b and 2b, every section (hours on 2 cores)
    python benchmarks/bench_realistic.py --shapes 2b --sections prefix --sizes 512,1024
    python benchmarks/bench_realistic.py --quick                  # tiny width, under a minute: checks the script
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from bench_common import (group_of_edits, interleaved_best, titled_table as table, photo_samples,
                          real_photos, sectioned_args, shaped_checkpoint as checkpoint)
from bench_server import batch_stats, from_b64, hammer, process_cpu_seconds, start_server, to_b64
from realistic_costs import cost_ceiling, token_counts

SECTIONS = ("prefix", "batching", "server", "memory")
QUICK = dict(shapes="tiny", sizes="256", group_size=3, repeats=1, batch_samples=2, batch_sizes="2", server_samples=4,
             clients=4, max_batch=2, server_image=256, memory_sources="1,2", memory_group=2, memory_image=256,
             memory_jobs=2)


# ------------------------------------------------------------------------------------------ 1. prefix reuse


def profiled_run(model, samples, reuse: bool, batch_size: int) -> tuple[dict[str, float], list[dict]]:
    """One scoring run (``prepare_batch`` then ``score_prepared``: what ``score_batch`` does for one group) and
    its process CPU seconds split into preparing, the vision tower, the language model and the rest of the
    model calls (embedding, cache copies, head). Returns ``(seconds by part, scores)``."""
    spent = {"vision": 0.0, "language": 0.0}
    hooks = []
    for name, module in (("vision", model.backbone.visual), ("language", model.backbone.language_model)):
        started = {}
        hooks.append(module.register_forward_pre_hook(lambda *_, s=started: s.update(t=time.process_time())))
        hooks.append(module.register_forward_hook(
            lambda *_, s=started, n=name: spent.__setitem__(n, spent[n] + time.process_time() - s["t"])))
    try:
        start = time.process_time()
        prepared = model.prepare_batch(samples, batch_size=batch_size, reuse_prefix=reuse)
        prepare = time.process_time() - start
        scores = model.score_prepared(prepared)
        total = time.process_time() - start
    finally:
        for hook in hooks:
            hook.remove()
    return {"prepare": prepare, **spent, "other": total - prepare - spent["vision"] - spent["language"],
            "total": total}, scores


def prefix_section(model, shape: str, args) -> str:
    rows, parts = [], []
    group = args.group_size
    for size in args.sizes:
        samples = group_of_edits(real_photos(size), args.prefix_sources, group)
        model.score_batch(samples[:2], batch_size=2)  # warm-up
        (none_t, none_cpu, (none_spent, none)), (reuse_t, reuse_cpu, (reuse_spent, reused)) = interleaved_best(
            [lambda: profiled_run(model, samples, False, group), lambda: profiled_run(model, samples, True, group)],
            args.repeats)
        length, prefix, suffix, patches = token_counts(model, samples[0])
        ceiling = group * length / (prefix + group * suffix)
        backbone = model.config.backbone_config
        cost = cost_ceiling(backbone, length, prefix, suffix, patches, args.prefix_sources, group)
        deep = cost_ceiling(backbone, length, prefix, suffix, patches, args.prefix_sources, group, released=shape)
        diff = max(abs(a[k] - b[k]) for a, b in zip(none, reused) for k in a)
        rows.append([f"{size}²", length, prefix, suffix, f"{ceiling:.2f}x", f"{cost:.2f}x", deep, f"{none_t:.1f}",
                     f"{reuse_t:.1f}", f"{none_t / reuse_t:.2f}x", f"{none_cpu / reuse_cpu:.2f}x",
                     f"{none_cpu / reuse_cpu / ceiling:.2f}", f"{diff:.1e}"])
        for label, spent in (("none", none_spent), ("reuse", reuse_spent)):
            parts.append([f"{size}²", label,
                          *(f"{spent[k]:.2f}" for k in ("prepare", "vision", "language", "other", "total"))])
    title = (f"{shape}: prefix reuse vs none, G = {group} edits of {args.prefix_sources} sources, batch {group}, "
             f"best of {args.repeats}")
    header = ["image", "L", "P", "S", "token ceiling", "FLOP ceiling (this model)", "FLOP ceiling (released depth)",
              "none s", "reuse s", "speed-up (wall)", "speed-up (CPU)", "CPU speed-up / token ceiling", "max |diff|"]
    out = table(title, header, rows)
    return out + "\n" + table(f"{shape}: where the CPU time goes (process CPU s, last repeat)",
                              ["image", "path", "prepare", "vision tower", "language model", "other", "total"], parts)


# ------------------------------------------------------------------------------------------ 2. batching


def batching_section(model, shape: str, args) -> str:
    samples = photo_samples(args.batch_samples, args.batch_image)
    model.score_batch(samples[:2], batch_size=2)  # warm-up
    paths = [("per-sample", lambda: [model.score(**s) for s in samples])]
    paths += [(f"batch {b}", lambda b=b: model.score_batch(samples, batch_size=b)) for b in args.batch_sizes]
    timed = interleaved_best([fn for _, fn in paths], args.repeats)
    base_wall, base_cpu = timed[0][0], timed[0][1]
    n = len(samples)
    rows = [[name, f"{wall:.1f}", f"{cpu:.1f}", f"{n / wall:.3f}", f"{base_wall / wall:.2f}x", f"{base_cpu / cpu:.2f}x"]
            for (name, _), (wall, cpu, _) in zip(paths, timed)]
    best = min(range(len(paths)), key=lambda i: timed[i][1])
    title = (f"{shape}: batched vs per-sample, {n} samples x (2 sources + edited) at {args.batch_image}², "
             f"best of {args.repeats}; best by CPU time: {paths[best][0]}")
    return table(title, ["path", "wall s", "CPU s", "samples/s", "vs per-sample (wall)", "vs per-sample (CPU)"], rows)


# ------------------------------------------------------------------------------------------ 3. server


def server_steps(model, payloads: list[dict], max_batch: int) -> list[list]:
    """CPU milliseconds per sample of what the server does for a request, step by step, in this process."""
    from modeling_miescore.serving.request_parsing import parse_json_body
    from modeling_miescore.serving.settings import ServerSettings

    settings = ServerSettings()
    bodies = [json.dumps(p).encode() for p in payloads]
    start = time.process_time()
    parsed = [parse_json_body(body, "score", settings, model.config.max_pixels)[0] for body in bodies]
    parse = time.process_time() - start
    samples = [p.sample for p in parsed]
    start = time.process_time()
    prepared = model.prepare_batch(samples, batch_size=max_batch, reuse_prefix=False)
    prepare = time.process_time() - start
    start = time.process_time()
    model.score_prepared(prepared)
    forward = time.process_time() - start
    n = len(payloads)
    return [["JSON, base64, PNG decode, prefix key (parse_json_body)", "decode threads", f"{1000 * parse / n:.0f}"],
            ["tokenising, image preprocessing (prepare_batch)", "preparing thread (before: model thread)",
             f"{1000 * prepare / n:.0f}"],
            ["forward passes (score_prepared)", "model thread", f"{1000 * forward / n:.0f}"]]


def server_section(model, model_path: Path, shape: str, args) -> str:
    samples = photo_samples(args.server_samples, args.server_image)
    payloads = [{"sources": [to_b64(s) for s in sample["sources"]], "edited": to_b64(sample["edited"]),
                 "instruction": sample["instruction"]} for sample in samples]
    decoded = [{"sources": [from_b64(b) for b in p["sources"]], "edited": from_b64(p["edited"]),
                "instruction": p["instruction"]} for p in payloads]
    model.score_batch(decoded[:2], batch_size=2)  # warm-up
    process, url = start_server(model_path, args.max_batch, args.max_wait_ms, args.threads)
    direct, server, calls = [], [], []
    try:
        asyncio.run(hammer(url, payloads[:2], 2))  # warm-up
        for _ in range(args.repeats):  # alternate: the machine's load drifts over both alike
            wall, cpu = time.perf_counter(), time.process_time()
            model.score_batch(decoded, batch_size=args.max_batch)
            direct.append((time.perf_counter() - wall, time.process_time() - cpu))
            before, server_cpu = batch_stats(url), process_cpu_seconds(process.pid)
            seconds = asyncio.run(hammer(url, payloads, args.clients))
            server.append((seconds, process_cpu_seconds(process.pid) - server_cpu))
            after = batch_stats(url)
            calls.append((after[1] - before[1], (after[0] - before[0]) / max(after[1] - before[1], 1)))
    finally:
        process.terminate()
        process.wait(timeout=120)
    (direct_t, direct_cpu), (server_t, server_cpu) = min(direct), min(server)
    n = len(samples)
    row = [n, args.clients, args.max_batch, f"{direct_t:.1f} ({direct_cpu:.1f})", f"{server_t:.1f} ({server_cpu:.1f})",
           f"{direct_t / server_t:.2f}x", f"{direct_cpu / server_cpu:.2f}x", f"{calls[-1][0]:.0f} x {calls[-1][1]:.1f}"]
    title = (f"{shape}: reward server vs direct score_batch, samples of 2 sources + edited at {args.server_image}², "
             f"best of {args.repeats}")
    header = ["samples", "clients", "max batch", "direct s (CPU s)", "server s (server CPU s)", "server / direct (wall)",
              "server / direct (CPU)", "model calls x mean batch"]
    steps = server_steps(model, payloads[: args.max_batch], args.max_batch)
    return (table(title, header, [row]) + "\n"
            + table(f"{shape}: the server's steps, CPU ms per sample", ["step", "runs on", "CPU ms"], steps))


# ------------------------------------------------------------------------------------------ 4. memory


def _peak(model_path: Path, args, sources: int, edits: int, reuse: bool) -> dict:
    command = [sys.executable, str(Path(__file__).with_name("peak_rss.py")), "--model", str(model_path),
               "--sources", str(sources), "--edits", str(edits), "--batch-size", str(edits),
               "--size", str(args.memory_image), "--threads", str(args.threads)] + ([] if reuse else ["--no-reuse"])
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def memory_section(model_path: Path, shape: str, args) -> str:
    from concurrent.futures import ThreadPoolExecutor

    jobs = [(n, 1, False) for n in args.memory_sources]
    jobs += [(2, args.memory_group, False), (2, args.memory_group, True)]
    with ThreadPoolExecutor(args.memory_jobs) as pool:
        peaks = list(pool.map(lambda job: _peak(model_path, args, *job), jobs))
    rows = [[f"1 edit, {n} source{'s' if n > 1 else ''}", "-", f"{p['rss_mib']:.0f}", f"{p['extra_mib']:.0f}",
             f"{p['extra_mib']:.0f}"] for n, p in zip(args.memory_sources, peaks)]
    none, reuse = peaks[-2], peaks[-1]
    group = args.memory_group
    for label, p in (("none", none), ("reuse", reuse)):
        rows.append([f"group of {group} edits, 2 sources, batch {group}", label, f"{p['rss_mib']:.0f}",
                     f"{p['extra_mib']:.0f}", f"{p['extra_mib'] / group:.0f}"])
    saved = (none["extra_mib"] - reuse["extra_mib"]) / group
    title = (f"{shape}: peak memory over the loaded model (RSS, MiB), images {args.memory_image}²; "
             f"prefix reuse saves {saved:.0f} MiB per edit")
    return table(title, ["workload", "prefix reuse", "RSS after loading", "peak above it", "per edit"], rows)


# ------------------------------------------------------------------------------------------ main


# The command line, one row per option: (flag, type, default, help); a string starts the options of a section.
OPTIONS = [
    ("--quick", bool, None, "tiny width and small workloads: checks the script"),
    ("--shapes", str, "8b,2b", "comma-separated: 8b, 2b, tiny"),
    ("--sections", str, ",".join(SECTIONS), "comma-separated: " + ", ".join(SECTIONS)),
    ("--checkpoint-dir", str, None, "keep the built checkpoints here (default: a temporary folder)"),
    "prefix reuse",
    ("--sizes", str, "512", "image sides, comma-separated"),
    ("--group-size", int, 12, "edits per group (G)"),
    ("--prefix-sources", int, 3, "sources per edit"),
    "batching",
    ("--batch-samples", int, 8, "edits scored"),
    ("--batch-sizes", str, "2,4,8", "batch sizes tried, comma-separated"),
    ("--batch-image", int, 256, "image side"),
    "server",
    ("--server-samples", int, 16, "edits sent"),
    ("--server-image", int, 256, "image side"),
    ("--clients", int, 16, "concurrent client threads"),
    ("--max-batch", int, 8, "the server's --max-batch"),
    ("--max-wait-ms", float, 20.0, "the server's --max-wait-ms"),
    "memory",
    ("--memory-sources", str, "1,2,3,4", "source counts, comma-separated"),
    ("--memory-group", int, 4, "edits per group"),
    ("--memory-image", int, 512, "image side"),
    ("--memory-jobs", int, 1, "memory probes running at once"),
]


def parse_args(argv=None):
    _, args = sectioned_args(__doc__, OPTIONS, SECTIONS, QUICK, repeats=2, argv=argv)
    args.shapes = args.shapes.split(",")
    for key in ("sizes", "batch_sizes", "memory_sources"):
        setattr(args, key, [int(v) for v in str(getattr(args, key)).split(",")])
    return args


def main(argv=None):
    args = parse_args(argv)
    from modeling_miescore.scoring.loading import load_scorer

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.checkpoint_dir or tmp)
        for shape in args.shapes:
            started = time.perf_counter()
            path = checkpoint(shape, folder)
            print(f"## {shape}: {path.name}, CPU {args.threads} threads\n", flush=True)
            if set(args.sections) & {"prefix", "batching", "server"}:
                model = load_scorer(str(path), device="cpu", dtype="float32")
                for name, run in (("prefix", prefix_section), ("batching", batching_section)):
                    if name in args.sections:
                        print(run(model, shape, args), flush=True)
                if "server" in args.sections:
                    print(server_section(model, path, shape, args), flush=True)
                del model  # the memory probes load their own copy
            if "memory" in args.sections:
                print(memory_section(path, shape, args), flush=True)
            print(f"({shape}: {time.perf_counter() - started:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main()
