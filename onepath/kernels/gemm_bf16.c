/* gemm_bf16.c: bfloat16 GEMM of one level, on the shared driver of gemm_f32.c (op_gemm_drive).

   Three packing / micro-kernel sets (op_gemm_ops), chosen by the level:
     widen   (generic, avx2, avx512_core): bfloat16 widened to float32 while packing (2-byte loads,
             exact), then the level's float32 micro-kernel (op_ukr_f32) and its packed layouts.
     bf16dp  (avx512_core_bf16, and small M on avx512_core_amx): VDPBF16PS, 14 x 32 register block.
     amx     (avx512_core_amx, and the amx_emu build): TDPBF16PS tiles, 32 x 32 block (gemm_bf16_amx.c).
   bf16dp and amx share one packed layout ("k32"), so a prepacked weight serves both:
     A micro-panel (MR rows): per block of 32 depths kb, MR rows of 32 bfloat16:
         a[(kb*MR + i)*32 + kk] = A[i][kb*32 + kk]      (an AMX A tile: 16 rows, 64 bytes each)
     B micro-panel (32 columns): per block of 32 depths kb, two column halves jt of 16 K-pairs x 16
         columns x 2 (VNNI / AMX B-tile layout):
         b[kb*1024 + jt*512 + pr*32 + jj*2 + t] = B[kb*32 + 2*pr + t][jt*16 + jj]
   Depth is zero-padded to a multiple of 32 (k_align = 32): odd K and K not a multiple of 32 read
   zero pairs. C is float32 in the driver; a bfloat16 C is produced by one rounding of the float32
   result after the epilogue (op_bf16_run). */

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

/* ---------------------------------------------------------------- tile write-out */

/* C (+)= t[mr x nr] (row stride ldt) then the epilogue; AVX-512 rows when C rows are contiguous. */
static void op_bf16_tile_out(const float *t, int64_t ldt, int mr, int nr, float *c, int64_t rsc,
                             int64_t csc, int acc, const op_epilogue *epi)
{
#if defined(OP_HAS_AVX512)
    if (csc == 1 && nr <= 32) {
        const int full = nr == 32;
        const __mmask16 k0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1u);
        const __mmask16 k1 = nr >= 32 ? (__mmask16)0xFFFF
                           : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
        int bias = 0, relu = 0, slow_act = OP_ACT_NONE;
        const float *rowb = NULL;
        int64_t rbs = 0;
        __m512 q0 = _mm512_setzero_ps(), q1 = q0;
        if (epi) {
            if (epi->bias) {
                bias = 1;
                if (epi->bias_axis == 0) {
                    rowb = epi->bias;
                    rbs = epi->bias_stride;
                } else {
                    float tb[32] OP_ALIGNED(64) = {0};
                    for (int j = 0; j < nr; j++) tb[j] = epi->bias[j * epi->bias_stride];
                    q0 = _mm512_load_ps(tb);
                    q1 = _mm512_load_ps(tb + 16);
                }
            }
            if (epi->act == OP_ACT_RELU) relu = 1;
            else if (epi->act != OP_ACT_NONE) slow_act = epi->act;
        }
        for (int i = 0; i < mr; i++) {
            __m512 r0 = q0, r1 = q1;
            if (rowb) r0 = r1 = _mm512_set1_ps(rowb[i * rbs]);
            const __m512 x0 = _mm512_maskz_loadu_ps(k0, t + i * ldt);
            const __m512 x1 = _mm512_maskz_loadu_ps(k1, t + i * ldt + 16);
            op_avx512_row_out(c + i * rsc, x0, x1, full, k0, k1, acc, bias, r0, r1, relu);
            if (slow_act) op_act_row(c + i * rsc, 1, nr, slow_act);
        }
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

/* ---------------------------------------------------------------- k32 packs (bf16dp and amx) */

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
    for (int64_t jr = 0; jr < nc; jr += OP_K32_NR, d += OP_K32_NR * kcp) {
        const int nr = (int)op_min64(OP_K32_NR, nc - jr);
        const uint16_t *src = B + p0 * rsb + (j0 + jr) * csb;
        for (int64_t kb = 0; kb * 32 < kcp; kb++) {
            uint16_t *blk = d + kb * 1024;
            const int64_t kk0 = kb * 32;
            const int klen = (int)op_max64(0, op_min64(32, kc - kk0));
            if (klen == 32 && csb == 1 && nr == OP_K32_NR) {
#if defined(OP_HAS_AVX512)
                for (int pr = 0; pr < 16; pr++) {
                    const uint16_t *r0 = src + (kk0 + 2 * pr) * rsb;
                    const __m512i x0 = _mm512_loadu_si512((const void *)r0);
                    const __m512i x1 = _mm512_loadu_si512((const void *)(r0 + rsb));
                    _mm512_storeu_si512((void *)(blk + pr * 32), _mm512_permutex2var_epi16(x0, lo_idx, x1));
                    _mm512_storeu_si512((void *)(blk + 512 + pr * 32), _mm512_permutex2var_epi16(x0, hi_idx, x1));
                }
                continue;
#endif
            }
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

static void op_pack_a_dp(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                         int64_t kc, int64_t kcp, void *dst)
{
    op_pack_a_k32(g, bi, i0, mc, p0, kc, kcp, (uint16_t *)dst, OP_DP_MR);
}

/* 14 x 32: per K-pair, two B vectors (16 columns x 2 depths each), one 32-bit broadcast of an A
   pair per row, 28 VDPBF16PS. Rows <= 4 (decode) use a second accumulator set for odd pairs to
   halve the dependency chains. */
OP_INLINE void op_ukr_dp_body(const int MRV, int64_t kcp, const uint16_t *OP_RESTRICT a,
                              const uint16_t *OP_RESTRICT b, float *c, int64_t rsc, int64_t csc,
                              int nr, int acc, const op_epilogue *epi)
{
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    __m512 d0_0 = c0_0, d0_1 = c0_0, d1_0 = c0_0, d1_1 = c0_0, d2_0 = c0_0, d2_1 = c0_0,
           d3_0 = c0_0, d3_1 = c0_0;
#define OP_BH(x) ((__m512bh)(x))
#define OP_R(i, PR, ACC)                                                                  \
    if (MRV > i) {                                                                        \
        int32_t av;                                                                       \
        memcpy(&av, a + i * 32 + 2 * (PR), 4);                                            \
        const __m512i ai = _mm512_set1_epi32(av);                                         \
        ACC##i##_0 = _mm512_dpbf16_ps(ACC##i##_0, OP_BH(ai), OP_BH(b0));                  \
        ACC##i##_1 = _mm512_dpbf16_ps(ACC##i##_1, OP_BH(ai), OP_BH(b1));                  \
    }
#define OP_RS(i, PR) if (MRV <= 4) { OP_R(i, PR, d) } else { OP_R(i, PR, c) }
    for (int64_t kb = 0; kb * 32 < kcp; kb++) {
        for (int pr = 0; pr < 16; pr += 2) {
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
        a += OP_DP_MR * 32;
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
    float t[OP_DP_MR * 32] OP_ALIGNED(64);
#define OP_T(i)                                         \
    if (MRV > i) {                                      \
        _mm512_store_ps(t + i * 32, c##i##_0);          \
        _mm512_store_ps(t + i * 32 + 16, c##i##_1);     \
    }
    OP_T(0) OP_T(1) OP_T(2) OP_T(3) OP_T(4) OP_T(5) OP_T(6)
    OP_T(7) OP_T(8) OP_T(9) OP_T(10) OP_T(11) OP_T(12) OP_T(13)
#undef OP_T
    op_bf16_tile_out(t, 32, MRV, nr, c, rsc, csc, acc, epi);
}

#define OP_DP_INST(MRV)                                                                     \
    static OP_NOINLINE void op_ukr_dp_m##MRV(int64_t kcp, const uint16_t *a, const uint16_t *b, \
                                             float *c, int64_t rsc, int64_t csc, int nr,    \
                                             int acc, const op_epilogue *epi)               \
    {                                                                                       \
        op_ukr_dp_body(MRV, kcp, a, b, c, rsc, csc, nr, acc, epi);                          \
    }
OP_DP_INST(1) OP_DP_INST(2) OP_DP_INST(3) OP_DP_INST(4) OP_DP_INST(5) OP_DP_INST(6) OP_DP_INST(7)
OP_DP_INST(8) OP_DP_INST(9) OP_DP_INST(10) OP_DP_INST(11) OP_DP_INST(12) OP_DP_INST(13)
OP_DP_INST(14)
#undef OP_DP_INST

typedef void (*op_ukr_dp_fn)(int64_t, const uint16_t *, const uint16_t *, float *, int64_t, int64_t,
                             int, int, const op_epilogue *);
static const op_ukr_dp_fn op_ukr_dp_table[OP_DP_MR] = {
    op_ukr_dp_m1, op_ukr_dp_m2, op_ukr_dp_m3, op_ukr_dp_m4, op_ukr_dp_m5, op_ukr_dp_m6, op_ukr_dp_m7,
    op_ukr_dp_m8, op_ukr_dp_m9, op_ukr_dp_m10, op_ukr_dp_m11, op_ukr_dp_m12, op_ukr_dp_m13,
    op_ukr_dp_m14,
};

static void op_ukr_dp(int64_t kcp, const void *a, const void *b, int64_t ldb, float *c,
                      int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)ldb;
    op_ukr_dp_table[mr - 1](kcp, (const uint16_t *)a, (const uint16_t *)b, c, rsc, csc, nr, acc, epi);
}

static const op_gemm_ops op_bf16_dp_ops = {
    OP_DP_MR, OP_K32_NR, 32, 2, 2,
    op_pack_a_dp, op_pack_b_k32, op_ukr_dp,
    0, 2 * OP_K32_NR,
    {168, 512, 2048},
    0,
};
#endif

/* ---------------------------------------------------------------- amx (real or emulated) */

#if defined(OP_BF16_HAS_AMX)
#include "gemm_bf16_amx.c"
#endif

/* ---------------------------------------------------------------- level selection */

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
#define OP_BF16_STR_(x) #x
#define OP_BF16_STR(x) OP_BF16_STR_(x)
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

const char *op_gemm_bf16_kernel_for(int64_t m)
{
    (void)m;
#if defined(OP_LEVEL_AVX512_CORE_AMX)
    if (m < OP_BF16_AMX_MIN_M) return "gemm_bf16_avx512_bf16_14x32";
#endif
    return OP_BF16_KERNEL_NAME;
}

int op_gemm_bf16_mr(void) { return OP_BF16_MR; }
int op_gemm_bf16_nr(void) { return OP_BF16_NR; }
const char *op_gemm_bf16_kernel_name(void) { return OP_BF16_KERNEL_NAME; }

/* ---------------------------------------------------------------- bfloat16 output */

typedef struct {
    const float *tmp;
    uint16_t *c;
    const int64_t *c_off;
    int64_t m, n, rsc, csc;
} op_bf16_out_ctx;

static void op_bf16_out_task(void *ctx, int64_t r, int tid)
{
    (void)tid;
    const op_bf16_out_ctx *x = (const op_bf16_out_ctx *)ctx;
    const int64_t bi = r / x->m, i = r % x->m;
    const float *src = x->tmp + r * x->n;
    uint16_t *dst = x->c + (x->c_off ? x->c_off[bi] : 0) + i * x->rsc;
    if (x->csc == 1) {
        op_cvt_f32_to_bf16_run(x->n, src, dst);
    } else {
        for (int64_t j = 0; j < x->n; j++) dst[j * x->csc] = op_f32_to_bf16_1(src[j]);
    }
}

/* Runs the driver with C float32 (c_dtype 0) or through a float32 scratch C rounded once to
   bfloat16 (c_dtype 1). g->c and its strides are set here. */
static int op_bf16_run(const op_gemm_ops *ops, op_gemm_args *g, int amx, void *c,
                       const int64_t *c_off, int64_t rsc, int64_t csc, int c_dtype,
                       const op_blocking *blk, int nthreads)
{
    int used;
#if defined(OP_BF16_HAS_AMX)
    if (amx) op_amx_begin();
#else
    (void)amx;
#endif
    if (c_dtype == 0) {
        g->c = (float *)c; g->c_off = c_off; g->rsc = rsc; g->csc = csc;
        used = op_gemm_drive(ops, g, blk, nthreads);
    } else {
        const int64_t rows = g->batch * g->m;
        float *tmp = (float *)op_aligned_alloc((size_t)(rows * g->n) * sizeof(float));
        int64_t *offs = g->batch > 1 ? (int64_t *)malloc((size_t)g->batch * sizeof(int64_t)) : NULL;
        if (!tmp || (g->batch > 1 && !offs)) {
            op_aligned_free(tmp);
            free(offs);
            used = -1;
        } else {
            for (int64_t bi = 0; offs && bi < g->batch; bi++) offs[bi] = bi * g->m * g->n;
            g->c = tmp; g->c_off = offs; g->rsc = g->n; g->csc = 1;
            used = op_gemm_drive(ops, g, blk, nthreads);
            if (used > 0) {
                op_bf16_out_ctx x = {tmp, (uint16_t *)c, c_off, g->m, g->n, rsc, csc};
                const int64_t t = rows * g->n >= 65536 ? nthreads : 1;
                op_parallel_for((int)t, rows, op_bf16_out_task, &x);
            }
            op_aligned_free(tmp);
            free(offs);
        }
    }
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
    int amx;
    const op_gemm_ops *ops = op_bf16_pick(m, &amx);
    return op_bf16_run(ops, &g, amx, c, c_off, rsc, csc, c_dtype, blk, nthreads);
}

/* ---------------------------------------------------------------- prepacked B */

/* Packed depth and element size of a prepacked B of dtype b_dtype at this level. */
static int64_t op_packed_kp(int b_dtype, int64_t k)
{
#if defined(OP_BF16_NATIVE)
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
#if defined(OP_BF16_NATIVE)
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
    int amx = 0;
    op_gemm_ops ops = b_dtype == 1 ? *op_bf16_pick(m, &amx) : op_gemm_f32_ops;
    ops.direct_b = 0;
    ops.b_prepacked = 1;
    return op_bf16_run(&ops, &g, amx, c, c_off, rsc, csc, c_dtype, blk, nthreads);
}
