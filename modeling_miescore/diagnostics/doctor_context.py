"""What the checks of ``miescore doctor`` share: the checkpoint, what has been loaded so far, the scored edits.

A check is a function ``check(ctx: DoctorContext) -> Finding``; :func:`ok`, :func:`warn`, :func:`error` and
:func:`skip` build findings. A check that needs something an earlier check failed to load calls
:meth:`DoctorContext.need`, which raises :class:`CheckSkipped` (the runner records a ``skip``), so one broken
part is reported once, by the check that found it.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATUSES = ("ok", "warn", "error", "skip")


@dataclass
class Finding:
    """What one check found: ``status`` (one of :data:`STATUSES`), a one-line ``message`` and ``details``."""

    status: str
    message: str
    details: dict = field(default_factory=dict)


def ok(message: str, **details) -> Finding:
    return Finding("ok", message, details)


def warn(message: str, **details) -> Finding:
    return Finding("warn", message, details)


def error(message: str, **details) -> Finding:
    return Finding("error", message, details)


def skip(message: str, **details) -> Finding:
    return Finding("skip", message, details)


class CheckSkipped(Exception):
    """A check cannot run because something it needs did not load; the message says what and where."""


# what DoctorContext.need(name) waits for -> the check that provides it
_PROVIDERS = {"config": "config_processor", "processor": "config_processor", "model": "load"}


class DoctorContext:
    """The state the checks of one run share.

    Attributes:
        path / kind: the checkpoint folder and ``"miescore"`` or ``"spatialreward"``.
        device / dtype: where and in which torch dtype the model runs (``dtype_name``: e.g. ``"float32"``).
        quick / fresh_process / trust_remote_code: the run's options (``trust_remote_code``: the fresh process
            loads with the checkpoint's own code, as a stranger would). workdir: a temporary folder for images.
        faults: ``{check name: message}`` of the checks that gave an error so far (later checks that would only
            repeat one, such as the perturbation directions of constant scores, skip).
        config / processor / model: set by the checks that load them (None until then, or when they failed).
        fresh: what the fresh-process load scored (``{"records", "result", "batch_size"}``), when it ran.
    """

    def __init__(self, path, kind: str, device: str, dtype, quick: bool = False, fresh_process: bool = True,
                 model=None, trust_remote_code: bool = False):
        self.path, self.kind, self.device, self.dtype = Path(path), kind, device, dtype
        self.dtype_name = str(dtype).removeprefix("torch.")
        self.quick, self.fresh_process, self.trust_remote_code = quick, fresh_process, trust_remote_code
        self.faults: dict = {}
        self.config = self.processor = None
        self.model, self.given_model = model, model is not None
        self.fresh: dict | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="miescore-doctor-")
        self.workdir = Path(self._workdir.name)
        self._edits = None
        self._scores: list | None = None
        self._scoring_error: str | None = None

    def prepare(self) -> None:
        """Make the example edits (``edit_perturbations.doctor_edits``) unless made: the runner calls it before any
        check, so a missing scikit-image is one user error (``MIEScoreInputError``), not a failure of every check
        that scores."""
        if self._edits is None:
            from .edit_perturbations import doctor_edits

            self._edits = doctor_edits(quick=self.quick)

    def close(self) -> None:
        self._workdir.cleanup()

    def need_sound(self, *checks: str) -> None:
        """Raise :class:`CheckSkipped` when one of ``checks`` gave an error (its result already says what is
        wrong, and what follows from it would only repeat it)."""
        for name in checks:
            if name in self.faults:
                raise CheckSkipped(f"not meaningful after the error of '{name}' ({self.faults[name][:120]})")

    def need(self, *names: str) -> None:
        """Raise :class:`CheckSkipped` when one of ``names`` (``config``, ``processor``, ``model``) is missing."""
        for name in names:
            if getattr(self, name) is None:
                raise CheckSkipped(f"needs the {name}, which did not load (see '{_PROVIDERS[name]}')")

    @property
    def edits(self) -> list:
        """The edits every score check uses, originals first."""
        self.prepare()
        return self._edits

    def originals(self) -> list:
        return [edit for edit in self.edits if edit.variant == "original"]

    def score(self, samples: list, batch_size: int = 8) -> list:
        """MIEScore: ``score_batch``'s dicts; SpatialReward: ``evaluate_edits``' results."""
        self.need("model")
        if self.kind == "miescore":
            return self.model.score_batch(samples, batch_size=batch_size)
        return self.model.evaluate_edits(samples, batch_size=batch_size)

    def scores(self) -> list:
        """The outputs for :attr:`edits`, in order; scored once, by the first check that asks."""
        self.need("model")
        if self._scoring_error is not None:
            raise CheckSkipped(f"scoring the example edits failed ({self._scoring_error})")
        if self._scores is None:
            try:
                self._scores = self.score([edit.as_sample() for edit in self.edits])
            except Exception as err:
                self._scoring_error = f"{type(err).__name__}: {err}"
                raise
        return self._scores

    def scores_by(self, value) -> dict:
        """``{(example, variant): value(output)}`` over the scored edits."""
        pairs = zip(self.edits, self.scores(), strict=True)
        return {(edit.example, edit.variant): value(output) for edit, output in pairs}


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, non-finite floats as strings (``"nan"``) and other objects as ``str``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


__all__ = ["CheckSkipped", "DoctorContext", "Finding", "STATUSES", "error", "jsonable", "ok", "skip", "warn"]
