"""``miescore edit``: sampling an editor (optionally with a trained LoRA, as it was trained) and reward-guided
best-of-N selection. Inference, built on :mod:`modeling_miescore.training.editor_rl` (editors, sampling schedule,
LoRA loading) and :mod:`modeling_miescore.rewards`; nothing in ``training`` imports it.

:mod:`.generation` (the edits of a JSONL of requests), :mod:`.selection` (``edit --select``: N candidates per
request, the reward picks one).
"""
