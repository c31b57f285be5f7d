/* cvt_bf16.c: float32 <-> bfloat16 conversion kernels of one level (see api_bf16.h for the contract).

   float32 -> bfloat16 rounds to nearest even with the integer trick (u + 0x7FFF + lsb) >> 16, which
   also rounds past-the-largest values to Inf and keeps subnormals; NaN becomes the quiet NaN with the
   input's sign (0x7FC0 / 0xFFC0), as ml_dtypes does. The AVX512_BF16 build uses VCVTNE2PS2BF16 for
   chunks free of NaN and subnormal inputs (the instruction treats subnormal inputs as zero and keeps
   NaN payloads, neither of which is ml_dtypes' result), the integer path for the others. */

OP_INLINE uint16_t op_f32_to_bf16_1(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)(((u >> 16) & 0x8000u) | 0x7FC0u);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

OP_INLINE float op_bf16_to_f32_1(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#if defined(OP_HAS_AVX512)
/* 16 floats (bits in u) -> 16 bfloat16 in the low halves of 32-bit lanes (integer path). */
OP_INLINE __m512i op_cvt16_int(__m512i u)
{
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)),
                                                  _mm512_set1_epi32(0x7F800000));
    const __m512i qnan = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x8000)),
                                         _mm512_set1_epi32(0x7FC0));
    return _mm512_mask_mov_epi32(r, nan, qnan);
}
#endif

#if defined(OP_HAS_AVX512) && defined(__AVX512BF16__)
/* 1 when a lane of x0 or x1 is NaN or subnormal (VFPCLASSPS classes 0x01 QNaN, 0x20 subnormal,
   0x80 SNaN): those lanes take the integer path (op_cvt16_int, ml_dtypes' results), since
   VCVTNE2PS2BF16 flushes subnormals; zeros, Inf and the rest round alike by the instruction. */
OP_INLINE int op_bf16_special32(__m512 x0, __m512 x1)
{
    return (_mm512_fpclass_ps_mask(x0, 0xA1) | _mm512_fpclass_ps_mask(x1, 0xA1)) != 0;
}
#endif

static void op_cvt_f32_to_bf16_run(int64_t n, const float *src, uint16_t *dst)
{
    int64_t i = 0;
#if defined(OP_HAS_AVX512)
#if defined(__AVX512BF16__)
    for (; i + 32 <= n; i += 32) {
        const __m512i u0 = _mm512_loadu_si512((const void *)(src + i));
        const __m512i u1 = _mm512_loadu_si512((const void *)(src + i + 16));
        if (OP_LIKELY(!op_bf16_special32(_mm512_castsi512_ps(u0), _mm512_castsi512_ps(u1)))) {
            const __m512bh h = _mm512_cvtne2ps_pbh(_mm512_castsi512_ps(u1), _mm512_castsi512_ps(u0));
            _mm512_storeu_si512((void *)(dst + i), (__m512i)h);
        } else {
            _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(op_cvt16_int(u0)));
            _mm256_storeu_si256((__m256i *)(dst + i + 16), _mm512_cvtepi32_epi16(op_cvt16_int(u1)));
        }
    }
#endif
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_loadu_si512((const void *)(src + i));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(op_cvt16_int(u)));
    }
    if (i < n) {
        const __mmask16 k = (__mmask16)((1u << (n - i)) - 1u);
        const __m512i u = _mm512_maskz_loadu_epi32(k, src + i);
        _mm512_mask_cvtepi32_storeu_epi16(dst + i, k, op_cvt16_int(u));
        i = n;
    }
#elif defined(OP_HAS_AVX2)
    for (; i + 16 <= n; i += 16) {
        __m256i r[2];
        for (int h = 0; h < 2; h++) {
            const __m256i u = _mm256_loadu_si256((const __m256i *)(src + i + 8 * h));
            const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            __m256i x = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7FFF))), 16);
            /* NaN: |u| > 0x7F800000 as signed ints (|u| < 2^31) */
            const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)),
                                                   _mm256_set1_epi32(0x7F800000));
            const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x8000)),
                                              _mm256_set1_epi32(0x7FC0));
            r[h] = _mm256_blendv_epi8(x, q, nan);
        }
        /* values fit 16 bits: unsigned-saturating pack is exact; fix the 128-bit lane order */
        const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(dst + i), p);
    }
#endif
    for (; i < n; i++) dst[i] = op_f32_to_bf16_1(src[i]);
}

static void op_cvt_bf16_to_f32_run(int64_t n, const uint16_t *src, float *dst)
{
    int64_t i = 0;
#if defined(OP_HAS_AVX512)
    for (; i + 16 <= n; i += 16) {
        const __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512((void *)(dst + i), _mm512_slli_epi32(h, 16));
    }
#elif defined(OP_HAS_AVX2)
    for (; i + 8 <= n; i += 8) {
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
#endif
    for (; i < n; i++) dst[i] = op_bf16_to_f32_1(src[i]);
}

#define OP_CVT_CHUNK 65536

typedef struct {
    int64_t n;
    const void *src;
    void *dst;
    int to_bf16;
} op_cvt_ctx;

static void op_cvt_task(void *ctx, int64_t t, int tid)
{
    (void)tid;
    const op_cvt_ctx *x = (const op_cvt_ctx *)ctx;
    const int64_t i0 = t * OP_CVT_CHUNK, len = op_min64(OP_CVT_CHUNK, x->n - i0);
    if (x->to_bf16)
        op_cvt_f32_to_bf16_run(len, (const float *)x->src + i0, (uint16_t *)x->dst + i0);
    else
        op_cvt_bf16_to_f32_run(len, (const uint16_t *)x->src + i0, (float *)x->dst + i0);
}

static int op_cvt_par(int64_t n, const void *src, void *dst, int to_bf16, int nthreads)
{
    if (n <= 0) return 1;
    op_cvt_ctx x = {n, src, dst, to_bf16};
    const int64_t tasks = op_cdiv64(n, OP_CVT_CHUNK);
    return op_parallel_for(nthreads < 1 ? 1 : nthreads, tasks, op_cvt_task, &x);
}

int op_cvt_f32_to_bf16(int64_t n, const float *src, uint16_t *dst, int nthreads)
{
    return op_cvt_par(n, src, dst, 1, nthreads);
}

int op_cvt_bf16_to_f32(int64_t n, const uint16_t *src, float *dst, int nthreads)
{
    return op_cvt_par(n, src, dst, 0, nthreads);
}
