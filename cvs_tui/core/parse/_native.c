/*
 * The parser's byte scanning in C: record headers, newline counts, the case-folded literal prefilter and
 * `completed step` lines; and for `analyze`, the line clock's header times and the step columns. Each function answers exactly what its pure-Python twin of the same name in
 * _pyscan.py answers for the same input (the test-suite checks this on real and fuzzed logs); _pyscan
 * stays the reference and the fallback when this module is not built. _native.pyi has the signatures.
 *
 * Regex pieces are re-implemented with the semantics Python's `re` gives them here: a bounded run such
 * as \d{1,12} followed by something that cannot start with its class matches iff the maximal run has an
 * allowed length; a bounded run at the end of a pattern takes at most its bound.
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#ifndef Py_T_OBJECT_EX
#define Py_T_OBJECT_EX T_OBJECT_EX
#endif
#ifndef Py_READONLY
#define Py_READONLY READONLY
#endif

typedef const unsigned char uc;

static inline int is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
/* \s of a bytes pattern */
static inline int is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static inline int is_alpha(unsigned char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
static inline int is_level(unsigned char c) { return c == 'I' || c == 'W' || c == 'E' || c == 'F'; }

/* End of the maximal run of digits at i if its length is in [lo, hi], else -1. */
static Py_ssize_t digits(uc *b, Py_ssize_t i, Py_ssize_t n, int lo, int hi) {
    Py_ssize_t j = i, lim = i + hi + 1 < n ? i + hi + 1 : n;
    while (j < lim && is_digit(b[j])) j++;
    Py_ssize_t r = j - i;
    return (r >= lo && r <= hi) ? j : -1;
}

static inline int lit(uc *b, Py_ssize_t i, Py_ssize_t n, const char *s, Py_ssize_t len) {
    return i >= 0 && i + len <= n && memcmp(b + i, s, (size_t)len) == 0;
}
#define LIT(b, i, n, s) lit((b), (i), (n), (s), (Py_ssize_t)(sizeof(s) - 1))

/* `[^\s:\]]{1,200}:\d{1,10}\] ` at i: end or -1 */
static Py_ssize_t match_src_close(uc *b, Py_ssize_t i, Py_ssize_t n) {
    Py_ssize_t j = i, lim = i + 201 < n ? i + 201 : n;
    while (j < lim && !is_space(b[j]) && b[j] != ':' && b[j] != ']') j++;
    Py_ssize_t r = j - i;
    if (r < 1 || r > 200 || j >= n || b[j] != ':') return -1;
    j = digits(b, j + 1, n, 1, 10);
    if (j < 0 || !LIT(b, j, n, "] ")) return -1;
    return j + 2;
}

/* absl/glog header `L\d{4} \d\d:\d\d:\d{1,12}\.\d{1,9} {1,20}\d{1,20} SRC\] ` at h (level checked by caller). */
static Py_ssize_t match_absl(uc *b, Py_ssize_t h, Py_ssize_t n) {
    Py_ssize_t j;
    if (h + 12 > n) return -1;
    for (j = h + 1; j < h + 5; j++)
        if (!is_digit(b[j])) return -1;
    if (b[h + 5] != ' ' || !is_digit(b[h + 6]) || !is_digit(b[h + 7]) || b[h + 8] != ':') return -1;
    if (!is_digit(b[h + 9]) || !is_digit(b[h + 10]) || b[h + 11] != ':') return -1;
    j = digits(b, h + 12, n, 1, 12);
    if (j < 0 || j >= n || b[j] != '.') return -1;
    j = digits(b, j + 1, n, 1, 9);
    if (j < 0) return -1;
    Py_ssize_t k = j, lim = j + 21 < n ? j + 21 : n;
    while (k < lim && b[k] == ' ') k++;
    if (k - j < 1 || k - j > 20) return -1;
    j = digits(b, k, n, 1, 20);
    if (j < 0 || j >= n || b[j] != ' ') return -1;
    return match_src_close(b, j + 1, n);
}

/* `\d{4}-\d\d-\d\d \d\d:` at h (14 bytes, the colon at h + 13) */
static int date_hour(uc *b, Py_ssize_t h, Py_ssize_t n) {
    static const char shape[] = "dddd-dd-dd dd:";
    if (h < 0 || h + 14 > n) return 0;
    for (int k = 0; k < 14; k++) {
        if (shape[k] == 'd') {
            if (!is_digit(b[h + k])) return 0;
        } else if (b[h + k] != (unsigned char)shape[k])
            return 0;
    }
    return 1;
}

/* TF/XLA header `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{1,9}: L SRC\] ` at h. frac6: exactly six digits, level F. */
static Py_ssize_t match_tf(uc *b, Py_ssize_t h, Py_ssize_t n, int fatal_only) {
    if (!date_hour(b, h, n)) return -1;
    Py_ssize_t j = h + 14;
    if (j + 6 > n || !is_digit(b[j]) || !is_digit(b[j + 1]) || b[j + 2] != ':' || !is_digit(b[j + 3]) ||
        !is_digit(b[j + 4]) || b[j + 5] != '.')
        return -1;
    Py_ssize_t f = j + 6;
    j = digits(b, f, n, 1, 9);
    if (j < 0) return -1;
    if (fatal_only && j - f != 6) return -1;
    if (j + 5 > n || b[j] != ':' || b[j + 1] != ' ' || b[j + 3] != ' ') return -1;
    if (fatal_only ? b[j + 2] != 'F' : !is_level(b[j + 2])) return -1;
    return match_src_close(b, j + 4, n);
}

/* python-logging tail after the hour's colon at c: `\d\d:\d\d,\d{3}:` */
static Py_ssize_t match_pylog_tail(uc *b, Py_ssize_t c, Py_ssize_t n) {
    static const char shape[] = "dd:dd,ddd:";
    Py_ssize_t j = c + 1;
    if (j + 10 > n) return -1;
    for (int k = 0; k < 10; k++) {
        if (shape[k] == 'd') {
            if (!is_digit(b[j + k])) return -1;
        } else if (b[j + k] != (unsigned char)shape[k])
            return -1;
    }
    return j + 10;
}

static inline int ws_before(uc *b, Py_ssize_t h) { return h == 0 || is_space(b[h - 1]); }

/* The timed header whose hour colon is at c: its start in *h and the match end, or -1. */
static Py_ssize_t timed_header_at_colon(uc *b, Py_ssize_t c, Py_ssize_t n, Py_ssize_t *h) {
    Py_ssize_t s, e;
    /* every form goes on with `\d\d:` after this colon (the regex's lookahead) */
    if (c + 3 >= n || !is_digit(b[c + 1]) || !is_digit(b[c + 2]) || b[c + 3] != ':') return -1;
    /* absl/glog: level letter 8 bytes before the colon */
    s = c - 8;
    if (s >= 0 && is_level(b[s]) && ws_before(b, s)) {
        e = match_absl(b, s, n);
        if (e >= 0) { *h = s; return e; }
        return -1;  /* the forms are mutually exclusive at one colon */
    }
    /* TF/XLA: a date 13 bytes before */
    s = c - 13;
    if (s >= 0 && is_digit(b[s]) && ws_before(b, s) && date_hour(b, s, n) && b[s + 4] == '-') {
        e = match_tf(b, s, n, 0);
        if (e >= 0) { *h = s; return e; }
        return -1;
    }
    /* python logging: LEVEL:date hour: */
    if (!date_hour(b, c - 13, n) || c - 14 < 0 || b[c - 14] != ':') return -1;
    s = -1;
    if (c - 18 >= 0 && LIT(b, c - 18, n, "INFO")) s = c - 18;
    else if (c - 19 >= 0 && (b[c - 19] == 'E' || b[c - 19] == 'D') &&
             (LIT(b, c - 18, n, "RROR") || LIT(b, c - 18, n, "EBUG")))
        s = c - 19;
    else if (c - 21 >= 0 && LIT(b, c - 21, n, "WARNING")) s = c - 21;
    else if (c - 22 >= 0 && LIT(b, c - 22, n, "CRITICAL")) s = c - 22;
    if (s < 0 || !ws_before(b, s)) return -1;
    e = match_pylog_tail(b, c, n);
    if (e >= 0) { *h = s; return e; }
    return -1;
}

/* Next c >= i with b[c] == ':' == b[c + 3] (the hour and minute colons of every timed header form; other
 * colons cannot be the regex's anchor), or -1. Sixteen positions per step where SSE2 is there. */
static Py_ssize_t next_time_colon(uc *b, Py_ssize_t i, Py_ssize_t n) {
#if defined(__SSE2__)
    const __m128i colon = _mm_set1_epi8(':');
    while (i + 19 <= n) {
        __m128i at = _mm_loadu_si128((const __m128i *)(b + i));
        __m128i at3 = _mm_loadu_si128((const __m128i *)(b + i + 3));
        int m = _mm_movemask_epi8(_mm_and_si128(_mm_cmpeq_epi8(at, colon), _mm_cmpeq_epi8(at3, colon)));
        if (m) return i + __builtin_ctz((unsigned)m);
        i += 16;
    }
#endif
    for (; i + 3 < n; i++)
        if (b[i] == ':' && b[i + 3] == ':') return i;
    return -1;
}

static inline int ws_lit(unsigned char c) { return c == ' ' || c == '\t' || c == 0x0b || c == 0x0c; }

static int cmp_ssize(const void *a, const void *b) {
    Py_ssize_t x = *(const Py_ssize_t *)a, y = *(const Py_ssize_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    Py_ssize_t *v;
    Py_ssize_t len, cap;
} vec;

static int vec_push(vec *x, Py_ssize_t val) {
    if (x->len == x->cap) {
        Py_ssize_t cap = x->cap ? x->cap * 2 : 256;
        Py_ssize_t *v = PyMem_Realloc(x->v, (size_t)cap * sizeof(Py_ssize_t));
        if (!v) { PyErr_NoMemory(); return -1; }
        x->v = v;
        x->cap = cap;
    }
    x->v[x->len++] = val;
    return 0;
}

/* Literal headers (dialects.LITERAL_HEADERS, then dialects.BARE_STEP_HEADERS): the match length at p, or -1. */
static Py_ssize_t literal_header_at(uc *b, Py_ssize_t p, Py_ssize_t n, int which) {
    switch (which) {
    case 0:
        if (LIT(b, p, n, "XPK Start: ")) return 11;
        if (LIT(b, p, n, "XPK End: ")) return 9;
        return -1;
    case 1: {
        if (!LIT(b, p, n, "EXIT_CODE=")) return -1;
        Py_ssize_t j = p + 10;
        if (j < n && b[j] == '-') j++;
        return (j < n && is_digit(b[j])) ? j + 1 - p : -1;
    }
    case 2:
        if (LIT(b, p, n, "Per train step")) return 14;
        if (LIT(b, p, n, "Per prefill step")) return 16;
        return -1;
    case 3:
        return LIT(b, p, n, "Traceback (most recent call last):") ? 34 : -1;
    case 4:
        return LIT(b, p, n, "completed step: ") ? 16 : -1;
    default:
        return LIT(b, p, n, "[Rampup Batch Size Phase]") ? 25 : -1;
    }
}

/* A header-less step line at p starts a record unless the last non-blank byte before it (at most
 * BARE_STEP_LOOKBACK blanks skipped) ends a log header (`]`, python logging's `:`) or the rampup tag (`,` /
 * `]`): dialects.BARE_STEP_NOT_AFTER. */
#define BARE_STEP_LOOKBACK 64
static int bare_step_starts(uc *b, Py_ssize_t p) {
    Py_ssize_t q = p - 1, stop = p - 1 - BARE_STEP_LOOKBACK;
    while (q >= 0 && ws_lit(b[q])) {
        q--;
        if (q == stop) return 1;
    }
    return q < 0 || (b[q] != ']' && b[q] != ':' && b[q] != ',');
}

/* Next p >= i (i >= 1) where a literal header could start: b[p] is the first letter of one and b[p - 1]
 * the whitespace the splitter requires before it; -1 if none. */
static inline int lit_first(unsigned char c) {
    return c == 'X' || c == 'E' || c == 'P' || c == 'T' || c == 'c' || c == '[';
}

static Py_ssize_t next_lit_candidate(uc *b, Py_ssize_t i, Py_ssize_t n) {
#if defined(__SSE2__)
    const __m128i X = _mm_set1_epi8('X'), E = _mm_set1_epi8('E'), P = _mm_set1_epi8('P'), T = _mm_set1_epi8('T'),
                  C = _mm_set1_epi8('c'), B = _mm_set1_epi8('[');
    const __m128i sp = _mm_set1_epi8(' '), tab = _mm_set1_epi8('\t'), vt = _mm_set1_epi8(0x0b),
                  ff = _mm_set1_epi8(0x0c);
    while (i + 16 <= n) {
        __m128i cur = _mm_loadu_si128((const __m128i *)(b + i));
        __m128i prev = _mm_loadu_si128((const __m128i *)(b + i - 1));
        __m128i first = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(cur, X), _mm_cmpeq_epi8(cur, E)),
                                     _mm_or_si128(_mm_cmpeq_epi8(cur, P), _mm_cmpeq_epi8(cur, T)));
        first = _mm_or_si128(first, _mm_or_si128(_mm_cmpeq_epi8(cur, C), _mm_cmpeq_epi8(cur, B)));
        __m128i ws = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(prev, sp), _mm_cmpeq_epi8(prev, tab)),
                                  _mm_or_si128(_mm_cmpeq_epi8(prev, vt), _mm_cmpeq_epi8(prev, ff)));
        int m = _mm_movemask_epi8(_mm_and_si128(first, ws));
        if (m) return i + __builtin_ctz((unsigned)m);
        i += 16;
    }
#endif
    for (; i < n; i++)
        if (lit_first(b[i]) && ws_lit(b[i - 1])) return i;
    return -1;
}

static PyObject *find_headers(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "y*n", &view, &pos)) return NULL;
    uc *b = view.buf;
    Py_ssize_t n = view.len;
    vec timed = {0}, extra = {0};
    PyObject *out = NULL;
    if (pos < 0) pos = 0;
    /* timed headers: every ':' at or after pos, matches never overlapping (as finditer) */
    Py_ssize_t i = pos, last_end = pos;
    while (i < n) {
        Py_ssize_t c = next_time_colon(b, i, n), h;
        if (c < 0) break;
        i = c + 1;
        if (c < last_end) continue;
        Py_ssize_t e = timed_header_at_colon(b, c, n, &h);
        if (e >= 0) {
            if (vec_push(&timed, h) < 0) goto done;
            last_end = e > c ? e : c + 1;
            i = last_end;
        }
    }
    /* literal headers: a match not preceded by whitespace is not a header, and none can overlap one
     * that is, so only the candidates need checking */
    for (Py_ssize_t p = pos > 1 ? pos : 1; p < n;) {
        p = next_lit_candidate(b, p, n);
        if (p < 0) break;
        int w = b[p] == 'X' ? 0 : b[p] == 'E' ? 1 : b[p] == 'P' ? 2 : b[p] == 'T' ? 3 : b[p] == 'c' ? 4 : 5;
        Py_ssize_t len = literal_header_at(b, p, n, w);
        if (len < 0 || (w >= 4 && !bare_step_starts(b, p))) { p += 1; continue; }
        if (vec_push(&extra, p) < 0) goto done;
        p += len;
    }
    Py_ssize_t *v = timed.v, m = timed.len;
    if (extra.len) {
        for (Py_ssize_t k = 0; k < extra.len; k++)
            if (vec_push(&timed, extra.v[k]) < 0) goto done;
        v = timed.v;
        m = timed.len;
        qsort(v, (size_t)m, sizeof(Py_ssize_t), cmp_ssize);
        Py_ssize_t w = 0;
        for (Py_ssize_t k = 0; k < m; k++)
            if (w == 0 || v[k] != v[w - 1]) v[w++] = v[k];
        m = w;
    }
    Py_ssize_t first = (m > 0 && v[0] == 0) ? 1 : 0;
    out = PyList_New(m - first);
    if (!out) goto done;
    for (Py_ssize_t k = first; k < m; k++) {
        PyObject *x = PyLong_FromSsize_t(v[k]);
        if (!x) { Py_CLEAR(out); goto done; }
        PyList_SET_ITEM(out, k - first, x);
    }
done:
    PyMem_Free(timed.v);
    PyMem_Free(extra.v);
    PyBuffer_Release(&view);
    return out;
}

/* ------------------------------------------------------------------------------------------------------ */
static int as_index(PyObject *list, Py_ssize_t k, Py_ssize_t *out) {
    Py_ssize_t v = PyLong_AsSsize_t(PyList_GET_ITEM(list, k));
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

static PyObject *record_lines(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *starts;
    Py_ssize_t line0;
    if (!PyArg_ParseTuple(args, "y*O!n", &view, &PyList_Type, &starts, &line0)) return NULL;
    uc *b = view.buf;
    Py_ssize_t n = view.len, m = PyList_GET_SIZE(starts), prev = 0, line = line0;
    PyObject *out = PyList_New(m);
    if (!out) goto fail;
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t s;
        if (as_index(starts, k, &s) < 0) goto fail;
        if (s > n) s = n;
        if (s < prev) s = prev;
        for (Py_ssize_t i = prev; i < s;) {
            uc *q = memchr(b + i, '\n', (size_t)(s - i));
            if (!q) break;
            line++;
            i = (q - b) + 1;
        }
        prev = s;
        PyObject *x = PyLong_FromSsize_t(line);
        if (!x) goto fail;
        PyList_SET_ITEM(out, k, x);
    }
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* bisect_right(starts, p) - 1 over a list of ints */
static int record_of(PyObject *starts, Py_ssize_t p, Py_ssize_t *out) {
    Py_ssize_t lo = 0, hi = PyList_GET_SIZE(starts);
    while (lo < hi) {
        Py_ssize_t mid = (lo + hi) / 2, v;
        if (as_index(starts, mid, &v) < 0) return -1;
        if (p < v) hi = mid;
        else lo = mid + 1;
    }
    *out = lo - 1;
    return 0;
}

/* ------------------------------------------------------------------------------------------------------ */
/* LiteralScanner: every occurrence of every literal in ASCII-case-folded text. A bitmap of hashed
 * four-byte prefixes rejects almost every position with a few cheap operations and no dependency between
 * positions (an automaton walk is bound by its chain of table loads); the few positions left are checked
 * against the literals in that hash bucket. Literals shorter than four bytes (rare: user patterns) are
 * found by a bitmap of first-two-byte pairs and a one-byte table. */
static unsigned char FOLD[256];

typedef struct {
    PyObject_HEAD
    Py_ssize_t nlit;
    Py_ssize_t *lens;
    int32_t *bucket_start; /* 65537 offsets into bucket_ids, by prefix hash (long) or pair (short) */
    int32_t *bucket_ids;
    int32_t *short_start; /* the same for literals of two or three bytes, by first two bytes */
    int32_t *short_ids;
    int32_t single[256]; /* one-byte literal of that byte, or -1 */
    int has_single, has_short;
    uint64_t bits[1024];  /* hashed four-byte prefixes of literals */
    uint64_t sbits[1024]; /* first two bytes of short literals */
    PyObject *literals;  /* list[bytes], de-duplicated */
} LiteralScanner;

static void ls_free(LiteralScanner *self) {
    PyMem_Free(self->lens);
    PyMem_Free(self->bucket_start);
    PyMem_Free(self->bucket_ids);
    PyMem_Free(self->short_start);
    PyMem_Free(self->short_ids);
    self->lens = NULL;
    self->bucket_start = self->bucket_ids = self->short_start = self->short_ids = NULL;
}

static inline unsigned prefix_hash(uint32_t w) { return (w * 2654435761u) >> 16; }

/* CSR buckets: ids of the literals whose key(k) is each value in [0, 65536); key < 0 leaves k out */
static int build_buckets(Py_ssize_t nlit, const int32_t *key, int32_t **start_out, int32_t **ids_out) {
    int32_t *start = PyMem_Calloc(65537, sizeof(int32_t));
    int32_t *ids = PyMem_Malloc((size_t)(nlit ? nlit : 1) * sizeof(int32_t));
    int32_t *fill = PyMem_Malloc(65536 * sizeof(int32_t));
    if (!start || !ids || !fill) {
        PyMem_Free(start);
        PyMem_Free(ids);
        PyMem_Free(fill);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < nlit; k++)
        if (key[k] >= 0) start[key[k] + 1]++;
    for (int v = 0; v < 65536; v++) start[v + 1] += start[v];
    memcpy(fill, start, 65536 * sizeof(int32_t));
    for (Py_ssize_t k = 0; k < nlit; k++)
        if (key[k] >= 0) ids[fill[key[k]]++] = (int32_t)k;
    PyMem_Free(fill);
    *start_out = start;
    *ids_out = ids;
    return 0;
}

static void ls_dealloc(LiteralScanner *self) {
    ls_free(self);
    Py_XDECREF(self->literals);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int ls_init(LiteralScanner *self, PyObject *args, PyObject *kw) {
    PyObject *given;
    static char *kwlist[] = {"literals", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O", kwlist, &given)) return -1;
    PyObject *seq = PySequence_Fast(given, "literals must be a sequence of bytes");
    if (!seq) return -1;
    PyObject *lits = PyList_New(0), *seen = PySet_New(NULL);
    int rc = -1;
    if (!lits || !seen) goto out;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(seq); k++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, k);
        if (!PyBytes_Check(x)) {
            PyErr_SetString(PyExc_TypeError, "literals must be bytes");
            goto out;
        }
        if (PyBytes_GET_SIZE(x) == 0) continue;
        int has = PySet_Contains(seen, x);
        if (has < 0) goto out;
        if (has) continue;
        if (PySet_Add(seen, x) < 0 || PyList_Append(lits, x) < 0) goto out;
    }
    ls_free(self);
    Py_XSETREF(self->literals, lits);
    lits = NULL;
    Py_ssize_t nlit = PyList_GET_SIZE(self->literals);
    self->lens = PyMem_Malloc((size_t)(nlit ? nlit : 1) * sizeof(Py_ssize_t));
    int32_t *long_key = PyMem_Malloc((size_t)(nlit ? nlit : 1) * sizeof(int32_t));
    int32_t *short_key = PyMem_Malloc((size_t)(nlit ? nlit : 1) * sizeof(int32_t));
    if (!self->lens || !long_key || !short_key) {
        PyMem_Free(long_key);
        PyMem_Free(short_key);
        PyErr_NoMemory();
        goto out;
    }
    memset(self->bits, 0, sizeof self->bits);
    memset(self->sbits, 0, sizeof self->sbits);
    self->has_single = self->has_short = 0;
    for (int v = 0; v < 256; v++) self->single[v] = -1;
    for (Py_ssize_t k = 0; k < nlit; k++) {
        PyObject *x = PyList_GET_ITEM(self->literals, k);
        uc *t = (uc *)PyBytes_AS_STRING(x);
        Py_ssize_t len = self->lens[k] = PyBytes_GET_SIZE(x);
        long_key[k] = short_key[k] = -1;
        if (len == 1) {
            self->single[t[0]] = (int32_t)k;
            self->has_single = 1;
        } else if (len < 4) {
            unsigned pair = (unsigned)t[0] << 8 | t[1];
            short_key[k] = (int32_t)pair;
            self->sbits[pair >> 6] |= (uint64_t)1 << (pair & 63);
            self->has_short = 1;
        } else {
            uint32_t w = (uint32_t)t[0] | (uint32_t)t[1] << 8 | (uint32_t)t[2] << 16 | (uint32_t)t[3] << 24;
            unsigned hsh = prefix_hash(w);
            long_key[k] = (int32_t)hsh;
            self->bits[hsh >> 6] |= (uint64_t)1 << (hsh & 63);
        }
    }
    int bad = build_buckets(nlit, long_key, &self->bucket_start, &self->bucket_ids) < 0 ||
              build_buckets(nlit, short_key, &self->short_start, &self->short_ids) < 0;
    PyMem_Free(long_key);
    PyMem_Free(short_key);
    if (bad) goto out;
    self->nlit = nlit;
    rc = 0;
out:
    Py_XDECREF(lits);
    Py_XDECREF(seen);
    Py_DECREF(seq);
    return rc;
}

static int add_hit(PyObject *out, Py_ssize_t k, Py_ssize_t i) {
    PyObject *key = PyLong_FromSsize_t(k), *val = NULL;
    if (!key) return -1;
    PyObject *set = PyDict_GetItemWithError(out, key);
    if (!set) {
        if (PyErr_Occurred()) goto fail;
        set = PySet_New(NULL);
        if (!set) goto fail;
        if (PyDict_SetItem(out, key, set) < 0) { Py_DECREF(set); goto fail; }
        Py_DECREF(set);
    }
    val = PyLong_FromSsize_t(i);
    if (!val || PySet_Add(set, val) < 0) goto fail;
    Py_DECREF(val);
    Py_DECREF(key);
    return 0;
fail:
    Py_XDECREF(val);
    Py_DECREF(key);
    return -1;
}

/* ASCII upper case to lower case in each byte of a word (what FOLD does to one byte) */
static inline uint64_t fold8(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t low7 = x & ~high;
    uint64_t ge_a = low7 + ones * (0x80 - 'A'); /* high bit: byte >= 'A' (no carry between bytes) */
    uint64_t gt_z = low7 + ones * (0x80 - 'Z' - 1);
    return x | ((ge_a & ~gt_z & ~x & high) >> 2);
}

/* does the folded text at j hold literal t (length len, its first `from` bytes already known to match)? */
static inline int folded_eq(uc *b, Py_ssize_t j, uc *t, Py_ssize_t from, Py_ssize_t len) {
    for (Py_ssize_t k = from; k < len; k++)
        if (FOLD[b[j + k]] != t[k]) return 0;
    return 1;
}

typedef struct {
    PyObject *out, *starts;
    Py_ssize_t last_k, last_i;
} hits;

static int hit(hits *h, Py_ssize_t k, Py_ssize_t j) {
    Py_ssize_t i;
    if (record_of(h->starts, j, &i) < 0) return -1;
    if (k == h->last_k && i == h->last_i) return 0;
    h->last_k = k;
    h->last_i = i;
    return add_hit(h->out, k, i);
}

static int check_bucket(LiteralScanner *self, const int32_t *start, const int32_t *ids, unsigned key, uc *b,
                        Py_ssize_t j, Py_ssize_t end, Py_ssize_t known, hits *h) {
    for (int32_t x = start[key]; x < start[key + 1]; x++) {
        Py_ssize_t k = ids[x], len = self->lens[k];
        if (j + len > end) continue;
        if (!folded_eq(b, j, (uc *)PyBytes_AS_STRING(PyList_GET_ITEM(self->literals, k)), known, len)) continue;
        if (hit(h, k, j) < 0) return -1;
    }
    return 0;
}

static PyObject *ls_find(LiteralScanner *self, PyObject *args) {
    Py_buffer view;
    PyObject *starts;
    Py_ssize_t end;
    if (!self->bucket_start) {
        PyErr_SetString(PyExc_RuntimeError, "LiteralScanner was not initialised");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*O!n", &view, &PyList_Type, &starts, &end)) return NULL;
    hits h = {PyDict_New(), starts, -1, -1};
    if (!h.out) { PyBuffer_Release(&view); return NULL; }
    if (end > view.len) end = view.len;
    uc *b = view.buf;
    const uint64_t *bits = self->bits;
    /* four-byte windows, the folded bytes j..j+3 as a little-endian word */
    Py_ssize_t j = 0;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (; j + 8 <= end; j += 5) { /* one load and fold for five windows */
        uint64_t x;
        memcpy(&x, b + j, 8);
        x = fold8(x);
        for (int k = 0; k < 5; k++) {
            unsigned hsh = prefix_hash((uint32_t)(x >> (8 * k)));
            if (!((bits[hsh >> 6] >> (hsh & 63)) & 1)) continue;
            if (check_bucket(self, self->bucket_start, self->bucket_ids, hsh, b, j + k, end, 0, &h) < 0)
                goto fail;
        }
    }
#endif
    for (; j + 4 <= end; j++) {
        uint32_t w = (uint32_t)FOLD[b[j]] | (uint32_t)FOLD[b[j + 1]] << 8 | (uint32_t)FOLD[b[j + 2]] << 16 |
                     (uint32_t)FOLD[b[j + 3]] << 24;
        unsigned hsh = prefix_hash(w);
        if (!((bits[hsh >> 6] >> (hsh & 63)) & 1)) continue;
        if (check_bucket(self, self->bucket_start, self->bucket_ids, hsh, b, j, end, 0, &h) < 0) goto fail;
    }
    if (self->has_single || self->has_short) {
        for (Py_ssize_t j = 0; j < end; j++) {
            unsigned c0 = FOLD[b[j]];
            if (self->single[c0] >= 0 && hit(&h, self->single[c0], j) < 0) goto fail;
            if (!self->has_short || j + 1 >= end) continue;
            unsigned pair = c0 << 8 | FOLD[b[j + 1]];
            if (!((self->sbits[pair >> 6] >> (pair & 63)) & 1)) continue;
            if (check_bucket(self, self->short_start, self->short_ids, pair, b, j, end, 2, &h) < 0) goto fail;
        }
    }
    PyBuffer_Release(&view);
    return h.out;
fail:
    Py_DECREF(h.out);
    PyBuffer_Release(&view);
    return NULL;
}

static PyObject *ls_get_literals(LiteralScanner *self, void *closure) {
    return Py_NewRef(self->literals ? self->literals : Py_None);
}

static PyMethodDef ls_methods[] = {
    {"find", (PyCFunction)ls_find, METH_VARARGS,
     "find(text, starts, end) -> {literal index: {record index}} for literals in text[:end], case-folded."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ls_getset[] = {
    {"literals", (getter)ls_get_literals, NULL, "the de-duplicated literals, in index order", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LiteralScannerType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cvs_tui.core.parse._native.LiteralScanner",
    .tp_basicsize = sizeof(LiteralScanner),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "LiteralScanner(literals): which records hold which literals, in one pass over the text.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)ls_init,
    .tp_dealloc = (destructor)ls_dealloc,
    .tp_methods = ls_methods,
    .tp_getset = ls_getset,
};

/* ------------------------------------------------------------------------------------------------------ */
/* Steps. configure() hands over the StepEvent class (its slots are filled directly, as copy and pickle do:
 * the dataclass has no __post_init__, which configure checks) and the Python helpers for rare cases. */
#define NFIELDS 12
static const char *const FIELD_NAMES[NFIELDS] = {
    "step", "loss", "line", "kind", "seconds", "tflops_per_device", "tokens_per_device", "total_weights",
    "live_slices", "extras", "timestamp", "source",
};
enum { F_STEP, F_LOSS, F_LINE, F_KIND, F_SEC, F_TF, F_TOK, F_TW, F_SL, F_EX, F_TS, F_SRC };

static PyTypeObject *step_cls = NULL;
static Py_ssize_t step_offsets[NFIELDS];
static PyObject *kind_train = NULL, *kind_rampup = NULL, *src_fn = NULL, *header_fn = NULL;

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *cls, *train, *rampup, *srcf, *headerf;
    if (!PyArg_ParseTuple(args, "O!OOOO", &PyType_Type, &cls, &train, &rampup, &srcf, &headerf)) return NULL;
    PyTypeObject *tp = (PyTypeObject *)cls;
    if (PyObject_HasAttrString(cls, "__post_init__")) {
        PyErr_SetString(PyExc_TypeError, "the step class must not have __post_init__");
        return NULL;
    }
    Py_ssize_t offs[NFIELDS];
    for (int k = 0; k < NFIELDS; k++) {
        PyObject *d = PyObject_GetAttrString(cls, FIELD_NAMES[k]);
        if (!d) return NULL;
        if (!Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            Py_DECREF(d);
            PyErr_Format(PyExc_TypeError, "field %s is not a slot", FIELD_NAMES[k]);
            return NULL;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        int ok = m->type == Py_T_OBJECT_EX && !(m->flags & Py_READONLY) &&
                 ((PyMemberDescrObject *)d)->d_common.d_type == tp;
        offs[k] = m->offset;
        Py_DECREF(d);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "field %s is not a plain object slot of the class", FIELD_NAMES[k]);
            return NULL;
        }
    }
    memcpy(step_offsets, offs, sizeof offs);
    Py_XSETREF(step_cls, (PyTypeObject *)Py_NewRef(cls));
    Py_XSETREF(kind_train, Py_NewRef(train));
    Py_XSETREF(kind_rampup, Py_NewRef(rampup));
    Py_XSETREF(src_fn, Py_NewRef(srcf));
    Py_XSETREF(header_fn, Py_NewRef(headerf));
    Py_RETURN_NONE;
}

/* Decimal text to double without strtod when the answer is exact by construction (Clinger's fast path: a
 * mantissa below 2^53 times or divided by an exactly representable power of ten is one correctly
 * rounded operation), which is what CPython's float() would return. 0 when the fast path does not apply. */
static const double POW10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int fast_double(uc *b, Py_ssize_t i, Py_ssize_t j, double *out) {
    Py_ssize_t k = i;
    int neg = 0, nd = 0, frac = 0, any = 0, e = 0;
    uint64_t m = 0;
    if (k < j && (b[k] == '-' || b[k] == '+')) neg = b[k++] == '-';
    for (; k < j && is_digit(b[k]); k++) {
        any = 1;
        if (m == 0 && b[k] == '0') continue;
        if (++nd > 19) return 0;
        m = m * 10 + (uint64_t)(b[k] - '0');
    }
    if (k < j && b[k] == '.') {
        for (k++; k < j && is_digit(b[k]); k++) {
            any = 1;
            frac++;
            if (m == 0 && b[k] == '0') continue;
            if (++nd > 19) return 0;
            m = m * 10 + (uint64_t)(b[k] - '0');
        }
    }
    if (!any) return 0;
    if (k < j && (b[k] == 'e' || b[k] == 'E')) {
        int eneg = 0, ed = 0;
        k++;
        if (k < j && (b[k] == '-' || b[k] == '+')) eneg = b[k++] == '-';
        for (; k < j && is_digit(b[k]); k++) {
            if (++ed > 4) return 0;
            e = e * 10 + (b[k] - '0');
        }
        if (ed == 0) return 0;
        if (eneg) e = -e;
    }
    if (k != j || m > ((uint64_t)1 << 53)) return 0;
    int p = e - frac;
    double v = (double)m;
    if (p < 0) {
        if (p < -22) return 0;
        v /= POW10[-p];
    } else {
        if (p > 22) return 0;
        v *= POW10[p];
    }
    *out = neg ? -v : v;
    return 1;
}

/* float(bytes) of b[i:j]. Returns a new float, or NULL with ValueError set (the step is dropped), or NULL
 * with another error. */
static PyObject *to_float(uc *b, Py_ssize_t i, Py_ssize_t j) {
    double v;
    if (fast_double(b, i, j, &v)) return PyFloat_FromDouble(v);
    PyObject *raw = PyBytes_FromStringAndSize((const char *)b + i, j - i);
    if (!raw) return NULL;
    PyObject *f = PyFloat_FromString(raw);
    Py_DECREF(raw);
    return f;
}

static PyObject *to_int(uc *b, Py_ssize_t i, Py_ssize_t j) {
    long long v = 0;
    for (Py_ssize_t k = i; k < j; k++) v = v * 10 + (b[k] - '0'); /* at most 12 digits */
    return PyLong_FromLongLong(v);
}

/* `[^,\s]{1,64}` at i: end of the value. must_follow: the run must end by itself (something follows in
 * the pattern that starts with ','), so a longer run fails; otherwise it is cut at 64. */
static Py_ssize_t value(uc *b, Py_ssize_t i, Py_ssize_t n, int must_follow) {
    Py_ssize_t j = i, lim = i + 65 < n ? i + 65 : n;
    while (j < lim && b[j] != ',' && !is_space(b[j])) j++;
    Py_ssize_t r = j - i;
    if (r < 1) return -1;
    if (r > 64) return must_follow ? -1 : i + 64;
    return j;
}

typedef struct {
    Py_ssize_t s, e; /* s < 0: the optional group is absent */
} span;

typedef struct {
    span st, sec, ex; /* ex: the `, key: value` pairs after the seconds */
} step_match;

/* `LABEL` then a run of at most max_digits digits (max_digits > 0) or a value (see value()) at *j: its
 * span in *out and *j moved past it; 0 when they do not match there */
static int field(uc *b, Py_ssize_t *j, Py_ssize_t n, const char *label, int max_digits, int must_follow,
                 span *out) {
    Py_ssize_t len = (Py_ssize_t)strlen(label), v = *j + len;
    if (!lit(b, *j, n, label, len)) return 0;
    Py_ssize_t e = max_digits ? digits(b, v, n, 1, max_digits) : value(b, v, n, must_follow);
    if (e < 0) return 0;
    out->s = v;
    out->e = e;
    *j = e;
    return 1;
}

static inline int is_key(unsigned char c) { return is_alpha(c) || is_digit(c) || c == '_' || c == '/' || c == ' '; }

/* STEP regex at p (`completed step: ` already seen there): match end or -1. The pairs are
 * `(?:, [A-Za-z_][A-Za-z0-9_/ ]{0,63}: [^,\s]{1,64})*` (dialects.STEP_KEY). */
static Py_ssize_t match_step(uc *b, Py_ssize_t p, Py_ssize_t n, step_match *m) {
    Py_ssize_t j = p + 16;
    if (!field(b, &j, n, "", 12, 1, &m->st) || !field(b, &j, n, ", seconds: ", 0, 0, &m->sec)) return -1;
    Py_ssize_t t = j;
    m->ex.s = t;
    for (;;) {
        if (!LIT(b, t, n, ", ")) break;
        Py_ssize_t k = t + 2;
        if (k >= n || !(is_alpha(b[k]) || b[k] == '_')) break;
        Py_ssize_t lim = k + 64 < n ? k + 64 : n;
        for (k++; k < lim && is_key(b[k]); k++) {}
        if (!LIT(b, k, n, ": ")) break;
        Py_ssize_t v = value(b, k + 2, n, 0);
        if (v < 0) break;
        t = v;
    }
    m->ex.e = t;
    return t;
}

/* extra keys recur in the same order on every line: a small cache of their str objects */
#define KEYCACHE 32
static struct {
    Py_ssize_t len;
    char raw[64];
    PyObject *str;
} keycache[KEYCACHE];
static int keycache_n = 0;

static PyObject *key_str(uc *s, Py_ssize_t len) {
    for (int k = 0; k < keycache_n; k++)
        if (keycache[k].len == len && memcmp(keycache[k].raw, s, (size_t)len) == 0)
            return Py_NewRef(keycache[k].str);
    PyObject *x = PyUnicode_DecodeASCII((const char *)s, len, NULL);
    if (x && keycache_n < KEYCACHE && len <= 64) {
        keycache[keycache_n].len = len;
        memcpy(keycache[keycache_n].raw, s, (size_t)len);
        keycache[keycache_n].str = Py_NewRef(x);
        keycache_n++;
    }
    return x;
}

/* The step fields of the `, key: value` pairs b[i:j] (dialects.step_fields): the known keys into v[], the
 * others into a dict (a value may end in `%`; one that is not a number is left out). 0 on success; -1
 * with ValueError set when the line is not a step (a known field that is not a number), -1 with another
 * error on failure. A field the line lacks stays NULL (the caller makes it None). The first of a key wins. */
static int step_fields(uc *b, Py_ssize_t i, Py_ssize_t j, PyObject **v) {
    PyObject *d = PyDict_New();
    if (!d) return -1;
    v[F_EX] = d;
    for (Py_ssize_t t = i; t < j;) {
        Py_ssize_t k0 = t + 2, k1 = k0;
        while (b[k1] != ':') k1++;
        Py_ssize_t v0 = k1 + 2, v1 = v0;
        while (v1 < j && b[v1] != ',') v1++;
        t = v1;
        Py_ssize_t klen = k1 - k0;
        int slot = -1;
#define KEY(s) (klen == (Py_ssize_t)(sizeof(s) - 1) && memcmp(b + k0, s, sizeof(s) - 1) == 0)
        if (KEY("loss")) slot = F_LOSS;
        else if (KEY("TFLOP/s/device") || KEY("TFLOP/s")) slot = F_TF;
        else if (KEY("Tokens/s/device")) slot = F_TOK;
        else if (KEY("total_weights")) slot = F_TW;
        else if (KEY("live slice count")) slot = F_SL;
#undef KEY
        if (slot >= 0) {
            if (v[slot]) continue;
            if (slot == F_SL) {
                int ok = v1 - v0 <= 9;
                for (Py_ssize_t q = v0; ok && q < v1; q++) ok = is_digit(b[q]);
                if (!ok) {
                    PyErr_SetString(PyExc_ValueError, "live slice count");
                    return -1;
                }
                v[slot] = to_int(b, v0, v1);
            } else {
                v[slot] = to_float(b, v0, v1);
            }
            if (!v[slot]) return -1;
            continue;
        }
        PyObject *key = key_str(b + k0, klen);
        if (!key) return -1;
        int has = PyDict_Contains(d, key);
        if (has != 0) {
            Py_DECREF(key);
            if (has < 0) return -1;
            continue;
        }
        Py_ssize_t e = (v1 - v0 > 1 && b[v1 - 1] == '%') ? v1 - 1 : v1;
        PyObject *val = to_float(b, v0, e);
        if (!val) {
            Py_DECREF(key);
            if (!PyErr_ExceptionMatches(PyExc_ValueError)) return -1;
            PyErr_Clear();
            continue;
        }
        int bad = PyDict_SetItem(d, key, val) < 0;
        Py_DECREF(key);
        Py_DECREF(val);
        if (bad) return -1;
    }
    return 0;
}

/* `buf[s:p].endswith(tag)` */
static inline int ends_with(uc *b, Py_ssize_t s, Py_ssize_t p, const char *tag, Py_ssize_t len) {
    return p - s >= len && memcmp(b + p - len, tag, (size_t)len) == 0;
}

/* position of the first `] ` inside b[s:p], or -1 */
static Py_ssize_t first_close(uc *b, Py_ssize_t s, Py_ssize_t p) {
    for (Py_ssize_t k = s; k + 1 < p;) {
        uc *q = memchr(b + k, ']', (size_t)(p - 1 - k));
        if (!q) return -1;
        k = q - b;
        if (b[k + 1] == ' ') return k;
        k++;
    }
    return -1;
}

/* Source of an absl record (raw = the word before the header's `] `) is cached between steps. */
typedef struct {
    const unsigned char *raw;
    Py_ssize_t len;
    PyObject *str;
    char copy[256];
} src_memo;

static PyObject *absl_source(uc *b, Py_ssize_t r0, Py_ssize_t r1, src_memo *memo) {
    Py_ssize_t len = r1 - r0;
    if (memo->str && memo->len == len && len <= 256 && memcmp(memo->copy, b + r0, (size_t)len) == 0)
        return Py_NewRef(memo->str);
    PyObject *raw = PyBytes_FromStringAndSize((const char *)b + r0, len);
    if (!raw) return NULL;
    PyObject *s = PyObject_CallOneArg(src_fn, raw);
    Py_DECREF(raw);
    if (!s) return NULL;
    if (len <= 256) {
        Py_XSETREF(memo->str, Py_NewRef(s));
        memo->len = len;
        memcpy(memo->copy, b + r0, (size_t)len);
    }
    return s;
}

/* One StepEvent for the match, or NULL: with ValueError set when a value is not a number (skip the step),
 * with another error set on failure. */
static PyObject *make_step(uc *b, Py_ssize_t n_all, step_match *m, Py_ssize_t s, Py_ssize_t p, PyObject *line,
                           src_memo *memo) {
    PyObject *v[NFIELDS] = {NULL};
    if (step_fields(b, m->ex.s, m->ex.e, v) < 0) goto fail;
    /* header: absl fast path, else the Python reader */
    if (is_level(b[s]) && s + 5 <= n_all && is_digit(b[s + 1]) && is_digit(b[s + 2]) && is_digit(b[s + 3]) &&
        is_digit(b[s + 4]) && p - 2 >= s && first_close(b, s, p) == p - 2) {
        Py_ssize_t r0 = 0;
        for (Py_ssize_t k = p - 3; k >= s; k--)
            if (b[k] == ' ') { r0 = k + 1; break; }
        v[F_SRC] = absl_source(b, r0, p - 2, memo);
        if (!v[F_SRC]) goto fail;
        v[F_TS] = Py_NewRef(Py_None);
    } else {
        PyObject *head = PyBytes_FromStringAndSize((const char *)b + s, p - s);
        if (!head) goto fail;
        PyObject *info = PyObject_CallOneArg(header_fn, head);
        Py_DECREF(head);
        if (!info) goto fail;
        if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 3) {
            Py_DECREF(info);
            PyErr_SetString(PyExc_TypeError, "header_info must return a 3-tuple");
            goto fail;
        }
        v[F_SRC] = Py_NewRef(PyTuple_GET_ITEM(info, 1));
        v[F_TS] = Py_NewRef(PyTuple_GET_ITEM(info, 2));
        Py_DECREF(info);
    }
    /* (the Python path first asks whether the buffer holds "[Rampup" at all: the same answer) */
    int ramp = ends_with(b, s, p, "[Rampup Batch Size Phase], ", 27) ||
               ends_with(b, s, p, "[Rampup Batch Size Phase] ", 26);
    v[F_KIND] = Py_NewRef(ramp ? kind_rampup : kind_train);
    v[F_LINE] = Py_NewRef(line);
    if (!(v[F_STEP] = to_int(b, m->st.s, m->st.e))) goto fail;
    if (!(v[F_SEC] = to_float(b, m->sec.s, m->sec.e))) goto fail;
    if (!v[F_LOSS]) v[F_LOSS] = Py_NewRef(Py_None);
    for (int k = F_TF; k <= F_SL; k++)
        if (!v[k]) v[k] = Py_NewRef(Py_None);
    PyObject *obj = step_cls->tp_alloc(step_cls, 0);
    if (!obj) goto fail;
    for (int k = 0; k < NFIELDS; k++) *(PyObject **)((char *)obj + step_offsets[k]) = v[k];
    /* Its fields are numbers, strings, None, an enum member and its own dict of str -> float: it cannot
     * be part of a reference cycle, so the cycle collector need not walk the millions of them (as it
     * skips tuples and dicts of atomic values). */
    if (PyObject_GC_IsTracked(obj)) PyObject_GC_UnTrack(obj);
    return obj;
fail:
    for (int k = 0; k < NFIELDS; k++) Py_XDECREF(v[k]);
    return NULL;
}

/* scan_steps(buf, starts, lines, end, early, skip) -> (events, record indexes, positions of steps with a
 * non-finite loss, positions of steps with a non-finite TFLOP/s or Tokens/s). Equals _pyscan.scan_steps:
 * STEP.finditer(buf, early, end), a match inside one record not in skip and not ending at end (its last
 * value may go on past what is here). */
static PyObject *scan_steps(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *starts, *lines, *skip;
    Py_ssize_t end, early;
    if (!step_cls) {
        PyErr_SetString(PyExc_RuntimeError, "configure() first");
        return NULL;
    }
    if (!PyArg_ParseTuple(args, "y*O!O!nnO", &view, &PyList_Type, &starts, &PyList_Type, &lines, &end, &early,
                          &skip))
        return NULL;
    uc *b = view.buf;
    Py_ssize_t n_all = view.len;
    if (end > n_all) end = n_all;
    if (early < 0) early = 0;
    PyObject *evs = PyList_New(0), *recs = PyList_New(0), *nonfinite = PyList_New(0), *bad_rate = PyList_New(0),
             *out = NULL;
    src_memo memo = {0};
    Py_ssize_t nrec = PyList_GET_SIZE(starts) - 1, i = 0, next_start = 0;
    int use_skip = skip != Py_None && PyObject_Length(skip) > 0;
    if (!evs || !recs || !nonfinite || !bad_rate || PyList_GET_SIZE(lines) < nrec) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "lines shorter than starts");
        goto done;
    }
    if (nrec < 1) goto ok;
    if (as_index(starts, 1, &next_start) < 0) goto done;
    Py_ssize_t p = early;
    while (p < end) {
        uc *q = memmem(b + p, (size_t)(end - p), "completed step: ", 16);
        if (!q) break;
        p = q - b;
        step_match m = {0};
        Py_ssize_t e = match_step(b, p, end, &m);
        if (e < 0) { p += 1; continue; }
        /* the record holding p: starts ascend, so walk forward */
        while (i + 1 < nrec && next_start <= p) {
            i++;
            if (as_index(starts, i + 1, &next_start) < 0) goto done;
        }
        Py_ssize_t s, cur = p;
        p = e > p ? e : p + 1;
        if (as_index(starts, i, &s) < 0) goto done;
        if (s > cur || e > next_start || e == end) continue;
        PyObject *idx = PyLong_FromSsize_t(i);
        if (!idx) goto done;
        if (use_skip) {
            int in = PySequence_Contains(skip, idx);
            if (in != 0) {
                Py_DECREF(idx);
                if (in < 0) goto done;
                continue;
            }
        }
        PyObject *ev = make_step(b, n_all, &m, s, cur, PyList_GET_ITEM(lines, i), &memo);
        if (!ev) {
            Py_DECREF(idx);
            if (PyErr_ExceptionMatches(PyExc_ValueError)) { PyErr_Clear(); continue; }
            goto done;
        }
        PyObject *loss = *(PyObject **)((char *)ev + step_offsets[F_LOSS]);
        PyObject *tf = *(PyObject **)((char *)ev + step_offsets[F_TF]);
        PyObject *tok = *(PyObject **)((char *)ev + step_offsets[F_TOK]);
        int nan_loss = loss != Py_None && !isfinite(PyFloat_AS_DOUBLE(loss));
        int nan_rate = (tf != Py_None && !isfinite(PyFloat_AS_DOUBLE(tf))) ||
                       (tok != Py_None && !isfinite(PyFloat_AS_DOUBLE(tok)));
        PyObject *at = (nan_loss || nan_rate) ? PyLong_FromSsize_t(cur) : NULL;
        int bad = PyList_Append(evs, ev) < 0 || PyList_Append(recs, idx) < 0 || ((nan_loss || nan_rate) && !at) ||
                  (nan_loss && PyList_Append(nonfinite, at) < 0) || (nan_rate && PyList_Append(bad_rate, at) < 0);
        Py_XDECREF(at);
        Py_DECREF(ev);
        Py_DECREF(idx);
        if (bad) goto done;
    }
ok:
    out = PyTuple_Pack(4, evs, recs, nonfinite, bad_rate);
done:
    Py_XDECREF(memo.str);
    Py_XDECREF(evs);
    Py_XDECREF(recs);
    Py_XDECREF(nonfinite);
    Py_XDECREF(bad_rate);
    PyBuffer_Release(&view);
    return out;
}

/* Records (indexes, not in skip) whose header at their start has level F: absl `F...` or TF `...: F `
 * with six fraction digits (_pyscan.fatal_records: F_GLOG / F_TF at a record start). */
static PyObject *fatal_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    PyObject *starts, *skip;
    Py_ssize_t end;
    if (!PyArg_ParseTuple(args, "y*O!nO", &view, &PyList_Type, &starts, &end, &skip)) return NULL;
    uc *b = view.buf;
    if (end > view.len) end = view.len;
    PyObject *out = PySet_New(NULL);
    if (!out) goto fail;
    int use_skip = skip != Py_None && PyObject_Length(skip) > 0;
    Py_ssize_t nrec = PyList_GET_SIZE(starts) - 1;
    for (Py_ssize_t i = 0; i < nrec; i++) {
        Py_ssize_t h;
        if (as_index(starts, i, &h) < 0) goto fail;
        if (h < 0 || h >= end) continue;
        int hit = (b[h] == 'F' && match_absl(b, h, end) >= 0) || (is_digit(b[h]) && match_tf(b, h, end, 1) >= 0);
        if (!hit) continue;
        PyObject *idx = PyLong_FromSsize_t(i);
        if (!idx) goto fail;
        int in = use_skip ? PySequence_Contains(skip, idx) : 0;
        if (in < 0 || (!in && PySet_Add(out, idx) < 0)) {
            Py_DECREF(idx);
            goto fail;
        }
        Py_DECREF(idx);
    }
    PyBuffer_Release(&view);
    return out;
fail:
    Py_XDECREF(out);
    PyBuffer_Release(&view);
    return NULL;
}

/* ---------------------------------------------------------------------------------------------------------
 * The line clock (judge/clock.py): the time of every line that starts with a timed record header, with the
 * year carried from line to line. Twin: _pyscan.clock_lines (its regex _CLOCK_LINE and clock_groups).
 * ------------------------------------------------------------------------------------------------------- */
#define CLOCK_NO_YEAR 2000
#define CLOCK_HALF_YEAR (183 * 86400.0)

static inline int two(uc *b, Py_ssize_t i) { return (b[i] - '0') * 10 + (b[i + 1] - '0'); }

/* days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil) */
static long long days_from_civil(long long y, int m, int d) {
    y -= m <= 2;
    long long era = (y >= 0 ? y : y - 399) / 400;
    long long yoe = y - era * 400;
    long long doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    long long doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* datetime(y, mo, d, hh, mi, ss, tzinfo=UTC).timestamp(): 1 and *out, or 0 where datetime refuses it */
static int civil_seconds(long long y, int mo, int d, int hh, int mi, int ss, double *out) {
    static const int dim[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || y > 9999 || mo < 1 || mo > 12 || hh > 23 || mi > 59 || ss > 59 || d < 1) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (d > dim[mo - 1] + (mo == 2 && leap)) return 0;
    *out = (double)(days_from_civil(y, mo, d) * 86400LL + hh * 3600LL + mi * 60LL + ss);
    return 1;
}

/* `(\.\d{1,9})?` (or `(,\d{3})?` when comma) at i, followed by `stop`: the end of the fraction (i when
 * absent) or -1; *frac gets float(b"0." + digits). */
static Py_ssize_t clock_frac(uc *b, Py_ssize_t i, Py_ssize_t n, int comma, unsigned char stop, double *frac) {
    *frac = 0.0;
    if (i < n && b[i] == (comma ? ',' : '.')) {
        Py_ssize_t j = comma ? (i + 4 <= n && is_digit(b[i + 1]) && is_digit(b[i + 2]) && is_digit(b[i + 3]) ? i + 4 : -1)
                             : digits(b, i + 1, n, 1, 9);
        if (j >= 0 && j < n && b[j] == stop) {
            uint64_t m = 0;
            for (Py_ssize_t k = i + 1; k < j; k++) m = m * 10 + (uint64_t)(b[k] - '0');
            *frac = (double)m / POW10[j - i - 1]; /* both exact: one correctly rounded division, as float() */
            return j;
        }
    }
    return i < n && b[i] == stop ? i : -1;
}

/* `\d{4}-\d\d-\d\d \d\d:\d\d:\d\d` at i */
static int full_date(uc *b, Py_ssize_t i, Py_ssize_t n) {
    static const char shape[] = "dddd-dd-dd dd:dd:dd";
    if (i + 19 > n) return 0;
    for (int k = 0; k < 19; k++)
        if (shape[k] == 'd' ? !is_digit(b[i + k]) : b[i + k] != (unsigned char)shape[k]) return 0;
    return 1;
}

/* The timed header at line start h: 1 (absl: *key at MMDD), 2 (a full date at *key), or 0; *frac: its
 * fraction of a second. The same matches as _pyscan's _ABSL | _TFXLA | _PYLOG at a line start. */
static int clock_header(uc *b, Py_ssize_t h, Py_ssize_t n, Py_ssize_t *key, double *frac) {
    unsigned char c = b[h];
    if (is_level(c) && h + 14 <= n && is_digit(b[h + 1])) { /* absl */
        static const char shape[] = "dddd dd:dd:dd";
        for (int k = 0; k < 13; k++)
            if (shape[k] == 'd' ? !is_digit(b[h + 1 + k]) : b[h + 1 + k] != (unsigned char)shape[k]) return 0;
        Py_ssize_t j = clock_frac(b, h + 14, n, 0, ' ', frac);
        if (j < 0) return 0;
        Py_ssize_t k = j, lim = j + 21 < n ? j + 21 : n;
        while (k < lim && b[k] == ' ') k++;
        if (k - j < 1 || k - j > 20) return 0;
        j = digits(b, k, n, 1, 20);
        if (j < 0 || j >= n || b[j] != ' ' || match_src_close(b, j + 1, n) < 0) return 0;
        *key = h + 1;
        return 1;
    }
    if (is_digit(c)) { /* TF/XLA */
        if (!full_date(b, h, n)) return 0;
        Py_ssize_t j = clock_frac(b, h + 19, n, 0, ':', frac);
        if (j < 0 || j + 4 > n || b[j + 1] != ' ' || !is_level(b[j + 2]) || b[j + 3] != ' ') return 0;
        *key = h;
        return 2;
    }
    static const char *const names[] = {"INFO:", "WARNING:", "ERROR:", "CRITICAL:", "DEBUG:"};
    for (int k = 0; k < 5; k++) { /* python logging */
        Py_ssize_t len = (Py_ssize_t)strlen(names[k]);
        if (!lit(b, h, n, names[k], len)) continue;
        if (!full_date(b, h + len, n) || clock_frac(b, h + len + 19, n, 1, ':', frac) < 0) return 0;
        *key = h + len;
        return 2;
    }
    return 0;
}

typedef struct {
    char *p;
    Py_ssize_t len, cap; /* bytes */
} bytebuf;

static int bb_put(bytebuf *x, const void *v, Py_ssize_t size) {
    if (x->len + size > x->cap) {
        Py_ssize_t cap = x->cap ? x->cap * 2 : 1 << 14;
        char *p = PyMem_Realloc(x->p, (size_t)cap);
        if (!p) return -1;
        x->p = p, x->cap = cap;
    }
    memcpy(x->p + x->len, v, (size_t)size);
    x->len += size;
    return 0;
}

static PyObject *clock_lines(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t end, line;
    long long year, absl_year;
    double last;
    if (!PyArg_ParseTuple(args, "y*nn(LLd)", &view, &end, &line, &year, &absl_year, &last)) return NULL;
    uc *b = (uc *)view.buf;
    Py_ssize_t n = end < view.len ? end : view.len, nlines = 0;
    bytebuf at = {0}, times = {0};
    int failed = 0;
    for (Py_ssize_t h = 0; h < n && !failed; nlines++) {
        line++;
        const uc *nl = memchr(b + h, '\n', (size_t)(n - h));
        Py_ssize_t eol = nl ? (Py_ssize_t)(nl - b) : n;
        Py_ssize_t key;
        double frac, base;
        int kind = clock_header(b, h, eol, &key, &frac);
        h = eol + 1;
        if (kind == 1) {
            if (b[key] == '0' && b[key + 1] == '0') continue; /* the zero-date form: another scale */
            if (year >= 0) absl_year = year;
            int mo = two(b, key), d = two(b, key + 2), hh = two(b, key + 5), mi = two(b, key + 8),
                ss = two(b, key + 11);
            int ok = civil_seconds(absl_year, mo, d, hh, mi, ss, &base);
            if (ok && base < last - CLOCK_HALF_YEAR) { /* the log crossed New Year (false while last is NaN) */
                absl_year++;
                ok = civil_seconds(absl_year, mo, d, hh, mi, ss, &base);
            }
            if (!ok) continue;
            last = base;
        } else if (kind == 2) {
            year = (b[key] - '0') * 1000 + (b[key + 1] - '0') * 100 + two(b, key + 2);
            if (!civil_seconds(year, two(b, key + 5), two(b, key + 8), two(b, key + 11), two(b, key + 14),
                               two(b, key + 17), &base))
                continue;
        } else
            continue;
        long long at_line = (long long)line;
        double t = base + frac;
        failed = bb_put(&at, &at_line, sizeof at_line) < 0 || bb_put(&times, &t, sizeof t) < 0;
    }
    PyBuffer_Release(&view);
    PyObject *out = NULL;
    if (failed)
        PyErr_NoMemory();
    else
        out = Py_BuildValue("y#y#n(LLd)", at.p ? at.p : "", at.len, times.p ? times.p : "", times.len, nlines,
                            year, absl_year, last);
    PyMem_Free(at.p);
    PyMem_Free(times.p);
    return out;
}

/* ---------------------------------------------------------------------------------------------------------
 * Step columns (judge/columns.py): the fields the judge reads of each step event of a parsed batch, as typed
 * arrays, read from the slots configure() found. Twin: _pyscan.step_columns.
 * ------------------------------------------------------------------------------------------------------- */
enum { C_STEP, C_LINE, C_LOSS, C_KIND, C_SEC, C_HSEC, C_TF, C_HTF, C_TOK, C_HTOK, C_TW, C_HTW, C_TS, C_HLOSS, NCOLS };

static PyObject *step_columns(PyObject *self, PyObject *args) {
    PyObject *events, *kinds;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &events, &PyTuple_Type, &kinds)) return NULL;
    if (!step_cls) {
        PyErr_SetString(PyExc_RuntimeError, "configure() was not called");
        return NULL;
    }
    static const int width[NCOLS] = {8, 8, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1, 8, 1};
    static const int opt_field[5] = {F_SEC, F_TF, F_TOK, F_TW, F_TS};
    Py_ssize_t n = PyList_GET_SIZE(events), nsteps = 0, sourced = -1;
    char *col[NCOLS] = {0};
    PyObject *others = PyList_New(0), *out = NULL;
    if (!others) return NULL;
    for (int c = 0; c < NCOLS; c++)
        if (!(col[c] = PyMem_Malloc((size_t)(n ? n : 1) * (size_t)width[c]))) {
            PyErr_NoMemory();
            goto done;
        }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *e = PyList_GET_ITEM(events, i);
        if (Py_TYPE(e) != step_cls) {
            PyObject *at = PyLong_FromSsize_t(i);
            int bad = !at || PyList_Append(others, at) < 0;
            Py_XDECREF(at);
            if (bad) goto done;
            continue;
        }
        PyObject *f[NFIELDS];
        for (int k = 0; k < NFIELDS; k++) {
            f[k] = *(PyObject **)((char *)e + step_offsets[k]);
            if (!f[k]) {
                PyErr_Format(PyExc_AttributeError, "step event without %s", FIELD_NAMES[k]);
                goto done;
            }
        }
        Py_ssize_t j = nsteps;
        long long step = PyLong_AsLongLong(f[F_STEP]), line = PyLong_AsLongLong(f[F_LINE]);
        double loss = f[F_LOSS] == Py_None ? NAN : PyFloat_AsDouble(f[F_LOSS]);
        if (PyErr_Occurred()) goto done;
        col[C_HLOSS][j] = f[F_LOSS] != Py_None;
        memcpy(col[C_STEP] + 8 * j, &step, 8);
        memcpy(col[C_LINE] + 8 * j, &line, 8);
        memcpy(col[C_LOSS] + 8 * j, &loss, 8);
        Py_ssize_t kind = -1;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kinds) && kind < 0; k++)
            if (PyTuple_GET_ITEM(kinds, k) == f[F_KIND]) kind = k;
        if (kind < 0 || kind > 127) {
            PyErr_SetObject(PyExc_KeyError, f[F_KIND]);
            goto done;
        }
        col[C_KIND][j] = (char)kind;
        for (int k = 0; k < 5; k++) {
            PyObject *v = f[opt_field[k]];
            double x = v == Py_None ? NAN : PyFloat_AsDouble(v);
            if (x == -1.0 && PyErr_Occurred()) goto done;
            memcpy(col[C_SEC + 2 * k] + 8 * j, &x, 8);
            if (k < 4) col[C_HSEC + 2 * k][j] = v != Py_None;
        }
        if (sourced < 0 && f[F_SRC] != Py_None) {
            int t = PyObject_IsTrue(f[F_SRC]);
            if (t < 0) goto done;
            if (t) sourced = j;
        }
        nsteps++;
    }
    PyObject *cols = PyTuple_New(NCOLS);
    if (!cols) goto done;
    for (int c = 0; c < NCOLS; c++) {
        PyObject *b = PyBytes_FromStringAndSize(col[c], nsteps * width[c]);
        if (!b) {
            Py_DECREF(cols);
            goto done;
        }
        PyTuple_SET_ITEM(cols, c, b);
    }
    out = Py_BuildValue("NOn", cols, others, sourced);
done:
    for (int c = 0; c < NCOLS; c++) PyMem_Free(col[c]);
    Py_DECREF(others);
    return out;
}

static PyMethodDef methods[] = {
    {"find_headers", find_headers, METH_VARARGS,
     "find_headers(norm, pos) -> record starts (> 0, ascending) at or after pos."},
    {"record_lines", record_lines, METH_VARARGS,
     "record_lines(orig, starts, line0) -> line0 + newlines before each start."},
    {"configure", configure, METH_VARARGS,
     "configure(step_cls, train_kind, rampup_kind, src_fn, header_info_fn): what scan_steps builds with."},
    {"scan_steps", scan_steps, METH_VARARGS,
     "scan_steps(buf, starts, lines, end, early, skip) -> (events, record indexes, non-finite loss at, "
     "non-finite rate at)."},
    {"fatal_records", fatal_records, METH_VARARGS,
     "fatal_records(buf, starts, end, skip) -> records whose header has level F."},
    {"clock_lines", clock_lines, METH_VARARGS,
     "clock_lines(data, end, line0, state) -> (timed lines as int64 bytes, their times as float64 bytes, "
     "lines read, state)."},
    {"step_columns", step_columns, METH_VARARGS,
     "step_columns(events, kinds) -> (columns as bytes, indexes of the other events, first step with a "
     "source or -1)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_native", "The parser's byte scanning in C (twin: parse/_pyscan.py; chosen in parse/accel.py).", -1,
    methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    for (int v = 0; v < 256; v++) FOLD[v] = (unsigned char)((v >= 'A' && v <= 'Z') ? v + 32 : v);
    if (PyType_Ready(&LiteralScannerType) < 0) return NULL;
    PyObject *mod = PyModule_Create(&moduledef);
    if (!mod) return NULL;
    if (PyModule_AddObjectRef(mod, "LiteralScanner", (PyObject *)&LiteralScannerType) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
