"""The CPU probe: decode CPUID leaves + XCR0 into a ``CpuInfo`` and derive the ISA levels it can run.

One decoder serves the live host (``probe()``, which reads the leaves through the tiny C module
``onepath.kernels._op_probe``) and recorded dumps (``CpuInfo.from_dump``), so the tests that run the
171 real dumps exercise exactly the code that decides dispatch on the host.

A level is available when the CPU reports every feature ``levels.REQUIREMENTS`` lists for it, the OS
enabled the matching register state in XCR0, and (AMX on Linux) the process obtained the XTILEDATA
permission. Names never decide anything: an unknown model gets every level its bits allow.
"""
from __future__ import annotations

import functools

import os
import struct
import sys
from dataclasses import dataclass, field

from . import levels as _lv
from .levels import LEVELS, STATE_GROUPS
from .uarch import uarch_name

# Register index in a CPUID result tuple.
EAX, EBX, ECX, EDX = 0, 1, 2, 3

# (feature name in /proc/cpuinfo spelling, leaf, subleaf, register, bit). Order = display order.
FEATURE_BITS: tuple[tuple[str, int, int, int, int], ...] = (
    # leaf 1 EDX
    ("fpu", 1, 0, EDX, 0), ("tsc", 1, 0, EDX, 4), ("cx8", 1, 0, EDX, 8), ("cmov", 1, 0, EDX, 15),
    ("clflush", 1, 0, EDX, 19), ("mmx", 1, 0, EDX, 23), ("fxsr", 1, 0, EDX, 24),
    ("sse", 1, 0, EDX, 25), ("sse2", 1, 0, EDX, 26),
    # leaf 1 ECX
    ("pni", 1, 0, ECX, 0), ("pclmulqdq", 1, 0, ECX, 1), ("ssse3", 1, 0, ECX, 9),
    ("fma", 1, 0, ECX, 12), ("cx16", 1, 0, ECX, 13), ("sse4_1", 1, 0, ECX, 19),
    ("sse4_2", 1, 0, ECX, 20), ("movbe", 1, 0, ECX, 22), ("popcnt", 1, 0, ECX, 23),
    ("aes", 1, 0, ECX, 25), ("xsave", 1, 0, ECX, 26), ("osxsave", 1, 0, ECX, 27),
    ("avx", 1, 0, ECX, 28), ("f16c", 1, 0, ECX, 29), ("rdrand", 1, 0, ECX, 30),
    ("hypervisor", 1, 0, ECX, 31),
    # leaf 7 subleaf 0 EBX
    ("fsgsbase", 7, 0, EBX, 0), ("bmi1", 7, 0, EBX, 3), ("avx2", 7, 0, EBX, 5),
    ("bmi2", 7, 0, EBX, 8), ("erms", 7, 0, EBX, 9), ("avx512f", 7, 0, EBX, 16),
    ("avx512dq", 7, 0, EBX, 17), ("rdseed", 7, 0, EBX, 18), ("adx", 7, 0, EBX, 19),
    ("avx512ifma", 7, 0, EBX, 21), ("clflushopt", 7, 0, EBX, 23), ("clwb", 7, 0, EBX, 24),
    ("avx512pf", 7, 0, EBX, 26), ("avx512er", 7, 0, EBX, 27), ("avx512cd", 7, 0, EBX, 28),
    ("sha_ni", 7, 0, EBX, 29), ("avx512bw", 7, 0, EBX, 30), ("avx512vl", 7, 0, EBX, 31),
    # leaf 7 subleaf 0 ECX
    ("avx512vbmi", 7, 0, ECX, 1), ("waitpkg", 7, 0, ECX, 5), ("avx512_vbmi2", 7, 0, ECX, 6),
    ("gfni", 7, 0, ECX, 8), ("vaes", 7, 0, ECX, 9), ("vpclmulqdq", 7, 0, ECX, 10),
    ("avx512_vnni", 7, 0, ECX, 11), ("avx512_bitalg", 7, 0, ECX, 12),
    ("avx512_vpopcntdq", 7, 0, ECX, 14), ("rdpid", 7, 0, ECX, 22), ("cldemote", 7, 0, ECX, 25),
    ("movdiri", 7, 0, ECX, 27), ("movdir64b", 7, 0, ECX, 28),
    # leaf 7 subleaf 0 EDX
    ("avx512_4vnniw", 7, 0, EDX, 2), ("avx512_4fmaps", 7, 0, EDX, 3), ("fsrm", 7, 0, EDX, 4),
    ("avx512_vp2intersect", 7, 0, EDX, 8), ("serialize", 7, 0, EDX, 14),
    ("tsxldtrk", 7, 0, EDX, 16), ("amx_bf16", 7, 0, EDX, 22), ("avx512_fp16", 7, 0, EDX, 23),
    ("amx_tile", 7, 0, EDX, 24), ("amx_int8", 7, 0, EDX, 25),
    # leaf 7 subleaf 1 EAX / EDX
    ("avx_vnni", 7, 1, EAX, 4), ("avx512_bf16", 7, 1, EAX, 5), ("amx_fp16", 7, 1, EAX, 21),
    ("avx_ifma", 7, 1, EAX, 23),
    ("avx_vnni_int8", 7, 1, EDX, 4), ("avx_ne_convert", 7, 1, EDX, 5),
    ("amx_complex", 7, 1, EDX, 8), ("avx_vnni_int16", 7, 1, EDX, 10), ("avx10", 7, 1, EDX, 19),
    # leaf 0x80000001
    ("lahf_lm", 0x80000001, 0, ECX, 0), ("abm", 0x80000001, 0, ECX, 5),
    ("sse4a", 0x80000001, 0, ECX, 6), ("3dnowprefetch", 0x80000001, 0, ECX, 8),
    ("xop", 0x80000001, 0, ECX, 11), ("fma4", 0x80000001, 0, ECX, 16),
    ("topoext", 0x80000001, 0, ECX, 22),
    ("syscall", 0x80000001, 0, EDX, 11), ("nx", 0x80000001, 0, EDX, 20),
    ("rdtscp", 0x80000001, 0, EDX, 27), ("lm", 0x80000001, 0, EDX, 29),
)
FEATURE_NAMES: tuple[str, ...] = tuple(row[0] for row in FEATURE_BITS)

# Other spellings accepted by ``CpuInfo.has`` -> the /proc/cpuinfo name.
ALIASES = {"sse3": "pni", "sse4.1": "sse4_1", "sse4.2": "sse4_2", "lzcnt": "abm", "sha": "sha_ni",
           "avx512vnni": "avx512_vnni", "avx512bf16": "avx512_bf16", "avx512fp16": "avx512_fp16",
           "amx-tile": "amx_tile", "amx-bf16": "amx_bf16", "amx-int8": "amx_int8",
           "avxvnni": "avx_vnni", "bmi": "bmi1", "prefetchw": "3dnowprefetch"}

_AVX_STATE_FEATURES = frozenset({"avx", "avx2", "fma", "f16c", "vaes", "vpclmulqdq", "avx_vnni",
                                 "avx_ifma", "avx_vnni_int8", "avx_ne_convert", "avx_vnni_int16",
                                 "fma4", "xop"})


def feature_state(name: str) -> str | None:
    """The ``levels.STATE_GROUPS`` entry whose registers a feature uses, or None (GPR/SSE only)."""
    if name.startswith("avx512") or name == "avx10":
        return "avx512"
    if name.startswith("amx_"):
        return "amx"
    if name in _AVX_STATE_FEATURES:
        return "avx"
    return None


_STATE_WORDS = {"avx": ("AVX", "YMM state"), "avx512": ("AVX-512", "ZMM state"),
                "amx": ("AMX", "AMX tile state")}

# Used when CPUID gives no cache information at all.
DEFAULT_CACHES = {"l1d": 32 * 1024, "l2": 1024 * 1024, "l3": 8 * 1024 * 1024}

Leaves = dict  # (leaf, subleaf) -> (eax, ebx, ecx, edx)


def _deterministic_caches(regs, leaf: int) -> dict[str, int]:
    """Intel leaf 4 / AMD leaf 0x8000001D (same layout): level + type -> size in bytes."""
    out: dict[str, int] = {}
    for sub in range(32):
        eax, ebx, ecx, _ = regs(leaf, sub)
        ctype = eax & 0x1F
        if ctype == 0:
            break
        level = (eax >> 5) & 0x7
        ways = ((ebx >> 22) & 0x3FF) + 1
        parts = ((ebx >> 12) & 0x3FF) + 1
        line = (ebx & 0xFFF) + 1
        sets = ecx + 1
        size = ways * parts * line * sets
        key = {(1, 1): "l1d", (1, 2): "l1i", (2, 3): "l2", (2, 1): "l2", (3, 3): "l3",
               (4, 3): "l4"}.get((level, ctype))
        if key and key not in out:
            out[key] = size
    return out


@dataclass(frozen=True)
class CpuInfo:
    """What the probe knows about one CPU (the live host or a recorded dump).

    Attributes:
        vendor: CPUID vendor string ("GenuineIntel", "AuthenticAMD", ...).
        brand: processor brand string (leaves 0x80000002-4), stripped; "" if absent.
        family, model, stepping: display values (extended fields folded in as the vendor defines).
        features: decoded CPU features, lower-case ``/proc/cpuinfo`` names (see ``FEATURE_BITS``).
            ``osxsave`` means the OS set CR4.OSXSAVE; it is not in Linux's flag list.
        xcr0: XGETBV(0), the register state the OS enabled (0 when OSXSAVE is clear).
        amx_permission: the process may use AMX tile data (Linux: XTILEDATA permission granted by
            arch_prctl; other OSes need no permission, so it is True whenever AMX state is enabled).
        caches: bytes per cache: ``l1d``, ``l2`` (per core), ``l3`` (as reported, per die/CCX), plus
            ``l1i``/``l4`` when known; ``DEFAULT_CACHES`` fill what CPUID does not give.
        caches_source: "leaf4", "leaf8000001d", "legacy_amd", "default" or a mix joined by "+".
        num_cpus: logical CPUs this process may run on.
        uarch: microarchitecture name (``uarch.uarch_name``), "unknown" if not in the tables.
        max_leaf, max_ext_leaf: highest basic / extended CPUID leaf.
        leaves: the raw leaves decoded (not compared, not in repr).
    """
    vendor: str
    brand: str
    family: int
    model: int
    stepping: int
    features: frozenset
    xcr0: int
    amx_permission: bool
    caches: dict
    num_cpus: int
    uarch: str
    max_leaf: int = 0
    max_ext_leaf: int = 0
    caches_source: str = "default"
    leaves: dict = field(default_factory=dict, compare=False, repr=False)

    # ---------------------------------------------------------------- construction
    @classmethod
    def from_leaves(cls, leaves: Leaves, xcr0: int, amx_permission: bool,
                    num_cpus: int = 1) -> "CpuInfo":
        """Decode raw CPUID leaves.

        Args:
            leaves: ``{(leaf, subleaf): (eax, ebx, ecx, edx)}``; a missing leaf reads as zeros, and
                so does any leaf above the maximum the CPU reports (leaf 0 / 0x80000000 EAX).
            xcr0: XGETBV(0) value (forced to 0 when OSXSAVE is clear, as the hardware would fault).
            amx_permission: whether the XTILEDATA permission is held.
            num_cpus: logical CPUs available to the process.
        """
        zero = (0, 0, 0, 0)
        max_leaf = leaves.get((0, 0), zero)[0]
        max_ext = leaves.get((0x80000000, 0), zero)[0]
        if max_ext < 0x80000000 or max_ext > 0x8000FFFF:
            max_ext = 0

        def regs(leaf: int, sub: int = 0) -> tuple[int, int, int, int]:
            if leaf >= 0x80000000:
                if leaf > max_ext:
                    return zero
            elif leaf > max_leaf:
                return zero
            return tuple(leaves.get((leaf, sub), zero))

        _, b, c, d = regs(0)
        vendor = struct.pack("<3I", b, d, c).decode("latin-1").rstrip("\0")

        eax1 = regs(1)[EAX]
        base_family = (eax1 >> 8) & 0xF
        base_model = (eax1 >> 4) & 0xF
        stepping = eax1 & 0xF
        family = base_family + ((eax1 >> 20) & 0xFF if base_family == 0xF else 0)
        ext_model = (eax1 >> 16) & 0xF
        if vendor in ("AuthenticAMD", "HygonGenuine"):
            fold = base_family == 0xF
        else:  # Intel (and others following Intel's rule)
            fold = base_family in (0x6, 0xF)
        model = base_model + (ext_model << 4 if fold else 0)

        brand = b""
        if max_ext >= 0x80000004:
            for leaf in (0x80000002, 0x80000003, 0x80000004):
                brand += struct.pack("<4I", *regs(leaf))
        brand_s = brand.split(b"\0", 1)[0].decode("latin-1").strip()

        feats = set()
        for name, leaf, sub, reg, bit in FEATURE_BITS:
            if leaf == 7 and sub > 0 and regs(7, 0)[EAX] < sub:
                continue  # subleaf beyond CPUID(7,0).EAX: reserved
            if (regs(leaf, sub)[reg] >> bit) & 1:
                feats.add(name)
        features = frozenset(feats)
        if "osxsave" not in features:
            xcr0 = 0

        caches, source = cls._decode_caches(vendor, features, regs, max_leaf, max_ext)
        return cls(vendor=vendor, brand=brand_s, family=family, model=model, stepping=stepping,
                   features=features, xcr0=int(xcr0), amx_permission=bool(amx_permission),
                   caches=caches, num_cpus=int(num_cpus),
                   uarch=uarch_name(vendor, family, model, stepping, features),
                   max_leaf=max_leaf, max_ext_leaf=max_ext, caches_source=source,
                   leaves=dict(leaves))

    @staticmethod
    def _decode_caches(vendor, features, regs, max_leaf, max_ext):
        found: dict[str, int] = {}
        sources = []
        if vendor in ("AuthenticAMD", "HygonGenuine"):
            if "topoext" in features and max_ext >= 0x8000001D:
                found = _deterministic_caches(regs, 0x8000001D)
                if found:
                    sources.append("leaf8000001d")
            if not found and max_ext >= 0x80000006:
                l1 = (regs(0x80000005)[ECX] >> 24) * 1024
                l2 = (regs(0x80000006)[ECX] >> 16) * 1024
                l3 = ((regs(0x80000006)[EDX] >> 18) & 0x3FFF) * 512 * 1024
                found = {k: v for k, v in (("l1d", l1), ("l2", l2), ("l3", l3)) if v}
                if found:
                    sources.append("legacy_amd")
        elif max_leaf >= 4:
            found = _deterministic_caches(regs, 4)
            if found:
                sources.append("leaf4")
        if "l2" not in found and max_ext >= 0x80000006:  # Intel also fills ECX[31:16] of 0x80000006
            l2 = (regs(0x80000006)[ECX] >> 16) * 1024
            if l2:
                found["l2"] = l2
                sources.append("leaf80000006")
        caches = dict(found)
        for key, value in DEFAULT_CACHES.items():
            if key == "l3" and found and "l3" not in found:
                caches["l3"] = 0  # CPUID describes the hierarchy and it has no L3
                continue
            if key not in caches:
                caches[key] = value
                if "default" not in sources:
                    sources.append("default")
        return caches, "+".join(sources) or "default"

    @classmethod
    def from_dump(cls, record: dict, *, amx_permission: bool = True, xcr0: int | None = None,
                  num_cpus: int = 1) -> "CpuInfo":
        """Decode one ``dumps.json`` record (see /work/shared/cpuid/README.md).

        A dump cannot show the Linux AMX permission, so it is assumed granted unless overridden;
        ``xcr0`` overrides the record's value.
        """
        leaves = {}
        for key, regs in record["leaves"].items():
            leaf, sub = key.split("_")
            leaves[(int(leaf, 16), int(sub))] = tuple(int(r, 16) if isinstance(r, str) else int(r)
                                                      for r in regs)
        x = record.get("xcr0", 0) if xcr0 is None else xcr0
        x = int(x, 16) if isinstance(x, str) else int(x)
        return cls.from_leaves(leaves, x, amx_permission, num_cpus)

    # ---------------------------------------------------------------- features and OS state
    def has(self, feature: str) -> bool:
        """CPU reports the feature (``/proc/cpuinfo`` name or an alias such as ``sse3``)."""
        name = feature.strip().lower()
        return ALIASES.get(name, name) in self.features

    def state_enabled(self, group: str) -> bool:
        """The OS enabled a register-state group of ``levels.STATE_GROUPS`` ("avx", "avx512", "amx")."""
        mask = STATE_GROUPS[group][0]
        return self.xcr0 & mask == mask

    @property
    def os_states(self) -> dict[str, bool]:
        """``{"avx": bool, "avx512": bool, "amx": bool}``: which state groups XCR0 enables."""
        return {g: self.state_enabled(g) for g in STATE_GROUPS}

    def os_enabled(self, feature: str) -> bool:
        """The OS enabled the register state the feature uses (True for GPR/SSE-only features).
        Independent of whether the CPU has the feature; see ``usable``."""
        name = ALIASES.get(feature.strip().lower(), feature.strip().lower())
        group = feature_state(name)
        return True if group is None else self.state_enabled(group)

    def usable(self, feature: str) -> bool:
        """CPU has the feature, the OS enabled its state, and (AMX) the permission is held."""
        name = ALIASES.get(feature.strip().lower(), feature.strip().lower())
        ok = name in self.features and self.os_enabled(name)
        if ok and feature_state(name) == "amx":
            ok = self.amx_permission
        return ok

    def feature_table(self) -> list[tuple[str, bool, bool]]:
        """``(feature, cpu_has, os_enabled)`` for every decoded feature, in ``FEATURE_BITS`` order."""
        return [(name, name in self.features, self.os_enabled(name)) for name in FEATURE_NAMES]

    # ---------------------------------------------------------------- levels
    def _level_problem(self, level: str) -> str | None:
        """Why ``level`` (cumulative requirements) cannot run, or None if it can."""
        need = _lv.required_features(level)
        missing = sorted(need - self.features)
        if missing == ["osxsave"]:
            return (f"{level}: CPU has the instructions but the OS did not enable XSAVE "
                    f"(CPUID.1:ECX.OSXSAVE clear), so no AVX state can be used")
        if missing:
            return f"{level}: CPU lacks {', '.join(missing)}"
        mask = _lv.required_xcr0(level)
        lacking = mask & ~self.xcr0
        if lacking:
            for group, (gmask, _desc) in STATE_GROUPS.items():
                if gmask & lacking:
                    isa, state = _STATE_WORDS[group]
                    return (f"{level}: CPU has {isa} but the OS did not enable {state} in XCR0 "
                            f"(xcr0={self.xcr0:#x}, needs {mask:#x})")
        if _lv.needs_amx_permission(level) and not self.amx_permission:
            return (f"{level}: CPU and OS support AMX but the process does not hold the XTILEDATA "
                    f"permission (Linux arch_prctl ARCH_REQ_XCOMP_PERM refused or unavailable)")
        return None

    @functools.cached_property
    def levels(self) -> tuple[str, ...]:
        """Every ISA level the CPU and OS can run, ascending (always starts with "generic").
        Computed once per object (the fields are frozen)."""
        out = []
        for level in LEVELS:
            if self._level_problem(level) is not None:
                break
            out.append(level)
        return tuple(out)

    @property
    def isa(self) -> str:
        """The best ISA level available."""
        return self.levels[-1]

    def limits(self) -> dict[str, str]:
        """``{level: reason}`` for every level above ``isa`` (empty when the top level runs)."""
        return {lvl: self._level_problem(lvl) or f"{lvl}: a lower level is unavailable"
                for lvl in LEVELS[len(self.levels):]}

    def explain(self) -> str:
        """One line: why the next level up is not available (or that the top level is)."""
        lim = self.limits()
        if not lim:
            return f"{LEVELS[-1]}: available (highest level)"
        return next(iter(lim.values()))

    # ---------------------------------------------------------------- output
    def to_dict(self) -> dict:
        """JSON-ready summary (no raw leaves)."""
        return {
            "vendor": self.vendor, "brand": self.brand, "family": self.family, "model": self.model,
            "stepping": self.stepping, "uarch": self.uarch, "features": sorted(self.features),
            "xcr0": f"{self.xcr0:#x}", "os_states": self.os_states,
            "amx_permission": self.amx_permission, "caches": dict(self.caches),
            "caches_source": self.caches_source, "num_cpus": self.num_cpus,
            "levels": list(self.levels), "isa": self.isa, "limits": self.limits(),
        }

    def summary(self) -> str:
        """A few human-readable lines for ``info`` and logs."""
        kib = lambda n: f"{n // 1024} KiB" if n < 1 << 20 else f"{n / (1 << 20):g} MiB"  # noqa: E731
        c = self.caches
        vm = " (virtualized)" if "hypervisor" in self.features else ""
        lines = [
            f"cpu: {self.brand or '?'} [{self.vendor} family {self.family} model {self.model} "
            f"stepping {self.stepping}] uarch={self.uarch}{vm}",
            f"cpus: {self.num_cpus}  caches: L1d {kib(c['l1d'])}, L2 {kib(c['l2'])}, "
            f"L3 {kib(c['l3'])} ({self.caches_source})",
            f"xcr0: {self.xcr0:#x} ({', '.join(g for g, on in self.os_states.items() if on) or 'none'}"
            f" enabled)  amx_permission: {self.amx_permission}",
            f"isa: {self.isa}  levels: {', '.join(self.levels)}",
            f"next: {self.explain()}",
        ]
        return "\n".join(lines)


# -------------------------------------------------------------------- live host
_HOST: CpuInfo | None = None


def _num_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def read_host_leaves() -> tuple[dict, int]:
    """CPUID leaves the decoder uses, and XCR0, from the live CPU (via ``_op_probe``)."""
    from onepath.kernels._op_probe import ffi, lib

    buf = ffi.new("uint32_t[4]")
    leaves: dict[tuple[int, int], tuple[int, int, int, int]] = {}

    def read(leaf: int, sub: int = 0) -> tuple[int, int, int, int]:
        lib.op_cpuid(leaf, sub, buf)
        regs = (buf[0], buf[1], buf[2], buf[3])
        leaves[(leaf, sub)] = regs
        return regs

    max_leaf = read(0)[EAX]
    if max_leaf >= 1:
        read(1)
    if max_leaf >= 4:
        for sub in range(32):
            if read(4, sub)[EAX] & 0x1F == 0:
                break
    if max_leaf >= 7:
        if read(7, 0)[EAX] >= 1:
            read(7, 1)
    if max_leaf >= 0xD:
        read(0xD, 0)
        read(0xD, 1)
    max_ext = read(0x80000000)[EAX]
    if 0x80000000 < max_ext <= 0x8000FFFF:
        for leaf in range(0x80000001, min(max_ext, 0x80000006) + 1):
            read(leaf)
        if max_ext >= 0x8000001D:
            for sub in range(32):
                if read(0x8000001D, sub)[EAX] & 0x1F == 0:
                    break
    return leaves, int(lib.op_xgetbv(0))


def _host_amx_permission(features: frozenset, xcr0: int) -> bool:
    amx_mask = STATE_GROUPS["amx"][0]
    if "amx_tile" not in features or xcr0 & amx_mask != amx_mask:
        return False
    if not sys.platform.startswith("linux"):
        return True  # no per-process permission outside Linux: XCR0 decides
    from onepath.kernels._op_probe import lib
    return bool(lib.op_request_amx_permission())


def probe(refresh: bool = False) -> CpuInfo:
    """``CpuInfo`` of the live host (cached for the process; ``refresh=True`` probes again).

    AMX tile permission is requested from Linux only when the CPU reports AMX-TILE and XCR0 enables
    the tile state. Raises ImportError if the ``_op_probe`` extension is not built.
    """
    global _HOST
    if _HOST is None or refresh:
        leaves, xcr0 = read_host_leaves()
        pre = CpuInfo.from_leaves(leaves, xcr0, False, _num_cpus())
        perm = _host_amx_permission(pre.features, pre.xcr0)
        _HOST = pre if not perm else CpuInfo.from_leaves(leaves, xcr0, True, pre.num_cpus)
    return _HOST
