/* onepath_kernels.h: the C API of one ISA level's kernel module (every api_*.h but the probe's). */
#ifndef ONEPATH_KERNELS_H
#define ONEPATH_KERNELS_H
#include <stdint.h>
#include "api_gemm.h"
#include "api_bf16.h"
#include "api_conv.h"
#include "api_repro.h"
#include "api_small.h"
#include "api_norm.h"
#include "api_attn.h"
#include "api_stem.h"
#endif
