"""Run the bad-input corpus against the current code and print the before/after table (CPU; a few minutes).

    python benchmarks/bad_input_table.py [--workdir DIR] [--timeout 60] [--details] [--endpoints | --only-endpoints]

Every case of ``modeling_miescore.testing.bad_input_corpus`` (broken and hostile images, bad instructions,
bad JSONL lines and paths, a checkpoint that ships code) goes through the Python API, ``miescore score``,
``miescore score-batch`` and the reward server (in this process, on a tiny random MIEScore checkpoint,
``bad_input_corpus.CORPUS_CHECKPOINT``). The table counts per entry point the cases tried, the clean ones and each kind
of failure (a case can fail in several ways); ``--details`` lists every case that is not clean.

"After" is this checkout. "Before" is the same corpus against the code before issue 13's fixes (commit
d3af651: main before the library fixes and before the serving-c merge). The corpus modules only use entry points
that code already had, so they are copied into a checkout of it::

    git worktree add --detach ../before d3af651
    cp modeling_miescore/testing/{bad_input_corpus,bad_input_runners,bad_inputs,tampered_checkpoint}.py \
       ../before/modeling_miescore/testing/
    (cd ../before && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/bad_input_table.py" --timeout 20 --details)

(``--timeout 20``: a case still running after 20 s counts as a hang; the old code blocks forever on a FIFO.)

Issue 22's local cases (``testing.bad_input_local``: the ``checkpoint``, ``paths`` and ``data`` rows, and the
chat-control-token and surrogate instructions in the first four) are part of this corpus. Their "before" is commit
c6d6d54 (main before issue 22), measured the same way, with the new corpus modules copied along::

    git worktree add --detach ../before-22 c6d6d54
    cp modeling_miescore/testing/{bad_input_corpus,bad_input_runners,bad_inputs,tampered_checkpoint,bad_input_local,bad_checkpoints}.py \
       ../before-22/modeling_miescore/testing/
    (cd ../before-22 && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/bad_input_table.py" --timeout 60 --details)

(the two ``doctor`` cases start a fresh interpreter and may take minutes on a loaded machine; they have their own
600 s bound.)

Issue 31's editor cases (``testing.bad_input_editor`` and ``testing.bad_input_edit``: the ``trainer`` and ``edit``
rows; ``editor-benchmarks`` is the editor benchmarks' own row) are part of this corpus too. Their "before" is commit 45cc0d1 (main before
issue 31), measured the same way with the corpus modules copied along (``--entries trainer,edit`` runs them
alone; the cases that could exhaust the machine's memory on the old code run in a child process with 6 GB of
address space)::

    git worktree add --detach ../before-31 45cc0d1
    cp modeling_miescore/testing/{bad_input_corpus,bad_input_runners,bad_inputs,tampered_checkpoint,bad_input_local,bad_checkpoints,bad_input_editor,bad_input_edit,bad_input_editor_runs,bad_input_editor_benchmarks}.py \
       ../before-31/modeling_miescore/testing/
    (cd ../before-31 && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/bad_input_table.py" --entries trainer,edit \
        --timeout 60 --details)

``--endpoints`` also runs the bad-endpoint corpus of issue 22 (``testing.bad_endpoint_corpus``: ``judge``,
``spatialreward-data`` and ``mer-bench synthesize`` against the bad server of ``tests/local_http.py``) and prints
its own table; ``--only-endpoints`` runs that corpus alone. Its "before" is commit c6d6d54 (main before issue
22's endpoint fixes), measured the same way (the bad server is imported from this checkout's ``tests/``)::

    git worktree add --detach ../before-22 c6d6d54
    cp modeling_miescore/testing/{bad_input_corpus,bad_endpoint_corpus}.py ../before-22/modeling_miescore/testing/
    (cd ../before-22 && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/bad_input_table.py" --only-endpoints \
        --timeout 30 --details)

The ``editor-benchmarks`` group (issues 31 and 33; ``testing.bad_input_editor_benchmarks``) is in both corpora:
``convert-benchmark gedit-bench`` / ``imgedit-bench`` with NUL bytes, chat-control tokens and 10,000-character
instructions and ImgEdit's current release (the bad-input table), and ``benchmark gedit`` / ``imgedit`` against the
bad server with nested answers, non-integer scores, ``?key=`` in the judge URL and ImgEdit's released
``prompts.json`` keys (the ``--endpoints`` table). Its "before" is commit 45cc0d1 (main before issue 33's editor
benchmark work), with the group's module copied along::

    mkdir ../before-33 && git archive 45cc0d1 | tar -x -C ../before-33
    cp modeling_miescore/testing/bad_input_editor_benchmarks.py ../before-33/modeling_miescore/testing/
    (cd ../before-33 && PYTHONPATH=$PWD python "$OLDPWD/benchmarks/bad_input_table.py" --editor-benchmarks --details)

(``--editor-benchmarks`` runs that group alone, in both corpora, from its own module, so it needs nothing else of
this checkout; about a minute.)
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


def _run_cases(runner, cases) -> list:
    """Each case run by ``runner`` (a corpus), its outcome printed as it finishes."""
    outcomes = []
    for case in cases:
        started = time.monotonic()
        outcome = runner.run(case)
        outcomes.append(outcome)
        print(f"{time.monotonic() - started:6.1f} s  {outcome.describe()}", file=sys.stderr, flush=True)
    return outcomes


def _local_http():
    """``tests/local_http.py`` (the bad server), which the package does not ship."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import local_http

    return local_http


def run_corpus(workdir: Path, timeout: float, cases=None, entries=None) -> list:
    """The bad-input corpus's ``cases`` (default: every case, or those of ``entries``)."""
    from modeling_miescore.scoring.loading import load_scorer
    from modeling_miescore.testing.bad_input_corpus import Corpus, build_corpus_checkpoint

    if cases is None:
        from modeling_miescore.testing.bad_input_runners import all_cases

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
    from modeling_miescore.testing.bad_endpoint_corpus import EndpointCorpus

    local_http = _local_http()
    if cases is None:
        from modeling_miescore.testing.bad_endpoint_corpus import endpoint_cases

        cases = endpoint_cases(local_http)
    return _run_cases(EndpointCorpus(workdir / "endpoint-corpus", local_http, timeout=timeout), cases)


def run_editor_benchmark_group(workdir: Path, timeout: float) -> tuple[list, list]:
    """The ``editor-benchmarks`` cases of both corpora: ``(bad-input outcomes, bad-endpoint outcomes)``."""
    from modeling_miescore.testing.bad_input_editor_benchmarks import (editor_benchmark_cases,
                                                                        editor_benchmark_endpoint_cases)

    return (run_corpus(workdir, timeout, editor_benchmark_cases()),
            run_endpoint_corpus(workdir, timeout, editor_benchmark_endpoint_cases(_local_http())))


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

    from modeling_miescore.testing.bad_input_corpus import summary_table

    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as tmp:
        workdir = Path(args.workdir or tmp)
        if args.editor_benchmarks:
            from modeling_miescore.testing.bad_endpoint_corpus import endpoint_table

            local, remote = run_editor_benchmark_group(workdir, args.timeout)
            _print(summary_table(local, entries=()), local, args.details)
            _print(endpoint_table(remote), remote, args.details)
            return 0
        if not args.only_endpoints:
            outcomes = run_corpus(workdir, args.timeout, entries=set(args.entries.split(",")) if args.entries else None)
            _print(summary_table(outcomes), outcomes, args.details)
        if args.endpoints or args.only_endpoints:
            from modeling_miescore.testing.bad_endpoint_corpus import endpoint_table

            outcomes = run_endpoint_corpus(workdir, args.timeout)
            _print(endpoint_table(outcomes), outcomes, args.details)
    return 0


if __name__ == "__main__":
    sys.exit(main())
