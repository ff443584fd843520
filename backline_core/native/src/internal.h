/* Helpers shared by the runtime's C files (not part of the ABI). */
#ifndef BACKLINE_INTERNAL_H
#define BACKLINE_INTERNAL_H

#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define bl_cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define bl_cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define bl_cpu_relax() ((void)0)
#endif

#define BL_LIKELY(x) __builtin_expect(!!(x), 1)
#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline uint64_t bl__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline uint64_t bl__load_acquire(const uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void bl__store_release(uint64_t *p, uint64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Round-trip timestamps: the CPU's constant-rate counter where there is one (sub-ns
 * resolution, a few ns to read), converted with a factor calibrated once against
 * CLOCK_MONOTONIC. clock_gettime here costs ~20 ns and steps in 10 ns, too coarse for
 * 100 ns rounds. Deadlines keep using bl__now(). */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static inline uint64_t bl__ticks(void) { return __rdtsc(); }
#elif defined(__aarch64__)
static inline uint64_t bl__ticks(void) {
    uint64_t v;
    __asm__ __volatile__("isb; mrs %0, cntvct_el0" : "=r"(v));
    return v;
}
#else
static inline uint64_t bl__ticks(void) { return bl__now(); }
#endif

extern double bl__ns_per_tick;
void bl__calibrate_ticks(void);
static inline uint64_t bl__ticks_to_ns(uint64_t ticks) { return (uint64_t)((double)ticks * bl__ns_per_tick + 0.5); }
/* Nanoseconds since `start` (ticks). A thread that migrates between two reads can see the
 * counter step back on a VM whose vCPUs' TSCs are not in sync: that interval reads 0, not
 * the conversion of a wrapped-around difference. */
static inline uint64_t bl__ns_since(uint64_t start) {
    uint64_t now = bl__ticks();
    return now > start ? bl__ticks_to_ns(now - start) : 0;
}

int bl__pin_current_thread(int cpu);

/* Set the calling thread's error text (bl_last_error) and return `code`. */
int32_t bl__fail(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
