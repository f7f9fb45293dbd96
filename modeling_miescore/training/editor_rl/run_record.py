"""How a run samples, kept in its ``run.json`` (``"sampling"``) so that ``miescore edit --lora RUN`` edits as the
run was trained without any option copied by hand: the editor and its base model, the editor options (the tiny
pipelines cannot run without theirs), the resolution, T, the CFG scale and schedule, the dtype.

:data:`SAMPLING_FIELDS` is the record's one declaration: each field with the ``miescore edit`` option that
overrides it (None: not an option of ``edit``). :func:`sampling_record` makes the record from a run's config and
its loaded editor (the resolved CFG scale and size, so a change of a pipeline's default never changes what the
adapter is sampled with); :func:`read_sampling` reads it back from a run folder. The CFG schedule
(``cfg_fraction``: guidance on steps i/T <= it, as the rollouts) and, for SDE sampling, ``sde_type`` and the
last-step mode are what :class:`~.sampling_schedule.SamplingSchedule` takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...image_io import MIEScoreInputError

__all__ = ["SAMPLING_FIELDS", "read_sampling", "sampling_record"]

# field -> the `miescore edit` option that overrides it
SAMPLING_FIELDS = {
    "editor": "--pipeline",
    "model_name_or_path": "--model",
    "base_model_id": None,
    "editor_options": "--editor-options",
    "height": "--editor-options",
    "width": "--editor-options",
    "num_inference_steps": "--steps",
    "cfg_scale": "--cfg-scale",
    "cfg_fraction": "--cfg-fraction",
    "noise_level": None,  # the rollouts' SDE; `edit` samples ODE unless --noise-level is given
    "sde_type": "--sde-type",
    "last_step": "--last-step",
    "dtype": "--dtype",
    "finetuning": None,
}


def sampling_record(config, editor) -> dict:
    """``{"sampling": {...}}`` for ``run.json``: :data:`SAMPLING_FIELDS` of ``config`` (a
    :class:`~.config.FlowGRPOConfig`) and ``editor`` (the loaded :class:`~.editors.EditorAdapter`)."""
    from ...scoring.loading import model_reference

    from ...utils.credentials import redact

    shown = config.public_dict()  # run.json is shown and pushed: no credential in it
    record = {"editor": shown["editor"], "model_name_or_path": redact(model_reference(config.model_name_or_path)),
              "base_model_id": shown["base_model_id"], "editor_options": dict(shown["editor_options"] or {}),
              "height": getattr(editor, "height", None), "width": getattr(editor, "width", None),
              "num_inference_steps": config.num_inference_steps, "cfg_scale": float(editor.cfg_scale),
              "cfg_fraction": config.cfg_fraction, "noise_level": config.noise_level, "sde_type": config.sde_type,
              "last_step": config.last_step, "dtype": config.dtype, "finetuning": config.finetuning}
    return {"sampling": record}


def read_sampling(run_dir) -> Optional[dict]:
    """The ``"sampling"`` record of the run in ``run_dir``, or None when the folder holds no ``run.json`` with one
    (an adapter from elsewhere, or a run written before runs recorded it)."""
    from .checkpoints import read_run_file

    stored = read_run_file(run_dir)
    sampling = (stored or {}).get("sampling")
    if sampling is None:
        return None
    if not isinstance(sampling, dict) or not sampling.get("editor") or not sampling.get("model_name_or_path"):
        raise MIEScoreInputError(f"'{Path(run_dir) / 'run.json'}': its sampling record names no editor or base "
                                 "model; pass --pipeline and --model")
    return sampling
