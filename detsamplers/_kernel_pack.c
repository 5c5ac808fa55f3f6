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
 * The same arrays as _pack_rows.packed_rows's numpy path, written in one pass per row into
 * arrays the caller made: each piece's tokens are read once from the mapped file into the
 * row's inputs and, one column left, its labels; the positions, document ids, the row's
 * cu_seqlens and the batch's flattened offsets follow from each piece's end in its row.
 * tests/tokens/test_tokens_pack_rows.py compares the two paths on random corpora. */

#define ROWS_IGNORE (-100)

/* Piece tokens src[0..n) into the row from column col: inputs below L, labels one left. */
#define ROWS_COPY(T)                                                                         \
    {                                                                                        \
        const T *src = (const T *)tokens + first;                                            \
        for (int64_t t = 0; t < n; t++) {                                                    \
            const int64_t v = (int64_t)src[t], c = col + t;                                  \
            if (v < lo) lo = v;                                                              \
            if (v > hi) hi = v;                                                              \
            if (c < L) in[c] = v;                                                            \
            if (lab != NULL && c >= 1) lab[c - 1] = v;                                       \
        }                                                                                    \
    }

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
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) return -1;
    if (view->itemsize != itemsize || view->len != items * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s should hold %zd items of %zd bytes, not %zd bytes", name, items,
                     itemsize, view->len);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

const char pack_rows_doc[] =
    "pack_rows(tokens, firsts, counts, closes, docs, pieces, seq_len, input_ids, labels,\n"
    "          position_ids, document_ids, cu_seqlens, flat, /) -> (int, int)\n\n"
    "_pack_rows.packed_rows's arrays, into the given C-contiguous outputs (int64 (B, L); int32\n"
    "(B, L + 1) and (B L + 1,) for cu_seqlens and flat; None for one not wanted): pieces int64\n"
    "(firsts, counts, closes as 0/1, docs) of a 1-D token buffer, B rows of pieces[r] pieces.\n"
    "Returns the least and the greatest token read.";

PyObject *pack_rows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[12];
    long long seq_len;
    if (!PyArg_ParseTuple(args, "OOOOOOLOOOOOO", &objs[0], &objs[1], &objs[2], &objs[3], &objs[4], &objs[5],
                          &seq_len, &objs[6], &objs[7], &objs[8], &objs[9], &objs[10], &objs[11]))
        return NULL;
    Py_buffer views[12];
    for (int i = 0; i < 12; i++) views[i].obj = NULL, views[i].buf = NULL;
    PyObject *result = NULL;
    const int64_t L = seq_len;
    int kind = 0;
    if (PyObject_GetBuffer(objs[0], &views[0], PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) goto done;
    kind = rows_kind(views[0].format);
    if (kind == 0 || views[0].ndim > 1) {
        PyErr_SetString(PyExc_TypeError, "tokens should be a 1-D buffer of uint8, uint16, uint32, int32 or int64");
        goto done;
    }
    static const char *names[] = {"tokens", "firsts", "counts", "closes", "docs", "pieces"};
    for (int i = 1; i < 6; i++)
        if (int64_view(objs[i], &views[i], 0, names[i]) < 0) {
            views[i].obj = NULL;
            goto done;
        }
    const int64_t n = views[1].len / 8, rows = views[5].len / 8, size = views[0].len / views[0].itemsize;
    if (L < 1 || rows < 1 || views[2].len / 8 != n || views[3].len / 8 != n || views[4].len / 8 != n) {
        PyErr_SetString(PyExc_ValueError, "pack_rows needs seq_len >= 1, one row or more and one item a piece "
                                          "in firsts, counts, closes and docs");
        goto done;
    }
    if (rows_out(objs[6], &views[6], rows * L, 8, "input_ids") < 0 || objs[6] == Py_None ||
        rows_out(objs[7], &views[7], rows * L, 8, "labels") < 0 ||
        rows_out(objs[8], &views[8], rows * L, 8, "position_ids") < 0 ||
        rows_out(objs[9], &views[9], rows * L, 8, "document_ids") < 0 ||
        rows_out(objs[10], &views[10], rows * (L + 1), 4, "cu_seqlens") < 0 ||
        rows_out(objs[11], &views[11], rows * L + 1, 4, "flat") < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "input_ids should be an output array");
        goto done;
    }
    const int64_t *firsts = views[1].buf, *counts = views[2].buf, *closes = views[3].buf, *docs = views[4].buf,
                  *pieces = views[5].buf;
    /* Check everything before writing: each piece inside the tokens, each row at most L + 1. */
    int64_t p = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t used = 0;
        if (pieces[r] < 1 || pieces[r] > n - p) {
            PyErr_Format(PyExc_ValueError, "pieces should sum to %lld with each row >= 1, but row %lld has %lld",
                         (long long)n, (long long)r, (long long)pieces[r]);
            goto done;
        }
        for (int64_t q = p + pieces[r]; p < q; p++) {
            if (counts[p] < 0 || firsts[p] < 0 || firsts[p] > size - counts[p]) {
                PyErr_Format(PyExc_ValueError, "piece %lld (first %lld, count %lld) should lie in the %lld tokens",
                             (long long)p, (long long)firsts[p], (long long)counts[p], (long long)size);
                goto done;
            }
            used += counts[p];
        }
        if (used > L + 1) {
            PyErr_Format(PyExc_ValueError, "row %lld should hold at most %lld tokens, not %lld", (long long)r,
                         (long long)(L + 1), (long long)used);
            goto done;
        }
    }
    if (p != n) {
        PyErr_Format(PyExc_ValueError, "pieces should sum to %lld, not %lld", (long long)n, (long long)p);
        goto done;
    }
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    const void *tokens = views[0].buf;
    int64_t *input = views[6].buf, *labels = views[7].buf, *positions = views[8].buf, *documents = views[9].buf;
    int32_t *cu = views[10].buf, *flat = views[11].buf;
    Py_BEGIN_ALLOW_THREADS
    int64_t m = 1;
    if (flat != NULL) flat[0] = 0;
    p = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t *in = input + r * L, *lab = labels != NULL ? labels + r * L : NULL;
        int64_t *pos = positions != NULL ? positions + r * L : NULL;
        int64_t *doc = documents != NULL ? documents + r * L : NULL;
        int32_t *row_cu = cu != NULL ? cu + r * (L + 1) : NULL;
        int64_t col = 0, prev = 0, k = 1;
        const int64_t q = p + pieces[r];
        if (row_cu != NULL) row_cu[0] = 0;
        for (int64_t a = p; a < q; a++) {
            const int64_t first = firsts[a], n = counts[a];
            switch (kind) {
            case 'B': ROWS_COPY(uint8_t) break;
            case 'H': ROWS_COPY(uint16_t) break;
            case 'I': ROWS_COPY(uint32_t) break;
            case 'i': ROWS_COPY(int32_t) break;
            default: ROWS_COPY(int64_t) break;
            }
            const int64_t end = col + n, clipped = end < L ? end : L;
            for (int64_t c = col; c < clipped; c++) {
                if (pos != NULL) pos[c] = c - col;
                if (doc != NULL) doc[c] = docs[a];
            }
            if (row_cu != NULL && end < L && k <= L) row_cu[k++] = (int32_t)end;
            if (flat != NULL && clipped > prev) flat[m++] = (int32_t)(r * L + clipped);
            if (clipped > prev) prev = clipped;
            col = end;
        }
        /* col is the row's real tokens: padding from there, labels ignored from col - 1. */
        for (int64_t c = col; c < L; c++) {
            in[c] = 0;
            if (pos != NULL) pos[c] = c - col;
            if (doc != NULL) doc[c] = -1;
        }
        if (lab != NULL) {
            for (int64_t c = col > 0 ? col - 1 : 0; c < L; c++) lab[c] = ROWS_IGNORE;
            int64_t end = 0;
            for (int64_t a = p; a < q; a++) {
                end += counts[a];
                if (closes[a] && end >= 1 && end <= L) lab[end - 1] = ROWS_IGNORE;
            }
        }
        if (row_cu != NULL)
            while (k <= L) row_cu[k++] = (int32_t)L;
        if (flat != NULL && L > prev) flat[m++] = (int32_t)(r * L + L);
        p = q;
    }
    if (flat != NULL)
        while (m <= rows * L) flat[m++] = (int32_t)(rows * L);
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("(LL)", (long long)lo, (long long)hi);
done:
    for (int i = 0; i < 12; i++)
        if (views[i].obj != NULL) PyBuffer_Release(&views[i]);
    return result;
}
