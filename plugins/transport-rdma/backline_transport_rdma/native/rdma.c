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
 * Control plane: the core's backline/remote.h, as for every networked transport. The
 * coprocessor listens on its Endpoint (host, port: the keys `host` and `port` the core passes
 * both sides), the controller dials; a versioned handshake in network byte order (docs/rdma.md,
 * "Handshake"; magic "BLRD") carries HELLO (controller: ABI, key), OFFER (coprocessor: ring
 * geometry, last served round and its peer record: QP, GID, ring address and rkey, MTU),
 * CONNECT (controller: its own peer record), READY. This file only makes, connects and frees
 * the links (one queue pair per controller, rdma_links below); remote.c's acceptor thread takes
 * the next controller once the current one has gone, on a fresh queue pair, and the new
 * controller continues the round sequence where the last one stopped.
 */
#define _GNU_SOURCE
#include "verbs.h"

#include <backline/backline.h>
#include <backline/remote.h>

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BL_LIKELY(x) __builtin_expect(!!(x), 1)

static const char *const config_keys[] = {BL_REMOTE_CONFIG_KEYS, "device", "ib_port", "gid_index", NULL};

/* One queue pair to one peer, with the state of its send queue. Used by one thread at a time:
 * the controller's round thread, or the coprocessor's poller once it has taken it (current_link). */
struct link {
    rv_qp q;
    uint64_t remote_ring; /* the peer's ring this side writes into */
    uint32_t rkey;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    rv_recv recv;          /* its receive entries */
    char error[200];
};

struct rd {
    bl_remote r; /* the control plane: configuration, handshake, the coprocessor's threads */
    /* configuration of this transport's own */
    int ib_port, gid_index;
    char device[IBV_SYSFS_NAME_MAX];
    /* verbs */
    rv_device dev;
    int dev_open;
    rv_memory mem;
    struct link *link; /* the controller's one link; the coprocessor's current controller's (poller) */
    rv_peer offered;   /* controller: the coprocessor's peer record, from its OFFER */
    uint64_t received; /* frames published into this side's receive ring (the poller's or the round thread's) */
};

static uint8_t *ring(const struct rd *m, int which) {
    return m->mem.addr + (size_t)which * m->r.slots * m->r.slot_bytes;
}

/* The ring this side receives on: the coprocessor's request ring, the controller's reply ring. */
static size_t receive_ring_offset(const struct rd *m) {
    return m->r.role == BL_COPROCESSOR ? 0 : (size_t)m->r.slots * m->r.slot_bytes;
}

/* ---- the send queue ---- */

static void link_free(struct link *l) {
    if (!l) return;
    rv_qp_destroy(&l->q);
    free(l);
}

static struct link *link_new(struct rd *m, char *err, size_t n, int32_t *rc) {
    struct link *l = calloc(1, sizeof *l);
    if (!l) {
        *rc = bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
        return NULL;
    }
    /* Every frame in flight toward this side holds a receive entry until it is polled. */
    *rc = rv_qp_create(&m->dev, &l->q, m->r.slots + RV_REPOST_BATCH, err, n);
    if (*rc) {
        free(l);
        return NULL;
    }
    l->sge.lkey = m->mem.mr->lkey;
    l->wr.sg_list = &l->sge;
    l->wr.num_sge = 1;
    l->wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    if ((*rc = rv_recv_fill(&l->q, &l->recv, err, n))) {
        link_free(l);
        return NULL;
    }
    return l;
}

static void link_aim(struct link *l, const rv_peer *peer) {
    l->remote_ring = peer->ring_addr;
    l->rkey = peer->rkey;
    l->wr.wr.rdma.rkey = peer->rkey;
}

/* Copy the frame in `slot` of this side's ring `which` into the same slot of the peer's:
 * one RDMA WRITE_WITH_IMM of the frame less its sequence number, whose low 32 bits ride in
 * the immediate; the peer's poll hook publishes the sequence number once the completion
 * says the data is in its memory. */
static int32_t send_frame(struct rd *m, struct link *l, int which, uint64_t seq, uint32_t slot) {
    if (BL_UNLIKELY(l->q.dead)) return BL_EPEER;
    uint8_t *frame = ring(m, which) + (size_t)slot * m->r.slot_bytes;
    uint32_t body = BL_FRAME_HEADER_BYTES - 8 + ((const bl_frame_header *)frame)->len;
    l->sge.addr = (uintptr_t)(frame + 8);
    l->sge.length = body;
    l->wr.wr.rdma.remote_addr = l->remote_ring + (uint64_t)slot * m->r.slot_bytes + 8;
    l->wr.imm_data = htonl((uint32_t)seq);
    l->wr.send_flags = body <= l->q.max_inline ? IBV_SEND_INLINE : 0;
    return rv_post(&l->q, &l->wr, m->r.timeout_ns, l->error, sizeof l->error);
}

/* Publish the frames that have arrived on `l` into ring `which`, in order. */
static void receive(struct rd *m, struct link *l, int which) {
    struct ibv_wc wc[8];
    int got = ibv_poll_cq(l->q.rcq, 8, wc);
    if (BL_LIKELY(got == 0)) return;
    for (int i = 0; i < got; ++i) {
        uint64_t seq = m->received + 1;
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
        uint32_t slot = (uint32_t)((seq - 1) & (m->r.slots - 1));
        __atomic_store_n((uint64_t *)(ring(m, which) + (size_t)slot * m->r.slot_bytes), seq, __ATOMIC_RELEASE);
        m->received = seq;
    }
    if (BL_UNLIKELY(rv_recv_consumed(&l->q, &l->recv, (uint32_t)got))) {
        snprintf(l->error, sizeof l->error, "ibv_post_recv failed");
        l->q.dead = 1;
    }
}

/* ---- the coprocessor's links (remote.c calls these on its acceptor thread) ---- */

/* A queue pair for the next controller; its peer record goes into the OFFER. */
static void *rdma_link_create(void *arg, uint8_t *peer, int32_t *rc, char *err, size_t n) {
    struct rd *m = arg;
    struct link *l = link_new(m, err, n, rc);
    if (!l) return NULL;
    rv_peer mine;
    rv_peer_local(&m->dev, &l->q, &m->mem, receive_ring_offset(m), &mine);
    rv_peer_encode(&mine, peer);
    return l;
}

/* Connect it to the controller's queue pair (its CONNECT) and aim it at the controller's ring. */
static int32_t rdma_link_accept(void *arg, void *link, const uint8_t *peer, char *err, size_t n) {
    struct rd *m = arg;
    rv_peer theirs;
    rv_peer_decode(peer, &theirs);
    int32_t rc = rv_qp_connect(&m->dev, &((struct link *)link)->q, &theirs, err, n);
    if (!rc) link_aim(link, &theirs);
    return rc;
}

static void rdma_link_destroy(void *arg, void *link) {
    (void)arg;
    link_free(link);
}

static const bl_remote_links rdma_links = {rdma_link_create, rdma_link_accept, rdma_link_destroy};
static const bl_remote_protocol protocol = {
    .transport = "rdma",
    .magic = RV_MAGIC_TRANSPORT,
    .version = 1,
    .peer_bytes = RV_PEER_BYTES,
    .accepting = "connect its queue pair to this one",
};

/* ---- open: configuration only (plus, for a controller's check, that its device is there) ---- */

static int32_t rd_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    struct rd *m = calloc(1, sizeof *m);
    if (!m) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    const bl_host_api *h = a->host;
    int64_t v;
    int32_t rc = bl_remote_open(&m->r, &protocol, &rdma_links, m, a, err, n);
    if (rc) goto fail;
    const char *device = h->config_str(a->session, "device");
    if (device && strlen(device) >= sizeof m->device) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "device=%s: an RDMA device name has at most %zu characters", device,
                         sizeof m->device - 1);
        goto fail;
    }
    snprintf(m->device, sizeof m->device, "%s", device ? device : "");
    if ((rc = h->config_int(a->session, "ib_port", 0, 255, 0, &v, err, n))) goto fail;
    m->ib_port = (int)v;
    if ((rc = h->config_int(a->session, "gid_index", -1, 65535, -1, &v, err, n))) goto fail;
    m->gid_index = (int)v;
    if (a->check_only && a->role == BL_CONTROLLER) {
        /* The controller runs here, so its device must be here. (A coprocessor may run on another
         * machine, whose devices are not this one's: it checks its own when it starts.) */
        rv_device d;
        rc = rv_open_device(&d, m->device, m->ib_port, m->gid_index, err, n);
        if (rc) goto fail;
        rv_close_device(&d);
    }
    *impl = m;
    return BL_OK;
fail:
    free(m);
    return rc;
}

static int32_t open_device(struct rd *m, char *err, size_t n) {
    if (m->dev_open) return BL_OK;
    int32_t rc = rv_open_device(&m->dev, m->device, m->ib_port, m->gid_index, err, n);
    if (!rc) m->dev_open = 1;
    return rc;
}

/* ---- controller ---- */

static int32_t ctl_connect(struct rd *m, uint64_t deadline, char *err, size_t n) {
    int32_t rc = open_device(m, err, n);
    if (rc) return rc;
    uint8_t peer[RV_PEER_BYTES];
    if ((rc = bl_remote_dial(&m->r, deadline, peer, err, n))) return rc;
    rv_peer_decode(peer, &m->offered);
    return BL_OK;
}

static int32_t ctl_exchange(struct rd *m, uint64_t deadline, char *err, size_t n) {
    int32_t rc;
    if (!m->link && !(m->link = link_new(m, err, n, &rc))) return rc;
    if ((rc = rv_qp_connect(&m->dev, &m->link->q, &m->offered, err, n))) return rc;
    link_aim(m->link, &m->offered);
    rv_peer mine;
    rv_peer_local(&m->dev, &m->link->q, &m->mem, receive_ring_offset(m), &mine);
    uint8_t peer[RV_PEER_BYTES];
    rv_peer_encode(&mine, peer);
    return bl_remote_connect(&m->r, peer, deadline, err, n);
}

static int32_t ctl_deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct rd *m = impl;
    int32_t rc = send_frame(m, m->link, 0, seq, slot);
    if (BL_UNLIKELY(rc)) m->r.host->error_text(m->link->error);
    return rc;
}

static void ctl_poll(void *impl) {
    struct rd *m = impl;
    receive(m, m->link, 1);
}

static int32_t ctl_alive(void *impl) {
    struct rd *m = impl;
    if (rv_reap(&m->link->q, 0, 0, m->link->error, sizeof m->link->error) == BL_EPEER) {
        m->r.host->error_text(m->link->error);
        return 0;
    }
    return bl_remote_alive(&m->r);
}

/* ---- coprocessor: the poller's side ---- */

/* The link of the current controller. A new one, admitted by the acceptor, is taken here:
 * only the poller thread uses links once taken, so the last controller's can go now. */
static struct link *current_link(struct rd *m) {
    struct link *next = bl_remote_take(&m->r);
    if (BL_UNLIKELY(next != NULL)) {
        link_free(m->link);
        m->link = next;
    }
    return m->link;
}

static void cop_poll(void *impl) {
    struct rd *m = impl;
    struct link *l = current_link(m);
    if (BL_LIKELY(l != NULL)) receive(m, l, 0);
}

static int32_t cop_deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct rd *m = impl;
    struct link *l = current_link(m);
    if (BL_UNLIKELY(!l)) return BL_EPEER;
    return send_frame(m, l, 1, seq, slot);
}

/* ---- hooks ---- */

static int32_t rd_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    struct rd *m = impl;
    if (m->r.role == BL_CONTROLLER) return ctl_connect(m, deadline, err, n);
    int32_t rc = open_device(m, err, n);
    return rc ? rc : bl_remote_listen(&m->r, err, n);
}

static int32_t rd_alloc_memory(void *impl, char *err, size_t n) {
    struct rd *m = impl;
    if (m->mem.addr) return BL_OK;
    return rv_memory_alloc(&m->dev, &m->mem, RV_MEMORY_HOST, 2 * (size_t)m->r.slots * m->r.slot_bytes, err, n);
}

static int32_t rd_exchange_keys(void *impl, uint64_t deadline, char *err, size_t n) {
    struct rd *m = impl;
    /* A coprocessor exchanges with each controller as it comes, on its acceptor thread. */
    return m->r.role == BL_CONTROLLER ? ctl_exchange(m, deadline, err, n) : BL_OK;
}

static const bl_remote_hooks hooks = {
    .controller_deliver = ctl_deliver,
    .controller_poll = ctl_poll,
    .controller_alive = ctl_alive,
    .coprocessor_deliver = cop_deliver,
    .coprocessor_poll = cop_poll,
};

static int32_t rd_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct rd *m = impl;
    m->received = bl_remote_establish(&m->r, ch, ring(m, 0), ring(m, 1), &hooks, m); /* replies come after it */
    return BL_OK;
}

static int32_t rd_start(void *impl, char *err, size_t n) {
    struct rd *m = impl;
    return bl_remote_start(&m->r, err, n);
}

static int32_t rd_stop(void *impl, char *err, size_t n) {
    (void)err;
    (void)n;
    struct rd *m = impl;
    bl_remote_stop(&m->r);
    return BL_OK;
}

static void rd_close(void *impl) {
    struct rd *m = impl;
    bl_remote_close(&m->r); /* its threads are gone: the links are this thread's */
    link_free(m->link);
    rv_memory_free(&m->mem);
    if (m->dev_open) rv_close_device(&m->dev);
    free(m);
}

static const bl_backend backend = {
    .abi_version = BACKLINE_ABI_VERSION,
    .name = "rdma",
    .config_keys = config_keys,
    .open = rd_open,
    .connect = rd_connect,
    .alloc_memory = rd_alloc_memory,
    .exchange_keys = rd_exchange_keys,
    .establish_channel = rd_establish,
    .start = rd_start,
    .stop = rd_stop,
    .close = rd_close,
};

BL_API const bl_backend *backline_transport_backend_v1(void) { return &backend; }
