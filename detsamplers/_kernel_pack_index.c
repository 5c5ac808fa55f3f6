/* The pack index's bin counts in two passes (NOTE [ compiled pack index ] in
 * detsamplers/tokens/_pack_index.py): part of the detsamplers._kernel extension (_kernel.c lists
 * its functions). pack_scan reads a run of a file's document ends in file order, checks each
 * document by its two ends (NOTE [ pair check ]), finds its position in the keyed document order
 * by the inverse of _kernel_pack_windows.c's Feistel network, and keeps its last piece's size at
 * that position and its full pieces in that position's window. pack_fit then runs
 * best-fit-decreasing over each window's sizes, which needs neither a sort nor the bins: sizes
 * are taken largest first from their counts, and the open bins are a multiset of rooms (a count
 * per room and a two-level bitmap over them), where the least room that fits a size is one
 * successor search. Best-fit's bin count depends only on the rooms (NOTE [ packed sequences ]:
 * count_bins), so the counts are those of the numpy path; tests/tokens/test_tokens_pack_index.py
 * compares the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* _kernel_pack_windows.c: where values first .. first + count - 1 stand in the keyed permutation
 * of [0, n) at epoch, for n >= 2 (seeds: 8 round seeds). */
void feistel_inverse(int64_t n, uint64_t epoch, const uint64_t *seeds, int64_t first, int64_t count,
                     int64_t *out);

/* The largest capacity counted here: two counts of 4 bytes a size (16 MiB at this bound). */
#define PI_MAX_CAPACITY ((int64_t)1 << 21)
/* Documents whose positions are found together, before their ends are read. */
#define PI_CHUNK 512

#if defined(__GNUC__) || defined(__clang__)
static inline int pi_ctz(uint64_t x) { return __builtin_ctzll(x); }
static inline int pi_top(uint64_t x) { return 63 - __builtin_clzll(x); }
#else
static inline int pi_ctz(uint64_t x) {
    int i = 0;
    while (!(x & 1)) x >>= 1, i++;
    return i;
}
static inline int pi_top(uint64_t x) {
    int i = 0;
    while (x >>= 1) i++;
    return i;
}
#endif

/* A multiset of values in [0, size): a count each, a bit a value present (low) and a bit a low
 * word not empty (high), so that the next value present above or below v is found in a few
 * words. The bits are set and cleared without branches (the counts' changes are unpredictable). */
typedef struct {
    int32_t *count;
    uint64_t *low, *high;
    int64_t words, tops;
} multiset;

static inline void ms_add(multiset *s, int64_t v) {
    s->count[v]++;
    s->low[v >> 6] |= (uint64_t)1 << (v & 63);
    s->high[v >> 12] |= (uint64_t)1 << ((v >> 6) & 63);
}

static inline void ms_remove(multiset *s, int64_t v) {
    const uint64_t gone = (uint64_t)(--s->count[v] != 0) - 1; /* all ones if none left */
    uint64_t *word = &s->low[v >> 6];
    *word &= ~(gone & ((uint64_t)1 << (v & 63)));
    s->high[v >> 12] &= ~(((uint64_t)(*word != 0) - 1) & ((uint64_t)1 << ((v >> 6) & 63)));
}

/* The least value present that is >= v, or -1. */
static inline int64_t ms_next(const multiset *s, int64_t v) {
    int64_t w = v >> 6;
    if (w >= s->words) return -1;
    uint64_t bits = s->low[w] & (~(uint64_t)0 << (v & 63));
    if (bits) return (w << 6) + pi_ctz(bits);
    w++;
    int64_t t = w >> 6;
    if (t >= s->tops) return -1;
    uint64_t tops = s->high[t] & ((w & 63) ? ~(uint64_t)0 << (w & 63) : ~(uint64_t)0);
    while (!tops) {
        if (++t >= s->tops) return -1;
        tops = s->high[t];
    }
    w = (t << 6) + pi_ctz(tops);
    return (w << 6) + pi_ctz(s->low[w]);
}

/* Best-fit-decreasing's bin count of the sizes in `sizes`, `rooms` empty; both are emptied.
 * capacity - 1 is the largest size and room kept. */
static int64_t count_best_fit(multiset *sizes, multiset *rooms, int64_t capacity) {
    int64_t bins = 0;
    for (int64_t t = sizes->tops - 1; t >= 0; t--) {
        for (uint64_t tops = sizes->high[t]; tops; tops &= ~((uint64_t)1 << pi_top(tops))) {
            const int64_t w = (t << 6) + pi_top(tops);
            for (uint64_t bits = sizes->low[w]; bits; bits &= ~((uint64_t)1 << pi_top(bits))) {
                const int64_t size = (w << 6) + pi_top(bits);
                if (2 * size > capacity) { /* each room (C - a larger size) is below size: new bins */
                    bins += sizes->count[size];
                    rooms->count[capacity - size] += sizes->count[size] - 1;
                    ms_add(rooms, capacity - size); /* the last one, and the bits */
                    sizes->count[size] = 0;
                    continue;
                }
                for (int32_t c = sizes->count[size]; c > 0; c--) {
                    const int64_t room = ms_next(rooms, size);
                    int64_t left = capacity - size;
                    if (room < 0) {
                        bins++;
                    } else {
                        ms_remove(rooms, room);
                        left = room - size;
                    }
                    if (left > 0) ms_add(rooms, left);
                }
                sizes->count[size] = 0;
            }
            sizes->low[w] = 0;
        }
        sizes->high[t] = 0;
    }
    for (int64_t t = 0; t < rooms->tops; t++) {
        for (uint64_t tops = rooms->high[t]; tops; tops &= tops - 1) {
            const int64_t w = (t << 6) + pi_ctz(tops);
            for (uint64_t bits = rooms->low[w]; bits; bits &= bits - 1) rooms->count[(w << 6) + pi_ctz(bits)] = 0;
            rooms->low[w] = 0;
        }
        rooms->high[t] = 0;
    }
    return bins;
}

/* _kernel_pack_windows.c: a C-contiguous buffer of items of itemsize (items < 0: any count); 0,
 * or -1 raised. */
int pw_view(PyObject *obj, Py_buffer *view, Py_ssize_t items, Py_ssize_t itemsize, int writable, const char *name);

const char pack_scan_doc[] =
    "pack_scan(ends, first, local, before, tokens, n, seeds, lo, hi, window, capacity, split,\n"
    "          rests, full, /) -> tuple[int, int, int]\n\n"
    "One run of a file's document ends (int64) in the pack index's scan: documents first ..\n"
    "(global numbers; local: the first one's number in its file, before: the end before it,\n"
    "0 at the file's start; tokens: the file's tokens), each checked by its two ends. A\n"
    "document whose position in the keyed order of [0, n) (seeds: 8 uint64 round seeds, epoch\n"
    "0) lies in [lo, hi) has its last piece's size put at rests[p - lo] (uint16 or uint32, hi -\n"
    "lo items) and its full pieces added to full[(p - lo) / window] (int64; lo a multiple of\n"
    "window). Returns (pieces, tokens packed, bad) of those documents: bad is -1, or the first\n"
    "document whose ends fail the check.";
PyObject *pack_scan(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ends_obj, *seeds_obj, *rests_obj, *full_obj;
    long long first, local, before, tokens, n, lo, hi, window, capacity;
    int split;
    if (!PyArg_ParseTuple(args, "OLLLLLOLLLLpOO", &ends_obj, &first, &local, &before, &tokens, &n, &seeds_obj, &lo,
                          &hi, &window, &capacity, &split, &rests_obj, &full_obj))
        return NULL;
    Py_buffer ends, seeds, rests, full;
    ends.obj = seeds.obj = rests.obj = full.obj = NULL;
    int64_t *scratch = NULL, pieces = 0, packed = 0, bad = -1;
    int ok = 1;
    if (window < 1 || lo < 0 || lo % window != 0 || hi < lo || hi > n || capacity < 1 || capacity > PI_MAX_CAPACITY ||
        first < 0 || local < 0 || local > first) {
        PyErr_Format(PyExc_ValueError, "pack_scan needs window >= 1, 0 <= lo <= hi <= n = %lld with lo a multiple "
                     "of window, capacity in [1, %lld] and 0 <= local <= first, not window=%lld, lo=%lld, hi=%lld, "
                     "capacity=%lld, first=%lld, local=%lld", n, (long long)PI_MAX_CAPACITY, window, lo, hi, capacity,
                     first, local);
        ok = 0;
    }
    ok = ok && pw_view(ends_obj, &ends, -1, 8, 0, "ends") == 0;
    const int64_t count = ok ? ends.len / 8 : 0;
    if (ok && first + count > n) {
        PyErr_Format(PyExc_ValueError, "ends should hold documents of [0, %lld), not %lld from %lld", n,
                     (long long)count, first);
        ok = 0;
    }
    ok = ok && pw_view(seeds_obj, &seeds, 8, 8, 0, "seeds") == 0;
    if (ok && PyObject_GetBuffer(rests_obj, &rests, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        rests.obj = NULL;
        ok = 0;
    }
    const Py_ssize_t wide = ok ? rests.itemsize : 0;
    if (ok && ((wide != 2 && wide != 4) || rests.len != (hi - lo) * wide || (wide == 2 && capacity > 65536))) {
        PyErr_Format(PyExc_ValueError, "rests should hold %lld items of 2 bytes (4 for capacity over 65536), not "
                     "%zd bytes of %zd-byte items", hi - lo, rests.len, wide);
        ok = 0;
    }
    ok = ok && pw_view(full_obj, &full, (hi - lo + window - 1) / window, 8, 1, "full") == 0;
    if (ok && (scratch = PyMem_Malloc(PI_CHUNK * sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        ok = 0;
    }
    if (ok) {
        const int64_t *e = ends.buf;
        int64_t *add = full.buf;
        uint16_t *rest16 = rests.buf;
        uint32_t *rest32 = rests.buf;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t a = 0; a < count && bad < 0; a += PI_CHUNK) {
            const int64_t m = count - a < PI_CHUNK ? count - a : PI_CHUNK;
            if (n > 1) feistel_inverse(n, 0, seeds.buf, first + a, m, scratch);
            else scratch[0] = 0;
            for (int64_t i = 0; i < m; i++) {
                const int64_t at = a + i, own = e[at], prev = at > 0 ? e[at - 1] : before;
                if (own <= prev || own > tokens || (local + at > 0 && prev < 1)) {
                    bad = first + at;
                    break;
                }
                const int64_t p = scratch[i] - lo;
                if (p < 0 || p >= hi - lo) continue;
                const int64_t length = own - prev;
                int64_t rest = length, whole = 0;
                if (split) {
                    if (length >= capacity) { /* most documents are shorter: no division */
                        whole = length / capacity;
                        rest = length % capacity;
                    }
                    pieces += whole + (rest > 0);
                } else {
                    whole = length >= capacity;
                    rest = whole ? 0 : length;
                    pieces++;
                    packed += whole ? capacity : length;
                }
                add[p / window] += whole;
                if (wide == 2) rest16[p] = (uint16_t)rest;
                else rest32[p] = (uint32_t)rest;
            }
        }
        Py_END_ALLOW_THREADS
    }
    PyMem_Free(scratch);
    Py_buffer *views[] = {&ends, &seeds, &rests, &full};
    for (int i = 0; i < 4; i++)
        if (views[i]->obj != NULL) PyBuffer_Release(views[i]);
    if (!ok) return NULL;
    return Py_BuildValue("LLL", (long long)pieces, (long long)packed, (long long)bad);
}

const char pack_fit_doc[] =
    "pack_fit(rests, full, window, capacity, counts, /) -> None\n\n"
    "The pack index's bin counts from pack_scan's arrays: window w (window positions of rests,\n"
    "uint16 or uint32 last-piece sizes below capacity, 0 for none) holds full[w] full pieces\n"
    "and best-fit-decreasing's bins of its last pieces; into counts (int64, as full).";
PyObject *pack_fit(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *rests_obj, *full_obj, *counts_obj;
    long long window, capacity;
    if (!PyArg_ParseTuple(args, "OOLLO", &rests_obj, &full_obj, &window, &capacity, &counts_obj)) return NULL;
    Py_buffer rests, full, counts;
    rests.obj = full.obj = counts.obj = NULL;
    char *scratch = NULL;
    int ok = 1;
    if (window < 1 || capacity < 1 || capacity > PI_MAX_CAPACITY) {
        PyErr_Format(PyExc_ValueError, "pack_fit needs window >= 1 and capacity in [1, %lld], not window=%lld and "
                     "capacity=%lld", (long long)PI_MAX_CAPACITY, window, capacity);
        ok = 0;
    }
    if (ok && PyObject_GetBuffer(rests_obj, &rests, PyBUF_C_CONTIGUOUS) < 0) {
        rests.obj = NULL;
        ok = 0;
    }
    const Py_ssize_t wide = ok ? rests.itemsize : 0, items = ok ? rests.len / (wide ? wide : 1) : 0;
    if (ok && wide != 2 && wide != 4) {
        PyErr_Format(PyExc_ValueError, "rests should hold items of 2 or 4 bytes, not %zd", wide);
        ok = 0;
    }
    const int64_t windows = (items + window - 1) / window;
    ok = ok && pw_view(full_obj, &full, windows, 8, 0, "full") == 0;
    ok = ok && pw_view(counts_obj, &counts, windows, 8, 1, "counts") == 0;
    const int64_t words = (capacity + 63) / 64, tops = (words + 63) / 64;
    const size_t set_bytes = (size_t)capacity * 4 + (size_t)(words + tops) * 8;
    if (ok && (scratch = PyMem_Calloc(2, set_bytes)) == NULL) {
        PyErr_NoMemory();
        ok = 0;
    }
    int64_t refused = -1;
    if (ok) {
        multiset sets[2];
        for (int i = 0; i < 2; i++) {
            char *at = scratch + i * set_bytes;
            sets[i].count = (int32_t *)at;
            sets[i].low = (uint64_t *)(at + (size_t)capacity * 4);
            sets[i].high = sets[i].low + words;
            sets[i].words = words;
            sets[i].tops = tops;
        }
        const uint16_t *rest16 = rests.buf;
        const uint32_t *rest32 = rests.buf;
        const int64_t *whole = full.buf;
        int64_t *out = counts.buf;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t w = 0; w < windows && refused < 0; w++) {
            const int64_t a = w * window, b = a + window < items ? a + window : items;
            for (int64_t p = a; p < b; p++) {
                const int64_t size = wide == 2 ? rest16[p] : rest32[p];
                if (size >= capacity) {
                    refused = p;
                    break;
                }
                if (size > 0) ms_add(&sets[0], size);
            }
            if (refused < 0) out[w] = whole[w] + count_best_fit(&sets[0], &sets[1], capacity);
        }
        Py_END_ALLOW_THREADS
        if (refused >= 0)
            PyErr_Format(PyExc_ValueError, "rests should be below capacity=%lld, but rest %lld is not", capacity,
                         (long long)refused);
    }
    PyMem_Free(scratch);
    Py_buffer *views[] = {&rests, &full, &counts};
    for (int i = 0; i < 3; i++)
        if (views[i]->obj != NULL) PyBuffer_Release(views[i]);
    if (!ok || refused >= 0) return NULL;
    Py_RETURN_NONE;
}
