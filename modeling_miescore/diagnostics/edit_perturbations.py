"""The edits ``miescore doctor`` scores: the bundled examples and perturbations of them whose effect is known.

Each example edit (``data.example_edits``: real photos, composed edits, one deliberately failed edit) is
scored as made and in four perturbed variants, chosen so that a scorer that reads its inputs must react:

* ``source_as_edited``: the edited image replaced by the first source. Nothing was edited, so instruction
  following should drop.
* ``noise``: heavy Gaussian noise (sigma 64 of 255) on the edited image: visual quality should drop.
* ``blur``: a heavy Gaussian blur (radius 1/32 of the longer side) on the edited image: visual quality should drop.
* ``swapped_sources``: the sources in reverse order. The instruction names them by position ("the cat from
  image 2"), so what counts as preserved changes and attribute preservation should move (either way).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageFilter

from ..data.example_edits import example_edits
from ..image_io import MIEScoreInputError

NOISE_SIGMA = 64.0  # of 255
BLUR_FRACTION = 1 / 32  # blur radius as a fraction of the longer side
VARIANTS = ("original", "source_as_edited", "noise", "blur", "swapped_sources")


@dataclass
class DoctorEdit:
    """One edit to score: ``example`` is the bundled example's id, ``variant`` one of :data:`VARIANTS`."""

    example: str
    variant: str
    sources: list
    edited: Image.Image
    instruction: str

    def as_sample(self) -> dict:
        return {"sources": list(self.sources), "edited": self.edited, "instruction": self.instruction}


def add_noise(image: Image.Image, sigma: float = NOISE_SIGMA, seed: int = 0) -> Image.Image:
    """``image`` plus Gaussian noise of ``sigma`` (0-255 scale), clipped; deterministic for a seed."""
    array = np.asarray(image.convert("RGB"), dtype=np.float32)
    noisy = array + np.random.default_rng(seed).normal(0.0, sigma, array.shape)
    return Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))


def blur(image: Image.Image, fraction: float = BLUR_FRACTION) -> Image.Image:
    """A Gaussian blur whose radius is ``fraction`` of the longer side."""
    return image.filter(ImageFilter.GaussianBlur(max(1.0, fraction * max(image.size))))


def perturb(example: dict, variant: str, seed: int = 0) -> DoctorEdit:
    """The ``variant`` of one example edit (a dict of ``data.example_edits``)."""
    sources, edited = list(example["sources"]), example["edited"]
    if variant == "source_as_edited":
        edited = sources[0]
    elif variant == "noise":
        edited = add_noise(edited, seed=seed)
    elif variant == "blur":
        edited = blur(edited)
    elif variant == "swapped_sources":
        sources = sources[::-1]
    elif variant != "original":
        raise ValueError(f"unknown variant {variant!r}; choose one of {VARIANTS}")
    return DoctorEdit(example=example["id"], variant=variant, sources=sources, edited=edited,
                      instruction=example["instruction"])


def doctor_edits(quick: bool = False) -> list[DoctorEdit]:
    """Every example in every variant, originals first. ``quick``: three examples at 128 px instead of all five at
    256 px. Needs scikit-image (the photos); a missing one is a user error naming the fix."""
    try:
        examples = example_edits(max_side=128 if quick else 256)
    except (ImportError, RuntimeError) as err:
        raise MIEScoreInputError(f"the doctor's example edits need scikit-image's photos ({err}); "
                                 "install it with: pip install scikit-image") from None
    examples = examples[:3] if quick else examples
    return [perturb(example, variant, seed=k) for variant in VARIANTS for k, example in enumerate(examples)
            if variant != "swapped_sources" or len(example["sources"]) > 1]


__all__ = ["BLUR_FRACTION", "DoctorEdit", "NOISE_SIGMA", "VARIANTS", "add_noise", "blur", "doctor_edits", "perturb"]
