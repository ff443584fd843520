/*
 * backline/sdk/pingpong.h -- how a round trip is timed, paced and checked, shared by the core's
 * bl_bench_rounds and by every bare floor a transport's bench compares it against (the
 * shared-memory floor in bench.c, rdma's and ucx's floor.c), so that framework and floor
 * rounds are measured alike. Header-only: each library that includes it keeps its own
 * calibration (bl_pingpong_measure_ns_per_tick, once).
 *
 * The clock: the CPU's constant-rate counter where there is one (rdtsc, cntvct_el0: sub-ns
 * resolution, a few ns to read), converted with a factor measured against CLOCK_MONOTONIC.
 * clock_gettime costs ~20 ns here and steps in 10 ns, too coarse for 100 ns rounds.
 * Deadlines use bl_pingpong_now_ns (CLOCK_MONOTONIC).
 */
#ifndef BACKLINE_PINGPONG_H
#define BACKLINE_PINGPONG_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define bl_pingpong_relax() _mm_pause()
#elif defined(__aarch64__)
#define bl_pingpong_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define bl_pingpong_relax() ((void)0)
#endif

static inline uint64_t bl_pingpong_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t bl_pingpong_ticks(void) { return __rdtsc(); }
#elif defined(__aarch64__)
static inline uint64_t bl_pingpong_ticks(void) {
    uint64_t v;
    __asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v));
    return v;
}
#else
static inline uint64_t bl_pingpong_ticks(void) { return bl_pingpong_now_ns(); }
#endif

/* Nanoseconds per tick, measured over 2 ms (the factor is then good to ~1e-5). */
static inline double bl_pingpong_measure_ns_per_tick(void) {
    uint64_t n0 = bl_pingpong_now_ns(), t0 = bl_pingpong_ticks(), n1, t1;
    do {
        n1 = bl_pingpong_now_ns();
        t1 = bl_pingpong_ticks();
    } while (n1 - n0 < 2000000);
    return t1 > t0 ? (double)(n1 - n0) / (double)(t1 - t0) : 1.0;
}

/* Nanoseconds since `start` (ticks). A thread that migrates between two reads can see the
 * counter step back on a VM whose vCPUs' TSCs are not in sync: that interval reads 0, not
 * the conversion of a wrapped-around difference. */
static inline uint64_t bl_pingpong_ns_since(uint64_t start, double ns_per_tick) {
    uint64_t now = bl_pingpong_ticks();
    return now > start ? (uint64_t)((double)(now - start) * ns_per_tick + 0.5) : 0;
}

/* The ticks in `ns` nanoseconds (at least 1): how often a spinning wait looks at its deadline. */
static inline uint64_t bl_pingpong_ticks_for_ns(uint64_t ns, double ns_per_tick) {
    uint64_t t = (uint64_t)((double)ns / ns_per_tick);
    return t ? t : 1;
}

/* Fibonacci LFSR, taps 32, 22, 2, 1 (x^32 + x^22 + x^2 + x + 1), as in the paper's pacer. */
static inline uint32_t bl_pingpong_lfsr_next(uint32_t l) {
    return (l << 1) | (((l >> 31) ^ (l >> 21) ^ (l >> 1) ^ l) & 1u);
}

/* The random-delayed cadence (BL_CADENCE_RANDOM_DELAYED): before each round, step the LFSR
 * and spin gap_base_ns + (lfsr & gap_span_mask). */
static inline void bl_pingpong_wait_gap(uint32_t *lfsr, uint64_t gap_base_ns, uint64_t gap_span_mask) {
    *lfsr = bl_pingpong_lfsr_next(*lfsr);
    uint64_t until = bl_pingpong_now_ns() + gap_base_ns + (*lfsr & gap_span_mask);
    while (bl_pingpong_now_ns() < until) bl_pingpong_relax();
}

/* Round i's echo payload: byte b is byte (b % 8) of i, little-endian, xor (b / 8), so every
 * round and every 8-byte lane differ and a stale or shifted reply is caught. */
static inline void bl_pingpong_fill(uint8_t *p, uint32_t bytes, uint64_t i) {
    for (uint32_t b = 0; b < bytes; ++b) p[b] = (uint8_t)(i >> (8 * (b % 8))) ^ (uint8_t)(b / 8);
}

/* A 64-bit value in little-endian byte order (a floor's round counter on the wire). */
static inline uint64_t bl_pingpong_le64(uint64_t v) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(v);
#else
    return v;
#endif
}

#endif
