"""`bench --isa LEVEL` caps torch's oneDNN alike (ONEDNN_MAX_CPU_ISA) and shows with ONEDNN_VERBOSE
what it ran: the mapping, the environment handling, the verbose parser, and one capped run."""
from __future__ import annotations

import importlib.util
import json

import pytest

import onepath
from onepath.bench.baselines import (ONEDNN_ISA, cap_torch_isa, parse_onednn_verbose,
                                     torch_cap_line)

from test_cli import run_cli

VERBOSE = """\
onednn_verbose,v1,info,oneDNN v3.7.1 (commit 8d263e693366ef8db40acc569cc7d8edf644556d)
onednn_verbose,v1,info,cpu,runtime:OpenMP,nthr:2
onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with Intel DL Boost and bfloat16 support
onednn_verbose,v1,primitive,info,template:operation,engine,primitive,implementation,prop_kind
onednn_verbose,v1,primitive,exec,cpu,matmul,brg_matmul:avx512_core_bf16,undef,src:bf16::blocked:ab::f0,,64x64:64x64,0.1
onednn_verbose,v1,primitive,exec,cpu,matmul,gemm:jit:bf16,undef,src:bf16::blocked:ab::f0,,64x64:64x64,0.1
"""


def test_every_level_has_a_onednn_name():
    for level in onepath.available_isas():
        assert level in ONEDNN_ISA, level
    assert ONEDNN_ISA["avx512_core_bf16"] == "AVX512_CORE_BF16" and ONEDNN_ISA["avx512_core_amx"] == "AVX512_CORE_AMX"


def test_cap_torch_isa_cases():
    assert cap_torch_isa(None, {}, {}) is None                       # not capped: nothing touched
    env: dict = {}
    cap = cap_torch_isa("avx512_core_bf16", env, {})
    assert env == {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}
    assert cap == {"level": "avx512_core_bf16", "onednn_max_cpu_isa": "AVX512_CORE_BF16", "how": "set by --isa"}
    env = {"ONEDNN_MAX_CPU_ISA": "AVX2"}                               # the user's own value is kept
    cap = cap_torch_isa("avx512_core", env, {})
    assert env["ONEDNN_MAX_CPU_ISA"] == "AVX2" and cap["onednn_max_cpu_isa"] == "AVX2" and "kept" in cap["how"]
    env = {}                                                          # too late: torch read it already
    cap = cap_torch_isa("avx2", env, {"torch": object()})
    assert env == {} and cap["onednn_max_cpu_isa"] is None and "already imported" in cap["how"]
    cap = cap_torch_isa("amx_emu", {}, {})
    assert cap["onednn_max_cpu_isa"] is None and "no oneDNN name" in cap["how"]


def test_parse_onednn_verbose():
    got = parse_onednn_verbose(VERBOSE)
    assert got == {"isa": "Intel AVX-512 with Intel DL Boost and bfloat16 support",
                   "matmul_impl": "brg_matmul:avx512_core_bf16"}   # the first matmul that ran
    assert parse_onednn_verbose("") == {"isa": None, "matmul_impl": None}
    assert parse_onednn_verbose("some other output\n") == {"isa": None, "matmul_impl": None}


def test_torch_cap_line():
    cap = {"level": "avx512_core_bf16", "onednn_max_cpu_isa": "AVX512_CORE_BF16", "how": "set by --isa"}
    line = torch_cap_line(cap, parse_onednn_verbose(VERBOSE))
    assert "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (set by --isa)" in line and "brg_matmul:avx512_core_bf16" in line
    assert "no oneDNN primitive" in torch_cap_line(cap, {"isa": None, "matmul_impl": None})
    assert "check failed: boom" in torch_cap_line(cap, {"error": "boom"})
    assert torch_cap_line(cap, None).endswith("(set by --isa)")        # no torch installed: no check
    assert "not capped" in torch_cap_line({"level": "avx2", "onednn_max_cpu_isa": None,
                                           "how": "torch already imported: not capped"}, None)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch is not installed (optional baseline)")
@pytest.mark.skipif("avx2" not in onepath.available_isas(), reason="avx2 cannot run on this host")
def test_capped_bench_caps_torch(tmp_path):
    out = tmp_path / "b.json"
    r = run_cli("bench", "--isa", "avx2", "--suite", "matmul", "--shapes", "32", "--repeat", "1",
                "--min-time", "0.001", "--no-peak", "--json", str(out), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torch baseline capped too: ONEDNN_MAX_CPU_ISA=AVX2 (set by --isa)" in r.stdout
    cap = json.loads(out.read_text())["torch_cap"]
    assert cap["level"] == "avx2" and cap["onednn_max_cpu_isa"] == "AVX2"
    assert "error" not in cap["check"], cap["check"]
    # under the AVX2 cap oneDNN reports no AVX-512 ISA, whatever the CPU has
    assert cap["check"]["isa"] is None or "512" not in cap["check"]["isa"], cap["check"]
