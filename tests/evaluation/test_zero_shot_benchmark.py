"""``miescore benchmark zero-shot`` / ``reward`` on converted fixtures: each benchmark's protocol on hand-made
predictions with known answers (ties included), the published tables (and the re-derivation of Table 1's MER-Bench
Ovrl.), and end-to-end runs from predictions files and from the tiny MIEScore checkpoint (single-source prompt)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from modeling_miescore.cli.main import main
from modeling_miescore.data.converters import get_converter
from modeling_miescore.evaluation.published_results import (
    TABLE1,
    TABLE6,
    mer_category_averaging,
    mer_overall_averaging,
)
from modeling_miescore.testing import raw_benchmarks as rb


def converted(tmp_path, name, make, **kwargs):
    raw = tmp_path / f"{name}-raw"
    make(raw, **kwargs)
    out = tmp_path / name
    get_converter(name)(raw, out, progress=False).build()
    return out


def write_predictions(path, scores: dict[str, dict]):
    path.write_text("".join(json.dumps({"id": i, **s}) + "\n" for i, s in scores.items()))
    return path


def same(value: float) -> dict:
    return {"instruction_following": value, "attribute_preservation": value, "overall": value}


@pytest.fixture(scope="module")
def benchmarks(tmp_path_factory):
    base = tmp_path_factory.mktemp("converted")
    return {"genai-bench": converted(base, "genai-bench", rb.make_raw_genai_bench, n_votes=8),
            "editscore-bench": converted(base, "editscore-bench", rb.make_raw_editscore_bench, n_pairs=9),
            "ieqa": converted(base, "ieqa", rb.make_raw_ieqa, n_edits=5),
            "mmrb2": converted(base, "mmrb2", rb.make_raw_mmrb2, n_pairs=6)}


@pytest.fixture(scope="module")
def predictions(benchmarks, tmp_path_factory):
    base = tmp_path_factory.mktemp("predictions")
    # GenAI-Bench, votes a, b, tie, both_bad, a, b, tie, both_bad. Tie-calibrated: human ties sit at |d| = 0.5, 0,
    # 40, 1; right-sign non-ties at 20, 10, 20; pair 2 has the wrong sign. epsilon = 1 gets ties 0, 0.5, 1 and the
    # non-ties at 10 and 20 (x2): 6 of 8 = 75 %; no other epsilon does better.
    left_right = [(60, 40), (70, 30), (50, 50.5), (20, 20), (55, 45), (40, 60), (30, 70), (51, 50)]
    genai = {}
    for i, (left, right) in enumerate(left_right, start=1):
        genai[f"test_v1-{i:05d}-left"] = {"overall": left}
        genai[f"test_v1-{i:05d}-right"] = {"overall": right}
    # EditScore's bench, 9 pairs: dimension i % 3 (PF, Cons., Ovrl.), task i % 2 (color_alter, subject-add).
    # PF: pairs 0 (color, right), 3 (subject, right), 6 (color, wrong) -> color 0.5, subject 1 -> macro 0.75.
    # Cons.: pairs 1, 4, 7 all right -> 1. Ovrl.: pair 2 (color) a tie (wrong), 5 and 8 right -> 0.75.
    wrong, tie = {6}, {2}
    editscore = {}
    for i in range(9):
        first = 40.0 if i in wrong else 50.0 if i in tie else 70.0
        editscore[f"k{i:03d}a"], editscore[f"k{i:03d}b"] = same(first), same(50.0)
    # IEQA: VQ follows the MOS, IF is reversed, AP has the same tie pattern as the MOS -> SRCC 1, -1, 1.
    ieqa = {f"edited/editor-{i % 2}/ieqa-{i}.jpg": {"visual_quality": float(i), "instruction_following": float(i),
                                                     "attribute_preservation": float(i % 2)} for i in range(5)}
    # MMRB2, labels a b a b a b, subsets single single multi single single multi: pair 1 is a predicted tie
    # (wrong), pair 4 wrong -> single 2/4, multi 2/2, overall 4/6.
    ab = [(0.9, 0.1), (0.5, 0.5), (0.8, 0.2), (0.3, 0.7), (0.2, 0.6), (0.1, 0.9)]
    mmrb2 = {}
    import datasets

    mmrb2_ids = datasets.load_dataset(str(benchmarks["mmrb2"]), "pairwise", split="test")["id"]
    for pair_id, (a, b) in zip(mmrb2_ids, ab):
        mmrb2[f"{pair_id}_A"], mmrb2[f"{pair_id}_B"] = {"overall": a}, {"overall": b}
    return {name: write_predictions(base / f"{name}.jsonl", scores)
            for name, scores in (("genai-bench", genai), ("editscore-bench", editscore), ("ieqa", ieqa),
                                 ("mmrb2", mmrb2))}


def test_published_table1_mer_overall_is_the_plain_mean_in_7_of_8_rows():
    rows = mer_overall_averaging()
    plain = [name for name, row in rows.items() if row["averaging"] == "plain mean"]
    assert len(rows) == 8 and len(plain) == 7
    assert set(rows) - set(plain) == {"SpatialReward (paper)"}
    assert rows["SpatialReward (paper)"]["printed"] == 0.483
    assert rows["SpatialReward (paper)"]["plain_mean"] == pytest.approx((0.780 + 0.495 + 0.215) / 3)
    assert rows["GPT-4.1"]["plain_mean"] == pytest.approx(0.3583, abs=1e-4)
    # Table 2's Overall: the 2:1:1 (General : Human-B. : Human-F.) weighted mean, again except SpatialReward's row.
    categories = mer_category_averaging()
    assert [n for n, r in categories.items() if r["averaging"] != "2:1:1 weighted mean"] == ["SpatialReward"]
    assert TABLE1["EditReward"]["editreward_cons"] is None and TABLE6["EditHF"]["ieqa"] is None


def test_zero_shot_report_from_predictions_files(benchmarks, predictions, tmp_path, capsys):
    names = ("genai-bench", "editscore-bench", "ieqa")
    args = [a for n in names for a in ("--dataset", str(benchmarks[n]), "--predictions", str(predictions[n]))]
    assert main(["benchmark", "zero-shot", *args, "--out", str(tmp_path / "r"), "--row-name", "hand-made"]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    results = report["results"]
    assert results["genai-bench"]["value"] == pytest.approx(75.0)
    assert results["genai-bench"]["details"]["epsilon"] == pytest.approx(1.0)
    assert results["genai-bench"]["details"]["n_human_ties"] == 4
    by_dim = results["editscore-bench"]["details"]["by_dimension"]
    assert by_dim["prompt_following"]["accuracy"] == pytest.approx(0.75)  # macro; micro would be 2/3
    assert by_dim["prompt_following"]["by_task"] == {"color_alter": 0.5, "subject-add": 1.0}
    assert by_dim["consistency"]["accuracy"] == 1.0 and by_dim["overall"]["accuracy"] == pytest.approx(0.75)
    assert results["editscore-bench"]["value"] == pytest.approx(100 * 2.5 / 3)
    srcc = {k: v["srcc"] for k, v in results["ieqa"]["details"]["by_dimension"].items()}
    assert srcc == pytest.approx({"visual_quality": 1.0, "editing_alignment": -1.0, "attribute_preservation": 1.0})
    assert results["ieqa"]["value"] == pytest.approx(1 / 3)
    markdown = (tmp_path / "r" / "report.md").read_text()
    protocol = report["protocol"]  # the predictions' hashes are the judgements these numbers come from
    assert protocol["judge"]["predictions_sha256"] == [hashlib.sha256(predictions[n].read_bytes()).hexdigest()
                                                       for n in names]
    assert [d["keys"] for d in protocol["dataset"]] == [r["n_rows"] for r in results.values()]
    assert markdown.index(protocol["fingerprint"]) < markdown.index("| Methods/Benchmarks")
    assert "| Methods/Benchmarks | GenAI-Bench (Acc., %) | AROURA-Bench (Acc., %) |" in markdown
    assert "| MIEScore (paper) | 76.22 | 70.28 | 76.15 | 0.5508 | 0.5024 | 0.4153 | 0.5047 |" in markdown
    assert "| **hand-made (this run)** | **75.00** | — | **83.33** | — | — | — | **0.3333** |" in markdown
    assert "GenAI-Bench" in capsys.readouterr().out
    assert "(pairwise config, 8 rows evaluated; release split test_v1)" in markdown  # which split was converted


def test_reward_report_editreward_mmrb2_and_mer_bench(benchmarks, predictions, tmp_path):
    from modeling_miescore.data.builders.mer_bench import build_mer_bench
    from modeling_miescore.data.dataset_splits import load_split

    rb.make_raw_mer_bench(tmp_path / "mer-raw", n_samples=24, seed=0, image_size=48)
    build_mer_bench(tmp_path / "mer-raw", tmp_path / "mer", groups_per_type=6, progress=False)
    lines, sizes = [], {}
    for split, k in (("2pair", 2), ("3pair", 3), ("4pair", 4)):
        ids = load_split(str(tmp_path / "mer"), split)["pair_id"]
        sizes[k] = len(ids)
        order = np.arange(k, 0, -1.0) if k < 4 else np.ones(k)  # 4-pair groups: every candidate tied
        lines += [json.dumps({"pair_id": p, "scores": order.tolist()}) for p in ids]
    (tmp_path / "mer.jsonl").write_text("\n".join(lines) + "\n")
    args = ["--dataset", str(benchmarks["editscore-bench"]), "--predictions", str(predictions["editscore-bench"]),
            "--dataset", str(benchmarks["mmrb2"]), "--predictions", str(predictions["mmrb2"]),
            "--dataset", str(tmp_path / "mer"), "--predictions", str(tmp_path / "mer.jsonl")]
    assert main(["benchmark", "reward", *args, "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    values = {k: v for r in report["results"].values() for k, v in r["values"].items()}
    assert len(report["protocol"]["fingerprint"]) == 64 and report["protocol"]["aggregation"]["bootstrap"]["n"] == 0
    assert values["editreward_pf"] == pytest.approx(0.75) and values["editreward_cons"] == 1.0
    assert (values["mmrb2_single"], values["mmrb2_multi"]) == (0.5, 1.0)
    assert values["mmrb2_ovrl"] == pytest.approx(4 / 6)
    assert (values["mer_2p"], values["mer_3p"], values["mer_4p"]) == (1.0, 1.0, 0.0)
    assert values["mer_ovrl"] == pytest.approx((sizes[2] + sizes[3]) / sum(sizes.values()))
    # τ: the Table 1 column under the authors' rule (a predicted tie +1: the tied 4-pair groups count 1), the ties-0
    # value beside it (they count 0)
    assert values["mer_tau"] == pytest.approx(1.0)
    assert values["mer_tau_ties0"] == pytest.approx((sizes[2] + sizes[3]) / sum(sizes.values()))
    markdown = (tmp_path / "r" / "report.md").read_text()
    assert "| MER-Bench Ovrl. | MER-Bench τ (tie +1, as released) | τ (tie 0) |" in markdown
    assert "| 0.780 | 0.495 | 0.215 | 0.483 | 0.549 | — |" in markdown  # published rows: no tie-0 value
    assert f"| **1.000** | **{values['mer_tau_ties0']:.3f}** |" in markdown
    assert "| SpatialReward (paper) | Gen. | 0.683 | 0.672 | 0.803 | 0.671 | 0.608 | 0.661 |" in markdown
    assert "not: SpatialReward (paper) (printed 0.483, plain mean 0.497)" in markdown


@pytest.mark.parametrize("case, message", [
    ("table1-in-zero-shot", "is mmrb2, not a Table 6 benchmark"),
    ("count-mismatch", "2 --dataset but 1 --predictions"),
    ("missing-key", "has no attribute_preservation, instruction_following scores"),
    ("table6-in-reward", "is ieqa, not a Table 1 benchmark (editscore-bench, mmrb2, mer-bench); use 'miescore "
                         "benchmark zero-shot' for it"),
])
def test_user_errors_exit_2(benchmarks, predictions, tmp_path, capsys, case, message):
    command = "reward" if case == "table6-in-reward" else "zero-shot"
    if case == "table6-in-reward":
        args = ["--dataset", str(benchmarks["ieqa"]), "--predictions", str(predictions["ieqa"])]
    elif case == "table1-in-zero-shot":
        args = ["--dataset", str(benchmarks["mmrb2"]), "--predictions", str(predictions["mmrb2"])]
    elif case == "count-mismatch":
        args = ["--dataset", str(benchmarks["ieqa"]), "--dataset", str(benchmarks["genai-bench"]),
                "--predictions", str(predictions["ieqa"])]
    else:
        args = ["--dataset", str(benchmarks["editscore-bench"]), "--predictions", str(predictions["genai-bench"])]
    assert main(["benchmark", command, *args, "--out", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err


def test_single_source_prompt_variant_is_used_for_one_source_only(tiny_miescore, examples):
    import copy

    from modeling_miescore.hub.processing_miescore import build_messages

    model = tiny_miescore
    edit = examples[0]
    single = {"sources": edit["sources"][:1], "edited": edit["edited"], "instruction": edit["instruction"]}
    multi = {"sources": edit["sources"][:2], "edited": edit["edited"], "instruction": edit["instruction"]}
    variant = model.score_batch([single, multi], batch_size=2)
    original = model.config
    try:  # the same checkpoint without the variant: one-source samples get the multi-source prompt
        model.config = copy.deepcopy(original)
        model.config.single_source_prompt_template = ""
        plain = model.score_batch([single, multi], batch_size=2)
    finally:
        model.config = original
    assert variant[0]["overall"] != pytest.approx(plain[0]["overall"], abs=1e-6)
    assert variant[1] == pytest.approx(plain[1], abs=1e-4)
    messages, roles = build_messages(1, "x", model.config)
    text = "".join(part.get("text", "") for part in messages[0]["content"])
    assert "single source image" in text and "Source image:" in text and "Source image 1" not in text
    assert roles == ["source:0", "edited"]
    messages, _ = build_messages(2, "x", model.config)
    text = "".join(part.get("text", "") for part in messages[0]["content"])
    assert "single source image" not in text and "Source image 1:" in text and "Source image 2:" in text


def test_zero_shot_with_the_tiny_miescore_checkpoint(benchmarks, tiny_miescore_path, tiny_miescore, tmp_path):
    from modeling_miescore.data.dataset_splits import load_split
    from modeling_miescore.evaluation.metrics.correlation import srcc
    out = tmp_path / "r"
    assert main(["benchmark", "zero-shot", "--dataset", str(benchmarks["ieqa"]), "--model", str(tiny_miescore_path),
                 "--out", str(out), "--device", "cpu", "--dtype", "float32", "--no-progress"]) == 0
    lines = [json.loads(line) for line in (out / "ieqa" / "predictions.jsonl").read_text().splitlines()]
    assert [line["id"] for line in lines] == [f"edited/editor-{i % 2}/ieqa-{i}.jpg" for i in range(5)]
    ds = load_split(str(benchmarks["ieqa"]), "test", "pointwise")
    samples = [{"sources": row["source_images"], "edited": row["edited_image"], "instruction": row["instruction"]}
               for row in ds]
    expected = tiny_miescore.score_batch(samples, batch_size=8)
    for line, scores in zip(lines, expected):
        assert line["overall"] == pytest.approx(scores["overall"], abs=1e-3)
    report = json.loads((out / "report.json").read_text())["results"]["ieqa"]
    vq = report["details"]["by_dimension"]["visual_quality"]["srcc"]
    assert vq == pytest.approx(srcc([s["visual_quality"] for s in expected], ds["human_visual_quality"]), abs=1e-6)
    # a rerun finds every edit scored and does not load the model again
    assert main(["benchmark", "zero-shot", "--dataset", str(benchmarks["ieqa"]), "--model", str(tiny_miescore_path),
                 "--out", str(out), "--device", "cpu", "--no-progress"]) == 0


class RecordingMIEScore:
    """Stands in for a MIEScore model: scores from the instruction length, and records the prompt it was asked for."""

    def __init__(self):
        from modeling_miescore.hub.configuration_miescore import MIEScoreConfig

        self.config = MIEScoreConfig()
        self.prompts: list[tuple[int, str]] = []

    def score_batch(self, samples, batch_size=8, **kwargs):
        from modeling_miescore.hub.processing_miescore import as_edit_sample, build_messages

        samples = [as_edit_sample(s) for s in samples]
        for s in samples:
            messages, _ = build_messages(len(s.sources), s.instruction, self.config)
            text = "".join(part.get("text", "") for part in messages[0]["content"])
            self.prompts.append((len(s.sources), "single source image" in text))
        return [{"visual_quality": 1.0, "instruction_following": 2.0, "attribute_preservation": 3.0,
                 "overall": float(len(s.instruction))} for s in samples]


def test_scoring_mer_bench_with_miescore_uses_the_single_source_prompt(tmp_path):
    from modeling_miescore.data.builders.mer_bench import build_mer_bench
    from modeling_miescore.evaluation.converted_benchmarks import load_benchmark
    from modeling_miescore.evaluation.converted_scoring import needs_scoring, score_converted

    rb.make_raw_mer_bench(tmp_path / "raw", n_samples=8, seed=1, image_size=32)
    build_mer_bench(tmp_path / "raw", tmp_path / "mer", groups_per_type=2, progress=False)
    data = load_benchmark(str(tmp_path / "mer"))
    model = RecordingMIEScore()
    path = score_converted(data, model, tmp_path / "out", batch_size=4, progress=False)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    groups = {str(p): len(imgs) for ds in data.frames.values() for p, imgs in zip(ds["pair_id"], ds["edited_images"])}
    assert {line["pair_id"]: len(line["scores"]) for line in lines} == groups
    instructions = {str(p): i for ds in data.frames.values() for p, i in zip(ds["pair_id"], ds["instruction"])}
    assert all(line["scores"] == [len(instructions[line["pair_id"]]) / 100] * groups[line["pair_id"]]
               for line in lines)  # reward = overall / 100
    assert set(model.prompts) == {(1, True)}  # MER-Bench edits have one source: the single-source prompt
    assert not needs_scoring(data, tmp_path / "out")


def test_spatialreward_results_map_onto_the_score_keys(benchmarks, tmp_path):
    from types import SimpleNamespace

    from modeling_miescore.evaluation.converted_benchmarks import load_benchmark
    from modeling_miescore.evaluation.converted_scoring import score_converted

    class FakeJudge:
        def evaluate_edits(self, samples, batch_size=8):
            return [SimpleNamespace(failed=i == 1, pq=5.0, s_if=20.0, s_con=10.0, reward=0.7)
                    for i, _ in enumerate(samples)]

    path = score_converted(load_benchmark(str(benchmarks["mmrb2"])), FakeJudge(), tmp_path, batch_size=2,
                           progress=False)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 12 and len({line["id"] for line in lines}) == 12  # every edited image once
    assert lines[0] == {"id": lines[0]["id"], "visual_quality": 5.0, "instruction_following": 20.0,
                        "attribute_preservation": 10.0, "overall": 0.7}
    assert lines[1]["overall"] is None and lines[1]["visual_quality"] is None  # a failed parse is no score
