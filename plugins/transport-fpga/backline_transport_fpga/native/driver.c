/*
 * driver.c -- the HWHS engine and ERNIC queue-pair driver (driver.h). Everything it does to the
 * engine is a 32-bit volatile load or store in the register window, or a write into the DMA
 * memory it was given; time is CLOCK_MONOTONIC. Portable C: it builds for the board's aarch64
 * cores as for this host.
 *
 * Waiting: every wait loop has an absolute deadline (BL_ETIMEOUT past it, naming what it waited
 * for) and, about once a millisecond, asks hwhs_alive whether the engine is still there
 * (BL_EPEER with the model's pid and how long its heartbeat has stood still).
 *
 * Request registers. The engine model is a process polling shared memory: it cannot see a
 * register written twice with the same value, nor a pulse. So, in this project's convention
 * with the model (MODEL; a board's registers take the reference's plain values, and the driver
 * then does not wait for them to clear):
 *   - WQE_COMMIT = index | HWHS_REQ_COMMIT, RING_RESET = index | HWHS_REQ_COMMIT,
 *     QPCTX_COMMIT = ctx | HWHS_REQ_QPCTX (| HWHS_QPCTX_REBIND): the model clears the register
 *     to 0 once it has acted, and the driver waits for that 0;
 *   - W1P registers (CTRL, DEMO_CTRL, ERNIC MR_COMMIT) are consumed: the model zeroes them once
 *     it has acted;
 *   - the model publishes the effect of a request (STATUS, DEMO_STS, MR_STATUS, TRACE_CNT) BEFORE
 *     it clears or zeroes the request register, so a driver that has seen the 0 reads the new
 *     state, never the one before the request.
 */
#define _GNU_SOURCE
#include "driver.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- the model's request conventions (see above); change them here ---- */
#define HWHS_MR_COMMIT_GO 1u        /* ERNIC MR_COMMIT value */
/* CQ_DB_ADDR in hardware-handshake mode: the reference's notes write "qp + 1". */
#define ERNIC_CQ_DB_ADDR_OF(qpn) ((qpn) + 1u)

/* How long a configuration request (a commit, a reset, a pulse) may take the model when the call
 * has no deadline of its own; a dead model is found sooner, by its heartbeat. */
#define HWHS_CONFIG_TIMEOUT_NS 5000000000ull
#define HWHS_ALIVE_EVERY_NS 1000000ull   /* heartbeat check in wait loops */
#define HWHS_HEARTBEAT_NS 1000000000ull  /* a heartbeat that stands still this long: the model is gone */

#define STATUS_ERR (HWHS_STATUS_TIMEOUT | HWHS_STATUS_AXI_ERR)

/* ---- small things ---- */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#else
    __asm__ volatile("" ::: "memory");
#endif
}

/* Order this process's earlier writes (DMA memory, registers) before a register store, and a
 * register load before later reads (of DMA memory the engine wrote). On aarch64 over the outer
 * shareable domain (a device write must follow normal-memory writes, as Linux's writel);
 * x86's stores and loads are already ordered, only the compiler must not move them. */
static inline void io_wmb(void) {
#if defined(__aarch64__)
    __asm__ volatile("dmb osh" ::: "memory");
#elif defined(__x86_64__) || defined(__i386__)
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static inline void io_rmb(void) {
#if defined(__aarch64__)
    __asm__ volatile("dmb oshld" ::: "memory");
#elif defined(__x86_64__) || defined(__i386__)
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
#else
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

static inline uint32_t le32(uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap32(v);
#else
    return v;
#endif
}

static int32_t fail(char *err, size_t n, int32_t rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int32_t fail(char *err, size_t n, int32_t rc, const char *fmt, ...) {
    if (err && n) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, n, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

uint64_t hwhs_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint32_t hwhs_rd(const volatile uint8_t *block, uint32_t off) {
    uint32_t v = *(const volatile uint32_t *)(const volatile void *)(block + off);
    io_rmb();
    return le32(v);
}

void hwhs_wr(volatile uint8_t *block, uint32_t off, uint32_t v) {
    io_wmb();
    *(volatile uint32_t *)(volatile void *)(block + off) = le32(v);
}

static inline uint32_t rd(hwhs_drv *d, uint32_t off) { return hwhs_rd(d->w.regs, off); }
static inline void wr(hwhs_drv *d, uint32_t off, uint32_t v) { hwhs_wr(d->w.regs, off, v); }
static inline void wr64(hwhs_drv *d, uint32_t lo, uint64_t v) {
    wr(d, lo, (uint32_t)v);
    wr(d, lo + 4, (uint32_t)(v >> 32));
}
static inline volatile uint8_t *qp_block(hwhs_drv *d, uint32_t qpn) {
    return d->w.ernic + ERNIC_QP_BLOCK + (size_t)(qpn - 1) * ERNIC_QP_STRIDE;
}
static inline uint32_t info32(hwhs_drv *d, uint32_t off) { return d->w.info ? hwhs_rd(d->w.info, off) : 0; }
static inline int is_model(const hwhs_drv *d) { return d->w.info != NULL; }

/* A NUL-terminated text of at most `len` bytes at `block + off`, read a word at a time, made printable. */
static void read_text(const volatile uint8_t *block, uint32_t off, uint32_t len, char *out, size_t n) {
    if (!n) return;
    size_t o = 0;
    for (uint32_t i = 0; i < len && o + 1 < n; i += 4) {
        uint32_t w = hwhs_rd(block, off + i);
        for (int b = 0; b < 4 && o + 1 < n; ++b) {
            char c = (char)(w >> (8 * b));
            if (!c) goto done;
            out[o++] = c >= 32 && c < 127 ? c : '?';
        }
    }
done:
    out[o] = 0;
}

static void model_error_text(hwhs_drv *d, char *out, size_t n) {
    if (d->w.info) read_text(d->w.info, HWHS_INFO_ERROR, 256, out, n);
    else if (n) out[0] = 0;
}

static const char *state_name(uint32_t s) {
    static const char *const names[] = {"IDLE", "WQE_POST", "RING_SQ", "WAIT_RPL", "POLL_RPL",
                                        "JOIN", "DAT_TX",   "NEXT",    "GAP"};
    s &= HWHS_STATUS_STATE_MASK;
    return s < sizeof names / sizeof names[0] ? names[s] : "?";
}

static const char *err_code_name(uint32_t code) {
    switch (code) {
    case HWHS_E_NONE: return "no error recorded";
    case HWHS_E_NO_WQE: return "start with no WQE committed";
    case HWHS_E_NO_QPCTX: return "the WQE's QP context was never committed";
    case HWHS_E_QP_NOT_HWHS: return "the ERNIC QP is not in hardware-handshake mode";
    case HWHS_E_BUSY: return "start or configuration while busy";
    case HWHS_E_ADDRESS: return "an address or length outside DMA memory, or a bad ring setting";
    case HWHS_E_SEQ: return "the request slot's sequence number is not ROUND_CNT + 1";
    case HWHS_E_REPLY_TIMEOUT: return "no reply within REPLY_TO";
    case HWHS_E_WQE_FAILED: return "the ERNIC completed the WQE with an error";
    case HWHS_E_CONFIG: return "a register value out of range";
    case HWHS_E_TRACE_ARMED: return "a paced run started while the trace was held clear";
    default: return "unknown error code";
    }
}

void hwhs_engine_error(hwhs_drv *d, char *out, size_t n) {
    uint32_t code = rd(d, HWHS_ERR_CODE);
    char text[260];
    model_error_text(d, text, sizeof text);
    if (text[0]) snprintf(out, n, "ERR_CODE %u (%s): %s", code, err_code_name(code), text);
    else snprintf(out, n, "ERR_CODE %u (%s)", code, err_code_name(code));
}

/* ---- waiting ---- */

typedef struct waiter {
    hwhs_drv *d;
    uint64_t start, deadline, next_alive;
} waiter;

static waiter wait_begin(hwhs_drv *d, uint64_t deadline) {
    uint64_t now = hwhs_now_ns();
    waiter w = {d, now, deadline, now + HWHS_ALIVE_EVERY_NS};
    return w;
}

/* One turn of a wait: 0 to go on; BL_EPEER (err written: the engine is gone) or BL_ETIMEOUT (err
 * NOT written: the caller says what it waited for). */
static int32_t wait_turn(waiter *w, char *err, size_t n) {
    cpu_relax();
    uint64_t now = hwhs_now_ns();
    if (now >= w->next_alive) {
        w->next_alive = now + HWHS_ALIVE_EVERY_NS;
        if (!hwhs_alive(w->d, err, n)) return BL_EPEER;
    }
    if (now > w->deadline) return BL_ETIMEOUT;
    return 0;
}

static unsigned long long waited_ms(const waiter *w) {
    uint64_t now = hwhs_now_ns();
    return (unsigned long long)((now > w->start ? now - w->start : 0) / 1000000ull);
}

/* Wait until the model has consumed (zeroed) request register `off` of `block`. */
static int32_t wait_cleared(hwhs_drv *d, volatile uint8_t *block, uint32_t off, const char *what, uint64_t deadline,
                            char *err, size_t n) {
    if (!is_model(d)) return BL_OK;
    waiter w = wait_begin(d, deadline);
    for (;;) {
        if (hwhs_rd(block, off) == 0) return BL_OK;
        int32_t rc = wait_turn(&w, err, n);
        if (rc == BL_ETIMEOUT)
            return fail(err, n, rc, "the engine did not take %s within %llu ms (the register still reads 0x%x)", what,
                        waited_ms(&w), hwhs_rd(block, off));
        if (rc) return rc;
    }
}

/* Wait until the engine's FSM is IDLE and not busy. */
static int32_t wait_idle(hwhs_drv *d, const char *after, uint64_t deadline, char *err, size_t n) {
    waiter w = wait_begin(d, deadline);
    for (;;) {
        uint32_t s = rd(d, HWHS_STATUS);
        if (!(s & HWHS_STATUS_BUSY) && (s & HWHS_STATUS_STATE_MASK) == HWHS_S_IDLE) return BL_OK;
        int32_t rc = wait_turn(&w, err, n);
        if (rc == BL_ETIMEOUT)
            return fail(err, n, rc, "the engine did not return to IDLE after %s within %llu ms (STATUS 0x%x, state %s)",
                        after, waited_ms(&w), s, state_name(s));
        if (rc) return rc;
    }
}

/* ---- the engine ---- */

int hwhs_alive(hwhs_drv *d, char *err, size_t n) {
    if (!d->w.info) return 1;
    uint32_t beat = hwhs_rd(d->w.info, HWHS_INFO_ALIVE);
    uint64_t now = hwhs_now_ns();
    uint32_t last = __atomic_load_n(&d->last_alive, __ATOMIC_RELAXED);
    uint64_t seen = __atomic_load_n(&d->alive_seen_ns, __ATOMIC_RELAXED);
    if (beat != last || !seen) {
        __atomic_store_n(&d->last_alive, beat, __ATOMIC_RELAXED);
        __atomic_store_n(&d->alive_seen_ns, now, __ATOMIC_RELAXED);
        return 1;
    }
    if (now - seen <= HWHS_HEARTBEAT_NS) return 1;
    fail(err, n, BL_EPEER, "the engine model (pid %u) stopped answering: its heartbeat has not moved for %llu ms",
         hwhs_rd(d->w.info, HWHS_INFO_PID), (unsigned long long)((now - seen) / 1000000ull));
    return 0;
}

int32_t hwhs_open(hwhs_drv *d, const hwhs_window *w, char *err, size_t n) {
    memset(d, 0, sizeof *d);
    if (!w || !w->regs || !w->ernic || !w->mem)
        return fail(err, n, BL_EINVAL, "hwhs_open: the window has no register block, ERNIC space or DMA memory");
    d->w = *w;
    if (w->info) {
        uint32_t magic = hwhs_rd(w->info, HWHS_INFO_MAGIC), version = hwhs_rd(w->info, HWHS_INFO_VERSION);
        if (magic != HWHS_MAGIC)
            return fail(err, n, BL_EINVAL, "the window at %p is not an engine model's (magic 0x%08x, not 0x%08x)",
                        (const void *)w->regs, magic, (unsigned)HWHS_MAGIC);
        if (version != HWHS_MODEL_VERSION)
            return fail(err, n, BL_EABI, "the engine model is version %u, this driver version %u: run both from the "
                        "same backline-transport-fpga", version, (unsigned)HWHS_MODEL_VERSION);
        d->last_alive = hwhs_rd(w->info, HWHS_INFO_ALIVE);
        d->alive_seen_ns = hwhs_now_ns();
    }
    return hwhs_soft_reset(d, hwhs_now_ns() + HWHS_CONFIG_TIMEOUT_NS, err, n);
}

int32_t hwhs_alloc(hwhs_drv *d, uint64_t bytes, uint64_t align, hwhs_buf *out, char *err, size_t n) {
    if (!bytes || !is_pow2(align))
        return fail(err, n, BL_EINVAL, "hwhs_alloc: %llu bytes aligned to %llu (need bytes > 0 and a power-of-two "
                    "alignment)", (unsigned long long)bytes, (unsigned long long)align);
    uint64_t at = (d->mem_used + align - 1) & ~(align - 1);
    if (at < d->mem_used || at > d->w.mem_bytes || bytes > d->w.mem_bytes - at)
        return fail(err, n, BL_ENOMEM, "DMA memory: %llu bytes asked, %llu of %llu left (start the engine model with "
                    "more: --mem-mib)", (unsigned long long)bytes,
                    (unsigned long long)(d->w.mem_bytes > d->mem_used ? d->w.mem_bytes - d->mem_used : 0),
                    (unsigned long long)d->w.mem_bytes);
    out->bus = d->w.mem_bus + at;
    out->ptr = d->w.mem + at;
    out->bytes = bytes;
    memset(out->ptr, 0, bytes); /* a window outlives sessions: nothing of the last one's may show */
    d->mem_used = at + bytes;
    return BL_OK;
}

/* Whether [bus, bus + bytes) lies in DMA memory. */
static int in_mem(const hwhs_drv *d, uint64_t bus, uint64_t bytes) {
    return bus >= d->w.mem_bus && bus - d->w.mem_bus <= d->w.mem_bytes && bytes <= d->w.mem_bytes - (bus - d->w.mem_bus);
}

static int32_t out_of_mem(const hwhs_drv *d, const char *what, uint64_t bus, uint64_t bytes, char *err, size_t n) {
    return fail(err, n, BL_EINVAL, "%s [0x%llx, +%llu) is not inside DMA memory [0x%llx, +%llu)", what,
                (unsigned long long)bus, (unsigned long long)bytes, (unsigned long long)d->w.mem_bus,
                (unsigned long long)d->w.mem_bytes);
}

/* ---- ERNIC ---- */

int32_t hwhs_mr_register(hwhs_drv *d, uint64_t bus, uint64_t bytes, hwhs_mr *out, uint64_t deadline, char *err,
                         size_t n) {
    if (!bytes || !in_mem(d, bus, bytes)) return out_of_mem(d, "memory registration", bus, bytes, err, n);
    volatile uint8_t *g = d->w.ernic;
    hwhs_wr(g, ERNIC_MR_ADDR_LO, (uint32_t)bus);
    hwhs_wr(g, ERNIC_MR_ADDR_HI, (uint32_t)(bus >> 32));
    hwhs_wr(g, ERNIC_MR_LEN_LO, (uint32_t)bytes);
    hwhs_wr(g, ERNIC_MR_LEN_HI, (uint32_t)(bytes >> 32));
    hwhs_wr(g, ERNIC_MR_COMMIT, HWHS_MR_COMMIT_GO);
    waiter w = wait_begin(d, deadline);
    uint32_t st;
    for (;;) {
        st = hwhs_rd(g, ERNIC_MR_STATUS);
        if ((!is_model(d) || hwhs_rd(g, ERNIC_MR_COMMIT) == 0) && (st == ERNIC_MR_DONE || st == ERNIC_MR_FAILED))
            break;
        int32_t rc = wait_turn(&w, err, n);
        if (rc == BL_ETIMEOUT)
            return fail(err, n, rc, "the ERNIC did not register [0x%llx, +%llu) within %llu ms (MR_STATUS %u)",
                        (unsigned long long)bus, (unsigned long long)bytes, waited_ms(&w), st);
        if (rc) return rc;
    }
    if (st == ERNIC_MR_FAILED) {
        char text[260];
        model_error_text(d, text, sizeof text);
        return fail(err, n, BL_EBACKEND, "the ERNIC could not register [0x%llx, +%llu): %s", (unsigned long long)bus,
                    (unsigned long long)bytes, text[0] ? text : "(no reason given)");
    }
    out->lkey = hwhs_rd(g, ERNIC_MR_LKEY);
    out->rkey = hwhs_rd(g, ERNIC_MR_RKEY);
    out->remote_base = (uint64_t)hwhs_rd(g, ERNIC_MR_REMOTE_LO) | (uint64_t)hwhs_rd(g, ERNIC_MR_REMOTE_HI) << 32;
    return BL_OK;
}

static void gid_text(const uint8_t g[16], char *out, size_t n) {
    size_t o = 0;
    for (int i = 0; i < 16 && o < n; i += 2)
        o += (size_t)snprintf(out + o, n - o, "%s%02x%02x", i ? ":" : "", g[i], g[i + 1]);
}

int32_t hwhs_qp_setup(hwhs_drv *d, const hwhs_qp_config *c, hwhs_qp_local *local, uint64_t deadline, char *err,
                      size_t n) {
    if (c->qpn < 1 || c->qpn > HWHS_QP_CONTEXTS)
        return fail(err, n, BL_EINVAL, "ERNIC QP %u: give 1 to %u", c->qpn, (unsigned)HWHS_QP_CONTEXTS);
    if (c->sq_depth < 1 || c->sq_depth > 65535 || c->rq_depth < 1 || c->rq_depth > 65535)
        return fail(err, n, BL_EINVAL, "ERNIC QP %u: SQ depth %u and RQ depth %u must be 1 to 65535", c->qpn,
                    c->sq_depth, c->rq_depth);
    if (c->sq_bus % ERNIC_WQE_BYTES || !in_mem(d, c->sq_bus, (uint64_t)c->sq_depth * ERNIC_WQE_BYTES))
        return out_of_mem(d, "the SQ ring (64-byte aligned)", c->sq_bus, (uint64_t)c->sq_depth * ERNIC_WQE_BYTES, err,
                          n);
    if (c->cq_bus && (c->cq_bus % 4 || !in_mem(d, c->cq_bus, (uint64_t)c->sq_depth * 4)))
        return out_of_mem(d, "the CQ ring", c->cq_bus, (uint64_t)c->sq_depth * 4, err, n);
    if (c->path_mtu < 1 || c->path_mtu > 5)
        return fail(err, n, BL_EINVAL, "path MTU code %u: give 1 (256) to 5 (4096)", c->path_mtu);
    if (c->dest_qpn > 0xffffff) return fail(err, n, BL_EINVAL, "destination QP %u is not a 24-bit number", c->dest_qpn);
    volatile uint8_t *q = qp_block(d, c->qpn);
    int32_t rc;
    /* A QP the last session left enabled (a controller that died) is taken down first. */
    if (hwhs_rd(q, ERNIC_QP_CONF) != 0 || (is_model(d) && hwhs_rd(q, ERNIC_QP_STATE) != ERNIC_QPS_RESET)) {
        hwhs_wr(q, ERNIC_QP_CONF, 0);
        if (is_model(d)) {
            waiter w = wait_begin(d, deadline);
            for (;;) {
                uint32_t st = hwhs_rd(q, ERNIC_QP_STATE);
                if (st == ERNIC_QPS_RESET) break;
                if ((rc = wait_turn(&w, err, n)) == BL_ETIMEOUT)
                    return fail(err, n, rc, "ERNIC QP %u did not return to reset within %llu ms after it was disabled "
                                "(QP_STATE %u)", c->qpn, waited_ms(&w), st);
                if (rc) return rc;
            }
        }
    }
    hwhs_wr(q, ERNIC_SNDQ_BUF_BASE_LO, (uint32_t)c->sq_bus);
    hwhs_wr(q, ERNIC_SNDQ_BUF_BASE_HI, (uint32_t)(c->sq_bus >> 32));
    hwhs_wr(q, ERNIC_CQ_BUF_BASE_LO, (uint32_t)c->cq_bus);
    hwhs_wr(q, ERNIC_CQ_BUF_BASE_HI, (uint32_t)(c->cq_bus >> 32));
    uint32_t depth = c->sq_depth | c->rq_depth << 16;
    hwhs_wr(q, ERNIC_QUEUE_DEPTH, depth);
    hwhs_wr(q, ERNIC_SQ_PSN, c->sq_psn & 0xffffff);
    hwhs_wr(q, ERNIC_RQ_PSN, c->rq_psn & 0xffffff);
    hwhs_wr(q, ERNIC_DEST_QP_CONF, c->dest_qpn);
    for (int i = 0; i < 4; ++i) {
        const uint8_t *b = c->dest_gid + 4 * i;
        hwhs_wr(q, ERNIC_DEST_GID + 4u * (uint32_t)i,
                (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    }
    /* Enable with the hardware handshake still disabled (the PS's view of the QP), as the reference does. */
    uint32_t conf = ERNIC_QP_ENABLE | ERNIC_QP_HW_HSK_DIS | (c->path_mtu - 1) << ERNIC_QP_PMTU_SHIFT;
    hwhs_wr(q, ERNIC_QP_CONF, conf);
    if (is_model(d)) {
        waiter w = wait_begin(d, deadline);
        for (;;) {
            uint32_t st = hwhs_rd(q, ERNIC_QP_STATE);
            if (st == ERNIC_QPS_READY) break;
            if (st == ERNIC_QPS_ERROR) {
                char text[260], g[48];
                model_error_text(d, text, sizeof text);
                gid_text(c->dest_gid, g, sizeof g);
                return fail(err, n, BL_EBACKEND, "ERNIC QP %u could not connect to QP %u at GID %s: %s", c->qpn,
                            c->dest_qpn, g, text[0] ? text : "(no reason given)");
            }
            if ((rc = wait_turn(&w, err, n)) == BL_ETIMEOUT)
                return fail(err, n, rc, "ERNIC QP %u was not ready within %llu ms (QP_STATE %u)", c->qpn, waited_ms(&w),
                            st);
            if (rc) return rc;
        }
    }
    /* Hardware-handshake mode, in the reference driver's order. */
    hwhs_wr(q, ERNIC_QP_ADV_CONF, hwhs_rd(q, ERNIC_QP_ADV_CONF) | ERNIC_ADV_SW_OVERRIDE);
    hwhs_wr(q, ERNIC_SQ_PROD_IDX, 0);
    hwhs_wr(q, ERNIC_STAT_CUR_SQ_PTR, 0);
    hwhs_wr(q, ERNIC_CQ_HEAD_PTR, 0);
    hwhs_wr(q, ERNIC_CQ_DB_ADDR, ERNIC_CQ_DB_ADDR_OF(c->qpn));
    hwhs_wr(q, ERNIC_QUEUE_DEPTH, depth);
    hwhs_wr(q, ERNIC_QP_CONF, conf & ~(uint32_t)(ERNIC_QP_HW_HSK_DIS | ERNIC_QP_CQE_EN));
    hwhs_wr(q, ERNIC_QP_ADV_CONF, hwhs_rd(q, ERNIC_QP_ADV_CONF) & ~(uint32_t)ERNIC_ADV_SW_OVERRIDE);
    d->qpn = c->qpn;
    if (local) {
        memset(local, 0, sizeof *local);
        local->verbs_qpn = is_model(d) ? hwhs_rd(q, ERNIC_QP_QPN) : c->qpn;
        for (int i = 0; i < 4; ++i) {
            uint32_t v = hwhs_rd(d->w.ernic, ERNIC_LOCAL_GID + 4u * (uint32_t)i);
            for (int b = 0; b < 4; ++b) local->gid[4 * i + b] = (uint8_t)(v >> (8 * b));
        }
        local->active_mtu = hwhs_rd(d->w.ernic, ERNIC_ACTIVE_MTU);
    }
    return BL_OK;
}

void hwhs_qp_disable(hwhs_drv *d, uint32_t qpn) {
    if (qpn < 1 || qpn > HWHS_QP_CONTEXTS) return;
    hwhs_wr(qp_block(d, qpn), ERNIC_QP_CONF, 0);
    if (d->qpn == qpn) d->qpn = 0;
}

int32_t hwhs_sw_post(hwhs_drv *d, uint32_t qpn, const hwhs_qp_config *c, const ernic_wqe *wqe, char *err, size_t n) {
    if (qpn < 1 || qpn > HWHS_QP_CONTEXTS)
        return fail(err, n, BL_EINVAL, "ERNIC QP %u: give 1 to %u", qpn, (unsigned)HWHS_QP_CONTEXTS);
    if (!c->sq_depth || !in_mem(d, c->sq_bus, (uint64_t)c->sq_depth * ERNIC_WQE_BYTES))
        return out_of_mem(d, "the SQ ring", c->sq_bus, (uint64_t)c->sq_depth * ERNIC_WQE_BYTES, err, n);
    volatile uint8_t *q = qp_block(d, qpn);
    uint32_t conf = hwhs_rd(q, ERNIC_QP_CONF);
    if (!(conf & ERNIC_QP_ENABLE))
        return fail(err, n, BL_ESTATE, "ERNIC QP %u is not enabled", qpn);
    if (!(conf & ERNIC_QP_HW_HSK_DIS))
        return fail(err, n, BL_ESTATE, "ERNIC QP %u is in hardware-handshake mode: the engine owns its send queue", qpn);
    uint32_t prod = hwhs_rd(q, ERNIC_SQ_PROD_IDX), taken = hwhs_rd(q, ERNIC_STAT_CUR_SQ_PTR);
    if (prod - taken >= c->sq_depth)
        return fail(err, n, BL_EFULL, "ERNIC QP %u: the send queue is full (%u posted, %u taken, depth %u)", qpn, prod,
                    taken, c->sq_depth);
    uint8_t bytes[ERNIC_WQE_BYTES];
    ernic_wqe_encode(wqe, bytes);
    memcpy(d->w.mem + (c->sq_bus - d->w.mem_bus) + (uint64_t)(prod % c->sq_depth) * ERNIC_WQE_BYTES, bytes,
           sizeof bytes);
    hwhs_wr(q, ERNIC_SQ_PROD_IDX, prod + 1); /* hwhs_wr orders the entry before the doorbell */
    return BL_OK;
}

/* ---- HWHS configuration ---- */

/* A commit-style request: the model's convention (value | req, wait for 0) or the board's (value). */
static int32_t commit(hwhs_drv *d, uint32_t off, uint32_t value, uint32_t req, const char *what, char *err, size_t n) {
    if (!is_model(d)) {
        wr(d, off, value);
        return BL_OK;
    }
    wr(d, off, value | req);
    return wait_cleared(d, d->w.regs, off, what, hwhs_now_ns() + HWHS_CONFIG_TIMEOUT_NS, err, n);
}

static int32_t check_idle(hwhs_drv *d, const char *what, char *err, size_t n) {
    uint32_t s = rd(d, HWHS_STATUS);
    if (s & HWHS_STATUS_BUSY)
        return fail(err, n, BL_ESTATE, "%s: the engine is busy (STATUS 0x%x, state %s); configure it while idle", what,
                    s, state_name(s));
    return BL_OK;
}

int32_t hwhs_qpctx_commit(hwhs_drv *d, uint32_t ctx, uint32_t qpn, uint64_t sq_bus, uint32_t sq_depth, char *err,
                          size_t n) {
    if (ctx >= HWHS_QP_CONTEXTS)
        return fail(err, n, BL_EINVAL, "QP context %u: the engine has %u (0 to %u)", ctx, (unsigned)HWHS_QP_CONTEXTS,
                    (unsigned)HWHS_QP_CONTEXTS - 1);
    if (qpn < 1 || qpn > HWHS_QP_CONTEXTS)
        return fail(err, n, BL_EINVAL, "QP context %u: ERNIC QP %u, give 1 to %u", ctx, qpn, (unsigned)HWHS_QP_CONTEXTS);
    if (sq_depth < 1 || sq_depth > 65535)
        return fail(err, n, BL_EINVAL, "QP context %u: SQ depth %u, give 1 to 65535", ctx, sq_depth);
    if (sq_bus % ERNIC_WQE_BYTES || !in_mem(d, sq_bus, (uint64_t)sq_depth * ERNIC_WQE_BYTES))
        return out_of_mem(d, "the SQ ring (64-byte aligned)", sq_bus, (uint64_t)sq_depth * ERNIC_WQE_BYTES, err, n);
    int32_t rc = check_idle(d, "QP context commit", err, n);
    if (rc) return rc;
    wr(d, HWHS_QP_NUM, qpn);
    wr64(d, HWHS_SQBASE_LO, sq_bus);
    wr(d, HWHS_SQ_DEPTH, sq_depth);
    return commit(d, HWHS_QPCTX_COMMIT, ctx, HWHS_REQ_QPCTX, "the QP context commit (QPCTX_COMMIT)", err, n);
}

int32_t hwhs_wqe_commit(hwhs_drv *d, const hwhs_wqe_config *c, char *err, size_t n) {
    if (c->index >= HWHS_WQE_STORE)
        return fail(err, n, BL_EINVAL, "WQE index %u: the store has %u (0 to %u)", c->index, (unsigned)HWHS_WQE_STORE,
                    (unsigned)HWHS_WQE_STORE - 1);
    if (c->qp_ref >= HWHS_QP_CONTEXTS)
        return fail(err, n, BL_EINVAL, "WQE %u: QP context %u, give 0 to %u", c->index, c->qp_ref,
                    (unsigned)HWHS_QP_CONTEXTS - 1);
    if (c->opcode > 3)
        return fail(err, n, BL_EINVAL, "WQE %u: opcode %u, give 0 (write), 1 (read), 2 (send) or 3 (write with "
                    "immediate)", c->index, c->opcode);
    if (!c->xfer_len || !in_mem(d, c->local_bus, c->xfer_len))
        return out_of_mem(d, "the WQE's local buffer", c->local_bus, c->xfer_len, err, n);
    int32_t rc = check_idle(d, "WQE commit", err, n);
    if (rc) return rc;
    wr(d, HWHS_WQE_OPCODE, c->opcode);
    wr(d, HWHS_WQE_XFER_LEN, c->xfer_len);
    wr(d, HWHS_WQE_RKEY, c->rkey);
    wr64(d, HWHS_WQE_VA_LO, c->remote_addr);
    wr64(d, HWHS_WQE_OFFS_LO, c->local_bus);
    wr(d, HWHS_WQE_WRID, c->wrid);
    wr(d, HWHS_WQE_QP_REF, c->qp_ref);
    return commit(d, HWHS_WQE_COMMIT, c->index, HWHS_REQ_COMMIT, "the WQE commit (WQE_COMMIT)", err, n);
}

int32_t hwhs_ring_setup(hwhs_drv *d, uint32_t index, const hwhs_ring_config *r, uint64_t rounds_before, char *err,
                        size_t n) {
    if (index >= HWHS_WQE_STORE)
        return fail(err, n, BL_EINVAL, "WQE index %u: the store has %u (0 to %u)", index, (unsigned)HWHS_WQE_STORE,
                    (unsigned)HWHS_WQE_STORE - 1);
    if (!is_pow2(r->slots) || r->slots > 65535)
        return fail(err, n, BL_EINVAL, "a ring of %u buffers: the engine's rings have a power of two, at most 32768",
                    r->slots);
    if (r->stride_log2 < 6 || r->stride_log2 > 12)
        return fail(err, n, BL_EINVAL, "ring stride 2^%u bytes: the engine steps by 64 to 4096 bytes (2^6 to 2^12)",
                    r->stride_log2);
    uint64_t slot_bytes = 1ull << r->stride_log2, ring_bytes = (uint64_t)r->slots << r->stride_log2;
    if (!r->frame_bytes || r->frame_bytes % 64 || r->frame_bytes > HWHS_MAX_PAY_LEN || r->frame_bytes > slot_bytes)
        return fail(err, n, BL_EINVAL, "frame of %u bytes: give a multiple of 64 up to %u and the slot (%llu bytes)",
                    r->frame_bytes, (unsigned)HWHS_MAX_PAY_LEN, (unsigned long long)slot_bytes);
    if (r->seq_off % 8 || r->seq_off + 8 > slot_bytes)
        return fail(err, n, BL_EINVAL, "sequence number at byte %u: it must be 8-byte aligned and inside the %llu-byte "
                    "slot", r->seq_off, (unsigned long long)slot_bytes);
    if (r->request_bus % 64 || !in_mem(d, r->request_bus, ring_bytes))
        return out_of_mem(d, "the request ring (64-byte aligned)", r->request_bus, ring_bytes, err, n);
    if (r->reply_bus % 64 || !in_mem(d, r->reply_bus, ring_bytes))
        return out_of_mem(d, "the reply ring (64-byte aligned)", r->reply_bus, ring_bytes, err, n);
    if (r->reply_timeout_cycles > 0xffffffffull)
        return fail(err, n, BL_EINVAL, "reply timeout of %llu cycles: REPLY_TO holds at most %u",
                    (unsigned long long)r->reply_timeout_cycles, 0xffffffffu);
    if (r->flags & ~(uint32_t)(HWHS_FLAG_REPOST_WQE | HWHS_FLAG_COMPLETE_ON_SEND | HWHS_FLAG_REPLY_POLL))
        return fail(err, n, BL_EINVAL, "FLAGS 0x%x: only repost_wqe (1), complete_on_send (4) and reply_poll (8)",
                    r->flags);
    if (rounds_before > 0xfffffffeull)
        return fail(err, n, BL_EINVAL, "%llu rounds before this session: ROUND_CNT is 32 bits",
                    (unsigned long long)rounds_before);
    int32_t rc = check_idle(d, "ring set-up", err, n);
    if (rc) return rc;
    wr(d, HWHS_WQE_RING_CFG, 1u | r->stride_log2 << 8 | r->stride_log2 << 16);
    wr(d, HWHS_WQE_RING_LEN, r->slots);
    if ((rc = commit(d, HWHS_RING_RESET, index, HWHS_REQ_COMMIT, "the ring reset (RING_RESET)", err, n))) return rc;
    wr64(d, HWHS_REPLY_BUF_LO, r->reply_bus);
    wr(d, HWHS_REPLY_RING, r->stride_log2);
    wr(d, HWHS_REPLY_SEQ_OFF, r->seq_off);
    wr64(d, HWHS_DBUF_LO, r->request_bus);
    wr(d, HWHS_PAY_LEN, r->frame_bytes);
    wr(d, HWHS_FLAGS, r->flags);
    wr(d, HWHS_REPLY_TO, (uint32_t)r->reply_timeout_cycles);
    wr(d, HWHS_RUN_WQE_IDX, index);
    wr(d, HWHS_TIMER_QP_SEL, d->qpn);
    wr(d, HWHS_ROUND_CNT, (uint32_t)rounds_before);
    wr(d, HWHS_RING_IDX, (uint32_t)(rounds_before & (r->slots - 1)));
    return BL_OK;
}

/* ---- sw-loop rounds ---- */

/* The engine's error bits as a status and text ("the engine timed out: ERR_CODE 7 (...): ..."). */
static int32_t status_error(hwhs_drv *d, uint32_t s, char *err, size_t n) {
    char text[400];
    hwhs_engine_error(d, text, sizeof text);
    if (s & HWHS_STATUS_AXI_ERR) return fail(err, n, BL_EBACKEND, "the engine failed: %s", text);
    return fail(err, n, BL_ETIMEOUT, "the engine timed out: %s", text);
}

/* Write a start request (CTRL or DEMO_CTRL) and, on the model, wait until it has been taken and
 * the engine's state shows it: busy, a round counted, or (for a refused start) an error. */
static int32_t start_and_confirm(hwhs_drv *d, uint32_t off, uint32_t value, const char *what, uint64_t deadline,
                                 char *err, size_t n) {
    uint32_t before = rd(d, HWHS_STATUS), rounds = rd(d, HWHS_ROUND_CNT);
    wr(d, off, value);
    if (!is_model(d)) return BL_OK;
    waiter w = wait_begin(d, deadline);
    for (;;) {
        if (rd(d, off) == 0) {
            uint32_t s = rd(d, HWHS_STATUS);
            /* Stale error bits (an earlier round's) make the model's state after the start ambiguous:
             * then the taken request alone counts, by the convention that STATUS comes first. */
            if ((before & STATUS_ERR) || (s & (HWHS_STATUS_BUSY | STATUS_ERR)) || rd(d, HWHS_ROUND_CNT) != rounds ||
                (off == HWHS_DEMO_CTRL && (rd(d, HWHS_DEMO_STS) & HWHS_DEMO_DONE)))
                break;
        }
        int32_t rc = wait_turn(&w, err, n);
        if (rc == BL_ETIMEOUT)
            return fail(err, n, rc, "the engine did not take %s within %llu ms (STATUS 0x%x, state %s)", what,
                        waited_ms(&w), rd(d, HWHS_STATUS), state_name(rd(d, HWHS_STATUS)));
        if (rc) return rc;
    }
    uint32_t s = rd(d, HWHS_STATUS);
    if (!(s & HWHS_STATUS_BUSY) && (s & HWHS_STATUS_AXI_ERR) && rd(d, HWHS_ROUND_CNT) == rounds) {
        char text[400];
        hwhs_engine_error(d, text, sizeof text);
        return fail(err, n, BL_EBACKEND, "the engine refused %s: %s", what, text);
    }
    return BL_OK;
}

int32_t hwhs_kick(hwhs_drv *d, uint64_t deadline, char *err, size_t n) {
    waiter w = wait_begin(d, deadline);
    for (;;) {
        uint32_t s = rd(d, HWHS_STATUS);
        if (!(s & HWHS_STATUS_BUSY) && (!is_model(d) || rd(d, HWHS_CTRL) == 0)) break;
        int32_t rc = wait_turn(&w, err, n);
        if (rc == BL_ETIMEOUT)
            return fail(err, n, rc, "the engine stayed busy for %llu ms: the last round did not finish (STATUS 0x%x, "
                        "state %s)", waited_ms(&w), s, state_name(s));
        if (rc) return rc;
    }
    return start_and_confirm(d, HWHS_CTRL, HWHS_CTRL_START, "the start of a round (CTRL start)", deadline, err, n);
}

int32_t hwhs_wait_reply(hwhs_drv *d, const volatile uint64_t *seq_word, uint64_t seq, uint64_t deadline, char *err,
                        size_t n) {
    waiter w = wait_begin(d, deadline);
    for (;;) {
        if (__atomic_load_n((const uint64_t *)seq_word, __ATOMIC_ACQUIRE) == seq) return BL_OK;
        uint32_t s = rd(d, HWHS_STATUS);
        if (!(s & HWHS_STATUS_BUSY) && (s & STATUS_ERR)) {
            if (__atomic_load_n((const uint64_t *)seq_word, __ATOMIC_ACQUIRE) == seq) return BL_OK;
            return status_error(d, s, err, n);
        }
        int32_t rc = wait_turn(&w, err, n);
        if (rc == BL_ETIMEOUT)
            return fail(err, n, rc, "stuck: no reply to round %llu within %llu ms (STATUS 0x%x, state %s, ROUND_CNT %u)",
                        (unsigned long long)seq, waited_ms(&w), s, state_name(s), rd(d, HWHS_ROUND_CNT));
        if (rc) return rc;
    }
}

int32_t hwhs_wait_status(hwhs_drv *d, uint64_t deadline, char *err, size_t n) {
    waiter w = wait_begin(d, deadline);
    for (;;) {
        uint32_t s = rd(d, HWHS_STATUS);
        if (!(s & HWHS_STATUS_BUSY) && (s & (HWHS_STATUS_DONE | STATUS_ERR))) {
            if (s & STATUS_ERR) return status_error(d, s, err, n);
            return BL_OK;
        }
        int32_t rc = wait_turn(&w, err, n);
        if (rc == BL_ETIMEOUT)
            return fail(err, n, rc, "stuck: the engine's round did not finish within %llu ms (STATUS 0x%x, state %s, "
                        "ROUND_CNT %u)", waited_ms(&w), s, state_name(s), rd(d, HWHS_ROUND_CNT));
        if (rc) return rc;
    }
}

uint64_t hwhs_rtt_cycles(hwhs_drv *d) {
    uint32_t hi, lo;
    do {
        hi = rd(d, HWHS_RTT_HI);
        lo = rd(d, HWHS_RTT_LO);
    } while (rd(d, HWHS_RTT_HI) != hi);
    return (uint64_t)hi << 32 | lo;
}

uint64_t hwhs_round_count(hwhs_drv *d) { return rd(d, HWHS_ROUND_CNT); }

/* ---- hw-loop ---- */

int32_t hwhs_paced_start(hwhs_drv *d, const hwhs_pacer *p, char *err, size_t n) {
    if (!p->count) return fail(err, n, BL_EINVAL, "a paced run of 0 rounds: give count >= 1");
    if (p->decoder_id > 255) return fail(err, n, BL_EINVAL, "decoder_id %u: the pattern holds 0 to 255", p->decoder_id);
    if (!p->table || !p->table_bytes || p->table_bytes % HWHS_TABLE_ENTRY || p->table_bytes > HWHS_TABLE_BYTES)
        return fail(err, n, BL_EINVAL, "a syndrome table of %u bytes: give whole %u-byte entries, at most %u bytes",
                    p->table_bytes, (unsigned)HWHS_TABLE_ENTRY, (unsigned)HWHS_TABLE_BYTES);
    for (uint32_t k = 0; k < p->table_bytes / HWHS_TABLE_ENTRY; ++k) {
        const uint8_t *e = p->table + (size_t)k * HWHS_TABLE_ENTRY;
        uint32_t req = (uint32_t)ernic_get_le(e, 4), rep = (uint32_t)ernic_get_le(e + 4, 4);
        if (req > HWHS_TABLE_PAYLOAD_MAX || rep > HWHS_TABLE_PAYLOAD_MAX)
            return fail(err, n, BL_EINVAL, "syndrome table entry %u: payloads of %u and %u bytes (at most %u each)", k,
                        req, rep, (unsigned)HWHS_TABLE_PAYLOAD_MAX);
    }
    int32_t rc = check_idle(d, "paced run", err, n);
    if (rc) return rc;
    uint64_t deadline = hwhs_now_ns() + HWHS_CONFIG_TIMEOUT_NS;
    wr64(d, HWHS_FREQ_LO, p->freq);
    wr(d, HWHS_FREQ_SPAN, p->span);
    wr(d, HWHS_LFSR_SEED, p->seed);
    wr(d, HWHS_CMD_CNT, p->count);
    wr(d, HWHS_PATTERN, p->decoder_id);
    for (uint32_t i = 0; i < p->table_bytes; i += 4)
        hwhs_wr(d->w.table, i, (uint32_t)ernic_get_le(p->table + i, 4));
    wr(d, HWHS_DEMO_DEPTH, p->table_bytes);
    /* Reset the pacer (its done and aborted flags with it). */
    wr(d, HWHS_DEMO_CTRL, HWHS_DEMO_RESET);
    if ((rc = wait_cleared(d, d->w.regs, HWHS_DEMO_CTRL, "the pacer reset (DEMO_CTRL reset)", deadline, err, n)))
        return rc;
    if (is_model(d)) {
        waiter w = wait_begin(d, deadline);
        while (rd(d, HWHS_DEMO_STS) & (HWHS_DEMO_DONE | HWHS_DEMO_ABORTED)) {
            if ((rc = wait_turn(&w, err, n)) == BL_ETIMEOUT)
                return fail(err, n, rc, "the pacer reset did not clear DEMO_STS (0x%x) within %llu ms",
                            rd(d, HWHS_DEMO_STS), waited_ms(&w));
            if (rc) return rc;
        }
    }
    /* Arm the trace: hold it clear until it is empty, then let it record. */
    wr(d, HWHS_TRACE_CTRL, HWHS_TRACE_CLEAR);
    if (is_model(d)) {
        waiter w = wait_begin(d, deadline);
        while (rd(d, HWHS_TRACE_CNT) != 0 || (rd(d, HWHS_TRACE_STS) & (HWHS_TRACE_FULL | HWHS_TRACE_SATURATED))) {
            if ((rc = wait_turn(&w, err, n)) == BL_ETIMEOUT)
                return fail(err, n, rc, "the trace did not clear within %llu ms (TRACE_CNT %u, TRACE_STS 0x%x)",
                            waited_ms(&w), rd(d, HWHS_TRACE_CNT), rd(d, HWHS_TRACE_STS));
            if (rc) return rc;
        }
    }
    wr(d, HWHS_TRACE_CTRL, 0);
    return start_and_confirm(d, HWHS_DEMO_CTRL, HWHS_DEMO_START, "the start of a paced run (DEMO_CTRL start)", deadline,
                             err, n);
}

static void run_result(hwhs_drv *d, uint64_t rounds_before, hwhs_run_result *r) {
    memset(r, 0, sizeof *r);
    r->rounds = (uint32_t)(rd(d, HWHS_ROUND_CNT) - (uint32_t)rounds_before);
    r->demo_err = rd(d, HWHS_DEMO_ERR);
    r->trace_cnt = rd(d, HWHS_TRACE_CNT);
    uint32_t ts = rd(d, HWHS_TRACE_STS), ds = rd(d, HWHS_DEMO_STS);
    r->trace_full = !!(ts & HWHS_TRACE_FULL);
    r->trace_saturated = !!(ts & HWHS_TRACE_SATURATED);
    r->aborted = !!(ds & HWHS_DEMO_ABORTED);
    r->status = rd(d, HWHS_STATUS);
    r->err_code = rd(d, HWHS_ERR_CODE);
}

int32_t hwhs_paced_wait(hwhs_drv *d, uint64_t rounds_before, uint64_t deadline, hwhs_run_result *r, char *err,
                        size_t n) {
    waiter w = wait_begin(d, deadline);
    for (;;) {
        if (rd(d, HWHS_DEMO_STS) & HWHS_DEMO_DONE) break;
        uint32_t s = rd(d, HWHS_STATUS);
        if (!(s & HWHS_STATUS_BUSY) && (s & STATUS_ERR)) break; /* a round failed and ended the run */
        /* Nothing of a paced run's rounds passes through this thread: it sleeps between looks, so the
         * CPU is the engine's and the coprocessor's. */
        struct timespec nap = {0, 100000};
        nanosleep(&nap, NULL);
        int32_t rc = wait_turn(&w, err, n);
        if (rc) {
            run_result(d, rounds_before, r);
            if (rc == BL_ETIMEOUT)
                fail(err, n, rc, "the paced run did not finish within %llu ms: %llu of %u rounds done (STATUS 0x%x, "
                     "state %s)", waited_ms(&w), (unsigned long long)r->rounds, rd(d, HWHS_CMD_CNT), r->status,
                     state_name(r->status));
            return rc;
        }
    }
    run_result(d, rounds_before, r);
    if (r->aborted) return BL_OK;
    if (!(r->status & HWHS_STATUS_BUSY) && (r->status & STATUS_ERR)) return status_error(d, r->status, err, n);
    return BL_OK;
}

uint64_t hwhs_trace_read(hwhs_drv *d, uint16_t *out, uint64_t cap) {
    uint64_t count = rd(d, HWHS_TRACE_CNT);
    if (count > HWHS_TRACE_ENTRIES) count = HWHS_TRACE_ENTRIES;
    if (count > cap) count = cap;
    if (!out) return 0;
    const volatile uint8_t *t = (const volatile uint8_t *)d->w.trace;
    for (uint64_t i = 0; i < count; i += 2) { /* two little-endian entries per 32-bit word */
        uint32_t v = hwhs_rd(t, (uint32_t)(i * 2));
        out[i] = (uint16_t)v;
        if (i + 1 < count) out[i + 1] = (uint16_t)(v >> 16);
    }
    return count;
}

int32_t hwhs_abort(hwhs_drv *d, uint64_t deadline, char *err, size_t n) {
    wr(d, HWHS_CTRL, HWHS_CTRL_ABORT);
    int32_t rc = wait_cleared(d, d->w.regs, HWHS_CTRL, "the abort (CTRL abort)", deadline, err, n);
    return rc ? rc : wait_idle(d, "an abort", deadline, err, n);
}

int32_t hwhs_soft_reset(hwhs_drv *d, uint64_t deadline, char *err, size_t n) {
    wr(d, HWHS_CTRL, HWHS_CTRL_RESET);
    int32_t rc = wait_cleared(d, d->w.regs, HWHS_CTRL, "the soft reset (CTRL soft reset)", deadline, err, n);
    return rc ? rc : wait_idle(d, "a soft reset", deadline, err, n);
}
