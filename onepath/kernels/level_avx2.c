/* level_avx2.c: every kernel of the avx2 build (compiler flags: LEVEL_FLAGS["avx2"] in build.py). */
#define OP_LEVEL_AVX2 1
#define OP_LEVEL_NAME "avx2"
#include "kernels_all.inc"
