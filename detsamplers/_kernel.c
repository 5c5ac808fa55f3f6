/* The mixture's per-position loop, compiled (NOTE [ compiled mixture kernel ] in _native.py).
 *
 * Each function computes, for a rank's block of mixture positions first + i * stride, what
 * the numpy code of _mix.py computes with about a hundred array passes: the window's
 * arrangement (a SplitMix64 key of the window), the offset's component and its rank among
 * the component's offsets (two table lookups), and, in mix_records, the component's keyed
 * Feistel permutation at that position. The tables come from numpy (_Segment._build) and the
 * arithmetic is the same, on the same word sizes, so the outputs are bit-identical to the
 * numpy path; tests/test_mix_kernel.py compares the two on random mixtures.
 *
 * Buffers are passed with the buffer protocol (numpy arrays, C-contiguous) and their sizes
 * checked; their contents are trusted to be the tables _Segment.kernel_args builds (a
 * private interface). The loops run without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* SplitMix64 (_seeds.py: mix64 and stream_keys). */
#define GOLDEN 0x9E3779B97F4A7C15ULL
#define MIX_M1 0xBF58476D1CE4E5B9ULL
#define MIX_M2 0x94D049BB133111EBULL
/* The Feistel round hash (_permute.py: _hash). */
#define HASH_M1 0x85EBCA6BU
#define HASH_M2 0xC2B2AE35U
/* Per-component parameters of mix_records, one row of PARAMS words each. */
#define MAX_ROUNDS 8
#define PARAMS (6 + MAX_ROUNDS)

static inline uint64_t finalize(uint64_t z) {
    z = (z ^ (z >> 30)) * MIX_M1;
    z = (z ^ (z >> 27)) * MIX_M2;
    return z ^ (z >> 31);
}

/* mix64(z); stream_keys(base, i) is finalize(base + GOLDEN + i * GOLDEN). */
static inline uint64_t mix64(uint64_t z) { return finalize(z + GOLDEN); }

/* The arrangement tables of one curriculum segment, compact (_Segment.kernel_args), and
 * where a block starts in it. */
typedef struct {
    const uint32_t *codes;  /* T * 2P: offset's rank among its component's, << 16 | component */
    const uint16_t *prefix; /* T * (P + 1) * K: a component's count before each rotation */
    const int64_t *bases;   /* K: each component's count at the segment's start */
    const int64_t *counts;  /* K: each component's positions per window */
    uint64_t key;           /* the segment's key derive(seed, "mix", segment), plus GOLDEN */
    int64_t window, arrangements, components;
} Tables;

/* Walks the positions first + i * stride with the window and the offset kept incrementally
 * (no division per position). */
typedef struct {
    int64_t window, offset, step_windows, step_offset;
} Walk;

static inline void walk_start(Walk *w, const Tables *t, int64_t first, int64_t stride) {
    w->window = first / t->window;
    w->offset = first % t->window;
    w->step_windows = stride / t->window;
    w->step_offset = stride % t->window;
}

static inline void walk_next(Walk *w, const Tables *t) {
    w->window += w->step_windows;
    w->offset += w->step_offset;
    if (w->offset >= t->window) {
        w->offset -= t->window;
        w->window += 1;
    }
}

/* The component of the walk's position and its position in the component's chain
 * (_Segment.locate_stride). */
static inline void locate_one(const Tables *t, const Walk *w, int64_t *component, int64_t *position) {
    uint64_t key = finalize((uint64_t)w->window * GOLDEN + t->key);
    uint64_t table = key & (uint64_t)(t->arrangements - 1);
    uint64_t rotation = ((key >> 32) * (uint64_t)t->window) >> 32;
    uint32_t code = t->codes[table * 2 * (uint64_t)t->window + rotation + (uint64_t)w->offset];
    uint32_t k = code & 0xFFFFU;
    uint64_t at = (table * ((uint64_t)t->window + 1) + rotation) * (uint64_t)t->components + k;
    *component = (int64_t)k;
    *position = (int64_t)((uint64_t)t->counts[k] * (uint64_t)w->window + (code >> 16) - t->prefix[at] +
                          (uint64_t)t->bases[k]);
}

/* One component's keyed permutation (_permute.py: FeistelPermutation), with the round keys
 * of the pass it is on. */
typedef struct {
    uint64_t n;
    double real_divisor;
    uint32_t k, b, divisor, rounds;
    int64_t offset;
    const uint64_t *seeds;
    int64_t pass, pass_start, pass_end; /* the pass whose keys are in keys[] */
    uint32_t keys[MAX_ROUNDS];
} Perm;

static inline uint32_t round_hash(uint32_t half, uint32_t key) {
    uint32_t h = (half ^ key) * HASH_M1;
    h ^= h >> 15;
    return h * HASH_M2;
}

/* h / divisor, truncated, for any 32-bit h, through a double (which vector units divide and
 * integer ones do not): exact, because h / d is either an integer, rounded exactly, or at
 * least 1 / d away from one, while the rounding error of the quotient is below
 * (2**32 / d) * 2**-53 < 1 / d. */
static inline uint32_t divide(uint32_t h, double divisor) { return (uint32_t)((double)h / divisor); }

static void perm_keys(Perm *p, int64_t pass) {
    uint64_t mixed = mix64((uint64_t)pass);
    for (uint32_t r = 0; r < p->rounds; r++) {
        p->keys[r] = (uint32_t)(mix64(p->seeds[r] ^ mixed) & 0xFFFFFFFFULL);
    }
    p->pass = pass;
    p->pass_start = (int64_t)((uint64_t)pass * p->n);
    p->pass_end = (int64_t)((uint64_t)p->pass_start + p->n);
}

static inline uint64_t perm_network(const Perm *p, uint64_t x) {
    uint32_t low = (uint32_t)(x & ((1ULL << p->k) - 1));
    uint32_t high = (uint32_t)(x >> p->k);
    uint32_t top = 32 - p->k;
    for (uint32_t r = 0; r < p->rounds; r++) {
        if (r % 2 == 0) {
            low ^= round_hash(high, p->keys[r]) >> top;
        } else {
            high += divide(round_hash(low, p->keys[r]), p->real_divisor);
            if (high >= p->b) high -= p->b;
        }
    }
    return ((uint64_t)high << p->k) | low;
}

/* The network on n values of one component's pass, split in halves (low, high) in place:
 * the same rounds for every value, so the loop vectorises (AVX2 where the CPU has it). */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static void network_many(const Perm *p, uint32_t *restrict low, uint32_t *restrict high, int64_t n) {
    const uint32_t top = 32 - p->k, b = p->b;
    const double divisor = p->real_divisor;
    for (uint32_t r = 0; r + 1 < p->rounds; r += 2) {
        const uint32_t even = p->keys[r], odd = p->keys[r + 1];
        for (int64_t i = 0; i < n; i++) {
            uint32_t lo = low[i] ^ (round_hash(high[i], even) >> top);
            uint32_t hi = high[i] + divide(round_hash(lo, odd), divisor);
            low[i] = lo;
            high[i] = hi >= b ? hi - b : hi;
        }
    }
}

/* -- a block in chunks ---------------------------------------------------------------------
 * Positions go through in chunks of up to CHUNK: locate each one and file it under its
 * component (slot in the output, then the halves of its index in the component's pass);
 * then run each component's network over its values at once; then cycle-walk the few
 * values that land past n and write the records. A chunk ends early where a component
 * enters a new pass, so that each component's values in a chunk share their round keys. */
#define CHUNK 1024
/* Each component has a chunk's worth of room (16 KiB), and each chunk visits every
 * component: beyond this many, records_stride refuses and numpy gathers. */
#define MAX_CHUNK_COMPONENTS 64

typedef struct {
    int64_t *count;            /* per component: values filed in this chunk */
    int64_t *slot;             /* components x CHUNK: each value's index in the output */
    uint32_t *low, *high;      /* components x CHUNK: each value's halves */
} Chunk;

static void chunk_free(Chunk *c) {
    if (c == NULL) return;
    PyMem_RawFree(c->count);
    PyMem_RawFree(c->slot);
    PyMem_RawFree(c->low);
    PyMem_RawFree(c->high);
    PyMem_RawFree(c);
}

static Chunk *chunk_new(long long components) {
    Chunk *c = PyMem_RawCalloc(1, sizeof(Chunk));
    if (c == NULL) return NULL;
    size_t cells = (size_t)components * CHUNK;
    c->count = PyMem_RawCalloc((size_t)components, sizeof(int64_t));
    c->slot = PyMem_RawMalloc(cells * sizeof(int64_t));
    c->low = PyMem_RawMalloc(cells * sizeof(uint32_t));
    c->high = PyMem_RawMalloc(cells * sizeof(uint32_t));
    if (c->count == NULL || c->slot == NULL || c->low == NULL || c->high == NULL) {
        chunk_free(c);
        return NULL;
    }
    return c;
}

/* Records of up to `left` positions from the walk into out; returns how many were done. */
static int64_t chunk_records(Chunk *c, const Tables *t, Walk *w, Perm *perms, long long components,
                             int64_t *out, int64_t left) {
    int64_t m = left < CHUNK ? left : CHUNK, i;
    for (i = 0; i < m; i++) {
        int64_t component, position;
        locate_one(t, w, &component, &position);
        Perm *p = &perms[component];
        if (position < p->pass_start || position >= p->pass_end) {
            /* A new pass: its values need other keys, so they start the next chunk (unless
             * this component has no values in this one yet). */
            if (c->count[component] > 0) break;
            perm_keys(p, position / (int64_t)p->n);
        }
        int64_t j = component * CHUNK + c->count[component]++;
        uint64_t x = (uint64_t)(position - p->pass_start);
        c->slot[j] = i;
        c->low[j] = (uint32_t)(x & ((1ULL << p->k) - 1));
        c->high[j] = (uint32_t)(x >> p->k);
        walk_next(w, t);
    }
    for (long long k = 0; k < components; k++) {
        int64_t filed = c->count[k];
        if (filed == 0) continue;
        Perm *p = &perms[k];
        int64_t *slot = c->slot + k * CHUNK;
        uint32_t *low = c->low + k * CHUNK, *high = c->high + k * CHUNK;
        if (p->n == 1) {
            for (int64_t j = 0; j < filed; j++) out[slot[j]] = p->offset;
        } else {
            network_many(p, low, high, filed);
            for (int64_t j = 0; j < filed; j++) {
                uint64_t x = ((uint64_t)high[j] << p->k) | low[j];
                while (x >= p->n) x = perm_network(p, x); /* cycle walking */
                out[slot[j]] = (int64_t)x + p->offset;
            }
        }
        c->count[k] = 0;
    }
    return i;
}

/* -- argument checking -------------------------------------------------------------------- */

typedef struct {
    Py_buffer codes, prefix, bases, counts;
    Tables t;
} TableArgs;

static int buffer_of(PyObject *obj, Py_buffer *view, Py_ssize_t items, Py_ssize_t itemsize, int writable,
                     const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (view->itemsize != itemsize || view->len != items * itemsize) {
        PyErr_Format(PyExc_ValueError, "%s should hold %zd %zd-byte items, but holds %zd bytes", name, items,
                     itemsize, view->len);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static void tables_release(TableArgs *a) {
    PyBuffer_Release(&a->codes);
    PyBuffer_Release(&a->prefix);
    PyBuffer_Release(&a->bases);
    PyBuffer_Release(&a->counts);
}

/* tables: (codes, prefix, bases, counts) with the segment's key and shape. */
static int tables_of(PyObject *tables, unsigned long long key, long long window, long long arrangements,
                     long long components, TableArgs *out) {
    PyObject *codes, *prefix, *bases, *counts;
    if (!PyArg_ParseTuple(tables, "OOOO", &codes, &prefix, &bases, &counts)) return -1;
    if (window < 1 || 2 * window > 65536 || arrangements < 1 || (arrangements & (arrangements - 1)) ||
        components < 1 || components > 65536) {
        PyErr_SetString(PyExc_ValueError, "bad table shape");
        return -1;
    }
    memset(out, 0, sizeof(*out));
    if (buffer_of(codes, &out->codes, (Py_ssize_t)(arrangements * 2 * window), 4, 0, "codes") < 0 ||
        buffer_of(prefix, &out->prefix, (Py_ssize_t)(arrangements * (window + 1) * components), 2, 0, "prefix") <
            0 ||
        buffer_of(bases, &out->bases, (Py_ssize_t)components, 8, 0, "bases") < 0 ||
        buffer_of(counts, &out->counts, (Py_ssize_t)components, 8, 0, "counts") < 0) {
        tables_release(out); /* releasing a view never taken (zeroed) is a no-op */
        return -1;
    }
    out->t.codes = (const uint32_t *)out->codes.buf;
    out->t.prefix = (const uint16_t *)out->prefix.buf;
    out->t.bases = (const int64_t *)out->bases.buf;
    out->t.counts = (const int64_t *)out->counts.buf;
    out->t.key = (uint64_t)key + GOLDEN;
    out->t.window = window;
    out->t.arrangements = arrangements;
    out->t.components = components;
    return 0;
}

static int block_ok(long long first, long long stride, long long count) {
    if (first < 0 || stride < 1 || count < 0 || (count > 0 && (first + (count - 1) * (double)stride) > 9.2e18)) {
        PyErr_SetString(PyExc_ValueError, "first, stride and count should describe non-negative positions");
        return 0;
    }
    return 1;
}

/* Both functions' arguments: (tables, key, window, arrangements, components, first, stride,
 * count, x, y), the tables' views taken (release them with tables_release). */
typedef struct {
    TableArgs a;
    long long first, stride, count;
    PyObject *x, *y;
} BlockArgs;

static int block_args(PyObject *args, BlockArgs *b) {
    PyObject *tables;
    unsigned long long key;
    long long window, arrangements, components;
    if (!PyArg_ParseTuple(args, "OKLLLLLLOO", &tables, &key, &window, &arrangements, &components, &b->first,
                          &b->stride, &b->count, &b->x, &b->y))
        return -1;
    if (!block_ok(b->first, b->stride, b->count)) return -1;
    return tables_of(tables, key, window, arrangements, components, &b->a);
}

/* -- the module's functions ---------------------------------------------------------------- */

PyDoc_STRVAR(locate_doc,
             "locate_stride(tables, key, window, arrangements, components, first, stride, count, "
             "component_out, position_out)\n\n"
             "_Segment.locate_stride into two int64 buffers of count items.");

static PyObject *locate_stride(PyObject *self, PyObject *args) {
    (void)self;
    BlockArgs b;
    if (block_args(args, &b) < 0) return NULL;
    TableArgs a = b.a;
    long long first = b.first, stride = b.stride, count = b.count;
    Py_buffer component_view, position_view;
    if (buffer_of(b.x, &component_view, (Py_ssize_t)count, 8, 1, "component_out") < 0) {
        tables_release(&a);
        return NULL;
    }
    if (buffer_of(b.y, &position_view, (Py_ssize_t)count, 8, 1, "position_out") < 0) {
        PyBuffer_Release(&component_view);
        tables_release(&a);
        return NULL;
    }
    int64_t *component = (int64_t *)component_view.buf, *position = (int64_t *)position_view.buf;
    Py_BEGIN_ALLOW_THREADS
    Walk w;
    walk_start(&w, &a.t, first, stride);
    for (long long i = 0; i < count; i++) {
        locate_one(&a.t, &w, &component[i], &position[i]);
        walk_next(&w, &a.t);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&position_view);
    PyBuffer_Release(&component_view);
    tables_release(&a);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(records_doc,
             "records_stride(tables, key, window, arrangements, components, first, stride, count, "
             "params, out)\n\n"
             "MixSampler.records of a rank's block into an int64 buffer of count items, when every "
             "component is a Feistel shuffle. params: components rows of 14 uint64 words: n, k, b, "
             "divisor, rounds, offset, then the round seeds.");

static PyObject *records_stride(PyObject *self, PyObject *args) {
    (void)self;
    BlockArgs b;
    if (block_args(args, &b) < 0) return NULL;
    TableArgs a = b.a;
    long long components = a.t.components, count = b.count;
    if (components > MAX_CHUNK_COMPONENTS) {
        tables_release(&a);
        PyErr_Format(PyExc_ValueError, "records_stride takes at most %d components, not %lld",
                     MAX_CHUNK_COMPONENTS, components);
        return NULL;
    }
    Py_buffer params_view, out_view;
    if (buffer_of(b.x, &params_view, (Py_ssize_t)(components * PARAMS), 8, 0, "params") < 0) {
        tables_release(&a);
        return NULL;
    }
    if (buffer_of(b.y, &out_view, (Py_ssize_t)count, 8, 1, "out") < 0) {
        PyBuffer_Release(&params_view);
        tables_release(&a);
        return NULL;
    }
    const uint64_t *params = (const uint64_t *)params_view.buf;
    Perm *perms = PyMem_Malloc(sizeof(Perm) * (size_t)components);
    if (perms == NULL) {
        PyBuffer_Release(&out_view);
        PyBuffer_Release(&params_view);
        tables_release(&a);
        return PyErr_NoMemory();
    }
    for (long long c = 0; c < components; c++) {
        const uint64_t *row = params + c * PARAMS;
        Perm *p = &perms[c];
        p->n = row[0];
        p->k = (uint32_t)row[1];
        p->b = (uint32_t)row[2];
        p->divisor = (uint32_t)row[3];
        p->rounds = (uint32_t)row[4];
        p->offset = (int64_t)row[5];
        p->seeds = row + 6;
        p->real_divisor = (double)p->divisor;
        if (p->n < 1 || p->k < 1 || p->k > 31 || p->divisor < 2 || p->rounds < 2 || p->rounds % 2 ||
            p->rounds > MAX_ROUNDS) {
            PyMem_Free(perms);
            PyBuffer_Release(&out_view);
            PyBuffer_Release(&params_view);
            tables_release(&a);
            PyErr_Format(PyExc_ValueError, "bad permutation parameters for component %lld", c);
            return NULL;
        }
        p->pass = -1;
        p->pass_start = 1; /* an empty range: the first position computes its pass's keys */
        p->pass_end = 0;
    }
    int64_t *out = (int64_t *)out_view.buf;
    Chunk *chunk = chunk_new(components);
    if (chunk == NULL) {
        PyMem_Free(perms);
        PyBuffer_Release(&out_view);
        PyBuffer_Release(&params_view);
        tables_release(&a);
        return PyErr_NoMemory();
    }
    Py_BEGIN_ALLOW_THREADS
    Walk w;
    walk_start(&w, &a.t, b.first, b.stride);
    for (long long done = 0; done < count;) {
        done += chunk_records(chunk, &a.t, &w, perms, components, out + done, count - done);
    }
    Py_END_ALLOW_THREADS
    chunk_free(chunk);
    PyMem_Free(perms);
    PyBuffer_Release(&out_view);
    PyBuffer_Release(&params_view);
    tables_release(&a);
    Py_RETURN_NONE;
}

/* -- tar header check: in _kernel_headers.c ------------------------------------------------ */

extern const char table_doc[], headers_doc[];
PyObject *header_table(PyObject *self, PyObject *args);
PyObject *check_headers(PyObject *self, PyObject *args);

/* -- best-fit-decreasing of the pack mode: in _kernel_pack.c ------------------------------- */

extern const char pack_bins_doc[], pack_counts_doc[], pack_rows_doc[];
PyObject *pack_bins(PyObject *self, PyObject *args);
PyObject *pack_counts(PyObject *self, PyObject *args);
PyObject *pack_rows(PyObject *self, PyObject *args);

/* -- a batch's pack windows end to end, and the bins' orders: in _kernel_pack_windows.c ----- */

extern const char pack_windows_doc[], feistel_orders_doc[];
PyObject *pack_windows(PyObject *self, PyObject *args);
PyObject *feistel_orders(PyObject *self, PyObject *args);

/* -- the pack index's bin counts, a scan of the ends then a fit: in _kernel_pack_index.c --- */

extern const char pack_scan_doc[], pack_fit_doc[];
PyObject *pack_scan(PyObject *self, PyObject *args);
PyObject *pack_fit(PyObject *self, PyObject *args);

/* -- a run of samples cut out of the bytes read: in _kernel_cut.c -------------------------- */

extern const char cut_doc[], gather_doc[], read_doc[];
PyObject *cut_samples(PyObject *self, PyObject *args);
PyObject *gather_members(PyObject *self, PyObject *args);
PyObject *read_samples(PyObject *self, PyObject *args);

/* -- a run of samples decoded by their plans: in _kernel_decode.c -------------------------- */

extern const char decode_doc[];
PyObject *decode_run(PyObject *self, PyObject *args);

/* -- a chunk batch's inputs and labels: in _kernel_chunk.c --------------------------------- */

extern const char chunk_rows_doc[];
PyObject *chunk_rows(PyObject *self, PyObject *args);

/* -- a sample's packed small fields split back: in _kernel_fields.c ----------------------- */

extern const char fields_doc[], samples_doc[];
PyObject *unpack_fields(PyObject *self, PyObject *args);
PyObject *unpack_samples(PyObject *self, PyObject *args);

static PyMethodDef methods[] = {
    {"locate_stride", locate_stride, METH_VARARGS, locate_doc},
    {"records_stride", records_stride, METH_VARARGS, records_doc},
    {"header_table", header_table, METH_VARARGS, table_doc},
    {"check_headers", check_headers, METH_VARARGS, headers_doc},
    {"pack_bins", pack_bins, METH_VARARGS, pack_bins_doc},
    {"pack_counts", pack_counts, METH_VARARGS, pack_counts_doc},
    {"pack_rows", pack_rows, METH_VARARGS, pack_rows_doc},
    {"pack_windows", pack_windows, METH_VARARGS, pack_windows_doc},
    {"feistel_orders", feistel_orders, METH_VARARGS, feistel_orders_doc},
    {"pack_scan", pack_scan, METH_VARARGS, pack_scan_doc},
    {"pack_fit", pack_fit, METH_VARARGS, pack_fit_doc},
    {"cut_samples", cut_samples, METH_VARARGS, cut_doc},
    {"gather_members", gather_members, METH_VARARGS, gather_doc},
    {"read_samples", read_samples, METH_VARARGS, read_doc},
    {"decode_run", decode_run, METH_VARARGS, decode_doc},
    {"chunk_rows", chunk_rows, METH_VARARGS, chunk_rows_doc},
    {"unpack_fields", unpack_fields, METH_VARARGS, fields_doc},
    {"unpack_samples", unpack_samples, METH_VARARGS, samples_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "detsamplers._kernel",
    "The mixture's per-position loop, compiled (see detsamplers/_native.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

#ifndef DETSAMPLERS_KERNEL_SOURCES /* setup.py passes the C files' CRC-32 */
#define DETSAMPLERS_KERNEL_SOURCES ""
#endif

PyMODINIT_FUNC PyInit__kernel(void) {
    /* SOURCES: what _native._load compares with the C files beside it (a stale build) */
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCES", DETSAMPLERS_KERNEL_SOURCES) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
