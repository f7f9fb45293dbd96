"""``miescore judge``: a general multimodal chat model as a zero-shot judge of edits (VQ, IF, AP on 0-100).

Resumable: ids already in the output are skipped and every answer received is cached, so a rerun after a kill sends
only what was never answered. A request that failed for good is reported with its input line and the exit status
is 1; a refusal is a flagged prediction (``null`` scores), never a number.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..hub.errors import MIEScoreInputError
from .main import COMMAND_HELP, finish_run, number_arg
from .model_calls import ModelCallRun, add_call_args, judge_spec
from ..scoring.jsonl_scoring import read_predictions, check_input_file, check_output_file, score_jsonl
from ..data.dataset_edits import export_dataset_edits
from ..judges.mllm_judge import MLLMJudge


def register(sub) -> None:
    parser = sub.add_parser("judge", help=COMMAND_HELP["judge"])
    parser.add_argument("--backend", choices=["openai", "transformers"], required=True,
                        help="openai: any OpenAI-compatible endpoint (vLLM, SGLang, hosted APIs); "
                             "transformers: a local AutoModelForImageTextToText checkpoint")
    parser.add_argument("--model", required=True, help="model name at the endpoint, or local checkpoint path")
    parser.add_argument("--base-url", help="endpoint root with the API prefix, e.g. http://127.0.0.1:8000/v1")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help='JSONL lines {"id", "sources": [...], "edited", "instruction"}')
    source.add_argument("--dataset", help="a MIE-Bench, converted-benchmark or MER-Bench dataset folder or Hub repo")
    parser.add_argument("--split", help="split of --dataset (default: test; MER-Bench: every split)")
    parser.add_argument("--output", required=True, help="predictions JSONL; appended to, ids already there skipped")
    parser.add_argument("--judge-name", help="the 'judge' field of every prediction (default: the model name)")
    parser.add_argument("--max-tokens", type=number_arg(int, minimum=1), default=512,
                        help="answer budget in tokens (default 512)")
    parser.add_argument("--on-error", choices=["skip", "stop"], default="skip",
                        help="a bad input line or failed request is reported and skipped (default) or stops the run")
    add_call_args(parser)
    parser.set_defaults(func=cmd_judge)


def _check_same_judge(output: Path, name: str) -> None:
    """An output written by another judge is never extended (the file would mix two judges)."""
    for raw in read_predictions(output, repair=False)[0].values():
        other = json.loads(raw).get("judge")
        if other != name:
            raise MIEScoreInputError(f"'{output}' holds predictions of judge {other!r}, not {name!r}; pass another "
                                     "--output (or the same --judge-name) to resume")


def cmd_judge(args) -> int:
    spec = judge_spec(args)
    output = check_output_file(args.output)
    name = args.judge_name or (Path(spec.model).name if spec.kind == "transformers" else spec.model)
    _check_same_judge(output, name)
    calls = ModelCallRun(args, "judge", output.with_name(output.name + ".cache.sqlite"),  # checks --price
                         output.with_name(output.name + ".usage.jsonl"),
                         {"judge": name, "spec": str(spec), "output": str(output)},
                         files={"--input": args.input, "--output": output})
    inputs = check_input_file(args.input) if args.input else export_dataset_edits(  # --dataset: exported beside
        args.dataset, output.with_name(output.name + ".inputs"), split=args.split, progress=not args.no_progress)[0]
    with calls:
        engine = calls.engine(spec)
        judge = MLLMJudge(engine, name=name, max_tokens=args.max_tokens)
        batch_size = engine.backend.batch_size
        report = score_jsonl(judge.score_batch, inputs, output, batch_size=batch_size, on_error=args.on_error,
                             progress=not args.no_progress,
                             chunk_size=4 * max(batch_size, engine.backend.max_concurrency),
                             producer={"command": "judge", "model": name})
    flagged = judge.counts["flagged"]
    return finish_run(
        f"judged {report.scored} edits ({flagged} answers without all three scores, flagged), "
        f"{report.skipped_existing} already in '{output}', {len(report.errors)} not judged",
        (f"{len(report.errors)} edits were not judged (listed above); rerun the same command to "
         "retry them" if report.errors else None))
