"""Stage outcomes and the per-stage rejection report of the SpatialReward data pipeline.

Every sample ends with one :class:`Outcome` per stream; a request that failed for good is not an outcome (the
sample is left for the next run). The report is counted from the whole ledger, so a report after a resumed run
covers every sample.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional

__all__ = ["Outcome", "SC_STAGES", "PQ_STAGES", "build_report", "format_report"]

SC_STAGES = ("input", "grounding", "annotation", "alignment", "verification")
PQ_STAGES = ("input", "annotation", "verification")
_EXAMPLES = 5


@dataclass
class Outcome:
    """Where a stream ended: ``status`` ``"ok"`` / ``"rejected"`` / ``"api_error"`` (not final), the ``stage``,
    a ``reason`` code and a human-readable ``detail``."""

    status: str
    stage: str
    reason: Optional[str] = None
    detail: str = ""

    @classmethod
    def rejected(cls, stage: str, reason: str, detail: str = "") -> "Outcome":
        return cls("rejected", stage, reason, " ".join(str(detail).split())[:300])

    @property
    def final(self) -> bool:
        return self.status in ("ok", "rejected")

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _stream_report(entries: List[Mapping[str, Any]], stages) -> Dict[str, Any]:
    report: Dict[str, Any] = {}
    remaining = len(entries)
    for stage in stages:
        rejected = [e for e in entries if e["status"] == "rejected" and e["stage"] == stage]
        reasons: Dict[str, int] = {}
        examples: Dict[str, List[str]] = {}
        for entry in rejected:
            reasons[entry["reason"]] = reasons.get(entry["reason"], 0) + 1
            shown = examples.setdefault(entry["reason"], [])
            if len(shown) < _EXAMPLES:
                shown.append(entry["id"])
        report[stage] = {"entered": remaining, "passed": remaining - len(rejected), "rejected": len(rejected),
                         "reasons": dict(sorted(reasons.items(), key=lambda kv: -kv[1])), "examples": examples}
        remaining -= len(rejected)
    report["rows"] = sum(1 for e in entries if e["status"] == "ok")
    return report


def build_report(samples: Iterable[Mapping[str, Any]], input_problems: Iterable = ()) -> Dict[str, Any]:
    """The rejection report from ledger lines ``{"id", "route", "sc": Outcome dict, "pq": Outcome dict, ...}``
    and the input problems of this run (``(where, message)``)."""
    samples = list(samples)
    streams: Dict[str, List[Dict[str, Any]]] = {"sc": [], "pq": []}
    routes: Dict[str, int] = {}
    for sample in samples:
        for name in streams:
            streams[name].append({"id": sample["id"], **sample[name]})
        route = sample.get("route") or "none"
        routes[route] = routes.get(route, 0) + 1
    problems = [{"where": where, "message": message} for where, message in input_problems]
    return {"samples": len(samples), "routes": routes,
            "sc": _stream_report(streams["sc"], SC_STAGES), "pq": _stream_report(streams["pq"], PQ_STAGES),
            "input_problems": {"count": len(problems), "first": problems[:20]}}


def format_report(report: Mapping[str, Any]) -> str:
    """A few lines for the terminal."""
    lines = [f"{report['samples']} samples annotated; routes {report['routes']}; "
             f"{report['input_problems']['count']} unusable input lines"]
    for name, stages in (("SC", SC_STAGES), ("PQ", PQ_STAGES)):
        stream = report[name.lower()]
        parts = [f"{stage} -{stream[stage]['rejected']}" + (f" {stream[stage]['reasons']}" if stream[stage]['rejected']
                                                             else "") for stage in stages]
        lines.append(f"{name}: {stream['rows']} rows; rejected at " + ", ".join(parts))
    return "\n".join(lines)
