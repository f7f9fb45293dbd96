"""Assemble a ready-to-push Hugging Face Space folder from this checkout (``miescore space build``).

Two kinds: ``scorer`` (the Gradio Space of ``spaces/miescore``) and ``metric`` (the ``evaluate`` metric Space of
``spaces/miescore_metric``). The folder gets the Space's files as they are, plus ``README.md`` with its front
matter completed through ``huggingface_hub.SpaceCard`` (``sdk_version``, ``suggested_hardware``, the scorer's
``models``), ``requirements.txt`` with the ``miescore[...]`` line pinned to this version or to a wheel of this
checkout (``wheel=True``), ``space_models.json`` (scorer) and the metric script named after the folder, which must
be the Space's name (``evaluate.load("ORG/NAME")`` reads ``NAME.py``). Front matter keys and hardware flavours:
https://huggingface.co/docs/hub/spaces-config-reference. The folder is written beside ``out`` and renamed into
place, so an interrupted build leaves nothing half-written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from .. import __version__
from ..hub.errors import MIEScoreInputError
from ..utils.output_paths import OutputPathError, check_folder_apart, ensure_folder, real_path
from .models import SPACE_MODELS_FILE, space_models_text

KINDS = {"scorer": "miescore", "metric": "miescore_metric"}  # kind -> folder under spaces/
PLACEHOLDER_MODELS = {"model": "your-org/miescore-8b", "spatialreward_model": "your-org/spatialreward-8b"}
GENERATED = ("README.md", "requirements.txt")
# Suggested hardware (flavour names from the Spaces config reference). Both models are Qwen3-VL-8B: ~8.8B
# parameters, ~17.5 GB in bfloat16 before activations. One model fits the 24 GB of an L4, which also has the
# 30 GB of RAM the weights pass through while loading (a10g-small has 24 GB of GPU memory but only 15 GB of
# RAM); both models stay loaded together (~35 GB), which needs the 48 GB of an L40S. The metric needs no GPU.
HARDWARE_ONE_MODEL = "l4x1"
HARDWARE_TWO_MODELS = "l40sx1"
HARDWARE_METRIC = "cpu-basic"


@dataclass
class SpaceFolder:
    """What :func:`build_space_folder` wrote: the folder, its files, the requirement line and any placeholders."""

    folder: Path
    files: list[str]
    requirement: str
    placeholders: list[str] = field(default_factory=list)


def checkout_root() -> Path:
    """The repository checkout this package lives in (it holds ``spaces/`` and ``setup.cfg``)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "spaces").is_dir() or not (root / "setup.cfg").is_file():
        raise MIEScoreInputError(
            f"no MIEScore checkout around the package ('{root}' has no spaces/ folder or setup.cfg): "
            "`miescore space build` assembles the Space from a clone of the repository; run it there "
            "(pip install -e . in the clone)")
    return root


def space_hardware_flavours() -> list[str]:
    from huggingface_hub import SpaceHardware

    return [flavour.value for flavour in SpaceHardware]


def suggested_hardware(kind: str, n_models: int) -> str:
    if kind == "metric":
        return HARDWARE_METRIC
    return HARDWARE_ONE_MODEL if n_models == 1 else HARDWARE_TWO_MODELS


def _gradio_version() -> str:
    try:
        return version("gradio")
    except PackageNotFoundError:
        raise MIEScoreInputError("gradio is not installed; the Space's sdk_version is the installed gradio's: "
                                 "pip install -e \".[space]\"") from None


def _repo_id_problem(reference: str) -> str | None:
    """Why ``reference`` is no Hub repo id (``huggingface_hub``'s words), or None."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(reference)
    except HFValidationError as err:
        return str(err)
    return None


def _check_repo_id(reference: str, option: str) -> str:
    if problem := _repo_id_problem(reference):
        raise MIEScoreInputError(f"{option} '{reference}' is not a Hub repo id ({problem}); a Space loads its models "
                                 "from the Hub: pass ORG/NAME")
    if "/" not in reference:
        raise MIEScoreInputError(f"{option} '{reference}' has no owner; pass ORG/NAME")
    return reference


def space_models(kind: str, model: str | None, spatialreward_model: str | None) -> tuple[dict, list[str]]:
    """``({"model": ..., "spatialreward_model": ...}, placeholders)``: the served repos (None: not served) and the
    placeholder ids the README lists when neither model was given (metric: no models)."""
    if kind == "metric":
        if model or spatialreward_model:
            raise MIEScoreInputError("the metric Space loads no model: drop --model / --spatialreward-model")
        return {}, []
    given = {"model": model and _check_repo_id(model, "--model"),
             "spatialreward_model": spatialreward_model and _check_repo_id(spatialreward_model,
                                                                         "--spatialreward-model")}
    if any(given.values()):
        return given, []
    return given, list(PLACEHOLDER_MODELS.values())


def readme_text(source_readme: Path, *, kind: str, models: list[str], hardware: str) -> str:
    """The checkout's README with ``sdk_version``, ``suggested_hardware`` and ``models`` set in its front matter."""
    from huggingface_hub import SpaceCard

    card = SpaceCard.load(source_readme)
    card.data.sdk_version = _gradio_version()
    card.data.suggested_hardware = hardware
    if kind == "scorer":
        card.data.models = models
    return str(card) + ("" if str(card).endswith("\n") else "\n")


def requirements_text(source_requirements: Path, requirement: str) -> str:
    """The checkout's requirements with its ``miescore[...]`` line replaced by ``requirement``."""
    _, others = _split_requirements(source_requirements)
    header = f"# Written by `miescore space build` (miescore {__version__}); the Space installs the library from here."
    return "\n".join([header, requirement, *others]) + "\n"


def _split_requirements(source_requirements: Path) -> tuple[str, list[str]]:
    """``(extras of its miescore line, e.g. "[space]", the other requirement lines)``."""
    lines = [line.strip() for line in source_requirements.read_text(encoding="utf-8").splitlines()]
    extras, others = None, []
    for line in (line for line in lines if line and not line.startswith("#")):
        try:
            parsed = Requirement(line)
        except InvalidRequirement:
            parsed = None
        if parsed is not None and parsed.name == "miescore" and extras is None:
            extras = f"[{','.join(sorted(parsed.extras))}]" if parsed.extras else ""
        elif parsed is None or parsed.name != "miescore":
            others.append(line)
    if extras is None:
        raise MIEScoreInputError(f"'{source_requirements}' has no miescore[...] line to pin")
    return extras, others


def build_wheel(into: Path, root: Path | None = None) -> Path:
    """A wheel of this checkout in ``into`` (``pip wheel --no-deps``), built from a copy of the package files so
    the checkout gets no build/ or egg-info folders; returns its path."""
    root = root or checkout_root()
    with tempfile.TemporaryDirectory(prefix="miescore-wheel-") as scratch:
        source = Path(scratch) / "src"
        source.mkdir()
        for name in ("pyproject.toml", "setup.cfg", "README.md"):
            shutil.copy2(root / name, source / name)
        shutil.copytree(root / "modeling_miescore", source / "modeling_miescore",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # --no-build-isolation: build with the installed setuptools/wheel, no download of a build environment.
        command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--quiet",
                   "--wheel-dir", str(into), str(source)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise MIEScoreInputError(f"building the miescore wheel failed (pip wheel exit {done.returncode}): "
                                     f"{(done.stderr or done.stdout).strip()[-600:]}")
    wheels = sorted(into.glob(f"miescore-{__version__}-*.whl"))
    if len(wheels) != 1:
        raise MIEScoreInputError(f"pip wheel wrote {[w.name for w in wheels]} into '{into}'; expected one "
                                 f"miescore-{__version__} wheel")
    return wheels[0]


def metric_script_name(space_name: str) -> str:
    """``evaluate.load("ORG/NAME")`` (and ``evaluate.load(folder)``) reads ``NAME.py``: the metric script is
    named after the Space; raises :class:`MIEScoreInputError` when ``space_name`` cannot be a Space name."""
    if _repo_id_problem(f"org/{space_name}"):
        raise MIEScoreInputError(f"'{space_name}' cannot be a Space name: the metric folder is named after its "
                                 "Space (evaluate.load('ORG/NAME') reads NAME.py); use letters, digits, '-', "
                                 "'_' and '.'")
    if space_name == "app":
        raise MIEScoreInputError("a metric Space cannot be named 'app': its script would replace app.py")
    return f"{space_name}.py"


def _write_space_files(folder: Path, kind: str, models: dict, placeholders: list[str], hardware: str,
                       wheel: bool, space_name: str) -> str:
    """Fill the (new, empty) ``folder``; returns the miescore requirement line."""
    source = checkout_root() / "spaces" / KINDS[kind]
    for path in sorted(source.iterdir()):
        if path.is_file() and path.name not in GENERATED and path.suffix != ".pyc":
            target = path.name
            if kind == "metric" and path.name == f"{KINDS[kind]}.py":
                target = metric_script_name(space_name)
            shutil.copy2(path, folder / target)
    extras, _ = _split_requirements(source / "requirements.txt")
    if wheel:
        # pip reads a path with extras, relative to the folder it runs in (the Space repository's root).
        requirement = f"./{build_wheel(folder).name}{extras}"
    else:
        requirement = f"miescore{extras}=={__version__}"
    (folder / "requirements.txt").write_text(requirements_text(source / "requirements.txt", requirement),
                                             encoding="utf-8")
    listed = [ref for ref in models.values() if ref] or placeholders
    (folder / "README.md").write_text(readme_text(source / "README.md", kind=kind, models=listed,
                                                  hardware=hardware), encoding="utf-8")
    if kind == "scorer":
        (folder / SPACE_MODELS_FILE).write_text(space_models_text(models["model"], models["spatialreward_model"]),
                                                encoding="utf-8")
    return requirement


def build_space_folder(out: str | os.PathLike, kind: str = "scorer", *, model: str | None = None,
                       spatialreward_model: str | None = None, hardware: str | None = None, wheel: bool = False,
                       overwrite: bool = False) -> SpaceFolder:
    """Assemble the ``kind`` Space into ``out`` (see the module docstring); raises :class:`MIEScoreInputError`
    for an unknown kind or hardware flavour, a bad repo id, or an existing ``out`` without ``overwrite``.

    The metric script is named after the folder (``out.name``), which must be the Space's name.
    """
    if kind not in KINDS:
        raise MIEScoreInputError(f"unknown Space kind '{kind}'; choose one of {sorted(KINDS)}")
    given, out = out, real_path(out, "--out")
    # the Space's files come from spaces/<kind> of the checkout: --out (which an --overwrite replaces) stays apart
    # from that folder, and never holds the checkout itself (a folder inside the checkout is fine)
    root = checkout_root()
    check_folder_apart(out, {f"the Space's source folder spaces/{KINDS[kind]}": root / "spaces" / KINDS[kind]})
    check_folder_apart(out, {"the package checkout": root}, allow_inside=True)
    if out.exists() and not overwrite:
        raise MIEScoreInputError(f"'{out}' already exists; choose a new folder or pass --overwrite to replace it")
    if out.exists() and not out.is_dir():
        raise MIEScoreInputError(f"'{out}' is a file; --out must name a folder")
    if kind == "metric":
        metric_script_name(out.name)  # check the name before any work
    models, placeholders = space_models(kind, model, spatialreward_model)
    n_models = len([ref for ref in models.values() if ref] or placeholders)
    hardware = hardware or suggested_hardware(kind, n_models)
    if hardware not in space_hardware_flavours():
        raise MIEScoreInputError(f"unknown hardware flavour '{hardware}'; choose one of "
                                 f"{', '.join(space_hardware_flavours())}")
    ensure_folder(out.parent, "--out")
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as err:
        raise OutputPathError(f"--out '{given}': cannot write in '{out.parent}' ({err.strerror}); pass a folder you "
                              "can write to") from None
    umask = os.umask(0)
    os.umask(umask)
    staging.chmod(0o777 & ~umask)  # mkdtemp makes it private; the Space folder gets the usual permissions
    try:
        requirement = _write_space_files(staging, kind, models, placeholders, hardware, wheel, out.name)
        files = sorted(p.name for p in staging.iterdir())
        _move_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return SpaceFolder(out, files, requirement, placeholders)


def _move_into_place(staging: Path, out: Path) -> None:
    """Rename ``staging`` to ``out``; an existing ``out`` is moved aside first and removed after the rename."""
    if not out.exists():
        os.rename(staging, out)
        return
    aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
    os.rename(out, aside / out.name)
    try:
        os.rename(staging, out)
    except OSError:
        os.rename(aside / out.name, out)  # put the old folder back
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)


__all__ = ["HARDWARE_METRIC", "HARDWARE_ONE_MODEL", "HARDWARE_TWO_MODELS", "KINDS", "PLACEHOLDER_MODELS",
           "SpaceFolder", "build_space_folder", "build_wheel", "checkout_root", "metric_script_name", "readme_text",
           "requirements_text", "space_hardware_flavours", "space_models", "suggested_hardware"]
