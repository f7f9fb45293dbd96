"""`miescore baselines`: Table 3 metrics per edit, in the predictions format the benchmark reads.

The weight-free metrics (SSIM, MS-SSIM) are checked against independent computations on real photos
(scikit-image's SSIM map, and MS-SSIM written out with scipy), averaged over the sources as the paper's
protocol says. Metrics that need weights are checked twice: with the caches empty (one line naming each file
and its folder, nothing written) and with small random weights put where their library reads them (CNNIQA in
pyiqa's cache, a tiny CLIP in the Hugging Face cache), against the library (or transformers) called directly.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from scipy import ndimage, stats

pytest.importorskip("pyiqa")
pytest.importorskip("torchmetrics")
skimage_metrics = pytest.importorskip("skimage.metrics")

from modeling_miescore.baselines import BASELINES, UnsafeWeightsError, WeightsMissingError, compute_baselines
from modeling_miescore.baselines.scorers import RESAMPLE
from modeling_miescore.cli.main import main
from modeling_miescore.data.example_edits import example_edits

DIMS = ("visual_quality", "instruction_following", "attribute_preservation", "overall")
MOS = {"visual_quality": "mos_vq", "instruction_following": "mos_if", "attribute_preservation": "mos_ap",
       "overall": "mos_overall"}
CLIP_REPO = "openai/clip-vit-base-patch32"


# ---------------------------------------------------------------------------------------------------------
# independent reference computations
# ---------------------------------------------------------------------------------------------------------


def luma(image: Image.Image) -> np.ndarray:
    """8-bit luma (Y of YIQ, the channel MATLAB-style SSIM works on), float64."""
    rgb = np.asarray(image, dtype=np.float64) / 255.0
    return np.round(rgb @ np.array([0.299, 0.587, 0.114]) * 255.0)


def ssim_reference(x: np.ndarray, y: np.ndarray) -> float:
    """scikit-image's Gaussian SSIM map over the valid region, with negative values clipped to 0.

    The luminance term of SSIM is positive, so clipping the map equals clipping its contrast-structure term.
    """
    _, ssim_map = skimage_metrics.structural_similarity(x, y, gaussian_weights=True, sigma=1.5, data_range=255,
                                                        use_sample_covariance=False, full=True)
    return float(np.maximum(ssim_map[5:-5, 5:-5], 0).mean())


def _gaussian_window() -> np.ndarray:
    grid = np.arange(11) - 5.0
    g = np.exp(-grid ** 2 / (2 * 1.5 ** 2))
    window = np.outer(g, g)
    return window / window.sum()


def _ssim_terms(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(mean SSIM, mean contrast-structure) over the valid region, contrast-structure clipped at 0."""
    c1, c2 = (0.01 * 255) ** 2, (0.03 * 255) ** 2
    window = _gaussian_window()

    def valid(a):
        return ndimage.correlate(a, window, mode="constant")[5:-5, 5:-5]

    mx, my = valid(x), valid(y)
    sxx, syy, sxy = valid(x * x) - mx ** 2, valid(y * y) - my ** 2, valid(x * y) - mx * my
    cs = np.maximum((2 * sxy + c2) / (sxx + syy + c2), 0)
    lum = (2 * mx * my + c1) / (mx ** 2 + my ** 2 + c1)
    return float((lum * cs).mean()), float(cs.mean())


def _halve(a: np.ndarray) -> np.ndarray:
    """2x2 mean pooling; an odd side gets a zero row/column in front (and the zeros count in the mean)."""
    ph, pw = a.shape[0] % 2, a.shape[1] % 2
    a = np.pad(a, ((ph, ph), (pw, pw)))
    h, w = a.shape[0] // 2, a.shape[1] // 2
    return a[: 2 * h, : 2 * w].reshape(h, 2, w, 2).mean(axis=(1, 3))


def ms_ssim_reference(x: np.ndarray, y: np.ndarray) -> float:
    """MS-SSIM (Wang, Simoncelli and Bovik 2003), product form over 5 scales."""
    weights = [0.0448, 0.2856, 0.3001, 0.2363, 0.1333]
    value = 1.0
    for level, weight in enumerate(weights):
        ssim, cs = _ssim_terms(x, y)
        value *= (ssim if level == len(weights) - 1 else cs) ** weight
        x, y = _halve(x), _halve(y)
    return value


def averaged_over_sources(reference, edited: Image.Image, sources: list[Image.Image]) -> float:
    """The paper's protocol: each source against the edited image at the edited image's size, then the mean."""
    target = luma(edited)
    return float(np.mean([reference(target, luma(s.resize(edited.size, RESAMPLE))) for s in sources]))


# ---------------------------------------------------------------------------------------------------------
# helpers and fixtures
# ---------------------------------------------------------------------------------------------------------


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def mie_dir(tmp_path_factory):
    from modeling_miescore.data.builders.mie_bench import build_mie_bench
    from modeling_miescore.testing.raw_benchmarks import make_raw_mie_bench

    base = tmp_path_factory.mktemp("mie")
    make_raw_mie_bench(base / "raw", n_instances=6, n_models=3, seed=5, image_size=64)
    build_mie_bench(base / "raw", base / "ds", progress=False)
    return base / "ds"


@pytest.fixture
def caches(tmp_path, monkeypatch):
    """Empty weights caches: torch hub (torchvision), pyiqa's folder and the Hugging Face cache."""
    import huggingface_hub.constants
    from pyiqa.utils import download_util

    folders = {"torch": tmp_path / "torch-home", "pyiqa": tmp_path / "torch-home" / "hub" / "pyiqa",
               "hf": tmp_path / "hf-cache"}
    for folder in folders.values():
        folder.mkdir(parents=True)
    monkeypatch.setenv("TORCH_HOME", str(folders["torch"]))
    monkeypatch.setattr(download_util, "DEFAULT_CACHE_DIR", str(folders["pyiqa"]))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(folders["hf"]))
    return folders


# ---------------------------------------------------------------------------------------------------------
# weight-free metrics against independent computations
# ---------------------------------------------------------------------------------------------------------


def test_ssim_is_skimage_ssim_averaged_over_resized_sources(tmp_path):
    edits = example_edits(max_side=128)
    assert any(s.size != e["edited"].size for e in edits for s in e["sources"])  # the resizing is exercised
    report = compute_baselines(edits, "ssim", tmp_path / "ssim.jsonl", device="cpu", progress=False)
    assert report.written == {"ssim": len(edits)} and not report.errors

    lines = read_lines(tmp_path / "ssim.jsonl")
    assert [line["id"] for line in lines] == [e["id"] for e in edits]
    for line, edit in zip(lines, edits):
        assert line["metric"] == "ssim" and set(line) == {"id", "metric", *DIMS}
        assert len({line[d] for d in DIMS}) == 1  # one metric value for every dimension
        expected = averaged_over_sources(ssim_reference, edit["edited"], edit["sources"])
        assert line["overall"] == pytest.approx(expected, abs=2e-5)
    by_id = {line["id"]: line["overall"] for line in lines}
    assert by_id["cat-coffee"] != pytest.approx(by_id["cat-coffee-failed"], abs=1e-3)


def test_ms_ssim_matches_an_independent_multiscale_computation(tmp_path):
    edits = [e for e in example_edits(max_side=256) if e["id"] == "cat-astronaut-coffee"]  # 3 sizes of source
    edited, source = luma(edits[0]["edited"]), luma(edits[0]["sources"][0])
    assert _ssim_terms(edited, source)[0] == pytest.approx(ssim_reference(edited, source), abs=1e-9)

    compute_baselines(edits, ["ms_ssim"], tmp_path / "ms.jsonl", device="cpu", progress=False)
    for line, edit in zip(read_lines(tmp_path / "ms.jsonl"), edits):
        expected = averaged_over_sources(ms_ssim_reference, edit["edited"], edit["sources"])
        assert line["id"] == edit["id"] and line["visual_quality"] == pytest.approx(expected, abs=2e-5)


def test_a_bad_edit_is_reported_and_computed_on_the_rerun(tmp_path):
    edits = example_edits(max_side=64)[:3]
    broken = [dict(edits[0], edited=b"not an image"), *edits[1:]]
    out = tmp_path / "ssim.jsonl"
    logged = []
    report = compute_baselines(broken, "ssim", out, device="cpu", progress=False, log=logged.append)
    assert [(e.id, e.metric) for e in report.errors] == [(edits[0]["id"], "ssim")]
    assert any(edits[0]["id"] in message for message in logged)
    assert [line["id"] for line in read_lines(out)] == [e["id"] for e in edits[1:]]

    report = compute_baselines(edits, "ssim", out, device="cpu", progress=False)
    assert report.written == {"ssim": 1} and report.skipped_existing == {"ssim": 2} and not report.errors
    assert sorted(line["id"] for line in read_lines(out)) == sorted(e["id"] for e in edits)

    too_small = compute_baselines(edits, "ms_ssim", tmp_path / "ms.jsonl", device="cpu", progress=False,
                                  log=lambda m: None)
    assert len(too_small.errors) == 3 and "at least 161 px" in too_small.errors[0].message
    assert not (tmp_path / "ms.jsonl").read_text()


# ---------------------------------------------------------------------------------------------------------
# MIE-Bench from the command line: resume, read back, benchmark
# ---------------------------------------------------------------------------------------------------------


def test_cli_on_mie_bench_resumes_and_feeds_the_benchmark(mie_dir, tmp_path, capsys):
    import datasets

    from modeling_miescore.evaluation.prediction_files import read_score_predictions

    out = tmp_path / "preds-{metric}.jsonl"
    argv = ["baselines", "--dataset", str(mie_dir), "--split", "train", "--metrics", "ssim", "--out", str(out),
            "--device", "cpu", "--no-progress"]
    code, stdout, stderr = run(argv, capsys)
    assert code == 0, stderr
    path = tmp_path / "preds-ssim.jsonl"
    ds = datasets.load_dataset(str(mie_dir), split="train")
    assert f"ssim: wrote {len(ds)} edits" in stderr and stdout == ""

    lines = {line["id"]: line for line in read_lines(path)}
    assert list(lines) == list(ds["id"])
    for row in ds.select(range(4)):
        expected = averaged_over_sources(ssim_reference, row["edited_image"].convert("RGB"),
                                         [s.convert("RGB") for s in row["source_images"]])
        assert lines[row["id"]]["overall"] == pytest.approx(expected, abs=2e-5)

    preds = read_score_predictions(path)
    assert list(preds.columns[:4]) == list(DIMS) and not preds.attrs["overall_computed"]

    # a second run writes nothing; a run killed mid-line resumes to the same file
    complete = path.read_bytes()
    code, _, stderr = run(argv, capsys)
    assert code == 0 and f"wrote 0 edits, skipped {len(ds)}" in stderr and path.read_bytes() == complete
    text = complete.decode().splitlines(keepends=True)
    path.write_text("".join(text[:5]) + text[5][:30])
    code, _, stderr = run(argv, capsys)
    assert code == 0 and f"wrote {len(ds) - 5} edits, skipped 5" in stderr
    assert path.read_bytes() == complete

    # the predictions go through `miescore benchmark mie-bench` as they are
    report_dir = tmp_path / "report"
    code, _, stderr = run(["benchmark", "mie-bench", "--dataset", str(mie_dir), "--split", "train", "--predictions",
                           str(path), "--out", str(report_dir), "--bootstrap", "0", "--no-plots", "--no-progress"],
                          capsys)
    assert code == 0, stderr
    report = json.loads((report_dir / "report.json").read_text())
    mos = ds.select_columns(["id", *MOS.values()]).to_pandas().set_index("id")
    values = [lines[i]["overall"] for i in mos.index]
    for d in DIMS:
        assert report["correlations"][d]["srcc"]["value"] == pytest.approx(
            stats.spearmanr(values, mos[MOS[d]]).statistic, abs=1e-9)


@pytest.mark.parametrize("args, message", [
    (["--metrics", "psnr"], "unknown metric 'psnr'; choose from"),
    (["--metrics", "hpsv2"], "cannot run here: its package (hpsv2 1.2.0) pins"),
    (["--metrics", "ssim,ms_ssim", "--out", "preds.jsonl"], "put {metric} in the output path"),
    (["--split", "nope"], "cannot load split 'nope'"),
    (["--dataset", None], "missing --dataset"),
    (["--device", "tpu9"], "unknown device 'tpu9'"),
])
def test_cli_user_errors_are_one_line(mie_dir, tmp_path, capsys, args, message):
    options = {"--dataset": str(mie_dir), "--split": "train", "--metrics": "ssim", "--out": str(tmp_path / "p.jsonl")}
    for flag, value in zip(args[::2], args[1::2]):
        options[flag] = value
    argv = ["baselines", "--no-progress"] + [x for flag, v in options.items() if v is not None for x in (flag, v)]
    code, _, stderr = run(argv, capsys)
    assert code == 2 and message in stderr and len(stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.jsonl"))


def test_output_of_another_evaluator_or_in_use_is_refused(tmp_path):
    from modeling_miescore.utils.output_lock import OutputBusyError, exclusive_output

    edits = example_edits(max_side=64)[:1]
    other = tmp_path / "preds.jsonl"
    other.write_text(json.dumps({"id": "cat-coffee", **{d: 50.0 for d in DIMS}}) + "\n")
    before = other.read_bytes()
    with pytest.raises(Exception, match="holds predictions of another evaluator, not of ssim"):
        compute_baselines(edits, "ssim", other, device="cpu", progress=False)
    assert other.read_bytes() == before

    busy = tmp_path / "busy.jsonl"
    with exclusive_output(busy, "--out"), pytest.raises(OutputBusyError, match="being written by another run"):
        compute_baselines(edits, "ssim", busy, device="cpu", progress=False)


def test_list_names_every_table_3_row(capsys):
    code, stdout, _ = run(["baselines", "--list"], capsys)
    assert code == 0
    for baseline in BASELINES.values():
        row = next(line for line in stdout.splitlines() if line.startswith(baseline.name + " "))
        assert baseline.status in row and baseline.paper_row in row
    assert {b.status for b in BASELINES.values()} == {"runnable here", "runnable with weights", "out of scope",
                                                      "runs via another command"}
    how = stdout.split("How each row runs here:")[1].splitlines()
    assert len([line for line in how if line.strip()]) == len(BASELINES) == 28  # every Table 3 row but MIEScore's
    cnniqa = next(line for line in how if line.startswith("  cnniqa:"))
    assert "miescore baselines --metrics cnniqa" in cnniqa and "released weights zero-shot" in cnniqa
    editscore = next(line for line in how if line.startswith("  editscore:"))
    assert "--evaluator modeling_miescore.baselines.editscore_adapter:editscore" in editscore
    assert "runs via miescore judge" in next(line for line in how if line.startswith("  chatgpt_5:"))


# ---------------------------------------------------------------------------------------------------------
# metrics that need weights
# ---------------------------------------------------------------------------------------------------------


def test_missing_weights_fail_before_anything_runs_with_one_line(caches, tmp_path, capsys, mie_dir):
    argv = ["baselines", "--dataset", str(mie_dir), "--split", "train", "--metrics", "ssim,lpips,clipscore",
            "--out", str(tmp_path / "p-{metric}.jsonl"), "--no-progress"]
    code, _, stderr = run(argv, capsys)
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    for expected in (f"'LPIPS_v0.1_alex-df73285e.pth' in '{caches['pyiqa']}'",
                     f"'alexnet-owt-7be5be79.pth' in '{caches['torch'] / 'hub' / 'checkpoints'}'",
                     f"models--openai--clip-vit-base-patch32' (from 'hf download {CLIP_REPO}'",
                     "TORCH_HOME moves the folder", "HF_HOME moves the folder"):
        assert expected in stderr
    assert not list(tmp_path.glob("p-*.jsonl"))  # not even the weight-free metric started


@pytest.mark.parametrize("name", [b.name for b in BASELINES.values() if b.needs_weights and not b.unavailable])
def test_every_metric_with_weights_names_its_files(caches, name):
    from modeling_miescore.baselines.registry import locate

    with pytest.raises(WeightsMissingError) as err:
        compute_baselines([], name, caches["torch"] / "p.jsonl", device="cpu", progress=False)
    message = str(err.value)
    assert "\n" not in message and f"metric '{name}' needs" in message
    for requirement in BASELINES[name].weights:
        where = locate(requirement)
        assert where.path.name in message and str(where.path.parent) in message


def _random_cnniqa_weights(path: Path, extra=None) -> None:
    import torch
    from pyiqa.archs.cnniqa_arch import CNNIQA

    torch.manual_seed(0)
    checkpoint = {"params": CNNIQA(pretrained=None).state_dict()}
    if extra is not None:
        checkpoint["extra"] = extra
    torch.save(checkpoint, path)


def test_no_reference_metric_reads_its_weights_from_the_pyiqa_cache(caches, tmp_path):
    import pyiqa
    import torch
    from torchvision.transforms.functional import to_tensor

    weights = caches["pyiqa"] / "CNNIQA_koniq10k-e6f14c91.pth"
    _random_cnniqa_weights(weights)
    edits = example_edits(max_side=96)
    compute_baselines(edits, "cnniqa", tmp_path / "cnniqa.jsonl", device="cpu", progress=False)

    direct = pyiqa.create_metric("cnniqa", device="cpu", pretrained_model_path=str(weights))
    lines = read_lines(tmp_path / "cnniqa.jsonl")
    with torch.inference_mode():
        expected = [float(direct(to_tensor(e["edited"]).unsqueeze(0))) for e in edits]
    assert [line["overall"] for line in lines] == pytest.approx(expected, abs=1e-6)
    assert len({round(v, 6) for v in expected}) > 1  # the edited images, not one constant


class _NotATensor:
    """Anything a weights-only unpickler must refuse."""


def test_a_checkpoint_that_is_more_than_tensors_is_refused(caches, tmp_path):
    path = caches["pyiqa"] / "CNNIQA_koniq10k-e6f14c91.pth"
    _random_cnniqa_weights(path, extra=_NotATensor())
    with pytest.raises(UnsafeWeightsError, match="refusing to load .*CNNIQA_koniq10k-e6f14c91.pth") as err:
        compute_baselines(example_edits(max_side=64)[:1], "cnniqa", tmp_path / "p.jsonl", progress=False)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "p.jsonl").exists()
    with pytest.raises(pickle.UnpicklingError):  # what the refusal is about
        import torch

        torch.load(path, weights_only=True)


def _tiny_clip_in_hub_cache(hf_cache: Path, texts: list[str]) -> Path:
    """A random 2-layer CLIP whose vocabulary holds the words of ``texts`` (so that they stay well under CLIP's
    77 tokens), laid out as a cached Hub snapshot of CLIP_REPO."""
    import re

    import torch
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPProcessor, CLIPTokenizer

    commit = "0" * 40
    repo = hf_cache / ("models--" + CLIP_REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    vocab = {"<|startoftext|>": 0, "<|endoftext|>": 1}
    for char in "abcdefghijklmnopqrstuvwxyz0123456789.,":
        vocab.update({char: len(vocab), char + "</w>": len(vocab) + 1})
    merges = []  # BPE merges that build each word left to right, so that every word is one token
    for word in dict.fromkeys(re.findall(r"[a-z]+", " ".join(texts).lower())):
        pieces = [*word[:-1], word[-1] + "</w>"]
        while len(pieces) > 1:
            merges.append(f"{pieces[0]} {pieces[1]}")
            pieces = [pieces[0] + pieces[1], *pieces[2:]]
            vocab.setdefault(pieces[0], len(vocab))
    (snapshot / "vocab.json").write_text(json.dumps(vocab))
    (snapshot / "merges.txt").write_text("#version: 0.2\n" + "\n".join(dict.fromkeys(merges)) + "\n")
    tokenizer = CLIPTokenizer(str(snapshot / "vocab.json"), str(snapshot / "merges.txt"))
    tower = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "projection_dim": 16}
    config = CLIPConfig(text_config=dict(tower, vocab_size=len(vocab), max_position_embeddings=77, bos_token_id=0,
                                         eos_token_id=1, pad_token_id=1),
                        vision_config=dict(tower, image_size=32, patch_size=8), projection_dim=16)
    torch.manual_seed(3)
    CLIPModel(config).save_pretrained(snapshot)
    images = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32})
    CLIPProcessor(image_processor=images, tokenizer=tokenizer).save_pretrained(snapshot)
    return snapshot


def test_clipscore_compares_the_instruction_with_the_edited_image(caches, tmp_path):
    import torch
    from transformers import CLIPModel, CLIPProcessor

    edits = example_edits(max_side=64)
    snapshot = _tiny_clip_in_hub_cache(caches["hf"], ["A photo depicts"] + [e["instruction"] for e in edits])
    compute_baselines(edits, "clipscore", tmp_path / "clip.jsonl", device="cpu", progress=False)

    model = CLIPModel.from_pretrained(snapshot).eval()
    processor = CLIPProcessor.from_pretrained(snapshot)
    expected = []
    with torch.inference_mode():
        for edit in edits:
            inputs = processor(text=["A photo depicts " + edit["instruction"]], images=[edit["edited"]],
                               return_tensors="pt", padding=True)
            image = model.get_image_features(pixel_values=inputs["pixel_values"]).pooler_output
            text = model.get_text_features(input_ids=inputs["input_ids"],
                                           attention_mask=inputs["attention_mask"]).pooler_output
            cosine = torch.nn.functional.cosine_similarity(image, text).item()
            expected.append(max(100 * cosine, 0.0))
    assert any(v > 0 for v in expected)  # the tiny model agrees with some captions, so the values carry information
    assert [line["overall"] for line in read_lines(tmp_path / "clip.jsonl")] == pytest.approx(expected, abs=1e-4)
