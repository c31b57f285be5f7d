/* conv_dw.c: depthwise convolution (groups == C, OC = C * multiplier), a direct kernel.

   NCHW: one task per output plane. The input plane is copied once into a zero-padded scratch
   split into `sw` column phases, so every tap of every output row is a unit-stride run; each kernel
   row is then one fused pass over the output row (acc[ow] += w0 s0[ow] + w1 s1[ow] + w2 s2[ow] for
   3-wide kernels), vectorised by the compiler with this level's instructions (SSE2 / AVX2 / AVX-512).
   NHWC: one task per output row; the channel axis is the vector axis (acc[c] += w[c] x[c]).
   bfloat16 input is widened while it is read. Bias and activation are applied in the write-out. */

typedef struct {
    const op_conv_desc *d;
    const void *x;
    const float *w, *bias;
    float *y;
    int act;
    int bf16;
    int64_t mult;            /* channel multiplier OC / C */
    int64_t hp, wq;          /* NCHW scratch: padded rows, columns per phase */
    float *scratch;
    int64_t scratch_elems;   /* per thread */
} op_dw_ctx;

OP_INLINE void op_dw_act_store(float *OP_RESTRICT y, int64_t n, int act)
{
    if (act == OP_ACT_RELU) {
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < 0.0f ? 0.0f : y[i];
    } else if (act != OP_ACT_NONE) {
        for (int64_t i = 0; i < n; i++) y[i] = op_act_f32(y[i], act);
    }
}

OP_INLINE void op_dw_nchw_plane(const op_dw_ctx *c, int64_t task, float *OP_RESTRICT buf,
                                const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t n = task / d->oc, oc = task % d->oc, ci = oc / c->mult;
    const int64_t H = d->h, W = d->w, sw = d->sw, wq = c->wq, hp = c->hp;
    const int64_t plane = (n * d->c + ci) * H * W;
    /* padded scratch: row r <-> ih = r - pt; column cp <-> iw = cp - pl, stored at
       buf[(r * sw + cp % sw) * wq + cp / sw] */
    for (int64_t r = 0; r < hp; r++) {
        const int64_t ih = r - d->pt;
        float *br = buf + r * sw * wq;
        if (ih < 0 || ih >= H) {
            for (int64_t i = 0; i < sw * wq; i++) br[i] = 0.0f;
            continue;
        }
        const int64_t src = plane + ih * W;
        if (sw == 1) {
            const int64_t lo = op_min64(d->pl, wq);
            const int64_t hi = op_min64(wq, d->pl + W);
            for (int64_t i = 0; i < lo; i++) br[i] = 0.0f;
            for (int64_t i = lo; i < hi; i++) br[i] = op_conv_ld(c->x, src + i - d->pl, BF16);
            for (int64_t i = op_max64(hi, lo); i < wq; i++) br[i] = 0.0f;
        } else {
            for (int64_t ph = 0; ph < sw; ph++) {
                float *bq = br + ph * wq;
                for (int64_t i = 0; i < wq; i++) {
                    const int64_t iw = i * sw + ph - d->pl;
                    bq[i] = (iw >= 0 && iw < W) ? op_conv_ld(c->x, src + iw, BF16) : 0.0f;
                }
            }
        }
    }
    const int64_t OW = d->ow, KH = d->kh, KW = d->kw;
    const float *wk = c->w + oc * KH * KW;
    const float b = c->bias ? c->bias[oc] : 0.0f;
    float *Y = c->y + (n * d->oc + oc) * d->oh * OW;
    if (sw == 1 && d->sh == 1 && OW < 64) {
        /* small planes: compute on the padded grid (row pitch wq; columns >= OW are discarded), so
           each tap is a single pass of length OH * wq instead of OH short rows */
        float *OP_RESTRICT acc = buf + hp * wq;
        const int64_t len = (d->oh - 1) * wq + OW;
        for (int64_t i = 0; i < len; i++) acc[i] = b;
        for (int64_t ki = 0; ki < KH; ki++) {
            for (int64_t kj = 0; kj < KW; kj++) {
                const float *OP_RESTRICT s0 = buf + ki * d->dh * wq + kj * d->dw;
                const float w0 = wk[ki * KW + kj];
                for (int64_t i = 0; i < len; i++) acc[i] += w0 * s0[i];
            }
        }
        for (int64_t oh = 0; oh < d->oh; oh++) {
            float *yr = Y + oh * OW;
            for (int64_t i = 0; i < OW; i++) yr[i] = acc[oh * wq + i];
            op_dw_act_store(yr, OW, c->act);
        }
        return;
    }
    for (int64_t oh = 0; oh < d->oh; oh++) {
        float *OP_RESTRICT acc = Y + oh * OW;
        for (int64_t i = 0; i < OW; i++) acc[i] = b;
        for (int64_t ki = 0; ki < KH; ki++) {
            const int64_t r = oh * d->sh + ki * d->dh;
            const float *row = buf + r * sw * wq;
            int64_t kj = 0;
            for (; kj + 3 <= KW; kj += 3) {
                const int64_t o0 = kj * d->dw, o1 = o0 + d->dw, o2 = o1 + d->dw;
                const float *OP_RESTRICT s0 = row + (o0 % sw) * wq + o0 / sw;
                const float *OP_RESTRICT s1 = row + (o1 % sw) * wq + o1 / sw;
                const float *OP_RESTRICT s2 = row + (o2 % sw) * wq + o2 / sw;
                const float w0 = wk[ki * KW + kj], w1 = wk[ki * KW + kj + 1], w2 = wk[ki * KW + kj + 2];
                for (int64_t i = 0; i < OW; i++) acc[i] += w0 * s0[i] + w1 * s1[i] + w2 * s2[i];
            }
            for (; kj < KW; kj++) {
                const int64_t o0 = kj * d->dw;
                const float *OP_RESTRICT s0 = row + (o0 % sw) * wq + o0 / sw;
                const float w0 = wk[ki * KW + kj];
                for (int64_t i = 0; i < OW; i++) acc[i] += w0 * s0[i];
            }
        }
        op_dw_act_store(acc, OW, c->act);
    }
}

OP_INLINE void op_dw_fma_c(float *OP_RESTRICT acc, const float *OP_RESTRICT wr,
                            const void *OP_RESTRICT xv, int64_t C, int64_t mult, const int BF16)
{
    if (mult == 1) {
        if (BF16) {
            const uint16_t *OP_RESTRICT xb = (const uint16_t *)xv;
            for (int64_t i = 0; i < C; i++) {
                const uint32_t u = (uint32_t)xb[i] << 16;
                float f;
                memcpy(&f, &u, sizeof f);
                acc[i] += wr[i] * f;
            }
        } else {
            const float *OP_RESTRICT xf = (const float *)xv;
            for (int64_t i = 0; i < C; i++) acc[i] += wr[i] * xf[i];
        }
    } else {
        for (int64_t i = 0; i < C; i++) {
            const float x = op_conv_ld(xv, i, BF16);
            for (int64_t j = 0; j < mult; j++) acc[i * mult + j] += wr[i * mult + j] * x;
        }
    }
}

OP_INLINE void op_dw_nhwc_row(const op_dw_ctx *c, int64_t task, const int BF16)
{
    const op_conv_desc *d = c->d;
    const int64_t n = task / d->oh, oh = task % d->oh;
    const int64_t C = d->c, OC = d->oc, H = d->h, W = d->w, mult = c->mult;
    const int64_t esz = BF16 ? 2 : 4;
    const char *X = (const char *)c->x;
    const float *bias = c->bias, *wt = c->w;
    float *Y = c->y;
    const int act = c->act;
    for (int64_t ow = 0; ow < d->ow; ow++) {
        float *OP_RESTRICT acc = Y + ((n * d->oh + oh) * d->ow + ow) * OC;
        if (bias)
            for (int64_t i = 0; i < OC; i++) acc[i] = bias[i];
        else
            for (int64_t i = 0; i < OC; i++) acc[i] = 0.0f;
        for (int64_t ki = 0; ki < d->kh; ki++) {
            const int64_t ih = oh * d->sh - d->pt + ki * d->dh;
            if (ih < 0 || ih >= H) continue;
            for (int64_t kj = 0; kj < d->kw; kj++) {
                const int64_t iw = ow * d->sw - d->pl + kj * d->dw;
                if (iw < 0 || iw >= W) continue;
                op_dw_fma_c(acc, wt + (ki * d->kw + kj) * OC, X + ((n * H + ih) * W + iw) * C * esz,
                            C, mult, BF16);
            }
        }
        op_dw_act_store(acc, OC, act);
    }
}

static void op_dw_task(void *ctx, int64_t task, int tid)
{
    const op_dw_ctx *c = (const op_dw_ctx *)ctx;
    if (c->d->nhwc) {
        if (c->bf16) op_dw_nhwc_row(c, task, 1);
        else op_dw_nhwc_row(c, task, 0);
    } else {
        float *buf = c->scratch + (size_t)tid * (size_t)c->scratch_elems;
        if (c->bf16) op_dw_nchw_plane(c, task, buf, 1);
        else op_dw_nchw_plane(c, task, buf, 0);
    }
}

int op_conv2d_dw_f32(const op_conv_desc *d, const void *x, int x_bf16, const float *w,
                     const float *bias, float *y, int act, int nthreads)
{
    if (d->n <= 0 || d->oh <= 0 || d->ow <= 0 || d->oc <= 0) return 1;
    op_dw_ctx c;
    c.d = d;
    c.x = x;
    c.w = w;
    c.bias = bias;
    c.y = y;
    c.act = act;
    c.bf16 = x_bf16;
    c.mult = d->oc / d->c;
    c.scratch = NULL;
    c.scratch_elems = 0;
    const int64_t ntasks = d->nhwc ? d->n * d->oh : d->n * d->oc;
    const double flops = 2.0 * (double)d->n * (double)d->oc * (double)(d->oh * d->ow) *
                         (double)(d->kh * d->kw);
    int64_t T = (int64_t)(flops / 1e6) + 1;
    if (T > nthreads) T = nthreads;
    if (T > ntasks) T = ntasks;
    if (T < 1) T = 1;
    if (!d->nhwc) {
        c.hp = (d->oh - 1) * d->sh + (d->kh - 1) * d->dh + 1;
        const int64_t wp = (d->ow - 1) * d->sw + (d->kw - 1) * d->dw + 1;
        c.wq = op_cdiv64(wp, d->sw);
        c.scratch_elems = op_roundup64(c.hp * d->sw * c.wq + d->oh * c.wq, 16);  /* + grid acc */
        c.scratch = (float *)op_aligned_alloc(sizeof(float) * (size_t)(c.scratch_elems * T));
        if (!c.scratch) return -1;
    }
    const int used = op_parallel_for((int)T, ntasks, op_dw_task, &c);
    op_aligned_free(c.scratch);
    return used;
}
