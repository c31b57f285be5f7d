/* api_conv.h: C entry points of the convolution kernels, identical at every ISA level (also a cffi cdef). */
