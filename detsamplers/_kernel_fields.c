/* A sample's packed small fields split back, compiled (NOTE [ packed small fields ] in
 * detsamplers/loader/_wds/shard/_small_fields.py): part of the detsamplers._kernel extension
 * (_kernel.c lists its functions). unpack_fields gives what _small_fields.unpack_fields gives
 * for a dict whose packed member is bytes of the well-formed subset the NOTE describes with
 * field names of ASCII letters: the fields split out, lower-cased, and put in sorted order
 * where the first of the sample's fields was. Anything else, a malformed member, a name out of
 * ASCII, a repeated name or one the sample already has, a key that is not a str, gives None:
 * the Python function (the reference, and the path without the kernel) then reads the sample
 * and raises the error naming the shard, the sample and the byte.
 * tests/webdataset/test_wds_packed_kernel.py compares the two.
 *
 * Every length is checked against the member's bytes before it is used; nothing is allocated
 * beyond one bytes object and one str per field.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

extern const char fields_doc[], samples_doc[];
PyObject *unpack_fields(PyObject *self, PyObject *args);
PyObject *unpack_samples(PyObject *self, PyObject *args);

const char fields_doc[] =
    "unpack_fields(sample, suffix, /) -> dict | None\n\n"
    "The dict sample with its member sample[suffix] (bytes holding a MessagePack map of str to\n"
    "bin) split into its fields, as _small_fields.unpack_fields splits it; None when the member\n"
    "is missing, not bytes, or not of the accepted form, or when a name is not ASCII, repeated\n"
    "or already a key of sample (the Python function then says why).";

const char samples_doc[] =
    "unpack_samples(samples, suffix, /) -> int\n\n"
    "unpack_fields of each dict of the list samples that holds suffix, in place, in order, up to\n"
    "the first it hands back or that is not a dict: returns its position (the Python loop goes\n"
    "on from there), or -1 when every sample is done.";

/* The big-endian length of width bytes at data[at], or -1 when it runs past n. */
static int64_t length_at(const uint8_t *data, Py_ssize_t n, Py_ssize_t at, int width) {
    if (at + width > n) return -1;
    int64_t value = 0;
    for (int i = 0; i < width; i++) value = (value << 8) | data[at + i];
    return value;
}

static int width_of(uint8_t code, uint8_t one, uint8_t two, uint8_t four) {
    return code == one ? 1 : code == two ? 2 : code == four ? 4 : 0;
}

/* The member's fields as a new dict of str to bytes, Py_None (a new reference) when the member
 * is not of the subset handled here, or NULL with an error set (out of memory). */
static PyObject *split(const uint8_t *data, Py_ssize_t n) {
    if (n == 0) Py_RETURN_NONE;
    uint8_t code = data[0];
    Py_ssize_t at = 1;
    int64_t count;
    if (code > 0x80 && code <= 0x8F) {
        count = code & 0x0F;
    } else if (code == 0xDE || code == 0xDF) {
        int width = code == 0xDE ? 2 : 4;
        count = length_at(data, n, at, width);
        at += width;
    } else {
        Py_RETURN_NONE;
    }
    if (count <= 0 || count > (n - at) / 4) Py_RETURN_NONE;
    PyObject *fields = PyDict_New();
    if (fields == NULL) return NULL;
    for (int64_t f = 0; f < count; f++) {
        if (at >= n) goto not_ours;
        code = data[at];
        int64_t length;
        if (code >= 0xA0 && code <= 0xBF) {
            length = code & 0x1F;
            at += 1;
        } else {
            int width = width_of(code, 0xD9, 0xDA, 0xDB);
            if (width == 0) goto not_ours;
            length = length_at(data, n, at + 1, width);
            at += 1 + width;
        }
        if (length <= 0 || length > n - at) goto not_ours;
        const uint8_t *raw = data + at;
        if (raw[0] == '_') goto not_ours;
        PyObject *name = PyUnicode_New(length, 127);
        if (name == NULL) goto error;
        Py_UCS1 *chars = PyUnicode_1BYTE_DATA(name);
        for (int64_t i = 0; i < length; i++) {
            uint8_t c = raw[i];
            if (c >= 0x80 || c == '/' || c == 0) {
                Py_DECREF(name);
                goto not_ours;
            }
            chars[i] = (c >= 'A' && c <= 'Z') ? (Py_UCS1)(c + 32) : (Py_UCS1)c;
        }
        at += length;
        int width = at < n ? width_of(data[at], 0xC4, 0xC5, 0xC6) : 0;
        int64_t size = width ? length_at(data, n, at + 1, width) : -1;
        if (size < 0 || size > n - at - 1 - width) {
            Py_DECREF(name);
            goto not_ours;
        }
        at += 1 + width;
        int repeated = PyDict_Contains(fields, name);
        PyObject *value = repeated ? NULL : PyBytes_FromStringAndSize((const char *)data + at, size);
        if (repeated || value == NULL || PyDict_SetItem(fields, name, value) < 0) {
            Py_DECREF(name);
            Py_XDECREF(value);
            if (repeated > 0) goto not_ours;
            goto error;
        }
        Py_DECREF(name);
        Py_DECREF(value);
        at += size;
    }
    if (at != n) goto not_ours;
    return fields;
not_ours:
    Py_DECREF(fields);
    Py_RETURN_NONE;
error:
    Py_DECREF(fields);
    return NULL;
}

/* Whether a sample's key is a meta key (starts with "_"); -1 when it is not a str. */
static int is_meta(PyObject *key) {
    if (!PyUnicode_Check(key)) return -1;
    return PyUnicode_GET_LENGTH(key) > 0 && PyUnicode_READ_CHAR(key, 0) == '_';
}

/* unpack_fields for one dict: a new dict, Py_None (a new reference) or NULL with an error set. */
static PyObject *unpack_one(PyObject *sample, PyObject *suffix) {
    PyObject *data = PyDict_GetItemWithError(sample, suffix);
    if (data == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    if (!PyBytes_Check(data)) Py_RETURN_NONE;
    Py_INCREF(data); /* the sample may change under a __eq__ of a key below */
    PyObject *fields = split((const uint8_t *)PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data));
    Py_DECREF(data);
    if (fields == NULL || fields == Py_None) return fields;
    PyObject *rest = NULL, *out = NULL, *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(fields, &pos, &key, &value)) { /* a name the sample has: Python says so */
        int has = PyDict_Contains(sample, key);
        if (has != 0) goto done_none_or_error;
    }
    rest = PyList_New(0);
    if (rest == NULL) goto error;
    pos = 0;
    while (PyDict_Next(sample, &pos, &key, &value)) {
        int meta = is_meta(key);
        if (meta < 0) goto done_none;
        if (meta) continue;
        int same = PyUnicode_Compare(key, suffix) == 0;
        if (PyErr_Occurred()) goto error;
        if (same) continue;
        PyObject *pair = PyTuple_Pack(2, key, value);
        if (pair == NULL || PyList_Append(rest, pair) < 0) {
            Py_XDECREF(pair);
            goto error;
        }
        Py_DECREF(pair);
    }
    pos = 0;
    while (PyDict_Next(fields, &pos, &key, &value)) {
        PyObject *pair = PyTuple_Pack(2, key, value);
        if (pair == NULL || PyList_Append(rest, pair) < 0) {
            Py_XDECREF(pair);
            goto error;
        }
        Py_DECREF(pair);
    }
    if (PyList_Sort(rest) < 0) goto error; /* names are distinct: only names are compared */
    out = PyDict_New();
    if (out == NULL) goto error;
    int placed = 0;
    pos = 0;
    while (PyDict_Next(sample, &pos, &key, &value)) {
        if (is_meta(key)) {
            if (PyDict_SetItem(out, key, value) < 0) goto error;
        } else if (!placed) {
            placed = 1;
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rest); i++) {
                PyObject *pair = PyList_GET_ITEM(rest, i);
                if (PyDict_SetItem(out, PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0)
                    goto error;
            }
        }
    }
    Py_DECREF(rest);
    Py_DECREF(fields);
    return out;
done_none_or_error:
    if (PyErr_Occurred()) goto error;
done_none:
    Py_XDECREF(rest);
    Py_XDECREF(out);
    Py_DECREF(fields);
    Py_RETURN_NONE;
error:
    Py_XDECREF(rest);
    Py_XDECREF(out);
    Py_DECREF(fields);
    return NULL;
}

PyObject *unpack_fields(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *sample, *suffix;
    if (!PyArg_ParseTuple(args, "O!U", &PyDict_Type, &sample, &suffix)) return NULL;
    return unpack_one(sample, suffix);
}

PyObject *unpack_samples(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *samples, *suffix;
    if (!PyArg_ParseTuple(args, "O!U", &PyList_Type, &samples, &suffix)) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(samples); i++) {
        PyObject *sample = PyList_GET_ITEM(samples, i);
        if (!PyDict_CheckExact(sample)) return PyLong_FromSsize_t(i);
        int has = PyDict_Contains(sample, suffix);
        if (has < 0) return NULL;
        if (!has) continue;
        Py_INCREF(sample);
        PyObject *out = unpack_one(sample, suffix);
        Py_DECREF(sample);
        if (out == NULL) return NULL;
        if (out == Py_None) {
            Py_DECREF(out);
            return PyLong_FromSsize_t(i);
        }
        if (i >= PyList_GET_SIZE(samples)) { /* the list shrank under a key's __eq__ */
            Py_DECREF(out);
            PyErr_SetString(PyExc_RuntimeError, "samples changed size while they were unpacked");
            return NULL;
        }
        PyList_SetItem(samples, i, out); /* steals out, releases the sample */
    }
    return PyLong_FromLong(-1);
}
