"""MIEScore Space: score a multi-source image edit with MIEScore or SpatialReward and see why.

Run locally:  python app.py --model PATH_OR_REPO [--spatialreward-model PATH_OR_REPO] [--host H] [--port P]
(or set MIESCORE_MODEL / SPATIALREWARD_MODEL; a folder made by `miescore space build` names them in
space_models.json). Named API endpoints: /score and /spatial_reward. On a Space, an ``HF_TOKEN`` secret is passed
to the model loaders (private or gated repos), and on ZeroGPU the model calls run under ``@spaces.GPU``.
All non-UI logic lives in ``modeling_miescore.space`` (inputs, lazy models, score and region rendering, examples,
the sources gallery, ZeroGPU).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import NamedTuple

import gradio as gr

from modeling_miescore.hub.spatialreward_drawing import draw_regions
from modeling_miescore.hub.errors import MIEScoreInputError
from modeling_miescore.hub.processing_miescore import MAX_INSTRUCTION_CHARS
from modeling_miescore.scoring import loading
from modeling_miescore.space.inputs import (MAX_SOURCES, SPACE_MAX_IMAGE_PIXELS, default_cache_dir, load_edit_inputs,
                                            write_example_files)
from modeling_miescore.space.models import MIESCORE_CHOICE as MIESCORE
from modeling_miescore.space.models import SPATIALREWARD_CHOICE as SPATIALREWARD
from modeling_miescore.space.models import (MIESCORE_GPU_SECONDS, SPATIALREWARD_GPU_SECONDS, LazyModel, gpu_function,
                                            model_choices, on_zero_gpu, read_space_models)
from modeling_miescore.space.rendering import (annotations, miescore_html, miescore_json, placeholder_html,
                                               reasoning_color_map, reasoning_pieces, spatialreward_html,
                                               spatialreward_json)
from modeling_miescore.space.sources_gallery import sources_gallery

logger = logging.getLogger("miescore.space")

NO_MIESCORE = ("No MIEScore model configured: start the Space with --model PATH_OR_REPO or set the "
               "MIESCORE_MODEL environment variable (a MIEScore checkpoint folder or Hub repo id).")
NO_SPATIALREWARD = ("No SpatialReward model configured: start the Space with --spatialreward-model PATH_OR_REPO "
                    "or set the SPATIALREWARD_MODEL environment variable.")


# Gradio 6 takes the theme at launch(); tests launch with the same options so they see the same page.
LAUNCH_OPTIONS = dict(theme=gr.themes.Soft(), ssr_mode=False, footer_links=["api", "gradio"])


def _user_error(err: Exception) -> gr.Error:
    return gr.Error(str(err), print_exception=False)


def _brief(err: Exception, limit: int = 200) -> str:
    text = f"{type(err).__name__}: {err}"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def build_demo(
    model: str | None = None,
    spatialreward_model: str | None = None,
    *,
    device: str = "auto",
    dtype: str = "auto",
    max_image_pixels: int = SPACE_MAX_IMAGE_PIXELS,
    examples_dir: str | None = None,
    example_side: int = 384,
    random_weights: bool = False,
) -> gr.Blocks:
    """The Space's Blocks. Models are loaded on first use (``LazyModel``); nothing heavy happens here."""
    token = os.environ.get("HF_TOKEN") or None  # a Space secret, for private or gated model repos
    mie = LazyModel(model, _model_loader("load_scorer", device, dtype, token), NO_MIESCORE)
    spatial = LazyModel(spatialreward_model, _model_loader("load_spatialreward", device, dtype, token),
                        NO_SPATIALREWARD)
    run_miescore, run_spatialreward = _model_calls(mie, spatial, max_image_pixels)
    with gr.Blocks(title="MIEScore: multi-source edit scoring") as demo:
        _header(model, spatialreward_model, random_weights)
        inputs, panels = _layout(model, spatialreward_model)
        _examples(inputs, examples_dir, example_side)
        _wire_events(inputs, panels, run_miescore, run_spatialreward, random_weights)
    demo.miescore_models = (mie, spatial)  # for tests and warm-up
    return demo


def _model_loader(name: str, device: str, dtype: str, token: str | None):
    """``reference -> model`` with ``scoring.loading.<name>`` (looked up at load time, so tests can stand in).

    On ZeroGPU, CUDA appears only inside ``@spaces.GPU`` calls: the weights are loaded on the CPU and placed on
    ``"cuda"``, which the ``spaces`` package turns into a move onto the GPU attached to each call.
    """
    if on_zero_gpu():
        zero_dtype = "bfloat16" if dtype == "auto" else dtype
        return lambda ref: getattr(loading, name)(ref, device="cpu", dtype=zero_dtype, token=token).to("cuda")
    return lambda ref: getattr(loading, name)(ref, device=device, dtype=dtype, token=token)


def _model_calls(mie: LazyModel, spatial: LazyModel, max_image_pixels: int):
    """The two model calls, ``(sources, edited, instruction) -> result``, each under ``@spaces.GPU`` when the
    ``spaces`` package is installed (ZeroGPU); bad input becomes a ``gr.Error`` that says what to fix."""

    def checked(sources, edited, instruction):
        return load_edit_inputs(sources, edited, instruction, max_sources=MAX_SOURCES,
                                max_image_pixels=max_image_pixels)

    @gpu_function(MIESCORE_GPU_SECONDS)
    def run_miescore(sources, edited, instruction) -> dict:
        try:
            images, edited_image, text = checked(sources, edited, instruction)
            scores = mie.get().score(images, edited_image, text)
        except MIEScoreInputError as err:
            raise _user_error(err) from None
        except Exception as err:  # the model itself failed: log it, tell the user briefly
            logger.exception("MIEScore scoring failed")
            raise gr.Error(f"MIEScore failed inside the model ({_brief(err)}); the server log has the details.",
                           print_exception=False) from None
        return miescore_json(scores, model=mie.reference)

    @gpu_function(SPATIALREWARD_GPU_SECONDS)
    def run_spatialreward(sources, edited, instruction):
        try:
            images, edited_image, text = checked(sources, edited, instruction)
            result = spatial.get().evaluate_edits([{"sources": images, "edited": edited_image,
                                                     "instruction": text}])[0]
        except MIEScoreInputError as err:
            raise _user_error(err) from None
        except Exception as err:
            logger.exception("SpatialReward scoring failed")
            raise gr.Error(f"SpatialReward failed inside the model ({_brief(err)}); the server log has the "
                           "details.", print_exception=False) from None
        data = spatialreward_json(result, *edited_image.size)
        data["model"] = spatial.reference
        return data, edited_image

    return run_miescore, run_spatialreward


class _Inputs(NamedTuple):
    sources: gr.Gallery
    edited: gr.Image
    instruction: gr.Textbox
    choice: gr.Radio
    button: gr.Button


class _Panels(NamedTuple):
    mie: gr.Group
    mie_bars: gr.HTML
    mie_raw: gr.JSON
    sr: gr.Group
    sr_image: gr.AnnotatedImage
    sr_reasoning: gr.HighlightedText
    sr_bars: gr.HTML
    sr_raw: gr.JSON


def _header(model, spatialreward_model, random_weights) -> None:
    gr.Markdown(
        "# MIEScore\nScore a **multi-source image edit**: the source images, the edited result and the "
        "instruction. **MIEScore** rates visual quality, instruction following and attribute preservation "
        "on the 0–100 MOS scale of MIE-Bench; **SpatialReward** draws the regions it judged, explains its "
        "reasoning region by region and gives the reward used for RL."
    )
    status = [f"MIEScore model: `{model}`" if model else "MIEScore model: **not configured**",
              f"SpatialReward model: `{spatialreward_model}`" if spatialreward_model
              else "SpatialReward model: **not configured**, so it is not offered (start the Space with "
                   "`--spatialreward-model PATH_OR_REPO` or set `SPATIALREWARD_MODEL`)"]
    if random_weights:
        status.append("**Random-weight demo checkpoints: the scores are meaningless.**")
    gr.Markdown(" · ".join(status), elem_id="model-status")


def _layout(model, spatialreward_model) -> tuple[_Inputs, _Panels]:
    # only the configured models are offered; with one, the choice is hidden (the status line names the other)
    choices, default = model_choices(model, spatialreward_model)
    with gr.Row():
        with gr.Column(scale=5):
            inputs = _Inputs(
                sources_gallery(label=f"Source images (1–{MAX_SOURCES}, in order: image 1, image 2, …)",
                                type="filepath", interactive=True, columns=3, height=260, file_types=["image"],
                                elem_id="sources"),
                gr.Image(label="Edited image", type="filepath", image_mode=None, height=260,
                         sources=["upload", "clipboard"], elem_id="edited"),
                gr.Textbox(label="Instruction", lines=2, elem_id="instruction", max_length=MAX_INSTRUCTION_CHARS,
                           placeholder="e.g. Place the cat from image 2 on the table in image 1."),
                gr.Radio(choices, value=default, label="Model", elem_id="model-choice", visible=len(choices) > 1),
                gr.Button("Score", variant="primary", elem_id="score-button"),
            )
        with gr.Column(scale=5):
            with gr.Group(visible=default == MIESCORE) as mie_panel:
                mie_bars = gr.HTML(placeholder_html("Scores appear here." if model else NO_MIESCORE),
                                   elem_id="miescore-result")
                mie_raw = gr.JSON(label="Raw result (JSON)", elem_id="miescore-json")
            with gr.Group(visible=default == SPATIALREWARD) as sr_panel:
                sr_image = gr.AnnotatedImage(label="Edited image with the regions SpatialReward judged",
                                             elem_id="spatialreward-regions")
                sr_reasoning = gr.HighlightedText(label="Reasoning (each region in its box's colour)",
                                                  show_legend=True, elem_id="spatialreward-reasoning")
                sr_bars = gr.HTML(placeholder_html("Sub-scores and the reward appear here."),
                                  elem_id="spatialreward-result")
                sr_raw = gr.JSON(label="Raw result (JSON)", elem_id="spatialreward-json")
    return inputs, _Panels(mie_panel, mie_bars, mie_raw, sr_panel, sr_image, sr_reasoning, sr_bars, sr_raw)


def _examples(inputs: _Inputs, examples_dir, example_side) -> None:
    rows = _example_rows(examples_dir, example_side)
    if rows:
        gr.Examples(
            examples=[[row.sources, row.edited, row.instruction] for row in rows],
            inputs=[inputs.sources, inputs.edited, inputs.instruction],
            example_labels=[f"{row.id}: {row.note}" for row in rows],
            label="Examples (real photos; edits composed in code)",
        )


def _panel_visibility(choice):
    return gr.update(visible=choice != SPATIALREWARD), gr.update(visible=choice == SPATIALREWARD)


def _ui_score_handler(run_miescore, run_spatialreward, random_weights):
    """The Score button: run the chosen model and fill its panel (the other panel's outputs are skipped)."""

    def ui_score(sources, edited, instruction, choice):
        if choice == SPATIALREWARD:
            data, image = run_spatialreward(sources, edited, instruction)
            regions = data.get("regions") or []
            pieces = reasoning_pieces(data)
            colors = reasoning_color_map(pieces, regions)
            boxes = annotations(regions, *image.size)
            # Outlines and "id: label" tags drawn into the image (same palette), plus AnnotatedImage's
            # hoverable overlays coloured through the same colour map as the reasoning.
            drawn = draw_regions(image, regions) if regions else image
            return (gr.skip(), gr.skip(), gr.update(value=(drawn, boxes), color_map=colors),
                    gr.update(value=pieces, color_map=colors),
                    spatialreward_html(data), data, *_panel_visibility(choice))
        data = run_miescore(sources, edited, instruction)
        note = "Random weights: these scores are meaningless." if random_weights else None
        return (miescore_html(data, note=note), data, gr.skip(), gr.skip(), gr.skip(), gr.skip(),
                *_panel_visibility(choice))

    return ui_score


def _wire_events(inputs: _Inputs, panels: _Panels, run_miescore, run_spatialreward, random_weights) -> None:
    edit = [inputs.sources, inputs.edited, inputs.instruction]
    inputs.choice.change(_panel_visibility, inputs.choice, [panels.mie, panels.sr], api_visibility="private",
                         queue=False)
    # preprocess=False: the handlers get the uploaded files' (already validated, cached) paths unopened.
    # Gradio's own image preprocessing opens every upload with PIL first, so a corrupt or huge file would
    # fail with an error the user never sees; load_image reads them instead and says what is wrong.
    # One concurrency group for every model call: a single GPU runs one forward pass at a time.
    inputs.button.click(_ui_score_handler(run_miescore, run_spatialreward, random_weights),
                        [*edit, inputs.choice],
                        [panels.mie_bars, panels.mie_raw, panels.sr_image, panels.sr_reasoning, panels.sr_bars,
                         panels.sr_raw, panels.mie, panels.sr],
                        api_visibility="private", concurrency_id="model", preprocess=False)

    def api_spatial_reward(sources, edited, instruction):
        return run_spatialreward(sources, edited, instruction)[0]

    # API-only endpoints (no UI trigger): clean signatures (sources, edited, instruction) -> JSON.
    gr.on([], run_miescore, edit, panels.mie_raw, api_name="score", concurrency_id="model", preprocess=False,
          api_description="MIEScore: visual_quality, instruction_following, attribute_preservation, overall "
                          "(0-100). sources: a list of handle_file(...) files (or Gallery entries).")
    gr.on([], api_spatial_reward, edit, panels.sr_raw, api_name="spatial_reward", concurrency_id="model",
          preprocess=False,
          api_description="SpatialReward: regions (0-1000 and pixel boxes), reasoning, s_if, s_con, s_nat, "
                          "s_art, sc, pq, reward. sources: a list of handle_file(...) files (or Gallery entries).")


def _example_rows(examples_dir, example_side):
    try:
        return write_example_files(examples_dir or default_cache_dir() / "examples", max_side=example_side)
    except Exception as err:  # examples are a convenience: the Space works without them
        logger.warning("examples disabled: %s", err)
        return []


def _tiny_checkpoints(model, spatialreward_model):
    """Build (once, in the cache folder) tiny random-weight checkpoints for whichever model is not given."""
    from modeling_miescore.testing import build_tiny_miescore
    from modeling_miescore.testing.tiny_spatialreward import build_tiny_spatialreward

    cache = default_cache_dir()
    if not model:
        model = cache / "tiny-miescore"
        if not (model / "config.json").is_file():
            build_tiny_miescore(model)
    if not spatialreward_model:
        spatialreward_model = cache / "tiny-spatialreward"
        if not (spatialreward_model / "config.json").is_file():
            build_tiny_spatialreward(spatialreward_model)
    return str(model), str(spatialreward_model)


def parse_args(argv=None) -> argparse.Namespace:
    env = os.environ
    # Defaults: the environment, then space_models.json beside this file (written by `miescore space build`).
    built = read_space_models(os.path.dirname(os.path.abspath(__file__)))
    parser = argparse.ArgumentParser(description="MIEScore Gradio Space")
    parser.add_argument("--model", default=env.get("MIESCORE_MODEL") or built.get("model"),
                        help="MIEScore checkpoint folder or Hub repo id (default: $MIESCORE_MODEL)")
    parser.add_argument("--spatialreward-model",
                        default=env.get("SPATIALREWARD_MODEL") or built.get("spatialreward_model"),
                        help="SpatialReward checkpoint folder or Hub repo id (default: $SPATIALREWARD_MODEL)")
    # Hugging Face Spaces set GRADIO_SERVER_NAME=0.0.0.0; everywhere else we stay on the loopback interface.
    parser.add_argument("--host", default=env.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(env.get("GRADIO_SERVER_PORT", "7860")))
    parser.add_argument("--device", default=env.get("MIESCORE_DEVICE", "auto"))
    parser.add_argument("--dtype", default=env.get("MIESCORE_DTYPE", "auto"))
    parser.add_argument("--max-image-pixels", type=int, default=SPACE_MAX_IMAGE_PIXELS,
                        help="refuse images above this many pixels (default: %(default)s)")
    parser.add_argument("--max-file-size", default="50mb", help="largest upload accepted (default: %(default)s)")
    parser.add_argument("--queue-size", type=int, default=16, help="requests allowed to wait (default: %(default)s)")
    parser.add_argument("--examples-dir", default=None, help="where the example PNGs are written "
                        "(default: $MIESCORE_SPACE_CACHE/examples or ~/.cache/miescore/space/examples)")
    parser.add_argument("--tiny-demo", action="store_true",
                        help="build tiny random-weight checkpoints for the models not given (UI try-out; scores are "
                             "meaningless)")
    # ZeroGPU runs each model call in a worker forked from this process: the models must be loaded before.
    parser.add_argument("--preload", action="store_true",
                        default=on_zero_gpu() or env.get("MIESCORE_PRELOAD", "").lower() in ("1", "true", "yes"),
                        help="load the models at start-up instead of first use (default on ZeroGPU, or with "
                             "MIESCORE_PRELOAD=1)")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.tiny_demo:
        args.model, args.spatialreward_model = _tiny_checkpoints(args.model, args.spatialreward_model)
    demo = build_demo(args.model, args.spatialreward_model, device=args.device, dtype=args.dtype,
                      max_image_pixels=args.max_image_pixels, examples_dir=args.examples_dir,
                      random_weights=args.tiny_demo)
    if args.preload:
        for holder in demo.miescore_models:
            if holder.configured:
                try:
                    holder.get()
                except MIEScoreInputError as err:
                    sys.exit(f"error: {err}")
    demo.queue(default_concurrency_limit=1, max_size=args.queue_size)
    demo.launch(server_name=args.host, server_port=args.port, max_file_size=args.max_file_size, **LAUNCH_OPTIONS)


if __name__ == "__main__":
    main()
