/* store._flusher: a thread of its own that makes a node's writes durable.
 *
 * A node flushes every few milliseconds (flush=async) or before it acknowledges
 * (flush=sync, group commit). The jobs are store.files.SyncJob tuples from the store's
 * take_dirty: fdatasync a duplicate fd, then advise the kernel to drop the now clean
 * pages of a range, then close the fd. store.files.sync_fds does the same in Python, in a
 * pool thread; that way every flush wakes a pool thread through a queue and a lock, the
 * thread takes the interpreter lock twice (around the syscalls and to hand back its
 * result), and the loop is woken through call_soon_threadsafe. With the loop busy in
 * Python, benchmarks/bench_flush.py measured 1.2-1.8 ms of CPU per flush outside the loop
 * thread that way, and 0.12-0.14 ms with this thread; a node flushes 100 times a second.
 *
 * This thread never takes the interpreter lock: submit() copies the jobs into C, the
 * thread runs them, and writes to an eventfd that the loop watches (fileno()); collect()
 * then says how the flush went.
 *
 * Rules this module keeps (those of sync_fds):
 * - every fd of a flush is closed, whatever fails;
 * - a range is dropped from the page cache only after its file synced without error
 *   (dropping is advice: the kernel drops only clean pages, so no byte can be lost);
 * - the first error's errno is what collect() reports.
 * One flush at a time: submit() refuses a second before the first is collected.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
    int fd;
    int sync;
    long long lo, hi;
} job_t;

typedef struct {
    PyObject_HEAD
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int efd;         /* the thread writes 1 here when a flush is done */
    int running;     /* the thread was started and not joined */
    int stopping;
    int state;       /* 0 idle, 1 submitted, 2 done (not collected) */
    int error;       /* errno of the first failure of the last flush, 0 if none */
    job_t *jobs;
    Py_ssize_t njobs;
} Flusher;

static void run_jobs(Flusher *self, job_t *jobs, Py_ssize_t n, int *error) {
    for (Py_ssize_t i = 0; i < n; i++) {
        int failed = 0;
        if (jobs[i].sync && fdatasync(jobs[i].fd) != 0) {
            failed = 1;
            if (!*error)
                *error = errno ? errno : EIO;
        }
        if (!failed && jobs[i].hi > jobs[i].lo)
            (void)posix_fadvise(jobs[i].fd, (off_t)jobs[i].lo, (off_t)(jobs[i].hi - jobs[i].lo), POSIX_FADV_DONTNEED);
        close(jobs[i].fd);
    }
}

static void *flusher_main(void *arg) {
    Flusher *self = (Flusher *)arg;
    pthread_mutex_lock(&self->mu);
    for (;;) {
        while (!self->stopping && self->state != 1)
            pthread_cond_wait(&self->cv, &self->mu);
        if (self->state != 1)  /* stopping, nothing submitted */
            break;
        job_t *jobs = self->jobs;
        Py_ssize_t n = self->njobs;
        pthread_mutex_unlock(&self->mu);
        int error = 0;
        run_jobs(self, jobs, n, &error);
        pthread_mutex_lock(&self->mu);
        free(self->jobs);
        self->jobs = NULL;
        self->njobs = 0;
        self->error = error;
        self->state = 2;
        uint64_t one = 1;
        while (write(self->efd, &one, sizeof one) < 0 && errno == EINTR)
            ;
    }
    pthread_mutex_unlock(&self->mu);
    return NULL;
}

static int Flusher_init(Flusher *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "", kwlist))
        return -1;
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "Flusher is already started");
        return -1;
    }
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    int rc = pthread_create(&self->thread, NULL, flusher_main, self);
    if (rc != 0) {
        close(self->efd);
        self->efd = -1;
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->running = 1;
    return 0;
}

/* submit(jobs): start flushing ``jobs`` (a sequence of (fd, sync, lo, hi)). From here on
 * the fds are the flusher's: it closes them, also when submit fails after taking them. */
static PyObject *Flusher_submit(Flusher *self, PyObject *arg) {
    if (!self->running || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "Flusher is closed");
        return NULL;
    }
    if (self->state != 0) {
        PyErr_SetString(PyExc_RuntimeError, "a flush is in progress (collect() it first)");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(arg, "jobs must be a sequence of (fd, sync, lo, hi)");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    job_t *jobs = calloc(n ? (size_t)n : 1, sizeof(job_t));
    if (jobs == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        int fd, sync;
        long long lo, hi;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "ipLL", &fd, &sync, &lo, &hi)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "a job is a tuple (fd, sync, lo, hi)");
            for (Py_ssize_t k = 0; k < i; k++)  /* the fds taken so far are closed, as promised */
                close(jobs[k].fd);
            free(jobs);
            Py_DECREF(seq);
            return NULL;
        }
        jobs[i].fd = fd;
        jobs[i].sync = sync;
        jobs[i].lo = lo;
        jobs[i].hi = hi;
    }
    Py_DECREF(seq);
    pthread_mutex_lock(&self->mu);
    self->jobs = jobs;
    self->njobs = n;
    self->error = 0;
    self->state = 1;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_RETURN_NONE;
}

/* collect(): -1 while the flush submitted last is still running (or none was); else the
 * errno of its first failure (0: every file synced), and the flusher takes a new one. */
static PyObject *Flusher_collect(Flusher *self, PyObject *Py_UNUSED(ignored)) {
    uint64_t count;
    if (self->efd >= 0)
        while (read(self->efd, &count, sizeof count) < 0 && errno == EINTR)
            ;
    int out = -1;
    pthread_mutex_lock(&self->mu);
    if (self->state == 2) {
        out = self->error;
        self->state = 0;
    }
    pthread_mutex_unlock(&self->mu);
    return PyLong_FromLong(out);
}

static PyObject *Flusher_fileno(Flusher *self, PyObject *Py_UNUSED(ignored)) {
    if (self->efd < 0) {
        PyErr_SetString(PyExc_ValueError, "Flusher is closed");
        return NULL;
    }
    return PyLong_FromLong(self->efd);
}

static void stop_thread(Flusher *self) {
    if (!self->running)
        return;
    pthread_mutex_lock(&self->mu);
    self->stopping = 1;
    pthread_cond_signal(&self->cv);
    pthread_mutex_unlock(&self->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);  /* a flush under way is finished first */
    Py_END_ALLOW_THREADS
    self->running = 0;
}

/* close(): finish a flush under way, stop the thread, close the eventfd. */
static PyObject *Flusher_close(Flusher *self, PyObject *Py_UNUSED(ignored)) {
    stop_thread(self);
    if (self->efd >= 0) {
        close(self->efd);
        self->efd = -1;
    }
    Py_RETURN_NONE;
}

static PyObject *Flusher_busy(Flusher *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->state != 0);
}

static PyObject *Flusher_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Flusher *self = (Flusher *)type->tp_alloc(type, 0);
    if (self != NULL)
        self->efd = -1;
    return (PyObject *)self;
}

static void Flusher_dealloc(Flusher *self) {
    stop_thread(self);
    if (self->efd >= 0)
        close(self->efd);
    if (self->jobs != NULL) {  /* submitted, never run: the thread stopped first */
        for (Py_ssize_t k = 0; k < self->njobs; k++)
            close(self->jobs[k].fd);
        free(self->jobs);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Flusher_methods[] = {
    {"submit", (PyCFunction)Flusher_submit, METH_O,
     "submit(jobs): flush (fd, sync, lo, hi) jobs in the flusher's thread; the fds become its to close."},
    {"collect", (PyCFunction)Flusher_collect, METH_NOARGS,
     "collect() -> -1 while the last flush runs, else the errno of its first failure (0: all synced)."},
    {"fileno", (PyCFunction)Flusher_fileno, METH_NOARGS, "fileno() -> the eventfd that turns readable when a flush is done."},
    {"close", (PyCFunction)Flusher_close, METH_NOARGS, "close(): finish a flush under way and stop the thread."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Flusher_getset[] = {
    {"busy", (getter)Flusher_busy, NULL, "True from submit() until collect() has reported it.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject FlusherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "store._flusher.Flusher",
    .tp_basicsize = sizeof(Flusher),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread that runs store.files.SyncJob lists without the interpreter lock (see store/_flusher.c).",
    .tp_new = Flusher_new,
    .tp_init = (initproc)Flusher_init,
    .tp_dealloc = (destructor)Flusher_dealloc,
    .tp_methods = Flusher_methods,
    .tp_getset = Flusher_getset,
};

static struct PyModuleDef flusher_module = {
    PyModuleDef_HEAD_INIT, "store._flusher", "A flush thread that never takes the interpreter lock (see store/_flusher.c).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__flusher(void) {
    if (PyType_Ready(&FlusherType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&flusher_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&FlusherType);
    if (PyModule_AddObject(m, "Flusher", (PyObject *)&FlusherType) < 0) {
        Py_DECREF(&FlusherType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
