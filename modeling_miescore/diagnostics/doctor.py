"""``miescore doctor CKPT``: is this checkpoint sane? Run before trusting a downloaded or freshly trained one.

The checks (listed in ``docs/scoring.md``) run in order; each gives ``ok``, ``warn``, ``error`` or ``skip``. A
check is a function ``check(ctx: DoctorContext) -> CheckResult``; one that needs what an earlier check failed to load
calls :meth:`DoctorContext.need` and is skipped, so one fault is reported once. An exception inside a check
becomes an ``error`` for that check, never a crash. Exit status: 0 healthy, 1 warnings, 2 broken.

The example edits are scored as made and perturbed so that a scorer reading its inputs must react: the edited
image replaced by a source (instruction following drops), heavy noise and blur (visual quality drops), the
sources swapped (attribute preservation moves). Directions not observed are warnings only.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import platform
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
from PIL import Image, ImageFilter

from ..data.example_edits import example_edits, save_example_files
from ..hub.backbone_families import backbone_config_of
from ..hub.errors import MIEScoreInputError
from ..scoring.loading import load_scorer, load_spatialreward, read_checkpoint_config, resolve_device, resolve_dtype
from ..scoring.checkpoint_files import ModelLoadError, PICKLE_SUFFIXES, validate_checkpoint_folder
from ..hub.processing_miescore import build_messages, image_size_kwargs, num_image_tokens
from ..hub.spatialreward_tokens import GROUNDING_TOKENS
from . import isolated_load, token_budget

STATUSES = ("ok", "warn", "error", "skip")


@dataclass
class CheckResult:
    """One check's record: ``status`` (one of :data:`STATUSES`), a one-line ``message``, ``details``; the runner
    (:func:`run_check`) fills in the check's ``name`` and ``seconds``."""

    status: str
    message: str
    details: dict = field(default_factory=dict)
    name: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "message": self.message,
                "details": jsonable(self.details), "seconds": round(self.seconds, 3)}


def _finding(status: str) -> Callable:
    return lambda message, **details: CheckResult(status, message, details)


ok, warn, error, skip = map(_finding, STATUSES)  # ok(message, **details) -> CheckResult("ok", message, details)


class CheckSkipped(Exception):
    """A check cannot run because something it needs did not load; the message says what and where."""


# what DoctorContext.need(name) waits for -> the check that provides it
_PROVIDERS = {"config": "config_processor", "processor": "config_processor", "model": "load"}


class DoctorContext:
    """The state the checks of one run share.

    Attributes:
        path / kind: the checkpoint folder and ``"miescore"`` or ``"spatialreward"``.
        device / dtype: where and in which torch dtype the model runs (``dtype_name``: e.g. ``"float32"``).
        quick / fresh_process / trust_remote_code: the run's options (``trust_remote_code``: the fresh process
            loads with the checkpoint's own code, as a stranger would). workdir: a temporary folder for images.
        faults: ``{check name: message}`` of the checks that gave an error so far (later checks that would only
            repeat one, such as the perturbation directions of constant scores, skip).
        config / processor / model: set by the checks that load them (None until then, or when they failed).
        fresh: what the fresh-process load scored (``{"records", "result", "batch_size"}``), when it ran.
    """

    def __init__(self, path, kind: str, device: str, dtype, quick: bool = False, fresh_process: bool = True,
                 model=None, trust_remote_code: bool = False):
        self.path, self.kind, self.device, self.dtype = Path(path), kind, device, dtype
        self.dtype_name = str(dtype).removeprefix("torch.")
        self.quick, self.fresh_process, self.trust_remote_code = quick, fresh_process, trust_remote_code
        self.faults: dict = {}
        self.config = self.processor = None
        self.model, self.given_model = model, model is not None
        self.fresh: dict | None = None
        self._workdir = tempfile.TemporaryDirectory(prefix="miescore-doctor-")
        self.workdir = Path(self._workdir.name)
        self._scores: list | None = None
        self._scoring_error: str | None = None

    def close(self) -> None:
        self._workdir.cleanup()

    def need_sound(self, *checks: str) -> None:
        """Raise :class:`CheckSkipped` when one of ``checks`` gave an error (its result already says what is
        wrong, and what follows from it would only repeat it)."""
        for name in checks:
            if name in self.faults:
                raise CheckSkipped(f"not meaningful after the error of '{name}' ({self.faults[name][:120]})")

    def need(self, *names: str) -> None:
        """Raise :class:`CheckSkipped` when one of ``names`` (``config``, ``processor``, ``model``) is missing."""
        for name in names:
            if getattr(self, name) is None:
                raise CheckSkipped(f"needs the {name}, which did not load (see '{_PROVIDERS[name]}')")

    @functools.cached_property
    def edits(self) -> list:
        """The edits every score check uses, originals first (:func:`doctor_edits`). The runner makes them before
        any check, so a missing scikit-image is one user error (``MIEScoreInputError``), not a failure of every
        check that scores."""
        return doctor_edits(quick=self.quick)

    def originals(self) -> list:
        return [edit for edit in self.edits if edit.variant == "original"]

    def score(self, samples: list, batch_size: int = 8) -> list:
        """MIEScore: ``score_batch``'s dicts; SpatialReward: ``evaluate_edits``' results."""
        self.need("model")
        if self.kind == "miescore":
            return self.model.score_batch(samples, batch_size=batch_size)
        return self.model.evaluate_edits(samples, batch_size=batch_size)

    def scores(self) -> list:
        """The outputs for :attr:`edits`, in order; scored once, by the first check that asks."""
        self.need("model")
        if self._scoring_error is not None:
            raise CheckSkipped(f"scoring the example edits failed ({self._scoring_error})")
        if self._scores is None:
            try:
                self._scores = self.score([edit.as_sample() for edit in self.edits])
            except Exception as err:
                self._scoring_error = f"{type(err).__name__}: {err}"
                raise
        return self._scores

    def scores_by(self, value) -> dict:
        """``{(example, variant): value(output)}`` over the scored edits."""
        pairs = zip(self.edits, self.scores(), strict=True)
        return {(edit.example, edit.variant): value(output) for edit, output in pairs}


def jsonable(value: Any) -> Any:
    """``value`` with tuples as lists, non-finite floats as strings (``"nan"``) and other objects as ``str``."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


NOISE_SIGMA = 64.0  # of 255
BLUR_FRACTION = 1 / 32  # blur radius as a fraction of the longer side
VARIANTS = ("original", "source_as_edited", "noise", "blur", "swapped_sources")


@dataclass
class DoctorEdit:
    """One edit to score: ``example`` is the bundled example's id, ``variant`` one of :data:`VARIANTS`."""

    example: str
    variant: str
    sources: list
    edited: Image.Image
    instruction: str

    def as_sample(self) -> dict:
        return {"sources": list(self.sources), "edited": self.edited, "instruction": self.instruction}


def add_noise(image: Image.Image, sigma: float = NOISE_SIGMA, seed: int = 0) -> Image.Image:
    """``image`` plus Gaussian noise of ``sigma`` (0-255 scale), clipped; deterministic for a seed."""
    array = np.asarray(image.convert("RGB"), dtype=np.float32)
    noisy = array + np.random.default_rng(seed).normal(0.0, sigma, array.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def blur(image: Image.Image, fraction: float = BLUR_FRACTION) -> Image.Image:
    """A Gaussian blur whose radius is ``fraction`` of the longer side."""
    return image.filter(ImageFilter.GaussianBlur(max(1.0, fraction * max(image.size))))


def perturb(example: dict, variant: str, seed: int = 0) -> DoctorEdit:
    """The ``variant`` of one example edit (a dict of ``data.example_edits``)."""
    sources, edited = list(example["sources"]), example["edited"]
    if variant == "source_as_edited":
        edited = sources[0]
    elif variant == "noise":
        edited = add_noise(edited, seed=seed)
    elif variant == "blur":
        edited = blur(edited)
    elif variant == "swapped_sources":
        sources = sources[::-1]
    elif variant != "original":
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")
    return DoctorEdit(example=example["id"], variant=variant, sources=sources, edited=edited,
                      instruction=example["instruction"])


def doctor_edits(quick: bool = False) -> list[DoctorEdit]:
    """Every example in every variant, originals first. ``quick``: three examples at 128 px instead of all five at
    256 px. Needs scikit-image (the photos); a missing one is a user error naming the fix."""
    try:
        examples = example_edits(max_side=128 if quick else 256)
    except (ImportError, RuntimeError) as err:
        raise MIEScoreInputError(f"the doctor's example edits need scikit-image's photos ({err}); "
                                 "install it with: pip install scikit-image") from None
    examples = examples[:3] if quick else examples
    return [perturb(example, variant, seed=k) for variant in VARIANTS for k, example in enumerate(examples)
            if variant != "swapped_sources" or len(example["sources"]) > 1]


# The vision markers every image becomes in a Qwen-VL prompt, and the config fields holding their ids.
VISION_TOKENS = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
                 "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
_SAMPLE_INSTRUCTION = "Put the cat from image 2 on the table of image 1."


def remote_code_closure(folder, auto_map: dict) -> tuple:
    """``(needed, missing)``: the code files ``trust_remote_code`` would import for ``auto_map`` (its modules and
    their relative imports, in the order found) and those of them the folder lacks."""
    from transformers.dynamic_module_utils import get_relative_imports

    folder = Path(folder)
    # "module.Class"; "org/repo--module.Class" names code in another repository, which is not checked here
    todo = [value.split(".")[0] + ".py" for value in auto_map.values() if isinstance(value, str) and "--" not in value]
    needed, missing = [], []
    while todo:
        name = todo.pop(0)
        if name in needed:
            continue
        needed.append(name)
        if not (folder / name).is_file():
            missing.append(name)
            continue
        todo += [f"{module}.py" for module in get_relative_imports(folder / name)]
    return needed, sorted(missing)


def remote_code_files(folder) -> list:
    """``[{"file", "sha256"}]`` of the code files that ``AutoModel.from_pretrained(folder, trust_remote_code=True)``
    would run (config.json's ``auto_map`` and their relative imports), sorted by name: what a user trusts."""
    folder = Path(folder)
    auto_map = read_checkpoint_config(str(folder)).get("auto_map") or {}
    needed, missing = remote_code_closure(folder, auto_map)
    return [{"file": name, "sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest()}
            for name in sorted(set(needed) - set(missing))]


# Processor files whose auto_map would make AutoProcessor / AutoTokenizer(trust_remote_code=True) run code.
_PROCESSOR_JSON = ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json",
                   "video_preprocessor_config.json")


def _processor_code(folder: Path) -> list:
    """``"file: module.Class"`` for every auto_map entry of the processor files (never run by this package)."""
    found = []
    for name in _PROCESSOR_JSON:
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        maps = [data.get("auto_map")] + [v.get("auto_map") for v in data.values() if isinstance(v, dict)]
        for auto_map in filter(None, maps):
            values = auto_map.values() if isinstance(auto_map, dict) else []
            for value in values:
                found += [f"{name}: {v}" for v in (value if isinstance(value, list) else [value]) if v]
    return found


def check_files(ctx: DoctorContext):
    """Weights in safetensors, no pickles beside them; the code files that ``trust_remote_code`` runs."""
    names = sorted(p.name for p in ctx.path.iterdir())
    weights = [n for n in names if n.endswith(".safetensors")]
    pickles = [n for n in names if n.endswith(PICKLE_SUFFIXES)]
    config = read_checkpoint_config(str(ctx.path))
    auto_map = config.get("auto_map") or {}
    details = {"weights": weights, "pickle_files": pickles, "auto_map": auto_map,
               "remote_code": remote_code_files(ctx.path), "processor_code": _processor_code(ctx.path)}

    try:
        validate_checkpoint_folder(ctx.path, config)
    except ModelLoadError as err:
        return error(str(err), **details)
    _, missing = remote_code_closure(ctx.path, auto_map)
    hub = Path(__file__).resolve().parents[1] / "hub"  # the installed Hub files, which a checkpoint's code copies
    differing = sorted(p.name for p in ctx.path.glob("*.py")
                       if (hub / p.name).is_file() and (hub / p.name).read_bytes() != p.read_bytes())
    details.update(missing_code=missing, code_differs_from_installed_package=differing)
    if ctx.kind == "miescore" and "AutoModel" not in auto_map:
        return error("config.json has no auto_map['AutoModel']: AutoModel.from_pretrained(..., "
                     "trust_remote_code=True) cannot load it; save it again with MIEScoreModel.save_pretrained",
                     **details)
    if missing:
        return error(f"code files that trust_remote_code needs are missing: {', '.join(missing)}; save the "
                     "checkpoint again with save_pretrained", **details)
    problems = []
    if pickles:
        problems.append(f"pickle files {', '.join(pickles)} lie beside the weights (never loaded here; remove them)")
    if differing:
        problems.append(f"its code differs from the installed package in {', '.join(differing)} (saved by another "
                        "version, or changed: trust_remote_code runs the checkpoint's copy, `miescore` the installed "
                        "one)")
    if details["processor_code"]:
        problems.append(f"its processor files name code to run ({'; '.join(details['processor_code'][:3])}): this "
                        "package never runs it, AutoProcessor/AutoTokenizer(trust_remote_code=True) would")
    if problems:
        return warn("; ".join(problems), **details)
    plain = "" if auto_map else " (a plain Qwen3-VL checkpoint: it loads through the installed package)"
    return ok(f"{len(weights)} safetensors file(s); code files complete and identical to the installed "
              f"package{plain}", **details)


def check_config_processor(ctx: DoctorContext):
    """The config (the package's config class) and the processor saved beside the weights both load."""
    ctx.need_sound("files")

    _, ctx.config, ctx.processor = token_budget.load_config_and_processor(str(ctx.path))
    processor = ctx.processor
    return ok(f"{type(ctx.config).__name__} and {type(processor).__name__} "
              f"({type(processor.tokenizer).__name__}, {type(processor.image_processor).__name__}) load",
              config=type(ctx.config).__name__, processor=type(processor).__name__)


def _single_token_id(tokenizer, token: str):
    ids = tokenizer.encode(token, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else None


def check_token_ids(ctx: DoctorContext):
    """Config vision-token ids = the tokenizer's and processor's; token ids fit the embedding; a pad token."""
    ctx.need("config", "processor")
    holder = backbone_config_of(ctx.config)  # the holder of the vision token ids
    text_config = holder.get_text_config()
    tokenizer = ctx.processor.tokenizer
    problems, ids = [], {}
    for name, token in VISION_TOKENS.items():
        in_config, in_tokenizer = getattr(holder, name, None), _single_token_id(tokenizer, token)
        ids[name] = {"config": in_config, "tokenizer": in_tokenizer}
        if in_tokenizer is None:
            problems.append(f"the tokenizer has no single token {token}")
        elif in_config != in_tokenizer:
            problems.append(f"config.{name} is {in_config} but the tokenizer's {token} is {in_tokenizer}")
    processor_id = getattr(ctx.processor, "image_token_id", None)
    if processor_id is not None and processor_id != getattr(holder, "image_token_id", None):
        problems.append(f"the processor's image_token_id is {processor_id}, the config's "
                        f"{getattr(holder, 'image_token_id', None)}")
    rows = int(text_config.vocab_size)
    if len(tokenizer) > rows:
        problems.append(f"the tokenizer has {len(tokenizer)} tokens but the embedding only {rows} rows")
    if tokenizer.pad_token_id is None:
        problems.append("the tokenizer has no pad token (batches cannot be padded)")
    details = {"ids": ids, "processor_image_token_id": processor_id, "tokenizer_size": len(tokenizer),
               "embedding_rows": rows, "pad_token": tokenizer.pad_token}
    if problems:
        return error("; ".join(problems) + ": the processor does not belong to these weights", **details)
    return ok(f"vision token ids agree (image {ids['image_token_id']['config']}); {len(tokenizer)} tokens fit "
              f"{rows} embedding rows; pad token {tokenizer.pad_token!r}", **details)


def check_vision_geometry(ctx: DoctorContext):
    """The image processor cuts patches the way the vision tower was built for."""
    ctx.need("config", "processor")
    vision = backbone_config_of(ctx.config).vision_config
    image_processor = ctx.processor.image_processor
    pairs = {"patch_size": ("patch_size", "patch_size"), "merge_size": ("merge_size", "spatial_merge_size"),
             "temporal_patch_size": ("temporal_patch_size", "temporal_patch_size")}
    values = {name: {"processor": getattr(image_processor, a, None), "vision_config": getattr(vision, b, None)}
              for name, (a, b) in pairs.items()}
    wrong = [f"{name} {v['processor']} (processor) vs {v['vision_config']} (vision config)"
             for name, v in values.items() if v["processor"] != v["vision_config"]]
    if wrong:
        return error("the image processor does not match the vision tower: " + "; ".join(wrong), **values)
    factor = values["patch_size"]["processor"] * values["merge_size"]["processor"]
    return ok(f"{values['patch_size']['processor']}-px patches merged {values['merge_size']['processor']}x"
              f"{values['merge_size']['processor']}: {factor} px per token side", **values)


def _prompt_messages(ctx: DoctorContext, num_sources: int) -> list:
    if ctx.kind == "miescore":
        return build_messages(num_sources, _SAMPLE_INSTRUCTION, ctx.config)[0]
    from ..hub.modeling_spatialreward import sc_messages  # deferred: loads torch, transformers

    return sc_messages(ctx.config, num_sources, _SAMPLE_INSTRUCTION)


def check_chat_template(ctx: DoctorContext):
    """The chat template exists and writes every image as vision start, image placeholder, vision end."""
    ctx.need("config", "processor")
    processor = ctx.processor
    if not (getattr(processor, "chat_template", None) or getattr(processor.tokenizer, "chat_template", None)):
        return error("the processor has no chat template (chat_template.jinja missing); save the processor of the "
                     "base model beside the weights")
    messages = _prompt_messages(ctx, num_sources=2)
    text = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    without_prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    marker = "<|vision_start|>" + processor.image_token + "<|vision_end|>"
    details = {"images_rendered": text.count(marker), "images_in_prompt": 3,
               "generation_prompt": text[len(without_prompt):] if text.startswith(without_prompt) else None}
    if text.count(marker) != 3:
        return error(f"the chat template renders {text.count(marker)} of the prompt's 3 images as {marker}",
                     **details)
    if _SAMPLE_INSTRUCTION not in text:
        return error("the chat template does not write the prompt text verbatim", **details)
    if text == without_prompt:
        return error("the chat template ignores add_generation_prompt (no assistant turn is opened)", **details)
    return ok(f"renders the 3 images of a 2-source prompt as {marker} and opens the assistant turn "
              f"{details['generation_prompt']!r}", **details)


def check_pixel_budget(ctx: DoctorContext):
    """The processor, called as the models call it, gives the image tokens the config's pixel budget implies."""
    ctx.need("config", "processor")

    vision = backbone_config_of(ctx.config).vision_config
    merge = int(vision.spatial_merge_size)
    factor = int(vision.patch_size) * merge
    budget = {"min_pixels": int(ctx.config.min_pixels), "max_pixels": int(ctx.config.max_pixels)}
    measured = {}
    for width, height in ((1000, 700), (64, 48), (2048, 2048)):
        image = Image.new("RGB", (width, height), (120, 90, 60))
        grid = ctx.processor.image_processor(images=[image], return_tensors="pt",
                                             **image_size_kwargs(ctx.config))["image_grid_thw"]
        measured[f"{width}x{height}"] = {"processor": int(grid.prod()) // merge**2,
                                         "config": num_image_tokens(width, height, factor=factor, **budget)}
    size = getattr(ctx.processor.image_processor, "size", None)
    defaults = {edge: getattr(size, edge, None) for edge in ("shortest_edge", "longest_edge")}
    details = {"config": budget, "processor_defaults": defaults, "tokens": measured}
    wrong = {k: v for k, v in measured.items() if v["processor"] != v["config"]}
    if wrong:
        return error("the processor makes other image-token counts than the config's budget implies: "
                     + "; ".join(f"{k}: {v['processor']} vs {v['config']}" for k, v in wrong.items()), **details)
    note = "" if defaults["longest_edge"] == budget["max_pixels"] else (
        f"; the processor's own default ({defaults['longest_edge']:,} px) applies only when it is called directly")
    return ok(f"{budget['min_pixels']:,}..{budget['max_pixels']:,} px per image, "
              f"{measured['2048x2048']['config']} tokens for a 2048x2048 image{note}", **details)


def check_grounding_tokens(ctx: DoctorContext):
    """SpatialReward's <|bbox_i|> / <|global|>: plain text (as released) or all single ids inside the embedding."""
    ctx.need("config", "processor")

    tokenizer = ctx.processor.tokenizer
    rows = int(backbone_config_of(ctx.config).get_text_config().vocab_size)
    single = {token: _single_token_id(tokenizer, token) for token in GROUNDING_TOKENS}
    registered = {token: i for token, i in single.items() if i is not None}
    details = {"registered": registered, "embedding_rows": rows}
    if not registered:
        return ok("written as plain text (as the released model does)", **details)
    if len(registered) < len(GROUNDING_TOKENS):
        return warn(f"only {len(registered)} of the {len(GROUNDING_TOKENS)} grounding tokens are single tokens; "
                    "register all of them (spatialreward_tokens.add_grounding_tokens) or none", **details)
    outside = sorted(token for token, i in registered.items() if i >= rows)
    if outside:
        return error(f"grounding tokens {', '.join(outside)} have ids beyond the {rows} embedding rows; resize the "
                     "embeddings (add_grounding_tokens does)", **details)
    return ok(f"all {len(registered)} grounding tokens are single ids inside the {rows} embedding rows", **details)


def _typical_rows(ctx: DoctorContext, limit: int) -> list:
    """Prompt lengths of the typical inputs (1-4 sources at 512 and 1024 px): MIEScore's prompt, SpatialReward's
    SC prompt plus ``max_new_tokens``; MIEScore rows say at which ``max_pixels`` the trainer fit them in ``limit``."""
    budgets = token_budget.checkpoint_budgets(str(ctx.path), loaded=(ctx.kind, ctx.config, ctx.processor))
    rows = []
    for budget in (b for b in budgets if b.num_sources):  # SpatialReward's PQ prompts have no sources
        shrink = token_budget.shrink_to_fit(budget, limit) if ctx.kind == "miescore" else None
        answer = 0 if ctx.kind == "miescore" else int(ctx.config.max_new_tokens)
        rows.append({"sources": budget.num_sources, "size": "{}x{}".format(*budget.image_size),
                     "tokens": budget.total + answer, "limit": limit, "shrink": shrink and shrink.action,
                     "shrink_max_pixels": shrink and shrink.max_pixels})
    return rows


def check_token_budget(ctx: DoctorContext):
    """Prompt lengths of typical inputs against the training length (information: what training did with longer
    ones) and the model's position limit. Warnings only for defects: an input beyond the position limit, or a
    recorded training length that contradicts the pixel budget (a typical input that cannot fit it at any
    image size, or a length beyond the position limit)."""
    ctx.need("config", "processor")

    training = token_budget.training_length(str(ctx.path), ctx.kind)
    positions = token_budget.position_limit(ctx.config)
    rows = _typical_rows(ctx, training.tokens)
    longest = max(rows, key=lambda r: r["tokens"])
    over = [r for r in rows if r["tokens"] > training.tokens]
    details = {"rows": rows, "training_length": training.tokens, "training_length_source": training.source,
               "position_limit": positions}
    defects = []
    beyond = [r for r in rows if positions is not None and r["tokens"] > positions]
    if beyond:
        worst = max(beyond, key=lambda r: r["tokens"])
        defects.append(f"{len(beyond)} typical input(s) exceed the model's position limit of {positions:,} tokens "
                       f"({worst['sources']} sources at {worst['size']}: {worst['tokens']:,}); lower max_pixels")
    if training.recorded and positions is not None and training.tokens > positions:
        defects.append(f"its training length {training.tokens:,} ({training.source}) is beyond the position limit "
                       f"{positions:,}")
    dropped = [r for r in rows if r["shrink"] == "dropped"]
    if training.recorded and dropped:
        defects.append(f"its training length {training.tokens:,} ({training.source}) cannot hold "
                       f"{len(dropped)} typical input(s) even at one token per image: its max_pixels / max_length "
                       "contradict each other (training dropped such inputs)")
    if defects:
        return warn("; ".join(defects), **details)
    span = f"typical inputs take {min(r['tokens'] for r in rows):,}-{longest['tokens']:,} tokens"
    if not over:
        return ok(f"{span}, all within the training length {training.describe()}", **details)
    if ctx.kind == "miescore":
        fitted = min(r["shrink_max_pixels"] for r in over)
        what = (f"training shrinks their images to fit (down to max_pixels {fitted:,}); scoring does not, so they "
                f"are scored at the full budget, longer than any training sequence (pass max_pixels={fitted:,} to "
                "score them as trained)")
    else:
        what = "SpatialReward SFT drops such rows; scoring takes them whole"
    within = f"; all within the position limit {positions:,}" if positions else ""
    return ok(f"{span}; {len(over)} of {len(rows)} exceed the training length {training.describe()}: {what}"
              f"{within}", **details)


FRESH_EDITS = 2  # edits the fresh process scores and the installed package scores again
# Largest difference (score points, or reward) between the fresh process and the installed package that counts
# as the same, (in float32, in half precision): float32 runs the same kernels on the same inputs; half precision
# rounds to ~1e-2 per layer.
SAME_OUTPUT = {"miescore": (1e-3, 0.5), "spatialreward": (1e-4, 0.02)}


def _code_list(files: list) -> str:
    return ", ".join(f"{f['file']} (sha256 {f['sha256'][:12]}...)" for f in files) or "none"


def check_fresh_process(ctx: DoctorContext):
    """A fresh interpreter loads the checkpoint (through the installed package, or with ``trust_remote_code``
    without it: ``isolated_load``) and scores 2 edits."""
    if not ctx.fresh_process:
        return skip("skipped (--skip-fresh-process)")
    ctx.need_sound("files", "config_processor")
    code = remote_code_files(ctx.path)
    has_auto_model = bool((read_checkpoint_config(str(ctx.path)).get("auto_map") or {}).get("AutoModel"))
    if ctx.trust_remote_code and not has_auto_model:
        return skip("no auto_map: a plain checkpoint that only the installed package loads (no code to trust)")
    records = save_example_files([{"id": f"{e.example}-{e.variant}", "sources": e.sources, "edited": e.edited,
                                   "instruction": e.instruction} for e in ctx.originals()[:FRESH_EDITS]], ctx.workdir)
    job = isolated_load.IsolatedLoadJob(str(ctx.path), records, batch_size=FRESH_EDITS, device=ctx.device,
                                        dtype=ctx.dtype_name, kind=ctx.kind)
    start = time.perf_counter()
    try:
        load = (isolated_load.load_and_score_without_package if ctx.trust_remote_code
                else isolated_load.load_and_score_with_package)
        out = load([job])
    except isolated_load.IsolatedRunError as err:
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
        return diff, SAME_OUTPUT["miescore"][ctx.dtype_name != "float32"], True
    theirs = result["judgements"]
    diff = max(abs(float(a["reward"]) - float(b.reward)) for a, b in zip(theirs, mine, strict=True))
    same_texts = all(a["raw_sc"] == b.raw_sc and a["raw_pq"] == b.raw_pq for a, b in zip(theirs, mine, strict=True))
    return diff, SAME_OUTPUT["spatialreward"][ctx.dtype_name != "float32"], same_texts


def check_load(ctx: DoctorContext):
    """Loads with the installed package on the chosen device and dtype; agrees with the fresh-process load."""
    start = time.perf_counter()
    if ctx.model is None:
        ctx.need_sound("files", "config_processor")
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


# Fractions of the score scale (100 for MIEScore, 1 for the SpatialReward reward):
CONSTANT_SPREAD = 5e-4  # max - min below this over all edits: constant scores -> error
NARROW_SPREAD = 1e-2  # below this: scores barely depend on the input -> warning
SATURATED = 5e-3  # a score this close to 0 or the top counts as saturated
MOVED = 5e-3  # a mean change at least this large counts as "moved"
# SpatialReward generations that fail to parse: above this share -> warning (all of them -> error).
PARSE_FAILURE_WARN = 0.2
BOX_ISSUES = ("bbox_clamped", "bbox_reordered", "bbox_degenerate", "region_invalid")
# An error of one of these makes the perturbation directions meaningless (they would repeat it four times).
BROKEN_SCORE_CHECKS = ("weights", "score_spread", "parse_rate", "reward_spread")


def _spread_problem(name: str, values: list, top: float) -> tuple:
    """``(status, text)`` for one score over all edits: NaN, constant, saturated or narrow; None if fine."""
    if any(not math.isfinite(v) for v in values):
        return "error", f"{name} is NaN or infinite for {sum(not math.isfinite(v) for v in values)} edits"
    spread = max(values) - min(values)
    if spread < CONSTANT_SPREAD * top:
        return "error", f"{name} is constant ({values[0]:.4g} for all {len(values)} edits)"
    saturated = sum(min(v, top - v) < SATURATED * top for v in values)
    if saturated == len(values):
        return "error", f"{name} is saturated at 0 or {top:g} for every edit"
    if saturated * 2 >= len(values):
        return "warn", f"{name} is saturated at 0 or {top:g} for {saturated} of {len(values)} edits"
    if spread < NARROW_SPREAD * top:
        return "warn", f"{name} barely moves (range {spread:.3g} over very different edits)"
    return None


def check_score_spread(ctx: DoctorContext):
    """MIEScore: every score over the examples and their perturbations is finite, varies, is not saturated."""
    ctx.need("model")
    scores = ctx.scores()
    top = float(ctx.model.config.score_scale)
    stats, problems = {}, []
    for name in scores[0]:
        values = [float(s[name]) for s in scores]
        finite = [v for v in values if math.isfinite(v)] or [float("nan")]
        stats[name] = {"min": min(finite), "max": max(finite), "mean": sum(finite) / len(finite)}
        problem = _spread_problem(name, values, top)
        if problem:
            problems.append(problem)
    details = {"edits": len(scores), "scores": stats}
    if problems:
        worst = "error" if any(status == "error" for status, _ in problems) else "warn"
        return CheckResult(worst, "; ".join(text for _, text in problems), details)
    ranges = ", ".join(f"{name} {s['min']:.1f}-{s['max']:.1f}" for name, s in stats.items())
    return ok(f"{len(scores)} edits: {ranges}", **details)


def check_parse_rate(ctx: DoctorContext):
    """SpatialReward: the share of edits whose SC and PQ generations parse."""
    results = ctx.scores()
    failed = [r for r in results if r.failed]
    issues = Counter(code for r in failed for stream in ("sc", "pq") for code in r.issues.get(stream, []))
    details = {"edits": len(results), "failed": len(failed),
               "sc_failed": sum(not r.sc_parse_ok for r in results),
               "pq_failed": sum(not r.pq_parse_ok for r in results),
               "issues": dict(issues.most_common(8)),
               "example_failed_text": (failed[0].raw_sc or [""])[0][:300] if failed else None}
    share = len(failed) / len(results)
    if share == 1:
        return error(f"no generation of the {len(results)} edits parses (issues: "
                     f"{', '.join(issues) or 'none'}); the model does not write the D.1 JSON answer", **details)
    if share > PARSE_FAILURE_WARN:
        return warn(f"{len(failed)} of {len(results)} edits fail to parse ({share:.0%})", **details)
    return ok(f"{len(results) - len(failed)} of {len(results)} edits parse", **details)


def check_boxes(ctx: DoctorContext):
    """SpatialReward: the edit regions lie inside the image (0..1000, x1 < x2, y1 < y2) as written."""
    parsed = [r for r in ctx.scores() if r.sc_parse_ok]
    if not parsed:
        return skip("no SC generation parsed (see 'parse_rate')")
    boxes = sum(len(r.regions) for r in parsed)
    bad = [r for r in parsed if set(r.issues.get("sc", [])) & set(BOX_ISSUES)]
    details = {"parsed": len(parsed), "boxes": boxes, "answers_with_bad_boxes": len(bad),
               "issues": dict(Counter(code for r in bad for code in r.issues["sc"] if code in BOX_ISSUES))}
    if boxes == 0:
        return warn(f"none of the {len(parsed)} parsed SC answers names an edit region", **details)
    if len(bad) == len(parsed):
        return error("every SC answer has boxes outside the image or empty (clamped/reordered/degenerate)", **details)
    if bad:
        return warn(f"{len(bad)} of {len(parsed)} SC answers have boxes outside the image or empty", **details)
    return ok(f"{boxes} boxes in {len(parsed)} SC answers, all inside the image", **details)


def check_reward_spread(ctx: DoctorContext):
    """SpatialReward: the rewards of the parsed edits are finite, vary and are not all at 0 or 1."""
    rewards = [r.reward for r in ctx.scores() if not r.failed]
    if len(rewards) < 2:
        return skip(f"{len(rewards)} parsed edit(s); the spread needs two (see 'parse_rate')")
    details = {"parsed": len(rewards), "min": min(rewards), "max": max(rewards)}
    problem = _spread_problem("the reward", rewards, 1.0)
    if problem:
        return CheckResult(*problem, details)
    return ok(f"{len(rewards)} parsed edits: reward {min(rewards):.3f}-{max(rewards):.3f}", **details)


@dataclass(frozen=True)
class Direction:
    """What a perturbation should do to one score: ``"lower"`` or ``"moves"`` (either way)."""

    variant: str
    expect: str
    miescore: str  # the MIEScore score name
    spatialreward: str  # the SpatialRewardResult field
    why: str


DIRECTIONS = (
    Direction("source_as_edited", "lower", "instruction_following", "s_if",
              "the edited image replaced by its first source (nothing edited)"),
    Direction("noise", "lower", "visual_quality", "pq", "heavy Gaussian noise on the edited image"),
    Direction("blur", "lower", "visual_quality", "pq", "a heavy blur on the edited image"),
    Direction("swapped_sources", "moves", "attribute_preservation", "s_con",
              "the sources in reverse order (the instruction names them by position)"),
)


def _pairs(ctx: DoctorContext, direction: Direction) -> tuple:
    """``(score name, scale, [(original, perturbed)])`` over the examples where both have the score."""
    if ctx.kind == "miescore":
        name, scale = direction.miescore, float(ctx.model.config.score_scale)
        by = ctx.scores_by(lambda s: s.get(name))
    else:
        name, scale = direction.spatialreward, float(ctx.model.config.score_range)
        by = ctx.scores_by(lambda r: getattr(r, name))
    pairs = [(by[(example, "original")], value) for (example, variant), value in by.items()
             if variant == direction.variant and value is not None and by.get((example, "original")) is not None]
    return name, scale, [(float(a), float(b)) for a, b in pairs if math.isfinite(a) and math.isfinite(b)]


def check_direction(ctx: DoctorContext, direction: Direction):
    """A perturbation changes its score as expected for most examples (warning otherwise); skipped after an error
    of the weights or of the scores themselves (constant, NaN, never parsed), which it would only repeat."""
    ctx.need("model")
    ctx.need_sound(*BROKEN_SCORE_CHECKS)
    name, scale, pairs = _pairs(ctx, direction)
    if not pairs:
        return skip(f"no example has {name} both as made and with {direction.why}")
    changes = [after - before for before, after in pairs]
    mean = sum(changes) / len(changes)
    details = {"score": name, "changes": changes, "mean_change": mean, "expect": direction.expect}
    if direction.expect == "lower":
        lower = sum(c < 0 for c in changes)
        text = f"{name} {mean:+.3g} on average with {direction.why} (lower for {lower} of {len(changes)})"
        good = lower * 2 > len(changes) and mean < 0
    else:
        text = f"{name} moves by {sum(abs(c) for c in changes) / len(changes):.3g} on average with {direction.why}"
        good = sum(abs(c) for c in changes) / len(changes) >= MOVED * scale
    return ok(text, **details) if good else warn(f"expected {name} {direction.expect}: {text}", **details)


EXIT_CODES = {"healthy": 0, "warnings": 1, "broken": 2}


def _checks(kind: str) -> list:
    """``[(name, check)]`` for a ``"miescore"`` or ``"spatialreward"`` checkpoint, in the order they run."""
    checks = [("files", check_files), ("config_processor", check_config_processor),
              ("token_ids", check_token_ids), ("vision_geometry", check_vision_geometry),
              ("chat_template", check_chat_template),
              ("pixel_budget", check_pixel_budget)]
    if kind == "spatialreward":
        checks.append(("grounding_tokens", check_grounding_tokens))
    checks += [("token_budget", check_token_budget),
               ("fresh_process", check_fresh_process), ("load", check_load),
               ("weights", check_weights)]
    if kind == "miescore":
        checks.append(("score_spread", check_score_spread))
    else:
        checks += [("parse_rate", check_parse_rate), ("boxes", check_boxes),
                   ("reward_spread", check_reward_spread)]
    checks += [(f"direction_{d.variant}", functools.partial(check_direction, direction=d))
               for d in DIRECTIONS]
    checks.append(("throughput", check_throughput))
    return checks


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
        result = check(ctx)
    except CheckSkipped as err:
        result = skip(str(err))
    except Exception as err:  # one broken part must not hide the others
        result = error(f"{type(err).__name__}: {err}".splitlines()[0][:500], exception=type(err).__name__,
                       text=str(err)[-3000:])
    result.name, result.seconds = name, time.perf_counter() - start
    if result.status == "error":
        ctx.faults[name] = result.message
    return result


def checkpoint_kind(path) -> str:
    """``"miescore"`` or ``"spatialreward"`` for a local checkpoint folder; anything else is a user error."""
    folder = Path(path).expanduser()
    if folder.exists() and not folder.is_dir():
        raise MIEScoreInputError(f"'{path}' is a file, not a checkpoint folder; pass the folder that holds "
                                 "config.json and the weights")
    if not folder.is_dir():
        raise MIEScoreInputError(f"checkpoint folder '{path}' does not exist; the doctor checks a local folder "
                                 "(download a Hub checkpoint first: hf download REPO --local-dir DIR)")
    return token_budget.checkpoint_kind(path, read_checkpoint_config(str(folder)))


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
    kind = checkpoint_kind(path)
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    # an absolute path: the fresh process runs in another folder, where a relative one would read as a Hub id
    ctx = DoctorContext(Path(path).expanduser().resolve(), kind, device, torch_dtype, quick=quick,
                        fresh_process=fresh_process,
                        model=model, trust_remote_code=trust_remote_code)
    results = []
    try:
        ctx.edits  # made before any check (see DoctorContext.edits)
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


__all__ = ["BLUR_FRACTION", "CheckResult", "CheckSkipped", "DIRECTIONS", "Direction", "DoctorContext", "DoctorEdit",
           "DoctorReport", "NOISE_SIGMA", "STATUSES", "VARIANTS", "add_noise", "blur", "check_boxes",
           "check_chat_template", "check_config_processor", "check_direction", "check_files", "check_fresh_process",
           "check_grounding_tokens", "check_load", "check_parse_rate", "check_pixel_budget", "check_reward_spread",
           "check_score_spread", "check_throughput", "check_token_budget", "check_token_ids",
           "check_vision_geometry", "check_weights", "checkpoint_kind", "device_name", "diagnose_checkpoint",
           "doctor_edits", "error", "format_report", "format_result", "jsonable", "ok", "perturb",
           "run_check", "skip", "warn"]
