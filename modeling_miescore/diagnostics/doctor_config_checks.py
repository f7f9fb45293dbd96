"""The checks of ``miescore doctor`` that need no weights: files, config <-> processor <-> tokenizer, token budget.

Each function takes the run's :class:`DoctorContext` and returns a :class:`Finding` (see ``checkpoint_doctor``'s
module docstring for the list and thresholds).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from PIL import Image

from ..scoring.checkpoint_files import PICKLE_SUFFIXES
from .doctor_context import DoctorContext, error, ok, warn

# The vision markers every image becomes in a Qwen-VL prompt, and the config fields holding their ids.
VISION_TOKENS = {"image_token_id": "<|image_pad|>", "video_token_id": "<|video_pad|>",
                 "vision_start_token_id": "<|vision_start|>", "vision_end_token_id": "<|vision_end|>"}
_SAMPLE_INSTRUCTION = "Put the cat from image 2 on the table of image 1."


def _package_root():
    return Path(__file__).resolve().parents[1]


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
    auto_map = read_config_json(folder).get("auto_map") or {}
    needed, missing = remote_code_closure(folder, auto_map)
    return [{"file": name, "sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest()}
            for name in sorted(set(needed) - set(missing))]


def read_config_json(folder) -> dict:
    """``config.json`` of a checkpoint folder as a dict (the loading checks have validated it)."""
    from ..scoring.loading import read_checkpoint_config

    return read_checkpoint_config(str(folder))


def _code_files(ctx: DoctorContext, auto_map: dict) -> tuple:
    """``(missing, differing)``: code files that ``auto_map`` needs but the folder lacks, and code files that
    differ from the installed package's copy."""
    _, missing = remote_code_closure(ctx.path, auto_map)
    root = _package_root()
    differing = sorted(p.name for p in ctx.path.glob("*.py")
                       if (root / p.name).is_file() and (root / p.name).read_bytes() != p.read_bytes())
    return missing, differing


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
    config = read_config_json(ctx.path)
    auto_map = config.get("auto_map") or {}
    details = {"weights": weights, "pickle_files": pickles, "auto_map": auto_map,
               "remote_code": remote_code_files(ctx.path), "processor_code": _processor_code(ctx.path)}
    from ..scoring.checkpoint_files import ModelLoadError, validate_checkpoint_folder

    try:
        validate_checkpoint_folder(ctx.path, config)
    except ModelLoadError as err:
        return error(str(err), **details)
    missing, differing = _code_files(ctx, auto_map)
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
    from .token_budget import load_config_and_processor

    _, ctx.config, ctx.processor = load_config_and_processor(str(ctx.path))
    processor = ctx.processor
    return ok(f"{type(ctx.config).__name__} and {type(processor).__name__} "
              f"({type(processor.tokenizer).__name__}, {type(processor.image_processor).__name__}) load",
              config=type(ctx.config).__name__, processor=type(processor).__name__)


def model_configs(config, kind: str) -> tuple:
    """``(holder of the vision token ids, vision config, text config)`` of a MIEScore or SpatialReward config."""
    backbone = config.backbone_config if kind == "miescore" else config
    return backbone, backbone.vision_config, backbone.get_text_config()


def _single_token_id(tokenizer, token: str):
    ids = tokenizer.encode(token, add_special_tokens=False)
    return int(ids[0]) if len(ids) == 1 else None


def check_token_ids(ctx: DoctorContext):
    """Config vision-token ids = the tokenizer's and processor's; token ids fit the embedding; a pad token."""
    ctx.need("config", "processor")
    holder, _, text_config = model_configs(ctx.config, ctx.kind)
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
    _, vision, _ = model_configs(ctx.config, ctx.kind)
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
        from ..processing_miescore import build_messages

        return build_messages(num_sources, _SAMPLE_INSTRUCTION, ctx.config)[0]
    from ..modeling_spatialreward import sc_messages

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
    from ..processing_miescore import image_size_kwargs, num_image_tokens

    _, vision, _ = model_configs(ctx.config, ctx.kind)
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
    from ..spatialreward_tokens import GROUNDING_TOKENS

    tokenizer = ctx.processor.tokenizer
    rows = int(model_configs(ctx.config, ctx.kind)[2].vocab_size)
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
    from . import token_budget

    rows = []
    for size in token_budget.DEFAULT_SIZES:
        for sources in token_budget.DEFAULT_SOURCES:
            if ctx.kind == "miescore":
                budget = token_budget.miescore_budget(ctx.processor, ctx.config, sources, size)
                total, shrink = budget.total, token_budget.shrink_to_fit(budget, limit)
            else:
                budget = token_budget.spatialreward_budgets(ctx.processor, ctx.config, sources, size)[0]
                total, shrink = budget.total + int(ctx.config.max_new_tokens), None
            rows.append({"sources": sources, "size": "{}x{}".format(*size), "tokens": total, "limit": limit,
                         "shrink": shrink.action if shrink else None,
                         "shrink_max_pixels": shrink.max_pixels if shrink else None})
    return rows


def check_token_budget(ctx: DoctorContext):
    """Prompt lengths of typical inputs against the training length (information: what training did with longer
    ones) and the model's position limit. Warnings only for defects: an input beyond the position limit, or a
    recorded training length that contradicts the pixel budget (a typical input that cannot fit it at any
    image size, or a length beyond the position limit)."""
    ctx.need("config", "processor")
    from . import token_budget

    training = token_budget.training_length(str(ctx.path), ctx.kind)
    positions = token_budget.position_limit(ctx.config, ctx.kind)
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


__all__ = ["check_chat_template", "check_config_processor", "check_files", "check_grounding_tokens",
           "check_pixel_budget", "check_token_budget", "check_token_ids", "check_vision_geometry", "model_configs"]
