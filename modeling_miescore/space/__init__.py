"""Logic of the MIEScore Gradio Space (``spaces/miescore/app.py``) and of assembling Space folders, testable
without a server.

``inputs`` (decode and check the Space's inputs), ``lazy_models`` (models loaded on first use),
``score_rendering`` (score bars as HTML, JSON results), ``region_display`` (region colours, pixel boxes,
reasoning split by region), ``example_files`` (the example edits as PNG files), ``sources_gallery`` (the
sources gallery's accepted payload shapes), ``zero_gpu`` (``@spaces.GPU`` when available), ``space_models``
(the model repos an assembled Space serves) and ``space_folder`` (``miescore space build``). Only
``sources_gallery`` imports gradio; the Space maps ``image_io.MIEScoreInputError`` to ``gr.Error``.
"""
