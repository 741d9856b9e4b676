/* indexed.c — Megatron-LM indexed datasets (PREFIX.idx + PREFIX.bin), read
 * memory-mapped, and the writer behind `dynapipe data convert`.
 *
 * PREFIX.idx, all little-endian:
 *   9 bytes   magic "MMIDIDX\0\0"
 *   uint64    version (1)
 *   uint8     dtype code of the tokens: 1 uint8, 2 int8, 3 int16, 4 int32,
 *             5 int64, 6 float64, 7 float32, 8 uint16
 *   uint64    sequence count S
 *   uint64    document count D
 *   int32[S]  sequence lengths (tokens)
 *   int64[S]  byte offset of each sequence in PREFIX.bin
 *   int64[D]  document indices (first sequence of each document; the list
 *             starts at 0 and Megatron ends it with S)
 * PREFIX.bin holds the tokens. Opening checks everything but the token
 * values: the header, the exact file size, every length and pointer against
 * the .bin, the document list; reading a sample checks its token values.
 * Arrays are read byte-wise (no alignment is assumed of the mapping). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/corpus_impl.h" /* defines: dyn_corpus, indexed_file, corpus_fit_lengths */
#include "util/util.h"        /* defines: dyn_atomic_*, dyn_calloc */

#define IDX_MAGIC "MMIDIDX\0\0"
#define IDX_MAGIC_LEN 9
#define IDX_HEADER (IDX_MAGIC_LEN + 8 + 1 + 8 + 8)

static uint64_t rd_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | p[k];
    return v;
}

static int32_t rd_i32(const unsigned char *p)
{
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    return (int32_t)v;
}

/* Bytes per token of a dtype code; 0 if unknown. */
static int32_t dtype_size(int code)
{
    static const int32_t size[9] = {0, 1, 1, 2, 4, 8, 8, 4, 2};
    return code >= 1 && code <= 8 ? size[code] : 0;
}

static const char *dtype_name(int code)
{
    static const char *const name[9] = {"?", "uint8", "int8", "int16", "int32", "int64", "float64", "float32", "uint16"};
    return code >= 1 && code <= 8 ? name[code] : "?";
}

/* Token k of a sequence starting at p, as a double (exact for every integer
 * dtype up to 2^53, which is beyond any vocabulary). */
static double token_at(const unsigned char *p, int dtype, int64_t k)
{
    const unsigned char *q = p + k * dtype_size(dtype);
    uint64_t u = 0;
    switch (dtype) {
    case 1: return q[0];
    case 2: return (int8_t)q[0];
    case 3: return (int16_t)(uint16_t)(q[0] | q[1] << 8);
    case 4: return rd_i32(q);
    case 5: return (double)(int64_t)rd_u64(q);
    case 6: {
        u = rd_u64(q);
        double d;
        memcpy(&d, &u, sizeof d);
        return d;
    }
    case 7: {
        uint32_t w = (uint32_t)rd_i32(q);
        float f;
        memcpy(&f, &w, sizeof f);
        return f;
    }
    default: return (uint16_t)(q[0] | q[1] << 8);
    }
}

static int64_t seq_size(const indexed_file *f, int64_t i) { return rd_i32(f->sizes + 4 * i); }
static int64_t seq_ptr(const indexed_file *f, int64_t i) { return (int64_t)rd_u64(f->pointers + 8 * i); }

/* mmap a whole file read-only (NULL map for an empty file). */
static dyn_status map_file(const char *path, void **map, size_t *size, dyn_error *err)
{
    *map = NULL;
    *size = 0;
    int fd;
    dyn_status st0 = corpus_open_regular(path, &fd, err); /* a FIFO cannot be mapped, and would block */
    if (st0 != DYN_OK) return st0;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        dyn_status st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return st;
    }
    if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            dyn_status st = dyn_error_set(err, DYN_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
            close(fd);
            return st;
        }
        *map = m;
        *size = (size_t)sb.st_size;
    }
    close(fd); /* the mapping stays valid */
    return DYN_OK;
}

static void indexed_file_close(indexed_file *f)
{
    if (f->idx_map) munmap(f->idx_map, f->idx_size);
    if (f->bin_map) munmap(f->bin_map, f->bin_size);
    free(f->prefix);
    memset(f, 0, sizeof *f);
}

/* Check the header, sizes, pointers and documents of a mapped .idx against
 * its .bin. */
static dyn_status idx_check(indexed_file *f, const char *idx_path, const char *bin_path, dyn_error *err)
{
    const unsigned char *h = f->idx_map;
    if (f->idx_size < IDX_HEADER)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: truncated header (%zu bytes, a header is %d)", idx_path,
                             f->idx_size, IDX_HEADER);
    if (memcmp(h, IDX_MAGIC, IDX_MAGIC_LEN) != 0)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: wrong magic (not a Megatron indexed dataset .idx)", idx_path);
    uint64_t version = rd_u64(h + 9);
    if (version != 1)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: version %llu (only version 1 is supported)", idx_path,
                             (unsigned long long)version);
    f->dtype = h[17];
    f->elem = dtype_size(f->dtype);
    if (f->elem == 0) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: unknown dtype code %d", idx_path, f->dtype);
    uint64_t s = rd_u64(h + 18), d = rd_u64(h + 26);
    if (s > (UINT64_C(1) << 40) || d > (UINT64_C(1) << 40))
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: implausible counts (%llu sequences, %llu documents)",
                             idx_path, (unsigned long long)s, (unsigned long long)d);
    uint64_t want = IDX_HEADER + 12 * s + 8 * d;
    if (f->idx_size != want)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s: %zu bytes, but %llu sequences and %llu documents need %llu (truncated or corrupt)",
                             idx_path, f->idx_size, (unsigned long long)s, (unsigned long long)d,
                             (unsigned long long)want);
    if (s == 0) /* as an empty JSONL: no reader can use it */
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: no sequences (an empty dataset)", idx_path);
    f->n_seq = (int64_t)s;
    f->n_doc = (int64_t)d;
    f->sizes = h + IDX_HEADER;
    f->pointers = f->sizes + 4 * s;
    const unsigned char *docs = f->pointers + 8 * s;
    for (int64_t i = 0; i < f->n_seq; i++) {
        int64_t n = seq_size(f, i), p = seq_ptr(f, i);
        if (n < 0) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: sequence %lld: negative length %lld", idx_path,
                                        (long long)i, (long long)n);
        if (p < 0 || (uint64_t)p > f->bin_size || (uint64_t)(n * f->elem) > f->bin_size - (uint64_t)p)
            return dyn_error_set(err, DYN_ERR_CORRUPT,
                                 "%s: sequence %lld: %lld tokens at byte %lld run past the end of %s (%zu bytes)",
                                 idx_path, (long long)i, (long long)n, (long long)p, bin_path, f->bin_size);
    }
    int64_t prev = 0;
    for (int64_t k = 0; k < f->n_doc; k++) {
        int64_t v = (int64_t)rd_u64(docs + 8 * k);
        if ((k == 0 && v != 0) || v < prev || v > f->n_seq)
            return dyn_error_set(err, DYN_ERR_CORRUPT,
                                 "%s: document index %lld = %lld (must start at 0, not decrease, stay <= %lld)",
                                 idx_path, (long long)k, (long long)v, (long long)f->n_seq);
        prev = v;
    }
    return DYN_OK;
}

static char *path_join(const char *prefix, const char *suffix)
{
    size_t n = strlen(prefix), m = strlen(suffix);
    char *p = malloc(n + m + 1);
    if (p) {
        memcpy(p, prefix, n);
        memcpy(p + n, suffix, m + 1);
    }
    return p;
}

static dyn_status indexed_file_open(indexed_file *f, const char *prefix, dyn_error *err)
{
    memset(f, 0, sizeof *f);
    char *idx_path = path_join(prefix, ".idx"), *bin_path = path_join(prefix, ".bin");
    f->prefix = strdup(prefix);
    dyn_status st;
    if (idx_path == NULL || bin_path == NULL || f->prefix == NULL)
        st = dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", prefix);
    else if ((st = map_file(idx_path, &f->idx_map, &f->idx_size, err)) == DYN_OK &&
             (st = map_file(bin_path, &f->bin_map, &f->bin_size, err)) == DYN_OK)
        st = idx_check(f, idx_path, bin_path, err);
    free(idx_path);
    free(bin_path);
    if (st != DYN_OK) indexed_file_close(f);
    return st;
}

static int file_exists(const char *prefix, const char *suffix)
{
    char *p = path_join(prefix, suffix);
    int ok = p != NULL && access(p, F_OK) == 0;
    free(p);
    return ok;
}

/* Raw lengths of sample i, after the decoder-only mapping. */
static void raw_lengths(const dyn_corpus *c, int64_t i, int64_t *in, int64_t *tgt)
{
    if (c->decoder_only) {
        *in = 1;
        *tgt = seq_size(&c->idx[0], i) - 1;
    } else {
        *in = seq_size(&c->idx[0], i);
        *tgt = seq_size(&c->idx[1], i);
    }
}

dyn_status indexed_open(dyn_corpus *c, const char *spec, dyn_error *err)
{
    c->src = SRC_INDEXED;
    const char *comma = strchr(spec, ',');
    char *first = NULL, *second = NULL;
    if (comma) {
        first = strndup(spec, (size_t)(comma - spec));
        second = strdup(comma + 1);
    } else if (file_exists(spec, ".idx") || !file_exists(spec, "_input.idx")) {
        first = strdup(spec);
        c->decoder_only = 1;
    } else {
        first = path_join(spec, "_input");
        second = path_join(spec, "_target");
    }
    dyn_status st = DYN_OK;
    if (first == NULL || (!c->decoder_only && second == NULL))
        st = dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", spec);
    else if (first[0] == '\0' || (second && (second[0] == '\0' || strchr(second, ','))))
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "corpus '%s': use INPUT_PREFIX,TARGET_PREFIX", spec);
    if (st == DYN_OK) st = indexed_file_open(&c->idx[0], first, err);
    if (st == DYN_OK && !c->decoder_only) st = indexed_file_open(&c->idx[1], second, err);
    if (st == DYN_OK && !c->decoder_only && c->idx[0].n_seq != c->idx[1].n_seq)
        st = dyn_error_set(err, DYN_ERR_INVALID_ARG,
                           "corpus '%s': the input dataset %s has %lld sequences but the target dataset %s has %lld",
                           spec, first, (long long)c->idx[0].n_seq, second, (long long)c->idx[1].n_seq);
    if (st == DYN_OK) {
        c->n = c->idx[0].n_seq;
        /* Every length against the rule now, so planning never meets a bad one. */
        for (int64_t i = 0; i < c->n && st == DYN_OK; i++) {
            int64_t in, tgt;
            raw_lengths(c, i, &in, &tgt);
            int trunc;
            if (c->decoder_only && tgt < 1)
                st = dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                   "%s: record %lld: a decoder-only sequence needs at least 2 tokens, got %lld", first,
                                   (long long)i, (long long)tgt + 1);
            else if (in < 1 || tgt < 1)
                st = dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: record %lld: empty %s (a sample needs at least "
                                   "one input and one target token)", in < 1 ? first : second, (long long)i,
                                   in < 1 ? "input" : "target");
            else
                st = corpus_fit_lengths(&c->opt, spec, i, &in, &tgt, &trunc, err);
        }
    }
    free(first);
    free(second);
    return st;
}

void indexed_lengths(const dyn_corpus *c, int64_t i, int64_t *in, int64_t *tgt)
{
    int trunc;
    raw_lengths(c, i, in, tgt);
    corpus_fit_lengths(&c->opt, "", i, in, tgt, &trunc, NULL); /* checked at open: cannot fail */
}

/* Copy n tokens of sequence seq of f starting at token `from` into dst,
 * checking each against the vocabulary. */
static dyn_status copy_tokens(const dyn_corpus *c, const indexed_file *f, int64_t seq, int64_t from, int64_t n,
                              int32_t *dst, dyn_error *err)
{
    const unsigned char *p = (const unsigned char *)f->bin_map + seq_ptr(f, seq);
    for (int64_t k = 0; k < n; k++) {
        double v = token_at(p, f->dtype, from + k);
        if (!(v >= 0 && v < c->opt.vocab) || floor(v) != v)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "%s.bin: record %lld: token %lld = %g is %s (%s tokens)", f->prefix, (long long)seq,
                                 (long long)(from + k), v,
                                 floor(v) != v ? "not an integer" : "outside the vocabulary [0, vocab)",
                                 dtype_name(f->dtype));
        dst[k] = (int32_t)v;
    }
    return DYN_OK;
}

dyn_status indexed_read(dyn_corpus *c, int64_t i, dyn_corpus_sample *out, dyn_error *err)
{
    int64_t in, tgt, raw_in, raw_tgt;
    int trunc;
    raw_lengths(c, i, &raw_in, &raw_tgt);
    in = raw_in;
    tgt = raw_tgt;
    corpus_fit_lengths(&c->opt, "", i, &in, &tgt, &trunc, NULL);
    dyn_status st = corpus_reserve(c, (size_t)in, (size_t)tgt, err);
    if (st != DYN_OK) return st;
    if (c->decoder_only) {
        if ((st = copy_tokens(c, &c->idx[0], i, 0, 1, c->tok_in, err)) != DYN_OK) return st;
        st = copy_tokens(c, &c->idx[0], i, 1, tgt, c->tok_tgt, err);
    } else {
        if ((st = copy_tokens(c, &c->idx[0], i, 0, in, c->tok_in, err)) != DYN_OK) return st;
        st = copy_tokens(c, &c->idx[1], i, 0, tgt, c->tok_tgt, err);
    }
    if (st != DYN_OK) return st;
    *out = (dyn_corpus_sample){.index = i, .task = -1, .input_len = (int32_t)in, .target_len = (int32_t)tgt,
                               .input = c->tok_in, .target = c->tok_tgt, .truncated = trunc};
    return DYN_OK;
}

void indexed_close(dyn_corpus *c)
{
    indexed_file_close(&c->idx[0]);
    indexed_file_close(&c->idx[1]);
}

/* ---- writer ------------------------------------------------------------------ */

/* One dataset being written: .bin streamed, lengths kept for the .idx. */
typedef struct idx_writer {
    dyn_atomic_file bin, idx;
    int open_bin, open_idx;
    int32_t *sizes;
    int64_t bytes;
} idx_writer;

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int k = 0; k < 8; k++) p[k] = (unsigned char)(v >> (8 * k));
}

static dyn_status writer_tokens(idx_writer *w, const char *path, const int32_t *t, int64_t n, int dtype,
                                dyn_error *err)
{
    unsigned char buf[4096] = {0};
    int32_t elem = dtype_size(dtype);
    int64_t k = 0;
    while (k < n) {
        int64_t m = 0;
        for (; k < n && (m + 1) * elem <= (int64_t)sizeof buf; k++, m++) {
            uint32_t v = (uint32_t)t[k];
            for (int b = 0; b < elem; b++) buf[m * elem + b] = (unsigned char)(v >> (8 * b));
        }
        if (fwrite(buf, (size_t)elem, (size_t)m, w->bin.fp) != (size_t)m)
            return dyn_error_set(err, DYN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    w->bytes += n * elem;
    return DYN_OK;
}

/* Write the .idx of a finished dataset (n sequences, n + 1 documents). */
static dyn_status writer_index(idx_writer *w, const char *path, int64_t n, int dtype, dyn_error *err)
{
    unsigned char h[IDX_HEADER];
    memcpy(h, IDX_MAGIC, IDX_MAGIC_LEN);
    put_u64(h + 9, 1);
    h[17] = (unsigned char)dtype;
    put_u64(h + 18, (uint64_t)n);
    put_u64(h + 26, (uint64_t)n + 1);
    FILE *fp = w->idx.fp;
    int ok = fwrite(h, 1, sizeof h, fp) == sizeof h;
    for (int64_t i = 0; i < n && ok; i++) {
        unsigned char b[4];
        for (int k = 0; k < 4; k++) b[k] = (unsigned char)((uint32_t)w->sizes[i] >> (8 * k));
        ok = fwrite(b, 1, 4, fp) == 4;
    }
    int64_t ptr = 0;
    for (int64_t i = 0; i < n && ok; i++) {
        unsigned char b[8];
        put_u64(b, (uint64_t)ptr);
        ok = fwrite(b, 1, 8, fp) == 8;
        ptr += (int64_t)w->sizes[i] * dtype_size(dtype);
    }
    for (int64_t i = 0; i <= n && ok; i++) { /* each sequence its own document */
        unsigned char b[8];
        put_u64(b, (uint64_t)i);
        ok = fwrite(b, 1, 8, fp) == 8;
    }
    if (!ok) return dyn_error_set(err, DYN_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    return DYN_OK;
}

int dyn_indexed_dtype_for_vocab(int32_t vocab)
{
    return vocab < 65500 ? 8 : 4; /* Megatron's rule (its tokenizer's vocab_size < 65500) */
}

/* One conversion's outputs: one set (decoder-only) or two (_input and
 * _target), each a .bin and an .idx written atomically. */
typedef struct idx_out {
    int nsets, dtype;
    char *names[2][2]; /* [set][bin, idx] */
    idx_writer w[2];
} idx_out;

/* Each set's file names and sizes array, and its two files opened. */
static dyn_status idx_out_open(idx_out *o, const char *prefix, int64_t n, dyn_error *err)
{
    for (int s = 0; s < o->nsets; s++) {
        const char *base = o->nsets == 1 ? "" : s == 0 ? "_input" : "_target";
        char *p = path_join(prefix, base);
        o->names[s][0] = p ? path_join(p, ".bin") : NULL;
        o->names[s][1] = p ? path_join(p, ".idx") : NULL;
        free(p);
        o->w[s].sizes = dyn_calloc(n > 0 ? (size_t)n : 1, sizeof(int32_t), "dataset sizes", err);
        if (o->names[s][0] == NULL || o->names[s][1] == NULL || o->w[s].sizes == NULL)
            return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", prefix);
        dyn_status st;
        if ((st = dyn_atomic_open(&o->w[s].bin, o->names[s][0], err)) != DYN_OK) return st;
        o->w[s].open_bin = 1;
        if ((st = dyn_atomic_open(&o->w[s].idx, o->names[s][1], err)) != DYN_OK) return st;
        o->w[s].open_idx = 1;
    }
    return DYN_OK;
}

/* Every sample's tokens into the .bin files, their sizes kept. */
static dyn_status idx_out_samples(idx_out *o, dyn_corpus *c, dyn_error *err)
{
    dyn_status st = DYN_OK;
    idx_writer *w = o->w;
    for (int64_t i = 0; i < c->n && st == DYN_OK; i++) {
        dyn_corpus_sample smp;
        if ((st = dyn_corpus_read(c, i, &smp, err)) != DYN_OK) break;
        if (o->nsets == 1) { /* the whole sequence again: input (one token) ++ target */
            w[0].sizes[i] = smp.input_len + smp.target_len;
            if ((st = writer_tokens(&w[0], o->names[0][0], smp.input, smp.input_len, o->dtype, err)) == DYN_OK)
                st = writer_tokens(&w[0], o->names[0][0], smp.target, smp.target_len, o->dtype, err);
        } else {
            w[0].sizes[i] = smp.input_len;
            w[1].sizes[i] = smp.target_len;
            if ((st = writer_tokens(&w[0], o->names[0][0], smp.input, smp.input_len, o->dtype, err)) == DYN_OK)
                st = writer_tokens(&w[1], o->names[1][0], smp.target, smp.target_len, o->dtype, err);
        }
    }
    return st;
}

/* The indexes written, everything flushed before the first rename (so a
 * full disk fails here), then every .bin and every .idx committed. */
static dyn_status idx_out_finish(idx_out *o, const char *prefix, int64_t n, dyn_error *err)
{
    dyn_status st = DYN_OK;
    idx_writer *w = o->w;
    for (int s = 0; s < o->nsets && st == DYN_OK; s++) st = writer_index(&w[s], o->names[s][1], n, o->dtype, err);
    for (int s = 0; s < o->nsets && st == DYN_OK; s++)
        if (fflush(w[s].bin.fp) != 0 || fflush(w[s].idx.fp) != 0)
            st = dyn_error_set(err, DYN_ERR_IO, "%s: write failed: %s", prefix, strerror(errno));
    for (int s = 0; s < o->nsets && st == DYN_OK; s++) {
        w[s].open_bin = 0;
        st = dyn_atomic_commit(&w[s].bin, err);
    }
    for (int s = 0; s < o->nsets && st == DYN_OK; s++) {
        w[s].open_idx = 0;
        st = dyn_atomic_commit(&w[s].idx, err);
    }
    return st;
}

dyn_status dyn_corpus_write_indexed(dyn_corpus *c, const char *prefix, dyn_error *err)
{
    if (c->n < 1) /* every reader refuses an empty dataset: do not write one */
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: the source has no samples: nothing to write", prefix);
    idx_out o;
    memset(&o, 0, sizeof o);
    o.nsets = c->decoder_only ? 1 : 2;
    o.dtype = dyn_indexed_dtype_for_vocab(c->opt.vocab);
    dyn_status st = idx_out_open(&o, prefix, c->n, err);
    if (st == DYN_OK) st = idx_out_samples(&o, c, err);
    if (st == DYN_OK) st = idx_out_finish(&o, prefix, c->n, err);
    for (int s = 0; s < 2; s++) {
        if (o.w[s].open_bin) dyn_atomic_abort(&o.w[s].bin);
        if (o.w[s].open_idx) dyn_atomic_abort(&o.w[s].idx);
        free(o.w[s].sizes);
        free(o.names[s][0]);
        free(o.names[s][1]);
    }
    return st;
}
