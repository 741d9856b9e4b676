/* rng.h — deterministic random numbers: xoshiro256** seeded by splitmix64.
 * Every random choice in dynapipe draws from an explicit dyn_rng the caller
 * owns, so the same seed gives the same plans and the same losses. */
#ifndef DYN_UTIL_RNG_H
#define DYN_UTIL_RNG_H

#include <stdint.h>

typedef struct dyn_rng {
    uint64_t s[4];
} dyn_rng;

void dyn_rng_seed(dyn_rng *rng, uint64_t seed);
uint64_t dyn_rng_next_u64(dyn_rng *rng);
/* Uniform in [0, 1) with 53 random bits. */
double dyn_rng_uniform(dyn_rng *rng);
/* Uniform integer in [0, n); n > 0. Unbiased (rejection). */
uint64_t dyn_rng_below(dyn_rng *rng, uint64_t n);
/* Standard normal (Box-Muller; one value per call, no cached state). */
double dyn_rng_normal(dyn_rng *rng);
/* Advance rng exactly as n calls of dyn_rng_normal would, without computing
 * the values (each call draws two u64s): how a stage-only model skips the
 * other stages' initial values of the whole model's stream. */
void dyn_rng_skip_normals(dyn_rng *rng, uint64_t n);

#endif
