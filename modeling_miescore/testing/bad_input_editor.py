"""The bad-input corpus's editor cases of issue 31: the editor-RL trainer (``trainers/flow_grpo_editor.py``) and
``miescore edit``, tried as a hostile or unlucky user would, on the toy editor (``testing.toy_editor``).

Entries:

* ``trainer``: bad config values (tracebacks and nonsense trained with exit 0 before), output folders that alias
  an input (the dataset's folder as written, as ``dir/../dir`` and through a link; the editor's model folder, with
  ``finetuning: full`` and ``--overwrite_output_dir``; a file, a path under a file, ``/proc``), invented rewards
  (strings, booleans, 1e308, values off the declared range, duplicate keys and off-scale values from a ``serve:``
  replica), rewards that exit (``SystemExit``, ``KeyboardInterrupt``, ``os._exit``), unbounded replicas (a gzip
  bomb, a trickle, a redirect), credentials in reward URLs and API keys, sources that are no image files (a FIFO,
  ``/dev/zero``, a truncated PNG), damaged checkpoints on ``--resume``, a resume with other settings and a full
  disk while a checkpoint is written;
* ``edit``: ``--input`` being the ``--out`` folder's own ``edits.jsonl``, ``--out`` the model folder, control
  characters in an instruction or an id, a garbage or NaN LoRA, a FIFO, ``/dev/zero`` or truncated source, an
  editor that cannot load offline;
* ``editor-benchmarks`` (the editor benchmarks' converters and judges): kept for their own cases
  (:func:`editor_benchmark_cases`, empty here).

*Clean* follows ``bad_input_corpus``: the documented exit status (2 bad input, 1 a stop by the reward or the
disk, 0 where a hostile but valid input must simply work), the recipe's one ``error:`` / ``stopped:`` line naming
the problem, no traceback, no hang; *data lost* when an input changed (hashed before and after), a credential was
written or printed, a partial checkpoint was left or ``metrics.jsonl`` holds a non-finite number. The cases that
could take the machine down on code without the fixes (``os._exit``, ``/dev/zero``, a gzip bomb) run in a child
process with 6 GB of address space. Only entry points that the code before issue 31 already had are used (the
recipe's ``cli``, ``miescore edit``), so this module runs against it too (``benchmarks/bad_input_table.py``).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import zlib
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .bad_input_corpus import Case, Outcome, captured_output, check_message, run_cli

ENTRIES = ("trainer", "edit", "editor-benchmarks")
TOY = "modeling_miescore.testing.toy_editor:load_toy_editor"
HERE = "modeling_miescore.testing.bad_input_editor"
SECRET = "hunter2-corpus"
ROOT = Path(__file__).resolve().parents[2]
CHILD_ADDRESS_SPACE = 6 << 30  # bytes; importing torch and diffusers reserves ~3.7 GB of it


# ---------------------------------------------------------------------------------------------- rewards


def _redness(image) -> float:
    import numpy as np

    rgb = np.asarray(image.convert("RGB"), dtype=np.float64) / 255.0
    return float((rgb[..., 0] - (rgb[..., 1] + rgb[..., 2]) / 2).mean())


def good_reward(images, instructions, sources):
    return [_redness(i) for i in images]


def text_reward(images, instructions, sources):
    return [str(_redness(i)) for i in images]


def bool_reward(images, instructions, sources):
    return [_redness(i) > 0 for i in images]


def huge_reward(images, instructions, sources):
    return [1.55e308 + 0.15e308 * max(-1.0, min(1.0, 5 * _redness(i))) for i in images]


def off_range_reward(images, instructions, sources):
    return [5.0] * len(images)


off_range_reward.reward_range = (0.0, 1.0)


def exit_reward(images, instructions, sources):
    raise SystemExit(0)


def interrupt_reward(images, instructions, sources):
    raise KeyboardInterrupt


def os_exit_reward(images, instructions, sources):
    os._exit(0)


# ---------------------------------------------------------------------------------------------- inputs


class EditorInputs:
    """The toy editor, four requests and a finished 2-step run (checkpoints after each step), built once."""

    def __init__(self, folder: Path):
        from .editing_requests import write_editing_requests
        from .toy_editor import build_toy_editor

        self.folder = folder
        self.model = build_toy_editor(folder / "models" / "toy")
        self.rows = write_editing_requests(folder / "data" / "rows.jsonl")
        (self.rows.parent / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# the dataset's own card\n")
        self.run = folder / "finished-run"
        if not (self.run / "pytorch_lora_weights.safetensors").is_file():
            shutil.rmtree(self.run, ignore_errors=True)
            status = _in_process(lambda: _recipe_cli(["--config", write_config(folder, self.run, max_steps=2)]))[0]
            if status != 0:
                raise RuntimeError(f"the corpus's base run failed (exit {status})")


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
    import yaml

    editor = folder / "models" / "toy"
    settings = {**base_settings(editor, folder / "data" / "rows.jsonl", out), **overrides}
    path = folder / f"config-{hashlib.sha256(repr(sorted(settings.items())).encode()).hexdigest()[:10]}.yaml"
    path.write_text(yaml.safe_dump(settings))
    return str(path)


def _fresh(corpus, name: str) -> Path:
    folder = corpus.folder / "editor" / "cases" / name
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


def _hashes(*paths) -> dict:
    out = {}
    for root in map(Path, paths):
        for path in sorted([root, *root.rglob("*")] if root.is_dir() else [root]):
            if path.is_file() and not path.is_symlink():
                out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


# ---------------------------------------------------------------------------------------------- running


def _recipe_cli(argv: list) -> int:
    if str(ROOT / "trainers") not in sys.path:
        sys.path.insert(0, str(ROOT / "trainers"))
    import flow_grpo_editor

    return flow_grpo_editor.cli([str(a) for a in argv])


def _in_process(call) -> tuple:
    """``(status or None, stderr, escaped exception or None)`` of ``call()`` with the output captured."""
    with captured_output() as (_, err):
        try:
            status, escaped = call(), None
        except SystemExit as exit_:
            status, escaped = exit_.code if isinstance(exit_.code, int) else 2, None
        except BaseException as error:  # noqa: BLE001 - a traceback for the user (KeyboardInterrupt included)
            status, escaped = None, error
    return status, err.getvalue(), escaped


def _in_child(argv: list, env: dict | None = None, timeout: float = 300) -> tuple:
    """The recipe in a child process with :data:`CHILD_ADDRESS_SPACE`: ``(status, stderr)``."""
    code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (%d, %d))\n"
            "sys.path.insert(0, %r)\nimport flow_grpo_editor\nsys.exit(flow_grpo_editor.cli(sys.argv[1:]))\n"
            % (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE, str(ROOT / "trainers")))
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    child_env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    done = subprocess.run([sys.executable, "-c", code, *map(str, argv)], env=child_env, capture_output=True,
                          text=True, timeout=timeout)
    return done.returncode, done.stderr


def _judge(outcome: Outcome, status, err: str, escaped, expect: int, needle: str | None) -> None:
    """The rules of the module docstring for one recipe or ``edit`` run."""
    outcome.expected, outcome.got = f"exit {expect}", f"exit {status}"
    lines = [line for line in err.splitlines() if line.startswith(("flow_grpo_editor: ", "miescore edit: error"))]
    outcome.message = " | ".join(lines)[:300] or (f"{type(escaped).__name__}: {escaped}" if escaped else err[-300:])
    outcome.flag("traceback", escaped is not None or "Traceback (most recent call last)" in err)
    outcome.flag("wrong_status", status != expect)
    if expect != 0:
        outcome.flag("unclear_message", len(lines) != 1)
        check_message(outcome, " ".join(lines), needle)
    outcome.flag("data_lost", SECRET in err)


def _run_recipe(corpus, outcome: Outcome, expect: int, needle, *, name: str = "run", child: bool = False,
                env: dict | None = None, out: Path | None = None, extra: tuple = (), check=None, **overrides):
    """The recipe on the base settings with ``overrides``; inputs hashed before and after (``data_lost``)."""
    toy = inputs(corpus)
    folder = _fresh(corpus, name)
    out = out if out is not None else folder / "out"
    config = write_config(toy.folder, out, **overrides)
    before = _hashes(toy.model, toy.rows.parent)
    argv = ["--config", config, *extra]
    if child:
        (status, err), escaped = _in_child(argv, env), None
    else:
        with _environment(env):
            status, err, escaped = _in_process(lambda: _recipe_cli(argv))
    _judge(outcome, status, err, escaped, expect, needle)
    _restored_if_changed(corpus, outcome, before)
    if Path(out).is_dir():
        outcome.flag("data_lost", any(Path(out).glob(".checkpoint-*")) or _written_secret(Path(out))
                     or not _strict_metrics(Path(out) / "metrics.jsonl"))
    if check is not None:
        check(outcome, Path(out))


def _restored_if_changed(corpus, outcome: Outcome, before: dict) -> None:
    """Flag ``data_lost`` when the toy editor or the requests changed, and build them afresh for the next case (on
    code without the fixes a run deleted the model's weights; the cases after it must not fail for that)."""
    toy = inputs(corpus)
    if _hashes(toy.model, toy.rows.parent) != before:
        outcome.flag("data_lost")
        for name in ("models", "data", "finished-run"):
            shutil.rmtree(toy.folder / name, ignore_errors=True)
        corpus.editor_inputs = None


@contextlib.contextmanager
def _environment(env: dict | None):
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        yield
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def _written_secret(out: Path) -> bool:
    return any(SECRET in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file()
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


# ---------------------------------------------------------------------------------------------- trainer cases


CONFIG_VALUES = [  # (what, overrides, needle)
    ("per_device_batch_size: 0", dict(per_device_batch_size=0), "per_device_batch_size"),
    ("per_device_batch_size: -8", dict(per_device_batch_size=-8), "per_device_batch_size"),
    ("updates_per_step: 0", dict(updates_per_step=0), "updates_per_step"),
    ("save_steps: 0", dict(save_steps=0), "save_steps"),
    ("ema_update_interval: 0", dict(ema_decay=0.9, ema_update_interval=0), "ema_update_interval"),
    ("learning_rate: -1", dict(learning_rate=-1.0), "learning_rate"),
    ("learning_rate: NaN", dict(learning_rate=float("nan")), "learning_rate"),
    ("learning_rate: 0", dict(learning_rate=0.0), "learning_rate"),
    ("lora_rank: 0", dict(lora_rank=0), "lora_rank"),
    ("lora_rank: -4", dict(lora_rank=-4), "lora_rank"),
    ("lora_rank: 100000", dict(lora_rank=100000), "lora_rank"),
    ("lora_dropout: 2", dict(lora_dropout=2.0), "lora_dropout"),
    ("num_inference_steps: 0", dict(num_inference_steps=0), "num_inference_steps"),
    ("num_inference_steps: 1", dict(num_inference_steps=1), "num_inference_steps"),
    ("train_fraction: 0", dict(train_fraction=0.0), "train_fraction"),
    ("train_fraction: 1.5", dict(train_fraction=1.5), "train_fraction"),
    ("train_steps: windw", dict(train_steps="windw"), "did you mean 'sde_window'"),
    ("sde_type: sdee", dict(sde_type="sdee"), "did you mean 'sde'"),
    ("std_level: grop", dict(std_level="grop"), "did you mean 'group'"),
    ("window_size: 0", dict(train_steps="sde_window", window_size=0), "window_size"),
    ("window_size: 50", dict(train_steps="sde_window", window_size=50), "window_size"),
    ("window_start above window_end", dict(train_steps="sde_window", window_start=0.6, window_end=0.2), "window_"),
    ("report_to: tensorbord", dict(report_to="tensorbord"), "did you mean 'tensorboard'"),
    ("gradient_accumulation_steps: 0", dict(gradient_accumulation_steps=0), "gradient_accumulation_steps"),
    ("gradient_accumulation_steps: -1", dict(gradient_accumulation_steps=-1), "gradient_accumulation_steps"),
    ("max_steps: 0", dict(max_steps=0), "max_steps"),
    ("max_steps: -3", dict(max_steps=-3), "max_steps"),
    ("clip_range_low: -0.1", dict(clip_range_low=-0.1), "clip_range_low"),
    ("beta: NaN", dict(beta=float("nan")), "beta"),
    ("ema_decay: 2", dict(ema_decay=2.0), "ema_decay"),
    ("max_grad_norm: -1", dict(max_grad_norm=-1.0), "max_grad_norm"),
    ("advantage_clip: -5", dict(advantage_clip=-5.0), "advantage_clip"),
    ("editor_options height -32", dict(editor_options={"height": -32}), "height"),
    ("max_train_rows: 0", dict(max_train_rows=0), "max_train_rows"),
    ("sample_grid_steps: -1", dict(sample_grid_steps=-1), "sample_grid_steps"),
    ("an editor on the Hub, offline", dict(editor="flux2-klein", model_name_or_path="nobody/not-cached-editor"),
     "nobody/not-cached-editor"),
    ("an editor factory that fails", dict(editor="json:dumps"), "json:dumps"),
]


def _output_alias(kind: str, corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    folder = _fresh(corpus, f"alias-{kind}")
    data = toy.rows.parent
    outs = {"dataset folder": data, "dataset folder as dir/../dir": data / ".." / data.name,
            "dataset folder through a link": folder / "link", "model folder": toy.model,
            "model folder, finetuning: full, overwrite": toy.model}
    if kind == "dataset folder through a link":
        os.symlink(data, folder / "link")
    extra = dict(finetuning="full", overwrite_output_dir=True) if "full" in kind else {}
    _run_recipe(corpus, outcome, 2, "output_dir", name=f"alias-{kind}-run", out=outs[kind], **extra)


def _output_unwritable(kind: str, corpus, outcome: Outcome) -> None:
    folder = _fresh(corpus, f"unwritable-{kind}")
    (folder / "file").write_text("x")
    out = {"a file": folder / "file", "under a file": folder / "file" / "run", "in /proc": "/proc/self/rl-run"}[kind]
    _run_recipe(corpus, outcome, 2, "output_dir", name=f"unwritable-{kind}-run", out=Path(out))
    outcome.flag("data_lost", (folder / "file").read_text() != "x")


def _expect_training(outcome: Outcome, out: Path) -> None:
    """A hostile but valid reward: the run trains, and its metrics are finite."""
    outcome.flag("wrong_status", not (out / "pytorch_lora_weights.safetensors").is_file())


REWARD_CASES = [  # (what, reward, expected status, needle, child process)
    ("a callable returning strings", "text_reward", 1, "not_a_number", False),
    ("a callable returning booleans", "bool_reward", 1, "not_a_number", False),
    ("a callable declaring [0, 1], returning 5", "off_range_reward", 1, "out_of_range", False),
    ("a callable returning values near 1.7e308", "huge_reward", 0, None, False),
    ("a callable raising SystemExit(0)", "exit_reward", 1, "SystemExit", False),
    ("a callable raising KeyboardInterrupt", "interrupt_reward", 1, "KeyboardInterrupt", False),
    ("a callable calling os._exit(0)", "os_exit_reward", 1, "os._exit", True),
]


def _reward_case(reward: str, expect: int, needle, child: bool, corpus, outcome: Outcome) -> None:
    _run_recipe(corpus, outcome, expect, needle, name=f"reward-{reward}", child=child,
                reward=f"{HERE}:{reward}", check=_expect_training if expect == 0 else None)


# ---------------------------------------------------------------------------------------------- served rewards


class _Replica:
    """A stand-in ``miescore serve`` replica on 127.0.0.1: ``answer(groups) -> (status, headers, body)``;
    ``body`` bytes, or a callable writing the body itself (a trickle)."""

    def __init__(self, answer):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                status, headers, data = answer(body.get("groups", []))
                try:
                    self.send_response(status)
                    for key, value in headers.items():
                        self.send_header(key, value)
                    self.send_header("Content-Type", "application/json")
                    if callable(data):
                        self.send_header("Content-Length", str(TRICKLE_BYTES))
                        self.end_headers()
                        data(self.wfile, outer.stop)
                    else:
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                self.close_connection = True

        self.stop = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def _image_overall(blob: str) -> float:
    """The stand-in replica's score of an edit: 50 + 40 x its redness (so a result read for the wrong edit shows)."""
    import base64

    from PIL import Image

    return 50.0 + 40.0 * _redness(Image.open(io.BytesIO(base64.b64decode(blob))))


def _results(groups, value=None, order=lambda results: results) -> bytes:
    """``{"results": [...]}`` labelled like ``miescore serve``'s; ``value(edit index)`` or the image's score."""
    results = [{"overall": _image_overall(blob) if value is None else value(e), "group": g, "index": e}
               for g, group in enumerate(groups) for e, blob in enumerate(group.get("edited", []))]
    return json.dumps({"results": order(results)}).encode()


@functools.lru_cache(maxsize=1)
def _gzip_bomb(inflated: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    block = b" " * (1 << 20)
    return b"".join([packer.compress(b'{"results": ['), *(packer.compress(block) for _ in range(inflated >> 20)),
                     packer.flush()])


TRICKLE_BYTES = 400  # at 50 ms a byte: 20 s, past the 3 s deadline and the case's 15 s bound, never forever


def _trickle(stream, stop) -> None:
    for _ in range(TRICKLE_BYTES):
        if stop.wait(0.05):
            return
        stream.write(b" ")
        stream.flush()


def _logged_rewards_are_the_edits_own(outcome: Outcome, out: Path) -> None:
    """Each reward in rollouts.jsonl is the replica's score of that very edit (a reordered answer read in order
    gives edits each other's rewards)."""
    from PIL import Image

    _expect_training(outcome, out)
    records = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()] \
        if (out / "rollouts" / "rollouts.jsonl").is_file() else []
    for record in records:
        image = Image.open(out / "rollouts" / record["edited"])
        expected = (50.0 + 40.0 * _redness(image)) / 100
        outcome.flag("data_lost", record["reward"] is None or abs(record["reward"] - expected) > 1e-6)
    outcome.flag("wrong_status", not records)


SERVED = {  # what -> (answer(groups) -> (status, headers, body), expected status, needle, reward options)
    'overall: "55" (a string)': (lambda g: (200, {}, _results(g, lambda e: "55")), 1, "not_a_number", {}),
    "overall: true": (lambda g: (200, {}, _results(g, lambda e: True)), 1, "not_a_number", {}),
    "overall: 1e6": (lambda g: (200, {}, _results(g, lambda e: 1e6)), 1, "out_of_range", {}),
    "overall: -500": (lambda g: (200, {}, _results(g, lambda e: -500)), 1, "out_of_range", {}),
    "a body with 'results' twice": (lambda g: (200, {}, _results(g, lambda e: 90.0)[:-1] + b', "results": '
                                               + _results(g, lambda e: 10.0)[12:]), 1, "duplicate_key", {}),
    "results in reverse order": (lambda g: (200, {}, _results(g, order=lambda r: r[::-1])), 0, None, {}),
    "a 302 redirect": (lambda g: (302, {"Location": "http://127.0.0.1:9/v1"}, b""), 1, "redirect", {}),
    "a gzip bomb (1 GiB inflated)": (lambda g: (200, {"Content-Encoding": "gzip"}, _gzip_bomb(1 << 30)), 1,
                                     "limit", {}),
    "a body trickling a byte every 50 ms": (lambda g: (200, {}, _trickle), 1, "timeout", {"timeout": 3}),
}


def _served_case(what: str, corpus, outcome: Outcome) -> None:
    answer, expect, needle, options = SERVED[what]
    child = "bomb" in what
    with _Replica(answer) as replica:
        url = replica.origin.replace("http://", f"http://user:{SECRET}@")
        _run_recipe(corpus, outcome, expect, needle, name=f"served-{hashlib.sha256(what.encode()).hexdigest()[:8]}",
                    child=child, reward=f"serve:{url}", reward_options={"max_retries": 0, **options},
                    reward_timeout=60.0, save_rollouts_steps=1,
                    check=_logged_rewards_are_the_edits_own if expect == 0 else None)


def _newline_key(corpus, outcome: Outcome) -> None:
    _run_recipe(corpus, outcome, 2, "newline", name="newline-key", env={"CORPUS_RL_KEY": f"sk-{SECRET}\n"},
                reward="serve:http://127.0.0.1:9", reward_options={"api_key_env": "CORPUS_RL_KEY"})


def _unreachable_with_password(corpus, outcome: Outcome) -> None:
    spec = f"spatialreward-api:SpatialReward-8B@http://user:{SECRET}@127.0.0.1:9/v1?key={SECRET}"
    _run_recipe(corpus, outcome, 1, "127.0.0.1:9", name="unreachable-password", reward=spec,
                reward_options={"max_retries": 0})


# ---------------------------------------------------------------------------------------------- sources


def truncated_png(path: Path, side: int = 10_000) -> Path:
    """A PNG whose header claims ``side`` x ``side`` RGBA pixels and whose data stops half way."""
    import struct

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    packer = zlib.compressobj(1)
    row = b"\x00" + b"\xc8\x0a\x0a\xff" * side
    body = b"".join(packer.compress(row) for _ in range(side // 2)) + packer.flush(zlib.Z_SYNC_FLUSH)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 6, 0, 0, 0))
                     + chunk(b"IDAT", body))
    return path


def _bad_source_rows(corpus, kind: str) -> Path:
    """A copy of the requests whose first source is a FIFO, a link to /dev/zero or a truncated PNG."""
    toy = inputs(corpus)
    data = Path(shutil.copytree(toy.rows.parent, _fresh(corpus, f"source-{kind}") / "data"))
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


def _trainer_source(kind: str, corpus, outcome: Outcome) -> None:
    rows = _bad_source_rows(corpus, kind)
    _run_recipe(corpus, outcome, 2, "bad.png", name=f"trainer-source-{kind[-4:]}", child=kind == "/dev/zero",
                dataset=str(rows))


# ---------------------------------------------------------------------------------------------- resume


def _damaged_state(edit):
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return damage


def _link_elsewhere(path: Path) -> None:
    other = path.parent.parent / "elsewhere" / path.name
    shutil.copytree(path, other)
    shutil.rmtree(path)
    os.symlink(other, path)


def _dir_instead(path: Path) -> None:
    path.unlink()
    path.mkdir()


DAMAGE = {  # what -> (file in the run folder, damage, needle)
    "run.json garbage": ("run.json", lambda p: p.write_text("{x"), "run.json"),
    "run.json a list": ("run.json", lambda p: p.write_text("[1]"), "run.json"),
    "trainer_state.json garbage": ("checkpoint-2/trainer_state.json", lambda p: p.write_text("g"),
                                   "trainer_state.json"),
    "trainer_state.json without step": ("checkpoint-2/trainer_state.json", _damaged_state(lambda d: d.pop("step")),
                                        "trainer_state.json"),
    "trainer_state.json at step -4": ("checkpoint-2/trainer_state.json", _damaged_state(lambda d: d.update(step=-4)),
                                      "trainer_state.json"),
    "a bad RNG state": ("checkpoint-2/trainer_state.json", _damaged_state(lambda d: d.update(python_rng=[1])),
                        "trainer_state.json"),
    "trainable.safetensors truncated": ("checkpoint-2/trainable.safetensors",
                                        lambda p: p.write_bytes(p.read_bytes()[:-9]), "trainable.safetensors"),
    "trainable.safetensors empty": ("checkpoint-2/trainable.safetensors", lambda p: p.write_bytes(b""),
                                    "trainable.safetensors"),
    "trainable.safetensors missing": ("checkpoint-2/trainable.safetensors", lambda p: p.unlink(),
                                      "trainable.safetensors"),
    "trainable.safetensors a pickle": ("checkpoint-2/trainable.safetensors",
                                       lambda p: p.write_bytes(b"\x80\x04\x95" + b"\x00" * 40), "trainable"),
    "optimizer.safetensors missing": ("checkpoint-2/optimizer.safetensors", lambda p: p.unlink(), "optimizer"),
    "optimizer.json garbage": ("checkpoint-2/optimizer.json", lambda p: p.write_text("]"), "optimizer.json"),
    "a checkpoint linked from another run": ("checkpoint-2", _link_elsewhere, "checkpoint-2"),
    "metrics.jsonl a folder": ("metrics.jsonl", _dir_instead, "metrics.jsonl"),
}


def _damaged_resume(what: str, corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    target, damage, needle = DAMAGE[what]
    out = _fresh(corpus, f"resume-{hashlib.sha256(what.encode()).hexdigest()[:8]}") / "run"
    shutil.copytree(toy.run, out)
    damage(out / target)
    before = _hashes(out)
    _run_recipe(corpus, outcome, 2, needle, name=f"resume-run-{hashlib.sha256(what.encode()).hexdigest()[:8]}",
                out=out, max_steps=3, resume=True)
    outcome.flag("data_lost", _hashes(out) != before)


def _resume_other_settings(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    out = _fresh(corpus, "resume-other") / "run"
    shutil.copytree(toy.run, out)
    _run_recipe(corpus, outcome, 2, "learning_rate", name="resume-other-run", out=out, max_steps=3, resume=True,
                learning_rate=5e-3, beta=0.5)


def _full_disk(corpus, outcome: Outcome) -> None:
    """ENOSPC from safetensors while checkpoint-2 is written (the writer patched): exit 1, nothing partial."""
    import errno
    from unittest import mock

    import safetensors.torch

    real = safetensors.torch.save_file

    def save_file(tensors, filename, *args, **kwargs):
        if "checkpoint-2" in str(filename):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real(tensors, filename, *args, **kwargs)

    with mock.patch.object(safetensors.torch, "save_file", save_file):
        _run_recipe(corpus, outcome, 1, "No space left", name="full-disk", max_steps=2)


def trainer_cases() -> list:
    cases = [Case("trainer", f"config {what}", "31.M", partial(_config_case, overrides, needle))
             for what, overrides, needle in CONFIG_VALUES]
    cases += [Case("trainer", f"output_dir = {kind}", "31.1", partial(_output_alias, kind))
              for kind in ("dataset folder", "dataset folder as dir/../dir", "dataset folder through a link",
                           "model folder", "model folder, finetuning: full, overwrite")]
    cases += [Case("trainer", f"output_dir {kind}", "31.M", partial(_output_unwritable, kind))
              for kind in ("a file", "under a file", "in /proc")]
    cases += [Case("trainer", f"reward: {what}", "31.2" if expect != 1 or "exit" not in what else "31.M",
                   partial(_reward_case, reward, expect, needle, child))
              for what, reward, expect, needle, child in REWARD_CASES]
    cases += [Case("trainer", f"serve: {what}", "31.3" if what.startswith(("a gzip", "a body tr", "a 302")) else
                   "31.2", partial(_served_case, what), timeout=15.0 if "trickling" in what else None)
              for what in SERVED]
    cases += [Case("trainer", "reward URL with a password, unreachable", "31.4", _unreachable_with_password),
              Case("trainer", "api_key_env holding a newline", "31.4", _newline_key)]
    cases += [Case("trainer", f"source: {kind}", "31.5", partial(_trainer_source, kind))
              for kind in ("a FIFO", "/dev/zero", "a truncated PNG")]
    cases += [Case("trainer", f"--resume: {what}", "31.M", partial(_damaged_resume, what)) for what in DAMAGE]
    cases += [Case("trainer", "--resume with another learning rate and beta", "31.M", _resume_other_settings),
              Case("trainer", "a full disk while a checkpoint is written", "31.M", _full_disk)]
    return cases


def _config_case(overrides: dict, needle: str, corpus, outcome: Outcome) -> None:
    _run_recipe(corpus, outcome, 2, needle, name="config", **overrides)


# ---------------------------------------------------------------------------------------------- edit cases


def _edit_argv(corpus, rows, out, *extra) -> list:
    toy = inputs(corpus)
    return ["edit", "--pipeline", TOY, "--model", str(toy.model), "--input", str(rows), "--out", str(out),
            "--steps", "2", "--no-progress", *extra]


def _edit_run(corpus, outcome: Outcome, argv: list, needle: str, watch: tuple = ()) -> None:
    toy = inputs(corpus)
    before = _hashes(toy.model, toy.rows.parent, toy.run, *watch)
    before_inputs = _hashes(toy.model, toy.rows.parent)
    status, out, err = run_cli(argv, outcome)
    _judge(outcome, status, err, None, 2, needle)
    outcome.flag("wrong_status", bool(out.strip()))
    outcome.flag("data_lost", _hashes(toy.model, toy.rows.parent, toy.run, *watch) != before)
    _restored_if_changed(corpus, outcome, before_inputs)


def _edit_own_jsonl(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    out = _fresh(corpus, "edit-own") / "out"
    status, _, _ = run_cli(_edit_argv(corpus, toy.rows, out, "--limit", "1"), outcome)
    if status != 0:
        outcome.flag("wrong_status")
    _edit_run(corpus, outcome, _edit_argv(corpus, out / "edits.jsonl", out), "--out", watch=(out,))


def _edit_into_model(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    _edit_run(corpus, outcome, _edit_argv(corpus, toy.rows, toy.model), "--out")


def _edit_text(field: str, value: str, corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    folder = _fresh(corpus, f"edit-text-{field}")
    lines = toy.rows.read_text().splitlines()
    first = json.loads(lines[0])
    first[field] = value
    first["sources"] = [str(toy.rows.parent / s) for s in first["sources"]]
    (folder / "rows.jsonl").write_text("\n".join([json.dumps(first)]) + "\n")
    _edit_run(corpus, outcome, _edit_argv(corpus, folder / "rows.jsonl", folder / "out"), "U+0000")
    outcome.flag("data_lost", (folder / "out" / "edits.jsonl").is_file()
                  and "\\u0000" in (folder / "out" / "edits.jsonl").read_text())


def _edit_lora(kind: str, corpus, outcome: Outcome) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    toy = inputs(corpus)
    lora = _fresh(corpus, f"edit-lora-{kind}")
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
    rows = _bad_source_rows(corpus, kind)
    if kind == "/dev/zero":  # the old reader filled memory: in a child with bounded memory
        code = ("import resource, sys\nresource.setrlimit(resource.RLIMIT_AS, (%d, %d))\nfrom "
                "modeling_miescore.cli.main import main\nsys.exit(main(sys.argv[1:]))\n"
                % (CHILD_ADDRESS_SPACE, CHILD_ADDRESS_SPACE))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run([sys.executable, "-c", code, *_edit_argv(corpus, rows, rows.parent / "out")],
                              env=env, capture_output=True, text=True, timeout=300)
        _judge(outcome, done.returncode, done.stderr, None, 2, "bad.png")
        return
    _edit_run(corpus, outcome, _edit_argv(corpus, rows, rows.parent / "out"), "bad.png")


def _edit_offline_editor(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    argv = ["edit", "--pipeline", "flux2-klein", "--model", "nobody/not-cached-editor", "--input", str(toy.rows),
            "--out", str(_fresh(corpus, "edit-offline") / "out"), "--no-progress"]
    with _environment({"HF_HUB_OFFLINE": "1"}):
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


def editor_benchmark_cases() -> list:
    """The editor benchmarks' cases (converters, judges): the ``editor-benchmarks`` entry, kept for them."""
    return []


def editor_cases() -> list:
    """Every case of this module, in a fixed order."""
    return [*trainer_cases(), *edit_cases(), *editor_benchmark_cases()]


__all__ = ["ENTRIES", "EditorInputs", "edit_cases", "editor_benchmark_cases", "editor_cases", "inputs",
           "trainer_cases", "truncated_png"]
