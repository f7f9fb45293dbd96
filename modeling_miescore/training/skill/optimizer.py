"""The optimiser ``O`` of eq. 7 (MIEScore paper): shows a text model the numbered skill with the failures and
asks for ``k`` candidates of bounded edits."""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence, Tuple

from .answers import Candidate, parse_optimizer_output
from .backends import GenerativeBackend
from .edits import EditBounds
from .prompts import build_optimizer_prompt

__all__ = ["SkillOptimizer"]

class SkillOptimizer:
    """``O`` of eq. 7: asks ``backend`` (text only) for ``k`` candidates of bounded edits."""

    def __init__(self, backend: GenerativeBackend, k: int = 4, bounds: EditBounds = EditBounds(),
                 max_new_tokens: int = 2048, score_max: float = 5.0):
        if k < 1:
            raise ValueError(f"k (num_candidates) must be >= 1, got {k}")
        self.backend, self.k, self.bounds = backend, int(k), bounds
        self.max_new_tokens, self.score_max = int(max_new_tokens), float(score_max)

    def propose(self, skill: str, failures: Sequence[Mapping[str, Any]],
                successes: Sequence[Mapping[str, Any]] = ()) -> Tuple[List[Candidate], List[Dict[str, str]], str]:
        """Returns ``(candidates, errors, raw_answer)``; backend failures become an error, never an exception."""
        prompt = build_optimizer_prompt(skill, failures, self.k, self.bounds, self.score_max, successes=successes)
        gen = self.backend.generate([[prompt]], self.max_new_tokens)[0]
        if gen.text is None:
            return [], [{"code": "backend_error", "message": str(gen.error)}], ""
        candidates, errors = parse_optimizer_output(gen.text, skill, self.k, self.bounds)
        return candidates, errors, gen.text

