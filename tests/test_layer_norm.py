"""onepath.layer_norm (kernels/norm.c): torch.nn.functional.layer_norm's result at every level,
the fused residual, in place, bits independent of threads and level, clear errors."""
import numpy as np
import pytest

import onepath
from onepath.dtypes import BF16


def reference(x, shape, w=None, b=None, eps=1e-5, r=None):
    """float64 LayerNorm of x (+ r) over the trailing ``shape`` axes."""
    v = np.asarray(x, np.float64) + (0 if r is None else np.asarray(r, np.float64))
    axes = tuple(range(v.ndim - len(shape), v.ndim))
    mean = v.mean(axes, keepdims=True)
    var = ((v - mean) ** 2).mean(axes, keepdims=True)
    y = (v - mean) / np.sqrt(var + eps)
    if w is not None:
        y = y * np.asarray(w, np.float64)
    if b is not None:
        y = y + np.asarray(b, np.float64)
    return y


@pytest.mark.parametrize("lead,shape", [((3,), (1,)), ((7,), (5,)), ((4, 3), (16,)), ((9,), (17,)),
                                        ((2,), (3, 40)), ((70,), (384,)), ((), (130,))])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("res", [False, True])
def test_float32_matches_reference(level, lead, shape, affine, res):
    rng = np.random.default_rng(len(lead) + sum(shape))
    x = (rng.standard_normal(lead + shape) * 3 + 1).astype(np.float32)
    r = rng.standard_normal(x.shape).astype(np.float32) if res else None
    w = rng.standard_normal(shape).astype(np.float32) if affine else None
    b = rng.standard_normal(shape).astype(np.float32) if affine else None
    y = onepath.layer_norm(x, shape, w, b, 1e-5, residual=r)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, reference(x, shape, w, b, 1e-5, r), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("res_dtype", [None, np.float32, BF16])
def test_bfloat16_rounded_once(level, res_dtype):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((33, 70)).astype(BF16)
    r = None if res_dtype is None else rng.standard_normal(x.shape).astype(res_dtype)
    w = rng.standard_normal(70).astype(BF16)
    b = rng.standard_normal(70).astype(np.float32)
    y = onepath.layer_norm(x, 70, w, b, residual=r)
    assert y.dtype == BF16
    ref = reference(x.astype(np.float32), (70,), w.astype(np.float32), b, 1e-5,
                    None if r is None else r.astype(np.float32))
    # one rounding of a float32 result: within one bfloat16 ulp of the exact value
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2 ** -7, atol=1e-5)


def test_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    x = rng.standard_normal((40, 384)).astype(np.float32)
    r = rng.standard_normal((40, 384)).astype(np.float32)
    w, b = rng.standard_normal(384).astype(np.float32), rng.standard_normal(384).astype(np.float32)
    t = torch.nn.functional.layer_norm(torch.from_numpy(x + r), (384,), torch.from_numpy(w),
                                       torch.from_numpy(b), 1e-12).numpy()
    np.testing.assert_allclose(onepath.layer_norm(x, (384,), w, b, 1e-12, residual=r), t, rtol=1e-5, atol=1e-5)


def test_same_bits_every_level_and_thread_count(level):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 384)).astype(np.float32)  # above the one-thread size
    r = rng.standard_normal(x.shape).astype(np.float32)
    w, b = rng.standard_normal(384).astype(np.float32), rng.standard_normal(384).astype(np.float32)
    saved = onepath.get_num_threads()
    try:
        onepath.set_num_threads(1)
        one = onepath.layer_norm(x, 384, w, b, residual=r)
        onepath.set_num_threads(2)
        two = onepath.layer_norm(x, 384, w, b, residual=r)
    finally:
        onepath.set_num_threads(saved)
    with onepath.max_isa("generic"):
        generic = onepath.layer_norm(x, 384, w, b, residual=r)
    assert np.array_equal(one, two) and np.array_equal(one, generic)


@pytest.mark.parametrize("target", ["x", "residual"])
def test_in_place(level, target):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20, 48)).astype(np.float32)
    r = rng.standard_normal((20, 48)).astype(np.float32)
    want = onepath.layer_norm(x, 48, residual=r)
    out = x if target == "x" else r
    assert onepath.layer_norm(x, 48, residual=r, out=out) is out
    assert np.array_equal(out, want)


def test_strided_input_and_empty():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((48, 20)).astype(np.float32).T  # not C-contiguous
    np.testing.assert_allclose(onepath.layer_norm(x, 48), reference(x, (48,)), rtol=2e-5, atol=2e-5)
    assert onepath.layer_norm(np.zeros((0, 8), np.float32), 8).shape == (0, 8)


def test_errors():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(TypeError, match="float64"):
        onepath.layer_norm(x.astype(np.float64), 8)
    with pytest.raises(ValueError, match=r"\(4, 8\).*\(6,\)"):
        onepath.layer_norm(x, 6)
    with pytest.raises(ValueError, match="weight"):
        onepath.layer_norm(x, 8, np.ones(7, np.float32))
    with pytest.raises(TypeError, match="bias.*int64"):
        onepath.layer_norm(x, 8, None, np.ones(8, np.int64))
    with pytest.raises(ValueError, match="residual"):
        onepath.layer_norm(x, 8, residual=np.ones((4, 7), np.float32))
    with pytest.raises(TypeError, match="residual.*float16"):
        onepath.layer_norm(x, 8, residual=x.astype(np.float16))
    with pytest.raises(ValueError, match="out"):
        onepath.layer_norm(x, 8, out=np.ones((4, 8), BF16))
    with pytest.raises(ValueError, match="overlaps x"):
        big = np.ones((5, 8), np.float32)
        onepath.layer_norm(big[:4], 8, out=big[1:])
    with pytest.raises(TypeError, match="normalized_shape"):
        onepath.layer_norm(x, "8")
    with pytest.raises(ValueError, match="normalized_shape"):
        onepath.layer_norm(x, ())
