"""onepath.attention (kernels/attn.c): scaled_dot_product_attention's result at every level, the
additive key mask, bfloat16 in and out, bits independent of threads and level, clear errors."""
import numpy as np
import pytest

import onepath
from onepath.dtypes import BF16


def reference(qkv, heads, mask=None, scale=None):
    """float64 multi-head attention of qkv (b, s, 3d) -> (b, s, d)."""
    x = np.asarray(qkv, np.float64)
    b, s, w = x.shape
    d = w // 3
    hd = d // heads
    q, k, v = (x[:, :, i * d:(i + 1) * d].reshape(b, s, heads, hd).transpose(0, 2, 1, 3) for i in range(3))
    sc = (q @ k.transpose(0, 1, 3, 2)) * (1 / np.sqrt(hd) if scale is None else scale)
    if mask is not None:
        sc = sc + np.asarray(mask, np.float64)[:, None, None, :]
    sc = np.exp(sc - sc.max(-1, keepdims=True))
    p = sc / sc.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(b, s, d)


def _data(b, s, heads, hd, seed=0):
    rng = np.random.default_rng(seed)
    qkv = rng.standard_normal((b, s, 3 * heads * hd)).astype(np.float32)
    mask = np.zeros((b, s), np.float32)
    for i in range(b):
        mask[i, rng.integers(1, s + 1):] = -1e9  # padding keys from a random length on
    return qkv, mask


@pytest.mark.parametrize("b,s,heads,hd", [(1, 1, 1, 1), (3, 5, 2, 7), (2, 21, 12, 32), (1, 17, 1, 40),
                                          (2, 33, 3, 16)])
@pytest.mark.parametrize("masked", [False, True])
def test_float32_matches_reference(level, b, s, heads, hd, masked):
    qkv, mask = _data(b, s, heads, hd, seed=s + hd)
    m = mask if masked else None
    y = onepath.attention(qkv, heads, m)
    assert y.dtype == np.float32 and y.shape == (b, s, heads * hd)
    np.testing.assert_allclose(y, reference(qkv, heads, m), rtol=2e-5, atol=2e-5)
    y1 = onepath.attention(qkv, heads, m, scale=0.5)
    np.testing.assert_allclose(y1, reference(qkv, heads, m, 0.5), rtol=2e-5, atol=2e-5)


def test_bfloat16_in_and_out(level):
    qkv, mask = _data(3, 19, 4, 24, seed=3)
    q16 = qkv.astype(BF16)
    ref = reference(q16.astype(np.float32), 4, mask)
    y = onepath.attention(q16, 4, mask)
    assert y.dtype == BF16
    np.testing.assert_allclose(y.astype(np.float32), ref, rtol=2 ** -7, atol=1e-4)  # rounded once
    y32 = onepath.attention(q16, 4, mask, dtype=np.float32)
    assert y32.dtype == np.float32
    np.testing.assert_allclose(y32, ref, rtol=2e-5, atol=2e-5)
    assert np.array_equal(onepath.attention(q16.astype(np.float32), 4, mask, dtype=BF16).view(np.uint16),
                          y.view(np.uint16))


def test_matches_torch():
    torch = pytest.importorskip("torch")
    qkv, mask = _data(4, 23, 6, 32, seed=4)
    mask[1] = -np.inf   # every key of one sequence masked: a zero context, as torch's SDPA gives
    b, s, w = qkv.shape
    t = torch.from_numpy(qkv).view(b, s, 3, 6, 32).permute(2, 0, 3, 1, 4)
    o = torch.nn.functional.scaled_dot_product_attention(
        t[0], t[1], t[2], attn_mask=torch.from_numpy(mask)[:, None, None, :])
    np.testing.assert_allclose(onepath.attention(qkv, 6, mask),
                               o.transpose(1, 2).reshape(b, s, w // 3).numpy(), rtol=1e-5, atol=1e-5)


# the AVX2 float32 head (op_attn_head8, hd a multiple of 16) against every other level too: keys
# past the last whole block of 8 (29, 40, 5 < 8, 17), a sequence with every key masked, another
# with -Inf keys, a scale of 1 and not
@pytest.mark.parametrize("batch, seq, heads, hd, scale",
                         [(4, 29, 12, 32, None), (2, 40, 7, 32, None), (3, 5, 2, 16, 1.0),
                          (2, 17, 3, 48, 0.3)])
def test_same_bits_every_level_and_thread_count(batch, seq, heads, hd, scale):
    # tasks are whole sequences or groups of their heads, as many as the thread count asks
    # (kernels/attn.c): 2 x 7 heads at 2 threads run in groups of 2, 2, 2 and 1
    qkv, mask = _data(batch, seq, heads, hd, seed=5)
    if scale is not None:
        mask[0] = -np.inf
        mask[1, ::2] = -np.inf
    outs = []
    for lv in onepath.available_isas():
        with onepath.max_isa(lv):
            for th in (1, 2):
                saved = onepath.get_num_threads()
                onepath.set_num_threads(th)
                try:
                    outs.append(onepath.attention(qkv, heads, mask, scale=scale).view(np.uint32))
                finally:
                    onepath.set_num_threads(saved)
    for o in outs[1:]:
        assert np.array_equal(o, outs[0])


def test_errors():
    qkv, mask = _data(2, 5, 2, 4)
    with pytest.raises(TypeError, match="float64"):
        onepath.attention(qkv.astype(np.float64), 2)
    with pytest.raises(ValueError, match=r"\(5, 24\)"):
        onepath.attention(qkv[0], 2)
    with pytest.raises(ValueError, match="24"):
        onepath.attention(qkv, 5)
    with pytest.raises(ValueError, match="heads must be >= 1"):
        onepath.attention(qkv, 0)
    with pytest.raises(TypeError, match="heads"):
        onepath.attention(qkv, 2.0)
    with pytest.raises(ValueError, match="mask has shape"):
        onepath.attention(qkv, 2, mask[:, :4])
    with pytest.raises(TypeError, match="mask must be float32"):
        onepath.attention(qkv, 2, mask.astype(bool))
    with pytest.raises(TypeError, match="dtype"):
        onepath.attention(qkv, 2, dtype=np.float16)
    with pytest.raises(TypeError, match="scale"):
        onepath.attention(qkv, 2, scale="1")
    with pytest.raises(TypeError, match="heads"):
        onepath.attention(qkv, True)
    with pytest.raises(TypeError, match="scale"):
        onepath.attention(qkv, 2, scale=True)
    with pytest.raises(ValueError, match="1e.300"):
        onepath.attention(qkv, 2, scale=1e300)
    assert onepath.attention(qkv[:0], 2).shape == (0, 5, 8)


def test_every_key_masked_gives_zero_context(level):
    """A sequence whose keys are all -inf: a zero context (torch's scaled_dot_product_attention
    gives zeros there; a softmax over them alone would be NaN); the other sequences as without
    it."""
    qkv, mask = _data(3, 11, 2, 8, seed=7)
    mask[1] = -np.inf
    for dt, rtol, atol in ((np.float32, 2e-5, 2e-5), (BF16, 2 ** -7, 1e-4)):  # bf16: rounded once
        x = qkv.astype(dt)
        y = onepath.attention(x, 2, mask).astype(np.float32)
        assert np.array_equal(y[1], np.zeros_like(y[1]))
        keep = [0, 2]
        np.testing.assert_allclose(y[keep], reference(x.astype(np.float32)[keep], 2, mask[keep]),
                                   rtol=rtol, atol=atol)
