/* api_bf16.h: C entry points of the bfloat16 kernels, identical at every ISA level (also a cffi cdef).
   Plain declarations only (read by the C compiler through onepath_kernels.h and by cffi).

   bfloat16 values travel as uint16_t bit patterns (ml_dtypes' bfloat16 layout).
   dtype codes (the *_dtype arguments): 0 = float32, 1 = bfloat16.
   Levels without BF16 hardware implement every function by widening bfloat16 to float32 while
   packing and running the level's float32 micro-kernel. */

/* float32 -> bfloat16, round to nearest even; NaN -> quiet NaN with the sign kept (0x7FC0 / 0xFFC0,
   as ml_dtypes); +-Inf, signed zeros and subnormals kept; overflow rounds to Inf. Bit-exact with
   ml_dtypes' astype. Contiguous arrays of n elements. Returns the number of threads used. */
int op_cvt_f32_to_bf16(int64_t n, const float *src, uint16_t *dst, int nthreads);
/* bfloat16 -> float32 (exact: the bits shifted left by 16). */
int op_cvt_bf16_to_f32(int64_t n, const uint16_t *src, float *dst, int nthreads);

/* C = A B (+ epilogue) with A, B bfloat16, float32 accumulation. c_dtype 0: C is float32;
   1: C is bfloat16, rounded once (after the epilogue). Strides and offsets as op_gemm_f32, in
   elements of each operand's own type. Returns the threads used, or < 0 on allocation failure. */
int op_gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k,
                 const uint16_t *a, const int64_t *a_off, int64_t rsa, int64_t csa,
                 const uint16_t *b, const int64_t *b_off, int64_t rsb, int64_t csb,
                 void *c, const int64_t *c_off, int64_t rsc, int64_t csc, int c_dtype,
                 const op_blocking *blk, const op_epilogue *epi, int nthreads);

/* Prepacked right operand (a Linear weight): B (k x n, element strides rsb/csb, dtype b_dtype) packed
   once into this level's micro-panel layout for the bfloat16 kernel (b_dtype 1) or the float32 one
   (b_dtype 0). op_pack_b_bytes gives the buffer size (bytes, 64-byte aligned buffer expected). */
int64_t op_pack_b_bytes(int b_dtype, int64_t k, int64_t n);
int op_pack_b(int b_dtype, int64_t k, int64_t n, const void *b, int64_t rsb, int64_t csb,
              void *dst, int nthreads);
/* C = A Bpacked (+ epilogue); A has dtype b_dtype (the packed dtype); c_dtype as op_gemm_bf16. */
int op_gemm_packed(int b_dtype, int64_t batch, int64_t m, int64_t n, int64_t k,
                   const void *a, const int64_t *a_off, int64_t rsa, int64_t csa,
                   const void *bpacked, void *c, const int64_t *c_off, int64_t rsc, int64_t csc,
                   int c_dtype, const op_blocking *blk, const op_epilogue *epi, int nthreads);

/* Register blocking and name of this level's bfloat16 micro-kernel (the AMX level reports its tile
   kernel; it runs the VDPBF16PS kernel for small M). */
int op_gemm_bf16_mr(void);
int op_gemm_bf16_nr(void);
const char *op_gemm_bf16_kernel_name(void);
/* Name of the kernel op_gemm_bf16 / op_gemm_packed(1, ...) runs for m rows and depth k; b_form: 1
   when B is a raw W^T (rsb == 1, columns at least k apart), 2 a prepacked B (op_gemm_packed), else 0
   (small M differs with B's form). */
const char *op_gemm_bf16_kernel_for(int64_t m, int64_t k, int b_form);

/* Per-microarchitecture variants of this level's bfloat16 kernels, flags OR-ed:
     1  small-M products (m <= 4 at the AVX-512 levels) with a raw (n x k) or prepacked weight
        multiply with VDPBF16PS (else: the weight widened to float32 in register, FMAs); with a
        raw weight (and a prepacked one, except at the AMX level), also 5 to 48 rows (k <= 8192),
        in passes of 4 rows (else: the GEMM);
     2  the VDPBF16PS GEMM kernel reads a row-major A (k contiguous) in place (else: A packed);
     4  the VDPBF16PS GEMM kernel writes a bfloat16 C (columns contiguous) from its registers when
        one KC block holds all of K (else: a float tile the driver rounds into C);
     8  the VDPBF16PS GEMM of at most 256 rows sweeps B in blocks of at most 256 columns (else: the
        NC it is given); the same sums.
    16  the driver fetches the next B micro-panel of the VDPBF16PS GEMM into L2 while the micro-kernel
        passes over the current one (else: the micro-kernel's own prefetch only); the same sums.
    32  below the AMX level, a product of at least 49 rows runs avx512_core's float32 kernels on
        widened operands (else: the VDPBF16PS kernel).
    64  the AMX GEMM (real or emulated tiles) passes each B micro-panel in depth chunks of 256,
        every row panel per chunk, the float partial sums kept between chunks (else: each row
        panel over the whole KC block at once); the same sums.
   Default 0. Process-wide for this level's module; dispatch sets them from the registry's
   BF16_VARIANTS rule for the host's microarchitecture. Returns the flags now in force (only those
   this level has: 0 at a level without VDPBF16PS or AMX tiles, whatever was asked). */
int op_gemm_bf16_set_variants(int flags);
