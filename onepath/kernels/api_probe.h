/* api_probe.h: the CPU probe's C entry points, built with baseline x86-64 flags (also a cffi cdef).
   On a non-x86 host every call returns zeros. */

/* CPUID(leaf, subleaf) -> out[0..3] = eax, ebx, ecx, edx. */
void op_cpuid(uint32_t leaf, uint32_t subleaf, uint32_t *out);

/* XGETBV(index): the OS-enabled state (XCR0 for index 0). Returns 0 if OSXSAVE is clear. */
uint64_t op_xgetbv(uint32_t index);

/* Linux: ask for AMX tile data permission (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA).
   Returns 1 if the permission is held afterwards, 0 if refused or not Linux/x86-64. */
int op_request_amx_permission(void);
