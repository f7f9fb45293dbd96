"""Turn ``(sources, edited, instruction)`` into chat messages and model inputs.

Also loads a checkpoint's processor: always the stock ``Qwen3VLProcessor``, built from the saved settings
without running any code from the checkpoint (:func:`load_stock_processor`); no custom processor class is
needed. Defines the input limits every entry point shares (:data:`MAX_INSTRUCTION_CHARS`,
:data:`DEFAULT_MAX_SAMPLE_PIXELS`).

Hub file: copied into saved checkpoints; imports only numpy/Pillow/transformers and flat siblings.
Works with the backbone's stock processor (``Qwen3VLProcessor`` in the paper; any VLM processor that takes
``text=`` and ``images=``). Only the image-size arguments depend on the backbone family (``backbone_families``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

from .backbone_families import INTERNVL, QWEN_VL, family_of, internvl_image_tokens, internvl_size_kwargs, \
    qwen_patch_factor
from .control_tokens import control_tokens_in
from .errors import MIEScoreInputError
from .image_io import (DEFAULT_MAX_IMAGE_PIXELS, MAX_ASPECT_RATIO, decode_image, decoded_pixels, describe_image,
                       open_image, smart_size)

_PLACEHOLDER = re.compile(r"\{(skill|sources|instruction|edited)\}")

# Decoded pixels one sample may cost, summed over its images and checked from their headers before any is
# decoded. 256 Mpx is 244 images at the paper's 1,048,576-pixel budget (MIEScore supplement, "Supervised
# Fine-Tuning"), e.g. 16 sources + the edited image of 15 Mpx each; at Pillow's 4 bytes per pixel of a decoded
# RGBA image it is 1 GiB if nothing were reduced. Images are decoded one at a time and reduced right away when
# far above the model's budget (image_io.decode_image), so the memory actually held is far less; the budget
# bounds the decoding work a few kilobytes of compressed input can demand (a 6200x6200 1-bit PNG is 38 Mpx).
DEFAULT_MAX_SAMPLE_PIXELS = 256_000_000

# The longest instruction accepted, in characters. MIEScore trains with at most 4096 tokens per sequence
# (supplement, "Supervised Fine-Tuning"); a sample with one source and the edited image at the paper's
# 1,048,576-pixel budget spends 2 x 1024 image tokens (32x32 pixels per token), and the default rubric
# (skill_miescore, 3,196 characters) with the prompt template and chat markup about 860 more, which leaves
# 4096 - 2048 - 860 = 1188 tokens; rounded down to 1024 tokens at 4 characters per token (English BPE text)
# that is 4096 characters. The reward server enforces the same number.
MAX_INSTRUCTION_CHARS = 4096

def control_token_problem(text: str, where: str = "sample", special_tokens=()) -> str | None:
    """Why ``text`` cannot go into a prompt as the user's words, or None: a lone surrogate (not encodable text)
    or a chat-control token (the rule of :mod:`.control_tokens`, grounding tokens included, or one of
    ``special_tokens``, a tokenizer's own). The tokenizer parses a control token as its special token, so an
    instruction holding "<|im_end|><|im_start|>assistant" would forge a chat turn and one holding "<|image_pad|>"
    an image placeholder without an image: such an instruction is refused, naming the token (API, CLI,
    score-batch, server and Space alike), rather than silently rewritten."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return (f"{where} has an instruction that is not valid Unicode text (a lone surrogate "
                f"{text[err.start]!r} at character {err.start + 1}); send UTF-8 text")
    found = control_tokens_in(text)
    token = found[0] if found else next((t for t in special_tokens if t and t in text), None)
    if token is not None:
        return (f"{where} has an instruction containing the chat-control token {token!r}, which the model would "
                "read as a control token, not as text; remove it from the instruction")
    return None


def _image_key(image):
    return os.fspath(image) if isinstance(image, (str, os.PathLike)) else id(image)


@dataclass
class EditSample:
    """One multi-source edit: N >= 1 source images, the edited image and the instruction.

    Images are file paths, ``PIL.Image`` objects or numpy arrays until :meth:`load` turns them into RGB PIL.
    """

    sources: list
    edited: Any
    instruction: str
    id: str | None = None

    def load(self, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, decoded: dict | None = None, *,
             max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS, target_pixels: int | None = None,
             where: str | None = None) -> "EditSample":
        """The same sample with every image an RGB ``PIL.Image``, decoded only when every header passes
        ``image_io``'s checks and ``max_sample_pixels``. ``decoded`` (shared across one chunk's samples) makes the
        sources a group of edits shares read once and one object in every sample (prefix grouping hashes them once).
        """
        decoded = {} if decoded is None else decoded
        images = [*self.sources, self.edited]
        opened: dict = {}
        try:
            total = 0
            for image in images:
                key = _image_key(image)
                if key in opened:
                    continue
                if key in decoded:
                    opened[key] = (None, decoded[key][2])
                else:
                    header = open_image(image, max_image_pixels=max_image_pixels)
                    opened[key] = (header, decoded_pixels(header, target_pixels))
                total += opened[key][1]
            if total > max_sample_pixels:
                name = where or (f"sample '{self.id}'" if self.id is not None else "sample")
                uses = f" (the model uses at most {target_pixels:,} pixels per image)" if target_pixels else ""
                raise MIEScoreInputError(
                    f"{name}: its {len(opened)} images decode to {total / 1e6:.0f} Mpx together, above the "
                    f"per-sample budget of {max_sample_pixels / 1e6:.0f} Mpx; downscale the images{uses} or raise "
                    "max_sample_pixels"
                )
            for image in images:
                key = _image_key(image)
                if key not in decoded:
                    # popped: the full-size decoded header is dropped as soon as its reduced copy exists
                    header, pixels = opened.pop(key)
                    # the source is kept beside its image so that its id cannot be reused by another object
                    decoded[key] = (image, decode_image(header, describe_image(image), target_pixels), pixels)
        finally:
            for key, (header, _) in opened.items():
                if header is not None and key not in decoded and isinstance(key, str):
                    header.close()  # a file opened here and never decoded (an error above)
        return EditSample(sources=[decoded[_image_key(s)][1] for s in self.sources],
                          edited=decoded[_image_key(self.edited)][1], instruction=self.instruction, id=self.id)


def load_samples(samples: Sequence["EditSample"], max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, *,
                 max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS, target_pixels: int | None = None,
                 first_index: int = 0) -> list:
    """Load a chunk of samples; an image path that several samples name is decoded once."""
    decoded: dict = {}
    return [s.load(max_image_pixels, decoded, max_sample_pixels=max_sample_pixels, target_pixels=target_pixels,
                   where=f"sample {first_index + i}") for i, s in enumerate(samples)]


# ---------------------------------------------------------------------------------------------- the processor
# The processor of a checkpoint is always the stock Qwen3VLProcessor, loaded without running anything from
# the checkpoint (issue 13 item 1).
#
# Why not ``AutoProcessor.from_pretrained``: transformers decides from the checkpoint's files what to import.
# ``processor_config.json``, ``preprocessor_config.json``, ``video_preprocessor_config.json`` and
# ``tokenizer_config.json`` may carry an ``auto_map`` naming a Python file in the folder, which
# ``trust_remote_code=True`` imports; and the tokenizer step calls ``AutoConfig.from_pretrained`` on
# ``config.json``, whose ``model_type`` ("miescore", "spatialreward") transformers does not know and whose
# ``auto_map`` names ``AutoConfig``, so without ``trust_remote_code`` it asks "Do you wish to run the custom
# code? [y/N]" and waits 15 s for an answer (``transformers.dynamic_module_utils.resolve_trust_remote_code``).
#
# Here the classes are fixed (``Qwen3VLProcessor`` with ``Qwen2Tokenizer``, ``Qwen2VLImageProcessor`` and
# ``Qwen3VLVideoProcessor``); only their settings come from the saved JSON files, read as data, and ``config.json``
# is never read, so there is no prompt and no import. ``auto_map`` entries are dropped so that a processor loaded
# here never writes one back on ``save_pretrained``.

PROCESSOR_FILE = "processor_config.json"  # transformers 5: image and video settings nested in one file
IMAGE_PROCESSOR_FILE = "preprocessor_config.json"  # older layout (e.g. Qwen/Qwen3-VL-8B-Instruct)
VIDEO_PROCESSOR_FILE = "video_preprocessor_config.json"
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
PROCESSOR_JSON_FILES = (PROCESSOR_FILE, IMAGE_PROCESSOR_FILE, VIDEO_PROCESSOR_FILE, "tokenizer_config.json")
# Keys that name classes or code: never passed on (the classes are fixed here).
_CLASS_KEYS = ("auto_map", "processor_class", "image_processor_type", "video_processor_type",
               "feature_extractor_type", "_processor_class")


def _checkpoint_file(source: str, name: str, hub_kwargs: dict) -> str | None:
    """The local path of file ``name`` of a checkpoint folder or Hub repo, or None when it has none."""
    if os.path.isdir(source):
        path = os.path.join(source, name)
        return path if os.path.isfile(path) else None
    from transformers.utils import cached_file

    return cached_file(source, name, _raise_exceptions_for_missing_entries=False, **hub_kwargs)


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise ValueError(f"'{path}' does not hold a JSON object")
    return data


def _settings(data) -> dict:
    """A processor's settings without the keys that name classes or code."""
    if not isinstance(data, dict):
        return {}
    return {key: value for key, value in data.items() if key not in _CLASS_KEYS}


def _component_settings(source: str, nested: dict, hub_kwargs: dict) -> tuple[dict | None, dict | None]:
    """``(image settings, video settings)`` from ``processor_config.json`` (``nested``, read already) or the
    older per-part files."""
    image, video = nested.get("image_processor"), nested.get("video_processor")
    if image is None and (path := _checkpoint_file(source, IMAGE_PROCESSOR_FILE, hub_kwargs)):
        image = _read_json(path)
    if video is None and (path := _checkpoint_file(source, VIDEO_PROCESSOR_FILE, hub_kwargs)):
        video = _read_json(path)
    return image, video


def _chat_template(source: str, hub_kwargs: dict) -> str | None:
    raw = _checkpoint_file(source, CHAT_TEMPLATE_FILES[0], hub_kwargs)
    if raw:
        with open(raw, encoding="utf-8") as handle:
            return handle.read()
    legacy = _checkpoint_file(source, CHAT_TEMPLATE_FILES[1], hub_kwargs)
    if legacy:
        template = _read_json(legacy).get("chat_template")
        return template if isinstance(template, str) else None
    return None


def _other_stock_processor_class(source: str, nested: dict):
    """The stock transformers processor class a non-Qwen3-VL checkpoint names (``processor_class`` of its
    ``processor_config.json``, ``nested``), or None for Qwen3-VL (or when it names none). A name that is not a
    processor class shipped inside transformers is refused: that would be code from the checkpoint."""
    name = nested.get("processor_class")
    if not name or name == "Qwen3VLProcessor":
        return None
    import transformers
    from transformers.processing_utils import ProcessorMixin

    cls = getattr(transformers, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, ProcessorMixin) and cls.__module__.startswith("transformers.")):
        raise ValueError(f"'{source}' names processor class {name!r}, which is not a processor class of "
                         "transformers; only stock processors are loaded (no code from a checkpoint runs)")
    return cls


def load_stock_processor(source, revision: str | None = None, token=None, **hub_kwargs):
    """A ``Qwen3VLProcessor`` built from the processor files of a checkpoint folder or Hub repo (another backbone
    family: the stock transformers class its ``processor_config.json`` names). Never prompts, never imports code
    from the checkpoint. ``OSError`` when it has no image processor settings or no tokenizer."""
    from transformers import Qwen2Tokenizer, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    source = os.fspath(source)
    hub_kwargs = {**hub_kwargs, **({"revision": revision} if revision else {}), **({"token": token} if token else {})}
    try:
        nested_path = _checkpoint_file(source, PROCESSOR_FILE, hub_kwargs)
        nested = _read_json(nested_path) if nested_path else {}
        other = _other_stock_processor_class(source, nested)
        if other is None:
            image, video = _component_settings(source, nested, hub_kwargs)
            chat_template = _chat_template(source, hub_kwargs)
    except json.JSONDecodeError as err:
        raise ValueError(f"a processor file of '{source}' is not valid JSON ({err})") from None
    if other is not None:  # another backbone family: its own stock class, remote code refused outright
        return other.from_pretrained(source, trust_remote_code=False, **hub_kwargs)
    if image is None:
        raise OSError(f"'{source}' has no image processor settings ({PROCESSOR_FILE} or {IMAGE_PROCESSOR_FILE})")
    tokenizer = Qwen2Tokenizer.from_pretrained(source, **hub_kwargs)
    tokenizer.init_kwargs.pop("auto_map", None)  # would be written back by save_pretrained
    image_processor = Qwen2VLImageProcessor(**_settings(image))
    video_processor = Qwen3VLVideoProcessor(**_settings(video))
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                            chat_template=chat_template or tokenizer.chat_template)


def strip_auto_maps(folder) -> list[str]:
    """Remove every ``auto_map`` from the processor files in ``folder`` (ours is the stock processor, so none should
    point at code); returns the files changed."""
    changed = []
    for name in PROCESSOR_JSON_FILES:
        path = os.path.join(os.fspath(folder), name)
        if not os.path.isfile(path):
            continue
        data = _read_json(path)
        nested = [data] + [part for part in data.values() if isinstance(part, dict)]
        if not any("auto_map" in part for part in nested):
            continue
        for part in nested:
            part.pop("auto_map", None)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            handle.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
        os.replace(path + ".tmp", path)  # a reader never sees a half-written file
        changed.append(name)
    return changed


def load_checkpoint_processor(source: str):
    """:func:`load_stock_processor` of a checkpoint, with a ``ValueError`` saying how to attach a processor."""
    if not source:
        raise ValueError(
            "no processor attached to this model and no checkpoint path to load one from; "
            "pass processor=load_stock_processor(<checkpoint>) or set model.processor"
        )
    try:
        return load_stock_processor(source)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"could not load the processor from '{source}' ({err}); save it beside the model "
            "(processor.save_pretrained) or pass processor=..."
        ) from None


def check_instruction(instruction, where: str = "sample") -> str:
    """The instruction stripped; :class:`MIEScoreInputError` for a non-string, an empty or an overlong one, and
    for one that is not valid Unicode or holds a chat-control token (:func:`control_token_problem`)."""
    if not isinstance(instruction, str):
        raise MIEScoreInputError(f"{where} has an instruction of type {type(instruction).__name__}; "
                                 "pass the editing instruction as a string")
    text = instruction.strip()
    if not text:
        raise MIEScoreInputError(f"{where} has an empty instruction; pass the editing instruction text")
    if len(text) > MAX_INSTRUCTION_CHARS:
        raise MIEScoreInputError(f"{where} has an instruction of {len(text):,} characters, above the limit "
                                 f"of {MAX_INSTRUCTION_CHARS:,} (the model's token budget); shorten it")
    problem = control_token_problem(text, where)
    if problem:
        raise MIEScoreInputError(problem)
    return text


def as_edit_sample(sample, where: str = "sample") -> EditSample:
    """Validate and normalise a sample given as an :class:`EditSample`, a dict or a 3-tuple."""
    if isinstance(sample, EditSample):
        sources, edited, instruction, sample_id = sample.sources, sample.edited, sample.instruction, sample.id
    elif isinstance(sample, dict):
        missing = [k for k in ("sources", "edited", "instruction") if k not in sample]
        if missing:
            raise MIEScoreInputError(f"{where} is missing {', '.join(missing)}; give sources, edited and instruction")
        sources, edited, instruction = sample["sources"], sample["edited"], sample["instruction"]
        sample_id = sample.get("id")
    elif isinstance(sample, (tuple, list)) and len(sample) == 3:
        sources, edited, instruction = sample
        sample_id = None
    else:
        raise MIEScoreInputError(f"{where} must be a dict, an EditSample or a (sources, edited, instruction) tuple")
    if isinstance(sources, (str, os.PathLike)) or not isinstance(sources, Sequence):
        sources = [sources]  # a single source image
    sources = list(sources)
    if not sources:
        raise MIEScoreInputError(f"{where} has zero source images; pass at least one source image")
    if edited is None:
        raise MIEScoreInputError(f"{where} has no edited image")
    return EditSample(sources=sources, edited=edited, instruction=check_instruction(instruction, where), id=sample_id)


def build_messages(num_sources: int, instruction: str, config) -> tuple[list[dict], list[str]]:
    """Chat messages for one sample and the role (``"source:k"`` or ``"edited"``) of each image placeholder, in
    prompt order. A one-source sample uses the single-source template and label where the config has them
    (checkpoints saved before the paper's single-source variant have neither)."""
    single = num_sources == 1 and getattr(config, "single_source_prompt_template", None)
    template = config.single_source_prompt_template if single else config.prompt_template
    source_label = getattr(config, "single_source_label", config.source_label) if single else config.source_label
    blocks = {"sources": "sources", "edited": "edited"}
    if config.image_order == "edited_first":
        blocks = {"sources": "edited", "edited": "sources"}
    content: list[dict] = []
    roles: list[str] = []

    def add_text(text: str):
        if not text:
            return
        if content and content[-1]["type"] == "text":
            content[-1]["text"] += text
        else:
            content.append({"type": "text", "text": text})

    def add_block(kind: str):
        if kind == "sources":
            for k in range(num_sources):
                add_text(("\n" if k else "") + source_label.format(index=k + 1))
                content.append({"type": "image"})
                roles.append(f"source:{k}")
        else:
            add_text(config.edited_label)
            content.append({"type": "image"})
            roles.append("edited")

    position = 0
    for match in _PLACEHOLDER.finditer(template):
        add_text(template[position : match.start()])
        name = match.group(1)
        if name == "skill":
            add_text(config.skill or "")
        elif name == "instruction":
            add_text(instruction)
        else:
            add_block(blocks[name])
        position = match.end()
    add_text(template[position:])
    return [{"role": "user", "content": content}], roles


def ordered_images(sample: EditSample, roles: list[str]) -> list:
    return [sample.edited if role == "edited" else sample.sources[int(role.split(":")[1])] for role in roles]


def image_size_kwargs(config) -> dict:
    """The image processor's size arguments for ``config.min_pixels`` / ``config.max_pixels``, by backbone family:
    Qwen-VL a pixel range, InternVL a tile budget, other families none (their processor's defaults)."""
    family = family_of(config)
    if family is QWEN_VL:
        return {"size": {"shortest_edge": int(config.min_pixels), "longest_edge": int(config.max_pixels)}}
    if family is INTERNVL:
        return internvl_size_kwargs(config)
    return {}


def prepare_inputs(processor, samples: Sequence[EditSample], config, padding_side: str | None = None):
    """Batch of loaded samples -> ``BatchFeature`` for ``MIEScoreModel.forward`` (images in prompt order)."""
    texts, images = [], []
    specials = [t for t in getattr(processor.tokenizer, "all_special_tokens", ()) if len(t) > 1]
    for sample in samples:
        problem = control_token_problem(sample.instruction, "sample", specials)
        if problem:  # as_edit_sample refused the common ones; this is the tokenizer's own list
            raise MIEScoreInputError(problem)
        messages, roles = build_messages(len(sample.sources), sample.instruction, config)
        texts.append(processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
        images.extend(ordered_images(sample, roles))
    return processor(
        text=texts,
        images=images,
        padding=True,
        padding_side=padding_side or config.padding_side,
        return_tensors="pt",
        **image_size_kwargs(config),
    )


def resized_image_size(width: int, height: int, *, min_pixels: int, max_pixels: int,
                       factor: int = 32) -> tuple[int, int]:
    """``(height, width)`` of a ``width x height`` image after the Qwen-VL processor's resize
    (:func:`~modeling_miescore.hub.image_io.smart_size`, ``factor`` = patch x merge size: 32 for Qwen3-VL). Raises
    ``ValueError`` for aspect ratios above 200, as the processor does."""
    if (ratio := max(width, height) / min(width, height)) > MAX_ASPECT_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {ratio}")
    width, height = smart_size(int(width), int(height), int(max_pixels), int(min_pixels), int(factor))
    return height, width


def num_image_tokens(width: int, height: int, *, min_pixels: int, max_pixels: int, factor: int = 32) -> int:
    """``<|image_pad|>`` tokens of one image in a Qwen3-VL prompt: its resized area over ``factor**2``
    (16-px patches, then 2x2 patches merged into one token)."""
    resized_height, resized_width = resized_image_size(width, height, min_pixels=min_pixels,
                                                       max_pixels=max_pixels, factor=factor)
    return resized_height * resized_width // (factor * factor)


def image_prompt_tokens(width: int, height: int, config, max_pixels: int | None = None) -> int:
    """Tokens that replace one image placeholder in the prompt, with the config's pixel budget (or ``max_pixels``;
    the minimum is lowered to it when larger). Exact for Qwen-VL (:func:`num_image_tokens` with the backbone's
    patch x merge size) and InternVL (``<img>``, tile tokens, ``</img>``); other families get the Qwen-VL count
    at 28 px per token, an estimate."""
    budget = int(max_pixels or config.max_pixels)
    least = min(int(config.min_pixels), budget)
    if family_of(config) is INTERNVL:
        return internvl_image_tokens(width, height, config, max_pixels=budget, min_pixels=least)
    factor = qwen_patch_factor(config) if family_of(config) is QWEN_VL else 28
    return num_image_tokens(width, height, min_pixels=least, max_pixels=budget, factor=factor)


def estimate_num_tokens(sample: EditSample, config) -> int:
    """Cheap estimate of a loaded sample's sequence length (to sort batches by length)."""
    total = len(sample.instruction) // 3 + len(config.skill or "") // 4
    for image in [*sample.sources, sample.edited]:
        total += image_prompt_tokens(*image.size, config)
    return total

