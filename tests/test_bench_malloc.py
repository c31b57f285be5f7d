"""The bench's allocator pinning (onepath.bench.cli.steady_malloc) and how a run records it. (Pinning
here leaves this test process's thresholds pinned: harmless for the tests, which time nothing.)"""
import platform

import pytest

from onepath.bench import cli


def test_user_setting_is_left_alone(monkeypatch):
    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")
    state = cli.steady_malloc()
    assert state == {"pinned": False, "reason": "MALLOC_MMAP_THRESHOLD_=131072 set by the user"}
    fp = {"malloc": state}
    assert "malloc: not pinned (MALLOC_MMAP_THRESHOLD_=131072 set by the user)" in _malloc_line(fp)


@pytest.mark.skipif(platform.system() != "Linux" or not platform.libc_ver()[0] == "glibc",
                    reason="mallopt thresholds are glibc's")
def test_pinned_on_glibc(monkeypatch):
    for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.pthread.rseq=0")  # not a malloc tunable: still pinned
    state = cli.steady_malloc()
    assert state["pinned"] and state["mmap_threshold"] == 32 << 20 and state["trim_threshold"] == 1 << 30
    assert cli.fingerprint(1)["malloc"] == state
    assert "mmap threshold 32 MiB, trim threshold 1024 MiB" in _malloc_line({"malloc": state})


def _malloc_line(fp_malloc: dict) -> str:
    fp = cli.fingerprint(1)
    fp.update(fp_malloc)
    return "\n".join(cli.header_lines(fp))
