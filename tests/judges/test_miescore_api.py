"""The vLLM ``/classify`` client's counters when its requests run on several threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

from modeling_miescore.hub.configuration_miescore import MIEScoreConfig
from modeling_miescore.judges.chat_client import ChatError
from modeling_miescore.judges.miescore_api import MIEScoreAPI
from modeling_miescore.scoring.vllm_export import MIESCORE_CONFIG_FILE


class LockCheckedStats(dict):
    """A stats dict that records every update made without the client's stats lock held."""

    def __init__(self, initial, lock_of):
        super().__init__(initial)
        self.lock_of, self.unlocked = lock_of, []

    def __setitem__(self, key, value):
        lock = getattr(self.lock_of(), "stats_lock", None)
        if lock is None or not lock.locked():
            self.unlocked.append(key)
        super().__setitem__(key, value)


class StubClient:
    model = "m"

    def post_json(self, path, body, what):
        if body["messages"][0]["content"] == "fail":
            raise ChatError("refused", "connection")
        return {"data": [{"probs": [0.0, 0.0, 0.0]}], "usage": {"prompt_tokens": 7}}, None, None

    def close(self):
        pass


def test_counts_from_concurrent_requests_are_complete_and_taken_under_the_lock(tmp_path, tiny_miescore_path):
    MIEScoreConfig.from_pretrained(tiny_miescore_path).to_json_file(str(tmp_path / MIESCORE_CONFIG_FILE))
    api = MIEScoreAPI("http://127.0.0.1:9/v1", "m", tmp_path)
    api.client.close()
    api.client = StubClient()
    api._content = lambda sample: sample.content  # the request body's images are not what is tested here
    api.stats = LockCheckedStats(api.stats, lambda: api)
    samples = [SimpleNamespace(id=str(i), content="fail" if i % 3 == 0 else "ok") for i in range(300)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        results = list(pool.map(api._score_one, samples))
    assert sum(r["failed"] for r in results) == 100
    assert api.stats.unlocked == []
    assert dict(api.stats) == {"requests": 300, "failed_requests": 100, "prompt_tokens": 200 * 7}
