"""SpatialReward (and MIEScore) groups of G = 12 edits of the same sources through a real vLLM (CPU build) with and
without prefix caching, and through the in-process prefix reuse, on the same tiny model, in one run.

The model is ``random_servable_spatialreward`` of ``tests/servable_checkpoints.py`` (the real Qwen vocabulary, the
D.1 prompts, head_dim 64), exported for vLLM; each path judges the same groups (2 sources, ``--size`` px images) with
the same settings (greedy, ``--max-new-tokens``). Every timed group has sources of its own, so no path reuses
anything across groups (vLLM's cache would otherwise keep whole prompts of an earlier repeat). Reported per path:
requests/s (2 G chat requests per group: SC and PQ), wall seconds per group, and the prompt tokens computed:
vLLM's own counters (``/metrics``: ``vllm:prompt_tokens_total`` minus ``vllm:prefix_cache_hits_total``), in process
the token arithmetic of the rows it runs (prefix once + every suffix, or every full prompt). The SC prefix that
edits share is the chat start and the source images; the D.1 text comes after the edited image, so it is in every
suffix, and the PQ prompts share nothing. ``--miescore`` adds the same for MIEScore on vLLM's pooling runner
(the package's plugin; one ``/classify`` request per edit), whose prompt puts the skill, the sources and the
instruction before the edited image, so nearly all of it is shared.

    bash scripts/vllm_cpu.sh provision
    python benchmarks/bench_vllm.py [--group-size 12] [--groups 3] [--size 256] [--max-new-tokens 8] [--threads 2]
        [--miescore]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from bench_common import benchmark_args, group_of_edits, real_photos
from realistic_costs import spatialreward_token_counts

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # servable_checkpoints: a test fixture

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "vllm_cpu.sh"


def metric(url: str, name: str) -> float:
    """A counter of the server's Prometheus ``/metrics`` (summed over its label sets; 0 when absent)."""
    text = urllib.request.urlopen(url.rsplit("/v1", 1)[0] + "/metrics", timeout=30).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") or line.startswith(name + " "))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(export: Path, caching: bool, runs: Path, *extra: str) -> tuple[str, int, float]:
    port = free_port()
    env = {**os.environ, "MIESCORE_VLLM_RUNS": str(runs), "MIESCORE_VLLM_LIFETIME": "3600"}
    env.pop("PYTHONPATH", None)
    flag = "--enable-prefix-caching" if caching else "--no-enable-prefix-caching"
    started = time.monotonic()
    done = subprocess.run(["bash", str(SCRIPT), "start", str(export), "--port", str(port), "--name", "tiny", "--",
                           flag, *extra], capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(f"vLLM did not start: {done.stderr[-2000:]}")
    return done.stdout.strip(), port, time.monotonic() - started


def stop_server(port: int, runs: Path) -> None:
    env = {**os.environ, "MIESCORE_VLLM_RUNS": str(runs)}
    subprocess.run(["bash", str(SCRIPT), "stop", "--port", str(port)], capture_output=True, env=env, timeout=120)


def groups_of(args) -> list[list[dict]]:
    """``args.groups + 1`` groups (the first one warms up), each with sources of its own."""
    photos = real_photos(args.size)
    out = []
    for g in range(args.groups + 1):
        turned = photos[g % len(photos):] + photos[:g % len(photos)]
        if g >= len(photos):  # more groups than photos: mirror the sources so their pixels differ
            turned = [p.transpose(0) for p in turned]
        out.append(group_of_edits(turned, num_sources=2, group_size=args.group_size, seed=g))
    return out


def through_vllm(export: Path, groups, args, caching: bool, runs: Path) -> dict:
    from modeling_miescore.judges.spatialreward_api import SpatialRewardAPI

    url, port, start_s = start_server(export, caching, runs)
    try:
        api = SpatialRewardAPI(url, "tiny", config=str(export), max_new_tokens=args.max_new_tokens,
                               max_concurrency=2 * args.group_size)
        api.evaluate_edits(groups[0], batch_size=args.group_size)  # warm-up
        prompt0, hits0 = metric(url, "vllm:prompt_tokens_total"), metric(url, "vllm:prefix_cache_hits_total")
        seconds, texts = [], []
        for group in groups[1:]:
            began = time.perf_counter()
            results = api.evaluate_edits(group, batch_size=args.group_size)
            seconds.append(time.perf_counter() - began)
            texts.append([(r.raw_sc, r.raw_pq) for r in results])
        prompt = metric(url, "vllm:prompt_tokens_total") - prompt0
        hits = metric(url, "vllm:prefix_cache_hits_total") - hits0
        failed = api.stats["failed_requests"]
    finally:
        stop_server(port, runs)
    return {"start_s": start_s, "seconds": seconds, "prompt": prompt, "computed": prompt - hits, "texts": texts,
            "failed": failed}


def miescore_through_vllm(export: Path, groups, args, caching: bool, runs: Path) -> dict:
    from modeling_miescore.judges.miescore_api import MIEScoreAPI

    url, port, start_s = start_server(export, caching, runs, "--dtype", "float32")
    try:
        api = MIEScoreAPI(url, "tiny", export, max_concurrency=args.group_size)
        api.score_batch(groups[0], batch_size=args.group_size)  # warm-up
        prompt0, hits0 = metric(url, "vllm:prompt_tokens_total"), metric(url, "vllm:prefix_cache_hits_total")
        seconds, scores = [], []
        for group in groups[1:]:
            began = time.perf_counter()
            scores.append(api.score_batch(group, batch_size=args.group_size))
            seconds.append(time.perf_counter() - began)
        prompt = metric(url, "vllm:prompt_tokens_total") - prompt0
        hits = metric(url, "vllm:prefix_cache_hits_total") - hits0
    finally:
        stop_server(port, runs)
    return {"start_s": start_s, "seconds": seconds, "prompt": prompt, "computed": prompt - hits, "scores": scores,
            "failed": api.stats["failed_requests"]}


def miescore_section(groups, args, runs: Path) -> None:
    from modeling_miescore.scoring.loading import load_scorer
    from servable_checkpoints import random_servable_miescore

    export = random_servable_miescore()
    cached = miescore_through_vllm(export, groups, args, True, runs)
    plain = miescore_through_vllm(export, groups, args, False, runs)
    model = load_scorer(str(export.parent / "checkpoint"), device="cpu", dtype="float32")
    local = {}
    for reuse in (True, False):
        model.score_batch(groups[0], batch_size=args.group_size, reuse_prefix=reuse)  # warm-up
        seconds, scores = [], []
        for group in groups[1:]:
            began = time.perf_counter()
            scores.append(model.score_batch(group, batch_size=args.group_size, reuse_prefix=reuse))
            seconds.append(time.perf_counter() - began)
        local[reuse] = {"seconds": seconds, "scores": scores}
    requests = args.group_size * args.groups
    print(f"\nMIEScore (random, real Qwen vocabulary, head_dim 64) on vLLM's pooling runner (the package's plugin), "
          f"one /classify request per edit; vLLM start-up {cached['start_s']:.0f} s / {plain['start_s']:.0f} s")
    print(f"{'path':<34} {'requests/s':>10} {'s per group':>11} {'prompt tokens computed':>23}")
    for name, run in (("vLLM, --enable-prefix-caching", cached), ("vLLM, --no-enable-prefix-caching", plain)):
        print(f"{name:<34} {requests / sum(run['seconds']):>10.2f} {sum(run['seconds']) / args.groups:>11.2f} "
              f"{int(run['computed']):>23}")
    for name, reuse in (("in process, prefix reuse", True), ("in process, full prompts", False)):
        seconds = local[reuse]["seconds"]
        print(f"{name:<34} {requests / sum(seconds):>10.2f} {sum(seconds) / args.groups:>11.2f} {'':>23}")
    gap = max(abs(a[k] - b[k]) for ga, gb in zip(cached["scores"], local[True]["scores"]) for a, b in zip(ga, gb)
              for k in b)
    print(f"vLLM prefix caching: {sum(plain['seconds']) / sum(cached['seconds']):.2f}x requests/s, "
          f"{plain['computed'] / max(cached['computed'], 1):.2f}x fewer prompt tokens computed; in-process prefix "
          f"reuse: {sum(local[False]['seconds']) / sum(local[True]['seconds']):.2f}x; vLLM (caching) vs in process "
          f"(reuse): {sum(local[True]['seconds']) / sum(cached['seconds']):.2f}x requests/s; largest score gap "
          f"vLLM vs in process {gap:.1e} (0-100 scale); failed requests {cached['failed'] + plain['failed']}")


def in_process(export: Path, groups, args, reuse: bool, model) -> dict:
    model.evaluate_edits(groups[0], batch_size=args.group_size, reuse_prefix=reuse)  # warm-up
    seconds, texts = [], []
    for group in groups[1:]:
        began = time.perf_counter()
        results = model.evaluate_edits(group, batch_size=args.group_size, reuse_prefix=reuse)
        seconds.append(time.perf_counter() - began)
        texts.append([(r.raw_sc, r.raw_pq) for r in results])
    return {"seconds": seconds, "texts": texts}


def main():
    _, args = benchmark_args(__doc__, [
        ("--group-size", int, 12, "edits per group (G)"), ("--groups", int, 3, "timed groups per path"),
        ("--size", int, 256, "side of the square source and edited images"),
        ("--max-new-tokens", int, 8, "tokens generated per request"),
        ("--miescore", bool, False, "also MIEScore on vLLM's pooling runner")])
    import tempfile

    from modeling_miescore.scoring.loading import load_spatialreward
    from servable_checkpoints import random_servable_spatialreward

    export = random_servable_spatialreward()
    groups = groups_of(args)
    requests = 2 * args.group_size * args.groups
    with tempfile.TemporaryDirectory() as runs:
        cached = through_vllm(export, groups, args, True, Path(runs))
        plain = through_vllm(export, groups, args, False, Path(runs))
    model = load_spatialreward(str(export), device="cpu", dtype="float32")
    model.config.max_new_tokens = args.max_new_tokens
    reuse = in_process(export, groups, args, True, model)
    full = in_process(export, groups, args, False, model)
    sc, prefix, pq = spatialreward_token_counts(model, groups[1][0])
    g, n = args.group_size, args.groups
    computed = {"reuse": n * (prefix + g * (sc - prefix + pq)), "full": n * g * (sc + pq)}

    print(f"tiny SpatialReward (random, real Qwen vocabulary, D.1 prompts), CPU, torch threads {args.threads}; "
          f"{n} groups of G={g} edits (2 sources, {args.size}x{args.size} px), greedy, max_new_tokens "
          f"{args.max_new_tokens}; per edit an SC prompt of {sc} tokens (shared prefix {prefix}) and a PQ prompt of "
          f"{pq}; vLLM start-up {cached['start_s']:.0f} s / {plain['start_s']:.0f} s")
    rows = [("vLLM, --enable-prefix-caching", cached["seconds"], cached["computed"]),
            ("vLLM, --no-enable-prefix-caching", plain["seconds"], plain["computed"]),
            ("in process, prefix reuse", reuse["seconds"], computed["reuse"]),
            ("in process, full prompts", full["seconds"], computed["full"])]
    print(f"{'path':<34} {'requests/s':>10} {'s per group':>11} {'prompt tokens computed':>23}")
    for name, seconds, tokens in rows:
        print(f"{name:<34} {requests / sum(seconds):>10.2f} {sum(seconds) / n:>11.2f} {int(tokens):>23}")
    print(f"vLLM prefix caching: {sum(plain['seconds']) / sum(cached['seconds']):.2f}x requests/s, "
          f"{plain['computed'] / max(cached['computed'], 1):.2f}x fewer prompt tokens computed "
          f"({int(cached['prompt'])} prompt tokens, {int(cached['prompt'] - cached['computed'])} from the cache)")
    print(f"in-process prefix reuse: {sum(full['seconds']) / sum(reuse['seconds']):.2f}x requests/s, "
          f"{computed['full'] / computed['reuse']:.2f}x fewer prompt tokens computed")
    print(f"vLLM (caching) vs in process (reuse): {sum(reuse['seconds']) / sum(cached['seconds']):.2f}x requests/s")
    same = lambda a, b: sum(x == y for ga, gb in zip(a, b) for x, y in zip(ga, gb))  # noqa: E731
    print(f"identical texts: vLLM cached vs not {same(cached['texts'], plain['texts'])}/{g * n}, in process reuse "
          f"vs full {same(reuse['texts'], full['texts'])}/{g * n}, vLLM vs in process "
          f"{same(cached['texts'], reuse['texts'])}/{g * n} (random weights: fp32 rounding flips greedy near-ties); "
          f"failed requests: {cached['failed'] + plain['failed']}")
    if args.miescore:
        with tempfile.TemporaryDirectory() as runs:
            miescore_section(groups, args, Path(runs))
    print(json.dumps({"requests": requests, "vllm_cached_s": cached["seconds"], "vllm_plain_s": plain["seconds"],
                      "reuse_s": reuse["seconds"], "full_s": full["seconds"], "computed": {
                          "vllm_cached": cached["computed"], "vllm_plain": plain["computed"], **computed}}))


if __name__ == "__main__":
    main()
