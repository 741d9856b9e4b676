/*
 * tok_nfc.c — Unicode NFC normalization of valid UTF-8, the normalizer
 * Qwen2's tokenizer.json names ("NFC"); tok_bpe.c runs it on each valid
 * UTF-8 run before pre-tokenization, as Hugging Face's pipeline does.
 *
 * The algorithm of UAX #15: canonical decomposition (table one step at a
 * time, applied recursively; Hangul syllables arithmetically), canonical
 * ordering of combining marks (a stable insertion sort by combining class),
 * then canonical composition of each unblocked pair into its primary
 * composite. The data (tok_nfc_table.h) comes from Python's unicodedata of
 * the same Unicode version as PCRE2's (scripts/gen_nfc_table.py).
 *
 * Fast path: text whose every code point is NFC_QC=Yes with combining class 0
 * (all of ASCII, CJK ideographs, precomposed Hangul, most scripts) is
 * already NFC and is copied as is. test_tokenizer_nfc.c compares the result
 * with Python's unicodedata.normalize over every code point and over random
 * sequences of letters, combining marks and jamo.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "data/tokenizer_impl.h" /* defines: dyn_byte_buf_append, dyn_byte_buf_reserve */
#include "data/tok_nfc_table.h"  /* defines: nfc_ccc, nfc_decomp, nfc_comp, nfc_unsafe */
#include "util/util.h"           /* defines: DYN_RESERVE */

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7,
       L_COUNT = 19, V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

/* Row of table t (n rows of w columns, sorted by column 0) whose first
 * column is key, or -1. */
static long find_row(const uint32_t *t, size_t n, size_t w, uint32_t key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint32_t k = t[mid * w];
        if (k == key) return (long)mid;
        if (k < key) lo = mid + 1;
        else hi = mid;
    }
    return -1;
}

static uint32_t ccc_of(uint32_t cp)
{
    if (cp < 0x300) return 0;
    long r = find_row(&nfc_ccc[0][0], COUNT(nfc_ccc), 2, cp);
    return r < 0 ? 0 : nfc_ccc[r][1];
}

static int is_unsafe(uint32_t cp)
{
    size_t lo = 0, hi = COUNT(nfc_unsafe);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < nfc_unsafe[mid][0]) hi = mid;
        else if (cp > nfc_unsafe[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

/* Primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b)
{
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE && b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = COUNT(nfc_comp);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const uint32_t *r = nfc_comp[mid];
        if (r[0] == a && r[1] == b) return r[2];
        if (r[0] < a || (r[0] == a && r[1] < b)) lo = mid + 1;
        else hi = mid;
    }
    return 0;
}

typedef struct cp_buf {
    uint32_t *v;
    size_t n, cap;
} cp_buf;

static int cp_push(cp_buf *b, uint32_t cp)
{
    if (DYN_RESERVE(b->v, b->cap, b->cap ? b->n + 1 : 64) != 0) return -1;
    b->v[b->n++] = cp;
    return 0;
}

/* Append the full canonical decomposition of cp. */
static int decompose(cp_buf *b, uint32_t cp)
{
    if (cp >= S_BASE && cp < S_BASE + S_COUNT) {
        uint32_t s = cp - S_BASE, t = s % T_COUNT;
        if (cp_push(b, L_BASE + s / N_COUNT) || cp_push(b, V_BASE + (s % N_COUNT) / T_COUNT)) return -1;
        return t ? cp_push(b, T_BASE + t) : 0;
    }
    long r = cp < 0xC0 ? -1 : find_row(&nfc_decomp[0][0], COUNT(nfc_decomp), 3, cp);
    if (r < 0) return cp_push(b, cp);
    if (decompose(b, nfc_decomp[r][1])) return -1;
    return nfc_decomp[r][2] ? decompose(b, nfc_decomp[r][2]) : 0;
}

/* Decode one valid UTF-8 character (the caller guarantees validity). */
static size_t utf8_decode(const unsigned char *s, uint32_t *cp)
{
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    if (s[0] < 0xE0) { *cp = ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F); return 2; }
    if (s[0] < 0xF0) { *cp = ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F); return 3; }
    *cp = ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

static size_t utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* NFC of the valid UTF-8 text s[0..n), appended to out. */
dyn_status dyn_tok_nfc(const char *s, size_t n, dyn_byte_buf *out, dyn_error *err)
{
    const unsigned char *u = (const unsigned char *)s;
    int safe = 1;
    for (size_t i = 0; i < n && safe;) {
        if (u[i] < 0xCC) { /* below U+0300 (or a continuation byte, skipped with its lead) */
            i += u[i] < 0x80 ? 1 : u[i] < 0xE0 ? 2 : u[i] < 0xF0 ? 3 : 4;
            continue;
        }
        uint32_t cp;
        i += utf8_decode(u + i, &cp);
        safe = !is_unsafe(cp);
    }
    if (safe) return dyn_byte_buf_append(out, s, n, err);

    cp_buf d = {0};
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += utf8_decode(u + i, &cp);
        if (decompose(&d, cp)) {
            free(d.v);
            return dyn_error_set(err, DYN_ERR_NOMEM, "NFC: out of memory");
        }
    }
    /* canonical ordering: stable sort of each run of non-zero classes */
    for (size_t i = 1; i < d.n; i++) {
        uint32_t c = ccc_of(d.v[i]);
        if (c == 0) continue;
        for (size_t j = i; j > 0; j--) {
            uint32_t p = ccc_of(d.v[j - 1]);
            if (p == 0 || p <= c) break;
            uint32_t t = d.v[j];
            d.v[j] = d.v[j - 1];
            d.v[j - 1] = t;
        }
    }
    /* canonical composition, in place: d.v[0..k) is the result so far */
    size_t k = 0;
    long starter = -1;
    uint32_t last_cc = 0;
    for (size_t i = 0; i < d.n; i++) {
        uint32_t ch = d.v[i], cc = ccc_of(ch);
        if (starter >= 0) {
            int adjacent = (size_t)starter == k - 1;
            if (adjacent || (last_cc != 0 && last_cc < cc)) {
                uint32_t c = compose(d.v[starter], ch);
                if (c) {
                    d.v[starter] = c;
                    continue;
                }
            }
        }
        if (cc == 0) starter = (long)k;
        last_cc = cc;
        d.v[k++] = ch;
    }
    dyn_status st = dyn_byte_buf_reserve(out, 4 * k, err);
    if (st == DYN_OK) {
        for (size_t i = 0; i < k; i++) out->n += utf8_encode(d.v[i], out->data + out->n);
        out->data[out->n] = '\0';
    }
    free(d.v);
    return st;
}
