"""``miescore doctor CKPT``: is this checkpoint sane? Run before trusting a downloaded or freshly trained one.

Editing-reward models can load without complaint and still be useless: a head that gives every edit the same
score, a processor from another model, a judge whose answers never parse. The doctor runs these checks in order;
each gives ``ok``, ``warn``, ``error`` or ``skip`` (a check that needs something an earlier one failed to load
is skipped, so one fault is reported once). An exception inside a check becomes an ``error`` result for that
check, never a crash. Exit status: 0 healthy, 1 warnings, 2 broken (any error).

Files and configuration (no weights loaded; ``doctor_config_checks``):

* ``files``: the checkpoint validation layer (``scoring.checkpoint_files``: config values, every safetensors
  header, tokenizer.json and chat template present; a fault -> error naming the file, and the checks that would
  only repeat it skip); pickle files beside the weights -> warning; for a checkpoint with code, ``auto_map``
  present (MIEScore without it -> error) and every code file it reaches present (-> error); code files that
  differ from the installed package's (saved by another version, or changed) -> warning; processor files whose
  ``auto_map`` names code (never run here) -> warning. ``details["remote_code"]``: every file that
  ``trust_remote_code`` would run, with its sha256.
* ``config_processor``: the config and the processor saved beside the weights load.
* ``token_ids``: ``image_token_id``, ``video_token_id``, ``vision_start_token_id``, ``vision_end_token_id`` equal
  the tokenizer's single-token ids of ``<|image_pad|>`` ... and the processor's ``image_token_id``; the tokenizer
  fits the embedding rows; a pad token exists. Any mismatch -> error.
* ``vision_geometry``: the image processor's patch size, merge size and temporal patch size equal the vision
  tower's (-> error).
* ``chat_template``: present; renders every image of a 2-source prompt as ``<|vision_start|><|image_pad|>
  <|vision_end|>``, writes the prompt text verbatim and opens the assistant turn (-> error).
* ``pixel_budget``: the processor, called as the models call it, makes the image-token counts that the config's
  ``min_pixels`` / ``max_pixels`` imply (1000x700, 64x48 and 2048x2048 images; -> error).
* ``grounding_tokens`` (SpatialReward): ``<|bbox_0..15|>`` and ``<|global|>`` are plain text or all single ids
  (partly -> warning), inside the embedding (-> error).
* ``token_budget``: typical inputs (1-4 sources at 512 and 1024 px) against the training length (the
  checkpoint's own, from its config.json or model card, else the paper's: MIEScore 4096 tokens, supplement
  "Supervised Fine-Tuning"; SpatialReward 8192 for prompt + ``max_new_tokens``, SFT, Table 6) and the model's
  position limit. Longer than the training length is information (ok), with what it means: MIEScore's trainer
  shrank such images to fit (and at which ``max_pixels``), scoring does not; SpatialReward SFT dropped such rows.
  Warnings only for defects: an input beyond the position limit, or a recorded training length that contradicts
  the pixel budget (a typical input that cannot fit even at one token per image, or a length beyond the position
  limit).

Loading and running (``doctor_model_checks``):

* ``fresh_process``: a fresh interpreter loads the checkpoint and scores 2 example edits (fails -> error). By
  default through the installed package (``load_scorer`` / ``load_spatialreward``): **nothing from the folder
  runs** (an imported ``transformers_modules`` module -> error). With ``trust_remote_code=True``
  (``--trust-remote-code``) as a stranger would: ``AutoModel.from_pretrained(CKPT, trust_remote_code=True)``
  without this package and its non-Hub dependencies (``isolated_load``), running the checkpoint's code files,
  which the message names with their sha256. Skipped with ``--skip-fresh-process``.
* ``load``: the installed package loads it on the device and dtype asked for (fails -> error); the same 2 edits
  score as in the fresh process (to 1e-3 points / 1e-4 reward in float32, 0.5 / 0.02 in half precision, same
  texts; else -> warning); float16 on CPU -> warning. Skipped when ``files`` or ``config_processor`` failed.
* ``weights``: all finite; the output layer of MIEScore's score head (``ScoreHead.output_layer``) / SpatialReward's LM head not all zeros (-> error).

Scores of the bundled example edits and perturbations of them (``edit_perturbations``; ``doctor_score_checks``):

* ``score_spread`` (MIEScore), for each score over all edits: NaN -> error; range below 0.05% of the scale
  (0.05 points of 100) -> error (constant); every value within 0.5% of 0 or the top -> error, half of them ->
  warning (saturated); range below 1% of the scale -> warning (barely moves).
* ``parse_rate`` (SpatialReward): every edit fails to parse -> error; more than 20% -> warning.
* ``boxes`` (SpatialReward): boxes written outside 0..1000, reversed or empty (the parser's ``bbox_clamped``,
  ``bbox_reordered``, ``bbox_degenerate``, ``region_invalid``): in every answer -> error, in some -> warning;
  no region at all -> warning.
* ``reward_spread`` (SpatialReward): the rewards of the parsed edits, as ``score_spread`` on the 0-1 scale.
* ``direction_source_as_edited`` / ``direction_noise`` / ``direction_blur`` / ``direction_swapped_sources``:
  instruction following (``s_if``) lower when the edited image is replaced by a source; visual quality (PQ) lower
  under heavy noise and blur; attribute preservation (``s_con``) moves by at least 0.5% of the scale when the
  sources are swapped. "Lower" must hold for most examples and on average. Not observed -> warning (never an
  error: a model may disagree on an example, and a random one is expected to). Skipped after an error of
  ``weights``, ``score_spread``, ``parse_rate`` or ``reward_spread`` (constant or NaN scores have no direction:
  the fault is reported once).
* ``throughput``: edits per second on this machine (the examples scored again, warm), device named.

A tiny random checkpoint (``testing.build_tiny_miescore``, the paper's pixel budget) has no error; its random head
misses some directions, so it comes out as "warnings" (exit 1): the honest answer. Its token budget (3-4 sources
at 1024 px over the 4,096 training tokens) is information, so a checkpoint whose scores react as expected ends
"healthy" (exit 0).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..image_io import MIEScoreInputError
from . import doctor_config_checks as config_checks
from . import doctor_model_checks as model_checks
from . import doctor_score_checks as score_checks
from .doctor_context import CheckSkipped, DoctorContext, jsonable

EXIT_CODES = {"healthy": 0, "warnings": 1, "broken": 2}


def _checks(kind: str) -> list:
    """``[(name, check)]`` for a ``"miescore"`` or ``"spatialreward"`` checkpoint, in the order they run."""
    checks = [("files", config_checks.check_files), ("config_processor", config_checks.check_config_processor),
              ("token_ids", config_checks.check_token_ids), ("vision_geometry", config_checks.check_vision_geometry),
              ("chat_template", config_checks.check_chat_template),
              ("pixel_budget", config_checks.check_pixel_budget)]
    if kind == "spatialreward":
        checks.append(("grounding_tokens", config_checks.check_grounding_tokens))
    checks += [("token_budget", config_checks.check_token_budget),
               ("fresh_process", model_checks.check_fresh_process), ("load", model_checks.check_load),
               ("weights", model_checks.check_weights)]
    if kind == "miescore":
        checks.append(("score_spread", score_checks.check_score_spread))
    else:
        checks += [("parse_rate", score_checks.check_parse_rate), ("boxes", score_checks.check_boxes),
                   ("reward_spread", score_checks.check_reward_spread)]
    checks += [(f"direction_{d.variant}", functools.partial(score_checks.check_direction, direction=d))
               for d in score_checks.DIRECTIONS]
    checks.append(("throughput", model_checks.check_throughput))
    return checks


@dataclass
class CheckResult:
    """One check's record: ``name``, ``status`` (ok / warn / error / skip), ``message``, ``details``, ``seconds``."""

    name: str
    status: str
    message: str
    details: dict = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "message": self.message,
                "details": jsonable(self.details), "seconds": round(self.seconds, 3)}


@dataclass
class DoctorReport:
    """The checks of one checkpoint. ``verdict``: healthy / warnings / broken; ``exit_code``: 0 / 1 / 2."""

    checkpoint: str
    kind: str
    device: str
    dtype: str
    checks: list

    def count(self, status: str) -> int:
        return sum(check.status == status for check in self.checks)

    @property
    def verdict(self) -> str:
        return "broken" if self.count("error") else "warnings" if self.count("warn") else "healthy"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.verdict]

    def named(self, status: str) -> list:
        """Names of the checks with ``status``."""
        return [check.name for check in self.checks if check.status == status]

    def to_dict(self) -> dict:
        return {"checkpoint": self.checkpoint, "kind": self.kind, "device": self.device, "dtype": self.dtype,
                "verdict": self.verdict, "exit_code": self.exit_code,
                "summary": {status: self.count(status) for status in ("ok", "warn", "error", "skip")},
                "checks": [check.to_dict() for check in self.checks]}


def run_check(name: str, check: Callable, ctx: DoctorContext) -> CheckResult:
    """Run one check; a skip or an exception becomes its result instead of leaving the run."""
    start = time.perf_counter()
    try:
        finding = check(ctx)
        result = CheckResult(name, finding.status, finding.message, finding.details)
    except CheckSkipped as err:
        result = CheckResult(name, "skip", str(err))
    except Exception as err:  # one broken part must not hide the others
        result = CheckResult(name, "error", f"{type(err).__name__}: {err}".splitlines()[0][:500],
                             {"exception": type(err).__name__, "text": str(err)[-3000:]})
    result.seconds = time.perf_counter() - start
    if result.status == "error":
        ctx.faults[name] = result.message
    return result


def checkpoint_kind(path) -> str:
    """``"miescore"`` or ``"spatialreward"`` for a local checkpoint folder; anything else is a user error."""
    from ..scoring.loading import SPATIALREWARD_MODEL_TYPES, read_checkpoint_config

    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise MIEScoreInputError(f"'{path}' is a file, not a checkpoint folder; pass the folder that holds "
                                 "config.json and the weights")
    if not folder.is_dir():
        raise MIEScoreInputError(f"checkpoint folder '{path}' does not exist; the doctor checks a local folder "
                                 "(download a Hub checkpoint first: hf download REPO --local-dir DIR)")
    model_type = read_checkpoint_config(str(folder)).get("model_type")
    if model_type == "miescore":
        return "miescore"
    if model_type in SPATIALREWARD_MODEL_TYPES:
        return "spatialreward"
    raise MIEScoreInputError(f"'{path}' is neither a MIEScore nor a SpatialReward checkpoint "
                             f"(model_type={model_type!r}); pass a checkpoint folder of one of them")


def diagnose_checkpoint(path, device: str = "auto", dtype: str = "auto", fresh_process: bool = True,
                        quick: bool = False, model=None, on_result: Callable | None = None,
                        trust_remote_code: bool = False) -> DoctorReport:
    """Run every check on the checkpoint folder ``path`` (see the module docstring).

    Args:
        device / dtype: as ``load_scorer`` takes them (``"auto"``: CUDA if available; bfloat16 there, else float32).
        fresh_process: run the ``fresh_process`` check (a second interpreter loads the checkpoint: slow).
        trust_remote_code: that interpreter loads the checkpoint as a stranger would, with
            ``AutoModel.from_pretrained(path, trust_remote_code=True)``: **the checkpoint's code runs** (the report
            names each file with its sha256). Default: through the installed package, nothing from the folder runs.
        quick: three examples at 128 px instead of five at 256 px; one throughput pass.
        model: an already loaded model of this checkpoint (skips loading it again).
        on_result: called with each :class:`CheckResult` as soon as it is done (progress).
    Raises:
        MIEScoreInputError: the folder is missing or not a MIEScore / SpatialReward checkpoint; a bad device or
            dtype. Everything else is a check result.
    """
    from ..scoring.loading import resolve_device, resolve_dtype

    kind = checkpoint_kind(path)
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    # an absolute path: the fresh process runs in another folder, where a relative one would read as a Hub id
    ctx = DoctorContext(Path(path).expanduser().resolve(), kind, device, torch_dtype, quick=quick,
                        fresh_process=fresh_process,
                        model=model, trust_remote_code=trust_remote_code)
    results = []
    try:
        ctx.prepare()
        for name, check in _checks(kind):
            results.append(run_check(name, check, ctx))
            if on_result is not None:
                on_result(results[-1])
    finally:
        ctx.close()
    return DoctorReport(str(path), kind, device, ctx.dtype_name, results)


_LABELS = {"ok": "ok", "warn": "WARN", "error": "ERROR", "skip": "skip"}


def format_result(result: CheckResult) -> str:
    """One line: status, name, message."""
    return f"{_LABELS[result.status]:<6} {result.name:<28} {result.message}"


def format_report(report: DoctorReport) -> str:
    """The report as a table for people: one line per check, then the verdict."""
    lines = [f"miescore doctor: {report.checkpoint} ({report.kind}, {report.device}, {report.dtype})", "",
             f"{'status':<6} {'check':<28} result", f"{'-' * 6} {'-' * 28} {'-' * 40}"]
    lines += [format_result(result) for result in report.checks]
    counts = ", ".join(f"{report.count(s)} {s}" for s in ("error", "warn", "ok", "skip"))
    lines += ["", f"verdict: {report.verdict} (exit {report.exit_code}): {counts}"]
    return "\n".join(lines)


__all__ = ["CheckResult", "DoctorReport", "checkpoint_kind", "diagnose_checkpoint", "format_report",
           "format_result", "run_check"]
