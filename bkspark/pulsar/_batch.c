/*
 * The compiled fast path of bkspark.pulsar.batch: a Pulsar batch payload (already decompressed) split into its
 * messages' columns in one pass, without a Python object per message but the ones the columns hold.
 *
 * A batch is `num_messages_in_batch` records of [int32 big-endian size][SingleMessageMetadata][payload_size bytes]
 * (docs/pulsar.md, "Entries into messages").  This code reads the SingleMessageMetadata fields the columns need
 * straight from protobuf's wire format; anything it does not take (a group wire type, a base64 key, a bound that
 * does not hold, a missing required field, bytes left over) makes it return None, and the pure-Python reference in
 * bkspark/pulsar/entry.py then decodes the batch and raises the precise error.  Same rule as
 * bkspark/protocol/_speedups.c: the common case here, every other case in Python (docs/architecture.md,
 * "Compiled fast path").
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* SingleMessageMetadata's field numbers (PulsarApi.proto). */
enum {
    F_PROPERTIES = 1, F_PARTITION_KEY = 2, F_PAYLOAD_SIZE = 3, F_COMPACTED_OUT = 4, F_EVENT_TIME = 5,
    F_KEY_B64 = 6, F_SEQUENCE_ID = 8, F_NULL_VALUE = 9, F_NULL_KEY = 10,
};

typedef struct {
    const unsigned char *value;
    Py_ssize_t value_len;
    const unsigned char *key;
    Py_ssize_t key_len;
    const unsigned char *smm;   /* the record's metadata, parsed again for its properties when it has some */
    Py_ssize_t smm_len;
    uint64_t event_time, sequence_id;
    unsigned char has_key, null_key, null_value, compacted_out, has_event_time, has_sequence_id, n_props;
} record_t;

static int read_varint(const unsigned char **pp, const unsigned char *end, uint64_t *out)
{
    const unsigned char *p = *pp;
    uint64_t value = 0;
    for (int shift = 0; p < end && shift < 64; shift += 7) {
        unsigned char b = *p++;
        value |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *pp = p;
            *out = value;
            return 0;
        }
    }
    return -1;
}

/* A length-delimited field's bytes: 0, or -1 when the length runs past the end. */
static int read_len(const unsigned char **pp, const unsigned char *end, const unsigned char **start, Py_ssize_t *n)
{
    uint64_t len;
    if (read_varint(pp, end, &len) || len > (uint64_t)(end - *pp))
        return -1;
    *start = *pp;
    *n = (Py_ssize_t)len;
    *pp += len;
    return 0;
}

static int skip_field(const unsigned char **pp, const unsigned char *end, unsigned wire)
{
    uint64_t ignored;
    const unsigned char *start;
    Py_ssize_t n;
    switch (wire) {
    case 0: return read_varint(pp, end, &ignored);
    case 1: if (end - *pp < 8) return -1; *pp += 8; return 0;
    case 2: return read_len(pp, end, &start, &n);
    case 5: if (end - *pp < 4) return -1; *pp += 4; return 0;
    default: return -1;  /* groups: protobuf's deprecated wire types, left to the reference */
    }
}

/* A KeyValue {1: key, 2: value} of a property: both required, as the reference's IsInitialized() demands. */
static int read_key_value(const unsigned char *p, const unsigned char *end, const unsigned char **k, Py_ssize_t *kn,
                          const unsigned char **v, Py_ssize_t *vn)
{
    int has_k = 0, has_v = 0;
    while (p < end) {
        uint64_t tag;
        if (read_varint(&p, end, &tag))
            return -1;
        unsigned field = (unsigned)(tag >> 3), wire = (unsigned)(tag & 7);
        if (field == 1 && wire == 2) {
            if (read_len(&p, end, k, kn)) return -1;
            has_k = 1;
        } else if (field == 2 && wire == 2) {
            if (read_len(&p, end, v, vn)) return -1;
            has_v = 1;
        } else if (skip_field(&p, end, wire)) {
            return -1;
        }
    }
    return has_k && has_v ? 0 : -1;
}

/* One SingleMessageMetadata into `r`; -1 for anything the reference must handle. */
static int parse_smm(const unsigned char *p, const unsigned char *end, record_t *r, int64_t *payload_size)
{
    int has_payload_size = 0;
    unsigned props = 0;
    r->smm = p;
    r->smm_len = end - p;
    while (p < end) {
        uint64_t tag, v;
        if (read_varint(&p, end, &tag))
            return -1;
        unsigned field = (unsigned)(tag >> 3), wire = (unsigned)(tag & 7);
        if (wire == 0 && field != F_PROPERTIES && field != F_PARTITION_KEY) {
            if (read_varint(&p, end, &v))
                return -1;
            switch (field) {
            case F_PAYLOAD_SIZE: *payload_size = (int32_t)(uint32_t)v; has_payload_size = 1; break;
            case F_COMPACTED_OUT: r->compacted_out = v != 0; break;
            case F_EVENT_TIME: r->event_time = v; r->has_event_time = 1; break;
            case F_KEY_B64: if (v != 0) return -1; break;  /* a byte key: base64 decoded by the reference */
            case F_SEQUENCE_ID: r->sequence_id = v; r->has_sequence_id = 1; break;
            case F_NULL_VALUE: r->null_value = v != 0; break;
            case F_NULL_KEY: r->null_key = v != 0; break;
            default: break;
            }
        } else if (wire == 2 && field == F_PARTITION_KEY) {
            if (read_len(&p, end, &r->key, &r->key_len))
                return -1;
            r->has_key = 1;
        } else if (wire == 2 && field == F_PROPERTIES) {
            const unsigned char *kv, *k, *val;
            Py_ssize_t kvn, kn, vn;
            if (read_len(&p, end, &kv, &kvn) || read_key_value(kv, kv + kvn, &k, &kn, &val, &vn) || ++props > 255)
                return -1;
        } else if (field == F_PAYLOAD_SIZE || field == F_PROPERTIES || field == F_PARTITION_KEY) {
            return -1;  /* a known field with the wrong wire type */
        } else if (skip_field(&p, end, wire)) {
            return -1;
        }
    }
    r->n_props = (unsigned char)props;
    return has_payload_size ? 0 : -1;
}

/* The record's properties as a list of (key, value) str pairs, in wire order; NULL with no exception set when a
 * string is not UTF-8 (the reference decides), NULL with an exception on memory errors. */
static PyObject *properties_of(const record_t *r)
{
    PyObject *list = PyList_New(r->n_props);
    if (list == NULL)
        return NULL;
    const unsigned char *p = r->smm, *end = r->smm + r->smm_len;
    Py_ssize_t i = 0;
    while (p < end && i < r->n_props) {
        uint64_t tag = 0;
        const unsigned char *kv = NULL, *k = NULL, *v = NULL;
        Py_ssize_t kvn = 0, kn = 0, vn = 0;
        /* parse_smm checked every step of this walk already: a failure here cannot happen, but stops it */
        if (read_varint(&p, end, &tag))
            break;
        unsigned field = (unsigned)(tag >> 3), wire = (unsigned)(tag & 7);
        if (field != F_PROPERTIES || wire != 2) {
            if (skip_field(&p, end, wire))
                break;
            continue;
        }
        if (read_len(&p, end, &kv, &kvn) || read_key_value(kv, kv + kvn, &k, &kn, &v, &vn))
            break;
        PyObject *key = PyUnicode_DecodeUTF8((const char *)k, kn, NULL);
        PyObject *value = key == NULL ? NULL : PyUnicode_DecodeUTF8((const char *)v, vn, NULL);
        PyObject *pair = value == NULL ? NULL : PyTuple_Pack(2, key, value);
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (pair == NULL) {
            Py_DECREF(list);
            if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                PyErr_Clear();
            return NULL;
        }
        PyList_SET_ITEM(list, i++, pair);
    }
    if (i != r->n_props) {  /* unreachable after parse_smm; the reference decides */
        Py_DECREF(list);
        return NULL;
    }
    return list;
}

/* A list of n Nones, to be filled in. */
static PyObject *list_of_none(Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    if (list != NULL)
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_INCREF(Py_None);
            PyList_SET_ITEM(list, i, Py_None);
        }
    return list;
}

static void set_item(PyObject *list, Py_ssize_t i, PyObject *item)
{
    PyObject *old = PyList_GET_ITEM(list, i);
    PyList_SET_ITEM(list, i, item);
    Py_DECREF(old);
}

PyDoc_STRVAR(split_batch_doc,
"split_batch(payload, count) -> tuple | None\n\n"
"The kept messages (compacted_out left out) of a decompressed batch payload of `count` records, as columns:\n"
"(indexes, data, offsets, validity, keys, properties, event_times, sequence_ids).  `indexes` is the list of the\n"
"kept messages' batch indexes, or None when all are kept; `data` their values one after the other and `offsets`\n"
"the int32 little-endian Arrow offsets into it (kept + 1 of them); `validity` None, or bytes of one 0/1 per kept\n"
"message when some value is null; `keys` None when no message has a key, else a list of bytes or None; the\n"
"others None when no message has the field, else a list with None where a message lacks it.  None for any batch\n"
"the pure-Python reference must decode (it raises the precise error of a malformed one).");

static PyObject *split_batch(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &count))
        return NULL;
    const unsigned char *p = buf.buf, *end = p + buf.len;
    PyObject *result = NULL;
    /* Every record takes at least 6 bytes (its size and a payload_size field): a larger count cannot be true. */
    if (count <= 0 || count > buf.len / 6) {
        PyBuffer_Release(&buf);
        Py_RETURN_NONE;
    }
    record_t *records = calloc((size_t)count, sizeof(record_t));
    if (records == NULL) {
        PyBuffer_Release(&buf);
        return PyErr_NoMemory();
    }
    Py_ssize_t kept = 0, total = 0;
    int any_key = 0, any_null = 0, any_props = 0, any_event = 0, any_seq = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        record_t *r = &records[i];
        int64_t payload_size = -1;
        if (end - p < 4)
            goto fallback;
        uint32_t size = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
        p += 4;
        if ((int32_t)size < 0 || size > (uint64_t)(end - p) || parse_smm(p, p + size, r, &payload_size))
            goto fallback;
        p += size;
        if (payload_size < 0 || payload_size > end - p)
            goto fallback;
        r->value = p;
        r->value_len = (Py_ssize_t)payload_size;
        p += payload_size;
        if (r->compacted_out)
            continue;
        kept++;
        if (!r->null_value)
            total += r->value_len;
        any_key |= r->has_key || r->null_key;
        any_null |= r->null_value;
        any_props |= r->n_props > 0;
        any_event |= r->has_event_time;
        any_seq |= r->has_sequence_id;
    }
    if (p != end || total > INT32_MAX)
        goto fallback;

    PyObject *indexes = NULL, *data = NULL, *offsets = NULL, *validity = NULL, *keys = NULL, *props = NULL,
             *events = NULL, *seqs = NULL;
    if (kept != count && (indexes = PyList_New(kept)) == NULL)
        goto fail;
    if ((data = PyBytes_FromStringAndSize(NULL, total)) == NULL)
        goto fail;
    if ((offsets = PyBytes_FromStringAndSize(NULL, (kept + 1) * 4)) == NULL)
        goto fail;
    if (any_null && (validity = PyBytes_FromStringAndSize(NULL, kept)) == NULL)
        goto fail;
    if (any_key && (keys = list_of_none(kept)) == NULL)
        goto fail;
    if (any_props && (props = PyList_New(kept)) == NULL)
        goto fail;
    if (any_event && (events = list_of_none(kept)) == NULL)
        goto fail;
    if (any_seq && (seqs = list_of_none(kept)) == NULL)
        goto fail;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(data);
    unsigned char *offs = (unsigned char *)PyBytes_AS_STRING(offsets);
    uint32_t at = 0;
    Py_ssize_t k = 0;
    memset(offs, 0, 4);
    for (Py_ssize_t i = 0; i < count; i++) {
        const record_t *r = &records[i];
        if (r->compacted_out)
            continue;
        if (indexes != NULL) {
            PyObject *index = PyLong_FromSsize_t(i);
            if (index == NULL) goto fail;
            PyList_SET_ITEM(indexes, k, index);
        }
        if (!r->null_value) {
            memcpy(out + at, r->value, (size_t)r->value_len);
            at += (uint32_t)r->value_len;
        }
        unsigned char *o = offs + (k + 1) * 4;
        o[0] = at & 0xff; o[1] = (at >> 8) & 0xff; o[2] = (at >> 16) & 0xff; o[3] = at >> 24;
        if (validity != NULL)
            PyBytes_AS_STRING(validity)[k] = r->null_value ? 0 : 1;
        if (keys != NULL && r->has_key && !r->null_key) {
            PyObject *key = PyBytes_FromStringAndSize((const char *)r->key, r->key_len);
            if (key == NULL) goto fail;
            set_item(keys, k, key);
        }
        if (props != NULL) {
            PyObject *list = properties_of(r);
            if (list == NULL) {
                if (PyErr_Occurred()) goto fail;
                goto fallback_built;
            }
            PyList_SET_ITEM(props, k, list);
        }
        if (events != NULL && r->has_event_time) {
            PyObject *value = PyLong_FromUnsignedLongLong(r->event_time);
            if (value == NULL) goto fail;
            set_item(events, k, value);
        }
        if (seqs != NULL && r->has_sequence_id) {
            PyObject *value = PyLong_FromUnsignedLongLong(r->sequence_id);
            if (value == NULL) goto fail;
            set_item(seqs, k, value);
        }
        k++;
    }
    result = Py_BuildValue("(OOOOOOOO)", indexes ? indexes : Py_None, data, offsets, validity ? validity : Py_None,
                           keys ? keys : Py_None, props ? props : Py_None, events ? events : Py_None,
                           seqs ? seqs : Py_None);
    goto done;

fallback_built:
    Py_INCREF(Py_None);
    result = Py_None;
    goto done;
fail:
    result = NULL;
done:
    /* A list whose later items were never set holds NULLs, which Py_XDECREF of the list handles. */
    Py_XDECREF(indexes);
    Py_XDECREF(data);
    Py_XDECREF(offsets);
    Py_XDECREF(validity);
    Py_XDECREF(keys);
    Py_XDECREF(props);
    Py_XDECREF(events);
    Py_XDECREF(seqs);
    free(records);
    PyBuffer_Release(&buf);
    return result;

fallback:
    free(records);
    PyBuffer_Release(&buf);
    Py_RETURN_NONE;
}

static PyMethodDef batch_methods[] = {
    {"split_batch", split_batch, METH_VARARGS, split_batch_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef batch_module = {
    PyModuleDef_HEAD_INIT, "bkspark.pulsar._batch",
    "The compiled fast path of bkspark.pulsar.batch (docs/architecture.md, 'Compiled fast path').", -1,
    batch_methods,
};

PyMODINIT_FUNC PyInit__batch(void)
{
    return PyModule_Create(&batch_module);
}
