"""Throughput of the model-calling stages against a local scripted chat-completions server (no model).

Runs the SpatialReward data pipeline (`miescore spatialreward-data`'s engine: grounding, routed annotation with
crops/overlays + PQ, alignment and verification) and the zero-shot MLLM judge over N edits made of real photos,
with the server answering after a fixed latency (0 s: the client's own cost, i.e. image hashing and encoding,
crops and overlays, HTTP, parsing; 50 ms: what concurrency hides). Prints requests/s and samples/s per stage,
then the same run again from the answer cache (a resumed run). The server is `tests/local_http.py`'s
`RoutedChatServer` with the answers of `tests/scripted_d2_judges.py`.

    python benchmarks/bench_pipeline_stages.py [--samples 48] [--size 512] [--concurrency 8] [--latency 0 0.05]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the shared local test server

from bench_common import real_photos  # noqa: E402
from local_http import RoutedChatServer, chat_completion, request_text  # noqa: E402
from scripted_d2_judges import scripted_d2_answer  # noqa: E402

from modeling_miescore.utils.markdown_table import markdown_table  # noqa: E402

STAGE_OF = {"grounding": "grounding", "annotation-human": "annotation", "annotation-general": "annotation",
            "annotation-pq": "annotation", "alignment": "alignment", "mllm-judge": "judge"}
INSTRUCTIONS = ("Add a red hat to the man", "Replace the cup with a small plant", "Make the woman smile",
                "Turn the car blue and add a bicycle")


def write_edits(folder: Path, count: int, size: int) -> Path:
    photos = real_photos(size)
    lines = []
    for i in range(count):
        n_sources = 1 + i % 2
        sources = []
        for k in range(n_sources):
            path = folder / f"s{i}_{k}.png"
            photos[(i + k) % len(photos)].save(path)
            sources.append(path.name)
        photos[(i + 3) % len(photos)].rotate(90 * (i % 4)).save(folder / f"e{i}.png")
        lines.append(json.dumps({"id": f"b{i}", "sources": sources, "edited": f"e{i}.png",
                                 "instruction": f"{INSTRUCTIONS[i % len(INSTRUCTIONS)]} (variant {i})"}))
    path = folder / "edits.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def answer_with(latency: float):
    judge = json.dumps({"reasoning": "ok", "visual_quality": 70, "instruction_following": 60,
                        "attribute_preservation": 50})

    def answer(body, repeat):
        text = request_text(body)
        reply = judge if "Rate the edited image" in text or "mean opinion score" in text else scripted_d2_answer(text)
        return 200, chat_completion(reply, 1000, 60), None, latency

    return answer


def per_stage(usage: dict, seconds: dict) -> dict:
    requests: dict = {}
    for row in usage["by_stage"]:
        stage = STAGE_OF.get(row["stage"], row["stage"])
        requests[stage] = requests.get(stage, 0) + row["requests"]
    return {stage: (requests.get(stage, 0), seconds.get(stage, 0.0)) for stage in ("grounding", "annotation",
                                                                                   "alignment", "judge")}


def run_once(edits: Path, out: Path, url: str, concurrency: int) -> tuple[dict, int]:
    from modeling_miescore.data.spatialreward_pipeline import PipelineConfig, PipelineJudges, read_edit_records
    from modeling_miescore.data.spatialreward_pipeline import run_pipeline
    from modeling_miescore.judges.call_cache import CallCache
    from modeling_miescore.judges.call_engine import CallEngine, UsageLog
    from modeling_miescore.judges.chat_backends import OpenAIChatBackend
    from modeling_miescore.judges.mllm_judge import MLLMJudge

    records, _ = read_edit_records(str(edits))
    cache, usage = CallCache(out / "calls.sqlite"), UsageLog()

    def engine(model):
        return CallEngine(OpenAIChatBackend(url, model, max_concurrency=concurrency), cache=cache, usage=usage)

    grounder = engine("grounder")
    judges = PipelineJudges(grounder=grounder, face=engine("face"), object=engine("object"), pq=engine("pq"))
    run = run_pipeline(records, out / "pipeline", judges, PipelineConfig(chunk_size=4 * concurrency), progress=False)
    seconds = dict(run.stage_seconds)
    judge = MLLMJudge(engine("judge"))
    started = time.perf_counter()
    judge.score_batch([r.load() for r in records])
    seconds["judge"] = time.perf_counter() - started
    rows = run.report["sc"]["rows"] + run.report["pq"]["rows"]
    cache.close()
    return per_stage(usage.as_dict(), seconds), rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=48)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency", type=float, nargs="+", default=[0.0, 0.05])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        edits = write_edits(tmp, args.samples, args.size)
        print(f"{args.samples} edits (half 1, half 2 sources), {args.size}x{args.size} photos, PNG requests, "
              f"concurrency {args.concurrency}")
        table = []
        for latency in args.latency:
            with RoutedChatServer(answer_with(latency)) as server:
                out = tmp / f"out-{latency}"
                for label in ("fresh", "cached"):  # cached: a rerun with an empty ledger and a full answer cache
                    shutil.rmtree(out / "pipeline", ignore_errors=True)
                    stages, rows = run_once(edits, out, server.url, args.concurrency)
                    for stage, (requests, seconds) in stages.items():
                        table.append([f"{latency * 1000:.0f} ms", label, stage, requests, f"{seconds:.2f}",
                                      f"{requests / seconds:.1f}", f"{args.samples / seconds:.1f}"])
        print(markdown_table(["latency", "run", "stage", "requests", "seconds", "requests/s", "samples/s"], table))
        print(f"({rows} SFT rows per pipeline run)")


if __name__ == "__main__":
    main()
