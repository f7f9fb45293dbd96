"""Every setting of a Flow-GRPO editor run, one dataclass (the recipe's arguments; ``--config x.yaml`` and every
field on the command line through TRL's ``TrlParser``).

Defaults are the SpatialReward paper's (sec. 5.3, appendix B.2.1: LoRA r32/a64, lr 4e-4, global batch 576, G 12,
T 20, beta 0.04, advantage clip 5) and, where the paper is silent, EditScore's OmniGen2-RL config it reproduces
(``examples/OmniGen2-RL/options/omnigen2_edit_rl_4machine_editscore7b_avg4.yml`` @5562c05, "OmniGen2-RL" below).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Optional

from ...image_io import MIEScoreInputError
from ...scoring.loading import DTYPES

__all__ = ["FlowGRPOConfig", "RUN_IDENTITY_FIELDS"]

# Fields that make two runs different runs (a --resume on a folder whose run.json differs here is refused).
RUN_IDENTITY_FIELDS = ("editor", "model_name_or_path", "dataset", "dataset_split", "reward", "seed",
                       "num_generations", "num_inference_steps", "per_device_batch_size",
                       "gradient_accumulation_steps", "finetuning", "fsdp", "lora_rank", "lora_alpha", "lora_targets")


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
    train_steps: str = field(default="fraction", metadata={"help": "fraction (OmniGen2-RL) | window (Flow-GRPO-Fast)."})
    train_fraction: float = field(default=0.6, metadata={"help": "Trained share of the steps (OmniGen2-RL 0.6)."})
    window_size: int = 2
    window_start: float = 0.0
    window_end: float = 0.5
    cfg_scale: Optional[float] = field(default=None, metadata={"help": "True-CFG scale (None: the editor's "
                                       "default, QwenImageEditPlus 4); 1 turns CFG off."})
    cfg_fraction: float = field(default=0.6, metadata={"help": "CFG on steps i/T <= this (OmniGen2-RL 0.6)."})
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
    step_weighting: str = field(default="none", metadata={"help": "none | tempflow (TempFlow-GRPO)."})
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
    per_device_batch_size: int = field(default=12, metadata={"help": "Images per rollout batch on one process; a "
                                       "multiple of num_generations (groups never split across processes)."})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "Rollout batches per step and process."})
    global_batch_size: Optional[int] = field(default=None, metadata={"help": "Check: images per step over all "
                                             "processes (paper: 576 = 48 groups x 12)."})
    train_batch_size: Optional[int] = field(default=None, metadata={"help": "Images per training forward; divides G "
                                            "(None: G, the rollout's own batch, so the on-policy ratio is exactly 1)."})
    updates_per_step: int = field(default=2, metadata={"help": "Optimizer updates per rollout (OmniGen2-RL "
                                  "num_update_steps_per_sampling 2)."})
    max_steps: int = field(default=1000, metadata={"help": "Paper B.2.1: 1,000 (checkpoint of step 800 kept)."})
    ema_decay: float = field(default=0.0, metadata={"help": "0 = off (OmniGen2-RL); flow_grpo 0.9."})
    ema_update_interval: int = field(default=8, metadata={"help": "flow_grpo: an EMA update every 8 steps."})
    seed: int = 0
    # --- outputs ------------------------------------------------------------------------------------------------
    output_dir: str = ""
    save_steps: int = field(default=50, metadata={"help": "Checkpoint every N steps (OmniGen2-RL 50)."})
    resume: bool = field(default=False, metadata={"help": "Continue the run in output_dir from its last checkpoint "
                         "(= --resume_from_checkpoint latest)."})
    resume_from_checkpoint: Optional[str] = field(default=None, metadata={"help": "latest | PATH (diffusers' "
                                                  "spelling): continue from output_dir's last checkpoint, or from "
                                                  "the checkpoint-N folder of output_dir at PATH. latest on a "
                                                  "folder without a run starts one (as diffusers)."})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "Replace the run already in output_dir "
                                       "(its checkpoints, adapter, metrics and samples)."})
    push_to_hub: bool = field(default=False, metadata={"help": "Upload the adapter, its card, run.json, metrics and "
                              "the last sample grid to the Hub in one commit after training (huggingface_hub "
                              "upload_folder); the token and the network are checked before training starts."})
    hub_model_id: Optional[str] = field(default=None, metadata={"help": "The Hub repository (default: output_dir's "
                                        "folder name in your namespace, as diffusers' scripts)."})
    hub_private_repo: Optional[bool] = field(default=None, metadata={"help": "Create the repository private."})
    sample_grid_steps: int = field(default=5, metadata={"help": "A PNG grid every N steps (OmniGen2-RL 5); 0 off."})
    sample_grid_groups: int = field(default=3, metadata={"help": "Fixed groups in the grid (OmniGen2-RL 3)."})
    sample_grid_images: int = 4
    save_rollouts_steps: int = field(default=0, metadata={"help": "Every N steps, write the step's edits (PNG) "
                                     "with their rewards and advantages to rollouts/ (score-batch JSONL); 0 off."})
    report_to: str = field(default="none", metadata={"help": "none | tensorboard | wandb | all, or another "
                           "accelerate tracker (comma-separated for several)."})
    progress: bool = field(default=True, metadata={"help": "A progress bar; --no_progress: one log line per step."})

    def __post_init__(self):
        self.editor_options = _json_option(self.editor_options, "editor_options")
        self.reward_options = _json_option(self.reward_options, "reward_options")

    def validate(self, num_processes: int = 1) -> None:
        """Bad settings as one clear :class:`MIEScoreInputError` each (before anything is loaded)."""
        g = self.num_generations
        for name in ("editor", "model_name_or_path", "dataset", "reward", "output_dir"):
            if not getattr(self, name):
                raise MIEScoreInputError(f"{name} is required")
        if g < 2:
            raise MIEScoreInputError(f"num_generations must be at least 2 (GRPO normalises rewards within a group), "
                                     f"got {g}")
        if self.per_device_batch_size % g:
            raise MIEScoreInputError(f"per_device_batch_size {self.per_device_batch_size} is not a multiple of "
                                     f"num_generations {g}: groups are never split across processes")
        # the global batch is then a whole number of groups: it must equal this multiple of per_device_batch_size
        total = self.per_device_batch_size * num_processes * self.gradient_accumulation_steps
        if self.global_batch_size is not None and total != self.global_batch_size:
            raise MIEScoreInputError(
                f"global_batch_size {self.global_batch_size} != per_device_batch_size {self.per_device_batch_size} "
                f"x processes {num_processes} x gradient_accumulation_steps {self.gradient_accumulation_steps} "
                f"= {total}; change one of them")
        micro = self.train_batch_size or g
        if g % micro:
            raise MIEScoreInputError(f"train_batch_size {micro} must divide num_generations {g}")
        units = self.groups_per_process * (g // micro)
        if units % self.updates_per_step:
            raise MIEScoreInputError(f"updates_per_step {self.updates_per_step} must divide the {units} training "
                                     "micro-batches of a step on each process")
        if not 0 <= self.cfg_fraction <= 1 or self.noise_level < 0 or self.beta < 0:
            raise MIEScoreInputError("cfg_fraction must be in [0, 1], noise_level and beta >= 0")
        if self.finetuning not in ("lora", "full"):
            raise MIEScoreInputError(f"finetuning must be lora or full, got {self.finetuning!r}")
        if self.fsdp and self.finetuning != "full":
            raise MIEScoreInputError(f"fsdp shards a full fine-tuning run; finetuning is {self.finetuning!r}: set "
                                     "finetuning: full, or drop fsdp (a LoRA trains with DDP)")
        if self.fsdp and self.ema_decay > 0:
            raise MIEScoreInputError("ema_decay > 0 is not supported with fsdp (the EMA would hold sharded "
                                     "copies); set ema_decay: 0")
        if self.step_weighting not in ("none", "tempflow"):
            raise MIEScoreInputError(f"step_weighting must be none or tempflow, got {self.step_weighting!r}")
        if not 0 <= self.max_reward_failure_rate <= 1:
            raise MIEScoreInputError("max_reward_failure_rate must be in [0, 1]")
        if self.dtype not in DTYPES:
            raise MIEScoreInputError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.save_rollouts_steps < 0:
            raise MIEScoreInputError(f"save_rollouts_steps must be >= 0 (0: off), got {self.save_rollouts_steps}")
        if self.resume_target and self.overwrite_output_dir:
            raise MIEScoreInputError("resuming (--resume / --resume_from_checkpoint) and overwrite_output_dir "
                                     "exclude each other; drop one")
        self.trackers()

    @property
    def resume_target(self) -> Optional[str]:
        """None (a fresh run), ``"latest"`` (``resume`` or ``resume_from_checkpoint: latest``) or a checkpoint
        path."""
        target = (self.resume_from_checkpoint or "").strip()
        return target or ("latest" if self.resume else None)

    def trackers(self) -> Optional[list]:
        """``report_to`` as accelerate's ``log_with`` (None: no tracker); a tracker name accelerate does not
        know is one :class:`MIEScoreInputError` with the closest name."""
        from accelerate.utils import LoggerType

        from ...utils.suggestions import closest_name

        names = [n.strip() for n in str(self.report_to or "none").split(",") if n.strip()]
        known = ["none", *LoggerType.list()]
        for name in names:
            if name not in known:
                match = closest_name(name, known)
                hint = f"did you mean {match}? Trackers: " if match else "use one of "
                raise MIEScoreInputError(f"report_to {name!r} is not a tracker; {hint}{', '.join(known)}")
        names = [n for n in names if n != "none"]
        return names or None

    @property
    def groups_per_process(self) -> int:
        """Groups one process samples per step."""
        return self.per_device_batch_size // self.num_generations * self.gradient_accumulation_steps

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
