"""The bad-input corpus: every bad input of :mod:`.bad_inputs` through the Python API, ``miescore score``,
``miescore score-batch`` and the reward server, each run observed and classified.

A case is *clean* when it ends with the documented status and nothing else went wrong:

* API: ``MIEScoreInputError`` (or the scores, for a well-formed but tampered checkpoint); any other exception
  is a traceback.
* ``miescore score``: exit status 2, one line on stderr, nothing on stdout; an exception out of ``main`` (or
  "Traceback" on stderr) is a traceback.
* ``miescore score-batch`` (input: good line, bad line, good line; run twice): exit status 1, the bad line named
  as "line 2", the two good lines in the output, and the rerun reports the same and duplicates nothing (else
  *data lost* / *wrong status*). Errors about the run itself (a FIFO as ``--input``...) exit 2 and write nothing.
* server: the documented 4xx status; a 5xx is a traceback; a good request right after must still be scored
  (else *data lost*).

Besides: *unclear message* when the error lacks the case's needle (or contains its ``avoid`` text), *hang* when
the run is not over within the timeout (a FIFO is then released), *code ran* when a tampered checkpoint's code
or Ghostscript ran, *secrets copied* when a run wrote ``/etc/passwd`` or the environment into a file (issue 41's
groups: ``corpus.bad_input_export``). Both corpora run their cases with :class:`CaseRunner`.
``benchmarks/bad_input_table.py`` prints the table; ``tests/corpus/test_bad_input_corpus.py`` asserts every case is
clean.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx

from modeling_miescore.cli.main import main
from modeling_miescore.testing import build_tiny_miescore
from modeling_miescore.utils.markdown_table import markdown_table

from .bad_inputs import BadInput, image_bytes, install_fake_ghostscript, release_fifo, write_good_images
from .tampered_checkpoint import tamper_checkpoint

ENTRIES = ("api", "cli", "score-batch", "server")
COLUMNS = ("traceback", "wrong_status", "unclear_message", "hang", "data_lost", "code_ran", "secrets_copied")
GOOD_INSTRUCTION = "make the sky blue"
# credentials the cases hand to commands; none may be printed or written
SECRET_KEY, SECRET_PASSWORD = "sk-corpus-secret-1234", "hunter2-corpus"


@dataclass
class Outcome:
    """What one case did; ``clean`` when none of :data:`COLUMNS` is set."""

    entry: str
    case: str
    item: str
    expected: str = ""
    got: str = ""
    message: str = ""
    flags: dict = field(default_factory=dict)

    def flag(self, name: str, value: bool = True) -> None:
        if value:
            self.flags[name] = True

    @property
    def clean(self) -> bool:
        return not self.flags

    def describe(self) -> str:
        problems = ", ".join(self.flags) or "clean"
        message = " | ".join(self.message.split("\n"))[:300]
        return f"[{self.entry}] {self.case} (item {self.item}): {problems}; expected {self.expected}, got {self.got}" \
               f"{'; ' + message if message else ''}"


@dataclass
class Case:
    entry: str
    name: str
    item: str
    run: Callable[["CaseRunner", Outcome], None]
    timeout: float | None = None  # seconds before it counts as a hang (None: the runner's)


def check_message(outcome: Outcome, text: str, needle: str | None = None, avoid: str | None = None) -> None:
    """Flag *unclear message* when ``text`` lacks ``needle`` or contains ``avoid`` (case-insensitive)."""
    lowered = text.lower()
    if (needle and needle.lower() not in lowered) or (avoid and avoid.lower() in lowered):
        outcome.flag("unclear_message")


def run_bounded(fn: Callable[[], None], timeout: float, release: Callable[[], None] = lambda: None) -> bool:
    """Run ``fn`` on a thread; True when it is still running after ``timeout`` (``release()`` is then called every
    second until it ends: it frees what the run blocks on)."""
    errors: list[BaseException] = []

    def target():
        try:
            fn()
        except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread below
            errors.append(err)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    hung = thread.is_alive()
    while thread.is_alive():
        release()
        thread.join(1.0)
    if errors:
        raise errors[0]
    return hung


class CaseRunner:
    """Runs each case on a thread within its timeout (else a *hang*: :meth:`release` frees the run) and reports its
    :class:`Outcome`; a corpus adds what it sets up before a case (:meth:`prepare`) and checks after
    (:meth:`finish`). ``folder`` holds the inputs."""

    def __init__(self, folder, timeout: float):
        self.folder, self.timeout = Path(folder), float(timeout)
        self.folder.mkdir(parents=True, exist_ok=True)

    def run(self, case: Case) -> Outcome:
        outcome = Outcome(case.entry, case.name, case.item)
        self.prepare()
        try:
            outcome.flag("hang", run_bounded(lambda: case.run(self, outcome), case.timeout or self.timeout,
                                             self.release))
        except Exception as err:  # noqa: BLE001 - escaped the case's own handling: reported, the run goes on
            outcome.flag("traceback")
            outcome.message += f" (the case raised {type(err).__name__}: {err})"
        self.finish(outcome)
        return outcome

    def prepare(self) -> None:
        """Before each case."""

    def release(self) -> None:
        """Free a case still running past its timeout."""

    def finish(self, outcome: Outcome) -> None:
        """After each case."""


def edit_with(bad: BadInput, folder: Path) -> tuple[list, object, object]:
    """``(sources, edited, instruction)`` of a good edit with ``bad`` in its role."""
    good = {name: folder / name for name in ("a.png", "b.png", "e.png")}
    sources, edited, instruction = [good["a.png"], good["b.png"]], good["e.png"], GOOD_INSTRUCTION
    value = bad.make(folder)
    if bad.role == "edited":
        edited = value
    elif bad.role == "source":
        sources = [good["a.png"], value]
    elif bad.role == "instruction":
        instruction = value
    else:
        sources, edited = value
    return sources, edited, instruction


def in_process(call) -> tuple:
    """``(exit status or None, stdout, stderr, escaped exception or None)`` of ``call()`` with its output captured
    (a ``SystemExit`` gives its status; any other exception is what a user would see as a traceback)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status, escaped = call(), None
        except SystemExit as exit_:
            status, escaped = exit_.code if isinstance(exit_.code, int) else 2, None
        except BaseException as error:  # noqa: BLE001 - a traceback for the user (KeyboardInterrupt included)
            status, escaped = None, error
    return status, out.getvalue(), err.getvalue(), escaped


def run_cli(argv: list, outcome: Outcome) -> tuple[int | None, str, str]:
    """``miescore <argv>`` in this process: ``(exit status or None after an exception, stdout, stderr)``."""
    status, out, err, escaped = in_process(lambda: main([str(a) for a in argv]))
    if escaped is not None:
        err += f"{type(escaped).__name__}: {escaped}\n"
    outcome.flag("traceback", escaped is not None or "Traceback (most recent call last)" in err)
    return status, out, err


def post_json(url: str, body, timeout: float) -> tuple[int, str]:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    try:
        response = httpx.post(f"{url}/v1/score", content=data, headers={"content-type": "application/json"},
                              timeout=timeout)
    except httpx.TimeoutException as err:
        raise TimeoutError(str(err)) from None
    return response.status_code, response.text


def b64(path_or_bytes) -> str:
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else image_bytes(path_or_bytes)
    return base64.b64encode(data).decode("ascii")


def hold_output_lock(path: Path) -> subprocess.Popen:
    """A second process that holds ``score-batch``'s output lock on ``path`` until killed."""
    code = ("import sys, time\nfrom modeling_miescore.utils.output_lock import exclusive_output\n"
            f"with exclusive_output({str(path)!r}):\n    print('held', flush=True)\n    time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    holder.stdout.readline()
    return holder


# The corpus's tiny checkpoint: small images and a one-line rubric keep each scoring call short; the corpus is
# about inputs, not scores.
CORPUS_CHECKPOINT = {"min_pixels": 4096, "max_pixels": 131_072, "skill": "Rate the edit."}


def build_corpus_checkpoint(path) -> Path:
    return build_tiny_miescore(path, **CORPUS_CHECKPOINT)


class Corpus(CaseRunner):
    """Builds the inputs in ``folder`` once and lists the cases; ``model`` is a loaded tiny MIEScore scorer and
    ``model_path`` its checkpoint (copied into a tampered checkpoint for item 1)."""

    def __init__(self, folder, model, model_path, timeout: float = 60.0):
        super().__init__(folder, timeout)
        self.model, self.model_path = model, Path(model_path)
        write_good_images(self.folder)
        self.ghostscript_marker = install_fake_ghostscript(self.folder)
        self.tampered = tamper_checkpoint(self.model_path, self.folder / "tampered-checkpoint")
        self.fifos = [self.folder / "pipe.png"]
        self.server = None
        # The tiny model's matrices are too small to gain from intra-op threads; on a shared machine their
        # synchronisation made each forward pass ~8x slower. Restored by close().
        import torch

        self._torch_threads = torch.get_num_threads()
        torch.set_num_threads(1)

    def prepare(self) -> None:
        self.ghostscript_marker.unlink(missing_ok=True)
        self.tampered.reset()

    def release(self) -> None:
        for fifo in self.fifos:
            release_fifo(fifo)

    def finish(self, outcome: Outcome) -> None:
        outcome.flag("code_ran", self.ghostscript_marker.exists())

    def close(self) -> None:
        import torch

        if self.server is not None:
            self.server.stop()
            self.server = None
        torch.set_num_threads(self._torch_threads)


def summary_table(outcomes: list[Outcome], entries=ENTRIES, columns=COLUMNS) -> str:
    """The before/after table: one row per entry point plus a total; columns are counts of cases."""
    header = ["entry point", "cases tried", "clean", *(c.replace("_", " ") for c in columns)]
    rows = []
    entries = dict.fromkeys([*entries, *(o.entry for o in outcomes)])  # the corpus modules' own entries too
    for entry in (*entries, "total"):
        chosen = [o for o in outcomes if entry in (o.entry, "total")]
        rows.append([entry, str(len(chosen)), str(sum(o.clean for o in chosen)),
                     *(str(sum(bool(o.flags.get(c)) for o in chosen)) for c in columns)])
    return markdown_table(header, rows, pad=True)


__all__ = ["COLUMNS", "CORPUS_CHECKPOINT", "Case", "CaseRunner", "Corpus", "build_corpus_checkpoint", "ENTRIES",
           "Outcome", "in_process", "run_bounded", "run_cli", "summary_table"]
