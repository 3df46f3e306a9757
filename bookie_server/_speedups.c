/*
 * The compiled fast path of the Python bookie's per-entry loops (BENCHMARKS.md, "The Python bookie's adds"): the
 * journal's ADD_ENTRY records of a group of adds (event loop thread) and the checkpoint's entry-log records and
 * index rows (a thread that shares the GIL with the loop).  Profiles of the bookie under a Java client's adds
 * put a third of its CPU in these loops.  The pure-Python functions they stand in for (journal.py's
 * add_records_reference, storage.py's log_records_reference) stay the tested reference and handle every case
 * this code hands back (docs/architecture.md, "Compiled fast path").  BKSPARK_NO_EXTENSIONS=1 turns it off.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_bytes.h"

/* An entry-log record: length (u32), then the entry's key; then the entry bytes. */
#define RECORD_HEADER 28
/* An entry's key: scope, ledger, entry (3 x i64), big-endian: the 24 bytes of its cache key, an int
 * (storage.py's cache_key).  An index row: the key; value log id (u64), offset (u64), length (u32). */
#define INDEX_KEY 24
#define LOCATION 20

/* An int's bytes, big-endian and unsigned (OverflowError for a negative int or one past n bytes); Python 3.13
 * added a with_exceptions argument to this function. */
#if PY_VERSION_HEX >= 0x030D0000
#define INT_TO_BYTES(v, buf, n) _PyLong_AsByteArray((PyLongObject *)(v), (buf), (n), 0, 0, 1)
#else
#define INT_TO_BYTES(v, buf, n) _PyLong_AsByteArray((PyLongObject *)(v), (buf), (n), 0, 0)
#endif

typedef struct {
    unsigned char key[INDEX_KEY];
    PyObject *data; /* a strong reference, held while the GIL is released */
    const char *buf;
    Py_ssize_t len;
} Record;

/* The order of the keys as ints, which is the order of their big-endian bytes. */
static int compare_records(const void *a, const void *b)
{
    return memcmp(((const Record *)a)->key, ((const Record *)b)->key, INDEX_KEY);
}

static void release_records(Record *records, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        Py_XDECREF(records[i].data);
    PyMem_Free(records);
}

/* 1: every key is an int of 0..2**192-1 with a bytes value in entries; 0: one is not; -1: an error is set. */
static int collect(PyObject *keys, PyObject *entries, Record *records, Py_ssize_t n, Py_ssize_t *filled)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i);
        if (!PyLong_CheckExact(key))
            return 0;
        Record *r = &records[i];
        if (INT_TO_BYTES(key, r->key, INDEX_KEY) < 0) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError))
                return -1;
            PyErr_Clear(); /* negative, or past 24 bytes: the reference raises its own error */
            return 0;
        }
        PyObject *data = PyDict_GetItemWithError(entries, key);
        if (data == NULL)
            return PyErr_Occurred() ? -1 : 0;
        if (!PyBytes_CheckExact(data) || PyBytes_GET_SIZE(data) > (Py_ssize_t)UINT32_MAX)
            return 0;
        Py_INCREF(data);
        r->data = data;
        r->buf = PyBytes_AS_STRING(data);
        r->len = PyBytes_GET_SIZE(data);
        *filled = i + 1;
    }
    return 1;
}

PyDoc_STRVAR(log_records_doc,
"log_records(keys, entries, place) -> (blob, rows) | None\n\n"
"The entry-log records of the entries named by keys (a list of cache keys, ints whose 24 big-endian bytes are\n"
"scope, ledger and entry; entries maps each to its bytes), sorted by key, as one blob; place(len(blob)) ->\n"
"(log id, offset) says where the blob will land.  rows are the index rows (key bytes, location bytes) of the records, in the same order.  The\n"
"entries are copied with the GIL released.  None for what the reference must handle itself (a key that is\n"
"not an int of 0..2**192-1, a missing or non-bytes value, an entry longer than 4 GiB).");

static PyObject *log_records(PyObject *self, PyObject *args)
{
    PyObject *keys, *entries, *place;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyList_Type, &keys, &PyDict_Type, &entries, &place))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(keys);
    Record *records = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Record));
    if (records == NULL)
        return PyErr_NoMemory();
    Py_ssize_t filled = 0;
    int ok = collect(keys, entries, records, n, &filled);
    if (ok != 1) {
        release_records(records, filled);
        if (ok < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    qsort(records, (size_t)n, sizeof(Record), compare_records);
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (records[i].len > PY_SSIZE_T_MAX - RECORD_HEADER - total) {
            release_records(records, n);
            return PyErr_NoMemory();
        }
        total += RECORD_HEADER + records[i].len;
    }
    PyObject *where = PyObject_CallFunction(place, "n", total);
    unsigned long long log_id, start;
    if (where == NULL || !PyArg_ParseTuple(where, "KK;place() must return (log id, offset)", &log_id, &start)) {
        Py_XDECREF(where);
        release_records(records, n);
        return NULL;
    }
    Py_DECREF(where);
    PyObject *blob = PyBytes_FromStringAndSize(NULL, total);
    PyObject *rows = blob == NULL ? NULL : PyList_New(n);
    if (rows == NULL) {
        Py_XDECREF(blob);
        release_records(records, n);
        return NULL;
    }
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(blob);
    Py_BEGIN_ALLOW_THREADS
    /* Nothing else sees blob yet, and the entries are immutable bytes this call holds references to. */
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Record *r = &records[i];
        put_be32(out + pos, (uint32_t)r->len);
        memcpy(out + pos + 4, r->key, INDEX_KEY);
        memcpy(out + pos + RECORD_HEADER, r->buf, (size_t)r->len);
        pos += RECORD_HEADER + r->len;
    }
    Py_END_ALLOW_THREADS
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const Record *r = &records[i];
        pos += RECORD_HEADER;
        PyObject *key = PyBytes_FromStringAndSize(NULL, INDEX_KEY);
        PyObject *location = key == NULL ? NULL : PyBytes_FromStringAndSize(NULL, LOCATION);
        PyObject *row = location == NULL ? NULL : PyTuple_New(2);
        if (row == NULL) {
            Py_XDECREF(key);
            Py_XDECREF(location);
            Py_DECREF(blob);
            Py_DECREF(rows);
            release_records(records, n);
            return NULL;
        }
        unsigned char *k = (unsigned char *)PyBytes_AS_STRING(key);
        memcpy(k, r->key, INDEX_KEY);
        unsigned char *v = (unsigned char *)PyBytes_AS_STRING(location);
        put_be64(v, (uint64_t)log_id);
        put_be64(v + 8, (uint64_t)start + (uint64_t)pos);
        put_be32(v + 16, (uint32_t)r->len);
        PyTuple_SET_ITEM(row, 0, key);
        PyTuple_SET_ITEM(row, 1, location);
        PyList_SET_ITEM(rows, i, row);
        pos += r->len;
    }
    release_records(records, n);
    return Py_BuildValue("(NN)", blob, rows);
}

/* A journal record: body length (u32), CRC32C of the body (u32); an ADD_ENTRY body: type (u8), scope, ledger,
 * entry id, LAC (4 x i64), then the entry bytes; all big-endian. */
#define JOURNAL_PREFIX 8
#define ADD_BODY_HEADER 33
#define ADD_ENTRY_TYPE 1

PyDoc_STRVAR(add_records_doc,
"add_records(scope_id, adds) -> (blob, entries) | None\n\n"
"The journal ADD_ENTRY records of adds (a list of tuples whose first four items are ledger id, entry id, LAC\n"
"and the entry as bytes or a buffer), in order, as one blob; and each entry as bytes (the same object when it\n"
"is bytes already), for the write cache.  None for what the reference must handle itself (an id that is not\n"
"an int64, a body over 4 GiB).");

static PyObject *add_records(PyObject *self, PyObject *args)
{
    long long scope_id;
    PyObject *adds;
    if (!PyArg_ParseTuple(args, "LO!", &scope_id, &PyList_Type, &adds))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(adds);
    Py_buffer *views = PyMem_Calloc(n ? (size_t)n : 1, sizeof(Py_buffer));
    int64_t *ids = PyMem_Calloc(n ? (size_t)n * 3 : 1, sizeof(int64_t));
    PyObject *entries = PyList_New(n);
    PyObject *blob = NULL;
    Py_ssize_t held = 0;
    if (views == NULL || ids == NULL || entries == NULL)
        goto fail;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *add = PyList_GET_ITEM(adds, i);
        if (!PyTuple_Check(add) || PyTuple_GET_SIZE(add) < 4)
            goto hand_back;
        for (int k = 0; k < 3; k++) {
            int ok = exact_int64(PyTuple_GET_ITEM(add, k), &ids[3 * i + k]);
            if (ok < 0)
                goto fail;
            if (ok == 0)
                goto hand_back;
        }
        PyObject *entry = PyTuple_GET_ITEM(add, 3);
        if (PyObject_GetBuffer(entry, &views[i], PyBUF_SIMPLE) < 0)
            goto fail;
        held = i + 1;
        if (views[i].len > (Py_ssize_t)UINT32_MAX - ADD_BODY_HEADER ||
            views[i].len > PY_SSIZE_T_MAX - JOURNAL_PREFIX - ADD_BODY_HEADER - total)
            goto hand_back;
        total += JOURNAL_PREFIX + ADD_BODY_HEADER + views[i].len;
        PyObject *copy;
        if (PyBytes_CheckExact(entry)) {
            Py_INCREF(entry);
            copy = entry;
        } else {
            copy = PyBytes_FromStringAndSize(views[i].buf, views[i].len);
        }
        if (copy == NULL)
            goto fail;
        PyList_SET_ITEM(entries, i, copy);
    }
    blob = PyBytes_FromStringAndSize(NULL, total);
    if (blob == NULL)
        goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(blob);
    Py_ssize_t pos = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = views[i].len;
        unsigned char *body = out + pos + JOURNAL_PREFIX;
        body[0] = ADD_ENTRY_TYPE;
        put_be64(body + 1, (uint64_t)scope_id);
        put_be64(body + 9, (uint64_t)ids[3 * i]);
        put_be64(body + 17, (uint64_t)ids[3 * i + 1]);
        put_be64(body + 25, (uint64_t)ids[3 * i + 2]);
        memcpy(body + ADD_BODY_HEADER, views[i].buf, (size_t)len);
        put_be32(out + pos, (uint32_t)(ADD_BODY_HEADER + len));
        put_be32(out + pos + 4, crc_update(0, body, (size_t)(ADD_BODY_HEADER + len)));
        pos += JOURNAL_PREFIX + ADD_BODY_HEADER + len;
    }
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(ids);
    return Py_BuildValue("(NN)", blob, entries);
hand_back:
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(ids);
    Py_XDECREF(entries);
    Py_RETURN_NONE;
fail:
    if (views != NULL)
        for (Py_ssize_t i = 0; i < held; i++)
            PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(ids);
    Py_XDECREF(entries);
    Py_XDECREF(blob);
    return NULL;
}

PyDoc_STRVAR(add_rows_doc,
"add_rows(group, lowest_version, highest_version, recovery_flag, high_priority_flag) -> (adds, accepted) | None\n\n"
"For a group of v2 AddRequests (flags, master key, entry, version), each add's row for Bookie.add_entries_cb,\n"
"(ledger id, entry id, lac, entry, master key, recovery, high priority), and its (ledger id, entry id, version),\n"
"read from the entry's header (format V1, or V2 with scope 0).  None when one of them would be refused (a\n"
"header too short or of an unknown format, a scope, a version out of range) or is not what this code expects:\n"
"the reference (bookie_server/server.py, add_rows_reference) then does the whole group.");

/* 1: the entry header of buf was read into ids (ledger, entry, lac); 0: the reference's case. */
static int read_entry_ids(const unsigned char *p, Py_ssize_t len, int64_t ids[3])
{
    if (len < 1)
        return 0;
    if (p[0] & 0x80) {
        /* V2: format byte, scope, ledger, entry, lac, length */
        if (len < 41 || (p[0] & 0xF0) != 0xA0 || be64(p + 1) != 0)
            return 0;
        p += 9;
    } else if (len < 32) {
        return 0;
    }
    for (int k = 0; k < 3; k++)
        ids[k] = (int64_t)be64(p + 8 * k);
    return 1;
}

static PyObject *add_rows(PyObject *self, PyObject *args)
{
    PyObject *group;
    long lowest, highest, recovery_flag, high_flag;
    if (!PyArg_ParseTuple(args, "O!llll", &PyList_Type, &group, &lowest, &highest, &recovery_flag, &high_flag))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(group);
    PyObject *adds = PyList_New(n);
    PyObject *accepted = adds == NULL ? NULL : PyList_New(n);
    if (accepted == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *req = PyList_GET_ITEM(group, i);
        if (!PyTuple_Check(req) || PyTuple_GET_SIZE(req) != 4)
            goto hand_back;
        PyObject *flags_obj = PyTuple_GET_ITEM(req, 0), *key = PyTuple_GET_ITEM(req, 1);
        PyObject *entry = PyTuple_GET_ITEM(req, 2), *version = PyTuple_GET_ITEM(req, 3);
        if (!PyLong_CheckExact(flags_obj) || !PyLong_CheckExact(version))
            goto hand_back;
        long flags = PyLong_AsLong(flags_obj), v = PyLong_AsLong(version);
        if ((flags == -1 || v == -1) && PyErr_Occurred()) {
            PyErr_Clear();
            goto hand_back;
        }
        if (v < lowest || v > highest)
            goto hand_back;
        Py_buffer view;
        if (PyObject_GetBuffer(entry, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear();
            goto hand_back;
        }
        int64_t ids[3];
        int ok = read_entry_ids(view.buf, view.len, ids);
        PyBuffer_Release(&view);
        if (!ok)
            goto hand_back;
        PyObject *ledger = PyLong_FromLongLong(ids[0]);
        PyObject *entry_id = ledger == NULL ? NULL : PyLong_FromLongLong(ids[1]);
        PyObject *lac = entry_id == NULL ? NULL : PyLong_FromLongLong(ids[2]);
        PyObject *row = lac == NULL ? NULL : PyTuple_New(7);
        PyObject *ids_row = row == NULL ? NULL : PyTuple_New(3);
        if (ids_row == NULL) {
            Py_XDECREF(ledger);
            Py_XDECREF(entry_id);
            Py_XDECREF(lac);
            Py_XDECREF(row);
            goto fail;
        }
        Py_INCREF(ledger);
        Py_INCREF(entry_id);
        PyTuple_SET_ITEM(ids_row, 0, ledger);
        PyTuple_SET_ITEM(ids_row, 1, entry_id);
        Py_INCREF(version);
        PyTuple_SET_ITEM(ids_row, 2, version);
        PyTuple_SET_ITEM(row, 0, ledger);
        PyTuple_SET_ITEM(row, 1, entry_id);
        PyTuple_SET_ITEM(row, 2, lac);
        Py_INCREF(entry);
        PyTuple_SET_ITEM(row, 3, entry);
        Py_INCREF(key);
        PyTuple_SET_ITEM(row, 4, key);
        PyObject *recovery = PyBool_FromLong(flags & recovery_flag);
        PyObject *high = PyBool_FromLong(flags & high_flag);
        PyTuple_SET_ITEM(row, 5, recovery);
        PyTuple_SET_ITEM(row, 6, high);
        PyList_SET_ITEM(adds, i, row);
        PyList_SET_ITEM(accepted, i, ids_row);
    }
    return Py_BuildValue("(NN)", adds, accepted);
hand_back:
    Py_DECREF(adds);
    Py_DECREF(accepted);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(adds);
    Py_XDECREF(accepted);
    return NULL;
}

static PyMethodDef speedups_methods[] = {
    {"add_rows", add_rows, METH_VARARGS, add_rows_doc},
    {"add_records", add_records, METH_VARARGS, add_records_doc},
    {"log_records", log_records, METH_VARARGS, log_records_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "bookie_server._speedups",
    "Compiled fast path of the bookie's add rows, journal add records and checkpoint records (see bookie_server/server.py, journal.py, storage.py).",
    -1, speedups_methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init();
    return PyModule_Create(&speedups_module);
}
