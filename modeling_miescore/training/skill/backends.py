"""Generative backends of skill optimisation: prompts (lists of text and PIL images) in, one answer per prompt
out. Both run through the package's call engine (:mod:`modeling_miescore.judges.call_engine`), without a cache
(the optimisation loop keeps its own history): :class:`TransformersBackend` runs a local
``AutoModelForImageTextToText`` (Qwen3-VL, greedy;
:class:`~modeling_miescore.judges.chat_backends.TransformersChatBackend`), :class:`OpenAIBackend` talks to any
OpenAI-compatible chat server (:class:`~modeling_miescore.judges.chat_backends.OpenAIChatBackend`). A failed
prompt is a :class:`Generation` with an ``error``, never an exception."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Protocol, Sequence

from ...judges.call_engine import CallEngine, ChatRequest
from .prompts import Part
from ...judges.chat_backends import TransformersChatBackend, OpenAIChatBackend

__all__ = ["Generation", "GenerativeBackend", "OpenAIBackend", "TransformersBackend"]


@dataclass
class Generation:
    """A backend's answer to one prompt: ``text``, or ``error`` (a one-line reason) when generation failed."""

    text: Optional[str]
    error: Optional[str] = None


class GenerativeBackend(Protocol):
    """Anything that turns prompts (lists of ``str`` and ``PIL.Image`` parts) into answers, one per prompt,
    in order. It must not raise for a failed prompt: it returns ``Generation(None, error)`` instead."""

    def generate(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[Generation]:
        ...


class _EngineBackend:
    """Prompts -> :class:`ChatRequest` -> the call engine -> :class:`Generation` (``error`` = the engine's one-line
    reason, e.g. ``"ChatError[http]: ..."``)."""

    temperature = 0.0

    def __init__(self, chat_backend: Any):
        self.engine = CallEngine(chat_backend)

    def generate(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[Generation]:
        requests = [ChatRequest(list(p), max_tokens=int(max_new_tokens), temperature=self.temperature, stage="skill")
                    for p in prompts]
        return [Generation(r.text, r.error) for r in self.engine.run(requests)]

    def close(self) -> None:
        self.engine.close()


class TransformersBackend(_EngineBackend):
    """A local generative VLM (Qwen3-VL and other ``AutoModelForImageTextToText`` models) with greedy decoding.

    Args:
        model: checkpoint folder or Hub id, or an already loaded model (then pass ``processor``).
        processor: the model's processor (loaded from ``model`` when it is a path).
        device, dtype: see :func:`modeling_miescore.scoring.loading.resolve_device` / ``resolve_dtype``.
        batch_size: prompts per ``generate`` call (left padding).
        max_pixels, min_pixels: pixel budget per image passed to the image processor (None: its default).
    """

    def __init__(self, model: Any, processor: Any = None, device: str = "auto", dtype: str = "auto",
                 batch_size: int = 1, max_pixels: Optional[int] = 1_048_576, min_pixels: Optional[int] = None):
        super().__init__(TransformersChatBackend(model, processor, device=device, dtype=dtype, batch_size=batch_size,
                                                 max_pixels=max_pixels, min_pixels=min_pixels))


class OpenAIBackend(_EngineBackend):
    """Any OpenAI-compatible chat server (vLLM, SGLang, OpenAI, ...), through :class:`ChatClient`.

    The API key is read from the environment variable ``api_key_env`` (never passed as an argument).
    ``num_workers`` requests run concurrently (answers keep the prompt order). ``temperature`` 0 = greedy.
    ``image_format``/``max_pixels`` control how images are encoded in the request.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 max_retries: int = 2, num_workers: int = 4, temperature: float = 0.0, image_format: str = "PNG",
                 max_pixels: Optional[int] = 1_048_576, client: Any = None):
        self.temperature = float(temperature)
        super().__init__(OpenAIChatBackend(base_url, model, api_key_env=api_key_env, timeout=timeout,
                                           max_retries=max_retries, backoff=0.5, max_backoff=30.0,
                                           max_concurrency=max(1, int(num_workers)), image_format=image_format,
                                           max_pixels=max_pixels, client=client))
