"""float32 <-> bfloat16 conversions through the kernels of every level (and the amx_emu build):
bit-exact with ml_dtypes' astype."""
from __future__ import annotations

import numpy as np
import pytest

import onepath
from onepath.dtypes import BF16, F32, result_dtype, to_bfloat16, to_float32

def _bits16(x):
    return np.asarray(x).view(np.uint16)


def _specials() -> np.ndarray:
    """Every special class of float32 as bit patterns, with rounding ties and boundaries."""
    pats = [
        0x00000000, 0x80000000,                      # signed zeros
        0x7F800000, 0xFF800000,                      # infinities
        0x7F800001, 0xFF800001, 0x7FA00000, 0x7FBFFFFF,  # signalling NaNs
        0x7FC00000, 0xFFC00000, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC12345,  # quiet NaNs
        0x00000001, 0x80000001, 0x00007FFF, 0x00008000, 0x00008001, 0x00018000, 0x007FFFFF,
        0x807FFFFF, 0x007F8000, 0x007FFFFF,          # subnormals (rounding into the normals)
        0x00800000, 0x80800000,                      # smallest normals
        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001, 0x7F7EFFFF,  # overflow edge
        0x3F808000, 0x3F818000, 0x3F807FFF, 0x3F808001,  # ties to even, just below/above
        0x3E89CCD5,                                  # public fault: truncation gives 0x3E89
        0x3F800000, 0xBF800000, 0x3FFFFFFF, 0x477FE000,
    ]
    return np.array(pats, np.uint32)


def _check_to_bf16(bits_u32: np.ndarray, build=None):
    x = bits_u32.view(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        want = _bits16(x.astype(BF16))
    got = _bits16(to_bfloat16(x, build=build))
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(hex(int(bits_u32[i])), hex(int(got[i])), hex(int(want[i]))) for i in bad[:8]]


@pytest.mark.parametrize("name", onepath.dispatch.LEVELS + ("amx_emu",))
def test_all_bf16_to_f32(name):
    if name != "amx_emu" and name not in onepath.available_isas():
        pytest.skip(f"{name} cannot run here")
    allp = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    h = allp.view(BF16)
    got = to_float32(h, build=name).view(np.uint32)
    want = h.astype(np.float32).view(np.uint32)
    assert np.array_equal(got, want)
    assert np.array_equal(got, allp.astype(np.uint32) << 16)


@pytest.mark.parametrize("name", onepath.dispatch.LEVELS + ("amx_emu",))
def test_f32_to_bf16_specials_and_random(name):
    if name != "amx_emu" and name not in onepath.available_isas():
        pytest.skip(f"{name} cannot run here")
    rng = np.random.default_rng(1234)
    _check_to_bf16(_specials(), name)
    # specials at every position of a vector block (masked tails, the fix-up path of VCVTNE2PS2BF16)
    for n in (1, 7, 15, 16, 17, 31, 32, 33, 63, 100):
        for s in _specials()[::3]:
            v = rng.integers(0, 2**32, n, dtype=np.uint32)
            v[rng.integers(0, n)] = s
            _check_to_bf16(v, name)
    _check_to_bf16(rng.integers(0, 2**32, 1_000_003, dtype=np.uint32), name)
    # values near bfloat16 rounding boundaries (low 16 bits around 0x8000), all exponents
    base = rng.integers(0, 2**32, 200_000, dtype=np.uint32) & 0xFFFF0000
    low = np.array([0x7FFF, 0x8000, 0x8001, 0x0000, 0xFFFF], np.uint32)
    _check_to_bf16((base[:, None] | low[None, :]).ravel(), name)


def test_public_faults():
    x = np.array([0x3E89CCD5, 0x7F800001], np.uint32).view(np.float32)
    got = _bits16(to_bfloat16(x))
    assert got[0] == 0x3E8A  # rounding, not truncation (0x3E89)
    assert (got[1] & 0x7F80) == 0x7F80 and (got[1] & 0x7F) != 0  # still a NaN, not Inf (0x7F80)


def test_conversion_shapes_and_threads():
    x = np.linspace(-3, 3, 3 * 70000, dtype=np.float32).reshape(3, 70000)
    old = onepath.get_num_threads()
    onepath.set_num_threads(2)
    try:
        h = to_bfloat16(x)
    finally:
        onepath.set_num_threads(old)
    assert h.shape == x.shape and h.dtype == BF16
    assert np.array_equal(_bits16(h), _bits16(x.astype(BF16)))
    assert np.array_equal(to_float32(h), h.astype(np.float32))
    # non-contiguous input
    assert np.array_equal(_bits16(to_bfloat16(x[:, ::3])), _bits16(x[:, ::3].astype(BF16)))


def test_promotion_rules():
    assert onepath.bfloat16 is BF16.type
    assert result_dtype(BF16, BF16) == BF16
    assert result_dtype(BF16, F32) == F32 and result_dtype(F32, BF16) == F32
    assert result_dtype(BF16, BF16, np.float32) == F32
    assert result_dtype(np.float64, BF16) is None
