"""Every setting of a Flow-GRPO editor run, one dataclass (the recipe's arguments; ``--config x.yaml`` and every
field on the command line through TRL's ``TrlParser``).

Defaults are the SpatialReward paper's (sec. 5.3, appendix B.2.1: LoRA r32/a64, lr 4e-4, global batch 576, G 12,
T 20, beta 0.04, advantage clip 5) and, where the paper is silent, EditScore's OmniGen2-RL config it reproduces
(``examples/OmniGen2-RL/options/omnigen2_edit_rl_4machine_editscore7b_avg4.yml`` and ``train.py`` @6e0f1b9, the
v0.2 release; the pinned 5562c05 differs only in ``policy_loss_reweighting``: "OmniGen2-RL" below).

Deprecated spellings still read, with a ``FutureWarning``: ``gradient_accumulation_steps`` (now
``rollout_batches_per_step``: it never was an optimizer knob here) and ``train_steps: window`` (now
``sde_window``).

**Declaring a new field.** What a field accepts is declared in its type with pydantic constraints
(:mod:`modeling_miescore.utils.declared_settings`; the parser reads the type without them), and
:meth:`FlowGRPOConfig.validate` checks every field before anything is loaded, each bad value one
:class:`~modeling_miescore.hub.image_io.MIEScoreInputError` line naming the field, the value and what is allowed::

    my_steps: Annotated[int, Field(ge=1)] = field(default=4, metadata={"help": "..."})       # integer >= 1
    my_rate: Annotated[float, Field(gt=0, le=1)] = 0.5                                       # finite, in (0, 1]
    my_mode: Annotated[str, one_of("a", "b")] = "a"                                          # did you mean ...
    my_size: Annotated[Optional[int], Field(ge=1)] = None                                    # None or >= 1

The type alone already refuses the wrong kind (``1.5`` or ``True`` for an ``int``, NaN / inf / strings for a
``float``). A rule that ties fields together goes into :meth:`FlowGRPOConfig.cross_field_problems`. A field that
makes two runs different runs (a ``--resume`` with another value is refused) goes into
:data:`RUN_IDENTITY_FIELDS`; one that may change between a run and its resume (how fast or where it runs, what is
logged) into :data:`RESUMABLE_FIELDS`.
"""

from __future__ import annotations

import json
import random
import re
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import Annotated, List, Optional

from pydantic import Field

from ...hub.errors import MIEScoreInputError
from ...scoring.loading import DTYPES
from ...utils.credentials import redact
from ...utils.declared_settings import REQUIRED, field_problems, one_of
from ...utils.suggestions import did_you_mean
from .objective import STD_LEVELS, STEP_WEIGHTINGS
from .schedule import (LAST_STEP_MODES, SDE_TYPES, TRAIN_STEP_MODES, GroupSchedule, make_step_plan,
                       resolve_train_steps)
from ...rewards.specs import reward_spec_problem, RUNTIME_REWARD_OPTIONS, reward_identity
from .editors import editor_option_problems

__all__ = ["FlowGRPOConfig", "GRID_SCHEDULES", "JUDGE_KINDS", "RESUMABLE_FIELDS", "RUN_IDENTITY_FIELDS", "REPORT_TO",
           "TRAIN_REWARD", "evaluation_problems"]

GRID_SCHEDULES = ("trained", "pipeline")

# accelerate's trackers (accelerate.utils.LoggerType) and "none"
REPORT_TO = ("none", "all", "tensorboard", "wandb", "trackio", "aim", "comet_ml", "mlflow", "clearml", "dvclive",
             "swanlab")
UNIT = Field(ge=0, le=1)
POSITIVE = Field(gt=0)
AT_LEAST_1 = Field(ge=1)
NON_NEGATIVE = Field(ge=0)

@dataclass
class FlowGRPOConfig:
    # --- editor -----------------------------------------------------------------------------------------------
    editor: Annotated[str, REQUIRED] = field(default="qwen-image-edit-plus", metadata={
        "help": "qwen-image-edit-plus | flux2-klein | flux-kontext, or package.module:function returning an "
                "EditorAdapter."})
    model_name_or_path: Annotated[str, REQUIRED] = field(default="", metadata={
        "help": "The editor's pipeline folder or Hub id."})
    base_model_id: Optional[str] = field(default=None, metadata={"help": "Hub id for the card when the model is "
                                         "a local folder."})
    editor_options: Optional[dict | str] = field(default=None, metadata={"help": "Adapter options (JSON on the "
                                                 "command line): height, width, cfg_scale, call_kwargs, ..."})
    dtype: Annotated[str, one_of(DTYPES)] = field(default="bfloat16", metadata={
        "help": "Editor weights dtype: float32 | bfloat16 | float16 | auto (OmniGen2-RL: bf16); the SDE math and "
                "LoRA weights are always fp32."})
    # --- data and reward ----------------------------------------------------------------------------------------
    dataset: Annotated[str, REQUIRED] = field(default="", metadata={
        "help": "Editing requests: a JSONL file or a dataset folder."})
    dataset_split: Optional[str] = None
    max_train_rows: Annotated[Optional[int], AT_LEAST_1] = None
    reward: Annotated[Optional[list | str], REQUIRED] = field(default="", metadata={
        "help": "--reward spec (modeling_miescore.rewards.specs; a YAML list of terms in a "
                "config); package.module:function for a callable."})
    reward_options: Optional[dict | str] = field(default=None, metadata={"help": "Options of the reward (JSON on "
                                                 "the command line), e.g. api_key_env; device: this process's."})
    reward_timeout: Annotated[float, POSITIVE] = field(default=1800.0, metadata={
        "help": "Seconds to wait for one batch's rewards."})
    max_reward_failure_rate: Annotated[float, UNIT] = field(default=0.25, metadata={
        "help": "Stop when more of a step's samples than this fail to get a reward."})
    # --- sampling (Flow-GRPO SDE) -------------------------------------------------------------------------------
    num_generations: Annotated[int, Field(ge=2)] = field(default=12, metadata={
        "help": "G, edits per group (paper B.2.1: 12; at least 2, GRPO normalises rewards within a group)."})
    num_inference_steps: Annotated[int, Field(ge=2)] = field(default=20, metadata={
        "help": "T (paper B.2.1: 20; at least 2, the last step is never trained)."})
    noise_level: Annotated[float, NON_NEGATIVE] = field(default=0.7, metadata={
        "help": "SDE noise level a (OmniGen2-RL sigma_coef 0.7)."})
    sde_type: Annotated[str, one_of(SDE_TYPES)] = field(default="sde", metadata={
        "help": "sde (Flow-GRPO) | cps (arXiv 2509.05952)."})
    train_steps: Annotated[str, one_of(TRAIN_STEP_MODES)] = field(
        default="fraction", metadata={
            "help": "fraction (OmniGen2-RL: SDE everywhere, a random share trained) | sde_window (flow_grpo Qwen: a "
                    "random SDE window, each member its own ODE prefix; 'window' is its deprecated spelling) | fast "
                    "(Flow-GRPO-Fast: one shared ODE prefix per group, branching into G in the window) | mixgrpo "
                    "(MixGRPO's sliding window, moving with the iteration)."})
    train_fraction: Annotated[float, Field(gt=0, le=1)] = field(default=0.6, metadata={
        "help": "Trained share of the steps (OmniGen2-RL 0.6)."})
    window_size: Annotated[int, AT_LEAST_1] = field(default=2, metadata={
        "help": "SDE + trained steps of a window (flow_grpo Qwen-Image 2; MixGRPO 4)."})
    window_start: Annotated[float, UNIT] = field(default=0.0, metadata={
        "help": "sde_window / fast: the window starts at a random step in [window_start, window_end) x T (flow_grpo "
                "sde_window_range)."})
    window_end: Annotated[float, UNIT] = 0.5
    mixgrpo_shift_interval: Annotated[int, AT_LEAST_1] = field(default=25, metadata={
        "help": "mixgrpo: the window moves every N steps (MixGRPO iters_per_group 25)."})
    mixgrpo_stride: Annotated[int, AT_LEAST_1] = field(default=1, metadata={
        "help": "mixgrpo: by this many denoising steps (MixGRPO prog_overlap_step 1), rolling back to 0 past T - 2."})
    same_latent: Optional[bool] = field(default=None, metadata={
        "help": "A group shares one initial noise (flow_grpo same_latent, DanceGRPO / MixGRPO init_same_noise). "
                "None: true for fast (required) and mixgrpo (MixGRPO's script), false otherwise (OmniGen2-RL)."})
    last_step: Annotated[str, one_of(LAST_STEP_MODES)] = field(default="stochastic", metadata={
        "help": "The final (never trained) step: stochastic (OmniGen2-RL: the SDE on every step) | deterministic "
                "(flow_grpo Qwen-Image-Edit: an ODE last step, so rewarded images carry no final-step noise)."})
    cfg_scale: Annotated[Optional[float], POSITIVE] = field(default=None, metadata={
        "help": "True-CFG scale (None: the editor's default, QwenImageEditPlus 4); 1 turns CFG off."})
    cfg_fraction: Annotated[float, UNIT] = field(default=0.6, metadata={
        "help": "CFG on steps i/T <= this (OmniGen2-RL 0.6)."})
    detach_uncond: bool = field(default=False, metadata={
        "help": "Training recomputes the unconditional CFG branch without gradients (flow_grpo SD3 train_sd3.py); "
                "false: gradients through both (OmniGen2-RL, flow_grpo Qwen-Image-Edit)."})
    # --- objective ----------------------------------------------------------------------------------------------
    clip_range_low: Annotated[float, Field(ge=0, lt=1)] = field(default=1e-4, metadata={
        "help": "Ratio clip below 1 (OmniGen2-RL 1e-4)."})
    clip_range_high: Annotated[float, NON_NEGATIVE] = field(default=5e-4, metadata={
        "help": "Ratio clip above 1 (OmniGen2-RL 5e-4)."})
    advantage_clip: Annotated[float, POSITIVE] = field(default=5.0, metadata={"help": "Paper B.2.1: 5."})
    std_level: Annotated[str, one_of(STD_LEVELS)] = field(default="group", metadata={
        "help": "group | batch std (OmniGen2-RL default: group)."})
    drop_zero_std_groups: bool = field(default=False, metadata={"help": "Drop groups whose rewards are all equal "
                                       "(flow_grpo drops them; OmniGen2-RL keeps them)."})
    beta: Annotated[float, NON_NEGATIVE] = field(default=0.04, metadata={"help": "KL weight (paper B.2.1: 0.04)."})
    kl_keep_dt: bool = field(default=False, metadata={"help": "Exact Gaussian KL (divide by sigma_t^2 |dt|); the "
                             "anchors drop |dt|, which makes the same beta ~T times stronger."})
    step_weighting: Annotated[str, one_of(STEP_WEIGHTINGS)] = field(default="tempflow", metadata={
        "help": "none | tempflow (OmniGen2-RL policy_loss_reweighting @6e0f1b9: step k's policy loss x K s_k / "
                "mean s, the weights average K, the trained steps) | tempflow_mean_one (the same shape, averaging 1: "
                "beta K times stronger relative to the policy term)."})
    grpo_guard: bool = field(default=False, metadata={
        "help": "GRPO-Guard (arXiv 2510.22319): each trained step's log-ratio is normalised, s (log p - log p_old) + "
                "|mu - mu_old|^2 / (2 s) with s the step's noise std, which centres the ratio at 1 and scales its "
                "gradient by s (X-GenGroup/Flow-Factory GRPOGuardTrainer._guard_ratio @b30dc00); sde_type sde only."})
    # --- optimisation -------------------------------------------------------------------------------------------
    finetuning: Annotated[str, one_of("lora", "full")] = field(default="lora", metadata={
        "help": "lora | full (every transformer weight trained; the KL reference is a frozen copy; DDP or one "
                "process unless fsdp)."})
    fsdp: bool = field(default=False, metadata={"help": "With finetuning full: shard the transformer (and its frozen "
                       "reference) over the processes with torch FSDP2 fully_shard, for full fine-tuning of editors "
                       "too large for one device; every group of a step then shares one step "
                       "plan. LoRA runs use DDP (the adapter is small)."})
    lora_rank: Annotated[int, AT_LEAST_1] = 32
    lora_alpha: Annotated[float, POSITIVE] = 64.0
    lora_dropout: Annotated[float, Field(ge=0, lt=1)] = 0.0
    lora_targets: Optional[list[str]] = field(default=None, metadata={"help": "Module names (None: the editor's)."})
    learning_rate: Annotated[float, POSITIVE] = 4e-4
    adam_beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    adam_beta2: Annotated[float, Field(ge=0, lt=1)] = 0.95
    weight_decay: Annotated[float, NON_NEGATIVE] = 0.01
    adam_epsilon: Annotated[float, POSITIVE] = 1e-8
    max_grad_norm: Annotated[float, POSITIVE] = 1.0
    warmup_steps: Annotated[int, NON_NEGATIVE] = 0
    gradient_checkpointing: bool = False
    per_device_batch_size: Annotated[int, AT_LEAST_1] = field(default=12, metadata={
        "help": "Images per rollout batch on one process. A multiple of num_generations keeps every group on one "
                "process; otherwise groups are split (OmniGen2-RL: 18 per GPU) and the images per step must still "
                "be whole groups."})
    rollout_batches_per_step: Annotated[int, AT_LEAST_1] = field(default=1, metadata={
        "help": "Rollout batches each process samples per step (their rewards overlap the next batch's sampling)."})
    gradient_accumulation_steps: Annotated[Optional[int], AT_LEAST_1] = field(default=None, metadata={
        "help": "Deprecated spelling of rollout_batches_per_step."})
    global_batch_size: Annotated[Optional[int], AT_LEAST_1] = field(default=None, metadata={
        "help": "Check: images per step over all processes (paper: 576 = 48 groups x 12)."})
    train_batch_size: Annotated[Optional[int], AT_LEAST_1] = field(default=None, metadata={
        "help": "Images per training forward; divides G (None: G, the rollout's own batch, so the on-policy ratio "
                "is exactly 1 even in bf16; OmniGen2-RL samples and trains at the same 9)."})
    updates_per_step: Annotated[int, AT_LEAST_1] = field(default=2, metadata={
        "help": "Optimizer updates per rollout (OmniGen2-RL num_update_steps_per_sampling 2)."})
    max_steps: Annotated[int, AT_LEAST_1] = field(default=1000, metadata={
        "help": "Paper B.2.1: 1,000 (checkpoint of step 800 kept)."})
    ema_decay: Annotated[float, Field(ge=0, lt=1)] = field(default=0.0, metadata={
        "help": "0 = off (OmniGen2-RL); flow_grpo 0.9."})
    ema_update_interval: Annotated[int, AT_LEAST_1] = field(default=8, metadata={
        "help": "An EMA update every N optimizer steps (flow_grpo ema.py: 8, counted in optimizer steps)."})
    seed: Annotated[int, Field(ge=0, lt=2 ** 63)] = 0
    # --- outputs ------------------------------------------------------------------------------------------------
    output_dir: Annotated[str, REQUIRED] = ""
    save_steps: Annotated[int, AT_LEAST_1] = field(default=50, metadata={
        "help": "Checkpoint every N steps (OmniGen2-RL 50)."})
    resume: bool = field(default=False, metadata={"help": "Continue the run in output_dir from its last checkpoint "
                         "(= --resume_from_checkpoint latest)."})
    resume_from_checkpoint: Optional[str] = field(default=None, metadata={
        "help": "latest | PATH (diffusers' spelling): continue from output_dir's last checkpoint, or from the "
                "checkpoint-N folder of output_dir at PATH (later checkpoints are dropped). A folder without a run "
                "is refused (diffusers' scripts would start a new one there)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Replace the run already in output_dir (its checkpoints, adapter, metrics and samples)."})
    push_to_hub: bool = field(default=False, metadata={
        "help": "Upload the adapter, its card, run.json, metrics.jsonl and the sample grids to the Hub in one commit "
                "after training (huggingface_hub upload_folder); the token and the network are checked before "
                "training starts."})
    hub_model_id: Optional[str] = field(default=None, metadata={
        "help": "The Hub repository of --push_to_hub (default: output_dir's folder name in your namespace, as "
                "diffusers' scripts)."})
    hub_private_repo: Optional[bool] = field(default=None, metadata={
        "help": "Create the --push_to_hub repository private."})
    sample_grid_steps: Annotated[int, NON_NEGATIVE] = field(default=5, metadata={
        "help": "A PNG grid every N steps (OmniGen2-RL 5); 0 off."})
    sample_grid_groups: Annotated[int, NON_NEGATIVE] = field(default=3, metadata={
        "help": "Fixed groups in the grid (OmniGen2-RL 3)."})
    sample_grid_images: Annotated[int, AT_LEAST_1] = 4
    sample_grid_schedule: Annotated[str, one_of(GRID_SCHEDULES)] = field(default="trained", metadata={
        "help": "trained: CFG on the steps the rollouts guide (cfg_fraction), ODE | pipeline: CFG on every step, "
                "ODE."})
    save_rollouts_steps: Annotated[int, NON_NEGATIVE] = field(default=0, metadata={
        "help": "Every N steps, write the step's edits (PNG) with their rewards and advantages to rollouts/ "
                "(score-batch JSONL); 0 off."})
    report_to: Annotated[str, one_of(REPORT_TO)] = field(default="none", metadata={
        "help": "none | tensorboard | wandb | all (or another accelerate tracker)."})
    progress: bool = field(default=True, metadata={"help": "A progress bar; --no_progress: one log line per step."})
    # --- held-out evaluation, the hacking alarm, the best checkpoint (.evaluation) --------------------------------
    eval_dataset: Optional[str] = field(default=None, metadata={
        "help": "Held-out editing requests (a path, like dataset), edited and scored at each eval, never trained on."})
    eval_split_size: Annotated[int, NON_NEGATIVE] = field(default=0, metadata={
        "help": "Hold out this many requests of dataset instead (drawn with the seed, never trained on, listed in "
                "run.json); 0: none."})
    eval_steps: Annotated[int, NON_NEGATIVE] = field(default=0, metadata={
        "help": "Evaluate every N steps, and at step 0 and at the end (0: evaluation off)."})
    eval_rewards: Optional[dict | str] = field(default=None, metadata={
        "help": "{name: reward spec} (JSON on the command line): the gold rewards of the evals, the --reward grammar "
                "plus gedit-judge:MODEL@URL; never used for advantages. The training reward is scored on the same "
                "edits as eval/train_reward."})
    eval_images_per_request: Annotated[int, AT_LEAST_1] = field(default=2, metadata={
        "help": "Edits per eval request, each with its own fixed seed (the paired comparisons pair edit with edit)."})
    eval_sde_noise: bool = field(default=False, metadata={
        "help": "Eval edits with the rollouts' SDE noise (seeded, so still deterministic); false: the grids' ODE."})
    hacking_patience: Annotated[int, AT_LEAST_1] = field(default=2, metadata={
        "help": "Raise the hacking alarm when, over this many consecutive evals, the training reward on the eval "
                "edits rises while an eval reward falls (each change a paired bootstrap over the eval edits)."})
    stop_on_hacking: bool = field(default=False, metadata={
        "help": "End the run at a hacking alarm (exit 0; the reason in run.json and the card)."})
    metric_for_best_model: Optional[str] = field(default=None, metadata={
        "help": "eval/<name> (an eval_rewards name, or eval/train_reward) that picks the best checkpoint "
                "(transformers' TrainingArguments); every eval step is then checkpointed."})
    greater_is_better: Optional[bool] = field(default=None, metadata={
        "help": "Whether a larger metric_for_best_model is better (None: true, rewards are higher-is-better)."})
    load_best_model_at_end: bool = field(default=False, metadata={
        "help": "Export the best checkpoint by metric_for_best_model (adapter, card, miescore edit --lora RUN), not "
                "the last."})
    save_total_limit: Annotated[Optional[int], AT_LEAST_1] = field(default=None, metadata={
        "help": "Keep at most N checkpoints (the oldest go first); the best one and the last are never deleted."})

    def __post_init__(self):
        self.editor_options = _json_option(self.editor_options, "editor_options")
        self.reward_options = _json_option(self.reward_options, "reward_options")
        self.eval_rewards = _json_option(self.eval_rewards, "eval_rewards")
        old = self.gradient_accumulation_steps
        if isinstance(old, int) and not isinstance(old, bool) and old >= 1:  # else validate() names the bad value
            if self.rollout_batches_per_step not in (1, old):
                raise MIEScoreInputError(f"gradient_accumulation_steps {old} (deprecated) and rollout_batches_per_step "
                                         f"{self.rollout_batches_per_step} disagree; give rollout_batches_per_step")
            warnings.warn("gradient_accumulation_steps is deprecated here (it is the number of rollout batches per "
                          "step and process, not an optimizer setting): write rollout_batches_per_step",
                          FutureWarning, stacklevel=3)
            self.rollout_batches_per_step, self.gradient_accumulation_steps = old, None
        if isinstance(self.train_steps, str):
            self.train_steps = resolve_train_steps(self.train_steps)
        if self.same_latent is None:
            self.same_latent = self.train_steps in ("fast", "mixgrpo")

    def validate(self, num_processes: Optional[int] = None) -> None:
        """Every bad setting in one :class:`MIEScoreInputError` line, before anything is loaded: first each field
        against what it declares (module docstring), then :meth:`cross_field_problems`."""
        problems = field_problems(self) or self.cross_field_problems(num_processes)
        if problems:
            raise MIEScoreInputError("; ".join(problems))

    def cross_field_problems(self, num_processes: Optional[int] = None) -> list:
        """The rules that tie fields together (every field already holds a value it accepts); ``num_processes``
        (None: not known yet, checked as 1 except for ``global_batch_size``)."""
        problems = self._batch_problems(num_processes)
        if self.fsdp and self.finetuning != "full":
            problems.append(f"fsdp shards a full fine-tuning run; finetuning is {self.finetuning!r}: set "
                            "finetuning: full, or drop fsdp (a LoRA trains with DDP)")
        if self.fsdp and self.ema_decay > 0:
            problems.append("ema_decay > 0 is not supported with fsdp (the EMA would hold sharded copies); set "
                            "ema_decay: 0")
        if self.grpo_guard and self.sde_type != "sde":
            problems.append(f"grpo_guard normalises the Gaussian log-ratio of sde_type sde; sde_type is "
                            f"{self.sde_type!r}: drop grpo_guard or use sde_type: sde")
        if self.train_steps == "fast" and not self.same_latent:
            problems.append("train_steps fast branches one shared trajectory per group, so the group shares its "
                            "initial noise: drop same_latent: false, or use train_steps sde_window (each member "
                            "its own prefix)")
        if self.train_steps in ("sde_window", "fast") and self.window_start >= self.window_end:
            problems.append(f"window_start {self.window_start:g} must be below window_end {self.window_end:g}")
        elif not problems:
            problems += self._step_plan_problems()
        if self.resume_target and self.overwrite_output_dir:
            problems.append("resuming (--resume / --resume_from_checkpoint) and overwrite_output_dir exclude each "
                            "other; drop one")
        reward_problem = reward_spec_problem(self.reward) if self.reward else None
        return (problems + self._tracker_problems()
                + (editor_option_problems(self.editor, self.editor_options) if self.editor_options else [])
                + ([f"--reward {self.reward!r}: {reward_problem}"] if reward_problem else [])
                + evaluation_problems(self))

    def _batch_problems(self, num_processes: Optional[int]) -> list:
        """Whole groups per step, the global batch, the micro-batches (:mod:`.schedule`'s layout). With
        ``num_processes`` unknown (None), what depends on it waits: a batch that splits groups may be whole
        groups on several processes."""
        g, per_batch, batches = self.num_generations, self.per_device_batch_size, self.rollout_batches_per_step
        micro = self.train_batch_size or g
        if g % micro:
            return [f"train_batch_size {micro} must divide num_generations {g}"]
        split = per_batch % g != 0
        if split and self.fsdp:
            return [f"fsdp needs whole groups on each process (every process calls the sharded transformer as "
                    f"often): make per_device_batch_size a multiple of {g}"]
        if num_processes is None:
            if split:
                return []
            num_processes, check_global = 1, False
        else:
            check_global = True
        total = per_batch * num_processes * batches
        if check_global and self.global_batch_size is not None and total != self.global_batch_size:
            return [f"global_batch_size {self.global_batch_size} != per_device_batch_size {per_batch} x processes "
                    f"{num_processes} x rollout_batches_per_step {batches} = {total}; change one of them"]
        if total % g:
            return [f"{total} images per step (per_device_batch_size {per_batch} x processes {num_processes} x "
                    f"rollout_batches_per_step {batches}) are not whole groups of num_generations {g}; pick a "
                    f"per_device_batch_size that makes them a multiple of {g}"]
        return self._micro_batch_problems(GroupSchedule(1, per_batch, batches, g, num_processes, 0), micro, split)

    def _micro_batch_problems(self, layout: GroupSchedule, micro: int, split: bool) -> list:
        for rank in range(layout.processes):
            pieces = [p for batch in layout.batches(1, rank) for p in batch]
            if split and any(p.size % micro for p in pieces):
                sizes = sorted({p.size for p in pieces})
                return [f"split groups give pieces of {sizes} images on process {rank}: train_batch_size {micro} "
                        f"must divide each (e.g. {min(sizes)})"]
            units = sum(-(-p.size // micro) for p in pieces)
            if units % self.updates_per_step:
                return [f"updates_per_step {self.updates_per_step} must divide the {units} training micro-batches "
                        f"of a step on process {rank}"]
        return []

    def _step_plan_problems(self) -> list:
        """What :func:`~.schedule.make_step_plan` refuses for these settings (a window without room...)."""
        try:
            make_step_plan(self.num_inference_steps, random.Random(0), noise_level=self.noise_level,
                           train_steps=self.train_steps, train_fraction=self.train_fraction,
                           window_size=self.window_size, window_range=(self.window_start, self.window_end),
                           cfg_fraction=self.cfg_fraction, sde_type=self.sde_type, last_step=self.last_step,
                           shared_noise=bool(self.same_latent), mixgrpo_shift_interval=self.mixgrpo_shift_interval,
                           mixgrpo_stride=self.mixgrpo_stride)
        except ValueError as error:
            return [f"{error} (train_steps: {self.train_steps}, num_inference_steps: {self.num_inference_steps})"]
        return []

    def _tracker_problems(self) -> list:
        if self.report_to in ("none", "all"):
            return []
        from accelerate.tracking import get_available_trackers

        if self.report_to not in {str(t) for t in get_available_trackers()}:
            return [f"report_to {self.report_to!r}: that tracker is not installed here (pip install "
                    f"{self.report_to.replace('_', '-')}), or set report_to: none"]
        return []

    @property
    def resume_target(self) -> Optional[str]:
        """None (a fresh run), ``"latest"`` (``resume`` or ``resume_from_checkpoint: latest``) or a checkpoint
        path."""
        target = (self.resume_from_checkpoint or "").strip()
        return target or ("latest" if self.resume else None)

    def trackers(self):
        """``report_to`` as accelerate's ``log_with``: None (no tracker), ``"all"`` or a tracker's name."""
        return None if self.report_to == "none" else self.report_to

    def identity(self) -> dict:
        """The values of :data:`RUN_IDENTITY_FIELDS` as JSON values; the reward without where it is served
        (:func:`~.rewards.specs.reward_identity`: a ``serve:`` replica may move) and without its runtime options."""
        data = self.public_dict()
        identity = {k: data[k] for k in RUN_IDENTITY_FIELDS}
        identity["reward"] = reward_identity(self.reward)
        identity["eval_rewards"] = {k: reward_identity(v) for k, v in data["eval_rewards"].items()}
        identity["reward_options"] = {k: v for k, v in data["reward_options"].items()
                                      if k not in RUNTIME_REWARD_OPTIONS}
        return identity

    def to_dict(self) -> dict:
        return json.loads(json.dumps(asdict(self), default=str))

    def public_dict(self) -> dict:
        """:meth:`to_dict` with every credential masked (``user:pw@`` in URLs, ``?api_key=`` / ``key=`` /
        ``token=`` query values; :func:`~modeling_miescore.utils.credentials.redact`): what run records, model
        cards, trackers and logs show."""
        return _redacted(self.to_dict())


# Fields that may change between a run and its --resume: how long it runs, how it waits for and checks its reward,
# what it writes and shows, where it runs. Every other field defines the run (RUN_IDENTITY_FIELDS): a --resume with
# another value is refused with the list of differences.
RESUMABLE_FIELDS = ("base_model_id", "reward_timeout", "max_reward_failure_rate", "gradient_checkpointing",
                    "global_batch_size", "max_steps", "output_dir", "save_steps", "resume", "resume_from_checkpoint",
                    "overwrite_output_dir", "push_to_hub", "hub_model_id", "hub_private_repo",
                    "sample_grid_steps", "sample_grid_groups", "sample_grid_images", "sample_grid_schedule",
                    "save_rollouts_steps", "report_to", "progress", "eval_steps", "hacking_patience",
                    "stop_on_hacking", "metric_for_best_model", "greater_is_better", "load_best_model_at_end",
                    "save_total_limit",
                    "gradient_accumulation_steps")  # a deprecated alias, moved into rollout_batches_per_step
RUN_IDENTITY_FIELDS = tuple(f.name for f in fields(FlowGRPOConfig) if f.name not in RESUMABLE_FIELDS)


def _redacted(value):
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    return value


def _json_option(value, name: str) -> dict:
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError as err:
        raise MIEScoreInputError(f"{name} must be a JSON object, got {value!r} ({err.msg})") from None
    if not isinstance(parsed, dict):
        raise MIEScoreInputError(f"{name} must be a JSON object, got {value!r}")
    return parsed


# ------------------------------------------------------------------------------------------- evaluation
TRAIN_REWARD = "train_reward"  # the training reward's name among the eval rewards (eval/train_reward)
NAME = re.compile(r"^[A-Za-z0-9_.-]+$")
JUDGE_PATTERN = re.compile(r"^(.+)@(https?://\S+)$")
# eval-only reward kinds besides the --reward grammar: KIND:MODEL@URL, an editor benchmark's judge on an endpoint
JUDGE_KINDS = ("gedit-judge",)


def _spec_problem(spec) -> Optional[str]:
    if isinstance(spec, str) and spec.partition(":")[0] in JUDGE_KINDS:
        kind, _, argument = spec.partition(":")
        return None if JUDGE_PATTERN.match(argument.strip()) else f"write {kind}:MODEL@URL (URL with its /v1)"
    return reward_spec_problem(spec)


def evaluation_problems(config) -> List[str]:
    """What is wrong with a config's evaluation fields (each one line), for :meth:`~.config.FlowGRPOConfig.validate`."""
    problems, specs = [], dict(config.eval_rewards or {})
    evaluating, held_out = config.eval_steps > 0, bool(config.eval_dataset) or config.eval_split_size > 0
    if config.eval_dataset and config.eval_split_size:
        problems.append("eval_dataset and eval_split_size both name the eval requests; give one of them")
    if evaluating and not held_out:
        problems.append(f"eval_steps {config.eval_steps} evaluates held-out requests: give eval_dataset (a path) or "
                        "eval_split_size (how many requests of dataset to hold out)")
    if held_out and not evaluating:
        problems.append("eval requests are given but eval_steps is 0 (evaluation off): set eval_steps")
    for name, spec in specs.items():
        if not NAME.match(str(name)) or name == TRAIN_REWARD:
            problems.append(f"eval_rewards name {name!r} must be letters, digits, '_', '.' or '-' and not "
                            f"{TRAIN_REWARD!r} (the training reward's own eval name)")
        problem = _spec_problem(spec)
        if problem:
            problems.append(f"eval_rewards {name}: {redact(str(spec))!r}: {problem}")
    if specs and not evaluating:
        problems.append("eval_rewards are scored at the evals: set eval_steps (and eval_dataset or eval_split_size)")
    if config.stop_on_hacking and not specs:
        problems.append("stop_on_hacking needs a gold reward to compare the training reward with: give eval_rewards")
    metric = config.metric_for_best_model
    if metric:
        names = [f"eval/{n}" for n in (TRAIN_REWARD, *specs)]
        if metric not in names:
            problems.append(f"metric_for_best_model {metric!r} is not an eval metric of this run; it takes "
                            f"{', '.join(names)}{did_you_mean(metric, names)}")
        elif not evaluating:
            problems.append(f"metric_for_best_model {metric} needs evals: set eval_steps")
    if config.load_best_model_at_end and not metric:
        problems.append("load_best_model_at_end needs metric_for_best_model (e.g. eval/<an eval_rewards name>)")
    return problems
