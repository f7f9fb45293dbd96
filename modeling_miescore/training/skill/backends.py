"""Generative backends of skill optimisation: prompts (lists of text and PIL images) in, one answer per prompt
out. :class:`TransformersBackend` runs a local ``AutoModelForImageTextToText`` (Qwen3-VL, greedy);
:class:`OpenAIBackend` talks to any OpenAI-compatible chat server through
:class:`~modeling_miescore.judges.chat_client.ChatClient`. A failed prompt is a :class:`Generation` with an
``error``, never an exception."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, List, Optional, Protocol, Sequence, Tuple

from .prompts import Part

logger = logging.getLogger(__name__)

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


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"


class TransformersBackend:
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
        import torch  # noqa: F401  (fail early if torch is missing)

        from ...scoring.loading import ModelLoadError, resolve_device, resolve_dtype

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)
        self.max_pixels, self.min_pixels = max_pixels, min_pixels
        if isinstance(model, (str, os.PathLike)):
            from transformers import AutoModelForImageTextToText, AutoProcessor

            self.device = resolve_device(device)
            torch_dtype = resolve_dtype(dtype, self.device)
            try:
                processor = processor or AutoProcessor.from_pretrained(os.fspath(model))
                model = AutoModelForImageTextToText.from_pretrained(os.fspath(model), dtype=torch_dtype)
            except (OSError, ValueError) as err:
                raise ModelLoadError(f"could not load generative model '{model}': {err}") from None
            model = model.to(self.device)
        else:
            if processor is None:
                raise ValueError("pass the processor together with an already loaded model")
            self.device = str(next(model.parameters()).device)
        self.model = model.eval()
        self.processor = processor

    def _messages(self, parts: Sequence[Part]) -> Tuple[List[dict], List[Any]]:
        content, images = [], []
        for part in parts:
            if isinstance(part, str):
                if content and content[-1]["type"] == "text":
                    content[-1]["text"] += part
                else:
                    content.append({"type": "text", "text": part})
            else:
                content.append({"type": "image"})
                images.append(part)
        return [{"role": "user", "content": content}], images

    def _size_kwargs(self) -> dict:
        if self.max_pixels is None and self.min_pixels is None:
            return {}
        image_processor = getattr(self.processor, "image_processor", None)
        size = dict(getattr(image_processor, "size", None) or {})
        if self.max_pixels is not None:
            size["longest_edge"] = int(self.max_pixels)
        if self.min_pixels is not None:
            size["shortest_edge"] = int(self.min_pixels)
        if "shortest_edge" in size and "longest_edge" in size and size["shortest_edge"] > size["longest_edge"]:
            size["shortest_edge"] = size["longest_edge"]
        return {"size": size}

    def _generate_batch(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[str]:
        import torch

        texts, images = [], []
        for parts in prompts:
            messages, imgs = self._messages(parts)
            texts.append(self.processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
            images.extend(imgs)
        batch = self.processor(text=texts, images=images or None, padding=True, padding_side="left",
                               return_tensors="pt", **(self._size_kwargs() if images else {}))
        batch = batch.to(self.device)
        tokenizer = getattr(self.processor, "tokenizer", self.processor)
        with torch.inference_mode():
            out = self.model.generate(**batch, max_new_tokens=int(max_new_tokens), do_sample=False,
                                      pad_token_id=tokenizer.pad_token_id)
        new_tokens = out[:, batch["input_ids"].shape[1]:]
        return tokenizer.batch_decode(new_tokens, skip_special_tokens=True)

    def generate(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[Generation]:
        results: List[Generation] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start:start + self.batch_size]
            try:
                results.extend(Generation(t) for t in self._generate_batch(chunk, max_new_tokens))
            except (RuntimeError, ValueError, TypeError, IndexError) as err:
                # e.g. CUDA OOM or an image the processor rejects: record it, keep the loop alive
                logger.warning("generation failed for %d prompt(s): %s", len(chunk), _one_line(err))
                results.extend(Generation(None, _one_line(err)) for _ in chunk)
        return results


class OpenAIBackend:
    """Any OpenAI-compatible chat server (vLLM, SGLang, OpenAI, ...), through :class:`ChatClient`.

    The API key is read from the environment variable ``api_key_env`` (never passed as an argument).
    ``num_workers`` requests run concurrently (answers keep the prompt order). ``temperature`` 0 = greedy.
    ``image_format``/``max_pixels`` control how images are encoded in the request.
    """

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY", timeout: float = 60.0,
                 max_retries: int = 2, num_workers: int = 4, temperature: float = 0.0, image_format: str = "PNG",
                 max_pixels: Optional[int] = 1_048_576, client: Any = None):
        from ...judges.chat_client import ChatClient

        self.client = client or ChatClient(base_url, model, api_key_env=api_key_env, timeout=timeout,
                                           max_retries=max_retries)
        self.num_workers = max(1, int(num_workers))
        self.temperature = float(temperature)
        self.image_format = image_format
        self.max_pixels = max_pixels

    def _one(self, parts: Sequence[Part], max_new_tokens: int) -> Generation:
        from ...judges.chat_client import ChatError, user_message

        try:
            message = user_message(list(parts), image_format=self.image_format, max_pixels=self.max_pixels)
            return Generation(self.client.chat([message], temperature=self.temperature, max_tokens=int(max_new_tokens)))
        except ChatError as err:
            return Generation(None, f"ChatError[{err.kind}]: {' '.join(str(err).split())[:300]}")
        except (TypeError, ValueError, OSError) as err:
            return Generation(None, _one_line(err))

    def generate(self, prompts: Sequence[Sequence[Part]], max_new_tokens: int) -> List[Generation]:
        if self.num_workers == 1 or len(prompts) <= 1:
            return [self._one(p, max_new_tokens) for p in prompts]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(self.num_workers, len(prompts))) as pool:
            return list(pool.map(lambda p: self._one(p, max_new_tokens), prompts))

    def close(self) -> None:
        self.client.close()

