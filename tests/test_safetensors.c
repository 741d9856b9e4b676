/* test_safetensors.c — the safetensors reader/writer: a round trip, the exact
 * byte layout of a written file, and every kind of malformed file (each must
 * be rejected with a message naming what is wrong). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/safetensors.h" /* defines: dyn_safetensors_* */
#include "util/util.h"         /* defines: dyn_file_read_all */
#include "model/threads.h" /* defines: dyn_threads_init */

static void tmp_path(char *buf, size_t cap, const char *tag)
{
    snprintf(buf, cap, "/tmp/dyn_test_st_%ld_%s.safetensors", (long)getpid(), tag);
}

/* Write a file by hand: 8-byte length, the header text, then data bytes. */
static void write_raw(const char *path, const char *header, const void *data, size_t dlen, uint64_t hlen_override)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    uint64_t hlen = hlen_override ? hlen_override : strlen(header);
    unsigned char lb[8];
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(hlen >> (8 * i));
    assert_int_equal(fwrite(lb, 1, 8, fp), 8);
    assert_int_equal(fwrite(header, 1, strlen(header), fp), strlen(header));
    if (dlen) assert_int_equal(fwrite(data, 1, dlen, fp), dlen);
    assert_int_equal(fclose(fp), 0);
}

static void test_round_trip_and_layout(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "rt");
    float a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1.5f, 0.25f, 1e-20f};
    dyn_st_entry t[2] = {{"w.weight", 2, {2, 3}, a}, {"b", 1, {3}, b}};
    const char *meta[2] = {"format", "pt"};
    dyn_error err;
    assert_int_equal(dyn_safetensors_write(path, t, 2, meta, 1, &err), DYN_OK);

    /* Byte layout: header length is a multiple of 8; tensors follow in the
     * order given, raw little-endian. */
    char *raw = NULL;
    size_t len = 0;
    assert_int_equal(dyn_file_read_all(path, &raw, &len, &err), DYN_OK);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)(unsigned char)raw[i] << (8 * i);
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + 9 * 4);
    assert_memory_equal(raw + 8 + hlen, a, sizeof a);
    assert_memory_equal(raw + 8 + hlen + sizeof a, b, sizeof b);
    assert_non_null(strstr(raw + 8, "\"dtype\":\"F32\""));
    free(raw);

    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    assert_non_null(st);
    assert_int_equal(dyn_safetensors_count(st), 2);
    assert_string_equal(dyn_safetensors_name(st, 0), "w.weight");
    assert_string_equal(dyn_safetensors_meta(st, "format"), "pt");
    assert_null(dyn_safetensors_meta(st, "nope"));
    int64_t shape[4];
    const char *dt;
    assert_int_equal(dyn_safetensors_shape(st, "w.weight", shape, &dt), 2);
    assert_int_equal(shape[1], 3);
    assert_string_equal(dt, "F32");
    float a2[6], b2[3];
    int64_t sa[2] = {2, 3}, sb[1] = {3};
    assert_int_equal(dyn_safetensors_read(st, "w.weight", 2, sa, a2, &err), DYN_OK);
    assert_int_equal(dyn_safetensors_read(st, "b", 1, sb, b2, &err), DYN_OK);
    assert_memory_equal(a, a2, sizeof a);
    assert_memory_equal(b, b2, sizeof b);

    /* Wrong expectations of a good file. */
    int64_t wrong[2] = {3, 2};
    assert_int_equal(dyn_safetensors_read(st, "w.weight", 2, wrong, a2, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "'w.weight' has shape [2, 3], expected [3, 2]"));
    assert_int_equal(dyn_safetensors_read(st, "missing.weight", 1, sb, b2, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "'missing.weight' missing (expected F32 [3])"));
    dyn_safetensors_free(st);

    /* A duplicate name is refused at write time. */
    dyn_st_entry dup[2] = {{"x", 1, {3}, b}, {"x", 1, {3}, b}};
    assert_int_equal(dyn_safetensors_write(path, dup, 2, NULL, 0, &err), DYN_ERR_INVALID_ARG);
    unlink(path);
}

/* Open must fail with DYN_ERR_CORRUPT and a message containing `needle`. */
static void expect_bad(const char *path, const char *needle)
{
    dyn_error err;
    dyn_error_clear(&err);
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    if (st != NULL) fail_msg("accepted a bad file, expected '%s'", needle);
    assert_int_equal(err.code, DYN_ERR_CORRUPT);
    if (strstr(err.msg, needle) == NULL) fail_msg("message '%s' lacks '%s'", err.msg, needle);
}

static void test_bad_files_are_rejected(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "bad");
    float d[4] = {1, 2, 3, 4};

    /* 3 bytes: not even a length */
    dyn_error err;
    assert_int_equal(dyn_file_write_atomic(path, "abc", 3, &err), DYN_OK);
    expect_bad(path, "truncated");

    /* Each header (with dlen bytes of d after it) must be refused naming
     * what is wrong; hlen != 0 overrides the stored header length. */
    static const struct { const char *header; size_t dlen; uint64_t hlen; const char *needle; } bad[] = {
        {"{\"a\":{}}",
         0, 1000, "header length 1000 does not fit"},
        {"{\"a\": [1, 2",
         0, 0, "not a valid JSON object"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4]}}",
         16, 0, "'a' needs dtype"},
        {"{\"a\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         16, 0, "'a': unknown dtype 'Q4'"},
        /* truncated data: header promises 16 bytes, 8 present */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         8, 0, "'a': data_offsets [0, 16] beyond the 8 data bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}",
         16, 0, "'a': 16 data bytes, but F32 of shape needs 12"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-3],\"data_offsets\":[0,16]}}",
         16, 0, "'a': shape[0] is not a valid size"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
         16, 0, "'a': data_offsets must be"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
         12, 0, "'b' data [4, 12) overlaps tensor 'a'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
         16, 0, "hole of 8 bytes before tensor 'a'"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
         16, 0, "8 trailing data bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, 0, "duplicate tensor 'a'"},
        {"{\"__metadata__\":{\"k\":3}}",
         0, 0, "value of 'k' is not a string"},
        /* a name with a newline and a control byte (JSON escapes): the
         * message stays one line, the bytes escaped */
        {"{\"x\\ny\\u0001\":{\"dtype\":\"Q4\",\"shape\":[4],\"data_offsets\":[0,16]}}",
         16, 0, "'x\\ny\\x01': unknown dtype 'Q4'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_raw(path, bad[i].header, d, bad[i].dlen, bad[i].hlen);
        expect_bad(path, bad[i].needle);
    }

    /* A well-formed F64 tensor opens, but reading it as floats is refused. */
    write_raw(path, "{\"h\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,16]}}", d, 16, 0);
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    assert_non_null(st);
    int64_t s2[1] = {2};
    float out[2];
    assert_int_equal(dyn_safetensors_read(st, "h", 1, s2, out, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "'h' has dtype F64, expected F32 (or F16, BF16)"));
    dyn_safetensors_free(st);

    /* A missing file is an IO error, not a crash. */
    unlink(path);
    assert_null(dyn_safetensors_open(path, &err));
    assert_int_equal(err.code, DYN_ERR_IO);
}

/* F16 and BF16 tensors are widened exactly: bit patterns with known
 * values (normals, a subnormal, signed zero, the largest half); an
 * infinity or a NaN in either is refused, naming the element (issue 30:
 * no weight is loaded non-finite). */
static void test_half_precision_read(void **state)
{
    (void)state;
    char path[256];
    tmp_path(path, sizeof path, "half");
    static const uint16_t f16[8] = {0x3c00, 0xc000, 0x3555, 0x0001, 0x8000, 0x3800, 0x7bff, 0xbc00};
    static const float f16_want[8] = {1.0f, -2.0f, 0.333251953125f, 5.9604644775390625e-8f, -0.0f, 0.5f, 65504.0f, -1.0f};
    static const uint16_t bf16[4] = {0x3f80, 0xc0a0, 0x3eab, 0x4000};
    static const float bf16_want[4] = {1.0f, -5.0f, 0.333984375f, 2.0f};
    unsigned char data[24];
    for (int i = 0; i < 8; i++) data[2 * i] = (unsigned char)(f16[i] & 0xff), data[2 * i + 1] = (unsigned char)(f16[i] >> 8);
    for (int i = 0; i < 4; i++)
        data[16 + 2 * i] = (unsigned char)(bf16[i] & 0xff), data[16 + 2 * i + 1] = (unsigned char)(bf16[i] >> 8);
    write_raw(path,
              "{\"a\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,16]},"
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[16,24]}}",
              data, 24, 0);
    dyn_error err;
    dyn_safetensors *st = dyn_safetensors_open(path, &err);
    if (st == NULL) fail_msg("%s", err.msg);
    int64_t sa[2] = {2, 4}, sb[1] = {4};
    float a[8], b[4];
    assert_int_equal(dyn_safetensors_read(st, "a", 2, sa, a, &err), DYN_OK);
    assert_int_equal(dyn_safetensors_read(st, "b", 1, sb, b, &err), DYN_OK);
    for (int i = 0; i < 8; i++) assert_memory_equal(&a[i], &f16_want[i], sizeof(float)); /* -0 keeps its sign */
    assert_memory_equal(b, bf16_want, sizeof b);
    dyn_safetensors_free(st);

    /* An F16 infinity at element 5 and a BF16 NaN at element 3: refused. */
    data[2 * 5] = 0x00, data[2 * 5 + 1] = 0x7c;
    data[16 + 2 * 3] = 0xc0, data[16 + 2 * 3 + 1] = 0x7f;
    write_raw(path,
              "{\"a\":{\"dtype\":\"F16\",\"shape\":[2,4],\"data_offsets\":[0,16]},"
              "\"b\":{\"dtype\":\"BF16\",\"shape\":[4],\"data_offsets\":[16,24]}}",
              data, 24, 0);
    st = dyn_safetensors_open(path, &err);
    if (st == NULL) fail_msg("%s", err.msg);
    assert_int_equal(dyn_safetensors_read(st, "a", 2, sa, a, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "tensor a holds a non-finite value at element 5 (inf)"));
    assert_int_equal(dyn_safetensors_read(st, "b", 1, sb, b, &err), DYN_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "tensor b holds a non-finite value at element 3 (nan)"));
    dyn_safetensors_free(st);
    unlink(path);
}

int main(void)
{
    dyn_threads_init(); /* the selected BLAS kernel, checked (threads.h); may re-execute */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_and_layout),
        cmocka_unit_test(test_bad_files_are_rejected),
        cmocka_unit_test(test_half_precision_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
