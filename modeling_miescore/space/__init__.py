"""Logic of the MIEScore Gradio Space (``spaces/miescore/app.py``) and of assembling Space folders, testable
without a server.

``inputs`` (the Space's inputs checked, the example edits as files), ``models`` (the repos it serves, loaded on
first use, ZeroGPU), ``rendering`` (score bars, JSON results, regions and reasoning), ``sources_gallery`` (the
gallery's accepted payload shapes; the only module that imports gradio) and ``space_folder`` (``miescore space
build``). The Space maps ``image_io.MIEScoreInputError`` to ``gr.Error``.
"""
