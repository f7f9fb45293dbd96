"""The bad-input corpus's ``miescore edit`` cases of issue 31 (the ``edit`` entry; the rules and the list:
:mod:`.bad_input_editor`'s docstring): ``--input`` being the ``--out`` folder's own ``edits.jsonl``, ``--out`` the
model folder, control characters in an instruction or an id, a garbage or NaN LoRA, a FIFO, ``/dev/zero`` or
truncated source, an editor that cannot load offline. The runners and inputs are :mod:`.bad_input_editor_runs`'.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from unittest import mock

from .bad_input_corpus import Case, Outcome, run_cli
from .bad_input_editor_runs import (TOY, bad_source_rows, file_hashes, fresh_folder, in_child, inputs, judge_run,
                                    restored_if_changed)


# ---------------------------------------------------------------------------------------------- edit cases


def _edit_argv(corpus, rows, out, *extra) -> list:
    toy = inputs(corpus)
    return ["edit", "--pipeline", TOY, "--model", str(toy.model), "--input", str(rows), "--out", str(out),
            "--steps", "2", "--no-progress", *extra]


def _edit_run(corpus, outcome: Outcome, argv: list, needle: str, watch: tuple = ()) -> None:
    toy = inputs(corpus)
    before_inputs = file_hashes(toy.model, toy.rows.parent)  # restored_if_changed flags a change to these
    before_outputs = file_hashes(toy.run, *watch)
    status, out, err = run_cli(argv, outcome)
    judge_run(outcome, status, err, None, 2, needle)
    outcome.flag("wrong_status", bool(out.strip()))
    outcome.flag("data_lost", file_hashes(toy.run, *watch) != before_outputs)
    restored_if_changed(corpus, outcome, before_inputs)


def _edit_own_jsonl(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    out = fresh_folder(corpus, "edit-own") / "out"
    status, _, _ = run_cli(_edit_argv(corpus, toy.rows, out, "--limit", "1"), outcome)
    if status != 0:
        outcome.flag("wrong_status")
    _edit_run(corpus, outcome, _edit_argv(corpus, out / "edits.jsonl", out), "--out", watch=(out,))


def _edit_into_model(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    _edit_run(corpus, outcome, _edit_argv(corpus, toy.rows, toy.model), "--out")


def _edit_text(field: str, value: str, corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    folder = fresh_folder(corpus, f"edit-text-{field}")
    lines = toy.rows.read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = value
    first["sources"] = [str(toy.rows.parent / s) for s in first["sources"]]
    (folder / "rows.jsonl").write_text(json.dumps(first) + "\n")
    _edit_run(corpus, outcome, _edit_argv(corpus, folder / "rows.jsonl", folder / "out"), "U+0000")
    outcome.flag("data_lost", (folder / "out" / "edits.jsonl").is_file()
                  and "\\u0000" in (folder / "out" / "edits.jsonl").read_text())


def _edit_lora(kind: str, corpus, outcome: Outcome) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    toy = inputs(corpus)
    lora = fresh_folder(corpus, f"edit-lora-{kind}")
    path = lora / "pytorch_lora_weights.safetensors"
    shutil.copy(toy.run / path.name, path)
    if kind == "garbage":
        path.write_bytes(b"garbage" * 30)
    else:
        tensors = load_file(str(path))
        tensors = {k: torch.full_like(v, float("nan")) if "lora_B" in k else v for k, v in tensors.items()}
        save_file(tensors, str(path))
    _edit_run(corpus, outcome, _edit_argv(corpus, toy.rows, lora / "out", "--lora", str(lora)), "LoRA")


def _edit_source(kind: str, corpus, outcome: Outcome) -> None:
    rows = bad_source_rows(corpus, kind)
    if kind == "/dev/zero":  # the old reader filled memory: in a child with bounded memory
        status, err = in_child(_edit_argv(corpus, rows, rows.parent / "out"), main="modeling_miescore.cli.main:main")
        judge_run(outcome, status, err, None, 2, "bad.png")
        return
    _edit_run(corpus, outcome, _edit_argv(corpus, rows, rows.parent / "out"), "bad.png")


def _edit_offline_editor(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    argv = ["edit", "--pipeline", "flux2-klein", "--model", "nobody/not-cached-editor", "--input", str(toy.rows),
            "--out", str(fresh_folder(corpus, "edit-offline") / "out"), "--no-progress"]
    with mock.patch.dict(os.environ, {"HF_HUB_OFFLINE": "1"}):
        _edit_run(corpus, outcome, argv, "nobody/not-cached-editor")


def edit_cases() -> list:
    return [Case("edit", "--input = the --out folder's own edits.jsonl", "31.1", _edit_own_jsonl),
            Case("edit", "--out = the editor's model folder", "31.1", _edit_into_model),
            Case("edit", "a NUL byte in the instruction", "31.M", partial(_edit_text, "instruction", "make\x00 red")),
            Case("edit", "a NUL byte in the id", "31.M", partial(_edit_text, "id", "cat\x00red")),
            Case("edit", "--lora with a garbage adapter", "31.M", partial(_edit_lora, "garbage")),
            Case("edit", "--lora with a NaN adapter", "31.M", partial(_edit_lora, "nan")),
            Case("edit", "a FIFO source", "31.5", partial(_edit_source, "a FIFO")),
            Case("edit", "a /dev/zero source", "31.5", partial(_edit_source, "/dev/zero")),
            Case("edit", "a truncated source", "31.5", partial(_edit_source, "a truncated PNG")),
            Case("edit", "an editor on the Hub, offline", "31.M", _edit_offline_editor)]


__all__ = ["edit_cases"]
