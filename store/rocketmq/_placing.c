/* store.rocketmq._placing: messages copied into a new commit log's bytes, compiled.
 *
 * place() copies each message of a batch from its DLedger entry (in a data file's map) to
 * its place in an output buffer and sets its PHYSICALOFFSET there: what
 * store/rocketmq/moving.py's _place_py does a message at a time in Python, here a memcpy
 * each (tests/rocketmq/test_mq_moving.py holds the two to the same bytes).
 *
 * Rules this module keeps: it never reads or writes outside the buffers it is given (every
 * range is checked first: ValueError, nothing copied), and it decides nothing: which
 * messages go where is moving.py's.
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

static PyMethodDef placing_methods[] = {
    {"place", placing_place, METH_VARARGS, place_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef placing_module = {
    PyModuleDef_HEAD_INIT, "store.rocketmq._placing",
    "Messages copied into a new commit log's bytes, compiled (see store/rocketmq/_placing.c).", -1,
    placing_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__placing(void) { return PyModule_Create(&placing_module); }
