/* probe.c: CPUID, XGETBV and the Linux AMX permission request (see api_probe.h).

   Built with baseline x86-64 flags only: nothing here may need an ISA extension the probe has not
   yet confirmed. XGETBV is emitted as raw bytes so no -mxsave is needed, and it is only executed once
   CPUID.1:ECX.OSXSAVE[27] says the OS set CR4.OSXSAVE (otherwise it would raise #UD).
   On a non-x86 host every entry point compiles to a stub returning zeros. */
#define _GNU_SOURCE 1

#include <stdint.h>

#include "api_probe.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>

#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

void op_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *out)
{
    unsigned int a = 0, b = 0, c = 0, d = 0;
    __cpuid_count(leaf, subleaf, a, b, c, d);
    out[0] = a;
    out[1] = b;
    out[2] = c;
    out[3] = d;
}

uint64_t op_xgetbv(uint32_t index)
{
    unsigned int a = 0, b = 0, c = 0, d = 0;
    __cpuid_count(1, 0, a, b, c, d);
    if (!(c & (1u << 27)))          /* OSXSAVE clear: XGETBV would fault */
        return 0;
    uint32_t lo = 0, hi = 0;
    /* 0f 01 d0 = xgetbv: ECX selects the XCR, result in EDX:EAX. */
    __asm__ __volatile__(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(index));
    return ((uint64_t)hi << 32) | lo;
}

int op_request_amx_permission(void)
{
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
    const long ARCH_GET_XCOMP_PERM = 0x1022;
    const long ARCH_REQ_XCOMP_PERM = 0x1023;
    const long XFEATURE_XTILEDATA = 18;
    unsigned long bitmask = 0;
    /* The request fails with EINVAL on kernels < 5.16 or CPUs without AMX; the GET below then
       decides (a permission granted earlier in the process still counts). */
    (void)syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA);
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &bitmask) != 0)
        return 0;
    return (bitmask >> XFEATURE_XTILEDATA) & 1ul ? 1 : 0;
#else
    return 0;
#endif
}

#else /* not x86 */

void op_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *out)
{
    (void)leaf;
    (void)subleaf;
    out[0] = out[1] = out[2] = out[3] = 0;
}

uint64_t op_xgetbv(uint32_t index)
{
    (void)index;
    return 0;
}

int op_request_amx_permission(void)
{
    return 0;
}

#endif
