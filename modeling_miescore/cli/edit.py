"""``miescore edit``: make edits with an image editor (a diffusers editing pipeline or an editor adapter), e.g.
one trained by ``trainers/flow_grpo_editor.py`` (synopsis: docs/cli.md).

With ``--lora RUN`` the run's ``run.json`` supplies the editor and its sampling settings
(:mod:`modeling_miescore.training.editor_rl.outputs`); an option given here overrides its value. Reward-guided
best-of-N (``--num-images N --select SPEC``): :mod:`modeling_miescore.editing.selection`. Rerunning resumes.
Exit status: 0 done, 1 some requests failed (listed), 2 bad input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from .main import COMMAND_HELP, add_device_args, finish_run, number_arg, quiet_transformers
from ..training.editor_rl.schedule import SamplingSchedule
from ..utils.output_paths import check_folder_apart
from ..data.editing_inputs import read_editing_inputs
from ..scoring.jsonl_scoring import make_output_folder
from ..scoring.loading import resolve_device, resolve_dtype
from ..rewards.specs import reward_identity, reward_spec_problem, build_reward
from ..rewards.groups import RewardUnavailableError

__all__ = ["MAX_NUM_IMAGES", "add_sampling_args", "cmd_edit", "register", "sampling_schedule"]

MAX_NUM_IMAGES = 64  # --num-images: a request's edits are sampled in one batch (and scored as one group)


def register(subparsers) -> None:
    parser = subparsers.add_parser("edit", help=COMMAND_HELP["edit"])
    parser.add_argument("--pipeline", default=None, help="qwen-image-edit-plus | flux2-klein | flux-kontext, or "
                        "package.module:function returning an EditorAdapter (default: the --lora run's)")
    parser.add_argument("--model", default=None, help="the editor's pipeline folder or Hub id (default: the --lora "
                        "run's base model)")
    parser.add_argument("--lora", default=None, metavar="DIR", help="a LoRA folder (pytorch_lora_weights.safetensors); "
                        "a training run's folder also gives its sampling settings (run.json)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help='JSONL lines {"id"?, "sources": [...], "instruction": "..."}')
    source.add_argument("--dataset", help="MIE-Bench / MER-Bench / converted editing dataset (folder or Hub id)")
    parser.add_argument("--split", default=None, help="dataset split (default: train for MIE-Bench, test for "
                        "converted benchmarks, every K-pair split of MER-Bench)")
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder (images/, edits.jsonl)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every edit (with the request id)")
    parser.add_argument("--num-images", type=number_arg(int, minimum=1, maximum=MAX_NUM_IMAGES), default=1,
                        help=f"edits per request, 1 to {MAX_NUM_IMAGES} (sampled in one batch)")
    parser.add_argument("--select", default=None, metavar="REWARD",
                        help="keep the candidate this reward scores highest (best of --num-images): "
                             "miescore:CKPT, spatialreward:CKPT, package.module:function or any --reward spec of the "
                             "trainer; every candidate stays on disk with its reward")
    parser.add_argument("--steps", type=number_arg(int, minimum=1), default=None,
                        help="denoising steps (default: the --lora run's T, else 28)")
    parser.add_argument("--cfg-scale", type=float, default=None,
                        help="guidance scale (default: the --lora run's, else the editor's)")
    add_sampling_args(parser)
    parser.add_argument("--editor-options", default=None, metavar="JSON",
                        help='adapter options, e.g. \'{"height": 512, "width": 512}\' (default: the --lora run\'s)')
    parser.add_argument("--limit", type=number_arg(int, minimum=1), default=None, help="first N requests only")
    add_device_args(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    parser.set_defaults(func=cmd_edit, extra="rl")  # a missing diffusers names the rl extra


def add_sampling_args(parser) -> None:
    """The sampling-schedule flags (:class:`~modeling_miescore.training.editor_rl.schedule.SamplingSchedule`;
    the defaults are the stock pipeline's: CFG on every step, Euler ODE steps)."""
    parser.add_argument("--cfg-fraction", type=number_arg(float, minimum=0, maximum=1), default=None, metavar="F",
                        help="guide only steps i/T <= F, as a Flow-GRPO run guides its rollouts (its cfg_fraction, "
                        "e.g. 0.6); default: the --lora run's, else 1 (every step, the pipeline's own); 0: none")
    parser.add_argument("--noise-level", type=number_arg(float, minimum=0), default=0.0, metavar="A",
                        help="0 (default): Euler ODE steps; > 0: the training SDE at noise level A on every step")
    parser.add_argument("--sde-type", choices=("sde", "cps"), default=None,
                        help="the SDE of --noise-level > 0 (default: the --lora run's, else sde)")
    parser.add_argument("--last-step", choices=("stochastic", "deterministic"), default=None,
                        help="with --noise-level > 0: whether the final step adds noise (default: the --lora run's "
                        "last_step, else stochastic)")


def sampling_schedule(args):
    """The :class:`SamplingSchedule` of the parsed flags."""
    return SamplingSchedule(cfg_fraction=args.cfg_fraction, noise_level=args.noise_level, sde_type=args.sde_type,
                            last_step=args.last_step)


def _options(text):
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        raise MIEScoreInputError(f"--editor-options is not JSON ({err.msg}); pass an object like "
                                 "'{\"height\": 512}'") from None
    if not isinstance(value, dict):
        raise MIEScoreInputError("--editor-options must be a JSON object")
    return value


def resolve_run_settings(args) -> list:
    """Fill ``args`` from the ``--lora`` run's sampling record where an option was not given (module docstring),
    then the stock pipeline's settings; the settings taken from the run, as ``name value`` strings (empty without a
    record)."""
    from ..training.editor_rl.outputs import read_sampling  # deferred: loads diffusers, torch

    sampling = read_sampling(args.lora) if args.lora else None
    options = _options(args.editor_options)
    missing = [name for name in ("--pipeline", "--model") if getattr(args, name[2:]) is None]
    if sampling is None and missing:
        where = (f"the --lora folder '{args.lora}' has no run.json from a training run" if args.lora
                 else "no --lora run gives them")
        raise MIEScoreInputError(f"{' and '.join(missing)} needed: {where}")
    sampling = dict(sampling or {})
    model = sampling.get("model_name_or_path")
    if model and not Path(model).expanduser().exists() and sampling.get("base_model_id"):
        sampling["model_name_or_path"] = sampling["base_model_id"]  # the run's machine had it locally: its Hub id
    recorded = dict(sampling.get("editor_options") or {})
    taken = [f"editor options {json.dumps(recorded)}"] if recorded else []
    args.editor_options = {**recorded, **options}
    for name, key in (("pipeline", "editor"), ("model", "model_name_or_path"), ("steps", "num_inference_steps"),
                      ("cfg_scale", "cfg_scale"), ("cfg_fraction", "cfg_fraction"), ("sde_type", "sde_type"),
                      ("last_step", "last_step")):
        if getattr(args, name) is None and sampling.get(key) is not None:
            setattr(args, name, sampling[key])
            taken.append(f"{name.replace('_', '-')} {sampling[key]}")
    if args.dtype == "auto" and sampling.get("dtype") not in (None, "auto"):
        args.dtype = sampling["dtype"]
        taken.append(f"dtype {args.dtype}")
    for name, default in (("steps", 28), ("cfg_fraction", 1.0), ("sde_type", "sde"), ("last_step", "stochastic")):
        if getattr(args, name) is None:  # not given and not in a run: the stock pipeline's schedule
            setattr(args, name, default)
    return taken


def _check_out_apart(args) -> None:
    """``--out`` is none of the inputs and holds none of them (it may lie inside one: nothing there is replaced);
    ``--input`` is never the ``edits.jsonl`` this run appends to."""
    local = lambda path: path if path and Path(path).expanduser().exists() else None  # noqa: E731 - Hub ids
    check_folder_apart(args.out, {"--input": args.input, "--dataset": local(args.dataset), "--model": local(args.model),
                                  "--lora": args.lora}, "--out", allow_inside=True)


def cmd_edit(args) -> int:
    from tqdm.auto import tqdm

    from ..editing.generation import generate_edits, record_sampling  # deferred: loads diffusers, torch
    from ..editing.selection import CANDIDATES_FILE, prepare_selection  # deferred: loads diffusers, torch
    from ..training.editor_rl.editors import load_editor  # deferred: loads torch

    quiet_transformers()
    if args.no_progress:  # also the loading bars of the pipeline (diffusers) and of a dataset's split (datasets)
        import datasets
        from diffusers.utils import logging as diffusers_logging

        diffusers_logging.disable_progress_bar()
        datasets.disable_progress_bars()
    taken = resolve_run_settings(args)
    if args.lora:  # before the editor loads: a missing, damaged or NaN adapter is one line
        from ..training.editor_rl.policy import check_lora_file

        check_lora_file(args.lora)
    if taken:
        print(f"miescore edit: from {Path(args.lora) / 'run.json'}: {'; '.join(taken)}", file=sys.stderr)
    selection = _selection(args)
    requests = read_editing_inputs(args.input or args.dataset, args.split, args.limit)
    _check_out_apart(args)
    out = make_output_folder(args.out, "--out: ", inputs={"--input": args.input},
                             writes=("edits.jsonl", CANDIDATES_FILE))
    if selection:
        prepare_selection(out, selection[1], args.num_images)
    schedule = sampling_schedule(args)
    record_sampling(out, schedule, args.steps)  # refuses a folder of another schedule before the editor loads
    device = resolve_device(args.device)
    editor = load_editor(args.pipeline, args.model, dtype=resolve_dtype(args.dtype, device), device=device,
                         options=args.editor_options)
    if args.cfg_scale is not None:
        editor.cfg_scale = args.cfg_scale
    if args.lora:
        editor.load_lora(args.lora)
    print(f"miescore edit: sampling: {schedule.describe(args.steps)}", file=sys.stderr)
    bar = tqdm(total=len(requests), desc="edit", unit="request", disable=args.no_progress)
    run = generate_edits(editor, requests, out, seed=args.seed, num_images=args.num_images, num_steps=args.steps,
                         progress=bar.update, schedule=schedule,
                         jsonl_name=CANDIDATES_FILE if selection else "edits.jsonl")
    bar.close()
    for request_id, message in run.failed:
        print(f"miescore edit: request {request_id!r} failed: {message}", file=sys.stderr)
    if selection:
        del editor  # the reward model is loaded next: one model in memory at a time
        return _select(args, selection, requests, out, run)
    unfinished = (f"{len(run.failed)} request(s) failed; rerun the same command to retry them"
                  if run.failed else None)
    return finish_run(f"wrote {run.written} edit(s) to {out / 'edits.jsonl'} ({run.skipped} already there)",
                      unfinished)


def _selection(args):
    """``(spec, name)`` of ``--select`` (checked before anything is loaded), or None."""
    if args.select is None:
        return None
    if args.num_images < 2:
        raise MIEScoreInputError("--select chooses among several candidates: pass --num-images N with N >= 2")
    problem = reward_spec_problem(args.select, imports=True)  # before any candidate is made or recorded
    if problem:
        raise MIEScoreInputError(f"--select: {problem}")
    return args.select, reward_identity(args.select)


def _select(args, selection, requests, out, generated) -> int:
    """Score each request's candidates with the ``--select`` reward and write the best (module docstring)."""
    import gc

    from tqdm.auto import tqdm

    from ..editing.selection import select_edits  # deferred: loads diffusers, torch
    gc.collect()
    spec, name = selection
    try:
        reward = build_reward(spec, device=args.device, dtype=args.dtype)
    except ValueError as err:
        raise MIEScoreInputError(f"--select: {err}") from None
    bar = tqdm(total=len(requests), desc="select", unit="request", disable=args.no_progress)
    try:  # the selection's reward worker closes the reward
        run = select_edits(reward, requests, out, num_images=args.num_images, selected_by=name, progress=bar.update)
    except RewardUnavailableError as err:  # whatever the reward raised, SystemExit and os._exit included
        return finish_run(f"miescore edit: {err}", "the selection stopped; fix the reward (or wait until it "
                                                   "answers) and rerun the same command: the candidates are kept")
    finally:
        bar.close()
    failed = {request_id for request_id, _ in generated.failed}
    for request_id, message in run.failed:
        if request_id not in failed:
            print(f"miescore edit: request {request_id!r}: {message}", file=sys.stderr)
    unfinished = (f"{len(failed | {r for r, _ in run.failed})} request(s) have no selected edit; rerun the same "
                  "command to retry them" if run.failed or failed else None)
    return finish_run(f"made {generated.written} candidate(s) ({generated.skipped} already there) and selected "
                      f"{run.written} edit(s) by {name} into {out / 'edits.jsonl'} ({run.skipped} already there)",
                      unfinished)
