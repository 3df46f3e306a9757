/*
 * Byte helpers shared by bkspark's compiled modules (bkspark/protocol/_speedups.c, bookie_server/_speedups.c):
 * CRC32C (Castagnoli) chained like the crc32c package, on the CPU's crc32 instruction when it has one, and
 * big-endian loads and stores, and (where Python.h came first) an exact int's int64 value.  Everything is static:
 * each module compiles its own copy; call crc_init() once in the module's init function.
 */
#ifndef BKSPARK_BYTES_H
#define BKSPARK_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc_table[256];

static inline void crc_init_table(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static inline uint32_t crc_software(uint32_t value, const unsigned char *p, size_t n)
{
    uint32_t c = ~value;
    while (n--)
        c = (c >> 8) ^ crc_table[(c ^ *p++) & 0xff];
    return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define HAVE_CRC_HARDWARE 1
__attribute__((target("sse4.2"))) static inline uint32_t crc_hardware(uint32_t value, const unsigned char *p, size_t n)
{
    uint64_t c = (uint32_t)~value;
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#endif

static uint32_t (*crc_update)(uint32_t, const unsigned char *, size_t) = crc_software;

static inline uint64_t be64(const unsigned char *p)
{
    return ((uint64_t)p[0] << 56) | ((uint64_t)p[1] << 48) | ((uint64_t)p[2] << 40) | ((uint64_t)p[3] << 32) |
           ((uint64_t)p[4] << 24) | ((uint64_t)p[5] << 16) | ((uint64_t)p[6] << 8) | (uint64_t)p[7];
}

static inline uint32_t be32(const unsigned char *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void put_be64(unsigned char *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (unsigned char)(v & 0xff);
        v >>= 8;
    }
}

static inline void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

#ifdef Py_PYTHON_H
/* 1: the int fits int64 and was stored; 0: it does not (the reference's case); -1: an error is set. */
static inline int exact_int64(PyObject *item, int64_t *out)
{
    if (!PyLong_CheckExact(item))
        return 0;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (overflow)
        return 0;
    *out = (int64_t)v;
    return 1;
}
#endif

static inline void crc_init(void)
{
    crc_init_table();
#ifdef HAVE_CRC_HARDWARE
    __builtin_cpu_init();
    if (__builtin_cpu_supports("sse4.2"))
        crc_update = crc_hardware;
#endif
}

#endif
