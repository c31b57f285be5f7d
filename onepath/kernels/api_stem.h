/* api_stem.h: options of the direct few-channel convolution (kernels/conv_stem.c), identical at every
   ISA level (also a cffi cdef). Plain declarations only.

   op_conv2d_f32 and op_conv2d_bf16 (api_conv.h) hand a dense k x k convolution with few input
   channels (groups 1, C <= 4, KH, KW >= 3, dilation 1: the 7x7 stride-2 stem of ResNet-50) to the
   direct kernel of conv_stem.c when its option bit is set in the module: bit 1 float32 (AVX2 and
   AVX-512 levels), bit 2 bfloat16 (levels with VDPBF16PS), bit 4 non-temporal stores of an NHWC
   float32 output over 2 MiB (its whole 64-byte lines; the same values). Set by the kernel loader
   from the registry's CONV_STEM_OPTIONS for the host; default 0 (off). flags < 0 only reads.
   Returns the flags in force before. */
int op_conv_stem_options(int flags);

/* 1 where this module's op_conv2d_f32 (bf16 0) or op_conv2d_bf16 (bf16 1) hands d to the direct
   kernel (its option bit set and the geometry fits; a band copy over 256 MiB in all still falls
   back), else 0: what the plan's descriptor text reports as ",stem". */
int op_conv2d_stem(const op_conv_desc *d, int bf16);
