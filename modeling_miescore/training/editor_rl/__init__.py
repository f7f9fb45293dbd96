"""Online RL of image editors (Flow-GRPO on diffusers editing pipelines), rewarded by MIEScore or SpatialReward.

The SpatialReward paper's sec. 5.3 / appendix B.2 / Table 3 setting. One module per job; the recipe is
``trainers/flow_grpo_editor.py``. :mod:`.reward_types` is the contract between the trainer and every reward:
a reward scores whole groups (G edits of one sources + instruction) and flags failed samples instead of scoring
them. The rewards (``--reward``): :mod:`.reward_specs` (the registry of kinds and weighted sums),
:mod:`.miescore_reward`, :mod:`.spatialreward_reward` (in process or an OpenAI-compatible endpoint),
:mod:`.served_reward` (``miescore serve`` replicas), :mod:`.weighted_reward`; :mod:`.reward_worker` scores a batch
in the background while the next one samples.
"""
