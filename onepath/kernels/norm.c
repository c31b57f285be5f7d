/* norm.c: LayerNorm with an optional fused residual add (api_norm.h), float32 / bfloat16 rows.
   Written with GCC vector extensions (16 float lanes, as act_f32.c), which each level's build
   lowers to its own registers; the build is ISO C (no FMA contraction), so every level computes the
   same bits. A row sum runs four 16-lane accumulators (independent add chains: one chain is
   latency-bound, ~3x slower at hidden size 384), adds them pairwise and the 16 lanes as a tree,
   then the scalar tail. */

typedef uint16_t op_v16h __attribute__((vector_size(32)));
typedef uint32_t op_v16u __attribute__((vector_size(64)));

OP_INLINE op_v16f op_ln_load16(const void *p, int dt, int64_t j)
{
    if (dt == 0) {
        op_v16f v;
        memcpy(&v, (const float *)p + j, sizeof v);
        return v;
    }
    op_v16h h;
    memcpy(&h, (const uint16_t *)p + j, sizeof h);
    return (op_v16f)(__builtin_convertvector(h, op_v16u) << 16);
}

OP_INLINE float op_ln_load1(const void *p, int dt, int64_t j)
{
    return dt == 0 ? ((const float *)p)[j] : op_bf16_to_f32_1(((const uint16_t *)p)[j]);
}

/* v = x (+ res), 16 lanes from element j */
OP_INLINE op_v16f op_ln_v16(const void *x, int xdt, const void *r, int rdt, int64_t j)
{
    op_v16f v = op_ln_load16(x, xdt, j);
    if (r) v += op_ln_load16(r, rdt, j);
    return v;
}

OP_INLINE float op_ln_v1(const void *x, int xdt, const void *r, int rdt, int64_t j)
{
    float v = op_ln_load1(x, xdt, j);
    if (r) v += op_ln_load1(r, rdt, j);
    return v;
}

typedef float op_v8f __attribute__((vector_size(32)));
typedef float op_v4f __attribute__((vector_size(16)));

/* the 16 lanes added as a tree, in registers (lanes i and i + 8, then i and i + 4, ...) */
OP_INLINE float op_ln_hsum(op_v16f s)
{
    const op_v8f h8 = __builtin_shufflevector(s, s, 0, 1, 2, 3, 4, 5, 6, 7) +
                      __builtin_shufflevector(s, s, 8, 9, 10, 11, 12, 13, 14, 15);
    const op_v4f h4 = __builtin_shufflevector(h8, h8, 0, 1, 2, 3) + __builtin_shufflevector(h8, h8, 4, 5, 6, 7);
    return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

OP_INLINE op_v16f op_ln_term(const void *x, int xdt, const void *r, int rdt, int sq, op_v16f mv, int64_t j)
{
    op_v16f v = op_ln_v16(x, xdt, r, rdt, j);
    if (sq) {
        v -= mv;
        v *= v;
    }
    return v;
}

/* sum over the row of v (sq = 0) or of (v - mean)^2 (sq = 1), in the order described on top */
OP_INLINE float op_ln_sum(int64_t d, const void *x, int xdt, const void *r, int rdt, int sq, float mean)
{
    const op_v16f mv = op_v16_splat(mean);
    op_v16f s0 = op_v16_splat(0.0f), s1 = s0, s2 = s0, s3 = s0;
    int64_t j = 0;
    for (; j + 64 <= d; j += 64) {
        s0 += op_ln_term(x, xdt, r, rdt, sq, mv, j);
        s1 += op_ln_term(x, xdt, r, rdt, sq, mv, j + 16);
        s2 += op_ln_term(x, xdt, r, rdt, sq, mv, j + 32);
        s3 += op_ln_term(x, xdt, r, rdt, sq, mv, j + 48);
    }
    for (; j + 16 <= d; j += 16) s0 += op_ln_term(x, xdt, r, rdt, sq, mv, j);
    float t = op_ln_hsum((s0 + s1) + (s2 + s3));
    for (; j < d; j++) {
        const float v = op_ln_v1(x, xdt, r, rdt, j);
        t += sq ? (v - mean) * (v - mean) : v;
    }
    return t;
}

/* float32 -> bfloat16 bits, 16 lanes: the integer rounding of op_f32_to_bf16_1 */
OP_INLINE op_v16h op_ln_to_bf16(op_v16f v)
{
    const op_v16u u = (op_v16u)v;
    const op_v16u rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    const op_v16u qnan = ((u >> 16) & 0x8000u) | 0x7FC0u;
    const op_v16u isnan = (op_v16u)((u & 0x7FFFFFFFu) > 0x7F800000u);
    return __builtin_convertvector((qnan & isnan) | (rounded & ~isnan), op_v16h);
}

OP_INLINE void op_ln_row(int64_t d, const void *x, int xdt, const void *r, int rdt, const float *g,
                      const float *b, float eps, void *y, int ydt)
{
    const float mean = op_ln_sum(d, x, xdt, r, rdt, 0, 0.0f) / (float)d;
    const op_v16f mv = op_v16_splat(mean);
    const float sq = op_ln_sum(d, x, xdt, r, rdt, 1, mean);
    const float rstd = 1.0f / sqrtf(sq / (float)d + eps);
    const op_v16f rv = op_v16_splat(rstd);
    int64_t j = 0;
    for (; j + 16 <= d; j += 16) {
        op_v16f v = (op_ln_v16(x, xdt, r, rdt, j) - mv) * rv;
        if (g) {
            op_v16f gv;
            memcpy(&gv, g + j, sizeof gv);
            v = v * gv;
        }
        if (b) {
            op_v16f bv;
            memcpy(&bv, b + j, sizeof bv);
            v = v + bv;
        }
        if (ydt == 0) {
            memcpy((float *)y + j, &v, sizeof v);
        } else {
            const op_v16h h = op_ln_to_bf16(v);
            memcpy((uint16_t *)y + j, &h, sizeof h);
        }
    }
    for (; j < d; j++) {
        float v = (op_ln_v1(x, xdt, r, rdt, j) - mean) * rstd;
        if (g) v = v * g[j];
        if (b) v = v + b[j];
        if (ydt == 0) ((float *)y)[j] = v;
        else ((uint16_t *)y)[j] = op_f32_to_bf16_1(v);
    }
}

typedef struct {
    int64_t rows, d, per_task;
    const void *x, *r;
    const float *g, *b;
    void *y;
    float eps;
    int xdt, rdt, ydt;
} op_ln_ctx;

static void op_ln_task(void *ctx, int64_t t, int tid)
{
    (void)tid;
    const op_ln_ctx *c = (const op_ln_ctx *)ctx;
    const int64_t i0 = t * c->per_task, i1 = op_min64(c->rows, i0 + c->per_task);
    const size_t xs = c->xdt ? 2 : 4, rs = c->rdt ? 2 : 4, ys = c->ydt ? 2 : 4;
    /* one loop per dtype combination: the row is compiled with constant dtypes (no per-vector tests) */
#define OP_LN_ROWS(XDT, HAS_R, RDT, YDT)                                                             \
    for (int64_t i = i0; i < i1; i++)                                                             \
        op_ln_row(c->d, (const char *)c->x + (size_t)(i * c->d) * xs, XDT,                        \
                  HAS_R ? (const char *)c->r + (size_t)(i * c->d) * rs : NULL, RDT, c->g, c->b,    \
                  c->eps, (char *)c->y + (size_t)(i * c->d) * ys, YDT)
    const int key = c->xdt * 8 + (c->r ? 2 + c->rdt : 0) * 2 + c->ydt;
    switch (key) {
    case 0: OP_LN_ROWS(0, 0, 0, 0); break;
    case 4: OP_LN_ROWS(0, 1, 0, 0); break;
    case 6: OP_LN_ROWS(0, 1, 1, 0); break;
    case 9: OP_LN_ROWS(1, 0, 0, 1); break;
    case 13: OP_LN_ROWS(1, 1, 0, 1); break;
    case 15: OP_LN_ROWS(1, 1, 1, 1); break;
    default: OP_LN_ROWS(c->xdt, c->r != NULL, c->rdt, c->ydt); break;  /* y's dtype differs from x's */
    }
#undef OP_LN_ROWS
}

#define OP_LN_TASK_ELEMS 8192    /* ~32 KiB of float32 rows per task */
#define OP_LN_MIN_PAR 65536      /* below this many elements one thread (waking the pool costs more) */

int op_layer_norm(int64_t rows, int64_t d, const void *x, int x_dtype, const void *res, int res_dtype,
                  const float *gamma, const float *beta, float eps, void *y, int y_dtype, int nthreads)
{
    if (rows <= 0 || d <= 0) return 1;
    op_ln_ctx c = {rows, d, 1, x, res, gamma, beta, y, eps, x_dtype != 0, res_dtype != 0, y_dtype != 0};
    c.per_task = d >= OP_LN_TASK_ELEMS ? 1 : OP_LN_TASK_ELEMS / d;
    const int64_t tasks = op_cdiv64(rows, c.per_task);
    if (nthreads < 1 || rows * d < OP_LN_MIN_PAR) nthreads = 1;
    return op_parallel_for(nthreads, tasks, op_ln_task, &c);
}
