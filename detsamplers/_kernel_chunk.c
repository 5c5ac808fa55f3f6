/* A chunk batch's inputs and labels in one compiled pass (NOTE [ compiled chunk rows ] in
 * detsamplers/tokens/_chunk_rows.py): part of the detsamplers._kernel extension (_kernel.c lists
 * its functions). Per window: one pread of its L + 1 tokens, the two searches of its documents
 * in the file's ends (numpy's searchsorted, side right then left), the same checks as the numpy
 * path (each document by its two ends, NOTE [ pair check ], then that the searches bracket the
 * window), and one pass writing int64 inputs and labels, -100 where a target crosses a document
 * end. Anything the numpy path would raise on (a bad end, a token outside the vocabulary) is
 * returned as a status, and the caller reads the batch by the numpy path, which names it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#define CHUNK_IGNORE (-100)

/* The first index of ends[0..n) whose value is > value (searchsorted side="right"). */
static inline int64_t chunk_upper(const int64_t *ends, int64_t n, int64_t value) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ends[mid] <= value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first index of ends[0..n) whose value is >= value (searchsorted side="left"). */
static inline int64_t chunk_lower(const int64_t *ends, int64_t n, int64_t value) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ends[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether documents [low, high) pass the pair check and the searches bracket [start, stop). */
static int chunk_sound(const int64_t *ends, int64_t n, int64_t tokens, int64_t low, int64_t high,
                       int64_t start, int64_t stop) {
    for (int64_t d = low; d < high && d < n; d++) {
        const int64_t own = ends[d], before = d > 0 ? ends[d - 1] : 0;
        if (own <= before || own > tokens || (d > 0 && before < 1)) return 0;
    }
    if (!(low < high && high <= n)) return 0;
    if (!((low == 0 || ends[low - 1] <= start) && ends[low] > start)) return 0;
    if (!(high == n || ends[high - 1] >= stop)) return 0;
    return high - 1 == low || ends[high - 2] < stop;
}

/* Read size bytes at byte at of fd into buf; the bytes read (short at the end of the file), or -1. */
static int64_t chunk_pread(int fd, char *buf, int64_t size, int64_t at) {
    int64_t got = 0;
    while (got < size) {
        ssize_t n = pread(fd, buf + got, (size_t)(size - got), (off_t)(at + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) break;
        got += n;
    }
    return got;
}

/* Row r's inputs and labels from its window w of type T; lo/hi track the least and greatest id. */
#define CHUNK_CONVERT(T)                                                                      \
    {                                                                                         \
        const T *w = (const T *)window;                                                       \
        for (int64_t c = 0; c < L; c++) in[c] = (int64_t)w[c];                               \
        if (lab != NULL)                                                                      \
            for (int64_t c = 0; c < L; c++) lab[c] = (int64_t)w[c + 1];                      \
        T least = w[0], most = w[0];                                                          \
        for (int64_t c = 1; c <= L; c++) {                                                    \
            least = w[c] < least ? w[c] : least;                                              \
            most = w[c] > most ? w[c] : most;                                                 \
        }                                                                                     \
        if ((int64_t)least < lo) lo = (int64_t)least;                                         \
        if ((int64_t)most > hi) hi = (int64_t)most;                                           \
    }

const char chunk_rows_doc[] =
    "chunk_rows(fd, offset, kind, starts, width, ends, tokens, check, input_ids, labels,\n"
    "           windows, /) -> (status, row, least, greatest)\n\n"
    "_chunk_rows.chunk_rows's pass: window j is the width tokens at token starts[j] (int64) of\n"
    "the file fd, whose token 0 is at byte offset and whose dtype is kind ('B', 'H', 'I', 'i' or\n"
    "'q'); ends (int64) are the file's document ends, tokens its token count. Writes the int64\n"
    "(B, width - 1) input_ids and labels (None: not wanted; -100 where a target crosses a\n"
    "document end) and the windows (B, width) in the file's dtype (None: a scratch row). status\n"
    "0: done, with the least and greatest token id read; 1: check (true) found an end that does\n"
    "not increase or a search that does not bracket row's window; 2: row's window ends at byte\n"
    "least of the file (it shrank).";

PyObject *chunk_rows(PyObject *self, PyObject *args) {
    (void)self;
    int fd, kind, check;
    long long offset, width_arg, tokens_arg;
    PyObject *objs[5];
    if (!PyArg_ParseTuple(args, "iLCOLOLpOOO", &fd, &offset, &kind, &objs[0], &width_arg, &objs[1],
                          &tokens_arg, &check, &objs[2], &objs[3], &objs[4]))
        return NULL;
    int itemsize;
    switch (kind) {
    case 'B': itemsize = 1; break;
    case 'H': itemsize = 2; break;
    case 'I': case 'i': itemsize = 4; break;
    case 'q': itemsize = 8; break;
    default:
        PyErr_Format(PyExc_ValueError, "kind should be one of 'B', 'H', 'I', 'i', 'q', not %c", kind);
        return NULL;
    }
    Py_buffer views[5];
    for (int i = 0; i < 5; i++) views[i].obj = NULL;
    PyObject *result = NULL;
    char *scratch = NULL;
    const int64_t width = width_arg, L = width_arg - 1, tokens = tokens_arg;
    if (L < 1 || offset < 0) {
        PyErr_SetString(PyExc_ValueError, "chunk_rows needs width >= 2 and offset >= 0");
        return NULL;
    }
    static const char *names[] = {"starts", "ends", "input_ids", "labels", "windows"};
    for (int i = 0; i < 2; i++) {
        if (PyObject_GetBuffer(objs[i], &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            views[i].obj = NULL;
            goto done;
        }
        if (views[i].itemsize != 8) {
            PyErr_Format(PyExc_ValueError, "%s should hold int64 items", names[i]);
            goto done;
        }
    }
    const int64_t rows = views[0].len / 8, n = views[1].len / 8;
    const int64_t sizes[] = {rows * L * 8, rows * L * 8, rows * width * itemsize};
    for (int i = 2; i < 5; i++) {
        if (objs[i] == Py_None) {
            if (i == 2) {
                PyErr_SetString(PyExc_ValueError, "input_ids should be an output array");
                goto done;
            }
            continue;
        }
        if (PyObject_GetBuffer(objs[i], &views[i], PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
            views[i].obj = NULL;
            goto done;
        }
        if (views[i].len != sizes[i - 2]) {
            PyErr_Format(PyExc_ValueError, "%s should be %lld bytes, not %zd", names[i], (long long)sizes[i - 2],
                         views[i].len);
            goto done;
        }
    }
    const int64_t *starts = views[0].buf, *ends = views[1].buf;
    for (int64_t r = 0; r < rows; r++)
        if (starts[r] < 0 || starts[r] > tokens - width) {
            PyErr_Format(PyExc_ValueError, "window %lld at token %lld should lie in the file's %lld tokens",
                         (long long)r, (long long)starts[r], (long long)tokens);
            goto done;
        }
    char *windows = views[4].obj != NULL ? views[4].buf : NULL;
    if (windows == NULL && (scratch = malloc((size_t)(width * itemsize))) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *inputs = views[2].buf, *labels = views[3].obj != NULL ? views[3].buf : NULL;
    int status = 0, failed_errno = 0;
    int64_t bad_row = 0, lo = INT64_MAX, hi = INT64_MIN, got = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t r = 0; r < rows && status == 0; r++) {
        const int64_t start = starts[r], stop = start + width;
        const int64_t low = chunk_upper(ends, n, start);
        int64_t high = chunk_lower(ends, n, stop) + 1;
        high = high < n ? high : n;
        if (check && !chunk_sound(ends, n, tokens, low, high, start, stop)) {
            status = 1, bad_row = r;
            break;
        }
        char *window = windows != NULL ? windows + r * width * itemsize : scratch;
        got = chunk_pread(fd, window, width * itemsize, offset + start * itemsize);
        if (got != width * itemsize) {
            status = 2, bad_row = r, failed_errno = got < 0 ? errno : 0;
            break;
        }
        int64_t *in = inputs + r * L, *lab = labels != NULL ? labels + r * L : NULL;
        switch (kind) {
        case 'B': CHUNK_CONVERT(uint8_t) break;
        case 'H': CHUNK_CONVERT(uint16_t) break;
        case 'I': CHUNK_CONVERT(uint32_t) break;
        case 'i': CHUNK_CONVERT(int32_t) break;
        default: CHUNK_CONVERT(int64_t) break;
        }
        if (lab != NULL)
            for (int64_t d = low; d < high; d++) {
                const int64_t last = ends[d] - start - 1; /* the document's last token, in the row */
                if (last >= 0 && last < L) lab[last] = CHUNK_IGNORE;
            }
    }
    Py_END_ALLOW_THREADS
    if (status == 2 && failed_errno != 0) {
        errno = failed_errno;
        PyErr_SetFromErrno(PyExc_OSError);
        goto done;
    }
    if (status == 2) lo = got > 0 ? got : 0;
    result = Py_BuildValue("(iLLL)", status, (long long)bad_row, (long long)lo, (long long)hi);
done:
    free(scratch);
    for (int i = 0; i < 5; i++)
        if (views[i].obj != NULL) PyBuffer_Release(&views[i]);
    return result;
}
