/* safetensors.c — the safetensors reader/writer described in safetensors.h.
 * The JSON header goes through cJSON; the data is copied with memcpy, which
 * is correct because dynapipe only builds on little-endian hosts (checked at
 * compile time below), like the format itself. Files are mapped read-only
 * (mmap), so opening a shard of a large checkpoint costs its header, and
 * reading a tensor touches that tensor's pages only: a pipeline stage that
 * reads its own tensors never holds the whole file. F16 and BF16 tensors
 * are widened to float as they are read (Hub checkpoints are mostly BF16). */
#include "model/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h" /* defines: dyn_calloc, dyn_file_read_all, dyn_atomic_* */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors.c assumes a little-endian host"
#endif

/* Refuse headers beyond this: the format's own readers cap it at 100 MB, and
 * a corrupted length must not make us allocate gigabytes. */
#define ST_MAX_HEADER (100u * 1024u * 1024u)

typedef struct st_tensor {
    char *name;
    char dtype[8];
    int32_t ndim;
    int64_t shape[DYN_ST_MAX_DIMS];
    uint64_t begin, end; /* byte offsets in the data section */
} st_tensor;

struct dyn_safetensors {
    char *path;
    char *file; /* the whole file, mapped read-only (NULL when empty) */
    size_t file_len;
    const unsigned char *data; /* start of the data section */
    uint64_t data_len;
    st_tensor *tensors; /* sorted by begin */
    int n;
    char **meta; /* key, value, key, value ... */
    int n_meta;
};

/* ---------------------------------------------------------------- writing */

static void shape_str(char *buf, size_t cap, int32_t ndim, const int64_t *shape)
{
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
}

static uint64_t numel(int32_t ndim, const int64_t *shape)
{
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= (uint64_t)shape[i];
    return n;
}

/* The index of the first NaN or infinity among x[0..n), or -1. */
static int64_t first_nonfinite(const float *x, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (int64_t)i;
    return -1;
}

/* A NaN or infinity is never written: a file that holds one is a run
 * gone wrong, and saving it could replace the last good weights. Entries
 * with a bad name, rank or data are left to st_header. */
static dyn_status st_check_finite(const char *path, const dyn_st_entry *tensors, int n, dyn_error *err)
{
    for (int i = 0; i < n; i++) {
        const dyn_st_entry *t = &tensors[i];
        if (t->ndim < 0 || t->ndim > DYN_ST_MAX_DIMS || t->name == NULL || t->data == NULL) continue;
        int64_t bad = first_nonfinite(t->data, numel(t->ndim, t->shape));
        if (bad >= 0)
            return dyn_error_set(err, DYN_ERR_INVALID_ARG,
                                 "%s: tensor %s holds a non-finite value at element %lld (%g); not written", path,
                                 t->name, (long long)bad, (double)t->data[bad]);
    }
    return DYN_OK;
}

/* Tensor i's header entry in root (dtype, shape, data offsets from *off,
 * advanced past it); the tensor's name unique. */
static dyn_status st_header_entry(const char *path, cJSON *root, const dyn_st_entry *t, int i, uint64_t *off,
                                  dyn_error *err)
{
    if (t->ndim < 0 || t->ndim > DYN_ST_MAX_DIMS || t->name == NULL || t->data == NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: tensor %d has a bad name, rank or data", path, i);
    if (cJSON_GetObjectItemCaseSensitive(root, t->name) != NULL)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: duplicate tensor name '%s'", path, t->name);
    uint64_t bytes = numel(t->ndim, t->shape) * 4u;
    cJSON *e = cJSON_AddObjectToObject(root, t->name);
    cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
    cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
    int ok = e && shape && offs && cJSON_AddStringToObject(e, "dtype", "F32");
    for (int d = 0; ok && d < t->ndim; d++)
        ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
    ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)*off));
    ok = ok && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(*off + bytes)));
    *off += bytes;
    if (!ok) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory building header", path);
    return DYN_OK;
}

/* The header, printed (the caller frees *json): __metadata__ from meta's
 * n_meta key/value pairs, then every tensor in order. */
static dyn_status st_header(const char *path, const dyn_st_entry *tensors, int n, const char *const *meta,
                            int n_meta, char **json, dyn_error *err)
{
    *json = NULL;
    cJSON *root = cJSON_CreateObject();
    if (root == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory building header", path);
    dyn_status st = DYN_OK;
    if (n_meta > 0) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; m && i < n_meta; i++)
            if (cJSON_AddStringToObject(m, meta[2 * i], meta[2 * i + 1]) == NULL) m = NULL;
        if (m == NULL) st = dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory building header", path);
    }
    uint64_t off = 0;
    for (int i = 0; st == DYN_OK && i < n; i++) st = st_header_entry(path, root, &tensors[i], i, &off, err);
    *json = st == DYN_OK ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (st != DYN_OK) return st;
    if (*json == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory printing header", path);
    return DYN_OK;
}

dyn_status dyn_safetensors_write(const char *path, const dyn_st_entry *tensors, int n,
                                 const char *const *meta, int n_meta, dyn_error *err)
{
    char *json;
    dyn_status st = st_check_finite(path, tensors, n, err);
    if (st != DYN_OK || (st = st_header(path, tensors, n, meta, n_meta, &json, err)) != DYN_OK) return st;
    /* Pad the header with spaces so tensor data starts 8-byte aligned. */
    size_t jlen = strlen(json);
    size_t hlen = (jlen + 7u) & ~(size_t)7u;
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)((uint64_t)hlen >> (8 * i));
    dyn_atomic_file af;
    st = dyn_atomic_open(&af, path, err);
    if (st != DYN_OK) {
        free(json);
        return st;
    }
    int ok = fwrite(lenbuf, 1, 8, af.fp) == 8 && fwrite(json, 1, jlen, af.fp) == jlen;
    for (size_t i = jlen; ok && i < hlen; i++) ok = fputc(' ', af.fp) != EOF;
    for (int i = 0; ok && i < n; i++) {
        size_t cnt = (size_t)numel(tensors[i].ndim, tensors[i].shape);
        ok = fwrite(tensors[i].data, sizeof(float), cnt, af.fp) == cnt;
    }
    free(json);
    if (!ok) {
        int saved = errno;
        dyn_atomic_abort(&af);
        return dyn_error_set(err, DYN_ERR_IO, "%s: write failed: %s", path, strerror(saved));
    }
    return dyn_atomic_commit(&af, err);
}

/* ---------------------------------------------------------------- reading */

static int dtype_size(const char *dt)
{
    static const struct { const char *name; int size; } table[] = {
        {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
        {"I8", 1},  {"U64", 8}, {"U32", 4}, {"U16", 2},  {"U8", 1},  {"BOOL", 1},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(dt, table[i].name) == 0) return table[i].size;
    return 0;
}

/* A JSON number that is a non-negative integer exactly representable. */
static int json_u64(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

void dyn_safetensors_free(dyn_safetensors *st)
{
    if (st == NULL) return;
    for (int i = 0; i < st->n; i++) free(st->tensors[i].name);
    for (int i = 0; i < 2 * st->n_meta; i++) free(st->meta[i]);
    free(st->tensors);
    free(st->meta);
    if (st->file != NULL) munmap(st->file, st->file_len);
    free(st->path);
    free(st);
}

static dyn_status parse_entry(dyn_safetensors *st, const cJSON *item, st_tensor *t, dyn_error *err)
{
    const char *p = st->path, *name = item->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(item, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
    if (!cJSON_IsObject(item) || !cJSON_IsString(dt) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s: header entry '%s' needs dtype (string), shape and data_offsets (arrays)", p, name);
    int size = dtype_size(dt->valuestring);
    if (size == 0) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': unknown dtype '%s'", p, name, dt->valuestring);
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
    int nd = cJSON_GetArraySize(shape);
    if (nd > DYN_ST_MAX_DIMS)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': rank %d, at most %d supported", p, name, nd, DYN_ST_MAX_DIMS);
    t->ndim = nd;
    uint64_t count = 1;
    for (int d = 0; d < nd; d++) {
        uint64_t v;
        if (!json_u64(cJSON_GetArrayItem(shape, d), &v) || v > (1ull << 40))
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': shape[%d] is not a valid size", p, name, d);
        t->shape[d] = (int64_t)v;
        count *= v;
        if (count > (1ull << 50)) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': shape too large", p, name);
    }
    if (cJSON_GetArraySize(offs) != 2 || !json_u64(cJSON_GetArrayItem(offs, 0), &t->begin) ||
        !json_u64(cJSON_GetArrayItem(offs, 1), &t->end) || t->begin > t->end)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': data_offsets must be [begin, end] with begin <= end", p, name);
    if (t->end > st->data_len)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s: tensor '%s': data_offsets [%llu, %llu] beyond the %llu data bytes (truncated file?)", p,
                             name, (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)st->data_len);
    if (t->end - t->begin != count * (uint64_t)size)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': %llu data bytes, but %s of shape needs %llu", p, name,
                             (unsigned long long)(t->end - t->begin), t->dtype, (unsigned long long)(count * (uint64_t)size));
    t->name = strdup(name);
    if (t->name == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", p);
    return DYN_OK;
}

static dyn_status parse_metadata(dyn_safetensors *st, const cJSON *m, dyn_error *err)
{
    if (!cJSON_IsObject(m)) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: __metadata__ is not an object", st->path);
    int n = cJSON_GetArraySize(m);
    st->meta = dyn_calloc((size_t)(2 * n), sizeof(char *), "safetensors metadata", err);
    if (st->meta == NULL) return DYN_ERR_NOMEM;
    const cJSON *kv;
    cJSON_ArrayForEach(kv, m)
    {
        if (!cJSON_IsString(kv))
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: __metadata__ value of '%s' is not a string", st->path, kv->string);
        char *k = strdup(kv->string), *v = strdup(kv->valuestring);
        if (k == NULL || v == NULL) {
            free(k);
            free(v);
            return dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", st->path);
        }
        st->meta[2 * st->n_meta] = k;
        st->meta[2 * st->n_meta + 1] = v;
        st->n_meta++;
    }
    return DYN_OK;
}

static dyn_status parse_header(dyn_safetensors *st, dyn_error *err)
{
    const char *p = st->path;
    if (st->file_len < 8) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: truncated: %zu bytes, no header length", p, st->file_len);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)(unsigned char)st->file[i] << (8 * i);
    if (hlen > ST_MAX_HEADER || hlen > st->file_len - 8)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: header length %llu does not fit the %zu-byte file", p,
                             (unsigned long long)hlen, st->file_len);
    st->data = (const unsigned char *)st->file + 8 + hlen;
    st->data_len = st->file_len - 8 - hlen;
    cJSON *root = cJSON_ParseWithLength(st->file + 8, (size_t)hlen);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: header is not a valid JSON object", p);
    }
    int total = cJSON_GetArraySize(root);
    st->tensors = dyn_calloc((size_t)total, sizeof(st_tensor), "safetensors entries", err);
    dyn_status s = st->tensors ? DYN_OK : DYN_ERR_NOMEM;
    const cJSON *item;
    cJSON_ArrayForEach(item, root)
    {
        if (s != DYN_OK) break;
        if (strcmp(item->string, "__metadata__") == 0) {
            if (st->meta != NULL) s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: duplicate __metadata__", p);
            else s = parse_metadata(st, item, err);
            continue;
        }
        for (int i = 0; i < st->n && s == DYN_OK; i++)
            if (strcmp(st->tensors[i].name, item->string) == 0)
                s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: duplicate tensor '%s' in header", p, item->string);
        if (s == DYN_OK) s = parse_entry(st, item, &st->tensors[st->n], err);
        if (s == DYN_OK) st->n++;
    }
    cJSON_Delete(root);
    if (s != DYN_OK) return s;
    /* Offsets: sorted, they must tile [0, data_len) exactly. */
    qsort(st->tensors, (size_t)st->n, sizeof(st_tensor), cmp_begin);
    uint64_t pos = 0;
    for (int i = 0; i < st->n; i++) {
        const st_tensor *t = &st->tensors[i];
        if (t->begin < pos)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' data [%llu, %llu) overlaps tensor '%s'", p, t->name,
                                 (unsigned long long)t->begin, (unsigned long long)t->end, st->tensors[i - 1].name);
        if (t->begin > pos)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: unindexed hole of %llu bytes before tensor '%s'", p,
                                 (unsigned long long)(t->begin - pos), t->name);
        pos = t->end;
    }
    if (pos != st->data_len)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: %llu trailing data bytes not covered by any tensor", p,
                             (unsigned long long)(st->data_len - pos));
    return DYN_OK;
}

/* Map st->path read-only into st->file (file_len bytes; an empty file maps
 * nothing and parse_header calls it truncated). */
static dyn_status map_file(dyn_safetensors *st, dyn_error *err)
{
    int fd = open(st->path, O_RDONLY);
    if (fd < 0) return dyn_error_set(err, DYN_ERR_IO, "%s: cannot open: %s", st->path, strerror(errno));
    struct stat sb;
    dyn_status s = DYN_OK;
    if (fstat(fd, &sb) != 0) {
        s = dyn_error_set(err, DYN_ERR_IO, "%s: cannot stat: %s", st->path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        s = dyn_error_set(err, DYN_ERR_IO, "%s: not a regular file", st->path);
    } else if (sb.st_size > 0) {
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) s = dyn_error_set(err, DYN_ERR_IO, "%s: cannot map: %s", st->path, strerror(errno));
        else st->file = p, st->file_len = (size_t)sb.st_size;
    }
    close(fd);
    return s;
}

dyn_safetensors *dyn_safetensors_open(const char *path, dyn_error *err)
{
    dyn_safetensors *st = dyn_calloc(1, sizeof *st, "safetensors", err);
    if (st == NULL) return NULL;
    st->path = strdup(path);
    if (st->path == NULL) {
        dyn_error_set(err, DYN_ERR_NOMEM, "%s: out of memory", path);
        free(st);
        return NULL;
    }
    if (map_file(st, err) != DYN_OK || parse_header(st, err) != DYN_OK) {
        dyn_safetensors_free(st);
        return NULL;
    }
    return st;
}

int dyn_safetensors_count(const dyn_safetensors *st) { return st->n; }

const char *dyn_safetensors_name(const dyn_safetensors *st, int i)
{
    return i >= 0 && i < st->n ? st->tensors[i].name : NULL;
}

static const st_tensor *find(const dyn_safetensors *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0) return &st->tensors[i];
    return NULL;
}

int dyn_safetensors_shape(const dyn_safetensors *st, const char *name, int64_t *shape, const char **dtype)
{
    const st_tensor *t = find(st, name);
    if (t == NULL) return -1;
    if (shape) memcpy(shape, t->shape, sizeof t->shape);
    if (dtype) *dtype = t->dtype;
    return t->ndim;
}

/* BF16 is the top half of an IEEE float: exact. */
static float bf16_to_float(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE half to float, exact: normals rebias the exponent, subnormals are
 * scaled, infinities and NaNs (payload kept) map to theirs. */
static float f16_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        float f = ldexpf((float)man, -24); /* zero or subnormal: man x 2^-24 */
        return sign ? -f : f;
    }
    if (exp == 31) u = sign | 0x7f800000u | (man << 13);
    else u = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

dyn_status dyn_safetensors_read(const dyn_safetensors *st, const char *name, int32_t ndim, const int64_t *shape,
                                float *dst, dyn_error *err)
{
    char want[96], got[96];
    shape_str(want, sizeof want, ndim, shape);
    const st_tensor *t = find(st, name);
    if (t == NULL)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' missing (expected F32 %s)", st->path, name, want);
    int wide = strcmp(t->dtype, "F32") == 0, half = strcmp(t->dtype, "F16") == 0, bf = strcmp(t->dtype, "BF16") == 0;
    if (!wide && !half && !bf)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' has dtype %s, expected F32 (or F16, BF16)", st->path,
                             name, t->dtype);
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        shape_str(got, sizeof got, t->ndim, t->shape);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' has shape %s, expected %s", st->path, name, got, want);
    }
    if (wide) {
        memcpy(dst, st->data + t->begin, (size_t)(t->end - t->begin));
    } else {
        const unsigned char *src = st->data + t->begin;
        size_t n = (size_t)(t->end - t->begin) / 2;
        for (size_t i = 0; i < n; i++) {
            uint16_t h = (uint16_t)(src[2 * i] | (unsigned)src[2 * i + 1] << 8);
            dst[i] = bf ? bf16_to_float(h) : f16_to_float(h);
        }
    }
    size_t count = (size_t)(t->end - t->begin) / (wide ? sizeof(float) : 2);
    int64_t bad = first_nonfinite(dst, (uint64_t)count);
    if (bad >= 0)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor %s holds a non-finite value at element %lld (%g)",
                             st->path, name, (long long)bad, (double)dst[bad]);
    return DYN_OK;
}

const char *dyn_safetensors_meta(const dyn_safetensors *st, const char *key)
{
    for (int i = 0; i < st->n_meta; i++)
        if (strcmp(st->meta[2 * i], key) == 0) return st->meta[2 * i + 1];
    return NULL;
}
