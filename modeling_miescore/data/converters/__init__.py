"""Converters: external image-editing benchmarks, from their public release formats, into one single-source edit
dataset (Parquet + card, ``datasets.load_dataset``-native) that ``miescore benchmark zero-shot`` / ``reward`` read,
and the editor benchmarks' editing inputs that ``miescore benchmark gedit`` / ``imgedit`` judge an editor on.

``miescore convert-benchmark NAME --raw DIR --out DIR`` (or ``get_converter(NAME)(raw, out).build()``) runs one.

Registry (:data:`CONVERTERS`; each converter module's docstring cites where its release format was read, and the
table :data:`.benchmark_specs.SPECS` holds each benchmark's format source URL, kinds, dimension mapping and tie rule):

===================  ====================  =====================  ============================================
name                 kinds                 paper column           release read
===================  ====================  =====================  ============================================
``genai-bench``      pairwise              MIEScore Table 6       Hub Parquet (TIGER-Lab/GenAI-Bench)
``aurora-bench``     pairwise              MIEScore Table 6       EditReward's pairwise JSON (the authors'
                                                                  ratings file's fields are not published)
``editscore-bench``  pairwise              MIEScore Table 6,      Hub save_to_disk (EditScore/EditReward-Bench)
                                           SpatialReward Table 1
``imagenhub``        pointwise             MIEScore Table 6       GitHub TSVs + Hub Parquet + output images
``ebench-18k``       pointwise             MIEScore Table 6       GitHub JSON Lines (LMM4Edit) + images
``editreward-bench`` pointwise, pairwise   MIEScore Table 6       Hub Parquet (TIGER-Lab/EditReward-Bench)
``ieqa``             pointwise             MIEScore Table 6       JSON Lines as EditHF's inference.py reads
``mmrb2``            pairwise              SpatialReward Table 1  GitHub edit.json + images (MMRB2)
``gedit-bench``      editing               SpatialReward Table 3  Hub Parquet / Arrow (stepfun-ai/GEdit-Bench)
``imgedit-bench``    editing               SpatialReward Table 3  GitHub basic_edit.json + Benchmark.tar images
===================  ====================  =====================  ============================================

MER-Bench (SpatialReward Table 1) is built by ``miescore build-dataset mer-bench`` (its own K-pair schema).

Common output schema. Two configs, each one ``test`` split, written under ``data/<config>/``:

* ``pointwise``: one edited image with human scores: ``id``, ``source_images`` (list of images; one for
  single-source benchmarks), ``edited_image``, ``instruction``, ``editing_model``, ``group_id`` (rows that share
  sources/instruction or a ranking group), ``subset`` (the benchmark's task type or sub-split) and
  ``human_visual_quality``, ``human_instruction_following``, ``human_attribute_preservation``, ``human_overall``
  (float, on the benchmark's own scale, null where the benchmark has no such dimension; which benchmark
  dimension fills which column is the ``dimensions`` mapping of the spec, recorded in the card).
* ``pairwise``: two edits of the same sources and instruction with a human preference: ``id``,
  ``source_images``, ``instruction``, ``edited_a``, ``edited_b``, ``edited_a_id``, ``edited_b_id`` (ids of the
  edited images: an image in several pairs keeps one id, so it is scored once), ``model_a``, ``model_b``,
  ``label`` (ClassLabel ``a`` / ``b`` / ``tie`` / ``both_bad``), ``dimension`` (the MIEScore score key the
  preference is about), ``subset``, ``group_id``.
* ``editing`` (editor benchmarks): an editing input for an editor to answer, no edited image and no human label:
  ``id`` (unique), ``key`` (the benchmark's key), ``source_images``, ``instruction``, ``category`` (the benchmark's
  task type), ``language`` (instruction language) and one bool column per subset flag of the spec
  (GEdit-Bench: ``intersection_exist``). ``miescore benchmark gedit`` / ``imgedit`` judge an editor's outputs.

The card's metadata holds a ``miescore_benchmark`` block (name, kinds, dimension mapping, tie rule, format source)
that the benchmark runner reads. Bad raw data: every problem is listed with file:line (Parquet/Arrow: file:row)
and nothing is written (CLI exit status 2).
"""

from __future__ import annotations

from ...utils.lazy_registry import load_registered

__all__ = ["CONVERTERS", "converter_spec", "get_converter"]

# name -> "module:Class" (module relative to this package); imports are lazy
CONVERTERS: dict[str, str] = {
    "genai-bench": ".genai_bench:GenAIBenchConverter",
    "aurora-bench": ".aurora_bench:AuroraBenchConverter",
    "editscore-bench": ".editscore_bench:EditScoreBenchConverter",
    "imagenhub": ".imagenhub:ImagenHubConverter",
    "ebench-18k": ".ebench:EBenchConverter",
    "editreward-bench": ".editreward_bench:EditRewardBenchConverter",
    "ieqa": ".ieqa:IEQAConverter",
    "mmrb2": ".mmrb2:MMRB2Converter",
    "gedit-bench": ".gedit_bench:GEditBenchConverter",
    "imgedit-bench": ".imgedit_bench:ImgEditBenchConverter",
}


def get_converter(name: str):
    """The converter class (a :class:`~.base.BenchmarkConverter` subclass) registered as ``name``."""
    return load_registered(CONVERTERS, name, __name__, "benchmark")


def converter_spec(name: str):
    """The :class:`~.schema.BenchmarkSpec` of the converter registered as ``name``."""
    return get_converter(name).spec
