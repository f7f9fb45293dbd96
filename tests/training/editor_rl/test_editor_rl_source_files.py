"""Sources that are not image files (issue 31, HIGH 5): a FIFO, ``/dev/zero`` (also through a symbolic link) and a
truncated PNG are refused quickly, with one line naming the source, by the trainer and ``miescore edit``, before
anything is read whole or decoded; every other image reader checks the same way (``image_io.read_image_file``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest

from corpus.bad_input_corpus import run_bounded
from corpus.bad_input_editor_runs import truncated_png
from corpus.bad_inputs import release_fifo
from editor_rl_runs import toy_config
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.hub.image_io import ImageLoadError
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"


def _rows_with(folder: Path, editing_requests: Path, name: str, make) -> Path:
    """A copy of the requests whose first request's first source is ``name``, made by ``make(path)``."""
    data = Path(shutil.copytree(editing_requests.parent, folder))
    make(data / name)
    lines = (data / editing_requests.name).read_text().splitlines()
    first = json.loads(lines[0])
    first["sources"][0] = name
    (data / "rows.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    return data / "rows.jsonl"


SOURCES = {  # run in this process (a reader that blocks on a FIFO is released by run_bounded); /dev/zero, which
    # the old reader filled memory from, is tried in a child process with bounded memory below
    "fifo": lambda path: os.mkfifo(path),
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_the_trainer_refuses_a_source_that_is_not_a_file_at_once(toy_editor_path, editing_requests, tmp_path, kind):
    rows = _rows_with(tmp_path / "data", editing_requests, "src.png", SOURCES[kind])
    config = toy_config(toy_editor_path, rows, tmp_path / "run", max_steps=1)
    errors = []

    def train():
        try:
            FlowGRPOEditorTrainer(config).train()
        except MIEScoreInputError as error:
            errors.append(str(error))

    release = partial(release_fifo, rows.parent / "src.png")  # frees the reader if it blocks
    assert not run_bounded(train, 20, release), "the trainer blocked on the source"
    assert errors and "src.png' is not a regular file (a pipe, socket or device)" in errors[0], errors
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_edit_refuses_a_source_that_is_not_a_file_at_once(toy_editor_path, editing_requests, tmp_path, kind, capsys):
    from modeling_miescore.cli.main import main

    rows = _rows_with(tmp_path / "data", editing_requests, "src.png", SOURCES[kind])
    status = []
    argv = ["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(rows), "--out",
            str(tmp_path / "out"), "--no-progress"]
    assert not run_bounded(lambda: status.append(main(argv)), 20, partial(release_fifo, rows.parent / "src.png"))
    err = capsys.readouterr().err.strip()
    assert status == [2] and "is not a regular file" in err and "\n" not in err, err


def test_dev_zero_is_never_read(editing_requests, tmp_path):
    """The requests reader of the trainer and ``miescore edit``, and ``read_image_file``, on a link to /dev/zero, in a
    child with 6 GB of address space: the old reader (``read_bytes``) filled it in seconds."""
    rows = _rows_with(tmp_path / "data", editing_requests, "zero.png", lambda path: os.symlink("/dev/zero", path))
    code = ("import resource\nresource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))\n"
            "from modeling_miescore.data.editing_inputs import read_editing_inputs\n"
            "from modeling_miescore.hub.image_io import read_image_file\n"
            f"zero = {str(rows.parent / 'zero.png')!r}\n"
            f"for call in (lambda: read_editing_inputs({str(rows)!r}), lambda: read_image_file(zero)):\n"
            "    try:\n        call()\n    except ValueError as e:\n        print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.count("zero.png' is not a regular file") == 2, done.stdout + done.stderr[-2000:]


def test_a_truncated_source_is_reported_before_it_is_decoded(editing_requests, tmp_path):
    """The old reader accepted the header and the run decoded 400 MB before it failed; now the requests are
    refused with the source named, and the check itself stays small (measured in a child process)."""
    rows = _rows_with(tmp_path / "data", editing_requests, "cut.png", truncated_png)
    code = ("import resource\nfrom modeling_miescore.data.editing_inputs import read_editing_inputs\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"try:\n    read_editing_inputs({str(rows)!r})\nexcept Exception as e:\n    print(e)\n"
            "print('grew_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert "rows.jsonl:1: source 1 '" in done.stdout and "cut.png' is truncated or corrupt" in done.stdout, \
        done.stdout + done.stderr[-2000:]
    grew = int(done.stdout.rsplit("grew_kb", 1)[1])
    assert grew < 100_000, f"the check grew the process by {grew} KB"


def test_read_image_file_checks_the_opened_file(tmp_path):
    from modeling_miescore.hub.image_io import read_image_file

    good = tmp_path / "a.png"
    good.write_bytes(b"\x89PNG" + b"\0" * 100)
    assert read_image_file(good) == good.read_bytes()
    with pytest.raises(ImageLoadError, match="is 104 bytes, above the 50-byte limit"):
        read_image_file(good, max_bytes=50)
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(ImageLoadError, match="is empty"):
        read_image_file(tmp_path / "empty.png")
    with pytest.raises(ImageLoadError, match="is a directory"):
        read_image_file(tmp_path)
