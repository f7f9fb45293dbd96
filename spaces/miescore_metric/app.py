"""Gradio widget of the MIEScore metric Space (evaluate's standard metric widget).

`evaluate.utils.launch_gradio_widget` is used as is on gradio 3 (it builds `gr.inputs.Dataframe`, removed in
gradio 4). On gradio >= 4 (the SDK this Space pins), `build_widget` builds the same interface from evaluate's
own helpers with the current component names.
"""

import os

import evaluate
from evaluate.utils import launch_gradio_widget

HERE = os.path.dirname(os.path.abspath(__file__))

# The metric script sits next to this file: load the folder, so the Space works offline and
# never fetches a second copy from the Hub.
module = evaluate.load(HERE)


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
