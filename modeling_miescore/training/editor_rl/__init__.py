"""Online RL of image editors (Flow-GRPO on diffusers editing pipelines), rewarded by MIEScore or SpatialReward.

The SpatialReward paper's sec. 5.3 / appendix B.2 / Table 3 setting; the recipe is ``trainers/flow_grpo_editor.py``.
Read in this order: :mod:`.config` (every setting, cited), :mod:`.editors` (the registry of diffusers editors and
the protocol for others), :mod:`.schedule` (which steps are SDE / trained / guided, sampling schedules, which
requests each process edits), :mod:`.rollout` (the SDE step, a recorded group by the stock pipeline),
:mod:`.objective` (advantages, the clipped loss, recompute, the update phase), :mod:`.policy` (LoRA, FSDP2, EMA),
:mod:`.trainer` (the loop), then its outputs: :mod:`.checkpoints` (and ``--resume``), :mod:`.outputs` (metrics,
grids, reporting, rollout records, how a run samples), :mod:`.publishing` (adapter card, ``--push_to_hub``).
The rewards are :mod:`modeling_miescore.rewards`; using a trained editor is :mod:`modeling_miescore.editing`.
"""
