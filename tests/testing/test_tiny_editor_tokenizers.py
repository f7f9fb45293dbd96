"""The tiny FLUX.1 Kontext editor's tokenizers are the same in every process (``testing.tiny_editors``).

``tokenizers``' trainers iterate hash maps seeded per process (not by ``PYTHONHASHSEED``): before the fix the CLIP
tokenizer's word-final tokens took other ids in each process, so the tiny Kontext editor's rewards differed between
runs of the same command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BUILD = """
import hashlib, json
from modeling_miescore.testing.tiny_editors import tiny_clip_tokenizer, tiny_t5_tokenizer
prompt = "Make the sky red and put the zebra from image 2 on the table!"
out = {}
for name, tokenizer in (("clip", tiny_clip_tokenizer()), ("t5", tiny_t5_tokenizer())):
    out[name] = {"file": hashlib.sha256(tokenizer.backend_tokenizer.to_str().encode()).hexdigest(),
                 "ids": tokenizer(prompt).input_ids, "size": len(tokenizer)}
print(json.dumps(out))
"""


def _build_in_a_process(hash_seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "true",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", BUILD], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_tiny_kontext_tokenizers_are_the_same_in_two_processes():
    first, second = _build_in_a_process("1"), _build_in_a_process("2")
    assert first == second
    assert first["clip"]["ids"][0] != first["clip"]["ids"][1]  # a real encoding, not one repeated id
    assert len(set(first["t5"]["ids"])) > 5
