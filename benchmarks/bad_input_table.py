"""Run the bad-input corpus against the current code and print the before/after table (CPU; a few minutes).

    python benchmarks/bad_input_table.py [--workdir DIR] [--timeout 60] [--details] [--endpoints | --only-endpoints]

Every case of the corpus (``tests/corpus/``: broken and hostile images, bad instructions, bad JSONL lines and
paths, a checkpoint that ships code) goes through the Python API, ``miescore score``, ``miescore score-batch`` and
the reward server (in this process, on a tiny random MIEScore checkpoint, ``bad_input_corpus.CORPUS_CHECKPOINT``).
The table counts per entry point the cases tried, the clean ones and each kind of failure (a case can fail in
several ways); ``--details`` lists every case that is not clean. The corpus is a test fixture, not part of the
package: this script puts ``tests/`` on ``sys.path`` and imports it as ``corpus``.

"After" is this checkout. "Before" is the same corpus against older code: the corpus modules only use entry points
that code already had, and they come from this checkout's ``tests/`` while the package comes from ``PYTHONPATH``::

    git worktree add --detach ../before d3af651
    (cd ../before && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/bad_input_table.py" --timeout 20 --details)

(``--timeout 20``: a case still running after 20 s counts as a hang; the old code blocks forever on a FIFO.)
The corpus imports every module its cases use, so the older checkout needs them: 45cc0d1 has them all; d3af651
and c6d6d54 lack later helpers (``utils/markdown_table.py``, the editor-RL fixtures), and their columns in
``benchmarks/RESULTS.md`` were measured with the corpus of their time (the commands are recorded there).
The "before" commits: d3af651 (main before issue 13's library fixes and the serving-c merge) for the first four
rows; c6d6d54 (main before issue 22) for issue 22's local cases (``corpus.bad_input_local``: the ``checkpoint``,
``paths`` and ``data`` rows, and the chat-control-token and surrogate instructions in the first four; the two
``doctor`` cases start a fresh interpreter and have their own 600 s bound) and for the bad-endpoint corpus;
45cc0d1 (main before issue 31) for the editor cases (``corpus.bad_input_editor`` and ``corpus.bad_input_edit``:
the ``trainer`` and ``edit`` rows, ``--entries trainer,edit``; the cases that could exhaust the machine's memory
on the old code run in a child process with 6 GB of address space) and for the ``editor-benchmarks`` group.

Issue 41's groups (``--entries "export-vllm,benchmark editors,edit --select"``; ``corpus.bad_input_export``,
``corpus.bad_input_comparison``, ``corpus.bad_input_select``; about 2 minutes) have their "before" at 2f0e4de (main
before issue 41), which imports this checkout's corpus as it is; their cases that could fill the disk or the memory
on the old code (``/dev/zero``, a 257 MiB file, a full disk, ``--num-images`` of 40 digits) and the rewards that exit
run in a child process with bounded file size (RLIMIT_FSIZE) and memory.

``--endpoints`` also runs the bad-endpoint corpus of issue 22 (``corpus.bad_endpoint_corpus``: ``judge``,
``spatialreward-data`` and ``mer-bench synthesize`` against the bad server of ``tests/local_http.py``) and prints
its own table; ``--only-endpoints`` runs that corpus alone.

The ``editor-benchmarks`` group (issues 31 and 33; ``corpus.bad_input_editor_benchmarks``) is in both corpora:
``convert-benchmark gedit-bench`` / ``imgedit-bench`` with NUL bytes, chat-control tokens and 10,000-character
instructions and ImgEdit's current release (the bad-input table), and ``benchmark gedit`` / ``imgedit`` against the
bad server with nested answers, non-integer scores, ``?key=`` in the judge URL and ImgEdit's released
``prompts.json`` keys (the ``--endpoints`` table). ``--editor-benchmarks`` runs that group alone, in both
corpora; about a minute.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# the corpora are test fixtures (tests/corpus/, with the bad server of tests/local_http.py), not package modules
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from corpus.bad_endpoint_corpus import EndpointCorpus, endpoint_table  # noqa: E402
from corpus.bad_input_corpus import Corpus, build_corpus_checkpoint, summary_table  # noqa: E402
from corpus.bad_input_editor_benchmarks import editor_benchmark_cases, editor_benchmark_endpoint_cases  # noqa: E402
from corpus.cases import all_cases, endpoint_cases  # noqa: E402


def _run_cases(runner, cases) -> list:
    """Each case run by ``runner`` (a corpus), its outcome printed as it finishes."""
    outcomes = []
    for case in cases:
        started = time.monotonic()
        outcome = runner.run(case)
        outcomes.append(outcome)
        print(f"{time.monotonic() - started:6.1f} s  {outcome.describe()}", file=sys.stderr, flush=True)
    return outcomes


def run_corpus(workdir: Path, timeout: float, cases=None, entries=None) -> list:
    """The bad-input corpus's ``cases`` (default: every case, or those of ``entries``)."""
    from modeling_miescore.scoring.loading import load_scorer

    if cases is None:
        cases = [case for case in all_cases() if not entries or case.entry in entries]
    checkpoint = build_corpus_checkpoint(workdir / "tiny-miescore")
    model = load_scorer(str(checkpoint), device="cpu", dtype="float32")
    corpus = Corpus(workdir / "corpus", model, checkpoint, timeout=timeout)
    try:
        return _run_cases(corpus, cases)
    finally:
        corpus.close()


def run_endpoint_corpus(workdir: Path, timeout: float, cases=None) -> list:
    """The bad-endpoint corpus's ``cases`` (default: every case)."""
    cases = endpoint_cases() if cases is None else cases
    return _run_cases(EndpointCorpus(workdir / "endpoint-corpus", timeout=timeout), cases)


def run_editor_benchmark_group(workdir: Path, timeout: float) -> tuple[list, list]:
    """The ``editor-benchmarks`` cases of both corpora: ``(bad-input outcomes, bad-endpoint outcomes)``."""
    return (run_corpus(workdir, timeout, editor_benchmark_cases()),
            run_endpoint_corpus(workdir, timeout, editor_benchmark_endpoint_cases()))


def _print(table: str, outcomes: list, details: bool) -> None:
    print(table)
    if details:
        print("\nNot clean:")
        for outcome in outcomes:
            if not outcome.clean:
                print("  " + outcome.describe())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", help="where the inputs and the tiny checkpoint go (default: a temporary folder)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    parser.add_argument("--details", action="store_true", help="list every case that is not clean")
    parser.add_argument("--endpoints", action="store_true", help="also run the bad-endpoint corpus (issue 22)")
    parser.add_argument("--only-endpoints", action="store_true", help="run the bad-endpoint corpus alone")
    parser.add_argument("--editor-benchmarks", action="store_true",
                        help="run the editor-benchmarks group of both corpora alone (issues 31 and 33)")
    parser.add_argument("--entries", default=None, help="comma-separated entry points to run (e.g. trainer,edit)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as tmp:
        workdir = Path(args.workdir or tmp)
        if args.editor_benchmarks:
            local, remote = run_editor_benchmark_group(workdir, args.timeout)
            _print(summary_table(local, entries=()), local, args.details)
            _print(endpoint_table(remote), remote, args.details)
            return 0
        if not args.only_endpoints:
            outcomes = run_corpus(workdir, args.timeout, entries=set(args.entries.split(",")) if args.entries else None)
            _print(summary_table(outcomes), outcomes, args.details)
        if args.endpoints or args.only_endpoints:
            outcomes = run_endpoint_corpus(workdir, args.timeout)
            _print(endpoint_table(outcomes), outcomes, args.details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
