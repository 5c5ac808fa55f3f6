/* The tar header check on read, compiled (NOTE [ index verification ] in
 * detsamplers/loader/_wds/shard/_file_checks.py): part of the detsamplers._kernel extension (_kernel.c
 * lists its functions). header_table packs a shard's table once per decoded index;
 * check_headers checks the members of a run of samples in one loop over the bytes just read.
 * Each quick test only refuses more than tarfile would: Python decides a refused member again,
 * the way tarfile reads it (HeaderTable in _header_check.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* One member's 512-byte header against what the index says: the name field holds "key.suffix"
 * and NULs after it (and no name prefix), the size field is "%011o\0" as tarfile writes it, the
 * type is a regular file, and the checksum ("%06o\0 ") is the unsigned byte sum with its own
 * field as spaces. The same quick test as HeaderTable's numpy path; a member that fails it (a
 * long name in a pax record, a signed checksum, an upper-case suffix) is decided again in
 * Python, the way tarfile reads it. */
#if defined(__SSE2__)
#include <emmintrin.h>
/* The byte sum of a 512-byte block: 32 psadbw, each lane's total at most 32 * 8 * 255 < 2^16. */
static inline uint32_t block_sum(const uint8_t *h) {
    const __m128i zero = _mm_setzero_si128();
    __m128i acc = zero;
    for (int k = 0; k < 512; k += 16)
        acc = _mm_add_epi64(acc, _mm_sad_epu8(_mm_loadu_si128((const __m128i *)(h + k)), zero));
    return (uint32_t)_mm_extract_epi16(acc, 0) + (uint32_t)_mm_extract_epi16(acc, 4);
}
#else
/* The byte sum of a 512-byte block, in a loop the compiler vectorizes. */
static inline uint32_t block_sum(const uint8_t *h) {
    uint32_t sum = 0;
    for (int k = 0; k < 512; k++) sum += h[k];
    return sum;
}
#endif

static inline uint64_t load64(const uint8_t *p) {
    uint64_t word;
    memcpy(&word, p, 8);
    return word;
}

/* Whether h[n..100) are all NUL (n <= 100): words where they fit, no memcmp call. */
static inline int name_padded(const uint8_t *h, int64_t n) {
    uint64_t any = 0;
    int64_t k = n;
    for (; k < 100 && (k & 7); k++) any |= h[k];
    for (; k < 96; k += 8) any |= load64(h + k);
    for (; k < 100; k++) any |= h[k];
    return any == 0;
}

/* memcmp(a, b, n) == 0 for the short names of tar members, inline. */
static inline int same_bytes(const uint8_t *a, const uint8_t *b, int64_t n) {
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        if (load64(a + k) != load64(b + k)) return 0;
    for (; k < n; k++)
        if (a[k] != b[k]) return 0;
    return 1;
}

static inline int header_ok(const uint8_t *h, const uint8_t *key, int64_t key_length, const uint8_t *suffix,
                            int64_t suffix_length, int64_t size) {
    int64_t n = key_length + 1 + suffix_length;
    if (n > 100 || size < 0 || size >= ((int64_t)1 << 33)) return 0;
    if (!same_bytes(h, key, key_length) || h[key_length] != '.' ||
        !same_bytes(h + key_length + 1, suffix, suffix_length) || !name_padded(h, n))
        return 0;
    for (int k = 0; k < 11; k++)
        if (h[124 + k] != (uint8_t)('0' + ((size >> (3 * (10 - k))) & 7))) return 0;
    /* and no ustar name prefix (tarfile would read "prefix/name") */
    if (h[135] != 0 || !(h[156] == 48 || h[156] == 0) || h[154] != 0 || h[345] != 0) return 0;
    uint32_t stored = 0, field = 0;
    for (int k = 148; k < 154; k++) {
        if (h[k] < 48 || h[k] > 55) return 0;
        stored = stored * 8 + (uint32_t)(h[k] - 48);
    }
    for (int k = 148; k < 156; k++) field += h[k];
    /* the unsigned byte sum with the checksum field counted as eight spaces */
    return stored == block_sum(h) - field + 256;
}

/* A shard's header table, packed by header_table into one bytearray so that each check takes two
 * buffers, not nine: int64 words [members, samples, key bytes, suffix bytes], then offsets and
 * sizes (one per member), starts and key_starts (one per sample and one more), suffix_starts (one
 * per member and one more), then the keys and the suffixes, NUL-joined. String i of a joined
 * list runs from its starts[i] to starts[i + 1] - 1. */
typedef struct {
    int64_t members, samples, keys_len, suffixes_len;
    const int64_t *offsets, *sizes, *starts, *key_starts, *suffix_starts;
    const uint8_t *keys, *suffixes;
} HeaderTable;

enum { T_HEAD = 4 };

static int64_t table_words(int64_t members, int64_t samples) { return T_HEAD + 3 * members + 2 * samples + 3; }

static int table_view(const Py_buffer *blob, HeaderTable *t) {
    const int64_t *w = blob->buf;
    if (blob->len < 8 * T_HEAD) return 0;
    t->members = w[0], t->samples = w[1], t->keys_len = w[2], t->suffixes_len = w[3];
    if (t->members < 0 || t->samples < 0 || t->keys_len < 0 || t->suffixes_len < 0 ||
        t->members > blob->len / 8 || t->samples > blob->len / 8 || t->keys_len > blob->len ||
        t->suffixes_len > blob->len ||
        8 * table_words(t->members, t->samples) + t->keys_len + t->suffixes_len != blob->len)
        return 0;
    t->offsets = w + T_HEAD;
    t->sizes = t->offsets + t->members;
    t->starts = t->sizes + t->members;
    t->key_starts = t->starts + t->samples + 1;
    t->suffix_starts = t->key_starts + t->samples + 1;
    t->keys = (const uint8_t *)(t->suffix_starts + t->members + 1);
    t->suffixes = t->keys + t->keys_len;
    return 1;
}

/* Where each of the first count NUL-ended strings of raw[0:len] starts, then one past the last,
 * into out[0..count]; 0 if raw holds fewer. A plain loop: the strings are short, a memchr call
 * each costs more. */
static int string_starts(const uint8_t *raw, Py_ssize_t len, int64_t count, int64_t *out) {
    int64_t found = 0;
    out[0] = 0;
    for (Py_ssize_t k = 0; k < len && found < count; k++)
        if (raw[k] == 0) out[++found] = (int64_t)(k + 1);
    return found == count;
}

extern const char table_doc[];
extern const char headers_doc[];
PyObject *header_table(PyObject *self, PyObject *args);
PyObject *check_headers(PyObject *self, PyObject *args);

const char table_doc[] =
    "header_table(offsets, sizes, starts, keys, suffixes, /) -> bytearray | None\n\n"
    "A shard's table for check_headers: offsets and sizes (int64, one per member), starts (int64,\n"
    "one per sample and one more), keys and suffixes (bytes, each string NUL-ended), packed in one\n"
    "bytearray. None if keys or suffixes hold fewer strings than samples or members.";

PyObject *header_table(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[5];
    if (!PyArg_ParseTuple(args, "OOOOO", &o[0], &o[1], &o[2], &o[3], &o[4])) return NULL;
    Py_buffer b[5];
    int taken = 0;
    PyObject *out = NULL;
    for (; taken < 5; taken++) {
        if (PyObject_GetBuffer(o[taken], &b[taken], PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (b[taken].itemsize != (taken < 3 ? 8 : 1)) {
            PyErr_SetString(PyExc_ValueError, "offsets, sizes and starts should hold int64 items, keys bytes");
            taken++;
            goto done;
        }
    }
    int64_t members = b[0].len / 8, samples = b[2].len / 8 - 1;
    if (samples < 0 || b[1].len / 8 != members || b[3].len < samples || b[4].len < members) {
        if (samples < 0 || b[1].len / 8 != members)
            PyErr_SetString(PyExc_ValueError, "sizes should match offsets, and starts hold one more than samples");
        else
            out = Py_None, Py_INCREF(out); /* fewer bytes than strings */
        goto done;
    }
    int64_t words = table_words(members, samples);
    out = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(8 * words + b[3].len + b[4].len));
    if (out == NULL) goto done;
    int64_t *w = (int64_t *)PyByteArray_AS_STRING(out);
    w[0] = members, w[1] = samples, w[2] = b[3].len, w[3] = b[4].len;
    int64_t *at = w + T_HEAD;
    memcpy(at, b[0].buf, (size_t)(8 * members));
    memcpy(at + members, b[1].buf, (size_t)(8 * members));
    memcpy(at + 2 * members, b[2].buf, (size_t)(8 * (samples + 1)));
    uint8_t *text = (uint8_t *)(w + words);
    memcpy(text, b[3].buf, (size_t)b[3].len);
    memcpy(text + b[3].len, b[4].buf, (size_t)b[4].len);
    if (!string_starts(b[3].buf, b[3].len, samples, at + 2 * members + samples + 1) ||
        !string_starts(b[4].buf, b[4].len, members, at + 2 * members + 2 * (samples + 1))) {
        Py_DECREF(out);
        out = Py_None;
        Py_INCREF(out);
    }
done:
    for (int k = 0; k < taken; k++) PyBuffer_Release(&b[k]);
    return out;
}

const char headers_doc[] =
    "check_headers(data, base, table, members, first, stop, /) -> int\n\n"
    "The first position p in [first, stop) whose member (members[p], or p itself when members is\n"
    "None) has a tar header in data (the shard's bytes from offset base) that fails the quick\n"
    "test, or -1 when none does. table: header_table's bytearray.";

/* The sample holding member j: the last o < samples with starts[o] <= j (the caller checks that
 * starts[o] <= j < starts[o + 1]). */
static inline int64_t owner_of(const int64_t *starts, int64_t samples, int64_t j) {
    int64_t low = 0, high = samples; /* the answer lies in [low, high) */
    while (high - low > 1) {
        int64_t middle = low + (high - low) / 2;
        if (starts[middle] <= j)
            low = middle;
        else
            high = middle;
    }
    return low;
}

PyObject *check_headers(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_o, *table_o, *members_o;
    long long base, first, stop;
    if (!PyArg_ParseTuple(args, "OLOOLL", &data_o, &base, &table_o, &members_o, &first, &stop)) return NULL;
    Py_buffer data, blob, members;
    HeaderTable t;
    memset(&members, 0, sizeof(members));
    if (PyObject_GetBuffer(data_o, &data, PyBUF_SIMPLE) < 0) return NULL;
    if (PyObject_GetBuffer(table_o, &blob, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    if (!table_view(&blob, &t)) {
        PyErr_SetString(PyExc_ValueError, "table should be what header_table returns");
        goto fail;
    }
    Py_ssize_t limit = t.members;
    if (members_o != Py_None) {
        if (PyObject_GetBuffer(members_o, &members, PyBUF_C_CONTIGUOUS) < 0) goto fail;
        if (members.itemsize != 8) {
            PyErr_SetString(PyExc_ValueError, "members should hold int64 items");
            goto fail;
        }
        limit = members.len / 8;
    }
    if (first < 0 || stop > limit || first > stop) {
        PyErr_SetString(PyExc_ValueError, "first and stop should lie inside the members");
        goto fail;
    }
    const uint8_t *bytes = (const uint8_t *)data.buf;
    const int64_t *chosen = members.obj ? (const int64_t *)members.buf : NULL;
    long long found = -1;
    int64_t o = -1, low = 0, high = 0; /* the current sample and its members [low, high) */
    for (long long p = first; p < stop; p++) {
        int64_t j = chosen ? chosen[p] : p;
        if (j < 0 || j >= t.members || t.samples == 0) {
            found = p;
            break;
        }
        if (o < 0 || j < low || j >= high) { /* mostly the next sample: else search */
            o = o >= 0 && o + 2 <= t.samples && j >= high && j < t.starts[o + 2]
                    ? o + 1
                    : owner_of(t.starts, t.samples, j);
            low = t.starts[o];
            high = t.starts[o + 1];
        }
        int64_t where = t.offsets[j] - base - 512;
        int64_t key_at = t.key_starts[o], key_length = t.key_starts[o + 1] - 1 - key_at;
        int64_t suffix_at = t.suffix_starts[j], suffix_length = t.suffix_starts[j + 1] - 1 - suffix_at;
        if (j < low || j >= high || key_at < 0 || key_length < 0 || key_at + key_length > t.keys_len ||
            suffix_at < 0 || suffix_length < 0 || suffix_at + suffix_length > t.suffixes_len || where < 0 ||
            where > data.len - 512 ||
            !header_ok(bytes + where, t.keys + key_at, key_length, t.suffixes + suffix_at, suffix_length,
                       t.sizes[j])) {
            found = p;
            break;
        }
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&blob);
    if (members.obj) PyBuffer_Release(&members);
    return PyLong_FromLongLong(found);
fail:
    PyBuffer_Release(&data);
    PyBuffer_Release(&blob);
    if (members.obj) PyBuffer_Release(&members);
    return NULL;
}
