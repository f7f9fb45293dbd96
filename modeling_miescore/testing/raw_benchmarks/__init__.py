"""Synthetic *raw* MIE-Bench and MER-Bench releases, built from real photos, with a planted truth.

The builders in :mod:`modeling_miescore.data.builders` turn raw releases into Parquet datasets. To test
them end to end (and anything downstream: metrics, training smoke tests) without the real data, these
functions write raw releases in exactly the documented layouts:

* :func:`make_raw_mie_bench`: multi-source instances composed from scikit-image's bundled photos
  (astronaut, coffee, chelsea, rocket, camera, ...; only loaders that work offline), 12 "editing
  models" whose edits carry **controlled faults**, and 15 simulated raters per edit whose ratings
  follow the planted latent quality (paper: 15 raters per image, 0–5 scale, three dimensions).
* :func:`make_raw_mer_bench`: one source photo + multi-operation instruction + 6 candidate edits per
  sample, each judged by 5 annotators on three tiers (overall / SC / PQ), with a few candidates
  planted without a 3-of-5 majority (SpatialReward paper, section 4 and appendix A.1).

Planted faults and the dimension each one lowers (MIE-Bench; effects on the 0–5 latent scale, times
the fault's severity in [0.4, 1]):

===================  ===========================================================  ====================
fault                what happens to the edited image                              lowers
===================  ===========================================================  ====================
``blur``             Gaussian blur                                                 VQ (strongly)
``jpeg``             heavy JPEG re-compression                                     VQ
``noise``            additive Gaussian noise                                       VQ
``pasted``           objects pasted as hard rectangles with mismatched brightness  VQ, a little IF/AP
``color_shift``      global colour cast                                            AP, a little VQ
``missing_source``   one source's object (or the global transfer) is left out      IF and AP
===================  ===========================================================  ====================

Raters: ``rating = clip(2.5 + scale·(latent − 2.5) + bias + noise, 0, 5)``, rounded to 0.1; a few unreliable ones
(ids in ``truth.json``) are noisy but not wild, so BT.500 screening can catch them. Deterministic from ``seed``.
"""

from .editor_benchmarks import (IMGEDIT_PROMPTS_KEYS, make_raw_gedit_bench, make_raw_imgedit_bench,
                                write_imgedit_prompts_json, write_vie_prompts_module)
from .external_files import make_raw_aurora_bench, make_raw_ebench, make_raw_ieqa, make_raw_mmrb2
from .external_hub import make_raw_editreward_bench, make_raw_editscore_bench, make_raw_genai_bench, make_raw_imagenhub
from .mer_bench import MER_SUBTASKS, MER_SYSTEMS, make_raw_mer_bench
from .mie_bench import MIE_EDITING_MODELS, MIE_FAULTS, make_raw_mie_bench

__all__ = ["IMGEDIT_PROMPTS_KEYS", "MER_SUBTASKS", "MER_SYSTEMS", "MIE_EDITING_MODELS", "MIE_FAULTS",
           "make_raw_aurora_bench", "make_raw_ebench", "make_raw_editreward_bench", "make_raw_editscore_bench",
           "make_raw_gedit_bench", "make_raw_genai_bench", "make_raw_ieqa", "make_raw_imagenhub", "make_raw_imgedit_bench",
           "make_raw_mer_bench", "make_raw_mie_bench", "make_raw_mmrb2", "write_imgedit_prompts_json",
           "release_writer", "write_vie_prompts_module"]


def release_writer(converter_module: str):
    """The fixture writing a release of the benchmark that ``converter_module`` converts (``make_raw_<module>``
    with its defaults must give a release the converter accepts with its defaults)."""
    found = globals().get(f"make_raw_{converter_module}")
    if found is None:
        raise LookupError(f"no make_raw_{converter_module} in {__name__}: every converter module needs a fixture "
                          "writing its release")
    return found
