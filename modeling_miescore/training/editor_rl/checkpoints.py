"""Checkpoints of an editor-RL run and ``--resume``: complete or absent, safetensors + JSON only (nothing is
unpickled on resume).

``output_dir/checkpoint-<step>/`` holds ``trainable.safetensors`` (the trained parameters by name),
``optimizer.safetensors`` + ``optimizer.json`` (the optimizer's tensors and its param groups / scalars),
``trainer_state.json`` (step, LR-scheduler state, Python/NumPy RNG states, EMA step) and, per process,
``rng-<rank>.safetensors`` (torch CPU / CUDA RNG). It is written into a temporary folder that is renamed into
place only when every file is there, so a kill leaves the previous checkpoint as the last complete one.

``output_dir/run.json`` names the run (:data:`~.config.RUN_IDENTITY_FIELDS`, at its top level) and records its
settings (``settings``, credentials masked), the settings changed on each resume (``resumes``: the
:data:`~.config.RESUMABLE_FIELDS` only) and how the run samples (``"sampling"``, :mod:`.outputs`). Resuming a
folder of another run is refused with every difference listed, and so is starting a new run over an existing one
without ``overwrite_output_dir``. ``--resume_from_checkpoint PATH`` resumes from an earlier checkpoint of the run
(:func:`resolve_checkpoint`; the later ones are dropped, :func:`drop_checkpoints_after`).

**Damage.** Before a resume loads anything, ``run.json``, ``metrics.jsonl`` and every file of the checkpoint it
resumes from are checked (:func:`check_checkpoint_files`): readable JSON of the right shape, safetensors headers
that read, a step that matches the folder's name, RNG states of the right form, a checkpoint folder that belongs
to this run (not a link to another one). Damage is one :class:`CheckpointDamage` line naming the file and what to
do (exit status 2 from the recipe). What only the model can tell (a tensor of another shape, a trained parameter
missing) is checked when it is loaded, with the same error.

**A failed write** (a full disk, a quota, a read-only folder) while a checkpoint is written removes the partial
folder and raises :class:`RunWriteError` naming the file and the last complete checkpoint (exit status 1); rerun
with ``--resume`` once there is room.

:class:`TrainerResume` (a mixin of :class:`~.trainer.FlowGRPOEditorTrainer`): the trained parameters by name (the
full tensors of a sharded transformer), checked against a checkpoint's and loaded from it with the optimizer, the
LR schedule and the EMA, and the run folder cut back to the checkpoint's step.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from ...hub.errors import MIEScoreInputError
from ...utils.atomic_files import write_text_atomic
from .config import RESUMABLE_FIELDS

__all__ = ["CHECKPOINT_PATTERN", "RUN_FILE", "CheckpointDamage", "RunWriteError", "check_checkpoint_files",
           "check_run_folder", "checkpoint_folders", "checkpoint_step", "drop_checkpoints_after", "latest_checkpoint", "load_checkpoint",
           "read_run_file", "record_resume", "resolve_checkpoint", "run_writes", "save_checkpoint",
           "truncate_metrics", "update_run_record", "write_run_file", "TrainerResume"]

# the trainer's log: the mixin below logs as the trainer
logger = logging.getLogger(__name__.rsplit(".", 1)[0] + ".trainer")


class CheckpointDamage(MIEScoreInputError):
    """A file of a run folder that a resume cannot use; the message names it and what to do."""

    def __init__(self, path, problem: str, fix: str = ""):
        path = Path(path)
        fix = fix or (f"remove the folder '{path.parent}' to resume from the checkpoint before it, or start over "
                      "with --overwrite_output_dir" if CHECKPOINT_PATTERN.match(path.parent.name) else
                      "start over with --overwrite_output_dir (or another output_dir)")
        super().__init__(f"--resume: '{path}' {problem}; {fix}")


class RunWriteError(RuntimeError):
    """Writing a run's file failed (a full disk, a quota, a read-only folder): the run stopped cleanly."""


@contextlib.contextmanager
def run_writes(what: str, output_dir):
    """Turn an ``OSError`` or a ``SafetensorError`` (safetensors' own I/O error) while writing ``what`` into one
    :class:`RunWriteError` that names it, its reason and the checkpoint a ``--resume`` continues from."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, SafetensorError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        last = latest_checkpoint(output_dir)
        resume = f"the last complete checkpoint is '{last.name}'" if last else "no checkpoint was written yet"
        raise RunWriteError(f"cannot write {what} ({reason}); {resume}: free some space (or fix the folder's "
                            "permissions), then rerun with --resume") from None

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
RUN_FILE = "run.json"
# what a run writes besides its checkpoints, removed with them on an overwrite (so a new run that stops early never
# leaves the old run's adapter beside its own checkpoints)
RUN_OUTPUTS = ("metrics.jsonl", "samples", "rollouts", "pytorch_lora_weights.safetensors", "README.md", "transformer",
               "transformer.safetensors", "evals.jsonl", "eval_curves.png")


def checkpoint_folders(output_dir) -> List[Path]:
    """The ``checkpoint-<step>`` entries of ``output_dir`` (complete or not), by step."""
    return sorted((c for c in Path(output_dir).glob("checkpoint-*") if CHECKPOINT_PATTERN.match(c.name)),
                  key=checkpoint_step)


def latest_checkpoint(output_dir) -> Optional[Path]:
    """The complete checkpoint with the highest step, or None."""
    return next((c for c in reversed(checkpoint_folders(output_dir)) if (c / "trainer_state.json").is_file()), None)


def checkpoint_step(path) -> int:
    """The step of a ``checkpoint-<step>`` folder."""
    return int(CHECKPOINT_PATTERN.match(Path(path).name).group(1))


def resolve_checkpoint(output_dir, target: str) -> Path:
    """The complete checkpoint of ``output_dir`` that ``--resume_from_checkpoint target`` names (a path, or a bare
    ``checkpoint-N``); one :class:`MIEScoreInputError` when it is incomplete, missing or another folder's."""
    out = Path(output_dir)
    path = Path(target).expanduser()
    if len(path.parts) == 1 and not path.exists():
        path = out / path  # diffusers' scripts take the name inside output_dir
    there = [c.name for c in checkpoint_folders(out)]
    if not (CHECKPOINT_PATTERN.match(path.name) and (path / "trainer_state.json").is_file()):
        raise MIEScoreInputError(f"--resume_from_checkpoint {target}: not a complete checkpoint folder "
                                 f"(checkpoint-N with trainer_state.json); the checkpoints of '{out}': "
                                 f"{', '.join(there) or 'none'} (or pass latest)")
    if path.resolve().parent != out.resolve():
        raise MIEScoreInputError(f"--resume_from_checkpoint {target} is a checkpoint of '{path.parent}', not of "
                                 f"output_dir '{out}'; pass --output_dir {path.parent} to continue that run")
    check_checkpoint_files(path, out)
    return path


def _read_json(path: Path, kind: type, what: str) -> Any:
    """``path``'s JSON, which must be a ``kind`` (dict or list); else :class:`CheckpointDamage`."""
    if not path.is_file():
        raise CheckpointDamage(path, "is missing" if not path.exists() else "is not a file")
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as error:
        raise CheckpointDamage(path, f"is not readable JSON ({str(error)[:120]})") from None
    if not isinstance(value, kind):
        raise CheckpointDamage(path, f"holds a JSON {type(value).__name__}, not the {what} it should hold")
    return value


def check_run_folder(output_dir, identity: dict, *, resume: Optional[str], overwrite: bool, is_main: bool,
                     settings: Optional[dict] = None, record: Optional[dict] = None) -> Tuple[Optional[Path], bool]:
    """Check ``output_dir`` against the run (module docstring); returns ``(checkpoint to resume from or None,
    whether an existing run continues)``. ``resume``: None (a fresh run), ``"latest"`` or a checkpoint path; a
    folder without a run is refused either way (diffusers' scripts start a new run there, so a mistyped
    ``output_dir`` would silently train from scratch). The main process writes ``run.json`` for a fresh run:
    ``identity``, ``settings`` (the run's settings to record) and ``record`` (what else the run keeps there,
    e.g. how it samples)."""
    out = Path(output_dir)
    run_file = out / RUN_FILE
    if resume:
        if not run_file.exists():
            raise MIEScoreInputError(f"--resume: '{out}' holds no run ({RUN_FILE} missing); check --output_dir, or "
                                     "start the run without --resume / --resume_from_checkpoint")
        stored = _read_json(run_file, dict, "run's identity (an object)")
        differs = sorted(k for k in identity if stored.get(k) != identity[k])
        if differs:
            shown = "; ".join(f"{k}: {stored.get(k)!r} there, {identity[k]!r} now" for k in differs)
            raise MIEScoreInputError(f"--resume: '{out}' belongs to another run ({len(differs)} setting(s) differ: "
                                     f"{shown}); resume with that run's settings or pick a new output_dir")
        metrics = out / "metrics.jsonl"
        if metrics.exists() and not metrics.is_file():
            raise CheckpointDamage(metrics, "is not a file")
        if resume != "latest":
            return resolve_checkpoint(out, resume), True
        checkpoint = latest_checkpoint(out)
        if checkpoint is not None:
            check_checkpoint_files(checkpoint, out)
        return checkpoint, True
    if run_file.exists() and not overwrite:
        raise MIEScoreInputError(f"'{out}' already holds a run; pass --resume_from_checkpoint latest (or --resume) "
                                 "to continue it, --overwrite_output_dir to start over, or another --output_dir")
    if is_main:
        if run_file.exists():
            for child in out.iterdir():
                if CHECKPOINT_PATTERN.match(child.name) or child.name in RUN_OUTPUTS:
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        write_run_file(out, {**identity, "settings": settings or {}, "resumes": [], **(record or {})})
    return None, False


def drop_checkpoints_after(output_dir, step: int) -> List[str]:
    """Remove the checkpoints of ``output_dir`` after ``step`` (a resume from an earlier checkpoint abandons
    them, as it drops their metrics); returns their names."""
    dropped = [c for c in checkpoint_folders(output_dir) if checkpoint_step(c) > step]
    for child in dropped:
        shutil.rmtree(child)
    return [c.name for c in dropped]


def read_run_file(output_dir) -> Optional[dict]:
    """``output_dir/run.json`` as a dict, or None when there is none."""
    path = Path(output_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MIEScoreInputError(f"'{path}' is not readable JSON ({err}); it is written by the trainer") from None


def record_resume(output_dir, settings: dict, resumable: tuple, step: int) -> None:
    """After a resume from ``step`` has loaded: append the ``resumable`` settings that changed to ``run.json``'s
    ``resumes`` (and say so in the log)."""
    stored = _read_json(Path(output_dir) / RUN_FILE, dict, "run's identity (an object)")
    before = stored.get("settings") or {}
    unrecorded = ("resume", "overwrite_output_dir", "output_dir")  # how this start was asked for, where the run is
    changed = {k: [before.get(k), settings.get(k)] for k in resumable
               if k in before and before.get(k) != settings.get(k) and k not in unrecorded}
    if not changed:
        return
    logging.getLogger(__name__).info("resuming from step %d with changed settings: %s", step,
                                     ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in changed.items()))
    resumes = stored.get("resumes") if isinstance(stored.get("resumes"), list) else []
    write_run_file(output_dir, {**stored, "settings": {**before, **settings},
                                "resumes": [*resumes, {"step": step, "changed": changed}]})


def write_run_file(output_dir, record: dict) -> None:
    """``output_dir/run.json`` = ``record`` (atomically; a failed write is a :class:`RunWriteError`)."""
    with run_writes(RUN_FILE, output_dir):
        write_text_atomic(Path(output_dir) / RUN_FILE, json.dumps(record, indent=2, default=str) + "\n")


def update_run_record(output_dir, **values) -> None:
    """Set top-level ``values`` of ``output_dir/run.json`` (atomically)."""
    write_run_file(output_dir, {**(read_run_file(output_dir) or {}), **values})


def _tensor_header(path: Path) -> Dict[str, tuple]:
    """``{name: shape}`` from a safetensors file's header (nothing else is read, nothing unpickled)."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise CheckpointDamage(path, "is missing" if not path.exists() else "is not a file")
    try:
        with safe_open(str(path), framework="pt") as handle:
            return {name: tuple(handle.get_slice(name).get_shape()) for name in handle.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointDamage(path, f"is not a readable safetensors file ({str(error)[:160]}); it is truncated, "
                                     "empty or not safetensors (nothing of it was unpickled)") from None


def _check_state(path: Path, state: dict, step: int) -> None:
    """``trainer_state.json``'s values (module docstring)."""
    if state.get("step") != step or isinstance(state.get("step"), bool):
        raise CheckpointDamage(path, f"says step {state.get('step')!r}, but its folder is checkpoint-{step}")
    python_rng, numpy_rng = state.get("python_rng"), state.get("numpy_rng")
    if not (isinstance(python_rng, list) and len(python_rng) == 3 and isinstance(python_rng[1], list)
            and len(python_rng[1]) == 625 and all(isinstance(v, int) for v in python_rng[1])):
        raise CheckpointDamage(path, "holds no valid Python RNG state (python_rng)")
    if not (isinstance(numpy_rng, list) and len(numpy_rng) == 5 and isinstance(numpy_rng[1], list)
            and len(numpy_rng[1]) == 624):
        raise CheckpointDamage(path, "holds no valid NumPy RNG state (numpy_rng)")
    if not isinstance(state.get("lr_scheduler"), dict):
        raise CheckpointDamage(path, "holds no learning-rate scheduler state (lr_scheduler)")
    ema_step = state.get("ema_step")
    if ema_step is not None and (not isinstance(ema_step, int) or isinstance(ema_step, bool) or ema_step < 0):
        raise CheckpointDamage(path, f"holds an EMA step {ema_step!r}, not a count")


def check_checkpoint_files(checkpoint, output_dir) -> None:
    """Every file a resume from ``checkpoint`` reads, checked without loading tensors (module docstring)."""
    path, out = Path(checkpoint), Path(output_dir)
    if path.is_symlink() or path.resolve().parent != out.resolve():
        raise CheckpointDamage(path / "trainer_state.json", f"belongs to another folder (it resolves to "
                               f"'{path.resolve()}'): a run resumes only from its own checkpoints",
                               f"remove the link '{path}'")
    step = int(CHECKPOINT_PATTERN.match(path.name).group(1))
    state = _read_json(path / "trainer_state.json", dict, "trainer state (an object)")
    _check_state(path / "trainer_state.json", state, step)
    meta = _read_json(path / "optimizer.json", dict, "optimizer's settings (an object)")
    if not isinstance(meta.get("param_groups"), list) or not isinstance(meta.get("scalars"), dict):
        raise CheckpointDamage(path / "optimizer.json", "has no param_groups list and scalars object")
    for name in ("trainable.safetensors", "optimizer.safetensors"):
        if not _tensor_header(path / name) and name == "trainable.safetensors":
            raise CheckpointDamage(path / name, "holds no tensors")
    if state.get("ema_step") is not None:
        _tensor_header(path / "ema.safetensors")
    for rng_file in path.glob("rng-*.safetensors"):
        _tensor_header(rng_file)


def _optimizer_files(state: dict):
    """An optimizer state dict (parameters keyed by index, or by name for FSDP full state dicts) as tensors and
    JSON: ``"<param>.<name>"`` keys."""
    tensors, scalars = {}, {}
    for index, entries in state["state"].items():
        for name, value in entries.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"{index}.{name}"] = value
    return tensors, {"param_groups": state["param_groups"], "scalars": scalars}


def _optimizer_state(tensors: Dict[str, torch.Tensor], meta: dict) -> dict:
    """The optimizer state dict of :func:`_optimizer_files`' output; every parameter of the groups must have the
    same entries (a ``KeyError`` / ``ValueError`` otherwise, turned into a :class:`CheckpointDamage`)."""
    state: dict = {}
    for key, value in list(tensors.items()) + list(meta["scalars"].items()):
        param, name = key.rsplit(".", 1)
        state.setdefault(int(param) if param.isdigit() else param, {})[name] = value
    groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g for g in meta["param_groups"]]
    params = [p for g in groups for p in g["params"]]
    kinds = {frozenset(state[p]) if p in state else frozenset() for p in params}
    if state and len(kinds) != 1:
        raise ValueError(f"the parameters' states differ in their entries ({len(kinds)} kinds): some are missing")
    return {"state": state, "param_groups": groups}


def _check_optimizer_shapes(optimizer) -> None:
    """Each loaded state tensor has its parameter's shape (``torch`` does not check; the first step would fail)."""
    for group in optimizer.param_groups:
        for param in group["params"]:
            for name, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                    raise ValueError(f"state {name!r} has shape {tuple(value.shape)} for a parameter of shape "
                                     f"{tuple(param.shape)}")


def _rng_tensors() -> Dict[str, torch.Tensor]:
    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state()
    return out


def save_checkpoint(output_dir, step: int, *, trainable: Dict[str, torch.Tensor], optimizer, lr_scheduler,
                    ema_state: Optional[dict] = None, rank: int = 0, is_main: bool = True,
                    every: Callable[[object], list] = lambda value: [value]) -> Path:
    """Write ``checkpoint-<step>`` atomically (module docstring); every process calls it. ``every(value)``: every
    process's ``value`` in process order (a collective: it also syncs them); after each stage the processes agree on
    whether a write failed anywhere, and all stop with that process's :class:`RunWriteError` (one process's full disk
    never leaves the others waiting). ``optimizer``: the optimizer, or its (full) state dict on the main process."""
    from safetensors.torch import save_file

    out = Path(output_dir)
    final = out / f"checkpoint-{step}"
    staging = out / f".checkpoint-{step}.partial"
    state: dict = {}

    def prepare():
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(parents=True)

    def write():
        save_file(_rng_tensors(), str(staging / f"rng-{rank}.safetensors"))
        if is_main:
            state.update(_write_main_files(staging, step, trainable, optimizer, lr_scheduler, ema_state))

    def finish():
        if is_main:
            (staging / "trainer_state.json").write_text(json.dumps(state, default=float))
            shutil.rmtree(final, ignore_errors=True)
            staging.rename(final)

    try:
        for stage in (prepare, write, finish):
            _agreed_stage(stage, f"checkpoint-{step}", out, every)
    except BaseException:  # a failed write or a Ctrl-C: nothing half-written stays (the last one is intact)
        if is_main:
            shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _agreed_stage(stage: Callable[[], None], what: str, out: Path, every: Callable[[object], list]) -> None:
    """Run ``stage`` on this process, then learn from ``every`` whether it failed on any process: raise the first
    failing process's :class:`RunWriteError` (with ``[process R of N]`` on several processes) on all of them."""
    failure = None
    try:
        with run_writes(what, out):
            stage()
    except RunWriteError as error:
        failure = str(error)
    told = every(failure)
    failed = [(rank, message) for rank, message in enumerate(told) if message]
    if failed:
        rank, message = failed[0]
        raise RunWriteError(message if len(told) == 1 else f"{message} [process {rank} of {len(told)}]")


def _write_main_files(staging: Path, step: int, trainable, optimizer, lr_scheduler, ema_state) -> dict:
    """The main process's files of a checkpoint; returns the trainer state to write last."""
    from safetensors.torch import save_file

    save_file({k: v.detach().cpu().contiguous() for k, v in trainable.items()}, str(staging / "trainable.safetensors"))
    tensors, meta = _optimizer_files(optimizer if isinstance(optimizer, dict) else optimizer.state_dict())
    save_file(tensors, str(staging / "optimizer.safetensors"))
    (staging / "optimizer.json").write_text(json.dumps(meta))
    if ema_state is not None:
        save_file(ema_state["shadow"], str(staging / "ema.safetensors"))
    py_state = random.getstate()
    return {"step": step, "lr_scheduler": lr_scheduler.state_dict(),
            "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
            "numpy_rng": [v.tolist() if isinstance(v, np.ndarray) else v for v in np.random.get_state()],
            "ema_step": None if ema_state is None else ema_state["step"]}


@contextlib.contextmanager
def _damage_of(path: Path, what: str):
    """An error while restoring ``what`` from ``path`` -> :class:`CheckpointDamage` naming both."""
    try:
        yield
    except CheckpointDamage:
        raise
    except (ValueError, KeyError, TypeError, IndexError, RuntimeError, OverflowError) as error:
        raise CheckpointDamage(path, f"does not hold a usable {what} ({type(error).__name__}: "
                               f"{str(error)[:160]})") from None


def load_checkpoint(checkpoint, *, optimizer, lr_scheduler, rank: int = 0) -> dict:
    """Restore the optimizer, scheduler and RNG states from ``checkpoint``; returns ``{"step", "trainable",
    "ema"}`` (the caller loads the trained parameters and the EMA). ``optimizer``: the optimizer, or a function
    that loads its state dict (FSDP)."""
    path = Path(checkpoint)
    state_file = path / "trainer_state.json"
    state = _read_json(state_file, dict, "trainer state (an object)")
    _check_state(state_file, state, int(CHECKPOINT_PATTERN.match(path.name).group(1)))
    load_optimizer = optimizer.load_state_dict if isinstance(optimizer, torch.optim.Optimizer) else optimizer
    with _damage_of(path / "optimizer.safetensors", "optimizer state for this run (with optimizer.json)"):
        load_optimizer(_optimizer_state(_load_tensors(path / "optimizer.safetensors"),
                                        _read_json(path / "optimizer.json", dict, "optimizer's settings")))
        if isinstance(optimizer, torch.optim.Optimizer):
            _check_optimizer_shapes(optimizer)
    with _damage_of(state_file, "learning-rate scheduler state"):
        lr_scheduler.load_state_dict(state["lr_scheduler"])
    with _damage_of(state_file, "Python and NumPy RNG state"):
        version, internal, gauss = state["python_rng"]
        random.setstate((version, tuple(internal), gauss))
        kind, keys, pos, has_gauss, cached = state["numpy_rng"]
        np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    rng_file = path / f"rng-{rank}.safetensors"
    if rng_file.is_file():
        rng = _load_tensors(rng_file)
        with _damage_of(rng_file, "torch RNG state"):
            torch.set_rng_state(rng["torch"])
            if "cuda" in rng and torch.cuda.is_available():
                torch.cuda.set_rng_state(rng["cuda"])
    ema = None
    if state.get("ema_step") is not None:
        ema = {"shadow": _load_tensors(path / "ema.safetensors"), "step": state["ema_step"]}
    return {"step": state["step"], "trainable": _load_tensors(path / "trainable.safetensors", finite=True),
            "ema": ema}


def _load_tensors(path: Path, finite: bool = False) -> Dict[str, torch.Tensor]:
    """A checkpoint's safetensors file (header checked first); ``finite``: every value must be finite."""
    from safetensors.torch import load_file

    _tensor_header(path)
    with _damage_of(path, "set of tensors"):
        tensors = load_file(str(path))
    bad = [name for name, t in tensors.items() if finite and t.is_floating_point() and not torch.isfinite(t).all()]
    if bad:
        raise CheckpointDamage(path, f"holds non-finite values (NaN or inf) in {', '.join(bad[:3])}")
    return tensors


def truncate_metrics(metrics_file, last_step: int) -> None:
    """Drop the lines of ``metrics_file`` for steps after ``last_step`` (and a torn last line): after a resume
    from ``checkpoint-<last_step>`` those steps run again, so none is logged twice. Step 0 (the evals before
    training) is kept unless ``last_step`` is -1 (the run starts over)."""
    path = Path(metrics_file)
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):
            continue  # a torn or damaged line: the steps it held are redone
        step = record.get("step") if isinstance(record, dict) else None
        if isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= last_step:
            kept.append(line)
    with run_writes(path.name, path.parent):
        write_text_atomic(path, "".join(k + "\n" for k in kept))


class TrainerResume:
    """The trained parameters by name and ``--resume`` (module docstring)."""

    def _trainable_names(self) -> List[str]:
        """The names of ``self.params``, in order."""
        names = {id(p): n for n, p in self.raw_model.named_parameters()}
        return [names[id(p)] for p in self.params]

    def _trainable_state(self) -> dict:
        """The trained parameters by name (sharded: their full tensors on the main process; a collective)."""
        if self.sharded:
            from .policy import full_model_state

            full = full_model_state(self.raw_model)
            return {n: full[n] for n in self._trainable_names()} if full else {}
        return {n: p.detach() for n, p in zip(self._trainable_names(), self.params)}

    def _load_trainable(self, state: dict, checkpoint: Path) -> None:
        """The checkpoint's trained parameters: exactly this run's, each of its shape (else the file is named)."""
        named = dict(self.raw_model.named_parameters())
        where = checkpoint / "trainable.safetensors"
        unknown = [n for n in state if n not in named]
        missing = [n for n in self._trainable_names() if n not in state]
        wrong = [f"{n} {tuple(state[n].shape)} (the model's: {tuple(named[n].shape)})" for n in state
                 if n in named and tuple(state[n].shape) != tuple(named[n].shape)]
        for problem, names in (("holds parameters this editor's transformer does not have", unknown),
                               (f"lacks {len(missing)} of this run's {len(self.params)} trained parameters", missing),
                               ("holds tensors of another shape", wrong)):
            if names:
                raise CheckpointDamage(where, f"{problem}: {', '.join(names[:3])}")
        if self.sharded:
            from .policy import load_full_model_state

            return load_full_model_state(self.raw_model, state)
        with torch.no_grad():
            for name, value in state.items():
                named[name].copy_(value.to(named[name].device, named[name].dtype))

    def _load_ema(self, shadow: dict, checkpoint: Path) -> None:
        """The checkpoint's EMA weights of the trained parameters (else ``ema.safetensors`` is named)."""
        missing = [n for n in self._trainable_names() if n not in shadow]
        if missing:
            raise CheckpointDamage(checkpoint / "ema.safetensors", f"lacks {', '.join(missing[:3])}")
        self.ema.shadow_params = [shadow[n].to(p.device) for n, p in zip(self._trainable_names(), self.params)]

    def _resume(self) -> int:
        cfg, main = self.config, self.accelerator.is_main_process
        if self.resume_from is None:
            if self.resuming and main:
                truncate_metrics(self.out / "metrics.jsonl", -1)  # killed before its first checkpoint: start over
                self.rollout_log.truncate(-1)
                logger.info("No checkpoint in %s yet: the run starts again from step 0", self.out)
            return 0
        optimizer = self.optimizer
        if self.sharded:
            from .policy import load_full_optimizer_state

            def optimizer(state):
                load_full_optimizer_state(self.raw_model, self.optimizer, state)
        state = load_checkpoint(self.resume_from, optimizer=optimizer, lr_scheduler=self.lr_scheduler,
                                rank=self.accelerator.process_index)
        self._load_trainable(state["trainable"], self.resume_from)
        if self.ema is not None and state["ema"] is not None:
            self._load_ema(state["ema"]["shadow"], self.resume_from)
            self.ema.optimization_step = state["ema"]["step"]
        self.accelerator.wait_for_everyone()  # every process has read the checkpoint before later ones go
        if main:
            truncate_metrics(self.out / "metrics.jsonl", state["step"])
            self.rollout_log.truncate(state["step"])
            dropped = drop_checkpoints_after(self.out, state["step"])
            record_resume(self.out, self.config.public_dict(), RESUMABLE_FIELDS, state["step"])
            logger.info("Resuming from %s (step %d of %d)%s", self.resume_from.name, state["step"], cfg.max_steps,
                        f"; dropped the later {', '.join(dropped)}" if dropped else "")
        return state["step"]
