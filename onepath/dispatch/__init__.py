"""The probe and the dispatch: what this CPU and OS can run, and which kernel each op selects.

- ``probe()`` -> ``CpuInfo`` of the live host (cached); ``CpuInfo.from_dump(record)`` for a recorded CPU.
- ``LEVELS``: the ISA levels, ascending (oneDNN names plus ``generic``).
- ``select(op, dtype, cpu=None, level=None)`` -> the registry ``Kernel`` row that would run.
- ``isa()``, ``available_isas()``, ``max_isa()``: the level in force and its cap.
"""
from .cap import available_isas, cap_reason, isa, max_isa
from .cpu import CpuInfo, probe
from .levels import LEVELS
from .registry import REGISTRY, Kernel, rows, select

__all__ = ["CpuInfo", "probe", "LEVELS", "REGISTRY", "Kernel", "rows", "select",
           "isa", "available_isas", "max_isa", "cap_reason"]
