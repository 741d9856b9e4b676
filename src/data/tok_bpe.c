/*
 * tok_bpe.c — Hugging Face tokenizer.json with a byte-level BPE model (the
 * GPT-2, Llama 3 and Qwen2 families), read and run without Hugging Face code.
 *
 * Encoding one text, in the order the Hugging Face pipeline applies it:
 *   1. added tokens: the text is cut at every occurrence of an added token
 *      (leftmost, then longest), which becomes its id directly;
 *   2. each stretch between them is cut into maximal valid-UTF-8 runs and
 *      invalid runs (tokenizer.h says why); an invalid run is one piece;
 *   3. pre-tokenizer: each valid run goes through the steps of the file's
 *      pre_tokenizer (Split with a regex or a string, ByteLevel with or
 *      without its GPT-2 regex, a Sequence of those) into pieces; regexes run
 *      in PCRE2 with UTF and UCP so \p{L}, \p{N} and \s are Unicode's;
 *   4. BPE: each piece starts as one symbol per byte (the vocabulary's
 *      single-byte tokens, through GPT-2's byte-to-unicode table) and the
 *      adjacent pair of lowest merge rank is merged, leftmost first, until no
 *      pair has a rank. Pieces up to 16 bytes use the plain quadratic loop
 *      (bpe_merge_simple), longer ones a binary heap over a linked list of
 *      symbols (bpe_merge_heap); the test checks one against the other. A
 *      cache maps recent pieces to their ids.
 *   5. post-processor: the single-sequence template's ids before and after
 *      (TemplateProcessing, RobertaProcessing/BertProcessing, a Sequence of
 *      them; ByteLevel adds nothing), when the caller asks for them.
 * Decoding maps each id back to its bytes (the inverse byte-to-unicode map
 * applied once at load), so decode(encode(x)) == x for any bytes x.
 *
 * Tokens are kept as raw bytes: a vocabulary entry "Ġthe" is stored as
 * " the". An entry with a character outside the byte-to-unicode table (only
 * added tokens have them in practice) keeps its UTF-8 text.
 *
 * Normalizer: NFC only (tok_nfc.c), run on each valid UTF-8 run before the
 * pre-tokenizer; decoding then gives back the normalized text.
 *
 * Not supported, refused at load with one line: models other than BPE,
 * dropout, byte fallback, subword prefixes/suffixes, normalizers but NFC,
 * pre-tokenizers other than Split/ByteLevel/Sequence, Split behaviours other
 * than Isolated and Removed or with invert, added tokens with single_word.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "data/tokenizer_impl.h" /* defines: struct dyn_tokenizer, dyn_tok_read_specials, buffers */
#include "util/util.h"            /* defines: dyn_file_read_all, dyn_calloc, dyn_reserve, DYN_RESERVE */

/* GPT-2's split regex, which the ByteLevel pre-tokenizer uses by default. */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

#define BPE_SIMPLE_MAX 16     /* pieces up to this many bytes use the quadratic merge loop */
#define CACHE_MAX_PIECE 64    /* longer pieces are not cached */
#define CACHE_SLOTS (1u << 16)

/* ---- hashing ----------------------------------------------------------- */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static uint64_t hash_u64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint32_t pow2_at_least(size_t n)
{
    uint32_t c = 16;
    while (c < n) c *= 2;
    return c;
}

/* ---- the model --------------------------------------------------------- */

typedef struct added_token {
    uint32_t off, len; /* content bytes in bpe.arena */
    int32_t id;
    int special, lstrip, rstrip;
} added_token;

typedef enum step_kind { STEP_SPLIT, STEP_BYTELEVEL } step_kind;
typedef struct pre_step {
    step_kind kind;
    pcre2_code *re;   /* NULL: ByteLevel without its regex */
    int remove;       /* Split: drop the matches (behavior Removed) */
    int prefix_space; /* ByteLevel add_prefix_space */
} pre_step;

typedef struct piece {
    uint32_t off, len; /* in bpe.pbuf */
} piece;

typedef struct cache_slot {
    uint64_t hash;     /* 0: empty */
    uint32_t key_off;  /* in cache_keys */
    uint32_t ids_off;  /* in cache_ids */
    uint16_t key_len, ids_n;
} cache_slot;

typedef struct bpe {
    char *path;
    /* tokens: id -> bytes in arena; tok_len UINT32_MAX for an id with no token */
    char *arena;
    size_t arena_n, arena_cap;
    uint32_t *tok_off, *tok_len;
    unsigned char *tok_special; /* 1: a special added token (skipped by skip_special) */
    int32_t vocab;
    /* bytes -> id (byte-level vocabulary entries, then added tokens) */
    uint32_t *vmap; /* id + 1, 0 empty */
    uint32_t vmap_mask;
    int32_t byte_id[256];
    /* merges: (left id, right id) -> rank, merged id */
    uint64_t *pkey;
    int32_t *prank, *pmerged;
    uint32_t pmask;
    int ignore_merges;
    int nfc;              /* normalizer NFC */
    dyn_byte_buf norm;    /* scratch: a normalized run */
    /* added tokens, matched before pre-tokenization */
    added_token *added;
    int n_added;
    int *added_by_byte;           /* indices grouped by first byte, longest first */
    int added_first[257];         /* group of byte b: added_by_byte[added_first[b] .. added_first[b+1]) */
    int any_lstrip;
    /* pre-tokenizer */
    pre_step *steps;
    int n_steps;
    size_t cap_steps;
    pcre2_match_data *md;
    /* post-processor */
    int32_t *prefix, *suffix;
    int n_prefix, n_suffix;
    size_t cap_prefix, cap_suffix;
    /* scratch for one encode */
    char *pbuf;
    size_t pbuf_n, pbuf_cap;
    piece *pieces, *pieces2;
    size_t n_pieces, pieces_cap, pieces2_cap;
    int32_t *sym_prev, *sym_next;
    size_t sym_cap, sym_next_cap;
    struct heap_ent *heap;
    size_t heap_cap;
    /* piece cache */
    cache_slot *cache;
    uint32_t cache_used;
    char *cache_keys;
    size_t cache_keys_n;
    int32_t *cache_ids;
    size_t cache_ids_n;
} bpe;

typedef struct heap_ent {
    int32_t rank;
    int32_t left;  /* symbol index of the pair's left symbol */
    int32_t right; /* symbol index of its right symbol when pushed */
} heap_ent;

static void bpe_free(void *p)
{
    bpe *b = p;
    if (b == NULL) return;
    free(b->path);
    free(b->arena);
    free(b->tok_off);
    free(b->tok_len);
    free(b->tok_special);
    free(b->vmap);
    free(b->pkey);
    free(b->prank);
    free(b->pmerged);
    free(b->added);
    free(b->added_by_byte);
    for (int i = 0; i < b->n_steps; i++) pcre2_code_free(b->steps[i].re);
    free(b->steps);
    pcre2_match_data_free(b->md);
    free(b->prefix);
    free(b->suffix);
    free(b->pbuf);
    free(b->pieces);
    free(b->pieces2);
    free(b->sym_prev);
    free(b->sym_next);
    free(b->heap);
    free(b->cache);
    free(b->cache_keys);
    free(b->cache_ids);
    dyn_byte_buf_free(&b->norm);
    free(b);
}

/* ---- byte-to-unicode ---------------------------------------------------- */

/* GPT-2's table: bytes that are printable Latin-1 characters map to
 * themselves, the other 68 to U+0100.. in byte order, so every byte has a
 * visible character. u2b inverts it (code points < 324). */
static void byte_unicode_table(uint32_t b2u[256], int16_t u2b[324])
{
    int n = 0;
    for (int i = 0; i < 324; i++) u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        b2u[b] = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        u2b[b2u[b]] = (int16_t)b;
    }
}

/* Length of the valid UTF-8 character at s[0..n), or 0 when it is not one
 * (overlong forms, surrogates and code points above U+10FFFF are invalid). */
static size_t utf8_char(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) { len = 2; v = c & 0x1F; min = 0x80; }
    else if (c >= 0xE0 && c <= 0xEF) { len = 3; v = c & 0x0F; min = 0x800; }
    else if (c >= 0xF0 && c <= 0xF4) { len = 4; v = c & 0x07; min = 0x10000; }
    else return 0;
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

/* Convert a vocabulary entry's text to bytes through u2b into out (at most
 * strlen(s) bytes); returns the length, or -1 when a character is outside
 * the table (the entry is not byte-level). */
static long unicode_to_bytes(const char *s, const int16_t u2b[324], char *out)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s), i = 0;
    long o = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = utf8_char(p + i, n - i, &cp);
        if (l == 0 || cp >= 324 || u2b[cp] < 0) return -1;
        out[o++] = (char)u2b[cp];
        i += l;
    }
    return o;
}

/* ---- token table and maps ---------------------------------------------- */

static dyn_status arena_add(bpe *b, const char *s, size_t n, uint32_t *off, dyn_error *err)
{
    size_t need = b->arena_n + n + 1;
    if (need > UINT32_MAX) return dyn_error_set(err, DYN_ERR_PARSE, "%s: tokens too long", b->path);
    if (DYN_RESERVE(b->arena, b->arena_cap, b->arena_cap || need > (1 << 16) ? need : 1 << 16) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", b->path);
    memcpy(b->arena + b->arena_n, s, n);
    b->arena[b->arena_n + n] = '\0';
    *off = (uint32_t)b->arena_n;
    b->arena_n += n + 1;
    return DYN_OK;
}

/* Id of the token whose bytes are s[0..n), or -1. */
static int32_t vmap_find(const bpe *b, const char *s, size_t n)
{
    uint32_t i = (uint32_t)hash_bytes(s, n) & b->vmap_mask;
    for (;; i = (i + 1) & b->vmap_mask) {
        uint32_t v = b->vmap[i];
        if (v == 0) return -1;
        int32_t id = (int32_t)(v - 1);
        if (b->tok_len[id] == n && memcmp(b->arena + b->tok_off[id], s, n) == 0) return id;
    }
}

/* Map id's bytes to id unless those bytes already have an id. */
static void vmap_insert(bpe *b, int32_t id)
{
    const char *s = b->arena + b->tok_off[id];
    size_t n = b->tok_len[id];
    uint32_t i = (uint32_t)hash_bytes(s, n) & b->vmap_mask;
    for (;; i = (i + 1) & b->vmap_mask) {
        uint32_t v = b->vmap[i];
        if (v == 0) { b->vmap[i] = (uint32_t)id + 1; return; }
        int32_t o = (int32_t)(v - 1);
        if (b->tok_len[o] == n && memcmp(b->arena + b->tok_off[o], s, n) == 0) return;
    }
}

static inline uint64_t pair_key(int32_t a, int32_t c) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)c; }

/* Rank of merging (a, c) and the merged id, or rank -1. */
static inline int32_t pair_rank(const bpe *b, int32_t a, int32_t c, int32_t *merged)
{
    uint64_t k = pair_key(a, c);
    uint32_t i = (uint32_t)hash_u64(k) & b->pmask;
    for (;; i = (i + 1) & b->pmask) {
        if (b->pkey[i] == k) { *merged = b->pmerged[i]; return b->prank[i]; }
        if (b->pkey[i] == UINT64_MAX) return -1;
    }
}

/* ---- loading ----------------------------------------------------------- */

typedef struct loader {
    bpe *b;
    const char *path;
    uint32_t b2u[256];
    int16_t u2b[324];
    char *conv; /* scratch for unicode_to_bytes */
    size_t conv_cap;
} loader;

/* Is v a JSON number that is a whole number in [0, INT32_MAX)? (Checked
 * before any conversion to an integer type, which is undefined out of range.) */
static int is_id_number(const cJSON *v)
{
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    return d >= 0 && d < 2147483647.0 && d == (double)(int64_t)d;
}

static const char *type_of(const cJSON *o)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* Convert text to its bytes (byte-level when every character is in the
 * table, else its UTF-8 itself) into L->conv; returns the length. */
static long token_bytes(loader *L, const char *text, int byte_level, dyn_error *err)
{
    size_t n = strlen(text);
    if (DYN_RESERVE(L->conv, L->conv_cap, L->conv_cap || n + 1 > 256 ? n + 1 : 256) != 0)
        return -(long)dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", L->path) - 1;
    long len = byte_level ? unicode_to_bytes(text, L->u2b, L->conv) : -1;
    if (len < 0) {
        memcpy(L->conv, text, n);
        len = (long)n;
    }
    return len;
}

static dyn_status set_token(loader *L, int32_t id, const char *text, int byte_level, dyn_error *err)
{
    bpe *b = L->b;
    long len = token_bytes(L, text, byte_level, err);
    if (len < 0) return DYN_ERR_NOMEM;
    uint32_t off = 0;
    dyn_status st = arena_add(b, L->conv, (size_t)len, &off, err);
    if (st != DYN_OK) return st;
    b->tok_off[id] = off;
    b->tok_len[id] = (uint32_t)len;
    return DYN_OK;
}

/* The added tokens grouped by first byte, longest first, for
 * leftmost-longest matching: b->added_by_byte[added_first[c] ..
 * added_first[c + 1]) are the indices of those starting with byte c. */
static void group_added_by_byte(bpe *b)
{
    int pos = 0;
    for (int c = 0; c < 256; c++) {
        b->added_first[c] = pos;
        for (int k = 0; k < b->n_added; k++)
            if ((unsigned char)b->arena[b->added[k].off] == c) b->added_by_byte[pos++] = k;
        for (int x = b->added_first[c] + 1; x < pos; x++) /* insertion sort by length, descending */
            for (int y = x; y > b->added_first[c] && b->added[b->added_by_byte[y]].len > b->added[b->added_by_byte[y - 1]].len; y--) {
                int tmp = b->added_by_byte[y];
                b->added_by_byte[y] = b->added_by_byte[y - 1];
                b->added_by_byte[y - 1] = tmp;
            }
    }
    b->added_first[256] = pos;
}

static dyn_status load_vocab(loader *L, const cJSON *vocab, const cJSON *added, dyn_error *err)
{
    bpe *b = L->b;
    if (!cJSON_IsObject(vocab)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: model.vocab is not an object", L->path);
    /* The largest id among the vocabulary and the added tokens. */
    double max_id = -1;
    size_t count = 0;
    for (const cJSON *v = vocab->child; v; v = v->next, count++) {
        if (!is_id_number(v))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: model.vocab[\"%s\"] is not a token id (a non-negative integer)",
                                 L->path, v->string);
        if (v->valuedouble > max_id) max_id = v->valuedouble;
    }
    if (added != NULL && !cJSON_IsArray(added))
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: added_tokens is not an array", L->path);
    int i = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!is_id_number(id) ||
            !cJSON_IsString(content) || content->valuestring[0] == '\0')
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: added_tokens[%d] needs an integer \"id\" >= 0 and a non-empty \"content\"",
                                 L->path, i);
        if (id->valuedouble > max_id) max_id = id->valuedouble;
    }
    if (max_id < 0) return dyn_error_set(err, DYN_ERR_PARSE, "%s: the vocabulary is empty", L->path);
    if (max_id >= (double)INT32_MAX - 1 || max_id > 16.0 * (double)(count + (size_t)i) + 1024)
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: token id %.0f is far beyond the %zu tokens given", L->path, max_id,
                             count + (size_t)i);
    b->vocab = (int32_t)max_id + 1;
    dyn_error e;
    b->tok_off = dyn_calloc((size_t)b->vocab, sizeof *b->tok_off, "tokenizer ids", &e);
    b->tok_len = dyn_calloc((size_t)b->vocab, sizeof *b->tok_len, "tokenizer ids", &e);
    b->tok_special = dyn_calloc((size_t)b->vocab, 1, "tokenizer ids", &e);
    b->vmap_mask = pow2_at_least(2 * (size_t)b->vocab + 2) - 1;
    b->vmap = dyn_calloc((size_t)b->vmap_mask + 1, sizeof *b->vmap, "tokenizer map", &e);
    if (!b->tok_off || !b->tok_len || !b->tok_special || !b->vmap)
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory for %d tokens", L->path, (int)b->vocab);
    for (int32_t k = 0; k < b->vocab; k++) b->tok_len[k] = UINT32_MAX;
    for (const cJSON *v = vocab->child; v; v = v->next) {
        int32_t id = (int32_t)v->valuedouble;
        if (b->tok_len[id] != UINT32_MAX)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: model.vocab gives id %d to two tokens (\"%s\" and another)", L->path,
                                 (int)id, v->string);
        dyn_status st = set_token(L, id, v->string, 1, err);
        if (st != DYN_OK) return st;
        vmap_insert(b, id);
    }
    /* Added tokens: their content is plain text, matched in the input as is. */
    b->n_added = i;
    b->added = dyn_calloc((size_t)(i ? i : 1), sizeof *b->added, "added tokens", &e);
    b->added_by_byte = dyn_calloc((size_t)(i ? i : 1), sizeof *b->added_by_byte, "added tokens", &e);
    if (!b->added || !b->added_by_byte) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", L->path);
    i = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, i++) {
        added_token *t = &b->added[i];
        const char *content = cJSON_GetObjectItemCaseSensitive(a, "content")->valuestring;
        t->id = (int32_t)cJSON_GetObjectItemCaseSensitive(a, "id")->valuedouble;
        t->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "special"));
        t->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lstrip"));
        t->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "rstrip"));
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "single_word")))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: added token \"%s\" has single_word, which is not supported",
                                 L->path, content);
        const cJSON *norm = cJSON_GetObjectItemCaseSensitive(a, "normalized");
        (void)norm; /* no normalizer is supported, so normalized text is the text */
        dyn_status st = arena_add(b, content, strlen(content), &t->off, err);
        if (st != DYN_OK) return st;
        t->len = (uint32_t)strlen(content);
        if (b->tok_len[t->id] == UINT32_MAX) {
            b->tok_off[t->id] = t->off;
            b->tok_len[t->id] = t->len;
            vmap_insert(b, t->id);
        }
        b->tok_special[t->id] = (unsigned char)t->special;
        b->any_lstrip |= t->lstrip;
    }
    group_added_by_byte(b);
    for (int c = 0; c < 256; c++) {
        char ch = (char)c;
        b->byte_id[c] = vmap_find(b, &ch, 1);
        if (b->byte_id[c] < 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "%s: the vocabulary has no token for byte 0x%02X, so it is not a byte-level BPE (not supported)",
                                 L->path, c);
    }
    return DYN_OK;
}

/* Id of a merge side: its byte-level text must be in the vocabulary. */
static int32_t merge_side(loader *L, const char *text, long k, dyn_error *err, dyn_status *st)
{
    long len = token_bytes(L, text, 1, err);
    if (len < 0) { *st = DYN_ERR_NOMEM; return -1; }
    int32_t id = vmap_find(L->b, L->conv, (size_t)len);
    if (id < 0) *st = dyn_error_set(err, DYN_ERR_PARSE, "%s: merges[%ld]: \"%s\" is not in the vocabulary", L->path, k, text);
    return id;
}

static dyn_status load_merges(loader *L, const cJSON *merges, dyn_error *err)
{
    bpe *b = L->b;
    if (!cJSON_IsArray(merges)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: model.merges is not an array", L->path);
    size_t n = (size_t)cJSON_GetArraySize(merges);
    dyn_error e;
    b->pmask = pow2_at_least(2 * n + 2) - 1;
    b->pkey = malloc(((size_t)b->pmask + 1) * sizeof *b->pkey);
    b->prank = dyn_calloc((size_t)b->pmask + 1, sizeof *b->prank, "merges", &e);
    b->pmerged = dyn_calloc((size_t)b->pmask + 1, sizeof *b->pmerged, "merges", &e);
    if (!b->pkey || !b->prank || !b->pmerged) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory for %zu merges", L->path, n);
    memset(b->pkey, 0xFF, ((size_t)b->pmask + 1) * sizeof *b->pkey);
    char *joined = NULL;
    size_t joined_cap = 0;
    long k = 0;
    dyn_status st = DYN_OK;
    for (const cJSON *m = merges->child; m && st == DYN_OK; m = m->next, k++) {
        const char *left = NULL, *right = NULL;
        char *copy = NULL;
        if (cJSON_IsString(m)) {
            /* "left right": exactly one space (byte-level tokens have none) */
            const char *sp = strchr(m->valuestring, ' ');
            if (sp == NULL || sp == m->valuestring || sp[1] == '\0' || strchr(sp + 1, ' ') != NULL) {
                st = dyn_error_set(err, DYN_ERR_PARSE, "%s: merges[%ld] \"%s\" is not two tokens separated by one space",
                                   L->path, k, m->valuestring);
                break;
            }
            copy = strdup(m->valuestring);
            if (copy == NULL) { st = dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", L->path); break; }
            copy[sp - m->valuestring] = '\0';
            left = copy;
            right = copy + (sp - m->valuestring) + 1;
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next) && m->child->valuestring[0] && m->child->next->valuestring[0]) {
            left = m->child->valuestring;
            right = m->child->next->valuestring;
        } else {
            st = dyn_error_set(err, DYN_ERR_PARSE, "%s: merges[%ld] is neither \"left right\" nor [\"left\", \"right\"]",
                               L->path, k);
            break;
        }
        int32_t a = merge_side(L, left, k, err, &st);
        int32_t c = st == DYN_OK ? merge_side(L, right, k, err, &st) : -1;
        size_t need = strlen(left) + strlen(right) + 1;
        if (st == DYN_OK && DYN_RESERVE(joined, joined_cap, need) != 0)
            st = dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", L->path);
        if (st == DYN_OK) {
            /* the merged token is left's bytes then right's */
            size_t la = b->tok_len[a], lc = b->tok_len[c];
            memcpy(joined, b->arena + b->tok_off[a], la);
            memcpy(joined + la, b->arena + b->tok_off[c], lc);
            int32_t merged = vmap_find(b, joined, la + lc);
            if (merged < 0) {
                st = dyn_error_set(err, DYN_ERR_PARSE, "%s: merges[%ld] \"%s %s\" makes a token that is not in the vocabulary",
                                   L->path, k, left, right);
            } else {
                uint64_t key = pair_key(a, c);
                uint32_t i = (uint32_t)hash_u64(key) & b->pmask;
                while (b->pkey[i] != UINT64_MAX && b->pkey[i] != key) i = (i + 1) & b->pmask;
                if (b->pkey[i] == UINT64_MAX) { /* a repeated merge keeps its first (lowest) rank */
                    b->pkey[i] = key;
                    b->prank[i] = (int32_t)k;
                    b->pmerged[i] = merged;
                }
            }
        }
        free(copy);
    }
    free(joined);
    return st;
}

static dyn_status compile_regex(loader *L, const char *pattern, int literal, pcre2_code **out, dyn_error *err)
{
    int code;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP); /* LITERAL allows no UCP */
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &off, NULL);
    if (re == NULL) {
        PCRE2_UCHAR msg[200];
        pcre2_get_error_message(code, msg, sizeof msg);
        return dyn_error_set(err, DYN_ERR_PARSE, "%s: pre-tokenizer regex at offset %zu: %s", L->path, (size_t)off, (char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* without JIT, pcre2_match interprets: slower, same result */
    *out = re;
    return DYN_OK;
}

static dyn_status add_step(loader *L, pre_step s, dyn_error *err)
{
    bpe *b = L->b;
    if (DYN_RESERVE(b->steps, b->cap_steps, (size_t)b->n_steps + 1) != 0) {
        pcre2_code_free(s.re);
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", L->path);
    }
    b->steps[b->n_steps++] = s;
    return DYN_OK;
}

static dyn_status load_pre_tokenizer(loader *L, const cJSON *pt, int *byte_level, dyn_error *err)
{
    const char *type = type_of(pt);
    if (type == NULL) return dyn_error_set(err, DYN_ERR_PARSE, "%s: a pre_tokenizer has no \"type\"", L->path);
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
        if (!cJSON_IsArray(list)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: Sequence pre_tokenizer has no \"pretokenizers\" array", L->path);
        for (const cJSON *c = list->child; c; c = c->next) {
            dyn_status st = load_pre_tokenizer(L, c, byte_level, err);
            if (st != DYN_OK) return st;
        }
        return DYN_OK;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(pt, "use_regex");
        pre_step s = {STEP_BYTELEVEL, NULL, 0, cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pt, "add_prefix_space"))};
        if (ur == NULL || cJSON_IsTrue(ur)) {
            dyn_status st = compile_regex(L, GPT2_REGEX, 0, &s.re, err);
            if (st != DYN_OK) return st;
        }
        *byte_level = 1;
        return add_step(L, s, err);
    }
    if (strcmp(type, "Split") == 0) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(pt, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(pt, "behavior");
        if (!cJSON_IsString(re) && !cJSON_IsString(str))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: Split pre_tokenizer needs \"pattern\": {\"Regex\": ...} or {\"String\": ...}", L->path);
        if (!cJSON_IsString(beh))
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: Split pre_tokenizer has no \"behavior\"", L->path);
        if (strcmp(beh->valuestring, "Isolated") != 0 && strcmp(beh->valuestring, "Removed") != 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: Split behavior \"%s\" is not supported (only Isolated and Removed)",
                                 L->path, beh->valuestring);
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pt, "invert")))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: Split with \"invert\": true is not supported", L->path);
        pre_step s = {STEP_SPLIT, NULL, strcmp(beh->valuestring, "Removed") == 0, 0};
        dyn_status st = compile_regex(L, cJSON_IsString(re) ? re->valuestring : str->valuestring, !cJSON_IsString(re), &s.re, err);
        if (st != DYN_OK) return st;
        return add_step(L, s, err);
    }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: pre_tokenizer \"%s\" is not supported (only ByteLevel, Split and Sequence)",
                         L->path, type);
}

/* Ids of a post-processor's special token name (TemplateProcessing's
 * special_tokens map) appended to *list. */
static dyn_status append_ids(loader *L, int32_t **list, size_t *cap, int *n, const cJSON *ids, dyn_error *err)
{
    bpe *b = L->b;
    int k = cJSON_GetArraySize(ids);
    if (dyn_reserve((void **)list, cap, (size_t)*n + (size_t)k + 1, sizeof **list) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", L->path);
    int32_t *p = *list;
    for (const cJSON *v = ids->child; v; v = v->next) {
        if (!is_id_number(v) ||
            v->valuedouble >= b->vocab)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: post_processor names a token id outside the vocabulary", L->path);
        p[(*n)++] = (int32_t)v->valuedouble;
    }
    return DYN_OK;
}

static dyn_status load_post_processor(loader *L, const cJSON *pp, dyn_error *err)
{
    bpe *b = L->b;
    const char *type = type_of(pp);
    if (type == NULL) return dyn_error_set(err, DYN_ERR_PARSE, "%s: a post_processor has no \"type\"", L->path);
    if (strcmp(type, "ByteLevel") == 0) return DYN_OK; /* offsets only */
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
        if (!cJSON_IsArray(list)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: Sequence post_processor has no \"processors\" array", L->path);
        for (const cJSON *c = list->child; c; c = c->next) {
            dyn_status st = load_post_processor(L, c, err);
            if (st != DYN_OK) return st;
        }
        return DYN_OK;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        const cJSON *cls = cJSON_GetObjectItemCaseSensitive(pp, "cls");
        const cJSON *sep = cJSON_GetObjectItemCaseSensitive(pp, "sep");
        if (!cJSON_IsArray(cls) || cJSON_GetArraySize(cls) != 2 || !cJSON_IsArray(sep) || cJSON_GetArraySize(sep) != 2)
            return dyn_error_set(err, DYN_ERR_PARSE, "%s: %s needs \"cls\" and \"sep\" as [token, id]", L->path, type);
        cJSON one_cls = *cJSON_GetArrayItem(cls, 1), one_sep = *cJSON_GetArrayItem(sep, 1);
        one_cls.next = one_sep.next = NULL;
        cJSON wrap_cls = {0}, wrap_sep = {0};
        wrap_cls.type = wrap_sep.type = cJSON_Array;
        wrap_cls.child = &one_cls;
        wrap_sep.child = &one_sep;
        dyn_status st = append_ids(L, &b->prefix, &b->cap_prefix, &b->n_prefix, &wrap_cls, err);
        return st != DYN_OK ? st : append_ids(L, &b->suffix, &b->cap_suffix, &b->n_suffix, &wrap_sep, err);
    }
    if (strcmp(type, "TemplateProcessing") == 0) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(pp, "single");
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(pp, "special_tokens");
        if (!cJSON_IsArray(single)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: TemplateProcessing has no \"single\" array", L->path);
        int after = 0;
        for (const cJSON *it = single->child; it; it = it->next) {
            const cJSON *seq = cJSON_GetObjectItemCaseSensitive(it, "Sequence");
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
            if (seq) {
                if (after) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: a single template with two sequences is not supported", L->path);
                after = 1;
                continue;
            }
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(sp, "id");
            if (!cJSON_IsString(name)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: TemplateProcessing item is neither Sequence nor SpecialToken", L->path);
            const cJSON *ent = cJSON_GetObjectItemCaseSensitive(specials, name->valuestring);
            const cJSON *ids = cJSON_GetObjectItemCaseSensitive(ent, "ids");
            if (!cJSON_IsArray(ids))
                return dyn_error_set(err, DYN_ERR_PARSE, "%s: TemplateProcessing special token \"%s\" has no ids", L->path, name->valuestring);
            dyn_status st = after ? append_ids(L, &b->suffix, &b->cap_suffix, &b->n_suffix, ids, err)
                                   : append_ids(L, &b->prefix, &b->cap_prefix, &b->n_prefix, ids, err);
            if (st != DYN_OK) return st;
        }
        return DYN_OK;
    }
    return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: post_processor \"%s\" is not supported", L->path, type);
}

static int32_t bpe_lookup(void *ctx, const char *token)
{
    bpe *b = ctx;
    for (int i = 0; i < b->n_added; i++)
        if (strcmp(b->arena + b->added[i].off, token) == 0) return b->added[i].id;
    loader L = {0};
    L.b = b;
    L.path = b->path;
    byte_unicode_table(L.b2u, L.u2b);
    dyn_error e;
    long len = token_bytes(&L, token, 1, &e);
    int32_t id = len < 0 ? -1 : vmap_find(b, L.conv, (size_t)len);
    free(L.conv);
    return id;
}

static dyn_status bpe_encode(dyn_tokenizer *t, const char *text, size_t len, int add_special, dyn_token_buf *out, dyn_error *err);
static dyn_status bpe_decode(dyn_tokenizer *t, const int32_t *ids, size_t n, int skip_special, dyn_byte_buf *out, dyn_error *err);
static const dyn_tokenizer_ops bpe_ops = {bpe_encode, bpe_decode, bpe_free};

/* Line and column of byte off in text, for a JSON syntax error. */
static void line_col(const char *text, size_t off, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off; i++) {
        if (text[i] == '\n') { (*line)++; *col = 1; }
        else (*col)++;
    }
}

static dyn_status load_json(loader *L, cJSON *root, dyn_error *err)
{
    bpe *b = L->b;
    if (!cJSON_IsObject(root)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: not a JSON object", L->path);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model)) return dyn_error_set(err, DYN_ERR_PARSE, "%s: no \"model\" object", L->path);
    const char *type = type_of(model);
    if (type == NULL && cJSON_GetObjectItemCaseSensitive(model, "merges")) type = "BPE"; /* older files name no type */
    if (type == NULL) return dyn_error_set(err, DYN_ERR_PARSE, "%s: model has no \"type\"", L->path);
    if (strcmp(type, "BPE") != 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: model type \"%s\" is not supported (only byte-level BPE)", L->path, type);
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: BPE dropout is not supported", L->path);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: BPE with byte_fallback (SentencePiece-style) is not supported", L->path);
    static const char *affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, affixes[i]);
        if (cJSON_IsString(v) && v->valuestring[0])
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: BPE %s \"%s\" is not supported", L->path, affixes[i], v->valuestring);
    }
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        /* NFC (Qwen2), alone or as the only member of a Sequence */
        const char *nt = type_of(norm);
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(norm, "normalizers");
        if (nt && strcmp(nt, "Sequence") == 0 && cJSON_IsArray(list) && cJSON_GetArraySize(list) == 1) {
            norm = list->child;
            nt = type_of(norm);
        }
        if (nt == NULL || strcmp(nt, "NFC") != 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: normalizer \"%s\" is not supported (only NFC)", L->path,
                                 nt ? nt : "?");
        b->nfc = 1;
    }
    b->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    dyn_status st = load_vocab(L, cJSON_GetObjectItemCaseSensitive(model, "vocab"),
                               cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), err);
    if (st != DYN_OK) return st;
    st = load_merges(L, cJSON_GetObjectItemCaseSensitive(model, "merges"), err);
    if (st != DYN_OK) return st;
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    int byte_level = 0;
    if (pt && !cJSON_IsNull(pt)) st = load_pre_tokenizer(L, pt, &byte_level, err);
    if (st != DYN_OK) return st;
    if (!byte_level)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: BPE without a ByteLevel pre-tokenizer is not supported (only byte-level BPE)", L->path);
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(root, "post_processor");
    if (pp && !cJSON_IsNull(pp)) st = load_post_processor(L, pp, err);
    if (st != DYN_OK) return st;
    b->md = pcre2_match_data_create(8, NULL);
    b->cache = calloc(CACHE_SLOTS, sizeof *b->cache);
    if (b->md == NULL || b->cache == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", L->path);
    return DYN_OK;
}

dyn_tokenizer *dyn_tokenizer_load_bpe_json(const char *path, dyn_error *err)
{
    char *text = NULL;
    size_t len = 0;
    if (dyn_file_read_all(path, &text, &len, err) != DYN_OK) return NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (root == NULL) {
        int line, col;
        size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        line_col(text, off, &line, &col);
        dyn_error_set(err, DYN_ERR_PARSE, "%s: line %d, column %d: not valid JSON", path, line, col);
        free(text);
        return NULL;
    }
    loader L = {0};
    byte_unicode_table(L.b2u, L.u2b);
    L.path = path;
    bpe *b = calloc(1, sizeof *b);
    dyn_status st = DYN_OK;
    if (b == NULL || (b->path = strdup(path)) == NULL) st = dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", path);
    L.b = b;
    if (st == DYN_OK) st = load_json(&L, root, err);
    cJSON_Delete(root);
    free(text);
    free(L.conv);
    if (st != DYN_OK) {
        bpe_free(b);
        return NULL;
    }
    dyn_tokenizer *t = dyn_tokenizer_new(DYN_TOKENIZER_BPE, path, &bpe_ops, b, err);
    if (t == NULL) return NULL;
    t->vocab = b->vocab;
    if (b->n_prefix) t->sp.bos = b->prefix[0];
    if (b->n_suffix) t->sp.eos = b->suffix[b->n_suffix - 1];
    char *dir = dyn_tok_dirname(path);
    if (dir == NULL) st = dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", path);
    else st = dyn_tok_read_specials(dir, t->vocab, bpe_lookup, b, &t->sp, NULL, NULL, err);
    free(dir);
    if (st == DYN_OK && t->sp.eos < 0) {
        /* GPT-2's files name no eos; its classes default every special to
         * <|endoftext|>. */
        int32_t id = bpe_lookup(b, "<|endoftext|>");
        if (id >= 0) {
            t->sp.eos = id;
            if (t->sp.bos < 0) t->sp.bos = id;
        }
    }
    if (st != DYN_OK) {
        dyn_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ---- encoding ---------------------------------------------------------- */

static dyn_status grow(void **p, size_t *cap, size_t need, size_t elem, dyn_error *err)
{
    if (dyn_reserve(p, cap, *cap || need > 64 ? need : 64, elem) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "tokenizer: out of memory (%zu items)", need);
    return DYN_OK;
}

/* Merge the symbols sym[0..n) in place, lowest rank first, leftmost among
 * equals, by rescanning every pair after each merge: O(n^2), kept as the
 * reference for bpe_merge_heap and used for short pieces. Returns the count
 * left. */
static size_t bpe_merge_simple(const bpe *b, int32_t *sym, size_t n)
{
    while (n > 1) {
        int32_t best = INT32_MAX, best_merged = -1;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t m, r = pair_rank(b, sym[i], sym[i + 1], &m);
            if (r >= 0 && r < best) { best = r; best_merged = m; at = i; }
        }
        if (best_merged < 0) break;
        sym[at] = best_merged;
        memmove(sym + at + 1, sym + at + 2, (n - at - 2) * sizeof *sym);
        n--;
    }
    return n;
}

static int heap_less(const heap_ent *x, const heap_ent *y)
{
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(heap_ent *h, size_t *n, heap_ent e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static heap_ent heap_pop(heap_ent *h, size_t *n)
{
    heap_ent top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* The same merges as bpe_merge_simple in O(n log n): symbols form a linked
 * list (prev/next, -1 at the ends; a merged-away symbol gets id -1) and a
 * binary heap holds every adjacent pair that has a rank, keyed (rank, left
 * symbol index). An entry is stale when its left symbol has died or its
 * right neighbour is no longer the one it was pushed with; stale entries are
 * skipped. Each merge pushes at most two pairs, so the heap holds < 2n. */
static size_t bpe_merge_heap(bpe *b, int32_t *sym, size_t n, dyn_error *err)
{
    if (n < 2) return n;
    if (grow((void **)&b->sym_prev, &b->sym_cap, n, sizeof(int32_t), err) != DYN_OK) return SIZE_MAX;
    if (grow((void **)&b->sym_next, &b->sym_next_cap, n, sizeof(int32_t), err) != DYN_OK) return SIZE_MAX;
    if (grow((void **)&b->heap, &b->heap_cap, 2 * n, sizeof(heap_ent), err) != DYN_OK) return SIZE_MAX;
    int32_t *prev = b->sym_prev, *next = b->sym_next;
    heap_ent *h = b->heap;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t m, r = pair_rank(b, sym[i], sym[i + 1], &m);
        if (r >= 0) heap_push(h, &hn, (heap_ent){r, (int32_t)i, (int32_t)i + 1});
    }
    while (hn > 0) {
        heap_ent e = heap_pop(h, &hn);
        int32_t l = e.left, r = e.right;
        if (sym[l] < 0 || next[l] != r || sym[r] < 0) continue;
        int32_t merged = -1, rank = pair_rank(b, sym[l], sym[r], &merged);
        if (rank != e.rank) continue; /* l or r changed since the push */
        sym[l] = merged;
        sym[r] = -1;
        next[l] = next[r];
        if (next[r] >= 0) prev[next[r]] = l;
        if (prev[l] >= 0) {
            int32_t m, rk = pair_rank(b, sym[prev[l]], sym[l], &m);
            if (rk >= 0) heap_push(h, &hn, (heap_ent){rk, prev[l], l});
        }
        if (next[l] >= 0) {
            int32_t m, rk = pair_rank(b, sym[l], sym[next[l]], &m);
            if (rk >= 0) heap_push(h, &hn, (heap_ent){rk, l, next[l]});
        }
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (sym[i] >= 0) sym[k++] = sym[i];
    return k;
}

/* Test hooks: run one merge algorithm on ids (in place), returning the
 * count left (SIZE_MAX when out of memory). */
size_t dyn_tok_bpe_merge_for_test(dyn_tokenizer *t, int32_t *ids, size_t n, int heap)
{
    bpe *b = t->impl;
    return heap ? bpe_merge_heap(b, ids, n, NULL) : bpe_merge_simple(b, ids, n);
}

static void cache_clear(bpe *b)
{
    memset(b->cache, 0, CACHE_SLOTS * sizeof *b->cache);
    b->cache_used = 0;
    b->cache_keys_n = 0;
    b->cache_ids_n = 0;
}

/* Encode one piece (bytes s[0..n)) and append its ids to out. */
static dyn_status encode_piece(bpe *b, const char *s, size_t n, dyn_token_buf *out, dyn_error *err)
{
    if (n == 0) return DYN_OK;
    dyn_status st = dyn_token_buf_reserve(out, n, err);
    if (st != DYN_OK) return st;
    if (n == 1) {
        out->ids[out->n++] = b->byte_id[(unsigned char)s[0]];
        return DYN_OK;
    }
    if (b->ignore_merges) {
        int32_t id = vmap_find(b, s, n);
        if (id >= 0) {
            out->ids[out->n++] = id;
            return DYN_OK;
        }
    }
    uint64_t h = 0;
    uint32_t slot = 0;
    if (n <= CACHE_MAX_PIECE) {
        h = hash_bytes(s, n) | 1;
        for (slot = (uint32_t)h & (CACHE_SLOTS - 1);; slot = (slot + 1) & (CACHE_SLOTS - 1)) {
            cache_slot *c = &b->cache[slot];
            if (c->hash == 0) break;
            if (c->hash == h && c->key_len == n && memcmp(b->cache_keys + c->key_off, s, n) == 0) {
                memcpy(out->ids + out->n, b->cache_ids + c->ids_off, c->ids_n * sizeof(int32_t));
                out->n += c->ids_n;
                return DYN_OK;
            }
        }
    }
    int32_t *sym = out->ids + out->n;
    for (size_t i = 0; i < n; i++) sym[i] = b->byte_id[(unsigned char)s[i]];
    size_t k = n <= BPE_SIMPLE_MAX ? bpe_merge_simple(b, sym, n) : bpe_merge_heap(b, sym, n, err);
    if (k == SIZE_MAX) return err ? err->code : DYN_ERR_NOMEM;
    out->n += k;
    if (n <= CACHE_MAX_PIECE) {
        if (b->cache_used >= CACHE_SLOTS / 2) {
            cache_clear(b);
            for (slot = (uint32_t)h & (CACHE_SLOTS - 1); b->cache[slot].hash; slot = (slot + 1) & (CACHE_SLOTS - 1)) {}
        }
        size_t kcap = CACHE_SLOTS / 2 * CACHE_MAX_PIECE;
        if (b->cache_keys == NULL) {
            b->cache_keys = malloc(kcap);
            b->cache_ids = malloc(kcap * sizeof(int32_t));
            if (b->cache_keys == NULL || b->cache_ids == NULL) return DYN_OK; /* no cache: still correct */
        }
        cache_slot *c = &b->cache[slot];
        c->hash = h;
        c->key_off = (uint32_t)b->cache_keys_n;
        c->key_len = (uint16_t)n;
        c->ids_off = (uint32_t)b->cache_ids_n;
        c->ids_n = (uint16_t)k;
        memcpy(b->cache_keys + b->cache_keys_n, s, n);
        memcpy(b->cache_ids + b->cache_ids_n, sym, k * sizeof(int32_t));
        b->cache_keys_n += n;
        b->cache_ids_n += k;
        b->cache_used++;
    }
    return DYN_OK;
}

static dyn_status push_piece(piece **list, size_t *n, size_t *cap, uint32_t off, uint32_t len, dyn_error *err)
{
    if (len == 0) return DYN_OK;
    dyn_status st = grow((void **)list, cap, *n + 1, sizeof(piece), err);
    if (st != DYN_OK) return st;
    (*list)[(*n)++] = (piece){off, len};
    return DYN_OK;
}

/* Append s[0..n) to pbuf; its offset in *off. */
static dyn_status pbuf_add(bpe *b, const char *s, size_t n, uint32_t *off, dyn_error *err)
{
    dyn_status st = grow((void **)&b->pbuf, &b->pbuf_cap, b->pbuf_n + n, 1, err);
    if (st != DYN_OK) return st;
    if (b->pbuf_n + n > UINT32_MAX) return dyn_error_set(err, DYN_ERR_INVALID_ARG, "tokenizer: text too long for one call");
    memcpy(b->pbuf + b->pbuf_n, s, n);
    *off = (uint32_t)b->pbuf_n;
    b->pbuf_n += n;
    return DYN_OK;
}

/* Split each current piece by re (Isolated: matches and the text between
 * them are pieces; remove: matches are dropped). */
static dyn_status split_pieces(bpe *b, const pcre2_code *re, int remove, dyn_error *err)
{
    size_t n2 = 0;
    dyn_status st = DYN_OK;
    for (size_t p = 0; p < b->n_pieces && st == DYN_OK; p++) {
        uint32_t off = b->pieces[p].off, len = b->pieces[p].len;
        PCRE2_SPTR subj = (PCRE2_SPTR)(b->pbuf + off);
        size_t at = 0, gap = 0;
        while (at <= len && st == DYN_OK) {
            int rc = pcre2_match(re, subj, len, at, PCRE2_NO_UTF_CHECK, b->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) {
                PCRE2_UCHAR msg[200];
                pcre2_get_error_message(rc, msg, sizeof msg);
                return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: pre-tokenizer regex failed on this text: %s", b->path,
                                     (char *)msg); /* e.g. the match limit, for a file's pathological regex */
            }
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(b->md);
            size_t s = ov[0], e = ov[1];
            if (e == s) { /* an empty match cuts nothing; step over one character */
                at = s + 1;
                while (at < len && (subj[at] & 0xC0) == 0x80) at++;
                if (s >= len) break;
                continue;
            }
            st = push_piece(&b->pieces2, &n2, &b->pieces2_cap, off + (uint32_t)gap, (uint32_t)(s - gap), err);
            if (st == DYN_OK && !remove) st = push_piece(&b->pieces2, &n2, &b->pieces2_cap, off + (uint32_t)s, (uint32_t)(e - s), err);
            at = gap = e;
        }
        if (st == DYN_OK) st = push_piece(&b->pieces2, &n2, &b->pieces2_cap, off + (uint32_t)gap, (uint32_t)(len - gap), err);
    }
    if (st != DYN_OK) return st;
    piece *tmp = b->pieces;
    size_t tcap = b->pieces_cap;
    b->pieces = b->pieces2;
    b->pieces_cap = b->pieces2_cap;
    b->pieces2 = tmp;
    b->pieces2_cap = tcap;
    b->n_pieces = n2;
    return DYN_OK;
}

/* Pre-tokenize the valid UTF-8 run s[0..n) and encode its pieces. */
static dyn_status encode_valid_run(bpe *b, const char *s, size_t n, dyn_token_buf *out, dyn_error *err)
{
    b->pbuf_n = 0;
    b->n_pieces = 0;
    uint32_t off = 0;
    dyn_status st = DYN_OK;
    if (b->nfc) {
        b->norm.n = 0;
        st = dyn_tok_nfc(s, n, &b->norm, err);
        if (st != DYN_OK) return st;
        s = b->norm.data;
        n = b->norm.n;
    }
    st = pbuf_add(b, s, n, &off, err);
    if (st == DYN_OK) st = push_piece(&b->pieces, &b->n_pieces, &b->pieces_cap, off, (uint32_t)n, err);
    for (int k = 0; k < b->n_steps && st == DYN_OK; k++) {
        const pre_step *step = &b->steps[k];
        if (step->kind == STEP_BYTELEVEL && step->prefix_space) {
            for (size_t p = 0; p < b->n_pieces && st == DYN_OK; p++) {
                piece *pc = &b->pieces[p];
                if (b->pbuf[pc->off] == ' ') continue;
                uint32_t o1 = 0, o2 = 0;
                st = pbuf_add(b, " ", 1, &o1, err);
                if (st == DYN_OK) st = grow((void **)&b->pbuf, &b->pbuf_cap, b->pbuf_n + pc->len, 1, err);
                if (st == DYN_OK) st = pbuf_add(b, b->pbuf + pc->off, pc->len, &o2, err);
                if (st == DYN_OK) {
                    pc->off = o1;
                    pc->len += 1;
                }
            }
        }
        if (st == DYN_OK && step->re) st = split_pieces(b, step->re, step->remove, err);
    }
    for (size_t p = 0; p < b->n_pieces && st == DYN_OK; p++)
        st = encode_piece(b, b->pbuf + b->pieces[p].off, b->pieces[p].len, out, err);
    return st;
}

/* Encode s[0..n), which holds no added token: valid UTF-8 runs through the
 * pre-tokenizer, invalid runs as one piece each. */
static dyn_status encode_plain(bpe *b, const char *s, size_t n, dyn_token_buf *out, dyn_error *err)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t cp;
        size_t l;
        while (i < n && (u[i] < 0x80 || (l = utf8_char(u + i, n - i, &cp)) > 0)) i += u[i] < 0x80 ? 1 : l;
        if (i > start) {
            dyn_status st = encode_valid_run(b, s + start, i - start, out, err);
            if (st != DYN_OK) return st;
        }
        start = i;
        while (i < n && u[i] >= 0x80 && utf8_char(u + i, n - i, &cp) == 0) i++;
        if (i > start) {
            dyn_status st = encode_piece(b, s + start, i - start, out, err);
            if (st != DYN_OK) return st;
        }
    }
    return DYN_OK;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

static dyn_status bpe_encode(dyn_tokenizer *t, const char *text, size_t len, int add_special, dyn_token_buf *out, dyn_error *err)
{
    bpe *b = t->impl;
    dyn_status st = DYN_OK;
    if (add_special && b->n_prefix) {
        st = dyn_token_buf_reserve(out, (size_t)b->n_prefix, err);
        if (st != DYN_OK) return st;
        memcpy(out->ids + out->n, b->prefix, (size_t)b->n_prefix * sizeof(int32_t));
        out->n += (size_t)b->n_prefix;
    }
    /* Cut at added tokens: leftmost match, longest there. */
    size_t from = 0, i = 0;
    while (i < len && st == DYN_OK) {
        unsigned char c = (unsigned char)text[i];
        int lo = b->added_first[c], hi = b->added_first[c + 1];
        int hit = -1;
        for (int k = lo; k < hi; k++) {
            const added_token *a = &b->added[b->added_by_byte[k]];
            if (a->len <= len - i && memcmp(text + i, b->arena + a->off, a->len) == 0) { hit = b->added_by_byte[k]; break; }
        }
        if (hit < 0) { i++; continue; }
        const added_token *a = &b->added[hit];
        size_t s = i, e = i + a->len;
        if (a->lstrip) while (s > from && is_space(text[s - 1])) s--;
        if (a->rstrip) while (e < len && is_space(text[e])) e++;
        st = encode_plain(b, text + from, s - from, out, err);
        if (st == DYN_OK) st = dyn_token_buf_reserve(out, 1, err);
        if (st == DYN_OK) out->ids[out->n++] = a->id;
        from = i = e;
    }
    if (st == DYN_OK) st = encode_plain(b, text + from, len - from, out, err);
    if (st == DYN_OK && add_special && b->n_suffix) {
        st = dyn_token_buf_reserve(out, (size_t)b->n_suffix, err);
        if (st != DYN_OK) return st;
        memcpy(out->ids + out->n, b->suffix, (size_t)b->n_suffix * sizeof(int32_t));
        out->n += (size_t)b->n_suffix;
    }
    return st;
}

static dyn_status bpe_decode(dyn_tokenizer *t, const int32_t *ids, size_t n, int skip_special, dyn_byte_buf *out, dyn_error *err)
{
    bpe *b = t->impl;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (b->tok_len[id] == UINT32_MAX)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: token id %d (position %zu) has no token in the vocabulary",
                                 b->path, (int)id, i);
        if (skip_special && b->tok_special[id]) continue;
        dyn_status st = dyn_byte_buf_append(out, b->arena + b->tok_off[id], b->tok_len[id], err);
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}
