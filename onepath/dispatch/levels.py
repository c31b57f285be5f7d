"""ISA levels: names, order and what each one requires. The single source of truth for the levels.

Levels are cumulative (each one needs everything the one below needs) and use oneDNN's names.
``REQUIREMENTS`` maps each level to the CPU features (``/proc/cpuinfo`` spelling, as decoded by
``onepath.dispatch.cpu``), the XCR0 state bits the OS must have enabled, and whether the Linux
XTILEDATA permission must have been granted. Everything else (the probe, the cap, the registry, the
tests) imports these names; nothing else lists level requirements.
"""
from __future__ import annotations

from typing import NamedTuple

LEVELS: tuple[str, ...] = ("generic", "avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx")

# XCR0 (XFEATURE_ENABLED_MASK) state components, by bit.
XCR0_X87 = 1 << 0
XCR0_SSE = 1 << 1          # XMM registers
XCR0_AVX = 1 << 2          # upper halves of YMM
XCR0_OPMASK = 1 << 5       # k0-k7
XCR0_ZMM_HI256 = 1 << 6    # upper halves of ZMM0-15
XCR0_HI16_ZMM = 1 << 7     # ZMM16-31
XCR0_TILECFG = 1 << 17
XCR0_TILEDATA = 1 << 18

# OS-enabled state groups: name -> (XCR0 mask, human description used in explanations).
STATE_GROUPS: dict[str, tuple[int, str]] = {
    "avx": (XCR0_SSE | XCR0_AVX, "XMM/YMM state"),
    "avx512": (XCR0_SSE | XCR0_AVX | XCR0_OPMASK | XCR0_ZMM_HI256 | XCR0_HI16_ZMM,
               "opmask/ZMM state"),
    "amx": (XCR0_TILECFG | XCR0_TILEDATA, "AMX tile state (TILECFG/TILEDATA)"),
}


class Requirement(NamedTuple):
    """What one level needs on top of the level below it.

    features: CPU features (lower-case ``/proc/cpuinfo`` names) the level adds.
    xcr0: XCR0 bits the OS must have enabled (cumulative mask for this level).
    state: name of the ``STATE_GROUPS`` entry the level's new registers live in, or None.
    amx_permission: the Linux XTILEDATA permission (arch_prctl) must be granted.
    """
    features: tuple[str, ...]
    xcr0: int
    state: str | None
    amx_permission: bool = False


_AVX_MASK = STATE_GROUPS["avx"][0]
_AVX512_MASK = STATE_GROUPS["avx512"][0]
_AMX_MASK = STATE_GROUPS["amx"][0]

# THE table. Features are the level's additions; ``required_features`` gives the cumulative set.
REQUIREMENTS: dict[str, Requirement] = {
    "generic": Requirement((), 0, None),
    "avx2": Requirement(("osxsave", "avx", "avx2", "fma", "f16c"), _AVX_MASK, "avx"),
    "avx512_core": Requirement(("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"),
                               _AVX512_MASK, "avx512"),
    "avx512_core_bf16": Requirement(("avx512_bf16",), _AVX512_MASK, None),
    "avx512_core_amx": Requirement(("amx_bf16", "amx_tile"), _AVX512_MASK | _AMX_MASK, "amx",
                                   amx_permission=True),
}

assert tuple(REQUIREMENTS) == LEVELS


def level_index(name: str) -> int:
    """Position of a level in ``LEVELS`` (0 = generic).

    Raises:
        ValueError: unknown level; the message lists the valid names.
        TypeError: name is not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"ISA level must be a str, got {type(name).__name__}")
    key = name.strip().lower()
    try:
        return LEVELS.index(key)
    except ValueError:
        raise ValueError(f"unknown ISA level {name!r}; valid levels: {', '.join(LEVELS)}") from None


def check_level(name: str) -> str:
    """Normalise and validate a level name (case-insensitive); returns the canonical name."""
    return LEVELS[level_index(name)]


def levels_up_to(name: str) -> tuple[str, ...]:
    """Every level from ``generic`` up to and including ``name``."""
    return LEVELS[: level_index(name) + 1]


def required_features(name: str) -> frozenset[str]:
    """All CPU features a level needs, including those of the levels below it."""
    out: set[str] = set()
    for level in levels_up_to(name):
        out.update(REQUIREMENTS[level].features)
    return frozenset(out)


def required_xcr0(name: str) -> int:
    """XCR0 mask a level needs (cumulative)."""
    mask = 0
    for level in levels_up_to(name):
        mask |= REQUIREMENTS[level].xcr0
    return mask


def needs_amx_permission(name: str) -> bool:
    """Whether a level needs the Linux XTILEDATA permission."""
    return any(REQUIREMENTS[level].amx_permission for level in levels_up_to(name))
