"""Load a scorer checkpoint (local folder or Hub repo id) with clear errors for the usual mistakes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..backbone_families import is_vlm_model_type
from ..image_io import MIEScoreInputError

DTYPES = ("auto", "float32", "bfloat16", "float16")


class ModelLoadError(MIEScoreInputError):
    """The model reference cannot be used as a MIEScore checkpoint; the message says why and what to do."""


def resolve_device(device: str = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` when available else ``"cpu"``; any other value must name a torch device."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ModelLoadError(f"unknown device '{device}'; use auto, cpu, cuda, cuda:1, mps ...") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device '{device}' requested but CUDA is not available; use --device cpu")
    return device


def resolve_dtype(dtype: str, device: str):
    import torch

    if dtype not in DTYPES:
        raise ModelLoadError(f"unknown dtype '{dtype}'; choose one of {', '.join(DTYPES)}")
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)


def read_checkpoint_config(model: str, token: str | None = None) -> dict:
    """The ``config.json`` of a local checkpoint folder or a Hub repo, as a dict (``token`` reads private repos)."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"model '{model}' is a file; pass the checkpoint folder that holds config.json")
        config_file = path / "config.json"
        if not config_file.is_file():
            raise ModelLoadError(f"model folder '{model}' has no config.json; is it a saved checkpoint?")
    else:
        looks_like_repo = model.count("/") == 1 and not model.startswith((".", "/", "~"))
        if not looks_like_repo:
            raise ModelLoadError(f"model path '{model}' does not exist; check the path")
        try:
            from huggingface_hub import hf_hub_download

            config_file = Path(hf_hub_download(model, "config.json", token=token))
        except Exception as err:  # network, auth, missing repo: all mean "cannot use this reference"
            raise ModelLoadError(
                f"model '{model}' is not a local folder and could not be fetched from the Hugging Face Hub "
                f"({type(err).__name__}); check the repo id, your network, or pass a local checkpoint folder"
            ) from None
    try:
        return json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ModelLoadError(f"config.json of model '{model}' is unreadable ({err})") from None


def _load_checked(model_class, kind: str, model: str, device: str, dtype: str, token: str | None):
    """``model_class.from_pretrained`` on the resolved device/dtype, in eval mode; load errors -> ModelLoadError."""
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    try:
        scorer = model_class.from_pretrained(os.fspath(model), dtype=torch_dtype, token=token)
        # Load the processor now: fail early (not inside an RL loop or on the first request), and keep working
        # if the folder goes away.
        scorer.get_processor()
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"could not load {kind} checkpoint '{model}': {err}") from None
    return scorer.to(device).eval()


def load_scorer(model: str, device: str = "auto", dtype: str = "auto", token: str | None = None):
    """Load a MIEScore checkpoint with the installed package's classes; returns the model in eval mode.

    ``token``: a Hugging Face access token for a private or gated Hub repo (None: huggingface_hub's default,
    which reads ``HF_TOKEN`` or the stored login).
    """
    config = read_checkpoint_config(os.fspath(model), token=token)
    model_type = config.get("model_type")
    if model_type != "miescore":
        hint = ""
        if is_vlm_model_type(model_type):
            name = "Qwen3-VL" if model_type in ("qwen3_vl", "qwen3_vl_moe") else f"{model_type} VLM"
            hint = (f" It is a plain {name} checkpoint: start a scorer from it with "
                    "MIEScoreModel.from_backbone(path) and fine-tune it (trainers/train_miescore.py).")
        raise ModelLoadError(
            f"model '{model}' is not a MIEScore checkpoint (its config has model_type={model_type!r}, "
            f"expected 'miescore').{hint}"
        )
    from ..modeling_miescore import MIEScoreModel

    return _load_checked(MIEScoreModel, "MIEScore", model, device, dtype, token)


SPATIALREWARD_MODEL_TYPES = ("spatialreward", "qwen3_vl")


def load_spatialreward(model: str, device: str = "auto", dtype: str = "auto", token: str | None = None):
    """Load a SpatialReward checkpoint (ours, or the authors' plain Qwen3-VL one) in eval mode.

    ``token`` as for :func:`load_scorer`.

    Raises :class:`ModelLoadError` naming the problem: missing folder, wrong model type, unreadable weights.
    """
    config = read_checkpoint_config(os.fspath(model), token=token)
    model_type = config.get("model_type")
    if model_type not in SPATIALREWARD_MODEL_TYPES:
        hint = (" It is a MIEScore checkpoint: score with MIEScore instead (`miescore score`, or --model in the "
                "Space)." if model_type == "miescore" else "")
        raise ModelLoadError(
            f"model '{model}' is not a SpatialReward checkpoint (its config has model_type={model_type!r}, "
            f"expected one of {SPATIALREWARD_MODEL_TYPES}).{hint}"
        )
    from ..modeling_spatialreward import SpatialRewardModel

    return _load_checked(SpatialRewardModel, "SpatialReward", model, device, dtype, token)
