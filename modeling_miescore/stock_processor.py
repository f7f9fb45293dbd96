"""Load a checkpoint's Qwen3-VL processor as the stock transformers classes, running nothing from the checkpoint.

Why not ``AutoProcessor.from_pretrained``: transformers decides from the checkpoint's files what to import.
``processor_config.json``, ``preprocessor_config.json``, ``video_preprocessor_config.json`` and
``tokenizer_config.json`` may carry an ``auto_map`` naming a Python file in the folder, which
``trust_remote_code=True`` imports; and the tokenizer step calls ``AutoConfig.from_pretrained`` on
``config.json``, whose ``model_type`` ("miescore", "spatialreward") transformers does not know and whose
``auto_map`` names ``AutoConfig``, so without ``trust_remote_code`` it asks "Do you wish to run the custom
code? [y/N]" and waits 15 s for an answer (``transformers.dynamic_module_utils.resolve_trust_remote_code``).

Here the classes are fixed (``Qwen3VLProcessor`` with ``Qwen2Tokenizer``, ``Qwen2VLImageProcessor`` and
``Qwen3VLVideoProcessor``); only their settings come from the saved JSON files, read as data, and ``config.json``
is never read, so there is no prompt and no import. ``auto_map`` entries are dropped so that a processor loaded
here never writes one back on ``save_pretrained``.

Hub file: copied into every saved checkpoint; imports only the standard library and transformers.
"""

from __future__ import annotations

import json
import os

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


def _component_settings(source: str, hub_kwargs: dict) -> tuple[dict | None, dict | None]:
    """``(image settings, video settings)`` from ``processor_config.json`` or the older per-part files."""
    image = video = None
    nested = _checkpoint_file(source, PROCESSOR_FILE, hub_kwargs)
    if nested:
        data = _read_json(nested)
        image, video = data.get("image_processor"), data.get("video_processor")
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


def load_stock_processor(source, revision: str | None = None, token=None, **hub_kwargs):
    """A ``Qwen3VLProcessor`` built from the processor files of a checkpoint folder or Hub repo.

    Works for our MIEScore / SpatialReward checkpoints and for plain Qwen3-VL ones. Never prompts, never imports
    code from the checkpoint, ignores every ``auto_map``. Raises ``OSError`` when the folder has no image
    processor settings or no tokenizer, ``ValueError`` for unreadable files.
    """
    from transformers import Qwen2Tokenizer, Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    source = os.fspath(source)
    hub_kwargs = {**hub_kwargs, **({"revision": revision} if revision else {}), **({"token": token} if token else {})}
    try:
        image, video = _component_settings(source, hub_kwargs)
        chat_template = _chat_template(source, hub_kwargs)
    except json.JSONDecodeError as err:
        raise ValueError(f"a processor file of '{source}' is not valid JSON ({err})") from None
    if image is None:
        raise OSError(f"'{source}' has no image processor settings ({PROCESSOR_FILE} or {IMAGE_PROCESSOR_FILE})")
    tokenizer = Qwen2Tokenizer.from_pretrained(source, **hub_kwargs)
    tokenizer.init_kwargs.pop("auto_map", None)  # would be written back by save_pretrained
    image_processor = Qwen2VLImageProcessor(**_settings(image))
    video_processor = Qwen3VLVideoProcessor(**_settings(video))
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                            chat_template=chat_template or tokenizer.chat_template)


def strip_auto_maps(folder) -> list[str]:
    """Remove every ``auto_map`` from the processor files in ``folder``; returns the files changed.

    Our processor is the stock one, so no processor file of a checkpoint should point at code.
    """
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


__all__ = ["PROCESSOR_JSON_FILES", "load_stock_processor", "strip_auto_maps"]
