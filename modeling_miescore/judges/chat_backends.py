"""Backends of the call engine (:mod:`modeling_miescore.judges.call_engine`): where the answers come from.

* :class:`OpenAIChatBackend`: any OpenAI-compatible chat-completions endpoint (``vllm serve``, SGLang, OpenAI,
  Gemini's OpenAI endpoint, ...) through :class:`~modeling_miescore.judges.chat_client.ChatClient` (connection
  pool, retries with ``Retry-After``, typed errors, token usage). One request per call, ``max_concurrency`` in
  flight; images travel as data URLs (``image_format``, downscaled to ``max_pixels``).
* :class:`TransformersChatBackend`: a local ``AutoModelForImageTextToText`` + ``AutoProcessor`` (Qwen3-VL and
  other chat VLMs), ``batch_size`` prompts per left-padded ``generate`` call, greedy unless a request asks for a
  temperature. Token usage is counted from the tokenised prompt and the generated tokens.

A judge is named on the command line by a spec (:func:`parse_judge_spec`): ``MODEL@URL`` (an OpenAI-compatible
endpoint; ``MODEL@URL#ENV_VAR`` reads the API key from ``ENV_VAR``) or ``transformers:PATH_OR_HUB_ID``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..hub.errors import MIEScoreInputError
from ..utils.credentials import redact, redacted_url
from .call_engine import ChatRequest, image_digest
from .chat_client import (DEFAULT_MAX_ANSWER_BYTES, ChatClient, ChatCompletion, ChatError, image_to_data_url,
                          user_message)
from ..scoring.loading import ModelLoadError, resolve_device, resolve_dtype

logger = logging.getLogger(__name__)

__all__ = ["JudgeSpec", "LOCAL_MAX_TOKENS", "OpenAIChatBackend", "TransformersChatBackend", "build_backend", "parse_judge_spec"]


class _DataURLs:
    """Data URLs of recently sent images, by pixel digest, up to ``max_bytes``: the stages of a pipeline send the
    same images again (grounding, PQ and alignment all show the edited image), and encoding costs far more than
    hashing."""

    def __init__(self, max_bytes: int = 64 << 20):
        self.max_bytes = int(max_bytes)
        self._urls: "OrderedDict[str, str]" = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, image, format: str, max_pixels: Optional[int], quality: int = 90) -> str:
        key = f"{image_digest(image)}|{format}|{max_pixels}|{quality}"
        with self._lock:
            if key in self._urls:
                self._urls.move_to_end(key)
                return self._urls[key]
        url = image_to_data_url(image, format=format, max_pixels=max_pixels, quality=quality)
        with self._lock:
            if key not in self._urls:
                self._urls[key] = url
                self._size += len(url)
                while self._size > self.max_bytes and len(self._urls) > 1:
                    self._size -= len(self._urls.popitem(last=False)[1])
        return url


class OpenAIChatBackend:
    """An OpenAI-compatible endpoint through a :class:`~modeling_miescore.judges.chat_client.ChatClient` made from
    the connection arguments, or ``client`` (tests, custom headers); ``image_quality`` is the JPEG / WEBP quality
    of the images sent (PNG is lossless)."""

    batch_size = 1

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                 max_retries: int = 4, backoff: float = 1.0, max_backoff: float = 60.0, max_concurrency: int = 8,
                 image_format: str = "PNG", max_pixels: Optional[int] = 1_048_576,
                 client: Optional[ChatClient] = None, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
                 image_quality: int = 90):
        if int(max_concurrency) < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.client = client or ChatClient(base_url, model, api_key_env=api_key_env, timeout=timeout,
                                           max_retries=max_retries, backoff=backoff, max_backoff=max_backoff,
                                           max_answer_bytes=max_answer_bytes)
        self.model = self.client.model
        self.max_concurrency = int(max_concurrency)
        self.image_format = image_format.upper()
        self.max_pixels = None if max_pixels is None else int(max_pixels)
        self.image_quality = int(image_quality)
        self._urls = _DataURLs()

    def __repr__(self) -> str:
        return f"OpenAIChatBackend({self.client!r}, max_concurrency={self.max_concurrency})"

    def identity(self) -> Dict[str, Any]:
        lossy = {} if self.image_format == "PNG" else {"image_quality": self.image_quality}
        return {"kind": "openai", "model": self.model, "image_format": self.image_format,
                "max_pixels": self.max_pixels, **lossy}

    def _one(self, request: ChatRequest) -> Any:
        from PIL import Image

        try:
            parts = [{"type": "image_url",
                      "image_url": {"url": self._urls.get(p, self.image_format, self.max_pixels, self.image_quality)}}
                     if isinstance(p, Image.Image) else p for p in request.parts]
            message = user_message(parts)
            return self.client.complete([message], temperature=request.temperature, max_tokens=request.max_tokens,
                                        **dict(request.extra))
        except (ChatError, TypeError, ValueError, OSError) as err:  # OSError: an image that cannot be encoded
            return err

    def complete_batch(self, requests: Sequence[ChatRequest]) -> List[Any]:
        return [self._one(r) for r in requests]

    def close(self) -> None:
        self.client.close()


LOCAL_MAX_TOKENS = 1024  # a local model's answer budget when a request sends none (ChatRequest.max_tokens None)


def _local_settings(request: ChatRequest) -> Tuple[int, float]:
    """``(max_new_tokens, temperature)`` of a request for a local model: a field not sent is the budget above and
    greedy decoding."""
    return (LOCAL_MAX_TOKENS if request.max_tokens is None else int(request.max_tokens),
            0.0 if request.temperature is None else float(request.temperature))


class TransformersChatBackend:
    """A local generative VLM (``AutoModelForImageTextToText``), batched.

    Args:
        model: checkpoint folder or Hub id, or a loaded model (then pass ``processor``).
        processor: the model's processor (loaded from ``model`` when it is a path).
        device, dtype: see :func:`modeling_miescore.scoring.loading.resolve_device` / ``resolve_dtype``.
        batch_size: prompts per ``generate`` call (left padding).
        max_pixels, min_pixels: pixel budget per image for the image processor (None: its default).
        name: the model name in cache keys and usage logs (default: the path, or the model's ``name_or_path``).
    """

    max_concurrency = 1  # one generate call at a time; batching is the parallelism

    def __init__(self, model: Any, processor: Any = None, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 4, max_pixels: Optional[int] = 1_048_576, min_pixels: Optional[int] = None,
                 name: Optional[str] = None):
        import torch  # noqa: F401  (fail early if torch is missing)


        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.max_pixels, self.min_pixels = max_pixels, min_pixels
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForImageTextToText, AutoProcessor

            path = os.fspath(model)
            self.device = resolve_device(device)
            try:
                processor = processor or AutoProcessor.from_pretrained(path)
                model = AutoModelForImageTextToText.from_pretrained(path, dtype=resolve_dtype(dtype, self.device))
            except (OSError, ValueError) as err:
                raise ModelLoadError(f"could not load generative model '{path}': {err}") from None
            model = model.to(self.device)
            name = name or path
        else:
            if processor is None:
                raise ValueError("pass the processor together with an already loaded model")
            self.device = str(next(model.parameters()).device)
            name = name or str(getattr(model, "name_or_path", "") or type(model).__name__)
        self.model_obj = model.eval()
        self.processor = processor
        self.model = name

    def __repr__(self) -> str:
        return f"TransformersChatBackend({self.model!r}, device={self.device!r}, batch_size={self.batch_size})"

    def identity(self) -> Dict[str, Any]:
        return {"kind": "transformers", "model": self.model, "max_pixels": self.max_pixels,
                "min_pixels": self.min_pixels}

    @staticmethod
    def _messages(parts: Sequence[Any]) -> Tuple[List[dict], List[Any]]:
        content, images = [], []
        for part in parts:
            if isinstance(part, str):
                if content and content[-1]["type"] == "text":
                    content[-1]["text"] += part
                else:
                    content.append({"type": "text", "text": part})
            elif isinstance(part, dict):
                raise TypeError("the transformers backend takes text and PIL images, not content-part dicts")
            else:
                content.append({"type": "image"})
                images.append(part)
        return [{"role": "user", "content": content}], images

    def _size_kwargs(self) -> dict:
        if self.max_pixels is None and self.min_pixels is None:
            return {}
        size = dict(getattr(getattr(self.processor, "image_processor", None), "size", None) or {})
        if self.max_pixels is not None:
            size["longest_edge"] = int(self.max_pixels)
        if self.min_pixels is not None:
            size["shortest_edge"] = int(self.min_pixels)
        if "shortest_edge" in size and "longest_edge" in size and size["shortest_edge"] > size["longest_edge"]:
            size["shortest_edge"] = size["longest_edge"]
        return {"size": size}

    def _generate(self, requests: Sequence[ChatRequest]) -> List[ChatCompletion]:
        import torch

        texts, images = [], []
        for request in requests:
            messages, imgs = self._messages(request.parts)
            texts.append(self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
            images.extend(imgs)
        batch = self.processor(text=texts, images=images or None, padding=True, padding_side="left",
                               return_tensors="pt", **(self._size_kwargs() if images else {})).to(self.device)
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        max_tokens, temperature = _local_settings(requests[0])
        sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
        with torch.inference_mode():
            out = self.model_obj.generate(**batch, max_new_tokens=max_tokens, pad_token_id=tokenizer.pad_token_id,
                                          **sampling)
        new_tokens = out[:, batch["input_ids"].shape[1]:]
        decoded = tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
        stops = {tokenizer.pad_token_id, tokenizer.eos_token_id} - {None}
        answers = []
        for row, text, mask in zip(new_tokens.tolist(), decoded, batch["attention_mask"].tolist()):
            used = next((i for i, t in enumerate(row) if t in stops), len(row))
            answers.append(ChatCompletion(text, prompt_tokens=int(sum(mask)), completion_tokens=used,
                                          finish_reason="length" if used >= max_tokens else "stop"))
        return answers

    def complete_batch(self, requests: Sequence[ChatRequest]) -> List[Any]:
        """Requests with the same ``max_tokens`` and ``temperature`` share one ``generate`` call."""
        answers: List[Any] = [None] * len(requests)
        groups: Dict[Tuple[int, float], List[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(_local_settings(request), []).append(i)
        for indices in groups.values():
            try:
                for i, answer in zip(indices, self._generate([requests[i] for i in indices])):
                    answers[i] = answer
            except (RuntimeError, ValueError, TypeError, IndexError) as err:
                # e.g. CUDA OOM or an image the processor rejects: every request of the call fails, the run goes on
                logger.warning("generation failed for %d prompt(s): %s: %s", len(indices), type(err).__name__, err)
                for i in indices:
                    answers[i] = err
        return answers

    def close(self) -> None:
        pass


# ------------------------------------------------------------------------------------------------ judge specs


@dataclass(frozen=True)
class JudgeSpec:
    """A judge named on the command line: ``kind`` ``"openai"`` (``model``, ``base_url``, ``api_key_env``) or
    ``"transformers"`` (``model`` = path or Hub id)."""

    kind: str
    model: str
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None

    def __str__(self) -> str:  # as shown (messages, usage logs): a password in the URL is masked
        if self.kind == "transformers":
            return f"transformers:{self.model}"
        return f"{self.model}@{redacted_url(self.base_url)}" + (f"#{self.api_key_env}" if self.api_key_env else "")


def parse_judge_spec(text: str, what: str = "judge") -> JudgeSpec:
    """``MODEL@URL``, ``MODEL@URL#ENV_VAR`` or ``transformers:PATH``; one-line errors otherwise."""
    text = (text or "").strip()
    example = ("e.g. 'Qwen/Qwen3-VL-235B-A22B-Instruct@http://127.0.0.1:8000/v1', "
               "'gpt-5@https://api.openai.com/v1#OPENAI_API_KEY' or 'transformers:/path/to/Qwen3-VL-8B-Instruct'")
    if text.startswith("transformers:"):
        path = text[len("transformers:"):].strip()
        if not path:
            raise MIEScoreInputError(f"{what} '{text}' names no model; {example}")
        return JudgeSpec("transformers", path)
    model, sep, rest = text.partition("@")
    if not sep or not model or not rest.startswith(("http://", "https://")):
        raise MIEScoreInputError(f"{what} '{redact(text)}' is not MODEL@URL or transformers:PATH; {example}")
    url, _, env = rest.partition("#")
    return JudgeSpec("openai", model, url, env or None)


def build_backend(spec: JudgeSpec, *, api_key_env: str = "OPENAI_API_KEY", timeout: float = 120.0,
                  max_retries: int = 4, max_concurrency: int = 8, image_format: str = "PNG",
                  max_pixels: Optional[int] = 1_048_576, device: str = "auto", dtype: str = "auto",
                  batch_size: int = 4, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES, image_quality: int = 90):
    """The backend a :class:`JudgeSpec` names (a transformers model is loaded here)."""
    if spec.kind == "transformers":
        return TransformersChatBackend(spec.model, device=device, dtype=dtype, batch_size=batch_size,
                                       max_pixels=max_pixels)
    return OpenAIChatBackend(spec.base_url, spec.model, api_key_env=spec.api_key_env or api_key_env,
                             timeout=timeout, max_retries=max_retries, max_concurrency=max_concurrency,
                             image_format=image_format, max_pixels=max_pixels, max_answer_bytes=max_answer_bytes,
                             image_quality=image_quality)
