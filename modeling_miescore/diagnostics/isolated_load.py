"""Load a checkpoint in a fresh Python: the way a stranger does (this package and its extras missing, the
checkpoint's own code run), or through the installed package with nothing from the folder run.

A checkpoint must work with ``AutoModel.from_pretrained(path, trust_remote_code=True)`` alone: its Hub code files
may import only each other, torch, transformers, numpy, Pillow, tqdm and the standard library.
:func:`run_without_package` runs a script in a child interpreter where ``modeling_miescore`` cannot be imported (a
meta-path finder refuses it; ``PYTHONPATH`` emptied, a fresh working folder) and :data:`BLOCKED_PACKAGES` are
missing (a ``None`` entry in ``sys.modules``, so ``find_spec`` answers None as when not installed). What
transformers itself needs to load a Qwen3-VL checkpoint is not blocked. The child is offline, copies the
checkpoint's code into a temporary ``HF_MODULES_CACHE``, takes its values as one JSON argument and answers with
the JSON its ``report(result)`` prints last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

# Installed packages the child must do without: the project's non-Hub dependencies and extras.
BLOCKED_PACKAGES = (
    "scipy", "pandas", "datasets", "pyarrow", "trl", "peft", "accelerate", "gradio", "gradio_client", "starlette",
    "fastapi", "uvicorn", "pydantic", "httpx", "openai", "tenacity", "prometheus_client", "evaluate", "matplotlib",
    "sklearn", "skimage",
)

# The start of every child script: the package and the blocked packages made unimportable; report().
_WITHOUT_PACKAGE = """
import importlib.abc, importlib.util, json, sys

values = json.loads(sys.argv[1])
blocked = values["blocked"]


class RefusePackage(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "modeling_miescore" or name.startswith("modeling_miescore."):
            raise ImportError("modeling_miescore is blocked in this process")


sys.meta_path.insert(0, RefusePackage())  # before the editable install's own finder
for name in blocked:
    sys.modules[name] = None
try:
    importlib.util.find_spec("modeling_miescore")
    sys.exit("the package is still importable")
except ImportError:
    pass


def report(result):
    result["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in blocked and sys.modules[m] is not None)
    print(json.dumps(result))
"""

# Scores ``job["records"]`` with ``model`` into ``out`` (shared by both load scripts).
_SCORE_JOB = """
def score_job(model, job, out):
    if hasattr(model, "score_batch"):
        out["scores"] = model.score_batch(job["records"], batch_size=job["batch_size"])
    else:
        out["judgements"] = [{"reward": r.reward, "failed": r.failed, "raw_sc": r.raw_sc, "raw_pq": r.raw_pq}
                             for r in model.evaluate_edits(job["records"], batch_size=job["batch_size"])]
"""

_LOAD_AND_SCORE = _SCORE_JOB + """
import torch
import transformers

results = []
for job in values["jobs"]:
    config = transformers.AutoConfig.from_pretrained(job["path"], trust_remote_code=True)
    out = {"config": json.loads(config.to_json_string(use_diff=False)), "classes": {}}
    model = None
    for name in job["auto_classes"]:
        loaded = getattr(transformers, name).from_pretrained(job["path"], trust_remote_code=True,
                                                             dtype=getattr(torch, job["dtype"]))
        out["classes"][name] = type(loaded).__module__ + "." + type(loaded).__name__
        if model is None:
            model = loaded  # the first class scores; the others are only loaded
        else:
            del loaded
    score_job(model.to(job["device"]).eval(), job, out)
    del model
    results.append(out)
report({"results": results})
"""

# The default doctor load: the installed package's loaders (never trust_remote_code); no blocking preamble.
_LOAD_WITH_PACKAGE = """
import json, sys

values = json.loads(sys.argv[1])
""" + _SCORE_JOB + """
from modeling_miescore.scoring.loading import load_scorer, load_spatialreward

results = []
for job in values["jobs"]:
    load = load_scorer if job["kind"] == "miescore" else load_spatialreward
    model = load(job["path"], device=job["device"], dtype=job["dtype"])
    out = {"classes": {"installed": type(model).__module__ + "." + type(model).__name__}}
    score_job(model, job, out)
    del model
    results.append(out)
checkpoint_code = sorted(m for m in sys.modules if m.split(".")[0] == "transformers_modules")
print(json.dumps({"results": results, "checkpoint_modules": checkpoint_code}))
"""


class IsolatedRunError(RuntimeError):
    """The child interpreter failed; the message holds the end of its error output."""


@dataclass
class IsolatedLoadJob:
    """One checkpoint for :func:`load_and_score_without_package`.

    Fields:
        path: the checkpoint folder.
        records: edits to score, ``{"sources": [paths], "edited": path, "instruction": text}``.
        auto_classes: transformers auto classes to load it with, in order; the first one scores.
        batch_size / device / dtype: how it scores (dtype a torch dtype name such as ``"float32"``).
        kind: ``"miescore"`` or ``"spatialreward"``: which installed loader :func:`load_and_score_with_package`
            uses (the auto classes are for :func:`load_and_score_without_package`).
    """

    path: str
    records: list
    auto_classes: Sequence[str] = ("AutoModel",)
    batch_size: int = 8
    device: str = "cpu"
    dtype: str = "float32"
    kind: str = "miescore"


def run_without_package(body: str, values: dict, timeout: float = 600,
                        blocked: Sequence[str] = BLOCKED_PACKAGES) -> dict:
    """Run ``body`` after the blocking preamble in a fresh, offline interpreter; return what it ``report``-ed.

    ``body`` sees ``values`` (this dict, JSON round-tripped, plus ``"blocked"``) and must end with
    ``report(result)``. Raises :class:`IsolatedRunError` when the child fails or runs past ``timeout`` seconds.
    """
    return _run_child(_WITHOUT_PACKAGE + body, {**values, "blocked": list(blocked)}, "", timeout)


def _run_child(script: str, values: dict, python_path: str, timeout: float) -> dict:
    """Run ``script`` with ``values`` as its JSON argument in a fresh, offline interpreter (a temporary working
    folder and modules cache; ``PYTHONPATH`` set to ``python_path``); the JSON object its last line prints."""
    with tempfile.TemporaryDirectory(prefix="miescore-isolated-") as workdir:
        env = {**os.environ, "PYTHONPATH": python_path, "HF_HUB_OFFLINE": "1",
               "HF_MODULES_CACHE": str(Path(workdir) / "modules")}
        try:
            done = subprocess.run([sys.executable, "-c", script, json.dumps(values)], cwd=workdir, env=env,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise IsolatedRunError(f"the fresh interpreter ran past {timeout:g} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise IsolatedRunError(f"the fresh interpreter failed (exit {done.returncode}): "
                               f"{done.stderr.strip()[-3000:] or 'no output'}")
    return json.loads(lines[-1])


def load_and_score_without_package(jobs: Sequence[IsolatedLoadJob], timeout: float = 600) -> dict:
    """Load and score each job's checkpoint with ``trust_remote_code`` in one fresh interpreter (the Hub-boundary
    test, ``miescore doctor --trust-remote-code``).

    Returns ``{"results": [...], "loaded": [blocked packages imported anyway]}``, one result per job:
    ``{"config": the AutoConfig as a dict, "classes": {auto class: "module.Class"}, "scores": [...]}`` for a
    MIEScore checkpoint (``score_batch``'s dicts) or ``"judgements": [{"reward", "failed", "raw_sc", "raw_pq"}]``
    for a SpatialReward one.
    """
    return run_without_package(_LOAD_AND_SCORE, {"jobs": _payload(jobs)}, timeout=timeout)


def _payload(jobs: Sequence[IsolatedLoadJob]) -> list:
    return [asdict(job) | {"auto_classes": list(job.auto_classes)} for job in jobs]


def load_and_score_with_package(jobs: Sequence[IsolatedLoadJob], timeout: float = 600) -> dict:
    """Load and score each job's checkpoint through the installed package in one fresh interpreter (the doctor's
    default).

    Nothing from the checkpoint folder is imported (``load_scorer`` / ``load_spatialreward`` use the package's
    classes and the stock processor). Returns ``{"results": [...], "checkpoint_modules": [...]}``: per job
    ``{"classes": {"installed": "module.Class"}, "scores" | "judgements": ...}`` as
    :func:`load_and_score_without_package` gives them, and the ``transformers_modules.*`` modules that were
    imported anyway (checkpoint code; must be empty).
    """
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding modeling_miescore/
    return _run_child(_LOAD_WITH_PACKAGE, {"jobs": _payload(jobs)}, package_root, timeout)


__all__ = ["BLOCKED_PACKAGES", "IsolatedLoadJob", "IsolatedRunError", "load_and_score_with_package",
           "load_and_score_without_package", "run_without_package"]
