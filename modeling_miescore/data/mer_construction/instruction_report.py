"""The synthesis report: what was asked, what was accepted, and whether the accepted instructions keep the
paper's composition (SpatialReward sec. 4.2: general : human-basic : human-fine = 2:1:1, 15 subtasks,
2-5 operations per instruction)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, Sequence

from ..schema import MER_CATEGORIES
from .instruction_plan import MAX_EDITS, MIN_EDITS
from .instruction_prompts import MER_SUBTASKS

__all__ = ["RATIO", "RATIO_TOLERANCE", "build_synthesis_report", "format_synthesis_report"]

RATIO = {"general": 0.5, "human_basic": 0.25, "human_fine": 0.25}  # sec. 4.2: 2:1:1
RATIO_TOLERANCE = 0.05  # each category's share of the accepted instructions may be off by 5 points


def _checks(accepted: List[Dict[str, Any]], per_category: Counter, per_subtask: Counter, edits: Counter) -> Dict:
    n = len(accepted)
    shares = {c: (per_category[c] / n if n else 0.0) for c in MER_CATEGORIES}
    all_subtasks = [(c, s) for c in MER_SUBTASKS for s in MER_SUBTASKS[c]]
    missing = [f"{c}/{s}" for c, s in all_subtasks if per_subtask[f"{c}/{s}"] == 0]
    return {
        "ratio_2_1_1": {"ok": n > 0 and all(abs(shares[c] - RATIO[c]) <= RATIO_TOLERANCE for c in MER_CATEGORIES),
                        "shares": {c: round(v, 4) for c, v in shares.items()}, "target": RATIO,
                        "tolerance": RATIO_TOLERANCE},
        "subtasks": {"ok": not missing, "covered": len(all_subtasks) - len(missing), "expected": len(all_subtasks),
                     "missing": missing},
        "num_edits": {"ok": n > 0 and set(edits) <= set(range(MIN_EDITS, MAX_EDITS + 1)),
                      "range": [MIN_EDITS, MAX_EDITS]},
    }


def build_synthesis_report(records: Sequence[Dict[str, Any]], planned: int) -> Dict[str, Any]:
    """Counts over the ledger ``records`` of this plan (``planned`` jobs in all)."""
    accepted = [r for r in records if r["status"] == "ok"]
    rejected = Counter(r["reason"] for r in records if r["status"] == "rejected")
    per_category = Counter(r["category"] for r in accepted)
    per_subtask = Counter(f"{r['category']}/{r['subtask']}" for r in accepted)
    edits = Counter(r["num_edits"] for r in accepted)
    return {
        "planned": planned, "finished": len(records), "pending": planned - len(records),
        "accepted": len(accepted), "rejected": dict(sorted(rejected.items())),
        "per_category": {c: per_category[c] for c in MER_CATEGORIES},
        "per_subtask": dict(sorted(per_subtask.items())),
        "num_edits": {str(k): edits[k] for k in sorted(edits)},
        "checks": _checks(accepted, per_category, per_subtask, edits),
    }


def format_synthesis_report(report: Dict[str, Any]) -> str:
    """A few lines for the terminal."""
    checks = report["checks"]
    ratio, subtasks = checks["ratio_2_1_1"], checks["subtasks"]
    shares = ", ".join(f"{c} {v:.0%}" for c, v in ratio["shares"].items())
    lines = [
        f"instructions: {report['accepted']} accepted, {sum(report['rejected'].values())} rejected "
        f"{report['rejected'] or ''}, {report['pending']} pending of {report['planned']} planned",
        f"2:1:1 ratio {'ok' if ratio['ok'] else 'OFF'}: {shares} (target 50/25/25 +- 5 points)",
        f"subtasks {'ok' if subtasks['ok'] else 'MISSING'}: {subtasks['covered']} of {subtasks['expected']}"
        + (f" (missing: {', '.join(subtasks['missing'])})" if subtasks["missing"] else ""),
        f"operations per instruction: {report['num_edits']} "
        f"({'ok' if checks['num_edits']['ok'] else 'OUT OF RANGE'}, paper: 2-5)",
    ]
    return "\n".join(lines)
