"""``miescore set-skill CHECKPOINT SKILL_TXT``: put an (optimised) skill into a MIEScore checkpoint's config.

Only the ``skill`` key of ``config.json`` changes (other keys and their order stay); the file is replaced
atomically with its permission bits kept, so an interrupted run never leaves a half-written config.
"""

from __future__ import annotations

from .main import COMMAND_HELP

import json
import os
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from ..utils.atomic_files import write_text_atomic


def read_skill_file(path: str | os.PathLike) -> str:
    """The text of a skill file (UTF-8, CRLF -> LF); raises MIEScoreInputError when missing, binary or empty."""
    path = Path(path)
    if not path.is_file():
        raise MIEScoreInputError(f"skill file '{path}' does not exist; pass the skill.txt written by "
                                 "trainers/optimize_skill.py")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MIEScoreInputError(f"skill file '{path}' is not UTF-8 text") from None
    text = text.replace("\r\n", "\n")
    if not text.strip():
        raise MIEScoreInputError(f"skill file '{path}' is empty; a skill must contain the rubric text")
    if "\x00" in text:
        raise MIEScoreInputError(f"skill file '{path}' contains NUL bytes; is it a text file?")
    return text


def set_skill(checkpoint: str | os.PathLike, skill: str) -> tuple[int, int]:
    """Write ``skill`` into ``checkpoint/config.json`` atomically. Returns (old length, new length) in characters."""
    folder = Path(checkpoint)
    config_file = folder / "config.json"
    if not folder.is_dir():
        raise MIEScoreInputError(f"checkpoint '{folder}' is not a folder; pass a local MIEScore checkpoint folder")
    if not config_file.is_file():
        raise MIEScoreInputError(f"checkpoint '{folder}' has no config.json; is it a saved checkpoint?")
    if not skill.strip():
        raise MIEScoreInputError("the new skill is empty")
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MIEScoreInputError(f"config.json of '{folder}' is unreadable ({err})") from None
    if not isinstance(config, dict) or config.get("model_type") != "miescore":
        found = config.get("model_type") if isinstance(config, dict) else None
        raise MIEScoreInputError(f"'{folder}' is not a MIEScore checkpoint (model_type={found!r}); only MIEScore "
                                 "checkpoints carry a skill in their config")
    old = config.get("skill") or ""
    config["skill"] = skill
    # transformers writes config.json with indent=2 and sorted keys; we keep the file's own key order
    write_text_atomic(config_file, json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return len(old), len(skill)


def cmd_set_skill(args) -> int:
    skill = read_skill_file(args.skill)
    old, new = set_skill(args.checkpoint, skill)
    change = "unchanged" if old == new and old else f"{old} -> {new} characters"
    print(f"skill of '{args.checkpoint}' set from '{args.skill}': {change} (old {old}, new {new} characters)")
    return 0


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "set-skill", help=COMMAND_HELP["set-skill"],
        description="Replace config.skill of a local MIEScore checkpoint with the text of SKILL_TXT "
                    "(e.g. the skill.txt written by trainers/optimize_skill.py). Everything else in config.json "
                    "is kept; the file is replaced atomically.")
    parser.add_argument("checkpoint", help="local MIEScore checkpoint folder (holds config.json)")
    parser.add_argument("skill", help="UTF-8 text file with the new skill")
    parser.set_defaults(func=cmd_set_skill)
