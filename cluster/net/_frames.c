/* cluster.net._frames: the wire codec's per-frame loops, compiled.
 *
 * Every request and every answer a node or a client receives passes through
 * wire.FrameReceiver.received: read the length, check it, decode the header JSON into a
 * wire.Frame, copy the body. In Python that is about 3 us a frame, and a leader taking
 * single appends from 64 clients does it once per append (and each client once per
 * answer). split() below does the same loop in C. append_answers() makes a leader's
 * answers to the APPENDs of a proposal (api.append_answers), with their rows of
 * [index, term, pos, size] written straight from the stored run's columns, and
 * check_bodies() checks the size table of a batched APPEND (api.check_bodies).
 *
 * Rules this module keeps:
 * - It decides nothing the Python code in frames.py and api.py does not (split_frames and the Python
 *   halves of append_answers and check_bodies stay the reference; tests/net/test_wire_frames.py holds the two
 *   to the same frames, bytes and errors).
 * - It parses only the plain form of a header: JSON with no whitespace, keys that a
 *   wire.Frame has (each at most once), integers of at most 18 digits, strings of
 *   printable ASCII without escapes, extFields an object of such strings. frame_head
 *   writes every header in that form. Any other header (and any frame whose header
 *   fails a check) goes to the Python decoder it is given, which decodes it or raises
 *   the error the Python loop raises.
 * - Errors of framing (a length above the limit or below 4) are returned as data; the
 *   caller raises them, with the frames completed before them dropped, as the Python
 *   loop does.
 *
 * Frame (remoting): int32 length (bytes after it), int32 (serializeType << 24) |
 * headerLength, header, body.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* wire.MAX_HEADER_BYTES: a longer header goes to the Python decoder, which refuses it */
#define MAX_HEADER (64 << 10)

/* header keys, in wire.Frame's field order */
enum { K_CODE, K_OPAQUE, K_FLAG, K_REMARK, K_EXT, K_LANGUAGE, K_VERSION, K_SERIALIZE, K_COUNT };

static PyObject *empty_str, *python_str;

typedef struct {
    const char *p, *end;
} cursor;

static int parse_int(cursor *c, long long *out) {
    const char *p = c->p;
    int neg = 0;
    if (p < c->end && *p == '-') {
        neg = 1;
        p++;
    }
    const char *digits = p;
    long long v = 0;
    while (p < c->end && *p >= '0' && *p <= '9') {
        v = v * 10 + (*p - '0');
        p++;
    }
    size_t n = (size_t)(p - digits);
    if (n == 0 || n > 18 || (n > 1 && *digits == '0'))
        return 0;
    c->p = p;
    *out = neg ? -v : v;
    return 1;
}

/* a string of printable ASCII without escapes; *start, *len are its content */
static int parse_str(cursor *c, const char **start, Py_ssize_t *len) {
    const char *p = c->p;
    if (p >= c->end || *p != '"')
        return 0;
    const char *s = ++p;
    while (p < c->end && *p != '"') {
        unsigned char ch = (unsigned char)*p;
        if (ch < 0x20 || ch > 0x7E || ch == '\\')
            return 0;
        p++;
    }
    if (p >= c->end)
        return 0;
    *start = s;
    *len = p - s;
    c->p = p + 1;
    return 1;
}

static int eat(cursor *c, char ch) {
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static int eat_null(cursor *c) {
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

static PyObject *ascii_str(const char *s, Py_ssize_t n) {
    if (n == 0) {
        Py_INCREF(empty_str);
        return empty_str;
    }
    if (n == 6 && memcmp(s, "PYTHON", 6) == 0) {
        Py_INCREF(python_str);
        return python_str;
    }
    return PyUnicode_DecodeASCII(s, n, NULL);
}

static int key_of(const char *s, Py_ssize_t n) {
    switch (n) {
    case 4:
        if (memcmp(s, "code", 4) == 0) return K_CODE;
        if (memcmp(s, "flag", 4) == 0) return K_FLAG;
        break;
    case 6:
        if (memcmp(s, "opaque", 6) == 0) return K_OPAQUE;
        if (memcmp(s, "remark", 6) == 0) return K_REMARK;
        break;
    case 7:
        if (memcmp(s, "version", 7) == 0) return K_VERSION;
        break;
    case 8:
        if (memcmp(s, "language", 8) == 0) return K_LANGUAGE;
        break;
    case 9:
        if (memcmp(s, "extFields", 9) == 0) return K_EXT;
        break;
    case 23:
        if (memcmp(s, "serializeTypeCurrentRPC", 23) == 0) return K_SERIALIZE;
        break;
    }
    return -1;
}

/* extFields: null or an object of plain strings; a new dict, NULL with no error set when
 * the form is not the plain one, NULL with an error set on a failure of Python's */
static PyObject *parse_ext(cursor *c) {
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    if (eat_null(c))
        return d;
    if (!eat(c, '{'))
        goto plain_no;
    if (eat(c, '}'))
        return d;
    for (;;) {
        const char *ks, *vs;
        Py_ssize_t kn, vn;
        if (!parse_str(c, &ks, &kn) || !eat(c, ':') || !parse_str(c, &vs, &vn))
            goto plain_no;
        PyObject *k = ascii_str(ks, kn);
        if (k == NULL)
            goto fail;
        PyObject *v = ascii_str(vs, vn);
        if (v == NULL) {
            Py_DECREF(k);
            goto fail;
        }
        int rc = PyDict_SetItem(d, k, v);
        Py_DECREF(k);
        Py_DECREF(v);
        if (rc < 0)
            goto fail;
        if (eat(c, '}'))
            return d;
        if (!eat(c, ','))
            goto plain_no;
    }
plain_no:
    Py_DECREF(d);
    return NULL;
fail:
    Py_DECREF(d);
    return NULL;
}

/* the Frame of a plain header and its body; NULL with no error set when the header is not
 * plain, NULL with an error set on a failure of Python's */
static PyObject *plain_frame(PyObject *frame_type, const char *h, Py_ssize_t hlen, const char *body,
                             Py_ssize_t blen) {
    PyObject *vals[K_COUNT] = {NULL};
    long long ints[K_COUNT] = {0};
    unsigned seen = 0;
    PyObject *result = NULL;
    cursor c = {h, h + hlen};
    if (!eat(&c, '{'))
        return NULL;
    if (!eat(&c, '}')) {
        for (;;) {
            const char *ks;
            Py_ssize_t kn;
            if (!parse_str(&c, &ks, &kn) || !eat(&c, ':'))
                goto out;
            int k = key_of(ks, kn);
            if (k < 0 || (seen & (1u << k)))
                goto out;
            seen |= 1u << k;
            if (k == K_CODE || k == K_OPAQUE || k == K_FLAG || k == K_VERSION) {
                /* (out of int32, as remoting's header fields are: the Python decoder refuses it) */
                if (!parse_int(&c, &ints[k]) || ints[k] < INT32_MIN || ints[k] > INT32_MAX)
                    goto out;
            } else if (k == K_EXT) {
                vals[k] = parse_ext(&c);
                if (vals[k] == NULL)
                    goto out;
            } else {
                const char *s;
                Py_ssize_t n;
                if (k != K_LANGUAGE && eat_null(&c)) {
                    vals[k] = k == K_REMARK ? (Py_INCREF(empty_str), empty_str) : (Py_INCREF(Py_None), Py_None);
                } else {
                    if (!parse_str(&c, &s, &n))
                        goto out;
                    vals[k] = ascii_str(s, n);
                    if (vals[k] == NULL)
                        goto out;
                }
            }
            if (eat(&c, '}'))
                break;
            if (!eat(&c, ','))
                goto out;
        }
    }
    if (c.p != c.end || !(seen & (1u << K_CODE)))
        goto out;
    for (int k = K_CODE; k < K_COUNT; k++) {
        if (vals[k] != NULL)
            continue;
        switch (k) {
        case K_CODE: case K_OPAQUE: case K_FLAG: case K_VERSION:
            vals[k] = PyLong_FromLongLong(ints[k]);
            break;
        case K_REMARK:
            Py_INCREF(empty_str);
            vals[k] = empty_str;
            break;
        case K_EXT:
            vals[k] = PyDict_New();
            break;
        case K_LANGUAGE:
            Py_INCREF(python_str);
            vals[k] = python_str;
            break;
        default:
            Py_INCREF(Py_None);
            vals[k] = Py_None;
        }
        if (vals[k] == NULL)
            goto out;
    }
    PyObject *b = PyBytes_FromStringAndSize(body, blen);
    if (b == NULL)
        goto out;
    /* wire.Frame(code, opaque, flag, remark, ext, body, language, version, serializeTypeCurrentRPC) */
    PyObject *args[9] = {vals[K_CODE], vals[K_OPAQUE], vals[K_FLAG], vals[K_REMARK], vals[K_EXT], b,
                         vals[K_LANGUAGE], vals[K_VERSION], vals[K_SERIALIZE]};
    result = PyObject_Vectorcall(frame_type, args, 9, NULL);
    Py_DECREF(b);
out:
    for (int k = 0; k < K_COUNT; k++)
        Py_XDECREF(vals[k]);
    return result;
}

static const char split_doc[] =
    "split(buf, view, start, end, max_frame, frame_type, decode) -> (frames, start, error, length)\n\n"
    "The frames complete in buf[start:end] (view is a memoryview of buf), in order, and where\n"
    "the unread bytes now start. error 0: length is that of the incomplete frame at start (-1\n"
    "when fewer than 4 bytes are left); error 1: length is above max_frame; error 2: length\n"
    "is below 4 (both at start, which is then the offending frame). A frame whose header is\n"
    "not in the plain form goes to decode(view[a:b]) (its bytes after the length field).";

static PyObject *frames_split(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *view, *frame_type, *decode;
    Py_ssize_t start, end, max_frame;
    if (!PyArg_ParseTuple(args, "y*OnnnOO", &buf, &view, &start, &end, &max_frame, &frame_type, &decode))
        return NULL;
    PyObject *out = NULL;
    int error = 0;
    long long length = -1;
    if (start < 0 || end > buf.len || start > end) {
        PyErr_SetString(PyExc_ValueError, "start and end must lie within the buffer");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL)
        goto done;
    const unsigned char *b = buf.buf;
    while (end - start >= 4) {
        const unsigned char *p = b + start;
        int32_t n = (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]);
        length = n;
        if ((long long)n > (long long)max_frame) {
            error = 1;
            break;
        }
        if (n < 4) {
            error = 2;
            break;
        }
        if (end - start - 4 < (Py_ssize_t)n)
            break;
        uint32_t mark = ((uint32_t)p[4] << 24) | ((uint32_t)p[5] << 16) | ((uint32_t)p[6] << 8) | p[7];
        Py_ssize_t hlen = (Py_ssize_t)(mark & 0xFFFFFF);
        PyObject *f = NULL;
        if ((mark >> 24) == 0 && hlen <= (Py_ssize_t)n - 4 && hlen <= MAX_HEADER) {
            f = plain_frame(frame_type, (const char *)p + 8, hlen, (const char *)p + 8 + hlen,
                            (Py_ssize_t)n - 4 - hlen);
            if (f == NULL && PyErr_Occurred())
                goto fail;
        }
        if (f == NULL) {
            PyObject *part = PySequence_GetSlice(view, start + 4, start + 4 + n);
            if (part == NULL)
                goto fail;
            f = PyObject_CallOneArg(decode, part);
            Py_DECREF(part);
            if (f == NULL)
                goto fail;
        }
        int rc = PyList_Append(out, f);
        Py_DECREF(f);
        if (rc < 0)
            goto fail;
        start += 4 + (Py_ssize_t)n;
        length = -1;
    }
    PyBuffer_Release(&buf);
    PyObject *r = Py_BuildValue("(NniL)", out, start, error, length);
    return r;
fail:
    Py_CLEAR(out);
done:
    PyBuffer_Release(&buf);
    return NULL;
}

/* -- APPEND answers ------------------------------------------------------------------ */

static char *put_i64(char *w, long long v) {
    char tmp[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    if (v < 0)
        *w++ = '-';
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    while (n)
        *w++ = tmp[--n];
    return w;
}

static char *put_bytes(char *w, const char *s, Py_ssize_t n) {
    memcpy(w, s, (size_t)n);
    return w + n;
}

static void put_be32(char *w, uint32_t v) {
    w[0] = (char)(v >> 24);
    w[1] = (char)(v >> 16);
    w[2] = (char)(v >> 8);
    w[3] = (char)v;
}

static int long_at(PyObject *seq, Py_ssize_t i, long long *out) {
    *out = PyLong_AsLongLong(PyTuple_Check(seq) ? PyTuple_GET_ITEM(seq, i) : PyList_GET_ITEM(seq, i));
    return !(*out == -1 && PyErr_Occurred());
}

static const char answers_doc[] =
    "append_answers(pre, post, head, waiters, first, term, pos, ends) -> list of bytes\n\n"
    "The whole answer frame of each APPEND in waiters ((conn, opaque, start, n) each), for a\n"
    "proposal stored as one run (store.base.AppendedRun: entries first, first + 1, ... of one\n"
    "term, laid end to end from pos, entry k ending ends[k] bytes after pos). Each frame's\n"
    "header is pre + opaque + post, its body head + the rows [[index,term,pos,size],...] of\n"
    "entries start .. start + n - 1 of the run + '}': what wire.response_bytes gives around\n"
    "head + json_body(rows[start:start + n]) + b'}'.";

static PyObject *frames_append_answers(PyObject *self, PyObject *args) {
    const char *pre, *post, *head;
    Py_ssize_t npre, npost, nhead;
    PyObject *waiters, *ends;
    long long first, term, pos;
    if (!PyArg_ParseTuple(args, "y#y#y#O!LLLO!", &pre, &npre, &post, &npost, &head, &nhead, &PyList_Type, &waiters,
                          &first, &term, &pos, &PyList_Type, &ends))
        return NULL;
    Py_ssize_t nends = PyList_GET_SIZE(ends), nw = PyList_GET_SIZE(waiters);
    PyObject *out = PyList_New(nw);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t w = 0; w < nw; w++) {
        PyObject *t = PyList_GET_ITEM(waiters, w);
        long long opaque, start, n;
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 4) {
            PyErr_SetString(PyExc_TypeError, "a waiter is a (conn, opaque, start, n) tuple");
            goto fail;
        }
        if (!long_at(t, 1, &opaque) || !long_at(t, 2, &start) || !long_at(t, 3, &n))
            goto fail;
        if (start < 0 || n < 0 || start + n > nends) {
            PyErr_SetString(PyExc_ValueError, "a waiter's entries lie outside the run");
            goto fail;
        }
        /* 8 bytes of lengths, the header (an opaque of at most 20 characters), the body
         * (each row at most 4 numbers of 20 characters, 3 commas and 2 brackets, one comma
         * between rows, and the brackets of the list and the closing brace) */
        Py_ssize_t cap = 8 + npre + 20 + npost + nhead + 3 + n * 86;
        PyObject *b = PyBytes_FromStringAndSize(NULL, cap);
        if (b == NULL)
            goto fail;
        char *base = PyBytes_AS_STRING(b), *wp = base + 8;
        wp = put_bytes(wp, pre, npre);
        wp = put_i64(wp, opaque);
        wp = put_bytes(wp, post, npost);
        char *body = wp;
        wp = put_bytes(wp, head, nhead);
        *wp++ = '[';
        for (long long k = start; k < start + n; k++) {
            long long end_k, prev = 0;
            if (!long_at(ends, (Py_ssize_t)k, &end_k) || (k > 0 && !long_at(ends, (Py_ssize_t)(k - 1), &prev))) {
                Py_DECREF(b);
                goto fail;
            }
            if (k > start)
                *wp++ = ',';
            *wp++ = '[';
            wp = put_i64(wp, first + k);
            *wp++ = ',';
            wp = put_i64(wp, term);
            *wp++ = ',';
            wp = put_i64(wp, pos + prev);
            *wp++ = ',';
            wp = put_i64(wp, end_k - prev);
            *wp++ = ']';
        }
        *wp++ = ']';
        *wp++ = '}';
        Py_ssize_t total = wp - base;
        put_be32(base, (uint32_t)(total - 4));
        put_be32(base + 4, (uint32_t)(body - base - 8)); /* serialize type 0 (JSON) | header length */
        if (_PyBytes_Resize(&b, total) < 0)
            goto fail;
        PyList_SET_ITEM(out, w, b);
    }
    return out;
fail:
    Py_DECREF(out);
    return NULL;
}

/* -- APPEND bodies ------------------------------------------------------------------- */

static const char check_doc[] =
    "check_bodies(data, count) -> int\n\n"
    "The largest body of a batched APPEND, or -1 when data does not hold count int32 sizes\n"
    "and then the bodies one after another: count non-negative sizes adding up to the rest\n"
    "of data (wire.check_bodies then says what is wrong).";

static PyObject *frames_check_bodies(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t count;
    if (!PyArg_ParseTuple(args, "y*n", &buf, &count))
        return NULL;
    const unsigned char *p = buf.buf;
    long long largest = -1;
    if (count > 0 && count <= buf.len / 4) {
        long long total = 0, most = 0;
        Py_ssize_t k = 0;
        for (; k < count; k++) {
            const unsigned char *q = p + 4 * k;
            int32_t n = (int32_t)(((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8) | q[3]);
            if (n < 0)
                break;
            total += n;
            if (n > most)
                most = n;
        }
        if (k == count && total == buf.len - 4 * count)
            largest = most;
    }
    PyBuffer_Release(&buf);
    return PyLong_FromLongLong(largest);
}

static PyMethodDef frames_methods[] = {
    {"check_bodies", frames_check_bodies, METH_VARARGS, check_doc},
    {"split", frames_split, METH_VARARGS, split_doc},
    {"append_answers", frames_append_answers, METH_VARARGS, answers_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef frames_module = {
    PyModuleDef_HEAD_INIT, "cluster.net._frames", "Cutting received bytes into frames, compiled (see cluster/net/_frames.c).",
    -1, frames_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__frames(void) {
    empty_str = PyUnicode_InternFromString("");
    python_str = PyUnicode_InternFromString("PYTHON");
    if (empty_str == NULL || python_str == NULL)
        return NULL;
    return PyModule_Create(&frames_module);
}
