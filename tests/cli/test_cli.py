import io
import json
import os
import subprocess
import sys

import pytest
from PIL import Image

from modeling_miescore.scoring.jsonl_scoring import score_jsonl
from modeling_miescore.cli.main import main


@pytest.fixture(scope="module")
def images(tmp_path_factory, examples):
    folder = tmp_path_factory.mktemp("images")
    example = examples[0]
    paths = {}
    for k, image in enumerate(example["sources"]):
        paths[f"source{k}"] = folder / f"source{k}.png"
        image.save(paths[f"source{k}"])
    paths["edited"] = folder / "edited.jpg"
    example["edited"].save(paths["edited"], quality=90)
    buffer = io.BytesIO()
    example["edited"].save(buffer, "PNG")
    paths["truncated"] = folder / "truncated.png"
    paths["truncated"].write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
    paths["corrupt"] = folder / "corrupt.jpg"
    paths["corrupt"].write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(300))
    paths["text"] = folder / "readme.txt"
    paths["text"].write_text("hello")
    paths["huge"] = folder / "huge.png"
    Image.new("1", (11_000, 11_000)).save(paths["huge"])
    paths["instruction"] = example["instruction"]
    return paths


def _run(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_score_prints_json(capsys, tiny_miescore_path, images):
    code, out, err = _run(capsys, "score", "--model", tiny_miescore_path, "--source", images["source0"], "--source",
                          images["source1"], "--edited", images["edited"], "--instruction", images["instruction"],
                          "--json", "--device", "cpu")
    assert code == 0, err
    scores = json.loads(out)
    assert set(scores) == {"visual_quality", "instruction_following", "attribute_preservation", "overall"}


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing", "does not exist"),
        ("truncated", "truncated or corrupt"),
        ("corrupt", "corrupt"),
        ("text", "not an image"),
        ("huge", "safety limit"),
    ],
)
def test_score_bad_images(capsys, tiny_miescore_path, images, case, needle):
    edited = images["source0"].parent / "nope.png" if case == "missing" else images[case]
    code, out, err = _run(capsys, "score", "--model", tiny_miescore_path, "--source", images["source0"],
                          "--edited", edited, "--instruction", "x")
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and out == ""


def test_score_bad_arguments(capsys, tiny_miescore_path, tiny_qwen3vl_path, images, tmp_path):
    base = ["--edited", images["edited"], "--instruction", "x"]
    cases = [
        (["score", "--model", tiny_miescore_path, *base], "no source image"),
        (["score", "--model", tiny_miescore_path, "--source", images["source0"], "--edited", images["edited"],
          "--instruction", "  "], "empty instruction"),
        (["score", "--model", tmp_path / "no-model", "--source", images["source0"], *base], "does not exist"),
        (["score", "--model", tiny_qwen3vl_path, "--source", images["source0"], *base], "not a MIEScore checkpoint"),
    ]
    for argv, needle in cases:
        code, _, err = _run(capsys, *argv)
        assert code == 2 and needle in err and "Traceback" not in err, (argv, err)


def test_console_script_exit_code_and_no_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "modeling_miescore.cli", "score", "--model", str(tmp_path / "x"),
                             "--source", "a.png", "--edited", "b.png", "--instruction", "x"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and "error:" in result.stderr


def _write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))


def _good(images, i, **extra):
    record = {"id": f"e{i}", "sources": [str(images["source0"]), str(images["source1"])],
              "edited": str(images["edited"]), "instruction": f"instruction {i}"}
    record.update(extra)
    return record


def test_score_batch_reports_bad_lines_with_numbers(capsys, tiny_miescore_path, images, tmp_path):
    edits = tmp_path / "edits.jsonl"
    _write_jsonl(edits, [
        _good(images, 0),
        "{not json",
        _good(images, 2, edited=str(images["corrupt"])),
        _good(images, 3, sources=[]),
        _good(images, 0),  # duplicate id
        {"sources": [str(images["source0"])], "edited": str(images["edited"]), "instruction": "no id"},
        _good(images, 6, sources=["source0.png"]),  # relative to the input file's folder: missing there
    ])
    preds = tmp_path / "preds.jsonl"
    code, _, err = _run(capsys, "score-batch", "--model", tiny_miescore_path, "--input", edits, "--output", preds,
                        "--no-progress")
    assert code == 1
    for line, needle in [(2, "invalid JSON"), (3, "corrupt"), (4, "zero source"), (5, "duplicate id"),
                         (6, "missing 'id'"), (7, "does not exist")]:
        reported = [x for x in err.splitlines() if f"edits.jsonl:line {line}: " in x]
        assert len(reported) == 1 and needle in reported[0], err
    lines = [json.loads(x) for x in preds.read_text().splitlines()]
    assert [x["id"] for x in lines] == ["e0"]

    stop_preds = tmp_path / "stop.jsonl"
    code, _, err = _run(capsys, "score-batch", "--model", tiny_miescore_path, "--input", edits, "--output",
                        stop_preds, "--on-error", "stop", "--no-progress")
    assert code == 2 and "line 2: invalid JSON" in err and "Traceback" not in err


def test_score_batch_resume_after_crash(tiny_miescore, images, tmp_path):
    edits = tmp_path / "edits.jsonl"
    _write_jsonl(edits, [_good(images, i) for i in range(7)])
    preds = tmp_path / "preds.jsonl"
    calls = []

    class Crash(BaseException):  # like a kill: not an error of one sample, nothing catches it
        pass

    def crashing(samples, batch_size):
        calls.append(len(samples))
        if len(calls) == 2:
            raise Crash("simulated crash")
        return tiny_miescore.score_batch(samples, batch_size=batch_size)

    with pytest.raises(Crash, match="simulated crash"):
        score_jsonl(crashing, edits, preds, batch_size=1, progress=False, chunk_size=2)
    first = preds.read_text().splitlines()
    assert [json.loads(x)["id"] for x in first] == ["e0", "e1"]  # the first chunk survived the crash
    # a crash in the middle of writing a line leaves an incomplete tail
    with open(preds, "a") as handle:
        handle.write('{"id": "e6", "visual_qua')
    report = score_jsonl(lambda s, b: tiny_miescore.score_batch(s, batch_size=b), edits, preds, batch_size=1,
                         progress=False)
    assert report.repaired_tail
    ids = [json.loads(x)["id"] for x in preds.read_text().splitlines()]
    assert sorted(ids) == [f"e{i}" for i in range(7)] and len(ids) == len(set(ids))
    assert report.skipped_existing == len(first)
    again = score_jsonl(lambda s, b: tiny_miescore.score_batch(s, batch_size=b), edits, preds, batch_size=1,
                        progress=False)
    assert again.scored == 0 and again.skipped_existing == 7


def test_demo_runs_end_to_end_and_warns(capsys, tmp_path):
    code, out, err = _run(capsys, "demo", "--workdir", tmp_path, "--device", "cpu")
    assert code == 0
    assert "MEANINGLESS" in err and "--model" in err
    for example_id in ("cat-coffee", "astronaut-rocket", "cat-astronaut-coffee", "cat-coffee-failed"):
        assert example_id in out
    assert "random weights" in out
