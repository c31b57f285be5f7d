/* gemm_f32.c: BLIS-style GEMM driver (reusable by later pieces) and the float32 micro-kernels.

   ============================================================================================
   Reuse by later pieces (bf16 GEMM, convolution), which are included after this file
   ============================================================================================
   The driver op_gemm_drive(ops, args, blk, nthreads) runs the loops
        batch / thread block  ->  jc (NC)  ->  pc (KC)  ->  ic (MC)  ->  jr (NR)  ->  ir (MR)
   and knows nothing about element types: everything type-specific comes from an op_gemm_ops:

     typedef struct op_gemm_ops {
         int mr, nr;            register block of the micro-kernel (mr <= OP_UKR_MAX_MR)
         int k_align;           packed depth kcp = kc rounded up to this (bf16 K-pairs: 2; f32: 1)
         size_t a_elem, b_elem; bytes per packed element of A and of B
         op_pack_a_fn pack_a;   packs an mc x kc block of A into ceil(mc/mr) micro-panels
         op_pack_b_fn pack_b;   packs a kc x nc block of B into ceil(nc/nr) micro-panels
         op_ukr_fn ukr;         the micro-kernel (handles mr' <= mr, nr' <= nr edges itself)
         int direct_b;          1: when csb == 1 and m is small, the micro-kernel reads B in place
                                (row p of the tile at b + p * ldb elements, ldb = rsb); f32 only
         int64_t b_panel_ld;    ldb passed to ukr for a packed B micro-panel (f32: nr)
         op_blocking blk;       default cache blocking (mc multiple of mr, nc multiple of nr)
         int b_prepacked;       B already packed (pack_b not called)
         size_t b_scratch;      bytes of per-thread scratch after the packed B block for pack_b
         op_ukr_a_fn ukr_a;     optional micro-kernel reading a row-major A in place (full panels)
         int ukr_a_bcast;       1: ukr_a reads A by broadcasts only, so it runs at any alignment of A
         op_ukr16_fn ukr16;     optional micro-kernel writing a bfloat16 C from its registers
         int split_at_mr;       1: threads split M at multiples of mr: a tile of mr' < mr rows costs
                                a full one (AMX tiles) or sums in another order than a full one (the
                                VDPBF16PS ukr's rows <= 4), so a tail inside the matrix would cost
                                time or make the bits depend on the thread count; 0: any mr' gives
                                the same sums and costs what its rows cost (the float32 ukr), so
                                threads split M into equal row counts
         int b_next_l2;         1: the driver prefetches the next B micro-panel into L2 (no other
                                change)
         op_ukr_ap_fn ukr_a_pack; optional ukr_a that also stores the panel it reads, packed: a
                                block's first pass over B reads A in place, the others the copy
                                (aligned A rows stay in place instead: see op_gemm_block)
         int64_t kchunk;        > 0: each B micro-panel passed in depth chunks of kchunk, every row
                                panel per chunk, partial sums in a per-thread scratch (the AMX
                                "depth_chunks" variant; op_gemm_panel_chunked)
         op_out16_fn out16;     with kchunk: ukr16's write-out of a finished float tile
     } op_gemm_ops;

   Packed layouts the driver assumes (it only does pointer arithmetic with them):
     A block: micro-panel r (rows r*mr .. r*mr+mr-1) starts at byte r * mr * kcp * a_elem;
     B block: micro-panel s (cols s*nr .. s*nr+nr-1) starts at byte s * nr * kcp * b_elem.
   Inside a micro-panel the layout belongs to the pack/ukr pair (f32: A k-major a[p*mr + i],
   B b[p*nr + j]; bf16 would use A[p/2][i][2] and B[p/2][j][2] with k_align = 2, a/b_elem = 2).

   Callbacks (bi = batch entry; coordinates are absolute within that entry):
     pack_a(g, bi, i0, mc, p0, kc, kcp, dst): rows i0..i0+mc-1, depth p0..p0+kc-1; pads rows up to a
         multiple of mr and depth up to kcp with zeros. A convolution passes its own pack_a that
         gathers the implicit im2col rows from the input tensor, with its geometry in g->user.
     pack_b(g, bi, p0, kc, kcp, j0, nc, dst): same for B; pads columns to a multiple of nr.
     ukr(kcp, a_panel, b, ldb, c, rsc, csc, mr, nr, accumulate, epi): C[mr x nr] (+)= A B. C is float.
         accumulate = 0 on the first KC block (C is overwritten, old C never read), 1 afterwards;
         epi != NULL only on the last KC block: bias already offset to the tile's first row/column,
         then activation; the ukr applies it while writing C (op_tile_store does it in portable C).
   The problem is an op_gemm_args (operands as const void * + element strides + per-batch offsets,
   C float, epilogue, and a free `user` pointer for the callbacks). With args.c16 set, C is bfloat16:
   the ukr writes each finished tile (epilogue included) as float, to a per-thread scratch tile when
   one KC block holds all of K, else to a float C the driver provides, and op_tile_to_bf16 rounds it
   once into c16. The f32 instance is
   op_gemm_f32_ops; its pieces (op_pack_a_f32, op_pack_b_f32, op_ukr_f32, OP_F32_MR/NR) may be reused.
   Threads: op_gemm_drive picks the thread count (>= OP_GEMM_MIN_FLOPS_PER_THREAD flops each), gives
   each thread a disjoint block of C (batch entries, or N in multiples of nr, or M: in equal row
   counts where the ukr's time follows its rows and every mr' <= mr gives the same sums, so 1024
   float32 rows over 2 threads are 512 + 512, 36 full panels and an 8-row one each, not 37 + 36 and
   a 2-row one; else, op_gemm_ops.split_at_mr, at mr multiples)
   and one A and one B packing buffer for the whole call.
   ============================================================================================ */

#define OP_UKR_MAX_MR 16
#define OP_GEMM_MIN_FLOPS_PER_THREAD 4000000.0
#define OP_GEMM_BATCH_TASKS 8   /* tasks per thread of a batch of small entries (op_gemm_drive) */
#define OP_GEMM_DIRECT_KC 32  /* kc when B is read in place (measured best at M = 1..4, K = N = 4096) */

/* ---------------------------------------------------------------- epilogue (portable part) */

/* op_act_lanes (up to 16 values) and op_act_row (rows) are in act_f32.c, included before this
   file. */

/* Write an mr x nr tile t (row stride ldt) to C through (rsc, csc): C = t, or C += t if acc; then the
   epilogue (bias at tile origin, activation) if epi != NULL. Portable; used for edges/strided C.
   gelu / gelu_tanh / silu take the tile's values 16 at a time through op_act_lanes, gathered
   across rows (an edge of 1-15 columns: one 16-lane evaluation per 16 values, not per row), so
   every value gets the bits a full tile's vector epilogue gives it (lanes are independent). */
static void op_tile_store(const float *t, int64_t ldt, int mr, int nr, float *c, int64_t rsc,
                          int64_t csc, int acc, const op_epilogue *epi)
{
    const float *bias = epi ? epi->bias : NULL;
    const int64_t bs = epi ? epi->bias_stride : 0;
    const int axis = epi ? epi->bias_axis : 0;
    const int act = epi ? epi->act : OP_ACT_NONE;
    const int lanes = act != OP_ACT_NONE && act != OP_ACT_RELU;
    float v[16];
    float *dst[16];
    int nv = 0;
    for (int i = 0; i < mr; i++) {
        const float *tr = t + i * ldt;
        float *cr = c + i * rsc;
        const float rb = (bias && axis == 0) ? bias[i * bs] : 0.0f;
        for (int j = 0; j < nr; j++) {
            float x = tr[j];
            if (acc) x = x + cr[j * csc];
            if (bias) x = x + (axis == 0 ? rb : bias[j * bs]);
            if (!lanes) {
                if (act == OP_ACT_RELU) op_act_lanes(&x, 1, act);
                cr[j * csc] = x;
                continue;
            }
            v[nv] = x;
            dst[nv++] = cr + j * csc;
            if (nv == 16) {
                op_act_lanes(v, 16, act);
                for (int k = 0; k < 16; k++) *dst[k] = v[k];
                nv = 0;
            }
        }
    }
    if (nv) {
        op_act_lanes(v, nv, act);
        for (int k = 0; k < nv; k++) *dst[k] = v[k];
    }
}

/* Round a finished float tile t (strides rst, cst) once to the bfloat16 C tile c (cvt_bf16.c). */
static void op_tile_to_bf16(const float *t, int64_t rst, int64_t cst, int mr, int nr, uint16_t *c,
                            int64_t rsc, int64_t csc)
{
#if defined(OP_HAS_AVX512) && defined(__AVX512BF16__)
    /* 32-column rows: one VCVTNE2PS2BF16 per row unless a lane is NaN or subnormal
       (op_bf16_special32), else op_cvt_f32_to_bf16_run: the same bits, without a call per row
       (the rounding was ~20% of the AMX ResNet-50 NHWC 1x1 convolution with 64 input channels,
       perf) */
    if (cst == 1 && csc == 1 && nr == 32) {
        for (int i = 0; i < mr; i++) {
            const float *tr = t + i * rst;
            const __m512 x0 = _mm512_loadu_ps(tr), x1 = _mm512_loadu_ps(tr + 16);
            if (OP_LIKELY(!op_bf16_special32(x0, x1)))
                _mm512_storeu_si512((void *)(c + i * rsc), (__m512i)_mm512_cvtne2ps_pbh(x1, x0));
            else
                op_cvt_f32_to_bf16_run(32, tr, c + i * rsc);
        }
        return;
    }
#endif
    for (int i = 0; i < mr; i++) {
        const float *tr = t + i * rst;
        uint16_t *cr = c + i * rsc;
        if (cst == 1 && csc == 1)
            op_cvt_f32_to_bf16_run(nr, tr, cr);
        else
            for (int j = 0; j < nr; j++) cr[j * csc] = op_f32_to_bf16_1(tr[j * cst]);
    }
}

/* ---------------------------------------------------------------- driver interface */

typedef struct op_gemm_args {
    int64_t batch, m, n, k;
    const void *a; const int64_t *a_off; int64_t rsa, csa;
    const void *b; const int64_t *b_off; int64_t rsb, csb;
    float *c; const int64_t *c_off; int64_t rsc, csc;
    /* bfloat16 C (NULL: C is the float c above). Each finished tile (last KC block, after the
       epilogue) is rounded once into c16; while K spans several KC blocks the float partial sums
       live in c if given, else in a scratch the driver allocates; when one KC block holds all of
       K, c is not used at all (each tile goes through a per-thread float tile). */
    uint16_t *c16; const int64_t *c16_off; int64_t rsc16, csc16;
    const op_epilogue *epi;     /* NULL: none */
    const void *user;           /* free for pack callbacks (e.g. convolution geometry) */
    int b_direct;               /* 1: the micro-kernel reads B in place (csb == 1, ops->direct_b)
                                   whatever m, with the blocking's own kc (same sums as packed B) */
    /* C of several images side by side along N (c_cols > 0; float C, csc 1, c16 NULL): column j
       is column j % c_cols of image j / c_cols, whose C starts c_img floats after the previous
       image's (the NCHW 1x1 convolution over all images' pixels, conv_f32.c). A tile spanning two images runs
       on the thread's tile buffer, copied in from and out to its pieces. 0: C is one matrix. */
    int64_t c_cols, c_img;
    int split_n;                /* 1: threads within a batch entry split N only (each packs its own
                                   columns of B and all of A: a B pack that costs more than A's) */
    int kc_even;                /* 1 (matmul / linear: op_gemm_f32, op_gemm_packed float32): the
                                   AVX2 driver may even out the KC blocks (op_gemm_drive); 0 (the
                                   convolutions, whose routes give the same bits as each other) */
} op_gemm_args;

typedef void (*op_pack_a_fn)(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc,
                             int64_t p0, int64_t kc, int64_t kcp, void *dst);
typedef void (*op_pack_b_fn)(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc,
                             int64_t kcp, int64_t j0, int64_t nc, void *dst);
typedef void (*op_ukr_fn)(int64_t kcp, const void *a, const void *b, int64_t ldb, float *c,
                          int64_t rsc, int64_t csc, int mr, int nr, int accumulate,
                          const op_epilogue *epi);
/* A micro-kernel reading A in place: a = &A[i][p0] of a row-major A (csa == 1), rows lda apart. */
typedef void (*op_ukr_a_fn)(int64_t kcp, const void *a, int64_t lda, const void *b, float *c,
                            int64_t rsc, int64_t csc, int mr, int nr, int accumulate,
                            const op_epilogue *epi);

/* An op_ukr_a_fn that also stores the A it reads at dst, in pack_a's layout for one full mr-row
   micro-panel (op_gemm_ops.ukr_a_pack) */
typedef void (*op_ukr_ap_fn)(int64_t kcp, const void *a, int64_t lda, void *dst, const void *b,
                             float *c, int64_t rsc, int64_t csc, int mr, int nr, int accumulate,
                             const op_epilogue *epi);

/* A micro-kernel writing the finished tile (acc 0, epilogue applied) straight to a row-contiguous
   bfloat16 C (rows rsc16 apart), rounded once as op_tile_to_bf16 rounds (op_gemm_ops.ukr16). */
typedef void (*op_ukr16_fn)(int64_t kcp, const void *a, const void *b, int64_t ldb, uint16_t *c16,
                            int64_t rsc16, int mr, int nr, const op_epilogue *epi);

/* Rounds a finished float tile t (rows ldt = nr apart) into a bfloat16 C after the epilogue, as the
   ops' ukr16 does after its depth loop (op_gemm_ops.out16). */
typedef void (*op_out16_fn)(const float *t, int mr, int nr, const op_epilogue *epi, uint16_t *c16,
                            int64_t rsc16);

/* A tile of C with images side by side (op_gemm_args.c_cols): t[i * ldt + j] to (out = 1) or from
   (out = 0) C rows i0 .., columns j0 .., piece by piece per image. */
static void op_tile_cols_io(float *t, int64_t ldt, float *C, const op_gemm_args *g, int64_t i0,
                            int64_t j0, int mr, int nr, int out)
{
    for (int jj = 0; jj < nr;) {
        const int64_t j = j0 + jj, im = j / g->c_cols, jc = j % g->c_cols;
        const int len = (int)op_min64(nr - jj, g->c_cols - jc);
        for (int i = 0; i < mr; i++) {
            float *cp = C + im * g->c_img + (i0 + i) * g->rsc + jc;   /* (csc is 1 with c_cols) */
            float *tp = t + i * ldt + jj;
            memcpy(out ? cp : tp, out ? tp : cp, sizeof(float) * (size_t)len);
        }
        jj += len;
    }
}

typedef struct op_gemm_ops {
    int mr, nr;
    int k_align;
    size_t a_elem, b_elem;
    op_pack_a_fn pack_a;
    op_pack_b_fn pack_b;
    op_ukr_fn ukr;
    int direct_b;
    int64_t b_panel_ld;
    op_blocking blk;
    int b_prepacked;   /* 1: g->b already holds ceil(n/nr) packed micro-panels of depth g->rsb (k rounded
                          up to k_align), panel s at element s*nr*rsb; pack_b is not called (prepack) */
    size_t b_scratch;  /* bytes of scratch pack_b may use right after its block (at dst + the block's
                          ceil(nc/nr)*nr*kcp elements, 64-byte aligned), per thread */
    op_ukr_a_fn ukr_a; /* non-NULL: used instead of pack_a + ukr for the full mr-row panels when A is
                          row-major (csa == 1) and the KC block needs no depth padding (kcp == kc) */
    int ukr_a_bcast;   /* 1: ukr_a reads A only by scalar (or K-pair) broadcasts, never a split vector
                          load, so it runs at any alignment of A (the conv kernels' ukr_a) */
    op_ukr16_fn ukr16; /* optional: ukr for a bfloat16 C with column stride 1 when one KC block holds
                          all of K (no float tile, no separate rounding pass); same packed A and B */
    int split_at_mr;   /* 1: threads split M at mr multiples (see the top of this file) */
    int b_next_l2;     /* 1: while the micro-kernel passes over one B micro-panel, the driver fetches
                          the next one into L2, a slice per call (see op_gemm_block) */
    op_ukr_ap_fn ukr_a_pack;   /* optional, with ukr_a: reads A in place on a block's first pass
                                  over its B panels and leaves it packed for the others (unless
                                  A's rows are aligned and stay in place: see op_gemm_block) */
    int64_t kchunk;    /* > 0: a KC block deeper than this that holds all of K passes each B
                          micro-panel in depth chunks of kchunk (a multiple of k_align), every row
                          panel of the block per chunk, the float partial sums in a per-thread
                          scratch (see op_gemm_panel_chunked); the packed panels' depth p then
                          starts at element p * mr (A) and p * nr (B) */
    op_out16_fn out16; /* optional, with kchunk: writes a chunked pass's finished float tile (rows
                          nr apart) into a bfloat16 C, epilogue then rounding, as ukr16 would
                          (else: the ukr's epilogue and op_tile_to_bf16) */
} op_gemm_ops;

/* ---------------------------------------------------------------- f32 micro-kernels */

#if defined(OP_HAS_AVX512)
/* 14 x 32: 28 zmm accumulators + 2 B vectors + 1 broadcast of A. Per k: 2 loads of B, 14 broadcasts,
   28 FMAs (14 cycles on 2 FMA ports). */
#define OP_F32_MR 14
#define OP_F32_NR 32
#define OP_F32_KERNEL_NAME "gemm_f32_avx512_core_14x32"
#define OP_F32_MC 168
#define OP_F32_KC 256
#define OP_F32_NC 3072

OP_INLINE void op_avx512_row_out(float *cr, __m512 x0, __m512 x1, int full, __mmask16 k0,
                                 __mmask16 k1, int acc, int bias, __m512 q0, __m512 q1, int relu)
{
    if (full) {
        if (acc) {
            x0 = _mm512_add_ps(x0, _mm512_loadu_ps(cr));
            x1 = _mm512_add_ps(x1, _mm512_loadu_ps(cr + 16));
        }
    } else if (acc) {
        x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(k0, cr));
        x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(k1, cr + 16));
    }
    if (bias) {
        x0 = _mm512_add_ps(x0, q0);
        x1 = _mm512_add_ps(x1, q1);
    }
    if (relu) {  /* max(0, x): vmaxps returns the second operand (x) when x is NaN */
        x0 = _mm512_max_ps(_mm512_setzero_ps(), x0);
        x1 = _mm512_max_ps(_mm512_setzero_ps(), x1);
    }
    if (full) {
        _mm512_storeu_ps(cr, x0);
        _mm512_storeu_ps(cr + 16, x1);
    } else {
        _mm512_mask_storeu_ps(cr, k0, x0);
        _mm512_mask_storeu_ps(cr + 16, k1, x1);
    }
}

/* The epilogue of a row-contiguous 32-column AVX-512 write-out, prepared once per tile: the masks
   of the nr valid columns, a per-column bias as two vectors or a per-row bias pointer, and the
   activation (all in registers before the store). Shared with the bf16 kernels. */
typedef struct {
    __mmask16 k0, k1;
    int full, bias, relu, slow_act;
    const float *rowb;      /* bias along rows (axis 0), else NULL */
    int64_t rbs;
    __m512 q0, q1;          /* bias along columns (axis 1) */
} op_epi512;

OP_INLINE void op_epi512_init(op_epi512 *e, int nr, const op_epilogue *epi)
{
    e->full = nr == 32;
    e->k0 = nr >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << nr) - 1u);
    e->k1 = nr >= 32 ? (__mmask16)0xFFFF : nr <= 16 ? (__mmask16)0 : (__mmask16)((1u << (nr - 16)) - 1u);
    e->bias = e->relu = 0;
    e->slow_act = OP_ACT_NONE;
    e->rowb = NULL;
    e->rbs = 0;
    e->q0 = e->q1 = _mm512_setzero_ps();
    if (!epi) return;
    if (epi->bias) {
        e->bias = 1;
        if (epi->bias_axis == 0) {
            e->rowb = epi->bias;
            e->rbs = epi->bias_stride;
        } else if (epi->bias_stride == 1) {
            e->q0 = _mm512_maskz_loadu_ps(e->k0, epi->bias);
            e->q1 = _mm512_maskz_loadu_ps(e->k1, epi->bias + 16);
        } else {
            float tb[32] OP_ALIGNED(64) = {0};
            for (int j = 0; j < nr; j++) tb[j] = epi->bias[j * epi->bias_stride];
            e->q0 = _mm512_load_ps(tb);
            e->q1 = _mm512_load_ps(tb + 16);
        }
    }
    if (epi->act == OP_ACT_RELU) e->relu = 1;
    else if (epi->act != OP_ACT_NONE) e->slow_act = epi->act;
}

/* Row i of the tile (two vectors) to C row cr with the prepared epilogue. */
OP_INLINE void op_epi512_row(const op_epi512 *e, float *cr, int i, __m512 x0, __m512 x1, int nr, int acc)
{
    __m512 r0 = e->q0, r1 = e->q1;
    if (e->rowb) r0 = r1 = _mm512_set1_ps(e->rowb[i * e->rbs]);
    if (e->slow_act) {  /* the activation in registers, before the one store (lanes past nr are masked) */
        if (acc) {
            x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(e->k0, cr));
            x1 = _mm512_add_ps(x1, _mm512_maskz_loadu_ps(e->k1, cr + 16));
        }
        if (e->bias) {
            x0 = _mm512_add_ps(x0, r0);
            x1 = _mm512_add_ps(x1, r1);
        }
        x0 = (__m512)op_v16_act((op_v16f)x0, e->slow_act);
        x1 = (__m512)op_v16_act((op_v16f)x1, e->slow_act);
        op_avx512_row_out(cr, x0, x1, e->full, e->k0, e->k1, 0, 0, r0, r1, 0);
        return;
    }
    (void)nr;
    op_avx512_row_out(cr, x0, x1, e->full, e->k0, e->k1, acc, e->bias, r0, r1, e->relu);
}

OP_INLINE void op_ukr_avx512_body(const int MRV, int64_t kc, const float *OP_RESTRICT a,
                                  const float *OP_RESTRICT b, int64_t ldb, float *c, int64_t rsc,
                                  int64_t csc, int nr, int acc, const op_epilogue *epi)
{
    __m512 c0_0 = _mm512_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0, c6_0 = c0_0, c6_1 = c0_0, c7_0 = c0_0, c7_1 = c0_0, c8_0 = c0_0,
           c8_1 = c0_0, c9_0 = c0_0, c9_1 = c0_0, c10_0 = c0_0, c10_1 = c0_0, c11_0 = c0_0,
           c11_1 = c0_0, c12_0 = c0_0, c12_1 = c0_0, c13_0 = c0_0, c13_1 = c0_0;
    /* C is read/written only after the k loop: fetch its lines now so the write-out does not stall
       on L3/DRAM misses (C of a large GEMM does not stay in L2 between KC blocks). */
    if (csc == 1)
        for (int i = 0; i < MRV; i++) {
            _mm_prefetch((const char *)(c + i * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 16), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 31), _MM_HINT_T0);
        }
#define OP_R(i)                                                          \
    if (MRV > i) {                                                       \
        __m512 ai = _mm512_set1_ps(a[i]);                                \
        c##i##_0 = _mm512_fmadd_ps(ai, b0, c##i##_0);                    \
        c##i##_1 = _mm512_fmadd_ps(ai, b1, c##i##_1);                    \
    }
#define OP_RALL OP_R(0) OP_R(1) OP_R(2) OP_R(3) OP_R(4) OP_R(5) OP_R(6) \
                OP_R(7) OP_R(8) OP_R(9) OP_R(10) OP_R(11) OP_R(12) OP_R(13)
#define OP_R1(i)                                                         \
    if (MRV > i) c##i##_0 = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), b0, c##i##_0);
    if (ldb == OP_F32_NR && nr <= 16) {  /* a column tail of <= 16 (a 14 x 14 plane's 196 = 6 x 32 + 4
                                            pixels): the first vector only, half the FMAs */
        for (int64_t p = 0; p < kc; p++) {
            __m512 b0 = _mm512_loadu_ps(b);
            OP_R1(0) OP_R1(1) OP_R1(2) OP_R1(3) OP_R1(4) OP_R1(5) OP_R1(6)
            OP_R1(7) OP_R1(8) OP_R1(9) OP_R1(10) OP_R1(11) OP_R1(12) OP_R1(13)
            a += OP_F32_MR;
            b += ldb;
        }
    } else if (ldb == OP_F32_NR) {  /* packed B micro-panel: one sequential stream */
        /* 4 k steps per loop iteration (the same operations in the same order): the loop's own
           counter, pointer and branch uops once per 112 FMAs instead of per 28. sapphirerapids (the
           Intel AMX VM, 2026-12-04, paired with numpy/OpenBLAS in one process, x numpy before ->
           after): 1 thread 1024^3 0.97 -> 1.00, 2048^3 0.94 -> 0.97; 2 threads 0.97 -> 1.01 and
           0.94 -> 0.97. 8 steps measured the same; a software prefetch of A, nothing. */
#pragma GCC unroll 4
        for (int64_t p = 0; p < kc; p++) {
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            OP_RALL
            a += OP_F32_MR;
            b += ldb;
        }
    } else {
        /* B read in place (small M): kc rows far apart, which no hardware prefetcher follows;
           prefetch the same rows of the next NR columns, which the next call (jr + NR) reads. */
        for (int64_t p = 0; p < kc; p++) {
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
            _mm_prefetch((const char *)(b + 32), _MM_HINT_T1);
            _mm_prefetch((const char *)(b + 48), _MM_HINT_T1);
            OP_RALL
            a += OP_F32_MR;
            b += ldb;
        }
    }
#undef OP_RALL
#undef OP_R1
#undef OP_R
    if (OP_LIKELY(csc == 1)) {
        op_epi512 e;
        op_epi512_init(&e, nr, epi);
#define OP_W(i) \
    if (MRV > i) op_epi512_row(&e, c + i * rsc, i, c##i##_0, c##i##_1, nr, acc);
        OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5) OP_W(6)
        OP_W(7) OP_W(8) OP_W(9) OP_W(10) OP_W(11) OP_W(12) OP_W(13)
#undef OP_W
    } else {
        float t[OP_F32_MR * 32] OP_ALIGNED(64);
        OP_TILE14_STORE(t, MRV);
        op_tile_store(t, 32, MRV, nr, c, rsc, csc, acc, epi);
    }
}

#define OP_UKR_INST(MRV)                                                                    \
    static OP_NOINLINE void op_ukr_f32_m##MRV(int64_t kc, const float *a, const float *b,   \
                                              int64_t ldb, float *c, int64_t rsc,           \
                                              int64_t csc, int nr, int acc,                 \
                                              const op_epilogue *epi)                       \
    {                                                                                       \
        op_ukr_avx512_body(MRV, kc, a, b, ldb, c, rsc, csc, nr, acc, epi);                  \
    }

#elif defined(OP_HAS_AVX2)
/* 6 x 16: 12 ymm accumulators + 2 B vectors + 1 broadcast. */
#define OP_F32_MR 6
#define OP_F32_NR 16
#define OP_F32_KERNEL_NAME "gemm_f32_avx2_6x16"
#define OP_F32_MC 144
#define OP_F32_KC 256
#define OP_F32_NC 3072

OP_INLINE void op_ukr_avx2_body(const int MRV, int64_t kc, const float *OP_RESTRICT a,
                                const float *OP_RESTRICT b, int64_t ldb, float *c, int64_t rsc,
                                int64_t csc, int nr, int acc, const op_epilogue *epi)
{
    __m256 c0_0 = _mm256_setzero_ps(), c0_1 = c0_0, c1_0 = c0_0, c1_1 = c0_0, c2_0 = c0_0,
           c2_1 = c0_0, c3_0 = c0_0, c3_1 = c0_0, c4_0 = c0_0, c4_1 = c0_0, c5_0 = c0_0,
           c5_1 = c0_0;
    if (csc == 1)  /* see the avx512 kernel */
        for (int i = 0; i < MRV; i++) {
            _mm_prefetch((const char *)(c + i * rsc), _MM_HINT_T0);
            _mm_prefetch((const char *)(c + i * rsc + 15), _MM_HINT_T0);
        }
#define OP_R(i)                                                          \
    if (MRV > i) {                                                       \
        __m256 ai = _mm256_broadcast_ss(a + i);                          \
        c##i##_0 = _mm256_fmadd_ps(ai, b0, c##i##_0);                    \
        c##i##_1 = _mm256_fmadd_ps(ai, b1, c##i##_1);                    \
    }
    if (ldb == OP_F32_NR) {
        /* four depths per loop pass: zen3 (2026-12-06, 1 thread, builds alternated in one process
           with numpy) 512^3 / 1024^3 / 2048^3 / 1344 x 1536 x 384 +1.4-1.6 / 1.8-2.1 / 1.1-3.0 /
           3.4-9.0% (8 as 4, 2 less; a prefetch of A or B in the loop: no gain) */
#pragma GCC unroll 4
        for (int64_t p = 0; p < kc; p++) {
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            OP_R(0) OP_R(1) OP_R(2) OP_R(3) OP_R(4) OP_R(5)
            a += OP_F32_MR;
            b += ldb;
        }
    } else {  /* B in place: prefetch the next NR columns of the same rows (see avx512) */
        for (int64_t p = 0; p < kc; p++) {
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
            _mm_prefetch((const char *)(b + 16), _MM_HINT_T1);
            OP_R(0) OP_R(1) OP_R(2) OP_R(3) OP_R(4) OP_R(5)
            a += OP_F32_MR;
            b += ldb;
        }
    }
#undef OP_R
    if (OP_LIKELY(csc == 1 && nr == 16)) {
        int bias = 0, relu = 0, slow_act = OP_ACT_NONE;
        const float *rowb = NULL;
        int64_t rbs = 0;
        __m256 q0 = _mm256_setzero_ps(), q1 = q0;
        if (epi) {
            if (epi->bias) {
                bias = 1;
                if (epi->bias_axis == 0) {
                    rowb = epi->bias;
                    rbs = epi->bias_stride;
                } else {
                    float tb[16] OP_ALIGNED(32);
                    for (int j = 0; j < 16; j++) tb[j] = epi->bias[j * epi->bias_stride];
                    q0 = _mm256_load_ps(tb);
                    q1 = _mm256_load_ps(tb + 8);
                }
            }
            if (epi->act == OP_ACT_RELU) relu = 1;
            else if (epi->act != OP_ACT_NONE) slow_act = epi->act;
        }
#define OP_W(i)                                                                  \
    if (MRV > i) {                                                               \
        float *cr = c + i * rsc;                                                 \
        __m256 x0 = c##i##_0, x1 = c##i##_1;                                     \
        if (acc) {                                                               \
            x0 = _mm256_add_ps(x0, _mm256_loadu_ps(cr));                         \
            x1 = _mm256_add_ps(x1, _mm256_loadu_ps(cr + 8));                     \
        }                                                                        \
        if (bias) {                                                              \
            __m256 r0 = q0, r1 = q1;                                             \
            if (rowb) r0 = r1 = _mm256_set1_ps(rowb[i * rbs]);                   \
            x0 = _mm256_add_ps(x0, r0);                                          \
            x1 = _mm256_add_ps(x1, r1);                                          \
        }                                                                        \
        if (relu) {                                                              \
            x0 = _mm256_max_ps(_mm256_setzero_ps(), x0);                         \
            x1 = _mm256_max_ps(_mm256_setzero_ps(), x1);                         \
        }                                                                        \
        _mm256_storeu_ps(cr, x0);                                                \
        _mm256_storeu_ps(cr + 8, x1);                                            \
    }
        OP_W(0) OP_W(1) OP_W(2) OP_W(3) OP_W(4) OP_W(5)
#undef OP_W
        if (slow_act) op_act_rows16(c, rsc, MRV, slow_act);   /* (act_f32.c) */
    } else {
        float t[OP_F32_MR * 16] OP_ALIGNED(32);
#define OP_T(i)                                         \
    if (MRV > i) {                                      \
        _mm256_store_ps(t + i * 16, c##i##_0);          \
        _mm256_store_ps(t + i * 16 + 8, c##i##_1);      \
    }
        OP_T(0) OP_T(1) OP_T(2) OP_T(3) OP_T(4) OP_T(5)
#undef OP_T
        op_tile_store(t, 16, MRV, nr, c, rsc, csc, acc, epi);
    }
}

#define OP_UKR_INST(MRV)                                                                    \
    static OP_NOINLINE void op_ukr_f32_m##MRV(int64_t kc, const float *a, const float *b,   \
                                              int64_t ldb, float *c, int64_t rsc,           \
                                              int64_t csc, int nr, int acc,                 \
                                              const op_epilogue *epi)                       \
    {                                                                                       \
        op_ukr_avx2_body(MRV, kc, a, b, ldb, c, rsc, csc, nr, acc, epi);                    \
    }

#else
/* Portable C (GCC/Clang vector extensions, lowered to SSE2 on baseline x86-64): 4 x 8,
   8 xmm accumulators. */
#define OP_F32_MR 4
#define OP_F32_NR 8
#define OP_F32_KERNEL_NAME "gemm_f32_generic_4x8"
#define OP_F32_MC 128
#define OP_F32_KC 256
#define OP_F32_NC 2048

typedef float op_v4f __attribute__((vector_size(16)));

OP_INLINE op_v4f op_v4_load(const float *p)
{
    op_v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

OP_INLINE void op_ukr_generic_body(const int MRV, int64_t kc, const float *OP_RESTRICT a,
                                   const float *OP_RESTRICT b, int64_t ldb, float *c,
                                   int64_t rsc, int64_t csc, int nr, int acc,
                                   const op_epilogue *epi)
{
    const op_v4f z = {0.0f, 0.0f, 0.0f, 0.0f};
    op_v4f c0_0 = z, c0_1 = z, c1_0 = z, c1_1 = z, c2_0 = z, c2_1 = z, c3_0 = z, c3_1 = z;
#define OP_R(i)                                                          \
    if (MRV > i) {                                                       \
        const float s = a[i];                                            \
        const op_v4f ai = {s, s, s, s};                                  \
        c##i##_0 += ai * b0;                                             \
        c##i##_1 += ai * b1;                                             \
    }
    for (int64_t p = 0; p < kc; p++) {
        const op_v4f b0 = op_v4_load(b), b1 = op_v4_load(b + 4);
        OP_R(0) OP_R(1) OP_R(2) OP_R(3)
        a += OP_F32_MR;
        b += ldb;
    }
#undef OP_R
    float t[OP_F32_MR * 8] OP_ALIGNED(16);
#define OP_T(i)                                          \
    if (MRV > i) {                                       \
        memcpy(t + i * 8, &c##i##_0, sizeof(op_v4f));    \
        memcpy(t + i * 8 + 4, &c##i##_1, sizeof(op_v4f)); \
    }
    OP_T(0) OP_T(1) OP_T(2) OP_T(3)
#undef OP_T
    if (csc == 1 && nr == 8 && !epi) {
        for (int i = 0; i < MRV; i++) {
            float *cr = c + i * rsc;
            if (acc)
                for (int j = 0; j < 8; j++) cr[j] = t[i * 8 + j] + cr[j];
            else
                for (int j = 0; j < 8; j++) cr[j] = t[i * 8 + j];
        }
    } else {
        op_tile_store(t, 8, MRV, nr, c, rsc, csc, acc, epi);
    }
}

#define OP_UKR_INST(MRV)                                                                    \
    static OP_NOINLINE void op_ukr_f32_m##MRV(int64_t kc, const float *a, const float *b,   \
                                              int64_t ldb, float *c, int64_t rsc,           \
                                              int64_t csc, int nr, int acc,                 \
                                              const op_epilogue *epi)                       \
    {                                                                                       \
        op_ukr_generic_body(MRV, kc, a, b, ldb, c, rsc, csc, nr, acc, epi);                 \
    }
#endif

/* One specialisation per row count 1..MR, so M edges and small M (decode) run only useful FMAs. */
OP_UKR_INST(1) OP_UKR_INST(2) OP_UKR_INST(3) OP_UKR_INST(4)
#if OP_F32_MR > 4
OP_UKR_INST(5) OP_UKR_INST(6)
#endif
#if OP_F32_MR > 6
OP_UKR_INST(7) OP_UKR_INST(8) OP_UKR_INST(9) OP_UKR_INST(10) OP_UKR_INST(11) OP_UKR_INST(12)
OP_UKR_INST(13) OP_UKR_INST(14)
#endif
#undef OP_UKR_INST

typedef void (*op_ukr_f32_row_fn)(int64_t, const float *, const float *, int64_t, float *, int64_t,
                                  int64_t, int, int, const op_epilogue *);

static const op_ukr_f32_row_fn op_ukr_f32_table[OP_F32_MR] = {
    op_ukr_f32_m1, op_ukr_f32_m2, op_ukr_f32_m3, op_ukr_f32_m4,
#if OP_F32_MR > 4
    op_ukr_f32_m5, op_ukr_f32_m6,
#endif
#if OP_F32_MR > 6
    op_ukr_f32_m7, op_ukr_f32_m8, op_ukr_f32_m9, op_ukr_f32_m10, op_ukr_f32_m11, op_ukr_f32_m12,
    op_ukr_f32_m13, op_ukr_f32_m14,
#endif
};

/* The level's f32 micro-kernel (op_ukr_fn): a = packed A micro-panel a[p*OP_F32_MR + i],
   b = B rows of OP_F32_NR floats at b + p*ldb (a packed panel: ldb = OP_F32_NR). */
static void op_ukr_f32(int64_t kc, const void *a, const void *b, int64_t ldb, float *c,
                       int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    op_ukr_f32_table[mr - 1](kc, (const float *)a, (const float *)b, ldb, c, rsc, csc, nr, acc, epi);
}

/* ---------------------------------------------------------------- f32 packing */

/* The packs of a transposed B (B = W^T, rsb == 1: each column a contiguous row of W, often a power
   of two bytes apart) read 16 rows of W at a time, 64 bytes each (AVX2: 8 rows, 32 bytes), and
   transpose them in registers; each row is prefetched into L2 this many elements ahead (256: 512
   bytes of bfloat16, 1 KiB of float32). Without it the transposes wait on every load: Zen 4 (EPYC
   VM, 1 thread, W 4096 x 4096 packed through op_pack_b in blocks of 128 rows, old and new build in
   alternate processes, 2026-12-02), bfloat16 k32 panels (2048 deep) 6.4-6.5 -> 9.3-10.9 GB/s (with
   the 16-row halves of op_pack_b_k32), float32 panels (512 deep) 7.6-7.9 -> 8.9-9.6 GB/s. The
   transposes alone run ~26 GB/s from L2, a plain read of W ~21 GB/s from memory. */
#define OP_PACK_WT_PF 256

#if defined(OP_HAS_AVX512)
/* In-register transpose of a 16 x 16 matrix of dwords (r[i] = row i): four stages of 2 x 2 block
   swaps, block size s = 8, 4, 2, 1: rows i and i + s ((i & s) == 0) exchange their off-diagonal
   s-lane blocks, new r[i] = permute(r[i], r[i+s]) by op_tr16_idx[stage][0], new r[i+s] by [1]:
   lane l takes (l & s) ? lane l - s of r[i+s] : lane l of r[i] (row i), and (l & s) ? lane l of
   r[i+s] : lane l + s of r[i] (row i + s); indices >= 16 select the second operand. */
static const int32_t op_tr16_idx[4][2][16] OP_ALIGNED(64) = {
    {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
     {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}},
    {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
     {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
     {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
    {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
     {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
};

OP_INLINE void op_transpose16_epi32(__m512i r[16])
{
    /* fully unrolled, so that r[] lives in registers */
#pragma GCC unroll 4
    for (int st = 0; st < 4; st++) {
        const int s = 8 >> st;
        const __m512i ilo = _mm512_load_si512((const void *)op_tr16_idx[st][0]);
        const __m512i ihi = _mm512_load_si512((const void *)op_tr16_idx[st][1]);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (i & s) continue;
            const __m512i a = r[i], b = r[i + s];
            r[i] = _mm512_permutex2var_epi32(a, ilo, b);
            r[i + s] = _mm512_permutex2var_epi32(a, ihi, b);
        }
    }
}
#endif

#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
static const int32_t op_mask8_src[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
/* lanes [0, n) set, n in 0..8, for VMASKMOVPS (slow on AMD: whole vectors take plain loads) */
OP_INLINE __m256i op_mask8(int n)
{
    return _mm256_loadu_si256((const __m256i *)(op_mask8_src + 8 - n));
}

/* r[i] lane j -> r[j] lane i (8 x 8 floats) */
OP_INLINE void op_transpose8_ps(__m256 *r)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
#endif

#if defined(OP_HAS_AVX512)
/* Rows r[0..15] (16 floats each: depth chunk of 16 of one matrix row / column) transposed and stored
   as depth rows: d[t * ld + lane] for t < nt, lanes in `lanes` (the rows that exist, lanes < ld).
   Rows are stored whole in increasing t: the lanes past ld of row t land in row t + 1, which is
   stored next; only the last row is masked. */
OP_INLINE void op_tr16_store_f32(__m512i r[16], float *d, int64_t ld, int nt, __mmask16 lanes)
{
    op_transpose16_epi32(r);
#pragma GCC unroll 16
    for (int t = 0; t < nt - 1; t++) _mm512_storeu_ps(d + t * ld, _mm512_castsi512_ps(r[t]));
    if (nt > 0) _mm512_mask_storeu_ps(d + (nt - 1) * ld, lanes, _mm512_castsi512_ps(r[nt - 1]));
}
#endif
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
/* Rows r[0..7] of 8 floats (depths) -> for depth t < nt, the first 6 rows' elements at d + 6 t
   (the MR 6 packed A layout: a 4-float and a 2-float store per depth; op_pack_a_f32 and
   conv_f32.c's op_conv_pack_a_nhwc_qf32). */
OP_INLINE void op_tr8x6_store_f32(const __m256 *r, float *d, int nt)
{
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    /* rows 0-3 of depths 0, 1 (t0 t2 low pairs), 2, 3 (high pairs); the same for t1 t3 */
    const __m256 a0 = _mm256_shuffle_ps(t0, t2, 0x44), a1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 a2 = _mm256_shuffle_ps(t1, t3, 0x44), a3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    /* depth 4 h + u: rows 0-3 in half h of a_u, rows 4-5 in half h of t4 (u 0, 1) or t5 (u 2,
       3), the low pair for even u; all in registers (through a stack buffer it cost 20% of the
       layer: the 128- and 64-bit reloads of the 256-bit stores) */
    const __m128 lo[4][2] = {{_mm256_castps256_ps128(a0), _mm256_extractf128_ps(a0, 1)},
                             {_mm256_castps256_ps128(a1), _mm256_extractf128_ps(a1, 1)},
                             {_mm256_castps256_ps128(a2), _mm256_extractf128_ps(a2, 1)},
                             {_mm256_castps256_ps128(a3), _mm256_extractf128_ps(a3, 1)}};
    const __m128 hi[2][2] = {{_mm256_castps256_ps128(t4), _mm256_extractf128_ps(t4, 1)},
                             {_mm256_castps256_ps128(t5), _mm256_extractf128_ps(t5, 1)}};
#define OP_TR_DEPTH(t)                                                                  \
    do {                                                                                \
        const int u_ = (t) & 3, h_ = (t) >> 2;                                          \
        _mm_storeu_ps(d + 6 * (t), lo[u_][h_]);                                         \
        if (u_ & 1) _mm_storeh_pi((__m64 *)(void *)(d + 6 * (t) + 4), hi[u_ >> 1][h_]); \
        else _mm_storel_pi((__m64 *)(void *)(d + 6 * (t) + 4), hi[u_ >> 1][h_]);        \
    } while (0)
    if (nt == 8) {
        OP_TR_DEPTH(0); OP_TR_DEPTH(1); OP_TR_DEPTH(2); OP_TR_DEPTH(3);
        OP_TR_DEPTH(4); OP_TR_DEPTH(5); OP_TR_DEPTH(6); OP_TR_DEPTH(7);
    } else {
        for (int t = 0; t < nt; t++) OP_TR_DEPTH(t);
    }
#undef OP_TR_DEPTH
}
#endif
/* A block rows i0.., depth p0.. -> micro-panels of OP_F32_MR rows, k-major (d[p*MR + i]). */
static void op_pack_a_f32(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                          int64_t kc, int64_t kcp, void *dst)
{
    enum { MR = OP_F32_MR };
    const float *A = (const float *)g->a + (g->a_off ? g->a_off[bi] : 0);
    const int64_t rsa = g->rsa, csa = g->csa;
    float *d = (float *)dst;
    for (int64_t ir = 0; ir < mc; ir += MR, d += MR * kcp) {
        const int mr = (int)op_min64(MR, mc - ir);
        const float *src = A + (i0 + ir) * rsa + p0 * csa;
#if defined(OP_HAS_AVX512)
        if (csa == 1) {
            /* rows contiguous in depth: 16 x 16 transposes (rows >= mr zero) */
            __m512i r[16];
            for (int64_t pc = 0; pc < kc; pc += 16) {
                const int nt = (int)op_min64(16, kc - pc);
                const __mmask16 km = (__mmask16)((1u << nt) - 1u);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    r[i] = i < mr ? _mm512_castps_si512(_mm512_maskz_loadu_ps(km, src + i * rsa + pc))
                                  : _mm512_setzero_si512();
                op_tr16_store_f32(r, d + pc * MR, MR, nt, (__mmask16)((1u << MR) - 1u));
            }
        } else
#endif
        if (csa == 1 && mr == MR) {
            const float *r[MR];
            for (int i = 0; i < MR; i++) r[i] = src + i * rsa;
            int64_t p = 0;
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
            /* 8 depths of the 6 rows at a time, transposed in registers: the element loop was
               23% of ResNet-50's res5 3x3 layer (NCHW, batch 1: a 9 MiB weight packed per
               call; perf, AMD EPYC Zen 3 VM, avx2, 1 thread, 2026-12-06) */
            for (; p + 8 <= kc; p += 8) {
                __m256 v[8];
                for (int i = 0; i < MR; i++) v[i] = _mm256_loadu_ps(r[i] + p);
                v[6] = v[7] = _mm256_setzero_ps();
                op_tr8x6_store_f32(v, d + p * MR, 8);
            }
#endif
            for (; p < kc; p++)
                for (int i = 0; i < MR; i++) d[p * MR + i] = r[i][p];
        } else if (rsa == 1) {
            for (int64_t p = 0; p < kc; p++) {
                const float *s = src + p * csa;
                float *dp = d + p * MR;
                for (int i = 0; i < mr; i++) dp[i] = s[i];
                for (int i = mr; i < MR; i++) dp[i] = 0.0f;
            }
        } else {
            for (int64_t p = 0; p < kc; p++) {
                float *dp = d + p * MR;
                for (int i = 0; i < mr; i++) dp[i] = src[i * rsa + p * csa];
                for (int i = mr; i < MR; i++) dp[i] = 0.0f;
            }
        }
        for (int64_t p = kc; p < kcp; p++)
            for (int i = 0; i < MR; i++) d[p * MR + i] = 0.0f;
    }
}

/* B block depth p0.., columns j0.. -> micro-panels of OP_F32_NR columns (d[p*NR + j]). */
static void op_pack_b_f32(const op_gemm_args *g, int64_t bi, int64_t p0, int64_t kc, int64_t kcp,
                          int64_t j0, int64_t nc, void *dst)
{
    enum { NR = OP_F32_NR };
    const float *B = (const float *)g->b + (g->b_off ? g->b_off[bi] : 0);
    const int64_t rsb = g->rsb, csb = g->csb;
    float *d = (float *)dst;
    int64_t jr0 = 0;
#if !defined(OP_HAS_AVX512)
    /* A row-major B: 8 rows at a time across every full panel (8 sequential row streams, 512
       contiguous bytes written per panel) instead of each panel down all kc rows (rows rsb apart:
       a new page per row at N 3072, the loads waited on the TLB and no prefetcher followed).
       AMD EPYC Zen 3 VM, avx2, 1 thread, 2026-12-06: the pack 15% of a 128 x 768 x 3072 matmul
       before. Not measured at the AVX-512 levels, which keep the panel-by-panel loop below. */
    if (csb == 1 && nc >= 2 * NR) {
        jr0 = nc / NR * NR;
        for (int64_t pb = 0; pb < kc; pb += 8) {
            const int64_t pe = op_min64(kc, pb + 8);
            for (int64_t jr = 0; jr < jr0; jr += NR) {
                const float *src = B + p0 * rsb + j0 + jr;
                float *dp = d + jr * kcp;
                for (int64_t p = pb; p < pe; p++)
                    for (int j = 0; j < NR; j++) dp[p * NR + j] = src[p * rsb + j];
            }
        }
        for (int64_t jr = 0; jr < jr0; jr += NR)
            for (int64_t p = kc; p < kcp; p++)
                for (int j = 0; j < NR; j++) d[jr * kcp + p * NR + j] = 0.0f;
        d += jr0 * kcp;
    }
#endif
    for (int64_t jr = jr0; jr < nc; jr += NR, d += NR * kcp) {
        const int nr = (int)op_min64(NR, nc - jr);
        const float *src = B + p0 * rsb + (j0 + jr) * csb;
        if (csb == 1 && nr == NR) {
            for (int64_t p = 0; p < kc; p++) {
                const float *s = src + p * rsb;
                float *dp = d + p * NR;
                for (int j = 0; j < NR; j++) dp[j] = s[j];
            }
        } else if (rsb == 1 && csb != 0) {
            /* B transposed (e.g. a Linear weight W[n,k] used as W^T): each column is contiguous.
               16 columns (rows of W) at a time along all of kc, each prefetched into L2
               OP_PACK_WT_PF elements ahead (see there) */
#if defined(OP_HAS_AVX512)
            __m512i r[16];
            for (int h = 0; h < NR / 16; h++)
                for (int64_t pc = 0; pc < kc; pc += 16) {
                    const int nt = (int)op_min64(16, kc - pc);
                    const __mmask16 km = (__mmask16)((1u << nt) - 1u);
#pragma GCC unroll 16
                    for (int jj = 0; jj < 16; jj++) {
                        const int j = 16 * h + jj;
                        if (j < nr) {
                            const float *s = src + j * csb + pc;
                            _mm_prefetch((const char *)(s + OP_PACK_WT_PF), _MM_HINT_T1);
                            r[jj] = _mm512_castps_si512(_mm512_maskz_loadu_ps(km, s));
                        } else {
                            r[jj] = _mm512_setzero_si512();
                        }
                    }
                    op_tr16_store_f32(r, d + pc * NR + 16 * h, NR, nt, (__mmask16)0xFFFF);
                }
#elif defined(OP_HAS_AVX2)
            /* 8 x 8 transposes in registers, columns >= nr zero. The element loop (one float
               stored per 64 bytes) was 6.5% of a linear 512^3 at 1 thread. zen3 (AMD EPYC Zen 3
               VM, 2026-12-06, 1 thread, x @ W.T through op_gemm_f32 alone, alternated in one
               process with numpy, x numpy before -> after): 128 x 768 x 3072 0.74 -> 0.87, 256 x
               1024 x 1024 0.91 -> 1.00, 512^3 0.94 -> 0.97, 384^3 / 1024^3 within 2% */
            for (int h = 0; h < NR / 8; h++)
                for (int64_t pc = 0; pc < kc; pc += 8) {
                    const int nt = (int)op_min64(8, kc - pc);
                    __m256 r[8];
                    for (int jj = 0; jj < 8; jj++) {
                        const int j = 8 * h + jj;
                        if (j >= nr) {
                            r[jj] = _mm256_setzero_ps();
                            continue;
                        }
                        const float *s = src + j * csb + pc;
                        _mm_prefetch((const char *)(s + OP_PACK_WT_PF), _MM_HINT_T1);
                        r[jj] = nt == 8 ? _mm256_loadu_ps(s) : _mm256_maskload_ps(s, op_mask8(nt));
                    }
                    op_transpose8_ps(r);
                    for (int t = 0; t < nt; t++) _mm256_storeu_ps(d + (pc + t) * NR + 8 * h, r[t]);
                }
#else
            for (int j = 0; j < nr; j++) {
                const float *s = src + j * csb;
                for (int64_t p = 0; p < kc; p++) d[p * NR + j] = s[p];
            }
            if (nr < NR)
                for (int64_t p = 0; p < kc; p++)
                    for (int j = nr; j < NR; j++) d[p * NR + j] = 0.0f;
#endif
        } else {
            for (int64_t p = 0; p < kc; p++) {
                float *dp = d + p * NR;
                for (int j = 0; j < nr; j++) dp[j] = src[p * rsb + j * csb];
                for (int j = nr; j < NR; j++) dp[j] = 0.0f;
            }
        }
        for (int64_t p = kc; p < kcp; p++)
            for (int j = 0; j < NR; j++) d[p * NR + j] = 0.0f;
    }
}

static const op_gemm_ops op_gemm_f32_ops = {
    OP_F32_MR, OP_F32_NR, 1, sizeof(float), sizeof(float),
    op_pack_a_f32, op_pack_b_f32, op_ukr_f32,
    1, OP_F32_NR,
    {OP_F32_MC, OP_F32_KC, OP_F32_NC},
};

/* ---------------------------------------------------------------- driver */

typedef struct {
    const op_gemm_ops *ops;
    const op_gemm_args *g;
    int64_t mc, kc, nc;       /* cache blocking */
    int64_t pm, pn;           /* parts of each batch entry along M and N */
    int64_t bgroup;           /* whole batch entries per task (pm = pn = 1), else 1 */
    int64_t mblk, nblk;       /* number of mr rows / nr column blocks of one entry */
    int direct;               /* B read in place by the micro-kernel (csb == 1, small m) */
    char *buf;                /* per-thread A and B packing buffers */
    size_t a_bytes, thr_bytes;
    size_t part_bytes;        /* the per-thread partial sums of op_gemm_panel_chunked (at the end of
                                 the thread's buffers), 0 without op_gemm_ops.kchunk */
    /* images side by side (g->c_cols) with K over several KC blocks, batch 1: the tiles spanning two
       images accumulate in edge (panel s: edge_slot[s] >= 0, mblk * mr rows of nr floats) and are
       copied out once, after the last block; NULL: through the tile buffer per KC block */
    float *edge;
    int32_t *edge_slot;
} op_drive_ctx;

/* b_next_l2 (see op_gemm_block): the fewest micro-kernel calls per B micro-panel (row panels of a
   row block) that take the next panel's prefetch. Zen 4 (EPYC VM, 2026-12-02, bf16 1 thread, row-
   major B, K = N = 4096, alternated in one process): m = 28 (2 calls) 0.96-1.0x without it. */
#define OP_GEMM_NEXT_PANEL_MIN_CALLS 4
/* Aligned A rows read in place by a kernel with ukr_a_pack while a block passes at most this many
   B panels, or wherever the depth chunks run (see op_gemm_block) */
#define OP_GEMM_A_DIRECT_PANELS 8

/* Micro-panel jr (columns jc + jr .. jc + jr + nr - 1, depth from pc) of the B block the driver is
   at: its address and the ldb its micro-kernel call takes. Prepacked: in the prepacked panels;
   direct (full columns, jr < nfull): B itself; else the thread's packed block (direct: only the
   column tail, packed at its start). */
OP_INLINE const char *op_b_panel(const op_drive_ctx *x, const char *Bd, const char *bbuf, int64_t jc,
                                 int64_t pc, int64_t kcp, int64_t nfull, int64_t jr, int64_t *ldb)
{
    const op_gemm_ops *o = x->ops;
    const op_gemm_args *g = x->g;
    *ldb = o->b_panel_ld;
    if (o->b_prepacked) return Bd + ((jc + jr) * g->rsb + pc * o->nr) * (int64_t)o->b_elem;
    if (x->direct && jr < nfull) {
        *ldb = g->rsb;
        return Bd + (pc * g->rsb + (jc + jr)) * (int64_t)o->b_elem;
    }
    return bbuf + (size_t)((x->direct ? 0 : jr) * kcp) * o->b_elem;
}

/* epi for the tile at row i, column j (its bias offset to them) in te, or NULL without epi */
OP_INLINE const op_epilogue *op_tile_epi(const op_epilogue *epi, int64_t i, int64_t j,
                                         op_epilogue *te)
{
    if (!epi) return NULL;
    *te = *epi;
    if (te->bias) te->bias += (te->bias_axis == 0 ? i : j) * te->bias_stride;
    return te;
}

/* One B micro-panel (columns j .. j + nr - 1, depth pc .. pc + kcp - 1 of the KC block at bp, which
   holds all of K) against the block's row panels (rows ic .. ic + mc - 1) in depth chunks
   (op_gemm_ops.kchunk): every row panel passes over one chunk of the B panel before the next
   chunk, so that the chunk stays in L1 across the row panels, where a whole panel (128 KiB at KC
   2048 for the AMX kernel) was read from L2 by each of them together with its A panel. The float
   sums of row panel r are kept between chunks in part (rows r * mr .. r * mr + mr - 1, nr floats
   each) and reloaded into the accumulators exactly: the same sums in the same order as one pass
   over the depth, the same bits. The last chunk leaves the finished tile in part, from where it
   goes to C: rounded into the bfloat16 C (out16 after the epilogue, or op_tile_to_bf16 after the
   ukr's), or copied to the float C. A: as op_gemm_block's loop (fresh: read in place and packed as
   read; in place; packed). */
static void op_gemm_panel_chunked(const op_drive_ctx *x, int64_t ic, int64_t mc, int64_t j, int nr,
                                  int64_t pc, int64_t kcp, int a_fused, int64_t afull,
                                  int fresh_pass, const char *Ad, char *abuf, const char *bp,
                                  int64_t ldb, float *C, uint16_t *C16, const op_epilogue *epi,
                                  float *part)
{
    const op_gemm_ops *o = x->ops;
    const op_gemm_args *g = x->g;
    const int MR = o->mr, NR = o->nr;
    const int64_t rsc = g->rsc, csc = g->csc;
    const int to16 = C16 && o->out16 && g->csc16 == 1;
    for (int64_t q0 = 0; q0 < kcp; q0 += o->kchunk) {
        const int64_t ql = op_min64(o->kchunk, kcp - q0);
        const int lastq = q0 + ql >= kcp;
        const char *bq = bp + (size_t)(q0 * NR) * o->b_elem;
        for (int64_t ir = 0; ir < mc; ir += MR) {
            const int mr = (int)op_min64(MR, mc - ir);
            const int64_t i = ic + ir;
            float *pt = part + ir * NR;
            op_epilogue te;
            const op_epilogue *tep = lastq ? op_tile_epi(epi, i, j, &te) : NULL;
            const op_epilogue *uep = to16 ? NULL : tep;   /* (out16 applies it) */
            const int fresh = fresh_pass && ir < afull;
            const int packed = a_fused ? !fresh : ir >= afull;
            char *ap = abuf + (size_t)((a_fused ? ir : ir - afull) * kcp + q0 * MR) * o->a_elem;
            const char *ain = Ad + (i * g->rsa + pc + q0) * (int64_t)o->a_elem;
            if (fresh)
                o->ukr_a_pack(ql, ain, g->rsa, ap, bq, pt, NR, 1, mr, nr, q0 > 0, uep);
            else if (!packed)
                o->ukr_a(ql, ain, g->rsa, bq, pt, NR, 1, mr, nr, q0 > 0, uep);
            else
                o->ukr(ql, ap, bq, ldb, pt, NR, 1, mr, nr, q0 > 0, uep);
            if (!lastq) continue;
            if (to16) {
                o->out16(pt, mr, nr, tep, C16 + i * g->rsc16 + j, g->rsc16);
            } else if (C16) {
                op_tile_to_bf16(pt, NR, 1, mr, nr, C16 + i * g->rsc16 + j * g->csc16, g->rsc16,
                                g->csc16);
            } else {
                float *ct = C + i * rsc + j * csc;
                for (int r = 0; r < mr; r++) {
                    if (csc == 1)
                        memcpy(ct + r * rsc, pt + r * NR, sizeof(float) * (size_t)nr);
                    else
                        for (int c = 0; c < nr; c++) ct[r * rsc + c * csc] = pt[r * NR + c];
                }
            }
        }
    }
}

/* Computes C[m0:m1, n0:n1] of batch entry bi with the thread's buffers. */
static void op_gemm_block(const op_drive_ctx *x, int64_t bi, int64_t m0, int64_t m1, int64_t n0,
                          int64_t n1, char *abuf, char *bbuf, float *part)
{
    const op_gemm_ops *o = x->ops;
    const op_gemm_args *g = x->g;
    const int MR = o->mr, NR = o->nr;
    const int64_t k = g->k, rsc = g->rsc, csc = g->csc;
    float *C = g->c ? g->c + (g->c_off ? g->c_off[bi] : 0) : NULL;
    /* bfloat16 C: a tile is rounded into C16 when finished; with all of K in one KC block the
       float tile never leaves this thread's tile buffer (no float C at all) */
    uint16_t *C16 = g->c16 ? g->c16 + (g->c16_off ? g->c16_off[bi] : 0) : NULL;
    const int via_tile = C16 && k <= x->kc;
    const int to16 = via_tile && o->ukr16 && g->csc16 == 1;  /* bfloat16 C straight from the ukr */
    float tile[32 * 32] OP_ALIGNED(64);
    const char *Bd = (const char *)g->b + (g->b_off ? g->b_off[bi] : 0) * (int64_t)o->b_elem;
    const char *Ad = (const char *)g->a + (g->a_off ? g->a_off[bi] : 0) * (int64_t)o->a_elem;
    const op_epilogue *epi = g->epi;
    if (epi && !epi->bias && epi->act == OP_ACT_NONE) epi = NULL;
    /* A read in place (ukr_a) for the full mr-row panels of a block, its tail panel packed. Rows not
       64-byte aligned cost split loads on every pass over the block's B panels: then only when at
       most two B panels pass (packing costs about a read and a write of A; measured on AMX with
       ResNet-50 NHWC 1x1 layers: N = 64 gains, N >= 128 loses).
       With ukr_a_pack (the AMX kernel), the block's first pass over B (jr == 0) reads A in place
       and stores it packed as it goes; the other passes read the packed copy. A tile load of rows
       lda apart (strided, and split across lines when not 64-byte aligned) is slower than one of
       a packed panel (rows 64 bytes apart) when repeated from L2 for every B panel, while the
       separate pack pass waits on A's first read from memory with no tile work to overlap.
       sapphirerapids, 2026-12-04, 2 threads, bf16, builds alternated in one process with torch
       2.13 (x torch): ResNet-50 NHWC batch 8 res3a_branch2a (A rows 48 bytes off a line)
       0.66 -> 0.76, res4a_branch2a 0.84 -> 0.89, res2_branch2a (N 64, in place before) 0.64 ->
       0.74; 1 thread, 2048 x 256 x 2048 with a 64-byte aligned A (in place before) 500 -> 894
       GFLOP/s. Aligned rows stay in place up to OP_GEMM_A_DIRECT_PANELS B panels (res3a_branch2a,
       N 128: 1590 in place against 1480 packed as read), and for every B panel where the depth
       chunks run (chunks_run below): each chunk's row panels then come from L2 whether packed or
       not, and the copy was only extra stores (sapphirerapids, 2026-12-05, 1 thread, median of 7
       alternated in one process: 512^3 1042 -> 1144, 1024^3 1161 -> 1219, 2048^3 1128 -> 1163,
       MiniLM's 1344 x 1536 x 384 1129 -> 1187 GFLOP/s, inputs 64-byte aligned as the bench makes
       them; numpy places arrays at any 16-byte step, so about three in four keep the packing; with
       K over two KC blocks, 1024 x 4096 x 1024, no chunks, in place was 14% slower and stays
       packed). */
    const int a_aligned = ((uintptr_t)Ad % 64 == 0) && ((g->rsa * (int64_t)o->a_elem) % 64 == 0);
    const int a_anyalign = o->ukr_a_bcast;
    const int a_inplace = o->ukr_a && g->csa == 1;
    /* B read in place on request (g->b_direct: the NCHW 1x1 conv, rows H*W floats apart): C is
       written straight from the ukr, 32 columns of every row at a time, the next block's lines
       fetched only when that block's ukr starts (its own T0 prefetch, a few hundred cycles before
       the write-out). With the input and output not resident in L3 (a state of the shared Zen 4
       VM that comes and goes by the minute: random reads over 16 MiB at ~5 instead of ~3 ns) the
       write-out waits on DRAM; prefetching the next block's C lines of the same rows into L2 one
       block ahead (~1 us) hides it. zen4, 2026-12-01, res2a_branch2a batch 8, 2 threads, paired in
       one process with torch 2.13 (scripts/place_sweep.py): 142 -> 146 and 141 -> 159 GFLOP/s in
       that state, 192-194 -> 193-196 otherwise. Prefetches only: same results. */
    const int cpf = x->direct && g->b_direct && !g->c_cols && !via_tile && csc == 1;
    /* depth chunks (op_gemm_ops.kchunk, op_gemm_panel_chunked): packed or prepacked B panels, C
       in one piece, and (below) one KC block holding all of K: with several, C carries the sums
       from block to block and the chunks only added copies (the AMX VM, 2026-12-05, a linear
       1344 x 1536 x 384 at KC 1024, 2 threads: 0.69x torch with them against 0.91-0.99 without) */
    const int chunked = part && o->kchunk > 0 && !x->direct && g->c_cols == 0;

    for (int64_t jc = n0; jc < n1; jc += x->nc) {
        const int64_t nc = op_min64(x->nc, n1 - jc);
        const int64_t nfull = x->direct ? nc / NR * NR : 0;
        for (int64_t pc = 0;; pc += x->kc) {
            const int64_t kc = op_min64(x->kc, k - pc);
            const int64_t kcp = op_roundup64(kc, o->k_align);
            const int first = pc == 0, last = pc + kc >= k;
            const int chunks_run = chunked && kcp > o->kchunk && first && last;
            if (o->b_prepacked)
                ;  /* B micro-panels read in place below */
            else if (!x->direct)
                o->pack_b(g, bi, pc, kc, kcp, jc, nc, bbuf);
            else if (nfull < nc)  /* column tail: pack it (the ukr reads full NR-wide rows) */
                o->pack_b(g, bi, pc, kc, kcp, jc + nfull, nc - nfull, bbuf);
            for (int64_t ic = m0; ic < m1; ic += x->mc) {
                const int64_t mc = op_min64(x->mc, m1 - ic);
                const int a_direct = a_inplace && kcp == kc &&
                    (a_anyalign || (o->ukr_a_pack ? a_aligned && (nc <= OP_GEMM_A_DIRECT_PANELS * NR
                                                                  || chunks_run)
                                                  : a_aligned || nc <= 2 * NR));
                const int a_fused = !a_direct && a_inplace && o->ukr_a_pack && kcp == kc && nc > NR;
                const int64_t afull = (a_direct || a_fused) ? mc / MR * MR : 0;
                if (afull < mc)   /* the tail panel (all panels without ukr_a) packed */
                    o->pack_a(g, bi, ic + afull, mc - afull, pc, kc, kcp,
                              a_fused ? abuf + (size_t)(afull * kcp) * o->a_elem : abuf);
                /* Rows first (the AMX GEMM, a bfloat16 C with all of K in one block, every row
                   panel of A read in place, no depth chunks): each 32-row panel of A passes over
                   all the block's B panels in turn, so that it stays in L1 and C is written row by
                   row in consecutive 64-byte pieces, where the loop below wrote 64 bytes into each
                   of 32 rows per tile. The same sums, the same bits. sapphirerapids, 2026-12-05,
                   2 threads, bfloat16 NHWC 1x1 convolutions alternated in one process (x torch
                   2.13): batch 8 256 -> 64 channels 56x56 0.82-0.86 -> 0.95-1.01, 256 -> 128
                   0.80 -> 0.89, 64 -> 64 1.14 -> 1.38, 512 -> 256 28x28 0.97 -> 1.00, 1024 ->
                   256 14x14 1.18 -> 1.22; 64 -> 256 0.88 -> 0.82 and 128 -> 128 28x28 1.18 ->
                   1.14 the losses. */
                if (o->ukr_a_pack && via_tile && a_direct && afull == mc && !chunks_run &&
                    !x->direct && g->c_cols == 0) {
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        const int64_t i = ic + ir;
                        const char *ain = Ad + (i * g->rsa + pc) * (int64_t)o->a_elem;
                        for (int64_t jr = 0; jr < nc; jr += NR) {
                            const int nr = (int)op_min64(NR, nc - jr);
                            const int64_t j = jc + jr;
                            int64_t ldb;
                            const void *bp = op_b_panel(x, Bd, bbuf, jc, pc, kcp, nfull, jr, &ldb);
                            op_epilogue te;
                            o->ukr_a(kcp, ain, g->rsa, bp, tile, NR, 1, MR, nr, 0,
                                     op_tile_epi(epi, i, j, &te));
                            op_tile_to_bf16(tile, NR, 1, MR, nr, C16 + i * g->rsc16 + j * g->csc16,
                                            g->rsc16, g->csc16);
                        }
                    }
                    continue;
                }
                for (int64_t jr = 0; jr < nc; jr += NR) {
                    const int nr = (int)op_min64(NR, nc - jr);
                    int64_t ldb;
                    const void *bp = op_b_panel(x, Bd, bbuf, jc, pc, kcp, nfull, jr, &ldb);
                    /* b_next_l2: the B micro-panel after this one (after the block's last panel:
                       its first, for the next row block), fetched into L2 in equal slices, one per
                       micro-kernel call over this panel, so that only the first panel of each block
                       starts from L3 or memory. A panel is read once per row block (every MC rows):
                       a packed block (KC x NC) larger than the VM's share of L3, or a prepacked B,
                       comes from memory on each of those first reads, and the micro-kernel's own
                       prefetch (a few KiB ahead, into L1) does not hide that. Only when at least
                       OP_GEMM_NEXT_PANEL_MIN_CALLS calls share a panel: with fewer rows the slices
                       come in bursts (half a panel, 64 KiB at KC 2048, per call at 28 rows) that
                       were measured no faster. Prefetches only: the same results. */
                    const char *pnext = NULL;
                    int64_t nlines = 0;
                    const int64_t calls = op_cdiv64(mc, MR);
                    if (o->b_next_l2 && calls >= OP_GEMM_NEXT_PANEL_MIN_CALLS) {
                        const int64_t jn = jr + NR < nc ? jr + NR : (ic + x->mc < m1 ? 0 : -1);
                        if (jn >= 0 && !(x->direct && jn < nfull)) {   /* a packed panel */
                            int64_t ldn;
                            pnext = op_b_panel(x, Bd, bbuf, jc, pc, kcp, nfull, jn, &ldn);
                            nlines = op_cdiv64(op_cdiv64(kcp * NR * (int64_t)o->b_elem, 64), calls);
                        }
                    }
                    if (chunks_run) {
                        op_gemm_panel_chunked(x, ic, mc, jc + jr, nr, pc, kcp, a_fused, afull,
                                              a_fused && jr == 0, Ad, abuf, bp, ldb, C, C16, epi,
                                              part);
                        continue;
                    }
                    for (int64_t ir = 0; ir < mc; ir += MR) {
                        const int mr = (int)op_min64(MR, mc - ir);
                        for (int64_t l = 0; l < nlines; l++)   /* this call's slice (pnext != NULL) */
                            __builtin_prefetch(pnext + (ir / MR * nlines + l) * 64, 0, 2);
                        const int64_t i = ic + ir, j = jc + jr;
                        op_epilogue te;
                        const op_epilogue *tep = last ? op_tile_epi(epi, i, j, &te) : NULL;
                        /* fresh: A in place, packed as read; packed: A from abuf (ap) */
                        const int fresh = a_fused && jr == 0 && ir < afull;
                        const int packed = a_fused ? !fresh : ir >= afull;
                        char *ap = abuf + (size_t)((a_fused ? ir : ir - afull) * kcp) * o->a_elem;
                        if (to16 && packed) {
                            o->ukr16(kcp, ap, bp, ldb,
                                     C16 + i * g->rsc16 + j, g->rsc16, mr, nr, tep);
                            continue;
                        }
                        float *ct = via_tile ? tile : C + i * rsc + j * csc;
                        int64_t crs = via_tile ? NR : rsc, ccs = via_tile ? 1 : csc;
                        int pieces = 0;   /* images side by side: this tile spans two of them */
                        if (g->c_cols > 0) {
                            const int64_t im = j / g->c_cols, jc = j % g->c_cols;
                            if (jc + nr <= g->c_cols) {
                                ct = C + im * g->c_img + i * rsc + jc * csc;
                            } else if (x->edge) {
                                pieces = last ? 1 : 0;
                                ct = x->edge + ((int64_t)x->edge_slot[j / NR] * x->mblk * MR + i) * NR;
                                crs = NR;
                                ccs = 1;
                            } else {
                                pieces = 1;
                                ct = tile;
                                crs = NR;
                                ccs = 1;
                                if (!first) op_tile_cols_io(tile, NR, C, g, i, j, mr, nr, 0);
                            }
                        }
                        if (cpf && jr + NR < nc) {   /* next column block's C lines of these rows */
                            const float *cn = C + i * rsc + (j + NR) * csc;
                            for (int r = 0; r < mr; r++) {
                                __builtin_prefetch(cn + r * rsc, 0, 2);
                                __builtin_prefetch(cn + r * rsc + 16, 0, 2);
                                __builtin_prefetch(cn + r * rsc + 31, 0, 2);
                            }
                        }
                        const char *ain = Ad + (i * g->rsa + pc) * (int64_t)o->a_elem;
                        if (fresh)
                            o->ukr_a_pack(kcp, ain, g->rsa, ap, bp, ct, crs, ccs, mr, nr, !first,
                                          tep);
                        else if (!packed)
                            o->ukr_a(kcp, ain, g->rsa, bp, ct, crs, ccs, mr, nr, !first, tep);
                        else
                            o->ukr(kcp, ap, bp, ldb, ct, crs,
                                   ccs, mr, nr, !first, tep);
                        if (C16 && last)
                            op_tile_to_bf16(ct, crs, ccs, mr, nr, C16 + i * g->rsc16 + j * g->csc16,
                                            g->rsc16, g->csc16);
                        if (pieces) op_tile_cols_io(ct, NR, C, g, i, j, mr, nr, 1);
                    }
                }
            }
            if (last) break;
        }
    }
}

static void op_drive_task(void *ctx, int64_t task, int tid)
{
    const op_drive_ctx *x = (const op_drive_ctx *)ctx;
    char *abuf = x->buf + (size_t)tid * x->thr_bytes, *bbuf = abuf + x->a_bytes;
    float *part = x->part_bytes ? (float *)(abuf + x->thr_bytes - x->part_bytes) : NULL;
    if (x->bgroup > 1) {   /* entries task * bgroup .. in turn, each whole */
        const int64_t b1 = op_min64(x->g->batch, (task + 1) * x->bgroup);
        for (int64_t bi = task * x->bgroup; bi < b1; bi++)
            op_gemm_block(x, bi, 0, x->g->m, 0, x->g->n, abuf, bbuf, part);
        return;
    }
    const int64_t parts = x->pm * x->pn;
    const int64_t bi = task / parts, r = task % parts, im = r / x->pn, in = r % x->pn;
    const int64_t MR = x->ops->mr, NR = x->ops->nr, m = x->g->m, n = x->g->n;
    int64_t m0 = x->mblk * im / x->pm * MR, m1 = op_min64(m, x->mblk * (im + 1) / x->pm * MR);
    if (!x->ops->split_at_mr) {   /* equal row counts (see "Threads" at the top of this file) */
        m0 = m * im / x->pm;
        m1 = m * (im + 1) / x->pm;
    }
    const int64_t n0 = x->nblk * in / x->pn * NR, n1 = op_min64(n, x->nblk * (in + 1) / x->pn * NR);
    if (m0 >= m1 || n0 >= n1) return;
    op_gemm_block(x, bi, m0, m1, n0, n1, abuf, bbuf, part);
}

/* Splits P parts of one entry into pm x pn (pm <= mblk, pn <= nblk) minimising the per-thread
   compute (mt * nt) plus packing (mt + nt) cost; m rows, split in equal counts unless fixed
   (split_at_mr: at MR multiples, see op_drive_task). prefer_n: of equal costs, the most parts
   along N. For a kernel that reads A in place and packs it as it reads (op_gemm_ops.ukr_a_pack,
   the AMX GEMM) A costs no separate pass, while every thread packs the B columns it covers: a
   square split along M had each of two threads pack all of B. The Intel AMX VM, 2026-12-05,
   bf16 at 2 threads, M / N split alternated in one process (GFLOP/s, torch 2.13 beside them):
   512^3 1799-1863 -> 1922-1983 (1182-1213), 1024^3 1880-1929 -> 1965-2107 (1177-1360), 2048^3
   1885-2108 -> 2057-2206 (2173-2217). */
static void op_split_parts(int64_t P, int64_t m, int64_t mblk, int64_t nblk, int64_t MR, int64_t NR,
                           int fixed, int prefer_n, int64_t *pm, int64_t *pn)
{
    for (; P >= 1; P--) {
        double best = -1.0;
        for (int64_t q = 1; q <= P; q++) {
            if (P % q) continue;
            const int64_t a = P / q;  /* q parts along N, a along M */
            if (q > nblk || a > mblk) continue;
            const double mt = fixed ? (double)(op_cdiv64(mblk, a) * MR) : (double)op_cdiv64(m, a);
            const double nt = (double)(op_cdiv64(nblk, q) * NR);
            const double cost = mt * nt + 16.0 * (mt + nt);
            if (best < 0 || cost < best || (prefer_n && cost == best)) {
                best = cost;
                *pm = a;
                *pn = q;
            }
        }
        if (best >= 0) return;
    }
    *pm = *pn = 1;
}

/* Runs the GEMM described by g with the packing/micro-kernel set ops (see the top of this file).
   Returns the number of threads used, or -1 if the packing buffers could not be allocated. */
static int op_gemm_drive(const op_gemm_ops *ops, const op_gemm_args *g, const op_blocking *blk,
                         int nthreads)
{
    const int64_t MR = ops->mr, NR = ops->nr;
    if (g->batch <= 0 || g->m <= 0 || g->n <= 0) return 1;
    if (nthreads < 1) nthreads = 1;

    op_drive_ctx x;
    x.ops = ops;
    x.g = g;
    x.pm = x.pn = 1;
    x.mc = blk && blk->mc > 0 ? blk->mc : ops->blk.mc;
    x.kc = blk && blk->kc > 0 ? blk->kc : ops->blk.kc;
    x.nc = blk && blk->nc > 0 ? blk->nc : ops->blk.nc;
    x.mc = op_roundup64(x.mc, MR);
    x.nc = op_roundup64(x.nc, NR);
    x.kc = op_roundup64(x.kc, ops->k_align);
    /* With the depth chunks (the AMX GEMM), a K over several KC blocks is cut into equal blocks
       (K 3072 at KC 2048: two of 1536, not 2048 + 1024): sapphirerapids, 2026-12-05, 2 threads,
       bfloat16 linear alternated in one process, 128 x 3072 x 768 1159 -> 1228, 256 x 3072 x
       3072 1534 -> 1589 GFLOP/s, K 4096 (already even) unchanged. */
    if (ops->kchunk > 0 && g->k > x.kc)
        x.kc = op_roundup64(op_cdiv64(g->k, op_cdiv64(g->k, x.kc)), ops->k_align);
#if defined(OP_HAS_AVX2) && !defined(OP_HAS_AVX512)
    /* No short last KC block: a K up to 5/4 of KC in one block, up to twice KC in two equal ones
       (each block re-reads and re-writes C; K 384 at KC 336 ran a 48-deep second block). zen3
       (2026-12-06, avx2, 1 thread, float32, blockings alternated in one process with numpy, speed
       x KC 336): 1344 x 384 x 1152 and 1344 x 384 x 1536 (MiniLM's linears) 1.044-1.046, 512^3
       (256 + 256) 1.053. Only matmul and linear (g->kc_even): the convolutions keep the blocking's
       KC, which their packs size scratch by and their routes' equal bits rest on. Other builds not
       measured: unchanged. */
    else if (g->kc_even && g->k > x.kc && g->k <= 2 * x.kc)
        x.kc = op_roundup64(4 * g->k <= 5 * x.kc ? g->k : op_cdiv64(g->k, 2), ops->k_align);
#endif
    x.mblk = op_cdiv64(g->m, MR);
    x.nblk = op_cdiv64(g->n, NR);
    /* Small M (GEMV-like, e.g. decode; m <= mr so every B row is used by one micro-kernel call):
       B is streamed once in place instead of being packed. The kc rows a call reads lie a row
       stride apart (often a power of two: same L1 set), so kc is kept small: the kc rows are
       kc concurrent streams (prefetched by the ukr), and the C tile is re-read per block. */
    x.direct = ops->direct_b && g->csb == 1 && g->m <= MR;
    if (x.direct && !g->b_direct) x.kc = op_min64(x.kc, OP_GEMM_DIRECT_KC);
    /* B in place at any m, on request (a shallow B, e.g. an NCHW 1x1 convolution's input: see
       OP_CONV_NCHW1X1_DIRECT_B in conv_f32.c): kc kept, so every C element is the same sum */
    if (ops->direct_b && g->csb == 1 && g->b_direct) x.direct = 1;

    /* threads: at least OP_GEMM_MIN_FLOPS_PER_THREAD each */
    const double flops = 2.0 * (double)g->batch * (double)g->m * (double)g->n * (double)op_max64(g->k, 1);
    int64_t T = (int64_t)(flops / OP_GEMM_MIN_FLOPS_PER_THREAD);
    if (T > nthreads) T = nthreads;
    if (T < 1) T = 1;
    if (T > g->batch * x.mblk * x.nblk) T = g->batch * x.mblk * x.nblk;
    x.bgroup = 1;
    if (g->batch >= T && (g->batch % T == 0 || g->batch >= 4 * T)) {
        x.pm = x.pn = 1;  /* whole batch entries per task */
        /* in groups of entries, OP_GEMM_BATCH_TASKS tasks per thread, where the entries are
           small (a task per entry of a 768 x 21 x 32 x 21 bfloat16 product, ~0.25 us each, had
           the two threads of the Intel AMX VM spend most of the call claiming tasks: 2 threads
           ran it no faster than one, 209 against 216 us) */
        if (T > 1 && flops < OP_GEMM_MIN_FLOPS_PER_THREAD * (double)g->batch)
            x.bgroup = op_max64(1, g->batch / (OP_GEMM_BATCH_TASKS * T));
    } else {
        const int64_t P = g->batch >= T ? T : op_cdiv64(T, g->batch);
        if (g->split_n) {
            x.pm = 1;
            x.pn = op_min64(P, x.nblk);
        } else {
            op_split_parts(P, g->m, x.mblk, x.nblk, MR, NR, ops->split_at_mr,
                           ops->ukr_a_pack && ops->ukr_a && g->csa == 1, &x.pm, &x.pn);
        }
    }
    const int64_t ntasks = x.bgroup > 1 ? op_cdiv64(g->batch, x.bgroup) : g->batch * x.pm * x.pn;
    if (T > ntasks) T = ntasks;

    /* per-thread buffers, sized by the largest block a thread can see */
    const int64_t mpart = op_cdiv64(x.mblk, x.pm) * MR, npart = op_cdiv64(x.nblk, x.pn) * NR;
    const int64_t kcp = op_roundup64(op_max64(op_min64(x.kc, g->k), 1), ops->k_align);
    const size_t a_bytes = (size_t)op_roundup64(op_min64(x.mc, mpart) * kcp * (int64_t)ops->a_elem, OP_ALIGN);
    const int64_t bcols = ops->b_prepacked ? 0 : x.direct ? NR : op_min64(x.nc, npart);
    const size_t b_bytes = (size_t)op_roundup64(bcols * kcp * (int64_t)ops->b_elem, OP_ALIGN) +
                           (size_t)op_roundup64((int64_t)ops->b_scratch, OP_ALIGN);
    x.a_bytes = a_bytes;
    x.part_bytes = ops->kchunk > 0 && kcp > ops->kchunk && g->k <= x.kc   /* (op_gemm_block) */
        ? (size_t)op_roundup64(op_roundup64(op_min64(x.mc, mpart), MR) * NR *
                               (int64_t)sizeof(float), OP_ALIGN)
        : 0;
    x.thr_bytes = a_bytes + b_bytes + x.part_bytes;
    /* bfloat16 C with K over several KC blocks and no float C given: the partial sums need one */
    op_gemm_args gs;
    float *scratch = NULL;
    int64_t *scratch_off = NULL;
    if (g->c16 && !g->c && g->k > x.kc) {
        gs = *g;
        scratch = (float *)op_aligned_alloc((size_t)(g->batch * g->m * g->n) * sizeof(float));
        scratch_off = (int64_t *)malloc((size_t)g->batch * sizeof(int64_t));
        if (!scratch || !scratch_off) {
            op_aligned_free(scratch);
            free(scratch_off);
            return -1;
        }
        for (int64_t bi = 0; bi < g->batch; bi++) scratch_off[bi] = bi * g->m * g->n;
        gs.c = scratch; gs.c_off = scratch_off; gs.rsc = g->n; gs.csc = 1;
        x.g = &gs;
    }
    x.edge = NULL;
    x.edge_slot = NULL;
    if (g->c_cols > 0 && g->batch == 1 && g->k > x.kc && !g->c16) {   /* (no scratch then) */
        int32_t nslot = 0;
        x.edge_slot = (int32_t *)malloc(sizeof(int32_t) * (size_t)x.nblk);
        if (!x.edge_slot) return -1;
        for (int64_t sp = 0; sp < x.nblk; sp++) {
            const int64_t j0 = sp * NR, j1 = op_min64(g->n, j0 + NR) - 1;
            x.edge_slot[sp] = j0 / g->c_cols != j1 / g->c_cols ? nslot++ : -1;
        }
        if (nslot > 0) {
            x.edge = (float *)op_aligned_alloc(sizeof(float) * (size_t)(nslot * x.mblk * MR * NR));
            if (!x.edge) {
                free(x.edge_slot);
                return -1;
            }
        }
    }
    x.buf = (char *)op_aligned_alloc(x.thr_bytes * (size_t)T);
    int used = -1;
    if (x.buf) used = op_parallel_for((int)T, ntasks, op_drive_task, &x);
    op_aligned_free(x.buf);
    op_aligned_free(x.edge);
    free(x.edge_slot);
    op_aligned_free(scratch);
    free(scratch_off);
    return used;
}

/* ---------------------------------------------------------------- public API */

static int op_gemv_f32(const op_gemm_args *g, int nthreads);  /* gemv_f32.c, included next */

int op_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k,
                const float *a, const int64_t *a_off, int64_t rsa, int64_t csa,
                const float *b, const int64_t *b_off, int64_t rsb, int64_t csb,
                float *c, const int64_t *c_off, int64_t rsc, int64_t csc,
                const op_blocking *blk, const op_epilogue *epi, int nthreads)
{
    op_gemm_args g;
    memset(&g, 0, sizeof g);
    g.batch = batch; g.m = m; g.n = n; g.k = k < 0 ? 0 : k;
    g.a = a; g.a_off = a_off; g.rsa = rsa; g.csa = csa;
    g.b = b; g.b_off = b_off; g.rsb = rsb; g.csb = csb;
    g.c = c; g.c_off = c_off; g.rsc = rsc; g.csc = csc;
    g.c16 = NULL;
    g.epi = epi;
    g.kc_even = 1;
    if (g.k > 0 && batch > 0) {
        const int used = op_gemv_f32(&g, nthreads < 1 ? 1 : nthreads);  /* gemv_f32.c */
        if (used != 0) return used;  /* -1: allocation failure */
    }
    return op_gemm_drive(&op_gemm_f32_ops, &g, blk, nthreads);
}

int op_gemm_f32_mr(void) { return OP_F32_MR; }
int op_gemm_f32_nr(void) { return OP_F32_NR; }
const char *op_gemm_f32_kernel_name(void) { return OP_F32_KERNEL_NAME; }
const char *op_level_name(void) { return OP_LEVEL_NAME; }
