"""Tests for modeling_miescore.data.mos: BT.500 screening, z-score MOS (paper eq. 1), overall (eq. 2)."""

from __future__ import annotations

import json
import math
import time
import types
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from modeling_miescore.data.mos import ScreeningReport, compute_mos, overall_mos, pivot_mos
from modeling_miescore.data.schema import DIMENSIONS

SUBJECTIVE = Path(__file__).resolve().parents[3] / "shared" / "data" / "subjective"
DATASETS = ("nflx_public_raw", "nflx_public_raw_last4outliers", "vqeghd3_raw")


def table(ratings: dict, dimension: str = "vq") -> pd.DataFrame:
    """{subject: [rating for item 0, item 1, ...]} -> long table."""
    rows = [
        {"subject_id": s, "item_id": i, "dimension": dimension, "rating": float(x)}
        for s, xs in ratings.items()
        for i, x in enumerate(xs)
    ]
    return pd.DataFrame(rows)


def load(name: str) -> pd.DataFrame:
    if not SUBJECTIVE.is_dir():
        pytest.skip(f"shared subjective data not found at {SUBJECTIVE} (needs shared/ beside the repo)")
    df = pd.read_csv(SUBJECTIVE / f"{name}.csv")
    df["dimension"] = "quality"
    return df


def mos_of(mos_table: pd.DataFrame, item, dimension="vq") -> pd.Series:
    row = mos_table[(mos_table.item_id == item) & (mos_table.dimension == dimension)]
    assert len(row) == 1
    return row.iloc[0]


# --------------------------------------------------------------------------- hand-computed MOS


def test_hand_computed_mos_three_subjects_three_items():
    # No cell of 3 ratings can hold an outlier (max |r - mean| / sigma = sqrt(2) < 2), so all stay.
    df = table({"A": [1, 2, 3], "B": [1, 3, 5], "C": [5, 3, 4]})
    # Per-subject z (sample std, ddof=1):
    #   A: mean 2, sd 1 -> z = -1, 0, 1
    #   B: mean 3, sd sqrt((4+0+4)/2) = 2 -> z = -1, 0, 1
    #   C: mean 4, sd sqrt((1+1+0)/2) = 1 -> z = 1, -1, 0
    # item 0: z = -1, -1, 1 -> mean -1/3 -> MOS = 100 * (3 - 1/3) / 6 = 44.444...
    #         std(z, ddof=1) = sqrt(((2/3)^2 + (2/3)^2 + (4/3)^2) / 2) = 2/sqrt(3) -> 100 * that / 6
    # item 1: z = 0, 0, -1 -> mean -1/3 -> 44.444..., std(z) = 1/sqrt(3)
    # item 2: z = 1, 1, 0 -> mean 2/3 -> MOS = 100 * (3 + 2/3) / 6 = 61.111..., std(z) = 1/sqrt(3)
    mos_table, report = compute_mos(df)
    assert list(mos_table.columns) == ["item_id", "dimension", "mos", "std", "n_ratings"]
    expected_mos = [100 * (3 - 1 / 3) / 6, 100 * (3 - 1 / 3) / 6, 100 * (3 + 2 / 3) / 6]
    expected_std = [100 * (2 / math.sqrt(3)) / 6, 100 * (1 / math.sqrt(3)) / 6, 100 * (1 / math.sqrt(3)) / 6]
    np.testing.assert_allclose(mos_table["mos"], expected_mos, rtol=1e-12)
    np.testing.assert_allclose(mos_table["std"], expected_std, rtol=1e-12)
    assert mos_table["n_ratings"].tolist() == [3, 3, 3]
    assert mos_table["item_id"].tolist() == [0, 1, 2]
    assert report.rejected_subjects == []
    assert report.removed_fraction == 0.0 and report.n_outliers == 0
    assert isinstance(report, ScreeningReport)

    # zscore_ddof=0: A's sd = sqrt(2/3), C's sd = sqrt(2/3), B's sd = sqrt(8/3); z of A on item 0
    # = -1/sqrt(2/3) = -sqrt(1.5), likewise B: -2/sqrt(8/3) = -sqrt(1.5), C: +sqrt(1.5).
    mos0, _ = compute_mos(df, zscore_ddof=0)
    assert mos0["mos"].iloc[0] == pytest.approx(100 * (3 - math.sqrt(1.5) / 3) / 6, rel=1e-12)


def test_zscores_are_per_dimension():
    a = table({"A": [1, 2, 3], "B": [1, 3, 5], "C": [5, 3, 4]}, "visual_quality")
    # Dimension b: every subject's ratings are 10 * a + 7 -> identical z-scores, identical MOS.
    # If z-scores pooled the two dimensions, subject means/sds would mix and MOS would differ.
    b = a.assign(dimension="instruction_following", rating=10 * a.rating + 7)
    mos_table, _ = compute_mos(pd.concat([a, b]))
    va = mos_table[mos_table.dimension == "visual_quality"]["mos"].to_numpy()
    vb = mos_table[mos_table.dimension == "instruction_following"]["mos"].to_numpy()
    np.testing.assert_allclose(va, [44.44444444444444, 44.44444444444444, 61.11111111111111])
    np.testing.assert_allclose(vb, va, rtol=1e-12)


# --------------------------------------------------------------------------- outliers, rules


def test_outlier_at_exactly_two_sigma_is_removed_and_rules_differ():
    # Item 0: ratings 1,1,1,1,5. mean 1.8; deviations -0.8 x4, +3.2; m2 = (4*0.64 + 10.24)/5 = 2.56,
    # sigma = 1.6; m4 = (4*0.4096 + 104.8576)/5 = 21.2992; beta2 = 21.2992/2.56^2 = 3.25 -> normal,
    # bound 2*sigma = 3.2; E's 5 lies exactly at mean + 3.2 -> an outlier ("at or beyond").
    # Items 1, 2: permutations of 1..5 (beta2 = 1.7 -> sqrt(20) sigma bound -> no outliers).
    ratings = {"A": [1, 1, 2], "B": [1, 2, 3], "C": [1, 3, 4], "D": [1, 4, 5], "E": [5, 5, 1]}
    df = table(ratings)
    mos_table, report = compute_mos(df)
    cell = report.item_stats.set_index("item_id").loc[0]
    assert cell["sigma"] == pytest.approx(1.6)
    assert cell["kurtosis"] == pytest.approx(3.25)
    assert bool(cell["normal"]) and cell["bound"] == pytest.approx(3.2)
    assert cell["n_outliers"] == 1
    assert report.item_stats.set_index("item_id").loc[1, "normal"] == False  # noqa: E712
    stats = report.subject_stats.set_index("subject")
    assert stats.loc["E", ["n", "P", "Q"]].tolist() == [3, 1, 0]
    assert stats.loc["E", "ratio"] == pytest.approx(1 / 3)
    assert stats.loc["E", "asymmetry"] == 1.0
    assert stats[["P", "Q"]].drop("E").to_numpy().sum() == 0
    # BT.500 keeps E: all of E's outliers are on one side (|P-Q|/(P+Q) = 1 >= 0.3).
    assert report.rejected_subjects == []
    assert report.n_outliers == 1 and report.removed_fraction == pytest.approx(1 / 15)
    assert mos_of(mos_table, 0)["n_ratings"] == 4
    # Removing the outlier before z-scoring is the same as never having had that rating.
    reduced = df[~((df.subject_id == "E") & (df.item_id == 0))]
    mos_reduced, rep_reduced = compute_mos(reduced)
    assert rep_reduced.n_outliers == 0
    pd.testing.assert_frame_equal(mos_table, mos_reduced)

    # The paper's rule rejects E (1/3 > 5%); E's 3 ratings are removed, the outlier counted once.
    mos_p, rep_p = compute_mos(df, rule="paper")
    assert rep_p.rejected_subjects == ["E"]
    assert rep_p.n_removed == 3 and rep_p.removed_fraction == pytest.approx(3 / 15)
    assert mos_p["n_ratings"].tolist() == [4, 4, 4]


def test_non_normal_cell_uses_sqrt20_bound():
    # 19 ratings of 1 and one of 5: mean 1.2, m2 = 0.76, beta2 = 10.4272 / 0.76^2 = 18.05 (> 4,
    # non-normal) -> bound sqrt(20) * 0.8718 = 3.899 > 3.8 = deviation of the 5: not an outlier,
    # although it is far beyond 2 sigma = 1.744.
    rows = [{"subject_id": f"s{i}", "item_id": 0, "dimension": "vq", "rating": 5.0 if i == 0 else 1.0} for i in range(20)]
    rows += [{"subject_id": f"s{i}", "item_id": 1, "dimension": "vq", "rating": float(i % 5 + 1)} for i in range(20)]
    _, report = compute_mos(rows)  # list of dicts is accepted
    cell = report.item_stats.set_index("item_id").loc[0]
    assert cell["kurtosis"] == pytest.approx(10.4272 / 0.76**2)
    assert not bool(cell["normal"])
    assert cell["bound"] == pytest.approx(math.sqrt(20) * math.sqrt(0.76))
    assert report.n_outliers == 0


def test_screening_pools_dimensions():
    # Subject E has one outlier (item 0, dimension a) among 10 ratings per dimension.
    # Alone, dimension a gives E a ratio of 1/10 > 5% -> the paper rule rejects E; pooled over two
    # dimensions E has 1/20 = 5%, not over 5% -> kept.
    perm = [[1, 2, 3, 4, 5], [2, 3, 4, 5, 1], [3, 4, 5, 1, 2], [4, 5, 1, 2, 3], [5, 1, 2, 3, 4]]
    subjects = "ABCDE"
    rows = []
    for dim in ("a", "b"):
        for item in range(10):
            col = [1, 1, 1, 1, 5] if (dim == "a" and item == 0) else perm[item % 5]
            rows += [{"subject_id": s, "item_id": item, "dimension": dim, "rating": float(col[k])} for k, s in enumerate(subjects)]
    df = pd.DataFrame(rows)
    _, one = compute_mos(df[df.dimension == "a"], rule="paper")
    assert one.rejected_subjects == ["E"]
    _, both = compute_mos(df, rule="paper")
    e = both.subject_stats.set_index("subject").loc["E"]
    assert e["n"] == 20 and e["P"] == 1 and e["ratio"] == pytest.approx(0.05)
    assert both.rejected_subjects == []


def test_planted_unreliable_raters_are_rejected():
    rng = np.random.default_rng(20240517)
    n_items = 1000
    truth = rng.uniform(1.5, 4.5, n_items)
    names, ratings = [], []
    for s in range(15):  # honest: own bias and scale, small noise
        bias, scale = rng.normal(0, 0.3), rng.uniform(0.8, 1.2)
        names.append(f"honest{s:02d}")
        ratings.append(3 + scale * (truth - 3) + bias + rng.normal(0, 0.5, n_items))
    for s in range(3):  # unreliable: unbiased, very noisy
        names.append(f"noisy{s}")
        ratings.append(truth + rng.normal(0, 1.5, n_items))
    names.append("harsh")  # consistent but 1.5 points harsher than everyone
    ratings.append(truth - 1.5 + rng.normal(0, 0.3, n_items))
    df = pd.DataFrame(
        {
            "subject_id": np.repeat(names, n_items),
            "item_id": np.tile(np.arange(n_items), len(names)),
            "dimension": "visual_quality",
            "rating": np.concatenate(ratings),
        }
    )
    mos_table, report = compute_mos(df)
    assert report.rejected_subjects == ["noisy0", "noisy1", "noisy2"]
    stats = report.subject_stats.set_index("subject")
    # the harsh rater has many outliers, all on one side: BT.500 keeps it ...
    assert stats.loc["harsh", "ratio"] > 0.1 and stats.loc["harsh", "asymmetry"] == 1.0
    assert not stats.loc["harsh", "rejected"]
    assert np.corrcoef(mos_table["mos"], truth)[0, 1] > 0.98
    # ... the paper's rule rejects it along with the noisy ones.
    _, paper = compute_mos(df, rule="paper")
    assert {"harsh", "noisy0", "noisy1", "noisy2"} <= set(paper.rejected_subjects)


# --------------------------------------------------------------------------- degenerate cases


def test_zero_variance_subject_gets_z_zero():
    df = table({"A": [1, 2, 3], "B": [1, 3, 5], "C": [5, 3, 4], "D": [3, 3, 3]})
    mos_table, report = compute_mos(df)
    assert report.n_outliers == 0  # 4 ratings: max |d|/sigma = sqrt(3) < 2
    # D's z = 0 everywhere; the other z as in the hand-computed test:
    # item 0: (-1 - 1 + 1 + 0)/4 = -1/4; item 1: (0 + 0 - 1 + 0)/4 = -1/4; item 2: (1 + 1 + 0 + 0)/4 = 1/2
    expected = [100 * (3 - 0.25) / 6, 100 * (3 - 0.25) / 6, 100 * (3 + 0.5) / 6]
    np.testing.assert_allclose(mos_table["mos"], expected, rtol=1e-12)
    assert any("z-score undefined" in n and "'D'" in n for n in report.notes)


def test_one_rating_item_and_unanimous_item_have_no_outliers():
    df = table({"A": [1, 2, 3, 4], "B": [1, 3, 5, 4], "C": [5, 3, 4, 4], "D": [2, 4, 1, 4]})
    df = pd.concat(
        [df, pd.DataFrame([{"subject_id": "A", "item_id": 99, "dimension": "vq", "rating": 5.0}])],
        ignore_index=True,
    )
    mos_table, report = compute_mos(df)
    lone = mos_of(mos_table, 99)
    assert lone["n_ratings"] == 1 and math.isnan(lone["std"]) and math.isfinite(lone["mos"])
    cells = report.item_stats.set_index("item_id")
    assert cells.loc[99, "sigma"] == 0 and math.isnan(cells.loc[99, "kurtosis"])
    # item 3 is unanimous (all 4): sigma 0, nothing removed (sureal would flag all 4 ratings)
    assert cells.loc[3, "sigma"] == 0 and cells.loc[3, "n_outliers"] == 0
    assert mos_of(mos_table, 3)["n_ratings"] == 4
    assert report.n_outliers == 0
    assert any("zero spread" in n for n in report.notes)
    # incomplete design: n is each subject's own number of ratings
    assert report.subject_stats.set_index("subject")["n"].to_dict() == {"A": 5, "B": 4, "C": 4, "D": 4}


def test_every_subject_flagged_rejects_none_with_warning():
    # Five subjects, ten items. For items 2i and 2i+1 subject i is the odd one out
    # (1,1,1,1,5 and 5,5,5,5,1: exactly 2 sigma, normal) -> every subject has P = Q = 1 of n = 10,
    # ratio 0.2 > 5%, asymmetry 0 < 0.3 -> BT.500 flags all five.
    subjects = "ABCDE"
    rows = []
    for item in range(10):
        odd = item // 2
        high = item % 2 == 0
        for k, s in enumerate(subjects):
            r = (5.0 if high else 1.0) if k == odd else (1.0 if high else 5.0)
            rows.append({"subject_id": s, "item_id": item, "dimension": "vq", "rating": r})
    with pytest.warns(RuntimeWarning, match="none was rejected"):
        mos_table, report = compute_mos(rows)
    assert report.rejected_subjects == []
    assert report.subject_stats["P"].tolist() == [1] * 5 and report.subject_stats["Q"].tolist() == [1] * 5
    assert report.subject_stats["rejected"].sum() == 0
    assert report.warnings and any("reject none" in n for n in report.notes)
    assert report.n_outliers == 10 and report.removed_fraction == pytest.approx(0.2)
    assert mos_table["n_ratings"].tolist() == [4] * 10
    with pytest.warns(RuntimeWarning):
        _, paper = compute_mos(rows, rule="paper")
    assert paper.rejected_subjects == []


# --------------------------------------------------------------------------- bad input


def test_bad_input_errors():
    good = table({"A": [1, 2], "B": [2, 3]})
    with pytest.raises(ValueError, match=r"missing column.*'dimension'.*df\['dimension'\]"):
        compute_mos(good.drop(columns="dimension"))
    with pytest.raises(ValueError, match="empty"):
        compute_mos(good.iloc[:0])
    with pytest.raises(ValueError, match="empty"):
        compute_mos([])
    bad = good.astype({"rating": object})
    bad.loc[2, "rating"] = "abc"
    with pytest.raises(ValueError, match=r"non-numeric.*'abc'.*row\(s\) 2"):
        compute_mos(bad)
    nan = good.copy()
    nan.loc[1, "rating"] = np.nan
    with pytest.raises(ValueError, match=r"NaN.*row\(s\) 1.*dropna"):
        compute_mos(nan)
    inf = good.copy()
    inf.loc[3, "rating"] = np.inf
    with pytest.raises(ValueError, match=r"row\(s\) 3"):
        compute_mos(inf)
    no_id = good.astype({"subject_id": object})
    no_id.loc[0, "subject_id"] = None
    with pytest.raises(ValueError, match=r"'subject_id'.*row\(s\) 0"):
        compute_mos(no_id)
    with pytest.raises(ValueError, match=r"unknown rule 'BT500'.*'bt500', 'paper'"):
        compute_mos(good, rule="BT500")
    # numeric strings are fine
    ok = good.astype({"rating": str})
    assert compute_mos(ok)[0]["n_ratings"].tolist() == [2, 2]


# --------------------------------------------------------------------------- overall (eq. 2)


def test_pivot_mos_overall_weighted_geometric_mean():
    mos_table = pd.DataFrame(
        {
            "item_id": ["x", "x", "x", "y", "y", "y", "z", "z"],
            "dimension": list(DIMENSIONS) * 2 + ["visual_quality", "instruction_following"],
            "mos": [40.0, 50.0, 60.0, -5.0, 70.0, 80.0, 10.0, 20.0],
            "std": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
            "n_ratings": [15, 14, 13, 15, 15, 15, 3, 3],
        }
    )
    wide = pivot_mos(mos_table).set_index("item_id")
    assert list(wide.columns[:3]) == ["mos_visual_quality", "std_visual_quality", "n_visual_quality"]
    x = wide.loc["x"]
    # 40^0.3 * 50^0.4 * 60^0.3 = exp(0.3 ln 40 + 0.4 ln 50 + 0.3 ln 60)
    expected = math.exp(0.3 * math.log(40) + 0.4 * math.log(50) + 0.3 * math.log(60))
    assert x["mos_overall"] == pytest.approx(expected, rel=1e-12)
    assert x["n_instruction_following"] == 14 and x["std_attribute_preservation"] == 3.0
    assert overall_mos(40, 50, 60) == pytest.approx(expected, rel=1e-12)
    # weights matter: IF gets 0.4
    assert overall_mos(40, 50, 60) != pytest.approx(overall_mos(50, 40, 60))
    # negative MOS is clipped at 0 before the geometric mean
    assert wide.loc["y", "mos_overall"] == 0.0 and wide.loc["y", "mos_visual_quality"] == -5.0
    # an item missing a dimension has no overall
    assert math.isnan(wide.loc["z", "mos_overall"]) and wide.loc["z", "n_attribute_preservation"] == 0
    np.testing.assert_allclose(overall_mos([40, 0], [50, 1], [60, 1]), [expected, 0.0])
    # only two dimensions -> no overall column
    assert "mos_overall" not in pivot_mos(mos_table[mos_table.dimension != "attribute_preservation"]).columns
    with pytest.raises(ValueError, match="3 entries"):
        overall_mos(1, 2, 3, weights=(0.5, 0.5))


def test_end_to_end_three_dimensions_and_json_report():
    base = table({"A": [1, 2, 3], "B": [1, 3, 5], "C": [5, 3, 4]})
    df = pd.concat([base.assign(dimension=d) for d in DIMENSIONS], ignore_index=True)
    mos_table, report = compute_mos(df)
    wide = pivot_mos(mos_table)
    assert len(wide) == 3
    m = 100 * (3 - 1 / 3) / 6
    assert wide["mos_overall"].iloc[0] == pytest.approx(m)  # equal components -> same value
    d = json.loads(json.dumps(report.to_dict(include_item_stats=True)))
    assert d["rule"] == "bt500" and d["rejected_subjects"] == [] and d["removed_fraction"] == 0.0
    assert [s["subject"] for s in d["subject_stats"]] == ["A", "B", "C"]
    assert d["subject_stats"][0]["asymmetry"] is None  # NaN -> null
    assert set(d["subject_stats"][0]) == {"subject", "n", "P", "Q", "ratio", "asymmetry", "rejected"}
    assert d["subject_stats"][0]["n"] == 9  # pooled over the three dimensions
    assert len(d["item_stats"]) == 9


def test_vectorised_speed():
    # 300k ratings (the paper's table has 1.62M); a per-group Python loop would take minutes.
    rng = np.random.default_rng(1)
    n_items, per, n_subjects = 20000, 15, 60
    subj = rng.integers(0, n_subjects, n_items * per)
    df = pd.DataFrame(
        {
            "subject_id": subj,
            "item_id": np.repeat(np.arange(n_items), per),
            "dimension": "visual_quality",
            "rating": np.clip(np.repeat(rng.uniform(1, 5, n_items), per) + rng.normal(0, 0.7, n_items * per), 1, 5),
        }
    )
    start = time.perf_counter()
    mos_table, report = compute_mos(df)
    elapsed = time.perf_counter() - start
    assert len(mos_table) == n_items and report.n_ratings == n_items * per
    assert elapsed < 10, f"compute_mos took {elapsed:.1f}s on 300k ratings"


# --------------------------------------------------------------------------- real data vs sureal


def sureal_screening(df: pd.DataFrame):
    """Run sureal's SubjrejMosModel (ITU-R BT.500) on a complete single-dimension table."""
    pytest.importorskip("sureal")
    from sureal.dataset_reader import RawDatasetReader
    from sureal.subjective_model import SubjrejMosModel

    subjects = sorted(df.subject_id.unique())
    wide = df.pivot(index="item_id", columns="subject_id", values="rating")[subjects]
    content = df.groupby("item_id").content_id.first()
    dataset = types.SimpleNamespace(
        dataset_name="calibration",
        ref_videos=[{"content_id": int(c), "path": f"ref_{c}"} for c in sorted(df.content_id.unique())],
        dis_videos=[
            {"content_id": int(content[item]), "asset_id": k, "path": f"dis_{item}", "os": [float(x) for x in wide.loc[item]]}
            for k, item in enumerate(wide.index)
        ],
    )
    with warnings.catch_warnings():  # sureal divides 0/0 for clean subjects and unanimous items
        warnings.simplefilter("ignore")
        result = SubjrejMosModel(RawDatasetReader(dataset)).run_modeling()
    rejected = [s for s, r in zip(subjects, result["observer_rejected"]) if r]
    return subjects, len(wide), rejected, np.array(result["observer_rejected_1st_stats"]), np.array(result["observer_rejected_2nd_stats"])


EXPECTED = {
    # dataset: (bt500 rejected, paper rejected, bt500 removed fraction)
    "nflx_public_raw": (["s02"], ["s02", "s03", "s05", "s06", "s09", "s12", "s13", "s18"], 133 / 2054),
    "nflx_public_raw_last4outliers": (["s26", "s28", "s29"], ["s08", "s12", "s26", "s27", "s28", "s29"], 280 / 2370),
    "vqeghd3_raw": (["s12"], ["s09", "s12", "s15", "s19", "s22"], 116 / 1728),
}


@pytest.mark.parametrize("name", DATASETS)
def test_bt500_matches_sureal_on_real_data(name):
    df = load(name)
    subjects, n_items, sureal_rejected, first, second = sureal_screening(df)
    _, report = compute_mos(df, rule="bt500")
    assert report.rejected_subjects == sureal_rejected
    assert report.rejected_subjects == EXPECTED[name][0]
    assert report.removed_fraction == pytest.approx(EXPECTED[name][2])
    # P and Q agree rating for rating, except that sureal counts every rating of a cell with zero
    # spread as both P and Q (sigma = 0 -> r >= mean + 0 and r <= mean - 0); we count none there.
    st = report.subject_stats.set_index("subject").loc[subjects]
    n_zero = int((report.item_stats["sigma"] == 0).sum())
    pq = (st.P + st.Q).to_numpy()
    np.testing.assert_allclose(first * n_items, pq + 2 * n_zero, atol=1e-9)
    with np.errstate(invalid="ignore"):
        ours_as_sureal = np.abs(st.P - st.Q).to_numpy() / (pq + 2 * n_zero)
    np.testing.assert_allclose(second, ours_as_sureal, equal_nan=True)


def test_paper_rule_on_netflix_public():
    df = load("nflx_public_raw")
    _, report = compute_mos(df, rule="paper")
    # Measured: 8 of 26 under the paper's literal rule (vs 1 under BT.500).
    assert len(report.subject_stats) == 26
    assert report.rejected_subjects == EXPECTED["nflx_public_raw"][1]
    assert report.removed_fraction == pytest.approx(652 / 2054)
    # The often-quoted "15 of 26" comes from counting the single unanimous item (all 26 ratings
    # equal, sigma = 0) as two outliers per subject, as sureal does: (P+Q+2)/79 > 5%.
    st = report.subject_stats
    n_zero = int((report.item_stats["sigma"] == 0).sum())
    assert n_zero == 1
    assert int(((st.P + st.Q + 2 * n_zero) / st.n > 0.05).sum()) == 15


@pytest.mark.parametrize("name", DATASETS)
def test_real_data_mos_sane(name):
    df = load(name)
    mos_table, report = compute_mos(df)
    raw_mean = df.groupby("item_id").rating.mean()
    # MOS is a monotone-ish function of the raw mean: strong rank agreement, and in range.
    rho = pd.Series(mos_table.set_index("item_id")["mos"]).corr(raw_mean, method="spearman")
    assert rho > 0.97
    assert mos_table["mos"].between(0, 100).all()
    kept = df[~df.subject_id.isin(report.rejected_subjects)]
    assert mos_table["n_ratings"].sum() == len(df) - report.n_removed
    assert (mos_table["n_ratings"] <= kept.groupby("item_id").size().to_numpy()).all()
