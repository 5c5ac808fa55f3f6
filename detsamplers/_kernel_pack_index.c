/* The pack index's bin counts, a block of windows in one call (NOTE [ compiled pack index ] in
 * detsamplers/tokens/_pack_index.py): part of the detsamplers._kernel extension (_kernel.c lists
 * its functions). For each window of the block: its documents by the keyed document order
 * (_kernel_pack_windows.c's Feistel network, the numbers _permute.py computes), each read by its
 * two ends and checked by them (NOTE [ pair check ]), its full pieces counted (a bin each) and
 * its last pieces counted by size; then best-fit-decreasing over those counts, which needs
 * neither a sort nor the bins: sizes are taken largest first from their counts, and the open
 * bins are a multiset of rooms (a count per room and a two-level bitmap over them), where the
 * least room that fits a size is one successor search. Best-fit's bin count depends only on the
 * rooms (NOTE [ packed sequences ]: count_bins), so the counts are those of the numpy path.
 * tests/tokens/test_tokens_pack_index.py compares the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* _kernel_pack_windows.c: positions first .. first + count - 1 of the keyed permutation of
 * [0, n) at epoch, for n >= 2 (seeds: 8 round seeds). */
void feistel_positions(int64_t n, uint64_t epoch, const uint64_t *seeds, int64_t first, int64_t count,
                       int64_t *out);

/* The largest capacity counted here: two counts of 4 bytes a size (16 MiB at this bound). */
#define PI_MAX_CAPACITY ((int64_t)1 << 21)
/* Documents whose ends are read after their positions are permuted (and prefetched ahead). */
#define PI_CHUNK 512
#define PI_AHEAD 16

#if defined(__GNUC__) || defined(__clang__)
#define PI_PREFETCH(p) __builtin_prefetch((p), 0, 0)
static inline int pi_ctz(uint64_t x) { return __builtin_ctzll(x); }
static inline int pi_top(uint64_t x) { return 63 - __builtin_clzll(x); }
#else
#define PI_PREFETCH(p) ((void)0)
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

/* The per-file ends and what the pair check compares them with. */
typedef struct {
    const int64_t **ends;
    const int64_t *doc_start, *tokens;
    int64_t files;
} ends_table;

/* Document d's length by its two ends, or -1 if they fail the pair check. */
static inline int64_t pi_length(const ends_table *t, int64_t d) {
    int64_t f = 0;
    if (t->files > 1) { /* the last file whose first document is <= d */
        int64_t lo = 0, hi = t->files;
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (t->doc_start[mid] <= d) lo = mid;
            else hi = mid;
        }
        f = lo;
    }
    const int64_t l = d - t->doc_start[f], *ends = t->ends[f];
    const int64_t before = l > 0 ? ends[l - 1] : 0, own = ends[l];
    if (own <= before || own > t->tokens[f] || (l > 0 && before < 1)) return -1;
    return own - before;
}

/* Fetch document d's two ends ahead of their read (one file). A macro: GCC takes a function
 * holding only prefetches for one without effects and drops its calls. */
#define PI_FETCH(t, d)                                                   \
    do {                                                                 \
        if ((t)->files == 1) {                                           \
            PI_PREFETCH((t)->ends[0] + (d));                             \
            if ((d) > 0) PI_PREFETCH((t)->ends[0] + (d) - 1);            \
        }                                                                \
    } while (0)

const char pack_index_doc[] =
    "pack_index(ends, doc_start, tokens, seeds, first, stop, window, capacity, split, counts, /)\n"
    "    -> tuple[int, int, int]\n\n"
    "PackOrder's bin counts of the windows of positions [first, stop) of the document order\n"
    "(the keyed permutation of [0, doc_start[-1]) by seeds, 8 uint64 round seeds, at epoch 0),\n"
    "window positions each (first a multiple of it), into counts (int64, one a window). ends:\n"
    "each file's document ends (int64 buffers); doc_start: each file's first document and the\n"
    "total (int64); tokens: each file's tokens (int64). Returns (pieces, tokens packed, bad):\n"
    "bad is -1, or the first document whose two ends fail the pair check (then the counts are\n"
    "not all written).";
PyObject *pack_index(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ends_obj, *start_obj, *tokens_obj, *seeds_obj, *counts_obj;
    long long first, stop, window, capacity;
    int split;
    if (!PyArg_ParseTuple(args, "OOOOLLLLpO", &ends_obj, &start_obj, &tokens_obj, &seeds_obj, &first, &stop,
                          &window, &capacity, &split, &counts_obj))
        return NULL;
    if (!PyList_Check(ends_obj) || PyList_GET_SIZE(ends_obj) < 1) {
        PyErr_SetString(PyExc_TypeError, "ends should be a non-empty list of int64 buffers, one a file");
        return NULL;
    }
    const Py_ssize_t files = PyList_GET_SIZE(ends_obj);
    Py_buffer start, tokens, seeds, counts, *views = PyMem_Calloc((size_t)files, sizeof(Py_buffer));
    const int64_t **ends = PyMem_Calloc((size_t)files, sizeof(int64_t *));
    start.obj = tokens.obj = seeds.obj = counts.obj = NULL;
    multiset sizes = {0}, rooms = {0};
    int64_t *scratch = NULL, pieces = 0, packed = 0, bad = -1;
    PyObject *result = NULL;
    int ok = views != NULL && ends != NULL;
    if (!ok) PyErr_NoMemory();
    for (Py_ssize_t f = 0; ok && f < files; f++) {
        if (PyObject_GetBuffer(PyList_GET_ITEM(ends_obj, f), &views[f], PyBUF_C_CONTIGUOUS) < 0) {
            views[f].obj = NULL;
            ok = 0;
        } else if (views[f].itemsize != 8) {
            PyErr_Format(PyExc_ValueError, "ends[%zd] should hold int64 items, not %zd-byte ones", f,
                         views[f].itemsize);
            ok = 0;
        } else {
            ends[f] = views[f].buf;
        }
    }
    const char *names[] = {"doc_start", "tokens", "seeds", "counts"};
    Py_buffer *own[] = {&start, &tokens, &seeds, &counts};
    PyObject *objs[] = {start_obj, tokens_obj, seeds_obj, counts_obj};
    const int64_t windows = window > 0 ? (stop - first + window - 1) / window : 0;
    const Py_ssize_t items[] = {files + 1, files, 8, (Py_ssize_t)windows};
    for (int i = 0; ok && i < 4; i++) {
        if (PyObject_GetBuffer(objs[i], own[i], PyBUF_C_CONTIGUOUS | (i == 3 ? PyBUF_WRITABLE : 0)) < 0) {
            own[i]->obj = NULL;
            ok = 0;
        } else if (own[i]->itemsize != 8 || own[i]->len != items[i] * 8) {
            PyErr_Format(PyExc_ValueError, "%s should hold %zd items of 8 bytes, not %zd bytes", names[i], items[i],
                         own[i]->len);
            ok = 0;
        }
    }
    const int64_t *doc_start = ok ? start.buf : NULL, *file_tokens = ok ? tokens.buf : NULL;
    const int64_t n = ok ? doc_start[files] : 0;
    if (ok && (window < 1 || first < 0 || first % window != 0 || stop < first || stop > n)) {
        PyErr_Format(PyExc_ValueError, "pack_index needs window >= 1 and 0 <= first <= stop <= %lld with first a "
                     "multiple of window, not window=%lld, first=%lld, stop=%lld", (long long)n, window, first, stop);
        ok = 0;
    }
    if (ok && (capacity < 1 || capacity > PI_MAX_CAPACITY)) {
        PyErr_Format(PyExc_ValueError, "capacity should be in [1, %lld], not %lld", (long long)PI_MAX_CAPACITY,
                     capacity);
        ok = 0;
    }
    for (Py_ssize_t f = 0; ok && f < files; f++) {
        const int64_t docs = doc_start[f + 1] - doc_start[f];
        if (docs < 0 || (Py_ssize_t)docs != views[f].len / 8 || file_tokens[f] < 0) {
            PyErr_Format(PyExc_ValueError, "doc_start should give the %zd ends of file %zd, and tokens a count "
                         "of at least 0", views[f].len / 8, f);
            ok = 0;
        }
    }
    const int64_t words = (capacity + 63) / 64, tops = (words + 63) / 64;
    if (ok) {
        /* sizes' and rooms' counts and bitmaps, then a chunk of documents */
        const size_t bytes = 2 * ((size_t)capacity * 4 + (size_t)(words + tops) * 8) + PI_CHUNK * 8;
        scratch = PyMem_Calloc(1, bytes);
        if (scratch == NULL) {
            PyErr_NoMemory();
            ok = 0;
        }
    }
    if (ok) {
        multiset *sets[] = {&sizes, &rooms};
        char *at = (char *)scratch;
        for (int i = 0; i < 2; i++) {
            sets[i]->count = (int32_t *)at;
            at += (size_t)capacity * 4;
            sets[i]->low = (uint64_t *)at;
            at += (size_t)words * 8;
            sets[i]->high = (uint64_t *)at;
            at += (size_t)tops * 8;
            sets[i]->words = words;
            sets[i]->tops = tops;
        }
        int64_t *docs = (int64_t *)at, *out = counts.buf;
        const uint64_t *keys = seeds.buf;
        const ends_table table = {ends, doc_start, file_tokens, (int64_t)files};
        Py_BEGIN_ALLOW_THREADS
        for (int64_t w = 0; w < windows && bad < 0; w++) {
            const int64_t lo = first + w * window, hi = lo + window < stop ? lo + window : stop;
            int64_t full = 0;
            for (int64_t a = lo; a < hi && bad < 0; a += PI_CHUNK) {
                const int64_t m = hi - a < PI_CHUNK ? hi - a : PI_CHUNK;
                if (n > 1) feistel_positions(n, 0, keys, a, m, docs);
                else docs[0] = 0;
                for (int64_t i = 0; i < m && i < PI_AHEAD; i++) PI_FETCH(&table, docs[i]);
                for (int64_t i = 0; i < m; i++) {
                    if (i + PI_AHEAD < m) PI_FETCH(&table, docs[i + PI_AHEAD]);
                    const int64_t length = pi_length(&table, docs[i]);
                    if (length < 0) {
                        bad = docs[i];
                        break;
                    }
                    int64_t rest = length;
                    if (split) {
                        if (length >= capacity) { /* most documents are shorter: no division */
                            full += length / capacity;
                            pieces += length / capacity;
                            rest = length % capacity;
                        }
                        pieces += rest > 0;
                    } else {
                        full += length >= capacity;
                        rest = length >= capacity ? 0 : length;
                        pieces++;
                        packed += length < capacity ? length : capacity;
                    }
                    if (rest > 0) ms_add(&sizes, rest);
                }
            }
            if (bad >= 0) break;
            out[w] = full + count_best_fit(&sizes, &rooms, capacity);
        }
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("LLL", (long long)pieces, (long long)packed, (long long)bad);
    }
    PyMem_Free(scratch);
    for (int i = 0; i < 4; i++)
        if (own[i]->obj != NULL) PyBuffer_Release(own[i]);
    for (Py_ssize_t f = 0; views != NULL && f < files; f++)
        if (views[f].obj != NULL) PyBuffer_Release(&views[f]);
    PyMem_Free(views);
    PyMem_Free((void *)ends);
    return result;
}
