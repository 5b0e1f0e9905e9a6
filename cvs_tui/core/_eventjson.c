/* The events.jsonl line of a parsed step, in C (cvs_tui/core/bus.py's fast path, which it stands for).
 *
 * At hundreds of nodes a live run writes one events.jsonl line per logged step per node, and building
 * that text was the largest part of the core's CPU per line. encode_step() writes exactly what the
 * general encoder (json, allow_nan, ensure_ascii) writes for a NodeLogEvent holding a StepEvent, or
 * returns None for any value of another type than the parser makes (bus.py then uses the general
 * encoder). tests/watch_sources/test_bus.py holds the two equal on every event type and on generated steps.
 *
 * Numbers: an exact float as float.__repr__ (PyOS_double_to_string 'r' with ".0" added, which is what
 * float.__repr__ calls), NaN/Infinity/-Infinity as json writes them; an exact int as int.__repr__;
 * None as null. Strings (a str or a str enum such as StepKind) through the json module's own
 * encode_basestring_ascii, passed in by configure(); the texts of the few distinct kinds, sources and
 * extras keys are kept in a small cache.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

static PyObject *escape_fn = NULL;  /* json.encoder.encode_basestring_ascii */
static PyObject *text_cache = NULL; /* str -> its JSON text */
#define TEXT_CACHE_MAX 4096

static PyObject *n_step, *n_loss, *n_line, *n_kind, *n_seconds, *n_tflops, *n_tokens, *n_weights,
    *n_slices, *n_extras, *n_timestamp, *n_source;

typedef struct {
    char *p;
    Py_ssize_t len, cap;
    char small[1024];
} Buf;

static int buf_put(Buf *b, const char *s, Py_ssize_t n) {
    if (b->len + n > b->cap) {
        Py_ssize_t cap = (b->cap + n) * 2;
        char *q = PyMem_Malloc((size_t)cap);
        if (q == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(q, b->p, (size_t)b->len);
        if (b->p != b->small) PyMem_Free(b->p);
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, (size_t)n);
    b->len += n;
    return 0;
}

static int buf_lit(Buf *b, const char *s) { return buf_put(b, s, (Py_ssize_t)strlen(s)); }

/* an ASCII str (what the escape function and int.__repr__ return) */
static int buf_ascii(Buf *b, PyObject *s) {
    Py_ssize_t n;
    const char *c = PyUnicode_AsUTF8AndSize(s, &n);
    return c == NULL ? -1 : buf_put(b, c, n);
}

/* 1: written; 0: not a number the fast path writes; -1: error */
static int put_num(Buf *b, PyObject *x) {
    if (PyFloat_CheckExact(x)) {
        double v = PyFloat_AS_DOUBLE(x);
        if (isnan(v)) return buf_lit(b, "NaN") ? -1 : 1;
        if (isinf(v)) return buf_lit(b, v > 0 ? "Infinity" : "-Infinity") ? -1 : 1;
        char *s = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (s == NULL) return -1;
        int rc = buf_lit(b, s);
        PyMem_Free(s);
        return rc ? -1 : 1;
    }
    if (x == Py_None) return buf_lit(b, "null") ? -1 : 1;
    if (PyLong_CheckExact(x)) {
        PyObject *r = PyObject_Repr(x);
        if (r == NULL) return -1;
        int rc = buf_ascii(b, r);
        Py_DECREF(r);
        return rc ? -1 : 1;
    }
    return 0;
}

/* 1: written; 0: not a str (nor None when none_ok); -1: error */
static int put_text(Buf *b, PyObject *x, int none_ok) {
    if (x == Py_None && none_ok) return buf_lit(b, "null") ? -1 : 1;
    if (!PyUnicode_Check(x)) return 0;
    PyObject *t = PyDict_GetItemWithError(text_cache, x); /* borrowed */
    if (t == NULL) {
        if (PyErr_Occurred()) return -1;
        t = PyObject_CallOneArg(escape_fn, x);
        if (t == NULL) return -1;
        int rc = 0;
        if (PyDict_GET_SIZE(text_cache) < TEXT_CACHE_MAX) rc = PyDict_SetItem(text_cache, x, t);
        int w = rc ? -1 : buf_ascii(b, t);
        Py_DECREF(t);
        return w ? -1 : 1;
    }
    return buf_ascii(b, t) ? -1 : 1;
}

/* one field: `"name": value`, the value read off the event */
static int field(Buf *b, PyObject *ev, PyObject *name, const char *label, int text) {
    PyObject *v = PyObject_GetAttr(ev, name);
    if (v == NULL) return -1;
    int rc = buf_lit(b, label);
    if (rc == 0) rc = text ? put_text(b, v, 1) : put_num(b, v);
    else rc = -1;
    Py_DECREF(v);
    return rc;
}

static int put_extras(Buf *b, PyObject *ev) {
    PyObject *d = PyObject_GetAttr(ev, n_extras);
    if (d == NULL) return -1;
    int rc = 1;
    if (!PyDict_CheckExact(d)) {
        rc = 0;
    } else if (buf_lit(b, ", \"extras\": {")) {
        rc = -1;
    } else {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        int first = 1;
        while (rc == 1 && PyDict_Next(d, &pos, &k, &v)) {
            if (!PyUnicode_CheckExact(k)) {
                rc = 0;
                break;
            }
            if (!first && buf_lit(b, ", ")) rc = -1;
            first = 0;
            if (rc == 1) rc = put_text(b, k, 0);
            if (rc == 1 && buf_lit(b, ": ")) rc = -1;
            if (rc == 1) rc = put_num(b, v);
        }
        if (rc == 1 && buf_lit(b, "}")) rc = -1;
    }
    Py_DECREF(d);
    return rc;
}

/* encode_step(head, step_event) -> str | None; head is `{"run": ..., "node": N, "event": {"step": ` */
static PyObject *encode_step(PyObject *self, PyObject *args) {
    PyObject *head, *ev;
    if (!PyArg_ParseTuple(args, "UO", &head, &ev)) return NULL;
    if (escape_fn == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_eventjson.configure() was not called");
        return NULL;
    }
    Buf b = {.len = 0, .cap = (Py_ssize_t)sizeof(b.small)};
    b.p = b.small;
    int rc = buf_ascii(&b, head) ? -1 : 1;
    /* the field order of StepEvent (tests/watch_sources/test_bus.py fails on a changed dataclass) */
    if (rc == 1) rc = field(&b, ev, n_step, "", 0);
    if (rc == 1) rc = field(&b, ev, n_loss, ", \"loss\": ", 0);
    if (rc == 1) rc = field(&b, ev, n_line, ", \"line\": ", 0);
    if (rc == 1) rc = field(&b, ev, n_kind, ", \"kind\": ", 1);
    if (rc == 1) rc = field(&b, ev, n_seconds, ", \"seconds\": ", 0);
    if (rc == 1) rc = field(&b, ev, n_tflops, ", \"tflops_per_device\": ", 0);
    if (rc == 1) rc = field(&b, ev, n_tokens, ", \"tokens_per_device\": ", 0);
    if (rc == 1) rc = field(&b, ev, n_weights, ", \"total_weights\": ", 0);
    if (rc == 1) rc = field(&b, ev, n_slices, ", \"live_slices\": ", 0);
    if (rc == 1) rc = put_extras(&b, ev);
    if (rc == 1) rc = field(&b, ev, n_timestamp, ", \"timestamp\": ", 0);
    if (rc == 1) rc = field(&b, ev, n_source, ", \"source\": ", 1);
    if (rc == 1 && buf_lit(&b, "}, \"type\": \"NodeLogEvent\"}")) rc = -1;
    PyObject *out = NULL;
    if (rc == 1) {
        out = PyUnicode_New(b.len, 127);
        if (out != NULL) memcpy(PyUnicode_1BYTE_DATA(out), b.p, (size_t)b.len);
    } else if (rc == 0) {
        out = Py_NewRef(Py_None);
    }
    if (b.p != b.small) PyMem_Free(b.p);
    return out;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *fn;
    if (!PyArg_ParseTuple(args, "O", &fn)) return NULL;
    if (!PyCallable_Check(fn)) {
        PyErr_SetString(PyExc_TypeError, "configure(escape): escape must be callable");
        return NULL;
    }
    Py_XSETREF(escape_fn, Py_NewRef(fn));
    PyDict_Clear(text_cache);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(escape): the JSON string writer (json.encoder.encode_basestring_ascii)."},
    {"encode_step", encode_step, METH_VARARGS,
     "encode_step(head, step_event) -> its events.jsonl line (head first, no newline), or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "cvs_tui.core._eventjson", "events.jsonl lines of parsed steps, in C.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__eventjson(void) {
    text_cache = PyDict_New();
    if (text_cache == NULL) return NULL;
#define NAME(var, s)                                                                                    \
    if ((var = PyUnicode_InternFromString(s)) == NULL) return NULL;
    NAME(n_step, "step")
    NAME(n_loss, "loss")
    NAME(n_line, "line")
    NAME(n_kind, "kind")
    NAME(n_seconds, "seconds")
    NAME(n_tflops, "tflops_per_device")
    NAME(n_tokens, "tokens_per_device")
    NAME(n_weights, "total_weights")
    NAME(n_slices, "live_slices")
    NAME(n_extras, "extras")
    NAME(n_timestamp, "timestamp")
    NAME(n_source, "source")
#undef NAME
    return PyModule_Create(&moduledef);
}
