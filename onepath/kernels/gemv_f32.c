/* gemv_f32.c: the dot-product path of the float32 GEMM, for thin problems whose operands are both
   contiguous along K (A rows with csa == 1, B columns with rsb == 1): y = W x shapes (N <= 4, e.g.
   matmul(A, v)) and thin shapes x W^T (M <= 4; 5-16 with K >= 256: e.g. linear with a raw
   (out, in) weight). The 5-16 row form, op_dot_tall, blocks K so A's rows and the B columns are
   read from L1 (sapphirerapids, 1 thread, M = 16, K = N = 4096: 43 GFLOP/s through the packed
   GEMM, 110 here, numpy 50).
   Packing would read and write the whole large operand once more than the product itself does, so
   this path streams it once: every C element is a dot product over K, computed R x S at a time
   (R rows of A, S columns of B) with vector accumulators along K, at every level (AVX-512: 16 lanes,
   AVX2: 8, portable: 4 through GCC vector extensions). Threads split the large side.
   The row-stream path (op_kn_f32, below) takes the other thin shape, x W with a row-major W
   (csb == 1, M <= OP_KN_MAX_M): W's rows are streamed once, in blocks of a few rows swept across the
   thread's columns, into float32 partial sums of C kept in a per-thread buffer (L1/L2).
   Per microarchitecture (op_gemv_f32_options): the next block of streamed rows is prefetched into
   L2 while the current one is read, and the row stream may split K in two parts (each a contiguous
   range of whole W rows, the partial sums added at the end; the same two at any thread count), its
   threads taking parts instead of column ranges. */

#if defined(OP_HAS_AVX512)
#define OP_DV_W 16
typedef __m512 op_dv;
OP_INLINE op_dv op_dv_zero(void) { return _mm512_setzero_ps(); }
OP_INLINE op_dv op_dv_load(const float *p) { return _mm512_loadu_ps(p); }
OP_INLINE op_dv op_dv_fma(op_dv a, op_dv b, op_dv c) { return _mm512_fmadd_ps(a, b, c); }
OP_INLINE op_dv op_dv_add(op_dv a, op_dv b) { return _mm512_add_ps(a, b); }
OP_INLINE float op_dv_sum(op_dv v) { return _mm512_reduce_add_ps(v); }
OP_INLINE op_dv op_dv_set1(float x) { return _mm512_set1_ps(x); }
OP_INLINE void op_dv_store(float *p, op_dv v) { _mm512_storeu_ps(p, v); }
#define OP_DOT_BIG(s) ((s) <= 2 ? 8 : 4)   /* large-side block for small-side size s (registers) */
#elif defined(OP_HAS_AVX2)
#define OP_DV_W 8
typedef __m256 op_dv;
OP_INLINE op_dv op_dv_zero(void) { return _mm256_setzero_ps(); }
OP_INLINE op_dv op_dv_load(const float *p) { return _mm256_loadu_ps(p); }
OP_INLINE op_dv op_dv_fma(op_dv a, op_dv b, op_dv c) { return _mm256_fmadd_ps(a, b, c); }
OP_INLINE op_dv op_dv_add(op_dv a, op_dv b) { return _mm256_add_ps(a, b); }
OP_INLINE float op_dv_sum(op_dv v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}
OP_INLINE op_dv op_dv_set1(float x) { return _mm256_set1_ps(x); }
OP_INLINE void op_dv_store(float *p, op_dv v) { _mm256_storeu_ps(p, v); }
#define OP_DOT_BIG(s) ((s) <= 2 ? 4 : 2)
#else
#define OP_DV_W 4
typedef float op_dv __attribute__((vector_size(16)));
OP_INLINE op_dv op_dv_zero(void) { const op_dv z = {0.0f, 0.0f, 0.0f, 0.0f}; return z; }
OP_INLINE op_dv op_dv_load(const float *p) { op_dv v; memcpy(&v, p, sizeof v); return v; }
OP_INLINE op_dv op_dv_fma(op_dv a, op_dv b, op_dv c) { return a * b + c; }
OP_INLINE op_dv op_dv_add(op_dv a, op_dv b) { return a + b; }
OP_INLINE float op_dv_sum(op_dv v) { return (v[0] + v[2]) + (v[1] + v[3]); }
OP_INLINE op_dv op_dv_set1(float x) { const op_dv v = {x, x, x, x}; return v; }
OP_INLINE void op_dv_store(float *p, op_dv v) { memcpy(p, &v, sizeof v); }
#define OP_DOT_BIG(s) ((s) <= 2 ? 4 : 2)
#endif

#define OP_DOT_MAX 8   /* the largest block on either side */
#define OP_DV_PF_STEP (64 / (4 * OP_DV_W) > 0 ? 64 / (4 * OP_DV_W) : 1)  /* vectors per cache line */

/* Per-microarchitecture options of this file (op_gemv_f32_options, api_gemm.h; set by the loader
   from the registry's GEMV_F32_OPTIONS for the host): OP_GEMV_PF_NEXT prefetches the next block of
   streamed rows into L2 while the current one is in use (row stream and dot path), OP_GEMV_KSPLIT
   splits the row stream's K across threads (each a contiguous range of whole B rows, partial sums
   added at the end) instead of its N. Default 0: both off. */
#define OP_GEMV_PF_NEXT 1
#define OP_GEMV_KSPLIT 2
static int op_gemv_opts = 0;

int op_gemv_f32_options(int flags)
{
    const int old = op_gemv_opts;
    if (flags >= 0) op_gemv_opts = flags & (OP_GEMV_PF_NEXT | OP_GEMV_KSPLIT);
    return old;
}

/* The small kernel's vector dot product (gemm_small.c: a whole call of m == n == 1, both operands
   contiguous along K): four accumulators over blocks of four vectors, so the FMA latency does not
   bound it (one accumulator: an FMA per 4 cycles), the remaining whole vectors into the first; the
   four summed pairwise, then across lanes, then K's scalar tail in order. */
static float op_small_dot(int64_t k, const float *a, const float *b)
{
    op_dv s0 = op_dv_zero(), s1 = s0, s2 = s0, s3 = s0;
    int64_t p = 0;
    for (; p + 4 * OP_DV_W <= k; p += 4 * OP_DV_W) {
        s0 = op_dv_fma(op_dv_load(a + p), op_dv_load(b + p), s0);
        s1 = op_dv_fma(op_dv_load(a + p + OP_DV_W), op_dv_load(b + p + OP_DV_W), s1);
        s2 = op_dv_fma(op_dv_load(a + p + 2 * OP_DV_W), op_dv_load(b + p + 2 * OP_DV_W), s2);
        s3 = op_dv_fma(op_dv_load(a + p + 3 * OP_DV_W), op_dv_load(b + p + 3 * OP_DV_W), s3);
    }
    for (; p + OP_DV_W <= k; p += OP_DV_W) s0 = op_dv_fma(op_dv_load(a + p), op_dv_load(b + p), s0);
    float v = op_dv_sum(op_dv_add(op_dv_add(s0, s1), op_dv_add(s2, s3)));
    for (; p < k; p++) v += a[p] * b[p];
    return v;
}

/* acc[r][s] (+)= sum_p A[r, p] B[p, s] over p0 <= p < p1 (a multiple of OP_DV_W apart), one FMA per
   OP_DV_W elements, for an R x S tile; A rows at a + r * rsa, B columns at b + s * csb, both
   contiguous along p. R and S are compile-time constants at every call site. pf != 0: prefetch
   (into L2) the B columns pf elements further on, the next tile's, as this tile's are read. */
OP_INLINE void op_dot_kloop(const int R, const int S, int64_t p0, int64_t p1, const float *a, int64_t rsa,
                            const float *b, int64_t csb, op_dv (*acc)[OP_DOT_MAX], int64_t pf)
{
    for (int64_t p = p0; p < p1; p += OP_DV_W) {
        op_dv bv[OP_DOT_MAX];
        for (int s = 0; s < S; s++) bv[s] = op_dv_load(b + s * csb + p);
        if (pf && p % (OP_DV_W * OP_DV_PF_STEP) == 0)
            for (int s = 0; s < S; s++) __builtin_prefetch(b + s * csb + p + pf, 0, 2);
        for (int r = 0; r < R; r++) {
            const op_dv av = op_dv_load(a + r * rsa + p);
            for (int s = 0; s < S; s++) acc[r][s] = op_dv_fma(av, bv[s], acc[r][s]);
        }
    }
}

/* t[r][s] = sum_p A[r, p] B[p, s] for an R x S tile (as op_dot_kloop), the lanes summed, then the
   scalar tail of K. */
OP_INLINE void op_dot_tile(const int R, const int S, int64_t k, const float *a, int64_t rsa,
                           const float *b, int64_t csb, float *t, int64_t pf)
{
    op_dv acc[OP_DOT_MAX][OP_DOT_MAX];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) acc[r][s] = op_dv_zero();
    const int64_t kv = k / OP_DV_W * OP_DV_W;
    op_dot_kloop(R, S, 0, kv, a, rsa, b, csb, acc, pf);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            float v = op_dv_sum(acc[r][s]);
            for (int64_t q = kv; q < k; q++) v += a[r * rsa + q] * b[s * csb + q];
            t[r * OP_DOT_MAX + s] = v;
        }
}

/* The tall form of the dot path: R = 5..OP_DOT_TALL_MAX rows of A against S <= 4 B columns. Rows
   of 4 at a time over K blocks of OP_DOT_KC elements, so the S columns' block (read from memory by
   the first row group) and A's R x OP_DOT_KC block are read from L1 by the other groups; between K
   blocks each (row, column) pair's vector accumulator waits in sc. The lanes are summed in the same
   order as op_dot_tile's (zero, then one FMA per OP_DV_W elements of K, then op_dv_sum and the
   scalar tail), so a row gives the same bits here as in the 1-4 row tiles. */
#define OP_DOT_TALL_MAX 16  /* rows of A the dot path takes (x W^T); as the row stream's OP_KN_MAX_M */
#define OP_DOT_KC 256       /* K elements per block: A's block 16 KiB at 16 rows */
#define OP_DOT_TALL_MIN_K 256  /* shorter K: the packed GEMM */
#define OP_DOT_TALL_MIN_N 64

OP_INLINE void op_dot_tile_kb(const int R, const int S, int64_t p0, int64_t p1, const float *a,
                              int64_t rsa, const float *b, int64_t csb, op_dv *sc, int first, int64_t pf)
{
    op_dv acc[4][OP_DOT_MAX];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) acc[r][s] = first ? op_dv_zero() : sc[r * 4 + s];
    op_dot_kloop(R, S, p0, p1, a, rsa, b, csb, acc, pf);
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) sc[r * 4 + s] = acc[r][s];
}

static void op_dot_tall(int R, int S, int64_t k, const float *a, int64_t rsa, const float *b,
                        int64_t csb, float *t, int64_t pf)
{
    op_dv sc[OP_DOT_TALL_MAX * 4];
    const int64_t kv = k / OP_DV_W * OP_DV_W;
    for (int64_t p0 = 0; p0 < kv; p0 += OP_DOT_KC) {
        const int64_t p1 = op_min64(kv, p0 + OP_DOT_KC);
        for (int r0 = 0; r0 < R; r0 += 4) {
            const int rr = R - r0 < 4 ? R - r0 : 4;
            const float *ar = a + r0 * rsa;
            op_dv *sr = sc + r0 * 4;
            const int first = p0 == 0;
            const int64_t pfr = r0 == 0 ? pf : 0;
#define OP_DOT_KB_S(RR)                                                                            \
            switch (S) {                                                                           \
            case 1: op_dot_tile_kb(RR, 1, p0, p1, ar, rsa, b, csb, sr, first, pfr); break;         \
            case 2: op_dot_tile_kb(RR, 2, p0, p1, ar, rsa, b, csb, sr, first, pfr); break;         \
            case 3: op_dot_tile_kb(RR, 3, p0, p1, ar, rsa, b, csb, sr, first, pfr); break;         \
            default: op_dot_tile_kb(RR, 4, p0, p1, ar, rsa, b, csb, sr, first, pfr); break;        \
            }
            switch (rr) {
            case 1: OP_DOT_KB_S(1) break;
            case 2: OP_DOT_KB_S(2) break;
            case 3: OP_DOT_KB_S(3) break;
            default: OP_DOT_KB_S(4) break;
            }
#undef OP_DOT_KB_S
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            float v = op_dv_sum(sc[r * 4 + s]);
            for (int64_t q = kv; q < k; q++) v += a[r * rsa + q] * b[s * csb + q];
            t[r * OP_DOT_MAX + s] = v;
        }
}

/* Dispatch a run-time R x S (1..OP_DOT_MAX each, within the register budget) to an instantiation. */
static void op_dot_tile_any(int R, int S, int64_t k, const float *a, int64_t rsa, const float *b,
                            int64_t csb, float *t, int64_t pf)
{
#define OP_DOT_CASE_S(RR)                                                                        \
    switch (S) {                                                                                 \
    case 1: op_dot_tile(RR, 1, k, a, rsa, b, csb, t, pf); return;                                \
    case 2: op_dot_tile(RR, 2, k, a, rsa, b, csb, t, pf); return;                                \
    case 3: op_dot_tile(RR, 3, k, a, rsa, b, csb, t, pf); return;                                \
    case 4: op_dot_tile(RR, 4, k, a, rsa, b, csb, t, pf); return;                                \
    default:                                                                                     \
        if ((RR) <= 2) {                                                                         \
            for (int s0 = 0; s0 < S; s0 += 4) {                                                  \
                const int ss = S - s0 < 4 ? S - s0 : 4;                                          \
                op_dot_tile_any(RR, ss, k, a, rsa, b + s0 * csb, csb, t + s0, pf);               \
            }                                                                                    \
        }                                                                                        \
        return;                                                                                  \
    }
    if (R <= 2 && S > 4) {
        /* wide tiles for one or two rows: more independent accumulators hide the FMA latency */
        switch (R * 16 + S) {
        case 16 + 5: op_dot_tile(1, 5, k, a, rsa, b, csb, t, pf); return;
        case 16 + 6: op_dot_tile(1, 6, k, a, rsa, b, csb, t, pf); return;
        case 16 + 7: op_dot_tile(1, 7, k, a, rsa, b, csb, t, pf); return;
        case 16 + 8: op_dot_tile(1, 8, k, a, rsa, b, csb, t, pf); return;
        case 32 + 5: op_dot_tile(2, 5, k, a, rsa, b, csb, t, pf); return;
        case 32 + 6: op_dot_tile(2, 6, k, a, rsa, b, csb, t, pf); return;
        case 32 + 7: op_dot_tile(2, 7, k, a, rsa, b, csb, t, pf); return;
        case 32 + 8: op_dot_tile(2, 8, k, a, rsa, b, csb, t, pf); return;
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
            op_dot_tile_any(rr, S, k, a + r0 * rsa, rsa, b, csb, t + r0 * OP_DOT_MAX, 0);
        }
        return;
    }
#undef OP_DOT_CASE_S
}

typedef struct {
    const op_gemm_args *g;
    int rows_small;        /* 1: the small side is M (split N); 0: the small side is N (split M) */
    int64_t big, chunk, nchunks;
    const float *acopy;    /* the tall form: A copied, rows arsa apart (NULL: A in place) */
    int64_t arsa;
} op_dot_ctx;

static void op_dot_task(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const op_dot_ctx *x = (const op_dot_ctx *)vctx;
    const op_gemm_args *g = x->g;
    const int64_t bi = task / x->nchunks, ci = task % x->nchunks;
    const float *a = x->acopy ? x->acopy + bi * g->m * x->arsa
                              : (const float *)g->a + (g->a_off ? g->a_off[bi] : 0);
    const int64_t rsa = x->acopy ? x->arsa : g->rsa;
    const float *b = (const float *)g->b + (g->b_off ? g->b_off[bi] : 0);
    float *c = g->c + (g->c_off ? g->c_off[bi] : 0);
    const int64_t lo = ci * x->chunk, hi = op_min64(x->big, lo + x->chunk);
    const int small = (int)(x->rows_small ? g->m : g->n);
    const int blockb = OP_DOT_BIG(small);
    float t[OP_DOT_TALL_MAX * OP_DOT_MAX];
    for (int64_t q = lo; q < hi; q += blockb) {
        const int nb = (int)op_min64(blockb, hi - q);
        int64_t i0, j0;
        int R, S;
        if (x->rows_small) { i0 = 0; j0 = q; R = small; S = nb; }
        else { i0 = q; j0 = 0; R = nb; S = small; }
        /* prefetch the next block of B columns (rows of W for x W^T) while this one streams */
        const int64_t pf = (op_gemv_opts & OP_GEMV_PF_NEXT) && x->rows_small && j0 + 2 * nb <= g->n
                           ? nb * g->csb : 0;
        if (x->acopy)
            op_dot_tall(R, S, g->k, a, rsa, b + j0 * g->csb, g->csb, t, pf);
        else
            op_dot_tile_any(R, S, g->k, a + i0 * rsa, rsa, b + j0 * g->csb, g->csb, t, pf);
        op_epilogue e, *ep = NULL;
        if (g->epi) {
            e = *g->epi;
            if (e.bias) e.bias += (e.bias_axis == 0 ? i0 : j0) * e.bias_stride;
            ep = &e;
        }
        op_tile_store(t, OP_DOT_MAX, R, S, c + i0 * g->rsc + j0 * g->csc, g->rsc, g->csc, 0, ep);
    }
}

/* ---------------------------------------------------------------- row stream: x W, W row-major

   C[M x N] = A[M x K] B[K x N] for M <= OP_KN_MAX_M with B rows contiguous (csb == 1): every B row is
   read once, straight from where it lies. Threads split N; a task sweeps blocks of OP_KN_KB(M) rows
   of B across its columns (that many concurrent sequential row streams), 256 columns at a time so the
   block's piece stays in L1 while every row group of A passes over it. A row group of R rows keeps an
   R x NV-vector tile of C in registers for the block; between blocks the float32 partial sums live
   in a per-thread buffer of M x (the task's columns) floats. The last pass writes C (epilogue
   included). The packed driver would read B, write its packed copy and read that again, and with B
   read in place (its direct path) keeps the row blocks short: both below the memory bandwidth. */

#if defined(OP_HAS_AVX512)
#define OP_KN_MAX_G 16                               /* largest row group (accumulator registers) */
#define OP_KN_NV(R) ((R) <= 4 ? 4 : (R) <= 8 ? 2 : 1)  /* vectors per tile row for an R-row group */
#elif defined(OP_HAS_AVX2)
/* groups of at most 4 rows with 12 accumulators (4 x 3, 3 x 4): per B row 7 loads (3 of B, 4
   broadcasts) feed 12 FMAs, where an 8 x 1 group needed 9 for 8 and its 8 accumulators did not
   cover the FMA latency. zen3 (2026-12-06, x @ W with a row-major W, alternated in one process with
   numpy, x numpy 8 x 1 groups -> these, two runs each): 1 thread 16 x 4096 x 4096 0.82-0.96 ->
   1.11-1.20, 16 x 768 x 3072 0.69 -> 0.94-1.02, 12 x 384 x 1536 0.68-0.77 -> 0.90-0.95; 2 threads
   16 x 4096 x 4096 0.82-0.87 -> 1.06-1.29; 6 and 8 rows within noise. */
#define OP_KN_MAX_G 4
#define OP_KN_NV(R) ((R) <= 3 ? 4 : 3)
#else
#define OP_KN_MAX_G 8
#define OP_KN_NV(R) ((R) <= 2 ? 4 : (R) <= 4 ? 2 : 1)
#endif
#define OP_KN_MAX_M 16          /* rows of A this path takes */
#define OP_KN_MIN_N 128         /* narrower B: the driver (this path's column tail is scalar) */
/* B rows per block. Below AVX-512 a 5-16 row A takes two or more row groups, each rereading the
   block's piece of B, which should come from L1; but rows 4 KiB (a multiple of) apart fall in one
   L1 set, and 16 of them overflowed Zen 3's 8 ways: from L2 each time. 8 rows: zen3, 1 thread,
   x @ W with a row-major W, alternated in one process, GFLOP/s (x numpy) 16 rows before ->
   after: 16 x 4096 x 4096 35 (0.63) -> 48 (0.86), 12 x 4096 x 4096 32 (0.65) -> 48 (0.98),
   8 x 4096 x 4096 33 (0.83) -> 48 (1.23), 16 x 768 x 3072 37 (0.56) -> 49 (0.76). The AVX-512
   builds keep 16: at M = 16 their one 16-row group reads each block once; M = 9..15 takes two
   groups there too (not measured: no AVX-512 host here). */
#if OP_KN_MAX_G >= 16
#define OP_KN_KB(M) ((M) <= 4 ? 8 : 16)
#else
#define OP_KN_KB(M) 8
#endif
#define OP_KN_SKEW 1024        /* floats of slack per thread buffer (4 KiB) for its placement */
#define OP_KN_CB 256            /* columns per sweep step (a multiple of every tile width) */
/* Up to OP_KN_BYTES_MAX_M rows each B element feeds at most that many FMAs: the time is B's
   read from memory, and a thread pays from OP_KN_MIN_BYTES_PER_THREAD of B, where the flop rule
   (OP_GEMM_MIN_FLOPS_PER_THREAD, 4 MFLOP: 8 MiB of B at M = 1) kept one thread. sapphirerapids
   (the Intel AMX VM, 2026-12-06, 2 threads, x @ W with a row-major W, median of 5 alternated in
   one process, x numpy before -> after): 1 x 768 x 3072 0.47 -> 0.84, 1 x 1536 x 1536 0.45 ->
   0.78, 1 x 3072 x 768 0.55 -> 0.82, 1 x 1024 x 2048 0.87 -> 0.95; 8 rows lost (8 x 1024 x 1024
   2.11 -> 1.77) and keep the flop rule. Columns split as before: the same sums at any thread
   count; where the K split runs (zen4's "ksplit"), its two parts' sums too (OP_KN_KSPLIT_PARTS). */
#define OP_KN_BYTES_MAX_M 4
#define OP_KN_MIN_BYTES_PER_THREAD 1048576.0

/* acc[R x NV vectors] (row stride lda) (+)= A[R rows, p0..p1) B[p0..p1, NV vectors); A transposed:
   A[r][p] at a[p * lat + r]. pf != 0: prefetch (into L2) the B elements pf further on (the same
   columns of the next row block) as these are read. */
OP_INLINE void op_kn_tile(const int R, const int NV, int64_t p0, int64_t p1, const float *a, int64_t lat,
                          const float *b, int64_t rsb, float *acc, int64_t lda, int first, int64_t pf)
{
    op_dv c[OP_KN_MAX_G][4];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) c[r][v] = first ? op_dv_zero() : op_dv_load(acc + r * lda + v * OP_DV_W);
    const float *bp = b + p0 * rsb;
    for (int64_t p = p0; p < p1; p++, bp += rsb) {
        op_dv bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = op_dv_load(bp + v * OP_DV_W);
        if (pf)
#pragma GCC unroll 4
            for (int v = 0; v < NV; v += OP_DV_PF_STEP) __builtin_prefetch(bp + v * OP_DV_W + pf, 0, 2);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            const op_dv av = op_dv_set1(a[p * lat + r]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) c[r][v] = op_dv_fma(av, bv[v], c[r][v]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) op_dv_store(acc + r * lda + v * OP_DV_W, c[r][v]);
}

/* acc[R x w] (row stride lda) (+)= A[R rows, p0..p1) B[p0..p1, 0..w): tiles of NV vectors, then
   single vectors, then scalar columns. */
OP_INLINE void op_kn_body(const int R, const int NV, int64_t p0, int64_t p1, const float *a, int64_t lat,
                          const float *b, int64_t rsb, float *acc, int64_t lda, int64_t w, int first,
                          int64_t pf)
{
    int64_t j = 0;
    for (; j + NV * OP_DV_W <= w; j += NV * OP_DV_W)
        op_kn_tile(R, NV, p0, p1, a, lat, b + j, rsb, acc + j, lda, first, pf);
    if (NV > 2 && j + 2 * OP_DV_W <= w) {  /* e.g. 256 columns in tiles of 24: 16 left */
        op_kn_tile(R, 2, p0, p1, a, lat, b + j, rsb, acc + j, lda, first, pf);
        j += 2 * OP_DV_W;
    }
    for (; j + OP_DV_W <= w; j += OP_DV_W)
        op_kn_tile(R, 1, p0, p1, a, lat, b + j, rsb, acc + j, lda, first, pf);
    for (; j < w; j++)
        for (int r = 0; r < R; r++) {
            float v = first ? 0.0f : acc[r * lda + j];
            for (int64_t p = p0; p < p1; p++) v += a[p * lat + r] * b[p * rsb + j];
            acc[r * lda + j] = v;
        }
}

#define OP_KN_INST(R)                                                                              \
    static OP_NOINLINE void op_kn_g##R(int64_t p0, int64_t p1, const float *a, int64_t lat,         \
                                       const float *b, int64_t rsb, float *acc, int64_t lda,        \
                                       int64_t w, int first, int64_t pf)                            \
    {                                                                                              \
        op_kn_body(R, OP_KN_NV(R), p0, p1, a, lat, b, rsb, acc, lda, w, first, pf);                \
    }
OP_KN_INST(1) OP_KN_INST(2) OP_KN_INST(3) OP_KN_INST(4)
#if OP_KN_MAX_G >= 8
OP_KN_INST(5) OP_KN_INST(6) OP_KN_INST(7) OP_KN_INST(8)
#endif
#if OP_KN_MAX_G >= 16
OP_KN_INST(16)
#endif
#undef OP_KN_INST

typedef struct {
    const op_gemm_args *g;
    int64_t cols, parts;    /* columns per task (multiple of OP_KN_CB), column parts per batch entry */
    int64_t kparts, kchunk; /* K split (OP_GEMV_KSPLIT, one batch entry): parts of kchunk B rows */
    int64_t lda;            /* row stride of a partial-sum buffer */
    float *acc;             /* per thread (per task with a K split): m x lda floats + OP_KN_SKEW */
    float **accp;           /* K split: each K part's partial sums (all columns, row stride lda) */
    float *at;              /* A transposed, per batch entry k x m floats: A[i][p] at at[p * m + i] */
} op_kn_ctx;

static void op_kn_task(void *vctx, int64_t task, int tid)
{
    const op_kn_ctx *x = (const op_kn_ctx *)vctx;
    const op_gemm_args *g = x->g;
    const int64_t kp = task % x->kparts, ct = task / x->kparts;
    const int64_t bi = ct / x->parts, c0 = (ct % x->parts) * x->cols;
    const int64_t w = op_min64(x->cols, g->n - c0);
    const int64_t m = g->m, rsb = g->rsb, lda = x->lda;
    const int64_t ks = kp * x->kchunk, ke = op_min64(g->k, ks + x->kchunk);
    if (w <= 0 || ks >= ke) return;
    const float *A = x->at + bi * g->k * m;
    const float *B = (const float *)g->b + (g->b_off ? g->b_off[bi] : 0) + c0;
    /* the partial sums start half a 4 KiB page away from the B columns (mod 4 KiB): with B rows a
       multiple of 4 KiB apart, every B load otherwise shares its low 12 address bits with a recent
       store of the sums, and the loads wait on those stores (4K aliasing; Zen 4, K = N = 4096, m = 1:
       29 -> 31 GB/s, as fast as with B rows padded) */
    float *acc;
    if (x->kparts > 1) {   /* K split: this part's buffer at the task's columns (placed as below) */
        acc = x->accp[kp] + c0;
    } else {
        acc = x->acc + (size_t)tid * (size_t)(m * lda + OP_KN_SKEW);
        acc += (((uintptr_t)(B + 512) - (uintptr_t)acc) & 4095u) / 64u * 16u;
    }
    const int64_t kb = OP_KN_KB(m);
    /* M > 8: the FMAs per B element hide the memory latency; there the prefetches only added L2
       traffic (Zen 4, 2 threads, M = 12 and 16: 5-15% slower) */
    const int pfn = (op_gemv_opts & OP_GEMV_PF_NEXT) && m <= 8;
    for (int64_t p0 = ks; p0 < ke; p0 += kb) {
        const int64_t p1 = op_min64(ke, p0 + kb);
        const int first = p0 == ks;
        /* the next block's rows into L2 while this block streams (one row group issues them) */
        const int64_t pf = pfn && p1 + kb <= ke ? kb * rsb : 0;
        for (int64_t jb = 0; jb < w; jb += OP_KN_CB) {
            const int64_t wb = op_min64(OP_KN_CB, w - jb);
            for (int64_t i0 = 0; i0 < m;) {
                const int64_t rem = m - i0;
                const int R = rem >= 16 && OP_KN_MAX_G >= 16 ? 16 : rem >= 8 && OP_KN_MAX_G >= 8 ? 8
                              : rem >= OP_KN_MAX_G ? OP_KN_MAX_G : (int)rem;
                const float *ai = A + i0;
                float *ac = acc + i0 * lda + jb;
                const int64_t pfi = i0 == 0 ? pf : 0;
#define OP_KN_CALL(RR) op_kn_g##RR(p0, p1, ai, m, B + jb, rsb, ac, lda, wb, first, pfi)
                switch (R) {
                case 1: OP_KN_CALL(1); break;
                case 2: OP_KN_CALL(2); break;
                case 3: OP_KN_CALL(3); break;
#if OP_KN_MAX_G >= 8
                case 4: OP_KN_CALL(4); break;
                case 5: OP_KN_CALL(5); break;
                case 6: OP_KN_CALL(6); break;
                case 7: OP_KN_CALL(7); break;
#if OP_KN_MAX_G >= 16
                case 16: OP_KN_CALL(16); break;
#endif
                default: OP_KN_CALL(8); break;
#else
                default: OP_KN_CALL(4); break;
#endif
                }
#undef OP_KN_CALL
                i0 += R;
            }
        }
    }
    if (x->kparts > 1) return;  /* K split: op_kn_reduce adds the parts and writes C */
    op_epilogue e, *ep = NULL;
    if (g->epi && (g->epi->bias || g->epi->act != OP_ACT_NONE)) {
        e = *g->epi;
        if (e.bias && e.bias_axis != 0) e.bias += c0 * e.bias_stride;
        ep = &e;
    }
    float *C = g->c + (g->c_off ? g->c_off[bi] : 0) + c0 * g->csc;
    op_tile_store(acc, lda, (int)m, (int)w, C, g->rsc, g->csc, 0, ep);
}

#define OP_KN_RCOLS 512  /* columns per reduction task (K split) */

/* K split: C[:, j0..j1) = the sum of the K parts' partial sums (added into part 0's), epilogue. */
static void op_kn_reduce(void *vctx, int64_t task, int tid)
{
    (void)tid;
    const op_kn_ctx *x = (const op_kn_ctx *)vctx;
    const op_gemm_args *g = x->g;
    const int64_t j0 = task * OP_KN_RCOLS, w = op_min64(OP_KN_RCOLS, g->n - j0);
    float *s = x->accp[0] + j0;
    for (int64_t i = 0; i < g->m; i++) {
        float *si = s + i * x->lda;
        for (int64_t q = 1; q < x->kparts; q++) {
            const float *t = x->accp[q] + j0 + i * x->lda;
            int64_t j = 0;
            for (; j + OP_DV_W <= w; j += OP_DV_W) op_dv_store(si + j, op_dv_load(si + j) + op_dv_load(t + j));
            for (; j < w; j++) si[j] += t[j];
        }
    }
    op_epilogue e, *ep = NULL;
    if (g->epi && (g->epi->bias || g->epi->act != OP_ACT_NONE)) {
        e = *g->epi;
        if (e.bias && e.bias_axis != 0) e.bias += j0 * e.bias_stride;
        ep = &e;
    }
    op_tile_store(s, x->lda, (int)g->m, (int)w, g->c + (g->c_off ? g->c_off[0] : 0) + j0 * g->csc, g->rsc,
                  g->csc, 0, ep);
}

#define OP_KN_KSPLIT_MAX_ACC (512 * 1024)  /* bytes of partial sums per K part (L2) */
/* K parts of the split: a property of the problem, never of the thread count, so that a product
   gives the same bits at any number of threads (the parts' sums are added in part order); more
   threads than parts split the columns of each part too. 2: zen4's 2 threads measured it. */
#define OP_KN_KSPLIT_PARTS 2
/* Rows of A up to which the K split runs. AVX2 (zen3, AMD EPYC Zen 3 VM, 2026-12-07, x @ W, K = N
   = 4096, the options off / "ksplit" alternated in one process with numpy, GB/s of W best / median
   of 15): 2 threads M = 1 18.5 / 11.8 -> 21.1 / 13.8 (numpy 28.6 / 13.1), M = 4 13.7 / 9.5 -> 20.7
   / 10.5, but M = 16 8.2 / 7.0 -> 7.8 / 5.5 (numpy 7.3 / 6.1): the memory-bound row counts only.
   1 thread within noise (M = 1 14.2 / 11.4 -> 13.9 / 11.8, M = 4 11.7 / 10.0 -> 13.9 / 10.7). The
   AVX-512 builds (zen4's row) keep every row count: not measured there. */
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
#define OP_KN_KSPLIT_MAX_M OP_KN_BYTES_MAX_M
#else
#define OP_KN_KSPLIT_MAX_M OP_KN_MAX_M
#endif

/* The row-stream path for x W (returns threads used, -1 on allocation failure), else 0. */
static int op_kn_f32(const op_gemm_args *g, int nthreads)
{
    if (g->csb != 1 || g->m < 1 || g->m > OP_KN_MAX_M || g->n < OP_KN_MIN_N || g->k < 1) return 0;
    const double flops = 2.0 * (double)g->batch * (double)g->m * (double)g->n * (double)g->k;
    int64_t T = (int64_t)(flops / OP_GEMM_MIN_FLOPS_PER_THREAD);
    if (g->m <= OP_KN_BYTES_MAX_M) {   /* memory-bound: threads by the bytes of B too */
        const int64_t tb = (int64_t)(4.0 * (double)g->batch * (double)g->n * (double)g->k /
                                     OP_KN_MIN_BYTES_PER_THREAD);
        if (tb > T) T = tb;
    }
    const int64_t want_threads = T;   /* the problem's, before the host's thread count */
    if (T > nthreads) T = nthreads;
    if (T < 1) T = 1;
    op_kn_ctx x;
    x.g = g;
    const int64_t kb = OP_KN_KB(g->m);
    x.kparts = 1;
    x.kchunk = g->k;
    if ((op_gemv_opts & OP_GEMV_KSPLIT) && g->m <= OP_KN_KSPLIT_MAX_M && want_threads > 1 &&
        g->batch == 1 && g->k >= 2 * kb &&
        (double)g->m * (double)op_roundup64(g->n, OP_KN_CB) * 4.0 <= OP_KN_KSPLIT_MAX_ACC) {
        /* each thread a contiguous range of whole B rows (one sequential region of memory). The
           parts are fixed by the problem (OP_KN_KSPLIT_PARTS), at one thread too: a split by the
           thread count gave other bits at every count (zen3 with the option forced, 1 x 4096 x
           2048: 1993 of 2048 outputs differed between 1 and 2 threads) */
        x.kchunk = op_roundup64(op_cdiv64(g->k, OP_KN_KSPLIT_PARTS), kb);
        x.kparts = op_cdiv64(g->k, x.kchunk);
        const int64_t cparts = op_max64(1, op_cdiv64(T, x.kparts));   /* columns: any split */
        x.cols = op_roundup64(op_cdiv64(g->n, cparts), OP_KN_CB);
        x.parts = op_cdiv64(g->n, x.cols);
        T = op_min64(T, x.kparts * x.parts);
    } else {
        /* one column range per thread and batch entry (long row segments keep the prefetchers on) */
        const int64_t want = g->batch >= T ? 1 : op_cdiv64(T, g->batch);
        x.cols = op_roundup64(op_cdiv64(g->n, want), OP_KN_CB);
        x.parts = op_cdiv64(g->n, x.cols);
        if (T > g->batch * x.parts) T = g->batch * x.parts;
    }
    /* +16: rows not a multiple of 4 KiB apart; a K part's buffer holds all columns */
    x.lda = op_roundup64(x.kparts > 1 ? x.parts * x.cols : x.cols, 16) + 16;
    const int64_t nbuf = x.kparts > 1 ? x.kparts : T;
    x.acc = (float *)op_aligned_alloc((size_t)(nbuf * (g->m * x.lda + OP_KN_SKEW)) * sizeof(float));
    x.at = (float *)op_aligned_alloc((size_t)(g->batch * g->k * g->m) * sizeof(float));
    x.accp = (float **)malloc((size_t)x.kparts * sizeof(float *));
    if (!x.acc || !x.at || !x.accp) {
        op_aligned_free(x.acc);
        op_aligned_free(x.at);
        free(x.accp);
        return -1;
    }
    for (int64_t bi = 0; bi < g->batch; bi++) {
        const float *A = (const float *)g->a + (g->a_off ? g->a_off[bi] : 0);
        float *d = x.at + bi * g->k * g->m;
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t p = 0; p < g->k; p++) d[p * g->m + i] = A[i * g->rsa + p * g->csa];
    }
    for (int64_t kp = 0; kp < x.kparts && x.kparts > 1; kp++) {
        /* the partial sums half a 4 KiB page away from B's columns (see op_kn_task) */
        float *a = x.acc + (size_t)kp * (size_t)(g->m * x.lda + OP_KN_SKEW);
        const float *b0 = (const float *)g->b + (g->b_off ? g->b_off[0] : 0);
        x.accp[kp] = a + (((uintptr_t)(b0 + 512) - (uintptr_t)a) & 4095u) / 64u * 16u;
    }
    int used = op_parallel_for((int)T, g->batch * x.parts * x.kparts, op_kn_task, &x);
    if (x.kparts > 1) {
        const int r = op_parallel_for((int)T, op_cdiv64(g->n, OP_KN_RCOLS), op_kn_reduce, &x);
        if (r > used) used = r;
    }
    op_aligned_free(x.acc);
    op_aligned_free(x.at);
    free(x.accp);
    return used;
}

/* A narrow row-major B (csb == 1, N = 2..4: A @ W with W (K, N)) with K from OP_DOT_NARROW_MIN_K:
   B's columns copied into rows (gemm_small.c op_cols_copy, as the tall form's A), then the
   dot path, which streams A once; the packed GEMM packed all of A for tiles with 2-4 of their 16
   columns in use. zen3 (AMD EPYC Zen 3 VM, 2026-12-07, 1 thread, x numpy packed GEMM -> this):
   1024 x 1024 x 4 0.53 -> 1.40, 4096 x 512 x 2 0.45 -> 2.04, 2048^2 x 2 0.64 -> 2.50, 16 x 65536 x
   4 0.25 -> 0.81, 4 x 262144 x 4 0.18 -> 0.65; a shorter K (the review's 100000 rows, K 12-23)
   was up to 2x slower than the packed GEMM (a horizontal sum per element, 2-row tiles). The
   entries of a batch go OP_DOT_NARROW_BUF bytes of copies at a time, an entry whose B is the last
   one's (a broadcast B) sharing its copy; when even one entry's copy cannot be allocated the
   packed GEMM runs. One row at AVX2 takes the small kernel's row form instead (reads B once, no
   copy). The bits are the dot path's (one vector accumulator per element, in K order) at any row
   count from two and any grouping of entries, so every onepath.dask row or batch block (rows
   padded to 49) gives the whole's. */
#define OP_DOT_NARROW_MIN_K 32
#define OP_DOT_NARROW_BUF ((int64_t)16 << 20)
static int op_gemv_f32(const op_gemm_args *g, int nthreads);

static int op_dot_narrow(const op_gemm_args *g, int nthreads)
{
#if defined(OP_SMALL_ROW_NARROW)
    if (g->m == 1 && g->rsb == g->n) {
        /* one row of A: the small kernel's row form (gemm_small.c op_small_row_narrow), which
           reads B once in place, on each entry in turn; its bits on either route */
        for (int64_t bi = 0; bi < g->batch; bi++) {
            float t[4];
            op_small_row_narrow(g->n, g->k, (const float *)g->a + (g->a_off ? g->a_off[bi] : 0),
                                (const float *)g->b + (g->b_off ? g->b_off[bi] : 0), t);
            op_tile_store(t, 4, 1, (int)g->n, g->c + (g->c_off ? g->c_off[bi] : 0), g->rsc,
                          g->csc, 0, g->epi);
        }
        return 1;
    }
#endif
    const int64_t ld = OP_COLS_LD(g->k), per = g->n * ld;
    const int64_t group = op_min64(g->batch, op_max64(1, OP_DOT_NARROW_BUF / (per * 4)));
    float *bt = (float *)op_aligned_alloc((size_t)(group * per) * sizeof(float));
    int64_t *off = (int64_t *)malloc((size_t)group * sizeof(int64_t));
    int used = 0;
    for (int64_t b0 = 0; bt && off && b0 < g->batch; b0 += group) {
        const int64_t gn = op_min64(group, g->batch - b0);
        for (int64_t i = 0; i < gn; i++) {
            const int64_t bo = g->b_off ? g->b_off[b0 + i] : 0;
            if (i > 0 && bo == (g->b_off ? g->b_off[b0 + i - 1] : 0)) {
                off[i] = off[i - 1];
                continue;
            }
            op_cols_copy(g->n, g->k, (const float *)g->b + bo, g->rsb, bt + i * per);
            off[i] = i * per;
        }
        op_gemm_args t = *g;
        t.batch = gn;
        t.a_off = g->a_off ? g->a_off + b0 : NULL;
        t.c_off = g->c_off ? g->c_off + b0 : NULL;
        t.b = bt;
        t.b_off = off;
        t.rsb = 1;
        t.csb = ld;
        const int u = op_gemv_f32(&t, nthreads);
        if (u < 0) { used = u; break; }
        used = u > used ? u : used;
    }
    op_aligned_free(bt);
    free(off);
    return used;   /* 0 (nothing allocated): the packed GEMM */
}

/* The dot path when it applies (returns threads used), else 0: the caller runs the packed GEMM. */
static int op_gemv_f32(const op_gemm_args *g, int nthreads)
{
    const int kn = op_kn_f32(g, nthreads);
    if (kn != 0) return kn;
    if (g->m == 1 && g->n == 1 && g->csa == 1 && g->rsb == 1) {
        /* a vector dot product: the small kernel's (op_small_dot above), on each entry in turn,
           so that it gives the same bits on either route (the tiles' one accumulator ran
           0.71-0.85x numpy past the small limits) */
        for (int64_t bi = 0; bi < g->batch; bi++) {
            const float t = op_small_dot(g->k, (const float *)g->a + (g->a_off ? g->a_off[bi] : 0),
                                         (const float *)g->b + (g->b_off ? g->b_off[bi] : 0));
            op_tile_store(&t, 1, 1, 1, g->c + (g->c_off ? g->c_off[bi] : 0), g->rsc, g->csc, 0,
                          g->epi);
        }
        return 1;
    }
    if (g->csb == 1 && g->rsb != 1 && g->n >= 2 && g->n <= 4 && g->csa == 1
        && g->k >= OP_DOT_NARROW_MIN_K) {
        const int used = op_dot_narrow(g, nthreads);
        if (used != 0) return used;
    }
    if (g->csa != 1 || g->rsb != 1 || g->k < OP_DV_W || g->m < 1 || g->n < 1) return 0;
    op_dot_ctx x;
    x.g = g;
    x.acopy = NULL;
    x.arsa = 0;
    float *acopy = NULL;
    if (g->m <= 4 && g->m <= g->n) { x.rows_small = 1; x.big = g->n; }
    else if (g->m <= OP_DOT_TALL_MAX && g->n >= OP_DOT_TALL_MIN_N && g->k >= OP_DOT_TALL_MIN_K) {
        /* the tall form reads A's rows copied roundup(K, 16) + 16 floats apart: rows a multiple of
           4 KiB apart all fall in one L1 set, and 16 of them (plus the B columns) overflow its ways
           (sapphirerapids, M = 16, K = N = 4096, 1 thread: 91 -> 110 GFLOP/s) */
        x.rows_small = 1;
        x.big = g->n;
        x.arsa = OP_COLS_LD(g->k);
        acopy = (float *)op_aligned_alloc((size_t)(g->batch * g->m * x.arsa) * sizeof(float));
        if (!acopy) return -1;
        for (int64_t bi = 0; bi < g->batch; bi++) {
            const float *A = (const float *)g->a + (g->a_off ? g->a_off[bi] : 0);
            for (int64_t i = 0; i < g->m; i++)
                memcpy(acopy + (bi * g->m + i) * x.arsa, A + i * g->rsa, (size_t)g->k * sizeof(float));
        }
        x.acopy = acopy;
    }
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
    const int used = op_parallel_for((int)T, g->batch * x.nchunks, op_dot_task, &x);
    op_aligned_free(acopy);
    return used;
}
