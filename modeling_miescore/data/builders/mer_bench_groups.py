"""MER-Bench labels and groups: majority tiers per candidate, then K-pair ranking groups per sample.

SpatialReward paper, section 4.3 and appendix A.1: each of overall / SC / PQ takes the tier chosen by at least
3 of the 5 annotators; candidates are ranked by overall tier, then SC, then PQ; groups of 2, 3 and 4 edits of
one sample are formed so that their order is decided by the tiers.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from itertools import combinations

from ..schema import MER_CATEGORIES, MER_TIER_DIMENSIONS
from .mer_bench_raw import Candidate

__all__ = ["CATEGORY_RATIO", "category_quotas", "groups_for", "majority_tier", "sample_groups", "vote"]

CATEGORY_RATIO = (2, 1, 1)  # sec. 4.2: general : human-basic : human-fine


def majority_tier(votes, min_agreement: int = 3) -> str | None:
    """The tier named by at least ``min_agreement`` votes, else ``None`` (paper A.1: >= 3 of 5)."""
    counts = Counter(votes)
    best = [t for t, c in counts.items() if c >= min_agreement]
    return best[0] if len(best) == 1 else None


def vote(candidates: dict[str, Candidate], sample_ids, min_agreement: int) -> tuple[dict, list]:
    """Set each candidate's majority ``tiers``; returns ``(valid candidates per sample, needs review)``.

    A candidate without a majority in some dimension is left out of the groups and listed for review
    (the paper sends it to expert review) with its votes; the valid ones are sorted by id.
    """
    needs_review = []
    valid: dict[str, list[Candidate]] = defaultdict(list)
    for c in candidates.values():
        c.tiers = {d: majority_tier(v, min_agreement) for d, v in c.votes.items()}
        missing = [d for d, t in c.tiers.items() if t is None]
        if missing:
            needs_review.append({
                "candidate_id": c.candidate_id, "sample_id": c.sample_id, "dimensions": missing,
                "votes": {d: dict(sorted(Counter(c.votes[d]).items())) for d in MER_TIER_DIMENSIONS},
            })
        elif c.sample_id in sample_ids:
            valid[c.sample_id].append(c)
    for group in valid.values():
        group.sort(key=lambda c: c.candidate_id)
    return valid, needs_review


def _four_pairs(bases: list[tuple], cands: list[Candidate]) -> list[tuple]:
    """A 3-pair base plus a candidate with the overall tier of one base member but a different (SC, PQ)."""
    out = []
    for base in bases:
        used = {c.candidate_id for c in base}
        for x in cands:
            if x.candidate_id in used:
                continue
            twin = base[2 - x.key[0]]  # the base member with the same overall tier
            if x.key != twin.key:
                out.append(base + (x,))
    return out


def groups_for(cands: list[Candidate], k: int) -> list[tuple]:
    """Every valid k-group among ``cands`` (sorted by id), each ordered best first."""
    if k not in (2, 3, 4):
        raise ValueError(f"group size must be 2, 3 or 4, got {k}")
    if k == 2:  # two different overall tiers
        out = [(a, b) for a, b in combinations(cands, 2) if a.key[0] != b.key[0]]
    else:  # one good, one medium, one poor (overall tier)
        by_tier = defaultdict(list)
        for c in cands:
            by_tier[c.key[0]].append(c)
        out = [(g, m, p) for g in by_tier[2] for m in by_tier[1] for p in by_tier[0]]
        if k == 4:
            out = _four_pairs(out, cands)
    return [tuple(sorted(g, key=lambda c: c.key, reverse=True)) for g in out]


def category_quotas(target: int) -> dict[str, int]:
    """``target`` groups split 2:1:1 over general / human-basic / human-fine (paper sec. 4.2, the ratio of the
    instructions; Table 2's Overall is the 2:1:1-weighted category mean in 7 of 8 rows), largest remainders."""
    from .mie_bench_split import stratified_counts

    return dict(zip(MER_CATEGORIES, stratified_counts([target], CATEGORY_RATIO)[0]))


def sample_groups(by_sample: dict[str, list[Candidate]], sample_order: list[str], targets: dict[int, int], seed: int,
                  categories: dict[str, str] | None = None):
    """Sample up to ``targets[k]`` groups of each size; each candidate is used at most once.

    Sizes are filled one after the other, most constrained first (4, then 3, then 2): a sample can give
    one 4-pair but two 3-pairs, and 2-pairs fit in the leftovers, so this order reaches the targets
    with the fewest samples. For each size, samples are visited in a seeded random order, round after
    round, each visit forming at most one group chosen uniformly among the sample's valid groups of
    unused candidates. With ``categories`` (``{sample_id: category}``) each size is stratified: the samples of
    each category fill its 2:1:1 quota (:func:`category_quotas`) first, then, when a category cannot, the other
    categories' samples fill what is left. Deterministic for a given seed and input. Returns
    ``{k: [(pair_id, group), ...]}``.
    """
    rng = random.Random(seed)
    order = list(sample_order)
    rng.shuffle(order)
    used: set[str] = set()
    groups: dict[int, list[tuple[str, tuple]]] = {k: [] for k in targets}
    counters: dict[tuple[str, int], int] = Counter()

    def fill(k: int, samples: list[str], limit: int) -> None:
        formed = True
        while formed and len(groups[k]) < limit:
            formed = False
            for sid in samples:
                if len(groups[k]) >= limit:
                    break
                options = groups_for([c for c in by_sample.get(sid, []) if c.candidate_id not in used], k)
                if not options:
                    continue
                group = options[rng.randrange(len(options))]
                used.update(c.candidate_id for c in group)
                groups[k].append((f"{sid}-{k}p{counters[(sid, k)]}", group))
                counters[(sid, k)] += 1
                formed = True

    for k in sorted(targets, reverse=True):
        if categories is not None:
            for category, quota in category_quotas(targets[k]).items():
                fill(k, [sid for sid in order if categories.get(sid) == category], len(groups[k]) + quota)
        fill(k, order, targets[k])
    return groups
