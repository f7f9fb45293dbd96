"""``miescore benchmark editors-demo``: the editor benchmarks end to end with nothing downloaded, as ``miescore demo``
is for scoring. Every number it prints comes from **random weights**: it shows the path, not a result.

Each step is a ``miescore`` command run in this process and printed as it runs, so the run is the documented path:
tiny GEdit / ImgEdit releases converted, a tiny random MIEScore judge, edits by a tiny editor (base and tuned with
``--lora RUN``, otherwise best-of-2 with ``--select``), both benchmarks, then ``benchmark editors``. Every report
carries the label :data:`DEMO_LABEL`. ``OUT`` must be new or empty (nothing is overwritten).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import List, Optional

from ..hub.errors import MIEScoreInputError
from .main import main

__all__ = ["DEMO_LABEL", "demo_editor_args", "run_offline_demo"]

DEMO_LABEL = "RANDOM WEIGHTS: a demo of the editor-benchmark path; these numbers mean nothing"
SELECTOR = "modeling_miescore.testing.editor_rewards:mean_redness"
BENCHMARKS = {"gedit": "gedit-bench", "imgedit": "imgedit-bench"}


def _run(argv: List[str], log: List[str]) -> None:
    """One ``miescore`` command, printed first; a failure stops the demo with the command's own message."""
    line = "miescore " + " ".join(shlex.quote(str(a)) for a in argv)
    print(f"\n$ {line}", file=sys.stderr, flush=True)
    log.append(line)
    status = main([str(a) for a in argv])
    if status != 0:
        raise MIEScoreInputError(f"the demo step '{line}' exited with status {status}")


def _fixtures(out: Path, log: List[str]) -> dict:
    from ..testing import raw_benchmarks as rb  # deferred: loads httpcore, httpx

    rb.make_raw_gedit_bench(out / "raw" / "gedit", tasks={"background_change": 2, "subject-add": 2,
                                                         "color_alter": 2}, languages=("en",), source_side=64)
    rb.make_raw_imgedit_bench(out / "raw" / "imgedit", types=("add", "remove", "adjust"), per_type=2,
                              images="Benchmark", source_side=64)
    data = {kind: out / "data" / kind for kind in BENCHMARKS}
    _run(["convert-benchmark", "gedit-bench", "--raw", out / "raw" / "gedit", "--out", data["gedit"],
          "--no-progress"], log)
    _run(["convert-benchmark", "imgedit-bench", "--raw", out / "raw" / "imgedit", "--images", "Benchmark",
          "--out", data["imgedit"], "--no-progress"], log)
    return data


def demo_editor_args(lora: Optional[str], out: Path) -> tuple[list, Optional[list]]:
    """``(base editor arguments, tuned editor arguments or None)`` of ``miescore edit``."""
    if lora is None:
        from ..testing.tiny_editors import TINY_EDITOR_OPTIONS, build_tiny_editor

        model = build_tiny_editor("flux2-klein", out / "models" / "flux2-klein")
        return ["--pipeline", "flux2-klein", "--model", model, "--editor-options",
                json.dumps(TINY_EDITOR_OPTIONS["flux2-klein"]), "--steps", "4", "--cfg-scale", "1"], None
    from ..training.editor_rl.outputs import SAMPLING_FIELDS, read_sampling  # deferred: loads diffusers, torch

    sampling = read_sampling(lora)
    if sampling is None:
        raise MIEScoreInputError(f"--lora '{lora}' has no run.json from a training run (trainers/flow_grpo_editor.py)"
                                 "; the demo compares a run with its base editor")
    # the base editor samples as `edit --lora RUN` does, without the adapter: every recorded field that is an
    # option of `miescore edit` (editor_rl.outputs.SAMPLING_FIELDS; height and width are inside the editor options)
    base = []
    for field, option in SAMPLING_FIELDS.items():
        value = sampling.get(field)
        if option is None or value is None or (option == "--editor-options" and field != "editor_options"):
            continue
        base += [option, json.dumps(value) if field == "editor_options" else value]
    return base, ["--lora", lora]


def run_offline_demo(out, lora: Optional[str] = None, device: str = "cpu") -> dict:
    """Run the demo into ``out`` (module docstring); ``{"commands": [...], "comparison": report folder}``."""
    from ..testing.tiny_miescore import build_tiny_miescore  # deferred: loads httpcore, httpx

    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MIEScoreInputError(f"--out '{out}' exists and is not an empty folder; pass a new folder")
    log: List[str] = []
    data = _fixtures(out, log)
    judge = build_tiny_miescore(out / "models" / "tiny-miescore")
    base, tuned = demo_editor_args(lora, out)
    runs = {"base": base} if tuned is None else {"base": base, "tuned": tuned}
    reports = {}
    for name, editor in runs.items():
        selection = ["--num-images", "2", "--select", SELECTOR] if tuned is None else []
        for kind in BENCHMARKS:
            edits = out / "edits" / f"{kind}-{name}"
            _run(["edit", *editor, "--dataset", data[kind], "--out", edits, *selection, "--device", device,
                  "--no-progress"], log)
            reports[name, kind] = out / "reports" / f"{kind}-{name}"
            _run(["benchmark", kind, "--dataset", data[kind], "--edits", edits / "edits.jsonl", "--out",
                  reports[name, kind], "--judge", f"miescore:{judge}", "--device", device, "--label", DEMO_LABEL,
                  "--bootstrap", "200", "--no-progress"], log)
    comparison = out / "reports" / "comparison"
    _run(["benchmark", "editors", "--runs",
          *[f"{name}={reports[name, 'gedit']},{reports[name, 'imgedit']}" for name in runs],
          "--by", "miescore", "--out", comparison, "--label", DEMO_LABEL, "--bootstrap", "200", "--no-progress"], log)
    return {"commands": log, "comparison": comparison}
