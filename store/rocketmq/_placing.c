/* store.rocketmq._placing: what mq migrate and mq rebuild write, placed, compiled.
 *
 * place() copies each message of a batch from its DLedger entry (in a data file's map) to
 * its place in an output buffer and sets its PHYSICALOFFSET there: what commitlog.py's
 * _place_py does a message at a time in Python, here a memcpy each. put_keys() makes the
 * index entries of a batch of keys and chains them into the slot table, one key after
 * another as IndexFile.putKey does: what index.py's IndexWriter._put_numpy does with whole
 * arrays. (tests/rocketmq/test_mq_moving.py holds each pair to the same bytes.)
 *
 * Rules this module keeps: it never reads or writes outside the buffers it is given (every
 * range is checked first: ValueError, nothing written), and it decides nothing: which
 * messages go where and which keys a file takes is commitlog.py's and index.py's.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define PHY_POS_POSITION 28  /* MessageDecoder.PHY_POS_POSITION: PHYSICALOFFSET, i64 big-endian */

static const char place_doc[] =
    "place(buf, src, lengths, out, dst, phy)\n\n"
    "For each k: out[dst[k]:dst[k] + lengths[k]] = buf[src[k]:src[k] + lengths[k]], then the\n"
    "i64 at dst[k] + 28 set to phy[k] (big-endian). src, lengths, dst, phy: int64 arrays of one\n"
    "length; every range must lie in its buffer and each message hold the field (ValueError).";

static PyObject *placing_place(PyObject *self, PyObject *args) {
    Py_buffer buf, src, lens, out, dst, phy;
    if (!PyArg_ParseTuple(args, "y*y*y*w*y*y*:place", &buf, &src, &lens, &out, &dst, &phy))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = src.len / 8;
    if (src.len % 8 || lens.len != src.len || dst.len != src.len || phy.len != src.len) {
        PyErr_SetString(PyExc_ValueError, "src, lengths, dst and phy must be int64 arrays of one length");
        goto done;
    }
    const int64_t *s = src.buf, *l = lens.buf, *d = dst.buf, *p = phy.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (s[k] < 0 || d[k] < 0 || l[k] < PHY_POS_POSITION + 8 || s[k] > buf.len || l[k] > buf.len - s[k] ||
            d[k] > out.len || l[k] > out.len - d[k]) {
            PyErr_Format(PyExc_ValueError, "message %zd (%lld bytes from %lld to %lld) does not fit its buffers", k,
                         (long long)l[k], (long long)s[k], (long long)d[k]);
            goto done;
        }
    }
    const unsigned char *b = buf.buf;
    unsigned char *o = out.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        memcpy(o + d[k], b + s[k], (size_t)l[k]);
        uint64_t v = __builtin_bswap64((uint64_t)p[k]);
        memcpy(o + d[k] + PHY_POS_POSITION, &v, 8);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&src);
    PyBuffer_Release(&lens);
    PyBuffer_Release(&out);
    PyBuffer_Release(&dst);
    PyBuffer_Release(&phy);
    return result;
}

static const char put_keys_doc[] =
    "put_keys(hashes, phy, ts, slots, entries, count, begin_ts) -> new_slots\n\n"
    "Index entries count, count + 1, ... for the keys whose indexKeyHashMethod hashes, commit-log\n"
    "offsets and store times are hashes, phy, ts (int64 arrays of one length): each 20-byte entry\n"
    "(hash i32, phy i64, time diff in seconds i32, previous entry of its slot i32; big-endian)\n"
    "written to entries, and the slot table slots (big-endian i32 each) pointed at it. The diff\n"
    "counts from begin_ts, or from the first key's time for those after it when count is 1 (the\n"
    "file's first entry sets its begin time); a slot holding no valid entry (<= 0, or past the\n"
    "count) chains to 0, and new_slots counts those (IndexHeader's hashSlotCount).";

#define INDEX_SIZE 20
#define SLOT_AHEAD 16
#define INT_MAX_ 2147483647LL

static inline void put32(unsigned char *p, uint32_t v) { v = __builtin_bswap32(v); memcpy(p, &v, 4); }
static inline void put64(unsigned char *p, uint64_t v) { v = __builtin_bswap64(v); memcpy(p, &v, 8); }

static PyObject *placing_put_keys(PyObject *self, PyObject *args) {
    Py_buffer hashes, phy, ts, slots, entries;
    long long count, begin_ts;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*LL:put_keys", &hashes, &phy, &ts, &slots, &entries, &count, &begin_ts))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t n = hashes.len / 8, nslots = slots.len / 4;
    if (hashes.len % 8 || phy.len != hashes.len || ts.len != hashes.len || entries.len != n * INDEX_SIZE ||
        slots.len % 4 || nslots == 0 || count < 1 || count > INT_MAX_ - n) {
        PyErr_SetString(PyExc_ValueError, "hashes, phy, ts: int64 arrays of one length; entries: 20 bytes each; "
                                          "slots: a table of i32; count: at least 1");
        goto done;
    }
    const int64_t *h = hashes.buf, *p = phy.buf, *t = ts.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (h[k] < 0 || h[k] > INT_MAX_) {
            PyErr_Format(PyExc_ValueError, "hash %lld of key %zd is not an indexKeyHashMethod hash", (long long)h[k], k);
            goto done;
        }
    }
    unsigned char *table = slots.buf, *e = entries.buf;
    long long added = 0;
    for (Py_ssize_t k = 0; k < n; k++, e += INDEX_SIZE) {
        long long at = count + k;
        if (k + SLOT_AHEAD < n)  /* (slots lie anywhere in the table: ask for the line a few keys ahead) */
            __builtin_prefetch(table + (h[k + SLOT_AHEAD] % nslots) * 4, 1);
        unsigned char *slot = table + (h[k] % nslots) * 4;
        uint32_t raw;
        memcpy(&raw, slot, 4);
        int64_t prev = (int32_t)__builtin_bswap32(raw);
        if (prev <= 0 || prev > at) {
            prev = 0;
            added++;
        }
        int64_t begin = (k > 0 && count == 1) ? t[0] : begin_ts;
        int64_t diff = 0;
        if (begin > 0 && t[k] > begin) {
            diff = (t[k] - begin) / 1000;
            if (diff > INT_MAX_)
                diff = INT_MAX_;
        }
        put32(e, (uint32_t)h[k]);
        put64(e + 4, (uint64_t)p[k]);
        put32(e + 12, (uint32_t)diff);
        put32(e + 16, (uint32_t)prev);
        put32(slot, (uint32_t)at);
    }
    result = PyLong_FromLongLong(added);
done:
    PyBuffer_Release(&hashes);
    PyBuffer_Release(&phy);
    PyBuffer_Release(&ts);
    PyBuffer_Release(&slots);
    PyBuffer_Release(&entries);
    return result;
}

static PyMethodDef placing_methods[] = {
    {"place", placing_place, METH_VARARGS, place_doc},
    {"put_keys", placing_put_keys, METH_VARARGS, put_keys_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef placing_module = {
    PyModuleDef_HEAD_INIT, "store.rocketmq._placing",
    "Messages copied into a new commit log's bytes, compiled (see store/rocketmq/_placing.c).", -1,
    placing_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__placing(void) { return PyModule_Create(&placing_module); }
