/* store.rocketmq._columns: the fast path of `mq topics` and `mq check`, compiled.
 *
 * read() fills, for the messages at given offsets of one buffer (a data file's map), the
 * columns store/rocketmq/columns.py's message_columns() returns, without an object per
 * message: in Python that loop is a few microseconds a message, here a fraction of one,
 * most of it the body's CRC. keys() does the same for the index keys of `mq migrate` and
 * `mq rebuild` (columns.py's key_columns(): each topic#key as Java's String.hashCode()). crcs() is
 * DLedger's bodyCrc of many entries at once (columns.py's body_crcs()), which every `mq` reader
 * checks.
 *
 * Rules this module keeps:
 * - It decides nothing the Python loop (columns.py, the reference; tests/rocketmq/test_rocketmq_columns.py
 *   holds the two to the same columns) does not: a message it cannot read plainly (not a
 *   message, a topic or TAGS that is not valid UTF-8) is marked SLOW and left to
 *   message.decode, which says what is wrong or decodes it as Java would.
 * - It never reads outside the buffer: every offset is checked against it first.
 *
 * Message layout (message.py, big-endian): TOTALSIZE i32, MAGICCODE i32, BODYCRC i32,
 * QUEUEID i32, FLAG i32, QUEUEOFFSET i64, PHYSICALOFFSET i64, SYSFLAG i32, BORNTIMESTAMP
 * i64, BORNHOST (8, or 20 with SYSFLAG 0x10), STORETIMESTAMP i64, STOREHOST (8, or 20
 * with 0x20), RECONSUMETIMES i32, PREPAREDTRANSACTIONOFFSET i64, BODYLENGTH i32, BODY,
 * TOPICLENGTH (i8 unsigned here as in message.py; i16 with the V2 magic), TOPIC,
 * PROPERTIESLENGTH i16, PROPERTIES ("name\x01value\x02" ...).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "../_crc32.h"

#define MAGIC_V1 (-626843481)
#define MAGIC_V2 (-626843477)
#define MIN_SIZE 91
#define BORNHOST_V6_FLAG 0x10
#define STOREHOST_V6_FLAG 0x20
#define OK 0
#define SLOW 1

static inline int32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return (int32_t)__builtin_bswap32(v); }
static inline int64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return (int64_t)__builtin_bswap64(v); }
static inline int16_t get16(const unsigned char *p) { uint16_t v; memcpy(&v, p, 2); return (int16_t)__builtin_bswap16(v); }

/* Strict UTF-8 (as Python's decoder: no overlong forms, no surrogates, nothing past
 * U+10FFFF). With `hash`, Java's String.hashCode() of the text (over its UTF-16 units) is
 * folded into *h. Returns 0 when the bytes are not valid UTF-8. */
static int utf8(const unsigned char *p, Py_ssize_t n, uint32_t *h) {
    const unsigned char *end = p + n;
    while (p < end) {
        uint32_t c = *p++;
        if (c >= 0x80) {
            int more;
            uint32_t min;
            if (c >= 0xC2 && c <= 0xDF) { more = 1; min = 0x80; c &= 0x1F; }
            else if (c >= 0xE0 && c <= 0xEF) { more = 2; min = 0x800; c &= 0x0F; }
            else if (c >= 0xF0 && c <= 0xF4) { more = 3; min = 0x10000; c &= 0x07; }
            else return 0;
            if (end - p < more)
                return 0;
            for (int k = 0; k < more; k++) {
                if ((p[k] & 0xC0) != 0x80)
                    return 0;
                c = (c << 6) | (p[k] & 0x3F);
            }
            p += more;
            if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
                return 0;
        }
        if (h != NULL) {
            if (c < 0x10000) {
                *h = 31 * *h + c;
            } else {
                c -= 0x10000;
                *h = 31 * *h + (0xD800 + (c >> 10));
                *h = 31 * *h + (0xDC00 + (c & 0x3FF));
            }
        }
    }
    return 1;
}

/* DELAY's level: an optional '-' and 1 to 9 ASCII digits, else -1 */
static int32_t level_of(const unsigned char *p, Py_ssize_t n) {
    int neg = n > 0 && p[0] == '-';
    if (neg) {
        p++;
        n--;
    }
    if (n < 1 || n > 9)
        return -1;
    int32_t v = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (p[k] < '0' || p[k] > '9')
            return -1;
        v = v * 10 + (p[k] - '0');
    }
    return neg ? -v : v;
}

/* -- topics: interned by their bytes, ids in order of first appearance ------------------ */

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    int32_t id;
} slot;

typedef struct {
    slot *slots;
    size_t cap, used;
    PyObject *names;  /* list of bytes */
} topics;

static uint64_t fnv(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL;
    for (Py_ssize_t k = 0; k < n; k++)
        h = (h ^ p[k]) * 1099511628211ULL;
    return h;
}

/* the id of the topic p[0:n], adding it when new; -1 with an error set on a failure */
static int32_t topic_id(topics *t, const unsigned char *p, Py_ssize_t n) {
    if (2 * (t->used + 1) > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 64;
        slot *s = PyMem_Calloc(cap, sizeof(slot));
        if (s == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        for (size_t k = 0; k < t->cap; k++) {
            if (t->slots[k].p == NULL)
                continue;
            size_t i = fnv(t->slots[k].p, t->slots[k].n) & (cap - 1);
            while (s[i].p != NULL)
                i = (i + 1) & (cap - 1);
            s[i] = t->slots[k];
        }
        PyMem_Free(t->slots);
        t->slots = s;
        t->cap = cap;
    }
    size_t i = fnv(p, n) & (t->cap - 1);
    while (t->slots[i].p != NULL) {
        if (t->slots[i].n == n && memcmp(t->slots[i].p, p, (size_t)n) == 0)
            return t->slots[i].id;
        i = (i + 1) & (t->cap - 1);
    }
    PyObject *name = PyBytes_FromStringAndSize((const char *)p, n);
    if (name == NULL || PyList_Append(t->names, name) < 0) {
        Py_XDECREF(name);
        return -1;
    }
    Py_DECREF(name);
    /* (the slot keeps pointing into the buffer, which outlives the call) */
    t->slots[i].p = p;
    t->slots[i].n = n;
    t->slots[i].id = (int32_t)t->used++;
    return t->slots[i].id;
}

/* -- one message ------------------------------------------------------------------------- */

typedef struct {
    int64_t size, queue_offset, phy, store_ts, tags;
    int32_t queue_id, sys_flag, topic, delay;
    int crc_ok;
} row;

/* The values of the last pair named `a` and of the last named `b` (each with a name and a
 * value, as message.parse_properties keeps them) among the properties p[0:stop - p]; NULL
 * when there is none. */
static void pairs(const unsigned char *p, const unsigned char *stop, const char *a, Py_ssize_t an,
                  const unsigned char **av, Py_ssize_t *avn, const char *b, Py_ssize_t bn,
                  const unsigned char **bv, Py_ssize_t *bvn) {
    *av = *bv = NULL;
    *avn = *bvn = 0;
    while (p <= stop) {
        const unsigned char *sep = memchr(p, 0x02, (size_t)(stop - p));
        const unsigned char *pair_end = sep ? sep : stop;
        const unsigned char *eq = memchr(p, 0x01, (size_t)(pair_end - p));
        if (eq != NULL && eq > p && eq + 1 < pair_end) {
            Py_ssize_t name_n = eq - p;
            if (name_n == an && memcmp(p, a, (size_t)an) == 0) {
                *av = eq + 1;
                *avn = pair_end - *av;
            } else if (name_n == bn && memcmp(p, b, (size_t)bn) == 0) {
                *bv = eq + 1;
                *bvn = pair_end - *bv;
            }
        }
        if (sep == NULL)
            break;
        p = sep + 1;
    }
}

/* Where a message's parts lie, when the bytes are one as message.decode reads it */
typedef struct {
    int32_t size, magic, sys_flag;
    uint32_t bcrc;
    const unsigned char *m, *stop, *store_host, *body, *topic, *props;
    Py_ssize_t body_len, topic_len, props_len;
} parts;

/* 1 with *q filled when b[off:off + n] is one message (decode would take it), else 0 */
static int parse(const unsigned char *b, Py_ssize_t blen, int64_t off, int64_t n, parts *q) {
    if (off < 0 || n < MIN_SIZE || off > blen || n > blen - off)
        return 0;
    const unsigned char *m = b + off, *stop = m + n;
    q->size = get32(m);
    q->magic = get32(m + 4);
    if ((q->magic != MAGIC_V1 && q->magic != MAGIC_V2) || q->size != n)
        return 0;
    q->m = m;
    q->stop = stop;
    q->bcrc = (uint32_t)get32(m + 8);
    q->sys_flag = get32(m + 36);
    const unsigned char *p = m + 48 + ((q->sys_flag & BORNHOST_V6_FLAG) ? 20 : 8);
    if (stop - p < 8)
        return 0;
    q->store_host = p + 8;  /* (after STORETIMESTAMP) */
    p = q->store_host + ((q->sys_flag & STOREHOST_V6_FLAG) ? 20 : 8);
    if (stop - p < 16)
        return 0;
    q->body_len = get32(p + 12);
    q->body = p + 16;
    if (q->body_len < 0 || q->body_len > stop - q->body)
        return 0;
    p = q->body + q->body_len;
    if (q->magic == MAGIC_V2) {
        if (stop - p < 2)
            return 0;
        q->topic_len = get16(p);
        p += 2;
    } else {
        if (stop - p < 1)
            return 0;
        q->topic_len = *p++;
    }
    if (q->topic_len < 0 || q->topic_len + 2 > stop - p)
        return 0;
    q->topic = p;
    p += q->topic_len;
    q->props_len = get16(p);
    q->props = p + 2;
    return q->props_len >= 0 && q->props_len == stop - q->props;
}

/* OK with *r filled, SLOW, or -1 with an error set */
static int one(const unsigned char *b, Py_ssize_t blen, int64_t off, int64_t n, int crc, topics *t, row *r) {
    parts q;
    if (!parse(b, blen, off, n, &q))
        return SLOW;
    r->size = q.size;
    r->queue_id = get32(q.m + 12);
    r->queue_offset = get64(q.m + 20);
    r->phy = get64(q.m + 28);
    r->sys_flag = q.sys_flag;
    r->store_ts = get64(q.store_host - 8);
    const unsigned char *topic = q.topic, *p = q.props, *stop = q.stop, *body = q.body;
    Py_ssize_t topic_len = q.topic_len, body_len = q.body_len;
    uint32_t bcrc = q.bcrc;
    if (!utf8(topic, topic_len, NULL))
        return SLOW;
    /* TAGS and DELAY: the last pair of each name with a name and a value */
    const unsigned char *tags, *delay;
    Py_ssize_t tags_n, delay_n;
    pairs(p, stop, "TAGS", 4, &tags, &tags_n, "DELAY", 5, &delay, &delay_n);
    uint32_t h = 0;
    if (tags != NULL && !utf8(tags, tags_n, &h))
        return SLOW;
    r->tags = (int32_t)h;
    r->delay = delay != NULL ? level_of(delay, delay_n) : -1;
    r->crc_ok = !crc || (crc32_update(0, body, (size_t)body_len) & 0x7FFFFFFFu) == bcrc;
    r->topic = topic_id(t, topic, topic_len);
    return r->topic < 0 ? -1 : OK;
}

static const char read_doc[] =
    "read(buf, offsets, lengths, crc, status, size, queue_id, queue_offset, phy, sys_flag, store_ts, topic,\n"
    "     tags, delay, crc_ok) -> topics\n\n"
    "Fill the column arrays (int8, int64, int32, int64, int64, int32, int64, int32, int64, int32, bool)\n"
    "for the messages at buf[offsets[k]:offsets[k] + lengths[k]] (int64 arrays); topics: the list\n"
    "of topic bytes that the topic column's ids index. See store/rocketmq/columns.py.";

#define NCOLS 11
#define PREFETCH 8  /* messages ahead whose cache lines are asked for (they lie a body apart) */

static PyObject *columns_read(PyObject *self, PyObject *args) {
    Py_buffer buf, offs, lens, col[NCOLS];
    int crc;
    static const Py_ssize_t width[NCOLS] = {1, 8, 4, 8, 8, 4, 8, 4, 8, 4, 1};
    memset(col, 0, sizeof(col));
    if (!PyArg_ParseTuple(args, "y*y*y*pw*w*w*w*w*w*w*w*w*w*w*:read", &buf, &offs, &lens, &crc, &col[0], &col[1],
                          &col[2], &col[3], &col[4], &col[5], &col[6], &col[7], &col[8], &col[9], &col[10]))
        return NULL;
    PyObject *result = NULL;
    topics t = {NULL, 0, 0, PyList_New(0)};
    Py_ssize_t count = offs.len / 8;
    if (t.names == NULL)
        goto done;
    if (lens.len != offs.len || offs.len % 8) {
        PyErr_SetString(PyExc_ValueError, "offsets and lengths must be int64 arrays of one length");
        goto done;
    }
    for (int c = 0; c < NCOLS; c++) {
        if (col[c].len != count * width[c]) {
            PyErr_Format(PyExc_ValueError, "column %d holds %zd bytes, not %zd", c, col[c].len, count * width[c]);
            goto done;
        }
    }
    const int64_t *o = offs.buf, *l = lens.buf;
    const unsigned char *b = buf.buf;
    for (Py_ssize_t k = 0; k < count; k++) {
        row r;
        if (k + PREFETCH < count) {  /* the head and the tail (topic, properties) of a message ahead */
            int64_t po = o[k + PREFETCH], pl = l[k + PREFETCH];
            if (po >= 0 && pl > 0 && po < buf.len && pl <= buf.len - po) {
                __builtin_prefetch(b + po);
                __builtin_prefetch(b + po + pl - 1);
            }
        }
        int got = one(buf.buf, buf.len, o[k], l[k], crc, &t, &r);
        if (got < 0)
            goto done;
        ((int8_t *)col[0].buf)[k] = (int8_t)got;
        if (got != OK)
            continue;
        ((int64_t *)col[1].buf)[k] = r.size;
        ((int32_t *)col[2].buf)[k] = r.queue_id;
        ((int64_t *)col[3].buf)[k] = r.queue_offset;
        ((int64_t *)col[4].buf)[k] = r.phy;
        ((int32_t *)col[5].buf)[k] = r.sys_flag;
        ((int64_t *)col[6].buf)[k] = r.store_ts;
        ((int32_t *)col[7].buf)[k] = r.topic;
        ((int64_t *)col[8].buf)[k] = r.tags;
        ((int32_t *)col[9].buf)[k] = r.delay;
        ((uint8_t *)col[10].buf)[k] = (uint8_t)r.crc_ok;
    }
    result = t.names;
    t.names = NULL;
done:
    Py_XDECREF(t.names);
    PyMem_Free(t.slots);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&lens);
    for (int c = 0; c < NCOLS; c++)
        if (col[c].obj != NULL)
            PyBuffer_Release(&col[c]);
    return result;
}

static const char keys_doc[] =
    "keys(buf, offsets, lengths, count, store_ts, uniq_at, uniq_len) -> hashes\n\n"
    "The index keys IndexService.buildIndex puts for each message at buf[offsets[k]:offsets[k] +\n"
    "lengths[k]] (index.py's message_keys: topic#UNIQ_KEY, then topic#k for each k of KEYS split at\n"
    "spaces; none for a rollback), as Java's String.hashCode() of each (int32, native order, in\n"
    "bytes): count[k] (int32) says how many are the message's, -1 when it is not a message or its\n"
    "topic, UNIQ_KEY or KEYS is not plain UTF-8 (left to message.decode); store_ts[k] (int64) its\n"
    "STORETIMESTAMP; uniq_at[k] (int64) and uniq_len[k] (int32) where its UNIQ_KEY's bytes lie in\n"
    "buf (-1 without one). See columns.py.";

#define ROLLBACK 0xC  /* MessageSysFlag.TRANSACTION_ROLLBACK_TYPE */

typedef struct {
    int32_t *h;
    Py_ssize_t n, cap;
} hashes;

static int push(hashes *o, uint32_t h) {
    if (o->n == o->cap) {
        Py_ssize_t cap = o->cap ? 2 * o->cap : 1024;
        int32_t *g = PyMem_Realloc(o->h, (size_t)cap * sizeof(int32_t));
        if (g == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        o->h = g;
        o->cap = cap;
    }
    o->h[o->n++] = (int32_t)h;
    return 0;
}

/* one message's keys pushed; their count, -1 when left to Python, -2 on an error set */
static int keys_of(const parts *q, const unsigned char *uniq, Py_ssize_t uniq_n, const unsigned char *keys,
                   Py_ssize_t keys_n, hashes *o) {
    uint32_t ht = 0;
    if (!utf8(q->topic, q->topic_len, &ht) || (uniq != NULL && !utf8(uniq, uniq_n, NULL)) ||
        (keys != NULL && !utf8(keys, keys_n, NULL)))
        return -1;
    if ((q->sys_flag & ROLLBACK) == ROLLBACK)
        return 0;
    ht = 31 * ht + '#';
    int count = 0;
    if (uniq != NULL) {
        uint32_t h = ht;
        utf8(uniq, uniq_n, &h);
        if (push(o, h) < 0)
            return -2;
        count++;
    }
    const unsigned char *p = keys, *end = keys + keys_n;
    while (keys != NULL && p < end) {
        const unsigned char *sp = memchr(p, ' ', (size_t)(end - p));
        const unsigned char *stop = sp ? sp : end;
        if (stop > p) {
            uint32_t h = ht;
            utf8(p, stop - p, &h);
            if (push(o, h) < 0)
                return -2;
            count++;
        }
        p = stop + 1;
    }
    return count;
}

static PyObject *columns_keys(PyObject *self, PyObject *args) {
    Py_buffer buf, offs, lens, count, store_ts, uniq_at, uniq_len;
    if (!PyArg_ParseTuple(args, "y*y*y*w*w*w*w*:keys", &buf, &offs, &lens, &count, &store_ts, &uniq_at, &uniq_len))
        return NULL;
    PyObject *result = NULL;
    hashes o = {NULL, 0, 0};
    Py_ssize_t n = offs.len / 8;
    if (lens.len != offs.len || offs.len % 8 || count.len != n * 4 || store_ts.len != n * 8 || uniq_at.len != n * 8 ||
        uniq_len.len != n * 4) {
        PyErr_SetString(PyExc_ValueError, "offsets, lengths (int64), count (int32), store_ts, uniq_at (int64) and "
                                          "uniq_len (int32) must be arrays of one length");
        goto done;
    }
    const int64_t *o_ = offs.buf, *l_ = lens.buf;
    const unsigned char *b = buf.buf;
    int32_t *cnt = count.buf, *ulen = uniq_len.buf;
    int64_t *uat = uniq_at.buf, *ts = store_ts.buf;
    for (Py_ssize_t k = 0; k < n; k++) {
        parts q;
        if (k + PREFETCH < n) {  /* the head and the tail (topic, properties) of a message ahead */
            int64_t po = o_[k + PREFETCH], pl = l_[k + PREFETCH];
            if (po >= 0 && pl > 0 && po < buf.len && pl <= buf.len - po) {
                __builtin_prefetch(b + po);
                __builtin_prefetch(b + po + pl - 1);
            }
        }
        cnt[k] = -1;
        ts[k] = 0;
        uat[k] = -1;
        ulen[k] = 0;
        if (!parse(b, buf.len, o_[k], l_[k], &q))
            continue;
        const unsigned char *uniq, *keys;
        Py_ssize_t uniq_n, keys_n;
        pairs(q.props, q.stop, "UNIQ_KEY", 8, &uniq, &uniq_n, "KEYS", 4, &keys, &keys_n);
        Py_ssize_t mark = o.n;
        int got = keys_of(&q, uniq, uniq_n, keys, keys_n, &o);
        if (got == -2)
            goto done;
        if (got < 0) {
            o.n = mark;
            continue;
        }
        cnt[k] = got;
        ts[k] = get64(q.store_host - 8);
        if (uniq != NULL) {
            uat[k] = uniq - b;
            ulen[k] = (int32_t)uniq_n;
        }
    }
    result = PyBytes_FromStringAndSize((const char *)o.h, o.n * (Py_ssize_t)sizeof(int32_t));
done:
    PyMem_Free(o.h);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&lens);
    PyBuffer_Release(&count);
    PyBuffer_Release(&store_ts);
    PyBuffer_Release(&uniq_at);
    PyBuffer_Release(&uniq_len);
    return result;
}

static const char units_doc[] =
    "units(phy, topic, queue_id, queue_offset, size, tags, delay, store_ts, units, first, tid, qid, first_phy,\n"
    "      last_phy, covered) -> (before, flagged)\n\n"
    "One consume queue's units (``units``: 20-byte records, offset i64, size i32, tag code i64 in\n"
    "the machine's byte order, consumequeue.UNIT_NATIVE; the first one's queue offset ``first``; its topic id ``tid`` and queue id ``qid``)\n"
    "against the messages' columns (phy increasing; int64, int32, int32, int64, int64, int64, bool,\n"
    "int64), as check.py's check_queues does with numpy: marks each message a unit points at in\n"
    "``covered`` (bool), counts the units pointing before ``first_phy`` and returns the others\n"
    "that are findings, as (k, code, message) with code 0 past ``last_phy``, 1 where no message\n"
    "starts, 2 at a message that differs.";

#define UNIT_SIZE 20

static PyObject *columns_units(PyObject *self, PyObject *args) {
    Py_buffer col[8], units, covered;
    long long first, first_phy, last_phy;
    int tid, qid;
    static const Py_ssize_t width[8] = {8, 4, 4, 8, 8, 8, 1, 8};
    memset(col, 0, sizeof(col));
    memset(&units, 0, sizeof(units));
    memset(&covered, 0, sizeof(covered));
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*LiiLLw*:units", &col[0], &col[1], &col[2], &col[3], &col[4],
                          &col[5], &col[6], &col[7], &units, &first, &tid, &qid, &first_phy, &last_phy, &covered))
        return NULL;
    PyObject *result = NULL, *flagged = PyList_New(0);
    Py_ssize_t m = col[0].len / 8, n = units.len / UNIT_SIZE;
    long long before = 0;
    if (flagged == NULL)
        goto done;
    for (int c = 0; c < 8; c++) {
        if (col[c].len != m * width[c]) {
            PyErr_Format(PyExc_ValueError, "column %d holds %zd bytes, not %zd", c, col[c].len, m * width[c]);
            goto done;
        }
    }
    if (covered.len != m || units.len % UNIT_SIZE) {
        PyErr_SetString(PyExc_ValueError, "covered must have one byte a message, units whole records");
        goto done;
    }
    const int64_t *phy = col[0].buf, *qoff = col[3].buf, *size = col[4].buf, *tags = col[5].buf,
                  *store_ts = col[7].buf;
    const int32_t *topic = col[1].buf, *queue_id = col[2].buf;
    const uint8_t *delay = col[6].buf;
    uint8_t *cov = covered.buf;
    const unsigned char *u = units.buf;
    Py_ssize_t lo = 0;  /* units are mostly increasing: each search starts at the last one's answer */
    for (Py_ssize_t k = 0; k < n; k++, u += UNIT_SIZE) {
        int64_t p, got_tags;
        int32_t usize;
        memcpy(&p, u, 8);
        memcpy(&usize, u + 8, 4);
        memcpy(&got_tags, u + 12, 8);
        if (lo > 0 && phy[lo - 1] >= p)
            lo = 0;
        /* gallop from lo (everything before it is below p), then halve */
        Py_ssize_t hi = lo, step = 1;
        while (hi < m && phy[hi] < p) {
            lo = hi + 1;
            hi = lo + step;
            step *= 2;
        }
        if (hi > m)
            hi = m;
        while (lo < hi) {
            Py_ssize_t mid = lo + (hi - lo) / 2;
            if (phy[mid] < p)
                lo = mid + 1;
            else
                hi = mid;
        }
        Py_ssize_t at = lo;
        int code;
        if (at < m && phy[at] == p) {
            cov[at] = 1;
            int tags_ok = tags[at] == got_tags || (delay[at] && got_tags >= store_ts[at]);
            if (topic[at] == tid && queue_id[at] == qid && qoff[at] == first + k && size[at] == usize && tags_ok)
                continue;
            code = 2;
        } else if (p < first_phy) {
            before++;
            continue;
        } else {
            code = p > last_phy ? 0 : 1;
        }
        PyObject *f = Py_BuildValue("(nin)", k, code, at < m ? at : m - 1);
        if (f == NULL || PyList_Append(flagged, f) < 0) {
            Py_XDECREF(f);
            goto done;
        }
        Py_DECREF(f);
    }
    result = Py_BuildValue("(LO)", before, flagged);
done:
    Py_XDECREF(flagged);
    for (int c = 0; c < 8; c++)
        if (col[c].obj != NULL)
            PyBuffer_Release(&col[c]);
    if (units.obj != NULL)
        PyBuffer_Release(&units);
    if (covered.obj != NULL)
        PyBuffer_Release(&covered);
    return result;
}

static const char crcs_doc[] =
    "crcs(buf, offsets, lengths, out)\n\n"
    "out[k] (uint32) = zlib's crc32 of buf[offsets[k]:offsets[k] + lengths[k]] & 0x7fffffff (int64 arrays),\n"
    "as DLedger's bodyCrc (store/format.py); 0xffffffff where the range lies outside buf (no bodyCrc is).\n"
    "See store/rocketmq/columns.py's body_crcs.";

static PyObject *columns_crcs(PyObject *self, PyObject *args) {
    Py_buffer buf, offs, lens, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*:crcs", &buf, &offs, &lens, &out))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = offs.len / 8;
    if (lens.len != offs.len || offs.len % 8 || out.len != count * 4) {
        PyErr_SetString(PyExc_ValueError, "offsets and lengths must be int64 arrays of one length, out uint32");
        goto done;
    }
    const int64_t *o = offs.buf, *l = lens.buf;
    uint32_t *r = out.buf;
    const unsigned char *b = buf.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < count; k++) {
        if (o[k] < 0 || l[k] < 0 || o[k] > buf.len || l[k] > buf.len - o[k])
            r[k] = 0xFFFFFFFFu;
        else
            r[k] = crc32_update(0, b + o[k], (size_t)l[k]) & 0x7FFFFFFFu;
    }
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&offs);
    PyBuffer_Release(&lens);
    PyBuffer_Release(&out);
    return result;
}

static PyMethodDef columns_methods[] = {
    {"crcs", columns_crcs, METH_VARARGS, crcs_doc},
    {"read", columns_read, METH_VARARGS, read_doc},
    {"units", columns_units, METH_VARARGS, units_doc},
    {"keys", columns_keys, METH_VARARGS, keys_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef columns_module = {
    PyModuleDef_HEAD_INIT, "store.rocketmq._columns",
    "The columns of mq topics and mq check, compiled (see store/rocketmq/_columns.c).", -1, columns_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__columns(void) {
    crc_init();
    return PyModule_Create(&columns_module);
}
