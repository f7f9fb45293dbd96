"""The bad-input corpus (issue 13): 95 broken or hostile inputs through the Python API, ``miescore score``,
``miescore score-batch`` and the reward server. Every case must be clean: the documented error and status, no
traceback, no hang, nothing half-written, the other inputs still scored, no shipped code or Ghostscript run
(rules: ``modeling_miescore.testing.bad_input_corpus``; the table: ``benchmarks/bad_input_table.py``).

One tiny model is loaded once; the server runs in this process.
"""

from __future__ import annotations

import collections

import pytest

from modeling_miescore.testing.bad_input_corpus import ENTRIES, Corpus, build_corpus_checkpoint
from modeling_miescore.testing.bad_input_runners import all_cases

CASES = all_cases()


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
    assert set(per_entry) == set(ENTRIES) and min(per_entry.values()) >= 15
    items = {item for case in CASES for item in case.item.split("/")}
    assert {"13.1", "13.3", "13.4", "13.5", "13.6", "13.7", "13.8", "13.9", "13.10", "13.11", "13.15"} <= items
    assert len({(case.entry, case.name) for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", [pytest.param(case, id=f"{case.entry}: {case.name}")
                                  for case in CASES])
def test_bad_input_is_handled_cleanly(corpus, case):
    outcome = corpus.run(case)
    assert outcome.clean, outcome.describe()
