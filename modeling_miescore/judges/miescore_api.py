"""MIEScore served by vLLM's pooling runner (an export of ``miescore export-vllm``): the client.

The client sends each edit's prompt (``processing_miescore.build_messages``: the same messages, images in the same
order, sized as the processor sizes them: ``judges.spatialreward_api.processor_sized_image``) to vLLM's
``/classify`` with ``add_generation_prompt`` and ``use_activation: false``, and turns the raw outputs into scores
as the in-process model does (sigmoid, ``score_scale``, ``overall_score``). A request that fails is a flagged result
(``failed``, ``error``) with no score.
"""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from ..scoring.vllm_export import MIESCORE_CONFIG_FILE
from ..utils.closing import ClosesOnExit
from ..hub.backbone_families import qwen_patch_factor
from ..hub.processing_miescore import build_messages, ordered_images
from ..hub.miescore_overall import overall_score
from ..hub.image_io import DEFAULT_MAX_IMAGE_PIXELS

__all__ = ["MIEScoreAPI"]


class MIEScoreAPI(ClosesOnExit):
    """MIEScore behind vLLM's ``/classify`` (a server of an exported checkpoint with the plugin installed):
    ``base_url`` is the server's OpenAI root (``/classify`` is at the server root), ``checkpoint`` the export folder
    (its ``miescore_config.json`` gives the prompt and the score settings); the rest as for ``SpatialRewardAPI``.
    """

    def __init__(self, base_url: str, model: str, checkpoint, timeout: float = 120.0, max_retries: int = 2,
                 max_concurrency: int = 16, image_format: str = "PNG"):
        from ..hub.configuration_miescore import MIEScoreConfig  # deferred: loads torch, transformers
        from .chat_client import ChatClient  # deferred: loads httpcore, httpx

        self.config = MIEScoreConfig.from_json_file(str(Path(checkpoint) / MIESCORE_CONFIG_FILE))
        self.client = ChatClient(base_url, model, timeout=timeout, max_retries=max_retries)
        self.max_concurrency = int(max_concurrency)
        self.image_format = image_format
        self.stats: Dict[str, Any] = {"requests": 0, "failed_requests": 0, "prompt_tokens": 0}
        self.stats_lock = threading.Lock()  # _score_one runs on max_concurrency threads

    def _count(self, failed: bool, tokens: int = 0) -> None:
        with self.stats_lock:
            self.stats["requests"] += 1
            self.stats["failed_requests"] += int(failed)
            self.stats["prompt_tokens"] += tokens

    def close(self) -> None:
        self.client.close()

    def _content(self, sample) -> List[dict]:
        from .chat_client import image_to_data_url  # deferred: loads httpcore, httpx
        from .spatialreward_api import processor_sized_image  # deferred: loads httpcore, httpx, torch, transformers

        config = self.config
        messages, roles = build_messages(len(sample.sources), sample.instruction, config)
        images = iter(ordered_images(sample, roles))
        size = dict(min_pixels=int(config.min_pixels), max_pixels=int(config.max_pixels),
                    factor=qwen_patch_factor(config))
        return [{"type": "image_url", "image_url": {"url": image_to_data_url(
            processor_sized_image(next(images), **size), format=self.image_format)}}
                if part["type"] == "image" else part for part in messages[0]["content"]]

    def _score_one(self, sample) -> Dict[str, Any]:
        from .chat_client import ChatError  # deferred: loads httpcore, httpx

        body = {"model": self.client.model, "messages": [{"role": "user", "content": self._content(sample)}],
                "add_generation_prompt": True, "use_activation": False}
        try:
            payload, _, _ = self.client.post_json("//classify", body, what="a classification")
            raw = [float(x) for x in payload["data"][0]["probs"]]
            tokens = int((payload.get("usage") or {}).get("prompt_tokens") or 0)
        except ChatError as err:
            self._count(failed=True)
            return {"id": sample.id, "failed": True, "error": f"{err.kind}: {err}"}
        except (KeyError, IndexError, TypeError, ValueError) as err:
            self._count(failed=True)
            return {"id": sample.id, "failed": True, "error": f"bad_response: {type(err).__name__}: {err}"}
        self._count(failed=False, tokens=tokens)
        if len(raw) != len(self.config.score_names) or not all(math.isfinite(x) for x in raw):
            return {"id": sample.id, "failed": True, "error": f"bad_response: {len(raw)} outputs {raw[:4]}"}
        scaled = [float(self.config.score_scale) / (1.0 + math.exp(-x)) for x in raw]
        result = dict(zip(self.config.score_names, scaled))
        result["overall"] = float(overall_score(*scaled, weights=self.config.overall_weights))
        return {"id": sample.id, "failed": False, **result}

    def score_batch(self, samples: Sequence, batch_size: int = 8,
                    max_image_pixels: Optional[int] = None) -> List[Dict[str, Any]]:
        """One result per sample, in order: the scores and ``overall`` on the MOS scale (as
        ``MIEScoreModel.score_batch``) with ``failed: False``, or ``failed: True`` and ``error`` (no score)."""
        from ..hub.batched_scoring import score_in_batches  # deferred: loads torch, transformers

        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            return score_in_batches(samples, lambda loaded, _: list(pool.map(self._score_one, loaded)),
                                    batch_size=batch_size, chunk_size=int(batch_size),
                                    max_image_pixels=max_image_pixels or DEFAULT_MAX_IMAGE_PIXELS,
                                    desc="MIEScore (vLLM)")
