/* conv_dw.c: depthwise convolution (groups == C, OC = C * multiplier), a direct kernel.

   NCHW: tasks are runs of output planes. Generic path (every level): the input plane is copied
   once into a zero-padded scratch split into `sw` column phases, so every tap of every output row
   is a unit-stride run; each kernel row is then one fused pass over the output row (acc[ow] +=
   w0 s0[ow] + w1 s1[ow] + w2 s2[ow] for 3-wide kernels), vectorised by the compiler with this
   level's instructions (SSE2 / AVX2 / AVX-512). AVX-512 builds have 3x3 undilated kernels
   (op_dw_ctx.direct3 picks one per problem):
     - whole rows in registers (stride 1, rows of 9..112 columns: op_dw3_rowv),
     - even / odd columns (stride 1, bfloat16 input, rows of more than 64 columns: op_dw3_eo),
     - flat plane (stride 1, the other planes up to 64x64 (bfloat16: 128x128), e.g. 7x7 and
       bfloat16 14x14 ... 56x56: op_dw3_flat),
     - phase planes (stride 2, output rows of <= 7 columns: op_dw3_s2),
     - register-blocked rows straight from the input (the rest of stride 1 / 2: op_dw3_plane;
       bfloat16 stride 2 widens by integer ops alone, no shuffle),
     - row-register kernels, when the caller asks for them (op_conv_desc.dw_rows, chosen per
       microarchitecture by the registry): one 16-column vector of R output rows at a time
       (stride 1 with padding 1 along W: op_dw3_s1r; stride 2: op_dw3_s2r, float32 op_dw3_s2w whole
       rows), and for rows of at most
       8 columns one 256-bit vector per row (stride 1: op_dw3_r8; stride 2, input rows of <= 16
       columns: op_dw3_s2n); with dw_rows bit 2, bfloat16 stride-1 rows of more than 16 columns
       widen each plane once into scratch, then run op_dw3_s1r's float32 rows (op_dw3_s1r_w).
   AVX2 builds (no AVX-512) have two 3x3 undilated kernels for stride 1 and 2: flat planes (padding
   1, float32 stride-1 rows of at most 32 columns, bfloat16 any width, stride 2 from even sizes, up
   to 16384 outputs: op_dw8f, direct3 = OP_DW_AVX2_FLAT) and rows for the rest, any padding and
   multiplier (op_dw8_plane, OP_DW_AVX2_3X3: float32 input read in place, bfloat16 input widened
   once into a ring of padded rows).
   NHWC: one task per output row; the channel axis is the vector axis (acc[c] += w[c] x[c]); AVX-512
   builds run 3x3 multiplier-1 problems on op_dw_nhwc_row16 (weights and 4-8 output pixels in
   registers), AVX2 builds on op_dw8n_row (8 output pixels in registers). bfloat16 input is
   widened while it is read (bfloat16 weights once per call). Bias and
   activation are applied in the write-out, which stores float32 or, with y_bf16, bfloat16 rounded
   to nearest even (the same rounding as op_conv_f32_to_bf16 applied to the float32 result, so both
   outputs agree bit for bit). */

typedef struct {
    const op_conv_desc *d;
    const void *x;
    const float *w, *bias;   /* w: float32 weights (NULL when wb is set) */
    const uint16_t *wb;      /* bfloat16 weight bits read in place by the NCHW 3x3 AVX-512 kernels
                                (op_dw3_wv), else NULL */
    void *y;                 /* float32, or bfloat16 bits when ybf16 */
    int act;
    int bf16;                /* input is bfloat16 bits */
    int ybf16;               /* output is bfloat16 bits */
    int64_t mult;            /* channel multiplier OC / C */
    int64_t hp, wq;          /* NCHW scratch: padded rows, columns per phase */
    float *scratch;          /* per thread: NCHW padded plane (+ grid accumulator, + a bf16 output
                                row); NHWC with bfloat16 output: one float32 output row */
    int64_t scratch_elems;   /* per thread */
    int direct3;             /* AVX-512 kernels. NCHW 3x3 undilated, stride 1 or 2: 1 register-blocked
                                rows, 2 flat (stride 1), 3 phase planes (stride 2), 5 whole rows in
                                registers (stride 1), 7 even / odd columns (bfloat16, stride 1),
                                8 / 9 row-register vectors (stride 1 / 2), 10 widened whole rows
                                (bfloat16, 9..16 columns), 11 / 12 256-bit rows (<= 8 columns, stride 1 / 2),
                                13 widened planes on row-register vectors (bfloat16, stride 1); NHWC 3x3 multiplier 1:
                                4 channel vectors.
                                AVX2 builds: OP_DW_AVX2_3X3 / _FLAT (NCHW 3x3, stride 1 / 2),
                                OP_DW_AVX2_NHWC (NHWC 3x3 multiplier 1) */
    int64_t chunk;           /* per task: NCHW output planes, NHWC output rows (op_dw_task) */
#if defined(OP_HAS_AVX512)
    uint16_t fm0[1024], fm2[1024]; /* flat 3x3 kernel: per 16-lane block, lanes not in column 0 / W - 1 */
#endif
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
    int64_t fperiod;         /* AVX2 flat kernels: blocks of 8 after which the columns repeat */
    float fm8[64][2][8] OP_ALIGNED(32); /* per block of the period: all bits set in the lanes at
                                           output column 0 / OW - 1 */
#endif
} op_dw_ctx;

/* op_dw_ctx.direct3 of the AVX2 builds' NCHW 3x3 kernels: rows (op_dw8_plane), flat planes
   (op_dw8f) */
enum { OP_DW_AVX2_3X3 = 20, OP_DW_AVX2_FLAT = 21 };

OP_INLINE void op_dw_act_store(float *OP_RESTRICT y, int64_t n, int act)
{
    if (act == OP_ACT_RELU) {
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0.0f ? 0.0f : y[i];
    } else if (act != OP_ACT_NONE) {
        op_act_row(y, 1, n, act);   /* the vector form's bits on every element (act_f32.c) */
    }
}

/* A finished float32 output row (activated) to the bfloat16 output at element offset yoff. */
OP_INLINE void op_dw_put_bf16(const op_dw_ctx *c, int64_t yoff, const float *row, int64_t len)
{
    op_cvt_f32_to_bf16_run(len, row, (uint16_t *)c->y + yoff);
}

OP_INLINE void op_dw_nchw_plane(const op_dw_ctx *c, int64_t n, int64_t oc, float *OP_RESTRICT buf,
                                const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t ci = c->mult == 1 ? oc : oc / c->mult;
    const int64_t H = d->h, W = d->w, sw = d->sw, wq = c->wq, hp = c->hp;
    const int64_t plane = (n * d->c + ci) * H * W;
    /* padded scratch: row r <-> ih = r - pt; column cp <-> iw = cp - pl, stored at
       buf[(r * sw + cp % sw) * wq + cp / sw] */
    for (int64_t r = 0; r < hp; r++) {
        const int64_t ih = r - d->pt;
        float *br = buf + r * sw * wq;
        if (ih < 0 || ih >= H) {
            for (int64_t i = 0; i < sw * wq; i++) br[i] = 0.0f;
            continue;
        }
        const int64_t src = plane + ih * W;
        if (sw == 1) {
            /* (pl in a local: with the stores to br, which may alias *d, GCC reloaded d->pl per
               element and no longer made the copy a memmove: generic 1.2-1.5x slower) */
            const int64_t pl = d->pl, lo = op_min64(pl, wq);
            const int64_t hi = op_min64(wq, pl + W);
            for (int64_t i = 0; i < lo; i++) br[i] = 0.0f;
            for (int64_t i = lo; i < hi; i++) br[i] = op_conv_ld(c->x, src + i - pl, BF16);
            for (int64_t i = op_max64(hi, lo); i < wq; i++) br[i] = 0.0f;
        } else {
            for (int64_t ph = 0; ph < sw; ph++) {
                float *bq = br + ph * wq;
                for (int64_t i = 0; i < wq; i++) {
                    const int64_t iw = i * sw + ph - d->pl;
                    bq[i] = (iw >= 0 && iw < W) ? op_conv_ld(c->x, src + iw, BF16) : 0.0f;
                }
            }
        }
    }
    const int64_t OW = d->ow, KH = d->kh, KW = d->kw;
    const float *wk = c->w + oc * KH * KW;
    const float b = c->bias ? c->bias[oc] : 0.0f;
    const int64_t yplane = (n * d->oc + oc) * d->oh * OW;  /* element offset of the output plane */
    /* float32 output: accumulate in place; bfloat16: in a row of the scratch, then round */
    float *Y = c->ybf16 ? NULL : (float *)c->y + yplane;
    float *rowbuf = buf + hp * sw * wq + d->oh * wq;
    if (sw == 1 && d->sh == 1 && OW < 64) {
        /* small planes: compute on the padded grid (row pitch wq; columns >= OW are discarded), so
           each tap is a single pass of length OH * wq instead of OH short rows */
        float *OP_RESTRICT acc = buf + hp * wq;
        const int64_t len = (d->oh - 1) * wq + OW;
        for (int64_t i = 0; i < len; i++) acc[i] = b;
        for (int64_t ki = 0; ki < KH; ki++) {
            for (int64_t kj = 0; kj < KW; kj++) {
                const float *OP_RESTRICT s0 = buf + ki * d->dh * wq + kj * d->dw;
                const float w0 = wk[ki * KW + kj];
                for (int64_t i = 0; i < len; i++) acc[i] += w0 * s0[i];
            }
        }
        for (int64_t oh = 0; oh < d->oh; oh++) {
            if (c->ybf16) {
                op_dw_act_store(acc + oh * wq, OW, c->act);
                op_dw_put_bf16(c, yplane + oh * OW, acc + oh * wq, OW);
                continue;
            }
            float *yr = Y + oh * OW;
            for (int64_t i = 0; i < OW; i++) yr[i] = acc[oh * wq + i];
            op_dw_act_store(yr, OW, c->act);
        }
        return;
    }
    for (int64_t oh = 0; oh < d->oh; oh++) {
        float *OP_RESTRICT acc = c->ybf16 ? rowbuf : Y + oh * OW;
        for (int64_t i = 0; i < OW; i++) acc[i] = b;
        for (int64_t ki = 0; ki < KH; ki++) {
            const int64_t r = oh * d->sh + ki * d->dh;
            const float *row = buf + r * sw * wq;
            int64_t kj = 0;
            for (; kj + 3 <= KW; kj += 3) {
                const int64_t o0 = kj * d->dw, o1 = o0 + d->dw, o2 = o1 + d->dw;
                const float *OP_RESTRICT s0 = row + (o0 % sw) * wq + o0 / sw;
                const float *OP_RESTRICT s1 = row + (o1 % sw) * wq + o1 / sw;
                const float *OP_RESTRICT s2 = row + (o2 % sw) * wq + o2 / sw;
                const float w0 = wk[ki * KW + kj], w1 = wk[ki * KW + kj + 1], w2 = wk[ki * KW + kj + 2];
                for (int64_t i = 0; i < OW; i++) acc[i] += w0 * s0[i] + w1 * s1[i] + w2 * s2[i];
            }
            for (; kj < KW; kj++) {
                const int64_t o0 = kj * d->dw;
                const float *OP_RESTRICT s0 = row + (o0 % sw) * wq + o0 / sw;
                const float w0 = wk[ki * KW + kj];
                for (int64_t i = 0; i < OW; i++) acc[i] += w0 * s0[i];
            }
        }
        op_dw_act_store(acc, OW, c->act);
        if (c->ybf16) op_dw_put_bf16(c, yplane + oh * OW, acc, OW);
    }
}

#if defined(OP_HAS_AVX512)
/* ---------------------------------------------------------------- NCHW 3x3, register-blocked (AVX-512)

   Vectors run along W (16 output columns). For each block of R output rows the R*sh + 3 - sh input
   rows are read once each, straight from the input plane: the three column taps of a row are three
   masked loads (stride 1) or two loads de-interleaved into even/odd columns (stride 2), the masks
   zeroing the lanes that fall in the left/right padding (masked-off lanes never fault), and rows in
   the top/bottom padding are skipped. No padded copy of the plane is made. Each loaded row feeds the
   (up to 3) output rows it belongs to; the R accumulators and the 9 weights stay in registers. */

/* Lanes l of a 16-wide load at column p (relative to the row start) with 0 <= p + l < W. */
OP_INLINE __mmask16 op_dw_lanes(int64_t p, int64_t W)
{
    const int64_t lo = p < 0 ? -p : 0;
    int64_t hi = W - p;
    if (hi > 16) hi = 16;
    if (lo >= hi) return 0;
    return (__mmask16)((((uint32_t)1 << hi) - 1u) & ~(((uint32_t)1 << lo) - 1u));
}

/* The same for a 32-lane (bfloat16) load. */
OP_INLINE __mmask32 op_dw_lanes32(int64_t p, int64_t W)
{
    const int64_t lo = p < 0 ? -p : 0;
    int64_t hi = W - p;
    if (hi > 32) hi = 32;
    if (lo >= hi) return 0;
    return (__mmask32)((((uint64_t)1 << hi) - 1u) & ~(((uint64_t)1 << lo) - 1u));
}

OP_INLINE __m512 op_dw_vld(const void *x, int64_t off, __mmask16 m, const int BF16)
{
    if (BF16) {
        const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)x + off);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_maskz_loadu_ps(m, (const float *)x + off);
}

/* The nine taps of output plane oc broadcast to vectors, from the float32 weights or, with
   bfloat16 weights, from their bits (widened here: no per-call widened copy of the weights, which
   another thread would then have to pull from the writer's cache). */
OP_INLINE void op_dw3_wv(const op_dw_ctx *c, int64_t oc, __m512 wv[9])
{
    if (c->wb) {
        const uint16_t *wk = c->wb + oc * 9;
        for (int t = 0; t < 9; t++) wv[t] = _mm512_castsi512_ps(_mm512_set1_epi32((int)((uint32_t)wk[t] << 16)));
    } else {
        const float *wk = c->w + oc * 9;
        for (int t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(wk[t]);
    }
}

/* op_dw3_wv for the 256-bit kernels (op_dw3_r8, op_dw3_s2n). */
OP_INLINE void op_dw3_wv256(const op_dw_ctx *c, int64_t oc, __m256 wv[9])
{
    if (c->wb) {
        const uint16_t *wk = c->wb + oc * 9;
        for (int t = 0; t < 9; t++) wv[t] = _mm256_castsi256_ps(_mm256_set1_epi32((int)((uint32_t)wk[t] << 16)));
    } else {
        const float *wk = c->w + oc * 9;
        for (int t = 0; t < 9; t++) wv[t] = _mm256_set1_ps(wk[t]);
    }
}

/* op_dw_pair_idx for 256-bit vectors: the word permute that packs two rows of w bfloat16 results
   (the high words of 2 x 8 float lanes):
   words 0..w-1 from the first row's vector, then the second row's. */
OP_INLINE __m256i op_dw_pair_idx256(int64_t w)
{
    uint16_t ix[16];
    for (int k = 0; k < 16; k++) ix[k] = (uint16_t)(k < w ? 2 * k + 1 : 16 + 2 * (k - w) + 1);
    return _mm256_loadu_si256((const __m256i *)ix);
}

/* 16 floats -> bfloat16 bits (low halves of the lanes): the rounding of op_cvt16_int (cvt_bf16.c),
   round to nearest even with u + 0x7FFF + lsb, NaN -> the quiet NaN with its sign (0x7FC0 / 0xFFC0),
   bit for bit; the NaN fix-up only runs when a lane is NaN (fewer instructions per output vector). */
OP_INLINE __m512i op_dw_bf16_bits(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v), h = _mm512_srli_epi32(u, 16);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)),
                         _mm512_and_si512(h, _mm512_set1_epi32(1))), 16);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (OP_LIKELY(nan == 0)) return r;
    /* (h & 0x8000) | 0x7FC0 */
    const __m512i q = _mm512_ternarylogic_epi32(h, _mm512_set1_epi32(0x8000), _mm512_set1_epi32(0x7FC0), 0xEA);
    return _mm512_mask_mov_epi32(r, nan, q);
}

/* 16 output lanes (mask m) at element offset off: activation in-register (every activation, so the
   float32 and bfloat16 outputs are the same numbers), then float32 or bfloat16 (op_dw_bf16_bits). */
OP_INLINE void op_dw_vst(void *Y, int64_t off, __mmask16 m, __m512 v, int act, const int YB)
{
    if (act == OP_ACT_RELU) {
        v = _mm512_max_ps(_mm512_setzero_ps(), v);  /* NaN and -0 pass (second operand) */
    } else if (act != OP_ACT_NONE) {
        const op_v16f x = (op_v16f)v;
        v = (__m512)op_v16_act(x, act);  /* as op_act_row (act_f32.c) */
    }
    if (YB)  /* (the register VPMOVDW and a masked word store: fewer uops than the store form) */
        _mm256_mask_storeu_epi16((uint16_t *)Y + off, m, _mm512_cvtepi32_epi16(op_dw_bf16_bits(v)));
    else
        _mm512_mask_storeu_ps((float *)Y + off, m, v);
}

/* Two bfloat16 output vectors in one store: lanes 0..la-1 of a (la <= 16) then the 16 lanes of b,
   as 32 bfloat16 words (lanes m) at element offset off. Activation as op_dw_vst, the same rounding
   as op_dw_bf16_bits (bit for bit), computed in the high halves of the lanes, which one word permute
   (index op_dw_pair_idx(la)) gathers from both vectors: per pair of vectors that saves the two
   right shifts, one NaN test and one store of two op_dw_vst calls, and trades two VPMOVDW for one
   VPERMT2W. (Two adjacent 16-lane blocks of a plane: la = 16; two output rows of W <= 16
   columns: la = W.) */
OP_INLINE __m512i op_dw_pair_idx(int la)
{
    uint16_t ix[32];
    for (int k = 0; k < 32; k++) ix[k] = (uint16_t)(k < la ? 2 * k + 1 : 32 + 2 * (k - la) + 1);
    return _mm512_loadu_si512(ix);
}

OP_INLINE __m512i op_dw_bf16_hi(__m512 v)
{
    const __m512i u = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
}

OP_INLINE void op_dw_vst2_bf16(void *Y, int64_t off, __mmask32 m, __m512 a, __m512 b, __m512i idx,
                               int act)
{
    if (act == OP_ACT_RELU) {
        a = _mm512_max_ps(_mm512_setzero_ps(), a);
        b = _mm512_max_ps(_mm512_setzero_ps(), b);
    } else if (act != OP_ACT_NONE) {
        a = (__m512)op_v16_act((op_v16f)a, act);
        b = (__m512)op_v16_act((op_v16f)b, act);
    }
    __m512i ra = op_dw_bf16_hi(a), rb = op_dw_bf16_hi(b);
    if (OP_UNLIKELY(_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q) != 0)) {
        /* NaN lanes: (u & 0x80000000) | 0x7FC00000, the quiet NaN with its sign */
        const __m512i sg = _mm512_set1_epi32((int)0x80000000u), qn = _mm512_set1_epi32(0x7FC00000);
        ra = _mm512_mask_mov_epi32(ra, _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q),
                                   _mm512_ternarylogic_epi32(_mm512_castps_si512(a), sg, qn, 0xEA));
        rb = _mm512_mask_mov_epi32(rb, _mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q),
                                   _mm512_ternarylogic_epi32(_mm512_castps_si512(b), sg, qn, 0xEA));
    }
    _mm512_mask_storeu_epi16((uint16_t *)Y + off, m, _mm512_permutex2var_epi16(ra, idx, rb));
}

/* Output rows oh0..oh0+R-1 of one plane, every 16-column block ob (load masks cm[3 ob + 0..2] with
   the left/right padding lanes off, store masks sm[ob]). */
OP_INLINE void op_dw3_rows(const op_conv_desc *d, const void *x, int64_t plane, const __m512 *wv,
                           __m512 bv, void *Y, int64_t yoff, int64_t oh0, const __mmask16 *cm,
                           const __mmask16 *sm, int64_t nb, int act, const int R, const int S,
                           const int BF16, const int YB)
{
    const int64_t H = d->h, W = d->w, OW = d->ow;
    enum { MAXROWS = 3 * 4 + 3 };
    const int NROWS = (R - 1) * S + 3;
    int64_t roff[MAXROWS];
    __mmask16 rv[MAXROWS];
    for (int r = 0; r < NROWS; r++) {
        /* a row in the top/bottom padding loads zeros (all lanes masked: no access) */
        const int64_t ih = oh0 * S - d->pt + r;
        const int ok = ih >= 0 && ih < H;
        rv[r] = ok ? (__mmask16)0xFFFF : (__mmask16)0;
        roff[r] = plane + (ok ? ih : 0) * W;
    }
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    const __m512i is = _mm512_set_epi32(16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1);
    for (int64_t ob = 0; ob < nb; ob++) {
        const int64_t ow0 = ob * 16, p = ow0 * S - d->pl;
        const __mmask16 m0 = cm[3 * ob], m1 = cm[3 * ob + 1], m2 = cm[3 * ob + 2];
        /* bfloat16 stride 2: 32 columns from p (taps 0 and 1: the even and odd columns) and 32
           from p + 2 (tap 2: the even ones) */
        const __mmask32 k0 = S == 2 && BF16 ? op_dw_lanes32(p, W) : 0;
        const __mmask32 k2 = S == 2 && BF16 ? op_dw_lanes32(p + 2, W) : 0;
        /* one accumulator per (output row, kernel row): short FMA chains */
        __m512 acc[4][3];
        for (int i = 0; i < R; i++) {
            acc[i][0] = bv;
            acc[i][1] = acc[i][2] = _mm512_setzero_ps();
        }
#pragma GCC unroll 16
        for (int r = 0; r < NROWS; r++) {
            const int64_t off = roff[r] + p;
            __m512 v0, v1, v2;
            if (S == 1) {
                v0 = op_dw_vld(x, off, m0 & rv[r], BF16);
                v1 = op_dw_vld(x, off + 1, m1 & rv[r], BF16);
                v2 = op_dw_vld(x, off + 2, m2 & rv[r], BF16);
            } else if (BF16) {
                /* widening by integer ops alone (no shuffle): the even columns of a 32-column
                   load by a 16-bit shift of each 32-bit lane, the odd ones by clearing the low
                   half */
                const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
                const __m512i u = _mm512_maskz_loadu_epi16(rv[r] ? k0 : 0, (const uint16_t *)x + off);
                const __m512i u2 = _mm512_maskz_loadu_epi16(rv[r] ? k2 : 0, (const uint16_t *)x + off + 2);
                v0 = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
                v1 = _mm512_castsi512_ps(_mm512_and_si512(u, hi));
                v2 = _mm512_castsi512_ps(_mm512_slli_epi32(u2, 16));
            } else {
                /* columns p + 0..32: even lanes -> tap 0, odd -> tap 1, even shifted -> tap 2 */
                const __m512 ua = op_dw_vld(x, off, m0 & rv[r], BF16);
                const __m512 ub = op_dw_vld(x, off + 16, m1 & rv[r], BF16);
                const __m512 uc = op_dw_vld(x, off + 32, m2 & rv[r], BF16);
                v0 = _mm512_permutex2var_ps(ua, ie, ub);
                v1 = _mm512_permutex2var_ps(ua, io, ub);
                v2 = _mm512_permutex2var_ps(v0, is, uc);
            }
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                const int ki = r - S * i;
                if (ki < 0 || ki > 2) continue;
                acc[i][ki] = _mm512_fmadd_ps(wv[ki * 3], v0, acc[i][ki]);
                acc[i][ki] = _mm512_fmadd_ps(wv[ki * 3 + 1], v1, acc[i][ki]);
                acc[i][ki] = _mm512_fmadd_ps(wv[ki * 3 + 2], v2, acc[i][ki]);
            }
        }
        for (int i = 0; i < R; i++) {
            const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), acc[i][2]);
            op_dw_vst(Y, yoff + (oh0 + i) * OW + ow0, sm[ob], v, act, YB);
        }
    }
}

OP_INLINE void op_dw3_plane(const op_dw_ctx *c, int64_t n, int64_t oc, const int S, const int BF16,
                            const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t ci = c->mult == 1 ? oc : oc / c->mult;
    const int64_t plane = (n * d->c + ci) * d->h * d->w;
    __m512 wv[9];
    op_dw3_wv(c, oc, wv);
    const __m512 bv = _mm512_set1_ps(c->bias ? c->bias[oc] : 0.0f);
    const int64_t yplane = (n * d->oc + oc) * d->oh * d->ow;
    enum { RB = 4, MAXNB = 64 };
    const int64_t OH = d->oh, OW = d->ow, W = d->w, nb = op_cdiv64(OW, 16);
    __mmask16 cm[3 * MAXNB], sm[MAXNB];
    for (int64_t ob0 = 0; ob0 < nb; ob0 += MAXNB) {  /* column stripes of at most 1024 outputs */
        const int64_t nbs = op_min64(MAXNB, nb - ob0);
        for (int64_t ob = 0; ob < nbs; ob++) {
            const int64_t ow0 = (ob0 + ob) * 16, p = ow0 * S - d->pl;
            sm[ob] = op_dw_lanes(ow0, OW);
            if (S == 1) {
                for (int k = 0; k < 3; k++) cm[3 * ob + k] = op_dw_lanes(p + k, W);
            } else {
                cm[3 * ob] = op_dw_lanes(p, W);
                cm[3 * ob + 1] = op_dw_lanes(p + 16, W);
                cm[3 * ob + 2] = op_dw_lanes(p + 32, W) & 1u;
            }
        }
        const int64_t ys = yplane + ob0 * 16, pl0 = ob0 * 16 * S;
        int64_t oh0 = 0;
        for (; oh0 + RB <= OH; oh0 += RB)
            op_dw3_rows(d, c->x, plane + pl0, wv, bv, c->y, ys, oh0, cm, sm, nbs, c->act, RB, S, BF16, YB);
        switch (OH - oh0) {  /* the last 1-3 rows in one pass */
        case 3: op_dw3_rows(d, c->x, plane + pl0, wv, bv, c->y, ys, oh0, cm, sm, nbs, c->act, 3, S, BF16, YB); break;
        case 2: op_dw3_rows(d, c->x, plane + pl0, wv, bv, c->y, ys, oh0, cm, sm, nbs, c->act, 2, S, BF16, YB); break;
        case 1: op_dw3_rows(d, c->x, plane + pl0, wv, bv, c->y, ys, oh0, cm, sm, nbs, c->act, 1, S, BF16, YB); break;
        default: break;
        }
    }
}

/* 3x3, stride 1, padding 1 on every side, output the size of the input, planes up to 64x64 (bfloat16
   input: up to OP_DW3_FLAT_MAX elements), e.g. 7x7 ... 56x56: the plane is one flat vector axis
   (output i = oh * W + ow reads input i + (ki - 1) W + kj - 1), so every lane works whatever W is.
   Each plane is first copied
   (bfloat16: widened, once per element instead of once per tap) into a thread scratch between
   zero runs of at least W + 1 elements, which stand in for the top and bottom padding rows: the nine
   tap loads are unmasked. The left / right padding: the taps of kernel column 0 (and 2) go to their
   own accumulator, whose lanes at output column 0 (W - 1) are dropped in the final sum (those lanes
   read the neighbouring row's last / first element instead of the padding zero). The column masks
   depend only on the block (computed once per task). */
enum { OP_DW3_FLAT_MAX = 16384 };  /* (1024 blocks: op_dw_ctx.fm0 / fm2) */

OP_INLINE int64_t op_dw3_flat_lead(int64_t W) { return op_roundup64(W + 1, 16); }
/* floats per plane copy: lead zeros, the plane rounded up to whole vectors, W + 1 + 16 zeros */
OP_INLINE int64_t op_dw3_flat_buf(int64_t W, int64_t HW)
{
    return op_dw3_flat_lead(W) + op_roundup64(HW, 16) + op_roundup64(W + 17, 16);
}
/* scratch floats per thread: two plane copies (the next plane is copied before the current one is
   computed, so the tap loads never wait for the copy's stores to retire) */
OP_INLINE int64_t op_dw3_flat_scratch(int64_t W, int64_t HW) { return 2 * op_dw3_flat_buf(W, HW); }

/* plane p (= n * OC + oc) into the copy at q */
OP_INLINE void op_dw3_flat_copy(const op_dw_ctx *c, int64_t p, float *OP_RESTRICT q, int64_t HW,
                                int64_t nb, __mmask16 tail, const int BF16)
{
    int64_t plane = p * HW;  /* multiplier 1 (C == OC): input plane p */
    if (c->mult != 1) {
        const int64_t OC = c->d->oc, n = p / OC, oc = p % OC;
        plane = (n * c->d->c + oc / c->mult) * HW;
    }
    for (int64_t b = 0; b < nb; b++) {
        const __mmask16 m = b == nb - 1 ? tail : (__mmask16)0xFFFF;
        _mm512_store_ps(q + b * 16, op_dw_vld(c->x, plane + b * 16, m, BF16));
    }
}

/* output block b (16 lanes) of the plane copy at q */
OP_INLINE __m512 op_dw3_flat_blk(const float *q, int64_t b, int64_t W, const __m512 *wv, __m512 bv,
                                 const __mmask16 *c0, const __mmask16 *c2)
{
    const float *r = q + b * 16;
    __m512 a0, a1, a2;  /* kernel columns 0, 1 (+ bias), 2 */
    a0 = _mm512_mul_ps(wv[0], _mm512_loadu_ps(r - W - 1));
    a1 = _mm512_fmadd_ps(wv[1], _mm512_loadu_ps(r - W), bv);
    a2 = _mm512_mul_ps(wv[2], _mm512_loadu_ps(r - W + 1));
    a0 = _mm512_fmadd_ps(wv[3], _mm512_loadu_ps(r - 1), a0);
    a1 = _mm512_fmadd_ps(wv[4], _mm512_load_ps(r), a1);
    a2 = _mm512_fmadd_ps(wv[5], _mm512_loadu_ps(r + 1), a2);
    a0 = _mm512_fmadd_ps(wv[6], _mm512_loadu_ps(r + W - 1), a0);
    a1 = _mm512_fmadd_ps(wv[7], _mm512_loadu_ps(r + W), a1);
    a2 = _mm512_fmadd_ps(wv[8], _mm512_loadu_ps(r + W + 1), a2);
    const __m512 v = _mm512_mask_add_ps(a1, c0[b], a1, a0);
    return _mm512_mask_add_ps(v, c2[b], v, a2);
}

OP_INLINE void op_dw3_flat(const op_dw_ctx *c, int64_t p0, int64_t p1, float *OP_RESTRICT s,
                           const int BF16, const int YB)
{
    const __m512i pidx = op_dw_pair_idx(16);
    const op_conv_desc *d = c->d;
    const int64_t W = d->w, HW = d->h * d->w, nb = op_cdiv64(HW, 16), OC = d->oc;
    const int64_t lead = op_dw3_flat_lead(W), tot = op_dw3_flat_buf(W, HW);
    const __mmask16 *c0 = c->fm0, *c2 = c->fm2;
    const __mmask16 tail = op_dw_lanes(nb * 16 - 16, HW);  /* store mask of the last block */
    for (int k = 0; k < 2; k++) {
        float *sk = s + k * tot;
        for (int64_t i = 0; i < lead; i++) sk[i] = 0.0f;
        for (int64_t i = lead + HW; i < tot; i++) sk[i] = 0.0f;
    }
    op_dw3_flat_copy(c, p0, s + lead, HW, nb, tail, BF16);
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        const float *q = s + ((p - p0) & 1) * tot + lead;  /* this plane (64-byte aligned) */
        if (p + 1 < p1) op_dw3_flat_copy(c, p + 1, s + ((p + 1 - p0) & 1) * tot + lead, HW, nb, tail, BF16);
        __m512 wv[9];
        op_dw3_wv(c, oc, wv);
        const __m512 bv = _mm512_set1_ps(c->bias ? c->bias[oc] : 0.0f);
        const int64_t yplane = (n * OC + oc) * HW;
        if (YB) {  /* bfloat16 output: two blocks per store (op_dw_vst2_bf16) */
            for (int64_t b = 0; b < nb; b += 2) {
                const __m512 va = op_dw3_flat_blk(q, b, W, wv, bv, c0, c2);
                const __m512 vb = b + 1 < nb ? op_dw3_flat_blk(q, b + 1, W, wv, bv, c0, c2) : _mm512_setzero_ps();
                op_dw_vst2_bf16(c->y, yplane + b * 16, op_dw_lanes32(b * 16, HW), va, vb, pidx, c->act);
            }
        } else {
            for (int64_t b = 0; b < nb; b++)
                op_dw_vst(c->y, yplane + b * 16, b == nb - 1 ? tail : (__mmask16)0xFFFF,
                          op_dw3_flat_blk(q, b, W, wv, bv, c0, c2), c->act, YB);
        }
        if (++oc == OC) { oc = 0; n++; }
    }
}

/* 3x3, stride 2, output rows of at most 7 columns (e.g. 14x14 -> 7x7), input rows that fit in 16
   padded columns, any padding: each plane is first copied (widened) into four zero-padded phase
   planes S[a][b], a the padded row parity, b the padded column parity, holding padded element
   (2i + a, 2j + b) at i P + j with the pitch P = 8. Output (oh, ow) then reads tap (ki, kj) at the
   grid index g = oh P + ow plus a constant: S[ki == 1][kj == 1][g + (ki == 2) P + (kj == 2)], so
   the nine tap loads of a 16-lane grid block (two output rows) are unmasked (the copy holds the
   padding), where the row kernel would use 7 of 16 lanes. Grid columns >= OW are not outputs: a
   block's valid lanes (op_dw_ctx.fm0) are compressed together before the store. The copy makes
   two phase rows (one aligned vector) per pair of input rows. Double-buffered as the flat kernel. */
enum { OP_DW3_S2_P = 8 };

/* floats of one phase plane: rows 0 .. OH rounded up to a pair, + slack for the last block's taps */
OP_INLINE int64_t op_dw3_s2_phase(int64_t OH)
{
    return op_roundup64(OH + 2, 2) * OP_DW3_S2_P + 32;
}
OP_INLINE int64_t op_dw3_s2_scratch(int64_t OH) { return 8 * op_dw3_s2_phase(OH); }

/* Plane p into the phase planes at q: rows i = 2 j, 2 j + 1 of S[a][0] and S[a][1] from the padded
   rows 4 j + a and 4 j + a + 2 (each one masked load of 16 padded columns, lanes m; rows in the
   padding load as zeros). */
OP_INLINE void op_dw3_s2_copy(const op_dw_ctx *c, int64_t p, float *OP_RESTRICT q, int64_t ps,
                              __mmask16 m, const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, n = p / OC, oc = p % OC, H = d->h, W = d->w, OH = d->oh;
    const int64_t ci = c->mult == 1 ? oc : oc / c->mult;
    const int64_t org = (n * d->c + ci) * H * W - d->pt * W - d->pl;  /* padded (0, 0) */
    /* lanes 0-7: even (odd) lanes of the first row, lanes 8-15: of the second */
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    for (int a = 0; a < 2; a++) {
        float *e = q + 2 * a * ps, *o = e + ps;
        for (int64_t i = 0; i < OH + 1 - a; i += 2) {
            const int64_t r = 2 * i + a;  /* padded rows r and r + 2 */
            const int64_t ih = r - d->pt;
            const __mmask16 ma = ih >= 0 && ih < H ? m : 0, mb = ih + 2 >= 0 && ih + 2 < H ? m : 0;
            /* masked-off lanes are not read, so out-of-plane addresses are fine */
            const __m512 ua = op_dw_vld(c->x, org + r * W, ma, BF16);
            const __m512 ub = op_dw_vld(c->x, org + (r + 2) * W, mb, BF16);
            _mm512_store_ps(e + i * OP_DW3_S2_P, _mm512_permutex2var_ps(ua, ie, ub));
            _mm512_store_ps(o + i * OP_DW3_S2_P, _mm512_permutex2var_ps(ua, io, ub));
        }
    }
}

OP_INLINE void op_dw3_s2(const op_dw_ctx *c, int64_t p0, int64_t p1, float *OP_RESTRICT s,
                         const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OH = d->oh, OW = d->ow, P = OP_DW3_S2_P, OC = d->oc;
    const int64_t nb = op_cdiv64(OH * P, 16), ps = op_dw3_s2_phase(OH), tot = 4 * ps;
    const __mmask16 m = op_dw_lanes(-d->pl, d->w);  /* input lanes of the 16 padded columns */
    /* the slack past the copied rows (read by lanes that are not outputs): zeros, not garbage, so
       no NaN / subnormal operands */
    for (int k = 0; k < 8; k++)  /* (ps and the start are multiples of 16) */
        for (int64_t i = op_roundup64(OH, 2) * P; i < ps; i += 16)
            _mm512_store_ps(s + k * ps + i, _mm512_setzero_ps());
    op_dw3_s2_copy(c, p0, s, ps, m, BF16);
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        const float *q = s + ((p - p0) & 1) * tot;
        if (p + 1 < p1) op_dw3_s2_copy(c, p + 1, s + ((p + 1 - p0) & 1) * tot, ps, m, BF16);
        const float *s00 = q, *s01 = q + ps, *s10 = q + 2 * ps, *s11 = q + 3 * ps;
        __m512 wv[9];
        op_dw3_wv(c, oc, wv);
        const __m512 bv = _mm512_set1_ps(c->bias ? c->bias[oc] : 0.0f);
        int64_t yo = (n * OC + oc) * OH * OW;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t g = b * 16;
            __m512 a0, a1, a2;
            a0 = _mm512_mul_ps(wv[0], _mm512_loadu_ps(s00 + g));
            a1 = _mm512_fmadd_ps(wv[1], _mm512_loadu_ps(s01 + g), bv);
            a2 = _mm512_mul_ps(wv[2], _mm512_loadu_ps(s00 + g + 1));
            a0 = _mm512_fmadd_ps(wv[3], _mm512_loadu_ps(s10 + g), a0);
            a1 = _mm512_fmadd_ps(wv[4], _mm512_loadu_ps(s11 + g), a1);
            a2 = _mm512_fmadd_ps(wv[5], _mm512_loadu_ps(s10 + g + 1), a2);
            a0 = _mm512_fmadd_ps(wv[6], _mm512_loadu_ps(s00 + g + P), a0);
            a1 = _mm512_fmadd_ps(wv[7], _mm512_loadu_ps(s01 + g + P), a1);
            a2 = _mm512_fmadd_ps(wv[8], _mm512_loadu_ps(s00 + g + P + 1), a2);
            const __mmask16 vm = (__mmask16)c->fm0[b];
            const int cnt = __builtin_popcount(vm);
            const __m512 v = _mm512_maskz_compress_ps(vm, _mm512_add_ps(_mm512_add_ps(a0, a1), a2));
            op_dw_vst(c->y, yo, (__mmask16)((1u << cnt) - 1u), v, c->act, YB);
            yo += cnt;
        }
        if (++oc == OC) { oc = 0; n++; }
    }
}

/* 3x3, stride 1, padding 1 left and right (OW = W), rows of at most 112 columns, any top padding:
   whole input rows in registers. A row is NV vectors (masked loads: lanes past W are zero); its
   left and right tap vectors come from the loaded ones by a lane shift (VALIGND) that brings in the
   neighbouring vector's edge lane, or a zero for the padding column, so each input row costs NV
   loads and 2 NV shifts however many output rows use it (no split-line tap loads, no padded copy).
   R output rows per block, R NV <= 8 accumulators. Rows in the top/bottom padding load as zeros. */
OP_INLINE void op_dw3_rowv_blk(const op_dw_ctx *c, const void *xs, int64_t plane, const __m512 *wv,
                               __m512 bv, int64_t yplane, int64_t oh0, const __mmask16 *lm,
                               const int R, const int NV, const int BF16, const int YB,
                               const __m512i *pidx)
{
    const op_conv_desc *d = c->d;
    const int64_t H = d->h, W = d->w;
    __m512 acc[4][8];  /* one accumulator per output vector (more rows beat shorter chains) */
    for (int i = 0; i < R; i++)
        for (int j = 0; j < NV; j++) acc[i][j] = bv;
    const __m512i z = _mm512_setzero_si512();
#pragma GCC unroll 6
    for (int r = 0; r < R + 2; r++) {
        const int64_t ih = oh0 - d->pt + r;
        const int ok = ih >= 0 && ih < H;
        __m512i v[8];
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++)
            v[j] = _mm512_castps_si512(op_dw_vld(xs, plane + (ok ? ih : 0) * W + 16 * j,
                                                 ok ? lm[j] : (__mmask16)0, BF16));
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) {
            /* columns 16 j - 1 .. and 16 j + 1 .. */
            const __m512 lft = _mm512_castsi512_ps(_mm512_alignr_epi32(v[j], j > 0 ? v[j - 1] : z, 15));
            const __m512 rgt = _mm512_castsi512_ps(_mm512_alignr_epi32(j + 1 < NV ? v[j + 1] : z, v[j], 1));
            const __m512 ctr = _mm512_castsi512_ps(v[j]);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                const int ki = r - i;
                if (ki < 0 || ki > 2) continue;
                acc[i][j] = _mm512_fmadd_ps(wv[ki * 3], lft, acc[i][j]);
                acc[i][j] = _mm512_fmadd_ps(wv[ki * 3 + 1], ctr, acc[i][j]);
                acc[i][j] = _mm512_fmadd_ps(wv[ki * 3 + 2], rgt, acc[i][j]);
            }
        }
    }
    if (YB && NV == 1 && R % 2 == 0 && pidx) {
        /* bfloat16 rows of <= 16 columns, pidx = op_dw_pair_idx(W): two rows per store */
        const __mmask32 m2 = (__mmask32)((((uint64_t)1) << (2 * W)) - 1u);
#pragma GCC unroll 4
        for (int i = 0; i < R; i += 2)
            op_dw_vst2_bf16(c->y, yplane + (oh0 + i) * W, m2, acc[i][0], acc[i + 1][0], *pidx, c->act);
        return;
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int j = 0; j < NV; j++) {
            op_dw_vst(c->y, yplane + (oh0 + i) * W + 16 * j, lm[j], acc[i][j], c->act, YB);
        }
}

/* The per-plane set-up of the whole-row 3x3 kernels (op_dw3_rowv, op_dw3_eo): the input plane of
   output plane (n, oc) at element offset *plane (planes of hw elements), the output plane at *yplane
   (planes of ohw), the nine taps and the bias broadcast to vectors. */
OP_INLINE void op_dw3_row_setup(const op_dw_ctx *c, int64_t n, int64_t oc, int64_t hw, int64_t ohw,
                                int64_t *plane, int64_t *yplane, __m512 wv[9], __m512 *bv)
{
    const int64_t ci = c->mult == 1 ? oc : oc / c->mult;
    *plane = (n * c->d->c + ci) * hw;
    *yplane = (n * c->d->oc + oc) * ohw;
    op_dw3_wv(c, oc, wv);
    *bv = _mm512_set1_ps(c->bias ? c->bias[oc] : 0.0f);
}

OP_INLINE void op_dw3_rowv(const op_dw_ctx *c, int64_t p0, int64_t p1, const int NV, const int BF16,
                           const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, W = d->w, HW = d->h * W;
    const int R = NV <= 2 ? 4 : NV <= 4 ? 2 : 1;  /* R NV <= 8 accumulators */
    __mmask16 lm[8];
    for (int j = 0; j < NV; j++) lm[j] = op_dw_lanes(16 * j, W);
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        int64_t plane, yplane;
        __m512 wv[9], bv;
        op_dw3_row_setup(c, n, oc, HW, OH * W, &plane, &yplane, wv, &bv);
        int64_t oh0 = 0;
        for (; oh0 + R <= OH; oh0 += R)
            op_dw3_rowv_blk(c, c->x, plane, wv, bv, yplane, oh0, lm, R, NV, BF16, YB, NULL);
        for (; oh0 < OH; oh0++)  /* (R > 1: the last rows one by one) */
            op_dw3_rowv_blk(c, c->x, plane, wv, bv, yplane, oh0, lm, 1, NV, BF16, YB, NULL);
        if (++oc == OC) { oc = 0; n++; }
    }
}

/* op_dw3_rowv for bfloat16 input on rows of 9 to 16 columns (row-register selection, op_conv_desc.dw_rows):
   each plane is first widened once into the thread's float32 scratch (a 16-bit shift per element,
   where op_dw3_rowv widens each row vector with a cross-lane shuffle at every use), then computed
   as float32 whole rows. (The output may still be bfloat16: YB.) */
/* plane p (= n * OC + oc) widened into s */
OP_INLINE void op_dw3_widen(const op_dw_ctx *c, int64_t p, float *OP_RESTRICT s, int64_t HW)
{
    const int64_t OC = c->d->oc, oc = p % OC, ci = c->mult == 1 ? oc : oc / c->mult;
    const uint16_t *xp = (const uint16_t *)c->x + ((p / OC) * c->d->c + ci) * HW;
    const int64_t nb = HW / 16;
    const __mmask16 tail = (__mmask16)((1u << (HW % 16)) - 1u);
    for (int64_t b = 0; b < nb; b++) _mm512_store_ps(s + 16 * b, op_dw_vld(xp, 16 * b, 0xFFFF, 1));
    if (tail) _mm512_store_ps(s + 16 * nb, op_dw_vld(xp, 16 * nb, tail, 1));
}

OP_INLINE void op_dw3_rowv_w(const op_dw_ctx *c, int64_t p0, int64_t p1, float *OP_RESTRICT s,
                             const int NV, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, W = d->w, HW = d->h * W, tot = op_roundup64(HW, 16) + 16;
    const int R = NV <= 2 ? 4 : NV <= 4 ? 2 : 1;
    const __m512i pidx = op_dw_pair_idx(NV == 1 ? (int)W : 16);  /* (bfloat16 output, NV 1) */
    __mmask16 lm[8];
    for (int j = 0; j < NV; j++) lm[j] = op_dw_lanes(16 * j, W);
    /* double-buffered as the flat kernel: the next plane is widened before this one is computed,
       so the row loads (which straddle the widening's stores) never wait for those stores */
    op_dw3_widen(c, p0, s, HW);
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        const float *q = s + ((p - p0) & 1) * tot;
        if (p + 1 < p1) op_dw3_widen(c, p + 1, s + ((p + 1 - p0) & 1) * tot, HW);
        int64_t plane, yplane;
        __m512 wv[9], bv;
        op_dw3_row_setup(c, n, oc, HW, OH * W, &plane, &yplane, wv, &bv);
        int64_t oh0 = 0;
        for (; oh0 + R <= OH; oh0 += R) op_dw3_rowv_blk(c, q, 0, wv, bv, yplane, oh0, lm, R, NV, 0, YB, &pidx);
        for (; oh0 + 2 <= OH; oh0 += 2) op_dw3_rowv_blk(c, q, 0, wv, bv, yplane, oh0, lm, 2, NV, 0, YB, &pidx);
        if (oh0 < OH) op_dw3_rowv_blk(c, q, 0, wv, bv, yplane, oh0, lm, 1, NV, 0, YB, &pidx);
        if (++oc == OC) { oc = 0; n++; }
    }
}
static OP_NOINLINE void op_dw3_rowv_w1(const op_dw_ctx *c, int64_t p0, int64_t p1, float *s) { op_dw3_rowv_w(c, p0, p1, s, 1, 0); }
static OP_NOINLINE void op_dw3_rowv_w1_yb(const op_dw_ctx *c, int64_t p0, int64_t p1, float *s) { op_dw3_rowv_w(c, p0, p1, s, 1, 1); }

/* 3x3, stride 1, padding 1 left and right (OW = W), bfloat16 input: even / odd columns. One
   512-bit load holds 32 bfloat16 columns; its even columns widen to float32 by a 16-bit shift of
   each 32-bit lane and its odd columns by masking the low half (two integer ops, no shuffle), so
   the 32 columns are computed as two vectors, the even outputs (taps: odd columns j - 1, even j,
   odd j) and the odd outputs (even j, odd j, even j + 1). The shifted taps come from two more
   loads at column offsets -2 and +2 (their odd / even halves), so each input row costs 3 loads and
   4 integer ops per 32 columns and no shuffle (the widening of the whole-row kernel op_dw3_rowv is
   a cross-lane shuffle per 16 columns, plus 2 lane shifts: on Zen 4 those share the FMA pipes).
   A bfloat16 output packs the two rounded vectors back into 32 columns with a shift and an OR;
   a float32 output interleaves them (two permutes). R output rows per block from R + 2 input rows;
   rows in the top / bottom padding load as zeros. */

OP_INLINE __m512 op_dw_act_v(__m512 v, int act)
{
    if (act == OP_ACT_RELU) return _mm512_max_ps(_mm512_setzero_ps(), v);  /* as op_dw_vst */
    if (act != OP_ACT_NONE) return (__m512)op_v16_act((op_v16f)v, act);
    return v;
}

OP_INLINE void op_dw3_eo_blk(const op_dw_ctx *c, int64_t plane, const __m512 *wv, __m512 bv,
                             int64_t yplane, int64_t oh0, const int R, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t H = d->h, W = d->w;
    const uint16_t *X = (const uint16_t *)c->x;
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    const __m512i ilo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i ihi = _mm512_add_epi32(ilo, _mm512_set1_epi32(8));
    for (int64_t cb = 0; cb < W; cb += 32) {
        const __mmask32 m0 = op_dw_lanes32(cb, W), mm = op_dw_lanes32(cb - 2, W), mp = op_dw_lanes32(cb + 2, W);
        __m512 ae[4], ao[4];
        for (int i = 0; i < R; i++) ae[i] = ao[i] = bv;
#pragma GCC unroll 6
        for (int r = 0; r < R + 2; r++) {
            const int64_t ih = oh0 - d->pt + r;
            const int ok = ih >= 0 && ih < H;
            const uint16_t *xr = X + plane + (ok ? ih : 0) * W + cb;
            const __m512i v = _mm512_maskz_loadu_epi16(ok ? m0 : 0, xr);
            const __m512i vm = _mm512_maskz_loadu_epi16(ok ? mm : 0, xr - 2);
            const __m512i vp = _mm512_maskz_loadu_epi16(ok ? mp : 0, xr + 2);
            const __m512 e = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
            const __m512 o = _mm512_castsi512_ps(_mm512_and_si512(v, hi));
            const __m512 om = _mm512_castsi512_ps(_mm512_and_si512(vm, hi));
            const __m512 ep = _mm512_castsi512_ps(_mm512_slli_epi32(vp, 16));
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                const int ki = r - i;
                if (ki < 0 || ki > 2) continue;
                ae[i] = _mm512_fmadd_ps(wv[ki * 3], om, ae[i]);
                ae[i] = _mm512_fmadd_ps(wv[ki * 3 + 1], e, ae[i]);
                ae[i] = _mm512_fmadd_ps(wv[ki * 3 + 2], o, ae[i]);
                ao[i] = _mm512_fmadd_ps(wv[ki * 3], e, ao[i]);
                ao[i] = _mm512_fmadd_ps(wv[ki * 3 + 1], o, ao[i]);
                ao[i] = _mm512_fmadd_ps(wv[ki * 3 + 2], ep, ao[i]);
            }
        }
        for (int i = 0; i < R; i++) {
            const __m512 ve = op_dw_act_v(ae[i], c->act), vo = op_dw_act_v(ao[i], c->act);
            const int64_t yo = yplane + (oh0 + i) * W + cb;
            if (YB) {
                const __m512i b = _mm512_or_si512(op_dw_bf16_bits(ve), _mm512_slli_epi32(op_dw_bf16_bits(vo), 16));
                _mm512_mask_storeu_epi16((uint16_t *)c->y + yo, m0, b);
            } else {
                float *y = (float *)c->y + yo;
                _mm512_mask_storeu_ps(y, (__mmask16)m0, _mm512_permutex2var_ps(ve, ilo, vo));
                _mm512_mask_storeu_ps(y + 16, (__mmask16)(m0 >> 16), _mm512_permutex2var_ps(ve, ihi, vo));
            }
        }
    }
}

OP_INLINE void op_dw3_eo(const op_dw_ctx *c, int64_t p0, int64_t p1, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, W = d->w, HW = d->h * W;
    enum { R = 4 };
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        int64_t plane, yplane;
        __m512 wv[9], bv;
        op_dw3_row_setup(c, n, oc, HW, OH * W, &plane, &yplane, wv, &bv);
        int64_t oh0 = 0;
        for (; oh0 + R <= OH; oh0 += R) op_dw3_eo_blk(c, plane, wv, bv, yplane, oh0, R, YB);
        for (; oh0 < OH; oh0++) op_dw3_eo_blk(c, plane, wv, bv, yplane, oh0, 1, YB);
        if (++oc == OC) { oc = 0; n++; }
    }
}
static OP_NOINLINE void op_dw3_eo_bf16(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_eo(c, p0, p1, 0); }
static OP_NOINLINE void op_dw3_eo_bf16_yb(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_eo(c, p0, p1, 1); }

/* 3x3, stride 1, padding 1 left and right (OW = W), rows of at most 8 columns (e.g. 7x7), any top
   padding (row-register selection, op_conv_desc.dw_rows; per microarchitecture, registry.DW_ROW_KERNELS): one
   256-bit vector per row, 7 of 8 lanes busy on a 7x7 plane, where the 16-lane flat kernel fills 49
   of 64 lanes and makes nine mostly line-splitting loads per output vector after a copy of the
   plane. Each input row is one masked load straight from the input (bfloat16: widened by a shift),
   its left / right tap vectors two lane shifts (VALIGND) bringing in the zero padding, feeding the
   up to three output rows of the block that read it. A block is all the output rows of the plane
   up to 8 (R accumulators; with R <= 4 two per row, for shorter FMA chains). Rows in the top /
   bottom padding are skipped. bfloat16 output: two rows per store (as op_dw_vst2_bf16). */
OP_INLINE __m256 op_dw_vld8(const void *x, int64_t off, __mmask8 m, const int BF16)
{
    if (BF16) {
        const __m128i h = _mm_maskz_loadu_epi16(m, (const uint16_t *)x + off);
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_maskz_loadu_ps(m, (const float *)x + off);
}

OP_INLINE __m256 op_dw_act8(__m256 v, int act)
{
    if (act == OP_ACT_RELU) return _mm256_max_ps(_mm256_setzero_ps(), v);  /* as op_dw_vst */
    if (act != OP_ACT_NONE)
        return _mm512_castps512_ps256((__m512)op_v16_act((op_v16f)_mm512_zextps256_ps512(v), act));
    return v;
}

/* op_dw_bf16_hi on 8 lanes, NaN lanes the quiet NaN with their sign (in the high halves) */
OP_INLINE __m256i op_dw_bf16_hi8(__m256 v)
{
    const __m256i u = _mm256_castps_si256(v);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb);
    const __mmask8 nan = _mm256_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    if (OP_LIKELY(nan == 0)) return r;
    return _mm256_mask_mov_epi32(r, nan, _mm256_ternarylogic_epi32(u, _mm256_set1_epi32((int)0x80000000u),
                                                                    _mm256_set1_epi32(0x7FC00000), 0xEA));
}

OP_INLINE void op_dw3_r8_blk(const op_dw_ctx *c, int64_t plane, const __m256 *wv, __m256 bv,
                             int64_t yplane, int64_t oh0, __mmask8 lm, __m256i pidx, const int R,
                             const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t H = d->h, W = d->w;
    const int two = R <= 4;
    __m256 acc[8], acd[8];
    for (int i = 0; i < R; i++) {
        acc[i] = bv;
        acd[i] = _mm256_setzero_ps();
    }
    const __m256i z = _mm256_setzero_si256();
#pragma GCC unroll 10
    for (int r = 0; r < R + 2; r++) {
        const int64_t ih = oh0 - d->pt + r;
        if (ih < 0 || ih >= H) continue;
        const __m256i v = _mm256_castps_si256(op_dw_vld8(c->x, plane + ih * W, lm, BF16));
        const __m256 lft = _mm256_castsi256_ps(_mm256_alignr_epi32(v, z, 7));
        const __m256 rgt = _mm256_castsi256_ps(_mm256_alignr_epi32(z, v, 1));
        const __m256 ctr = _mm256_castsi256_ps(v);
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const int ki = r - i;
            if (ki < 0 || ki > 2) continue;
            if (two && ki == 1) {
                acd[i] = _mm256_fmadd_ps(wv[3], lft, acd[i]);
                acd[i] = _mm256_fmadd_ps(wv[4], ctr, acd[i]);
                acd[i] = _mm256_fmadd_ps(wv[5], rgt, acd[i]);
            } else {
                acc[i] = _mm256_fmadd_ps(wv[ki * 3], lft, acc[i]);
                acc[i] = _mm256_fmadd_ps(wv[ki * 3 + 1], ctr, acc[i]);
                acc[i] = _mm256_fmadd_ps(wv[ki * 3 + 2], rgt, acc[i]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) acc[i] = op_dw_act8(two ? _mm256_add_ps(acc[i], acd[i]) : acc[i], c->act);
    if (YB) {
        const __mmask16 m2 = (__mmask16)((1u << (2 * W)) - 1u), m1 = (__mmask16)((1u << W) - 1u);
#pragma GCC unroll 4
        for (int i = 0; i < R; i += 2) {
            const __m256i ra = op_dw_bf16_hi8(acc[i]);
            const __m256i rb = i + 1 < R ? op_dw_bf16_hi8(acc[i + 1]) : ra;
            _mm256_mask_storeu_epi16((uint16_t *)c->y + yplane + (oh0 + i) * W, i + 1 < R ? m2 : m1,
                                     _mm256_permutex2var_epi16(ra, pidx, rb));
        }
    } else {
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) _mm256_mask_storeu_ps((float *)c->y + yplane + (oh0 + i) * W, lm, acc[i]);
    }
}

OP_INLINE void op_dw3_r8(const op_dw_ctx *c, int64_t p0, int64_t p1, const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, W = d->w, HW = d->h * W;
    const __mmask8 lm = (__mmask8)((1u << W) - 1u);
    const __m256i pidx = op_dw_pair_idx256(W);  /* two rows' bfloat16 results in one store */
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t ci = c->mult == 1 ? oc : oc / c->mult;
        const int64_t plane = (n * d->c + ci) * HW, yplane = (n * OC + oc) * OH * W;
        __m256 wv[9];
        op_dw3_wv256(c, oc, wv);
        const __m256 bv = _mm256_set1_ps(c->bias ? c->bias[oc] : 0.0f);
        int64_t oh0 = 0;
        for (; oh0 + 8 <= OH; oh0 += 8) op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 8, BF16, YB);
        switch (OH - oh0) {  /* the rest in one block */
        case 7: op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 7, BF16, YB); break;
        case 6: op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 6, BF16, YB); break;
        case 5: op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 5, BF16, YB); break;
        case 4: op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 4, BF16, YB); break;
        case 3: op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 3, BF16, YB); break;
        case 2: op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 2, BF16, YB); break;
        case 1: op_dw3_r8_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 1, BF16, YB); break;
        default: break;
        }
        if (++oc == OC) { oc = 0; n++; }
    }
}
static OP_NOINLINE void op_dw3_r8_f32(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_r8(c, p0, p1, 0, 0); }
static OP_NOINLINE void op_dw3_r8_bf16(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_r8(c, p0, p1, 1, 0); }
static OP_NOINLINE void op_dw3_r8_bf16_yb(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_r8(c, p0, p1, 1, 1); }
static void (*const op_dw3_r8_kernels[3])(const op_dw_ctx *, int64_t, int64_t) = {
    op_dw3_r8_f32, op_dw3_r8_bf16, op_dw3_r8_bf16_yb};

/* 3x3, stride 2, padding 1 on the left, input rows of at most 16 columns and output rows of at most
   8 (e.g. 14x14 -> 7x7), any top padding (row-register selection, op_conv_desc.dw_rows, per microarchitecture):
   as op_dw3_r8, one 256-bit vector per output row. An input row is one masked load of 16 columns
   whose even columns are the taps of kernel column 1 and odd columns those of kernel column 2
   (float32: two lane permutes; bfloat16: one 256-bit load widened by integer ops alone, even columns
   by a 16-bit shift, odd ones by clearing the low half), and kernel column 0 is the odd columns
   shifted up one lane (VALIGND) with the padding zero in lane 0. Each input row feeds the one or
   two output rows that read it; the phase-plane kernel copies each plane into four phase planes
   first and keeps 7 of 8 grid columns. */
OP_INLINE void op_dw3_s2n_blk(const op_dw_ctx *c, int64_t plane, const __m256 *wv, __m256 bv,
                              int64_t yplane, int64_t oh0, __mmask16 lm, __m256i pidx, const int R,
                              const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t H = d->h, W = d->w, OW = d->ow;
    const __mmask8 sm = (__mmask8)((1u << OW) - 1u);
    __m256 acc[8], acd[8];
    for (int i = 0; i < R; i++) {
        acc[i] = bv;
        acd[i] = _mm256_setzero_ps();
    }
    const __m256i z = _mm256_setzero_si256();
    const __m512i ie = _mm512_set_epi32(14, 12, 10, 8, 6, 4, 2, 0, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
#pragma GCC unroll 17
    for (int r = 0; r < 2 * R + 1; r++) {
        const int64_t ih = 2 * oh0 - d->pt + r;
        if (ih < 0 || ih >= H) continue;
        __m256 ev, od;
        if (BF16) {
            const __m256i u = _mm256_maskz_loadu_epi16(lm, (const uint16_t *)c->x + plane + ih * W);
            ev = _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
            od = _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xFFFF0000u)));
        } else {
            const __m512 v = _mm512_maskz_loadu_ps(lm, (const float *)c->x + plane + ih * W);
            ev = _mm512_castps512_ps256(_mm512_permutexvar_ps(ie, v));
            od = _mm512_castps512_ps256(_mm512_permutexvar_ps(io, v));
        }
        const __m256 lft = _mm256_castsi256_ps(_mm256_alignr_epi32(_mm256_castps_si256(od), z, 7));
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) {
            const int ki = r - 2 * i;
            if (ki < 0 || ki > 2) continue;
            if (ki == 1) {
                acd[i] = _mm256_fmadd_ps(wv[3], lft, acd[i]);
                acd[i] = _mm256_fmadd_ps(wv[4], ev, acd[i]);
                acd[i] = _mm256_fmadd_ps(wv[5], od, acd[i]);
            } else {
                acc[i] = _mm256_fmadd_ps(wv[ki * 3], lft, acc[i]);
                acc[i] = _mm256_fmadd_ps(wv[ki * 3 + 1], ev, acc[i]);
                acc[i] = _mm256_fmadd_ps(wv[ki * 3 + 2], od, acc[i]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < R; i++) acc[i] = op_dw_act8(_mm256_add_ps(acc[i], acd[i]), c->act);
    if (YB) {
        const __mmask16 m2 = (__mmask16)((1u << (2 * OW)) - 1u), m1 = (__mmask16)((1u << OW) - 1u);
#pragma GCC unroll 4
        for (int i = 0; i < R; i += 2) {
            const __m256i ra = op_dw_bf16_hi8(acc[i]);
            const __m256i rb = i + 1 < R ? op_dw_bf16_hi8(acc[i + 1]) : ra;
            _mm256_mask_storeu_epi16((uint16_t *)c->y + yplane + (oh0 + i) * OW, i + 1 < R ? m2 : m1,
                                     _mm256_permutex2var_epi16(ra, pidx, rb));
        }
    } else {
#pragma GCC unroll 8
        for (int i = 0; i < R; i++) _mm256_mask_storeu_ps((float *)c->y + yplane + (oh0 + i) * OW, sm, acc[i]);
    }
}

OP_INLINE void op_dw3_s2n(const op_dw_ctx *c, int64_t p0, int64_t p1, const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, OW = d->ow, W = d->w, HW = d->h * W;
    const __mmask16 lm = (__mmask16)((1u << W) - 1u);
    const __m256i pidx = op_dw_pair_idx256(OW);  /* two rows' bfloat16 results in one store */
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t ci = c->mult == 1 ? oc : oc / c->mult;
        const int64_t plane = (n * d->c + ci) * HW, yplane = (n * OC + oc) * OH * OW;
        __m256 wv[9];
        op_dw3_wv256(c, oc, wv);
        const __m256 bv = _mm256_set1_ps(c->bias ? c->bias[oc] : 0.0f);
        int64_t oh0 = 0;
        for (; oh0 + 4 <= OH; oh0 += 4) op_dw3_s2n_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 4, BF16, YB);
        switch (OH - oh0) {  /* the rest in one block */
        case 3: op_dw3_s2n_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 3, BF16, YB); break;
        case 2: op_dw3_s2n_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 2, BF16, YB); break;
        case 1: op_dw3_s2n_blk(c, plane, wv, bv, yplane, oh0, lm, pidx, 1, BF16, YB); break;
        default: break;
        }
        if (++oc == OC) { oc = 0; n++; }
    }
}
static OP_NOINLINE void op_dw3_s2n_f32(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s2n(c, p0, p1, 0, 0); }
static OP_NOINLINE void op_dw3_s2n_bf16(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s2n(c, p0, p1, 1, 0); }
static OP_NOINLINE void op_dw3_s2n_bf16_yb(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s2n(c, p0, p1, 1, 1); }
static void (*const op_dw3_s2n_kernels[3])(const op_dw_ctx *, int64_t, int64_t) = {
    op_dw3_s2n_f32, op_dw3_s2n_bf16, op_dw3_s2n_bf16_yb};

/* 3x3, stride 1, padding 1 left and right (OW = W), any padding along H: rows straight from the
   input, R output rows per block (R = 8: 4-8% faster than 4 or 6 on Zen 4, 2026-11-30) and one
   16-column vector at a time, so only the
   R accumulators, the nine weights and three tap vectors are live (no spills at any width). Each
   input row of the block costs three loads (columns j - 1, j, j + 1: unaligned, masked only at the
   left / right edge, the masks fixed per column vector), each feeding up to three output rows: 9 FMAs
   and 3 (R + 2) / R loads per output vector, no shuffle (on Zen 4 the lane shifts of op_dw3_rowv share
   the FMA pipes). Rows in the top / bottom padding read a static zero row instead (no branch, no
   mask). */
enum { OP_DW3_ZROW = 1024 };  /* floats of the zero row: rows up to OP_DW3_ZROW - 128 columns */
static const float op_dw3_zrow[OP_DW3_ZROW] __attribute__((aligned(64)));

OP_INLINE void op_dw3_s1r_col(const op_dw_ctx *c, const char *const *rp, const __m512 *wv, __m512 bv,
                              int64_t yrow, int64_t oh0, int64_t j0, __mmask16 ml, __mmask16 mc,
                              __mmask16 mr, const int R, const int A2, const int ACT, const int BF16,
                              const int YB)
{
    const int64_t W = c->d->w;
    const int esz = BF16 ? 2 : 4;
    {
        __m512 acc[8], acd[8];
        for (int i = 0; i < R; i++) {
            acc[i] = bv;
            if (A2) acd[i] = _mm512_setzero_ps();
        }
#pragma GCC unroll 10
        for (int t = 0; t < R + 2; t++) {
            const char *q = rp[t] + j0 * esz;
            const __m512 a = op_dw_vld(q - esz, 0, ml, BF16);
            const __m512 b = op_dw_vld(q, 0, mc, BF16);
            const __m512 e = op_dw_vld(q + esz, 0, mr, BF16);
#pragma GCC unroll 8
            for (int i = 0; i < R; i++) {
                const int ki = t - i;
                if (ki < 0 || ki > 2) continue;
                if (A2 && ki == 1) {
                    acd[i] = _mm512_fmadd_ps(wv[ki * 3], a, acd[i]);
                    acd[i] = _mm512_fmadd_ps(wv[ki * 3 + 1], b, acd[i]);
                    acd[i] = _mm512_fmadd_ps(wv[ki * 3 + 2], e, acd[i]);
                } else {
                    acc[i] = _mm512_fmadd_ps(wv[ki * 3], a, acc[i]);
                    acc[i] = _mm512_fmadd_ps(wv[ki * 3 + 1], b, acc[i]);
                    acc[i] = _mm512_fmadd_ps(wv[ki * 3 + 2], e, acc[i]);
                }
            }
        }
#pragma GCC unroll 8
        for (int i = 0; i < R; i++)
            op_dw_vst(c->y, yrow + (oh0 + i) * W + j0, mc, A2 ? _mm512_add_ps(acc[i], acd[i]) : acc[i],
                      ACT ? c->act : OP_ACT_NONE, YB);
    }
}

OP_INLINE void op_dw3_s1r_blk(const op_dw_ctx *c, const void *xs, int64_t plane, const __m512 *wv,
                              __m512 bv, int64_t yrow, int64_t oh0, const int R, const int A2,
                              const int ACT, const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t H = d->h, W = d->w;
    const int esz = BF16 ? 2 : 4;
    const char *rp[10];
    for (int t = 0; t < R + 2; t++) {
        const int64_t ih = oh0 - d->pt + t;
        rp[t] = ih >= 0 && ih < H ? (const char *)xs + (plane + ih * W) * esz
                                  : (const char *)op_dw3_zrow + 64;
    }
    for (int64_t j0 = 0; j0 < W; j0 += 16) {
        const __mmask16 mc = op_dw_lanes(j0, W), ml = op_dw_lanes(j0 - 1, W), mr = op_dw_lanes(j0 + 1, W);
        op_dw3_s1r_col(c, rp, wv, bv, yrow, oh0, j0, ml, mc, mr, R, A2, ACT, BF16, YB);
    }
}

OP_INLINE void op_dw3_s1r(const op_dw_ctx *c, int64_t p0, int64_t p1, const int R, const int A2,
                          const int ACT, const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, W = d->w, HW = d->h * W;
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        int64_t plane, yplane;
        __m512 wv[9], bv;
        op_dw3_row_setup(c, n, oc, HW, OH * W, &plane, &yplane, wv, &bv);
        int64_t oh0 = 0;
        for (; oh0 + R <= OH; oh0 += R) op_dw3_s1r_blk(c, c->x, plane, wv, bv, yplane, oh0, R, A2, ACT, BF16, YB);
        for (; oh0 + 2 <= OH; oh0 += 2) op_dw3_s1r_blk(c, c->x, plane, wv, bv, yplane, oh0, 2, A2, ACT, BF16, YB);
        if (oh0 < OH) op_dw3_s1r_blk(c, c->x, plane, wv, bv, yplane, oh0, 1, A2, ACT, BF16, YB);
        if (++oc == OC) { oc = 0; n++; }
    }
}

/* op_dw3_s1r for bfloat16 input (dw_rows bit 2; zen4 only, registry.DW_ROW_KERNELS "s1_bfloat16_widen"): each
   plane is first widened once into the thread's float32 scratch (double-buffered, as op_dw3_rowv_w),
   then computed as float32 rows; the output may be float32 or bfloat16 (YB). */
OP_INLINE void op_dw3_s1r_w(const op_dw_ctx *c, int64_t p0, int64_t p1, float *OP_RESTRICT s, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, W = d->w, HW = d->h * W, tot = op_roundup64(HW, 16) + 16;
    enum { R = 8 };
    op_dw3_widen(c, p0, s, HW);
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        const float *q = s + ((p - p0) & 1) * tot;
        if (p + 1 < p1) op_dw3_widen(c, p + 1, s + ((p + 1 - p0) & 1) * tot, HW);
        int64_t plane, yplane;
        __m512 wv[9], bv;
        op_dw3_row_setup(c, n, oc, HW, OH * W, &plane, &yplane, wv, &bv);
        int64_t oh0 = 0;
        for (; oh0 + R <= OH; oh0 += R) op_dw3_s1r_blk(c, q, 0, wv, bv, yplane, oh0, R, 0, 1, 0, YB);
        for (; oh0 + 2 <= OH; oh0 += 2) op_dw3_s1r_blk(c, q, 0, wv, bv, yplane, oh0, 2, 0, 1, 0, YB);
        if (oh0 < OH) op_dw3_s1r_blk(c, q, 0, wv, bv, yplane, oh0, 1, 0, 1, 0, YB);
        if (++oc == OC) { oc = 0; n++; }
    }
}
static OP_NOINLINE void op_dw3_s1r_w_bf16(const op_dw_ctx *c, int64_t p0, int64_t p1, float *s) { op_dw3_s1r_w(c, p0, p1, s, 0); }
static OP_NOINLINE void op_dw3_s1r_w_bf16_yb(const op_dw_ctx *c, int64_t p0, int64_t p1, float *s) { op_dw3_s1r_w(c, p0, p1, s, 1); }
/* float32 only (bfloat16 input: the even / odd, flat and widened whole-row kernels measured faster) */
static OP_NOINLINE void op_dw3_s1r_f32(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s1r(c, p0, p1, 8, 0, 1, 0, 0); }
static OP_NOINLINE void op_dw3_s1r_f32_noact(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s1r(c, p0, p1, 8, 0, 0, 0, 0); }

/* bfloat16 input, 3x3, stride 2, padding 1 top / left (any size): as op_dw3_s1r, R output rows per
   block from 2 R + 1 input rows, one 16-output vector at a time. The 32 input columns p .. p + 31
   (p = 2 ow0 - 1) are one load widened by integer ops alone (even columns by a 16-bit shift, odd ones
   by clearing the low half), kernel column 2 from a second load at p + 2. (Float32 input: op_dw3_s2w.) */
OP_INLINE void op_dw3_s2r_col(const op_dw_ctx *c, const char *const *rp, const __m512 *wv, __m512 bv,
                              int64_t yrow, int64_t oh0, int64_t j0, int64_t p, __mmask16 mc,
                              __mmask32 k0, __mmask32 k2, const int R, const int NA, const int ACT,
                              const int YB)
{
    const int64_t OW = c->d->ow;
    const __m512i hi = _mm512_set1_epi32((int)0xFFFF0000u);
    __m512 acc[6][3];
    for (int i = 0; i < R; i++) {
        acc[i][0] = bv;
        for (int k = 1; k < NA; k++) acc[i][k] = _mm512_setzero_ps();
    }
#pragma GCC unroll 13
    for (int t = 0; t < 2 * R + 1; t++) {
        const uint16_t *q = (const uint16_t *)rp[t] + p;
        const __m512i u = _mm512_maskz_loadu_epi16(k0, q);
        const __m512i u2 = _mm512_maskz_loadu_epi16(k2, q + 2);
        const __m512 v0 = _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
        const __m512 v1 = _mm512_castsi512_ps(_mm512_and_si512(u, hi));
        const __m512 v2 = _mm512_castsi512_ps(_mm512_slli_epi32(u2, 16));
#pragma GCC unroll 6
        for (int i = 0; i < R; i++) {
            const int ki = t - 2 * i;
            if (ki < 0 || ki > 2) continue;
            const int k = ki < NA ? ki : NA - 1;
            acc[i][k] = _mm512_fmadd_ps(wv[ki * 3], v0, acc[i][k]);
            acc[i][k] = _mm512_fmadd_ps(wv[ki * 3 + 1], v1, acc[i][k]);
            acc[i][k] = _mm512_fmadd_ps(wv[ki * 3 + 2], v2, acc[i][k]);
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < R; i++) {
        __m512 v = acc[i][0];
        for (int k = 1; k < NA; k++) v = _mm512_add_ps(v, acc[i][k]);
        op_dw_vst(c->y, yrow + (oh0 + i) * OW + j0, mc, v, ACT ? c->act : OP_ACT_NONE, YB);
    }
}

OP_INLINE void op_dw3_s2r_blk(const op_dw_ctx *c, int64_t plane, const __m512 *wv, __m512 bv,
                              int64_t yrow, int64_t oh0, const int R, const int NA, const int ACT,
                              const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t H = d->h, W = d->w, OW = d->ow;
    const char *rp[2 * 6 + 1];
    for (int t = 0; t < 2 * R + 1; t++) {
        const int64_t ih = oh0 * 2 - d->pt + t;
        rp[t] = ih >= 0 && ih < H ? (const char *)((const uint16_t *)c->x + plane + ih * W)
                                  : (const char *)op_dw3_zrow + 64;
    }
    for (int64_t j0 = 0; j0 < OW; j0 += 16) {
        const int64_t p = 2 * j0 - d->pl;
        op_dw3_s2r_col(c, rp, wv, bv, yrow, oh0, j0, p, op_dw_lanes(j0, OW), op_dw_lanes32(p, W),
                       op_dw_lanes32(p + 2, W), R, NA, ACT, YB);
    }
}

OP_INLINE void op_dw3_s2r(const op_dw_ctx *c, int64_t p0, int64_t p1, const int R, const int NA,
                          const int ACT, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, HW = d->h * d->w;
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        int64_t plane, yplane;
        __m512 wv[9], bv;
        op_dw3_row_setup(c, n, oc, HW, OH * d->ow, &plane, &yplane, wv, &bv);
        int64_t oh0 = 0;
        for (; oh0 + R <= OH; oh0 += R) op_dw3_s2r_blk(c, plane, wv, bv, yplane, oh0, R, NA, ACT, YB);
        for (; oh0 + 2 <= OH; oh0 += 2) op_dw3_s2r_blk(c, plane, wv, bv, yplane, oh0, 2, NA, ACT, YB);
        if (oh0 < OH) op_dw3_s2r_blk(c, plane, wv, bv, yplane, oh0, 1, NA, ACT, YB);
        if (++oc == OC) { oc = 0; n++; }
    }
}
/* float32, 3x3, stride 2 (left padding up to 15, rows of more than 16 columns): one output row at a
   time from its three input rows, read whole and in order, up to four 16-output blocks of the row held
   in registers (a chunk of up to 64 outputs; wider rows take several chunks, each over all rows).
   Each block's taps: two loads of the 32 columns from p + 1 (p = 2 ow0 - pl: column 2 ow0 for
   pl = 1), whose even / odd lanes (two permutes) are kernel columns 1 / 2, and the odd lanes shifted
   up by one with column p entering lane 0 (one VALIGND of a broadcast) for kernel column 0.
   Zen 4, 2026-12-01, kernel-only, 1 thread, MobileNet-v2 112x112 -> 56x56 C96, GFLOP/s:
   - the former float32 op_dw3_s2r (13 input rows per 16-column block, loads from column p): 39-41
     at every input alignment;
   - that kernel with the loads from column 2 ow0: 45 on 32-byte rows;
   - this kernel: 50-52 on 32-byte rows, 46-48 on rows at 16 mod 32 bytes (op_dw3_s2w_shift).
   Tried and slower: two or three output rows per pass from 5 / 7 input rows (fewer loads, but GCC
   12 spilled the 8-12 accumulators), accumulators per kernel column (0.9x), the last half block in
   256-bit vectors (its single 9-FMA chain, 0.85x). Measured on the former kernel, where the time does
   not go: FMAs replaced by adds 1.0x, no permutes 1.12x, software prefetch 0.90-0.97x, an input plane
   kept in L2 1.24x. */

/* Per 16-output block of a row: the lanes of its two loads (columns p + 1 and p + 17, p = 2 ow0 - pl),
   of its column p as lane 15 of a load from p - 15, and of its outputs. A chunk of blocks is of kind
   1 where every block loads 32 whole columns and has its column p, 2 where only the first block
   lacks column p (the left padding), plus 4 where the last block (of two or more) takes masked
   loads (the row's end), 9 or 13 where the first one does (a block grid shifted left), else 0
   (masked loads). */
typedef struct { __mmask16 a, b, l, c; } op_dw3_s2w_masks;

/* One input row's three taps of block j (q: its column p) into acc. */
OP_INLINE void op_dw3_s2w_tap(const float *q, const op_dw3_s2w_masks *m, const int j, const int KIND,
                              const int LAST, __m512i ie, __m512i io, const __m512 *w3, __m512 *acc)
{
    __m512 ua, ub, uc;
    if ((KIND & 3) && !(LAST && (KIND & 4)) && !(j == 0 && (KIND & 8))) {  /* plain loads (measured
                                                                              faster than masked ones) */
        ua = _mm512_loadu_ps(q + 1);
        ub = _mm512_loadu_ps(q + 17);
        uc = (KIND & 3) == 2 && j == 0 ? _mm512_setzero_ps() : _mm512_set1_ps(q[0]);
    } else {
        ua = _mm512_maskz_loadu_ps(m[j].a, q + 1);
        ub = _mm512_maskz_loadu_ps(m[j].b, q + 17);
        uc = _mm512_maskz_loadu_ps(m[j].l, q - 15);
    }
    /* (opaque to the compiler: else GCC 12 loads ua and ub again as the permutes' memory operands
       instead of copying a register, five loads for three, measured 10-25% slower) */
    __asm__("" : "+v"(ua), "+v"(ub));
    const __m512 v1 = _mm512_permutex2var_ps(ua, ie, ub);
    const __m512 v2 = _mm512_permutex2var_ps(ua, io, ub);
    const __m512 v0 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(v2), _mm512_castps_si512(uc), 15));
    *acc = _mm512_fmadd_ps(w3[0], v0, *acc);
    *acc = _mm512_fmadd_ps(w3[1], v1, *acc);
    *acc = _mm512_fmadd_ps(w3[2], v2, *acc);
}

OP_INLINE void op_dw3_s2w_chunk(const op_dw_ctx *c, const float *const *r, const __m512 *wv, __m512 bv,
                                int64_t yrow, int64_t ow0, const op_dw3_s2w_masks *m, const int NB,
                                const int KIND, const int ACT)
{
    const int64_t p0 = 2 * ow0 - c->d->pl;
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_add_epi32(ie, _mm512_set1_epi32(1));
    __m512 acc[4];
    for (int j = 0; j < NB; j++) acc[j] = bv;
    /* (the blocks are unrolled by hand: as a loop inside the row loop, GCC 12 -O3 interchanged the
       two, chaining all 9 FMAs of a block on one register, 25% slower) */
#pragma GCC unroll 3
    for (int t = 0; t < 3; t++) {
        const float *q = r[t] + p0;  /* column p of block 0 */
        op_dw3_s2w_tap(q, m, 0, KIND, NB == 1, ie, io, wv + 3 * t, &acc[0]);
        if (NB > 1) op_dw3_s2w_tap(q + 32, m, 1, KIND, NB == 2, ie, io, wv + 3 * t, &acc[1]);
        if (NB > 2) op_dw3_s2w_tap(q + 64, m, 2, KIND, NB == 3, ie, io, wv + 3 * t, &acc[2]);
        if (NB > 3) op_dw3_s2w_tap(q + 96, m, 3, KIND, 1, ie, io, wv + 3 * t, &acc[3]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NB; j++)
        op_dw_vst(c->y, yrow + ow0 + 16 * j, m[j].c, acc[j], ACT ? c->act : OP_ACT_NONE, 0);
}

OP_INLINE int op_dw3_s2w_kind(const op_dw3_s2w_masks *m, int64_t nb)
{
    if (nb == 1)
        return m[0].a != 0xFFFF || m[0].b != 0xFFFF ? 0 : m[0].l ? 1 : 2;
    for (int64_t j = 1; j < nb - 1; j++)
        if (m[j].a != 0xFFFF || m[j].b != 0xFFFF || !m[j].l) return 0;
    if (!m[nb - 1].l) return 0;
    const int firstm = m[0].a != 0xFFFF || m[0].b != 0xFFFF;
    const int lastm = m[nb - 1].a != 0xFFFF || m[nb - 1].b != 0xFFFF;
    return firstm ? (lastm ? 13 : 9) : (m[0].l ? 1 : 2) | (lastm ? 4 : 0);
}

/* Every output row of one plane, over the chunk of NB blocks from block j (masks m + j). */
OP_INLINE void op_dw3_s2w_rows(const op_dw_ctx *c, int64_t plane, int64_t yplane, const __m512 *wv,
                               __m512 bv, const op_dw3_s2w_masks *m, int64_t j, int64_t sh, const int NB,
                               const int KIND, const int ACT)
{
    const op_conv_desc *d = c->d;
    const int64_t OH = d->oh, OW = d->ow, H = d->h, W = d->w;
    for (int64_t oh = 0; oh < OH; oh++) {
        const float *r[3];
        for (int t = 0; t < 3; t++) {
            const int64_t ih = 2 * oh - d->pt + t;
            r[t] = ih >= 0 && ih < H ? (const float *)c->x + plane + ih * W : op_dw3_zrow + 16;
        }
        op_dw3_s2w_chunk(c, r, wv, bv, yplane + oh * OW, 16 * j + sh, m + j, NB, KIND, ACT);
    }
}

/* op_dw3_s2w's block grid origin: -2 where every input row starts at 16 or 48 mod 64 bytes (then
   the loads from column 2 (16 j - 2) - pl + 1 sit on 32 bytes for pl = 1), else 0. */
OP_INLINE int64_t op_dw3_s2w_shift(const op_dw_ctx *c)
{
    const op_conv_desc *d = c->d;
    if (d->w % 8 || (d->h * d->w) % 8 || d->pl != 1) return 0;  /* (rows not all alike) */
    return ((uintptr_t)c->x & 31u) == 16 ? -2 : 0;
}

OP_INLINE void op_dw3_s2w(const op_dw_ctx *c, int64_t p0, int64_t p1, const int ACT)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, OH = d->oh, OW = d->ow, W = d->w, HW = d->h * W;
    /* The block grid starts at output sh: 0, or -2 where that puts the loads of every row on 32 bytes
       (the halves Zen 4 loads a 512-bit vector in) and 0 does not, e.g. a 112-column plane at 16
       mod 64 bytes, where NumPy puts a large array (Zen 4, 2026-12-01, kernel-only, 1 thread,
       MobileNet-v2 112x112 -> 56x56: 39-46 GFLOP/s unshifted against ~50 on 32-byte rows). */
    const int64_t sh = op_dw3_s2w_shift(c);
    const int64_t nb = (OW - sh + 15) / 16;  /* 16-output blocks per row */
    op_dw3_s2w_masks m[OP_DW3_ZROW / 16];  /* (rows of at most OP_DW3_ZROW - 128 columns) */
    int kinds[OP_DW3_ZROW / 64];  /* per chunk of 4 blocks (op_dw3_s2w_kind) */
    for (int64_t j = 0; j < nb; j++) {
        const int64_t j0 = 16 * j + sh, p = 2 * j0 - d->pl;
        m[j].a = op_dw_lanes(p + 1, W);
        m[j].b = op_dw_lanes(p + 17, W);
        m[j].l = (__mmask16)((op_dw_lanes(p, W) & 1u) << 15);
        m[j].c = op_dw_lanes(j0, OW);
    }
    for (int64_t j = 0; j < nb; j += 4) kinds[j / 4] = op_dw3_s2w_kind(m + j, nb - j < 4 ? nb - j : 4);
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t pi = p0; pi < p1; pi++) {
        int64_t plane, yplane;
        __m512 wv[9], bv;
        op_dw3_row_setup(c, n, oc, HW, OH * OW, &plane, &yplane, wv, &bv);
        for (int64_t j = 0; j < nb; j += 4) {  /* chunks of up to 4 blocks, each over all rows */
            const int64_t nbk = nb - j < 4 ? nb - j : 4;
            const int kind = kinds[j / 4];
#define OP_S2W_ROWS(NB, K) op_dw3_s2w_rows(c, plane, yplane, wv, bv, m, j, sh, NB, K, ACT)
#define OP_S2W_KINDS(NB)                                                                              \
            switch (kind) {                                                                           \
            case 1: OP_S2W_ROWS(NB, 1); break;                                                        \
            case 2: OP_S2W_ROWS(NB, 2); break;                                                        \
            case 5: OP_S2W_ROWS(NB, 5); break;                                                        \
            case 6: OP_S2W_ROWS(NB, 6); break;                                                        \
            case 9: OP_S2W_ROWS(NB, 9); break;                                                        \
            case 13: OP_S2W_ROWS(NB, 13); break;                                                      \
            default: OP_S2W_ROWS(NB, 0); break;                                                       \
            }
            switch (nbk) {
            case 4: OP_S2W_KINDS(4); break;
            case 3: OP_S2W_KINDS(3); break;
            case 2: OP_S2W_KINDS(2); break;
            default:  /* (one block: kind 1, 2 or 0) */
                if (kind == 1) OP_S2W_ROWS(1, 1);
                else if (kind == 2) OP_S2W_ROWS(1, 2);
                else OP_S2W_ROWS(1, 0);
                break;
            }
#undef OP_S2W_KINDS
#undef OP_S2W_ROWS
        }
        if (++oc == OC) { oc = 0; n++; }
    }
}
static OP_NOINLINE void op_dw3_s2w_f32(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s2w(c, p0, p1, 1); }
static OP_NOINLINE void op_dw3_s2w_f32_noact(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s2w(c, p0, p1, 0); }

#define OP_DW3_S2R(SUF, ACT)                                                                      \
    static OP_NOINLINE void op_dw3_s2r_bf16##SUF(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s2r(c, p0, p1, 6, 2, ACT, 0); } \
    static OP_NOINLINE void op_dw3_s2r_bf16_yb##SUF(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_s2r(c, p0, p1, 6, 2, ACT, 1); }
OP_DW3_S2R(, 1)
OP_DW3_S2R(_noact, 0)
/* stride 2, [activation][op_dw_io]: float32 op_dw3_s2w, bfloat16 input op_dw3_s2r */
static void (*const op_dw3_s2_kernels[2][3])(const op_dw_ctx *, int64_t, int64_t) = {
    {op_dw3_s2w_f32_noact, op_dw3_s2r_bf16_noact, op_dw3_s2r_bf16_yb_noact},
    {op_dw3_s2w_f32, op_dw3_s2r_bf16, op_dw3_s2r_bf16_yb}};

#define OP_DW3_ROWV(NV)                                                                            \
    static OP_NOINLINE void op_dw3_rowv##NV##_f32(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_rowv(c, p0, p1, NV, 0, 0); } \
    static OP_NOINLINE void op_dw3_rowv##NV##_bf16(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_rowv(c, p0, p1, NV, 1, 0); } \
    static OP_NOINLINE void op_dw3_rowv##NV##_bf16_yb(const op_dw_ctx *c, int64_t p0, int64_t p1) { op_dw3_rowv(c, p0, p1, NV, 1, 1); }
OP_DW3_ROWV(1)
OP_DW3_ROWV(2)
OP_DW3_ROWV(3)
OP_DW3_ROWV(4)
OP_DW3_ROWV(5)
OP_DW3_ROWV(6)
OP_DW3_ROWV(7)
#define OP_DW3_ROWV_ROW(NV) \
    {op_dw3_rowv##NV##_f32, op_dw3_rowv##NV##_bf16, op_dw3_rowv##NV##_bf16_yb}
/* [vectors per row - 1][io: op_dw_io] */
static void (*const op_dw3_rowv_kernels[7][3])(const op_dw_ctx *, int64_t, int64_t) = {
    OP_DW3_ROWV_ROW(1), OP_DW3_ROWV_ROW(2), OP_DW3_ROWV_ROW(3), OP_DW3_ROWV_ROW(4),
    OP_DW3_ROWV_ROW(5), OP_DW3_ROWV_ROW(6), OP_DW3_ROWV_ROW(7)};

/* planes p0..p1-1 (p = n * OC + oc) */
#define OP_DW3_PLANES(NAME, S, BF16, YB)                                                          \
    static OP_NOINLINE void NAME(const op_dw_ctx *c, int64_t p0, int64_t p1)                     \
    {                                                                                             \
        const int64_t OC = c->d->oc;                                                              \
        int64_t n = p0 / OC, oc = p0 % OC;                                                        \
        for (int64_t p = p0; p < p1; p++) {                                                       \
            op_dw3_plane(c, n, oc, S, BF16, YB);                                                  \
            if (++oc == OC) { oc = 0; n++; }                                                      \
        }                                                                                         \
    }
#define OP_DW3_FLAT(NAME, BF16, YB)                                                               \
    static OP_NOINLINE void NAME(const op_dw_ctx *c, int64_t p0, int64_t p1, float *s) { op_dw3_flat(c, p0, p1, s, BF16, YB); }
/* name suffix: input dtype, then _yb for bfloat16 output (from bfloat16 input only: op_dw_io) */
OP_DW3_PLANES(op_dw3_plane_s1_f32, 1, 0, 0)
OP_DW3_PLANES(op_dw3_plane_s2_f32, 2, 0, 0)
OP_DW3_PLANES(op_dw3_plane_s1_bf16, 1, 1, 0)
OP_DW3_PLANES(op_dw3_plane_s2_bf16, 2, 1, 0)
OP_DW3_PLANES(op_dw3_plane_s1_bf16_yb, 1, 1, 1)
OP_DW3_PLANES(op_dw3_plane_s2_bf16_yb, 2, 1, 1)
OP_DW3_FLAT(op_dw3_flat_f32, 0, 0)
OP_DW3_FLAT(op_dw3_flat_bf16, 1, 0)
OP_DW3_FLAT(op_dw3_flat_bf16_yb, 1, 1)

typedef void (*op_dw3_fn)(const op_dw_ctx *, int64_t, int64_t);
#define OP_DW3_S2(NAME, BF16, YB)                                                                 \
    static OP_NOINLINE void NAME(const op_dw_ctx *c, int64_t p0, int64_t p1, float *s) { op_dw3_s2(c, p0, p1, s, BF16, YB); }
OP_DW3_S2(op_dw3_s2_f32, 0, 0)
OP_DW3_S2(op_dw3_s2_bf16, 1, 0)
OP_DW3_S2(op_dw3_s2_bf16_yb, 1, 1)

typedef void (*op_dw3_flat_fn)(const op_dw_ctx *, int64_t, int64_t, float *);
/* [flat stride 1 or stride 2][io] */
static const op_dw3_flat_fn op_dw3_flat_kernels[2][3] = {
    {op_dw3_flat_f32, op_dw3_flat_bf16, op_dw3_flat_bf16_yb},
    {op_dw3_s2_f32, op_dw3_s2_bf16, op_dw3_s2_bf16_yb}};
/* [stride - 1][io] */
static const op_dw3_fn op_dw3_kernels[2][3] = {
    {op_dw3_plane_s1_f32, op_dw3_plane_s1_bf16, op_dw3_plane_s1_bf16_yb},
    {op_dw3_plane_s2_f32, op_dw3_plane_s2_bf16, op_dw3_plane_s2_bf16_yb},
};
#endif

#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
/* ---------------------------------------------------------- NCHW 3x3, AVX2 builds (OP_DW_AVX2_3X3)

   3x3 undilated kernels at stride 1 or 2, any padding and channel multiplier. Output rows are
   computed OP_DW8_R at a time (float32 in place: OP_DW8X_R1, stride 2 5), one vector of 8 columns
   at a time: the R accumulators and the nine weights stay in registers (16 ymm), and each input
   vector is loaded once per tap column and feeds every output row of the block that reads it.
   Float32 in place takes 5 rows at stride 1 too: at 6, 6 + 9 + 1 ymm left GCC no register for the
   input vector, so it folded the load into each of its three FMAs (54 loads a block instead of
   24; Zen 3, 2026-12-07, 1 thread, alternated processes, best of 40, MobileNet-v2 planes, with
   the shifted edges below: 56 x 56 C144 1.15-1.54x, 112 x 112 C32 1.10-1.42x faster; 2 threads
   1.09-1.56x and 1.16-1.34x; the same bits). Each output is one
   FMA chain, bias first, then the taps in row-major order. The input rows come
     - float32 (rows up to OP_DW8_ZROW columns): from the input in place, a zero row for rows
       in the padding, and for the vectors that cross the row's left or right edge masked loads
       or, at padding 1, one tap shifted in registers (op_dw8x_blk);
     - else (bfloat16 widened): through a ring of OP_DW8_RING zero-padded float32 rows, each row
       stored once, at stride 2 split into its even and odd columns, so that every tap is a
       unit-stride run (op_dw8_fill, op_dw8_blk).
   Measured on Zen 3 (2 threads, MobileNet-v2 layers, batch 1, x torch in one process,
   2026-12-06): from 0.45-1.24x (the compiler-vectorised generic kernel) to 2.1-3.8x. */
enum { OP_DW8_R = 6, OP_DW8_RING = 32, OP_DW8X_R1 = 5 };

/* float32 input read in place (op_dw8_plane's INPLACE): rows above or below the input read this
   zero row, and vectors that cross the left or right edge load only their input columns */
enum { OP_DW8_ZROW = 4096 };
static const float op_dw8_zrow[OP_DW8_ZROW] __attribute__((aligned(32)));

/* ring row pitch (floats): one phase of OW rounded up to 8, plus the 8 columns the taps run past */
OP_INLINE int64_t op_dw8_q(const op_conv_desc *d) { return op_roundup64(d->ow, 8) + 8; }

/* Whether float32 input is read in place (else through the ring) */
OP_INLINE int op_dw8_inplace(const op_conv_desc *d, int x_bf16)
{
    return !x_bf16 && d->w <= OP_DW8_ZROW;
}

/* floats of scratch per thread: the ring (unless read in place) and OP_DW8_R output rows
   (bfloat16 output, or an activation other than ReLU) */
OP_INLINE int64_t op_dw8_scratch(const op_conv_desc *d, int x_bf16)
{
    const int64_t q = op_dw8_q(d);
    return (op_dw8_inplace(d, x_bf16) ? 0 : OP_DW8_RING * d->sw * q) + OP_DW8_R * q;
}

OP_INLINE __m256 op_dw8_ld(const void *x, int64_t off, const int BF16)
{
    if (BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + off))),
            16));
    return _mm256_loadu_ps((const float *)x + off);
}

/* columns t .. t + 7 of the input row at element offset src (n columns), zero outside [0, n) */
OP_INLINE __m256 op_dw8_ldp(const void *x, int64_t src, int64_t t, int64_t n, const int BF16)
{
    if (t >= 0 && t + 8 <= n) return op_dw8_ld(x, src + t, BF16);
    if (t + 8 <= 0 || t >= n) return _mm256_setzero_ps();
    if (!BF16) {  /* lanes l with 0 <= t + l < n (the others are not read) */
        const int64_t lo = op_max64(0, -t), hi = op_min64(8, n - t);  /* (n may pass INT_MAX) */
        const __m256i m = op_lanes8(0, (int)lo, (int)(hi - lo));
        return _mm256_maskload_ps((const float *)x + src + t, m);
    }
    float v[8];
    for (int l = 0; l < 8; l++)
        v[l] = t + l >= 0 && t + l < n ? op_conv_ld(x, src + t + l, 1) : 0.0f;
    return _mm256_setr_ps(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
}

/* padded row r (input row ih = r - pt) into the ring: row[cp] = x[ih][cp - pl], zero outside the
   input, as it is (stride 1: q columns) or as its even columns at [0, q) and its odd columns at
   [q, 2q) (stride 2). Whole 8-column vectors are stored at the offsets the taps read from. */
OP_INLINE void op_dw8_fill(const op_dw_ctx *c, int64_t plane, int64_t r, float *ring, int64_t q,
                           const int S, const int BF16)
{
    const op_conv_desc *d = c->d;
    float *OP_RESTRICT dst = ring + (r & (OP_DW8_RING - 1)) * S * q;
    const int64_t ih = r - d->pt, n = d->w, src = plane + ih * n;
    if (ih < 0 || ih >= d->h) {
        for (int64_t i = 0; i < S * q; i += 8) _mm256_storeu_ps(dst + i, _mm256_setzero_ps());
        return;
    }
    if (S == 1) {
        for (int64_t i = 0; i < q; i += 8)
            _mm256_storeu_ps(dst + i, op_dw8_ldp(c->x, src, i - d->pl, n, BF16));
        return;
    }
    for (int64_t i = 0; i < q; i += 8) {
        const __m256 a = op_dw8_ldp(c->x, src, 2 * i - d->pl, n, BF16);
        const __m256 b = op_dw8_ldp(c->x, src, 2 * i + 8 - d->pl, n, BF16);
        /* per 128-bit lane [a0 a2 b0 b2], then the 64-bit pairs in order (0, 2, 1, 3) */
        const __m256d e = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0x88));
        const __m256d o = _mm256_castps_pd(_mm256_shuffle_ps(a, b, 0xDD));
        _mm256_storeu_ps(dst + i, _mm256_castpd_ps(_mm256_permute4x64_pd(e, 0xD8)));
        _mm256_storeu_ps(dst + q + i, _mm256_castpd_ps(_mm256_permute4x64_pd(o, 0xD8)));
    }
}

/* the first n (1..8) lanes of v to p: by 4, 2 and 1 lanes below 8 (a masked VMASKMOVPS store
   measured about 20% of the 14 x 14 planes on Zen 3, where it is slow) */
OP_INLINE void op_dw8_st(float *p, __m256 v, int64_t n)
{
    if (n >= 8) {
        _mm256_storeu_ps(p, v);
        return;
    }
    __m128 h = _mm256_castps256_ps128(v);
    if (n & 4) {
        _mm_storeu_ps(p, h);
        h = _mm256_extractf128_ps(v, 1);
        p += 4;
    }
    if (n & 2) {
        _mm_storel_pi((__m64 *)p, h);
        h = _mm_movehl_ps(h, h);
        p += 2;
    }
    if (n & 1) _mm_store_ss(p, h);
}

/* Output rows oh0 .. oh0 + R - 1 from the ring, columns j0 .. j0 + 7 (the vector may pass OW:
   lanes past ylen are not stored). y: output row oh0 at column 0 (pitch yp), or the row buffer.
   RELU: ReLU in registers. */
OP_INLINE void op_dw8_blk(const float *ring, int64_t q, int64_t oh0, int64_t j0, const __m256 *wv,
                          __m256 bv, float *y, int64_t yp, int64_t ylen, const int R, const int S,
                          const int RELU)
{
    __m256 acc[OP_DW8_R];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) acc[r] = bv;
#pragma GCC unroll 13
    for (int i = 0; i < (R - 1) * S + 3; i++) {
        const float *row = ring + ((oh0 * S + i) & (OP_DW8_RING - 1)) * S * q + j0;
#pragma GCC unroll 3
        for (int kj = 0; kj < 3; kj++) {
            /* stride 2: taps 0 and 2 read even columns j and j + 1, tap 1 odd column j */
            const __m256 x = _mm256_loadu_ps(row + (S == 1 ? kj : (kj & 1) * q + (kj >> 1)));
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                const int ki = i - r * S;
                if (ki >= 0 && ki < 3) acc[r] = _mm256_fmadd_ps(wv[ki * 3 + kj], x, acc[r]);
            }
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
        op_dw8_st(y + r * yp + j0, RELU ? _mm256_max_ps(_mm256_setzero_ps(), acc[r]) : acc[r],
                  ylen - j0);
}

/* R output rows from oh0, every column */
OP_INLINE void op_dw8_rows(const float *ring, int64_t q, int64_t oh0, int64_t OW, const __m256 *wv,
                           __m256 bv, float *y, int64_t yp, int64_t ylen, const int R, const int S,
                           const int RELU)
{
    for (int64_t j0 = 0; j0 < OW; j0 += 8)
        op_dw8_blk(ring, q, oh0, j0, wv, bv, y, yp, ylen, R, S, RELU);
}

/* Output rows oh0 .. oh0 + R - 1 (input rows rp[0 ..]), columns j0 .. j0 + 7, from float32 input
   read in place; t = S j0 - pl, the input column of lane 0's first tap. EDGE: OP_DW8X_MASK, masked
   loads, only columns inside [0, W); stride 1 only, OP_DW8X_LEFT (t == -1) and OP_DW8X_RIGHT
   (t + 9 == W): one tap column of the vector reads one column outside the row, so it is the middle
   tap's vector shifted by one lane with a zero shifted in (VPERM2F128 + VPALIGNR), and the other
   two are plain loads. The masked loads, each with its mask computed, had made the two edge
   vectors of a 56-column row cost as much as its five inner ones on Zen 3 (perf, 1 thread,
   2026-12-07). Stride 2 splits 16 input columns into even and odd ones in registers with one
   VSHUFPS per tap and no lane-crossing permute: the taps and the accumulators hold the columns in
   the order (0, 1, 4, 5, 2, 3, 6, 7), put right by one VPERMPD per output vector. (Stride 2 kept
   its masked edges: the same shifts there, with 4 or 5 rows a block, measured even with the flat
   kernel at 112 and 56 columns and 0.6-0.9x at 28 and 14, Zen 3, 2026-12-07.) */
enum { OP_DW8X_MASK = 1, OP_DW8X_LEFT = 2, OP_DW8X_RIGHT = 3 };

OP_INLINE __m256 op_dw8x_ld(const float *row, int64_t t, int o, int64_t W, const int EDGE)
{
    if (EDGE == OP_DW8X_MASK) return _mm256_maskload_ps(row + o, op_lanes8((int)t + o, 0, (int)W));
    return _mm256_loadu_ps(row + o);
}

/* [0, v0 .. v6] and [v1 .. v7, 0] */
OP_INLINE __m256 op_dw8_shr1(__m256 v)
{
    const __m256i lo = _mm256_castps_si256(_mm256_permute2f128_ps(v, v, 0x08));  /* [0 | v.lo] */
    return _mm256_castsi256_ps(_mm256_alignr_epi8(_mm256_castps_si256(v), lo, 12));
}
OP_INLINE __m256 op_dw8_shl1(__m256 v)
{
    const __m256i hi = _mm256_castps_si256(_mm256_permute2f128_ps(v, v, 0x81));  /* [v.hi | 0] */
    return _mm256_castsi256_ps(_mm256_alignr_epi8(hi, _mm256_castps_si256(v), 4));
}

OP_INLINE void op_dw8x_blk(const float *const *rp, int64_t t, int64_t W, const __m256 *wv,
                           __m256 bv, float *y, int64_t yp, int64_t ylen, int64_t j0, const int R,
                           const int S, const int EDGE, const int RELU, const int FULL)
{
    __m256 acc[OP_DW8_R];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) acc[r] = bv;
#pragma GCC unroll 13
    for (int i = 0; i < (R - 1) * S + 3; i++) {
        const float *row = rp[i] + t;
        __m256 a = _mm256_setzero_ps(), b = a;
        if (S == 2) {
            a = op_dw8x_ld(row, t, 0, W, EDGE);
            b = op_dw8x_ld(row, t, 8, W, EDGE);
        }
#pragma GCC unroll 3
        for (int kj = 0; kj < 3; kj++) {
            __m256 x;
            if (S == 1 && EDGE == OP_DW8X_LEFT)
                x = kj == 0 ? op_dw8_shr1(_mm256_loadu_ps(row + 1)) : _mm256_loadu_ps(row + kj);
            else if (S == 1 && EDGE == OP_DW8X_RIGHT)
                x = kj == 2 ? op_dw8_shl1(_mm256_loadu_ps(row + 1)) : _mm256_loadu_ps(row + kj);
            else if (S == 1)
                x = op_dw8x_ld(row, t, kj, W, EDGE);
            else if (kj == 0)
                x = _mm256_shuffle_ps(a, b, 0x88);  /* [t, t+2, t+8, t+10 | t+4, t+6, t+12, t+14] */
            else if (kj == 1)
                x = _mm256_shuffle_ps(a, b, 0xDD);  /* those + 1 */
            else
                x = _mm256_shuffle_ps(op_dw8x_ld(row, t, 2, W, EDGE),
                                      op_dw8x_ld(row, t, 10, W, EDGE), 0x88);
#pragma GCC unroll 6
            for (int r = 0; r < R; r++) {
                const int ki = i - r * S;
                if (ki >= 0 && ki < 3) acc[r] = _mm256_fmadd_ps(wv[ki * 3 + kj], x, acc[r]);
            }
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++) {
        __m256 o = acc[r];
        if (S == 2)  /* 64-bit pairs (0, 2, 1, 3): columns in order */
            o = _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), 0xD8));
        if (RELU) o = _mm256_max_ps(_mm256_setzero_ps(), o);
        if (FULL) _mm256_storeu_ps(y + r * yp + j0, o);  /* (8 columns known to fit) */
        else op_dw8_st(y + r * yp + j0, o, ylen - j0);
    }
}

/* Stride 1, OP_DW8_R output rows as op_dw8x_blk, whole vectors j0 .. j1 - 1 (steps of 8) that
   read no column outside the input row, out of line: inlined into the plane loop with its
   edge and row-count variants, this loop kept its row pointers on the stack (Zen 3, 1 thread,
   float32, x the inlined loop in one process, 2026-12-07: 112 x 112 planes 1.10-1.21, 56 x 56
   1.05-1.10; 2 threads about even) */
#define OP_DW8X_MID(NAME, RELU)                                                                   \
    static OP_NOINLINE void NAME(const float *const *rp, int64_t W, int64_t pl, const __m256 *wv, \
                                 __m256 bv, float *y, int64_t yp, int64_t ylen, int64_t j0,       \
                                 int64_t j1)                                                      \
    {                                                                                             \
        for (; j0 < j1; j0 += 8)                                                                  \
            op_dw8x_blk(rp, j0 - pl, W, wv, bv, y, yp, ylen, j0, OP_DW8X_R1, 1, 0, RELU, 1);      \
    }
OP_DW8X_MID(op_dw8x_mid, 0)
OP_DW8X_MID(op_dw8x_mid_relu, 1)

OP_INLINE void op_dw8x_rows(const float *const *rp, int64_t W, int64_t pl, int64_t OW,
                            const __m256 *wv, __m256 bv, float *y, int64_t yp, int64_t ylen,
                            const int R, const int S, const int RELU)
{
    /* stride 1, a full block: the vectors from j0 = 8 up to the last one that reads inside the
       row (t = j0 - pl >= 0, t + 10 <= W) and stores 8 columns (j0 + 8 <= OW) out of line */
    const int64_t jl = op_min64(W + pl - 10, OW - 8);  /* (the last such j0, before rounding) */
    int64_t j0 = 0;
    if (S == 1 && pl == 1 && OW == W && W >= 9) {
        /* padding 1 both sides: the first vector (t = -1) and one that ends at the row's end
           (t = W - 9, overlapping the one before it when 8 does not divide W; it stores the same
           values) read one column outside the row each, every other vector none */
        op_dw8x_blk(rp, -1, W, wv, bv, y, yp, ylen, 0, R, S, OP_DW8X_LEFT, RELU, 1);
        const int64_t jm = W >= 17 ? (W - 9) / 8 * 8 + 8 : 8;  /* (past the last inner j0) */
        if (R == OP_DW8X_R1 && jm > 8) {
            if (RELU) op_dw8x_mid_relu(rp, W, pl, wv, bv, y, yp, ylen, 8, jm);
            else op_dw8x_mid(rp, W, pl, wv, bv, y, yp, ylen, 8, jm);
        } else {
            for (j0 = 8; j0 < jm; j0 += 8)
                op_dw8x_blk(rp, j0 - 1, W, wv, bv, y, yp, ylen, j0, R, S, 0, RELU, 1);
        }
        op_dw8x_blk(rp, W - 9, W, wv, bv, y, yp, ylen, W - 8, R, S, OP_DW8X_RIGHT, RELU, 1);
        return;
    }
    if (S == 1 && R == OP_DW8X_R1 && pl <= 8 && jl >= 8) {
        const int64_t jm = jl / 8 * 8 + 8;
        op_dw8x_blk(rp, -pl, W, wv, bv, y, yp, ylen, 0, R, S, OP_DW8X_MASK, RELU, 0);
        if (RELU) op_dw8x_mid_relu(rp, W, pl, wv, bv, y, yp, ylen, 8, jm);
        else op_dw8x_mid(rp, W, pl, wv, bv, y, yp, ylen, 8, jm);
        j0 = jm;
    }
    for (; j0 < OW; j0 += 8) {
        const int64_t t = S * j0 - pl;
        if (t >= 0 && t + 8 * S + 2 <= W)
            op_dw8x_blk(rp, t, W, wv, bv, y, yp, ylen, j0, R, S, 0, RELU, 0);
        else
            op_dw8x_blk(rp, t, W, wv, bv, y, yp, ylen, j0, R, S, OP_DW8X_MASK, RELU, 0);
    }
}

#define OP_DW8_CASE(RR)                                                                           \
    case RR:                                                                                      \
        if (INPLACE && relu) op_dw8x_rows(rp, d->w, d->pl, OW, wv, bv, y, yp, OW, RR, S, 1);      \
        else if (INPLACE) op_dw8x_rows(rp, d->w, d->pl, OW, wv, bv, y, yp, ylen, RR, S, 0);       \
        else if (relu) op_dw8_rows(ring, q, oh0, OW, wv, bv, y, yp, OW, RR, S, 1);                \
        else op_dw8_rows(ring, q, oh0, OW, wv, bv, y, yp, ylen, RR, S, 0);                        \
        break;

/* output plane (n, oc). INPLACE: float32 input read in place (rows of at most OP_DW8_ZROW
   columns), else through the ring of padded rows. */
OP_INLINE void op_dw8_plane(const op_dw_ctx *c, int64_t n, int64_t oc, float *buf, const int S,
                            const int BF16, const int INPLACE)
{
    const op_conv_desc *d = c->d;
    const int64_t ci = c->mult == 1 ? oc : oc / c->mult;
    const int64_t plane = (n * d->c + ci) * d->h * d->w, OH = d->oh, OW = d->ow, q = op_dw8_q(d);
    const int64_t yplane = (n * d->oc + oc) * OH * OW;
    float *ring = buf, *ob = INPLACE ? buf : buf + OP_DW8_RING * S * q;
    __m256 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm256_broadcast_ss(c->w + oc * 9 + t);
    const __m256 bv = _mm256_set1_ps(c->bias ? c->bias[oc] : 0.0f);
    /* straight to a float32 output (ReLU in registers), else through OP_DW8_R rows of ob */
    const int direct = !c->ybf16 && (c->act == OP_ACT_NONE || c->act == OP_ACT_RELU);
    const int relu = direct && c->act == OP_ACT_RELU;
    const int64_t RB = INPLACE ? (S == 2 ? 5 : OP_DW8X_R1) : OP_DW8_R;  /* output rows per block */
    const int64_t yp = direct ? OW : q, ylen = direct ? OW : q;
    int64_t next = 0;  /* ring: the first padded row not yet in it */
    for (int64_t oh0 = 0; oh0 < OH; oh0 += RB) {
        const int64_t R = op_min64(RB, OH - oh0);
        const float *rp[(OP_DW8_R - 1) * 2 + 3];
        if (INPLACE) {
            for (int64_t i = 0; i < (R - 1) * S + 3; i++) {
                const int64_t ih = oh0 * S + i - d->pt;
                rp[i] = ih >= 0 && ih < d->h ? (const float *)c->x + plane + ih * d->w
                                             : op_dw8_zrow;
            }
        } else {
            /* the rows of this block and of the next one: a row is stored a block before its
               loads (they read across two of its vector stores, which cannot be forwarded) */
            const int64_t last = op_min64(OH - 1, oh0 + R - 1 + RB) * S + 2;
            for (; next <= last; next++) op_dw8_fill(c, plane, next, ring, q, S, BF16);
        }
        float *y = direct ? (float *)c->y + yplane + oh0 * OW : ob;
        switch (R) {  /* (R <= OP_DW8_R <= 6) */
            OP_DW8_CASE(6) OP_DW8_CASE(5) OP_DW8_CASE(4)
            OP_DW8_CASE(3) OP_DW8_CASE(2) OP_DW8_CASE(1)
        }
        if (direct) continue;
        for (int64_t r = 0; r < R; r++) {
            float *row = ob + r * q;
            op_dw_act_store(row, OW, c->act);
            if (c->ybf16) op_dw_put_bf16(c, yplane + (oh0 + r) * OW, row, OW);
            else memcpy((float *)c->y + yplane + (oh0 + r) * OW, row, sizeof(float) * (size_t)OW);
        }
    }
}

/* planes p0 .. p1 - 1 (p = n * OC + oc) */
#define OP_DW8_PLANES(NAME, S, BF16, INPLACE)                                                     \
    static OP_NOINLINE void NAME(const op_dw_ctx *c, int64_t p0, int64_t p1, float *buf)         \
    {                                                                                             \
        for (int64_t p = p0; p < p1; p++)                                                         \
            op_dw8_plane(c, p / c->d->oc, p % c->d->oc, buf, S, BF16, INPLACE);                   \
    }
/* per stride: float32 in place, bfloat16 (ring), float32 through the ring */
#define OP_DW8_STRIDE(S)                                                                          \
    OP_DW8_PLANES(op_dw8_s##S##_f32, S, 0, 1)                                                     \
    OP_DW8_PLANES(op_dw8_s##S##_bf16, S, 1, 0)                                                    \
    OP_DW8_PLANES(op_dw8_s##S##_f32_ring, S, 0, 0)
OP_DW8_STRIDE(1)
OP_DW8_STRIDE(2)
/* [stride - 1][float32 in place, bfloat16, float32 rows wider than OP_DW8_ZROW] */
static void (*const op_dw8_kernels[2][3])(const op_dw_ctx *, int64_t, int64_t, float *) = {
    {op_dw8_s1_f32, op_dw8_s1_bf16, op_dw8_s1_f32_ring},
    {op_dw8_s2_f32, op_dw8_s2_bf16, op_dw8_s2_f32_ring}};

/* ---------------------------------- NCHW 3x3 padding 1, flat planes, AVX2 (OP_DW_AVX2_FLAT)

   The same idea as the AVX-512 flat kernel (op_dw3_flat), on 8 lanes and for stride 2 too. Stride
   1 (output the size of the input): the plane is one flat axis, output g = oh W + ow reads input
   g + (ki - 1) W + kj - 1, so a vector of 8 outputs may span rows and every lane works whatever W
   is (the row kernel uses 7 of 8 lanes at 7 columns, 6 of 8 at 14). Stride 2 (even H and W,
   output H/2 x W/2): the plane is first split into its four phases P[a][b] (rows of parity a,
   columns of parity b, each OH x OW, flat), and output g reads tap (ki, kj) at
   P[ki != 1][kj != 1][g - (ki == 0) OW - (kj == 0)]. Each plane is copied (bfloat16: widened) into
   a thread scratch after a zero run of at least W + 1 (OW + 1) elements that stands in for the top
   padding row; the bottom row reads zeros after the copy (stride 1) or is never read (stride 2).
   The left and right padding: the taps of kernel column 0 (stride 1: and 2) sum into their own
   accumulator, and its lanes at output column 0 (W - 1) are cleared before the final sum (they read
   the neighbouring row's last / first element), by masks that repeat every OW / gcd(OW, 8) blocks
   (op_dw_ctx.fm8: carrying each lane's column from block to block in a vector instead made a chain
   of seven integer operations per 8 outputs, flat 56 x 56 planes 30 against 37 GFLOP/s on Zen 3
   at 1 thread). Two copies per thread: the next plane is copied before the current
   one is computed, so the tap loads do not wait on the copy's stores. */
/* OP_DW8F_MAX: output elements per plane. OP_DW8F_S1_MAXW: the widest stride-1 float32 rows;
   wider ones measured faster on the row kernel (Zen 3, 1 thread, float32, x the row kernel in
   one process, 2026-12-06: 7 x 7 1.9-2.0, 14 x 14 1.45-1.5, 28 x 28 1.05, 56 x 56 0.94,
   112 x 112 0.88; stride 2 from 14 x 14 ... 112 x 112 1.07-1.3) */
enum { OP_DW8F_MAX = 16384, OP_DW8F_S1_MAXW = 32 };

/* floats of one copy: lead zeros, then (stride 2: four phase planes of) the flat plane rounded
   up to 8 with 8 floats of slack for the last block's taps, then W + 16 zeros */
OP_INLINE int64_t op_dw8f_lead(const op_conv_desc *d) { return op_roundup64(d->ow + 1, 8); }
OP_INLINE int64_t op_dw8f_phase(const op_conv_desc *d)
{
    return op_dw8f_lead(d) + op_roundup64(d->oh * d->ow, 8) + 8;
}
OP_INLINE int64_t op_dw8f_copy_elems(const op_conv_desc *d)
{
    return d->sw == 1 ? op_dw8f_phase(d) + d->w + 16 : 4 * op_dw8f_phase(d);
}
/* scratch floats per thread: two copies and one output plane (bfloat16 output, or an activation
   other than ReLU: applied to the finished plane) */
OP_INLINE int64_t op_dw8f_scratch(const op_conv_desc *d)
{
    return 2 * op_dw8f_copy_elems(d) + op_roundup64(d->oh * d->ow, 8) + 8;
}

/* blocks of 8 outputs after which the lanes' columns repeat: OW / gcd(OW, 8) */
OP_INLINE int64_t op_dw8f_period(int64_t OW)
{
    return OW % 8 == 0 ? OW / 8 : OW % 4 == 0 ? OW / 4 : OW % 2 == 0 ? OW / 2 : OW;
}

/* Whether the flat kernels take the problem: 3x3 undilated (checked by the caller), padding 1 at
   the top and left, stride 1 with the output the size of the input or stride 2 from an even-sized
   input, output rows of at least 4 columns, column masks that repeat within 64 blocks
   (op_dw_ctx.fm8) and planes of at most OP_DW8F_MAX outputs */
OP_INLINE int op_dw8f_fits(const op_conv_desc *d, int x_bf16)
{
    if (d->pt != 1 || d->pl != 1 || d->ow < 4 || d->oh * d->ow > OP_DW8F_MAX) return 0;
    if (op_dw8f_period(d->ow) > 64) return 0;
    if (d->sw == 1) return d->oh == d->h && d->ow == d->w && (x_bf16 || d->ow <= OP_DW8F_S1_MAXW);
    return d->sw == 2 && d->h % 2 == 0 && d->w % 2 == 0 && d->oh == d->h / 2 && d->ow == d->w / 2;
}

/* stride 2: the input rows from element offset plane into the phases at q (row pair r: phase
   rows at q + r OW + (2 a + b) ps); WHOLE: every load in the input (else masked at end) */
OP_INLINE void op_dw8f_copy2(const void *x, int64_t plane, float *OP_RESTRICT q, int64_t H,
                             int64_t W, int64_t OW, int64_t ps, int64_t end, const int BF16,
                             const int WHOLE)
{
    for (int64_t ih = 0; ih < H; ih += 2, q += OW) {
        for (int a = 0; a < 2; a++) {
            float *e = q + 2 * a * ps, *o = e + ps;
            const int64_t src = plane + (ih + a) * W;
            for (int64_t j = 0; j < OW; j += 8) {
                const int64_t t = src + 2 * j;
                const __m256 u = WHOLE ? op_dw8_ld(x, t, BF16) : op_dw8_ldp(x, 0, t, end, BF16);
                const __m256 v =
                    WHOLE ? op_dw8_ld(x, t + 8, BF16) : op_dw8_ldp(x, 0, t + 8, end, BF16);
                const __m256d ev = _mm256_castps_pd(_mm256_shuffle_ps(u, v, 0x88));
                const __m256d od = _mm256_castps_pd(_mm256_shuffle_ps(u, v, 0xDD));
                _mm256_storeu_ps(e + j, _mm256_castpd_ps(_mm256_permute4x64_pd(ev, 0xD8)));
                _mm256_storeu_ps(o + j, _mm256_castpd_ps(_mm256_permute4x64_pd(od, 0xD8)));
            }
        }
    }
}

/* input plane xp (= n * C + c) into the copy s: stride 1 after the lead zeros; stride 2 as the
   phases P[a][b] at s + (2 a + b) * op_dw8f_phase + lead, even / odd columns split by one VSHUFPS
   pair and a VPERMPD each, as op_dw8_fill */
OP_INLINE void op_dw8f_copy(const op_dw_ctx *c, int64_t xp, float *OP_RESTRICT s, const int S,
                            const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t H = d->h, W = d->w, plane = xp * H * W, lead = op_dw8f_lead(d);
    if (S == 1) {
        float *q = s + lead;
        const int64_t HW = H * W;
        for (int64_t i = 0; i < HW; i += 8)
            _mm256_storeu_ps(q + i, op_dw8_ldp(c->x, plane, i, HW, BF16));
        for (int64_t i = op_roundup64(HW, 8); i < HW + W + 16; i += 8)
            _mm256_storeu_ps(q + i, _mm256_setzero_ps());
        return;
    }
    /* a row's last 16 columns may run into the next row (whose stores come later) and its phase
       rows' stores past their end (the next row's overwrite them; the last rows' land in the
       slack, read only by lanes that are not stored): loads are masked only at the input's end */
    const int64_t OW = d->ow, ps = op_dw8f_phase(d), end = d->n * d->c * H * W;
    if (plane + H * W + 16 <= end)
        op_dw8f_copy2(c->x, plane, s + lead, H, W, OW, ps, end, BF16, 1);
    else
        op_dw8f_copy2(c->x, plane, s + lead, H, W, OW, ps, end, BF16, 0);
}

/* the copies' lead zeros (never written by op_dw8f_copy) */
OP_INLINE void op_dw8f_zero_leads(const op_conv_desc *d, float *s, const int S)
{
    const int64_t lead = op_dw8f_lead(d), ps = op_dw8f_phase(d), ce = op_dw8f_copy_elems(d);
    for (int k = 0; k < 2; k++)
        for (int f = 0; f < (S == 1 ? 1 : 4); f++)
            for (int64_t i = 0; i < lead; i += 8)
                _mm256_storeu_ps(s + k * ce + f * ps + i, _mm256_setzero_ps());
}

/* output block at g (8 outputs) of the plane copy s (q = s + lead; stride 2: phase stride ps) */
OP_INLINE __m256 op_dw8f_blk(const float *q, int64_t g, int64_t W, int64_t ps, const __m256 *wv,
                             __m256 bv, const float *fm, const int S)
{
    if (S == 1) {
        const float *r = q + g;
        __m256 a0 = _mm256_mul_ps(wv[0], _mm256_loadu_ps(r - W - 1));
        __m256 a1 = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(r - W), bv);
        __m256 a2 = _mm256_mul_ps(wv[2], _mm256_loadu_ps(r - W + 1));
        a0 = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(r - 1), a0);
        a1 = _mm256_fmadd_ps(wv[4], _mm256_loadu_ps(r), a1);
        a2 = _mm256_fmadd_ps(wv[5], _mm256_loadu_ps(r + 1), a2);
        a0 = _mm256_fmadd_ps(wv[6], _mm256_loadu_ps(r + W - 1), a0);
        a1 = _mm256_fmadd_ps(wv[7], _mm256_loadu_ps(r + W), a1);
        a2 = _mm256_fmadd_ps(wv[8], _mm256_loadu_ps(r + W + 1), a2);
        const __m256 c0 = _mm256_load_ps(fm), c2 = _mm256_load_ps(fm + 8);
        return _mm256_add_ps(_mm256_add_ps(a1, _mm256_andnot_ps(c0, a0)), _mm256_andnot_ps(c2, a2));
    }
    /* W here is OW; phases ee, eo, oe, oo */
    const float *ee = q + g, *eo = ee + ps, *oe = eo + ps, *oo = oe + ps;
    __m256 a0 = _mm256_mul_ps(wv[0], _mm256_loadu_ps(oo - W - 1));
    __m256 a1 = _mm256_fmadd_ps(wv[1], _mm256_loadu_ps(oe - W), bv);
    __m256 a2 = _mm256_mul_ps(wv[2], _mm256_loadu_ps(oo - W));
    a0 = _mm256_fmadd_ps(wv[3], _mm256_loadu_ps(eo - 1), a0);
    a1 = _mm256_fmadd_ps(wv[4], _mm256_loadu_ps(ee), a1);
    a2 = _mm256_fmadd_ps(wv[5], _mm256_loadu_ps(eo), a2);
    a0 = _mm256_fmadd_ps(wv[6], _mm256_loadu_ps(oo - 1), a0);
    a1 = _mm256_fmadd_ps(wv[7], _mm256_loadu_ps(oe), a1);
    a2 = _mm256_fmadd_ps(wv[8], _mm256_loadu_ps(oo), a2);
    return _mm256_add_ps(_mm256_add_ps(a1, a2), _mm256_andnot_ps(_mm256_load_ps(fm), a0));
}

/* planes p0 .. p1 - 1. DIRECT: float32 output with no activation or ReLU (RELU), stored from the
   registers; else each plane goes through the scratch output plane, then the activation and the
   float32 / bfloat16 store. */
OP_INLINE void op_dw8f(const op_dw_ctx *c, int64_t p0, int64_t p1, float *OP_RESTRICT s,
                       const int S, const int BF16, const int DIRECT, const int RELU)
{
    const op_conv_desc *d = c->d;
    const int64_t OW = d->ow, OHW = d->oh * OW, OC = d->oc, lead = op_dw8f_lead(d);
    const int64_t ce = op_dw8f_copy_elems(d), ps = op_dw8f_phase(d), W = S == 1 ? d->w : OW;
    float *ob = s + 2 * ce;
    const int64_t P = c->fperiod;
    op_dw8f_zero_leads(d, s, S);
    /* the input planes (n * C + oc / mult) of output planes p and p + 1: the next input plane
       after an image's last output plane or every mult output planes */
    int64_t oc = p0 % OC, xp = p0 / OC * d->c + oc / c->mult, oc1 = oc + 1 == OC ? 0 : oc + 1;
    int64_t xp1 = xp + (oc1 == 0 || c->mult == 1 || oc1 % c->mult == 0);
    op_dw8f_copy(c, xp, s, S, BF16);
    for (int64_t p = p0; p < p1; p++) {
        const float *q = s + ((p - p0) & 1) * ce + lead;
        /* float32 at stride 1: the next plane copied one vector per output block below, its loads
           among the FMAs; else here, before them */
        const int ilv = S == 1 && !BF16 && p + 1 < p1;
        if (p + 1 < p1 && !ilv) op_dw8f_copy(c, xp1, s + ((p + 1 - p0) & 1) * ce, S, BF16);
        __m256 wv[9];
        for (int t = 0; t < 9; t++) wv[t] = _mm256_broadcast_ss(c->w + oc * 9 + t);
        const __m256 bv = _mm256_set1_ps(c->bias ? c->bias[oc] : 0.0f);
        float *y = DIRECT ? (float *)c->y + p * OHW : ob;
        int64_t g = 0, k = 0;  /* k: the block's place in the column period */
        if (ilv) {
            /* (as op_dw8f_copy: the copy as a loop of its own before the blocks stalled on its
               input loads, perf: 27% of the time for 28 x 28 planes; Zen 3, float32, x the copy
               first, in one process, 2026-12-07: 28 x 28 and 14 x 14 planes 1.15-1.27 at 1
               thread, 1.05-1.19 at 2, 7 x 7 even; the same for stride 2's phase copy, two of its
               steps per block or a row pair per output row, measured 0.5-0.9) */
            const float *xn = (const float *)c->x + xp1 * OHW;
            float *qn = s + ((p + 1 - p0) & 1) * ce + lead;
            for (; g + 8 <= OHW; g += 8, k = k + 1 == P ? 0 : k + 1) {
                _mm256_storeu_ps(qn + g, _mm256_loadu_ps(xn + g));
                __m256 v = op_dw8f_blk(q, g, W, ps, wv, bv, c->fm8[k][0], S);
                if (RELU) v = _mm256_max_ps(_mm256_setzero_ps(), v);
                _mm256_storeu_ps(y + g, v);
            }
            for (int64_t i = g; i < OHW + W + 16; i += 8)  /* the plane's last elements, zeros */
                _mm256_storeu_ps(qn + i, op_dw8_ldp(xn, 0, i, OHW, 0));
        }
        for (; g + 8 <= OHW; g += 8, k = k + 1 == P ? 0 : k + 1) {
            __m256 v = op_dw8f_blk(q, g, W, ps, wv, bv, c->fm8[k][0], S);
            if (RELU) v = _mm256_max_ps(_mm256_setzero_ps(), v);
            _mm256_storeu_ps(y + g, v);
        }
        if (g < OHW) {
            __m256 v = op_dw8f_blk(q, g, W, ps, wv, bv, c->fm8[k][0], S);
            if (RELU) v = _mm256_max_ps(_mm256_setzero_ps(), v);
            op_dw8_st(y + g, v, OHW - g);
        }
        if (!DIRECT) {
            op_dw_act_store(ob, OHW, c->act);
            if (c->ybf16) op_dw_put_bf16(c, p * OHW, ob, OHW);
            else memcpy((float *)c->y + p * OHW, ob, sizeof(float) * (size_t)OHW);
        }
        oc = oc1;
        xp = xp1;
        oc1 = oc + 1 == OC ? 0 : oc + 1;
        xp1 = xp + (oc1 == 0 || c->mult == 1 || oc1 % c->mult == 0);
    }
}

/* [stride - 1][input float32 / bfloat16][float32 output with no activation / ReLU, other (through
   the output plane)] */
#define OP_DW8F_FN(NAME, S, BF16, DIRECT, RELU)                                                   \
    static OP_NOINLINE void NAME(const op_dw_ctx *c, int64_t p0, int64_t p1, float *s)           \
    {                                                                                             \
        op_dw8f(c, p0, p1, s, S, BF16, DIRECT, RELU);                                             \
    }
#define OP_DW8F_STRIDE(S)                                                                         \
    OP_DW8F_FN(op_dw8f_s##S##_f32, S, 0, 1, 0)                                                    \
    OP_DW8F_FN(op_dw8f_s##S##_f32_relu, S, 0, 1, 1)                                               \
    OP_DW8F_FN(op_dw8f_s##S##_f32_buf, S, 0, 0, 0)                                                \
    OP_DW8F_FN(op_dw8f_s##S##_bf16, S, 1, 1, 0)                                                   \
    OP_DW8F_FN(op_dw8f_s##S##_bf16_relu, S, 1, 1, 1)                                              \
    OP_DW8F_FN(op_dw8f_s##S##_bf16_buf, S, 1, 0, 0)
OP_DW8F_STRIDE(1)
OP_DW8F_STRIDE(2)
static void (*const op_dw8f_kernels[2][2][3])(const op_dw_ctx *, int64_t, int64_t, float *) = {
    {{op_dw8f_s1_f32, op_dw8f_s1_f32_relu, op_dw8f_s1_f32_buf},
     {op_dw8f_s1_bf16, op_dw8f_s1_bf16_relu, op_dw8f_s1_bf16_buf}},
    {{op_dw8f_s2_f32, op_dw8f_s2_f32_relu, op_dw8f_s2_f32_buf},
     {op_dw8f_s2_bf16, op_dw8f_s2_bf16_relu, op_dw8f_s2_bf16_buf}}};
#endif

OP_INLINE void op_dw_fma_c(float *OP_RESTRICT acc, const float *OP_RESTRICT wr,
                            const void *OP_RESTRICT xv, int64_t C, int64_t mult, const int BF16)
{
    if (mult == 1) {
        if (BF16) {
            const uint16_t *OP_RESTRICT xb = (const uint16_t *)xv;
            for (int64_t i = 0; i < C; i++) {
                const uint32_t u = (uint32_t)xb[i] << 16;
                float f;
                memcpy(&f, &u, sizeof f);
                acc[i] += wr[i] * f;
            }
        } else {
            const float *OP_RESTRICT xf = (const float *)xv;
            for (int64_t i = 0; i < C; i++) acc[i] += wr[i] * xf[i];
        }
    } else {
        for (int64_t i = 0; i < C; i++) {
            const float x = op_conv_ld(xv, i, BF16);
            for (int64_t j = 0; j < mult; j++) acc[i * mult + j] += wr[i * mult + j] * x;
        }
    }
}

OP_INLINE void op_dw_nhwc_row(const op_dw_ctx *c, int64_t task, float *rowbuf, const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t n = task / d->oh, oh = task % d->oh;
    const int64_t C = d->c, OC = d->oc, H = d->h, W = d->w, mult = c->mult;
    const int64_t esz = BF16 ? 2 : 4;
    const char *X = (const char *)c->x;
    const float *bias = c->bias, *wt = c->w;
    const int act = c->act;
    for (int64_t ow = 0; ow < d->ow; ow++) {
        const int64_t yoff = ((n * d->oh + oh) * d->ow + ow) * OC;
        /* float32 output: accumulate in place; bfloat16: in the thread's row, then round */
        float *OP_RESTRICT acc = c->ybf16 ? rowbuf : (float *)c->y + yoff;
        if (bias)
            for (int64_t i = 0; i < OC; i++) acc[i] = bias[i];
        else
            for (int64_t i = 0; i < OC; i++) acc[i] = 0.0f;
        for (int64_t ki = 0; ki < d->kh; ki++) {
            const int64_t ih = oh * d->sh - d->pt + ki * d->dh;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kj = 0; kj < d->kw; kj++) {
                const int64_t iw = ow * d->sw - d->pl + kj * d->dw;
                if (iw < 0 || iw >= W) continue;
                op_dw_fma_c(acc, wt + (ki * d->kw + kj) * OC, X + ((n * H + ih) * W + iw) * C * esz,
                            C, mult, BF16);
            }
        }
        op_dw_act_store(acc, OC, act);
        if (c->ybf16) op_dw_put_bf16(c, yoff, acc, OC);
    }
}

#if defined(OP_HAS_AVX512)
/* ---------------------------------------------------------------- NHWC, AVX-512 (3x3, multiplier 1, stride 1 or 2 along W)

   One task is one output row. Channels are the vector axis (blocks of 32 channels, two adjacent
   cache lines per pixel, then 16 and a masked tail); the block's KH KW weight vectors and the bias
   stay in registers while 4 (8 with 16 channels) output pixels accumulate in registers too: each input pixel vector is loaded (widened) once per kernel
   row and feeds every output of the block that reads it (the compiler merges the equal loads of the
   unrolled block). Output pixels whose window crosses the left/right padding take the one-pixel
   loop with per-tap checks; kernel rows in the top/bottom padding are skipped. */
enum { OP_DW_NHWC_OWB = 8, OP_DW_NHWC_OWB2 = 4 };  /* output pixels per block: 1 / 2 channel vectors */

/* Output pixels ow0 .. ow0 + NO - 1 of row oh, channels c0 .. c0 + 15 (lanes cm), stride S along
   W (dilation 1 along W). CHECK: test every tap column against the input (border pixels), else
   all are inside. Input column t of the block (t = j S + kj) is loaded once per kernel row and
   feeds every (output j, tap kj) that reads it. */
OP_INLINE void op_dw_nhwc_px(const op_dw_ctx *c, const __m512 *wv, const __m512 *bv, int64_t xrow0,
                             int64_t ih0, int64_t yoff, int64_t ow0, int64_t c0, const __mmask16 *cm,
                             const int NO, const int NCV, const int KH, const int KW, const int S,
                             const int CHECK, const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t C = d->c, W = d->w, H = d->h, dh = d->dh;
    const int64_t iw0 = ow0 * S - d->pl;  /* input column of t = 0 */
    const int NT = (NO - 1) * S + KW;  /* input columns of the block */
    __m512 acc[OP_DW_NHWC_OWB][2];  /* (every loop unrolled: the accumulators live in registers) */
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++)
        for (int q = 0; q < NCV; q++) acc[j][q] = bv[q];
#pragma GCC unroll 3
    for (int ki = 0; ki < KH; ki++) {
        const int64_t ih = ih0 + ki * dh;
        if (ih < 0 || ih >= H) continue;
        const int64_t xr = xrow0 + (ih * W + iw0) * C + c0;  /* element offset of column t = 0 */
#pragma GCC unroll 24
        for (int t = 0; t < NT; t++) {
            if (CHECK && (iw0 + t < 0 || iw0 + t >= W)) continue;
#pragma GCC unroll 2
            for (int q = 0; q < NCV; q++) {
                const __m512 v = op_dw_vld(c->x, xr + t * C + 16 * q, cm[q], BF16);
#pragma GCC unroll 8
                for (int j = 0; j < NO; j++) {
                    const int kj = t - j * S;
                    if (kj >= 0 && kj < KW)
                        acc[j][q] = _mm512_fmadd_ps(wv[q * 9 + ki * KW + kj], v, acc[j][q]);
                }
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++)
        for (int q = 0; q < NCV; q++)
            op_dw_vst(c->y, yoff + (ow0 + j) * d->oc + c0 + 16 * q, cm[q], acc[j][q], c->act, YB);
}

/* one output row for channels c0 .. c0 + 16 NCV - 1 (NO output pixels per register block) */
OP_INLINE void op_dw_nhwc_cb(const op_dw_ctx *c, int64_t xrow0, int64_t ih0, int64_t yoff, int64_t lo,
                             int64_t hi, int64_t c0, const int NO, const int NCV, const int KH,
                             const int KW, const int S, const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t C = d->c, OW = d->ow;
    __mmask16 cm[2];
    __m512 wv[18], bv[2];
    for (int q = 0; q < NCV; q++) {
        cm[q] = op_dw_lanes(c0 + 16 * q, C);  /* (lanes past C off at the tail) */
        for (int t = 0; t < KH * KW; t++) wv[q * 9 + t] = _mm512_maskz_loadu_ps(cm[q], c->w + t * C + c0 + 16 * q);
        bv[q] = c->bias ? _mm512_maskz_loadu_ps(cm[q], c->bias + c0 + 16 * q) : _mm512_setzero_ps();
    }
    int64_t ow = 0;
    for (; ow < lo; ow++) op_dw_nhwc_px(c, wv, bv, xrow0, ih0, yoff, ow, c0, cm, 1, NCV, KH, KW, S, 1, BF16, YB);
    for (; ow + NO <= hi; ow += NO)
        op_dw_nhwc_px(c, wv, bv, xrow0, ih0, yoff, ow, c0, cm, NO, NCV, KH, KW, S, 0, BF16, YB);
    for (; ow < hi; ow++) op_dw_nhwc_px(c, wv, bv, xrow0, ih0, yoff, ow, c0, cm, 1, NCV, KH, KW, S, 0, BF16, YB);
    for (; ow < OW; ow++) op_dw_nhwc_px(c, wv, bv, xrow0, ih0, yoff, ow, c0, cm, 1, NCV, KH, KW, S, 1, BF16, YB);
}

OP_INLINE void op_dw_nhwc_row16(const op_dw_ctx *c, int64_t task, const int KH, const int KW,
                                const int S, const int BF16, const int YB)
{
    const op_conv_desc *d = c->d;
    const int64_t n = task / d->oh, oh = task % d->oh, C = d->c, OW = d->ow, W = d->w;
    const int64_t ih0 = oh * d->sh - d->pt, xrow0 = n * d->h * W * C;
    const int64_t yoff = (n * d->oh + oh) * OW * d->oc;
    /* output columns whose every tap column is inside: ow in [lo, hi) */
    int64_t lo = op_cdiv64(d->pl, S), hi = (W - 1 + d->pl - (KW - 1)) / S + 1;
    if (W - 1 + d->pl - (KW - 1) < 0) hi = 0;
    lo = op_min64(lo, OW);
    hi = op_max64(lo, op_min64(hi, OW));
    int64_t c0 = 0;
    for (; c0 + 32 <= C; c0 += 32)  /* two channel vectors (two adjacent cache lines per pixel) */
        op_dw_nhwc_cb(c, xrow0, ih0, yoff, lo, hi, c0, OP_DW_NHWC_OWB2, 2, KH, KW, S, BF16, YB);
    for (; c0 < C; c0 += 16)
        op_dw_nhwc_cb(c, xrow0, ih0, yoff, lo, hi, c0, OP_DW_NHWC_OWB, 1, KH, KW, S, BF16, YB);
}

#define OP_DW_NHWC16(NAME, S, BF16, YB)                                                           \
    static OP_NOINLINE void NAME(const op_dw_ctx *c, int64_t task) { op_dw_nhwc_row16(c, task, 3, 3, S, BF16, YB); }
OP_DW_NHWC16(op_dw_nhwc3_s1_f32, 1, 0, 0)
OP_DW_NHWC16(op_dw_nhwc3_s1_bf16, 1, 1, 0)
OP_DW_NHWC16(op_dw_nhwc3_s1_bf16_yb, 1, 1, 1)
OP_DW_NHWC16(op_dw_nhwc3_s2_f32, 2, 0, 0)
OP_DW_NHWC16(op_dw_nhwc3_s2_bf16, 2, 1, 0)
OP_DW_NHWC16(op_dw_nhwc3_s2_bf16_yb, 2, 1, 1)
typedef void (*op_dw_nhwc_fn)(const op_dw_ctx *, int64_t);
/* 3x3 kernels, [stride along W - 1][io] */
static const op_dw_nhwc_fn op_dw_nhwc3_kernels[2][3] = {
    {op_dw_nhwc3_s1_f32, op_dw_nhwc3_s1_bf16, op_dw_nhwc3_s1_bf16_yb},
    {op_dw_nhwc3_s2_f32, op_dw_nhwc3_s2_bf16, op_dw_nhwc3_s2_bf16_yb}};
#endif

#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
/* ------------------------------------------------ NHWC 3x3, AVX2 builds (OP_DW_AVX2_NHWC)

   3x3 kernels with multiplier 1, stride 1 or 2 along W (any stride, dilation and padding along H).
   One task row is one output row, swept once per block of 16 channels (two vectors: a whole cache
   line per pixel; then 8, then a tail of C % 8 that loads and stores only its lanes). Output pixels
   go 4 at a time with 16 channels, 8 with 8 (then 4, 2, 1), their accumulators in registers; per
   kernel row the block loads its weight vectors (from L1) and each input vector once, which feeds
   every output of the block that reads it. Each output is one FMA chain, bias first, then the taps
   in row-major order (as the NCHW AVX2 kernel). Pixels whose window crosses the left / right
   padding take the one-pixel path with per-tap checks; kernel rows in the top / bottom padding
   are skipped (a non-finite weight there is op_dw_pad_nan's). While a row runs, the input rows the
   next row adds and the next output row are prefetched, a share per channel block (at batch 8
   they come from memory). bfloat16 output: the row is kept in float32 scratch, then rounded
   (op_dw_put_bf16).
   Measured on Zen 3 (MobileNet-v2 layers, x torch in one process through ctypes copies of the
   builds, 2026-12-06): the compiler-vectorised row loop (op_dw_nhwc_row) was 0.5-1.3x torch at
   2 threads, batch 1 and 8; this kernel 2-5x that loop. Whole-row sweeps measured faster than
   tiles of the row sized to L1 (C 144 56 x 56: 29 against 22 GFLOP/s, 1 thread); the prefetch
   1.1-2x at batch 8 and 2 threads, 0.9-0.95x at batch 1 and 1 thread; 16 channels per sweep
   1.05-1.5x 8 except at batch 8 on 56 x 56 planes (0.85-0.9); an activation's temporaries out of
   line (op_dw8n_act) 1.1-1.6x (they had the accumulators spilled to the stack). */
enum { OP_DW_AVX2_NHWC = 22, OP_DW8N_OWB = 8 };

/* 8 channels at element offset off (TAIL: lanes m only, the others 0) */
OP_INLINE __m256 op_dw8n_ld(const void *x, int64_t off, __m256i m, int nl, const int TAIL,
                            const int BF16)
{
    if (!TAIL) return op_dw8_ld(x, off, BF16);
    if (!BF16) return _mm256_maskload_ps((const float *)x + off, m);
    uint16_t u[8] = {0};
    memcpy(u, (const uint16_t *)x + off, sizeof u[0] * (size_t)nl);
    return op_dw8_ld(u, 0, 1);
}

OP_INLINE void op_dw8n_st(float *p, __m256 v, __m256i m, int act, const int TAIL)
{
    if (act == OP_ACT_RELU) v = _mm256_max_ps(_mm256_setzero_ps(), v);  /* as op_dw_act_store */
    if (TAIL) _mm256_maskstore_ps(p, m, v);
    else _mm256_storeu_ps(p, v);
}

/* an activation other than ReLU on n vectors (out of line: inlined into every pixel block, its
   temporaries made the compiler spill the blocks' accumulators) */
static OP_NOINLINE void op_dw8n_act(__m256 *v, int n, int act)
{
    int j = 0;
    for (; j + 4 <= n; j += 4) op_m256_act_n(4, v + j, act);
    for (; j < n; j++) op_m256_act_n(1, v + j, act);
}

/* Output pixels ow0 .. ow0 + NO - 1 of one row, channels c0 .. c0 + 8 NCV - 1 (TAIL: NCV 1, lanes
   m, nl of them). rp[ki]: kernel row ki's input row at column 0, channel c0 (NULL: a row in the
   padding; ALL: none is); wp, bp: the weights (KH, KW, OC) and the bias (or NULL) at channel c0;
   y: output pixel 0, channel c0. CHECK: test each tap column against the input (border pixels).
   Everything the loops read is in arguments (a store to y could alias a field of the context: the
   compiler reloaded them after each store). */
OP_INLINE void op_dw8n_px(const char *const *rp, int64_t C, int64_t W, int64_t pl, const float *wp,
                          const float *bp, float *y, int64_t OC, int act, int64_t ow0, __m256i m,
                          int nl, const int NO, const int NCV, const int S, const int CHECK,
                          const int ALL, const int TAIL, const int BF16)
{
    const int64_t iw0 = ow0 * S - pl;  /* input column of t = 0 */
    const int NT = (NO - 1) * S + 3;
    const int64_t esz = BF16 ? 2 : 4;
    __m256 acc[OP_DW8N_OWB];  /* acc[j * NCV + q]: output pixel j, channel vector q */
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++)  /* (the bias from memory: one register fewer to hold) */
        for (int q = 0; q < NCV; q++)
            acc[j * NCV + q] = bp ? op_dw8n_ld(bp, 8 * q, m, nl, TAIL, 0) : _mm256_setzero_ps();
#pragma GCC unroll 3
    for (int ki = 0; ki < 3; ki++) {
        if (!ALL && !rp[ki]) continue;
        const char *row = rp[ki] + iw0 * C * esz;
        __m256 wv[6];  /* the kernel row's weights (from L1: three loads per vector and row) */
#pragma GCC unroll 3
        for (int kj = 0; kj < 3; kj++)
            for (int q = 0; q < NCV; q++)
                wv[kj * NCV + q] = op_dw8n_ld(wp, (ki * 3 + kj) * OC + 8 * q, m, nl, TAIL, 0);
#pragma GCC unroll 17
        for (int t = 0; t < NT; t++) {
            if (CHECK && (iw0 + t < 0 || iw0 + t >= W)) continue;
#pragma GCC unroll 2
            for (int q = 0; q < NCV; q++) {
                const __m256 v = op_dw8n_ld(row, t * C + 8 * q, m, nl, TAIL, BF16);
#pragma GCC unroll 8
                for (int j = 0; j < NO; j++) {
                    const int kj = t - j * S;
                    if (kj >= 0 && kj < 3)
                        acc[j * NCV + q] = _mm256_fmadd_ps(wv[kj * NCV + q], v, acc[j * NCV + q]);
                }
            }
        }
    }
    if (act != OP_ACT_NONE && act != OP_ACT_RELU) {  /* (through a copy: acc's address not taken,
                                                        so it stays in registers) */
        __m256 t[OP_DW8N_OWB];
        for (int j = 0; j < NO * NCV; j++) t[j] = acc[j];
        op_dw8n_act(t, NO * NCV, act);
        for (int j = 0; j < NO * NCV; j++) acc[j] = t[j];
    }
#pragma GCC unroll 8
    for (int j = 0; j < NO; j++)
        for (int q = 0; q < NCV; q++)
            op_dw8n_st(y + (ow0 + j) * OC + 8 * q, acc[j * NCV + q], m, act, TAIL);
}

/* one output row for channels c0 .. c0 + 8 NCV - 1 (with a tail: c0 .. c0 + nl - 1); [lo, hi):
   the pixels whose taps are all inside the input */
OP_INLINE void op_dw8n_span(const op_dw_ctx *c, const char *const *rp, float *y, int64_t lo,
                            int64_t hi, int64_t c0, int nl, const int NCV, const int S,
                            const int ALL, const int TAIL, const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t C = d->c, W = d->w, pl = d->pl, OC = d->oc;
    const int act = c->act, NB = OP_DW8N_OWB / NCV;
    const __m256i m = op_lanes8(0, 0, nl);
    const float *wv = c->w + c0;
    const float *bv = c->bias ? c->bias + c0 : NULL;
    const int64_t OW = d->ow;
    int64_t ow = 0;
#define OP_DW8N_PX(NO, CHECK) \
    op_dw8n_px(rp, C, W, pl, wv, bv, y, OC, act, ow, m, nl, NO, NCV, S, CHECK, ALL, TAIL, BF16)
    for (; ow < lo; ow++) OP_DW8N_PX(1, 1);
    for (; ow + NB <= hi; ow += NB) OP_DW8N_PX(NB, 0);
    if (NB > 4 && ow + 4 <= hi) {  /* the rest by 4, 2 and 1 pixels */
        OP_DW8N_PX(4, 0);
        ow += 4;
    }
    if (ow + 2 <= hi) {
        OP_DW8N_PX(2, 0);
        ow += 2;
    }
    for (; ow < hi; ow++) OP_DW8N_PX(1, 0);
    for (; ow < OW; ow++) OP_DW8N_PX(1, 1);
#undef OP_DW8N_PX
}

/* one output row (task row r = n * OH + oh); buf: OW * OC floats (bfloat16 output) */
OP_INLINE void op_dw8n_row(const op_dw_ctx *c, int64_t r, float *buf, const int S, const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t n = r / d->oh, oh = r % d->oh, C = d->c, OW = d->ow, W = d->w;
    const int64_t esz = BF16 ? 2 : 4, yoff = r * OW * d->oc;
    float *y = c->ybf16 ? buf : (float *)c->y + yoff;
    const char *rp[3];  /* the kernel rows' input rows at channel 0 (NULL: in the padding) */
    int all = 1;
    for (int ki = 0; ki < 3; ki++) {
        const int64_t ih = oh * d->sh - d->pt + ki * d->dh;
        rp[ki] = ih >= 0 && ih < d->h ? (const char *)c->x + ((n * d->h + ih) * W) * C * esz : NULL;
        all &= rp[ki] != NULL;
    }
    int64_t lo = op_cdiv64(d->pl, S), hi = (W - 1 + d->pl - 2) / S + 1;
    if (W - 1 + d->pl - 2 < 0) hi = 0;
    lo = op_min64(lo, OW);
    hi = op_max64(lo, op_min64(hi, OW));
    const int64_t cv = C / 8 * 8;
    /* the input rows the next output row reads and this one does not: prefetched a share per
       channel block (they come from memory on large batches) */
    const char *pf = NULL;
    int64_t pfn = 0;
    if (r + 1 < d->n * d->oh) {
        const int64_t n1 = (r + 1) / d->oh, oh1 = (r + 1) % d->oh;
        int64_t i0 = oh1 * d->sh - d->pt, i1 = i0 + 2 * d->dh;  /* first and last rows */
        if (n1 == n) i0 = op_max64(i0, oh * d->sh - d->pt + 2 * d->dh + 1);
        i0 = op_max64(i0, 0);
        i1 = op_min64(i1, d->h - 1);
        if (i1 >= i0) {
            pf = (const char *)c->x + (n1 * d->h + i0) * W * C * esz;
            pfn = (i1 - i0 + 1) * W * C * esz;
        }
    }
    const int64_t nb = op_cdiv64(C, 8), pfs = op_roundup64(op_cdiv64(pfn, nb), 64);
    const char *yp = !c->ybf16 && r + 1 < d->n * d->oh ? (const char *)(y + OW * d->oc) : NULL;
    const int64_t ypn = OW * d->oc * 4, yps = op_roundup64(op_cdiv64(ypn, nb), 64);
    for (int64_t c0 = 0; c0 < C;) {
        const int nv = c0 + 16 <= cv ? 2 : 1;  /* channel vectors of this sweep */
        if (pf) {
            const int64_t o0 = (c0 / 8) * pfs, o1 = op_min64(pfn, o0 + pfs * nv);
            for (int64_t o = o0; o < o1; o += 64) _mm_prefetch(pf + o, _MM_HINT_T1);
        }
        if (yp) {
            const int64_t o0 = (c0 / 8) * yps, o1 = op_min64(ypn, o0 + yps * nv);
            for (int64_t o = o0; o < o1; o += 64) _mm_prefetch(yp + o, _MM_HINT_T1);
        }
        const char *rc[3];
        for (int ki = 0; ki < 3; ki++) rc[ki] = rp[ki] ? rp[ki] + c0 * esz : NULL;
        if (nv == 2) {  /* two channel vectors: a whole cache line per pixel */
            if (all) op_dw8n_span(c, rc, y + c0, lo, hi, c0, 8, 2, S, 1, 0, BF16);
            else op_dw8n_span(c, rc, y + c0, lo, hi, c0, 8, 2, S, 0, 0, BF16);
            c0 += 16;
        } else if (c0 < cv) {
            if (all) op_dw8n_span(c, rc, y + c0, lo, hi, c0, 8, 1, S, 1, 0, BF16);
            else op_dw8n_span(c, rc, y + c0, lo, hi, c0, 8, 1, S, 0, 0, BF16);
            c0 += 8;
        } else {
            op_dw8n_span(c, rc, y + c0, lo, hi, c0, (int)(C - cv), 1, S, 0, 1, BF16);
            c0 = C;
        }
    }
    if (c->ybf16) op_dw_put_bf16(c, yoff, buf, OW * d->oc);
}

#define OP_DW8N(NAME, S, BF16)                                                                   \
    static OP_NOINLINE void NAME(const op_dw_ctx *c, int64_t r, float *b)                        \
    {                                                                                             \
        op_dw8n_row(c, r, b, S, BF16);                                                            \
    }
OP_DW8N(op_dw8n_s1_f32, 1, 0)
OP_DW8N(op_dw8n_s1_bf16, 1, 1)
OP_DW8N(op_dw8n_s2_f32, 2, 0)
OP_DW8N(op_dw8n_s2_bf16, 2, 1)
/* [stride along W - 1][bfloat16 input] */
static void (*const op_dw8n_kernels[2][2])(const op_dw_ctx *, int64_t, float *) = {
    {op_dw8n_s1_f32, op_dw8n_s1_bf16}, {op_dw8n_s2_f32, op_dw8n_s2_bf16}};
#endif

/* Which specialisation of the AVX-512 kernels: 0 float32 in and out, 1 bfloat16 in and float32
   out, 2 bfloat16 in and out (a bfloat16 output always comes from bfloat16 input: the promotion
   rules, and op_conv2d_dw_f32 rejects the other pairing). */
OP_INLINE int op_dw_io(const op_dw_ctx *c) { return c->bf16 ? (c->ybf16 ? 2 : 1) : 0; }

static void op_dw_task(void *ctx, int64_t task, int tid)
{
    const op_dw_ctx *c = (const op_dw_ctx *)ctx;
    float *buf = c->scratch ? c->scratch + (size_t)tid * (size_t)c->scratch_elems : NULL;
    if (c->d->nhwc) {  /* output rows r0 .. r1 - 1 (row r = n * OH + oh), in order */
        const int64_t rows = c->d->n * c->d->oh;
        const int64_t r0 = task * c->chunk, r1 = op_min64(rows, r0 + c->chunk);
        for (int64_t r = r0; r < r1; r++) {
#if defined(OP_HAS_AVX512)
            if (c->direct3 == 4) {
                op_dw_nhwc3_kernels[c->d->sw - 1][op_dw_io(c)](c, r);
                continue;
            }
#endif
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
            if (c->direct3 == OP_DW_AVX2_NHWC) {
                op_dw8n_kernels[c->d->sw - 1][c->bf16](c, r, buf);
                continue;
            }
#endif
            if (c->bf16) op_dw_nhwc_row(c, r, buf, 1);
            else op_dw_nhwc_row(c, r, buf, 0);
        }
        return;
    }
    const int64_t P = c->d->n * c->d->oc;
    const int64_t p0 = task * c->chunk, p1 = op_min64(P, p0 + c->chunk);
#if defined(OP_HAS_AVX512)
    if (c->direct3 == 7) {
        if (c->ybf16) op_dw3_eo_bf16_yb(c, p0, p1);
        else op_dw3_eo_bf16(c, p0, p1);
        return;
    }
    if (c->direct3 == 13) {
        (c->ybf16 ? op_dw3_s1r_w_bf16_yb : op_dw3_s1r_w_bf16)(c, p0, p1, buf);
        return;
    }
    if (c->direct3 == 10) {
        (c->ybf16 ? op_dw3_rowv_w1_yb : op_dw3_rowv_w1)(c, p0, p1, buf);
        return;
    }
    if (c->direct3 == 11) {
        op_dw3_r8_kernels[op_dw_io(c)](c, p0, p1);
        return;
    }
    if (c->direct3 == 12) {
        op_dw3_s2n_kernels[op_dw_io(c)](c, p0, p1);
        return;
    }
    if (c->direct3 == 8) {
        (c->act != OP_ACT_NONE ? op_dw3_s1r_f32 : op_dw3_s1r_f32_noact)(c, p0, p1);
        return;
    }
    if (c->direct3 == 9) {
        op_dw3_s2_kernels[c->act != OP_ACT_NONE][op_dw_io(c)](c, p0, p1);
        return;
    }
    if (c->direct3 == 5) {
        op_dw3_rowv_kernels[op_cdiv64(c->d->w, 16) - 1][op_dw_io(c)](c, p0, p1);
        return;
    }
    if (c->direct3 >= 2) {
        op_dw3_flat_kernels[c->direct3 - 2][op_dw_io(c)](c, p0, p1, buf);
        return;
    }
    if (c->direct3) {
        op_dw3_kernels[c->d->sw - 1][op_dw_io(c)](c, p0, p1);
        return;
    }
#endif
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
    if (c->direct3 == OP_DW_AVX2_3X3) {
        const int mode = op_dw8_inplace(c->d, c->bf16) ? 0 : c->bf16 ? 1 : 2;
        op_dw8_kernels[c->d->sw - 1][mode](c, p0, p1, buf);
        return;
    }
    if (c->direct3 == OP_DW_AVX2_FLAT) {
        const int out = c->ybf16 ? 2 : c->act == OP_ACT_NONE ? 0 : c->act == OP_ACT_RELU ? 1 : 2;
        op_dw8f_kernels[c->d->sw - 1][c->bf16][out](c, p0, p1, buf);
        return;
    }
#endif
    const int64_t OC = c->d->oc;
    int64_t n = p0 / OC, oc = p0 % OC;
    for (int64_t p = p0; p < p1; p++) {
        if (c->bf16) op_dw_nchw_plane(c, n, oc, buf, 1);
        else op_dw_nchw_plane(c, n, oc, buf, 0);
        if (++oc == OC) { oc = 0; n++; }
    }
}

/* Non-finite weights and the zero padding. Several kernels skip the taps that fall in the padding
   (rows above / below the input, columns left / right of it) instead of multiplying their zeros,
   and the flat kernel drops its border-column lanes; with a finite weight that is the same sum, but
   an Inf or NaN weight times a padding zero is NaN in the reference and in PyTorch, and skipping it
   left a finite output. So when any weight is non-finite (one pass over the weights per call, here)
   the call ends with op_dw_pad_nan: every output that reads such a weight at a padding position gets
   that product (w * 0, a NaN) added, as the full sum would have it (the activation of a NaN is NaN).
   Outputs already NaN stay NaN. */
static int op_dw_weights_finite(const void *w, int w_bf16, int64_t nw)
{
    unsigned bad = 0;
    if (w_bf16) {
        const uint16_t *u = (const uint16_t *)w;
        for (int64_t i = 0; i < nw; i++) bad |= (u[i] & 0x7F80u) == 0x7F80u;
    } else {
        const uint32_t *u = (const uint32_t *)w;
        for (int64_t i = 0; i < nw; i++) bad |= (u[i] & 0x7F800000u) == 0x7F800000u;
    }
    return !bad;
}

static void op_dw_pad_nan(const op_conv_desc *d, const void *w, int w_bf16, void *y, int y_bf16)
{
    const int64_t OC = d->oc, KH = d->kh, KW = d->kw, OH = d->oh, OW = d->ow;
    for (int64_t oc = 0; oc < OC; oc++)
        for (int64_t ki = 0; ki < KH; ki++)
            for (int64_t kj = 0; kj < KW; kj++) {
                /* weights: NCHW (OC, KH, KW), NHWC (KH, KW, OC) (as the kernels read them) */
                const int64_t wi = d->nhwc ? (ki * KW + kj) * OC + oc : (oc * KH + ki) * KW + kj;
                const float wv = w_bf16 ? op_bf16_to_f32_1(((const uint16_t *)w)[wi]) : ((const float *)w)[wi];
                if (isfinite(wv)) continue;
                const float add = wv * 0.0f;   /* the skipped product: NaN */
                for (int64_t n = 0; n < d->n; n++)
                    for (int64_t oh = 0; oh < OH; oh++) {
                        const int64_t ih = oh * d->sh - d->pt + ki * d->dh;
                        const int row_pad = ih < 0 || ih >= d->h;
                        for (int64_t ow = 0; ow < OW; ow++) {
                            const int64_t iw = ow * d->sw - d->pl + kj * d->dw;
                            if (!row_pad && iw >= 0 && iw < d->w) continue;
                            const int64_t yi = d->nhwc ? ((n * OH + oh) * OW + ow) * OC + oc
                                                       : ((n * OC + oc) * OH + oh) * OW + ow;
                            if (y_bf16) {
                                uint16_t *yb = (uint16_t *)y + yi;
                                *yb = op_f32_to_bf16_1(op_bf16_to_f32_1(*yb) + add);
                            } else {
                                ((float *)y)[yi] += add;
                            }
                        }
                    }
            }
}

int op_conv2d_dw_f32(const op_conv_desc *d, const void *x, int x_bf16, const void *w, int w_bf16,
                     const float *bias, void *y, int y_bf16, int act, int nthreads)
{
    if (y_bf16 && !x_bf16) return -3;  /* a bfloat16 output needs bfloat16 input (op_dw_io) */
    if (d->n <= 0 || d->oh <= 0 || d->ow <= 0 || d->oc <= 0) return 1;
    op_dw_ctx c;
    c.d = d;
    c.x = x;
    float *wf = NULL;  /* bfloat16 weights widened once per call, for the kernels that read float32 */
    c.w = w_bf16 ? NULL : (const float *)w;
    c.wb = NULL;
    c.bias = bias;
    c.y = y;
    c.act = act;
    c.bf16 = x_bf16;
    c.ybf16 = y_bf16;
    c.mult = d->oc / d->c;
    c.scratch = NULL;
    c.scratch_elems = 0;
    c.direct3 = 0;
#if defined(OP_HAS_AVX512)
    c.direct3 = !d->nhwc && d->kh == 3 && d->kw == 3 && d->dh == 1 && d->dw == 1 &&
                d->sh == d->sw && (d->sw == 1 || d->sw == 2);
    if (c.direct3 && d->sw == 1 && d->pt == 1 && d->pl == 1 && d->oh == d->h && d->ow == d->w &&
        d->h * d->w <= (x_bf16 ? OP_DW3_FLAT_MAX : OP_DW3_FLAT_MAX / 4))
        /* padding 1, output the size of the input: the flat kernel up to 64x64 planes (measured
           faster than the row kernel up to there), and further for bfloat16 input (the copy widens
           each element once instead of at each of its nine taps) */
        c.direct3 = 2;
    if (c.direct3 == 1 && d->sw == 2 && d->ow < OP_DW3_S2_P && d->w + d->pl <= 2 * OP_DW3_S2_P &&
        d->oh * OP_DW3_S2_P <= 16 * (int64_t)(sizeof c.fm0 / sizeof c.fm0[0]))
        c.direct3 = 3;  /* short output rows: the phase-plane kernel */
    /* rows of 9 to 112 columns, padding 1 left and right: whole rows in registers (measured faster
       than the flat kernel there, except for bfloat16 input up to 64 columns, where the flat
       kernel's widened copy wins) */
    if (c.direct3 && d->sw == 1 && d->pl == 1 && d->ow == d->w && d->w >= 9 && d->w <= 112 &&
        (!x_bf16 || d->w > 64))
        c.direct3 = 5;
    /* bfloat16 input, rows of more than 64 columns (where the whole-row kernel widened with a
       shuffle per 16 columns): even / odd columns, no shuffle (measured 11-14% faster on Zen 4 at
       112 columns). From 24 to 64 columns it measured 6-9% faster than the flat kernel on Zen 4
       only (one run each, not measured on Intel): the flat kernel stays there until a per-uarch
       choice can be measured. */
    if (c.direct3 && x_bf16 && d->sw == 1 && d->pl == 1 && d->ow == d->w && d->w > 64)
        c.direct3 = 7;
    /* the row-register kernels, where the caller asks for them (op_conv_desc.dw_rows: chosen per
       microarchitecture by registry.dw_row_kernels) and the geometry fits them */
    if (c.direct3 && (d->dw_rows & 1) && d->w <= OP_DW3_ZROW - 128) {
        if (d->sw == 1 && d->pl == 1 && d->ow == d->w && d->w <= 8) {
            c.direct3 = 11;  /* rows of <= 8 columns: one 256-bit vector per row (op_dw3_r8) */
        } else if (d->sw == 2 && d->pl == 1 && d->w <= 16 && d->ow <= 8) {
            c.direct3 = 12;  /* the same for stride 2 (op_dw3_s2n) */
        } else if (d->sw == 1 && d->pl == 1 && d->ow == d->w && x_bf16) {
            if (d->w >= 9 && d->w <= 16)
                c.direct3 = 10;  /* (wider bfloat16 rows keep the flat and even / odd kernels) */
            else if ((d->dw_rows & 2) && d->w > 16)
                c.direct3 = 13;  /* the plane widened, then float32 rows (op_dw3_s1r_w) */
        } else if (d->sw == 1 && d->pl == 1 && d->ow == d->w)
            c.direct3 = 8;
        else if (d->sw == 2 && d->pl <= 15 && d->w > 16)
            c.direct3 = 9;  /* (narrower rows: op_dw3_s2n or the default) */
    }
    if (d->nhwc && d->kh == 3 && d->kw == 3 && c.mult == 1 && d->dw == 1 && (d->sw == 1 || d->sw == 2))
        c.direct3 = 4;  /* NHWC: channel-vector kernel */
#endif
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
    if (!d->nhwc && d->kh == 3 && d->kw == 3 && d->dh == 1 && d->dw == 1 && d->sh == d->sw &&
        (d->sw == 1 || d->sw == 2))
        c.direct3 = op_dw8f_fits(d, x_bf16) ? OP_DW_AVX2_FLAT : OP_DW_AVX2_3X3;
    if (d->nhwc && d->kh == 3 && d->kw == 3 && c.mult == 1 && d->dw == 1 &&
        (d->sw == 1 || d->sw == 2))
        c.direct3 = OP_DW_AVX2_NHWC;  /* NHWC: channel-vector kernel (op_dw8n_row) */
#endif
    if (w_bf16) {
        if (!d->nhwc && c.direct3 && c.direct3 < OP_DW_AVX2_3X3) {
            c.wb = (const uint16_t *)w;  /* the NCHW 3x3 AVX-512 kernels read the bits (op_dw3_wv) */
        } else {
            const int64_t nw = d->oc * d->kh * d->kw;
            wf = (float *)op_aligned_alloc(sizeof(float) * (size_t)nw);
            if (!wf) return -1;
            for (int64_t i = 0; i < nw; i++) wf[i] = op_bf16_to_f32_1(((const uint16_t *)w)[i]);
            c.w = wf;
        }
    }
    const int64_t nplanes = d->n * d->oc, plane = d->oh * d->ow;
    const double flops = 2.0 * (double)nplanes * (double)plane * (double)(d->kh * d->kw);
    /* the pool's workers are awake between calls (threads.c): a second thread pays from about
       0.5 MFLOP (tens of microseconds) */
    int64_t T = (int64_t)(flops / 5e5) + 1;
    if (T > nthreads) T = nthreads;
    const int64_t units = d->nhwc ? d->n * d->oh : nplanes;
    if (T > units) T = units;
    if (T < 1) T = 1;
    /* NCHW: a task is a run of planes of about 4K outputs (per-task cost amortised), at least
       4 tasks per thread for balance */
    c.chunk = op_max64(1, 4096 / op_max64(1, plane));
    if (c.chunk > 1 && T > 1) c.chunk = op_max64(1, op_min64(c.chunk, nplanes / (4 * T)));
    /* NHWC: a task is a run of consecutive output rows, 4 runs per thread. Output row oh reads
       input rows oh * SH - PT + ki DH, most of which the row before it read: within one thread's
       run they come from its L2. With one row per task the threads took rows in turn, and each
       input row was read into both cores (sapphirerapids, 2 threads, MobileNet-v2 depthwise
       float32 NHWC, x torch paired in one process, 2026-12-04: batch 8 C 32 112 x 112
       0.71 -> 0.99, C 192 28 x 28 0.82 -> 1.02; batch 1 C 32 112 x 112 1.03 -> 1.27, C 144
       56 x 56 0.98 -> 1.31; bfloat16 batch 8 geomean of the 10 layers 0.95 -> 1.08). */
    if (d->nhwc) c.chunk = op_max64(1, units / (4 * T));
    const int64_t ntasks = op_cdiv64(d->nhwc ? units : nplanes, c.chunk);
#if defined(OP_HAS_AVX512)
    if (c.direct3 == 2) {
        c.scratch_elems = op_dw3_flat_scratch(d->w, d->h * d->w);
        int64_t col = 0;
        for (int64_t b = 0; b < op_cdiv64(d->h * d->w, 16); b++) {
            uint32_t m0 = 0, m2 = 0;
            for (int l = 0; l < 16; l++, col = col + 1 == d->w ? 0 : col + 1) {
                if (col != 0) m0 |= 1u << l;
                if (col != d->w - 1) m2 |= 1u << l;
            }
            c.fm0[b] = (uint16_t)m0;
            c.fm2[b] = (uint16_t)m2;
        }
    } else if (c.direct3 == 10 || c.direct3 == 13) {
        c.scratch_elems = 2 * (op_roundup64(d->h * d->w, 16) + 16);
    } else if (c.direct3 == 3) {
        c.scratch_elems = op_dw3_s2_scratch(d->oh);
        const int64_t G = d->oh * OP_DW3_S2_P;
        for (int64_t b = 0; b < op_cdiv64(G, 16); b++) {
            uint32_t m = 0;  /* grid lanes that are outputs: column < OW, index < G */
            for (int l = 0; l < 16; l++)
                if (b * 16 + l < G && (b * 16 + l) % OP_DW3_S2_P < d->ow) m |= 1u << l;
            c.fm0[b] = (uint16_t)m;
        }
    }
#endif
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
    if (c.direct3 == OP_DW_AVX2_3X3) c.scratch_elems = op_dw8_scratch(d, x_bf16);
    if (c.direct3 == OP_DW_AVX2_NHWC && y_bf16)
        c.scratch_elems = op_roundup64(d->ow * d->oc, 16);  /* one float32 output row */
    if (c.direct3 == OP_DW_AVX2_FLAT) {
        c.scratch_elems = op_dw8f_scratch(d);
        c.fperiod = op_dw8f_period(d->ow);
        for (int64_t b = 0; b < c.fperiod; b++)
            for (int l = 0; l < 8; l++) {
                const int64_t col = (b * 8 + l) % d->ow;
                const uint32_t m0 = col == 0 ? ~0u : 0u, m2 = col == d->ow - 1 ? ~0u : 0u;
                memcpy(&c.fm8[b][0][l], &m0, 4);
                memcpy(&c.fm8[b][1][l], &m2, 4);
            }
    }
#endif
    if (!d->nhwc && !c.direct3) {
        c.hp = (d->oh - 1) * d->sh + (d->kh - 1) * d->dh + 1;
        const int64_t wp = (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1;
        c.wq = op_cdiv64(wp, d->sw);
        /* + grid accumulator + bfloat16 output row */
        c.scratch_elems = op_roundup64(c.hp * d->sw * c.wq + d->oh * c.wq + d->ow, 16);
    } else if (d->nhwc && y_bf16 && c.direct3 != 4 && !c.scratch_elems) {
        c.scratch_elems = op_roundup64(d->oc, 16);
    }
    if (c.scratch_elems) {
        c.scratch = (float *)op_aligned_alloc(sizeof(float) * (size_t)(c.scratch_elems * T));
        if (!c.scratch) {
            op_aligned_free(wf);
            return -1;
        }
    }
    const int used = op_parallel_for((int)T, ntasks, op_dw_task, &c);
    if (!op_dw_weights_finite(w, w_bf16, d->oc * d->kh * d->kw))
        op_dw_pad_nan(d, w, w_bf16, y, y_bf16);
    op_aligned_free(c.scratch);
    op_aligned_free(wf);
    return used;
}
