/*
 * backend.c -- the (fpga, controller) backend of the transport `rdma`: a controller whose rounds
 * the HWHS engine sends, through its register window (driver.c, window.c), to an unchanged
 * backline-transport-rdma coprocessor.
 *
 * Control plane: the core's backline/sdk/remote.h with the rdma transport's protocol (magic "BLRD",
 * version 1, its 44-byte peer record from verbs.h), so the rdma coprocessor cannot tell this
 * controller from its own. The peer record this side sends describes the ERNIC queue pair
 * (QP_QPN, LOCAL_GID, ACTIVE_MTU) and the reply ring in the engine's DMA memory (the MR's
 * remote address and rkey).
 *
 * Data path: both rings live in the engine's DMA memory. The core writes a request into the
 * request ring as for memcpy; deliver only starts the engine (CTRL start), which posts the
 * WRITE_WITH_IMM of the slot (less its sequence number, which rides in the immediate) through
 * the ERNIC. The coprocessor's reply arrives by WRITE_WITH_IMM in the reply ring, where the
 * engine (the model's ERNIC part) stores its sequence number; the core's collect sees it in
 * memory, so there is no poll hook. peer_alive reports the engine's timeout and errors, a model
 * whose heartbeat stopped, and a coprocessor whose connection closed.
 *
 * fpga.h: the engine's own cycle counts per round and its paced (hw-loop) runs, for controller
 * sessions of this process found by key.
 */
#define _GNU_SOURCE
#include "driver.h"
#include "rdma_verbs.h"
#include "window.h"

#include <backline/backline.h>
#include <backline/sdk/oob.h>
#include <backline/sdk/remote.h>

#pragma GCC visibility push(default)
#include "fpga.h"
#pragma GCC visibility pop

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define FPGA_SQ_DEPTH 16u       /* the ERNIC QP's send queue (the engine posts one WQE a round) */
#define FPGA_RQ_EXTRA 16u       /* receive entries beyond one per slot, as the rdma transport's */
#define FPGA_QP_CTX 0u          /* the engine's QP context this session uses */
#define FPGA_WQE_INDEX 0u       /* and its WQE store slot */
#define FPGA_MAX_SESSIONS 64
#define FPGA_ABORT_NS 1000000000ull /* the best-effort abort of stop and close */

static const char *const config_keys[] = {BL_REMOTE_CONFIG_KEYS, "window", "qp", NULL};

struct fp {
    bl_remote r; /* configuration, handshake, the connection to the coprocessor */
    char window[1024];
    uint32_t qp; /* ERNIC QP number */
    /* the engine */
    void *map;
    size_t map_bytes;
    hwhs_window w;
    hwhs_drv d;
    int drv_open;
    /* the session */
    rv_peer offered; /* the coprocessor's peer record (OFFER) */
    hwhs_buf rings, sq, cq;
    hwhs_mr mr;
    int mem_ready, qp_up, established, quiesced;
    uint32_t sq_psn;
    hwhs_qp_local local;
    uint64_t kicked; /* sequence number of the last round the engine started (or finished, after a paced run) */
    int spent;       /* no more core rounds: a paced run, an abort or a soft reset happened */
    int broken;      /* no more rounds at all: a round may have gone out that the engine did not count */
    /* bl_fpga_record_cycles */
    uint64_t *cyc_buf, cyc_cap, cyc_count;
    int cyc_pending; /* the last round started while armed; its RTT not yet stored */
    /* a paced run */
    int paced_active;
    uint64_t paced_before;
    /* the registry (fpga.h) */
    int registered, refs;
    char error[512];
};

/* ---- the handshake: the rdma transport's, controller side only ---- */

static void *no_link_create(void *arg, uint8_t *peer, int32_t *rc, char *err, size_t n) {
    *rc = bl_oob_fail(err, n, BL_EINVAL, "backline-transport-fpga serves controllers only");
    return NULL;
}

static int32_t no_link_accept(void *arg, void *link, const uint8_t *peer, char *err, size_t n) {
    return bl_oob_fail(err, n, BL_EINVAL, "backline-transport-fpga serves controllers only");
}

static void no_link_destroy(void *arg, void *link) {}

static const bl_remote_links no_links = {no_link_create, no_link_accept, no_link_destroy};
static const bl_remote_protocol protocol = {
    .transport = "rdma",
    .magic = RV_MAGIC_TRANSPORT,
    .version = BL_REMOTE_HANDSHAKE_VERSION,
    .peer_bytes = RV_PEER_BYTES,
    .accepting = "connect its queue pair to this one",
};

/* ---- the registry of established sessions (fpga.h finds them by key) ---- */

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t reg_cv = PTHREAD_COND_INITIALIZER;
static struct fp *registry[FPGA_MAX_SESSIONS];
static __thread char tl_error[640]; /* "fpga controller 'KEY': " + an error of 512 */

static int32_t registry_add(struct fp *m, char *err, size_t n) {
    int32_t rc = BL_OK;
    pthread_mutex_lock(&reg_mu);
    int free_at = -1;
    for (int i = 0; i < FPGA_MAX_SESSIONS; ++i) {
        if (registry[i] == m) goto out;
        if (registry[i] && !strcmp(registry[i]->r.key, m->r.key)) {
            rc = bl_oob_fail(err, n, BL_EBUSY, "an fpga controller session '%s' is already established in this process",
                             m->r.key);
            goto out;
        }
        if (!registry[i] && free_at < 0) free_at = i;
    }
    if (free_at < 0) {
        rc = bl_oob_fail(err, n, BL_ENOMEM, "more than %d fpga controller sessions in one process", FPGA_MAX_SESSIONS);
        goto out;
    }
    registry[free_at] = m;
    m->registered = 1;
out:
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

/* Take the session out of the registry and wait until no bl_fpga_* call uses it. */
static void registry_remove(struct fp *m) {
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < FPGA_MAX_SESSIONS; ++i)
        if (registry[i] == m) registry[i] = NULL;
    m->registered = 0;
    while (m->refs > 0) pthread_cond_wait(&reg_cv, &reg_mu);
    pthread_mutex_unlock(&reg_mu);
}

static struct fp *acquire(const char *key) {
    if (!key) {
        snprintf(tl_error, sizeof tl_error, "no session key given");
        return NULL;
    }
    struct fp *m = NULL;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < FPGA_MAX_SESSIONS && !m; ++i)
        if (registry[i] && !strcmp(registry[i]->r.key, key)) m = registry[i];
    if (m) m->refs++;
    pthread_mutex_unlock(&reg_mu);
    if (!m) snprintf(tl_error, sizeof tl_error, "no fpga controller session '%.64s' in this process", key);
    return m;
}

static void release(struct fp *m) {
    pthread_mutex_lock(&reg_mu);
    m->refs--;
    pthread_cond_broadcast(&reg_cv);
    pthread_mutex_unlock(&reg_mu);
}

/* ---- open: configuration only ---- */

static int32_t fp_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    if (a->role != BL_CONTROLLER)
        return bl_oob_fail(err, n, BL_EINVAL, "backline-transport-fpga serves the controller on an FPGA; its "
                           "coprocessors are backline-transport-rdma's (hardware cpu)");
    struct fp *m = calloc(1, sizeof *m);
    if (!m) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    const bl_host_api *h = a->host;
    int64_t v;
    int32_t rc = bl_remote_open(&m->r, &protocol, &no_links, m, a, err, n);
    if (rc) goto fail;
    const char *window = h->config_str(a->session, "window");
    if (!window) window = HWHS_DEFAULT_WINDOW;
    if (!*window || strlen(window) >= sizeof m->window) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "window=%.60s%s: give the engine's window file (a path of 1 to %zu "
                         "characters)", window, strlen(window) > 60 ? "..." : "", sizeof m->window - 1);
        goto fail;
    }
    snprintf(m->window, sizeof m->window, "%s", window);
    if ((rc = h->config_int(a->session, "qp", 1, HWHS_QP_CONTEXTS, 1, &v, err, n))) goto fail;
    m->qp = (uint32_t)v;
    /* check_only: nothing is mapped (the model may start later). */
    *impl = m;
    return BL_OK;
fail:
    free(m);
    return rc;
}

/* ---- bring-up ---- */

static int32_t fp_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    struct fp *m = impl;
    int32_t rc;
    if (!m->map && (rc = hwhs_window_map(m->window, &m->w, &m->map, &m->map_bytes, err, n))) return rc;
    if (!m->drv_open) {
        if ((rc = hwhs_open(&m->d, &m->w, err, n))) return rc;
        m->drv_open = 1;
    }
    uint8_t peer[RV_PEER_BYTES];
    if ((rc = bl_remote_dial(&m->r, deadline, peer, err, n))) return rc;
    rv_peer_decode(peer, &m->offered);
    uint32_t sb = m->r.slot_bytes;
    if (sb > HWHS_MAX_PAY_LEN || (sb & (sb - 1)))
        return bl_oob_fail(err, n, BL_EINVAL, "the coprocessor at %s:%d has slot_bytes=%u; the engine sends frames of "
                           "at most %u bytes and steps through its rings by a power of two: give the coprocessor "
                           "slot_bytes=64, 128, 256, ... or %u", m->r.host_name, m->r.port, sb,
                           (unsigned)HWHS_MAX_PAY_LEN, (unsigned)HWHS_MAX_PAY_LEN);
    if (m->r.slots > 65535)
        return bl_oob_fail(err, n, BL_EINVAL, "the coprocessor at %s:%d has slots=%u; the engine's rings have at most "
                           "32768 buffers (WQE_RING_LEN is 16 bits): give the coprocessor fewer slots", m->r.host_name,
                           m->r.port, m->r.slots);
    return BL_OK;
}

static uint64_t ring_bytes(const struct fp *m) { return (uint64_t)m->r.slots * m->r.slot_bytes; }

static int32_t fp_alloc_memory(void *impl, char *err, size_t n) {
    struct fp *m = impl;
    if (m->mem_ready) return BL_OK;
    if (!m->drv_open) return bl_oob_fail(err, n, BL_ESTATE, "alloc_memory before connect");
    m->d.mem_used = 0; /* a retried step starts over */
    int32_t rc;
    if ((rc = hwhs_alloc(&m->d, 2 * ring_bytes(m), 4096, &m->rings, err, n)) ||
        (rc = hwhs_alloc(&m->d, FPGA_SQ_DEPTH * ERNIC_WQE_BYTES, 4096, &m->sq, err, n)) ||
        (rc = hwhs_alloc(&m->d, FPGA_SQ_DEPTH * 4u, 64, &m->cq, err, n)))
        return rc;
    if ((rc = hwhs_mr_register(&m->d, m->rings.bus, m->rings.bytes, &m->mr, hwhs_now_ns() + m->r.connect_timeout_ns,
                               err, n)))
        return rc;
    m->mem_ready = 1;
    return BL_OK;
}

static uint32_t random_psn(void) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint32_t)hwhs_now_ns();
    return r & 0xffffff;
}

static int32_t fp_exchange_keys(void *impl, uint64_t deadline, char *err, size_t n) {
    struct fp *m = impl;
    if (!m->mem_ready) return bl_oob_fail(err, n, BL_ESTATE, "exchange_keys before alloc_memory");
    const rv_peer *o = &m->offered;
    if (o->mtu < 1 || o->mtu > 5)
        return bl_oob_fail(err, n, BL_EPEER, "the coprocessor sent path MTU code %u, not one of 1 (256) to 5 (4096)",
                           o->mtu);
    uint32_t ours = hwhs_rd(m->w.ernic, ERNIC_ACTIVE_MTU), mtu = o->mtu;
    if (ours >= 1 && ours < mtu) mtu = ours;
    hwhs_qp_config c;
    memset(&c, 0, sizeof c);
    c.qpn = m->qp;
    c.sq_bus = m->sq.bus;
    c.sq_depth = FPGA_SQ_DEPTH;
    c.cq_bus = m->cq.bus;
    c.rq_depth = m->r.slots + FPGA_RQ_EXTRA;
    c.sq_psn = m->sq_psn = random_psn();
    c.rq_psn = o->psn & 0xffffff;
    c.dest_qpn = o->qpn;
    memcpy(c.dest_gid, o->gid, 16);
    c.path_mtu = mtu;
    m->qp_up = 1; /* from now on close disables it, whatever happens here */
    int32_t rc = hwhs_qp_setup(&m->d, &c, &m->local, deadline, err, n);
    if (rc) return rc;
    rv_peer mine;
    memset(&mine, 0, sizeof mine);
    mine.qpn = m->local.verbs_qpn;
    mine.psn = m->sq_psn;
    memcpy(mine.gid, m->local.gid, 16);
    mine.ring_addr = m->mr.remote_base + ring_bytes(m); /* the reply ring: the block's second half */
    mine.rkey = m->mr.rkey;
    mine.mtu = m->local.active_mtu;
    uint8_t peer[RV_PEER_BYTES];
    rv_peer_encode(&mine, peer);
    return bl_remote_connect(&m->r, peer, deadline, err, n);
}

/* ---- the round path ---- */

static void hook_fail(struct fp *m) { m->r.host->error_text(m->error); }

/* Store the RTT of the last round started while recording (wait for its STATUS first). */
static int32_t collect_cycles(struct fp *m, uint64_t deadline) {
    if (!m->cyc_pending) return BL_OK;
    m->cyc_pending = 0;
    int32_t rc = hwhs_wait_status(&m->d, deadline, m->error, sizeof m->error);
    if (rc) return rc;
    if (m->cyc_buf && m->cyc_count < m->cyc_cap) m->cyc_buf[m->cyc_count] = hwhs_rtt_cycles(&m->d);
    m->cyc_count++;
    return BL_OK;
}

static int32_t ctl_deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct fp *m = impl;
    if (__builtin_expect(__atomic_load_n(&m->spent, __ATOMIC_ACQUIRE), 0)) {
        snprintf(m->error, sizeof m->error, "the engine ran a paced run (or was aborted/reset); open a new session");
        hook_fail(m);
        return BL_ESTATE;
    }
    if (__builtin_expect(seq != m->kicked + 1, 0)) {
        snprintf(m->error, sizeof m->error, "round %llu follows round %llu, the last one the engine started (a round "
                 "in between was lost); open a new session", (unsigned long long)seq, (unsigned long long)m->kicked);
        hook_fail(m);
        return BL_ESTATE;
    }
    uint32_t want = (uint32_t)((seq - 1) & (m->r.slots - 1));
    if (__builtin_expect(slot != want, 0)) {
        snprintf(m->error, sizeof m->error, "round %llu is in slot %u, but the engine's ring index is %u",
                 (unsigned long long)seq, slot, want);
        hook_fail(m);
        return BL_EPEER;
    }
    uint64_t deadline = hwhs_now_ns() + m->r.timeout_ns;
    int32_t rc;
    if (m->cyc_pending && (rc = collect_cycles(m, deadline))) {
        hook_fail(m);
        return rc;
    }
    if ((rc = hwhs_kick(&m->d, deadline, m->error, sizeof m->error))) {
        hook_fail(m);
        return rc;
    }
    m->kicked = seq;
    if (m->cyc_buf) m->cyc_pending = 1;
    return BL_OK;
}

static int32_t ctl_alive(void *impl) {
    struct fp *m = impl;
    uint32_t s = hwhs_rd(m->w.regs, HWHS_STATUS);
    if (!(s & HWHS_STATUS_BUSY) && (s & (HWHS_STATUS_TIMEOUT | HWHS_STATUS_AXI_ERR))) {
        char text[400];
        hwhs_engine_error(&m->d, text, sizeof text);
        snprintf(m->error, sizeof m->error, "the engine reported %s: %s",
                 s & HWHS_STATUS_AXI_ERR ? "an error" : "a timeout", text);
        hook_fail(m);
        /* The round's verdict is the engine's: a timeout (STATUS.timeout) is a timeout at the driver. */
        return s & HWHS_STATUS_AXI_ERR ? BL_EBACKEND : BL_ETIMEOUT;
    }
    if (!hwhs_alive(&m->d, m->error, sizeof m->error)) {
        hook_fail(m);
        return 0;
    }
    return bl_remote_alive(&m->r);
}

static const bl_remote_hooks hooks = {
    .controller_deliver = ctl_deliver,
    .controller_poll = NULL, /* replies publish themselves: the engine stores their sequence numbers */
    .controller_alive = ctl_alive,
};

static int32_t fp_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    struct fp *m = impl;
    if (!m->qp_up) return bl_oob_fail(err, n, BL_ESTATE, "establish_channel before exchange_keys");
    uint64_t rb = ring_bytes(m);
    uint64_t request_bus = m->rings.bus, reply_bus = m->rings.bus + rb;
    uint64_t base = bl_remote_establish(&m->r, ch, m->rings.ptr, m->rings.ptr + rb, &hooks, m);
    int32_t rc;
    if ((rc = hwhs_qpctx_commit(&m->d, FPGA_QP_CTX, m->qp, m->sq.bus, FPGA_SQ_DEPTH, err, n))) return rc;
    hwhs_wqe_config wc = {
        .index = FPGA_WQE_INDEX,
        .qp_ref = FPGA_QP_CTX,
        .opcode = 3, /* write with immediate: the immediate is the round's sequence number */
        .xfer_len = m->r.slot_bytes - 8,
        .rkey = m->offered.rkey,
        .remote_addr = m->offered.ring_addr + 8,
        .local_bus = request_bus + 8,
        .wrid = 0,
    };
    if ((rc = hwhs_wqe_commit(&m->d, &wc, err, n))) return rc;
    /* The engine gives up on a reply after half the session's timeout_ms, so its error comes
     * before the core's deadline (REPLY_TO is 32 bits: at most 21 s). */
    uint64_t cycles = m->r.timeout_ns / 1000000ull * (HWHS_CLOCK_HZ / 1000) / 2;
    if (cycles > 0xffffffffull) cycles = 0xffffffffull;
    hwhs_ring_config rc_ = {
        .request_bus = request_bus,
        .reply_bus = reply_bus,
        .slots = m->r.slots,
        .stride_log2 = (uint32_t)__builtin_ctz(m->r.slot_bytes),
        .seq_off = 0,
        .frame_bytes = (m->r.slot_bytes + 63u) & ~63u,
        .reply_timeout_cycles = cycles,
        .flags = HWHS_FLAG_REPOST_WQE | HWHS_FLAG_REPLY_POLL,
    };
    if ((rc = hwhs_ring_setup(&m->d, FPGA_WQE_INDEX, &rc_, base, err, n))) return rc;
    m->kicked = base;
    if ((rc = registry_add(m, err, n))) return rc;
    m->established = 1;
    return BL_OK;
}

static int32_t fp_start(void *impl, char *err, size_t n) {
    struct fp *m = impl;
    return bl_remote_start(&m->r, err, n); /* a controller: nothing */
}

/* Stop the engine once (best effort): nothing may go out for this session any more. */
static void quiesce(struct fp *m) {
    if (m->quiesced || !m->drv_open || !m->established) return;
    m->quiesced = 1;
    __atomic_store_n(&m->spent, 1, __ATOMIC_RELEASE);
    uint64_t t = m->r.timeout_ns < FPGA_ABORT_NS ? m->r.timeout_ns : FPGA_ABORT_NS;
    char ignored[256];
    hwhs_abort(&m->d, hwhs_now_ns() + t, ignored, sizeof ignored);
}

static int32_t fp_stop(void *impl, char *err, size_t n) {
    struct fp *m = impl;
    quiesce(m);
    bl_remote_stop(&m->r);
    return BL_OK;
}

static void fp_close(void *impl) {
    struct fp *m = impl;
    registry_remove(m);
    quiesce(m);
    bl_remote_close(&m->r);
    if (m->qp_up && m->drv_open) hwhs_qp_disable(&m->d, m->qp);
    if (m->map) hwhs_window_unmap(m->map, m->map_bytes);
    free(m);
}

static const bl_backend backend = {
    .abi_version = BACKLINE_ABI_VERSION,
    .name = "rdma",
    .config_keys = config_keys,
    .open = fp_open,
    .connect = fp_connect,
    .alloc_memory = fp_alloc_memory,
    .exchange_keys = fp_exchange_keys,
    .establish_channel = fp_establish,
    .start = fp_start,
    .stop = fp_stop,
    .close = fp_close,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return &backend; }

/* ---- fpga.h: the engine's measurements and paced runs ---- */

static int32_t tl_fail(int32_t rc, const char *key, const char *text) {
    snprintf(tl_error, sizeof tl_error, "fpga controller '%.64s': %s", key, text);
    return rc;
}

/* Wait (deadline) until no software round is in flight in the engine, and check that the last
 * one completed: a paced run numbers its rounds after it. */
static int32_t settle(struct fp *m, uint64_t deadline) {
    for (uint64_t next = 0;;) {
        uint32_t s = hwhs_rd(m->w.regs, HWHS_STATUS);
        if (!(s & HWHS_STATUS_BUSY)) break;
        uint64_t now = hwhs_now_ns();
        if (now >= next) {
            next = now + 1000000ull;
            if (!hwhs_alive(&m->d, m->error, sizeof m->error)) return BL_EPEER;
        }
        if (now > deadline) {
            snprintf(m->error, sizeof m->error, "the engine's round %llu did not finish within timeout_ms",
                     (unsigned long long)m->kicked);
            return BL_ETIMEOUT;
        }
    }
    if ((uint32_t)hwhs_round_count(&m->d) != (uint32_t)m->kicked) {
        char text[400];
        hwhs_engine_error(&m->d, text, sizeof text);
        snprintf(m->error, sizeof m->error, "the engine's last round (%llu) did not complete (ROUND_CNT %llu; %s): "
                 "open a new session", (unsigned long long)m->kicked, (unsigned long long)hwhs_round_count(&m->d),
                 text);
        return BL_ESTATE;
    }
    if (m->cyc_pending) {
        m->cyc_pending = 0;
        if (m->cyc_buf && m->cyc_count < m->cyc_cap) m->cyc_buf[m->cyc_count] = hwhs_rtt_cycles(&m->d);
        m->cyc_count++;
    }
    return BL_OK;
}

static int32_t paced_begin(struct fp *m, const bl_fpga_paced *p) {
    if (!p) {
        snprintf(m->error, sizeof m->error, "no paced run given");
        return BL_EINVAL;
    }
    if (m->paced_active) {
        snprintf(m->error, sizeof m->error, "a paced run is in flight; finish it first");
        return BL_ESTATE;
    }
    if (__atomic_load_n(&m->broken, __ATOMIC_ACQUIRE)) {
        snprintf(m->error, sizeof m->error, "the engine was aborted in flight or reset; open a new session");
        return BL_ESTATE;
    }
    int32_t rc = settle(m, hwhs_now_ns() + m->r.timeout_ns);
    if (rc) return rc;
    hwhs_pacer pc = {
        .freq = p->freq,
        .span = p->span,
        .seed = p->seed,
        .count = p->count,
        .decoder_id = p->decoder_id,
        .table = p->table,
        .table_bytes = p->table_bytes,
    };
    m->paced_before = hwhs_round_count(&m->d);
    if ((rc = hwhs_paced_start(&m->d, &pc, m->error, sizeof m->error))) return rc;
    __atomic_store_n(&m->spent, 1, __ATOMIC_RELEASE);
    m->paced_active = 1;
    return BL_OK;
}

static int32_t paced_end(struct fp *m, uint64_t timeout_ms, bl_fpga_paced_result *r, uint16_t *trace,
                         uint64_t trace_cap) {
    if (!m->paced_active) {
        snprintf(m->error, sizeof m->error, "no paced run was started on this session");
        return BL_ESTATE;
    }
    uint64_t t = timeout_ms ? timeout_ms * 1000000ull : m->r.timeout_ns;
    hwhs_run_result rr;
    int32_t rc = hwhs_paced_wait(&m->d, m->paced_before, hwhs_now_ns() + t, &rr, m->error, sizeof m->error);
    int over = (hwhs_rd(m->w.regs, HWHS_DEMO_STS) & HWHS_DEMO_DONE) || !(rr.status & HWHS_STATUS_BUSY);
    if (r) {
        memset(r, 0, sizeof *r);
        r->rounds = rr.rounds;
        r->demo_err = rr.demo_err;
        r->trace_cnt = rr.trace_cnt;
        r->trace_full = rr.trace_full;
        r->trace_saturated = rr.trace_saturated;
        r->aborted = rr.aborted;
        r->status = rr.status;
        r->err_code = rr.err_code;
    }
    if (!over) return rc; /* still running: finish again, or abort */
    m->paced_active = 0;
    if (trace && trace_cap) hwhs_trace_read(&m->d, trace, trace_cap);
    if (rc == BL_OK && !rr.aborted) m->kicked = m->paced_before + rr.rounds; /* the next paced run continues */
    else __atomic_store_n(&m->broken, 1, __ATOMIC_RELEASE);
    return rc;
}

BL_API int32_t bl_fpga_record_cycles(const char *key, uint64_t *buf, uint64_t cap) {
    struct fp *m = acquire(key);
    if (!m) return BL_ENOTFOUND;
    if (buf) {
        m->cyc_pending = 0; /* a round started before arming is not this recording's */
        m->cyc_count = 0;
        m->cyc_cap = cap;
        m->cyc_buf = buf;
    } else {
        if (m->cyc_pending) collect_cycles(m, hwhs_now_ns() + m->r.timeout_ns); /* into the buffer still given */
        m->cyc_buf = NULL;
        m->cyc_cap = 0;
    }
    release(m);
    return BL_OK;
}

BL_API uint64_t bl_fpga_recorded_cycles(const char *key) {
    struct fp *m = acquire(key);
    if (!m) return 0;
    if (m->cyc_pending && collect_cycles(m, hwhs_now_ns() + m->r.timeout_ns)) tl_fail(0, key, m->error);
    uint64_t count = m->cyc_count;
    release(m);
    return count;
}

BL_API int32_t bl_fpga_paced_run(const char *key, const bl_fpga_paced *p, bl_fpga_paced_result *r, uint16_t *trace,
                                 uint64_t trace_cap) {
    struct fp *m = acquire(key);
    if (!m) return BL_ENOTFOUND;
    if (r) memset(r, 0, sizeof *r);
    int32_t rc = paced_begin(m, p);
    if (!rc) rc = paced_end(m, p->timeout_ms, r, trace, trace_cap);
    if (rc) tl_fail(rc, key, m->error);
    release(m);
    return rc;
}

BL_API int32_t bl_fpga_paced_start(const char *key, const bl_fpga_paced *p) {
    struct fp *m = acquire(key);
    if (!m) return BL_ENOTFOUND;
    int32_t rc = paced_begin(m, p);
    if (rc) tl_fail(rc, key, m->error);
    release(m);
    return rc;
}

BL_API int32_t bl_fpga_paced_finish(const char *key, uint64_t timeout_ms, bl_fpga_paced_result *r, uint16_t *trace,
                                    uint64_t trace_cap) {
    struct fp *m = acquire(key);
    if (!m) return BL_ENOTFOUND;
    if (r) memset(r, 0, sizeof *r);
    int32_t rc = paced_end(m, timeout_ms, r, trace, trace_cap);
    if (rc) tl_fail(rc, key, m->error);
    release(m);
    return rc;
}

static int32_t sw_rounds(struct fp *m, const bl_fpga_sw *c, uint64_t *cycles, uint64_t *host_ns,
                         bl_fpga_sw_result *r) {
    uint32_t room = m->r.slot_bytes - BL_FRAME_HEADER_BYTES;
    if (!c || (c->collect != BL_FPGA_COLLECT_SLOT && c->collect != BL_FPGA_COLLECT_STATUS) || !c->payloads ||
        !c->expected || !c->n_payloads || c->payload_bytes > room || c->expected_bytes > room) {
        snprintf(m->error, sizeof m->error, "bl_fpga_sw_rounds: give collect 0 (slot) or 1 (status) and a payload "
                 "table whose requests and replies fit the %u-byte slot payload", room);
        return BL_EINVAL;
    }
    if (m->paced_active || __atomic_load_n(&m->broken, __ATOMIC_ACQUIRE)) {
        snprintf(m->error, sizeof m->error, "the engine is running a paced run, or was aborted in flight or reset; "
                 "open a new session");
        return BL_ESTATE;
    }
    uint64_t wait = c->timeout_ms ? c->timeout_ms * 1000000ull : m->r.timeout_ns;
    int32_t rc = settle(m, hwhs_now_ns() + wait);
    if (rc) return rc;
    __atomic_store_n(&m->spent, 1, __ATOMIC_RELEASE); /* the core's sequence stops here */
    uint64_t rb = ring_bytes(m);
    for (uint64_t k = 0; k < c->rounds; ++k) {
        uint64_t seq = m->kicked + 1;
        size_t at = (size_t)((seq - 1) & (m->r.slots - 1)) * m->r.slot_bytes;
        bl_frame_header *req = (bl_frame_header *)(m->rings.ptr + at);
        const bl_frame_header *rep = (const bl_frame_header *)(m->rings.ptr + rb + at);
        uint32_t row = (uint32_t)(k % c->n_payloads);
        uint64_t t0 = hwhs_now_ns(), deadline = t0 + wait;
        req->len = c->payload_bytes;
        req->decoder_id = c->decoder_id;
        req->status = 0;
        req->flags = 0;
        req->fn_status = 0;
        memcpy(req + 1, c->payloads + (size_t)row * c->payload_bytes, c->payload_bytes);
        __atomic_store_n(&req->seq, seq, __ATOMIC_RELEASE);
        if ((rc = hwhs_kick(&m->d, deadline, m->error, sizeof m->error))) return rc;
        m->kicked = seq;
        if (c->collect == BL_FPGA_COLLECT_SLOT) {
            rc = hwhs_wait_reply(&m->d, &rep->seq, seq, deadline, m->error, sizeof m->error);
            /* the RTT is latched in NEXT, a moment after the reply is seen */
            if (!rc) rc = hwhs_wait_status(&m->d, deadline, m->error, sizeof m->error);
        } else {
            rc = hwhs_wait_status(&m->d, deadline, m->error, sizeof m->error);
            if (!rc && __atomic_load_n(&rep->seq, __ATOMIC_ACQUIRE) != seq) {
                snprintf(m->error, sizeof m->error, "the engine said round %llu was done, but its reply slot holds "
                         "round %llu", (unsigned long long)seq,
                         (unsigned long long)__atomic_load_n(&rep->seq, __ATOMIC_ACQUIRE));
                rc = BL_EPEER;
            }
        }
        if (rc) return rc;
        if (host_ns) host_ns[k] = hwhs_now_ns() - t0;
        if (cycles) cycles[k] = hwhs_rtt_cycles(&m->d);
        if (rep->status != BL_OK || rep->len != c->expected_bytes ||
            memcmp(rep + 1, c->expected + (size_t)row * c->expected_bytes, c->expected_bytes))
            r->mismatched++;
        r->done++;
    }
    return BL_OK;
}

BL_API int32_t bl_fpga_sw_rounds(const char *key, const bl_fpga_sw *c, uint64_t *cycles, uint64_t *host_ns,
                                 bl_fpga_sw_result *r) {
    struct fp *m = acquire(key);
    if (!m) return BL_ENOTFOUND;
    bl_fpga_sw_result none;
    if (!r) r = &none;
    memset(r, 0, sizeof *r);
    int32_t rc = sw_rounds(m, c, cycles, host_ns, r);
    if (rc) tl_fail(rc, key, m->error);
    release(m);
    return rc;
}

BL_API int32_t bl_fpga_abort(const char *key) {
    struct fp *m = acquire(key);
    if (!m) return BL_ENOTFOUND;
    char err[512];
    int in_flight = m->paced_active || (hwhs_rd(m->w.regs, HWHS_STATUS) & HWHS_STATUS_BUSY);
    __atomic_store_n(&m->spent, 1, __ATOMIC_RELEASE);
    if (in_flight) __atomic_store_n(&m->broken, 1, __ATOMIC_RELEASE); /* a round may be out, uncounted */
    int32_t rc = hwhs_abort(&m->d, hwhs_now_ns() + m->r.timeout_ns, err, sizeof err);
    if (rc) tl_fail(rc, key, err);
    release(m);
    return rc;
}

BL_API int32_t bl_fpga_soft_reset(const char *key) {
    struct fp *m = acquire(key);
    if (!m) return BL_ENOTFOUND;
    char err[512];
    __atomic_store_n(&m->spent, 1, __ATOMIC_RELEASE);
    __atomic_store_n(&m->broken, 1, __ATOMIC_RELEASE); /* the WQE store and QP contexts are gone */
    int32_t rc = hwhs_soft_reset(&m->d, hwhs_now_ns() + m->r.timeout_ns, err, sizeof err);
    m->paced_active = 0;
    m->cyc_pending = 0;
    if (rc) tl_fail(rc, key, err);
    release(m);
    return rc;
}

BL_API const char *bl_fpga_error(void) { return tl_error; }

BL_API void bl_fpga_wqe_encode(const bl_fpga_wqe *w, uint8_t *out64) {
    ernic_wqe e = {
        .wrid = w->wrid,
        .local_addr = w->local_addr,
        .length = w->length,
        .opcode = w->opcode,
        .remote_addr = w->remote_addr,
        .rkey = w->rkey,
        .imm_be = htonl(w->imm),
    };
    ernic_wqe_encode(&e, out64);
}
