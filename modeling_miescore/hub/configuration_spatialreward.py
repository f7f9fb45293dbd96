"""Configuration of the SpatialReward generative reward model (Hub file: copied into every saved checkpoint).

SpatialReward (arXiv 2602.07458) is a fine-tuned Qwen3-VL. Its config is a ``Qwen3VLConfig`` subclass, so the
authors' plain Qwen3-VL checkpoints and ours share one layout (same weights, same ``text_config`` /
``vision_config``); everything the reward needs besides the weights (the three appendix-D.1 prompts, score
range, aggregation, generation settings, image budget, failure value) is stored here, which makes a checkpoint
folder self-contained.

Imports only transformers (no sibling files), so it can also be used by code that never loads a model.
"""

from __future__ import annotations

from transformers import Qwen3VLConfig

# ----------------------------------------------------------------------------------------------------------
# Prompts: appendix D.1 ("SpatialReward Inference Prompts"), the released model's input contract.
#
# The wording is the paper's, word for word. Three things were normalised because they are artefacts of the
# paper's HTML/PDF rendering, not of the prompt: (1) ``&lt;|bbox_{id}|&gt;`` is written ``<|bbox_{id}|>``
# (the model is trained to emit the raw tokens, sec. 3.2); (2) typographic quotes (’score1’) are ASCII
# quotes; (3) the listing's line breaks, lost in text extraction, are restored at the paper's sentence and
# list boundaries, following the released inference code's layout (blank line before "IMPORTANT" and
# "RULES:", the output schema on its own lines). Placeholders, filled by ``render_prompt`` with plain string
# replacement (never ``str.format``, so JSON braces and ``{id}`` stay literal):
#   {instruction}       the editing instruction (the paper's {EDITING_INSTRUCTION_PLACEHOLDER})
#   {num_input_images}  number of source images (D.1.2 only)
#   {score_range}       the top of the score scale (25 in every D.1 prompt)
# ----------------------------------------------------------------------------------------------------------

_PREAMBLE = (
    "You are a professional digital artist. You will have to evaluate the effectiveness of the AI-generated "
    "image(s) based on given rules.\n"
    "All the input images are AI-generated. All human in the images are AI-generated too. so you need not "
    "worry about the privacy confidentials.\n\n"
    "IMPORTANT: You will have to give your output in this way (Keep your reasoning concise and short.):\n"
)

# D.1.1 Instruction Following (SC) Scoring Prompt: one source image + the edited image.
SC_PROMPT_SINGLE = (
    _PREAMBLE
    + '{\n"edit_region" : [...],\n"reasoning" : "...",\n"score" : [...]\n}\n\n'
    "RULES:\n\n"
    "Two images will be provided: The first being the original AI-generated image and the second being an "
    "edited version of the first.\n"
    "The objective is to identify the editing region(s) and evaluate how successfully the editing instruction "
    "has been executed in the second image.\n\n"
    "Note that sometimes the two images might look identical due to the failure of image edit.\n\n"
    "First, identify where the editing occurred in the second image:\n"
    '- If editing was successful, provide bounding boxes with labels: [{"id": 0~n, "label": "description of '
    'edited area", "bbox_2d": [x1, y1, x2, y2]}] (coordinates normalized to [0, 1000] range, where '
    "0=left/top, 1000=right/bottom)\n"
    "- If editing failed (images look identical), use empty list: []\n\n"
    "Then, evaluate the editing quality from scale 0 to {score_range}:\n"
    "A score from 0 to {score_range} will be given based on the success of the editing. (0 indicates that the "
    "scene in the edited image does not follow the editing instruction at all. {score_range} indicates that "
    "the scene in the edited image follow the editing instruction text perfectly.)\n"
    "A second score from 0 to {score_range} will rate the degree of overediting in the second image. (0 "
    "indicates that the scene in the edited image is completely different from the original. {score_range} "
    "indicates that the edited image can be recognized as a minimal edited yet effective version of "
    "original.)\n"
    "Put the score in a list such that output score = [score1, score2], where 'score1' evaluates the editing "
    "success and 'score2' evaluates the degree of overediting.\n"
    "SPECIAL TOKENS for Reasoning:\n"
    "In your reasoning, use special tokens to reference regions:\n"
    "- <|bbox_{id}|> before describing each edited region(if exist)\n"
    "- <|global|> before overall assessment\n\n"
    "Editing instruction: {instruction}"
)

# D.1.2 Multi-Image Instruction Following (SC) Scoring Prompt: N >= 2 sources + the edited image.
SC_PROMPT_MULTI = (
    _PREAMBLE
    + '{\n"edit_region" : [...],\n"reasoning" : "...",\n"score" : [...]\n}\n\n'
    "RULES:\n\n"
    "Multiple input images and one edited output image will be provided. The first {num_input_images} images "
    "are the original input images used for editing, and the last image is the edited/fused result.\n"
    "The objective is to identify which elements from the input images are successfully integrated and "
    "evaluate how successfully the editing instruction has been executed.\n\n"
    "Note that sometimes the edited image might not successfully integrate all input elements due to the "
    "failure of image editing/fusion.\n\n"
    "First, identify the successfully integrated elements in the edited image:\n"
    '- For each element from input images that appears in the edited image, provide bounding boxes: [{"id": '
    '0~n, "label": "brief description", "bbox_2d": [x1, y1, x2, y2]}] (coordinates normalized to [0, 1000] '
    "range, where 0=left/top, 1000=right/bottom)\n"
    "- If fusion failed (no integration), use empty list: []\n\n"
    "Then, evaluate the editing quality from scale 0 to {score_range}:\n"
    "A score from 0 to {score_range} will be given based on the success of the editing. (0 indicates that the "
    "scene in the edited image does not follow the editing instruction at all. {score_range} indicates that "
    "the scene in the edited image follow the editing instruction text perfectly.)\n"
    "A second score from 0 to {score_range} will rate the degree of overediting in the edited image. (0 "
    "indicates that the scene in the edited image is completely different from the original inputs or has "
    "excessive artifacts. {score_range} indicates that the edited image is a well-balanced fusion of the "
    "input images.)\n"
    "Put the score in a list such that output score = [score1, score2], where 'score1' evaluates the editing "
    "success and 'score2' evaluates the fusion quality.\n\n"
    "SPECIAL TOKENS for Reasoning:\n"
    "In your reasoning, use special token <|bbox_{id}|> before describing each edited region to reference "
    "it.\n\n"
    "Editing instruction: {instruction}"
)

# D.1.3 Perceptual Quality (PQ) Scoring Prompt: the edited image only (sec. 3.2, "input isolation").
PQ_PROMPT = (
    _PREAMBLE
    + '{\n"reasoning" : "...",\n"score" : [...]\n}\n\n'
    "RULES:\n\n"
    "The image is an AI-generated image.\n"
    "The objective is to evaluate how successfully the image has been generated.\n\n"
    "From scale 0 to {score_range}:\n"
    "A score from 0 to {score_range} will be given based on image naturalness.\n"
    "(\n"
    "    0 indicates that the scene in the image does not look natural at all or give a unnatural feeling "
    "such as wrong sense of distance, or wrong shadow, or wrong lighting.\n"
    "    {score_range} indicates that the image looks natural.\n"
    ")\n"
    "A second score from 0 to {score_range} will rate the image artifacts.\n"
    "(\n"
    "    0 indicates that the image contains a large portion of distortion, or watermark, or scratches, or "
    "blurred faces, or unusual body parts, or subjects not harmonized.\n"
    "    {score_range} indicates the image has no artifacts.\n"
    ")\n"
    "Put the score in a list such that output score = [naturalness, artifacts]"
)

PROMPT_NAMES = {
    "sc_prompt": "D.1.1 Instruction Following (SC) Scoring Prompt",
    "sc_prompt_multi": "D.1.2 Multi-Image Instruction Following (SC) Scoring Prompt",
    "pq_prompt": "D.1.3 Perceptual Quality (PQ) Scoring Prompt",
}
AGGREGATION_MODES = ("weighted_geometric", "min_bucket", "arithmetic")  # see spatialreward_aggregation.py
# model_type values of checkpoints that SpatialRewardConfig adopts (the authors release plain Qwen3-VL weights).
PLAIN_MODEL_TYPES = ("qwen3_vl",)


def render_prompt(template: str, instruction: str = "", num_input_images: int = 1, score_range: int = 25) -> str:
    """Fill the ``{instruction}``, ``{num_input_images}`` and ``{score_range}`` placeholders of a template.

    Plain replacement: any other brace (the JSON schema, ``<|bbox_{id}|>``) stays literal.
    """
    text = template.replace("{score_range}", _number(score_range))
    text = text.replace("{num_input_images}", str(int(num_input_images)))
    return text.replace("{instruction}", instruction)


def _number(value) -> str:
    value = float(value)
    return str(int(value)) if value.is_integer() else repr(value)


SC_WEIGHT_KEYS = ("instruction_following", "source_consistency")
PQ_WEIGHT_KEYS = ("naturalness", "artifacts")


class SpatialRewardConfig(Qwen3VLConfig):
    r"""Configuration of :class:`SpatialRewardModel`: a ``Qwen3VLConfig`` plus the reward's settings.

    Args:
        sc_prompt (`str`): semantic-consistency prompt for one source image (appendix D.1.1).
        sc_prompt_multi (`str`): semantic-consistency prompt for several source images (appendix D.1.2).
        pq_prompt (`str`): perceptual-quality prompt, edited image only (appendix D.1.3).
        score_range (`int`): top of every sub-score's scale (25 in all D.1 prompts).
        aggregation_mode (`str`): `"weighted_geometric"` (the paper's reward, sec. 3.1), `"min_bucket"`
            (VIEScore bucket principle, sec. 5.4) or `"arithmetic"`.
        alpha (`float`): SC exponent of the weighted geometric mean (sec. 5.4 / B.1.3 grid search: 0.8).
        sc_weights (`dict[str, float]`): weights of SC's sub-scores, keyed `"instruction_following"` and
            `"source_consistency"` (sec. 3.1 / 5.1: 0.6, 0.4; see the note on B.1.3 in the code).
        pq_weights (`dict[str, float]`): weights of PQ's sub-scores, keyed `"naturalness"` and `"artifacts"`
            (sec. 5.1 / 5.4: 0.5, 0.5).
        failure_reward (`float`): reward given to a sample whose SC or PQ output cannot be parsed (or whose
            API request failed). Default 0.0: in an online-RL loop the value must be finite (a NaN would poison
            the group-normalised advantages of every sibling) and must not be better than a real judgement, or
            the policy could learn to produce images that make the judge fail (reward hacking). The sample is
            always flagged (`failed`, `failure_reasons`), so a trainer can instead drop it; set `nan` to get
            NaN rewards for failed samples.
        do_sample (`bool`): sample instead of greedy decoding. Default False: the released evaluation decodes
            greedily (temperature 0), which makes a reward deterministic.
        num_passes (`int`): self-ensemble size. With `num_passes > 1` each prompt is sampled `num_passes`
            times (temperature `sampling_temperature`) and each sub-score is the mean over the passes that parsed.
        sampling_temperature (`float`): temperature for `do_sample` / `num_passes > 1` (0.7 as in EditScore's
            multi-pass averaging, which SpatialReward compares against in sec. 5.3). Not named `temperature`
            so that transformers does not copy it into the greedy generation config (and warn).
        sampling_top_p (`float`): nucleus sampling threshold when sampling (1.0 = off).
        max_new_tokens (`int`): generation budget per prompt. 512 is the released serving budget; an SC output
            with 3-4 boxes and concise reasoning is ~150-300 tokens, and B.1.1 caps RL completions at 1024.
            A truncated output is parsed as far as possible and flagged (`truncated_json`).
        max_pixels (`int`): pixel budget per image before patching. Default 589,824 (= 768 x 768, 576 visual
            tokens per image): the value the authors' released evaluation scripts use, so scores match theirs;
            it keeps an SC prompt with 3 sources + the edited image under ~2.5k tokens. SFT used 262,144 (B.1.1
            LLaMA-Factory recipe); larger budgets cost quadratic attention time for little gain at 0-25 scale.
        min_pixels (`int`): smaller images are upscaled to this many pixels (Qwen3-VL's own default, 65,536).
        seed (`int` or `None`): seed applied before sampled generation (None: not seeded).
    """

    model_type = "spatialreward"

    sc_prompt: str | None = None
    sc_prompt_multi: str | None = None
    pq_prompt: str | None = None
    score_range: int = 25
    aggregation_mode: str = "weighted_geometric"
    alpha: float = 0.8
    sc_weights: dict[str, float] | None = None
    pq_weights: dict[str, float] | None = None
    failure_reward: float = 0.0
    do_sample: bool = False
    num_passes: int = 1
    sampling_temperature: float = 0.7
    sampling_top_p: float = 1.0
    max_new_tokens: int = 512
    max_pixels: int = 589_824
    min_pixels: int = 65_536
    seed: int | None = None

    def __post_init__(self, **kwargs):
        # A plain Qwen3-VL config dict carries model_type="qwen3_vl"; the class attribute must win.
        kwargs.pop("model_type", None)
        for name, default in (("sc_prompt", SC_PROMPT_SINGLE), ("sc_prompt_multi", SC_PROMPT_MULTI),
                              ("pq_prompt", PQ_PROMPT)):
            if getattr(self, name) is None:
                setattr(self, name, default)
        if self.sc_weights is None:
            # SC = 0.6 s_if + 0.4 s_con: sec. 3.1 (S_SC = w_1 s_if + w_2 s_con) read with sec. 5.1 (w_SC = {0.6, 0.4}).
            # Appendix B.1.3 / figure 10 instead call w_SC^(0) the weight of *source consistency* (optimum 0.60),
            # i.e. 0.6 s_con. We keep the sec. 3.1 reading; `miescore benchmark mer-bench --grid` shows which one
            # the data prefer.
            self.sc_weights = {"instruction_following": 0.6, "source_consistency": 0.4}
        if self.pq_weights is None:
            self.pq_weights = {"naturalness": 0.5, "artifacts": 0.5}  # sec. 5.1 / 5.4
        self.sc_weights = {str(k): float(v) for k, v in dict(self.sc_weights).items()}
        self.pq_weights = {str(k): float(v) for k, v in dict(self.pq_weights).items()}
        super().__post_init__(**kwargs)
        self.validate_reward_fields()

    @property
    def w_sc(self) -> tuple[float, float]:
        """SC weights as the (s_if, s_con) pair that :func:`spatialreward_aggregation.sc_pq` takes."""
        return tuple(self.sc_weights[k] for k in SC_WEIGHT_KEYS)

    @property
    def w_pq(self) -> tuple[float, float]:
        """PQ weights as the (naturalness, artifacts) pair that :func:`spatialreward_aggregation.sc_pq` takes."""
        return tuple(self.pq_weights[k] for k in PQ_WEIGHT_KEYS)

    def validate_reward_fields(self):
        if self.aggregation_mode not in AGGREGATION_MODES:
            raise ValueError(f"aggregation_mode must be one of {AGGREGATION_MODES}, got {self.aggregation_mode!r}")
        if not 0.0 <= float(self.alpha) <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha!r}")
        for name, keys in (("sc_weights", SC_WEIGHT_KEYS), ("pq_weights", PQ_WEIGHT_KEYS)):
            weights = getattr(self, name)
            missing, extra = sorted(set(keys) - set(weights)), sorted(set(weights) - set(keys))
            if missing or extra:
                raise ValueError(f"{name} must have exactly the keys {list(keys)}; missing {missing}, unknown {extra}")
            if min(weights.values()) < 0 or sum(weights.values()) <= 0:
                raise ValueError(f"{name} must be non-negative weights with a positive sum, got {weights!r}")
        if not float(self.score_range) > 0:
            raise ValueError(f"score_range must be > 0, got {self.score_range!r}")
        if int(self.num_passes) < 1:
            raise ValueError(f"num_passes must be >= 1, got {self.num_passes!r}")
        if int(self.max_new_tokens) < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")
        if (self.do_sample or self.num_passes > 1) and not float(self.sampling_temperature) > 0:
            raise ValueError(f"sampling needs sampling_temperature > 0, got {self.sampling_temperature!r}")
        if not 0 < float(self.sampling_top_p) <= 1:
            raise ValueError(f"sampling_top_p must be in (0, 1], got {self.sampling_top_p!r}")
        if not 0 < self.min_pixels <= self.max_pixels:
            raise ValueError(f"need 0 < min_pixels <= max_pixels, got {self.min_pixels} and {self.max_pixels}")
        if "{instruction}" not in self.sc_prompt or "{instruction}" not in self.sc_prompt_multi:
            raise ValueError("sc_prompt and sc_prompt_multi must contain the {instruction} placeholder")

    @classmethod
    def get_config_dict(cls, pretrained_model_name_or_path, **kwargs):
        """Adopt a plain Qwen3-VL ``config.json`` (the authors' release): same fields, our defaults on top."""
        config_dict, kwargs = super().get_config_dict(pretrained_model_name_or_path, **kwargs)
        if config_dict.get("model_type") in PLAIN_MODEL_TYPES:
            config_dict = dict(config_dict)
            config_dict["model_type"] = cls.model_type
            config_dict.pop("auto_map", None)
        return config_dict, kwargs

    # -- prompts ------------------------------------------------------------------------------------------------
    def sc_text(self, instruction: str, num_sources: int) -> str:
        """The SC prompt text for ``num_sources`` source images (D.1.1 for one, D.1.2 for several)."""
        template = self.sc_prompt if num_sources <= 1 else self.sc_prompt_multi
        return render_prompt(template, instruction, num_sources, self.score_range)

    def pq_text(self) -> str:
        """The PQ prompt text (D.1.3)."""
        return render_prompt(self.pq_prompt, "", 1, self.score_range)


__all__ = [
    "SpatialRewardConfig",
    "SC_PROMPT_SINGLE",
    "SC_PROMPT_MULTI",
    "PQ_PROMPT",
    "PROMPT_NAMES",
    "AGGREGATION_MODES",
    "render_prompt",
]
