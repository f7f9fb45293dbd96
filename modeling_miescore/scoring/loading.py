"""Load a scorer checkpoint (local folder or Hub repo id) with clear errors for the usual mistakes.

A local folder is validated first (:mod:`.checkpoint_files`: config values, safetensors headers, tokenizer and
chat template), so a damaged one is one :class:`ModelLoadError` naming the file, never a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..hub.backbone_families import is_vlm_model_type
from .checkpoint_files import ModelLoadError, check_config_values, check_processor, explain_load_failure, \
    read_config_file, validate_checkpoint_folder

DTYPES = ("auto", "float32", "bfloat16", "float16")


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


def model_reference(model: str) -> str:
    """How a run records which model it used: a local folder as its real path, a Hub repo id as given."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


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
    config = read_config_file(config_file, model)
    check_config_values(config, model)
    return config


def _load_checked(model_class, kind: str, model: str, device: str, dtype: str, token: str | None, config: dict):
    """``model_class.from_pretrained`` on the resolved device/dtype, in eval mode; load errors -> ModelLoadError.
    ``config``: the checkpoint's ``config.json``, already read (and its values checked) by the caller."""
    device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, device)
    model = os.fspath(model)
    if Path(model).expanduser().is_dir():
        validate_checkpoint_folder(Path(model).expanduser(), config)
    try:
        # safetensors only: a pickle file is never opened (torch.load), whatever else the folder holds
        scorer = model_class.from_pretrained(model, dtype=torch_dtype, token=token, use_safetensors=True)
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as err:
        raise ModelLoadError(f"could not load {kind} checkpoint '{model}': "
                             f"{explain_load_failure(model_class, model, err)}") from None
    try:
        # Load the processor now: fail early (not inside an RL loop or on the first request), and keep working
        # if the folder goes away.
        check_processor(scorer.get_processor(), model)
    except (OSError, ValueError) as err:
        raise ModelLoadError(f"could not load the processor of {kind} checkpoint '{model}': {err}") from None
    scorer = scorer.to(device).eval()
    warn_non_finite_weights(scorer, model)  # on the device: a fast check even for billions of weights
    return scorer


def warn_non_finite_weights(model, name: str) -> list:
    """Warn (stderr, once per load) naming the weight tensors that hold NaN or Inf; returns their names. Such a
    model scores NaN: every command then reports each edit as a model fault instead of writing a score."""
    import sys

    import torch

    broken = [key for key, p in model.named_parameters() if not bool(torch.isfinite(p.detach()).all())]
    if broken:
        print(f"warning: {len(broken)} weight tensor(s) of '{name}' hold NaN or Inf ({', '.join(broken[:3])}"
              f"{', ...' if len(broken) > 3 else ''}): its scores will not be finite; run miescore doctor on it",
              file=sys.stderr)
    return broken


def load_scorer(model: str, device: str = "auto", dtype: str = "auto", token: str | None = None):
    """Load a MIEScore checkpoint with the installed package's classes; returns the model in eval mode.
    ``token``: a Hugging Face access token for a private or gated Hub repo (None: ``HF_TOKEN`` or the stored login).
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
    from ..hub.modeling_miescore import MIEScoreModel  # deferred: loads torch, transformers

    return _load_checked(MIEScoreModel, "MIEScore", model, device, dtype, token, config)


SPATIALREWARD_MODEL_TYPES = ("spatialreward", "qwen3_vl")


def load_spatialreward(model: str, device: str = "auto", dtype: str = "auto", token: str | None = None):
    """Load a SpatialReward checkpoint (ours, or the authors' plain Qwen3-VL one) in eval mode; ``token`` as for
    :func:`load_scorer`. Raises :class:`ModelLoadError` naming the problem."""
    config = read_checkpoint_config(os.fspath(model), token=token)
    model_type = config.get("model_type")
    if model_type not in SPATIALREWARD_MODEL_TYPES:
        hint = (" It is a MIEScore checkpoint: score with MIEScore instead (`miescore score`, or --model in the "
                "Space)." if model_type == "miescore" else "")
        raise ModelLoadError(
            f"model '{model}' is not a SpatialReward checkpoint (its config has model_type={model_type!r}, "
            f"expected one of {SPATIALREWARD_MODEL_TYPES}).{hint}"
        )
    from ..hub.modeling_spatialreward import SpatialRewardModel  # deferred: loads torch, transformers

    return _load_checked(SpatialRewardModel, "SpatialReward", model, device, dtype, token, config)
