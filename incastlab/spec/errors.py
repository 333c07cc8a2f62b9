"""The one error a spec raises: every problem found, one per line."""
from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SpecError"]


class SpecError(ValueError):
    """The spec is invalid. ``errors`` lists every problem; the message has one per line."""

    def __init__(self, errors: Iterable[str], source: str | None = None):
        self.errors = list(errors)
        self.source = source
        where = f" ({source})" if source else ""
        super().__init__(f"invalid spec{where}:\n" + "\n".join(f"  {e}" for e in self.errors))
