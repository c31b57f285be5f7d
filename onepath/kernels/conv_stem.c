/* conv_stem.c: direct convolution for few input channels (the 7x7 stride-2 stem of ResNet-50: C = 3,
   K = C*KH*KW = 147), float32 (FMA) and bfloat16 (VDPBF16PS), NCHW and NHWC, no im2col.

   The implicit GEMM gathers C*KH*KW = 147 depths per output pixel for each block of pixels; with
   only 3 channels that gather (short runs of 7 values) costs as much as the multiplication. Here
   each task, a band of up to 16 output rows of one image, first copies the padded input rows the
   band reads into its thread's own zero-padded, stride-phase-split planar buffer xq[c][r][q][i]
   (r: padded row of the band, q: plane, i: column in the plane), and every tap (c, ky, kx) of an
   output pixel (oy, ox) is then the element  base(oy) + tapoff[tap] + ox  of that copy:
     float32:  plane q = kx % sw holds xpad[r][sw*i + q]; tap column offset kx / sw.
     bfloat16: taps are paired into one 32-bit element each (the VDPBF16PS depth pair): along kx,
               (2m, 2m+1), from "pair" planes holding (xpad[r][sw*i + q], xpad[r][sw*i + q + 1]); an
               odd KW's last taps across rows, (ky, ky+1), from "row-pair" planes holding
               (xpad[r][sw*i + q], xpad[r+1][sw*i + q]) (7x7: 25 pairs per channel instead of 28),
               and an odd KH's last one with a real zero from a "tail" plane (xpad[r][sw*i + q], +0).
               So a padding depth is zero times zero, never a zero weight times an input that may
               be Inf; every input padding is a zero in the copy.
   The register tile: 14 output pixels of a row (each tap's element broadcast from the copy) x 32
   output channels (two vectors of a weight panel repacked per call as [tap][OC rounded up to 32]),
   28 accumulators, one FMA / VDPBF16PS per accumulator and tap (pair). NHWC stores the tile's rows
   as they are; NCHW puts them in a per-thread buffer of the output row (OW x OC), transposed into y
   in 16 x 16 blocks (op_transpose16_epi32) when the row is done (full 64-byte channel-row stores).
   A row's last partial tile moves back to end at OW (the overlapping pixels are computed twice and
   the same values stored again). Below AVX-512 (float32 only) the tile is 6 pixels x 16 channels
   in 16 ymm registers (op_stem_tile8), the panels 16 wide and the NCHW row transposed 8 x 8.
   Bias, activation (act_f32.c) and the bfloat16 output rounding (cvt_bf16.c, op_cvt16_int: round to
   nearest even, NaN quiet) are applied in registers. Threads take bands (n, oy0 .. oy0 + 15),
   halved down to 2 rows while there are fewer than 4 tasks per thread; a band's copy repeats the
   KH - sh padded rows it shares with the previous band (7x7 stride 2, 16 rows: 37 copied rows
   for 32), the price of a copy that one core writes and reads in its own L2 (a whole-batch copy
   filled by both threads and then read by both made the 2-thread runs 20% slower on Zen 4). The
   output lines are prefetched a tile before their stores; or, where the option OP_STEM_NT is set
   and an NHWC float32 output is over 2 MiB (an L2 of the Intel AMX VM, two of Zen 4; ResNet-50's
   conv1 writes 3.2 MB per image), every whole 64-byte line of it is stored with MOVNTPS, without
   reading the line in first or prefetching it (the caller allocates a large output on a line
   boundary).
   Where it runs is a per-microarchitecture choice (op_conv_stem_options, api_stem.h; the registry's
   CONV_STEM_OPTIONS): off by default, so hosts without a row keep the implicit GEMM. */

#define OP_STEM_F32 1
#define OP_STEM_BF16 2
#define OP_STEM_NT 4         /* NHWC float32 output past OP_STEM_NT_MIN: non-temporal stores */
#define OP_STEM_NT_MIN (2 << 20)
#define OP_STEM_MAXC 4       /* input channels the direct kernel takes */
#define OP_STEM_MAXTAPS 512  /* C * KH * KW */
#define OP_STEM_MAXS 8       /* stride */

static int op_conv_stem_opts = 0;

int op_conv_stem_options(int flags)
{
    const int old = op_conv_stem_opts;
    if (flags >= 0) op_conv_stem_opts = flags & (OP_STEM_F32 | OP_STEM_BF16 | OP_STEM_NT);
    return old;
}

#if defined(OP_HAS_AVX2)
#if defined(OP_HAS_AVX512)
#define OP_STEM_PW 32   /* output channels per weight panel and register tile (two vectors) */
#define OP_STEM_NP 14   /* output pixels per register tile */
#else
#define OP_STEM_PW 16
#define OP_STEM_NP 6
#endif
static void *op_conv_scratch_alloc(size_t size);   /* conv_f32.c */
static void op_conv_scratch_free(void *q);

/* The problems the direct kernel takes (d->nhwc 0 / 2: NCHW tensors, 1: NHWC). */
static int op_stem_fits(const op_conv_desc *d)
{
    return d->groups == 1 && d->c >= 1 && d->c <= OP_STEM_MAXC && d->kh >= 3 && d->kw >= 3 &&
           d->dh == 1 && d->dw == 1 && d->sh <= OP_STEM_MAXS && d->sw <= OP_STEM_MAXS &&
           d->c * d->kh * d->kw <= OP_STEM_MAXTAPS;
}

typedef struct {
    const op_conv_desc *d;
    int64_t band;               /* output rows per task */
    int64_t PH, PWs, NQ;        /* padded rows of a band's copy, plane width (elements), planes per row */
    int64_t rowstep;            /* elements from one padded row to the next (NQ * PWs) */
    int qkind[3 * OP_STEM_MAXS], qphi[3 * OP_STEM_MAXS];   /* bfloat16: plane kind (0 pair, 1 tail, 2 row pair), phase */
    int nhwc;
} op_stem_geo;

/* Geometry of the copy; per tap (float32: c, ky, kx; bfloat16: a depth pair) its offset tapoff and,
   for bfloat16, the weight depths (c, ky, kx as c*KH*KW + ky*KW + kx) of its pair, wj1 -1 for zero. */
static int64_t op_stem_geometry(const op_conv_desc *d, int bf16, int64_t band, op_stem_geo *g,
                                int64_t *tapoff, int *wj0, int *wj1)
{
    const int64_t sw = d->sw, KW = d->kw, KH = d->kh;
    g->d = d;
    g->nhwc = d->nhwc == 1;
    g->band = band;
    g->PH = (band - 1) * d->sh + KH;
    g->PWs = op_roundup64(op_roundup64(d->ow, 16) + (KW - 1) / sw + 1, 16);
    int64_t ntap = 0;
    if (!bf16) {
        g->NQ = sw;
        g->rowstep = g->NQ * g->PWs;
        for (int64_t c = 0; c < d->c; c++)
            for (int64_t ky = 0; ky < KH; ky++)
                for (int64_t kx = 0; kx < KW; kx++)
                    tapoff[ntap++] = ((c * g->PH + ky) * g->NQ + kx % sw) * g->PWs + kx / sw;
        return ntap;
    }
    /* pairs (kx, kx + 1) of a row from "pair" planes (kind 0); an odd KW's last taps paired across
       rows (ky, ky + 1) from "row-pair" planes (kind 2), an odd KH's last one with a zero (kind 1) */
    int qidx[3][OP_STEM_MAXS];
    memset(qidx, -1, sizeof qidx);
    int nq = 0;
    int64_t kind_[OP_STEM_MAXTAPS], row_[OP_STEM_MAXTAPS], col_[OP_STEM_MAXTAPS];
    for (int64_t c = 0; c < d->c; c++) {
        for (int64_t ky = 0; ky < KH; ky++)
            for (int64_t m = 0; 2 * m + 1 < KW; m++) {
                kind_[ntap] = 0; row_[ntap] = c * g->PH + ky; col_[ntap] = 2 * m;
                wj0[ntap] = (int)((c * KH + ky) * KW + 2 * m); wj1[ntap] = wj0[ntap] + 1;
                ntap++;
            }
        if (KW % 2)
            for (int64_t ky = 0; ky < KH; ky += 2) {
                const int pair = ky + 1 < KH;
                kind_[ntap] = pair ? 2 : 1; row_[ntap] = c * g->PH + ky; col_[ntap] = KW - 1;
                wj0[ntap] = (int)((c * KH + ky) * KW + KW - 1); wj1[ntap] = pair ? wj0[ntap] + (int)KW : -1;
                ntap++;
            }
    }
    for (int64_t t = 0; t < ntap; t++) {
        const int kind = (int)kind_[t], phi = (int)(col_[t] % sw);
        if (qidx[kind][phi] < 0) {
            qidx[kind][phi] = nq;
            g->qkind[nq] = kind;
            g->qphi[nq] = phi;
            nq++;
        }
    }
    g->NQ = nq;
    g->rowstep = g->NQ * g->PWs;
    for (int64_t t = 0; t < ntap; t++)
        tapoff[t] = (row_[t] * g->NQ + qidx[kind_[t]][col_[t] % sw]) * g->PWs + col_[t] / sw;
    return ntap;
}

typedef struct {
    const op_stem_geo *g;
    const void *x;
    int x_bf16;     /* float32 copy: the input is bfloat16 bits (widened) */
    int bf16;       /* the copy holds bfloat16 pairs */
    const void *w;  /* the weight (OC, C, KH, KW) -> wq (OCP / PW, taps, PW), PW = OP_STEM_PW */
    uint32_t *wq;
    int64_t ntap, OCP;
    const int *wj0, *wj1;
} op_stem_fill_ctx;

/* input value (bits as float32 / bfloat16) at (n, c, iy, ix), 0 outside */
OP_INLINE int64_t op_stem_xidx(const op_conv_desc *d, int nhwc, int64_t n, int64_t c, int64_t iy, int64_t ix)
{
    return nhwc ? ((n * d->h + iy) * d->w + ix) * d->c + c : ((n * d->c + c) * d->h + iy) * d->w + ix;
}

/* padded row r (from the top of the padded image) of image n, channel c, into dst: its NQ planes */
OP_INLINE void op_stem_fill_row(const op_stem_fill_ctx *f, int64_t n, int64_t c, int64_t r, char *dst)
{
    const op_stem_geo *g = f->g;
    const op_conv_desc *d = g->d;
    const int64_t PWs = g->PWs, sw = d->sw, W = d->w, iy = r - d->pt;
    const int lok = iy >= 0 && iy < d->h, nxok = iy + 1 >= 0 && iy + 1 < d->h;
    if (!lok && (!f->bf16 || !nxok)) {
        memset(dst, 0, (size_t)g->rowstep * 4);
        return;
    }
    const int64_t xs = g->nhwc ? d->c : 1;
    const int64_t x0 = lok ? op_stem_xidx(d, g->nhwc, n, c, iy, 0) : 0;
    for (int64_t q = 0; q < g->NQ; q++) {
        const int64_t phi = f->bf16 ? g->qphi[q] : q, kind = f->bf16 ? g->qkind[q] : 1;
        /* columns i whose input column ix = sw*i + phi - pl (and, for a pair, ix + 1) lie in [0, W) */
        const int64_t off = phi - d->pl, need = W - (kind == 0 ? 2 : 1);
        int64_t ilo = off >= 0 ? 0 : op_cdiv64(-off, sw);
        int64_t ihi = need - off < 0 ? 0 : (need - off) / sw + 1;
        ihi = op_min64(op_max64(ihi, ilo), PWs);
        ilo = op_min64(ilo, ihi);
        if (!f->bf16) {
            float *o = (float *)(void *)dst + q * PWs;
            for (int64_t i = 0; i < ilo; i++) o[i] = 0.0f;
            if (f->x_bf16) {
                const uint16_t *xb = (const uint16_t *)f->x + x0 + off * xs;
                for (int64_t i = ilo; i < ihi; i++) o[i] = op_bf16_to_f32_1(xb[i * sw * xs]);
            } else {
                const float *xf = (const float *)f->x + x0 + off * xs;
                if (xs == 1 && sw == 2)
                    for (int64_t i = ilo; i < ihi; i++) o[i] = xf[2 * i];
                else if (xs == 1 && sw == 1)
                    memcpy(o + ilo, xf + ilo, sizeof(float) * (size_t)(ihi - ilo));
                else
                    for (int64_t i = ilo; i < ihi; i++) o[i] = xf[i * sw * xs];
            }
            for (int64_t i = ihi; i < PWs; i++) o[i] = 0.0f;   /* (ix >= W: past the row) */
            continue;
        }
        /* the low and high halves: (row iy, ix) and kind 0 (iy, ix + 1), 1 zero, 2 (iy + 1, ix) */
        const uint16_t *lo = lok ? (const uint16_t *)f->x + x0 : NULL;
        const uint16_t *hi = kind == 0 ? lo : kind == 2 && nxok ? (const uint16_t *)f->x + op_stem_xidx(d, g->nhwc, n, c, iy + 1, 0) : NULL;
        const int64_t hoff = kind == 0 ? xs : 0;
        uint32_t *o = (uint32_t *)(void *)dst + q * PWs;
        for (int64_t i = 0; i < PWs; i++) {
            if (i == ilo && ilo < ihi) {   /* the interior: no bounds tests */
                if (!lo && !hi)
                    for (; i < ihi; i++) o[i] = 0;
                else if (kind == 0 && xs == 1 && sw == 2)
                    memcpy(o + i, lo + 2 * i + off, sizeof(uint32_t) * (size_t)(ihi - i)), i = ihi;
                else if (lo && hi)
                    for (; i < ihi; i++) o[i] = (uint32_t)lo[(sw * i + off) * xs] | (uint32_t)hi[(sw * i + off) * xs + hoff] << 16;
                else if (lo)
                    for (; i < ihi; i++) o[i] = lo[(sw * i + off) * xs];
                else
                    for (; i < ihi; i++) o[i] = (uint32_t)hi[(sw * i + off) * xs + hoff] << 16;
                if (i >= PWs) break;
            }
            const int64_t ix = sw * i + off;
            const uint32_t l = lo && ix >= 0 && ix < W ? lo[ix * xs] : 0;
            const int64_t hx = kind == 0 ? ix + 1 : ix;
            const uint32_t h = hi && hx >= 0 && hx < W ? hi[hx * xs] : 0;
            o[i] = l | h << 16;
        }
    }
}

/* the weight as OCP / PW panels (taps, PW = OP_STEM_PW), the channels past OC zero: a tile reads its
   panel as
   one contiguous run (as (taps, OCP) with OC 64 it read 128 of every 256 bytes, on half the L1
   sets; panels measured 1-3% faster on the Intel AMX VM, within that host's noise) */
static void op_stem_pack_w(const op_stem_fill_ctx *f)
{
    const op_conv_desc *d = f->g->d;
    const int64_t K = d->c * d->kh * d->kw, OCP = f->OCP;
    for (int64_t k = 0; k < f->ntap; k++) {
        for (int64_t oc = 0; oc < OCP; oc++) {
            uint32_t *o = f->wq + (oc / OP_STEM_PW * f->ntap + k) * OP_STEM_PW + oc % OP_STEM_PW;
            if (oc >= d->oc) {
                *o = 0;
                continue;
            }
            if (f->bf16) {
                const uint16_t *wr = (const uint16_t *)f->w + oc * K;
                const uint32_t hi = f->wj1[k] >= 0 ? (uint32_t)wr[f->wj1[k]] << 16 : 0u;
                *o = (uint32_t)wr[f->wj0[k]] | hi;
            } else {
                memcpy(o, (const float *)f->w + oc * K + k, 4);
            }
        }
    }
}

typedef struct {
    const op_stem_geo *g;
    const op_stem_fill_ctx *f;
    char *xq;                 /* per thread (xqstep bytes apart), the copy of a band (float32 or
                                 uint32 pairs) */
    size_t xqstep;
    const void *w;            /* (OCP / PW, taps, PW): float32 or uint32 pairs */
    int64_t ntap, OCP;
    const int64_t *tapoff;
    const float *bias;
    void *y;
    int y_bf16, act, bf16;
    float *rowbuf;            /* NCHW: per thread, one output row as (OW, OCP) float32 */
    int nt;                   /* NHWC float32: stream the whole 64-byte lines (OP_STEM_NT) */
} op_stem_run_ctx;

#if defined(OP_HAS_AVX512)
OP_INLINE __m512 op_v16_act_if(__m512 v, int act)
{
    return act != OP_ACT_NONE ? (__m512)op_v16_act((op_v16f)v, act) : v;
}

/* the epilogue of 16 accumulated outputs: bias (already added), activation, store (float32 or
   bfloat16 bits) under mask m */
OP_INLINE void op_stem_store(__m512 v, int act, void *y, int64_t idx, int y_bf16, __mmask16 m)
{
    if (act != OP_ACT_NONE) v = (__m512)op_v16_act((op_v16f)v, act);
    /* (VPMOVDW to memory under a mask was a fifth of the bfloat16 NCHW tile's time on Zen 4: the
       narrowing goes to a register, then a plain or masked 256-bit store) */
    if (y_bf16) {
        const __m256i h = _mm512_cvtepi32_epi16(op_cvt16_int(_mm512_castps_si512(v)));
        if (m == 0xFFFF) _mm256_storeu_si256((__m256i *)(void *)((uint16_t *)y + idx), h);
        else _mm256_mask_storeu_epi16((uint16_t *)y + idx, m, h);
    } else if (m == 0xFFFF) {
        _mm512_storeu_ps((float *)y + idx, v);
    } else {
        _mm512_mask_storeu_ps((float *)y + idx, m, v);
    }
}

/* An NHWC store of 16 channels at yb + idx: streamed (MOVNTPS) where t->nt and the vector is a
   whole line, else op_stem_store. */
OP_INLINE void op_stem_store_nhwc(const op_stem_run_ctx *t, __m512 v, char *yb, int64_t idx,
                                  __mmask16 m)
{
    float *p = (float *)(void *)yb + idx;
    if (t->nt && m == 0xFFFF && ((uintptr_t)p & 63) == 0)
        _mm512_stream_ps(p, op_v16_act_if(v, t->act));
    else
        op_stem_store(v, t->act, yb, idx, t->y_bf16, m);
}

/* The write-out of a tile tb[p][32] (np pixels; channel masks m0 / m1 of its two 16-channel halves):
   bias, activation, store. NHWC: np rows of channels; NCHW: each half transposed in registers to 16
   channel rows of np pixels (yb: channel oc, row oy, pixel ox0; channel rows OH*OW apart). */
static OP_NOINLINE void op_stem_store_tile(const op_stem_run_ctx *t, const float *tb, int np, int64_t oc,
                                           __mmask16 m0, __mmask16 m1, char *yb)
{
    const op_conv_desc *d = t->g->d;
    const __m512 b0 = t->bias ? _mm512_maskz_loadu_ps(m0, t->bias + oc) : _mm512_setzero_ps();
    const __m512 b1 = t->bias ? _mm512_maskz_loadu_ps(m1, t->bias + oc + 16) : _mm512_setzero_ps();
    if (t->g->nhwc) {
        for (int p = 0; p < np; p++) {
            const __m512 v0 = _mm512_add_ps(_mm512_load_ps(tb + 32 * p), b0);
            op_stem_store_nhwc(t, v0, yb, p * d->oc, m0);
            if (m1)
                op_stem_store_nhwc(t, _mm512_add_ps(_mm512_load_ps(tb + 32 * p + 16), b1), yb,
                                   p * d->oc + 16, m1);
        }
        return;
    }
    /* NCHW: into the thread's row buffer (yb: pixel ox0, channel oc), transposed when the row is done */
    float *rb = (float *)(void *)yb;
    for (int p = 0; p < np; p++) {
        _mm512_store_ps(rb + p * t->OCP, (__m512)op_v16_act_if(_mm512_add_ps(_mm512_load_ps(tb + 32 * p), b0), t->act));
        _mm512_store_ps(rb + p * t->OCP + 16, (__m512)op_v16_act_if(_mm512_add_ps(_mm512_load_ps(tb + 32 * p + 16), b1), t->act));
    }
}

/* NCHW: the row buffer (OW, OCP) of output row (n, oy) transposed into y, 16 x 16 blocks */
static OP_NOINLINE void op_stem_row_out(const op_stem_run_ctx *t, const float *rb, int64_t n, int64_t oy)
{
    const op_conv_desc *d = t->g->d;
    const int64_t OW = d->ow, OC = d->oc, cs = d->oh * OW;
    const size_t ysz = t->y_bf16 ? 2 : 4;
    for (int64_t ox = 0; ox < OW; ox += 16) {
        const int npx = (int)op_min64(16, OW - ox);
        const __mmask16 pm = npx == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << npx) - 1u);
        for (int64_t ocb = 0; ocb < OC; ocb += 16) {
            __m512i r[16];
            for (int p = 0; p < 16; p++)
                r[p] = p < npx ? _mm512_load_si512((const void *)(rb + (ox + p) * t->OCP + ocb)) : _mm512_setzero_si512();
            op_transpose16_epi32(r);
            char *yb = (char *)t->y + (size_t)(((n * OC + ocb) * d->oh + oy) * OW + ox) * ysz;
            const int nc = (int)op_min64(16, OC - ocb);
            for (int i = 0; i < nc; i++)
                op_stem_store(_mm512_castsi512_ps(r[i]), OP_ACT_NONE, yb, i * cs, t->y_bf16, pm);
        }
    }
}

/* ---------------------------------------------------------------- the register tile

   acc[p][j] (NP pixels of a row x 32 channels): per tap, two weight vectors times each pixel's
   broadcast copy element. */
OP_INLINE void op_stem_nhwc_tile(const int NP, const int BF, const op_stem_run_ctx *t, const char *xb,
                                 const char *wp, int64_t oc, __mmask16 m0, __mmask16 m1, char *yb)
{
    __m512 acc[14][2];
#pragma GCC unroll 14
    for (int p = 0; p < NP; p++) acc[p][0] = acc[p][1] = _mm512_setzero_ps();
    const int64_t *tapoff = t->tapoff;
    const int64_t wstep = 32 * 4;
    for (int64_t k = 0; k < t->ntap; k++) {
        const char *xp = xb + tapoff[k] * 4;
        const char *wk = wp + k * wstep;
        if (BF) {
#if defined(OP_BF16_HAS_DP)
            const __m512bh wa = (__m512bh)_mm512_loadu_si512((const void *)wk);
            const __m512bh wb = (__m512bh)_mm512_loadu_si512((const void *)(wk + 64));
#pragma GCC unroll 14
            for (int p = 0; p < NP; p++) {
                const __m512bh a = (__m512bh)_mm512_set1_epi32(*(const int32_t *)(const void *)(xp + 4 * p));
                acc[p][0] = _mm512_dpbf16_ps(acc[p][0], a, wa);
                acc[p][1] = _mm512_dpbf16_ps(acc[p][1], a, wb);
            }
#endif
        } else {
            const __m512 wa = _mm512_loadu_ps((const void *)wk);
            const __m512 wb = _mm512_loadu_ps((const void *)(wk + 64));
#pragma GCC unroll 14
            for (int p = 0; p < NP; p++) {
                const __m512 a = _mm512_set1_ps(*(const float *)(const void *)(xp + 4 * p));
                acc[p][0] = _mm512_fmadd_ps(a, wa, acc[p][0]);
                acc[p][1] = _mm512_fmadd_ps(a, wb, acc[p][1]);
            }
        }
    }
    /* the write-out from a buffer (in this function, GCC spilled accumulators in the tap loop) */
    float tb[16 * 32] OP_ALIGNED(64);
#pragma GCC unroll 14
    for (int p = 0; p < NP; p++) {
        _mm512_store_ps(tb + 32 * p, acc[p][0]);
        _mm512_store_ps(tb + 32 * p + 16, acc[p][1]);
    }
    op_stem_store_tile(t, tb, NP, oc, m0, m1, yb);
}

#define OP_STEM_NHWC_CASE(N, BF) case N: op_stem_nhwc_tile(N, BF, t, xb, wp, oc, m0, m1, yb); break;
#define OP_STEM_NHWC_CASES(BF)                                                                      \
    switch (np) {                                                                                   \
    OP_STEM_NHWC_CASE(1, BF) OP_STEM_NHWC_CASE(2, BF) OP_STEM_NHWC_CASE(3, BF) OP_STEM_NHWC_CASE(4, BF)             \
    OP_STEM_NHWC_CASE(5, BF) OP_STEM_NHWC_CASE(6, BF) OP_STEM_NHWC_CASE(7, BF) OP_STEM_NHWC_CASE(8, BF)             \
    OP_STEM_NHWC_CASE(9, BF) OP_STEM_NHWC_CASE(10, BF) OP_STEM_NHWC_CASE(11, BF) OP_STEM_NHWC_CASE(12, BF)          \
    OP_STEM_NHWC_CASE(13, BF) default: op_stem_nhwc_tile(14, BF, t, xb, wp, oc, m0, m1, yb); break;     \
    }

/* the tile of np <= OP_STEM_NP pixels at xb x the channels oc .. oc + min(rem, 32) of panel wp */
OP_INLINE void op_stem_tile_np(const op_stem_run_ctx *t, int64_t np, const char *xb, const char *wp,
                               int64_t oc, int64_t rem, char *yb)
{
    const __mmask16 m0 = rem >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << rem) - 1u);
    const __mmask16 m1 = rem >= 32   ? (__mmask16)0xFFFF
                         : rem > 16 ? (__mmask16)((1u << (rem - 16)) - 1u)
                                    : 0;
    if (t->bf16) {
#if defined(OP_BF16_HAS_DP)
        OP_STEM_NHWC_CASES(1)
#endif
    } else {
        OP_STEM_NHWC_CASES(0)
    }
}
#else
/* ---------------------------------------------------------------- AVX2: 6 pixels x 16 channels

   The same copy, panels and tasks with a tile of 16 ymm registers: 6 output pixels x 16 channels
   (12 accumulators, the two weight vectors of a tap and one broadcast), float32 only (bfloat16
   input widened into the copy). */

/* Two ymm of 16 output channels, shared with conv_f32.c's direct NHWC kernel (op_d8_*). */
/* b[0..1] = bias[oc .. oc + nc), zeros past nc (no bias: zeros) */
OP_INLINE void op_y16_bias(const float *bias, int64_t oc, int64_t nc, __m256 *b)
{
    float bb[16] OP_ALIGNED(32) = {0};
    if (bias) memcpy(bb, bias + oc, sizeof(float) * (size_t)op_min64(nc, 16));
    b[0] = _mm256_load_ps(bb);
    b[1] = _mm256_load_ps(bb + 8);
}

/* the activation of v[0..1]: ReLU as max(0, v) (NaN stays NaN, -0 stays -0, as op_act_lanes), the
   others through op_v16_act (via memory: GCC keeps a 64-byte op_v16f there anyway) */
OP_INLINE void op_y16_act(__m256 *v, int act)
{
    if (act == OP_ACT_RELU) {
        v[0] = _mm256_max_ps(_mm256_setzero_ps(), v[0]);
        v[1] = _mm256_max_ps(_mm256_setzero_ps(), v[1]);
    } else if (act != OP_ACT_NONE) {
        op_v16f f;
        memcpy(&f, v, sizeof f);
        f = op_v16_act(f, act);
        memcpy(v, &f, sizeof f);
    }
}

/* bias, activation and store of a tile tb[p][16] (np pixels, channels oc .. oc + min(rem, 16)):
   NHWC straight into y (whole 64-byte lines streamed where t->nt), NCHW into the row buffer */
static OP_NOINLINE void op_stem_store_tile(const op_stem_run_ctx *t, const float *tb, int np,
                                           int64_t oc, int64_t rem, char *yb)
{
    const op_conv_desc *d = t->g->d;
    const int nc = (int)op_min64(rem, 16);
    __m256 b[2];
    op_y16_bias(t->bias, oc, nc, b);
    for (int p = 0; p < np; p++) {
        __m256 v[2] = {_mm256_add_ps(_mm256_load_ps(tb + 16 * p), b[0]),
                       _mm256_add_ps(_mm256_load_ps(tb + 16 * p + 8), b[1])};
        op_y16_act(v, t->act);
        float *o = t->g->nhwc ? (float *)(void *)yb + p * d->oc : (float *)(void *)yb + p * t->OCP;
        if (nc == 16 || !t->g->nhwc) {   /* (the row buffer's padding channels are never read) */
            if (t->nt && t->g->nhwc && ((uintptr_t)o & 63) == 0) {
                _mm256_stream_ps(o, v[0]);
                _mm256_stream_ps(o + 8, v[1]);
            } else {
                _mm256_storeu_ps(o, v[0]);
                _mm256_storeu_ps(o + 8, v[1]);
            }
        } else {
            memcpy(o, v, sizeof(float) * (size_t)nc);
        }
    }
}

/* NCHW: the row buffer (OW, OCP) of output row (n, oy) transposed into y, 8 x 8 blocks */
static OP_NOINLINE void op_stem_row_out(const op_stem_run_ctx *t, const float *rb, int64_t n,
                                        int64_t oy)
{
    const op_conv_desc *d = t->g->d;
    const int64_t OW = d->ow, OC = d->oc, cs = d->oh * OW;
    for (int64_t ox = 0; ox < OW; ox += 8) {
        const int npx = (int)op_min64(8, OW - ox);
        for (int64_t ocb = 0; ocb < OC; ocb += 8) {
            __m256 r[8];
            for (int p = 0; p < 8; p++)
                r[p] = p < npx ? _mm256_loadu_ps(rb + (ox + p) * t->OCP + ocb)
                               : _mm256_setzero_ps();
            op_transpose8_ps(r);
            float *yb = (float *)t->y + ((n * OC + ocb) * d->oh + oy) * OW + ox;
            const int nc = (int)op_min64(8, OC - ocb);
            for (int i = 0; i < nc; i++) {
                if (npx == 8) {
                    _mm256_storeu_ps(yb + i * cs, r[i]);
                } else {
                    float tmp[8];
                    _mm256_storeu_ps(tmp, r[i]);
                    memcpy(yb + i * cs, tmp, sizeof(float) * (size_t)npx);
                }
            }
        }
    }
}

/* acc[p][j] (NP pixels of a row x 16 channels): per tap, two weight vectors times each pixel's
   broadcast copy element */
OP_INLINE void op_stem_tile8(const int NP, const op_stem_run_ctx *t, const char *xb, const char *wp,
                             int64_t oc, int64_t rem, char *yb)
{
    __m256 acc[OP_STEM_NP][2];
#pragma GCC unroll 6
    for (int p = 0; p < NP; p++) acc[p][0] = acc[p][1] = _mm256_setzero_ps();
    const int64_t *tapoff = t->tapoff;
    for (int64_t k = 0; k < t->ntap; k++) {
        const float *xp = (const float *)(const void *)(xb + tapoff[k] * 4);
        const float *wk = (const float *)(const void *)wp + k * 16;
        const __m256 wa = _mm256_loadu_ps(wk), wb = _mm256_loadu_ps(wk + 8);
#pragma GCC unroll 6
        for (int p = 0; p < NP; p++) {
            const __m256 a = _mm256_broadcast_ss(xp + p);
            acc[p][0] = _mm256_fmadd_ps(a, wa, acc[p][0]);
            acc[p][1] = _mm256_fmadd_ps(a, wb, acc[p][1]);
        }
    }
    /* no activation or ReLU, whole vectors, cached stores: from the registers (the write-out
       through tb below was 7-9% of conv1) */
    const op_conv_desc *d = t->g->d;
    if ((t->act == OP_ACT_NONE || t->act == OP_ACT_RELU) && !t->nt && (rem >= 16 || !t->g->nhwc)) {
        __m256 b[2];
        op_y16_bias(t->bias, oc, rem, b);
        const int64_t ps = t->g->nhwc ? d->oc : t->OCP;
        float *o = (float *)(void *)yb;
#pragma GCC unroll 6
        for (int p = 0; p < NP; p++) {
            __m256 v[2] = {_mm256_add_ps(acc[p][0], b[0]), _mm256_add_ps(acc[p][1], b[1])};
            op_y16_act(v, t->act);
            _mm256_storeu_ps(o + p * ps, v[0]);
            _mm256_storeu_ps(o + p * ps + 8, v[1]);
        }
        return;
    }
    float tb[OP_STEM_NP * 16] OP_ALIGNED(32);
#pragma GCC unroll 6
    for (int p = 0; p < NP; p++) {
        _mm256_store_ps(tb + 16 * p, acc[p][0]);
        _mm256_store_ps(tb + 16 * p + 8, acc[p][1]);
    }
    op_stem_store_tile(t, tb, NP, oc, rem, yb);
}

OP_INLINE void op_stem_tile_np(const op_stem_run_ctx *t, int64_t np, const char *xb, const char *wp,
                               int64_t oc, int64_t rem, char *yb)
{
    switch (np) {
    case 1: op_stem_tile8(1, t, xb, wp, oc, rem, yb); break;
    case 2: op_stem_tile8(2, t, xb, wp, oc, rem, yb); break;
    case 3: op_stem_tile8(3, t, xb, wp, oc, rem, yb); break;
    case 4: op_stem_tile8(4, t, xb, wp, oc, rem, yb); break;
    case 5: op_stem_tile8(5, t, xb, wp, oc, rem, yb); break;
    default: op_stem_tile8(6, t, xb, wp, oc, rem, yb); break;
    }
}
#endif

/* output row (n, oy) of every channel, from xrow: the copy's first padded row of the output row */
static void op_stem_row(const op_stem_run_ctx *t, const char *xrow, int64_t n, int64_t oy, int tid)
{
    const op_stem_geo *g = t->g;
    const op_conv_desc *d = g->d;
    const int64_t OW = d->ow, OC = d->oc;
    const size_t ysz = t->y_bf16 ? 2 : 4;
    /* The output lines are prefetched a tile ahead of their stores: the NCHW row's channel rows
       spread over the row's tiles, NHWC each tile's own pixels (output rows past the caches made
       the stores wait for the lines: at batch 8 the NCHW write-out was a sixth of the time);
       streamed NHWC stores need none. */
    const int64_t ntile = op_cdiv64(OC, OP_STEM_PW) * op_cdiv64(OW, OP_STEM_NP);
    const int64_t rowbytes = OW * (int64_t)ysz;
    const char *ynchw = (const char *)t->y + (size_t)((n * OC * d->oh + oy) * OW) * ysz;
    int64_t tile = 0;
    for (int64_t oc = 0; oc < OC; oc += OP_STEM_PW) {
        const int64_t rem = OC - oc;
        const char *wp = (const char *)t->w + oc * t->ntap * 4;
        for (int64_t ox = 0; ox < OW; ox += OP_STEM_NP) {
            /* a last partial tile moves back to end at OW (its first pixels computed twice, the
               same values stored again) */
            int64_t ox0 = ox, np = OP_STEM_NP;
            if (ox0 + np > OW) {
                if (OW >= np) ox0 = OW - np;
                else np = OW;
            }
            const char *xb = xrow + ox0 * 4;
            char *yb = g->nhwc ? (char *)t->y + (size_t)(((n * d->oh + oy) * OW + ox0) * OC + oc) * ysz
                               : (char *)(void *)(t->rowbuf + (tid * OW + ox0) * t->OCP + oc);
            if (g->nhwc) {
                for (int64_t p = 0; p < np && !t->nt; p++) {
                    _mm_prefetch(yb + p * OC * (int64_t)ysz, _MM_HINT_T0);
                    _mm_prefetch(yb + (p * OC + op_min64(rem, OP_STEM_PW)) * (int64_t)ysz - 1,
                                 _MM_HINT_T0);
                }
            } else {
                for (int64_t c = tile * OC / ntile; c < (tile + 1) * OC / ntile; c++) {
                    const char *yc = ynchw + (size_t)(c * d->oh * OW) * ysz;
                    for (int64_t off = 0; off < rowbytes; off += 64) _mm_prefetch(yc + off, _MM_HINT_T0);
                    _mm_prefetch(yc + rowbytes - 1, _MM_HINT_T0);
                }
            }
            tile++;
            op_stem_tile_np(t, np, xb, wp, oc, rem, yb);
        }
    }
    if (!g->nhwc) op_stem_row_out(t, t->rowbuf + tid * OW * t->OCP, n, oy);
}

/* one task = a band of g->band output rows of image n: its padded input rows copied into the
   thread's buffer (each thread reads and writes only its own copy, which stays in its caches;
   a band's copy repeats KH - sh of the previous band's rows), then its rows computed */
static void op_stem_task(void *ctx, int64_t task, int tid)
{
    const op_stem_run_ctx *t = (const op_stem_run_ctx *)ctx;
    const op_stem_geo *g = t->g;
    const op_conv_desc *d = g->d;
    const int64_t nb = op_cdiv64(d->oh, g->band), n = task / nb, oy0 = task % nb * g->band;
    const int64_t oy1 = op_min64(d->oh, oy0 + g->band), nr = (oy1 - 1 - oy0) * d->sh + d->kh;
    char *xq = t->xq + (size_t)tid * t->xqstep;
    for (int64_t c = 0; c < d->c; c++)
        for (int64_t r = 0; r < nr; r++)
            op_stem_fill_row(t->f, n, c, oy0 * d->sh + r, xq + (size_t)((c * g->PH + r) * g->rowstep) * 4);
    for (int64_t oy = oy0; oy < oy1; oy++)
        op_stem_row(t, xq + (size_t)((oy - oy0) * d->sh * g->rowstep) * 4, n, oy, tid);
    if (t->nt) _mm_sfence();   /* the streamed stores visible before the task counts as done */
}

/* ---------------------------------------------------------------- driver

   bf16 = 0: float32 weight w (float32 or bfloat16 input, x_bf16), float32 output;
   bf16 = 1: bfloat16 input and weight bits, output float32 or bfloat16 (y_bf16).
   Returns 0 when the problem is not taken (the caller's path runs), else the threads used or -1. */
static int op_conv_stem_run(const op_conv_desc *d, const void *x, int x_bf16, const void *w, int bf16,
                            const float *bias, void *y, int y_bf16, int act, int nthreads)
{
    int64_t tapoff[OP_STEM_MAXTAPS];
    int wj0[OP_STEM_MAXTAPS], wj1[OP_STEM_MAXTAPS];
    /* the band: up to 16 output rows, fewer while the tasks are under 4 per thread (balance) */
    int64_t band = 16;
    while (band > 2 && d->n * op_cdiv64(d->oh, band) < 4 * (int64_t)nthreads) band /= 2;
    band = op_min64(band, d->oh);
    op_stem_geo g;
    const int64_t ntap = op_stem_geometry(d, bf16, band, &g, tapoff, wj0, wj1);
    const size_t xqstep = (size_t)op_roundup64(d->c * g.PH * g.rowstep * 4, OP_ALIGN);
    if ((double)xqstep * nthreads > (double)(256 << 20)) return 0;
    const int64_t OCP = op_roundup64(d->oc, OP_STEM_PW);
    const size_t wbytes = 4 * (size_t)(ntap * OCP);
    char *xq = (char *)op_conv_scratch_alloc(xqstep * (size_t)nthreads);
    void *wq = wbytes ? op_conv_scratch_alloc(wbytes) : NULL;
    float *rowbuf = g.nhwc ? NULL : (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)(nthreads * d->ow * OCP));
    int used = -1;
    if (xq && wq && (g.nhwc || rowbuf)) {
        op_stem_fill_ctx fc = {&g, x, x_bf16, bf16, w, (uint32_t *)wq, ntap, OCP, wj0, wj1};
        op_stem_pack_w(&fc);
        const int nt = (op_conv_stem_opts & OP_STEM_NT) && g.nhwc && !y_bf16 &&
                       (double)d->n * d->oh * d->ow * d->oc * 4 > OP_STEM_NT_MIN;
        op_stem_run_ctx t = {&g, &fc, xq, xqstep, wq, ntap, OCP, tapoff, bias, y, y_bf16, act, bf16,
                             rowbuf, nt};
        used = op_parallel_for(nthreads, d->n * op_cdiv64(d->oh, band), op_stem_task, &t);
    }
    op_conv_scratch_free(rowbuf);
    op_conv_scratch_free(wq);
    op_conv_scratch_free(xq);
    return used;
}
#endif

int op_conv2d_stem(const op_conv_desc *d, int bf16)
{
#if defined(OP_HAS_AVX2)
    if (!bf16) return (op_conv_stem_opts & OP_STEM_F32) && op_stem_fits(d);
#endif
#if defined(OP_BF16_HAS_DP)
    if (bf16) return (op_conv_stem_opts & OP_STEM_BF16) && op_stem_fits(d);
#endif
    (void)d;
    (void)bf16;
    return 0;
}

/* The float32 route of op_conv2d_f32 (0: not taken). */
static int op_conv_stem_f32(const op_conv_desc *d, const void *x, int x_bf16, const float *w,
                            const float *bias, float *y, int act, int nthreads)
{
#if defined(OP_HAS_AVX2)
    if (op_conv2d_stem(d, 0))
        return op_conv_stem_run(d, x, x_bf16, w, 0, bias, y, 0, act, nthreads);
#else
    (void)d; (void)x; (void)x_bf16; (void)w; (void)bias; (void)y; (void)act; (void)nthreads;
#endif
    return 0;
}

/* The bfloat16 route of op_conv2d_bf16 (0: not taken). */
static int op_conv_stem_bf16(const op_conv_desc *d, const uint16_t *x, const uint16_t *w, const float *bias,
                             void *y, int y_bf16, int act, int nthreads)
{
#if defined(OP_BF16_HAS_DP)
    if (op_conv2d_stem(d, 1))
        return op_conv_stem_run(d, x, 1, w, 1, bias, y, y_bf16, act, nthreads);
#else
    (void)d; (void)x; (void)w; (void)bias; (void)y; (void)y_bf16; (void)act; (void)nthreads;
#endif
    return 0;
}
