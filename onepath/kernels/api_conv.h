/* api_conv.h: C entry points of the convolution kernels, identical at every ISA level (also a cffi cdef).
   Plain declarations only (read by the C compiler and by cffi).

   Geometry (PyTorch conventions): output oh = (h + pt + pb - dh (kh - 1) - 1) / sh + 1 (same for w);
   the caller computes oh/ow (so bottom/right padding is implied) and guarantees oh, ow, n >= 1.
   Dilation counts from 1 (1 = dense kernel). Tensors are dense (C order) in the stated layout;
   the input may be float32 (x_bf16 = 0) or bfloat16 bits (x_bf16 = 1, widened while packing);
   weights, bias and the output are float32 (accumulation is float32). */

typedef struct {
    int64_t n, c, h, w;      /* input: batch, channels (all groups), height, width */
    int64_t oc, oh, ow;      /* output: channels (all groups), height, width */
    int64_t kh, kw;          /* kernel size */
    int64_t sh, sw;          /* stride (>= 1) */
    int64_t pt, pl;          /* top and left zero padding (>= 0) */
    int64_t dh, dw;          /* dilation (>= 1) */
    int64_t groups;          /* c and oc are multiples of groups */
    int nhwc;                /* 0: x (N,C,H,W), y (N,OC,OH,OW); 1: x (N,H,W,C), y (N,OH,OW,OC);
                                2: NCHW tensors computed in the NHWC formulation (op_conv2d_f32 and
                                op_conv2d_bf16 only: the input and output transposed around it) */
    int dw_rows;             /* op_conv2d_dw_f32, NCHW 3x3 at the AVX-512 levels: 1 runs the
                                row-register kernels where the geometry fits them (stride 1 with
                                padding 1 along W and OW = W, or stride 2), 0 the default choice;
                                with bit 2 as well, bfloat16 stride-1 rows of more than 16 columns
                                widen each plane once, then run float32 rows (op_dw3_s1r_w; the
                                registry sets the bit from DW_ROW_KERNELS' smallest width) */
} op_conv_desc;

/* Convolution as a GEMM through the level's GEMM driver and f32 micro-kernel (no im2col buffer):
   the input patches are gathered block by block while packing (implicit GEMM); a 1x1, stride-1,
   unpadded float32 convolution reads the input in place as a GEMM operand. Groups are batch entries.
   Weight layout (both layouts): (OC, C/groups, KH, KW), dense.
   bias: NULL or OC floats. act: OP_ACT_*. blk: cache blocking (NULL: level defaults).
   Returns the number of threads used (>= 1), or a negative value if memory could not be allocated. */
int op_conv2d_f32(const op_conv_desc *d, const void *x, int x_bf16, const float *w,
                  const float *bias, float *y, int act, const op_blocking *blk, int nthreads);

/* Convolution with bfloat16 input and weight (bits), float32 accumulation, on the level's BF16 GEMM
   kernels (VDPBF16PS / AMX; levels without them widen to float32). Weight layout as op_conv2d_f32.
   y: float32 (y_bf16 = 0) or bfloat16 bits rounded once from the float32 result (y_bf16 = 1).
   Same return convention (a negative value: allocation failure or an AMX fault). */
int op_conv2d_bf16(const op_conv_desc *d, const uint16_t *x, const uint16_t *w, const float *bias,
                   void *y, int y_bf16, int act, const op_blocking *blk, int nthreads);

/* Depthwise convolution (groups == C, OC = C * multiplier), direct vectorised kernel.
   Weight layout: nhwc = 0: (OC, KH, KW); nhwc = 1: (KH, KW, OC), float32 (w_bf16 = 0) or bfloat16
   bits (w_bf16 = 1, widened once). y: float32 (y_bf16 = 0) or bfloat16 bits (y_bf16 = 1: the
   float32 result rounded to nearest even in the write-out, bit for bit what op_conv_f32_to_bf16
   makes of it; only with x_bf16 = 1, as the promotion rules give, else -3). Same return
   convention. */
int op_conv2d_dw_f32(const op_conv_desc *d, const void *x, int x_bf16, const void *w, int w_bf16,
                     const float *bias, void *y, int y_bf16, int act, int nthreads);

/* Per-microarchitecture options of the float32 convolutions (bit 1: the NHWC k x k batch-reduce kernel
   takes all of K in one block while K <= 4608; bit 2: its threads split the output channels when the
   weight is larger than the padded input; bit 4: it also runs outputs whose width is a multiple of 7;
   bit 8: in the channel split each task packs its own weight panel; bit 64: pixels 4 KiB apart run it
   over a copy with C + 16 floats per pixel; bits 16 / 32, for tests: no padding-tap skips / a padded
   input copy always; bit 256: an NCHW 1x1 stride-1 convolution with OC <= 64 and C <= 256 reads its
   input in place; bit 512: an NCHW 1x1 convolution (groups 1, batch >= 2, unpadded, output planes
   of at most 3136 pixels; not those bit 256 reads in place) runs as one GEMM over all images'
   pixels: op_conv2d_nchw1x1_joint_f32 in conv_f32.c; op_conv2d_f32_joint below says which); bit
   1024: see op_conv2d_f32_a_in_place; bit 2048 (with 1024): an NCHW 1x1 problem of those two routes
   (any batch) with 49 output pixels runs its own kernel (op_conv2d_nchw1x1_n49_f32); bit 4096 (with
   2048): a strided one with 98, 147 or 196 output pixels too; bit 8192: see ukr_a_far_prefetch;
   bit 16384: NCHW k x k through the NHWC kernel image by image; bit 32768 (the avx2 module only):
   an NHWC convolution (groups 1, C >= 16; 1x1 strided only onto 49 pixels or fewer) reads its input in
   place, no im2col pack (op_conv2d_nhwc_d8_f32 in conv_f32.c); bit 65536 (with 512): the joint GEMM
   only for strided problems and planes of at most 196 pixels. Set by the kernel loader from the
   registry's CONV_F32_OPTIONS for the host; default 0. flags < 0
   only reads. Returns the flags in force before. */
int op_conv_f32_options(int flags);

/* 1 when op_conv2d_f32 runs the NCHW problem d (x_bf16: bfloat16 input) as one GEMM over all images'
   pixels (op_conv_f32_options bit 512 set and the geometry fits), whatever d->nhwc (0 or 2) says;
   else 0. */
int op_conv2d_f32_joint(const op_conv_desc *d, int x_bf16);

/* 1 when op_conv2d_f32 runs the NCHW 1x1 problem d (x_bf16: bfloat16 input) as the per-image GEMM
   out = W @ X with the weight read in place (op_conv_f32_options bit 1024 set, groups 1, unpadded,
   OC > 64, not the joint GEMM; C a multiple of 1024: its rows copied per block; strided: the sampled
   pixels copied first; with bit 2048 and 49 output pixels: the 49-pixel kernel), whatever d->nhwc
   (0 or 2) says; else 0. */
int op_conv2d_f32_a_in_place(const op_conv_desc *d, int x_bf16);

/* 1 when op_conv2d_f32 runs the NCHW 1x1 problem d (x_bf16: bfloat16 input) in the 49-pixel kernel
   (op_conv_f32_options bits 2048 and 1024; 4096 for strided planes of 98, 147 or 196 output pixels),
   whatever d->nhwc (0 or 2) says, at any batch; else 0. */
int op_conv2d_f32_n49(const op_conv_desc *d, int x_bf16);

/* Per-microarchitecture options of the bfloat16 convolutions (bit 1: an NHWC k x k convolution whose
   geometry fits runs the batch-reduce VDPBF16PS kernel that reads its padded input in place,
   op_conv2d_nhwc_brg_bf16; bit 2: that kernel skips the kernel rows in the H padding for each weight
   panel without a non-finite weight, the same bits; bit 4: where its threads split the output
   channels, each task packs its weight panel right before use; bit 8: an NHWC 1x1 stride-1 unpadded
   convolution with a bfloat16 output writes it from the GEMM kernel's registers, the same bits; bit 16,
   with bit 2: that kernel reads a padded NHWC input in place, without its padded copy, the same bits;
   bits 32 to 4096: the OP_CONV_BF16_* definitions in conv_bf16.c, each with its rule; 2048, "amx_s1",
   and 4096, "amx_stem", in the AMX builds only), set by the kernel loader from the registry's CONV_BF16_OPTIONS for the host;
   default 0; a build without the kernel a bit names ignores it. flags < 0 only reads. Returns the
   flags in force before. */
int op_conv_bf16_options(int flags);

/* Whether op_conv2d_bf16 runs the bfloat16 problem d (an NHWC stride-1 k x k convolution) on the AMX
   tiles reading the padded input per tap (op_conv2d_nhwc_amx_s1, option bit 2048) with the options in
   force: 0 or 1; always 0 in builds without AMX tiles. */
int op_conv2d_bf16_amx_s1(const op_conv_desc *d);

/* Whether op_conv2d_bf16 runs the bfloat16 problem d (an NHWC convolution with few input channels,
   C KW <= 32, KH and KW >= 3) on the AMX tiles reading the padded input per kernel row
   (op_conv2d_nhwc_amx_stem, option bit 4096) with the options in force: 0 or 1; always 0 in builds
   without AMX tiles. */
int op_conv2d_bf16_amx_stem(const op_conv_desc *d);

/* float32 -> bfloat16 bits, round to nearest even (NaN stays a quiet NaN), n elements. */
void op_conv_f32_to_bf16(const float *src, uint16_t *dst, int64_t n, int nthreads);
