/* test_sched_serialize.c — the binary plan format: round trip identical for
 * every schedule, the header's CRC matches an independent CRC-32, and bad
 * magic, version, length, checksum, truncation at every length and
 * out-of-range enums are rejected; random corruptions (with the checksum
 * repaired so the parser goes deep) never crash and never read out of
 * bounds (run under ASan). Also the readable dump. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched_testlib.h" /* defines: tl_random_costs */

/* Table-driven CRC-32 (IEEE), independent of the bitwise one in src. */
static uint32_t ref_crc32(const uint8_t *p, size_t n)
{
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

static void fix_crc(uint8_t *b, size_t len)
{
    uint32_t c = ref_crc32(b + 24, len - 24);
    for (int i = 0; i < 4; i++) b[20 + i] = (uint8_t)(c >> (8 * i));
}

static void make_plan(dyn_schedule kind, int32_t S, int32_t M, int32_t v, uint64_t seed, dyn_exec_plan *p,
                      dyn_stage_costs *c)
{
    dyn_rng rng;
    dyn_rng_seed(&rng, seed);
    tl_random_costs(c, M, S * v, &rng);
    dyn_mb_shape *shapes = calloc((size_t)M, sizeof *shapes);
    assert_non_null(shapes);
    for (int32_t m = 0; m < M; m++) {
        shapes[m].rows = 1 + m;
        shapes[m].enc_len = 64 * (m + 1);
        shapes[m].dec_len = 8 * m;
        shapes[m].enc_attn = 1000 + m;
        shapes[m].dec_attn = -1 - m; /* negative values survive too */
        shapes[m].cross_attn = (int64_t)1 << 40;
    }
    dyn_sched_options o;
    dyn_sched_options_default(&o);
    o.n_ranks = S;
    o.chunks = v;
    o.recompute = DYN_RECOMPUTE_SELECTIVE;
    o.replica = 3;
    dyn_error err;
    if (dyn_schedule_build(kind, c, shapes, &o, p, &err) != DYN_OK) fail_msg("%s", err.msg);
    free(shapes);
}

static void assert_plans_equal(const dyn_exec_plan *a, const dyn_exec_plan *b)
{
    assert_int_equal(a->schedule, b->schedule);
    assert_int_equal(a->replica, b->replica);
    assert_int_equal(a->n_ranks, b->n_ranks);
    assert_int_equal(a->n_stages, b->n_stages);
    assert_int_equal(a->n_microbatches, b->n_microbatches);
    assert_memory_equal(a->stage_rank, b->stage_rank, sizeof(int32_t) * (size_t)a->n_stages);
    for (int32_t m = 0; m < a->n_microbatches; m++) {
        assert_int_equal(a->mb_shape[m].rows, b->mb_shape[m].rows);
        assert_int_equal(a->mb_shape[m].enc_len, b->mb_shape[m].enc_len);
        assert_int_equal(a->mb_shape[m].dec_len, b->mb_shape[m].dec_len);
        assert_true(a->mb_shape[m].enc_attn == b->mb_shape[m].enc_attn);
        assert_true(a->mb_shape[m].dec_attn == b->mb_shape[m].dec_attn);
        assert_true(a->mb_shape[m].cross_attn == b->mb_shape[m].cross_attn);
    }
    for (int32_t r = 0; r < a->n_ranks; r++) {
        assert_int_equal(a->ranks[r].n_instrs, b->ranks[r].n_instrs);
        assert_int_equal(a->ranks[r].n_buffers, b->ranks[r].n_buffers);
        for (int32_t i = 0; i < a->ranks[r].n_instrs; i++) {
            const dyn_instr *x = &a->ranks[r].instrs[i], *y = &b->ranks[r].instrs[i];
            assert_int_equal(x->op, y->op);
            assert_int_equal(x->recompute, y->recompute);
            assert_int_equal(x->flags, y->flags);
            assert_int_equal(x->microbatch, y->microbatch);
            assert_int_equal(x->stage, y->stage);
            assert_int_equal(x->peer, y->peer);
            assert_int_equal(x->buf_in, y->buf_in);
            assert_int_equal(x->buf_out, y->buf_out);
            assert_int_equal(x->shape.rows, y->shape.rows);
            assert_int_equal(x->shape.enc_len, y->shape.enc_len);
            assert_int_equal(x->shape.dec_len, y->shape.dec_len);
            assert_true(x->shape.enc_attn == y->shape.enc_attn);
            assert_true(x->shape.dec_attn == y->shape.dec_attn);
            assert_true(x->shape.cross_attn == y->shape.cross_attn);
            assert_true(x->bytes == y->bytes);
        }
    }
}

static void test_round_trip_every_schedule(void **state)
{
    (void)state;
    for (int k = 0; k < DYN_SCHEDULE_COUNT; k++) {
        int v = (k == DYN_SCHEDULE_INTERLEAVED || k == DYN_SCHEDULE_CYCLIC) ? 2 : 1;
        dyn_exec_plan p, q;
        dyn_stage_costs c;
        make_plan((dyn_schedule)k, 3, 7, v, 10 + (uint64_t)k, &p, &c);
        uint8_t *buf = NULL, *buf2 = NULL;
        size_t len = 0, len2 = 0;
        dyn_error err;
        assert_int_equal(dyn_exec_plan_serialize(&p, &buf, &len, &err), DYN_OK);
        assert_memory_equal(buf, "DYNPLAN\0", 8);
        assert_int_equal(buf[8], 1); /* version 1, little-endian */
        uint64_t total = 0;
        for (int i = 0; i < 8; i++) total |= (uint64_t)buf[12 + i] << (8 * i);
        assert_true(total == len);
        uint32_t crc = (uint32_t)buf[20] | (uint32_t)buf[21] << 8 | (uint32_t)buf[22] << 16 | (uint32_t)buf[23] << 24;
        assert_true(crc == ref_crc32(buf + 24, len - 24));
        if (dyn_exec_plan_deserialize(buf, len, &q, &err) != DYN_OK) fail_msg("%s", err.msg);
        assert_plans_equal(&p, &q);
        assert_int_equal(dyn_exec_plan_validate(&q, &err), DYN_OK);
        assert_int_equal(dyn_exec_plan_serialize(&q, &buf2, &len2, &err), DYN_OK);
        assert_int_equal(len, len2);
        assert_memory_equal(buf, buf2, len);
        free(buf);
        free(buf2);
        dyn_exec_plan_free(&p);
        dyn_exec_plan_free(&q);
        dyn_stage_costs_free(&c);
    }
}

static void test_crc_reference_vector(void **state)
{
    (void)state;
    assert_true(ref_crc32((const uint8_t *)"123456789", 9) == 0xCBF43926u);
}

static void expect_corrupt(const uint8_t *buf, size_t len, const char *what)
{
    dyn_exec_plan q;
    dyn_error err;
    dyn_status st = dyn_exec_plan_deserialize(buf, len, &q, &err);
    if (st != DYN_ERR_CORRUPT) fail_msg("wanted corrupt (%s), got %d: %s", what, st, err.msg);
    if (strstr(err.msg, what) == NULL) fail_msg("wanted '%s' in: %s", what, err.msg);
    assert_null(q.ranks);
}

static void test_corruptions_rejected(void **state)
{
    (void)state;
    dyn_exec_plan p;
    dyn_stage_costs c;
    make_plan(DYN_SCHEDULE_1F1B, 2, 3, 1, 99, &p, &c);
    uint8_t *buf;
    size_t len;
    assert_int_equal(dyn_exec_plan_serialize(&p, &buf, &len, NULL), DYN_OK);
    uint8_t *b = malloc(len + 8);
    assert_non_null(b);

    memcpy(b, buf, len);
    b[0] = 'X';
    expect_corrupt(b, len, "bad magic");

    memcpy(b, buf, len);
    b[8] = 2;
    expect_corrupt(b, len, "version 2");

    memcpy(b, buf, len);
    b[len / 2] ^= 0x10;
    expect_corrupt(b, len, "checksum");

    /* Truncation at every length: the header's length field catches it. */
    for (size_t n = 0; n < len; n++) {
        dyn_exec_plan q;
        dyn_error err;
        uint8_t *t = malloc(n ? n : 1); /* exact size so ASan sees over-reads */
        assert_non_null(t);
        memcpy(t, buf, n);
        assert_int_equal(dyn_exec_plan_deserialize(t, n, &q, &err), DYN_ERR_CORRUPT);
        assert_true(strstr(err.msg, "truncated") != NULL || strstr(err.msg, "magic") != NULL);
        free(t);
    }
    memcpy(b, buf, len);
    memset(b + len, 0, 8);
    expect_corrupt(b, len + 8, "trailing bytes");

    /* Truncation the length field agrees with: the cursor catches it. */
    memcpy(b, buf, len);
    size_t cut = len - 10;
    for (int i = 0; i < 8; i++) b[12 + i] = (uint8_t)((uint64_t)cut >> (8 * i));
    fix_crc(b, cut);
    expect_corrupt(b, cut, "truncated");

    /* Out-of-range enum values with a valid checksum. */
    size_t first_instr = 24 + 20 + 4 * 2 + 36 * 3 + 8;
    memcpy(b, buf, len);
    b[first_instr] = 200; /* op */
    fix_crc(b, len);
    expect_corrupt(b, len, "op 200");
    memcpy(b, buf, len);
    b[first_instr + 1] = 9; /* recompute */
    fix_crc(b, len);
    expect_corrupt(b, len, "recompute 9");
    memcpy(b, buf, len);
    b[24] = 77; /* schedule */
    fix_crc(b, len);
    expect_corrupt(b, len, "out of range");
    memcpy(b, buf, len);
    b[24 + 12] = 0xff; /* n_stages huge */
    b[24 + 13] = 0xff;
    fix_crc(b, len);
    expect_corrupt(b, len, "out of range");
    memcpy(b, buf, len);
    b[24 + 20] = 5; /* stage 0 -> rank 5 of 2 */
    fix_crc(b, len);
    expect_corrupt(b, len, "rank 5 of 2");

    free(b);
    free(buf);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

/* Random byte corruptions with the checksum repaired: the parser either
 * accepts (and the validator then judges the plan without crashing) or
 * rejects; ASan would flag any out-of-bounds read. */
static void test_fuzz_corruptions(void **state)
{
    (void)state;
    dyn_exec_plan p;
    dyn_stage_costs c;
    make_plan(DYN_SCHEDULE_ZB, 3, 4, 1, 7, &p, &c);
    uint8_t *buf;
    size_t len;
    assert_int_equal(dyn_exec_plan_serialize(&p, &buf, &len, NULL), DYN_OK);
    dyn_rng rng;
    dyn_rng_seed(&rng, 1234);
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = len;
        if (dyn_rng_below(&rng, 4) == 0) n = 24 + dyn_rng_below(&rng, len - 24); /* also truncate */
        uint8_t *b = malloc(n);
        assert_non_null(b);
        memcpy(b, buf, n);
        int flips = 1 + (int)dyn_rng_below(&rng, 4);
        for (int f = 0; f < flips; f++) b[24 + dyn_rng_below(&rng, n - 24)] = (uint8_t)dyn_rng_next_u64(&rng);
        for (int i = 0; i < 8; i++) b[12 + i] = (uint8_t)((uint64_t)n >> (8 * i));
        fix_crc(b, n);
        dyn_exec_plan q;
        dyn_error err;
        dyn_status st = dyn_exec_plan_deserialize(b, n, &q, &err);
        if (st == DYN_OK) {
            accepted++;
            (void)dyn_exec_plan_validate(&q, &err);
            dyn_exec_plan_free(&q);
        } else {
            assert_int_equal(st, DYN_ERR_CORRUPT);
            rejected++;
        }
        free(b);
    }
    assert_true(accepted > 0 && rejected > 0);
    free(buf);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

static void test_dump_lines(void **state)
{
    (void)state;
    dyn_exec_plan p;
    dyn_stage_costs c;
    make_plan(DYN_SCHEDULE_1F1B, 2, 2, 1, 3, &p, &c);
    FILE *fp = tmpfile();
    assert_non_null(fp);
    dyn_exec_plan_dump(fp, &p);
    rewind(fp);
    char line[512];
    int n = 0, found = 0;
    while (fgets(line, sizeof line, fp)) {
        n++;
        if (strstr(line, "r1") && strstr(line, "LOAD_INPUT") && strstr(line, "targets")) found = 1;
    }
    fclose(fp);
    assert_int_equal(n, 1 + 2 + p.ranks[0].n_instrs + p.ranks[1].n_instrs);
    assert_true(found);
    dyn_exec_plan_free(&p);
    dyn_stage_costs_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_every_schedule),
        cmocka_unit_test(test_crc_reference_vector),
        cmocka_unit_test(test_corruptions_rejected),
        cmocka_unit_test(test_fuzz_corruptions),
        cmocka_unit_test(test_dump_lines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
