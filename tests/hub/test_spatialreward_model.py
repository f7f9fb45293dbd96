"""SpatialReward model: config/prompts, batched inference, reload through trust_remote_code, plain Qwen3-VL
checkpoints, grounding tokens and the `miescore spatialreward` command (tiny random checkpoints, CPU)."""

import json
import math

import pytest
import torch

from modeling_miescore.hub.spatialreward_aggregation import spatial_reward
from modeling_miescore.cli.main import main
from modeling_miescore.hub.configuration_spatialreward import (
    PQ_PROMPT,
    SC_PROMPT_MULTI,
    SC_PROMPT_SINGLE,
    SpatialRewardConfig,
)
from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
from modeling_miescore.hub.spatialreward_parsing import parse_sc_output
from modeling_miescore.data.example_edits import save_example_files
from modeling_miescore.hub.spatialreward_tokens import (
    GROUNDING_TOKENS,
    add_grounding_tokens,
    grounding_token_ids,
    strip_control_tokens,
)

SC_OK = ('{"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [500, 250, 1000, 750]}, '
         '{"id": 1, "label": "cup", "bbox_2d": [0, 0, 100, 200]}], '
         '"reasoning": "<|bbox_0|> The cat sits on the table. <|bbox_1|> The cup is intact. '
         '<|global|> Little else changed.", "score": [20, 15]}')
PQ_OK = '{"reasoning": "Looks natural.", "score": [22, 18]}'


@pytest.fixture(scope="module")
def sr_path(tmp_path_factory):
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    return build_tiny_spatialreward(tmp_path_factory.mktemp("ckpt") / "tiny-spatialreward", max_new_tokens=16)


@pytest.fixture(scope="module")
def sr_model(sr_path):
    return SpatialRewardModel.from_pretrained(sr_path).eval()


@pytest.fixture(scope="module")
def example_files(tmp_path_factory, examples):
    return save_example_files(examples, tmp_path_factory.mktemp("sr-images"))


def _canned(sc_by_prompt=None):
    """A `_generate_texts` replacement: SC prompts get SC_OK (or a per-prompt text), PQ prompts PQ_OK."""
    seen = []

    def fake(prompts, processor):
        seen.append(prompts)
        out = []
        for k, (images, messages) in enumerate(prompts):
            text = messages[0]["content"][-1]["text"]
            is_sc = "Editing instruction:" in text
            out.append([(sc_by_prompt(k, text) if sc_by_prompt else SC_OK) if is_sc else PQ_OK])
        return out

    return fake, seen


# ----------------------------------------------------------------------------------------------- config


def test_config_holds_appendix_d1_prompts_and_paper_defaults():
    config = SpatialRewardConfig()
    assert (config.score_range, config.alpha) == (25, 0.8)
    assert config.sc_weights == {"instruction_following": 0.6, "source_consistency": 0.4}
    assert config.pq_weights == {"naturalness": 0.5, "artifacts": 0.5}
    assert (config.w_sc, config.w_pq) == ((0.6, 0.4), (0.5, 0.5))  # the pairs aggregation takes, by name
    assert config.aggregation_mode == "weighted_geometric" and config.failure_reward == 0.0
    assert config.max_pixels == 589_824 and not config.do_sample and config.num_passes == 1
    single = config.sc_text("Add a hat.", 1)
    multi = config.sc_text("Merge them.", 3)
    pq = config.pq_text()
    # D.1.1: two images, boxes, <|global|>; D.1.2: "The first {num_input_images} images", no <|global|>.
    assert "Two images will be provided" in single and "<|global|> before overall assessment" in single
    assert single.endswith("Editing instruction: Add a hat.")
    assert "The first 3 images are the original input images" in multi and "<|global|>" not in multi
    assert "'score2' evaluates the fusion quality" in multi
    assert "output score = [naturalness, artifacts]" in pq and "bbox" not in pq
    for text in (single, multi, pq):
        assert "{score_range}" not in text and "scale 0 to 25" in text
        assert "&lt;" not in text and "’" not in text  # rendering artefacts of the paper were normalised
    assert "<|bbox_{id}|>" in single and '"bbox_2d": [x1, y1, x2, y2]' in single  # braces stay literal
    assert config.sc_prompt == SC_PROMPT_SINGLE and config.sc_prompt_multi == SC_PROMPT_MULTI
    assert config.pq_prompt == PQ_PROMPT
    again = SpatialRewardConfig.from_dict(config.to_dict())
    assert again.sc_prompt == config.sc_prompt and again.model_type == "spatialreward"
    with pytest.raises(ValueError, match="aggregation_mode"):
        SpatialRewardConfig(aggregation_mode="median")
    with pytest.raises(ValueError, match="sc_weights"):
        SpatialRewardConfig(sc_weights={"instruction_following": -1.0, "source_consistency": 1.0})
    with pytest.raises(ValueError, match=r"missing \['source_consistency'\], unknown \['s_con'\]"):
        SpatialRewardConfig(sc_weights={"instruction_following": 0.6, "s_con": 0.4})
    swapped = SpatialRewardConfig(sc_weights={"source_consistency": 0.6, "instruction_following": 0.4})
    assert swapped.w_sc == (0.4, 0.6)  # keyed by name, not by position (the B.1.3 reading)


# ----------------------------------------------------------------------------------------------- inference


def test_evaluate_edits_on_real_photos(sr_model, examples):
    results = sr_model.evaluate_edits(examples, batch_size=len(examples))
    assert len(results) == len(examples)
    for example, result in zip(examples, results):
        assert result.num_sources == len(example["sources"])
        assert result.image_size == example["edited"].size
        assert len(result.raw_sc) == 1 and len(result.raw_pq) == 1
        assert result.raw_sc[0] and result.raw_pq[0]
        assert "<|im_end|>" not in result.raw_sc[0] and "<|endoftext|>" not in result.raw_sc[0]
        # a random model writes no JSON: flagged, the configured value, never a random number
        assert result.failed and not result.parse_ok and result.reward == sr_model.config.failure_reward
        assert result.failure_reasons == ["sc:parse_failed", "pq:parse_failed"]
        assert "no_json_object" in result.issues["sc"] and "no_json_object" in result.issues["pq"]
        assert (result.s_if, result.s_con, result.s_nat, result.s_art) == (None, None, None, None)
        assert json.loads(json.dumps(result.to_dict()))["reward"] == sr_model.config.failure_reward
    # the generations depend on the images (sharpened tiny weights), so path comparisons below can fail
    assert len({r.raw_sc[0] for r in results}) > 1
    assert len({r.raw_pq[0] for r in results}) > 1


def test_batched_equals_unbatched_under_greedy_decoding(sr_model, examples):
    chosen = examples[1:4]  # 2 and 3 sources, different sizes: real left padding inside the batch
    batched = sr_model.evaluate_edits(chosen, batch_size=len(chosen))
    single = [sr_model.evaluate_edits([example], batch_size=1)[0] for example in chosen]
    assert [r.raw_sc for r in batched] == [r.raw_sc for r in single]
    assert [r.raw_pq for r in batched] == [r.raw_pq for r in single]


def test_checkpoint_generation_config_does_not_change_greedy_texts(sr_model, examples, monkeypatch):
    from transformers import GenerationConfig

    monkeypatch.setattr(sr_model.config, "max_new_tokens", 8)
    reference = [r.raw_sc for r in sr_model.evaluate_edits(examples[:2])]
    # Qwen3-VL releases ship sampling defaults; a repetition penalty would silently change greedy texts
    leaky = GenerationConfig(do_sample=True, top_k=20, top_p=0.8, temperature=0.7, repetition_penalty=1.5)
    monkeypatch.setattr(sr_model, "generation_config", leaky)
    assert [r.raw_sc for r in sr_model.evaluate_edits(examples[:2])] == reference


def test_one_generate_call_runs_sc_and_pq_of_a_batch(sr_model, examples, monkeypatch):
    fake, seen = _canned()
    monkeypatch.setattr(sr_model, "_generate_texts", fake)
    results = sr_model.evaluate_edits(examples[:3], batch_size=3)
    assert len(seen) == 1 and len(seen[0]) == 6  # 2 x B prompts in one call
    sc_prompts, pq_prompts = seen[0][:3], seen[0][3:]
    assert sorted(len(images) for images, _ in sc_prompts) == sorted(len(e["sources"]) + 1 for e in examples[:3])
    assert all(len(images) == 1 for images, _ in pq_prompts)
    for result, example in zip(results, examples[:3]):
        assert not result.failed and result.parse_ok
        assert (result.s_if, result.s_con, result.s_nat, result.s_art) == (20.0, 15.0, 22.0, 18.0)
        assert result.sc == pytest.approx(0.6 * 20 + 0.4 * 15) and result.pq == pytest.approx(20.0)
        assert result.reward == pytest.approx(spatial_reward(20, 15, 22, 18))
        width, height = example["edited"].size
        box = result.regions[0]
        assert box["bbox_2d"] == [500, 250, 1000, 750]
        assert box["bbox_pixels"] == [round(width / 2), round(height / 4), width, round(3 * height / 4)]
        assert result.region_reasoning == {0: "The cat sits on the table.", 1: "The cup is intact."}
        assert result.global_reasoning == "Little else changed."
        assert result.pq_reasoning == "Looks natural."


def test_strange_generations_never_raise_and_map_to_the_failure_value(sr_model, examples, monkeypatch):
    garbage = ["", "score: 3 7", '{"edit_region": [{"id": 0, "bbox_2d": [10, 20, 30, 40]}], "score": [',
               "\x00\ufffd<think>" * 50, "[1, 2, 3, 4]"]

    def fake(prompts, processor):
        return [[garbage[k % len(garbage)]] for k in range(len(prompts))]

    monkeypatch.setattr(sr_model, "_generate_texts", fake)
    monkeypatch.setattr(sr_model.config, "failure_reward", -1.0)
    results = sr_model.evaluate_edits(examples, batch_size=5)
    for result in results:
        assert result.failed and result.reward == -1.0  # never box coordinates, never a random number
        assert result.s_if is None or result.s_if not in (10.0, 20.0)


def test_self_ensemble_averages_the_passes_that_parsed(sr_model, examples, monkeypatch):
    def fake(prompts, processor):
        out = []
        for images, messages in prompts:
            if "Editing instruction:" in messages[0]["content"][-1]["text"]:
                out.append([SC_OK, SC_OK.replace("[20, 15]", "[10, 5]"), "garbage"])
            else:
                out.append([PQ_OK, PQ_OK])
        return out

    monkeypatch.setattr(sr_model, "_generate_texts", fake)
    monkeypatch.setattr(sr_model.config, "num_passes", 3)
    result = sr_model.evaluate_edits(examples[:1])[0]
    assert not result.failed and len(result.raw_sc) == 3
    assert (result.s_if, result.s_con) == (15.0, 10.0)
    assert "no_json_object" in result.issues["sc"]


def test_sampled_self_ensemble_generates_num_passes_texts(sr_model, examples, monkeypatch):
    monkeypatch.setattr(sr_model.config, "num_passes", 2)
    monkeypatch.setattr(sr_model.config, "seed", 0)
    monkeypatch.setattr(sr_model.config, "max_new_tokens", 6)
    first = sr_model.evaluate_edits(examples[:1])[0]
    second = sr_model.evaluate_edits(examples[:1])[0]
    assert len(first.raw_sc) == 2 and len(first.raw_pq) == 2
    assert first.raw_sc == second.raw_sc  # seeded sampling is reproducible


def test_score_candidates_returns_one_reward_per_candidate_in_order(sr_model, examples, monkeypatch):
    scores = {0: "[5, 5]", 1: "[25, 25]", 2: "[15, 10]"}
    fake, _ = _canned(lambda k, text: SC_OK.replace("[20, 15]", scores[k]))
    monkeypatch.setattr(sr_model, "_generate_texts", fake)
    example = examples[0]
    same_size = [example["edited"]] * 3  # same size: sorting keeps the order, so prompt k is candidate k
    rewards, results = sr_model.score_candidates(example["sources"], example["instruction"], same_size,
                                                 return_results=True)
    expected = [spatial_reward(5, 5, 22, 18), spatial_reward(25, 25, 22, 18), spatial_reward(15, 10, 22, 18)]
    assert rewards == pytest.approx(expected) and rewards[1] > rewards[2] > rewards[0]
    assert len(results) == 3


def test_bad_input_is_a_user_error(sr_model, examples):
    from modeling_miescore.hub.errors import MIEScoreInputError

    with pytest.raises(MIEScoreInputError, match="zero source images"):
        sr_model.evaluate_edits([{"sources": [], "edited": examples[0]["edited"], "instruction": "x"}])
    with pytest.raises(MIEScoreInputError, match="does not exist"):
        sr_model.evaluate_edits([{"sources": ["/nope.png"], "edited": examples[0]["edited"], "instruction": "x"}])


# ----------------------------------------------------------------------------------------------- checkpoints


# Saving, and loading through trust_remote_code in a fresh process without the package:
# tests/hub/test_hub_boundary.py.


def test_plain_qwen3vl_checkpoint_loads_as_spatialreward(tiny_qwen3vl_path, examples):
    from transformers import AutoProcessor, Qwen3VLForConditionalGeneration

    from modeling_miescore.hub.modeling_spatialreward import sc_messages
    from modeling_miescore.hub.processing_miescore import image_size_kwargs
    from modeling_miescore.scoring.loading import load_spatialreward
    from modeling_miescore.testing.tiny_spatialreward import sharpen

    model = SpatialRewardModel.from_pretrained(tiny_qwen3vl_path, max_new_tokens=4)
    assert model.config.model_type == "spatialreward"
    assert model.config.alpha == 0.8 and model.config.sc_prompt == SC_PROMPT_SINGLE
    assert model.config.max_new_tokens == 4
    plain = Qwen3VLForConditionalGeneration.from_pretrained(tiny_qwen3vl_path)
    ours, theirs = model.state_dict(), plain.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    # The same weights generate the same SC text as the plain model given the D.1 prompt (sharpened identically,
    # so that the text depends on the input); the processor is found beside the plain weights.
    sharpen(model)
    sharpen(plain)
    sample = examples[0]
    result = model.evaluate_edits([sample])[0]
    processor = AutoProcessor.from_pretrained(tiny_qwen3vl_path)
    prompt = processor.apply_chat_template(sc_messages(model.config, len(sample["sources"]), sample["instruction"]),
                                           tokenize=False, add_generation_prompt=True)
    inputs = processor(text=[prompt], images=[*sample["sources"], sample["edited"]], return_tensors="pt",
                       **image_size_kwargs(model.config))
    generated = plain.generate(**inputs, max_new_tokens=4, do_sample=False)[0, inputs["input_ids"].shape[1]:]
    expected = strip_control_tokens(processor.tokenizer.decode(generated, skip_special_tokens=False))
    assert expected and result.raw_sc == [expected]
    # random weights write no JSON: flagged, with the configured value
    assert result.failed and result.reward == model.config.failure_reward
    assert result.failure_reasons == ["sc:parse_failed", "pq:parse_failed"]
    loaded = load_spatialreward(str(tiny_qwen3vl_path), device="cpu", dtype="float32")
    assert type(loaded) is SpatialRewardModel and not loaded.training


def test_grounding_tokens_become_single_ids_and_parsing_still_works(sr_path, examples):
    from transformers import AutoProcessor

    model = SpatialRewardModel.from_pretrained(sr_path, max_new_tokens=4)
    processor = AutoProcessor.from_pretrained(sr_path)
    tokenizer = processor.tokenizer
    assert grounding_token_ids(tokenizer) is None  # plain text before
    rows = model.get_input_embeddings().num_embeddings
    assert add_grounding_tokens(model, processor) == len(GROUNDING_TOKENS) == 17
    ids = grounding_token_ids(tokenizer)
    assert ids is not None and len(set(ids.values())) == 17
    assert model.get_input_embeddings().num_embeddings == len(tokenizer) == rows + 17
    assert model.get_output_embeddings().weight.shape[0] == len(tokenizer)
    assert add_grounding_tokens(model, processor) == 0  # idempotent
    # decoding keeps them (not special: even skip_special_tokens=True keeps them), control tokens are stripped
    encoded = tokenizer.encode(SC_OK + "<|im_end|><|endoftext|>", add_special_tokens=False)
    assert ids["<|bbox_0|>"] in encoded and ids["<|global|>"] in encoded
    text = strip_control_tokens(tokenizer.decode(encoded, skip_special_tokens=False))
    parsed = parse_sc_output(text)
    assert parsed.parse_ok and parsed.region_reasoning[0] == "The cat sits on the table."
    assert parsed.global_reasoning == "Little else changed."
    # the resized model still generates (new rows are used by the LM head)
    model.processor = processor
    result = model.evaluate_edits(examples[:1])[0]
    assert len(result.raw_sc) == 1 and result.raw_sc[0]
    assert result.failed and result.reward == model.config.failure_reward  # random weights: no JSON
    # registered as special tokens: skip_special_tokens=True would drop them; our decoding keeps them
    fresh = AutoProcessor.from_pretrained(sr_path)
    add_grounding_tokens(SpatialRewardModel.from_pretrained(sr_path), fresh, special=True)
    special_ids = fresh.tokenizer.encode("<|bbox_3|> x <|global|> y", add_special_tokens=False)
    assert "<|bbox_3|>" not in fresh.tokenizer.decode(special_ids, skip_special_tokens=True)
    kept = strip_control_tokens(fresh.tokenizer.decode(special_ids, skip_special_tokens=False))
    assert kept.startswith("<|bbox_3|>") and "<|global|>" in kept


def test_strip_control_tokens_keeps_grounding_and_cuts_after_end_of_turn():
    text = "<|im_start|>{\"a\": \"<|bbox_0|> x <|global|> y\"}<|im_end|>\n<|endoftext|>junk"
    assert strip_control_tokens(text) == '{"a": "<|bbox_0|> x <|global|> y"}'
    assert strip_control_tokens(None) == ""


# ----------------------------------------------------------------------------------------------- CLI


def test_cli_happy_path_json_and_draw(sr_path, example_files, tmp_path, capsys):
    record = example_files[0]
    out = tmp_path / "boxes.png"
    base = ["spatialreward", "--model", str(sr_path), "--edited", record["edited"], "--instruction",
            record["instruction"], "--device", "cpu"]
    for source in record["sources"]:
        base += ["--source", source]
    code = main(base + ["--json", "--draw", str(out), "--dtype", "float32"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result = json.loads(captured.out.strip().splitlines()[-1])
    assert {"reward", "failed", "s_if", "s_con", "s_nat", "s_art", "sc", "pq", "regions", "reasoning",
            "raw_sc", "raw_pq", "issues", "failure_reasons"} <= set(result)
    assert result["num_sources"] == len(record["sources"])
    assert result["reward"] is not None and math.isfinite(result["reward"])
    from PIL import Image

    with Image.open(record["edited"]) as edited, Image.open(out) as drawn:
        assert drawn.size == edited.size
    code = main(base + ["--max-new-tokens", "4"])  # human-readable output
    captured = capsys.readouterr()
    assert code == 0 and "reward" in captured.out and "naturalness" in captured.out


@pytest.mark.parametrize("case", ["missing_image", "no_source", "not_a_checkpoint", "bad_draw"])
def test_cli_bad_input_exits_2_without_traceback(case, sr_path, example_files, tmp_path, capsys):
    record = example_files[0]
    argv = ["spatialreward", "--model", str(sr_path), "--source", record["sources"][0], "--edited",
            record["edited"], "--instruction", "x", "--device", "cpu"]
    if case == "missing_image":
        argv[argv.index("--edited") + 1] = str(tmp_path / "missing.png")
    elif case == "no_source":
        argv = [a for a in argv if a not in ("--source", record["sources"][0])]
    elif case == "not_a_checkpoint":
        argv[argv.index("--model") + 1] = str(tmp_path)
    else:
        argv += ["--draw", str(tmp_path / "boxes.txt")]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1
    assert captured.err.startswith("miescore spatialreward: error:")
