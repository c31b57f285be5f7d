/* common.h: level macros and small helpers shared by every kernel piece of one level's unity build.

   level_<name>.c defines exactly one OP_LEVEL_<NAME> (and OP_LEVEL_NAME); this header derives the
   instruction-set switches the pieces test:
     OP_HAS_AVX2    8-wide FMA micro-kernels (avx2 and every avx512 level)
     OP_HAS_AVX512  16-wide FMA micro-kernels (avx512_core, avx512_core_bf16, avx512_core_amx)
   generic and amx_emu (baseline x86-64 flags) set neither and use the portable C micro-kernel.
   A level whose flags do not enable the instructions its macros promise fails to compile. */
#ifndef OP_COMMON_H
#define OP_COMMON_H

#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#if defined(OP_LEVEL_AVX512_CORE) || defined(OP_LEVEL_AVX512_CORE_BF16) || defined(OP_LEVEL_AVX512_CORE_AMX)
#define OP_HAS_AVX512 1
#define OP_HAS_AVX2 1
#elif defined(OP_LEVEL_AVX2)
#define OP_HAS_AVX2 1
#elif defined(OP_LEVEL_GENERIC) || defined(OP_LEVEL_AMX_EMU)
/* portable C only */
#else
#error "common.h: no OP_LEVEL_* macro defined (include through level_<name>.c)"
#endif

#if defined(OP_HAS_AVX512) && !(defined(__AVX512F__) && defined(__AVX512VL__) && defined(__FMA__))
#error "avx512 level compiled without -mavx512f -mavx512vl -mfma"
#endif
#if defined(OP_HAS_AVX2) && !(defined(__AVX2__) && defined(__FMA__))
#error "avx2 level compiled without -mavx2 -mfma"
#endif

#if defined(OP_HAS_AVX2)
#include <immintrin.h>
#endif

#define OP_RESTRICT __restrict__
#define OP_INLINE static inline __attribute__((always_inline))
#define OP_NOINLINE __attribute__((noinline))
#define OP_ALIGNED(n) __attribute__((aligned(n)))
#define OP_LIKELY(x) __builtin_expect(!!(x), 1)
#define OP_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* The float accumulator tile of a 14 x 32 AVX-512 micro-kernel (registers c0_0, c0_1 .. c13_0, c13_1 in
   scope), its first `rows` rows stored to t: 32 floats a row, t 64-byte aligned. */
#define OP_TILE_ROW_STORE(t, rows, i)                       \
    if ((rows) > i) {                                       \
        _mm512_store_ps((t) + i * 32, c##i##_0);            \
        _mm512_store_ps((t) + i * 32 + 16, c##i##_1);       \
    }
#define OP_TILE14_STORE(t, rows)                                                                   \
    do {                                                                                           \
        OP_TILE_ROW_STORE(t, rows, 0) OP_TILE_ROW_STORE(t, rows, 1) OP_TILE_ROW_STORE(t, rows, 2)  \
        OP_TILE_ROW_STORE(t, rows, 3) OP_TILE_ROW_STORE(t, rows, 4) OP_TILE_ROW_STORE(t, rows, 5)  \
        OP_TILE_ROW_STORE(t, rows, 6) OP_TILE_ROW_STORE(t, rows, 7) OP_TILE_ROW_STORE(t, rows, 8)  \
        OP_TILE_ROW_STORE(t, rows, 9) OP_TILE_ROW_STORE(t, rows, 10)                               \
        OP_TILE_ROW_STORE(t, rows, 11) OP_TILE_ROW_STORE(t, rows, 12)                              \
        OP_TILE_ROW_STORE(t, rows, 13)                                                             \
    } while (0)

/* Cache-line / vector alignment of every packed buffer. */
#define OP_ALIGN 64

static inline int64_t op_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t op_max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int op_mini(int a, int b) { return a < b ? a : b; }
static inline int op_maxi(int a, int b) { return a > b ? a : b; }
/* ceil(a / b) and a rounded up to a multiple of b, for a >= 0, b > 0. */
static inline int64_t op_cdiv64(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t op_roundup64(int64_t a, int64_t b) { return op_cdiv64(a, b) * b; }

/* 64-byte aligned allocation (size rounded up to a multiple of 64); NULL on failure or size 0 -> 64. */
static void *op_aligned_alloc(size_t size)
{
    size = (size + OP_ALIGN - 1) & ~(size_t)(OP_ALIGN - 1);
    if (size == 0) size = OP_ALIGN;
    return aligned_alloc(OP_ALIGN, size);  /* C11; size is a multiple of the alignment */
}

static void op_aligned_free(void *p) { free(p); }

#endif /* OP_COMMON_H */
