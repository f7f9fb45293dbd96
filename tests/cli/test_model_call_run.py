"""``cli.model_calls.ModelCallRun``: the cache, usage log and engines one model-calling command run shares."""

import argparse
import json
import sqlite3

import pytest

from modeling_miescore.cli.model_calls import ModelCallRun, add_call_args
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.judges.chat_backends import parse_judge_spec


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_call_args(parser)
    return parser.parse_args(list(argv))


def test_engines_are_shared_per_spec_and_everything_closes_on_error(tmp_path):
    a = parse_judge_spec("model-a@http://127.0.0.1:9/v1")
    b = parse_judge_spec("model-b@http://127.0.0.1:9/v1")
    log = tmp_path / "logs" / "usage.jsonl"
    with pytest.raises(RuntimeError, match="stage failed"):
        with ModelCallRun(_args("--price", "model-a=1,2"), "demo", tmp_path / "calls.sqlite", log,
                          {"what": "test"}) as calls:
            first, again, other = calls.engine(a), calls.engine(a), calls.engine(b)
            assert first is again and first is not other and first.cache is calls.cache
            assert first.usage is other.usage is calls.usage
            raise RuntimeError("stage failed")
    record = json.loads(log.read_text())
    assert record["command"] == "demo" and record["what"] == "test"
    assert record["cache_totals"] is not None and record["usage"]["totals"]["requests"] == 0
    with pytest.raises(sqlite3.ProgrammingError):  # the cache's connection was closed on the way out
        calls.cache.get_many(["key"])


def test_no_cache_and_setup_failures_leave_no_files(tmp_path):
    spec = parse_judge_spec("model-a@http://127.0.0.1:9/v1")
    with ModelCallRun(_args("--no-cache"), "demo", tmp_path / "calls.sqlite", tmp_path / "usage.jsonl") as calls:
        assert calls.engine(spec).cache is None
    assert not (tmp_path / "calls.sqlite").exists()
    assert json.loads((tmp_path / "usage.jsonl").read_text())["cache_totals"] is None
    cache, log = tmp_path / "other.sqlite", tmp_path / "other.jsonl"
    with pytest.raises(MIEScoreInputError, match="--price 'gpt-5=1'"):
        ModelCallRun(_args("--price", "gpt-5=1"), "demo", cache, log)
    args = _args()
    args.concurrency = 0  # the backend refuses it (the parser would have, too)
    with pytest.raises(MIEScoreInputError, match="max_concurrency must be >= 1"):
        with ModelCallRun(args, "demo", cache, log) as calls:
            calls.engine(spec)
    assert not cache.exists() and not log.exists()
