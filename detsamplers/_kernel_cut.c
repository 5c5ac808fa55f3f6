/* A run of samples cut out of the bytes read, compiled (NOTE [ one way to read a sample ] in
 * detsamplers/loader/_wds/read/_sample_span.py): part of the detsamplers._kernel extension
 * (_kernel.c lists its functions). cut_samples builds the dict of each sample of a run, as
 * _sample_span.cut_samples does in Python (the reference, and the path without the kernel):
 * "__key__", "__url__", one bytes object per member cut out of the span at the offsets of the
 * index, in the index's order, then "__local_path__". tests/webdataset/test_wds_cut_samples.py compares the two.
 *
 * gather_members copies the members of a piece of a window into the window's compact copy,
 * where cut_samples then cuts them (NOTE [ kept windows ] in read/_shard_reader.py).
 *
 * read_samples reads a batch's samples of one cached shard (NOTE [ cached reads ] in
 * read/_cache_reader.py) with the pread it is handed (os.pread, looked up by the caller) and
 * cuts each with one_sample, as _sample_span.read_samples does in Python (its reference).
 *
 * Every offset and length is checked against the span and every index against the columns
 * before anything is read; a member outside the span is a ValueError (the Python reference
 * would cut it short), an index outside the shard an IndexError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

extern const char cut_doc[], gather_doc[], read_doc[];
PyObject *cut_samples(PyObject *self, PyObject *args);
PyObject *gather_members(PyObject *self, PyObject *args);
PyObject *read_samples(PyObject *self, PyObject *args);

const char cut_doc[] =
    "cut_samples(data, base, starts, offsets, sizes, keys, suffixes, url, local, indexes, slots,\n"
    "            out, /) -> None\n\n"
    "For each i in slots, out[i] = the dict of sample indexes[i]: {'__key__': keys[index],\n"
    "'__url__': url, suffixes[j]: data[offsets[j] - base:][:sizes[j]] for its members j in\n"
    "[starts[index], starts[index + 1]), '__local_path__': local}, without '__local_path__' when\n"
    "local is None. starts, offsets and sizes hold int64 items; keys and suffixes are lists or\n"
    "tuples; out is a list.";

static PyObject *key_name, *url_name, *path_name; /* "__key__", "__url__", "__local_path__" */

static int names_ready(void) {
    if (key_name != NULL) return 1;
    key_name = PyUnicode_InternFromString("__key__");
    url_name = PyUnicode_InternFromString("__url__");
    path_name = PyUnicode_InternFromString("__local_path__");
    if (key_name == NULL || url_name == NULL || path_name == NULL) {
        Py_CLEAR(key_name);
        Py_CLEAR(url_name);
        Py_CLEAR(path_name);
        return 0;
    }
    return 1;
}

/* An int64 buffer's items (native byte order, "q" or "l" of 8 bytes), or 0 with an error set. */
static int int64_buffer(PyObject *o, Py_buffer *b, const char *name, int writable) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return 0;
    const char *format = b->format == NULL ? "B" : b->format;
    if (*format == '@' || *format == '=' || (*format == '<' && PY_LITTLE_ENDIAN) || (*format == '>' && !PY_LITTLE_ENDIAN))
        format++;
    if (b->itemsize != 8 || !(strcmp(format, "q") == 0 || strcmp(format, "l") == 0)) {
        PyErr_Format(PyExc_ValueError, "%s should hold int64 items", name);
        PyBuffer_Release(b);
        return 0;
    }
    return 1;
}

/* The dict of sample index, or NULL with an error set; no "__local_path__" when local is NULL. */
static PyObject *one_sample(const uint8_t *bytes, Py_ssize_t length, int64_t base, const int64_t *starts,
                            int64_t samples, const int64_t *offsets, const int64_t *sizes, int64_t members,
                            PyObject *const *keys, PyObject *const *suffixes, PyObject *url, PyObject *local,
                            int64_t index) {
    if (index < 0 || index >= samples) {
        PyErr_Format(PyExc_IndexError, "sample %lld of %lld", (long long)index, (long long)samples);
        return NULL;
    }
    int64_t low = starts[index], high = starts[index + 1];
    if (low < 0 || high < low || high > members) {
        PyErr_Format(PyExc_ValueError, "sample %lld's members [%lld, %lld) lie outside the %lld members",
                     (long long)index, (long long)low, (long long)high, (long long)members);
        return NULL;
    }
    PyObject *sample = PyDict_New();
    if (sample == NULL) return NULL;
    if (PyDict_SetItem(sample, key_name, keys[index]) < 0 || PyDict_SetItem(sample, url_name, url) < 0) goto fail;
    for (int64_t j = low; j < high; j++) {
        int64_t at = offsets[j] - base, size = sizes[j];
        if (size < 0 || at < 0 || at > (int64_t)length || size > (int64_t)length - at) {
            PyErr_Format(PyExc_ValueError,
                         "member %lld (%lld bytes at byte %lld) lies outside the %zd bytes read from byte %lld",
                         (long long)j, (long long)size, (long long)offsets[j], length, (long long)base);
            goto fail;
        }
        PyObject *value = PyBytes_FromStringAndSize((const char *)bytes + at, (Py_ssize_t)size);
        if (value == NULL) goto fail;
        int failed = PyDict_SetItem(sample, suffixes[j], value);
        Py_DECREF(value);
        if (failed < 0) goto fail;
    }
    if (local != NULL && PyDict_SetItem(sample, path_name, local) < 0) goto fail;
    return sample;
fail:
    Py_DECREF(sample);
    return NULL;
}

PyObject *cut_samples(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_o, *starts_o, *offsets_o, *sizes_o, *keys_o, *suffixes_o, *url, *local, *indexes_o, *slots_o,
        *out;
    long long base;
    if (!PyArg_ParseTuple(args, "OLOOOOOOOOOO", &data_o, &base, &starts_o, &offsets_o, &sizes_o, &keys_o,
                          &suffixes_o, &url, &local, &indexes_o, &slots_o, &out))
        return NULL;
    if (local == Py_None) local = NULL; /* a remote shard's samples: no "__local_path__" */
    if (!names_ready()) return NULL;
    if (!PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "out should be a list");
        return NULL;
    }
    if (!(PyList_Check(keys_o) || PyTuple_Check(keys_o)) || !(PyList_Check(suffixes_o) || PyTuple_Check(suffixes_o))) {
        PyErr_SetString(PyExc_TypeError, "keys and suffixes should be lists or tuples");
        return NULL;
    }
    Py_buffer data, starts, offsets, sizes;
    PyObject *indexes = NULL, *slots = NULL, *result = NULL;
    int held = 0;
    if (PyObject_GetBuffer(data_o, &data, PyBUF_SIMPLE) < 0) return NULL;
    held = 1;
    if (!int64_buffer(starts_o, &starts, "starts", 0)) goto done;
    held = 2;
    if (!int64_buffer(offsets_o, &offsets, "offsets", 0)) goto done;
    held = 3;
    if (!int64_buffer(sizes_o, &sizes, "sizes", 0)) goto done;
    held = 4;
    int64_t samples = starts.len / 8 - 1, members = offsets.len / 8;
    if (samples < 0 || sizes.len / 8 != members || PySequence_Fast_GET_SIZE(keys_o) != samples ||
        PySequence_Fast_GET_SIZE(suffixes_o) != members) {
        PyErr_SetString(PyExc_ValueError,
                        "keys should hold one item per sample (starts one more), suffixes and sizes one per offset");
        goto done;
    }
    indexes = PySequence_Fast(indexes_o, "indexes should be a sequence");
    if (indexes == NULL) goto done;
    slots = PySequence_Fast(slots_o, "slots should be a sequence");
    if (slots == NULL) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(slots), wanted = PySequence_Fast_GET_SIZE(indexes);
    Py_ssize_t room = PyList_GET_SIZE(out);
    PyObject *const *keys = PySequence_Fast_ITEMS(keys_o), *const *suffixes = PySequence_Fast_ITEMS(suffixes_o);
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t i = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, k));
        if (i == -1 && PyErr_Occurred()) goto done;
        if (i < 0 || i >= wanted || i >= room) {
            PyErr_Format(PyExc_IndexError, "slot %zd lies outside the %zd indexes or the %zd outputs", i, wanted,
                         room);
            goto done;
        }
        long long index = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(indexes, i));
        if (index == -1 && PyErr_Occurred()) goto done;
        PyObject *sample = one_sample(data.buf, data.len, base, starts.buf, samples, offsets.buf, sizes.buf, members,
                                      keys, suffixes, url, local, (int64_t)index);
        if (sample == NULL) goto done;
        PyObject *old = PyList_GET_ITEM(out, i);
        PyList_SET_ITEM(out, i, sample);
        Py_XDECREF(old);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(indexes);
    Py_XDECREF(slots);
    if (held >= 4) PyBuffer_Release(&sizes);
    if (held >= 3) PyBuffer_Release(&offsets);
    if (held >= 2) PyBuffer_Release(&starts);
    PyBuffer_Release(&data);
    return result;
}

const char gather_doc[] =
    "gather_members(data, base, offsets, sizes, first, stop, out, at, positions, /) -> int\n\n"
    "Copy the bytes of members first, ..., stop - 1 (data[offsets[j] - base:][:sizes[j]]) one after\n"
    "the other into the writable buffer out from byte at, set positions[j] to where each went, and\n"
    "return the byte after the last. offsets, sizes and positions hold int64 items.";

PyObject *gather_members(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *data_o, *offsets_o, *sizes_o, *out_o, *positions_o;
    long long base, first, stop, at;
    if (!PyArg_ParseTuple(args, "OLOOLLOLO", &data_o, &base, &offsets_o, &sizes_o, &first, &stop, &out_o, &at,
                          &positions_o))
        return NULL;
    Py_buffer data, offsets, sizes, out, positions;
    int held = 0;
    PyObject *result = NULL;
    if (PyObject_GetBuffer(data_o, &data, PyBUF_SIMPLE) < 0) return NULL;
    held = 1;
    if (!int64_buffer(offsets_o, &offsets, "offsets", 0)) goto done;
    held = 2;
    if (!int64_buffer(sizes_o, &sizes, "sizes", 0)) goto done;
    held = 3;
    if (PyObject_GetBuffer(out_o, &out, PyBUF_WRITABLE) < 0) goto done;
    held = 4;
    if (!int64_buffer(positions_o, &positions, "positions", 1)) goto done;
    held = 5;
    int64_t members = offsets.len / 8;
    if (positions.len / 8 != members || sizes.len / 8 != members) {
        PyErr_SetString(PyExc_ValueError, "sizes and positions should hold one int64 item per offset");
        goto done;
    }
    if (first < 0 || stop > members || first > stop || at < 0 || at > out.len) {
        PyErr_SetString(PyExc_ValueError, "first and stop should lie inside the members, at inside out");
        goto done;
    }
    const int64_t *offset = offsets.buf, *size = sizes.buf;
    int64_t *position = positions.buf;
    for (long long j = first; j < stop; j++) {
        int64_t from = offset[j] - base, n = size[j];
        if (n < 0 || from < 0 || from > (int64_t)data.len || n > (int64_t)data.len - from || n > out.len - at) {
            PyErr_Format(PyExc_ValueError,
                         "member %lld (%lld bytes at byte %lld) lies outside the %zd bytes read from byte %lld, "
                         "or past the end of out",
                         j, (long long)n, (long long)offset[j], data.len, base);
            goto done;
        }
        memcpy((char *)out.buf + at, (const char *)data.buf + from, (size_t)n);
        position[j] = at;
        at += n;
    }
    result = PyLong_FromLongLong(at);
done:
    if (held >= 5) PyBuffer_Release(&positions);
    if (held >= 4) PyBuffer_Release(&out);
    if (held >= 3) PyBuffer_Release(&sizes);
    if (held >= 2) PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    return result;
}

const char read_doc[] =
    "read_samples(pread, fd, base, starts, offsets, sizes, keys, suffixes, url, indexes, slots, out,\n"
    "             run_bytes, /) -> int\n\n"
    "For each i in slots, out[i] = the dict of sample indexes[i] of a shard whose members lie in tar\n"
    "order: {'__key__': keys[index], '__url__': url, suffixes[j]: its bytes, for its members j}, read\n"
    "by pread(fd, length, offset - base): one call a sample, or one for a run of slots i, i + 1, ...\n"
    "whose indexes follow one another, when the run's members span at most run_bytes (a longer run:\n"
    "one call a sample). Returns -1, or the slot whose read came back short (the slots before it\n"
    "filled). starts, offsets and sizes hold int64 items; keys and suffixes are lists or tuples.";

/* The int at position k of a fast sequence, or -1 with an error set. */
static Py_ssize_t item_at(PyObject *seq, Py_ssize_t k, Py_ssize_t below, const char *what) {
    Py_ssize_t value = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(seq, k));
    if (value == -1 && PyErr_Occurred()) return -1;
    if (value < 0 || value >= below) {
        PyErr_Format(PyExc_IndexError, "%s %zd lies outside the %zd indexes or outputs", what, value, below);
        return -1;
    }
    return value;
}

PyObject *read_samples(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *pread, *fd, *starts_o, *offsets_o, *sizes_o, *keys_o, *suffixes_o, *url, *indexes_o, *slots_o, *out;
    long long base, run_bytes;
    if (!PyArg_ParseTuple(args, "OOLOOOOOOOOOL", &pread, &fd, &base, &starts_o, &offsets_o, &sizes_o, &keys_o,
                          &suffixes_o, &url, &indexes_o, &slots_o, &out, &run_bytes))
        return NULL;
    if (!names_ready()) return NULL;
    if (!PyCallable_Check(pread) || !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "pread should be callable and out a list");
        return NULL;
    }
    if (!(PyList_Check(keys_o) || PyTuple_Check(keys_o)) || !(PyList_Check(suffixes_o) || PyTuple_Check(suffixes_o))) {
        PyErr_SetString(PyExc_TypeError, "keys and suffixes should be lists or tuples");
        return NULL;
    }
    Py_buffer starts_b, offsets_b, sizes_b;
    PyObject *indexes = NULL, *slots = NULL, *result = NULL, *data = NULL;
    Py_buffer view;
    int held = 0, viewing = 0;
    if (!int64_buffer(starts_o, &starts_b, "starts", 0)) return NULL;
    held = 1;
    if (!int64_buffer(offsets_o, &offsets_b, "offsets", 0)) goto done;
    held = 2;
    if (!int64_buffer(sizes_o, &sizes_b, "sizes", 0)) goto done;
    held = 3;
    const int64_t *starts = starts_b.buf, *offsets = offsets_b.buf, *sizes = sizes_b.buf;
    int64_t samples = starts_b.len / 8 - 1, members = offsets_b.len / 8;
    if (samples < 0 || sizes_b.len / 8 != members || PySequence_Fast_GET_SIZE(keys_o) != samples ||
        PySequence_Fast_GET_SIZE(suffixes_o) != members) {
        PyErr_SetString(PyExc_ValueError,
                        "keys should hold one item per sample (starts one more), suffixes and sizes one per offset");
        goto done;
    }
    indexes = PySequence_Fast(indexes_o, "indexes should be a sequence");
    if (indexes == NULL) goto done;
    slots = PySequence_Fast(slots_o, "slots should be a sequence");
    if (slots == NULL) goto done;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(slots), wanted = PySequence_Fast_GET_SIZE(indexes);
    Py_ssize_t room = PyList_GET_SIZE(out) < wanted ? PyList_GET_SIZE(out) : wanted;
    PyObject *const *keys = PySequence_Fast_ITEMS(keys_o), *const *suffixes = PySequence_Fast_ITEMS(suffixes_o);
    Py_ssize_t k = 0, singles = 0;
    while (k < count) {
        Py_ssize_t i = item_at(slots, k, room, "slot");
        if (i < 0) goto done;
        long long index = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(indexes, i));
        if (index == -1 && PyErr_Occurred()) goto done;
        if (index < 0 || index >= samples) {
            PyErr_Format(PyExc_IndexError, "sample %lld of %lld in shard %R", index, (long long)samples, url);
            goto done;
        }
        /* The run: the next slots, one after the other, whose indexes follow one another. */
        Py_ssize_t stop = k + 1, previous = i;
        long long last = index;
        while (k >= singles && stop < count) {
            Py_ssize_t next = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, stop));
            if (next == -1 && PyErr_Occurred()) goto done;
            if (next != previous + 1 || next >= room) break;
            long long following = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(indexes, next));
            if (following == -1 && PyErr_Occurred()) goto done;
            if (following != last + 1 || following >= samples) break;
            previous = next, last = following, stop++;
        }
        int64_t low = starts[index], high = starts[last + 1];
        if (low < 0 || high < low || high > members) {
            PyErr_Format(PyExc_ValueError, "samples %lld to %lld's members [%lld, %lld) lie outside the %lld members",
                         index, last, (long long)low, (long long)high, (long long)members);
            goto done;
        }
        if (high > low && stop - k > 1 && offsets[high - 1] + sizes[high - 1] - offsets[low] > run_bytes) {
            singles = stop; /* a run too long: each of its samples read alone */
            stop = k + 1, last = index, high = starts[index + 1];
            if (high < low || high > members) {
                PyErr_Format(PyExc_ValueError, "sample %lld's members lie outside the %lld members", index,
                             (long long)members);
                goto done;
            }
        }
        const uint8_t *bytes = NULL;
        Py_ssize_t length = 0;
        int64_t start = 0;
        if (high > low) {
            start = offsets[low];
            int64_t end = offsets[high - 1] + sizes[high - 1];
            if (end < start || start - base < 0) {
                PyErr_Format(PyExc_ValueError, "samples %lld to %lld's members do not lie in tar order after byte %lld",
                             index, last, base);
                goto done;
            }
            PyObject *argv[3] = {fd, PyLong_FromLongLong(end - start), PyLong_FromLongLong(start - base)};
            if (argv[1] != NULL && argv[2] != NULL) data = PyObject_Vectorcall(pread, argv, 3, NULL);
            Py_XDECREF(argv[1]);
            Py_XDECREF(argv[2]);
            if (data == NULL) goto done;
            if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) goto done;
            viewing = 1;
            if (view.len != end - start) {
                result = PyLong_FromSsize_t(i);
                goto done;
            }
            bytes = view.buf, length = view.len;
        }
        for (Py_ssize_t m = k; m < stop; m++) {
            Py_ssize_t slot = m == k ? i : PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(slots, m));
            long long at = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(indexes, slot));
            PyObject *sample = one_sample(bytes, length, start, starts, samples, offsets, sizes, members, keys,
                                          suffixes, url, NULL, (int64_t)at);
            if (sample == NULL) goto done;
            PyObject *old = PyList_GET_ITEM(out, slot);
            PyList_SET_ITEM(out, slot, sample);
            Py_XDECREF(old);
        }
        if (viewing) PyBuffer_Release(&view);
        viewing = 0;
        Py_CLEAR(data);
        k = stop;
    }
    result = PyLong_FromLong(-1);
done:
    if (viewing) PyBuffer_Release(&view);
    Py_XDECREF(data);
    Py_XDECREF(indexes);
    Py_XDECREF(slots);
    if (held >= 3) PyBuffer_Release(&sizes_b);
    if (held >= 2) PyBuffer_Release(&offsets_b);
    PyBuffer_Release(&starts_b);
    return result;
}
