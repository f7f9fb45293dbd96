"""The served reward's client is bounded like the judges' clients (issue 31, HIGH 3) and no credential of a
reward URL reaches a file or a line the trainer writes (HIGH 4)."""

from __future__ import annotations

import json
import time

import pytest
from PIL import Image

from editor_rl_runs import run_recipe, toy_config
from local_http import BadChatServer, RoutedChatServer, bomb_reply, chunked_reply, echo_auth_reply, raw_reply, \
    score_groups_answer, trickle_reply
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.serving.reward_client import RewardClient, RewardServerError
from modeling_miescore.training.editor_rl.trainer import FlowGRPOEditorTrainer

pytestmark = pytest.mark.usefixtures("single_thread")
SECRETS = ("hunter2", "SEKRET-QUERY", "aHVudGVyMg")  # a password, an api_key= value, the password's base64


def _group():
    image = Image.new("RGB", (16, 16), (200, 0, 0))
    return {"sources": [image], "instruction": "make it red", "edited": [image, image]}


@pytest.mark.parametrize("reply,needle", [
    (bomb_reply(64 << 20), "over the 1048576-byte limit after decompression"),
    (chunked_reply(64 << 20), "over the 1048576-byte limit on the wire"),
    (raw_reply(b"x" * (2 << 20)), "over the 1048576-byte limit by its Content-Length"),
])
def test_huge_answers_are_stopped_at_the_byte_limit(reply, needle):
    with BadChatServer(lambda body, index: reply) as server:
        client = RewardClient(server.origin, max_answer_bytes=1 << 20, max_retries=0)
        started = time.monotonic()
        with pytest.raises(RewardServerError, match=needle) as caught:
            client.score_groups([_group()])
        client.close()
    assert caught.value.kind == "too_large" and time.monotonic() - started < 10


def test_a_trickling_answer_ends_at_the_total_deadline():
    with BadChatServer(lambda body, index: trickle_reply(bytes_per_second=20)) as server:
        client = RewardClient(server.origin, timeout=1.5, max_retries=0)
        started = time.monotonic()
        with pytest.raises(RewardServerError, match=r"no complete answer .* within the client timeout \(1.5 s"):
            client.score_groups([_group()])
        client.close()
    assert time.monotonic() - started < 4  # each byte came within 0.05 s: only a total deadline stops it


@pytest.mark.parametrize("reply,kind,needle", [
    (raw_reply(b"", 302, {"Location": "http://elsewhere:9/v1?token=SEKRET-QUERY"}), "redirect",
     r"answered a redirect to http://elsewhere:9/v1\?token=\*\*\* \(HTTP 302\); redirects are not followed"),
    (raw_reply(b"<html>busy</html>"), "bad_response", "with a body that is not JSON"),
])
def test_a_redirect_or_a_page_is_reported_as_what_it_is(reply, kind, needle):
    with BadChatServer(lambda body, index: reply) as server:
        client = RewardClient(server.origin, max_retries=0)
        with pytest.raises(RewardServerError, match=needle) as caught:
            client.score_groups([_group()])
        client.close()
    assert caught.value.kind == kind and "SEKRET" not in str(caught.value)


def test_a_replica_echoing_the_basic_auth_it_was_sent_is_shown_masked():
    """httpx sends ``user:hunter2@`` as ``Basic base64(user:hunter2)``; a replica echoing it must not leak it."""
    import base64

    with BadChatServer(lambda body, index: echo_auth_reply(401)) as server:
        client = RewardClient(server.origin.replace("http://", "http://user:hunter2@"), max_retries=0)
        with pytest.raises(RewardServerError, match="Incorrect API key provided: Basic \\*\\*\\*") as caught:
            client.score_groups([_group()])
        client.close()
    assert base64.b64encode(b"user:hunter2").decode() not in str(caught.value)


def _everything_written(folder) -> str:
    return "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file()
                     and p.suffix in (".json", ".jsonl", ".md", ".yaml", ".txt"))


def test_no_credential_of_a_reward_url_is_written_or_printed(toy_editor_path, editing_requests, tmp_path, caplog,
                                                             capsys):
    import logging

    caplog.set_level(logging.INFO)

    def answer(body, repeat):
        return 200, score_groups_answer(body, lambda group, image: {"overall": 40.0 + image.getpixel((0, 0))[0] / 9}
                                        ), None, 0

    with RoutedChatServer(answer) as server:
        url = server.origin.replace("http://", "http://user:hunter2@") + "/?api_key=SEKRET-QUERY"
        out = tmp_path / "run"
        config = toy_config(toy_editor_path, editing_requests, out, max_steps=2, reward=f"serve:{url}")
        FlowGRPOEditorTrainer(config).train()
        assert any("api_key=***" in r.getMessage() for r in caplog.records)  # httpx logged the request, masked
        written = _everything_written(out) + caplog.text + "".join(capsys.readouterr())
        assert "serve:" in (out / "README.md").read_text()
        assert not any(secret in written for secret in SECRETS), [s for s in SECRETS if s in written]
        # the run identity has no URL: the same run resumes with its replica at another address
        assert json.loads((out / "run.json").read_text())["reward"] == "serve:(replicas)"
        moved = toy_config(toy_editor_path, editing_requests, out, max_steps=3, resume=True,
                           reward=f"serve:{server.origin}")
        assert [m["step"] for m in FlowGRPOEditorTrainer(moved).train()["metrics"]] == [1, 2, 3]


def test_an_unreachable_reward_is_named_without_its_password(toy_editor_path, editing_requests, tmp_path, capsys):
    out = tmp_path / "run"
    spec = "spatialreward-api:SpatialReward-8B@http://user:hunter2@127.0.0.1:9/v1?key=SEKRET-QUERY"
    config = toy_config(toy_editor_path, editing_requests, out, reward=spec, reward_options={"max_retries": 0})
    assert run_recipe(config) == 1
    err = capsys.readouterr().err
    assert "flow_grpo_editor: stopped:" in err and "user:***@127.0.0.1:9" in err
    assert not any(secret in err + _everything_written(out) for secret in SECRETS)


def test_a_key_with_a_newline_is_one_clear_error_that_does_not_echo_it(toy_editor_path, editing_requests, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("RL_KEY", "sk-SEKRET-QUERY\n")
    config = toy_config(toy_editor_path, editing_requests, tmp_path / "run", reward="serve:http://127.0.0.1:9",
                        reward_options={"api_key_env": "RL_KEY"})
    with pytest.raises(MIEScoreInputError, match=r"the API key in \$RL_KEY contains a newline at position 16") as e:
        FlowGRPOEditorTrainer(config).train()
    assert "SEKRET" not in str(e.value)
