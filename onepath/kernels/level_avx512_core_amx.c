/* level_avx512_core_amx.c: every kernel of the avx512_core_amx build (compiler flags: LEVEL_FLAGS["avx512_core_amx"] in build.py). */
#define OP_LEVEL_AVX512_CORE_AMX 1
#define OP_LEVEL_NAME "avx512_core_amx"
#include "kernels_all.inc"
