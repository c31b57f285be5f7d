"""Vendor / display family / display model (/ stepping) -> microarchitecture name.

Names follow archspec / GCC ``-march`` spelling. Client Skylake derivatives (Kaby, Coffee, Whiskey,
Amber, Comet Lake) share the Skylake core and report ``skylake``; Zen+ reports ``zen``.
The name is informational (tuning rows, ``info``): dispatch follows CPU features and XCR0, never
this name, so an unknown model still gets every level it can run.
"""
from __future__ import annotations

from .levels import LEVELS

UNKNOWN = "unknown"

# Intel family 6 display model -> name. Model 0x55 is resolved by stepping in ``intel_uarch``.
INTEL_FAMILY6: dict[int, str] = {
    0x3C: "haswell", 0x3F: "haswell", 0x45: "haswell", 0x46: "haswell",
    0x3D: "broadwell", 0x47: "broadwell", 0x4F: "broadwell", 0x56: "broadwell",
    0x4E: "skylake", 0x5E: "skylake", 0x8E: "skylake", 0x9E: "skylake",
    0xA5: "skylake", 0xA6: "skylake",
    0x66: "cannonlake",
    0x7D: "icelake", 0x7E: "icelake", 0x9D: "icelake",
    0x6A: "icelake_server", 0x6C: "icelake_server",
    0x8C: "tigerlake", 0x8D: "tigerlake",
    0xA7: "rocketlake",
    0x8F: "sapphirerapids",
    0xCF: "emeraldrapids",
    0xAD: "graniterapids", 0xAE: "graniterapids",
    0x97: "alderlake", 0x9A: "alderlake",
    0xBE: "alderlake_n",
    0xB7: "raptorlake", 0xBA: "raptorlake", 0xBF: "raptorlake",
    0xAA: "meteorlake", 0xAC: "meteorlake",
    0xB5: "arrowlake", 0xC5: "arrowlake", 0xC6: "arrowlake",
    0xBD: "lunarlake",
    0xAF: "sierraforest",
    0xCC: "pantherlake",
    0x57: "knl", 0x85: "knm",
}

# AMD family 0x19 display-model ranges (inclusive) -> name; Zen 3 and Zen 4 interleave.
AMD_FAMILY19: tuple[tuple[int, int, str], ...] = (
    (0x00, 0x0F, "zen3"),    # Milan
    (0x10, 0x1F, "zen4"),    # Genoa, Storm Peak
    (0x20, 0x5F, "zen3"),    # Vermeer, Rembrandt, Cezanne/Barcelo
    (0x60, 0x7F, "zen4"),    # Raphael, Phoenix, Hawk Point
    (0xA0, 0xAF, "zen4"),    # Bergamo, Siena
)


# The best ISA level a CPU of this microarchitecture offers when nothing hides part of it (the
# vendors' feature lists: Zen 4 / Zen 5 have AVX512_BF16, no AMX; Sapphire / Emerald / Granite
# Rapids have AMX). A virtual machine's CPU model can hide features (a Zen 4 VM without AVX-512 was
# seen here, 2026-12-01): ``hidden_levels`` names what such a host lacks. Informational, as the
# name is (``info``, the bench results' folder); dispatch never reads it.
NATIVE_LEVEL: dict[str, str] = {
    "zen4": "avx512_core_bf16", "zen5": "avx512_core_bf16",
    "cooperlake": "avx512_core_bf16",
    "sapphirerapids": "avx512_core_amx", "emeraldrapids": "avx512_core_amx",
    "graniterapids": "avx512_core_amx",
}


def intel_uarch(family: int, model: int, stepping: int, has_avx512_bf16: bool = False,
                has_amx: bool = False) -> str:
    """Intel name by display model; ``has_amx`` (AMX-TILE and AMX-BF16 in CPUID) overrides a model
    whose microarchitecture has no AMX (see ``uarch_name``)."""
    if family != 6:
        return UNKNOWN
    if model == 0x55:  # Skylake-SP / Cascade Lake / Cooper Lake share the model number
        name = ("cooperlake" if stepping >= 10 or has_avx512_bf16 else
                "cascadelake" if stepping >= 5 else "skylake_avx512")
    else:
        name = INTEL_FAMILY6.get(model, UNKNOWN)
    if has_amx and NATIVE_LEVEL.get(name) != "avx512_core_amx":
        return AMX_FALLBACK
    return name


# The name of an Intel CPU whose features contradict its model number: a virtual machine can report
# another model than the host's (the Intel AMX VM this project runs on reports family 6 model 167,
# Rocket Lake's, with AMX, AVX512_FP16 and a 2 MiB L2, none of which Rocket Lake has). AMX first
# shipped in Sapphire Rapids; Emerald Rapids has the same features, so the first is the class name.
AMX_FALLBACK = "sapphirerapids"


def amd_uarch(family: int, model: int) -> str:
    if family == 0x17:
        return "zen" if model < 0x30 else "zen2"   # 0x00-0x2F Zen/Zen+ (incl. Dali); 0x30+ Zen 2
    if family == 0x19:
        for lo, hi, name in AMD_FAMILY19:
            if lo <= model <= hi:
                return name
        return UNKNOWN
    if family == 0x1A:
        return "zen5" if model <= 0x7F else UNKNOWN
    return UNKNOWN


def uarch_name(vendor: str, family: int, model: int, stepping: int = 0,
               features: frozenset[str] | set[str] = frozenset()) -> str:
    """Microarchitecture name for a CPU, ``"unknown"`` when the model is not in the tables.

    Args:
        vendor: CPUID vendor string ("GenuineIntel", "AuthenticAMD", "HygonGenuine", ...).
        family, model, stepping: display values (extended fields already folded in).
        features: decoded feature names; used to split Cascade Lake from Cooper Lake, and to name an
            Intel CPU with AMX (AMX-TILE and AMX-BF16) whose model number belongs to a
            microarchitecture without it ``"sapphirerapids"`` (``AMX_FALLBACK``: a VM's CPU model).
    """
    if vendor == "GenuineIntel":
        has_amx = {"amx_tile", "amx_bf16"} <= set(features)
        return intel_uarch(family, model, stepping, "avx512_bf16" in features, has_amx)
    if vendor == "AuthenticAMD":
        return amd_uarch(family, model)
    if vendor == "HygonGenuine" and family == 0x18:
        return "zen"  # Hygon Dhyana is a Zen 1 derivative
    return UNKNOWN


def hidden_levels(uarch: str, best: str) -> tuple[str, ...]:
    """The levels a CPU of ``uarch`` offers (``NATIVE_LEVEL``) above ``best``, the best level this
    host can run: empty when the host runs all of them, or the uarch is not in the table."""
    native = NATIVE_LEVEL.get(uarch)
    if native is None or best not in LEVELS:
        return ()
    return LEVELS[LEVELS.index(best) + 1:LEVELS.index(native) + 1]
