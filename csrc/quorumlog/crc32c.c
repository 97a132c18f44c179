/* CRC32C implementation: SSE4.2 with three interleaved streams for large buffers,
 * single stream for small ones, slicing-by-8 table fallback. See crc32c.h. */
#include "crc32c.h"
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static int initialised = 0;
static int use_hw = 0;

static void init_tables(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = table[0][n];
        for (int k = 1; k < 8; k++) {
            c = table[0][c & 0xff] ^ (c >> 8);
            table[k][n] = c;
        }
    }
}

static uint32_t sw_update(uint32_t crc, const unsigned char *p, size_t len) {
    while (len && ((uintptr_t)p & 7)) {
        crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        len--;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;   /* little-endian: the low 4 bytes meet the register */
        crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
              table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
              table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^ table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) || defined(_M_X64)
#include <nmmintrin.h>
#define QL_HAVE_X86 1

/* Shift a CRC register over `len` zero bytes is what combining needs; instead of the
 * GF(2) matrix method we use the simpler trick of computing the three streams and then
 * folding stream results through the crc instruction over zero words (cheap for the
 * fixed block length used below, done via precomputed multiplication tables). To keep
 * this small and obviously correct we combine with a table built at init for a shift of
 * BLOCK bytes: shift_table[k][b] = crc register after feeding byte b at position k of a
 * 4-byte value followed by BLOCK zero bytes. */
#define BLOCK 1024   /* bytes per stream per round: 3 streams x 1 KiB */
static uint32_t shift_tab[4][256];

__attribute__((target("sse4.2")))
static uint32_t hw_zero_shift(uint32_t crc, size_t len) {
    /* feed `len` zero bytes (len multiple of 8) */
    uint64_t c = crc;
    for (size_t i = 0; i < len; i += 8) c = _mm_crc32_u64(c, 0);
    return (uint32_t)c;
}

__attribute__((target("sse4.2")))
static void init_shift(void) {
    /* The map crc -> crc after BLOCK zero bytes is linear over GF(2), so it is the xor of
     * its values on each byte of the input register. */
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            shift_tab[k][b] = hw_zero_shift(b << (8 * k), BLOCK);
}

static inline uint32_t shift_block(uint32_t crc) {
    return shift_tab[0][crc & 0xff] ^ shift_tab[1][(crc >> 8) & 0xff] ^
           shift_tab[2][(crc >> 16) & 0xff] ^ shift_tab[3][crc >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t hw_update(uint32_t crc, const unsigned char *p, size_t len) {
    uint64_t c0 = crc;
    while (len && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    /* Three independent streams hide the 3-cycle latency of the crc32 instruction. */
    while (len >= 3 * BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *p1 = p + BLOCK, *p2 = p + 2 * BLOCK;
        for (size_t i = 0; i < BLOCK; i += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p + i, 8);
            memcpy(&w1, p1 + i, 8);
            memcpy(&w2, p2 + i, 8);
            c0 = _mm_crc32_u64(c0, w0);
            c1 = _mm_crc32_u64(c1, w1);
            c2 = _mm_crc32_u64(c2, w2);
        }
        /* crc(A||B) = shift(crc(A), |B|) xor crc0(B), where crc0 starts from 0. */
        c0 = shift_block((uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift_block((uint32_t)c0) ^ (uint32_t)c2;
        p += 3 * BLOCK;
        len -= 3 * BLOCK;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = _mm_crc32_u64(c0, w);
        p += 8;
        len -= 8;
    }
    while (len--) c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}
#endif

static void ql_init(void) {
    if (initialised) return;
    init_tables();
#ifdef QL_HAVE_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2")) {
        init_shift();
        use_hw = 1;
    }
#endif
    initialised = 1;
}

int ql_crc32c_hw(void) {
    ql_init();
    return use_hw;
}

uint32_t ql_crc32c_update(uint32_t state, const void *buf, size_t len) {
    if (!initialised) ql_init();
#ifdef QL_HAVE_X86
    if (use_hw) return hw_update(state, (const unsigned char *)buf, len);
#endif
    return sw_update(state, (const unsigned char *)buf, len);
}

uint32_t ql_crc32c(const void *buf, size_t len) {
    return ql_crc32c_update(0xFFFFFFFFu, buf, len) ^ 0xFFFFFFFFu;
}

uint32_t ql_crc32c_sw(const void *buf, size_t len) {
    if (!initialised) ql_init();
    return sw_update(0xFFFFFFFFu, (const unsigned char *)buf, len) ^ 0xFFFFFFFFu;
}
