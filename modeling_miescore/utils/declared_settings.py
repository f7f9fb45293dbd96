"""Settings declared once, as pydantic fields, and the command-line options and environment variables built from
them.

A settings class subclasses :class:`DeclaredSettings` and declares each setting as one pydantic field (type,
default, bounds, ``description``). From that declaration:

- constructing it checks every bound and raises :class:`SettingsError` (a ``ValueError``), one line per bad field:
  ``ServerSettings.max_batch must be > 0, got 0 (samples per model call)``;
- :func:`add_setting_options` adds one argparse option per field (``max_batch`` -> ``--max-batch``, a trailing
  ``_s`` dropped), an on-flag for a ``bool``, and for a secret (``json_schema_extra={"secret": True}``)
  ``--api-key-env VAR`` naming the variable that holds it, so no secret appears on a command line;
- :func:`settings_from_options` reads them back: the option, else ``ENV_PREFIX + OPTION`` (empty counts as unset),
  else the default, and names a bad value by the option or variable it came from.

Neither ``HfArgumentParser`` (no bounds, no environment) nor pydantic-settings (``ServerSettings()`` would depend on
the caller's environment, and its options are named after the fields) fits without restating every field.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Callable, ClassVar, Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

__all__ = ["DeclaredSettings", "SettingsError", "add_setting_options", "env_name", "option_name",
           "settings_from_options"]


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


_BOUNDS = {"greater_than": ("gt", ">"), "greater_than_equal": ("ge", ">="), "less_than": ("lt", "<"),
           "less_than_equal": ("le", "<=")}


def _problem(settings: type[DeclaredSettings], error: dict, label: Callable[[str], str]) -> str:
    field = str(error["loc"][0]) if error["loc"] else ""
    info = settings.model_fields.get(field)
    if info is None:
        return f"{label(field)} is not a setting; the settings are: {', '.join(settings.model_fields)}"
    if error["type"] in _BOUNDS:
        key, sign = _BOUNDS[error["type"]]
        what = f" must be {sign} {_shown_default(error['ctx'][key])},"
    else:  # pydantic's own words, e.g. "Input should be a valid integer, unable to parse string as an integer"
        what = f": {error['msg'][:1].lower()}{error['msg'][1:]};"
    value = error.get("input")
    shown = "(hidden)" if _is_secret(info) else value if isinstance(value, str) and value.strip() else repr(value)
    return f"{label(field)}{what} got {shown}" + (f" ({info.description})" if info.description else "")


def describe_errors(settings: type[DeclaredSettings], errors: list[dict], label: Callable[[str], str]) -> str:
    """One line for pydantic's ``errors`` about ``settings``; ``label(field)`` says where each bad value came from."""
    return "; ".join(_problem(settings, e, label) for e in errors)


def _shown_default(value) -> str:
    """16 -> "16", 20.0 -> "20", 128000000 -> "128,000,000"."""
    if isinstance(value, int) and value >= 100_000:
        return f"{value:,}"
    return f"{value:g}" if isinstance(value, (int, float)) else str(value)


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
                                help=f"{text} (default {_shown_default(info.default)})")


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
