/*
 * The compiled fast path of the loops that profiles proved hot (BENCHMARKS.md, "The compiled fast path"):
 * splitting a BP-62 batch-read response into its items, checking the CRC32C digests of consecutive scope-0
 * (V1) entries, gathering payloads into the buffers of an Arrow binary array, packaging payloads as the v2
 * ADDENTRY frames of a bulk append, cutting a received chunk into its length-prefixed frames, and decoding a
 * bookie's received ADDENTRY and plain READENTRY requests.  Each function does only the common case and hands anything
 * else back to the pure-Python code in bkspark/protocol/v2.py, v2_bulk.py and digest.py, which stays the tested reference
 * and raises the precise errors (docs/architecture.md, "Compiled fast path").  BKSPARK_NO_EXTENSIONS=1 turns
 * this module off (bkspark/protocol/speedups.py).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

#include "_bytes.h"

/* V1 entry: ledgerId, entryId, lastAddConfirmed, length (4 x int64 BE), then the 4-byte CRC32C, then the payload. */
#define V1_HEADER 32
#define V1_PAYLOAD_START (V1_HEADER + 4)

PyDoc_STRVAR(crc32c_doc,
"crc32c(data, value=0) -> int\n\n"
"CRC32C of data continuing from value (the crc32c package's semantics); for tests of this module.");

typedef uint32_t (*crc_function)(uint32_t, const unsigned char *, size_t);

static PyObject *crc_of_args(PyObject *args, crc_function crc)
{
    Py_buffer data;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &data, &value))
        return NULL;
    uint32_t c = crc((uint32_t)value, (const unsigned char *)data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *speedups_crc32c(PyObject *self, PyObject *args)
{
    return crc_of_args(args, crc_update);
}

PyDoc_STRVAR(verify_doc,
"verify_crc32c_payloads(items, ledger_id, first_entry_id, detach) -> list\n\n"
"The payloads of the longest prefix of items (a list of bytes-like V1 entries) whose headers name ledger_id and\n"
"first_entry_id, first_entry_id + 1, ... and whose CRC32C digests match: bytes copies with detach, else slices\n"
"of the items.  Stops at the first item that is not such an entry; the caller checks that one itself.");

static PyObject *speedups_verify(PyObject *self, PyObject *args)
{
    PyObject *items;
    long long ledger_id, first_entry_id;
    int detach;
    if (!PyArg_ParseTuple(args, "O!LLp", &PyList_Type, &items, &ledger_id, &first_entry_id, &detach))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        Py_buffer view;
        if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0) {
            PyErr_Clear(); /* not bytes-like: the caller's check reports it */
            break;
        }
        const unsigned char *p = (const unsigned char *)view.buf;
        Py_ssize_t len = view.len;
        int ok = len >= V1_PAYLOAD_START && !(p[0] & 0x80) && (long long)be64(p) == ledger_id &&
                 (long long)be64(p + 8) == first_entry_id + i;
        if (ok) {
            uint32_t c = crc_update(0, p, V1_HEADER);
            c = crc_update(c, p + V1_PAYLOAD_START, (size_t)(len - V1_PAYLOAD_START));
            ok = c == be32(p + V1_HEADER);
        }
        PyObject *payload = NULL;
        if (ok) {
            if (detach)
                payload = PyBytes_FromStringAndSize((const char *)p + V1_PAYLOAD_START, len - V1_PAYLOAD_START);
            else
                payload = PySequence_GetSlice(item, V1_PAYLOAD_START, len);
        }
        PyBuffer_Release(&view);
        if (!ok)
            break;
        if (payload == NULL || PyList_Append(out, payload) < 0) {
            Py_XDECREF(payload);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(payload);
    }
    return out;
}

/* Cutting a body into pieces: its simple buffer, its bytes and length, and the list of pieces. */
typedef struct {
    Py_buffer view;
    const unsigned char *p;
    Py_ssize_t end;
    PyObject *out;
} Cutting;

/* -1 (nothing held) on failure. */
static int start_cutting(PyObject *body, Cutting *c)
{
    if (PyObject_GetBuffer(body, &c->view, PyBUF_SIMPLE) < 0)
        return -1;
    c->out = PyList_New(0);
    if (c->out == NULL) {
        PyBuffer_Release(&c->view);
        return -1;
    }
    c->p = (const unsigned char *)c->view.buf;
    c->end = c->view.len;
    return 0;
}

/* Append a new reference (NULL after a failed call) to out, giving it up; -1 on failure. */
static int append_new(PyObject *out, PyObject *item)
{
    if (item == NULL)
        return -1;
    int rc = PyList_Append(out, item);
    Py_DECREF(item);
    return rc;
}

PyDoc_STRVAR(split_doc,
"split_batch_items(body, offset) -> list | None\n\n"
"The items of a BATCH_READ_ENTRY response body from offset on (int32 BE length, then that many bytes, to the\n"
"end), as slices of body; None when the items do not fit the body exactly (the caller's check raises).");

static PyObject *speedups_split(PyObject *self, PyObject *args)
{
    PyObject *body;
    Py_ssize_t offset;
    Cutting c;
    if (!PyArg_ParseTuple(args, "On", &body, &offset) || start_cutting(body, &c) < 0)
        return NULL;
    const unsigned char *p = c.p;
    Py_ssize_t end = c.end;
    PyObject *out = c.out;
    if (offset < 0)
        goto malformed;
    while (offset < end) {
        if (end - offset < 4)
            goto malformed;
        int32_t size = (int32_t)be32(p + offset);
        offset += 4;
        if (size < 0 || size > end - offset)
            goto malformed;
        if (append_new(out, PySequence_GetSlice(body, offset, offset + size)) < 0) {
            Py_DECREF(out);
            PyBuffer_Release(&c.view);
            return NULL;
        }
        offset += size;
    }
    PyBuffer_Release(&c.view);
    return out;
malformed:
    Py_DECREF(out);
    PyBuffer_Release(&c.view);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(count_items_doc,
"count_batch_items(body, offset) -> int | None\n\n"
"How many length-prefixed items body holds from offset on (a BP-62 batch-read response body), without making\n"
"an object per item; None when one does not fit, which the reference split reports.");

static PyObject *speedups_count_items(PyObject *self, PyObject *args)
{
    PyObject *body;
    Py_ssize_t offset, count = 0;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "On", &body, &offset) || PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    int fits = offset >= 0 && offset <= end;
    while (fits && offset < end) {
        if (end - offset < 4) {
            fits = 0;
            break;
        }
        int32_t size = (int32_t)be32(p + offset);
        offset += 4;
        if (size < 0 || size > end - offset) {
            fits = 0;
            break;
        }
        offset += size;
        count++;
    }
    PyBuffer_Release(&view);
    if (!fits)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(count);
}

PyDoc_STRVAR(verify_gather_doc,
"verify_gather_crc32c(body, offset, limit, ledger_id, first_entry_id) -> (data, bounds, max_size, count, next)\n\n"
"Of the length-prefixed items of body from offset on (a BP-62 batch-read response body), the longest prefix of\n"
"at most limit items that are V1 entries of ledger_id, first_entry_id, first_entry_id + 1, ... whose CRC32C\n"
"digests match (verify_crc32c_payloads' check): their payloads laid end to end in data (bytes), the count + 1\n"
"int64 bounds (native byte order) as bytes, the largest payload's size, the count, and the offset of the first\n"
"item not taken.  One pass over the bytes and no object per entry.  Stops at limit, at the end of body, or at the\n"
"first item that is not such an entry or does not fit; the caller checks that one itself.");

static PyObject *speedups_verify_gather(PyObject *self, PyObject *args)
{
    PyObject *body;
    Py_ssize_t offset, limit;
    long long ledger_id, first_entry_id;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "OnnLL", &body, &offset, &limit, &ledger_id, &first_entry_id))
        return NULL;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len;
    if (offset < 0 || offset > end)
        offset = end; /* nothing to take: the caller's check reports it */
    Py_ssize_t room = end - offset;
    Py_ssize_t most = room / (4 + V1_PAYLOAD_START); /* no item is shorter */
    if (limit < most)
        most = limit < 0 ? 0 : limit;
    PyObject *data = PyBytes_FromStringAndSize(NULL, room);
    PyObject *bounds = PyBytes_FromStringAndSize(NULL, (most + 1) * (Py_ssize_t)sizeof(int64_t));
    if (data == NULL || bounds == NULL) {
        Py_XDECREF(data);
        Py_XDECREF(bounds);
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *dst = (unsigned char *)PyBytes_AS_STRING(data);
    int64_t *b = (int64_t *)PyBytes_AS_STRING(bounds);
    Py_ssize_t count = 0, total = 0, max_size = 0;
    b[0] = 0;
    while (count < most && end - offset >= 4) {
        int32_t size = (int32_t)be32(p + offset);
        if (size < V1_PAYLOAD_START || size > end - offset - 4)
            break;
        const unsigned char *item = p + offset + 4;
        if ((item[0] & 0x80) || (long long)be64(item) != ledger_id || (long long)be64(item + 8) != first_entry_id + count)
            break;
        size_t len = (size_t)(size - V1_PAYLOAD_START);
        uint32_t c = crc_update(0, item, V1_HEADER);
        c = crc_update(c, item + V1_PAYLOAD_START, len);
        if (c != be32(item + V1_HEADER))
            break;
        memcpy(dst + total, item + V1_PAYLOAD_START, len);
        total += (Py_ssize_t)len;
        if ((Py_ssize_t)len > max_size)
            max_size = (Py_ssize_t)len;
        b[++count] = total;
        offset += 4 + size;
    }
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&data, total) < 0 ||
        _PyBytes_Resize(&bounds, (count + 1) * (Py_ssize_t)sizeof(int64_t)) < 0) {
        Py_XDECREF(data);
        Py_XDECREF(bounds);
        return NULL;
    }
    return Py_BuildValue("(NNnnn)", data, bounds, max_size, count, offset);
}

PyDoc_STRVAR(gather_doc,
"gather_binary(items) -> (data, offsets) | None\n\n"
"The buffers of an Arrow binary array holding items (a list of bytes-like objects): their bytes joined, and\n"
"the n + 1 int32 offsets (native byte order) as bytes.  None when they hold more than 2 GiB - 1 bytes, which\n"
"int32 offsets cannot address, or when an item is not a contiguous bytes-like object (the caller's code raises).");

/* The length of item, or -1 for what is not a contiguous bytes-like object (the reference reports it). */
static Py_ssize_t item_length(PyObject *item)
{
    if (PyBytes_CheckExact(item))
        return PyBytes_GET_SIZE(item);
    Py_buffer view;
    if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return -1;
    }
    Py_ssize_t len = view.len;
    PyBuffer_Release(&view);
    return len;
}

static PyObject *speedups_gather(PyObject *self, PyObject *args)
{
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &items))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(items);
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    if (offsets == NULL)
        return NULL;
    int32_t *off = (int32_t *)PyBytes_AS_STRING(offsets);
    Py_ssize_t total = 0;
    off[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t len = item_length(PyList_GET_ITEM(items, i));
        total += len;
        if (len < 0 || total > INT32_MAX) {
            Py_DECREF(offsets);
            Py_RETURN_NONE;
        }
        off[i + 1] = (int32_t)total;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, total);
    if (data == NULL) {
        Py_DECREF(offsets);
        return NULL;
    }
    char *dst = PyBytes_AS_STRING(data);
    for (Py_ssize_t i = 0; i < n && i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        Py_ssize_t want = off[i + 1] - off[i];
        if (PyBytes_CheckExact(item) && PyBytes_GET_SIZE(item) == want) {
            memcpy(dst + off[i], PyBytes_AS_STRING(item), (size_t)want);
            continue;
        }
        Py_buffer view;
        if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0)
            goto failed;
        if (view.len != want) { /* changed between the two passes */
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_RuntimeError, "an item changed size while it was gathered");
            goto failed;
        }
        memcpy(dst + off[i], view.buf, (size_t)want);
        PyBuffer_Release(&view);
    }
    if (PyList_GET_SIZE(items) != n) {
        PyErr_SetString(PyExc_RuntimeError, "the list changed size while it was gathered");
        goto failed;
    }
    return Py_BuildValue("(NN)", data, offsets);
failed:
    Py_DECREF(data);
    Py_DECREF(offsets);
    return NULL;
}

PyDoc_STRVAR(add_frames_doc,
"v2_add_frames(header, master_key, ledger_id, first_entry_id, lac, length, payloads) -> list | None\n\n"
"The v2 ADDENTRY frames of payloads (a list of bytes) as consecutive scope-0 entries\n"
"first_entry_id, first_entry_id + 1, ... with a CRC32C digest: length prefix, header word, the 20-byte\n"
"master key, then the V1 entry (ledger id, entry id, lac, cumulative length, CRC32C, payload), where the\n"
"cumulative length of entry i is length plus the sizes of payloads 0..i.  None for what the Python encoder\n"
"must check itself (a payload that is not bytes, a negative ledger id, a key that is not 20 bytes, ids or\n"
"lengths out of int64 range).");

#define MASTER_KEY_LENGTH 20
#define ADD_PREFIX (4 + 4 + MASTER_KEY_LENGTH)

/* What both bulk-append encoders check before building anything; nonzero when the Python encoder must take it. */
static int add_frames_handed_back(unsigned long header, Py_buffer *key, long long ledger_id, long long first_entry_id,
                                  long long length, Py_ssize_t n)
{
    return key->len != MASTER_KEY_LENGTH || ledger_id < 0 || first_entry_id < 0 || first_entry_id > LLONG_MAX - n ||
           length < 0 || header > 0xFFFFFFFFul;
}

/* Sets out[i] to the ADDENTRY frame of entry first_entry_id + i, whose payload is payload_len bytes at payload
 * (payload_len -1: not bytes), and adds its size to the cumulative *length.  1 when set; 0 when the Python
 * encoder must take it (not bytes, past the int64 length or an int32 frame); -1 on no memory (an exception set). */
static int put_add_frame(PyObject *out, Py_ssize_t i, unsigned long header, const void *key, long long ledger_id,
                         long long first_entry_id, long long lac, long long *length, const char *payload,
                         Py_ssize_t payload_len)
{
    if (payload_len < 0 || payload_len > LLONG_MAX - *length ||
        payload_len > INT32_MAX - (ADD_PREFIX - 4 + V1_PAYLOAD_START))
        return 0;
    *length += payload_len;
    Py_ssize_t size = ADD_PREFIX + V1_PAYLOAD_START + payload_len;
    PyObject *frame = PyBytes_FromStringAndSize(NULL, size);
    if (frame == NULL)
        return -1;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(frame);
    put_be32(p, (uint32_t)(size - 4));
    put_be32(p + 4, (uint32_t)header);
    memcpy(p + 8, key, MASTER_KEY_LENGTH);
    unsigned char *entry = p + ADD_PREFIX;
    put_be64(entry, (uint64_t)ledger_id);
    put_be64(entry + 8, (uint64_t)(first_entry_id + i));
    put_be64(entry + 16, (uint64_t)lac);
    put_be64(entry + 24, (uint64_t)*length);
    memcpy(entry + V1_PAYLOAD_START, payload, (size_t)payload_len);
    uint32_t c = crc_update(0, entry, V1_HEADER);
    c = crc_update(c, entry + V1_PAYLOAD_START, (size_t)payload_len);
    put_be32(entry + V1_HEADER, c);
    PyList_SET_ITEM(out, i, frame);
    return 1;
}

/* What both encoders return: the list when every frame was set (got 1), None for the Python encoder (0), NULL
 * with the exception (-1); the list is dropped unless returned. */
static PyObject *add_frames_result(PyObject *out, int got)
{
    if (got == 1)
        return out;
    Py_XDECREF(out);
    return got == 0 ? Py_NewRef(Py_None) : NULL;
}

static PyObject *speedups_add_frames(PyObject *self, PyObject *args)
{
    unsigned long header;
    Py_buffer key;
    long long ledger_id, first_entry_id, lac, length;
    PyObject *payloads;
    if (!PyArg_ParseTuple(args, "ky*LLLLO!", &header, &key, &ledger_id, &first_entry_id, &lac, &length,
                          &PyList_Type, &payloads))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(payloads);
    PyObject *out = NULL;
    int got = 0;
    if (!add_frames_handed_back(header, &key, ledger_id, first_entry_id, length, n)) {
        out = PyList_New(n);
        got = out == NULL ? -1 : 1;
        for (Py_ssize_t i = 0; i < n && got == 1; i++) {
            PyObject *item = PyList_GET_ITEM(payloads, i);
            got = put_add_frame(out, i, header, key.buf, ledger_id, first_entry_id, lac, &length,
                                PyBytes_CheckExact(item) ? PyBytes_AS_STRING(item) : NULL,
                                PyBytes_CheckExact(item) ? PyBytes_GET_SIZE(item) : -1);
        }
    }
    PyBuffer_Release(&key);
    return add_frames_result(out, got);
}

PyDoc_STRVAR(add_frames_packed_doc,
"v2_add_frames_packed(header, master_key, ledger_id, first_entry_id, lac, length, data, bounds) -> list | None\n\n"
"v2_add_frames of the payloads laid end to end in data (any contiguous buffer): payload i is\n"
"data[bounds[i]:bounds[i + 1]], bounds a contiguous buffer of native int64 (one more than the payloads).  No\n"
"bytes object per payload is made.  None for what v2_add_frames hands back, and for bounds that are not\n"
"non-decreasing within data: the Python encoder then takes the payloads one by one.");

static PyObject *speedups_add_frames_packed(PyObject *self, PyObject *args)
{
    unsigned long header;
    Py_buffer key, data, bounds;
    long long ledger_id, first_entry_id, lac, length;
    if (!PyArg_ParseTuple(args, "ky*LLLLy*y*", &header, &key, &ledger_id, &first_entry_id, &lac, &length, &data,
                          &bounds))
        return NULL;
    PyObject *out = NULL;
    int got = 0;
    const int64_t *at = (const int64_t *)bounds.buf;
    Py_ssize_t n = bounds.len / (Py_ssize_t)sizeof(int64_t) - 1;
    int fits = bounds.len % (Py_ssize_t)sizeof(int64_t) == 0 && n >= 0 &&
               !add_frames_handed_back(header, &key, ledger_id, first_entry_id, length, n);
    for (Py_ssize_t i = 0; fits && i <= n; i++) /* every bound inside data, in order: checked before any read */
        fits = at[i] >= 0 && at[i] <= data.len && (i == 0 || at[i] >= at[i - 1]);
    if (fits) {
        out = PyList_New(n);
        got = out == NULL ? -1 : 1;
        for (Py_ssize_t i = 0; i < n && got == 1; i++)
            got = put_add_frame(out, i, header, key.buf, ledger_id, first_entry_id, lac, &length,
                                (const char *)data.buf + at[i], (Py_ssize_t)(at[i + 1] - at[i]));
    }
    PyBuffer_Release(&key);
    PyBuffer_Release(&data);
    PyBuffer_Release(&bounds);
    return add_frames_result(out, got);
}

PyDoc_STRVAR(split_frames_doc,
"split_frames(view, offset, max_frame_size, small_body) -> (bodies, offset)\n\n"
"The bodies of the whole length-prefixed frames in view (a memoryview) from offset on, as slices of view (bytes\n"
"copies for bodies of at most small_body bytes), and the offset after the last of them.  Stops at a frame that\n"
"is not whole or whose length plus 4 is over max_frame_size: the caller's loop goes on from there (keeps the\n"
"rest, or raises).");

static PyObject *speedups_split_frames(PyObject *self, PyObject *args)
{
    PyObject *body;
    Py_ssize_t offset;
    long long max_frame_size;
    Py_ssize_t small_body;
    Cutting c;
    if (!PyArg_ParseTuple(args, "O!nLn", &PyMemoryView_Type, &body, &offset, &max_frame_size, &small_body) ||
        start_cutting(body, &c) < 0)
        return NULL;
    const unsigned char *p = c.p;
    Py_ssize_t end = c.end;
    PyObject *out = c.out;
    while (offset >= 0 && end - offset >= 4) {
        long long total = (long long)be32(p + offset) + 4;
        if (total > max_frame_size || total > end - offset)
            break;
        Py_ssize_t size = (Py_ssize_t)total - 4;
        PyObject *item = size <= small_body ? PyBytes_FromStringAndSize((const char *)p + offset + 4, size)
                                            : PySequence_GetSlice(body, offset + 4, offset + (Py_ssize_t)total);
        if (append_new(out, item) < 0) {
            Py_DECREF(out);
            PyBuffer_Release(&c.view);
            return NULL;
        }
        offset += (Py_ssize_t)total;
    }
    PyBuffer_Release(&c.view);
    return Py_BuildValue("(Nn)", out, offset);
}

PyDoc_STRVAR(decode_adds_doc,
"decode_add_requests(bodies, add_type, min_size) -> list\n\n"
"bodies (a list of request frame bodies, bytes or memoryviews) with each ADDENTRY body of at least min_size\n"
"bytes replaced by add_type(flags, master key bytes, entry view, version), add_type being v2.AddRequest (a\n"
"tuple subclass); every other body left as it is (bkspark/protocol/v2_bulk.py, decode_add_requests_reference).");

static PyObject *add_request(PyTypeObject *add_type, PyObject *body, const unsigned char *p, Py_ssize_t len,
                             long version, long flags)
{
    PyObject *view = PyMemoryView_Check(body) ? (Py_INCREF(body), body) : PyMemoryView_FromObject(body);
    if (view == NULL)
        return NULL;
    PyObject *entry = PySequence_GetSlice(view, 4 + MASTER_KEY_LENGTH, len);
    Py_DECREF(view);
    PyObject *key = entry == NULL ? NULL : PyBytes_FromStringAndSize((const char *)p + 4, MASTER_KEY_LENGTH);
    PyObject *flags_int = key == NULL ? NULL : PyLong_FromLong(flags);
    PyObject *version_int = flags_int == NULL ? NULL : PyLong_FromLong(version);
    /* As tuple_subtype_new makes a tuple subclass's instance: the type's own allocator, then the items. */
    PyObject *req = version_int == NULL ? NULL : add_type->tp_alloc(add_type, 4);
    if (req == NULL) {
        Py_XDECREF(entry);
        Py_XDECREF(key);
        Py_XDECREF(flags_int);
        Py_XDECREF(version_int);
        return NULL;
    }
    PyTuple_SET_ITEM(req, 0, flags_int);
    PyTuple_SET_ITEM(req, 1, key);
    PyTuple_SET_ITEM(req, 2, entry);
    PyTuple_SET_ITEM(req, 3, version_int);
    return req;
}

/* What a pass over a chunk's frame bodies makes of one body: a new reference, or NULL with no error set to keep the
 * body as it is, or NULL with an error set to fail the pass. */
typedef PyObject *(*body_converter)(PyObject *body, void *context);

/* The list of what convert makes of each body of the list bodies (the bodies it keeps, as they are). */
static PyObject *map_bodies(PyObject *bodies, body_converter convert, void *context)
{
    Py_ssize_t n = PyList_GET_SIZE(bodies);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *body = PyList_GET_ITEM(bodies, i);
        PyObject *item = convert(body, context);
        if (item == NULL) {
            if (PyErr_Occurred()) {
                Py_DECREF(out);
                return NULL;
            }
            Py_INCREF(body);
            item = body;
        }
        PyList_SET_ITEM(out, i, item);
    }
    return out;
}

/* A v2 request header's opcode, its version and flags through the pointers, as v2.unpack_header reads them (version
 * 0: the legacy form, the opcode alone and no flags). */
static long request_header(uint32_t header, long *version, long *flags)
{
    long v = (long)((header >> 24) & 0xFF);
    if (v >= 0x80)
        v -= 0x100;
    *version = v;
    *flags = v == 0 ? 0 : (long)(header & 0xFFFF);
    return v == 0 ? (long)(header & 0xFF) : (long)((header >> 16) & 0xFF);
}

typedef struct {
    PyTypeObject *add_type;
    Py_ssize_t min_size;
} AddRequestContext;

static PyObject *add_request_of(PyObject *body, void *context)
{
    const AddRequestContext *c = context;
    PyObject *item = NULL;
    Py_buffer view;
    if (!PyBytes_CheckExact(body) && !PyMemoryView_Check(body))
        return NULL;
    if (PyObject_GetBuffer(body, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear(); /* not contiguous bytes: left for decode_request */
        return NULL;
    }
    if (view.len >= c->min_size) {
        const unsigned char *p = view.buf;
        long version, flags;
        if (request_header(be32(p), &version, &flags) == 1) /* ADDENTRY */
            item = add_request(c->add_type, body, p, view.len, version, flags);
    }
    PyBuffer_Release(&view);
    return item;
}

static PyObject *speedups_decode_adds(PyObject *self, PyObject *args)
{
    AddRequestContext c;
    PyObject *bodies;
    if (!PyArg_ParseTuple(args, "O!O!n", &PyList_Type, &bodies, &PyType_Type, &c.add_type, &c.min_size))
        return NULL;
    if (!PyType_IsSubtype(c.add_type, &PyTuple_Type) || c.add_type->tp_alloc == NULL ||
        c.min_size < 4 + MASTER_KEY_LENGTH) {
        PyErr_SetString(PyExc_TypeError, "add_type must be a tuple subclass and min_size hold the key");
        return NULL;
    }
    return map_bodies(bodies, add_request_of, &c);
}

PyDoc_STRVAR(decode_plain_reads_doc,
"decode_plain_reads(items, read_opcode, fencing_flag, min_size) -> list\n\n"
"items (a list of request frame bodies, or what decode_add_requests made of them) with each bytes body of at least\n"
"min_size bytes whose header says read_opcode without fencing_flag replaced by (ledger id, entry id, version);\n"
"every other item left as it is (bkspark/protocol/v2_bulk.py, decode_plain_reads_reference).");

typedef struct {
    long read_opcode;
    long fencing_flag;
    Py_ssize_t min_size;
} PlainReadContext;

static PyObject *plain_read_of(PyObject *body, void *context)
{
    const PlainReadContext *c = context;
    if (!PyBytes_CheckExact(body) || PyBytes_GET_SIZE(body) < c->min_size)
        return NULL;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(body);
    long version, flags;
    if (request_header(be32(p), &version, &flags) != c->read_opcode || (flags & c->fencing_flag))
        return NULL;
    return Py_BuildValue("(LLl)", (long long)be64(p + 4), (long long)be64(p + 12), version);
}

static PyObject *speedups_decode_plain_reads(PyObject *self, PyObject *args)
{
    PlainReadContext c;
    PyObject *items;
    if (!PyArg_ParseTuple(args, "O!lln", &PyList_Type, &items, &c.read_opcode, &c.fencing_flag, &c.min_size))
        return NULL;
    if (c.min_size < 20) {
        PyErr_SetString(PyExc_ValueError, "min_size must hold the header and both ids");
        return NULL;
    }
    return map_bodies(items, plain_read_of, &c);
}

PyDoc_STRVAR(ok_answers_doc,
"v2_ok_answers(bodies, add_header, read_header, eok, add_kind, read_kind) -> list\n\n"
"bodies (a list of v2 response frame bodies) with each bytes body of at least 24 bytes that starts with add_header\n"
"and the return code eok replaced by the table key of the ADDENTRY it answers, each body of at least 24 bytes\n"
"(bytes, or a flat memoryview of unsigned bytes) that starts with read_header and eok by (the key of the READENTRY,\n"
"a memoryview of its stored entry); every other body left as it is.  A key is the int\n"
"(ledger id mod 2**64) << 65 | (entry id mod 2**64) << 1 | kind (bkspark/protocol/correlation.py, add_key,\n"
"read_key, v2_ok_answers_reference).");

typedef struct {
    uint32_t add_header;
    uint32_t read_header;
    int32_t eok;
    unsigned int add_kind;
    unsigned int read_kind;
} OkAnswerContext;

/* The table key of the answer whose ledger and entry ids start at p + 8: ledger << 65 | entry << 1 | kind, both
   ids as unsigned 64-bit values (correlation.py's _key), built from its 17 little-endian bytes. */
static PyObject *answer_key(const unsigned char *p, unsigned int kind)
{
    uint64_t ledger = be64(p + 8), entry = be64(p + 16);
    uint64_t low = (entry << 1) | (kind & 1u), middle = (entry >> 63) | (ledger << 1);
    unsigned char le[17];
    for (int i = 0; i < 8; i++) {
        le[i] = (unsigned char)(low >> (8 * i));
        le[8 + i] = (unsigned char)(middle >> (8 * i));
    }
    le[16] = (unsigned char)(ledger >> 63);
    return _PyLong_FromByteArray(le, sizeof le, 1, 0);
}

static PyObject *ok_answer_of(PyObject *body, void *context)
{
    const OkAnswerContext *c = context;
    const unsigned char *p;
    Py_ssize_t size;
    int is_bytes = PyBytes_CheckExact(body);
    if (is_bytes) {
        p = (const unsigned char *)PyBytes_AS_STRING(body);
        size = PyBytes_GET_SIZE(body);
    } else if (PyMemoryView_Check(body)) {
        const Py_buffer *b = PyMemoryView_GET_BUFFER(body);
        if (b->ndim != 1 || b->itemsize != 1 || (b->format != NULL && strcmp(b->format, "B") != 0) ||
            !PyBuffer_IsContiguous(b, 'C'))
            return NULL;
        p = (const unsigned char *)b->buf;
        size = b->len;
    } else {
        return NULL;
    }
    if (size < 24 || (int32_t)be32(p + 4) != c->eok)
        return NULL;
    uint32_t header = be32(p);
    if (header == c->add_header && is_bytes)
        return answer_key(p, c->add_kind);
    if (header != c->read_header)
        return NULL;
    PyObject *view = is_bytes ? PyMemoryView_FromObject(body) : (Py_INCREF(body), body);
    PyObject *entry = view == NULL ? NULL : PySequence_GetSlice(view, 24, size);
    Py_XDECREF(view);
    PyObject *key = entry == NULL ? NULL : answer_key(p, c->read_kind);
    PyObject *pair = key == NULL ? NULL : PyTuple_New(2);
    if (pair == NULL) {
        Py_XDECREF(entry);
        Py_XDECREF(key);
        return NULL;
    }
    PyTuple_SET_ITEM(pair, 0, key);
    PyTuple_SET_ITEM(pair, 1, entry);
    return pair;
}

static PyObject *speedups_ok_answers(PyObject *self, PyObject *args)
{
    PyObject *bodies;
    unsigned long add_header, read_header;
    long eok;
    OkAnswerContext c;
    if (!PyArg_ParseTuple(args, "O!kklII", &PyList_Type, &bodies, &add_header, &read_header, &eok,
                          &c.add_kind, &c.read_kind))
        return NULL;
    c.add_header = (uint32_t)add_header;
    c.read_header = (uint32_t)read_header;
    c.eok = (int32_t)eok;
    return map_bodies(bodies, ok_answer_of, &c);
}

PyDoc_STRVAR(add_responses_doc,
"v2_add_responses(rc, ids, add_opcode) -> bytes | None\n\n"
"The ADDENTRY response frames of rc for each (ledger id, entry id, protocol version) of the list ids, joined (what\n"
"bkspark/protocol/v2_bulk.py's encode_add_responses_reference makes).  None for anything that code would raise on or\n"
"that this one does not expect (an id past int64, a version outside 0..127, rc past int32): the reference then\n"
"encodes them.");

static PyObject *speedups_add_responses(PyObject *self, PyObject *args)
{
    long long rc;
    PyObject *ids;
    long opcode;
    if (!PyArg_ParseTuple(args, "LO!l", &rc, &PyList_Type, &ids, &opcode))
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(ids);
    if (rc < INT32_MIN || rc > INT32_MAX || opcode < 0 || opcode > 0xFF || n > PY_SSIZE_T_MAX / 28)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * 28);
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    for (Py_ssize_t i = 0; i < n; i++, p += 28) {
        PyObject *item = PyList_GET_ITEM(ids, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3)
            goto hand_back;
        int64_t ledger, entry, version;
        int ok;
        if ((ok = exact_int64(PyTuple_GET_ITEM(item, 0), &ledger)) != 1 ||
            (ok = exact_int64(PyTuple_GET_ITEM(item, 1), &entry)) != 1 ||
            (ok = exact_int64(PyTuple_GET_ITEM(item, 2), &version)) != 1) {
            if (ok < 0) {
                Py_DECREF(out);
                return NULL;
            }
            goto hand_back;
        }
        if (version < 0 || version > 127)
            goto hand_back;
        put_be32(p, 24);
        put_be32(p + 4, version == 0 ? (uint32_t)opcode : ((uint32_t)version << 24) | ((uint32_t)opcode << 16));
        put_be32(p + 8, (uint32_t)(int32_t)rc);
        put_be64(p + 12, (uint64_t)ledger);
        put_be64(p + 20, (uint64_t)entry);
    }
    return out;
hand_back:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(batch_read_frame_doc,
"v2_batch_read_frame(header, rc, ledger_id, start_entry_id, request_id, entries) -> bytes | None\n\n"
"The BATCH_READ_ENTRY response frame of the list entries (bytes each, written as [length int32][entry]) under the\n"
"header word header (what bkspark/protocol/v2.py's encode_batch_read_response_reference makes).  None for anything\n"
"that code would raise on or that this one does not expect (an id past int64, rc past int32, an entry that is not\n"
"bytes or is over 2 GiB - 1, a frame over 4 GiB): the reference then encodes it, or raises.");

static PyObject *speedups_batch_read_frame(PyObject *self, PyObject *args)
{
    unsigned long header;
    long long rc;
    PyObject *ids[3], *entries;
    if (!PyArg_ParseTuple(args, "kLOOOO!", &header, &rc, &ids[0], &ids[1], &ids[2], &PyList_Type, &entries))
        return NULL;
    int64_t values[3];
    for (int k = 0; k < 3; k++) {
        int ok = exact_int64(ids[k], &values[k]);
        if (ok < 0)
            return NULL;
        if (ok == 0)
            Py_RETURN_NONE;
    }
    if (header > 0xFFFFFFFFul || rc < INT32_MIN || rc > INT32_MAX)
        Py_RETURN_NONE;
    Py_ssize_t n = PyList_GET_SIZE(entries);
    uint64_t body = 32; /* header word, rc, ledger id, start entry id, request id */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(entries, i);
        if (!PyBytes_CheckExact(item) || PyBytes_GET_SIZE(item) > 0x7FFFFFFF)
            Py_RETURN_NONE;
        body += 4 + (uint64_t)PyBytes_GET_SIZE(item);
    }
    if (body > UINT32_MAX || body + 4 > (uint64_t)PY_SSIZE_T_MAX)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(body + 4));
    if (out == NULL)
        return NULL;
    unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
    put_be32(p, (uint32_t)body);
    put_be32(p + 4, (uint32_t)header);
    put_be32(p + 8, (uint32_t)(int32_t)rc);
    put_be64(p + 12, (uint64_t)values[0]);
    put_be64(p + 20, (uint64_t)values[1]);
    put_be64(p + 28, (uint64_t)values[2]);
    p += 36;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(entries, i);
        Py_ssize_t len = PyBytes_GET_SIZE(item);
        put_be32(p, (uint32_t)len);
        memcpy(p + 4, PyBytes_AS_STRING(item), (size_t)len);
        p += 4 + len;
    }
    return out;
}

PyDoc_STRVAR(crc32c_table_doc,
"crc32c_table(data, value=0) -> int\n\n"
"The same CRC32C computed with the lookup table, the path of CPUs without the crc32 instruction; for tests.");

static PyObject *speedups_crc32c_table(PyObject *self, PyObject *args)
{
    return crc_of_args(args, crc_software);
}

PyDoc_STRVAR(hardware_doc, "crc_hardware() -> bool\n\nTrue when CRC32C runs on the CPU's crc32 instruction.");

static PyObject *speedups_hardware(PyObject *self, PyObject *unused)
{
    return PyBool_FromLong(crc_update != crc_software);
}

static PyMethodDef speedups_methods[] = {
    {"crc32c", speedups_crc32c, METH_VARARGS, crc32c_doc},
    {"crc32c_table", speedups_crc32c_table, METH_VARARGS, crc32c_table_doc},
    {"verify_crc32c_payloads", speedups_verify, METH_VARARGS, verify_doc},
    {"split_batch_items", speedups_split, METH_VARARGS, split_doc},
    {"gather_binary", speedups_gather, METH_VARARGS, gather_doc},
    {"count_batch_items", speedups_count_items, METH_VARARGS, count_items_doc},
    {"verify_gather_crc32c", speedups_verify_gather, METH_VARARGS, verify_gather_doc},
    {"v2_add_frames", speedups_add_frames, METH_VARARGS, add_frames_doc},
    {"v2_add_frames_packed", speedups_add_frames_packed, METH_VARARGS, add_frames_packed_doc},
    {"split_frames", speedups_split_frames, METH_VARARGS, split_frames_doc},
    {"decode_add_requests", speedups_decode_adds, METH_VARARGS, decode_adds_doc},
    {"decode_plain_reads", speedups_decode_plain_reads, METH_VARARGS, decode_plain_reads_doc},
    {"v2_ok_answers", speedups_ok_answers, METH_VARARGS, ok_answers_doc},
    {"v2_add_responses", speedups_add_responses, METH_VARARGS, add_responses_doc},
    {"v2_batch_read_frame", speedups_batch_read_frame, METH_VARARGS, batch_read_frame_doc},
    {"crc_hardware", speedups_hardware, METH_NOARGS, hardware_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT, "bkspark.protocol._speedups",
    "Compiled fast path of the batch-read split, the CRC32C entry check, the Arrow payload gather and the bulk append's frames (see bkspark/protocol/speedups.py).",
    -1, speedups_methods,
};

PyMODINIT_FUNC PyInit__speedups(void)
{
    crc_init();
    return PyModule_Create(&speedups_module);
}
