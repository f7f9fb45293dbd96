"""What a hostile ``serve:`` replica costs the trainer's ``RewardClient`` (issue 31 HIGH 3; CPU, no model).

    python benchmarks/bench_reward_client_bounds.py [--bomb-mib 256] [--trickle-timeout 3]

Each case runs in a fresh child process: the bad server of ``tests/local_http.py`` answers
``RewardClient.score_groups`` (the code path of ``--reward serve:URL``) with a gzip bomb (a small body that
inflates to ``--bomb-mib`` MiB) or with an answer trickling 20 bytes a second, and the child prints how the call
ended, its seconds and its peak RSS growth. The client runs with its defaults (``max_retries=0`` so one request is
timed; ``timeout`` = ``--trickle-timeout`` for the trickle). "Before" is the same script against commit 45cc0d1
(main before issue 31), whose client read any body whole::

    git worktree add --detach ../before-31 45cc0d1
    (cd ../before-31 && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/bench_reward_client_bounds.py")
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {tests!r})
from PIL import Image
from local_http import BadChatServer, bomb_reply, trickle_reply
from modeling_miescore.serving.reward_client import RewardClient

case, bomb_bytes, timeout = {case!r}, {bomb_bytes!r}, {timeout!r}
reply = bomb_reply(bomb_bytes) if case == "gzip bomb" else trickle_reply(bytes_per_second=20)
image = Image.new("RGB", (16, 16), (200, 0, 0))
group = {{"sources": [image], "instruction": "make it red", "edited": [image, image]}}
with BadChatServer(lambda body, index: reply) as server:
    client = RewardClient(server.origin, timeout=timeout, max_retries=0)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    try:
        client.score_groups([group])
        ended = "answered"
    except Exception as err:
        ended = f"{{type(err).__name__}}: {{str(err)[:160]}}"
    seconds = time.monotonic() - started
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    client.close()
print(json.dumps({{"seconds": seconds, "rss_mib": grown, "ended": ended}}))
"""


def run_case(case: str, bomb_bytes: int, timeout: float) -> dict:
    code = CHILD.format(tests=str(TESTS), case=case, bomb_bytes=bomb_bytes, timeout=timeout)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"seconds": float("nan"), "rss_mib": float("nan"), "ended": done.stderr.strip().splitlines()[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--bomb-mib", type=int, default=256, help="what the gzip bomb inflates to (MiB)")
    parser.add_argument("--trickle-timeout", type=float, default=3.0, help="the client's timeout for the trickle")
    args = parser.parse_args(argv)
    print("| case | seconds | peak RSS growth (MiB) | how the call ended |")
    print("|---|---|---|---|")
    for case, timeout in (("gzip bomb", 300.0), ("trickle 20 B/s", args.trickle_timeout)):
        row = run_case(case, args.bomb_mib << 20, timeout)
        label = f"{case} ({args.bomb_mib} MiB)" if case == "gzip bomb" else f"{case}, timeout={timeout:g}"
        print(f"| {label} | {row['seconds']:.1f} | {row['rss_mib']:.0f} | {row['ended']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
