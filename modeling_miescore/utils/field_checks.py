"""Constraints declared on the fields of a settings dataclass, and one pass that checks them all.

A field says what it accepts in its type, with :data:`typing.Annotated`; the dataclass and the recipes' parser
(``HfArgumentParser`` / ``TrlParser`` read the type without the annotation) work as before::

    @dataclass
    class Settings:
        lora_rank: Annotated[int, Bounds(ge=1)] = 32                        # an integer >= 1
        lora_dropout: Annotated[float, Bounds(ge=0, lt=1)] = 0.0            # a finite number in [0, 1)
        sde_type: Annotated[str, OneOf("sde", "cps")] = "sde"               # one of these ("did you mean")
        train_batch_size: Annotated[Optional[int], Bounds(ge=1)] = None     # None, or an integer >= 1
        dataset: Annotated[str, Required()] = ""                            # a non-empty string

:func:`field_problems` returns one phrase per bad value, naming the field, the value and what is allowed
(``"per_device_batch_size must be an integer >= 1, got 0"``, with "did you mean" for a choice). The type alone is a
constraint too: ``int`` refuses ``1.5``, ``True`` and ``"3"``; ``float`` refuses NaN, infinities, bools and strings;
``bool`` takes only a bool; ``Optional[...]`` also takes None. Constraints across fields belong in the dataclass's
own validator, which calls :func:`field_problems` first.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from .suggestions import closest_name

__all__ = ["Accepts", "Bounds", "OneOf", "Required", "field_problems", "suggestion"]


@dataclass(frozen=True)
class Bounds:
    """A number's range: ``ge`` / ``gt`` / ``le`` / ``lt`` (None: no bound on that side)."""

    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None

    def describe(self) -> str:
        low = f"[{_shown(self.ge)}" if self.ge is not None else f"({_shown(self.gt)}" if self.gt is not None else None
        high = f"{_shown(self.le)}]" if self.le is not None else f"{_shown(self.lt)})" if self.lt is not None else None
        if low and high:
            return f"in {low}, {high}"
        if low:
            return f">= {_shown(self.ge)}" if self.ge is not None else f"> {_shown(self.gt)}"
        if high:
            return f"<= {_shown(self.le)}" if self.le is not None else f"< {_shown(self.lt)}"
        return ""

    def holds(self, value: float) -> bool:
        return ((self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt)
                and (self.le is None or value <= self.le) and (self.lt is None or value < self.lt))


@dataclass(frozen=True)
class OneOf:
    """One of ``choices`` (compared as given; a near miss gets a "did you mean")."""

    choices: tuple

    def __init__(self, *choices):
        object.__setattr__(self, "choices", tuple(choices[0]) if len(choices) == 1 and not isinstance(
            choices[0], str) else tuple(choices))


@dataclass(frozen=True)
class Required:
    """A non-empty value (a string with something besides spaces, a non-empty list)."""


@dataclass(frozen=True)
class Accepts:
    """The types the value may have when they are wider than the field's declared type (which is what the
    command-line parser converts to): ``Annotated[str, Accepts(str, list)]`` is a string on the command line
    and a string or a list in a YAML config."""

    kinds: tuple

    def __init__(self, *kinds):
        object.__setattr__(self, "kinds", tuple(kinds))


def _shown(value) -> str:
    if isinstance(value, int):
        return f"2**{value.bit_length() - 1}" if value >= 2 ** 32 and value & (value - 1) == 0 else str(value)
    return f"{value:g}" if isinstance(value, float) else str(value)


def suggestion(value: Any, choices: Sequence[str]) -> str:
    """``" (did you mean 'x'?)"`` for the choice closest to ``value`` (ignoring case;
    :func:`~modeling_miescore.utils.suggestions.closest_name`), or ``""`` when none is close."""
    if not isinstance(value, str):
        return ""
    lowered = {str(c).lower(): str(c) for c in choices}
    match = closest_name(value.strip().lower(), lowered)
    return f" (did you mean {lowered[match]!r}?)" if match else ""


def _type_problem(value: Any, kind: Any) -> Optional[str]:
    """What ``value`` should be when it is not of ``kind`` (int, float, str, bool, list[str], dict, a union)."""
    origin = typing.get_origin(kind)
    if origin is typing.Union or origin is types.UnionType:
        members = [m for m in typing.get_args(kind) if m is not type(None)]
        problems = [_type_problem(value, m) for m in members]
        return None if any(p is None for p in problems) else " or ".join(p for p in problems if p)
    if kind is bool:
        return None if isinstance(value, bool) else "true or false"
    if kind is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "an integer"
    if kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "a number"
        try:
            return None if math.isfinite(float(value)) else "a finite number"
        except OverflowError:
            return "a finite number"
    if kind is str:
        return None if isinstance(value, str) else "a string"
    if origin is list or kind is list:
        item = (typing.get_args(kind) or (Any,))[0]
        if not isinstance(value, list):
            return "a list"
        if item is not Any and any(_type_problem(v, item) for v in value):
            return f"a list of {getattr(item, '__name__', item)} values".replace("str values", "strings")
        return None
    if origin is dict or kind is dict:
        return None if isinstance(value, dict) else "a mapping"
    return None


def _constraint_problem(name: str, value: Any, kind: Any, constraints: Sequence[Any]) -> Optional[str]:
    optional = type(None) in typing.get_args(kind)
    if value is None:
        return None if optional else f"{name} is required"
    accepts = next((c for c in constraints if isinstance(c, Accepts)), None)
    if accepts is not None:
        kind = typing.Union[accepts.kinds + ((type(None),) if optional else ())]
    expected = _type_problem(value, kind)
    or_none = " or None" if optional else ""
    for constraint in constraints:
        if isinstance(constraint, Required) and (value in ("", []) or (isinstance(value, str) and not value.strip())):
            return f"{name} is required"
        if isinstance(constraint, OneOf) and expected is None and value not in constraint.choices:
            choices = ", ".join(map(str, constraint.choices))
            return f"{name} must be one of {choices}, got {value!r}{suggestion(value, constraint.choices)}"
        if isinstance(constraint, Bounds) and (expected is not None or not constraint.holds(value)):
            noun = "an integer" if int in _members(kind) else "a finite number"
            return f"{name} must be {noun} {constraint.describe()}{or_none}, got {value!r}"
    if expected is not None:
        return f"{name} must be {expected}{or_none}, got {value!r}"
    return None


def _members(kind: Any) -> tuple:
    """The types a field takes: ``Optional[int]`` -> ``(int, NoneType)``, ``int`` -> ``(int,)``."""
    origin = typing.get_origin(kind)
    return typing.get_args(kind) if origin is typing.Union or origin is types.UnionType else (kind,)


def field_problems(settings: Any) -> List[str]:
    """One phrase per field of the dataclass instance ``settings`` whose value breaks its declared type or
    constraints (module docstring), in field order."""
    hints = typing.get_type_hints(type(settings), include_extras=True)
    problems = []
    for item in dataclasses.fields(settings):
        declared = hints.get(item.name)
        constraints: tuple = ()
        if typing.get_origin(declared) is typing.Annotated:
            declared, *rest = typing.get_args(declared)
            constraints = tuple(rest)
        problem = _constraint_problem(item.name, getattr(settings, item.name), declared, constraints)
        if problem:
            problems.append(problem)
    return problems
