"""Non-UI logic of the MIEScore Gradio Space (``spaces/miescore/app.py``), testable without a server.

``inputs`` (decode and check the Space's inputs), ``lazy_models`` (models loaded on first use),
``score_rendering`` (score bars as HTML, JSON results), ``region_display`` (region colours, pixel boxes,
reasoning split by region) and ``example_files`` (the example edits as PNG files). Nothing here imports
gradio; the Space maps ``image_io.MIEScoreInputError`` to ``gr.Error``.
"""
