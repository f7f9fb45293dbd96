"""Training (not Hub files: never copied into checkpoints).

MIEScore regression fine-tuning (``trainers/train_miescore.py``): :mod:`.losses` (eq. 9-13) with
:mod:`.memory_queue`, :mod:`.miescore_data` (rows, exact lengths, collator), :mod:`.miescore_model` (base model,
LoRA), :mod:`.miescore_trainer` (the ``Trainer``, loss state, metrics), :mod:`.miescore_export` (merged /
adapter export, model card). Skill optimisation (``trainers/optimize_skill.py``): :mod:`.skill`.
SpatialReward SFT / GRPO (``trainers/sft_spatialreward.py``, ``trainers/grpo_spatialreward.py``):
:mod:`.spatialreward_chat_examples` (rows -> chat examples), :mod:`.spatialreward_recipe` (what both recipes share),
:mod:`.spatialreward_grpo_rewards` (the GRPO reward functions), :mod:`.card_inputs` (what the recipes hand to the
model cards). Online RL of image editors with these rewards
(``trainers/flow_grpo_editor.py``): :mod:`.editor_rl`.

Importing this package hides bitsandbytes' known import-time message (:mod:`..utils.third_party_logs`) before
peft or transformers' ``Trainer`` load it: the training scripts import it first.
"""

from ..utils.third_party_logs import quiet_third_party_logs

quiet_third_party_logs()
