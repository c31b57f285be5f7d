/* level_amx_emu.c: every kernel of the amx_emu build (compiler flags: LEVEL_FLAGS["amx_emu"] in build.py). */
#define OP_LEVEL_AMX_EMU 1
#define OP_LEVEL_NAME "amx_emu"
#include "kernels_all.inc"
