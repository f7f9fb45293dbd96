"""Turn ``(sources, edited, instruction)`` into chat messages and model inputs.

Hub file: copied into saved checkpoints; imports only numpy/Pillow/transformers and flat siblings.
Works with the backbone's stock processor (``Qwen3VLProcessor`` in the paper; any VLM processor that takes
``text=`` and ``images=``); no custom processor class is needed. Only the image-size arguments depend on the
backbone family (``backbone_families``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Sequence

from .backbone_families import INTERNVL, QWEN_VL, family_of, internvl_image_tokens, internvl_size_kwargs, \
    qwen_patch_factor
from .image_io import DEFAULT_MAX_IMAGE_PIXELS, MIEScoreInputError, load_image

_PLACEHOLDER = re.compile(r"\{(skill|sources|instruction|edited)\}")


@dataclass
class EditSample:
    """One multi-source edit: N >= 1 source images, the edited image and the instruction.

    Images are file paths, ``PIL.Image`` objects or numpy arrays until :meth:`load` turns them into RGB PIL.
    """

    sources: list
    edited: Any
    instruction: str
    id: str | None = None

    def load(self, max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, decoded: dict | None = None) -> "EditSample":
        """The same sample with every image an RGB ``PIL.Image``.

        ``decoded`` (optional, shared across the samples of one chunk) remembers the images already loaded, by
        file path or by object, so the sources that a group of edits shares are read once and are one object in
        every sample.
        """
        def load_one(source):
            if decoded is None:
                return load_image(source, max_image_pixels=max_image_pixels)
            key = os.fspath(source) if isinstance(source, (str, os.PathLike)) else id(source)
            if key not in decoded:
                # the source is kept beside its image so that its id cannot be reused by another object meanwhile
                decoded[key] = (source, load_image(source, max_image_pixels=max_image_pixels))
            return decoded[key][1]

        return EditSample(sources=[load_one(s) for s in self.sources], edited=load_one(self.edited),
                          instruction=self.instruction, id=self.id)


def load_samples(samples: Sequence["EditSample"], max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> list:
    """Load a chunk of samples; an image path that several samples name is decoded once."""
    decoded: dict = {}
    return [s.load(max_image_pixels, decoded) for s in samples]


def load_checkpoint_processor(source: str):
    """The processor saved beside a checkpoint (``processor.save_pretrained(folder)``), with a clear error."""
    if not source:
        raise ValueError(
            "no processor attached to this model and no checkpoint path to load one from; "
            "pass processor=AutoProcessor.from_pretrained(<checkpoint>) or set model.processor"
        )
    from transformers import AutoProcessor

    try:
        # trust_remote_code only silences the prompt caused by the model's auto_map: the processor is stock
        return AutoProcessor.from_pretrained(source, trust_remote_code=True)
    except (OSError, ValueError) as err:
        raise ValueError(
            f"could not load the processor from '{source}' ({err}); save it beside the model "
            "(processor.save_pretrained) or pass processor=..."
        ) from None


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
    if not isinstance(instruction, str) or not instruction.strip():
        raise MIEScoreInputError(f"{where} has an empty instruction; pass the editing instruction text")
    return EditSample(sources=sources, edited=edited, instruction=instruction.strip(), id=sample_id)


def build_messages(num_sources: int, instruction: str, config) -> tuple[list[dict], list[str]]:
    """Chat messages for one sample and the role of each image placeholder, in prompt order.

    Returns ``(messages, roles)`` where ``roles[i]`` is ``"source:k"`` (0-based k) or ``"edited"`` for the
    i-th ``{"type": "image"}`` entry. The text comes from ``config.prompt_template``; ``{sources}`` expands to
    ``config.source_label`` + image for each source, ``{edited}`` to ``config.edited_label`` + image. A sample with
    exactly one source uses ``config.single_source_prompt_template`` and ``config.single_source_label`` when the
    config has them (the paper's single-source variant; checkpoints saved before it have neither).
    """
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
    """Batch of loaded samples -> ``BatchFeature`` for ``MIEScoreModel.forward``.

    Returns ``input_ids`` / ``attention_mask`` (B, L), ``mm_token_type_ids`` (B, L), ``pixel_values``
    (sum of patches, C*T*P*P) and ``image_grid_thw`` (number of images, 3), images in prompt order.
    Each image is resized to fit ``config.min_pixels``..``config.max_pixels``.
    """
    texts, images = [], []
    for sample in samples:
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
    """``(height, width)`` of an image after the Qwen-VL resize rule (transformers' ``smart_resize``).

    Both sides become multiples of ``factor`` (patch size x merge size: 16 x 2 = 32 for Qwen3-VL), the aspect
    ratio is kept as closely as possible and the area is brought into ``[min_pixels, max_pixels]``. Note the
    argument order (``width, height``, as ``PIL.Image.size``) and the result order (``height, width``, as
    ``smart_resize``). Raises ``ValueError`` for aspect ratios above 200, as the processor does.
    """
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    return smart_resize(int(height), int(width), factor=int(factor), min_pixels=int(min_pixels),
                        max_pixels=int(max_pixels))


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
    """Cheap estimate of a loaded sample's sequence length (used to sort batches by length).

    Image tokens come from :func:`image_prompt_tokens` with the config's pixel budget; the text is estimated
    from its character count.
    """
    total = len(sample.instruction) // 3 + len(config.skill or "") // 4
    for image in [*sample.sources, sample.edited]:
        total += image_prompt_tokens(*image.size, config)
    return total

