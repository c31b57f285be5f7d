/* api_gemm.h: C entry points of the float32 GEMM, identical at every ISA level.
   This file is read twice: by the C compiler (through onepath_kernels.h) and by cffi as its cdef,
   so it holds plain declarations only (no #include, no #define, no macros).

   Conventions (BLIS terms): C[m x n] = A[m x k] * B[k x n], then the epilogue.
   Every stride is in elements, may be negative or zero, and rows/columns need not be contiguous.
   Batched calls: operand p of batch entry i starts at p + p_off[i] (elements); p_off may be NULL
   (all batch entries at offset 0). */

typedef struct {
    int64_t mc;     /* rows of A per packed block (L2-resident) */
    int64_t kc;     /* depth per packed block (A and B micro-panels L1/L2-resident) */
    int64_t nc;     /* columns of B per packed block (L3-resident) */
} op_blocking;

enum {
    OP_ACT_NONE = 0,
    OP_ACT_RELU = 1,
    OP_ACT_GELU = 2,        /* exact: 0.5 x (1 + erf(x / sqrt 2)) */
    OP_ACT_GELU_TANH = 3,   /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    OP_ACT_SILU = 4         /* x / (1 + exp(-x)) */
};

typedef struct {
    const float *bias;  /* NULL, or a bias vector (float32) */
    int64_t bias_stride;/* element stride of the bias vector */
    int bias_axis;      /* 0: bias[i] added to row i (length m); 1: bias[j] added to column j (length n) */
    int act;            /* OP_ACT_*, applied after the bias */
} op_epilogue;

/* C = A B (+ epilogue) for each batch entry. k == 0 writes zeros (then the epilogue).
   blk: cache blocking (NULL: the level's defaults). epi: NULL for none.
   nthreads: upper bound on worker threads (>= 1); the kernel may use fewer for small problems.
   Returns the number of threads used (>= 1), or a negative value if memory could not be allocated. */
int op_gemm_f32(int64_t batch, int64_t m, int64_t n, int64_t k,
                const float *a, const int64_t *a_off, int64_t rsa, int64_t csa,
                const float *b, const int64_t *b_off, int64_t rsb, int64_t csb,
                float *c, const int64_t *c_off, int64_t rsc, int64_t csc,
                const op_blocking *blk, const op_epilogue *epi, int nthreads);

/* Register blocking of this level's float32 micro-kernel (BLIS MR x NR) and its name. */
int op_gemm_f32_mr(void);
int op_gemm_f32_nr(void);
const char *op_gemm_f32_kernel_name(void);

/* Options of the float32 thin-product paths of this module (kernels/gemv_f32.c), a bit set:
   1 prefetch the next block of streamed rows into L2, 2 split x W's K (not N) across threads.
   flags < 0 only reads them. Returns the options before the call. The loader sets them per
   microarchitecture (onepath/dispatch/registry.py, GEMV_F32_OPTIONS); default 0. */
int op_gemv_f32_options(int flags);

/* Name of the ISA level this module was compiled for ("generic", "avx2", ...). */
const char *op_level_name(void);

/* FMA peak probe: runs iters iterations of independent vector FMAs on one thread.
   Returns the number of floating-point operations performed (2 per FMA lane). */
int64_t op_peak_f32(int64_t iters);
