"""SpatialReward through a real vLLM equals SpatialReward in process (``-m engines``), and the editor-RL recipe
rewarded through it.

The checkpoint is the one ``servable_checkpoints.overfit_spatialreward`` trains with the package's SFT recipe
until it answers its edits with valid grounded judgements (built once, cached; a few minutes the first time), saved
by the package (``model_type: spatialreward``), exported with ``miescore export-vllm`` and served from the export:
so this module also shows that our checkpoints run on vLLM. A random model's greedy text would say nothing here;
a judgement that parses only when every token is right pins the whole serving path: image sizes, image order,
chat template, stop tokens and the token budget. (It caught two differences while this was written: an
interleaved M-RoPE section layout transformers and vLLM read differently, and client-side resizing that the
processor's rule would undo.)"""

from __future__ import annotations

import json

import pytest
from engine_servers import module_server, require_vllm

from modeling_miescore.judges.spatialreward_api import SpatialRewardAPI

pytestmark = pytest.mark.engines


@pytest.fixture(scope="module")
def export():
    require_vllm()
    from servable_checkpoints import overfit_spatialreward

    return overfit_spatialreward()


@pytest.fixture(scope="module")
def server(export, tmp_path_factory):
    yield from module_server(export, "spatialreward-tiny", tmp_path_factory)


@pytest.fixture(scope="module")
def in_process(export):
    from modeling_miescore.scoring.loading import load_spatialreward

    return load_spatialreward(str(export), device="cpu", dtype="float32")


def test_vllm_judges_exactly_as_the_model_in_process(server, export, in_process):
    from servable_checkpoints import parity_edits

    edits = parity_edits()  # 1, 2 and 3 sources, a failed edit without regions; images resized up by both sides
    api = SpatialRewardAPI(server.url, server.name, config=str(export))
    served = api.evaluate_edits(edits)
    local = in_process.evaluate_edits(edits)
    assert api.stats["failed_requests"] == 0 and api.stats["cut_at_max_tokens"] == 0
    for remote, mine in zip(served, local):
        assert not mine.failed, mine.raw_sc  # the checkpoint answers these edits with valid judgements
        assert (remote.raw_sc, remote.raw_pq) == (mine.raw_sc, mine.raw_pq)
        assert remote.regions == mine.regions and remote.region_reasoning == mine.region_reasoning
        assert (remote.s_if, remote.s_con, remote.s_nat, remote.s_art) == (mine.s_if, mine.s_con, mine.s_nat,
                                                                           mine.s_art)
        assert remote.reward == mine.reward and not remote.failed and remote.backend == "openai"
    assert sum(len(r.regions) for r in local) >= 3 and any(not r.regions for r in local)
    assert len({r.reward for r in local}) == len(local)  # the judgements depend on the edit


def test_spatialreward_cli_with_the_exports_settings(server, export, tmp_path, capsys):
    from modeling_miescore.cli import main
    from servable_checkpoints import parity_edits

    edit = parity_edits()[0]
    paths = []
    for k, image in enumerate([*edit["sources"], edit["edited"]]):
        paths.append(str(tmp_path / f"{k}.png"))
        image.save(paths[-1])
    sources = sum((["--source", p] for p in paths[:-1]), [])
    assert main(["spatialreward", "--api-base", server.url, "--model", server.name, "--config", str(export),
                 *sources, "--edited", paths[-1], "--instruction", edit["instruction"], "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert not result["failed"] and result["regions"] and 0 < result["reward"] <= 1


def _parity_requests(folder) -> str:
    """Editing requests (the recipe's JSONL) with the sources and instructions the checkpoint learnt: two sources,
    and one."""
    from servable_checkpoints import parity_edits

    lines = []
    for index, edit in enumerate(parity_edits()[i] for i in (0, 3)):
        names = []
        for k, image in enumerate(edit["sources"]):
            names.append(f"request{index}-{k}.png")
            image.save(folder / names[-1])
        lines.append(json.dumps({"id": f"request{index}", "sources": names, "instruction": edit["instruction"]}))
    (folder / "requests.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder / "requests.jsonl")


def test_editor_rl_recipe_rewarded_through_vllm(server, export, in_process, tiny_editor_path, tmp_path):
    from editor_rl_runs import run_recipe, toy_config

    from modeling_miescore.testing.tiny_editors import TINY_EDITOR_OPTIONS
    from modeling_miescore.rewards.backends import spatialreward_value

    out = tmp_path / "run"
    config = toy_config(tiny_editor_path("flux2-klein"), _parity_requests(tmp_path), out, editor="flux2-klein",
                        editor_options=TINY_EDITOR_OPTIONS["flux2-klein"], cfg_scale=1.0, max_steps=2,
                        updates_per_step=1, save_rollouts_steps=1, max_reward_failure_rate=1.0,
                        reward=f"spatialreward-api:{server.name}@{server.url}",
                        reward_options={"config": str(export), "max_retries": 1})
    assert run_recipe(config, "--progress", "false") == 0
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in (out / "rollouts" / "rollouts.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and len(records) == 16  # both steps completed, 2 groups of 4
    folder = out / "rollouts"
    edits = [{"sources": [str(folder / s) for s in r["sources"]], "edited": str(folder / r["edited"]),
              "instruction": r["instruction"]} for r in records]
    again = SpatialRewardAPI(server.url, server.name, config=str(export)).evaluate_edits(edits)
    for record, result in zip(records, again):  # the logged rewards are the server's judgements of the saved edits
        assert (record["reward"], record["failure"]) == spatialreward_value(result.to_dict(), None, in_process.config)
    # every request was answered: a sample without a reward is a judgement that did not parse (the tiny editor's
    # 32 px colour fields are far from what the checkpoint learnt), flagged, never a made-up number
    assert all(r["reward"] is not None or "api_error" not in r["failure"] for r in records)
    assert all((r["reward"] is None) == (r["failure"] is not None) for r in records)
