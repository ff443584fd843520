/*
 * worker.h -- the UCX set-up of the ucx backend (ucx.c): a context and worker for active
 * messages under one `tls` choice, the worker address as the handshake carries it, endpoints
 * to a peer's address and what UCX chose for them. Kept apart from the backend so that a bare
 * UCX ping-pong (the bench's floor) sets up its worker exactly as the framework does. Nothing
 * here is per round. Errors are a bl_status with a message in err (n bytes).
 */
#ifndef BACKLINE_UCX_WORKER_H
#define BACKLINE_UCX_WORKER_H

#include <backline/backline.h>
#include <ucp/api/ucp.h>

#include <stddef.h>
#include <stdint.h>

/* The framework's handshake magic, "BLUX" (ucx.c; the floor names it in its errors). */
#define UX_MAGIC_TRANSPORT 0x424c5558u

/* The `tls` choices: which UCX transports a worker may use (UCX_TLS). */
enum { UX_TLS_SHM = 0, UX_TLS_TCP = 1, UX_TLS_AUTO = 2, UX_TLS_COUNT };
/* The choice named `name` ("shm", "tcp", "auto"), or -1. */
int ux_tls_find(const char *name);
const char *ux_tls_name(int tls);
/* Its UCX_TLS list ("posix,sysv,self"), or NULL for auto (every transport UCX has). */
const char *ux_tls_ucx(int tls);

/* The most bytes of a worker address a handshake carries (an address grows with the
 * transports a worker has); a longer one is refused with advice to choose fewer. */
#define UX_ADDRESS_BYTES 2048u
/* A worker address in a handshake: its length (u32, big-endian), then UX_ADDRESS_BYTES,
 * zero-padded, then the worker's tls (u32, UX_TLS_*), so that ends that cannot reach each other
 * say so at the handshake rather than time out on the first round. */
#define UX_ADDRESS_RECORD_BYTES (4u + UX_ADDRESS_BYTES + 4u)

typedef struct ux_worker {
    int tls; /* UX_TLS_* */
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *address; /* this worker's, for the peer's ucp_ep_create */
    size_t address_len;
} ux_worker;

/* A context and worker (one thread at a time drives it) whose active messages with id am_id
 * go to on_message(arg, ...), whole (UCP_AM_FLAG_WHOLE_MSG), and the worker's address. w is
 * zeroed, or what an earlier failed call left (freed first); on failure what was made stays
 * in w for ux_worker_close. */
int32_t ux_worker_open(ux_worker *w, int tls, uint16_t am_id, ucp_am_recv_callback_t on_message, void *arg, char *err,
                       size_t n);
/* Free what ux_worker_open made; close its endpoints first. A zeroed w has nothing. */
void ux_worker_close(ux_worker *w);

/* This worker's address as a record (UX_ADDRESS_RECORD_BYTES at p); BL_EBACKEND when it is
 * longer than a record holds. */
int32_t ux_address_put(const ux_worker *w, uint8_t *p, char *err, size_t n);
/* A peer's record into addr (UX_ADDRESS_BYTES) and *len; a length of 0 or more than a record
 * holds is BL_EPEER, naming `who`, and so is a peer whose tls this worker cannot reach
 * (same_host: the peer runs on this host), with advice to give both ends the same tls. */
int32_t ux_address_get(const ux_worker *w, const uint8_t *p, int same_host, uint8_t *addr, size_t *len,
                       const char *who, char *err, size_t n);

/* An endpoint to the worker at `address`, on the thread that drives the worker; same_host: the
 * peer runs on this host (bl_remote_same_host of the handshake's connection). on_error(arg,
 * ...) is told when the peer fails, where the transport can tell. UCX 1.13's shared-memory
 * transports cannot (their endpoints are unreachable in UCX's peer-failure mode, and UCX then
 * picks TCP even between two processes of one host), so with tls=shm, and with tls=auto toward
 * a peer on this host, the endpoint has no error handling -- UCX then takes shared memory --
 * and the caller learns of a dead peer from the out-of-band connection's closing. */
int32_t ux_ep_open(ux_worker *w, const void *address, int same_host, ucp_err_handler_cb_t on_error, void *arg,
                   ucp_ep_h *ep, char *err, size_t n);
/* Whether ux_ep_open's endpoint toward such a peer reports failures itself (on_error). */
int ux_ep_reports_failure(const ux_worker *w, int same_host);
/* Close an endpoint without waiting for a peer that may be gone (at most 1 s of progress). */
void ux_ep_close(ux_worker *w, ucp_ep_h ep);
/* The transports and devices UCX chose for an endpoint, comma-separated ("posix/memory", "tcp/lo"). */
void ux_ep_transports(ucp_ep_h ep, char *out, size_t n);

#endif
