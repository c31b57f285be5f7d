/* gemm_bf16.c: bfloat16 GEMM of one level, on the shared driver of gemm_f32.c (op_gemm_drive).

   Four packing / micro-kernel sets (op_gemm_ops), chosen by the level:
     widen   (generic, avx2, avx512_core; avx512_core_bf16 with the "widen_f32" variant, from
             OP_DP_WIDEN_MIN_M rows): bfloat16 widened to float32 while packing (2-byte loads,
             exact), then the level's float32 micro-kernel (op_ukr_f32) and its packed layouts.
     k32w    (avx512_core, and avx512_core_bf16 with "widen_f32": a prepacked weight, and a raw
             W^T): the float32 14 x 32 register block on k32 panels of B (below), widened in register.
     bf16dp  (avx512_core_bf16, and small M on avx512_core_amx): VDPBF16PS, 14 x 32 register block.
     amx     (avx512_core_amx, and the amx_emu build): TDPBF16PS tiles, 32 x 32 block (gemm_bf16_amx.c).
   bf16dp and amx share one packed layout ("k32"), so a prepacked weight serves both (and k32w reads
   its B panels: a prepacked bfloat16 weight is k32 at every AVX-512 level):
     A micro-panel (MR rows): per block of 32 depths kb, MR rows of 32 bfloat16:
         a[(kb*MR + i)*32 + kk] = A[i][kb*32 + kk]      (an AMX A tile: 16 rows, 64 bytes each)
     B micro-panel (32 columns): per block of 32 depths kb, two column halves jt of 16 K-pairs x 16
         columns x 2 (VNNI / AMX B-tile layout):
         b[kb*1024 + jt*512 + pr*32 + jj*2 + t] = B[kb*32 + 2*pr + t][jt*16 + jj]
   Depth is zero-padded to a multiple of 32 (k_align = 32): odd K and K not a multiple of 32 read
   zero pairs. A bfloat16 C is rounded once per finished tile by the driver (op_gemm_args.c16), after
   the epilogue, straight from the tile buffer when one KC block holds all of K. */

#if defined(__AVX512BF16__) && defined(OP_HAS_AVX512)
#define OP_BF16_HAS_DP 1
#endif
#if defined(OP_LEVEL_AVX512_CORE_AMX) || defined(OP_LEVEL_AMX_EMU)
#define OP_BF16_HAS_AMX 1
#endif
#if defined(OP_BF16_HAS_DP) || defined(OP_BF16_HAS_AMX)
#define OP_BF16_NATIVE 1
#endif

#define OP_K32_NR 32

#if defined(OP_BF16_HAS_DP)
/* Whether the small-M forms NK and PACKED multiply with VDPBF16PS (op_gemm_bf16_set_variants flag 1;
   set by onepath.ops._bf16 from the registry's BF16_VARIANTS rule for the host's microarchitecture). */
static int op_sm_dp = 0;
/* Where it is on, the VDPBF16PS form of a raw W^T (OP_SM_NK) also takes 5 to OP_SM_NKDP_MAX_M rows,
   in passes of OP_SM_MAX_M rows over each 32-row tile of W in turn, when the tile (32 rows of K)
   stays in L2 between passes: K <= OP_SM_NKDP_MAX_K (512 KiB). More rows or a deeper K: the driver,
   which packs all of W per call. Zen 4, K = N = 4096, 2026-12-02, GFLOP/s driver -> passes (torch
   2.13 beside them), 1 thread, M = 5 / 8 / 12 / 16 / 20 / 32 / 48: 33 / 46 / 62 / 68 / 69-77 /
   86-93 / 106-117 -> 59-64 / 90-99 / 91-102 / 105-115 / 112-129 / 128-133 / 132-138 (41-46 / 56-63 /
   74-83 / 86-94 / 98-111 / 126-133 / 146-157); 2 threads, M = 20 / 32 / 48: 67-72 / 100-104 /
   138-144 -> 125-162 / 155-161 / 171-184 (torch 127-186 / 225-239 / 263-284). */
#define OP_SM_NKDP_MAX_M 48
#define OP_SM_NKDP_MAX_K 8192
/* Likewise a prepacked weight (OP_SM_PACKED): 5 to OP_SM_PKDP_MAX_M rows in passes of OP_SM_MAX_M
   rows over each 32-column panel (K <= OP_SM_NKDP_MAX_K: the panel, 32 x K, stays in L2), instead
   of the driver. Zen 4, K = N = 4096, 2026-12-02, paired with torch 2.13 in one process, GFLOP/s
   driver -> passes (the raw weight's passes beside them), 1 thread, M = 5 / 8 / 16 / 32 / 48:
   47.5 / 67.5 / 114 / 143 / 174 -> 76 / 118 / 137 / 178 / 181 (62-75 / 99-106 / 122-131 / 127-150
   / 141-167); 2 threads M = 8 / 16 / 32 / 48: 132 / 184 / 260 / 265 -> 158 / 274 / 275 / 282. A
   prepacked weight was slower than the raw one below 32 rows. */
#define OP_SM_PKDP_MAX_M 48
#endif

/* ---------------------------------------------------------------- tile write-out */

/* C (+)= t[mr x nr] (row stride ldt) then the epilogue; AVX-512 rows when C rows are contiguous. */
static void op_bf16_tile_out(const float *t, int64_t ldt, int mr, int nr, float *c, int64_t rsc,
                             int64_t csc, int acc, const op_epilogue *epi)
{
#if defined(OP_HAS_AVX512)
    if (csc == 1 && nr <= 32) {
        op_epi512 e;
        op_epi512_init(&e, nr, epi);
        for (int i = 0; i < mr; i++)
            op_epi512_row(&e, c + i * rsc, i, _mm512_maskz_loadu_ps(e.k0, t + i * ldt),
                          _mm512_maskz_loadu_ps(e.k1, t + i * ldt + 16), nr, acc);
        return;
    }
#endif
    op_tile_store(t, ldt, mr, nr, c, rsc, csc, acc, epi);
}

/* ---------------------------------------------------------------- widen packs (float32 kernels) */

static void op_pack_a_bf16_widen(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc,
                                 int64_t p0, int64_t kc, int64_t kcp, void *dst)
{
    enum { MR = OP_F32_MR };
    const uint16_t *A = (const uint16_t *)g->a + (g->a_off ? g->a_off[bi] : 0);
    const int64_t rsa = g->rsa, csa = g->csa;
    float *d = (float *)dst;
    for (int64_t ir = 0; ir < mc; ir += MR, d += MR * kcp) {
        const int mr = (int)op_min64(MR, mc - ir);
        const uint16_t *src = A + (i0 + ir) * rsa + p0 * csa;
        for (int i = 0; i < MR; i++) {
            if (i < mr) {
                const uint16_t *s = src + i * rsa;
                for (int64_t p = 0; p < kc; p++) d[p * MR + i] = op_bf16_to_f32_1(s[p * csa]);
            } else {
                for (int64_t p = 0; p < kc; p++) d[p * MR + i] = 0.0f;
            }
            for (int64_t p = kc; p < kcp; p++) d[p * MR + i] = 0.0f;
        }
    }
}

static void op_pack_b_bf16_widen(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                                 int64_t kcp, int64_t j0, int64_t nc, void *dst)
{
    enum { NR = OP_F32_NR };
    const uint16_t *B = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t rsb = g->rsb, csb = g->csb;
    float *d = (float *)dst;
    for (int64_t jr = 0; jr < nc; jr += NR, d += NR * kcp) {
        const int nr = (int)op_min64(NR, nc - jr);
        const uint16_t *src = B + p0 * rsb + (j0 + jr) * csb;
        if (csb == 1 && nr == NR) {
            for (int64_t p = 0; p < kc; p++)
                op_cvt_bf16_to_f32_run(NR, src + p * rsb, d + p * NR);
        } else {
            for (int j = 0; j < NR; j++) {
                if (j < nr) {
                    const uint16_t *s = src + j * csb;
                    for (int64_t p = 0; p < kc; p++) d[p * NR + j] = op_bf16_to_f32_1(s[p * rsb]);
                } else {
                    for (int64_t p = 0; p < kc; p++) d[p * NR + j] = 0.0f;
                }
            }
        }
        for (int64_t p = kc; p < kcp; p++)
            for (int j = 0; j < NR; j++) d[p * NR + j] = 0.0f;
    }
}

static const op_gemm_ops op_bf16_widen_ops = {
    OP_F32_MR, OP_F32_NR, 1, sizeof(float), sizeof(float),
    op_pack_a_bf16_widen, op_pack_b_bf16_widen, op_ukr_f32,
    0, OP_F32_NR,
    {OP_F32_MC, OP_F32_KC, OP_F32_NC},
    0,
};

/* ---------------------------------------------------------------- k32 packs (bf16dp and amx; B also
   for k32w and a prepacked weight at every AVX-512 level: op_packed_geom) */

#if defined(OP_BF16_NATIVE)
static void op_pack_a_k32(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                          int64_t kc, int64_t kcp, uint16_t *d, const int MR)
{
    const uint16_t *A = (const uint16_t *)g->a + (g->a_off ? g->a_off[bi] : 0);
    const int64_t rsa = g->rsa, csa = g->csa;
    for (int64_t ir = 0; ir < mc; ir += MR, d += MR * kcp) {
        const int mr = (int)op_min64(MR, mc - ir);
        for (int64_t kb = 0; kb * 32 < kcp; kb++) {
            uint16_t *blk = d + kb * MR * 32;
            const int64_t kk0 = kb * 32;
            const int klen = (int)op_max64(0, op_min64(32, kc - kk0));
#if defined(OP_HAS_AVX512)
            if (csa == 1) {   /* one masked 64-byte copy per row */
                const __mmask32 km = (__mmask32)(((uint64_t)1 << klen) - 1);
                for (int i = 0; i < MR; i++) {
                    const __m512i v = i < mr ? _mm512_maskz_loadu_epi16(km, A + (i0 + ir + i) * rsa + p0 + kk0)
                                             : _mm512_setzero_si512();
                    _mm512_storeu_si512((void *)(blk + i * 32), v);
                }
                continue;
            }
#endif
            for (int i = 0; i < MR; i++) {
                uint16_t *row = blk + i * 32;
                int kk = 0;
                if (i < mr) {
                    const uint16_t *s = A + (i0 + ir + i) * rsa + (p0 + kk0) * csa;
                    if (csa == 1) {
                        memcpy(row, s, (size_t)klen * 2);
                        kk = klen;
                    } else {
                        for (; kk < klen; kk++) row[kk] = s[kk * csa];
                    }
                }
                for (; kk < 32; kk++) row[kk] = 0;
            }
        }
    }
}
#endif

#if defined(OP_BF16_NATIVE) || defined(OP_HAS_AVX512)
static void op_pack_b_k32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc, int64_t kcp,
                          int64_t j0, int64_t nc, void *dst)
{
    const uint16_t *B = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t rsb = g->rsb, csb = g->csb;
    uint16_t *d = (uint16_t *)dst;
#if defined(OP_HAS_AVX512)
    /* (row 2pr, row 2pr+1) x 32 columns -> two 16-column halves of interleaved K-pairs */
    const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                            39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
#endif
    /* row-major B (csb == 1): the full 32-deep blocks of groups of G full panels first, each row
       pair read as G * 64 contiguous bytes (one 64-byte column strip per panel at a time read B at
       16-21 GB/s on Zen 4); the loop below does the rest (kb from kdone for those panels) */
    int64_t gcols = 0, kdone = 0;
#if defined(OP_HAS_AVX512)
    if (csb == 1 && kc >= 32) {
#if defined(OP_LEVEL_AVX512_CORE_AMX)
        /* the block's whole width at once (Sapphire Rapids VM, 2026-12-05, 1 thread, median of 9
           against groups of four: 1024^3 1084 -> 1124, 2048^3 1100 -> 1168 GFLOP/s) */
        const int64_t G = op_max64(1, nc / OP_K32_NR);
#else
        const int64_t G = 4;   /* measured on Zen 4 (the whole width there: unmeasured) */
#endif
        kdone = kc / 32;
        gcols = nc / (G * OP_K32_NR) * (G * OP_K32_NR);
        for (int64_t jg = 0; jg < gcols; jg += G * OP_K32_NR) {
            const uint16_t *src = B + p0 * rsb + j0 + jg;
            uint16_t *dg = d + jg * kcp;
            for (int64_t kb = 0; kb < kdone; kb++) {
                for (int pr = 0; pr < 16; pr++) {
                    const uint16_t *r0 = src + (kb * 32 + 2 * pr) * rsb;
#pragma GCC unroll 4
                    for (int64_t q = 0; q < G; q++) {
                        const __m512i x0 = _mm512_loadu_si512((const void *)(r0 + q * 32));
                        const __m512i x1 = _mm512_loadu_si512((const void *)(r0 + rsb + q * 32));
                        uint16_t *o = dg + q * OP_K32_NR * kcp + kb * 1024 + pr * 32;
                        _mm512_storeu_si512((void *)o, _mm512_permutex2var_epi16(x0, lo_idx, x1));
                        _mm512_storeu_si512((void *)(o + 512), _mm512_permutex2var_epi16(x0, hi_idx, x1));
                    }
                }
            }
        }
    }
#endif
    for (int64_t jr = 0; jr < nc; jr += OP_K32_NR, d += OP_K32_NR * kcp) {
        const int nr = (int)op_min64(OP_K32_NR, nc - jr);
        const uint16_t *src = B + p0 * rsb + (j0 + jr) * csb;
#if defined(OP_HAS_AVX512)
        if (rsb == 1 && csb != 1) {
            /* B = W^T (a Linear / NHWC conv weight W[n][k]): each column is contiguous in k, its 32
               depths are 16 K-pair dwords; a 16-column half of a 32-deep block is the transpose of
               the 16 x 16 dword matrix (columns x K-pairs). One half of the panel at a time, along
               all of K: 16 rows of W streamed at once rather than 32, each prefetched into L2
               OP_PACK_WT_PF elements ahead (see there: Zen 4, 6.4 -> 9.3-10.9 GB/s) */
            for (int h = 0; h < 2; h++) {
                const int rows = (int)op_max64(0, op_min64(16, nr - 16 * h));
                for (int64_t kb = 0; kb * 32 < kcp; kb++) {
                    uint16_t *blk = d + kb * 1024 + h * 512;
                    const int64_t kk0 = kb * 32;
                    const int klen = (int)op_max64(0, op_min64(32, kc - kk0));
                    const __mmask32 km = (__mmask32)((((uint64_t)1 << klen) - 1));
                    __m512i r[16];
#pragma GCC unroll 16
                    for (int jj = 0; jj < 16; jj++) {
                        const uint16_t *s = src + (16 * h + jj) * csb + kk0;
                        if (jj < rows) {
                            _mm_prefetch((const char *)(s + OP_PACK_WT_PF), _MM_HINT_T1);
                            r[jj] = _mm512_maskz_loadu_epi16(km, (const void *)s);
                        } else {
                            r[jj] = _mm512_setzero_si512();
                        }
                    }
                    op_transpose16_epi32(r);
#pragma GCC unroll 16
                    for (int pr = 0; pr < 16; pr++) _mm512_storeu_si512((void *)(blk + pr * 32), r[pr]);
                }
            }
            continue;
        }
#endif
        for (int64_t kb = jr < gcols ? kdone : 0; kb * 32 < kcp; kb++) {
            uint16_t *blk = d + kb * 1024;
            const int64_t kk0 = kb * 32;
            const int klen = (int)op_max64(0, op_min64(32, kc - kk0));
#if defined(OP_HAS_AVX512)
            if (csb == 1) {
                /* row-major B, any depth and width: the column tail (nr < 32) and the rows past
                   the depth (kk >= klen) as zeros, by masked loads, where the element loop below
                   cost half of a batch of 21 x 32 x 21 products (768 of them: 1.17 ms) */
                const __mmask32 cm = nr >= 32 ? ~(__mmask32)0 : (__mmask32)((1u << nr) - 1u);
                for (int pr = 0; pr < 16; pr++) {
                    const uint16_t *r0 = src + (kk0 + 2 * pr) * rsb;
                    const __m512i x0 = 2 * pr < klen
                                           ? _mm512_maskz_loadu_epi16(cm, (const void *)r0)
                                           : _mm512_setzero_si512();
                    const __m512i x1 = 2 * pr + 1 < klen
                                           ? _mm512_maskz_loadu_epi16(cm, (const void *)(r0 + rsb))
                                           : _mm512_setzero_si512();
                    _mm512_storeu_si512((void *)(blk + pr * 32), _mm512_permutex2var_epi16(x0, lo_idx, x1));
                    _mm512_storeu_si512((void *)(blk + 512 + pr * 32), _mm512_permutex2var_epi16(x0, hi_idx, x1));
                }
                continue;
            }
#endif
            if (klen == 32 && rsb == 1 && nr == OP_K32_NR) {
                /* B = W^T (a Linear weight W[n][k]): each column is contiguous in k */
                for (int j = 0; j < OP_K32_NR; j++) {
                    const uint16_t *s = src + j * csb + kk0;
                    uint16_t *o = blk + (j >> 4) * 512 + (j & 15) * 2;
                    for (int pr = 0; pr < 16; pr++) {
                        uint32_t v;
                        memcpy(&v, s + 2 * pr, 4);
                        memcpy(o + pr * 32, &v, 4);
                    }
                }
                continue;
            }
            for (int pr = 0; pr < 16; pr++) {
                for (int t = 0; t < 2; t++) {
                    const int kk = 2 * pr + t;
                    for (int j = 0; j < OP_K32_NR; j++) {
                        uint16_t v = 0;
                        if (kk < klen && j < nr) v = src[(kk0 + kk) * rsb + j * csb];
                        blk[(j >> 4) * 512 + pr * 32 + (j & 15) * 2 + t] = v;
                    }
                }
            }
        }
    }
}
#endif

/* ---------------------------------------------------------------- bf16dp: VDPBF16PS micro-kernel */

#if defined(OP_BF16_HAS_DP)
#define OP_DP_MR 14
#define OP_DP_BPF 2048   /* B prefetch distance in the micro-kernel (elements: two 32-deep blocks) */

static void op_pack_a_dp(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                         int64_t kc, int64_t kcp, void *dst)
{
    op_pack_a_k32(g, bi, i0, mc, p0, kc, kcp, (uint16_t *)dst, OP_DP_MR);
}

/* Row i of a finished tile (x0: columns 0..15, x1: 16..31) to bfloat16 C row cr: the prepared
   epilogue (no accumulation), then one VCVTNE2PS2BF16 (round to nearest even) when no lane is NaN or
   subnormal (one VFPCLASSPS per vector), else op_cvt_f32_to_bf16_run's integer path (ml_dtypes'
   results for those). */
OP_INLINE void op_dp_row16(const op_epi512 *e, uint16_t *cr, int i, __m512 x0, __m512 x1, int nr)
{
    if (e->bias) {
        __m512 r0 = e->q0, r1 = e->q1;
        if (e->rowb) r0 = r1 = _mm512_set1_ps(e->rowb[i * e->rbs]);
        x0 = _mm512_add_ps(x0, r0);
        x1 = _mm512_add_ps(x1, r1);
    }
    if (e->slow_act) {
        x0 = (__m512)op_v16_act((op_v16f)x0, e->slow_act);
        x1 = (__m512)op_v16_act((op_v16f)x1, e->slow_act);
    } else if (e->relu) {  /* max(0, x): NaN stays NaN, as op_avx512_row_out */
        x0 = _mm512_max_ps(_mm512_setzero_ps(), x0);
        x1 = _mm512_max_ps(_mm512_setzero_ps(), x1);
    }
    if (OP_LIKELY(!op_bf16_special32(x0, x1))) {
        const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(x1, x0);
        if (e->full)
            _mm512_storeu_si512((void *)cr, h);
        else
            _mm512_mask_storeu_epi16((void *)cr, (__mmask32)e->k0 | ((__mmask32)e->k1 << 16), h);
        return;
    }
    float t[32] OP_ALIGNED(64);
    _mm512_store_ps(t, x0);
    _mm512_store_ps(t + 16, x1);
    op_cvt_f32_to_bf16_run(nr, t, cr);
}

/* Rows 0..mr-1 of a finished float tile t (row stride 32) to bfloat16 C (rows rsc16 apart), epilogue
   epi applied then rounded once (op_dp_row16). */
static OP_NOINLINE void op_dp_tile16_out(const float *t, int mr, int nr, const op_epilogue *epi,
                                         uint16_t *c16, int64_t rsc16)
{
    op_epi512 e;
    op_epi512_init(&e, nr, epi);
    for (int i = 0; i < mr; i++)
        op_dp_row16(&e, c16 + i * rsc16, i, _mm512_maskz_load_ps(e.k0, t + i * 32),
                    _mm512_maskz_load_ps(e.k1, t + i * 32 + 16), nr);   /* lanes >= nr: never written */
}

/* 14 x 32: per K-pair, two B vectors (16 columns x 2 depths each), one 32-bit broadcast of an A
   pair per row, 28 VDPBF16PS. Rows <= 4 (decode) use a second accumulator set for odd pairs to
   halve the dependency chains. lda = 0: a is a packed micro-panel; lda > 0: a = &A[i0][p0] of a
   row-major A read in place (rows lda elements apart, kcp == kc: no depth padding). OUT16 (a
   compile-time constant, acc 0): the tile goes straight to a bfloat16 C c16 (rows rsc16 apart,
   columns contiguous; c unused), epilogue applied then rounded once (op_dp_row16); else to the float
   C c (c16 unused). Each output has its own instances: with both write-outs in one function GCC
   spilled two accumulators inside the k loop (Zen 4, 512^3: 1.28 -> 1.15 ms in the kernel). */
OP_INLINE void op_ukr_dp_body(const int MRV, const int OUT16, int64_t kcp,
                              const uint16_t *OP_RESTRICT a, const int64_t lda,
                              const uint16_t *OP_RESTRICT b, float *c, int64_t rsc, int64_t csc,
                              int nr, int acc, const op_epilogue *epi, uint16_t *c16,
                              int64_t rsc16)
{
    const int64_t ars = lda ? lda : 32;                 /* A row stride, elements */
    const int64_t astep = lda ? 32 : OP_DP_MR * 32;     /* A advance per 32-deep block */
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    __m512 d0_0 = c0_0, d0_1 = c0_0, d1_0 = c0_0, d1_1 = c0_0, d2_0 = c0_0, d2_1 = c0_0,
           d3_0 = c0_0, d3_1 = c0_0;
    /* C is read/written only after the k loop: fetch its lines now (as the float32 kernel does);
       the float partial sums of a large product do not stay in cache between KC blocks */
    if (OUT16)
        for (int i = 0; i < MRV; i++) _mm_prefetch((const char *)(c16 + i * rsc16), _MM_HINT_T0);
    else if (csc == 1)
        for (int i = 0; i < MRV; i++) {
            _mm_prefetch((const char *)(c + i * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 31), _MM_HINT_T0);
        }
#define OP_BH(x) ((__m512bh)(x))
#define OP_R(i, PR, ACC)                                                                  \
    if (MRV > i) {                                                                        \
        int32_t av;                                                                       \
        memcpy(&av, a + i * ars + 2 * (PR), 4);                                           \
        const __m512i ai = _mm512_set1_epi32(av);                                         \
        ACC##i##_0 = _mm512_dpbf16_ps(ACC##i##_0, OP_BH(ai), OP_BH(b0));                  \
        ACC##i##_1 = _mm512_dpbf16_ps(ACC##i##_1, OP_BH(ai), OP_BH(b1));                  \
    }
#define OP_RS(i, PR) if (MRV <= 4) { OP_R(i, PR, d) } else { OP_R(i, PR, c) }
    /* software prefetch: the next 32-deep block of the A micro-panel, and the B micro-panel two
       blocks (4 KiB) ahead. A KC-deep B micro-panel (32 KiB at KC 512) does not stay in a 32 KiB L1d
       beside A, so B streams from L2 on every call; Zen 4, KC 1024: +3-5% at 1024^3 and 2048^3 */
    for (int64_t kb = 0; kb * 32 < kcp; kb++) {
        for (int i = 0; i < MRV; i++) _mm_prefetch((const char *)(a + astep + i * ars), _MM_HINT_T0);
        for (int pr = 0; pr < 16; pr += 2) {
            _mm_prefetch((const char *)(b + OP_DP_BPF + pr * 32), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + OP_DP_BPF + 512 + pr * 32), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + OP_DP_BPF + (pr + 1) * 32), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + OP_DP_BPF + 512 + (pr + 1) * 32), _MM_HINT_T0);
            {
                const __m512i b0 = _mm512_loadu_si512((const void *)(b + pr * 32));
                const __m512i b1 = _mm512_loadu_si512((const void *)(b + 512 + pr * 32));
                OP_R(0, pr, c) OP_R(1, pr, c) OP_R(2, pr, c) OP_R(3, pr, c) OP_R(4, pr, c)
                OP_R(5, pr, c) OP_R(6, pr, c) OP_R(7, pr, c) OP_R(8, pr, c) OP_R(9, pr, c)
                OP_R(10, pr, c) OP_R(11, pr, c) OP_R(12, pr, c) OP_R(13, pr, c)
            }
            {
                const __m512i b0 = _mm512_loadu_si512((const void *)(b + (pr + 1) * 32));
                const __m512i b1 = _mm512_loadu_si512((const void *)(b + 512 + (pr + 1) * 32));
                if (MRV <= 4) {
                    OP_R(0, pr + 1, d) OP_R(1, pr + 1, d) OP_R(2, pr + 1, d) OP_R(3, pr + 1, d)
                } else {
                    OP_R(0, pr + 1, c) OP_R(1, pr + 1, c) OP_R(2, pr + 1, c) OP_R(3, pr + 1, c)
                    OP_R(4, pr + 1, c) OP_R(5, pr + 1, c) OP_R(6, pr + 1, c) OP_R(7, pr + 1, c)
                    OP_R(8, pr + 1, c) OP_R(9, pr + 1, c) OP_R(10, pr + 1, c) OP_R(11, pr + 1, c)
                    OP_R(12, pr + 1, c) OP_R(13, pr + 1, c)
                }
            }
        }
        a += astep;
        b += 1024;
    }
#undef OP_RS
#undef OP_R
#undef OP_BH
    if (MRV <= 4) {
        c0_0 = _mm512_add_ps(c0_0, d0_0); c0_1 = _mm512_add_ps(c0_1, d0_1);
        c1_0 = _mm512_add_ps(c1_0, d1_0); c1_1 = _mm512_add_ps(c1_1, d1_1);
        c2_0 = _mm512_add_ps(c2_0, d2_0); c2_1 = _mm512_add_ps(c2_1, d2_1);
        c3_0 = _mm512_add_ps(c3_0, d3_0); c3_1 = _mm512_add_ps(c3_1, d3_1);
    }
    if (OUT16 && epi) {  /* bias / activation: from a float tile (keeps the k loop spill-free) */
        float t[OP_DP_MR * 32] OP_ALIGNED(64);
        OP_TILE14_STORE(t, MRV);
        op_dp_tile16_out(t, MRV, nr, epi, c16, rsc16);
        return;
    }
    if (OUT16) {  /* bfloat16 rows from the registers */
        op_epi512 e;
        op_epi512_init(&e, nr, NULL);
#define OP_W(i) \
    if (MRV > i) op_dp_row16(&e, c16 + i * rsc16, i, c##i##_0, c##i##_1, nr);
        OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5) OP_W(6)
        OP_W(7) OP_W(8) OP_W(9) OP_W(10) OP_W(11) OP_W(12) OP_W(13)
#undef OP_W
        return;
    }
    if (OP_LIKELY(csc == 1 && !epi)) {  /* rows written from the registers (an epilogue: the tile) */
        op_epi512 e;
        op_epi512_init(&e, nr, NULL);
#define OP_W(i) \
    if (MRV > i) op_epi512_row(&e, c + i * rsc, i, c##i##_0, c##i##_1, nr, acc);
        OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5) OP_W(6)
        OP_W(7) OP_W(8) OP_W(9) OP_W(10) OP_W(11) OP_W(12) OP_W(13)
#undef OP_W
        return;
    }
    float t[OP_DP_MR * 32] OP_ALIGNED(64);
    OP_TILE14_STORE(t, MRV);
    op_bf16_tile_out(t, 32, MRV, nr, c, rsc, csc, acc, epi);
}

/* instances: op_ukr_dp[16]_m<rows> (packed A) and op_ukr_dp[16]_r_m<rows> (A in place); "16": the
   bfloat16-C write-out (OUT16) */
#define OP_DP_INST(MRV, O16, SFX)                                                           \
    static OP_NOINLINE void op_ukr_dp##SFX##_m##MRV(int64_t kcp, const uint16_t *a, const uint16_t *b, \
                                             float *c, int64_t rsc, int64_t csc, int nr,    \
                                             int acc, const op_epilogue *epi,               \
                                             uint16_t *c16, int64_t rsc16)                  \
    {                                                                                       \
        op_ukr_dp_body(MRV, O16, kcp, a, 0, b, c, rsc, csc, nr, acc, epi, c16, rsc16);      \
    }                                                                                       \
    static OP_NOINLINE void op_ukr_dp##SFX##_r_m##MRV(int64_t kcp, const uint16_t *a, int64_t lda, \
                                               const uint16_t *b, float *c, int64_t rsc,      \
                                               int64_t csc, int nr, int acc,                  \
                                               const op_epilogue *epi, uint16_t *c16,         \
                                               int64_t rsc16)                                 \
    {                                                                                       \
        op_ukr_dp_body(MRV, O16, kcp, a, lda, b, c, rsc, csc, nr, acc, epi, c16, rsc16);    \
    }
#define OP_DP_INST2(MRV) OP_DP_INST(MRV, 0, ) OP_DP_INST(MRV, 1, 16)
OP_DP_INST2(1) OP_DP_INST2(2) OP_DP_INST2(3) OP_DP_INST2(4) OP_DP_INST2(5) OP_DP_INST2(6) OP_DP_INST2(7)
OP_DP_INST2(8) OP_DP_INST2(9) OP_DP_INST2(10) OP_DP_INST2(11) OP_DP_INST2(12) OP_DP_INST2(13)
OP_DP_INST2(14)
#undef OP_DP_INST2
#undef OP_DP_INST

typedef void (*op_ukr_dp_fn)(int64_t, const uint16_t *, const uint16_t *, float *, int64_t, int64_t,
                             int, int, const op_epilogue *, uint16_t *, int64_t);
static const op_ukr_dp_fn op_ukr_dp_table[OP_DP_MR] = {
    op_ukr_dp_m1, op_ukr_dp_m2, op_ukr_dp_m3, op_ukr_dp_m4, op_ukr_dp_m5, op_ukr_dp_m6, op_ukr_dp_m7,
    op_ukr_dp_m8, op_ukr_dp_m9, op_ukr_dp_m10, op_ukr_dp_m11, op_ukr_dp_m12, op_ukr_dp_m13,
    op_ukr_dp_m14,
};
static const op_ukr_dp_fn op_ukr_dp16_table[OP_DP_MR] = {
    op_ukr_dp16_m1, op_ukr_dp16_m2, op_ukr_dp16_m3, op_ukr_dp16_m4, op_ukr_dp16_m5, op_ukr_dp16_m6,
    op_ukr_dp16_m7, op_ukr_dp16_m8, op_ukr_dp16_m9, op_ukr_dp16_m10, op_ukr_dp16_m11, op_ukr_dp16_m12,
    op_ukr_dp16_m13, op_ukr_dp16_m14,
};

static void op_ukr_dp(int64_t kcp, const void *a, const void *b, int64_t ldb, float *c,
                      int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)ldb;
    op_ukr_dp_table[mr - 1](kcp, (const uint16_t *)a, (const uint16_t *)b, c, rsc, csc, nr, acc, epi,
                            NULL, 0);
}

static void op_ukr16_dp(int64_t kcp, const void *a, const void *b, int64_t ldb, uint16_t *c16,
                        int64_t rsc16, int mr, int nr, const op_epilogue *epi)
{
    (void)ldb;
    op_ukr_dp16_table[mr - 1](kcp, (const uint16_t *)a, (const uint16_t *)b, NULL, 0, 1, nr, 0, epi,
                            c16, rsc16);
}

static const op_gemm_ops op_bf16_dp_ops = {
    OP_DP_MR, OP_K32_NR, 32, 2, 2,
    op_pack_a_dp, op_pack_b_k32, op_ukr_dp,
    0, 2 * OP_K32_NR,
    {168, 512, 2048},
    0, 0, NULL, 0, NULL,
    1,   /* split_at_mr: rows <= 4 sum in another order (op_ukr_dp_body) */
};

/* A read in place ("aref" panels): for a row-major A (csa == 1) whose depth needs no padding (k a
   multiple of 32, so every KC block is), the A "pack" writes per micro-panel only where its rows lie
   in A (op_dp_aref, in the panel's slot of the A buffer) and the micro-kernel broadcasts the K pairs
   from there: no copy of A, whatever its alignment (broadcasts of 4 bytes), edges included. */
typedef struct {
    const uint16_t *a;   /* &A[first row of the panel][p0] */
    int64_t lda;         /* A's row stride (elements) */
} op_dp_aref;

static void op_pack_a_dp_ref(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                             int64_t kc, int64_t kcp, void *dst)
{
    (void)kc;
    const uint16_t *A = (const uint16_t *)g->a + (g->a_off ? g->a_off[bi] : 0);
    for (int64_t ir = 0; ir < mc; ir += OP_DP_MR) {
        op_dp_aref *r = (op_dp_aref *)((uint16_t *)dst + ir * kcp);
        r->a = A + (i0 + ir) * g->rsa + p0;
        r->lda = g->rsa;
    }
}

typedef void (*op_ukr_dp_r_fn)(int64_t, const uint16_t *, int64_t, const uint16_t *, float *, int64_t,
                               int64_t, int, int, const op_epilogue *, uint16_t *, int64_t);
static const op_ukr_dp_r_fn op_ukr_dp_r_table[OP_DP_MR] = {
    op_ukr_dp_r_m1, op_ukr_dp_r_m2, op_ukr_dp_r_m3, op_ukr_dp_r_m4, op_ukr_dp_r_m5, op_ukr_dp_r_m6,
    op_ukr_dp_r_m7, op_ukr_dp_r_m8, op_ukr_dp_r_m9, op_ukr_dp_r_m10, op_ukr_dp_r_m11, op_ukr_dp_r_m12,
    op_ukr_dp_r_m13, op_ukr_dp_r_m14,
};
static const op_ukr_dp_r_fn op_ukr_dp16_r_table[OP_DP_MR] = {
    op_ukr_dp16_r_m1, op_ukr_dp16_r_m2, op_ukr_dp16_r_m3, op_ukr_dp16_r_m4, op_ukr_dp16_r_m5,
    op_ukr_dp16_r_m6, op_ukr_dp16_r_m7, op_ukr_dp16_r_m8, op_ukr_dp16_r_m9, op_ukr_dp16_r_m10,
    op_ukr_dp16_r_m11, op_ukr_dp16_r_m12, op_ukr_dp16_r_m13, op_ukr_dp16_r_m14,
};

static void op_ukr_dp_ref(int64_t kcp, const void *a, const void *b, int64_t ldb, float *c,
                          int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)ldb;
    const op_dp_aref *r = (const op_dp_aref *)a;
    op_ukr_dp_r_table[mr - 1](kcp, r->a, r->lda, (const uint16_t *)b, c, rsc, csc, nr, acc, epi,
                              NULL, 0);
}

static void op_ukr16_dp_ref(int64_t kcp, const void *a, const void *b, int64_t ldb, uint16_t *c16,
                            int64_t rsc16, int mr, int nr, const op_epilogue *epi)
{
    (void)ldb;
    const op_dp_aref *r = (const op_dp_aref *)a;
    op_ukr_dp16_r_table[mr - 1](kcp, r->a, r->lda, (const uint16_t *)b, NULL, 0, 1, nr, 0, epi, c16,
                              rsc16);
}

static const op_gemm_ops op_bf16_dp_ref_ops = {
    OP_DP_MR, OP_K32_NR, 32, 2, 2,
    op_pack_a_dp_ref, op_pack_b_k32, op_ukr_dp_ref,
    0, 2 * OP_K32_NR,
    {168, 512, 2048},
    0, 0, NULL, 0, NULL,
    1,   /* split_at_mr: rows <= 4 sum in another order (op_ukr_dp_body) */
};

/* op_gemm_bf16_set_variants flag 2: the GEMM reads a row-major A in place (op_bf16_dp_ref_ops) */
static int op_dp_a_inplace = 0;
/* flag 4: a bfloat16 C is written by the micro-kernel from its registers (op_gemm_ops.ukr16) when
   one KC block holds all of K, instead of a float tile rounded by the driver */
static int op_dp_out16 = 0;

/* flag 8: with few rows (m <= OP_DP_THIN_M) the VDPBF16PS GEMM sweeps B in blocks of at most
   OP_DP_THIN_NC columns: the block of B that every row block of A passes over (KC x NC, 1 MiB of
   bfloat16 at KC 2048, against 8 MiB at NC 2048) is then read from cache after its first pass, and
   a raw W^T packed per call is read back from cache rather than from memory. Only the tiling
   changes (the same KC: the same sums, bit for bit). Zen 4 (EPYC VM, K = N = 4096, 2026-12-02,
   variant off / on alternated in one process with torch 2.13, GFLOP/s, torch in brackets):
   1 thread, raw W^T m = 49 / 64 / 128 / 256: 119 / 134 / 141 / 169 -> 146 / 151 / 165 / 184
   (154 / 163 / 189 / 205), prepacked m = 128 / 256: 174 / 186 -> 182 / 194; 2 threads, raw
   m = 49 / 64 / 128 / 256: 222 / 227 / 259 / 283 -> 264 / 260 / 305 / 352 (279 / 278 / 321 /
   317); these at MC 112. A prepacked B with all rows in one row block (m <= MC) keeps its NC (m = 49
   to 96: no gain; since zen4's MC 518, every prepacked B of at most 256 rows: 128 and 256 rows ran
   the same at MC 112 and 518, 210 / 213-217 GFLOP/s). Squares of 512-2048 (m above the limit) keep
   NC 2048: 1024^3 ran 181-189 at NC 128-256 against 201. */
#define OP_DP_THIN_M 256
#define OP_DP_THIN_NC 256
static int op_dp_thin_nc = 0;

/* flag 16: the driver fetches the next B micro-panel into L2 while the micro-kernel passes over the
   current one (op_gemm_ops.b_next_l2). A 2048-deep panel is 128 KiB; the first of its calls per
   row block (8 at MC 112, 37 at zen4's MC 518) read it from L3 (a packed 8 MiB KC x NC block does
   not stay in the VM's share of L3) or, prepacked, from memory. Zen 4 (EPYC VM, 2026-12-02, old and
   new build in alternate processes, 1 thread, paired with torch 2.13, GFLOP/s, torch in brackets;
   measured at MC 112): 2048^3 199 / 208 -> 208 / 214 (195-205), prepacked 512 x 4096 x 4096
   187 / 203 -> 203 / 207 (203-211). Prefetches only: the same results, bit for bit. */
static int op_dp_next_l2 = 0;

/* flag 32 (below the AMX level): a bfloat16 GEMM of at least OP_DP_WIDEN_MIN_M rows runs
   avx512_core's float32 ops on widened operands instead of the VDPBF16PS kernel: op_bf16_widen_ops
   for a row-major B (widened while packing), k32w for a raw W^T and a prepacked weight (k32 panels
   widened in register), with the blocking of avx512_core's row (onepath/ops/_bf16.py passes it):
   avx512_core's kernels, sums and bits, so a prepacked weight gives the raw weight's bits.
   Sapphire Rapids issues a 512-bit VDPBF16PS once per 2 cycles (16 products a cycle) and two
   512-bit FMAs per cycle (32), the widening done once per packed element. The Intel AMX VM,
   2026-12-03, 1 / 2 threads, GFLOP/s VDPBF16PS -> widened: raw (4096, 4096) weight m = 64: 97 / 194
   -> 136 / 277, m = 256: 110 / 221 -> 167 / 341; prepacked m = 64: 115 / 234 -> 170 / 382;
   1344 x 384 x 1536 raw 116 / 229 -> 175 / 282; 2048^3 114 / 228 -> 173 / 354. 49 rows as
   onepath.dask's _PAD_ROWS, so that a block of fewer rows, padded to 49, runs the kernel of the
   whole problem (the widening pack of a row-major B per call did not repay 16 rows: 64 -> 32). */
#define OP_DP_WIDEN_MIN_M 49   /* onepath/ops/_bf16.py WIDEN_MIN_M */
static int op_dp_widen = 0;
OP_INLINE int op_dp_widens(int64_t m) { return op_dp_widen && m >= OP_DP_WIDEN_MIN_M; }

/* blk, or (flag 8, a VDPBF16PS GEMM of at most OP_DP_THIN_M rows) a copy in tmp with NC clamped */
static const op_blocking *op_dp_blocking(const op_gemm_ops *ops, const op_gemm_args *g,
                                         const op_blocking *blk, op_blocking *tmp)
{
    if (!op_dp_thin_nc || g->m > OP_DP_THIN_M || (ops->ukr != op_ukr_dp && ops->ukr != op_ukr_dp_ref))
        return blk;
    if (blk) *tmp = *blk;
    else memset(tmp, 0, sizeof *tmp);
    /* a prepacked B whose rows fit one row block: its block is read once at any NC (no gain) */
    if (ops->b_prepacked && g->m <= (tmp->mc > 0 ? tmp->mc : ops->blk.mc)) return blk;
    const int64_t nc = tmp->nc > 0 ? tmp->nc : ops->blk.nc;
    tmp->nc = nc < OP_DP_THIN_NC ? nc : OP_DP_THIN_NC;
    return tmp;
}

#if defined(OP_LEVEL_AVX512_CORE_AMX)
static void op_ukr_amx(int64_t kcp, const void *a, const void *b, int64_t ldb, float *c,
                       int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi);
static void op_ukr16_amx(int64_t kcp, const void *a, const void *b, int64_t ldb, uint16_t *c16,
                         int64_t rsc16, int mr, int nr, const op_epilogue *epi);
#endif

/* ops (a copy of the VDPBF16PS set, or at the AMX level of the tile set) with ukr16 when flag 4 is
   on and b_next_l2 when flag 16 is */
static void op_dp_variant_ops(op_gemm_ops *ops)
{
#if defined(OP_LEVEL_AVX512_CORE_AMX)
    if (ops->ukr == op_ukr_amx) {
        ops->b_next_l2 = op_dp_next_l2;
        if (op_dp_out16) ops->ukr16 = op_ukr16_amx;
        return;
    }
#endif
    if (ops->ukr != op_ukr_dp && ops->ukr != op_ukr_dp_ref) return;
    ops->b_next_l2 = op_dp_next_l2;
    if (op_dp_out16) ops->ukr16 = ops->ukr == op_ukr_dp ? op_ukr16_dp : op_ukr16_dp_ref;
}
#endif

/* ---------------------------------------------------------------- k32w: float32 block on k32 panels */

#if defined(OP_HAS_AVX512)
/* A 32-bit lane holding a K-pair of bfloat16 values (the k32 layout) -> the even depth's value as a
   float32 (VPSLLD 16) or the odd depth's (VPANDD 0xFFFF0000): exact widening in register */
OP_INLINE __m512 op_sm_even(__m512i v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
OP_INLINE __m512 op_sm_odd(__m512i v)
{
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xFFFF0000u)));
}
#endif

#if defined(OP_HAS_AVX512) && !defined(OP_BF16_HAS_AMX)
/* k32w (avx512_core; avx512_core_bf16 with the "widen_f32" variant): the float32 register block
   (OP_F32_MR x 32) multiplying a float32-packed A by bfloat16 B in k32 panels: a prepacked weight's, read in place (op_gemm_packed), or a raw W^T packed
   per block by op_pack_b_k32 (op_bf16_pick_for). Like the widening ops it multiplies exact float32
   values, so it keeps their kernel name. Per K-pair of a panel, the two 16-column halves are
   widened exactly in register, the even depth by a shift (op_sm_even) and the odd one by a mask
   (op_sm_odd), each followed by its depth's FMAs for every row; 4 integer operations per 4 * MR FMAs.
   A: op_pack_a_bf16_widen's micro-panel (a[p * MR + i]), its depth zero padded to kcp, a multiple of
   32 (k_align) as B's is. The tile goes out through op_bf16_tile_out (accumulate, epilogue). Every
   row sums in the same order whatever mr, so threads may split M anywhere (split_at_mr 0). */
#define OP_K32W_PF 1024   /* B prefetch distance (elements: the next 32-deep block, 2 KiB) into L1. Zen 4,
                             --isa avx512_core, 1 thread, K = N = 4096, 2026-12-02, GFLOP/s at
                             M = 8 / 16 / 32 / 128 / 512: none 44 / 64-69 / 74-80 / 85-87 / 86-87,
                             1024 68-81 / 96-97 / 90-93 / 93-94 / 90-91, 2048 60-75 / 81-94 /
                             82-90 / 87-92 / 91-92 (the float32 panels it replaces: 63-67 / 83-88 /
                             75-82 / 82-88 / 84-94) */
OP_INLINE void op_ukr_k32w_body(const int MRV, int64_t kcp, const float *OP_RESTRICT a,
                                const uint16_t *OP_RESTRICT b, float *t)
{
    enum { MR = OP_F32_MR };
    __m512 c0[MR], c1[MR];
#pragma GCC unroll 14
    for (int i = 0; i < MRV; i++) c0[i] = c1[i] = _mm512_setzero_ps();
    for (int64_t kb = 0; kb < kcp; kb += 32, b += 1024) {
        const float *ak = a + kb * MR;
#pragma GCC unroll 2
        for (int pr = 0; pr < 16; pr++) {
            _mm_prefetch((const char *)(b + OP_K32W_PF + pr * 32), _MM_HINT_T0);
            _mm_prefetch((const char *)(b + OP_K32W_PF + 512 + pr * 32), _MM_HINT_T0);
            const __m512i v0 = _mm512_loadu_si512((const void *)(b + pr * 32));
            const __m512i v1 = _mm512_loadu_si512((const void *)(b + 512 + pr * 32));
            const float *ap = ak + 2 * pr * MR;
            const __m512 e0 = op_sm_even(v0), e1 = op_sm_even(v1);
#pragma GCC unroll 14
            for (int i = 0; i < MRV; i++) {
                const __m512 av = _mm512_set1_ps(ap[i]);
                c0[i] = _mm512_fmadd_ps(av, e0, c0[i]);
                c1[i] = _mm512_fmadd_ps(av, e1, c1[i]);
            }
            const __m512 o0 = op_sm_odd(v0), o1 = op_sm_odd(v1);
#pragma GCC unroll 14
            for (int i = 0; i < MRV; i++) {
                const __m512 av = _mm512_set1_ps(ap[MR + i]);
                c0[i] = _mm512_fmadd_ps(av, o0, c0[i]);
                c1[i] = _mm512_fmadd_ps(av, o1, c1[i]);
            }
        }
    }
#pragma GCC unroll 14
    for (int i = 0; i < MRV; i++) {
        _mm512_store_ps(t + i * 32, c0[i]);
        _mm512_store_ps(t + i * 32 + 16, c1[i]);
    }
}

#define OP_K32W_FN(R) \
    static void op_ukr_k32w_##R(int64_t kcp, const float *a, const uint16_t *b, float *t) \
    { op_ukr_k32w_body(R, kcp, a, b, t); }
OP_K32W_FN(1) OP_K32W_FN(2) OP_K32W_FN(3) OP_K32W_FN(4) OP_K32W_FN(5) OP_K32W_FN(6) OP_K32W_FN(7)
OP_K32W_FN(8) OP_K32W_FN(9) OP_K32W_FN(10) OP_K32W_FN(11) OP_K32W_FN(12) OP_K32W_FN(13) OP_K32W_FN(14)
#undef OP_K32W_FN
static void (*const op_ukr_k32w_table[OP_F32_MR])(int64_t, const float *, const uint16_t *, float *) = {
    op_ukr_k32w_1, op_ukr_k32w_2, op_ukr_k32w_3, op_ukr_k32w_4, op_ukr_k32w_5, op_ukr_k32w_6,
    op_ukr_k32w_7, op_ukr_k32w_8, op_ukr_k32w_9, op_ukr_k32w_10, op_ukr_k32w_11, op_ukr_k32w_12,
    op_ukr_k32w_13, op_ukr_k32w_14,
};

static void op_ukr_k32w(int64_t kcp, const void *a, const void *b, int64_t ldb, float *c, int64_t rsc,
                        int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)ldb;
    float t[OP_F32_MR * 32] OP_ALIGNED(64);
    if (csc == 1)   /* C is read after the k loop: fetch its lines now */
        for (int i = 0; i < mr; i++) {
            _mm_prefetch((const char *)(c + i * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 31), _MM_HINT_T0);
        }
    op_ukr_k32w_table[mr - 1](kcp, (const float *)a, (const uint16_t *)b, t);
    op_bf16_tile_out(t, 32, mr, nr, c, rsc, csc, acc, epi);
}

static const op_gemm_ops op_bf16_k32w_ops = {
    OP_F32_MR, OP_K32_NR, 32, sizeof(float), 2,
    op_pack_a_bf16_widen, op_pack_b_k32, op_ukr_k32w,
    0, 2 * OP_K32_NR,
    {OP_F32_MC, OP_F32_KC, OP_F32_NC},
    0,
};
#endif

/* ---------------------------------------------------------------- amx (real or emulated) */

#if defined(OP_BF16_HAS_AMX)
#include "gemm_bf16_amx.c"
#endif

/* ---------------------------------------------------------------- level selection */

#define OP_BF16_STR_(x) #x
#define OP_BF16_STR(x) OP_BF16_STR_(x)

#if defined(OP_LEVEL_AVX512_CORE_AMX)
#define OP_BF16_MR OP_AMX_MR
#define OP_BF16_NR OP_K32_NR
#define OP_BF16_KERNEL_NAME "gemm_bf16_amx_32x32"
#define OP_BF16_AMX_MIN_M 16   /* fewer rows: the VDPBF16PS kernel (tiles would be mostly empty) */
#elif defined(OP_LEVEL_AMX_EMU)
#define OP_BF16_MR OP_AMX_MR
#define OP_BF16_NR OP_K32_NR
#define OP_BF16_KERNEL_NAME "gemm_bf16_amx_emu_32x32"
#elif defined(OP_BF16_HAS_DP)
#define OP_BF16_MR OP_DP_MR
#define OP_BF16_NR OP_K32_NR
#define OP_BF16_KERNEL_NAME "gemm_bf16_avx512_bf16_14x32"
#else
#define OP_BF16_MR OP_F32_MR
#define OP_BF16_NR OP_F32_NR
#define OP_BF16_KERNEL_NAME "gemm_bf16_widen_" OP_LEVEL_NAME "_" OP_BF16_STR(OP_F32_MR) "x" OP_BF16_STR(OP_F32_NR)
#endif

/* The ops that run a bf16 product with m rows; *amx set when they are the tile kernel. */
static const op_gemm_ops *op_bf16_pick(int64_t m, int *amx)
{
    *amx = 0;
    (void)m;
#if defined(OP_LEVEL_AVX512_CORE_AMX)
    if (m < OP_BF16_AMX_MIN_M) return &op_bf16_dp_ops;
    *amx = 1;
    return &op_bf16_amx_ops;
#elif defined(OP_LEVEL_AMX_EMU)
    *amx = 1;
    return &op_bf16_amx_ops;
#elif defined(OP_BF16_HAS_DP)
    return &op_bf16_dp_ops;
#else
    return &op_bf16_widen_ops;
#endif
}

/* op_bf16_pick, with the VDPBF16PS kernel reading A in place where the variant is on and A allows
   it: row-major, k a multiple of 32 (no depth padding in any KC block), and rows not a multiple of
   2 KiB apart (the 14 rows of a panel would share one or two L1 sets of a 32 KiB 8-way L1d:
   2048^3 at 4 KiB rows ran 0.76x torch in place against 1.02x packed on Zen 4) */
static const op_gemm_ops *op_bf16_pick_for(const op_gemm_args *g, int *amx)
{
    const op_gemm_ops *ops = op_bf16_pick(g->m, amx);
#if defined(OP_HAS_AVX512) && !defined(OP_BF16_NATIVE)
    /* B = W^T (a raw Linear weight, rsb == 1): op_pack_b_k32 transposes it in registers, 16 x 16
       K-pairs at a time, where the widening pack goes element by element; the float32 block then
       reads the k32 panels (k32w). Zen 4, avx512_core, 1 thread, K = N = 4096, 2026-12-02, GFLOP/s
       at M = 8 / 16 / 32 / 128 / 512: 14-15 / 28 / 37 / 63 / 79-81 -> 23-29 / 33-35 / 49-50 / 79 /
       83-88. A row-major B keeps the widening pack (vector conversions) and the float32 kernel:
       k32w ran bf16 square 512-2048 at 80-88 GFLOP/s against its 90-94. */
    if (g->rsb == 1 && g->csb != 1) return &op_bf16_k32w_ops;
#endif
#if defined(OP_BF16_HAS_DP)
    if (ops == &op_bf16_dp_ops && op_dp_a_inplace && g->csa == 1 && g->k % 32 == 0 && (g->rsa * 2) % 2048 != 0)
        return &op_bf16_dp_ref_ops;
#endif
    return ops;
}

const char *op_gemm_bf16_kernel_for(int64_t m, int64_t k, int b_form)
{
    (void)m;
    (void)k;
    (void)b_form;
#if defined(OP_HAS_AVX512)
    /* m <= OP_SM_MAX_M (below): the small-M loops reading B in place (prepacked: AMX tiles at the
       AMX level); a B that fits none of their forms still takes the driver (rare: strided both ways) */
#if defined(OP_BF16_HAS_DP)
#if !defined(OP_LEVEL_AVX512_CORE_AMX)
    /* a prepacked weight and one row: the widening loop (op_sm_run: its VDPBF16PS form read slower) */
    if (m == 1 && op_sm_dp && b_form == 2) return "gemm_bf16_decode_" OP_LEVEL_NAME "_m4";
#endif
    if (m >= 1 && m <= 4 && op_sm_dp) return "gemm_bf16_decode_vdpbf16ps_" OP_LEVEL_NAME "_m4";
    if (m > 4 && m <= OP_SM_NKDP_MAX_M && k <= OP_SM_NKDP_MAX_K && op_sm_dp && b_form == 1)   /* passes of 4 rows */
        return "gemm_bf16_decode_vdpbf16ps_" OP_LEVEL_NAME "_m4";
#if !defined(OP_LEVEL_AVX512_CORE_AMX)
    if (m > 4 && m <= OP_SM_PKDP_MAX_M && k <= OP_SM_NKDP_MAX_K && op_sm_dp && b_form == 2)
        return "gemm_bf16_decode_vdpbf16ps_" OP_LEVEL_NAME "_m4";
#endif
#endif
    if (m >= 1 && m <= 4) return "gemm_bf16_decode_" OP_LEVEL_NAME "_m4";
#elif defined(OP_HAS_AVX2)
    /* the small-M loops of a raw B (a prepacked bfloat16 B: float32 panels of the driver) */
    if (m >= 1 && m <= 4 && b_form != 2) return "gemm_bf16_decode_" OP_LEVEL_NAME "_m4";
#endif
#if defined(OP_LEVEL_AVX512_CORE_AMX)
    if (m < OP_BF16_AMX_MIN_M) return "gemm_bf16_avx512_bf16_14x32";
#endif
#if defined(OP_BF16_HAS_DP) && !defined(OP_BF16_HAS_AMX)
    if (op_dp_widens(m))
        return "gemm_bf16_widen_" OP_LEVEL_NAME "_" OP_BF16_STR(OP_F32_MR) "x" OP_BF16_STR(OP_F32_NR);
#endif
    return OP_BF16_KERNEL_NAME;
}

int op_gemm_bf16_mr(void) { return OP_BF16_MR; }
int op_gemm_bf16_nr(void) { return OP_BF16_NR; }
const char *op_gemm_bf16_kernel_name(void) { return OP_BF16_KERNEL_NAME; }

/* ---------------------------------------------------------------- small M (decode): B read in place

   For m <= OP_SM_MAX_M rows (LLM decode, GEMV-like; up to 48 in passes of 4 rows for the
   VDPBF16PS forms of OP_SM_NK and OP_SM_PACKED, see OP_SM_NKDP_MAX_M and OP_SM_PKDP_MAX_M at the
   top of this file) the product is memory-bound: B is streamed once,
   straight from where it lies (no packing of B, no float32 scratch C), and threads split N in
   32-column multiples so every core streams its own part. Three forms of B:
     OP_SM_KN     B row-major (k x n, csb == 1; matmul(x, B)): blocks of OP_SM_KB rows swept across
                  the task's columns (OP_SM_KB concurrent row streams); the float32 partial sums of
                  the task's columns stay in a per-thread buffer (L1/L2) between blocks.
     OP_SM_NK     B = W^T with W (n x k) row-major (rsb == 1; linear with a raw weight): dot products
                  over contiguous K, OP_SM_J rows of W at once, horizontal sums at the end.
     OP_SM_PACKED B prepacked in the k32 layout (one contiguous stream per 32-column panel).
   Arithmetic: bfloat16 B is widened in register (even elements: VPSLLD 16, odd: VPANDD 0xFFFF0000)
   and multiplied by float32 A with FMA, at every AVX-512 level. On this project's Sapphire-Rapids
   host a 512-bit VDPBF16PS issues once per 2 cycles against 2 FMAs per cycle, so widen + 2 FMAs
   per 32 products costs the same as VDPBF16PS at m = 1 and half of it at m = 4 (where VDPBF16PS
   capped the stream below the memory bandwidth); the float32 products are also exact.
   A is copied once per call, widened to float32, zero padded to kp = k rounded up to 32 (in natural
   order for KN / PACKED, deinterleaved per 32-block (16 even, 16 odd) for NK). C (float32 or
   bfloat16, rounded once) is written from registers with the epilogue.
   avx2 runs OP_SM_NK and OP_SM_KN the same way on 256-bit vectors (op_sm_nk8_body, op_sm_kn8_body;
   x's rows side by side per 32-deep block / per depth); a prepacked bfloat16 B there is float32
   panels of the driver (op_sm_form: no OP_SM_PACKED). Before, avx2 took the driver, which widened
   and packed B per call: AMD EPYC Zen 3 VM, family 25 model 1, 2 cores, K = N = 4096, 2026-12-06,
   GB/s of W at 1 thread, m = 1 / 4, raw weight (NK) 3.1 / 2.7 -> 24-28 / 13-15, row-major B (KN)
   5.3 / 4.9 -> 22-24 / 12-14 (torch 2.13's linear beside them 10 / 2.7); 2 threads (fastest
   calls, the host shared with another benchmark) NK 3.7 / 3.4 -> 36-42 / 25-31, KN 6.7 / 5.9 ->
   28-31 / 17-19 (torch 12-14 / 3.9). W (32 MiB) is the size of the L3. */

#if defined(OP_HAS_AVX2)
#define OP_SM_MAX_M 4
#define OP_SM_KB 8              /* OP_SM_KN: rows per block (8 concurrent row streams; 16-64 measured
                                   slower at k = n = 4096, as was software prefetch of the rows) */
#define OP_SM_PPF 3072          /* OP_SM_PACKED vector loop: prefetch distance (elements), into L2
                                   (prefetcht1): the L1 prefetcher covers the near lines. Into L1
                                   (prefetcht0) the single far-ahead stream held Zen 4's L1 miss
                                   buffers: 18 GB/s at m = 1 against 25-28 into L2 (the raw-weight
                                   NK loop runs 17-26 there) */
#define OP_SM_XCH 4096          /* avx2, OP_SM_NK, m >= 2: floats of x per depth chunk (16 KiB, in
                                   L1 while a tile of W passes; all of K: x (m * 16 KiB at K = 4096)
                                   re-read from L2 per JV rows of W) */
#define OP_SM_KB8 8             /* avx2, OP_SM_KN: rows per block (4 / 6 / 16 / 32 measured slower
                                   at k = n = 4096, m = 1: 20 / 24 / 7 / 6 GB/s against 24) */
#define OP_SM_KN 0
#define OP_SM_NK 1
#define OP_SM_PACKED 2

typedef struct {
    const op_gemm_args *g;
    int form;
    int64_t kp;              /* k rounded up to 32: row length of xa */
    const float *xa;         /* batch * m rows of kp floats (A widened), zero padded */
    void *c;
    const int64_t *c_off;
    int64_t rsc, csc;
    int c_dtype;
    int64_t parts, cols;     /* tasks per batch entry, columns per task (multiple of 32) */
    float *scratch;          /* OP_SM_KN: per thread, m x cols floats */
    const uint16_t *xb;      /* AMX PACKED and the VDPBF16PS forms: A as bfloat16, m rows of kp,
                                zero padded */
    int dp;                  /* 1: the VDPBF16PS forms of OP_SM_NK and OP_SM_PACKED (op_sm_dp) */
    int64_t ppf;             /* OP_SM_PACKED widening loop: prefetch distance (elements) */
    int64_t r0;              /* first row of x / C of this pass (the passes of the VDPBF16PS
                                OP_SM_NK and OP_SM_PACKED forms; 0 otherwise) */
} op_sm_ctx;


/* Writes t[mr x nr] (row stride 32) to C rows r0..r0+mr-1 (x->r0: the pass; 0 outside the passes of
   the VDPBF16PS OP_SM_NK and OP_SM_PACKED forms), columns j..j+nr-1 of entry bi, epilogue and
   (bfloat16 C) the single rounding included. */
static void op_sm_out(const op_sm_ctx *x, int64_t bi, int64_t j, int mr, int nr, float *t)
{
    const op_gemm_args *g = x->g;
    const op_epilogue *epi = g->epi;
    op_epilogue te;
    if (epi && !epi->bias && epi->act == OP_ACT_NONE) epi = NULL;
    if (epi && epi->bias) {
        te = *epi;
        te.bias += (te.bias_axis != 0 ? j : x->r0) * te.bias_stride;
        epi = &te;
    }
    const int64_t off = (x->c_off ? x->c_off[bi] : 0) + x->r0 * x->rsc + j * x->csc;
    if (x->c_dtype == 0) {
        op_bf16_tile_out(t, 32, mr, nr, (float *)x->c + off, x->rsc, x->csc, 0, epi);
        return;
    }
    if (epi) op_bf16_tile_out(t, 32, mr, nr, t, 32, 1, 0, epi);
    op_tile_to_bf16(t, 32, 1, mr, nr, (uint16_t *)x->c + off, x->rsc, x->csc);
}

#if defined(OP_HAS_AVX512)
/* even-column lanes e (column 2q in lane q) and odd o (2q + 1) -> columns 0..15 and 16..31 */
OP_INLINE void op_sm_interleave(__m512 e, __m512 o, float *t)
{
    const __m512i i0 = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i i1 = _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    _mm512_store_ps(t, _mm512_permutex2var_ps(e, i0, o));
    _mm512_store_ps(t + 16, _mm512_permutex2var_ps(e, i1, o));
}

/* ---- OP_SM_PACKED: one 32-column panel, all of K, accumulators in registers */
OP_INLINE void op_sm_packed_body(const int MRV, const op_sm_ctx *x, int64_t bi, int64_t j0, int64_t j1)
{
    const int64_t kp = x->kp, m = x->g->m;
    const float *xa = x->xa + bi * m * kp;
    const uint16_t *B = (const uint16_t *)x->g->b;
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(64);
    const int64_t ppf = x->ppf;
    for (int64_t j = j0; j < j1; j += 32) {
        const uint16_t *bp = B + j * kp;
        __m512 ce[OP_SM_MAX_M][2], co[OP_SM_MAX_M][2];
#pragma GCC unroll 4
        for (int i = 0; i < MRV; i++) ce[i][0] = ce[i][1] = co[i][0] = co[i][1] = _mm512_setzero_ps();
        for (int64_t kb = 0; kb < kp; kb += 32, bp += 1024) {
#pragma GCC unroll 16
            for (int pr = 0; pr < 16; pr++) {
                _mm_prefetch((const char *)(bp + ppf + pr * 32), _MM_HINT_T1);
                _mm_prefetch((const char *)(bp + ppf + 512 + pr * 32), _MM_HINT_T1);
                const __m512i v0 = _mm512_load_si512((const void *)(bp + pr * 32));
                const __m512i v1 = _mm512_load_si512((const void *)(bp + 512 + pr * 32));
                const __m512 e0 = op_sm_even(v0), o0 = op_sm_odd(v0);
                const __m512 e1 = op_sm_even(v1), o1 = op_sm_odd(v1);
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) {
                    const __m512 a0 = _mm512_set1_ps(xa[i * kp + kb + 2 * pr]);
                    const __m512 a1 = _mm512_set1_ps(xa[i * kp + kb + 2 * pr + 1]);
                    ce[i][0] = _mm512_fmadd_ps(a0, e0, ce[i][0]);
                    ce[i][1] = _mm512_fmadd_ps(a0, e1, ce[i][1]);
                    co[i][0] = _mm512_fmadd_ps(a1, o0, co[i][0]);
                    co[i][1] = _mm512_fmadd_ps(a1, o1, co[i][1]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < MRV; i++) {
            _mm512_store_ps(t + i * 32, _mm512_add_ps(ce[i][0], co[i][0]));
            _mm512_store_ps(t + i * 32 + 16, _mm512_add_ps(ce[i][1], co[i][1]));
        }
        op_sm_out(x, bi, j, MRV, (int)op_min64(32, x->g->n - j), t);
    }
}

/* ---- OP_SM_NK: dot products of x rows with JV rows of W over contiguous K */
OP_INLINE void op_sm_nk_body(const int MRV, const int JV, const op_sm_ctx *x, int64_t bi, int64_t j0,
                             int64_t j1)
{
    const op_gemm_args *g = x->g;
    const int64_t kp = x->kp, m = g->m, n = g->n, k = g->k, ldw = g->csb;
    const float *xa = x->xa + bi * m * kp;
    const uint16_t *W = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t kfull = k / 32 * 32;
    const __mmask32 tail = (__mmask32)((1ull << (k - kfull)) - 1ull);
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(64);
    for (int64_t jc = j0; jc < j1; jc += 32) {
        const int nr = (int)op_min64(32, n - jc);
        for (int jj = 0; jj < nr; jj += JV) {
            const uint16_t *w[8];
#pragma GCC unroll 8
            for (int q = 0; q < JV; q++) w[q] = W + op_min64(jc + jj + q, n - 1) * ldw;
            __m512 acc[8][OP_SM_MAX_M];
#pragma GCC unroll 8
            for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) acc[q][i] = _mm512_setzero_ps();
            int64_t p = 0;
            for (; p <= k; p += 32) {
                __m512i wv[8];
                if (p < kfull) {
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++) {
                        _mm_prefetch((const char *)(w[q] + p + 384), _MM_HINT_T0);
                        wv[q] = _mm512_loadu_si512((const void *)(w[q] + p));
                    }
                } else if (p < k) {
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++) wv[q] = _mm512_maskz_loadu_epi16(tail, (const void *)(w[q] + p));
                } else {
                    break;
                }
#pragma GCC unroll 8
                for (int q = 0; q < JV; q++) {
                    const __m512 we = op_sm_even(wv[q]), wo = op_sm_odd(wv[q]);
#pragma GCC unroll 4
                    for (int i = 0; i < MRV; i++) {
                        acc[q][i] = _mm512_fmadd_ps(_mm512_load_ps(xa + i * kp + p), we, acc[q][i]);
                        acc[q][i] = _mm512_fmadd_ps(_mm512_load_ps(xa + i * kp + p + 16), wo, acc[q][i]);
                    }
                }
            }
#pragma GCC unroll 8
            for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) t[i * 32 + jj + q] = _mm512_reduce_add_ps(acc[q][i]);
        }
        op_sm_out(x, bi, jc, MRV, nr, t);
    }
}

#if defined(OP_BF16_HAS_DP)
/* ---- VDPBF16PS forms of OP_SM_NK and OP_SM_PACKED (x->dp: the registry's BF16_VARIANTS rule for
   the host's microarchitecture): A kept in bfloat16 (x->xb, natural order), one VDPBF16PS per 32
   products of a row instead of a widen and two FMAs. Where VDPBF16PS issues at the FMA rate (Zen 4:
   one 512-bit VDPBF16PS per cycle) this halves the arithmetic of m = 2..4; where it issues at half
   that rate (Sapphire Rapids) the widening loops above are the faster ones. Products are exact as
   in the widening loops; the two products of a K pair are added before the accumulation, and
   subnormal inputs count as zero (the level's documented VDPBF16PS behaviour).
   Zen 4 (EPYC, 1 thread, K = N = 4096, 2026-11-30): raw weight m = 1 / 4 from 26 / 67 to 38-47 /
   100 GFLOP/s, prepacked m = 4 from 97 to 160-185; prepacked m = 1 keeps the widening loop (its
   VDPBF16PS form read 27-31 GB/s against 33-38), with the far prefetch at 32 KiB (OP_SM_DP_PPF1:
   43-50 GB/s) where this variant is on. */
#define OP_SM_DP_KCH 2048       /* OP_SM_NK, m >= 2: depth chunk (m x 4 KiB of x stay in L1; all of
                                   K: x re-read from L2 per JV rows of W, 89 -> 99 GFLOP/s at m = 4
                                   with 1024; 1024 -> 2048, 4 KiB runs of each W row: Zen 4, K = N =
                                   4096, alternate processes, 2026-12-01, 1 thread m = 2 / 3 / 4
                                   64 / 95 / 114 -> 71 / 108 / 133 GFLOP/s, 2 threads 128 / 190 / 236
                                   -> 139 / 210 / 257; the same sums) */
#define OP_SM_DP_PPF 12288      /* OP_SM_PACKED: prefetch distance (elements, 24 KiB), into L2 (the
                                   widening loop's 3072 gave 132 GFLOP/s at m = 4, 12288 159) */
#define OP_SM_DP_PPF1 16384     /* OP_SM_PACKED, m = 1 (the widening loop) where the VDPBF16PS variant
                                   is on: prefetch distance 32 KiB into L2 (3072: 36-38 GB/s, below
                                   the raw weight's VDPBF16PS loop at 45-48; 16384: 43-50) */

OP_INLINE void op_sm_nk_dp_body(const int MRV, const int JV, const op_sm_ctx *x, int64_t bi,
                                int64_t j0, int64_t j1)
{
    const op_gemm_args *g = x->g;
    const int64_t kp = x->kp, m = g->m, n = g->n, k = g->k, ldw = g->csb;
    const uint16_t *xb = x->xb + (bi * m + x->r0) * kp;
    const uint16_t *W = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t kfull = k / 32 * 32;
    const __mmask32 tail = (__mmask32)((1ull << (k - kfull)) - 1ull);
    /* K in chunks whose MRV rows of x stay in L1 beside the W lines (x is re-read for every JV rows
       of W); the accumulators of the 32 rows of W of a tile wait in s between chunks */
    const int64_t kch = MRV == 1 ? k : OP_SM_DP_KCH;
    __m512 s[32 / JV][JV][MRV];
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(64);
    for (int64_t jc = j0; jc < j1; jc += 32) {
        const int nr = (int)op_min64(32, n - jc);
        for (int64_t p0 = 0; p0 < k; p0 += kch) {
            const int64_t p1 = op_min64(k, p0 + kch);
            for (int jj = 0; jj < nr; jj += JV) {
                const uint16_t *w[8];
#pragma GCC unroll 8
                for (int q = 0; q < JV; q++) w[q] = W + op_min64(jc + jj + q, n - 1) * ldw;
                /* prefetch into L2: what the next group of JV rows reads at the same depths (after
                   a chunk's last group, the next chunk of the tile's first rows); at m = 1 this
                   ran 35 -> 39 GB/s against a prefetch 2 KiB ahead along the same rows */
                const int64_t pfo = jj + JV < nr || p1 >= k ? JV * ldw : kch - jj * ldw;
                __m512 acc[8][OP_SM_MAX_M];
#pragma GCC unroll 8
                for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                    for (int i = 0; i < MRV; i++) acc[q][i] = p0 ? s[jj / JV][q][i] : _mm512_setzero_ps();
                for (int64_t p = p0; p < p1; p += 32) {
                    __m512i wv[8], xv[OP_SM_MAX_M];
                    if (p < kfull) {
#pragma GCC unroll 8
                        for (int q = 0; q < JV; q++) {
                            _mm_prefetch((const char *)(w[q] + p + pfo), _MM_HINT_T1);
                            wv[q] = _mm512_loadu_si512((const void *)(w[q] + p));
                        }
                    } else {
#pragma GCC unroll 8
                        for (int q = 0; q < JV; q++) wv[q] = _mm512_maskz_loadu_epi16(tail, (const void *)(w[q] + p));
                    }
#pragma GCC unroll 4
                    for (int i = 0; i < MRV; i++) xv[i] = _mm512_load_si512((const void *)(xb + i * kp + p));
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                        for (int i = 0; i < MRV; i++)
                            acc[q][i] = _mm512_dpbf16_ps(acc[q][i], (__m512bh)xv[i], (__m512bh)wv[q]);
                }
                if (p1 < k) {
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                        for (int i = 0; i < MRV; i++) s[jj / JV][q][i] = acc[q][i];
                } else {
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                        for (int i = 0; i < MRV; i++) t[i * 32 + jj + q] = _mm512_reduce_add_ps(acc[q][i]);
                }
            }
        }
        op_sm_out(x, bi, jc, MRV, nr, t);
    }
}

/* one 32-column panel: per K pair, the pair of each row broadcast against the panel's two
   16-column halves; even and odd pairs in separate accumulators (two chains per output vector) */
OP_INLINE void op_sm_packed_dp_body(const int MRV, const op_sm_ctx *x, int64_t bi, int64_t j0, int64_t j1)
{
    const int64_t kp = x->kp, m = x->g->m;
    const uint16_t *xb = x->xb + (bi * m + x->r0) * kp;
    const uint16_t *B = (const uint16_t *)x->g->b;
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(64);
    for (int64_t j = j0; j < j1; j += 32) {
        const uint16_t *bp = B + j * kp;
        __m512 ce[OP_SM_MAX_M][2], co[OP_SM_MAX_M][2];
#pragma GCC unroll 4
        for (int i = 0; i < MRV; i++) ce[i][0] = ce[i][1] = co[i][0] = co[i][1] = _mm512_setzero_ps();
        for (int64_t kb = 0; kb < kp; kb += 32, bp += 1024) {
#pragma GCC unroll 16
            for (int pr = 0; pr < 16; pr += 2) {
                _mm_prefetch((const char *)(bp + OP_SM_DP_PPF + pr * 32), _MM_HINT_T1);
                _mm_prefetch((const char *)(bp + OP_SM_DP_PPF + 512 + pr * 32), _MM_HINT_T1);
                _mm_prefetch((const char *)(bp + OP_SM_DP_PPF + (pr + 1) * 32), _MM_HINT_T1);
                _mm_prefetch((const char *)(bp + OP_SM_DP_PPF + 512 + (pr + 1) * 32), _MM_HINT_T1);
                const __m512i v0 = _mm512_load_si512((const void *)(bp + pr * 32));
                const __m512i v1 = _mm512_load_si512((const void *)(bp + 512 + pr * 32));
                const __m512i u0 = _mm512_load_si512((const void *)(bp + (pr + 1) * 32));
                const __m512i u1 = _mm512_load_si512((const void *)(bp + 512 + (pr + 1) * 32));
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) {
                    int32_t a0, a1;
                    memcpy(&a0, xb + i * kp + kb + 2 * pr, 4);
                    memcpy(&a1, xb + i * kp + kb + 2 * pr + 2, 4);
                    const __m512i s0 = _mm512_set1_epi32(a0), s1 = _mm512_set1_epi32(a1);
                    ce[i][0] = _mm512_dpbf16_ps(ce[i][0], (__m512bh)s0, (__m512bh)v0);
                    ce[i][1] = _mm512_dpbf16_ps(ce[i][1], (__m512bh)s0, (__m512bh)v1);
                    co[i][0] = _mm512_dpbf16_ps(co[i][0], (__m512bh)s1, (__m512bh)u0);
                    co[i][1] = _mm512_dpbf16_ps(co[i][1], (__m512bh)s1, (__m512bh)u1);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < MRV; i++) {
            _mm512_store_ps(t + i * 32, _mm512_add_ps(ce[i][0], co[i][0]));
            _mm512_store_ps(t + i * 32 + 16, _mm512_add_ps(ce[i][1], co[i][1]));
        }
        op_sm_out(x, bi, j, MRV, (int)op_min64(32, x->g->n - j), t);
    }
}
#endif

/* ---- OP_SM_KN: B rows in place; even / odd columns widened in separate accumulators */
OP_INLINE void op_sm_kn_body(const int MRV, const op_sm_ctx *x, int64_t bi, int64_t j0, int64_t j1,
                             float *acc)
{
    const op_gemm_args *g = x->g;
    const int64_t kp = x->kp, m = g->m, k = g->k, ldb = g->rsb;
    const float *xa = x->xa + bi * m * kp;
    const uint16_t *B = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t w = j1 - j0;                      /* acc: MRV rows of wr floats */
    const int64_t wr = op_roundup64(w, 32);
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(64);
    for (int64_t p0 = 0; p0 < k; p0 += OP_SM_KB) {
        const int64_t p1 = op_min64(k, p0 + OP_SM_KB);
        const int first = p0 == 0, last = p1 >= k;
        for (int64_t jc = 0; jc < w; jc += 32) {
            const int nr = (int)op_min64(32, w - jc);
            const __mmask32 cm = nr == 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1ull << nr) - 1ull);
            const uint16_t *bp = B + j0 + jc;
            float *ap = acc + jc;
            __m512 ce[OP_SM_MAX_M], co[OP_SM_MAX_M], de[OP_SM_MAX_M], dd[OP_SM_MAX_M];
#pragma GCC unroll 4
            for (int i = 0; i < MRV; i++) {
                de[i] = dd[i] = _mm512_setzero_ps();
                if (first) {
                    ce[i] = co[i] = _mm512_setzero_ps();
                } else {
                    ce[i] = _mm512_load_ps(ap + i * wr);
                    co[i] = _mm512_load_ps(ap + i * wr + 16);
                }
            }
            int64_t p = p0;
            if (nr == 32) {
                for (; p + 2 <= p1; p += 2) {
                    const uint16_t *r0 = bp + p * ldb;
                    const __m512i v0 = _mm512_loadu_si512((const void *)r0);
                    const __m512i v1 = _mm512_loadu_si512((const void *)(r0 + ldb));
                    const __m512 e0 = op_sm_even(v0), o0 = op_sm_odd(v0);
                    const __m512 e1 = op_sm_even(v1), o1 = op_sm_odd(v1);
#pragma GCC unroll 4
                    for (int i = 0; i < MRV; i++) {
                        const __m512 a0 = _mm512_set1_ps(xa[i * kp + p]), a1 = _mm512_set1_ps(xa[i * kp + p + 1]);
                        ce[i] = _mm512_fmadd_ps(a0, e0, ce[i]);
                        co[i] = _mm512_fmadd_ps(a0, o0, co[i]);
                        de[i] = _mm512_fmadd_ps(a1, e1, de[i]);
                        dd[i] = _mm512_fmadd_ps(a1, o1, dd[i]);
                    }
                }
            }
            for (; p < p1; p++) {  /* column tail, odd row count */
                const __m512i v0 = _mm512_maskz_loadu_epi16(cm, (const void *)(bp + p * ldb));
                const __m512 e0 = op_sm_even(v0), o0 = op_sm_odd(v0);
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) {
                    const __m512 a0 = _mm512_set1_ps(xa[i * kp + p]);
                    ce[i] = _mm512_fmadd_ps(a0, e0, ce[i]);
                    co[i] = _mm512_fmadd_ps(a0, o0, co[i]);
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < MRV; i++) {
                ce[i] = _mm512_add_ps(ce[i], de[i]);
                co[i] = _mm512_add_ps(co[i], dd[i]);
            }
            if (!last) {
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) {
                    _mm512_store_ps(ap + i * wr, ce[i]);
                    _mm512_store_ps(ap + i * wr + 16, co[i]);
                }
            } else {
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) op_sm_interleave(ce[i], co[i], t + i * 32);
                op_sm_out(x, bi, j0 + jc, MRV, nr, t);
            }
        }
    }
}

#define OP_SM_INST(MRV)                                                                          \
    static OP_NOINLINE void op_sm_packed_m##MRV(const op_sm_ctx *x, int64_t bi, int64_t j0,      \
                                                int64_t j1)                                      \
    {                                                                                            \
        op_sm_packed_body(MRV, x, bi, j0, j1);                                                   \
    }                                                                                            \
    static OP_NOINLINE void op_sm_nk_m##MRV(const op_sm_ctx *x, int64_t bi, int64_t j0,          \
                                            int64_t j1)                                          \
    {                                                                                            \
        op_sm_nk_body(MRV, MRV <= 2 ? 8 : 4, x, bi, j0, j1);                                     \
    }                                                                                            \
    static OP_NOINLINE void op_sm_kn_m##MRV(const op_sm_ctx *x, int64_t bi, int64_t j0,          \
                                            int64_t j1, float *acc)                              \
    {                                                                                            \
        op_sm_kn_body(MRV, x, bi, j0, j1, acc);                                                  \
    }
OP_SM_INST(1) OP_SM_INST(2) OP_SM_INST(3) OP_SM_INST(4)
#undef OP_SM_INST

#if defined(OP_BF16_HAS_DP)
#define OP_SM_DP_INST(MRV)                                                                       \
    static OP_NOINLINE void op_sm_packed_dp_m##MRV(const op_sm_ctx *x, int64_t bi, int64_t j0,   \
                                                   int64_t j1)                                   \
    {                                                                                            \
        op_sm_packed_dp_body(MRV, x, bi, j0, j1);                                                \
    }                                                                                            \
    static OP_NOINLINE void op_sm_nk_dp_m##MRV(const op_sm_ctx *x, int64_t bi, int64_t j0,       \
                                               int64_t j1)                                       \
    {                                                                                            \
        op_sm_nk_dp_body(MRV, MRV <= 2 ? 8 : 4, x, bi, j0, j1);                                  \
    }
OP_SM_DP_INST(1) OP_SM_DP_INST(2) OP_SM_DP_INST(3) OP_SM_DP_INST(4)
#undef OP_SM_DP_INST
static void (*const op_sm_packed_dp_table[OP_SM_MAX_M])(const op_sm_ctx *, int64_t, int64_t, int64_t) = {
    op_sm_packed_dp_m1, op_sm_packed_dp_m2, op_sm_packed_dp_m3, op_sm_packed_dp_m4};
static void (*const op_sm_nk_dp_table[OP_SM_MAX_M])(const op_sm_ctx *, int64_t, int64_t, int64_t) = {
    op_sm_nk_dp_m1, op_sm_nk_dp_m2, op_sm_nk_dp_m3, op_sm_nk_dp_m4,
};
#endif
#else /* avx2: the OP_SM_NK and OP_SM_KN forms on 256-bit vectors (no OP_SM_PACKED: op_sm_form).
   16 ymm registers: the register blocks below are sized to them (m = 4: 8 accumulators). m = 4
   takes 8 FMAs per 32 bytes of W: 13-15 GB/s on one Zen 3 core (16-17 with W in L3, about 2/3 of
   the FMA peak), where m = 1 streams 24-28 */

/* 16 bfloat16 in 8 32-bit lanes -> the even element of each lane as a float32 (VPSLLD 16) or the
   odd one (VPAND 0xFFFF0000): exact widening in register, as op_sm_even / op_sm_odd */
OP_INLINE __m256 op_sm_even8(__m256i v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
OP_INLINE __m256 op_sm_odd8(__m256i v)
{
    return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xFFFF0000u)));
}

/* v stays in a register: GCC would fold each use of a loaded x vector back into its FMAs as a
   memory operand (one load per FMA again) */
#define OP_SM_KEEP(v) __asm__("" : "+x"(v))

/* sum of the 8 lanes, in one fixed order */
OP_INLINE float op_sm_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* ---- OP_SM_NK (avx2): one 32-deep step of JV rows of W (w[q] + p) against MRV rows of x (xs: the
   step's block of xa, MRV rows of 32 floats, each 16 even depths then 16 odd: op_sm_run). Each W
   row is two 16-element loads; the even depths of load h meet xs[8h..8h+7], the odd ones
   xs[16+8h..]. From 2 rows of x each x vector is loaded once and meets the JV widened rows of W
   (the odd halves widened from a second load rather than a register per row, so that JV * MRV
   accumulators, JV widened vectors, x and the mask fit the 16 ymm registers): one x load per FMA,
   as m = 1 runs, kept Zen 3's m = 4 below its FMA rate (two 256-bit loads per cycle). */
OP_INLINE void op_sm_nk8_step(const int MRV, const int JV, __m256 acc[][OP_SM_MAX_M],
                              const uint16_t *const *w, int64_t p, const float *xs)
{
    if (MRV == 1) {
#pragma GCC unroll 8
        for (int q = 0; q < JV; q++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(w[q] + p + 16 * h));
                acc[q][0] = _mm256_fmadd_ps(_mm256_load_ps(xs + 8 * h), op_sm_even8(v), acc[q][0]);
                acc[q][0] = _mm256_fmadd_ps(_mm256_load_ps(xs + 16 + 8 * h), op_sm_odd8(v),
                                            acc[q][0]);
            }
        return;
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        __m256 wv[8];
#pragma GCC unroll 8
        for (int q = 0; q < JV; q++)
            wv[q] = op_sm_even8(_mm256_loadu_si256((const __m256i *)(w[q] + p + 16 * h)));
#pragma GCC unroll 4
        for (int i = 0; i < MRV; i++) {
            __m256 xe = _mm256_load_ps(xs + i * 32 + 8 * h);
            OP_SM_KEEP(xe);
#pragma GCC unroll 8
            for (int q = 0; q < JV; q++) acc[q][i] = _mm256_fmadd_ps(xe, wv[q], acc[q][i]);
        }
#pragma GCC unroll 8
        for (int q = 0; q < JV; q++)
            wv[q] = op_sm_odd8(_mm256_loadu_si256((const __m256i *)(w[q] + p + 16 * h)));
#pragma GCC unroll 4
        for (int i = 0; i < MRV; i++) {
            __m256 xo = _mm256_load_ps(xs + i * 32 + 16 + 8 * h);
            OP_SM_KEEP(xo);
#pragma GCC unroll 8
            for (int q = 0; q < JV; q++) acc[q][i] = _mm256_fmadd_ps(xo, wv[q], acc[q][i]);
        }
    }
}

/* dot products of MRV x rows with JV rows of W over contiguous K, JV * MRV accumulators; the K tail
   (k % 32) of the JV rows is copied into a zeroed buffer (AVX2 has no 16-bit masked load) and meets
   xa's zero padding */
OP_INLINE void op_sm_nk8_body(const int MRV, const int JV, const op_sm_ctx *x, int64_t bi,
                              int64_t j0, int64_t j1)
{
    const op_gemm_args *g = x->g;
    const int64_t kp = x->kp, m = g->m, n = g->n, k = g->k, ldw = g->csb;
    const float *xa = x->xa + bi * m * kp;
    const uint16_t *W = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t kfull = k / 32 * 32;
    /* depth chunk: its MRV rows of x (OP_SM_XCH floats) stay in L1 while the 32 rows of W of a
       tile pass; the tile's accumulators wait in s between chunks (the same sums, same order) */
    const int64_t kch = MRV == 1 ? k : OP_SM_XCH / MRV / 32 * 32;
    __m256 s[(32 + JV - 1) / JV][JV][MRV];
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(32);
    uint16_t tail[8][32] OP_ALIGNED(32);
    for (int64_t jc = j0; jc < j1; jc += 32) {
        const int nr = (int)op_min64(32, n - jc);
        for (int64_t p0 = 0; p0 < k; p0 += kch) {
            const int64_t p1 = op_min64(kfull, p0 + kch);
            const int lastc = p0 + kch >= k;
            for (int jj = 0; jj < nr; jj += JV) {
                const uint16_t *w[8];
#pragma GCC unroll 8
                for (int q = 0; q < JV; q++) w[q] = W + op_min64(jc + jj + q, n - 1) * ldw;
                /* m >= 2: prefetch into L2 what the next group of JV rows reads at the same depths
                   (after a tile's last group: the next chunk of its first rows, or the next
                   tile's); m = 2 / 3 ran 17 / 13 -> 23 / 19 GB/s against a prefetch along the
                   rows (m = 1: 28 against 14 with this one). m = 1 prefetches nothing: its JV = 8
                   rows are 8 sequential streams the hardware prefetchers follow, and a prefetch
                   384 elements along each row into L1 cost time (Zen 3, 1 x 4096 x 4096, paired in
                   one process, 2026-12-07: x1.06-1.20 without it at 1 thread over four runs,
                   1.10-1.17 at 2 threads; K = N = 1024 / 8192: 1.08-1.11 / 1.14-1.18) */
                const int64_t pfo = jj + JV < nr ? JV * ldw
                                    : lastc ? (32 - jj) * ldw - p0 : kch - jj * ldw;
                __m256 acc[8][OP_SM_MAX_M];
#pragma GCC unroll 8
                for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                    for (int i = 0; i < MRV; i++)
                        acc[q][i] = p0 ? s[jj / JV][q][i] : _mm256_setzero_ps();
                for (int64_t p = p0; p < p1; p += 32) {
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++)
                        if (MRV > 1) _mm_prefetch((const char *)(w[q] + p + pfo), _MM_HINT_T1);
                    op_sm_nk8_step(MRV, JV, acc, w, p, xa + p * MRV);
                }
                if (lastc && kfull < k) {
                    const uint16_t *tp[8];
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++) {
                        memset(tail[q], 0, sizeof tail[q]);
                        memcpy(tail[q], w[q] + kfull, (size_t)(k - kfull) * 2);
                        tp[q] = tail[q];
                    }
                    op_sm_nk8_step(MRV, JV, acc, tp, 0, xa + kfull * MRV);
                }
                if (!lastc) {
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                        for (int i = 0; i < MRV; i++) s[jj / JV][q][i] = acc[q][i];
                } else {
#pragma GCC unroll 8
                    for (int q = 0; q < JV; q++)
#pragma GCC unroll 4
                        for (int i = 0; i < MRV; i++)
                            if (jj + q < 32) t[i * 32 + jj + q] = op_sm_hsum8(acc[q][i]);
                }
            }
        }
        op_sm_out(x, bi, jc, MRV, nr, t);
    }
}

/* ---- OP_SM_KN (avx2): R rows of B (r[0..R-1], NV * 16 columns each) into MRV rows of
   accumulators, even and odd columns apart (ce / co), one set per row of the step (R = 2: two
   chains per vector) */
OP_INLINE void op_sm_kn8_step(const int MRV, const int NV, const int R,
                              __m256 ce[][2][OP_SM_MAX_M], __m256 co[][2][OP_SM_MAX_M],
                              const uint16_t *const *r, const float *xa)
{
#pragma GCC unroll 2
    for (int s = 0; s < R; s++) {
        __m256 e[2], o[2];
#pragma GCC unroll 2
        for (int v = 0; v < NV; v++) {
            const __m256i b = _mm256_loadu_si256((const __m256i *)(r[s] + 16 * v));
            e[v] = op_sm_even8(b);
            o[v] = op_sm_odd8(b);
        }
#pragma GCC unroll 4
        for (int i = 0; i < MRV; i++) {
            const __m256 a = _mm256_broadcast_ss(xa + s * MRV + i);
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++) {
                ce[s][v][i] = _mm256_fmadd_ps(a, e[v], ce[s][v][i]);
                co[s][v][i] = _mm256_fmadd_ps(a, o[v], co[s][v][i]);
            }
        }
    }
}

/* blocks of OP_SM_KB rows swept across the task's columns NV * 16 at a time (R rows per step, the
   last rows of a block one at a time), 2 * NV * MRV * R accumulators (of the 16 ymm registers); the
   float32 partial sums of the columns wait in acc (MRV rows of wr floats, each 16 columns as 8 even
   then 8 odd) between blocks. A column tail (the last task's n % (NV * 16) columns) reads its rows
   through a zeroed buffer (AVX2 has no 16-bit masked load) with the same steps: every column sums
   its products in the same order, wherever the task boundaries lie. */
OP_INLINE void op_sm_kn8_body(const int MRV, const int NV, const int R, const op_sm_ctx *x,
                              int64_t bi, int64_t j0, int64_t j1, float *acc)
{
    const op_gemm_args *g = x->g;
    const int64_t kp = x->kp, m = g->m, k = g->k, ldb = g->rsb;
    const float *xa = x->xa + bi * m * kp;
    const uint16_t *B = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t w = j1 - j0;
    const int64_t wr = op_roundup64(w, 32);
    const int cw = 16 * NV;
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(32);
    uint16_t rb[2][32] OP_ALIGNED(32);
    for (int64_t p0 = 0; p0 < k; p0 += OP_SM_KB8) {
        const int64_t p1 = op_min64(k, p0 + OP_SM_KB8);
        const int first = p0 == 0, last = p1 >= k;
        for (int64_t jc = 0; jc < w; jc += cw) {
            const int nr = (int)op_min64(cw, w - jc);
            const uint16_t *bp = B + j0 + jc;
            float *ap = acc + jc;
            __m256 ce[2][2][OP_SM_MAX_M], co[2][2][OP_SM_MAX_M];
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) {
                    ce[1][v][i] = co[1][v][i] = _mm256_setzero_ps();
                    if (first) {
                        ce[0][v][i] = co[0][v][i] = _mm256_setzero_ps();
                    } else {
                        ce[0][v][i] = _mm256_load_ps(ap + i * wr + 16 * v);
                        co[0][v][i] = _mm256_load_ps(ap + i * wr + 16 * v + 8);
                    }
                }
            int64_t p = p0;
            if (nr == cw) {
                for (; p + R <= p1; p += R) {
                    const uint16_t *r[2] = {bp + p * ldb, bp + (p + R - 1) * ldb};
                    op_sm_kn8_step(MRV, NV, R, ce, co, r, xa + p * MRV);
                }
                for (; p < p1; p++) {
                    const uint16_t *r[2] = {bp + p * ldb, NULL};
                    op_sm_kn8_step(MRV, NV, 1, ce, co, r, xa + p * MRV);
                }
            } else {
                memset(rb, 0, sizeof rb);
                for (; p + R <= p1; p += R) {
#pragma GCC unroll 2
                    for (int s = 0; s < R; s++) memcpy(rb[s], bp + (p + s) * ldb, (size_t)nr * 2);
                    const uint16_t *r[2] = {rb[0], rb[1]};
                    op_sm_kn8_step(MRV, NV, R, ce, co, r, xa + p * MRV);
                }
                for (; p < p1; p++) {
                    memcpy(rb[0], bp + p * ldb, (size_t)nr * 2);
                    const uint16_t *r[2] = {rb[0], NULL};
                    op_sm_kn8_step(MRV, NV, 1, ce, co, r, xa + p * MRV);
                }
            }
#pragma GCC unroll 2
            for (int v = 0; v < NV; v++)
#pragma GCC unroll 4
                for (int i = 0; i < MRV; i++) {
                    __m256 e = ce[0][v][i], o = co[0][v][i];
                    if (R == 2) {
                        e = _mm256_add_ps(e, ce[1][v][i]);
                        o = _mm256_add_ps(o, co[1][v][i]);
                    }
                    if (!last) {
                        _mm256_store_ps(ap + i * wr + 16 * v, e);
                        _mm256_store_ps(ap + i * wr + 16 * v + 8, o);
                    } else {   /* even / odd lanes -> columns 0..7 and 8..15 of the 16 */
                        const __m256 lo = _mm256_unpacklo_ps(e, o), hi = _mm256_unpackhi_ps(e, o);
                        _mm256_store_ps(t + i * 32 + 16 * v, _mm256_permute2f128_ps(lo, hi, 0x20));
                        _mm256_store_ps(t + i * 32 + 16 * v + 8,
                                        _mm256_permute2f128_ps(lo, hi, 0x31));
                    }
                }
            if (last) op_sm_out(x, bi, j0 + jc, MRV, nr, t);
        }
    }
}

/* (MRV, JV: rows of W per NK group, NV: 16-column vectors per KN chunk, R: KN rows per step), by
   accumulators: NK m = 1 / 2 / 3 / 4: 8 / 8 / 9 / 8 (m = 3 with JV = 3 reads a 33rd row per tile
   and discards it), KN 4 / 8 / 12 / 8. Zen 3, K = N = 4096, 1 thread, NK m = 2 / 3 / 4: the first
   form (JV = 6 / 4 / 3, x loaded per FMA, all of K per group) 17 / 14 / 12 GB/s, this one 23 / 19
   / 14; m = 4 with JV = 3 (12 accumulators, odd halves by two shifts) ran as JV = 2. */
#define OP_SM_INST8(MRV, JV, NV, R)                                                              \
    static OP_NOINLINE void op_sm_nk_m##MRV(const op_sm_ctx *x, int64_t bi, int64_t j0,          \
                                            int64_t j1)                                          \
    {                                                                                            \
        op_sm_nk8_body(MRV, JV, x, bi, j0, j1);                                                  \
    }                                                                                            \
    static OP_NOINLINE void op_sm_kn_m##MRV(const op_sm_ctx *x, int64_t bi, int64_t j0,          \
                                            int64_t j1, float *acc)                              \
    {                                                                                            \
        op_sm_kn8_body(MRV, NV, R, x, bi, j0, j1, acc);                                          \
    }
OP_SM_INST8(1, 8, 1, 2) OP_SM_INST8(2, 4, 1, 2) OP_SM_INST8(3, 3, 2, 1) OP_SM_INST8(4, 2, 1, 1)
#undef OP_SM_INST8
#endif /* OP_HAS_AVX512: the bodies */

#if defined(OP_LEVEL_AVX512_CORE_AMX)
/* ---- AMX small M, prepacked B (real tiles only): the k32 panels are B tiles as they lie. C tiles 0/1
   (m rows x 16 columns), A tile 4 = x (m rows of 32 bfloat16, from a zero-padded copy), B tiles 6/7 =
   the panel's two 16-column halves: one TDPBF16PS per KiB of B for all m rows, so the m = 4 stream is
   not bounded by the vector FMA ports. (Tried for the raw W rows too, C^T = W x^T with 32 rows of W
   per tile pair: 32 strided row streams ran at 18-23 GB/s against 24-26 for the vector NK loop.)
   The tile configuration is this path's own; it marks the thread unconfigured for the 32 x 32 kernel
   and releases the tiles. */
static void op_sm_amx_cfg(int m)
{
    op_amx_tilecfg cfg OP_ALIGNED(64);
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    cfg.rows[0] = cfg.rows[1] = cfg.rows[4] = (uint8_t)m;
    cfg.colsb[0] = cfg.colsb[1] = cfg.colsb[4] = 64;
    cfg.rows[6] = cfg.rows[7] = 16;
    cfg.colsb[6] = cfg.colsb[7] = 64;
    _tile_loadconfig(&cfg);
    op_amx_cfg_epoch = 0;  /* the 32 x 32 kernel reconfigures on its next call on this thread */
}

static void op_sm_amx_done(void)
{
    _tile_release();
    op_amx_cfg_epoch = 0;
}

static void op_sm_amx_packed(const op_sm_ctx *x, int64_t bi, int64_t j0, int64_t j1)
{
    const int64_t kp = x->kp, m = x->g->m;
    const uint16_t *xb = x->xb + bi * m * kp;
    const uint16_t *B = (const uint16_t *)x->g->b;
    float t[OP_SM_MAX_M * 32] OP_ALIGNED(64);
    op_sm_amx_cfg((int)m);
    for (int64_t j = j0; j < j1; j += 32) {
        const uint16_t *bp = B + j * kp;
        _tile_zero(0);
        _tile_zero(1);
        for (int64_t kb = 0; kb < kp; kb += 32, bp += 1024) {
            _tile_loadd(4, xb + kb, kp * 2);
            _tile_loadd(6, bp, 64);
            _tile_loadd(7, bp + 512, 64);
            _tile_dpbf16ps(0, 4, 6);
            _tile_dpbf16ps(1, 4, 7);
        }
        _tile_stored(0, t, 128);
        _tile_stored(1, t + 16, 128);
        op_sm_out(x, bi, j, (int)m, (int)op_min64(32, x->g->n - j), t);
    }
    op_sm_amx_done();
}

#endif

static void op_sm_task(void *ctx, int64_t task, int tid)
{
    const op_sm_ctx *x = (const op_sm_ctx *)ctx;
    const int64_t bi = task / x->parts, part = task % x->parts;
    const int64_t j0 = part * x->cols;
    const int64_t j1 = op_min64(x->g->n, j0 + x->cols);
    if (j0 >= j1) return;
    const int m = (int)x->g->m;
#if defined(OP_BF16_HAS_DP)
    if (x->dp && (x->form == OP_SM_PACKED || x->form == OP_SM_NK)) {
        void (*const *fn)(const op_sm_ctx *, int64_t, int64_t, int64_t) =
            x->form == OP_SM_PACKED ? op_sm_packed_dp_table : op_sm_nk_dp_table;
        if (m <= OP_SM_MAX_M) {
            fn[m - 1](x, bi, j0, j1);
            return;
        }
        /* more rows (up to OP_SM_PKDP_MAX_M / OP_SM_NKDP_MAX_M): passes of OP_SM_MAX_M rows over
           each 32-column panel / 32-row tile of W */
        op_sm_ctx y = *x;
        for (int64_t jc = j0; jc < j1; jc += 32)
            for (y.r0 = 0; y.r0 < m; y.r0 += OP_SM_MAX_M)
                fn[op_min64(OP_SM_MAX_M, m - y.r0) - 1](&y, bi, jc, op_min64(j1, jc + 32));
        return;
    }
#endif
    switch (x->form) {
#if defined(OP_HAS_AVX512)
    case OP_SM_PACKED:
#if defined(OP_LEVEL_AVX512_CORE_AMX)
        op_sm_amx_packed(x, bi, j0, j1);
        break;
#endif
        switch (m) {
        case 1: op_sm_packed_m1(x, bi, j0, j1); break;
        case 2: op_sm_packed_m2(x, bi, j0, j1); break;
        case 3: op_sm_packed_m3(x, bi, j0, j1); break;
        default: op_sm_packed_m4(x, bi, j0, j1); break;
        }
        break;
#endif
    case OP_SM_NK:
        switch (m) {
        case 1: op_sm_nk_m1(x, bi, j0, j1); break;
        case 2: op_sm_nk_m2(x, bi, j0, j1); break;
        case 3: op_sm_nk_m3(x, bi, j0, j1); break;
        default: op_sm_nk_m4(x, bi, j0, j1); break;
        }
        break;
    default: {
        float *acc = x->scratch + (size_t)tid * (size_t)(m * x->cols);
        switch (m) {
        case 1: op_sm_kn_m1(x, bi, j0, j1, acc); break;
        case 2: op_sm_kn_m2(x, bi, j0, j1, acc); break;
        case 3: op_sm_kn_m3(x, bi, j0, j1, acc); break;
        default: op_sm_kn_m4(x, bi, j0, j1, acc); break;
        }
    }
    }
}

/* Which form reads this B in place for m rows, or -1 (the driver then runs it). */
static int op_sm_form(const op_gemm_args *g, int prepacked)
{
    if (g->m < 1 || g->k < 1 || g->n < 1 || g->batch < 1) return -1;
    if (g->m > OP_SM_MAX_M) {
#if defined(OP_BF16_HAS_DP)
        /* a raw W^T: the VDPBF16PS dot products in passes where they are on (op_sm_dp: Zen 4,
           where VDPBF16PS issues at the FMA rate; OP_SM_NKDP_MAX_M above) */
        if (op_sm_dp && !prepacked && g->m <= OP_SM_NKDP_MAX_M && g->k <= OP_SM_NKDP_MAX_K &&
            g->rsb == 1 && g->csb >= g->k)
            return OP_SM_NK;
#if !defined(OP_LEVEL_AVX512_CORE_AMX)
        /* a prepacked weight: the same passes over each 32-column panel (OP_SM_PKDP_MAX_M) */
        if (op_sm_dp && prepacked && g->m <= OP_SM_PKDP_MAX_M && g->k <= OP_SM_NKDP_MAX_K)
            return OP_SM_PACKED;
#endif
#endif
        return -1;
    }
#if defined(OP_HAS_AVX512)
    if (prepacked) return OP_SM_PACKED;
#else
    if (prepacked) return -1;   /* avx2: a prepacked bfloat16 B is float32 panels of the driver */
#endif
    if (g->csb == 1 && g->rsb >= g->n) return OP_SM_KN;
    if (g->rsb == 1 && g->csb >= g->k) return OP_SM_NK;
    return -1;
}

/* Runs the small-M product (form from op_sm_form). Returns the threads used, -1 on allocation failure. */
static int op_sm_run(int form, const op_gemm_args *g, void *c, const int64_t *c_off, int64_t rsc,
                     int64_t csc, int c_dtype, int nthreads)
{
    op_sm_ctx x;
    memset(&x, 0, sizeof x);
    x.g = g; x.form = form; x.c = c; x.c_off = c_off; x.rsc = rsc; x.csc = csc; x.c_dtype = c_dtype;
    const int64_t m = g->m, n = g->n, k = g->k;
    x.kp = op_roundup64(k, 32);
    /* threads: at least 256 KiB of B each, or (the passes of up to 48 rows, where the arithmetic
       outweighs the stream) at least OP_GEMM_MIN_FLOPS_PER_THREAD each, as the driver would give */
    const double bbytes = 2.0 * (double)g->batch * (double)n * (double)k;
    int64_t T = (int64_t)(bbytes / (256.0 * 1024.0));
    const int64_t Tf = (int64_t)((double)m * bbytes / OP_GEMM_MIN_FLOPS_PER_THREAD);  /* 2 m n k */
    if (m > OP_SM_MAX_M && Tf > T) T = Tf;
    if (T > nthreads) T = nthreads;
    if (T > g->batch * op_cdiv64(n, 32)) T = g->batch * op_cdiv64(n, 32);
    if (T < 1) T = 1;
    x.parts = g->batch >= T ? 1 : op_cdiv64(T, g->batch);
    x.cols = op_roundup64(op_cdiv64(n, x.parts), 32);
    x.parts = op_cdiv64(n, x.cols);
#if defined(OP_BF16_HAS_DP) && !defined(OP_LEVEL_AVX512_CORE_AMX)
    x.dp = op_sm_dp && form != OP_SM_KN && (m > 1 || form == OP_SM_NK);
#elif defined(OP_BF16_HAS_DP)
    x.dp = op_sm_dp && form == OP_SM_NK;   /* the AMX level's prepacked form runs the tiles */
#endif
    x.ppf = OP_SM_PPF;
#if defined(OP_BF16_HAS_DP)
    if (op_sm_dp) x.ppf = OP_SM_DP_PPF1;   /* the hosts of the VDPBF16PS variant (Zen 4) */
#endif
    /* A once per call: bfloat16 as it is (xb: the tiles, the VDPBF16PS forms) or widened (xa) */
    int need_xb = x.dp;
#if defined(OP_LEVEL_AVX512_CORE_AMX)
    need_xb |= form == OP_SM_PACKED;
#endif
    float *xa = NULL;
    if (!x.dp) {
        xa = (float *)op_aligned_alloc((size_t)(g->batch * m * x.kp) * sizeof(float));
        if (!xa) return -1;
        for (int64_t bi = 0; bi < g->batch; bi++) {
            const uint16_t *A = (const uint16_t *)g->a + (g->a_off ? g->a_off[bi] : 0);
            for (int64_t i = 0; i < m; i++) {
#if defined(OP_HAS_AVX512)
                float *d = xa + (bi * m + i) * x.kp;
#else
                float *d = xa + bi * m * x.kp;
#endif
                const uint16_t *s = A + i * g->rsa;
                for (int64_t p = 0; p < x.kp; p++) {
                    const float v = p < k ? op_bf16_to_f32_1(s[p * g->csa]) : 0.0f;
                    /* NK: per 32-block, the 16 even depths then the 16 odd ones */
                    const int64_t q = form == OP_SM_NK ? (p & ~(int64_t)31) + ((p & 1) << 4) + ((p & 31) >> 1) : p;
#if defined(OP_HAS_AVX512)
                    d[q] = v;
#else
                    /* avx2: the m rows of one 32-deep block (NK) or of one depth (KN) side by side,
                       so that one pointer walks x (op_sm_nk8_body, op_sm_kn8_body) */
                    d[form == OP_SM_NK ? (q & ~(int64_t)31) * m + i * 32 + (q & 31)
                                       : p * m + i] = v;
#endif
                }
            }
        }
    }
    x.xa = xa;
    uint16_t *xb = NULL;
    if (need_xb) {
        xb = (uint16_t *)op_aligned_alloc((size_t)(g->batch * m * x.kp) * 2);
        if (!xb) {
            op_aligned_free(xa);
            return -1;
        }
        for (int64_t bi = 0; bi < g->batch; bi++) {
            const uint16_t *A = (const uint16_t *)g->a + (g->a_off ? g->a_off[bi] : 0);
            uint16_t *d = xb + bi * m * x.kp;
            for (int64_t i = 0; i < m; i++)
                for (int64_t p = 0; p < x.kp; p++) d[i * x.kp + p] = p < k ? A[i * g->rsa + p * g->csa] : 0;
        }
        x.xb = xb;
    }
    if (form == OP_SM_KN) {
        x.scratch = (float *)op_aligned_alloc((size_t)(T * m * x.cols) * sizeof(float));
        if (!x.scratch) {
            op_aligned_free(xa);
            return -1;
        }
    }
    const int used = op_parallel_for((int)T, g->batch * x.parts, op_sm_task, &x);
    op_aligned_free(x.scratch);
    op_aligned_free(xb);
    op_aligned_free(xa);
    return used;
}
#endif /* OP_HAS_AVX2 */

int op_gemm_bf16_set_variants(int flags)
{
#if defined(OP_BF16_HAS_AMX)
    op_amx_chunks = (flags & 64) != 0;
    const int amx_flags = op_amx_chunks << 6;
#else
    const int amx_flags = 0;
#endif
#if defined(OP_BF16_HAS_DP)
    op_sm_dp = (flags & 1) != 0;
    op_dp_a_inplace = (flags & 2) != 0;
    op_dp_out16 = (flags & 4) != 0;
    op_dp_thin_nc = (flags & 8) != 0;
    op_dp_next_l2 = (flags & 16) != 0;
#if !defined(OP_BF16_HAS_AMX)
    op_dp_widen = (flags & 32) != 0;
#endif
    return op_sm_dp | op_dp_a_inplace << 1 | op_dp_out16 << 2 | op_dp_thin_nc << 3 | op_dp_next_l2 << 4 |
           op_dp_widen << 5 | amx_flags;
#else
    (void)flags;
    return amx_flags;
#endif
}

/* ---------------------------------------------------------------- driver call */

/* Runs the driver with C float32 (c_dtype 0) or bfloat16 (c_dtype 1: each finished tile rounded
   once after the epilogue, see op_gemm_args.c16). g->c / g->c16 and their strides are set here. */
static int op_bf16_run(const op_gemm_ops *ops, op_gemm_args *g, int amx, void *c,
                       const int64_t *c_off, int64_t rsc, int64_t csc, int c_dtype,
                       const op_blocking *blk, int nthreads)
{
#if defined(OP_BF16_HAS_AMX)
    if (amx) op_amx_begin();
#else
    (void)amx;
#endif
    if (c_dtype == 0) {
        g->c = (float *)c; g->c_off = c_off; g->rsc = rsc; g->csc = csc;
    } else {
        g->c = NULL;
        g->c16 = (uint16_t *)c; g->c16_off = c_off; g->rsc16 = rsc; g->csc16 = csc;
    }
    int used = op_gemm_drive(ops, g, blk, nthreads);
#if defined(OP_BF16_HAS_AMX)
    if (amx) {
        op_amx_end();
        if (op_amx_fault()) used = -2;
    }
#endif
    return used;
}

int op_gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k,
                 const uint16_t *a, const int64_t *a_off, int64_t rsa, int64_t csa,
                 const uint16_t *b, const int64_t *b_off, int64_t rsb, int64_t csb,
                 void *c, const int64_t *c_off, int64_t rsc, int64_t csc, int c_dtype,
                 const op_blocking *blk, const op_epilogue *epi, int nthreads)
{
    op_gemm_args g;
    memset(&g, 0, sizeof g);
    g.batch = batch; g.m = m; g.n = n; g.k = k < 0 ? 0 : k;
    g.a = a; g.a_off = a_off; g.rsa = rsa; g.csa = csa;
    g.b = b; g.b_off = b_off; g.rsb = rsb; g.csb = csb;
    g.epi = epi;
#if defined(OP_HAS_AVX2)
    if (n > 0 && batch > 0) {
        const int form = op_sm_form(&g, 0);
        if (form >= 0) return op_sm_run(form, &g, c, c_off, rsc, csc, c_dtype, nthreads);
    }
#endif
#if defined(OP_BF16_HAS_DP) && !defined(OP_BF16_HAS_AMX)
    if (op_dp_widens(m))   /* as avx512_core's op_bf16_pick_for picks; blk: avx512_core's row */
        return op_bf16_run(rsb == 1 && csb != 1 ? &op_bf16_k32w_ops : &op_bf16_widen_ops, &g, 0, c,
                           c_off, rsc, csc, c_dtype, blk, nthreads);
#endif
    int amx;
    op_gemm_ops ops = *op_bf16_pick_for(&g, &amx);
#if defined(OP_BF16_HAS_DP)
    op_dp_variant_ops(&ops);
    op_blocking thin;
    blk = op_dp_blocking(&ops, &g, blk, &thin);
#endif
#if defined(OP_BF16_HAS_AMX)
    op_amx_variant_ops(&ops);
#endif
    return op_bf16_run(&ops, &g, amx, c, c_off, rsc, csc, c_dtype, blk, nthreads);
}

/* ---------------------------------------------------------------- prepacked B

   A prepacked bfloat16 B is kept in the k32 layout (bfloat16, half the bytes of float32 panels) at
   every AVX-512 level, and read in place: by the bf16dp / amx kernels, by the small-M loops
   (OP_SM_PACKED, widening in register where the level has no bfloat16 arithmetic) and, at
   avx512_core, by the float32 register block through k32w below. There it used to be float32
   panels of the float32 kernel: twice the bytes, so a decode product with a prepacked weight
   streamed twice the memory of the raw weight's loop (Zen 4, --isa avx512_core, 1 thread,
   1 x 4096 x 4096, 2026-12-02: prepacked 11.6 GFLOP/s against raw 17.4 and torch 22.8). Below
   AVX-512 (avx2, generic) a prepacked bfloat16 B stays float32 panels of the level's kernel. */

/* Packed depth and element size of a prepacked B of dtype b_dtype at this level. */
static int64_t op_packed_kp(int b_dtype, int64_t k)
{
#if defined(OP_BF16_NATIVE) || defined(OP_HAS_AVX512)
    if (b_dtype == 1) return op_roundup64(k, 32);
#endif
    (void)b_dtype;
    return k;
}

static void op_packed_geom(int b_dtype, int *nr, size_t *elem, op_pack_b_fn *pack)
{
    *nr = OP_F32_NR;
    *elem = sizeof(float);
    *pack = b_dtype == 1 ? op_pack_b_bf16_widen : op_pack_b_f32;
#if defined(OP_BF16_NATIVE) || defined(OP_HAS_AVX512)
    if (b_dtype == 1) {
        *nr = OP_K32_NR;
        *elem = 2;
        *pack = op_pack_b_k32;
    }
#endif
}

int64_t op_pack_b_bytes(int b_dtype, int64_t k, int64_t n)
{
    int nr;
    size_t elem;
    op_pack_b_fn pack;
    op_packed_geom(b_dtype, &nr, &elem, &pack);
    return op_roundup64(n, nr) * op_packed_kp(b_dtype, k) * (int64_t)elem;
}

typedef struct {
    op_gemm_args g;
    op_pack_b_fn pack;
    int64_t k, kp, n, cols;  /* columns per task (multiple of nr) */
    size_t elem;
    char *dst;
} op_prepack_ctx;

static void op_prepack_task(void *ctx, int64_t t, int tid)
{
    (void)tid;
    const op_prepack_ctx *x = (const op_prepack_ctx *)ctx;
    const int64_t j0 = t * x->cols, nc = op_min64(x->cols, x->n - j0);
    x->pack(&x->g, 0, 0, x->k, x->kp, j0, nc, x->dst + (size_t)(j0 * x->kp) * x->elem);
}

int op_pack_b(int b_dtype, int64_t k, int64_t n, const void *b, int64_t rsb, int64_t csb,
              void *dst, int nthreads)
{
    op_prepack_ctx x;
    memset(&x, 0, sizeof x);
    int nr;
    op_packed_geom(b_dtype, &nr, &x.elem, &x.pack);
    x.g.batch = 1; x.g.k = k; x.g.n = n;
    x.g.b = b; x.g.rsb = rsb; x.g.csb = csb;
    x.k = k; x.kp = op_packed_kp(b_dtype, k); x.n = n; x.dst = (char *)dst;
    if (n <= 0 || x.kp <= 0) return 1;
    x.cols = nr * op_max64(1, 256 / nr);
    return op_parallel_for(nthreads < 1 ? 1 : nthreads, op_cdiv64(n, x.cols), op_prepack_task, &x);
}

int op_gemm_packed(int b_dtype, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void *a, const int64_t *a_off, int64_t rsa, int64_t csa,
                   const void *bpacked, void *c, const int64_t *c_off, int64_t rsc, int64_t csc,
                   int c_dtype, const op_blocking *blk, const op_epilogue *epi, int nthreads)
{
    op_gemm_args g;
    memset(&g, 0, sizeof g);
    g.batch = batch; g.m = m; g.n = n; g.k = k < 0 ? 0 : k;
    g.a = a; g.a_off = a_off; g.rsa = rsa; g.csa = csa;
    g.b = bpacked; g.b_off = NULL; g.rsb = op_packed_kp(b_dtype, g.k); g.csb = 1;
    g.epi = epi;
    g.kc_even = b_dtype == 0;   /* as op_gemm_f32 (the same sums as linear on the raw weight) */
#if defined(OP_HAS_AVX512)
    if (b_dtype == 1 && n > 0 && batch > 0 && op_sm_form(&g, 1) >= 0)
        return op_sm_run(OP_SM_PACKED, &g, c, c_off, rsc, csc, c_dtype, nthreads);
#endif
    int amx = 0;
    op_gemm_ops ops = op_gemm_f32_ops;
    if (b_dtype == 1) {
#if defined(OP_HAS_AVX512) && !defined(OP_BF16_NATIVE)
        ops = op_bf16_k32w_ops;   /* the float32 block on the k32 panels */
#else
        ops = *op_bf16_pick_for(&g, &amx);
#endif
    }
#if defined(OP_BF16_HAS_DP) && !defined(OP_BF16_HAS_AMX)
    const int widen = b_dtype == 1 && op_dp_widens(m);   /* the raw weight's kernel and bits */
    if (widen) ops = op_bf16_k32w_ops;
#endif
    ops.direct_b = 0;
    ops.b_prepacked = 1;
#if defined(OP_BF16_HAS_DP) && !defined(OP_BF16_HAS_AMX)
    if (widen) return op_bf16_run(&ops, &g, 0, c, c_off, rsc, csc, c_dtype, blk, nthreads);
#endif
#if defined(OP_BF16_HAS_DP)
    op_dp_variant_ops(&ops);
    op_blocking thin;
    blk = op_dp_blocking(&ops, &g, blk, &thin);
#endif
#if defined(OP_BF16_HAS_AMX)
    op_amx_variant_ops(&ops);
#endif
    return op_bf16_run(&ops, &g, amx, c, c_off, rsc, csc, c_dtype, blk, nthreads);
}
