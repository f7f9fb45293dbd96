"""The batched scoring loop shared by both models and the SpatialReward API backend.

``MIEScoreModel.score_batch``, ``SpatialRewardModel.evaluate_edits`` and the API backends score a list of edits
the same way; only the call that scores one batch differs. Images are decoded chunk by chunk (bounded memory); in
each chunk the edits that share sources and instruction are scored as groups (one shared prompt prefix each), the
rest sorted by estimated length so that a batch holds similar lengths.

Hub file: copied into every saved checkpoint. It imports only the standard library, tqdm (a hard dependency of
transformers) and its flat siblings.
"""

from __future__ import annotations

import contextlib
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Sequence, Tuple

from tqdm.auto import tqdm

from .errors import MIEScoreInputError
from .image_io import DEFAULT_MAX_IMAGE_PIXELS
from .prefix_reuse import find_groups
from .processing_miescore import DEFAULT_MAX_SAMPLE_PIXELS, EditSample, as_edit_sample, load_samples

# How many samples' images are decoded at once, in batches: bounds memory while leaving room to group and sort.
CHUNK_BATCHES = 16


@dataclass
class PrefixGrouping:
    """How edits that share sources and instruction are scored together (prefix reuse): ``open(first_member)``
    gives the handle (e.g. a shared prompt prefix) every ``score`` call of the group gets, ``close(handle)`` follows
    its last call. ``share=False``: groups are only found (explicit ids still checked), every sample runs alone;
    ``batch_size`` None: a whole group in one call."""

    share: bool = True
    batch_size: Optional[int] = None
    open: Callable[[EditSample], Any] = lambda first: True
    close: Optional[Callable[[Any], None]] = None


def checked_batch_size(batch_size) -> int:
    """``batch_size`` as an int >= 1; anything else (1.5, "8", True, 0) is a ``MIEScoreInputError`` (a
    ``ValueError``), never silently rounded."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral) or int(batch_size) < 1:
        raise MIEScoreInputError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    return int(batch_size)


def normalise_samples(samples: Sequence, group_ids: Optional[Sequence] = None) -> List[EditSample]:
    """Every sample as an :class:`EditSample` (``MIEScoreInputError`` naming the bad one); group ids counted."""
    normalised = [as_edit_sample(s, where=f"sample {i}") for i, s in enumerate(samples)]
    if group_ids is not None and len(group_ids) != len(normalised):
        raise ValueError(f"got {len(group_ids)} group ids for {len(normalised)} samples")
    return normalised


def _batches(indices: Sequence[int], size: int) -> Iterator[List[int]]:
    for start in range(0, len(indices), size):
        yield list(indices[start:start + size])


def plan_chunk(loaded: Sequence[EditSample], batch_size: int, length: Optional[Callable[[EditSample], float]],
               grouping: Optional[PrefixGrouping], group_ids: Optional[Sequence]) -> List[Tuple[List[int], Any]]:
    """The ``score`` calls of one chunk, ``(indices into loaded, group members or None)``, in running order:
    shared groups first, then the other samples sorted by ``length`` (stable)."""
    def by_length(indices):
        return sorted(indices, key=lambda i: length(loaded[i])) if length is not None else list(indices)

    calls: List[Tuple[List[int], Any]] = []
    singles = list(range(len(loaded)))
    if grouping is not None:
        groups = find_groups(loaded, group_ids)  # validates explicit ids even when nothing is shared
        if grouping.share:
            singles = [g[0] for g in groups if len(g) == 1]
            for members in (g for g in groups if len(g) > 1):
                if grouping.batch_size is None:
                    calls.append((list(members), members))
                else:
                    calls += [(idx, members) for idx in _batches(by_length(members), grouping.batch_size)]
    calls += [(idx, None) for idx in _batches(by_length(singles), batch_size)]
    return calls


def score_in_batches(
    samples: Sequence,
    score: Callable[[List[EditSample], Any], Sequence],
    *,
    batch_size: int,
    max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS,
    max_sample_pixels: int = DEFAULT_MAX_SAMPLE_PIXELS,
    target_pixels: Optional[int] = None,
    chunk_size: Optional[int] = None,
    length: Optional[Callable[[EditSample], float]] = None,
    group_ids: Optional[Sequence] = None,
    grouping: Optional[PrefixGrouping] = None,
    progress: bool = False,
    desc: str = "scoring",
) -> list:
    """Score many edits in batches; one result per sample, in input order.

    ``score(loaded_samples, handle)`` returns one result per sample (``handle``: None, or the group's from
    ``grouping.open``). ``target_pixels`` None decodes at full size (needed when results refer to pixel positions).
    ``ValueError`` for a bad ``batch_size`` or group ids; ``MIEScoreInputError`` for unusable samples.
    """
    batch_size = checked_batch_size(batch_size)
    normalised = normalise_samples(samples, group_ids)
    chunk_size = int(chunk_size or batch_size * CHUNK_BATCHES)
    results: list = [None] * len(normalised)
    with tqdm(total=len(normalised), desc=desc, unit="edit", disable=not progress) as bar:
        for start in range(0, len(normalised), chunk_size):
            loaded = load_samples(normalised[start:start + chunk_size], max_image_pixels,
                                  max_sample_pixels=max_sample_pixels, target_pixels=target_pixels, first_index=start)
            chunk_ids = None if group_ids is None else group_ids[start:start + chunk_size]
            calls = plan_chunk(loaded, batch_size, length, grouping, chunk_ids)
            group, handle = None, None
            for n, (indices, members) in enumerate(calls):
                if members is not group:  # a group's calls are consecutive: open its handle on the first
                    group = members
                    handle = None if members is None else grouping.open(loaded[members[0]])
                outputs = score([loaded[i] for i in indices], handle)
                last_of_group = n + 1 == len(calls) or calls[n + 1][1] is not members
                if members is not None and last_of_group and grouping.close is not None:
                    grouping.close(handle)
                for i, output in zip(indices, outputs):
                    results[start + i] = output
                bar.update(len(indices))
    return results


@contextlib.contextmanager
def eval_mode(module) -> Iterator[None]:
    """Run a ``torch.nn.Module`` in eval mode, restoring its training flag afterwards."""
    was_training = module.training
    module.eval()
    try:
        yield
    finally:
        module.train(was_training)


__all__ = ["CHUNK_BATCHES", "PrefixGrouping", "checked_batch_size", "eval_mode", "normalise_samples", "plan_chunk",
           "score_in_batches"]
