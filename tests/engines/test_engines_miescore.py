"""MIEScore on vLLM's pooling runner (``-m engines``): the package's vLLM plugin (``scripts/vllm_plugin``, installed
by ``scripts/vllm_cpu.sh provision``) serves an exported MIEScore checkpoint (``miescore export-vllm``), and its
scores through ``/classify`` (:class:`~modeling_miescore.judges.miescore_api.MIEScoreAPI`) equal the in-process
ones. The checkpoint's head is random but widened, so its scores depend on the edit."""

from __future__ import annotations

import pytest
from engine_servers import module_server, require_vllm

pytestmark = pytest.mark.engines
SCORES = ("visual_quality", "instruction_following", "attribute_preservation", "overall")


@pytest.fixture(scope="module")
def export():
    require_vllm()
    from servable_checkpoints import random_servable_miescore

    return random_servable_miescore()


@pytest.fixture(scope="module")
def server(export, tmp_path_factory):
    yield from module_server(export, "miescore-tiny", tmp_path_factory, what="vLLM (pooling runner)",
                             extra=("--dtype", "float32"))


def test_miescore_through_vllm_equals_in_process(server, export):
    from modeling_miescore.scoring.loading import load_scorer
    from modeling_miescore.judges.miescore_api import MIEScoreAPI
    from modeling_miescore.data.example_edits import example_edits

    samples = [{"sources": e["sources"][:k], "edited": e["edited"], "instruction": e["instruction"]}
               for e in example_edits(max_side=160) for k in (1, len(e["sources"]))]  # 1, 2 and 3 sources
    api = MIEScoreAPI(server.url, server.name, export)
    served = api.score_batch(samples)
    local = load_scorer(str(export.parent / "checkpoint"), device="cpu", dtype="float32").score_batch(samples)
    assert api.stats["failed_requests"] == 0 and api.stats["prompt_tokens"] > 0
    for remote, mine in zip(served, local):
        assert not remote["failed"]
        assert [remote[k] for k in SCORES] == pytest.approx([mine[k] for k in SCORES], abs=1e-3)
    assert len({round(r["overall"], 3) for r in local}) > len(local) // 2  # the scores depend on the edit


def test_a_failed_request_is_flagged_without_a_score(server, export):
    from modeling_miescore.judges.miescore_api import MIEScoreAPI
    from modeling_miescore.data.example_edits import example_edits

    edit = example_edits(max_side=160)[0]
    result, = MIEScoreAPI(server.url, "no-such-model", export, max_retries=0).score_batch(
        [{"sources": edit["sources"], "edited": edit["edited"], "instruction": edit["instruction"]}])
    assert result["failed"] and "does not exist" in result["error"] and not set(SCORES) & set(result)
