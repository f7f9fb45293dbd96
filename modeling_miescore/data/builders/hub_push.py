"""``push_to_hub``: check before building that a push can work, then upload the finished folder as one commit.

:func:`check_hub_push` runs before anything is read: a bad repository id, offline mode, no token, or a Hub that
cannot be reached (or refuses the token) raise :class:`HubPushUnavailableError`, so the command cannot run as
given. A failure of the upload itself, after the local build succeeded, raises :class:`HubPushError`. Messages
name the API parameter (``push_to_hub``); the command line rewords it as ``--push-to-hub``.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["HubPushError", "HubPushUnavailableError", "check_hub_push", "hub_is_offline", "push_folder_to_hub"]


class HubPushError(RuntimeError):
    """The upload to the Hub failed (the local dataset is complete)."""


class HubPushUnavailableError(HubPushError):
    """A push cannot work (bad repository id, offline, no token, Hub unreachable): found before building."""


def hub_is_offline() -> bool:
    """Whether the Hub is in offline mode: ``HF_HUB_OFFLINE`` (else ``TRANSFORMERS_OFFLINE``) as it is set now,
    read as huggingface_hub reads it (offline for one of its ``ENV_VARS_TRUE_VALUES``: 1, ON, YES, TRUE; ``0`` is
    online); when neither is set, huggingface_hub's own ``is_offline_mode()``."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE")
    if value is None:
        return constants.is_offline_mode()
    return value.upper() in constants.ENV_VARS_TRUE_VALUES


def _first_line(err: BaseException) -> str:
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _upload_state(err: BaseException, created: bool, repo_id: str, folder, allow_patterns) -> str:
    """What a failed push left on the Hub: the repository (created or not), and whether the folder's files were
    committed (never, unless the failed request was the commit itself: then the Hub's answer is unknown)."""
    from huggingface_hub.utils import filter_repo_objects

    root = Path(folder)
    names = sorted(filter_repo_objects((p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()),
                                       allow_patterns=allow_patterns))
    files = f"{len(names)} file(s) ({', '.join(names[:6])}{', ...' if len(names) > 6 else ''})"
    if not created:
        return f"nothing was uploaded (the repository {repo_id} was not created or changed; {files} to push)"
    if "/commit/" in _request_url(err):
        return (f"the repository {repo_id} exists; the commit of the {files} got no usable answer, so the Hub may "
                "or may not hold them (uploads are a single commit: all of them or none): look at the "
                "repository's commits before pushing again")
    return (f"the repository {repo_id} exists, but nothing was committed to it (uploads are a single commit): none "
            f"of the {files} is on the Hub")


def _request_url(err: BaseException) -> str:
    """The URL of the request an HTTP error (huggingface_hub's or httpx's) failed on, or ``""``."""
    response = getattr(err, "response", None)
    try:  # httpx raises RuntimeError for a request or response it does not have
        request = response.request if response is not None else getattr(err, "request", None)
    except RuntimeError:
        return ""
    return str(getattr(request, "url", ""))


def check_hub_push(repo_id: str, token: str | None = None) -> str | None:
    """Raise :class:`HubPushUnavailableError` unless ``repo_id`` is valid, the Hub is online, a token is
    available (``token`` or the logged-in one) and the Hub accepts it (one ``whoami`` request); returns the
    token's user name (the namespace a bare ``repo_id`` is created in)."""
    import huggingface_hub
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except Exception as err:  # noqa: BLE001 - HFValidationError and friends
        raise HubPushUnavailableError(f"push_to_hub: invalid repository id {repo_id!r}: {err}") from None
    if hub_is_offline():
        raise HubPushUnavailableError(
            f"push_to_hub={repo_id}: the Hugging Face Hub is in offline mode (HF_HUB_OFFLINE is set); unset it and "
            "log in (`hf auth login`) to push, or build without push_to_hub and upload the folder later"
        )
    token = token or huggingface_hub.get_token()
    if not token:
        raise HubPushUnavailableError(
            f"push_to_hub={repo_id}: no Hugging Face token; log in with `hf auth login` or set HF_TOKEN, or build "
            "without push_to_hub and upload the folder later"
        )
    try:
        user = huggingface_hub.HfApi(token=token).whoami()
    except Exception as err:  # noqa: BLE001 - network / auth / HTTP errors all become one message
        raise HubPushUnavailableError(
            f"push_to_hub={repo_id}: cannot use the Hub ({type(err).__name__}: {_first_line(err)}); check the "
            "network and the token (`hf auth whoami`), or build without push_to_hub and upload the folder later"
        ) from None
    return user.get("name") if isinstance(user, dict) else None


def push_folder_to_hub(
    folder: str | os.PathLike,
    repo_id: str,
    *,
    private: bool | None = None,
    token: str | None = None,
    commit_message: str = "Upload dataset",
    revision: str | None = None,
    repo_type: str = "dataset",
    allow_patterns: list[str] | None = None,
) -> str:
    """Upload a finished folder (a dataset, or with ``repo_type="model"`` a model / adapter) as **one commit**
    (all files or none) and return its URL. ``allow_patterns``: only the files matching these globs.

    Raises :class:`HubPushError` with a one-line reason on any failure (network, auth, HTTP).
    """
    what = "dataset" if repo_type == "dataset" else "folder"
    created = False
    try:
        from huggingface_hub import HfApi

        api = HfApi(token=token)
        api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
        created = True
        info = api.upload_folder(
            repo_id=repo_id,
            folder_path=os.fspath(folder),
            repo_type=repo_type,
            commit_message=commit_message,
            revision=revision,
            allow_patterns=allow_patterns,
        )
    except Exception as err:  # noqa: BLE001 - network / auth / HTTP errors all become one message
        raise HubPushError(
            f"push_to_hub {repo_id} failed ({type(err).__name__}: {_first_line(err)}); "
            f"{_upload_state(err, created, repo_id, folder, allow_patterns)}; the local {what} at "
            f"{os.fspath(folder)} is complete. Check the network and `hf auth login`, then push the folder again"
        ) from None
    prefix = "datasets/" if repo_type == "dataset" else ""
    return getattr(info, "commit_url", None) or f"https://huggingface.co/{prefix}{repo_id}"
