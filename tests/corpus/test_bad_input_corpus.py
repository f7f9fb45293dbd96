"""The bad-input corpus (issues 13 and 22): broken or hostile inputs through the Python API, ``miescore score``,
``miescore score-batch`` and the reward server, and (issue 22, ``corpus.bad_input_local``) damaged checkpoints,
aliased output paths and foreign predictions files, model faults, release readers and caps. Every case must be
clean: the documented error and status, no traceback, no hang, nothing half-written, the other inputs still
scored, no shipped code or Ghostscript run (rules: ``corpus.bad_input_corpus``; the table:
``benchmarks/bad_input_table.py``).

One tiny model is loaded once; the server runs in this process. Issue 22's cases that repeat what a focused test
already covers (every damaged checkpoint: ``test_checkpoint_validation``; the score-batch and CLI runs of the
new instruction cases) or that start a fresh interpreter (``doctor``) are ``slow``.
"""

from __future__ import annotations

import collections

import pytest

from corpus.bad_input_corpus import ENTRIES, Corpus, build_corpus_checkpoint
from corpus.cases import all_cases

CASES = all_cases()
# Issue 22's cases in the default suite: one or more per item; the others are marked slow (module docstring).
DEFAULT_ISSUE_22 = {
    ("api", "<|image_pad|> in the instruction"), ("api", "a forged chat turn in the instruction"),
    ("api", "a lone surrogate in the instruction"), ("server", "<|video_pad|> in the instruction"),
    ("checkpoint", "NaN weights: score"), ("checkpoint", "doctor FILE"),
    ("paths", "build-dataset --out raw/../raw --overwrite"), ("paths", "space build --out /proc/self/space"),
    ("paths", "judge --cache X --output X"), ("paths", "score-batch --output a hard link to --input"),
    ("paths", "judge --output in missing folders"), ("paths", "score-batch extends a judge's predictions"),
    ("data", "build-dataset: release with link loop"), ("data", "build-dataset: release with nested"),
    ("data", "build-dataset: release with long instruction"),
    ("data", "annotation ledger line without sample_id / not JSON"), ("data", "annotator id of 100K characters"),
    ("data", "grounder label of 200K characters"), ("data", "--grid sub-score NaN"), ("data", "API batch_size=1.5"),
    ("data", "NaN weights: server"),
}


# Issue 31's editor cases in the default suite (each repeats a focused test of tests/test_editor_rl_*.py; the
# others, which train or start child processes, are slow)
DEFAULT_ISSUE_31 = {
    ("trainer", "config report_to: tensorbord"), ("trainer", "output_dir = dataset folder through a link"),
    ("trainer", "serve: a body with 'results' twice"), ("trainer", "reward: a callable returning strings"),
    ("trainer", "--resume: trainer_state.json at step -4"), ("edit", "--input = the --out folder's own edits.jsonl"),
    ("edit", "--lora with a NaN adapter"),
}


# Issue 41's cases that start a child process (a reward that exits, a FIFO, files bounded by RLIMIT_FSIZE: 7-12 s
# each) are slow; the others (export-vllm, benchmark editors, edit --select) take about 20 s together
SLOW_ISSUE_41 = {
    ("export-vllm", "C/vocab.json -> /dev/zero"), ("export-vllm", "C/vocab.json of 257 MiB (sparse)"),
    ("export-vllm", "C/vocab.json a FIFO"), ("export-vllm", "C/tokenizer.json a FIFO"),
    ("export-vllm", "C/model.safetensors a FIFO"),
    ("export-vllm", "SpatialReward: a full disk"), ("export-vllm", "MIEScore: a full disk"),
    ("benchmark editors", "a full disk, an earlier comparison in --out"),
    ("edit --select", "a reward raising SystemExit(0)"), ("edit --select", "a reward calling os._exit(0)"),
    ("edit --select", "--num-images of 40 digits"),
}


def _marks(case) -> tuple:
    if case.entry == "editor-benchmarks":  # issues 31 / 33: eight small conversions, about 2 s in all
        return ()
    if case.item.startswith("41."):
        return (pytest.mark.slow,) if (case.entry, case.name) in SLOW_ISSUE_41 else ()
    issue = case.item.split(".")[0]
    default = {"22": DEFAULT_ISSUE_22, "31": DEFAULT_ISSUE_31}.get(issue)
    return (pytest.mark.slow,) if default is not None and (case.entry, case.name) not in default else ()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from modeling_miescore.scoring.loading import load_scorer

    checkpoint = build_corpus_checkpoint(tmp_path_factory.mktemp("corpus-checkpoint") / "tiny-miescore")
    model = load_scorer(str(checkpoint), device="cpu", dtype="float32")
    corpus = Corpus(tmp_path_factory.mktemp("corpus"), model, checkpoint, timeout=30.0)
    yield corpus
    corpus.close()


def test_the_corpus_covers_every_entry_point_and_item():
    assert len(CASES) >= 60
    per_entry = collections.Counter(case.entry for case in CASES)
    assert set(ENTRIES) | {"checkpoint", "paths", "data", "trainer", "edit"} <= set(per_entry)
    assert min(per_entry.values()) >= 8
    items = {item for case in CASES for item in case.item.split("/")}
    assert {"13.1", "13.3", "13.4", "13.5", "13.6", "13.7", "13.8", "13.9", "13.10", "13.11", "13.15"} <= items
    issue_22 = {"22.1", "22.4", "22.9", "22.11", "22.12", "22.13", "22.14", "22.15", "22.17", "22.18", "22.19",
                "22.20", "22.21", "22.22"}
    assert issue_22 <= items
    # 22.1 and 22.14 run in the default suite as test_doctor and test_checkpoint_validation
    assert issue_22 <= {case.item for case in CASES if (case.entry, case.name) in DEFAULT_ISSUE_22} | {"22.1", "22.14"}
    assert DEFAULT_ISSUE_22 | DEFAULT_ISSUE_31 <= {(case.entry, case.name) for case in CASES}
    assert {"31.1", "31.2", "31.3", "31.4", "31.5", "31.M"} <= items  # issue 31: the trainer and edit rows
    assert {"41.vllm", "41.editors", "41.select"} <= items  # issue 41: export-vllm, benchmark editors, edit --select
    assert SLOW_ISSUE_41 <= {(case.entry, case.name) for case in CASES}
    assert len({(case.entry, case.name) for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [pytest.param(case, id=f"{case.entry}: {case.name}", marks=_marks(case))
                                  for case in CASES])
def test_bad_input_is_handled_cleanly(corpus, case):
    outcome = corpus.run(case)
    assert outcome.clean, outcome.describe()
