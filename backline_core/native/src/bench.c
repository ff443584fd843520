/* Native round drivers for `backline bench`: the framework path and the bare floor. */
#define _GNU_SOURCE
#include "backline/bench.h"
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Fibonacci LFSR, taps 32, 22, 2, 1 (x^32 + x^22 + x^2 + x + 1), as in the paper's pacer. */
BL_API uint32_t bl_lfsr_next(uint32_t l) {
    uint32_t bit = ((l >> 31) ^ (l >> 21) ^ (l >> 1) ^ l) & 1u;
    return (l << 1) | bit;
}

static inline void wait_gap(bl_bench_config *cfg) {
    if (cfg->cadence != BL_CADENCE_RANDOM_DELAYED) return;
    cfg->lfsr = bl_lfsr_next(cfg->lfsr);
    uint64_t until = bl__now() + cfg->gap_base_ns + (cfg->lfsr & cfg->gap_span_mask);
    while (bl__now() < until) bl_cpu_relax();
}

/* The payload of round i: its index (little-endian) repeated, or a table entry. */
static inline const uint8_t *payload_for(const bl_bench_config *cfg, uint64_t i, uint8_t *scratch) {
    if (cfg->payloads) return cfg->payloads + (size_t)(i % cfg->n_payloads) * cfg->payload_bytes;
    for (uint32_t b = 0; b < cfg->payload_bytes; ++b) scratch[b] = (uint8_t)(i >> (8 * (b % 8))) ^ (uint8_t)(b / 8);
    return scratch;
}

static inline int reply_ok(const bl_bench_config *cfg, uint64_t i, const uint8_t *sent, const uint8_t *got, uint32_t len) {
    if (cfg->payloads) {
        return len == cfg->expected_bytes &&
               memcmp(got, cfg->expected + (size_t)(i % cfg->n_payloads) * cfg->expected_bytes, len) == 0;
    }
    return len == cfg->payload_bytes && memcmp(got, sent, len) == 0;
}

BL_API int32_t bl_bench_rounds(bl_session *s, bl_bench_config *cfg, uint64_t *rtt_ns, bl_bench_result *res) {
    uint8_t *scratch = malloc(cfg->payload_bytes + 1);
    if (!scratch) return BL_ENOMEM;
    memset(res, 0, sizeof *res);
    for (uint64_t k = 0; k < cfg->rounds; ++k) {
        uint64_t i = cfg->first_round + k;
        const uint8_t *p = payload_for(cfg, i, scratch);
        wait_gap(cfg);
        const uint8_t *reply = NULL;
        uint32_t len = 0;
        int32_t rc = bl_stage_payload(s, p, cfg->payload_bytes, cfg->decoder_id);
        if (rc == BL_OK) rc = bl_post(s);
        if (rc == BL_OK) rc = bl_reply_slot(s, &reply, &len);
        if (rc != BL_OK) {
            res->lost++;
            if (!res->first_error) res->first_error = rc;
            rtt_ns[k] = 0;
            if (rc == BL_EINVAL || rc == BL_ESTATE) break; /* nothing later can succeed */
            continue;
        }
        rtt_ns[k] = bl_last_rtt_ns(s);
        if (!reply_ok(cfg, i, p, reply, len)) res->mismatched++;
        res->done++;
    }
    free(scratch);
    return res->first_error;
}

/* ---- the floor: a bare seq-last ping-pong over two cache-line-aligned buffers ---- */

struct floor_pair {
    uint64_t req_seq __attribute__((aligned(64)));
    uint8_t req[4096 - 8];
    uint64_t rep_seq __attribute__((aligned(64)));
    uint8_t rep[4096 - 8];
    volatile int stop __attribute__((aligned(64)));
    uint32_t bytes;
    int cpu;
};

static void *floor_responder(void *arg) {
    struct floor_pair *f = arg;
    uint64_t next = 1;
    while (!f->stop) {
        if (bl__load_acquire(&f->req_seq) != next) {
            bl_cpu_relax();
            continue;
        }
        memcpy(f->rep, f->req, f->bytes);
        bl__store_release(&f->rep_seq, next);
        ++next;
    }
    return NULL;
}

BL_API int32_t bl_bench_floor(bl_bench_config *cfg, int32_t responder_cpu, uint64_t *rtt_ns, bl_bench_result *res) {
    memset(res, 0, sizeof *res);
    if (cfg->payload_bytes > sizeof(((struct floor_pair *)0)->req)) return BL_ETOOBIG;
    struct floor_pair *f = aligned_alloc(64, sizeof *f);
    if (!f) return BL_ENOMEM;
    memset(f, 0, sizeof *f);
    f->bytes = cfg->payload_bytes;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (responder_cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(responder_cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
    }
    pthread_t t;
    int prc = pthread_create(&t, &attr, floor_responder, f);
    pthread_attr_destroy(&attr);
    if (prc) {
        free(f);
        return BL_EBACKEND;
    }
    uint8_t *scratch = malloc(cfg->payload_bytes + 1);
    for (uint64_t k = 0; k < cfg->rounds; ++k) {
        uint64_t i = cfg->first_round + k, seq = k + 1;
        const uint8_t *p = payload_for(cfg, i, scratch);
        wait_gap(cfg);
        memcpy(f->req, p, cfg->payload_bytes);
        uint64_t t0 = bl__now(); /* after staging, like the framework's post timestamp */
        bl__store_release(&f->req_seq, seq);
        uint64_t deadline = 0;
        for (uint32_t spins = 0; bl__load_acquire(&f->rep_seq) != seq;) {
            bl_cpu_relax();
            if ((++spins & 0xffff) == 0) {
                uint64_t now = bl__now();
                if (!deadline) deadline = now + 1000000000ull;
                else if (now > deadline) break;
            }
        }
        if (bl__load_acquire(&f->rep_seq) != seq) {
            res->lost++;
            res->first_error = BL_ETIMEOUT;
            break;
        }
        rtt_ns[k] = bl__now() - t0;
        if (memcmp(f->rep, p, cfg->payload_bytes) != 0) res->mismatched++;
        res->done++;
    }
    f->stop = 1;
    pthread_join(t, NULL);
    free(scratch);
    free(f);
    return res->first_error;
}
