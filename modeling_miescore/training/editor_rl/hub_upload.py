"""``--push_to_hub`` for an editor-RL run: the adapter, its card, ``run.json``, ``metrics.jsonl`` and the sample
grids go to a Hub model repository in one commit (huggingface_hub ``upload_folder``), as diffusers' training
scripts push theirs; checkpoints and rollouts stay local.

The push is checked before training starts, as the dataset builders check theirs
(:func:`modeling_miescore.data.builders.hub_push.check_hub_push`: a valid repository id, the Hub online, a
token, one ``whoami``): a push that cannot work is one error and exit status 2 before anything is trained. The
repository defaults to ``output_dir``'s folder name in the token's namespace (``hub_model_id`` names another).
An upload that fails after training raises :class:`~modeling_miescore.data.builders.hub_push.HubPushError`
(the run's folder is complete; exit status 1 from the recipe).
"""

from __future__ import annotations

from pathlib import Path

from ...image_io import MIEScoreInputError

__all__ = ["PUSHED_FILES", "check_run_push", "push_run"]

# what goes to the Hub (upload_folder allow_patterns): the adapter (or the full transformer), card, record, logs
PUSHED_FILES = ["pytorch_lora_weights.safetensors", "README.md", "run.json", "metrics.jsonl", "samples/*",
                "transformer/*", "transformer.safetensors"]


def check_run_push(config) -> str:
    """The full repository id (``namespace/name``) the run will push to; :class:`MIEScoreInputError` when the
    push cannot work (no token, offline, unreachable Hub, a bad id), before anything is trained."""
    from ...data.builders.hub_push import HubPushUnavailableError, check_hub_push

    repo_id = config.hub_model_id or Path(config.output_dir).name
    try:
        user = check_hub_push(repo_id)
    except HubPushUnavailableError as error:
        message = str(error).replace("build without push_to_hub", "train without --push_to_hub")
        message = message.replace(f"push_to_hub={repo_id}", f"--push_to_hub (repository {repo_id})")
        raise MIEScoreInputError(message.replace("push_to_hub: invalid", "--push_to_hub: invalid")) from None
    return repo_id if "/" in repo_id or not user else f"{user}/{repo_id}"


def push_run(output_dir, repo_id: str, *, private=None) -> str:
    """Upload the run's :data:`PUSHED_FILES` to ``repo_id`` in one commit; returns the commit URL."""
    from ...data.builders.hub_push import push_folder_to_hub

    return push_folder_to_hub(output_dir, repo_id, private=private, repo_type="model",
                              commit_message="Upload Flow-GRPO adapter (miescore)", allow_patterns=PUSHED_FILES)
