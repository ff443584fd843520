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

int bl__pin_current_thread(int cpu);

#endif
