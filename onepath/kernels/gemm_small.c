/* gemm_small.c: the small-problem float32 GEMM of every level (op_gemm_f32_small, api_small.h).

   For products too small to pay for packing, a thread pool or scratch buffers (a few microseconds of
   work), C = A B (+ epilogue) is computed straight from A and B in place, on the calling thread:
   - "nn" form, B rows contiguous (csb == 1) and C rows contiguous (csc == 1): register tiles of
     MR rows of C x NR columns; per k one row of the B panel is loaded and each A element is
     broadcast (AVX-512: 8 x 32, two zmm per row, masked column tails; AVX2: 6 x 16, two ymm per
     row, maskload tails, and 8 x 8 for a strip of at most 8 columns; portable C: one row at a
     time, the inner loop left to the compiler);
   - "nt" form, A rows and B columns contiguous along K (csa == 1, rsb == 1, e.g. linear's
     x @ W.T with W (out, in) row-major): 4 x 4 (AVX-512, AVX2: 2 x 4) dot-product tiles with vector
     accumulators along K, reduced once per tile;
   - narrow shapes (the whole call's): a vector dot product (m == n == 1) with four accumulators
     (gemv_f32.c op_small_dot); a row-major B of 2-4 columns from OP_SMALL_NARROW_MIN_M rows,
     copied into rows for the nt form's tiles; one row by such a B read in place with AVX2
     (op_small_row_narrow); a matrix times a vector as C^T = B^T A^T (OP_SMALL_MATVEC);
   - anything else: a plain triple loop (any strides, also negative or zero).
   The epilogue (bias, then activation; op_epilogue of api_gemm.h) runs over each finished row of C.
   K == 0 writes zeros, then the epilogue. Accumulation is float32 in k order per lane.

   bfloat16 (op_gemm_bf16_small_cc): C-contiguous A and B of bfloat16 bits, widened exactly while
   loading (bits << 16), float32 accumulation, C float32 or bfloat16 rounded once to nearest even
   (op_f32_to_bf16_1 of cvt_bf16.c, ml_dtypes' rounding). AVX-512: the same 8 x 32 register tile;
   other levels: one row of C at a time in 64-column stack chunks (the compiler vectorises the
   inner loop with the level's flags). */

#if defined(OP_HAS_AVX512)
#define OP_SMALL_MR 8
#define OP_SMALL_NR 32
#define OP_SMALL_NAME "gemm_f32_small_" OP_LEVEL_NAME "_8x32"
#elif defined(OP_HAS_AVX2)
#define OP_SMALL_MR 6
#define OP_SMALL_NR 16
#define OP_SMALL_NAME "gemm_f32_small_" OP_LEVEL_NAME "_6x16"
#else
#define OP_SMALL_MR 1
#define OP_SMALL_NR 1
#define OP_SMALL_NAME "gemm_f32_small_" OP_LEVEL_NAME "_1x1"
#endif

/* bias and activation over row i of C (n elements at stride csc) */
static void op_small_epi_row(float *c, int64_t csc, int64_t n, int64_t i, const op_epilogue *e)
{
    if (e->bias) {
        if (e->bias_axis == 0) {
            const float bv = e->bias[i * e->bias_stride];
            for (int64_t j = 0; j < n; j++) c[j * csc] += bv;
        } else {
            for (int64_t j = 0; j < n; j++) c[j * csc] += e->bias[j * e->bias_stride];
        }
    }
    if (e->act != OP_ACT_NONE) op_act_row(c, csc, (int)n, e->act);
}

/* any strides: the reference loop */
static void op_small_any(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                         const float *b, int64_t rsb, int64_t csb, float *c, int64_t rsc, int64_t csc)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++) s += a[i * rsa + p * csa] * b[p * rsb + j * csb];
            c[i * rsc + j * csc] = s;
        }
}

#if defined(OP_HAS_AVX512)

/* MR x (16 or 32) tile of the nn form; MR and TWO are constants at every call site */
OP_INLINE void op_small_nn_tile(const int MR, const int TWO, int64_t k, const float *a, int64_t rsa,
                                int64_t csa, const float *b, int64_t rsb, float *c, int64_t rsc,
                                __mmask16 m0, __mmask16 m1)
{
    __m512 acc0[OP_SMALL_MR], acc1[OP_SMALL_MR];
    for (int r = 0; r < MR; r++) { acc0[r] = _mm512_setzero_ps(); acc1[r] = _mm512_setzero_ps(); }
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + p * rsb;
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, bp);
        const __m512 b1 = TWO ? _mm512_maskz_loadu_ps(m1, bp + 16) : _mm512_setzero_ps();
        const float *ap = a + p * csa;
        for (int r = 0; r < MR; r++) {
            const __m512 av = _mm512_set1_ps(ap[r * rsa]);
            acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
            if (TWO) acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
    }
    for (int r = 0; r < MR; r++) {
        _mm512_mask_storeu_ps(c + r * rsc, m0, acc0[r]);
        if (TWO) _mm512_mask_storeu_ps(c + r * rsc + 16, m1, acc1[r]);
    }
}

/* One row of C (m == 1: a row vector times B) wider than a tile: B's rows read in order, blocks of
   OP_SMALL_ROW_KB rows swept across the whole row of C, whose partial sums wait in C itself (L1)
   between blocks (so C must overlap neither A nor B, as everywhere here: matmul's out= writes
   through a copy where it would). The 1 x 32 tile swept each 32-column strip down all of B (128
   bytes of every row, a row stride apart: past L1, one strip after another) with two accumulators,
   each FMA waiting on the last; here 64 columns run four chains, the column groups independent of
   each other. Every element is the same FMA chain as in the tile (from zero, p ascending): the
   same bits.
   sapphirerapids (the Intel AMX VM, 2026-12-06, 1 thread, the kernel call alone, tile -> this, us;
   blocks of 16 / 32 / 128 rows within 5% of 64, of 8 slower at 128 x 128 and 256 x 256):
   K x N 128 x 128 1.13 -> 1.03, 256 x 256 3.48 -> 3.05, 512 x 512 15.1 -> 11.6, 768 x 768 79.5
   -> 64.4, 1024 x 1024 244 -> 168, 2048 x 512 245 -> 164, 64 x 1024 3.50 -> 3.14. */
#define OP_SMALL_ROW_KB 64
static void op_small_row(int64_t n, int64_t k, const float *a, int64_t csa, const float *b,
                         int64_t rsb, float *c)
{
    for (int64_t p0 = 0; p0 < k; p0 += OP_SMALL_ROW_KB) {
        const int64_t p1 = op_min64(k, p0 + OP_SMALL_ROW_KB);
        for (int64_t j = 0; j < n; j += 64) {
            const int64_t r = n - j;
            __mmask16 mk[4];
            for (int v = 0; v < 4; v++) {
                const int64_t w = r - 16 * v;
                mk[v] = w >= 16 ? (__mmask16)0xffff : w > 0 ? (__mmask16)((1u << w) - 1u) : 0;
            }
            __m512 acc[4];
            for (int v = 0; v < 4; v++)
                acc[v] = p0 ? _mm512_maskz_loadu_ps(mk[v], c + j + 16 * v) : _mm512_setzero_ps();
            const float *bp = b + p0 * rsb + j;
            for (int64_t p = p0; p < p1; p++, bp += rsb) {
                const __m512 av = _mm512_set1_ps(a[p * csa]);
                for (int v = 0; v < 4; v++)
                    acc[v] = _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(mk[v], bp + 16 * v), acc[v]);
            }
            for (int v = 0; v < 4; v++) _mm512_mask_storeu_ps(c + j + 16 * v, mk[v], acc[v]);
        }
    }
}

static void op_small_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                        const float *b, int64_t rsb, float *c, int64_t rsc)
{
    if (m == 1 && n > 32) {
        op_small_row(n, k, a, csa, b, rsb, c);
        return;
    }
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
        const int nb = (int)op_min64(32, n - j0);
        const __mmask16 m0 = nb >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nb) - 1);
        const __mmask16 m1 = nb >= 32 ? (__mmask16)0xffff : nb > 16 ? (__mmask16)((1u << (nb - 16)) - 1) : 0;
        const float *bj = b + j0;
        for (int64_t i0 = 0; i0 < m; i0 += OP_SMALL_MR) {
            const int mr = (int)op_min64(OP_SMALL_MR, m - i0);
            const float *ai = a + i0 * rsa;
            float *ci = c + i0 * rsc + j0;
#define OP_NN(R) (nb > 16 ? op_small_nn_tile(R, 1, k, ai, rsa, csa, bj, rsb, ci, rsc, m0, m1)    \
                          : op_small_nn_tile(R, 0, k, ai, rsa, csa, bj, rsb, ci, rsc, m0, m1))
            switch (mr) {
            case 8: OP_NN(8); break;
            case 7: OP_NN(7); break;
            case 6: OP_NN(6); break;
            case 5: OP_NN(5); break;
            case 4: OP_NN(4); break;
            case 3: OP_NN(3); break;
            case 2: OP_NN(2); break;
            default: OP_NN(1); break;
            }
#undef OP_NN
        }
    }
}

/* The 16 x 16 block r (rows r[0..15]) transposed in place: r[c] becomes column c (the classic
   unpack / 128-bit-lane shuffle network: 32-bit pairs, 64-bit pairs, then lanes) */
OP_INLINE void op_small_tr16(__m512 r[16])
{
    __m512 t[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {  /* r[4i + e], lane L: rows 4i..4i+3 of column 4L + e */
        const __m512d p0 = _mm512_castps_pd(t[4 * i]), p1 = _mm512_castps_pd(t[4 * i + 1]);
        const __m512d p2 = _mm512_castps_pd(t[4 * i + 2]), p3 = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(p0, p2));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(p0, p2));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(p1, p3));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(p1, p3));
    }
    for (int e = 0; e < 4; e++) {
        const __m512 a0 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88);
        const __m512 a1 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xDD);
        const __m512 b0 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88);
        const __m512 b1 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xDD);
        t[e] = _mm512_shuffle_f32x4(a0, b0, 0x88);
        t[8 + e] = _mm512_shuffle_f32x4(a0, b0, 0xDD);
        t[4 + e] = _mm512_shuffle_f32x4(a1, b1, 0x88);
        t[12 + e] = _mm512_shuffle_f32x4(a1, b1, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* The nt form (B's columns contiguous along k: x @ W.T) through the nn form (op_small_nt_nn,
   after the level blocks, with this level's op_small_tblock): B in strips of OP_SMALL_NT_STRIP
   columns transposed into bt (k rows of the strip's columns, contiguous; 16 x 16
   blocks in registers), then op_small_nn over the strip. The nt tile reads every A row and B
   column once per 4 x 4 outputs and reduces each dot product across lanes at the end; the nn
   tile reads B once per 8 rows and keeps its sums in lanes. C rows contiguous (rsc, csc 1);
   from OP_SMALL_NT_NN_MIN_M rows, k <= OP_SMALL_NT_MAX_K (ops/_small.py's NT_NN mirrors both).
   The strip (up to 64 KiB) comes from malloc, not the stack (a Python thread's stack may be
   32 KiB); returns 0 when that fails (the caller then takes the dot products). sapphirerapids
   (the Intel AMX VM, 2026-12-05, linear, 1 thread, nt / this, best of 3 x 5 alternated blocks):
   64^3 1.58, 128^3 1.99, 256 x 64 x 64 2.04, 33 x 333 x 77 1.38, 16 x 256 x 256 1.26, 8 x 256 x
   256 1.00, 12 x 384 x 384 0.94, 8 x 512 x 512 0.85, 4 x 256 x 256 0.76. */
#define OP_SMALL_NT_STRIP 32
#define OP_SMALL_NT_MAX_K 512
#define OP_SMALL_NT_NN_MIN_M 16
#define OP_SMALL_NT_NN_MIN_N 1
#define OP_SMALL_TB 16  /* the transposed block: OP_SMALL_TB columns x OP_SMALL_TB depths */
/* columns bh + i * csb (i < cols), depths p0 .. p0 + pn - 1, transposed into pn rows of
   OP_SMALL_TB floats at dst + q * ld (columns past cols zero) */
OP_INLINE void op_small_tblock(const float *bh, int64_t csb, int64_t p0, int cols, int pn,
                               float *dst, int64_t ld)
{
    const __mmask16 mk = (__mmask16)(pn == 16 ? 0xffffu : (1u << pn) - 1u);
    __m512 r[16];
    for (int i = 0; i < 16; i++)
        r[i] = i < cols ? _mm512_maskz_loadu_ps(mk, bh + i * csb + p0) : _mm512_setzero_ps();
    op_small_tr16(r);
    for (int q = 0; q < pn; q++) _mm512_store_ps(dst + q * ld, r[q]);
}

/* The 16 horizontal sums of v[0..15] in one vector, in three shuffle-and-add rounds (45 operations
   instead of 16 full reductions): lane 4 L + p of the result is the sum of v[L + 4 p]. */
OP_INLINE __m512 op_small_sum16(const __m512 *v)
{
    __m512 t[8], u[4], w[2];
    for (int i = 0; i < 8; i++)  /* 128-bit halves: lanes (0+2, 1+3) of v[2i], then of v[2i+1] */
        t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int j = 0; j < 4; j++)  /* 128-bit lane q of u[j]: the 4 partial sums of v[4j + q] */
        u[j] = _mm512_add_ps(_mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0x88),
                             _mm512_shuffle_f32x4(t[2 * j], t[2 * j + 1], 0xDD));
    for (int q = 0; q < 2; q++)
        w[q] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * q], u[2 * q + 1], 0x88),
                             _mm512_shuffle_ps(u[2 * q], u[2 * q + 1], 0xDD));
    return _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x88), _mm512_shuffle_ps(w[0], w[1], 0xDD));
}

/* R x S dot tile of the nt form: A rows (contiguous along k) x B columns (contiguous along k) */
OP_INLINE void op_small_nt_tile(const int R, const int S, int64_t k, const float *a, int64_t rsa,
                                const float *b, int64_t csb, float *c, int64_t rsc, int64_t csc)
{
    __m512 acc[16];  /* acc[4 r + s] */
    for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
    int64_t p = 0;
    for (; p < k; p += 16) {
        const __mmask16 mk = k - p >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k - p)) - 1);
        __m512 bv[4];
        for (int s = 0; s < S; s++) bv[s] = _mm512_maskz_loadu_ps(mk, b + s * csb + p);
        for (int r = 0; r < R; r++) {
            const __m512 av = _mm512_maskz_loadu_ps(mk, a + r * rsa + p);
            for (int s = 0; s < S; s++) acc[4 * r + s] = _mm512_fmadd_ps(av, bv[s], acc[4 * r + s]);
        }
    }
    if (R * S <= 2) {
        for (int r = 0; r < R; r++)
            for (int s = 0; s < S; s++) c[r * rsc + s * csc] = _mm512_reduce_add_ps(acc[4 * r + s]);
        return;
    }
    float sums[16];
    _mm512_storeu_ps(sums, op_small_sum16(acc));  /* sums[4 L + p] = acc[L + 4 p]: C(p, L) */
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) c[r * rsc + s * csc] = sums[4 * s + r];
}
#define OP_SMALL_NT_R 4

#elif defined(OP_HAS_AVX2)

/* MR x (8 or 16) tile of the nn form; MR, TWO and FULL are constants at every call site. FULL:
   every column of the tile is in C (plain loads / stores); else masked. With masks everywhere the
   masked loads and stores (slow on AMD) and the masks, reloaded from the stack, held the loop:
   zen3 (AMD EPYC Zen 3 VM, 2026-12-06, 1 thread, the kernel alone alternated in one process with
   numpy, x numpy masked -> this): 64^3 0.53 -> 0.62, 96^3 0.70 -> 0.86, 128^3 0.73-0.77 ->
   0.75-0.87, 200^3 0.77-0.92 -> 0.94-1.03, 256^3 0.64-0.85 -> 0.77-0.87. */
OP_INLINE void op_small_nn_tile(const int MR, const int TWO, const int FULL, int64_t k,
                                const float *a, int64_t rsa, int64_t csa, const float *b,
                                int64_t rsb, float *c, int64_t rsc, __m256i m0, __m256i m1)
{
    __m256 acc0[OP_SMALL_MR], acc1[OP_SMALL_MR];
    for (int r = 0; r < MR; r++) { acc0[r] = _mm256_setzero_ps(); acc1[r] = _mm256_setzero_ps(); }
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + p * rsb;
        const __m256 b0 = FULL ? _mm256_loadu_ps(bp) : _mm256_maskload_ps(bp, m0);
        const __m256 b1 = !TWO ? _mm256_setzero_ps() : FULL ? _mm256_loadu_ps(bp + 8)
                                                            : _mm256_maskload_ps(bp + 8, m1);
        const float *ap = a + p * csa;
        for (int r = 0; r < MR; r++) {
            const __m256 av = _mm256_broadcast_ss(ap + r * rsa);
            acc0[r] = _mm256_fmadd_ps(av, b0, acc0[r]);
            if (TWO) acc1[r] = _mm256_fmadd_ps(av, b1, acc1[r]);
        }
    }
    for (int r = 0; r < MR; r++) {
        if (FULL) {
            _mm256_storeu_ps(c + r * rsc, acc0[r]);
            if (TWO) _mm256_storeu_ps(c + r * rsc + 8, acc1[r]);
        } else {
            _mm256_maskstore_ps(c + r * rsc, m0, acc0[r]);
            if (TWO) _mm256_maskstore_ps(c + r * rsc + 8, m1, acc1[r]);
        }
    }
}

/* A column strip of at most 8 (e.g. A @ W, W (K, 5..8) row-major): tiles of OP_SMALL_NN8_MR rows x
   8 columns, MR accumulators, one B vector and one broadcast, then the 6-row tiles for the last
   rows. The same FMAs per element in the same order as the 6-row tile (the same bits). zen3 (AMD
   EPYC Zen 3 VM, 2026-12-07, 1 thread, the kernel alone, alternated in one process with the 6-row
   tiles, best of 16): 4096 x 512 x 8 1.08, x 5 1.07, 512^2 x 8 1.08, 256^2 x 8 1.07, 4096 x 64 x 8
   1.08, 48 x 512 x 8 1.05, 100 x 100 x 7 1.06 faster (12 rows: 0.92-1.04, even) */
enum { OP_SMALL_NN8_MR = 8 };
OP_INLINE void op_small_nn8_tile(const int MR, const int FULL, int64_t k, const float *a,
                                 int64_t rsa, int64_t csa, const float *b, int64_t rsb, float *c,
                                 int64_t rsc, __m256i m0)
{
    __m256 acc[OP_SMALL_NN8_MR];
    for (int r = 0; r < MR; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        const float *bp = b + p * rsb;
        const __m256 b0 = FULL ? _mm256_loadu_ps(bp) : _mm256_maskload_ps(bp, m0);
        const float *ap = a + p * csa;
        for (int r = 0; r < MR; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(ap + r * rsa), b0, acc[r]);
    }
    for (int r = 0; r < MR; r++) {
        if (FULL) _mm256_storeu_ps(c + r * rsc, acc[r]);
        else _mm256_maskstore_ps(c + r * rsc, m0, acc[r]);
    }
}

static void op_small_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                        const float *b, int64_t rsb, float *c, int64_t rsc)
{
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
        const int nb = (int)op_min64(16, n - j0);
        const __m256i m0 = op_mask8(nb >= 8 ? 8 : nb);
        const __m256i m1 = op_mask8(nb > 8 ? nb - 8 : 0);
        const float *bj = b + j0;
        int64_t i0 = 0;
        if (nb <= 8)
            for (; i0 + OP_SMALL_NN8_MR <= m; i0 += OP_SMALL_NN8_MR) {
                if (nb == 8)
                    op_small_nn8_tile(OP_SMALL_NN8_MR, 1, k, a + i0 * rsa, rsa, csa, bj, rsb,
                                      c + i0 * rsc + j0, rsc, m0);
                else
                    op_small_nn8_tile(OP_SMALL_NN8_MR, 0, k, a + i0 * rsa, rsa, csa, bj, rsb,
                                      c + i0 * rsc + j0, rsc, m0);
            }
        for (; i0 < m; i0 += OP_SMALL_MR) {
            const int mr = (int)op_min64(OP_SMALL_MR, m - i0);
            const float *ai = a + i0 * rsa;
            float *ci = c + i0 * rsc + j0;
#define OP_NN_T(R, TWO, FULL)                                                                    \
    op_small_nn_tile(R, TWO, FULL, k, ai, rsa, csa, bj, rsb, ci, rsc, m0, m1)
#define OP_NN(R) (nb == 16 ? OP_NN_T(R, 1, 1) : nb > 8 ? OP_NN_T(R, 1, 0)                        \
                  : nb == 8 ? OP_NN_T(R, 0, 1) : OP_NN_T(R, 0, 0))
            switch (mr) {
            case 6: OP_NN(6); break;
            case 5: OP_NN(5); break;
            case 4: OP_NN(4); break;
            case 3: OP_NN(3); break;
            case 2: OP_NN(2); break;
            default: OP_NN(1); break;
            }
#undef OP_NN
#undef OP_NN_T
        }
    }
}

OP_INLINE float op_small_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

OP_INLINE void op_small_nt_tile(const int R, const int S, int64_t k, const float *a, int64_t rsa,
                                const float *b, int64_t csb, float *c, int64_t rsc, int64_t csc)
{
    __m256 acc[2][4];
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) acc[r][s] = _mm256_setzero_ps();
    /* plain loads, the mask for K's tail only (masked loads are slow on AMD: the nn tile above) */
    const int64_t kv = k / 8 * 8;
    for (int64_t p = 0; p < kv; p += 8) {
        __m256 bv[4];
        for (int s = 0; s < S; s++) bv[s] = _mm256_loadu_ps(b + s * csb + p);
        for (int r = 0; r < R; r++) {
            const __m256 av = _mm256_loadu_ps(a + r * rsa + p);
            for (int s = 0; s < S; s++) acc[r][s] = _mm256_fmadd_ps(av, bv[s], acc[r][s]);
        }
    }
    if (kv < k) {
        const __m256i mk = op_mask8((int)(k - kv));
        __m256 bv[4];
        for (int s = 0; s < S; s++) bv[s] = _mm256_maskload_ps(b + s * csb + kv, mk);
        for (int r = 0; r < R; r++) {
            const __m256 av = _mm256_maskload_ps(a + r * rsa + kv, mk);
            for (int s = 0; s < S; s++) acc[r][s] = _mm256_fmadd_ps(av, bv[s], acc[r][s]);
        }
    }
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) c[r * rsc + s * csc] = op_small_hsum8(acc[r][s]);
}
#define OP_SMALL_NT_R 2

/* One row of C from a B of N = 2..4 columns stored contiguously (m == 1, rsb == N: the nn form's
   tile used 2-4 of its 8 lanes, one FMA chain): B read as one vector of K * N floats, eight of its
   rows (N vectors) at a time against A's eight elements spread over the same lanes by a permute,
   two blocks of eight rows in flight (2N accumulators); lane l of vector v holds column (8 v + l)
   mod N. The sums: per column, accumulator after accumulator, lane after lane, then the rows of K's
   tail in order. zen3 (AMD EPYC Zen 3 VM, 2026-12-07, 1 thread, x numpy nn -> this): 1 x 4096 x
   2 0.51 -> 1.78, 1 x 4096 x 4 0.64 -> 1.54, 1 x 65536 x 2 0.41 -> 1.95, 1 x 65536 x 4 0.64 ->
   1.86; past the small limits (gemv_f32.c op_dot_narrow, its copy -> this) 1 x 1048576 x 2 0.23
   -> 1.48. The AVX-512 levels keep the nn form here (not measured). */
OP_INLINE void op_small_row_narrow_n(const int N, int64_t k, const float *a, const float *b,
                                     float *c)
{
    __m256 acc[8];
    __m256i idx[4];
    for (int v = 0; v < 2 * N; v++) acc[v] = _mm256_setzero_ps();
    for (int v = 0; v < N; v++) {
        int32_t ix[8];
        for (int l = 0; l < 8; l++) ix[l] = (8 * v + l) / N;
        idx[v] = _mm256_loadu_si256((const __m256i *)ix);
    }
    int64_t p = 0;
    for (; p + 16 <= k; p += 16) {
        const __m256 a0 = _mm256_loadu_ps(a + p), a1 = _mm256_loadu_ps(a + p + 8);
        const float *bp = b + p * N;
        for (int v = 0; v < N; v++) {
            acc[v] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(a0, idx[v]),
                                     _mm256_loadu_ps(bp + 8 * v), acc[v]);
            acc[N + v] = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(a1, idx[v]),
                                         _mm256_loadu_ps(bp + 8 * N + 8 * v), acc[N + v]);
        }
    }
    float lanes[64];
    for (int v = 0; v < 2 * N; v++) _mm256_storeu_ps(lanes + 8 * v, acc[v]);
    for (int j = 0; j < N; j++) {
        float s = 0.0f;
        for (int v = 0; v < 2 * N; v++)
            for (int l = 0; l < 8; l++)
                if ((8 * (v % N) + l) % N == j) s += lanes[8 * v + l];
        for (int64_t q = p; q < k; q++) s += a[q] * b[q * N + j];
        c[j] = s;
    }
}

static void op_small_row_narrow(int64_t n, int64_t k, const float *a, const float *b, float *c)
{
    switch (n) {
    case 2: op_small_row_narrow_n(2, k, a, b, c); break;
    case 3: op_small_row_narrow_n(3, k, a, b, c); break;
    default: op_small_row_narrow_n(4, k, a, b, c); break;
    }
}
#define OP_SMALL_ROW_NARROW 1
/* The nt form through the nn form (op_small_nt_nn, after the level blocks): B in strips of
   OP_SMALL_NR (16) columns transposed into bt (k rows of 16 floats; 8 x 8 blocks in registers,
   op_small_tblock), op_small_nn over each strip with B's rows whole. The 2 x 4 dot tiles read A's
   rows and B's columns once per 8 outputs and reduce every sum across lanes: 0.5-0.8x numpy from 12
   rows on, where this runs 0.9-1.1x (zen3, 1 thread: ops/_small.py's NT_NN, with the measurements);
   fewer rows keep them, and so do fewer than 8 columns, whose strips would be mostly zeros (zen3, 1
   thread, the kernel alone, x numpy dots / this: 1000 x 1000 x 2 1.81 / 0.94, x 4 1.81 / 1.13, 64 x
   2048 x 4 1.32 / 0.86; x 8 1.06 / 1.30, 64 x 2048 x 8 0.78 / 0.92, 300 x 1000 x 16 0.90 / 1.26).
   bt is at most 256 KiB (K 4096). Returns 0 when its malloc fails (the dot tiles run). */
#define OP_SMALL_NT_MAX_K 4096
#define OP_SMALL_NT_NN_MIN_M 12
#define OP_SMALL_NT_NN_MIN_N 8
#define OP_SMALL_NT_STRIP OP_SMALL_NR
#define OP_SMALL_TB 8
OP_INLINE void op_small_tblock(const float *bh, int64_t csb, int64_t p0, int cols, int pn,
                               float *dst, int64_t ld)
{
    const __m256i mk = op_mask8(pn);
    __m256 r[8];
    for (int i = 0; i < 8; i++) {
        const float *src = bh + i * csb + p0;
        r[i] = i >= cols ? _mm256_setzero_ps()
               : pn == 8 ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, mk);
    }
    op_transpose8_ps(r);
    for (int q = 0; q < pn; q++) _mm256_store_ps(dst + q * ld, r[q]);
}

#else  /* portable C */

static void op_small_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa, int64_t csa,
                        const float *b, int64_t rsb, float *c, int64_t rsc)
{
    for (int64_t i = 0; i < m; i++) {
        float *OP_RESTRICT ci = c + i * rsc;
        for (int64_t j = 0; j < n; j++) ci[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            const float aip = a[i * rsa + p * csa];
            const float *OP_RESTRICT bp = b + p * rsb;
            for (int64_t j = 0; j < n; j++) ci[j] += aip * bp[j];
        }
    }
}

OP_INLINE void op_small_nt_tile(const int R, const int S, int64_t k, const float *a, int64_t rsa,
                                const float *b, int64_t csb, float *c, int64_t rsc, int64_t csc)
{
    for (int r = 0; r < R; r++)
        for (int s = 0; s < S; s++) {
            const float *OP_RESTRICT ar = a + r * rsa;
            const float *OP_RESTRICT bs = b + s * csb;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            int64_t p = 0;
            for (; p + 4 <= k; p += 4)
                for (int q = 0; q < 4; q++) acc[q] += ar[p + q] * bs[p + q];
            float v = (acc[0] + acc[2]) + (acc[1] + acc[3]);
            for (; p < k; p++) v += ar[p] * bs[p];
            c[r * rsc + s * csc] = v;
        }
}
#define OP_SMALL_NT_R 1

#endif

#if defined(OP_HAS_AVX2)
/* The nt form through the nn form (the AVX-512 and AVX2 comments above): B in strips of
   OP_SMALL_NT_STRIP columns transposed into bt (k rows of the strip's columns, contiguous;
   OP_SMALL_TB x OP_SMALL_TB blocks in registers: op_small_tblock), then op_small_nn over the
   strip. The strip comes from malloc, not the stack (a Python thread's stack may be 32 KiB);
   returns 0 when that fails (the caller then takes the dot products). */
static int op_small_nt_nn(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                          const float *b, int64_t csb, float *c, int64_t rsc)
{
    float *bt = (float *)aligned_alloc(64, sizeof(float) * OP_SMALL_NT_STRIP
                                               * (size_t)op_roundup64(k, OP_SMALL_TB));
    if (!bt) return 0;
    for (int64_t j0 = 0; j0 < n; j0 += OP_SMALL_NT_STRIP) {
        const int nb = (int)op_min64(OP_SMALL_NT_STRIP, n - j0);
        for (int h = 0; h * OP_SMALL_TB < nb; h++) {
            const int cols = (int)op_min64(OP_SMALL_TB, nb - OP_SMALL_TB * h);
            for (int64_t p0 = 0; p0 < k; p0 += OP_SMALL_TB)
                op_small_tblock(b + (j0 + OP_SMALL_TB * h) * csb, csb, p0, cols,
                                k - p0 < OP_SMALL_TB ? (int)(k - p0) : OP_SMALL_TB,
                                bt + p0 * OP_SMALL_NT_STRIP + OP_SMALL_TB * h, OP_SMALL_NT_STRIP);
        }
        op_small_nn(m, nb, k, a, rsa, 1, bt, OP_SMALL_NT_STRIP, c + j0, rsc);
    }
    free(bt);
    return 1;
}
#endif

static void op_small_nt(int64_t m, int64_t n, int64_t k, const float *a, int64_t rsa,
                        const float *b, int64_t csb, float *c, int64_t rsc, int64_t csc)
{
    for (int64_t i0 = 0; i0 < m; i0 += OP_SMALL_NT_R) {
        const int R = (int)op_min64(OP_SMALL_NT_R, m - i0);
        for (int64_t j0 = 0; j0 < n; j0 += 4) {
            const int S = (int)op_min64(4, n - j0);
            const float *ai = a + i0 * rsa, *bj = b + j0 * csb;
            float *cij = c + i0 * rsc + j0 * csc;
#define OP_NT(RR)                                                                                \
            switch (S) {                                                                         \
            case 4: op_small_nt_tile(RR, 4, k, ai, rsa, bj, csb, cij, rsc, csc); break;         \
            case 3: op_small_nt_tile(RR, 3, k, ai, rsa, bj, csb, cij, rsc, csc); break;         \
            case 2: op_small_nt_tile(RR, 2, k, ai, rsa, bj, csb, cij, rsc, csc); break;         \
            default: op_small_nt_tile(RR, 1, k, ai, rsa, bj, csb, cij, rsc, csc); break;        \
            }
#if OP_SMALL_NT_R == 4
            switch (R) {
            case 4: OP_NT(4) break;
            case 3: OP_NT(3) break;
            case 2: OP_NT(2) break;
            default: OP_NT(1) break;
            }
#elif OP_SMALL_NT_R == 2
            if (R == 2) { OP_NT(2) } else { OP_NT(1) }
#else
            (void)R;
            OP_NT(1)
#endif
#undef OP_NT
        }
    }
}

/* One column with A's rows and B's column contiguous (a matrix-vector product): run as C^T = B^T
   A^T, one row of m dot products along K (the nt form; over the threads, m columns to split), not
   the nn form's 32-column tiles with one lane of 32 in use nor m dot products of one column each.
   sapphirerapids, 2026-12-06, A (m, k) by a (k, 1) column, us before -> after (numpy's A @ x): 1
   thread 20000 x 128 789 -> 358 (355-377), 2000 x 1000 546 -> 277 (274-280), 512 x 512 69 -> 12
   (10-11), 4096 x 4096 4303 -> 2404 (2431-2586), 100 x 300 8.9 -> 3.1 (2.0); 2 threads 20000 x
   128 -> 180-200 (190) when no other library's threads spin beside it. */
#define OP_SMALL_MATVEC(m, n, k, csa, rsb) \
    ((n) == 1 && (m) > 1 && (k) > 0 && (csa) == 1 && (rsb) == 1)

/* epi for C^T (OP_SMALL_MATVEC): the bias along the other axis; NULL stays NULL */
static const op_epilogue *op_small_epi_t(const op_epilogue *epi, op_epilogue *e)
{
    if (!epi) return NULL;
    *e = *epi;
    e->bias_axis = epi->bias_axis == 0 ? 1 : 0;
    return e;
}

/* op_gemm_f32_small as given (no OP_SMALL_MATVEC turn: the ranges of op_gemm_f32_small_mt, whose
   one-column pieces are the whole call's columns). nall, mall: the whole call's columns and rows
   (n, m: this range's), which choose the form and the nt form's tiles, so every range computes as
   the one-thread call. */
static float op_small_dot(int64_t k, const float *a, const float *b);  /* gemv_f32.c */

/* From this many rows a row-major B of 2-4 columns (rows and columns of the whole call: mall, nall
   of op_small_run) takes the nt form's dot tiles through op_small_cols; fewer keep the nn form
   (the copy is then a large part of the work). zen3 (AMD EPYC Zen 3 VM, 2026-12-07, 1 thread, x
   numpy nn -> cols): 1000 x 300 x 3 -> 2.15, 1024^2 x 2 0.73-1.09 -> 2.23, 256^2 x 2 0.84 -> 2.15, 256^2 x 4 -> 1.18, 16 x 1024 x 2 0.78
   -> 1.23, 16 x 4096 x 3 1.38 -> 1.29; but 8 x 4096 x 4 1.23 -> 0.91, 2 x 16384 x 4 1.69 -> 0.59,
   1 x 4096 x 4 0.64 -> 0.33. At most onepath.dask's block padding (_PAD_ROWS, 49), so its row
   blocks take the form the whole product takes. */
#define OP_SMALL_NARROW_MIN_M 16

/* B's n columns (rows rsb apart, columns contiguous) copied into n rows of dst OP_COLS_LD(k)
   floats apart (rows a multiple of 4 KiB apart would share L1 sets; gemv_f32.c's copies of rows
   keep that stride too) */
#define OP_COLS_LD(k) (op_roundup64((k), 16) + 16)
static void op_cols_copy(int64_t n, int64_t k, const float *b, int64_t rsb, float *dst)
{
    const int64_t ld = OP_COLS_LD(k);
    for (int64_t p = 0; p < k; p++)
        for (int64_t j = 0; j < n; j++) dst[j * ld + p] = b[p * rsb + j];
}

/* op_cols_copy into a new buffer (free it); NULL when malloc fails */
static float *op_small_cols(int64_t n, int64_t k, const float *b, int64_t rsb)
{
    float *bt = (float *)malloc(sizeof(float) * (size_t)(n * OP_COLS_LD(k)));
    if (bt) op_cols_copy(n, k, b, rsb, bt);
    return bt;
}

static int op_small_run(int64_t m, int64_t n, int64_t k, const void *av, int64_t rsa, int64_t csa,
                        const void *bv, int64_t rsb, int64_t csb, void *cv, int64_t rsc,
                        int64_t csc, const op_epilogue *epi, int64_t nall, int64_t mall)
{
    const float *a = (const float *)av, *b = (const float *)bv;
    float *c = (float *)cv, *bt;
    if (m <= 0 || n <= 0) return 1;
    if (k <= 0) {
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[i * rsc + j * csc] = 0.0f;
    } else if (mall == 1 && nall == 1 && csa == 1 && rsb == 1) {
        /* a vector dot product: the nn form's tile would use one lane, the nt form's one
           accumulator, each FMA waiting on the last (zen3, 1 thread, x numpy: K 4096 0.25 -> 0.64,
           the rest Python; K 262144 0.12 -> 0.91-1.02) */
        c[0] = op_small_dot(k, a, b);
#if defined(OP_SMALL_ROW_NARROW)
    } else if (mall == 1 && nall >= 2 && nall <= 4 && csa == 1 && csb == 1 && rsb == n && csc == 1) {
        op_small_row_narrow(n, k, a, b, c);
#endif
    } else if (csb == 1 && nall >= 2 && nall <= 4 && csa == 1 && k >= 8 && mall >= OP_SMALL_NARROW_MIN_M
               && (bt = op_small_cols(n, k, b, rsb))) {
        /* 2-4 columns of a row-major B: copied into rows, then the nt form's dot tiles, which
           use every lane (the nn tile 2-4 of its 8 or 16); the same bits in every row range */
        op_small_nt(m, n, k, a, rsa, bt, OP_COLS_LD(k), c, rsc, csc);
        free(bt);
    } else if (csb == 1 && csc == 1) {
        op_small_nn(m, n, k, a, rsa, csa, b, rsb, c, rsc);
    } else if (csa == 1 && rsb == 1) {
#if defined(OP_HAS_AVX2)
        if (!(csc == 1 && mall >= OP_SMALL_NT_NN_MIN_M && k <= OP_SMALL_NT_MAX_K
              && nall >= OP_SMALL_NT_NN_MIN_N && op_small_nt_nn(m, n, k, a, rsa, b, csb, c, rsc)))
#endif
            op_small_nt(m, n, k, a, rsa, b, csb, c, rsc, csc);
    } else {
        op_small_any(m, n, k, a, rsa, csa, b, rsb, csb, c, rsc, csc);
    }
    if (epi && (epi->bias || epi->act != OP_ACT_NONE))
        for (int64_t i = 0; i < m; i++) op_small_epi_row(c + i * rsc, csc, n, i, epi);
    return 1;
}

int op_gemm_f32_small(int64_t m, int64_t n, int64_t k,
                      const void *av, int64_t rsa, int64_t csa,
                      const void *bv, int64_t rsb, int64_t csb,
                      void *cv, int64_t rsc, int64_t csc, const op_epilogue *epi)
{
    return op_gemm_f32_small_mt(m, n, k, av, rsa, csa, bv, rsb, csb, cv, rsc, csc, epi, 1);
}

/* op_gemm_f32_small_mt: column ranges of C (rows: row ranges), one task each, on the thread pool
   (threads.c). */
typedef struct {
    int64_t m, n, k, rsa, csa, rsb, csb, rsc, csc, chunk;
    const float *a, *b;
    float *c;
    const op_epilogue *epi;
    int rows;
} op_small_mt_ctx;

static void op_small_mt_task(void *ctx, int64_t task, int tid)
{
    const op_small_mt_ctx *x = (const op_small_mt_ctx *)ctx;
    (void)tid;
    const int64_t r0 = task * x->chunk, len = op_min64(x->chunk, (x->rows ? x->m : x->n) - r0);
    const int64_t i0 = x->rows ? r0 : 0, j0 = x->rows ? 0 : r0;
    op_epilogue e;
    const op_epilogue *ep = NULL;
    if (x->epi) {
        e = *x->epi;   /* this range's part of the bias */
        if (e.bias) e.bias += (e.bias_axis == 0 ? i0 : j0) * e.bias_stride;
        ep = &e;
    }
    op_small_run(x->rows ? len : x->m, x->rows ? x->n : len, x->k, x->a + i0 * x->rsa, x->rsa,
                 x->csa, x->b + j0 * x->csb, x->rsb, x->csb, x->c + i0 * x->rsc + j0 * x->csc,
                 x->rsc, x->csc, ep, x->n, x->m);
}

/* Work (M N K, all entries) from which a threaded small call takes the pool as the packed GEMM
   does (op_parallel_for: no crowded fallback, threads made for a concurrent call) in ranges of a
   quarter of a thread's share: a worker that finds no CPU at once (another library's threads
   spinning after their own call) then costs part of one range, not the whole call at one
   thread's speed (op_parallel_for_short's crowded fallback: 0.1 s of one-thread calls). zen3 (AMD
   EPYC Zen 3 VM, 2026-12-08, the calls suite at 2 threads, numpy and torch alternated):
   4096 x 512 @ 512 x 8 took 430 us in some suite runs and 750 us in others. */
#define OP_SMALL_MT_BIG (INT64_C(1) << 22)

static int op_small_pfor(int nthreads, int64_t ntasks, op_task_fn fn, void *ctx, int big)
{
    return big ? op_parallel_for(nthreads, ntasks, fn, ctx)
               : op_parallel_for_short(nthreads, ntasks, fn, ctx);
}

int op_gemm_f32_small_mt(int64_t m, int64_t n, int64_t k,
                         const void *av, int64_t rsa, int64_t csa,
                         const void *bv, int64_t rsb, int64_t csb,
                         void *cv, int64_t rsc, int64_t csc, const op_epilogue *epi, int nthreads)
{
    if (OP_SMALL_MATVEC(m, n, k, csa, rsb)) {
        op_epilogue e;
        return op_gemm_f32_small_mt(1, m, k, bv, csb, rsb, av, csa, rsa, cv, csc, rsc,
                                    op_small_epi_t(epi, &e), nthreads);
    }
    if (nthreads <= 1 || m <= 0 || k <= 0)   /* (op_gemm_f32_small: no range arithmetic) */
        return op_small_run(m, n, k, av, rsa, csa, bv, rsb, csb, cv, rsc, csc, epi, n, m);
    /* Too few columns for two ranges of 32 (n <= 32 at 2 threads): ranges of rows (from 8 tiles'
       worth), for the nn form (B and C rows contiguous), whose tiles are OP_SMALL_MR rows of one
       row's FMAs each: at multiples of OP_SMALL_MR every tile is the one-thread call's, and so is
       every bit. The epilogue's bias along rows moves with the range; activations act per row.
       sapphirerapids, 2026-12-06, 2 threads, median of 5 alternated in one process, x numpy
       (OpenBLAS) one thread -> two: 512 x 64 x 32 0.79 -> 1.18, 1024 x 128 x 16 0.77 -> 1.27 (256 x
       384 x 32, the packed GEMM before ops/_small.py's mt_fits: 0.49-0.54 -> 1.22).
       The nt form (x @ W.T: linear's raw weight) too: its dot tiles are OP_SMALL_NT_R rows (a
       divisor of OP_SMALL_MR), the same at range starts that are multiples of OP_SMALL_MR, and its
       transposed nn form is chosen by the whole call's rows (op_small_run's mall); each range
       transposes B's strips itself. zen3 (AMD EPYC Zen 3 VM, 2026-12-07, linear, 2 threads, best
       of 9 alternated in one process, one thread -> two, x numpy): 3000 x 40 x 30 0.68 -> 0.96,
       512 x 768 x 10 0.82 -> 1.18, 1000 x 100 x 20 0.63 -> 0.94, 200 x 1000 x 8 0.93 -> 1.25,
       128 x 384 x 32 0.69 -> 0.84, 256 x 256 x 16 0.89 -> 0.96, 64 x 512 x 16 1.05 -> 1.12 */
    _Static_assert(OP_SMALL_MR % OP_SMALL_NT_R == 0, "row ranges must start on nt tile rows");
    const int big = m * n * k >= OP_SMALL_MT_BIG;
    const int64_t parts = big ? 4 * (int64_t)nthreads : nthreads;   /* (OP_SMALL_MT_BIG) */
    const int64_t chunk32 = op_roundup64(op_cdiv64(n > 0 ? n : 1, nthreads), 32);
    if (n <= chunk32 && csc == 1 && (csb == 1 || (csa == 1 && rsb == 1)) && m >= 8 * OP_SMALL_MR) {
        const int64_t rchunk = op_roundup64(op_cdiv64(m, parts), OP_SMALL_MR);
        op_small_mt_ctx x = {m, n, k, rsa, csa, rsb, csb, rsc, csc, rchunk,
                             (const float *)av, (const float *)bv, (float *)cv, epi, 1};
        return op_small_pfor(nthreads, op_cdiv64(m, rchunk), op_small_mt_task, &x, big);
    }
    if (n <= chunk32)
        return op_small_run(m, n, k, av, rsa, csa, bv, rsb, csb, cv, rsc, csc, epi, n, m);
    /* Else ranges of columns starting at multiples of q: of every form's column tile (nn:
       OP_SMALL_NR, nt and the loop: 4), so every tile, and so every bit, is the one-thread call's
       (the activation gives a value the same bits wherever it falls: act_f32.c). q is 16 below
       AVX-512 (32 there): 96 or 192 columns at 2 threads in two equal ranges, not 64 + 32 or
       128 + 64 (by the arithmetic: a third less time for the slower range; on the Zen 3 VM the
       2-thread timings of these products moved more than that from run to run, both libraries
       alike) */
    const int64_t q = OP_SMALL_NR > 16 ? OP_SMALL_NR : 16;
    const int64_t chunk = op_roundup64(op_cdiv64(n, parts), q);
    op_small_mt_ctx x = {m, n, k, rsa, csa, rsb, csb, rsc, csc, chunk,
                         (const float *)av, (const float *)bv, (float *)cv, epi, 0};
    return op_small_pfor(nthreads, op_cdiv64(n, chunk), op_small_mt_task, &x, big);
}

/* op_gemm_f32_small_batch: ranges of batch entries, one task each, on the thread pool. */
typedef struct {
    int64_t nbatch, m, n, k, bsa, rsa, csa, bsb, rsb, csb, bsc, rsc, csc, chunk;
    const float *a, *b;
    float *c;
} op_small_batch_ctx;

static void op_small_batch_task(void *ctx, int64_t task, int tid)
{
    const op_small_batch_ctx *x = (const op_small_batch_ctx *)ctx;
    (void)tid;
    const int64_t e1 = op_min64((task + 1) * x->chunk, x->nbatch);
    for (int64_t e = task * x->chunk; e < e1; e++)
        op_gemm_f32_small(x->m, x->n, x->k, x->a + e * x->bsa, x->rsa, x->csa,
                          x->b + e * x->bsb, x->rsb, x->csb,
                          x->c + e * x->bsc, x->rsc, x->csc, NULL);
}

int op_gemm_f32_small_batch(int64_t nbatch, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t bsa, int64_t rsa, int64_t csa,
                            const void *b, int64_t bsb, int64_t rsb, int64_t csb,
                            void *c, int64_t bsc, int64_t rsc, int64_t csc, int nthreads)
{
    const int t = nthreads < 1 ? 1
                  : (int64_t)nthreads > nbatch ? (int)op_max64(nbatch, 1) : nthreads;
    const int big = nbatch * m * n * k >= OP_SMALL_MT_BIG && t > 1;   /* (t 1: one task, all) */
    op_small_batch_ctx x = {nbatch, m, n, k, bsa, rsa, csa, bsb, rsb, csb, bsc, rsc, csc,
                            op_cdiv64(nbatch > 0 ? nbatch : 1, big ? 4 * (int64_t)t : t),
                            (const float *)a, (const float *)b, (float *)c};
    if (nbatch <= 0) return 1;
    if (nbatch < nthreads) {  /* fewer entries than threads: each entry's columns over them */
        int used = 1;
        for (int64_t e = 0; e < nbatch; e++) {
            const int u = op_gemm_f32_small_mt(m, n, k, (const float *)a + e * bsa, rsa, csa,
                                               (const float *)b + e * bsb, rsb, csb,
                                               (float *)c + e * bsc, rsc, csc, NULL, nthreads);
            used = u > used ? u : used;
        }
        return used;
    }
    if (t <= 1) {
        op_small_batch_task(&x, 0, 0);
        return 1;
    }
    return op_small_pfor(t, op_cdiv64(nbatch, x.chunk), op_small_batch_task, &x, big);
}

int op_gemm_f32_small_nt_nn(int64_t m, int64_t k)
{
#if defined(OP_HAS_AVX2)
    return m >= OP_SMALL_NT_NN_MIN_M && k <= OP_SMALL_NT_MAX_K;
#else
    (void)m; (void)k;
    return 0;
#endif
}

int op_gemm_f32_small_cc(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c)
{
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c) & (sizeof(float) - 1)) return 0;
    return op_gemm_f32_small(m, n, k, a, k, 1, b, n, 1, c, n, 1, NULL);
}

/* ---- bfloat16 ---- */

#define OP_SMALL_BF_CHUNK 64

#if defined(OP_HAS_AVX512)
#define OP_SMALL_BF_NAME "gemm_bf16_small_" OP_LEVEL_NAME "_8x32"
OP_INLINE __m512 op_small_bf_load(__mmask16 m, const uint16_t *p)
{
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

OP_INLINE void op_small_bf_tile(const int MR, const int TWO, int64_t k, const uint16_t *a, int64_t rsa,
                                const uint16_t *b, int64_t rsb, void *c, int64_t rsc, int c_bf16,
                                __mmask16 m0, __mmask16 m1)
{
    __m512 acc0[OP_SMALL_MR], acc1[OP_SMALL_MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) { acc0[r] = _mm512_setzero_ps(); acc1[r] = _mm512_setzero_ps(); }
    for (int64_t p = 0; p < k; p++) {
        const uint16_t *bp = b + p * rsb;
        const __m512 b0 = op_small_bf_load(m0, bp);
        const __m512 b1 = TWO ? op_small_bf_load(m1, bp + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int r = 0; r < MR; r++) {
            const __m512 av = _mm512_set1_ps(op_bf16_to_f32_1(a[r * rsa + p]));
            acc0[r] = _mm512_fmadd_ps(av, b0, acc0[r]);
            if (TWO) acc1[r] = _mm512_fmadd_ps(av, b1, acc1[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
        if (!c_bf16) {
            float *cr = (float *)c + r * rsc;
            _mm512_mask_storeu_ps(cr, m0, acc0[r]);
            if (TWO) _mm512_mask_storeu_ps(cr + 16, m1, acc1[r]);
        } else {  /* rounded once, as op_f32_to_bf16_1 (cvt_bf16.c's integer path) */
            uint16_t *cr = (uint16_t *)c + r * rsc;
            _mm256_mask_storeu_epi16(cr, m0, _mm512_cvtepi32_epi16(op_cvt16_int(_mm512_castps_si512(acc0[r]))));
            if (TWO)
                _mm256_mask_storeu_epi16(cr + 16, m1,
                                         _mm512_cvtepi32_epi16(op_cvt16_int(_mm512_castps_si512(acc1[r]))));
        }
    }
}

static void op_small_bf_nn(int64_t m, int64_t n, int64_t k, const uint16_t *a, const uint16_t *b,
                           void *c, int c_bf16)
{
    const size_t item = c_bf16 ? 2 : 4;
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
        const int nb = (int)op_min64(32, n - j0);
        const __mmask16 m0 = nb >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << nb) - 1);
        const __mmask16 m1 = nb >= 32 ? (__mmask16)0xffff : nb > 16 ? (__mmask16)((1u << (nb - 16)) - 1) : 0;
        for (int64_t i0 = 0; i0 < m; i0 += OP_SMALL_MR) {
            const int mr = (int)op_min64(OP_SMALL_MR, m - i0);
            const uint16_t *ai = a + i0 * k;
            void *ci = (char *)c + (size_t)(i0 * n + j0) * item;
#define OP_BF(R) (nb > 16 ? op_small_bf_tile(R, 1, k, ai, k, b + j0, n, ci, n, c_bf16, m0, m1)    \
                          : op_small_bf_tile(R, 0, k, ai, k, b + j0, n, ci, n, c_bf16, m0, m1))
            switch (mr) {
            case 8: OP_BF(8); break;
            case 7: OP_BF(7); break;
            case 6: OP_BF(6); break;
            case 5: OP_BF(5); break;
            case 4: OP_BF(4); break;
            case 3: OP_BF(3); break;
            case 2: OP_BF(2); break;
            default: OP_BF(1); break;
            }
#undef OP_BF
        }
    }
}
#else
#if defined(OP_HAS_AVX2)
#define OP_SMALL_BF_NAME "gemm_bf16_small_" OP_LEVEL_NAME "_1x64"
#else
#define OP_SMALL_BF_NAME "gemm_bf16_small_" OP_LEVEL_NAME "_1x64"
#endif
static void op_small_bf_nn(int64_t m, int64_t n, int64_t k, const uint16_t *a, const uint16_t *b,
                           void *c, int c_bf16)
{
    float acc[OP_SMALL_BF_CHUNK];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j0 = 0; j0 < n; j0 += OP_SMALL_BF_CHUNK) {
            const int nb = (int)op_min64(OP_SMALL_BF_CHUNK, n - j0);
            for (int j = 0; j < nb; j++) acc[j] = 0.0f;
            for (int64_t p = 0; p < k; p++) {
                const float aip = op_bf16_to_f32_1(a[i * k + p]);
                const uint16_t *OP_RESTRICT bp = b + p * n + j0;
                for (int j = 0; j < nb; j++) acc[j] += aip * op_bf16_to_f32_1(bp[j]);
            }
            if (c_bf16) {
                uint16_t *cr = (uint16_t *)c + i * n + j0;
                for (int j = 0; j < nb; j++) cr[j] = op_f32_to_bf16_1(acc[j]);
            } else {
                memcpy((float *)c + i * n + j0, acc, (size_t)nb * sizeof(float));
            }
        }
}
#endif

int op_gemm_bf16_small_cc(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c,
                          int c_bf16)
{
    if ((((uintptr_t)a | (uintptr_t)b) & 1) || ((uintptr_t)c & (c_bf16 ? 1 : 3))) return 0;
    if (m <= 0 || n <= 0) return 1;
    if (k <= 0) {
        memset(c, 0, (size_t)(m * n) * (c_bf16 ? 2 : 4));
        return 1;
    }
    op_small_bf_nn(m, n, k, (const uint16_t *)a, (const uint16_t *)b, c, c_bf16);
    return 1;
}

const char *op_gemm_bf16_small_name(void) { return OP_SMALL_BF_NAME; }

int op_gemm_f32_small_mr(void) { return OP_SMALL_MR; }
int op_gemm_f32_small_nr(void) { return OP_SMALL_NR; }
const char *op_gemm_f32_small_name(void) { return OP_SMALL_NAME; }
