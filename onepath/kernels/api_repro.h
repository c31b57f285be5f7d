/* api_repro.h: C entry points of the reproducible mode (repro.c), identical at every ISA level
   (also a cffi cdef: plain declarations only).

   The contract, which makes the bits independent of the level, the thread count and the CPU vendor:
   every element C[i][j] is ONE float32 fused-multiply-add chain acc = fma(A[i][p], B[p][j], acc) for
   p = 0, 1, ..., k-1 starting from acc = -0.0f, i.e. acc = A[i][0] B[0][j] rounded once, then
   fused multiply-adds (k == 0 gives +0.0f); operands given as bfloat16 are
   widened exactly (bits << 16, subnormals kept) before the chain; threads split only M, N and the
   batch, never k; MXCSR is round-to-nearest with no flush-to-zero / denormals-are-zero while the
   chain runs. Strides and batch offsets as op_gemm_f32 (elements of each operand's own type). */

/* C (float32) = A B. a_dtype / b_dtype: 0 float32, 1 bfloat16 (uint16_t bits).
   blk: cache blocking (NULL: the level's defaults); it changes the speed, never the bits.
   Returns the threads used, or < 0 when packing buffers could not be allocated. */
int op_repro_gemm(int64_t batch, int64_t m, int64_t n, int64_t k,
                  const void *a, const int64_t *a_off, int64_t rsa, int64_t csa, int a_dtype,
                  const void *b, const int64_t *b_off, int64_t rsb, int64_t csb, int b_dtype,
                  float *c, const int64_t *c_off, int64_t rsc, int64_t csc,
                  const op_blocking *blk, int nthreads);

/* The epilogue of the reproducible mode, in place on the float32 C of op_repro_gemm:
   v = C + bias (one float32 addition; bias NULL: none; bias of batch entry i at bias + bias_off[i]
   (bias_off may be NULL), element stride bias_stride, along rows (bias_axis 0) or columns (1)),
   then act (OP_ACT_*) by the one scalar code path of repro.c. c16 non-NULL: the result is also
   rounded to bfloat16 (nearest even, subnormals kept, NaN -> quiet NaN with its sign) and stored
   at the same element offsets as C. Returns the threads used. */
int op_repro_epilogue(int64_t batch, int64_t m, int64_t n, float *c, const int64_t *c_off,
                      int64_t rsc, int64_t csc, const float *bias, const int64_t *bias_off,
                      int64_t bias_stride, int bias_axis, int act, uint16_t *c16, int nthreads);

/* The activation of the reproducible mode on n contiguous floats (y may be x). */
void op_repro_act(int64_t n, const float *x, float *y, int act);

/* Name of the level's reproducible micro-kernel (e.g. "repro_f32_avx512_core_14x32"). */
const char *op_repro_kernel_name(void);
