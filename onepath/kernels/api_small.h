/* api_small.h: the small-problem float32 GEMM (gemm_small.c), identical at every ISA level.
   Plain declarations only (read by the C compiler and by cffi as its cdef; uses api_gemm.h's types).

   C[m x n] = A[m x k] B[k x n] (+ epilogue) read in place, on the calling thread
   (op_gemm_f32_small_mt: on the thread pool): no packing, no allocation. Strides in elements (any
   sign). k == 0 writes zeros (then the epilogue). epi: NULL for none. Returns 1 (the threads used).
   a, b, c point to float32 data; they are declared void * so that Python passes any buffer
   (ffi.from_buffer(array)) without a typed conversion. */
int op_gemm_f32_small(int64_t m, int64_t n, int64_t k,
                      const void *a, int64_t rsa, int64_t csa,
                      const void *b, int64_t rsb, int64_t csb,
                      void *c, int64_t rsc, int64_t csc, const op_epilogue *epi);

/* The same on up to nthreads threads (the thread pool of threads.c): C's columns in nthreads
   ranges, each a whole number of the form's column tiles, so the bits are op_gemm_f32_small's.
   One thread, k <= 0 or one range: op_gemm_f32_small itself; the pool in use (a concurrent call):
   the calling thread alone (threads.c's op_parallel_for_short). Returns the threads used. */
int op_gemm_f32_small_mt(int64_t m, int64_t n, int64_t k,
                         const void *a, int64_t rsa, int64_t csa,
                         const void *b, int64_t rsb, int64_t csb,
                         void *c, int64_t rsc, int64_t csc, const op_epilogue *epi, int nthreads);

/* The same for C-contiguous A (m x k), B (k x n) and C (m x n), without an epilogue: the call with
   the fewest arguments to convert (the per-call cost of a 4 x 4 product is mostly the call).
   Returns 0 (nothing written) when a pointer is not float-aligned: the caller copies. */
int op_gemm_f32_small_cc(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c);

/* matmul's tiniest products straight from Python (pyfast.inc, compiled into the cffi wrapper):
   a new reference to a CPython function f(a, b) -> the product or None, as void * (the caller
   owns it), for these limits: lim (M N K of the small kernel's first limit), mt0 / mt8 (M N K
   from which matmul runs more than one thread: any rows / from 8 rows), row_kn / row_n / row_k
   (ROW_LIMITS), and for B = W.T (the nt form) its dot products (NT_NN's rows nt_rows and depth
   nt_depth, NT_DOTS_LIMITS' nt_lim). NULL when numpy or onepath._threads cannot be imported. */
void *op_pyfast_matmul_new(int64_t lim, int64_t mt0, int64_t mt8, int64_t row_kn, int64_t row_n,
                           int64_t row_k, int64_t nt_rows, int64_t nt_depth, int64_t nt_lim);
/* The same for linear's tiniest calls with a raw weight: f(x, w, bias, act) -> y or None (the
   same limits; row_* and mt8 unused). */
void *op_pyfast_linear_new(int64_t lim, int64_t mt0, int64_t mt8, int64_t row_kn, int64_t row_n,
                           int64_t row_k, int64_t nt_rows, int64_t nt_depth, int64_t nt_lim);

/* nbatch products C_e = A_e B_e (e < nbatch; A_e at a + e * bsa elements, likewise B_e and C_e;
   a batch stride of 0 broadcasts), each as op_gemm_f32_small computes it (no epilogue), whole
   entries split over up to nthreads threads of the pool (fewer entries than threads: each
   entry's columns, as op_gemm_f32_small_mt): the same bits at any thread count. Returns the
   threads used. */
int op_gemm_f32_small_batch(int64_t nbatch, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t bsa, int64_t rsa, int64_t csa,
                            const void *b, int64_t bsb, int64_t rsb, int64_t csb,
                            void *c, int64_t bsc, int64_t rsc, int64_t csc, int nthreads);

/* 1 when the nt form (A's and C's rows contiguous, B's columns contiguous: x @ W.T) of m rows and
   depth k runs as the nn form on B transposed strip by strip (gemm_small.c's op_small_nt_nn), 0
   when it runs the dot-product tiles. (AVX2 also needs 8 or more columns in the whole product:
   fewer take the dot-product tiles.) */
int op_gemm_f32_small_nt_nn(int64_t m, int64_t k);

/* Register tile of the nn form (rows x columns of C) and the kernel's name. */
int op_gemm_f32_small_mr(void);
int op_gemm_f32_small_nr(void);
const char *op_gemm_f32_small_name(void);

/* bfloat16: C-contiguous A (m x k) and B (k x n) of bfloat16 bits, float32 accumulation; C float32
   (c_bf16 = 0) or bfloat16 bits rounded once to nearest even (c_bf16 = 1). Returns 1, or 0 (nothing
   written) when a pointer is misaligned for its element type. */
int op_gemm_bf16_small_cc(int64_t m, int64_t n, int64_t k, const void *a, const void *b, void *c,
                          int c_bf16);
const char *op_gemm_bf16_small_name(void);
