/* Best-fit-decreasing of a pack window, compiled (NOTE [ packed sequences ] in
 * detsamplers/tokens/_pack.py): part of the detsamplers._kernel extension (_kernel.c lists its
 * functions). The same algorithm as _pack.best_fit_decreasing, step for step, so the bins are
 * the same: the open bins are kept as one sorted array of room * scale + bin (scale = pieces
 * + 1), a binary search finds the first key >= size * scale (the least room that fits, the bin
 * opened first among equals), and that key, less size * scale, moves left in the array if
 * some room is left; a new bin's key is inserted where it sorts. One memmove per piece, as
 * Python's list does, without the interpreter around it (tests/tokens/test_tokens_pack_kernel.py
 * compares the two on random sizes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The first index of keys[0..n) (sorted) whose key is >= value. */
static inline int64_t lower_bound(const int64_t *keys, int64_t n, int64_t value) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (keys[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Best-fit of sizes[0..n) into bins of capacity, each size's bin into bins (NULL: counts only);
 * keys is scratch of n items. Returns the number of bins. Not static: _kernel_pack_windows.c calls it. */
int64_t best_fit(const int64_t *sizes, int64_t n, int64_t capacity, int64_t *bins, int64_t *keys) {
    const int64_t scale = n + 1;
    int64_t open = 0, opened = 0;
    for (int64_t p = 0; p < n; p++) {
        const int64_t need = sizes[p] * scale;
        int64_t i = lower_bound(keys, open, need), value;
        if (i == open) { /* nothing fits: a new bin */
            value = (capacity - sizes[p]) * scale + opened++;
            if (bins != NULL) bins[p] = value % scale;
            if (value >= scale) {
                int64_t at = lower_bound(keys, open, value);
                memmove(keys + at + 1, keys + at, (size_t)(open - at) * sizeof(int64_t));
                keys[at] = value;
                open++;
            }
            continue;
        }
        value = keys[i] - need;
        if (bins != NULL) bins[p] = value % scale;
        if (value >= scale) { /* the key only gets smaller: it moves left of i */
            int64_t at = lower_bound(keys, i, value);
            memmove(keys + at + 1, keys + at, (size_t)(i - at) * sizeof(int64_t));
            keys[at] = value;
        } else { /* full: the bin closes */
            memmove(keys + i, keys + i + 1, (size_t)(open - i - 1) * sizeof(int64_t));
            open--;
        }
    }
    return opened;
}

/* Whether sizes[0..n) are in [0, capacity] and room * scale + bin fits in int64. */
static int sizes_ok(const int64_t *sizes, int64_t n, int64_t capacity) {
    if (capacity < 1 || capacity > (INT64_MAX - n) / (n + 1)) {
        PyErr_Format(PyExc_ValueError, "capacity should be in [1, %lld] for %lld sizes, not %lld",
                     (long long)((INT64_MAX - n) / (n + 1)), (long long)n, (long long)capacity);
        return 0;
    }
    for (int64_t p = 0; p < n; p++)
        if (sizes[p] < 0 || sizes[p] > capacity) {
            PyErr_Format(PyExc_ValueError, "sizes should be in [0, capacity=%lld], but size %lld is %lld",
                         (long long)capacity, (long long)p, (long long)sizes[p]);
            return 0;
        }
    return 1;
}

static int int64_view(PyObject *obj, Py_buffer *view, int writable, const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (view->itemsize != 8) {
        PyErr_Format(PyExc_ValueError, "%s should hold int64 items, not %zd-byte ones", name, view->itemsize);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

PyObject *pack_bins(PyObject *self, PyObject *args);
PyObject *pack_counts(PyObject *self, PyObject *args);

const char pack_bins_doc[] =
    "pack_bins(sizes, capacity, bins_out, /) -> int\n\n"
    "_pack.best_fit_decreasing: each of the int64 sizes' bin into bins_out (as many int64\n"
    "items), and the number of bins.";

PyObject *pack_bins(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *sizes_obj, *bins_obj;
    long long capacity;
    if (!PyArg_ParseTuple(args, "OLO", &sizes_obj, &capacity, &bins_obj)) return NULL;
    Py_buffer sizes, bins;
    if (int64_view(sizes_obj, &sizes, 0, "sizes") < 0) return NULL;
    if (int64_view(bins_obj, &bins, 1, "bins_out") < 0) {
        PyBuffer_Release(&sizes);
        return NULL;
    }
    int64_t n = sizes.len / 8, count = -1;
    int64_t *keys = NULL;
    if (bins.len != sizes.len)
        PyErr_Format(PyExc_ValueError, "bins_out should hold %lld items, like sizes, not %lld", (long long)n,
                     (long long)(bins.len / 8));
    else if (sizes_ok(sizes.buf, n, capacity) && (keys = PyMem_Malloc((size_t)(n + 1) * sizeof(int64_t))) == NULL)
        PyErr_NoMemory();
    if (keys != NULL) {
        Py_BEGIN_ALLOW_THREADS
        count = best_fit(sizes.buf, n, capacity, bins.buf, keys);
        Py_END_ALLOW_THREADS
        PyMem_Free(keys);
    }
    PyBuffer_Release(&bins);
    PyBuffer_Release(&sizes);
    return count < 0 ? NULL : PyLong_FromLongLong(count);
}

const char pack_counts_doc[] =
    "pack_counts(sizes, bounds, capacity, counts_out, /) -> None\n\n"
    "_pack.count_bins: the bins of each slice sizes[bounds[w]:bounds[w + 1]] (int64 buffers)\n"
    "into counts_out (one int64 item fewer than bounds).";

PyObject *pack_counts(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *sizes_obj, *bounds_obj, *counts_obj;
    long long capacity;
    if (!PyArg_ParseTuple(args, "OOLO", &sizes_obj, &bounds_obj, &capacity, &counts_obj)) return NULL;
    Py_buffer sizes, bounds, counts;
    if (int64_view(sizes_obj, &sizes, 0, "sizes") < 0) return NULL;
    if (int64_view(bounds_obj, &bounds, 0, "bounds") < 0) {
        PyBuffer_Release(&sizes);
        return NULL;
    }
    if (int64_view(counts_obj, &counts, 1, "counts_out") < 0) {
        PyBuffer_Release(&bounds);
        PyBuffer_Release(&sizes);
        return NULL;
    }
    const int64_t n = sizes.len / 8, windows = bounds.len / 8 - 1;
    const int64_t *at = bounds.buf, *size = sizes.buf;
    int64_t widest = 0, ok = windows >= 0 && counts.len / 8 == windows;
    if (!ok)
        PyErr_SetString(PyExc_ValueError, "bounds should hold one item more than counts_out");
    for (int64_t w = 0; ok && w < windows; w++) {
        if (at[w] < 0 || at[w] > at[w + 1] || at[w + 1] > n) {
            PyErr_Format(PyExc_ValueError, "bounds should increase inside [0, %lld], but window %lld is [%lld, %lld)",
                         (long long)n, (long long)w, (long long)at[w], (long long)at[w + 1]);
            ok = 0;
        } else if (!sizes_ok(size + at[w], at[w + 1] - at[w], capacity)) {
            ok = 0;
        } else if (at[w + 1] - at[w] > widest) {
            widest = at[w + 1] - at[w];
        }
    }
    int64_t *keys = NULL;
    if (ok && (keys = PyMem_Malloc((size_t)(widest + 1) * sizeof(int64_t))) == NULL) PyErr_NoMemory();
    if (keys != NULL) {
        int64_t *out = counts.buf;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t w = 0; w < windows; w++) out[w] = best_fit(size + at[w], at[w + 1] - at[w], capacity, NULL, keys);
        Py_END_ALLOW_THREADS
        PyMem_Free(keys);
    }
    PyBuffer_Release(&counts);
    PyBuffer_Release(&bounds);
    PyBuffer_Release(&sizes);
    if (keys == NULL) return NULL;
    Py_RETURN_NONE;
}

/* -- a packed batch's rows (NOTE [ packed batch rows ] in detsamplers/tokens/_pack_rows.py) --
 * The same arrays as _pack_rows.packed_rows's numpy path, written row by row into arrays the
 * caller made. Row r holds pieces offsets[j]..offsets[j + 1] (j = js[r]) of the columns
 * sources[r] = (offsets, docs, firsts, counts, closes): a kept pack window's, so that a batch
 * is read from its windows without gathering their columns first, or a batch's pieces put one
 * after the other. Each piece's tokens are converted into the row's inputs and, one column
 * left, its labels by loops without a branch (the compiler vectorises them), and checked
 * against vocab by a min/max pass only where the token type can exceed it; positions,
 * document ids and the padding are fills; the row's cu_seqlens and the batch's flattened
 * offsets follow from each piece's end in its row. Every source, piece and row is checked
 * before anything is written. tests/tokens/test_tokens_pack_rows.py compares the two paths
 * on random corpora. */

#define ROWS_IGNORE (-100)

/* A piece's n tokens src[0..n) at column col of a row (col + n <= L + 1): inputs
 * in[col..min(col + n, L)), labels lab[col - 1..col + n - 1) (none left of column 0).
 * Returns whether every token lies in [0, vocab), or 1 if vocab <= 0. */
#define ROWS_PIECE(NAME, T)                                                                    \
    static int NAME(const void *tokens, int64_t first, int64_t n, int64_t col, int64_t L,        \
                    int64_t *restrict in, int64_t *restrict lab, int64_t vocab) {              \
        const T *restrict src = (const T *)tokens + first;                                     \
        const int64_t inputs = n < L - col ? n : L - col;                                      \
        for (int64_t t = 0; t < inputs; t++) in[col + t] = (int64_t)src[t];                    \
        if (lab != NULL)                                                                       \
            for (int64_t t = col == 0 ? 1 : 0; t < n; t++) lab[col + t - 1] = (int64_t)src[t]; \
        if (vocab <= 0 || n == 0) return 1;                                                    \
        T lo = src[0], hi = src[0];                                                            \
        for (int64_t t = 1; t < n; t++) {                                                      \
            lo = src[t] < lo ? src[t] : lo;                                                    \
            hi = src[t] > hi ? src[t] : hi;                                                    \
        }                                                                                      \
        return (int64_t)lo >= 0 && (int64_t)hi < vocab;                                        \
    }

ROWS_PIECE(rows_piece_u8, uint8_t)
ROWS_PIECE(rows_piece_u16, uint16_t)
ROWS_PIECE(rows_piece_u32, uint32_t)
ROWS_PIECE(rows_piece_i32, int32_t)
ROWS_PIECE(rows_piece_i64, int64_t)

static int rows_kind(const char *format) {
    if (format == NULL) return 'B';
    if (format[0] == '@' || format[0] == '=' || format[0] == '<') format++;
    if (format[0] == '\0' || format[1] != '\0') return 0;
    switch (format[0]) {
    case 'B': case 'H': case 'I': case 'i': case 'l': case 'q': return format[0];
    default: return 0;
    }
}

static int rows_out(PyObject *obj, Py_buffer *view, Py_ssize_t items, Py_ssize_t itemsize, const char *name) {
    view->obj = NULL;
    view->buf = NULL;
    if (obj == Py_None) return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        view->obj = NULL;
        return -1;
    }
    if (view->itemsize != itemsize || view->len != items * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s should hold %zd items of %zd bytes, not %zd bytes", name, items,
                     itemsize, view->len);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

/* Row r's five columns (views[0..5)) from sources[r], checked; its pieces [*a, *b) checked
 * against the tokens (size of them, base the first's position) and L + 1. 0, or -1 raised. */
static int rows_source(PyObject *source, Py_buffer *views, int64_t r, int64_t j, int64_t base, int64_t size,
                       int64_t L, int64_t *a, int64_t *b) {
    static const char *names[] = {"offsets", "docs", "firsts", "counts", "closes"};
    if (!PyTuple_Check(source) || PyTuple_GET_SIZE(source) != 5) {
        PyErr_Format(PyExc_TypeError, "sources[%lld] should be a tuple (offsets, docs, firsts, counts, closes)",
                     (long long)r);
        return -1;
    }
    for (int i = 0; i < 5; i++) {
        PyObject *column = PyTuple_GET_ITEM(source, i);
        if (i < 4 ? int64_view(column, &views[i], 0, names[i]) < 0
                  : PyObject_GetBuffer(column, &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            views[i].obj = NULL;
            return -1;
        }
    }
    const int64_t n = views[1].len / 8, bins = views[0].len / 8 - 1;
    if (views[4].itemsize != 1 || views[2].len / 8 != n || views[3].len / 8 != n || views[4].len != n) {
        PyErr_Format(PyExc_ValueError, "sources[%lld] should hold one item a piece in docs, firsts, counts "
                     "and closes (closes of one byte each)", (long long)r);
        return -1;
    }
    if (j < 0 || j >= bins) {
        PyErr_Format(PyExc_ValueError, "js[%lld] should be in [0, %lld), the bins of its source, not %lld",
                     (long long)r, (long long)bins, (long long)j);
        return -1;
    }
    const int64_t *offsets = views[0].buf, *firsts = views[2].buf, *counts = views[3].buf;
    *a = offsets[j];
    *b = offsets[j + 1];
    if (*a < 0 || *a >= *b || *b > n) {
        PyErr_Format(PyExc_ValueError, "row %lld should hold pieces [%lld, %lld) of its %lld, at least one",
                     (long long)r, (long long)*a, (long long)*b, (long long)n);
        return -1;
    }
    int64_t used = 0;
    for (int64_t p = *a; p < *b; p++) {
        const int64_t first = firsts[p] - base;
        if (counts[p] < 0 || first < 0 || first > size - counts[p]) {
            PyErr_Format(PyExc_ValueError, "piece %lld of row %lld (first %lld, count %lld) should lie in the "
                         "%lld tokens", (long long)p, (long long)r, (long long)first, (long long)counts[p],
                         (long long)size);
            return -1;
        }
        used += counts[p];
    }
    if (used > L + 1) {
        PyErr_Format(PyExc_ValueError, "row %lld should hold at most %lld tokens, not %lld", (long long)r,
                     (long long)(L + 1), (long long)used);
        return -1;
    }
    return 0;
}

/* The fills of rows_fill, each one loop the compiler vectorises. */
static inline void rows_count(int64_t *restrict out, int64_t n) { /* 0, 1, ..., n - 1 */
    for (int64_t t = 0; t < n; t++) out[t] = t;
}

static inline void rows_fill_value(int64_t *restrict out, int64_t n, int64_t value) {
    for (int64_t t = 0; t < n; t++) out[t] = value;
}

static inline void rows_fill_i32(int32_t *restrict out, int64_t n, int32_t value) {
    for (int64_t t = 0; t < n; t++) out[t] = value;
}

/* What rows_fill reads and writes: the checked sources (five views a row) and the outputs. */
typedef struct {
    const void *tokens;
    int kind;
    int64_t base, vocab, L, rows;
    const Py_buffer *views;
    const int64_t *ranges;
    int64_t *input, *labels, *positions, *documents;
    int32_t *cu, *flat;
} RowsFill;

/* Where GCC can make a copy of the fill for AVX2 and pick it when the CPU has it (function
 * multi-versioning, x86-64 Linux with glibc, whose ifunc picks the copy), its loops convert and
 * store four int64 values at a time instead of two; elsewhere the plain build. The same arithmetic
 * either way. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
#define ROWS_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ROWS_CLONES
#endif

/* The rows' arrays (the checks were made before); whether every token lies below vocab. */
ROWS_CLONES static int rows_fill(const RowsFill *f) {
    const void *buf = f->tokens;
    const int kind = f->kind;
    const int64_t base = f->base, vocab = f->vocab, L = f->L, rows = f->rows;
    const int64_t *ranges = f->ranges;
    int64_t *input = f->input, *labels = f->labels, *positions = f->positions, *documents = f->documents;
    int32_t *cu = f->cu, *flat = f->flat;
    int ok = 1;
    int64_t m = 1;
    if (flat != NULL) flat[0] = 0;
    for (int64_t r = 0; r < rows; r++) {
        const Py_buffer *v = f->views + 5 * r;
        const int64_t *docs = v[1].buf, *firsts = v[2].buf, *counts = v[3].buf;
        const uint8_t *closes = v[4].buf;
        const int64_t a = ranges[2 * r], b = ranges[2 * r + 1];
        int64_t *in = input + r * L, *lab = labels != NULL ? labels + r * L : NULL;
        int64_t *pos = positions != NULL ? positions + r * L : NULL;
        int64_t *doc = documents != NULL ? documents + r * L : NULL;
        int32_t *row_cu = cu != NULL ? cu + r * (L + 1) : NULL;
        int64_t col = 0, prev = 0, k = 1;
        if (row_cu != NULL) row_cu[0] = 0;
        for (int64_t p = a; p < b; p++) {
            const int64_t first = firsts[p] - base, n = counts[p];
            switch (kind) {
            case 'B': ok &= rows_piece_u8(buf, first, n, col, L, in, lab, vocab); break;
            case 'H': ok &= rows_piece_u16(buf, first, n, col, L, in, lab, vocab); break;
            case 'I': ok &= rows_piece_u32(buf, first, n, col, L, in, lab, vocab); break;
            case 'i': ok &= rows_piece_i32(buf, first, n, col, L, in, lab, vocab); break;
            default: ok &= rows_piece_i64(buf, first, n, col, L, in, lab, vocab); break;
            }
            const int64_t end = col + n, clipped = end < L ? end : L;
            if (pos != NULL) rows_count(pos + col, clipped - col);
            if (doc != NULL) rows_fill_value(doc + col, clipped - col, docs[p]);
            if (row_cu != NULL && end < L && k <= L) row_cu[k++] = (int32_t)end;
            if (flat != NULL && clipped > prev) flat[m++] = (int32_t)(r * L + clipped);
            if (clipped > prev) prev = clipped;
            col = end;
        }
        /* col is the row's real tokens: padding from there, labels ignored from col - 1. */
        if (col < L) {
            memset(in + col, 0, (size_t)(L - col) * sizeof(int64_t));
            if (pos != NULL) rows_count(pos + col, L - col);
            if (doc != NULL) rows_fill_value(doc + col, L - col, -1);
        }
        if (lab != NULL) {
            const int64_t from = col > 0 ? col - 1 : 0;
            rows_fill_value(lab + from, L - from, ROWS_IGNORE);
            int64_t end = 0;
            for (int64_t p = a; p < b; p++) {
                end += counts[p];
                if (closes[p] && end >= 1 && end <= L) lab[end - 1] = ROWS_IGNORE;
            }
        }
        if (row_cu != NULL) rows_fill_i32(row_cu + k, L + 1 - k, (int32_t)L);
        if (flat != NULL && L > prev) flat[m++] = (int32_t)(r * L + L);
    }
    if (flat != NULL) rows_fill_i32(flat + m, rows * L + 1 - m, (int32_t)(rows * L));
    return ok;
}

const char pack_rows_doc[] =
    "pack_rows(tokens, base, sources, js, seq_len, vocab, input_ids, labels, position_ids,\n"
    "          document_ids, cu_seqlens, flat, /) -> bool\n\n"
    "_pack_rows.packed_rows's arrays, into the given C-contiguous outputs (int64 (B, L); int32\n"
    "(B, L + 1) and (B L + 1,) for cu_seqlens and flat; None for one not wanted). Row r holds\n"
    "pieces offsets[js[r]]..offsets[js[r] + 1] of sources[r] = (offsets, docs, firsts, counts,\n"
    "closes): int64 columns, closes one byte an item; a piece's tokens start at firsts - base\n"
    "in the 1-D token buffer. Returns whether every token read lies in [0, vocab) (True if\n"
    "vocab <= 0).";

PyObject *pack_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *tokens_obj, *sources, *js_obj, *outs[6];
    long long base, seq_len, vocab_arg;
    if (!PyArg_ParseTuple(args, "OLOOLLOOOOOO", &tokens_obj, &base, &sources, &js_obj, &seq_len, &vocab_arg,
                          &outs[0], &outs[1], &outs[2], &outs[3], &outs[4], &outs[5]))
        return NULL;
    Py_buffer tokens, js, out[6];
    tokens.obj = js.obj = NULL;
    for (int i = 0; i < 6; i++) out[i].obj = NULL;
    Py_buffer *views = NULL;
    int64_t *ranges = NULL, rows = 0;
    PyObject *result = NULL;
    const int64_t L = seq_len;
    int64_t vocab = vocab_arg;
    if (PyObject_GetBuffer(tokens_obj, &tokens, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        tokens.obj = NULL;
        goto done;
    }
    const int kind = rows_kind(tokens.format);
    if (kind == 0 || tokens.ndim > 1) {
        PyErr_SetString(PyExc_TypeError, "tokens should be a 1-D buffer of uint8, uint16, uint32, int32 or int64");
        goto done;
    }
    if (int64_view(js_obj, &js, 0, "js") < 0) {
        js.obj = NULL;
        goto done;
    }
    rows = js.len / 8;
    if (L < 1 || rows < 1 || !PyList_Check(sources) || PyList_GET_SIZE(sources) != rows) {
        PyErr_SetString(PyExc_ValueError, "pack_rows needs seq_len >= 1, one row or more and a list of sources "
                                          "with one item a row (as js)");
        goto done;
    }
    if (rows_out(outs[0], &out[0], rows * L, 8, "input_ids") < 0 || outs[0] == Py_None ||
        rows_out(outs[1], &out[1], rows * L, 8, "labels") < 0 ||
        rows_out(outs[2], &out[2], rows * L, 8, "position_ids") < 0 ||
        rows_out(outs[3], &out[3], rows * L, 8, "document_ids") < 0 ||
        rows_out(outs[4], &out[4], rows * (L + 1), 4, "cu_seqlens") < 0 ||
        rows_out(outs[5], &out[5], rows * L + 1, 4, "flat") < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "input_ids should be an output array");
        goto done;
    }
    views = PyMem_Calloc((size_t)rows * 5, sizeof(Py_buffer));
    ranges = PyMem_Malloc((size_t)rows * 2 * sizeof(int64_t));
    if (views == NULL || ranges == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t size = tokens.len / tokens.itemsize, *j = js.buf;
    for (int64_t r = 0; r < rows; r++)
        if (rows_source(PyList_GET_ITEM(sources, r), views + 5 * r, r, j[r], base, size, L, ranges + 2 * r,
                        ranges + 2 * r + 1) < 0)
            goto done;
    /* A token type whose values all lie below vocab needs no check. */
    if ((kind == 'B' && vocab > 0xFF) || (kind == 'H' && vocab > 0xFFFF) || (kind == 'I' && vocab > 0xFFFFFFFFLL))
        vocab = 0;
    const RowsFill fill = {tokens.buf, kind, base, vocab, L, rows, views, ranges, out[0].buf, out[1].buf,
                           out[2].buf, out[3].buf, out[4].buf, out[5].buf};
    int ok;
    Py_BEGIN_ALLOW_THREADS
    ok = rows_fill(&fill);
    Py_END_ALLOW_THREADS
    result = PyBool_FromLong(ok);
done:
    if (views != NULL) {
        for (int64_t i = 0; i < rows * 5; i++)
            if (views[i].obj != NULL) PyBuffer_Release(&views[i]);
        PyMem_Free(views);
    }
    PyMem_Free(ranges);
    for (int i = 0; i < 6; i++)
        if (out[i].obj != NULL) PyBuffer_Release(&out[i]);
    if (js.obj != NULL) PyBuffer_Release(&js);
    if (tokens.obj != NULL) PyBuffer_Release(&tokens);
    return result;
}
