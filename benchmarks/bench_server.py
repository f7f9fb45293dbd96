"""Reward-server throughput under concurrent clients vs direct ``score_batch``, tiny MIEScore on CPU.

Both paths score the same samples in one run of this script:
- direct: ``model.score_batch(samples, batch_size=MAX_BATCH)`` in this process, on images decoded from the same
  PNG payloads the server gets (one image object per sample and slot, as a dataset gives them; decoding untimed);
- server: ``miescore serve`` in a subprocess (same checkpoint, same thread count, ``--max-batch MAX_BATCH``),
  hit by CLIENTS concurrent clients that each send single-sample ``POST /v1/score`` requests (images
  pre-encoded, so the clients' PNG encoding is not timed). The server must coalesce them into batches.
Prints samples/s of each, their ratio, the server's mean batch size read from /metrics, and the CPU time the
clients themselves took (they share the machine's cores with the server).

    python benchmarks/bench_server.py [--samples 48] [--clients 32] [--max-batch 16] [--size 256] [--threads 2]
"""

from __future__ import annotations

import asyncio
import base64
import io
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from PIL import Image

from bench_common import benchmark_args, photo_samples


def to_b64(image: Image.Image) -> str:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def from_b64(data: str) -> Image.Image:
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    image.load()
    return image


def start_server(model_path: Path, max_batch: int, max_wait_ms: float, threads: int):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1",
               HF_HUB_OFFLINE="1")
    command = [sys.executable, "-m", "modeling_miescore.cli.main", "serve", "--model", str(model_path), "--port", "0",
               "--device", "cpu", "--dtype", "float32", "--max-batch", str(max_batch),
               "--max-wait-ms", str(max_wait_ms), "--max-queue", "4096", "--log-level", "warning"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        match = re.search(r"http://[\d.]+:\d+", line or "")
        if match:
            return process, match.group(0)
        if not line and process.poll() is not None:
            break
    process.kill()
    raise RuntimeError("the server did not start; run the command by hand to see why: " + " ".join(command))


async def hammer(url: str, payloads: list[dict], clients: int) -> float:
    import httpx

    queue: asyncio.Queue = asyncio.Queue()
    for payload in payloads:
        queue.put_nowait(payload)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:
        async def worker():
            while not queue.empty():
                payload = queue.get_nowait()
                response = await client.post("/v1/score", json=payload)
                response.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return time.perf_counter() - started


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc), NaN elsewhere."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def batch_stats(url: str) -> tuple[float, float]:
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(url + "/metrics").text
    values = {sample.name: sample.value for family in text_string_to_metric_families(text)
              for sample in family.samples if not sample.labels}
    return values["miescore_batch_size_sum"], values["miescore_batch_size_count"]


def main():
    _, args = benchmark_args(__doc__, [
        ("--samples", int, 48, "edits sent"), ("--clients", int, 32, "concurrent client threads"),
        ("--max-batch", int, 16, "the server's --max-batch"),
        ("--max-wait-ms", float, 20.0, "the server's --max-wait-ms"),
        ("--size", int, 256, "image side in pixels (3 images per sample)")], repeats=1)
    from modeling_miescore.scoring.loading import load_scorer
    from modeling_miescore.testing import build_tiny_miescore

    samples = photo_samples(args.samples, args.size)
    payloads = [{"sources": [to_b64(s) for s in sample["sources"]], "edited": to_b64(sample["edited"]),
                 "instruction": sample["instruction"]} for sample in samples]
    with tempfile.TemporaryDirectory() as tmp:
        model_path = build_tiny_miescore(Path(tmp) / "tiny")
        model = load_scorer(str(model_path), device="cpu", dtype="float32")
        model.score_batch(samples[:2], batch_size=2)  # warm-up
        decoded = [{"sources": [from_b64(b) for b in p["sources"]], "edited": from_b64(p["edited"]),
                    "instruction": p["instruction"]} for p in payloads]
        direct_cpu = time.process_time()
        direct = min(_timed(lambda: model.score_batch(decoded, batch_size=args.max_batch))
                     for _ in range(args.repeats))
        direct_cpu = (time.process_time() - direct_cpu) / args.repeats

        process, url = start_server(model_path, args.max_batch, args.max_wait_ms, args.threads)
        try:
            asyncio.run(hammer(url, payloads[:4], 4))  # warm-up
            before = batch_stats(url)
            client_cpu, server_cpu = time.process_time(), process_cpu_seconds(process.pid)
            server = min(asyncio.run(hammer(url, payloads, args.clients)) for _ in range(args.repeats))
            client_cpu = (time.process_time() - client_cpu) / args.repeats
            server_cpu = (process_cpu_seconds(process.pid) - server_cpu) / args.repeats
            after = batch_stats(url)
        finally:
            process.terminate()
            process.wait(timeout=60)
    n = len(samples)
    calls = (after[1] - before[1]) / args.repeats
    mean_batch = (after[0] - before[0]) / max(after[1] - before[1], 1)
    print(f"tiny MIEScore on CPU ({args.threads} threads), {n} samples x 3 images at {args.size}x{args.size}, "
          f"max batch {args.max_batch}")
    print(f"direct score_batch          : {n / direct:7.2f} samples/s ({direct:.2f} s, {direct_cpu:.2f} s CPU)")
    print(f"server, {args.clients:>2} concurrent clients: {n / server:7.2f} samples/s ({server:.2f} s, "
          f"{server_cpu:.2f} s CPU), {calls:.1f} model calls of {mean_batch:.1f} samples on average; the clients "
          f"(this process) used {client_cpu:.2f} s of CPU meanwhile")
    print(f"ratio server / direct: {direct / server:.2f}x (CPU time direct / server: {direct_cpu / server_cpu:.2f}x)")


def _timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
