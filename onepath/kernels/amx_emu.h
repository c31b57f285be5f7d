/* amx_emu.h: plain-C emulation of the AMX tile intrinsics used by gemm_bf16_amx.c.

   What it is for: the amx_emu build (baseline x86-64 flags, see build.py) compiles the AMX-BF16 tile
   kernel against this header instead of <immintrin.h>'s AMX intrinsics, so the test suite runs the
   kernel's packing, tile configuration and tile loop (edges of M, N and K included) on any host,
   including hosts without AMX or without the OS permission. It is not a fast path and never selected
   by dispatch. Emulated semantics follow Intel's SDM pseudo-code for LDTILECFG, TILELOADD,
   TILESTORED, TILEZERO, TDPBF16PS (bfloat16 inputs with denormals treated as zero, products summed
   in float32, float32 denormal results flushed to zero) and TILERELEASE. Every misuse the hardware
   would fault on (tile used before LDTILECFG, rows/colsb out of range, TDPBF16PS shapes that do not
   match) sets op_amx_emu_fault, which op_gemm_bf16 reports as an error. Tiles are per thread. */
#ifndef OP_AMX_EMU_H
#define OP_AMX_EMU_H

#include <stdatomic.h>

typedef struct {
    int configured;
    int rows[8];
    int colsb[8];
    unsigned char data[8][16 * 64];
} op_amx_emu_state;

static _Thread_local op_amx_emu_state op_amx_emu_t;
static _Atomic int op_amx_emu_fault = 0;

static void op_amx_emu_fail(void) { atomic_store(&op_amx_emu_fault, 1); }

static void op_amx_emu_loadconfig(const void *cfg)
{
    const unsigned char *p = (const unsigned char *)cfg;
    if (p[0] != 1) {  /* palette 1 is the only one defined; 0 = release */
        memset(&op_amx_emu_t, 0, sizeof op_amx_emu_t);
        if (p[0] != 0) op_amx_emu_fail();
        return;
    }
    memset(&op_amx_emu_t, 0, sizeof op_amx_emu_t);
    for (int t = 0; t < 8; t++) {
        uint16_t colsb;
        memcpy(&colsb, p + 16 + 2 * t, 2);
        const int rows = p[48 + t];
        if (colsb > 64 || rows > 16) op_amx_emu_fail();
        op_amx_emu_t.colsb[t] = colsb;
        op_amx_emu_t.rows[t] = rows;
    }
    op_amx_emu_t.configured = 1;
}

static int op_amx_emu_ok(int t)
{
    if (t < 0 || t > 7 || !op_amx_emu_t.configured || op_amx_emu_t.rows[t] == 0) {
        op_amx_emu_fail();
        return 0;
    }
    return 1;
}

static void op_amx_emu_loadd(int t, const void *base, int64_t stride)
{
    if (!op_amx_emu_ok(t)) return;
    const int rows = op_amx_emu_t.rows[t], colsb = op_amx_emu_t.colsb[t];
    memset(op_amx_emu_t.data[t], 0, sizeof op_amx_emu_t.data[t]);
    for (int r = 0; r < rows; r++)
        memcpy(op_amx_emu_t.data[t] + 64 * r, (const char *)base + r * stride, (size_t)colsb);
}

static void op_amx_emu_stored(int t, void *base, int64_t stride)
{
    if (!op_amx_emu_ok(t)) return;
    const int rows = op_amx_emu_t.rows[t], colsb = op_amx_emu_t.colsb[t];
    for (int r = 0; r < rows; r++)
        memcpy((char *)base + r * stride, op_amx_emu_t.data[t] + 64 * r, (size_t)colsb);
}

static void op_amx_emu_zero(int t)
{
    if (!op_amx_emu_ok(t)) return;
    memset(op_amx_emu_t.data[t], 0, sizeof op_amx_emu_t.data[t]);
}

static float op_amx_emu_bf16(const unsigned char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    if ((h & 0x7F80u) == 0) h &= 0x8000u;  /* DAZ */
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void op_amx_emu_dpbf16ps(int dst, int a, int b)
{
    if (!op_amx_emu_ok(dst) || !op_amx_emu_ok(a) || !op_amx_emu_ok(b)) return;
    const int M = op_amx_emu_t.rows[dst], N = op_amx_emu_t.colsb[dst] / 4, K = op_amx_emu_t.colsb[a] / 4;
    /* shape checks of TDPBF16PS (#UD otherwise) */
    if (op_amx_emu_t.rows[a] != M || op_amx_emu_t.rows[b] != K || op_amx_emu_t.colsb[b] != op_amx_emu_t.colsb[dst]) {
        op_amx_emu_fail();
        return;
    }
    for (int m = 0; m < M; m++) {
        float *c = (float *)(void *)(op_amx_emu_t.data[dst] + 64 * m);
        const unsigned char *ar = op_amx_emu_t.data[a] + 64 * m;
        for (int k = 0; k < K; k++) {
            const float a0 = op_amx_emu_bf16(ar + 4 * k), a1 = op_amx_emu_bf16(ar + 4 * k + 2);
            const unsigned char *br = op_amx_emu_t.data[b] + 64 * k;
            for (int n = 0; n < N; n++) {
                float v = c[n];
                v += a0 * op_amx_emu_bf16(br + 4 * n);
                v += a1 * op_amx_emu_bf16(br + 4 * n + 2);
                if (v != 0.0f && fabsf(v) < 1.17549435e-38f) v = copysignf(0.0f, v);  /* FTZ */
                c[n] = v;
            }
        }
    }
}

static void op_amx_emu_release(void) { memset(&op_amx_emu_t, 0, sizeof op_amx_emu_t); }

#define _tile_loadconfig(cfg) op_amx_emu_loadconfig(cfg)
#define _tile_loadd(t, base, stride) op_amx_emu_loadd((t), (base), (stride))
#define _tile_stored(t, base, stride) op_amx_emu_stored((t), (base), (stride))
#define _tile_zero(t) op_amx_emu_zero(t)
#define _tile_dpbf16ps(dst, a, b) op_amx_emu_dpbf16ps((dst), (a), (b))
#define _tile_release() op_amx_emu_release()

#endif /* OP_AMX_EMU_H */
