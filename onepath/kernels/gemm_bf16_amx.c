/* gemm_bf16_amx.c: the AMX-BF16 tile micro-kernel (TDPBF16PS), 32 x 32 block of C per call.

   Compiled twice from this one source:
     avx512_core_amx: the real tile instructions (<immintrin.h>, -mamx-tile -mamx-bf16); selected
       only when the probe found AMX and the Linux XTILEDATA permission granted.
     amx_emu: against amx_emu.h, the plain-C emulation of the same intrinsics, with baseline flags.
       That build exists for the tests: it runs this file's packing (shared k32 layout of
       gemm_bf16.c), tile configuration and tile loop with M, N and K edges on any host, so a bug in
       them shows without AMX hardware. It is never selected by dispatch.

   Tiles (palette 1, all 16 rows x 64 bytes): tmm0-3 the 2 x 2 float32 accumulator tiles of the
   32 x 32 C block, tmm4/5 the A tiles (16 rows x 32 bfloat16) of rows 0-15 / 16-31, tmm6/7 the B
   tiles (16 K-pairs x 16 columns x 2) of columns 0-15 / 16-31.

   Tile configuration per thread: LDTILECFG is issued by the first micro-kernel call of each thread
   in each GEMM call (op_amx_epoch changes at every call, each thread remembers the epoch it
   configured for), and the calling thread releases its tiles (TILERELEASE) when the call returns;
   the pool's helper threads keep theirs configured until a later call's epoch reconfigures them. Other code using AMX on the same thread between our calls
   (e.g. oneDNN in the same process) therefore never sees or changes our configuration mid-call. */

#include <stdatomic.h>

#define OP_AMX_MR 32

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} op_amx_tilecfg;

static _Atomic unsigned op_amx_epoch = 1;
static _Thread_local unsigned op_amx_cfg_epoch = 0;

static void op_amx_configure(void)
{
    op_amx_tilecfg cfg OP_ALIGNED(64);
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

OP_INLINE void op_amx_ensure_cfg(void)
{
    const unsigned e = atomic_load_explicit(&op_amx_epoch, memory_order_relaxed);
    if (OP_UNLIKELY(op_amx_cfg_epoch != e)) {
        op_amx_configure();
        op_amx_cfg_epoch = e;
    }
}

static void op_amx_begin(void) { atomic_fetch_add_explicit(&op_amx_epoch, 1, memory_order_relaxed); }

static void op_amx_end(void)
{
    if (op_amx_cfg_epoch != 0) {
        _tile_release();
        op_amx_cfg_epoch = 0;
    }
}

static int op_amx_fault(void)
{
#if defined(OP_LEVEL_AMX_EMU)
    return atomic_exchange(&op_amx_emu_fault, 0);
#else
    return 0;
#endif
}

static void op_pack_a_amx(const op_gemm_args *g, int64_t bi, int64_t i0, int64_t mc, int64_t p0,
                          int64_t kc, int64_t kcp, void *dst)
{
    op_pack_a_k32(g, bi, i0, mc, p0, kc, kcp, (uint16_t *)dst, OP_AMX_MR);
}

/* Where the micro-kernel reads its A tiles: packed (a micro-panel of op_pack_a_amx: block kb at
   a + kb*32*32, rows 64 bytes apart) or in place (row-major A, rows lda elements apart: block kb at
   a + kb*32, a 16 x 32 tile is 16 rows of 64 bytes lda*2 bytes apart). */
typedef struct {
    int64_t ld;     /* bytes between tile rows */
    int64_t kstep;  /* elements from one 32-depth block to the next */
    int64_t half;   /* elements from row 0 to row 16 */
} op_amx_aview;

/* The full-tile K loop: tiles 0-3 (the 32 x 32 C block as 2 x 2 tiles of 16 x 16) += A (tiles 4,
   5: two 16-row halves) times B (tiles 6, 7: two 16-column halves), over nkb blocks of 32 depth.
   ap (non-NULL): the A tiles are also stored there, packed as op_pack_a_amx packs them. */
OP_INLINE void op_amx_kloop_2x2(const uint16_t *A, op_amx_aview av, const uint16_t *B, int64_t nkb,
                                uint16_t *ap)
{
    for (int64_t kb = 0; kb < nkb; kb++) {
        const uint16_t *ab = A + kb * av.kstep, *bb = B + kb * 1024;
        _tile_loadd(4, ab, av.ld);
        _tile_loadd(6, bb, 64);
        _tile_loadd(7, bb + 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, ab + av.half, av.ld);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
        if (ap) {
            _tile_stored(4, ap + kb * OP_AMX_MR * 32, 64);
            _tile_stored(5, ap + kb * OP_AMX_MR * 32 + 16 * 32, 64);
        }
    }
}

OP_INLINE void op_ukr_amx_body(int64_t kcp, const uint16_t *A, op_amx_aview av, const void *b, float *c,
                               int64_t rsc, int64_t csc, int mr, int nr, int acc,
                               const op_epilogue *epi, uint16_t *ap)
{
    op_amx_ensure_cfg();
    const uint16_t *B = (const uint16_t *)b;
    const int two_m = mr > 16, two_n = nr > 16;
    const int64_t nkb = kcp / 32;
    if (mr == 32 && nr == 32 && csc == 1) {
        /* full block, C rows contiguous: the accumulators start from C (or zero) and are stored
           straight to C, no scratch tile; the epilogue (last KC block only) then runs in place */
        const int64_t ldc = rsc * (int64_t)sizeof(float);
        if (acc) {
            _tile_loadd(0, c, ldc); _tile_loadd(1, c + 16, ldc);
            _tile_loadd(2, c + 16 * rsc, ldc); _tile_loadd(3, c + 16 * rsc + 16, ldc);
        } else {
            _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
        }
        op_amx_kloop_2x2(A, av, B, nkb, ap);
        _tile_stored(0, c, ldc); _tile_stored(1, c + 16, ldc);
        _tile_stored(2, c + 16 * rsc, ldc); _tile_stored(3, c + 16 * rsc + 16, ldc);
        if (epi) op_bf16_tile_out(c, rsc, 32, 32, c, rsc, 1, 0, epi);
        return;
    }
    /* Edge blocks (and C not row-contiguous) run through the scratch tile t. With acc the
       accumulators start from C's values, as the full block's do, so a row sums in the same order
       whichever block it falls in: a tile-sized sum added to C afterwards rounded differently, and
       row chunks cut at other than 32-row multiples (onepath.dask's blocks) gave other bits than
       the whole call. */
    float t[32 * 32] OP_ALIGNED(64);
    if (acc) {   /* rows < mr, columns < nr from C; zeros elsewhere */
        for (int i = 0; i < 32; i++) {
#if defined(OP_HAS_AVX512)
            if (csc == 1 || i >= mr) {
                const __mmask16 k0 = (__mmask16)(i >= mr ? 0 : nr >= 16 ? 0xFFFF : (1u << nr) - 1u);
                const __mmask16 k1 = (__mmask16)(i >= mr || nr <= 16 ? 0 : nr >= 32 ? 0xFFFF : (1u << (nr - 16)) - 1u);
                _mm512_store_ps(t + i * 32, _mm512_maskz_loadu_ps(k0, c + i * rsc));
                _mm512_store_ps(t + i * 32 + 16, _mm512_maskz_loadu_ps(k1, c + i * rsc + 16));
                continue;
            }
#endif
            for (int j = 0; j < 32; j++) t[i * 32 + j] = (i < mr && j < nr) ? c[i * rsc + j * csc] : 0.0f;
        }
    }
#define OP_AMX_START(tile, off) do { if (acc) _tile_loadd(tile, t + (off), 128); else _tile_zero(tile); } while (0)
    if (two_m && two_n) {
        OP_AMX_START(0, 0); OP_AMX_START(1, 16); OP_AMX_START(2, 16 * 32); OP_AMX_START(3, 16 * 32 + 16);
        op_amx_kloop_2x2(A, av, B, nkb, ap);
        _tile_stored(0, t, 128);
        _tile_stored(1, t + 16, 128);
        _tile_stored(2, t + 16 * 32, 128);
        _tile_stored(3, t + 16 * 32 + 16, 128);
    } else {
        /* edge blocks: only the tiles that hold rows < mr and columns < nr */
        OP_AMX_START(0, 0);
        if (two_n) OP_AMX_START(1, 16);
        if (two_m) OP_AMX_START(2, 16 * 32);
        for (int64_t kb = 0; kb < nkb; kb++) {
            const uint16_t *ab = A + kb * av.kstep, *bb = B + kb * 1024;
            _tile_loadd(4, ab, av.ld);
            _tile_loadd(6, bb, 64);
            _tile_dpbf16ps(0, 4, 6);
            if (two_n) {
                _tile_loadd(7, bb + 512, 64);
                _tile_dpbf16ps(1, 4, 7);
            }
            if (two_m) {
                _tile_loadd(5, ab + av.half, av.ld);
                _tile_dpbf16ps(2, 5, 6);
            }
        }
        _tile_stored(0, t, 128);
        if (two_n) _tile_stored(1, t + 16, 128);
        if (two_m) _tile_stored(2, t + 16 * 32, 128);
    }
#undef OP_AMX_START
    op_bf16_tile_out(t, 32, mr, nr, c, rsc, csc, 0, epi);
}

static void op_ukr_amx(int64_t kcp, const void *a, const void *b, int64_t ldb, float *c,
                       int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    (void)ldb;
    const op_amx_aview av = {64, OP_AMX_MR * 32, 16 * 32};
    op_ukr_amx_body(kcp, (const uint16_t *)a, av, b, c, rsc, csc, mr, nr, acc, epi, NULL);
}

/* A read in place (op_gemm_ops.ukr_a): a = &A[i][p0], full 32-row panels, kcp == kc. */
static void op_ukr_amx_a(int64_t kcp, const void *a, int64_t lda, const void *b, float *c,
                         int64_t rsc, int64_t csc, int mr, int nr, int acc, const op_epilogue *epi)
{
    const op_amx_aview av = {lda * 2, 32, 16 * lda};
    op_ukr_amx_body(kcp, (const uint16_t *)a, av, b, c, rsc, csc, mr, nr, acc, epi, NULL);
}

/* op_gemm_ops.ukr_a_pack: op_ukr_amx_a that also leaves the 32-row panel it reads at ap, packed as
   op_pack_a_amx packs it (the driver calls it with mr = nr = 32: the 2 x 2 loop, which stores). */
static void op_ukr_amx_a_pack(int64_t kcp, const void *a, int64_t lda, void *ap, const void *b,
                              float *c, int64_t rsc, int64_t csc, int mr, int nr, int acc,
                              const op_epilogue *epi)
{
    const op_amx_aview av = {lda * 2, 32, 16 * lda};
    op_ukr_amx_body(kcp, (const uint16_t *)a, av, b, c, rsc, csc, mr, nr, acc, epi, (uint16_t *)ap);
}

#if defined(OP_LEVEL_AVX512_CORE_AMX)
/* A bfloat16 C straight from the tiles (op_gemm_ops.ukr16: one KC block holds all of K): the tiles
   go to a float scratch in L1 and one pass applies the epilogue and rounds (op_dp_tile16_out), where
   the driver's tile path ran the epilogue over its tile buffer in place and rounded it in another
   pass (op_tile_to_bf16). The same float sums, rounded once alike: the same bits. Set as the
   VDPBF16PS kernel's ukr16 is, by the variant flag 4 (op_dp_variant_ops). */
static void op_ukr16_amx(int64_t kcp, const void *a, const void *b, int64_t ldb, uint16_t *c16,
                         int64_t rsc16, int mr, int nr, const op_epilogue *epi)
{
    float t[32 * 32] OP_ALIGNED(64);
    /* more than 16 rows and columns: all four tiles (the packed panels' rows and columns past mr
       and nr are zeros), stored straight to t, where the edge path stored them to its own scratch
       and copied the mr x nr corner into t (a batch of 768 21 x 32 x 21 products: 8% of the time);
       t's other elements are never read. The same tile products: the same bits. */
    const int full = mr > 16 && nr > 16;
    op_ukr_amx(kcp, a, b, ldb, t, 32, 1, full ? 32 : mr, full ? 32 : nr, 0, NULL);
    op_dp_tile16_out(t, mr, nr, epi, c16, rsc16);
}
#endif

static const op_gemm_ops op_bf16_amx_ops = {
    OP_AMX_MR, OP_K32_NR, 32, 2, 2,
    op_pack_a_amx, op_pack_b_k32, op_ukr_amx,
    0, 2 * OP_K32_NR,
    {256, 1024, 2048},
    0, 0,
    op_ukr_amx_a,
    0, NULL,
    1,   /* split_at_mr: a tile of fewer rows costs a full one */
    0, op_ukr_amx_a_pack,   /* b_next_l2, ukr_a_pack */
};

/* op_gemm_bf16_set_variants flag 64 ("depth_chunks"): the GEMM passes each B micro-panel in depth
   chunks of OP_AMX_KCHUNK, every row panel of the row block per chunk (op_gemm_ops.kchunk,
   op_gemm_panel_chunked). At the shipped KC of 2048 a 32-column panel is up to 128 KiB of L2 and
   each 32-row panel of A as much: every tile step loaded its 4 KiB from L2. A 256-deep chunk of
   the B panel (16 KiB) stays in L1 across the row panels, which then read only A from L2, and
   their float partial sums (MC x 32 floats, 32 KiB at MC 256) are stored and reloaded at every
   chunk: the same sums in the same order, the same bits. The Intel AMX VM, 2026-12-05, 1 thread,
   chunks off / on alternated in one process (GFLOP/s, median of 7; torch 2.13 beside them):
   512^3 922 -> 960 (1018), 1024^3 961 -> 1042 (1289), 2048^3 966 -> 973 (1042); chunks of 128 and
   384 were slower. A standalone loop over packed panels, no packing or write-out, ran 1024^3 at
   1271 one panel deep against 1408-1562 with chunks of 256 (MC 256 / 512). */
#define OP_AMX_KCHUNK 256
static int op_amx_chunks = 0;

/* ops (a copy of op_bf16_amx_ops) with the depth chunks where flag 64 is on */
static void op_amx_variant_ops(op_gemm_ops *ops)
{
    if (!op_amx_chunks || ops->ukr != op_ukr_amx) return;
    ops->kchunk = OP_AMX_KCHUNK;
#if defined(OP_LEVEL_AVX512_CORE_AMX)
    ops->out16 = op_dp_tile16_out;   /* the bfloat16 C as op_ukr16_amx writes it */
#endif
}
