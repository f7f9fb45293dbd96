"""The shared part of the bad-input corpus's editor cases (issue 31; the cases: :mod:`.bad_input_editor`, the
trainer's, and :mod:`.bad_input_edit`, ``miescore edit``'s): the rewards a case names by import path, the toy
editor's inputs and a finished run built once, the runners (the recipe in this process or in a child process
with :data:`CHILD_ADDRESS_SPACE`, ``miescore edit`` through ``run_cli``) and the judge of one run (the rules of
:mod:`.bad_input_editor`'s docstring), the answers of a stand-in ``miescore serve`` replica (served by
``local_http.BadChatServer``), and sources that are no image files.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path
from unittest import mock

import local_http
import numpy as np
import yaml

from modeling_miescore.testing.editing_requests import write_editing_requests
from modeling_miescore.testing.toy_editor import build_toy_editor

from .bad_input_corpus import SECRET_PASSWORD, Outcome, check_message, in_process

TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"
HERE = "corpus.bad_input_editor_runs"  # the rewards below, by import path (``tests/`` is on ``sys.path``)
ROOT = Path(__file__).resolve().parents[2]
CHILD_ADDRESS_SPACE = 6 << 30  # bytes; importing torch and diffusers reserves ~3.7 GB of it


# ---------------------------------------------------------------------------------------------- rewards


def redness(image) -> float:
    rgb = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
    return float((rgb[..., 0] - (rgb[..., 1] + rgb[..., 2]) / 2).mean())


def good_reward(images, instructions, sources):
    return [redness(i) for i in images]


def text_reward(images, instructions, sources):
    return [str(redness(i)) for i in images]


def bool_reward(images, instructions, sources):
    return [redness(i) > 0 for i in images]


def huge_reward(images, instructions, sources):
    return [1.55e308 + 0.15e308 * max(-1.0, min(1.0, 5 * redness(i))) for i in images]


def off_range_reward(images, instructions, sources):
    return [5.0] * len(images)


off_range_reward.reward_range = (0.0, 1.0)


def exit_reward(images, instructions, sources):
    raise SystemExit(0)


def interrupt_reward(images, instructions, sources):
    raise KeyboardInterrupt


def os_exit_reward(images, instructions, sources):
    os._exit(0)


def value_error_reward(images, instructions, sources):
    raise ValueError("cannot score an image of 64x64 pixels")


# ---------------------------------------------------------------------------------------------- inputs


class EditorInputs:
    """The toy editor, four requests and a finished 2-step run (checkpoints after each step; trained on first use),
    built once."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.model = build_toy_editor(folder / "models" / "toy")
        self.rows = write_editing_requests(folder / "data" / "rows.jsonl")
        (self.rows.parent / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# the dataset's own card\n")

    @property
    def run(self) -> Path:
        run = self.folder / "finished-run"
        if not (run / "pytorch_lora_weights.safetensors").is_file():
            shutil.rmtree(run, ignore_errors=True)
            status = in_process(lambda: recipe_cli(["--config", write_config(self.folder, run, max_steps=2)]))[0]
            if status != 0:
                raise RuntimeError(f"the corpus's base run failed (exit {status})")
        return run


def inputs(corpus) -> EditorInputs:
    if getattr(corpus, "editor_inputs", None) is None:
        corpus.editor_inputs = EditorInputs(corpus.folder / "editor")
    return corpus.editor_inputs


def base_settings(editor: Path, rows: Path, out: Path) -> dict:
    return dict(editor=TOY, model_name_or_path=str(editor), dtype="float32", dataset=str(rows),
                reward=f"{HERE}:good_reward", num_generations=4, num_inference_steps=4, per_device_batch_size=8,
                updates_per_step=2, learning_rate=1e-2, lora_rank=4, lora_alpha=8, beta=0.0, clip_range_low=1e-2,
                clip_range_high=1e-2, noise_level=1.0, max_steps=1, save_steps=1, sample_grid_steps=0,
                output_dir=str(out), progress=False, seed=0)


def write_config(folder: Path, out: Path, **overrides) -> str:
    editor = folder / "models" / "toy"
    settings = {**base_settings(editor, folder / "data" / "rows.jsonl", out), **overrides}
    path = folder / f"config-{hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:10]}.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def fresh_folder(corpus, name: str) -> Path:
    folder = corpus.folder / "editor" / "cases" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def file_hashes(*paths) -> dict:
    out = {}
    for root in map(Path, paths):
        for path in sorted([root, *root.rglob("*")] if root.is_dir() else [root]):
            if path.is_file() and not path.is_symlink():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# ---------------------------------------------------------------------------------------------- running


def recipe_cli(argv: list) -> int:
    if str(ROOT / "trainers") not in sys.path:
        sys.path.insert(0, str(ROOT / "trainers"))
    import flow_grpo_editor

    return flow_grpo_editor.cli([str(a) for a in argv])


def in_child(argv: list, env: dict | None = None, timeout: float = 300,
             main: str = "flow_grpo_editor:cli", file_size: int = -1) -> tuple:
    """``main`` (``module:function`` taking the arguments; by default the recipe, ``modeling_miescore.cli.main:main``
    for ``miescore``) in a child process with :data:`CHILD_ADDRESS_SPACE` and files of at most ``file_size`` bytes
    (-1: unbounded; a larger write fails with EFBIG, as on a full disk): ``(status, stderr)``."""
    module, function = main.split(":")
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (%d, %d))\n"
            "resource.setrlimit(resource.RLIMIT_FSIZE, (%d, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))\n"
            "sys.path.insert(0, %r)\nfrom %s import %s\nsys.exit(%s(sys.argv[1:]))\n"
            % (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE, file_size, str(ROOT / "trainers"), module, function,
               function))
    # PYTHONPATH first: the package under test (an older checkout's, for a "before" column), then this checkout
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT), str(ROOT / "tests")]))
    child_env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    done = subprocess.run([sys.executable, "-c", code, *map(str, argv)], env=child_env, capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stderr


def judge_run(outcome: Outcome, status, err: str, escaped, expect: int, needle: str | None) -> None:
    """The rules of the module docstring for one recipe or ``edit`` run."""
    outcome.expected, outcome.got = f"exit {expect}", f"exit {status}"
    lines = [line for line in err.splitlines()
             if line.startswith(("flow_grpo_editor: ", "miescore edit: error", "miescore edit: reward "))]
    outcome.message = " | ".join(lines)[:300] or (f"{type(escaped).__name__}: {escaped}" if escaped else err[-300:])
    outcome.flag("traceback", escaped is not None or "Traceback (most recent call last)" in err)
    outcome.flag("wrong_status", status != expect)
    if expect != 0:
        outcome.flag("unclear_message", len(lines) != 1)
        check_message(outcome, " ".join(lines), needle)
    outcome.flag("data_lost", SECRET_PASSWORD in err)


def run_recipe(corpus, outcome: Outcome, expect: int, needle, *, name: str = "run", child: bool = False,
                env: dict | None = None, out: Path | None = None, extra: tuple = (), check=None, **overrides):
    """The recipe on the base settings with ``overrides``; inputs hashed before and after (``data_lost``)."""
    toy = inputs(corpus)
    folder = fresh_folder(corpus, name)
    out = out if out is not None else folder / "out"
    config = write_config(toy.folder, out, **overrides)
    before = file_hashes(toy.model, toy.rows.parent)
    argv = ["--config", config, *extra]
    if child:
        (status, err), escaped = in_child(argv, env), None
    else:
        with mock.patch.dict(os.environ, env or {}):
            status, _, err, escaped = in_process(lambda: recipe_cli(argv))
    judge_run(outcome, status, err, escaped, expect, needle)
    restored_if_changed(corpus, outcome, before)
    if Path(out).is_dir():
        outcome.flag("data_lost", any(Path(out).glob(".checkpoint-*")) or _written_secret(Path(out))
                     or not _strict_metrics(Path(out) / "metrics.jsonl"))
    if check is not None:
        check(outcome, Path(out))


def restored_if_changed(corpus, outcome: Outcome, before: dict) -> None:
    """Flag ``data_lost`` when the toy editor or the requests changed, and build them afresh for the next case (on
    code without the fixes a run deleted the model's weights; the cases after it must not fail for that)."""
    toy = inputs(corpus)
    if file_hashes(toy.model, toy.rows.parent) != before:
        outcome.flag("data_lost")
        for name in ("models", "data", "finished-run"):
            shutil.rmtree(toy.folder / name, ignore_errors=True)
        corpus.editor_inputs = None


def _written_secret(out: Path) -> bool:
    return any(SECRET_PASSWORD in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()
               and p.suffix in (".json", ".jsonl", ".md", ".txt"))


def _strict_metrics(path: Path) -> bool:
    if not path.is_file():
        return True

    def refuse(constant):
        raise ValueError(constant)
    try:
        for line in path.read_text().splitlines():
            json.loads(line, parse_constant=refuse)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- a stand-in replica


def replica_score(image) -> float:
    """The stand-in replica's score of an edit: 50 + 40 x its redness (so a result read for the wrong edit shows)."""
    return 50.0 + 40.0 * redness(image)


def replica_reply(body, overall=None, order=lambda results: results) -> bytes:
    """A ``miescore serve`` answer to ``body``: ``overall`` for every edit, or the replica's score of its image."""
    answer = local_http.score_groups_answer(
        body, lambda group, image: {"overall": replica_score(image) if overall is None else overall})
    return json.dumps({"results": order(answer["results"])}).encode()


# ---------------------------------------------------------------------------------------------- sources


def truncated_png(path: Path, side: int = 10_000) -> Path:
    """A PNG whose header claims ``side`` x ``side`` RGBA pixels and whose data stops half way."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer = zlib.compressobj(1)
    row = b"\x00" + b"\xc8\x0a\x0a\xff" * side
    body = b"".join(packer.compress(row) for _ in range(side // 2)) + packer.flush(zlib.Z_SYNC_FLUSH)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0))
                     + chunk(b"IDAT", body))
    return path


def bad_source_rows(corpus, kind: str) -> Path:
    """A copy of the requests whose first source is a FIFO, a link to /dev/zero or a truncated PNG."""
    toy = inputs(corpus)
    data = Path(shutil.copytree(toy.rows.parent, fresh_folder(corpus, f"source-{kind}") / "data"))
    source = data / "bad.png"
    if kind == "a FIFO":
        os.mkfifo(source)
        corpus.fifos.append(source)  # released by the corpus if the reader blocks on it
    elif kind == "/dev/zero":
        os.symlink("/dev/zero", source)
    else:
        truncated_png(source)
    lines = (data / "rows.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["sources"][0] = "bad.png"
    (data / "rows.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    return data / "rows.jsonl"


__all__ = ["CHILD_ADDRESS_SPACE", "EditorInputs", "HERE", "ROOT", "TOY", "bad_source_rows", "base_settings",
           "file_hashes", "fresh_folder", "in_child", "inputs", "judge_run", "recipe_cli", "redness", "replica_reply",
           "replica_score", "restored_if_changed", "run_recipe", "truncated_png", "write_config"]
