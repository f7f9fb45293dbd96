"""The MER-Bench annotation app (Gradio): the hierarchical ranking protocol of SpatialReward sec. 4.3 / A.1.

:class:`AnnotationSession` holds the callbacks (plain Python, tested without a browser); :func:`build_annotation_app`
wires them to Gradio components. The protocol, as annotators see it, is in ``docs/mer_bench_construction.md``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from ...hub.errors import MIEScoreInputError
from ...hub.image_io import load_image
from ..schema import TIERS
from .annotation_store import AnnotationSample, AnnotationStore

__all__ = ["AnnotationSession", "RATING_FIELDS", "TIER_CHOICES", "build_annotation_app"]

TIER_CHOICES = ("Good", "Medium", "Poor")  # A.1's 3-tier scale; stored lower-case ("poor" = A.1's "Bad")
RATING_FIELDS = ("sc", "pq", "overall")  # the order on screen: auxiliary SC and PQ first, then overall
_FIELD_LABELS = {"sc": "Semantic consistency (SC)", "pq": "Perceptual quality (PQ)", "overall": "Overall quality"}
assert {c.lower() for c in TIER_CHOICES} == set(TIERS)


class AnnotationSession:
    """The app's logic over one store: ``open`` (start or continue) and ``submit`` each return a view dict::

        {"annotator", "sample_id" (None when nothing is left), "instruction", "original" (path),
         "candidates": [{"candidate_id", "image"}], "message"}
    """

    def __init__(self, store: AnnotationStore):
        self.store = store
        self.max_candidates = max(len(s.candidates) for s in store.samples)

    def _view(self, annotator: str, sample: Optional[AnnotationSample], message: str = "") -> Dict[str, Any]:
        progress = self.store.progress(annotator)
        head = f"**{annotator}**: {progress['done']} sample(s) done, {progress['open']} left"
        if sample is None:
            return {"annotator": annotator, "sample_id": None, "instruction": "", "original": None, "candidates": [],
                    "message": " ".join(filter(None, [message, head, "- nothing left to annotate. Thank you!"]))}
        return {"annotator": annotator, "sample_id": sample.sample_id, "instruction": sample.instruction,
                "original": sample.image,
                "candidates": [{"candidate_id": c["candidate_id"], "image": c["image"]} for c in sample.candidates],
                "message": " ".join(filter(None, [message, f"{head}. Sample `{sample.sample_id}`."]))}

    def open(self, annotator: str) -> Dict[str, Any]:
        """Start or continue: the annotator's next unannotated sample (a message when the id is unusable)."""
        annotator = (annotator or "").strip()
        try:
            return self._view(annotator, self.store.next_sample(annotator))
        except MIEScoreInputError as err:
            return {"annotator": annotator, "sample_id": None, "instruction": "", "original": None, "candidates": [],
                    "message": f"**{err}.**"}

    def submit(self, annotator: str, sample_id: str, values: List[Optional[str]]) -> Dict[str, Any]:
        """Store the ratings (``values``: per candidate slot, SC, PQ, overall, as on screen) and move on; an
        incomplete form keeps the same sample with a message naming what is missing."""
        annotator = (annotator or "").strip()
        sample = self.store.sample_by_id.get(sample_id or "")
        if sample is None or not annotator:
            return self.open(annotator)
        ratings = {}
        for slot, candidate in enumerate(sample.candidates):
            given = values[slot * len(RATING_FIELDS):(slot + 1) * len(RATING_FIELDS)]
            ratings[candidate["candidate_id"]] = {f: (v or "").lower() for f, v in zip(RATING_FIELDS, given)}
        try:
            self.store.submit(annotator, sample_id, ratings)
        except MIEScoreInputError as err:
            view = self._view(annotator, sample, f"**Not saved:** {err}.")
            view["keep_values"] = True
            return view
        return self._view(annotator, self.store.next_sample(annotator), f"Saved `{sample_id}`.")


def _outputs(session: AnnotationSession, view: Dict[str, Any], values: List[Optional[str]]) -> list:
    """Component values for a view: message, original, instruction, sample state, then per slot image + radios."""
    import gradio as gr

    out: list = [view["message"], load_image(view["original"]) if view["original"] else None,
                 f"**Instruction:** {view['instruction']}" if view["instruction"] else "", view["sample_id"]]
    keep = view.get("keep_values", False)
    for slot in range(session.max_candidates):
        shown = slot < len(view["candidates"])
        image = load_image(view["candidates"][slot]["image"]) if shown else None
        out.append(gr.update(value=image, visible=shown, label=f"Candidate {slot + 1}"))
        for k in range(len(RATING_FIELDS)):
            value = values[slot * len(RATING_FIELDS) + k] if keep else None
            out.append(gr.update(value=value, visible=shown))
    return out


def build_annotation_app(store: AnnotationStore, title: str = "MER-Bench annotation"):
    """The Gradio Blocks app over ``store`` (module docstring); launch it with ``.launch()``."""
    import gradio as gr

    session = AnnotationSession(store)
    with gr.Blocks(title=title) as demo:
        gr.Markdown(f"# {title}\nRate each candidate's **SC** and **PQ**, then its **overall** tier "
                    "(Good: every edit done, natural, no over-editing; Medium: mostly done, minor flaws; "
                    "Poor: edits missing, severe over-editing or artefacts). Five annotators per sample.")
        with gr.Row():
            annotator = gr.Textbox(label="Annotator id", elem_id="annotator-id", scale=3)
            start = gr.Button("Start / continue", elem_id="start-button", scale=1)
        message = gr.Markdown(elem_id="status-message")
        sample_state = gr.State(None)
        with gr.Row():
            original = gr.Image(label="Original image", type="pil", interactive=False, elem_id="original-image")
            instruction = gr.Markdown(elem_id="instruction")
        candidate_components, radios = [], []
        with gr.Row():
            for slot in range(session.max_candidates):
                with gr.Column(min_width=200):
                    candidate_components.append(gr.Image(type="pil", interactive=False, visible=False,
                                                         elem_id=f"candidate-{slot}-image"))
                    for field in RATING_FIELDS:
                        radio = gr.Radio(list(TIER_CHOICES), label=_FIELD_LABELS[field], visible=False,
                                         elem_id=f"candidate-{slot}-{field}")
                        radios.append(radio)
                        candidate_components.append(radio)
        submit = gr.Button("Submit and next", variant="primary", elem_id="submit-button")
        outputs = [message, original, instruction, sample_state, *candidate_components]

        def on_open(who, *values):
            return _outputs(session, session.open(who), list(values))

        def on_submit(who, sample_id, *values):
            return _outputs(session, session.submit(who, sample_id, list(values)), list(values))

        start.click(on_open, [annotator, *radios], outputs)
        annotator.submit(on_open, [annotator, *radios], outputs)
        submit.click(on_submit, [annotator, sample_state, *radios], outputs)
    demo.annotation_session = session
    return demo
