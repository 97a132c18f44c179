/* CRC32C (Castagnoli, reflected poly 0x82F63B78) for the quorumlog record format.
 *
 * Hardware paths: VPCLMULQDQ folding (AVX-512, else AVX2) for 256 bytes or more and the
 * SSE4.2 crc32 instruction, chosen at run time by cpuid; portable path: slicing-by-8
 * tables. Both are plain C with no Python API, so Cython calls them nogil.
 * ql_crc32c_update works on the raw (pre-inverted) register so records can be CRC'd in
 * pieces; ql_crc32c is the full function (init 0xFFFFFFFF, final xor 0xFFFFFFFF). */
#ifndef QL_CRC32C_H
#define QL_CRC32C_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Continue a CRC: `state` is the inverted register (start with 0xFFFFFFFF). */
uint32_t ql_crc32c_update(uint32_t state, const void *buf, size_t len);
/* crc32c(b"123456789") == 0xE3069283 */
uint32_t ql_crc32c(const void *buf, size_t len);
/* Portable table implementation, exposed so tests can compare it with the hardware path. */
uint32_t ql_crc32c_sw(const void *buf, size_t len);
/* 1 when the SSE4.2 path is in use. */
int ql_crc32c_hw(void);
/* The paths this CPU can run, a bit each: 1 table, 2 SSE4.2 crc32, 4 VPCLMULQDQ folding on
 * AVX-512, 8 the same on AVX2 (used from 256 bytes on, SSE4.2 below; 4 before 8); and one
 * path forced (tests compare them). */
int ql_crc32c_paths(void);
uint32_t ql_crc32c_update_path(int path, uint32_t state, const void *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
