/* CRC32C implementation: for 256 bytes or more, folding with VPCLMULQDQ on 512-bit
 * registers where the CPU has it (AVX-512), else on 256-bit ones (AVX2); otherwise
 * SSE4.2 with three interleaved streams (blocks of 1 KiB, 256 B and 64 B), a single
 * stream only for the last < 192 bytes; slicing-by-8 table fallback. See crc32c.h. */
#include "crc32c.h"
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static int initialised = 0;
static int use_hw = 0;
static int use_fold = 0;     /* VPCLMULQDQ on 512-bit registers (AVX-512) */
static int use_fold2 = 0;    /* VPCLMULQDQ on 256-bit registers (AVX2) */

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
#include <immintrin.h>   /* SSE4.2 crc32; PCLMUL, AVX-512 for the folding path */
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

/* Folding (the carry-less multiply method of Intel's "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ", reflected form). Why: on AMD Zen the crc32 instruction
 * issues at most one per ~2 cycles whatever the interleaving (~10 GB/s at best, ~7 in the
 * record loop), while VPCLMULQDQ folds 256 bytes per round in four 512-bit registers
 * (~40 GB/s here) -- the CRC was the largest cost of append_batch after the copy itself.
 *
 * A 16-byte lane A of the message, loaded little-endian, is the polynomial
 * Q0(x) x^64 + Q1(x) with Q0 its first 8 bytes (reflected: bit i of a qword is the
 * coefficient of x^(63-i)). Moving A forward by D bytes means multiplying by x^(8D); mod P
 * that is Q0 * (x^(8D+64) mod P) + Q1 * (x^(8D) mod P), each product under 128 bits, i.e.
 * a new lane that is xored onto the data D bytes on. A carry-less product of two reflected
 * values comes out one bit short, and the constants are kept as 32-bit reflected values
 * (bit j: x^(31-j)), 33 bits short in all: hence the exponents 8D + 31 and 8D - 33.
 * At the end one lane is left; the crc32 instruction over its 16 bytes from register 0
 * gives the register exactly (the incoming register was xored into the first 4 bytes),
 * so no Barrett reduction is needed. The constants are computed at start-up from P. */
static uint32_t fold_k[6];    /* (Q0, Q1) constants for D = 256, 64 and 16 bytes */

static uint32_t xpow_mod(unsigned n) {
    /* x^n mod P in the normal (most significant bit first) form, P = 0x1EDC6F41 */
    uint64_t r = 1;
    while (n--) {
        r <<= 1;
        if (r & 0x100000000ULL) r ^= 0x11EDC6F41ULL;
    }
    return (uint32_t)r;
}

static uint32_t reflect32(uint32_t v) {
    uint32_t r = 0;
    for (int i = 0; i < 32; i++)
        if (v & (1u << i)) r |= 1u << (31 - i);
    return r;
}

static void init_fold(void) {
    static const unsigned dist[3] = {256, 64, 16};
    for (int t = 0; t < 3; t++) {
        fold_k[2 * t] = reflect32(xpow_mod(8 * dist[t] + 31));
        fold_k[2 * t + 1] = reflect32(xpow_mod(8 * dist[t] - 33));
    }
}

#define QL_FOLD_TARGET "avx512f,avx512vl,vpclmulqdq,pclmul,sse4.2"

__attribute__((target("pclmul,sse4.2")))
static inline __m128i fold16(__m128i a, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(a, k, 0x00), _mm_clmulepi64_si128(a, k, 0x11));
}

/* Both folding paths end here: four 16-byte lanes l0..l3 (in message order) folded into
 * one, the remaining whole 16-byte lanes at p folded in, then the crc32 instruction over
 * the last lane from register 0 and the < 16 bytes left. The callers clear the upper
 * halves of the vector registers first (vzeroupper, which GCC did not emit before the
 * tail call into hw_update): left dirty, they make the caller's next legacy-SSE code slow
 * -- on this Zen 3 VM, calls alternating with a 512-byte SSE copy took 190 ns per 256 B
 * and 241 per 1 KiB on the AVX2 path against 74 and 123 on the crc32 instruction; with
 * the vzeroupper 64 and 91. */
__attribute__((target("pclmul,sse4.2")))
static inline uint32_t fold_finish(__m128i l0, __m128i l1, __m128i l2, __m128i l3,
                                   const unsigned char *p, size_t len) {
    __m128i k16 = _mm_set_epi64x(fold_k[5], fold_k[4]);
    __m128i a = _mm_xor_si128(fold16(l0, k16), l1);
    uint64_t c;
    a = _mm_xor_si128(fold16(a, k16), l2);
    a = _mm_xor_si128(fold16(a, k16), l3);
    while (len >= 16) {
        a = _mm_xor_si128(fold16(a, k16), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(a));
    c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(a, 1));
    return hw_update((uint32_t)c, p, len);
}

__attribute__((target(QL_FOLD_TARGET)))
static inline __m512i fold4(__m512i a, __m512i k, __m512i data) {
    /* four lanes at once, xored with `data` (0x96: a ^ b ^ c) */
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00),
                                     _mm512_clmulepi64_epi128(a, k, 0x11), data, 0x96);
}

/* len >= 256 */
__attribute__((target(QL_FOLD_TARGET)))
static uint32_t fold_update(uint32_t crc, const unsigned char *p, size_t len) {
    __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
    __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    __m512i k = _mm512_broadcast_i32x4(_mm_set_epi64x(fold_k[1], fold_k[0]));
    __m128i l0, l1, l2, l3;
    x0 = _mm512_xor_si512(x0, _mm512_castsi128_si512(_mm_cvtsi32_si128((int)crc)));
    p += 256;
    len -= 256;
    while (len >= 256) {
        x0 = fold4(x0, k, _mm512_loadu_si512(p));
        x1 = fold4(x1, k, _mm512_loadu_si512(p + 64));
        x2 = fold4(x2, k, _mm512_loadu_si512(p + 128));
        x3 = fold4(x3, k, _mm512_loadu_si512(p + 192));
        p += 256;
        len -= 256;
    }
    k = _mm512_broadcast_i32x4(_mm_set_epi64x(fold_k[3], fold_k[2]));
    x1 = fold4(x0, k, x1);
    x2 = fold4(x1, k, x2);
    x3 = fold4(x2, k, x3);
    while (len >= 64) {
        x3 = fold4(x3, k, _mm512_loadu_si512(p));
        p += 64;
        len -= 64;
    }
    l0 = _mm512_extracti32x4_epi32(x3, 0);
    l1 = _mm512_extracti32x4_epi32(x3, 1);
    l2 = _mm512_extracti32x4_epi32(x3, 2);
    l3 = _mm512_extracti32x4_epi32(x3, 3);
    _mm256_zeroupper();             /* see fold_finish */
    return fold_finish(l0, l1, l2, l3, p, len);
}

/* The same folding on 256-bit registers (VPCLMULQDQ with AVX2, no AVX-512: e.g. AMD Zen 3):
 * eight registers of two lanes each keep the 256-byte round and its constants; register
 * pairs then play the part of the 512-bit registers above. */
#define QL_FOLD2_TARGET "avx2,vpclmulqdq,pclmul,sse4.2"

__attribute__((target(QL_FOLD2_TARGET)))
static inline __m256i fold2(__m256i a, __m256i k, __m256i data) {
    return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(a, k, 0x00),
                                             _mm256_clmulepi64_epi128(a, k, 0x11)), data);
}

#define QL_LOAD256(q) _mm256_loadu_si256((const __m256i *)(q))

/* len >= 256 */
__attribute__((target(QL_FOLD2_TARGET)))
static uint32_t fold2_update(uint32_t crc, const unsigned char *p, size_t len) {
    __m256i y0 = QL_LOAD256(p), y1 = QL_LOAD256(p + 32), y2 = QL_LOAD256(p + 64);
    __m256i y3 = QL_LOAD256(p + 96), y4 = QL_LOAD256(p + 128), y5 = QL_LOAD256(p + 160);
    __m256i y6 = QL_LOAD256(p + 192), y7 = QL_LOAD256(p + 224);
    __m256i k = _mm256_broadcastsi128_si256(_mm_set_epi64x(fold_k[1], fold_k[0]));
    __m128i l0, l1, l2, l3;
    y0 = _mm256_xor_si256(y0, _mm256_zextsi128_si256(_mm_cvtsi32_si128((int)crc)));
    p += 256;
    len -= 256;
    while (len >= 256) {
        y0 = fold2(y0, k, QL_LOAD256(p));
        y1 = fold2(y1, k, QL_LOAD256(p + 32));
        y2 = fold2(y2, k, QL_LOAD256(p + 64));
        y3 = fold2(y3, k, QL_LOAD256(p + 96));
        y4 = fold2(y4, k, QL_LOAD256(p + 128));
        y5 = fold2(y5, k, QL_LOAD256(p + 160));
        y6 = fold2(y6, k, QL_LOAD256(p + 192));
        y7 = fold2(y7, k, QL_LOAD256(p + 224));
        p += 256;
        len -= 256;
    }
    k = _mm256_broadcastsi128_si256(_mm_set_epi64x(fold_k[3], fold_k[2]));
    y2 = fold2(y0, k, y2);          /* the 64-byte groups (y0 y1) .. (y6 y7) into (y6 y7) */
    y3 = fold2(y1, k, y3);
    y4 = fold2(y2, k, y4);
    y5 = fold2(y3, k, y5);
    y6 = fold2(y4, k, y6);
    y7 = fold2(y5, k, y7);
    while (len >= 64) {
        y6 = fold2(y6, k, QL_LOAD256(p));
        y7 = fold2(y7, k, QL_LOAD256(p + 32));
        p += 64;
        len -= 64;
    }
    l0 = _mm256_castsi256_si128(y6);
    l1 = _mm256_extracti128_si256(y6, 1);
    l2 = _mm256_castsi256_si128(y7);
    l3 = _mm256_extracti128_si256(y7, 1);
    _mm256_zeroupper();             /* see fold_finish */
    return fold_finish(l0, l1, l2, l3, p, len);
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
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                __builtin_cpu_supports("vpclmulqdq") && __builtin_cpu_supports("pclmul")) {
            use_fold = 1;
        }
        /* available (and tested) on an AVX-512 CPU too; ql_crc32c_update prefers use_fold */
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("vpclmulqdq") &&
                __builtin_cpu_supports("pclmul")) {
            use_fold2 = 1;
        }
        if (use_fold || use_fold2) init_fold();
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
    if (use_fold && len >= 256) return fold_update(state, (const unsigned char *)buf, len);
    if (use_fold2 && len >= 256) return fold2_update(state, (const unsigned char *)buf, len);
    if (use_hw) return hw_update(state, (const unsigned char *)buf, len);
#endif
    return sw_update(state, (const unsigned char *)buf, len);
}

int ql_crc32c_paths(void) {
    ql_init();
    return 1 | (use_hw ? 2 : 0) | (use_fold ? 4 : 0) | (use_fold2 ? 8 : 0);
}

uint32_t ql_crc32c_update_path(int path, uint32_t state, const void *buf, size_t len) {
    const unsigned char *p = (const unsigned char *)buf;
    ql_init();
#ifdef QL_HAVE_X86
    if (path == 4 && use_fold) return len >= 256 ? fold_update(state, p, len) : hw_update(state, p, len);
    if (path == 8 && use_fold2)
        return len >= 256 ? fold2_update(state, p, len) : hw_update(state, p, len);
    if (path == 2 && use_hw) return hw_update(state, p, len);
#endif
    return sw_update(state, p, len);
}

uint32_t ql_crc32c(const void *buf, size_t len) {
    return ql_crc32c_update(0xFFFFFFFFu, buf, len) ^ 0xFFFFFFFFu;
}

uint32_t ql_crc32c_sw(const void *buf, size_t len) {
    if (!initialised) ql_init();
    return sw_update(0xFFFFFFFFu, (const unsigned char *)buf, len) ^ 0xFFFFFFFFu;
}
