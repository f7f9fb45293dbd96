"""MIEScore fine-tuning recipe: collator, length handling, LR schedule, train -> export -> reload, resume, DDP,
and (slow) evidence that the tiny model learns the fixture's planted faults."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("peft")
pytest.importorskip("datasets")
pytest.importorskip("trl")

from modeling_miescore.training.miescore_data import (  # noqa: E402
    MIEScoreCollator,
    TrainingDataError,
    count_tokens,
    prepare_dataset,
    row_to_sample,
)
from export_cards import check_export_cards  # noqa: E402
from modeling_miescore.training.miescore_model import load_base_model  # noqa: E402
from modeling_miescore.training.miescore_trainer import LOSS_STATE_NAME, compute_correlation_metrics  # noqa: E402

from training_runs import (PAPER_YAML, ROOT, SHORT_SKILL, TINY_YAML, build_dataset, config_args,  # noqa: E402
                           parse, tiny_run_args, train_miescore)


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> Path:
    return build_dataset(tmp_path_factory.mktemp("mie"), n_instances=6)


@pytest.fixture(scope="module")
def small_splits(small_dataset):
    from datasets import load_dataset

    return load_dataset(str(small_dataset))


# --------------------------------------------------------------------------------------------------------
# data: collator and length handling
# --------------------------------------------------------------------------------------------------------
def test_collator_labels_are_mos_over_100_in_head_order(tiny_miescore_path, small_splits):
    model, processor = load_base_model(str(tiny_miescore_path), min_pixels=16384, max_pixels=16384, skill=SHORT_SKILL)
    rows = [small_splits["train"][i] for i in range(3)]
    batch = MIEScoreCollator(processor, model.config)(rows)
    expected = torch.tensor([[r["mos_vq"], r["mos_if"], r["mos_ap"]] for r in rows], dtype=torch.float32) / 100
    assert batch["labels"].shape == (3, 3) and batch["labels"].dtype == torch.float32
    torch.testing.assert_close(batch["labels"], expected)
    assert batch["input_ids"].shape[0] == 3 and batch["image_grid_thw"].shape[0] == sum(r["num_sources"] + 1 for r in rows)
    # the exact count used for length grouping / max_length equals what the collator produces
    lengths = batch["attention_mask"].sum(1).tolist()
    for row, n in zip(rows, lengths):
        assert count_tokens(row_to_sample(row).load(), processor, model.config) == n
    with torch.no_grad():
        scores = model(**{k: v for k, v in batch.items() if k != "labels"}).scores
    assert scores.shape == batch["labels"].shape

    bad = dict(rows[0], mos_if=float("nan"))
    with pytest.raises(TrainingDataError, match="mos_if"):
        MIEScoreCollator(processor, model.config)([bad])
    with pytest.raises(TrainingDataError, match="0-100"):
        MIEScoreCollator(processor, model.config)([dict(rows[0], mos_vq=250.0)])


def test_long_rows_are_shrunk_or_dropped_never_truncated(tiny_miescore_path, small_splits):
    model, processor = load_base_model(str(tiny_miescore_path), min_pixels=16384, max_pixels=65536, skill=SHORT_SKILL)
    train = small_splits["train"].select(range(6))
    full, report = prepare_dataset(train, processor, model.config, max_length=None)
    assert report["shrunk"] == report["dropped"] == 0 and set(full["max_pixels"]) == {0}
    limit = int(max(full["length"])) - 1  # the longest rows are one token too long at the full budget
    n_long = int(sum(n > limit for n in full["length"]))
    assert n_long > 0

    shrunk, rep = prepare_dataset(train, processor, model.config, max_length=limit, long_sequence_policy="shrink")
    assert rep["shrunk"] == n_long and rep["dropped"] == 0 and len(shrunk) == len(train)
    batch = MIEScoreCollator(processor, model.config)([shrunk[i] for i in range(len(shrunk))])
    assert int(batch["attention_mask"].sum(1).max()) <= limit
    # every image keeps all its tokens: the image-token count matches the grids (no truncation inside images)
    image_token = model.config.backbone_config.image_token_id
    merge = processor.image_processor.merge_size
    assert int((batch["input_ids"] == image_token).sum()) == int(batch["image_grid_thw"].prod(1).sum()) // merge**2

    dropped, rep = prepare_dataset(train, processor, model.config, max_length=limit, long_sequence_policy="drop")
    assert rep["dropped"] == n_long and len(dropped) == len(train) - n_long
    with pytest.raises(TrainingDataError, match="max_length"):
        prepare_dataset(train, processor, model.config, max_length=limit, long_sequence_policy="error")


def test_correlation_metrics_per_dimension():
    from transformers import EvalPrediction

    rng = np.random.default_rng(0)
    labels = rng.random((40, 3))
    preds = labels.copy()
    preds[:, 1] = -labels[:, 1]  # IF anti-correlated
    preds[:, 2] = 0.5  # AP constant -> undefined, counted as 0 in the means
    m = compute_correlation_metrics(EvalPrediction(predictions=preds, label_ids=labels))
    assert m["srcc_vq"] == pytest.approx(1.0) and m["plcc_vq"] == pytest.approx(1.0)
    assert m["srcc_if"] == pytest.approx(-1.0)
    assert math.isnan(m["srcc_ap"])
    assert m["mean_corr"] == pytest.approx(0.0)


def test_lora_on_a_plain_qwen3vl_backbone_targets_the_language_model_only(tiny_qwen3vl_path):
    from modeling_miescore.training.miescore_model import apply_lora, make_lora_config

    model, processor = load_base_model(str(tiny_qwen3vl_path), head_hidden_size=16)
    assert type(model).__name__ == "MIEScoreModel" and model.processor is processor
    peft_model = apply_lora(model, make_lora_config())  # paper: r=64, alpha=32, dropout 0
    trainable = [n for n, p in peft_model.named_parameters() if p.requires_grad]
    lora = [n for n in trainable if "lora_" in n]
    projections = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in lora}
    assert projections == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    assert all("language_model" in n for n in lora) and not any("visual" in n for n in trainable)
    head = [n for n in trainable if ".head." in n]
    assert head and set(trainable) == set(lora) | set(head)  # head fully trained, nothing else
    cfg = peft_model.peft_config["default"]
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout) == (64, 32, 0.0)


# --------------------------------------------------------------------------------------------------------
# configuration and schedule
# --------------------------------------------------------------------------------------------------------
def test_paper_config_values_and_command_line_overrides():
    script, model, loss, args = parse(config_args(PAPER_YAML, dataset="some/repo", bf16="false", max_steps=7))
    assert (script.dataset, args.max_steps, args.bf16) == ("some/repo", 7, False)  # CLI beats YAML
    assert model.model_name_or_path == "Qwen/Qwen3-VL-8B-Instruct"
    assert (model.lora_r, model.lora_alpha, model.lora_dropout, model.modules_to_save) == (64, 32, 0.0, ["head"])
    assert (model.max_length, model.max_pixels) == (4096, 1_048_576)
    assert (args.learning_rate, args.weight_decay, args.adam_beta1, args.adam_beta2) == (3e-5, 0.01, 0.9, 0.98)
    assert (args.warmup_steps, args.max_grad_norm, args.num_train_epochs) == (0.08, 0.5, 5)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (1, 16)
    assert args.lr_scheduler_kwargs == {"min_lr_rate": 0.4} and args.metric_for_best_model == "mean_corr"
    assert args.activation_checkpointing and args.load_best_model_at_end
    assert (loss.lambda_huber, loss.lambda_rank, loss.lambda_plcc, loss.final_stage_factor) == (4.0, 0.05, 0.05, 1.5)
    assert (loss.rank_queue_size, loss.plcc_queue_size, loss.rank_label_margin) == (4096, 256, 0.03)


def test_lr_schedule_warms_up_then_ends_at_0_4_lr(tiny_miescore_path):
    from modeling_miescore.training.miescore_trainer import MIEScoreTrainer

    _, _, _, args = parse(config_args(PAPER_YAML, dataset="x", bf16="false", use_cpu="true", output_dir="/tmp/unused",
                                 activation_checkpointing="false", eval_strategy="no", save_strategy="no",
                                 load_best_model_at_end="false"))
    model, _ = load_base_model(str(tiny_miescore_path))
    trainer = MIEScoreTrainer(model=model, args=args)
    total = 100
    trainer.create_optimizer_and_scheduler(num_training_steps=total)
    opt, sched = trainer.optimizer, trainer.lr_scheduler
    assert opt.defaults["betas"] == (0.9, 0.98) and opt.defaults["weight_decay"] == 0.01
    lrs = []
    for _ in range(total):
        lrs.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    lrs.append(sched.get_last_lr()[0])
    warmup = math.ceil(0.08 * total)
    assert lrs[0] == 0.0 and lrs[warmup] == pytest.approx(3e-5)
    assert lrs[-1] == pytest.approx(0.4 * 3e-5, rel=1e-6)
    assert all(a >= b - 1e-15 for a, b in zip(lrs[warmup:], lrs[warmup + 1:]))  # monotone cosine decay
    assert min(lrs[warmup:]) == pytest.approx(0.4 * 3e-5, rel=1e-6)


# --------------------------------------------------------------------------------------------------------
# train -> export -> reload in a fresh process
# --------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # default-suite time (CI: < 10 min on 2 cores); run with -m slow
def test_two_step_run_exports_merged_and_adapter_that_reload_with_remote_code(
        tiny_miescore_path, small_dataset, small_splits, tmp_path):
    out = tmp_path / "run"
    result = train_miescore.main(*parse(tiny_run_args(
        small_dataset, tiny_miescore_path, out, max_steps=2, eval_split="validation", max_eval_samples=6,
        learning_rate=0.01, dataset_id="someone/mie-bench-tiny", min_pixels=16384, max_pixels=16384)))
    merged, adapter = Path(result["exported"]["merged"]), Path(result["exported"]["adapter"])
    assert {"config.json", "model.safetensors", "modeling_miescore.py", "processor_config.json",
            "tokenizer.json", "README.md"} <= set(os.listdir(merged))
    assert {"adapter_config.json", "adapter_model.safetensors", "README.md", "base_config_overrides.json",
            "modeling_miescore.py", "processor_config.json"} <= set(os.listdir(adapter))
    assert json.loads((adapter / "base_config_overrides.json").read_text()) == {
        "max_pixels": 16384, "min_pixels": 16384, "skill": SHORT_SKILL}  # the run's overrides of the base
    assert not list(adapter.glob("optimizer*")) and not list(adapter.glob("loss_state*"))
    config = json.loads((merged / "config.json").read_text())
    assert config["auto_map"]["AutoModel"] == "modeling_miescore.MIEScoreModel" and config["skill"] == SHORT_SKILL
    card = (merged / "README.md").read_text()
    for needle in ("library_name: transformers", "| learning_rate | 0.01 |", "| lora |", "\"r\": 16",
                   "| max_grad_norm | 0.5 |", "lr_scheduler_kwargs", "min_lr_rate", "SRCC"):
        assert needle in card, needle
    import yaml

    meta = yaml.safe_load(card.split("---\n")[1])
    assert "base_model" not in meta and meta["datasets"] == ["someone/mie-bench-tiny"]  # never a local path
    assert {m["type"] for m in meta["model-index"][0]["results"][0]["metrics"]} == set(meta["metrics"])
    # a local base is named only as the run's base_checkpoint setting (issue 27.6: the card's code runs on the
    # machine that trained it), never in the metadata; the local data folder is not named at all
    assert str(tiny_miescore_path) not in card.split("---\n")[1] and str(small_dataset) not in card
    assert [line for line in card.splitlines() if str(tiny_miescore_path) in line] == [
        f"| base_checkpoint | `{tiny_miescore_path}` |"]
    assert {"eval_srcc_vq", "eval_plcc_ap", "eval_mean_corr"} <= set(result["metrics"])

    # The trained weights differ from the starting checkpoint (the run did something) ...
    from safetensors.torch import load_file

    before, after = load_file(tiny_miescore_path / "model.safetensors"), load_file(merged / "model.safetensors")
    assert set(before) == set(after)
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert any(k.startswith("head.") for k in changed) and any("language_model" in k for k in changed)

    # ... and the merged folder scores in a fresh process where the package cannot be imported.
    records = _save_records([small_splits["validation"][i] for i in range(2)], tmp_path / "imgs")
    local, _ = load_base_model(str(merged))
    expected = [local.eval().score(**r) for r in records]
    check_export_cards(merged, adapter, tiny_miescore_path, records, expected, tmp_path / "cards")
    script = textwrap.dedent(f"""
        import importlib.abc, json, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name == "modeling_miescore" or name.startswith("modeling_miescore."):
                    raise ImportError("blocked")
        sys.meta_path.insert(0, Block())
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(merged)!r}, trust_remote_code=True)
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        print(json.dumps([model.score(**r) for r in json.loads({json.dumps(records)!r})]))
    """)
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf_home"), "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reloaded = json.loads(proc.stdout.strip().splitlines()[-1])
    for got, want in zip(reloaded, expected):
        for key in want:
            assert got[key] == pytest.approx(want[key], abs=1e-5)


def _save_records(rows, images: Path) -> list[dict]:
    """Dataset rows as ``{"sources", "edited", "instruction"}`` records of image files."""
    images.mkdir()
    records = []
    for i, row in enumerate(rows):
        srcs = []
        for k, im in enumerate(row["source_images"]):
            im.save(images / f"{i}_s{k}.png")
            srcs.append(str(images / f"{i}_s{k}.png"))
        row["edited_image"].save(images / f"{i}_e.png")
        records.append({"sources": srcs, "edited": str(images / f"{i}_e.png"), "instruction": row["instruction"]})
    return records


# --------------------------------------------------------------------------------------------------------
# resume
# --------------------------------------------------------------------------------------------------------
def _adapter_tensors(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(folder / "adapter_model.safetensors")


def test_resume_matches_an_uninterrupted_run_including_queues(tiny_miescore_path, small_dataset, tmp_path):
    from safetensors.torch import load_file

    common = dict(export="false", max_steps=4, save_strategy="steps", save_steps=2, save_total_limit=5, learning_rate=0.01,
                  final_stage_start=0.75, train_sampling_strategy="random", seed=3)
    straight = tmp_path / "straight"
    train_miescore.main(*parse(tiny_run_args(small_dataset, tiny_miescore_path, straight, **common)))
    ck2, ck4 = straight / "checkpoint-2", straight / "checkpoint-4"
    state2 = load_file(ck2 / LOSS_STATE_NAME)
    assert int(state2["rank_queue.count"]) == 4 and int(state2["final_stage"]) == 0  # 2 steps x batch 2

    # "interrupted" after step 2: a new output folder holding only checkpoint-2; resume with auto-detection
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(ck2, resumed / "checkpoint-2")
    train_miescore.main(*parse(tiny_run_args(small_dataset, tiny_miescore_path, resumed,
                                               resume_from_checkpoint="true", **common)))
    a, b = _adapter_tensors(ck4), _adapter_tensors(resumed / "checkpoint-4")
    assert set(a) == set(b)
    for key in a:
        torch.testing.assert_close(a[key], b[key], atol=1e-5, rtol=1e-4)
    assert any(not torch.equal(a[k], _adapter_tensors(ck2)[k]) for k in a)  # steps 3-4 changed the weights
    la, lb = load_file(ck4 / LOSS_STATE_NAME), load_file(resumed / "checkpoint-4" / LOSS_STATE_NAME)
    assert int(la["final_stage"]) == int(lb["final_stage"]) == 1  # stage switched at progress 0.75 (step 4)
    for key in la:
        torch.testing.assert_close(la[key], lb[key], atol=1e-5, rtol=1e-4)
    log_a = [h["loss"] for h in json.loads((ck4 / "trainer_state.json").read_text())["log_history"] if "loss" in h]
    log_b = [h["loss"] for h in json.loads((resumed / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
             if "loss" in h]
    assert log_a[-2:] == pytest.approx(log_b[-2:], rel=1e-4)

    # the queues matter: resuming without them (empty queues at step 3) gives a different step-3 loss
    blank = tmp_path / "blank"
    blank.mkdir()
    shutil.copytree(ck2, blank / "checkpoint-2")
    (blank / "checkpoint-2" / LOSS_STATE_NAME).unlink()
    train_miescore.main(*parse(tiny_run_args(small_dataset, tiny_miescore_path, blank,
                                               resume_from_checkpoint="true", **common)))
    log_c = [h["loss"] for h in json.loads((blank / "checkpoint-4" / "trainer_state.json").read_text())["log_history"]
             if "loss" in h]
    assert log_c[-2] != pytest.approx(log_a[-2], rel=1e-6)


def test_a_missing_split_is_named_with_the_options(tmp_path, capsys):
    """A small build can leave validation empty (empty splits are not written): the trainer says so in one line,
    before loading the model, instead of a KeyError traceback."""
    from modeling_miescore.data.builders.mie_bench import build_mie_bench
    from modeling_miescore.data.schema import TASKS
    from tiny_mie_raw import tiny_mie_raw

    build_mie_bench(tiny_mie_raw(tmp_path / "raw", {TASKS[0]: 1}), tmp_path / "ds", progress=False)
    with pytest.raises(SystemExit) as info:
        train_miescore.main(*parse(tiny_run_args(tmp_path / "ds", "no-model-is-loaded", tmp_path / "out",
                                                 eval_split="validation")))
    assert str(info.value) == (f"error: the dataset {tmp_path / 'ds'} has no split 'validation' (--eval_split; its "
                               "splits: train); pass --eval_split with one of them, or --eval_split '' to train "
                               "without evaluation")


def test_resume_without_checkpoint_is_a_clear_error(tiny_miescore_path, small_dataset, tmp_path):
    from modeling_miescore.hub.errors import MIEScoreInputError

    with pytest.raises(MIEScoreInputError, match="no checkpoint"):
        train_miescore.main(*parse(tiny_run_args(small_dataset, tiny_miescore_path, tmp_path / "empty",
                                                   resume_from_checkpoint="true", max_steps=1)))


# --------------------------------------------------------------------------------------------------------
# multi-process (slow: two Python processes with the full stack each)
# --------------------------------------------------------------------------------------------------------
def _accelerate_launch(config: str, port: int, run_args: list[str]) -> subprocess.CompletedProcess:
    """``accelerate launch`` of the recipe with a shipped accelerate config, as two CPU processes (gloo)."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(ROOT / "trainers" / "configs" / config),
           "--num_processes", "2", "--mixed_precision", "no", "--main_process_port", str(port),
           str(ROOT / "trainers" / "train_miescore.py"), *run_args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_two_process_ddp_on_cpu(tiny_miescore_path, small_dataset, tmp_path):
    out = tmp_path / "ddp"
    proc = _accelerate_launch("accelerate_ddp.yaml", 29517, tiny_run_args(
        small_dataset, tiny_miescore_path, out, max_steps=2, save_strategy="steps", save_steps=2,
        per_device_train_batch_size=1, dataloader_num_workers=0))
    assert proc.returncode == 0, proc.stderr[-4000:]
    ck = out / "checkpoint-2"
    assert (ck / "loss_state_rank0.safetensors").is_file() and (ck / "loss_state_rank1.safetensors").is_file()
    state = json.loads((ck / "trainer_state.json").read_text())
    assert state["global_step"] == 2 and state["train_batch_size"] == 1
    assert state["epoch"] == pytest.approx(0.5)  # 2 steps x 1 row x 2 processes = half of the 8 rows
    assert (ck / "rng_state_0.pth").is_file() and (ck / "rng_state_1.pth").is_file()  # really two processes
    assert (out / "export" / "merged" / "model.safetensors").is_file()
    assert (out / "export" / "adapter" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_zero_with_accelerate_launch_on_cpu(stage, tiny_miescore_path, small_dataset, tmp_path):
    """The shipped accelerate DeepSpeed configs, two CPU processes (DeepSpeed's CPU accelerator, gloo)."""
    pytest.importorskip("deepspeed")
    from safetensors.torch import load_file

    from modeling_miescore.scoring.loading import load_scorer

    out = tmp_path / f"zero{stage}"
    proc = _accelerate_launch(f"accelerate_deepspeed_zero{stage}.yaml", 29530 + stage, tiny_run_args(
        small_dataset, tiny_miescore_path, out, max_steps=2, save_strategy="steps", save_steps=2,
        per_device_train_batch_size=1, dataloader_num_workers=0))
    assert proc.returncode == 0, proc.stderr[-4000:]
    ck = out / "checkpoint-2"
    shards = "model_states" if stage == 3 else "optim_states"  # ZeRO-3 shards the parameters too
    assert sorted(p.name for p in (ck / "global_step2").glob(f"zero_pp_rank_*_{shards}.pt")) == [
        f"zero_pp_rank_{r}_mp_rank_00_{shards}.pt" for r in (0, 1)]
    assert (ck / "loss_state_rank0.safetensors").is_file() and (ck / "loss_state_rank1.safetensors").is_file()
    adapter = load_file(out / "export" / "adapter" / "adapter_model.safetensors")
    assert adapter and all(t.numel() > 0 for t in adapter.values())  # gathered, not this rank's empty shard
    merged = load_scorer(str(out / "export" / "merged"), device="cpu", dtype="float32")
    base = load_scorer(str(tiny_miescore_path), device="cpu", dtype="float32")
    changed = [n for n, p in merged.named_parameters() if not torch.equal(p, base.state_dict()[n])]
    assert changed and all(p.numel() > 0 for p in merged.parameters())


# --------------------------------------------------------------------------------------------------------
# evidence that it learns (slow)
# --------------------------------------------------------------------------------------------------------
LEARN_INSTANCES = 40
# tiny_cpu.yaml as measured (no per-epoch evaluation, so the final model is the one scored).
LEARN_OVERRIDES = dict(eval_strategy="no", save_strategy="no", load_best_model_at_end="false", disable_tqdm="true")


@pytest.mark.slow
def test_recipe_fits_its_training_rows(tmp_path):
    """The optimisation path works end to end: the tiny_cpu.yaml recipe fits 16 training rows (train SRCC)."""
    from modeling_miescore.testing import build_tiny_miescore

    model_path = build_tiny_miescore(tmp_path / "tiny")
    dataset = build_dataset(tmp_path / "mie", n_instances=LEARN_INSTANCES)
    before = _srcc(model_path, dataset, "train", rows=16)
    result = train_miescore.main(*parse(config_args(
        TINY_YAML, dataset=dataset, model_name_or_path=model_path, output_dir=tmp_path / "run", disable_tqdm="true",
        max_train_samples=16, per_device_train_batch_size=16, max_steps=40, learning_rate=2e-3, eval_split="",
        save_strategy="no",
        eval_strategy="no", load_best_model_at_end="false")))
    after = _srcc(Path(result["exported"]["merged"]), dataset, "train", rows=16)
    print(f"train-row SRCC before {before} after {after}")
    # measured (40 steps): before VQ/IF/AP 0.209/0.647/-0.018 (16 rows: chance can be high), after 0.95/0.75/0.709
    assert all(after[d] >= 0.6 for d in after), (before, after)
    assert np.mean(list(after.values())) >= np.mean(list(before.values())) + 0.3, (before, after)


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    """tiny_cpu.yaml on the 40-instance fixture: held-out (test split) SRCC per dimension, before and after."""
    from modeling_miescore.testing import build_tiny_miescore

    tmp = tmp_path_factory.mktemp("learn")
    model_path = build_tiny_miescore(tmp / "tiny")
    dataset = build_dataset(tmp / "mie", n_instances=LEARN_INSTANCES)
    before = _srcc(model_path, dataset, "test")
    result = train_miescore.main(*parse(config_args(TINY_YAML, dataset=dataset, model_name_or_path=model_path,
                                               output_dir=tmp / "run", **LEARN_OVERRIDES)))
    after = _srcc(Path(result["exported"]["merged"]), dataset, "test")
    print(f"held-out SRCC before {before} after {after}")
    return before, after


# Measured, two runs of the same recipe (CPU float non-determinism makes the tiny model's runs diverge): before
# VQ/IF/AP 0.196/-0.287/0.002; after 0.198/0.346/0.440 and 0.170/0.089/0.358. The bar is a gain of at least 0.25
# SRCC (measured gains: IF 0.63 / 0.38, AP 0.44 / 0.36), AP reaching 0.25 and IF becoming positive.
@pytest.mark.slow
@pytest.mark.parametrize("dim, floor", [("if", 0.0), ("ap", 0.25)])
def test_tiny_model_learns_instruction_following_and_attribute_preservation(learned, dim, floor):
    before, after = learned
    assert after[dim] >= before[dim] + 0.25 and after[dim] > floor, (dim, before, after)


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason=(
    "measured: VQ (blur/JPEG/noise) is not learned by the random 2-layer tiny model in a CPU-sized run "
    "(held-out SRCC 0.196 -> 0.198 / 0.170; 60 and 120 epochs: 0.313, -0.049); benchmarks/diagnose_tiny_vq.py "
    "shows its random vision tower keeps almost none of the VQ signal, which a pretrained tower would provide"))
def test_tiny_model_learns_visual_quality(learned):
    before, after = learned
    assert after["vq"] >= before["vq"] + 0.25 and after["vq"] >= 0.25, (before, after)


def _srcc(model_path: Path, dataset: Path, split: str, rows: int | None = None) -> dict:
    """SRCC per dimension of a checkpoint on (the first ``rows`` of) a split, at tiny_cpu.yaml's prompt/pixels."""
    from datasets import load_dataset
    from scipy.stats import spearmanr

    _, model_args, _, _ = parse(config_args(TINY_YAML))
    model, processor = load_base_model(str(model_path), min_pixels=model_args.min_pixels,
                                       max_pixels=model_args.max_pixels, skill=model_args.skill)
    model.eval()
    data = load_dataset(str(dataset), split=split)
    if rows:
        data = data.select(range(rows))
    collate = MIEScoreCollator(processor, model.config)
    preds, labels = [], []
    with torch.no_grad():
        for start in range(0, len(data), 16):
            batch = collate([data[i] for i in range(start, min(start + 16, len(data)))])
            labels.append(batch.pop("labels").numpy())
            preds.append(model(**batch).scores.numpy())
    p, y = np.concatenate(preds), np.concatenate(labels)
    return {d: round(float(spearmanr(p[:, i], y[:, i])[0]), 3) for i, d in enumerate(("vq", "if", "ap"))}
