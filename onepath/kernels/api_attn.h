/* api_attn.h: C entry point of multi-head self-attention, identical at every ISA level (also a cffi
   cdef). Plain declarations only. dtype codes: 0 = float32, 1 = bfloat16 (uint16_t bit patterns). */

/* For each of `batch` sequences of `seq` tokens and each of `heads` heads of hd elements
   (d = heads * hd): ctx = softmax_keys(scale * q k^T + mask) v, computed in float32.
   qkv: token rows of 3d elements [q | k | v] (head h at offset h * hd of each third), row r of
   sequence b at element (b * seq + r) * qkv_rs. mask: NULL, or float32 (batch, seq) additive key
   mask (its value for key j of sequence b is added to every score of that key), row stride mask_rs.
   ctx: row (b * seq + r) at element (b * seq + r) * ctx_rs, head h at offset h * hd; a bfloat16 ctx
   is rounded once, to nearest even. Each (sequence, head) is computed by one thread in a fixed
   order, so the bits do not depend on nthreads or on the level. Returns the threads used, or -1
   when the scratch buffers cannot be allocated. */
int op_attention(int64_t batch, int64_t seq, int64_t heads, int64_t hd,
                 const void *qkv, int qkv_dtype, int64_t qkv_rs,
                 const float *mask, int64_t mask_rs, float scale,
                 void *ctx, int ctx_dtype, int64_t ctx_rs, int nthreads);
