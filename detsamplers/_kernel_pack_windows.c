/* A batch's pack windows, packed end to end in one call (NOTE [ compiled window packing ] in
 * detsamplers/tokens/_pack_windows.py): part of the detsamplers._kernel extension (_kernel.c lists
 * its functions). From each document's two ends to the pieces grouped by sequence, the same
 * steps as PackOrder._pack_windows's numpy path, so the same arrays: the pieces of each document
 * (NOTE [ packed sequences ]), each window's pieces sorted by decreasing size, ties in window order
 * (a stable radix sort of capacity - size), best-fit by _kernel_pack.c's loop, the bins' reading
 * order (the keyed Feistel permutation of _permute.py, NOTE [ keyed permutation ], on 32-bit words
 * as numpy computes it, cycle-walked), and the pieces grouped by sequence, in window order within
 * one (a stable counting sort). tests/tokens/test_tokens_pack_windows.py compares the two paths.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* _kernel_pack.c's best-fit loop: each of sizes[0..n)'s bin into bins, keys n + 1 scratch items. */
int64_t best_fit(const int64_t *sizes, int64_t n, int64_t capacity, int64_t *bins, int64_t *keys);

/* _permute.py's constants: ROUNDS, SMALL_DOMAIN_ROUNDS, SMALL_DOMAIN, MIN_SIDE_BITS; _seeds.mix64. */
#define PW_ROUNDS 4
#define PW_SMALL_ROUNDS 8
#define PW_SMALL_DOMAIN 65536
#define PW_MIN_SIDE_BITS 3

static uint64_t pw_mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

/* One domain's network: _permute._halves and the round keys of _permute._keys_table. */
typedef struct {
    int64_t n;
    uint64_t magic; /* ceil(2**64 / divisor): h / divisor as one multiply (pw_divide) */
    uint32_t k, b, divisor, top, rounds, keys[PW_SMALL_ROUNDS];
} network;

/* h / f->divisor for a 32-bit h: the high word of h * ceil(2**64 / divisor), exact for every
 * 32-bit h and divisor >= 2 (Lemire, Kaser and Kurz, "Faster remainder by direct computation",
 * 2019, theorem 1 with N = 32 and F = 64); a division where the compiler has no 128-bit product. */
static inline uint32_t pw_divide(const network *f, uint32_t h) {
#ifdef __SIZEOF_INT128__
    if (f->magic != 0) return (uint32_t)(((unsigned __int128)f->magic * h) >> 64);
#endif
    return h / f->divisor;
}

static void network_of(network *f, int64_t n, uint64_t epoch, const uint64_t *seeds) {
    uint64_t v = (uint64_t)(n - 1), r = 0; /* isqrt(n - 1), then its bit length */
    for (int bit = 31; bit >= 0; bit--) {
        uint64_t t = r | ((uint64_t)1 << bit);
        if (t * t <= v) r = t;
    }
    uint32_t k = 0;
    while (r >> k) k++;
    if (k < PW_MIN_SIDE_BITS) k = PW_MIN_SIDE_BITS;
    uint64_t b = ((uint64_t)n + ((uint64_t)1 << k) - 1) >> k;
    if (b < ((uint64_t)1 << PW_MIN_SIDE_BITS)) b = (uint64_t)1 << PW_MIN_SIDE_BITS;
    f->n = n;
    f->k = k;
    f->b = (uint32_t)b;
    f->divisor = (uint32_t)((((uint64_t)1 << 32) + b - 1) / b);
    f->magic = f->divisor >= 2 ? UINT64_MAX / f->divisor + 1 : 0;
    f->top = 32 - k;
    f->rounds = (b << k) < PW_SMALL_DOMAIN ? PW_SMALL_ROUNDS : PW_ROUNDS;
    const uint64_t mixed = pw_mix64(epoch);
    for (uint32_t i = 0; i < f->rounds; i++) f->keys[i] = (uint32_t)(pw_mix64(seeds[i] ^ mixed) & 0xFFFFFFFFULL);
}

static inline uint32_t pw_hash(uint32_t half, uint32_t key) {
    uint32_t h = (half ^ key) * 0x85EBCA6BU;
    h ^= h >> 15;
    return h * 0xC2B2AE35U;
}

/* _permute._network on x, again until the value falls inside [0, n) (cycle walking). */
static int64_t network_at(const network *f, int64_t x) {
    do {
        uint32_t low = (uint32_t)(x & (((int64_t)1 << f->k) - 1)), high = (uint32_t)(x >> f->k);
        for (uint32_t i = 0; i < f->rounds; i++) {
            if (i % 2 == 0) {
                low ^= pw_hash(high, f->keys[i]) >> f->top;
            } else {
                uint32_t h = high + pw_divide(f, pw_hash(low, f->keys[i])), wrapped = h - f->b;
                high = wrapped < h ? wrapped : h;
            }
        }
        x = ((int64_t)high << f->k) | (int64_t)low;
    } while (x >= f->n);
    return x;
}

/* Positions first .. first + count - 1 of the keyed permutation of [0, n) at epoch (n >= 2):
 * _permute.FeistelPermutation(n, key).at_epoch for the key's round seeds; the pack index's
 * document order (_kernel_pack_index.c). */
void feistel_positions(int64_t n, uint64_t epoch, const uint64_t *seeds, int64_t first, int64_t count,
                       int64_t *out) {
    network f;
    network_of(&f, n, epoch, seeds);
    for (int64_t i = 0; i < count; i++) out[i] = network_at(&f, first + i);
}

/* network_at's inverse: the rounds undone last first, again until the value falls inside [0, n)
 * (the inverse of a cycle-walked bijection walks the inverse network). */
static int64_t network_back(const network *f, int64_t x) {
    do {
        uint32_t low = (uint32_t)(x & (((int64_t)1 << f->k) - 1)), high = (uint32_t)(x >> f->k);
        for (uint32_t i = f->rounds; i-- > 0;) {
            if (i % 2 == 0) {
                low ^= pw_hash(high, f->keys[i]) >> f->top;
            } else {
                const uint32_t q = pw_divide(f, pw_hash(low, f->keys[i])); /* q < b */
                high = high >= q ? high - q : high + (f->b - q);
            }
        }
        x = ((int64_t)high << f->k) | (int64_t)low;
    } while (x >= f->n);
    return x;
}

/* Where GCC can make an AVX2 copy of a loop and pick it when the CPU has it (as _kernel_pack.c's
 * ROWS_CLONES), eight lanes a step instead of four; elsewhere the plain build. */
#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && defined(__GNUC__) && !defined(__clang__)
#define PW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PW_CLONES
#endif

/* Values a step of feistel_inverse takes round by round. */
#define PW_STEP 512

/* Where values first .. first + count - 1 stand in the keyed permutation of [0, n) at epoch
 * (n >= 2): feistel_positions's inverse, out[i] = p where permutation(p) = first + i; the pack
 * index's scan (_kernel_pack_index.c). network_back's arithmetic, a round over PW_STEP values at
 * a time (loops the compiler vectorises): the division by the 32-bit halves of magic, exact as
 * pw_divide's 128-bit product (floor((h Mh 2**32 + h Ml) / 2**64) = floor((h Mh + floor(h Ml /
 * 2**32)) / 2**32), no overflow: h Mh + 2**32 < 2**64). A value the network sends outside [0, n)
 * walks on in network_back. */
PW_CLONES void feistel_inverse(int64_t n, uint64_t epoch, const uint64_t *seeds, int64_t first, int64_t count,
                               int64_t *out) {
    network f;
    network_of(&f, n, epoch, seeds);
    if (f.magic == 0) { /* divisor 1: not met for n <= 2**62, kept exact anyway */
        for (int64_t i = 0; i < count; i++) out[i] = network_back(&f, first + i);
        return;
    }
    uint32_t low[PW_STEP], high[PW_STEP];
    const uint32_t k = f.k, top = f.top, b = f.b, mask = (uint32_t)(((uint64_t)1 << k) - 1);
    const uint64_t mh = f.magic >> 32, ml = f.magic & 0xFFFFFFFFULL;
    for (int64_t at = 0; at < count; at += PW_STEP) {
        const int64_t m = count - at < PW_STEP ? count - at : PW_STEP;
        for (int64_t i = 0; i < m; i++) {
            const uint64_t x = (uint64_t)(first + at + i);
            low[i] = (uint32_t)(x & mask);
            high[i] = (uint32_t)(x >> k);
        }
        for (uint32_t r = f.rounds; r-- > 0;) {
            const uint32_t key = f.keys[r];
            if (r % 2 == 0) {
                for (int64_t i = 0; i < m; i++) low[i] ^= pw_hash(high[i], key) >> top;
            } else {
                for (int64_t i = 0; i < m; i++) {
                    const uint64_t h = pw_hash(low[i], key);
                    const uint32_t q = (uint32_t)((mh * h + ((ml * h) >> 32)) >> 32), d = high[i] - q;
                    high[i] = high[i] >= q ? d : d + b;
                }
            }
        }
        for (int64_t i = 0; i < m; i++) {
            const int64_t x = ((int64_t)high[i] << k) | (int64_t)low[i];
            out[at + i] = x < n ? x : network_back(&f, x);
        }
    }
}

/* A C-contiguous buffer of items of itemsize (items < 0: any count); 0, or -1 raised. Shared with
 * _kernel_pack_index.c. */
int pw_view(PyObject *obj, Py_buffer *view, Py_ssize_t items, Py_ssize_t itemsize, int writable,
                   const char *name) {
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0) {
        view->obj = NULL;
        return -1;
    }
    if (view->itemsize != itemsize || (items >= 0 && view->len != items * itemsize)) {
        PyErr_Format(PyExc_ValueError, "%s should hold %zd items of %zd bytes, not %zd bytes", name, items,
                     itemsize, view->len);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

const char feistel_orders_doc[] =
    "feistel_orders(counts, epochs, seeds, out, /) -> None\n\n"
    "_permute.FeistelPermutation.orders: the whole order of each domain of counts (int64, at\n"
    "least 1) at its epoch (int64), concatenated into out (int64, sum(counts) items); seeds are\n"
    "the key's round seeds (_permute._round_seeds, 8 uint64 items).";
PyObject *feistel_orders(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *objs[4];
    if (!PyArg_ParseTuple(args, "OOOO", &objs[0], &objs[1], &objs[2], &objs[3])) return NULL;
    Py_buffer v[4];
    for (int i = 0; i < 4; i++) v[i].obj = NULL;
    int ok = pw_view(objs[0], &v[0], -1, 8, 0, "counts") == 0;
    ok = ok && pw_view(objs[1], &v[1], v[0].len / 8, 8, 0, "epochs") == 0;
    ok = ok && pw_view(objs[2], &v[2], PW_SMALL_ROUNDS, 8, 0, "seeds") == 0;
    const int64_t domains = ok ? v[0].len / 8 : 0, *counts = ok ? v[0].buf : NULL;
    int64_t total = 0;
    for (int64_t d = 0; ok && d < domains; d++) {
        if (counts[d] < 1 || counts[d] > ((int64_t)1 << 62)) {
            PyErr_Format(PyExc_ValueError, "counts should be in [1, 2**62], but count %lld is %lld", (long long)d,
                         (long long)counts[d]);
            ok = 0;
        }
        total += ok ? counts[d] : 0;
    }
    ok = ok && pw_view(objs[3], &v[3], (Py_ssize_t)total, 8, 1, "out") == 0;
    if (ok) {
        const int64_t *epochs = v[1].buf;
        int64_t *out = v[3].buf;
        Py_BEGIN_ALLOW_THREADS
        for (int64_t d = 0; d < domains; d++) {
            network f;
            network_of(&f, counts[d], (uint64_t)epochs[d], v[2].buf);
            for (int64_t i = 0; i < counts[d]; i++) out[i] = counts[d] == 1 ? 0 : network_at(&f, i);
            out += counts[d];
        }
        Py_END_ALLOW_THREADS
    }
    for (int i = 0; i < 4; i++)
        if (v[i].obj != NULL) PyBuffer_Release(&v[i]);
    if (!ok) return NULL;
    Py_RETURN_NONE;
}

/* Stable sort of idx[0..m) (0..m-1 in) by key[idx] ascending, keys in [0, top]: LSD radix, 8 bits. */
static void pw_sort(int64_t *idx, int64_t *tmp, const int64_t *key, int64_t m, int64_t top) {
    for (int shift = 0; shift < 64 && (top >> shift) != 0; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < m; i++) count[((key[idx[i]] >> shift) & 255) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int64_t i = 0; i < m; i++) tmp[count[(key[idx[i]] >> shift) & 255]++] = idx[i];
        memcpy(idx, tmp, (size_t)m * sizeof(int64_t));
    }
}

enum { IN_DOCS, IN_STARTS, IN_STOPS, IN_SPANS, IN_SEEDS, IN_EPOCHS, OUT_COUNTS, OUT_DOCS, OUT_FIRSTS, OUT_SIZES,
       OUT_CLOSES, OUT_OFFSETS, PW_VIEWS };

const char pack_windows_doc[] =
    "pack_windows(docs, starts, stops, spans, capacity, split, seeds, epochs, counts, docs_out,\n"
    "             firsts, sizes, closes, offsets, /) -> int\n\n"
    "PackOrder._pack_windows's arrays: windows of spans[i] consecutive documents of docs (int64,\n"
    "with their corpus starts and stops), packed into bins of capacity tokens (split: long\n"
    "documents cut into pieces, else truncated), bins read in the keyed order of seeds (8\n"
    "uint64 round seeds) at each window's epochs item. Out: each window's bin count (int64),\n"
    "the pieces grouped by sequence (docs_out, firsts, sizes int64 and closes bool, one item\n"
    "a piece) and each window's count + 1 piece offsets one after the other (int64, pieces +\n"
    "windows items). Returns the number of bins.";
PyObject *pack_windows(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[PW_VIEWS];
    long long capacity;
    int split;
    if (!PyArg_ParseTuple(args, "OOOOLpOOOOOOOO", &o[IN_DOCS], &o[IN_STARTS], &o[IN_STOPS], &o[IN_SPANS],
                          &capacity, &split, &o[IN_SEEDS], &o[IN_EPOCHS], &o[OUT_COUNTS], &o[OUT_DOCS],
                          &o[OUT_FIRSTS], &o[OUT_SIZES], &o[OUT_CLOSES], &o[OUT_OFFSETS]))
        return NULL;
    Py_buffer v[PW_VIEWS];
    for (int i = 0; i < PW_VIEWS; i++) v[i].obj = NULL;
    int ok = pw_view(o[IN_DOCS], &v[IN_DOCS], -1, 8, 0, "docs") == 0;
    const Py_ssize_t n = ok ? v[IN_DOCS].len / 8 : 0;
    ok = ok && pw_view(o[IN_STARTS], &v[IN_STARTS], n, 8, 0, "starts") == 0;
    ok = ok && pw_view(o[IN_STOPS], &v[IN_STOPS], n, 8, 0, "stops") == 0;
    ok = ok && pw_view(o[IN_SPANS], &v[IN_SPANS], -1, 8, 0, "spans") == 0;
    const Py_ssize_t windows = ok ? v[IN_SPANS].len / 8 : 0;
    ok = ok && pw_view(o[IN_SEEDS], &v[IN_SEEDS], PW_SMALL_ROUNDS, 8, 0, "seeds") == 0;
    ok = ok && pw_view(o[IN_EPOCHS], &v[IN_EPOCHS], windows, 8, 0, "epochs") == 0;
    ok = ok && pw_view(o[OUT_COUNTS], &v[OUT_COUNTS], windows, 8, 1, "counts") == 0;
    const int64_t *starts = ok ? v[IN_STARTS].buf : NULL, *stops = ok ? v[IN_STOPS].buf : NULL;
    const int64_t *spans = ok ? v[IN_SPANS].buf : NULL;
    int64_t pieces = 0, widest = 0, covered = 0;
    if (ok && capacity < 1) {
        PyErr_Format(PyExc_ValueError, "capacity should be at least 1, not %lld", capacity);
        ok = 0;
    }
    for (Py_ssize_t w = 0; ok && w < windows; w++) {
        int64_t here = 0;
        if (spans[w] < 1 || spans[w] > (int64_t)n - covered) {
            PyErr_Format(PyExc_ValueError, "spans should be at least 1 and sum to %zd documents, but span %zd is %lld",
                         n, w, (long long)spans[w]);
            ok = 0;
            break;
        }
        for (int64_t i = covered; ok && i < covered + spans[w]; i++) {
            const int64_t length = stops[i] - starts[i];
            if (length < 0) {
                PyErr_Format(PyExc_ValueError, "stops should not be before starts, but document %lld is [%lld, %lld)",
                             (long long)i, (long long)starts[i], (long long)stops[i]);
                ok = 0;
            }
            here += split ? (length + capacity - 1) / capacity : 1;
        }
        covered += spans[w];
        pieces += here;
        if (here > widest) widest = here;
    }
    if (ok && covered != (int64_t)n) {
        PyErr_Format(PyExc_ValueError, "spans should sum to %zd documents, not %lld", n, (long long)covered);
        ok = 0;
    }
    if (ok && capacity > (INT64_MAX - widest) / (widest + 1)) {
        PyErr_Format(PyExc_ValueError, "capacity should be at most %lld for %lld pieces, not %lld",
                     (long long)((INT64_MAX - widest) / (widest + 1)), (long long)widest, capacity);
        ok = 0;
    }
    ok = ok && pw_view(o[OUT_DOCS], &v[OUT_DOCS], pieces, 8, 1, "docs_out") == 0;
    ok = ok && pw_view(o[OUT_FIRSTS], &v[OUT_FIRSTS], pieces, 8, 1, "firsts") == 0;
    ok = ok && pw_view(o[OUT_SIZES], &v[OUT_SIZES], pieces, 8, 1, "sizes") == 0;
    ok = ok && pw_view(o[OUT_CLOSES], &v[OUT_CLOSES], pieces, 1, 1, "closes") == 0;
    ok = ok && pw_view(o[OUT_OFFSETS], &v[OUT_OFFSETS], pieces + windows, 8, 1, "offsets") == 0;
    /* Scratch a window: owner, offset, size, key, idx, tmp, sorted, placed, bin, rank, keys (+ 1). */
    int64_t *scratch = NULL, bins = 0;
    if (ok && (scratch = PyMem_Malloc((size_t)(11 * widest + 1) * sizeof(int64_t))) == NULL) {
        PyErr_NoMemory();
        ok = 0;
    }
    if (ok) {
        const int64_t *docs = v[IN_DOCS].buf, *epochs = v[IN_EPOCHS].buf;
        int64_t *counts = v[OUT_COUNTS].buf, *docs_out = v[OUT_DOCS].buf, *firsts = v[OUT_FIRSTS].buf;
        int64_t *sizes_out = v[OUT_SIZES].buf, *offsets = v[OUT_OFFSETS].buf;
        uint8_t *closes = v[OUT_CLOSES].buf;
        int64_t *owner = scratch, *offset = owner + widest, *size = offset + widest, *key = size + widest;
        int64_t *idx = key + widest, *tmp = idx + widest, *sorted = tmp + widest, *placed = sorted + widest;
        int64_t *bin = placed + widest, *rank = bin + widest, *keys = rank + widest;
        int64_t doc = 0, out = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t w = 0; w < windows; w++) {
            int64_t m = 0; /* the window's pieces, in window order */
            for (int64_t i = doc; i < doc + spans[w]; i++) {
                const int64_t length = stops[i] - starts[i], parts = split ? (length + capacity - 1) / capacity : 1;
                for (int64_t j = 0; j < parts; j++, m++) {
                    owner[m] = i;
                    offset[m] = j * capacity;
                    size[m] = length - offset[m] < capacity ? length - offset[m] : capacity;
                    key[m] = capacity - size[m];
                    idx[m] = m;
                }
            }
            pw_sort(idx, tmp, key, m, capacity);
            for (int64_t i = 0; i < m; i++) sorted[i] = size[idx[i]];
            const int64_t count = best_fit(sorted, m, capacity, placed, keys);
            for (int64_t i = 0; i < m; i++) bin[idx[i]] = placed[i];
            network f; /* sequence j of the window is its bin order[j]: rank[order[j]] = j */
            network_of(&f, count, (uint64_t)epochs[w], v[IN_SEEDS].buf);
            for (int64_t j = 0; j < count; j++) rank[count == 1 ? 0 : network_at(&f, j)] = j;
            int64_t *at = offsets; /* at[s + 1]: pieces of sequence s, then where it starts */
            memset(at, 0, (size_t)(count + 1) * sizeof(int64_t));
            for (int64_t p = 0; p < m; p++) at[rank[bin[p]] + 1]++;
            for (int64_t s = 0; s < count; s++) at[s + 1] += at[s];
            for (int64_t s = 0; s < count; s++) tmp[s] = at[s];
            for (int64_t p = 0; p < m; p++) {
                const int64_t q = out + tmp[rank[bin[p]]]++, i = owner[p];
                docs_out[q] = docs[i];
                firsts[q] = starts[i] + offset[p];
                sizes_out[q] = size[p];
                closes[q] = offset[p] + size[p] == stops[i] - starts[i];
            }
            counts[w] = count;
            bins += count;
            offsets += count + 1;
            out += m;
            doc += spans[w];
        }
        Py_END_ALLOW_THREADS
        PyMem_Free(scratch);
    }
    for (int i = 0; i < PW_VIEWS; i++)
        if (v[i].obj != NULL) PyBuffer_Release(&v[i]);
    return ok ? PyLong_FromLongLong(bins) : NULL;
}
