"""The bad-input corpus's editor cases of issue 31: the editor-RL trainer (``trainers/flow_grpo_editor.py``) and
``miescore edit``, tried as a hostile or unlucky user would, on the toy editor (``testing.toy_editor``).

Entries (this module holds the ``trainer`` cases and lists both; the ``edit`` cases are :mod:`.bad_input_edit`, the
runners, inputs, rewards and stand-in replica both use :mod:`.bad_input_editor_runs`):

* ``trainer``: bad config values (tracebacks and nonsense trained with exit 0 before), output folders that alias
  an input (the dataset's folder as written, as ``dir/../dir`` and through a link; the editor's model folder, with
  ``finetuning: full`` and ``--overwrite_output_dir``; a file, a path under a file, ``/proc``), invented rewards
  (strings, booleans, 1e308, values off the declared range, duplicate keys and off-scale values from a ``serve:``
  replica), rewards that exit (``SystemExit``, ``KeyboardInterrupt``, ``os._exit``), unbounded replicas (a gzip
  bomb, a trickle, a redirect), credentials in reward URLs and API keys, sources that are no image files (a FIFO,
  ``/dev/zero``, a truncated PNG), damaged checkpoints on ``--resume``, a resume with other settings and a full
  disk while a checkpoint is written;
* ``edit``: ``--input`` being the ``--out`` folder's own ``edits.jsonl``, ``--out`` the model folder, control
  characters in an instruction or an id, a garbage or NaN LoRA, a FIFO, ``/dev/zero`` or truncated source, an
  editor that cannot load offline;
* (the ``editor-benchmarks`` entry, the benchmarks' converters and judges, is :mod:`.bad_input_editor_benchmarks`).

*Clean* follows :mod:`.bad_input_corpus`: the documented exit status (2 bad input, 1 a stop by the reward or the
disk, 0 where a hostile but valid input must simply work), the recipe's one ``error:`` / ``stopped:`` line naming
the problem, no traceback, no hang; *data lost* when an input changed (hashed before and after), a credential was
written or printed, a partial checkpoint was left or ``metrics.jsonl`` holds a non-finite number. The cases that
could take the machine down on code without the fixes (``os._exit``, ``/dev/zero``, a gzip bomb) run in a child
process with 6 GB of address space. Only entry points that the code before issue 31 already had are used (the
recipe's ``cli``, ``miescore edit``), so these modules run against it too (``benchmarks/bad_input_table.py``).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from functools import partial
from pathlib import Path
from unittest import mock

import local_http
from local_http import bomb_reply, raw_reply, trickle_reply
from PIL import Image

from .bad_input_corpus import SECRET_PASSWORD, Case, Outcome
from .bad_input_edit import edit_cases
from .bad_input_editor_runs import (HERE, bad_source_rows, file_hashes, fresh_folder, inputs, replica_reply,
                                    replica_score, run_recipe)

ENTRIES = ("trainer", "edit")


# ---------------------------------------------------------------------------------------------- trainer cases


CONFIG_VALUES = [  # (what, overrides, needle)
    ("per_device_batch_size: 0", dict(per_device_batch_size=0), "per_device_batch_size"),
    ("per_device_batch_size: -8", dict(per_device_batch_size=-8), "per_device_batch_size"),
    ("updates_per_step: 0", dict(updates_per_step=0), "updates_per_step"),
    ("save_steps: 0", dict(save_steps=0), "save_steps"),
    ("ema_update_interval: 0", dict(ema_decay=0.9, ema_update_interval=0), "ema_update_interval"),
    ("learning_rate: -1", dict(learning_rate=-1.0), "learning_rate"),
    ("learning_rate: NaN", dict(learning_rate=float("nan")), "learning_rate"),
    ("learning_rate: 0", dict(learning_rate=0.0), "learning_rate"),
    ("lora_rank: 0", dict(lora_rank=0), "lora_rank"),
    ("lora_rank: -4", dict(lora_rank=-4), "lora_rank"),
    ("lora_rank: 100000", dict(lora_rank=100000), "lora_rank"),
    ("lora_dropout: 2", dict(lora_dropout=2.0), "lora_dropout"),
    ("num_inference_steps: 0", dict(num_inference_steps=0), "num_inference_steps"),
    ("num_inference_steps: 1", dict(num_inference_steps=1), "num_inference_steps"),
    ("train_fraction: 0", dict(train_fraction=0.0), "train_fraction"),
    ("train_fraction: 1.5", dict(train_fraction=1.5), "train_fraction"),
    ("train_steps: windw", dict(train_steps="windw"), "did you mean 'sde_window'"),
    ("sde_type: sdee", dict(sde_type="sdee"), "did you mean 'sde'"),
    ("std_level: grop", dict(std_level="grop"), "did you mean 'group'"),
    ("window_size: 0", dict(train_steps="sde_window", window_size=0), "window_size"),
    ("window_size: 50", dict(train_steps="sde_window", window_size=50), "window_size"),
    ("window_start above window_end", dict(train_steps="sde_window", window_start=0.6, window_end=0.2), "window_"),
    ("report_to: tensorbord", dict(report_to="tensorbord"), "did you mean 'tensorboard'"),
    ("gradient_accumulation_steps: 0", dict(gradient_accumulation_steps=0), "gradient_accumulation_steps"),
    ("gradient_accumulation_steps: -1", dict(gradient_accumulation_steps=-1), "gradient_accumulation_steps"),
    ("max_steps: 0", dict(max_steps=0), "max_steps"),
    ("max_steps: -3", dict(max_steps=-3), "max_steps"),
    ("clip_range_low: -0.1", dict(clip_range_low=-0.1), "clip_range_low"),
    ("beta: NaN", dict(beta=float("nan")), "beta"),
    ("ema_decay: 2", dict(ema_decay=2.0), "ema_decay"),
    ("max_grad_norm: -1", dict(max_grad_norm=-1.0), "max_grad_norm"),
    ("advantage_clip: -5", dict(advantage_clip=-5.0), "advantage_clip"),
    ("editor_options height -32", dict(editor_options={"height": -32}), "height"),
    ("max_train_rows: 0", dict(max_train_rows=0), "max_train_rows"),
    ("sample_grid_steps: -1", dict(sample_grid_steps=-1), "sample_grid_steps"),
    ("an editor on the Hub, offline", dict(editor="flux2-klein", model_name_or_path="nobody/not-cached-editor"),
     "nobody/not-cached-editor"),
    ("an editor factory that fails", dict(editor="json:dumps"), "json:dumps"),
]


def _output_alias(kind: str, corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    folder = fresh_folder(corpus, f"alias-{kind}")
    data = toy.rows.parent
    outs = {"dataset folder": data, "dataset folder as dir/../dir": data / ".." / data.name,
            "dataset folder through a link": folder / "link", "model folder": toy.model,
            "model folder, finetuning: full, overwrite": toy.model}
    if kind == "dataset folder through a link":
        os.symlink(data, folder / "link")
    extra = dict(finetuning="full", overwrite_output_dir=True) if "full" in kind else {}
    run_recipe(corpus, outcome, 2, "output_dir", name=f"alias-{kind}-run", out=outs[kind], **extra)


def _output_unwritable(kind: str, corpus, outcome: Outcome) -> None:
    folder = fresh_folder(corpus, f"unwritable-{kind}")
    (folder / "file").write_text("x")
    out = {"a file": folder / "file", "under a file": folder / "file" / "run", "in /proc": "/proc/self/rl-run"}[kind]
    run_recipe(corpus, outcome, 2, "output_dir", name=f"unwritable-{kind}-run", out=Path(out))
    outcome.flag("data_lost", (folder / "file").read_text() != "x")


def _expect_training(outcome: Outcome, out: Path) -> None:
    """A hostile but valid reward: the run trains, and its metrics are finite."""
    outcome.flag("wrong_status", not (out / "pytorch_lora_weights.safetensors").is_file())


REWARD_CASES = [  # (what, reward, expected status, needle, child process)
    ("a callable returning strings", "text_reward", 1, "not_a_number", False),
    ("a callable returning booleans", "bool_reward", 1, "not_a_number", False),
    ("a callable declaring [0, 1], returning 5", "off_range_reward", 1, "out_of_range", False),
    ("a callable returning values near 1.7e308", "huge_reward", 0, None, False),
    ("a callable raising SystemExit(0)", "exit_reward", 1, "SystemExit", False),
    ("a callable raising KeyboardInterrupt", "interrupt_reward", 1, "KeyboardInterrupt", False),
    ("a callable calling os._exit(0)", "os_exit_reward", 1, "os._exit", True),
]


def _reward_case(reward: str, expect: int, needle, child: bool, corpus, outcome: Outcome) -> None:
    run_recipe(corpus, outcome, expect, needle, name=f"reward-{reward}", child=child,
                reward=f"{HERE}:{reward}", check=_expect_training if expect == 0 else None)


# ---------------------------------------------------------------------------------------------- served rewards


def _logged_rewards_are_the_edits_own(outcome: Outcome, out: Path) -> None:
    """Each reward in rollouts.jsonl is the replica's score of that very edit (a reordered answer read in order
    gives edits each other's rewards)."""
    _expect_training(outcome, out)
    records = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()] \
        if (out / "rollouts" / "rollouts.jsonl").is_file() else []
    for record in records:
        image = Image.open(out / "rollouts" / record["edited"])
        expected = replica_score(image) / 100  # miescore serve's 0-100 overall, as the reward's 0-1
        outcome.flag("data_lost", record["reward"] is None or abs(record["reward"] - expected) > 1e-6)
    outcome.flag("wrong_status", not records)


SERVED = {  # what -> (answer(request body) -> reply, expected status, needle, reward options)
    'overall: "55" (a string)': (lambda b: raw_reply(replica_reply(b, "55")), 1, "not_a_number", {}),
    "overall: true": (lambda b: raw_reply(replica_reply(b, True)), 1, "not_a_number", {}),
    "overall: 1e6": (lambda b: raw_reply(replica_reply(b, 1e6)), 1, "out_of_range", {}),
    "overall: -500": (lambda b: raw_reply(replica_reply(b, -500)), 1, "out_of_range", {}),
    "a body with 'results' twice": (lambda b: raw_reply(replica_reply(b, 90.0)[:-1] + b', "results": '
                                                        + replica_reply(b, 10.0)[12:]), 1, "duplicate_key", {}),
    "results in reverse order": (lambda b: raw_reply(replica_reply(b, order=lambda r: r[::-1])), 0, None, {}),
    "a 302 redirect": (lambda b: raw_reply(b"", 302, {"Location": "http://127.0.0.1:9/v1"}), 1, "redirect", {}),
    "a gzip bomb (1 GiB inflated)": (lambda b: bomb_reply(1 << 30, "gzip"), 1, "limit", {}),
    # 20 bytes a second for 20 s and more: past the 3 s deadline and the case's 15 s bound, never forever
    "a body trickling a byte every 50 ms": (lambda b: trickle_reply(20.0, "x" * 400), 1, "timeout", {"timeout": 3}),
}


def _served_case(what: str, corpus, outcome: Outcome) -> None:
    answer, expect, needle, options = SERVED[what]
    child = "bomb" in what
    with local_http.BadChatServer(lambda body, index: answer(body)) as replica:
        url = replica.origin.replace("http://", f"http://user:{SECRET_PASSWORD}@")
        run_recipe(corpus, outcome, expect, needle, name=f"served-{hashlib.sha256(what.encode()).hexdigest()[:8]}",
                    child=child, reward=f"serve:{url}", reward_options={"max_retries": 0, **options},
                    reward_timeout=60.0, save_rollouts_steps=1,
                    check=_logged_rewards_are_the_edits_own if expect == 0 else None)


def _newline_key(corpus, outcome: Outcome) -> None:
    run_recipe(corpus, outcome, 2, "newline", name="newline-key", env={"CORPUS_RL_KEY": f"sk-{SECRET_PASSWORD}\n"},
                reward="serve:http://127.0.0.1:9", reward_options={"api_key_env": "CORPUS_RL_KEY"})


def _unreachable_with_password(corpus, outcome: Outcome) -> None:
    spec = f"spatialreward-api:SpatialReward-8B@http://user:{SECRET_PASSWORD}@127.0.0.1:9/v1?key={SECRET_PASSWORD}"
    run_recipe(corpus, outcome, 1, "127.0.0.1:9", name="unreachable-password", reward=spec,
                reward_options={"max_retries": 0})


# ---------------------------------------------------------------------------------------------- sources


def _trainer_source(kind: str, corpus, outcome: Outcome) -> None:
    rows = bad_source_rows(corpus, kind)
    run_recipe(corpus, outcome, 2, "bad.png", name=f"trainer-source-{kind[-4:]}", child=kind == "/dev/zero",
                dataset=str(rows))


# ---------------------------------------------------------------------------------------------- resume


def _damaged_state(edit):
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))
    return damage


def _link_elsewhere(path: Path) -> None:
    other = path.parent.parent / "elsewhere" / path.name
    shutil.copytree(path, other)
    shutil.rmtree(path)
    os.symlink(other, path)


def _dir_instead(path: Path) -> None:
    path.unlink()
    path.mkdir()


DAMAGE = {  # what -> (file in the run folder, damage, needle)
    "run.json garbage": ("run.json", lambda p: p.write_text("{x"), "run.json"),
    "run.json a list": ("run.json", lambda p: p.write_text("[1]"), "run.json"),
    "trainer_state.json garbage": ("checkpoint-2/trainer_state.json", lambda p: p.write_text("g"),
                                   "trainer_state.json"),
    "trainer_state.json without step": ("checkpoint-2/trainer_state.json", _damaged_state(lambda d: d.pop("step")),
                                        "trainer_state.json"),
    "trainer_state.json at step -4": ("checkpoint-2/trainer_state.json", _damaged_state(lambda d: d.update(step=-4)),
                                      "trainer_state.json"),
    "a bad RNG state": ("checkpoint-2/trainer_state.json", _damaged_state(lambda d: d.update(python_rng=[1])),
                        "trainer_state.json"),
    "trainable.safetensors truncated": ("checkpoint-2/trainable.safetensors",
                                        lambda p: p.write_bytes(p.read_bytes()[:-9]), "trainable.safetensors"),
    "trainable.safetensors empty": ("checkpoint-2/trainable.safetensors", lambda p: p.write_bytes(b""),
                                    "trainable.safetensors"),
    "trainable.safetensors missing": ("checkpoint-2/trainable.safetensors", lambda p: p.unlink(),
                                      "trainable.safetensors"),
    "trainable.safetensors a pickle": ("checkpoint-2/trainable.safetensors",
                                       lambda p: p.write_bytes(b"\x80\x04\x95" + b"\x00" * 40), "trainable"),
    "optimizer.safetensors missing": ("checkpoint-2/optimizer.safetensors", lambda p: p.unlink(), "optimizer"),
    "optimizer.json garbage": ("checkpoint-2/optimizer.json", lambda p: p.write_text("]"), "optimizer.json"),
    "a checkpoint linked from another run": ("checkpoint-2", _link_elsewhere, "checkpoint-2"),
    "metrics.jsonl a folder": ("metrics.jsonl", _dir_instead, "metrics.jsonl"),
}


def _damaged_resume(what: str, corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    target, damage, needle = DAMAGE[what]
    out = fresh_folder(corpus, f"resume-{hashlib.sha256(what.encode()).hexdigest()[:8]}") / "run"
    shutil.copytree(toy.run, out)
    damage(out / target)
    before = file_hashes(out)
    run_recipe(corpus, outcome, 2, needle, name=f"resume-run-{hashlib.sha256(what.encode()).hexdigest()[:8]}",
                out=out, max_steps=3, resume=True)
    outcome.flag("data_lost", file_hashes(out) != before)


def _resume_other_settings(corpus, outcome: Outcome) -> None:
    toy = inputs(corpus)
    out = fresh_folder(corpus, "resume-other") / "run"
    shutil.copytree(toy.run, out)
    run_recipe(corpus, outcome, 2, "learning_rate", name="resume-other-run", out=out, max_steps=3, resume=True,
                learning_rate=5e-3, beta=0.5)


def _full_disk(corpus, outcome: Outcome) -> None:
    """ENOSPC from safetensors while checkpoint-2 is written (the writer patched): exit 1, nothing partial."""
    import safetensors.torch

    real = safetensors.torch.save_file

    def save_file(tensors, filename, *args, **kwargs):
        if "checkpoint-2" in str(filename):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), filename)
        return real(tensors, filename, *args, **kwargs)

    with mock.patch.object(safetensors.torch, "save_file", save_file):
        run_recipe(corpus, outcome, 1, "No space left", name="full-disk", max_steps=2)


def trainer_cases() -> list:
    cases = [Case("trainer", f"config {what}", "31.M", partial(_config_case, overrides, needle))
             for what, overrides, needle in CONFIG_VALUES]
    cases += [Case("trainer", f"output_dir = {kind}", "31.1", partial(_output_alias, kind))
              for kind in ("dataset folder", "dataset folder as dir/../dir", "dataset folder through a link",
                           "model folder", "model folder, finetuning: full, overwrite")]
    cases += [Case("trainer", f"output_dir {kind}", "31.M", partial(_output_unwritable, kind))
              for kind in ("a file", "under a file", "in /proc")]
    cases += [Case("trainer", f"reward: {what}", "31.2" if expect != 1 or "exit" not in what else "31.M",
                   partial(_reward_case, reward, expect, needle, child))
              for what, reward, expect, needle, child in REWARD_CASES]
    cases += [Case("trainer", f"serve: {what}", "31.3" if what.startswith(("a gzip", "a body tr", "a 302")) else
                   "31.2", partial(_served_case, what), timeout=15.0 if "trickling" in what else None)
              for what in SERVED]
    cases += [Case("trainer", "reward URL with a password, unreachable", "31.4", _unreachable_with_password),
              Case("trainer", "api_key_env holding a newline", "31.4", _newline_key)]
    cases += [Case("trainer", f"source: {kind}", "31.5", partial(_trainer_source, kind))
              for kind in ("a FIFO", "/dev/zero", "a truncated PNG")]
    cases += [Case("trainer", f"--resume: {what}", "31.M", partial(_damaged_resume, what)) for what in DAMAGE]
    cases += [Case("trainer", "--resume with another learning rate and beta", "31.M", _resume_other_settings),
              Case("trainer", "a full disk while a checkpoint is written", "31.M", _full_disk)]
    return cases


def _config_case(overrides: dict, needle: str, corpus, outcome: Outcome) -> None:
    run_recipe(corpus, outcome, 2, needle, name="config", **overrides)


def editor_cases() -> list:
    """Every case of the ``trainer`` and ``edit`` entries, in a fixed order."""
    return [*trainer_cases(), *edit_cases()]


__all__ = ["ENTRIES", "editor_cases", "trainer_cases"]
