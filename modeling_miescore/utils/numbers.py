"""Reading numbers from untrusted places (release files, raw CSV cells, metric results) and writing them JSON-safe."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

__all__ = ["finite_float", "json_safe", "model_fault", "non_finite_fields", "real_finite"]


def finite_float(value: Any) -> float | None:
    """``float(value)`` when it is a finite number, else ``None`` (NaN, inf, text that is no number, ``None``,
    and bools, which are flags rather than numbers)."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an int too large for a float (10**400)
        return None
    return number if math.isfinite(number) else None


def real_finite(value: Any) -> float | None:
    """``value`` as a float when it *is* a finite real number: a Python or NumPy int / float, or a 0-d numeric
    array or tensor; ``None`` for everything else, strings (``"55"``) and bools (``True``) included, which
    :func:`finite_float` would read. For values that must have been produced as numbers (a reward, a score)."""
    import numbers

    if getattr(value, "shape", None) == () and hasattr(value, "item"):  # a 0-d NumPy array or torch tensor
        value = value.item()
    if not isinstance(value, numbers.Real):  # NumPy's bool is not a Real; Python's bool is, finite_float refuses it
        return None
    return finite_float(value)  # refuses bools, NaN / inf and ints too large for a float


def non_finite_fields(result: Any) -> list[str]:
    """The names of a score record's numbers that are NaN or infinite. ``result``: a dict or an object with
    ``to_dict()`` (SpatialReward's results); nested values are not looked into, ``None`` (a flagged answer) is
    not a number."""
    values = _record_values(result)
    if not isinstance(values, dict):
        return []
    return [str(key) for key, value in values.items()
            if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value)]


def _record_values(result: Any) -> Any:
    """A score record as its dict (``to_dict()`` for SpatialReward's results; a dict or anything else as given)."""
    return result.to_dict() if hasattr(result, "to_dict") and not isinstance(result, dict) else result


def model_fault(result: Any) -> str | None:
    """A one-line description when ``result`` holds non-finite scores (a fault of the model, typically NaN
    weights: ``miescore doctor`` names them), else None. Such a score is never written or returned as a number."""
    bad = non_finite_fields(result)
    if not bad:
        return None
    values = _record_values(result)
    shown = ", ".join(f"{key}={values[key]}" for key in bad[:4])
    return (f"the model gave non-finite scores ({shown}): a fault of the model (NaN or Inf weights?), not of "
            "the input; check it with miescore doctor")


def json_safe(value):
    """Results as JSON-safe plain values (dataclasses, numpy/torch scalars, non-finite floats -> None)."""
    if hasattr(value, "to_dict") and not isinstance(value, (dict, type)):
        value = value.to_dict()  # e.g. SpatialRewardResult: its own JSON form
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (bool, int, str)) or value is None:
        return value
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalar
        try:
            value = value.item()
        except (TypeError, ValueError):
            return str(value)
        return json_safe(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)
