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
 * keys is scratch of n items. Returns the number of bins. */
static int64_t best_fit(const int64_t *sizes, int64_t n, int64_t capacity, int64_t *bins, int64_t *keys) {
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
