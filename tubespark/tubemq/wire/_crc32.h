/* CRC-32 (IEEE, zlib's crc32) at memory speed: carry-less folding in 512- or 256-bit registers (VPCLMULQDQ),
 * chosen once at import by what this CPU has. Included by _native.c (only there, right before its
 * crc32_ieee, which calls crc_fold_wide below); the slicing-by-8 table and the 128-bit PCLMULQDQ fold stay in
 * _native.c as the fallbacks for CPUs without these instructions.
 *
 * Why: every fetched message's checksum is checked, and at 1 KiB bodies the 128-bit fold (7.8 GB/s) was more
 * than half of the compiled decode's time while a copy of the same bytes runs at 30 GB/s
 * (docs/performance/breakdown.md, "CRC speed"). Four 128-bit lanes per instruction fold four times the bytes.
 *
 * The math (Intel, "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ", 2009), in short: a 128-bit
 * accumulator X holds data not yet reduced; to move it D bits forward onto later data, its low 64 bits (the
 * earlier, higher-degree ones in the reflected order) are carry-less multiplied by x^(D+32) mod P and its high
 * 64 bits by x^(D-32) mod P, and the two products are XORed onto the data there. A 512-bit register is four
 * such lanes side by side, so it folds onto the data 64 bytes on (D = 512), and at the end its lanes fold onto
 * the last one (D = 384, 256, 128). The constants are derived from P = 0x104C11DB7 by
 * scripts/crc32_fold_constants.py, which also runs this exact algorithm on Python integers against
 * zlib.crc32; tests/unit/tubemq/test_crc32_paths.py checks the values below are the ones it prints.
 *
 * Two details beyond the paper's main loop. Short payloads (TubeMQ bodies are often ~100 bytes) must not pay
 * for the wide registers: under 256 bytes the 512-bit path takes the 256-bit one (fewer dependent steps,
 * measured faster at 100 B), under 32 that one takes 128-bit folds only, and the last 1..15 bytes are
 * not left to the byte table: X's first r bytes are moved (with zeros in front, which do not change a
 * remainder) to fold 16 bytes on, onto X's other 16 - r bytes followed by the r tail bytes (one shuffle, one
 * blend, one fold). Then X is reduced 128 -> 64 -> 32 bits and by Barrett's method, as the 128-bit path does.
 *
 * Tests and the benchmark choose a path with the private _crc_path(); _crc_paths() lists those this CPU runs,
 * and _crc32() is zlib.crc32 by the chosen path (tests/unit/tubemq/test_crc32_paths.py, bench/crc_micro.py).
 */
#ifndef TUBESPARK_CRC32_H
#define TUBESPARK_CRC32_H

enum { CRC_TABLE, CRC_CLMUL, CRC_VPCLMUL256, CRC_VPCLMUL512, CRC_PATHS };
static const char *const crc_path_names[CRC_PATHS] = {"table", "clmul", "vpclmul256", "vpclmul512"};
static int crc_path_ok[CRC_PATHS] = {1, 0, 0, 0};
static int crc_path = CRC_TABLE; /* set at import (the fastest this CPU runs); _crc_path() changes it */

#if defined(HAVE_CLMUL) && ((defined(__clang__) && __clang_major__ >= 8) || (!defined(__clang__) && __GNUC__ >= 9))
#define HAVE_VPCLMUL 1

/* "high qword, low qword" of each fold pair (scripts/crc32_fold_constants.py prints these lines) */
#define K_FOLD_16B 0x0ccaa009eULL, 0x1751997d0ULL /* high qword, low qword */
#define K_FOLD_32B 0x15a546366ULL, 0x0f1da05aaULL /* high qword, low qword */
#define K_FOLD_48B 0x174359406ULL, 0x03db1ecdcULL /* high qword, low qword */
#define K_FOLD_64B 0x1c6e41596ULL, 0x154442bd4ULL /* high qword, low qword */
#define K_FOLD_128B 0x14a7fe880ULL, 0x1e88ef372ULL /* high qword, low qword */
#define K_FOLD_256B 0x1322d1430ULL, 0x11542778aULL /* high qword, low qword */
#define K_X64 0x000000000ULL, 0x163cd6124ULL /* high qword, low qword */
#define K_BARRETT 0x1db710641ULL, 0x1f7011641ULL /* high qword, low qword */

/* CRC_K128(K_FOLD_16B): a pair as one 128-bit value (the macro's argument expands to "high, low") */
static inline __m128i crc_k128(unsigned long long hi, unsigned long long lo) {
    return _mm_set_epi64x((long long)hi, (long long)lo);
}
#define CRC_K128(k) crc_k128(k)
#define CRC_LL2(hi, lo) (long long)(hi), (long long)(lo)
#define CRC_LL(k) CRC_LL2(k)
#define CRC_X128 __attribute__((target("pclmul,sse4.1")))
#define CRC_X256 __attribute__((target("avx2,vpclmulqdq,pclmul,sse4.1")))
#define CRC_X512 __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))

/* pshufb indices: from crc_shift + 16 + r, X's bytes r..15 moved to 0..15-r (0x80: a zero byte), which is
 * also the blend mask of the tail's bytes (high bit set at 16-r..15); from crc_shift + r, X's bytes
 * 0..r-1 moved to 16-r..15. */
static const unsigned char crc_shift[48] = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
};

CRC_X128 static inline __m128i crc_fold128(__m128i x, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* The register after the rest of the payload: ``x`` holds everything up to ``p``; ``len`` bytes remain
 * (any number), and the 16 bytes before ``p + len`` are readable (the caller consumed at least 16).
 * Inlined into each wide path so it is compiled with their VEX encoding: called as a separate SSE
 * function it would run legacy SSE code with the wide registers' upper halves dirty, and leave them so for
 * the interpreter, which cost about 200 ns a call on this CPU. */
CRC_X128 static inline __attribute__((always_inline)) uint32_t crc_finish128(__m128i x, const unsigned char *p, Py_ssize_t len) {
    const __m128i k16 = CRC_K128(K_FOLD_16B), kx64 = CRC_K128(K_X64), barrett = CRC_K128(K_BARRETT);
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    while (len >= 16) {
        x = _mm_xor_si128(crc_fold128(x, k16), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        len -= 16;
    }
    if (len) { /* 1..15 tail bytes: X's first ``len`` bytes fold 16 on, onto X's others and the tail */
        __m128i keep = _mm_loadu_si128((const __m128i *)(crc_shift + 16 + len));
        __m128i ahead = _mm_shuffle_epi8(x, _mm_loadu_si128((const __m128i *)(crc_shift + len)));
        __m128i tail = _mm_loadu_si128((const __m128i *)(p + len - 16));
        x = _mm_xor_si128(crc_fold128(ahead, k16), _mm_blendv_epi8(_mm_shuffle_epi8(x, keep), tail, keep));
    }
    /* 128 -> 64 bits (x^96 times the low half), 64 -> 32 (x^64), then Barrett's reduction */
    x = _mm_xor_si128(_mm_srli_si128(x, 8), _mm_clmulepi64_si128(x, k16, 0x10));
    x = _mm_xor_si128(_mm_srli_si128(x, 4), _mm_clmulepi64_si128(_mm_and_si128(x, mask32), kx64, 0x00));
    __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x, mask32), barrett, 0x00), mask32);
    x = _mm_xor_si128(x, _mm_clmulepi64_si128(t, barrett, 0x10));
    return (uint32_t)_mm_extract_epi32(x, 1);
}

/* 256-bit registers (AVX2 CPUs with VPCLMULQDQ but no AVX-512): the same, two lanes a register. */
CRC_X256 static uint32_t crc32_vpclmul256(uint32_t crc, const unsigned char *p, Py_ssize_t len) {
    if (len < 32) {
        __m128i x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)crc));
        return crc_finish128(x, p + 16, len - 16);
    }
    const __m256i k32 = _mm256_broadcastsi128_si256(CRC_K128(K_FOLD_32B));
    __m256i y = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p),
                                 _mm256_castsi128_si256(_mm_cvtsi32_si128((int)crc)));
#define CRC_FOLD256(a, k, d) _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(a, k, 0x00), \
                                                                _mm256_clmulepi64_epi128(a, k, 0x11)), d)
#define CRC_LOAD256(q) _mm256_loadu_si256((const __m256i *)(q))
    if (len >= 128) { /* four registers, 128 bytes a step */
        const __m256i k128 = _mm256_broadcastsi128_si256(CRC_K128(K_FOLD_128B));
        __m256i y1 = CRC_LOAD256(p + 32), y2 = CRC_LOAD256(p + 64), y3 = CRC_LOAD256(p + 96);
        for (p += 128, len -= 128; len >= 128; p += 128, len -= 128) {
            y = CRC_FOLD256(y, k128, CRC_LOAD256(p));
            y1 = CRC_FOLD256(y1, k128, CRC_LOAD256(p + 32));
            y2 = CRC_FOLD256(y2, k128, CRC_LOAD256(p + 64));
            y3 = CRC_FOLD256(y3, k128, CRC_LOAD256(p + 96));
        }
        y = CRC_FOLD256(CRC_FOLD256(CRC_FOLD256(y, k32, y1), k32, y2), k32, y3);
    } else {
        p += 32;
        len -= 32;
    }
    for (; len >= 32; p += 32, len -= 32) y = CRC_FOLD256(y, k32, CRC_LOAD256(p));
#undef CRC_FOLD256
#undef CRC_LOAD256
    /* lane 0 folds 16 bytes on, onto lane 1 */
    __m128i x = _mm_xor_si128(crc_fold128(_mm256_castsi256_si128(y), CRC_K128(K_FOLD_16B)),
                              _mm256_extracti128_si256(y, 1));
    return crc_finish128(x, p, len);
}

/* 512-bit registers: the CRC register after ``len`` >= 256 bytes, from register ``crc`` (shorter payloads
 * take the 256-bit path: fewer dependent steps, measured faster at 100 B). */
CRC_X512 static uint32_t crc32_vpclmul512(uint32_t crc, const unsigned char *p, Py_ssize_t len) {
    const __m512i k64 = _mm512_broadcast_i32x4(CRC_K128(K_FOLD_64B));
    __m512i z = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_castsi128_si512(_mm_cvtsi32_si128((int)crc)));
#define CRC_FOLD512(a, k, d) _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(a, k, 0x00), \
                                                       _mm512_clmulepi64_epi128(a, k, 0x11), d, 0x96)
    /* four registers, 256 bytes a step: four independent chains hide the multiply's latency */
    const __m512i k256 = _mm512_broadcast_i32x4(CRC_K128(K_FOLD_256B));
    __m512i z1 = _mm512_loadu_si512(p + 64), z2 = _mm512_loadu_si512(p + 128), z3 = _mm512_loadu_si512(p + 192);
    for (p += 256, len -= 256; len >= 256; p += 256, len -= 256) {
        z = CRC_FOLD512(z, k256, _mm512_loadu_si512(p));
        z1 = CRC_FOLD512(z1, k256, _mm512_loadu_si512(p + 64));
        z2 = CRC_FOLD512(z2, k256, _mm512_loadu_si512(p + 128));
        z3 = CRC_FOLD512(z3, k256, _mm512_loadu_si512(p + 192));
    }
    z = CRC_FOLD512(CRC_FOLD512(CRC_FOLD512(z, k64, z1), k64, z2), k64, z3);
    for (; len >= 64; p += 64, len -= 64) z = CRC_FOLD512(z, k64, _mm512_loadu_si512(p));
    /* lanes 0, 1, 2 fold 48, 32, 16 bytes on, onto lane 3 (whose constants are 0: its product is 0) */
    const __m512i lanes = _mm512_set_epi64(0, 0, CRC_LL(K_FOLD_16B), CRC_LL(K_FOLD_32B), CRC_LL(K_FOLD_48B));
    __m512i t = CRC_FOLD512(z, lanes, _mm512_maskz_mov_epi64(0xC0, z));
    __m256i y = _mm256_xor_si256(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    __m128i x = _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
#undef CRC_FOLD512
    return crc_finish128(x, p, len);
}

/* The register after ``len`` >= 16 bytes by the chosen wide path (crc_path is one of the two). */
static inline uint32_t crc_fold_wide(uint32_t crc, const unsigned char *p, Py_ssize_t len) {
    if (crc_path == CRC_VPCLMUL512 && len >= 256) return crc32_vpclmul512(crc, p, len);
    return crc32_vpclmul256(crc, p, len);
}
#endif /* HAVE_VPCLMUL */

/* At import: what this CPU runs, and the fastest of it. */
static void crc_choose(void) {
#ifdef HAVE_CLMUL
    __builtin_cpu_init();
    crc_path_ok[CRC_CLMUL] = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#ifdef HAVE_VPCLMUL
    int vpclmul = crc_path_ok[CRC_CLMUL] && __builtin_cpu_supports("vpclmulqdq");
    crc_path_ok[CRC_VPCLMUL256] = vpclmul && __builtin_cpu_supports("avx2");
    crc_path_ok[CRC_VPCLMUL512] = crc_path_ok[CRC_VPCLMUL256] && __builtin_cpu_supports("avx512f");
#endif
#endif
    for (int k = 0; k < CRC_PATHS; k++) {
        if (crc_path_ok[k]) crc_path = k;
    }
}

static uint32_t crc32_ieee(const unsigned char *p, Py_ssize_t len);

static PyObject *crc_py_path(PyObject *self, PyObject *args) {
    (void)self;
    const char *name = NULL;
    if (!PyArg_ParseTuple(args, "|z:_crc_path", &name)) return NULL;
    PyObject *was = PyUnicode_FromString(crc_path_names[crc_path]);
    if (!was || !name) return was;
    for (int k = 0; k < CRC_PATHS; k++) {
        if (strcmp(name, crc_path_names[k]) == 0 && crc_path_ok[k]) {
            crc_path = k;
            return was;
        }
    }
    Py_DECREF(was);
    return PyErr_Format(PyExc_ValueError, "_crc_path: %s is not a CRC path this CPU runs", name);
}

static PyObject *crc_py_paths(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    Py_ssize_t n = 0;
    for (int k = 0; k < CRC_PATHS; k++) n += crc_path_ok[k];
    PyObject *out = PyTuple_New(n);
    for (int k = 0, i = 0; out && k < CRC_PATHS; k++) {
        if (!crc_path_ok[k]) continue;
        PyObject *name = PyUnicode_FromString(crc_path_names[k]);
        if (!name) Py_CLEAR(out);
        else PyTuple_SET_ITEM(out, i++, name);
    }
    return out;
}

/* ``repeat`` > 1: the benchmark's loop in C, so a short payload's figure is the CRC's, not Python's call
 * (the volatile pointer and result keep the compiler from computing the same checksum only once). */
static PyObject *crc_py_crc32(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer view;
    Py_ssize_t repeat = 1;
    if (!PyArg_ParseTuple(args, "y*|n:_crc32", &view, &repeat)) return NULL;
    const unsigned char *volatile buf = (const unsigned char *)view.buf;
    volatile uint32_t crc = 0;
    for (Py_ssize_t i = 0; i < repeat || i == 0; i++) crc = crc32_ieee(buf, view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef crc_methods[] = {
    {"_crc_path", crc_py_path, METH_VARARGS,
     "_crc_path(name=None, /): the CRC-32 path in use (tests and bench only); with a name, use that one."},
    {"_crc_paths", crc_py_paths, METH_NOARGS, "_crc_paths(): the CRC-32 paths this CPU runs, slowest first."},
    {"_crc32", crc_py_crc32, METH_VARARGS,
     "_crc32(data, repeat=1, /): zlib.crc32(data) by the CRC-32 path in use (computed ``repeat`` times)."},
    {NULL, NULL, 0, NULL},
};

/* At import: choose the path and add the private functions above to ``module``; -1 on error. */
static int crc_setup(PyObject *module) {
    crc_choose();
    return PyModule_AddFunctions(module, crc_methods);
}

#endif /* TUBESPARK_CRC32_H */
