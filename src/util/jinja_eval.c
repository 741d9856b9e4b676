/* jinja_eval.c — the back half of the Jinja interpreter (jinja.h): renders
 * the syntax tree that jinja.c builds, over values (jinja_impl.h) that live
 * in one arena per render and are freed with it.
 *
 * Semantics follow Python jinja2 3.1 under transformers' environment:
 *   - printing: Python's str() (None, True, 1.5, ['a', 1], {'k': 'v'});
 *     an undefined value prints as "";
 *   - an undefined value is false, empty when iterated, has length 0 and
 *     takes a default; using it otherwise (an attribute, an operator) is an
 *     error, as jinja2's default Undefined makes it;
 *   - a missing key or attribute, or an index out of range, is undefined;
 *   - for-loop bodies have their own scope (a set inside a loop is gone
 *     after it; namespace() carries values out), if bodies do not;
 *   - numbers: Python's rules (/ gives a float, // and % floor, int + float
 *     is float), 64-bit integers (overflow is an error);
 *   - strings are UTF-8; length, indexing and slicing count code points.
 * Filters: trim, length/count, upper, lower, capitalize, title, default/d,
 * tojson, join, first, last, replace, string, int, list, reverse, items,
 * selectattr, rejectattr, map(attribute=), abs, safe. Tests: defined,
 * undefined, none, string, number, integer, float, boolean, true, false,
 * mapping, iterable, sequence, callable, eq/equalto/==, ne/!=, in, even,
 * odd, divisibleby. Methods: str.strip, lstrip, rstrip, startswith,
 * endswith, split, upper, lower, replace, title, capitalize, join;
 * dict.items, get, keys, values. Globals: raise_exception, namespace,
 * range; strftime_now is refused. Anything else is an error naming it. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jinja_impl.h" /* defines: jarena, jv, node, dyn_jinja */

typedef struct sbuf {
    char *d;
    size_t n, cap;
} sbuf;

typedef struct frame {
    struct frame *up;
    jdict vars;
} frame;

typedef struct rctx {
    jarena ar;
    dyn_error *err;
    int failed;
    sbuf *sink;   /* where output goes (the render's, or a block set's) */
    frame *scope; /* innermost first */
    int64_t steps;
    int depth;
    int ctl;      /* 1: break, 2: continue pending */
} rctx;

static const jv UNDEF = {.k = JV_UNDEF};

static int rfail(rctx *R, const node *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int rfail(rctx *R, const node *at, const char *fmt, ...)
{
    if (R->failed) return -1;
    char msg[420];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dyn_jinja_one_line(msg);
    dyn_error_set(R->err, DYN_ERR_INVALID_ARG, "line %d:%d: %s", at ? at->line : 0, at ? at->col : 0, msg);
    R->failed = 1;
    return -1;
}

static int nomem(rctx *R, const node *at)
{
    if (R->failed) return -1;
    rfail(R, at, "out of memory (a render may use at most %zu MiB)", DYN_JINJA_MAX_MEMORY >> 20);
    R->err->code = DYN_ERR_NOMEM;
    return -1;
}

static int sb_add(rctx *R, const node *at, sbuf *b, const char *s, size_t n)
{
    if (n > DYN_JINJA_MAX_OUTPUT - b->n)
        return rfail(R, at, "the output passes %zu MiB", DYN_JINJA_MAX_OUTPUT >> 20);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *d = realloc(b->d, cap);
        if (d == NULL) return nomem(R, at);
        b->d = d;
        b->cap = cap;
    }
    if (n) memcpy(b->d + b->n, s, n);
    b->n += n;
    b->d[b->n] = '\0';
    return 0;
}

static int sb_z(rctx *R, const node *at, sbuf *b, const char *z) { return sb_add(R, at, b, z, strlen(z)); }

/* Copy b's contents into the arena as a string value; frees b. */
static int sb_take(rctx *R, const node *at, sbuf *b, jv *out)
{
    char *d = jarena_alloc(&R->ar, b->n + 1);
    if (d == NULL) {
        free(b->d);
        return nomem(R, at);
    }
    if (b->n) memcpy(d, b->d, b->n);
    *out = (jv){.k = JV_STR, .u.s = {d, b->n}};
    free(b->d);
    *b = (sbuf){0};
    return 0;
}

static jv mkstr(const char *s, size_t n) { return (jv){.k = JV_STR, .u.s = {s, n}}; }
static jv mkint(int64_t i) { return (jv){.k = JV_INT, .u.i = i}; }
static jv mkbool(int b) { return (jv){.k = JV_BOOL, .u.b = b != 0}; }

static int jeq_str(jstr a, jstr b) { return a.n == b.n && (a.n == 0 || memcmp(a.s, b.s, a.n) == 0); }
static int jstr_is(jstr s, const char *z) { return s.n == strlen(z) && memcmp(s.s, z, s.n) == 0; }

static const char *kind_name(jkind k)
{
    static const char *const names[] = {"an undefined value", "none", "a boolean", "an integer", "a float",
                                        "a string", "a list", "a dict", "a namespace", "a loop", "a function"};
    return names[k];
}

/* ---- lists and dicts ------------------------------------------------------ */
static jlist *list_new(rctx *R, const node *at, size_t n)
{
    jlist *l = jarena_alloc(&R->ar, sizeof *l);
    jv *v = l ? jarena_alloc(&R->ar, sizeof *v * (n ? n : 1)) : NULL;
    if (v == NULL) return nomem(R, at), NULL;
    l->n = n;
    l->v = v;
    return l;
}

static jv *dict_find(const jdict *d, jstr k)
{
    for (size_t i = 0; i < d->n; i++)
        if (jeq_str(d->key[i], k)) return &d->val[i];
    return NULL;
}

static int dict_set(rctx *R, const node *at, jdict *d, jstr k, jv v)
{
    jv *slot = dict_find(d, k);
    if (slot) {
        *slot = v;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        jstr *nk = jarena_alloc(&R->ar, sizeof *nk * cap);
        jv *nv = jarena_alloc(&R->ar, sizeof *nv * cap);
        if (nk == NULL || nv == NULL) return nomem(R, at);
        if (d->n) {
            memcpy(nk, d->key, sizeof *nk * d->n);
            memcpy(nv, d->val, sizeof *nv * d->n);
        }
        d->key = nk;
        d->val = nv;
        d->cap = cap;
    }
    d->key[d->n] = k;
    d->val[d->n++] = v;
    return 0;
}

/* ---- UTF-8 ----------------------------------------------------------- */
static size_t cp_len(const char *s, size_t n)
{
    unsigned char c = (unsigned char)s[0];
    size_t w = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    return w > n ? n : w;
}

static int64_t cp_count(jstr s)
{
    int64_t k = 0;
    for (size_t p = 0; p < s.n; p += cp_len(s.s + p, s.n - p)) k++;
    return k;
}

/* Byte offset of code point i (0 <= i <= count) of s. */
static size_t cp_offset(jstr s, int64_t i)
{
    size_t p = 0;
    for (; i > 0 && p < s.n; i--) p += cp_len(s.s + p, s.n - p);
    return p;
}

/* ---- conversions to text ---------------------------------------------------- */

/* Python's repr() of a float into buf. */
static void fmt_float(double x, char *buf, size_t cap)
{
    if (isnan(x)) { snprintf(buf, cap, "nan"); return; }
    if (isinf(x)) { snprintf(buf, cap, x < 0 ? "-inf" : "inf"); return; }
    char e[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    char digits[24];
    int nd = 0, neg = e[0] == '-';
    const char *p = e + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int ex = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    char out[64];
    int o = 0;
    if (neg) out[o++] = '-';
    if (ex >= -4 && ex < 16) {
        if (ex < 0) {
            o += snprintf(out + o, sizeof out - (size_t)o, "0.");
            for (int k = 0; k < -ex - 1; k++) out[o++] = '0';
            o += snprintf(out + o, sizeof out - (size_t)o, "%s", digits);
        } else {
            for (int k = 0; k <= ex; k++) out[o++] = k < nd ? digits[k] : '0';
            out[o++] = '.';
            if (nd > ex + 1) o += snprintf(out + o, sizeof out - (size_t)o, "%s", digits + ex + 1);
            else out[o++] = '0';
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) o += snprintf(out + o, sizeof out - (size_t)o, ".%s", digits + 1);
        snprintf(out + o, sizeof out - (size_t)o, "e%c%02d", ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
    }
    snprintf(buf, cap, "%s", out);
}

/* Python's repr() of a string. */
static int repr_str(rctx *R, const node *at, sbuf *b, jstr s)
{
    int has_sq = memchr(s.s, '\'', s.n) != NULL, has_dq = memchr(s.s, '"', s.n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (sb_add(R, at, b, &q, 1) != 0) return -1;
    for (size_t k = 0; k < s.n; k++) {
        unsigned char c = (unsigned char)s.s[k];
        char esc[8];
        const char *w = NULL;
        if (c == '\\') w = "\\\\";
        else if (c == '\n') w = "\\n";
        else if (c == '\r') w = "\\r";
        else if (c == '\t') w = "\\t";
        else if ((char)c == q) w = q == '\'' ? "\\'" : "\\\"";
        else if (c < 0x20 || c == 0x7f) snprintf(esc, sizeof esc, "\\x%02x", c), w = esc;
        if (w ? sb_z(R, at, b, w) : sb_add(R, at, b, s.s + k, 1)) return -1;
    }
    return sb_add(R, at, b, &q, 1);
}

static int str_into(rctx *R, const node *at, sbuf *b, jv v, int repr, int depth);

static int repr_seq(rctx *R, const node *at, sbuf *b, jv v, int depth)
{
    int is_list = v.k == JV_LIST, tuple = is_list && v.u.l->tuple;
    if (sb_z(R, at, b, tuple ? "(" : is_list ? "[" : "{") != 0) return -1;
    size_t n = is_list ? v.u.l->n : v.u.d->n;
    for (size_t i = 0; i < n; i++) {
        if (i && sb_z(R, at, b, ", ") != 0) return -1;
        if (!is_list) {
            if (repr_str(R, at, b, v.u.d->key[i]) != 0 || sb_z(R, at, b, ": ") != 0) return -1;
        }
        if (str_into(R, at, b, is_list ? v.u.l->v[i] : v.u.d->val[i], 1, depth + 1) != 0) return -1;
    }
    if (tuple && n == 1 && sb_z(R, at, b, ",") != 0) return -1;
    return sb_z(R, at, b, tuple ? ")" : is_list ? "]" : "}");
}

/* Python's str() (repr 0) or repr() (repr 1) of v, appended to b. */
static int str_into(rctx *R, const node *at, sbuf *b, jv v, int repr, int depth)
{
    char num[64];
    if (depth > DYN_JINJA_MAX_DEPTH) return rfail(R, at, "a value nested more than %d deep", DYN_JINJA_MAX_DEPTH);
    switch (v.k) {
    case JV_UNDEF: return repr ? sb_z(R, at, b, "Undefined") : 0;
    case JV_NONE: return sb_z(R, at, b, "None");
    case JV_BOOL: return sb_z(R, at, b, v.u.b ? "True" : "False");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return sb_z(R, at, b, num);
    case JV_FLOAT: fmt_float(v.u.f, num, sizeof num); return sb_z(R, at, b, num);
    case JV_STR: return repr ? repr_str(R, at, b, v.u.s) : sb_add(R, at, b, v.u.s.s, v.u.s.n);
    case JV_LIST: case JV_DICT: return repr_seq(R, at, b, v, depth);
    case JV_NS: return sb_z(R, at, b, "<Namespace>");
    case JV_LOOP: return sb_z(R, at, b, "<LoopContext>");
    default: return sb_z(R, at, b, "<function>");
    }
}

static int to_jstr(rctx *R, const node *at, jv v, jstr *out)
{
    if (v.k == JV_STR) {
        *out = v.u.s;
        return 0;
    }
    sbuf b = {0};
    jv s;
    if (str_into(R, at, &b, v, 0, 0) != 0 || sb_take(R, at, &b, &s) != 0) {
        free(b.d);
        return -1;
    }
    *out = s.u.s;
    return 0;
}

/* json.dumps(ensure_ascii=False) of a string. */
static int json_str(rctx *R, const node *at, sbuf *b, jstr s)
{
    if (sb_z(R, at, b, "\"") != 0) return -1;
    for (size_t k = 0; k < s.n; k++) {
        unsigned char c = (unsigned char)s.s[k];
        char esc[8];
        const char *w = NULL;
        if (c == '"') w = "\\\"";
        else if (c == '\\') w = "\\\\";
        else if (c == '\n') w = "\\n";
        else if (c == '\r') w = "\\r";
        else if (c == '\t') w = "\\t";
        else if (c == '\b') w = "\\b";
        else if (c == '\f') w = "\\f";
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c), w = esc;
        if (w ? sb_z(R, at, b, w) : sb_add(R, at, b, s.s + k, 1)) return -1;
    }
    return sb_z(R, at, b, "\"");
}

typedef struct json_opt {
    int indent;   /* < 0: none */
    int sort_keys;
    jstr item_sep, key_sep;
} json_opt;

static int json_into(rctx *R, const node *at, sbuf *b, jv v, const json_opt *o, int level);

static int json_newline(rctx *R, const node *at, sbuf *b, const json_opt *o, int level)
{
    if (o->indent < 0) return 0;
    if (sb_z(R, at, b, "\n") != 0) return -1;
    for (int k = 0; k < o->indent * level; k++)
        if (sb_z(R, at, b, " ") != 0) return -1;
    return 0;
}

/* The order in which to write dict d's entries (sorted keys or as is). */
static size_t *json_order(rctx *R, const node *at, const jdict *d, int sort)
{
    size_t *ord = jarena_alloc(&R->ar, sizeof *ord * (d->n ? d->n : 1));
    if (ord == NULL) return nomem(R, at), NULL;
    for (size_t i = 0; i < d->n; i++) ord[i] = i;
    for (size_t i = 1; sort && i < d->n; i++) /* insertion sort: dicts in templates are small */
        for (size_t j = i; j > 0; j--) {
            jstr x = d->key[ord[j - 1]], y = d->key[ord[j]];
            size_t m = x.n < y.n ? x.n : y.n;
            int c = memcmp(x.s, y.s, m);
            if (c < 0 || (c == 0 && x.n <= y.n)) break;
            size_t t = ord[j];
            ord[j] = ord[j - 1];
            ord[j - 1] = t;
        }
    return ord;
}

static int json_seq(rctx *R, const node *at, sbuf *b, jv v, const json_opt *o, int level)
{
    int is_list = v.k == JV_LIST;
    size_t n = is_list ? v.u.l->n : v.u.d->n;
    if (n == 0) return sb_z(R, at, b, is_list ? "[]" : "{}");
    size_t *ord = is_list ? NULL : json_order(R, at, v.u.d, o->sort_keys);
    if (!is_list && ord == NULL) return -1;
    if (sb_z(R, at, b, is_list ? "[" : "{") != 0) return -1;
    for (size_t i = 0; i < n; i++) {
        if (i && sb_add(R, at, b, o->item_sep.s, o->item_sep.n) != 0) return -1;
        if (json_newline(R, at, b, o, level + 1) != 0) return -1;
        if (!is_list && (json_str(R, at, b, v.u.d->key[ord[i]]) != 0 ||
                         sb_add(R, at, b, o->key_sep.s, o->key_sep.n) != 0))
            return -1;
        if (json_into(R, at, b, is_list ? v.u.l->v[i] : v.u.d->val[ord[i]], o, level + 1) != 0) return -1;
    }
    if (json_newline(R, at, b, o, level) != 0) return -1;
    return sb_z(R, at, b, is_list ? "]" : "}");
}

static int json_into(rctx *R, const node *at, sbuf *b, jv v, const json_opt *o, int level)
{
    char num[64];
    if (level > DYN_JINJA_MAX_DEPTH) return rfail(R, at, "a value nested more than %d deep", DYN_JINJA_MAX_DEPTH);
    switch (v.k) {
    case JV_NONE: return sb_z(R, at, b, "null");
    case JV_BOOL: return sb_z(R, at, b, v.u.b ? "true" : "false");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return sb_z(R, at, b, num);
    case JV_FLOAT:
        if (isnan(v.u.f)) return sb_z(R, at, b, "NaN");
        if (isinf(v.u.f)) return sb_z(R, at, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        fmt_float(v.u.f, num, sizeof num);
        return sb_z(R, at, b, num);
    case JV_STR: return json_str(R, at, b, v.u.s);
    case JV_LIST: case JV_DICT: return json_seq(R, at, b, v, o, level);
    default: return rfail(R, at, "tojson: %s is not JSON serializable", kind_name(v.k));
    }
}

/* ---- truth, equality, order ------------------------------------------------- */
static int truthy(jv v)
{
    switch (v.k) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n > 0;
    case JV_LIST: return v.u.l->n > 0;
    case JV_DICT: return v.u.d->n > 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.k == JV_INT || v.k == JV_FLOAT || v.k == JV_BOOL; }
static double num_f(jv v) { return v.k == JV_FLOAT ? v.u.f : v.k == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t num_i(jv v) { return v.k == JV_INT ? v.u.i : v.u.b; }

static int jv_eq(jv a, jv b, int depth)
{
    if (depth > DYN_JINJA_MAX_DEPTH) return 0;
    if (is_num(a) && is_num(b)) {
        if (a.k == JV_FLOAT || b.k == JV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.k != b.k) return 0;
    switch (a.k) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return jeq_str(a.u.s, b.u.s);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jv_eq(a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
        return 1;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jv *o = dict_find(b.u.d, a.u.d->key[i]);
            if (o == NULL || !jv_eq(a.u.d->val[i], *o, depth + 1)) return 0;
        }
        return 1;
    case JV_NS: return a.u.d == b.u.d;
    case JV_LOOP: return a.u.lp == b.u.lp;
    default: return a.u.fn == b.u.fn;
    }
}

/* a < b (or b < a when swap) by Python's rules for numbers, strings, lists. */
static int jv_less(rctx *R, const node *at, jv a, jv b, int *out, int depth)
{
    if (is_num(a) && is_num(b)) {
        *out = (a.k == JV_FLOAT || b.k == JV_FLOAT) ? num_f(a) < num_f(b) : num_i(a) < num_i(b);
        return 0;
    }
    if (a.k == JV_STR && b.k == JV_STR) {
        size_t m = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = m ? memcmp(a.u.s.s, b.u.s.s, m) : 0;
        *out = c < 0 || (c == 0 && a.u.s.n < b.u.s.n);
        return 0;
    }
    if (a.k == JV_LIST && b.k == JV_LIST && depth < DYN_JINJA_MAX_DEPTH) {
        for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
            if (jv_eq(a.u.l->v[i], b.u.l->v[i], 0)) continue;
            return jv_less(R, at, a.u.l->v[i], b.u.l->v[i], out, depth + 1);
        }
        *out = a.u.l->n < b.u.l->n;
        return 0;
    }
    return rfail(R, at, "cannot order %s and %s", kind_name(a.k), kind_name(b.k));
}

/* needle in hay (Python's `in`). */
static int jv_in(rctx *R, const node *at, jv needle, jv hay, int *out)
{
    if (hay.k == JV_STR) {
        if (needle.k != JV_STR) return rfail(R, at, "'in <string>' needs a string on the left, not %s",
                                             kind_name(needle.k));
        jstr h = hay.u.s, n = needle.u.s;
        *out = n.n == 0;
        for (size_t p = 0; !*out && n.n <= h.n && p <= h.n - n.n; p++) *out = memcmp(h.s + p, n.s, n.n) == 0;
        return 0;
    }
    if (hay.k == JV_LIST) {
        *out = 0;
        for (size_t i = 0; i < hay.u.l->n && !*out; i++) *out = jv_eq(needle, hay.u.l->v[i], 0);
        return 0;
    }
    if (hay.k == JV_DICT || hay.k == JV_NS) {
        *out = needle.k == JV_STR && dict_find(hay.u.d, needle.u.s) != NULL;
        return 0;
    }
    if (hay.k == JV_UNDEF) return rfail(R, at, "'in' an undefined value");
    return rfail(R, at, "'in' %s (not iterable)", kind_name(hay.k));
}

static int compare(rctx *R, const node *at, int op, jv a, jv b, int *out)
{
    int lt;
    switch (op) {
    case OP_EQ: *out = jv_eq(a, b, 0); return 0;
    case OP_NE: *out = !jv_eq(a, b, 0); return 0;
    case OP_LT: return jv_less(R, at, a, b, out, 0);
    case OP_GT: return jv_less(R, at, b, a, out, 0);
    case OP_LE: if (jv_less(R, at, b, a, &lt, 0) != 0) return -1; *out = !lt; return 0;
    case OP_GE: if (jv_less(R, at, a, b, &lt, 0) != 0) return -1; *out = !lt; return 0;
    case OP_IN: return jv_in(R, at, a, b, out);
    default: if (jv_in(R, at, a, b, &lt) != 0) return -1; *out = !lt; return 0;
    }
}

/* ---- arithmetic ------------------------------------------------------------ */
static int concat_strs(rctx *R, const node *at, jstr a, jstr b, jv *out)
{
    char *d = jarena_alloc(&R->ar, a.n + b.n + 1);
    if (d == NULL) return nomem(R, at);
    if (a.n) memcpy(d, a.s, a.n);
    if (b.n) memcpy(d + a.n, b.s, b.n);
    *out = mkstr(d, a.n + b.n);
    return 0;
}

static int int_arith(rctx *R, const node *at, int op, int64_t x, int64_t y, jv *out)
{
    int64_t r = 0;
    int ovf = 0;
    switch (op) {
    case OP_ADD: ovf = __builtin_add_overflow(x, y, &r); break;
    case OP_SUB: ovf = __builtin_sub_overflow(x, y, &r); break;
    case OP_MUL: ovf = __builtin_mul_overflow(x, y, &r); break;
    case OP_FLOORDIV: case OP_MOD:
        if (y == 0) return rfail(R, at, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) { ovf = 1; break; }
        r = op == OP_FLOORDIV ? x / y : x % y;
        if (op == OP_FLOORDIV && (x % y != 0) && ((x < 0) != (y < 0))) r--;
        if (op == OP_MOD && r != 0 && ((r < 0) != (y < 0))) r += y;
        break;
    default: /* OP_POW */
        if (y < 0) {
            *out = (jv){.k = JV_FLOAT, .u.f = pow((double)x, (double)y)};
            return 0;
        }
        r = 1;
        for (int64_t k = 0; k < y && !ovf; k++) ovf = __builtin_mul_overflow(r, x, &r);
        break;
    }
    if (ovf) return rfail(R, at, "integer overflow (64 bits)");
    *out = mkint(r);
    return 0;
}

static int float_arith(rctx *R, const node *at, int op, double x, double y, jv *out)
{
    double r;
    switch (op) {
    case OP_ADD: r = x + y; break;
    case OP_SUB: r = x - y; break;
    case OP_MUL: r = x * y; break;
    case OP_DIV: case OP_FLOORDIV: case OP_MOD:
        if (y == 0) return rfail(R, at, "float division by zero");
        if (op == OP_DIV) r = x / y;
        else if (op == OP_FLOORDIV) r = floor(x / y);
        else {
            r = fmod(x, y);
            if (r != 0 && ((r < 0) != (y < 0))) r += y;
        }
        break;
    default: r = pow(x, y); break;
    }
    *out = (jv){.k = JV_FLOAT, .u.f = r};
    return 0;
}

/* str * int or list * int. */
static int repeat(rctx *R, const node *at, jv seq, int64_t times, jv *out)
{
    if (times < 0) times = 0;
    if (seq.k == JV_STR) {
        if (seq.u.s.n && (uint64_t)times > DYN_JINJA_MAX_OUTPUT / seq.u.s.n)
            return rfail(R, at, "a string repeated past %zu MiB", DYN_JINJA_MAX_OUTPUT >> 20);
        size_t n = seq.u.s.n * (size_t)times;
        char *d = jarena_alloc(&R->ar, n + 1);
        if (d == NULL) return nomem(R, at);
        for (int64_t k = 0; k < times; k++) memcpy(d + (size_t)k * seq.u.s.n, seq.u.s.s, seq.u.s.n);
        *out = mkstr(d, n);
        return 0;
    }
    if (seq.u.l->n && (uint64_t)times > (DYN_JINJA_MAX_MEMORY / sizeof(jv)) / seq.u.l->n)
        return rfail(R, at, "a list repeated past the memory limit");
    jlist *l = list_new(R, at, seq.u.l->n * (size_t)times);
    if (l == NULL) return -1;
    for (int64_t k = 0; k < times; k++) memcpy(l->v + (size_t)k * seq.u.l->n, seq.u.l->v, sizeof(jv) * seq.u.l->n);
    *out = (jv){.k = JV_LIST, .u.l = l};
    return 0;
}

static const char *op_name(int op)
{
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**", "~"};
    return op >= OP_ADD && op <= OP_CONCAT ? names[op] : "?";
}

static int arith(rctx *R, const node *at, int op, jv a, jv b, jv *out)
{
    if (op == OP_CONCAT) {
        jstr x, y;
        if (to_jstr(R, at, a, &x) != 0 || to_jstr(R, at, b, &y) != 0) return -1;
        return concat_strs(R, at, x, y, out);
    }
    if (a.k == JV_UNDEF || b.k == JV_UNDEF)
        return rfail(R, at, "'%s' with an undefined value", op_name(op));
    if (is_num(a) && is_num(b)) {
        if (op == OP_DIV || a.k == JV_FLOAT || b.k == JV_FLOAT) return float_arith(R, at, op, num_f(a), num_f(b), out);
        return int_arith(R, at, op, num_i(a), num_i(b), out);
    }
    if (op == OP_ADD && a.k == JV_STR && b.k == JV_STR) return concat_strs(R, at, a.u.s, b.u.s, out);
    if (op == OP_ADD && a.k == JV_LIST && b.k == JV_LIST) {
        jlist *l = list_new(R, at, a.u.l->n + b.u.l->n);
        if (l == NULL) return -1;
        memcpy(l->v, a.u.l->v, sizeof(jv) * a.u.l->n);
        memcpy(l->v + a.u.l->n, b.u.l->v, sizeof(jv) * b.u.l->n);
        *out = (jv){.k = JV_LIST, .u.l = l};
        return 0;
    }
    if (op == OP_MUL && (a.k == JV_STR || a.k == JV_LIST) && (b.k == JV_INT || b.k == JV_BOOL))
        return repeat(R, at, a, num_i(b), out);
    if (op == OP_MUL && (b.k == JV_STR || b.k == JV_LIST) && (a.k == JV_INT || a.k == JV_BOOL))
        return repeat(R, at, b, num_i(a), out);
    if (op == OP_MOD && a.k == JV_STR) return rfail(R, at, "'%%' string formatting is not supported");
    return rfail(R, at, "unsupported operand types for %s: %s and %s", op_name(op), kind_name(a.k), kind_name(b.k));
}

/* ---- attributes, items, slices ---------------------------------------------- */
static int loop_attr(rctx *R, const node *at, const jloop *lp, jstr name, jv *out)
{
    int64_t i = lp->index0, n = lp->length;
    if (jstr_is(name, "index")) *out = mkint(i + 1);
    else if (jstr_is(name, "index0")) *out = mkint(i);
    else if (jstr_is(name, "revindex")) *out = mkint(n - i);
    else if (jstr_is(name, "revindex0")) *out = mkint(n - i - 1);
    else if (jstr_is(name, "first")) *out = mkbool(i == 0);
    else if (jstr_is(name, "last")) *out = mkbool(i == n - 1);
    else if (jstr_is(name, "length")) *out = mkint(n);
    else if (jstr_is(name, "previtem")) *out = i > 0 ? lp->items[i - 1] : UNDEF;
    else if (jstr_is(name, "nextitem")) *out = i + 1 < n ? lp->items[i + 1] : UNDEF;
    else if (jstr_is(name, "depth") || jstr_is(name, "depth0") || jstr_is(name, "cycle") || jstr_is(name, "changed"))
        return rfail(R, at, "loop.%.*s is not supported", (int)name.n, name.s);
    else *out = UNDEF;
    return 0;
}

/* obj.name (jinja2: an attribute, else the item). */
static int get_attr(rctx *R, const node *at, jv obj, jstr name, jv *out)
{
    if (obj.k == JV_UNDEF) return rfail(R, at, "'%.*s' of an undefined value", (int)name.n, name.s);
    if (obj.k == JV_DICT || obj.k == JV_NS) {
        jv *v = dict_find(obj.u.d, name);
        *out = v ? *v : UNDEF;
        return 0;
    }
    if (obj.k == JV_LOOP) return loop_attr(R, at, obj.u.lp, name, out);
    *out = UNDEF;
    return 0;
}

/* Python's index normalisation: -1 is the last; out of range gives -1. */
static int64_t norm_index(int64_t i, int64_t n)
{
    if (i < 0) i += n;
    return i < 0 || i >= n ? -1 : i;
}

static int get_item(rctx *R, const node *at, jv obj, jv key, jv *out)
{
    if (obj.k == JV_UNDEF) return rfail(R, at, "a subscript of an undefined value");
    *out = UNDEF;
    if ((obj.k == JV_DICT || obj.k == JV_NS) && key.k == JV_STR) {
        jv *v = dict_find(obj.u.d, key.u.s);
        if (v) *out = *v;
    } else if (obj.k == JV_LIST && (key.k == JV_INT || key.k == JV_BOOL)) {
        int64_t i = norm_index(num_i(key), (int64_t)obj.u.l->n);
        if (i >= 0) *out = obj.u.l->v[i];
    } else if (obj.k == JV_STR && (key.k == JV_INT || key.k == JV_BOOL)) {
        int64_t i = norm_index(num_i(key), cp_count(obj.u.s));
        if (i >= 0) {
            size_t p = cp_offset(obj.u.s, i);
            *out = mkstr(obj.u.s.s + p, cp_len(obj.u.s.s + p, obj.u.s.n - p));
        }
    } else if (obj.k == JV_LOOP && key.k == JV_STR) {
        return loop_attr(R, at, obj.u.lp, key.u.s, out);
    }
    return 0;
}

/* Python's slice.indices: start, stop, step over length n. */
static int slice_bounds(rctx *R, const node *at, jv vs[3], int64_t n, int64_t *start, int64_t *stop, int64_t *step)
{
    for (int k = 0; k < 3; k++)
        if (vs[k].k != JV_NONE && vs[k].k != JV_UNDEF && vs[k].k != JV_INT && vs[k].k != JV_BOOL)
            return rfail(R, at, "slice indices must be integers, not %s", kind_name(vs[k].k));
    *step = vs[2].k == JV_INT || vs[2].k == JV_BOOL ? num_i(vs[2]) : 1;
    if (*step == 0) return rfail(R, at, "slice step cannot be zero");
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? n - 1 : n;
    for (int k = 0; k < 2; k++) {
        int64_t *dst = k == 0 ? start : stop;
        if (vs[k].k != JV_INT && vs[k].k != JV_BOOL) {
            *dst = (k == 0) == (*step > 0) ? lo : hi;
            continue;
        }
        int64_t v = num_i(vs[k]);
        if (v < 0) {
            v += n;
            if (v < lo) v = lo;
        } else if (v > hi) {
            v = hi;
        }
        *dst = v;
    }
    return 0;
}

static int get_slice(rctx *R, const node *at, jv obj, jv vs[3], jv *out)
{
    if (obj.k != JV_LIST && obj.k != JV_STR) return rfail(R, at, "cannot slice %s", kind_name(obj.k));
    int64_t n = obj.k == JV_LIST ? (int64_t)obj.u.l->n : cp_count(obj.u.s), a = 0, b = 0, st = 1;
    if (slice_bounds(R, at, vs, n, &a, &b, &st) != 0) return -1;
    int64_t cnt = 0;
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) cnt++;
    if (obj.k == JV_LIST) {
        jlist *l = list_new(R, at, (size_t)cnt);
        if (l == NULL) return -1;
        int64_t k = 0;
        for (int64_t i = a; st > 0 ? i < b : i > b; i += st) l->v[k++] = obj.u.l->v[i];
        *out = (jv){.k = JV_LIST, .u.l = l};
        return 0;
    }
    sbuf sb = {0};
    for (int64_t i = a; st > 0 ? i < b : i > b; i += st) {
        size_t p = cp_offset(obj.u.s, i);
        if (sb_add(R, at, &sb, obj.u.s.s + p, cp_len(obj.u.s.s + p, obj.u.s.n - p)) != 0) return free(sb.d), -1;
    }
    return sb_take(R, at, &sb, out);
}

/* The items of an iterable as a list: a list itself, a dict's keys, a
 * string's characters; undefined is empty. */
static int iterate(rctx *R, const node *at, jv v, jlist **out)
{
    static jlist empty = {0, NULL, 0};
    if (v.k == JV_LIST) { *out = v.u.l; return 0; }
    if (v.k == JV_UNDEF) { *out = &empty; return 0; }
    if (v.k == JV_DICT) {
        jlist *l = list_new(R, at, v.u.d->n);
        if (l == NULL) return -1;
        for (size_t i = 0; i < v.u.d->n; i++) l->v[i] = (jv){.k = JV_STR, .u.s = v.u.d->key[i]};
        *out = l;
        return 0;
    }
    if (v.k == JV_STR) {
        jlist *l = list_new(R, at, (size_t)cp_count(v.u.s));
        if (l == NULL) return -1;
        size_t k = 0;
        for (size_t p = 0; p < v.u.s.n; k++) {
            size_t w = cp_len(v.u.s.s + p, v.u.s.n - p);
            l->v[k] = mkstr(v.u.s.s + p, w);
            p += w;
        }
        *out = l;
        return 0;
    }
    return rfail(R, at, "%s is not iterable", kind_name(v.k));
}

/* ---- calls: arguments ----------------------------------------------------- */
#define MAX_ARGS 8
typedef struct args {
    jv pos[MAX_ARGS];
    int npos;
    jv kw[MAX_ARGS];
    jstr kwn[MAX_ARGS];
    int nkw;
} args;

static int eval(rctx *R, const node *n, jv *out);

static int eval_args(rctx *R, const node *n, args *a)
{
    a->npos = n->kids.n;
    a->nkw = n->kids2.n;
    if (a->npos > MAX_ARGS || a->nkw > MAX_ARGS) return rfail(R, n, "more than %d arguments", MAX_ARGS);
    for (int k = 0; k < a->npos; k++)
        if (eval(R, n->kids.v[k], &a->pos[k]) != 0) return -1;
    for (int k = 0; k < a->nkw; k++) {
        a->kwn[k] = n->knames[k];
        if (eval(R, n->kids2.v[k], &a->kw[k]) != 0) return -1;
    }
    return 0;
}

/* Argument i (positional) or name (keyword), else dflt. */
static jv arg(const args *a, int i, const char *name, jv dflt)
{
    if (i >= 0 && i < a->npos) return a->pos[i];
    for (int k = 0; name && k < a->nkw; k++)
        if (jstr_is(a->kwn[k], name)) return a->kw[k];
    return dflt;
}

/* Refuse more than max positional arguments or a keyword not in names
 * (NULL-terminated). */
static int check_args(rctx *R, const node *at, const args *a, const char *what, int max, const char *const *names)
{
    if (a->npos > max) return rfail(R, at, "%s takes at most %d arguments, %d given", what, max, a->npos);
    for (int k = 0; k < a->nkw; k++) {
        int ok = 0;
        for (int j = 0; names && names[j]; j++) ok |= jstr_is(a->kwn[k], names[j]);
        if (!ok) return rfail(R, at, "%s: unexpected keyword argument '%.*s'", what, (int)a->kwn[k].n, a->kwn[k].s);
    }
    return 0;
}

static int need_str(rctx *R, const node *at, jv v, const char *what, jstr *out)
{
    if (v.k != JV_STR) return rfail(R, at, "%s needs a string, not %s", what, kind_name(v.k));
    *out = v.u.s;
    return 0;
}

/* ---- string helpers ----------------------------------------------------------- */
static int is_ws_at(jstr s, size_t p, size_t *w);

/* The first occurrence of needle[0..m) in hay[0..n), or NULL (m > 0). */
static const char *jmemmem(const char *hay, size_t n, const char *needle, size_t m)
{
    if (m == 0 || m > n) return m == 0 ? hay : NULL;
    for (size_t p = 0; p + m <= n; p++) {
        const char *f = memchr(hay + p, needle[0], n - m + 1 - p);
        if (f == NULL) return NULL;
        p = (size_t)(f - hay);
        if (memcmp(f, needle, m) == 0) return f;
    }
    return NULL;
}

/* Strip chars (NULL: Unicode white space) from the left (which & 1) and
 * right (which & 2) of s. */
static jstr strip_chars(jstr s, const jstr *chars, int which)
{
    size_t a = 0, b = s.n, w;
    for (;;) {
        if (!(which & 1) || a >= b) break;
        w = cp_len(s.s + a, b - a);
        int hit = chars ? chars->n && jmemmem(chars->s, chars->n, s.s + a, w) != NULL : is_ws_at(s, a, &w);
        if (!hit) break;
        a += w;
    }
    while ((which & 2) && b > a) {
        size_t q = b - 1;
        while (q > a && ((unsigned char)s.s[q] & 0xc0) == 0x80) q--;
        w = b - q;
        int hit = chars ? chars->n && jmemmem(chars->s, chars->n, s.s + q, w) != NULL
                        : dyn_jinja_rstrip_len(s.s + q, w) == 0;
        if (!hit) break;
        b = q;
    }
    return (jstr){s.s + a, b - a};
}

static int is_ws_at(jstr s, size_t p, size_t *w)
{
    *w = cp_len(s.s + p, s.n - p);
    return dyn_jinja_rstrip_len(s.s + p, *w) == 0;
}

/* ASCII case mapping: mode 'u' upper, 'l' lower, 'c' capitalize, 't'
 * jinja2's title filter, 'T' Python's str.title. */
static int case_map(rctx *R, const node *at, jstr s, char mode, jv *out)
{
    char *d = jarena_alloc(&R->ar, s.n + 1);
    if (d == NULL) return nomem(R, at);
    int start = 1; /* at the start of a word */
    for (size_t k = 0; k < s.n; k++) {
        unsigned char c = (unsigned char)s.s[k];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up = mode == 'u' || ((mode == 'c' && k == 0) || ((mode == 't' || mode == 'T') && start));
        if (mode == 'l' || mode == 'c' || mode == 't' || mode == 'T') up = up && alpha;
        d[k] = (char)(up ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (mode == 'u' ? c : (c >= 'A' && c <= 'Z' ? c + 32 : c)));
        if (mode == 't') start = c == ' ' || c == '-' || c == '(' || c == '{' || c == '[' || c == '<' ||
                                 (c >= 0x09 && c <= 0x0d);
        else if (mode == 'T') start = !alpha && c < 0x80;
    }
    *out = mkstr(d, s.n);
    return 0;
}

static int str_replace(rctx *R, const node *at, jstr s, jstr old, jstr rep, int64_t count, jv *out)
{
    sbuf b = {0};
    size_t p = 0;
    int64_t done = 0;
    if (old.n == 0) { /* Python inserts rep between every character */
        for (; (count < 0 || done < count) && p <= s.n; done++) {
            if (sb_add(R, at, &b, rep.s, rep.n) != 0) return free(b.d), -1;
            if (p == s.n) { p++; break; }
            size_t w = cp_len(s.s + p, s.n - p);
            if (sb_add(R, at, &b, s.s + p, w) != 0) return free(b.d), -1;
            p += w;
        }
        if (p < s.n && sb_add(R, at, &b, s.s + p, s.n - p) != 0) return free(b.d), -1;
        return sb_take(R, at, &b, out);
    }
    while (p < s.n && (count < 0 || done < count)) {
        const char *f = jmemmem(s.s + p, s.n - p, old.s, old.n);
        if (f == NULL) break;
        if (sb_add(R, at, &b, s.s + p, (size_t)(f - s.s) - p) != 0 || sb_add(R, at, &b, rep.s, rep.n) != 0)
            return free(b.d), -1;
        p = (size_t)(f - s.s) + old.n;
        done++;
    }
    if (sb_add(R, at, &b, s.s + p, s.n - p) != 0) return free(b.d), -1;
    return sb_take(R, at, &b, out);
}

/* Python's str.split(sep=None / sep, maxsplit). */
static int str_split(rctx *R, const node *at, jstr s, jv sep, int64_t maxsplit, jv *out)
{
    size_t cap = 8, n = 0;
    jv *v = jarena_alloc(&R->ar, sizeof *v * cap);
    if (v == NULL) return nomem(R, at);
    size_t p = 0, w;
    for (;;) {
        size_t a, b;
        if (sep.k == JV_STR) {
            if (sep.u.s.n == 0) return rfail(R, at, "split: empty separator");
            const char *f = maxsplit >= 0 && (int64_t)n >= maxsplit ? NULL : jmemmem(s.s + p, s.n - p, sep.u.s.s, sep.u.s.n);
            a = p;
            b = f ? (size_t)(f - s.s) : s.n;
            p = f ? b + sep.u.s.n : s.n + 1;
        } else {
            while (p < s.n && is_ws_at(s, p, &w)) p += w;
            if (p >= s.n) break;
            a = p;
            if (maxsplit >= 0 && (int64_t)n >= maxsplit) {
                b = s.n;
                p = s.n;
            } else {
                while (p < s.n && !is_ws_at(s, p, &w)) p += cp_len(s.s + p, s.n - p);
                b = p;
            }
        }
        if (n == cap) {
            jv *nv = jarena_alloc(&R->ar, sizeof *nv * cap * 2);
            if (nv == NULL) return nomem(R, at);
            memcpy(nv, v, sizeof *v * n);
            v = nv;
            cap *= 2;
        }
        v[n++] = mkstr(s.s + a, b - a);
        if (p > s.n) break;
    }
    jlist *l = list_new(R, at, n);
    if (l == NULL) return -1;
    memcpy(l->v, v, sizeof *v * n);
    *out = (jv){.k = JV_LIST, .u.l = l};
    return 0;
}

/* sep.join(items), each item as str(). */
static int join_items(rctx *R, const node *at, jlist *items, jstr sep, jstr attr, jv *out)
{
    sbuf b = {0};
    for (size_t i = 0; i < items->n; i++) {
        jv x = items->v[i];
        if (attr.s && get_attr(R, at, x, attr, &x) != 0) return free(b.d), -1;
        if ((i && sb_add(R, at, &b, sep.s, sep.n) != 0) || str_into(R, at, &b, x, 0, 0) != 0) return free(b.d), -1;
    }
    return sb_take(R, at, &b, out);
}

/* ---- filters ------------------------------------------------------------- */
static int test_apply(rctx *R, const node *at, jstr name, jv v, const args *a, int *out);

/* selectattr / rejectattr (reject != 0): items whose attribute passes the
 * test (default: truthy). */
static int filter_select(rctx *R, const node *at, jv v, const args *a, int reject, jv *out)
{
    jlist *items, *l;
    jstr attr = {0}, test = {0};
    if (iterate(R, at, v, &items) != 0 || need_str(R, at, arg(a, 0, NULL, UNDEF), "selectattr's attribute", &attr))
        return -1;
    jv tn = arg(a, 1, NULL, UNDEF);
    if (tn.k != JV_UNDEF && need_str(R, at, tn, "selectattr's test", &test) != 0) return -1;
    args rest = {0};
    for (int k = 2; k < a->npos; k++) rest.pos[rest.npos++] = a->pos[k];
    if ((l = list_new(R, at, items->n)) == NULL) return -1;
    l->n = 0;
    for (size_t i = 0; i < items->n; i++) {
        jv x;
        int pass;
        if (get_attr(R, at, items->v[i], attr, &x) != 0) return -1;
        if (test.s == NULL) pass = truthy(x);
        else if (test_apply(R, at, test, x, &rest, &pass) != 0) return -1;
        if (pass != reject) l->v[l->n++] = items->v[i];
    }
    *out = (jv){.k = JV_LIST, .u.l = l};
    return 0;
}

static int filter_int(rctx *R, const node *at, jv v, const args *a, jv *out)
{
    jv dflt = arg(a, 0, "default", mkint(0));
    if (v.k == JV_INT || v.k == JV_BOOL) { *out = mkint(num_i(v)); return 0; }
    if (v.k == JV_FLOAT) {
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18) return rfail(R, at, "int: %g out of range", v.u.f);
        *out = mkint((int64_t)v.u.f);
        return 0;
    }
    *out = dflt;
    if (v.k != JV_STR) return 0;
    char buf[64];
    jstr s = strip_chars(v.u.s, NULL, 3);
    if (s.n == 0 || s.n >= sizeof buf) return 0;
    memcpy(buf, s.s, s.n);
    buf[s.n] = '\0';
    char *end;
    long long i = strtoll(buf, &end, 10);
    if (*end == '\0') { *out = mkint(i); return 0; }
    double f = strtod(buf, &end);
    if (*end == '\0' && isfinite(f) && fabs(f) < 9.2e18) *out = mkint((int64_t)f);
    return 0;
}

static int filter_tojson(rctx *R, const node *at, jv v, const args *a, jv *out)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (check_args(R, at, a, "tojson", 4, names) != 0) return -1;
    if (truthy(arg(a, 0, "ensure_ascii", mkbool(0)))) return rfail(R, at, "tojson: ensure_ascii is not supported");
    jv ind = arg(a, 1, "indent", (jv){.k = JV_NONE}), seps = arg(a, 2, "separators", (jv){.k = JV_NONE});
    json_opt o = {.indent = -1, .sort_keys = truthy(arg(a, 3, "sort_keys", mkbool(0)))};
    if (ind.k == JV_INT && ind.u.i >= 0 && ind.u.i <= 64) o.indent = (int)ind.u.i;
    else if (ind.k != JV_NONE) return rfail(R, at, "tojson: indent must be an integer from 0 to 64");
    o.item_sep = o.indent >= 0 ? (jstr){",", 1} : (jstr){", ", 2};
    o.key_sep = (jstr){": ", 2};
    if (seps.k == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].k == JV_STR && seps.u.l->v[1].k == JV_STR) {
        o.item_sep = seps.u.l->v[0].u.s;
        o.key_sep = seps.u.l->v[1].u.s;
    } else if (seps.k != JV_NONE) {
        return rfail(R, at, "tojson: separators must be a list of two strings");
    }
    sbuf b = {0};
    if (json_into(R, at, &b, v, &o, 0) != 0) return free(b.d), -1;
    return sb_take(R, at, &b, out);
}

static int filter_length(rctx *R, const node *at, jv v, jv *out)
{
    switch (v.k) {
    case JV_UNDEF: *out = mkint(0); return 0;
    case JV_STR: *out = mkint(cp_count(v.u.s)); return 0;
    case JV_LIST: *out = mkint((int64_t)v.u.l->n); return 0;
    case JV_DICT: *out = mkint((int64_t)v.u.d->n); return 0;
    default: return rfail(R, at, "length of %s", kind_name(v.k));
    }
}

static int filter_map(rctx *R, const node *at, jv v, const args *a, jv *out)
{
    jv attr = arg(a, -1, "attribute", UNDEF);
    if (a->npos > 0 || attr.k != JV_STR) return rfail(R, at, "map: only map(attribute='...') is supported");
    jlist *items, *l;
    if (iterate(R, at, v, &items) != 0 || (l = list_new(R, at, items->n)) == NULL) return -1;
    for (size_t i = 0; i < items->n; i++) {
        if (get_attr(R, at, items->v[i], attr.u.s, &l->v[i]) != 0) return -1;
        if (l->v[i].k == JV_UNDEF) l->v[i] = arg(a, -1, "default", UNDEF);
    }
    *out = (jv){.k = JV_LIST, .u.l = l};
    return 0;
}

/* first / last / list / reverse / items. */
static int filter_seq(rctx *R, const node *at, jstr f, jv v, jv *out)
{
    if (jstr_is(f, "items")) {
        if (v.k == JV_UNDEF) v = (jv){.k = JV_LIST, .u.l = list_new(R, at, 0)};
        else if (v.k != JV_DICT) return rfail(R, at, "items of %s", kind_name(v.k));
        if (v.k == JV_DICT) {
            jlist *l = list_new(R, at, v.u.d->n);
            if (l == NULL) return -1;
            for (size_t i = 0; i < v.u.d->n; i++) {
                jlist *p = list_new(R, at, 2);
                if (p == NULL) return -1;
                p->v[0] = (jv){.k = JV_STR, .u.s = v.u.d->key[i]};
                p->v[1] = v.u.d->val[i];
                p->tuple = 1;
                l->v[i] = (jv){.k = JV_LIST, .u.l = p};
            }
            *out = (jv){.k = JV_LIST, .u.l = l};
        }
        return 0;
    }
    jlist *items;
    if (iterate(R, at, v, &items) != 0) return -1;
    if (jstr_is(f, "first")) *out = items->n ? items->v[0] : UNDEF;
    else if (jstr_is(f, "last")) *out = items->n ? items->v[items->n - 1] : UNDEF;
    else {
        jlist *l = list_new(R, at, items->n);
        if (l == NULL) return -1;
        for (size_t i = 0; i < items->n; i++) l->v[i] = items->v[jstr_is(f, "reverse") ? items->n - 1 - i : i];
        *out = (jv){.k = JV_LIST, .u.l = l};
        if (jstr_is(f, "reverse") && v.k == JV_STR) {
            jstr e = {"", 0};
            return join_items(R, at, l, e, (jstr){0}, out);
        }
    }
    return 0;
}

/* The filters on strings. 1: not one of them. */
static int filter_string(rctx *R, const node *at, jstr f, jv v, const args *a, jv *out)
{
    jstr s;
    int is_case = jstr_is(f, "upper") || jstr_is(f, "lower") || jstr_is(f, "capitalize") || jstr_is(f, "title");
    if (!is_case && !jstr_is(f, "trim") && !jstr_is(f, "replace")) return 1;
    if (to_jstr(R, at, v, &s) != 0) return -1;
    if (is_case) return case_map(R, at, s, jstr_is(f, "upper") ? 'u' : jstr_is(f, "lower") ? 'l'
                                          : jstr_is(f, "capitalize") ? 'c' : 't', out);
    if (jstr_is(f, "trim")) {
        jv ch = arg(a, 0, "chars", (jv){.k = JV_NONE});
        if (ch.k != JV_NONE && ch.k != JV_STR) return rfail(R, at, "trim: chars must be a string");
        *out = (jv){.k = JV_STR, .u.s = strip_chars(s, ch.k == JV_STR ? &ch.u.s : NULL, 3)};
        return 0;
    }
    jstr old, rep;
    jv cnt = arg(a, 2, "count", (jv){.k = JV_NONE});
    if (to_jstr(R, at, arg(a, 0, NULL, UNDEF), &old) != 0 || to_jstr(R, at, arg(a, 1, NULL, UNDEF), &rep) != 0)
        return -1;
    return str_replace(R, at, s, old, rep, cnt.k == JV_INT ? cnt.u.i : -1, out);
}

static int filter_apply(rctx *R, const node *n, jv v, const args *a, jv *out)
{
    jstr f = n->name;
    int st = filter_string(R, n, f, v, a, out);
    if (st != 1) return st;
    if (jstr_is(f, "length") || jstr_is(f, "count")) return filter_length(R, n, v, out);
    if (jstr_is(f, "default") || jstr_is(f, "d")) {
        int use = v.k == JV_UNDEF || (truthy(arg(a, 1, "boolean", mkbool(0))) && !truthy(v));
        *out = use ? arg(a, 0, "default_value", mkstr("", 0)) : v;
        return 0;
    }
    if (jstr_is(f, "tojson")) return filter_tojson(R, n, v, a, out);
    if (jstr_is(f, "join")) {
        jlist *items;
        jv sep = arg(a, 0, "d", mkstr("", 0)), attr = arg(a, 1, "attribute", UNDEF);
        jstr ss;
        if (iterate(R, n, v, &items) != 0 || to_jstr(R, n, sep, &ss) != 0) return -1;
        return join_items(R, n, items, ss, attr.k == JV_STR ? attr.u.s : (jstr){0}, out);
    }
    if (jstr_is(f, "first") || jstr_is(f, "last") || jstr_is(f, "list") || jstr_is(f, "reverse") ||
        jstr_is(f, "items"))
        return filter_seq(R, n, f, v, out);
    if (jstr_is(f, "string")) {
        jstr s;
        if (to_jstr(R, n, v, &s) != 0) return -1;
        *out = (jv){.k = JV_STR, .u.s = s};
        return 0;
    }
    if (jstr_is(f, "safe")) { *out = v; return 0; }
    if (jstr_is(f, "int")) return filter_int(R, n, v, a, out);
    if (jstr_is(f, "abs") && is_num(v)) {
        *out = v.k == JV_FLOAT ? (jv){.k = JV_FLOAT, .u.f = fabs(v.u.f)} : mkint(llabs(num_i(v)));
        return 0;
    }
    if (jstr_is(f, "selectattr") || jstr_is(f, "rejectattr"))
        return filter_select(R, n, v, a, jstr_is(f, "rejectattr"), out);
    if (jstr_is(f, "map")) return filter_map(R, n, v, a, out);
    return rfail(R, n, "unknown or unsupported filter '%.*s'", (int)(f.n > 40 ? 40 : f.n), f.s);
}

/* ---- tests ---------------------------------------------------------------- */
static int test_apply(rctx *R, const node *at, jstr t, jv v, const args *a, int *out)
{
    jv x = arg(a, 0, NULL, UNDEF);
    if (jstr_is(t, "defined")) *out = v.k != JV_UNDEF;
    else if (jstr_is(t, "undefined")) *out = v.k == JV_UNDEF;
    else if (jstr_is(t, "none")) *out = v.k == JV_NONE;
    else if (jstr_is(t, "string")) *out = v.k == JV_STR;
    else if (jstr_is(t, "number")) *out = is_num(v); /* Python: a bool is a number */
    else if (jstr_is(t, "integer")) *out = v.k == JV_INT;
    else if (jstr_is(t, "float")) *out = v.k == JV_FLOAT;
    else if (jstr_is(t, "boolean")) *out = v.k == JV_BOOL;
    else if (jstr_is(t, "true")) *out = v.k == JV_BOOL && v.u.b;
    else if (jstr_is(t, "false")) *out = v.k == JV_BOOL && !v.u.b;
    else if (jstr_is(t, "mapping")) *out = v.k == JV_DICT;
    else if (jstr_is(t, "iterable")) *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
    else if (jstr_is(t, "sequence")) *out = v.k == JV_STR || v.k == JV_LIST || v.k == JV_DICT || v.k == JV_UNDEF;
    else if (jstr_is(t, "callable")) *out = v.k == JV_FUNC;
    else if (jstr_is(t, "eq") || jstr_is(t, "equalto") || jstr_is(t, "==")) *out = jv_eq(v, x, 0);
    else if (jstr_is(t, "ne") || jstr_is(t, "!=")) *out = !jv_eq(v, x, 0);
    else if (jstr_is(t, "in")) return jv_in(R, at, v, x, out);
    else if (jstr_is(t, "even") || jstr_is(t, "odd") || jstr_is(t, "divisibleby")) {
        int64_t d = jstr_is(t, "divisibleby") ? (x.k == JV_INT ? x.u.i : 0) : 2;
        if (v.k != JV_INT || d == 0) return rfail(R, at, "'%.*s' needs integers", (int)t.n, t.s);
        *out = (v.u.i % d == 0) == !jstr_is(t, "odd");
    } else
        return rfail(R, at, "unknown or unsupported test '%.*s'", (int)(t.n > 40 ? 40 : t.n), t.s);
    return 0;
}

/* ---- methods and global functions --------------------------------------------- */
static int str_method(rctx *R, const node *at, jstr s, jstr m, const args *a, jv *out)
{
    static const char *const known[] = {"strip", "lstrip", "rstrip", "startswith", "endswith", "upper", "lower",
                                        "title", "capitalize", "split", "replace", "join", NULL};
    int found = 0;
    for (int k = 0; known[k]; k++) found |= jstr_is(m, known[k]);
    if (!found) return rfail(R, at, "unknown or unsupported string method '%.*s'", (int)(m.n > 40 ? 40 : m.n), m.s);
    jv x = arg(a, 0, NULL, (jv){.k = JV_NONE});
    jstr xs = {0};
    if (x.k != JV_NONE && x.k != JV_STR && !jstr_is(m, "split") && !jstr_is(m, "join") && !jstr_is(m, "replace"))
        return rfail(R, at, "str.%.*s needs a string argument, not %s", (int)m.n, m.s, kind_name(x.k));
    if (x.k == JV_STR) xs = x.u.s;
    if (jstr_is(m, "strip") || jstr_is(m, "lstrip") || jstr_is(m, "rstrip")) {
        int which = jstr_is(m, "strip") ? 3 : jstr_is(m, "lstrip") ? 1 : 2;
        *out = (jv){.k = JV_STR, .u.s = strip_chars(s, x.k == JV_STR ? &xs : NULL, which)};
    } else if (jstr_is(m, "startswith") || jstr_is(m, "endswith")) {
        if (x.k != JV_STR) return rfail(R, at, "str.%.*s needs a string", (int)m.n, m.s);
        int st = jstr_is(m, "startswith");
        *out = mkbool(xs.n <= s.n && memcmp(st ? s.s : s.s + s.n - xs.n, xs.s, xs.n) == 0);
    } else if (jstr_is(m, "upper") || jstr_is(m, "lower") || jstr_is(m, "title") || jstr_is(m, "capitalize")) {
        return case_map(R, at, s, jstr_is(m, "upper") ? 'u' : jstr_is(m, "lower") ? 'l'
                                  : jstr_is(m, "title") ? 'T' : 'c', out);
    } else if (jstr_is(m, "split")) {
        jv sep = arg(a, 0, "sep", (jv){.k = JV_NONE}), mx = arg(a, 1, "maxsplit", mkint(-1));
        if ((sep.k != JV_NONE && sep.k != JV_STR) || mx.k != JV_INT) return rfail(R, at, "str.split(sep, maxsplit)");
        return str_split(R, at, s, sep, mx.u.i, out);
    } else if (jstr_is(m, "replace")) {
        jv o = arg(a, 0, NULL, UNDEF), r = arg(a, 1, NULL, UNDEF), c = arg(a, 2, "count", mkint(-1));
        if (o.k != JV_STR || r.k != JV_STR || c.k != JV_INT) return rfail(R, at, "str.replace(old, new[, count])");
        return str_replace(R, at, s, o.u.s, r.u.s, c.u.i, out);
    } else if (jstr_is(m, "join")) {
        jlist *items;
        if (iterate(R, at, x, &items) != 0) return -1;
        for (size_t i = 0; i < items->n; i++)
            if (items->v[i].k != JV_STR) return rfail(R, at, "str.join: item %zu is %s", i, kind_name(items->v[i].k));
        return join_items(R, at, items, s, (jstr){0}, out);
    } else {
        return rfail(R, at, "unknown or unsupported string method '%.*s'", (int)(m.n > 40 ? 40 : m.n), m.s);
    }
    return 0;
}

static int dict_method(rctx *R, const node *at, jv d, jstr m, const args *a, jv *out)
{
    if (jstr_is(m, "get")) {
        jv k = arg(a, 0, NULL, UNDEF);
        jv *v = k.k == JV_STR ? dict_find(d.u.d, k.u.s) : NULL;
        *out = v ? *v : arg(a, 1, NULL, (jv){.k = JV_NONE});
        return 0;
    }
    if (jstr_is(m, "items")) return filter_seq(R, at, m, d, out);
    if (jstr_is(m, "keys") || jstr_is(m, "values")) {
        jlist *l = list_new(R, at, d.u.d->n);
        if (l == NULL) return -1;
        for (size_t i = 0; i < d.u.d->n; i++)
            l->v[i] = jstr_is(m, "keys") ? (jv){.k = JV_STR, .u.s = d.u.d->key[i]} : d.u.d->val[i];
        *out = (jv){.k = JV_LIST, .u.l = l};
        return 0;
    }
    return rfail(R, at, "unknown or unsupported dict method '%.*s'", (int)(m.n > 40 ? 40 : m.n), m.s);
}

static int call_global(rctx *R, const node *at, int fn, const args *a, jv *out)
{
    if (fn == JF_RAISE) {
        jstr msg = {"", 0};
        if (to_jstr(R, at, arg(a, 0, NULL, mkstr("", 0)), &msg) != 0) return -1;
        return rfail(R, at, "raise_exception: %.*s", (int)(msg.n > 300 ? 300 : msg.n), msg.s);
    }
    if (fn == JF_STRFTIME) return rfail(R, at, "strftime_now is not supported (a rendering must not depend on the date)");
    if (fn == JF_NAMESPACE) {
        jdict *d = jarena_alloc(&R->ar, sizeof *d);
        if (d == NULL) return nomem(R, at);
        if (a->npos > 1 || (a->npos == 1 && a->pos[0].k != JV_DICT))
            return rfail(R, at, "namespace() takes keyword arguments (or one dict)");
        for (size_t i = 0; a->npos == 1 && i < a->pos[0].u.d->n; i++)
            if (dict_set(R, at, d, a->pos[0].u.d->key[i], a->pos[0].u.d->val[i]) != 0) return -1;
        for (int k = 0; k < a->nkw; k++)
            if (dict_set(R, at, d, a->kwn[k], a->kw[k]) != 0) return -1;
        *out = (jv){.k = JV_NS, .u.d = d};
        return 0;
    }
    /* range(stop) / range(start, stop[, step]) */
    int64_t v[3] = {0, 0, 1};
    if (a->npos < 1 || a->npos > 3 || a->nkw) return rfail(R, at, "range takes 1 to 3 integers");
    for (int k = 0; k < a->npos; k++) {
        if (a->pos[k].k != JV_INT) return rfail(R, at, "range takes integers, not %s", kind_name(a->pos[k].k));
        v[a->npos == 1 ? 1 : k] = a->pos[k].u.i;
    }
    if (v[2] == 0) return rfail(R, at, "range() step must not be zero");
    int64_t n = 0;
    if (v[2] > 0 && v[1] > v[0]) n = (v[1] - v[0] + v[2] - 1) / v[2];
    if (v[2] < 0 && v[1] < v[0]) n = (v[0] - v[1] - v[2] - 1) / -v[2];
    if (n > 10000000) return rfail(R, at, "range of more than 10,000,000 numbers");
    jlist *l = list_new(R, at, (size_t)n);
    if (l == NULL) return -1;
    for (int64_t k = 0; k < n; k++) l->v[k] = mkint(v[0] + k * v[2]);
    *out = (jv){.k = JV_LIST, .u.l = l};
    return 0;
}

static int eval_call(rctx *R, const node *n, jv *out)
{
    args a;
    const node *callee = n->a;
    if (callee->kind == N_ATTR) { /* a method: obj.name(...) */
        jv obj;
        if (eval(R, callee->a, &obj) != 0 || eval_args(R, n, &a) != 0) return -1;
        if (obj.k == JV_STR) return str_method(R, n, obj.u.s, callee->name, &a, out);
        if (obj.k == JV_DICT) return dict_method(R, n, obj, callee->name, &a, out);
        if (obj.k == JV_UNDEF)
            return rfail(R, n, "'%.*s' of an undefined value", (int)callee->name.n, callee->name.s);
        return rfail(R, n, "%s has no supported method '%.*s'", kind_name(obj.k), (int)callee->name.n,
                     callee->name.s);
    }
    jv f;
    if (eval(R, callee, &f) != 0) return -1;
    if (f.k != JV_FUNC) {
        if (callee->kind == N_NAME)
            return rfail(R, n, "'%.*s' is not a function this interpreter knows (macros are not supported)",
                         (int)callee->name.n, callee->name.s);
        return rfail(R, n, "%s is not callable", kind_name(f.k));
    }
    if (eval_args(R, n, &a) != 0) return -1;
    return call_global(R, n, f.u.fn, &a, out);
}

/* ---- expressions ------------------------------------------------------------ */
static int lookup(rctx *R, jstr name, jv *out)
{
    for (frame *f = R->scope; f; f = f->up) {
        jv *v = dict_find(&f->vars, name);
        if (v) {
            *out = *v;
            return 0;
        }
    }
    static const struct { const char *name; int fn; } globals[] = {
        {"raise_exception", JF_RAISE}, {"namespace", JF_NAMESPACE}, {"range", JF_RANGE},
        {"strftime_now", JF_STRFTIME}};
    *out = UNDEF;
    for (size_t k = 0; k < sizeof globals / sizeof *globals; k++)
        if (jstr_is(name, globals[k].name)) *out = (jv){.k = JV_FUNC, .u.fn = globals[k].fn};
    return 0;
}

static int eval_seq(rctx *R, const node *n, jv *out)
{
    if (n->kind == N_LIST) {
        jlist *l = list_new(R, n, (size_t)n->kids.n);
        if (l == NULL) return -1;
        for (int k = 0; k < n->kids.n; k++)
            if (eval(R, n->kids.v[k], &l->v[k]) != 0) return -1;
        *out = (jv){.k = JV_LIST, .u.l = l};
        return 0;
    }
    jdict *d = jarena_alloc(&R->ar, sizeof *d);
    if (d == NULL) return nomem(R, n);
    for (int k = 0; k < n->kids.n; k++) {
        jv key, val;
        if (eval(R, n->kids.v[k], &key) != 0 || eval(R, n->kids2.v[k], &val) != 0) return -1;
        if (key.k != JV_STR) return rfail(R, n->kids.v[k], "dict keys must be strings here, not %s", kind_name(key.k));
        if (dict_set(R, n, d, key.u.s, val) != 0) return -1;
    }
    *out = (jv){.k = JV_DICT, .u.d = d};
    return 0;
}

static int eval_cmp(rctx *R, const node *n, jv *out)
{
    jv left, right;
    if (eval(R, n->a, &left) != 0) return -1;
    for (int k = 0; k < n->kids2.n; k++) {
        int r;
        if (eval(R, n->kids2.v[k], &right) != 0 || compare(R, n, n->cmp_ops[k], left, right, &r) != 0) return -1;
        if (!r) {
            *out = mkbool(0);
            return 0;
        }
        left = right;
    }
    *out = mkbool(1);
    return 0;
}

static int eval_more(rctx *R, const node *n, jv *out)
{
    jv a, vs[3];
    args ar;
    int r;
    switch (n->kind) {
    case N_SLICE:
        if (eval(R, n->a, &a) != 0) return -1;
        for (int k = 0; k < 3; k++) {
            const node *x = k == 0 ? n->b : k == 1 ? n->c : n->d;
            vs[k] = (jv){.k = JV_NONE};
            if (x != NULL && eval(R, x, &vs[k]) != 0) return -1;
        }
        return get_slice(R, n, a, vs, out);
    case N_FILTER:
        if (eval(R, n->a, &a) != 0 || eval_args(R, n, &ar) != 0) return -1;
        return filter_apply(R, n, a, &ar, out);
    case N_TEST:
        if (eval(R, n->a, &a) != 0 || eval_args(R, n, &ar) != 0 || test_apply(R, n, n->name, a, &ar, &r) != 0)
            return -1;
        *out = mkbool(r != n->op);
        return 0;
    case N_NEG: case N_POS:
        if (eval(R, n->a, &a) != 0) return -1;
        if (!is_num(a)) return rfail(R, n, "unary %c of %s", n->kind == N_NEG ? '-' : '+', kind_name(a.k));
        if (n->kind == N_POS) *out = a.k == JV_BOOL ? mkint(a.u.b) : a;
        else if (a.k == JV_FLOAT) *out = (jv){.k = JV_FLOAT, .u.f = -a.u.f};
        else return int_arith(R, n, OP_SUB, 0, num_i(a), out);
        return 0;
    case N_AND: case N_OR: /* Python: the deciding operand itself */
        if (eval(R, n->a, &a) != 0) return -1;
        if (truthy(a) == (n->kind == N_OR)) { *out = a; return 0; }
        return eval(R, n->b, out);
    case N_COND:
        if (eval(R, n->a, &a) != 0) return -1;
        if (truthy(a)) return eval(R, n->b, out);
        if (n->c == NULL) { *out = UNDEF; return 0; }
        return eval(R, n->c, out);
    default:
        return rfail(R, n, "internal: not an expression (%d)", (int)n->kind);
    }
}

static int eval(rctx *R, const node *n, jv *out)
{
    jv a, b;
    if (++R->steps > DYN_JINJA_MAX_STEPS) return rfail(R, n, "the template ran more than %lld steps", DYN_JINJA_MAX_STEPS);
    switch (n->kind) {
    case N_CONST: *out = n->value; return 0;
    case N_NAME: return lookup(R, n->name, out);
    case N_LIST: case N_DICT: return eval_seq(R, n, out);
    case N_ATTR: case N_ITEM:
        if (eval(R, n->a, &a) != 0 || (n->kind == N_ITEM && eval(R, n->b, &b) != 0)) return -1;
        if (a.k == JV_UNDEF && n->a->kind == N_NAME)
            return rfail(R, n, "'%.*s' is undefined", (int)n->a->name.n, n->a->name.s);
        return n->kind == N_ATTR ? get_attr(R, n, a, n->name, out) : get_item(R, n, a, b, out);
    case N_CALL: return eval_call(R, n, out);
    case N_NOT:
        if (eval(R, n->a, &a) != 0) return -1;
        *out = mkbool(!truthy(a));
        return 0;
    case N_BIN:
        if (eval(R, n->a, &a) != 0 || eval(R, n->b, &b) != 0) return -1;
        return arith(R, n, n->op, a, b, out);
    case N_CMP: return eval_cmp(R, n, out);
    default: return eval_more(R, n, out);
    }
}

/* ---- statements ------------------------------------------------------------ */
static int exec_body(rctx *R, const nlist *body);

static frame *push_frame(rctx *R, const node *at)
{
    frame *f = jarena_alloc(&R->ar, sizeof *f);
    if (f == NULL) return nomem(R, at), NULL;
    f->up = R->scope;
    R->scope = f;
    return f;
}

/* Bind the loop targets to item x in frame f. */
static int bind_targets(rctx *R, const node *n, frame *f, jv x)
{
    if (n->n_targets == 1) return dict_set(R, n, &f->vars, n->knames[0], x);
    jlist *parts;
    if (x.k != JV_LIST && x.k != JV_STR) return rfail(R, n, "cannot unpack %s into %d names", kind_name(x.k),
                                                   n->n_targets);
    if (iterate(R, n, x, &parts) != 0) return -1;
    if ((int)parts->n != n->n_targets)
        return rfail(R, n, "cannot unpack %zu values into %d names", parts->n, n->n_targets);
    for (int k = 0; k < n->n_targets; k++)
        if (dict_set(R, n, &f->vars, n->knames[k], parts->v[k]) != 0) return -1;
    return 0;
}

/* The items of a for loop after its `if` filter (evaluated per item in a
 * scope holding the targets). */
static int loop_items(rctx *R, const node *n, jlist **out)
{
    jv it;
    if (eval(R, n->a, &it) != 0 || iterate(R, n->a, it, out) != 0) return -1;
    if (n->b == NULL) return 0;
    jlist *src = *out, *l = list_new(R, n, src->n);
    if (l == NULL) return -1;
    l->n = 0;
    frame *f = push_frame(R, n); /* one frame, emptied for each item */
    if (f == NULL) return -1;
    R->scope = f->up;
    for (size_t i = 0; i < src->n; i++) {
        jv c;
        f->vars.n = 0;
        R->scope = f;
        int st = bind_targets(R, n, f, src->v[i]);
        if (st == 0) st = eval(R, n->b, &c);
        R->scope = f->up;
        if (st != 0) return -1;
        if (truthy(c)) l->v[l->n++] = src->v[i];
    }
    *out = l;
    return 0;
}

static int exec_for(rctx *R, const node *n)
{
    jlist *items;
    if (loop_items(R, n, &items) != 0) return -1;
    if (items->n == 0) return exec_body(R, &n->kids2);
    jloop *lp = jarena_alloc(&R->ar, sizeof *lp);
    if (lp == NULL) return nomem(R, n);
    *lp = (jloop){.length = (int64_t)items->n, .items = items->v};
    frame *saved = R->scope, *f = push_frame(R, n); /* one frame, emptied for each item */
    R->scope = saved;
    if (f == NULL) return -1;
    for (size_t i = 0; i < items->n; i++) {
        if (++R->steps > DYN_JINJA_MAX_STEPS)
            return rfail(R, n, "the template ran more than %lld steps", DYN_JINJA_MAX_STEPS);
        lp->index0 = (int64_t)i;
        f->vars.n = 0;
        R->scope = f;
        int st = dict_set(R, n, &f->vars, (jstr){"loop", 4}, (jv){.k = JV_LOOP, .u.lp = lp});
        if (st == 0) st = bind_targets(R, n, f, items->v[i]);
        if (st == 0) st = exec_body(R, &n->kids);
        R->scope = saved;
        if (st != 0) return -1;
        int ctl = R->ctl;
        R->ctl = 0;
        if (ctl == 1) break;
    }
    return 0;
}

static int exec_set(rctx *R, const node *n)
{
    jv v;
    if (n->kind == S_SETBLOCK) {
        sbuf b = {0}, *saved = R->sink;
        R->sink = &b;
        int st = exec_body(R, &n->kids);
        R->sink = saved;
        if (st != 0 || sb_take(R, n, &b, &v) != 0) return free(b.d), -1;
    } else if (eval(R, n->a, &v) != 0) {
        return -1;
    }
    if (n->attr2.s == NULL) return dict_set(R, n, &R->scope->vars, n->name, v);
    jv ns;
    if (lookup(R, n->name, &ns) != 0) return -1;
    if (ns.k != JV_NS)
        return rfail(R, n, "cannot set an attribute of '%.*s' (%s; only a namespace() can be assigned to)",
                     (int)n->name.n, n->name.s, kind_name(ns.k));
    return dict_set(R, n, ns.u.d, n->attr2, v);
}

static int exec_node(rctx *R, const node *n)
{
    jv v;
    if (++R->steps > DYN_JINJA_MAX_STEPS) return rfail(R, n, "the template ran more than %lld steps", DYN_JINJA_MAX_STEPS);
    switch (n->kind) {
    case S_DATA: return sb_add(R, n, R->sink, n->value.u.s.s, n->value.u.s.n);
    case S_OUT:
        if (eval(R, n->a, &v) != 0) return -1;
        return str_into(R, n, R->sink, v, 0, 0);
    case S_IF:
        if (eval(R, n->a, &v) != 0) return -1;
        return exec_body(R, truthy(v) ? &n->kids : &n->kids2);
    case S_FOR: return exec_for(R, n);
    case S_SET: case S_SETBLOCK: return exec_set(R, n);
    case S_BREAK: R->ctl = 1; return 0;
    case S_CONTINUE: R->ctl = 2; return 0;
    case S_BODY: return exec_body(R, &n->kids);
    default: return rfail(R, n, "internal: not a statement (%d)", (int)n->kind);
    }
}

static int exec_body(rctx *R, const nlist *body)
{
    if (++R->depth > 4 * DYN_JINJA_MAX_DEPTH) return rfail(R, body->n ? body->v[0] : NULL, "nested too deep");
    for (int k = 0; k < body->n && R->ctl == 0; k++)
        if (exec_node(R, body->v[k]) != 0) return -1;
    R->depth--;
    return 0;
}

/* ---- variables in, text out ------------------------------------------------ */
static int from_json(rctx *R, const node *at, const cJSON *j, jv *out, int depth)
{
    if (depth > 2 * DYN_JINJA_MAX_DEPTH) return rfail(R, at, "a variable nested more than %d deep", 2 * DYN_JINJA_MAX_DEPTH);
    if (cJSON_IsNull(j)) *out = (jv){.k = JV_NONE};
    else if (cJSON_IsBool(j)) *out = mkbool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        *out = d == floor(d) && fabs(d) < 9007199254740992.0 ? mkint((int64_t)d) : (jv){.k = JV_FLOAT, .u.f = d};
    } else if (cJSON_IsString(j)) *out = mkstr(j->valuestring, strlen(j->valuestring));
    else if (cJSON_IsArray(j)) {
        jlist *l = list_new(R, at, (size_t)cJSON_GetArraySize(j));
        if (l == NULL) return -1;
        size_t k = 0;
        for (const cJSON *e = j->child; e; e = e->next)
            if (from_json(R, at, e, &l->v[k++], depth + 1) != 0) return -1;
        *out = (jv){.k = JV_LIST, .u.l = l};
    } else if (cJSON_IsObject(j)) {
        jdict *d = jarena_alloc(&R->ar, sizeof *d);
        if (d == NULL) return nomem(R, at);
        for (const cJSON *e = j->child; e; e = e->next) {
            jv v;
            if (from_json(R, at, e, &v, depth + 1) != 0 ||
                dict_set(R, at, d, (jstr){e->string, strlen(e->string)}, v) != 0)
                return -1;
        }
        *out = (jv){.k = JV_DICT, .u.d = d};
    } else {
        return rfail(R, at, "a variable of an unknown JSON type");
    }
    return 0;
}

dyn_status dyn_jinja_render(const dyn_jinja *t, const cJSON *vars, char **out, size_t *out_len, dyn_error *err)
{
    *out = NULL;
    *out_len = 0;
    sbuf b = {0};
    rctx R = {.ar = {.cap = DYN_JINJA_MAX_MEMORY}, .err = err, .sink = &b};
    int st = sb_add(&R, t->root, &b, "", 0);
    frame *top = st == 0 ? push_frame(&R, t->root) : NULL;
    if (top == NULL) st = -1;
    if (st == 0 && vars != NULL && !cJSON_IsObject(vars)) st = rfail(&R, t->root, "the variables must be a JSON object");
    for (const cJSON *e = vars ? vars->child : NULL; st == 0 && e; e = e->next) {
        jv v;
        st = from_json(&R, t->root, e, &v, 0);
        if (st == 0) st = dict_set(&R, t->root, &top->vars, (jstr){e->string, strlen(e->string)}, v);
    }
    if (st == 0) st = exec_body(&R, &t->root->kids);
    jarena_free(&R.ar);
    if (st != 0) {
        free(b.d);
        return err ? err->code : DYN_ERR_INVALID_ARG;
    }
    *out = b.d;
    *out_len = b.n;
    return DYN_OK;
}
