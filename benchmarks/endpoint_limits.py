"""What one hostile endpoint answer costs the client (issue 22, items 2 and 3), measured against the bad server of
``tests/local_http.py``; each scenario runs in a fresh process so that memory peaks do not mix (Linux).

    python benchmarks/endpoint_limits.py [--inflated-mib 400] [--timeout 3] [--cap 60] [--concurrency 8]

Scenarios, each one request through the call engine (``OpenAIChatBackend`` + ``CallCache``, the default answer
limit and retries off):

* ``gzip``: a 400 MiB answer gzip-compressed to ~408 KB; ``chunked``: a 400 MiB answer sent chunked, no length;
  ``gzip x N``: N such gzip answers at once (``--concurrency``, the commands' default is 8). Printed: the
  compressed size, the peak resident memory the call needed beyond the process before it (``peak_extra_mib``),
  the largest answer stored in the cache (``cache_row_bytes``) and the outcome.
* ``trickle``: a correct answer sent at 1 byte/s with ``timeout=--timeout``; ``trickle-retried``: the same with
  the commands' default 4 retries (back-off 1, 2, 4, 8 s); ``slow-headers``: the headers at 1 byte/s. Printed:
  the seconds until the request failed (or finished: the server stops trickling after ``--cap`` seconds, as the
  test server did in the issue) and the outcome.

"Before" is the same script run in a checkout of commit c6d6d54 (main before issue 22's endpoint fixes; the bad
server is imported from this checkout's ``tests/``)::

    (cd ../before-22 && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/endpoint_limits.py" --concurrency 0)

(``--concurrency 0`` skips the N-at-once scenario, which inflates N x 400 MiB there.)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from peak_rss import memory_mib

TESTS = Path(__file__).resolve().parent.parent / "tests"


def _backend(url: str, timeout: float, concurrency: int, retries: int):
    from modeling_miescore.judges.chat_backends import OpenAIChatBackend

    return OpenAIChatBackend(url, "m", api_key_env="MIE_BENCH_NO_KEY", timeout=timeout, max_retries=retries,
                             max_concurrency=concurrency)


def _cache_row_bytes(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as db:
        return int(db.execute("SELECT COALESCE(MAX(LENGTH(CAST(text AS BLOB))), 0) FROM answers").fetchone()[0])


def scenario(name: str, inflated: int, timeout: float, cap: float, concurrency: int) -> dict:
    """Run one scenario in this process; the measurements as a dict."""
    sys.path.insert(0, str(TESTS))
    import local_http

    from modeling_miescore.judges.call_cache import CallCache
    from modeling_miescore.judges.call_engine import CallEngine, ChatRequest

    n = concurrency if name == "gzip-many" else 1
    if name in ("gzip", "gzip-many"):
        reply = local_http.bomb_reply(inflated, "gzip")
        size = len(local_http.compressed_answer(inflated, "gzip"))
    elif name == "chunked":
        reply, size = local_http.chunked_reply(inflated), None
    elif name.startswith("trickle"):
        reply, size = local_http.trickle_reply(1.0), None
    else:
        reply, size = local_http.slow_headers_reply(1.0), None
    with tempfile.TemporaryDirectory() as tmp, local_http.BadChatServer(lambda body, index: reply) as server:
        threading.Timer(cap, server.stop.set).start()  # a trickling server gives up after `cap` seconds
        cache = CallCache(Path(tmp) / "calls.sqlite")
        retries = 4 if name == "trickle-retried" else 0  # 4: the commands' --max-retries default
        engine = CallEngine(_backend(server.url, timeout, max(1, n), retries), cache=cache)
        requests = [ChatRequest([f"rate edit {i}"]) for i in range(n)]
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        before = memory_mib()["VmRSS"]
        started = time.monotonic()
        try:
            results = engine.run(requests)
            outcome = sorted({r.error_kind or "answered" for r in results})
        except Exception as err:  # noqa: BLE001 - the old code can crash: that is a result too
            outcome = [f"raised {type(err).__name__}"]
        seconds = time.monotonic() - started
        peak = memory_mib()["VmHWM"]
        row = _cache_row_bytes(Path(tmp) / "calls.sqlite")
        cache.close()
    return {"scenario": name if n == 1 else f"gzip x {n}", "compressed_bytes": size, "seconds": round(seconds, 1),
            "peak_extra_mib": round(peak - before), "cache_row_bytes": row, "outcome": ", ".join(outcome)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inflated-mib", type=int, default=400, help="size of the bomb answers (default 400)")
    parser.add_argument("--timeout", type=float, default=3.0, help="the client's timeout (default 3 s)")
    parser.add_argument("--cap", type=float, default=60.0, help="seconds before the trickling server gives up")
    parser.add_argument("--concurrency", type=int, default=8, help="bombs at once in 'gzip x N' (0: skip)")
    parser.add_argument("--scenario", help=argparse.SUPPRESS)  # the child process
    args = parser.parse_args(argv)
    inflated = args.inflated_mib << 20
    if args.scenario:
        print(json.dumps(scenario(args.scenario, inflated, args.timeout, args.cap, args.concurrency)))
        return 0
    names = ["gzip", "chunked", *(["gzip-many"] if args.concurrency > 1 else []), "trickle", "trickle-retried",
             "slow-headers"]
    rows = []
    for name in names:
        command = [sys.executable, __file__, "--scenario", name, "--inflated-mib", str(args.inflated_mib),
                   "--timeout", str(args.timeout), "--cap", str(args.cap), "--concurrency", str(args.concurrency)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            rows.append({"scenario": name, "outcome": f"the process failed: {done.stderr.strip()[-300:]}"})
        else:
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    from modeling_miescore.utils.markdown_table import markdown_table

    keys = ["scenario", "compressed_bytes", "seconds", "peak_extra_mib", "cache_row_bytes", "outcome"]
    print(markdown_table(keys, [[row.get(k, "") for k in keys] for row in rows]))
    print(f"\nanswers of {args.inflated_mib} MiB; timeout {args.timeout:g} s; retries off except trickle-retried; "
          f"trickles stop after {args.cap:g} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
