/* jinja.c — the front half of the Jinja interpreter (jinja.h): the arena,
 * the lexer and the parser that turn a template into a syntax tree
 * (jinja_impl.h); jinja_eval.c renders it.
 *
 * The lexer follows jinja2's rules as transformers configures them:
 *   - newlines (\r\n, \r) become \n and one trailing newline is dropped
 *     (keep_trailing_newline off);
 *   - "{%-", "{{-", "{#-" strip all white space before the tag; "-%}",
 *     "-}}", "-#}" all white space after it;
 *   - trim_blocks: one newline right after "%}" or "#}" is dropped ("+%}"
 *     keeps it);
 *   - lstrip_blocks: spaces and tabs between the start of a line and "{%" or
 *     "{#" are dropped ("{%+" keeps them); "the start of a line" is after a
 *     newline in the text, or, when the text has none, the text right after
 *     a tag that ended with a newline (or the template's start);
 *   - inside a tag, an end marker counts only outside brackets, so
 *     "{{ {'a': {'b': 1}} }}" is one expression.
 * The parser is recursive descent with jinja2's precedence (lowest first):
 * conditional expression, or, and, not, comparisons and in, + -, ~,
 * * / // %, **, unary - +, then primaries with postfix . [] () and the
 * filters and tests that follow them. Nesting is limited to
 * DYN_JINJA_MAX_DEPTH. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jinja_impl.h" /* defines: jarena, jv, node, dyn_jinja */

/* ---- arena ------------------------------------------------------------- */
struct jarena_chunk {
    jarena_chunk *next;
    size_t size, used;
    max_align_t data[];
};

void *jarena_alloc(jarena *a, size_t n)
{
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n == 0) n = sizeof(max_align_t);
    jarena_chunk *c = a->head;
    if (c == NULL || c->size - c->used < n) {
        size_t size = n > 65536 ? n : 65536;
        if (n > a->cap || a->used_total > a->cap - size) return NULL;
        c = malloc(sizeof *c + size);
        if (c == NULL) return NULL;
        c->next = a->head;
        c->size = size;
        c->used = 0;
        a->head = c;
        a->used_total += size;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(jarena *a)
{
    for (jarena_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
    a->used_total = 0;
}

void dyn_jinja_one_line(char *msg)
{
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f) *p = ' ';
}

/* ---- tokens ------------------------------------------------------------- */
typedef enum tkind { T_EOF, T_DATA, T_VBEGIN, T_VEND, T_BBEGIN, T_BEND, T_NAME, T_STR, T_INT, T_FLOAT, T_OP } tkind;

typedef struct tok {
    tkind k;
    int line, col;
    jstr s;     /* T_DATA, T_NAME, T_STR (decoded), T_OP */
    int64_t i;  /* T_INT */
    double f;   /* T_FLOAT */
} tok;

typedef struct lexer {
    const char *s;
    size_t n, p;
    jarena *ar;
    tok *t;
    size_t nt, cap;
    dyn_error *err;
    int failed;
    int line_starting;
    size_t lc_off; /* line/column tracking: lc_line starts at lc_start */
    int lc_line;
    size_t lc_start;
} lexer;

/* Line and column (from 1) of offset off; offsets asked for never go back
 * before the last one by more than a token (rescans from 0 if they do). */
static void lex_linecol(lexer *L, size_t off, int *line, int *col)
{
    if (off < L->lc_off) L->lc_off = 0, L->lc_line = 1, L->lc_start = 0;
    for (; L->lc_off < off && L->lc_off < L->n; L->lc_off++)
        if (L->s[L->lc_off] == '\n') L->lc_line++, L->lc_start = L->lc_off + 1;
    *line = L->lc_line;
    *col = (int)(off - L->lc_start) + 1;
}

static int lex_fail(lexer *L, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lex_fail(lexer *L, size_t off, const char *fmt, ...)
{
    if (L->failed) return -1;
    int line, col;
    lex_linecol(L, off, &line, &col);
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    dyn_jinja_one_line(msg);
    dyn_error_set(L->err, DYN_ERR_PARSE, "line %d:%d: %s", line, col, msg);
    L->failed = 1;
    return -1;
}

static tok *lex_push(lexer *L, tkind k, size_t off)
{
    if (L->nt == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 256;
        tok *t = realloc(L->t, cap * sizeof *t);
        if (t == NULL) {
            dyn_error_set(L->err, DYN_ERR_NOMEM, "template: out of memory for tokens");
            L->failed = 1;
            return NULL;
        }
        L->t = t;
        L->cap = cap;
    }
    tok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->k = k;
    lex_linecol(L, off, &t->line, &t->col);
    return t;
}

/* Bytes of the Unicode white space character (Python's str.isspace) at
 * s[0..n), or 0. */
static size_t uspace_len(const unsigned char *s, size_t n)
{
    if (n >= 1 && (s[0] == ' ' || (s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x1f))) return 1;
    if (n >= 2 && s[0] == 0xc2 && (s[1] == 0x85 || s[1] == 0xa0)) return 2;
    if (n >= 3 && s[0] == 0xe1 && s[1] == 0x9a && s[2] == 0x80) return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] <= 0x8a || s[2] == 0xa8 || s[2] == 0xa9 || s[2] == 0xaf))
        return 3;
    if (n >= 3 && s[0] == 0xe2 && s[1] == 0x81 && s[2] == 0x9f) return 3;
    if (n >= 3 && s[0] == 0xe3 && s[1] == 0x80 && s[2] == 0x80) return 3;
    return 0;
}

size_t dyn_jinja_rstrip_len(const char *s, size_t n)
{
    for (;;) {
        size_t cut = 0;
        for (size_t w = 1; w <= 3 && w <= n && cut == 0; w++)
            if (uspace_len((const unsigned char *)s + n - w, w) == w) cut = w;
        if (cut == 0) return n;
        n -= cut;
    }
}

/* Offset just past the Unicode white space starting at s[p]. */
static size_t skip_uspace(const char *s, size_t n, size_t p)
{
    size_t w;
    while (p < n && (w = uspace_len((const unsigned char *)s + p, n - p)) > 0) p += w;
    return p;
}

static int lex_data(lexer *L, size_t from, size_t to)
{
    if (to <= from) return 0;
    tok *t = lex_push(L, T_DATA, from);
    if (t == NULL) return -1;
    t->s = (jstr){L->s + from, to - from};
    return 0;
}

/* Append code point cp as UTF-8 to d (room for 4 bytes); bytes written. */
static size_t put_utf8(char *d, unsigned long cp)
{
    if (cp < 0x80) { d[0] = (char)cp; return 1; }
    if (cp < 0x800) { d[0] = (char)(0xc0 | (cp >> 6)); d[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) {
        d[0] = (char)(0xe0 | (cp >> 12)); d[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); d[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (char)(0xf0 | (cp >> 18)); d[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    d[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); d[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* The value of `digits` hex digits at s (all hex), or -1. */
static long hex_value(const char *s, size_t n, int digits)
{
    if ((size_t)digits > n) return -1;
    long v = 0;
    for (int k = 0; k < digits; k++) {
        int c = (unsigned char)s[k];
        if (!isxdigit(c)) return -1;
        v = v * 16 + (isdigit(c) ? c - '0' : (tolower(c) - 'a' + 10));
    }
    return v;
}

/* Decode the body of a string literal (Python's unicode-escape rules, as
 * jinja2 applies them) at s[0..n) into *out. */
static int lex_unescape(lexer *L, size_t at, const char *s, size_t n, jstr *out)
{
    char *d = jarena_alloc(L->ar, n + 1);
    if (d == NULL) return lex_fail(L, at, "out of memory for a string");
    size_t o = 0;
    for (size_t k = 0; k < n; k++) {
        if (s[k] != '\\' || k + 1 == n) { d[o++] = s[k]; continue; }
        char c = s[++k];
        const char *simple = strchr("\\'\"abfnrtv\n", c);
        if (simple != NULL && c != '\0') {
            static const char map[] = "\\'\"\a\b\f\n\r\t\v";
            if (c != '\n') d[o++] = map[simple - "\\'\"abfnrtv\n"];
            continue;
        }
        if (c >= '0' && c <= '7') {
            unsigned v = 0;
            int m = 0;
            for (; m < 3 && k < n && s[k] >= '0' && s[k] <= '7'; m++, k++) v = v * 8 + (unsigned)(s[k] - '0');
            k--;
            o += put_utf8(d + o, v);
            continue;
        }
        int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
        if (digits > 0) {
            long v = hex_value(s + k + 1, n - k - 1, digits);
            if (v < 0 || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
                return lex_fail(L, at, "bad \\%c escape in a string", c);
            o += put_utf8(d + o, (unsigned long)v);
            k += (size_t)digits;
            continue;
        }
        if (c == 'N') return lex_fail(L, at, "\\N{...} escapes are not supported");
        d[o++] = '\\';
        d[o++] = c;
    }
    *out = (jstr){d, o};
    return 0;
}

static int lex_string(lexer *L)
{
    size_t start = L->p;
    char q = L->s[L->p++];
    while (L->p < L->n && L->s[L->p] != q) L->p += L->s[L->p] == '\\' ? 2 : 1;
    if (L->p >= L->n) return lex_fail(L, start, "unterminated string");
    tok *t = lex_push(L, T_STR, start);
    if (t == NULL) return -1;
    int st = lex_unescape(L, start, L->s + start + 1, L->p - start - 1, &t->s);
    L->p++;
    return st;
}

static int is_name_char(int c) { return isalnum(c) || c == '_'; }

static int lex_number(lexer *L)
{
    size_t start = L->p, p = L->p;
    const char *s = L->s;
    int is_float = 0;
    while (p < L->n && isdigit((unsigned char)s[p])) p++;
    if (p + 1 < L->n && s[p] == '.' && isdigit((unsigned char)s[p + 1])) {
        is_float = 1;
        for (p++; p < L->n && isdigit((unsigned char)s[p]); p++) {}
    }
    if (p < L->n && (s[p] == 'e' || s[p] == 'E')) {
        size_t e = p + 1;
        if (e < L->n && (s[e] == '+' || s[e] == '-')) e++;
        if (e < L->n && isdigit((unsigned char)s[e])) {
            is_float = 1;
            for (p = e; p < L->n && isdigit((unsigned char)s[p]); p++) {}
        }
    }
    if (p < L->n && (s[p] == '_' || isalpha((unsigned char)s[p])))
        return lex_fail(L, start, "malformed number (digit separators are not supported)");
    char buf[64];
    if (p - start >= sizeof buf) return lex_fail(L, start, "number too long");
    memcpy(buf, s + start, p - start);
    buf[p - start] = '\0';
    tok *t = lex_push(L, is_float ? T_FLOAT : T_INT, start);
    if (t == NULL) return -1;
    errno = 0;
    if (is_float) t->f = strtod(buf, NULL);
    else t->i = strtoll(buf, NULL, 10);
    if (!is_float && errno == ERANGE) return lex_fail(L, start, "integer too large (64 bits)");
    L->p = p;
    return 0;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};

static int lex_op(lexer *L, int *depth)
{
    size_t start = L->p;
    const char *s = L->s + L->p;
    size_t len = 0;
    for (size_t k = 0; k < sizeof OPS2 / sizeof *OPS2 && len == 0; k++)
        if (L->n - L->p >= 2 && s[0] == OPS2[k][0] && s[1] == OPS2[k][1]) len = 2;
    if (len == 0 && strchr("()[]{},.:|=~+-*/%<>", s[0]) != NULL && s[0] != '\0') len = 1;
    if (len == 0) return lex_fail(L, start, "unexpected character 0x%02x", (unsigned char)s[0]);
    if (len == 1 && strchr("([{", s[0])) (*depth)++;
    if (len == 1 && strchr(")]}", s[0])) {
        if (*depth == 0) return lex_fail(L, start, "unexpected '%c'", s[0]);
        (*depth)--;
    }
    tok *t = lex_push(L, T_OP, start);
    if (t == NULL) return -1;
    t->s = (jstr){s, len};
    L->p += len;
    return 0;
}

/* At L->p, the end marker of a tag of kind k ('%' block, '}' variable,
 * '#' comment)? Consumes it (and the white space it strips) when so. */
static int lex_tag_end(lexer *L, char k)
{
    const char *s = L->s;
    size_t p = L->p, n = L->n;
    char sign = 0;
    if (p < n && (s[p] == '-' || (s[p] == '+' && k != '}'))) sign = s[p++];
    if (!(p + 1 < n && s[p] == k && s[p + 1] == '}')) return 0;
    p += 2;
    if (sign == '-') p = skip_uspace(s, n, p);
    else if (sign == 0 && k != '}' && p < n && s[p] == '\n') p++; /* trim_blocks */
    L->line_starting = s[p - 1] == '\n';
    L->p = p;
    return 1;
}

/* The tokens of one {{ }} or {% %} tag, from after its opener to after
 * its end marker. */
static int lex_tag(lexer *L, char k, size_t open_at)
{
    int depth = 0;
    for (;;) {
        while (L->p < L->n && strchr(" \t\n\r\f\v", L->s[L->p]) && L->s[L->p] != '\0') L->p++;
        if (L->p >= L->n) return lex_fail(L, open_at, "unclosed tag '%s'", k == '%' ? "{%" : "{{");
        size_t at = L->p;
        if (depth == 0 && lex_tag_end(L, k)) return lex_push(L, k == '%' ? T_BEND : T_VEND, at) ? 0 : -1;
        int c = (unsigned char)L->s[L->p], st;
        if (isalpha(c) || c == '_') {
            size_t e = L->p;
            while (e < L->n && is_name_char((unsigned char)L->s[e])) e++;
            tok *t = lex_push(L, T_NAME, at);
            if (t == NULL) return -1;
            t->s = (jstr){L->s + L->p, e - L->p};
            L->p = e;
            st = 0;
        } else if (isdigit(c)) {
            st = lex_number(L);
        } else if (c == '\'' || c == '"') {
            st = lex_string(L);
        } else {
            st = lex_op(L, &depth);
        }
        if (st != 0) return -1;
    }
}

/* The text before a tag (s[from..to)), with the tag's opener sign and kind:
 * the white space control of jinja2 (see the top of this file). */
static size_t lex_text_end(lexer *L, size_t from, size_t to, char kind, char sign)
{
    if (sign == '-') return from + dyn_jinja_rstrip_len(L->s + from, to - from);
    if (sign == '+' || kind == '{') return to;
    size_t l = to;
    while (l > from && L->s[l - 1] != '\n') l--;
    if (l == from && !L->line_starting) return to;
    for (size_t k = l; k < to; k++)
        if (L->s[k] != ' ' && L->s[k] != '\t') return to;
    return l;
}

static int lex_comment(lexer *L, size_t open_at)
{
    const char *e = NULL;
    for (size_t p = L->p; p + 1 < L->n && e == NULL; p++)
        if (L->s[p] == '#' && L->s[p + 1] == '}') e = L->s + p;
    if (e == NULL) return lex_fail(L, open_at, "unclosed comment '{#'");
    L->p = (size_t)(e - L->s);
    if (L->p > open_at + 2 && (e[-1] == '-' || e[-1] == '+')) L->p--;
    lex_tag_end(L, '#');
    return 0;
}

static int lex_all(lexer *L)
{
    L->line_starting = 1;
    while (L->p < L->n) {
        size_t q = L->p;
        while (q + 1 < L->n && !(L->s[q] == '{' && (L->s[q + 1] == '{' || L->s[q + 1] == '%' || L->s[q + 1] == '#')))
            q++;
        if (q + 1 >= L->n) return lex_data(L, L->p, L->n);
        char kind = L->s[q + 1];
        char sign = q + 2 < L->n && (L->s[q + 2] == '-' || L->s[q + 2] == '+') ? L->s[q + 2] : 0;
        if (lex_data(L, L->p, lex_text_end(L, L->p, q, kind, sign)) != 0) return -1;
        L->p = q + 2 + (sign != 0);
        if (kind == '#') {
            if (lex_comment(L, q) != 0) return -1;
            continue;
        }
        if (lex_push(L, kind == '%' ? T_BBEGIN : T_VBEGIN, q) == NULL) return -1;
        if (lex_tag(L, kind == '%' ? '%' : '}', q) != 0) return -1;
    }
    return 0;
}

/* ---- parser ------------------------------------------------------------- */
typedef struct parser {
    tok *t;
    size_t nt, p;
    jarena *ar;
    dyn_error *err;
    int failed;
    int depth;      /* nesting of expressions and blocks */
    int loop_depth; /* enclosing for loops (break / continue) */
    const tok *open; /* the innermost open block's tag name, or NULL */
} parser;

static tok *cur(parser *P) { return &P->t[P->p < P->nt ? P->p : P->nt - 1]; }

static node *pfail(parser *P, const tok *t, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static node *pfail(parser *P, const tok *t, const char *fmt, ...)
{
    if (!P->failed) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        dyn_jinja_one_line(msg);
        dyn_error_set(P->err, DYN_ERR_PARSE, "line %d:%d: %s", t->line, t->col, msg);
        P->failed = 1;
    }
    return NULL;
}

static int jstr_is(jstr s, const char *z) { return s.n == strlen(z) && memcmp(s.s, z, s.n) == 0; }
static int is_op(const tok *t, const char *op) { return t->k == T_OP && jstr_is(t->s, op); }
static int is_name(const tok *t, const char *nm) { return t->k == T_NAME && jstr_is(t->s, nm); }

/* A printable description of token t for messages. */
static const char *tok_desc(const tok *t, char *buf, size_t cap)
{
    switch (t->k) {
    case T_EOF: return "the end of the template";
    case T_DATA: return "text";
    case T_VBEGIN: return "'{{'";
    case T_VEND: return "'}}'";
    case T_BBEGIN: return "'{%'";
    case T_BEND: return "'%}'";
    case T_STR: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    default: snprintf(buf, cap, "'%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.s); return buf;
    }
}

static node *expect_fail(parser *P, const char *what)
{
    char b[64];
    return pfail(P, cur(P), "expected %s, found %s", what, tok_desc(cur(P), b, sizeof b));
}

static int expect_op(parser *P, const char *op)
{
    if (!is_op(cur(P), op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        expect_fail(P, w);
        return -1;
    }
    P->p++;
    return 0;
}

static node *new_node(parser *P, nkind k, const tok *at)
{
    node *n = jarena_alloc(P->ar, sizeof *n);
    if (n == NULL) return pfail(P, at, "out of memory for the template");
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static int nl_push(parser *P, nlist *l, node *x)
{
    if ((l->n & (l->n - 1)) == 0) { /* powers of two: grow */
        node **v = jarena_alloc(P->ar, sizeof *v * (size_t)(l->n ? 2 * l->n : 1));
        if (v == NULL) return pfail(P, cur(P), "out of memory for the template"), -1;
        if (l->n) memcpy(v, l->v, sizeof *v * (size_t)l->n);
        l->v = v;
    }
    l->v[l->n++] = x;
    return 0;
}

static node *parse_expr(parser *P, int with_cond);
static node *parse_unary(parser *P, int with_filter);

static int enter(parser *P)
{
    if (++P->depth > DYN_JINJA_MAX_DEPTH) {
        pfail(P, cur(P), "nested more than %d deep", DYN_JINJA_MAX_DEPTH);
        return -1;
    }
    return 0;
}

/* Call arguments after '(' up to ')': positional into kids, keyword into
 * kids2 with names in knames. */
static int parse_args(parser *P, node *n)
{
    int nk = 0, capk = 0;
    while (!is_op(cur(P), ")")) {
        tok *t = cur(P);
        if (is_op(t, "*") || is_op(t, "**")) return pfail(P, t, "*args and **kwargs are not supported"), -1;
        if (t->k == T_NAME && P->p + 1 < P->nt && is_op(&P->t[P->p + 1], "=")) {
            P->p += 2;
            node *v = parse_expr(P, 1);
            if (v == NULL || nl_push(P, &n->kids2, v) != 0) return -1;
            if (nk == capk) {
                capk = capk ? 2 * capk : 4;
                jstr *k = jarena_alloc(P->ar, sizeof *k * (size_t)capk);
                if (k == NULL) return pfail(P, t, "out of memory"), -1;
                if (nk) memcpy(k, n->knames, sizeof *k * (size_t)nk);
                n->knames = k;
            }
            n->knames[nk++] = t->s;
        } else {
            if (nk > 0) return pfail(P, t, "a positional argument after a keyword argument"), -1;
            node *v = parse_expr(P, 1);
            if (v == NULL || nl_push(P, &n->kids, v) != 0) return -1;
        }
        if (!is_op(cur(P), ",")) break;
        P->p++;
    }
    return expect_op(P, ")");
}

/* [a, b], (a, b) or {k: v}, after the opener; close is the closer. */
static node *parse_seq(parser *P, const tok *open, const char *close, int dict)
{
    node *n = new_node(P, dict ? N_DICT : N_LIST, open);
    if (n == NULL) return NULL;
    while (!is_op(cur(P), close)) {
        node *k = parse_expr(P, 1);
        if (k == NULL || nl_push(P, &n->kids, k) != 0) return NULL;
        if (dict) {
            if (expect_op(P, ":") != 0) return NULL;
            node *v = parse_expr(P, 1);
            if (v == NULL || nl_push(P, &n->kids2, v) != 0) return NULL;
        }
        if (!is_op(cur(P), ",")) break;
        P->p++;
    }
    return expect_op(P, close) == 0 ? n : NULL;
}

static node *parse_const_name(parser *P, tok *t)
{
    node *n = new_node(P, N_CONST, t);
    if (n == NULL) return NULL;
    if (is_name(t, "true") || is_name(t, "True")) n->value = (jv){.k = JV_BOOL, .u.b = 1};
    else if (is_name(t, "false") || is_name(t, "False")) n->value = (jv){.k = JV_BOOL, .u.b = 0};
    else if (is_name(t, "none") || is_name(t, "None")) n->value = (jv){.k = JV_NONE};
    else {
        n->kind = N_NAME;
        n->name = t->s;
    }
    return n;
}

static node *parse_primary(parser *P)
{
    tok *t = cur(P);
    if (enter(P) != 0) return NULL;
    node *n = NULL;
    P->p++;
    if (t->k == T_NAME) {
        n = parse_const_name(P, t);
    } else if (t->k == T_STR) {
        jstr s = t->s;
        while (cur(P)->k == T_STR) { /* adjacent strings concatenate */
            jstr b = cur(P)->s;
            char *d = jarena_alloc(P->ar, s.n + b.n + 1);
            if (d == NULL) return pfail(P, t, "out of memory");
            memcpy(d, s.s, s.n);
            memcpy(d + s.n, b.s, b.n);
            s = (jstr){d, s.n + b.n};
            P->p++;
        }
        if ((n = new_node(P, N_CONST, t)) != NULL) n->value = (jv){.k = JV_STR, .u.s = s};
    } else if (t->k == T_INT || t->k == T_FLOAT) {
        if ((n = new_node(P, N_CONST, t)) != NULL)
            n->value = t->k == T_INT ? (jv){.k = JV_INT, .u.i = t->i} : (jv){.k = JV_FLOAT, .u.f = t->f};
    } else if (is_op(t, "(")) {
        n = parse_expr(P, 1);
        if (n != NULL && is_op(cur(P), ",")) return pfail(P, cur(P), "tuples are not supported (use a list)");
        if (n != NULL && expect_op(P, ")") != 0) n = NULL;
    } else if (is_op(t, "[")) {
        n = parse_seq(P, t, "]", 0);
    } else if (is_op(t, "{")) {
        n = parse_seq(P, t, "}", 1);
    } else {
        P->p--;
        return expect_fail(P, "an expression");
    }
    P->depth--;
    return n;
}

/* After '[': an index or a slice a[b:c:d]. */
static node *parse_subscript(parser *P, node *obj, const tok *at)
{
    node *n = new_node(P, N_ITEM, at);
    if (n == NULL) return NULL;
    n->a = obj;
    node *parts[3] = {NULL, NULL, NULL};
    int np = 0;
    for (;;) {
        if (!is_op(cur(P), ":") && !is_op(cur(P), "]")) {
            if ((parts[np] = parse_expr(P, 1)) == NULL) return NULL;
        }
        if (!is_op(cur(P), ":")) break;
        if (++np == 3) return pfail(P, cur(P), "a slice has at most two ':'");
        P->p++;
        n->kind = N_SLICE;
    }
    if (is_op(cur(P), ",")) return pfail(P, cur(P), "several subscripts at once are not supported");
    if (expect_op(P, "]") != 0) return NULL;
    if (n->kind == N_ITEM && parts[0] == NULL) return pfail(P, at, "an empty subscript");
    n->b = parts[0];
    n->c = parts[1];
    n->d = parts[2];
    return n;
}

static node *parse_postfix(parser *P, node *n)
{
    while (n != NULL) {
        tok *t = cur(P);
        if (is_op(t, ".")) {
            P->p++;
            tok *a = cur(P);
            node *x = new_node(P, a->k == T_INT ? N_ITEM : N_ATTR, t);
            if (x == NULL) return NULL;
            if (a->k == T_NAME) x->name = a->s;
            else if (a->k == T_INT) {
                if ((x->b = new_node(P, N_CONST, a)) == NULL) return NULL;
                x->b->value = (jv){.k = JV_INT, .u.i = a->i};
            } else return expect_fail(P, "a name after '.'");
            P->p++;
            x->a = n;
            n = x;
        } else if (is_op(t, "[")) {
            P->p++;
            n = parse_subscript(P, n, t);
        } else if (is_op(t, "(")) {
            P->p++;
            node *x = new_node(P, N_CALL, t);
            if (x == NULL) return NULL;
            x->a = n;
            if (parse_args(P, x) != 0) return NULL;
            n = x;
        } else {
            break;
        }
    }
    return n;
}

/* 'is' [not] NAME [args] after the operand n. */
static node *parse_test(parser *P, node *n)
{
    tok *at = cur(P);
    P->p++;
    node *x = new_node(P, N_TEST, at);
    if (x == NULL) return NULL;
    x->a = n;
    if (is_name(cur(P), "not")) x->op = 1, P->p++;
    if (cur(P)->k != T_NAME) return expect_fail(P, "the name of a test after 'is'");
    x->name = cur(P)->s;
    P->p++;
    tok *t = cur(P);
    if (is_op(t, "(")) {
        P->p++;
        if (parse_args(P, x) != 0) return NULL;
    } else if ((t->k == T_NAME || t->k == T_STR || t->k == T_INT || t->k == T_FLOAT || is_op(t, "[") ||
                is_op(t, "{")) && !is_name(t, "else") && !is_name(t, "or") && !is_name(t, "and")) {
        if (is_name(t, "is")) return pfail(P, t, "tests cannot be chained with 'is'");
        node *arg = parse_postfix(P, parse_primary(P));
        if (arg == NULL || nl_push(P, &x->kids, arg) != 0) return NULL;
    }
    return x;
}

static node *parse_filters(parser *P, node *n)
{
    while (n != NULL) {
        tok *t = cur(P);
        if (is_op(t, "|")) {
            P->p++;
            if (cur(P)->k != T_NAME) return expect_fail(P, "a filter name after '|'");
            node *x = new_node(P, N_FILTER, cur(P));
            if (x == NULL) return NULL;
            x->name = cur(P)->s;
            x->a = n;
            P->p++;
            if (is_op(cur(P), "(")) {
                P->p++;
                if (parse_args(P, x) != 0) return NULL;
            }
            n = x;
        } else if (is_name(t, "is")) {
            n = parse_test(P, n);
        } else {
            break;
        }
    }
    return n;
}

static node *parse_unary(parser *P, int with_filter)
{
    tok *t = cur(P);
    node *n;
    if (enter(P) != 0) return NULL;
    if (is_op(t, "-") || is_op(t, "+")) {
        P->p++;
        n = new_node(P, is_op(t, "-") ? N_NEG : N_POS, t);
        if (n != NULL && (n->a = parse_unary(P, 0)) == NULL) n = NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filters(P, n);
    P->depth--;
    return n;
}

/* One level of left-associative binary operators: ops[k] gives codes[k],
 * operands parsed by next(level + 1). */
typedef struct binlevel {
    const char *ops[4];
    int codes[4];
} binlevel;

static const binlevel LEVELS[] = {
    {{"+", "-"}, {OP_ADD, OP_SUB}},
    {{"~"}, {OP_CONCAT}},
    {{"*", "/", "//", "%"}, {OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD}},
    {{"**"}, {OP_POW}},
};

static node *parse_binary(parser *P, int level)
{
    if (level == (int)(sizeof LEVELS / sizeof *LEVELS)) return parse_unary(P, 1);
    node *n = parse_binary(P, level + 1);
    for (;;) {
        tok *t = cur(P);
        int code = 0;
        for (int k = 0; k < 4 && LEVELS[level].ops[k]; k++)
            if (is_op(t, LEVELS[level].ops[k])) code = LEVELS[level].codes[k];
        if (n == NULL || code == 0) return n;
        P->p++;
        node *x = new_node(P, N_BIN, t);
        if (x == NULL) return NULL;
        x->op = code;
        x->a = n;
        if ((x->b = parse_binary(P, level + 1)) == NULL) return NULL;
        n = x;
    }
}

/* The comparison operator at the cursor (consumed), or 0. */
static int cmp_op(parser *P)
{
    static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
    static const int codes[] = {OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE};
    tok *t = cur(P);
    for (int k = 0; k < 6; k++)
        if (is_op(t, ops[k])) return P->p++, codes[k];
    if (is_name(t, "in")) return P->p++, OP_IN;
    if (is_name(t, "not") && P->p + 1 < P->nt && is_name(&P->t[P->p + 1], "in")) return P->p += 2, OP_NOTIN;
    return 0;
}

static node *parse_compare(parser *P)
{
    node *n = parse_binary(P, 0);
    tok *at = cur(P);
    int op = n ? cmp_op(P) : 0;
    if (op == 0) return n;
    node *x = new_node(P, N_CMP, at);
    if (x == NULL) return NULL;
    x->a = n;
    int cap = 0;
    for (; op != 0; op = cmp_op(P)) {
        node *r = parse_binary(P, 0);
        if (r == NULL || nl_push(P, &x->kids2, r) != 0) return NULL;
        if (x->kids2.n > cap) {
            cap = cap ? 2 * cap : 4;
            int *o = jarena_alloc(P->ar, sizeof *o * (size_t)cap);
            if (o == NULL) return pfail(P, at, "out of memory");
            if (x->kids2.n > 1) memcpy(o, x->cmp_ops, sizeof *o * (size_t)(x->kids2.n - 1));
            x->cmp_ops = o;
        }
        x->cmp_ops[x->kids2.n - 1] = op;
    }
    return x;
}

static node *parse_not(parser *P)
{
    tok *t = cur(P);
    if (!is_name(t, "not")) return parse_compare(P);
    if (enter(P) != 0) return NULL;
    P->p++;
    node *n = new_node(P, N_NOT, t);
    if (n != NULL && (n->a = parse_not(P)) == NULL) n = NULL;
    P->depth--;
    return n;
}

/* and (is_or 0) / or (is_or 1) chains. */
static node *parse_logic(parser *P, int is_or)
{
    node *n = is_or ? parse_logic(P, 0) : parse_not(P);
    while (n != NULL && is_name(cur(P), is_or ? "or" : "and")) {
        node *x = new_node(P, is_or ? N_OR : N_AND, cur(P));
        if (x == NULL) return NULL;
        P->p++;
        x->a = n;
        if ((x->b = is_or ? parse_logic(P, 0) : parse_not(P)) == NULL) return NULL;
        n = x;
    }
    return n;
}

static node *parse_expr(parser *P, int with_cond)
{
    if (enter(P) != 0) return NULL;
    node *n = parse_logic(P, 1);
    while (with_cond && n != NULL && is_name(cur(P), "if")) {
        node *x = new_node(P, N_COND, cur(P));
        if (x == NULL) return NULL;
        P->p++;
        x->b = n;
        if ((x->a = parse_logic(P, 1)) == NULL) return NULL;
        if (is_name(cur(P), "else")) {
            P->p++;
            if ((x->c = parse_expr(P, 1)) == NULL) return NULL;
        }
        n = x;
    }
    P->depth--;
    return n;
}

/* ---- statements --------------------------------------------------------- */
static int parse_body(parser *P, const char *const *stops, const tok *opened, nlist *out);

/* Expect '%}' closing the current tag. */
static int expect_bend(parser *P)
{
    if (cur(P)->k == T_BEND) {
        P->p++;
        return 0;
    }
    expect_fail(P, "'%}'");
    return -1;
}

/* At '{%' NAME: is NAME one of stops? */
static int at_stop(parser *P, const char *const *stops)
{
    if (cur(P)->k != T_BBEGIN || P->p + 1 >= P->nt) return 0;
    for (int k = 0; stops && stops[k]; k++)
        if (is_name(&P->t[P->p + 1], stops[k])) return 1;
    return 0;
}

/* Consume '{%' NAME '%}' for a closing tag NAME known to be next. */
static int close_tag(parser *P)
{
    P->p += 2;
    return expect_bend(P);
}

static node *parse_if(parser *P, tok *at)
{
    static const char *const stops[] = {"elif", "else", "endif", NULL};
    static const char *const end[] = {"endif", NULL};
    node *n = new_node(P, S_IF, at);
    if (n == NULL || (n->a = parse_expr(P, 1)) == NULL || expect_bend(P) != 0) return NULL;
    if (parse_body(P, stops, at, &n->kids) != 0) return NULL;
    tok *t = &P->t[P->p + 1];
    if (is_name(t, "elif")) {
        P->p += 2;
        node *e = parse_if(P, t); /* consumes up to and with the endif */
        return e == NULL || nl_push(P, &n->kids2, e) != 0 ? NULL : n;
    }
    if (is_name(t, "else")) {
        if (close_tag(P) != 0 || parse_body(P, end, at, &n->kids2) != 0) return NULL;
    }
    return close_tag(P) == 0 ? n : NULL;
}

static node *parse_for(parser *P, tok *at)
{
    static const char *const stops[] = {"else", "endfor", NULL};
    static const char *const end[] = {"endfor", NULL};
    node *n = new_node(P, S_FOR, at);
    if (n == NULL) return NULL;
    jstr names[8];
    int nn = 0;
    for (;;) {
        if (cur(P)->k != T_NAME) return expect_fail(P, "a loop variable");
        if (nn == 8) return pfail(P, cur(P), "more than 8 loop variables");
        names[nn++] = cur(P)->s;
        P->p++;
        if (!is_op(cur(P), ",")) break;
        P->p++;
    }
    if ((n->knames = jarena_alloc(P->ar, sizeof *names * (size_t)nn)) == NULL) return pfail(P, at, "out of memory");
    memcpy(n->knames, names, sizeof *names * (size_t)nn);
    n->n_targets = nn;
    if (!is_name(cur(P), "in")) return expect_fail(P, "'in'");
    P->p++;
    if ((n->a = parse_expr(P, 0)) == NULL) return NULL;
    if (is_name(cur(P), "if")) {
        P->p++;
        if ((n->b = parse_expr(P, 0)) == NULL) return NULL;
    }
    if (is_name(cur(P), "recursive")) return pfail(P, cur(P), "recursive loops are not supported");
    if (expect_bend(P) != 0) return NULL;
    P->loop_depth++;
    int st = parse_body(P, stops, at, &n->kids);
    P->loop_depth--;
    if (st != 0) return NULL;
    if (is_name(&P->t[P->p + 1], "else") && (close_tag(P) != 0 || parse_body(P, end, at, &n->kids2) != 0)) return NULL;
    return close_tag(P) == 0 ? n : NULL;
}

static node *parse_set(parser *P, tok *at)
{
    static const char *const end[] = {"endset", NULL};
    node *n = new_node(P, S_SET, at);
    if (n == NULL) return NULL;
    if (cur(P)->k != T_NAME) return expect_fail(P, "a name after 'set'");
    n->name = cur(P)->s;
    P->p++;
    if (is_op(cur(P), ".")) {
        P->p++;
        if (cur(P)->k != T_NAME) return expect_fail(P, "an attribute name");
        n->attr2 = cur(P)->s;
        P->p++;
    }
    if (is_op(cur(P), ",")) return pfail(P, cur(P), "'set' of several names at once is not supported");
    if (cur(P)->k == T_BEND && n->attr2.s == NULL) { /* block set */
        n->kind = S_SETBLOCK;
        P->p++;
        if (parse_body(P, end, at, &n->kids) != 0) return NULL;
        return close_tag(P) == 0 ? n : NULL;
    }
    if (expect_op(P, "=") != 0 || (n->a = parse_expr(P, 1)) == NULL) return NULL;
    if (is_op(cur(P), ",")) return pfail(P, cur(P), "tuples are not supported (use a list)");
    return expect_bend(P) == 0 ? n : NULL;
}

static node *parse_tag(parser *P)
{
    static const char *const gen_end[] = {"endgeneration", NULL};
    P->p++; /* the '{%' */
    tok *t = cur(P);
    if (t->k != T_NAME) return expect_fail(P, "a tag name after '{%'");
    P->p++;
    if (is_name(t, "if")) return parse_if(P, t);
    if (is_name(t, "for")) return parse_for(P, t);
    if (is_name(t, "set")) return parse_set(P, t);
    if (is_name(t, "break") || is_name(t, "continue")) {
        if (P->loop_depth == 0) return pfail(P, t, "'%.*s' outside a loop", (int)t->s.n, t->s.s);
        node *n = new_node(P, is_name(t, "break") ? S_BREAK : S_CONTINUE, t);
        return n != NULL && expect_bend(P) == 0 ? n : NULL;
    }
    if (is_name(t, "generation")) {
        node *n = new_node(P, S_BODY, t);
        if (n == NULL || expect_bend(P) != 0 || parse_body(P, gen_end, t, &n->kids) != 0) return NULL;
        return close_tag(P) == 0 ? n : NULL;
    }
    static const char *const known[] = {"macro", "call", "filter", "include", "import", "from", "extends", "block",
                                        "raw", "with", "do", "autoescape", NULL};
    for (int k = 0; known[k]; k++)
        if (is_name(t, known[k])) return pfail(P, t, "the '%s' tag is not supported", known[k]);
    if (P->open != NULL)
        return pfail(P, t, "unknown or unexpected tag '%.*s' (the innermost open block is the '%.*s' at line %d:%d)",
                     (int)(t->s.n > 40 ? 40 : t->s.n), t->s.s, (int)P->open->s.n, P->open->s.s, P->open->line,
                     P->open->col);
    return pfail(P, t, "unknown or unexpected tag '%.*s'", (int)(t->s.n > 40 ? 40 : t->s.n), t->s.s);
}

/* Statements up to a '{%' whose name is in stops (not consumed), or the end
 * of the template when stops is NULL. */
static int parse_body(parser *P, const char *const *stops, const tok *opened, nlist *out)
{
    int last = 0;
    while (stops && stops[last + 1]) last++;
    if (enter(P) != 0) return -1;
    const tok *outer = P->open;
    if (opened != NULL) P->open = opened;
    for (;;) {
        tok *t = cur(P);
        node *n = NULL;
        if (t->k == T_EOF) {
            if (stops == NULL) break;
            return pfail(P, opened, "missing {%% %s %%} for this '%.*s'", stops[last], (int)opened->s.n, opened->s.s), -1;
        }
        if (stops != NULL && at_stop(P, stops)) break;
        if (t->k == T_DATA) {
            if ((n = new_node(P, S_DATA, t)) != NULL) n->value = (jv){.k = JV_STR, .u.s = t->s};
            P->p++;
        } else if (t->k == T_VBEGIN) {
            P->p++;
            if ((n = new_node(P, S_OUT, t)) != NULL && (n->a = parse_expr(P, 1)) == NULL) n = NULL;
            if (n != NULL && cur(P)->k != T_VEND) n = expect_fail(P, "'}}'");
            P->p++;
        } else if (t->k == T_BBEGIN) {
            n = parse_tag(P);
        } else {
            n = expect_fail(P, "text or a tag");
        }
        if (n == NULL || nl_push(P, out, n) != 0) return -1;
    }
    P->open = outer;
    P->depth--;
    return 0;
}

/* ---- the handle ---------------------------------------------------------- */

/* src with \r\n and \r made \n and one trailing \n dropped, in t's arena. */
static char *normalise_newlines(dyn_jinja *t, const char *src, size_t len, size_t *out_len)
{
    char *d = jarena_alloc(&t->ar, len + 1);
    if (d == NULL) return NULL;
    size_t o = 0;
    for (size_t k = 0; k < len; k++) {
        if (src[k] == '\r') {
            d[o++] = '\n';
            if (k + 1 < len && src[k + 1] == '\n') k++;
        } else {
            d[o++] = src[k];
        }
    }
    if (o > 0 && d[o - 1] == '\n') o--;
    d[o] = '\0';
    *out_len = o;
    return d;
}

dyn_jinja *dyn_jinja_create(const char *src, size_t len, dyn_error *err)
{
    dyn_jinja *t = calloc(1, sizeof *t);
    if (t == NULL) {
        dyn_error_set(err, DYN_ERR_NOMEM, "template: out of memory");
        return NULL;
    }
    t->ar.cap = DYN_JINJA_MAX_MEMORY;
    size_t n = 0;
    char *s = normalise_newlines(t, src, len, &n);
    if (s == NULL) {
        dyn_error_set(err, DYN_ERR_NOMEM, "template: out of memory (%zu bytes)", len);
        dyn_jinja_free(t);
        return NULL;
    }
    lexer L = {.s = s, .n = n, .ar = &t->ar, .err = err, .lc_line = 1};
    int st = lex_all(&L);
    if (st == 0 && lex_push(&L, T_EOF, n) == NULL) st = -1;
    if (st == 0) {
        parser P = {.t = L.t, .nt = L.nt, .ar = &t->ar, .err = err};
        tok root_at = {.line = 1, .col = 1};
        t->root = new_node(&P, S_BODY, &root_at);
        if (t->root == NULL || parse_body(&P, NULL, NULL, &t->root->kids) != 0) st = -1;
    }
    free(L.t);
    if (st != 0) {
        dyn_jinja_free(t);
        return NULL;
    }
    return t;
}

void dyn_jinja_free(dyn_jinja *t)
{
    if (t == NULL) return;
    jarena_free(&t->ar);
    free(t);
}
