"""The checks of ``miescore doctor`` that load and run the weights: fresh-process load, load, weights, throughput.

Each function takes the run's :class:`DoctorContext` and returns a :class:`Finding`.
"""

from __future__ import annotations

import platform
import time

from ..data.example_edits import save_example_files
from .doctor_context import DoctorContext, error, ok, skip, warn

FRESH_EDITS = 2  # edits the fresh process scores and the installed package scores again
# Largest difference (score points, or reward) between the fresh process and the installed package that counts
# as the same: float32 runs the same kernels on the same inputs; half precision rounds to ~1e-2 per layer.
SAME_SCORE = {"float32": 1e-3}
SAME_SCORE_HALF = 0.5
SAME_REWARD = {"float32": 1e-4}
SAME_REWARD_HALF = 0.02


def _fresh_records(ctx: DoctorContext) -> list:
    examples = [{"id": f"{e.example}-{e.variant}", "sources": e.sources, "edited": e.edited,
                 "instruction": e.instruction} for e in ctx.originals()[:FRESH_EDITS]]
    return save_example_files(examples, ctx.workdir)


def _code_list(files: list) -> str:
    return ", ".join(f"{f['file']} (sha256 {f['sha256'][:12]}...)" for f in files) or "none"


def check_fresh_process(ctx: DoctorContext):
    """A second, fresh interpreter loads the checkpoint and scores 2 edits.

    By default through the installed package (``load_scorer`` / ``load_spatialreward``): nothing from the folder
    runs, and the answer must show no ``transformers_modules`` import. With ``trust_remote_code`` as a stranger
    would: ``AutoModel.from_pretrained(CKPT, trust_remote_code=True)`` without this package and its non-Hub
    dependencies (``isolated_load``), running the checkpoint's code files, which the message names with their
    sha256."""
    if not ctx.fresh_process:
        return skip("skipped (--skip-fresh-process)")
    ctx.need_sound("files", "config_processor")
    from .doctor_config_checks import read_config_json, remote_code_files
    from .isolated_load import (IsolatedLoadJob, IsolatedRunError, load_and_score_with_package,
                                load_and_score_without_package)

    code = remote_code_files(ctx.path)
    has_auto_model = bool((read_config_json(ctx.path).get("auto_map") or {}).get("AutoModel"))
    if ctx.trust_remote_code and not has_auto_model:
        return skip("no auto_map: a plain checkpoint that only the installed package loads (no code to trust)")
    records = _fresh_records(ctx)
    job = IsolatedLoadJob(str(ctx.path), records, batch_size=FRESH_EDITS, device=ctx.device, dtype=ctx.dtype_name,
                          kind=ctx.kind)
    start = time.perf_counter()
    try:
        out = (load_and_score_without_package if ctx.trust_remote_code else load_and_score_with_package)([job])
    except IsolatedRunError as err:
        last = [line for line in str(err).splitlines() if line.strip()][-1]
        how = "trust_remote_code load without the package" if ctx.trust_remote_code else "load in a fresh process"
        return error(f"{how} fails: {last}", output=str(err)[-3000:], remote_code=code)
    result, seconds = out["results"][0], time.perf_counter() - start
    if ctx.trust_remote_code:
        return _stranger_finding(ctx, out, result, records, seconds, code)
    details = {"class": result["classes"]["installed"], "checkpoint_modules": out["checkpoint_modules"],
               "remote_code": code, "trust_remote_code": False, "seconds": round(seconds, 2)}
    if out["checkpoint_modules"]:
        return error(f"checkpoint code was imported: {', '.join(out['checkpoint_modules'])}", **details)
    ctx.fresh = {"records": records, "result": result, "batch_size": FRESH_EDITS}
    not_run = (f"; its {len(code)} code file(s) were not run (--trust-remote-code runs them as "
               "AutoModel(trust_remote_code=True) would)" if code else "")
    return ok(f"a fresh interpreter loads it through the installed package and scores {len(records)} edits "
              f"({seconds:.1f} s){not_run}", **details)


def _stranger_finding(ctx: DoctorContext, out: dict, result: dict, records: list, seconds: float, code: list):
    """The finding of the ``trust_remote_code`` load (the checkpoint's own code ran)."""
    loaded_class = result["classes"]["AutoModel"]
    details = {"class": loaded_class, "blocked_imports": out["loaded"], "remote_code": code,
               "trust_remote_code": True, "seconds": round(seconds, 2)}
    ran = f"ran the checkpoint's code: {_code_list(code)}"
    if out["loaded"]:
        return error(f"the checkpoint's code imports {', '.join(out['loaded'])}, which a plain transformers "
                     f"install lacks; {ran}", **details)
    if not loaded_class.startswith("transformers_modules."):
        return error(f"AutoModel gave {loaded_class}, not the checkpoint's own code", **details)
    ctx.fresh = {"records": records, "result": result, "batch_size": FRESH_EDITS}
    return ok(f"AutoModel(trust_remote_code=True) loads {loaded_class.rsplit('.', 1)[-1]} without modeling_miescore "
              f"and scores {len(records)} edits ({seconds:.1f} s); {ran}", **details)


def _compare_with_fresh(ctx: DoctorContext) -> tuple:
    """``(largest difference, tolerance, texts equal)`` between the fresh process and the installed package."""
    records, result = ctx.fresh["records"], ctx.fresh["result"]
    mine = ctx.score(records, batch_size=ctx.fresh["batch_size"])
    if ctx.kind == "miescore":
        diff = max(abs(a[k] - b[k]) for a, b in zip(result["scores"], mine, strict=True) for k in b)
        return diff, SAME_SCORE.get(ctx.dtype_name, SAME_SCORE_HALF), True
    theirs = result["judgements"]
    diff = max(abs(float(a["reward"]) - float(b.reward)) for a, b in zip(theirs, mine, strict=True))
    same_texts = all(a["raw_sc"] == b.raw_sc and a["raw_pq"] == b.raw_pq for a, b in zip(theirs, mine, strict=True))
    return diff, SAME_REWARD.get(ctx.dtype_name, SAME_REWARD_HALF), same_texts


def check_load(ctx: DoctorContext):
    """Loads with the installed package on the chosen device and dtype; agrees with the fresh-process load."""
    start = time.perf_counter()
    if ctx.model is None:
        ctx.need_sound("files", "config_processor")
        from ..scoring.loading import load_scorer, load_spatialreward

        load = load_scorer if ctx.kind == "miescore" else load_spatialreward
        ctx.model = load(str(ctx.path), device=ctx.device, dtype=ctx.dtype_name)
    model = ctx.model
    saved = getattr(model.config, "dtype", None) or getattr(model.config, "torch_dtype", None)
    details = {"class": type(model).__name__, "device": str(model.device), "dtype": str(model.dtype),
               "checkpoint_dtype": str(saved), "parameters": sum(p.numel() for p in model.parameters()),
               "given_model": ctx.given_model, "seconds": round(time.perf_counter() - start, 2)}
    problems = []
    if model.device.type == "cpu" and str(model.dtype) == "torch.float16":
        problems.append("float16 on CPU is slow and some kernels lack it; use --dtype float32 or bfloat16")
    if ctx.fresh is not None:
        diff, tolerance, same_texts = _compare_with_fresh(ctx)
        details.update(fresh_process_difference=diff, tolerance=tolerance, same_texts=same_texts)
        if diff > tolerance or not same_texts:
            found = f"largest difference {diff:.4g}{'' if same_texts else ', different generated texts'}"
            problems.append(f"the checkpoint's own code and the installed package disagree ({found}): it was saved "
                            "by another version of the code" if ctx.trust_remote_code else
                            f"a fresh process scores differently from this one ({found}): the scores are not "
                            "reproducible")
    where = f"{details['class']} on {details['device']} in {details['dtype'].removeprefix('torch.')}"
    if problems:
        return warn(f"{where}: " + "; ".join(problems), **details)
    agree = (f"; its scores equal the fresh process's (largest difference {details['fresh_process_difference']:.2g})"
             if ctx.fresh is not None else "")
    return ok(f"{where}, {details['parameters']:,} parameters{agree}", **details)


def _all_zero(tensor) -> bool:
    return tensor is not None and tensor.numel() > 0 and not bool(tensor.detach().abs().amax() > 0)


def check_weights(ctx: DoctorContext):
    """Every weight is finite; the output layer (MIEScore's regression head, SpatialReward's LM head) is not all
    zeros, which would make every output the same."""
    ctx.need("model")
    import torch

    model = ctx.model
    broken = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]
    if broken:
        return error(f"{len(broken)} weight tensor(s) hold NaN or Inf: {', '.join(broken[:5])}", non_finite=broken)
    if ctx.kind == "miescore":
        layer = model.head.output_layer
        where = next(n for n, m in model.named_modules() if m is layer)
        name = f"the {model.config.score_head} head's output layer ({where})"
        if _all_zero(layer.weight):
            return error(f"{name} has all-zero weights: every input gets the same scores (an untrained or "
                         "wrongly exported head)",
                         bias=None if layer.bias is None else layer.bias.detach().float().tolist())
    elif _all_zero(model.get_output_embeddings().weight):
        return error("the LM head is all zeros: every generation is the same")
    return ok("all weights finite; the output layer is not degenerate")


def device_name(device) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"


def check_throughput(ctx: DoctorContext):
    """Edits per second on this machine: the example edits scored again (warm), once with --quick, else twice."""
    ctx.need("model")
    samples = [edit.as_sample() for edit in ctx.originals()]
    repeats = 1 if ctx.quick else 2
    ctx.score(samples[:1])  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        ctx.score(samples)
    seconds = time.perf_counter() - start
    rate = repeats * len(samples) / seconds
    name = device_name(ctx.model.device)
    return ok(f"{rate:.2f} edits/s ({seconds / (repeats * len(samples)):.2f} s per edit, batch 8) on {name}, "
              f"{ctx.dtype_name}", edits_per_second=rate, edits=repeats * len(samples), seconds=seconds,
              device=name, dtype=ctx.dtype_name, image_side=128 if ctx.quick else 256)


__all__ = ["check_fresh_process", "check_load", "check_throughput", "check_weights", "device_name"]
