/* serialize.c — the execution plan's binary form and its readable dump.
 *
 * Binary layout (all integers little-endian, written field by field, never
 * as struct memory):
 *   offset  size  field
 *        0     8  magic "DYNPLAN\0"
 *        8     4  u32 version (DYN_PLAN_VERSION)
 *       12     8  u64 total length of the buffer in bytes, header included
 *       20     4  u32 CRC-32 (IEEE 802.3, reflected, poly 0xEDB88320) of
 *                 bytes 24 .. length-1
 *       24        payload:
 *                 i32 schedule, replica, n_ranks, n_stages, n_microbatches
 *                 i32 stage_rank[n_stages]
 *                 n_microbatches shapes of 36 bytes: i32 rows, enc_len,
 *                   dec_len; i64 enc_attn, dec_attn, cross_attn
 *                 per rank: i32 n_instrs, n_buffers, then n_instrs
 *                   instructions of 68 bytes: u8 op, u8 recompute, u16 flags,
 *                   i32 microbatch, stage, peer, buf_in, buf_out, a 36-byte
 *                   shape, i64 bytes
 * The reader checks magic, version, length, checksum, then reads every field
 * through a bounds-checked cursor, checking counts against the bytes left
 * before allocating and enum values against their ranges. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "dynapipe/sched.h"
#include "util/util.h" /* defines: dyn_calloc */

#define DYN_PLAN_VERSION 1u
#define HEADER_BYTES 24
#define SHAPE_BYTES 36
#define INSTR_BYTES 68

/* CRC-32 a byte at a time from a constant table (the CRC of each byte value
 * through the reflected polynomial; generated once, checked in the tests
 * against an independent implementation and the "123456789" vector), so
 * there is no lazily built state. */
static const uint32_t crc_table[256] = {
    0x00000000u, 0x77073096u, 0xEE0E612Cu, 0x990951BAu, 0x076DC419u, 0x706AF48Fu,
    0xE963A535u, 0x9E6495A3u, 0x0EDB8832u, 0x79DCB8A4u, 0xE0D5E91Eu, 0x97D2D988u,
    0x09B64C2Bu, 0x7EB17CBDu, 0xE7B82D07u, 0x90BF1D91u, 0x1DB71064u, 0x6AB020F2u,
    0xF3B97148u, 0x84BE41DEu, 0x1ADAD47Du, 0x6DDDE4EBu, 0xF4D4B551u, 0x83D385C7u,
    0x136C9856u, 0x646BA8C0u, 0xFD62F97Au, 0x8A65C9ECu, 0x14015C4Fu, 0x63066CD9u,
    0xFA0F3D63u, 0x8D080DF5u, 0x3B6E20C8u, 0x4C69105Eu, 0xD56041E4u, 0xA2677172u,
    0x3C03E4D1u, 0x4B04D447u, 0xD20D85FDu, 0xA50AB56Bu, 0x35B5A8FAu, 0x42B2986Cu,
    0xDBBBC9D6u, 0xACBCF940u, 0x32D86CE3u, 0x45DF5C75u, 0xDCD60DCFu, 0xABD13D59u,
    0x26D930ACu, 0x51DE003Au, 0xC8D75180u, 0xBFD06116u, 0x21B4F4B5u, 0x56B3C423u,
    0xCFBA9599u, 0xB8BDA50Fu, 0x2802B89Eu, 0x5F058808u, 0xC60CD9B2u, 0xB10BE924u,
    0x2F6F7C87u, 0x58684C11u, 0xC1611DABu, 0xB6662D3Du, 0x76DC4190u, 0x01DB7106u,
    0x98D220BCu, 0xEFD5102Au, 0x71B18589u, 0x06B6B51Fu, 0x9FBFE4A5u, 0xE8B8D433u,
    0x7807C9A2u, 0x0F00F934u, 0x9609A88Eu, 0xE10E9818u, 0x7F6A0DBBu, 0x086D3D2Du,
    0x91646C97u, 0xE6635C01u, 0x6B6B51F4u, 0x1C6C6162u, 0x856530D8u, 0xF262004Eu,
    0x6C0695EDu, 0x1B01A57Bu, 0x8208F4C1u, 0xF50FC457u, 0x65B0D9C6u, 0x12B7E950u,
    0x8BBEB8EAu, 0xFCB9887Cu, 0x62DD1DDFu, 0x15DA2D49u, 0x8CD37CF3u, 0xFBD44C65u,
    0x4DB26158u, 0x3AB551CEu, 0xA3BC0074u, 0xD4BB30E2u, 0x4ADFA541u, 0x3DD895D7u,
    0xA4D1C46Du, 0xD3D6F4FBu, 0x4369E96Au, 0x346ED9FCu, 0xAD678846u, 0xDA60B8D0u,
    0x44042D73u, 0x33031DE5u, 0xAA0A4C5Fu, 0xDD0D7CC9u, 0x5005713Cu, 0x270241AAu,
    0xBE0B1010u, 0xC90C2086u, 0x5768B525u, 0x206F85B3u, 0xB966D409u, 0xCE61E49Fu,
    0x5EDEF90Eu, 0x29D9C998u, 0xB0D09822u, 0xC7D7A8B4u, 0x59B33D17u, 0x2EB40D81u,
    0xB7BD5C3Bu, 0xC0BA6CADu, 0xEDB88320u, 0x9ABFB3B6u, 0x03B6E20Cu, 0x74B1D29Au,
    0xEAD54739u, 0x9DD277AFu, 0x04DB2615u, 0x73DC1683u, 0xE3630B12u, 0x94643B84u,
    0x0D6D6A3Eu, 0x7A6A5AA8u, 0xE40ECF0Bu, 0x9309FF9Du, 0x0A00AE27u, 0x7D079EB1u,
    0xF00F9344u, 0x8708A3D2u, 0x1E01F268u, 0x6906C2FEu, 0xF762575Du, 0x806567CBu,
    0x196C3671u, 0x6E6B06E7u, 0xFED41B76u, 0x89D32BE0u, 0x10DA7A5Au, 0x67DD4ACCu,
    0xF9B9DF6Fu, 0x8EBEEFF9u, 0x17B7BE43u, 0x60B08ED5u, 0xD6D6A3E8u, 0xA1D1937Eu,
    0x38D8C2C4u, 0x4FDFF252u, 0xD1BB67F1u, 0xA6BC5767u, 0x3FB506DDu, 0x48B2364Bu,
    0xD80D2BDAu, 0xAF0A1B4Cu, 0x36034AF6u, 0x41047A60u, 0xDF60EFC3u, 0xA867DF55u,
    0x316E8EEFu, 0x4669BE79u, 0xCB61B38Cu, 0xBC66831Au, 0x256FD2A0u, 0x5268E236u,
    0xCC0C7795u, 0xBB0B4703u, 0x220216B9u, 0x5505262Fu, 0xC5BA3BBEu, 0xB2BD0B28u,
    0x2BB45A92u, 0x5CB36A04u, 0xC2D7FFA7u, 0xB5D0CF31u, 0x2CD99E8Bu, 0x5BDEAE1Du,
    0x9B64C2B0u, 0xEC63F226u, 0x756AA39Cu, 0x026D930Au, 0x9C0906A9u, 0xEB0E363Fu,
    0x72076785u, 0x05005713u, 0x95BF4A82u, 0xE2B87A14u, 0x7BB12BAEu, 0x0CB61B38u,
    0x92D28E9Bu, 0xE5D5BE0Du, 0x7CDCEFB7u, 0x0BDBDF21u, 0x86D3D2D4u, 0xF1D4E242u,
    0x68DDB3F8u, 0x1FDA836Eu, 0x81BE16CDu, 0xF6B9265Bu, 0x6FB077E1u, 0x18B74777u,
    0x88085AE6u, 0xFF0F6A70u, 0x66063BCAu, 0x11010B5Cu, 0x8F659EFFu, 0xF862AE69u,
    0x616BFFD3u, 0x166CCF45u, 0xA00AE278u, 0xD70DD2EEu, 0x4E048354u, 0x3903B3C2u,
    0xA7672661u, 0xD06016F7u, 0x4969474Du, 0x3E6E77DBu, 0xAED16A4Au, 0xD9D65ADCu,
    0x40DF0B66u, 0x37D83BF0u, 0xA9BCAE53u, 0xDEBB9EC5u, 0x47B2CF7Fu, 0x30B5FFE9u,
    0xBDBDF21Cu, 0xCABAC28Au, 0x53B39330u, 0x24B4A3A6u, 0xBAD03605u, 0xCDD70693u,
    0x54DE5729u, 0x23D967BFu, 0xB3667A2Eu, 0xC4614AB8u, 0x5D681B02u, 0x2A6F2B94u,
    0xB40BBE37u, 0xC30C8EA1u, 0x5A05DF1Bu, 0x2D02EF8Du};

static uint32_t crc32_ieee(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = crc_table[(c ^ p[i]) & 0xFFu] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* ---- writer ------------------------------------------------------------ */

static uint8_t *put_u8(uint8_t *p, uint8_t x)
{
    *p = x;
    return p + 1;
}

static uint8_t *put_u16(uint8_t *p, uint16_t x)
{
    p[0] = (uint8_t)x;
    p[1] = (uint8_t)(x >> 8);
    return p + 2;
}

static uint8_t *put_u32(uint8_t *p, uint32_t x)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(x >> (8 * i));
    return p + 4;
}

static uint8_t *put_u64(uint8_t *p, uint64_t x)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(x >> (8 * i));
    return p + 8;
}

static uint8_t *put_shape(uint8_t *p, const dyn_mb_shape *s)
{
    p = put_u32(p, (uint32_t)s->rows);
    p = put_u32(p, (uint32_t)s->enc_len);
    p = put_u32(p, (uint32_t)s->dec_len);
    p = put_u64(p, (uint64_t)s->enc_attn);
    p = put_u64(p, (uint64_t)s->dec_attn);
    return put_u64(p, (uint64_t)s->cross_attn);
}

dyn_status dyn_exec_plan_serialize(const dyn_exec_plan *plan, uint8_t **buf, size_t *len,
                                   dyn_error *err)
{
    *buf = NULL;
    *len = 0;
    if (plan == NULL || plan->n_ranks < 1 || plan->n_stages < 1 || plan->n_microbatches < 1 ||
        !plan->stage_rank || !plan->mb_shape || !plan->ranks)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan serialize: empty or incomplete plan");
    uint64_t size = HEADER_BYTES + 20 + 4 * (uint64_t)plan->n_stages +
                    SHAPE_BYTES * (uint64_t)plan->n_microbatches;
    for (int32_t r = 0; r < plan->n_ranks; r++) {
        if (plan->ranks[r].n_instrs < 0 || (plan->ranks[r].n_instrs > 0 && !plan->ranks[r].instrs))
            return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan serialize: rank %d has no instructions array", r);
        size += 8 + INSTR_BYTES * (uint64_t)plan->ranks[r].n_instrs;
    }
    if (size > SIZE_MAX)
        return dyn_error_set(err, DYN_ERR_INVALID_ARG, "plan serialize: %" PRIu64 " bytes is too large", size);
    uint8_t *out = dyn_calloc((size_t)size, 1, "serialized plan", err);
    if (out == NULL) return DYN_ERR_NOMEM;
    uint8_t *p = out;
    memcpy(p, "DYNPLAN", 8); /* the 8th byte is the NUL */
    p = put_u32(p + 8, DYN_PLAN_VERSION);
    p = put_u64(p, size);
    p += 4; /* CRC, filled below */
    p = put_u32(p, (uint32_t)plan->schedule);
    p = put_u32(p, (uint32_t)plan->replica);
    p = put_u32(p, (uint32_t)plan->n_ranks);
    p = put_u32(p, (uint32_t)plan->n_stages);
    p = put_u32(p, (uint32_t)plan->n_microbatches);
    for (int32_t s = 0; s < plan->n_stages; s++) p = put_u32(p, (uint32_t)plan->stage_rank[s]);
    for (int32_t m = 0; m < plan->n_microbatches; m++) p = put_shape(p, &plan->mb_shape[m]);
    for (int32_t r = 0; r < plan->n_ranks; r++) {
        const dyn_rank_plan *rp = &plan->ranks[r];
        p = put_u32(p, (uint32_t)rp->n_instrs);
        p = put_u32(p, (uint32_t)rp->n_buffers);
        for (int32_t i = 0; i < rp->n_instrs; i++) {
            const dyn_instr *in = &rp->instrs[i];
            p = put_u8(p, in->op);
            p = put_u8(p, in->recompute);
            p = put_u16(p, in->flags);
            p = put_u32(p, (uint32_t)in->microbatch);
            p = put_u32(p, (uint32_t)in->stage);
            p = put_u32(p, (uint32_t)in->peer);
            p = put_u32(p, (uint32_t)in->buf_in);
            p = put_u32(p, (uint32_t)in->buf_out);
            p = put_shape(p, &in->shape);
            p = put_u64(p, (uint64_t)in->bytes);
        }
    }
    put_u32(out + 20, crc32_ieee(out + HEADER_BYTES, (size_t)size - HEADER_BYTES));
    *buf = out;
    *len = (size_t)size;
    return DYN_OK;
}

/* ---- reader ------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *p;
    size_t len, off;
    int failed;
    const char *what; /* the field being read when bytes ran out */
    size_t fail_off;
} cursor;

static int need(cursor *c, size_t n, const char *what)
{
    if (c->failed) return 0;
    if (c->len - c->off < n) {
        c->failed = 1;
        c->what = what;
        c->fail_off = c->off;
        return 0;
    }
    return 1;
}

static uint64_t get_le(cursor *c, int bytes, const char *what)
{
    if (!need(c, (size_t)bytes, what)) return 0;
    uint64_t x = 0;
    for (int i = 0; i < bytes; i++) x |= (uint64_t)c->p[c->off + i] << (8 * i);
    c->off += (size_t)bytes;
    return x;
}

static int32_t get_i32(cursor *c, const char *what) { return (int32_t)(uint32_t)get_le(c, 4, what); }
static int64_t get_i64(cursor *c, const char *what) { return (int64_t)get_le(c, 8, what); }

static void get_shape(cursor *c, dyn_mb_shape *s)
{
    s->rows = get_i32(c, "shape");
    s->enc_len = get_i32(c, "shape");
    s->dec_len = get_i32(c, "shape");
    s->enc_attn = get_i64(c, "shape");
    s->dec_attn = get_i64(c, "shape");
    s->cross_attn = get_i64(c, "shape");
}

static dyn_status truncated(const cursor *c, dyn_error *err)
{
    return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: truncated at byte %zu reading %s", c->fail_off,
                         c->what);
}

/* The header: magic, version, length and checksum, checked; c is left at
 * the payload. */
static dyn_status read_header(const uint8_t *buf, size_t len, cursor *c, dyn_error *err)
{
    if (buf == NULL || len < HEADER_BYTES)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: truncated: %zu bytes, the header alone is %d", len,
                             HEADER_BYTES);
    if (memcmp(buf, "DYNPLAN\0", 8) != 0)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: bad magic (not a dynapipe plan)");
    *c = (cursor){buf, len, 8, 0, NULL, 0};
    uint32_t version = (uint32_t)get_le(c, 4, "version");
    uint64_t total = get_le(c, 8, "length");
    uint32_t crc = (uint32_t)get_le(c, 4, "checksum");
    if (version != DYN_PLAN_VERSION)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: version %u, this build reads version %u", version,
                             DYN_PLAN_VERSION);
    if (total != len)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: header says %" PRIu64 " bytes but %zu are present (%s)",
                             total, len, total > len ? "truncated" : "trailing bytes");
    uint32_t actual = crc32_ieee(buf + HEADER_BYTES, len - HEADER_BYTES);
    if (actual != crc)
        return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: checksum mismatch (stored %08x, computed %08x)", crc,
                             actual);
    return DYN_OK;
}

/* The plan's counts, checked against their ranges and the bytes left. */
static dyn_status read_counts(cursor *c, dyn_exec_plan *out, dyn_error *err)
{
    out->schedule = get_i32(c, "schedule");
    out->replica = get_i32(c, "replica");
    out->n_ranks = get_i32(c, "n_ranks");
    out->n_stages = get_i32(c, "n_stages");
    out->n_microbatches = get_i32(c, "n_microbatches");
    if (c->failed) return truncated(c, err);
    size_t left = c->len - c->off;
    if (out->schedule < 0 || out->schedule >= DYN_SCHEDULE_COUNT || out->n_ranks < 1 ||
        out->n_ranks > 4096 || out->n_stages < 1 || (size_t)out->n_stages > left / 4 ||
        out->n_microbatches < 1 || (size_t)out->n_microbatches > left / SHAPE_BYTES)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "plan: header values out of range (schedule %d, ranks %d, stages %d, "
                             "micro-batches %d, %zu payload bytes)",
                             out->schedule, out->n_ranks, out->n_stages, out->n_microbatches, left);
    return DYN_OK;
}

/* The stage-to-rank map (each rank in range) and the micro-batch shapes,
 * into out's arrays (allocated here). */
static dyn_status read_stages(cursor *c, dyn_exec_plan *out, dyn_error *err)
{
    int32_t S = out->n_ranks;
    out->stage_rank = dyn_calloc((size_t)out->n_stages, sizeof(int32_t), "plan stages", err);
    out->mb_shape = dyn_calloc((size_t)out->n_microbatches, sizeof(dyn_mb_shape), "plan shapes", err);
    out->ranks = dyn_calloc((size_t)S, sizeof(dyn_rank_plan), "plan ranks", err);
    if (!out->stage_rank || !out->mb_shape || !out->ranks) return DYN_ERR_NOMEM;
    for (int32_t s = 0; s < out->n_stages; s++) {
        out->stage_rank[s] = get_i32(c, "stage_rank");
        if (!c->failed && (out->stage_rank[s] < 0 || out->stage_rank[s] >= S))
            return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: stage %d mapped to rank %d of %d", s,
                                 out->stage_rank[s], S);
    }
    for (int32_t m = 0; m < out->n_microbatches; m++) get_shape(c, &out->mb_shape[m]);
    return DYN_OK;
}

/* One instruction; its op and recompute mode checked once read whole
 * (running out of bytes is left to the caller: c->failed). */
static dyn_status read_instr(cursor *c, dyn_instr *in, int32_t r, int32_t i, dyn_error *err)
{
    in->op = (uint8_t)get_le(c, 1, "op");
    in->recompute = (uint8_t)get_le(c, 1, "recompute");
    in->flags = (uint16_t)get_le(c, 2, "flags");
    in->microbatch = get_i32(c, "microbatch");
    in->stage = get_i32(c, "stage");
    in->peer = get_i32(c, "peer");
    in->buf_in = get_i32(c, "buf_in");
    in->buf_out = get_i32(c, "buf_out");
    get_shape(c, &in->shape);
    in->bytes = get_i64(c, "bytes");
    if (!c->failed && (in->op >= DYN_OP_COUNT || in->recompute >= DYN_RECOMPUTE_COUNT))
        return dyn_error_set(err, DYN_ERR_CORRUPT, "plan: rank %d instr %d has op %u / recompute %u out of range",
                             r, i, in->op, in->recompute);
    return DYN_OK;
}

/* Rank r's counts and instructions into rp (its array allocated here);
 * stops early, with DYN_OK, when the bytes run out (c->failed). */
static dyn_status read_rank(cursor *c, dyn_rank_plan *rp, int32_t r, dyn_error *err)
{
    int32_t n = get_i32(c, "n_instrs");
    rp->n_buffers = get_i32(c, "n_buffers");
    if (c->failed) return DYN_OK;
    if (n < 0 || (size_t)n > (c->len - c->off) / INSTR_BYTES || rp->n_buffers < 0)
        return dyn_error_set(err, DYN_ERR_CORRUPT,
                             "plan: truncated or corrupt: rank %d claims %d instructions and %d slots, %zu bytes remain", r,
                             n, rp->n_buffers, c->len - c->off);
    rp->instrs = dyn_calloc((size_t)n, sizeof(dyn_instr), "plan instructions", err);
    if (rp->instrs == NULL) return DYN_ERR_NOMEM;
    rp->n_instrs = n;
    for (int32_t i = 0; i < n && !c->failed; i++) {
        dyn_status st = read_instr(c, &rp->instrs[i], r, i, err);
        if (st != DYN_OK) return st;
    }
    return DYN_OK;
}

dyn_status dyn_exec_plan_deserialize(const uint8_t *buf, size_t len, dyn_exec_plan *out,
                                     dyn_error *err)
{
    memset(out, 0, sizeof *out);
    cursor c;
    dyn_status st = read_header(buf, len, &c, err);
    if (st != DYN_OK) return st;
    if ((st = read_counts(&c, out, err)) != DYN_OK || (st = read_stages(&c, out, err)) != DYN_OK) goto fail;
    for (int32_t r = 0; r < out->n_ranks && !c.failed; r++)
        if ((st = read_rank(&c, &out->ranks[r], r, err)) != DYN_OK) goto fail;
    if (c.failed) {
        st = truncated(&c, err);
        goto fail;
    }
    if (c.off != len) {
        st = dyn_error_set(err, DYN_ERR_CORRUPT, "plan: %zu trailing bytes after the last rank", len - c.off);
        goto fail;
    }
    return DYN_OK;
fail:
    dyn_exec_plan_free(out);
    return st;
}

/* ---- dump -------------------------------------------------------------- */

void dyn_exec_plan_dump(FILE *fp, const dyn_exec_plan *plan)
{
    fprintf(fp, "plan schedule=%s replica=%d ranks=%d stages=%d microbatches=%d\n",
            dyn_schedule_name((dyn_schedule)plan->schedule), plan->replica, plan->n_ranks,
            plan->n_stages, plan->n_microbatches);
    for (int32_t r = 0; r < plan->n_ranks; r++) {
        const dyn_rank_plan *rp = &plan->ranks[r];
        fprintf(fp, "rank %d: %d instructions, %d slots\n", r, rp->n_instrs, rp->n_buffers);
        for (int32_t i = 0; i < rp->n_instrs; i++) {
            const dyn_instr *in = &rp->instrs[i];
            fprintf(fp,
                    "  r%d %5d %-16s mb %3d stage %2d peer %2d in %3d out %3d shape %dx%d+%d bytes "
                    "%" PRId64 "%s\n",
                    r, i, dyn_op_name((dyn_op)in->op), in->microbatch, in->stage, in->peer, in->buf_in,
                    in->buf_out, in->shape.rows, in->shape.enc_len, in->shape.dec_len, in->bytes,
                    (in->flags & DYN_INSTR_FLAG_TARGETS) ? " targets" : "");
        }
    }
}
