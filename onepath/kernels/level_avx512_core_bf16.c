/* level_avx512_core_bf16.c: every kernel of the avx512_core_bf16 build (compiler flags: LEVEL_FLAGS["avx512_core_bf16"] in build.py). */
#define OP_LEVEL_AVX512_CORE_BF16 1
#define OP_LEVEL_NAME "avx512_core_bf16"
#include "kernels_all.inc"
