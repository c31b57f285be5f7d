/* repro.c: the reproducible mode's GEMM, epilogue and activations (contract: api_repro.h), one piece
   compiled into every level's unity build, after gemm_f32.c whose driver and float32 packing it
   reuses.

   Why the bits cannot depend on the level, the blocking or the thread count:
   - the micro-kernels below keep ONE fused-multiply-add chain per element: before each KC block
     they load C into their accumulators (zeros on the first block) and continue the FMAs in
     increasing p, so the KC/MC/NC blocking and the MR x NR shape do not change the chain; vector
     width does not either (lanes are independent). The generic level calls fmaf() (C99: one
     rounding), AVX2 / AVX-512 their FMA instructions: the same IEEE operation. K is never padded
     (k_align 1), so no extra fma(0, b, acc) enters a chain;
   - the driver splits threads over batch entries, M and N only (gemm_f32.c), never over K;
   - bfloat16 operands are widened exactly (bits << 16) while packing, subnormals kept;
   - the epilogue (bias, activation, bfloat16 rounding) is scalar code in which every multiply-add
     is an explicit fma() and no product feeds an addition otherwise, so contraction
     (-ffp-contract) has nothing to change; its transcendental functions are our own (not libm,
     whose results differ between versions and CPU-dispatched variants), in double precision;
   - MXCSR is forced to round-to-nearest without FTZ/DAZ while the chain runs (a process that
     sets flush-to-zero would otherwise flush subnormals on some threads only).
   Functions of libm used: fmaf / fma (exact by the C standard), ldexp (exact scaling). */

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define OP_RP_MXCSR_DEFAULT 0x1F80u  /* all exceptions masked, round to nearest, no FTZ/DAZ */
/* Returns the caller's MXCSR and installs the default one when it differs (0: nothing changed). */
OP_INLINE unsigned op_rp_mxcsr_enter(void)
{
    const unsigned old = _mm_getcsr();
    if ((old & 0xFFC0u) == OP_RP_MXCSR_DEFAULT) return 0;
    _mm_setcsr(OP_RP_MXCSR_DEFAULT);
    return old | 0x10000u;  /* bit 16 marks "restore" */
}
OP_INLINE void op_rp_mxcsr_leave(unsigned saved)
{
    if (saved) _mm_setcsr(saved & 0xFFFFu);
}
#else
OP_INLINE unsigned op_rp_mxcsr_enter(void) { return 0; }
OP_INLINE void op_rp_mxcsr_leave(unsigned saved) { (void)saved; }
#endif

/* ---------------------------------------------------------------- activations (scalar, double) */

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

/* exp(x): x = n ln2 + r (Cody-Waite, two-part ln2), exp(r) by its Taylor polynomial of degree 13
   (|r| <= ln2/2: truncation error below 2e-16 relative), scaled by ldexp. */
static double op_rp_exp(double x)
{
    if (x != x) return x;
    if (x > 709.78) return INFINITY;
    if (x < -745.2) return 0.0;
    const double magic = 6755399441055744.0;  /* 1.5 * 2^52: adding it rounds to an integer */
    const double n = fma(x, 1.4426950408889634, magic) - magic;
    double r = fma(-n, 0.6931471803691238, x);  /* ln2 high part (exact product for |n| < 2^11) */
    r = fma(-n, 1.9082149292705877e-10, r);     /* ln2 low part */
    static const double c[14] = {
        1.0, 1.0, 1.0 / 2, 1.0 / 6, 1.0 / 24, 1.0 / 120, 1.0 / 720, 1.0 / 5040, 1.0 / 40320,
        1.0 / 362880, 1.0 / 3628800, 1.0 / 39916800, 1.0 / 479001600, 1.0 / 6227020800.0};
    double p = c[13];
    for (int i = 12; i >= 0; i--) p = fma(p, r, c[i]);
    return ldexp(p, (int)n);
}

/* erfc(z) in double: 1 - erf(z) by erf's Maclaurin series (41 terms) below z = 2, Laplace's
   continued fraction (60 levels, evaluated bottom-up) from 2 on, 2 - erfc(-z) for z < 0. Relative
   error below 1e-12 on [0, 27] (checked against mpmath); 0 past z = 27 (exp(-z^2) underflows). */
static double op_rp_erfc(double z)
{
    if (z != z) return z;
    if (z < 0.0) return 2.0 - op_rp_erfc(-z);
    if (z < 2.0) {
        const double mz2 = -(z * z);
        double term = z, s = z;
        for (int n = 1; n <= 40; n++) {
            term = term * mz2 / (double)n;
            s = s + term / (double)(2 * n + 1);
        }
        return fma(-1.1283791670955126, s, 1.0);  /* 1 - (2 / sqrt(pi)) s */
    }
    if (z > 27.0) return 0.0;
    double f = z;
    for (int k = 60; k >= 1; k--) f = z + (0.5 * (double)k) / f;
    return op_rp_exp(-(z * z)) / (1.7724538509055160 * f);  /* / (sqrt(pi) f) */
}

/* The reproducible activation of one float (double inside, rounded once to float). Non-finite
   inputs as the default mode: NaN stays NaN, +Inf -> +Inf, -Inf -> NaN for gelu/gelu_tanh/silu. */
static float op_rp_act1(float xf, int act)
{
    const double x = (double)xf;
    switch (act) {
    case OP_ACT_RELU:
        return xf < 0.0f ? 0.0f : xf;
    case OP_ACT_GELU:  /* 0.5 x (1 + erf(x / sqrt 2)) = 0.5 x erfc(-x / sqrt 2) */
        return (float)(0.5 * x * op_rp_erfc(-(x * 0.70710678118654752)));
    case OP_ACT_GELU_TANH: {  /* 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)) */
        const double u = 0.79788456080286536 * fma(0.044715 * x * x, x, x);
        return (float)(x / (1.0 + op_rp_exp(-2.0 * u)));
    }
    case OP_ACT_SILU:
        return (float)(x / (1.0 + op_rp_exp(-x)));
    default:
        return xf;
    }
}

void op_repro_act(int64_t n, const float *x, float *y, int act)
{
    const unsigned saved = op_rp_mxcsr_enter();
    for (int64_t i = 0; i < n; i++) y[i] = op_rp_act1(x[i], act);
    op_rp_mxcsr_leave(saved);
}

/* ---------------------------------------------------------------- micro-kernels: one FMA chain */

/* op_ukr_fn (gemm_f32.c) over the float32 packing: a[p*MR + i], b at b + p*ldb. acc = 0: the chain
   starts at -0.0f (x + -0 = x for every x, so its first step is the product a0 b0 rounded once,
   signed zeros kept); acc = 1: it continues from C. epi is always NULL (the epilogue is a separate pass). */
#if defined(OP_HAS_AVX512)
#define OP_RP_MR 14
#define OP_RP_NR 32
#define OP_RP_NAME "repro_f32_avx512_core_14x32"
OP_INLINE void op_rp_body(const int MRV, int64_t kc, const float *OP_RESTRICT a,
                          const float *OP_RESTRICT b, int64_t ldb, float *c, int64_t rsc,
                          int64_t csc, int nr, int acc)
{
    __m512 x[OP_RP_MR][2];
    float t[OP_RP_MR * 32] OP_ALIGNED(64);
    const __mmask16 k0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1u);
    const __mmask16 k1 = nr >= 32 ? (__mmask16)0xFFFF : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
    const int direct = csc == 1;
    /* the chain continues from C, so the next call's C tile (the next MR rows, same columns: the
       driver's ir loop) is fetched now; this call's own C loads stall the first FMAs otherwise */
    if (direct)
        for (int i = 0; i < MRV; i++) {
            _mm_prefetch((const char *)(c + (i + OP_RP_MR) * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + (i + OP_RP_MR) * rsc + 31), _MM_HINT_T0);
        }
#pragma GCC unroll 14
    for (int i = 0; i < MRV; i++) {
        if (!acc) {
            x[i][0] = x[i][1] = _mm512_set1_ps(-0.0f);
        } else if (direct) {
            x[i][0] = _mm512_maskz_loadu_ps(k0, c + i * rsc);
            x[i][1] = _mm512_maskz_loadu_ps(k1, c + i * rsc + 16);
        } else {
            for (int j = 0; j < 32; j++) t[i * 32 + j] = j < nr ? c[i * rsc + j * csc] : 0.0f;
            x[i][0] = _mm512_load_ps(t + i * 32);
            x[i][1] = _mm512_load_ps(t + i * 32 + 16);
        }
    }
    for (int64_t p = 0; p < kc; p++) {
        const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 14
        for (int i = 0; i < MRV; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            x[i][0] = _mm512_fmadd_ps(ai, b0, x[i][0]);
            x[i][1] = _mm512_fmadd_ps(ai, b1, x[i][1]);
        }
        a += OP_RP_MR;
        b += ldb;
    }
#pragma GCC unroll 14
    for (int i = 0; i < MRV; i++) {
        if (direct) {
            _mm512_mask_storeu_ps(c + i * rsc, k0, x[i][0]);
            _mm512_mask_storeu_ps(c + i * rsc + 16, k1, x[i][1]);
        } else {
            _mm512_store_ps(t + i * 32, x[i][0]);
            _mm512_store_ps(t + i * 32 + 16, x[i][1]);
            for (int j = 0; j < nr; j++) c[i * rsc + j * csc] = t[i * 32 + j];
        }
    }
}
#elif defined(OP_HAS_AVX2)
#define OP_RP_MR 6
#define OP_RP_NR 16
#define OP_RP_NAME "repro_f32_avx2_6x16"
OP_INLINE void op_rp_body(const int MRV, int64_t kc, const float *OP_RESTRICT a,
                          const float *OP_RESTRICT b, int64_t ldb, float *c, int64_t rsc,
                          int64_t csc, int nr, int acc)
{
    __m256 x[OP_RP_MR][2];
    float t[OP_RP_MR * 16] OP_ALIGNED(32);
    const int full = csc == 1 && nr == 16;
    if (csc == 1)  /* the next call's C tile (see the AVX-512 kernel) */
        for (int i = 0; i < MRV; i++) {
            _mm_prefetch((const char *)(c + (i + OP_RP_MR) * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + (i + OP_RP_MR) * rsc + 15), _MM_HINT_T0);
        }
#pragma GCC unroll 6
    for (int i = 0; i < MRV; i++) {
        if (!acc) {
            x[i][0] = x[i][1] = _mm256_set1_ps(-0.0f);
        } else if (full) {
            x[i][0] = _mm256_loadu_ps(c + i * rsc);
            x[i][1] = _mm256_loadu_ps(c + i * rsc + 8);
        } else {
            for (int j = 0; j < 16; j++) t[i * 16 + j] = j < nr ? c[i * rsc + j * csc] : 0.0f;
            x[i][0] = _mm256_load_ps(t + i * 16);
            x[i][1] = _mm256_load_ps(t + i * 16 + 8);
        }
    }
    for (int64_t p = 0; p < kc; p++) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < MRV; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i);
            x[i][0] = _mm256_fmadd_ps(ai, b0, x[i][0]);
            x[i][1] = _mm256_fmadd_ps(ai, b1, x[i][1]);
        }
        a += OP_RP_MR;
        b += ldb;
    }
#pragma GCC unroll 6
    for (int i = 0; i < MRV; i++) {
        if (full) {
            _mm256_storeu_ps(c + i * rsc, x[i][0]);
            _mm256_storeu_ps(c + i * rsc + 8, x[i][1]);
        } else {
            _mm256_store_ps(t + i * 16, x[i][0]);
            _mm256_store_ps(t + i * 16 + 8, x[i][1]);
            for (int j = 0; j < nr; j++) c[i * rsc + j * csc] = t[i * 16 + j];
        }
    }
}
#else
/* Portable: fmaf() per element (a libm call at baseline flags: slow, but the same IEEE fused
   operation as the FMA instructions; the generic level exists for correctness, not speed). */
#define OP_RP_MR 4
#define OP_RP_NR 8
#define OP_RP_NAME "repro_f32_generic_4x8"
OP_INLINE void op_rp_body(const int MRV, int64_t kc, const float *OP_RESTRICT a,
                          const float *OP_RESTRICT b, int64_t ldb, float *c, int64_t rsc,
                          int64_t csc, int nr, int acc)
{
    float x[OP_RP_MR][OP_RP_NR];
    for (int i = 0; i < MRV; i++)
        for (int j = 0; j < OP_RP_NR; j++) x[i][j] = (acc && j < nr) ? c[i * rsc + j * csc] : -0.0f;
    for (int64_t p = 0; p < kc; p++) {
        for (int i = 0; i < MRV; i++) {
            const float ai = a[i];
            for (int j = 0; j < OP_RP_NR; j++) x[i][j] = fmaf(ai, b[j], x[i][j]);
        }
        a += OP_RP_MR;
        b += ldb;
    }
    for (int i = 0; i < MRV; i++)
        for (int j = 0; j < nr; j++) c[i * rsc + j * csc] = x[i][j];
}
#endif

#if OP_RP_MR != OP_F32_MR || OP_RP_NR != OP_F32_NR
#error "repro.c: the micro-kernel must match the float32 packing of gemm_f32.c"
#endif

#define OP_RP_INST(MRV)                                                                       \
    static OP_NOINLINE void op_rp_ukr_m##MRV(int64_t kc, const float *a, const float *b,       \
                                             int64_t ldb, float *c, int64_t rsc, int64_t csc,  \
                                             int nr, int acc)                                  \
    {                                                                                         \
        op_rp_body(MRV, kc, a, b, ldb, c, rsc, csc, nr, acc);                                 \
    }
OP_RP_INST(1) OP_RP_INST(2) OP_RP_INST(3) OP_RP_INST(4)
#if OP_RP_MR > 4
OP_RP_INST(5) OP_RP_INST(6)
#endif
#if OP_RP_MR > 6
OP_RP_INST(7) OP_RP_INST(8) OP_RP_INST(9) OP_RP_INST(10) OP_RP_INST(11) OP_RP_INST(12)
OP_RP_INST(13) OP_RP_INST(14)
#endif
#undef OP_RP_INST

typedef void (*op_rp_row_fn)(int64_t, const float *, const float *, int64_t, float *, int64_t,
                             int64_t, int, int);
static const op_rp_row_fn op_rp_table[OP_RP_MR] = {
    op_rp_ukr_m1, op_rp_ukr_m2, op_rp_ukr_m3, op_rp_ukr_m4,
#if OP_RP_MR > 4
    op_rp_ukr_m5, op_rp_ukr_m6,
#endif
#if OP_RP_MR > 6
    op_rp_ukr_m7, op_rp_ukr_m8, op_rp_ukr_m9, op_rp_ukr_m10, op_rp_ukr_m11, op_rp_ukr_m12,
    op_rp_ukr_m13, op_rp_ukr_m14,
#endif
};

static void op_rp_ukr(int64_t kc, const void *a, const void *b, int64_t ldb, float *c, int64_t rsc,
                      int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)epi;
    /* a pool worker may have inherited another MXCSR: install the default (kept afterwards; the
       calling thread's own MXCSR is restored by op_repro_gemm) */
    (void)op_rp_mxcsr_enter();
    op_rp_table[mr - 1](kc, (const float *)a, (const float *)b, ldb, c, rsc, csc, nr, acc);
}

/* ---------------------------------------------------------------- bfloat16 operands: exact widening */

#if defined(OP_HAS_AVX512)
/* 16 bfloat16 (lanes of mask k; the others 0) widened exactly to 16 float bit patterns. */
OP_INLINE __m512i op_rp_widen16(const uint16_t *p, __mmask16 k)
{
    return _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p)), 16);
}
#endif

static void op_rp_pack_a_bf16(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                              int64_t kc, int64_t kcp, void *dst)
{
    enum { MR = OP_RP_MR };
    const uint16_t *A = (const uint16_t *)g->a + (g->a_off ? g->a_off[bi] : 0);
    float *d = (float *)dst;
    for (int64_t ir = 0; ir < mc; ir += MR, d += MR * kcp) {
        const int mr = (int)op_min64(MR, mc - ir);
        const uint16_t *src = A + (i0 + ir) * g->rsa + p0 * g->csa;
#if defined(OP_HAS_AVX512)
        if (g->csa == 1) {  /* rows contiguous in depth: widen 16 at a time, 16 x 16 transposes */
            __m512i r[16];
            for (int64_t pc = 0; pc < kc; pc += 16) {
                const int nt = (int)op_min64(16, kc - pc);
                const __mmask16 km = (__mmask16)((1u << nt) - 1u);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    r[i] = i < mr ? op_rp_widen16(src + i * g->rsa + pc, km) : _mm512_setzero_si512();
                op_tr16_store_f32(r, d + pc * MR, MR, nt, (__mmask16)((1u << MR) - 1u));
            }
            continue;
        }
#endif
        for (int64_t p = 0; p < kc; p++)
            for (int i = 0; i < MR; i++)
                d[p * MR + i] = i < mr ? op_bf16_to_f32_1(src[i * g->rsa + p * g->csa]) : 0.0f;
    }
}

static void op_rp_pack_b_bf16(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc, int64_t kcp,
                              int64_t j0, int64_t nc, void *dst)
{
    enum { NR = OP_RP_NR };
    const uint16_t *B = (const uint16_t *)g->b + (g->b_off ? g->b_off[bi] : 0);
    float *d = (float *)dst;
    for (int64_t jr = 0; jr < nc; jr += NR, d += NR * kcp) {
        const int nr = (int)op_min64(NR, nc - jr);
        const uint16_t *src = B + p0 * g->rsb + (j0 + jr) * g->csb;
#if defined(OP_HAS_AVX512)
        if (g->csb == 1) {  /* rows of B contiguous: widen 32 columns per depth row */
            const __mmask16 k0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1u);
            const __mmask16 k1 = nr >= 32 ? (__mmask16)0xFFFF : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
            for (int64_t p = 0; p < kc; p++) {
                _mm512_storeu_si512((void *)(d + p * NR), op_rp_widen16(src + p * g->rsb, k0));
                _mm512_storeu_si512((void *)(d + p * NR + 16), op_rp_widen16(src + p * g->rsb + 16, k1));
            }
            continue;
        }
        if (g->rsb == 1) {  /* columns contiguous (a Linear weight read as W^T): transposes */
            __m512i r[16];
            for (int h = 0; h < NR / 16; h++)
                for (int64_t pc = 0; pc < kc; pc += 16) {
                    const int nt = (int)op_min64(16, kc - pc);
                    const __mmask16 km = (__mmask16)((1u << nt) - 1u);
#pragma GCC unroll 16
                    for (int jj = 0; jj < 16; jj++) {
                        const int j = 16 * h + jj;
                        r[jj] = j < nr ? op_rp_widen16(src + j * g->csb + pc, km) : _mm512_setzero_si512();
                    }
                    op_tr16_store_f32(r, d + pc * NR + 16 * h, NR, nt, (__mmask16)0xFFFF);
                }
            continue;
        }
#endif
        for (int64_t p = 0; p < kc; p++)
            for (int j = 0; j < NR; j++)
                d[p * NR + j] = j < nr ? op_bf16_to_f32_1(src[p * g->rsb + j * g->csb]) : 0.0f;
    }
}

/* ---------------------------------------------------------------- entry points */

int op_repro_gemm(int64_t batch, int64_t m, int64_t n, int64_t k,
                  const void *a, const int64_t *a_off, int64_t rsa, int64_t csa, int a_dtype,
                  const void *b, const int64_t *b_off, int64_t rsb, int64_t csb, int b_dtype,
                  float *c, const int64_t *c_off, int64_t rsc, int64_t csc,
                  const op_blocking *blk, int nthreads)
{
    op_gemm_args g;
    memset(&g, 0, sizeof g);
    g.batch = batch; g.m = m; g.n = n; g.k = k < 0 ? 0 : k;
    g.a = a; g.a_off = a_off; g.rsa = rsa; g.csa = csa;
    g.b = b; g.b_off = b_off; g.rsb = rsb; g.csb = csb;
    g.c = c; g.c_off = c_off; g.rsc = rsc; g.csc = csc;
    op_gemm_ops ops = op_gemm_f32_ops;  /* packing, MR/NR, blocking of the level's float32 GEMM */
    ops.ukr = op_rp_ukr;
    ops.ukr_a = NULL;
    ops.k_align = 1;
    if (a_dtype == 1) ops.pack_a = op_rp_pack_a_bf16;
    if (b_dtype == 1) {
        ops.pack_b = op_rp_pack_b_bf16;
        ops.direct_b = 0;  /* the micro-kernel reads float rows */
    }
    if (g.k == 0) {  /* the empty sum: +0 */
        for (int64_t bi = 0; bi < batch; bi++)
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) c[(c_off ? c_off[bi] : 0) + i * rsc + j * csc] = 0.0f;
        return 1;
    }
    const unsigned saved = op_rp_mxcsr_enter();
    const int used = op_gemm_drive(&ops, &g, blk, nthreads);
    op_rp_mxcsr_leave(saved);
    return used;
}

typedef struct {
    int64_t batch, m, n;
    float *c; const int64_t *c_off; int64_t rsc, csc;
    const float *bias; const int64_t *bias_off; int64_t bs; int axis, act;
    uint16_t *c16;
    int64_t rows_per_task;
} op_rp_epi_ctx;

static void op_rp_epi_task(void *ctx, int64_t task, int tid)
{
    (void)tid;
    const op_rp_epi_ctx *e = (const op_rp_epi_ctx *)ctx;
    const unsigned saved = op_rp_mxcsr_enter();
    const int64_t total = e->batch * e->m;
    const int64_t r0 = task * e->rows_per_task, r1 = op_min64(total, r0 + e->rows_per_task);
    for (int64_t r = r0; r < r1; r++) {
        const int64_t bi = r / e->m, i = r % e->m;
        const int64_t co = (e->c_off ? e->c_off[bi] : 0) + i * e->rsc;
        const float *bias = e->bias ? e->bias + (e->bias_off ? e->bias_off[bi] : 0) : NULL;
        const float rb = (bias && e->axis == 0) ? bias[i * e->bs] : 0.0f;
        if (!bias && e->act == OP_ACT_NONE && e->csc == 1) {  /* rounding only: cvt_bf16.c's row */
            op_cvt_f32_to_bf16_run(e->n, e->c + co, e->c16 + co);  /* bit-exact RNE at every level */
            continue;
        }
        for (int64_t j = 0; j < e->n; j++) {
            const int64_t at = co + j * e->csc;
            float v = e->c[at];
            if (bias) v = v + (e->axis == 0 ? rb : bias[j * e->bs]);
            if (e->act != OP_ACT_NONE) v = op_rp_act1(v, e->act);
            e->c[at] = v;
            if (e->c16) e->c16[at] = op_f32_to_bf16_1(v);
        }
    }
    op_rp_mxcsr_leave(saved);
}

int op_repro_epilogue(int64_t batch, int64_t m, int64_t n, float *c, const int64_t *c_off,
                      int64_t rsc, int64_t csc, const float *bias, const int64_t *bias_off,
                      int64_t bias_stride, int bias_axis, int act, uint16_t *c16, int nthreads)
{
    if (batch <= 0 || m <= 0 || n <= 0) return 1;
    op_rp_epi_ctx e = {batch, m, n, c, c_off, rsc, csc, bias, bias_off, bias_stride, bias_axis, act, c16, 1};
    const int64_t total = batch * m;
    const double work = (double)total * (double)n * (act >= OP_ACT_GELU ? 40.0 : 1.0);
    int64_t T = (int64_t)(work / 200000.0);
    if (T > nthreads) T = nthreads;
    if (T < 1) T = 1;
    e.rows_per_task = op_cdiv64(total, T * 4);
    return op_parallel_for((int)T, op_cdiv64(total, e.rows_per_task), op_rp_epi_task, &e);
}

const char *op_repro_kernel_name(void) { return OP_RP_NAME; }
