"""The MiniLM bench's numpy glue (no model needed): LayerNorm over row tiles and the attention's
partial mask add give the same bits as the plain broadcasts."""
import numpy as np
import pytest

from onepath.bench import minilm


@pytest.mark.parametrize("shape", [(37, 48), (2, 16, 48), (5, 48), (32, 48)])
def test_layer_norm_tiles_same_bits(shape):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32) * 3 + 1
    r = rng.standard_normal(shape, dtype=np.float32)
    ln = minilm.LayerNorm(rng.standard_normal(48, dtype=np.float32),
                          rng.standard_normal(48, dtype=np.float32), 1e-12)
    plain = minilm.layer_norm(x, ln.gamma, ln.beta, ln.eps, r)
    assert np.array_equal(ln(x.copy(), r, inplace=True), plain)
    assert np.array_equal(ln(x), minilm.layer_norm(x, ln.gamma, ln.beta, ln.eps))
    # a non-contiguous input takes the broadcast path
    xt = np.asfortranarray(x)
    assert np.array_equal(ln(xt, r), plain)


def test_masked_softmax_keys_partial_mask():
    rng = np.random.default_rng(1)
    s, b, h = 9, 4, 3
    mask = np.ones((b, s), np.int64)
    mask[1, 6:] = 0
    mask[3, 4:] = 0
    mk = minilm.key_mask(mask)
    st = rng.standard_normal((s, b, h, s), dtype=np.float32)
    ref = minilm.softmax(st + mk, axis=0)
    assert np.array_equal(minilm.masked_softmax_keys(st.copy(), mk), ref)
    full = minilm.key_mask(np.ones((b, s), np.int64))  # no padding: nothing added
    assert np.array_equal(minilm.masked_softmax_keys(st.copy(), full), minilm.softmax(st.copy(), axis=0))
