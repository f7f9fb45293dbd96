"""Gradio widget of the MIEScore metric Space (evaluate's standard metric widget).

`evaluate.utils.launch_gradio_widget` is used as is on gradio 3 (it builds `gr.inputs.Dataframe`, removed in
gradio 4). On gradio >= 4 (the SDK this Space pins), `build_widget` builds the same interface from evaluate's
own helpers with the current component names.
"""

import os

import evaluate
from evaluate.utils import launch_gradio_widget

HERE = os.path.dirname(os.path.abspath(__file__))


def metric_script(folder: str = HERE) -> str:
    """The metric script beside this file: the folder's one ``.py`` file other than ``app.py``.

    evaluate.load("ORG/NAME") reads ``NAME.py`` from the Space, so the script carries the Space's name
    (``miescore_metric.py`` in the repository; ``miescore space build`` names it after the output folder).
    """
    scripts = sorted(name for name in os.listdir(folder) if name.endswith(".py") and name != "app.py")
    if len(scripts) != 1:
        raise RuntimeError(f"expected one metric script beside app.py in {folder!r}, found {scripts}")
    return os.path.join(folder, scripts[0])


# Load the script file itself (not the folder: on a Space the folder is named "app", and evaluate would look
# for app.py), so the Space works offline and never fetches a second copy from the Hub.
module = evaluate.load(metric_script())


def build_widget(metric):
    """`launch_gradio_widget`'s interface, without launching it, for gradio >= 4."""
    import gradio as gr
    from evaluate.utils.gradio import infer_gradio_input_types
    from evaluate.utils.gradio import json_to_string_type
    from evaluate.utils.gradio import parse_gradio_data
    from evaluate.utils.gradio import parse_readme

    features = metric.features[0] if isinstance(metric.features, list) else metric.features
    feature_names, feature_types = zip(*features.items())
    input_types = infer_gradio_input_types(feature_types)

    def compute(data):
        return metric.compute(**parse_gradio_data(data, input_types))

    return gr.Interface(
        fn=compute,
        inputs=gr.Dataframe(
            headers=list(feature_names),
            column_count=len(feature_names),
            row_count=1,
            datatype=json_to_string_type(input_types),
        ),
        outputs=gr.Textbox(label=metric.name),
        description=(
            metric.info.description
            + "\nEnter one JSON list per cell, e.g. [55.1, 60.3, 48.0] for a VQ/IF/AP triple."
        ),
        title=f"Metric: {metric.name}",
        article=parse_readme(os.path.join(HERE, "README.md")),
        flagging_mode="never",
    )


if __name__ == "__main__":
    import gradio

    if hasattr(gradio, "inputs"):  # gradio < 4: evaluate's widget works unchanged
        launch_gradio_widget(module)
    else:
        build_widget(module).launch()
