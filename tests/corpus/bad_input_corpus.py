"""The bad-input corpus: every bad input of ``testing.bad_inputs`` through the Python API, ``miescore score``,
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
or Ghostscript ran. ``benchmarks/bad_input_table.py`` prints the table; ``tests/test_bad_input_corpus.py``
asserts every case is clean.
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

from ..utils.markdown_table import markdown_table
from .bad_inputs import BadInput, image_bytes, install_fake_ghostscript, release_fifo, write_good_images
from .tampered_checkpoint import tamper_checkpoint

ENTRIES = ("api", "cli", "score-batch", "server")
COLUMNS = ("traceback", "wrong_status", "unclear_message", "hang", "data_lost", "code_ran")
GOOD_INSTRUCTION = "make the sky blue"


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
    run: Callable[["Corpus", Outcome], None]
    timeout: float | None = None  # seconds before it counts as a hang (None: the corpus's)


def check_message(outcome: Outcome, text: str, needle: str | None = None, avoid: str | None = None) -> None:
    """Flag *unclear message* when ``text`` lacks ``needle`` or contains ``avoid`` (case-insensitive)."""
    lowered = text.lower()
    if (needle and needle.lower() not in lowered) or (avoid and avoid.lower() in lowered):
        outcome.flag("unclear_message")


def run_bounded(fn: Callable[[], None], timeout: float, fifos: list[Path]) -> bool:
    """Run ``fn`` on a thread; True when it is still running after ``timeout`` (FIFOs are then released)."""
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
        for fifo in fifos:
            release_fifo(fifo)
        thread.join(1.0)
    if errors:
        raise errors[0]
    return hung


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


@contextlib.contextmanager
def captured_output():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


def run_cli(argv: list, outcome: Outcome) -> tuple[int | None, str, str]:
    """``miescore <argv>`` in this process: ``(exit status or None after an exception, stdout, stderr)``."""
    from ..cli.main import main

    with captured_output() as (out, err):
        try:
            status = main([str(a) for a in argv])
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else 2
        except Exception as error:  # noqa: BLE001 - what a user would see as a traceback
            outcome.flag("traceback")
            print(f"{type(error).__name__}: {error}", file=sys.stderr)
            status = None
    if "Traceback (most recent call last)" in err.getvalue():
        outcome.flag("traceback")
    return status, out.getvalue(), err.getvalue()


def post_json(url: str, body, timeout: float) -> tuple[int, str]:
    import httpx

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
    from .tiny_models import build_tiny_miescore

    return build_tiny_miescore(path, **CORPUS_CHECKPOINT)


class Corpus:
    """Builds the inputs in ``folder`` once and lists the cases; ``model`` is a loaded tiny MIEScore scorer and
    ``model_path`` its checkpoint (copied into a tampered checkpoint for item 1)."""

    def __init__(self, folder, model, model_path, timeout: float = 60.0):
        self.folder, self.model, self.model_path, self.timeout = Path(folder), model, Path(model_path), timeout
        self.folder.mkdir(parents=True, exist_ok=True)
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

    def run(self, case: Case) -> Outcome:
        outcome = Outcome(case.entry, case.name, case.item)
        if self.ghostscript_marker.exists():
            self.ghostscript_marker.unlink()
        self.tampered.reset()
        try:
            outcome.flag("hang", run_bounded(lambda: case.run(self, outcome), case.timeout or self.timeout,
                                             self.fifos))
        except Exception as err:  # noqa: BLE001 - escaped the case's own handling: reported, the run goes on
            outcome.flag("traceback")
            outcome.message = f"the case raised {type(err).__name__}: {err}"
        outcome.flag("code_ran", self.ghostscript_marker.exists())
        return outcome

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


__all__ = ["COLUMNS", "CORPUS_CHECKPOINT", "Case", "Corpus", "build_corpus_checkpoint", "ENTRIES", "Outcome", "summary_table"]
