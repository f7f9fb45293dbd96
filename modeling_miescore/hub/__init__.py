"""The Hub files: exactly the files ``save_pretrained`` copies into every checkpoint, which
``AutoModel.from_pretrained(path, trust_remote_code=True)`` runs from the checkpoint folder.

Flat (no sub-folders) and self-contained: each imports only its siblings, with ``from .x import y`` (the form
transformers follows when it copies a model's code), the standard library, torch, transformers, numpy, Pillow,
tqdm and huggingface_hub (``tests/hub/test_hub_boundary.py``). ``errors.py`` holds the package's error base,
:class:`~.errors.MIEScoreInputError`.
"""
