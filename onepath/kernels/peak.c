/* peak.c: op_peak_f32(iters), a single-thread FMA throughput probe of this level.

   Each iteration issues one FMA on each of OP_PEAK_ACC independent accumulators (enough chains to
   cover FMA latency x ports: 4 cycles x 2 ports = 8 needed; 16 zmm with avx512, where 32 registers
   leave room; 12 with 16-register ymm/xmm files, where 16 accumulators would spill). The multiplier and addend come
   from volatile loads and the accumulators are summed into a volatile sink, so nothing folds away.
   Returns iters * OP_PEAK_ACC * lanes * 2 flops. */

#if defined(OP_HAS_AVX512)
#define OP_PEAK_ACC 16
#else
#define OP_PEAK_ACC 12
#endif

#if defined(OP_HAS_AVX512)
#define OP_PEAK_REG(x) "+v"(x)
#else
#define OP_PEAK_REG(x) "+x"(x)
#endif

static volatile float op_peak_sink;

#if defined(OP_HAS_AVX512)
#define OP_PEAK_LANES 16
typedef __m512 op_pv;
#define OP_PV_SET1(x) _mm512_set1_ps(x)
#define OP_PV_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define OP_PV_ADD(a, b) _mm512_add_ps(a, b)
static inline float op_pv_sum(op_pv v) { return _mm512_reduce_add_ps(v); }
#elif defined(OP_HAS_AVX2)
#define OP_PEAK_LANES 8
typedef __m256 op_pv;
#define OP_PV_SET1(x) _mm256_set1_ps(x)
#define OP_PV_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define OP_PV_ADD(a, b) _mm256_add_ps(a, b)
static inline float op_pv_sum(op_pv v)
{
    float t[8];
    _mm256_storeu_ps(t, v);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#else
/* Baseline: SSE2 4-wide mul + add (no FMA in x86-64 v1); counted as 2 flops per lane. */
#define OP_PEAK_LANES 4
typedef float op_pv __attribute__((vector_size(16)));
#define OP_PV_SET1(x) ((op_pv){(x), (x), (x), (x)})
#define OP_PV_FMA(a, b, c) ((a) * (b) + (c))
#define OP_PV_ADD(a, b) ((a) + (b))
static inline float op_pv_sum(op_pv v) { return v[0] + v[1] + v[2] + v[3]; }
#endif

int64_t op_peak_f32(int64_t iters)
{
    volatile float vm = 0.999999f, va = 1e-7f, v0 = 1.0f, vd = 0.0625f;
    const float f0 = v0, d = vd;
    op_pv m = OP_PV_SET1(vm), a = OP_PV_SET1(va);
    /* distinct starting values: identical chains could be merged by value numbering */
    op_pv x0 = OP_PV_SET1(f0), x1 = OP_PV_SET1(f0 + d), x2 = OP_PV_SET1(f0 + 2 * d);
    op_pv x3 = OP_PV_SET1(f0 + 3 * d), x4 = OP_PV_SET1(f0 + 4 * d), x5 = OP_PV_SET1(f0 + 5 * d);
    op_pv x6 = OP_PV_SET1(f0 + 6 * d), x7 = OP_PV_SET1(f0 + 7 * d), x8 = OP_PV_SET1(f0 + 8 * d);
    op_pv x9 = OP_PV_SET1(f0 + 9 * d), x10 = OP_PV_SET1(f0 + 10 * d), x11 = OP_PV_SET1(f0 + 11 * d);
#if OP_PEAK_ACC == 16
    op_pv x12 = OP_PV_SET1(f0 + 12 * d), x13 = OP_PV_SET1(f0 + 13 * d);
    op_pv x14 = OP_PV_SET1(f0 + 14 * d), x15 = OP_PV_SET1(f0 + 15 * d);
#endif
    if (iters < 0) iters = 0;
    for (int64_t i = 0; i < iters; i++) {
        x0 = OP_PV_FMA(x0, m, a); x1 = OP_PV_FMA(x1, m, a);
        x2 = OP_PV_FMA(x2, m, a); x3 = OP_PV_FMA(x3, m, a);
        x4 = OP_PV_FMA(x4, m, a); x5 = OP_PV_FMA(x5, m, a);
        x6 = OP_PV_FMA(x6, m, a); x7 = OP_PV_FMA(x7, m, a);
        x8 = OP_PV_FMA(x8, m, a); x9 = OP_PV_FMA(x9, m, a);
        x10 = OP_PV_FMA(x10, m, a); x11 = OP_PV_FMA(x11, m, a);
#if OP_PEAK_ACC == 16
        x12 = OP_PV_FMA(x12, m, a); x13 = OP_PV_FMA(x13, m, a);
        x14 = OP_PV_FMA(x14, m, a); x15 = OP_PV_FMA(x15, m, a);
#endif
        /* keep every chain opaque to the optimiser (no merging, no closed form) */
        __asm__ volatile("" : OP_PEAK_REG(x0), OP_PEAK_REG(x1), OP_PEAK_REG(x2), OP_PEAK_REG(x3),
                         OP_PEAK_REG(x4), OP_PEAK_REG(x5), OP_PEAK_REG(x6), OP_PEAK_REG(x7));
        __asm__ volatile("" : OP_PEAK_REG(x8), OP_PEAK_REG(x9), OP_PEAK_REG(x10), OP_PEAK_REG(x11));
#if OP_PEAK_ACC == 16
        __asm__ volatile("" : OP_PEAK_REG(x12), OP_PEAK_REG(x13), OP_PEAK_REG(x14), OP_PEAK_REG(x15));
#endif
    }
    op_pv s = OP_PV_ADD(OP_PV_ADD(OP_PV_ADD(x0, x1), OP_PV_ADD(x2, x3)),
                        OP_PV_ADD(OP_PV_ADD(x4, x5), OP_PV_ADD(x6, x7)));
    s = OP_PV_ADD(s, OP_PV_ADD(OP_PV_ADD(x8, x9), OP_PV_ADD(x10, x11)));
#if OP_PEAK_ACC == 16
    s = OP_PV_ADD(s, OP_PV_ADD(OP_PV_ADD(x12, x13), OP_PV_ADD(x14, x15)));
#endif
    op_peak_sink = op_pv_sum(s);
    return iters * OP_PEAK_ACC * OP_PEAK_LANES * 2;
}
