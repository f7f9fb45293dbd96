"""The ``image-edit-scoring`` pipeline: ``pipeline("image-edit-scoring", model=CKPT, trust_remote_code=True)``.

A custom pipeline in the transformers sense: every MIEScore and SpatialReward checkpoint names it in its config
(``custom_pipelines``, set by the models' ``save_pretrained`` from :data:`CUSTOM_PIPELINES`) and carries this file,
so ``transformers.pipeline`` loads :class:`ImageEditScoringPipeline` from the checkpoint with
``get_class_from_dynamic_module`` and the model with ``AutoModel``. Inputs are ``{"sources", "edited",
"instruction"}`` dicts (one, or a list); images are paths, PIL images or numpy arrays. The whole list goes to the
model's own batched entry point (``MIEScoreModel.score_batch``, ``SpatialRewardModel.evaluate_edits``), so
batching, length sorting and shared-prefix reuse are the models' own.

Outputs:

* MIEScore: the score dict of ``score`` (``visual_quality``, ``instruction_following``,
  ``attribute_preservation``, ``overall``; 0-100).
* SpatialReward: the judgement as a dict (``SpatialRewardResult.to_dict``): ``reward`` (0-1), the four 0-25
  sub-scores, ``sc``/``pq``, the grounded ``regions`` (boxes in 0-1000 and in pixels), the reasonings and the
  failure flags. The generated texts (``raw_sc``/``raw_pq``) are left out unless ``return_raw_text=True``.

Hub file: copied into every checkpoint; imports only transformers.
"""

from __future__ import annotations

from collections.abc import Mapping

from transformers import Pipeline

PIPELINE_TASK = "image-edit-scoring"
# The value of a checkpoint config's ``custom_pipelines`` (the format ``Pipeline.save_pretrained`` writes): the
# class as ``module.Class`` inside the checkpoint, the model class(es) by their transformers name.
CUSTOM_PIPELINES = {
    PIPELINE_TASK: {"impl": "pipeline_miescore.ImageEditScoringPipeline", "pt": ["AutoModel"], "type": "multimodal"},
}
_RAW_TEXT_FIELDS = ("raw_sc", "raw_pq")


class ImageEditScoringPipeline(Pipeline):
    """Score multi-source edits with a MIEScore or SpatialReward checkpoint.

    Call parameters (also accepted by ``pipeline(...)``): ``batch_size`` (samples per model batch, default 8),
    ``progress`` (a tqdm bar), ``max_image_pixels`` (decoding limit per image), ``reuse_prefix`` (run the prompt
    prefix that edits of the same sources and instruction share once; default True) and, for SpatialReward,
    ``return_raw_text``.
    """

    # the models load their own processor from the checkpoint (saved beside the weights)
    _load_processor = False
    _load_image_processor = False
    _load_video_processor = False
    _load_feature_extractor = False
    _load_tokenizer = False

    def _sanitize_parameters(self, progress=None, max_image_pixels=None, reuse_prefix=None, return_raw_text=None):
        forward = {key: value for key, value in (("progress", progress), ("max_image_pixels", max_image_pixels),
                                                 ("reuse_prefix", reuse_prefix)) if value is not None}
        postprocess = {"return_raw_text": return_raw_text} if return_raw_text is not None else {}
        return {}, forward, postprocess

    def __call__(self, inputs, batch_size: int | None = None, **kwargs):
        """Score one edit (a dict: returns one result) or a list of edits (returns a list, in input order)."""
        single = isinstance(inputs, Mapping)
        samples = [inputs] if single else list(inputs)
        _, forward, postprocess = self._sanitize_parameters(**kwargs)
        forward = {**self._forward_params, **forward}
        postprocess = {**self._postprocess_params, **postprocess}
        batch_size = batch_size or self._batch_size or 8
        results = self._forward([self.preprocess(s, where=f"input {i}") for i, s in enumerate(samples)],
                                batch_size=batch_size, **forward)
        outputs = [self.postprocess(result, **postprocess) for result in results]
        return outputs[0] if single else outputs

    def preprocess(self, sample, where: str = "input"):
        if not isinstance(sample, Mapping):
            raise TypeError(f"{where}: expected a dict with 'sources', 'edited' and 'instruction', "
                            f"got {type(sample).__name__}")
        return sample

    def _forward(self, samples, batch_size: int = 8, **forward):
        if self.model.config.model_type == "spatialreward":
            return self.model.evaluate_edits(samples, batch_size=batch_size, **forward)
        return self.model.score_batch(samples, batch_size=batch_size, **forward)

    def postprocess(self, result, return_raw_text: bool = False):
        if isinstance(result, Mapping):  # MIEScore: already the score dict
            return dict(result)
        output = result.to_dict()
        if not return_raw_text:
            for name in _RAW_TEXT_FIELDS:
                output.pop(name)
        return output


__all__ = ["CUSTOM_PIPELINES", "ImageEditScoringPipeline", "PIPELINE_TASK"]
