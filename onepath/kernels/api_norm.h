/* api_norm.h: C entry point of LayerNorm, identical at every ISA level (also a cffi cdef).
   Plain declarations only. dtype codes: 0 = float32, 1 = bfloat16 (uint16_t bit patterns). */

/* LayerNorm of each of `rows` contiguous rows of d elements, in float32:
   v = x (+ res when res is not NULL), y = (v - mean) / sqrt(var + eps) (* gamma) (+ beta), with the
   mean and the biased variance (about the mean, a second pass) of v over the row. gamma / beta:
   d float32 values or NULL. y may be the very buffer of x or of res when its dtype is theirs
   (in place). A bfloat16 y is rounded once, to nearest even (NaN -> quiet NaN, as the conversions).
   Rows are split over up to nthreads threads; each row is computed by one thread in a fixed order,
   so the result does not depend on nthreads or on the level. Returns the threads used. */
int op_layer_norm(int64_t rows, int64_t d, const void *x, int x_dtype, const void *res, int res_dtype,
                  const float *gamma, const float *beta, float eps, void *y, int y_dtype, int nthreads);
