"""The score heads, iterated over :data:`~modeling_miescore.hub.miescore_score_heads.SCORE_HEADS`: each head a tiny
scorer is built with answers what the package asks it (output layer, dtype, prefix reuse, training inputs, its
initialisation from the backbone), trains through its declared inputs, and ``miescore doctor`` finds a zeroed
output layer. A new head is covered here without editing this file."""

from __future__ import annotations

import pytest
import torch
from edit_groups import instance_edits

from modeling_miescore.hub.miescore_score_heads import SCORE_HEADS
from modeling_miescore.hub.processing_miescore import as_edit_sample, load_samples, prepare_inputs


@pytest.fixture(scope="module")
def scorers(tiny_checkpoints):
    from modeling_miescore.scoring.loading import load_scorer

    return {name: load_scorer(str(tiny_checkpoints("miescore", "qwen3_vl", score_head=name)), device="cpu",
                              dtype="float32") for name in SCORE_HEADS}


@pytest.mark.parametrize("name", list(SCORE_HEADS))
def test_each_head_answers_what_the_package_asks(scorers, name):
    model = scorers[name]
    head = model.head
    assert type(head) is SCORE_HEADS[name] and head.name == name == model.config.score_head
    assert any(m is head.output_layer for m in head.modules()) and head.dtype == head.output_layer.weight.dtype
    assert model.prefix_reuse_available == (head.prefix_reuse_unavailable is None)  # Qwen3-VL, sources first
    if head.prefix_reuse_unavailable:
        assert model.prefix_reuse_unavailable_reason() == head.prefix_reuse_unavailable
    if not head.new_weights:  # read from the backbone: one row of its output layer per digit (the copy is checked
        # below; lm_digits: the language model's rows of the digit tokens; tests/training/test_training_ablations.py: export)
        assert head.output_layer.weight.shape[0] == model.config.lm_score_max + 1


@pytest.mark.parametrize("name", list(SCORE_HEADS))
def test_each_head_initialises_from_the_backbone_as_declared(scorers, name):
    """``new_weights``: every linear layer gets the model's random initialisation, nothing is copied; otherwise
    the output layer is rows of the backbone's output layer, bit for bit, and nothing is initialised at random."""
    config = scorers[name].config
    text = config.backbone_config.get_text_config()
    head = SCORE_HEADS[name].from_config(config, text.hidden_size)
    lm_output = torch.nn.Linear(text.hidden_size, text.vocab_size, bias=False)
    with torch.no_grad():  # row i holds i + 1 everywhere: a copied row says which one it is
        lm_output.weight.copy_(torch.arange(1, text.vocab_size + 1, dtype=torch.float32)[:, None])
        for p in head.parameters():
            p.zero_()
    initialised = []
    head.init_from_backbone(lm_output, config, initialised.append)
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    rows = head.output_layer.weight.detach()
    if head.new_weights:
        assert len(initialised) == len(linears) and all(any(m is i for i in initialised) for m in linears)
        assert not bool(rows.any())  # nothing copied from the backbone (init_linear here records only)
    else:
        assert initialised == []
        ids = rows[:, 0].long() - 1
        assert bool((ids >= 0).all()) and len(set(ids.tolist())) == len(ids)
        assert torch.equal(rows, lm_output.weight.detach()[ids])


@pytest.mark.parametrize("name", list(SCORE_HEADS))
def test_each_head_trains_on_its_declared_inputs(scorers, examples, name):
    model = scorers[name]
    loaded = load_samples([as_edit_sample(s) for s in instance_edits(examples)[:2]])
    batch = dict(prepare_inputs(model.get_processor(), loaded, model.config))
    labels = torch.tensor([[0.2, 0.5, 0.9], [0.8, 0.4, 0.1]])
    batch.update(SCORE_HEADS[name].training_inputs(labels, model.config))
    model.train()
    model.backbone.requires_grad_(False)  # only the head's gradients are looked at
    try:
        out = model(**batch)
        loss = torch.nn.functional.mse_loss(out.scores.float(), labels)
        loss.backward()
    finally:
        model.eval()
        model.backbone.requires_grad_(True)
        grads = {n: p.grad for n, p in model.named_parameters() if n.startswith("head.")}
        model.zero_grad(set_to_none=True)
    assert out.scores.shape == (2, 3) and bool(torch.isfinite(out.scores).all())
    assert all(g is not None and bool(g.abs().sum() > 0) for g in grads.values()), sorted(grads)


@pytest.mark.parametrize("name", list(SCORE_HEADS))
def test_doctor_finds_a_zeroed_output_layer_of_each_head(scorers, name):
    from types import SimpleNamespace

    from modeling_miescore.diagnostics.doctor import check_weights

    model = scorers[name]
    ctx = SimpleNamespace(model=model, kind="miescore", need=lambda *_: None)
    assert check_weights(ctx).status == "ok"
    weight = model.head.output_layer.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.zero_()
    try:
        finding = check_weights(ctx)
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    assert finding.status == "error" and f"the {name} head's output layer (head." in finding.message
