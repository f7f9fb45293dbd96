"""SpatialReward's spatial-prior-guided data pipeline (arXiv 2602.07458, sec. 3.3, Figure 3, prompts D.2):
edits in, checked SFT rows out (the schema of ``training/spatialreward_chat_examples.py``, which
``trainers/sft_spatialreward.py`` trains on), with a per-stage rejection report.

Stages I-III are :mod:`.grounding` (D.2.1), :mod:`.annotation` (D.2.2) and :mod:`.alignment` (D.2.3); every model
call goes through :mod:`modeling_miescore.judges.call_engine`. The stages are described in ``docs/model_calls.md``.
From Python::

    from modeling_miescore.data.spatialreward_pipeline import PipelineJudges, read_edit_records, run_pipeline
    from modeling_miescore.judges.call_cache import CallCache
    from modeling_miescore.judges.call_engine import CallEngine, UsageLog
    from modeling_miescore.judges.chat_backends import OpenAIChatBackend

    cache, usage = CallCache("out/calls.sqlite"), UsageLog()
    def engine(model, url):
        return CallEngine(OpenAIChatBackend(url, model, max_concurrency=32), cache=cache, usage=usage)
    qwen = engine("Qwen/Qwen3-VL-235B-A22B-Instruct", "http://127.0.0.1:8000/v1")
    judges = PipelineJudges(grounder=qwen, face=engine("gemini-2.5-pro", GEMINI_URL),
                            object=engine("gpt-5", OPENAI_URL), pq=engine("gpt-5", OPENAI_URL))
    records, problems = read_edit_records("edits.jsonl")
    run = run_pipeline(records, "out", judges, input_problems=problems)

or ``miescore spatialreward-data --input edits.jsonl --out out --grounder MODEL@URL --face-judge MODEL@URL
--object-judge MODEL@URL --pq-judge MODEL@URL``.
"""

from .report import Outcome, build_report
from .runner import PipelineConfig, PipelineJudges, PipelineRun, run_pipeline
from .samples import EditRecord, read_edit_records

__all__ = ["EditRecord", "Outcome", "PipelineConfig", "PipelineJudges", "PipelineRun", "build_report",
           "read_edit_records", "run_pipeline"]
