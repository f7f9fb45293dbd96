"""Checkpoints of an editor-RL run: complete or absent, safetensors + JSON only (nothing is unpickled on resume).

``output_dir/checkpoint-<step>/`` holds ``trainable.safetensors`` (the trained parameters by name),
``optimizer.safetensors`` + ``optimizer.json`` (the optimizer's tensors and its param groups / scalars),
``trainer_state.json`` (step, LR-scheduler state, Python/NumPy RNG states, EMA step) and, per process,
``rng-<rank>.safetensors`` (torch CPU / CUDA RNG). It is written into a temporary folder that is renamed into
place only when every file is there, so a kill leaves the previous checkpoint as the last complete one.

``output_dir/run.json`` names the run (:data:`~.config.RUN_IDENTITY_FIELDS`) and records how it samples
(``"sampling"``: what ``miescore edit --lora RUN`` reuses, :mod:`.run_record`); resuming a folder of another run
is refused, and so is starting a new run over an existing one without ``overwrite_output_dir``.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import torch

from ...image_io import MIEScoreInputError
from ...utils.atomic_files import write_text_atomic

__all__ = ["CHECKPOINT_PATTERN", "RUN_FILE", "check_run_folder", "checkpoint_step", "drop_checkpoints_after",
           "latest_checkpoint", "load_checkpoint", "read_run_file", "resolve_checkpoint", "save_checkpoint",
           "truncate_metrics"]

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")
RUN_FILE = "run.json"
# what a run writes besides its checkpoints, removed with them on an overwrite (so a new run that stops early never
# leaves the old run's adapter beside its own checkpoints)
RUN_OUTPUTS = ("metrics.jsonl", "samples", "rollouts", "pytorch_lora_weights.safetensors", "README.md", "transformer",
               "transformer.safetensors")


def latest_checkpoint(output_dir) -> Optional[Path]:
    """The complete checkpoint with the highest step, or None."""
    best = None
    for child in Path(output_dir).glob("checkpoint-*"):
        match = CHECKPOINT_PATTERN.match(child.name)
        if match and child.is_dir() and (child / "trainer_state.json").is_file():
            if best is None or int(match.group(1)) > int(CHECKPOINT_PATTERN.match(best.name).group(1)):
                best = child
    return best


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
    there = sorted((c.name for c in out.glob("checkpoint-*") if CHECKPOINT_PATTERN.match(c.name)),
                   key=checkpoint_step)
    if not (CHECKPOINT_PATTERN.match(path.name) and (path / "trainer_state.json").is_file()):
        raise MIEScoreInputError(f"--resume_from_checkpoint {target}: not a complete checkpoint folder "
                                 f"(checkpoint-N with trainer_state.json); the checkpoints of '{out}': "
                                 f"{', '.join(there) or 'none'} (or pass latest)")
    if path.resolve().parent != out.resolve():
        raise MIEScoreInputError(f"--resume_from_checkpoint {target} is a checkpoint of '{path.parent}', not of "
                                 f"output_dir '{out}'; pass --output_dir {path.parent} to continue that run")
    return path


def check_run_folder(output_dir, identity: dict, *, resume: Optional[str], overwrite: bool, is_main: bool,
                     record: Optional[dict] = None) -> Tuple[Optional[Path], bool]:
    """Check ``output_dir`` against the run (module docstring); returns ``(checkpoint to resume from or None,
    whether an existing run continues)``. ``resume``: None (a fresh run), ``"latest"`` or a checkpoint path; a
    folder without a run is refused either way (diffusers' scripts start a new run there, so a mistyped
    ``output_dir`` would silently train from scratch). The main process writes
    ``run.json`` for a fresh run: ``identity`` plus ``record`` (what else the run wants kept, e.g. how it
    samples)."""
    out = Path(output_dir)
    run_file = out / RUN_FILE
    if resume:
        if not run_file.is_file():
            raise MIEScoreInputError(f"--resume: '{out}' holds no run ({RUN_FILE} missing); check --output_dir, or "
                                     "start the run without --resume / --resume_from_checkpoint")
        stored = json.loads(run_file.read_text())
        differs = sorted(k for k in identity if stored.get(k) != identity[k])
        if differs:
            shown = ", ".join(f"{k}: {stored.get(k)!r} there, {identity[k]!r} now" for k in differs[:4])
            raise MIEScoreInputError(f"--resume: '{out}' belongs to another run ({shown}); resume with that run's "
                                     "settings or pick a new output_dir")
        return (latest_checkpoint(out) if resume == "latest" else resolve_checkpoint(out, resume)), True
    if run_file.exists() and not overwrite:
        raise MIEScoreInputError(f"'{out}' already holds a run; pass --resume_from_checkpoint latest (or --resume) "
                                 "to continue it, --overwrite_output_dir to start over, or another --output_dir")
    if is_main:
        if run_file.exists():
            for child in out.iterdir():
                if CHECKPOINT_PATTERN.match(child.name) or child.name in RUN_OUTPUTS:
                    shutil.rmtree(child) if child.is_dir() else child.unlink()
        write_text_atomic(run_file, json.dumps({**identity, **(record or {})}, indent=2, default=str) + "\n")
    return None, False


def drop_checkpoints_after(output_dir, step: int) -> List[str]:
    """Remove the checkpoints of ``output_dir`` after ``step`` (a resume from an earlier checkpoint abandons
    them, as it drops their metrics); returns their names."""
    dropped = []
    for child in Path(output_dir).glob("checkpoint-*"):
        if CHECKPOINT_PATTERN.match(child.name) and checkpoint_step(child) > step:
            shutil.rmtree(child)
            dropped.append(child.name)
    return sorted(dropped, key=checkpoint_step)


def read_run_file(output_dir) -> Optional[dict]:
    """``output_dir/run.json`` as a dict, or None when there is none."""
    path = Path(output_dir) / RUN_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MIEScoreInputError(f"'{path}' is not readable JSON ({err}); it is written by the trainer") from None


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
    state: dict = {}
    for key, value in list(tensors.items()) + list(meta["scalars"].items()):
        param, name = key.rsplit(".", 1)
        state.setdefault(int(param) if param.isdigit() else param, {})[name] = value
    groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g for g in meta["param_groups"]]
    return {"state": state, "param_groups": groups}


def _rng_tensors() -> Dict[str, torch.Tensor]:
    out = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state()
    return out


def save_checkpoint(output_dir, step: int, *, trainable: Dict[str, torch.Tensor], optimizer, lr_scheduler,
                    ema_state: Optional[dict] = None, rank: int = 0, is_main: bool = True, barrier=lambda: None) -> Path:
    """Write ``checkpoint-<step>`` atomically (module docstring); every process calls it (``barrier`` syncs them).
    ``optimizer``: the optimizer, or its (full) state dict on the main process."""
    from safetensors.torch import save_file

    out = Path(output_dir)
    final = out / f"checkpoint-{step}"
    staging = out / f".checkpoint-{step}.partial"
    if is_main:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
    barrier()
    save_file(_rng_tensors(), str(staging / f"rng-{rank}.safetensors"))
    if is_main:
        save_file({k: v.detach().cpu().contiguous() for k, v in trainable.items()},
                  str(staging / "trainable.safetensors"))
        tensors, meta = _optimizer_files(optimizer if isinstance(optimizer, dict) else optimizer.state_dict())
        save_file(tensors, str(staging / "optimizer.safetensors"))
        (staging / "optimizer.json").write_text(json.dumps(meta))
        if ema_state is not None:
            save_file(ema_state["shadow"], str(staging / "ema.safetensors"))
        py_state = random.getstate()
        state = {"step": step, "lr_scheduler": lr_scheduler.state_dict(),
                 "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
                 "numpy_rng": [v.tolist() if isinstance(v, np.ndarray) else v for v in np.random.get_state()],
                 "ema_step": None if ema_state is None else ema_state["step"]}
    barrier()
    if is_main:
        (staging / "trainer_state.json").write_text(json.dumps(state, default=float))
        shutil.rmtree(final, ignore_errors=True)
        staging.rename(final)
    barrier()
    return final


def load_checkpoint(checkpoint, *, optimizer, lr_scheduler, rank: int = 0) -> dict:
    """Restore the optimizer, scheduler and RNG states from ``checkpoint``; returns ``{"step", "trainable",
    "ema"}`` (the caller loads the trained parameters and the EMA). ``optimizer``: the optimizer, or a function
    that loads its state dict (FSDP)."""
    from safetensors.torch import load_file

    path = Path(checkpoint)
    state = json.loads((path / "trainer_state.json").read_text())
    load_optimizer = optimizer.load_state_dict if isinstance(optimizer, torch.optim.Optimizer) else optimizer
    load_optimizer(_optimizer_state(load_file(str(path / "optimizer.safetensors")),
                                    json.loads((path / "optimizer.json").read_text())))
    lr_scheduler.load_state_dict(state["lr_scheduler"])
    version, internal, gauss = state["python_rng"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, cached = state["numpy_rng"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))
    rng_file = path / f"rng-{rank}.safetensors"
    if rng_file.is_file():
        rng = load_file(str(rng_file))
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"])
    ema = None
    if state.get("ema_step") is not None:
        ema = {"shadow": load_file(str(path / "ema.safetensors")), "step": state["ema_step"]}
    return {"step": int(state["step"]), "trainable": load_file(str(path / "trainable.safetensors")), "ema": ema}


def truncate_metrics(metrics_file, last_step: int) -> None:
    """Drop the lines of ``metrics_file`` for steps after ``last_step`` (and a torn last line): after a resume
    from ``checkpoint-<last_step>`` those steps run again, so none is logged twice."""
    path = Path(metrics_file)
    if not path.is_file():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if int(record.get("step", 0)) <= last_step:
            kept.append(line)
    write_text_atomic(path, "".join(k + "\n" for k in kept))
