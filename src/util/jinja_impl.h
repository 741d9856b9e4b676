/* jinja_impl.h — inside the Jinja interpreter (jinja.h): the arena both
 * halves allocate from, the value type, and the syntax tree that the lexer
 * and parser (jinja.c) build and the evaluator (jinja_eval.c) walks. Not
 * installed. */
#ifndef DYN_UTIL_JINJA_IMPL_H
#define DYN_UTIL_JINJA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "util/jinja.h"

/* ---- arena: bump allocation in chunks, freed at once; capped ---------- */
typedef struct jarena_chunk jarena_chunk;
typedef struct jarena {
    jarena_chunk *head;
    size_t used_total; /* bytes of every chunk */
    size_t cap;        /* the most used_total may reach */
} jarena;

/* Zeroed room for n bytes (aligned for any value), or NULL (out of memory or
 * past the cap). */
void *jarena_alloc(jarena *a, size_t n);
void jarena_free(jarena *a);

/* ---- values ------------------------------------------------------------- */
typedef struct jstr {
    const char *s;
    size_t n; /* bytes */
} jstr;

typedef enum jkind {
    JV_UNDEF = 0, /* a name or key that does not exist (jinja2's Undefined) */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,   /* namespace(): a dict whose attributes may be assigned */
    JV_LOOP, /* the loop variable of a for */
    JV_FUNC  /* a global function (JF_*) */
} jkind;

enum { JF_RAISE = 1, JF_NAMESPACE, JF_RANGE, JF_STRFTIME };

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;

typedef struct jv {
    jkind k;
    union {
        int b;
        int64_t i;
        double f;
        jstr s;
        jlist *l;
        jdict *d;  /* JV_DICT, JV_NS */
        jloop *lp;
        int fn;
    } u;
} jv;

struct jlist {
    size_t n;
    jv *v;
    int tuple; /* prints as a Python tuple: (a, b) */
};

struct jdict { /* insertion-ordered */
    size_t n, cap;
    jstr *key;
    jv *val;
};

struct jloop {
    int64_t index0, length;
    const jv *items; /* the sequence iterated (for previtem / nextitem) */
};

/* ---- syntax tree ------------------------------------------------------ */
typedef enum nkind {
    /* expressions */
    N_CONST, N_NAME, N_LIST, N_DICT, N_ATTR, N_ITEM, N_SLICE, N_CALL, N_FILTER, N_TEST,
    N_NEG, N_POS, N_NOT, N_BIN, N_AND, N_OR, N_CMP, N_COND,
    /* statements */
    S_DATA, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_BREAK, S_CONTINUE, S_BODY
} nkind;

/* Binary and comparison operators. */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
       OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN };

typedef struct node node;
typedef struct nlist {
    node **v;
    int n;
} nlist;

/* One node; which fields are used depends on kind:
 *   N_CONST value; N_NAME name; N_LIST kids; N_DICT kids (keys), kids2 (values)
 *   N_ATTR a.name; N_ITEM a[b]; N_SLICE a[b:c:d] (b, c, d may be NULL)
 *   N_CALL a(kids, names=kids2): names in knames; N_FILTER a|name(kids, kids2)
 *   N_TEST a is [not: op] name(kids); N_NEG/N_POS/N_NOT a; N_BIN a op b
 *   N_AND/N_OR a, b; N_CMP a then kids2 with ops in cmp_ops; N_COND b if a else c
 *   S_DATA value (string); S_OUT a; S_IF a, kids (then), kids2 (else)
 *   S_FOR targets knames (n_targets), a (iterable), b (filter or NULL), kids, kids2 (else)
 *   S_SET name (or name.attr2 when attr2.s) = a; S_SETBLOCK name = kids rendered
 *   S_BODY kids */
struct node {
    nkind kind;
    int line, col;
    int op;
    jstr name, attr2;
    node *a, *b, *c, *d;
    nlist kids, kids2;
    jstr *knames;
    int n_targets;
    int *cmp_ops;
    jv value;
};

/* Length of s[0..n) without its trailing Unicode white space (Python's
 * str.isspace), jinja.c. */
size_t dyn_jinja_rstrip_len(const char *s, size_t n);

/* Control characters in msg (from the template or the variables) become
 * spaces, so that an error stays one printable line. */
void dyn_jinja_one_line(char *msg);

struct dyn_jinja {
    jarena ar;  /* the tree and its strings */
    node *root; /* S_BODY */
};

#endif
