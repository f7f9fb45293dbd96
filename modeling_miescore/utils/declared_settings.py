"""Settings declared once, with pydantic constraints, and checked in one pass that names every bad value in one
line.

A setting declares its type, default and bounds as one pydantic field: ``Field(16, gt=0, description=...)`` on a
:class:`DeclaredSettings` model, or ``Annotated[int, Field(ge=1)]`` on a dataclass that TRL's ``TrlParser`` /
``HfArgumentParser`` reads (they see the type without the annotation)::

    lora_rank: Annotated[int, Field(ge=1)] = 32                             # an integer >= 1
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0                 # a finite number in [0, 1)
    sde_type: Annotated[str, one_of("sde", "cps")] = "sde"                  # one of these ("did you mean")
    train_batch_size: Annotated[Optional[int], Field(ge=1)] = None          # None, or an integer >= 1
    dataset: Annotated[str, REQUIRED] = ""                                  # a non-empty string

Checked strictly (``int`` refuses ``1.5``, ``True`` and ``"3"``; ``float`` refuses NaN, infinities, bools and
strings; ``bool`` takes only a bool):

- :func:`field_problems` returns one phrase per bad field of a dataclass, naming the field, the value and what is
  allowed (``"per_device_batch_size must be an integer >= 1, got 0"``); rules across fields belong in the
  dataclass's own validator, which calls it first;
- constructing a :class:`DeclaredSettings` raises :class:`SettingsError` (a ``ValueError``), one line per bad field:
  ``ServerSettings.max_batch must be > 0, got 0 (samples per model call)``;
- :func:`add_setting_options` adds one argparse option per model field (``max_batch`` -> ``--max-batch``, a trailing
  ``_s`` dropped), an on-flag for a ``bool``, and for a secret (``json_schema_extra={"secret": True}``)
  ``--api-key-env VAR`` naming the variable that holds it, so no secret appears on a command line;
- :func:`settings_from_options` reads them back: the option, else ``ENV_PREFIX + OPTION`` (empty counts as unset),
  else the default, and names a bad value by the option or variable it came from.

Neither ``HfArgumentParser`` (no bounds, no environment) nor pydantic-settings (``ServerSettings()`` would depend on
the caller's environment, and its options are named after the fields) fits without restating every field.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import types
import typing
from typing import Any, Callable, ClassVar, List, Mapping

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, create_model

from .suggestions import suggestion

__all__ = ["DeclaredSettings", "REQUIRED", "SettingsError", "add_setting_options", "check_fields", "env_name",
           "field_problems", "one_of", "option_name", "settings_from_options"]

_STRICT = ConfigDict(strict=True, allow_inf_nan=False)


def one_of(*choices) -> AfterValidator:
    """A value among ``choices`` (given as arguments or as one sequence); a near miss gets a "did you mean"."""
    choices = tuple(choices[0]) if len(choices) == 1 and not isinstance(choices[0], str) else choices

    def check(value):
        if value not in choices:
            raise ValueError(f"must be one of {', '.join(map(str, choices))}, got {value!r}"
                             f"{suggestion(value, choices)}")
        return value

    return AfterValidator(check)


def _required(value):
    if value is None or value in ("", []) or (isinstance(value, str) and not value.strip()):
        raise ValueError("is required")
    return value


REQUIRED = AfterValidator(_required)  # a value besides None, "", spaces or []


@functools.cache
def _field_checker(cls: type) -> type[BaseModel]:
    """A strict pydantic model with the fields of the dataclass ``cls`` as it declares them."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return create_model(cls.__name__, __config__=_STRICT,
                        **{item.name: (hints[item.name], ...) for item in dataclasses.fields(cls)})


def field_problems(settings: Any) -> List[str]:
    """One phrase per field of the dataclass instance ``settings`` whose value breaks its declaration (module
    docstring), in field order."""
    checker = _field_checker(type(settings))
    try:
        checker(**{name: getattr(settings, name) for name in checker.model_fields})
    except ValidationError as error:
        bad = {}  # field -> its first error
        for item in error.errors(include_url=False):
            bad.setdefault(item["loc"][0], item)
        return [_field_problem(name, getattr(settings, name), checker.model_fields[name], bad[name])
                for name in checker.model_fields if name in bad]
    return []


def check_fields(settings: Any) -> None:
    """Raise a ``ValueError`` naming every bad field of the dataclass ``settings`` in one line (:func:`field_problems`;
    for a ``__post_init__``)."""
    problems = field_problems(settings)
    if problems:
        raise ValueError(f"{type(settings).__name__}: {'; '.join(problems)}")


def _field_problem(name: str, value: Any, info, error: dict) -> str:
    if error["type"] == "value_error":  # one_of / REQUIRED: their own words
        return f"{name} {error['ctx']['error']}"
    members = _members(info.annotation)
    optional = type(None) in members and REQUIRED not in info.metadata
    if value is None and not optional:
        return f"{name} is required"
    bounds = {key: getattr(c, key) for c in info.metadata for key in ("ge", "gt", "le", "lt") if hasattr(c, key)}
    accepted = " or ".join(_noun(m) for m in members if m is not type(None))
    return f"{name} must be {accepted}{_range(**bounds)}{' or None' if optional else ''}, got {value!r}"


def _members(kind: Any) -> tuple:
    """The types a field takes: ``Optional[int]`` -> ``(int, NoneType)``, ``int`` -> ``(int,)``."""
    origin = typing.get_origin(kind)
    return typing.get_args(kind) if origin is typing.Union or origin is types.UnionType else (kind,)


_NOUNS = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string", dict: "a mapping"}


def _noun(kind: Any) -> str:
    if typing.get_origin(kind) is list or kind is list:
        item = (typing.get_args(kind) or (None,))[0]
        return f"a list of {_noun(item).split(' ', 1)[1]}s" if item in _NOUNS else "a list"
    return _NOUNS.get(typing.get_origin(kind) or kind, getattr(kind, "__name__", str(kind)))


def _range(ge=None, gt=None, le=None, lt=None) -> str:
    """`` in [0, 1)``, `` >= 1``, ``""`` (no bound)."""
    low = f"[{_shown(ge)}" if ge is not None else f"({_shown(gt)}" if gt is not None else None
    high = f"{_shown(le)}]" if le is not None else f"{_shown(lt)})" if lt is not None else None
    if low and high:
        return f" in {low}, {high}"
    return next((f" {sign} {_shown(bound)}" for sign, bound in ((">=", ge), (">", gt), ("<=", le), ("<", lt))
                 if bound is not None), "")


def _shown(value) -> str:
    """16 -> "16", 20.0 -> "20", 128000000 -> "128,000,000", 2**63 -> "2**63"."""
    if isinstance(value, int) and value >= 2 ** 32 and value & (value - 1) == 0:
        return f"2**{value.bit_length() - 1}"
    if isinstance(value, int) and value >= 100_000:
        return f"{value:,}"
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


class SettingsError(ValueError):
    """Bad setting values: one line naming each by where it came from (field, option or environment variable).

    ``errors``: pydantic's error dicts, to name the values otherwise (:func:`describe_errors`).
    """

    def __init__(self, message: str, errors: list[dict] | None = None):
        super().__init__(message)
        self.errors = errors or []


class DeclaredSettings(BaseModel):
    """Base of a settings class whose fields are the one declaration of its settings (see the module docstring).

    ``ENV_PREFIX``: the prefix of the environment variables :func:`settings_from_options` reads.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True)
    ENV_PREFIX: ClassVar[str] = ""

    def __init__(self, /, **values: Any):
        try:
            super().__init__(**values)
        except ValidationError as error:
            # pydantic calls an overridden __init__ from model_validate too, so this is the one place errors form
            errors = error.errors(include_url=False)
            name = type(self).__name__
            raise SettingsError(describe_errors(type(self), errors, lambda field: f"{name}.{field}"), errors) from None


def option_name(field: str) -> str:
    """``max_batch`` -> ``max-batch``, ``request_timeout_s`` -> ``request-timeout`` (the option, without ``--``)."""
    return field.removesuffix("_s").replace("_", "-")


def env_name(settings: type[DeclaredSettings], field: str) -> str:
    """The environment variable of ``field``: ``settings.ENV_PREFIX`` + the option name in capitals."""
    return settings.ENV_PREFIX + option_name(field).upper().replace("-", "_")


def _is_secret(info) -> bool:
    extra = info.json_schema_extra if info is not None else None
    return isinstance(extra, dict) and bool(extra.get("secret"))


_BOUNDS = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}


def _problem(settings: type[DeclaredSettings], error: dict, label: Callable[[str], str]) -> str:
    field = str(error["loc"][0]) if error["loc"] else ""
    info = settings.model_fields.get(field)
    if info is None:
        return f"{label(field)} is not a setting; the settings are: {', '.join(settings.model_fields)}"
    if error["type"] in _BOUNDS:
        key = _BOUNDS[error["type"]]
        what = f" must be{_range(**{key: error['ctx'][key]})},"
    else:  # pydantic's own words, e.g. "Input should be a valid integer, unable to parse string as an integer"
        what = f": {error['msg'][:1].lower()}{error['msg'][1:]};"
    value = error.get("input")
    shown = "(hidden)" if _is_secret(info) else value if isinstance(value, str) and value.strip() else repr(value)
    return f"{label(field)}{what} got {shown}" + (f" ({info.description})" if info.description else "")


def describe_errors(settings: type[DeclaredSettings], errors: list[dict], label: Callable[[str], str]) -> str:
    """One line for pydantic's ``errors`` about ``settings``; ``label(field)`` says where each bad value came from."""
    return "; ".join(_problem(settings, e, label) for e in errors)


def add_setting_options(parser, settings: type[DeclaredSettings]) -> None:
    """One option per field of ``settings`` (``parser``: a parser or an argument group); every option's default
    is ``None`` ("not given"), so that :func:`settings_from_options` can fall back to the environment."""
    for field, info in settings.model_fields.items():
        flag = "--" + option_name(field)
        text = (info.description or field).replace("%", "%%")  # argparse %-formats help
        if _is_secret(info):
            parser.add_argument(f"{flag}-env", dest=f"{field}_env", metavar="VAR", default=None,
                                help=f"{text}; the value is read from the environment variable VAR, never from "
                                     "the command line, where other users could read it (without this option: "
                                     f"from {env_name(settings, field)} when set)")
        elif info.annotation is bool:
            parser.add_argument(flag, dest=field, action="store_true", default=None, help=text)
        else:
            parser.add_argument(flag, dest=field, default=None, metavar=option_name(field).upper().replace("-", "_"),
                                help=f"{text} (default {_shown(info.default)})")


def settings_from_options(settings: type[DeclaredSettings], args: argparse.Namespace,
                          environ: Mapping[str, str] | None = None, **fixed):
    """``settings`` from the options of :func:`add_setting_options` in ``args``, else the environment variables
    (``environ``, default ``os.environ``), else the defaults; ``fixed``: values that override all three.

    Raises :class:`SettingsError` naming each bad value's option (``--max-batch``) or variable.
    """
    environ = os.environ if environ is None else environ
    values, labels = {}, {}
    for field, info in settings.model_fields.items():
        if field in fixed:
            continue
        variable = env_name(settings, field)
        if _is_secret(info) and getattr(args, f"{field}_env", None):
            variable = getattr(args, f"{field}_env")
            if not environ.get(variable):
                raise SettingsError(f"--{option_name(field)}-env {variable}: that environment variable is unset "
                                    f"or empty; export it first ({info.description})")
            values[field], labels[field] = environ[variable], f"--{option_name(field)}-env {variable}"
        elif getattr(args, field, None) is not None:
            values[field], labels[field] = getattr(args, field), "--" + option_name(field)
        elif environ.get(variable):
            values[field], labels[field] = environ[variable], variable
    try:
        return settings(**values, **fixed)
    except SettingsError as error:
        where = lambda field: labels.get(field, f"{settings.__name__}.{field}")  # noqa: E731
        raise SettingsError(describe_errors(settings, error.errors, where), error.errors) from None
