"""The recipes' argument parser: TRL's ``TrlParser`` (``--config x.yaml`` + every dataclass field on the command
line) with the recipes' contract for argument mistakes: one line and exit status 2, no traceback (TRL raises a
``ValueError`` with a traceback).

- No prefix matching (``allow_abbrev=False``); unknown options and YAML keys are named with the closest real one.
- A missing or unreadable ``--config`` file, or one that is not a YAML mapping, is one line.
- Argparse's own errors point to ``--help`` instead of the full usage (a recipe has ~80 options), and so does a
  value that a dataclass refuses when it is built (a ``ValueError`` from its ``__post_init__``).
- :attr:`RecipeParser.given` names the fields given **on the command line** (not by the YAML), so a recipe can
  treat a typed path differently from the config's own default (``trainers/flow_grpo_editor.py``).
"""

from __future__ import annotations

import os
import sys
from typing import FrozenSet, Iterable, List, Optional

from trl import TrlParser

from ..utils.suggestions import did_you_mean

__all__ = ["RecipeParser"]

EXIT_USER_ERROR = 2


class RecipeParser(TrlParser):
    """``TrlParser`` with one-line argument errors (module docstring). ``prog`` names the recipe in messages."""

    def __init__(self, dataclass_types=None, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(dataclass_types, **kwargs)
        self.given: FrozenSet[str] = frozenset()
        self.config_path: Optional[str] = None

    def error(self, message: str):
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {message} ({self.prog} --help lists every option)\n")

    def option_strings(self) -> List[str]:
        """Every long option of the recipe (``--name`` and its ``--name-with-hyphens`` alias)."""
        return [s for action in self._actions for s in action.option_strings if s.startswith("--")]

    def _unknown(self, remaining: List[str]) -> None:
        option = next((s for s in remaining if s.startswith("-")), remaining[0])
        name = option.split("=", 1)[0]
        self.error(f"unknown option {name}{did_you_mean(name, self.option_strings())}"
                   if name.startswith("-") else f"unexpected argument {name!r}")

    def given_fields(self, args: Iterable[str]) -> FrozenSet[str]:
        """The destinations of the options present in ``args`` (exact option strings, or ``--opt=value``)."""
        by_option = {s: action.dest for action in self._actions for s in action.option_strings}
        found = set()
        for arg in args:
            if arg == "--":
                break
            dest = by_option.get(arg.split("=", 1)[0]) if arg.startswith("--") else None
            if dest is not None:
                found.add(dest)
        return frozenset(found)

    def _config_argument(self, args: List[str]) -> Optional[str]:
        for i, arg in enumerate(args):
            if arg == "--config":
                if i + 1 >= len(args) or args[i + 1].startswith("--"):
                    self.error("--config needs a YAML file")
                return args[i + 1]
            if arg.startswith("--config="):
                value = arg.split("=", 1)[1]
                args[i:i + 1] = ["--config", value]  # TrlParser reads the two-token form only
                return value
        return None

    def _check_config_file(self, path: str) -> None:
        import yaml

        if not os.path.isfile(path):
            where = "is a folder, not a YAML file" if os.path.isdir(path) else "does not exist"
            self.error(f"--config {path} {where}")
        try:
            with open(path, encoding="utf-8") as handle:
                loaded = yaml.safe_load(handle)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
            self.error(f"--config {path}: cannot read it as YAML ({' '.join(str(err).split())[:200]})")
        if not isinstance(loaded, dict):
            self.error(f"--config {path} must hold a YAML mapping of option: value, got {type(loaded).__name__}")

    def parse_args_and_config(self, args=None, return_remaining_strings=False, fail_with_unknown_args=True,
                              separate_remaining_strings=False):
        args = list(args) if args is not None else sys.argv[1:]
        self.config_path = self._config_argument(args)
        if self.config_path is not None:
            self._check_config_file(self.config_path)
        self.given = self.given_fields(args)
        self._keep_remaining = return_remaining_strings
        return super().parse_args_and_config(args, return_remaining_strings, fail_with_unknown_args,
                                             separate_remaining_strings)

    def set_defaults_with_config(self, **kwargs) -> list:
        remaining = super().set_defaults_with_config(**kwargs)
        if remaining and not getattr(self, "_keep_remaining", False):
            key = remaining[0][2:]
            dests = [action.dest for action in self._actions if action.option_strings]
            self.error(f"{self.config_path or 'the config'}: unknown key {key!r}{did_you_mean(key, dests)}")
        return remaining

    def parse_args_into_dataclasses(self, args=None, return_remaining_strings=False, look_for_args_file=False,
                                    args_filename=None, args_file_flag=None):
        # look_for_args_file off: a stray `<script>.args` file beside the recipe never adds arguments silently
        try:
            output = super().parse_args_into_dataclasses(args, True, look_for_args_file, args_filename,
                                                         args_file_flag)
        except ValueError as err:  # a value a dataclass refuses when it is built (its __post_init__)
            self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {' '.join(str(err).split())}\n")
        *parsed, remaining = output
        if return_remaining_strings:
            return output
        if remaining:
            self._unknown(remaining)
        return tuple(parsed)
