"""Online RL of image editors (Flow-GRPO on diffusers editing pipelines), rewarded by MIEScore or SpatialReward.

The SpatialReward paper's sec. 5.3 / appendix B.2 / Table 3 setting. One module per job; the recipe is
``trainers/flow_grpo_editor.py``.

- The reward contract: :mod:`.reward_types` (a reward scores whole groups — G edits of one sources + instruction —
  and flags failed samples instead of scoring them). The rewards (``--reward``): :mod:`.reward_specs` (the registry
  of kinds and weighted sums), :mod:`.miescore_reward`, :mod:`.spatialreward_reward` (in process or an
  OpenAI-compatible endpoint), :mod:`.served_reward` (``miescore serve`` replicas), :mod:`.weighted_reward`;
  :mod:`.reward_worker` scores a batch in the background while the next one samples.
- Sampling: :mod:`.sde_step` (the Flow-GRPO SDE / CPS step and its log-prob), :mod:`.step_plan` (which steps are
  SDE, trained, guided, shared by a group: fraction, sde_window, Flow-GRPO-Fast, MixGRPO), :mod:`.rollout_recording` (the scheduler subclass and the transformer-input recorder),
  :mod:`.rollout` (one group by the stock pipeline), :mod:`.step_recompute` (a recorded step re-run at train time).
- Editors: :mod:`.editors` (the registry of diffusers editors and the protocol for others), :mod:`.policy_lora`,
  :mod:`.policy_fsdp` (full fine-tuning sharded by FSDP2).
- Objective and loop: :mod:`.advantages`, :mod:`.objective`, :mod:`.policy_update`, :mod:`.ema` (flow_grpo's EMA,
  in optimizer steps), :mod:`.group_schedule`,
  :mod:`.checkpoints`, :mod:`.run_outputs`, :mod:`.rollout_log` (per-sample records, ``save_rollouts_steps``),
  :mod:`.config`, :mod:`.trainer`.
- Using a trained editor: :mod:`.edit_generation` (``miescore edit``), :mod:`.sampling_schedule` (sampling as the
  policy was trained: CFG on the first ``cfg_fraction`` of steps, ODE or SDE).
"""
