/* CRC32C implementation: SSE4.2 with three interleaved streams (blocks of 1 KiB, 256 B
 * and 64 B), a single stream only for the last < 192 bytes, slicing-by-8 table fallback. See crc32c.h. */
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

/* Three interleaved streams hide the 3-cycle latency of the crc32 instruction (one result
 * per cycle instead of one per three). The streams are joined with
 *     crc(A||B) = shift(crc(A), |B|) xor crc0(B)      (crc0 starts from register 0)
 * where shift(c, L), feeding L zero bytes through the register, is linear over GF(2) and so
 * is the xor of per-byte table values built at init: shift_tab[t][k][b] = register after
 * byte b at position k of a 4-byte value followed by BLOCK_t zero bytes. Blocks of three
 * sizes keep the serial tail short for every record size: a 100 B message (197 CRC'd
 * bytes) runs one 3 x 64 B round instead of 24 serial steps, a 4 KiB one a 3 x 1 KiB, a
 * 3 x 256 B and at most three 3 x 64 B rounds. */
#define NTIER 3
static const size_t tier_block[NTIER] = {1024, 256, 64};
static uint32_t shift_tab[NTIER][4][256];

__attribute__((target("sse4.2")))
static uint32_t hw_zero_shift(uint32_t crc, size_t len) {
    /* feed `len` zero bytes (len multiple of 8) */
    uint64_t c = crc;
    for (size_t i = 0; i < len; i += 8) c = _mm_crc32_u64(c, 0);
    return (uint32_t)c;
}

__attribute__((target("sse4.2")))
static void init_shift(void) {
    for (int t = 0; t < NTIER; t++)
        for (int k = 0; k < 4; k++)
            for (uint32_t b = 0; b < 256; b++)
                shift_tab[t][k][b] = hw_zero_shift(b << (8 * k), tier_block[t]);
}

static inline uint32_t shift_block(const uint32_t tab[4][256], uint32_t crc) {
    return tab[0][crc & 0xff] ^ tab[1][(crc >> 8) & 0xff] ^
           tab[2][(crc >> 16) & 0xff] ^ tab[3][crc >> 24];
}

/* One round over 3 * block bytes at p, continuing register c0. `block` is a constant at
 * every call site (always_inline), so the loop is unrolled by the compiler. */
__attribute__((target("sse4.2"), always_inline))
static inline uint64_t crc3(uint64_t c0, const unsigned char *p, size_t block,
                            const uint32_t tab[4][256]) {
    uint64_t c1 = 0, c2 = 0;
    const unsigned char *p1 = p + block, *p2 = p + 2 * block;
    for (size_t i = 0; i < block; i += 8) {
        uint64_t w0, w1, w2;
        memcpy(&w0, p + i, 8);
        memcpy(&w1, p1 + i, 8);
        memcpy(&w2, p2 + i, 8);
        c0 = _mm_crc32_u64(c0, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
    }
    c0 = shift_block(tab, (uint32_t)c0) ^ (uint32_t)c1;
    c0 = shift_block(tab, (uint32_t)c0) ^ (uint32_t)c2;
    return c0;
}

__attribute__((target("sse4.2")))
static uint32_t hw_update(uint32_t crc, const unsigned char *p, size_t len) {
    uint64_t c0 = crc;
    /* no alignment prologue: unaligned 8-byte loads cost the same on current x86 */
    while (len >= 3 * 1024) {
        c0 = crc3(c0, p, 1024, shift_tab[0]);
        p += 3 * 1024;
        len -= 3 * 1024;
    }
    if (len >= 3 * 256) {
        c0 = crc3(c0, p, 256, shift_tab[1]);
        p += 3 * 256;
        len -= 3 * 256;
    }
    while (len >= 3 * 64) {
        c0 = crc3(c0, p, 64, shift_tab[2]);
        p += 3 * 64;
        len -= 3 * 64;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c0 = _mm_crc32_u64(c0, w);
        p += 8;
        len -= 8;
    }
    if (len >= 4) {
        uint32_t w;
        memcpy(&w, p, 4);
        c0 = _mm_crc32_u32((uint32_t)c0, w);
        p += 4;
        len -= 4;
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
