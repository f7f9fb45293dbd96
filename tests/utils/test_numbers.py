"""utils.numbers.finite_float: a number read from a release or an answer is a finite float or None, never an
exception (an integer too large for a float, as a hostile JSON file can hold, included)."""

from __future__ import annotations

import json

import pytest

from modeling_miescore.utils.numbers import finite_float


@pytest.mark.parametrize("value, expected", [
    (3, 3.0), ("2.5", 2.5), (json.loads("1" + "0" * 400), None), ("1e999", None), (float("nan"), None),
    (float("-inf"), None), (True, None), (None, None), ("lots", None), ([1], None),
], ids=lambda v: repr(v)[:20])
def test_finite_float(value, expected):
    assert finite_float(value) == expected
