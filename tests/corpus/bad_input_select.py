"""The bad-input corpus's ``edit --select`` group (issue 41): ``miescore edit --num-images 2 --select REWARD`` with
the toy editor (:mod:`.bad_input_editor_runs`' inputs) and a reward that exits (``SystemExit(0)``, ``os._exit(0)``:
in a child process, as the trainer's exit cases), returns too few values or raises ``ValueError`` (exit 1, one line
naming the reward, the candidates kept, no edit selected); an unusable spec (an unknown name, a typo, a missing
module, a missing MIEScore checkpoint: exit 2 before any candidate is made, nothing recorded); ``--num-images`` of
40 digits (exit 2; in a child process with bounded memory); a ``candidates.jsonl`` whose line 2 has ``"sample":
"x"`` or ``"edited": "../../../etc/passwd"`` (exit 2 naming the line, the file kept as it was, nothing selected,
``/etc/passwd`` copied nowhere).

The one line: the ``miescore edit: error`` (or, for a failed reward, ``miescore edit: reward ...``) line of
:func:`.bad_input_editor_runs.judge_run`; the toy editor and the requests unchanged (else *data lost*). Only
``edit``'s options and rewards the code before issue 41 had are used (the ``ValueError`` reward is the corpus's).
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from .bad_input_corpus import Case, Outcome, run_cli
from .bad_input_editor_runs import (HERE, TOY, file_hashes, fresh_folder, in_child, inputs, judge_run,
                                    restored_if_changed)
from .bad_input_export import files_holding_secrets

__all__ = ["SELECT_ENTRY", "select_cases"]

SELECT_ENTRY = "edit --select"
REWARDS = "modeling_miescore.testing.editor_rewards"
REDNESS = f"{REWARDS}:mean_redness"


def _argv(corpus, out: Path, *extra, num_images: int = 2) -> list:
    toy = inputs(corpus)
    return ["edit", "--pipeline", TOY, "--model", toy.model, "--input", toy.rows, "--out", out, "--steps", "2",
            "--num-images", num_images, "--no-progress", *extra]


def _lines(path: Path) -> list:
    return path.read_text().splitlines() if path.is_file() else []


def _run(corpus, outcome: Outcome, argv: list, expect: int, needle: str, child: bool = False) -> None:
    """``miescore <argv>`` (in a child process when ``child``) judged by ``judge_run``; inputs hashed around it."""
    toy = inputs(corpus)
    before = file_hashes(toy.model, toy.rows.parent)
    if child:
        status, err = in_child(argv, main="modeling_miescore.cli.main:main")
        stdout = ""
    else:
        status, stdout, err = run_cli(argv, outcome)
    judge_run(outcome, status, err, None, expect, needle)
    outcome.flag("wrong_status", bool(stdout.strip()))
    restored_if_changed(corpus, outcome, before)


def _failing_reward(spec: str, needle: str, child: bool, corpus, outcome: Outcome) -> None:
    """Exit 1 naming the reward; the 4 candidates of the 2 requests kept, no edit selected."""
    out = fresh_folder(corpus, "select-reward") / "out"
    _run(corpus, outcome, _argv(corpus, out, "--limit", "2", "--select", spec), 1, needle, child)
    outcome.flag("data_lost", len(_lines(out / "candidates.jsonl")) != 4 or bool(_lines(out / "edits.jsonl")))


def _bad_spec(spec: str, needle: str, corpus, outcome: Outcome) -> None:
    """Exit 2 before any candidate is made; nothing recorded (the corrected spec may then use the folder)."""
    out = fresh_folder(corpus, "select-spec") / "out"
    _run(corpus, outcome, _argv(corpus, out, "--limit", "1", "--select", spec), 2, needle)
    outcome.flag("data_lost", (out / "candidates.jsonl").exists() or (out / "selection.json").exists())


def _num_images(corpus, outcome: Outcome) -> None:
    out = fresh_folder(corpus, "select-num-images") / "out"
    # in a child process with bounded memory: code without the bound made a list of 10^40 candidate ids
    _run(corpus, outcome, _argv(corpus, out, "--select", REDNESS, num_images=10 ** 40 - 1), 2, "--num-images",
         child=True)
    outcome.flag("data_lost", out.exists())


def _damaged_candidates(field: str, value, corpus, outcome: Outcome) -> None:
    """A selection made, its edits.jsonl emptied and line 2 of candidates.jsonl damaged: the rerun is exit 2 naming
    the line, the damaged file kept as it was, nothing selected and nothing read through the damaged path."""
    out = fresh_folder(corpus, "select-candidates") / "out"
    argv = _argv(corpus, out, "--limit", "1", "--select", REDNESS)
    if run_cli(argv, Outcome("", "", ""))[0] != 0:
        raise RuntimeError("the selection to damage failed")
    (out / "edits.jsonl").write_text("")
    lines = [json.loads(line) for line in _lines(out / "candidates.jsonl")]
    lines[1][field] = value
    (out / "candidates.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    damaged = (out / "candidates.jsonl").read_bytes()
    _run(corpus, outcome, argv, 2, "line 2")
    outcome.flag("data_lost", (out / "candidates.jsonl").read_bytes() != damaged or bool(_lines(out / "edits.jsonl")))
    outcome.flag("secrets_copied", bool(files_holding_secrets(out)))


def select_cases() -> list:
    """The ``edit --select`` cases (module docstring)."""
    item = "41.select"
    rewards = [("a reward raising SystemExit(0)", f"{REWARDS}:exiting_reward", "SystemExit", True),
               ("a reward calling os._exit(0)", f"{REWARDS}:os_exit_reward", "os._exit(0)", True),
               ("a reward returning too few values", f"{REWARDS}:wrong_length_reward", "returned 3 rewards", False),
               ("a reward raising ValueError", f"{HERE}:value_error_reward", "ValueError", False)]
    specs = [("--select bogus", "bogus", "unknown reward 'bogus'"),
             ("--select R:mean_rednes (a typo)", f"{REWARDS}:mean_rednes", "did you mean mean_redness"),
             ("--select a missing module", "no_such_package.rewards:score", "no_such_package"),
             ("--select miescore:/no/such/checkpoint", "miescore:/no/such/checkpoint", "/no/such/checkpoint")]
    return [*(Case(SELECT_ENTRY, name, item, partial(_failing_reward, spec, needle, child))
              for name, spec, needle, child in rewards),
            *(Case(SELECT_ENTRY, name, item, partial(_bad_spec, spec, needle)) for name, spec, needle in specs),
            Case(SELECT_ENTRY, "--num-images of 40 digits", item, _num_images),
            Case(SELECT_ENTRY, 'candidates.jsonl line 2 "sample": "x"', item,
                 partial(_damaged_candidates, "sample", "x")),
            Case(SELECT_ENTRY, 'candidates.jsonl line 2 "edited": "../../../etc/passwd"', item,
                 partial(_damaged_candidates, "edited", "../../../etc/passwd"))]
