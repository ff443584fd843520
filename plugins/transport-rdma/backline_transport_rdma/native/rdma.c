/*
 * rdma transport backend: RoCE v2 reliable-connected queue pairs over libibverbs.
 *
 * Each side keeps both rings in its own memory, registered once: the core writes a frame
 * into this side's ring as it would for memcpy, and the deliver hook copies it into the
 * same slot of the peer's ring with one RDMA WRITE_WITH_IMM of the frame less its 8-byte
 * sequence number, whose low 32 bits are the immediate. The peer's poll hook, which the core
 * calls while it waits for a frame, takes the receive completion and only then stores the
 * sequence number into its own ring with release order; the core's acquire load of it then
 * sees the whole frame. The verbs specification guarantees that ordering: a WRITE_WITH_IMM's
 * receive completion comes after its data is in memory (docs/rdma.md, "Ordering").
 *
 * Round path: deliver patches one prebuilt work request and posts it, now and then reaping a
 * send completion (only every (send-queue depth / 4)-th frame is signaled; a deliver waits
 * for one only if the send queue would otherwise overflow); poll reaps receive completions
 * and re-posts receive entries 16 at a time. No allocation, lock or system call of this
 * backend's on that path (Soft-RoCE's provider makes one inside ibv_post_send: that is its
 * doorbell; a NIC's is a write to device memory).
 *
 * Control plane and lifecycle: the core's backline/sdk/remote.h, as for every networked
 * transport, made from this file's record (`transport`, at the end). The coprocessor listens on
 * its Endpoint (host, port: the keys `host` and `port` the core passes both sides), the
 * controller dials; a versioned handshake in network byte order (docs/rdma.md, "Handshake";
 * magic "BLRD") carries HELLO (controller: ABI, key), OFFER (coprocessor: ring geometry, last
 * served round and its peer record: QP, GID, ring address and rkey, MTU), CONNECT (controller:
 * its own peer record), READY. A link is one queue pair to one controller; remote.c's acceptor
 * thread takes the next controller once the current one has gone, on a fresh queue pair, and
 * the new controller continues the round sequence where the last one stopped.
 */
#define _GNU_SOURCE
#include "verbs.h"

#include <backline/backline.h>
#include <backline/sdk/remote.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BL_LIKELY(x) __builtin_expect(!!(x), 1)

static const char *const config_keys[] = {BL_REMOTE_CONFIG_KEYS, "device", "ib_port", "gid_index", NULL};

/* One queue pair to one peer, with the state of its send queue. Used by one thread at a time:
 * the controller's round thread, or the coprocessor's poller once it has taken it. */
struct link {
    rv_qp q;
    uint64_t remote_ring; /* the peer's ring this side writes into */
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    rv_recv recv; /* its receive entries */
    char error[200];
};

struct rd {
    bl_remote *r; /* the core's: role, geometry, rings, the count received */
    /* configuration of this transport's own */
    int ib_port, gid_index;
    char device[IBV_SYSFS_NAME_MAX];
    /* verbs */
    rv_device dev;
    int dev_open;
    rv_memory mem; /* both rings, registered once */
};

/* ---- open: configuration only (plus, for a controller's check, that its device is there) ---- */

static int32_t rd_open(void *state, bl_remote *r, const bl_open_args *a, char *err, size_t n) {
    struct rd *m = state;
    m->r = r;
    const bl_host_api *h = a->host;
    int64_t v;
    int32_t rc;
    const char *device = h->config_str(a->session, "device");
    if (device && strlen(device) >= sizeof m->device)
        return bl_oob_fail(err, n, BL_EINVAL, "device=%s: an RDMA device name has at most %zu characters", device,
                           sizeof m->device - 1);
    snprintf(m->device, sizeof m->device, "%s", device ? device : "");
    if ((rc = h->config_int(a->session, "ib_port", 0, 255, 0, &v, err, n))) return rc;
    m->ib_port = (int)v;
    if ((rc = h->config_int(a->session, "gid_index", -1, 65535, -1, &v, err, n))) return rc;
    m->gid_index = (int)v;
    if (a->check_only && a->role == BL_CONTROLLER) {
        /* The controller runs here, so its device must be here. (A coprocessor may run on another
         * machine, whose devices are not this one's: it checks its own when it starts.) */
        rv_device d;
        if ((rc = rv_open_device(&d, m->device, m->ib_port, m->gid_index, err, n))) return rc;
        rv_close_device(&d);
    }
    return BL_OK;
}

static int32_t rd_prepare(void *state, char *err, size_t n) {
    struct rd *m = state;
    if (m->dev_open) return BL_OK;
    int32_t rc = rv_open_device(&m->dev, m->device, m->ib_port, m->gid_index, err, n);
    if (!rc) m->dev_open = 1;
    return rc;
}

static int32_t rd_alloc(void *state, size_t bytes, uint8_t **rings, char *err, size_t n) {
    struct rd *m = state;
    int32_t rc = rv_memory_alloc(&m->dev, &m->mem, RV_MEMORY_HOST, bytes, err, n);
    if (!rc) *rings = m->mem.addr;
    return rc;
}

static void rd_release(void *state) {
    struct rd *m = state;
    rv_memory_free(&m->mem);
    if (m->dev_open) rv_close_device(&m->dev);
}

/* ---- links: one queue pair each ---- */

static void rd_link_destroy(void *state, void *link) {
    struct link *l = link;
    (void)state;
    if (!l) return;
    rv_qp_destroy(&l->q);
    free(l);
}

/* A queue pair toward a new peer; its peer record (the ring this side receives on: the
 * coprocessor's request ring, the controller's reply ring) goes into the OFFER or CONNECT. */
static void *rd_link_create(void *state, uint8_t *record, int32_t *rc, char *err, size_t n) {
    struct rd *m = state;
    struct link *l = calloc(1, sizeof *l);
    if (!l) {
        *rc = bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
        return NULL;
    }
    /* Every frame in flight toward this side holds a receive entry until it is polled. */
    if ((*rc = rv_qp_create(&m->dev, &l->q, m->r->slots + RV_REPOST_BATCH, err, n))) {
        free(l);
        return NULL;
    }
    l->sge.lkey = m->mem.mr->lkey;
    l->wr.sg_list = &l->sge;
    l->wr.num_sge = 1;
    l->wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    if ((*rc = rv_recv_fill(&l->q, &l->recv, err, n))) {
        rd_link_destroy(m, l);
        return NULL;
    }
    size_t receive_ring = m->r->role == BL_COPROCESSOR ? 0 : (size_t)m->r->slots * m->r->slot_bytes;
    rv_peer mine;
    rv_peer_local(&m->dev, &l->q, &m->mem, receive_ring, &mine);
    rv_peer_encode(&mine, record);
    return l;
}

/* Connect the queue pair to the peer's and aim it at the peer's ring. */
static int32_t rd_link_accept(void *state, void *link, const bl_remote_peer *peer, char *err, size_t n) {
    struct rd *m = state;
    struct link *l = link;
    rv_peer theirs;
    rv_peer_decode(peer->record, &theirs);
    int32_t rc = rv_qp_connect(&m->dev, &l->q, &theirs, err, n);
    if (rc) return rc;
    l->remote_ring = theirs.ring_addr;
    l->wr.wr.rdma.rkey = theirs.rkey;
    return BL_OK;
}

/* ---- the round path ---- */

/* Copy the frame in `slot` of this side's ring into the same slot of the peer's: one RDMA
 * WRITE_WITH_IMM of the frame less its sequence number, whose low 32 bits ride in the
 * immediate; the peer's poll publishes the sequence number once the completion says the
 * data is in its memory. */
static int32_t rd_deliver(void *state, void *link, const uint8_t *frame, uint64_t seq, uint32_t slot) {
    struct rd *m = state;
    struct link *l = link;
    if (BL_UNLIKELY(l->q.dead)) return BL_EPEER;
    uint32_t body = BL_FRAME_HEADER_BYTES - 8 + ((const bl_frame_header *)frame)->len;
    l->sge.addr = (uintptr_t)(frame + 8);
    l->sge.length = body;
    l->wr.wr.rdma.remote_addr = l->remote_ring + (uint64_t)slot * m->r->slot_bytes + 8;
    l->wr.imm_data = htonl((uint32_t)seq);
    l->wr.send_flags = body <= l->q.max_inline ? IBV_SEND_INLINE : 0;
    return rv_post(&l->q, &l->wr, m->r->timeout_ns, l->error, sizeof l->error);
}

/* Publish the frames that have arrived on the link into this side's receive ring, in order. */
static void rd_poll(void *state, void *link) {
    struct rd *m = state;
    struct link *l = link;
    if (BL_UNLIKELY(!l)) return; /* a coprocessor before its first controller */
    struct ibv_wc wc[8];
    int got = ibv_poll_cq(l->q.rcq, 8, wc);
    if (BL_LIKELY(got == 0)) return;
    bl_remote *r = m->r;
    uint8_t *ring = r->rings[r->role == BL_CONTROLLER ? 1 : 0];
    for (int i = 0; i < got; ++i) {
        uint64_t seq = r->received + 1;
        if (BL_UNLIKELY(wc[i].status != IBV_WC_SUCCESS || wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
                        ntohl(wc[i].imm_data) != (uint32_t)seq)) {
            if (!l->q.dead) {
                if (wc[i].status != IBV_WC_SUCCESS)
                    snprintf(l->error, sizeof l->error, "the queue pair failed: %s (verbs status %d)",
                             ibv_wc_status_str(wc[i].status), (int)wc[i].status);
                else
                    snprintf(l->error, sizeof l->error, "the peer broke the protocol: frame %u arrived where %llu "
                             "was due", ntohl(wc[i].imm_data), (unsigned long long)seq);
            }
            l->q.dead = 1;
            return;
        }
        uint32_t slot = (uint32_t)((seq - 1) & (r->slots - 1));
        __atomic_store_n((uint64_t *)(ring + (size_t)slot * r->slot_bytes), seq, __ATOMIC_RELEASE);
        r->received = seq;
    }
    if (BL_UNLIKELY(rv_recv_consumed(&l->q, &l->recv, (uint32_t)got))) {
        snprintf(l->error, sizeof l->error, "ibv_post_recv failed");
        l->q.dead = 1;
    }
}

/* Reap the send queue without waiting: a WRITE the peer no longer acknowledges fails there. */
static int rd_alive(void *state, void *link) {
    struct link *l = link;
    (void)state;
    return rv_reap(&l->q, 0, 0, l->error, sizeof l->error) != BL_EPEER;
}

static const char *rd_failure(void *state, void *link) {
    (void)state;
    return ((struct link *)link)->error;
}

static const bl_remote_transport transport = {
    .protocol = {
        .transport = "rdma",
        .magic = RV_MAGIC_TRANSPORT,
        .version = BL_REMOTE_HANDSHAKE_VERSION,
        .peer_bytes = RV_PEER_BYTES,
        .accepting = "connect its queue pair to this one",
    },
    .name = "rdma",
    .config_keys = config_keys,
    .state_bytes = sizeof(struct rd),
    .open = rd_open,
    .prepare = rd_prepare,
    .alloc = rd_alloc,
    .link_create = rd_link_create,
    .link_accept = rd_link_accept,
    .link_destroy = rd_link_destroy,
    .deliver = rd_deliver,
    .poll = rd_poll,
    .alive = rd_alive,
    .failure = rd_failure,
    .release = rd_release,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return bl_remote_backend(&transport); }
