"""MIEScore on vLLM's pooling runner: the export (``miescore export-vllm`` of a MIEScore checkpoint).

vLLM has no architecture for MIEScore's regression head, and its built-in classifier adapter
(``as_seq_cls_model``) holds a single linear layer; the head is ``dense -> GELU -> out_proj`` on the last prompt
token, so it comes as an out-of-tree model, ``MIEScoreForImageScoring`` of the vLLM plugin in
``scripts/vllm_plugin/`` (entry point ``vllm.general_plugins``; ``scripts/vllm_cpu.sh provision`` installs it into the
vLLM venv). The model is vLLM's own Qwen3-VL with that head as the classifier of its pooler, so scoring gets vLLM's
continuous batching and prefix caching.

The export writes the backbone config as a plain Qwen3-VL config with ``architectures:
[MIEScoreForImageScoring]``, ``num_labels`` (the number of scores) and ``head_hidden_size``; the tensors renamed
(``backbone.`` -> ``model.``, ``head.`` -> ``score.``); the tokenizer and processor (its pixel range set to the
checkpoint's) and the MIEScore config itself as ``miescore_config.json``, which the client reads for the prompt,
pixel range, score names, scale and overall weights. Only the regression head is exported: the ``lm_digits`` head
reads the language model's digit logits at answer positions, which a pooling request does not give.

The client is :class:`modeling_miescore.judges.miescore_api.MIEScoreAPI`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict


__all__ = ["MIESCORE_ARCHITECTURE", "MIESCORE_CONFIG_FILE", "miescore_plain_config",
           "write_miescore_weights"]

MIESCORE_ARCHITECTURE = "MIEScoreForImageScoring"  # scripts/vllm_plugin/miescore_vllm/__init__.py registers it
MIESCORE_CONFIG_FILE = "miescore_config.json"
_RENAMED = (("backbone.", "model."), ("head.", "score."))


def miescore_plain_config(config: Dict[str, Any], source: str) -> Dict[str, Any]:
    """The export's ``config.json``: the backbone's Qwen3-VL config with the pooling model's architecture and head
    size (module docstring). ``ValueError`` for a head that is not the regression head."""
    if config.get("score_head", "regression") != "regression":
        raise ValueError(f"'{source}' has the {config.get('score_head')!r} score head, which reads the language "
                         "model's digit logits at answer positions; only the regression head runs as a vLLM pooling "
                         "model")
    plain = dict(config["backbone_config"])
    plain.pop("_name_or_path", None)
    plain.update(architectures=[MIESCORE_ARCHITECTURE], num_labels=len(config["score_names"]),
                 head_hidden_size=int(config["head_hidden_size"]), min_pixels=int(config["min_pixels"]),
                 max_pixels=int(config["max_pixels"]), exported_by=f"miescore export-vllm {source}")
    plain.pop("id2label", None)
    plain.pop("label2id", None)
    return plain


def write_miescore_weights(source: Path, staging: Path) -> None:
    """The checkpoint's tensors renamed for the plugin model (one file per shard, the index rewritten)."""
    from safetensors.torch import load_file, save_file

    index = source / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() else \
        ["model.safetensors"]

    def renamed(name: str) -> str:
        for old, new in _RENAMED:
            if name.startswith(old):
                return new + name[len(old):]
        return name

    weight_map = {}
    for name in files:
        tensors = {renamed(k): v for k, v in load_file(str(source / name)).items()}
        save_file(tensors, str(staging / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in tensors})
    if index.is_file():
        data = json.loads(index.read_text())
        data["weight_map"] = weight_map
        (staging / index.name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
