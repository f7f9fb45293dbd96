"""Load a checkpoint in a fresh Python: the way a stranger does (this package and its extras missing, the
checkpoint's own code run), or through the installed package with nothing from the folder run.

A checkpoint must work with ``AutoModel.from_pretrained(path, trust_remote_code=True)`` alone: its Hub code files
may import only each other, torch, transformers, numpy, Pillow, tqdm and the standard library. The blocked
packages get a ``None`` entry in ``sys.modules``, so ``find_spec`` answers None as when not installed; what
transformers itself needs to load a Qwen3-VL checkpoint is not blocked.
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
    """One checkpoint to load and score in a fresh interpreter."""

    path: str
    records: list  # edits to score: {"sources": [paths], "edited": path, "instruction": text}
    auto_classes: Sequence[str] = ("AutoModel",)  # without the package: loaded in order, the first one scores
    batch_size: int = 8
    device: str = "cpu"
    dtype: str = "float32"  # a torch dtype name
    kind: str = "miescore"  # or "spatialreward": the installed loader used with the package


def run_without_package(body: str, values: dict, timeout: float = 600,
                        blocked: Sequence[str] = BLOCKED_PACKAGES) -> dict:
    """Run ``body`` after the blocking preamble in a fresh, offline interpreter; return what it ``report``-ed.
    ``body`` sees ``values`` (JSON round-tripped, plus ``"blocked"``) and must end with ``report(result)``."""
    return _run_child(_WITHOUT_PACKAGE + body, {**values, "blocked": list(blocked)}, "", timeout)


def _run_child(script: str, values: dict, python_path: str, timeout: float) -> dict:
    """Run ``script`` with ``values`` as its JSON argument in a fresh, offline interpreter (a temporary working
    folder and modules cache); the JSON object its last line prints."""
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
    test, ``miescore doctor --trust-remote-code``); ``"loaded"``: the blocked packages imported anyway."""
    return run_without_package(_LOAD_AND_SCORE, {"jobs": _payload(jobs)}, timeout=timeout)


def _payload(jobs: Sequence[IsolatedLoadJob]) -> list:
    return [asdict(job) | {"auto_classes": list(job.auto_classes)} for job in jobs]


def load_and_score_with_package(jobs: Sequence[IsolatedLoadJob], timeout: float = 600) -> dict:
    """Load and score each job's checkpoint through the installed package in one fresh interpreter (the doctor's
    default); ``"checkpoint_modules"``: the ``transformers_modules.*`` imported anyway (must be empty)."""
    package_root = str(Path(__file__).resolve().parents[2])  # the folder holding modeling_miescore/
    return _run_child(_LOAD_WITH_PACKAGE, {"jobs": _payload(jobs)}, package_root, timeout)


__all__ = ["BLOCKED_PACKAGES", "IsolatedLoadJob", "IsolatedRunError", "load_and_score_with_package",
           "load_and_score_without_package", "run_without_package"]
