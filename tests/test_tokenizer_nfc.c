/* test_tokenizer_nfc.c — NFC normalization (src/data/tok_nfc.c, the
 * normalizer of Qwen2's tokenizer.json) against Python's
 * unicodedata.normalize("NFC") (tests/tokenizer/nfc_ref.py, /usr/bin/python3
 * of the same Unicode version as the tables): every code point from U+0000
 * to U+10FFFF (surrogates and line ends left out) in lines of 128, and
 * 20,000 random sequences of base letters, precomposed letters, combining
 * marks of several classes, Hangul jamo and syllables, singletons and
 * composition exclusions — where decomposition, canonical reordering and
 * blocked and unblocked composition all happen. Output equal byte for byte.
 * Exits 77 (skipped) without /usr/bin/python3.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "data/tokenizer_impl.h" /* defines: dyn_tok_nfc, dyn_byte_buf */

static size_t put_utf8(uint32_t cp, char *o)
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

static void test_nfc_vs_python(void **state)
{
    (void)state;
    char in_path[64], ref_path[64], cmd[512];
    snprintf(in_path, sizeof in_path, "/tmp/dyn_nfc_in.%d", (int)getpid());
    snprintf(ref_path, sizeof ref_path, "/tmp/dyn_nfc_ref.%d", (int)getpid());
    FILE *fp = fopen(in_path, "w");
    assert_non_null(fp);
    char u[8];
    /* every code point, 128 to a line */
    for (uint32_t cp = 0, k = 0; cp <= 0x10FFFF; cp++) {
        if ((cp >= 0xD800 && cp <= 0xDFFF) || cp == '\n' || cp == '\r') continue;
        fwrite(u, 1, put_utf8(cp, u), fp);
        if (++k % 128 == 0) fputc('\n', fp);
    }
    fputc('\n', fp);
    static const uint32_t pool[] = {
        'a', 'e', 'o', 'u', 'A', 'E', 'O', 'U', 'n', 's', 0xE9, 0xC5, 0x1E0B, 0x1E63,   /* bases, precomposed */
        0x300, 0x301, 0x302, 0x303, 0x308, 0x30A, 0x323, 0x327, 0x328, 0x31B, 0x345, /* marks: 230, 220, 202, 216, 240 */
        0x1100, 0x1101, 0x1112, 0x1161, 0x1175, 0x11A8, 0x11C2, 0xAC00, 0xAC01, 0xD7A3, /* Hangul L V T, LV, LVT */
        0x3B1, 0x3C9, 0x313, 0x314, 0x342, 0x1F00,          /* Greek with breathings */
        0x915, 0x93C, 0x958, 0x2126, 0x212B, 0x344, 0x340, 0xF73, 0xF71, 0xF72, /* nukta, exclusions, singletons */
        0x5D0, 0x5B7, 0x5BC, 0xFB2C, 0x1B05, 0x1B35, 0x3099, 0x304B, 0x309A, 0x0627, 0x653, 0x654,
    };
    uint64_t seed = 99;
    for (int l = 0; l < 20000; l++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int n = 1 + (int)((seed >> 33) % 12);
        for (int k = 0; k < n; k++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            fwrite(u, 1, put_utf8(pool[(seed >> 33) % (sizeof pool / sizeof *pool)], u), fp);
        }
        fputc('\n', fp);
    }
    assert_int_equal(fclose(fp), 0);
    const char *src = getenv("DYN_SOURCE_DIR");
    assert_non_null(src);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s/tests/tokenizer/nfc_ref.py' '%s' '%s'", src, in_path, ref_path);
    int rc = system(cmd);
    assert_true(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0);

    FILE *in = fopen(in_path, "r"), *ref = fopen(ref_path, "r");
    assert_non_null(in);
    assert_non_null(ref);
    char *a = NULL, *b = NULL;
    size_t ac = 0, bc = 0;
    ssize_t an;
    dyn_byte_buf out = {0};
    dyn_error err;
    size_t lines = 0, changed = 0;
    while ((an = getline(&a, &ac, in)) >= 0) {
        if (an > 0 && a[an - 1] == '\n') a[--an] = '\0';
        ssize_t bn = getline(&b, &bc, ref);
        assert_true(bn >= 0);
        if (bn > 0 && b[bn - 1] == '\n') b[--bn] = '\0';
        out.n = 0;
        assert_int_equal(dyn_tok_nfc(a, (size_t)an, &out, &err), DYN_OK);
        int same = (size_t)bn == 2 * out.n;
        for (size_t i = 0; same && i < out.n; i++) {
            char two[3];
            snprintf(two, sizeof two, "%02x", (unsigned char)out.data[i]);
            same = memcmp(two, b + 2 * i, 2) == 0;
        }
        if (!same) {
            fprintf(stderr, "line %zu: input ", lines + 1);
            for (ssize_t i = 0; i < an && i < 64; i++) fprintf(stderr, "%02x", (unsigned char)a[i]);
            fprintf(stderr, "\n  python:   %.128s\n  dynapipe: ", b);
            for (size_t i = 0; i < out.n && i < 64; i++) fprintf(stderr, "%02x", (unsigned char)out.data[i]);
            fprintf(stderr, "\n");
            fail();
        }
        changed += (size_t)an != out.n || memcmp(a, out.data, out.n) != 0;
        lines++;
    }
    assert_int_equal(getline(&b, &bc, ref), -1);
    printf("NFC: %zu lines equal to Python's unicodedata (%zu changed by normalization)\n", lines, changed);
    assert_true(changed > 1000); /* the random lines do exercise the algorithm */
    free(a);
    free(b);
    fclose(in);
    fclose(ref);
    dyn_byte_buf_free(&out);
    unlink(in_path);
    unlink(ref_path);
}

int main(void)
{
    if (access("/usr/bin/python3", X_OK) != 0) {
        fprintf(stderr, "test_tokenizer_nfc: skipped: /usr/bin/python3 is not installed\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_nfc_vs_python)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
