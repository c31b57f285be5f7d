/* api_bf16.h: C entry points of the bfloat16 kernels, identical at every ISA level (also a cffi cdef). */
