/* Set-up helpers shared by the rdma backend and the bare floor (see verbs.h). */
#define _GNU_SOURCE
#include "verbs.h"

#include <backline/backline.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- the peer record ---- */

/* qpn 0, psn 4, gid 8..23, ring_addr 24, rkey 32, mtu 36, reserved 40 */
void rv_peer_encode(const rv_peer *p, uint8_t out[RV_PEER_BYTES]) {
    memset(out, 0, RV_PEER_BYTES);
    bl_oob_put32(out, p->qpn);
    bl_oob_put32(out + 4, p->psn);
    memcpy(out + 8, p->gid, 16);
    bl_oob_put64(out + 24, p->ring_addr);
    bl_oob_put32(out + 32, p->rkey);
    bl_oob_put32(out + 36, p->mtu);
}
void rv_peer_decode(const uint8_t in[RV_PEER_BYTES], rv_peer *p) {
    p->qpn = bl_oob_get32(in);
    p->psn = bl_oob_get32(in + 4);
    memcpy(p->gid, in + 8, 16);
    p->ring_addr = bl_oob_get64(in + 24);
    p->rkey = bl_oob_get32(in + 32);
    p->mtu = bl_oob_get32(in + 36);
}

/* ---- devices, ports, GIDs ---- */

static const char *port_state_text(enum ibv_port_state s) {
    switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
    }
}

static const char *gid_type_text(uint32_t t) {
    switch (t) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    default: return "unknown type";
    }
}

static void gid_text(const uint8_t *g, char *out, size_t n) {
    if (!inet_ntop(AF_INET6, g, out, (socklen_t)n)) snprintf(out, n, "?");
}

static int is_v4_mapped(const uint8_t *g) {
    static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return !memcmp(g, prefix, 12);
}

static int zero_gid(const uint8_t *g) {
    for (int i = 0; i < 16; ++i)
        if (g[i]) return 0;
    return 1;
}

/* The devices there are, as "rxe0 (port 1 ACTIVE), mlx5_0 (port 1 DOWN)". */
static void list_devices(struct ibv_device **list, int count, char *out, size_t n) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < count && o + 2 < n; ++i) {
        const char *name = ibv_get_device_name(list[i]);
        o += (size_t)snprintf(out + o, n - o, "%s%s", i ? ", " : "", name ? name : "?");
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        if (ctx && !ibv_query_device(ctx, &da)) {
            for (uint8_t p = 1; p <= da.phys_port_cnt && o + 2 < n; ++p) {
                struct ibv_port_attr pa;
                if (!ibv_query_port(ctx, p, &pa))
                    o += (size_t)snprintf(out + o, n - o, "%sport %u %s%s", p == 1 ? " (" : ", ", p,
                                          port_state_text(pa.state), p == da.phys_port_cnt ? ")" : "");
            }
        }
        if (ctx) ibv_close_device(ctx);
    }
    if (o >= n) out[n - 1] = 0;
}

/* The port's GIDs, as "0 fe80::... (RoCE v2), 1 ::ffff:127.0.0.1 (RoCE v2)". */
static void list_gids(struct ibv_context *ctx, uint8_t port, int table_len, char *out, size_t n) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < table_len && o + 2 < n; ++i) {
        struct ibv_gid_entry e;
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0)) continue;
        char text[64];
        gid_text(e.gid.raw, text, sizeof text);
        o += (size_t)snprintf(out + o, n - o, "%s%d %s (%s)", o ? ", " : "", i, text, gid_type_text(e.gid_type));
    }
    if (!o) snprintf(out, n, "none");
    if (o >= n) out[n - 1] = 0;
}

int32_t rv_open_device(rv_device *d, const char *want, int ib_port, int gid_index, char *err, size_t n) {
    memset(d, 0, sizeof *d);
    int count = 0;
    struct ibv_device **list = ibv_get_device_list(&count);
    if (!list || count == 0) {
        int e = errno;
        if (list) ibv_free_device_list(list);
        return bl_oob_fail(err, n, BL_ENOTFOUND,
                    "no RDMA device: libibverbs finds none (%s); `backline rdma devices` lists them. For Soft-RoCE "
                    "on an Ethernet interface: rdma link add rxe0 type rxe netdev IFACE",
                    list ? "the device list is empty" : strerror(e));
    }
    char found[1024];
    int32_t rc = BL_OK;
    struct ibv_context *ctx = NULL;
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    uint8_t port = 0;
    for (int i = 0; i < count && !ctx; ++i) {
        const char *name = ibv_get_device_name(list[i]);
        if (want && *want && (!name || strcmp(name, want))) continue;
        struct ibv_context *c = ibv_open_device(list[i]);
        if (!c) continue;
        if (ibv_query_device(c, &da)) {
            ibv_close_device(c);
            continue;
        }
        for (uint8_t p = 1; p <= da.phys_port_cnt; ++p) {
            if (ib_port > 0 && p != ib_port) continue;
            if (ibv_query_port(c, p, &pa)) continue;
            if (pa.state == IBV_PORT_ACTIVE || (want && *want && ib_port > 0)) {
                port = p;
                break;
            }
        }
        if (port) {
            ctx = c;
            snprintf(d->name, sizeof d->name, "%s", name ? name : "?");
        } else {
            ibv_close_device(c);
            if (want && *want) break;
        }
    }
    if (!ctx) {
        list_devices(list, count, found, sizeof found);
        if (want && *want) {
            int exists = 0;
            for (int i = 0; i < count; ++i)
                if (ibv_get_device_name(list[i]) && !strcmp(ibv_get_device_name(list[i]), want)) exists = 1;
            if (!exists)
                rc = bl_oob_fail(err, n, BL_ENOTFOUND, "no RDMA device named '%s'; there are: %s (`backline rdma devices`)",
                          want, found);
            else if (ib_port > 0)
                rc = bl_oob_fail(err, n, BL_ENOTFOUND, "RDMA device '%s' has no port %d; it has: %s", want, ib_port, found);
            else
                rc = bl_oob_fail(err, n, BL_ENOTFOUND, "RDMA device '%s' has no active port: %s", want, found);
        } else {
            char which[32] = "";
            if (ib_port > 0) snprintf(which, sizeof which, " %d", ib_port);
            rc = bl_oob_fail(err, n, BL_ENOTFOUND, "no RDMA device has an active port%s; there are: %s (`backline rdma devices`)",
                      which, found);
        }
        ibv_free_device_list(list);
        return rc;
    }
    ibv_free_device_list(list);
    d->ctx = ctx;
    d->port = port;
    d->active_mtu = pa.active_mtu;
    d->max_qp_wr = (uint32_t)da.max_qp_wr;
    if (pa.state != IBV_PORT_ACTIVE) {
        rv_close_device(d);
        return bl_oob_fail(err, n, BL_ENOTFOUND, "port %u of RDMA device '%s' is %s, not ACTIVE", port, want,
                    port_state_text(pa.state));
    }
    /* The GID: the one asked for, which must exist and be RoCE v2 (this transport speaks
     * RoCE v2 only), or the first IPv4-mapped RoCE v2 one, or else the first RoCE v2 one. */
    int chosen = -1, first_v2 = -1;
    struct ibv_gid_entry e;
    for (int i = 0; i < pa.gid_tbl_len; ++i) {
        if (ibv_query_gid_ex(ctx, port, (uint32_t)i, &e, 0)) continue;
        if (e.gid_type != IBV_GID_TYPE_ROCE_V2 || zero_gid(e.gid.raw)) {
            if (i == gid_index) break;
            continue;
        }
        if (gid_index >= 0) {
            if (i == gid_index) chosen = i;
            if (i >= gid_index) break;
            continue;
        }
        if (first_v2 < 0) first_v2 = i;
        if (is_v4_mapped(e.gid.raw)) {
            chosen = i;
            break;
        }
    }
    if (chosen < 0 && gid_index < 0) chosen = first_v2;
    if (chosen < 0) {
        char gids[1024];
        list_gids(ctx, port, pa.gid_tbl_len, gids, sizeof gids);
        rc = gid_index >= 0
                 ? bl_oob_fail(err, n, BL_ENOTFOUND, "GID index %d of %s port %u is not a RoCE v2 GID; the port has: %s",
                        gid_index, d->name, port, gids)
                 : bl_oob_fail(err, n, BL_ENOTFOUND, "%s port %u has no RoCE v2 GID (give the interface an address); it has: %s",
                        d->name, port, gids);
        rv_close_device(d);
        return rc;
    }
    if (ibv_query_gid(ctx, port, chosen, &d->gid)) {
        rc = bl_oob_fail(err, n, BL_EBACKEND, "cannot read GID %d of %s port %u: %s", chosen, d->name, port, strerror(errno));
        rv_close_device(d);
        return rc;
    }
    d->gid_index = chosen;
    d->pd = ibv_alloc_pd(ctx);
    if (!d->pd) {
        rc = bl_oob_fail(err, n, BL_EBACKEND, "ibv_alloc_pd on %s: %s", d->name, strerror(errno));
        rv_close_device(d);
        return rc;
    }
    return BL_OK;
}

void rv_close_device(rv_device *d) {
    if (d->pd) ibv_dealloc_pd(d->pd);
    if (d->ctx) ibv_close_device(d->ctx);
    d->pd = NULL;
    d->ctx = NULL;
}

void rv_describe(const rv_device *d, char *out, size_t n) {
    char g[64];
    gid_text(d->gid.raw, g, sizeof g);
    snprintf(out, n, "%s port %u, GID %d %s (RoCE v2), MTU %s", d->name, d->port, d->gid_index, g,
             rv_mtu_text(d->active_mtu));
}

const char *rv_mtu_text(uint32_t mtu) {
    switch (mtu) {
    case IBV_MTU_256: return "256";
    case IBV_MTU_512: return "512";
    case IBV_MTU_1024: return "1024";
    case IBV_MTU_2048: return "2048";
    case IBV_MTU_4096: return "4096";
    default: return "?";
    }
}

/* ---- memory ---- */

int32_t rv_memory_alloc(rv_device *d, rv_memory *m, rv_memory_kind kind, size_t bytes, char *err, size_t n) {
    memset(m, 0, sizeof *m);
    m->kind = kind;
    if (kind != RV_MEMORY_HOST)
        return bl_oob_fail(err, n, BL_EINVAL,
                    "ring memory of kind %d is not built: GPU memory needs a dma-buf registered with "
                    "ibv_reg_dmabuf_mr, which this backend does not have yet", (int)kind);
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    m->bytes = (bytes + page - 1) / page * page;
    m->addr = aligned_alloc(page, m->bytes);
    if (!m->addr) return bl_oob_fail(err, n, BL_ENOMEM, "cannot allocate %zu bytes of ring memory", m->bytes);
    memset(m->addr, 0, m->bytes);
    m->mr = ibv_reg_mr(d->pd, m->addr, m->bytes, RV_ACCESS);
    if (!m->mr) {
        int e = errno;
        free(m->addr);
        m->addr = NULL;
        return bl_oob_fail(err, n, BL_EBACKEND, "ibv_reg_mr of %zu bytes on %s: %s%s", m->bytes, d->name, strerror(e),
                    e == ENOMEM || e == EPERM ? " (raise the locked-memory limit: ulimit -l)" : "");
    }
    return BL_OK;
}

void rv_memory_free(rv_memory *m) {
    if (m->mr) ibv_dereg_mr(m->mr);
    free(m->addr);
    memset(m, 0, sizeof *m);
}

/* ---- queue pairs ---- */

int32_t rv_qp_create(rv_device *d, rv_qp *q, uint32_t rq_depth, char *err, size_t n) {
    memset(q, 0, sizeof *q);
    q->sq_depth = RV_SQ_DEPTH < d->max_qp_wr ? RV_SQ_DEPTH : d->max_qp_wr;
    if (rq_depth > d->max_qp_wr)
        return bl_oob_fail(err, n, BL_EINVAL, "a ring of %u slots needs %u receive entries, but %s queues at most %u; use "
                    "fewer slots", rq_depth, rq_depth, d->name, d->max_qp_wr);
    q->rq_depth = rq_depth;
    q->cq = ibv_create_cq(d->ctx, (int)q->sq_depth + 1, NULL, NULL, 0);
    if (!q->cq) return bl_oob_fail(err, n, BL_EBACKEND, "ibv_create_cq on %s: %s", d->name, strerror(errno));
    if (rq_depth) {
        q->rcq = ibv_create_cq(d->ctx, (int)rq_depth + 1, NULL, NULL, 0);
        if (!q->rcq) {
            int e = errno;
            rv_qp_destroy(q);
            return bl_oob_fail(err, n, BL_EBACKEND, "ibv_create_cq (%u receive entries) on %s: %s", rq_depth, d->name,
                        strerror(e));
        }
    }
    struct ibv_qp_init_attr ia;
    for (uint32_t want = RV_WANT_INLINE;; want = 0) {
        memset(&ia, 0, sizeof ia);
        ia.send_cq = q->cq;
        ia.recv_cq = q->rcq ? q->rcq : q->cq;
        ia.qp_type = IBV_QPT_RC;
        ia.sq_sig_all = 0;
        ia.cap.max_send_wr = q->sq_depth;
        ia.cap.max_recv_wr = rq_depth ? rq_depth : 1;
        ia.cap.max_send_sge = 1;
        ia.cap.max_recv_sge = 1;
        ia.cap.max_inline_data = want;
        q->qp = ibv_create_qp(d->pd, &ia);
        if (q->qp || !want) break; /* a device without inline data refuses any */
    }
    if (!q->qp) {
        int e = errno;
        rv_qp_destroy(q);
        return bl_oob_fail(err, n, BL_EBACKEND, "ibv_create_qp (RC, %u send entries) on %s: %s", q->sq_depth, d->name,
                    strerror(e));
    }
    q->max_inline = ia.cap.max_inline_data;
    q->signal_every = q->sq_depth / 4 ? q->sq_depth / 4 : 1;
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint32_t)bl_oob_now_ns();
    q->psn = r & 0xffffff;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = d->port;
    a.qp_access_flags = RV_ACCESS;
    if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) {
        int e = errno;
        rv_qp_destroy(q);
        return bl_oob_fail(err, n, BL_EBACKEND, "queue pair to INIT on %s: %s", d->name, strerror(e));
    }
    return BL_OK;
}

int32_t rv_qp_connect(rv_device *d, rv_qp *q, const rv_peer *remote, char *err, size_t n) {
    if (remote->mtu < IBV_MTU_256 || remote->mtu > IBV_MTU_4096)
        return bl_oob_fail(err, n, BL_EPEER, "the peer sent path MTU code %u, not one of 1 (256) to 5 (4096)", remote->mtu);
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = remote->mtu < (uint32_t)d->active_mtu ? (enum ibv_mtu)remote->mtu : d->active_mtu;
    a.dest_qp_num = remote->qpn;
    a.rq_psn = remote->psn & 0xffffff;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = RV_QP_MIN_RNR_TIMER;
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, remote->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
    a.ah_attr.grh.hop_limit = RV_HOP_LIMIT;
    a.ah_attr.port_num = d->port;
    if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)) {
        int e = errno;
        char g[64];
        gid_text(remote->gid, g, sizeof g);
        return bl_oob_fail(err, n, BL_EBACKEND, "queue pair to RTR (peer QP %u, GID %s) on %s: %s%s", remote->qpn, g, d->name,
                    strerror(e), e == EINVAL ? " (is the peer's GID reachable from this GID?)" : "");
    }
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = RV_QP_TIMEOUT;
    a.retry_cnt = RV_QP_RETRY_CNT;
    a.rnr_retry = RV_QP_RNR_RETRY;
    a.sq_psn = q->psn;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(q->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                      IBV_QP_MAX_QP_RD_ATOMIC))
        return bl_oob_fail(err, n, BL_EBACKEND, "queue pair to RTS on %s: %s", d->name, strerror(errno));
    return BL_OK;
}

void rv_qp_destroy(rv_qp *q) {
    if (q->qp) ibv_destroy_qp(q->qp);
    if (q->cq) ibv_destroy_cq(q->cq);
    if (q->rcq) ibv_destroy_cq(q->rcq);
    q->qp = NULL;
    q->cq = NULL;
    q->rcq = NULL;
}

void rv_peer_local(const rv_device *d, const rv_qp *q, const rv_memory *m, size_t ring_offset, rv_peer *out) {
    memset(out, 0, sizeof *out);
    out->qpn = q->qp->qp_num;
    out->psn = q->psn;
    memcpy(out->gid, d->gid.raw, 16);
    out->ring_addr = (uint64_t)(uintptr_t)(m->addr + ring_offset);
    out->rkey = m->mr->rkey;
    out->mtu = d->active_mtu;
}


int32_t rv_recv_fill(rv_qp *q, rv_recv *r, char *err, size_t n) {
    memset(r, 0, sizeof *r);
    for (uint32_t i = 0; i < RV_REPOST_BATCH; ++i) r->wr[i].next = i + 1 < RV_REPOST_BATCH ? &r->wr[i + 1] : NULL;
    for (uint32_t posted = 0; posted < q->rq_depth;) {
        uint32_t k = q->rq_depth - posted < RV_REPOST_BATCH ? q->rq_depth - posted : RV_REPOST_BATCH;
        struct ibv_recv_wr *bad = NULL;
        r->wr[k - 1].next = NULL; /* a shorter chain for the last, partial batch */
        int e = ibv_post_recv(q->qp, r->wr, &bad);
        r->wr[k - 1].next = k < RV_REPOST_BATCH ? &r->wr[k] : NULL;
        if (e) return bl_oob_fail(err, n, BL_EBACKEND, "ibv_post_recv: %s", strerror(e));
        posted += k;
    }
    return BL_OK;
}
