/*
 * verbs.h -- what the rdma backend (rdma.c) and the bare floor (floor.c) share, so the floor
 * runs with exactly the framework's queue-pair settings: opening a device and choosing its
 * GID, registering ring memory, creating and connecting an RC queue pair, and the peer
 * record of the handshake (docs/rdma.md, "Handshake"; its TCP side is backline/sdk/oob.h).
 * Set-up code, except the send queue's rv_post and rv_reap, which run per round and are
 * inline here for that reason.
 *
 * A declared, versioned API: other packages (backline-transport-fpga) build against it. They
 * compile the sources that backline_transport_rdma.verbs_sources() names into their own
 * library, with backline_transport_rdma.verbs_include() on the include path, and check
 * BL_VERBS_API_VERSION at compile time:
 *
 *     #include "verbs.h"
 *     #if BL_VERBS_API_VERSION != 1
 *     #error "built for version 1 of backline-transport-rdma's verbs API"
 *     #endif
 *
 * Any change to a declaration or a struct here that such a user could notice bumps it.
 */
#ifndef BACKLINE_RDMA_VERBS_H
#define BACKLINE_RDMA_VERBS_H

#define BL_VERBS_API_VERSION 1

#include <backline/backline.h>
#include <backline/sdk/oob.h>
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Queue-pair settings (the reference's, as perftest's): timeout 14 (4.096 us << 14 = 67 ms
 * per try) and 7 retries, so a peer that vanished fails a WRITE with a verbs error in about
 * half a second; RNR never happens (nobody posts receives) but is bounded the same way. */
#define RV_QP_TIMEOUT 14
#define RV_QP_RETRY_CNT 7
#define RV_QP_RNR_RETRY 7
#define RV_QP_MIN_RNR_TIMER 12
#define RV_HOP_LIMIT 64
#define RV_SQ_DEPTH 256u          /* send-queue entries (clamped to the device's max_qp_wr) */
#define RV_WANT_INLINE 220u       /* inline bytes asked for; the device may give fewer (or none) */
#define RV_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

/* An opened device port and the GID this side sends from. */
typedef struct rv_device {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    char name[IBV_SYSFS_NAME_MAX];
    uint8_t port;
    int gid_index;
    union ibv_gid gid;
    enum ibv_mtu active_mtu;
    uint32_t max_qp_wr;
} rv_device;

/* Ring memory: the seam where another memory kind (GPU memory exported as a dma-buf and
 * registered with ibv_reg_dmabuf_mr) would go; only host memory is built here. */
typedef enum rv_memory_kind { RV_MEMORY_HOST = 0, RV_MEMORY_GPU = 1 } rv_memory_kind;

typedef struct rv_memory {
    rv_memory_kind kind;
    uint8_t *addr;
    size_t bytes;
    struct ibv_mr *mr;
} rv_memory;

/* One RC queue pair with its send completion queue and, when it receives completions
 * (rq_depth > 0: WRITE_WITH_IMM arrivals), a receive completion queue of its own. */
typedef struct rv_qp {
    struct ibv_cq *cq;
    struct ibv_cq *rcq;
    struct ibv_qp *qp;
    uint32_t psn;
    uint32_t sq_depth;
    uint32_t rq_depth;
    uint32_t max_inline;
    /* the send queue (rv_post, rv_reap) */
    uint32_t signal_every; /* work requests per signaled completion */
    uint32_t since_signal;
    uint64_t posted;       /* work requests posted */
    uint64_t reaped;       /* covered by a reaped signaled completion */
    int dead;              /* an error completion, or a post that failed */
} rv_qp;

/* What one side tells the other to connect its queue pair and write into its ring. */
typedef struct rv_peer {
    uint32_t qpn, psn;
    uint8_t gid[16];
    uint64_t ring_addr; /* where the peer's WRITEs go: the ring this side receives on */
    uint32_t rkey;
    uint32_t mtu;       /* enum ibv_mtu of this side's port */
} rv_peer;
#define RV_PEER_BYTES 44u

/* Devices: `want` NULL or "" = the first device with an active port. ib_port 0 = its first
 * active port; gid_index < 0 = the first RoCE v2 GID with an IPv4-mapped address, else the
 * first RoCE v2 GID. Errors name what exists (devices, ports and their states, GIDs with
 * their types). check_only: close again after the checks. */
int32_t rv_open_device(rv_device *d, const char *want, int ib_port, int gid_index, char *err, size_t n);
void rv_close_device(rv_device *d);
/* "rxe0 port 1 (ACTIVE), GID 1 ::ffff:127.0.0.1 (RoCE v2)" */
void rv_describe(const rv_device *d, char *out, size_t n);

int32_t rv_memory_alloc(rv_device *d, rv_memory *m, rv_memory_kind kind, size_t bytes, char *err, size_t n);
void rv_memory_free(rv_memory *m);

/* rq_depth: receive entries (0: none; the floor polls memory). More than the device's
 * max_qp_wr is an error naming both. */
int32_t rv_qp_create(rv_device *d, rv_qp *q, uint32_t rq_depth, char *err, size_t n);
/* INIT -> RTR -> RTS against `remote`; path MTU = the smaller of the two ports'. */
int32_t rv_qp_connect(rv_device *d, rv_qp *q, const rv_peer *remote, char *err, size_t n);
void rv_qp_destroy(rv_qp *q);
void rv_peer_local(const rv_device *d, const rv_qp *q, const rv_memory *m, size_t ring_offset, rv_peer *out);
const char *rv_mtu_text(uint32_t mtu);

void rv_peer_encode(const rv_peer *p, uint8_t out[RV_PEER_BYTES]);
void rv_peer_decode(const uint8_t in[RV_PEER_BYTES], rv_peer *p);

/* Receive entries for incoming WRITE_WITH_IMM, which consumes one and writes nothing into it (so
 * they have no buffer): rv_recv_fill posts rq_depth of them, RV_REPOST_BATCH per call; as they
 * are consumed, rv_recv_consumed posts them again RV_REPOST_BATCH at a time. The rdma backend's
 * queue pairs and the FPGA engine model's share this. */
#define RV_REPOST_BATCH 16u
typedef struct rv_recv {
    struct ibv_recv_wr wr[RV_REPOST_BATCH];
    uint32_t to_repost; /* consumed and not yet posted again */
} rv_recv;

int32_t rv_recv_fill(rv_qp *q, rv_recv *r, char *err, size_t n);

/* After `got` receive completions (per poll, on the round path): 0, or ibv_post_recv's errno. */
static inline int rv_recv_consumed(rv_qp *q, rv_recv *r, uint32_t got) {
    r->to_repost += got;
    while (r->to_repost >= RV_REPOST_BATCH) {
        struct ibv_recv_wr *bad = NULL;
        int e = ibv_post_recv(q->qp, r->wr, &bad);
        if (e) return e;
        r->to_repost -= RV_REPOST_BATCH;
    }
    return 0;
}

/* The rdma transport's handshake magic (rdma.c); the floor's is BL_RDMA_FLOOR_MAGIC (floor.h).
 * Both use backline/sdk/oob.h's message header. */
#define RV_MAGIC_TRANSPORT 0x424c5244u /* "BLRD" */

/* ---- the send queue, per round ----
 * Selective signaling: every signal_every-th work request is signaled with wr_id = the number
 * posted so far, so its completion frees every entry up to it; nothing else is ever waited on. */

/* Reap what has completed; while fewer than `room` entries are free, keep reaping for up to
 * wait_ns. BL_EPEER once an error completion was seen (q->dead; err keeps the first one's
 * verbs status), BL_ETIMEOUT when the queue stayed full. */
static inline int32_t rv_reap(rv_qp *q, uint32_t room, uint64_t wait_ns, char *err, size_t n) {
    uint64_t deadline = 0;
    for (;;) {
        if (q->posted != q->reaped) {
            struct ibv_wc wc[4];
            int got = ibv_poll_cq(q->cq, 4, wc);
            for (int i = 0; i < got; ++i) {
                if (wc[i].status != IBV_WC_SUCCESS) {
                    if (!q->dead)
                        bl_oob_fail(err, n, 0, "an RDMA WRITE to the peer failed: %s (verbs status %d)",
                                ibv_wc_status_str(wc[i].status), (int)wc[i].status);
                    q->dead = 1;
                } else if (wc[i].wr_id > q->reaped) {
                    q->reaped = wc[i].wr_id;
                }
            }
            if (got < 0 && !q->dead) {
                bl_oob_fail(err, n, 0, "ibv_poll_cq failed on the send completion queue");
                q->dead = 1;
            }
        }
        if (q->dead) return BL_EPEER;
        if (q->posted - q->reaped + room <= q->sq_depth) return BL_OK;
        uint64_t now = bl_oob_now_ns();
        if (!deadline) deadline = now + wait_ns;
        if (now > deadline)
            return bl_oob_fail(err, n, BL_ETIMEOUT, "the send queue stayed full for timeout_ms: no completion for %llu "
                           "WRITEs", (unsigned long long)(q->posted - q->reaped));
    }
}

/* Post `wr` (its inline flag already chosen) once there is room for it, signaled when its
 * turn comes. */
static inline int32_t rv_post(rv_qp *q, struct ibv_send_wr *wr, uint64_t wait_ns, char *err, size_t n) {
    int32_t rc = rv_reap(q, 1, wait_ns, err, n);
    if (rc) return rc;
    q->posted++;
    if (++q->since_signal >= q->signal_every) {
        q->since_signal = 0;
        wr->send_flags |= IBV_SEND_SIGNALED;
        wr->wr_id = q->posted;
    }
    struct ibv_send_wr *bad = NULL;
    int e = ibv_post_send(q->qp, wr, &bad);
    if (e) {
        q->dead = 1;
        return bl_oob_fail(err, n, BL_EPEER, "ibv_post_send failed: %s", strerror(e));
    }
    return BL_OK;
}

#endif
