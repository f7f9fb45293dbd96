"""setup.cfg's extras: ``all`` composes every user-facing extra (so ``pip install miescore[all]`` can run every
command, ``miescore baselines`` included) and ``dev`` composes ``all``; no pin is listed in two places."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

SETUP_CFG = Path(__file__).resolve().parents[1] / "setup.cfg"


def _extras() -> dict[str, list[str]]:
    parser = configparser.ConfigParser()
    parser.read(SETUP_CFG)
    section = parser["options.extras_require"]
    return {name: [line.strip() for line in section[name].splitlines() if line.strip() and not line.startswith("#")]
            for name in section}


def _composed(requirements: list[str]) -> set[str]:
    names = set()
    for requirement in requirements:
        match = re.fullmatch(r"miescore\[([\w,\-]+)\]", requirement)
        if match:
            names.update(match.group(1).split(","))
    return names


def test_all_composes_every_user_extra_and_dev_composes_all():
    extras = _extras()
    user_extras = set(extras) - {"all", "dev"}
    assert {"baselines", "rl", "editscore", "serve", "train"} <= user_extras
    assert _composed(extras["all"]) == user_extras
    assert "all" in _composed(extras["dev"])
    assert all(req.startswith("miescore[") for req in extras["all"])  # nothing re-listed in `all`


def test_no_pin_is_listed_in_two_places_outside_the_user_extras():
    extras = _extras()
    pinned = {re.split(r"[<>=\[ ]", req)[0].lower() for name in extras if name not in ("all", "dev")
              for req in extras[name]}
    dev_own = {re.split(r"[<>=\[ ]", req)[0].lower() for req in extras["dev"] if not req.startswith("miescore[")}
    assert not dev_own & pinned, sorted(dev_own & pinned)
