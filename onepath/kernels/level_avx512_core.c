/* level_avx512_core.c: every kernel of the avx512_core build (compiler flags: LEVEL_FLAGS["avx512_core"] in build.py). */
#define OP_LEVEL_AVX512_CORE 1
#define OP_LEVEL_NAME "avx512_core"
#include "kernels_all.inc"
