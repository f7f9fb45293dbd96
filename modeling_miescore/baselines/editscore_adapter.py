"""EditScore (Luo et al. 2025) as a single-source evaluator for ``miescore baselines --evaluator`` (Table 3, ✩ row
"EditScore (Qwen3)"), through its installable package (``pip install editscore``, 0.2)::

    miescore baselines --dataset MIE --split test --out preds-editscore.jsonl \\
        --evaluator modeling_miescore.baselines.editscore_adapter:editscore \\
        --evaluator-option model_name_or_path=Qwen/Qwen3-VL-8B-Instruct \\
        --evaluator-option lora_path=EditScore/EditScore-Qwen3-VL-8B-Instruct

The package supplies ``editscore.EditScore``: its prompts, answer parser, ``num_pass`` passes, score scale
(rescaled to 0-10) and overall sqrt(SC x PQ). This adapter supplies the model object it calls, because in 0.2
the local backends move every input to ``"cuda"`` and the OpenAI backend reads answers without bound:
:class:`LocalVLM` runs on ``device`` with their input format (Qwen2.5-VL labelled chat text, Qwen3-VL chat
template; temperature 0.7, top-p 0.9, top-k 20, 512 new tokens; a LoRA merged with peft), and
:class:`EndpointVLM` sends the same messages through :class:`~modeling_miescore.judges.chat_client.ChatClient`.

A failed answer is never a score: EditScore substitutes a **random** score when it gives up parsing
(``"guess_if_cannot_parse | ..."``); such a result is refused (:class:`EditScoreAnswerError`), so the edit is left
out. Score keys: ``instruction_following`` = ``prompt_following``, ``attribute_preservation`` = ``consistency``,
``visual_quality`` = ``perceptual_quality``, ``overall``; all on 0-10.
"""

from __future__ import annotations

import contextlib
import io
import sys
from typing import Any

from ..hub.errors import MIEScoreInputError
from .scorers import resolve_device

__all__ = ["EditScoreAnswerError", "EndpointVLM", "LocalVLM", "editscore"]

# editscore/mllm_tools/qwen25vl.py and qwen3vl.py, Qwen25VL.inference: the sampling of the authors' local backends
SAMPLING = {"top_p": 0.9, "top_k": 20, "max_new_tokens": 512}
KEY_MAP = {"instruction_following": "prompt_following", "attribute_preservation": "consistency",
           "visual_quality": "perceptual_quality", "overall": "overall"}
_GUESS = "guess_if_cannot_parse"  # editscore.utils.mllm_output_to_dict's marker of a random substitute


class EditScoreAnswerError(RuntimeError):
    """EditScore could not read a score from the model's answer (the package would have used a random one)."""


def _require_editscore():
    """``import editscore``, undoing the import's ``sys.path.insert(0, 'editscore')`` (editscore 0.2
    ``__init__.py``): a path relative to the working directory at the front of ``sys.path`` would let a folder
    named ``editscore`` there shadow any module imported later."""
    try:
        import editscore
    except ImportError:
        raise MIEScoreInputError("the EditScore adapter needs the editscore package: pip install editscore") from None
    finally:
        sys.path[:] = [p for p in sys.path if p != "editscore"]
    return editscore


class LocalVLM:
    """A local transformers Qwen2.5-VL / Qwen3-VL checkpoint (optionally + LoRA) behind EditScore's model interface."""

    def __init__(self, model_name_or_path: str, lora_path: str | None = None, *, device: str = "auto",
                 dtype: str = "bfloat16", temperature: float = 0.7, max_new_tokens: int = SAMPLING["max_new_tokens"]):
        import torch
        from transformers import AutoModelForImageTextToText, AutoProcessor


        self.device = resolve_device(device)
        self.model = AutoModelForImageTextToText.from_pretrained(model_name_or_path, dtype=getattr(torch, dtype))
        if lora_path:
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, lora_path).merge_and_unload()
        self.model.to(self.device).eval()
        self.processor = AutoProcessor.from_pretrained(model_name_or_path)
        self.family = self.model.config.model_type
        if self.family not in ("qwen2_5_vl", "qwen3_vl"):
            raise MIEScoreInputError(f"EditScore runs on Qwen2.5-VL or Qwen3-VL; '{model_name_or_path}' is "
                                     f"{self.family!r}")
        self.temperature, self.max_new_tokens = temperature, max_new_tokens

    def prepare_input(self, images, text_prompt: str = ""):
        images = images if isinstance(images, list) else [images]
        messages = [{"role": "user", "content": [{"type": "image", "image": image} for image in images]
                     + [{"type": "text", "text": text_prompt}]}]
        if self.family == "qwen3_vl":  # qwen3vl.py: the processor's chat template
            inputs = self.processor.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                        return_dict=True, return_tensors="pt")
        else:  # qwen25vl.py: images labelled <img1>, <img2>, ... in a hand-written chat text, qwen_vl_utils sizes
            from qwen_vl_utils import process_vision_info

            labelled = "".join(f"<img{i}>: <|vision_start|><|image_pad|><|vision_end|>"
                               for i in range(1, len(images) + 1))
            text = (f"<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{labelled}"
                    f"{text_prompt}<|im_end|>\n<|im_start|>assistant\n")
            image_inputs, _ = process_vision_info(messages)
            inputs = self.processor(text=[text], images=image_inputs, padding=True, return_tensors="pt")
        return inputs.to(self.device)

    def inference(self, inputs, seed: int | None = None) -> str:
        import torch
        from transformers import set_seed

        if seed is not None:
            set_seed(seed)
        with torch.inference_mode():
            generated = self.model.generate(**inputs, do_sample=True, temperature=self.temperature,
                                            top_p=SAMPLING["top_p"], top_k=SAMPLING["top_k"],
                                            max_new_tokens=self.max_new_tokens)
        new_tokens = generated[:, inputs["input_ids"].shape[1]:]
        return self.processor.batch_decode(new_tokens, skip_special_tokens=True)[0].strip()


class EndpointVLM:
    """An OpenAI-compatible endpoint serving the EditScore model, behind EditScore's model interface."""

    def __init__(self, base_url: str, model: str, *, temperature: float = 0.7, api_key_env: str = "OPENAI_API_KEY",
                 timeout: float = 180.0, max_new_tokens: int = SAMPLING["max_new_tokens"]):
        from ..judges.chat_client import ChatClient  # deferred: loads httpcore, httpx

        self.client = ChatClient(base_url, model, api_key_env=api_key_env, timeout=timeout)
        self.temperature, self.max_new_tokens = temperature, max_new_tokens

    def prepare_input(self, images, text_prompt: str = ""):
        from ..judges.chat_client import user_message  # deferred: loads httpcore, httpx

        images = images if isinstance(images, list) else [images]
        return [user_message([text_prompt, *images], image_format="JPEG")]  # editscore's openai.py: text first

    def inference(self, messages, seed: int | None = None) -> str:
        extra = {"seed": seed} if seed is not None else {}
        return self.client.chat(messages, temperature=self.temperature, max_tokens=self.max_new_tokens,
                                top_p=SAMPLING["top_p"], **extra)


def editscore(model_name_or_path: str | None = None, lora_path: str | None = None, *, base_url: str | None = None,
              model: str | None = None, device: str = "auto", dtype: str = "bfloat16", score_range: int = 25,
              temperature: float = 0.7, num_pass: int = 1, seed: int = 42, reduction: str = "average_last",
              max_new_tokens: int = SAMPLING["max_new_tokens"]):
    """The factory ``--evaluator modeling_miescore.baselines.editscore_adapter:editscore`` calls with its options.

    Local: ``model_name_or_path`` (a Qwen2.5-VL / Qwen3-VL checkpoint) and optionally ``lora_path`` (the EditScore
    LoRA), on ``device`` in ``dtype``. Endpoint: ``base_url`` and ``model`` (the served name). The other options are
    ``editscore.EditScore``'s. Returns ``evaluate(source, edited, instruction) -> {score key: 0-10}``.
    """
    package = _require_editscore()
    if (model_name_or_path is None) == (base_url is None):
        raise MIEScoreInputError("EditScore needs either model_name_or_path=<local checkpoint> or base_url=<endpoint> "
                                 "(with model=<served name>)")
    if base_url is not None:
        if not model:
            raise MIEScoreInputError("EditScore with base_url needs model=<the name the server serves>")
        vlm: Any = EndpointVLM(base_url, model, temperature=temperature, max_new_tokens=max_new_tokens)
    else:
        vlm = LocalVLM(model_name_or_path, lora_path, device=device, dtype=dtype, temperature=temperature,
                       max_new_tokens=max_new_tokens)
    # backbone "adapter" matches none of the package's backends, so EditScore builds its prompts and loads nothing;
    # the model object is this adapter's (see the module docstring)
    scorer = package.EditScore(backbone="adapter", score_range=score_range, temperature=temperature,
                               num_pass=num_pass, seed=seed, reduction=reduction)
    scorer.model = vlm

    def evaluate(source, edited, instruction: str) -> dict[str, float]:
        with contextlib.redirect_stdout(io.StringIO()) as said:  # the package prints its parse failures
            result = scorer.evaluate([source, edited], instruction)
        guessed = [(prompt, str(result.get(f"{prompt}_reasoning", ""))) for prompt in ("SC", "PQ")
                   if _GUESS in str(result.get(f"{prompt}_reasoning", ""))]
        if guessed:
            prompt, reasoning = guessed[0]
            raise EditScoreAnswerError(f"EditScore could not parse the model's {prompt} answer (the package would "
                                       "use a random score); it starts "
                                       f"{reasoning.split('|', 1)[-1].strip()[:80]!r}")
        if said.getvalue().strip():
            print(said.getvalue().strip()[:500], file=sys.stderr)
        return {key: float(result[theirs]) for key, theirs in KEY_MAP.items()}

    return evaluate
