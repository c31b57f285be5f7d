"""A capped bench caps the torch baseline alike (ONEDNN_MAX_CPU_ISA for oneDNN, ATEN_CPU_CAPABILITY
for ATen's own kernels) and shows with ONEDNN_VERBOSE what torch's bf16 matmul ran: the mapping, the
environment cases, the verbose parser, the header lines, and capped runs through the CLI."""
from __future__ import annotations

import importlib.util
import json

import pytest

import onepath
from onepath.bench.baselines import (ONEDNN_ISA, TORCH_CAP_VARS, cap_torch_isa, parse_onednn_verbose,
                                     torch_cap_lines, uncap_torch_isa)

from test_cli import run_cli

# the format of oneDNN 3.x's verbose lines (torch 2.13 bundles oneDNN 3.12)
VERBOSE = """\
onednn_verbose,v1,info,oneDNN v3.12.0 (commit 0000000000000000000000000000000000000000)
onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2
onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support
onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,prop_kind
onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,undef,src:bf16::blocked:ab::f0,,64x64:64x64,0.1
onednn_verbose,v1,primitive,exec,cpu,matmul,gemm:jit:bf16,undef,src:bf16::blocked:ab::f0,,64x64:64x64,0.1
"""
HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_every_level_has_its_caps():
    for name, values in TORCH_CAP_VARS.items():
        for level in onepath.available_isas():
            assert level in values, (name, level)
    assert ONEDNN_ISA["avx512_core_bf16"] == "AVX512_CORE_BF16" and ONEDNN_ISA["avx512_core_amx"] == "AVX512_CORE_AMX"
    assert TORCH_CAP_VARS["ATEN_CPU_CAPABILITY"]["avx2"] == "avx2"


def test_cap_torch_isa_cases():
    assert cap_torch_isa(None, {}, {}) is None                       # not capped: nothing touched
    env: dict = {"OTHER": "1"}
    cap = cap_torch_isa("avx512_core_bf16", env, {})
    assert env == {"OTHER": "1", "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "ATEN_CPU_CAPABILITY": "avx512"}
    assert cap["set"] == ["ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY"] and cap["differs"] == []
    uncap_torch_isa(cap, env)                                         # a later run starts afresh
    assert env == {"OTHER": "1"}
    env = {"ONEDNN_MAX_CPU_ISA": "garbage"}                           # the user's own value is kept...
    cap = cap_torch_isa("avx512_core", env, {})
    assert env["ONEDNN_MAX_CPU_ISA"] == "garbage" and cap["vars"]["ONEDNN_MAX_CPU_ISA"] == "garbage"
    assert cap["differs"] == ["ONEDNN_MAX_CPU_ISA"] and cap["set"] == ["ATEN_CPU_CAPABILITY"]
    uncap_torch_isa(cap, env)
    assert env == {"ONEDNN_MAX_CPU_ISA": "garbage"}                   # ...and never removed
    env = {"DNNL_MAX_CPU_ISA": "AVX2"}                                # oneDNN's older name counts
    cap = cap_torch_isa("avx2", env, {})
    assert "ONEDNN_MAX_CPU_ISA" not in env and cap["vars"]["ONEDNN_MAX_CPU_ISA"] == "AVX2" and cap["differs"] == []
    cap = cap_torch_isa("avx2", {}, {"torch": object()})
    assert cap["torch_loaded"] is True
    cap = cap_torch_isa("amx_emu", {}, {})                            # no name: nothing set
    assert cap["set"] == [] and cap["vars"] == {"ONEDNN_MAX_CPU_ISA": None, "ATEN_CPU_CAPABILITY": None}


def test_parse_onednn_verbose():
    got = parse_onednn_verbose(VERBOSE)
    assert got == {"isa": "Intel AVX-512 with Intel DL Boost and bfloat16 support",
                   "matmul_impl": "brg_matmul:avx512_core_bf16"}   # the first matmul that ran
    assert parse_onednn_verbose("") == {"isa": None, "matmul_impl": None}
    assert parse_onednn_verbose("some other output\n") == {"isa": None, "matmul_impl": None}


def test_torch_cap_lines():
    cap = cap_torch_isa("avx512_core_bf16", {}, {})
    (line,) = torch_cap_lines(cap, parse_onednn_verbose(VERBOSE))
    assert line.startswith("torch baseline capped too: ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, "
                           "ATEN_CPU_CAPABILITY=avx512, for onepath's level avx512_core_bf16")
    assert "brg_matmul:avx512_core_bf16" in line and "child process" in line
    (line,) = torch_cap_lines(cap, {"isa": None, "matmul_impl": None})
    assert "oneDNN not used by torch's bf16 matmul" in line
    assert "probe failed: boom" in torch_cap_lines(cap, {"error": "boom"})[0]
    assert torch_cap_lines(cap, None)[0].endswith(", for onepath's level avx512_core_bf16")
    (line,) = torch_cap_lines(cap, None, torch_present=False)
    assert "no torch baseline" in line and "capped too" not in line
    odd = cap_torch_isa("avx512_core", {"ONEDNN_MAX_CPU_ISA": "ALL"}, {"torch": object()})
    lines = torch_cap_lines(odd, None)
    assert len(lines) == 3 and "ONEDNN_MAX_CPU_ISA=ALL (from the environment), ATEN_CPU_CAPABILITY=avx512," in lines[0]
    assert lines[1].startswith("! ONEDNN_MAX_CPU_ISA=ALL kept from the environment differs from AVX512_CORE")
    assert lines[2].startswith("! torch was imported before")


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (optional baseline)")
@pytest.mark.parametrize("level", ["avx512_core", "avx2"])
def test_capped_bench_caps_torch(tmp_path, level):
    if level not in onepath.available_isas():
        pytest.skip(f"{level} cannot run on this host")
    if level == onepath.available_isas()[-1]:
        pytest.skip(f"{level} is this host's best level: --isa {level} caps nothing here "
                    "(test_uncapped_bench_leaves_torch_alone covers the uncapped run)")
    out = tmp_path / "b.json"
    r = run_cli("bench", "--isa", level, "--suite", "matmul", "--shapes", "32", "--repeat", "1",
                "--min-time", "0.001", "--no-peak", "--json", str(out), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"torch baseline capped too: ONEDNN_MAX_CPU_ISA={ONEDNN_ISA[level]}, ATEN_CPU_CAPABILITY=" in r.stdout
    cap = json.loads(out.read_text())["torch_cap"]
    assert cap["level"] == level and cap["vars"]["ONEDNN_MAX_CPU_ISA"] == ONEDNN_ISA[level]
    check = cap["check"]
    assert "error" not in check, check
    # under the cap torch's bf16 matmul runs no oneDNN kernel above it, whatever the CPU has
    impl = check["matmul_impl"] or ""
    assert "avx512_core_bf16" not in impl and "amx" not in impl, check
    if level == "avx512_core" and onepath.available_isas()[-1] != "avx512_core":
        assert impl == "gemm:jit:bf16" or "avx512_core" in impl, check


@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (optional baseline)")
def test_uncapped_bench_leaves_torch_alone(tmp_path):
    out = tmp_path / "b.json"
    r = run_cli("bench", "--suite", "matmul", "--shapes", "32", "--repeat", "1", "--min-time", "0.001",
                "--no-peak", "--json", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "capped too" not in r.stdout and json.loads(out.read_text())["torch_cap"] is None
