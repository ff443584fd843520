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
 * Control plane: the coprocessor listens on its Endpoint (host, port: the keys `host` and
 * `port` the core passes both sides), the controller dials. A versioned handshake in
 * network byte order (docs/rdma.md, "Handshake"): HELLO (controller: ABI, key), OFFER
 * (coprocessor: ring geometry, last served round, its QP, GID, ring address and rkey, MTU),
 * CONNECT (controller: the same of its own), READY. The connection stays open: its closing
 * is how each side learns the other has gone. A coprocessor outlives its controllers: its
 * acceptor thread takes the next one once the current one has gone, on a fresh queue pair,
 * and the new controller continues the round sequence where the last one stopped.
 */
#define _GNU_SOURCE
#include "verbs.h"

#include <backline/backline.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- handshake messages (docs/rdma.md): a 12-byte header, then a fixed-size body ---- */
#define HS_VERSION 1u
enum { HS_HELLO = 1, HS_OFFER = 2, HS_CONNECT = 3, HS_READY = 4 };
#define HS_TEXT_BYTES 160u
#define HS_KEY_BYTES BL_KEY_MAX_LEN
#define HELLO_BYTES (4u + HS_KEY_BYTES + 4u)
#define OFFER_BYTES (4u + 4u + 4u + 8u + RV_PEER_BYTES + HS_TEXT_BYTES)
#define CONNECT_BYTES RV_PEER_BYTES
#define READY_BYTES (4u + HS_TEXT_BYTES)
_Static_assert(OFFER_BYTES <= BL_OOB_MAX_BODY, "the largest handshake body fits bl_oob_send_msg");

#define BL_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define BL_LIKELY(x) __builtin_expect(!!(x), 1)
#define REPOST_BATCH 16u /* receive entries are posted again this many at a time */

static const char *const config_keys[] = {"host", "port", "device", "ib_port", "gid_index", "cpu", "rt_priority", NULL};

/* One queue pair to one peer, with the state of its send queue. Used by one thread at a time:
 * the controller's round thread, or the coprocessor's poller (which swaps links, see below). */
struct link {
    rv_qp q;
    uint64_t remote_ring; /* the peer's ring this side writes into */
    uint32_t rkey;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    uint32_t to_repost;    /* receive entries consumed and not yet posted again */
    struct ibv_recv_wr rwr[REPOST_BATCH];
    char error[200];
};

struct rd {
    int role, runs_in;
    char key[HS_KEY_BYTES + 1];
    const bl_host_api *host;
    bl_session *session;
    uint32_t slots, slot_bytes;
    /* configuration */
    char host_name[256];
    int port, ib_port, gid_index, cpu, rt_priority;
    char device[IBV_SYSFS_NAME_MAX];
    uint64_t connect_timeout_ns, timeout_ns;
    /* verbs */
    rv_device dev;
    int dev_open;
    rv_memory mem;
    /* controller: its one link and the socket to its coprocessor */
    struct link *link;
    int fd;
    rv_peer offered;
    uint64_t base; /* rounds the coprocessor had served when this controller connected */
    uint64_t received; /* frames published into this side's receive ring (the poller's or the round thread's) */
    /* coprocessor: the listening socket, the acceptor thread and the link handed to the poller */
    int listen_fd, stop_fd, ctl_fd;
    struct link *next_link; /* published by the acceptor, taken by the poller at its next deliver */
    pthread_t poller, acceptor;
    int poller_running, acceptor_running, stopping;
    char applied[256];
};

static uint8_t *ring(const struct rd *m, int which) {
    return m->mem.addr + (size_t)which * m->slots * m->slot_bytes;
}

/* The ring this side receives on: the coprocessor's request ring, the controller's reply ring. */
static size_t receive_ring_offset(const struct rd *m) {
    return m->role == BL_COPROCESSOR ? 0 : (size_t)m->slots * m->slot_bytes;
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
    *rc = rv_qp_create(&m->dev, &l->q, m->slots + REPOST_BATCH, err, n);
    if (*rc) {
        free(l);
        return NULL;
    }
    l->sge.lkey = m->mem.mr->lkey;
    l->wr.sg_list = &l->sge;
    l->wr.num_sge = 1;
    l->wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    for (uint32_t i = 0; i < REPOST_BATCH; ++i) /* WRITE_WITH_IMM consumes an entry but no buffer */
        l->rwr[i].next = i + 1 < REPOST_BATCH ? &l->rwr[i + 1] : NULL;
    for (uint32_t posted = 0; posted < l->q.rq_depth;) {
        uint32_t k = l->q.rq_depth - posted < REPOST_BATCH ? l->q.rq_depth - posted : REPOST_BATCH;
        struct ibv_recv_wr *bad = NULL;
        l->rwr[k - 1].next = NULL;
        int e = ibv_post_recv(l->q.qp, l->rwr, &bad);
        l->rwr[k - 1].next = k < REPOST_BATCH ? &l->rwr[k] : NULL;
        if (e) {
            *rc = bl_oob_fail(err, n, BL_EBACKEND, "ibv_post_recv: %s", strerror(e));
            link_free(l);
            return NULL;
        }
        posted += k;
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
    uint8_t *frame = ring(m, which) + (size_t)slot * m->slot_bytes;
    uint32_t body = BL_FRAME_HEADER_BYTES - 8 + ((const bl_frame_header *)frame)->len;
    l->sge.addr = (uintptr_t)(frame + 8);
    l->sge.length = body;
    l->wr.wr.rdma.remote_addr = l->remote_ring + (uint64_t)slot * m->slot_bytes + 8;
    l->wr.imm_data = htonl((uint32_t)seq);
    l->wr.send_flags = body <= l->q.max_inline ? IBV_SEND_INLINE : 0;
    return rv_post(&l->q, &l->wr, m->timeout_ns, l->error, sizeof l->error);
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
        uint32_t slot = (uint32_t)((seq - 1) & (m->slots - 1));
        __atomic_store_n((uint64_t *)(ring(m, which) + (size_t)slot * m->slot_bytes), seq, __ATOMIC_RELEASE);
        m->received = seq;
    }
    l->to_repost += (uint32_t)got;
    if (l->to_repost >= REPOST_BATCH) {
        struct ibv_recv_wr *bad = NULL;
        if (BL_UNLIKELY(ibv_post_recv(l->q.qp, l->rwr, &bad))) {
            snprintf(l->error, sizeof l->error, "ibv_post_recv failed");
            l->q.dead = 1;
            return;
        }
        l->to_repost -= REPOST_BATCH;
    }
}

/* ---- handshake messages ---- */

static uint32_t hs_body_bytes(uint16_t type) {
    switch (type) {
    case HS_HELLO: return HELLO_BYTES;
    case HS_OFFER: return OFFER_BYTES;
    case HS_CONNECT: return CONNECT_BYTES;
    case HS_READY: return READY_BYTES;
    default: return 0;
    }
}

static const char *hs_name(uint16_t type) {
    static const char *const names[] = {"?", "HELLO", "OFFER", "CONNECT", "READY"};
    return type <= HS_READY ? names[type] : "?";
}

static int32_t hs_send(int fd, uint16_t type, const uint8_t *body, uint64_t deadline, char *err, size_t n) {
    return bl_oob_send_msg(fd, RV_MAGIC_TRANSPORT, HS_VERSION, type, body, hs_body_bytes(type), deadline, err, n);
}

/* Receive a message of `type` into body: a peer that is not Backline's rdma transport, or
 * speaks another version of it, is refused with what it sent. */
static int32_t hs_recv(int fd, uint16_t type, uint8_t *body, uint64_t deadline, const char *who, char *err, size_t n) {
    bl_oob_header h;
    char why[256];
    int32_t rc = bl_oob_recv_header(fd, &h, deadline, why, sizeof why);
    if (rc)
        return bl_oob_fail(err, n, rc, "%s: no %s message (%s)", who, hs_name(type), why);
    if (h.magic != RV_MAGIC_TRANSPORT)
        return bl_oob_fail(err, n, BL_EPEER, "%s is not a Backline rdma peer: it sent \"%s\" where a handshake starts "
                       "with \"BLRD\"", who, h.text);
    if (h.version != HS_VERSION)
        return bl_oob_fail(err, n, BL_EABI, "%s speaks version %u of the rdma handshake, this side version %u; run both "
                       "sides from the same backline-transport-rdma", who, h.version, HS_VERSION);
    if (h.type != type || h.body_bytes != hs_body_bytes(type))
        return bl_oob_fail(err, n, BL_EPEER, "%s sent a %s message of %u bytes where a %s of %u was due", who,
                       hs_name(h.type), h.body_bytes, hs_name(type), hs_body_bytes(type));
    rc = bl_oob_recv_all(fd, body, hs_body_bytes(type), deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s: truncated %s message (%s)", who, hs_name(type), why);
    return BL_OK;
}

static void put_text(uint8_t *p, const char *text) {
    memset(p, 0, HS_TEXT_BYTES);
    if (text) memcpy(p, text, strnlen(text, HS_TEXT_BYTES - 1)); /* cut to fit; NUL-padded */
}

static void get_text(const uint8_t *p, char *out, size_t n) {
    char t[HS_TEXT_BYTES + 1];
    memcpy(t, p, HS_TEXT_BYTES);
    t[HS_TEXT_BYTES] = 0;
    bl_oob_printable((const uint8_t *)t, strlen(t), out, n);
}

/* ---- open: configuration only (plus, for a controller's check, that its device is there) ---- */

static int32_t rd_open(const bl_open_args *a, void **impl, char *err, size_t n) {
    const bl_host_api *h = a->host;
    if (!h || h->abi_version < 3)
        return bl_oob_fail(err, n, BL_EABI, "this backend needs Backline ABI 3 (a host with error_text)");
    if (a->role == BL_COPROCESSOR && a->runs_in != BL_RUNS_PROCESS)
        return bl_oob_fail(err, n, BL_EINVAL, "rdma joins processes (on this or another machine): a coprocessor in the "
                       "controller's own process has nothing to send over; run it in a process or an executor, or use "
                       "memcpy");
    if (a->role == BL_CONTROLLER && a->runs_in != BL_RUNS_PROCESS && a->runs_in != BL_RUNS_ANY)
        return bl_oob_fail(err, n, BL_EINVAL, "rdma reaches coprocessors in other processes; this controller expects one "
                       "in its own process");
    struct rd *m = calloc(1, sizeof *m);
    if (!m) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    m->role = a->role;
    m->runs_in = a->runs_in;
    snprintf(m->key, sizeof m->key, "%s", a->key);
    m->host = h;
    m->session = a->session;
    m->slots = a->slots;
    m->slot_bytes = a->slot_bytes;
    m->fd = m->listen_fd = m->stop_fd = m->ctl_fd = -1;
    int64_t v;
    int32_t rc = BL_OK;
    const char *host = h->config_str(a->session, "host");
    if (!host || !h->config_str(a->session, "port")) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "rdma needs the coprocessor's endpoint (keys host and port): give the "
                     "coprocessor endpoint=Endpoint(host=..., port=...)");
        goto fail;
    }
    if (strlen(host) >= sizeof m->host_name) {
        rc = bl_oob_fail(err, n, BL_EINVAL, "host=%.40s...: longer than %zu characters", host, sizeof m->host_name - 1);
        goto fail;
    }
    snprintf(m->host_name, sizeof m->host_name, "%s", host);
    if ((rc = h->config_int(a->session, "port", 1, 65535, 0, &v, err, n))) goto fail;
    m->port = (int)v;
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
    if ((rc = h->config_int(a->session, "cpu", -1, CPU_SETSIZE - 1, -1, &v, err, n))) goto fail;
    m->cpu = (int)v;
    if ((rc = h->config_int(a->session, "rt_priority", 0, 99, 0, &v, err, n))) goto fail;
    m->rt_priority = (int)v;
    if ((rc = h->config_int(a->session, "connect_timeout_ms", 1, BL_MAX_TIMEOUT_MS, BL_DEFAULT_CONNECT_TIMEOUT_MS, &v,
                            err, n)))
        goto fail;
    m->connect_timeout_ns = (uint64_t)v * 1000000ull;
    if ((rc = h->config_int(a->session, "timeout_ms", 1, BL_MAX_TIMEOUT_MS, BL_DEFAULT_TIMEOUT_MS, &v, err, n)))
        goto fail;
    m->timeout_ns = (uint64_t)v * 1000000ull;
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
    if (m->fd >= 0) close(m->fd); /* a retried connect dials again */
    m->fd = -1;
    rc = bl_oob_dial(m->host_name, m->port, deadline, "rdma", &m->fd, err, n);
    if (rc) return rc;
    char who[300];
    snprintf(who, sizeof who, "the peer at %s:%d", m->host_name, m->port);
    uint8_t hello[HELLO_BYTES] = {0}, offer[OFFER_BYTES];
    bl_oob_put32(hello, BACKLINE_ABI_VERSION);
    memcpy(hello + 4, m->key, strlen(m->key));
    if ((rc = hs_send(m->fd, HS_HELLO, hello, deadline, err, n))) return rc;
    if ((rc = hs_recv(m->fd, HS_OFFER, offer, deadline, who, err, n))) return rc;
    int32_t status = (int32_t)bl_oob_get32(offer);
    if (status != BL_OK) {
        char text[HS_TEXT_BYTES * 4];
        get_text(offer + 20 + RV_PEER_BYTES, text, sizeof text);
        return bl_oob_fail(err, n, status == BL_EBUSY || status == BL_ENOTFOUND || status == BL_EABI ? status : BL_EPEER,
                       "the coprocessor at %s:%d refused this controller: %s", m->host_name, m->port, text);
    }
    uint32_t slots = bl_oob_get32(offer + 4), slot_bytes = bl_oob_get32(offer + 8);
    if (!slots || slots > BL_MAX_SLOTS || (slots & (slots - 1)) || slot_bytes < BL_SLOT_ALIGN ||
        slot_bytes > BL_MAX_SLOT_BYTES || slot_bytes % BL_SLOT_ALIGN)
        return bl_oob_fail(err, n, BL_EPEER, "%s offered an impossible ring (slots=%u slot_bytes=%u)", who, slots, slot_bytes);
    m->slots = slots; /* the coprocessor owns the geometry, as a memcpy coprocessor owns its region */
    m->slot_bytes = slot_bytes;
    m->base = bl_oob_get64(offer + 12);
    rv_peer_decode(offer + 20, &m->offered);
    return BL_OK;
}

static int32_t ctl_exchange(struct rd *m, uint64_t deadline, char *err, size_t n) {
    int32_t rc;
    if (!m->link && !(m->link = link_new(m, err, n, &rc))) return rc;
    if ((rc = rv_qp_connect(&m->dev, &m->link->q, &m->offered, err, n))) return rc;
    link_aim(m->link, &m->offered);
    rv_peer mine;
    rv_peer_local(&m->dev, &m->link->q, &m->mem, receive_ring_offset(m), &mine);
    uint8_t body[CONNECT_BYTES], ready[READY_BYTES];
    rv_peer_encode(&mine, body);
    char who[300];
    snprintf(who, sizeof who, "the coprocessor at %s:%d", m->host_name, m->port);
    if ((rc = hs_send(m->fd, HS_CONNECT, body, deadline, err, n))) return rc;
    if ((rc = hs_recv(m->fd, HS_READY, ready, deadline, who, err, n))) return rc;
    int32_t status = (int32_t)bl_oob_get32(ready);
    if (status != BL_OK) {
        char text[HS_TEXT_BYTES * 4];
        get_text(ready + 4, text, sizeof text);
        return bl_oob_fail(err, n, BL_EPEER, "%s could not connect its queue pair to this one: %s", who, text);
    }
    return BL_OK;
}

static int32_t ctl_deliver(void *impl, uint64_t seq, uint32_t slot) {
    struct rd *m = impl;
    int32_t rc = send_frame(m, m->link, 0, seq, slot);
    if (BL_UNLIKELY(rc)) m->host->error_text(m->link->error);
    return rc;
}

static void ctl_poll(void *impl) {
    struct rd *m = impl;
    receive(m, m->link, 1);
}

static int32_t ctl_alive(void *impl) {
    struct rd *m = impl;
    if (rv_reap(&m->link->q, 0, 0, m->link->error, sizeof m->link->error) == BL_EPEER) {
        m->host->error_text(m->link->error);
        return 0;
    }
    if (bl_oob_peer_closed(m->fd)) {
        char text[400];
        snprintf(text, sizeof text, "its connection from %s:%d closed (the coprocessor exited or was killed)",
                 m->host_name, m->port);
        m->host->error_text(text);
        return 0;
    }
    return 1;
}

/* ---- coprocessor ---- */

/* The highest sequence number in ring `which`. */
static uint64_t highest(struct rd *m, int which) {
    uint64_t top = 0;
    for (uint32_t i = 0; i < m->slots; ++i) {
        uint64_t s = __atomic_load_n((uint64_t *)(ring(m, which) + (size_t)i * m->slot_bytes), __ATOMIC_ACQUIRE);
        if (s > top) top = s;
    }
    return top;
}

/* Refuse a controller with a reason it can show (best effort: it may have gone). */
static void refuse(struct rd *m, int fd, int32_t status, const char *text, uint64_t deadline) {
    uint8_t offer[OFFER_BYTES] = {0};
    char ignored[64];
    bl_oob_put32(offer, (uint32_t)status);
    put_text(offer + 20 + RV_PEER_BYTES, text);
    hs_send(fd, HS_OFFER, offer, deadline, ignored, sizeof ignored);
    (void)m;
}

static void note(struct rd *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct rd *m, const char *fmt, ...) {
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    fprintf(stderr, "backline-transport-rdma: coprocessor '%s': %s\n", m->key, text);
}

/* One controller's handshake, on the acceptor thread. On success the new link is published
 * for the poller and *fd stays open (its closing tells us the controller has gone). */
/* A controller sends its HELLO as soon as it has connected; a peer that does not is dropped
 * soon, since handshakes are taken one at a time and the next controller waits behind it. */
#define HELLO_WAIT_NS 3000000000ull

static void admit(struct rd *m, int fd) {
    uint64_t now = bl_oob_now_ns();
    uint64_t deadline = now + m->connect_timeout_ns;
    uint64_t hello_by = now + (m->connect_timeout_ns < HELLO_WAIT_NS ? m->connect_timeout_ns : HELLO_WAIT_NS);
    char err[512], text[HS_TEXT_BYTES];
    uint8_t hello[HELLO_BYTES], body[CONNECT_BYTES];
    int32_t rc = hs_recv(fd, HS_HELLO, hello, hello_by, "a peer", err, sizeof err);
    if (rc) {
        if (rc == BL_EABI) refuse(m, fd, BL_EABI, err, deadline);
        note(m, "refused a connection: %s", err);
        close(fd);
        return;
    }
    char key[HS_KEY_BYTES + 1];
    memcpy(key, hello + 4, HS_KEY_BYTES);
    key[HS_KEY_BYTES] = 0;
    if (bl_oob_get32(hello) != BACKLINE_ABI_VERSION || strcmp(key, m->key)) {
        if (bl_oob_get32(hello) != BACKLINE_ABI_VERSION)
            snprintf(text, sizeof text, "the controller is Backline ABI %u, this coprocessor ABI %d", bl_oob_get32(hello),
                     BACKLINE_ABI_VERSION);
        else
            snprintf(text, sizeof text, "this port serves key '%s', not '%.64s'", m->key, key);
        refuse(m, fd, bl_oob_get32(hello) != BACKLINE_ABI_VERSION ? BL_EABI : BL_ENOTFOUND, text, deadline);
        close(fd);
        return;
    }
    if (m->ctl_fd >= 0 && !bl_oob_peer_closed(m->ctl_fd)) {
        refuse(m, fd, BL_EBUSY, "another controller holds this coprocessor; one controller at a time", deadline);
        close(fd);
        return;
    }
    /* Every request the last controller got in must be answered before the next one numbers
     * its rounds after them. */
    uint64_t served;
    while ((served = highest(m, 1)) != highest(m, 0)) {
        if (bl_oob_now_ns() > deadline) {
            refuse(m, fd, BL_EPEER, "a previous controller's last round is still unanswered", deadline);
            close(fd);
            return;
        }
        usleep(100);
    }
    struct link *l = link_new(m, err, sizeof err, &rc);
    uint8_t offer[OFFER_BYTES] = {0};
    if (!l) {
        refuse(m, fd, rc, err, deadline);
        note(m, "cannot take a controller: %s", err);
        close(fd);
        return;
    }
    rv_peer mine, theirs;
    rv_peer_local(&m->dev, &l->q, &m->mem, receive_ring_offset(m), &mine);
    bl_oob_put32(offer, BL_OK);
    bl_oob_put32(offer + 4, m->slots);
    bl_oob_put32(offer + 8, m->slot_bytes);
    bl_oob_put64(offer + 12, served);
    rv_peer_encode(&mine, offer + 20);
    if ((rc = hs_send(fd, HS_OFFER, offer, deadline, err, sizeof err)) ||
        (rc = hs_recv(fd, HS_CONNECT, body, deadline, "the controller", err, sizeof err))) {
        note(m, "a controller went away during its handshake: %s", err);
        goto drop;
    }
    rv_peer_decode(body, &theirs);
    uint8_t ready[READY_BYTES] = {0};
    rc = rv_qp_connect(&m->dev, &l->q, &theirs, err, sizeof err);
    bl_oob_put32(ready, (uint32_t)rc);
    put_text(ready + 4, rc ? err : "");
    if (rc) {
        hs_send(fd, HS_READY, ready, deadline, text, sizeof text);
        note(m, "cannot connect to a controller: %s", err);
        goto drop;
    }
    link_aim(l, &theirs);
    /* Take back a link the poller never picked up (its controller came and went without a round). */
    struct link *unused = __atomic_exchange_n(&m->next_link, NULL, __ATOMIC_ACQ_REL);
    link_free(unused);
    if ((rc = hs_send(fd, HS_READY, ready, deadline, err, sizeof err))) {
        note(m, "a controller went away during its handshake: %s", err);
        goto drop;
    }
    __atomic_store_n(&m->next_link, l, __ATOMIC_RELEASE);
    if (m->ctl_fd >= 0) close(m->ctl_fd);
    m->ctl_fd = fd;
    return;
drop:
    link_free(l);
    close(fd);
}

static void *acceptor(void *arg) {
    struct rd *m = arg;
    while (!__atomic_load_n(&m->stopping, __ATOMIC_ACQUIRE)) {
        struct pollfd p[3] = {{.fd = m->listen_fd, .events = POLLIN}, {.fd = m->stop_fd, .events = POLLIN},
                              {.fd = m->ctl_fd, .events = POLLIN}};
        int r = poll(p, m->ctl_fd >= 0 ? 3 : 2, 1000);
        if (r < 0 && errno != EINTR) break;
        if (p[1].revents) break;
        if (m->ctl_fd >= 0 && p[2].revents) {
            if (bl_oob_peer_closed(m->ctl_fd)) {
                close(m->ctl_fd); /* its controller has gone: the next may come */
                m->ctl_fd = -1;
            } else {
                uint8_t junk[256]; /* nothing is due after READY: drop it rather than wake on it forever */
                if (recv(m->ctl_fd, junk, sizeof junk, MSG_DONTWAIT) < 0 && errno != EAGAIN) {
                    close(m->ctl_fd);
                    m->ctl_fd = -1;
                }
            }
        }
        int fd;
        if (p[0].revents && bl_oob_accept(m->listen_fd, &fd) == 1) admit(m, fd);
    }
    return NULL;
}

/* The link of the current controller. A new one, published by the acceptor, is taken here:
 * only the poller thread uses links once taken, so the last controller's can go now. */
static struct link *current_link(struct rd *m) {
    struct link *next = __atomic_load_n(&m->next_link, __ATOMIC_ACQUIRE);
    if (BL_UNLIKELY(next != NULL) &&
        __atomic_compare_exchange_n(&m->next_link, &next, NULL, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
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

static void *poller(void *arg) {
    struct rd *m = arg;
    m->host->serve(m->session);
    return NULL;
}

static int32_t cop_start(struct rd *m, char *err, size_t n) {
    m->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (m->stop_fd < 0) return bl_oob_fail(err, n, BL_EBACKEND, "eventfd: %s", strerror(errno));
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    size_t o = (size_t)snprintf(m->applied, sizeof m->applied, "poller thread");
    if (m->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(m->cpu, &set);
        pthread_attr_setaffinity_np(&attr, sizeof set, &set);
        o += (size_t)snprintf(m->applied + o, sizeof m->applied - o, " pinned to CPU %d", m->cpu);
    }
    int rc = pthread_create(&m->poller, &attr, poller, m);
    pthread_attr_destroy(&attr);
    if (rc) return bl_oob_fail(err, n, BL_EBACKEND, "cannot start the poller thread%s: %s", m->cpu >= 0 ? " (pinned)" : "",
                           strerror(rc));
    m->poller_running = 1;
    if (m->rt_priority > 0 && o < sizeof m->applied) {
        /* Best effort: an unprivileged process is refused, and says so. */
        struct sched_param sp = {.sched_priority = m->rt_priority};
        int e = pthread_setschedparam(m->poller, SCHED_FIFO, &sp);
        snprintf(m->applied + o, sizeof m->applied - o, e ? ", SCHED_FIFO %d not applied (%s)" : ", SCHED_FIFO %d",
                 m->rt_priority, strerror(e));
    }
    if (m->cpu >= 0 || m->rt_priority > 0) note(m, "%s", m->applied);
    rc = pthread_create(&m->acceptor, NULL, acceptor, m);
    if (rc) return bl_oob_fail(err, n, BL_EBACKEND, "cannot start the acceptor thread: %s", strerror(rc));
    m->acceptor_running = 1;
    return BL_OK;
}

/* ---- hooks ---- */

static int32_t rd_connect(void *impl, uint64_t deadline, char *err, size_t n) {
    struct rd *m = impl;
    if (m->role == BL_CONTROLLER) return ctl_connect(m, deadline, err, n);
    int32_t rc = open_device(m, err, n);
    if (rc) return rc;
    if (m->listen_fd >= 0) return BL_OK;
    return bl_oob_listen(m->host_name, m->port, &m->listen_fd, err, n);
}

static int32_t rd_alloc_memory(void *impl, char *err, size_t n) {
    struct rd *m = impl;
    if (m->mem.addr) return BL_OK;
    return rv_memory_alloc(&m->dev, &m->mem, RV_MEMORY_HOST, 2 * (size_t)m->slots * m->slot_bytes, err, n);
}

static int32_t rd_exchange_keys(void *impl, uint64_t deadline, char *err, size_t n) {
    struct rd *m = impl;
    /* A coprocessor exchanges with each controller as it comes, on its acceptor thread. */
    return m->role == BL_CONTROLLER ? ctl_exchange(m, deadline, err, n) : BL_OK;
}

static int32_t rd_establish(void *impl, bl_channel *ch, uint64_t deadline, char *err, size_t n) {
    (void)deadline;
    (void)err;
    (void)n;
    struct rd *m = impl;
    ch->request_ring = ring(m, 0);
    ch->reply_ring = ring(m, 1);
    ch->slots = m->slots;
    ch->slot_bytes = m->slot_bytes;
    ch->impl = m;
    if (m->role == BL_CONTROLLER) {
        ch->deliver = ctl_deliver;
        ch->poll = ctl_poll;
        ch->peer_alive = ctl_alive;
        m->received = m->base; /* replies to this controller's rounds come after the base */
        if (m->base) {
            /* What a shared ring would show after the last controller's rounds: the core then
             * numbers this controller's rounds from base + 1, as the coprocessor expects. */
            uint32_t slot = (uint32_t)((m->base - 1) & (m->slots - 1));
            __atomic_store_n((uint64_t *)(ring(m, 0) + (size_t)slot * m->slot_bytes), m->base, __ATOMIC_RELEASE);
            __atomic_store_n((uint64_t *)(ring(m, 1) + (size_t)slot * m->slot_bytes), m->base, __ATOMIC_RELEASE);
        }
    } else {
        ch->deliver = cop_deliver;
        ch->poll = cop_poll;
    }
    return BL_OK;
}

static int32_t rd_start(void *impl, char *err, size_t n) {
    struct rd *m = impl;
    return m->role == BL_COPROCESSOR ? cop_start(m, err, n) : BL_OK;
}

static int32_t rd_stop(void *impl, char *err, size_t n) {
    (void)err;
    (void)n;
    struct rd *m = impl;
    if (m->poller_running) {
        pthread_join(m->poller, NULL); /* the core set the stop flag */
        m->poller_running = 0;
    }
    if (m->acceptor_running) {
        __atomic_store_n(&m->stopping, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        if (write(m->stop_fd, &one, sizeof one) < 0) { /* the 1 s poll timeout still ends it */
        }
        pthread_join(m->acceptor, NULL);
        m->acceptor_running = 0;
    }
    if (m->role == BL_CONTROLLER && m->fd >= 0) {
        close(m->fd); /* tells the coprocessor at once that the next controller may come */
        m->fd = -1;
    }
    return BL_OK;
}

static void rd_close(void *impl) {
    struct rd *m = impl;
    char err[8];
    rd_stop(m, err, sizeof err);
    link_free(m->link);
    link_free(__atomic_exchange_n(&m->next_link, NULL, __ATOMIC_ACQ_REL));
    rv_memory_free(&m->mem);
    if (m->dev_open) rv_close_device(&m->dev);
    int fds[] = {m->fd, m->listen_fd, m->stop_fd, m->ctl_fd};
    for (size_t i = 0; i < sizeof fds / sizeof fds[0]; ++i)
        if (fds[i] >= 0) close(fds[i]);
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
