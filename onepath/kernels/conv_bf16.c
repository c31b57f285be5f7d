/* conv_bf16.c: bfloat16 convolution on the level's BF16 GEMM kernels (VDPBF16PS at avx512_core_bf16,
   AMX tiles at avx512_core_amx and in the amx_emu build), float32 accumulation, float32 or bfloat16 output.

   Same GEMM formulation as conv_f32.c, with the operands packed straight into the "k32" layout of
   gemm_bf16.c (blocks of 32 depths; B as interleaved K-pairs):
     NCHW: C[oc][pixel] = W[oc][(kh,kw,c)] * B[(kh,kw,c)][pixel] over a pre-transformed input
           (op_conv2d_bf16_xp, below: the input copied once per call into padded, stride-phase-split
           channel-pair planes, the weight reordered to (OC, KH, KW, C/g rounded up to even)), so each
           16-column half of a K-pair row of B is one or a few contiguous 64-byte loads
           (op_conv_pack_b_nchw_xp). Used when 2*OH*OW >= OC/g (the per-call weight reorder stays
           small beside the gather); otherwise the depth order is the weight's own (c,kh,kw), A is the
           weight in place and each K-pair of a 32-pixel micro-panel is two gathered bfloat16 rows
           interleaved (op_conv_pack_b_nchw_k32). A 1x1 stride-1 unpadded convolution packs the input
           itself with op_pack_b_k32.
     NHWC: C[pixel][oc] = A[pixel][depth] * B[depth][oc] over conv_f32.c's padded NHWC copy of the
           input ("NHWC over a padded input": depth order (channel block of 32, kh, kw, c), a block
           plan of contiguous runs, so a k32 A row of a pixel is one or a few masked 64-byte loads,
           op_conv_pack_a_nhwc_q) and the weight packed in place in that order
           (op_conv_pack_b_nhwc_k32). A 1x1 stride-1 unpadded convolution is a plain GEMM; a strided
           unpadded 1x1 one (option "1x1_strided_ref") a GEMM over its sampled pixels read in place.
   A bfloat16 output is rounded once per finished tile by the GEMM driver (op_gemm_args.c16): from
   the thread's float tile when the depth fits one KC block, else from the driver's float scratch.
   Levels without BF16 instructions widen the weight and run op_conv2d_f32 (bfloat16 input). */

#if defined(OP_BF16_NATIVE)
typedef struct {
    const op_conv_desc *d;
    const uint16_t *x;
    int64_t cg, ocg;
    int64_t g0;
} op_convb_geo;

OP_INLINE void op_convb_entry(const op_convb_geo *q, int64_t bi, int64_t *n, int64_t *g)
{
    if (q->g0 >= 0) {
        *n = bi;
        *g = q->g0;
    } else {
        *n = bi / q->d->groups;
        *g = bi % q->d->groups;
    }
}

/* NCHW: len (<= 32) consecutive im2col columns (output pixels jstart..) of one depth row. */
static void op_convb_fill_row(const op_conv_desc *d, const uint16_t *x, int64_t plane, int64_t ihoff,
                              int64_t iwoff, int64_t jstart, int64_t len, uint16_t *OP_RESTRICT o)
{
    const int64_t H = d->h, W = d->w, OW = d->ow, sh = d->sh, sw = d->sw;
    int64_t oh = jstart / OW, ow = jstart % OW;
    for (int64_t jj = 0; jj < len;) {
        const int64_t run = op_min64(OW - ow, len - jj);
        const int64_t ih = oh * sh + ihoff;
        uint16_t *r = o + jj;
        if (ih < 0 || ih >= H) {
            memset(r, 0, (size_t)run * 2);
        } else {
            const int64_t iw0 = ow * sw + iwoff;
            int64_t tlo = iw0 >= 0 ? 0 : op_cdiv64(-iw0, sw);
            int64_t thi = iw0 >= W ? 0 : op_cdiv64(W - iw0, sw);
            if (tlo > run) tlo = run;
            if (thi > run) thi = run;
            if (thi < tlo) thi = tlo;
            for (int64_t t = 0; t < tlo; t++) r[t] = 0;
            const uint16_t *src = x + plane + ih * W + iw0;
            if (sw == 1) {
                memcpy(r + tlo, src + tlo, (size_t)(thi - tlo) * 2);
            } else {
                for (int64_t t = tlo; t < thi; t++) r[t] = src[t * sw];
            }
            for (int64_t t = thi; t < run; t++) r[t] = 0;
        }
        jj += run;
        ow = 0;
        oh++;
    }
}

static void op_conv_pack_b_nchw_k32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                    int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    const op_convb_geo *q = (const op_convb_geo *)g->user;
    const op_conv_desc *d = q->d;
    int64_t n, gi;
    op_convb_entry(q, bi, &n, &gi);
    const int64_t khw = d->kh * d->kw;
    uint16_t *D = (uint16_t *)dst;
    uint16_t rows[2][32] OP_ALIGNED(64);
#if defined(OP_HAS_AVX512)
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
#endif
    for (int64_t jr = 0; jr < nc; jr += 32, D += 32 * kcp) {
        const int64_t nr = op_min64(32, nc - jr);
        for (int64_t kb = 0; kb * 32 < kcp; kb++) {
            uint16_t *blk = D + kb * 1024;
            for (int pr = 0; pr < 16; pr++) {
                for (int t = 0; t < 2; t++) {
                    const int64_t p = kb * 32 + 2 * pr + t;
                    uint16_t *r = rows[t];
                    if (p >= kc) {
                        memset(r, 0, 64);
                        continue;
                    }
                    const int64_t pp = p0 + p, c = pp / khw, rr = pp % khw;
                    const int64_t ki = rr / d->kw, kj = rr % d->kw;
                    const int64_t plane = ((n * d->c + gi * q->cg + c) * d->h) * d->w;
                    op_convb_fill_row(d, q->x, plane, ki * d->dh - d->pt, kj * d->dw - d->pl, j0 + jr,
                                      nr, r);
                    for (int64_t j = nr; j < 32; j++) r[j] = 0;
                }
#if defined(OP_HAS_AVX512)
                const __m512i x0 = _mm512_load_si512((const void *)rows[0]);
                const __m512i x1 = _mm512_load_si512((const void *)rows[1]);
                _mm512_storeu_si512((void *)(blk + pr * 32), _mm512_permutex2var_epi16(x0, lo_idx, x1));
                _mm512_storeu_si512((void *)(blk + 512 + pr * 32), _mm512_permutex2var_epi16(x0, hi_idx, x1));
#else
                for (int j = 0; j < 32; j++) {
                    blk[(j >> 4) * 512 + pr * 32 + (j & 15) * 2] = rows[0][j];
                    blk[(j >> 4) * 512 + pr * 32 + (j & 15) * 2 + 1] = rows[1][j];
                }
#endif
            }
        }
    }
}

/* ---------------------------------------------------------------- NCHW over a pre-transformed input

   The input is rewritten once per call into Xp[e][cp][a][b][Hs][Ws] of channel pairs (one uint32:
   channel 2cp low, 2cp+1 high; a zero channel pads an odd C/g), zero-padded by the convolution's
   padding and split into sh x sw stride phases (row ih_p = r*sh + a, column iw_p = s*sw + b of the
   padded input). The depth order becomes (kh, kw, c) over the even channel count cgp (the weight is
   reordered to (OC, KH, KW, cgp) with zero rows for a padding channel), so a K-pair is one channel
   pair of one tap and, for output pixels (oh, ow..ow+L) of one output row, the pairs are the L
   consecutive uint32 at Xp[..][cp][phase of tap][oh + ki*dh/sh][ow + kj*dw/sw ..]: each 16-column
   half of a k32 B micro-panel row is one (masked) 64-byte load per output-row segment. */
typedef struct {
    const op_conv_desc *d;
    const uint32_t *xp;
    int64_t cph, hs, ws, plane_c;   /* pairs; rows/cols of a phase plane; uint32 per channel pair */
    int64_t g0;
    const int64_t *tapoff;          /* per tap: phase plane + row/col offset, in uint32 */
} op_convx_geo;

typedef struct {
    const op_conv_desc *d;
    const uint16_t *x;
    uint32_t *xp;
    int64_t cg, cph, hs, ws;
} op_convx_fill_ctx;

/* one task = one (entry e, channel pair cp) */
static void op_convx_fill_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_convx_fill_ctx *f = (const op_convx_fill_ctx *)ctx;
    const op_conv_desc *d = f->d;
    const int64_t G = d->groups, e = task / f->cph, cp = task % f->cph;
    const int64_t n = e / G, gi = e % G, c0 = 2 * cp;
    const int64_t H = d->h, W = d->w, sh = d->sh, sw = d->sw, hs = f->hs, ws = f->ws;
    const uint16_t *p0 = f->x + ((n * d->c + gi * f->cg + c0) * H) * W;
    const uint16_t *p1 = c0 + 1 < f->cg ? p0 + H * W : NULL;
    uint32_t *o = f->xp + task * sh * sw * hs * ws;
    for (int64_t a = 0; a < sh; a++)
        for (int64_t r = 0; r < hs; r++) {
            const int64_t ih = r * sh + a - d->pt;
            for (int64_t b = 0; b < sw; b++) {
                uint32_t *orow = o + ((a * sw + b) * hs + r) * ws;
                if (ih < 0 || ih >= H) {
                    memset(orow, 0, (size_t)ws * 4);
                    continue;
                }
                const uint16_t *r0 = p0 + ih * W, *r1 = p1 ? p1 + ih * W : NULL;
                /* columns s with 0 <= s*sw + b - pl < W */
                const int64_t off = b - d->pl;
                int64_t slo, shi;
                op_convx_cols(off, sw, W, ws, &slo, &shi);
                for (int64_t s = 0; s < slo; s++) orow[s] = 0;
                int64_t s = slo;
#if defined(OP_HAS_AVX512)
                if (sw == 1 && r1) {
                    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10,
                                                            41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35,
                                                            3, 34, 2, 33, 1, 32, 0);
                    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
                    for (; s + 32 <= shi; s += 32) {
                        const __m512i x0 = _mm512_loadu_si512((const void *)(r0 + s + off));
                        const __m512i x1 = _mm512_loadu_si512((const void *)(r1 + s + off));
                        _mm512_storeu_si512((void *)(orow + s), _mm512_permutex2var_epi16(x0, lo_idx, x1));
                        _mm512_storeu_si512((void *)(orow + s + 16), _mm512_permutex2var_epi16(x0, hi_idx, x1));
                    }
                    if (s < shi) {   /* the row's tail (< 32 pairs): masked */
                        const int64_t nt = shi - s;
                        const __mmask32 lm = (__mmask32)(((uint64_t)1 << nt) - 1u);
                        const __m512i x0 = _mm512_maskz_loadu_epi16(lm, (const void *)(r0 + s + off));
                        const __m512i x1 = _mm512_maskz_loadu_epi16(lm, (const void *)(r1 + s + off));
                        const __mmask16 m0 = (__mmask16)(nt >= 16 ? 0xFFFFu : (1u << nt) - 1u);
                        const __mmask16 m1 = (__mmask16)(nt <= 16 ? 0u : (1u << (nt - 16)) - 1u);
                        _mm512_mask_storeu_epi32((void *)(orow + s), m0, _mm512_permutex2var_epi16(x0, lo_idx, x1));
                        _mm512_mask_storeu_epi32((void *)(orow + s + 16), m1, _mm512_permutex2var_epi16(x0, hi_idx, x1));
                        s = shi;
                    }
                } else if (sw == 2 && r1) {
                    const __m512i ev = _mm512_set_epi16(62, 30, 60, 28, 58, 26, 56, 24, 54, 22, 52, 20, 50,
                                                        18, 48, 16, 46, 14, 44, 12, 42, 10, 40, 8, 38, 6,
                                                        36, 4, 34, 2, 32, 0);
                    for (; s + 17 <= shi; s += 16) {
                        const uint16_t *q0 = r0 + s * 2 + off, *q1 = r1 + s * 2 + off;
                        const __m512i x0 = _mm512_loadu_si512((const void *)q0);
                        const __m512i x1 = _mm512_loadu_si512((const void *)q1);
                        _mm512_storeu_si512((void *)(orow + s), _mm512_permutex2var_epi16(x0, ev, x1));
                    }
                    if (s < shi) {   /* the row's tail (<= 16 pairs, columns up to 2*(shi-s)-2): masked */
                        const int64_t nt = shi - s;
                        const __mmask32 lm = (__mmask32)(((uint64_t)1 << (2 * nt - 1)) - 1u);
                        const uint16_t *q0 = r0 + s * 2 + off, *q1 = r1 + s * 2 + off;
                        const __m512i x0 = _mm512_maskz_loadu_epi16(lm, (const void *)q0);
                        const __m512i x1 = _mm512_maskz_loadu_epi16(lm, (const void *)q1);
                        _mm512_mask_storeu_epi32((void *)(orow + s), (__mmask16)((1u << nt) - 1u),
                                                 _mm512_permutex2var_epi16(x0, ev, x1));
                        s = shi;
                    }
                }
#endif
                for (; s < shi; s++) {
                    const int64_t iw = s * sw + off;
                    orow[s] = (uint32_t)r0[iw] | (r1 ? (uint32_t)r1[iw] << 16 : 0u);
                }
                for (s = shi; s < ws; s++) orow[s] = 0;
            }
        }
}

static void op_conv_pack_b_nchw_xp(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                   int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    const op_convx_geo *q = (const op_convx_geo *)g->user;
    const op_conv_desc *d = q->d;
    int64_t e;
    if (q->g0 >= 0)
        e = bi * d->groups + q->g0;
    else
        e = bi;
    const uint32_t *xe = q->xp + e * q->cph * q->plane_c;
    const int64_t OW = d->ow, cph = q->cph, ws = q->ws;
    uint16_t *D = (uint16_t *)dst;
    for (int64_t jr = 0; jr < nc; jr += 32, D += 32 * kcp) {
        /* output-row segments of each 16-column half: lanes [t0, t0+len) read from pixel offset off */
        int nseg[2];
        int64_t soff[2][16];
#if defined(OP_HAS_AVX512)
        __mmask16 smask[2][16];
#endif
        int st0[2][16], slen[2][16];
        for (int h = 0; h < 2; h++) {
            const int64_t nrh = op_max64(0, op_min64(16, nc - jr - 16 * h));
            int64_t j = j0 + jr + 16 * h, oh = j / OW, ow = j % OW;
            int ns = 0;
            for (int64_t t = 0; t < nrh;) {
                const int64_t len = op_min64(OW - ow, nrh - t);
                soff[h][ns] = oh * ws + ow - t;
                st0[h][ns] = (int)t;
                slen[h][ns] = (int)len;
#if defined(OP_HAS_AVX512)
                smask[h][ns] = (__mmask16)((((1u << len) - 1u) << t) & 0xFFFFu);
#endif
                ns++;
                t += len;
                ow = 0;
                oh++;
            }
            nseg[h] = ns;
        }
        (void)st0;
        (void)slen;
        for (int64_t kb = 0; kb * 32 < kcp; kb++) {
            uint16_t *blk = D + kb * 1024;
            int64_t P = p0 / 2 + kb * 16;
            int64_t tap = P / cph, cp = P % cph;
            for (int pr = 0; pr < 16; pr++) {
                const int64_t p = kb * 32 + 2 * pr;
                uint32_t *o0 = (uint32_t *)(void *)(blk + pr * 32);
                uint32_t *o1 = (uint32_t *)(void *)(blk + 512 + pr * 32);
                if (p >= kc) {
                    memset(o0, 0, 64);
                    memset(o1, 0, 64);
                } else {
                    const uint32_t *src = xe + cp * q->plane_c + q->tapoff[tap];
#if defined(OP_HAS_AVX512)
                    __m512i v0 = _mm512_setzero_si512(), v1 = v0;
                    for (int s = 0; s < nseg[0]; s++)
                        v0 = _mm512_mask_loadu_epi32(v0, smask[0][s], (const void *)(src + soff[0][s]));
                    for (int s = 0; s < nseg[1]; s++)
                        v1 = _mm512_mask_loadu_epi32(v1, smask[1][s], (const void *)(src + soff[1][s]));
                    _mm512_storeu_si512((void *)o0, v0);
                    _mm512_storeu_si512((void *)o1, v1);
#else
                    uint32_t *oo[2] = {o0, o1};
                    for (int h = 0; h < 2; h++) {
                        memset(oo[h], 0, 64);
                        for (int s = 0; s < nseg[h]; s++)
                            for (int t = st0[h][s]; t < st0[h][s] + slen[h][s]; t++)
                                oo[h][t] = src[soff[h][s] + t];
                    }
#endif
                }
                if (++cp == cph) {
                    cp = 0;
                    tap++;
                }
            }
        }
    }
}

typedef struct {
    const uint16_t *w;
    uint16_t *wr;
    int64_t cg, cgp, khw, nocs;
} op_convx_wr_ctx;

/* (OC, C/g, KH, KW) -> (OC, KH, KW, cgp), zero for the padding channel */
static void op_convx_wr_task(void *ctx, int64_t oc, int tid)
{
    (void)tid;
    const op_convx_wr_ctx *x = (const op_convx_wr_ctx *)ctx;
    const uint16_t *s = x->w + oc * x->cg * x->khw;
    uint16_t *o = x->wr + oc * x->cgp * x->khw;
    for (int64_t t = 0; t < x->khw; t++) {
        int64_t c = 0;
#if defined(OP_HAS_AVX512)
        /* 16 channels per dword gather (the element is the low half; the high half may be the
           element after the weight's last one, so the last output channel stays scalar) */
        if (oc + 1 < x->nocs && x->cg * x->khw < (1 << 26)) {
            const __m512i step = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5,
                                                                     4, 3, 2, 1, 0),
                                                    _mm512_set1_epi32((int)x->khw));
            for (; c + 16 <= x->cg; c += 16) {
                const __m512i idx = _mm512_add_epi32(step, _mm512_set1_epi32((int)(c * x->khw + t)));
                const __m512i v = _mm512_i32gather_epi32(idx, (const void *)s, 2);
                _mm256_storeu_si256((__m256i *)(void *)(o + t * x->cgp + c), _mm512_cvtepi32_epi16(v));
            }
        }
#endif
        for (; c < x->cg; c++) o[t * x->cgp + c] = s[c * x->khw + t];
        for (int64_t c = x->cg; c < x->cgp; c++) o[t * x->cgp + c] = 0;
    }
}

/* ---------------------------------------------------------------- A read in place (VDPBF16PS)

   op_gemm_ops.ukr_a for the NHWC 1x1 stride-1 bfloat16 convolution (a plain GEMM on the input rows):
   gemm_bf16.c's 14 x 32 VDPBF16PS micro-kernel with each K-pair of A broadcast (32 bits) straight
   from the input row instead of from a packed k32 micro-panel, as conv_f32.c's op_conv_ukr_a_f32
   does for float32 (packing A costs a large share when OC/g is 64-256: each input row feeds only
   2-8 B panels). The next 14 rows are prefetched a line per K-pair step. Full 14-row panels. */
#if defined(OP_BF16_HAS_DP)
/* The k loop shared by op_conv_ukr_a_dp and op_conv_ukr16_a_dp: adds the kcp-deep product of 14 A
   rows read in place (row i at A + i * LDA, each K-pair broadcast as 32 bits) and the k32-packed B
   panel B_ (1024 elements per 32 of depth) to the caller's accumulators c0_0 ... c13_1, prefetching
   the next 14 rows a line per K-pair step. */
#define OP_ADP_RA(i, src)                                                                 \
    {                                                                                     \
        int32_t av;                                                                       \
        memcpy(&av, (src), 4);                                                            \
        const __m512i ai = _mm512_set1_epi32(av);                                         \
        c##i##_0 = _mm512_dpbf16_ps(c##i##_0, (__m512bh)ai, (__m512bh)b0);                \
        c##i##_1 = _mm512_dpbf16_ps(c##i##_1, (__m512bh)ai, (__m512bh)b1);                \
    }
#define OP_ADP_LOOP14(A, LDA, B_, KCP)                                                    \
    {                                                                                     \
        const int64_t lda_ = (LDA), l2 = 2 * lda_;                                        \
        const uint16_t *OP_RESTRICT b = (B_);                                             \
        const uint16_t *p0 = (A), *p3 = p0 + 3 * lda_, *p6 = p0 + 6 * lda_,               \
                       *p9 = p0 + 9 * lda_, *p12 = p0 + 12 * lda_, *pf = p0 + OP_DP_MR * lda_; \
        for (int64_t kb = 0; kb * 32 < (KCP); kb++) {                                     \
            for (int pr = 0; pr < 16; pr++) {                                             \
                const int64_t k = kb * 32 + 2 * pr;                                       \
                const __m512i b0 = _mm512_loadu_si512((const void *)(b + pr * 32));       \
                const __m512i b1 = _mm512_loadu_si512((const void *)(b + 512 + pr * 32)); \
                if (pr < OP_DP_MR) _mm_prefetch((const char *)(pf + pr * lda_ + kb * 32), _MM_HINT_T0); \
                OP_ADP_RA(0, p0 + k) OP_ADP_RA(1, p0 + lda_ + k) OP_ADP_RA(2, p0 + l2 + k)  \
                OP_ADP_RA(3, p3 + k) OP_ADP_RA(4, p3 + lda_ + k) OP_ADP_RA(5, p3 + l2 + k)  \
                OP_ADP_RA(6, p6 + k) OP_ADP_RA(7, p6 + lda_ + k) OP_ADP_RA(8, p6 + l2 + k)  \
                OP_ADP_RA(9, p9 + k) OP_ADP_RA(10, p9 + lda_ + k) OP_ADP_RA(11, p9 + l2 + k) \
                OP_ADP_RA(12, p12 + k) OP_ADP_RA(13, p12 + lda_ + k)                      \
            }                                                                             \
            b += 1024;                                                                    \
        }                                                                                 \
    }

static void op_conv_ukr_a_dp(int64_t kcp, const void *a_, int64_t lda, const void *b_, float *c,
                             int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)mr;   /* always OP_DP_MR (14) */
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    if (csc == 1)
        for (int i = 0; i < OP_DP_MR; i++) {
            _mm_prefetch((const char *)(c + i * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 31), _MM_HINT_T0);
        }
    OP_ADP_LOOP14((const uint16_t *)a_, lda, (const uint16_t *)b_, kcp)
    if (OP_LIKELY(csc == 1)) {
        op_epi512 e;
        op_epi512_init(&e, nr, epi);
#define OP_W(i) op_epi512_row(&e, c + i * rsc, i, c##i##_0, c##i##_1, nr, acc);
        OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5) OP_W(6)
        OP_W(7) OP_W(8) OP_W(9) OP_W(10) OP_W(11) OP_W(12) OP_W(13)
#undef OP_W
        return;
    }
    float t[OP_DP_MR * 32] OP_ALIGNED(64);
    OP_TILE14_STORE(t, 14);
    op_bf16_tile_out(t, 32, OP_DP_MR, nr, c, rsc, csc, acc, epi);
}
#endif

#if defined(OP_BF16_HAS_DP)
/* op_gemm_ops.ukr16 of the NHWC 1x1 stride-1 path with A read in place (a: an op_dp_aref panel slot,
   op_bf16_dp_ref_ops): a 14-row panel as op_conv_ukr_a_dp computes it, written as bfloat16 from the
   registers with the epilogue (op_dp_row16, as op_ukr16_dp_ref's float tile does: the same bits);
   shorter panels go to op_ukr16_dp_ref. */
static void op_conv_ukr16_a_dp(int64_t kcp, const void *a_, const void *b_, int64_t ldb, uint16_t *c16,
                               int64_t rsc16, int mr, int nr, const op_epilogue *epi)
{
    if (mr != OP_DP_MR) {
        op_ukr16_dp_ref(kcp, a_, b_, ldb, c16, rsc16, mr, nr, epi);
        return;
    }
    const op_dp_aref *ar = (const op_dp_aref *)a_;
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    for (int i = 0; i < OP_DP_MR; i++) _mm_prefetch((const char *)(c16 + i * rsc16), _MM_HINT_T0);
    OP_ADP_LOOP14(ar->a, ar->lda, (const uint16_t *)b_, kcp)
    op_epi512 e;
    op_epi512_init(&e, nr, epi);
#define OP_W(i) op_dp_row16(&e, c16 + i * rsc16, i, c##i##_0, c##i##_1, nr);
    OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5) OP_W(6)
    OP_W(7) OP_W(8) OP_W(9) OP_W(10) OP_W(11) OP_W(12) OP_W(13)
#undef OP_W
}
#endif

/* ---------------------------------------------------------------- the GEMM calls

   One bfloat16 convolution GEMM through op_bf16_run: one driver call per group when the groups
   carry a bias (the epilogue's bias pointer is per call), else one call over all (image, group)
   entries. *g0 (in the pack geometry behind `user`) is set to the group of the call, or -1.
     NCHW: C[oc][pixel] = W[oc][k] * B[k][pixel], A = the weight (k_w = row length, k = k_w), B = x
           (read in place by op_pack_b_k32 only for a 1x1 stride-1 unpadded convolution);
     NHWC: C[pixel][oc] = A[pixel][k] * W^T, B = the weight transposed (rsb = 1, csb = k_w), A = x
           (read in place by the kernels' own A pack only for the 1x1 stride-1 unpadded case).
   Packs that gather through `user` ignore the in-place operand. */
static int op_convb_gemm(const op_conv_desc *d, const op_gemm_ops *ops, int amx, const void *user,
                         int64_t *g0, const uint16_t *x, const uint16_t *w, int64_t k_w,
                         const float *bias, int act, void *y, int y_bf16, const op_blocking *blk,
                         int nthreads)
{
    const int64_t G = d->groups, cg = d->c / G, ocg = d->oc / G;
    const int64_t ohw = d->oh * d->ow, hw = d->h * d->w;
    const int per_group = G > 1 && bias != NULL;
    const int64_t calls = per_group ? G : 1;
    const int joint = op_conv_joint(d);   /* one entry over all images' pixels (conv_f32.c) */
    const int64_t batch = joint ? 1 : per_group ? d->n : d->n * G;
    int64_t *offs = (int64_t *)malloc(sizeof(int64_t) * (size_t)(3 * batch));
    if (!offs) return -1;
    int64_t *xo = offs, *wo = offs + batch, *yo = offs + 2 * batch;
    int used = 1;
    for (int64_t call = 0; call < calls; call++) {
        *g0 = per_group ? call : -1;
        for (int64_t bi = 0; bi < batch; bi++) {
            const int64_t n = per_group ? bi : bi / G, gi = per_group ? call : bi % G;
            xo[bi] = d->nhwc ? n * hw * d->c + gi * cg : (n * d->c + gi * cg) * hw;
            wo[bi] = gi * ocg * k_w;
            yo[bi] = d->nhwc ? n * ohw * d->oc + gi * ocg : (n * d->oc + gi * ocg) * ohw;
        }
        op_epilogue epi;
        epi.bias = bias ? bias + (per_group ? call * ocg : 0) : NULL;
        epi.bias_stride = 1;
        epi.bias_axis = d->nhwc ? 1 : 0;
        epi.act = act;
        op_gemm_args g;
        memset(&g, 0, sizeof g);
        g.batch = batch;
        g.k = k_w;
        g.epi = (bias || act != OP_ACT_NONE) ? &epi : NULL;
        g.user = user;
        int r;
        if (d->nhwc) {
            g.m = joint ? d->n * ohw : ohw; g.n = ocg;
            g.a = x; g.a_off = xo; g.rsa = d->c; g.csa = 1;
            g.b = w; g.b_off = wo; g.rsb = 1; g.csb = k_w;
            r = op_bf16_run(ops, &g, amx, y, yo, d->oc, 1, y_bf16, blk, nthreads);
        } else {
            g.m = ocg; g.n = ohw;
            g.a = w; g.a_off = wo; g.rsa = k_w; g.csa = 1;
            g.b = x; g.b_off = xo; g.rsb = hw; g.csb = 1;
            r = op_bf16_run(ops, &g, amx, y, yo, ohw, 1, y_bf16, blk, nthreads);
        }
        if (r < 0) {
            used = r;
            break;
        }
        if (r > used) used = r;
    }
    free(offs);
    return used;
}

/* The weight reordered to (OC, KH, KW, cgp) (op_convx_wr_task), or NULL on allocation failure. */
static uint16_t *op_convb_reorder_w(const op_conv_desc *d, const uint16_t *w, int64_t cgp, int nthreads)
{
    const int64_t cg = d->c / d->groups, khw = d->kh * d->kw, Kp = khw * cgp;
    uint16_t *wr = (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(d->oc * Kp));
    if (!wr) return NULL;
    op_convx_wr_ctx wc = {w, wr, cg, cgp, khw, d->oc};
    op_parallel_for(d->oc * Kp >= (1 << 18) ? nthreads : 1, d->oc, op_convx_wr_task, &wc);
    return wr;
}

/* NCHW bf16 over the pre-transformed input (above). Returns 0 when the transform does not apply. */
static int op_conv2d_bf16_xp(const op_conv_desc *d, const uint16_t *x, const uint16_t *w,
                             const float *bias, void *y, int y_bf16, int act, const op_blocking *blk,
                             int nthreads)
{
    const int64_t G = d->groups, cg = d->c / G, ocg = d->oc / G, khw = d->kh * d->kw;
    const int64_t cgp = cg + (cg & 1), cph = cgp / 2, Kp = khw * cgp, ohw = d->oh * d->ow;
    int64_t hs, ws;
    const int64_t plane_c = op_convx_phases(d, &hs, &ws, NULL);
    const int64_t entries = d->n * G;
    /* the weight reorder (OC x K, per call) must stay small beside the gathered input (K x OH*OW):
       measured on AMX, res4 3x3 (OH*OW 196, OC 256) gains, res5 (49, 512) loses */
    if (2 * ohw < ocg) return 0;
    if ((double)entries * (double)cph * (double)plane_c * 4.0 > (double)(256 << 20)) return 0;
    if ((double)plane_c * (double)cph >= 2147483647.0) return 0;
    int amx = 0;
    op_gemm_ops ops = *op_bf16_pick(ocg, &amx);
    ops.direct_b = 0;
    ops.b_prepacked = 0;
    ops.pack_b = op_conv_pack_b_nchw_xp;
    uint32_t *xp = (uint32_t *)op_conv_scratch_alloc(sizeof(uint32_t) * (size_t)(entries * cph * plane_c));
    uint16_t *wr = op_convb_reorder_w(d, w, cgp, nthreads);
    int64_t *tapoff = (int64_t *)malloc(sizeof(int64_t) * (size_t)khw);
    int used = -1;
    if (xp && wr && tapoff) {
        op_convx_fill_ctx fc = {d, x, xp, cg, cph, hs, ws};
        op_parallel_for(entries * cph * plane_c >= (1 << 16) ? nthreads : 1, entries * cph,
                        op_convx_fill_task, &fc);
        op_convx_phases(d, &hs, &ws, tapoff);
        op_convx_geo q;
        q.d = d;
        q.xp = xp;
        q.cph = cph;
        q.hs = hs;
        q.ws = ws;
        q.plane_c = plane_c;
        q.tapoff = tapoff;
        op_blocking bx;
        used = op_convb_gemm(d, &ops, amx, &q, &q.g0, x, wr, Kp, bias, act, y, y_bf16,
                             op_convx_blk(blk, &ops, &bx), nthreads);
    }
    free(tapoff);
    op_conv_scratch_free(wr);
    op_conv_scratch_free(xp);
    return used;
}

/* ---------------------------------------------------------------- NHWC over a padded input

   The padded NHWC copy and the block plan of its runs are conv_f32.c's (op_convq_prepare), with
   blocks of 32 depths (the k32 layout); the input stays bfloat16. */

/* A of the NHWC GEMM: MR-row micro-panels of 32-depth blocks, a[(kb*MR + i)*32 + t] =
   A[i0 + ir + i][p0 + kb*32 + t] (p0 is a multiple of 32: the driver's kc is rounded to k_align). */
static void op_conv_pack_a_nhwc_q(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc,
                                  int64_t p0, int64_t kc, int64_t kcp, void *dst)
{
    (void)kc;
    const op_convq_geo *q = (const op_convq_geo *)g->user;
    const int MR = q->mr;
    const int64_t kb0 = p0 / 32, nkb = kcp / 32;
    const uint16_t *X = (const uint16_t *)q->xq;
    const uint16_t *px[32];   /* the micro-panel's pixels (MR <= 32: AMX 32, VDPBF16PS 14) */
    uint16_t *D = (uint16_t *)dst;
    for (int64_t ir = 0; ir < mc; ir += MR, D += MR * kcp) {
        const int mr = (int)op_min64(MR, mc - ir);
        for (int i = 0; i < mr; i++) px[i] = X + op_convq_pixel(q, bi, i0 + ir + i);
        for (int64_t kb = 0; kb < nkb; kb++) {   /* rows written in order */
            const int64_t b = kb0 + kb;
            uint16_t *row = D + kb * MR * 32;
            const int live = b < q->nblk ? mr : 0;
            const op_convq_seg *s0 = q->seg + q->bseg[b < q->nblk ? b : 0], *e = q->seg + q->bseg[b < q->nblk ? b + 1 : 0];
            for (int i = 0; i < MR; i++, row += 32) {
                if (i >= live) {
                    memset(row, 0, 64);
                    continue;
                }
#if defined(OP_HAS_AVX512)
                __m512i v = _mm512_setzero_si512();
                for (const op_convq_seg *s = s0; s < e; s++)
                    v = _mm512_mask_loadu_epi16(v, (__mmask32)s->mask, (const void *)(px[i] + s->off - s->t0));
                _mm512_storeu_si512((void *)row, v);
#else
                memset(row, 0, 64);
                for (const op_convq_seg *s = s0; s < e; s++) memcpy(row + s->t0, px[i] + s->off, (size_t)s->len * 2);
#endif
            }
        }
    }
}

/* B of the bf16 NHWC GEMM from the weight (OC, C/g, KH, KW) in place, k32 micro-panels (g->b at the
   entry's group, row length csb = K; depths p0 .. p0+kc whole channel blocks of 32, see conv_f32.c).
   Per 32-column panel and channel block, the block's depth rows (32 columns each) are made in the
   pack's scratch (ops.b_scratch) first: the contiguous pieces W[oc][c0 ..][all taps] of 16 pairs of output channels are
   interleaved into dwords (W[oc][k], W[oc+1][k]) and transposed 16 x 16 (op_transpose16_epi32),
   row k = ci*khw + t landing at depth t*cbl + ci; pairs of rows are then interleaved into K-pairs
   (as op_pack_b_k32 does for a row-major B). *nonfinite (when not NULL) is set to whether a packed
   element is Inf or NaN (exponent all ones), checked on the rows as they are interleaved. */
OP_INLINE void op_conv_pack_b_nhwc_k32_nf(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                          int64_t kcp, int64_t j0, int64_t nc, void *dst, int *nonfinite)
{
    const op_convq_geo *q = (const op_convq_geo *)g->user;
    const int64_t cg = q->d->c / q->d->groups, khw = q->d->kh * q->d->kw, K = g->csb, bk = q->bk;
    const uint16_t *W = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    uint16_t *D = (uint16_t *)dst;
    /* the rows of one channel block: scratch after the packed block (ops.b_scratch) */
    uint16_t *rows = D + op_roundup64(nc, 32) * kcp;
#if defined(OP_HAS_AVX512)
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    const __m512i expo = _mm512_set1_epi16(0x7F80);
    __mmask32 nf = 0;
#else
    int nf = 0;
#endif
    for (int64_t jr = 0; jr < nc; jr += 32, D += 32 * kcp) {
        const int nr = (int)op_min64(32, nc - jr);
        const uint16_t *wp = W + (j0 + jr) * K;
        for (int64_t gp = p0; gp < p0 + kc;) {
            const int64_t c0 = gp / (bk * khw) * bk, cbl = op_min64(bk, cg - c0), glen = cbl * khw;
            const uint16_t *src = wp + c0 * khw;
            /* 1. rows[(t*cbl + ci)*32 + j] = W[oc j][c0 + ci][t] */
#if defined(OP_HAS_AVX512)
            int64_t ci = 0, t = 0;   /* element k = ci * khw + t of the block */
            for (int64_t k0 = 0; k0 < glen; k0 += 16) {
                const int nt = (int)op_min64(16, glen - k0);
                const __mmask16 km = (__mmask16)((1u << nt) - 1u);
                __m512i r[16];
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) {
                    const __m512i e0 = 2 * i < nr ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(km, src + (2 * i) * K + k0))
                                                  : _mm512_setzero_si512();
                    const __m512i e1 = 2 * i + 1 < nr ? _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(km, src + (2 * i + 1) * K + k0))
                                                      : _mm512_setzero_si512();
                    r[i] = _mm512_or_si512(e0, _mm512_slli_epi32(e1, 16));
                }
                op_transpose16_epi32(r);
                for (int kk = 0; kk < nt; kk++) {
                    _mm512_store_si512((void *)(rows + (t * cbl + ci) * 32), r[kk]);
                    if (++t == khw) {
                        t = 0;
                        ci++;
                    }
                }
            }
#else
            for (int64_t k = 0; k < glen; k++)
                for (int j = 0; j < 32; j++)
                    rows[((k % khw) * cbl + k / khw) * 32 + j] = j < nr ? src[j * K + k] : 0;
#endif
            memset(rows + glen * 32, 0, 64);   /* the partner of an odd last row */
            /* 2. K-pairs of rows into the k32 blocks (gp - p0 is a multiple of 32) */
            for (int64_t pp = 0; pp < glen; pp += 2) {
                const int64_t p = gp - p0 + pp;
                uint16_t *blk = D + (p / 32) * 1024 + ((p % 32) / 2) * 32;
                const uint16_t *r0 = rows + pp * 32;
#if defined(OP_HAS_AVX512)
                const __m512i x0 = _mm512_load_si512((const void *)r0);
                const __m512i x1 = _mm512_load_si512((const void *)(r0 + 32));
                _mm512_storeu_si512((void *)blk, _mm512_permutex2var_epi16(x0, lo_idx, x1));
                _mm512_storeu_si512((void *)(blk + 512), _mm512_permutex2var_epi16(x0, hi_idx, x1));
                if (nonfinite)
                    nf |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(x0, expo), expo) |
                          _mm512_cmpeq_epi16_mask(_mm512_and_si512(x1, expo), expo);
#else
                for (int j = 0; j < 32; j++) {
                    blk[(j >> 4) * 512 + (j & 15) * 2] = r0[j];
                    blk[(j >> 4) * 512 + (j & 15) * 2 + 1] = r0[32 + j];
                    if (nonfinite) nf |= (r0[j] & 0x7F80) == 0x7F80 || (r0[32 + j] & 0x7F80) == 0x7F80;
                }
#endif
            }
            gp += glen;
        }
        /* K-pairs past the depth (the last block's tail) */
        for (int64_t p = op_roundup64(kc, 2); p < kcp; p += 2) {
            uint16_t *blk = D + (p / 32) * 1024 + ((p % 32) / 2) * 32;
            memset(blk, 0, 64);
            memset(blk + 512, 0, 64);
        }
    }
    if (nonfinite) *nonfinite = nf != 0;
}

static void op_conv_pack_b_nhwc_k32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                    int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    op_conv_pack_b_nhwc_k32_nf(g, bi, p0, kc, kcp, j0, nc, dst, NULL);
}

/* NHWC bf16 over the padded input (conv_f32.c), every NHWC convolution but the 1x1 stride-1 unpadded
   one: A packed by op_conv_pack_a_nhwc_q, the weight in place by op_conv_pack_b_nhwc_k32 (1x1: W^T as
   it lies, op_pack_b_k32). */
static int op_conv2d_bf16_nhwc(const op_conv_desc *d, const uint16_t *x, const uint16_t *w,
                               const float *bias, void *y, int y_bf16, int act, const op_blocking *blk,
                               int nthreads)
{
    const int64_t K = d->kh * d->kw * (d->c / d->groups);
    int amx = 0;
    op_gemm_ops ops = *op_bf16_pick(d->oh * d->ow * (op_conv_joint(d) ? d->n : 1), &amx);
    ops.direct_b = 0;
    ops.b_prepacked = 0;
    ops.pack_a = op_conv_pack_a_nhwc_q;
    ops.ukr_a = NULL;   /* A is gathered, never read in place */
    if (d->kh * d->kw > 1) {
        ops.pack_b = op_conv_pack_b_nhwc_k32;
        ops.b_scratch = sizeof(uint16_t) * 32 * (size_t)(op_min64(32, d->c / d->groups) * d->kh * d->kw + 1);
    }
    op_blocking bq = blk ? *blk : ops.blk;
    bq.kc = op_convq_kc(d, 32, bq.kc > 0 ? bq.kc : ops.blk.kc);
    op_convq_geo q;
    op_convq_buf qb = {NULL, NULL, NULL};
    int used = -1;
    if (op_convq_prepare(d, x, 1, 0, 32, ops.mr, nthreads, &q, &qb) == 0)
        used = op_convb_gemm(d, &ops, amx, &q, &q.g0, x, w, K, bias, act, y, y_bf16, &bq, nthreads);
    op_convq_free(&qb);
    return used;
}

typedef struct {
    const op_conv_desc *d;        /* the NCHW problem */
    const uint16_t *x;
    uint16_t *xq;
    int64_t hq, wq, sub;          /* sub: a strided unpadded 1x1 sampled (xq is OH x OW) */
} op_convb_fill_ctx;

/* one task = one row (n, r) of the padded NHWC copy xq, transposed from the NCHW input */
static void op_convb_fill_nchw_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_convb_fill_ctx *f = (const op_convb_fill_ctx *)ctx;
    const op_conv_desc *d = f->d;
    const int64_t C = d->c, H = d->h, W = d->w, wq = f->wq, n = task / f->hq, r = task % f->hq;
    uint16_t *o = f->xq + task * wq * C;
    const uint16_t *img = f->x + n * C * H * W;
    if (f->sub) {   /* row r of the sample: input row r * sh, columns s * sw */
        const int64_t sw = d->sw;
        const uint16_t *src = img + r * d->sh * W;
        if (sw <= 2 && (sw == 1 || 2 * wq <= W))
            op_convb_tr_block(src, H * W, sw, C, wq, o, C);
        else
            for (int64_t s = 0; s < wq; s++)
                for (int64_t c = 0; c < C; c++) o[s * C + c] = src[c * H * W + s * sw];
        return;
    }
    const int64_t ih = r - d->pt;
    if (ih < 0 || ih >= H) {
        memset(o, 0, sizeof(uint16_t) * (size_t)(wq * C));
        return;
    }
    const int64_t s0 = op_min64(d->pl, wq), s1 = op_min64(d->pl + W, wq);
    memset(o, 0, sizeof(uint16_t) * (size_t)(s0 * C));
    memset(o + s1 * C, 0, sizeof(uint16_t) * (size_t)((wq - s1) * C));
    op_convb_tr_block(img + ih * W, H * W, 1, C, s1 - s0, o + s0 * C, C);
}

/* *dn: the NHWC problem of the NCHW problem d (nhwc = 1; an unpadded strided 1x1 convolution becomes
   the 1x1 stride-1 one of its sampled pixels (oh * sh, ow * sw), as op_conv_as_nhwc_input makes it);
   *sub (if not NULL): whether it was sampled. */
static void op_convb_nchw_problem(const op_conv_desc *d, op_conv_desc *dn, int *sub)
{
    *dn = *d;
    dn->nhwc = 1;
    const int s = d->kh == 1 && d->kw == 1 && d->pt == 0 && d->pl == 0 && (d->sh > 1 || d->sw > 1) &&
                  (d->oh - 1) * d->sh < d->h && (d->ow - 1) * d->sw < d->w;
    if (s) {
        dn->h = d->oh;
        dn->w = d->ow;
        dn->sh = dn->sw = 1;
    }
    if (sub) *sub = s;
}

/* The NHWC copy of an NCHW bfloat16 input for the NHWC problem *dn (op_convb_nchw_problem), without
   padding: op_conv_as_nhwc_input with the vectorised transposes. NULL on allocation failure. */
static void *op_convb_as_nhwc_input(const op_conv_desc *d, const uint16_t *x, int nthreads, op_conv_desc *dn)
{
    int sub;
    op_convb_nchw_problem(d, dn, &sub);
    uint16_t *xt = (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(dn->n * dn->c * dn->h * dn->w));
    if (!xt) return NULL;
    if (sub) {
        op_convb_fill_ctx fc = {d, x, xt, dn->h, dn->w, 1};
        op_parallel_for(dn->n * dn->h * dn->w * dn->c >= (1 << 16) ? nthreads : 1, dn->n * dn->h,
                        op_convb_fill_nchw_task, &fc);
    } else {
        op_conv_transpose(x, xt, d->n, d->c, d->h * d->w, 2, nthreads);
    }
    return xt;
}

/* The NHWC problem of an NCHW one (*dn: nhwc = 1; a strided unpadded 1x1 convolution becomes the
   1x1 stride-1 one of its sampled pixels) and its padded NHWC copy with the block plan (bk 32, as
   op_convq_prepare makes from an NHWC input), transposed from the NCHW input in one pass. Returns 0,
   or -1 on allocation failure; op_convq_free releases *b either way. */
static int op_convb_prepare_nchw(const op_conv_desc *d, const uint16_t *x, int mr, int nthreads,
                                 op_conv_desc *dn, op_convq_geo *q, op_convq_buf *b)
{
    int sub;
    op_convb_nchw_problem(d, dn, &sub);
    const int64_t C = dn->c, K = dn->kh * dn->kw * (C / dn->groups), nblk = op_cdiv64(K, 32);
    const int64_t hq = sub ? dn->h : (dn->oh - 1) * dn->sh + (dn->kh - 1) * dn->dh + 1;
    const int64_t wq = sub ? dn->w : (dn->ow - 1) * dn->sw + (dn->kw - 1) * dn->dw + 1;
    b->xq = op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(dn->n * hq * wq * C));
    b->bseg = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nblk + 1));
    b->seg = (op_convq_seg *)malloc(sizeof(op_convq_seg) * (size_t)(nblk + op_convq_nruns(dn, 32)));
    if (!b->xq || !b->bseg || !b->seg) return -1;
    op_convb_fill_ctx fc = {d, x, (uint16_t *)b->xq, hq, wq, sub};
    op_parallel_for(dn->n * hq * wq * C >= (1 << 16) ? nthreads : 1, dn->n * hq, op_convb_fill_nchw_task, &fc);
    q->d = dn;
    q->g0 = -1;
    q->ohw_joint = op_conv_joint(dn) ? dn->oh * dn->ow : 0;
    q->xq = b->xq;
    q->rs = wq * C;
    q->is = hq * wq * C;
    q->mr = mr;
    q->bk = 32;
    q->nblk = op_convq_plan(dn, q->rs, 32, b->bseg, b->seg);
    q->bseg = b->bseg;
    q->seg = b->seg;
    return 0;
}

/* ---------------------------------------------------------------- NHWC k x k, A read in place (VDPBF16PS)

   A bfloat16 NHWC convolution (groups 1, C a multiple of 32, OW a multiple of 7) runs as a
   batch-reduce GEMM over its padded input without packing A: in the depth order of the NHWC
   formulation (channel block of 32, tap, channel), each 32-depth block of an output pixel is 32
   adjacent bfloat16 of its padded input row, so K-pair pr of block b is the 32-bit word at
   pixel + aoff[b] + 2*pr, broadcast straight from the input (as op_conv_ukr_a_dp does for 1x1).
   The micro-kernel (op_conv_ukr_brg_dp, 14 x 32) takes two half panels of 7 pixels, each 7
   consecutive output pixels of one output row (sw*C elements apart), from their own bases; the
   weight is packed once per call into 32-column k32 panels (op_conv_pack_b_nhwc_k32) and all of K
   is summed in registers (the tile written once: float32, or bfloat16 rounded once from the
   registers after the epilogue, op_dp_row16).
   With OP_CONV_BF16_SKIP_PAD, padding taps are skipped along H: the kernel rows ki whose input rows lie in the top or bottom
   padding of an output row are left out of its block list (the lists per range [lo, hi) of valid
   kernel rows, blocks in order), and the half panels are paired by that range (a half panel with no
   partner of its range runs alone, 7 rows), so a 7 x 7 output pairs row oh of image n with row oh
   of image n + 1. The W padding stays in the padded copy (zeros, computed), or, with
   OP_CONV_BF16_INPLACE (below), the input is read in place and a W padding tap reads a zero line
   (the same products). oneDNN's brgemm
   convolution skips padding taps the same way (its kh range per output row); code our own.
   Per-microarchitecture (op_conv_bf16_options bit 1, the registry's CONV_BF16_OPTIONS): off by
   default (the NHWC GEMM over the packed gather), so a host without a row keeps that path. */
#define OP_CONV_BF16_BRG 1
/* OP_CONV_BF16_SKIP_PAD (op_conv_bf16_options bit 2, the registry's CONV_BF16_OPTIONS "skip_pad"): the
   H padding skip above, per 32-column weight panel: a panel holding a non-finite weight (found while
   it is packed, op_brgb_pack_task) runs every kernel row over the padded copy's zero rows, so
   0 * Inf = NaN reaches its border outputs as at every other level; for a finite panel a skipped tap
   would only have added exact zeros to an accumulator that starts at +0 (the same bits). Off, every
   panel runs all kernel rows. */
#define OP_CONV_BF16_SKIP_PAD 2
/* OP_CONV_BF16_NSPLIT_PACK (bit 4, "brg_nsplit_pack"): when that kernel's threads split the output
   channels (a weight larger than the padded input: each task one 32-column panel over all pixels),
   each task packs its panel into its thread's slot of the packed-weight buffer right before using it
   (K x 32 bfloat16, up to 288 KiB, kept in L2), instead of one pass packing the whole weight first
   (written out and read back). */
#define OP_CONV_BF16_NSPLIT_PACK 4
/* OP_CONV_BF16_1X1_OUT16 (bit 8, "1x1_out16"): an NHWC 1x1 stride-1 unpadded convolution with a
   bfloat16 output and C / groups a multiple of 32 (rows not 2 KiB apart) runs gemm_bf16.c's in-place-A set
   (op_bf16_dp_ref_ops: the input rows referenced, not copied) with its bfloat16 write-out from the
   registers (op_ukr16_dp_ref), instead of op_conv_ukr_a_dp's float tile rounded by the driver. Same
   VDPBF16PS order per accumulator and the same single rounding: the same bits. */
#define OP_CONV_BF16_1X1_OUT16 8
/* OP_CONV_BF16_INPLACE (bit 16, "brg_inplace"): with OP_CONV_BF16_SKIP_PAD, the batch-reduce kernel reads
   a padded NHWC input in place, without the padded copy (3.4% of res2_branch2b at batch 8 on Zen 4):
   the pixel offsets of the padded geometry are shifted back by the padding (a border pixel's first
   tap lies before its row), the kernel rows in the H padding are skipped as above, and a tap of a
   border pixel in the W padding reads a line of zeros instead (per pixel panel and kernel column,
   the panel's first / last pixel of either half: rows 0, 6, 7, 13 of the micro-kernel), so it adds
   the same products as the padded copy's zeros did. It applies when every W padding pixel is one of
   those rows (padding of at most one pixel per side, as ResNet-50's 3 x 3 layers) and the weight is
   packed in one pass and all finite (a non-finite panel runs every kernel row, which needs the
   copy's zero rows; not OP_CONV_BF16_NSPLIT_PACK's per-task packs); otherwise the padded copy. */
#define OP_CONV_BF16_INPLACE 16
/* OP_CONV_BF16_1X1_STRIDED_REF (bit 32, "1x1_strided_ref"): an NHWC strided unpadded 1x1 convolution
   (groups 1, C a multiple of 32, OW a multiple of 14, all of K in one KC block) runs as one GEMM over
   its sampled pixels read in place: gemm_bf16.c's in-place-A set (op_bf16_dp_ref_ops) with the A
   "pack" op_conv_pack_a_s1x1_ref pointing each 14-row micro-panel (14 pixels of one output row, sw*C
   elements apart) at the input, bfloat16 C written from the registers (op_ukr16_dp_ref), instead of
   the batch-reduce kernel (which takes it when this bit is off) or the GEMM over a gathered copy. One
   KC block: all of K summed in registers in the same order as those paths, the same bits. */
#define OP_CONV_BF16_1X1_STRIDED_REF 32
/* OP_CONV_BF16_1X1_OUT16_CONV (bit 64, "1x1_out16_conv"): with "1x1_out16", the full 14-row panels
   run op_conv_ukr16_a_dp (below) instead of gemm_bf16.c's op_ukr16_dp_ref: the same VDPBF16PS order
   and write-out (op_dp_row16, epilogue in registers), with op_conv_ukr_a_dp's addressing (five row
   bases) and prefetch (the next panel's rows, a line per K-pair step; no B prefetch). */
#define OP_CONV_BF16_1X1_OUT16_CONV 64
/* OP_CONV_BF16_AS_NHWC_IMAGE (bit 128, "as_nhwc_image"): an NCHW k x k convolution routed through the
   NHWC formulation (op_conv_desc.nhwc = 2) with a batch of at least the threads, whose weight is no
   larger than an image (op_convb_img_fits), runs image by image, each thread whole images on its own
   (transpose in, the batch-reduce kernel, transpose out), instead of each of the three steps over the
   whole batch on all threads: one image's padded NHWC copy and NHWC output (0.8 MiB at ResNet-50's
   56x56 layers) stay in that core's L2 from one step to the next instead of a batch-sized tensor
   passing through the shared L3 between the steps. Every output sums all of K in registers in the
   same block order: the same bits. */
#define OP_CONV_BF16_AS_NHWC_IMAGE 128
/* OP_CONV_BF16_AS_NHWC_IMAGE_L2 (bit 256, "as_nhwc_image_l2"): with OP_CONV_BF16_AS_NHWC_IMAGE, a weight
   larger than an image also runs image by image when one thread's working set, the packed weight,
   the padded NHWC image and its NHWC output (bfloat16), fits OP_CONVB_IMG_L2 bytes (ResNet-50's
   res3_branch2b: 288 + 225 + 196 KiB); the same bits (the same kernel and block order). */
#define OP_CONV_BF16_AS_NHWC_IMAGE_L2 256
#define OP_CONVB_IMG_L2 (768 * 1024)
/* OP_CONV_BF16_NCHW1X1_JOINT (bit 512, "nchw1x1_joint"): an NCHW 1x1 stride-1 unpadded convolution
   (groups 1, batch >= 2, OH*OW >= 32 pixels per image, whose last 32-column panel per image leaves at
   least 1/16 of the image's panel columns empty: 14x14, not 28x28 or 56x56, which measured 2-10%
   slower that way on Zen 4; C >= 1024: the float C written and rounded in a second pass costs about
   10 bytes per output, too much beside C = 256 products, res4_branch2c 5% slower) runs as one GEMM
   over the pixels of all images,
   out[oc][(n, pixel)] = W @ X (op_conv2d_bf16_nchw1x1_joint), as conv_f32.c's float32 one does: B
   micro-panels of 32 columns full across images (196 pixels per image fill 6.1 panels, the last one
   4 columns of 32 computed for 28 discarded), the weight packed once per KC x MC block instead of
   once per image. C is float (the output, or a float copy rounded once to bfloat16 afterwards, as
   the driver rounds a finished tile): same K blocks, same sums, the same bits. */
#define OP_CONV_BF16_NCHW1X1_JOINT 512
/* OP_CONV_BF16_NSPLIT_SMALL (bit 1024, "brg_nsplit_small"): with OP_CONV_BF16_NSPLIT_PACK, a packed weight
   of at most OP_BRGB_NSPLIT_SMALL bytes (ResNet-50's res3_branch2b at batch 1: 288 KiB) is packed in one
   pass first as without that bit, so it is checked before the run and OP_CONV_BF16_INPLACE can read the
   input in place (no padded copy); larger weights keep the per-task packs. The same bits. */
#define OP_CONV_BF16_NSPLIT_SMALL 1024
#define OP_BRGB_NSPLIT_SMALL (512 * 1024)
/* OP_CONV_BF16_AMX_S1 (bit 2048, "amx_s1"; AMX builds): an NHWC stride-1 k x k convolution (groups 1,
   C a multiple of 32, KH and KW at most 16, OW at least 4 (KW-1) DW, OH OW at least 16: op_amxc_fits)
   runs op_conv2d_nhwc_amx_s1: the AMX tiles reading their A rows in place from a padded copy of the
   input, per kernel tap, instead of the GEMM over the packed gather. */
#define OP_CONV_BF16_AMX_S1 2048
/* OP_CONV_BF16_AMX_STEM (bit 4096, "amx_stem"; AMX builds): an NHWC convolution with few input
   channels (8 <= C KW <= 32) runs op_conv2d_nhwc_amx_stem (below, with the AMX kernels). */
#define OP_CONV_BF16_AMX_STEM 4096
/* OP_CONV_BF16_AMX_S2 (bit 8192, "amx_s2"; AMX builds): the same kernel for stride 2 along H and W
   (dilation 1): the padded rows copied as four phase planes (even / odd rows x even / odd columns), so
   that consecutive output pixels again read consecutive pixels of one plane for every tap. */
#define OP_CONV_BF16_AMX_S2 8192
static int op_conv_bf16_opts = 0;

#if defined(OP_BF16_HAS_DP)
/* The rows of the micro-kernel whose W padding taps read a line of zeros (OP_CONV_BF16_INPLACE):
   the first and last pixel of each half. */
#define OP_BRGB_ZROWS 0x20C1
static const uint16_t op_brgb_zero[32] OP_ALIGNED(64) = {0};

/* nb blocks: block kb reads a + aoff[kb] (second half: + hoff) and the packed weight at
   b + boff[kb]; with wm (the panel's rows per kernel column that lie in the W padding, within
   OP_BRGB_ZROWS), those rows of block kb read op_brgb_zero instead. */
OP_INLINE void op_brgb_body(const int MRV, int64_t nb, const uint16_t *a, int64_t hoff,
                            const int64_t *aoff, const int64_t *boff, const int16_t *kcol,
                            const int16_t *wm, int64_t lda,
                            const uint16_t *OP_RESTRICT b, float *c, uint16_t *c16, int64_t choff,
                            int64_t rsc, int nr, const op_epilogue *epi)
{
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    const int64_t l2 = 2 * lda;
#define OP_BH(x) ((__m512bh)(x))
#define OP_RA(i, src)                                                                     \
    if (MRV > i) {                                                                        \
        int32_t av;                                                                       \
        memcpy(&av, (src), 4);                                                            \
        const __m512i ai = _mm512_set1_epi32(av);                                         \
        c##i##_0 = _mm512_dpbf16_ps(c##i##_0, OP_BH(ai), OP_BH(b0));                      \
        c##i##_1 = _mm512_dpbf16_ps(c##i##_1, OP_BH(ai), OP_BH(b1));                      \
    }
    for (int64_t kb = 0; kb < nb; kb++) {
        const uint16_t *p0 = a + aoff[kb], *p3 = p0 + 3 * lda, *p7 = p0 + hoff, *p10 = p7 + 3 * lda;
        const uint16_t *bb = b + boff[kb];
        /* the block after next: one line per pixel, and its 32 lines of B */
        const int64_t kf = kb + 2 < nb ? kb + 2 : kb;
        const uint16_t *pf = a + aoff[kf], *bf = b + boff[kf];
        /* the border rows: their pixel, or zeros for a tap in the W padding */
        const int sk = wm ? wm[kcol[kb]] : 0;
        const uint16_t *r0 = (sk & 0x0001) ? op_brgb_zero : p0;
        const uint16_t *r6 = (sk & 0x0040) ? op_brgb_zero : p3 + l2 + lda;
        const uint16_t *r7 = (sk & 0x0080) ? op_brgb_zero : p7;
        const uint16_t *r13 = (sk & 0x2000) ? op_brgb_zero : p10 + l2 + lda;
#pragma GCC unroll 16
        for (int pr = 0; pr < 16; pr++) {
            const __m512i b0 = _mm512_loadu_si512((const void *)(bb + pr * 32));
            const __m512i b1 = _mm512_loadu_si512((const void *)(bb + 512 + pr * 32));
            if (pr < 7) _mm_prefetch((const char *)(pf + pr * lda), _MM_HINT_T0);
            else if (pr < 14 && MRV > 7) _mm_prefetch((const char *)(pf + hoff + (pr - 7) * lda), _MM_HINT_T0);
            _mm_prefetch((const char *)(bf + pr * 64), _MM_HINT_T0);
            _mm_prefetch((const char *)(bf + pr * 64 + 32), _MM_HINT_T0);
            OP_RA(0, r0 + 2 * pr) OP_RA(1, p0 + lda + 2 * pr) OP_RA(2, p0 + l2 + 2 * pr)
            OP_RA(3, p3 + 2 * pr) OP_RA(4, p3 + lda + 2 * pr) OP_RA(5, p3 + l2 + 2 * pr)
            OP_RA(6, r6 + 2 * pr)
            OP_RA(7, r7 + 2 * pr) OP_RA(8, p7 + lda + 2 * pr) OP_RA(9, p7 + l2 + 2 * pr)
            OP_RA(10, p10 + 2 * pr) OP_RA(11, p10 + lda + 2 * pr) OP_RA(12, p10 + l2 + 2 * pr)
            OP_RA(13, r13 + 2 * pr)
        }
    }
#undef OP_RA
#undef OP_BH
    op_epi512 e;
    op_epi512_init(&e, nr, epi);
    if (c16) {
#define OP_W(i, base) if (MRV > i) op_dp_row16(&e, base, i, c##i##_0, c##i##_1, nr);
        OP_W(0, c16) OP_W(1, c16 + rsc) OP_W(2, c16 + 2 * rsc) OP_W(3, c16 + 3 * rsc)
        OP_W(4, c16 + 4 * rsc) OP_W(5, c16 + 5 * rsc) OP_W(6, c16 + 6 * rsc)
        c16 += choff;
        OP_W(7, c16) OP_W(8, c16 + rsc) OP_W(9, c16 + 2 * rsc) OP_W(10, c16 + 3 * rsc)
        OP_W(11, c16 + 4 * rsc) OP_W(12, c16 + 5 * rsc) OP_W(13, c16 + 6 * rsc)
#undef OP_W
        return;
    }
#define OP_W(i, base) if (MRV > i) op_epi512_row(&e, base, i, c##i##_0, c##i##_1, nr, 0);
    OP_W(0, c) OP_W(1, c + rsc) OP_W(2, c + 2 * rsc) OP_W(3, c + 3 * rsc)
    OP_W(4, c + 4 * rsc) OP_W(5, c + 5 * rsc) OP_W(6, c + 6 * rsc)
    c += choff;
    OP_W(7, c) OP_W(8, c + rsc) OP_W(9, c + 2 * rsc) OP_W(10, c + 3 * rsc)
    OP_W(11, c + 4 * rsc) OP_W(12, c + 5 * rsc) OP_W(13, c + 6 * rsc)
#undef OP_W
}

static OP_NOINLINE void op_conv_ukr_brg_dp14(int64_t nb, const uint16_t *a, int64_t hoff, const int64_t *aoff,
                                             const int64_t *boff, const int16_t *kcol, const int16_t *wm,
                                             int64_t lda, const uint16_t *b, float *c,
                                             uint16_t *c16, int64_t choff, int64_t rsc, int nr,
                                             const op_epilogue *epi)
{
    op_brgb_body(14, nb, a, hoff, aoff, boff, kcol, wm, lda, b, c, c16, choff, rsc, nr, epi);
}

static OP_NOINLINE void op_conv_ukr_brg_dp7(int64_t nb, const uint16_t *a, int64_t hoff, const int64_t *aoff,
                                            const int64_t *boff, const int16_t *kcol, const int16_t *wm,
                                            int64_t lda, const uint16_t *b, float *c,
                                            uint16_t *c16, int64_t choff, int64_t rsc, int nr,
                                            const op_epilogue *epi)
{
    op_brgb_body(7, nb, a, hoff, aoff, boff, kcol, wm, lda, b, c, c16, choff, rsc, nr, epi);
}

typedef struct {
    const op_gemm_args *g;
    uint16_t *bp;
    unsigned char *pnf;
    int64_t K, pstride;
} op_brgb_pack_ctx;

typedef struct {
    const op_conv_desc *d;
    const op_convq_geo *q;
    const op_brgb_pack_ctx *pk; /* not NULL: each task packs its panel into slot tid of bp first */
    const uint16_t *bp;       /* packed weight: 32-column panel s at bp + s * pstride */
    int64_t pstride;
    const float *bias;
    int act;
    void *y;
    int y_bf16;
    const int64_t *pan;       /* per panel: first pixel of each half (second: -1 alone), class */
    const int64_t *lnb, *lst; /* per class: blocks, first entry in aoff / boff */
    const int64_t *aoff, *boff;
    const int16_t *kcol;      /* per entry of aoff / boff: the block's kernel column */
    const int16_t *wmask;     /* per pixel panel, per kernel column: rows reading zeros (the W
                                 padding, OP_CONV_BF16_INPLACE; NULL: none) */
    int64_t kw, shift;        /* kernel columns; pixel offsets - shift (the input read in place) */
    const unsigned char *pnf; /* per 32-column panel: a non-finite weight (all kernel rows run) */
    int64_t clfull;           /* the class of all kernel rows */
    int64_t npan, npn;        /* panels, 32-column panels */
    int64_t mpb, tm, tn;      /* panels per task block; task grid tm x tn */
} op_brgb_ctx;

static void op_brgb_task(void *ctx, int64_t task, int tid)
{
    const op_brgb_ctx *x = (const op_brgb_ctx *)ctx;
    const op_conv_desc *d = x->d;
    const int64_t tmi = task / x->tn, tni = task % x->tn;
    const int64_t pa0 = tmi * x->mpb, pa1 = op_min64(x->npan, pa0 + x->mpb);
    const int64_t s0 = x->npn * tni / x->tn, s1 = x->npn * (tni + 1) / x->tn;
    const uint16_t *X = (const uint16_t *)x->q->xq;
    const int64_t lda = d->sw * d->c, OC = d->oc;
    op_epilogue epi;
    epi.bias = x->bias;
    epi.bias_stride = 1;
    epi.bias_axis = 1;
    epi.act = x->act;
    const int has_epi = x->bias || x->act != OP_ACT_NONE;
    float *yf = x->y_bf16 ? NULL : (float *)x->y;
    uint16_t *yh = x->y_bf16 ? (uint16_t *)x->y : NULL;
    for (int64_t s = s0; s < s1; s++) {
        const int nr = (int)op_min64(32, OC - s * 32);
        const uint16_t *bpan = x->bp + s * x->pstride;
        int full = x->pk ? 0 : x->pnf[s];
        if (x->pk) {   /* the panel packed right before use, in this thread's slot (L2) */
            uint16_t *dst = x->pk->bp + (int64_t)tid * x->pstride;
            op_conv_pack_b_nhwc_k32_nf(x->pk->g, 0, 0, x->pk->K, x->pk->K, s * 32, nr, dst, &full);
            bpan = dst;
        }
        op_epilogue te = epi;
        if (te.bias) te.bias += s * 32;
        const op_epilogue *tep = has_epi ? &te : NULL;
        for (int64_t pa = pa0; pa < pa1; pa++) {
            const int64_t *p = x->pan + 3 * pa;
            const int64_t o0 = op_convq_pixel(x->q, 0, p[0]) - x->shift, cl = full ? x->clfull : p[2];
            const int64_t *ao = x->aoff + x->lst[cl], *bo = x->boff + x->lst[cl];
            const int16_t *kc = x->kcol + x->lst[cl], *wm = x->wmask ? x->wmask + pa * x->kw : NULL;
            const int64_t c0 = p[0] * OC + s * 32;
            if (p[1] >= 0) {
                const int64_t hoff = op_convq_pixel(x->q, 0, p[1]) - x->shift - o0, choff = (p[1] - p[0]) * OC;
                op_conv_ukr_brg_dp14(x->lnb[cl], X + o0, hoff, ao, bo, kc, wm, lda, bpan, yf ? yf + c0 : NULL,
                                     yh ? yh + c0 : NULL, choff, OC, nr, tep);
            } else {
                op_conv_ukr_brg_dp7(x->lnb[cl], X + o0, 0, ao, bo, kc, wm, lda, bpan, yf ? yf + c0 : NULL,
                                    yh ? yh + c0 : NULL, 0, OC, nr, tep);
            }
        }
    }
}

/* The GEMM arguments the weight pack reads: B = the OC x K weight w (K-major rows), user = the
   pack's geometry (an op_convq_geo). */
static void op_brgb_weight_args(op_gemm_args *g, int64_t oc, int64_t K, const uint16_t *w, const void *user)
{
    memset(g, 0, sizeof *g);
    g->n = oc;
    g->k = K;
    g->b = w;
    g->csb = K;
    g->rsb = 1;
    g->user = user;
}

/* one task = one 32-column weight panel, packed and checked for non-finite weights */
static void op_brgb_pack_task(void *ctx, int64_t s, int tid)
{
    (void)tid;
    const op_brgb_pack_ctx *x = (const op_brgb_pack_ctx *)ctx;
    const int64_t nc = op_min64(32, x->g->n - s * 32);
    int nf = 0;
    op_conv_pack_b_nhwc_k32_nf(x->g, 0, 0, x->K, x->K, s * 32, nc, x->bp + s * x->pstride, &nf);
    x->pnf[s] = (unsigned char)nf;
}

/* Whether the NHWC problem d fits the batch-reduce kernel (and the option is on). */
static int op_brgb_fits(const op_conv_desc *d)
{
    /* a 1x1 stride-1 convolution stays a GEMM on the input in place (Zen 4, ResNet-50 1x1 layers at
       batch 8: 3-40% faster than this kernel, whose few K blocks per call leave its set-up and
       write-out exposed); a strided 1x1 one takes it (NHWC res3a_branch1: 7% faster than the GEMM
       over the gathered A) unless OP_CONV_BF16_1X1_STRIDED_REF takes it first. (Rows 4 KiB apart, sw*C a multiple of 2048, would share one L1d set:
       the GEMM path.) */
    return (op_conv_bf16_opts & OP_CONV_BF16_BRG) && d->groups == 1 &&
           (d->kh * d->kw >= 2 || d->sh > 1 || d->sw > 1) &&
           d->ow % 7 == 0 && d->c % 32 == 0 && (d->sw * d->c) % 2048 != 0 && d->kh <= 16;
}

/* The batch-reduce kernel on the NHWC problem d over its padded copy q (bk 32): returns the threads
   used, 0 when the plan does not fit (the caller takes the GEMM path), -1 on allocation failure.
   y: NHWC, float32 or bfloat16 bits (y_bf16). inplace: q is the input itself with the padded
   geometry's plan (rows W*C apart, OP_CONV_BF16_INPLACE); returns -2 before writing y when that
   cannot be used (a W padding pixel not in OP_BRGB_ZROWS, per-task weight packs, a non-finite
   weight): the caller then makes the padded copy. */
typedef struct {
    const uint16_t *bp;       /* the weight packed as op_brgb_run packs it (op_brgb_pstride per panel) */
    const unsigned char *pnf; /* per panel: a non-finite weight */
} op_brgb_pre;

/* The stride of the packed weight's 32-column panels (with the pack's row scratch) for the NHWC problem d. */
static int64_t op_brgb_pstride(const op_conv_desc *d)
{
    const int64_t khw = d->kh * d->kw;
    return 32 * d->c * khw + 32 * (op_min64(32, d->c) * khw + 1);
}

static int op_brgb_run(const op_conv_desc *d, const op_convq_geo *qp, int inplace, const uint16_t *w,
                       const float *bias, void *y, int y_bf16, int act, const op_blocking *blk, int nthreads,
                       const op_brgb_pre *pre)
{
    enum { MR = OP_DP_MR };
    const op_convq_geo q = *qp;
    const int64_t khw = d->kh * d->kw, KH = d->kh;
    const int64_t K = d->c * khw, OH = d->oh, OW = d->ow, N = d->n;
    const int64_t nblk = q.nblk, ncls = (KH + 1) * (KH + 1);
    for (int64_t b = 0; b < nblk; b++) {
        const op_convq_seg *sg = q.seg + q.bseg[b];
        if (q.bseg[b + 1] - q.bseg[b] != 1 || sg->t0 != 0 || sg->len != 32) return 0;
    }
    const int64_t nhalf = N * OH * (OW / 7), KW = d->kw;
    const int64_t npn = op_cdiv64(d->oc, 32);
    const int64_t pstride = op_brgb_pstride(d);
    const int opts = op_conv_bf16_opts;
    const int skipw = inplace;
    int64_t *ibuf = (int64_t *)malloc(sizeof(int64_t) * (size_t)(2 * ncls * nblk + 3 * ncls + OH + 3 * nhalf));
    int16_t *sbuf = (int16_t *)malloc(sizeof(int16_t) * (size_t)(ncls * nblk + (skipw ? nhalf * KW : 0)));
    uint16_t *bp = pre ? (uint16_t *)pre->bp : (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(npn * pstride));
    unsigned char *pnf = pre ? (unsigned char *)pre->pnf : (unsigned char *)malloc((size_t)npn);
    int used = -1;
    if (ibuf && sbuf && bp && pnf) {
        int64_t *aoff = ibuf, *boff = aoff + ncls * nblk, *lnb = boff + ncls * nblk, *lst = lnb + ncls;
        int64_t *pend = lst + ncls, *ocl = pend + ncls, *pan = ocl + OH;
        int16_t *kcol = sbuf, *wmask = skipw ? sbuf + ncls * nblk : NULL;
        /* block lists per range [lo, hi) of valid kernel rows: class lo * (KH + 1) + hi */
        for (int64_t lo = 0; lo <= KH; lo++)
            for (int64_t hi = 0; hi <= KH; hi++) {
                const int64_t cl = lo * (KH + 1) + hi;
                int64_t m = 0;
                lst[cl] = cl * nblk;
                for (int64_t b = 0; b < nblk; b++) {
                    const int64_t ki = (b % khw) / d->kw;
                    if (ki < lo || ki >= hi) continue;
                    aoff[cl * nblk + m] = q.seg[q.bseg[b]].off;
                    boff[cl * nblk + m] = b * 1024;
                    kcol[cl * nblk + m] = (int16_t)((b % khw) % KW);
                    m++;
                }
                lnb[cl] = m;
            }
        for (int64_t oh = 0; oh < OH; oh++) {
            int64_t lo = KH, hi = 0;
            for (int64_t ki = 0; ki < KH; ki++) {
                const int64_t ih = oh * d->sh - d->pt + ki * d->dh;
                if (ih >= 0 && ih < d->h) {
                    if (ki < lo) lo = ki;
                    hi = ki + 1;
                }
            }
            if (lo >= hi) lo = hi = 0;
            if (!(opts & OP_CONV_BF16_SKIP_PAD)) lo = 0, hi = KH;
            ocl[oh] = lo * (KH + 1) + hi;
        }
        /* half panels (7 pixels of one output row), paired with the previous unpaired one of their class */
        for (int64_t cl = 0; cl < ncls; cl++) pend[cl] = -1;
        int64_t np = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t oh = 0; oh < OH; oh++)
                for (int64_t ow = 0; ow < OW; ow += 7) {
                    const int64_t pix = (n * OH + oh) * OW + ow, cl = ocl[oh];
                    if (pend[cl] >= 0) {
                        int64_t *p = pan + 3 * pend[cl];
                        p[1] = pix;
                        pend[cl] = -1;
                    } else {
                        int64_t *p = pan + 3 * np;
                        p[0] = pix;
                        p[1] = -1;
                        p[2] = cl;
                        pend[cl] = np++;
                    }
                }
        /* the input in place: per panel and kernel column, the rows whose input pixel lies in the
           W padding (inexact: one outside OP_BRGB_ZROWS, or the H padding rows not skipped) */
        int inexact = !(opts & OP_CONV_BF16_SKIP_PAD), anyw = 0;
        int16_t *hm = skipw ? (int16_t *)malloc(sizeof(int16_t) * (size_t)(OW / 7 * KW)) : NULL;
        if (skipw && !hm) inexact = 1;
        for (int64_t h = 0; hm && h < OW / 7; h++)   /* per half position in a row */
            for (int64_t kj = 0; kj < KW; kj++) {
                int m = 0;
                for (int i = 0; i < 7; i++) {
                    const int64_t iw = (7 * h + i) * d->sw - d->pl + kj * d->dw;
                    if (iw < 0 || iw >= d->w) m |= 1 << i;
                }
                hm[h * KW + kj] = (int16_t)m;
                anyw |= m;
            }
        for (int64_t pa = 0; hm && anyw && pa < np; pa++) {
            const int64_t *p = pan + 3 * pa;
            const int16_t *h0 = hm + (p[0] % OW) / 7 * KW, *h1 = p[1] >= 0 ? hm + (p[1] % OW) / 7 * KW : NULL;
            for (int64_t kj = 0; kj < KW; kj++) {
                const int m = h0[kj] | (h1 ? h1[kj] << 7 : 0);
                if (m & ~OP_BRGB_ZROWS) inexact = 1;
                wmask[pa * KW + kj] = (int16_t)m;
            }
        }
        free(hm);
        op_gemm_args g;
        op_brgb_weight_args(&g, d->oc, K, w, &q);
        op_brgb_pack_ctx pc = {&g, bp, pnf, K, pstride};
        op_brgb_ctx c;
        c.pk = NULL;
        c.d = d;
        c.q = &q;
        c.bp = bp;
        c.pstride = pstride;
        c.bias = bias;
        c.act = act;
        c.y = y;
        c.y_bf16 = y_bf16;
        c.pan = pan;
        c.lnb = lnb;
        c.lst = lst;
        c.aoff = aoff;
        c.boff = boff;
        c.kcol = kcol;
        c.wmask = anyw ? wmask : NULL;
        c.kw = KW;
        c.shift = inplace ? d->pt * q.rs + d->pl * d->c : 0;
        /* a panel with a non-finite weight runs every kernel row (0 * Inf = NaN at the borders, as
           at every level); with finite weights a skipped padding tap only adds exact zeros */
        c.pnf = pnf;
        c.clfull = KH;
        c.npan = np;
        c.npn = npn;
        const int64_t mc = blk && blk->mc > 0 ? blk->mc : 112;
        c.mpb = op_max64(1, mc / MR);
        int64_t T = nthreads < 1 ? 1 : nthreads;
        /* enough pixel blocks for the threads (4 per thread), else smaller blocks, then N parts */
        if (op_cdiv64(c.npan, c.mpb) < 4 * T) c.mpb = op_max64(1, c.npan / (4 * T));
        c.tm = op_cdiv64(c.npan, c.mpb);
        c.tn = 1;
        if (c.tm < 2 * T) c.tn = op_min64(npn, op_cdiv64(2 * T, c.tm));
        /* a weight larger than the padded input, with N panels enough for the threads: each task
           one N panel over all pixels (the weight read once) */
        const double wbytes = 2.0 * (double)K * (double)d->oc;
        const double abytes = 2.0 * (double)q.is * (double)N;
        if (c.tm > 1 && wbytes > abytes && npn >= 2 * T) {
            c.mpb = c.npan;
            c.tm = 1;
            c.tn = npn;
            if ((op_conv_bf16_opts & OP_CONV_BF16_NSPLIT_PACK) && !pre &&
                !((op_conv_bf16_opts & OP_CONV_BF16_NSPLIT_SMALL) && 2 * npn * pstride <= OP_BRGB_NSPLIT_SMALL))
                c.pk = &pc;
        }
        if (T > c.tm * c.tn) T = c.tm * c.tn;
        /* the input read in place: every padding tap skipped, the weight packed (and checked) first */
        int nf = 0;
        if (inplace && (inexact || c.pk)) goto copy;
        /* (the pack on every thread from 16K weights: res2_branch2b's 2 panels of 36 KiB took 3-4% of
           the batch-1 call on one thread while the other waited) */
        if (!c.pk && !pre) op_parallel_for(npn * K * 32 >= (1 << 14) ? nthreads : 1, npn, op_brgb_pack_task, &pc);
        for (int64_t s = 0; inplace && s < npn; s++) nf |= pnf[s];
        if (nf) goto copy;
        used = op_parallel_for((int)T, c.tm * c.tn, op_brgb_task, &c);
    }
    if (0) {
copy:
        used = -2;
    }
    if (!pre) {
        op_conv_scratch_free(bp);
        free(pnf);
    }
    free(sbuf);
    free(ibuf);
    return used;
}

/* ---------------------------------------------------------------- NHWC strided 1x1, A read in place

   OP_CONV_BF16_1X1_STRIDED_REF (above). Row i of the GEMM (M = N*OH*OW pixels, or OH*OW of the batch
   entry's image) is input pixel (n, oh*sh, ow*sw); a 14-row micro-panel starts at a multiple of 14
   and OW is one, so its rows are one output row's pixels, sw*C elements apart: the panel's slot holds
   only where they lie (op_dp_aref), as op_pack_a_dp_ref does for a row-major A. */
static void op_conv_pack_a_s1x1_ref(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                                    int64_t kc, int64_t kcp, void *dst)
{
    (void)kc;
    const op_convb_geo *q = (const op_convb_geo *)g->user;
    const op_conv_desc *d = q->d;
    const int64_t ohw = d->oh * d->ow, C = d->c, rs = d->w * C, is = d->h * rs;
    const uint16_t *A = (const uint16_t *)g->a + (g->a_off ? g->a_off[bi] : 0) + p0;
    for (int64_t ir = 0; ir < mc; ir += OP_DP_MR) {
        const int64_t i = i0 + ir, n = i / ohw, pix = i % ohw;
        op_dp_aref *r = (op_dp_aref *)((uint16_t *)dst + ir * kcp);
        r->a = A + n * is + (pix / d->ow) * d->sh * rs + (pix % d->ow) * d->sw * C;
        r->lda = d->sw * C;
    }
}

/* Whether the NHWC problem d takes op_conv2d_bf16_s1x1_ref (the option on, geometry and one KC block). */
static int op_s1x1_ref_fits(const op_conv_desc *d, const op_blocking *blk)
{
    const int64_t kc = blk && blk->kc > 0 ? blk->kc : op_bf16_dp_ref_ops.blk.kc;
    return (op_conv_bf16_opts & OP_CONV_BF16_1X1_STRIDED_REF) && d->nhwc == 1 && d->groups == 1 &&
           d->kh == 1 && d->kw == 1 && (d->sh > 1 || d->sw > 1) && d->pt == 0 && d->pl == 0 &&
           d->c % 32 == 0 && d->ow % OP_DP_MR == 0 && d->c <= kc && kc % 32 == 0;
}

static int op_conv2d_bf16_s1x1_ref(const op_conv_desc *d, const uint16_t *x, const uint16_t *w,
                                   const float *bias, void *y, int y_bf16, int act, const op_blocking *blk,
                                   int nthreads)
{
    op_gemm_ops ops = op_bf16_dp_ref_ops;
    ops.pack_a = op_conv_pack_a_s1x1_ref;
    ops.ukr16 = op_ukr16_dp_ref;
    op_convb_geo q;
    q.d = d;
    q.x = x;
    q.cg = d->c;
    q.ocg = d->oc;
    return op_convb_gemm(d, &ops, 0, &q, &q.g0, x, w, d->c, bias, act, y, y_bf16, blk, nthreads);
}

/* An NHWC convolution on the batch-reduce kernel when it fits: the threads used, 0 when it does not
   apply (the caller takes the GEMM path), -1 on allocation failure. */
static int op_conv2d_nhwc_brg_bf16(const op_conv_desc *d, const uint16_t *x, const uint16_t *w,
                                   const float *bias, void *y, int y_bf16, int act, const op_blocking *blk,
                                   int nthreads)
{
    if (d->nhwc != 1 || !op_brgb_fits(d)) return 0;
    op_convq_geo q;
    op_convq_buf qb = {NULL, NULL, NULL};
    int used = -1;
    const int all = OP_CONV_BF16_SKIP_PAD | OP_CONV_BF16_INPLACE;
    const int pad = d->pt > 0 || d->pl > 0 || (d->oh - 1) * d->sh + (d->kh - 1) * d->dh >= d->h ||
                    (d->ow - 1) * d->sw + (d->kw - 1) * d->dw >= d->w;
    if (pad && (op_conv_bf16_opts & all) == all) {   /* OP_CONV_BF16_INPLACE: no padded copy */
        const int64_t nblk = op_cdiv64(d->c * d->kh * d->kw, 32);
        qb.bseg = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nblk + 1));
        qb.seg = (op_convq_seg *)malloc(sizeof(op_convq_seg) * (size_t)(nblk + op_convq_nruns(d, 32)));
        if (qb.bseg && qb.seg) {
            q.d = d;
            q.g0 = -1;
            q.ohw_joint = op_conv_joint(d) ? d->oh * d->ow : 0;
            q.xq = x;
            q.rs = d->w * d->c;
            q.is = d->h * d->w * d->c;
            q.mr = OP_DP_MR;
            q.bk = 32;
            q.nblk = op_convq_plan(d, q.rs, 32, qb.bseg, qb.seg);
            q.bseg = qb.bseg;
            q.seg = qb.seg;
            used = op_brgb_run(d, &q, 1, w, bias, y, y_bf16, act, blk, nthreads, NULL);
        }
        op_convq_free(&qb);
        if (used != -2) return used;
        used = -1;
    }
    if (op_convq_prepare(d, x, 1, 0, 32, OP_DP_MR, nthreads, &q, &qb) == 0)
        used = op_brgb_run(d, &q, 0, w, bias, y, y_bf16, act, blk, nthreads, NULL);
    op_convq_free(&qb);
    return used;
}
#endif

#endif

#if defined(OP_BF16_HAS_DP)
typedef struct {
    const op_conv_desc *d;
    const uint16_t *x, *w;
    const float *bias;
    void *y;
    int y_bf16, act;
    const op_blocking *blk;
    const op_brgb_pre *pre;
    _Atomic int err;
} op_convb_img_ctx;

/* one task = one image, on the calling thread alone: its padded NHWC copy, the batch-reduce kernel
   into an NHWC scratch (the weight packed once by the caller), transposed back into y */
static void op_convb_img_task(void *ctx, int64_t n, int tid)
{
    (void)tid;
    op_convb_img_ctx *c = (op_convb_img_ctx *)ctx;
    if (atomic_load(&c->err)) return;
    const op_conv_desc *d = c->d;
    op_conv_desc d1 = *d, dn;
    d1.n = 1;
    const int64_t ohw = d->oh * d->ow, xs = d->c * d->h * d->w;
    const size_t esz = c->y_bf16 ? 2 : 4;
    void *yt = op_conv_scratch_alloc(esz * (size_t)(ohw * d->oc));
    op_convq_geo q;
    op_convq_buf qb = {NULL, NULL, NULL};
    int r = -1;
    if (yt && op_convb_prepare_nchw(&d1, c->x + n * xs, OP_DP_MR, 1, &dn, &q, &qb) == 0)
        r = op_brgb_run(&dn, &q, 0, c->w, c->bias, yt, c->y_bf16, c->act, c->blk, 1, c->pre);
    op_convq_free(&qb);
    if (r > 0) op_conv_transpose(yt, (char *)c->y + n * ohw * d->oc * (int64_t)esz, 1, ohw, d->oc, esz, 1);
    op_conv_scratch_free(yt);
    if (r <= 0) atomic_store(&c->err, r == 0 ? 1 : r);
}

/* OP_CONV_BF16_AS_NHWC_IMAGE: whether the NCHW problem d (nhwc = 2) on nthreads runs image by image:
   k x k, a batch of at least the threads (and 2), the batch-reduce kernel fits its NHWC problem dn,
   and the weight (bfloat16, K x OC) is no larger than one image's padded NHWC copy, or with
   OP_CONV_BF16_AS_NHWC_IMAGE_L2 weight, padded image and output fit OP_CONVB_IMG_L2 bytes (a larger
   weight, res4 and res5 in ResNet-50: the whole-batch route, unchanged). */
static int op_convb_img_fits(const op_conv_desc *d, const op_conv_desc *dn, int nthreads)
{
    const int64_t T = nthreads < 1 ? 1 : nthreads;
    if (!(op_conv_bf16_opts & OP_CONV_BF16_AS_NHWC_IMAGE) || d->n < op_max64(2, T) || d->kh * d->kw < 2 ||
        !op_brgb_fits(dn))
        return 0;
    const int64_t hq = (d->oh - 1) * d->sh + (d->kh - 1) * d->dh + 1, wq = (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1;
    const int64_t wsz = d->c * d->kh * d->kw * d->oc, isz = hq * wq * d->c;
    if (wsz <= isz) return 1;
    return (op_conv_bf16_opts & OP_CONV_BF16_AS_NHWC_IMAGE_L2) &&
           2 * (wsz + isz + d->oh * d->ow * d->oc) <= OP_CONVB_IMG_L2;
}

/* OP_CONV_BF16_AS_NHWC_IMAGE: the NCHW problem d (nhwc = 2, op_convb_img_fits, NHWC problem dn) image
   by image: the weight packed once on all threads, then each thread takes whole images
   (op_convb_img_task: its working set in its own L2); the images left over after a whole number per
   thread (fewer than the threads) run together on all threads (the whole-batch route). Returns the
   threads used, 0 when an image's plan does not fit the kernel (nothing is left to the caller but
   the whole-batch route, which rewrites y), or -1 on allocation failure. */
static int op_conv2d_bf16_as_nhwc_images(const op_conv_desc *d, const op_conv_desc *dn, const uint16_t *x,
                                         const uint16_t *w, const float *bias, void *y, int y_bf16, int act,
                                         const op_blocking *blk, int nthreads)
{
    const int64_t T = nthreads < 1 ? 1 : nthreads, n0 = d->n / T * T;
    const int64_t xs = d->c * d->h * d->w, ys = d->oc * d->oh * d->ow * (y_bf16 ? 2 : 4);
    const int64_t K = dn->c * dn->kh * dn->kw, npn = op_cdiv64(dn->oc, 32), pstride = op_brgb_pstride(dn);
    uint16_t *bp = (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(npn * pstride));
    unsigned char *pnf = (unsigned char *)malloc((size_t)npn);
    int used = -1;
    if (bp && pnf) {
        op_convq_geo gq;   /* what the pack reads: the problem and the block depth */
        memset(&gq, 0, sizeof gq);
        gq.d = dn;
        gq.bk = 32;
        op_gemm_args g;
        op_brgb_weight_args(&g, dn->oc, K, w, &gq);
        op_brgb_pack_ctx pc = {&g, bp, pnf, K, pstride};
        op_parallel_for(npn * K * 32 >= (1 << 14) ? nthreads : 1, npn, op_brgb_pack_task, &pc);
        op_brgb_pre pre = {bp, pnf};
        op_convb_img_ctx c = {d, x, w, bias, y, y_bf16, act, blk, &pre, 0};
        used = op_parallel_for((int)T, n0, op_convb_img_task, &c);
        const int e = atomic_load(&c.err);
        if (e) used = e > 0 ? 0 : e;
    }
    op_conv_scratch_free(bp);
    free(pnf);
    if (used > 0 && n0 < d->n) {   /* fewer images than threads left: d->n - n0 < T, the whole-batch route */
        op_conv_desc d1 = *d;
        d1.n = d->n - n0;
        const int r = op_conv2d_bf16(&d1, x + n0 * xs, w, bias, (char *)y + n0 * ys, y_bf16, act, blk, nthreads);
        if (r <= 0) return r;
        if (r > used) used = r;
    }
    return used;
}
#endif

#if defined(OP_BF16_HAS_DP)
/* OP_CONV_BF16_NCHW1X1_JOINT: the geometry of the B pack, column j = pixel j % p of image j / p */
typedef struct {
    const uint16_t *x;
    int64_t p, cp;   /* pixels per image (OH*OW = H*W), elements per image (C*P) */
} op_convb_j1_geo;

/* B block depth p0.., columns j0.. of the joint GEMM -> op_pack_b_k32's layout (per 32-column panel,
   per 32-deep block: 16 K-pairs x 32 columns as two 16-column halves of interleaved pairs). A panel's
   columns are one run of pixels of an image or two (P >= 32: the end of image n, the start of n + 1),
   each row pair read by masked loads. */
static void op_conv_pack_b_nchw_j1(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc, int64_t kcp,
                                   int64_t j0, int64_t nc, void *dst)
{
    (void)bi;
    const op_convb_j1_geo *q = (const op_convb_j1_geo *)g->user;
    const int64_t P = q->p;
    uint16_t *D = (uint16_t *)dst;
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
    for (int64_t jr = 0; jr < nc; jr += 32, D += 32 * kcp) {
        const int nr = (int)op_min64(32, nc - jr);
        const int64_t j = j0 + jr, im = j / P, pp = j % P;
        const int t1 = (int)op_min64(nr, P - pp);   /* columns [0, t1) in image im, [t1, nr) in im + 1 */
        const uint32_t all = nr >= 32 ? 0xFFFFFFFFu : (1u << nr) - 1u;
        const uint32_t mA = t1 >= 32 ? all : ((1u << t1) - 1u) & all, mB = all & ~mA;
        const uint16_t *sa = q->x + im * q->cp + p0 * P + pp;
        const uint16_t *sb = mB ? q->x + (im + 1) * q->cp + p0 * P - t1 : sa;   /* column t: pixel t - t1 */
        for (int64_t kb = 0; kb * 32 < kcp; kb++) {
            uint16_t *blk = D + kb * 1024;
            for (int pr = 0; pr < 16; pr++) {
                __m512i v[2];
                for (int t = 0; t < 2; t++) {
                    const int64_t p = kb * 32 + 2 * pr + t;
                    if (p >= kc) {
                        v[t] = _mm512_setzero_si512();
                        continue;
                    }
                    v[t] = _mm512_maskz_loadu_epi16((__mmask32)mA, sa + p * P);
                    if (mB) v[t] = _mm512_mask_loadu_epi16(v[t], (__mmask32)mB, sb + p * P);
                }
                _mm512_storeu_si512((void *)(blk + pr * 32), _mm512_permutex2var_epi16(v[0], lo_idx, v[1]));
                _mm512_storeu_si512((void *)(blk + 512 + pr * 32), _mm512_permutex2var_epi16(v[0], hi_idx, v[1]));
            }
        }
    }
}

/* OP_CONV_BF16_NCHW1X1_JOINT (above): returns the threads used, 0 when the problem or the kernels do
   not fit (the per-image GEMM then runs), -1 on allocation failure. */
static int op_conv2d_bf16_nchw1x1_joint(const op_conv_desc *d, const uint16_t *x, const uint16_t *w,
                                        const float *bias, void *y, int y_bf16, int act,
                                        const op_blocking *blk, int nthreads)
{
    const int64_t P = d->oh * d->ow;
    if (!(op_conv_bf16_opts & OP_CONV_BF16_NCHW1X1_JOINT) || d->nhwc || d->groups != 1 || d->n < 2 ||
        P < 32 || d->c < 1024 || d->kh != 1 || d->kw != 1 || d->sh != 1 || d->sw != 1 || d->pt != 0 || d->pl != 0 ||
        d->oh != d->h || d->ow != d->w)
        return 0;
    const int64_t P32 = op_roundup64(P, 32);
    if (16 * (P32 - P) < P32) return 0;   /* a ragged edge of less than 1/16: the per-image GEMM */
    int amx = 0;
    op_gemm_ops ops = *op_bf16_pick(d->oc, &amx);
    if (amx || ops.pack_b != op_pack_b_k32) return 0;   /* (the layout op_conv_pack_b_nchw_j1 writes) */
    ops.direct_b = 0;
    ops.b_prepacked = 0;
    ops.pack_b = op_conv_pack_b_nchw_j1;
    const int64_t ny = d->n * d->oc * P;
    float *yf = y_bf16 ? (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)ny) : (float *)y;
    if (!yf) return -1;
    op_convb_j1_geo q = {x, P, d->c * P};
    op_epilogue epi;
    op_gemm_args g;
    op_conv_j1_args(d, w, x, bias, act, &q, &epi, &g);   /* (conv_f32.c) */
    const int r = op_bf16_run(&ops, &g, 0, yf, NULL, P, 1, 0, blk, nthreads);
    if (r > 0 && y_bf16) op_conv_f32_to_bf16(yf, (uint16_t *)y, ny, nthreads);
    if (y_bf16) op_conv_scratch_free(yf);
    return r;
}
#endif

#if defined(OP_BF16_HAS_AMX)
/* ---------------------------------------------------------------- NHWC stride-1 k x k on AMX tiles

   An NHWC stride-1 k x k convolution (groups 1, C a multiple of 32) on the AMX tiles without an
   im2col gather: the input is seen zero-padded, (OH + (KH-1)DH) rows of wq pixels per image
   (op_amxc_geom: a zero gap and the input row; each task copies the padded rows its pixel blocks
   read into its thread's own buffer), and the output is computed on the padded grid's width,
   "virtual" pixel v = oy * wq + ox for ox < wq. For a kernel tap (r, s) the A rows of 32
   consecutive virtual pixels are then 32 consecutive padded pixels starting a fixed offset
   (r DH wq + s DW + gap - pl) further on, C elements apart: a 16 x 32 A tile (16 pixels, 32
   channels) is one TILELOADD with a row stride of 2C bytes straight from the padded copy. The
   wq - OW columns of each virtual row past OW are computed and dropped (1 of 29 at 28 x 28). The
   weight is packed once per call into the AMX B layout (32-column panels, per tap and 32-channel
   block 16 K-pairs x 16 columns per tile). The sums run over taps and
   channel blocks in the same order for every pixel; the float results go through the epilogue and
   the level's bfloat16 rounding as the GEMM's tiles do. (oneDNN's brgemm convolutions read the input
   in place per tap the same way.)
   Stride 2 (OP_CONV_BF16_AMX_S2, dilation 1): the copy holds four phase planes, plane (a, b) the
   padded pixels (2i + a, 2j + b) at (i, j), wq = OW + (KW - 1) / 2 of them per row. Output (oy, ox)
   reads tap (r, s) at (oy + r / 2, ox + s / 2) of plane (r % 2, s % 2): again virtual pixel
   v = oy * wq + ox plus a fixed offset per tap, so the A tiles load the same way, (KW - 1) / 2
   dropped columns per row (1 of 29 at 28 x 28). The same depth order (channel block, tap, channel). */

typedef struct {
    const op_conv_desc *d;
    const uint16_t *x;
    uint16_t *xp, *wp;
    const uint16_t *w;
    const float *bias;
    void *y;
    int y_bf16, act;
    int64_t wq, ncb, ntap, npn, nmb, ngroups, pstride, ppsplit;
    int64_t S;            /* stride (1, or 2 along H and W: phase planes) */
    int64_t rrow, rcol;   /* the kernel's reach in rows / pixels of the (phase) grid */
    int64_t gap;          /* stride 1: zero pixels before each row's input pixels in the copy */
    int64_t plsz;         /* elements per phase plane of a thread's copy (stride 2) */
    int64_t xstep;   /* elements of a thread's copy of the padded rows its task reads */
    float *part;     /* per thread: the float32 partial sums of OP_AMXC_MGROUP 32 x 32 blocks */
} op_amxc_ctx;

/* The copy's grid and the kernel's reach in it: *wq pixels per row, *rrow rows and *rcol pixels
   past a virtual pixel's first read (from its own position plus the tap offset of tap (0, 0)),
   *gap (stride 1) zero pixels before each row's W input pixels. Stride 1: a row of the copy is
   the gap, then the input row, and the next row's gap follows at once, so that a tap reading
   left of column 0 reads its own row's gap and one reading right of column W - 1 the next row's:
   one gap of max(left, right) padding serves both sides, where a gap on each side (wq = OW +
   (KW - 1) DW) computed and dropped both (a 3 x 3 over 28 x 28: 29 pixels a row instead of 30,
   26 blocks of 32 per image instead of 27). Stride 2: the phase planes, wq = OW + (KW - 1) / 2. */
static void op_amxc_geom(const op_conv_desc *d, int64_t *rrow, int64_t *rcol, int64_t *wq,
                         int64_t *gap)
{
    *rrow = d->sh == 1 ? (d->kh - 1) * d->dh : (d->kh - 1) / 2;
    if (d->sw == 1) {
        const int64_t span = (d->kw - 1) * d->dw;
        const int64_t right = d->ow - d->w - d->pl + span;   /* columns read past column W - 1 */
        /* (and at least OW - W: a row of the grid holds a whole output row) */
        const int64_t one = op_max64(op_max64(0, d->ow - d->w), op_max64(d->pl, right));
        const int64_t two = op_max64(one, d->pl + right);   /* a gap on each side */
        /* the one gap only where it saves a 32-pixel block per image: with as many blocks it
           saves no work, and its fewer dropped columns would move shapes onto this kernel that
           the GEMM route runs faster (7 x 7, C 512, batch 8: 1 dropped column of 8 instead of
           2 of 9 passes op_amxc_fits; 1.35 -> 1.08x torch) */
        const int64_t blocks_one = op_cdiv64(d->oh * (d->w + one), 32);
        *gap = blocks_one < op_cdiv64(d->oh * (d->w + two), 32) ? one : two;
        *wq = d->w + *gap;
        *rcol = *gap - d->pl + span;
    } else {
        *gap = 0;
        *rcol = (d->kw - 1) / 2;
        *wq = d->ow + *rcol;
    }
}

/* pixels (on the padded width) past a block's first that its A tiles read: 31 + the kernel's reach */
static int64_t op_amxc_reach(const op_amxc_ctx *c)
{
    return 31 + c->rrow * c->wq + c->rcol;
}

/* 32-pixel blocks per task. 16 rather than 8: half the tasks, each copying its padded rows once
   for twice the blocks (fewer rows copied twice at the groups' edges) and passing each weight
   panel once over them. The Intel AMX VM, 2026-12-05, 2 threads, ResNet-50 NHWC bfloat16 paired
   with torch 2.13 in one process (x torch, median of 5-9): batch 8 res3_branch2b 0.81-0.83 ->
   0.84-0.85 (0.89 in one run), res2_branch2b 0.99 -> 1.02, res3a_branch2b 0.96 -> 0.99; batch 1
   res3_branch2b 1.12 -> 1.25, res3a_branch2b 1.59 -> 1.70; the others within the noise. 28 (one
   group per 28 x 28 image): 1.59 -> 1.36 at batch 1 res3a_branch2b (its panels then split
   between the threads). */
#define OP_AMXC_MGROUP 16
/* A weight panel's depth runs in chunks of at most this many bytes of it (a whole channel block at
   least): every pixel block of the task passes over one chunk, its partial sums kept in float32
   (op_amxc_panel), before the next chunk. A 3 x 3 panel over 128 channels is 72 KiB, more than L1
   (48 KiB on Sapphire Rapids): read whole per 32-pixel block, it came from L2 each time together
   with the block's A rows; a chunk fits L1 (not together with the partial sums and the A rows,
   which come from L2 as before). The Intel AMX VM, 2026-12-05, ResNet-50 NHWC bfloat16, 2 threads,
   A/B builds alternated in one process with torch 2.13 (x torch, 9-11 rounds): batch 8
   res3_branch2b (28 x 28, C 128) 0.73-0.75 -> 0.83-0.86 with 36 KiB chunks (two channel blocks;
   one: 0.83-0.84), res4_branch2b 1.06 -> 1.08, batch 1 res3_branch2b 1.05 -> 1.10; stride 2
   res3a_branch2b 0.95 -> 1.03 with 18 KiB chunks (36 KiB: 0.95, no gain). Other layers within the
   noise. The partial sums are the tiles' float32 values, stored and reloaded exactly: the same
   sums in the same order, the same bits. */
#define OP_AMXC_KCHUNK_S1 (36 * 1024)
#define OP_AMXC_KCHUNK_S2 (18 * 1024)
#define OP_AMXC_TASKS 2    /* tasks per thread at least (else the weight panels split) */

/* Padded row r (input row r - pt) of image n of the NHWC bfloat16 input x to o: wq pixels, input
   column 0 at pixel lpad, zeros outside the input. check: returns 1 when the copied values hold an
   Inf or NaN (else 0). Shared by the AMX convolutions' per-task row copies (amx_s1, amx_stem). */
static int op_amx_pad_row(const op_conv_desc *d, const uint16_t *x, int64_t wq, int64_t lpad,
                          int64_t n, int64_t r, uint16_t *o, int check)
{
    const int64_t C = d->c, ih = r - d->pt;
    if (ih < 0 || ih >= d->h) {
        memset(o, 0, sizeof(uint16_t) * (size_t)(wq * C));
        return 0;
    }
    const int64_t q0 = op_min64(lpad, wq), q1 = op_max64(q0, op_min64(lpad + d->w, wq));
    const int64_t len = (q1 - q0) * C;
    unsigned bad = 0;
    memset(o, 0, sizeof(uint16_t) * (size_t)(q0 * C));
    if (len > 0) {
        const uint16_t *src = x + ((n * d->h + ih) * d->w + (q0 - lpad)) * C;
        memcpy(o + q0 * C, src, sizeof(uint16_t) * (size_t)len);
        if (check)
            for (int64_t i = 0; i < len; i++) bad |= (src[i] & 0x7F80u) == 0x7F80u;
    }
    memset(o + q1 * C, 0, sizeof(uint16_t) * (size_t)((wq - q1) * C));
    return bad != 0;
}

/* one task = one 32-column weight panel, packed by the NHWC GEMM's own B pack
   (op_conv_pack_b_nhwc_k32_nf: depth order (channel block, tap, channel), a 1024-element k32 block per
   channel block and tap) followed by that pack's row scratch (pstride elements per panel) */
static void op_amxc_pack_task(void *ctx, int64_t jp, int tid)
{
    (void)tid;
    const op_amxc_ctx *c = (const op_amxc_ctx *)ctx;
    const int64_t K = c->d->c * c->ntap;
    op_convq_geo q;
    memset(&q, 0, sizeof q);
    q.d = c->d;
    q.bk = 32;
    op_gemm_args g;
    memset(&g, 0, sizeof g);
    g.b = c->w;
    g.csb = K;
    g.user = &q;
    op_conv_pack_b_nhwc_k32_nf(&g, 0, 0, K, K, jp * 32, op_min64(32, c->d->oc - jp * 32), c->wp + jp * c->pstride,
                               NULL);
}

static void op_amxc_panel(const op_amxc_ctx *c, int64_t grp, int64_t n, int64_t jp, const uint16_t *buf,
                          int64_t r0, float *part);

/* one task = (image, group of OP_AMXC_MGROUP 32-pixel blocks, range of weight panels): the padded
   rows its blocks read (from padded row r0) copied into its thread's own buffer first, then every
   panel of its range */
static void op_amxc_task(void *ctx, int64_t task, int tid)
{
    const op_amxc_ctx *c = (const op_amxc_ctx *)ctx;
    const op_conv_desc *d = c->d;
    const int64_t npt = op_cdiv64(c->npn, c->ppsplit), ps = task % c->ppsplit, rest = task / c->ppsplit;
    const int64_t grp = rest % c->ngroups, n = rest / c->ngroups, rs = c->wq * d->c;
    const int64_t v0 = grp * OP_AMXC_MGROUP * 32, v1 = op_min64(c->nmb, (grp + 1) * OP_AMXC_MGROUP) * 32;
    const int64_t r0 = v0 / c->wq, r1 = (v1 - 1 + op_amxc_reach(c)) / c->wq + 1;
    uint16_t *buf = c->xp + (size_t)tid * (size_t)c->xstep;
    for (int64_t r = r0; r < r1; r++) {   /* (rows past the padded image: past the input too, zeros) */
        if (c->S == 1) {
            op_amx_pad_row(d, c->x, c->wq, c->gap, n, r, buf + (r - r0) * rs, 0);
            continue;
        }
        for (int a = 0; a < 2; a++) {   /* stride 2: padded row 2r + a into planes (a, 0) and (a, 1) */
            const int64_t ih = 2 * r + a - d->pt;
            for (int b = 0; b < 2; b++) {
                uint16_t *o = buf + (a * 2 + b) * c->plsz + (r - r0) * rs;
                for (int64_t j = 0; j < c->wq; j++) {
                    const int64_t iw = 2 * j + b - d->pl;
                    if (ih >= 0 && ih < d->h && iw >= 0 && iw < d->w)
                        memcpy(o + j * d->c, c->x + ((n * d->h + ih) * d->w + iw) * d->c, sizeof(uint16_t) * (size_t)d->c);
                    else
                        memset(o + j * d->c, 0, sizeof(uint16_t) * (size_t)d->c);
                }
            }
        }
    }
    for (int64_t jp = ps * npt; jp < op_min64(c->npn, (ps + 1) * npt); jp++)
        op_amxc_panel(c, grp, n, jp, buf, r0, c->part + (size_t)tid * OP_AMXC_MGROUP * 32 * 32);
}

/* The write-out of 32-pixel block mb of image n, panel jp, from its float tile t (rows 32 apart):
   the rows of real pixels, in runs along an output row (contiguous in y). */
static void op_amxc_out(const op_amxc_ctx *c, const float *t, int64_t mb, int64_t n, int64_t jp)
{
    const op_conv_desc *d = c->d;
    const int64_t OC = d->oc, wq = c->wq, v0 = mb * 32;
    const int nr = (int)op_min64(32, OC - jp * 32);
    op_epilogue epi = {c->bias ? c->bias + jp * 32 : NULL, 1, 1, c->act};
    for (int64_t i = 0; i < 32;) {
        const int64_t v = v0 + i, oy = v / wq, ox = v % wq;
        if (oy >= d->oh) break;
        if (ox >= d->ow) {
            i += wq - ox;
            continue;
        }
        const int len = (int)op_min64(32 - i, d->ow - ox);
        const int64_t yo = ((n * d->oh + oy) * d->ow + ox) * OC + jp * 32;
        if (c->y_bf16) {
#if defined(OP_LEVEL_AVX512_CORE_AMX)   /* epilogue and rounding in one pass (the same bits) */
            op_dp_tile16_out(t + i * 32, len, nr, &epi, (uint16_t *)c->y + yo, OC);
#else
            float u[32 * 32] OP_ALIGNED(64);
            op_bf16_tile_out(t + i * 32, 32, len, nr, u, 32, 1, 0, &epi);
            op_tile_to_bf16(u, 32, 1, len, nr, (uint16_t *)c->y + yo, OC, 1);
#endif
        } else {
            op_bf16_tile_out(t + i * 32, 32, len, nr, (float *)c->y + yo, OC, 1, 0, &epi);
        }
        i += len;
    }
}

/* A block's write-out runs after the next block's tile products are issued (two float tiles), so
   the vector work overlaps the tiles' (as op_amxs_row's). */
static void op_amxc_panel(const op_amxc_ctx *c, int64_t grp, int64_t n, int64_t jp, const uint16_t *buf,
                          int64_t r0, float *part)
{
    const op_conv_desc *d = c->d;
    const int64_t C = d->c, wq = c->wq;
    const int64_t ld = C * (int64_t)sizeof(uint16_t);
    const uint16_t *B = c->wp + jp * c->pstride;
    float t[2][32 * 32] OP_ALIGNED(64);
    int cur = 0;
    int64_t pend = -1;   /* the block waiting for its write-out, in t[cur ^ 1] */
    op_amx_ensure_cfg();
    /* channel blocks per depth chunk (OP_AMXC_KCHUNK_S1): 2 KiB of weights per block and tap; the
       blocks' partial sums wait in part (OP_AMXC_MGROUP tiles of 32 x 32 floats) between chunks */
    const int64_t chunk = c->S == 1 ? OP_AMXC_KCHUNK_S1 : OP_AMXC_KCHUNK_S2;
    const int64_t cbs = op_max64(1, chunk / (c->ntap * 2048));
    const int64_t mb0 = grp * OP_AMXC_MGROUP;
    const int64_t mb1 = op_min64(c->nmb, (grp + 1) * OP_AMXC_MGROUP);
    for (int64_t q0 = 0; q0 < c->ncb; q0 += cbs) {
        const int64_t q1 = op_min64(c->ncb, q0 + cbs);
        for (int64_t mb = mb0; mb < mb1; mb++) {
            const int64_t v0 = mb * 32;
            float *pp = part + (mb - mb0) * 32 * 32;
            if (q0 == 0) {
                _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
            } else {
                _tile_loadd(0, pp, 128); _tile_loadd(1, pp + 16, 128);
                _tile_loadd(2, pp + 16 * 32, 128); _tile_loadd(3, pp + 16 * 32 + 16, 128);
            }
            for (int64_t cb = q0; cb < q1; cb++)
                for (int64_t r = 0; r < d->kh; r++) {
                    /* tap row r: stride 1 the padded row r DH further (tap (r, 0) at column
                       -pl: gap - pl pixels on); stride 2 r / 2 rows further in the planes of row
                       phase r % 2 */
                    const int64_t px = c->S == 1 ? v0 - r0 * wq + r * d->dh * wq + c->gap - d->pl
                                                 : v0 - r0 * wq + (r >> 1) * wq;
                    const int64_t plane = c->S == 1 ? 0 : (r & 1) * 2 * c->plsz;
                    const uint16_t *A = buf + plane + px * C + cb * 32;
                    const uint16_t *Bt = B + (cb * c->ntap + r * d->kw) * 1024;
                    for (int64_t s = 0; s < d->kw; s++) {
                        const uint16_t *ab = c->S == 1 ? A + s * d->dw * C
                                                       : A + (s & 1) * c->plsz + (s >> 1) * C;
                        const uint16_t *bb = Bt + s * 1024;
                        _tile_loadd(4, ab, ld);
                        _tile_loadd(6, bb, 64);
                        _tile_loadd(7, bb + 512, 64);
                        _tile_dpbf16ps(0, 4, 6);
                        _tile_loadd(5, ab + 16 * C, ld);
                        _tile_dpbf16ps(1, 4, 7);
                        _tile_dpbf16ps(2, 5, 6);
                        _tile_dpbf16ps(3, 5, 7);
                    }
                }
            if (q1 < c->ncb) {
                _tile_stored(0, pp, 128); _tile_stored(1, pp + 16, 128);
                _tile_stored(2, pp + 16 * 32, 128); _tile_stored(3, pp + 16 * 32 + 16, 128);
                continue;
            }
            if (pend >= 0) op_amxc_out(c, t[cur ^ 1], pend, n, jp);
            float *tc = t[cur];
            _tile_stored(0, tc, 128);
            _tile_stored(1, tc + 16, 128);
            _tile_stored(2, tc + 16 * 32, 128);
            _tile_stored(3, tc + 16 * 32 + 16, 128);
            pend = mb;
            cur ^= 1;
        }
    }
    if (pend >= 0) op_amxc_out(c, t[cur ^ 1], pend, n, jp);
}

/* Output pixels per image at least: stride 1 as the GEMM's OP_BF16_AMX_MIN_M (fewer pixels leave the
   tiles mostly empty); stride 2 four 32-pixel blocks. The Intel AMX VM, 2026-12-04, ResNet-50 NHWC
   batch 1 / 8, 2 threads, paired with torch 2.13: res5a_branch2b (7 x 7 output, 56 virtual pixels
   in two blocks per image) ran 1.77 -> 1.59x and 1.57 -> 1.34x torch on this kernel against the
   GEMM over the packed gather, while 14 x 14 (res4a_branch2b) gained 1.08 -> 1.30 and 0.86 -> 1.01,
   28 x 28 (res3a_branch2b) 1.23 -> 1.47 and 0.52 -> 0.86. */
#define OP_AMXC_S2_MIN_PIXELS 128

/* Whether the NHWC problem d runs op_conv2d_nhwc_amx_s1 (with the options in force: stride 1 with
   OP_CONV_BF16_AMX_S1, stride 2 with OP_CONV_BF16_AMX_S2). */
static int op_amxc_fits(const op_conv_desc *d)
{
    const int s1 = d->sh == 1 && d->sw == 1 && (op_conv_bf16_opts & OP_CONV_BF16_AMX_S1);
    const int s2 = d->sh == 2 && d->sw == 2 && d->dh == 1 && d->dw == 1 && (op_conv_bf16_opts & OP_CONV_BF16_AMX_S2);
    int64_t rrow, rcol, wq, gap;
    op_amxc_geom(d, &rrow, &rcol, &wq, &gap);
    const int64_t dropped = wq - d->ow;   /* columns per virtual row */
    return d->nhwc == 1 && d->groups == 1 && (s1 || s2) && d->kh * d->kw >= 2 &&
           d->c % 32 == 0 && d->kh <= 16 && d->kw <= 16 &&
           4 * dropped <= d->ow &&   /* at most 1 dropped column in 5 */
           d->oh * d->ow >= (s1 ? 16 : OP_AMXC_S2_MIN_PIXELS);
}

/* The NHWC stride-1 k x k convolution on AMX tiles (above): the threads used, 0 when d does not fit,
   -1 on allocation failure, -2 on an AMX fault (amx_emu). */
static int op_conv2d_nhwc_amx_s1(const op_conv_desc *d, const uint16_t *x, const uint16_t *w,
                                 const float *bias, void *y, int y_bf16, int act, int nthreads)
{
    if (!op_amxc_fits(d)) return 0;
    op_amxc_ctx c;
    memset(&c, 0, sizeof c);
    c.d = d; c.x = x; c.w = w; c.bias = bias; c.y = y; c.y_bf16 = y_bf16; c.act = act;
    c.S = d->sh;
    op_amxc_geom(d, &c.rrow, &c.rcol, &c.wq, &c.gap);
    c.ncb = d->c / 32;
    c.ntap = d->kh * d->kw;
    c.npn = op_cdiv64(d->oc, 32);
    c.nmb = op_cdiv64(d->oh * c.wq, 32);
    c.ngroups = op_cdiv64(c.nmb, OP_AMXC_MGROUP);
    /* a task runs every weight panel over its pixel blocks (their A rows read from L1 panel after
       panel); fewer (image, group) tasks than OP_AMXC_TASKS per thread: the panels split as well */
    const int64_t T = nthreads < 1 ? 1 : nthreads, ntask = d->n * c.ngroups;
    c.ppsplit = ntask >= OP_AMXC_TASKS * T ? 1 : op_min64(c.npn, op_cdiv64(OP_AMXC_TASKS * T, ntask));
    c.ppsplit = op_cdiv64(c.npn, op_cdiv64(c.npn, c.ppsplit));   /* no task without a panel */
    /* each task copies the padded rows its group reads (rows past the image: zeros) into its
       thread's own buffer, in its L2: one whole-batch copy filled by both threads and read by both
       cost the 2-thread runs (as op_conv2d_nhwc_amx_stem's) */
    c.plsz = op_roundup64(((OP_AMXC_MGROUP * 32 - 1 + op_amxc_reach(&c)) / c.wq + 2) * c.wq * d->c, 32);
    c.xstep = c.S == 1 ? c.plsz : 4 * c.plsz;
    c.xp = (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(T * c.xstep));
    c.pstride = 32 * d->c * c.ntap + 32 * (32 * c.ntap + 1);   /* a panel and its pack's row scratch */
    c.wp = (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(c.npn * c.pstride));
    c.part = (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)(T * OP_AMXC_MGROUP * 32 * 32));
    int used = -1;
    if (c.xp && c.wp && c.part) {
        op_parallel_for(nthreads, c.npn, op_amxc_pack_task, &c);
        op_amx_begin();
        used = op_parallel_for((int)T, d->n * c.ngroups * c.ppsplit, op_amxc_task, &c);
        op_amx_end();
        if (op_amx_fault()) used = -2;
    }
    op_conv_scratch_free(c.part);
    op_conv_scratch_free(c.wp);
    op_conv_scratch_free(c.xp);
    return used;
}

/* ---------------------------------------------------------------- AMX few-channel stem (NHWC)

   OP_CONV_BF16_AMX_STEM (bit 4096, "amx_stem"; AMX builds): an NHWC convolution with few input
   channels (groups 1, dilation 1, KH and KW >= 3, 8 <= C KW <= 32, C < 32: the 7x7 stride-2 stem of
   ResNet-50, C KW = 21) runs op_conv2d_nhwc_amx_stem: per kernel row r, the C KW depths an output pixel reads in
   that input row are contiguous in a padded NHWC copy of the input, so a 16 x 32 A tile (16 output
   pixels of a row, 32 depths) is one TILELOADD with a row stride of SW C elements straight from the
   copy: no gather. Each task, a band of up to 16 output rows of one image, copies the padded rows
   it reads into its thread's own buffer first (as conv_stem.c does: a whole-batch copy filled by
   both threads and read by both ran the 2-thread call at 1.1x the 1-thread one, the own copies at
   2x). Depths C KW .. 31 of a tile row are the next pixels' values, times weight rows that are
   zero; so a band whose copy holds an Inf or NaN (0 x Inf would make NaN of outputs that never read
   it) copies each pixel's windows into zero-filled 32-depth slots instead (op_amxs_row's safe form):
   the same bits for every output that reads no such value, so a finite image gives the same bits
   whatever else is in the batch (onepath.dask's batch chunks). The
   weight is packed once per call as per (32-column panel, kernel row) two B tiles (16 K-pairs x 16
   columns). A block is 2 x 16 output pixels of one row (tiles 4, 5) x a panel (tiles 6, 7): KH
   TDPBF16PS per C tile over 32 depths each (7x7, C 3: 7 x 32 instead of the gather's 160, without
   its 147-deep patches per pixel). Sums: over kernel rows in order, then the epilogue and the
   level's bfloat16 rounding as the GEMM's tiles: other bits than the GEMM route, the same at every
   thread count. (oneDNN's AMX convolutions lower the stem to kernel-row-wide depths the same way.)
   sapphirerapids (the Intel AMX VM, 2026-12-04, ResNet-50 conv1, NHWC, paired with torch 2.13 in one
   process, GFLOP/s GEMM route -> this): batch 8, 2 threads 770 -> 1837 (0.37 -> 0.87x torch), 1
   thread 474 -> 991; batch 1, 2 threads 907 -> 1496 (0.55 -> 0.90x). */

typedef struct {
    const op_conv_desc *d;
    const uint16_t *x;
    uint16_t *xp, *wp;
    const uint16_t *w;
    const float *bias;
    void *y;
    int y_bf16, act;
    int64_t wq, nseg, band, xstep;   /* padded row width; segments a row; rows a band; xp per thread */
    uint16_t *sw;                    /* per thread sstep elements: one output row's windows (safe form) */
    int64_t owp, sstep;              /* OW rounded up to 32 */
} op_amxs_ctx;

/* Whether the NHWC problem d runs op_conv2d_nhwc_amx_stem. */
static int op_amxs_fits(const op_conv_desc *d)
{
    return d->nhwc == 1 && d->groups == 1 && d->dh == 1 && d->dw == 1 && d->c < 32 &&
           d->kh >= 3 && d->kw >= 3 &&   /* k x k stems: the shapes measured (1 x k, 1x1 are not) */
           d->c * d->kw >= 8 && d->c * d->kw <= 32 && d->kh <= 16 && d->oh * d->ow >= 16;
}

/* the weight as B tiles: per (panel jp, kernel row r) 1024 elements, tile h (columns 16h..16h+15)
   at 512 h, element (k-pair kp, column j, e) at kp * 32 + 2 j + e for depth k = 2 kp + e = s C + ch */
static void op_amxs_pack_w(const op_amxs_ctx *c, int64_t npn)
{
    const op_conv_desc *d = c->d;
    const int64_t C = d->c, KH = d->kh, KW = d->kw;
    for (int64_t jp = 0; jp < npn; jp++)
        for (int64_t r = 0; r < KH; r++) {
            uint16_t *o = c->wp + (jp * KH + r) * 1024;
            for (int h = 0; h < 2; h++)
                for (int kp = 0; kp < 16; kp++)
                    for (int j = 0; j < 16; j++)
                        for (int e = 0; e < 2; e++) {
                            const int64_t k = 2 * kp + e, oc = jp * 32 + h * 16 + j;
                            uint16_t v = 0;
                            if (k < KW * C && oc < d->oc)
                                v = c->w[((oc * C + k % C) * KH + r) * KW + k / C];
                            o[h * 512 + kp * 32 + 2 * j + e] = v;
                        }
        }
}

/* A finished block's write-out (epilogue, bfloat16 rounding) from its float tile t (rows 32 apart). */
static void op_amxs_out(const op_amxs_ctx *c, const float *t, int len, int64_t jp, int64_t yo)
{
    const int64_t OC = c->d->oc;
    const int nr = (int)op_min64(32, OC - jp * 32);
    op_epilogue epi = {c->bias ? c->bias + jp * 32 : NULL, 1, 1, c->act};
    if (c->y_bf16) {
#if defined(OP_LEVEL_AVX512_CORE_AMX)   /* epilogue and rounding in one pass (the same bits) */
        op_dp_tile16_out(t, len, nr, &epi, (uint16_t *)c->y + yo, OC);
#else
        float u[32 * 32] OP_ALIGNED(64);
        op_bf16_tile_out(t, 32, len, nr, u, 32, 1, 0, &epi);
        op_tile_to_bf16(u, 32, 1, len, nr, (uint16_t *)c->y + yo, OC, 1);
#endif
    } else {
        op_bf16_tile_out(t, 32, len, nr, (float *)c->y + yo, OC, 1, 0, &epi);
    }
}

/* A block's write-out (op_amxs_out) runs after the next block's tile products are issued (two
   float tiles), so the vector work overlaps the tiles' instead of waiting between blocks
   (sapphirerapids, batch 8, 2 threads: 983 -> 1049 GFLOP/s). */
static void op_amxs_row(const op_amxs_ctx *c, int64_t n, int64_t oy, const uint16_t *rows, uint16_t *safe);

/* one task = a band of up to c->band output rows of one image: the padded input rows it reads
   copied into its thread's own buffer (in its L2), then each output row; with an Inf or NaN in
   them, each row in the safe form (op_amxs_row). */
static void op_amxs_task(void *ctx, int64_t task, int tid)
{
    const op_amxs_ctx *c = (const op_amxs_ctx *)ctx;
    const op_conv_desc *d = c->d;
    const int64_t nb = op_cdiv64(d->oh, c->band), n = task / nb, oy0 = (task % nb) * c->band;
    const int64_t oy1 = op_min64(d->oh, oy0 + c->band), nrow = (oy1 - oy0 - 1) * d->sh + d->kh;
    const int64_t rs = c->wq * d->c;
    uint16_t *xb = c->xp + (size_t)tid * (size_t)c->xstep;
    int bad = 0;
    for (int64_t r = 0; r < nrow; r++)
        bad |= op_amx_pad_row(d, c->x, c->wq, d->pl, n, oy0 * d->sh + r, xb + r * rs, 1);
    uint16_t *safe = bad ? c->sw + (size_t)tid * (size_t)c->sstep : NULL;
    for (int64_t oy = oy0; oy < oy1; oy++) op_amxs_row(c, n, oy, xb + (oy - oy0) * d->sh * rs, safe);
}

/* One output row of image n (its padded input rows from rows on): every pair of 16-pixel segments
   (the last one alone when it ends the row), every panel. safe != NULL (the band holds an Inf or
   NaN): each pixel's C KW depths per kernel row are first copied into 32-element slots of safe with
   zeros after them, and the A tiles read those (rows 64 bytes apart), so the zero weight rows meet
   zeros, never a neighbour's Inf: the same products in the same order as the in-place tiles for
   finite data (a zero weight times zero or times a finite value adds a zero), hence the same bits,
   and NaN only where an output reads the Inf or NaN. */
static void op_amxs_row(const op_amxs_ctx *c, int64_t n, int64_t oy, const uint16_t *rows, uint16_t *safe)
{
    const op_conv_desc *d = c->d;
    const int64_t C = d->c, OC = d->oc, kwc = d->kw * C;
    const int64_t npn = op_cdiv64(OC, 32);
    /* A tile of kernel row r, pixels ox0..: at a + r * ra + ox0 * pa, rows ld bytes apart */
    const uint16_t *a = rows;
    int64_t ra = c->wq * C, pa = d->sw * C, ld = d->sw * C * (int64_t)sizeof(uint16_t);
    if (safe) {
        for (int64_t r = 0; r < d->kh; r++)
            for (int64_t ox = 0; ox < c->owp; ox++) {
                uint16_t *o = safe + (r * c->owp + ox) * 32;
                memcpy(o, rows + (r * c->wq + ox * d->sw) * C, sizeof(uint16_t) * (size_t)kwc);
                memset(o + kwc, 0, sizeof(uint16_t) * (size_t)(32 - kwc));
            }
        a = safe;
        ra = c->owp * 32;
        pa = 32;
        ld = 64;
    }
    float t[2][32 * 32] OP_ALIGNED(64);
    int pend = 0, plen = 0;           /* a block waiting for its write-out, in t[cur ^ 1] */
    int64_t pjp = 0, pyo = 0;
    int cur = 0;
    op_amx_ensure_cfg();
    for (int64_t sg = 0; sg < c->nseg; sg += 2) {
        const int64_t ox0 = sg * 16;
        const int two = ox0 + 16 < d->ow;   /* the second 16-pixel segment holds pixels of the row */
        for (int64_t jp = 0; jp < npn; jp++) {
            const uint16_t *B = c->wp + jp * d->kh * 1024;
            _tile_zero(0); _tile_zero(1);
            if (two) { _tile_zero(2); _tile_zero(3); }
            for (int64_t r = 0; r < d->kh; r++) {
                const uint16_t *A = a + r * ra + ox0 * pa, *bb = B + r * 1024;
                _tile_loadd(4, A, ld);
                _tile_loadd(6, bb, 64);
                _tile_loadd(7, bb + 512, 64);
                _tile_dpbf16ps(0, 4, 6);
                _tile_dpbf16ps(1, 4, 7);
                if (two) {
                    _tile_loadd(5, A + 16 * pa, ld);
                    _tile_dpbf16ps(2, 5, 6);
                    _tile_dpbf16ps(3, 5, 7);
                }
            }
            if (pend) op_amxs_out(c, t[cur ^ 1], plen, pjp, pyo);
            float *tc = t[cur];
            _tile_stored(0, tc, 128);
            _tile_stored(1, tc + 16, 128);
            if (two) {
                _tile_stored(2, tc + 16 * 32, 128);
                _tile_stored(3, tc + 16 * 32 + 16, 128);
            }
            pend = 1;
            plen = (int)op_min64(32, d->ow - ox0);   /* the pixels of the row (contiguous in y) */
            pjp = jp;
            pyo = ((n * d->oh + oy) * d->ow + ox0) * OC + jp * 32;
            cur ^= 1;
        }
    }
    if (pend) op_amxs_out(c, t[cur ^ 1], plen, pjp, pyo);
}

/* The NHWC few-channel convolution on AMX tiles (above): the threads used, 0 when d does not fit,
   -1 on allocation failure, -2 on an AMX fault (amx_emu). */
static int op_conv2d_nhwc_amx_stem(const op_conv_desc *d, const uint16_t *x, const uint16_t *w,
                                   const float *bias, void *y, int y_bf16, int act, int nthreads)
{
    if (!op_amxs_fits(d)) return 0;
    op_amxs_ctx c;
    memset(&c, 0, sizeof c);
    c.d = d; c.x = x; c.w = w; c.bias = bias; c.y = y; c.y_bf16 = y_bf16; c.act = act;
    c.nseg = op_cdiv64(d->ow, 16);
    /* columns the tiles read: pixels of segments up to a whole pair, 32 depths from each start */
    c.wq = (op_roundup64(d->ow, 32) - 1) * d->sw + op_cdiv64(32, d->c);
    /* bands of up to 16 rows, fewer while the tasks are under 4 per thread (balance) */
    const int T = nthreads < 1 ? 1 : nthreads;
    c.band = 16;
    while (c.band > 2 && d->n * op_cdiv64(d->oh, c.band) < 4 * (int64_t)T) c.band /= 2;
    c.band = op_min64(c.band, d->oh);
    c.xstep = op_roundup64(((c.band - 1) * d->sh + d->kh) * c.wq * d->c, 32);
    c.owp = op_roundup64(d->ow, 32);
    c.sstep = d->kh * c.owp * 32;
    const int64_t npn = op_cdiv64(d->oc, 32);
    c.xp = (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(T * (c.xstep + c.sstep)));
    c.sw = c.xp ? c.xp + (size_t)T * (size_t)c.xstep : NULL;
    c.wp = (uint16_t *)op_conv_scratch_alloc(sizeof(uint16_t) * (size_t)(npn * d->kh * 1024));
    int used = -1;
    if (c.xp && c.wp) {
        op_amxs_pack_w(&c, npn);
        op_amx_begin();
        used = op_parallel_for(T, d->n * op_cdiv64(d->oh, c.band), op_amxs_task, &c);
        op_amx_end();
        if (op_amx_fault()) used = -2;
    }
    op_conv_scratch_free(c.wp);
    op_conv_scratch_free(c.xp);
    return used;
}
#endif

int op_conv2d_bf16(const op_conv_desc *d, const uint16_t *x, const uint16_t *w, const float *bias,
                   void *y, int y_bf16, int act, const op_blocking *blk, int nthreads)
{
    const int64_t G = d->groups, ocg = d->oc / G;
    const int64_t ohw = d->oh * d->ow, K = d->c / G * d->kh * d->kw;
    if (d->n <= 0 || ohw <= 0 || d->oc <= 0) return 1;
    const int rs = op_conv_stem_bf16(d, x, w, bias, y, y_bf16, act, nthreads);   /* conv_stem.c */
    if (rs != 0) return rs;
#if defined(OP_BF16_NATIVE)
    if (d->nhwc == 2) {   /* NCHW through the NHWC formulation (conv_f32.c) */
        op_conv_desc dn;
#if defined(OP_BF16_HAS_DP)
        op_convb_nchw_problem(d, &dn, NULL);
        if (op_convb_img_fits(d, &dn, nthreads)) {   /* image by image (OP_CONV_BF16_AS_NHWC_IMAGE) */
            const int ri = op_conv2d_bf16_as_nhwc_images(d, &dn, x, w, bias, y, y_bf16, act, blk, nthreads);
            if (ri != 0) return ri;
        }
#endif
        const size_t ysz = y_bf16 ? 2 : 4;
        void *yt = op_conv_scratch_alloc(ysz * (size_t)(d->n * ohw * d->oc));
        int r = -1;
#if defined(OP_BF16_HAS_DP)
        /* the batch-reduce kernel over a padded NHWC copy transposed from x in one pass */
        op_convq_geo q;
        op_convq_buf qb = {NULL, NULL, NULL};
        op_convb_nchw_problem(d, &dn, NULL);
        if (yt && op_brgb_fits(&dn)) {
            r = op_convb_prepare_nchw(d, x, OP_DP_MR, nthreads, &dn, &q, &qb) == 0
                    ? op_brgb_run(&dn, &q, 0, w, bias, yt, y_bf16, act, blk, nthreads, NULL) : -1;
        } else {
            r = 0;
        }
        op_convq_free(&qb);
        if (r == 0)
#endif
        {
            void *xt = op_convb_as_nhwc_input(d, x, nthreads, &dn);
            r = -1;
            if (xt && yt) r = op_conv2d_bf16(&dn, (const uint16_t *)xt, w, bias, yt, y_bf16, act, blk, nthreads);
            op_conv_scratch_free(xt);
        }
        if (r > 0) {
            if (y_bf16) op_conv_transpose((const uint16_t *)yt, (uint16_t *)y, d->n, ohw, d->oc, 2, nthreads);
            else op_conv_transpose(yt, y, d->n, ohw, d->oc, ysz, nthreads);
        }
        op_conv_scratch_free(yt);
        return r;
    }
#endif
#if !defined(OP_BF16_NATIVE)
    (void)ocg;
    const int64_t ny = d->n * d->oc * ohw;
    float *wf = (float *)op_aligned_alloc(sizeof(float) * (size_t)(d->oc * K));
    float *yf = y_bf16 ? (float *)op_aligned_alloc(sizeof(float) * (size_t)ny) : (float *)y;
    int r = -1;
    if (wf && yf) {
        for (int64_t i = 0; i < d->oc * K; i++) wf[i] = op_bf16_to_f32_1(w[i]);
        r = op_conv2d_f32(d, x, 1, wf, bias, yf, act, blk, nthreads);
        if (r > 0 && y_bf16) op_conv_f32_to_bf16(yf, (uint16_t *)y, ny, nthreads);
    }
    if (y_bf16) op_aligned_free(yf);
    op_aligned_free(wf);
    return r;
#else
    const int inplace = d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 && d->pt == 0 &&
                        d->pl == 0 && d->oh == d->h && d->ow == d->w;
#if defined(OP_BF16_HAS_AMX)
    if (d->nhwc == 1 && (op_conv_bf16_opts & (OP_CONV_BF16_AMX_S1 | OP_CONV_BF16_AMX_S2))) {   /* NHWC stride-1 k x k on AMX tiles, in place */
        const int ra = op_conv2d_nhwc_amx_s1(d, x, w, bias, y, y_bf16, act, nthreads);
        if (ra != 0) return ra;
    }
    if (d->nhwc == 1 && (op_conv_bf16_opts & OP_CONV_BF16_AMX_STEM)) {   /* few channels on AMX tiles */
        const int ra = op_conv2d_nhwc_amx_stem(d, x, w, bias, y, y_bf16, act, nthreads);
        if (ra != 0) return ra;
    }
#endif
#if defined(OP_BF16_HAS_DP)
    if (d->nhwc && op_s1x1_ref_fits(d, blk))
        return op_conv2d_bf16_s1x1_ref(d, x, w, bias, y, y_bf16, act, blk, nthreads);
    if (d->nhwc) {
        const int rb = op_conv2d_nhwc_brg_bf16(d, x, w, bias, y, y_bf16, act, blk, nthreads);
        if (rb != 0) return rb;
    }
    if (inplace && !d->nhwc) {   /* OP_CONV_BF16_NCHW1X1_JOINT */
        const int rj = op_conv2d_bf16_nchw1x1_joint(d, x, w, bias, y, y_bf16, act, blk, nthreads);
        if (rj != 0) return rj;
    }
#endif
    if (!inplace) {
        if (d->nhwc) return op_conv2d_bf16_nhwc(d, x, w, bias, y, y_bf16, act, blk, nthreads);
        const int r = op_conv2d_bf16_xp(d, x, w, bias, y, y_bf16, act, blk, nthreads);
        if (r != 0) return r;
    }
    /* a 1x1 stride-1 unpadded convolution (a plain GEMM on x), or NCHW in the weight's own depth
       order (c, kh, kw) with the input gathered by op_conv_pack_b_nchw_k32 */
    int amx = 0;
    op_gemm_ops ops = *op_bf16_pick(d->nhwc ? ohw * (op_conv_joint(d) ? d->n : 1) : ocg, &amx);
    ops.direct_b = 0;
    ops.b_prepacked = 0;
    if (!inplace) ops.pack_b = op_conv_pack_b_nchw_k32;
#if defined(OP_BF16_HAS_DP)
    /* NHWC 1x1: A (the input rows) read in place by the VDPBF16PS kernel, as float32 does (rows
       2 KiB apart or a multiple of it, C % 1024 == 0, would share few L1d sets: packed) */
    if (inplace && d->nhwc && !amx && d->c % 1024 != 0) {
        ops.ukr_a = op_conv_ukr_a_dp;
        ops.ukr_a_bcast = 1;
    }
    if (inplace && d->nhwc && !amx && y_bf16 && (op_conv_bf16_opts & OP_CONV_BF16_1X1_OUT16) &&
        (d->c / G) % 32 == 0 && d->c % 1024 != 0 && (!blk || blk->kc <= 0 || blk->kc % 32 == 0)) {
        ops = op_bf16_dp_ref_ops;
        ops.ukr16 = (op_conv_bf16_opts & OP_CONV_BF16_1X1_OUT16_CONV) ? op_conv_ukr16_a_dp : op_ukr16_dp_ref;
    }
#endif
    op_convb_geo q;
    q.d = d;
    q.x = x;
    q.cg = d->c / G;
    q.ocg = ocg;
    return op_convb_gemm(d, &ops, amx, &q, &q.g0, x, w, K, bias, act, y, y_bf16, blk, nthreads);
#endif
}

int op_conv2d_bf16_amx_s1(const op_conv_desc *d)
{
#if defined(OP_BF16_HAS_AMX)
    return op_amxc_fits(d);
#else
    (void)d;
    return 0;
#endif
}

int op_conv2d_bf16_amx_stem(const op_conv_desc *d)
{
#if defined(OP_BF16_HAS_AMX)
    if (op_conv2d_stem(d, 1)) return 0;   /* conv_stem.c runs first */
    return (op_conv_bf16_opts & OP_CONV_BF16_AMX_STEM) && !op_conv2d_bf16_amx_s1(d) && op_amxs_fits(d);
#else
    (void)d;
    return 0;
#endif
}

int op_conv_bf16_options(int flags)
{
#if defined(OP_BF16_NATIVE)
    const int old = op_conv_bf16_opts;
    if (flags >= 0) op_conv_bf16_opts = flags & (OP_CONV_BF16_BRG | OP_CONV_BF16_SKIP_PAD | OP_CONV_BF16_NSPLIT_PACK |
                                             OP_CONV_BF16_1X1_OUT16 | OP_CONV_BF16_INPLACE |
                                             OP_CONV_BF16_1X1_STRIDED_REF | OP_CONV_BF16_1X1_OUT16_CONV |
                                             OP_CONV_BF16_AS_NHWC_IMAGE | OP_CONV_BF16_AS_NHWC_IMAGE_L2 |
                                             OP_CONV_BF16_NCHW1X1_JOINT | OP_CONV_BF16_NSPLIT_SMALL |
                                             OP_CONV_BF16_AMX_S1 | OP_CONV_BF16_AMX_STEM | OP_CONV_BF16_AMX_S2);
    return old;
#else
    (void)flags;
    return 0;
#endif
}
