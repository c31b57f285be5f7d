/* conv_f32.c: convolution as GEMM through the level's GEMM driver (gemm_f32.c), float32 accumulation.

   Per batch entry (image n, group g) the convolution is one GEMM:
     NCHW: C[oc][pixel]  = W[oc][(c,kh,kw)] * B[(c,kh,kw)][pixel]      (M = OC/g, N = OH*OW)
     NHWC: C[pixel][oc]  = A[pixel][depth] * B[depth][oc]              (M = OH*OW, N = OC/g)
   where B (NCHW) or A (NHWC) is the im2col matrix, never materialised: the pack callbacks gather
   the patch rows of each KC x NC (or MC x KC) block straight from the input tensor into the
   micro-panel layout (implicit GEMM), widening bfloat16 input on the way. NCHW packs the weight
   with the f32 GEMM's own routine (op_pack_a_f32) with per-group offsets; NHWC reads a padded copy
   of the input in a channel-block depth order and packs the weight in place in that order (see
   "NHWC over a padded input" below, shared with conv_bf16.c). A 1x1 stride-1 unpadded float32
   convolution reads the input in place through op_gemm_f32_ops (NHWC at AVX-512: with A broadcast
   straight from the input rows, op_conv_ukr_a_f32), and an NHWC k x k one whose output rows are
   whole micro-panels reads its padded input in place as a batch-reduce GEMM (op_conv2d_nhwc_brg_f32).
   The micro-kernel (op_ukr_f32) applies bias and activation while writing the output.
   A float32 NCHW input that is not read in place is first copied into a padded, stride-phase-split
   layout (op_convx_prepare_f32, below), so that the B pack copies contiguous runs without border
   tests, and the NC block is capped (OP_CONVX_NC) so the packed gather stays in L2. */

/* ---------------------------------------------------------------- per-call scratch, kept

   The large per-call buffers of the convolutions (padded / transposed inputs, packed weights,
   NHWC results) come from op_conv_scratch_alloc: up to OP_CONV_SCRATCH_SLOTS freed blocks are kept
   for the next call instead of going back to malloc, which hands blocks of this size back to the
   OS (mmap, or trimming the heap top) and so made every call fault its scratch in anew (page faults,
   cleared pages: 5-10% of a ResNet-50 layer at batch 1 on Zen 4, more with two threads faulting at
   once). A block is taken by atomic exchange, so concurrent calls never share one; blocks larger
   than OP_CONV_SCRATCH_MAX are not kept. The header before each block holds its size. */
#define OP_CONV_SCRATCH_SLOTS 4
#define OP_CONV_SCRATCH_MAX ((size_t)256 << 20)
static _Atomic(void *) op_conv_scratch_slot[OP_CONV_SCRATCH_SLOTS];

static void op_conv_scratch_free(void *q);

/* Best fit: the smallest kept block that holds size (a call takes several blocks of different
   sizes; taking the first that fits could hand a large block to a small request and leave the
   large request only a too-small block, reallocated and faulted in on every call). The blocks
   that do not fit go back (the smallest of them is freed when none fits, making room). */
static void *op_conv_scratch_alloc(size_t size)
{
    size = (size + OP_ALIGN - 1) & ~(size_t)(OP_ALIGN - 1);
    char *got[OP_CONV_SCRATCH_SLOTS];
    int ng = 0, best = -1, small = -1;
    for (int i = 0; i < OP_CONV_SCRATCH_SLOTS; i++) {
        char *p = (char *)atomic_exchange(&op_conv_scratch_slot[i], NULL);
        if (!p) continue;
        const size_t sz = *(size_t *)(void *)p;
        if (sz >= size && (best < 0 || sz < *(size_t *)(void *)got[best])) best = ng;
        if (small < 0 || sz < *(size_t *)(void *)got[small]) small = ng;
        got[ng++] = p;
    }
    char *r = best >= 0 ? got[best] : NULL;
    for (int i = 0; i < ng; i++) {
        if (i == best) continue;
        if (best < 0 && i == small) free(got[i]);
        else op_conv_scratch_free(got[i] + OP_ALIGN);
    }
    if (r) return r + OP_ALIGN;
    char *p = (char *)aligned_alloc(OP_ALIGN, size + OP_ALIGN);
    if (!p) return NULL;
    *(size_t *)(void *)p = size;
    return p + OP_ALIGN;
}

static void op_conv_scratch_free(void *q)
{
    if (!q) return;
    char *p = (char *)q - OP_ALIGN;
    if (*(size_t *)(void *)p <= OP_CONV_SCRATCH_MAX)
        for (int i = 0; i < OP_CONV_SCRATCH_SLOTS; i++) {
            void *expect = NULL;
            if (atomic_compare_exchange_strong(&op_conv_scratch_slot[i], &expect, (void *)p)) return;
        }
    free(p);
}

typedef struct {
    const op_conv_desc *d;
    const void *x;
    int64_t cg, ocg;
    int64_t g0;       /* >= 0: every batch entry is image bi of group g0; < 0: entry bi = (n, g) */
} op_conv_geo;

OP_INLINE float op_conv_ld(const void *x, int64_t i, const int BF16)
{
    if (BF16) {
        uint32_t u = (uint32_t)((const uint16_t *)x)[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    return ((const float *)x)[i];
}

OP_INLINE void op_conv_entry(const op_conv_geo *q, int64_t bi, int64_t *n, int64_t *g)
{
    if (q->g0 >= 0) {
        *n = bi;
        *g = q->g0;
    } else {
        *n = bi / q->d->groups;
        *g = bi % q->d->groups;
    }
}

/* NCHW: len consecutive im2col columns (output pixels jstart..) of one depth row into out[]:
   the input plane at element offset `plane`, tap offsets (ihoff, iwoff). */
OP_INLINE void op_conv_fill_row(const op_conv_desc *d, const void *x, int64_t plane, int64_t ihoff,
                                int64_t iwoff, int64_t jstart, int64_t len, float *OP_RESTRICT out,
                                const int BF16)
{
    const int64_t H = d->h, W = d->w, OW = d->ow, sh = d->sh, sw = d->sw;
    int64_t oh = jstart / OW, ow = jstart % OW;
    for (int64_t jj = 0; jj < len;) {
        const int64_t run = op_min64(OW - ow, len - jj);
        const int64_t ih = oh * sh + ihoff;
        float *o = out + jj;
        if (ih < 0 || ih >= H) {
            for (int64_t t = 0; t < run; t++) o[t] = 0.0f;
        } else {
            const int64_t iw0 = ow * sw + iwoff;
            int64_t tlo = iw0 >= 0 ? 0 : op_cdiv64(-iw0, sw);
            int64_t thi = iw0 >= W ? 0 : op_cdiv64(W - iw0, sw);
            if (tlo > run) tlo = run;
            if (thi > run) thi = run;
            if (thi < tlo) thi = tlo;
            for (int64_t t = 0; t < tlo; t++) o[t] = 0.0f;
            const int64_t base = plane + ih * W + iw0;
            if (sw == 1 && run == OP_F32_NR && tlo == 0 && thi == OP_F32_NR) {
                for (int t = 0; t < OP_F32_NR; t++) o[t] = op_conv_ld(x, base + t, BF16);
            } else if (sw == 1) {
                for (int64_t t = tlo; t < thi; t++) o[t] = op_conv_ld(x, base + t, BF16);
            } else {
                for (int64_t t = tlo; t < thi; t++) o[t] = op_conv_ld(x, base + t * sw, BF16);
            }
            for (int64_t t = thi; t < run; t++) o[t] = 0.0f;
        }
        jj += run;
        ow = 0;
        oh++;
    }
}

/* NCHW implicit B: depth p0..p0+kc ((c, kh, kw) order), pixels j0..j0+nc -> NR-wide micro-panels. */
OP_INLINE void op_conv_pack_b_nchw_impl(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                        int64_t kcp, int64_t j0, int64_t nc, void *dst,
                                        const int BF16)
{
    enum { NR = OP_F32_NR };
    const op_conv_geo *q = (const op_conv_geo *)g->user;
    const op_conv_desc *d = q->d;
    int64_t n, gi;
    op_conv_entry(q, bi, &n, &gi);
    const int64_t khw = d->kh * d->kw;
    float *D = (float *)dst;
    for (int64_t p = 0; p < kc; p++) {
        const int64_t pp = p0 + p, c = pp / khw, r = pp % khw, ki = r / d->kw, kj = r % d->kw;
        const int64_t plane = ((n * d->c + gi * q->cg + c) * d->h) * d->w;
        const int64_t ihoff = ki * d->dh - d->pt, iwoff = kj * d->dw - d->pl;
        for (int64_t jr = 0; jr < nc; jr += NR) {
            const int64_t nr = op_min64(NR, nc - jr);
            float *o = D + jr * kcp + p * NR;
            op_conv_fill_row(d, q->x, plane, ihoff, iwoff, j0 + jr, nr, o, BF16);
            for (int64_t t = nr; t < NR; t++) o[t] = 0.0f;
        }
    }
    for (int64_t jr = 0; jr < nc; jr += NR)
        for (int64_t p = kc; p < kcp; p++)
            for (int t = 0; t < NR; t++) D[jr * kcp + p * NR + t] = 0.0f;
}

static void op_conv_pack_b_nchw_f32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                    int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    op_conv_pack_b_nchw_impl(g, bi, p0, kc, kcp, j0, nc, dst, 0);
}

static void op_conv_pack_b_nchw_bf16(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                     int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    op_conv_pack_b_nchw_impl(g, bi, p0, kc, kcp, j0, nc, dst, 1);
}

/* ---------------------------------------------------------------- A read in place (float32)

   op_gemm_ops.ukr_a for the NHWC 1x1 stride-1 convolution (a plain GEMM, A = the input rows of C
   floats): the 14 x 32 AVX-512 micro-kernel of gemm_f32.c with A broadcast straight from the input
   rows (a[i*lda + p]) instead of from a packed micro-panel. With few output channels (N = OC/g of 64
   or 128: each input row feeds only two to four B panels) packing A costs about a third of the
   micro-kernel's time (perf, ResNet-50 res2 1x1 at batch 8 on Zen 4): the transposes that pack it
   wait on the input's stream from memory. Broadcast loads need no alignment. Full MR-row panels
   only (the driver packs the tail). */
/* OP_CONV_A_FAR_PF (op_conv_f32_options; registry CONV_F32_OPTIONS "ukr_a_far_prefetch"): the
   micro-kernel's A prefetch with kc > OP_CONV_A_NEAR_KC as described in it */
#define OP_CONV_A_FAR_PF 8192
#define OP_CONV_A_NEAR_KC 128
static int op_conv_f32_opts = 0;   /* the option bits (op_conv_f32_options, below) */
#if defined(OP_HAS_AVX512)
static void op_conv_ukr_a_f32(int64_t kc, const void *a_, int64_t lda, const void *b_, float *c,
                              int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)mr;   /* always OP_F32_MR (14) */
    const float *OP_RESTRICT b = (const float *)b_;
    const float *p0 = (const float *)a_, *p3 = p0 + 3 * lda, *p6 = p0 + 6 * lda, *p9 = p0 + 9 * lda,
                *p12 = p0 + 12 * lda;
    const int64_t l2 = 2 * lda;
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    if (csc == 1)
        for (int i = 0; i < OP_F32_MR; i++) {
            _mm_prefetch((const char *)(c + i * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 31), _MM_HINT_T0);
        }
#define OP_RA(i, src)                                                    \
    {                                                                    \
        __m512 ai = _mm512_set1_ps(src);                                 \
        c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);                    \
        c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);                    \
    }
    /* the next 14 rows (the next panel: rows are contiguous in the input) are fetched a line per
       k step, row p % 16 at depth p rounded down to 16 (rows 14, 15 of each 16 steps skip) */
    const float *pf = p0 + OP_F32_MR * lda;
    /* (full width, kc > OP_CONV_A_NEAR_KC, OP_CONV_A_FAR_PF) the panel after next into L2 instead,
       and this panel's own rows into L1 two lines ahead: with rows of 256+ floats the next panel
       (14+ KiB) fetched into L1 beside this one and the 32 KiB B panel overflowed the 48 KiB L1d,
       its lines evicted before use. sapphirerapids (the Intel AMX VM, 2026-12-04, paired with
       torch 2.13 in one process, x torch before -> after): one image 28x28 C 256 -> 128, 1 thread
       (A in L2) 0.95 -> 1.00; ResNet-50 NHWC batch 8, 2 threads: res3a_branch2a 0.98 -> 1.02,
       res4a_branch2a 0.90 -> 0.93, the 15 1x1 layers' geomean 1.00 -> 1.02. With kc <= 128
       (res2_branch2c's K 64, the next panel 3.5 KiB) the far fetch measured slower: the near one
       kept. Prefetches only. */
    const float *pf2 = p0 + 2 * OP_F32_MR * lda;
#define OP_RA1(i, src) c##i##_0 = _mm512_fmadd_ps(_mm512_set1_ps(src), b0, c##i##_0);
    if (nr <= 16) {   /* a column tail of <= 16 (the NCHW GEMM's 196 = 6 x 32 + 4 pixels): half the FMAs */
        for (int64_t p = 0; p < kc; p++) {
            __m512 b0 = _mm512_loadu_ps(b);
            if ((p & 15) < OP_F32_MR) _mm_prefetch((const char *)(pf + (p & 15) * lda + (p & ~(int64_t)15)), _MM_HINT_T0);
            OP_RA1(0, p0[p]) OP_RA1(1, p0[lda + p]) OP_RA1(2, p0[l2 + p])
            OP_RA1(3, p3[p]) OP_RA1(4, p3[lda + p]) OP_RA1(5, p3[l2 + p])
            OP_RA1(6, p6[p]) OP_RA1(7, p6[lda + p]) OP_RA1(8, p6[l2 + p])
            OP_RA1(9, p9[p]) OP_RA1(10, p9[lda + p]) OP_RA1(11, p9[l2 + p])
            OP_RA1(12, p12[p]) OP_RA1(13, p12[lda + p])
            b += OP_F32_NR;
        }
        kc = 0;
    }
#undef OP_RA1
#define OP_RSTEP                                                                                 \
    OP_RA(0, p0[p]) OP_RA(1, p0[lda + p]) OP_RA(2, p0[l2 + p])                                   \
    OP_RA(3, p3[p]) OP_RA(4, p3[lda + p]) OP_RA(5, p3[l2 + p])                                   \
    OP_RA(6, p6[p]) OP_RA(7, p6[lda + p]) OP_RA(8, p6[l2 + p])                                   \
    OP_RA(9, p9[p]) OP_RA(10, p9[lda + p]) OP_RA(11, p9[l2 + p])                                 \
    OP_RA(12, p12[p]) OP_RA(13, p12[lda + p])                                                    \
    b += OP_F32_NR;
    if (kc <= OP_CONV_A_NEAR_KC || !(op_conv_f32_opts & OP_CONV_A_FAR_PF)) {
        for (int64_t p = 0; p < kc; p++) {
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            if ((p & 15) < OP_F32_MR)
                _mm_prefetch((const char *)(pf + (p & 15) * lda + (p & ~(int64_t)15)), _MM_HINT_T0);
            OP_RSTEP
        }
    } else {
        for (int64_t p = 0; p < kc; p++) {
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            const int64_t po = (p & 15) * lda + (p & ~(int64_t)15);   /* (rows 14, 15: harmless) */
            _mm_prefetch((const char *)(p0 + po + 32), _MM_HINT_T0);
            _mm_prefetch((const char *)(pf2 + po), _MM_HINT_T1);
            OP_RSTEP
        }
    }
#undef OP_RSTEP
#undef OP_RA
    if (OP_LIKELY(csc == 1)) {
        op_epi512 e;
        op_epi512_init(&e, nr, epi);
#define OP_W(i) op_epi512_row(&e, c + i * rsc, i, c##i##_0, c##i##_1, nr, acc);
        OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5) OP_W(6)
        OP_W(7) OP_W(8) OP_W(9) OP_W(10) OP_W(11) OP_W(12) OP_W(13)
#undef OP_W
    } else {
        float t[OP_F32_MR * 32] OP_ALIGNED(64);
        OP_TILE14_STORE(t, 14);
        op_tile_store(t, 32, OP_F32_MR, nr, c, rsc, csc, acc, epi);
    }
}
#endif

#if defined(OP_HAS_AVX512)
/* A block rows i0.., depth p0.. as whole MR-row panels copied row by row (panel row i at d[i * kcp],
   kcp floats apart: 1 or 2 KiB at kc 256 or 512, so a panel's 14 rows spread over L1d sets), read
   by op_conv_ukr_a_f32 (op_conv_ukr_rows_f32); a tail panel of fewer rows packed k-major for the
   packed micro-kernel. For an A whose rows are 4 KiB apart (the NCHW 1x1 weight with C a multiple
   of 1024): a copy, no transposes, and no L1d set conflicts in the micro-kernel. */
static void op_conv_pack_a_rows_f32(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                                    int64_t kc, int64_t kcp, void *dst)
{
    enum { MR = OP_F32_MR };
    const float *A = (const float *)g->a + (g->a_off ? g->a_off[bi] : 0);
    float *d = (float *)dst;
    for (int64_t ir = 0; ir < mc; ir += MR, d += MR * kcp) {
        if (mc - ir < MR) {   /* (f32: kcp == kc; the weight: csa == 1) */
            op_pack_a_f32(g, bi, i0 + ir, op_min64(MR, mc - ir), p0, kc, kcp, d);
            continue;
        }
        for (int i = 0; i < MR; i++) memcpy(d + i * kcp, A + (i0 + ir + i) * g->rsa + p0, sizeof(float) * (size_t)kc);
    }
}

static void op_conv_ukr_rows_f32(int64_t kc, const void *a, const void *b, int64_t ldb, float *c,
                                 int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    if (mr == OP_F32_MR && ldb == OP_F32_NR)
        op_conv_ukr_a_f32(kc, a, kc, b, c, rsc, csc, mr, nr, acc, epi);
    else
        op_ukr_f32(kc, a, b, ldb, c, rsc, csc, mr, nr, acc, epi);
}
#endif

/* ---------------------------------------------------------------- NHWC over a padded input

   Shared by the float32 (below) and bfloat16 (conv_bf16.c) NHWC convolutions, depth order (kh, kw, c):
   C[pixel][oc] = A[pixel][(kh,kw,c)] * B[(kh,kw,c)][oc]. The input is read through a zero-padded
   NHWC copy Xq[n][hq][wq][C] covering every tap of every output pixel (made once per call; x itself
   when the convolution needs no padding and no widening), so the depths of a pixel are, with no
   border tests, a fixed sequence of contiguous "runs" at fixed offsets from the pixel's first tap.
   The depth order is (channel block, kh, kw, channel in the block) with blocks of bk channels (bk =
   the A pack's unit: 32 for the bf16 k32 layout, 16 for a float32 transpose; (kh, kw, c) when
   C/g <= bk): one run per (channel block, tap), or, when C/g <= bk, dw == 1 and groups == 1, one
   run of KW*C elements per kernel row (a kernel row of taps is a contiguous piece of a padded input
   row: conv1's C = 3, KW = 7 gives runs of 21 instead of 7 runs of 3). The runs are cut once per
   call into blocks of bk depths: each block is a list of segments (lanes [t0, t0+len) read from
   the pixel's address + off), the same for every pixel, so a block of one pixel is one masked
   vector load per segment (a single full load when C/g is a multiple of bk). On the weight side a
   channel block of one output channel, W[oc][cb*bk ..][all taps], is one contiguous piece of the
   weight (OC, C/g, KH, KW): the B packs (op_conv_pack_b_nhwc_f32, conv_bf16.c's
   op_conv_pack_b_nhwc_k32) read it in place with 16 x 16 transposes, KC being whole channel blocks
   (op_convq_kc). */
typedef struct {
    int32_t t0, len;      /* lanes of the block */
    uint32_t mask;        /* the lanes as a bit mask */
    int64_t off;          /* source offset from the pixel's first tap, in elements */
} op_convq_seg;

typedef struct {
    const op_conv_desc *d;
    const void *xq;               /* padded copy, or x itself */
    int64_t rs, is;               /* row and image strides of xq in elements (pixel stride: C) */
    int64_t g0;                   /* >= 0: every batch entry is image bi of group g0; < 0: (n, g) */
    int64_t ohw_joint;            /* > 0: one batch entry, M = N * OH*OW pixels of all images (this
                                     many per image; op_conv_joint); 0: batch entries are images */
    int mr;                       /* A micro-panel rows of the ops in use */
    int bk;                       /* depths per block */
    int64_t nblk;                 /* blocks of K */
    const int64_t *bseg;          /* block b: segments bseg[b] .. bseg[b + 1] - 1 */
    const op_convq_seg *seg;
} op_convq_geo;

typedef struct {
    void *xq;                     /* owned copy (NULL: x read in place) */
    int64_t *bseg;
    op_convq_seg *seg;
} op_convq_buf;

/* An NHWC convolution without groups is one GEMM over the pixels of all images (M = N*OH*OW: the
   weight is packed once per KC x NC block for all images instead of once per image, and small
   planes leave no ragged M edge per image), else one batch entry per (image, group). */
OP_INLINE int op_conv_joint(const op_conv_desc *d)
{
    return d->nhwc == 1 && d->groups == 1 && d->n > 1;
}

typedef struct {
    const op_conv_desc *d;
    const void *x;
    int x_bf16, widen;            /* x bfloat16 bits; widen: the copy is float32 */
    void *xq;
    int64_t hq, wq;
} op_convq_fill_ctx;

/* Element offset in xq of the first tap of output pixel pix of batch entry bi. */
OP_INLINE int64_t op_convq_pixel(const op_convq_geo *q, int64_t bi, int64_t pix)
{
    const op_conv_desc *d = q->d;
    const int64_t G = d->groups;
    int64_t n = q->g0 >= 0 ? bi : bi / G;
    const int64_t gi = q->g0 >= 0 ? q->g0 : bi % G;
    if (q->ohw_joint > 0) {
        n = pix / q->ohw_joint;
        pix -= n * q->ohw_joint;
    }
    return n * q->is + gi * (d->c / G) + (pix / d->ow) * d->sh * q->rs + (pix % d->ow) * d->sw * d->c;
}

/* one task = one padded row (n, r) of Xq */
static void op_convq_fill_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_convq_fill_ctx *f = (const op_convq_fill_ctx *)ctx;
    const op_conv_desc *d = f->d;
    const int64_t C = d->c, n = task / f->hq, ih = task % f->hq - d->pt, rowlen = f->wq * C;
    const size_t esz = f->widen ? 4 : f->x_bf16 ? 2 : 4;
    char *o = (char *)f->xq + (size_t)(task * rowlen) * esz;
    if (ih < 0 || ih >= d->h) {
        memset(o, 0, (size_t)rowlen * esz);
        return;
    }
    const int64_t s0 = op_min64(d->pl, f->wq), s1 = op_min64(d->pl + d->w, f->wq);
    const int64_t src = ((n * d->h + ih) * d->w) * C, len = (s1 - s0) * C;
    memset(o, 0, (size_t)(s0 * C) * esz);
    if (f->widen) {
        float *of = (float *)(void *)o + s0 * C;
        for (int64_t i = 0; i < len; i++) of[i] = op_conv_ld(f->x, src + i, 1);
    } else {
        memcpy(o + (size_t)(s0 * C) * esz, (const char *)f->x + (size_t)src * esz, (size_t)len * esz);
    }
    memset(o + (size_t)(s1 * C) * esz, 0, (size_t)((f->wq - s1) * C) * esz);
}

/* The runs of the depth order: joint kernel rows (C/g <= bk, dw == 1, groups == 1: run r = kernel row
   r, KW*C/g elements) or one run per (channel block cb, tap t) of the block's channels. */
OP_INLINE int op_convq_joint(const op_conv_desc *d, int bk)
{
    return d->c / d->groups <= bk && d->dw == 1 && d->groups == 1;
}

static int64_t op_convq_nruns(const op_conv_desc *d, int bk)
{
    const int64_t cg = d->c / d->groups;
    return op_convq_joint(d, bk) ? d->kh : op_cdiv64(cg, bk) * d->kh * d->kw;
}

/* Cuts the runs of K into the segments of each bk-depth block; returns the block count. */
static int64_t op_convq_plan(const op_conv_desc *d, int64_t rs, int bk, int64_t *bseg, op_convq_seg *seg)
{
    const int64_t cg = d->c / d->groups, khw = d->kh * d->kw;
    const int joint = op_convq_joint(d, bk);
    const int64_t nruns = op_convq_nruns(d, bk), nblk = op_cdiv64(cg * khw, bk);
    int64_t ns = 0, r = 0, c = 0, L = 0, base = 0;
    for (int64_t kb = 0; kb < nblk; kb++) {
        bseg[kb] = ns;
        for (int t = 0; t < bk && r < nruns;) {
            if (c == 0) {   /* run r: length L from base */
                if (joint) {
                    L = d->kw * cg;
                    base = r * d->dh * rs;
                } else {
                    const int64_t cb = r / khw, tap = r % khw;
                    L = op_min64(bk, cg - cb * bk);
                    base = (tap / d->kw) * d->dh * rs + (tap % d->kw) * d->dw * d->c + cb * bk;
                }
            }
            const int len = (int)op_min64(L - c, bk - t);
            seg[ns].t0 = t;
            seg[ns].len = len;
            seg[ns].mask = (uint32_t)((((uint64_t)1 << len) - 1) << t);
            seg[ns].off = base + c;
            ns++;
            t += len;
            c += len;
            if (c == L) {
                c = 0;
                r++;
            }
        }
    }
    bseg[nblk] = ns;
    return nblk;
}

/* KC of an NHWC GEMM: whole channel blocks (bk channels x all taps), as the weight packs need. */
static int64_t op_convq_kc(const op_conv_desc *d, int bk, int64_t kc)
{
    const int64_t cg = d->c / d->groups;
    return op_roundup64(op_max64(kc, 1), op_min64(bk, cg) * d->kh * d->kw);
}

/* The padded input (x_bf16: bfloat16 bits; widen: copied as float32) and the block plan. Returns 0,
   or -1 on allocation failure; op_convq_free releases *b either way. */
static int op_convq_prepare(const op_conv_desc *d, const void *x, int x_bf16, int widen, int bk, int mr,
                            int nthreads, op_convq_geo *q, op_convq_buf *b)
{
    const int64_t C = d->c, khw = d->kh * d->kw, K = khw * (C / d->groups), nblk = op_cdiv64(K, bk);
    const int64_t hq = (d->oh - 1) * d->sh + (d->kh - 1) * d->dh + 1;
    const int64_t wq = (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1;
    const int copy = widen || d->pt > 0 || d->pl > 0 || hq > d->h || wq > d->w;
    const size_t esz = widen ? 4 : x_bf16 ? 2 : 4;
    b->xq = copy ? op_conv_scratch_alloc(esz * (size_t)(d->n * hq * wq * C)) : NULL;
    b->bseg = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nblk + 1));
    b->seg = (op_convq_seg *)malloc(sizeof(op_convq_seg) * (size_t)(nblk + op_convq_nruns(d, bk)));
    if ((copy && !b->xq) || !b->bseg || !b->seg) return -1;
    q->d = d;
    q->g0 = -1;
    q->ohw_joint = op_conv_joint(d) ? d->oh * d->ow : 0;
    if (copy) {
        op_convq_fill_ctx fc = {d, x, x_bf16, widen, b->xq, hq, wq};
        op_parallel_for(d->n * hq * wq * C >= (1 << 16) ? nthreads : 1, d->n * hq, op_convq_fill_task, &fc);
        q->xq = b->xq;
        q->rs = wq * C;
        q->is = hq * wq * C;
    } else {
        q->xq = x;
        q->rs = d->w * C;
        q->is = d->h * d->w * C;
    }
    q->mr = mr;
    q->bk = bk;
    q->nblk = op_convq_plan(d, q->rs, bk, b->bseg, b->seg);
    q->bseg = b->bseg;
    q->seg = b->seg;
    return 0;
}

static void op_convq_free(op_convq_buf *b)
{
    op_conv_scratch_free(b->xq);
    free(b->bseg);
    free(b->seg);
}

#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
/* All bits set in lane l (0..7) where base + l lies in [t0, t0 + len): a VMASKMOVPS mask */
OP_INLINE __m256i op_lanes8(int base, int t0, int len)
{
    const __m256i l = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                       _mm256_set1_epi32(base));
    return _mm256_and_si256(_mm256_cmpgt_epi32(l, _mm256_set1_epi32(t0 - 1)),
                            _mm256_cmpgt_epi32(_mm256_set1_epi32(t0 + len), l));
}
#endif

/* A of the float32 NHWC GEMM: MR-row micro-panels, a[p*MR + i] = A[i0 + ir + i][p0 + p] (p0 is a
   multiple of 16: op_conv2d_f32 rounds kc). Per 16-depth block, the MR pixels' rows are gathered by
   their segments and transposed (AVX-512, MR <= 16), or copied element by element. */

static void op_conv_pack_a_nhwc_qf32(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc,
                                     int64_t p0, int64_t kc, int64_t kcp, void *dst)
{
    enum { MR = OP_F32_MR };
    const op_convq_geo *q = (const op_convq_geo *)g->user;
    const float *X = (const float *)q->xq;
    float *D = (float *)dst;
    for (int64_t ir = 0; ir < mc; ir += MR, D += MR * kcp) {
        const int mr = (int)op_min64(MR, mc - ir);
        const float *px[16];   /* MR <= 16 at every level */
        for (int i = 0; i < 16; i++) px[i] = X + (i < mr ? op_convq_pixel(q, bi, i0 + ir + i) : 0);
        for (int64_t pc = 0; pc < kc; pc += 16) {
            const int64_t b = (p0 + pc) / 16;
            const int nt = (int)op_min64(16, kc - pc);
            const op_convq_seg *s0 = q->seg + q->bseg[b], *e = q->seg + q->bseg[b + 1];
#if defined(OP_HAS_AVX512)
            __m512i r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                __m512 v = _mm512_setzero_ps();
                if (i < mr)
                    for (const op_convq_seg *s = s0; s < e; s++)
                        v = _mm512_mask_loadu_ps(v, (__mmask16)s->mask, px[i] + s->off - s->t0);
                r[i] = _mm512_castps_si512(v);
            }
            op_tr16_store_f32(r, D + pc * MR, MR, nt, (__mmask16)((1u << MR) - 1u));
#elif defined(OP_HAS_AVX2)
            /* MR 6: the 16 depths of each row in two vectors (one full segment: two loads, else
               masked loads per segment), then 8 x 8 transposes (rows 6 and 7 zero) and 6 floats
               per depth (a 4-float and a 2-float store), instead of a memcpy call per segment and
               96 scalar stores. op_conv_pack_a_nhwc_qf32 was 29% of ResNet-50's res2 3x3 layer in
               NHWC at batch 1 (perf, AMD EPYC Zen 3 VM, avx2, 1 thread, 2026-12-06). */
            __m256 r0[8], r1[8];
            const int one = e - s0 == 1 && s0->t0 == 0 && s0->len == 16;
            for (int i = 0; i < 8; i++) {
                r0[i] = r1[i] = _mm256_setzero_ps();
                if (i >= mr) continue;
                if (one) {
                    r0[i] = _mm256_loadu_ps(px[i] + s0->off);
                    r1[i] = _mm256_loadu_ps(px[i] + s0->off + 8);
                    continue;
                }
                for (const op_convq_seg *s = s0; s < e; s++) {   /* lanes [t0, t0 + len) */
                    const __m256i k0 = op_lanes8(0, s->t0, s->len);
                    const __m256i k1 = op_lanes8(8, s->t0, s->len);
                    const float *src = px[i] + s->off - s->t0;
                    r0[i] = _mm256_or_ps(r0[i], _mm256_maskload_ps(src, k0));
                    r1[i] = _mm256_or_ps(r1[i], _mm256_maskload_ps(src + 8, k1));
                }
            }
            op_tr8x6_store_f32(r0, D + pc * MR, (int)op_min64(8, nt));
            if (nt > 8) op_tr8x6_store_f32(r1, D + (pc + 8) * MR, nt - 8);
#else
            for (int i = 0; i < MR; i++) {
                float row[16] = {0};
                if (i < mr)
                    for (const op_convq_seg *s = s0; s < e; s++)
                        memcpy(row + s->t0, px[i] + s->off, sizeof(float) * (size_t)s->len);
                for (int t = 0; t < nt; t++) D[(pc + t) * MR + i] = row[t];
            }
#endif
        }
        for (int64_t p = kc; p < kcp; p++)
            for (int i = 0; i < MR; i++) D[p * MR + i] = 0.0f;
    }
}

/* B of the float32 NHWC GEMM from the weight (OC, C/g, KH, KW) in place (g->b at the entry's group,
   row length csb = K): depths p0 .. p0+kc (whole channel blocks) of NR-column micro-panels,
   d[p*NR + j]. A channel block of one column is the contiguous piece W[oc][c0 .. c0+cbl][all taps];
   its element k = ci*khw + t goes to depth t*cbl + ci of the block.
   op_conv_pack_b_nhwc_f32_nf also returns whether any weight it read is non-finite (Inf or NaN),
   tested on the loaded vectors (the batch-reduce kernel's padding-tap skip, OP_CONV_BRG_SKIP_PAD). */
static int op_conv_pack_b_nhwc_f32_nf(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                      int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    enum { NR = OP_F32_NR };
    int nonfinite = 0;
    const op_convq_geo *q = (const op_convq_geo *)g->user;
    const int64_t cg = q->d->c / q->d->groups, khw = q->d->kh * q->d->kw, K = g->csb, bk = q->bk;
    const float *W = (const float *)g->b + (g->b_off ? g->b_off[bi] : 0);
    float *d = (float *)dst;
    for (int64_t jr = 0; jr < nc; jr += NR, d += NR * kcp) {
        const int nr = (int)op_min64(NR, nc - jr);
        const float *wp = W + (j0 + jr) * K;
        for (int64_t gp = p0; gp < p0 + kc;) {
            const int64_t c0 = gp / (bk * khw) * bk, cbl = op_min64(bk, cg - c0), glen = cbl * khw;
            const float *src = wp + c0 * khw;
            float *dg = d + (gp - p0) * NR;
#if defined(OP_HAS_AVX512)
            for (int h = 0; h < NR / 16; h++) {
                int64_t ci = 0, t = 0;   /* element k = ci * khw + t of the block */
                for (int64_t k0 = 0; k0 < glen; k0 += 16) {
                    const int nt = (int)op_min64(16, glen - k0);
                    const __mmask16 km = (__mmask16)((1u << nt) - 1u);
                    __m512i r[16];
                    __mmask16 bad = 0;   /* classes 0x01 QNaN, 0x08 +Inf, 0x10 -Inf, 0x80 SNaN */
#pragma GCC unroll 16
                    for (int jj = 0; jj < 16; jj++) {
                        const int j = 16 * h + jj;
                        r[jj] = j < nr ? _mm512_castps_si512(_mm512_maskz_loadu_ps(km, src + j * K + k0))
                                       : _mm512_setzero_si512();
                        bad |= _mm512_fpclass_ps_mask(_mm512_castsi512_ps(r[jj]), 0x99);
                    }
                    nonfinite |= bad != 0;
                    op_transpose16_epi32(r);
                    for (int kk = 0; kk < nt; kk++) {
                        _mm512_storeu_si512((void *)(dg + (t * cbl + ci) * NR + 16 * h), r[kk]);
                        if (++t == khw) {
                            t = 0;
                            ci++;
                        }
                    }
                }
            }
#elif defined(OP_HAS_AVX2)
            /* NR 16 as two halves of 8 columns, 8 x 8 transposes of 8 depths (masked loads for
               the last < 8), the non-finite test on the loaded vectors (exponent all ones). The
               element loop below was 64% of ResNet-50's res5 3x3 layer in NHWC at batch 1 (perf,
               AMD EPYC Zen 3 VM, avx2, 1 thread, 2026-12-06: a 9 MiB weight packed per call). */
            const __m256i expo = _mm256_set1_epi32(0x7f800000);
            __m256i badv = _mm256_setzero_si256();
            for (int h = 0; h < NR / 8; h++) {
                int64_t ci = 0, t = 0;   /* element k = ci * khw + t of the block */
                for (int64_t k0 = 0; k0 < glen; k0 += 8) {
                    const int nt = (int)op_min64(8, glen - k0);
                    const __m256i km = op_lanes8(0, 0, nt);
                    __m256 r[8];
#pragma GCC unroll 8
                    for (int jj = 0; jj < 8; jj++) {
                        const int j = 8 * h + jj;
                        r[jj] = j >= nr ? _mm256_setzero_ps()
                                : nt == 8 ? _mm256_loadu_ps(src + j * K + k0)
                                          : _mm256_maskload_ps(src + j * K + k0, km);
                        const __m256i bits = _mm256_castps_si256(r[jj]);
                        const __m256i ex = _mm256_and_si256(bits, expo);
                        badv = _mm256_or_si256(badv, _mm256_cmpeq_epi32(ex, expo));
                    }
                    op_transpose8_ps(r);
                    for (int kk = 0; kk < nt; kk++) {
                        _mm256_storeu_ps(dg + (t * cbl + ci) * NR + 8 * h, r[kk]);
                        if (++t == khw) {
                            t = 0;
                            ci++;
                        }
                    }
                }
            }
            nonfinite |= !_mm256_testz_si256(badv, badv);
#else
            for (int j = 0; j < NR; j++)
                for (int64_t k = 0; k < glen; k++) {
                    const float v = j < nr ? src[j * K + k] : 0.0f;
                    nonfinite |= !isfinite(v);
                    dg[((k % khw) * cbl + k / khw) * NR + j] = v;
                }
#endif
            gp += glen;
        }
        for (int64_t p = kc; p < kcp; p++)
            for (int j = 0; j < NR; j++) d[p * NR + j] = 0.0f;
    }
    return nonfinite;
}

static void op_conv_pack_b_nhwc_f32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                    int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    (void)op_conv_pack_b_nhwc_f32_nf(g, bi, p0, kc, kcp, j0, nc, dst);
}

/* ---------------------------------------------------------------- NHWC k x k, A read in place

   A float32 NHWC convolution (groups 1) whose output rows are whole 14-pixel micro-panels (OW a
   multiple of 14) and whose 16-depth blocks are each one contiguous piece of a pixel's padded input
   (C/g a multiple of 16, or the joint kernel-row runs of C = 16) runs as a batch-reduce GEMM without
   packing A: the pixels of a micro-panel are sw*C floats apart in the padded copy (the same tap of
   consecutive output pixels), so block b of pixel i is the 16 floats at
   panel + seg[b].off + i*sw*C, and the micro-kernel (op_conv_ukr_brg_f32; its second half of 7
   rows from its own base, hoff) broadcasts them in place as op_conv_ukr_a_f32 does, switching its
   base per block. The weight is packed once per call for all K into NR-column panels
   (op_conv_pack_b_nhwc_f32, shared by the threads); threads take blocks of pixels (MC) or, when
   those are too few, also parts of N; the loops of a block are KC -> N panel -> pixel panel, so its
   C block stays in L2 between KC blocks. Packing the gathered A cost about 30% of the
   micro-kernel's time at N = OC of 64-128 (perf, ResNet-50 res2 3x3 at batch 8, Zen 4, 1 thread:
   78 -> 105 GFLOP/s). Rows 4 KiB apart are left to the packing path; OW a multiple of 7 only with
   OP_CONV_BRG_OW7 (below).
   With OP_CONV_BRG_SKIP_PAD (below), padding taps are skipped, not multiplied by the zeros of the copy (oneDNN's brgemm convolution
   leaves them out the same way: the facts, not its code): per pixel panel and tap, the panel's rows
   whose input pixel lies in the padding (op_convbrg_skip_task); a tap padding for every row is
   dropped (the top / bottom output rows), else the micro-kernel runs a variant without those rows'
   FMAs (the left / right border pixels, op_brg_masks). At 14 x 14 that is 9% of the FMAs, at 7 x 7
   18%. When every padding row is skipped exactly, the input is read in place (no padded copy).
   Skipping is exact only for a finite weight (adding a +-0 product never changes an accumulator
   that starts at +0; 0 * Inf is NaN): each N panel's pack reports whether its weights hold an Inf
   or NaN (op_conv_pack_b_nhwc_f32_nf, on the vectors it loads anyway), and such a panel runs
   without the skip over the padded copy (when the input is read in place: a second pass over a
   copy made then, op_convbrg_redo), so its border outputs are NaN as at every other level. */
/* Per-microarchitecture options of the float32 convolutions (op_conv_f32_options, api_conv.h; set by
   the loader from the registry's CONV_F32_OPTIONS for the host). OP_CONV_BRG_FULL_K: the batch-reduce
   NHWC k x k kernel runs all of K in one block (each C tile written once, never re-read) while a
   B panel of K x NR floats stays within OP_CONV_BRG_FULL_K_MAX depths (576 KiB, in L2 beside the
   pixel rows), instead of blocks of the blocking's KC. Default 0: off. (4096 -> 4608, ResNet-50
   res5 3x3, Zen 4, 2 threads, paired: res5a_branch2b batch 1 NCHW 164 -> 176 GFLOP/s, NHWC
   177 -> 185, res5_branch2b NCHW 209 -> 215, batch 8 NHWC 231 -> 256.) */
#define OP_CONV_BRG_FULL_K 1
#define OP_CONV_BRG_FULL_K_MAX 4608
/* OP_CONV_BRG_NSPLIT: when the weight is larger than the padded input (and has 32-column panels for
   2 tasks a thread), the batch-reduce kernel's threads split the output channels (each task one
   panel over all pixels: the weight read once) instead of the pixels (the weight read once per
   pixel block). */
#define OP_CONV_BRG_NSPLIT 2
/* OP_CONV_BRG_OW7: outputs whose rows are whole 7-pixel halves of a micro-panel (OW a multiple of 7,
   e.g. 7 x 7 planes) also run the batch-reduce kernel: a panel's two halves are two row pieces
   (hoff), and a ragged last panel of 7 pixels skips its second half. */
#define OP_CONV_BRG_OW7 4
/* OP_CONV_BRG_NSPLIT_PACK: in the output-channel split, each task packs its own weight panel into a
   per-thread buffer (K x NR floats, in L2) just before using it, instead of all panels being packed
   into one shared buffer first (written out and read back from L3 / memory for a large weight). */
#define OP_CONV_BRG_NSPLIT_PACK 8
/* OP_CONV_BRG_SKIP_PAD: skip the taps that read padding, in the N panels whose weights are all
   finite (a panel with an Inf or NaN weight multiplies the zeros: 0 * Inf = NaN at the borders, as
   at every other level). OP_CONV_BRG_COPY (tests / measurements only; no registry row sets it):
   read a padded copy of the input even where the padding taps are all skipped. */
#define OP_CONV_BRG_SKIP_PAD 16
#define OP_CONV_BRG_COPY 32
/* OP_CONV_BRG_WIDE_ROWS: pixels sw*C floats apart with sw*C a multiple of 1024 (rows 4 KiB apart:
   the 14 pixels of a panel would share one L1d set, e.g. res5a_branch2b, C 512 at stride 2) run the
   kernel over a padded copy whose pixels are C + 16 floats apart. */
#define OP_CONV_BRG_WIDE_ROWS 64
/* OP_CONV_NCHW1X1_DIRECT_B: an NCHW 1x1 stride-1 unpadded float32 convolution (out = W @ X per image)
   with few output channels (OC/groups <= OP_CONV_NCHW1X1_DIRECT_MAXM) and a depth C/groups <=
   OP_CONV_NCHW1X1_DIRECT_MAXK reads its B (X, rows H*W floats apart) in place in the micro-kernel
   instead of packing it: with M = 64 rows the B pack (a read and a write of the whole input) costs
   about as much as the FMAs, and a 32-column B micro-panel (C x 32 floats, 8 KiB at C = 64) is read
   from memory once and from L1 by the other micro-kernel calls of its rows. Same kc, same sums.
   (Zen 4, 2 threads: with M = 128 or 256 the pack paid off, in-place was 4-8% slower.) */
#define OP_CONV_NCHW1X1_DIRECT_B 256
#define OP_CONV_NCHW1X1_DIRECT_MAXK 256
#define OP_CONV_NCHW1X1_DIRECT_MAXM 64
/* OP_CONV_NCHW1X1_JOINT: an NCHW 1x1 unpadded float32 convolution, groups 1, batch >= 2, output
   planes of at most OP_CONV_NCHW1X1_JOINT_MAXP pixels (stride 1 or a stride whose samples lie
   inside the input; at batch >= 2 also the problems OP_CONV_NCHW1X1_DIRECT_B reads in place)
   runs as one GEMM over the pixels of all images, out[oc][(n, pixel)] =
   W[oc][c] * X[c][(n, pixel)] (op_conv2d_nchw1x1_joint_f32, below): the B pack gathers each column's
   (strided) pixel straight from the input, the weight is packed once per thread instead of once
   per image, the 32-column B panels are full across image boundaries (196 pixels fill 6.1 panels
   per image, 8 x 196 exactly 49), and C is written in place in NCHW (a tile spanning two images
   through the driver's tile or edge buffer). It replaces both the per-image NCHW GEMM and, for
   the planes the registry routes there (CONV_NCHW_AS_NHWC), the NHWC formulation's subsample
   copy, input and output transposes. Same kc, so every output is the same sum in the same order. */
#define OP_CONV_NCHW1X1_JOINT 512
#define OP_CONV_NCHW1X1_JOINT_MAXP 3136
/* OP_CONV_NCHW1X1_A_INPLACE: an NCHW 1x1 float32 convolution computed as out = W @ X (the per-image
   GEMM: M = OC/g, N = OH*OW, K = C/g) reads its A, the weight (OC rows of C/g floats, row-major as
   given), in place in the micro-kernel (op_conv_ukr_a_f32: broadcasts only) instead of packing it:
   at small planes (7 x 7, 14 x 14 at batch 1) each weight element feeds only OH*OW products, and
   the per-call pack of the whole weight (up to 8 MiB) cost about as much as the ragged pixel edge
   saves. C a multiple of 1024 (weight rows 4 KiB apart: the 14 rows of a panel would share one L1d
   set) copies the weight rows per block instead (op_conv_pack_a_rows_f32: no transposes), read by the
   same micro-kernel. Same kc, same sums (the packed and in-place micro-kernels add in the same
   order). A strided problem (samples inside the input) copies its sampled pixels (op_conv_sub_task)
   and runs as the stride-1 problem on them. */
#define OP_CONV_NCHW1X1_A_INPLACE 1024
#define OP_CONV_NCHW1X1_N49 2048   /* 49 output pixels: own kernel (op_conv2d_nchw1x1_n49_f32, below) */
#define OP_CONV_NCHW1X1_N49_STRIDED 4096   /* with 2048: strided, planes of 98, 147, 196 pixels too */
/* OP_CONV_AS_NHWC_IMAGE (bit 16384, "as_nhwc_image"): an NCHW k x k convolution routed through the
   NHWC formulation (desc.nhwc == 2) with a batch of at least the threads (and 2), at least
   OP_CONV_IMG_MIN_PIXELS output pixels per image, and a one-image working set (its NHWC copy, NHWC
   output and the weight, float32) of at most OP_CONV_IMG_L2 bytes, runs image by image: each
   thread transposes an image in, runs the NHWC k x k kernel (op_conv2d_nhwc_brg_f32) on it alone
   and transposes its output back, so the image's NHWC copy and output stay in that core's L2
   between the steps instead of two batch-sized tensors passing through memory (the float32 form of
   conv_bf16.c's OP_CONV_BF16_AS_NHWC_IMAGE). Every output sums all of K in the same order: the
   same bits as the whole-batch route. */
#define OP_CONV_AS_NHWC_IMAGE 16384
#define OP_CONV_IMG_L2 (2048 * 1024)
/* Output pixels per image at least: the NHWC kernel packs the weight (and its padding-skip table)
   once per call, here once per image; on small planes that costs more than the L2 saves (the
   Intel AMX VM, 2026-12-04, batch 8, 3x3 on 7 x 7 outputs, C 96-256: 0.77-0.85x the whole-batch
   route). */
#define OP_CONV_IMG_MIN_PIXELS 784
#define OP_N49_MAXP 196
#define OP_CONV_NHWC_DIRECT8 32768   /* below AVX-512: NHWC k x k direct (op_conv2d_nhwc_d8_f32) */
/* OP_CONV_NCHW1X1_JOINT_SMALL (with OP_CONV_NCHW1X1_JOINT, "nchw1x1_joint_small"): the joint GEMM
   only for strided problems and output planes of at most OP_CONV_J1_SMALL_P pixels. On zen3 (AMD
   EPYC Zen 3 VM, avx2, 1 thread, batch 8, paired with torch 2.13, 2026-12-06, x torch per-image
   GEMM -> joint): res5a_branch1 0.74 -> 1.07, res5_branch2c 0.88 -> 1.26, res5_branch2a 0.89 ->
   1.24, res4a_branch1 0.89 -> 1.11, res3a_branch1 0.79 -> 1.14, res4_branch2c (14 x 14) 1.01 ->
   1.03, but 56 x 56 and 28 x 28 stride 1 lost: res2a_branch2a 1.11 -> 0.71, res3_branch2a 0.98
   -> 0.74, res4a_branch2a 1.01 -> 0.88, res3_branch2c 1.26 -> 1.19. */
#define OP_CONV_NCHW1X1_JOINT_SMALL 65536
#define OP_CONV_J1_SMALL_P 196

int op_conv_f32_options(int flags)
{
    const int old = op_conv_f32_opts;
    if (flags >= 0)
        op_conv_f32_opts = flags & (OP_CONV_BRG_FULL_K | OP_CONV_BRG_NSPLIT | OP_CONV_BRG_OW7 |
                                    OP_CONV_BRG_NSPLIT_PACK | OP_CONV_BRG_SKIP_PAD | OP_CONV_BRG_COPY |
                                    OP_CONV_BRG_WIDE_ROWS);
    if (flags >= 0)
        op_conv_f32_opts |= flags & (OP_CONV_NCHW1X1_DIRECT_B | OP_CONV_NCHW1X1_JOINT | OP_CONV_NCHW1X1_A_INPLACE);
    if (flags >= 0)
        op_conv_f32_opts |= flags & (OP_CONV_NCHW1X1_N49 | OP_CONV_NCHW1X1_N49_STRIDED |
                                     OP_CONV_A_FAR_PF | OP_CONV_AS_NHWC_IMAGE |
                                     OP_CONV_NHWC_DIRECT8 | OP_CONV_NCHW1X1_JOINT_SMALL);
    return old;
}

#if defined(OP_HAS_AVX512)
/* The rows (pixels) of a panel a block may skip: those whose tap reads only padding (the product is
   zero), as oneDNN's brgemm convolution leaves out the padding taps of border pixels. The kernel is
   instantiated for these masks only (bit i: row i; 0x3F80 is the missing second half of a ragged
   7-pixel panel): the left / right border pixel of a panel within one output row (rows 0 / 13) or
   of each half (0 and 7 / 6 and 13), a half whose output row reads a padding row (0x7F / 0x3F80)
   with a border pixel of the other half. A panel's actual set of padding rows is rounded down to
   the largest of them it contains: skipping fewer rows only multiplies more zeros. */
static const int op_brg_masks[] = {0x0001, 0x2000, 0x2001, 0x0081, 0x2040, 0x007F, 0x00FF, 0x207F,
                                   0x3F80, 0x3F81, 0x3FC0};
#define OP_BRG_FULL 0x3FFF

static int op_brg_fit(int m)
{
    int best = 0, bc = 0;
    for (size_t i = 0; i < sizeof op_brg_masks / sizeof op_brg_masks[0]; i++) {
        const int s = op_brg_masks[i], n = __builtin_popcount((unsigned)s);
        if ((s & ~m) == 0 && n > bc) {
            best = s;
            bc = n;
        }
    }
    return best;
}

/* nb 16-depth blocks kb0 .. kb0+nb of a 14-pixel panel (rows >= 7: the second half of 7 pixels at
   a + hoff; rows 7: the first half only): block kb reads a + off[kb] (+ hoff) at lda floats per
   pixel and the packed weight at b + (kb - kb0)*16*NR; tsk[t] (tap t = kb % khw) is the mask of the
   rows the tap skips, < 0: the whole block. */
static void op_conv_ukr_brg_f32(int64_t kb0, int64_t nb, int64_t khw, const int16_t *tsk, const float *a,
                                int64_t hoff, const int64_t *off, int64_t lda, const float *OP_RESTRICT b,
                                float *c, int64_t rsc, int rows, int nr, int acc, const op_epilogue *epi)
{
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    for (int i = 0; i < rows; i++) {
        _mm_prefetch((const char *)(c + i * rsc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * rsc + 31), _MM_HINT_T0);
    }
    const int64_t l2 = 2 * lda;
#define OP_RA(i, src, SKIP)                                              \
    if (!(((SKIP) >> (i)) & 1)) {                                        \
        __m512 ai = _mm512_set1_ps(src);                                 \
        c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);                    \
        c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);                    \
    }
#define OP_BRG_LOOP(SKIP)                                                                       \
    for (int p = 0; p < 16; p++) {                                                              \
        __m512 b0 = _mm512_loadu_ps(bb), b1 = _mm512_loadu_ps(bb + 16);                         \
        if (p < 7) _mm_prefetch((const char *)(pf + p * lda), _MM_HINT_T0);                     \
        else if (p < 14) _mm_prefetch((const char *)(pf + hoff + (p - 7) * lda), _MM_HINT_T0);  \
        OP_RA(0, p0[p], SKIP) OP_RA(1, p0[lda + p], SKIP) OP_RA(2, p0[l2 + p], SKIP)            \
        OP_RA(3, p3[p], SKIP) OP_RA(4, p3[lda + p], SKIP) OP_RA(5, p3[l2 + p], SKIP)            \
        OP_RA(6, p6[p], SKIP) OP_RA(7, p7[p], SKIP) OP_RA(8, p7[lda + p], SKIP)                 \
        OP_RA(9, p7[l2 + p], SKIP) OP_RA(10, p10[p], SKIP) OP_RA(11, p10[lda + p], SKIP)        \
        OP_RA(12, p10[l2 + p], SKIP) OP_RA(13, p13[p], SKIP)                                    \
        bb += OP_F32_NR;                                                                        \
    }                                                                                           \
    break;
    const int64_t half = rows < OP_F32_MR ? 0x3F80 : 0;
    int64_t t = kb0 % khw;
    for (int64_t kb = kb0; kb < kb0 + nb; kb++, t = t + 1 == khw ? 0 : t + 1) {
        const int sk = tsk ? tsk[t] : (int)half;
        if (sk < 0) continue;
        const float *p0 = a + off[kb], *p3 = p0 + 3 * lda, *p6 = p0 + 6 * lda, *p7 = p0 + hoff,
                    *p10 = p7 + 3 * lda, *p13 = p7 + 6 * lda;
        const float *bb = b + (kb - kb0) * 16 * OP_F32_NR;
        /* the block after next: one line per pixel */
        const float *pf = a + off[kb + 2 < kb0 + nb ? kb + 2 : kb];
        switch (sk) {
        case 0x0000: OP_BRG_LOOP(0x0000)
        case 0x0001: OP_BRG_LOOP(0x0001)
        case 0x2000: OP_BRG_LOOP(0x2000)
        case 0x2001: OP_BRG_LOOP(0x2001)
        case 0x0081: OP_BRG_LOOP(0x0081)
        case 0x2040: OP_BRG_LOOP(0x2040)
        case 0x007F: OP_BRG_LOOP(0x007F)
        case 0x00FF: OP_BRG_LOOP(0x00FF)
        case 0x207F: OP_BRG_LOOP(0x207F)
        case 0x3F80: OP_BRG_LOOP(0x3F80)
        case 0x3F81: OP_BRG_LOOP(0x3F81)
        default:     OP_BRG_LOOP(0x3FC0)
        }
    }
#undef OP_BRG_LOOP
#undef OP_RA
    op_epi512 e;
    op_epi512_init(&e, nr, epi);
#define OP_W(i) op_epi512_row(&e, c + i * rsc, i, c##i##_0, c##i##_1, nr, acc);
    OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5) OP_W(6)
    if (rows == OP_F32_MR) {
        OP_W(7) OP_W(8) OP_W(9) OP_W(10) OP_W(11) OP_W(12) OP_W(13)
    }
#undef OP_W
}

typedef struct {
    const op_conv_desc *d;
    const op_convq_geo *q;
    const op_gemm_args *g;    /* the weight, for the per-task packs (OP_CONV_BRG_NSPLIT_PACK) */
    float *bp;                /* packed weight: panel s (NR columns) at bp + s * NR * K; per-task
                                 packs: thread tid's panel at bp + tid * NR * K */
    int tpack;
    const float *bias;
    int act;
    float *y;
    int64_t K, nblk, kcb;     /* depth, its 16-blocks, 16-blocks per KC block */
    const int64_t *off;       /* per 16-block: offset from the pixel's first tap */
    const int16_t *skip;      /* per pixel panel, per tap: rows skipped (op_brg_masks), -1: all
                                 (NULL: none) */
    unsigned char *nf;        /* with skip: per N panel, 1 when its weights hold an Inf or NaN (set
                                 by its pack); such a panel runs without the skip */
    int inplace;              /* input read in place: a non-finite panel is left to the redo pass */
    int redo;                 /* the redo pass: only the non-finite panels, over a padded copy */
    int64_t shift;            /* pixel offsets - shift: the input read in place despite padding */
    int64_t ps;               /* floats from one pixel of the input (copy) to the next: C, or C + 16 */
    int64_t khw, npix;
    int64_t npan, npn;        /* pixel panels (of 14; the last may hold 7), NR panels */
    int64_t mpb, tm, tn;      /* pixel panels per task block; task grid tm x tn */
} op_convbrg_ctx;

/* Offset of output pixel pix's first tap in the (padded) input, as op_convq_pixel (groups 1). */
OP_INLINE int64_t op_convbrg_pixel(const op_convbrg_ctx *x, int64_t pix)
{
    const op_conv_desc *d = x->d;
    const op_convq_geo *q = x->q;
    int64_t n = 0;
    if (q->ohw_joint > 0) {
        n = pix / q->ohw_joint;
        pix -= n * q->ohw_joint;
    }
    return n * q->is + (pix / d->ow) * d->sh * q->rs + (pix % d->ow) * d->sw * x->ps - x->shift;
}

static void op_convbrg_task(void *ctx, int64_t task, int tid)
{
    enum { MR = OP_F32_MR, NR = OP_F32_NR };
    const op_convbrg_ctx *x = (const op_convbrg_ctx *)ctx;
    const op_conv_desc *d = x->d;
    const int64_t tmi = task / x->tn, tni = task % x->tn;
    const int64_t pa0 = x->npan * tmi / x->tm, pa1 = x->npan * (tmi + 1) / x->tm;
    const int64_t s0 = x->npn * tni / x->tn, s1 = x->npn * (tni + 1) / x->tn;
    const float *X = (const float *)x->q->xq;
    const int64_t lda = d->sw * x->ps, OC = d->oc;
    op_epilogue epi;
    epi.bias = x->bias;
    epi.bias_stride = 1;
    epi.bias_axis = 1;
    epi.act = x->act;
    const int has_epi = x->bias || x->act != OP_ACT_NONE;
    float *bt = x->bp + (int64_t)tid * NR * x->K;
    if (x->redo && x->tpack && !x->nf[s0]) return;
    if (x->tpack) {   /* one N panel per task (s1 = s0 + 1): packed here, by this thread */
        const int nf = op_conv_pack_b_nhwc_f32_nf(x->g, 0, 0, x->K, x->K, s0 * NR, op_min64(NR, OC - s0 * NR), bt);
        if (x->nf && !x->redo) x->nf[s0] = (unsigned char)nf;
    }
    for (int64_t kb0 = 0; kb0 < x->nblk; kb0 += x->kcb) {
        const int64_t nb = op_min64(x->kcb, x->nblk - kb0);
        const int last = kb0 + nb >= x->nblk;
        for (int64_t s = s0; s < s1; s++) {
            const int nr = (int)op_min64(NR, OC - s * NR);
            /* a panel with a non-finite weight multiplies the padding's zeros (0 * Inf = NaN, as
               every other level): without the skip over the padded copy, here or in the redo pass */
            const int16_t *skip = x->skip;
            if (x->nf && x->nf[s]) {
                if (x->inplace) continue;
                skip = NULL;
            } else if (x->redo) {
                continue;
            }
            const float *bpan = (x->tpack ? bt : x->bp + s * NR * x->K) + kb0 * 16 * NR;
            op_epilogue te = epi;
            if (te.bias) te.bias += s * NR;
            const op_epilogue *tep = (last && has_epi) ? &te : NULL;
            for (int64_t pa = pa0; pa < pa1; pa++) {
                const int64_t pix = pa * MR, o0 = op_convbrg_pixel(x, pix);
                const int rows = (int)op_min64(MR, x->npix - pix);
                const int64_t hoff = rows == MR ? op_convbrg_pixel(x, pix + 7) - o0 : 0;
                op_conv_ukr_brg_f32(kb0, nb, x->khw, skip ? skip + pa * x->khw : NULL, X + o0, hoff,
                                    x->off, lda, bpan, x->y + pix * OC + s * NR, OC, rows, nr, kb0 > 0, tep);
            }
        }
    }
}

typedef struct {
    const op_gemm_args *g;
    float *bp;
    int64_t K;
    unsigned char *nf;        /* per N panel: any non-finite weight (NULL: not kept) */
} op_convbrg_pack_ctx;

static void op_convbrg_pack_task(void *ctx, int64_t s, int tid)
{
    (void)tid;
    const op_convbrg_pack_ctx *x = (const op_convbrg_pack_ctx *)ctx;
    const int64_t nc = op_min64(OP_F32_NR, x->g->n - s * OP_F32_NR);
    const int nf = op_conv_pack_b_nhwc_f32_nf(x->g, 0, 0, x->K, x->K, s * OP_F32_NR, nc, x->bp + s * OP_F32_NR * x->K);
    if (x->nf) x->nf[s] = (unsigned char)nf;
}

typedef struct {
    const op_conv_desc *d;
    int16_t *skip;
    int64_t npix, npan;
    _Atomic int inexact;      /* set when a panel's padding rows of a tap are not one of the masks */
} op_convbrg_skip_ctx;

/* one task = up to 64 pixel panels: per tap, the rows of the panel whose tap reads padding */
static void op_convbrg_skip_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    op_convbrg_skip_ctx *x = (op_convbrg_skip_ctx *)ctx;
    const op_conv_desc *d = x->d;
    const int64_t KH = d->kh, KW = d->kw, khw = KH * KW, OW = d->ow, ohw = d->oh * d->ow;
    for (int64_t pa = task * 64; pa < op_min64(x->npan, task * 64 + 64); pa++) {
        int m[64] = {0};   /* per tap (khw <= 64: the caller checks) */
        for (int i = 0; i < OP_F32_MR; i++) {
            const int64_t pix = pa * OP_F32_MR + i;
            if (pix >= x->npix) {
                for (int64_t t = 0; t < khw; t++) m[t] |= 1 << i;
                continue;
            }
            const int64_t pp = pix % ohw, ih0 = pp / OW * d->sh - d->pt, iw0 = pp % OW * d->sw - d->pl;
            for (int64_t kh = 0; kh < KH; kh++) {
                const int64_t ih = ih0 + kh * d->dh;
                const int hbad = ih < 0 || ih >= d->h;
                for (int64_t kw = 0; kw < KW; kw++) {
                    const int64_t iw = iw0 + kw * d->dw;
                    if (hbad || iw < 0 || iw >= d->w) m[kh * KW + kw] |= 1 << i;
                }
            }
        }
        for (int64_t t = 0; t < khw; t++) {
            const int f = m[t] == 0 ? 0 : m[t] == OP_BRG_FULL ? -1 : op_brg_fit(m[t]);
            if (f >= 0 && f != m[t]) atomic_store_explicit(&x->inexact, 1, memory_order_relaxed);
            x->skip[pa * khw + t] = (int16_t)f;
        }
    }
}

typedef struct {
    const op_conv_desc *d;
    const float *x;
    float *xq;
    int64_t hq, wq, ps;
} op_convbrg_wide_ctx;

/* one task = one padded row (n, r) of the wide copy (pixels ps floats apart, the 16 extra zero) */
static void op_convbrg_wide_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_convbrg_wide_ctx *f = (const op_convbrg_wide_ctx *)ctx;
    const op_conv_desc *d = f->d;
    const int64_t C = d->c, ps = f->ps, n = task / f->hq, ih = task % f->hq - d->pt;
    float *o = f->xq + task * f->wq * ps;
    if (ih < 0 || ih >= d->h) {
        memset(o, 0, sizeof(float) * (size_t)(f->wq * ps));
        return;
    }
    const float *src = f->x + (n * d->h + ih) * d->w * C;
    for (int64_t s = 0; s < f->wq; s++, o += ps) {
        const int64_t iw = s - d->pl;
        if (iw < 0 || iw >= d->w) {
            memset(o, 0, sizeof(float) * (size_t)ps);
        } else {
            memcpy(o, src + iw * C, sizeof(float) * (size_t)C);
            memset(o + C, 0, sizeof(float) * (size_t)(ps - C));
        }
    }
}

/* The redo pass of an input read in place (every padding tap skipped, no padded copy) whose weight
   holds an Inf or NaN in some N panels (c->nf, set by the first pass, which left those panels
   out): those panels again, without the skip, over a padded copy (the padding's zeros multiplied,
   0 * Inf = NaN, as without OP_CONV_BRG_SKIP_PAD). The other panels' outputs are untouched. Returns
   the threads used, 0 when the copy's blocks do not fit the kernel (the caller's packing path then
   computes everything), -1 on allocation failure. */
static int op_convbrg_redo(const op_convbrg_ctx *c, const void *x, int nthreads, int T)
{
    const op_conv_desc *d = c->d;
    op_convq_geo q;
    op_convq_buf qb = {NULL, NULL, NULL};
    if (op_convq_prepare(d, x, 0, 0, 16, OP_F32_MR, nthreads, &q, &qb) != 0) {
        op_convq_free(&qb);
        return -1;
    }
    int used = 0;
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * (size_t)q.nblk);
    for (int64_t b = 0; off && b < q.nblk; b++) {
        const op_convq_seg *sg = q.seg + q.bseg[b];
        if (q.nblk != c->nblk || q.bseg[b + 1] - q.bseg[b] != 1 || sg->t0 != 0 || sg->len != 16) {
            free(off);
            op_convq_free(&qb);
            return 0;
        }
        off[b] = sg->off;
    }
    if (!off) {
        used = -1;
    } else {
        op_convbrg_ctx r = *c;
        r.q = &q;
        r.off = off;
        r.skip = NULL;
        r.inplace = 0;
        r.redo = 1;
        r.shift = 0;
        r.ps = d->c;
        used = op_parallel_for(T, r.tm * r.tn, op_convbrg_task, &r);
    }
    free(off);
    op_convq_free(&qb);
    return used;
}

/* Runs the convolution this way when it applies: returns the threads used, 0 when it does not
   apply (the caller takes the packing path), -1 on allocation failure. */
static int op_conv2d_nhwc_brg_f32(const op_conv_desc *d, const void *x, int x_bf16, const float *w,
                                  const float *bias, float *y, int act, const op_blocking *blk,
                                  int nthreads)
{
    enum { MR = OP_F32_MR, NR = OP_F32_NR };
    const int opts = op_conv_f32_opts;
    /* (rows 4 KiB apart, sw*C a multiple of 1024, would share one L1d set: the packing path) */
    const int alias = (d->sw * d->c) % 1024 == 0;
    if (d->nhwc != 1 || d->groups != 1 || d->kh * d->kw < 2 || (alias && (x_bf16 || !(opts & OP_CONV_BRG_WIDE_ROWS))))
        return 0;
    if (d->ow % MR != 0 && !((opts & OP_CONV_BRG_OW7) && d->ow % 7 == 0)) return 0;
    const int64_t K = d->c * d->kh * d->kw, khw = d->kh * d->kw;
    if (K % 16 != 0) return 0;
    const int64_t npn = op_cdiv64(d->oc, NR), npix = d->n * d->oh * d->ow, npan = op_cdiv64(npix, MR);
    /* the padding taps of the border panels (none without padding or beyond 64 taps) */
    const int pad = d->pt > 0 || d->pl > 0 || (d->oh - 1) * d->sh + (d->kh - 1) * d->dh >= d->h ||
                    (d->ow - 1) * d->sw + (d->kw - 1) * d->dw >= d->w;
    /* (a tap's skip covers whole 16-depth blocks only when C is a multiple of 16: with C = 4, 8 or
       12 a block joins the runs of several taps, and skipping one tap would drop or misplace the
       others' products) */
    const int useskip = (pad || npix % MR != 0) && khw <= 64 && d->c % 16 == 0 &&
                        (opts & OP_CONV_BRG_SKIP_PAD);
    int16_t *skip = NULL;
    unsigned char *nf = NULL;   /* per N panel: a non-finite weight (set by the packs) */
    op_convbrg_skip_ctx sc = {d, NULL, npix, npan, 0};
    if (useskip) {
        skip = (int16_t *)malloc(sizeof(int16_t) * (size_t)(npan * khw));
        if (!skip) return -1;
        sc.skip = skip;
        op_parallel_for(npan * khw >= 4096 ? nthreads : 1, op_cdiv64(npan, 64), op_convbrg_skip_task, &sc);
        nf = (unsigned char *)calloc((size_t)npn, 1);
        if (!nf) {
            free(skip);
            return -1;
        }
    }
    /* Every padding tap skipped exactly (ResNet's 3 x 3 with padding 1 at OW 7, 14, 28, 56): the
       input is read in place, no padded copy; the pixel offsets of the padded geometry are shifted
       back by the padding (a border pixel's first tap, never read, lies before its row). */
    const int inplace = pad && useskip && !x_bf16 && !alias && !atomic_load(&sc.inexact) &&
                        !(opts & OP_CONV_BRG_COPY);
    op_convq_geo q;
    op_convq_buf qb = {NULL, NULL, NULL};
    int64_t shift = 0, ps = d->c;
    if (inplace) {
        const int64_t nblk = K / 16;
        qb.bseg = (int64_t *)malloc(sizeof(int64_t) * (size_t)(nblk + 1));
        qb.seg = (op_convq_seg *)malloc(sizeof(op_convq_seg) * (size_t)(nblk + op_convq_nruns(d, 16)));
        if (!qb.bseg || !qb.seg) {
            op_convq_free(&qb);
            free(nf);
            free(skip);
            return -1;
        }
        q.d = d;
        q.g0 = -1;
        q.ohw_joint = op_conv_joint(d) ? d->oh * d->ow : 0;
        q.xq = x;
        q.rs = d->w * d->c;
        q.is = d->h * d->w * d->c;
        q.mr = MR;
        q.bk = 16;
        q.nblk = op_convq_plan(d, q.rs, 16, qb.bseg, qb.seg);
        q.bseg = qb.bseg;
        q.seg = qb.seg;
        shift = d->pt * q.rs + d->pl * d->c;
    } else if (alias) {   /* OP_CONV_BRG_WIDE_ROWS: the padded copy, pixels C + 16 floats apart */
        const int64_t hq = (d->oh - 1) * d->sh + (d->kh - 1) * d->dh + 1;
        const int64_t wq = (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1;
        ps = d->c + 16;
        qb.xq = op_conv_scratch_alloc(sizeof(float) * (size_t)(d->n * hq * wq * ps));
        if (!qb.xq) {
            free(nf);
            free(skip);
            return -1;
        }
        op_convbrg_wide_ctx wc = {d, (const float *)x, (float *)qb.xq, hq, wq, ps};
        op_parallel_for(d->n * hq * wq * ps >= (1 << 16) ? nthreads : 1, d->n * hq, op_convbrg_wide_task, &wc);
        q.d = d;
        q.g0 = -1;
        q.ohw_joint = op_conv_joint(d) ? d->oh * d->ow : 0;
        q.xq = qb.xq;
        q.rs = wq * ps;
        q.is = hq * wq * ps;
        q.mr = MR;
        q.bk = 16;
        q.nblk = K / 16;
    } else if (op_convq_prepare(d, x, x_bf16, x_bf16, 16, MR, nthreads, &q, &qb) != 0) {
        op_convq_free(&qb);
        free(nf);
        free(skip);
        return -1;
    }
    int used = 0;
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * (size_t)q.nblk);
    /* (the wide copy: block b = channel block b / khw, tap b % khw, as op_convq_plan orders them) */
    for (int64_t b = 0; alias && off && b < q.nblk; b++)
        off[b] = (b % khw) / d->kw * d->dh * q.rs + (b % khw) % d->kw * d->dw * ps + b / khw * 16;
    for (int64_t b = 0; !alias && off && b < q.nblk; b++) {
        const op_convq_seg *sg = q.seg + q.bseg[b];
        if (q.bseg[b + 1] - q.bseg[b] != 1 || sg->t0 != 0 || sg->len != 16) {
            free(off);
            free(nf);
            free(skip);
            op_convq_free(&qb);
            return 0;
        }
        off[b] = sg->off;
    }
    int64_t T = nthreads < 1 ? 1 : nthreads;
    op_convbrg_ctx c;
    c.npan = npan;
    c.npn = npn;
    const int64_t mc = blk && blk->mc > 0 ? blk->mc : OP_F32_MC;
    c.mpb = op_max64(1, mc / MR);
    /* enough pixel blocks for the threads (4 per thread), else smaller blocks, then N parts */
    if (op_cdiv64(c.npan, c.mpb) < 4 * T) c.mpb = op_max64(1, c.npan / (4 * T));
    c.tm = op_cdiv64(c.npan, c.mpb);
    /* (a multiple of the threads, the panels dealt evenly: pa0 .. pa1 of op_convbrg_task) */
    if (c.tm > T && op_roundup64(c.tm, T) <= c.npan) c.tm = op_roundup64(c.tm, T);
    c.tn = 1;
    if (c.tm < 2 * T) c.tn = op_min64(npn, op_cdiv64(2 * T, c.tm));
    /* OP_CONV_BRG_NSPLIT: a weight larger than the padded input, with N panels enough for the
       threads, is read once (each task one N panel over all pixels) instead of once per pixel
       block (ResNet-50 res4 3x3: a 2.25 MiB weight, a 2 MiB padded input at batch 8) */
    const double wbytes = 4.0 * (double)K * (double)d->oc;
    const double abytes = 4.0 * (double)q.is * (double)d->n;
    if ((opts & OP_CONV_BRG_NSPLIT) && c.tm > 1 && wbytes > abytes && npn >= 2 * T) {
        c.mpb = c.npan;
        c.tm = 1;
        c.tn = npn;
    }
    if (T > c.tm * c.tn) T = c.tm * c.tn;
    c.tpack = (opts & OP_CONV_BRG_NSPLIT_PACK) && c.tm == 1 && c.tn == npn;
    float *bp = (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)((c.tpack ? T : npn) * NR * K));
    if (!off || !bp) {
        used = -1;
    } else {
        op_gemm_args g;
        memset(&g, 0, sizeof g);
        g.n = d->oc;
        g.k = K;
        g.b = w;
        g.csb = K;
        g.rsb = 1;
        g.user = &q;
        if (!c.tpack) {
            op_convbrg_pack_ctx pc = {&g, bp, K, nf};
            op_parallel_for(npn * K * NR >= (1 << 16) ? nthreads : 1, npn, op_convbrg_pack_task, &pc);
        }
        c.d = d;
        c.q = &q;
        c.g = &g;
        c.bp = bp;
        c.bias = bias;
        c.act = act;
        c.y = y;
        c.K = K;
        c.nblk = q.nblk;
        const int64_t kc = blk && blk->kc > 0 ? blk->kc : OP_F32_KC;
        c.kcb = op_max64(1, kc / 16);
        if ((opts & OP_CONV_BRG_FULL_K) && K <= OP_CONV_BRG_FULL_K_MAX) c.kcb = q.nblk;
        c.off = off;
        c.skip = skip;
        c.nf = nf;
        c.inplace = inplace;
        c.redo = 0;
        c.shift = shift;
        c.ps = ps;
        c.khw = khw;
        c.npix = npix;
        used = op_parallel_for((int)T, c.tm * c.tn, op_convbrg_task, &c);
        int anynf = 0;
        for (int64_t s = 0; inplace && s < npn; s++) anynf |= nf[s];
        if (anynf) used = op_convbrg_redo(&c, x, nthreads, (int)T);
    }
    op_conv_scratch_free(bp);
    free(nf);
    free(skip);
    free(off);
    op_convq_free(&qb);
    return used;
}
#endif

/* ---------------------------------------------------------------- NCHW over a pre-transformed input

   A float32 NCHW input is rewritten once per call into Xp[e][c][a][b][Hs][Ws]: zero-padded by the
   convolution's padding and split into sh x sw stride phases (padded row r*sh + a, column s*sw + b).
   For depth (c, kh, kw) (the weight's own order, so the weight stays in place) and output pixels
   (oh, ow..ow+L) of one output row, the im2col values are then L consecutive floats at
   Xp[e][c][phase of the tap][oh + kh*dh/sh][ow + kw*dw/sw ..]: a B micro-panel row is one copy per
   output-row segment (masked vector loads at AVX-512), with no border tests. */
typedef struct {
    const op_conv_desc *d;
    const float *xp;
    int64_t cg, hs, ws, plane_c;   /* plane_c: floats per channel (sh*sw phase planes) */
    int64_t g0;
    const int64_t *tapoff;         /* per tap: phase plane + row/col offset, in floats */
} op_convx_geo_f32;

typedef struct {
    const op_conv_desc *d;
    const float *x;
    float *xp;
    int64_t hs, ws;
} op_convx_fill_f32_ctx;

/* The stride-phase split shared by the pre-transformed NCHW paths (float32 here, bf16 in
   conv_bf16.c): the padded input of one channel becomes sh * sw phase planes of hs x ws, and tap t
   of the kernel starts tapoff[t] elements into them. Returns the elements of one channel (plane). */
static int64_t op_convx_phases(const op_conv_desc *d, int64_t *hs_, int64_t *ws_, int64_t *tapoff)
{
    const int64_t sh = d->sh, sw = d->sw;
    const int64_t hpad = (d->oh - 1) * sh + (d->kh - 1) * d->dh + 1;
    const int64_t wpad = (d->ow - 1) * sw + (d->kw - 1) * d->dw + 1;
    const int64_t hs = op_cdiv64(hpad, sh), ws = op_cdiv64(wpad, sw);
    if (tapoff)
        for (int64_t t = 0; t < d->kh * d->kw; t++) {
            const int64_t ro = (t / d->kw) * d->dh, co = (t % d->kw) * d->dw;
            tapoff[t] = (((ro % sh) * sw + co % sw) * hs + ro / sh) * ws + co / sw;
        }
    *hs_ = hs;
    *ws_ = ws;
    return sh * sw * hs * ws;
}

/* Columns [*slo, *shi) of a phase row (phase column b) that read the input row (width W); the rest
   are padding. off = b - left padding. */
static void op_convx_cols(int64_t off, int64_t sw, int64_t W, int64_t ws, int64_t *slo, int64_t *shi)
{
    int64_t lo = off >= 0 ? 0 : op_cdiv64(-off, sw);
    int64_t hi = W - off > 0 ? op_cdiv64(W - off, sw) : 0;
    if (lo > ws) lo = ws;
    if (hi > ws) hi = ws;
    if (hi < lo) hi = lo;
    *slo = lo;
    *shi = hi;
}

/* Whether a kernel tap reads phase plane (a, b) (row phase a, column phase b): the others are
   left unwritten. */
static int op_convx_phase_read(const op_conv_desc *d, int64_t a, int64_t b)
{
    for (int64_t t = 0; t < d->kh * d->kw; t++)
        if ((t / d->kw) * d->dh % d->sh == a && (t % d->kw) * d->dw % d->sw == b) return 1;
    return 0;
}

/* one task = one input channel plane (all entries, all groups: task = n*C + c) */
static void op_convx_fill_f32_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_convx_fill_f32_ctx *f = (const op_convx_fill_f32_ctx *)ctx;
    const op_conv_desc *d = f->d;
    const int64_t H = d->h, W = d->w, sh = d->sh, sw = d->sw, hs = f->hs, ws = f->ws;
    const float *p = f->x + task * H * W;
    float *o = f->xp + task * sh * sw * hs * ws;
    for (int64_t a = 0; a < sh; a++)
        for (int64_t r = 0; r < hs; r++) {
            const int64_t ih = r * sh + a - d->pt;
            for (int64_t b = 0; b < sw; b++) {
                /* (1x1 stride 2: 3 of 4 unread; zen3, 2 threads, res5a_branch1 batch 8: the
                   fill from 8.7 to 6.4% of the time) */
                if (!op_convx_phase_read(d, a, b)) continue;
                float *orow = o + ((a * sw + b) * hs + r) * ws;
                if (ih < 0 || ih >= H) {
                    memset(orow, 0, (size_t)ws * 4);
                    continue;
                }
                const float *row = p + ih * W;
                const int64_t off = b - d->pl;
                int64_t slo, shi;
                op_convx_cols(off, sw, W, ws, &slo, &shi);
                for (int64_t s = 0; s < slo; s++) orow[s] = 0.0f;
                if (sw == 1) {
                    memcpy(orow + slo, row + slo + off, (size_t)(shi - slo) * 4);
                } else {
                    int64_t s = slo;
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
                    /* stride 2, phase rows of 8+ columns (e.g. 14 from a 28-column input): 16
                       columns loaded, the even ones kept (VSHUFPS, then the 64-bit pairs in
                       order (0, 2, 1, 3)) */
                    for (; sw == 2 && s + 8 <= shi && 2 * (s + 8) + off <= W; s += 8) {
                        const __m256 lo = _mm256_loadu_ps(row + 2 * s + off);
                        const __m256 hi = _mm256_loadu_ps(row + 2 * s + off + 8);
                        const __m256d e = _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, 0x88));
                        _mm256_storeu_ps(orow + s, _mm256_castpd_ps(_mm256_permute4x64_pd(e, 0xD8)));
                    }
#endif
                    for (; s < shi; s++) orow[s] = row[s * sw + off];
                }
                for (int64_t s = shi; s < ws; s++) orow[s] = 0.0f;
            }
        }
}

static void op_conv_pack_b_nchw_xp_f32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                       int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    enum { NR = OP_F32_NR };
    const op_convx_geo_f32 *q = (const op_convx_geo_f32 *)g->user;
    const op_conv_desc *d = q->d;
    const int64_t e = q->g0 >= 0 ? bi * d->groups + q->g0 : bi;
    const float *xe = q->xp + e * q->cg * q->plane_c;
    const int64_t OW = d->ow, ws = q->ws, khw = d->kh * d->kw;
    float *D = (float *)dst;
    for (int64_t jr = 0; jr < nc; jr += NR) {
        const int64_t nr = op_min64(NR, nc - jr);
        int nseg = 0;
        int64_t soff[NR];
        int st0[NR], slen[NR];
        {
            int64_t j = j0 + jr, oh = j / OW, ow = j % OW;
            for (int64_t t = 0; t < nr;) {
                const int64_t len = op_min64(OW - ow, nr - t);
                soff[nseg] = oh * ws + ow - t;
                st0[nseg] = (int)t;
                slen[nseg] = (int)len;
                nseg++;
                t += len;
                ow = 0;
                oh++;
            }
        }
        float *o = D + jr * kcp;
        int64_t c = p0 / khw, tap = p0 % khw;
#if defined(OP_HAS_AVX512)
        if (NR == 32 && nseg == 1 && nr == 32) {
            const int64_t so = soff[0];
            for (int64_t p = 0; p < kc; p++, o += NR) {
                const float *src = xe + c * q->plane_c + q->tapoff[tap] + so;
                _mm512_storeu_ps(o, _mm512_loadu_ps(src));
                _mm512_storeu_ps(o + 16, _mm512_loadu_ps(src + 16));
                if (++tap == khw) {
                    tap = 0;
                    c++;
                }
            }
        } else if (NR == 32 && nseg <= 8) {
            /* a panel over several output rows (OW < 32 or a row boundary): one masked load per
               segment and 16-lane half (lanes [st0, st0 + len) read src + soff + lane; masked-off
               lanes are not read), instead of a memcpy per segment */
            __mmask16 m0[8], m1[8];
            for (int s = 0; s < nseg; s++) {
                const uint32_t bits = (uint32_t)((((uint64_t)1 << slen[s]) - 1) << st0[s]);
                m0[s] = (__mmask16)(bits & 0xFFFFu);
                m1[s] = (__mmask16)(bits >> 16);
            }
            for (int64_t p = 0; p < kc; p++, o += NR) {
                const float *src = xe + c * q->plane_c + q->tapoff[tap];
                __m512 v0 = _mm512_setzero_ps(), v1 = v0;
                for (int s = 0; s < nseg; s++) {
                    v0 = _mm512_mask_loadu_ps(v0, m0[s], src + soff[s]);
                    v1 = _mm512_mask_loadu_ps(v1, m1[s], src + soff[s] + 16);
                }
                _mm512_storeu_ps(o, v0);
                _mm512_storeu_ps(o + 16, v1);
                if (++tap == khw) {
                    tap = 0;
                    c++;
                }
            }
        } else
#elif defined(OP_HAS_AVX2)
        /* The same at avx2 (NR 16): two 8-lane loads per depth, masked loads (VMASKMOVPS: lanes
           off are not read) for a panel over several output rows, instead of a memcpy call per
           segment and depth. The memcpy calls were 18% of ResNet-50's res2 3x3 layer at batch 1
           (perf, AMD EPYC Zen 3 VM, 1 thread, 2026-12-06). */
        if (NR == 16 && nseg == 1 && nr == 16) {
            const int64_t so = soff[0];
            for (int64_t p = 0; p < kc; p++, o += NR) {
                const float *src = xe + c * q->plane_c + q->tapoff[tap] + so;
                _mm256_storeu_ps(o, _mm256_loadu_ps(src));
                _mm256_storeu_ps(o + 8, _mm256_loadu_ps(src + 8));
                if (++tap == khw) {
                    tap = 0;
                    c++;
                }
            }
        } else if (NR == 16 && nseg <= 4) {
            __m256i m0[4], m1[4];
            for (int s = 0; s < nseg; s++) {   /* lanes [st0, st0 + len) */
                m0[s] = op_lanes8(0, st0[s], slen[s]);
                m1[s] = op_lanes8(8, st0[s], slen[s]);
            }
            for (int64_t p = 0; p < kc; p++, o += NR) {
                const float *src = xe + c * q->plane_c + q->tapoff[tap];
                __m256 v0 = _mm256_setzero_ps(), v1 = v0;
                for (int s = 0; s < nseg; s++) {   /* segments' lanes are disjoint */
                    v0 = _mm256_or_ps(v0, _mm256_maskload_ps(src + soff[s], m0[s]));
                    v1 = _mm256_or_ps(v1, _mm256_maskload_ps(src + soff[s] + 8, m1[s]));
                }
                _mm256_storeu_ps(o, v0);
                _mm256_storeu_ps(o + 8, v1);
                if (++tap == khw) {
                    tap = 0;
                    c++;
                }
            }
        } else
#endif
        {
            for (int64_t p = 0; p < kc; p++, o += NR) {
                const float *src = xe + c * q->plane_c + q->tapoff[tap];
                if (nr < NR) memset(o, 0, sizeof(float) * NR);
                for (int s = 0; s < nseg; s++)
                    memcpy(o + st0[s], src + soff[s] + st0[s], sizeof(float) * (size_t)slen[s]);
                if (++tap == khw) {
                    tap = 0;
                    c++;
                }
            }
        }
        for (int64_t p = kc; p < kcp; p++, o += NR) memset(o, 0, sizeof(float) * NR);
    }
}

/* NCHW over the pre-transformed input: the packed KC x NC block of B is the whole per-call gather;
   NC at most OP_CONVX_NC keeps it in L2 while the (few) MC row blocks of the weight pass over it
   (bfloat16 res2 3x3 at batch 1: NC 2048 -> 256 measured 300 -> 460 GFLOP/s on AMX). */
#ifndef OP_CONVX_NC
#define OP_CONVX_NC 256
#endif
static const op_blocking *op_convx_blk(const op_blocking *blk, const op_gemm_ops *ops, op_blocking *tmp)
{
    const int64_t nc = blk && blk->nc > 0 ? blk->nc : ops->blk.nc;
    if (nc <= OP_CONVX_NC) return blk;
    *tmp = blk ? *blk : ops->blk;
    tmp->nc = op_max64(ops->nr, OP_CONVX_NC / ops->nr * ops->nr);
    return tmp;
}

/* The pre-transformed input of a float32 NCHW convolution: NULL when it does not apply or pay
   (1x1 stride-1 unpadded reads the input in place) or on allocation failure (*err = 1). */
static float *op_convx_prepare_f32(const op_conv_desc *d, const float *x, int64_t *hs_, int64_t *ws_,
                                   int64_t *plane_c, int64_t *tapoff, int nthreads)
{
    int64_t hs, ws;
    const int64_t pc = op_convx_phases(d, &hs, &ws, NULL);
    const double bytes = (double)d->n * (double)d->c * (double)pc * 4.0;
    if (bytes > (double)(256 << 20)) return NULL;
    float *xp = (float *)op_conv_scratch_alloc((size_t)bytes);
    if (!xp) return NULL;
    op_convx_fill_f32_ctx fc = {d, x, xp, hs, ws};
    op_parallel_for(d->n * d->c * pc >= (1 << 16) ? nthreads : 1, d->n * d->c, op_convx_fill_f32_task, &fc);
    op_convx_phases(d, &hs, &ws, tapoff);
    *hs_ = hs;
    *ws_ = ws;
    *plane_c = pc;
    return xp;
}

/* ---------------------------------------------------------------- 16-bit transposes (NCHW <-> NHWC)

   op_convb_tr_tile: dst[j][i] = src[i][j] for i < ni (<= 32), j < nj (<= 16): pairs of source rows
   interleaved into dwords, one 16 x 16 dword transpose, 32 elements (64 bytes) per destination row.
   sw2: the source elements are every other one (src[i][2j]): the low halves of 16 dwords. */
#if defined(OP_HAS_AVX512)
OP_INLINE void op_convb_tr_tile(const uint16_t *src, int64_t ss, int ni, int nj, uint16_t *dst, int64_t ds,
                                const int sw2)
{
    const __mmask16 lm = (__mmask16)((1u << nj) - 1u);
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF);
    __m512i r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        __m512i e0 = _mm512_setzero_si512(), e1 = e0;
        if (sw2) {
            if (2 * i < ni) e0 = _mm512_and_si512(_mm512_maskz_loadu_epi32(lm, src + 2 * i * ss), lo16);
            if (2 * i + 1 < ni) e1 = _mm512_slli_epi32(_mm512_maskz_loadu_epi32(lm, src + (2 * i + 1) * ss), 16);
        } else {
            if (2 * i < ni) e0 = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lm, src + 2 * i * ss));
            if (2 * i + 1 < ni)
                e1 = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lm, src + (2 * i + 1) * ss)), 16);
        }
        r[i] = _mm512_or_si512(e0, e1);
    }
    op_transpose16_epi32(r);
    if (ni == 32) {
        for (int j = 0; j < nj; j++) _mm512_storeu_si512((void *)(dst + j * ds), r[j]);
    } else {
        const __mmask32 sm = (__mmask32)(((uint64_t)1 << ni) - 1u);
        for (int j = 0; j < nj; j++) _mm512_mask_storeu_epi16((void *)(dst + j * ds), sm, r[j]);
    }
}
#endif

/* dst[j * ds + i] = src[i * ss + j * sj] (sj: 1, or 2 for a stride-2 sample), i < ni, j < nj */
static void op_convb_tr_block(const uint16_t *src, int64_t ss, int64_t sj, int64_t ni, int64_t nj,
                              uint16_t *dst, int64_t ds)
{
    for (int64_t i0 = 0; i0 < ni; i0 += 32) {
        const int mi = (int)op_min64(32, ni - i0);
        for (int64_t j0 = 0; j0 < nj; j0 += 16) {
            const int mj = (int)op_min64(16, nj - j0);
            const uint16_t *s = src + i0 * ss + j0 * sj;
            uint16_t *d = dst + j0 * ds + i0;
#if defined(OP_HAS_AVX512)
            if (sj == 1) {
                op_convb_tr_tile(s, ss, mi, mj, d, ds, 0);
                continue;
            }
            if (sj == 2) {
                op_convb_tr_tile(s, ss, mi, mj, d, ds, 1);
                continue;
            }
#endif
            for (int j = 0; j < mj; j++)
                for (int i = 0; i < mi; i++) d[j * ds + i] = s[i * ss + j * sj];
        }
    }
}


/* ---------------------------------------------------------------- NCHW through the NHWC formulation

   desc.nhwc == 2: NCHW tensors, computed as C[pixel][oc] (the NHWC GEMM: M = OH*OW, N = OC/g). The
   input is transposed once per call to NHWC, the NHWC kernels write an NHWC result, which is
   transposed back into y. At small output planes this removes the ragged pixel edge of the NCHW
   GEMM (N = OH*OW: 196 pixels fill 6.1 panels of 32, 49 fill 1.5) and gives each thread whole
   output-channel panels; the registry says per microarchitecture where it pays
   (registry.CONV_NCHW_AS_NHWC). */
typedef struct {
    const char *src;
    char *dst;
    int64_t rows, cols;   /* per image: src is rows x cols, dst cols x rows */
    int64_t parts;        /* tasks per image (1: whole images, when there are enough of them) */
    size_t esz;           /* 2 or 4 bytes */
} op_conv_tr_ctx;

/* one task = one part of one image: dst[j][i] = src[i][j] for its destination rows j (whole rows:
   the rows of a small plane, 49 pixels, share cache lines), in 16 x 16 tiles */
static void op_conv_tr_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_conv_tr_ctx *t = (const op_conv_tr_ctx *)ctx;
    const int64_t R = t->rows, C = t->cols, P = t->parts, njb = op_cdiv64(C, 16);
    const size_t img = (size_t)(R * C) * t->esz;
    const char *s = t->src + (size_t)(task / P) * img;
    char *d = t->dst + (size_t)(task / P) * img;
    const int64_t jlo = njb * (task % P) / P * 16, jhi = op_min64(C, njb * (task % P + 1) / P * 16);
    if (t->esz == 2) {   /* 32 x 16 tiles, vectorised at AVX-512 */
        if (jhi > jlo)
            op_convb_tr_block((const uint16_t *)(const void *)s + jlo, C, 1, R, jhi - jlo,
                              (uint16_t *)(void *)d + jlo * R, R);
        return;
    }
    for (int64_t i0 = 0; i0 < R; i0 += 16) {
        const int64_t ni = op_min64(16, R - i0);
        for (int64_t j0 = jlo; j0 < jhi; j0 += 16) {
            const int64_t nj = op_min64(16, jhi - j0);
            const float *sp = (const float *)(const void *)s + i0 * C + j0;
            float *dp = (float *)(void *)d + j0 * R + i0;
#if defined(OP_HAS_AVX512)
            if (ni == 16 && nj == 16) {
                __m512i r[16];
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_si512((const void *)(sp + i * C));
                op_transpose16_epi32(r);
#pragma GCC unroll 16
                for (int j = 0; j < 16; j++) _mm512_storeu_si512((void *)(dp + j * R), r[j]);
                continue;
            }
#elif defined(OP_HAS_AVX2)
            /* four 8 x 8 transposes in registers, where the element loop below took 15% of an
               NCHW res2_branch2b at batch 8 through the NHWC kernel and slowed the kernel after
               it (Zen 3, 2 threads, 2026-12-07: 111 -> 157 GFLOP/s in a loop; paired with torch
               2.13, 0.87-0.88 -> 1.04x) */
            if (ni == 16 && nj == 16) {
                for (int i8 = 0; i8 < 16; i8 += 8)
                    for (int j8 = 0; j8 < 16; j8 += 8) {
                        __m256 r[8];
#pragma GCC unroll 8
                        for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(sp + (i8 + i) * C + j8);
                        op_transpose8_ps(r);
#pragma GCC unroll 8
                        for (int j = 0; j < 8; j++) _mm256_storeu_ps(dp + (j8 + j) * R + i8, r[j]);
                    }
                continue;
            }
#endif
            for (int64_t j = 0; j < nj; j++)
                for (int64_t i = 0; i < ni; i++) dp[j * R + i] = sp[i * C + j];
        }
    }
}

/* n images of rows x cols elements (esz 4, or 2: bfloat16 bits) -> cols x rows; threads over images
   (and over column blocks when the images are too few). */
static void op_conv_transpose(const void *src, void *dst, int64_t n, int64_t rows, int64_t cols, size_t esz,
                              int nthreads)
{
    const int T = n * rows * cols >= (1 << 16) ? nthreads : 1;
    op_conv_tr_ctx t = {(const char *)src, (char *)dst, rows, cols, n >= 2 * T ? 1 : op_min64(op_cdiv64(cols, 16), 4 * T), esz};
    op_parallel_for(T, n * t.parts, op_conv_tr_task, &t);
}

typedef struct {
    const op_conv_desc *d;
    const char *x;
    char *xs;
    size_t esz;
} op_conv_sub_ctx;

/* one task = one input plane (n, c): its pixels (oh * sh, ow * sw) */
static void op_conv_sub_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_conv_sub_ctx *t = (const op_conv_sub_ctx *)ctx;
    const op_conv_desc *d = t->d;
    const int64_t OH = d->oh, OW = d->ow, W = d->w, sh = d->sh, sw = d->sw;
    for (int64_t oh = 0; oh < OH; oh++) {
        const int64_t src = (task * d->h + oh * sh) * W, dst = (task * OH + oh) * OW;
        if (t->esz == 4) {
            const float *sp = (const float *)(const void *)t->x + src;
            float *dp = (float *)(void *)t->xs + dst;
            for (int64_t ow = 0; ow < OW; ow++) dp[ow] = sp[ow * sw];
        } else {
            const uint16_t *sp = (const uint16_t *)(const void *)t->x + src;
            uint16_t *dp = (uint16_t *)(void *)t->xs + dst;
            for (int64_t ow = 0; ow < OW; ow++) dp[ow] = sp[ow * sw];
        }
    }
}

/* The NHWC copy of an NCHW input (esz bytes per element) for the NHWC problem *dn (d with
   nhwc = 1), or NULL on allocation failure. An unpadded strided 1x1 convolution reads only the
   pixels (oh * sh, ow * sw): those are copied, and *dn becomes the 1x1 stride-1 convolution of them
   (one plain GEMM over all images). */
static void *op_conv_as_nhwc_input(const op_conv_desc *d, const void *x, size_t esz, int nthreads,
                                   op_conv_desc *dn)
{
    *dn = *d;
    dn->nhwc = 1;
    void *xs = NULL;
    if (d->kh == 1 && d->kw == 1 && d->pt == 0 && d->pl == 0 && (d->sh > 1 || d->sw > 1) &&
        (d->oh - 1) * d->sh < d->h && (d->ow - 1) * d->sw < d->w) {   /* (no bottom/right padding read) */
        xs = op_conv_scratch_alloc(esz * (size_t)(d->n * d->c * d->oh * d->ow));
        if (!xs) return NULL;
        op_conv_sub_ctx sc = {d, (const char *)x, (char *)xs, esz};
        op_parallel_for(d->n * d->c * d->oh * d->ow >= (1 << 16) ? nthreads : 1, d->n * d->c,
                        op_conv_sub_task, &sc);
        dn->h = d->oh;
        dn->w = d->ow;
        dn->sh = dn->sw = 1;
        x = xs;
    }
    void *xt = op_conv_scratch_alloc(esz * (size_t)(dn->n * dn->c * dn->h * dn->w));
    if (xt) op_conv_transpose(x, xt, dn->n, dn->c, dn->h * dn->w, esz, nthreads);
    op_conv_scratch_free(xs);
    return xt;
}

#if defined(OP_HAS_AVX512)
/* OP_CONV_AS_NHWC_IMAGE: whether the NCHW problem d (nhwc = 2) on nthreads runs image by image. */
static int op_conv_img_fits(const op_conv_desc *d, int x_bf16, int nthreads)
{
    const int64_t T = nthreads < 1 ? 1 : nthreads;
    if (!(op_conv_f32_opts & OP_CONV_AS_NHWC_IMAGE) || d->nhwc != 2 || x_bf16 || d->groups != 1 ||
        d->kh * d->kw < 2 || d->n < op_max64(2, T) || d->oh * d->ow < OP_CONV_IMG_MIN_PIXELS)
        return 0;
    const double ws = 4.0 * ((double)d->c * (double)(d->h * d->w) +
                             (double)d->oc * (double)(d->oh * d->ow) +
                             (double)d->c * (double)(d->kh * d->kw) * (double)d->oc);
    return ws <= (double)OP_CONV_IMG_L2;
}

typedef struct {
    const op_conv_desc *d;
    const float *x, *w, *bias;
    float *y;
    int act;
    const op_blocking *blk;
    float *buf;        /* per thread, bstep floats: an image's NHWC copy, then its NHWC output */
    int64_t bstep;
    _Atomic int err;   /* 1: an image did not fit the NHWC kernel, < 0: its error */
} op_conv_img_ctx;

/* one task = one image, on the calling thread alone: transposed to NHWC, the NHWC k x k kernel into
   an NHWC scratch, transposed back into y */
static void op_conv_img_task(void *ctx, int64_t n, int tid)
{
    op_conv_img_ctx *c = (op_conv_img_ctx *)ctx;
    if (atomic_load(&c->err)) return;
    const op_conv_desc *d = c->d;
    op_conv_desc d1 = *d;
    d1.n = 1;
    d1.nhwc = 1;
    const int64_t hw = d->h * d->w, ohw = d->oh * d->ow;
    float *xt = c->buf + (size_t)tid * (size_t)c->bstep, *yt = xt + op_roundup64(hw * d->c, 16);
    op_conv_transpose(c->x + n * d->c * hw, xt, 1, d->c, hw, sizeof(float), 1);
    const int r = op_conv2d_nhwc_brg_f32(&d1, xt, 0, c->w, c->bias, yt, c->act, c->blk, 1);
    if (r > 0) op_conv_transpose(yt, c->y + n * d->oc * ohw, 1, ohw, d->oc, sizeof(float), 1);
    else atomic_store(&c->err, r == 0 ? 1 : r);
}

/* OP_CONV_AS_NHWC_IMAGE: the NCHW problem d (op_conv_img_fits) image by image, whole images per
   thread; the images left after a whole number per thread (fewer than the threads) through the
   whole-batch route. Returns the threads used, 0 when an image does not fit the NHWC kernel (the
   caller's whole-batch route rewrites y), or a negative error. */
static int op_conv2d_f32_images(const op_conv_desc *d, const float *x, const float *w,
                                const float *bias, float *y, int act, const op_blocking *blk,
                                int nthreads)
{
    const int64_t T = nthreads < 1 ? 1 : nthreads, n0 = d->n / T * T;
    const int64_t bstep = op_roundup64(d->h * d->w * d->c, 16) +
                          op_roundup64(d->oh * d->ow * d->oc, 16);
    float *buf = (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)(T * bstep));
    if (!buf) return -1;
    op_conv_img_ctx c = {d, x, w, bias, y, act, blk, buf, bstep, 0};
    int used = op_parallel_for((int)T, n0, op_conv_img_task, &c);
    op_conv_scratch_free(buf);
    const int e = atomic_load(&c.err);
    if (e) return e > 0 ? 0 : e;
    if (n0 < d->n) {   /* fewer images than threads left: all threads on them together */
        op_conv_desc d1 = *d;
        d1.n = d->n - n0;
        const int64_t xs = d->c * d->h * d->w, ys = d->oc * d->oh * d->ow;
        const int r = op_conv2d_f32(&d1, x + n0 * xs, 0, w, bias, y + n0 * ys, act, blk, nthreads);
        if (r <= 0) return r;
        if (r > used) used = r;
    }
    return used;
}
#endif

/* ---------------------------------------------------------------- NCHW 1x1 over all images' pixels

   OP_CONV_NCHW1X1_JOINT (above). Column j of the GEMM is pixel j % P of image j / P (P = OH*OW);
   its input element for channel c is x[((n * C + c) * H + oh * sh) * W + ow * sw]. */
typedef struct {
    const float *x;
    int64_t hw, chw;           /* input plane H*W, image C*H*W (floats) */
    int64_t p, ow, w, sh, sw;  /* output pixels per image, output width, input width, strides */
} op_conv_j1_geo;

OP_INLINE int op_conv_j1_fits(const op_conv_desc *d)
{
    /* oc > OP_F32_MR: with at most MR output channels one image's GEMM reads B in place with KC
       OP_GEMM_DIRECT_KC (gemm_f32.c), so K over 32 summed in other blocks than the joint GEMM's:
       an image alone and in a batch differed (zen3, 4 x 33 x 14 x 14 at batch 2: 142 of 1568
       outputs; found by review). Such narrow layers keep the per-image GEMM. */
    return d->groups == 1 && d->kh == 1 && d->kw == 1 && d->pt == 0 && d->pl == 0 && d->n >= 2 &&
           d->oc > OP_F32_MR &&
           d->oh * d->ow <= OP_CONV_NCHW1X1_JOINT_MAXP && (d->oh - 1) * d->sh < d->h &&
           (d->ow - 1) * d->sw < d->w && d->n * d->c * d->h * d->w < ((int64_t)1 << 31) &&
           (!(op_conv_f32_opts & OP_CONV_NCHW1X1_JOINT_SMALL) || d->sh > 1 || d->sw > 1 ||
            d->oh * d->ow <= OP_CONV_J1_SMALL_P);
    /* (batch >= 2 also where OP_CONV_NCHW1X1_DIRECT_B would read B in place: the joint GEMM held
       its rate when the input and output fell out of L3, the in-place one did not. zen4,
       2026-12-01, batch 8, 2 threads, paired with torch 2.13 in one process over placements
       (scripts/place_sweep.py), GFLOP/s in-place vs joint: res2_branch2a (C 256 -> 64, 56x56)
       119-133 vs 162-168 with L3 degraded (one placement 212 vs 168 without); res2a_branch2a
       (C 64 -> 64) 137-146 vs 157-175 degraded, 192-196 vs 180-184 otherwise.) */
}

/* The input offsets (floats, channel 0) of columns j0 .. j0 + nr - 1 (idx[t], t < OP_F32_NR; the
   lanes past nr repeat column j0). Returns the length of the first run of consecutive offsets
   when the columns are one run (nr) or two (the second one at an offset >= the first run's
   length: read by two masked loads per vector), else 0 (gathered). */
static int op_conv_j1_cols(const op_conv_j1_geo *q, int64_t j0, int nr, int32_t *idx)
{
    int t1 = nr, runs = 1;
    for (int t = 0; t < OP_F32_NR; t++) {
        const int64_t j = j0 + (t < nr ? t : 0), im = j / q->p, pp = j % q->p;
        idx[t] = (int32_t)(im * q->chw + (pp / q->ow) * q->sh * q->w + (pp % q->ow) * q->sw);
        if (t > 0 && t < nr && idx[t] != idx[t - 1] + 1) {
            if (++runs == 2) t1 = t;
        }
    }
    return runs == 1 || (runs == 2 && idx[t1] >= t1) ? t1 : 0;
}

/* B block depth p0.., columns j0.. -> micro-panels of OP_F32_NR columns (d[p*NR + j]): one or two
   runs of consecutive pixels by masked loads, other columns (strided pixels) gathered. While a
   panel is packed, the lines of the next panel's pixels in the same channel are prefetched into
   L2: a panel visits a few lines in each of kc planes, a pattern the hardware prefetchers do not
   follow (without: the pack took 10% of res4a_branch1 at 1 thread). AVX2 loads the runs as
   whole or masked (VMASKMOVPS, no fault past the mask) vectors too, gathers element by element:
   zen3, 2026-12-06, batch 8 res5a_branch2a at 1 thread, the pack 7.3% -> 3.1% of the time (perf),
   x torch (paired) 0.97 -> 0.99, res4_branch2a 0.94 -> 1.05, batch 1 res5a_branch2a 0.93 ->
   0.98. */
static void op_conv_pack_b_nchw_j1_f32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                       int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    (void)bi;
    enum { NR = OP_F32_NR };
    const op_conv_j1_geo *q = (const op_conv_j1_geo *)g->user;
    const int64_t hw = q->hw;
    const float *xb = q->x + p0 * hw;
    float *d = (float *)dst;
    int32_t idx[NR] OP_ALIGNED(64), nidx[NR] OP_ALIGNED(64);
    int t1 = op_conv_j1_cols(q, j0, (int)op_min64(NR, nc), idx);
    for (int64_t jr = 0; jr < nc; jr += NR, d += NR * kcp) {
        const int nr = (int)op_min64(NR, nc - jr);
        const int nnr = (int)op_min64(NR, nc - jr - NR);   /* next panel's columns (<= 0: none) */
        const int nt1 = nnr > 0 ? op_conv_j1_cols(q, j0 + jr + NR, nnr, nidx) : 0;
#if defined(OP_HAS_AVX512)
        const int64_t f0 = nnr > 0 ? nidx[0] : 0, f1 = nnr > 0 ? nidx[(nnr - 1) / 4] : 0,
                      f2 = nnr > 0 ? nidx[(nnr - 1) / 2] : 0, f3 = nnr > 0 ? nidx[3 * (nnr - 1) / 4] : 0,
                      f4 = nnr > 0 ? nidx[nnr - 1] : 0;
        const float *s = xb;
        if (t1 > 0) {   /* runs [0, t1) and [t1, nr) */
            const uint32_t all = nr >= 32 ? 0xFFFFFFFFu : (1u << nr) - 1u, ma = (1u << (t1 & 31)) - 1u;
            const uint32_t mA = t1 >= 32 ? all : ma & all, mB = all & ~mA;
            const __mmask16 a0 = (__mmask16)mA, a1 = (__mmask16)(mA >> 16);
            const __mmask16 b0 = (__mmask16)mB, b1 = (__mmask16)(mB >> 16);
            const float *sa = xb + idx[0], *sb = xb + (idx[t1 < nr ? t1 : 0] - (t1 < nr ? t1 : 0));
            for (int64_t p = 0; p < kc; p++, s += hw, sa += hw, sb += hw) {
                if (nnr > 0) {
                    _mm_prefetch((const char *)(s + f0), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f2), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f4), _MM_HINT_T1);
                }
                __m512 v0 = _mm512_maskz_loadu_ps(a0, sa), v1 = _mm512_maskz_loadu_ps(a1, sa + 16);
                if (mB) {
                    v0 = _mm512_mask_loadu_ps(v0, b0, sb);
                    v1 = _mm512_mask_loadu_ps(v1, b1, sb + 16);
                }
                _mm512_storeu_ps(d + p * NR, v0);
                _mm512_storeu_ps(d + p * NR + 16, v1);
            }
        } else {
            const __mmask16 m0 = (__mmask16)(nr >= 16 ? 0xFFFF : (1u << nr) - 1u);
            const __mmask16 m1 = (__mmask16)(nr >= 32 ? 0xFFFF : nr <= 16 ? 0 : (1u << (nr - 16)) - 1u);
            const __m512i i0 = _mm512_load_si512((const void *)idx);
            const __m512i i1 = _mm512_load_si512((const void *)(idx + 16));
            const __m512 z = _mm512_setzero_ps();
            for (int64_t p = 0; p < kc; p++, s += hw) {
                if (nnr > 0) {
                    _mm_prefetch((const char *)(s + f0), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f1), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f2), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f3), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f4), _MM_HINT_T1);
                }
                _mm512_storeu_ps(d + p * NR, _mm512_mask_i32gather_ps(z, m0, i0, s, 4));
                _mm512_storeu_ps(d + p * NR + 16, _mm512_mask_i32gather_ps(z, m1, i1, s, 4));
            }
        }
#elif defined(OP_HAS_AVX2)
        if (t1 > 0) {   /* runs [0, t1) and [t1, nr): whole loads, or masked ones (no fault) */
            const int64_t f0 = nnr > 0 ? nidx[0] : 0, f2 = nnr > 0 ? nidx[(nnr - 1) / 2] : 0,
                          f4 = nnr > 0 ? nidx[nnr - 1] : 0;
            const __m256i lane0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256i lane1 = _mm256_add_epi32(lane0, _mm256_set1_epi32(8));
            const __m256i vt1 = _mm256_set1_epi32(t1), vnr = _mm256_set1_epi32(nr);
            const __m256i a0 = _mm256_cmpgt_epi32(vt1, lane0), a1 = _mm256_cmpgt_epi32(vt1, lane1);
            const __m256i b0 = _mm256_andnot_si256(a0, _mm256_cmpgt_epi32(vnr, lane0));
            const __m256i b1 = _mm256_andnot_si256(a1, _mm256_cmpgt_epi32(vnr, lane1));
            const int whole = t1 == NR, two = t1 < nr;
            const float *sa = xb + idx[0], *sb = xb + (two ? idx[t1] - t1 : 0), *s = xb;
            for (int64_t p = 0; p < kc; p++, s += hw, sa += hw, sb += hw) {
                if (nnr > 0) {
                    _mm_prefetch((const char *)(s + f0), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f2), _MM_HINT_T1);
                    _mm_prefetch((const char *)(s + f4), _MM_HINT_T1);
                }
                __m256 v0, v1;
                if (whole) {
                    v0 = _mm256_loadu_ps(sa);
                    v1 = _mm256_loadu_ps(sa + 8);
                } else {
                    v0 = _mm256_maskload_ps(sa, a0);
                    v1 = _mm256_maskload_ps(sa + 8, a1);
                    if (two) {
                        v0 = _mm256_or_ps(v0, _mm256_maskload_ps(sb, b0));
                        v1 = _mm256_or_ps(v1, _mm256_maskload_ps(sb + 8, b1));
                    }
                }
                _mm256_storeu_ps(d + p * NR, v0);
                _mm256_storeu_ps(d + p * NR + 8, v1);
            }
        } else {
            for (int64_t p = 0; p < kc; p++) {
                const float *sp = xb + p * hw;
                for (int t = 0; t < NR; t++) d[p * NR + t] = t < nr ? sp[idx[t]] : 0.0f;
            }
        }
#else
        (void)t1;
        for (int64_t p = 0; p < kc; p++) {
            const float *sp = xb + p * hw;
            for (int t = 0; t < NR; t++) d[p * NR + t] = t < nr ? sp[idx[t]] : 0.0f;
        }
#endif
        for (int64_t p = kc; p < kcp; p++)
            for (int t = 0; t < NR; t++) d[p * NR + t] = 0.0f;
        if (nnr > 0) {
            memcpy(idx, nidx, sizeof idx);
            t1 = nt1;
        }
    }
}

/* The joint NCHW 1x1 GEMM's arguments (float32 here, bfloat16 in conv_bf16.c): C[oc][n * P + p] =
   W[oc][c] x X[c][n * P + p], M = OC, N = all images' P output pixels, K = C; B read only by the
   pack (user: its geometry), C written image by image (c_cols = P, c_img = OC x P); the caller sets
   g->c (or passes C to its runner) and the split. */
static void op_conv_j1_args(const op_conv_desc *d, const void *w, const void *x, const float *bias, int act,
                            void *user, op_epilogue *epi, op_gemm_args *g)
{
    const int64_t P = d->oh * d->ow;
    epi->bias = bias;
    epi->bias_stride = 1;
    epi->bias_axis = 0;
    epi->act = act;
    memset(g, 0, sizeof *g);
    g->batch = 1;
    g->m = d->oc; g->n = d->n * P; g->k = d->c;
    g->epi = (bias || act != OP_ACT_NONE) ? epi : NULL;
    g->user = user;
    g->a = w; g->rsa = d->c; g->csa = 1;
    g->b = x; g->rsb = 0; g->csb = 0;
    g->c_cols = P; g->c_img = d->oc * P;
}

static int op_conv2d_nchw1x1_joint_f32(const op_conv_desc *d, const float *x, const float *w,
                                       const float *bias, float *y, int act, const op_blocking *blk,
                                       int nthreads)
{
    const int64_t P = d->oh * d->ow;
    op_conv_j1_geo q = {x, d->h * d->w, d->c * d->h * d->w, P, d->ow, d->w, d->sh, d->sw};
    op_gemm_ops ops = op_gemm_f32_ops;
    ops.direct_b = 0;
    ops.pack_b = op_conv_pack_b_nchw_j1_f32;
    op_epilogue epi;
    op_gemm_args g;
    op_conv_j1_args(d, w, x, bias, act, &q, &epi, &g);
    g.c = y; g.rsc = P; g.csc = 1;
    /* threads: split the pixels when they outnumber the output channels (each thread gathers only
       its columns of B, the costlier pack, and packs all of W), else the split the driver picks.
       Zen 4, 2 threads, best of 9: res4a_branch1 (1568 pixels, OC 1024) 170 -> 197 GFLOP/s;
       res5a_branch1 (392 pixels, OC 2048) 191 -> 187 with the pixel split, so not there. */
    g.split_n = g.n >= g.m;
    return op_gemm_drive(&ops, &g, blk, nthreads);
}

/* The NCHW float32 1x1 problems the in-place weight routes (op_conv2d_f32_a_in_place,
   op_conv_n49_fits) can take: groups 1, unpadded, every sample inside the input (stride 1: the whole
   plane), OC > 64 (at OC <= 64 the driver may read B in place, which op_conv_ukr_a_f32 cannot: it
   reads packed B panels). */
OP_INLINE int op_conv_1x1_w_rows(const op_conv_desc *d, int x_bf16)
{
    return d->nhwc != 1 && !x_bf16 && d->groups == 1 && d->kh == 1 && d->kw == 1 && d->pt == 0 &&
           d->pl == 0 && (d->oh - 1) * d->sh < d->h && (d->ow - 1) * d->sw < d->w &&
           d->oc > OP_CONV_NCHW1X1_DIRECT_MAXM;
}

/* 1 when the 49-pixel kernel (OP_CONV_NCHW1X1_N49, op_conv2d_nchw1x1_n49_f32) runs d: the problems
   op_conv2d_f32_a_in_place takes with 49 output pixels, and those of the joint GEMM (batch >= 2);
   with OP_CONV_NCHW1X1_N49_STRIDED also strided ones with 98, 147 or 196 (runs of 49) */
static int op_conv_n49_fits(const op_conv_desc *d, int x_bf16)
{
#if defined(OP_HAS_AVX512)
    const int opts = OP_CONV_NCHW1X1_N49 | OP_CONV_NCHW1X1_A_INPLACE;
    const int64_t p = d->oh * d->ow;
    return (op_conv_f32_opts & opts) == opts && op_conv_1x1_w_rows(d, x_bf16) && p % 49 == 0 &&
           (p == 49 || (p <= OP_N49_MAXP && (d->sh > 1 || d->sw > 1) &&
                        (op_conv_f32_opts & OP_CONV_NCHW1X1_N49_STRIDED)));
#else
    (void)d;
    (void)x_bf16;
    return 0;
#endif
}

int op_conv2d_f32_joint(const op_conv_desc *d, int x_bf16)
{
    return d->nhwc != 1 && !x_bf16 && (op_conv_f32_opts & OP_CONV_NCHW1X1_JOINT) && op_conv_j1_fits(d) &&
           !op_conv_n49_fits(d, x_bf16);
}

int op_conv2d_f32_a_in_place(const op_conv_desc *d, int x_bf16)
{
#if defined(OP_HAS_AVX512)
    return (op_conv_f32_opts & OP_CONV_NCHW1X1_A_INPLACE) && op_conv_1x1_w_rows(d, x_bf16) &&
           !op_conv2d_f32_joint(d, x_bf16);
#else
    (void)d;
    (void)x_bf16;
    return 0;
#endif
}

int op_conv2d_f32_n49(const op_conv_desc *d, int x_bf16)
{
    return op_conv_n49_fits(d, x_bf16);
}

#if defined(OP_HAS_AVX512)
/* ---------------------------------------------------------------- NCHW 1x1 with 49 output pixels

   OP_CONV_NCHW1X1_N49 (zen4 CONV_F32_OPTIONS "nchw1x1_n49", with OP_CONV_NCHW1X1_A_INPLACE): an NCHW
   1x1 unpadded convolution (groups 1, OC > 64, any stride whose samples lie in the input) whose output
   plane has 49 pixels (ResNet-50's 7 x 7: res5a_branch1, res5_branch2a, res5_branch2c), at any batch
   (it replaces the in-place weight route and the joint GEMM there: op_conv_n49_fits), runs per image
   as out[oc][49] = W[oc][C] x X[C][49] in its own kernel with every vector lane busy: 49 = 3 x 16 + 1.
   Per block of 7 weight rows, pixels 0..47 are 3 x 7 broadcast-FMA accumulators (the weight element
   broadcast from its row, read in place, times 16 pixels of a packed B row), and pixel 48 is 7 dot
   products along K: 16 contiguous depths of the weight row times the same 16 depths of pixel 48
   (packed once per call), summed horizontally at the end of the depth block (7 + 21 + 3 B vectors +
   a broadcast = 32 zmm). The 14 x 32 GEMM kernel instead runs 49 pixels as 32 + 17 columns (49 of 64
   lanes), and copies the weight rows per block at C a multiple of 1024; here 7 rows 4 KiB apart fit
   an 8-way L1d set and stream in place. Depth blocks of the driver's KC (rounded down to 16): C
   stored after the first, added after the others, the epilogue after the last; a thread's 7-row
   blocks run every entry of a group (OP_N49_GROUP_BYTES) per depth block (the weight block stays in
   L1d, the group's packed input in L2). The input is packed per
   call (C x 48 floats plus pixel 48's C depths, per image; the sampled pixels of a strided problem
   straight from the input). Sums: pixels 0..47 in the order of the GEMM route (the same bits at the
   same KC); pixel 48 per depth block as 16 partial sums (depths k = j mod 16 in order, masked tail)
   added by a fixed tree, then to C: other bits than the GEMM route for pixel 48, the same bits at
   every thread count (threads split the 7-row blocks). OP_CONV_NCHW1X1_N49_STRIDED: a strided problem
   with 98, 147 or 196 output pixels (ResNet-50 res4a_branch1, 28 -> 14) runs too, as 2..4 runs of 49
   pixels per image (each packed as an image of 49 from the input, instead of the sampled-pixel copy
   the in-place weight route makes first). */
#define OP_N49_MR 7

typedef struct {
    const op_conv_desc *d;
    const float *x, *w, *bias;
    float *bp;        /* [entry][K][48], entry = (image, run of 49 pixels) */
    float *x48;       /* [entry][K16]: the run's pixel 48's depths, zero past K */
    float *y;
    int64_t k16, nb;  /* K rounded up to 16; row blocks */
    int64_t kc;       /* depth block (a multiple of 16) */
    int64_t nq, ohw;  /* runs of 49 per image; output pixels per image */
    int64_t pix[OP_N49_MAXP];  /* each output pixel's offset in an input plane */
    int act, parts;
} op_n49_ctx;

/* one task = a run of 64 channels of one entry (image, run of 49 pixels) */
static void op_n49_pack_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_n49_ctx *t = (const op_n49_ctx *)ctx;
    const op_conv_desc *d = t->d;
    const int64_t K = d->c, hw = d->h * d->w, chunks = (K + 63) / 64;
    const int64_t e = task / chunks, c0 = (task % chunks) * 64, c1 = op_min64(K, c0 + 64);
    const int64_t n = e / t->nq, p0 = (e % t->nq) * 49;
    const int s1 = d->sh == 1 && d->sw == 1 && d->ow == d->w;
    for (int64_t c = c0; c < c1; c++) {
        const float *src = t->x + (n * K + c) * hw;
        float *dst = t->bp + (e * K + c) * 48;
        if (s1) memcpy(dst, src + p0, 48 * sizeof(float));
        else
            for (int j = 0; j < 48; j++) dst[j] = src[t->pix[p0 + j]];
        t->x48[e * t->k16 + c] = src[t->pix[p0 + 48]];
    }
    if (c1 == K)
        for (int64_t c = K; c < t->k16; c++) t->x48[e * t->k16 + c] = 0.0f;
}

/* MR (<= 7) weight rows w (ldw floats apart) x the packed pixels of one image, depths [k0, K) (k0 a
   multiple of 16), to y (49 floats a row, rows ldy apart): stored (acc 0) or added to it (acc 1),
   then epi (NULL: none) */
OP_INLINE void op_n49_rows(const int MR, int64_t k0, int64_t K, const float *OP_RESTRICT w, int64_t ldw,
                           const float *OP_RESTRICT bp, const float *OP_RESTRICT x48, float *y, int64_t ldy,
                           int acc, const op_epilogue *epi)
{
    __m512 a0[OP_N49_MR], a1[OP_N49_MR], a2[OP_N49_MR], s[OP_N49_MR];
    for (int i = 0; i < MR; i++) a0[i] = a1[i] = a2[i] = s[i] = _mm512_setzero_ps();
    for (; k0 + 16 <= K; k0 += 16) {
#pragma GCC unroll 16
        for (int kk = 0; kk < 16; kk++) {
            const float *b = bp + (k0 + kk) * 48;
            const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
#pragma GCC unroll 7
            for (int i = 0; i < MR; i++) {
                const __m512 ai = _mm512_set1_ps(w[i * ldw + k0 + kk]);
                a0[i] = _mm512_fmadd_ps(ai, b0, a0[i]);
                a1[i] = _mm512_fmadd_ps(ai, b1, a1[i]);
                a2[i] = _mm512_fmadd_ps(ai, b2, a2[i]);
            }
        }
        const __m512 xv = _mm512_loadu_ps(x48 + k0);
#pragma GCC unroll 7
        for (int i = 0; i < MR; i++) s[i] = _mm512_fmadd_ps(_mm512_loadu_ps(w + i * ldw + k0), xv, s[i]);
    }
    if (k0 < K) {   /* depth tail (< 16) */
        const __mmask16 m = (__mmask16)((1u << (K - k0)) - 1u);
        for (int64_t k = k0; k < K; k++) {
            const float *b = bp + k * 48;
            const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16), b2 = _mm512_loadu_ps(b + 32);
#pragma GCC unroll 7
            for (int i = 0; i < MR; i++) {
                const __m512 ai = _mm512_set1_ps(w[i * ldw + k]);
                a0[i] = _mm512_fmadd_ps(ai, b0, a0[i]);
                a1[i] = _mm512_fmadd_ps(ai, b1, a1[i]);
                a2[i] = _mm512_fmadd_ps(ai, b2, a2[i]);
            }
        }
        const __m512 xv = _mm512_loadu_ps(x48 + k0);   /* (zero past K) */
#pragma GCC unroll 7
        for (int i = 0; i < MR; i++) s[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + i * ldw + k0), xv, s[i]);
    }
    op_epi512 e32, e17;
    op_epi512_init(&e32, 32, epi);
    op_epi512_init(&e17, 17, epi);
#pragma GCC unroll 7
    for (int i = 0; i < MR; i++) {
        op_epi512_row(&e32, y + i * ldy, i, a0[i], a1[i], 32, acc);
        op_epi512_row(&e17, y + i * ldy + 32, i, a2[i], _mm512_set1_ps(_mm512_reduce_add_ps(s[i])), 17, acc);
    }
}

/* Packed input per group of entries (image, run of 49) that one depth block of the 7-row blocks
   sweeps: K x 48 floats an entry, so a depth block of kc reads kc x 192 bytes of each; the group's
   share stays in L2 while every 7-row block passes over it. One group of every entry instead
   (batch 8: 3 MiB) streamed it from L3 once per 7-row block: sapphirerapids, 2 threads, batch 8,
   res5_branch2a 214 -> 347 GFLOP/s (0.64 -> 1.05x torch), res4a_branch1 (4 runs of 49 an image)
   210 -> 349 (0.63 -> 1.07x); batch 1 as before. */
#define OP_N49_GROUP_BYTES (512 * 1024)

/* one task = one thread's run of 7-row blocks (an equal share), every image */
static void op_n49_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_n49_ctx *t = (const op_n49_ctx *)ctx;
    const op_conv_desc *d = t->d;
    const int64_t K = d->c, OC = d->oc, ne = d->n * t->nq;
    const int64_t b0 = task * t->nb / t->parts, b1 = (task + 1) * t->nb / t->parts;
    const int64_t eg = op_max64(1, OP_N49_GROUP_BYTES / (t->kc * 48 * (int64_t)sizeof(float)));
    for (int64_t g0 = 0; g0 < ne; g0 += eg)
    for (int64_t k0 = 0; k0 < K; k0 += t->kc)   /* (entries inner: the weight block stays in L1d) */
    for (int64_t blk = b0; blk < b1; blk++) {
        const int64_t r0 = blk * OP_N49_MR, mr = op_min64(OP_N49_MR, OC - r0);
        op_epilogue epi;
        epi.bias = t->bias ? t->bias + r0 : NULL;
        epi.bias_stride = 1;
        epi.bias_axis = 0;
        epi.act = t->act;
        const op_epilogue *ep = (t->bias || t->act != OP_ACT_NONE) ? &epi : NULL;
        {
            const int64_t k1 = op_min64(K, k0 + t->kc);
            const int acc = k0 > 0;
            const op_epilogue *e = k1 == K ? ep : NULL;
            for (int64_t en = g0; en < op_min64(ne, g0 + eg); en++) {
                const float *w = t->w + r0 * K, *bp = t->bp + en * K * 48, *x48 = t->x48 + en * t->k16;
                float *y = t->y + ((en / t->nq) * OC + r0) * t->ohw + (en % t->nq) * 49;
                const int64_t ldy = t->ohw;
                switch (mr) {
                case 7: op_n49_rows(7, k0, k1, w, K, bp, x48, y, ldy, acc, e); break;
                case 6: op_n49_rows(6, k0, k1, w, K, bp, x48, y, ldy, acc, e); break;
                case 5: op_n49_rows(5, k0, k1, w, K, bp, x48, y, ldy, acc, e); break;
                case 4: op_n49_rows(4, k0, k1, w, K, bp, x48, y, ldy, acc, e); break;
                case 3: op_n49_rows(3, k0, k1, w, K, bp, x48, y, ldy, acc, e); break;
                case 2: op_n49_rows(2, k0, k1, w, K, bp, x48, y, ldy, acc, e); break;
                default: op_n49_rows(1, k0, k1, w, K, bp, x48, y, ldy, acc, e); break;
                }
            }
        }
    }
}

/* d: taken by op_conv2d_f32_a_in_place, 49 output pixels. The threads used, or -1 on allocation failure. */
static int op_conv2d_nchw1x1_n49_f32(const op_conv_desc *d, const float *x, const float *w,
                                     const float *bias, float *y, int act, const op_blocking *blk,
                                     int nthreads)
{
    op_n49_ctx t;
    t.d = d;
    t.x = x;
    t.w = w;
    t.bias = bias;
    t.y = y;
    t.act = act;
    t.k16 = (d->c + 15) / 16 * 16;
    t.nb = (d->oc + OP_N49_MR - 1) / OP_N49_MR;
    t.kc = op_max64(16, (blk && blk->kc > 0 ? blk->kc : OP_F32_KC) / 16 * 16);
    t.ohw = d->oh * d->ow;
    t.nq = t.ohw / 49;
    for (int64_t j = 0; j < t.ohw; j++) t.pix[j] = (j / d->ow) * d->sh * d->w + (j % d->ow) * d->sw;
    const int64_t ne = d->n * t.nq;
    float *buf = (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)(ne * (d->c * 48 + t.k16)));
    if (!buf) return -1;
    t.bp = buf;
    t.x48 = buf + ne * d->c * 48;
    const int64_t chunks = ne * ((d->c + 63) / 64);
    op_parallel_for(ne * d->c * 49 >= (1 << 16) ? nthreads : 1, chunks, op_n49_pack_task, &t);
    t.parts = (int)op_min64(nthreads, t.nb);
    op_parallel_for(t.parts, t.parts, op_n49_task, &t);
    op_conv_scratch_free(buf);
    return t.parts;
}
#endif

#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
/* ---------------------------------------------------------------- AVX2 NHWC k x k, direct

   OP_CONV_NHWC_DIRECT8 (registry CONV_F32_OPTIONS "nhwc_direct8"): a float32 NHWC convolution
   (groups 1, C >= OP_D8_MIN_C; 1x1 as op_conv_d8_fits says) below AVX-512 reads its input in place
   of an im2col pack: every output pixel's depth run for tap (ky, kx) is a contiguous run of C floats of the (padded,
   op_convq_prepare) NHWC input, so a register tile of 6 pixels x 16 output channels (12
   accumulators, two weight vectors, one broadcast) takes its broadcasts from 6 pixel pointers plus
   the tap's offset, as oneDNN's direct convolutions do. The weight is packed as 16-channel panels
   [oc / 16][tap][c][16]: once per call for all tasks, or, where one pixel range covers the whole
   problem (small planes, where each panel is read by one task), by the task into a per-thread
   buffer just before use. A tile sums the whole of K in its registers; the panel (K x 64 bytes:
   36 KiB at C 64, 288 KiB at C 512 for 3 x 3) streams from L2. Blocking K so that a block's panel
   stays in L1 (16-40 KiB, partial sums through the output between blocks) measured slower on every
   ResNet-50 3x3 layer tried. Tasks are ranges of up to OP_D8_MC pixels (all images' N * OH * OW,
   so every output is the same sum at any thread count) and, on small planes, groups of panels.
   AMD EPYC Zen 3 VM (avx2), 2026-12-06, ResNet-50 3x3 layers in NHWC, paired with torch 2.13 in one
   process (onepath.bench.core.alternate, median of 7), GFLOP/s of the im2col GEMM route -> this
   route (x torch): 1 thread res2_branch2b batch 8 71.2 -> 87.7 (0.74 -> 0.91), batch 1 76.8 ->
   92.7 (0.80 -> 0.97), res3_branch2b batch 8 80.6 -> 89.5 (0.84 -> 0.93), res4_branch2b batch 1
   82.3 -> 89.1, batch 8 85.7 -> 92.9 (0.92 -> 0.99), res5_branch2b batch 1 59.8 -> 73.1 (1.06 ->
   1.29), res3a_branch2b (stride 2) batch 8 71.8 -> 78.3, res5a_branch2b batch 8 81.2 -> 83.9;
   2 threads res2_branch2b batch 8 103.0 -> 137.6 (0.83 -> 1.11), res3a_branch2b batch 8 105.7 ->
   139.7 (0.86 -> 1.14), res4_branch2b batch 1 108.3 -> 120.5, res5a_branch2b batch 8 108.0 ->
   116.1. perf, res2_branch2b batch 8: the im2col pack of A was 19% of the GEMM route's time. */
#define OP_D8_NP 6
#define OP_D8_CHUNK (1 << 20)   /* bytes of a block's weight panel (see above) */
#define OP_D8_MIN_C 16
#define OP_D8_MC 192          /* pixels per task (at most) */

typedef struct {
    const op_conv_desc *d;
    const float *xq;          /* padded NHWC input (or x itself) */
    int64_t rs, is;           /* its row and image strides (floats) */
    const float *w;           /* (OC, C, KH, KW) */
    float *wp;                /* [OCP / 16][block][tap][c][16] */
    int64_t cb, nkb, ntap, K; /* channels per block, blocks, taps, C * taps */
    const int64_t *toff;      /* tap t: floats from a pixel's first tap to tap t */
    const float *bias;
    float *y;
    int act;
    int64_t M, mc;            /* pixels in all, per task */
    int64_t pg, ppg;          /* tasks per pixel range (groups of 16-channel panels), panels each */
    float *tbuf;              /* one pixel range in all: per thread, the weight block in use */
} op_d8_ctx;

/* the weight block (panel p of 16 output channels, channel block kb) as [tap][c][16] at dst: per
   half panel, 8 weight rows x 8 consecutive (c, tap) elements transposed in registers, each
   column stored as 8 channels (the element loop was a third of res5_branch2b's time at batch 1) */
static void op_d8_pack_chunk(const op_d8_ctx *x, int64_t p, int64_t kb, float *dst)
{
    const op_conv_desc *d = x->d;
    const int64_t khw = x->ntap, c0 = kb * x->cb, cbl = op_min64(x->cb, d->c - c0), L = cbl * khw;
    for (int h = 0; h < 16; h += 8) {
        const float *src[8];   /* rows [c][tap] from channel c0; NULL past OC: zeros */
        for (int r = 0; r < 8; r++) {
            const int64_t oc = p * 16 + h + r;
            src[r] = oc < d->oc ? x->w + oc * x->K + c0 * khw : NULL;
        }
        int64_t q = 0, c = 0, t = 0;
        for (; q + 8 <= L; q += 8) {
            __m256 v[8];
            for (int r = 0; r < 8; r++)
                v[r] = src[r] ? _mm256_loadu_ps(src[r] + q) : _mm256_setzero_ps();
            op_transpose8_ps(v);
            for (int e = 0; e < 8; e++) {
                _mm256_storeu_ps(dst + (t * cbl + c) * 16 + h, v[e]);
                if (++t == khw) t = 0, c++;
            }
        }
        for (; q < L; q++) {
            for (int r = 0; r < 8; r++) dst[(t * cbl + c) * 16 + h + r] = src[r] ? src[r][q] : 0.0f;
            if (++t == khw) t = 0, c++;
        }
    }
}

static void op_d8_pack_task(void *vctx, int64_t p, int tid)
{
    (void)tid;
    const op_d8_ctx *x = (const op_d8_ctx *)vctx;
    for (int64_t kb = 0; kb < x->nkb; kb++)
        op_d8_pack_chunk(x, p, kb, x->wp + (p * x->K + kb * x->cb * x->ntap) * 16);
}

/* tb[i][16] of np pixels: the bias (first block) or the partial sums in y (yb, pixels OC apart) */
static OP_NOINLINE void op_d8_load(const op_d8_ctx *x, int np, float *tb, const float *yb,
                                   int64_t rem, int first, int64_t oc)
{
    const int64_t OC = x->d->oc, nc = op_min64(rem, 16);
    for (int i = 0; i < np; i++) {
        float *t = tb + 16 * i;
        if (nc < 16) memset(t, 0, sizeof(float) * 16);
        if (!first) memcpy(t, yb + i * OC, sizeof(float) * (size_t)nc);
        else if (x->bias) memcpy(t, x->bias + oc, sizeof(float) * (size_t)nc);
        else memset(t, 0, sizeof(float) * (size_t)nc);
    }
}

/* y (yb, pixels OC apart) = tb[i][16] of np pixels, the activation applied in the last block */
static OP_NOINLINE void op_d8_store(const op_d8_ctx *x, int np, const float *tb, float *yb,
                                    int64_t rem, int last)
{
    const int64_t OC = x->d->oc, nc = op_min64(rem, 16);
    const int act = last ? x->act : OP_ACT_NONE;
    for (int i = 0; i < np; i++) {
        __m256 v[2] = {_mm256_load_ps(tb + 16 * i), _mm256_load_ps(tb + 16 * i + 8)};
        op_y16_act(v, act);   /* (conv_stem.c) */
        if (nc == 16) {
            _mm256_storeu_ps(yb + i * OC, v[0]);
            _mm256_storeu_ps(yb + i * OC + 8, v[1]);
        } else {
            memcpy(yb + i * OC, v, sizeof(float) * (size_t)nc);
        }
    }
}

/* y[NP pixels][oc .. oc + min(rem, 16)) (+)= the block's sums: pixel i's first input element of
   tap 0 at a[i], the block's weight panel wb ([tap][c][16], cbl channels). The accumulators
   start from and end in a buffer (op_d8_load / op_d8_store): with the epilogue here GCC kept
   them on the stack in the depth loop. */
OP_INLINE void op_d8_tile(const int NP, const op_d8_ctx *x, const float *const *a, int64_t cbl,
                          const float *wb, float *yb, int64_t rem, int first, int last, int64_t oc)
{
    float tb[OP_D8_NP * 16] OP_ALIGNED(32);
    __m256 acc[OP_D8_NP][2];
    const int64_t OC = x->d->oc;
    /* whole 16-channel tiles start in registers (zeros, the bias, or the partial sums in y); the
       buffer only for a panel's last columns. The per-pixel memset / memcpy calls and the store
       through the buffer were 17% of a 1x1 layer's time at K = 128 (perf); zen3, 2026-12-06, NHWC,
       paired with torch, x torch before -> after: 2 threads batch 8 res3_branch2c 0.76-0.77 ->
       0.95-1.02, res2a_branch2a 0.86-0.90 -> 1.03-1.05; 1 thread 0.84 -> 1.01, 0.88 -> 1.02,
       batch 1 res2_branch2c 0.85 -> 1.07; K >= 1024 and the 3x3 layers within noise */
    if (rem >= 16 && first && !x->bias) {
#pragma GCC unroll 6
        for (int i = 0; i < NP; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    } else if (rem >= 16 && first) {
        const __m256 b0 = _mm256_loadu_ps(x->bias + oc), b1 = _mm256_loadu_ps(x->bias + oc + 8);
#pragma GCC unroll 6
        for (int i = 0; i < NP; i++) acc[i][0] = b0, acc[i][1] = b1;
    } else if (rem >= 16) {
#pragma GCC unroll 6
        for (int i = 0; i < NP; i++) {
            acc[i][0] = _mm256_loadu_ps(yb + i * OC);
            acc[i][1] = _mm256_loadu_ps(yb + i * OC + 8);
        }
    } else {
        op_d8_load(x, NP, tb, yb, rem, first, oc);
#pragma GCC unroll 6
        for (int i = 0; i < NP; i++) {
            acc[i][0] = _mm256_load_ps(tb + 16 * i);
            acc[i][1] = _mm256_load_ps(tb + 16 * i + 8);
        }
    }
    const float *bp = wb;
    for (int64_t t = 0; t < x->ntap; t++) {
        const int64_t to = x->toff[t];
        const float *a0 = a[0] + to, *a1 = a[NP > 1 ? 1 : 0] + to, *a2 = a[NP > 2 ? 2 : 0] + to;
        const float *a3 = a[NP > 3 ? 3 : 0] + to, *a4 = a[NP > 4 ? 4 : 0] + to;
        const float *a5 = a[NP > 5 ? 5 : 0] + to;
        for (int64_t c = 0; c < cbl; c++, bp += 16) {
            const __m256 w0 = _mm256_loadu_ps(bp), w1 = _mm256_loadu_ps(bp + 8);
            __m256 v = _mm256_broadcast_ss(a0 + c);
            acc[0][0] = _mm256_fmadd_ps(v, w0, acc[0][0]);
            acc[0][1] = _mm256_fmadd_ps(v, w1, acc[0][1]);
#define OP_D8_ROW(I, AP)                                                \
            if (NP > I) {                                               \
                v = _mm256_broadcast_ss(AP + c);                        \
                acc[I][0] = _mm256_fmadd_ps(v, w0, acc[I][0]);          \
                acc[I][1] = _mm256_fmadd_ps(v, w1, acc[I][1]);          \
            }
            OP_D8_ROW(1, a1) OP_D8_ROW(2, a2) OP_D8_ROW(3, a3) OP_D8_ROW(4, a4) OP_D8_ROW(5, a5)
#undef OP_D8_ROW
        }
    }
    const int act = last ? x->act : OP_ACT_NONE;
    if (rem >= 16 && (act == OP_ACT_NONE || act == OP_ACT_RELU)) {  /* straight to y */
#pragma GCC unroll 6
        for (int i = 0; i < NP; i++) {
            if (act == OP_ACT_RELU) op_y16_act(acc[i], act);   /* max(0, v): NaN stays */
            _mm256_storeu_ps(yb + i * OC, acc[i][0]);
            _mm256_storeu_ps(yb + i * OC + 8, acc[i][1]);
        }
        return;
    }
#pragma GCC unroll 6
    for (int i = 0; i < NP; i++) {
        _mm256_store_ps(tb + 16 * i, acc[i][0]);
        _mm256_store_ps(tb + 16 * i + 8, acc[i][1]);
    }
    op_d8_store(x, NP, tb, yb, rem, last);
}

/* nt tiles of np pixels each, pixel i of tile k starting at px[k np + i] + c0, its outputs at
   yb + (k np + i) OC: one call per run of tiles (with a call per tile and three divisions per
   pixel for px, op_d8_task's own time was 8.5% of a 1x1 layer's, 1.6% after: perf, zen3,
   res2a_branch2a batch 8, 2 threads) */
static OP_NOINLINE void op_d8_tiles_np(const op_d8_ctx *x, int np, int64_t nt,
                                       const float *const *px, int64_t c0, int64_t cbl,
                                       const float *wb, float *yb, int64_t rem, int first, int last,
                                       int64_t oc)
{
    const int64_t OC = x->d->oc;
    for (int64_t k = 0; k < nt; k++, px += np, yb += np * OC) {
        const float *a[OP_D8_NP];
        for (int i = 0; i < np; i++) a[i] = px[i] + c0;
        switch (np) {
        case 1: op_d8_tile(1, x, a, cbl, wb, yb, rem, first, last, oc); break;
        case 2: op_d8_tile(2, x, a, cbl, wb, yb, rem, first, last, oc); break;
        case 3: op_d8_tile(3, x, a, cbl, wb, yb, rem, first, last, oc); break;
        case 4: op_d8_tile(4, x, a, cbl, wb, yb, rem, first, last, oc); break;
        case 5: op_d8_tile(5, x, a, cbl, wb, yb, rem, first, last, oc); break;
        default: op_d8_tile(6, x, a, cbl, wb, yb, rem, first, last, oc); break;
        }
    }
}

static void op_d8_task(void *vctx, int64_t task, int tid)
{
    const op_d8_ctx *x = (const op_d8_ctx *)vctx;
    const op_conv_desc *d = x->d;
    const int64_t m0 = task / x->pg * x->mc, m1 = op_min64(x->M, m0 + x->mc), ohw = d->oh * d->ow;
    const int64_t p0 = task % x->pg * x->ppg, p1 = op_min64(op_cdiv64(d->oc, 16), p0 + x->ppg);
    const float *px[OP_D8_MC];   /* each pixel's first input element (tap 0, channel 0) */
    int64_t n = m0 / ohw, oy = m0 % ohw / d->ow, ox = m0 % d->ow;   /* (stepped, not divided) */
    for (int64_t m = m0; m < m1; m++) {
        px[m - m0] = x->xq + n * x->is + oy * d->sh * x->rs + ox * d->sw * d->c;
        if (++ox == d->ow) {
            ox = 0;
            if (++oy == d->oh) oy = 0, n++;
        }
    }
    const int64_t OC = d->oc;
    for (int64_t kb = 0; kb < x->nkb; kb++) {
        const int64_t c0 = kb * x->cb, cbl = op_min64(x->cb, d->c - c0);
        for (int64_t p = p0; p < p1; p++) {
            const float *wb = x->wp + (p * x->K + c0 * x->ntap) * 16;
            if (x->tbuf) {   /* packed here, the only task that reads it: it stays in L1 */
                float *tb = x->tbuf + (size_t)tid * (size_t)(x->cb * x->ntap * 16);
                op_d8_pack_chunk(x, p, kb, tb);
                wb = tb;
            }
            /* the range in nt tiles of 6 or 5 pixels (49: 4 x 6 + 5 x 5, not 8 x 6 + 1: a 1-pixel
               tile has 2 accumulators, its FMAs waiting on each other) */
            const int64_t nt = op_cdiv64(m1 - m0, OP_D8_NP);
            const int64_t base = (m1 - m0) / nt, extra = (m1 - m0) % nt, me = extra * (base + 1);
            float *yb = x->y + m0 * OC + p * 16;
            if (extra)   /* the first extra tiles have base + 1 pixels */
                op_d8_tiles_np(x, (int)base + 1, extra, px, c0, cbl, wb, yb, OC - p * 16, kb == 0,
                               kb == x->nkb - 1, p * 16);
            op_d8_tiles_np(x, (int)base, nt - extra, px + me, c0, cbl, wb, yb + me * OC,
                           OC - p * 16, kb == 0, kb == x->nkb - 1, p * 16);
        }
    }
}

/* 1x1 too: stride 1 (the GEMM's pack of A read and wrote the whole input; zen3, batch 8, 2 threads,
   x torch GEMM -> here: res2a_branch2a 0.75 -> 0.83, res2_branch2c 0.82 -> 0.89, res3_branch2a 0.89
   -> 1.07; 1 thread 0.93 -> 0.98, 1.06 -> 1.06, 0.98 -> 1.05, res4_branch2a 0.99 -> 1.05,
   res5a_branch2a batch 1 0.77 -> 0.86), strided only onto planes of at most OP_D8_1X1_S_MAXP
   pixels (res5a_branch1, 7 x 7: batch 1 1.08 -> 1.57 at 1 thread, 1.36 -> 1.62 at 2; the larger
   planes lost: res3a_branch1 batch 8 1.05 -> 0.85, res4a_branch1 1.02 -> 0.92 at 1 thread) */
#define OP_D8_1X1_S_MAXP 49
static int op_conv_d8_fits(const op_conv_desc *d)
{
    const int strided1x1 = d->kh * d->kw == 1 && (d->sh > 1 || d->sw > 1);
    return (op_conv_f32_opts & OP_CONV_NHWC_DIRECT8) && d->nhwc == 1 && d->groups == 1 &&
           d->c >= OP_D8_MIN_C && (!strided1x1 || d->oh * d->ow <= OP_D8_1X1_S_MAXP);
}

/* The direct route (returns threads used, -1 on allocation failure). */
static int op_conv2d_nhwc_d8_f32(const op_conv_desc *d, const void *x, int x_bf16, const float *w,
                                 const float *bias, float *y, int act, int nthreads)
{
    op_convq_geo q;
    op_convq_buf b = {0};
    op_d8_ctx c;
    c.ntap = d->kh * d->kw;
    int64_t *toff = (int64_t *)malloc(sizeof(int64_t) * (size_t)c.ntap);
    const int64_t OCP = op_roundup64(d->oc, 16);
    c.K = d->c * c.ntap;
    c.wp = NULL;
    c.tbuf = NULL;
    int used = -1;
    if (toff && op_convq_prepare(d, x, x_bf16, x_bf16, 16, OP_D8_NP, nthreads, &q, &b) == 0) {
        c.d = d;
        c.xq = (const float *)q.xq;
        c.rs = q.rs;
        c.is = q.is;
        for (int64_t t = 0; t < c.ntap; t++)
            toff[t] = (t / d->kw) * d->dh * q.rs + (t % d->kw) * d->dw * d->c;
        c.toff = toff;
        /* channel blocks of at most OP_D8_CHUNK bytes of weight panel, as even as multiples of 8
           allow */
        const int64_t cbmax = op_max64(1, op_min64(d->c, OP_D8_CHUNK / (c.ntap * 16 * 4)));
        c.cb = op_min64(d->c, op_roundup64(op_cdiv64(d->c, op_cdiv64(d->c, cbmax)), 8));
        c.nkb = op_cdiv64(d->c, c.cb);
        c.w = w;
        c.bias = bias;
        c.y = y;
        c.act = act;
        c.M = d->n * d->oh * d->ow;
        /* tasks: pixel ranges of up to OP_D8_MC, each split into groups of output-channel panels
           while there are fewer than 4 per thread (a small plane: the weight block stays in L1
           for a task's whole pixel range instead of a few tiles) */
        const int64_t T = nthreads < 1 ? 1 : nthreads, npan = OCP / 16;
        const int64_t pc = op_cdiv64(c.M, OP_D8_MC);
        c.mc = op_cdiv64(c.M, pc);
        c.pg = op_max64(1, op_min64(npan, op_cdiv64(4 * T, pc)));
        c.ppg = op_cdiv64(npan, c.pg);
        c.pg = op_cdiv64(npan, c.ppg);
        if (T > 1 && pc * c.pg < 4 * T)   /* still short of tasks: shorter pixel ranges */
            c.mc = op_cdiv64(c.M, op_cdiv64(4 * T, c.pg));
        /* one pixel range: each weight block is read by one task, which packs it itself (the
           packed weight through memory and back cost a third of res5_branch2b at batch 1); else
           packed once for all ranges */
        if (op_cdiv64(c.M, c.mc) == 1)
            c.tbuf = (float *)op_conv_scratch_alloc(sizeof(float) *
                                                    (size_t)(T * c.cb * c.ntap * 16));
        else
            c.wp = (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)(c.K * OCP));
        if (c.tbuf || c.wp) {
            if (c.wp) op_parallel_for(nthreads, npan, op_d8_pack_task, &c);
            used = op_parallel_for(nthreads, op_cdiv64(c.M, c.mc) * c.pg, op_d8_task, &c);
        }
    }
    op_convq_free(&b);
    op_conv_scratch_free(c.wp);
    op_conv_scratch_free(c.tbuf);
    free(toff);
    return used;
}
#endif

int op_conv2d_f32(const op_conv_desc *d, const void *x, int x_bf16, const float *w,
                  const float *bias, float *y, int act, const op_blocking *blk, int nthreads)
{
    const int64_t G = d->groups, cg = d->c / G, ocg = d->oc / G;
    const int64_t ohw = d->oh * d->ow, hw = d->h * d->w, K = cg * d->kh * d->kw;
    if (d->n <= 0 || ohw <= 0 || d->oc <= 0) return 1;
    const int rs = op_conv_stem_f32(d, x, x_bf16, w, bias, y, act, nthreads);   /* conv_stem.c */
    if (rs != 0) return rs;
    if (op_conv2d_f32_joint(d, x_bf16))   /* NCHW 1x1 over all images' pixels (above) */
        return op_conv2d_nchw1x1_joint_f32(d, (const float *)x, w, bias, y, act, blk, nthreads);
    op_conv_desc da;
    if (d->nhwc == 2 && op_conv2d_f32_a_in_place(d, x_bf16)) {   /* NCHW GEMM, weight in place */
        da = *d;
        da.nhwc = 0;
        d = &da;
    }
#if defined(OP_HAS_AVX512)
    if (d->nhwc == 0 && op_conv_n49_fits(d, x_bf16))   /* 49 pixels, every lane busy (above) */
        return op_conv2d_nchw1x1_n49_f32(d, (const float *)x, w, bias, y, act, blk, nthreads);
#endif
    if (d->nhwc == 0 && (d->sh > 1 || d->sw > 1) && op_conv2d_f32_a_in_place(d, x_bf16)) {
        /* strided: the sampled pixels copied (as the NHWC formulation does), then stride 1 */
        op_conv_desc dn = *d;
        dn.h = d->oh;
        dn.w = d->ow;
        dn.sh = dn.sw = 1;
        float *xs = (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)(d->n * d->c * ohw));
        if (!xs) return -1;
        op_conv_sub_ctx sc = {d, (const char *)x, (char *)xs, sizeof(float)};
        op_parallel_for(d->n * d->c * ohw >= (1 << 16) ? nthreads : 1, d->n * d->c, op_conv_sub_task, &sc);
        const int r = op_conv2d_f32(&dn, xs, 0, w, bias, y, act, blk, nthreads);
        op_conv_scratch_free(xs);
        return r;
    }
#if defined(OP_HAS_AVX512)
    if (op_conv_img_fits(d, x_bf16, nthreads)) {   /* image by image (OP_CONV_AS_NHWC_IMAGE) */
        const int ri = op_conv2d_f32_images(d, (const float *)x, w, bias, y, act, blk, nthreads);
        if (ri != 0) return ri;
    }
#endif
    if (d->nhwc == 2) {   /* NCHW through the NHWC formulation (above) */
        op_conv_desc dn;
        void *xt = op_conv_as_nhwc_input(d, x, x_bf16 ? 2 : 4, nthreads, &dn);
        float *yt = (float *)op_conv_scratch_alloc(sizeof(float) * (size_t)(d->n * ohw * d->oc));
        int r = -1;
        if (xt && yt) r = op_conv2d_f32(&dn, xt, x_bf16, w, bias, yt, act, blk, nthreads);
        if (r > 0) op_conv_transpose(yt, y, d->n, ohw, d->oc, sizeof(float), nthreads);
        op_conv_scratch_free(xt);
        op_conv_scratch_free(yt);
        return r;
    }
#if defined(OP_HAS_AVX512)
    if (d->nhwc == 1) {   /* k x k, A read in place (above) */
        const int r = op_conv2d_nhwc_brg_f32(d, x, x_bf16, w, bias, y, act, blk, nthreads);
        if (r != 0) return r;
    }
#endif
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
    if (op_conv_d8_fits(d))   /* k x k, the input read in place (above) */
        return op_conv2d_nhwc_d8_f32(d, x, x_bf16, w, bias, y, act, nthreads);
#endif
    const int inplace = !x_bf16 && d->kh == 1 && d->kw == 1 && d->sh == 1 && d->sw == 1 &&
                        d->pt == 0 && d->pl == 0 && d->oh == d->h && d->ow == d->w;

    op_gemm_ops ops = op_gemm_f32_ops;
#if defined(OP_HAS_AVX512)
    /* (rows 4 KiB apart, C a multiple of 1024, would put the 14 rows in one L1d set: packed) */
    if (inplace && d->nhwc && d->c % 1024 != 0) {
        ops.ukr_a = op_conv_ukr_a_f32;
        ops.ukr_a_bcast = 1;
    }
    /* NCHW 1x1: the weight (A) read in place (OP_CONV_NCHW1X1_A_INPLACE, above); rows 4 KiB apart
       (C a multiple of 1024): copied per block, row by row (op_conv_pack_a_rows_f32) */
    if (op_conv2d_f32_a_in_place(d, x_bf16)) {
        if (d->c % 1024 != 0) {
            ops.ukr_a = op_conv_ukr_a_f32;
            ops.ukr_a_bcast = 1;
        } else {
            ops.pack_a = op_conv_pack_a_rows_f32;
            ops.ukr = op_conv_ukr_rows_f32;
        }
    }
#endif
    if (!inplace) {
        ops.direct_b = 0;
        if (d->nhwc)
            ops.pack_a = op_conv_pack_a_nhwc_qf32;   /* (op_gemm_f32_ops has no ukr_a) */
        else
            ops.pack_b = x_bf16 ? op_conv_pack_b_nchw_bf16 : op_conv_pack_b_nchw_f32;
    }
    /* Groups with a bias: one driver call per group (the epilogue's bias is per call). */
    const int per_group = G > 1 && bias != NULL;
    const int64_t calls = per_group ? G : 1;
    const int joint = op_conv_joint(d);   /* one entry over all images' pixels (NHWC, no groups) */
    const int64_t batch = joint ? 1 : per_group ? d->n : d->n * G;
    int64_t *offs = (int64_t *)malloc(sizeof(int64_t) * (size_t)(3 * batch + d->kh * d->kw));
    if (!offs) return -1;
    int64_t *xo = offs, *wo = offs + batch, *yo = offs + 2 * batch;

    /* NCHW gathers from a padded, stride-phase-split copy of the input when it fits (see above) */
    op_convx_geo_f32 qx;
    float *xp = NULL;
    if (!inplace && !d->nhwc && !x_bf16) {
        xp = op_convx_prepare_f32(d, (const float *)x, &qx.hs, &qx.ws, &qx.plane_c, offs + 3 * batch,
                                  nthreads);
        if (xp) {
            qx.d = d;
            qx.xp = xp;
            qx.cg = cg;
            qx.tapoff = offs + 3 * batch;
            ops.pack_b = op_conv_pack_b_nchw_xp_f32;
        }
    }

    /* NHWC gathers from a padded (float32) copy of the input in the channel-block depth order (see
       "NHWC over a padded input"), the weight packed in place in the same order (1x1: W^T as it lies) */
    op_convq_geo qq;
    op_convq_buf qb = {NULL, NULL, NULL};
    op_blocking b16;
    if (!inplace && d->nhwc) {
        if (op_convq_prepare(d, x, x_bf16, x_bf16, 16, OP_F32_MR, nthreads, &qq, &qb) != 0) {
            op_convq_free(&qb);
            free(offs);
            return -1;
        }
        if (d->kh * d->kw > 1) ops.pack_b = op_conv_pack_b_nhwc_f32;
        b16 = blk ? *blk : ops.blk;
        b16.kc = op_convq_kc(d, 16, b16.kc > 0 ? b16.kc : ops.blk.kc);
        blk = &b16;
    }

    op_conv_geo q;
    q.d = d;
    q.x = x;
    q.cg = cg;
    q.ocg = ocg;
    int used = 1;
    for (int64_t call = 0; call < calls; call++) {
        q.g0 = per_group ? call : -1;
        qx.g0 = q.g0;
        qq.g0 = q.g0;
        for (int64_t bi = 0; bi < batch; bi++) {
            int64_t n, gi;
            op_conv_entry(&q, bi, &n, &gi);
            if (d->nhwc) {
                xo[bi] = n * hw * d->c + gi * cg;
                wo[bi] = gi * ocg * K;
                yo[bi] = n * ohw * d->oc + gi * ocg;
            } else {
                xo[bi] = (n * d->c + gi * cg) * hw;
                wo[bi] = gi * ocg * K;
                yo[bi] = (n * d->oc + gi * ocg) * ohw;
            }
        }
        op_epilogue epi;
        epi.bias = bias ? bias + (per_group ? call * ocg : 0) : NULL;
        epi.bias_stride = 1;
        epi.bias_axis = d->nhwc ? 1 : 0;
        epi.act = act;
        op_gemm_args g;
        memset(&g, 0, sizeof g);
        g.batch = batch;
        g.k = K;
        g.epi = (bias || act != OP_ACT_NONE) ? &epi : NULL;
        g.user = xp ? (const void *)&qx : (!inplace && d->nhwc) ? (const void *)&qq : (const void *)&q;
        g.c = y;
        g.c_off = yo;
        if (d->nhwc) {
            g.m = joint ? d->n * ohw : ohw; g.n = ocg;
            g.a = x; g.a_off = xo; g.rsa = d->c; g.csa = 1;     /* in place only when 1x1 */
            g.b = w; g.b_off = wo; g.rsb = 1; g.csb = K;          /* (OC, C/g, KH, KW) */
            g.rsc = d->oc; g.csc = 1;
        } else {
            g.m = ocg; g.n = ohw;
            g.a = w; g.a_off = wo; g.rsa = K; g.csa = 1;
            g.b = x; g.b_off = xo; g.rsb = hw; g.csb = 1;        /* in place only when 1x1 */
            g.rsc = ohw; g.csc = 1;
            g.b_direct = inplace && K <= OP_CONV_NCHW1X1_DIRECT_MAXK && ocg <= OP_CONV_NCHW1X1_DIRECT_MAXM &&
                         (op_conv_f32_opts & OP_CONV_NCHW1X1_DIRECT_B) != 0;
        }
        op_blocking bx;
        const int r = op_gemm_drive(&ops, &g, xp ? op_convx_blk(blk, &ops, &bx) : blk, nthreads);
        if (r < 0) {
            used = r;
            break;
        }
        if (r > used) used = r;
    }
    op_conv_scratch_free(xp);
    op_convq_free(&qb);
    free(offs);
    return used;
}

/* ---------------------------------------------------------------- float32 -> bfloat16 */

/* The bfloat16 output of a conv computed in float32: the shared conversion kernel (cvt_bf16.c). */
void op_conv_f32_to_bf16(const float *src, uint16_t *dst, int64_t n, int nthreads)
{
    op_cvt_f32_to_bf16(n, src, dst, n >= (1 << 18) ? nthreads : 1);
}
