"""The JSON reader's strict mode (spatialreward_relaxed_json.py), for answers outside the checkpoints: thinking
text and code fences are stripped, the first accepted balanced JSON value wins, nothing is repaired, degenerate
answers stay cheap."""

from __future__ import annotations

import pytest

from modeling_miescore.hub.spatialreward_relaxed_json import (MAX_ANSWER_CHARS, extract_first_json, is_unclosed,
                                                   strip_reasoning_and_fences)


def test_extract_first_json_is_bounded_on_degenerate_text():
    import time

    start = time.perf_counter()
    assert extract_first_json("{" * 150_000 + "[}" * 1000, lambda v: True) is None
    assert extract_first_json('{"a": 1}' * 20_000, lambda v: v == {"b": 2}) is None  # MAX_JSON_TRIES bounds decoding
    assert time.perf_counter() - start < 10
    assert extract_first_json('x {"a": "}{"} {"b": [1, {"c": 2}]}', lambda v: "b" in v) == {"b": [1, {"c": 2}]}


@pytest.mark.parametrize("text, expected", [
    ('<think>{"a": 1}</think> {"a": 2}', {"a": 2}),            # a closed thinking block is skipped
    ('opened in the prompt {"a": 1}</think>{"a": 3}', {"a": 3}),  # a lone </think>: what precedes it is thinking
    ('{"a": 4} <think>cut off {"a": 5}', {"a": 4}),              # an unclosed <think>: what follows is thinking
    ('<think>cut off while thinking {"a": 6}', None),
    ('```json\n{"a": 7}\n```', {"a": 7}),
    ('{"a": 8,}', None),                                        # strict JSON: no repairs
])
def test_thinking_text_and_fences_are_never_parsed(text, expected):
    assert extract_first_json(text, lambda v: isinstance(v, dict)) == expected


def test_outer_values_before_inner_ones_and_openers():
    text = 'prose [1, 2] then {"outer": {"inner": 1}}'
    assert extract_first_json(text, lambda v: True) == {"outer": {"inner": 1}}  # "[" is not an opener by default
    assert extract_first_json(text, lambda v: True, openers="{[") == [1, 2]
    assert extract_first_json(text, lambda v: "inner" in v) == {"inner": 1}


def test_strip_and_unclosed():
    assert strip_reasoning_and_fences("```python\nx\n```") == " \nx\n "
    assert len(strip_reasoning_and_fences("x" * (MAX_ANSWER_CHARS + 10))) == MAX_ANSWER_CHARS
    assert is_unclosed('Here: {"candidates": [{"edits": [') and not is_unclosed('{"a": [1]} and {')
    assert not is_unclosed("no JSON at all")
