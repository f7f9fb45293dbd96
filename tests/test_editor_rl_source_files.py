"""Sources that are not image files (issue 31, HIGH 5): a FIFO, ``/dev/zero`` (also through a symbolic link) and a
truncated PNG are refused quickly, with one line naming the source, by the trainer and ``miescore edit``, before
anything is read whole or decoded; every other image reader checks the same way (``image_io.read_image_file``)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from editor_rl_runs import toy_config
from modeling_miescore.image_io import ImageLoadError, MIEScoreInputError, read_image_file
from modeling_miescore.testing.bad_input_corpus import run_bounded
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"


def truncated_png(path: Path, side: int = 10_000) -> Path:
    """A PNG whose header claims ``side`` x ``side`` RGBA pixels (400 MB decoded at 10,000) whose data stops half
    way: decoding it allocates the whole image before it finds out."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    row = b"\x00" + b"\xc8\x0a\x0a\xff" * side
    packer = zlib.compressobj(1)
    body = b"".join(packer.compress(row) for _ in range(side // 2)) + packer.flush(zlib.Z_SYNC_FLUSH)
    header = struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body))  # no IEND
    return path


def _rows_with(folder: Path, editing_requests: Path, name: str, make) -> Path:
    """A copy of the requests whose first request's first source is ``name``, made by ``make(path)``."""
    data = Path(shutil.copytree(editing_requests.parent, folder))
    make(data / name)
    lines = (data / editing_requests.name).read_text().splitlines()
    first = json.loads(lines[0])
    first["sources"][0] = name
    (data / "rows.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    return data / "rows.jsonl"


SOURCES = {
    "fifo": lambda path: os.mkfifo(path),
    "dev-zero": lambda path: os.symlink("/dev/zero", path),
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

    assert not run_bounded(train, 20, [rows.parent / "src.png"]), "the trainer blocked on the source"
    assert errors and "src.png' is not a regular file (a pipe, socket or device)" in errors[0], errors
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_edit_refuses_a_source_that_is_not_a_file_at_once(toy_editor_path, editing_requests, tmp_path, kind, capsys):
    from modeling_miescore.cli.main import main

    rows = _rows_with(tmp_path / "data", editing_requests, "src.png", SOURCES[kind])
    status = []
    argv = ["edit", "--pipeline", TOY, "--model", str(toy_editor_path), "--input", str(rows), "--out",
            str(tmp_path / "out"), "--no-progress"]
    assert not run_bounded(lambda: status.append(main(argv)), 20, [rows.parent / "src.png"])
    err = capsys.readouterr().err.strip()
    assert status == [2] and "is not a regular file" in err and "\n" not in err, err


def test_dev_zero_is_never_read(tmp_path):
    """In a child with 2 GB of address space: the old reader (``read_bytes``) filled it in seconds."""
    link = tmp_path / "zero.png"
    os.symlink("/dev/zero", link)
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
            "from modeling_miescore.image_io import read_image_file, ImageLoadError\n"
            f"try:\n    read_image_file({str(link)!r})\nexcept ImageLoadError as e:\n    print(e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "is not a regular file" in done.stdout, done.stderr[-2000:]


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
