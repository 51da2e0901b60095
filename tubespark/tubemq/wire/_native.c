/* The compiled twin of TubeMQ's hot wire paths (tubespark/tubemq/wire/twin.py selects it at import): a frame
 * out of a reader's buffer (frame.py), a fetch's answer to columns (fetch.py), a successful response envelope
 * (envelope.py), a SendMessage request and its answer (send.py).
 *
 * Why it exists: decoding a GetMessageResponseB2C message by message in Python (protobuf objects, a CRC
 * call, a bytes slice and five list appends per message) cost about 2.3 us per 100-byte row, most of a
 * Spark read's CPU. Here one pass over the response bytes writes the columns of the read schema straight
 * into flat buffers Arrow takes as they are (docs/performance/hotpath.md).
 *
 * What it does NOT decide: every answer it gives is one the pure-Python path gives too, and anything the
 * pure-Python path would reject, or that this code is not sure about (a field with an unexpected wire
 * type, a group, an over-long varint, a checksum mismatch, a bad attribute prefix, a missing required
 * field, an error text that is not UTF-8), makes it return None: the caller then runs the pure-Python
 * decoder on the same bytes, which raises the one typed error with its one text. So error semantics live
 * in one place (message.py, envelope.py) and this file only ever takes the well-formed fast lane.
 *
 * Wire facts: protobuf encoding of broker_service.proto's GetMessageResponseB2C and TransferedMessage
 * (docs/tubemq/protocol.md), the payload layout and checksum of docs/tubemq/protocol.md "Message payload".
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- CRC-32 (IEEE) */
/* The checksum TubeMQ puts in TransferedMessage.checkSum: zlib's CRC-32 of the payload, masked to 31 bits.
 * Slicing-by-8 tables, built once at import. */

static uint32_t crc_table[8][256];

static void crc_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
/* Carry-less multiplication folding (Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"):
 * 64 bytes a step, 4-8x the table's speed on 1 KiB payloads. The constants are powers of x modulo the
 * reflected IEEE polynomial: x^(4*128+-32) for the 4-lane fold (R1, R2), x^(128+-32) for the 1-lane fold
 * (R3, R4), x^64 for the 64->32 bit fold (R5), and the polynomial with its Barrett constant. */
#include <immintrin.h>
#define HAVE_CLMUL 1

__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold16(__m128i x, __m128i data, __m128i k) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x11), _mm_clmulepi64_si128(x, k, 0x00)), data);
}

/* The CRC register after ``len`` bytes (len >= 64, a multiple of 16), from register ``crc``. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(uint32_t crc, const unsigned char *p,
                                                                     Py_ssize_t len) {
    const __m128i r2r1 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);
    const __m128i r4r3 = _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL);
    const __m128i r5 = _mm_set_epi64x(0, 0x163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x1f7011641LL, 0x1db710641LL); /* Barrett u, P */
    const __m128i mask32 = _mm_set_epi32(0, 0, 0, -1);
    __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32)), x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;
    while (len >= 64) {
        x1 = fold16(x1, _mm_loadu_si128((const __m128i *)p), r2r1);
        x2 = fold16(x2, _mm_loadu_si128((const __m128i *)(p + 16)), r2r1);
        x3 = fold16(x3, _mm_loadu_si128((const __m128i *)(p + 32)), r2r1);
        x4 = fold16(x4, _mm_loadu_si128((const __m128i *)(p + 48)), r2r1);
        p += 64;
        len -= 64;
    }
    x1 = fold16(x1, x2, r4r3);
    x1 = fold16(x1, x3, r4r3);
    x1 = fold16(x1, x4, r4r3);
    while (len >= 16) {
        x1 = fold16(x1, _mm_loadu_si128((const __m128i *)p), r4r3);
        p += 16;
        len -= 16;
    }
    /* 128 -> 64 bits (R4 times the low half), then 64 -> 32 (R5), then Barrett's reduction */
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), _mm_clmulepi64_si128(x1, r4r3, 0x10));
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 4), _mm_clmulepi64_si128(_mm_and_si128(x1, mask32), r5, 0x00));
    __m128i t = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, mask32), poly, 0x10), mask32);
    x1 = _mm_xor_si128(x1, _mm_clmulepi64_si128(t, poly, 0x00));
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

#endif
#include "_crc32.h" /* the 256/512-bit folds, and which path runs (chosen at import) */

/* The CRC register ``c`` after ``len`` more bytes: a checksum is crc32_ieee's, or, for bytes that lie in several
 * runs, this run by run from 0xFFFFFFFF, the register xor 0xFFFFFFFF at the end. */
static inline uint32_t crc32_update(uint32_t c, const unsigned char *p, Py_ssize_t len) {
#ifdef HAVE_VPCLMUL
    if (crc_path >= CRC_VPCLMUL256 && len >= 16) return crc_fold_wide(c, p, len);
#endif
#ifdef HAVE_CLMUL
    if (crc_path == CRC_CLMUL && len >= 64) {
        Py_ssize_t n = len & ~(Py_ssize_t)15;
        c = crc32_clmul(c, p, n);
        p += n;
        len -= n;
    }
#endif
    while (len && ((uintptr_t)p & 7)) {
        c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
        len--;
    }
    while (len >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
#if PY_BIG_ENDIAN
        lo = __builtin_bswap32(lo);
        hi = __builtin_bswap32(hi);
#endif
        lo ^= c;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^ crc_table[5][(lo >> 16) & 0xFF] ^
            crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--) c = crc_table[0][(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

static uint32_t crc32_ieee(const unsigned char *p, Py_ssize_t len) {
    return crc32_update(0xFFFFFFFFu, p, len) ^ 0xFFFFFFFFu;
}

/* ------------------------------------------------------------------------------------ protobuf reading */

typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cursor;

/* A varint of at most 10 bytes whose value fits 64 bits; 0 for anything else (the caller gives up). */
static int read_varint_long(Cursor *c, uint64_t *out) {
    uint64_t value = 0;
    for (int i = 0; i < 10; i++) {
        if (c->p >= c->end) return 0;
        unsigned char b = *c->p++;
        if (i == 9 && b > 1) return 0;
        value |= (uint64_t)(b & 0x7F) << (7 * i);
        if (!(b & 0x80)) {
            *out = value;
            return 1;
        }
    }
    return 0;
}

/* read_varint_long, inline with a lane for one byte: most varints of an answer (every tag, the flag, a
 * 100 B body's length) are one byte, and a call per varint was the largest part of the compiled decode at
 * 100 B (docs/performance/breakdown.md). The same result for every input. */
static inline int read_varint(Cursor *c, uint64_t *out) {
    if (c->p < c->end && *c->p < 0x80) {
        *out = *c->p++;
        return 1;
    }
    return read_varint_long(c, out);
}

/* A tag of at most 5 bytes, field number >= 1; 0 for anything else. */
static int read_tag(Cursor *c, uint32_t *field, uint32_t *wire_type) {
    const unsigned char *start = c->p;
    uint64_t tag;
    if (!read_varint(c, &tag) || c->p - start > 5 || tag > 0xFFFFFFFFu || (tag >> 3) == 0) return 0;
    *field = (uint32_t)(tag >> 3);
    *wire_type = (uint32_t)(tag & 7);
    return 1;
}

static int read_length(Cursor *c, const unsigned char **data, Py_ssize_t *len) {
    uint64_t n;
    if (!read_varint(c, &n) || n > (uint64_t)(c->end - c->p)) return 0;
    *data = c->p;
    *len = (Py_ssize_t)n;
    c->p += n;
    return 1;
}

/* Skip an unknown field of wire type 0, 1, 2 or 5; groups (3, 4) and the rest are not taken. */
static int skip_field(Cursor *c, uint32_t wire_type) {
    uint64_t v;
    const unsigned char *d;
    Py_ssize_t n;
    switch (wire_type) {
    case 0: return read_varint(c, &v);
    case 1: if (c->end - c->p < 8) return 0; c->p += 8; return 1;
    case 2: return read_length(c, &d, &n);
    case 5: if (c->end - c->p < 4) return 0; c->p += 4; return 1;
    default: return 0;
    }
}

typedef struct {
    int64_t message_id;
    int32_t checksum;
    int32_t flag;
    const unsigned char *payload;
    Py_ssize_t payload_len;
} Transfered;

/* One TransferedMessage: every field required; the last of a repeated field wins, as protobuf merges. */
static int read_message(const unsigned char *data, Py_ssize_t len, Transfered *m) {
    Cursor c = {data, data + len};
    int seen = 0;
    while (c.p < c.end) {
        uint32_t field, wt;
        uint64_t v;
        if (!read_tag(&c, &field, &wt)) return 0;
        if (field == 1 || field == 2 || field == 4) {
            if (wt != 0 || !read_varint(&c, &v)) return 0;
            if (field == 1) m->message_id = (int64_t)v;
            else if (field == 2) m->checksum = (int32_t)(uint32_t)v;
            else m->flag = (int32_t)(uint32_t)v;
            seen |= 1 << field;
        } else if (field == 3) {
            if (wt != 2 || !read_length(&c, &m->payload, &m->payload_len)) return 0;
            seen |= 1 << 3;
        } else if (!skip_field(&c, wt)) {
            return 0;
        }
    }
    return seen == ((1 << 1) | (1 << 2) | (1 << 3) | (1 << 4));
}

/* ------------------------------------------------------------------ arguments both twins take alike */
/* The fast lane takes only arguments the pure-Python twin takes the same way: an int that is not a bool
 * (protobuf refuses a bool for an integer field, and True must never be sent as 1), text as str (protobuf
 * checks bytes for UTF-8 on its own terms), a body as bytes (protobuf refuses bytearray and memoryview),
 * None only where the pure twin reads None as "unset". Anything else raises TypeError here, which send.py
 * answers by running the pure-Python twin on the same values: it encodes them or raises its own error, so
 * both twins give one answer (issue 24). The decoders answer None instead, for the same reason. */

static int plain_int(PyObject *o) { return PyLong_Check(o) && !PyBool_Check(o); }

static int take_int(PyObject *o, long long lo, long long hi, long long *out) {
    if (!plain_int(o)) {
        PyErr_SetString(PyExc_TypeError, "not an int (a bool is not taken as one)");
        return 0;
    }
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (v == -1 && PyErr_Occurred()) return 0;
    if (overflow || v < lo || v > hi) {
        PyErr_SetString(PyExc_OverflowError, "value out of range");
        return 0;
    }
    *out = v;
    return 1;
}

/* A str as UTF-8 (``optional``: None gives NULL, the field unset). */
static int take_text(PyObject *o, int optional, const char **s, Py_ssize_t *n) {
    if (optional && o == Py_None) {
        *s = NULL;
        *n = 0;
        return 1;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "not a str");
        return 0;
    }
    *s = PyUnicode_AsUTF8AndSize(o, n);
    return *s != NULL;
}

static int take_bytes(PyObject *o, const char **d, Py_ssize_t *n) {
    if (!PyBytes_Check(o)) {
        PyErr_SetString(PyExc_TypeError, "not bytes");
        return 0;
    }
    *d = PyBytes_AS_STRING(o);
    *n = PyBytes_GET_SIZE(o);
    return 1;
}

/* authInfo: None (none sent) or a (visitAuthorizedToken, authAuthorizedToken) tuple, as send.py passes it. */
static int take_auth(PyObject *o, int *auth, long long *visit, const char **token, Py_ssize_t *token_len) {
    *auth = o != Py_None;
    if (!*auth) return 1;
    if (!PyTuple_Check(o) || PyTuple_GET_SIZE(o) != 2) {
        PyErr_SetString(PyExc_TypeError, "auth is not a (visit token, signed token) pair");
        return 0;
    }
    return take_int(PyTuple_GET_ITEM(o, 0), LLONG_MIN, LLONG_MAX, visit) &&
           take_text(PyTuple_GET_ITEM(o, 1), 0, token, token_len);
}

/* -------------------------------------------------------------------------------------- read_fetch */

/* Distinct attribute texts of one fetch: an open-addressing table of (offset, length) into the response. */
typedef struct {
    const unsigned char *text;
    Py_ssize_t len;
    uint32_t hash;
    int32_t index;
} Slot;

typedef struct {
    Slot *slots;
    size_t mask;
    int32_t count;
    const unsigned char **texts;
    Py_ssize_t *lens;
    size_t capacity;
} TextTable;

static uint32_t hash_text(const unsigned char *p, Py_ssize_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++) h = (h ^ p[i]) * 16777619u;
    return h;
}

static int table_init(TextTable *t) {
    memset(t, 0, sizeof(*t));
    t->mask = 63;
    t->slots = PyMem_Calloc(t->mask + 1, sizeof(Slot));
    t->capacity = 16;
    t->texts = PyMem_Malloc(t->capacity * sizeof(*t->texts));
    t->lens = PyMem_Malloc(t->capacity * sizeof(*t->lens));
    return t->slots && t->texts && t->lens;
}

static void table_free(TextTable *t) {
    PyMem_Free(t->slots);
    PyMem_Free(t->texts);
    PyMem_Free(t->lens);
}

static int table_grow(TextTable *t) {
    size_t size = (t->mask + 1) * 2;
    Slot *slots = PyMem_Calloc(size, sizeof(Slot));
    if (!slots) return 0;
    for (size_t i = 0; i <= t->mask; i++) {
        Slot *s = &t->slots[i];
        if (!s->index) continue;
        size_t j = s->hash & (size - 1);
        while (slots[j].index) j = (j + 1) & (size - 1);
        slots[j] = *s;
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->mask = size - 1;
    return 1;
}

/* Index (>= 1) of ``text`` among the fetch's distinct texts, adding it when new; -1 when out of memory. ``keep``
 * (a list, or NULL when ``text`` stays where it is for the whole walk): a new text is copied into a bytes object
 * appended to it, which the table refers to instead (a text that straddles two blocks is pieced together in a
 * bytes object the walk lets go of). */
static int32_t table_index(TextTable *t, const unsigned char *text, Py_ssize_t len, PyObject *keep) {
    uint32_t h = hash_text(text, len);
    size_t j = h & t->mask;
    for (;;) {
        Slot *s = &t->slots[j];
        if (!s->index) break;
        if (s->hash == h && s->len == len && memcmp(s->text, text, (size_t)len) == 0) return s->index;
        j = (j + 1) & t->mask;
    }
    if ((size_t)t->count >= t->capacity) {
        size_t cap = t->capacity * 2;
        const unsigned char **texts = PyMem_Realloc(t->texts, cap * sizeof(*texts));
        if (!texts) return -1;
        t->texts = texts;
        Py_ssize_t *lens = PyMem_Realloc(t->lens, cap * sizeof(*lens));
        if (!lens) return -1;
        t->lens = lens;
        t->capacity = cap;
    }
    if (keep != NULL) {
        PyObject *copy = PyBytes_FromStringAndSize((const char *)text, len);
        if (copy == NULL || PyList_Append(keep, copy) < 0) {
            Py_XDECREF(copy);
            PyErr_Clear(); /* the caller raises MemoryError */
            return -1;
        }
        Py_DECREF(copy); /* the list holds it */
        text = (const unsigned char *)PyBytes_AS_STRING(copy);
    }
    t->texts[t->count] = text;
    t->lens[t->count] = len;
    t->count++;
    Slot *s = &t->slots[j];
    s->text = text;
    s->len = len;
    s->hash = h;
    s->index = t->count; /* 0 marks an empty slot; index 0 of the result means "no attribute prefix" */
    if ((size_t)t->count * 2 > t->mask && !table_grow(t)) return -1;
    return t->count;
}

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* ---------------------------------------------------------------- bytes that lie in a frame's blocks */
/* A fetch answer arrives as a frame of 8 KiB blocks, each behind its length. Joining them into one payload
 * copied every body once more than the walk below needs (docs/performance/breakdown.md, "The block join"):
 * the walk reads them where they arrived instead, as runs of bytes (Seg). What straddles two blocks is read
 * where its pieces lie (a message, about one in seven at 1 KiB: read_message_runs), or pieced together when it
 * is small (a field's first bytes, an attribute text, the envelope's headers, the error text). */

typedef struct {
    const unsigned char *p;
    Py_ssize_t len;
} Seg;

/* The runs of bytes [start, start + len) (len < 0: to the end) of the payload that the blocks in [raw, raw + raw_len)
 * make when joined (the blocks: each a big-endian int32 length then that many bytes, nothing else): *segs (PyMem_Malloc'd, the
 * caller frees it) and their count. 1; 0 when raw is not made so or the range is not all in it; -1 with a
 * Python error (no memory). */
static int block_segments(const unsigned char *raw, Py_ssize_t raw_len, Py_ssize_t start, Py_ssize_t len,
                          Seg **segs, Py_ssize_t *nseg) {
    Py_ssize_t pos = 0, count = 0, joined = 0;
    while (pos < raw_len) {
        if (raw_len - pos < 4) return 0;
        Py_ssize_t n = (Py_ssize_t)be32(raw + pos);
        if (n > raw_len - pos - 4) return 0;
        pos += 4 + n;
        joined += n;
        count++;
    }
    if (len < 0 && start >= 0 && start <= joined) len = joined - start; /* to the end */
    if (start < 0 || len < 0 || start > joined || len > joined - start) return 0;
    Seg *s = PyMem_Malloc((size_t)(count ? count : 1) * sizeof(Seg));
    if (s == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t k = 0, at = 0, end = start + len;
    for (pos = 0; pos < raw_len;) {
        Py_ssize_t n = (Py_ssize_t)be32(raw + pos);
        const unsigned char *block = raw + pos + 4;
        Py_ssize_t lo = start > at ? start : at, hi = end < at + n ? end : at + n;
        if (hi > lo) {
            s[k].p = block + (lo - at);
            s[k].len = hi - lo;
            k++;
        }
        at += n;
        pos += 4 + n;
    }
    *segs = s;
    *nseg = k;
    return 1;
}

/* What read_fetch_blocks, join_blocks and locate_blocks make of the runs they found (a new reference; NULL with a
 * Python error; None when not sure). */
typedef PyObject *(*BuildRuns)(const Seg *segs, Py_ssize_t nseg, void *context);

/* block_segments over the bytes of ``raw``: ``build``'s object for the runs of [start, start + len), None when
 * ``raw`` is not a frame's blocks or the range is not in it; NULL with a Python error. The one body of the three
 * functions over a frame's blocks, which differ only in what they build (as with_response for envelopes). */
static PyObject *with_runs(PyObject *raw, Py_ssize_t start, Py_ssize_t len, BuildRuns build, void *context) {
    Py_buffer buf;
    if (PyObject_GetBuffer(raw, &buf, PyBUF_SIMPLE) < 0) return NULL;
    Seg *segs = NULL;
    Py_ssize_t nseg = 0;
    PyObject *result = NULL;
    switch (block_segments(buf.buf, buf.len, start, len, &segs, &nseg)) {
    case 1:
        result = build(segs, nseg, context);
        break;
    case 0:
        result = Py_NewRef(Py_None);
        break;
    default:
        break;
    }
    PyMem_Free(segs);
    PyBuffer_Release(&buf);
    return result;
}

/* A reading position in runs of bytes. One run (a contiguous answer) never gathers anything. */
typedef struct {
    const Seg *segs;
    Py_ssize_t nseg, i;           /* segs[i] holds the next unread byte */
    const unsigned char *p, *end; /* the unread bytes of segs[i] */
    Py_ssize_t rest;              /* the bytes of the runs after segs[i] (w_left: all unread bytes) */
    unsigned char peeked[16];     /* w_peek's gathered bytes */
    unsigned char *scratch;       /* w_take's gathered bytes (PyMem_Malloc'd; w_free) */
    Py_ssize_t scratch_cap;
    int gathered;                 /* whether the last w_take gathered (its bytes live until the next one) */
} Walker;

/* Past runs read to their end (and empty ones), unless it is the last. */
static void w_next(Walker *w) {
    w->i++;
    w->p = w->segs[w->i].p;
    w->end = w->p + w->segs[w->i].len;
    w->rest -= w->segs[w->i].len;
}

static void w_settle(Walker *w) {
    while (w->p == w->end && w->i + 1 < w->nseg) w_next(w);
}

/* The unread bytes in all. */
static inline Py_ssize_t w_left(const Walker *w) { return (w->end - w->p) + w->rest; }

static void w_init(Walker *w, const Seg *segs, Py_ssize_t nseg) {
    memset(w, 0, sizeof(*w));
    w->segs = segs;
    w->nseg = nseg;
    for (Py_ssize_t k = 1; k < nseg; k++) w->rest += segs[k].len;
    if (nseg) {
        w->p = segs[0].p;
        w->end = w->p + segs[0].len;
        w_settle(w);
    }
}

static void w_free(Walker *w) { PyMem_Free(w->scratch); }

/* w_skip across runs. */
static void w_skip_runs(Walker *w, Py_ssize_t n) {
    while (n > w->end - w->p) {
        n -= w->end - w->p;
        w_next(w);
    }
    w->p += n;
    w_settle(w);
}

/* Consume n bytes (n <= left). Inline with a lane for bytes within the current run, as every byte of a
 * contiguous answer and most of a 8 KiB block are: a call per field was a tenth of the walk at 100 B. */
static inline void w_skip(Walker *w, Py_ssize_t n) {
    if (n < w->end - w->p) {
        w->p += n;
        return;
    }
    w_skip_runs(w, n);
}

/* Copy n bytes (n <= left) from the position to out, consuming nothing. */
static void w_copy(const Walker *w, unsigned char *out, Py_ssize_t n) {
    const unsigned char *p = w->p, *end = w->end;
    Py_ssize_t i = w->i;
    while (n > 0) {
        Py_ssize_t here = end - p < n ? end - p : n;
        memcpy(out, p, (size_t)here);
        out += here;
        n -= here;
        if (n > 0) {
            i++;
            p = w->segs[i].p;
            end = p + w->segs[i].len;
        }
    }
}

/* The next min(want, left) bytes (want <= 16) in one piece, not consumed: in place, or copied into w->peeked
 * when they straddle runs; their count in *got. For a field's tag and varint (at most 15 bytes). */
static inline const unsigned char *w_peek(Walker *w, Py_ssize_t want, Py_ssize_t *got) {
    if (w->end - w->p >= want) { /* the run holds them: the usual case */
        *got = want;
        return w->p;
    }
    Py_ssize_t left = w_left(w), n = want < left ? want : left;
    *got = n;
    if (w->end - w->p >= n) return w->p;
    w_copy(w, w->peeked, n);
    return w->peeked;
}

/* w_take of bytes that reach the end of the current run or beyond it. */
static const unsigned char *w_take_runs(Walker *w, Py_ssize_t n) {
    if (w->end - w->p >= n) {
        const unsigned char *d = w->p;
        w->gathered = 0;
        w_skip(w, n);
        return d;
    }
    if (n > w->scratch_cap) {
        Py_ssize_t cap = n > 2 * w->scratch_cap ? n : 2 * w->scratch_cap;
        unsigned char *grown = PyMem_Realloc(w->scratch, (size_t)cap);
        if (grown == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        w->scratch = grown;
        w->scratch_cap = cap;
    }
    w_copy(w, w->scratch, n);
    w->gathered = 1;
    w_skip(w, n);
    return w->scratch;
}

/* The next n bytes (n <= left) in one piece, consumed: in place when one run holds them, else gathered into
 * the scratch buffer (valid until the next gathering w_take). NULL with a Python error when out of memory. */
static inline const unsigned char *w_take(Walker *w, Py_ssize_t n) {
    if (n < w->end - w->p) {
        const unsigned char *d = w->p;
        w->p += n;
        w->gathered = 0;
        return d;
    }
    return w_take_runs(w, n);
}

/* w_length of a varint that may straddle runs. */
static int w_length_runs(Walker *w, Py_ssize_t *n) {
    Py_ssize_t got;
    const unsigned char *h = w_peek(w, 10, &got);
    Cursor c = {h, h + got};
    uint64_t v;
    if (!read_varint(&c, &v) || v > (uint64_t)(w_left(w) - (c.p - h))) return 0;
    w_skip(w, c.p - h);
    *n = (Py_ssize_t)v;
    return 1;
}

/* A varint-delimited length at the position, checked against what is left: 1 with *n set and the varint
 * consumed; 0 when not sure. Inline, with a lane for a varint the current run holds whole. */
static inline int w_length(Walker *w, Py_ssize_t *n) {
    if (w->end - w->p > 10) {
        Cursor c = {w->p, w->end};
        uint64_t v;
        if (!read_varint(&c, &v) || v > (uint64_t)((w->end - c.p) + w->rest)) return 0;
        w->p = c.p; /* < end: the run held more than the 10 bytes a varint takes at most */
        *n = (Py_ssize_t)v;
        return 1;
    }
    return w_length_runs(w, n);
}

/* One TransferedMessage of ``len`` bytes that straddles runs (read_message's checks), consumed from ``w``: 1 with
 * *m's integer fields and payload_len set, *payload where its payload starts (a copy of the walker to read it
 * from: w_peek, w_skip and w_copy only, never w_take); 0 when not sure. Its payload is not gathered: the body is
 * copied once, from where it lies into the values (issue 40: each body copied once). */
static int read_message_runs(Walker *w, Py_ssize_t len, Transfered *m, Walker *payload) {
    Py_ssize_t after = w_left(w) - len; /* what follows the message */
    int seen = 0;
    while (w_left(w) > after) {
        Py_ssize_t got, in_message = w_left(w) - after, n;
        const unsigned char *h = w_peek(w, 16, &got);
        Cursor c = {h, h + (got < in_message ? got : in_message)}; /* the message's bytes only */
        uint32_t field, wt;
        uint64_t v;
        if (!read_tag(&c, &field, &wt)) return 0;
        if (field == 1 || field == 2 || field == 4) {
            if (wt != 0 || !read_varint(&c, &v)) return 0;
            w_skip(w, c.p - h);
            if (field == 1) m->message_id = (int64_t)v;
            else if (field == 2) m->checksum = (int32_t)(uint32_t)v;
            else m->flag = (int32_t)(uint32_t)v;
            seen |= 1 << field;
        } else if (wt == 2) { /* the payload (field 3), or a field to skip */
            w_skip(w, c.p - h);
            if (!w_length(w, &n) || n > w_left(w) - after) return 0;
            if (field == 3) {
                *payload = *w;
                m->payload_len = n;
                seen |= 1 << 3;
            }
            w_skip(w, n);
        } else {
            if (field == 3 || !skip_field(&c, wt)) return 0;
            w_skip(w, c.p - h);
        }
    }
    return seen == ((1 << 1) | (1 << 2) | (1 << 3) | (1 << 4));
}

/* The CRC-32 of ``n`` bytes (n <= left) from a walker's position, run by run (consumes nothing). */
static uint32_t crc_runs(const Walker *w, Py_ssize_t n) {
    const unsigned char *p = w->p, *end = w->end;
    Py_ssize_t i = w->i;
    uint32_t c = 0xFFFFFFFFu;
    for (;;) {
        Py_ssize_t here = end - p < n ? end - p : n;
        c = crc32_update(c, p, here);
        n -= here;
        if (n == 0) return c ^ 0xFFFFFFFFu;
        i++;
        p = w->segs[i].p;
        end = p + w->segs[i].len;
    }
}

PyDoc_STRVAR(read_fetch_doc,
"read_fetch(data, step, verify[, start[, into, at]]) -> tuple | None\n\n"
"A GetMessageResponseB2C in one walk: its header fields and its messages as flat little-endian buffers,\n"
"(success, errCode, errMsg, currOffset, maxOffset, count, message_ids int64[n], offsets int64[n],\n"
"value_offsets int32[n+1], values, text_index int32[n], texts, uniform). Row k's offset is start + step*k,\n"
"``start`` the answer's currOffset unless given (-1 for every row when step is 0); text_index[k] is 0 for a\n"
"message without attribute prefix, else 1 + the position in ``texts`` (each distinct attribute text once,\n"
"as bytes); ``uniform`` the text index every row has when they all have the same one, else -1 (the Arrow\n"
"batch then repeats one value instead of gathering per row). None when the pure-Python twin must decide:\n"
"a structure it is not sure of (it raises the typed error for garbage), a checksum mismatch (with\n"
"verify), a bad attribute length, an errMsg that is not UTF-8.\n\n"
"``into`` (a bytearray with room for len(data) bytes from ``at``): the values are written there, from ``at``, and\n"
"``values`` is ``into``, the value offsets counted from its start, so that a reader's consecutive answers put\n"
"their values one after the other in one buffer and a batch of several takes them with no copy. Nothing\n"
"below ``at`` is written; after a None the bytes from ``at`` are undefined.");

/* The per-row buffers of read_fetch, grown by doubling: the walk learns the message count as it goes (one
 * walk, no count first). Bytes objects of refcount 1, so _PyBytes_Resize reallocates them in place. */
typedef struct {
    PyObject *ids;           /* int64[cap] */
    PyObject *value_offsets; /* int32[cap + 1] */
    PyObject *index;         /* int32[cap] */
    Py_ssize_t cap;
} Rows;

static int rows_resize(Rows *r, Py_ssize_t cap) {
    if (_PyBytes_Resize(&r->ids, cap * 8) < 0 || _PyBytes_Resize(&r->value_offsets, (cap + 1) * 4) < 0 ||
        _PyBytes_Resize(&r->index, cap * 4) < 0)
        return 0;
    r->cap = cap;
    return 1;
}

/* The walk of read_fetch and read_fetch_blocks over the answer's bytes (runs of them: segs), with their parsed
 * arguments; its result as read_fetch's. */
static PyObject *walk_fetch(const Seg *segs, Py_ssize_t nseg, long long step, int verify, int from_curr,
                            long long start, PyObject *into, Py_ssize_t at) {
    Walker w;
    w_init(&w, segs, nseg);
    Py_ssize_t total = w_left(&w);
    if (into != Py_None && (at < 0 || at > INT32_MAX - total || PyByteArray_GET_SIZE(into) - at < total))
        return PyErr_Format(PyExc_ValueError, "into: no room for %zd bytes from %zd (int32 offsets)", total, at);
    PyObject *values = NULL, *offsets = NULL, *texts = NULL, *msg = NULL, *result = NULL, *kept = NULL;
    TextTable table;
    int table_ok = 0;
    /* a message takes at least 10 bytes of the answer; most take far more (100 B bodies: about 140) */
    Rows rows = {NULL, NULL, NULL, total / 128 + 16};
    rows.ids = PyBytes_FromStringAndSize(NULL, rows.cap * 8);
    rows.value_offsets = PyBytes_FromStringAndSize(NULL, (rows.cap + 1) * 4);
    rows.index = PyBytes_FromStringAndSize(NULL, rows.cap * 4);
    /* every body lies in the answer: its length bounds the values */
    values = into == Py_None ? PyBytes_FromStringAndSize(NULL, total) : Py_NewRef(into);
    kept = PyList_New(0); /* copies of what was pieced together and must outlive it: texts, the error text */
    if (!rows.ids || !rows.value_offsets || !rows.index || !values || !kept) goto error;
    if (!(table_ok = table_init(&table))) {
        PyErr_NoMemory();
        goto error;
    }

    int seen = 0, success = 0;
    int32_t err_code = 0;
    const unsigned char *err_msg = NULL;
    Py_ssize_t err_msg_len = 0, written = 0, n = 0;
    int64_t curr_offset = 0, max_offset = 0;
    unsigned char *value_out = into == Py_None ? (unsigned char *)PyBytes_AS_STRING(values)
                                               : (unsigned char *)PyByteArray_AS_STRING(into) + at;
    const unsigned char *last_text = NULL; /* one producer's messages share a text: compare before hashing */
    Py_ssize_t last_len = -1;
    int32_t last_index = 0;
    int32_t uniform = -2; /* -2: no row yet; -1: rows differ */
    ((int32_t *)PyBytes_AS_STRING(rows.value_offsets))[0] = (int32_t)at;
    while (w.p < w.end) { /* (runs are never empty: w.p == w.end only at the end) */
        uint32_t field, wt;
        uint64_t v;
        Py_ssize_t got, len;
        const unsigned char *h = w_peek(&w, 16, &got), *d;
        Cursor c = {h, h + got};
        if (!read_tag(&c, &field, &wt)) goto fallback;
        switch (field) {
        case 1: case 2: case 5: case 6: case 7: case 8: case 9: case 10: /* the header's integers */
            if (wt != 0 || !read_varint(&c, &v)) goto fallback;
            w_skip(&w, c.p - h);
            if (field == 1) success = v != 0;
            else if (field == 2) err_code = (int32_t)(uint32_t)v;
            else if (field == 5) curr_offset = (int64_t)v;
            else if (field == 10) max_offset = (int64_t)v;
            seen |= 1 << field;
            continue;
        case 3: case 4: /* errMsg, a message: below */
            if (wt != 2) goto fallback;
            w_skip(&w, c.p - h);
            break;
        default:
            if (wt == 2) {
                w_skip(&w, c.p - h);
                if (!w_length(&w, &len)) goto fallback;
                w_skip(&w, len);
            } else {
                if (!skip_field(&c, wt)) goto fallback;
                w_skip(&w, c.p - h);
            }
            continue;
        }
        if (!w_length(&w, &len)) goto fallback;
        if (field == 3) {
            if ((d = w_take(&w, len)) == NULL) goto error;
            err_msg = d;
            err_msg_len = len;
            if (w.gathered) { /* the next gathering take overwrites it */
                PyObject *copy = PyBytes_FromStringAndSize((const char *)d, len);
                if (copy == NULL || PyList_Append(kept, copy) < 0) {
                    Py_XDECREF(copy);
                    goto error;
                }
                Py_DECREF(copy);
                err_msg = (const unsigned char *)PyBytes_AS_STRING(copy);
            }
            continue;
        }
        /* A message: in place when its run holds it; else read where its pieces lie (read_message_runs), its
         * payload from ``payload``, so that its body too is copied once, into the values. */
        Transfered m = {0, 0, 0, NULL, 0};
        Walker payload;
        int split = len > w.end - w.p;
        if (!split) {
            d = w.p;
            w_skip(&w, len);
            if (!read_message(d, len, &m)) goto fallback;
        } else if (!read_message_runs(&w, len, &m, &payload)) {
            goto fallback;
        }
        if (verify) {
            uint32_t crc = split ? crc_runs(&payload, m.payload_len) : crc32_ieee(m.payload, m.payload_len);
            if ((int32_t)(crc & 0x7FFFFFFFu) != m.checksum) goto fallback;
        }
        Py_ssize_t body_len = m.payload_len, prefix = 0;
        int32_t text_index = 0;
        if (m.flag & 1) { /* MSG_FLAG_HAS_ATTRIBUTES */
            if (m.payload_len < 4) goto fallback;
            unsigned char head[4];
            if (split) w_copy(&payload, head, 4);
            uint32_t attr_len = be32(split ? head : m.payload);
            if (attr_len > 0x7FFFFFFFu || (Py_ssize_t)attr_len > m.payload_len - 4) goto fallback;
            const unsigned char *text = m.payload + 4;
            PyObject *pieced = NULL; /* a text that straddles runs, in one piece */
            if (split) {
                w_skip(&payload, 4);
                text = payload.p;
                if ((Py_ssize_t)attr_len > payload.end - payload.p) {
                    pieced = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)attr_len);
                    if (pieced == NULL) goto error;
                    w_copy(&payload, (unsigned char *)PyBytes_AS_STRING(pieced), (Py_ssize_t)attr_len);
                    text = (const unsigned char *)PyBytes_AS_STRING(pieced);
                }
                w_skip(&payload, (Py_ssize_t)attr_len);
            }
            if ((Py_ssize_t)attr_len == last_len && memcmp(last_text, text, attr_len) == 0) {
                text_index = last_index;
            } else {
                text_index = table_index(&table, text, (Py_ssize_t)attr_len, pieced ? kept : NULL);
                if (text_index < 0) {
                    Py_XDECREF(pieced);
                    PyErr_NoMemory();
                    goto error;
                }
                last_text = table.texts[text_index - 1]; /* where the table keeps it: it outlives a pieced one */
                last_len = (Py_ssize_t)attr_len;
                last_index = text_index;
            }
            Py_XDECREF(pieced);
            prefix = 4 + (Py_ssize_t)attr_len;
            body_len = m.payload_len - prefix;
        }
        if (n == rows.cap && !rows_resize(&rows, rows.cap * 2)) goto error;
        if (split)
            w_copy(&payload, value_out + written, body_len); /* (payload is at the body: past the prefix) */
        else
            memcpy(value_out + written, m.payload + prefix, (size_t)body_len);
        written += body_len;
        ((int64_t *)PyBytes_AS_STRING(rows.ids))[n] = m.message_id;
        ((int32_t *)PyBytes_AS_STRING(rows.index))[n] = text_index;
        if (uniform != text_index) uniform = uniform == -2 ? text_index : -1;
        n++;
        ((int32_t *)PyBytes_AS_STRING(rows.value_offsets))[n] = (int32_t)(at + written);
    }
    if ((seen & 6) != 6) goto fallback; /* success and errCode are required */
    msg = PyUnicode_DecodeUTF8((const char *)err_msg, err_msg_len, "strict");
    if (msg == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) goto error;
        PyErr_Clear();
        goto fallback;
    }
    if (!rows_resize(&rows, n) || (into == Py_None && _PyBytes_Resize(&values, written) < 0)) goto error;
    offsets = PyBytes_FromStringAndSize(NULL, n * 8);
    if (!offsets) goto error;
    if (from_curr) start = curr_offset;
    int64_t *offset_out = (int64_t *)PyBytes_AS_STRING(offsets);
    for (Py_ssize_t k = 0; k < n; k++) offset_out[k] = step ? (int64_t)start + (int64_t)step * (int64_t)k : -1;
    texts = PyList_New(table.count);
    if (!texts) goto error;
    for (int32_t i = 0; i < table.count; i++) {
        PyObject *text = PyBytes_FromStringAndSize((const char *)table.texts[i], table.lens[i]);
        if (!text) goto error;
        PyList_SET_ITEM(texts, i, text);
    }
    result = Py_BuildValue("(NiNLLnNNNNNNi)", PyBool_FromLong(success), (int)err_code, msg, (long long)curr_offset,
                           (long long)max_offset, n, rows.ids, offsets, rows.value_offsets, values, rows.index,
                           texts, uniform == -2 ? -1 : (int)uniform);
    msg = rows.ids = offsets = rows.value_offsets = values = rows.index = texts = NULL; /* taken by the tuple */
    goto done;

fallback:
    result = Py_NewRef(Py_None);
    goto done;
error:
    result = NULL;
done:
    Py_XDECREF(msg);
    Py_XDECREF(rows.ids);
    Py_XDECREF(offsets);
    Py_XDECREF(rows.value_offsets);
    Py_XDECREF(values);
    Py_XDECREF(rows.index);
    Py_XDECREF(texts);
    Py_XDECREF(kept);
    if (table_ok) table_free(&table);
    w_free(&w);
    return result;
}

/* read_fetch's and read_fetch_blocks' shared arguments: step, verify, start, into, at. 1; 0 when the pure-Python
 * twin decides (None); -1 with a Python error. */
static int fetch_args(PyObject *step_obj, PyObject *start_obj, PyObject *into, long long *step, long long *start) {
    if (into != Py_None && !PyByteArray_CheckExact(into)) {
        PyErr_SetString(PyExc_TypeError, "into: a bytearray");
        return -1;
    }
    if (!plain_int(step_obj) || (start_obj != Py_None && !plain_int(start_obj))) return 0; /* see take_int */
    int overflow = 0;
    *step = PyLong_AsLongLongAndOverflow(step_obj, &overflow);
    if (overflow) return 0; /* beyond int64: Python's integers decide */
    *start = 0;
    if (start_obj != Py_None) {
        *start = PyLong_AsLongLongAndOverflow(start_obj, &overflow);
        if (overflow) return 0;
    }
    return 1;
}

static PyObject *read_fetch(PyObject *self, PyObject *args) {
    PyObject *data, *step_obj, *start_obj = Py_None, *into = Py_None;
    int verify;
    Py_ssize_t at = 0;
    long long step, start;
    if (!PyArg_ParseTuple(args, "OOp|OOn", &data, &step_obj, &verify, &start_obj, &into, &at)) return NULL;
    int ok = fetch_args(step_obj, start_obj, into, &step, &start);
    if (ok < 0) return NULL;
    if (!ok || !PyObject_CheckBuffer(data)) Py_RETURN_NONE;
    Py_buffer buf;
    if (PyObject_GetBuffer(data, &buf, PyBUF_SIMPLE) < 0) return NULL;
    Seg seg = {buf.buf, buf.len};
    PyObject *result = walk_fetch(&seg, 1, step, verify, start_obj == Py_None, start, into, at);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(read_fetch_blocks_doc,
"read_fetch_blocks(raw, start, length, step, verify, into, at) -> tuple | None\n\n"
"read_fetch(data, step, verify, None, into, at) of the answer that is the bytes [start, start + length) (a\n"
"negative length: to the end) of the\n"
"payload the blocks in ``raw`` make when joined (a frame's blocks as they arrived: each a big-endian int32\n"
"length, then its bytes), read where they lie: each body is copied once, into the values, also when its\n"
"message straddles two blocks. None\n"
"also when ``raw`` is not made so.");

/* read_fetch_blocks' arguments, for its BuildRuns. */
typedef struct {
    long long step;
    int verify;
    PyObject *into;
    Py_ssize_t at;
} FetchRuns;

static PyObject *build_fetch(const Seg *segs, Py_ssize_t nseg, void *context) {
    const FetchRuns *f = context;
    return walk_fetch(segs, nseg, f->step, f->verify, 1, 0, f->into, f->at);
}

static PyObject *read_fetch_blocks(PyObject *self, PyObject *args) {
    PyObject *raw, *step_obj;
    FetchRuns f;
    Py_ssize_t start, length;
    long long unused;
    if (!PyArg_ParseTuple(args, "OnnOpOn", &raw, &start, &length, &step_obj, &f.verify, &f.into, &f.at)) return NULL;
    int ok = fetch_args(step_obj, Py_None, f.into, &f.step, &unused);
    if (ok < 0) return NULL;
    if (!ok || !PyObject_CheckBuffer(raw)) Py_RETURN_NONE;
    return with_runs(raw, start, length, build_fetch, &f);
}

PyDoc_STRVAR(new_buffer_doc,
"new_buffer(size) -> bytearray\n\n"
"A bytearray of ``size`` bytes left as malloc gives them (``bytearray(size)`` zeroes them first: as much work\n"
"as a copy), for read_fetch's ``into``.");

static PyObject *new_buffer(PyObject *self, PyObject *arg) {
    Py_ssize_t size = PyLong_AsSsize_t(arg);
    if (size == -1 && PyErr_Occurred()) return NULL;
    if (size < 0) return PyErr_Format(PyExc_ValueError, "size %zd < 0", size);
    return PyByteArray_FromStringAndSize(NULL, size);
}

/* ------------------------------------------------------------------------------- response envelope */

/* One varint-delimited message: [start, start+len) of the envelope, or 0. */
static int read_delimited(Cursor *c, Cursor *message) {
    const unsigned char *d;
    Py_ssize_t n;
    if (!read_length(c, &d, &n)) return 0;
    message->p = d;
    message->end = d + n;
    return 1;
}

/* The varint fields ``wanted`` (a bit per field number < 32) of a message without length-delimited fields
 * of interest; other fields are skipped. 0 when not sure. */
static int read_varints(Cursor m, uint32_t wanted, uint64_t *values, uint32_t *seen) {
    *seen = 0;
    while (m.p < m.end) {
        uint32_t field, wt;
        if (!read_tag(&m, &field, &wt)) return 0;
        if (field < 32 && (wanted >> field) & 1) {
            if (wt != 0 || !read_varint(&m, &values[field])) return 0;
            *seen |= 1u << field;
        } else if (!skip_field(&m, wt)) {
            return 0;
        }
    }
    return 1;
}

PyDoc_STRVAR(decode_response_doc,
"decode_response(payload) -> (method, data) | None\n\n"
"A successful response envelope (RpcConnHeader flag 1, ResponseHeader SUCCESS, RspResponseBody); None for\n"
"anything else (an RPC exception, garbage, an unusual encoding): envelope.py decides those.");

/* The walk decode_response and locate_response share: RpcConnHeader flag 1 (a response), ResponseHeader
 * status SUCCESS (0) only, RspResponseBody's method (field 1, int32) and data (field 2, bytes), both required.
 * 1 with *method, *data and *data_len set; 0 for anything else (the pure-Python twin then decides). */
static int walk_response(const Py_buffer *buf, int *method_out, const unsigned char **data, Py_ssize_t *data_len) {
    Cursor c = {buf->buf, (const unsigned char *)buf->buf + buf->len}, conn, header, body;
    uint64_t values[32];
    uint32_t seen;
    int have_method = 0, have_data = 0;
    uint64_t method = 0;
    if (!read_delimited(&c, &conn) || !read_varints(conn, 1u << 1, values, &seen) || !(seen & 2) ||
        (int32_t)(uint32_t)values[1] != 1)
        return 0;
    if (!read_delimited(&c, &header) || !read_varints(header, (1u << 1) | (1u << 2) | (1u << 3), values, &seen) ||
        !(seen & 2) || values[1] != 0)
        return 0;
    if (!read_delimited(&c, &body)) return 0;
    while (body.p < body.end) {
        uint32_t field, wt;
        if (!read_tag(&body, &field, &wt)) return 0;
        if (field == 1) {
            if (wt != 0 || !read_varint(&body, &method)) return 0;
            have_method = 1;
        } else if (field == 2) {
            if (wt != 2 || !read_length(&body, data, data_len)) return 0;
            have_data = 1;
        } else if (!skip_field(&body, wt)) {
            return 0;
        }
    }
    if (!have_method || !have_data) return 0;
    *method_out = (int)(int32_t)(uint32_t)method;
    return 1;
}

/* A response walk_response found in a payload: its method, and its data at [start, start + len) of the payload. */
typedef struct {
    int method;
    const unsigned char *data;
    Py_ssize_t start, len;
} Response;

/* What decode_response, locate_response and decode_send_response return for a found response. */
typedef PyObject *(*BuildResponse)(const Response *r, void *context);

/* walk_response over the bytes of ``payload``: ``build``'s object for a response it finds, None for anything
 * else; NULL with a Python error (``payload`` no buffer, no memory). The one body of decode_response,
 * locate_response and decode_send_response, which differ only in what they build. */
static PyObject *with_response(PyObject *payload, BuildResponse build, void *context) {
    Py_buffer buf;
    Response r = {0, NULL, 0, 0};
    if (PyObject_GetBuffer(payload, &buf, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = NULL;
    if (walk_response(&buf, &r.method, &r.data, &r.len)) {
        r.start = (Py_ssize_t)(r.data - (const unsigned char *)buf.buf);
        result = build(&r, context);
    } else {
        result = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *build_decoded(const Response *r, void *context) {
    return Py_BuildValue("(iy#)", r->method, (const char *)r->data, r->len);
}

static PyObject *decode_response(PyObject *self, PyObject *arg) {
    if (!PyObject_CheckBuffer(arg)) Py_RETURN_NONE; /* the pure-Python twin raises its TypeError */
    return with_response(arg, build_decoded, NULL);
}

PyDoc_STRVAR(locate_response_doc,
"locate_response(payload) -> (method, start, length) | None\n\n"
"decode_response without the copy: where the data of a successful response envelope lies in ``payload``\n"
"(a fetch answer is half a MiB: the caller takes a view of it). None as decode_response.");

static PyObject *build_located(const Response *r, void *context) {
    return Py_BuildValue("(inn)", r->method, r->start, r->len);
}

static PyObject *locate_response(PyObject *self, PyObject *arg) {
    return with_response(arg, build_located, NULL);
}

/* ------------------------------------------------------------------------------------------ frames */

PyDoc_STRVAR(take_frame_doc,
"take_frame(buffer, token, max_block_size, max_blocks) -> (serial, payload, used) | int | None\n\n"
"One TubeMQ frame (token | serial | count | (length | block)*, big-endian int32) from the start of the\n"
"bytes a reader holds: (serial, the blocks joined, the bytes the frame took) when it is all there; the\n"
"number of bytes ``buffer`` must hold to get further when it is not; None for a frame the pure-Python\n"
"reader must reject (wrong token, a block count or a block length out of bounds): it raises the typed\n"
"error. The twin of frame.take_frame.");

/* One frame at the start of [p, p + have): 1 with *serial, *payload (new reference) and *used set when it is all
 * there (a frame of ``keep_from`` blocks or more, when that is > 0: *payload NULL and *need its joined length, the
 * blocks not joined); 0 with *need set (the bytes the buffer must hold to get further) when it is not; -1 for a frame the
 * pure-Python reader must reject; -2 with a Python error set (no memory). */
static int take_one(const unsigned char *p, Py_ssize_t have, uint32_t token, Py_ssize_t max_block,
                    Py_ssize_t max_blocks, Py_ssize_t keep_from, unsigned long *serial, PyObject **payload,
                    Py_ssize_t *used, Py_ssize_t *need) {
    Py_ssize_t pos = 12, total = 0;
    if (have < 12) {
        *need = 12;
        return 0;
    }
    uint32_t count = be32(p + 8);
    if (be32(p) != token || count == 0 || (Py_ssize_t)count > max_blocks) return -1;
    for (uint32_t i = 0; i < count; i++) { /* every length first: the payload is allocated once */
        if (pos + 4 > have) {
            *need = pos + 4;
            return 0;
        }
        uint32_t length = be32(p + pos);
        if ((Py_ssize_t)length > max_block) return -1;
        pos += 4 + (Py_ssize_t)length;
        total += (Py_ssize_t)length;
        if (pos > have) { /* ask for the next block's length too, when there is one */
            *need = i + 1 < count ? pos + 4 : pos;
            return 0;
        }
    }
    *serial = (unsigned long)be32(p + 4);
    *used = pos;
    if (keep_from > 0 && (Py_ssize_t)count >= keep_from) { /* left where it lies: the caller says how */
        *payload = NULL;
        *need = total;
        return 1;
    }
    PyObject *out_obj = PyBytes_FromStringAndSize(NULL, total);
    if (out_obj == NULL) return -2;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(out_obj);
    pos = 12;
    for (uint32_t i = 0; i < count; i++) {
        Py_ssize_t length = (Py_ssize_t)be32(p + pos);
        memcpy(out, p + pos + 4, (size_t)length);
        out += length;
        pos += 4 + length;
    }
    *payload = out_obj;
    return 1;
}

static PyObject *take_frame(PyObject *self, PyObject *args) {
    Py_buffer buf;
    unsigned long token, serial = 0;
    Py_ssize_t max_block, max_blocks, used = 0, need = 0;
    PyObject *result = NULL, *payload = NULL;
    if (!PyArg_ParseTuple(args, "y*knn", &buf, &token, &max_block, &max_blocks)) return NULL;
    switch (take_one(buf.buf, buf.len, (uint32_t)token, max_block, max_blocks, 0, &serial, &payload, &used, &need)) {
    case 1:
        result = Py_BuildValue("(kNn)", serial, payload, used);
        break;
    case 0:
        result = PyLong_FromSsize_t(need);
        break;
    case -1:
        result = Py_NewRef(Py_None);
        break;
    default:
        break;
    }
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(take_frames_doc,
"take_frames(buffer, token, max_block_size, max_blocks[, blocks_type]) -> (frames, used, rest)\n\n"
"Every whole TubeMQ frame at the start of ``buffer``, in order: ``frames`` a list of (serial, payload),\n"
"``used`` the bytes they took; ``rest`` says what follows them as take_frame would of buffer[used:]:\n"
"the bytes it must hold to get further (an int), or None for a frame the pure-Python reader must reject.\n"
"One call for all the answers a receive brought (a window of SendMessage answers) instead of one per\n"
"frame. The twin of frame.take_frames.\n\n"
"``blocks_type``: the payload of a frame of two blocks or more is not joined but is\n"
"blocks_type(buffer[a:b], 0, length), its blocks as they lie in ``buffer`` and the length they make joined.");

static PyObject *take_frames(PyObject *self, PyObject *args) {
    Py_buffer buf;
    unsigned long token;
    Py_ssize_t max_block, max_blocks, pos = 0;
    PyObject *buffer, *blocks_type = Py_None, *frames = NULL, *rest = NULL, *result = NULL;
    if (!PyArg_ParseTuple(args, "Oknn|O", &buffer, &token, &max_block, &max_blocks, &blocks_type)) return NULL;
    if (PyObject_GetBuffer(buffer, &buf, PyBUF_SIMPLE) < 0) return NULL;
    frames = PyList_New(0);
    if (frames == NULL) goto done;
    const unsigned char *p = buf.buf;
    for (;;) {
        unsigned long serial = 0;
        PyObject *payload = NULL;
        Py_ssize_t used = 0, need = 0;
        int got = take_one(p + pos, buf.len - pos, (uint32_t)token, max_block, max_blocks,
                           blocks_type == Py_None ? 0 : 2, &serial, &payload, &used, &need);
        if (got == 1) {
            if (payload == NULL) {
                PyObject *raw = PySequence_GetSlice(buffer, pos + 12, pos + used);
                if (raw == NULL) goto done;
                payload = PyObject_CallFunction(blocks_type, "Nnn", raw, (Py_ssize_t)0, need);
                if (payload == NULL) goto done;
            }
            PyObject *frame = Py_BuildValue("(kN)", serial, payload);
            if (frame == NULL || PyList_Append(frames, frame) < 0) {
                Py_XDECREF(frame);
                goto done;
            }
            Py_DECREF(frame);
            pos += used;
            continue;
        }
        if (got == 0)
            rest = PyLong_FromSsize_t(need);
        else if (got == -1)
            rest = Py_NewRef(Py_None);
        break;
    }
    if (rest != NULL) result = Py_BuildValue("(OnN)", frames, pos, rest);
done:
    Py_XDECREF(frames);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(join_blocks_doc,
"join_blocks(raw, start, length) -> bytes | None\n\n"
"The bytes [start, start + length) (a negative length: to the end) of the payload the blocks in ``raw`` make\n"
"when joined (each block a big-endian int32 length, then its bytes); None when ``raw`` is not made so or the\n"
"range is not all in it.");

static PyObject *build_joined(const Seg *segs, Py_ssize_t nseg, void *context) {
    Walker w;
    w_init(&w, segs, nseg);
    PyObject *joined = PyBytes_FromStringAndSize(NULL, w_left(&w));
    if (joined != NULL) w_copy(&w, (unsigned char *)PyBytes_AS_STRING(joined), w_left(&w));
    return joined;
}

static PyObject *join_blocks(PyObject *self, PyObject *args) {
    PyObject *raw;
    Py_ssize_t start, length; /* (a negative length: to the end) */
    if (!PyArg_ParseTuple(args, "Onn", &raw, &start, &length)) return NULL;
    return with_runs(raw, start, length, build_joined, NULL);
}

PyDoc_STRVAR(locate_blocks_doc,
"locate_blocks(raw) -> (method, start, length) | None\n\n"
"locate_response of the payload the blocks in ``raw`` make when joined (each block a big-endian int32 length,\n"
"then its bytes), read where they lie: where the data of a successful response lies in it. None as\n"
"locate_response, and when ``raw`` is not made so.");

/* A varint-delimited message at the walker's position, taken in one piece (valid until the next gathering take):
 * 1; 0 when not sure; -1 with a Python error. */
static int w_delimited(Walker *w, Cursor *message) {
    Py_ssize_t n;
    if (!w_length(w, &n)) return 0;
    const unsigned char *d = w_take(w, n);
    if (d == NULL) return -1;
    message->p = d;
    message->end = d + n;
    return 1;
}

/* walk_response over runs of bytes: the same checks, the data's place as an offset from the start. */
static int walk_response_runs(Walker *w, int *method_out, Py_ssize_t *start, Py_ssize_t *len) {
    Cursor conn, header;
    uint64_t values[32];
    uint32_t seen;
    int have_method = 0, have_data = 0, got;
    uint64_t method = 0;
    Py_ssize_t total = w_left(w), body_len;
    if ((got = w_delimited(w, &conn)) != 1) return got;
    if (!read_varints(conn, 1u << 1, values, &seen) || !(seen & 2) || (int32_t)(uint32_t)values[1] != 1) return 0;
    if ((got = w_delimited(w, &header)) != 1) return got;
    if (!read_varints(header, (1u << 1) | (1u << 2) | (1u << 3), values, &seen) || !(seen & 2) || values[1] != 0)
        return 0;
    if (!w_length(w, &body_len)) return 0;
    Py_ssize_t after = w_left(w) - body_len; /* what follows the body */
    while (w_left(w) > after) {
        uint32_t field, wt;
        Py_ssize_t peeked, n;
        const unsigned char *h = w_peek(w, 16, &peeked);
        Py_ssize_t in_body = w_left(w) - after;
        Cursor c = {h, h + (peeked < in_body ? peeked : in_body)}; /* the body's bytes only */
        if (!read_tag(&c, &field, &wt)) return 0;
        if (field == 1) {
            if (wt != 0 || !read_varint(&c, &method)) return 0;
            w_skip(w, c.p - h);
            have_method = 1;
        } else if (wt == 2) {
            w_skip(w, c.p - h);
            if (!w_length(w, &n) || n > w_left(w) - after) return 0;
            if (field == 2) {
                *start = total - w_left(w);
                *len = n;
                have_data = 1;
            }
            w_skip(w, n);
        } else {
            if (field == 2 || !skip_field(&c, wt)) return 0;
            w_skip(w, c.p - h);
        }
    }
    if (!have_method || !have_data) return 0;
    *method_out = (int)(int32_t)(uint32_t)method;
    return 1;
}

static PyObject *build_located_runs(const Seg *segs, Py_ssize_t nseg, void *context) {
    Walker w;
    Py_ssize_t start = 0, len = 0;
    int method = 0;
    w_init(&w, segs, nseg);
    int found = walk_response_runs(&w, &method, &start, &len);
    w_free(&w);
    if (found == 1) return Py_BuildValue("(inn)", method, start, len);
    return found == 0 ? Py_NewRef(Py_None) : NULL;
}

static PyObject *locate_blocks(PyObject *self, PyObject *arg) {
    return with_runs(arg, 0, -1, build_located_runs, NULL);
}

/* ------------------------------------------------------------------------------------- SendMessage */

static Py_ssize_t varint_len(uint64_t v) {
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static unsigned char *put_varint(unsigned char *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (unsigned char)v;
    return p;
}

static unsigned char *put_bytes(unsigned char *p, uint32_t field, const char *d, Py_ssize_t n) {
    *p++ = (unsigned char)(field << 3 | 2);
    p = put_varint(p, (uint64_t)n);
    memcpy(p, d, (size_t)n);
    return p + n;
}

static unsigned char *put_int(unsigned char *p, uint32_t field, int64_t v) {
    *p++ = (unsigned char)(field << 3);
    return put_varint(p, (uint64_t)v); /* int32 and int64 alike: negative values sign-extended to 10 bytes */
}

#define BYTES_LEN(n) (1 + varint_len((uint64_t)(n)) + (n))
#define INT_LEN(v) (1 + varint_len((uint64_t)(int64_t)(v)))

PyDoc_STRVAR(encode_send_doc,
"encode_send(client_id, topic, partition_id, data, flag, checksum, sent_addr, msg_type, msg_time,\n"
"            auth, method, service_type, protocol_ver, timeout_ms) -> bytes\n\n"
"The request envelope of one SendMessage call, byte for byte what envelope.encode_request makes of a\n"
"SendMessageRequestP2B with these fields (msg_type, msg_time: None = unset; auth: None = no authInfo,\n"
"else (visit token, signed token)). Raises OverflowError / UnicodeEncodeError / TypeError / ValueError\n"
"where the caller must ask the pure-Python encoder: for any argument not of the exact kind the\n"
"pure-Python twin takes alike (a bool for an int, bytes for a str, a bytearray for bytes, ...).");

static PyObject *encode_send(PyObject *self, PyObject *args) {
    PyObject *o[14], *out;
    const char *client, *topic, *data, *msg_type, *msg_time, *auth_token = NULL;
    Py_ssize_t client_len, topic_len, data_len, msg_type_len, msg_time_len, auth_token_len = 0;
    long long partition, flag, checksum, sent_addr, method, service_type, protocol_ver, timeout, visit = 0;
    int auth;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOOO:encode_send", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6],
                          &o[7], &o[8], &o[9], &o[10], &o[11], &o[12], &o[13]))
        return NULL;
    if (!take_text(o[0], 0, &client, &client_len) || !take_text(o[1], 0, &topic, &topic_len) ||
        !take_int(o[2], INT32_MIN, INT32_MAX, &partition) || !take_bytes(o[3], &data, &data_len) ||
        !take_int(o[4], INT32_MIN, INT32_MAX, &flag) || !take_int(o[5], INT32_MIN, INT32_MAX, &checksum) ||
        !take_int(o[6], INT32_MIN, INT32_MAX, &sent_addr) || !take_text(o[7], 1, &msg_type, &msg_type_len) ||
        !take_text(o[8], 1, &msg_time, &msg_time_len) ||
        !take_auth(o[9], &auth, &visit, &auth_token, &auth_token_len) ||
        !take_int(o[10], INT32_MIN, INT32_MAX, &method) || !take_int(o[11], INT32_MIN, INT32_MAX, &service_type) ||
        !take_int(o[12], INT32_MIN, INT32_MAX, &protocol_ver) || !take_int(o[13], LLONG_MIN, LLONG_MAX, &timeout))
        return NULL;
    if (timeout <= 0) {
        PyErr_SetString(PyExc_ValueError, "encode_send: timeout_ms must be positive");
        return NULL;
    }
    Py_ssize_t auth_len = auth ? INT_LEN(visit) + BYTES_LEN(auth_token_len) : 0;
    Py_ssize_t inner = BYTES_LEN(client_len) + BYTES_LEN(topic_len) + INT_LEN(partition) + BYTES_LEN(data_len) +
                       INT_LEN(flag) + INT_LEN(checksum) + INT_LEN(sent_addr) +
                       (msg_type ? BYTES_LEN(msg_type_len) : 0) + (msg_time ? BYTES_LEN(msg_time_len) : 0) +
                       (auth ? BYTES_LEN(auth_len) : 0);
    Py_ssize_t header = INT_LEN(service_type) + INT_LEN(protocol_ver);
    Py_ssize_t body = INT_LEN(method) + INT_LEN(timeout) + BYTES_LEN(inner);
    Py_ssize_t total = 3 + 1 + header + varint_len((uint64_t)body) + body;
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    *p++ = 2; /* RpcConnHeader{flag = 0 (request)}, delimited */
    *p++ = 0x08;
    *p++ = 0;
    *p++ = (unsigned char)header; /* RequestHeader{serviceType, protocolVer}: a few bytes */
    p = put_int(p, 1, service_type);
    p = put_int(p, 2, protocol_ver);
    p = put_varint(p, (uint64_t)body); /* RequestBody{method, timeout, request} */
    p = put_int(p, 1, method);
    p = put_int(p, 2, timeout);
    *p++ = 3 << 3 | 2;
    p = put_varint(p, (uint64_t)inner); /* SendMessageRequestP2B, fields in number order */
    p = put_bytes(p, 1, client, client_len);
    p = put_bytes(p, 2, topic, topic_len);
    p = put_int(p, 3, partition);
    p = put_bytes(p, 4, data, data_len);
    p = put_int(p, 5, flag);
    p = put_int(p, 6, checksum);
    p = put_int(p, 7, sent_addr);
    if (msg_type) p = put_bytes(p, 8, msg_type, msg_type_len);
    if (msg_time) p = put_bytes(p, 9, msg_time, msg_time_len);
    if (auth) {
        *p++ = 10 << 3 | 2;
        p = put_varint(p, (uint64_t)auth_len); /* AuthorizedInfo{visitAuthorizedToken, authAuthorizedToken} */
        p = put_int(p, 1, visit);
        p = put_bytes(p, 2, auth_token, auth_token_len);
    }
    if (p != (unsigned char *)PyBytes_AS_STRING(out) + total || header >= 0x80) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_SystemError, "encode_send: size mismatch");
        return NULL;
    }
    return out;
}

/* One SendRequest's fields, borrowed from the request tuple for the length of one encode_send_frames call. */
typedef struct {
    const char *client, *topic, *msg_type, *msg_time;
    Py_ssize_t client_len, topic_len, msg_type_len, msg_time_len, inner, body, envelope, frame;
    long partition, flag, checksum, sent_addr;
    PyObject *data; /* bytes */
} SendFields;

static int int32_item(PyObject *obj, long *out) {
    long long v;
    if (!take_int(obj, INT32_MIN, INT32_MAX, &v)) return 0;
    *out = (long)v;
    return 1;
}

static int text_item(PyObject *obj, const char **out, Py_ssize_t *len, int optional) {
    if (!take_text(obj, 0, out, len)) return 0;
    if (optional && *len == 0) *out = NULL; /* "" = unset, as SendRequest.envelope passes `or None` */
    return 1;
}

PyDoc_STRVAR(encode_send_frames_doc,
"encode_send_frames(requests, serials, auth, method, service_type, protocol_ver, timeout_ms, begin_token,\n"
"                   max_block_size, max_blocks) -> bytes\n\n"
"The TubeMQ frames of a window of SendMessage calls, concatenated: request i (a SendRequest tuple:\n"
"client_id, topic, partition_id, data, flag, checksum, sent_addr, msg_type, msg_time) enveloped as\n"
"encode_send does and framed with serial number serials[i] as frame.encode_frame does (blocks of at most\n"
"max_block_size bytes). One call per window instead of two Python calls per message. Raises\n"
"OverflowError / UnicodeEncodeError / TypeError / ValueError where the pure-Python twin must decide.");

static PyObject *encode_send_frames(PyObject *self, PyObject *args) {
    PyObject *requests, *serials, *auth_obj, *method_obj, *service_obj, *protocol_obj, *timeout_obj;
    PyObject *out = NULL;
    const char *auth_token = NULL;
    Py_ssize_t auth_token_len = 0;
    long long method, service_type, protocol_ver, timeout, visit = 0;
    unsigned int begin_token;
    Py_ssize_t max_block, max_blocks;
    int auth;
    if (!PyArg_ParseTuple(args, "O!O!OOOOOInn", &PyList_Type, &requests, &PyList_Type, &serials, &auth_obj,
                          &method_obj, &service_obj, &protocol_obj, &timeout_obj, &begin_token, &max_block,
                          &max_blocks))
        return NULL;
    if (!take_auth(auth_obj, &auth, &visit, &auth_token, &auth_token_len) ||
        !take_int(method_obj, INT32_MIN, INT32_MAX, &method) ||
        !take_int(service_obj, INT32_MIN, INT32_MAX, &service_type) ||
        !take_int(protocol_obj, INT32_MIN, INT32_MAX, &protocol_ver) ||
        !take_int(timeout_obj, LLONG_MIN, LLONG_MAX, &timeout))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(requests);
    if (PyList_GET_SIZE(serials) != n || max_block <= 0 || timeout <= 0) {
        PyErr_SetString(PyExc_ValueError, "encode_send_frames: bad arguments");
        return NULL;
    }
    Py_ssize_t auth_len = auth ? INT_LEN(visit) + BYTES_LEN(auth_token_len) : 0;
    Py_ssize_t header = INT_LEN(service_type) + INT_LEN(protocol_ver);
    if (header >= 0x80) {
        PyErr_SetString(PyExc_ValueError, "encode_send_frames: header too long");
        return NULL;
    }
    SendFields *f = PyMem_Malloc((size_t)(n ? n : 1) * sizeof(SendFields));
    if (!f) return PyErr_NoMemory();
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GET_ITEM(requests, i);
        SendFields *x = &f[i];
        /* a SendRequest (a named tuple: a plain tuple has no envelope() for the pure twin), its body bytes */
        if (!PyTuple_Check(r) || PyTuple_CheckExact(r) || PyTuple_GET_SIZE(r) != 9 ||
            !PyBytes_Check(PyTuple_GET_ITEM(r, 3))) {
            PyErr_SetString(PyExc_TypeError, "encode_send_frames: not a SendRequest");
            goto done;
        }
        if (!text_item(PyTuple_GET_ITEM(r, 0), &x->client, &x->client_len, 0) ||
            !text_item(PyTuple_GET_ITEM(r, 1), &x->topic, &x->topic_len, 0) ||
            !int32_item(PyTuple_GET_ITEM(r, 2), &x->partition) || !int32_item(PyTuple_GET_ITEM(r, 4), &x->flag) ||
            !int32_item(PyTuple_GET_ITEM(r, 5), &x->checksum) || !int32_item(PyTuple_GET_ITEM(r, 6), &x->sent_addr) ||
            !text_item(PyTuple_GET_ITEM(r, 7), &x->msg_type, &x->msg_type_len, 1) ||
            !text_item(PyTuple_GET_ITEM(r, 8), &x->msg_time, &x->msg_time_len, 1))
            goto done;
        x->data = PyTuple_GET_ITEM(r, 3);
        Py_ssize_t data_len = PyBytes_GET_SIZE(x->data);
        x->inner = BYTES_LEN(x->client_len) + BYTES_LEN(x->topic_len) + INT_LEN(x->partition) + BYTES_LEN(data_len) +
                   INT_LEN(x->flag) + INT_LEN(x->checksum) + INT_LEN(x->sent_addr) +
                   (x->msg_type ? BYTES_LEN(x->msg_type_len) : 0) + (x->msg_time ? BYTES_LEN(x->msg_time_len) : 0) +
                   (auth ? BYTES_LEN(auth_len) : 0);
        x->body = INT_LEN(method) + INT_LEN(timeout) + BYTES_LEN(x->inner);
        x->envelope = 3 + 1 + header + varint_len((uint64_t)x->body) + x->body;
        Py_ssize_t blocks = (x->envelope + max_block - 1) / max_block;
        if (blocks > max_blocks) {
            PyErr_SetString(PyExc_ValueError, "encode_send_frames: frame too large");
            goto done;
        }
        x->frame = 12 + 4 * blocks + x->envelope;
        total += x->frame;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    unsigned char *scratch = NULL;
    Py_ssize_t scratch_len = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        SendFields *x = &f[i];
        long long serial = PyLong_AsLongLong(PyList_GET_ITEM(serials, i));
        if (serial == -1 && PyErr_Occurred()) {
            Py_CLEAR(out);
            break;
        }
        Py_ssize_t blocks = (x->envelope + max_block - 1) / max_block;
        /* the envelope goes straight after the frame head when it is one block, else via a scratch buffer */
        unsigned char *e;
        if (blocks == 1) {
            e = p + 16;
        } else {
            if (scratch_len < x->envelope) {
                PyMem_Free(scratch);
                scratch = PyMem_Malloc((size_t)x->envelope);
                scratch_len = scratch ? x->envelope : 0;
                if (!scratch) {
                    PyErr_NoMemory();
                    Py_CLEAR(out);
                    break;
                }
            }
            e = scratch;
        }
        unsigned char *q = e;
        *q++ = 2;
        *q++ = 0x08;
        *q++ = 0;
        *q++ = (unsigned char)header;
        q = put_int(q, 1, service_type);
        q = put_int(q, 2, protocol_ver);
        q = put_varint(q, (uint64_t)x->body);
        q = put_int(q, 1, method);
        q = put_int(q, 2, timeout);
        *q++ = 3 << 3 | 2;
        q = put_varint(q, (uint64_t)x->inner);
        q = put_bytes(q, 1, x->client, x->client_len);
        q = put_bytes(q, 2, x->topic, x->topic_len);
        q = put_int(q, 3, x->partition);
        q = put_bytes(q, 4, PyBytes_AS_STRING(x->data), PyBytes_GET_SIZE(x->data));
        q = put_int(q, 5, x->flag);
        q = put_int(q, 6, x->checksum);
        q = put_int(q, 7, x->sent_addr);
        if (x->msg_type) q = put_bytes(q, 8, x->msg_type, x->msg_type_len);
        if (x->msg_time) q = put_bytes(q, 9, x->msg_time, x->msg_time_len);
        if (auth) {
            *q++ = 10 << 3 | 2;
            q = put_varint(q, (uint64_t)auth_len);
            q = put_int(q, 1, visit);
            q = put_bytes(q, 2, auth_token, auth_token_len);
        }
        if (q != e + x->envelope) {
            PyErr_SetString(PyExc_SystemError, "encode_send_frames: size mismatch");
            Py_CLEAR(out);
            break;
        }
        uint32_t head[3] = {begin_token, (uint32_t)serial, (uint32_t)blocks};
        for (int k = 0; k < 3; k++) {
            *p++ = (unsigned char)(head[k] >> 24);
            *p++ = (unsigned char)(head[k] >> 16);
            *p++ = (unsigned char)(head[k] >> 8);
            *p++ = (unsigned char)head[k];
        }
        for (Py_ssize_t off = 0; off < x->envelope; off += max_block) {
            uint32_t len = (uint32_t)(x->envelope - off < max_block ? x->envelope - off : max_block);
            *p++ = (unsigned char)(len >> 24);
            *p++ = (unsigned char)(len >> 16);
            *p++ = (unsigned char)(len >> 8);
            *p++ = (unsigned char)len;
            if (blocks != 1) memcpy(p, e + off, len);
            p += len;
        }
    }
    PyMem_Free(scratch);
done:
    PyMem_Free(f);
    return out;
}

PyDoc_STRVAR(decode_send_answer_doc,
"decode_send_answer(data) -> (success, errCode, errMsg, messageId, appendTime, appendOffset) | None\n\n"
"A SendMessageResponseB2P's fields; None where the pure-Python parser must decide.");

/* A SendMessageResponseB2P's fields as a new tuple of ``type`` (a tuple subclass of six fields; NULL: a
 * plain tuple); Py_None (a new reference) where the pure-Python parser must decide; NULL with an error set. */
static PyObject *send_answer(const unsigned char *p, Py_ssize_t len, PyTypeObject *type) {
    Cursor c = {p, p + len};
    uint64_t values[8] = {0};
    uint32_t seen = 0;
    const unsigned char *msg = NULL;
    Py_ssize_t msg_len = 0;
    while (c.p < c.end) {
        uint32_t field, wt;
        if (!read_tag(&c, &field, &wt)) return Py_NewRef(Py_None);
        if (field == 3) {
            if (wt != 2 || !read_length(&c, &msg, &msg_len)) return Py_NewRef(Py_None);
            seen |= 1u << 3;
        } else if (field >= 1 && field <= 7) {
            if (wt != 0 || !read_varint(&c, &values[field])) return Py_NewRef(Py_None);
            seen |= 1u << field;
        } else if (!skip_field(&c, wt)) {
            return Py_NewRef(Py_None);
        }
    }
    if ((seen & 0xE) != 0xE) return Py_NewRef(Py_None); /* success, errCode, errMsg are required */
    PyObject *items[6];
    items[2] = PyUnicode_DecodeUTF8((const char *)msg, msg_len, "strict");
    if (!items[2]) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return NULL;
        PyErr_Clear();
        return Py_NewRef(Py_None);
    }
    items[0] = PyBool_FromLong(values[1] != 0);
    items[1] = PyLong_FromLong((long)(int32_t)(uint32_t)values[2]);
    items[3] = PyLong_FromLongLong((long long)values[5]);
    items[4] = PyLong_FromLongLong((long long)values[6]);
    items[5] = PyLong_FromLongLong((long long)values[7]);
    PyObject *out = type != NULL ? type->tp_alloc(type, 6) : PyTuple_New(6);
    if (!out || !items[1] || !items[3] || !items[4] || !items[5]) {
        Py_XDECREF(out);
        for (int k = 0; k < 6; k++) Py_XDECREF(items[k]);
        return NULL;
    }
    for (int k = 0; k < 6; k++) PyTuple_SET_ITEM(out, k, items[k]);
    return out;
}

static PyObject *decode_send_answer(PyObject *self, PyObject *arg) {
    Py_buffer buf;
    if (!PyObject_CheckBuffer(arg)) Py_RETURN_NONE; /* the pure-Python twin raises its TypeError */
    if (PyObject_GetBuffer(arg, &buf, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *result = send_answer(buf.buf, buf.len, NULL);
    PyBuffer_Release(&buf);
    return result;
}

PyDoc_STRVAR(decode_send_response_doc,
"decode_send_response(payload, answer_type) -> answer_type(success, errCode, errMsg, messageId, appendTime,\n"
"                                                      appendOffset) | None\n\n"
"A SendMessage call's whole response payload in one call: decode_response's envelope walk, then\n"
"decode_send_answer of its data, built as ``answer_type`` (a named tuple of six fields). None for\n"
"anything else (an RPC exception, garbage, an unusual encoding): send.parse_send_response decides.");

static PyObject *build_send_answer(const Response *r, void *type) {
    return send_answer(r->data, r->len, (PyTypeObject *)type);
}

static PyObject *decode_send_response(PyObject *self, PyObject *args) {
    PyObject *payload, *type_obj;
    if (!PyArg_ParseTuple(args, "OO!", &payload, &PyType_Type, &type_obj)) return NULL;
    if (!PyType_IsSubtype((PyTypeObject *)type_obj, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "decode_send_response: answer_type is not a tuple type");
        return NULL;
    }
    if (!PyObject_CheckBuffer(payload)) Py_RETURN_NONE; /* the pure-Python twin raises its TypeError */
    return with_response(payload, build_send_answer, type_obj);
}

/* ------------------------------------------------------------------------------ a batch of SendRequests */

PyDoc_STRVAR(build_requests_doc,
"build_requests(request_type, client_id, topic, sent_addr, payloads, partition_ids, flags, msg_types,\n"
"               msg_times) -> list\n\n"
"The SendRequest tuples of a sink batch, one per payload: request_type(client_id, topic, partition_ids[i],\n"
"payloads[i], flags[i], checksum(payloads[i]), sent_addr, msg_types[i], msg_times[i]); flags / msg_types /\n"
"msg_times may be None (all 0 / ''). One call per batch instead of a checksum call and\n"
"a tuple construction in Python per row. Fields other than the payload are taken as they are (the twin\n"
"does not check them either); a payload that is not bytes, or lists of unequal length, raise\n"
"TypeError / ValueError: the pure-Python twin decides then.");

static PyObject *build_requests(PyObject *self, PyObject *args) {
    PyObject *type_obj, *client_id, *topic, *sent_addr, *payloads, *partition_ids, *flags, *msg_types, *msg_times;
    if (!PyArg_ParseTuple(args, "O!OOOO!O!OOO", &PyType_Type, &type_obj, &client_id, &topic, &sent_addr,
                          &PyList_Type, &payloads, &PyList_Type, &partition_ids, &flags, &msg_types, &msg_times))
        return NULL;
    PyTypeObject *type = (PyTypeObject *)type_obj;
    Py_ssize_t n = PyList_GET_SIZE(payloads);
    PyObject *columns[3] = {flags, msg_types, msg_times};
    for (int k = 0; k < 3; k++) {
        if (columns[k] == Py_None) continue;
        if (!PyList_Check(columns[k])) {
            PyErr_SetString(PyExc_TypeError, "build_requests: flags, msg_types and msg_times are lists or None");
            return NULL;
        }
        if (PyList_GET_SIZE(columns[k]) != n) {
            PyErr_SetString(PyExc_ValueError, "build_requests: columns of unequal length");
            return NULL;
        }
    }
    if (!PyType_IsSubtype(type, &PyTuple_Type) || PyList_GET_SIZE(partition_ids) != n) {
        PyErr_SetString(PyExc_ValueError, "build_requests: not a tuple type, or columns of unequal length");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) { /* checked before anything is built: the twin then decides */
        if (!PyBytes_CheckExact(PyList_GET_ITEM(payloads, i))) {
            PyErr_SetString(PyExc_TypeError, "build_requests: a payload is not bytes");
            return NULL;
        }
    }
    PyObject *zero = PyLong_FromLong(0), *empty = PyUnicode_FromStringAndSize("", 0);
    PyObject *out = zero && empty ? PyList_New(n) : NULL;
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *data = PyList_GET_ITEM(payloads, i);
        uint32_t crc = crc32_ieee((const unsigned char *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
        PyObject *sum = PyLong_FromUnsignedLong(crc & 0x7FFFFFFFu);
        PyObject *r = sum ? type->tp_alloc(type, 9) : NULL;
        if (!r) {
            Py_XDECREF(sum);
            Py_CLEAR(out);
            break;
        }
        PyObject *flag = flags == Py_None ? zero : PyList_GET_ITEM(flags, i);
        PyObject *msg_type = msg_types == Py_None ? empty : PyList_GET_ITEM(msg_types, i);
        PyObject *msg_time = msg_times == Py_None ? empty : PyList_GET_ITEM(msg_times, i);
        PyObject *items[9] = {client_id, topic, PyList_GET_ITEM(partition_ids, i), data, flag, sum, sent_addr,
                              msg_type, msg_time};
        for (int k = 0; k < 9; k++) {
            if (k != 5) Py_INCREF(items[k]); /* the checksum's reference is new */
            PyTuple_SET_ITEM(r, k, items[k]);
        }
        PyList_SET_ITEM(out, i, r);
    }
    Py_XDECREF(zero);
    Py_XDECREF(empty);
    return out;
}

/* ------------------------------------------------------------------------------------------- module */

static PyMethodDef methods[] = {
    {"read_fetch", read_fetch, METH_VARARGS, read_fetch_doc},
    {"read_fetch_blocks", read_fetch_blocks, METH_VARARGS, read_fetch_blocks_doc},
    {"new_buffer", new_buffer, METH_O, new_buffer_doc},
    {"decode_response", decode_response, METH_O, decode_response_doc},
    {"locate_response", locate_response, METH_O, locate_response_doc},
    {"take_frame", take_frame, METH_VARARGS, take_frame_doc},
    {"take_frames", take_frames, METH_VARARGS, take_frames_doc},
    {"join_blocks", join_blocks, METH_VARARGS, join_blocks_doc},
    {"locate_blocks", locate_blocks, METH_O, locate_blocks_doc},
    {"encode_send", encode_send, METH_VARARGS, encode_send_doc},
    {"decode_send_answer", decode_send_answer, METH_O, decode_send_answer_doc},
    {"decode_send_response", decode_send_response, METH_VARARGS, decode_send_response_doc},
    {"encode_send_frames", encode_send_frames, METH_VARARGS, encode_send_frames_doc},
    {"build_requests", build_requests, METH_VARARGS, build_requests_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native",
    "Compiled twin of TubeMQ's hot wire paths; selected by tubespark.tubemq.wire.twin.", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init();
    PyObject *m = PyModule_Create(&module);
    if (m && crc_setup(m) < 0) Py_CLEAR(m);
    return m;
}
