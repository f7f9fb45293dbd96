"""The bad-input corpus's local cases of issue 22: damaged checkpoints through every command that loads one,
``doctor`` and checkpoint code, output paths that alias inputs, predictions files of another producer, a model
with NaN weights, release readers, the MER-Bench annotation ledger and the length caps.

Entries (besides the instruction cases of ``bad_inputs``, which go through api / cli / score-batch / server):

* ``checkpoint``: every :mod:`.bad_checkpoints` folder through ``miescore score`` (and ``tokens`` for the
  config / processor faults), ``doctor`` and ``spatialreward``; NaN weights through ``score``; ``doctor`` on the
  tampered checkpoint (no planted code may run) and on a relative path and a file.
* ``paths``: ``build-dataset`` / ``convert-benchmark`` outputs that are, hold or lie inside ``--raw``; ``space
  build`` into ``/proc`` and under a file; ``score-batch`` writing into its input through a hard link; ``judge``
  with ``--cache`` equal to ``--output`` or ``--input``; an output in missing folders (named in a note);
  ``score-batch`` extending a judge's file or another model's file.
* ``data``: MIE-Bench raw releases with a NUL byte in an image path, a symbolic link loop, JSON nested 100,000
  deep, a 100K-character instruction, a NUL in an id; a damaged annotation-ledger line; a 100K-character
  annotator id and a 200K-character grounder label; ``--grid`` sub-scores off the 0-25 scale or NaN;
  ``batch_size=1.5``; a NaN-weight model through ``score-batch`` and the server.

The rules for *clean* are those of :mod:`.bad_input_corpus`. Only entry points that the code before issue 22 already
had are used, so this module runs against it too (``benchmarks/bad_input_table.py`` says how).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

from modeling_miescore.data.mer_construction import AnnotationStore
from modeling_miescore.data.spatialreward_pipeline.grounding import parse_grounding
from modeling_miescore.evaluation.prediction_files import read_group_sub_scores
from modeling_miescore.scoring import loading
from modeling_miescore.serving.backends import MIEScoreBackend
from modeling_miescore.serving.app import serve_in_background
from modeling_miescore.hub.spatialreward_drawing import draw_regions
from modeling_miescore.testing.raw_benchmarks import make_raw_mer_bench, make_raw_mie_bench
from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

from .bad_checkpoints import BAD_CHECKPOINTS, make_bad_checkpoint
from .bad_input_corpus import GOOD_INSTRUCTION, Case, Outcome, check_message, post_json, run_cli
from .bad_input_runners import (batch_argv, case_workdir, expect_exit_2, expect_input_error, good_body, good_files,
                                jsonl_line, preloaded_scorer)

SLOW = 600.0  # seconds a case that starts a fresh interpreter may take (a loaded machine: minutes)


def _fresh(corpus, name: str) -> Path:
    """An empty folder for one case (removed first when a run left it)."""
    folder = corpus.folder / "local" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _exit_2(corpus, outcome: Outcome, argv: list, needle: str, one_line: bool = True) -> None:
    status, out, err = run_cli(argv, outcome)
    if one_line:
        expect_exit_2(outcome, status, out, err, needle)
        return
    outcome.expected, outcome.got, outcome.message = "exit 2 naming the problem", f"exit {status}", err.strip()
    outcome.flag("wrong_status", status != 2)
    check_message(outcome, out + err, needle)  # doctor's report (stdout) names it; a build's problems on stderr


# ---------------------------------------------------------------------------------------------- checkpoint


def _score_argv(corpus, model) -> list:
    sources, edited = good_files(corpus)
    return ["score", "--model", model, *[a for s in sources for a in ("--source", s)], "--edited", edited,
            "--instruction", GOOD_INSTRUCTION, "--device", "cpu"]


def _bad_checkpoint(bad, command: str, corpus, outcome: Outcome) -> None:
    folder = make_bad_checkpoint(corpus.model_path, _fresh(corpus, "ckpt") / "bad", bad)
    argv = {"score": _score_argv(corpus, folder),
            "tokens": ["tokens", "--model", folder, "--sources", "1", "--size", "64x64"],
            "doctor": ["doctor", folder, "--quick", "--device", "cpu", "--skip-fresh-process"]}[command]
    _exit_2(corpus, outcome, argv, bad.needle, one_line=command != "doctor")


def _spatialreward_path(corpus) -> Path:
    path = corpus.folder / "tiny-spatialreward"
    if not (path / "config.json").is_file():
        build_tiny_spatialreward(path, max_new_tokens=4)
    return path


def _bad_spatialreward(bad, corpus, outcome: Outcome) -> None:
    folder = make_bad_checkpoint(_spatialreward_path(corpus), _fresh(corpus, "sr") / "bad", bad)
    sources, edited = good_files(corpus)
    _exit_2(corpus, outcome, ["spatialreward", "--model", folder, "--source", sources[0], "--edited", edited,
                              "--instruction", GOOD_INSTRUCTION, "--device", "cpu"], bad.needle)


@contextlib.contextmanager
def nan_weights(corpus):
    """The corpus model with a NaN regression head while the block runs (restored after); the CLI's
    ``load_scorer`` returns it."""
    import torch

    model = corpus.model
    weight = model.head.output_layer.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.fill_(float("nan"))
    try:
        with mock.patch.object(loading, "load_scorer", lambda *args, **kwargs: model):
            yield model
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def _nan_score(corpus, outcome: Outcome) -> None:
    with nan_weights(corpus):
        status, out, err = run_cli(_score_argv(corpus, corpus.model_path), outcome)
    outcome.expected, outcome.got, outcome.message = "exit 1, the model fault named", f"exit {status}", err.strip()
    outcome.flag("wrong_status", status != 1 or bool(out.strip()))
    check_message(outcome, err, "non-finite")


def _doctor_json(argv: list, outcome: Outcome) -> tuple:
    status, out, err = run_cli(argv, outcome)
    try:
        return status, {c["name"]: c for c in json.loads(out)["checks"]}, err
    except (ValueError, KeyError, TypeError):
        return status, {}, err


def _doctor_tampered(corpus, outcome: Outcome) -> None:
    """``doctor --quick`` (with its fresh-process check) on the tampered checkpoint runs none of its code."""
    status, checks, err = _doctor_json(["doctor", corpus.tampered.path, "--quick", "--device", "cpu", "--json"],
                                       outcome)
    outcome.expected, outcome.got = "exit 0/1, no planted code run", f"exit {status}"
    outcome.message = checks.get("fresh_process", {}).get("message", err.strip())
    outcome.flag("wrong_status", status not in (0, 1))
    outcome.flag("code_ran", bool(corpus.tampered.code_ran()))


def _doctor_relative(corpus, outcome: Outcome) -> None:
    """``doctor ckpt/mie`` from the folder above: a local folder, also for the fresh process."""
    folder = _fresh(corpus, "relative")
    shutil.copytree(corpus.model_path, folder / "ckpt" / "mie")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        status, checks, err = _doctor_json(["doctor", "ckpt/mie", "--quick", "--device", "cpu", "--json"], outcome)
    finally:
        os.chdir(cwd)
    fresh = checks.get("fresh_process", {})
    outcome.expected, outcome.got = "exit 0/1, fresh_process ok", f"exit {status}, fresh_process {fresh.get('status')}"
    outcome.message = fresh.get("message", err.strip())
    outcome.flag("wrong_status", status not in (0, 1) or fresh.get("status") != "ok")


def _doctor_file(corpus, outcome: Outcome) -> None:
    _exit_2(corpus, outcome, ["doctor", corpus.model_path / "model.safetensors"], "is a file")


def checkpoint_cases() -> list:
    cases = []
    for bad in BAD_CHECKPOINTS:
        cases.append(Case("checkpoint", f"{bad.name}: score", "22.14", partial(_bad_checkpoint, bad, "score")))
        if not bad.loads_weights:
            cases.append(Case("checkpoint", f"{bad.name}: tokens", "22.14", partial(_bad_checkpoint, bad, "tokens")))
    by_name = {bad.name: bad for bad in BAD_CHECKPOINTS}
    for name in ("config.json a JSON list", "truncated safetensors", "no tokenizer.json"):
        cases.append(Case("checkpoint", f"{name}: doctor", "22.14", partial(_bad_checkpoint, by_name[name], "doctor")))
    for name in ("0-byte safetensors", "pickle-only pytorch_model.bin", "no chat template"):
        cases.append(Case("checkpoint", f"{name}: spatialreward", "22.14", partial(_bad_spatialreward, by_name[name])))
    cases += [Case("checkpoint", "NaN weights: score", "22.12", _nan_score),
              Case("checkpoint", "doctor FILE", "22.13", _doctor_file),
              Case("checkpoint", "doctor --quick on a tampered checkpoint", "22.1", _doctor_tampered, timeout=SLOW),
              Case("checkpoint", "doctor on a relative path", "22.13", _doctor_relative, timeout=SLOW)]
    return cases


# ---------------------------------------------------------------------------------------------- paths


def _mer_raw(corpus) -> Path:
    """A small raw MER-Bench release (cached in the corpus folder)."""
    raw = corpus.folder / "mer-raw"
    if not (raw / "samples.jsonl").is_file():
        make_raw_mer_bench(raw, n_samples=4, image_size=32)
    return raw


def _aliased_out(how: str, corpus, outcome: Outcome) -> None:
    """``build-dataset mer-bench`` (or ``convert-benchmark``) with an ``--out`` that is, holds or lies inside the
    raw folder, ``--overwrite``: exit 2, one line, the raw folder untouched, nothing left beside it."""
    work = _fresh(corpus, "aliased")
    raw = work / "d" / "raw"
    shutil.copytree(_mer_raw(corpus), raw)
    before = sorted(p.relative_to(work).as_posix() for p in work.rglob("*"))
    out = {"raw/../raw": work / "d" / "raw" / ".." / "raw", "inside raw": raw / "out", "holding raw": work / "d",
           "link to raw": work / "link"}[how]
    if how == "link to raw":
        out.symlink_to(raw, target_is_directory=True)
        before = sorted(p.relative_to(work).as_posix() for p in work.rglob("*"))
    argv = ["build-dataset", "mer-bench", "--raw", raw, "--out", out, "--overwrite", "--no-progress"]
    status, stdout, err = run_cli(argv, outcome)
    expect_exit_2(outcome, status, stdout, err, "raw")
    outcome.flag("data_lost", sorted(p.relative_to(work).as_posix() for p in work.rglob("*")) != before)


def _convert_out_is_raw(corpus, outcome: Outcome) -> None:
    raw = _fresh(corpus, "convert") / "raw"
    raw.mkdir()
    (raw / "keep.txt").write_text("release file")
    status, out, err = run_cli(["convert-benchmark", "genai-bench", "--raw", raw, "--out", raw / ".." / "raw",
                                "--overwrite"], outcome)
    expect_exit_2(outcome, status, out, err, "raw")
    outcome.flag("data_lost", sorted(p.name for p in raw.parent.iterdir()) != ["raw"]
                 or not (raw / "keep.txt").is_file())


def _space_out(where: str, corpus, outcome: Outcome) -> None:
    folder = _fresh(corpus, "space")
    (folder / "a_file").write_text("x")
    out = {"proc": Path("/proc/self/space"), "under a file": folder / "a_file" / "space"}[where]
    _exit_2(corpus, outcome, ["space", "build", "--out", out], "/proc" if where == "proc" else "is a file")


def _same_file_batch(corpus, outcome: Outcome) -> None:
    """``score-batch --output`` a hard link to ``--input``: refused, the input unchanged."""
    work = case_workdir(corpus, "hard-linked output")
    sources, edited = good_files(corpus)
    edits, preds = work / "edits.jsonl", work / "preds.jsonl"
    edits.write_bytes(jsonl_line("x0", sources, edited, GOOD_INSTRUCTION))
    os.link(edits, preds)
    data = edits.read_bytes()
    with preloaded_scorer(corpus):
        status, out, err = run_cli(batch_argv(corpus.model_path, edits, preds), outcome)
    expect_exit_2(outcome, status, out, err, "same file")
    outcome.flag("data_lost", edits.read_bytes() != data)


def _judge_argv(edits: Path, output: Path, *extra) -> list:
    return ["judge", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--input", edits,
            "--output", output, "--no-progress", "--max-retries", "0", *extra]


def _judge_cache(which: str, corpus, outcome: Outcome) -> None:
    work = _fresh(corpus, "judge-cache")
    edits, output = work / "edits.jsonl", work / "o.jsonl"
    edits.write_text("")
    cache = output if which == "--output" else edits
    _exit_2(corpus, outcome, _judge_argv(edits, output, "--cache", cache), "same file")
    outcome.flag("data_lost", edits.read_text() != "" or (which == "--output" and output.exists()))


def _judge_missing_folders(corpus, outcome: Outcome) -> None:
    """An ``--output`` in folders that do not exist: they are made, and a note names them."""
    work = _fresh(corpus, "judge-missing")
    edits = work / "edits.jsonl"
    edits.write_text("")
    status, _, err = run_cli(_judge_argv(edits, work / "no" / "such" / "o.jsonl"), outcome)
    outcome.expected, outcome.got, outcome.message = "exit 0, a note naming the made folders", f"exit {status}", err
    outcome.flag("wrong_status", status != 0)
    check_message(outcome, err, f"created the folders {work / 'no'}, {work / 'no' / 'such'}")


def _foreign_predictions(owner: str, corpus, outcome: Outcome) -> None:
    """``score-batch`` resuming a predictions file that a judge (or another model) wrote: refused, unchanged."""
    work = case_workdir(corpus, f"foreign {owner}")
    sources, edited = good_files(corpus)
    edits, preds = work / "edits.jsonl", work / "preds.jsonl"
    edits.write_bytes(jsonl_line("x0", sources, edited, GOOD_INSTRUCTION)
                      + jsonl_line("x1", sources, edited, GOOD_INSTRUCTION))
    with preloaded_scorer(corpus):
        if owner == "judge":
            preds.write_text(json.dumps({"id": "x0", "visual_quality": 50.0, "instruction_following": 50.0,
                                         "attribute_preservation": 50.0, "overall": 50.0, "judge": "gpt-5",
                                         "failed": False}) + "\n")
        else:  # the first run with another checkpoint path (the same loaded model: only the name differs)
            other = work / "other-checkpoint"
            other.mkdir(exist_ok=True)
            (work / "first.jsonl").write_bytes(jsonl_line("x0", sources, edited, GOOD_INSTRUCTION))
            run_cli(batch_argv(other, work / "first.jsonl", preds), outcome)
        data = preds.read_bytes()
        status, out, err = run_cli(batch_argv(corpus.model_path, edits, preds), outcome)
    expect_exit_2(outcome, status, out, err, "holds predictions of")
    outcome.flag("data_lost", preds.read_bytes() != data)


def path_cases() -> list:
    cases = [Case("paths", f"build-dataset --out {how} --overwrite", "22.4", partial(_aliased_out, how))
             for how in ("raw/../raw", "inside raw", "holding raw", "link to raw")]
    cases += [Case("paths", "convert-benchmark --out raw/../raw --overwrite", "22.4", _convert_out_is_raw),
              Case("paths", "space build --out /proc/self/space", "22.17", partial(_space_out, "proc")),
              Case("paths", "space build --out FILE/space", "22.17", partial(_space_out, "under a file")),
              Case("paths", "score-batch --output a hard link to --input", "22.11", _same_file_batch),
              Case("paths", "judge --cache X --output X", "22.11", partial(_judge_cache, "--output")),
              Case("paths", "judge --cache X --input X", "22.11", partial(_judge_cache, "--input")),
              Case("paths", "judge --output in missing folders", "22.21", _judge_missing_folders),
              Case("paths", "score-batch extends a judge's predictions", "22.21",
                   partial(_foreign_predictions, "judge")),
              Case("paths", "score-batch resumes another model's predictions", "22.21",
                   partial(_foreign_predictions, "model"))]
    return cases


# ---------------------------------------------------------------------------------------------- data


def _mie_raw(corpus) -> Path:
    raw = corpus.folder / "mie-raw"
    if not (raw / "instances.jsonl").is_file():
        make_raw_mie_bench(raw, n_instances=2, n_models=2, image_size=32, n_subjects=6, raters_per_edit=5,
                           n_unreliable=0)
    return raw


def _damaged_release(damage: str, needle: str, corpus, outcome: Outcome) -> None:
    """``build-dataset mie-bench`` on a release whose first instance is damaged: exit 2 naming the problem."""
    raw = _fresh(corpus, "release") / "raw"
    shutil.copytree(_mie_raw(corpus), raw)
    lines = (raw / "instances.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    if damage == "nul path":
        record["sources"][0] = "sources/a\x00.jpg"
    elif damage == "link loop":
        os.symlink("loop-b.jpg", raw / "sources" / "loop-a.jpg")
        os.symlink("loop-a.jpg", raw / "sources" / "loop-b.jpg")
        record["sources"][0] = "sources/loop-a.jpg"
    elif damage == "long instruction":
        record["instruction"] = "make it blue " * 8000
    elif damage == "nul id":
        record["instance_id"] = record["instance_id"] + "\x00x"
    lines[0] = "[" * 100_000 + "]" * 100_000 if damage == "nested" else json.dumps(record)
    (raw / "instances.jsonl").write_text("\n".join(lines) + "\n")
    _exit_2(corpus, outcome, ["build-dataset", "mie-bench", "--raw", raw, "--out", raw.parent / "out",
                              "--no-progress"], needle, one_line=False)


def _construction_folder(folder: Path) -> Path:
    """A minimal MER-Bench construction folder: one instruction, two candidates (the ledgers' formats)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name in ("src.png", "c0.png", "c1.png"):
        Image.new("RGB", (32, 24), (90, 60, 30)).save(folder / name)
    (folder / "instructions.jsonl").write_text(json.dumps(
        {"id": "s0", "status": "ok", "instruction": "make it blue", "image": str(folder / "src.png"),
         "category": "general", "subtask": "color"}) + "\n")
    (folder / "candidates.jsonl").write_text("".join(json.dumps(
        {"id": f"s0-c{k}", "sample_id": "s0", "candidate_id": f"s0-c{k}", "image": f"c{k}.png",
         "editing_model": "tint"}) + "\n" for k in range(2)))
    return folder


def _damaged_ledger(corpus, outcome: Outcome) -> None:
    """An annotations.jsonl line without ``sample_id`` and one that is not JSON: the store keeps working and each
    line is reported once, with its number."""
    folder = _construction_folder(_fresh(corpus, "ledger"))
    (folder / "annotations.jsonl").write_text('{"id": "A1|s0", "annotator_id": "A1"}\n{"id": \n')
    outcome.expected = "the store works; lines 1 and 2 reported once each"
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            store = AnnotationStore(folder, annotators_per_sample=2)
            for _ in range(2):
                store.next_sample("A2")
                store.progress("A2")
            outcome.got = "the store works"
        except Exception as error:  # noqa: BLE001 - what the app's every click would raise
            outcome.got, outcome.message = type(error).__name__, str(error)
            outcome.flag("traceback")
            return
    text = err.getvalue()
    outcome.message = text.strip()
    outcome.flag("unclear_message", not ("line 1" in text and "line 2" in text))
    outcome.flag("wrong_status", text.count("line 1 ") > 1)


def _long_annotator(corpus, outcome: Outcome) -> None:
    store = AnnotationStore(_construction_folder(_fresh(corpus, "annotator")), annotators_per_sample=2)
    ratings = {f"s0-c{k}": {"overall": "good", "sc": "good", "pq": "good"} for k in range(2)}
    bad = SimpleNamespace(needle="annotator id", avoid=None)
    expect_input_error(outcome, bad, lambda: store.submit("A" * 100_000, "s0", ratings))


def _long_label(corpus, outcome: Outcome) -> None:
    """A grounder answer whose region label has 200K characters: rejected by stage I, and drawn fast."""
    from PIL import Image


    label = "cat " * 50_000
    answer = json.dumps({"edit_region": [{"id": 0, "label": label, "bbox_2d": [10, 10, 500, 500]}]})
    regions, result = parse_grounding(answer)
    started = time.monotonic()
    draw_regions(Image.new("RGB", (64, 64)), [{"id": 0, "label": label, "bbox_2d": [10, 10, 500, 500]}])
    seconds = time.monotonic() - started
    outcome.expected = "rejected (label_too_long), drawn within 2 s"
    outcome.got = f"{result.status} {getattr(result, 'reason', '')}, drawn in {seconds:.1f} s"
    outcome.flag("wrong_status", result.status == "ok")
    outcome.flag("hang", seconds > 2)


def _grid_sub_score(value, corpus, outcome: Outcome) -> None:
    import pandas as pd


    path = _fresh(corpus, "grid") / "groups.jsonl"
    entry = {"s_if": value, "s_con": 10.0, "naturalness": 10.0, "artifacts": 10.0}
    path.write_text(json.dumps({"pair_id": "p0", "scores": [1.0, 2.0], "sub_scores": [entry, entry]}) + "\n")
    frame = pd.DataFrame({"pair_id": ["p0"], "k": [2]})
    needle = SimpleNamespace(needle="nan" if value != value else "outside", avoid=None)
    expect_input_error(outcome, needle, lambda: read_group_sub_scores(path, frame))


def _fractional_batch(corpus, outcome: Outcome) -> None:
    sources, edited = good_files(corpus)
    bad = SimpleNamespace(needle="batch_size", avoid=None)
    expect_input_error(outcome, bad, lambda: corpus.model.score_batch(
        [{"sources": sources, "edited": edited, "instruction": GOOD_INSTRUCTION}], batch_size=1.5))


def _nan_batch(corpus, outcome: Outcome) -> None:
    """score-batch with a NaN-weight model: each edit a reported model fault (exit 1), nothing written, twice."""
    work = case_workdir(corpus, "nan weights")
    sources, edited = good_files(corpus)
    edits, preds = work / "edits.jsonl", work / "preds.jsonl"
    edits.write_bytes(jsonl_line("x0", sources, edited, GOOD_INSTRUCTION))
    outcome.expected = "exit 1 twice, line 1 a model fault, nothing written"
    with nan_weights(corpus):
        for _ in range(2):
            status, _, err = run_cli(batch_argv(corpus.model_path, edits, preds), outcome)
            outcome.got, outcome.message = f"exit {status}", err.strip()
            outcome.flag("wrong_status", status != 1)
    check_message(outcome, err, "non-finite")
    outcome.flag("data_lost", preds.exists() and preds.stat().st_size > 0)


def _nan_server(corpus, outcome: Outcome) -> None:
    outcome.expected = "500 model_fault, not 200 with null scores"
    with nan_weights(corpus) as model, serve_in_background(MIEScoreBackend(model)) as server:
        status, text = post_json(server.url, good_body(corpus), corpus.timeout)
    outcome.got, outcome.message = str(status), text[:300]
    outcome.flag("wrong_status", status != 500)
    check_message(outcome, text, "non-finite")


def data_cases() -> list:
    releases = {"nul path": "NUL byte", "link loop": "link loop", "nested": "nested too deeply",
                "long instruction": "characters, above the limit", "nul id": "NUL byte"}
    items = {"long instruction": "22.20", "nul id": "22.20"}
    cases = [Case("data", f"build-dataset: release with {name}", items.get(name, "22.15"),
                  partial(_damaged_release, name, needle)) for name, needle in releases.items()]
    cases += [Case("data", "annotation ledger line without sample_id / not JSON", "22.18", _damaged_ledger),
              Case("data", "annotator id of 100K characters", "22.19", _long_annotator),
              Case("data", "grounder label of 200K characters", "22.19", _long_label),
              Case("data", "--grid sub-score 30 (scale 0-25)", "22.20", partial(_grid_sub_score, 30.0)),
              Case("data", "--grid sub-score NaN", "22.20", partial(_grid_sub_score, float("nan"))),
              Case("data", "API batch_size=1.5", "22.22", _fractional_batch),
              Case("data", "NaN weights: score-batch", "22.12", _nan_batch),
              Case("data", "NaN weights: server", "22.12", _nan_server)]
    return cases


def local_cases() -> list:
    """Every case of this module, in a fixed order."""
    return [*checkpoint_cases(), *path_cases(), *data_cases()]


__all__ = ["checkpoint_cases", "data_cases", "local_cases", "nan_weights", "path_cases"]
