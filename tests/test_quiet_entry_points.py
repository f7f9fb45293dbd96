"""Our entry points print no third-party noise: bitsandbytes' kernels-community message (pulled in by pyiqa, printed
by every peft / Trainer import on AVX512-BF16 CPUs) and transformers' ``is_gradient_checkpointing`` FutureWarning
(read by peft on every LoRA run).

The bitsandbytes message depends on the CPU, so the fresh-process test makes bitsandbytes believe it runs on an
AVX512-BF16 CPU (its own ``has_avx512bf16_cpu`` answers True) and checks that the real message appears without our
entry points and not with them.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from modeling_miescore.utils.third_party_logs import KNOWN_MESSAGES, quiet_third_party_logs

ROOT = Path(__file__).resolve().parents[1]
BNB_LOGGER = "bitsandbytes.backends.cpu.ops"
BNB_MESSAGE = "Failed to load CPU gemm_4bit_forward from kernels-community"

# bitsandbytes takes its AVX512-BF16 branch (and logs the message when `kernels` is missing) on any CPU
AVX512_BF16 = """
import importlib.abc, importlib.machinery, sys
class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "bitsandbytes.cextension":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        run = spec.loader.exec_module
        def exec_module(module):
            run(module)
            module.lib.has_avx512bf16_cpu = lambda: True
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, _Finder())
"""


class _Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_the_known_bitsandbytes_message_is_dropped_and_nothing_else():
    import modeling_miescore.cli.main  # noqa: F401  (the entry points install the filter; so does main())
    import modeling_miescore.training  # noqa: F401

    logger = logging.getLogger(BNB_LOGGER)
    assert BNB_LOGGER in KNOWN_MESSAGES and len(logger.filters) == 1
    quiet_third_party_logs()
    assert len(logger.filters) == 1  # idempotent
    records = _Records()
    logger.addHandler(records)
    try:
        # the call bitsandbytes makes (backends/cpu/ops.py), then another message of the same logger
        logger.warning(BNB_MESSAGE + ": %s. Please make sure you already `pip install kernels` and the kernels "
                       ">= 0.11.1", ModuleNotFoundError("No module named 'kernels'"))
        logger.warning("some other CPU-backend problem")
    finally:
        logger.removeHandler(records)
    assert records.messages == ["some other CPU-backend problem"]


def test_lora_on_our_models_raises_no_gradient_checkpointing_future_warning(tiny_miescore_path,
                                                                           tiny_spatialreward_path):
    from peft import PeftModel

    from modeling_miescore.hub.modeling_spatialreward import SpatialRewardModel
    from modeling_miescore.training.miescore_model import apply_lora, load_base_model, make_lora_config

    model, _ = load_base_model(str(tiny_miescore_path))
    judge = SpatialRewardModel.from_pretrained(str(tiny_spatialreward_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lora = apply_lora(model, make_lora_config(r=4, alpha=8))  # peft reads model.is_gradient_checkpointing
        assert judge.is_gradient_checkpointing is False
        judge.gradient_checkpointing_enable()
        assert judge.is_gradient_checkpointing is True
    assert isinstance(lora, PeftModel)
    assert not [w for w in caught if "is_gradient_checkpointing" in str(w.message)]


@pytest.mark.slow
def test_a_fresh_process_importing_the_training_entry_points_prints_no_third_party_noise(tiny_miescore_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "trainers")]))

    def run(code: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", AVX512_BF16 + code], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=600)

    bare = run("import peft\n")  # the same import outside our entry points: the real message
    assert bare.returncode == 0 and BNB_MESSAGE in bare.stderr and "pip install kernels" in bare.stderr
    ours = run("import train_miescore, sft_spatialreward, grpo_spatialreward, optimize_skill, flow_grpo_editor\n"
               "import peft\n"
               "from transformers import Trainer\n"
               "from modeling_miescore.training.miescore_model import apply_lora, load_base_model, make_lora_config\n"
               f"model, _ = load_base_model({str(tiny_miescore_path)!r})\n"
               "apply_lora(model, make_lora_config(r=4, alpha=8))\n"
               "print('ready')\n")
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == "ready\n"
    noise = [line for line in ours.stderr.splitlines()  # (the tiny checkpoint's progress bars aside)
             if line.strip() and not line.startswith(("Loading weights", "Writing model shards"))]
    assert noise == [], ours.stderr  # no bitsandbytes message, no FutureWarning, nothing else
