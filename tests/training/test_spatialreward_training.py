"""SpatialReward training data, reward functions and the SFT / GRPO recipes on CPU with the tiny checkpoint."""

from __future__ import annotations

import json
import math
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml
from card_blocks import run_python_blocks
from local_http import LocalHTTPServer
from PIL import Image

from modeling_miescore.hub.spatialreward_parsing import GROUNDING_ISSUES, parse_sc_output
from modeling_miescore.data.spatialreward_chat_examples import (check_row, prepare_grpo_dataset,
                                                                    prepare_sft_dataset, target_text, to_sft_example)
from modeling_miescore.training.spatialreward_grpo_rewards import (OracleConsistencyReward, format_grounding_reward,
                                                                   reference_agreement_reward)
from modeling_miescore.testing.spatialreward_fixture import (BAD_KINDS, make_spatialreward_sft_rows,
                                                          write_spatialreward_dataset)

REPO = Path(__file__).resolve().parents[2]
TRAINERS = REPO / "trainers"


@pytest.fixture(scope="module")
def tiny_sr_path(tmp_path_factory):
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    return build_tiny_spatialreward(tmp_path_factory.mktemp("sr") / "tiny-spatialreward")


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    return write_spatialreward_dataset(tmp_path_factory.mktemp("data") / "fixture", n=12, seed=0)


@pytest.fixture(scope="module")
def rows():
    return make_spatialreward_sft_rows(20, seed=1, num_bad=len(BAD_KINDS))


def _recipe(name):
    sys.path.insert(0, str(TRAINERS))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(TRAINERS))


# ------------------------------------------------------------------------------------------------------------
# Data
# ------------------------------------------------------------------------------------------------------------

def test_interleaving_check_drops_exactly_the_bad_rows(rows):
    bad = {r["id"]: r["expected_drop"] for r in rows if r["expected_drop"]}
    assert sorted(bad.values()) == sorted(BAD_KINDS)  # one row of each broken kind
    for row in rows:
        reason, issues = check_row(row)
        assert reason == row["expected_drop"], (row["id"], issues)
    data, report = prepare_sft_dataset(rows, max_pixels=64 * 64)
    assert (report.total, report.kept, report.dropped) == (20, 15, 5)
    assert report.reasons == {kind: 1 for kind in BAD_KINDS}
    assert sorted(i for ids in report.examples.values() for i in ids) == sorted(bad)
    assert len(data) == 15
    for example in data:  # what is kept has clean grounding
        target = example["messages"][1]["content"][0]["text"]
        n_images = len(example["images"])
        if '"edit_region"' in target:
            parsed = parse_sc_output(target, num_sources=n_images - 1)
            assert parsed.parse_ok and not GROUNDING_ISSUES.intersection(parsed.issues)
        assert all(im.width * im.height <= 64 * 64 for im in example["images"])


def test_check_row_field_problems(rows):
    good = next(r for r in rows if r["task"] == "sc" and len(r["sources"]) == 1 and not r["expected_drop"]
                and r["regions"])
    assert check_row(good) == (None, [])
    cases = {
        "bad_scores": {"scores": [26, 10]},
        "missing_field:instruction": {"instruction": "  "},
        "no_sources": {"sources": []},
        "bad_task": {"task": "vq"},
        "bbox_degenerate": {"regions": [{**good["regions"][0], "bbox_2d": [10, 10, 10, 50]}]},
        "bbox_id_out_of_vocab": {"regions": [{**good["regions"][0], "id": 16}],
                                 "reasoning": good["reasoning"].replace("<|bbox_0|>", "<|bbox_16|>")},
        "token_normalized": {"reasoning": good["reasoning"].replace("<|bbox_0|>", "<| bbox_0 |>")},
    }
    for expected, change in cases.items():
        reason, issues = check_row({**good, **change})
        assert expected in issues, (expected, issues)
        assert reason is not None


def test_unreadable_images_are_dropped_and_jpeg_sources_stay_jpeg(rows):
    import io

    good = next(r for r in rows if r["task"] == "pq" and not r["expected_drop"])
    buffer = io.BytesIO()
    good["edited"].save(buffer, format="JPEG")
    jpeg_row = {**good, "id": "jpeg", "edited": {"bytes": buffer.getvalue(), "path": None}}
    broken = {**good, "id": "broken", "edited": {"bytes": b"not an image", "path": None}}
    data, report = prepare_sft_dataset([jpeg_row, broken])
    assert report.kept == 1 and list(report.examples.values()) == [["broken"]]
    assert next(iter(report.reasons)).startswith("unreadable:")
    from datasets import Image as ImageFeature
    from datasets import List

    stored = data.cast_column("images", List(ImageFeature(decode=False)))[0]["images"][0]["bytes"]
    assert stored[:3] == b"\xff\xd8\xff"  # still a JPEG in the Arrow cache, not a re-encoded PNG


def test_length_estimate_counts_image_tokens_like_the_processor(tiny_sr_path, rows):
    from modeling_miescore.hub.processing_miescore import load_stock_processor
    from modeling_miescore.data.spatialreward_chat_examples import estimate_num_tokens, set_pixel_range

    processor = load_stock_processor(tiny_sr_path)  # Qwen3VLProcessor.from_pretrained would ask about auto_map
    set_pixel_range(processor, 16384, 65536)
    pad = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    empty = {"messages": [{"role": "user", "content": []}], "images": []}
    base = estimate_num_tokens(empty, processor)
    for size in [(64, 64), (300, 120), (1000, 700), (70, 900)]:  # upscaled, kept, downscaled, tall
        image = Image.new("RGB", size)
        ids = processor(text=["<|vision_start|><|image_pad|><|vision_end|>"], images=[image],
                        return_tensors="pt")["input_ids"][0]
        assert estimate_num_tokens({**empty, "images": [image]}, processor) - base == int((ids == pad).sum()) + 2
    # an image the processor would reject (aspect ratio above 200) is a named drop, not a crash halfway
    good = next(r for r in rows if r["task"] == "pq" and not r["expected_drop"])
    thin = {**good, "id": "thin", "edited": Image.new("RGB", (4020, 12))}
    _, report = prepare_sft_dataset([good, thin], max_seq_tokens=100_000, processor=processor)
    assert report.kept == 1 and report.reasons == {"extreme_aspect_ratio": 1}


def test_example_layout_uses_the_d1_prompts(rows):
    from modeling_miescore.hub.configuration_spatialreward import SpatialRewardConfig

    config = SpatialRewardConfig()
    single = next(r for r in rows if r["task"] == "sc" and len(r["sources"]) == 1 and not r["expected_drop"])
    multi = next(r for r in rows if r["task"] == "sc" and len(r["sources"]) == 3 and not r["expected_drop"])
    pq = next(r for r in rows if r["task"] == "pq" and not r["expected_drop"])
    for row, n_images, text in [(single, 2, config.sc_text(single["instruction"], 1)),
                                (multi, 4, config.sc_text(multi["instruction"], 3)), (pq, 1, config.pq_text())]:
        example = to_sft_example(row, config)
        user, assistant = example["messages"]
        assert [p["type"] for p in user["content"]] == ["image"] * n_images + ["text"]
        assert user["content"][-1]["text"] == text and len(example["images"]) == n_images
        assert assistant["content"][0]["text"] == target_text(row)
        assert json.loads(target_text(row))["score"] == [int(s) for s in row["scores"]]
    assert "The first 3 images are the original input images" in config.sc_text(multi["instruction"], 3)


def test_grpo_rows_carry_reward_columns(rows):
    data, report = prepare_grpo_dataset(rows[:6])
    assert report.dropped == 0 and len(data) == 6  # prompts need no target: broken interleavings still usable
    first = data[0]
    assert first["task"] in ("sc", "pq") and first["ref_scores"] == [float(s) for s in rows[0]["scores"]]
    assert len(first["images"]) == (first["num_sources"] + 1 if first["task"] == "sc" else 1)
    assert first["prompt"][0]["role"] == "user" and len(first["prompt"]) == 1


# ------------------------------------------------------------------------------------------------------------
# Rewards
# ------------------------------------------------------------------------------------------------------------

PERFECT = json.dumps({"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [100, 100, 500, 600]}],
                      "reasoning": "<|bbox_0|> A cat is added. <|global|> Background kept.", "score": [20, 15]})


def test_format_and_reference_rewards():
    completions = [
        [{"role": "assistant", "content": PERFECT}],                       # 1.0
        [{"role": "assistant", "content": PERFECT.replace(" <|global|>", "")}],  # one grounding issue
        [{"role": "assistant", "content": "Sure! " + PERFECT}],             # extra text around the JSON
        [{"role": "assistant", "content": '{"reasoning": "<|bbox_0|> x", "score": [20'}],  # no score pair
        [{"role": "assistant", "content": '{"reasoning": "clean", "score": [10, 12]}'}],   # PQ, clean
    ]
    tasks = ["sc", "sc", "sc", "sc", "pq"]
    assert format_grounding_reward(completions=completions, task=tasks, num_sources=[1, 1, 1, 1, 0]) == \
        [1.0, 0.875, 0.75, 0.0, 1.0]
    refs = [[25, 10], [20, 15], None, [20, 15], [10, 12]]
    assert reference_agreement_reward(completions=completions, task=tasks, ref_scores=refs) == \
        pytest.approx([0.8, 1.0, None, 0.0, 1.0])
    # several sources (D.1.2): <|global|> is optional
    assert format_grounding_reward(completions=[completions[1]], task=["sc"], num_sources=[2]) == [1.0]


class _Judge(LocalHTTPServer):
    """Fake OpenAI-compatible judge: 1 when the policy's reasoning says it saw the cat, else 0."""

    def __init__(self):
        self.bodies = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                prompt = body["messages"][0]["content"][-1]["text"]
                key = "consistency_score" if "consistency score" in prompt else "quality_score"
                good = "A cat is added" in prompt or "a cat, natural" in prompt
                answer = json.dumps({"reasoning": "checked", key: 1 if good else 0})
                data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        super().__init__(Handler)


def test_oracle_reward_with_trl_style_arguments():
    from modeling_miescore.judges.oracle import OracleConfig

    image = Image.new("RGB", (48, 32), (10, 120, 200))
    completions = [[{"role": "assistant", "content": PERFECT}],
                   [{"role": "assistant", "content": PERFECT.replace("cat", "dog")}],
                   [{"role": "assistant", "content": "garbage"}],
                   [{"role": "assistant", "content": '{"reasoning": "a cat, natural", "score": [20, 21]}'}]]
    logged = []
    with _Judge() as judge:
        reward = OracleConsistencyReward(OracleConfig(base_url=judge.url, model="judge", max_workers=2,
                                                      api_key_env="MIE_NO_SUCH_KEY", timeout=5.0))
        values = reward(prompts=[[{"role": "user", "content": []}]] * 4, completions=completions,
                        task=["sc", "sc", "sc", "pq"], instruction=["add a cat"] * 3 + [""],
                        images=[[image, image], [image, image], [image, image], [image]], num_sources=[1, 1, 1, 0],
                        log_metric=lambda name, value: logged.append((name, value)), trainer_state=None)
        reward.close()
    assert values == [1.0, 0.0, 0.0, 1.0]
    assert len(judge.bodies) == 3  # the unparsable policy output is not sent
    n_images = sorted(sum(p["type"] == "image_url" for p in b["messages"][0]["content"]) for b in judge.bodies)
    assert n_images == [1, 2, 2]
    assert dict(logged) == {"oracle/ok": 3.0, "oracle/api_error": 0.0, "oracle/judge_unparsable": 0.0,
                            "oracle/policy_unparsable": 1.0}
    assert reward.__name__ == "oracle_consistency" and reward.stats["requests"] == 4


# ------------------------------------------------------------------------------------------------------------
# Assistant-only masking (no training)
# ------------------------------------------------------------------------------------------------------------

def test_assistant_only_loss_supervises_only_the_answer(tiny_sr_path, rows, tmp_path):
    from trl import SFTConfig, SFTTrainer

    from modeling_miescore.training.spatialreward_recipe import load_model_and_processor

    model, processor = load_model_and_processor(str(tiny_sr_path), dtype="float32", min_pixels=16384,
                                                max_pixels=16384)
    data, _ = prepare_sft_dataset(rows[:8], model.config, max_pixels=16384)
    args = SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, max_length=None, assistant_only_loss=True,
                     report_to="none", save_strategy="no", activation_checkpointing=False)
    trainer = SFTTrainer(model=model, args=args, train_dataset=data, processing_class=processor)
    examples = [data[0], data[1]]
    batch = trainer.data_collator(examples)
    tokenizer = processor.tokenizer
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    for row in range(2):
        labels = batch["labels"][row]
        supervised = labels[labels != -100]
        target = examples[row]["messages"][1]["content"][0]["text"]
        assert tokenizer.decode(supervised) == target + "<|im_end|>\n"
        assert image_pad not in supervised.tolist()
        assert (batch["input_ids"][row] == image_pad).sum() > 0  # the images are in the input, not the loss


# ------------------------------------------------------------------------------------------------------------
# Recipes (2 SFT steps, 1 GRPO step on CPU)
# ------------------------------------------------------------------------------------------------------------

@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_sft_recipe_trains_saves_and_reloads(tiny_sr_path, fixture_dir, examples, tmp_path):
    import torch

    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
    from modeling_miescore.hub.spatialreward_tokens import GROUNDING_TOKENS

    sft = _recipe("sft_spatialreward")
    out = tmp_path / "sft"
    args = ["--config", str(TRAINERS / "configs" / "sft_spatialreward_tiny_cpu.yaml"),
            "--model_name_or_path", str(tiny_sr_path), "--dataset_name", str(fixture_dir), "--output_dir", str(out),
            "--base_model_id", "Qwen/Qwen3-VL-8B-Instruct", "--dataset_id", "someone/spatialreward-rows"]
    result = sft.main(*sft.make_parser().parse_args_and_config(args))
    losses = [entry["loss"] for entry in result["trainer"].state.log_history if "loss" in entry]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    report = json.loads((out / "data_report.json").read_text())
    assert report["dropped"] == 3 and report["kept"] == 9  # the fixture's three broken interleavings
    assert (out / "adapter_model.safetensors").exists()

    merged = SpatialRewardModel.from_pretrained(str(out / "merged"))
    base = SpatialRewardModel.from_pretrained(str(tiny_sr_path))
    from transformers import Qwen3VLProcessor

    processor = Qwen3VLProcessor.from_pretrained(str(out / "merged"))
    ids = [processor.tokenizer.convert_tokens_to_ids(t) for t in GROUNDING_TOKENS]
    assert len(set(ids)) == 17 and min(ids) >= 1000  # single, new tokens
    assert merged.get_input_embeddings().num_embeddings == len(processor.tokenizer)
    name = "model.language_model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(merged.state_dict()[name], base.state_dict()[name])  # LoRA delta merged in
    new_rows = merged.get_input_embeddings().weight[ids]
    assert torch.isfinite(new_rows).all()
    assert merged.config.max_pixels == 16384  # inference uses the training resolution
    result = merged.evaluate_edit([Image.new("RGB", (64, 64))], Image.new("RGB", (64, 64)), "add a cat")
    assert result is not None  # the merged checkpoint scores (random weights: the parse may fail, flagged)
    _check_sft_cards(out, tiny_sr_path, examples, tmp_path / "cards")


def _card_meta(folder: Path) -> dict:
    return yaml.safe_load((folder / "README.md").read_text().split("---\n")[1])


def _texts_probe(records) -> str:
    """A python block appended to a card: the generated texts of ``judge`` for ``records``, as one JSON line."""
    return ("\n```python\nimport json\nprint('PROBE', json.dumps([[r.raw_sc, r.raw_pq] for r in "
            f"judge.evaluate_edits(json.loads({json.dumps(records)!r}), batch_size=2)]))\n```\n")


def _example_inputs(examples, work: Path) -> list:
    """Two example edits as files, and the cards' example input names (source_1.png, ...) in ``work``."""
    import shutil

    from modeling_miescore.data.example_edits import save_example_files

    (work / "examples").mkdir(parents=True)
    records = save_example_files(examples[:2], work / "examples")
    for name, src in zip(("source_1.png", "source_2.png", "edited.png"),
                         [*records[0]["sources"][:2], records[0]["edited"]]):
        shutil.copy(src, work / name)
    return records


def _check_sft_cards(out: Path, base: Path, examples, work: Path) -> None:
    """The SFT adapter and merged/ cards: Hub metadata, and every python block runs; the adapter card's recipe
    (base + the 17 added tokens + PeftModel) generates the texts merged/ generates."""
    from modeling_miescore.hub.model_card import ADAPTER_SUFFIX, BASE_PLACEHOLDER, REPO_PLACEHOLDER
    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel

    adapter_meta, merged_meta = _card_meta(out), _card_meta(out / "merged")
    assert adapter_meta["library_name"] == "peft" and merged_meta["library_name"] == "transformers"
    for meta in (adapter_meta, merged_meta):
        assert meta["base_model"] == "Qwen/Qwen3-VL-8B-Instruct" and meta["datasets"] == ["someone/spatialreward-rows"]
        assert meta["pipeline_tag"] == "image-text-to-text" and "spatialreward" in meta["tags"]
    adapter_card = (out / "README.md").read_text()
    assert "[More Information Needed]" not in adapter_card and "resize_token_embeddings(1017)" in adapter_card
    assert json.loads((out / "base_config_overrides.json").read_text()) == {"min_pixels": 16384, "max_pixels": 16384}
    assert (out / "modeling_spatialreward.py").is_file() and (out / "tokenizer.json").is_file()
    records = _example_inputs(examples, work)
    expected = [[r.raw_sc, r.raw_pq] for r in
                SpatialRewardModel.from_pretrained(str(out / "merged")).evaluate_edits(records, batch_size=2)]
    probe = _texts_probe(records)
    proc = run_python_blocks({
        "merged": ((out / "merged" / "README.md").read_text() + probe,
                   {REPO_PLACEHOLDER["spatialreward"]: str(out / "merged")}),
        "adapter": (adapter_card.replace("Qwen/Qwen3-VL-8B-Instruct", BASE_PLACEHOLDER) + probe,
                    {REPO_PLACEHOLDER["spatialreward"] + ADAPTER_SUFFIX: str(out), BASE_PLACEHOLDER: str(base)}),
    }, work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    merged_texts, adapter_texts = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
                                   if line.startswith("PROBE ")]
    assert merged_texts == expected and adapter_texts == expected
    assert len({texts[0][0] for texts in expected}) == 2  # the texts depend on the inputs


@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_grpo_recipe_with_oracle_runs_and_saves(tiny_sr_path, fixture_dir, examples, tmp_path):
    import torch

    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel

    grpo = _recipe("grpo_spatialreward")
    out = tmp_path / "grpo"
    with _Judge() as judge:
        args = ["--config", str(TRAINERS / "configs" / "grpo_spatialreward_tiny_cpu.yaml"),
                "--model_name_or_path", str(tiny_sr_path), "--dataset_name", str(fixture_dir),
                "--output_dir", str(out), "--reward_funcs", "oracle_consistency", "format_grounding",
                "reference_agreement", "--oracle_base_url", judge.url, "--oracle_model", "judge",
                "--oracle_api_key_env", "MIE_NO_SUCH_KEY", "--oracle_timeout", "5"]
        result = grpo.main(*grpo.make_parser().parse_args_and_config(args))
    trainer = result["trainer"]
    logs = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logs and all(math.isfinite(entry["loss"]) for entry in logs)
    assert "rewards/oracle_consistency/mean" in logs[0]
    stats = json.loads((out / "oracle_stats.json").read_text())["stats"]
    # every completion was judged (random tiny outputs carry no scores: counted, not sent, not hidden)
    assert stats["requests"] == 2 and stats["ok"] + stats["policy_unparsable"] + stats["api_error"] == 2
    reloaded = SpatialRewardModel.from_pretrained(str(out))
    trained = trainer.accelerator.unwrap_model(trainer.model).state_dict()
    for name, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, trained[name]), name

    # the output folder's card: no local path in the metadata, the run's settings, and its code runs as written
    from modeling_miescore.hub.model_card import REPO_PLACEHOLDER

    meta, card = _card_meta(out), (out / "README.md").read_text()
    assert meta["library_name"] == "transformers" and "base_model" not in meta and "datasets" not in meta
    for needle in (f"| loss_type | `{trainer.args.loss_type}` |", "| beta | 0.02 |", "| num_generations | 2 |",
                   "oracle_consistency", "@misc{long2026spatialreward", "@misc{miescore"):
        assert needle in card, needle
    assert str(tiny_sr_path) not in card and str(fixture_dir) not in card
    records = _example_inputs(examples, tmp_path / "cards")
    proc = run_python_blocks({"grpo": (card + _texts_probe(records), {REPO_PLACEHOLDER["spatialreward"]: str(out)})},
                             tmp_path / "cards")
    assert proc.returncode == 0, proc.stderr[-3000:]
    texts = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("PROBE ")).split(" ", 1)[1])
    assert texts == [[r.raw_sc, r.raw_pq] for r in reloaded.evaluate_edits(records, batch_size=2)]


def test_sft_refuses_grown_embeddings_that_the_adapter_would_not_carry(tiny_sr_path, fixture_dir, tmp_path):
    sft = _recipe("sft_spatialreward")
    args = ["--config", str(TRAINERS / "configs" / "sft_spatialreward_tiny_cpu.yaml"), "--model_name_or_path",
            str(tiny_sr_path), "--dataset_name", str(fixture_dir), "--output_dir", str(tmp_path / "sft"),
            "--train_grounding_tokens", "false"]
    with pytest.raises(SystemExit, match="train_grounding_tokens: true"):
        sft.main(*sft.make_parser().parse_args_and_config(args))
    assert not (tmp_path / "sft").exists()  # refused before any training or writing


def test_paper_configs_parse_with_table6_values():
    # Every key must be a known argument (TrlParser fails on unknown ones); bf16 is switched off only because
    # this machine has no GPU to validate it on.
    cpu = ["--bf16", "false", "--use_cpu", "true"]
    sft = _recipe("sft_spatialreward")
    script, data, train, model = sft.make_parser().parse_args_and_config(
        ["--config", str(TRAINERS / "configs" / "sft_spatialreward_qwen3vl_8b.yaml"), *cpu])
    assert model.model_name_or_path == "Qwen/Qwen3-VL-8B-Instruct" and model.use_peft
    assert (model.lora_r, model.lora_alpha, train.learning_rate, train.num_train_epochs) == (32, 64, 1e-4, 10)
    assert train.per_device_train_batch_size * train.gradient_accumulation_steps * 8 == 128  # 8 GPUs (Table 6)
    assert data.max_seq_tokens == 8192 and train.max_length is None and train.assistant_only_loss
    grpo = _recipe("grpo_spatialreward")
    script, rl, train, model = grpo.make_parser().parse_args_and_config(
        ["--config", str(TRAINERS / "configs" / "grpo_spatialreward_qwen3vl_8b.yaml"), *cpu])
    assert (train.num_generations, train.learning_rate, train.beta, train.temperature) == (4, 5e-7, 0.02, 0.9)
    assert train.max_completion_length == 1024 and not model.use_peft and rl.reward_funcs == ["oracle_consistency"]


def test_grpo_paper_config_pins_the_objective():
    """Sec. 3.4's objective, not TRL's (DAPO) defaults: sum over tokens / constant, on-policy (so the clip TRL
    always applies never binds), group-normalised advantages, the KL's unbiased gradient."""
    from trl import GRPOConfig

    grpo = _recipe("grpo_spatialreward")
    _, _, train, _ = grpo.make_parser().parse_args_and_config(
        ["--config", str(TRAINERS / "configs" / "grpo_spatialreward_qwen3vl_8b.yaml"), "--bf16", "false",
         "--use_cpu", "true"])
    assert (train.loss_type, train.importance_sampling_level, train.scale_rewards) == ("dr_grpo", "token", "group")
    assert (train.num_iterations, train.epsilon, train.epsilon_high, train.delta) == (1, 0.2, 0.2, None)
    assert (train.beta, train.use_bias_correction_kl, train.mask_truncated_completions) == (0.02, True, False)
    assert (train.top_entropy_quantile, train.entropy_coef) == (1.0, 0.0)
    assert train.multi_objective_aggregation == "sum_then_normalize"
    # on-policy: one generation batch per optimiser step, each completion used once
    assert train.steps_per_generation == train.gradient_accumulation_steps
    defaults = GRPOConfig(output_dir="unused", use_cpu=True, bf16=False)
    assert (defaults.loss_type, defaults.beta) != (train.loss_type, train.beta)  # the pins are not TRL's defaults
