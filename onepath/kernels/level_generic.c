/* level_generic.c: every kernel of the generic build (compiler flags: LEVEL_FLAGS["generic"] in build.py). */
#define OP_LEVEL_GENERIC 1
#define OP_LEVEL_NAME "generic"
#include "kernels_all.inc"
