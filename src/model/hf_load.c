/* hf_load.c — the weights of a Hugging Face model folder, memory-mapped
 * (hf_load.h has the contract).
 *
 * Each shard is mmap'ed read-only and its header parsed with cJSON in
 * place; tensor bytes are touched only when a tensor is converted, so a
 * rank holding two of forty layers pages in two layers' worth of the file
 * (plus the shared tensors it copies), never the whole checkpoint. The
 * safetensors reader of safetensors.c reads whole files and stays the one
 * for dynapipe's own optimizer files; this one is for files of any size
 * and of the dtypes other writers use.
 *
 * Every tensor of every header is kept in one list (name with the
 * architecture's prefix removed, dtype, shape, byte range, file), so the
 * checks and the loads look names up in one place whether the folder has
 * one file or an index and shards. */
#include "model/hf_load.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "dynapipe/model_config.h" /* defines: dyn_model_kind_name */
#include "model/model_impl.h" /* defines: dyn_model internals, model_table_create */
#include "util/util.h"        /* defines: dyn_calloc, dyn_file_read_all, DYN_RESERVE */

#define HF_MAX_DIMS 8
#define HF_MAX_FILES 4096
#define HF_MAX_HEADER (100u << 20) /* the format's own limit on the header, bytes */
#define HF_PATH 4096

typedef struct hf_file {
    char path[HF_PATH];
    const unsigned char *map; /* the whole file, read-only */
    size_t size;              /* bytes */
    size_t data;              /* offset of the data section: 8 + header length */
} hf_file;

typedef struct hf_tensor {
    char *name;     /* without the architecture's prefix */
    char dtype[16]; /* as the header spells it */
    int ndim;
    int64_t shape[HF_MAX_DIMS];
    uint64_t begin, end; /* relative to the file's data section */
    int file;
} hf_tensor;

struct dyn_hf_folder {
    dyn_hf_config cfg;
    const dyn_hf_arch *arch;
    char where[HF_PATH]; /* the index, or model.safetensors: where a missing tensor was looked for */
    hf_file *files;
    int n_files;
    size_t cap_files;
    hf_tensor *t;
    int n_t, cap_t;
};

/* ---- fp16 / bf16 */

float dyn_hf_bf16_to_f32(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float dyn_hf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13); /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        u = sign | ((exp + 112) << 23) | (man << 13); /* normal: rebias 15 -> 127 */
    } else if (man == 0) {
        u = sign; /* zero */
    } else { /* subnormal: man * 2^-24, normalised */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while ((man & 0x400) == 0);
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ff) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Bytes per element of a dtype the format names; 0 if unknown. */
static int dtype_size(const char *d)
{
    static const struct {
        const char *name;
        int size;
    } k[] = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
             {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(k[i].name, d) == 0) return k[i].size;
    return 0;
}

static int handled(const char *d) { return !strcmp(d, "F32") || !strcmp(d, "F16") || !strcmp(d, "BF16"); }

/* ---- opening */

static void file_unmap(hf_file *f)
{
    if (f->map) munmap((void *)f->map, f->size);
    f->map = NULL;
}

void dyn_hf_close(dyn_hf_folder *f)
{
    if (f == NULL) return;
    for (int i = 0; i < f->n_files; i++) file_unmap(&f->files[i]);
    for (int i = 0; i < f->n_t; i++) free(f->t[i].name);
    free(f->files);
    free(f->t);
    free(f);
}

const dyn_hf_config *dyn_hf_folder_config(const dyn_hf_folder *f) { return &f->cfg; }

static hf_tensor *find(const dyn_hf_folder *f, const char *name)
{
    for (int i = 0; i < f->n_t; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}

/* Add the tensors of one header entry list (file k) to f. */
static dyn_status add_entry(dyn_hf_folder *f, int k, const cJSON *e, dyn_error *err)
{
    const hf_file *hf = &f->files[k];
    const char *name = e->string;
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsObject(e) || !cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of) ||
        cJSON_GetArraySize(of) != 2 || cJSON_GetArraySize(sh) > HF_MAX_DIMS)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': header entry is not {dtype, shape, data_offsets}",
                             hf->path, name);
    if (f->n_t == f->cap_t) {
        size_t c = (size_t)f->cap_t;
        if (DYN_RESERVE(f->t, c, c ? c + 1 : 256) != 0)
            return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory reading %s", hf->path);
        f->cap_t = (int)c;
    }
    hf_tensor *t = &f->t[f->n_t];
    memset(t, 0, sizeof *t);
    t->file = k;
    const char *p = f->arch->prefix;
    const char *bare = p && strncmp(name, p, strlen(p)) == 0 ? name + strlen(p) : name;
    if ((t->name = strdup(bare)) == NULL) return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory reading %s", hf->path);
    f->n_t++;
    if (find(f, bare) != t)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' appears twice in the folder", hf->path, name);
    snprintf(t->dtype, sizeof t->dtype, "%s", dt->valuestring);
    uint64_t numel = 1;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh)
    {
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 9e15 || (double)(int64_t)d->valuedouble != d->valuedouble)
            return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': shape is not a list of sizes", hf->path, name);
        t->shape[t->ndim++] = (int64_t)d->valuedouble;
        numel *= (uint64_t)d->valuedouble;
    }
    double b = cJSON_GetArrayItem(of, 0)->valuedouble, en = cJSON_GetArrayItem(of, 1)->valuedouble;
    if (!cJSON_IsNumber(cJSON_GetArrayItem(of, 0)) || !cJSON_IsNumber(cJSON_GetArrayItem(of, 1)) || b < 0 || en < b ||
        en > 9e15)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': data_offsets are not [begin, end]", hf->path, name);
    t->begin = (uint64_t)b;
    t->end = (uint64_t)en;
    if (hf->data + t->end > hf->size)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s: tensor '%s' ends at byte %" PRIu64 ", past the end of the file (%zu bytes): truncated",
                             hf->path, name, hf->data + t->end, hf->size);
    int ds = dtype_size(t->dtype);
    if (ds > 0 && t->end - t->begin != numel * (uint64_t)ds)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s': %" PRIu64 " bytes for %" PRIu64 " %s elements",
                             hf->path, name, t->end - t->begin, numel, t->dtype);
    return DYN_OK;
}

/* Map file k (path set) and parse its header into f's tensor list. */
static dyn_status open_file(dyn_hf_folder *f, int k, dyn_error *err)
{
    hf_file *hf = &f->files[k];
    int fd = open(hf->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dyn_error_set(err, DYN_ERR_IO, "%s: cannot open it", hf->path);
    struct stat sb;
    dyn_status s = DYN_OK;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        s = dyn_error_set(err, DYN_ERR_IO, "%s: not a regular file", hf->path);
    } else if (sb.st_size < 8) {
        s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: %lld bytes, too short for a safetensors header (truncated)",
                          hf->path, (long long)sb.st_size);
    } else {
        hf->size = (size_t)sb.st_size;
        void *p = mmap(NULL, hf->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) s = dyn_error_set(err, DYN_ERR_IO, "%s: cannot map it", hf->path);
        else hf->map = p;
    }
    close(fd);
    if (s != DYN_OK) return s;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | hf->map[i];
    if (n > HF_MAX_HEADER || n > hf->size - 8)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "%s: header of %" PRIu64 " bytes in a file of %zu (truncated, or not safetensors)", hf->path,
                             n, hf->size);
    hf->data = 8 + (size_t)n;
    cJSON *h = cJSON_ParseWithLength((const char *)hf->map + 8, (size_t)n);
    if (!cJSON_IsObject(h)) {
        cJSON_Delete(h);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: the header is not a JSON object (not safetensors)", hf->path);
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, h)
    {
        if (strcmp(e->string, "__metadata__") == 0) continue;
        if ((s = add_entry(f, k, e, err)) != DYN_OK) break;
    }
    cJSON_Delete(h);
    return s;
}

static dyn_status add_file(dyn_hf_folder *f, const char *dir, const char *name, int *k, dyn_error *err)
{
    for (*k = 0; *k < f->n_files; (*k)++)
        if (strcmp(strrchr(f->files[*k].path, '/') + 1, name) == 0) return DYN_OK;
    if (f->n_files == HF_MAX_FILES) return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: more than %d shards", f->where, HF_MAX_FILES);
    if (DYN_RESERVE(f->files, f->cap_files, (size_t)f->n_files + 1) != 0)
        return dyn_error_set(err, DYN_ERR_NOMEM, "out of memory reading %s", f->where);
    hf_file *hf = &f->files[f->n_files];
    memset(hf, 0, sizeof *hf);
    if ((size_t)snprintf(hf->path, sizeof hf->path, "%s/%s", dir, name) >= sizeof hf->path)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: shard path too long", f->where);
    *k = f->n_files++;
    return open_file(f, *k, err);
}

/* The sharded folder: every file the index names, then each name of the
 * weight map in the file it names. */
static dyn_status open_index(dyn_hf_folder *f, const char *dir, dyn_error *err)
{
    char *text = NULL;
    dyn_status s = dyn_file_read_all(f->where, &text, NULL, err);
    if (s != DYN_OK) return s;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *map = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: not JSON with a \"weight_map\" object", f->where);
    }
    const cJSON *e;
    int k = 0;
    cJSON_ArrayForEach(e, map)
    {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') != NULL || e->valuestring[0] == '.') {
            s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' is not mapped to a file name in this folder",
                              f->where, e->string);
            break;
        }
        if ((s = add_file(f, dir, e->valuestring, &k, err)) != DYN_OK) break;
    }
    cJSON_ArrayForEach(e, map)
    {
        if (s != DYN_OK) break;
        const char *p = f->arch->prefix, *bare = e->string;
        if (p && strncmp(bare, p, strlen(p)) == 0) bare += strlen(p);
        const hf_tensor *t = find(f, bare);
        if (t == NULL || strcmp(strrchr(f->files[t->file].path, '/') + 1, e->valuestring) != 0)
            s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s/%s: no tensor '%s' (%s names this file for it)", dir,
                              e->valuestring, e->string, f->where);
    }
    /* A tensor a shard holds that the index does not list is reported by
     * dyn_hf_check only if the model does not know it: the index is the
     * Hub's lookup table, the shards' headers are the truth. */
    cJSON_Delete(root);
    return s;
}

dyn_hf_folder *dyn_hf_open(const char *dir, int32_t max_len, dyn_error *err)
{
    dyn_hf_folder *f = dyn_calloc(1, sizeof *f, "model folder", err);
    if (f == NULL) return NULL;
    dyn_status s = dyn_hf_config_read(dir, max_len, &f->cfg, err);
    if (s == DYN_OK) f->arch = dyn_hf_arch_find(f->cfg.arch);
    if (s == DYN_OK) {
        struct stat sb;
        snprintf(f->where, sizeof f->where, "%s/model.safetensors.index.json", dir);
        if (stat(f->where, &sb) == 0) {
            s = open_index(f, dir, err);
        } else {
            snprintf(f->where, sizeof f->where, "%s/model.safetensors", dir);
            int k;
            if (stat(f->where, &sb) != 0)
                s = dyn_error_set(err, DYN_ERR_IO, "%s: neither model.safetensors nor model.safetensors.index.json (pytorch_model.bin is not read: "
                                  "save the model as safetensors)",
                                  dir);
            else
                s = add_file(f, dir, "model.safetensors", &k, err);
        }
    }
    if (s != DYN_OK) {
        dyn_hf_close(f);
        return NULL;
    }
    return f;
}

/* ---- checks */

/* Hugging Face's shape of our tensor t. */
static void hf_shape_of(const dyn_param_tensor *t, int64_t *shape)
{
    shape[0] = t->hf_transposed ? t->shape[1] : t->shape[0];
    shape[1] = t->hf_transposed ? t->shape[0] : t->shape[1];
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape)
{
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Tensor t of the model as the folder has it: present, of its shape and a
 * handled dtype. *out gets the folder's entry. */
static dyn_status check_one(const dyn_hf_folder *f, const dyn_param_tensor *t, const hf_tensor **out, dyn_error *err)
{
    const hf_tensor *h = find(f, t->name);
    if (h == NULL)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' is missing (a %s of config.json's shape has it)",
                             f->where, t->name, f->cfg.arch);
    const char *path = f->files[h->file].path;
    int64_t want[2];
    hf_shape_of(t, want);
    if (h->ndim != t->ndim || h->shape[0] != want[0] || (t->ndim == 2 && h->shape[1] != want[1])) {
        char a[128], b[128];
        shape_text(a, sizeof a, h->ndim, h->shape);
        shape_text(b, sizeof b, t->ndim, want);
        return dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' has shape %s, config.json's shape needs %s", path,
                             t->name, a, b);
    }
    if (!handled(h->dtype))
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: tensor '%s' is %s; dynapipe reads F32, F16 and BF16", path,
                             t->name, h->dtype);
    *out = h;
    return DYN_OK;
}

dyn_status dyn_hf_check(const dyn_hf_folder *f, const dyn_model_config *cfg, dyn_error *err)
{
    if (cfg->kind != f->arch->kind)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: a %s, this run trains a %s model", f->where, f->cfg.arch,
                             dyn_model_kind_name(cfg->kind));
    dyn_model *tbl = model_table_create(cfg, err);
    if (tbl == NULL) return err ? err->code : DYN_ERR_INVALID_ARG;
    dyn_status s = DYN_OK;
    const hf_tensor *h;
    for (int i = 0; i < tbl->n_tensors && s == DYN_OK; i++) s = check_one(f, &tbl->tensors[i], &h, err);
    for (int i = 0; i < f->n_t && s == DYN_OK; i++) {
        const hf_tensor *x = &f->t[i];
        if (dyn_model_find_tensor(tbl, x->name) != NULL) continue;
        const char *of = f->arch->alias_of(x->name);
        const dyn_param_tensor *o = of && of[0] ? dyn_model_find_tensor(tbl, of) : NULL;
        if (of == NULL) {
            s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' is not part of a %s of config.json's shape",
                              f->files[x->file].path, x->name, f->cfg.arch);
        } else if (o != NULL) {
            int64_t want[2];
            hf_shape_of(o, want);
            if (x->ndim != o->ndim || x->shape[0] != want[0] || (o->ndim == 2 && x->shape[1] != want[1]))
                s = dyn_error_set(err, DYN_ERR_CORRUPT, "%s: tensor '%s' (a copy of '%s') has another shape than it",
                                  f->files[x->file].path, x->name, of);
        }
    }
    dyn_model_free(tbl);
    return s;
}

/* ---- loading */

/* Convert tensor h (n elements) into dst as fp32. Unaligned reads: the
 * format aligns only the data section. */
static void convert(const dyn_hf_folder *f, const hf_tensor *h, size_t n, float *dst)
{
    const unsigned char *src = f->files[h->file].map + f->files[h->file].data + h->begin;
    if (strcmp(h->dtype, "F32") == 0) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    int bf = strcmp(h->dtype, "BF16") == 0;
    for (size_t i = 0; i < n; i++) {
        uint16_t v = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        dst[i] = bf ? dyn_hf_bf16_to_f32(v) : dyn_hf_f16_to_f32(v);
    }
}

dyn_status dyn_hf_load(const dyn_hf_folder *f, dyn_model *m, dyn_error *err)
{
    if (m->cfg.kind != f->arch->kind)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "%s: a %s, the model is another kind", f->where, f->cfg.arch);
    size_t mx = 1;
    for (int i = 0; i < m->n_tensors; i++)
        if (m->tensors[i].numel > mx) mx = m->tensors[i].numel;
    float *staging = dyn_calloc(m->n_params ? m->n_params : 1, sizeof(float), "weights staging", err);
    float *scratch = staging ? dyn_calloc(mx, sizeof(float), "weights staging", err) : NULL;
    dyn_status s = scratch ? DYN_OK : DYN_ERR_NOMEM;
    for (int i = 0; i < m->n_tensors && s == DYN_OK; i++) {
        const dyn_param_tensor *t = &m->tensors[i];
        const hf_tensor *h = NULL;
        if ((s = check_one(f, t, &h, err)) != DYN_OK) break;
        float *dst = staging + t->offset;
        if (!t->hf_transposed) {
            convert(f, h, t->numel, dst);
            continue;
        }
        convert(f, h, t->numel, scratch); /* (shape[1], shape[0]) → ours (shape[0], shape[1]) */
        int64_t rows = t->shape[1], cols = t->shape[0];
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = scratch[r * cols + c];
    }
    if (s == DYN_OK) memcpy(m->params, staging, m->n_params * sizeof(float));
    free(scratch);
    free(staging);
    return s;
}
