"""score-batch on bad input: every problem is pinned to its line, handled by --on-error, and the same on reruns."""

import json
import os
import subprocess
import sys
import time

import pytest
from PIL import Image

from modeling_miescore.cli.main import main
from modeling_miescore.scoring.jsonl_scoring import BatchInputError, score_jsonl


@pytest.fixture()
def folder(tmp_path):
    for name, colour in (("a.png", (200, 10, 10)), ("b.png", (10, 200, 10)), ("e.png", (10, 10, 200))):
        Image.new("RGB", (40, 32), colour).save(tmp_path / name)
    return tmp_path


def _line(i, **overrides):
    record = {"id": f"x{i}", "sources": ["a.png", "b.png"], "edited": "e.png", "instruction": f"edit {i}"}
    record.update(overrides)
    return json.dumps(record).encode() + b"\n"


def _fake_scorer(samples, batch_size):
    if any("explode" in s.instruction for s in samples):
        raise ValueError("the model cannot take this sample")
    return [{"visual_quality": float(len(s.instruction)), "overall": 1.0} for s in samples]


def _ids(path):
    return [json.loads(line)["id"] for line in path.read_text().splitlines()]


def _score(folder, lines, **kwargs):
    edits = folder / "edits.jsonl"
    edits.write_bytes(b"".join(lines))
    messages = []
    report = score_jsonl(_fake_scorer, edits, folder / "preds.jsonl", batch_size=4, progress=False,
                         log=messages.append, **kwargs)
    return report, messages


def test_a_failure_inside_a_batch_is_pinned_to_its_line_and_the_rest_is_scored(folder):
    lines = [_line(0), _line(1, instruction="please explode"), _line(2), _line(3)]
    report, messages = _score(folder, lines)
    assert _ids(folder / "preds.jsonl") == ["x0", "x2", "x3"]
    assert [e.line for e in report.errors] == [2]
    assert "could not be scored (ValueError: the model cannot take this sample)" in messages[0]
    with pytest.raises(BatchInputError, match="line 2: could not be scored"):
        (folder / "preds.jsonl").unlink()
        _score(folder, lines, on_error="stop")


def test_a_non_utf8_line_is_reported_with_its_number_and_the_rest_scored(folder):
    lines = [_line(0), b'{"id": "x1", "instruction": "caf\xe9"}\n', _line(2)]
    report, messages = _score(folder, lines)
    assert _ids(folder / "preds.jsonl") == ["x0", "x2"]
    assert [e.line for e in report.errors] == [2] and "not valid UTF-8" in report.errors[0].message


@pytest.mark.parametrize("value", [True, 1.5, ["a"], {"k": 1}])
def test_ids_must_be_strings_or_integers(folder, value):
    report, _ = _score(folder, [_line(0, id=value), _line(1, id=7)])
    assert _ids(folder / "preds.jsonl") == ["7"]
    assert report.errors[0].line == 1 and "'id' must be a string or an integer" in report.errors[0].message


def test_a_duplicate_id_is_reported_the_same_on_the_first_run_and_on_a_rerun(folder):
    lines = [_line(0), _line(1), _line(0, instruction="another payload for the same id")]
    first, _ = _score(folder, lines)
    second, _ = _score(folder, lines)
    assert [str(e) for e in first.errors] == [str(e) for e in second.errors]
    assert str(first.errors[0]) == "line 3: duplicate id 'x0' (first on line 1)"
    assert second.scored == 0 and second.skipped_existing == 2
    assert _ids(folder / "preds.jsonl") == ["x0", "x1"]


def _cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize("case", ["directory", "symlink_loop", "fifo", "missing"])
def test_unusable_input_paths_are_one_line_errors(capsys, folder, case):
    path = folder / "input"
    if case == "directory":
        path.mkdir()
    elif case == "symlink_loop":
        os.symlink(folder / "loop2", path)
        os.symlink(path, folder / "loop2")
    elif case == "fifo":
        os.mkfifo(path)
    expected = {"directory": "is a directory", "symlink_loop": "symbolic link loop",
                "fifo": "not a regular file", "missing": "does not exist"}[case]
    code, err = _cli(capsys, "score-batch", "--model", folder / "no-model", "--input", path, "--output",
                     folder / "p.jsonl")
    assert code == 2 and expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_output_is_a_directory_or_under_a_file_is_a_one_line_error(folder):
    edits = folder / "edits.jsonl"
    edits.write_bytes(_line(0))
    (folder / "out").mkdir()
    with pytest.raises(Exception, match="is a directory"):
        score_jsonl(_fake_scorer, edits, folder / "out", progress=False)
    with pytest.raises(Exception, match="is a file, not a folder"):
        score_jsonl(_fake_scorer, edits, folder / "e.png" / "preds.jsonl", progress=False)
    report = score_jsonl(_fake_scorer, edits, folder / "new" / "deeper" / "preds.jsonl", progress=False)
    assert report.scored == 1  # a missing output folder is created


def test_a_second_run_on_the_same_output_stops_and_names_the_first(capsys, folder):
    edits = folder / "edits.jsonl"
    edits.write_bytes(_line(0))
    preds = folder / "preds.jsonl"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom modeling_miescore.utils.output_lock import exclusive_output\n"
         f"with exclusive_output({str(preds)!r}):\n    print('held', flush=True)\n    time.sleep(30)\n"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Exception, match=rf"being written by another run \(pid {holder.pid} "):
            score_jsonl(_fake_scorer, edits, preds, progress=False)
        assert not preds.exists()  # nothing written by the refused run
    finally:
        holder.kill()
        holder.wait()
    start = time.monotonic()
    assert score_jsonl(_fake_scorer, edits, preds, progress=False).scored == 1  # the lock died with its holder
    assert time.monotonic() - start < 10


def test_an_unknown_device_is_a_one_line_error(capsys, tiny_miescore_path, folder):
    code, err = _cli(capsys, "score", "--model", tiny_miescore_path, "--source", folder / "a.png", "--edited",
                     folder / "e.png", "--instruction", "x", "--device", "banana")
    assert code == 2 and "device 'banana'" in err and "Traceback" not in err


def test_the_per_sample_pixel_budget_is_an_option_of_the_library_and_both_commands(folder, capsys,
                                                                                   tiny_miescore_path):
    """Three 40x32 images are 3,840 decoded pixels: a 3,000-pixel budget refuses the edit from its headers."""
    lines = [_line(0), _line(1)]
    report, messages = _score(folder, lines, max_sample_pixels=3000)
    assert report.scored == 0 and [e.line for e in report.errors] == [1, 2]
    assert "per-sample budget" in messages[0]
    (folder / "preds.jsonl").unlink()
    assert _score(folder, lines, max_sample_pixels=3840)[0].scored == 2

    edit = ["--source", folder / "a.png", "--source", folder / "b.png", "--edited", folder / "e.png",
            "--instruction", "make it blue", "--device", "cpu"]
    code, err = _cli(capsys, "score", "--model", tiny_miescore_path, *edit, "--max-sample-pixels", 3000)
    assert code == 2 and "per-sample budget" in err and "Traceback" not in err
    assert _cli(capsys, "score", "--model", tiny_miescore_path, *edit, "--max-sample-pixels", 3840)[0] == 0
    code, err = _cli(capsys, "spatialreward", "--model", folder, *edit, "--max-sample-pixels", 3000)
    assert code == 2 and "per-sample budget" in err  # refused from the headers, before any model is loaded
    output = folder / "cli-preds.jsonl"
    code, err = _cli(capsys, "score-batch", "--model", tiny_miescore_path, "--input", folder / "edits.jsonl",
                     "--output", output, "--max-sample-pixels", 3000, "--no-progress", "--device", "cpu")
    assert code == 1 and "line 1" in err and not output.read_text()
    code, _ = _cli(capsys, "score-batch", "--model", tiny_miescore_path, "--input", folder / "edits.jsonl",
                   "--output", output, "--max-sample-pixels", 3840, "--no-progress", "--device", "cpu")
    assert code == 0 and _ids(output) == ["x0", "x1"]
