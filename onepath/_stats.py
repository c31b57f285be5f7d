"""Which (op, dtype, level) kernels ran in this process (the test suite prints it; cheap set add)."""
from __future__ import annotations

_seen: set[tuple[str, str, str]] = set()


def record(op: str, dtype: str, level: str) -> None:
    """Note that a kernel of ``level`` ran ``op`` on ``dtype``."""
    _seen.add((op, dtype, level))


def exercised() -> frozenset[tuple[str, str, str]]:
    """The (op, dtype, level) triples that ran so far."""
    return frozenset(_seen)
