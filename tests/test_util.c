/* test_util.c — error records, the RNG's determinism and distribution,
 * array growth (dyn_reserve), huge-page allocation (dyn_calloc_huge), the
 * allocator keeping freed memory (dyn_alloc_keep_freed) and atomic file
 * writes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <sys/stat.h>
#include <unistd.h>

#include "util/json.h" /* defines: dyn_json_parse */
#include "util/rng.h"  /* defines: dyn_rng_* */
#include "util/util.h" /* defines: dyn_file_*, dyn_atomic_*, DYN_RESERVE, dyn_calloc_huge, dyn_alloc_keep_freed */

static void test_error_set_formats_and_returns_code(void **state)
{
    (void)state;
    dyn_error err;
    dyn_error_clear(&err);
    dyn_status st = dyn_error_set(&err, DYN_ERR_PARSE, "%s:%d: bad", "f.tsv", 7);
    assert_int_equal(st, DYN_ERR_PARSE);
    assert_int_equal(err.code, DYN_ERR_PARSE);
    assert_string_equal(err.msg, "f.tsv:7: bad");
    assert_int_equal(dyn_error_set(NULL, DYN_ERR_IO, "x"), DYN_ERR_IO);
    /* Bytes from the input never break the one line: control bytes escaped. */
    dyn_error_set(&err, DYN_ERR_PARSE, "name '%s'", "a\nb\tc\x01\x7f");
    assert_string_equal(err.msg, "name 'a\\nb\\tc\\x01\\x7f'");
    dyn_error_set(&err, DYN_ERR_PARSE, "%s", "f.tsv:7: bad"); /* as before for what follows */
    assert_string_equal(dyn_status_name(DYN_ERR_INFEASIBLE), "infeasible");
    /* A caller that knows where adds it in front, with its own code. */
    assert_int_equal(dyn_error_prefix(&err, DYN_ERR_IO, "model.json"), DYN_ERR_IO);
    assert_int_equal(err.code, DYN_ERR_IO);
    assert_string_equal(err.msg, "model.json: f.tsv:7: bad");
    assert_int_equal(dyn_error_prefix(NULL, DYN_ERR_PARSE, "x"), DYN_ERR_PARSE);
}

static void test_rng_same_seed_same_stream(void **state)
{
    (void)state;
    dyn_rng a, b, c;
    dyn_rng_seed(&a, 42);
    dyn_rng_seed(&b, 42);
    dyn_rng_seed(&c, 43);
    int differs = 0;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = dyn_rng_next_u64(&a);
        assert_true(x == dyn_rng_next_u64(&b));
        differs |= x != dyn_rng_next_u64(&c);
    }
    assert_true(differs);
}

static void test_rng_uniform_and_below_are_unbiased(void **state)
{
    (void)state;
    dyn_rng r;
    dyn_rng_seed(&r, 7);
    enum { N = 200000, K = 10 };
    int counts[K] = {0};
    double sum = 0, sumsq = 0;
    for (int i = 0; i < N; i++) {
        double u = dyn_rng_uniform(&r);
        assert_true(u >= 0.0 && u < 1.0);
        counts[dyn_rng_below(&r, K)]++;
        double z = dyn_rng_normal(&r);
        sum += z;
        sumsq += z * z;
    }
    for (int k = 0; k < K; k++) /* expected 20000, sd ~134 */
        assert_true(abs(counts[k] - N / K) < 800);
    assert_true(fabs(sum / N) < 0.02);
    assert_true(fabs(sumsq / N - 1.0) < 0.03);
}

static void test_rng_skip_normals_matches_drawing(void **state)
{
    (void)state;
    dyn_rng a, b;
    dyn_rng_seed(&a, 77);
    dyn_rng_seed(&b, 77);
    for (int i = 0; i < 1001; i++) (void)dyn_rng_normal(&a);
    dyn_rng_skip_normals(&b, 1000);
    dyn_rng_skip_normals(&b, 1);
    assert_memory_equal(a.s, b.s, sizeof a.s);
    assert_true(dyn_rng_normal(&a) == dyn_rng_normal(&b));
    dyn_rng_skip_normals(&b, 0);
    assert_memory_equal(a.s, b.s, sizeof a.s);
}

static void test_atomic_write_commit_and_abort(void **state)
{
    (void)state;
    char path[] = "/tmp/dyn_test_atomic_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    dyn_error err;
    assert_int_equal(dyn_file_write_atomic(path, "hello", 5, &err), DYN_OK);
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(dyn_file_read_all(path, &data, &len, &err), DYN_OK);
    assert_int_equal(len, 5);
    assert_string_equal(data, "hello");
    free(data);

    /* An aborted write leaves the old content and no temporary file. */
    dyn_atomic_file af;
    assert_int_equal(dyn_atomic_open(&af, path, &err), DYN_OK);
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s", af.tmp_path);
    fputs("partial", af.fp);
    dyn_atomic_abort(&af);
    assert_int_not_equal(access(tmp, F_OK), 0);
    assert_int_equal(dyn_file_read_all(path, &data, &len, &err), DYN_OK);
    assert_string_equal(data, "hello");
    free(data);
    unlink(path);
}

/* A FIFO (and so a character device such as /dev/null) is written in place,
 * never replaced by a regular file; a directory is refused with its name. */
static void test_atomic_write_fifo_in_place(void **state)
{
    (void)state;
    char dir[] = "/tmp/dyn_test_fifo_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char fifo[600];
    snprintf(fifo, sizeof fifo, "%s/out", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    /* Our own reader end (O_RDWR does not block on Linux), so the writer's
     * open does not wait. */
    int rd = open(fifo, O_RDWR | O_NONBLOCK);
    assert_true(rd >= 0);
    dyn_error err;
    assert_int_equal(dyn_file_write_atomic(fifo, "hello", 5, &err), DYN_OK);
    struct stat sb;
    assert_int_equal(stat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    char buf[16] = {0};
    assert_int_equal(read(rd, buf, sizeof buf), 5);
    assert_string_equal(buf, "hello");
    close(rd);
    unlink(fifo);

    assert_int_equal(dyn_file_write_atomic(dir, "x", 1, &err), DYN_ERR_IO);
    assert_non_null(strstr(err.msg, "not a regular file"));
    assert_int_equal(stat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    rmdir(dir);
}

/* Several outputs: all appear or none; a finished but unpublished file is
 * not visible at its path. */
static void test_atomic_commit_all_or_nothing(void **state)
{
    (void)state;
    char dir[] = "/tmp/dyn_test_all_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[600], b[600], c[600];
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    snprintf(c, sizeof c, "%s/missing/c", dir);
    dyn_error err;
    dyn_atomic_file af[2];
    assert_int_equal(dyn_atomic_open(&af[0], a, &err), DYN_OK);
    assert_int_equal(dyn_atomic_open(&af[1], b, &err), DYN_OK);
    fputs("A", af[0].fp);
    fputs("B", af[1].fp);
    assert_int_equal(dyn_atomic_finish(&af[0], &err), DYN_OK);
    assert_int_not_equal(access(a, F_OK), 0);
    assert_int_equal(dyn_atomic_commit_all(af, 2, &err), DYN_OK);
    assert_int_equal(access(a, F_OK), 0);
    assert_int_equal(access(b, F_OK), 0);
    unlink(a);
    unlink(b);
    /* A later output that cannot be created: the caller aborts the earlier
     * ones, and nothing is left. */
    assert_int_equal(dyn_atomic_open(&af[0], a, &err), DYN_OK);
    assert_int_equal(dyn_atomic_open(&af[1], c, &err), DYN_ERR_IO);
    dyn_atomic_abort(&af[0]);
    dyn_atomic_abort(&af[1]);
    assert_int_not_equal(access(a, F_OK), 0);
    assert_int_equal(rmdir(dir), 0);
}

static void test_read_missing_file_names_it(void **state)
{
    (void)state;
    dyn_error err;
    char *data = NULL;
    assert_int_equal(dyn_file_read_all("/nonexistent/x.tsv", &data, NULL, &err), DYN_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.tsv"));
    assert_null(data);
    assert_int_equal(dyn_file_write_atomic("/nonexistent/dir/out.json", "x", 1, &err), DYN_ERR_IO);
}

/* The strict JSON reader (util/json.h) refuses what cJSON lets through,
 * with line and column: bytes that are not UTF-8 (a stray continuation
 * byte, an overlong form, a surrogate, beyond U+10FFFF, cut short), \u0000
 * in a string and a key twice; an escaped backslash before "u0000", UTF-8
 * characters and \u escapes of other characters are fine. */
/* dyn_reserve: growth to max(need, 2 * cap), contents kept, nothing done
 * when the room is there, and an overflowing byte count refused with *p
 * and *cap untouched. Checked against the capacity sequence computed here. */
static void test_reserve_grows_doubling_and_keeps_contents(void **state)
{
    (void)state;
    int32_t *v = NULL;
    size_t cap = 0, want = 0;
    for (int32_t n = 0; n < 5000; n++) {
        if ((size_t)n + 1 > want) want = (size_t)n + 1 > 2 * want ? (size_t)n + 1 : 2 * want;
        assert_int_equal(DYN_RESERVE(v, cap, (size_t)n + 1), 0);
        assert_int_equal(cap, want);
        v[n] = n * 7;
    }
    for (int32_t n = 0; n < 5000; n++) assert_int_equal(v[n], n * 7);
    assert_int_equal(cap, 8192); /* 1, 2, 4, ..., 8192 */
    int32_t *same = v;
    assert_int_equal(DYN_RESERVE(v, cap, 100), 0); /* room enough: no change */
    assert_ptr_equal(v, same);
    assert_int_equal(cap, 8192);
    assert_int_equal(DYN_RESERVE(v, cap, 20000), 0); /* more than double: exactly need */
    assert_int_equal(cap, 20000);
    assert_int_equal(v[4999], 4999 * 7);
    /* byte count past SIZE_MAX: refused, nothing changed */
    same = v;
    assert_int_equal(DYN_RESERVE(v, cap, SIZE_MAX / 2), -1);
    assert_ptr_equal(v, same);
    assert_int_equal(cap, 20000);
    free(v);
}

/* dyn_calloc_huge: from 2 MB up the block starts on a 2 MB boundary (so a
 * huge page can back it: calloc's large blocks start 16 bytes into a 4 KB
 * page) and reads zero whether or not the memory was used before; smaller
 * requests are zeroed too; an overflowing count is refused naming what.
 * Whether the kernel did back it with huge pages is the host's choice, so
 * it is not asserted. */
static void test_calloc_huge_aligned_and_zeroed(void **state)
{
    (void)state;
    const size_t sizes[3] = {(size_t)3 << 20, ((size_t)2 << 20) + 4, 1000};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++) {
            size_t n = sizes[i] / sizeof(float);
            float *p = dyn_calloc_huge(n, sizeof(float), "test floats", NULL);
            assert_non_null(p);
            if (sizes[i] >= ((size_t)2 << 20)) assert_int_equal((uintptr_t)p % ((uintptr_t)2 << 20), 0);
            size_t nonzero = 0;
            for (size_t k = 0; k < n; k++) nonzero += p[k] != 0.0f;
            assert_int_equal(nonzero, 0);
            for (size_t k = 0; k < n; k++) p[k] = 1.0f; /* dirty it for the second round */
            free(p);
        }
    }
    dyn_error err;
    memset(&err, 0, sizeof err);
    assert_null(dyn_calloc_huge(SIZE_MAX / 2, 4, "too many floats", &err));
    assert_int_equal(err.code, DYN_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "too many floats"));
}

/* dyn_alloc_keep_freed (glibc; not under AddressSanitizer, whose allocator
 * replaces glibc's): a 64 MB block, which glibc would otherwise map on its
 * own and unmap on free, comes from the heap, and once freed stays there
 * as free heap memory for the next allocation. */
static void test_alloc_keep_freed(void **state)
{
    (void)state;
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
    dyn_alloc_keep_freed();
    size_t n = (size_t)64 << 20;
    unsigned char *p = malloc(n);
    assert_non_null(p);
    memset(p, 1, n);
    struct mallinfo2 held = mallinfo2();
    assert_int_equal(held.hblks, 0); /* no block of its own mapping */
    free(p);
    struct mallinfo2 after = mallinfo2();
    if (!(after.fordblks >= n)) fail_msg("%zu bytes free in the heap after freeing %zu", after.fordblks, n);
    assert_true(after.arena >= n); /* not trimmed */
#else
    skip();
#endif
}

static void test_json_strict_text(void **state)
{
    (void)state;
    struct {
        const char *text;
        const char *needle; /* NULL: parses */
    } cases[] = {
        {"{\"a\": \"\xc3\xa9\\u00e9\\\\u0000\"}", NULL},
        {"{\"a\": \"\xf0\x9f\x98\x80\"}", NULL},
        {"{\n\"a\": \"x\x80\"}", "line 2, column 8: not valid UTF-8"},
        {"{\"a\": \"\xc1\xbf\"}", "line 1, column 8: not valid UTF-8"},
        {"{\"a\": \"\xe0\x80\xaf\"}", "not valid UTF-8"},
        {"{\"a\": \"\xed\xbf\xbf\"}", "not valid UTF-8"},
        {"{\"a\": \"\xf4\x90\x80\x80\"}", "not valid UTF-8"},
        {"{\"a\": \"\xf0\x9f\x98\"}", "not valid UTF-8"},
        {"{\"a\": 1}\xff", "not valid UTF-8"},
        {"{\"a\": \"x\\u0000y\"}", "line 1, column 9: \\u0000"},
        {"{\"a\\u0000\": 1}", "\\u0000"},
        {"{\"a\": 1, \"a\": 2}", "key \"a\" appears twice"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        cJSON *root = NULL;
        dyn_error err;
        dyn_status st = dyn_json_parse(cases[k].text, strlen(cases[k].text), "t.json", &root, &err);
        if (cases[k].needle == NULL) {
            if (st != DYN_OK) fail_msg("case %zu: %s", k, err.msg);
            cJSON_Delete(root);
            continue;
        }
        if (st != DYN_ERR_PARSE || strstr(err.msg, cases[k].needle) == NULL)
            fail_msg("case %zu: got %d '%s', want '%s'", k, (int)st, st == DYN_OK ? "" : err.msg, cases[k].needle);
        assert_null(root);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_error_set_formats_and_returns_code),
        cmocka_unit_test(test_json_strict_text),
        cmocka_unit_test(test_reserve_grows_doubling_and_keeps_contents),
        cmocka_unit_test(test_calloc_huge_aligned_and_zeroed),
        cmocka_unit_test(test_alloc_keep_freed),
        cmocka_unit_test(test_rng_same_seed_same_stream),
        cmocka_unit_test(test_rng_uniform_and_below_are_unbiased),
        cmocka_unit_test(test_rng_skip_normals_matches_drawing),
        cmocka_unit_test(test_atomic_write_commit_and_abort),
        cmocka_unit_test(test_atomic_write_fifo_in_place),
        cmocka_unit_test(test_atomic_commit_all_or_nothing),
        cmocka_unit_test(test_read_missing_file_names_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
