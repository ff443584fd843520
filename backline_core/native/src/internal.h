/* Helpers shared by the runtime's C files (not part of the ABI). */
#ifndef BACKLINE_INTERNAL_H
#define BACKLINE_INTERNAL_H

#include <backline/sdk/pingpong.h>

#include <stdint.h>
#include <time.h>

#define bl_cpu_relax() bl_pingpong_relax()

#define BL_LIKELY(x) __builtin_expect(!!(x), 1)
#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)

static inline uint64_t bl__now(void) { return bl_pingpong_now_ns(); }

static inline uint64_t bl__load_acquire(const uint64_t *p) {
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static inline void bl__store_release(uint64_t *p, uint64_t v) {
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

/* Round-trip timestamps: backline/sdk/pingpong.h's clock, so the floors are timed alike.
 * Deadlines keep using bl__now(). */
static inline uint64_t bl__ticks(void) { return bl_pingpong_ticks(); }

extern double bl__ns_per_tick;
void bl__calibrate_ticks(void);
static inline uint64_t bl__ticks_to_ns(uint64_t ticks) { return (uint64_t)((double)ticks * bl__ns_per_tick + 0.5); }
static inline uint64_t bl__ns_since(uint64_t start) { return bl_pingpong_ns_since(start, bl__ns_per_tick); }

int bl__pin_current_thread(int cpu);

/* Set the calling thread's error text (bl_last_error) and return `code`. */
int32_t bl__fail(int32_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
