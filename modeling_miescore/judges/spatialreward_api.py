"""SpatialReward through an OpenAI-compatible chat endpoint (``vllm serve``, SGLang, hosted judges): the prompts
(appendix D.1), parsing, aggregation and result type of the in-process ``SpatialRewardModel``; only the generation
step differs::

    # vllm serve SpatialReward/SpatialReward-8B --max-model-len 4096 --limit-mm-per-prompt '{"image": 4}'
    judge = SpatialRewardAPI("http://127.0.0.1:8000/v1", model="SpatialReward/SpatialReward-8B")
    results = judge.evaluate_edits([{"sources": [src], "edited": out, "instruction": "add a hat"}])

Each sample costs ``2 x num_passes`` chat requests (SC and PQ), sent concurrently; the server batches them (vLLM's
continuous batching and prefix caching, sec. B.2.3). A request that fails for good never raises: the sample is
flagged (``failure_reasons = ["sc:api_error:timeout"]``) and the failure counted in :attr:`SpatialRewardAPI.stats`
(with the server's first message of each kind). An answer cut at ``max_tokens`` is flagged ``cut_at_max_tokens``
and parsed like the in-process model's text: no score is ever made up.

The server sees what the in-process model sees (``tests/test_engines_parity.py`` checks it against a real vLLM):
the same messages, each image already resized as the Qwen-VL processor resizes it (:func:`processor_sized_image`)
and sent losslessly. The server must use the checkpoint's pixel range (``scripts/vllm_cpu.sh start`` passes it; an
export of ``miescore export-vllm`` carries it); ``config`` may be a checkpoint folder, whose SpatialReward settings
are read.
"""

from __future__ import annotations

import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..hub.backbone_families import qwen_patch_factor
from ..hub.batched_scoring import score_in_batches
from ..hub.configuration_spatialreward import SpatialRewardConfig
from ..hub.errors import MIEScoreInputError
from ..hub.image_io import DEFAULT_MAX_IMAGE_PIXELS
from ..hub.processing_miescore import EditSample, resized_image_size
from ..hub.spatialreward_judgement import SpatialRewardResult, SpatialRewardScoringMixin, assemble_result
from ..hub.spatialreward_tokens import strip_control_tokens
from ..utils.closing import ClosesOnExit
from .chat_client import (DEFAULT_MAX_ANSWER_BYTES, RETRY_STATUSES, ChatClient, ChatError, image_to_data_url,
                          user_message)
from ..hub.image_io import to_rgb
from ..scoring.checkpoint_files import read_config_file

CUT_ISSUE = "cut_at_max_tokens"  # issue code of an answer the server stopped at max_tokens (finish_reason "length")


def processor_sized_image(image, min_pixels: int, max_pixels: int, factor: int = 32):
    """The image to send for ``image``: resized as the Qwen-VL image processor resizes it when the processor leaves
    that size alone (PIL in, PIL out), else ``image`` itself.

    The size is the processor's rule (``processing_miescore.resized_image_size``: sides multiples of ``factor``,
    area brought into ``[min_pixels, max_pixels]``) and the resampling its own: ``Qwen2VLImageProcessor.resize`` ->
    transformers' ``TorchvisionBackend.resize`` -> ``torchvision.transforms.v2.functional.resize`` with bicubic
    interpolation (``resample=3``) and antialiasing on the uint8 ``(1, 3, H, W)`` tensor; so a server's processor
    computes from it the pixels the in-process model computes from the original. The rule is not always
    idempotent: an upscaled side is rounded up, which can overshoot ``max_pixels`` (``min_pixels == max_pixels``,
    or a narrow range), and the processor would then resize the resized image again, to another size; such an image
    is sent as it is, for the server to resize once, as the in-process model does (which needs the server's pixel
    range to be the checkpoint's: the export's processor config and ``scripts/vllm_cpu.sh start`` set it).
    """
    size = dict(min_pixels=min_pixels, max_pixels=max_pixels, factor=factor)
    height, width = resized_image_size(image.width, image.height, **size)
    if (width, height) == image.size or resized_image_size(width, height, **size) != (height, width):
        return image  # already its size, or the processor would not leave the resized image alone
    import numpy as np
    import torch
    from PIL import Image
    from torchvision.transforms.v2 import functional as tvF


    pixels = torch.from_numpy(np.array(to_rgb(image) if image.mode != "RGB" else image)).permute(2, 0, 1)[None]
    resized = tvF.resize(pixels.contiguous(), [height, width], interpolation=tvF.InterpolationMode.BICUBIC,
                         antialias=True)
    return Image.fromarray(resized[0].permute(1, 2, 0).numpy())


def spatialreward_settings(source) -> SpatialRewardConfig:
    """The SpatialReward settings of a checkpoint folder (ours, an export of ``miescore export-vllm``, or the
    authors' plain Qwen3-VL one, which gets the paper's defaults) or of its ``config.json``; only the JSON is read.
    ``MIEScoreInputError`` names a path that holds no readable config."""
    from pathlib import Path


    path = Path(source)
    folder = path.parent if path.name == "config.json" else path
    if not (folder / "config.json").is_file():
        raise MIEScoreInputError(f"config '{source}': no config.json there (give the checkpoint folder the server "
                                 "serves, or its config.json)")
    read_config_file(folder / "config.json", str(folder))  # one line for a broken file, not a traceback
    try:
        return SpatialRewardConfig.from_pretrained(str(folder))
    except (OSError, ValueError, TypeError) as err:
        raise MIEScoreInputError(f"config '{source}': not usable as SpatialReward settings: {err}") from None


class SpatialRewardAPI(ClosesOnExit, SpatialRewardScoringMixin):
    """SpatialReward judge served behind ``POST {base_url}/chat/completions``.

    Args:
        base_url, model, api_key_env, timeout, max_retries, max_answer_bytes: for the
            :class:`~modeling_miescore.judges.chat_client.ChatClient` (or pass ``client``); a request never waits
            longer than ``timeout x (max_retries + 1)`` plus the back-off, and an answer over the byte limit is a
            failed request (``sc:api_error:too_large``).
        config: a :class:`SpatialRewardConfig` (prompts, score range, aggregation, sampling, ``max_pixels``,
            ``failure_reward``), or a checkpoint folder / ``config.json`` to read it from
            (:func:`spatialreward_settings`); default: the paper's settings. ``config_overrides`` replace single
            fields.
        max_concurrency: requests in flight at once.
        image_format: ``"PNG"`` (lossless, default) or ``"JPEG"`` / ``"WEBP"`` (smaller requests).
    """

    backend = "openai"

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 max_retries: int = 2, config: Optional[SpatialRewardConfig] = None, max_concurrency: int = 16,
                 image_format: str = "PNG", client: Optional[ChatClient] = None,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES, **config_overrides: Any):
        if config is not None and not isinstance(config, SpatialRewardConfig):
            config = spatialreward_settings(config)
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
        self.stats: Dict[str, Any] = {"requests": 0, "failed_requests": 0, "errors_by_kind": {},
                                      "errors_by_status": {}, "error_messages": {}, CUT_ISSUE: 0}

    def __repr__(self) -> str:
        return f"SpatialRewardAPI({self.client!r}, max_concurrency={self.max_concurrency})"

    def close(self) -> None:
        self.client.close()

    # -- requests -----------------------------------------------------------------------------------------------
    def _count(self, error: Optional[str], message: str = "", cut: bool = False, status: Optional[int] = None) -> None:
        with self._lock:
            self.stats["requests"] += 1
            self.stats[CUT_ISSUE] += int(cut)
            if error is not None:
                self.stats["failed_requests"] += 1
                kinds = self.stats["errors_by_kind"]
                kinds[error] = kinds.get(error, 0) + 1
                self.stats["error_messages"].setdefault(error, message)
                if status is not None:
                    statuses = self.stats["errors_by_status"]
                    statuses[status] = statuses.get(status, 0) + 1

    def stats_snapshot(self) -> Dict[str, Any]:
        """A copy of :attr:`stats` (pass it to :meth:`refusal` to look at the requests sent since)."""
        with self._lock:
            return copy.deepcopy(self.stats)

    def refusal(self, since: Optional[Dict[str, Any]] = None) -> Optional[str]:
        """The server's message when every request (since the :meth:`stats_snapshot` ``since``) was refused with an
        HTTP 4xx that no retry can change (an unknown model name, more images than the server takes, a prompt over
        its context), else None: a configuration error to stop at, not a judgement."""
        base = since or {"requests": 0, "errors_by_status": {}}
        with self._lock:
            requests = self.stats["requests"] - base["requests"]
            refused = sum(n - base["errors_by_status"].get(status, 0)
                          for status, n in self.stats["errors_by_status"].items()
                          if 400 <= status < 500 and status not in RETRY_STATUSES)
            message = self.stats["error_messages"].get("http", "")
        return "the server refused every request: " + message if requests and refused == requests else None

    def _request(self, urls: List[str], text: str) -> Tuple[str, Optional[str], bool]:
        """One chat request -> ``(text, None, cut)`` or ``("", error kind, False)``; never raises. ``cut``: the
        server stopped the answer at ``max_tokens``."""
        config = self.config
        sample = bool(config.do_sample) or int(config.num_passes) > 1
        # images first, as in the released inference code
        message = user_message([*({"type": "image_url", "image_url": {"url": url}} for url in urls), text])
        extra = {"top_p": float(config.sampling_top_p)} if sample else {}
        try:
            answer = self.client.complete([message],
                                          temperature=float(config.sampling_temperature) if sample else 0.0,
                                          max_tokens=int(config.max_new_tokens), **extra)
        except ChatError as err:
            self._count(err.kind, str(err), status=err.status if err.kind == "http" else None)
            return "", err.kind, False
        except Exception as err:  # a client bug must not stop an RL loop either; it is counted and flagged
            self._count("client_error", f"{type(err).__name__}: {err}")
            return "", "client_error", False
        cut = answer.finish_reason == "length"
        self._count(None, cut=cut)
        return strip_control_tokens(answer.text), None, cut

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
        size = dict(min_pixels=int(config.min_pixels), max_pixels=int(config.max_pixels),
                    factor=qwen_patch_factor(config))
        urls: dict = {}  # id(image) -> (image, data URL): sources shared by edits are encoded once

        def url_of(image):
            if id(image) not in urls:
                urls[id(image)] = (image, image_to_data_url(processor_sized_image(image, **size),
                                                            format=self.image_format))
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
            result = assemble_result(
                config, len(sample.sources), sample.edited.size, [t for t, _, _ in sc_out],
                [t for t, _, _ in pq_out], sc_errors=[e for _, e, _ in sc_out], pq_errors=[e for _, e, _ in pq_out],
                sample_id=sample.id, backend=self.backend)
            for stream, out in (("sc", sc_out), ("pq", pq_out)):
                if any(cut for _, _, cut in out) and CUT_ISSUE not in result.issues[stream]:
                    result.issues[stream].append(CUT_ISSUE)
            results.append(result)
        return results

__all__ = ["CUT_ISSUE", "SpatialRewardAPI", "processor_sized_image", "spatialreward_settings"]
