"""Rewards for RL of image editors and best-of-N selection: one API from the ``--reward`` spec to a score.

Open in this order: :mod:`.groups` (the contract: a reward scores whole groups, G edits of one sources +
instruction, and flags failed samples instead of scoring them), :mod:`.specs` (the ``--reward`` grammar:
``miescore:CKPT``, ``spatialreward:CKPT``, ``spatialreward-api:MODEL@URL``, ``serve:URL``,
``package.module:function``, weighted sums), :mod:`.backends` (what each spec builds), :mod:`.worker` (a batch
scored on a thread while the next one samples) and :mod:`.callables` (TRL-style ``reward_fn(images,
instructions, sources)``). Nothing here imports ``training`` or ``editing``: both build on it.
"""
