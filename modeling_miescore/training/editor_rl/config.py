"""Every setting of a Flow-GRPO editor run, one dataclass (the recipe's arguments; ``--config x.yaml`` and every
field on the command line through TRL's ``TrlParser``).

Defaults are the SpatialReward paper's (sec. 5.3, appendix B.2.1: LoRA r32/a64, lr 4e-4, global batch 576, G 12,
T 20, beta 0.04, advantage clip 5) and, where the paper is silent, EditScore's OmniGen2-RL config it reproduces
(``examples/OmniGen2-RL/options/omnigen2_edit_rl_4machine_editscore7b_avg4.yml`` and ``train.py`` @6e0f1b9, the
v0.2 release; the pinned 5562c05 differs only in ``policy_loss_reweighting``: "OmniGen2-RL" below).

Deprecated spellings still read, with a ``FutureWarning``: ``gradient_accumulation_steps`` (now
``rollout_batches_per_step``: it never was an optimizer knob here) and ``train_steps: window`` (now
``sde_window``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import asdict, dataclass, field
from typing import Optional

from ...image_io import MIEScoreInputError
from ...scoring.loading import DTYPES
from .group_schedule import GroupSchedule
from .objective import STEP_WEIGHTINGS
from .step_plan import LAST_STEP_MODES, TRAIN_STEP_MODES, resolve_train_steps

__all__ = ["FlowGRPOConfig", "GRID_SCHEDULES", "RUN_IDENTITY_FIELDS"]

GRID_SCHEDULES = ("trained", "pipeline")

# Fields that make two runs different runs (a --resume on a folder whose run.json differs here is refused).
RUN_IDENTITY_FIELDS = ("editor", "model_name_or_path", "dataset", "dataset_split", "reward", "seed",
                       "num_generations", "num_inference_steps", "per_device_batch_size",
                       "rollout_batches_per_step", "finetuning", "fsdp", "lora_rank", "lora_alpha", "lora_targets")


@dataclass
class FlowGRPOConfig:
    # --- editor -----------------------------------------------------------------------------------------------
    editor: str = field(default="qwen-image-edit-plus", metadata={"help": "qwen-image-edit-plus | flux2-klein | "
                        "flux-kontext, or package.module:function returning an EditorAdapter."})
    model_name_or_path: str = field(default="", metadata={"help": "The editor's pipeline folder or Hub id."})
    base_model_id: Optional[str] = field(default=None, metadata={"help": "Hub id for the card when the model is "
                                         "a local folder."})
    editor_options: Optional[dict | str] = field(default=None, metadata={"help": "Adapter options (JSON on the "
                                                 "command line): height, width, cfg_scale, call_kwargs, ..."})
    dtype: str = field(default="bfloat16", metadata={"help": "Editor weights dtype: float32 | bfloat16 | float16 | "
                       "auto (OmniGen2-RL: bf16); the SDE math and LoRA weights are always fp32."})
    # --- data and reward ----------------------------------------------------------------------------------------
    dataset: str = field(default="", metadata={"help": "Editing requests: a JSONL file or a dataset folder."})
    dataset_split: Optional[str] = None
    max_train_rows: Optional[int] = None
    reward: str = field(default="", metadata={"help": "--reward spec (modeling_miescore.training.editor_rl."
                        "reward_specs; a YAML list of terms in a config); package.module:function for a callable."})
    reward_options: Optional[dict | str] = field(default=None, metadata={"help": "Options of the reward (JSON on "
                                                 "the command line), e.g. api_key_env; device: this process's."})
    reward_timeout: float = field(default=1800.0, metadata={"help": "Seconds to wait for one batch's rewards."})
    max_reward_failure_rate: float = field(default=0.25, metadata={"help": "Stop when more of a step's samples "
                                           "than this fail to get a reward."})
    # --- sampling (Flow-GRPO SDE) -------------------------------------------------------------------------------
    num_generations: int = field(default=12, metadata={"help": "G, edits per group (paper B.2.1: 12)."})
    num_inference_steps: int = field(default=20, metadata={"help": "T (paper B.2.1: 20)."})
    noise_level: float = field(default=0.7, metadata={"help": "SDE noise level a (OmniGen2-RL sigma_coef 0.7)."})
    sde_type: str = field(default="sde", metadata={"help": "sde (Flow-GRPO) | cps (arXiv 2509.05952)."})
    train_steps: str = field(default="fraction", metadata={"help": "fraction (OmniGen2-RL: SDE everywhere, a random "
                             "share trained) | sde_window (flow_grpo Qwen: a random SDE window, each member its own "
                             "ODE prefix; 'window' is its deprecated spelling) | fast (Flow-GRPO-Fast: one shared "
                             "ODE prefix per group, branching into G in the window) | mixgrpo (MixGRPO's sliding "
                             "window, moving with the iteration)."})
    train_fraction: float = field(default=0.6, metadata={"help": "Trained share of the steps (OmniGen2-RL 0.6)."})
    window_size: int = field(default=2, metadata={"help": "SDE + trained steps of a window (flow_grpo Qwen-Image 2; "
                             "MixGRPO 4)."})
    window_start: float = field(default=0.0, metadata={"help": "sde_window / fast: the window starts at a random "
                                "step in [window_start, window_end) x T (flow_grpo sde_window_range)."})
    window_end: float = 0.5
    mixgrpo_shift_interval: int = field(default=25, metadata={"help": "mixgrpo: the window moves every N steps "
                                        "(MixGRPO iters_per_group 25)."})
    mixgrpo_stride: int = field(default=1, metadata={"help": "mixgrpo: by this many denoising steps (MixGRPO "
                                "prog_overlap_step 1), rolling back to 0 past T - 2."})
    same_latent: Optional[bool] = field(default=None, metadata={"help": "A group shares one initial noise (flow_grpo "
                                        "same_latent, DanceGRPO / MixGRPO init_same_noise). None: true for fast "
                                        "(required) and mixgrpo (MixGRPO's script), false otherwise (OmniGen2-RL)."})
    last_step: str = field(default="stochastic", metadata={"help": "The final (never trained) step: stochastic "
                           "(OmniGen2-RL: the SDE on every step) | deterministic (flow_grpo Qwen-Image-Edit: an ODE "
                           "last step, so rewarded images carry no final-step noise)."})
    cfg_scale: Optional[float] = field(default=None, metadata={"help": "True-CFG scale (None: the editor's "
                                       "default, QwenImageEditPlus 4); 1 turns CFG off."})
    cfg_fraction: float = field(default=0.6, metadata={"help": "CFG on steps i/T <= this (OmniGen2-RL 0.6)."})
    detach_uncond: bool = field(default=False, metadata={"help": "Training recomputes the unconditional CFG branch "
                                "without gradients (flow_grpo SD3 train_sd3.py); false: gradients through both "
                                "(OmniGen2-RL, flow_grpo Qwen-Image-Edit)."})
    # --- objective ----------------------------------------------------------------------------------------------
    clip_range_low: float = field(default=1e-4, metadata={"help": "Ratio clip below 1 (OmniGen2-RL 1e-4)."})
    clip_range_high: float = field(default=5e-4, metadata={"help": "Ratio clip above 1 (OmniGen2-RL 5e-4)."})
    advantage_clip: float = field(default=5.0, metadata={"help": "Paper B.2.1: 5."})
    std_level: str = field(default="group", metadata={"help": "group | batch std (OmniGen2-RL default: group)."})
    drop_zero_std_groups: bool = field(default=False, metadata={"help": "Drop groups whose rewards are all equal "
                                       "(flow_grpo drops them; OmniGen2-RL keeps them)."})
    beta: float = field(default=0.04, metadata={"help": "KL weight (paper B.2.1: 0.04)."})
    kl_keep_dt: bool = field(default=False, metadata={"help": "Exact Gaussian KL (divide by sigma_t^2 |dt|); the "
                             "anchors drop |dt|, which makes the same beta ~T times stronger."})
    step_weighting: str = field(default="tempflow", metadata={"help": "none | tempflow (OmniGen2-RL "
                                "policy_loss_reweighting @6e0f1b9: step k's policy loss x K s_k / mean s, the "
                                "weights average K, the trained steps) | tempflow_mean_one (the same shape, "
                                "averaging 1: beta K times stronger relative to the policy term)."})
    # --- optimisation -------------------------------------------------------------------------------------------
    finetuning: str = field(default="lora", metadata={"help": "lora | full (every transformer weight trained; the "
                            "KL reference is a frozen copy; DDP or one process unless fsdp)."})
    fsdp: bool = field(default=False, metadata={"help": "With finetuning full: shard the transformer (and its frozen "
                       "reference) over the processes with torch FSDP2 fully_shard, for full fine-tuning of editors "
                       "too large for one device (issue 23, part 5); every group of a step then shares one step "
                       "plan. LoRA runs use DDP (the adapter is small)."})
    lora_rank: int = 32
    lora_alpha: float = 64.0
    lora_dropout: float = 0.0
    lora_targets: Optional[list[str]] = field(default=None, metadata={"help": "Module names (None: the editor's)."})
    learning_rate: float = 4e-4
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    weight_decay: float = 0.01
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    warmup_steps: int = 0
    gradient_checkpointing: bool = False
    per_device_batch_size: int = field(default=12, metadata={"help": "Images per rollout batch on one process. A "
                                       "multiple of num_generations keeps every group on one process; otherwise "
                                       "groups are split (OmniGen2-RL: 18 per GPU) and the images per step must "
                                       "still be whole groups."})
    rollout_batches_per_step: int = field(default=1, metadata={"help": "Rollout batches each process samples per "
                                          "step (their rewards overlap the next batch's sampling)."})
    gradient_accumulation_steps: Optional[int] = field(default=None, metadata={"help": "Deprecated spelling of "
                                                       "rollout_batches_per_step."})
    global_batch_size: Optional[int] = field(default=None, metadata={"help": "Check: images per step over all "
                                             "processes (paper: 576 = 48 groups x 12)."})
    train_batch_size: Optional[int] = field(default=None, metadata={"help": "Images per training forward; divides G "
                                            "(None: G, the rollout's own batch, so the on-policy ratio is exactly 1 "
                                            "even in bf16; OmniGen2-RL samples and trains at the same 9)."})
    updates_per_step: int = field(default=2, metadata={"help": "Optimizer updates per rollout (OmniGen2-RL "
                                  "num_update_steps_per_sampling 2)."})
    max_steps: int = field(default=1000, metadata={"help": "Paper B.2.1: 1,000 (checkpoint of step 800 kept)."})
    ema_decay: float = field(default=0.0, metadata={"help": "0 = off (OmniGen2-RL); flow_grpo 0.9."})
    ema_update_interval: int = field(default=8, metadata={"help": "An EMA update every N optimizer steps (flow_grpo "
                                     "ema.py: 8, counted in optimizer steps)."})
    seed: int = 0
    # --- outputs ------------------------------------------------------------------------------------------------
    output_dir: str = ""
    save_steps: int = field(default=50, metadata={"help": "Checkpoint every N steps (OmniGen2-RL 50)."})
    resume: bool = field(default=False, metadata={"help": "Continue the run in output_dir from its last checkpoint."})
    overwrite_output_dir: bool = False
    sample_grid_steps: int = field(default=5, metadata={"help": "A PNG grid every N steps (OmniGen2-RL 5); 0 off."})
    sample_grid_groups: int = field(default=3, metadata={"help": "Fixed groups in the grid (OmniGen2-RL 3)."})
    sample_grid_images: int = 4
    sample_grid_schedule: str = field(default="trained", metadata={"help": "trained: CFG on the steps the rollouts "
                                      "guide (cfg_fraction), ODE | pipeline: CFG on every step, ODE."})
    save_rollouts_steps: int = field(default=0, metadata={"help": "Every N steps, write the step's edits (PNG) "
                                     "with their rewards and advantages to rollouts/ (score-batch JSONL); 0 off."})
    report_to: str = field(default="none", metadata={"help": "none | tensorboard | wandb | all."})
    progress: bool = True

    def __post_init__(self):
        self.editor_options = _json_option(self.editor_options, "editor_options")
        self.reward_options = _json_option(self.reward_options, "reward_options")
        if self.gradient_accumulation_steps is not None:
            if self.rollout_batches_per_step not in (1, self.gradient_accumulation_steps):
                raise MIEScoreInputError(
                    f"gradient_accumulation_steps {self.gradient_accumulation_steps} (deprecated) and "
                    f"rollout_batches_per_step {self.rollout_batches_per_step} disagree; give rollout_batches_per_step")
            warnings.warn("gradient_accumulation_steps is deprecated here (it is the number of rollout batches per "
                          "step and process, not an optimizer setting): write rollout_batches_per_step",
                          FutureWarning, stacklevel=3)
            self.rollout_batches_per_step, self.gradient_accumulation_steps = self.gradient_accumulation_steps, None
        self.train_steps = resolve_train_steps(self.train_steps)
        if self.same_latent is None:
            self.same_latent = self.train_steps in ("fast", "mixgrpo")

    def validate(self, num_processes: int = 1) -> None:
        """Bad settings as one clear :class:`MIEScoreInputError` each (before anything is loaded)."""
        for name in ("editor", "model_name_or_path", "dataset", "reward", "output_dir"):
            if not getattr(self, name):
                raise MIEScoreInputError(f"{name} is required")
        if self.num_generations < 2:
            raise MIEScoreInputError(f"num_generations must be at least 2 (GRPO normalises rewards within a group), "
                                     f"got {self.num_generations}")
        self._check_batches(num_processes)
        self._check_sampling()
        if self.finetuning not in ("lora", "full"):
            raise MIEScoreInputError(f"finetuning must be lora or full, got {self.finetuning!r}")
        if self.fsdp and self.finetuning != "full":
            raise MIEScoreInputError(f"fsdp shards a full fine-tuning run; finetuning is {self.finetuning!r}: set "
                                     "finetuning: full, or drop fsdp (a LoRA trains with DDP)")
        if self.fsdp and self.ema_decay > 0:
            raise MIEScoreInputError("ema_decay > 0 is not supported with fsdp (the EMA would hold sharded "
                                     "copies); set ema_decay: 0")
        if self.ema_update_interval < 1:
            raise MIEScoreInputError(f"ema_update_interval must be >= 1, got {self.ema_update_interval}")
        if self.step_weighting not in STEP_WEIGHTINGS:
            raise MIEScoreInputError(f"step_weighting must be one of {', '.join(STEP_WEIGHTINGS)}, got "
                                     f"{self.step_weighting!r}")
        if not 0 <= self.max_reward_failure_rate <= 1:
            raise MIEScoreInputError("max_reward_failure_rate must be in [0, 1]")
        if self.dtype not in DTYPES:
            raise MIEScoreInputError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.save_rollouts_steps < 0:
            raise MIEScoreInputError(f"save_rollouts_steps must be >= 0 (0: off), got {self.save_rollouts_steps}")
        if self.sample_grid_schedule not in GRID_SCHEDULES:
            raise MIEScoreInputError(f"sample_grid_schedule must be one of {', '.join(GRID_SCHEDULES)}, got "
                                     f"{self.sample_grid_schedule!r}")

    def _check_batches(self, num_processes: int) -> None:
        g, per_batch, batches = self.num_generations, self.per_device_batch_size, self.rollout_batches_per_step
        if per_batch < 1 or batches < 1:
            raise MIEScoreInputError("per_device_batch_size and rollout_batches_per_step must be >= 1")
        total = per_batch * num_processes * batches
        if self.global_batch_size is not None and total != self.global_batch_size:
            raise MIEScoreInputError(
                f"global_batch_size {self.global_batch_size} != per_device_batch_size {per_batch} x processes "
                f"{num_processes} x rollout_batches_per_step {batches} = {total}; change one of them")
        if total % g:
            raise MIEScoreInputError(
                f"{total} images per step (per_device_batch_size {per_batch} x processes {num_processes} x "
                f"rollout_batches_per_step {batches}) are not whole groups of num_generations {g}; pick a "
                f"per_device_batch_size that makes them a multiple of {g}")
        split = per_batch % g != 0
        if split and self.fsdp:
            raise MIEScoreInputError(f"fsdp needs whole groups on each process (every process calls the sharded "
                                     f"transformer as often): make per_device_batch_size a multiple of {g}")
        micro = self.train_batch_size or g
        if g % micro:
            raise MIEScoreInputError(f"train_batch_size {micro} must divide num_generations {g}")
        layout = GroupSchedule(1, per_batch, batches, g, num_processes, 0)
        for rank in range(num_processes):
            pieces = [p for batch in layout.batches(1, rank) for p in batch]
            if split and any(p.size % micro for p in pieces):
                sizes = sorted({p.size for p in pieces})
                raise MIEScoreInputError(f"split groups give pieces of {sizes} images on process {rank}: "
                                         f"train_batch_size {micro} must divide each (e.g. {min(sizes)})")
            units = sum(-(-p.size // micro) for p in pieces)
            if units % self.updates_per_step:
                raise MIEScoreInputError(f"updates_per_step {self.updates_per_step} must divide the {units} "
                                         f"training micro-batches of a step on process {rank}")

    def _check_sampling(self) -> None:
        if not 0 <= self.cfg_fraction <= 1 or self.noise_level < 0 or self.beta < 0:
            raise MIEScoreInputError("cfg_fraction must be in [0, 1], noise_level and beta >= 0")
        if self.train_steps not in TRAIN_STEP_MODES:
            raise MIEScoreInputError(f"train_steps must be one of {', '.join(TRAIN_STEP_MODES)}, got "
                                     f"{self.train_steps!r}")
        if self.last_step not in LAST_STEP_MODES:
            raise MIEScoreInputError(f"last_step must be one of {', '.join(LAST_STEP_MODES)}, got {self.last_step!r}")
        if self.train_steps == "fast" and not self.same_latent:
            raise MIEScoreInputError("train_steps fast branches one shared trajectory per group, so the group "
                                     "shares its initial noise: drop same_latent: false, or use train_steps "
                                     "sde_window (each member its own prefix)")
        if self.mixgrpo_shift_interval < 1 or self.mixgrpo_stride < 1:
            raise MIEScoreInputError("mixgrpo_shift_interval and mixgrpo_stride must be >= 1")

    def identity(self) -> dict:
        data = asdict(self)
        return {k: data[k] for k in RUN_IDENTITY_FIELDS}

    def to_dict(self) -> dict:
        return json.loads(json.dumps(asdict(self), default=str))


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
