/* rng.c — xoshiro256** (Blackman & Vigna) with splitmix64 seeding. */
#include "util/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void dyn_rng_seed(dyn_rng *rng, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

uint64_t dyn_rng_next_u64(dyn_rng *rng)
{
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double dyn_rng_uniform(dyn_rng *rng)
{
    return (double)(dyn_rng_next_u64(rng) >> 11) * 0x1.0p-53;
}

uint64_t dyn_rng_below(dyn_rng *rng, uint64_t n)
{
    /* Reject the top partial block so every residue is equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do {
        x = dyn_rng_next_u64(rng);
    } while (x >= limit);
    return x % n;
}

double dyn_rng_normal(dyn_rng *rng)
{
    double u1 = dyn_rng_uniform(rng);
    double u2 = dyn_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void dyn_rng_skip_normals(dyn_rng *rng, uint64_t n)
{
    /* dyn_rng_normal takes exactly two uniforms, one u64 each. */
    for (uint64_t i = 0; i < 2 * n; i++) (void)dyn_rng_next_u64(rng);
}
