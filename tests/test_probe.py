"""CPU probe: CPUID decoding, uarch names, ISA levels, and the live host.

Three groups:
- synthetic CPUs built here from documented CPUID bit positions (run everywhere);
- the real dumps and /proc/cpuinfo files of the shared folder (``../shared/cpuid`` from the project
  root, or $ONEPATH_SHARED_CPUID), skipped with a reason when it is absent;
- the live host, through the ``_op_probe`` extension (skipped when it is not built / not x86).
"""
from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from onepath.dispatch import levels as lv
from onepath.dispatch.cpu import FEATURE_NAMES, CpuInfo
from onepath.dispatch.uarch import uarch_name

ROOT = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    env = os.environ.get("ONEPATH_SHARED_CPUID")
    return Path(env) if env else (ROOT / ".." / "shared" / "cpuid").resolve()


SHARED = _shared_dir()
NO_SHARED = f"shared CPUID data folder not found at {SHARED} (set ONEPATH_SHARED_CPUID)"


def _load_dumps():
    path = SHARED / "dumps.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text())


DUMPS = _load_dumps()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")[:60]


def _dump_params():
    if DUMPS is None:
        return [pytest.param(None, id="no-shared-data", marks=pytest.mark.skip(reason=NO_SHARED))]
    return [pytest.param(r, id=f"{i:03d}-{_slug(r['name'])}") for i, r in enumerate(DUMPS)]


def _parse_proc_cpuinfo(text: str) -> dict[str, str]:
    """Fields of the first processor block of a /proc/cpuinfo text."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break
            continue
        if ":" in line:
            key, value = line.split(":", 1)
            out.setdefault(key.strip(), value.strip())
    return out


# ------------------------------------------------------------------------------------------------
# Synthetic CPUs from documented bit positions (Intel SDM vol. 2A CPUID, AMD APM vol. 3).
# Kept independent of cpu.FEATURE_BITS on purpose, so a typo there is caught here.
EAX, EBX, ECX, EDX = range(4)
BITS = {
    "sse": (1, 0, EDX, 25), "sse2": (1, 0, EDX, 26),
    "pni": (1, 0, ECX, 0), "ssse3": (1, 0, ECX, 9), "fma": (1, 0, ECX, 12),
    "sse4_1": (1, 0, ECX, 19), "sse4_2": (1, 0, ECX, 20), "popcnt": (1, 0, ECX, 23),
    "xsave": (1, 0, ECX, 26), "osxsave": (1, 0, ECX, 27), "avx": (1, 0, ECX, 28),
    "f16c": (1, 0, ECX, 29),
    "bmi1": (7, 0, EBX, 3), "avx2": (7, 0, EBX, 5), "bmi2": (7, 0, EBX, 8),
    "avx512f": (7, 0, EBX, 16), "avx512dq": (7, 0, EBX, 17), "avx512ifma": (7, 0, EBX, 21),
    "avx512cd": (7, 0, EBX, 28), "avx512bw": (7, 0, EBX, 30), "avx512vl": (7, 0, EBX, 31),
    "avx512vbmi": (7, 0, ECX, 1), "avx512_vnni": (7, 0, ECX, 11),
    "amx_bf16": (7, 0, EDX, 22), "avx512_fp16": (7, 0, EDX, 23), "amx_tile": (7, 0, EDX, 24),
    "amx_int8": (7, 0, EDX, 25),
    "avx_vnni": (7, 1, EAX, 4), "avx512_bf16": (7, 1, EAX, 5),
    "abm": (0x80000001, 0, ECX, 5), "topoext": (0x80000001, 0, ECX, 22),
}
HASWELL = ["sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "xsave", "osxsave", "avx",
           "fma", "f16c", "bmi1", "avx2", "bmi2", "abm"]
SKX = HASWELL + ["avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl"]
ZEN4 = SKX + ["avx512ifma", "avx512vbmi", "avx512_vnni", "avx512_bf16", "topoext"]
SPR = SKX + ["avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_bf16", "amx_tile",
             "amx_int8"]


def _signature(vendor: str, family: int, model: int, stepping: int) -> int:
    """CPUID.1:EAX from display family/model/stepping (the inverse of the vendors' folding)."""
    base_family = 0xF if family >= 0xF else family
    ext_family = family - 0xF if family >= 0xF else 0
    return (ext_family << 20) | ((model >> 4) << 16) | (base_family << 8) | ((model & 0xF) << 4) \
        | stepping


def make_leaves(vendor="GenuineIntel", family=6, model=0x8F, stepping=8, features=(),
                max_leaf=0xD, max_ext=0x80000008, brand=""):
    leaves: dict[tuple[int, int], list[int]] = {}
    vb = vendor.encode().ljust(12, b"\0")
    words = [int.from_bytes(vb[i:i + 4], "little") for i in (0, 4, 8)]
    leaves[(0, 0)] = [max_leaf, words[0], words[2], words[1]]
    leaves[(1, 0)] = [_signature(vendor, family, model, stepping), 0, 0, 0]
    leaves[(7, 0)] = [1, 0, 0, 0]  # EAX = 1: subleaf 1 is valid
    leaves[(7, 1)] = [0, 0, 0, 0]
    leaves[(0x80000000, 0)] = [max_ext, 0, 0, 0]
    leaves[(0x80000001, 0)] = [0, 0, 0, 0]
    for name in features:
        leaf, sub, reg, bit = BITS[name]
        leaves[(leaf, sub)][reg] |= 1 << bit
    if brand:
        raw = brand.encode().ljust(48, b"\0")
        for i, leaf in enumerate((0x80000002, 0x80000003, 0x80000004)):
            chunk = raw[16 * i:16 * i + 16]
            leaves[(leaf, 0)] = [int.from_bytes(chunk[j:j + 4], "little") for j in (0, 4, 8, 12)]
    return {k: tuple(v) for k, v in leaves.items()}


def synth(features, xcr0, amx_permission=True, **kw):
    return CpuInfo.from_leaves(make_leaves(features=features, **kw), xcr0, amx_permission)


def test_levels_table():
    assert lv.LEVELS == ("generic", "avx2", "avx512_core", "avx512_core_bf16", "avx512_core_amx")
    assert tuple(lv.REQUIREMENTS) == lv.LEVELS
    assert [lv.required_xcr0(n) for n in lv.LEVELS] == [0, 0x6, 0xE6, 0xE6, 0x600E6]
    assert lv.required_features("avx2") == {"osxsave", "avx", "avx2", "fma", "f16c"}
    assert lv.required_features("avx512_core_amx") >= {"avx512f", "avx512_bf16", "amx_tile", "amx_bf16"}
    assert [lv.needs_amx_permission(n) for n in lv.LEVELS] == [False] * 4 + [True]
    assert lv.level_index("AVX2") == 1 and lv.check_level(" avx512_core ") == "avx512_core"
    assert lv.levels_up_to("avx512_core") == ("generic", "avx2", "avx512_core")
    with pytest.raises(ValueError) as exc:
        lv.level_index("avx512")
    for name in lv.LEVELS:
        assert name in str(exc.value)
    with pytest.raises(TypeError):
        lv.level_index(3)


def test_feature_table_is_consistent():
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)
    assert all(n == n.lower() for n in FEATURE_NAMES)
    for level in lv.LEVELS:  # every feature a level needs is one the decoder produces
        assert lv.required_features(level) <= set(FEATURE_NAMES)
    for name, (leaf, sub, reg, bit) in BITS.items():  # our documented bits vs the decoder
        cpu = CpuInfo.from_leaves(make_leaves(features=[name]), 0, False)
        assert cpu.features == {name}, name


@pytest.mark.parametrize("xcr0, isa", [(0x0, "generic"), (0x3, "generic"), (0x7, "avx2"),
                                       (0x207, "avx2"), (0xE7, "avx512_core"),
                                       (0x2E7, "avx512_core")])
def test_skx_xcr0(xcr0, isa):
    cpu = synth(SKX, xcr0, model=0x55, stepping=4)
    assert cpu.isa == isa
    assert cpu.uarch == "skylake_avx512"
    if isa == "avx2":
        assert "ZMM" in cpu.explain() and cpu.explain().startswith("avx512_core:")
        assert cpu.os_enabled("avx2") and not cpu.os_enabled("avx512f")
        assert cpu.has("avx512f") and not cpu.usable("avx512f")


def test_amx_without_tile_state_gets_bf16():
    cpu = synth(SPR, 0xE7)
    assert cpu.uarch == "sapphirerapids"
    assert cpu.isa == "avx512_core_bf16"
    assert "AMX tile state" in cpu.explain()
    assert cpu.os_states == {"avx": True, "avx512": True, "amx": False}


def test_amx_permission_refused_gets_bf16():
    cpu = synth(SPR, 0x602E7, amx_permission=False)
    assert cpu.isa == "avx512_core_bf16"
    assert "permission" in cpu.explain()
    assert cpu.os_enabled("amx_tile") and not cpu.usable("amx_tile")


def test_amx_full():
    cpu = synth(SPR, 0x602E7, amx_permission=True)
    assert cpu.levels == lv.LEVELS and cpu.isa == "avx512_core_amx"
    assert cpu.limits() == {} and "available" in cpu.explain()


def test_amx_bits_without_bf16_subleaf():
    """AMX bits set but CPUID(7,0).EAX = 0: subleaf 1 (AVX512_BF16) is reserved -> avx512_core."""
    leaves = make_leaves(features=SPR)
    leaves[(7, 0)] = (0,) + leaves[(7, 0)][1:]
    cpu = CpuInfo.from_leaves(leaves, 0x602E7, True)
    assert "avx512_bf16" not in cpu.features
    assert cpu.isa == "avx512_core"


def test_zen5_unknown_model_still_gets_levels():
    cpu = synth(ZEN4, 0xE7, vendor="AuthenticAMD", family=0x1A, model=0xF0, stepping=0)
    assert (cpu.family, cpu.model) == (0x1A, 0xF0)
    assert cpu.uarch == "unknown"
    assert cpu.isa == "avx512_core_bf16"
    known = synth(ZEN4, 0xE7, vendor="AuthenticAMD", family=0x1A, model=0x44, stepping=0)
    assert known.uarch == "zen5" and known.isa == "avx512_core_bf16"


def test_unknown_intel_model_follows_features():
    cpu = synth(HASWELL, 0x7, model=0xFE)
    assert cpu.uarch == "unknown" and cpu.isa == "avx2"


def test_no_osxsave_is_generic():
    feats = [f for f in SKX if f != "osxsave"]
    cpu = synth(feats, 0xE7)  # an XCR0 value passed in is ignored without OSXSAVE
    assert cpu.xcr0 == 0
    assert cpu.isa == "generic" and cpu.levels == ("generic",)
    assert "OSXSAVE" in cpu.explain()


def test_missing_feature_explained():
    cpu = synth([f for f in HASWELL if f != "fma"], 0x7)
    assert cpu.isa == "generic"
    assert cpu.explain() == "avx2: CPU lacks fma"
    assert set(cpu.limits()) == set(lv.LEVELS[1:])


def test_leaf_above_max_is_ignored():
    leaves = make_leaves(features=SKX, max_leaf=6)  # leaf 7 beyond the reported maximum
    cpu = CpuInfo.from_leaves(leaves, 0xE7, True)
    assert "avx2" not in cpu.features and cpu.isa == "generic"


@pytest.mark.parametrize("vendor, eax, fms", [
    ("GenuineIntel", 0x000806F8, (6, 0x8F, 8)),
    ("GenuineIntel", 0x00050657, (6, 0x55, 7)),
    ("GenuineIntel", 0x00000F41, (15, 4, 1)),
    ("GenuineIntel", 0x00100F12, (16, 0x01, 2)),     # base family 0xF: ext family added, model folded
    ("GenuineIntel", 0x00010561, (5, 6, 1)),         # family 5: extended model not folded
    ("AuthenticAMD", 0x00870F10, (0x17, 0x71, 0)),
    ("AuthenticAMD", 0x00A60F12, (0x19, 0x61, 2)),
    ("AuthenticAMD", 0x00B40F40, (0x1A, 0x44, 0)),
    ("AuthenticAMD", 0x00010661, (6, 6, 1)),         # AMD folds the model only for family 0xF
])
def test_family_model_display(vendor, eax, fms):
    leaves = make_leaves(vendor=vendor)
    leaves[(1, 0)] = (eax, 0, 0, 0)
    cpu = CpuInfo.from_leaves(leaves, 0, False)
    assert (cpu.family, cpu.model, cpu.stepping) == fms
    assert cpu.vendor == vendor


@pytest.mark.parametrize("model, stepping, bf16, name", [
    (0x55, 4, False, "skylake_avx512"), (0x55, 7, False, "cascadelake"),
    (0x55, 11, True, "cooperlake"), (0x55, 6, True, "cooperlake"), (0x8F, 8, True, "sapphirerapids"),
    (0xCF, 2, True, "emeraldrapids"), (0xAD, 1, True, "graniterapids"), (0xBE, 0, False, "alderlake_n"),
    (0xBD, 1, False, "lunarlake"), (0x66, 3, False, "cannonlake"), (0x6A, 6, False, "icelake_server"),
])
def test_intel_uarch_names(model, stepping, bf16, name):
    feats = {"avx512_bf16"} if bf16 else set()
    assert uarch_name("GenuineIntel", 6, model, stepping, feats) == name


@pytest.mark.parametrize("model, amx, name", [
    (0xA7, False, "rocketlake"), (0xA7, True, "sapphirerapids"), (0x8F, True, "sapphirerapids"),
    (0xCF, True, "emeraldrapids"), (0xAD, True, "graniterapids"), (0xEE, True, "sapphirerapids"),
    (0xEE, False, "unknown"), (0x55, True, "sapphirerapids"), (0x55, False, "cooperlake"),
])
def test_intel_amx_names_the_class(model, amx, name):
    # A VM reporting Rocket Lake's model 167 with AMX (the Intel AMX host here) is named by what it
    # runs; a model whose microarchitecture has AMX keeps its own name.
    feats = {"avx512_bf16"} | ({"amx_tile", "amx_bf16"} if amx else set())
    assert uarch_name("GenuineIntel", 6, model, 1, feats) == name


def test_brand_and_to_dict():
    cpu = synth(HASWELL, 0x7, brand="  Intel(R) Core(TM) i7-4770 CPU @ 3.40GHz", max_ext=0x80000008)
    assert cpu.brand == "Intel(R) Core(TM) i7-4770 CPU @ 3.40GHz"
    d = json.loads(json.dumps(cpu.to_dict()))
    assert d["isa"] == "avx2" and d["levels"] == ["generic", "avx2"] and d["xcr0"] == "0x7"
    rows = cpu.feature_table()
    assert [r[0] for r in rows] == list(FEATURE_NAMES)
    assert ("avx2", True, True) in rows and ("avx512f", False, False) in rows
    assert "isa: avx2" in cpu.summary()


def _leaf4(level, ctype, ways, parts, line, sets):
    eax = (level << 5) | ctype
    ebx = ((ways - 1) << 22) | ((parts - 1) << 12) | (line - 1)
    return (eax, ebx, sets - 1, 0)


def test_caches_intel_leaf4():
    leaves = make_leaves(features=HASWELL)
    leaves[(4, 0)] = _leaf4(1, 1, 12, 1, 64, 64)      # 48 KiB L1d
    leaves[(4, 1)] = _leaf4(1, 2, 8, 1, 64, 64)       # 32 KiB L1i
    leaves[(4, 2)] = _leaf4(2, 3, 16, 1, 64, 2048)    # 2 MiB L2
    leaves[(4, 3)] = _leaf4(3, 3, 15, 1, 64, 114688)  # 105 MiB L3
    leaves[(4, 4)] = (0, 0, 0, 0)
    cpu = CpuInfo.from_leaves(leaves, 0x7, False)
    assert cpu.caches["l1d"] == 48 * 1024 and cpu.caches["l1i"] == 32 * 1024
    assert cpu.caches["l2"] == 2 * 1024 * 1024 and cpu.caches["l3"] == 105 * 1024 * 1024
    assert cpu.caches_source == "leaf4"


def test_caches_amd():
    base = make_leaves(vendor="AuthenticAMD", family=0x17, model=1, stepping=2, features=HASWELL)
    legacy = dict(base)
    legacy[(0x80000005, 0)] = (0, 0, 32 << 24, 64 << 24)
    legacy[(0x80000006, 0)] = (0, 0, 512 << 16, 16 << 18)  # 512 KiB L2, 8 MiB L3
    cpu = CpuInfo.from_leaves(legacy, 0x7, False)
    assert (cpu.caches["l1d"], cpu.caches["l2"], cpu.caches["l3"]) == (32 << 10, 512 << 10, 8 << 20)
    assert cpu.caches_source == "legacy_amd"
    topo = make_leaves(vendor="AuthenticAMD", family=0x19, model=0x61, stepping=2,
                       features=ZEN4, max_ext=0x80000021)
    topo[(0x8000001D, 0)] = _leaf4(1, 1, 12, 1, 64, 64)
    topo[(0x8000001D, 1)] = _leaf4(2, 3, 8, 1, 64, 2048)
    topo[(0x8000001D, 2)] = _leaf4(3, 3, 16, 1, 64, 32768)
    cpu = CpuInfo.from_leaves(topo, 0xE7, True)
    assert (cpu.caches["l1d"], cpu.caches["l2"], cpu.caches["l3"]) == (48 << 10, 1 << 20, 32 << 20)
    assert cpu.caches_source == "leaf8000001d" and cpu.uarch == "zen4"


def test_caches_default_when_absent():
    cpu = synth(HASWELL, 0x7, max_leaf=1, max_ext=0x80000001)
    assert cpu.caches_source == "default"
    assert cpu.caches["l1d"] > 0 and cpu.caches["l2"] > 0 and cpu.caches["l3"] > 0


# ------------------------------------------------------------------------------------------------
# Real dumps
@pytest.mark.parametrize("record", _dump_params())
def test_dump(record):
    cpu = CpuInfo.from_dump(record)
    assert cpu.uarch == record["expected"]["uarch"]
    assert cpu.isa == record["expected"]["isa"], cpu.explain()
    assert (cpu.vendor, cpu.family, cpu.model, cpu.stepping) == (
        record["vendor"], record["family"], record["model"], record["stepping"])
    assert cpu.brand == record["name"].strip()
    assert cpu.levels == lv.levels_up_to(cpu.isa)
    assert all(cpu.caches[k] > 0 for k in ("l1d", "l2"))
    # the AMX level depends on the run-time permission, which a dump cannot show
    refused = CpuInfo.from_dump(record, amx_permission=False)
    assert refused.isa == ("avx512_core_bf16" if cpu.isa == "avx512_core_amx" else cpu.isa)


def test_dumps_cover_every_level_and_name():
    if DUMPS is None:
        pytest.skip(NO_SHARED)
    assert len(DUMPS) >= 171
    isas = {CpuInfo.from_dump(r).isa for r in DUMPS}
    assert isas == set(lv.LEVELS)


# /proc/cpuinfo cross-checks -------------------------------------------------------------------
# Features Linux never lists, or whose listing depends on more than CPUID of the same silicon.
NEVER_LISTED = {"osxsave"}
MODE_DEPENDENT = {"syscall", "hypervisor"}  # Intel sets SYSCALL only in 64-bit mode; VMs differ
# Flags every kernel since ~4.15 prints when the CPU (and, for vector state, XCR0) has them.
CLASSIC = {"sse", "sse2", "pni", "ssse3", "sse4_1", "sse4_2", "popcnt", "aes", "pclmulqdq", "avx",
           "f16c", "fma", "avx2", "bmi1", "bmi2", "movbe", "adx", "rdrand", "rdseed", "sha_ni",
           "avx512f", "avx512dq", "avx512cd", "avx512bw", "avx512vl", "avx512ifma", "avx512vbmi",
           "clflushopt", "clwb", "xsave", "cx16", "lahf_lm", "abm", "lm", "nx", "fxsr", "mmx"}


def _proc_files():
    folder = SHARED / "proc_cpuinfo"
    if not folder.is_dir():
        return [pytest.param(None, id="no-shared-data", marks=pytest.mark.skip(reason=NO_SHARED))]
    return [pytest.param(p, id=p.stem) for p in sorted(folder.glob("*.txt"))]


@pytest.mark.parametrize("path", _proc_files())
def test_proc_cpuinfo_vs_dumps(path):
    """Every flag Linux lists for a CPU is decoded from a dump of the same silicon (same vendor,
    family, model, stepping); for the same SKU (same brand string) the reverse holds too for the
    flags every kernel prints."""
    if DUMPS is None:
        pytest.skip(NO_SHARED)
    info = _parse_proc_cpuinfo(path.read_text())
    flags = set(info["flags"].split())
    fms = (int(info["cpu family"]), int(info["model"]), int(info["stepping"]))
    same = [r for r in DUMPS if r["vendor"] == info["vendor_id"]
            and (r["family"], r["model"], r["stepping"]) == fms
            and not any("DUMP GAP" in n for n in r.get("notes") or [])]
    if not same:
        pytest.skip(f"no dump of {info['model name']} {fms} in dumps.json")
    checked = flags & set(FEATURE_NAMES) - MODE_DEPENDENT
    for record in same:
        cpu = CpuInfo.from_dump(record)
        missing = checked - cpu.features
        assert not missing, f"{record['name']}: Linux lists {sorted(missing)} we did not decode"
        if record["name"].split() == info["model name"].split():
            extra = {f for f in (cpu.features & CLASSIC) - flags if cpu.usable(f)}
            assert not extra, f"{record['name']}: decoded {sorted(extra)} Linux does not list"


# ------------------------------------------------------------------------------------------------
# Live host
IS_X86 = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686")


@pytest.fixture(scope="module")
def host():
    if not IS_X86:
        pytest.skip("not an x86 host")
    try:
        from onepath.dispatch.cpu import probe
        return probe()
    except ImportError as exc:
        pytest.skip(f"probe extension not built: {exc}")


@pytest.fixture(scope="module")
def proc():
    path = Path("/proc/cpuinfo")
    if not path.is_file():
        pytest.skip("no /proc/cpuinfo on this host")
    return _parse_proc_cpuinfo(path.read_text())


def test_host_identity(host, proc):
    assert host.vendor == proc["vendor_id"]
    assert host.brand.split() == proc["model name"].split()
    assert host.family == int(proc["cpu family"])
    assert host.model == int(proc["model"])
    assert host.stepping == int(proc["stepping"])


def test_host_flags_agree_with_linux(host, proc):
    flags = set(proc["flags"].split())
    decoded_listed = flags & set(FEATURE_NAMES)
    assert decoded_listed <= host.features, sorted(decoded_listed - host.features)
    extra = {f for f in (host.features & CLASSIC) - flags if host.usable(f)}
    assert not extra, f"decoded {sorted(extra)} Linux does not list"
    # Linux hides AVX-512/AMX flags whose state it did not enable in XCR0
    if "avx512f" in flags:
        assert host.state_enabled("avx512")
    if "amx_tile" in flags:
        assert host.state_enabled("amx")


def test_host_flags_agree_with_py_cpuinfo(host):
    cpuinfo = pytest.importorskip("cpuinfo")
    flags = set(cpuinfo.get_cpu_info().get("flags", []))
    common = flags & set(FEATURE_NAMES) - MODE_DEPENDENT
    assert common <= host.features, sorted(common - host.features)
    extra = {f for f in (host.features & CLASSIC) - flags if host.usable(f)}
    assert not extra, sorted(extra)


def test_host_levels_and_permission(host):
    from onepath.dispatch.cpu import probe
    assert probe() is host  # cached
    assert host.levels[0] == "generic" and host.isa == host.levels[-1]
    assert host.levels == lv.levels_up_to(host.isa)
    if host.has("osxsave"):
        assert host.xcr0 & 0x3 == 0x3  # x87 and SSE state are always on with XSAVE
    else:
        assert host.xcr0 == 0
    if not (host.has("amx_tile") and host.state_enabled("amx")):
        assert host.amx_permission is False  # never requested without AMX
    if host.isa == "avx512_core_amx":
        assert host.amx_permission
    if hasattr(os, "sched_getaffinity"):
        assert host.num_cpus == len(os.sched_getaffinity(0))
    assert all(isinstance(v, int) and v > 0 for k, v in host.caches.items() if k in ("l1d", "l2"))
    json.dumps(host.to_dict())
    print("\n" + host.summary())


def test_host_probe_stays_light():
    """The probe path imports no kernel module and no py-cpuinfo (which spawns work): what import
    and first use cost is checked by what they load, not by a clock (shared hosts are noisy)."""
    if not IS_X86:
        pytest.skip("not an x86 host")
    code = (
        "import sys\n"
        "import onepath.dispatch.cpu as c\n"
        "c.probe()\n"
        "import onepath\n"
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('onepath', 'cpuinfo', 'torch')))))\n"
    )
    from conftest import PKG_ROOT
    env = dict(os.environ, PYTHONPATH=str(PKG_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=str(PKG_ROOT))
    if out.returncode != 0 and "_op_probe" in out.stderr:
        pytest.skip("probe extension not built")
    assert out.returncode == 0, out.stderr
    mods = out.stdout.split()
    assert "onepath.kernels._op_probe" in mods
    heavy = [m for m in mods if m.startswith(("cpuinfo", "torch", "onepath.kernels._op_", "onepath.bench"))
             and not m.startswith("onepath.kernels._op_probe")]
    assert not heavy, f"the probe / import pulled in {heavy}"
