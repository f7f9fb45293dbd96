"""SpatialReward through an OpenAI-compatible chat endpoint (``vllm serve``, SGLang, hosted judges).

Same prompts (appendix D.1), parsing, aggregation and result type as the transformers backend
(:class:`modeling_spatialreward.SpatialRewardModel`); only the generation step differs::

    # vllm serve SpatialReward/SpatialReward-8B --max-model-len 4096 --limit-mm-per-prompt '{"image": 4}'
    judge = SpatialRewardAPI("http://127.0.0.1:8000/v1", model="SpatialReward/SpatialReward-8B")
    results = judge.evaluate_edits([{"sources": [src], "edited": out, "instruction": "add a hat"}])

Each sample costs ``2 x num_passes`` chat requests (SC and PQ streams), sent concurrently by a bounded thread
pool; the server batches them (vLLM's continuous batching and prefix caching do the rest, sec. B.2.3).
A request that fails for good (HTTP error after retries, timeout, malformed body) never raises: the sample
is flagged (``failed``, ``failure_reasons = ["sc:api_error:timeout"]``), gets ``config.failure_reward``, and the
failure is counted in :attr:`SpatialRewardAPI.stats`.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..batched_scoring import score_in_batches
from ..configuration_spatialreward import SpatialRewardConfig
from ..image_io import DEFAULT_MAX_IMAGE_PIXELS
from ..processing_miescore import EditSample
from ..spatialreward_judgement import SpatialRewardResult, SpatialRewardScoringMixin, assemble_result
from ..spatialreward_tokens import strip_control_tokens
from ..utils.closing import ClosesOnExit
from .chat_client import DEFAULT_MAX_ANSWER_BYTES, ChatClient, ChatError, image_to_data_url


class SpatialRewardAPI(ClosesOnExit, SpatialRewardScoringMixin):
    """SpatialReward judge served behind ``POST {base_url}/chat/completions``.

    Args:
        base_url: server root with the API prefix, e.g. ``http://127.0.0.1:8000/v1``.
        model: the model name the server expects.
        api_key_env: environment variable holding the API key (unset: no Authorization header).
        timeout: seconds one request attempt may take in all (connecting, sending, the headers and the body); a
            request never waits longer than ``timeout x (max_retries + 1)`` plus the retry back-off.
        max_retries: extra attempts for transient failures (429, 5xx, timeouts, connection errors).
        config: a :class:`SpatialRewardConfig` (prompts, score range, aggregation, sampling, ``max_pixels``,
            ``failure_reward``); default: the paper's settings. ``config_overrides`` replace single fields.
        max_concurrency: requests in flight at once.
        image_format: ``"PNG"`` (lossless, default) or ``"JPEG"`` / ``"WEBP"`` (smaller requests).
        client: an existing ``ChatClient`` (tests, custom headers); base_url/model/... are then ignored.
        max_answer_bytes: the byte limit of one answer, on the wire and decompressed (an answer over it is a
            failed request, ``sc:api_error:too_large``).
    """

    backend = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 max_retries: int = 2, config: Optional[SpatialRewardConfig] = None, max_concurrency: int = 16,
                 image_format: str = "PNG", client: Optional[ChatClient] = None,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES, **config_overrides: Any):
        if config is None:
            config = SpatialRewardConfig(**config_overrides)
        elif config_overrides:
            for key, value in config_overrides.items():
                if not hasattr(config, key):
                    raise ValueError(f"unknown SpatialRewardConfig field {key!r}")
                setattr(config, key, value)
            config.validate_reward_fields()
        if int(max_concurrency) < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.config = config
        self.client = client or ChatClient(base_url, model, api_key_env=api_key_env, timeout=timeout,
                                           max_retries=max_retries, max_answer_bytes=max_answer_bytes)
        self.max_concurrency = int(max_concurrency)
        self.image_format = image_format
        self._lock = threading.Lock()
        self.stats: Dict[str, Any] = {"requests": 0, "failed_requests": 0, "errors_by_kind": {}}

    def __repr__(self) -> str:
        return f"SpatialRewardAPI({self.client!r}, max_concurrency={self.max_concurrency})"

    def close(self) -> None:
        self.client.close()

    # -- requests -----------------------------------------------------------------------------------------------
    def _count(self, error: Optional[str]) -> None:
        with self._lock:
            self.stats["requests"] += 1
            if error is not None:
                self.stats["failed_requests"] += 1
                kinds = self.stats["errors_by_kind"]
                kinds[error] = kinds.get(error, 0) + 1

    def _request(self, urls: List[str], text: str) -> Tuple[str, Optional[str]]:
        """One chat request -> ``(text, None)`` or ``("", error kind)``; never raises."""
        config = self.config
        sample = bool(config.do_sample) or int(config.num_passes) > 1
        content = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
        content.append({"type": "text", "text": text})  # images first, as in the released inference code
        extra = {"top_p": float(config.sampling_top_p)} if sample else {}
        try:
            answer = self.client.chat([{"role": "user", "content": content}],
                                      temperature=float(config.sampling_temperature) if sample else 0.0,
                                      max_tokens=int(config.max_new_tokens), **extra)
        except ChatError as err:
            self._count(err.kind)
            return "", err.kind
        except Exception:  # a client bug must not stop an RL loop either; it is counted and flagged
            self._count("client_error")
            return "", "client_error"
        self._count(None)
        return strip_control_tokens(answer), None

    def evaluate_edits(self, samples: Sequence, batch_size: int = 8, processor=None, progress: bool = False,
                       max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> List[SpatialRewardResult]:
        """Judge many edits; one :class:`SpatialRewardResult` per sample, in input order.

        Same signature and result as ``SpatialRewardModel.evaluate_edits`` (``processor`` is accepted and
        ignored). ``batch_size`` samples are in flight together (their ``2 x num_passes`` requests, at most
        ``max_concurrency`` at a time). Raises ``MIEScoreInputError`` only for unusable inputs.
        """
        with ThreadPoolExecutor(max_workers=self.max_concurrency) as pool:
            # a chunk is one batch: its images are decoded, encoded and sent together, in input order
            return score_in_batches(samples, lambda loaded, _: self._judge_batch(loaded, pool),
                                    batch_size=batch_size, chunk_size=int(batch_size),
                                    max_image_pixels=max_image_pixels, progress=progress, desc="SpatialReward (API)")

    def _judge_batch(self, samples: List[EditSample], pool: ThreadPoolExecutor) -> List[SpatialRewardResult]:
        """Send the ``2 x num_passes`` requests of every sample at once, then assemble each sample's result."""
        config = self.config
        passes = int(config.num_passes)
        encode = dict(format=self.image_format, max_pixels=int(config.max_pixels))
        urls: dict = {}  # id(image) -> (image, data URL): sources shared by edits are encoded once

        def url_of(image):
            if id(image) not in urls:
                urls[id(image)] = (image, image_to_data_url(image, **encode))
            return urls[id(image)][1]

        jobs = []
        for sample in samples:
            edited_url = url_of(sample.edited)
            sc_urls = [url_of(s) for s in sample.sources] + [edited_url]
            sc_text = config.sc_text(sample.instruction, len(sample.sources))
            sc_jobs = [pool.submit(self._request, sc_urls, sc_text) for _ in range(passes)]
            pq_jobs = [pool.submit(self._request, [edited_url], config.pq_text()) for _ in range(passes)]
            jobs.append((sc_jobs, pq_jobs))
        results = []
        for sample, (sc_jobs, pq_jobs) in zip(samples, jobs):
            sc_out = [job.result() for job in sc_jobs]
            pq_out = [job.result() for job in pq_jobs]
            results.append(assemble_result(
                config, len(sample.sources), sample.edited.size, [t for t, _ in sc_out], [t for t, _ in pq_out],
                sc_errors=[e for _, e in sc_out], pq_errors=[e for _, e in pq_out], sample_id=sample.id,
                backend=self.backend))
        return results

__all__ = ["SpatialRewardAPI"]
