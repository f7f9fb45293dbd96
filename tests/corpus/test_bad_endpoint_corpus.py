"""The bad-endpoint corpus (issue 22): hostile OpenAI-compatible answers (compression bombs, trickling bodies,
slow headers, huge chunked bodies, lone surrogates, huge numbers, deep nesting, injected JSON, chat-control
tokens, credentials) through ``miescore judge``, ``spatialreward-data`` and ``mer-bench synthesize`` against the
bad server of ``tests/local_http.py``. Every case must be clean (rules: ``corpus.bad_endpoint_corpus``; the
before/after table: ``benchmarks/bad_input_table.py --only-endpoints``). About a minute (64 MiB bombs, 2 s
deadlines): marked slow; the default suite checks each item in ``test_endpoint_limits.py`` and
``test_endpoint_answers.py``."""

from __future__ import annotations

import collections

import pytest

from corpus.bad_endpoint_corpus import ENDPOINT_ENTRIES, EndpointCorpus
from corpus.cases import endpoint_cases

CASES = endpoint_cases()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return EndpointCorpus(tmp_path_factory.mktemp("endpoint-corpus"), timeout=40.0)


def test_the_corpus_covers_every_command_and_item():
    per_entry = collections.Counter(case.entry for case in CASES)
    assert set(per_entry) == set(ENDPOINT_ENTRIES) and min(per_entry.values()) >= 5
    assert {"22.2", "22.3", "22.5", "22.6", "22.7", "22.8", "22.10"} <= {case.item for case in CASES}
    assert len({(case.entry, case.name) for case in CASES}) == len(CASES)


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(case, id=f"{case.entry}: {case.name}") for case in CASES])
def test_hostile_answer_is_handled_cleanly(corpus, case):
    outcome = corpus.run(case)
    assert outcome.clean, outcome.describe()
