/* act_f32.c: the activations of the GEMM/conv epilogue (OP_ACT_*), 16 lanes at a time (fewer
   values through a zero-padded copy of 16 lanes: every value gets the same bits wherever it falls).
   The vector forms use GCC vector extensions, so each level's build lowers them to its own
   registers (one zmm, two ymm, four xmm). Non-finite inputs follow the formulas in IEEE
   arithmetic, as torch does: NaN stays NaN, +Inf gives +Inf, and -Inf gives NaN (-Inf times a
   factor whose limit is 0); a finite x far below zero gives -0 (the factor underflows to 0).
   exp: 2^n * p(r) with n = round(x log2 e) and r = x - n ln2 in two parts (Cody-Waite reduction),
   p the degree-6 Taylor polynomial (relative error about 1.2e-7 on |r| <= ln2/2).
   erf (for exact GELU): Abramowitz & Stegun, Handbook of Mathematical Functions, formula 7.1.26
   (absolute error <= 1.5e-7), evaluated as erfc(|z|) so that 1 + erf(z) has no cancellation for
   negative z. tanh-GELU is rewritten as x * sigmoid(2u), SiLU as x * sigmoid(x). */

typedef float op_v16f __attribute__((vector_size(64)));
typedef int32_t op_v16i __attribute__((vector_size(64)));

/* (GCC warns -Wpsabi about passing 64-byte vectors at levels without AVX-512: these helpers are
   always inlined, so no call ABI is involved.) */
OP_INLINE op_v16f op_v16_splat(float x)
{
    return (op_v16f){x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x};  /* keeps the sign of -0 */
}
/* lanes of a where m is all-ones, else lanes of b */
OP_INLINE op_v16f op_v16_sel(op_v16i m, op_v16f a, op_v16f b)
{
    return (op_v16f)(((op_v16i)a & m) | ((op_v16i)b & ~m));
}

#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
/* AVX2: the formulas below in 256-bit intrinsics, two vectors per op_v16f. GCC lowered the vector
   extensions' 16-lane int conversions, shifts and selects at this level into element-by-element
   code (op_act_row was 1,800 instructions): the fused GELU of a 1344x384x1536 linear took 13 ms
   of its 22.6 at 2 threads on Zen 3 (torch's separate gelu: 1.2 ms). Same constants, clamps and
   non-finite rules as the portable form; vminps / vmaxps return their second operand when one is
   NaN, so NaN stays NaN through the clamps. */
/* unfused multiplies and adds, as the portable form compiles (-std=c11: no FP contraction), so
   that every level gives the same bits (attention promises them) */
#define OP_M256_MA(a, b, c) _mm256_add_ps(_mm256_mul_ps((a), (b)), (c))
/* The N-vector forms (N <= 4, a constant where inlined) take each step for all N vectors before
   the next: the independent chains side by side (one exp is a ~30-deep chain of dependent
   multiplies and adds). Per lane the same operations whatever N. */
#define OP_M256_N(stmt) for (int k = 0; k < N; k++) { stmt; }
#define OP_S(v) _mm256_set1_ps(v)
OP_INLINE void op_m256_exp_n(const int N, __m256 *x)
{
    __m256 over[4], nf[4], r[4], p[4];
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    OP_M256_N(over[k] = _mm256_cmp_ps(x[k], OP_S(88.72283f), _CMP_GT_OQ))
    OP_M256_N(x[k] = _mm256_max_ps(OP_S(-86.0f), _mm256_min_ps(OP_S(88.0f), x[k])))
    OP_M256_N(nf[k] = _mm256_sub_ps(OP_M256_MA(x[k], OP_S(1.44269504088896341f), magic), magic))
    OP_M256_N(r[k] = _mm256_sub_ps(_mm256_sub_ps(x[k], _mm256_mul_ps(nf[k], OP_S(0.693359375f))),
                                   _mm256_mul_ps(nf[k], OP_S(-2.12194440e-4f))))
    OP_M256_N(p[k] = OP_M256_MA(OP_S(1.0f / 720.0f), r[k], OP_S(1.0f / 120.0f)))
    OP_M256_N(p[k] = OP_M256_MA(p[k], r[k], OP_S(1.0f / 24.0f)))
    OP_M256_N(p[k] = OP_M256_MA(p[k], r[k], OP_S(1.0f / 6.0f)))
    OP_M256_N(p[k] = OP_M256_MA(p[k], r[k], OP_S(0.5f)))
    OP_M256_N(p[k] = OP_M256_MA(p[k], r[k], OP_S(1.0f)))
    OP_M256_N(p[k] = OP_M256_MA(p[k], r[k], OP_S(1.0f)))
    /* 2^n: n in [-124, 127] after the clamps (a NaN lane's n is garbage, p NaN) */
    OP_M256_N(const __m256i n = _mm256_add_epi32(_mm256_cvttps_epi32(nf[k]),
                                                 _mm256_set1_epi32(127));
              const __m256 y = _mm256_mul_ps(p[k], _mm256_castsi256_ps(_mm256_slli_epi32(n, 23)));
              x[k] = _mm256_blendv_ps(y, OP_S(INFINITY), over[k]))
}

OP_INLINE op_v16f op_v16_exp(op_v16f x)
{
    __m256 h[2];
    memcpy(h, &x, sizeof h);
    op_m256_exp_n(2, h);
    memcpy(&x, h, sizeof h);
    return x;
}
#else
OP_INLINE op_v16f op_v16_exp(op_v16f x)
{
    const op_v16i over = x > op_v16_splat(88.72283f);  /* ln(FLT_MAX): the result is +Inf */
    x = op_v16_sel(x > op_v16_splat(88.0f), op_v16_splat(88.0f), x);
    /* below -86 the result would be subnormal (slow on many CPUs); exp(-86) = 4.4e-38 stands in */
    x = op_v16_sel(x < op_v16_splat(-86.0f), op_v16_splat(-86.0f), x);
    const op_v16f magic = op_v16_splat(12582912.0f);  /* 1.5 * 2^23: adding it rounds to an integer */
    const op_v16f nf = (x * 1.44269504088896341f + magic) - magic;
    const op_v16f r = (x - nf * 0.693359375f) - nf * -2.12194440e-4f;
    op_v16f p = op_v16_splat(1.0f / 720.0f);
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const op_v16i n = __builtin_convertvector(nf, op_v16i);
    return op_v16_sel(over, op_v16_splat(INFINITY), p * (op_v16f)((n + 127) << 23));
}
#endif

#if defined(OP_HAS_AVX512)
/* The same formulas in AVX-512 intrinsics: compares into mask registers, blends, FMAs and
   vscalefps for the 2^n of exp, where GCC's lowering of the vector-extension selects above costs
   about twice the instructions (measured on Zen 4: the fused GELU epilogue of a bfloat16
   1344x384x1536 linear took 3.1 ms of its 17.8 ms). Same constants, clamps and non-finite rules. */
/* 2^n p(r) from n and r = x - n ln2_hi (the second part of ln2 subtracted here): exp's polynomial
   and VSCALEFPS, shared by op_m512_exp and op_m512_exp_neg */
OP_INLINE __m512 op_m512_exp_reduced(__m512 r, __m512 nf)
{
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, nf);
}

OP_INLINE __m512 op_m512_exp(__m512 x)
{
    const __mmask16 over = _mm512_cmp_ps_mask(x, _mm512_set1_ps(88.72283f), _CMP_GT_OQ);
    /* vminps/vmaxps return their second operand when one is NaN: NaN stays NaN */
    x = _mm512_max_ps(_mm512_set1_ps(-86.0f), _mm512_min_ps(_mm512_set1_ps(88.0f), x));
    const __m512 nf = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(0.693359375f), x);
    return _mm512_mask_blend_ps(over, op_m512_exp_reduced(r, nf), _mm512_set1_ps(INFINITY));
}

/* exp(-s) for s in [0, 81] or NaN (exact GELU's erfc below: s = a^2 with a <= 9): op_m512_exp(-s)
   without its range clamps, never active there, and with the negation folded into the reduction
   (-s - n ln2 as one VFNMSUB, n = round(s * -log2 e)): the same values, the same bits, 5 fewer
   instructions of GELU's ~37 per 16 values. sapphirerapids (the Intel AMX VM, 2026-12-04, builds
   alternated in one process): the bfloat16 1344x384x1536 linear with GELU (MiniLM's ffn_in),
   2 threads 1620 -> 1576 us, 1 thread 3167 -> 2953 us (torch's linear and gelu: 1314, 2477) */
OP_INLINE __m512 op_m512_exp_neg(__m512 s)
{
    const __m512 nf = _mm512_roundscale_ps(_mm512_mul_ps(s, _mm512_set1_ps(-1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return op_m512_exp_reduced(_mm512_fnmsub_ps(nf, _mm512_set1_ps(0.693359375f), s), nf);
}

OP_INLINE op_v16f op_v16_act(op_v16f xv, int act)
{
    const __m512 x = (__m512)xv, one = _mm512_set1_ps(1.0f);
    switch (act) {
    case OP_ACT_GELU: {
        const __m512 z = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f));
        const __m512 az = _mm512_abs_ps(z);
        const __mmask16 tail = _mm512_cmp_ps_mask(az, _mm512_set1_ps(9.0f), _CMP_GT_OQ);
        const __m512 a = _mm512_min_ps(_mm512_set1_ps(9.0f), az);
        /* t = 1 / d, d in [1, 3.95]: VRCP14PS (relative error < 2^-14) and one Newton step
           (t + t (1 - d t): about 2^-28 before its last rounding, so within 1 ulp of VDIVPS's
           correctly rounded quotient and far below the formula's 1.5e-7; GELU's last bit may
           differ from the VDIVPS version's) instead of VDIVPS (one 16-lane divide per ~10 cycles
           on Sapphire Rapids; the fused GELU of a bfloat16 1344x384x1536 linear there, 2
           threads: 1000 -> 1030-1075 GFLOP/s) */
        const __m512 d = _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), a, one);
        const __m512 t0 = _mm512_rcp14_ps(d);
        const __m512 t = _mm512_fmadd_ps(t0, _mm512_fnmadd_ps(d, t0, one), t0);
        __m512 p = _mm512_set1_ps(1.061405429f);
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
        p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
        const __m512 e = op_m512_exp_neg(_mm512_mul_ps(a, a));
        const __m512 erfc_a = _mm512_maskz_mul_ps((__mmask16)~tail, _mm512_mul_ps(p, t), e);
        const __mmask16 neg = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_LT_OQ);
        const __m512 f = _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(2.0f), erfc_a), erfc_a);
        return (op_v16f)_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), f);
    }
    case OP_ACT_GELU_TANH: {
        const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
        const __m512 u = _mm512_mul_ps(_mm512_set1_ps(0.79788456080286536f),
                                       _mm512_fmadd_ps(_mm512_set1_ps(0.044715f), x3, x));
        const __m512 e = op_m512_exp(_mm512_mul_ps(_mm512_set1_ps(-2.0f), u));
        return (op_v16f)_mm512_div_ps(x, _mm512_add_ps(one, e));
    }
    case OP_ACT_SILU:
        return (op_v16f)_mm512_div_ps(x, _mm512_add_ps(one, op_m512_exp(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    default:  /* relu; max(0, x) returns x when x is NaN, and -0 for -0 */
        return (op_v16f)_mm512_max_ps(_mm512_setzero_ps(), x);
    }
}
#elif defined(OP_HAS_AVX2)
OP_INLINE void op_m256_act_n(const int N, __m256 *x, int act)
{
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    __m256 z[4], tail[4], a[4], t[4], p[4], e[4];
    switch (act) {
    case OP_ACT_GELU:   /* as the portable form below (the same operations): erfc(|z|) */
        OP_M256_N(z[k] = _mm256_mul_ps(x[k], OP_S(0.70710678118654752f)))
        OP_M256_N(const __m256 az = _mm256_andnot_ps(sign, z[k]);
                  tail[k] = _mm256_cmp_ps(az, OP_S(9.0f), _CMP_GT_OQ);
                  a[k] = _mm256_min_ps(OP_S(9.0f), az))
        OP_M256_N(const __m256 den = _mm256_add_ps(one, _mm256_mul_ps(OP_S(0.3275911f), a[k]));
                  t[k] = _mm256_div_ps(one, den))
        OP_M256_N(e[k] = _mm256_xor_ps(sign, _mm256_mul_ps(a[k], a[k])))
        op_m256_exp_n(N, e);
        OP_M256_N(p[k] = _mm256_sub_ps(_mm256_mul_ps(OP_S(1.061405429f), t[k]), OP_S(1.453152027f)))
        OP_M256_N(p[k] = OP_M256_MA(p[k], t[k], OP_S(1.421413741f)))
        OP_M256_N(p[k] = _mm256_sub_ps(_mm256_mul_ps(p[k], t[k]), OP_S(0.284496736f)))
        OP_M256_N(p[k] = OP_M256_MA(p[k], t[k], OP_S(0.254829592f)))
        OP_M256_N(const __m256 pt = _mm256_mul_ps(p[k], t[k]);
                  const __m256 erfc_a = _mm256_andnot_ps(tail[k], _mm256_mul_ps(pt, e[k]));
                  const __m256 neg = _mm256_cmp_ps(z[k], _mm256_setzero_ps(), _CMP_LT_OQ);
                  const __m256 f = _mm256_blendv_ps(_mm256_sub_ps(OP_S(2.0f), erfc_a), erfc_a, neg);
                  x[k] = _mm256_mul_ps(_mm256_mul_ps(OP_S(0.5f), x[k]), f))
        return;
    case OP_ACT_GELU_TANH:   /* 0.79788456 * (x + 0.044715 * x * x * x), left to right */
        OP_M256_N(const __m256 c3 = _mm256_mul_ps(_mm256_mul_ps(OP_S(0.044715f), x[k]), x[k]);
                  const __m256 x3 = _mm256_mul_ps(c3, x[k]);
                  const __m256 u = _mm256_mul_ps(OP_S(0.79788456080286536f),
                                                 _mm256_add_ps(x[k], x3));
                  e[k] = _mm256_mul_ps(OP_S(-2.0f), u))
        op_m256_exp_n(N, e);
        OP_M256_N(x[k] = _mm256_div_ps(x[k], _mm256_add_ps(one, e[k])))
        return;
    case OP_ACT_SILU:
        OP_M256_N(e[k] = _mm256_xor_ps(sign, x[k]))
        op_m256_exp_n(N, e);
        OP_M256_N(x[k] = _mm256_div_ps(x[k], _mm256_add_ps(one, e[k])))
        return;
    default:   /* relu; max(0, x) returns x when x is NaN, and -0 for -0 */
        OP_M256_N(x[k] = _mm256_max_ps(_mm256_setzero_ps(), x[k]))
        return;
    }
}

OP_INLINE op_v16f op_v16_act(op_v16f x, int act)
{
    __m256 h[2];
    memcpy(h, &x, sizeof h);
    op_m256_act_n(2, h, act);
    memcpy(&x, h, sizeof h);
    return x;
}
#else
OP_INLINE op_v16f op_v16_act(op_v16f x, int act)
{
    switch (act) {
    case OP_ACT_GELU: {
        const op_v16f z = x * 0.70710678118654752f;
        op_v16f a = (op_v16f)((op_v16i)z & 0x7fffffff);
        /* past |z| = 9, erfc(|z|) < 4e-37 is taken as 0 (so x * it is -0, or NaN for -Inf, and
           not x * 4e-37); the clamp keeps every intermediate normal (subnormals are slow) */
        const op_v16i tail = a > op_v16_splat(9.0f);
        a = op_v16_sel(tail, op_v16_splat(9.0f), a);
        const op_v16f t = 1.0f / (1.0f + 0.3275911f * a);
        op_v16f p = op_v16_splat(1.061405429f);
        p = p * t - 1.453152027f;
        p = p * t + 1.421413741f;
        p = p * t - 0.284496736f;
        p = p * t + 0.254829592f;
        const op_v16f erfc_a = op_v16_sel(tail, op_v16_splat(0.0f), p * t * op_v16_exp(-(a * a)));
        return 0.5f * x * op_v16_sel(z < 0.0f, erfc_a, 2.0f - erfc_a);
    }
    case OP_ACT_GELU_TANH: {
        const op_v16f u = 0.79788456080286536f * (x + 0.044715f * x * x * x);
        return x / (1.0f + op_v16_exp(-2.0f * u));
    }
    case OP_ACT_SILU:
        return x / (1.0f + op_v16_exp(-x));
    default:
        return op_v16_sel(x < 0.0f, op_v16_splat(0.0f), x);
    }
}

#endif

/* Up to 16 values v[0..n-1] in place, through a zero-padded copy of 16 lanes: every value
   takes the vector form's operations whatever its place, so a GEMM tile's edge columns, a row's
   tail and a lone value give the bits its full vectors give (libm's erff / tanhf / expf, used here
   before, differed in the last bits, and where a value fell in a tile depended on e.g. an image's
   place in a batch). Lanes are independent: the padding does not change the others. */
static void op_act_lanes(float *v, int n, int act)
{
    if (act == OP_ACT_NONE) return;
    if (act == OP_ACT_RELU) {   /* as the vector max(0, x): NaN stays NaN, -0 stays -0 */
        for (int j = 0; j < n; j++) v[j] = v[j] < 0.0f ? 0.0f : v[j];
        return;
    }
    float t[16] = {0};
    memcpy(t, v, (size_t)n * sizeof *v);
    op_v16f x;
    memcpy(&x, t, sizeof x);
    x = op_v16_act(x, act);
    memcpy(t, &x, sizeof x);
    memcpy(v, t, (size_t)n * sizeof *v);
}

/* In-place activation of n elements at stride cs (used after a vector row store): 16 at a time,
   a strided or short rest gathered through op_act_lanes. */
static OP_NOINLINE void op_act_row(float *c, int64_t cs, int64_t n, int act)
{
    int64_t j = 0;
    if (cs == 1) {
        for (; j + 16 <= n; j += 16) {
            op_v16f x, y;
            memcpy(&x, c + j, sizeof x);
            y = op_v16_act(x, act);
            memcpy(c + j, &y, sizeof y);
        }
    }
    for (; j < n; j += 16) {
        const int w = n - j < 16 ? (int)(n - j) : 16;
        float t[16];
        for (int i = 0; i < w; i++) t[i] = c[(j + i) * cs];
        op_act_lanes(t, w, act);
        for (int i = 0; i < w; i++) c[(j + i) * cs] = t[i];
    }
}

#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
/* In-place activation of a tile of rows x 16 contiguous elements (rows rs apart), the act a
   constant in each loop: the AVX2 GEMM micro-kernel's epilogue (one call per tile, where a call
   per 16-element row and its switch made the fused GELU of a 1344x384x1536 linear cost three
   times torch's separate gelu pass on Zen 3). The same values as op_act_row. */
#define OP_ACT_ROWS_N 2   /* rows at a time: 2 x 2 vectors side by side */
#define OP_ACT_ROWS16(A)                                                            \
    {                                                                               \
        int i = 0;                                                                  \
        for (; i + OP_ACT_ROWS_N <= rows; i += OP_ACT_ROWS_N) {                     \
            __m256 v[2 * OP_ACT_ROWS_N];                                            \
            for (int k = 0; k < 2 * OP_ACT_ROWS_N; k++)                             \
                v[k] = _mm256_loadu_ps(c + (i + k / 2) * rs + 8 * (k % 2));         \
            op_m256_act_n(2 * OP_ACT_ROWS_N, v, (A));                               \
            for (int k = 0; k < 2 * OP_ACT_ROWS_N; k++)                             \
                _mm256_storeu_ps(c + (i + k / 2) * rs + 8 * (k % 2), v[k]);         \
        }                                                                           \
        for (; i < rows; i++) {                                                     \
            __m256 v[2] = {_mm256_loadu_ps(c + i * rs), _mm256_loadu_ps(c + i * rs + 8)}; \
            op_m256_act_n(2, v, (A));                                               \
            _mm256_storeu_ps(c + i * rs, v[0]);                                     \
            _mm256_storeu_ps(c + i * rs + 8, v[1]);                                 \
        }                                                                           \
    }
static OP_NOINLINE void op_act_rows16(float *c, int64_t rs, int rows, int act)
{
    switch (act) {
    case OP_ACT_GELU: OP_ACT_ROWS16(OP_ACT_GELU); break;
    case OP_ACT_GELU_TANH: OP_ACT_ROWS16(OP_ACT_GELU_TANH); break;
    case OP_ACT_SILU: OP_ACT_ROWS16(OP_ACT_SILU); break;
    case OP_ACT_RELU: OP_ACT_ROWS16(OP_ACT_RELU); break;
    default: break;
    }
}
#undef OP_ACT_ROWS16
#undef OP_ACT_ROWS_N
#endif
