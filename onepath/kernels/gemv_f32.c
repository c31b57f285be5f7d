/* gemv_f32.c: the dot-product path of the float32 GEMM, for thin problems whose operands are both
   contiguous along K (A rows with csa == 1, B columns with rsb == 1): y = W x shapes (N <= 4, e.g.
   matmul(A, v)) and decode shapes x W^T (M <= 4, e.g. linear with a raw (out, in) weight).
   Packing would read and write the whole large operand once more than the product itself does, so
   this path streams it once: every C element is a dot product over K, computed R x S at a time
   (R rows of A, S columns of B) with vector accumulators along K, at every level (AVX-512: 16 lanes,
   AVX2: 8, portable: 4 through GCC vector extensions). Threads split the large side. */

#if defined(OP_HAS_AVX512)
#define OP_DV_W 16
typedef __m512 op_dv;
OP_INLINE op_dv op_dv_zero(void) { return _mm512_setzero_ps(); }
OP_INLINE op_dv op_dv_load(const float *p) { return _mm512_loadu_ps(p); }
OP_INLINE op_dv op_dv_fma(op_dv a, op_dv b, op_dv c) { return _mm512_fmadd_ps(a, b, c); }
OP_INLINE float op_dv_sum(op_dv v) { return _mm512_reduce_add_ps(v); }
#define OP_DOT_BIG(s) ((s) <= 2 ? 8 : 4)   /* large-side block for small-side size s (registers) */
#elif defined(OP_HAS_AVX2)
#define OP_DV_W 8
typedef __m256 op_dv;
OP_INLINE op_dv op_dv_zero(void) { return _mm256_setzero_ps(); }
OP_INLINE op_dv op_dv_load(const float *p) { return _mm256_loadu_ps(p); }
OP_INLINE op_dv op_dv_fma(op_dv a, op_dv b, op_dv c) { return _mm256_fmadd_ps(a, b, c); }
OP_INLINE float op_dv_sum(op_dv v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
#define OP_DOT_BIG(s) ((s) <= 2 ? 4 : 2)
#else
#define OP_DV_W 4
typedef float op_dv __attribute__((vector_size(16)));
OP_INLINE op_dv op_dv_zero(void) { const op_dv z = {0.0f, 0.0f, 0.0f, 0.0f}; return z; }
OP_INLINE op_dv op_dv_load(const float *p) { op_dv v; memcpy(&v, p, sizeof v); return v; }
OP_INLINE op_dv op_dv_fma(op_dv a, op_dv b, op_dv c) { return a * b + c; }
OP_INLINE float op_dv_sum(op_dv v) { return (v[0] + v[2]) + (v[1] + v[3]); }
#define OP_DOT_BIG(s) ((s) <= 2 ? 4 : 2)
#endif

#define OP_DOT_MAX 8   /* the largest block on either side */

/* t[r][s] = sum_p A[r, p] B[p, s] for an R x S tile; A rows at a + r * rsa, B columns at b + s * csb,
   both contiguous along p. R and S are compile-time constants at every call site. */
OP_INLINE void op_dot_tile(const int R, const int S, int64_t k, const float *a, int64_t rsa,
                           const float *b, int64_t csb, float *t)
{
    op_dv acc[OP_DOT_MAX][OP_DOT_MAX];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) acc[r][s] = op_dv_zero();
    int64_t p = 0;
    for (; p + OP_DV_W <= k; p += OP_DV_W) {
        op_dv bv[OP_DOT_MAX];
        for (int s = 0; s < S; s++) bv[s] = op_dv_load(b + s * csb + p);
        for (int r = 0; r < R; r++) {
            const op_dv av = op_dv_load(a + r * rsa + p);
            for (int s = 0; s < S; s++) acc[r][s] = op_dv_fma(av, bv[s], acc[r][s]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            float v = op_dv_sum(acc[r][s]);
            for (int64_t q = p; q < k; q++) v += a[r * rsa + q] * b[s * csb + q];
            t[r * OP_DOT_MAX + s] = v;
        }
}

/* Dispatch a run-time R x S (1..OP_DOT_MAX each, within the register budget) to an instantiation. */
static void op_dot_tile_any(int R, int S, int64_t k, const float *a, int64_t rsa, const float *b,
                            int64_t csb, float *t)
{
#define OP_DOT_CASE_S(RR)                                                                        \
    switch (S) {                                                                                 \
    case 1: op_dot_tile(RR, 1, k, a, rsa, b, csb, t); return;                                   \
    case 2: op_dot_tile(RR, 2, k, a, rsa, b, csb, t); return;                                   \
    case 3: op_dot_tile(RR, 3, k, a, rsa, b, csb, t); return;                                   \
    case 4: op_dot_tile(RR, 4, k, a, rsa, b, csb, t); return;                                   \
    default:                                                                                     \
        if ((RR) <= 2) {                                                                         \
            for (int s0 = 0; s0 < S; s0 += 4) {                                                  \
                const int ss = S - s0 < 4 ? S - s0 : 4;                                          \
                op_dot_tile_any(RR, ss, k, a, rsa, b + s0 * csb, csb, t + s0);                  \
            }                                                                                    \
        }                                                                                        \
        return;                                                                                  \
    }
    if (R <= 2 && S > 4) {
        /* wide tiles for one or two rows: more independent accumulators hide the FMA latency */
        switch (R * 16 + S) {
        case 16 + 5: op_dot_tile(1, 5, k, a, rsa, b, csb, t); return;
        case 16 + 6: op_dot_tile(1, 6, k, a, rsa, b, csb, t); return;
        case 16 + 7: op_dot_tile(1, 7, k, a, rsa, b, csb, t); return;
        case 16 + 8: op_dot_tile(1, 8, k, a, rsa, b, csb, t); return;
        case 32 + 5: op_dot_tile(2, 5, k, a, rsa, b, csb, t); return;
        case 32 + 6: op_dot_tile(2, 6, k, a, rsa, b, csb, t); return;
        case 32 + 7: op_dot_tile(2, 7, k, a, rsa, b, csb, t); return;
        case 32 + 8: op_dot_tile(2, 8, k, a, rsa, b, csb, t); return;
        default: break;
        }
    }
    switch (R) {
    case 1: OP_DOT_CASE_S(1)
    case 2: OP_DOT_CASE_S(2)
    case 3: OP_DOT_CASE_S(3)
    case 4: OP_DOT_CASE_S(4)
    default:
        /* more than 4 rows: only reached with S <= 2 (the transposed use), split the rows */
        for (int r0 = 0; r0 < R; r0 += 4) {
            const int rr = R - r0 < 4 ? R - r0 : 4;
            op_dot_tile_any(rr, S, k, a + r0 * rsa, rsa, b, csb, t + r0 * OP_DOT_MAX);
        }
        return;
    }
#undef OP_DOT_CASE_S
}

typedef struct {
    const op_gemm_args *g;
    int rows_small;        /* 1: the small side is M (split N); 0: the small side is N (split M) */
    int64_t big, chunk, nchunks;
} op_dot_ctx;

static void op_dot_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const op_dot_ctx *x = (const op_dot_ctx *)vctx;
    const op_gemm_args *g = x->g;
    const int64_t bi = task / x->nchunks, ci = task % x->nchunks;
    const float *a = (const float *)g->a + (g->a_off ? g->a_off[bi] : 0);
    const float *b = (const float *)g->b + (g->b_off ? g->b_off[bi] : 0);
    float *c = g->c + (g->c_off ? g->c_off[bi] : 0);
    const int64_t lo = ci * x->chunk, hi = op_min64(x->big, lo + x->chunk);
    const int small = (int)(x->rows_small ? g->m : g->n);
    const int blockb = OP_DOT_BIG(small);
    float t[OP_DOT_MAX * OP_DOT_MAX];
    for (int64_t q = lo; q < hi; q += blockb) {
        const int nb = (int)op_min64(blockb, hi - q);
        int64_t i0, j0;
        int R, S;
        if (x->rows_small) { i0 = 0; j0 = q; R = small; S = nb; }
        else { i0 = q; j0 = 0; R = nb; S = small; }
        op_dot_tile_any(R, S, g->k, a + i0 * g->rsa, g->rsa, b + j0 * g->csb, g->csb, t);
        op_epilogue e, *ep = NULL;
        if (g->epi) {
            e = *g->epi;
            if (e.bias) e.bias += (e.bias_axis == 0 ? i0 : j0) * e.bias_stride;
            ep = &e;
        }
        op_tile_store(t, OP_DOT_MAX, R, S, c + i0 * g->rsc + j0 * g->csc, g->rsc, g->csc, 0, ep);
    }
}

/* The dot path when it applies (returns threads used), else 0: the caller runs the packed GEMM. */
static int op_gemv_f32(const op_gemm_args *g, int nthreads)
{
    if (g->csa != 1 || g->rsb != 1 || g->k < OP_DV_W || g->m < 1 || g->n < 1) return 0;
    op_dot_ctx x;
    x.g = g;
    if (g->m <= 4 && g->m <= g->n) { x.rows_small = 1; x.big = g->n; }
    else if (g->n <= 4) { x.rows_small = 0; x.big = g->m; }
    else return 0;
    const int blockb = OP_DOT_BIG((int)(x.rows_small ? g->m : g->n));
    const double flops = 2.0 * (double)g->batch * (double)g->m * (double)g->n * (double)g->k;
    int64_t T = (int64_t)(flops / OP_GEMM_MIN_FLOPS_PER_THREAD);
    if (T > nthreads) T = nthreads;
    if (T < 1) T = 1;
    /* several chunks per thread (dynamic claiming evens out a busy core), whole blocks each */
    int64_t want = T == 1 ? 1 : 4 * T;
    if (g->batch >= want) want = 1;
    int64_t chunk = (x.big + want - 1) / want;
    chunk = (chunk + blockb - 1) / blockb * blockb;
    x.chunk = chunk;
    x.nchunks = (x.big + chunk - 1) / chunk;
    return op_parallel_for((int)T, g->batch * x.nchunks, op_dot_task, &x);
}
