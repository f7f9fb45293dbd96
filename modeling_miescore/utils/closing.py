"""``ClosesOnExit``: the context-manager half of a class that holds a resource released by ``close()``."""

from __future__ import annotations

from typing import Self

__all__ = ["ClosesOnExit"]


class ClosesOnExit:
    """Mixin: ``with obj:`` returns ``obj`` and calls ``obj.close()`` on the way out (errors propagate)."""

    def close(self) -> None:  # pragma: no cover - the subclass's
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
