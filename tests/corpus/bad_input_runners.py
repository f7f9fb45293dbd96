"""The cases of the bad-input corpus, per entry point (see :mod:`.bad_input_corpus` for the rules)."""

from __future__ import annotations

import contextlib
import json
import re
from functools import partial
from pathlib import Path
from unittest import mock

from transformers import AutoModel

from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.cli import score as cli_score
from modeling_miescore.scoring import loading
from modeling_miescore.serving.backends import MIEScoreBackend, load_backend
from modeling_miescore.serving.app import serve_in_background

from .bad_input_corpus import (GOOD_INSTRUCTION, Case, Outcome, b64, check_message, edit_with, hold_output_lock,
                               post_json, run_cli)
from .bad_inputs import ALL_CASES, BadInput, make_directory, make_fifo, make_symlink_loop

# Server statuses: limits answer 413, malformed content 422 (serving.request_parsing).
_SERVER_413 = {"decompression bomb 11000x11000", "16 sources + edited of 4000x4000", "100 KB instruction"}


def good_files(corpus) -> tuple[list, Path]:
    return [corpus.folder / "a.png", corpus.folder / "b.png"], corpus.folder / "e.png"


@contextlib.contextmanager
def preloaded_scorer(corpus):
    """The CLI's ``load_scorer`` returns the corpus's loaded model (bad-input cases do not test loading)."""
    # the loader as the CLI reaches it: its command module's name (today's code) and the loading module's (older code)
    with mock.patch.object(loading, "load_scorer", lambda *args, **kwargs: corpus.model), \
            mock.patch.object(cli_score, "load_scorer", lambda *args, **kwargs: corpus.model, create=True):
        yield


def expect_input_error(outcome: Outcome, bad: BadInput | None, call) -> None:
    outcome.expected = "MIEScoreInputError"
    try:
        call()
        outcome.got = "scored"
        outcome.flag("wrong_status")
    except MIEScoreInputError as err:
        outcome.got, outcome.message = type(err).__name__, str(err)
        check_message(outcome, str(err), bad.needle, bad.avoid)
    except Exception as err:  # noqa: BLE001 - not the documented error: a traceback for the user
        outcome.got, outcome.message = type(err).__name__, str(err)
        outcome.flag("traceback")


# ---------------------------------------------------------------------------------------------- Python API


def _api_bad(bad: BadInput, corpus, outcome: Outcome) -> None:
    sources, edited, instruction = edit_with(bad, corpus.folder)
    sample = {"sources": sources, "edited": edited, "instruction": instruction}
    expect_input_error(outcome, bad, lambda: corpus.model.score_batch([sample], batch_size=1))


def _stock_and_safe(corpus, outcome: Outcome, processor, model_code_allowed: bool) -> None:
    outcome.got = f"scored with {type(processor).__module__}.{type(processor).__name__}"
    outcome.flag("code_ran", bool(corpus.tampered.code_ran(include_model_code=not model_code_allowed)))
    outcome.flag("wrong_status", not type(processor).__module__.startswith("transformers.models."))


def _api_tampered(trusted: bool, corpus, outcome: Outcome) -> None:
    outcome.expected = "scored with the stock processor, no planted code run"
    sources, edited = good_files(corpus)
    try:
        if trusted:  # the user trusts the model's code; the processor must still be the stock one
            model = AutoModel.from_pretrained(str(corpus.tampered.path), trust_remote_code=True)
        else:
            model = loading.load_scorer(str(corpus.tampered.path), device="cpu", dtype="float32")
        model.score(sources, edited, GOOD_INSTRUCTION)
    except Exception as err:  # noqa: BLE001
        outcome.got, outcome.message = type(err).__name__, str(err)
        outcome.flag("wrong_status")
        outcome.flag("code_ran", bool(corpus.tampered.code_ran(include_model_code=not trusted)))
        return
    _stock_and_safe(corpus, outcome, model.get_processor(), model_code_allowed=trusted)


def api_cases() -> list[Case]:
    cases = [Case("api", bad.name, bad.item, partial(_api_bad, bad)) for bad in ALL_CASES]
    cases.append(Case("api", "tampered checkpoint via load_scorer", "13.1", partial(_api_tampered, False)))
    cases.append(Case("api", "tampered checkpoint via AutoModel(trust_remote_code=True)", "13.1",
                      partial(_api_tampered, True)))
    return cases


# ---------------------------------------------------------------------------------------------- miescore score


def _score_argv(model, sources, edited, instruction, *extra) -> list:
    return ["score", "--model", model, *[a for s in sources for a in ("--source", s)], "--edited", edited,
            "--instruction", instruction, *extra]


def expect_exit_2(outcome: Outcome, status, out: str, err: str, needle: str | None = None,
                   avoid: str | None = None) -> None:
    outcome.expected, outcome.got, outcome.message = "exit 2, one line", f"exit {status}", err.strip()
    outcome.flag("wrong_status", status != 2 or bool(out.strip()))
    outcome.flag("unclear_message", len(err.strip().splitlines()) != 1)
    check_message(outcome, err, needle, avoid)


def _cli_bad(bad: BadInput, corpus, outcome: Outcome) -> None:
    sources, edited, instruction = edit_with(bad, corpus.folder)
    with preloaded_scorer(corpus):
        status, out, err = run_cli(_score_argv(corpus.model_path, sources, edited, instruction), outcome)
    expect_exit_2(outcome, status, out, err, bad.needle, bad.avoid)


def _cli_device(corpus, outcome: Outcome) -> None:
    sources, edited = good_files(corpus)
    status, out, err = run_cli(_score_argv(corpus.model_path, sources, edited, "x", "--device", "banana"), outcome)
    expect_exit_2(outcome, status, out, err, "device 'banana'")


def _cli_tampered(corpus, outcome: Outcome) -> None:
    sources, edited = good_files(corpus)
    status, out, err = run_cli(_score_argv(corpus.tampered.path, sources, edited, GOOD_INSTRUCTION, "--json",
                                           "--device", "cpu"), outcome)
    outcome.expected, outcome.got, outcome.message = "exit 0, no planted code run", f"exit {status}", err.strip()
    outcome.flag("wrong_status", status != 0)
    outcome.flag("code_ran", bool(corpus.tampered.code_ran()))


def cli_cases() -> list[Case]:
    cases = [Case("cli", bad.name, bad.item, partial(_cli_bad, bad)) for bad in ALL_CASES if bad.on_cli]
    cases.append(Case("cli", "--device banana", "13.9", _cli_device))
    cases.append(Case("cli", "tampered checkpoint", "13.1", _cli_tampered))
    return cases


# ---------------------------------------------------------------------------------------------- score-batch


def jsonl_line(sample_id, sources, edited, instruction) -> bytes:
    def plain(value):
        return str(value) if isinstance(value, Path) else value

    record = {"id": sample_id, "sources": [plain(s) for s in sources], "edited": plain(edited),
              "instruction": instruction}
    return json.dumps(record).encode() + b"\n"


def case_workdir(corpus, name: str) -> Path:
    work = corpus.folder / "score-batch" / re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    work.mkdir(parents=True, exist_ok=True)
    for stale in work.glob("*preds*"):
        stale.unlink()
    return work


def batch_argv(model, edits: Path, preds: Path, *extra) -> list:
    return ["score-batch", "--model", model, "--input", edits, "--output", preds, "--no-progress", *extra]


def _ids(preds: Path) -> list | None:
    if not preds.exists():
        return []
    try:
        return [json.loads(line)["id"] for line in preds.read_text().splitlines()]
    except (ValueError, KeyError, TypeError):
        return None


def _batch_bad_line(name: str, make_line, bad: BadInput | None, corpus, outcome: Outcome) -> None:
    """Lines: good x0, the bad line, good x2; run twice. The bad line is reported as line 2 both times."""
    sources, edited = good_files(corpus)
    bad_line = make_line(corpus)
    work = case_workdir(corpus, name)
    edits, preds = work / "edits.jsonl", work / "preds.jsonl"
    edits.write_bytes(jsonl_line("x0", sources, edited, GOOD_INSTRUCTION) + bad_line
                      + jsonl_line("x2", sources, edited, GOOD_INSTRUCTION))
    outcome.expected = "exit 1 twice, line 2 reported, x0 and x2 scored once"
    reports = []
    with preloaded_scorer(corpus):
        for _ in range(2):
            status, _out, err = run_cli(batch_argv(corpus.model_path, edits, preds), outcome)
            reports.append([line for line in err.splitlines() if "line 2" in line])
            outcome.got = f"exit {status}"
            outcome.message = err.strip()
            outcome.flag("wrong_status", status != 1)
    outcome.flag("unclear_message", not reports[0])
    outcome.flag("wrong_status", reports[0] != reports[1])
    if reports[0] and bad is not None:
        check_message(outcome, reports[0][0], bad.needle, bad.avoid)
    outcome.flag("data_lost", _ids(preds) != ["x0", "x2"])


def _batch_run_error(name: str, argv_for, needle: str, corpus, outcome: Outcome, prepare=None,
                     preloaded: bool = True) -> None:
    """A problem with the run itself: exit 2, one line naming it, nothing written."""
    work = case_workdir(corpus, name)
    sources, edited = good_files(corpus)
    edits, preds = work / "edits.jsonl", work / "preds.jsonl"
    edits.write_bytes(jsonl_line("x0", sources, edited, GOOD_INSTRUCTION))
    cleanup = prepare(work, edits, preds) if prepare else None
    try:
        with preloaded_scorer(corpus) if preloaded else contextlib.nullcontext():
            status, out, err = run_cli(argv_for(corpus, work, edits, preds), outcome)
    finally:
        if cleanup:
            cleanup()
    expect_exit_2(outcome, status, out, err, needle)
    outcome.flag("data_lost", preds.exists() and preds.stat().st_size > 0)


_INPUT_PATHS = {  # name: (item, the --input path, needle)
    "--input is a FIFO": ("13.8", lambda folder: make_fifo(folder), "not a regular file"),
    "--input is a directory": ("13.10", lambda folder: make_directory(folder), "directory"),
    "--input is a symlink loop": ("13.10", lambda folder: make_symlink_loop(folder), "link loop"),
    "--input is missing": ("13.x", lambda folder: folder / "no-edits.jsonl", "does not exist"),
}


def _bad_lines(corpus) -> dict:
    sources, edited = good_files(corpus)
    good = json.loads(jsonl_line("x1", sources, edited, GOOD_INSTRUCTION))
    return {"line not UTF-8": b'{"id": "x1", "instruction": "caf\xe9"}\n', "line not JSON": b'{"id": "x1",\n',
            "line a JSON array": b'["x1"]\n', "boolean id": json.dumps({**good, "id": True}).encode() + b"\n",
            "duplicate id": jsonl_line("x0", sources, edited, "another payload"),
            "missing 'edited'": json.dumps({k: v for k, v in good.items() if k != "edited"}).encode() + b"\n"}


def _locked(work, edits, preds):
    holder = hold_output_lock(preds)

    def release():
        holder.kill()
        holder.wait()

    return release


def score_batch_cases() -> list[Case]:
    cases = []
    for bad in ALL_CASES:
        if bad.in_json:
            make = partial(lambda bad_, corpus: jsonl_line("x1", *edit_with(bad_, corpus.folder)), bad)
            cases.append(Case("score-batch", bad.name, bad.item, partial(_batch_bad_line, bad.name, make, bad)))
    for name in ("line not UTF-8", "line not JSON", "line a JSON array", "boolean id", "duplicate id",
                 "missing 'edited'"):
        make = partial(lambda name_, corpus: _bad_lines(corpus)[name_], name)
        cases.append(Case("score-batch", name, "13.5/13.11", partial(_batch_bad_line, name, make, None)))
    for name, (item, make_path, needle) in _INPUT_PATHS.items():
        argv = partial(lambda make_, c, w, e, p: batch_argv(c.model_path, make_(c.folder), p), make_path)
        cases.append(Case("score-batch", name, item, partial(_batch_run_error, name, argv, needle)))
    runs = {  # name: (item, argv, needle, keyword arguments)
        "--output is a directory": ("13.x", lambda c, w, e, p: batch_argv(c.model_path, e, w), "directory", {}),
        "two runs on one output": ("13.6", lambda c, w, e, p: batch_argv(c.model_path, e, p), "another run",
                                   {"prepare": _locked}),
        "--device banana": ("13.9", lambda c, w, e, p: batch_argv(c.model_path, e, p, "--device", "banana"),
                            "device 'banana'", {"preloaded": False}),
    }
    for name, (item, argv, needle, kwargs) in runs.items():
        cases.append(Case("score-batch", name, item, partial(_batch_run_error, name, argv, needle, **kwargs)))
    cases.append(Case("score-batch", "tampered checkpoint", "13.1", _batch_tampered))
    return cases


def _batch_tampered(corpus, outcome: Outcome) -> None:
    work = case_workdir(corpus, "tampered checkpoint")
    sources, edited = good_files(corpus)
    edits, preds = work / "edits.jsonl", work / "preds.jsonl"
    edits.write_bytes(jsonl_line("x0", sources, edited, GOOD_INSTRUCTION))
    status, _out, err = run_cli(batch_argv(corpus.tampered.path, edits, preds, "--device", "cpu"), outcome)
    outcome.expected, outcome.got, outcome.message = "exit 0, no planted code run", f"exit {status}", err.strip()
    outcome.flag("wrong_status", status != 0)
    outcome.flag("data_lost", _ids(preds) != ["x0"])
    outcome.flag("code_ran", bool(corpus.tampered.code_ran()))


# ---------------------------------------------------------------------------------------------- reward server


def _server(corpus):
    if corpus.server is None:
        corpus.server = serve_in_background(MIEScoreBackend(corpus.model)).start()
    return corpus.server


def good_body(corpus) -> dict:
    sources, edited = good_files(corpus)
    return {"sources": [b64(s) for s in sources], "edited": b64(edited), "instruction": GOOD_INSTRUCTION}


def _server_request(name: str, make_body, expected: set, corpus, outcome: Outcome) -> None:
    url = _server(corpus).url
    body = make_body(corpus)
    outcome.expected = " or ".join(map(str, sorted(expected)))
    try:
        status, text = post_json(url, body, corpus.timeout)
    except TimeoutError:
        outcome.got = f"no answer within {corpus.timeout:.0f} s"
        outcome.flag("hang")
        return
    outcome.got, outcome.message = str(status), text[:300]
    outcome.flag("traceback", status >= 500)
    outcome.flag("wrong_status", status not in expected and status < 500)
    try:
        after, _ = post_json(url, good_body(corpus), corpus.timeout)
    except TimeoutError:
        after = None
    outcome.flag("data_lost", after != 200)


def _bad_body(bad: BadInput, corpus) -> dict:
    sources, edited, instruction = edit_with(bad, corpus.folder)
    return {"sources": [b64(s) for s in sources], "edited": b64(edited), "instruction": instruction}


def _server_tampered(corpus, outcome: Outcome) -> None:
    outcome.expected = "200, no planted code run"
    try:
        backend = load_backend(str(corpus.tampered.path), device="cpu", dtype="float32")
    except Exception as err:  # noqa: BLE001
        outcome.got, outcome.message = type(err).__name__, str(err)
        outcome.flag("wrong_status")
    else:
        with serve_in_background(backend) as server:
            status, text = post_json(server.url, good_body(corpus), corpus.timeout)
        outcome.got, outcome.message = str(status), text[:300]
        outcome.flag("wrong_status", status != 200)
    outcome.flag("code_ran", bool(corpus.tampered.code_ran()))


_RAW_BODIES = {  # name: (body from the good one, expected statuses)
    "base64 that is not base64": (lambda good: {**good, "edited": "not base64!"}, {422}),
    "body not JSON": (lambda good: b'{"sources": [', {422}),
    "sources not a list of strings": (lambda good: {**good, "sources": [1, 2]}, {422}),
}


def server_cases() -> list[Case]:
    cases = []
    for bad in ALL_CASES:
        if bad.as_bytes:
            expected = {413} if bad.name in _SERVER_413 else {422}
            cases.append(Case("server", bad.name, bad.item,
                              partial(_server_request, bad.name, partial(_bad_body, bad), expected)))
    for name, (change, expected) in _RAW_BODIES.items():
        make = partial(lambda change_, corpus: change_(good_body(corpus)), change)
        cases.append(Case("server", name, "13.x", partial(_server_request, name, make, expected)))
    cases.append(Case("server", "tampered checkpoint (miescore serve)", "13.1", _server_tampered))
    return cases


__all__ = ["api_cases", "cli_cases", "score_batch_cases", "server_cases"]
