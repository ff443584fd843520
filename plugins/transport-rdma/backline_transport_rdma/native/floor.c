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
 * Handshake (backline/sdk/bench_floor.h's, out of band, one TCP connection the initiator dials
 * and keeps open; its closing ends the serve). Big-endian; each message is a 12-byte header and
 * a fixed body:
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
 * Listen, serve, open, rounds, deadlines, the cadence and the responder's wait are
 * backline/sdk/bench_floor.h's, as for every floor; this file is the record (`transport`). Deadlines: the dial, each handshake message and the responder's wait for
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

#include <backline/sdk/bench_floor.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(BL_RDMA_FLOOR_ERROR_BYTES == BL_FLOOR_ERROR_BYTES, "floor.h's error size is bench_floor.h's");
_Static_assert(BL_RDMA_FLOOR_MAX_PAYLOAD_BYTES == BL_BENCH_MAX_PAYLOAD_BYTES, "the floor carries what the bench's does");

struct bl_rdma_floor {
    bl_floor f; /* first: bench_floor.h's */
    rv_device dev;
    int dev_open;
    rv_memory mem;
    rv_qp q;
    uint32_t counter_off, msg_bytes, stride;
    struct ibv_sge sge;
    struct ibv_send_wr wr;
};

/* listen's and open's own arguments */
struct device_args {
    const char *device;
    int32_t ib_port, gid_index;
};

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

/* ---- the record's set-up ---- */

static int32_t fl_setup(void *handle, const void *args, char *err, size_t n) {
    struct bl_rdma_floor *h = handle;
    const struct device_args *a = args;
    int32_t rc = check_device_args(a->device, a->ib_port, a->gid_index, err, n);
    if (rc) return rc;
    rc = rv_open_device(&h->dev, a->device, a->ib_port, a->gid_index, err, n);
    if (!rc) h->dev_open = 1;
    return rc;
}

/* Geometry, memory and queue pair for messages of payload_bytes. */
static int32_t fl_path(void *handle, uint32_t payload_bytes, char *err, size_t n) {
    struct bl_rdma_floor *h = handle;
    rv_qp_destroy(&h->q); /* a responder's earlier initiator may have been refused after these */
    rv_memory_free(&h->mem);
    h->counter_off = (payload_bytes + 7u) & ~7u;
    h->msg_bytes = h->counter_off + 8u;
    h->stride = (h->msg_bytes + 63u) & ~63u;
    int32_t rc = rv_memory_alloc(&h->dev, &h->mem, RV_MEMORY_HOST, 2 * (size_t)h->stride, err, n);
    if (rc) return rc;
    if ((rc = rv_qp_create(&h->dev, &h->q, 0, err, n))) return rc;
    h->f.tx = h->mem.addr;
    h->f.rx = h->mem.addr + h->stride;
    h->sge.lkey = h->mem.mr->lkey;
    h->sge.length = h->msg_bytes;
    h->wr.sg_list = &h->sge;
    h->wr.num_sge = 1;
    h->wr.opcode = IBV_WR_RDMA_WRITE;
    return BL_OK;
}

static int32_t fl_record(void *handle, uint8_t *out, char *err, size_t n) {
    struct bl_rdma_floor *h = handle;
    rv_peer mine;
    rv_peer_local(&h->dev, &h->q, &h->mem, h->stride, &mine);
    rv_peer_encode(&mine, out);
    return BL_OK;
}

static int32_t fl_aim(void *handle, const uint8_t *record, int same_host, const char *who, char *err, size_t n) {
    struct bl_rdma_floor *h = handle;
    rv_peer remote;
    rv_peer_decode(record, &remote);
    int32_t rc = rv_qp_connect(&h->dev, &h->q, &remote, err, n);
    if (rc) return rc;
    h->wr.wr.rdma.remote_addr = remote.ring_addr;
    h->wr.wr.rdma.rkey = remote.rkey;
    return BL_OK;
}

static void fl_release(void *handle) {
    struct bl_rdma_floor *h = handle;
    rv_qp_destroy(&h->q);
    rv_memory_free(&h->mem);
    if (h->dev_open) rv_close_device(&h->dev);
}

/* ---- the data path (the send queue is verbs.h's rv_post, rv_reap) ---- */

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
    memcpy(h->f.tx + h->counter_off, &counter_le, 8);
    return post(h, h->f.tx);
}

static int32_t op_reply(void *ctx, uint64_t counter_le) {
    (void)counter_le; /* rx holds it already */
    struct bl_rdma_floor *h = ctx;
    return post(h, h->f.rx); /* the bytes as they came */
}

static int op_arrived(void *ctx, uint64_t counter_le) {
    struct bl_rdma_floor *h = ctx;
    return __atomic_load_n((const uint64_t *)(h->f.rx + h->counter_off), __ATOMIC_ACQUIRE) == counter_le;
}

static int32_t op_check(void *ctx) {
    struct bl_rdma_floor *h = ctx;
    return rv_reap(&h->q, 0, 0, h->f.error, sizeof h->f.error);
}

static const bl_floor_transport transport = {
    .protocol = {BL_RDMA_FLOOR_MAGIC, RV_MAGIC_TRANSPORT, BL_RDMA_FLOOR_VERSION, "rdma", "backline-transport-rdma"},
    .module = "backline_transport_rdma.floor",
    .record_bytes = RV_PEER_BYTES,
    .handle_bytes = sizeof(struct bl_rdma_floor),
    .ops = {.send = op_send, .reply = op_reply, .arrived = op_arrived, .check = op_check},
    .setup = fl_setup,
    .path = fl_path,
    .record = fl_record,
    .aim = fl_aim,
    .release = fl_release,
};

BL_FLOOR_EXPORTS(bl_rdma_floor, transport)

BL_API int32_t bl_rdma_floor_listen(const char *host, int32_t port, const char *device, int32_t ib_port,
                                    int32_t gid_index, int32_t cpu, uint64_t timeout_ms, bl_rdma_floor **out,
                                    char *err, size_t n) {
    struct device_args a = {device, ib_port, gid_index};
    return bl_floor_responder(&transport, host, port, cpu, timeout_ms, &a, (void **)out, err, n);
}

BL_API int32_t bl_rdma_floor_open(const char *host, int32_t port, const char *device, int32_t ib_port,
                                  int32_t gid_index, uint32_t payload_bytes, uint64_t timeout_ms,
                                  bl_rdma_floor **out, char *err, size_t n) {
    struct device_args a = {device, ib_port, gid_index};
    return bl_floor_open(&transport, host, port, payload_bytes, timeout_ms, &a, (void **)out, err, n);
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
