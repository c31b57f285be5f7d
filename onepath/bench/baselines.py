"""The bench's optional baselines: torch when installed (never a dependency of onepath), and the note
the bench prints when a suite's baseline is missing, saying how to get it."""
from __future__ import annotations

# The torch release the bench's numbers and the README refer to (CPU build).
INSTALL = {"torch": "pip install torch==2.13.0"}


def torch_or_none():
    """The torch module, or None when it is not importable."""
    try:
        import torch
    except Exception:  # noqa: BLE001 - an optional baseline: a broken install counts as missing
        return None
    return torch


def missing_note(names) -> str:
    """One line per missing baseline, e.g. 'no torch baseline: torch is not installed
    (pip install torch==2.13.0 to measure onepath against it)'."""
    return "\n".join(f"no {n} baseline: {n} is not installed ({INSTALL.get(n, 'pip install ' + n)} "
                     f"to measure onepath against it)" for n in names)
