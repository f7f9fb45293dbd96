"""``miescore export-vllm`` on hostile or damaged checkpoints and outputs: a file linked out of the checkpoint
folder (``/etc/passwd``, ``/proc/self/environ``, ``/dev/zero``), a FIFO, an oversized file, a tokenizer that does
not load, a config without its pixel range; an OUT that is a broken link, lies inside the checkpoint or cannot be
written; a disk that fills up. Each is one line (exit 2 for the input, 1 for the disk), and nothing is left
behind: no OUT, no staging folder, the checkpoint unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
from pathlib import Path

import pytest

from modeling_miescore.cli import main


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "ckpt"
    shutil.copytree(checkpoint, folder)
    return folder


def _hashes(folder: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else
            os.readlink(p) if p.is_symlink() else "special" for p in sorted(folder.iterdir())}


def _refused(checkpoint: Path, out: Path, capsys, status: int = 2) -> str:
    """Run the export, expect ``status`` and one line; nothing written beside OUT or into the checkpoint."""
    before = _hashes(checkpoint)
    capsys.readouterr()
    assert main(["export-vllm", str(checkpoint), str(out)]) == status
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not os.path.lexists(out) or out.is_symlink()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]  # no staging folder
    assert _hashes(checkpoint) == before
    return err


@pytest.mark.parametrize("name, target", [("tokenizer_config.json", "/etc/passwd"), ("vocab.json", "/etc/passwd"),
                                          ("merges.txt", "/proc/self/environ"), ("vocab.json", "/dev/zero"),
                                          ("model.safetensors", "../elsewhere.safetensors")])
def test_a_file_linked_out_of_the_checkpoint_is_never_copied(name, target, tiny_spatialreward_path, tmp_path,
                                                              capsys):
    checkpoint = _copy(tiny_spatialreward_path, tmp_path)
    if target.startswith(".."):  # a valid weight file, but outside the folder
        shutil.move(checkpoint / name, tmp_path / "elsewhere.safetensors")
    (checkpoint / name).unlink(missing_ok=True)
    (checkpoint / name).symlink_to(target)
    err = _refused(checkpoint, tmp_path / "out", capsys)
    assert f"{name}' is a symbolic link to" in err and "outside the checkpoint folder" in err


@pytest.mark.parametrize("name", ["vocab.json", "tokenizer.json", "model.safetensors"])
def test_a_fifo_in_the_checkpoint_is_refused_without_blocking(name, tiny_spatialreward_path, tmp_path, capsys):
    checkpoint = _copy(tiny_spatialreward_path, tmp_path)
    (checkpoint / name).unlink(missing_ok=True)
    os.mkfifo(checkpoint / name)
    assert "is not a regular file" in _refused(checkpoint, tmp_path / "out", capsys)


def test_an_oversized_tokenizer_file_is_refused_before_it_is_read(tiny_spatialreward_path, tmp_path, capsys):
    from modeling_miescore.scoring.vllm_export import MAX_SETTINGS_FILE_BYTES

    checkpoint = _copy(tiny_spatialreward_path, tmp_path)
    with open(checkpoint / "vocab.json", "wb") as handle:  # sparse: no disk used
        handle.truncate(MAX_SETTINGS_FILE_BYTES + 1)
    assert "-byte limit" in _refused(checkpoint, tmp_path / "out", capsys)


@pytest.mark.parametrize("content", ['{"added_tokens": [{"content": "<|im_end|>", "id": 1}]}', "\x00garbage{"])
def test_a_tokenizer_that_does_not_load_is_refused(content, tiny_spatialreward_path, tiny_miescore_path, tmp_path,
                                                   capsys):
    for kind, source in (("sr", tiny_spatialreward_path), ("ms", tiny_miescore_path)):
        checkpoint = _copy(source, tmp_path / kind)
        (checkpoint / "tokenizer.json").write_text(content)
        err = _refused(checkpoint, tmp_path / kind / "out", capsys)
        assert "tokenizer.json' is unreadable" in err or "the tokenizer of" in err and "does not load" in err


@pytest.mark.parametrize("key", ["min_pixels", "max_pixels"])
def test_a_config_without_its_pixel_range_is_refused(key, tiny_spatialreward_path, tiny_miescore_path, tmp_path,
                                                     capsys):
    for kind, source in (("sr", tiny_spatialreward_path), ("ms", tiny_miescore_path)):
        checkpoint = _copy(source, tmp_path / kind)
        config = json.loads((checkpoint / "config.json").read_text())
        del config[key]
        (checkpoint / "config.json").write_text(json.dumps(config))
        assert f"has no {key}" in _refused(checkpoint, tmp_path / kind / "out", capsys)


def test_out_a_broken_link_inside_the_checkpoint_or_unwritable(tiny_spatialreward_path, tmp_path, capsys):
    checkpoint = _copy(tiny_spatialreward_path, tmp_path)
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert "broken symbolic link" in _refused(checkpoint, tmp_path / "dangling", capsys)
    assert not (tmp_path / "nowhere").exists()
    for out in (checkpoint / "export", tmp_path / "ckpt" / ".." / "ckpt" / "sub"):
        assert "lies inside the checkpoint folder" in _refused(checkpoint, out, capsys)
    before = _hashes(checkpoint)
    assert main(["export-vllm", str(checkpoint), "/proc/miescore-export"]) == 2  # no folder can be made there
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot write in the folder '/proc'" in err
    assert _hashes(checkpoint) == before


def test_a_full_disk_is_exit_1_and_leaves_nothing(tiny_spatialreward_path, tiny_miescore_path, tmp_path, capsys):
    """Files above 300 kB cannot be written (RLIMIT_FSIZE; Python ignores SIGXFSZ, so the write fails with EFBIG):
    the SpatialReward export fails while copying its weights, the MIEScore one in safetensors' writer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    for kind, source in (("sr", tiny_spatialreward_path), ("ms", tiny_miescore_path)):
        checkpoint = _copy(source, tmp_path / kind)
        resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, hard))
        try:
            err = _refused(checkpoint, tmp_path / kind / "out", capsys, status=1)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert err.startswith("miescore export-vllm: error: cannot write the export") and "File too large" in err
