/*
 * The bare verbs floor of `backline bench --transport rdma` (floor.h): perftest's
 * ib_write_lat method, with the rdma backend's own device, memory and queue-pair set-up
 * (verbs.h) and its send-queue cadence, and nothing else of the framework.
 *
 * Memory. Each side registers one block (RV_ACCESS) of two regions, `stride` bytes apart
 * (stride = msg rounded up to 64): tx at 0 (what the initiator sends from) and rx at stride
 * (what the peer writes into; the peer record's ring address). One message is
 *
 *     offset 0                    payload_bytes bytes of payload
 *     offset payload_bytes        zeros up to the next multiple of 8
 *     offset counter_off          8-byte round counter, little-endian (1, 2, 3, ...)
 *
 * msg = counter_off + 8 bytes. A round: the initiator fills tx (the payload of round i is
 * bl_bench_rounds' echo payload: byte b = (i >> 8*(b%8)) ^ (b/8)) and the next counter,
 * then posts ONE RDMA WRITE of msg bytes from tx to the responder's rx (inline when msg fits
 * the queue pair's max_inline). The responder spins (acquire loads, a pause instruction) on
 * its rx counter; when it reads the round it awaits, the payload has landed -- a WRITE's
 * bytes land lowest address first, the property perftest relies on (docs/rdma.md,
 * "Ordering") -- and it posts one WRITE of the same msg bytes from its rx to the
 * initiator's rx. The initiator's clock runs from just before its ibv_post_send to the
 * moment its rx counter reads the round; then it compares every payload byte. Each side
 * signals every (send-queue depth / 4)-th WRITE, reaps completions without waiting, and waits
 * (at most timeout_ms) only when its send queue would overflow -- the backend's cadence.
 *
 * Handshake (out of band, one TCP connection the initiator dials and keeps open; its
 * closing ends the serve). Big-endian; each message is a 12-byte header and a fixed body:
 *
 *     header:  magic 0x424c464c "BLFL" (4) | version 1 (2) | type (2) | body length (4)
 *     HELLO  (type 1, initiator -> responder, 52):  payload_bytes (4) | flags 0 (4) | peer record (44)
 *     ACCEPT (type 2, responder -> initiator, 208): status (4, signed) | peer record (44) | text (160, NUL-padded)
 *
 * The peer record is the backend's (rv_peer_encode: QPN, PSN, GID, rx address, rkey, MTU).
 * The responder connects its queue pair before it answers, so the initiator's first WRITE
 * finds it ready. The different magic makes a framework coprocessor on the port (magic
 * "BLRD") a clear error on either side, not a misread peer.
 *
 * Deadlines: the dial, each handshake message and the responder's wait for an initiator end
 * after max(timeout_ms, BL_DEFAULT_CONNECT_TIMEOUT_MS); a reply after timeout_ms. About once
 * a millisecond a waiting side also reaps its completion queue (a WRITE the peer no longer
 * acknowledges fails after the QP's retries, ~0.5 s) and looks at the TCP connection (a
 * killed peer's kernel closes it at once). Only the responder's wait for the next round has
 * no deadline: it lasts until the initiator writes, disconnects, or bl_rdma_floor_stop.
 */
#define _GNU_SOURCE
#include "floor.h"

#include "verbs.h"

#include <backline/pingpong.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { FL_HELLO = 1, FL_ACCEPT = 2 };
#define FL_TEXT_BYTES 160u
#define FL_HELLO_BYTES (4u + 4u + RV_PEER_BYTES)
#define FL_ACCEPT_BYTES (4u + RV_PEER_BYTES + FL_TEXT_BYTES)
_Static_assert(FL_ACCEPT_BYTES <= BL_OOB_MAX_BODY, "the floor's largest message fits bl_oob_send_msg");
#define FL_CHECK_NS 1000000ull         /* look at the CQ, the socket and the deadline this often */

/* The round clock, pacing and payload are backline/pingpong.h's, as the core's bench, so
 * framework and floor are timed alike; deadlines use CLOCK_MONOTONIC (bl_oob_now_ns). */
static double ns_per_tick = 1.0;
static pthread_once_t calibrated = PTHREAD_ONCE_INIT;

static void calibrate(void) { ns_per_tick = bl_pingpong_measure_ns_per_tick(); }

struct bl_rdma_floor {
    int responder;
    rv_device dev;
    int dev_open;
    rv_memory mem;
    rv_qp q;
    int fd, listen_fd;
    char host[256];
    int port, cpu;
    uint64_t timeout_ns, connect_timeout_ns;
    uint32_t payload_bytes, counter_off, msg_bytes, stride;
    rv_peer remote;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
    uint64_t seq; /* the last round answered */
    int32_t cadence;
    uint32_t lfsr;
    uint64_t gap_base_ns, gap_span_mask;
    int stop;
    char error[BL_RDMA_FLOOR_ERROR_BYTES];
};

#define HFAIL(h, rc, ...) bl_oob_fail((h)->error, sizeof (h)->error, (rc), __VA_ARGS__)

static uint8_t *tx(const struct bl_rdma_floor *h) { return h->mem.addr; }
static uint8_t *rx(const struct bl_rdma_floor *h) { return h->mem.addr + h->stride; }

static struct bl_rdma_floor *floor_new(void) {
    struct bl_rdma_floor *h = calloc(1, sizeof *h);
    if (h) h->fd = h->listen_fd = -1;
    return h;
}

static void floor_free(struct bl_rdma_floor *h) {
    if (!h) return;
    rv_qp_destroy(&h->q);
    rv_memory_free(&h->mem);
    if (h->dev_open) rv_close_device(&h->dev);
    if (h->fd >= 0) close(h->fd);
    if (h->listen_fd >= 0) close(h->listen_fd);
    free(h);
}

static int32_t check_host(const char *host, char *err, size_t n) {
    if (!host || !*host) return bl_oob_fail(err, n, BL_EINVAL, "the floor needs a host to listen on or dial (e.g. 127.0.0.1)");
    if (strlen(host) >= 256) return bl_oob_fail(err, n, BL_EINVAL, "host '%.40s...' is longer than 255 characters", host);
    return BL_OK;
}

static int32_t check_device_args(const char *device, int32_t ib_port, int32_t gid_index, char *err, size_t n) {
    if (device && strlen(device) >= IBV_SYSFS_NAME_MAX)
        return bl_oob_fail(err, n, BL_EINVAL, "device '%s': an RDMA device name has at most %d characters", device,
                    IBV_SYSFS_NAME_MAX - 1);
    if (ib_port < 0 || ib_port > 255)
        return bl_oob_fail(err, n, BL_EINVAL, "ib_port %d: give a port number from 1 (or 0: the first active port)", ib_port);
    if (gid_index < -1 || gid_index > 65535)
        return bl_oob_fail(err, n, BL_EINVAL, "gid_index %d: give a GID index from 0 (or -1: the default RoCE v2 GID)",
                    gid_index);
    return BL_OK;
}

static int32_t set_timeouts(struct bl_rdma_floor *h, uint64_t timeout_ms, char *err, size_t n) {
    if (timeout_ms < 1 || timeout_ms > BL_MAX_TIMEOUT_MS)
        return bl_oob_fail(err, n, BL_EINVAL, "timeout_ms %llu: give 1 to %u", (unsigned long long)timeout_ms,
                    BL_MAX_TIMEOUT_MS);
    h->timeout_ns = timeout_ms * 1000000ull;
    uint64_t c = timeout_ms > BL_DEFAULT_CONNECT_TIMEOUT_MS ? timeout_ms : BL_DEFAULT_CONNECT_TIMEOUT_MS;
    h->connect_timeout_ns = c * 1000000ull;
    return BL_OK;
}

/* Geometry, memory and queue pair for messages of payload_bytes. */
static int32_t make_path(struct bl_rdma_floor *h, uint32_t payload_bytes) {
    h->payload_bytes = payload_bytes;
    h->counter_off = (payload_bytes + 7u) & ~7u;
    h->msg_bytes = h->counter_off + 8u;
    h->stride = (h->msg_bytes + 63u) & ~63u;
    int32_t rc = rv_memory_alloc(&h->dev, &h->mem, RV_MEMORY_HOST, 2 * (size_t)h->stride, h->error, sizeof h->error);
    if (rc) return rc;
    if ((rc = rv_qp_create(&h->dev, &h->q, 0, h->error, sizeof h->error))) return rc;
    h->sge.lkey = h->mem.mr->lkey;
    h->sge.length = h->msg_bytes;
    h->wr.sg_list = &h->sge;
    h->wr.num_sge = 1;
    h->wr.opcode = IBV_WR_RDMA_WRITE;
    return BL_OK;
}

static void aim(struct bl_rdma_floor *h) {
    h->wr.wr.rdma.remote_addr = h->remote.ring_addr;
    h->wr.wr.rdma.rkey = h->remote.rkey;
}

/* ---- the send queue (verbs.h: rv_post, rv_reap) ---- */

/* One WRITE of msg_bytes from `local` to the peer's rx. A send queue that stays full ends
 * this path for good, as an error completion does. */
static inline int32_t post(struct bl_rdma_floor *h, uint8_t *local) {
    h->sge.addr = (uintptr_t)local;
    h->wr.send_flags = h->msg_bytes <= h->q.max_inline ? IBV_SEND_INLINE : 0;
    int32_t rc = rv_post(&h->q, &h->wr, h->timeout_ns, h->error, sizeof h->error);
    if (rc) h->q.dead = 1;
    return rc;
}

static int32_t reap(struct bl_rdma_floor *h) { return rv_reap(&h->q, 0, 0, h->error, sizeof h->error); }

/* ---- handshake ---- */

static int32_t send_msg(int fd, uint16_t type, const uint8_t *body, uint32_t len, uint64_t deadline, char *err,
                        size_t n) {
    return bl_oob_send_msg(fd, BL_RDMA_FLOOR_MAGIC, BL_RDMA_FLOOR_VERSION, type, body, len, deadline, err, n);
}

/* A message of `type` and `len` bytes from `who`, or a clear refusal of what came instead. */
static int32_t recv_msg(int fd, uint16_t type, uint8_t *body, uint32_t len, uint64_t deadline, const char *who,
                        char *err, size_t n) {
    bl_oob_header h;
    char why[256];
    int32_t rc = bl_oob_recv_header(fd, &h, deadline, why, sizeof why);
    if (rc)
        return bl_oob_fail(err, n, rc, "%s sent no floor %s message (%s)", who, type == FL_HELLO ? "HELLO" : "ACCEPT", why);
    if (h.magic == RV_MAGIC_TRANSPORT)
        return bl_oob_fail(err, n, BL_EPEER, "%s speaks the rdma transport's handshake (\"BLRD\"), not the floor's "
                    "(\"BLFL\"): it is a Backline rdma coprocessor or controller; give the floor a port of its own", who);
    if (h.magic != BL_RDMA_FLOOR_MAGIC)
        return bl_oob_fail(err, n, BL_EPEER, "%s is not a floor peer: it sent \"%s\" where the floor's handshake starts "
                    "with \"BLFL\"", who, h.text);
    if (h.version != BL_RDMA_FLOOR_VERSION)
        return bl_oob_fail(err, n, BL_EABI, "%s speaks version %u of the floor's handshake, this side version %u; run both "
                    "sides from the same backline-transport-rdma", who, h.version, BL_RDMA_FLOOR_VERSION);
    if (h.type != type || h.body_bytes != len)
        return bl_oob_fail(err, n, BL_EPEER, "%s sent floor message type %u of %u bytes where type %u of %u was due", who,
                    h.type, h.body_bytes, type, len);
    rc = bl_oob_recv_all(fd, body, len, deadline, why, sizeof why);
    if (rc) return bl_oob_fail(err, n, rc, "%s sent a truncated floor message (%s)", who, why);
    return BL_OK;
}

/* ---- the device ---- */

BL_API int32_t bl_rdma_floor_check(const char *device, int32_t ib_port, int32_t gid_index, char *err, size_t n) {
    int32_t rc = check_device_args(device, ib_port, gid_index, err, n);
    if (rc) return rc;
    rv_device d;
    rc = rv_open_device(&d, device, ib_port, gid_index, err, n);
    if (!rc) rv_close_device(&d);
    return rc;
}

static int32_t open_device(struct bl_rdma_floor *h, const char *device, int32_t ib_port, int32_t gid_index, char *err,
                           size_t n) {
    int32_t rc = check_device_args(device, ib_port, gid_index, err, n);
    if (rc) return rc;
    rc = rv_open_device(&h->dev, device, ib_port, gid_index, err, n);
    if (!rc) h->dev_open = 1;
    return rc;
}

/* ---- responder ---- */

BL_API int32_t bl_rdma_floor_listen(const char *host, int32_t port, const char *device, int32_t ib_port,
                                    int32_t gid_index, int32_t cpu, uint64_t timeout_ms, bl_rdma_floor **out,
                                    char *err, size_t n) {
    if (!out) return bl_oob_fail(err, n, BL_EINVAL, "bl_rdma_floor_listen: out is NULL");
    *out = NULL;
    int32_t rc = check_host(host, err, n);
    if (rc) return rc;
    if (port < 0 || port > 65535)
        return bl_oob_fail(err, n, BL_EINVAL, "port %d: give 1 to 65535 (or 0: any free port)", port);
    if (cpu >= CPU_SETSIZE)
        return bl_oob_fail(err, n, BL_EINVAL, "cpu %d: give a CPU number below %d (or -1)", cpu, CPU_SETSIZE);
    struct bl_rdma_floor *h = floor_new();
    if (!h) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    h->responder = 1;
    h->cpu = cpu;
    snprintf(h->host, sizeof h->host, "%s", host);
    if ((rc = set_timeouts(h, timeout_ms, err, n)) || (rc = open_device(h, device, ib_port, gid_index, err, n)))
        goto fail;
    char why[512];
    if ((rc = bl_oob_listen(host, port, &h->listen_fd, why, sizeof why))) {
        bl_oob_fail(err, n, rc, "the floor responder cannot listen: %s", why);
        goto fail;
    }
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    if (getsockname(h->listen_fd, (struct sockaddr *)&sa, &len) == 0)
        h->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    *out = h;
    return BL_OK;
fail:
    floor_free(h);
    return rc;
}

BL_API int32_t bl_rdma_floor_port(const bl_rdma_floor *h) { return h ? h->port : -1; }

BL_API void bl_rdma_floor_stop(bl_rdma_floor *h) {
    if (h) __atomic_store_n(&h->stop, 1, __ATOMIC_RELEASE);
}

static int stopping(const struct bl_rdma_floor *h) { return __atomic_load_n(&h->stop, __ATOMIC_ACQUIRE); }

/* Handshake with one connection: 1 admitted, 0 refused (h->error says why), <0 a local failure. */
static int32_t admit(struct bl_rdma_floor *h, int fd) {
    uint64_t deadline = bl_oob_now_ns() + h->connect_timeout_ns;
    uint8_t hello[FL_HELLO_BYTES], accept_[FL_ACCEPT_BYTES];
    memset(accept_, 0, sizeof accept_);
    int32_t rc = recv_msg(fd, FL_HELLO, hello, sizeof hello, deadline, "a peer", h->error, sizeof h->error);
    if (rc) return 0;
    uint32_t payload = bl_oob_get32(hello);
    rv_peer_decode(hello + 8, &h->remote);
    const char *refusal = NULL;
    char text[FL_TEXT_BYTES];
    if (payload < 1 || payload > BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES) {
        snprintf(text, sizeof text, "payload_bytes %u: the floor carries 1 to %u", payload,
                 BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES);
        refusal = text;
        rc = BL_EINVAL;
    } else if ((rc = make_path(h, payload)) || (rc = rv_qp_connect(&h->dev, &h->q, &h->remote, h->error,
                                                                    sizeof h->error))) {
        size_t len = strnlen(h->error, sizeof text - 1); /* cut to the message's text field */
        memcpy(text, h->error, len);
        text[len] = 0;
        refusal = text;
    }
    bl_oob_put32(accept_, (uint32_t)rc);
    if (refusal) {
        memcpy(accept_ + 4 + RV_PEER_BYTES, refusal, strnlen(refusal, FL_TEXT_BYTES - 1));
        char ignored[64];
        send_msg(fd, FL_ACCEPT, accept_, sizeof accept_, deadline, ignored, sizeof ignored);
        HFAIL(h, 0, "refused an initiator: %s", refusal);
        return rc;
    }
    aim(h);
    rv_peer mine;
    rv_peer_local(&h->dev, &h->q, &h->mem, h->stride, &mine);
    rv_peer_encode(&mine, accept_ + 4);
    char why[256];
    if ((rc = send_msg(fd, FL_ACCEPT, accept_, sizeof accept_, deadline, why, sizeof why)))
        return HFAIL(h, rc, "the initiator went away during the handshake: %s", why);
    return 1;
}

static int32_t pin_self(int cpu, char *err, size_t n) {
    if (cpu < 0) return BL_OK;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    int e = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    if (e) return bl_oob_fail(err, n, BL_EINVAL, "cannot pin the floor responder to CPU %d: %s", cpu, strerror(e));
    return BL_OK;
}

/* Echo rounds until the initiator disconnects or a stop. */
static int32_t echo(struct bl_rdma_floor *h) {
    const uint64_t check = bl_pingpong_ticks_for_ns(FL_CHECK_NS, ns_per_tick);
    volatile uint64_t *counter = (volatile uint64_t *)(rx(h) + h->counter_off);
    for (uint64_t next = 1;; ++next) {
        uint64_t want = bl_pingpong_le64(next), check_at = bl_pingpong_ticks() + check;
        for (uint32_t spins = 0; __atomic_load_n(counter, __ATOMIC_ACQUIRE) != want;) {
            bl_pingpong_relax();
            if ((++spins & 1023u) == 0) {
                if (stopping(h)) return BL_OK;
                uint64_t now = bl_pingpong_ticks();
                if (now >= check_at) {
                    check_at = now + check;
                    if (reap(h)) return BL_EPEER;
                    if (bl_oob_peer_closed(h->fd)) return BL_OK; /* the initiator is done (or gone) */
                }
            }
        }
        h->seq = next;
        int32_t rc = post(h, rx(h)); /* the bytes as they came */
        if (rc) return rc;
    }
}

BL_API int32_t bl_rdma_floor_serve(bl_rdma_floor *h, uint64_t wait_ms) {
    if (!h || !h->responder) return BL_EINVAL;
    if (h->fd >= 0) return HFAIL(h, BL_ESTATE, "this floor responder has served its initiator already");
    if (wait_ms > BL_MAX_TIMEOUT_MS)
        return HFAIL(h, BL_EINVAL, "wait_ms %llu: give 1 to %u, or 0 for the connect timeout",
                     (unsigned long long)wait_ms, BL_MAX_TIMEOUT_MS);
    uint64_t wait_ns = wait_ms ? wait_ms * 1000000ull : h->connect_timeout_ns;
    pthread_once(&calibrated, calibrate); /* its checks are paced in ticks */
    int32_t rc = pin_self(h->cpu, h->error, sizeof h->error);
    if (rc) return rc;
    uint64_t deadline = bl_oob_now_ns() + wait_ns;
    char refused[BL_RDMA_FLOOR_ERROR_BYTES] = "";
    while (h->fd < 0) {
        if (stopping(h)) return BL_OK;
        uint64_t now = bl_oob_now_ns();
        if (now >= deadline)
            return HFAIL(h, BL_ETIMEOUT, "no floor initiator connected to %s:%d within %llu ms%s%s", h->host, h->port,
                         (unsigned long long)(wait_ns / 1000000ull), *refused ? "; " : "", refused);
        struct pollfd p = {.fd = h->listen_fd, .events = POLLIN};
        uint64_t left_ms = (deadline - now + 999999) / 1000000;
        int r = poll(&p, 1, left_ms > 100 ? 100 : (int)left_ms); /* short steps: a stop is seen soon */
        if (r < 0 && errno != EINTR) return HFAIL(h, BL_EBACKEND, "poll on the floor's socket: %s", strerror(errno));
        int fd;
        if (r <= 0 || bl_oob_accept(h->listen_fd, &fd) != 1) continue;
        rc = admit(h, fd);
        if (rc == 1) {
            h->fd = fd;
            break;
        }
        snprintf(refused, sizeof refused, "%s", h->error);
        close(fd);
        if (rc < 0 && rc != BL_EINVAL) return HFAIL(h, rc, "%s", refused); /* this side cannot serve */
        /* a peer that is not a floor initiator (or asked the impossible): wait for the right one */
    }
    close(h->listen_fd); /* one initiator per serve */
    h->listen_fd = -1;
    h->error[0] = 0;
    return echo(h);
}

BL_API void bl_rdma_floor_free(bl_rdma_floor *h) { floor_free(h); }

/* ---- initiator ---- */

BL_API int32_t bl_rdma_floor_open(const char *host, int32_t port, const char *device, int32_t ib_port,
                                  int32_t gid_index, uint32_t payload_bytes, uint64_t timeout_ms,
                                  bl_rdma_floor **out, char *err, size_t n) {
    if (!out) return bl_oob_fail(err, n, BL_EINVAL, "bl_rdma_floor_open: out is NULL");
    *out = NULL;
    int32_t rc = check_host(host, err, n);
    if (rc) return rc;
    if (port < 1 || port > 65535)
        return bl_oob_fail(err, n, BL_EINVAL, "port %d: give the responder's port, 1 to 65535", port);
    if (payload_bytes < 1 || payload_bytes > BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES)
        return bl_oob_fail(err, n, BL_ETOOBIG, "payload_bytes %u: the floor carries 1 to %u bytes", payload_bytes,
                    BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES);
    pthread_once(&calibrated, calibrate);
    struct bl_rdma_floor *h = floor_new();
    if (!h) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    snprintf(h->host, sizeof h->host, "%s", host);
    h->port = port;
    h->cpu = -1;
    if ((rc = set_timeouts(h, timeout_ms, err, n)) || (rc = open_device(h, device, ib_port, gid_index, err, n)))
        goto fail;
    if ((rc = make_path(h, payload_bytes))) {
        bl_oob_fail(err, n, rc, "%s", h->error);
        goto fail;
    }
    uint64_t deadline = bl_oob_now_ns() + h->connect_timeout_ns;
    char why[BL_RDMA_FLOOR_ERROR_BYTES], who[300];
    snprintf(who, sizeof who, "the peer at %s:%d", host, port);
    if ((rc = bl_oob_dial(host, port, deadline, "rdma", &h->fd, why, sizeof why))) {
        if (rc == BL_ETIMEOUT)
            bl_oob_fail(err, n, rc, "no floor responder answered at %s:%d within %llu ms; start one with `python -m "
                 "backline_transport_rdma.floor serve --host %s --port %d`", host, port,
                 (unsigned long long)(h->connect_timeout_ns / 1000000ull), host, port);
        else
            bl_oob_fail(err, n, rc, "cannot reach the floor responder at %s:%d: %s", host, port, why);
        goto fail;
    }
    uint8_t hello[FL_HELLO_BYTES] = {0}, accept_[FL_ACCEPT_BYTES];
    bl_oob_put32(hello, payload_bytes);
    rv_peer mine;
    rv_peer_local(&h->dev, &h->q, &h->mem, h->stride, &mine);
    rv_peer_encode(&mine, hello + 8);
    if ((rc = send_msg(h->fd, FL_HELLO, hello, sizeof hello, deadline, why, sizeof why))) {
        bl_oob_fail(err, n, rc, "%s did not take the floor's HELLO: %s", who, why);
        goto fail;
    }
    if ((rc = recv_msg(h->fd, FL_ACCEPT, accept_, sizeof accept_, deadline, who, why, sizeof why))) {
        if (rc == BL_EPEER || rc == BL_ETIMEOUT)
            bl_oob_fail(err, n, rc, "%s (is a floor responder listening there? a Backline rdma coprocessor, or another "
                 "program, answers otherwise)", why);
        else
            bl_oob_fail(err, n, rc, "%s", why);
        goto fail;
    }
    int32_t status = (int32_t)bl_oob_get32(accept_);
    if (status != BL_OK) {
        char text[FL_TEXT_BYTES * 4 + 1], raw[FL_TEXT_BYTES + 1];
        memcpy(raw, accept_ + 4 + RV_PEER_BYTES, FL_TEXT_BYTES);
        raw[FL_TEXT_BYTES] = 0;
        bl_oob_printable((const uint8_t *)raw, strlen(raw), text, sizeof text);
        rc = bl_oob_fail(err, n, status < 0 && status >= BL_EAUTH ? status : BL_EPEER, "the floor responder at %s:%d "
                  "refused: %s", host, port, text);
        goto fail;
    }
    rv_peer_decode(accept_ + 4, &h->remote);
    if ((rc = rv_qp_connect(&h->dev, &h->q, &h->remote, why, sizeof why))) {
        bl_oob_fail(err, n, rc, "%s", why);
        goto fail;
    }
    aim(h);
    *out = h;
    return BL_OK;
fail:
    floor_free(h);
    return rc;
}

BL_API int32_t bl_rdma_floor_cadence(bl_rdma_floor *h, int32_t cadence, uint32_t lfsr, uint64_t gap_base_ns,
                                     uint64_t gap_span_mask) {
    if (!h || h->responder) return BL_EINVAL;
    if (cadence != BL_CADENCE_B2B && cadence != BL_CADENCE_RANDOM_DELAYED)
        return HFAIL(h, BL_EINVAL, "cadence %d: 0 (back to back) or 1 (random-delayed)", cadence);
    if (cadence == BL_CADENCE_RANDOM_DELAYED && !lfsr)
        return HFAIL(h, BL_EINVAL, "an LFSR seeded with 0 stays 0; give any other seed");
    h->cadence = cadence;
    h->lfsr = lfsr;
    h->gap_base_ns = gap_base_ns;
    h->gap_span_mask = gap_span_mask;
    return BL_OK;
}

BL_API int32_t bl_rdma_floor_rounds(bl_rdma_floor *h, uint64_t first_round, uint64_t rounds, uint64_t *rtt_ns,
                                    bl_bench_result *res) {
    if (!res) return BL_EINVAL;
    memset(res, 0, sizeof *res);
    if (!h || h->responder || (rounds && !rtt_ns)) {
        res->first_error = BL_EINVAL;
        if (h) HFAIL(h, BL_EINVAL, "bl_rdma_floor_rounds needs an initiator handle and rtt_ns");
        return BL_EINVAL;
    }
    if (h->q.dead && rounds) {
        res->lost = 1;
        res->first_error = BL_ESTATE;
        char was[BL_RDMA_FLOOR_ERROR_BYTES];
        snprintf(was, sizeof was, "%s", h->error);
        if (strncmp(was, "the floor is broken", 19)) HFAIL(h, 0, "the floor is broken by an earlier failure: %s", was);
        return BL_ESTATE;
    }
    const uint64_t check = bl_pingpong_ticks_for_ns(FL_CHECK_NS, ns_per_tick);
    uint8_t *out = tx(h), *in = rx(h);
    volatile uint64_t *counter = (volatile uint64_t *)(in + h->counter_off);
    for (uint64_t k = 0; k < rounds; ++k) {
        uint64_t i = first_round + k, seq = h->seq + 1, want = bl_pingpong_le64(seq);
        bl_pingpong_fill(out, h->payload_bytes, i);
        memcpy(out + h->counter_off, &want, 8);
        if (h->cadence == BL_CADENCE_RANDOM_DELAYED) bl_pingpong_wait_gap(&h->lfsr, h->gap_base_ns, h->gap_span_mask);
        uint64_t t0 = bl_pingpong_ticks(); /* after staging, like the framework's post timestamp */
        int32_t rc = post(h, out);
        uint64_t deadline = 0, check_at = t0 + check;
        for (uint32_t spins = 0; !rc && __atomic_load_n(counter, __ATOMIC_ACQUIRE) != want;) {
            bl_pingpong_relax();
            if ((++spins & 255u) == 0) {
                uint64_t now = bl_pingpong_ticks();
                if (now < check_at) continue;
                check_at = now + check;
                uint64_t wall = bl_oob_now_ns();
                if (!deadline) deadline = wall + h->timeout_ns - FL_CHECK_NS; /* the first check is ~1 ms in */
                if ((rc = reap(h))) break;
                if (bl_oob_peer_closed(h->fd)) {
                    rc = HFAIL(h, BL_EPEER, "the floor responder's connection from %s:%d closed in round %llu (it "
                               "exited or was killed)", h->host, h->port, (unsigned long long)seq);
                    break;
                }
                if (wall > deadline && __atomic_load_n(counter, __ATOMIC_ACQUIRE) != want) {
                    rc = HFAIL(h, BL_ETIMEOUT, "the floor responder at %s:%d did not answer round %llu within %llu ms "
                               "(is it stopped, or starved of its CPU?)", h->host, h->port, (unsigned long long)seq,
                               (unsigned long long)(h->timeout_ns / 1000000ull));
                    break;
                }
            }
        }
        if (rc) {
            h->q.dead = 1;
            rtt_ns[k] = 0;
            res->lost = 1;
            res->first_error = rc;
            return rc; /* the peer's state is unknown now: later rounds cannot be trusted */
        }
        rtt_ns[k] = bl_pingpong_ns_since(t0, ns_per_tick);
        h->seq = seq;
        if (memcmp(in, out, h->payload_bytes) != 0) res->mismatched++;
        res->done++;
    }
    return BL_OK;
}

BL_API void bl_rdma_floor_close(bl_rdma_floor *h) { floor_free(h); }

/* ---- either side ---- */

BL_API double bl_rdma_floor_ns_per_tick(void) {
    pthread_once(&calibrated, calibrate);
    return ns_per_tick;
}

BL_API const char *bl_rdma_floor_error(const bl_rdma_floor *h) { return h ? h->error : "no floor handle"; }

BL_API void bl_rdma_floor_device(const bl_rdma_floor *h, char *name, size_t n, int32_t *ib_port, int32_t *gid_index) {
    if (name && n) snprintf(name, n, "%s", h ? h->dev.name : "");
    if (ib_port) *ib_port = h ? h->dev.port : 0;
    if (gid_index) *gid_index = h ? h->dev.gid_index : -1;
}

BL_API void bl_rdma_floor_describe(const bl_rdma_floor *h, char *out, size_t n) {
    if (!out || !n) return;
    if (!h || !h->dev_open) {
        snprintf(out, n, "no device");
        return;
    }
    rv_describe(&h->dev, out, n);
    size_t o = strlen(out);
    if (h->q.qp && o < n) snprintf(out + o, n - o, ", inline %u B", h->q.max_inline);
}
