/* The UCX context, worker and endpoints of the ucx backend (see worker.h). */
#define _GNU_SOURCE
#include "worker.h"

#include <backline/sdk/oob.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The UCX transports each `tls` value allows (UCX_TLS); "auto" leaves UCX's own choice. */
static const struct {
    const char *name, *ucx_tls;
} tls_choices[UX_TLS_COUNT] = {
    [UX_TLS_SHM] = {"shm", "posix,sysv,self"},
    [UX_TLS_TCP] = {"tcp", "tcp,self"},
    [UX_TLS_AUTO] = {"auto", NULL},
};

int ux_tls_find(const char *name) {
    for (int i = 0; i < UX_TLS_COUNT; ++i)
        if (!strcmp(name, tls_choices[i].name)) return i;
    return -1;
}

const char *ux_tls_name(int tls) { return tls >= 0 && tls < UX_TLS_COUNT ? tls_choices[tls].name : "?"; }

const char *ux_tls_ucx(int tls) { return tls >= 0 && tls < UX_TLS_COUNT ? tls_choices[tls].ucx_tls : NULL; }

int32_t ux_worker_open(ux_worker *w, int tls, uint16_t am_id, ucp_am_recv_callback_t on_message, void *arg, char *err,
                       size_t n) {
    ux_worker_close(w);
    w->tls = tls;
    const char *ucx_tls = ux_tls_ucx(tls);
    ucp_config_t *config;
    ucs_status_t s = ucp_config_read(NULL, NULL, &config);
    if (s != UCS_OK) return bl_oob_fail(err, n, BL_EBACKEND, "ucp_config_read: %s", ucs_status_string(s));
    if (ucx_tls && (s = ucp_config_modify(config, "TLS", ucx_tls)) != UCS_OK) {
        ucp_config_release(config);
        return bl_oob_fail(err, n, BL_EBACKEND, "UCX refused TLS=%s: %s", ucx_tls, ucs_status_string(s));
    }
    ucp_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = UCP_PARAM_FIELD_FEATURES;
    p.features = UCP_FEATURE_AM;
    s = ucp_init(&p, config, &w->context);
    ucp_config_release(config);
    if (s != UCS_OK) {
        w->context = NULL;
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_init (tls=%s): %s", tls_choices[tls].name, ucs_status_string(s));
    }
    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof wp);
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* one thread at a time drives it (no locks inside UCX) */
    if ((s = ucp_worker_create(w->context, &wp, &w->worker)) != UCS_OK) {
        w->worker = NULL;
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_worker_create: %s", ucs_status_string(s));
    }
    ucp_am_handler_param_t hp;
    hp.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                    UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    hp.id = am_id;
    hp.cb = on_message;
    hp.arg = arg;
    hp.flags = UCP_AM_FLAG_WHOLE_MSG;
    if ((s = ucp_worker_set_am_recv_handler(w->worker, &hp)) != UCS_OK)
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(s));
    if ((s = ucp_worker_get_address(w->worker, &w->address, &w->address_len)) != UCS_OK) {
        w->address = NULL;
        return bl_oob_fail(err, n, BL_EBACKEND, "ucp_worker_get_address: %s", ucs_status_string(s));
    }
    return BL_OK;
}

void ux_worker_close(ux_worker *w) {
    if (w->worker) {
        if (w->address) ucp_worker_release_address(w->worker, w->address);
        ucp_worker_destroy(w->worker);
    }
    if (w->context) ucp_cleanup(w->context);
    w->address = NULL;
    w->worker = NULL;
    w->context = NULL;
}

int32_t ux_address_put(const ux_worker *w, uint8_t *p, char *err, size_t n) {
    if (w->address_len > UX_ADDRESS_BYTES)
        return bl_oob_fail(err, n, BL_EBACKEND, "this UCX worker's address is %zu bytes, more than the handshake's %u; "
                           "choose fewer transports (tls=shm or tls=tcp)", w->address_len, UX_ADDRESS_BYTES);
    bl_oob_put32(p, (uint32_t)w->address_len);
    memset(p + 4, 0, UX_ADDRESS_BYTES);
    memcpy(p + 4, w->address, w->address_len);
    bl_oob_put32(p + 4 + UX_ADDRESS_BYTES, (uint32_t)w->tls);
    return BL_OK;
}

int32_t ux_address_get(const ux_worker *w, const uint8_t *p, int same_host, uint8_t *addr, size_t *len,
                       const char *who, char *err, size_t n) {
    uint32_t got = bl_oob_get32(p), tls = bl_oob_get32(p + 4 + UX_ADDRESS_BYTES);
    if (!got || got > UX_ADDRESS_BYTES)
        return bl_oob_fail(err, n, BL_EPEER, "%s sent a worker address of %u bytes (1 to %u allowed)", who, got,
                           UX_ADDRESS_BYTES);
    if (tls >= UX_TLS_COUNT) return bl_oob_fail(err, n, BL_EPEER, "%s sent tls %u, which is none of this build's", who, tls);
    /* Shared memory and TCP have no transport in common, and the two ends must agree on whether
     * the endpoint reports a failed peer (ux_ep_reports_failure): UCX never completes the wire-up
     * otherwise, and the first round would only time out. */
    int theirs = (int)tls, shm_tcp = (w->tls == UX_TLS_SHM && theirs == UX_TLS_TCP) ||
                                     (w->tls == UX_TLS_TCP && theirs == UX_TLS_SHM);
    int mine_reports = ux_ep_reports_failure(w, same_host);
    int theirs_reports = theirs == UX_TLS_TCP || (theirs == UX_TLS_AUTO && !same_host);
    if (shm_tcp || mine_reports != theirs_reports)
        return bl_oob_fail(err, n, BL_EPEER, "this end has tls=%s and %s tls=%s: UCX cannot connect them%s; give both "
                           "ends the same tls (the transport argument tls=... sets both)", ux_tls_name(w->tls), who,
                           ux_tls_name(theirs), same_host ? " on one host" : "");
    memcpy(addr, p + 4, got);
    *len = got;
    return BL_OK;
}

int ux_ep_reports_failure(const ux_worker *w, int same_host) {
    return w->tls == UX_TLS_TCP || (w->tls == UX_TLS_AUTO && !same_host);
}

int32_t ux_ep_open(ux_worker *w, const void *address, int same_host, ucp_err_handler_cb_t on_error, void *arg,
                   ucp_ep_h *ep, char *err, size_t n) {
    ucp_ep_params_t p;
    memset(&p, 0, sizeof p);
    p.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = address;
    p.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_error;
    p.err_handler.arg = arg;
    if (!ux_ep_reports_failure(w, same_host)) {
        /* UCX 1.13's shared-memory transports cannot report a failed peer (their endpoints are
         * unreachable in that mode, which would leave tls=auto on TCP): a dead peer is told by
         * the out-of-band connection's closing and the deadline. */
        p.field_mask &= ~(uint64_t)(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER);
    }
    ucs_status_t s = ucp_ep_create(w->worker, &p, ep);
    if (s != UCS_OK) {
        *ep = NULL;
        return bl_oob_fail(err, n, BL_EPEER, "cannot reach the peer's UCX worker (ucp_ep_create: %s); with tls=%s both "
                           "sides need a transport in common", ucs_status_string(s), tls_choices[w->tls].name);
    }
    return BL_OK;
}

void ux_ep_close(ux_worker *w, ucp_ep_h ep) {
    if (!ep) return;
    ucp_request_param_t p;
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE; /* the peer may be gone: do not wait for it */
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
    if (UCS_PTR_IS_PTR(r)) {
        uint64_t until = bl_oob_now_ns() + 1000000000ull;
        while (ucp_request_check_status(r) == UCS_INPROGRESS && bl_oob_now_ns() < until) ucp_worker_progress(w->worker);
        ucp_request_free(r);
    }
}

void ux_ep_transports(ucp_ep_h ep, char *out, size_t n) {
    /* ucp_ep_print_info's lanes name the transports and devices UCX chose (posix/memory, tcp/lo). */
    char *text = NULL;
    size_t len = 0;
    out[0] = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return;
    ucp_ep_print_info(ep, f);
    fclose(f);
    size_t o = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *lane = strstr(line, "lane[");
        char *colon = lane ? strchr(lane, ':') : NULL;
        if (!colon) continue;
        char name[64];
        /* "lane[0]:  8:posix/memory.0 md[4] ..." -> "posix/memory" */
        if (sscanf(colon + 1, " %*[0-9]:%63[^. ]", name) != 1) continue;
        if (strstr(out, name)) continue;
        o += (size_t)snprintf(out + o, n - o, "%s%s", o ? "," : "", name);
        if (o >= n) break;
    }
    free(text);
}
