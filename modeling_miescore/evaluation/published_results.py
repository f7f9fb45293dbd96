"""Published results as data: MIEScore paper Table 6 (zero-shot on other editing benchmarks) and SpatialReward
paper Tables 1-2 (reward benchmarks) and Table 3 (online RL of image editors, :data:`SPATIALREWARD_TABLE3`; not the
MIEScore paper's Table 3 of baselines, which :mod:`modeling_miescore.baselines` computes).

Numbers are copied from the papers (``None`` where the paper prints "-": the model was trained on that benchmark,
or, for EditReward's Cons., the benchmark cannot evaluate it). Rows are zipped with the column keys strictly
(:func:`keyed_row`), so a row with a value too few or too many fails at import.
"""

from __future__ import annotations

__all__ = ["SPATIALREWARD_TABLE3", "SPATIALREWARD_TABLE3_COLUMNS", "TABLE1", "TABLE1_COLUMNS", "TABLE2", "TABLE6",
           "TABLE6_COLUMNS", "keyed_row", "mer_category_averaging", "mer_overall_averaging", "table3_delta_check"]


def keyed_row(columns, values, what: str) -> dict:
    """``{column: value}`` of one printed row; a row whose length is not the table's is an error (at import)."""
    try:
        return dict(zip(columns, values, strict=True))
    except ValueError:
        raise ValueError(f"{what}: {len(values)} values for the {len(columns)} columns {', '.join(columns)}") from None


# MIEScore paper, "Zero-shot Results on Other Benchmarks", Table 6. Accuracy in %, SRCC as a fraction.
# column key (the converted benchmark's name) -> (header, metric), as printed; the paper spells AURORA "AROURA".
TABLE6_COLUMNS = {
    "genai-bench": ("GenAI-Bench", "Acc., %"),
    "aurora-bench": ("AROURA-Bench", "Acc., %"),
    "editscore-bench": ("EditScore-Bench", "Acc., %"),
    "imagenhub": ("ImagenHub", "SRCC"),
    "ebench-18k": ("EBench-18K", "SRCC"),
    "editreward-bench": ("EditReward-Bench", "SRCC"),
    "ieqa": ("IEQA", "SRCC"),
}
TABLE6 = {
    name: keyed_row(TABLE6_COLUMNS, values, f"Table 6, {name}") for name, values in (
        ("ChatGPT-5", (59.61, 47.27, 75.24, 0.4085, 0.4260, 0.3781, 0.4175)),
        ("Gemini-2.5-Flash", (57.01, 47.63, 70.26, 0.4162, 0.4337, 0.3802, 0.4258)),
        ("Qwen3-VL (7B)", (44.58, 34.28, 42.51, 0.2426, 0.3726, 0.2731, 0.3860)),
        ("InternVL3.5 (7B)", (45.17, 36.92, 45.18, 0.2071, 0.3511, 0.2406, 0.3091)),
        ("EditScore (Qwen3)", (50.24, 42.18, None, 0.3062, 0.3206, 0.2590, 0.3805)),
        ("EditReward (MiMo)", (65.72, 63.62, 71.25, 0.3520, 0.3718, None, 0.4643)),
        ("LMM4Edit", (63.27, 65.21, 70.64, 0.3726, None, 0.3958, 0.5012)),
        ("EditHF", (67.92, 66.08, 77.50, 0.4627, 0.4526, 0.4325, None)),
        ("MIEScore (paper)", (76.22, 70.28, 76.15, 0.5508, 0.5024, 0.4153, 0.5047)),
    )
}

# SpatialReward paper, sec. 5.2, Table 1: EditReward-Bench (Luo et al. 2025, i.e. EditScore's benchmark),
# MMRB2 (image editing) and MER-Bench. column key -> header.
TABLE1_COLUMNS = {
    "editreward_pf": "EditReward-Bench PF", "editreward_cons": "EditReward-Bench Cons.",
    "editreward_ovrl": "EditReward-Bench Ovrl.", "mmrb2_single": "MMRB2 Single", "mmrb2_multi": "MMRB2 Multi",
    "mmrb2_ovrl": "MMRB2 Ovrl.", "mer_2p": "MER-Bench 2-P", "mer_3p": "MER-Bench 3-P", "mer_4p": "MER-Bench 4-P",
    "mer_ovrl": "MER-Bench Ovrl.", "mer_tau": "MER-Bench τ",
}
TABLE1 = {
    name: {"type": kind, **keyed_row(TABLE1_COLUMNS, values, f"Table 1, {name}")} for name, kind, values in (
        ("GPT-4.1", "Closed", (0.673, 0.602, 0.705, 0.547, 0.478, 0.535, 0.660, 0.290, 0.125, 0.358, 0.395)),
        ("GPT-5", "Closed", (0.777, 0.669, 0.755, 0.627, 0.584, 0.619, 0.720, 0.390, 0.160, 0.423, 0.472)),
        ("Gemini-2.5-Pro", "Closed", (0.703, 0.560, 0.722, 0.545, 0.483, 0.534, 0.750, 0.465, 0.170, 0.462, 0.546)),
        ("Gemini-3.0-Flash", "Closed", (0.717, 0.662, 0.769, 0.627, 0.596, 0.621, 0.800, 0.530, 0.195, 0.508,
                                        0.594)),
        ("Qwen3-VL-8B", "Gen.", (0.419, 0.243, 0.562, 0.425, 0.393, 0.419, 0.395, 0.060, 0.025, 0.160, 0.182)),
        ("EditScore-8B", "Gen.", (0.608, 0.594, 0.690, 0.579, 0.528, 0.570, 0.610, 0.340, 0.100, 0.350, 0.393)),
        ("EditReward", "Disc.", (0.832, None, 0.792, 0.672, 0.590, 0.657, 0.700, 0.490, 0.155, 0.448, 0.490)),
        ("SpatialReward (paper)", "Gen.", (0.683, 0.672, 0.803, 0.671, 0.608, 0.661, 0.780, 0.495, 0.215, 0.483,
                                           0.549)),
    )
}

# SpatialReward paper, Table 2: MER-Bench accuracy by editing category (General, Human-B., Human-F., Overall).
TABLE2 = {
    "Qwen3-VL-8B": (0.187, 0.099, 0.167, 0.160),
    "EditScore-8B": (0.393, 0.333, 0.280, 0.350),
    "EditReward": (0.538, 0.331, 0.387, 0.448),
    "GPT-4.1": (0.468, 0.305, 0.193, 0.358),
    "GPT-5": (0.518, 0.358, 0.300, 0.423),
    "Gemini-2.5-Pro": (0.465, 0.457, 0.460, 0.462),
    "Gemini-3.0-Flash": (0.552, 0.483, 0.447, 0.508),
    "SpatialReward": (0.538, 0.437, 0.453, 0.483),
}

# SpatialReward paper, sec. 5.3, Table 3 ("Online RL Performance on GEdit-Bench-EN and ImgEdit-Bench"): editors
# aligned with different reward models by Flow-GRPO, judged by GPT-4.1 (sec. 5.3, "Baseline Alignment"). Three
# groups, each with its own baseline; Δ is relative to the group's baseline (None: the baseline row's "-").
SPATIALREWARD_TABLE3_COLUMNS = {
    "gedit_sc": "GEdit-EN SC", "gedit_pq": "GEdit-EN PQ", "gedit_ovrl": "GEdit-EN Ovrl.", "gedit_delta": "GEdit-EN Δ",
    "imgedit_ovrl": "ImgEdit Ovrl.", "imgedit_delta": "ImgEdit Δ",
}
SPATIALREWARD_TABLE3 = {
    group: {name: keyed_row(SPATIALREWARD_TABLE3_COLUMNS, values, f"Table 3, {name}") for name, values in rows}
    for group, rows in (
        ("1. Reported Setting in EditScore (OmniGen2)", (
            ("Baseline", (6.72, 7.20, 6.28, None, 3.40, None)),
            ("w/ GPT-4.1", (7.24, 7.40, 6.73, 0.45, 3.66, 0.26)),
            ("w/ EditScore", (7.28, 6.89, 6.89, 0.61, 3.62, 0.22)))),
        ("2. Our Reproduced Setting (OmniGen2)", (
            ("Baseline", (6.88, 7.38, 6.42, None, 3.44, None)),
            ("w/ EditReward", (7.43, 7.89, 7.19, 0.77, 3.63, 0.19)),
            ("w/ Ours", (7.64, 8.01, 7.32, 0.90, 3.72, 0.28)))),
        ("3. Stronger Backbone (UniRef-Edit)", (
            ("Baseline", (7.81, 7.83, 7.46, None, 4.15, None)),
            ("w/ Ours", (8.02, 7.81, 7.56, 0.10, 4.23, 0.08)))),
    )
}


def table3_delta_check() -> dict[tuple[str, str], dict]:
    """Per non-baseline row of :data:`SPATIALREWARD_TABLE3`: each printed Δ against Ovrl. minus the group's baseline
    Ovrl. (``{"gedit": (printed, derived), "imgedit": (...), "agrees": bool}``, to 2 printed decimals)."""
    out = {}
    for group, rows in SPATIALREWARD_TABLE3.items():
        base = rows["Baseline"]
        for name, row in rows.items():
            if name == "Baseline":
                continue
            pairs = {b: (row[f"{b}_delta"], round(row[f"{b}_ovrl"] - base[f"{b}_ovrl"], 2)) for b in ("gedit", "imgedit")}
            out[(group, name)] = {**pairs, "agrees": all(abs(p - d) < 1e-9 for p, d in pairs.values())}
    return out


# Values are printed to 3 decimals: a re-derived mean agrees when it rounds to the printed value (half a unit of
# the last place, plus float slack).
_PRINT_TOLERANCE = 0.0005 + 1e-9


def mer_overall_averaging() -> dict[str, dict]:
    """Per Table 1 row: the plain mean of 2-P / 3-P / 4-P, the printed Ovrl., and whether they agree.

    With MER-Bench's 200 / 200 / 200 groups per size (paper sec. 4.3) the mean over all groups and the mean of the
    three columns are the same number, so "plain mean" is the only averaging the columns support.
    """
    out = {}
    for name, row in TABLE1.items():
        mean = (row["mer_2p"] + row["mer_3p"] + row["mer_4p"]) / 3
        out[name] = {"plain_mean": mean, "printed": row["mer_ovrl"],
                     "averaging": "plain mean" if abs(mean - row["mer_ovrl"]) <= _PRINT_TOLERANCE
                     else "not the plain mean"}
    return out


def mer_category_averaging() -> dict[str, dict]:
    """Per Table 2 row: the 2:1:1-weighted mean of the category columns (MER-Bench's General : Human-B. :
    Human-F. ratio, paper sec. 4.2) against the printed Overall."""
    out = {}
    for name, (general, human_b, human_f, overall) in TABLE2.items():
        weighted = (2 * general + human_b + human_f) / 4
        out[name] = {"weighted_mean": weighted, "printed": overall,
                     "averaging": "2:1:1 weighted mean" if abs(weighted - overall) <= _PRINT_TOLERANCE
                     else "not the 2:1:1 weighted mean"}
    return out
