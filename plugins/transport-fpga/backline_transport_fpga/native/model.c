/*
 * model.c -- the engine model (libbackline_hwhs_model, `backline fpga model`): a process that
 * stands in for the FPGA's programmable logic. It creates the register window (hwhs.h), and one
 * thread spins over two parts: the part of AMD's ERNIC RoCE v2 IP the engine uses, which
 * performs every WQE as a real RDMA operation through libibverbs, and the hardware-handshake
 * (HWHS) engine's state machine (docs/transport-fpga.md, "The engine model").
 *
 * The driver reaches the model only through the window: plain 32-bit stores (then a release
 * fence) into registers, and DMA memory. The model reads and writes every window word with
 * __atomic loads and stores (the window is shared between processes).
 *
 * Register writes the model has to see as events:
 *   - W1P registers (HWHS CTRL, HWHS DEMO_CTRL, ERNIC MR_COMMIT): any nonzero value is a pulse.
 *     The model acts on it first and then clears the bits it took (an atomic and-not), so once
 *     the driver reads the register as 0 the result is published: STATUS shows the start
 *     accepted (busy, or already done) or refused (axi_err), MR_STATUS shows done or failed.
 *     Polling STATUS or MR_STATUS before that can show the previous result.
 *   - Commit requests, where the same value may be written twice in a row: the driver writes
 *       WQE_COMMIT   = index | 0x80000000   (bit31: commit request; [30:0] WQE store index)
 *       RING_RESET   = index | 0x80000000   (bit31: reset request; [30:0] WQE store index)
 *       QPCTX_COMMIT = ctx | 0x40000000 [| 0x80000000 rebind]   (bit30: commit request; [2:0] ctx)
 *     and the model stores 0 into the register once it has acted (or refused: then STATUS.axi_err
 *     and ERR_CODE say why), so the driver waits for the register to read 0 before its next
 *     write. A value without the request bit is left alone.
 *   - QP_CONF bit0 is a level: its 0->1 edge creates and connects the QP, 1->0 destroys it.
 *
 * The round path (WQE_POST ... NEXT, the ERNIC's doorbell and completions) does no allocation
 * and no system call besides ibv_post_send / ibv_poll_cq / ibv_post_recv; it spins with the
 * CPU's pause instruction, as hardware would poll.
 */
#define _GNU_SOURCE
#include "hwhs.h"
#include "model.h"
#include "rdma_verbs.h"
#include "wqe.h"

#include <backline/backline.h>
#include <backline/sdk/oob.h>
#include <backline/sdk/pingpong.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)


#define N_QPS 8u
#define MAX_MRS 8
#define SQ_MAX 1024u                /* the largest SQ depth (ERNIC QUEUE_DEPTH[15:0]) */
#define RQ_MIN 16u                  /* receive entries at least */
#define DOORBELL_BATCH 32u          /* WQEs taken from one SQ per loop turn at most */
#define INFO_DEVICE_BYTES 64u
#define INFO_ERROR_BYTES 256u
#define MAX_MEM_BYTES (1ull << 36)  /* 64 GiB of DMA memory at most */
#define ALIVE_NS 200000ull          /* heartbeat period (INFO_ALIVE at least every millisecond) */
#define PARENT_NS 10000000ull       /* parent check period while idle */
#define PARENT_BUSY_NS 100000000ull /* ... and while a round is in flight (a syscall off the hot path) */
#define FRAME_LEN_OFF 8             /* bl_frame_header fields (backline.h) */
#define FRAME_DECODER_OFF 12
#define FRAME_STATUS_OFF 16
#define FRAME_FLAGS_OFF 20
#define FRAME_RESERVED_OFF 24

/* ---- state ---- */

typedef struct mr_slot {
    struct ibv_mr *mr;
    uint64_t bus, len;
    int iova; /* registered with the bus address as its iova (else: the model's pointer) */
} mr_slot;

/* One ERNIC queue pair. */
typedef struct mqp {
    unsigned idx;      /* the per-QP block; ERNIC QP number idx + 1 */
    int conf_on;       /* QP_CONF enable as last seen */
    int live;          /* a verbs queue pair exists (enabled and connected) */
    int failed;        /* error state: what is still taken completes with a flush error */
    rv_qp q;
    uint64_t sq_bus;   /* SNDQ_BUF_BASE at enable */
    uint32_t depth;    /* QUEUE_DEPTH[15:0] at enable */
    uint32_t taken;    /* STAT_CUR_SQ_PTR */
    uint32_t completed; /* CQ_HEAD_PTR */
    uint32_t inflight; /* posted to verbs, not completed */
    uint32_t recv_cnt; /* QP_RECV_CNT */
    uint16_t wrid[SQ_MAX]; /* per taken WQE (index % SQ_MAX): for its CQE */
    uint8_t op[SQ_MAX];
    rv_recv recv;      /* its receive entries (verbs.h) */
    char err[200];
} mqp;

typedef struct stored_wqe {
    int valid;
    uint32_t qp_ref, opcode, xfer_len, rkey, wrid, ring_cfg, ring_len;
    uint64_t va, offs;
} stored_wqe;

typedef struct qpctx {
    int valid;
    uint32_t qpn, depth;
    uint64_t sq_bus;
} qpctx;

/* Where replies land: the reply ring. */
typedef struct reply_ring {
    uint64_t buf;
    uint32_t stride, seq_off, len;
} reply_ring;

typedef struct engine {
    stored_wqe store[HWHS_WQE_STORE];
    qpctx ctx[HWHS_QP_CONTEXTS];
    uint64_t rounds;   /* ROUND_CNT, extended to 64 bits */
    /* STATUS */
    uint32_t state, bits;
    int busy;
    /* the run in flight (latched at its start) */
    int hw;            /* a paced run */
    stored_wqe w;
    mqp *p;
    uint64_t sq_bus;
    uint32_t sq_depth;
    uint32_t len, lstride, rstride, i;
    uint64_t dbuf;
    reply_ring rr;
    uint32_t pay_len, flags;
    uint64_t reply_to;
    uint64_t seq, t0, t1;
    uint32_t cq_target, recv_base;
    int replied;
    /* JOIN's pre-posted WQE */
    int pre_valid;
    uint32_t pre_prod;
    ernic_wqe pre_w;
    /* the reply ring of the last accepted start, for the receive path */
    int rx_valid;
    reply_ring rx;
    /* pacer */
    uint32_t cmd_cnt, k, lfsr, span, n_entries, pattern;
    uint64_t freq, gap, gap_from;
    /* trace */
    uint32_t trace_cnt, trace_sts;
} engine;

typedef struct model {
    uint8_t *win;
    size_t win_bytes;
    uint8_t *mem;
    uint64_t mem_bytes;
    rv_device dev;
    int dev_open;
    char want_dev[80];
    char no_dev[600];
    mr_slot mrs[MAX_MRS];
    int n_mrs;
    mqp qp[N_QPS];
    engine e;
} model;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

/* ---- window access ---- */

#define HR(off) ((size_t)HWHS_WIN_REGS + (size_t)(off))
#define ER(off) ((size_t)HWHS_WIN_ERNIC + (size_t)(off))
#define QR(q, off) ((size_t)HWHS_WIN_ERNIC + (size_t)ERNIC_QP_BLOCK + (size_t)(q) * ERNIC_QP_STRIDE + (size_t)(off))
#define IR(off) ((size_t)HWHS_WIN_INFO + (size_t)(off))

static inline uint32_t rd(const model *m, size_t off) {
    return __atomic_load_n((const uint32_t *)(m->win + off), __ATOMIC_ACQUIRE);
}
static inline void wr(model *m, size_t off, uint32_t v) {
    __atomic_store_n((uint32_t *)(m->win + off), v, __ATOMIC_RELEASE);
}
/* A W1P register's pulse, cleared once acted on: only the bits taken, so a pulse written
 * meanwhile stays for the next look. */
static inline void done_pulse(model *m, size_t off, uint32_t v) {
    __atomic_fetch_and((uint32_t *)(m->win + off), ~v, __ATOMIC_ACQ_REL);
}
static inline uint64_t rd64(const model *m, size_t lo) {
    return (uint64_t)rd(m, lo) | (uint64_t)rd(m, lo + 4) << 32;
}
static inline void wr64(model *m, size_t lo, uint64_t v) {
    wr(m, lo, (uint32_t)v);
    wr(m, lo + 4, (uint32_t)(v >> 32));
}

static inline uint64_t cycles_of(uint64_t ns) { return ns / (1000000000ull / HWHS_CLOCK_HZ); }

/* [bus, bus + bytes) inside DMA memory. */
static inline int span_ok(const model *m, uint64_t bus, uint64_t bytes) {
    if (bus < HWHS_MEM_BUS_BASE) return 0;
    uint64_t off = bus - HWHS_MEM_BUS_BASE;
    return off <= m->mem_bytes && bytes <= m->mem_bytes - off;
}

/* `count` slots 2^stride apart from bus, each `tail` bytes long, inside DMA memory. */
static int ring_ok(const model *m, uint64_t bus, uint32_t count, uint32_t stride, uint64_t tail) {
    if (!count || tail > m->mem_bytes) return 0;
    uint64_t last = 0;
    if (count > 1) {
        if (stride >= 40) return 0;
        last = (uint64_t)(count - 1) << stride;
    }
    return span_ok(m, bus, last + tail);
}

static inline uint8_t *bus_ptr(const model *m, uint64_t bus) { return m->mem + (bus - HWHS_MEM_BUS_BASE); }

static inline int pow2(uint32_t v) { return v && !(v & (v - 1)); }

static void put_text(model *m, size_t off, size_t cap, const char *s) {
    size_t n = strlen(s);
    if (n >= cap) n = cap - 1;
    memcpy(m->win + off, s, n);
    m->win[off + n] = 0;
}

static void info_error_v(model *m, const char *fmt, va_list ap) {
    char buf[INFO_ERROR_BYTES];
    vsnprintf(buf, sizeof buf, fmt, ap);
    put_text(m, IR(HWHS_INFO_ERROR), INFO_ERROR_BYTES, buf);
}

/* ---- the ERNIC part ---- */

static const char *ernic_op_text(uint8_t op) {
    switch (op) {
    case ERNIC_OP_WRITE: return "WRITE";
    case ERNIC_OP_WRITE_IMM: return "WRITE_IMM";
    case ERNIC_OP_SEND: return "SEND";
    case ERNIC_OP_SEND_IMM: return "SEND_IMM";
    case ERNIC_OP_READ: return "READ";
    case ERNIC_OP_SEND_INV: return "SEND_INV";
    default: return "unknown";
    }
}

/* The QP goes to its error state with `fmt` as the reason (the first reason is kept). */
__attribute__((format(printf, 3, 4))) static void qp_fail(model *m, mqp *p, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    put_text(m, IR(HWHS_INFO_ERROR), INFO_ERROR_BYTES, p->err);
    wr(m, QR(p->idx, ERNIC_QP_STATE), ERNIC_QPS_ERROR);
}

/* One completion, in order: the CQE (CQE_EN), then CQ_HEAD_PTR. */
static void qp_complete(model *m, mqp *p, uint32_t slot, uint32_t status) {
    if (rd(m, QR(p->idx, ERNIC_QP_CONF)) & ERNIC_QP_CQE_EN) {
        uint64_t bus = rd64(m, QR(p->idx, ERNIC_CQ_BUF_BASE_LO)) + (uint64_t)(p->completed % p->depth) * 4u;
        if (!(bus & 3) && span_ok(m, bus, 4)) {
            uint32_t cqe = (uint32_t)(p->wrid[slot] & 0xffu) | (uint32_t)p->op[slot] << 16 |
                           (status & 0xffu) << ERNIC_CQE_ERR_SHIFT;
            __atomic_store_n((uint32_t *)bus_ptr(m, bus), cqe, __ATOMIC_RELEASE);
        }
    }
    p->completed++;
    wr(m, QR(p->idx, ERNIC_CQ_HEAD_PTR), p->completed);
}

static const mr_slot *mr_find(const model *m, uint64_t bus, uint64_t len) {
    for (int i = 0; i < m->n_mrs; ++i) {
        const mr_slot *r = &m->mrs[i];
        if (bus >= r->bus && len <= r->len && bus - r->bus <= r->len - len) return r;
    }
    return NULL;
}

/* Post WQE number `index` to verbs: 0, or the work-completion status of a local error (the
 * QP's error text says which). */
static uint32_t qp_post(model *m, mqp *p, const ernic_wqe *w, uint32_t index) {
    struct ibv_sge sge;
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    switch (w->opcode) {
    case ERNIC_OP_WRITE: wr.opcode = IBV_WR_RDMA_WRITE; break;
    case ERNIC_OP_WRITE_IMM: wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM; wr.imm_data = w->imm_be; break;
    case ERNIC_OP_SEND: wr.opcode = IBV_WR_SEND; break;
    case ERNIC_OP_SEND_IMM: wr.opcode = IBV_WR_SEND_WITH_IMM; wr.imm_data = w->imm_be; break;
    case ERNIC_OP_READ: wr.opcode = IBV_WR_RDMA_READ; break;
    default:
        qp_fail(m, p, "ERNIC QP %u: WQE %u has opcode %u (%s), which the model does not perform", p->idx + 1, index,
                w->opcode, ernic_op_text(w->opcode));
        return IBV_WC_LOC_QP_OP_ERR;
    }
    int inl = 0;
    if (w->length) {
        const mr_slot *r = mr_find(m, w->local_addr, w->length);
        if (!r) {
            qp_fail(m, p, "ERNIC QP %u: WQE %u's local buffer (bus 0x%llx, %u bytes) is in no registered memory region "
                    "(MR_COMMIT)", p->idx + 1, index, (unsigned long long)w->local_addr, w->length);
            return IBV_WC_LOC_PROT_ERR;
        }
        uint8_t *ptr = bus_ptr(m, w->local_addr);
        inl = w->opcode != ERNIC_OP_READ && w->length <= p->q.max_inline;
        /* an inline payload is read by the provider at a virtual address, the rest in the MR's space */
        sge.addr = inl || !r->iova ? (uint64_t)(uintptr_t)ptr : w->local_addr;
        sge.length = w->length;
        sge.lkey = r->mr->lkey;
        wr.sg_list = &sge;
        wr.num_sge = 1;
    }
    wr.wr.rdma.remote_addr = w->remote_addr;
    wr.wr.rdma.rkey = w->rkey;
    wr.wr_id = index;
    wr.send_flags = IBV_SEND_SIGNALED | (inl ? IBV_SEND_INLINE : 0);
    int e = ibv_post_send(p->q.qp, &wr, &bad);
    if (BL_UNLIKELY(e)) {
        qp_fail(m, p, "ERNIC QP %u: ibv_post_send of WQE %u (%s): %s", p->idx + 1, index, ernic_op_text(w->opcode),
                strerror(e));
        return IBV_WC_GENERAL_ERR;
    }
    return 0;
}

/* The doorbell: take what SQ_PROD_IDX has rung past STAT_CUR_SQ_PTR. */
static void qp_doorbell(model *m, mqp *p) {
    uint32_t prod = rd(m, QR(p->idx, ERNIC_SQ_PROD_IDX));
    if (prod == p->taken) return;
    if (BL_UNLIKELY(prod - p->taken > p->depth)) {
        qp_fail(m, p, "ERNIC QP %u: SQ_PROD_IDX %u is %u entries past the %u taken, but the SQ holds %u", p->idx + 1, prod,
                prod - p->taken, p->taken, p->depth);
        p->taken = prod; /* not performed */
        wr(m, QR(p->idx, ERNIC_STAT_CUR_SQ_PTR), p->taken);
        return;
    }
    for (unsigned n = 0; n < DOORBELL_BATCH && prod != p->taken; ++n) {
        if (p->failed ? p->inflight != 0 : p->inflight >= p->q.sq_depth) break; /* completions stay in order */
        uint32_t slot = p->taken % SQ_MAX;
        uint8_t raw[ERNIC_WQE_BYTES];
        memcpy(raw, bus_ptr(m, p->sq_bus + (uint64_t)(p->taken % p->depth) * ERNIC_WQE_BYTES), sizeof raw);
        ernic_wqe w;
        ernic_wqe_decode(raw, &w);
        p->wrid[slot] = w.wrid;
        p->op[slot] = w.opcode;
        if (p->failed) {
            qp_complete(m, p, slot, IBV_WC_WR_FLUSH_ERR);
        } else {
            uint32_t st = qp_post(m, p, &w, p->taken);
            if (st) {
                if (p->inflight) break; /* completes (flushed) once the earlier ones have */
                qp_complete(m, p, slot, st);
            } else {
                p->inflight++;
            }
        }
        p->taken++;
    }
    wr(m, QR(p->idx, ERNIC_STAT_CUR_SQ_PTR), p->taken);
}

static void qp_poll_send(model *m, mqp *p) {
    if (!p->inflight) return;
    struct ibv_wc wc[8];
    int got = ibv_poll_cq(p->q.cq, 8, wc);
    if (BL_UNLIKELY(got < 0)) {
        qp_fail(m, p, "ERNIC QP %u: ibv_poll_cq failed on the send completion queue", p->idx + 1);
        while (p->inflight) { /* they will not be reported: complete them as failed */
            qp_complete(m, p, p->completed % SQ_MAX, IBV_WC_GENERAL_ERR);
            p->inflight--;
        }
        return;
    }
    for (int i = 0; i < got; ++i) {
        uint32_t index = (uint32_t)wc[i].wr_id;
        if (wc[i].status != IBV_WC_SUCCESS)
            qp_fail(m, p, "ERNIC QP %u: WQE %u (%s) completed with %s (verbs status %d)", p->idx + 1, index,
                    ernic_op_text(p->op[index % SQ_MAX]), ibv_wc_status_str(wc[i].status), (int)wc[i].status);
        qp_complete(m, p, index % SQ_MAX, (uint32_t)wc[i].status);
        if (p->inflight) p->inflight--;
    }
}

/* The reply ring from the live registers (before any start): 0 when it is not usable. */
static int reply_ring_regs(const model *m, reply_ring *r) {
    uint32_t cfg = rd(m, HR(HWHS_WQE_RING_CFG));
    r->len = cfg & 1u ? rd(m, HR(HWHS_WQE_RING_LEN)) & 0xffffu : 1u;
    r->buf = rd64(m, HR(HWHS_REPLY_BUF_LO));
    r->stride = rd(m, HR(HWHS_REPLY_RING)) & 63u;
    r->seq_off = rd(m, HR(HWHS_REPLY_SEQ_OFF));
    return pow2(r->len) && !((r->buf + r->seq_off) & 7) && (r->len == 1 || r->stride >= 3) &&
           ring_ok(m, r->buf, r->len, r->stride, (uint64_t)r->seq_off + 8);
}

/* An incoming WRITE_WITH_IMM: its immediate is the low 32 bits of the round's sequence number.
 * Extended to 64 bits against the engine's expected one (the nearest value with those low
 * bits), it goes into the reply slot it addresses at REPLY_SEQ_OFF, with release order: the
 * rdma coprocessor does not write that word; this is ERNIC's delivery of the immediate. */
static void deliver_reply(model *m, uint32_t imm) {
    engine *e = &m->e;
    uint64_t ref;
    if (e->busy) {
        ref = e->seq;
    } else {
        uint32_t reg = rd(m, HR(HWHS_ROUND_CNT));
        ref = (reg == (uint32_t)e->rounds ? e->rounds : reg) + 1;
    }
    int32_t d = (int32_t)(imm - (uint32_t)ref);
    uint64_t seq = d < 0 && (uint64_t)(-(int64_t)d) >= ref ? imm : ref + (uint64_t)(int64_t)d;
    if (!seq) return;
    reply_ring r;
    if (e->rx_valid)
        r = e->rx;
    else if (!reply_ring_regs(m, &r))
        return;
    uint64_t slot = (seq - 1) & (r.len - 1);
    uint64_t bus = r.buf + (slot << r.stride) + r.seq_off;
    __atomic_store_n((uint64_t *)bus_ptr(m, bus), seq, __ATOMIC_RELEASE);
}

static void qp_poll_recv(model *m, mqp *p) {
    struct ibv_wc wc[8];
    int got = ibv_poll_cq(p->q.rcq, 8, wc);
    if (got == 0) return;
    if (BL_UNLIKELY(got < 0)) {
        qp_fail(m, p, "ERNIC QP %u: ibv_poll_cq failed on the receive completion queue", p->idx + 1);
        return;
    }
    for (int i = 0; i < got; ++i) {
        if (BL_UNLIKELY(wc[i].status != IBV_WC_SUCCESS)) {
            qp_fail(m, p, "ERNIC QP %u: a receive completed with %s (verbs status %d)", p->idx + 1,
                    ibv_wc_status_str(wc[i].status), (int)wc[i].status);
            continue;
        }
        if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM) deliver_reply(m, ntohl(wc[i].imm_data));
        p->recv_cnt++;
    }
    wr(m, QR(p->idx, ERNIC_QP_RECV_CNT), p->recv_cnt);
    int e = p->failed ? 0 : rv_recv_consumed(&p->q, &p->recv, (uint32_t)got);
    if (BL_UNLIKELY(e)) qp_fail(m, p, "ERNIC QP %u: ibv_post_recv: %s", p->idx + 1, strerror(e));
}

static void qp_disable(model *m, mqp *p) {
    rv_qp_destroy(&p->q);
    p->live = 0;
    p->failed = 0;
    p->inflight = 0;
    wr(m, QR(p->idx, ERNIC_QP_QPN), 0);
    wr(m, QR(p->idx, ERNIC_QP_STATE), ERNIC_QPS_RESET);
}

/* QP_CONF enable: create the verbs QP, connect it to DEST_* with the PSNs, post its receives. */
static void qp_enable(model *m, mqp *p) {
    unsigned q = p->idx;
    char err[400];
    p->failed = 0;
    p->err[0] = 0;
    wr(m, QR(q, ERNIC_QP_STATE), ERNIC_QPS_CONNECTING);
    if (!m->dev_open) {
        qp_fail(m, p, "ERNIC QP %u: cannot enable: the model has no verbs device (%s): %s", q + 1, m->want_dev, m->no_dev);
        return;
    }
    uint32_t qd = rd(m, QR(q, ERNIC_QUEUE_DEPTH));
    uint32_t depth = qd & 0xffffu, rq = qd >> 16;
    if (rq < RQ_MIN) rq = RQ_MIN;
    uint64_t sq = rd64(m, QR(q, ERNIC_SNDQ_BUF_BASE_LO));
    uint32_t conf = rd(m, QR(q, ERNIC_QP_CONF));
    uint32_t mtu = ((conf >> ERNIC_QP_PMTU_SHIFT) & 7u) + 1u;
    if (depth < 1 || depth > SQ_MAX) {
        qp_fail(m, p, "ERNIC QP %u: SQ depth %u (QUEUE_DEPTH[15:0]) is not 1 to %u", q + 1, depth, SQ_MAX);
        return;
    }
    if (!span_ok(m, sq, (uint64_t)depth * ERNIC_WQE_BYTES)) {
        qp_fail(m, p, "ERNIC QP %u: the SQ (SNDQ_BUF_BASE 0x%llx, %u entries of %u bytes) is outside DMA memory "
                "(bus 0x%llx, %llu bytes)", q + 1, (unsigned long long)sq, depth, ERNIC_WQE_BYTES,
                (unsigned long long)HWHS_MEM_BUS_BASE, (unsigned long long)m->mem_bytes);
        return;
    }
    if (mtu > IBV_MTU_4096) {
        qp_fail(m, p, "ERNIC QP %u: path MTU code %u (QP_CONF[10:8] + 1) is not 1 (256) to 5 (4096)", q + 1, mtu);
        return;
    }
    if (rv_qp_create(&m->dev, &p->q, rq, err, sizeof err)) {
        qp_fail(m, p, "ERNIC QP %u: %s", q + 1, err);
        return;
    }
    p->q.psn = rd(m, QR(q, ERNIC_SQ_PSN)) & 0xffffffu;
    rv_peer peer;
    memset(&peer, 0, sizeof peer);
    peer.qpn = rd(m, QR(q, ERNIC_DEST_QP_CONF)) & 0xffffffu;
    peer.psn = rd(m, QR(q, ERNIC_RQ_PSN)) & 0xffffffu;
    for (unsigned i = 0; i < 16; ++i)
        peer.gid[i] = __atomic_load_n(m->win + QR(q, ERNIC_DEST_GID) + i, __ATOMIC_ACQUIRE);
    peer.mtu = mtu;
    if (rv_qp_connect(&m->dev, &p->q, &peer, err, sizeof err)) {
        rv_qp_destroy(&p->q);
        qp_fail(m, p, "ERNIC QP %u: %s", q + 1, err);
        return;
    }
    if (rv_recv_fill(&p->q, &p->recv, err, sizeof err)) {
        rv_qp_destroy(&p->q);
        qp_fail(m, p, "ERNIC QP %u: %s", q + 1, err);
        return;
    }
    p->sq_bus = sq;
    p->depth = depth;
    p->taken = p->completed = rd(m, QR(q, ERNIC_SQ_PROD_IDX)); /* what was rung before the enable is not performed */
    p->inflight = 0;
    p->recv_cnt = 0;
    p->live = 1;
    wr(m, QR(q, ERNIC_STAT_CUR_SQ_PTR), p->taken);
    wr(m, QR(q, ERNIC_CQ_HEAD_PTR), p->completed);
    wr(m, QR(q, ERNIC_QP_RECV_CNT), 0);
    wr(m, QR(q, ERNIC_QP_QPN), p->q.qp->qp_num);
    wr(m, QR(q, ERNIC_QP_STATE), ERNIC_QPS_READY);
}

__attribute__((format(printf, 2, 3))) static int mr_fail(model *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    info_error_v(m, fmt, ap);
    va_end(ap);
    wr(m, ER(ERNIC_MR_STATUS), ERNIC_MR_FAILED);
    return -1;
}

static int mr_publish(model *m, const mr_slot *r) {
    wr(m, ER(ERNIC_MR_LKEY), r->mr->lkey);
    wr(m, ER(ERNIC_MR_RKEY), r->mr->rkey);
    wr64(m, ER(ERNIC_MR_REMOTE_LO), r->iova ? r->bus : (uint64_t)(uintptr_t)bus_ptr(m, r->bus));
    wr(m, ER(ERNIC_MR_STATUS), ERNIC_MR_DONE);
    return 0;
}

/* MR_COMMIT: register [MR_ADDR, MR_ADDR + MR_LEN) of DMA memory. */
static int mr_commit(model *m) {
    wr(m, ER(ERNIC_MR_STATUS), ERNIC_MR_BUSY);
    uint64_t bus = rd64(m, ER(ERNIC_MR_ADDR_LO)), len = rd64(m, ER(ERNIC_MR_LEN_LO));
    if (!m->dev_open)
        return mr_fail(m, "memory registration: the model has no verbs device (%s): %s", m->want_dev, m->no_dev);
    if (!len || !span_ok(m, bus, len))
        return mr_fail(m, "memory registration: MR_ADDR 0x%llx + MR_LEN %llu is not inside DMA memory (bus 0x%llx, "
                       "%llu bytes)", (unsigned long long)bus, (unsigned long long)len,
                       (unsigned long long)HWHS_MEM_BUS_BASE, (unsigned long long)m->mem_bytes);
    for (int i = 0; i < m->n_mrs; ++i)
        if (m->mrs[i].bus == bus && m->mrs[i].len == len) return mr_publish(m, &m->mrs[i]); /* the same region again */
    if (m->n_mrs == MAX_MRS)
        return mr_fail(m, "memory registration: %d regions are registered already, the most the model keeps", MAX_MRS);
    const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    mr_slot *r = &m->mrs[m->n_mrs];
    r->bus = bus;
    r->len = len;
    r->iova = 1;
    r->mr = ibv_reg_mr_iova(m->dev.pd, bus_ptr(m, bus), len, bus, access);
    if (!r->mr) {
        r->iova = 0;
        r->mr = ibv_reg_mr(m->dev.pd, bus_ptr(m, bus), len, access);
    }
    if (!r->mr) {
        int e = errno;
        return mr_fail(m, "memory registration: ibv_reg_mr of %llu bytes at bus 0x%llx on %s: %s%s",
                       (unsigned long long)len, (unsigned long long)bus, m->dev.name, strerror(e),
                       e == ENOMEM || e == EPERM ? " (raise the locked-memory limit: ulimit -l)" : "");
    }
    m->n_mrs++;
    return mr_publish(m, r);
}

/* ---- the HWHS part ---- */

static void pub_status(model *m) {
    const engine *e = &m->e;
    wr(m, HR(HWHS_STATUS), (e->state & HWHS_STATUS_STATE_MASK) | (e->busy ? HWHS_STATUS_BUSY : 0u) | e->bits);
}

static void set_state(model *m, uint32_t s) {
    m->e.state = s;
    pub_status(m);
}

/* ERR_CODE with its text in INFO_ERROR, and a STATUS bit (axi_err or timeout). */
static void eng_error_v(model *m, uint32_t code, uint32_t bit, const char *fmt, va_list ap) {
    info_error_v(m, fmt, ap);
    wr(m, HR(HWHS_ERR_CODE), code);
    m->e.bits |= bit;
    pub_status(m);
}

__attribute__((format(printf, 3, 4))) static void eng_flag(model *m, uint32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    eng_error_v(m, code, HWHS_STATUS_AXI_ERR, fmt, ap);
    va_end(ap);
}

/* The run in flight ends (IDLE, not busy); a paced run's DEMO_STS says done (and aborted). */
static void run_end(model *m, int aborted) {
    engine *e = &m->e;
    if (e->busy && e->hw) wr(m, HR(HWHS_DEMO_STS), HWHS_DEMO_DONE | (aborted ? HWHS_DEMO_ABORTED : 0u));
    e->busy = 0;
    e->hw = 0;
    e->state = HWHS_S_IDLE;
    pub_status(m);
}

/* A round that cannot finish: STATUS.timeout with the code, and the run ends. */
__attribute__((format(printf, 3, 4))) static void round_fail(model *m, uint32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    eng_error_v(m, code, HWHS_STATUS_TIMEOUT, fmt, ap);
    va_end(ap);
    m->e.pre_valid = 0;
    run_end(m, 0);
}

/* A start refused by its checks: axi_err with the code, back to IDLE (a paced run: DEMO_STS done). */
__attribute__((format(printf, 4, 5))) static int start_fail(model *m, int hw, uint32_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    eng_error_v(m, code, HWHS_STATUS_AXI_ERR, fmt, ap);
    va_end(ap);
    if (hw) wr(m, HR(HWHS_DEMO_STS), HWHS_DEMO_DONE);
    set_state(m, HWHS_S_IDLE);
    return -1;
}

static void gap_log_clear(model *m) {
    for (unsigned k = 0; k < HWHS_GAP_LOG_ENTRIES; ++k) wr(m, HR(HWHS_GAP_LOG + 4u * k), 0);
}

static void trace_clear(model *m) {
    m->e.trace_cnt = 0;
    m->e.trace_sts = 0;
    wr(m, HR(HWHS_TRACE_CNT), 0);
    wr(m, HR(HWHS_TRACE_STS), 0);
}

/* CTRL abort: IDLE from any state. */
static void eng_abort(model *m) {
    m->e.pre_valid = 0;
    run_end(m, 1);
}

/* CTRL soft reset: abort, then clear the WQE store, the QP contexts, the counters, the trace and
 * the pacer's state (DEMO_STS, DEMO_ERR, GAP_LOG; its configuration registers and the ERNIC stay). */
static void soft_reset(model *m) {
    engine *e = &m->e;
    int paced = e->busy && e->hw;
    eng_abort(m);
    memset(e->store, 0, sizeof e->store);
    memset(e->ctx, 0, sizeof e->ctx);
    e->rounds = 0;
    e->bits = 0;
    e->rx_valid = 0;
    wr(m, HR(HWHS_ROUND_CNT), 0);
    wr(m, HR(HWHS_RING_IDX), 0);
    wr(m, HR(HWHS_RTT_LO), 0);
    wr(m, HR(HWHS_RTT_HI), 0);
    trace_clear(m);
    /* a paced run it ended still reads done + aborted, so the driver waiting for it sees why */
    wr(m, HR(HWHS_DEMO_STS), paced ? HWHS_DEMO_DONE | HWHS_DEMO_ABORTED : 0u);
    wr(m, HR(HWHS_DEMO_ERR), 0);
    gap_log_clear(m);
    wr(m, HR(HWHS_ERR_CODE), HWHS_E_NONE);
    pub_status(m);
}

static uint8_t ernic_opcode(uint32_t hwhs_op) {
    switch (hwhs_op) {
    case 1: return ERNIC_OP_READ;
    case 2: return ERNIC_OP_SEND;
    case 3: return ERNIC_OP_WRITE_IMM;
    default: return ERNIC_OP_WRITE;
    }
}

/* The stored WQE with the ring applied for ring index i, round seq. */
static void build_wqe(const engine *e, uint32_t i, uint64_t seq, ernic_wqe *w) {
    w->wrid = (uint16_t)e->w.wrid;
    w->local_addr = e->w.offs + ((uint64_t)i << e->lstride);
    w->remote_addr = e->w.va + ((uint64_t)i << e->rstride);
    w->length = e->w.xfer_len;
    w->opcode = ernic_opcode(e->w.opcode);
    w->rkey = e->w.rkey;
    w->imm_be = e->w.opcode == 3 ? htonl((uint32_t)seq) : 0;
}

static int wqe_same(const ernic_wqe *a, const ernic_wqe *b) {
    return a->wrid == b->wrid && a->local_addr == b->local_addr && a->length == b->length && a->opcode == b->opcode &&
           a->remote_addr == b->remote_addr && a->rkey == b->rkey && a->imm_be == b->imm_be;
}

static void sq_write(model *m, uint32_t prod, const ernic_wqe *w) {
    const engine *e = &m->e;
    uint8_t raw[ERNIC_WQE_BYTES];
    ernic_wqe_encode(w, raw);
    memcpy(bus_ptr(m, e->sq_bus + (uint64_t)(prod % e->sq_depth) * ERNIC_WQE_BYTES), raw, sizeof raw);
}

/* WQE_POST and RING_SQ: the round's WQE into the next SQ entry (unless JOIN put it there
 * already), SQ_PROD_IDX + 1, the RTT timer starts; then WAIT_RPL. */
static void round_post(model *m) {
    engine *e = &m->e;
    mqp *p = e->p;
    set_state(m, HWHS_S_WQE_POST);
    ernic_wqe w;
    build_wqe(e, e->i, e->seq, &w);
    uint32_t prod = rd(m, QR(p->idx, ERNIC_SQ_PROD_IDX));
    if (!(e->pre_valid && e->pre_prod == prod && wqe_same(&e->pre_w, &w))) sq_write(m, prod, &w);
    e->pre_valid = 0;
    set_state(m, HWHS_S_RING_SQ);
    e->cq_target = prod + 1;
    e->recv_base = p->recv_cnt;
    e->replied = 0;
    __atomic_thread_fence(__ATOMIC_RELEASE);
    e->t0 = cycles_of(bl_pingpong_now_ns());
    wr(m, QR(p->idx, ERNIC_SQ_PROD_IDX), prod + 1);
    set_state(m, HWHS_S_WAIT_RPL);
    if (p->live) qp_doorbell(m, p); /* the ERNIC takes it at once */
}

static const uint8_t *table_entry(const model *m, uint32_t k) {
    return m->win + HWHS_WIN_TABLE + (size_t)(k % m->e.n_entries) * HWHS_TABLE_ENTRY;
}

static uint32_t entry_len(const uint8_t *p) {
    uint32_t v = (uint32_t)ernic_get_le(p, 4);
    return v > HWHS_TABLE_PAYLOAD_MAX ? HWHS_TABLE_PAYLOAD_MAX : v;
}

/* hw-loop: round k writes its request frame into ring slot i (the sequence number last), then posts. */
static void hw_round_begin(model *m) {
    engine *e = &m->e;
    const uint8_t *ent = table_entry(m, e->k);
    uint32_t in_len = entry_len(ent);
    e->seq = e->rounds + 1;
    uint8_t *f = bus_ptr(m, e->dbuf + ((uint64_t)e->i << e->lstride));
    set_state(m, HWHS_S_WQE_POST);
    __atomic_store_n((uint32_t *)(f + FRAME_LEN_OFF), in_len, __ATOMIC_RELAXED);
    __atomic_store_n((uint32_t *)(f + FRAME_DECODER_OFF), e->pattern & 0xffu, __ATOMIC_RELAXED);
    __atomic_store_n((uint32_t *)(f + FRAME_STATUS_OFF), 0u, __ATOMIC_RELAXED);
    __atomic_store_n((uint32_t *)(f + FRAME_FLAGS_OFF), 0u, __ATOMIC_RELAXED);
    __atomic_store_n((uint64_t *)(f + FRAME_RESERVED_OFF), 0ull, __ATOMIC_RELAXED);
    memcpy(f + BL_FRAME_HEADER_BYTES, ent + 8, in_len);
    __atomic_store_n((uint64_t *)f, e->seq, __ATOMIC_RELEASE);
    round_post(m);
}

/* The pacer steps its LFSR and chooses the gap before round k; GAP (or at once, back to back). */
static void hw_gap(model *m) {
    engine *e = &m->e;
    e->lfsr = bl_pingpong_lfsr_next(e->lfsr);
    e->gap = e->freq + (e->lfsr & e->span);
    if (e->k < HWHS_GAP_LOG_ENTRIES) wr(m, HR(HWHS_GAP_LOG + 4u * e->k), (uint32_t)e->gap);
    if (!e->gap) {
        hw_round_begin(m);
        return;
    }
    set_state(m, HWHS_S_GAP);
}

/* JOIN, DAT_TX, NEXT: the round is over (its reply seen, or its send completed). */
static void round_finish(model *m) {
    engine *e = &m->e;
    if (e->flags & HWHS_FLAG_REPOST_WQE) { /* JOIN: the next ring index's WQE into the next SQ entry */
        set_state(m, HWHS_S_JOIN);
        ernic_wqe w;
        uint32_t next_i = (e->i + 1) & (e->len - 1);
        uint32_t prod = rd(m, QR(e->p->idx, ERNIC_SQ_PROD_IDX));
        build_wqe(e, next_i, e->seq + 1, &w);
        sq_write(m, prod, &w);
        e->pre_valid = 1;
        e->pre_prod = prod;
        e->pre_w = w;
    }
    if (e->hw && e->replied) { /* DAT_TX: the reply against the table's expected one */
        set_state(m, HWHS_S_DAT_TX);
        const uint8_t *ent = table_entry(m, e->k);
        uint32_t want = entry_len(ent + 4);
        const uint8_t *r = bus_ptr(m, e->rr.buf + ((uint64_t)e->i << e->rr.stride));
        uint32_t len = __atomic_load_n((const uint32_t *)(r + FRAME_LEN_OFF), __ATOMIC_ACQUIRE);
        int32_t status = __atomic_load_n((const int32_t *)(r + FRAME_STATUS_OFF), __ATOMIC_ACQUIRE);
        if (len != want || status != 0 || memcmp(r + BL_FRAME_HEADER_BYTES, ent + 16, want))
            wr(m, HR(HWHS_DEMO_ERR), rd(m, HR(HWHS_DEMO_ERR)) + 1);
    }
    set_state(m, HWHS_S_NEXT); /* NEXT */
    e->rounds++;
    wr(m, HR(HWHS_ROUND_CNT), (uint32_t)e->rounds);
    uint64_t rtt = e->t1 - e->t0;
    wr(m, HR(HWHS_RTT_LO), (uint32_t)rtt);
    wr(m, HR(HWHS_RTT_HI), (uint32_t)(rtt >> 32));
    if (!(rd(m, HR(HWHS_TRACE_CTRL)) & HWHS_TRACE_CLEAR)) {
        if (e->trace_cnt < HWHS_TRACE_ENTRIES) {
            uint16_t v = rtt > HWHS_TRACE_MAX ? (uint16_t)HWHS_TRACE_MAX : (uint16_t)rtt;
            if (rtt > HWHS_TRACE_MAX) e->trace_sts |= HWHS_TRACE_SATURATED;
            __atomic_store_n((uint16_t *)(m->win + HWHS_WIN_TRACE + 2u * (size_t)e->trace_cnt), v, __ATOMIC_RELAXED);
            e->trace_cnt++;
            wr(m, HR(HWHS_TRACE_STS), e->trace_sts);
            wr(m, HR(HWHS_TRACE_CNT), e->trace_cnt);
        } else if (!(e->trace_sts & HWHS_TRACE_FULL)) {
            e->trace_sts |= HWHS_TRACE_FULL;
            wr(m, HR(HWHS_TRACE_STS), e->trace_sts);
        }
    }
    e->i = (e->i + 1) & (e->len - 1);
    wr(m, HR(HWHS_RING_IDX), e->i);
    if (e->hw && ++e->k < e->cmd_cnt) {
        e->gap_from = cycles_of(bl_pingpong_now_ns()); /* the gap counts from this NEXT */
        hw_gap(m);
        return;
    }
    if (e->replied) e->bits |= HWHS_STATUS_REPLY_SEEN;
    e->bits |= HWHS_STATUS_DONE;
    run_end(m, 0);
}

/* One look at the state in flight. */
static void engine_step(model *m, uint64_t cyc) {
    engine *e = &m->e;
    mqp *p = e->p;
    if (e->state == HWHS_S_GAP) {
        if (cyc - e->gap_from >= e->gap) hw_round_begin(m);
        return;
    }
    if (e->state == HWHS_S_WAIT_RPL) {
        if (BL_UNLIKELY(!p->live)) {
            round_fail(m, HWHS_E_WQE_FAILED, "ERNIC QP %u was disabled with round %llu's WQE in flight", p->idx + 1,
                       (unsigned long long)e->seq);
            return;
        }
        if (BL_UNLIKELY(p->failed)) {
            round_fail(m, HWHS_E_WQE_FAILED, "the ERNIC failed round %llu's WQE: %s", (unsigned long long)e->seq, p->err);
            return;
        }
        if ((int32_t)(p->completed - e->cq_target) >= 0) {
            if (e->flags & HWHS_FLAG_COMPLETE_ON_SEND) {
                e->t1 = cyc;
                round_finish(m);
                return;
            }
            set_state(m, HWHS_S_POLL_RPL); /* and look for the reply at once */
        }
    }
    if (e->state == HWHS_S_POLL_RPL) {
        int got;
        if (e->flags & HWHS_FLAG_REPLY_POLL) {
            uint64_t at = e->rr.buf + ((uint64_t)e->i << e->rr.stride) + e->rr.seq_off;
            got = __atomic_load_n((const uint64_t *)bus_ptr(m, at), __ATOMIC_ACQUIRE) == e->seq;
        } else {
            got = p->recv_cnt != e->recv_base;
        }
        if (got) {
            e->t1 = cyc;
            e->replied = 1;
            round_finish(m);
            return;
        }
        if (BL_UNLIKELY(!p->live || p->failed)) {
            round_fail(m, HWHS_E_WQE_FAILED, "ERNIC QP %u %s before round %llu's reply: %s", p->idx + 1,
                       p->live ? "failed" : "was disabled", (unsigned long long)e->seq,
                       p->live ? p->err : "no reply will come");
            return;
        }
    } else if (e->state != HWHS_S_WAIT_RPL) {
        return;
    }
    if (e->reply_to && cyc - e->t0 >= e->reply_to)
        round_fail(m, HWHS_E_REPLY_TIMEOUT, "no reply to round %llu within REPLY_TO (%llu cycles)",
                   (unsigned long long)e->seq, (unsigned long long)e->reply_to);
}

/* The checks of a start (docs/transport-fpga.md, "The engine model"); on success the run's
 * configuration is latched into the engine. 0, or -1 after start_fail. */
static int start_checks(model *m, int hw) {
    engine *e = &m->e;
    uint32_t k = rd(m, HR(HWHS_RUN_WQE_IDX));
    if (k >= HWHS_WQE_STORE || !e->store[k].valid)
        return start_fail(m, hw, HWHS_E_NO_WQE, "start with no WQE committed at RUN_WQE_IDX %u", k);
    const stored_wqe *w = &e->store[k];
    if (w->qp_ref >= HWHS_QP_CONTEXTS || !e->ctx[w->qp_ref].valid)
        return start_fail(m, hw, HWHS_E_NO_QPCTX, "WQE %u uses QP context %u, which was never committed (QPCTX_COMMIT)",
                          k, w->qp_ref);
    const qpctx *c = &e->ctx[w->qp_ref];
    if (c->qpn < 1 || c->qpn > N_QPS)
        return start_fail(m, hw, HWHS_E_CONFIG, "QP context %u names ERNIC QP %u; there are QPs 1 to %u", w->qp_ref,
                          c->qpn, N_QPS);
    if (c->depth < 1 || c->depth > SQ_MAX)
        return start_fail(m, hw, HWHS_E_CONFIG, "QP context %u has SQ_DEPTH %u, not 1 to %u", w->qp_ref, c->depth, SQ_MAX);
    mqp *p = &m->qp[c->qpn - 1];
    uint32_t conf = rd(m, QR(p->idx, ERNIC_QP_CONF)), adv = rd(m, QR(p->idx, ERNIC_QP_ADV_CONF));
    if (!(conf & ERNIC_QP_ENABLE))
        return start_fail(m, hw, HWHS_E_QP_NOT_HWHS, "ERNIC QP %u is not enabled (QP_CONF bit0)", c->qpn);
    if (conf & ERNIC_QP_HW_HSK_DIS)
        return start_fail(m, hw, HWHS_E_QP_NOT_HWHS, "ERNIC QP %u has HW_HSK_DIS set: software owns its send queue",
                          c->qpn);
    if (conf & ERNIC_QP_CQE_EN)
        return start_fail(m, hw, HWHS_E_QP_NOT_HWHS, "ERNIC QP %u has CQE_EN set: not hardware-handshake mode", c->qpn);
    if (adv & ERNIC_ADV_SW_OVERRIDE)
        return start_fail(m, hw, HWHS_E_QP_NOT_HWHS, "ERNIC QP %u has the software override (QP_ADV_CONF bit0) set",
                          c->qpn);
    if (!p->live || p->failed)
        return start_fail(m, hw, HWHS_E_QP_NOT_HWHS, "ERNIC QP %u is not ready: %s", c->qpn,
                          p->failed ? p->err : "not connected");
    if (c->sq_bus != p->sq_bus || c->depth != p->depth)
        return start_fail(m, hw, HWHS_E_CONFIG, "QP context %u's SQ (bus 0x%llx, %u entries) is not ERNIC QP %u's "
                          "(SNDQ_BUF_BASE 0x%llx, QUEUE_DEPTH %u)", w->qp_ref, (unsigned long long)c->sq_bus, c->depth,
                          c->qpn, (unsigned long long)p->sq_bus, p->depth);
    if (w->opcode > 3)
        return start_fail(m, hw, HWHS_E_CONFIG, "WQE %u has WQE_OPCODE %u; 0 write, 1 read, 2 send, 3 write with "
                          "immediate", k, w->opcode);
    uint32_t cfg = rd(m, HR(HWHS_WQE_RING_CFG));
    uint32_t len = cfg & 1u ? rd(m, HR(HWHS_WQE_RING_LEN)) & 0xffffu : 1u;
    uint32_t lstride = (cfg >> 8) & 63u, rstride = (cfg >> 16) & 63u;
    if (!pow2(len))
        return start_fail(m, hw, HWHS_E_ADDRESS, "WQE_RING_LEN %u is not a power of two", len);
    uint32_t i = rd(m, HR(HWHS_RING_IDX));
    if (i >= len) return start_fail(m, hw, HWHS_E_ADDRESS, "RING_IDX %u is outside the ring of %u buffers", i, len);
    if (!ring_ok(m, w->offs, len, lstride, w->xfer_len))
        return start_fail(m, hw, HWHS_E_ADDRESS, "the WQE's local buffers (WQE_OFFS 0x%llx, %u of %u bytes, 2^%u apart) "
                          "are outside DMA memory (bus 0x%llx, %llu bytes)", (unsigned long long)w->offs, len,
                          w->xfer_len, lstride, (unsigned long long)HWHS_MEM_BUS_BASE, (unsigned long long)m->mem_bytes);
    if (len > 1 && rstride >= 40)
        return start_fail(m, hw, HWHS_E_ADDRESS, "remote stride 2^%u (WQE_RING_CFG[21:16]) is too large", rstride);
    uint32_t seq_off = rd(m, HR(HWHS_REPLY_SEQ_OFF));
    uint64_t dbuf = rd64(m, HR(HWHS_DBUF_LO));
    reply_ring rr = {rd64(m, HR(HWHS_REPLY_BUF_LO)), rd(m, HR(HWHS_REPLY_RING)) & 63u, seq_off, len};
    uint32_t pay_len = rd(m, HR(HWHS_PAY_LEN));
    uint32_t cmd = 0, depth = 0;
    if (hw) {
        if (!pay_len || pay_len % 64u || pay_len > HWHS_MAX_PAY_LEN)
            return start_fail(m, hw, HWHS_E_CONFIG, "PAY_LEN %u is not a multiple of 64 from 64 to %u", pay_len,
                              HWHS_MAX_PAY_LEN);
        if ((dbuf & 7) || (len > 1 && (lstride < 3 || (1ull << lstride) < pay_len)) ||
            !ring_ok(m, dbuf, len, lstride, pay_len))
            return start_fail(m, hw, HWHS_E_ADDRESS, "the request ring (DBUF 0x%llx, %u frames of PAY_LEN %u bytes, 2^%u "
                              "apart) is misaligned, overlapping or outside DMA memory", (unsigned long long)dbuf, len,
                              pay_len, lstride);
    } else if (((dbuf + seq_off) & 7) || (len > 1 && lstride < 3) ||
               !ring_ok(m, dbuf, len, lstride, (uint64_t)seq_off + 8)) {
        return start_fail(m, hw, HWHS_E_ADDRESS, "the request ring's sequence numbers (DBUF 0x%llx + REPLY_SEQ_OFF %u, %u "
                          "slots 2^%u apart) are misaligned or outside DMA memory", (unsigned long long)dbuf, seq_off,
                          len, lstride);
    }
    uint64_t rtail = (uint64_t)seq_off + 8;
    if (hw && rtail < BL_FRAME_HEADER_BYTES + HWHS_TABLE_PAYLOAD_MAX) rtail = BL_FRAME_HEADER_BYTES + HWHS_TABLE_PAYLOAD_MAX;
    if (((rr.buf + seq_off) & 7) || (hw && (rr.buf & 7)) || (len > 1 && rr.stride < 3) ||
        !ring_ok(m, rr.buf, len, rr.stride, rtail))
        return start_fail(m, hw, HWHS_E_ADDRESS, "the reply ring (REPLY_BUF 0x%llx, %u slots 2^%u apart, REPLY_SEQ_OFF %u) "
                          "is misaligned or outside DMA memory", (unsigned long long)rr.buf, len, rr.stride, seq_off);
    if (hw) {
        cmd = rd(m, HR(HWHS_CMD_CNT));
        depth = rd(m, HR(HWHS_DEMO_DEPTH));
        if (cmd && (!depth || depth % HWHS_TABLE_ENTRY || depth > HWHS_TABLE_BYTES))
            return start_fail(m, hw, HWHS_E_CONFIG, "DEMO_DEPTH %u is not a multiple of %u from %u to %u bytes", depth,
                              HWHS_TABLE_ENTRY, HWHS_TABLE_ENTRY, HWHS_TABLE_BYTES);
        for (uint32_t n = 0; cmd && n < depth / HWHS_TABLE_ENTRY; ++n) {
            const uint8_t *ent = m->win + HWHS_WIN_TABLE + (size_t)n * HWHS_TABLE_ENTRY;
            uint32_t in = (uint32_t)ernic_get_le(ent, 4), out = (uint32_t)ernic_get_le(ent + 4, 4);
            if (in > HWHS_TABLE_PAYLOAD_MAX || out > HWHS_TABLE_PAYLOAD_MAX || BL_FRAME_HEADER_BYTES + in > pay_len)
                return start_fail(m, hw, HWHS_E_CONFIG, "syndrome table entry %u has payload lengths %u and %u; at most "
                                  "%u each, within PAY_LEN", n, in, out, HWHS_TABLE_PAYLOAD_MAX);
        }
        if (rd(m, HR(HWHS_TRACE_CTRL)) & HWHS_TRACE_CLEAR)
            return start_fail(m, hw, HWHS_E_TRACE_ARMED, "paced run started while the trace is held clear "
                              "(TRACE_CTRL bit0): drop it to record");
    }
    uint32_t reg = rd(m, HR(HWHS_ROUND_CNT));
    if (reg != (uint32_t)e->rounds) e->rounds = reg; /* the driver continues a sequence */
    if (!hw) {
        uint64_t at = dbuf + ((uint64_t)i << lstride) + seq_off;
        uint64_t seq = __atomic_load_n((const uint64_t *)bus_ptr(m, at), __ATOMIC_ACQUIRE);
        if (seq != e->rounds + 1)
            return start_fail(m, hw, HWHS_E_SEQ, "request slot %u holds sequence number %llu, not ROUND_CNT + 1 = %llu", i,
                              (unsigned long long)seq, (unsigned long long)(e->rounds + 1));
    }
    /* latch */
    e->w = *w;
    e->p = p;
    e->sq_bus = c->sq_bus;
    e->sq_depth = c->depth;
    e->len = len;
    e->lstride = lstride;
    e->rstride = rstride;
    e->i = i;
    e->dbuf = dbuf;
    e->rr = rr;
    e->rx = rr;
    e->rx_valid = 1;
    e->pay_len = pay_len;
    e->flags = rd(m, HR(HWHS_FLAGS));
    e->reply_to = rd(m, HR(HWHS_REPLY_TO));
    e->cmd_cnt = cmd;
    e->n_entries = depth / HWHS_TABLE_ENTRY;
    return 0;
}

/* CTRL start (sw-loop, one round) or DEMO_CTRL start (hw-loop, a paced run). */
static void eng_start(model *m, int hw) {
    engine *e = &m->e;
    if (e->busy) {
        eng_flag(m, HWHS_E_BUSY, "%s while %s is in flight (state %u)", hw ? "DEMO_CTRL start" : "CTRL start",
                 e->hw ? "a paced run" : "a round", e->state);
        return;
    }
    if (start_checks(m, hw)) return;
    e->bits &= ~(HWHS_STATUS_DONE | HWHS_STATUS_REPLY_SEEN | HWHS_STATUS_TIMEOUT | HWHS_STATUS_AXI_ERR);
    wr(m, HR(HWHS_ERR_CODE), HWHS_E_NONE);
    e->busy = 1;
    e->hw = hw;
    if (!hw) {
        e->seq = e->rounds + 1;
        round_post(m);
        return;
    }
    wr(m, HR(HWHS_DEMO_STS), 0);
    e->k = 0;
    uint32_t seed = rd(m, HR(HWHS_LFSR_SEED));
    e->lfsr = seed ? seed : HWHS_DEFAULT_SEED;
    e->freq = rd64(m, HR(HWHS_FREQ_LO));
    e->span = rd(m, HR(HWHS_FREQ_SPAN));
    e->pattern = rd(m, HR(HWHS_PATTERN));
    e->gap_from = cycles_of(bl_pingpong_now_ns());
    if (!e->cmd_cnt) {
        e->bits |= HWHS_STATUS_DONE;
        run_end(m, 0);
        return;
    }
    hw_gap(m);
}

/* The registers the driver writes to make something happen. */
static void poll_controls(model *m) {
    engine *e = &m->e;
    uint32_t v;
    if (BL_UNLIKELY((v = rd(m, HR(HWHS_CTRL))) != 0)) {
        if (v & HWHS_CTRL_RESET)
            soft_reset(m);
        else if (v & HWHS_CTRL_ABORT)
            eng_abort(m);
        if (v & HWHS_CTRL_START) eng_start(m, 0);
        done_pulse(m, HR(HWHS_CTRL), v);
    }
    if (BL_UNLIKELY((v = rd(m, HR(HWHS_DEMO_CTRL))) != 0)) {
        if (v & HWHS_DEMO_RESET) {
            if (e->busy && e->hw) {
                eng_flag(m, HWHS_E_BUSY, "DEMO_CTRL reset while a paced run is in flight");
            } else {
                wr(m, HR(HWHS_DEMO_STS), 0);
                wr(m, HR(HWHS_DEMO_ERR), 0);
                gap_log_clear(m);
            }
        }
        if (v & HWHS_DEMO_START) eng_start(m, 1);
        done_pulse(m, HR(HWHS_DEMO_CTRL), v);
    }
    if (BL_UNLIKELY((v = rd(m, HR(HWHS_WQE_COMMIT))) & (uint32_t)HWHS_REQ_COMMIT)) {
        uint32_t k = v & ~(uint32_t)HWHS_REQ_COMMIT;
        if (e->busy) {
            eng_flag(m, HWHS_E_BUSY, "WQE_COMMIT of WQE %u while a round is in flight", k);
        } else if (k >= HWHS_WQE_STORE) {
            eng_flag(m, HWHS_E_CONFIG, "WQE_COMMIT of WQE %u; the store holds %u", k, HWHS_WQE_STORE);
        } else {
            stored_wqe *s = &e->store[k];
            s->qp_ref = rd(m, HR(HWHS_WQE_QP_REF));
            s->opcode = rd(m, HR(HWHS_WQE_OPCODE));
            s->xfer_len = rd(m, HR(HWHS_WQE_XFER_LEN));
            s->rkey = rd(m, HR(HWHS_WQE_RKEY));
            s->va = rd64(m, HR(HWHS_WQE_VA_LO));
            s->offs = rd64(m, HR(HWHS_WQE_OFFS_LO));
            s->wrid = rd(m, HR(HWHS_WQE_WRID)) & 0xffffu;
            s->ring_cfg = rd(m, HR(HWHS_WQE_RING_CFG));
            s->ring_len = rd(m, HR(HWHS_WQE_RING_LEN));
            s->valid = 1;
            e->pre_valid = 0;
        }
        wr(m, HR(HWHS_WQE_COMMIT), 0);
    }
    if (BL_UNLIKELY((v = rd(m, HR(HWHS_RING_RESET))) & (uint32_t)HWHS_REQ_COMMIT)) {
        uint32_t k = v & ~(uint32_t)HWHS_REQ_COMMIT;
        if (e->busy)
            eng_flag(m, HWHS_E_BUSY, "RING_RESET of WQE %u while a round is in flight", k);
        else if (k >= HWHS_WQE_STORE)
            eng_flag(m, HWHS_E_CONFIG, "RING_RESET of WQE %u; the store holds %u", k, HWHS_WQE_STORE);
        else
            wr(m, HR(HWHS_RING_IDX), 0); /* one ring index: the one of the WQE that runs */
        wr(m, HR(HWHS_RING_RESET), 0);
    }
    if (BL_UNLIKELY((v = rd(m, HR(HWHS_QPCTX_COMMIT))) & (uint32_t)HWHS_REQ_QPCTX)) {
        uint32_t c = v & (HWHS_QP_CONTEXTS - 1u);
        if (e->busy) {
            eng_flag(m, HWHS_E_BUSY, "QPCTX_COMMIT of context %u while a round is in flight", c);
        } else {
            e->ctx[c].qpn = rd(m, HR(HWHS_QP_NUM));
            e->ctx[c].sq_bus = rd64(m, HR(HWHS_SQBASE_LO));
            e->ctx[c].depth = rd(m, HR(HWHS_SQ_DEPTH));
            e->ctx[c].valid = 1;
            e->pre_valid = 0;
        }
        wr(m, HR(HWHS_QPCTX_COMMIT), 0);
    }
    if (BL_UNLIKELY((rd(m, HR(HWHS_TRACE_CTRL)) & HWHS_TRACE_CLEAR) && (e->trace_cnt || e->trace_sts))) trace_clear(m);
    if (BL_UNLIKELY((v = rd(m, ER(ERNIC_MR_COMMIT))) != 0)) {
        mr_commit(m);
        done_pulse(m, ER(ERNIC_MR_COMMIT), v);
    }
    for (unsigned q = 0; q < N_QPS; ++q) {
        mqp *p = &m->qp[q];
        int on = (int)(rd(m, QR(q, ERNIC_QP_CONF)) & ERNIC_QP_ENABLE);
        if (BL_UNLIKELY(on != p->conf_on)) {
            p->conf_on = on;
            if (on)
                qp_enable(m, p);
            else
                qp_disable(m, p);
        }
    }
}

/* ---- the process ---- */

/* The window is built under a temporary name next to `path` (mode 0600), sized and mapped; it
 * appears at `path` only once complete (window_publish), so a driver that opens it never maps a
 * file shorter than the window (SIGBUS) nor one without its information block. */
static int32_t window_exists(const char *path, char *err, size_t n) {
    return bl_oob_fail(err, n, BL_EBUSY, "the window file %s exists already: another engine model is running on it, "
                       "or one that died left it; stop that model or remove the file", path);
}

static int32_t window_create(model *m, const char *path, char *tmp, size_t tmp_bytes, int *fd_out, char *err,
                             size_t n) {
    struct stat st;
    if (!lstat(path, &st)) return window_exists(path, err, n);
    if ((size_t)snprintf(tmp, tmp_bytes, "%s.%d.new", path, (int)getpid()) >= tmp_bytes)
        return bl_oob_fail(err, n, BL_EINVAL, "the window path %s is too long", path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return bl_oob_fail(err, n, BL_EINVAL, "cannot create the window file %s: %s", tmp, strerror(errno));
    m->win_bytes = (size_t)HWHS_WIN_MEM + (size_t)m->mem_bytes;
    void *p = MAP_FAILED;
    int e = 0;
    if (ftruncate(fd, (off_t)m->win_bytes))
        e = errno;
    else if ((p = mmap(NULL, m->win_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED)
        e = errno;
    if (e) {
        close(fd);
        unlink(tmp);
        return bl_oob_fail(err, n, BL_ENOMEM, "cannot size and map the window file %s (%zu bytes): %s", path,
                           m->win_bytes, strerror(e));
    }
    m->win = p;
    m->mem = m->win + HWHS_WIN_MEM;
    *fd_out = fd;
    return BL_OK;
}

/* Give the finished window its name: link(2) refuses an existing file, atomically. */
static int32_t window_publish(const char *path, const char *tmp, char *err, size_t n) {
    int32_t rc = BL_OK;
    if (link(tmp, path))
        rc = errno == EEXIST ? window_exists(path, err, n)
                             : bl_oob_fail(err, n, BL_EINVAL, "cannot create the window file %s: %s", path,
                                           strerror(errno));
    unlink(tmp);
    return rc;
}

/* Remove the window file, if it is still the one this model created. */
static void window_remove(const char *path, int fd) {
    struct stat a, b;
    if (!fstat(fd, &a) && !stat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino) unlink(path);
}

static void run_loop(model *m, int32_t parent_pid) {
    engine *e = &m->e;
    uint64_t now = bl_pingpong_now_ns(), last_alive = now, last_parent = now;
    uint32_t alive = 0;
    for (uint64_t turn = 0; !g_stop; ++turn) {
        for (unsigned q = 0; q < N_QPS; ++q) {
            mqp *p = &m->qp[q];
            if (!p->live) continue;
            qp_doorbell(m, p);
            qp_poll_send(m, p);
            qp_poll_recv(m, p);
        }
        poll_controls(m);
        int timed = 0;
        if (e->busy) {
            now = bl_pingpong_now_ns();
            timed = 1;
            engine_step(m, cycles_of(now));
        }
        if (timed || (turn & 63) == 0) {
            if (!timed) now = bl_pingpong_now_ns();
            if (now - last_alive >= ALIVE_NS) {
                last_alive = now;
                wr(m, IR(HWHS_INFO_ALIVE), ++alive);
            }
            if (parent_pid && now - last_parent >= (e->busy ? PARENT_BUSY_NS : PARENT_NS)) {
                last_parent = now;
                if (getppid() != parent_pid) break;
            }
        }
        bl_pingpong_relax();
    }
}

static struct sigaction g_old_term, g_old_int;

BL_API int32_t hwhs_model_run(const hwhs_model_config *c, char *err, uint64_t errlen) {
    size_t n = err ? (size_t)errlen : 0;
    if (!c || !c->window || !*c->window) return bl_oob_fail(err, n, BL_EINVAL, "the engine model needs a window path");
    uint64_t mem = c->mem_bytes ? c->mem_bytes : HWHS_DEFAULT_MEM_BYTES;
    if (mem > MAX_MEM_BYTES)
        return bl_oob_fail(err, n, BL_EINVAL, "DMA memory of %llu bytes: at most %llu", (unsigned long long)mem,
                           MAX_MEM_BYTES);
    if (c->device && strlen(c->device) >= INFO_DEVICE_BYTES)
        return bl_oob_fail(err, n, BL_EINVAL, "device=%s: a verbs device name has at most %u characters", c->device,
                           INFO_DEVICE_BYTES - 1);
    if (c->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        if (c->cpu >= CPU_SETSIZE)
            return bl_oob_fail(err, n, BL_EINVAL, "cpu %d: at most %d", (int)c->cpu, CPU_SETSIZE - 1);
        CPU_SET(c->cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set))
            return bl_oob_fail(err, n, BL_EINVAL, "cannot pin the engine model to CPU %d: %s", (int)c->cpu,
                               strerror(errno));
    }
    model *m = calloc(1, sizeof *m);
    if (!m) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    m->mem_bytes = (mem + 4095u) & ~4095ull;
    for (unsigned q = 0; q < N_QPS; ++q) m->qp[q].idx = q;
    /* a signal during set-up is seen by the loop, which then ends at once and cleans up */
    g_stop = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &g_old_term);
    sigaction(SIGINT, &sa, &g_old_int);
    int fd = -1;
    char tmp[4096];
    int32_t rc = window_create(m, c->window, tmp, sizeof tmp, &fd, err, n);
    if (rc) goto fail;

    /* the ERNIC's device; without one the model runs on and says why at each QP enable and MR */
    if (c->device && *c->device)
        snprintf(m->want_dev, sizeof m->want_dev, "'%s' wanted", c->device);
    else
        snprintf(m->want_dev, sizeof m->want_dev, "any device wanted");
    if (rv_open_device(&m->dev, c->device, c->ib_port, c->gid_index, m->no_dev, sizeof m->no_dev) == BL_OK) {
        m->dev_open = 1;
        put_text(m, IR(HWHS_INFO_DEVICE), INFO_DEVICE_BYTES, m->dev.name);
        memcpy(m->win + ER(ERNIC_LOCAL_GID), m->dev.gid.raw, 16);
        wr(m, ER(ERNIC_ACTIVE_MTU), (uint32_t)m->dev.active_mtu);
        wr(m, ER(ERNIC_GID_INDEX), (uint32_t)m->dev.gid_index);
    }

    /* the information block: the magic last */
    __atomic_store_n((uint64_t *)(m->win + IR(HWHS_INFO_MEM_BYTES)), m->mem_bytes, __ATOMIC_RELAXED);
    wr(m, IR(HWHS_INFO_VERSION), HWHS_MODEL_VERSION);
    wr(m, IR(HWHS_INFO_PID), (uint32_t)getpid());
    wr(m, IR(HWHS_INFO_CLOCK_HZ), HWHS_CLOCK_HZ);
    if (!m->dev_open) put_text(m, IR(HWHS_INFO_ERROR), INFO_ERROR_BYTES, m->no_dev);
    wr(m, IR(HWHS_INFO_MAGIC), HWHS_MAGIC);
    if ((rc = window_publish(c->window, tmp, err, n))) {
        if (m->dev_open) rv_close_device(&m->dev);
        munmap(m->win, m->win_bytes);
        close(fd);
        goto fail;
    }

    if (!m->dev_open) {  /* not silent: a model without its ERNIC's device serves registers only */
        fprintf(stderr, "backline fpga model: warning: no verbs device (%s): %s; the engine and its window run, "
                        "but every QP enable and memory registration fails until the model is started where "
                        "one is (backline rdma devices lists them)\n", m->want_dev, m->no_dev);
        fflush(stderr);
    }
    printf("ready %s pid %d\n", c->window, (int)getpid());
    fflush(stdout);

    run_loop(m, c->parent_pid);

    for (unsigned q = 0; q < N_QPS; ++q) rv_qp_destroy(&m->qp[q].q);
    for (int i = 0; i < m->n_mrs; ++i) ibv_dereg_mr(m->mrs[i].mr);
    if (m->dev_open) rv_close_device(&m->dev);
    __atomic_store_n((uint32_t *)(m->win + IR(HWHS_INFO_MAGIC)), 0u, __ATOMIC_RELEASE);
    munmap(m->win, m->win_bytes);
    window_remove(c->window, fd);
    close(fd);
    rc = BL_OK;
fail:
    free(m);
    sigaction(SIGTERM, &g_old_term, NULL);
    sigaction(SIGINT, &g_old_int, NULL);
    return rc;
}
