"""Online RL of image editors (Flow-GRPO on diffusers editing pipelines), rewarded by MIEScore or SpatialReward.

The SpatialReward paper's sec. 5.3 / appendix B.2 / Table 3 setting. One module per job; the recipe is
``trainers/flow_grpo_editor.py``. :mod:`.reward_types` is the contract between the trainer and every reward:
a reward scores whole groups (G edits of one sources + instruction) and flags failed samples instead of scoring
them.
"""
