"""Logic of the MIEScore Gradio Space (``spaces/miescore/app.py``) and of assembling Space folders, testable
without a server; only ``sources_gallery`` imports gradio. The Space maps ``MIEScoreInputError`` to ``gr.Error``.
"""
