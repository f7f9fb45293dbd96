"""Rewards for RL of image editors and best-of-N selection: one API from the ``--reward`` spec to a score.

Open :mod:`.groups` first: the contract (a reward scores whole groups, G edits of one sources + instruction, and
flags failed samples instead of scoring them). Nothing here imports ``training`` or ``editing``: both build on it.
"""
