"""The bad-input corpus's ``export-vllm`` group (issue 41): ``miescore export-vllm C OUT`` on a copy ``C`` of a tiny
SpatialReward (or MIEScore) checkpoint with a file linked out of the folder (``/etc/passwd``,
``/proc/self/environ``, ``/dev/zero``, a weight file beside it), a FIFO, a sparse 257 MiB ``vocab.json``, a
tokenizer that does not load, a config without its pixel range; an OUT that is a broken link, lies inside C or
under ``/proc``; a full disk.

Clean: exit 2 (1 for the full disk), one line on stderr and nothing on stdout (else *wrong status* / *unclear
message*), C and the file beside it unchanged, no staging folder left and no OUT (unless the export exited 0:
then its OUT is judged by the other columns) (else *data lost*), and no file of
the case folder holding ``/etc/passwd``'s first line or an entry of this process's environment (else *secrets
copied*). The ``/dev/zero``, 257 MiB and full-disk cases run in a child process whose files are bounded
(RLIMIT_FSIZE), so that code which copies them cannot fill the disk; so do the FIFOs (released after the timeout):
a reader that blocks on one while holding the interpreter lock (safetensors' and tokenizers' Rust readers) would
stall the corpus itself.
Only ``export-vllm`` and its arguments are used, which the code before issue 41 had.
"""

from __future__ import annotations

import json
import os
import shutil
from functools import partial
from pathlib import Path

from modeling_miescore.testing import build_tiny_spatialreward

from .bad_input_corpus import Case, Outcome, check_message, run_cli
from .bad_input_editor_benchmarks import fresh_case_folder
from .bad_input_editor_runs import in_child

__all__ = ["EXPORT_ENTRY", "changed_apart_from", "export_cases", "files_holding_secrets", "folder_state"]

EXPORT_ENTRY = "export-vllm"
CHILD_FILE_SIZE = 64 << 20  # bytes a child may write to one file: /dev/zero or 257 MiB of zeros cannot fill the disk
FULL_DISK_FILE_SIZE = 300_000  # the weights (about 1 MB) do not fit: the export fails while writing them


def secret_needles() -> list[bytes]:
    """What no export may hold: ``/etc/passwd``'s first line and each entry of 16 bytes or more of this process's
    environment (``/proc/self/environ``; a child's inherits them)."""
    needles = [Path("/etc/passwd").read_bytes().splitlines()[0]]
    needles += [entry for entry in Path("/proc/self/environ").read_bytes().split(b"\0") if len(entry) >= 16]
    return needles


def files_holding_secrets(folder: Path) -> list[str]:
    """The regular files under ``folder`` (links not followed) that hold a :func:`secret_needles` entry."""
    needles = secret_needles()
    found = []
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            if any(needle in data for needle in needles):
                found.append(str(path.relative_to(folder)))
    return found


def folder_state(folder: Path) -> dict:
    """Each entry of ``folder`` (not followed): a regular file's bytes, a link's target, else its kind."""
    return {str(p.relative_to(folder)): os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else
            "folder" if p.is_dir() else "special" for p in sorted(folder.rglob("*"))}


def changed_apart_from(before: dict, after: dict, output: str | None = None) -> bool:
    """Whether a :func:`folder_state` changed, apart from ``output`` (a new output written by a run that succeeded,
    relative to the folder; its contents are judged by the other columns)."""
    def kept(state: dict) -> dict:
        return {k: v for k, v in state.items() if output is None or (k != output and not k.startswith(output + "/"))}
    return kept(before) != kept(after)


def _checkpoints(corpus) -> dict:
    """``{"sr": tiny SpatialReward, "ms": the corpus's tiny MIEScore}``, the SpatialReward one built once."""
    path = corpus.folder / "export-vllm-checkpoints" / "tiny-spatialreward"
    if not (path / "config.json").is_file():
        shutil.rmtree(path, ignore_errors=True)
        build_tiny_spatialreward(path, max_new_tokens=8)
    return {"sr": path, "ms": corpus.model_path}


# ----------------------------------------------------------------------------------------------- the damages


def _link(name: str, target: str, corpus, checkpoint: Path) -> None:
    if target.startswith(".."):  # a valid weight file, but beside the folder
        shutil.move(checkpoint / name, checkpoint.parent / Path(target).name)
    (checkpoint / name).unlink(missing_ok=True)
    (checkpoint / name).symlink_to(target)


def _fifo(name: str, corpus, checkpoint: Path) -> None:
    (checkpoint / name).unlink(missing_ok=True)
    os.mkfifo(checkpoint / name)
    corpus.fifos.append(checkpoint / name)  # released by the corpus if the export blocks on it


def _sparse(corpus, checkpoint: Path) -> None:
    with open(checkpoint / "vocab.json", "wb") as handle:  # sparse: no disk used
        handle.truncate(257 << 20)


def _write(name: str, text: str, corpus, checkpoint: Path) -> None:
    (checkpoint / name).write_text(text)


def _drop_key(key: str, corpus, checkpoint: Path) -> None:
    config = json.loads((checkpoint / "config.json").read_text())
    del config[key]
    (checkpoint / "config.json").write_text(json.dumps(config))


def _nothing(corpus, checkpoint: Path) -> None:
    pass


# ----------------------------------------------------------------------------------------------- the run


def _out_path(where: str, folder: Path, checkpoint: Path) -> Path:
    if where == "dangling":
        (folder / "dangling").symlink_to(folder / "nowhere")
        return folder / "dangling"
    return {"beside": folder / "out", "C/export": checkpoint / "export", "C/../C/sub": checkpoint / ".." /
            checkpoint.name / "sub", "/proc": Path("/proc/miescore-export")}[where]


def _export(kind: str, damage, needle: str, corpus, outcome: Outcome, *, where: str = "beside", expect: int = 2,
            child: int = 0) -> None:
    """Export a damaged copy of checkpoint ``kind`` to OUT (``where``), in a child process with files bounded to
    ``child`` bytes when ``child``; judge the run (module docstring)."""
    folder = fresh_case_folder(corpus, outcome.case, EXPORT_ENTRY)
    checkpoint = Path(shutil.copytree(_checkpoints(corpus)[kind], folder / "ckpt", symlinks=True))
    damage(corpus, checkpoint)
    out = _out_path(where, folder, checkpoint)
    before = folder_state(folder)
    argv = ["export-vllm", checkpoint, out]
    if child:
        (status, err), stdout = in_child(argv, main="modeling_miescore.cli.main:main", file_size=child), ""
        outcome.flag("traceback", "Traceback (most recent call last)" in err)
    else:
        status, stdout, err = run_cli(argv, outcome)
    lines = [line for line in err.splitlines() if line.strip()]
    outcome.expected, outcome.got = f"exit {expect}, one line, nothing written", f"exit {status}"
    outcome.message = " | ".join(lines)[-300:]
    outcome.flag("wrong_status", status != expect or bool(stdout.strip()))
    outcome.flag("unclear_message", len(lines) != 1)
    check_message(outcome, err, needle)
    # C and the file beside it unchanged; no staging folder; no OUT unless the export succeeded beside C
    written = "out" if status == 0 and where == "beside" else None
    outcome.flag("data_lost", changed_apart_from(before, folder_state(folder), written))
    outcome.flag("secrets_copied", bool(files_holding_secrets(folder)))


_SR = "sr"
_CHILD = {"child": CHILD_FILE_SIZE}  # options: run in a child process with bounded files
_CASES = {
    # name -> (checkpoint, damage, needle, options)
    "C/tokenizer_config.json -> /etc/passwd": (_SR, partial(_link, "tokenizer_config.json", "/etc/passwd"),
                                               "outside the checkpoint folder", {}),
    "C/vocab.json -> /etc/passwd": (_SR, partial(_link, "vocab.json", "/etc/passwd"),
                                    "outside the checkpoint folder", {}),
    "C/merges.txt -> /proc/self/environ": (_SR, partial(_link, "merges.txt", "/proc/self/environ"),
                                           "outside the checkpoint folder", {}),
    "C/vocab.json -> /dev/zero": (_SR, partial(_link, "vocab.json", "/dev/zero"), "outside the checkpoint folder",
                                  _CHILD),
    "C/model.safetensors -> ../w.safetensors": (_SR, partial(_link, "model.safetensors", "../w.safetensors"),
                                                "outside the checkpoint folder", {}),
    "C/vocab.json a FIFO": (_SR, partial(_fifo, "vocab.json"), "is not a regular file", _CHILD),
    "C/tokenizer.json a FIFO": (_SR, partial(_fifo, "tokenizer.json"), "is not a regular file", _CHILD),
    "C/model.safetensors a FIFO": (_SR, partial(_fifo, "model.safetensors"), "is not a regular file", _CHILD),
    "C/vocab.json of 257 MiB (sparse)": (_SR, _sparse, "-byte limit", _CHILD),
    "SpatialReward: tokenizer.json with <|im_end|> as token 1": (_SR, partial(
        _write, "tokenizer.json", '{"added_tokens":[{"content":"<|im_end|>","id":1}]}'), "tokenizer", {}),
    "MIEScore: tokenizer.json with <|im_end|> as token 1": ("ms", partial(
        _write, "tokenizer.json", '{"added_tokens":[{"content":"<|im_end|>","id":1}]}'), "tokenizer", {}),
    "tokenizer.json not JSON": (_SR, partial(_write, "tokenizer.json", "\x00garbage{"), "tokenizer", {}),
    "config.json without min_pixels": (_SR, partial(_drop_key, "min_pixels"), "has no min_pixels", {}),
    "config.json without max_pixels": (_SR, partial(_drop_key, "max_pixels"), "has no max_pixels", {}),
    "OUT a broken symbolic link": (_SR, _nothing, "broken symbolic link", {"where": "dangling"}),
    "OUT = C/export": (_SR, _nothing, "lies inside the checkpoint folder", {"where": "C/export"}),
    "OUT = C/../C/sub": (_SR, _nothing, "lies inside the checkpoint folder", {"where": "C/../C/sub"}),
    "OUT under /proc": (_SR, _nothing, "cannot write in the folder '/proc'", {"where": "/proc"}),
    "SpatialReward: a full disk": (_SR, _nothing, "cannot write the export",
                                   {"expect": 1, "child": FULL_DISK_FILE_SIZE}),
    "MIEScore: a full disk": ("ms", _nothing, "cannot write the export", {"expect": 1, "child": FULL_DISK_FILE_SIZE}),
}


def export_cases() -> list:
    """The ``export-vllm`` cases (module docstring)."""
    return [Case(EXPORT_ENTRY, name, "41.vllm", partial(_export, kind, damage, needle, **options))
            for name, (kind, damage, needle, options) in _CASES.items()]
