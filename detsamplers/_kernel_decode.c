/* A run of samples decoded by their plans, compiled (NOTE [ decode plans ] in
 * detsamplers/loader/_wds/_decode.py): part of the detsamplers._kernel extension (_kernel.c lists
 * its functions). decode_run does for each sample of a run with the same fields what
 * PlannedDecoder.each does in Python (the reference, and the path without the kernel): copy the
 * dict, check each metadata field is a str, and replace each planned field's bytes with its
 * plan's result. It stops, without an error, at the first sample it cannot decode so: another
 * dict type, other fields, a metadata field that is not a str, a value that is not bytes, or a
 * plan that raises an Exception; PlannedDecoder.each then decodes that sample in Python, which
 * decides the same way it always did (the plan is called again: only plans without side effects
 * are run here). tests/webdataset/test_wds_decode.py compares the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

extern const char decode_doc[];
PyObject *decode_run(PyObject *self, PyObject *args);

const char decode_doc[] =
    "decode_run(samples, first, names, steps, meta, out, /) -> int\n\n"
    "Append to the list out the decoded copy of samples[first], samples[first + 1], ... (a list of\n"
    "dicts) while each is a dict with exactly the fields names (a tuple, in order): for each (key,\n"
    "how) of steps (a tuple of pairs), the value must be a str when how is meta, else bytes, and is\n"
    "replaced by how(value). Returns the index of the first sample not decoded (len(samples) when\n"
    "all were).";

/* Whether dict d holds exactly the keys of the tuple names, in that order (tuple(d) == names). */
static int same_fields(PyObject *d, PyObject *names) {
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    if (PyDict_GET_SIZE(d) != count) return 0;
    Py_ssize_t at = 0, k = 0;
    PyObject *key, *value;
    while (PyDict_Next(d, &at, &key, &value)) {
        PyObject *name = PyTuple_GET_ITEM(names, k++);
        if (key == name) continue;
        int same = PyObject_RichCompareBool(key, name, Py_EQ);
        if (same <= 0) return same; /* -1: an error, left set */
    }
    return 1;
}

/* The decoded copy of sample, a new reference; Py_None (borrowed, not increfed) when it cannot be
 * decoded here; NULL with an error set for an error that is not an Exception's. */
static PyObject *decode_one(PyObject *sample, PyObject *names, PyObject *steps, PyObject *meta) {
    if (!PyDict_CheckExact(sample)) return Py_None;
    int same = same_fields(sample, names);
    if (same < 0) goto failed;
    if (!same) return Py_None;
    PyObject *out = PyDict_Copy(sample);
    if (out == NULL) goto failed;
    Py_ssize_t count = PyTuple_GET_SIZE(steps);
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *step = PyTuple_GET_ITEM(steps, k);
        PyObject *key = PyTuple_GET_ITEM(step, 0), *how = PyTuple_GET_ITEM(step, 1);
        PyObject *value = PyDict_GetItemWithError(out, key); /* borrowed */
        if (value == NULL) {
            Py_DECREF(out);
            if (PyErr_Occurred()) goto failed;
            return Py_None;
        }
        if (how == meta) {
            if (PyUnicode_CheckExact(value)) continue;
            Py_DECREF(out); /* bytes metadata: webdataset decides, in Python */
            return Py_None;
        }
        if (!PyBytes_CheckExact(value)) {
            Py_DECREF(out);
            return Py_None;
        }
        Py_INCREF(value); /* held while the plan runs */
        PyObject *decoded = PyObject_CallOneArg(how, value);
        Py_DECREF(value);
        if (decoded == NULL) {
            Py_DECREF(out);
            goto failed;
        }
        int stored = PyDict_SetItem(out, key, decoded);
        Py_DECREF(decoded);
        if (stored < 0) {
            Py_DECREF(out);
            goto failed;
        }
    }
    return out;
failed:
    /* An Exception is Python's to decide (it decodes the sample again); anything else propagates. */
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return Py_None;
    }
    return NULL;
}

PyObject *decode_run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *samples, *names, *steps, *meta, *out;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "O!nO!O!OO!", &PyList_Type, &samples, &first, &PyTuple_Type, &names, &PyTuple_Type,
                          &steps, &meta, &PyList_Type, &out))
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(steps);
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *step = PyTuple_GET_ITEM(steps, k);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 2) {
            PyErr_SetString(PyExc_TypeError, "steps should be a tuple of (key, how) pairs");
            return NULL;
        }
    }
    Py_ssize_t p = first < 0 ? 0 : first;
    for (; p < PyList_GET_SIZE(samples); p++) {
        PyObject *sample = PyList_GET_ITEM(samples, p);
        Py_INCREF(sample); /* a plan may run Python code that changes the list */
        PyObject *decoded = decode_one(sample, names, steps, meta);
        Py_DECREF(sample);
        if (decoded == NULL) return NULL;
        if (decoded == Py_None) break;
        int appended = PyList_Append(out, decoded);
        Py_DECREF(decoded);
        if (appended < 0) return NULL;
    }
    return PyLong_FromSsize_t(p);
}
