/* store._lanes: the file store's per-entry lanes, compiled.
 *
 * Two loops run for every entry a node stores, and in Python they cost a few
 * microseconds an entry: the leader's encoding of new entries (header, CRCs, index
 * record) and the follower's checking of pushed ones. This module does exactly what
 * the Python lanes in store/appending.py do (Appender._append_entries and
 * check_entries), and the store uses it when it was built; the Python
 * lanes stay the reference, and tests/store/test_store_lanes.py holds the two to the same
 * bytes, answers and errors.
 *
 * Rules this module keeps:
 * - It decides nothing the Python lanes do not: same checks in the same order, same
 *   stopping points. Errors are returned as data (a tuple naming the check and its
 *   values); the store turns them into its exceptions and messages.
 * - It never writes to a file: it returns bytes (entries, index records) that the
 *   store writes.
 * - CRC-32 is zlib's, computed with carry-less multiplication where the CPU has it and
 *   with slicing-by-8 tables elsewhere (store/_crc32.h, shared with
 *   store/rocketmq/_columns.c).
 *
 * Entry header (store/format.py ENTRY_HEADER, big-endian): magic i32, size i32, index
 * i64, term i64, pos i64, channel i32, chainCrc i32, bodyCrc i32, bodySize i32.
 * Index record (INDEX_RECORD): magic i32, pos i64, size i32, index i64, term i64.
 * Chain input (CHAIN_INPUT): prevChain i32, index i64, term i64, bodyCrc i32.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 48
#define RECORD_SIZE 32
#define MIN_BLANK_LEN 8
#define CRC_MASK 0x7FFFFFFFu

#include "_crc32.h"

/* -- big-endian fields ----------------------------------------------------------------- */

static inline void put32(unsigned char *p, uint32_t v) { v = __builtin_bswap32(v); memcpy(p, &v, 4); }
static inline void put64(unsigned char *p, uint64_t v) { v = __builtin_bswap64(v); memcpy(p, &v, 8); }
static inline int32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v); }
static inline int64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v); }

static uint32_t chain_crc(uint32_t prev, int64_t index, int64_t term, uint32_t bcrc) {
    unsigned char in[24];
    put32(in, prev);
    put64(in + 4, (uint64_t)index);
    put64(in + 12, (uint64_t)term);
    put32(in + 20, bcrc);
    return crc32_update(0, in, 24) & CRC_MASK;
}

static void put_record(unsigned char *r, int32_t magic, int64_t pos, int32_t size, int64_t index, int64_t term) {
    put32(r, (uint32_t)magic);
    put64(r + 4, (uint64_t)pos);
    put32(r + 12, (uint32_t)size);
    put64(r + 16, (uint64_t)index);
    put64(r + 24, (uint64_t)term);
}

/* -- crc32(data, value=0) -------------------------------------------------------------- */

static PyObject *lanes_crc32(PyObject *self, PyObject *args) {
    Py_buffer data;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k:crc32", &data, &value))
        return NULL;
    uint32_t c = crc32_update((uint32_t)value, data.buf, (size_t)data.len);
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(c);
}

/* -- encode_entries, encode_packed --------------------------------------------------------- */

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} span;

/* The arguments after the bodies, which encode_entries and encode_packed share. */
typedef struct {
    Py_ssize_t start;
    long long first_index, term, pos, chain, room;
    int magic, with_crc;
} encode_args;

static int parse_encode_args(PyObject *args, const char *format, PyObject **bodies, encode_args *a) {
    return PyArg_ParseTuple(args, format, bodies, &a->start, &a->first_index, &a->term, &a->magic, &a->pos,
                            &a->chain, &a->with_crc, &a->room);
}

/* Encode bodies[0:count] (already cut to what fits) as entries from first_index at pos:
 * (entries, records, ends, stop, chain), where stop = start + count. */
static PyObject *encode_spans(const span *bodies, Py_ssize_t count, long long used, const encode_args *a) {
    long long first_index = a->first_index, term = a->term, pos = a->pos, chain_in = a->chain;
    int magic = a->magic, with_crc = a->with_crc;
    PyObject *result = NULL, *seg = NULL, *records = NULL, *ends = NULL;
    seg = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)used);
    records = PyBytes_FromStringAndSize(NULL, count * RECORD_SIZE);
    ends = PyList_New(count);
    if (seg == NULL || records == NULL || ends == NULL)
        goto done;
    unsigned char *out = (unsigned char *)PyBytes_AS_STRING(seg);
    unsigned char *rec = (unsigned char *)PyBytes_AS_STRING(records);
    uint32_t chain = (uint32_t)chain_in;
    long long off = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        const unsigned char *body = bodies[k].p;
        int32_t bsize = (int32_t)bodies[k].n;
        int32_t size = HEADER_SIZE + bsize;
        int64_t index = first_index + k;
        uint32_t bcrc = 0;
        if (with_crc) {
            bcrc = crc32_update(0, body, (size_t)bsize) & CRC_MASK;
            chain = chain_crc(chain, index, term, bcrc);
        } else {
            chain = 0;
        }
        unsigned char *h = out + off;
        put32(h, (uint32_t)magic);
        put32(h + 4, (uint32_t)size);
        put64(h + 8, (uint64_t)index);
        put64(h + 16, (uint64_t)term);
        put64(h + 24, (uint64_t)(pos + off));
        put32(h + 32, 0);
        put32(h + 36, chain);
        put32(h + 40, bcrc);
        put32(h + 44, (uint32_t)bsize);
        memcpy(h + HEADER_SIZE, body, (size_t)bsize);
        put_record(rec + k * RECORD_SIZE, magic, pos + off, size, index, term);
        off += size;
        PyObject *end = PyLong_FromLongLong(off);
        if (end == NULL)
            goto done;
        PyList_SET_ITEM(ends, k, end);
    }
    /* the chain CRC as the header field reads (a signed int32), or as given when nothing was encoded */
    result = Py_BuildValue("OOOnL", seg, records, ends, a->start + count, count ? (long long)(int32_t)chain : chain_in);
done:
    Py_XDECREF(seg);
    Py_XDECREF(records);
    Py_XDECREF(ends);
    return result;
}

/* Take the next body of size n into the entries when it fits: 1 taken, 0 not (the next
 * data file), -1 an error set. */
static int take_body(long long n, long long room, long long *used) {
    long long size = HEADER_SIZE + n;
    if (size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "an entry is larger than 2 GiB");
        return -1;
    }
    if (*used && size + MIN_BLANK_LEN > room - *used)
        return 0;
    *used += size;
    return 1;
}

PyDoc_STRVAR(encode_doc,
"encode_entries(bodies, start, first_index, term, magic, pos, chain, with_crc, room)\n"
"-> (entries, records, ends, stop, chain)\n\n"
"Encode bodies[start:] as consecutive entries from ``first_index`` at ``pos``, as many\n"
"as fit ``room`` bytes (the first always; each later one only with MIN_BLANK_LEN bytes\n"
"to spare after it), chaining CRCs from ``chain`` when ``with_crc``. Returns the\n"
"entries' bytes, their index records, each entry's end offset in the entries' bytes,\n"
"the index of the first body not encoded, and the last chain CRC.");

static PyObject *lanes_encode(PyObject *self, PyObject *args) {
    PyObject *bodies_obj;
    encode_args a;
    if (!parse_encode_args(args, "OnLLiLLpL:encode_entries", &bodies_obj, &a))
        return NULL;
    Py_ssize_t start = a.start;
    PyObject *bodies = PySequence_Fast(bodies_obj, "bodies must be a sequence");
    if (bodies == NULL)
        return NULL;
    Py_ssize_t nb = PySequence_Fast_GET_SIZE(bodies);
    PyObject **items = PySequence_Fast_ITEMS(bodies);
    PyObject *result = NULL;
    Py_buffer *views = NULL;
    span *spans = NULL;
    Py_ssize_t got = 0, count = 0;
    if (start < 0 || start > nb) {
        PyErr_SetString(PyExc_ValueError, "start is outside bodies");
        goto done;
    }
    size_t most = (size_t)(nb - start > 0 ? nb - start : 1);
    views = PyMem_Malloc(sizeof(Py_buffer) * most);
    spans = PyMem_Malloc(sizeof(span) * most);
    if (views == NULL || spans == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    long long used = 0;
    for (Py_ssize_t i = start; i < nb; i++) {
        if (PyObject_GetBuffer(items[i], &views[got], PyBUF_SIMPLE) < 0)
            goto done;
        got++;
        int took = take_body(views[got - 1].len, a.room, &used);
        if (took < 0)
            goto done;
        if (!took)
            break;
        spans[count].p = views[count].buf;
        spans[count].n = views[count].len;
        count++;
    }
    result = encode_spans(spans, count, used, &a);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(spans);
    Py_DECREF(bodies);
    return result;
}

PyDoc_STRVAR(packed_doc,
"encode_packed(runs, start, first_index, term, magic, pos, chain, with_crc, room)\n"
"-> (entries, records, ends, stop, chain)\n\n"
"encode_entries for bodies given as packed runs (store.packed.PackedBodies.runs): a list\n"
"of (buffer, count), each buffer ``count`` big-endian int32 sizes and then the bodies.\n"
"``start`` counts bodies across the runs. ValueError when a run's sizes do not fit its\n"
"buffer.");

static PyObject *lanes_encode_packed(PyObject *self, PyObject *args) {
    PyObject *runs_obj;
    encode_args a;
    if (!parse_encode_args(args, "OnLLiLLpL:encode_packed", &runs_obj, &a))
        return NULL;
    if (!PyList_Check(runs_obj)) {
        PyErr_SetString(PyExc_TypeError, "runs must be a list");
        return NULL;
    }
    Py_ssize_t start = a.start;
    Py_ssize_t nruns = PyList_GET_SIZE(runs_obj);
    PyObject *result = NULL;
    Py_buffer *views = NULL;
    span *spans = NULL;
    Py_ssize_t got = 0, count = 0, cap = 0, skip = start;
    if (start < 0) {
        PyErr_SetString(PyExc_ValueError, "start is outside bodies");
        return NULL;
    }
    views = PyMem_Malloc(sizeof(Py_buffer) * (size_t)(nruns ? nruns : 1));
    if (views == NULL)
        return PyErr_NoMemory();
    long long used = 0;
    int full = 0;
    for (Py_ssize_t r = 0; r < nruns && !full; r++) {
        PyObject *run = PyList_GET_ITEM(runs_obj, r);
        PyObject *buf_obj;
        Py_ssize_t n;
        if (!PyTuple_Check(run) || !PyArg_ParseTuple(run, "On:encode_packed", &buf_obj, &n)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a run must be a (buffer, count) tuple");
            goto done;
        }
        if (n <= 0) {
            PyErr_SetString(PyExc_ValueError, "a run must hold at least one body");
            goto done;
        }
        if (skip >= n) {  /* before start: only its count matters */
            skip -= n;
            continue;
        }
        if (PyObject_GetBuffer(buf_obj, &views[got], PyBUF_SIMPLE) < 0)
            goto done;
        const unsigned char *b = views[got].buf;
        Py_ssize_t blen = views[got].len;
        got++;
        if (n > blen / 4) {
            PyErr_SetString(PyExc_ValueError, "a run's size table does not fit its buffer");
            goto done;
        }
        Py_ssize_t off = 4 * n;
        for (Py_ssize_t k = 0; k < n; k++) {  /* every size is checked, also those skipped */
            int32_t size = get32(b + 4 * k);
            if (size < 0 || size > blen - off) {
                PyErr_SetString(PyExc_ValueError, "a run's body sizes run past its buffer");
                goto done;
            }
            if (k >= skip && !full) {
                int took = take_body(size, a.room, &used);
                if (took < 0)
                    goto done;
                if (took) {
                    if (count == cap) {
                        cap = cap ? 2 * cap : 256;
                        span *grown = PyMem_Realloc(spans, sizeof(span) * (size_t)cap);
                        if (grown == NULL) {
                            PyErr_NoMemory();
                            goto done;
                        }
                        spans = grown;
                    }
                    spans[count].p = b + off;
                    spans[count].n = size;
                    count++;
                } else {
                    full = 1;
                }
            }
            off += size;
        }
        skip = 0;
    }
    if (skip > 0) {
        PyErr_SetString(PyExc_ValueError, "start is outside bodies");
        goto done;
    }
    result = encode_spans(spans, count, used, &a);
done:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    PyMem_Free(spans);
    return result;
}

/* -- check_entries ----------------------------------------------------------------------- */

PyDoc_STRVAR(check_doc,
"check_entries(buf, off, limit, end_index, end_term, max_term, write_pos, file_size, prev_chain=None)\n"
"-> (stop, ends, terms, records, chain, first_pos, error)\n\n"
"Check at most ``limit`` pushed entries of ``buf`` from ``off`` against a log that ends\n"
"at ``end_index`` / ``end_term`` / ``write_pos``, within one data file (the first\n"
"entry may start the next file; a later one that does ends the run). Returns where it\n"
"stopped, each accepted entry's end offset from ``off`` and its term, their index\n"
"records, the last accepted entry's chain CRC (None when none was), the first one's\n"
"pos, and None or the check that stopped it: (name, values...). An entry that records\n"
"checksums must also carry the chain CRC its index, term and body CRC make with the chain\n"
"of the entry before it: ``prev_chain`` (the local log's last chain) for the first one,\n"
"whose chain goes unchecked when it is None.");

static PyObject *lanes_check(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t off, limit;
    long long end_index, end_term, write_pos, fsize;
    PyObject *max_term_obj, *prev_chain_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*nnLLOLL|O:check_entries", &buf, &off, &limit, &end_index, &end_term,
                          &max_term_obj, &write_pos, &fsize, &prev_chain_obj))
        return NULL;
    PyObject *result = NULL, *ends = NULL, *terms = NULL, *records = NULL, *error = NULL, *chain_obj = NULL;
    unsigned char *rec = NULL;
    int has_max = max_term_obj != Py_None;
    long long max_term = 0;
    if (has_max) {
        max_term = PyLong_AsLongLong(max_term_obj);
        if (max_term == -1 && PyErr_Occurred())
            goto done;
    }
    int known_prev = prev_chain_obj != Py_None;
    uint32_t prev = 0;
    if (known_prev) {
        long long v = PyLong_AsLongLong(prev_chain_obj);
        if (v == -1 && PyErr_Occurred())
            goto done;
        prev = (uint32_t)v;
    }
    if (fsize <= 0 || off < 0 || off > buf.len) {
        PyErr_SetString(PyExc_ValueError, "bad file size or offset");
        goto done;
    }
    const unsigned char *p = buf.buf;
    Py_ssize_t n = buf.len, seg_off = off;
    ends = PyList_New(0);
    terms = PyList_New(0);
    Py_ssize_t cap = 64, count = 0;
    rec = PyMem_Malloc(cap * RECORD_SIZE);
    if (ends == NULL || terms == NULL || rec == NULL) {
        if (rec == NULL)
            PyErr_NoMemory();
        goto done;
    }
    long long idx = end_index, last_term = end_term, first_pos = -1;
    uint32_t chain = 0;
    while (off < n && count < limit) {
        if (n - off < HEADER_SIZE) {
            error = Py_BuildValue("(sn)", "trailing", n - off);
            break;
        }
        const unsigned char *h = p + off;
        int32_t magic = get32(h), size = get32(h + 4);
        int64_t eidx = get64(h + 8), term = get64(h + 16), pos = get64(h + 24);
        uint32_t echain = (uint32_t)get32(h + 36), bcrc = (uint32_t)get32(h + 40);
        int32_t bsize = get32(h + 44);
        if (magic < 1 || magic > 3 || bsize < 0 || (long long)size != HEADER_SIZE + (long long)bsize ||
            (long long)off + size > n) {
            error = Py_BuildValue("(snii)", "malformed", off, magic, size);
            break;
        }
        if (eidx != idx + 1) {
            error = Py_BuildValue("(sLL)", "index", (long long)eidx, idx);
            break;
        }
        if (term < last_term) {
            error = Py_BuildValue("(sLLL)", "term_low", (long long)eidx, (long long)term, last_term);
            break;
        }
        if (has_max && term > max_term) {
            error = Py_BuildValue("(sLLL)", "term_high", (long long)eidx, (long long)term, max_term);
            break;
        }
        if ((bcrc || echain) && (crc32_update(0, h + HEADER_SIZE, (size_t)bsize) & CRC_MASK) != bcrc) {
            error = Py_BuildValue("(sL)", "crc", (long long)eidx);
            break;
        }
        if ((bcrc || echain) && known_prev && chain_crc(prev, eidx, term, bcrc) != echain) {
            error = Py_BuildValue("(sL)", "chain", (long long)eidx);
            break;
        }
        if ((long long)size + MIN_BLANK_LEN > fsize) {
            error = Py_BuildValue("(sLiL)", "too_big", (long long)eidx, size, fsize);
            break;
        }
        long long rel = write_pos % fsize;
        if (rel < 0)
            rel += fsize;  /* Python's modulo, which the Python lane uses */
        long long expected = (long long)size + MIN_BLANK_LEN <= fsize - rel ? write_pos : write_pos + fsize - rel;
        if (pos != expected) {
            error = Py_BuildValue("(sLLL)", "pos", (long long)eidx, (long long)pos, expected);
            break;
        }
        if (count && pos != write_pos)
            break;  /* the next data file: a new run */
        if (count == cap) {
            unsigned char *grown = PyMem_Realloc(rec, (size_t)cap * 2 * RECORD_SIZE);
            if (grown == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            rec = grown;
            cap *= 2;
        }
        put_record(rec + count * RECORD_SIZE, magic, pos, size, eidx, term);
        PyObject *end = PyLong_FromSsize_t(off + size - seg_off), *t = PyLong_FromLongLong(term);
        int bad = end == NULL || t == NULL || PyList_Append(ends, end) < 0 || PyList_Append(terms, t) < 0;
        Py_XDECREF(end);
        Py_XDECREF(t);
        if (bad)
            goto done;
        if (count == 0)
            first_pos = pos;
        count++;
        idx = eidx;
        last_term = term;
        write_pos = pos + size;
        chain = prev = echain;
        known_prev = 1;
        off += size;
    }
    if (error == NULL && PyErr_Occurred())
        goto done;
    records = PyBytes_FromStringAndSize((const char *)rec, count * RECORD_SIZE);
    if (records == NULL)
        goto done;
    if (count) {
        chain_obj = PyLong_FromLong((int32_t)chain);  /* as the header field reads: a signed int32 */
        if (chain_obj == NULL)
            goto done;
    } else {
        chain_obj = Py_NewRef(Py_None);
    }
    result = Py_BuildValue("nOOOOLO", off, ends, terms, records, chain_obj, first_pos, error ? error : Py_None);
done:
    PyBuffer_Release(&buf);
    PyMem_Free(rec);
    Py_XDECREF(ends);
    Py_XDECREF(terms);
    Py_XDECREF(records);
    Py_XDECREF(chain_obj);
    Py_XDECREF(error);
    return result;
}

PyDoc_STRVAR(run_doc,
"run_headers(buf, off, end, records, r, n, first, base, prev_term, out) -> accepted\n\n"
"The framing checks of store/scan.py's run lane, compiled: the longest prefix of the\n"
"``n`` index records at ``records[r:]`` whose entries lie end to end in ``buf`` from\n"
"``off`` (logical offset ``base + off``; each starting before ``end``), with indexes\n"
"``first``, ``first + 1``, ..., a valid magic, headers equal to their records on magic,\n"
"size, index, term and pos, size == 48 + bodySize, and terms that never go back (from\n"
"``prev_term`` on: the smallest int64 when unknown). Copies each accepted header into ``out`` (48 bytes\n"
"a row) and returns how many it accepted. The checksums are left to the caller.");

static PyObject *lanes_run_headers(PyObject *self, PyObject *args) {
    Py_buffer buf, records, out;
    Py_ssize_t off, end, r, n;
    long long first, base, prev_term;
    if (!PyArg_ParseTuple(args, "y*nny*nnLLLw*:run_headers", &buf, &off, &end, &records, &r, &n, &first, &base,
                          &prev_term, &out))
        return NULL;
    Py_ssize_t done = 0;
    if (off < 0 || r < 0 || n < 0 || r > records.len || n > (records.len - r) / RECORD_SIZE ||
        n > out.len / HEADER_SIZE) {
        PyErr_SetString(PyExc_ValueError, "run_headers: offsets or counts outside the buffers");
        goto finish;
    }
    const unsigned char *p = buf.buf, *rec = (const unsigned char *)records.buf + r;
    unsigned char *o = out.buf;
    long long buflen = buf.len, expect = off, last_term = prev_term;
    Py_BEGIN_ALLOW_THREADS
    for (; done < n; done++) {
        const unsigned char *x = rec + done * RECORD_SIZE;
        if (done + 8 < n) {  /* the header eight entries on: its place is known from its record */
            long long ahead = get64(rec + (done + 8) * RECORD_SIZE + 4) - base;
            if (ahead >= 0 && ahead < buflen)
                __builtin_prefetch(p + ahead);
        }
        int32_t magic = get32(x), size = get32(x + 12);
        long long rel = get64(x + 4) - base;
        if (rel != expect || rel >= end || size < HEADER_SIZE || rel + size > buflen ||
            get64(x + 16) != first + done || magic < 1 || magic > 3)
            break;
        const unsigned char *h = p + rel;
        int64_t term = get64(h + 16);
        int32_t bsize = get32(h + 44);
        if (get32(h) != magic || get32(h + 4) != size || get64(h + 8) != get64(x + 16) || term != get64(x + 24) ||
            get64(h + 24) != get64(x + 4) || bsize < 0 || (long long)size != HEADER_SIZE + (long long)bsize ||
            term < last_term)
            break;
        memcpy(o + done * HEADER_SIZE, h, HEADER_SIZE);
        last_term = term;
        expect = rel + size;
    }
    Py_END_ALLOW_THREADS
finish:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&records);
    PyBuffer_Release(&out);
    return PyErr_Occurred() ? NULL : PyLong_FromSsize_t(done);
}

static PyMethodDef lanes_methods[] = {
    {"crc32", lanes_crc32, METH_VARARGS, "crc32(data, value=0): zlib's CRC-32 of data, continued from value."},
    {"encode_entries", lanes_encode, METH_VARARGS, encode_doc},
    {"encode_packed", lanes_encode_packed, METH_VARARGS, packed_doc},
    {"check_entries", lanes_check, METH_VARARGS, check_doc},
    {"run_headers", lanes_run_headers, METH_VARARGS, run_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef lanes_module = {
    PyModuleDef_HEAD_INIT, "store._lanes", "The file store's per-entry lanes, compiled (see store/_lanes.c).", -1,
    lanes_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__lanes(void) {
    crc_init();
    PyObject *m = PyModule_Create(&lanes_module);
    if (m == NULL)
        return NULL;
#ifdef HAVE_CLMUL_PATH
    if (PyModule_AddIntConstant(m, "CLMUL", have_clmul) < 0 || PyModule_AddIntConstant(m, "VCLMUL", have_vclmul) < 0) {
#else
    if (PyModule_AddIntConstant(m, "CLMUL", 0) < 0 || PyModule_AddIntConstant(m, "VCLMUL", 0) < 0) {
#endif
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
