"""``--push-to-hub``: check early that a push is possible, then upload a finished dataset folder as one commit."""

from __future__ import annotations

import os

__all__ = ["HubPushError", "check_hub_push", "hub_is_offline", "push_folder_to_hub"]

_TRUE = {"1", "true", "yes", "on"}


class HubPushError(RuntimeError):
    """``--push-to-hub`` cannot be done (offline, bad repo id, no credentials, network failure)."""


def hub_is_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or ``HF_DATASETS_OFFLINE``) is set now or was at import time."""
    if any(os.environ.get(v, "").strip().lower() in _TRUE for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")):
        return True
    try:
        from huggingface_hub import constants

        return bool(getattr(constants, "HF_HUB_OFFLINE", False))
    except Exception:  # noqa: BLE001
        return False


def check_hub_push(repo_id: str) -> None:
    """Fail fast (before building) when a push is impossible: bad repo id or offline mode."""
    try:
        from huggingface_hub.utils import validate_repo_id

        validate_repo_id(repo_id)
    except Exception as err:  # noqa: BLE001 - HFValidationError and friends
        raise HubPushError(f"--push-to-hub: invalid repository id {repo_id!r}: {err}") from None
    if hub_is_offline():
        raise HubPushError(
            f"--push-to-hub {repo_id}: the Hugging Face Hub is in offline mode (HF_HUB_OFFLINE is set); "
            "unset it and log in (`hf auth login`) to push, or drop --push-to-hub and upload the folder later"
        )


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str = "Upload dataset",
    revision: str | None = None,
) -> str:
    """Upload a finished dataset folder as **one commit** (all files or none) and return its URL.

    Raises :class:`HubPushError` with a one-line reason on any failure (offline, network, auth).
    """
    check_hub_push(repo_id)
    try:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=os.fspath(folder),
            repo_type="dataset",
            commit_message=commit_message,
            revision=revision,
        )
    except Exception as err:  # noqa: BLE001 - network / auth / HTTP errors all become one message
        reason = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise HubPushError(
            f"--push-to-hub {repo_id} failed ({type(err).__name__}: {reason}); the local dataset at "
            f"{os.fspath(folder)} is complete, and nothing was committed to the Hub (uploads are a "
            "single commit). Check the network and `hf auth login`, then push again"
        ) from None
    return getattr(info, "commit_url", None) or f"https://huggingface.co/datasets/{repo_id}"
