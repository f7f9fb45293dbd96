"""One chat-control-token rule (``modeling_miescore.hub.control_tokens``) behind its three uses: a user's instruction
is refused (``processing_miescore.control_token_problem``), text from an endpoint is refused before it becomes
training data (``utils.text_hygiene.training_text_problem``), and a SpatialReward generation has the tokens removed
(``spatialreward_tokens.strip_control_tokens``). They differ only on SpatialReward's grounding tokens, which are
the format of the text SpatialReward writes and are refused in an instruction."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from modeling_miescore.hub.control_tokens import QWEN_CONTROL_TOKENS, QWEN_FIRST_ADDED_ID, control_tokens_in
from modeling_miescore.hub.processing_miescore import control_token_problem
from modeling_miescore.hub.spatialreward_tokens import strip_control_tokens
from modeling_miescore.utils.text_hygiene import training_text_problem

PACKAGE = Path(__file__).resolve().parents[2] / "modeling_miescore"
OTHER_BACKBONES = ("<image>", "<img>", "</img>", "<IMG_CONTEXT>", "<video>", "<|eot_id|>", "<|begin_of_text|>")


@pytest.mark.parametrize("token", [*QWEN_CONTROL_TOKENS, *OTHER_BACKBONES])
def test_a_control_token_is_refused_in_an_instruction_and_in_training_text_and_stripped_from_a_generation(token):
    text = f"Put the cat {token} on the table."
    assert control_tokens_in(text) == [token]
    assert repr(token) in control_token_problem(text)
    assert repr(token) in training_text_problem(text)
    assert token not in strip_control_tokens(f"The cat sits{token} on the table.")


@pytest.mark.parametrize("token", ["<|bbox_0|>", "<|bbox_15|>", "<|global|>"])
def test_grounding_tokens_are_text_for_spatialreward_and_refused_in_an_instruction(token):
    text = f"The {token} hat is red."
    assert repr(token) in control_token_problem(text)  # a SpatialReward tokenizer reads it as its own token
    assert training_text_problem(text) is None  # the format of SpatialReward's reasoning
    assert strip_control_tokens(text) == text
    assert control_tokens_in(text, grounding_is_text=True) == []


def test_words_in_angle_brackets_are_text():
    for text in ("a <b>bold</b> claim", "if a < b and c > d", "<| spaced |>", "images <1> and <2>"):
        assert control_token_problem(text) is None and training_text_problem(text) is None, text


def test_the_rule_and_the_qwen_vocabulary_are_declared_once():
    """No other module of the package spells a Qwen control token list, a control-token pattern or the first added
    id: they import them from control_tokens (the Hub files through the Hub boundary's rule, ``from .x import``)."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "control_tokens.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value == QWEN_FIRST_ADDED_ID:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {QWEN_FIRST_ADDED_ID}")
            if isinstance(node, (ast.Tuple, ast.List)) and sum(
                    isinstance(e, ast.Constant) and e.value in QWEN_CONTROL_TOKENS for e in node.elts) >= 6:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: the Qwen control tokens spelt out")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and r"<\|[^" in node.value:
                offenders.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: a control-token pattern")
    assert not offenders, offenders
    for hub_file in ("processing_miescore.py", "spatialreward_tokens.py"):
        imports = {n.module for n in ast.walk(ast.parse((PACKAGE / "hub" / hub_file).read_text())) if
                   isinstance(n, ast.ImportFrom) and n.level == 1}
        assert "control_tokens" in imports, hub_file
