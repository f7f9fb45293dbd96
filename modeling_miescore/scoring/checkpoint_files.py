"""The one validation layer for checkpoint folders: every command that loads one (``score``, ``score-batch``,
``spatialreward``, ``analyze-attention``, ``serve``, ``tokens``, ``doctor``) goes through it, so a damaged or
hostile folder gives one line naming the file and what is wrong (a :class:`ModelLoadError`, exit status 2 from
the command line) instead of a traceback from safetensors, transformers or Jinja.

Config values, weights (safetensors only: a pickle file's presence alone is an error; headers read, nothing
unpickled), file kinds (a FIFO would block, ``/dev/zero`` never ends; a copying command also refuses a link out of
the folder) and tokenizer files are checked before anything heavy is loaded (local folders; a Hub repo's files are
fetched by transformers). After loading, :func:`check_processor` renders a probe conversation in transformers'
Jinja sandbox, so a bad template is named here rather than on the first edit.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from ..hub.image_io import regular_file_problem

PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")
_CONFIG_WITH_TEMPLATE = ("tokenizer_config.json", "processor_config.json")


class ModelLoadError(MIEScoreInputError):
    """The model reference cannot be used as a checkpoint; the message says why and what to do."""


def read_json_object(path: Path, what: str) -> dict:
    """The JSON object in ``path`` (``what`` names it in messages); unreadable, not JSON or not an object ->
    :class:`ModelLoadError`."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as err:
        raise ModelLoadError(f"{what} is unreadable ({str(err)[:200]}); download or save the checkpoint "
                             "again") from None
    if not isinstance(data, dict):
        raise ModelLoadError(f"{what} is a JSON {type(data).__name__}, not an object; it is not a saved checkpoint "
                             "config")
    return data


def read_config_file(config_file: Path, model: str) -> dict:
    """``config.json`` as a dict; unreadable, not JSON or not an object -> :class:`ModelLoadError`."""
    return read_json_object(config_file, f"config.json of model '{model}'")


def checkpoint_file_problem(folder, name: str, max_bytes: int | None = None) -> str | None:
    """Why ``folder/name`` must not be read as a file of the checkpoint ``folder``, or None: a symbolic link that
    leaves the folder (or a link loop), a missing file, a folder, a FIFO or a device, a file above ``max_bytes``.
    ``stat`` only: nothing is opened."""
    path = Path(folder) / name
    try:
        target = path.resolve()
        outside = None if target.is_relative_to(Path(folder).resolve()) else target
    except (OSError, RuntimeError):  # RuntimeError: Path.resolve's "Symlink loop" before Python 3.13
        return f"'{path}' is a symbolic link loop; replace it with the file itself"
    if outside is not None:
        return (f"'{path}' is a symbolic link to '{outside}', outside the checkpoint folder; copy the file itself "
                "into the folder (cp -L) if it belongs to the checkpoint")
    problem = regular_file_problem(path, "checkpoint file")
    if problem is None and max_bytes is not None and os.path.getsize(path) > max_bytes:
        problem = (f"checkpoint file '{path}' is {os.path.getsize(path):,} bytes, above the {max_bytes:,}-byte "
                   "limit for a file of its kind; it is not one saved by save_pretrained")
    return problem


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_config_values(config: dict, model: str) -> None:
    """``min_pixels`` / ``max_pixels`` (min <= max) and SpatialReward's ``max_new_tokens``: positive integers."""
    for key in ("min_pixels", "max_pixels", "max_new_tokens"):
        if key in config and not _positive_int(config[key]):
            raise ModelLoadError(f"config.json of model '{model}': {key} must be a positive integer, got "
                                 f"{json.dumps(config[key])[:60]}")
    if "min_pixels" in config and "max_pixels" in config and config["min_pixels"] > config["max_pixels"]:
        raise ModelLoadError(f"config.json of model '{model}': min_pixels {config['min_pixels']:,} is above "
                             f"max_pixels {config['max_pixels']:,}")


def _indexed_weight_files(folder: Path) -> list:
    index = folder / "model.safetensors.index.json"
    if not index.is_file():
        return []
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
        files = sorted(set(weight_map.values()))
    except (OSError, UnicodeDecodeError, ValueError, AttributeError, TypeError):
        raise ModelLoadError(f"{index} is not a safetensors index (a JSON object with a weight_map of file "
                             "names); download the checkpoint again") from None
    if not all(isinstance(name, str) and "/" not in name and name.endswith(".safetensors") for name in files):
        raise ModelLoadError(f"{index} names weight files that are not safetensors files of its folder")
    missing = [name for name in files if not (folder / name).is_file()]
    if missing:
        raise ModelLoadError(f"{index} names weight files that are missing: {', '.join(missing[:5])}; the download "
                             "is incomplete")
    return files


def check_weight_files(folder) -> list:
    """The folder's safetensors files (validated headers); pickle-only weights or damaged files raise."""
    from safetensors import SafetensorError, safe_open

    folder = Path(folder)
    weights = sorted(p.name for p in folder.glob("*.safetensors"))
    if not weights:
        pickles = sorted(p.name for p in folder.iterdir() if p.name.endswith(PICKLE_SUFFIXES))
        found = f" (found {', '.join(pickles[:3])}: pickle files are never loaded)" if pickles else ""
        raise ModelLoadError(f"no *.safetensors weights in '{folder}'{found}; this package loads safetensors only: "
                             "convert the weights with save_pretrained(..., safe_serialization=True)")
    for name in sorted(set(weights) | set(_indexed_weight_files(folder))):
        problem = regular_file_problem(folder / name, "weight file")  # safe_open would block on a FIFO
        if problem is not None:
            raise ModelLoadError(problem)
        try:
            with safe_open(str(folder / name), "pt") as handle:
                handle.keys()
        except (SafetensorError, OSError, ValueError) as err:
            reason = str(err).removeprefix("Error while deserializing header: ")
            raise ModelLoadError(f"{folder / name} is not a valid safetensors file ({reason[:160]}): the download is "
                                 "incomplete or damaged; download it again") from None
    return weights


def _has_template_entry(folder: Path) -> bool:
    for name in _CONFIG_WITH_TEMPLATE:
        if regular_file_problem(folder / name) is not None:  # missing, or a FIFO / device that never ends
            continue
        try:
            data = json.loads((folder / name).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError):
            continue
        if isinstance(data, dict) and data.get("chat_template"):
            return True
    return False


def check_tokenizer_files(folder) -> None:
    """A tokenizer vocabulary and a chat template are saved beside the weights."""
    folder = Path(folder)
    if not ((folder / "tokenizer.json").is_file() or
            ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file())):
        raise ModelLoadError(f"'{folder}' has no tokenizer.json (nor vocab.json + merges.txt): the tokenizer would "
                             "be empty; save the base model's processor beside the weights (processor.save_pretrained)")
    if not (any((folder / name).is_file() for name in CHAT_TEMPLATE_FILES) or _has_template_entry(folder)):
        raise ModelLoadError(f"'{folder}' has no chat template (chat_template.jinja missing): prompts cannot be "
                             "built; save the base model's processor beside the weights (processor.save_pretrained)")


def validate_checkpoint_folder(folder, config: dict, weights: bool = True) -> None:
    """Everything above for a local checkpoint folder whose ``config.json`` is ``config`` (``weights=False``: not
    the weight files, for commands that read only the config and the processor)."""
    check_config_values(config, str(folder))
    if weights:
        check_weight_files(folder)
    check_tokenizer_files(folder)


def check_processor(processor, model: str) -> None:
    """The processor's chat template renders a probe conversation (a text and an image) in the sandbox."""
    probe = [{"role": "user", "content": [{"type": "text", "text": "probe"}, {"type": "image"}]}]
    try:
        text = processor.apply_chat_template(probe, tokenize=False, add_generation_prompt=True)
    except Exception as err:  # noqa: BLE001 - jinja2's TemplateError/SecurityError, transformers' ValueError
        raise ModelLoadError(f"the chat template of '{model}' cannot be rendered ({type(err).__name__}: "
                             f"{str(err)[:200]}); save the base model's chat_template.jinja beside the weights") from None
    if not isinstance(text, str) or "probe" not in text:
        raise ModelLoadError(f"the chat template of '{model}' does not write the prompt text; save the base "
                             "model's chat_template.jinja beside the weights")


def explain_load_failure(model_class, model: str, err: BaseException) -> str:
    """A one-line reason for a failed ``from_pretrained``: the tensors whose shapes do not fit the config (read
    from the safetensors headers and a meta-device model), else the error's first line."""
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:300]
    folder = Path(model)
    if not folder.is_dir():
        return text
    try:
        import torch
        from safetensors import safe_open

        config = model_class.config_class.from_pretrained(str(folder))
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in model_class(config).state_dict().items()}
        wrong = []
        for path in sorted(folder.glob("*.safetensors")):
            with safe_open(str(path), "pt") as handle:
                for key in handle.keys():
                    shape = tuple(handle.get_slice(key).get_shape())
                    if key in expected and expected[key] != shape:
                        wrong.append(f"{key} is {list(shape)} in {path.name}, the config makes {list(expected[key])}")
    except Exception:  # noqa: BLE001 - the explanation is best effort; the original reason stands
        return text
    if wrong:
        return (f"{len(wrong)} weight(s) do not fit the config: {'; '.join(wrong[:3])} (weights and config.json "
                "come from different models)")
    return text


__all__ = ["ModelLoadError", "check_config_values", "check_processor", "check_tokenizer_files", "check_weight_files",
           "checkpoint_file_problem", "explain_load_failure", "read_config_file", "read_json_object",
           "validate_checkpoint_folder"]
