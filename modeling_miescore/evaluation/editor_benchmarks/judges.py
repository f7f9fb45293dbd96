"""The editor benchmarks' MLLM judges: what they share (:class:`EditorJudge`), GEdit-Bench's VIEScore ``tie``
judge (:class:`GEditJudge`) and ImgEdit-Bench Basic's per-type rubric (:class:`ImgEditJudge`).

:meth:`EditorJudge.score_batch` is the callable :func:`~modeling_miescore.scoring.jsonl_scoring.score_jsonl` takes,
so a run is resumable, locked and reports bad lines like ``score-batch``. Failures:

* a request that failed for good gives no record (a :class:`~modeling_miescore.judges.mllm_judge.JudgeRequestError`):
  it is reported, and a rerun asks again;
* a refusal, an answer without every score, a score out of the scale or not a finite number: a flagged record
  (``failed: true``, the scores ``null``, ``issues`` naming what was wrong, the answer in ``raw``), counted and left
  out of every mean; never a number read from elsewhere;
* an answer cut off by the token budget is flagged ``truncated`` (and fails when its scores are incomplete).

GEdit-Bench protocol (TIGER-AI-Lab/VIEScore ``viescore/__init__.py`` @2cbea4e, task ``tie``, which GEdit's scorer
runs): the SC request sends the text part first, as ``GPT4o.prepare_prompt`` of Step1X-Edit's
``GEdit-Bench/viescore/mllm_tools/openai.py`` @570eba6 builds it for the published GPT-4.1 judge
(``--parts-order images-first`` as its Qwen2.5-VL path); SC = min of its two scores, PQ = min of the two of the PQ
request, O = sqrt(SC * PQ) (GEdit's ``calculate_statistics.py``). Published numbers are comparable only with
VIEScore's own prompts (the user's ``viescore/vie_prompts.py`` as ``--prompts``, parsed as text with :mod:`ast`,
never imported or run); without it :data:`GEDIT_OWN_PROMPTS` is our wording of the same protocol. A score must be
an integer in [0, 10], as the prompts ask and VIEScore's own list checks take (``viescore/utils.py``:
``is_str_a_list_of_ints_0_to_10``), so a 7.5 is flagged (``score_not_integer``) rather than averaged. VIEScore's
parser also accepts a bare ``[a, b]`` list, repairs broken JSON and, on a second failure, *guesses a random score*;
this judge does none of that.

ImgEdit-Bench Basic protocol (PKU-YuanGroup/ImgEdit ``Benchmark/Basic/basic_bench.py`` @547185d, unchanged in
substance since c14480a): one request per edit, the type's rubric, then the source, then the edited image; no
``max_tokens`` and no ``temperature`` sent. The published numbers (ImgEdit's leaderboard, ``assets/leaderboard.png``
@2051b15, and the SpatialReward paper's Table 3) use GPT-4.1. Only ImgEdit's own ``prompts.json`` (``--prompts``)
gives comparable numbers; a dataset converted with ImgEdit c14480a's category ``alter`` is judged with the ``adjust``
rubric; without it :data:`OWN_RUBRICS` is our wording of the three aspects ``basic_bench_readme.md`` names. A
judgement needs exactly three distinct criteria, each an integer in [1, 5] (:func:`parse_criteria`): the released
``step1_get_avgscore.py`` averages whatever whole-number lines it finds; this stricter reading never averages a
partial answer.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ...data.converters.imgedit_bench import IMGEDIT_RELEASES, IMGEDIT_TYPES
from ...hub.errors import MIEScoreInputError
from ...hub.spatialreward_relaxed_json import final_json_object, strip_reasoning_and_fences
from ...judges.call_engine import CallEngine, CallResult, ChatRequest
from ...judges.mllm_judge import JudgeRequestError
from .protocols import EDITOR_BENCHMARKS

__all__ = ["EARLIER_TYPE_NAMES", "EditorJudge", "GEDIT_OWN_PROMPTS", "GEditJudge", "GEditPrompts",
           "IMGEDIT_OWN_PROMPTS", "ImgEditJudge", "ImgEditPrompts", "OWN_CRITERIA", "OWN_RUBRICS", "VIESCORE_NAMES",
           "digest_label", "parse_criteria", "parse_score_list", "prepare_edited", "read_imgedit_prompts",
           "read_vie_prompts", "rubric_type"]


def digest_label(name: str, text: str) -> str:
    """A prompt set's label, ``<name> (sha256 <12 hex digits of text>)``: another wording, another label."""
    return f"{name} (sha256 {hashlib.sha256(text.encode()).hexdigest()[:12]})"


def prepare_edited(sample, resize_to_source: bool):
    """The edited image as the protocol shows it: resized to the first source's size (GEdit's scorer:
    ``Image.open(edited).convert("RGB").resize(source.size)``, Pillow's default bicubic filter) or as it is."""
    edited = sample.edited
    if resize_to_source and sample.sources and edited.size != sample.sources[0].size:
        edited = edited.resize(sample.sources[0].size)
    return edited


class EditorJudge:
    """Base of the GEdit / ImgEdit MLLM judges (module docstring); ``info``: per input id, ``{"category",
    "edited_sha256"}``; ``settings``: a :class:`~modeling_miescore.data.converters.schema.JudgeRequestSettings`."""

    resize_to_source = False
    stage = "editor-judge"

    def __init__(self, engine: CallEngine, prompts: Any, *, name: str, info: Dict[str, dict], settings):
        self.engine, self.prompts, self.name, self.info, self.settings = engine, prompts, name, info, settings
        self.counts = {"judged": 0, "flagged": 0, "request_failed": 0}

    @classmethod
    def read_prompts(cls, path: Optional[str], categories: Sequence[str]) -> Any:  # pragma: no cover - abstract
        """The prompt set: the user's copy of the benchmark's prompt file at ``path`` (for the rows'
        ``categories``), or our own wording when ``path`` is None."""
        raise NotImplementedError

    def requests(self, sample, edited, category: str) -> List[ChatRequest]:  # pragma: no cover - abstract
        raise NotImplementedError

    def read_answers(self, texts: Dict[str, Optional[str]]) -> Dict[str, Any]:  # pragma: no cover
        """A record (scores, ``failed``, ``issues``, ``reasoning``) from the answers by request stage (``None`` for
        a refused request)."""
        raise NotImplementedError

    def request(self, text: str, images: Sequence[Any], stage: str) -> ChatRequest:
        """One request: ``text`` and ``images`` in the settings' order (``text-first``: the text part, then the
        images, as GEdit's ``GPT4o.prepare_prompt`` and ImgEdit's ``basic_bench.py``; ``images-first``: as GEdit's
        Qwen2.5-VL path)."""
        parts = [text, *images] if self.settings.parts_order == "text-first" else [*images, text]
        seed = self.settings.seed
        return ChatRequest(parts, max_tokens=self.settings.max_tokens, temperature=self.settings.temperature,
                           extra={} if seed is None else {"seed": seed}, stage=stage)

    def _record(self, results: List[CallResult], stages: List[str], input_id: str):
        failed = [(s, r) for s, r in zip(stages, results) if not r.ok and r.error_kind != "refusal"]
        if failed:
            self.counts["request_failed"] += 1
            return JudgeRequestError("; ".join(f"{s} request failed: {r.error}" for s, r in failed))
        record = self.read_answers({s: (r.text if r.ok else None) for s, r in zip(stages, results)})
        issues = list(record.get("issues", []))
        for stage, result in zip(stages, results):
            if not result.ok:
                issues.append(f"refusal:{stage}")
            if result.finish_reason == "length":
                issues.append(f"truncated:{stage}")
        record["failed"] = bool(record.get("failed")) or any(not r.ok for r in results)
        if record["failed"]:
            record["raw"] = {s: (r.text if r.ok else r.error)[:500] for s, r in zip(stages, results)}
        self.counts["flagged" if record["failed"] else "judged"] += 1
        reported = sorted({r.model for r in results if r.model})
        return {**record, "issues": issues, "judge": self.name, "prompts": self.prompts.label,
                **({"endpoint_model": ", ".join(reported)} if reported else {}),
                "request": self.settings.label(), "edited_sha256": self.info.get(input_id, {}).get("edited_sha256")}

    def score_batch(self, samples: Sequence[Any], batch_size: int = 0) -> List[Any]:
        """One record (or :class:`JudgeRequestError`) per loaded sample, in order."""
        plans = [(sample.id, self.requests(sample, prepare_edited(sample, self.resize_to_source),
                                           self.info.get(sample.id, {}).get("category", ""))) for sample in samples]
        results = self.engine.run([r for _, reqs in plans for r in reqs])
        out, start = [], 0
        for input_id, reqs in plans:
            chunk = results[start:start + len(reqs)]
            start += len(reqs)
            out.append(self._record(chunk, [r.stage for r in reqs], input_id))
        return out


VIESCORE_NAMES = ("_context_no_delimit", "_prompts_0shot_two_image_edit_rule", "_prompts_0shot_tie_rule_SC",
                  "_prompts_0shot_rule_PQ")
GEDIT_SCALE = EDITOR_BENCHMARKS["gedit"].scale


@dataclass(frozen=True)
class GEditPrompts:
    """The SC prompt (holding ``<instruction>``) and the PQ prompt; ``label`` names them in every record;
    ``comparable``: they are the benchmark's own (read from the user's copy)."""

    sc: str
    pq: str
    label: str
    comparable: bool


GEDIT_OWN_PROMPTS = GEditPrompts(
    sc=("You are judging an image edit. The first image is the original; the second is that image after an AI "
        "editor applied the instruction below.\n"
        "Give two integer scores from 0 to 10:\n"
        "1. Editing success: how completely and precisely the second image carries out the instruction (0: not "
        "at all; 10: exactly as asked).\n"
        "2. Over-editing: how much of what the instruction did not ask to change is kept (0: the scene became a "
        "different one; 10: only the requested change, everything else intact).\n"
        "Editing instruction: <instruction>\n"
        'Reply with one JSON object only: {"score": [editing success, over-editing], "reasoning": "<one short '
        'sentence>"}'),
    pq=("You are judging the visual quality of one AI-edited image, on its own.\n"
        "Give two integer scores from 0 to 10:\n"
        "1. Naturalness: whether the scene looks physically plausible: lighting, shadows, perspective, scale and "
        "blending (0: clearly unnatural; 10: fully natural).\n"
        "2. Artifacts: whether the image is free of distortion, smears, broken textures, malformed bodies or "
        "faces and watermarks (0: heavily damaged; 10: none).\n"
        'Reply with one JSON object only: {"score": [naturalness, artifacts], "reasoning": "<one short '
        'sentence>"}'),
    label="own", comparable=False)
# the label names this wording (a changed wording never extends judgements made with the old one)
GEDIT_OWN_PROMPTS = dataclasses.replace(GEDIT_OWN_PROMPTS,
                                        label=digest_label("own", GEDIT_OWN_PROMPTS.sc + GEDIT_OWN_PROMPTS.pq))


def _module_strings(tree: ast.Module) -> Dict[str, str]:
    strings = {}
    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign):
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant) and isinstance(value.value, str):
            strings[target.id] = value.value
    return strings


def read_vie_prompts(path) -> GEditPrompts:
    """The SC and PQ prompts of VIEScore's ``tie`` task from the user's ``vie_prompts.py`` (parsed, never run)."""
    path = Path(path).expanduser()
    expected = EDITOR_BENCHMARKS["gedit"].prompts_expected
    try:
        text = path.read_text(encoding="utf-8")
        strings = _module_strings(ast.parse(text, filename=str(path)))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as err:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {type(err).__name__}: "
                                 f"{str(err).splitlines()[0] if str(err) else ''}") from None
    missing = [name for name in VIESCORE_NAMES if name not in strings]
    if missing:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: no string {', '.join(missing)}")
    context, rule, sc_rule, pq_rule = (strings[n] for n in VIESCORE_NAMES)
    if "<instruction>" not in sc_rule:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {VIESCORE_NAMES[2]} has no <instruction>")
    return GEditPrompts(sc="\n".join([context, rule, sc_rule]), pq="\n".join([context, pq_rule]),
                        label=digest_label(path.name, "\0".join(strings[n] for n in VIESCORE_NAMES)), comparable=True)


def parse_score_list(text: Optional[str], count: int = 2) -> tuple[Optional[List[float]], List[str], str]:
    """``(scores, issues, reasoning)`` of a VIEScore answer: ``scores`` is the list of ``count`` numbers in
    [0, 10] under ``"score"``, or None (the issues say why)."""
    if text is None:
        return None, [], ""
    if not text.strip():
        return None, ["empty_answer"], ""
    obj, found_issues = final_json_object(text, ("score",), top_level=True)
    if obj is None:
        return None, found_issues or ["no_json_object"], ""
    if "score" not in obj:  # written twice with different values: ambiguous
        return None, found_issues, ""
    reasoning = obj.get("reasoning")
    reasoning = reasoning if isinstance(reasoning, str) else ""
    scores = obj["score"]
    if not isinstance(scores, list):
        return None, ["score_not_a_list"], reasoning
    if len(scores) != count:
        return None, [f"wrong_score_count:{len(scores)}"], reasoning
    issues = []
    for value in scores:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            issues.append("score_invalid")
        elif not GEDIT_SCALE[0] <= value <= GEDIT_SCALE[1]:
            issues.append("score_out_of_range")
        elif value != int(value):
            issues.append("score_not_integer")
    return (None if issues else [float(v) for v in scores]), sorted(set(issues)), reasoning


class GEditJudge(EditorJudge):
    """VIEScore ``tie`` through the call engine (module docstring); records ``{"sc", "pq", "o", "sc_scores",
    "pq_scores", "failed", "issues", "reasoning"}``."""

    resize_to_source = EDITOR_BENCHMARKS["gedit"].resize_to_source

    @classmethod
    def read_prompts(cls, path, categories):
        return read_vie_prompts(path) if path else GEDIT_OWN_PROMPTS

    def requests(self, sample, edited, category: str):
        sc_text = self.prompts.sc.replace("<instruction>", sample.instruction)
        return [self.request(sc_text, [sample.sources[0], edited], "gedit-sc"),
                self.request(self.prompts.pq, [edited], "gedit-pq")]

    def read_answers(self, texts: Dict[str, Optional[str]]) -> Dict[str, Any]:
        sc_scores, sc_issues, sc_reason = parse_score_list(texts.get("gedit-sc"))
        pq_scores, pq_issues, pq_reason = parse_score_list(texts.get("gedit-pq"))
        issues = [f"{i}:sc" for i in sc_issues] + [f"{i}:pq" for i in pq_issues]
        ok = sc_scores is not None and pq_scores is not None
        sc = min(sc_scores) if sc_scores else None
        pq = min(pq_scores) if pq_scores else None
        return {"sc": sc if ok else None, "pq": pq if ok else None, "o": math.sqrt(sc * pq) if ok else None,
                "sc_scores": sc_scores, "pq_scores": pq_scores, "failed": not ok, "issues": issues,
                "reasoning": {"sc": sc_reason, "pq": pq_reason}}


IMGEDIT_SCALE = EDITOR_BENCHMARKS["imgedit"].scale
OWN_CRITERIA = ("Instruction Adherence", "Editing Quality", "Detail Preservation")

# edit type -> (what adherence, quality and preservation mean for it): our own wording
_GUIDANCE = {
    "add": ("the requested object is present, where and as the instruction says",
            "the new object fits the scene's lighting, perspective, scale and shadows, with no visible seam",
            "everything else in the image is unchanged"),
    "remove": ("the named object is gone entirely, with no remnant",
               "the filled region blends with its surroundings, with no smudge or ghost outline",
               "nothing else was removed or changed"),
    "replace": ("the named object is replaced by the requested one",
                "the new object sits naturally in its place (size, lighting, occlusion)",
                "the rest of the scene is unchanged"),
    "adjust": ("the named attribute (colour, material, texture, ...) of the named object changed as asked",
              "the change looks natural and even over the whole object",
              "the object's shape and the rest of the image are unchanged"),
    "background": ("the background is changed as described",
                   "the subject and the new background blend at the edges, in lighting and in perspective",
                   "the foreground subject is unchanged"),
    "style": ("the image is rendered in the requested style",
              "the stylised image is coherent and free of artifacts",
              "the content, layout and identities of the original stay recognisable"),
    "extract": ("the requested object is isolated and complete",
                "clean edges, no leftover background, good visual quality",
                "the extracted object keeps its identity, shape and details"),
    "action": ("the subject performs the requested action or pose",
               "the new pose is anatomically plausible and free of artifacts",
               "identity, clothing and the scene are unchanged"),
    "compose": ("every operation the instruction lists is carried out",
                "the combined result looks natural and free of artifacts",
                "what the instruction does not name is unchanged"),
}


def _own_rubric(edit_type: str) -> str:
    adherence, quality, preservation = _GUIDANCE[edit_type]
    return (f"You are rating an image edit of type '{edit_type}'. The first image is the original, the second the "
            "edited result. The editing instruction was: <edit_prompt>\n"
            "Rate three criteria, each with an integer from 1 (worst) to 5 (best):\n"
            f"- {OWN_CRITERIA[0]}: {adherence}.\n- {OWN_CRITERIA[1]}: {quality}.\n- {OWN_CRITERIA[2]}: {preservation}.\n"
            "Answer in exactly four lines:\nBrief reasoning: <one sentence>\n"
            + "\n".join(f"{name}: <1-5>" for name in OWN_CRITERIA))


OWN_RUBRICS = {edit_type: _own_rubric(edit_type) for edit_type in IMGEDIT_TYPES}


@dataclass(frozen=True)
class ImgEditPrompts:
    """The rubric per edit type (each holding ``<edit_prompt>``); ``criteria``: the names a rubric asks for (our
    own) or None (the user's file: any three names); ``label`` names them in every record."""

    rubrics: Dict[str, str]
    label: str
    comparable: bool
    criteria: Optional[tuple] = None


# the label names this wording (a changed wording never extends judgements made with the old one)
IMGEDIT_OWN_PROMPTS = ImgEditPrompts(
    OWN_RUBRICS, digest_label("own", json.dumps(OWN_RUBRICS, sort_keys=True)),
    False, OWN_CRITERIA)


# the type names of earlier releases -> prompts.json's (c14480a's basic_edit.json wrote "alter" for "adjust")
EARLIER_TYPE_NAMES = {old: new for release in IMGEDIT_RELEASES.values() for old, new in release.renamed.items()}


def rubric_type(category: str) -> str:
    """The ``prompts.json`` key of a row's category (an earlier release's spelling mapped to the current one)."""
    return EARLIER_TYPE_NAMES.get(category, category)


def read_imgedit_prompts(path, types: Sequence[str]) -> ImgEditPrompts:
    """ImgEdit's ``prompts.json`` from the user's copy; every edit type in ``types`` needs a rubric."""
    path = Path(path).expanduser()
    types = sorted({rubric_type(t) for t in types})
    expected = EDITOR_BENCHMARKS["imgedit"].prompts_expected
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {type(err).__name__}: {err}") from None
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: its top level is not an object of strings")
    missing = [t for t in types if t not in data]
    no_slot = [t for t in types if t in data and "<edit_prompt>" not in data[t]]
    if missing or no_slot:
        detail = (f"no rubric for {', '.join(missing)}" if missing else
                  f"the rubric of {', '.join(no_slot)} has no <edit_prompt>")
        raise MIEScoreInputError(f"--prompts '{path}' is not {expected}: {detail}")
    return ImgEditPrompts(dict(data), digest_label(path.name, json.dumps(data, sort_keys=True)), True, None)


_LINE = re.compile(r"^[\s*#>\-]*(?P<name>[^:\n*]+?)[\s*]*:[\s*]*(?P<value>[^\s*]+)[\s*]*$")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+)$|^[-+]?(?:nan|inf|infinity)$", re.I)


def parse_criteria(text: Optional[str], names: Optional[Sequence[str]] = None
                   ) -> tuple[Optional[Dict[str, int]], List[str], str]:
    """``(criteria, issues, reasoning)`` of an ImgEdit answer (rules in the module docstring): ``criteria`` maps
    each of the three criterion names to its 1-5 score, or is None."""
    if text is None:
        return None, [], ""
    if not text.strip():
        return None, ["empty_answer"], ""
    found: Dict[str, int] = {}
    issues: List[str] = []
    reasoning = ""
    for line in strip_reasoning_and_fences(text).splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        name, value = match["name"].strip(), match["value"]
        if not _NUMBER.match(value):
            if name.lower().startswith("brief reasoning") or name.lower() == "reasoning":
                reasoning = line.split(":", 1)[1].strip()
            continue
        if not value.lstrip("+").isdigit():
            issues.append(f"score_invalid:{name}")
        elif not IMGEDIT_SCALE[0] <= int(value) <= IMGEDIT_SCALE[1]:
            issues.append(f"score_out_of_range:{name}")
        elif name in found and found[name] != int(value):
            issues.append(f"conflicting_scores:{name}")
        else:
            found[name] = int(value)
    if names is not None:
        by_lower = {n.lower(): n for n in found}
        issues += [f"missing_score:{n}" for n in names if n.lower() not in by_lower]
        found = {n: found[by_lower[n.lower()]] for n in names if n.lower() in by_lower}
    if len(found) != 3 and not issues:
        issues.append(f"{'missing' if len(found) < 3 else 'extra'}_scores:{len(found)}")
    return (None if issues else found), issues, reasoning


class ImgEditJudge(EditorJudge):
    """ImgEdit-Bench Basic through the call engine (module docstring); records ``{"criteria", "mean", "failed",
    "issues", "reasoning"}`` (``mean``: the exact mean of the three criteria; the report applies the released
    rounding)."""

    @classmethod
    def read_prompts(cls, path, categories):
        return read_imgedit_prompts(path, sorted(set(categories))) if path else IMGEDIT_OWN_PROMPTS

    def requests(self, sample, edited, category: str):
        rubric = self.prompts.rubrics[rubric_type(category)].replace("<edit_prompt>", sample.instruction)
        return [self.request(rubric, [sample.sources[0], edited], "imgedit")]

    def read_answers(self, texts: Dict[str, Optional[str]]) -> Dict[str, Any]:
        criteria, issues, reasoning = parse_criteria(texts.get("imgedit"), self.prompts.criteria)
        mean = sum(criteria.values()) / len(criteria) if criteria else None
        return {"criteria": criteria, "mean": mean, "failed": criteria is None, "issues": issues,
                "reasoning": reasoning}
