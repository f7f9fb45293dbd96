"""MER-Bench construction (SpatialReward paper sec. 4.2-4.3, appendix A.1, prompts D.3): instruction synthesis,
candidate generation, annotation (store + Gradio app) and export to the raw release the MER-Bench builder reads.
See ``docs/mer_bench_construction.md``."""

from .annotation_app import AnnotationSession, build_annotation_app
from .annotation_export import export_raw_release
from .annotation_store import AnnotationStore
from .candidate_generation import EditingSystem, generate_candidates, parse_system_spec
from .instruction_plan import InstructionJob, plan_jobs, read_sources
from .instruction_prompts import GENERAL_PROMPT, HUMAN_PROMPT, MER_SUBTASKS
from .instruction_synthesis import parse_instruction, synthesize_instructions

__all__ = ["AnnotationSession", "AnnotationStore", "EditingSystem", "GENERAL_PROMPT", "HUMAN_PROMPT",
           "InstructionJob", "MER_SUBTASKS", "build_annotation_app", "export_raw_release", "generate_candidates",
           "parse_instruction", "parse_system_spec", "plan_jobs", "read_sources", "synthesize_instructions"]
