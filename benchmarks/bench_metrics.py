"""Speed of modeling_miescore.evaluation.metrics on MIE-Bench / MER-Bench sized inputs (CPU; not a test).

    python benchmarks/bench_metrics.py [--items 36000] [--boot 1000] [--repeats 5]

Times the vectorised metrics on 36,000 items (3,000 instances x 12 editing models, MIE-Bench size), on 600
MER-Bench groups (200 each of 2/3/4 candidates) and on 12,000 3-candidate groups (36,000 items), and a
1,000-resample bootstrap. Where a plain pure-Python loop is the natural alternative it is timed in the same
run and the ratio printed. The O(n^2) naive loops (Kendall tau, epsilon search) run on a subsample, and the
naive bootstrap runs a few resamples; those rows say so, and the ratio compares equal work.
Absolute times depend on the machine; the ratios are the point.
"""

from __future__ import annotations

import argparse
import math
import random
import time

import numpy as np

from bench_common import best_time

from modeling_miescore.evaluation.metrics.bootstrap import bootstrap_ci
from modeling_miescore.evaluation.metrics.correlation import correlations, fit_logistic, krcc, plcc, srcc
from modeling_miescore.evaluation.metrics.group_ranking import group_accuracy, kendall_tau_groups
from modeling_miescore.evaluation.metrics.model_ranking import model_ranking_srcc
from modeling_miescore.evaluation.metrics.pairwise import pairwise_accuracy


# ------------------------------------------------------------------------------------------ naive versions
def naive_ranks(xs):
    order = sorted(range(len(xs)), key=xs.__getitem__)
    ranks = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def naive_pearson(xs, ys):
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    sxx = sum((x - mx) ** 2 for x in xs)
    syy = sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy)


def naive_srcc(xs, ys):
    return naive_pearson(naive_ranks(xs), naive_ranks(ys))


def naive_kendall_b(xs, ys):
    n = len(xs)
    c = d = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            a, b = xs[i] - xs[j], ys[i] - ys[j]
            if a == 0 and b == 0:
                continue
            if a == 0:
                tx += 1
            elif b == 0:
                ty += 1
            elif (a > 0) == (b > 0):
                c += 1
            else:
                d += 1
    return (c - d) / math.sqrt((c + d + tx) * (c + d + ty))


def naive_group_metrics(groups):
    """SpatialReward-style loop: exact match and pairwise tau per group (tie scores 0)."""
    correct, taus = [], []
    for g in groups:
        correct.append(all(g[i] > g[i + 1] for i in range(len(g) - 1)))
        s = 0
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                s += (g[i] > g[j]) - (g[i] < g[j])
        taus.append(s / (len(g) * (len(g) - 1) / 2))
    return sum(correct) / len(correct), sum(taus) / len(taus)


def naive_epsilon_search(a, b, pref):
    best = (-1.0, 0.0)
    for eps in sorted({0.0} | {abs(x - y) for x, y in zip(a, b)}):
        ok = 0
        for x, y, h in zip(a, b, pref):
            d = x - y
            if h == 0:
                ok += abs(d) <= eps
            else:
                ok += abs(d) > eps and (d > 0) == (h > 0)
        if ok > best[0]:
            best = (ok, eps)
    return best[0] / len(a), best[1]


def naive_grouped_bootstrap(fn, xs, ys, inst, n, seed=0):
    rows = {}
    for i, g in enumerate(inst):
        rows.setdefault(g, []).append(i)
    keys = list(rows)
    rnd = random.Random(seed)
    vals = []
    for _ in range(n):
        idx = [i for _ in keys for i in rows[keys[rnd.randrange(len(keys))]]]
        vals.append(fn([xs[i] for i in idx], [ys[i] for i in idx]))
    return vals


# ------------------------------------------------------------------------------------------ harness
def timed(fn, repeats):
    fn()  # warm-up
    return best_time(fn, repeats)[0]


ROWS = []


def report(name, ours, naive=None, note=""):
    ratio = f"{naive / ours:9.0f}x" if naive else "         -"
    naive_s = f"{naive * 1e3:11.1f}" if naive else "          -"
    ROWS.append(name)
    print(f"{name:<62}{ours * 1e3:10.2f}{naive_s}{ratio}  {note}")


def bench_correlations(pred, mos, models, r: int, sub: int) -> None:
    pl, ml = pred.tolist(), mos.tolist()
    report("SRCC (36k)", timed(lambda: srcc(pred, mos), r), timed(lambda: naive_srcc(pl, ml), 1))
    report("PLCC raw (36k)", timed(lambda: plcc(pred, mos), r), timed(lambda: naive_pearson(pl, ml), 1))
    report("KRCC tau-b (36k)", timed(lambda: krcc(pred, mos), r))
    ps, ms = pred[:sub], mos[:sub]
    report(f"KRCC tau-b ({sub} items, naive O(n^2) loop)", timed(lambda: krcc(ps, ms), r),
           timed(lambda: naive_kendall_b(ps.tolist(), ms.tolist()), 1))
    report("4-parameter logistic fit (36k)", timed(lambda: fit_logistic(pred, mos), r))
    report("correlations(): srcc+krcc+plcc+plcc_logistic (36k)", timed(lambda: correlations(pred, mos), r))
    report("model-ranking SRCC (36k items, 12 models)", timed(lambda: model_ranking_srcc(pred, mos, models), r))


def bench_groups(rng, n: int, r: int) -> list:
    """MER-Bench group metrics; returns the 600 groups (the bootstrap reuses them)."""
    sizes = [2] * 200 + [3] * 200 + [4] * 200
    mer = [np.round(rng.normal(size=k) - 0.5 * np.arange(k), 1).tolist() for k in sizes]
    report("group accuracy + Kendall tau (600 MER groups)",
           timed(lambda: (group_accuracy(mer), kendall_tau_groups(mer)), r),
           timed(lambda: naive_group_metrics(mer), r))
    big = np.round(rng.normal(size=(n // 3, 3)) - 0.5 * np.arange(3), 1)
    big_l = big.tolist()
    report(f"group accuracy + Kendall tau ({n // 3} groups, lists)",
           timed(lambda: (group_accuracy(big_l), kendall_tau_groups(big_l)), r),
           timed(lambda: naive_group_metrics(big_l), 1))
    report(f"group accuracy + Kendall tau ({n // 3} groups, 2-D array)",
           timed(lambda: (group_accuracy(big), kendall_tau_groups(big)), r))
    return mer


def bench_pairwise(pred, mos, n: int, r: int, sub: int) -> None:
    """Pairwise accuracy with the tie-threshold (epsilon) calibration."""
    a, b = pred[: n // 2], pred[n // 2 : 2 * (n // 2)]
    hd = mos[: n // 2] - mos[n // 2 : 2 * (n // 2)]
    pref = np.where(np.abs(hd) < 5, 0, np.sign(hd)).astype(int)
    report(f"pairwise accuracy, epsilon search ({n // 2} pairs)",
           timed(lambda: pairwise_accuracy(a, b, pref, tie_policy="calibrated"), r))
    report(f"pairwise accuracy, epsilon search ({sub} pairs, naive)",
           timed(lambda: pairwise_accuracy(a[:sub], b[:sub], pref[:sub], tie_policy="calibrated"), r),
           timed(lambda: naive_epsilon_search(a[:sub].tolist(), b[:sub].tolist(), pref[:sub].tolist()), 1))


def bench_bootstrap(pred, mos, inst, mer, nb: int) -> None:
    t = time.perf_counter()
    ci = bootstrap_ci(srcc, pred, mos, n=nb, groups=inst)
    t_boot = time.perf_counter() - t
    k_naive = max(3, nb // 100)
    t = time.perf_counter()
    naive_grouped_bootstrap(naive_srcc, pred.tolist(), mos.tolist(), inst.tolist(), k_naive)
    t_naive = (time.perf_counter() - t) * nb / k_naive
    report(f"bootstrap CI of SRCC, {nb} instance resamples (36k)", t_boot, t_naive,
           f"naive: {k_naive} resamples timed, scaled to {nb}; SRCC {ci.point:.4f} [{ci.low:.4f}, {ci.high:.4f}]")
    t = time.perf_counter()
    bootstrap_ci(group_accuracy, mer, n=nb)
    report(f"bootstrap CI of group accuracy, {nb} resamples (600 groups)", time.perf_counter() - t)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=36_000)
    ap.add_argument("--boot", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--naive-sub", type=int, default=2000, help="subsample for the O(n^2) naive loops")
    args = ap.parse_args()

    rng = np.random.default_rng(0)
    n, n_models = args.items, 12
    inst = np.repeat(np.arange(n // n_models), n_models)
    models = np.tile(np.arange(n_models), n // n_models)
    mos = rng.uniform(10, 90, size=inst.shape[0])
    pred = np.round(100 / (1 + np.exp(-(mos - 50) / 15)) + rng.normal(scale=8, size=mos.shape), 2)
    print(f"items={inst.shape[0]}  bootstrap resamples={args.boot}  (times: best of {args.repeats}, milliseconds)")
    print(f"{'metric':<62}{'ours ms':>10}{'naive ms':>11}{'ratio':>10}")
    bench_correlations(pred, mos, models, args.repeats, args.naive_sub)
    mer = bench_groups(rng, n, args.repeats)
    bench_pairwise(pred, mos, n, args.repeats, args.naive_sub)
    bench_bootstrap(pred, mos, inst, mer, args.boot)


if __name__ == "__main__":
    main()
