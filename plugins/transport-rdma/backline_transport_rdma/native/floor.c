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
 * Rounds, deadlines, the cadence and the responder's wait are backline/bench_floor.h's, as
 * for every floor. Deadlines: the dial, each handshake message and the responder's wait for
 * an initiator end after max(timeout_ms, BL_DEFAULT_CONNECT_TIMEOUT_MS); a reply after
 * timeout_ms. About once
 * a millisecond a waiting side also reaps its completion queue (a WRITE the peer no longer
 * acknowledges fails after the QP's retries, ~0.5 s) and looks at the TCP connection (a
 * killed peer's kernel closes it at once). Only the responder's wait for the next round has
 * no deadline: it lasts until the initiator writes, disconnects, or bl_rdma_floor_stop.
 */
#define _GNU_SOURCE
#include "floor.h"

#include "verbs.h"

#include <backline/bench_floor.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FL_HELLO_BYTES (4u + 4u + RV_PEER_BYTES)
#define FL_ACCEPT_BYTES (4u + RV_PEER_BYTES + BL_FLOOR_TEXT_BYTES)
_Static_assert(FL_ACCEPT_BYTES <= BL_OOB_MAX_BODY, "the floor's largest message fits bl_oob_send_msg");
_Static_assert(BL_RDMA_FLOOR_ERROR_BYTES == BL_FLOOR_ERROR_BYTES, "floor.h's error size is bench_floor.h's");
_Static_assert(BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES == BL_BENCH_MAX_PAYLOAD_BYTES, "the floor carries what the bench's does");

static const bl_floor_protocol protocol = {BL_RDMA_FLOOR_MAGIC, RV_MAGIC_TRANSPORT, BL_RDMA_FLOOR_VERSION, "rdma",
                                          "backline-transport-rdma"};

struct bl_rdma_floor {
    bl_floor f;
    rv_device dev;
    int dev_open;
    rv_memory mem;
    rv_qp q;
    uint32_t counter_off, msg_bytes, stride;
    rv_peer remote;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
};

static uint8_t *tx(const struct bl_rdma_floor *h) { return h->mem.addr; }
static uint8_t *rx(const struct bl_rdma_floor *h) { return h->mem.addr + h->stride; }

static struct bl_rdma_floor *floor_new(void) {
    struct bl_rdma_floor *h = calloc(1, sizeof *h);
    if (h) h->f.fd = h->f.listen_fd = -1;
    return h;
}

static void floor_free(struct bl_rdma_floor *h) {
    if (!h) return;
    bl_floor_close_sockets(&h->f); /* first: the peer takes its closing as the end, not a failure */
    rv_qp_destroy(&h->q);
    rv_memory_free(&h->mem);
    if (h->dev_open) rv_close_device(&h->dev);
    free(h);
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

/* Geometry, memory and queue pair for messages of payload_bytes. */
static int32_t make_path(struct bl_rdma_floor *h, uint32_t payload_bytes) {
    h->f.payload_bytes = payload_bytes;
    h->counter_off = (payload_bytes + 7u) & ~7u;
    h->msg_bytes = h->counter_off + 8u;
    h->stride = (h->msg_bytes + 63u) & ~63u;
    int32_t rc = rv_memory_alloc(&h->dev, &h->mem, RV_MEMORY_HOST, 2 * (size_t)h->stride, h->f.error, sizeof h->f.error);
    if (rc) return rc;
    if ((rc = rv_qp_create(&h->dev, &h->q, 0, h->f.error, sizeof h->f.error))) return rc;
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

/* ---- the data path (bench_floor.h's ops; the send queue is verbs.h's rv_post, rv_reap) ---- */

/* One WRITE of msg_bytes from `local` to the peer's rx. A send queue that stays full ends
 * this path for good, as an error completion does. */
static inline int32_t post(struct bl_rdma_floor *h, uint8_t *local) {
    h->sge.addr = (uintptr_t)local;
    h->wr.send_flags = h->msg_bytes <= h->q.max_inline ? IBV_SEND_INLINE : 0;
    int32_t rc = rv_post(&h->q, &h->wr, h->f.timeout_ns, h->f.error, sizeof h->f.error);
    if (rc) h->q.dead = 1;
    return rc;
}

static int32_t op_send(void *ctx, uint64_t counter_le) {
    struct bl_rdma_floor *h = ctx;
    memcpy(tx(h) + h->counter_off, &counter_le, 8);
    return post(h, tx(h));
}

static int32_t op_reply(void *ctx, uint64_t counter_le) {
    (void)counter_le; /* rx holds it already */
    struct bl_rdma_floor *h = ctx;
    return post(h, rx(h)); /* the bytes as they came */
}

static int op_arrived(void *ctx, uint64_t counter_le) {
    struct bl_rdma_floor *h = ctx;
    return __atomic_load_n((const uint64_t *)(rx(h) + h->counter_off), __ATOMIC_ACQUIRE) == counter_le;
}

static int32_t op_check(void *ctx) {
    struct bl_rdma_floor *h = ctx;
    return rv_reap(&h->q, 0, 0, h->f.error, sizeof h->f.error);
}

static const bl_floor_ops ops = {.send = op_send, .reply = op_reply, .arrived = op_arrived, .check = op_check};

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
    struct bl_rdma_floor *h = floor_new();
    if (!h) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    int32_t rc = bl_floor_init(&h->f, 1, host, port, cpu, timeout_ms, err, n);
    if (rc || (rc = open_device(h, device, ib_port, gid_index, err, n)) || (rc = bl_floor_listen(&h->f, err, n))) {
        floor_free(h);
        return rc;
    }
    *out = h;
    return BL_OK;
}

BL_API int32_t bl_rdma_floor_port(const bl_rdma_floor *h) { return h ? h->f.port : -1; }

BL_API void bl_rdma_floor_stop(bl_rdma_floor *h) {
    if (h) bl_floor_request_stop(&h->f);
}

/* Handshake with one connection: 1 admitted, else refused (h->f.error says why). */
static int32_t admit(void *ctx, int fd) {
    struct bl_rdma_floor *h = ctx;
    uint64_t deadline = bl_oob_now_ns() + h->f.connect_timeout_ns;
    uint8_t hello[FL_HELLO_BYTES], accept_[FL_ACCEPT_BYTES] = {0};
    int32_t rc = bl_floor_recv_msg(&protocol, fd, BL_FLOOR_HELLO, hello, sizeof hello, deadline, "a peer", h->f.error,
                                   sizeof h->f.error);
    if (rc) return 0;
    rv_peer_decode(hello + 8, &h->remote);
    if (bl_floor_check_payload(bl_oob_get32(hello), h->f.error, sizeof h->f.error))
        return bl_floor_refuse(&protocol, &h->f, fd, BL_EINVAL, accept_, sizeof accept_, deadline);
    if ((rc = make_path(h, bl_oob_get32(hello))) ||
        (rc = rv_qp_connect(&h->dev, &h->q, &h->remote, h->f.error, sizeof h->f.error)))
        return bl_floor_refuse(&protocol, &h->f, fd, rc, accept_, sizeof accept_, deadline);
    aim(h);
    rv_peer mine;
    rv_peer_local(&h->dev, &h->q, &h->mem, h->stride, &mine);
    rv_peer_encode(&mine, accept_ + 4);
    char why[256];
    if ((rc = bl_floor_send_msg(&protocol, fd, BL_FLOOR_ACCEPT, accept_, sizeof accept_, deadline, why, sizeof why)))
        return BL_FLOOR_FAIL(&h->f, rc, "the initiator went away during the handshake: %s", why);
    return 1;
}

BL_API int32_t bl_rdma_floor_serve(bl_rdma_floor *h, uint64_t wait_ms) {
    return h ? bl_floor_serve(&h->f, wait_ms, admit, &ops, h) : BL_EINVAL;
}

BL_API void bl_rdma_floor_free(bl_rdma_floor *h) { floor_free(h); }

/* ---- initiator ---- */

BL_API int32_t bl_rdma_floor_open(const char *host, int32_t port, const char *device, int32_t ib_port,
                                  int32_t gid_index, uint32_t payload_bytes, uint64_t timeout_ms,
                                  bl_rdma_floor **out, char *err, size_t n) {
    if (!out) return bl_oob_fail(err, n, BL_EINVAL, "bl_rdma_floor_open: out is NULL");
    *out = NULL;
    struct bl_rdma_floor *h = floor_new();
    if (!h) return bl_oob_fail(err, n, BL_ENOMEM, "out of memory");
    uint8_t hello[FL_HELLO_BYTES] = {0}, accept_[FL_ACCEPT_BYTES];
    int32_t rc = bl_floor_init(&h->f, 0, host, port, -1, timeout_ms, err, n);
    if (rc || (rc = bl_floor_check_payload(payload_bytes, err, n)) ||
        (rc = open_device(h, device, ib_port, gid_index, err, n)))
        goto fail;
    if ((rc = make_path(h, payload_bytes))) {
        bl_oob_fail(err, n, rc, "%s", h->f.error);
        goto fail;
    }
    uint64_t deadline = bl_oob_now_ns() + h->f.connect_timeout_ns;
    if ((rc = bl_floor_dial(&h->f, "backline_transport_rdma.floor", deadline, err, n))) goto fail;
    bl_oob_put32(hello, payload_bytes);
    rv_peer mine;
    rv_peer_local(&h->dev, &h->q, &h->mem, h->stride, &mine);
    rv_peer_encode(&mine, hello + 8);
    if ((rc = bl_floor_exchange(&protocol, &h->f, hello, sizeof hello, accept_, sizeof accept_, deadline, err, n)))
        goto fail;
    rv_peer_decode(accept_ + 4, &h->remote);
    if ((rc = rv_qp_connect(&h->dev, &h->q, &h->remote, err, n))) goto fail;
    aim(h);
    *out = h;
    return BL_OK;
fail:
    floor_free(h);
    return rc;
}

BL_API int32_t bl_rdma_floor_cadence(bl_rdma_floor *h, int32_t cadence, uint32_t lfsr, uint64_t gap_base_ns,
                                     uint64_t gap_span_mask) {
    return h ? bl_floor_set_cadence(&h->f, cadence, lfsr, gap_base_ns, gap_span_mask) : BL_EINVAL;
}

BL_API int32_t bl_rdma_floor_rounds(bl_rdma_floor *h, uint64_t first_round, uint64_t rounds, uint64_t *rtt_ns,
                                    bl_bench_result *res) {
    if (h && h->q.dead) h->f.broken = 1;
    return bl_floor_rounds(h ? &h->f : NULL, &ops, h, h ? tx(h) : NULL, h ? rx(h) : NULL, first_round, rounds, rtt_ns,
                           res);
}

BL_API void bl_rdma_floor_close(bl_rdma_floor *h) { floor_free(h); }

/* ---- either side ---- */

BL_API double bl_rdma_floor_ns_per_tick(void) { return bl_floor_ns_per_tick(); }

BL_API const char *bl_rdma_floor_error(const bl_rdma_floor *h) { return h ? h->f.error : "no floor handle"; }

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
