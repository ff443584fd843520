/*
 * What the executor client's files share (not part of the ABI). The client (executor.h)
 * is split by concern:
 *   executor_frames.c     the protocol's frame headers, str fields and names
 *   executor_net.c        sockets: I/O with deadlines, "host:port", dialing
 *   executor_auth.c       the secret, libcrypto, and the HELLO/AUTH/WELCOME handshake
 *   executor_conn.c       per-address settings, the connection registry, one request's
 *                         round trip; bl_executor_configure / open / close
 *   executor_signature.c  kernel signatures
 *   executor_objects.c    bl_executor_send_binary
 *   executor_calls.c      bl_executor_launch / call / launch_async / await
 *
 * One connection per address, shared by the sessions opened on it (a reference count in
 * the registry of executor_conn.c). A connection's mutex serializes its requests: each
 * request is sent and its one reply read while the mutex is held, so replies pair with
 * requests by order alone. A request that times out or breaks leaves the byte stream in
 * an unknown state, so it ends the connection ("poisons" it): the socket is closed, the
 * reason kept for later calls, and the connection leaves the registry so a new open
 * connects afresh.
 */
#ifndef BACKLINE_EXECUTOR_INTERNAL_H
#define BACKLINE_EXECUTOR_INTERNAL_H

#include "backline/executor.h"
#include "backline/sdk/stream_frame.h"
#include "internal.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

_Static_assert(BL_EXECUTOR_HEADER_BYTES == BL_STREAM_HEADER_BYTES, "an executor frame starts with a stream frame header");

#define SESSION_MAGIC 0x424c455853455353ull /* "BLEXSESS" */
#define ADDRESS_MAX 1024                    /* longer "host:port" strings are refused */
#define LOST_MAX 640
#define NS_PER_MS 1000000ull

/* ---- frames (executor_frames.c) ---- */

/* The header of a frame of `type` with a body of `len` bytes, into h[0..BL_EXECUTOR_HEADER_BYTES). */
void ex_put_header(uint8_t *h, uint16_t type, uint32_t len);
/* A str field (u16 byte count, bytes); returns the byte after it. */
uint8_t *ex_put_str(uint8_t *p, const char *s, size_t n);
/* A frame type's name, for messages. */
const char *ex_type_name(uint16_t t);
/* `v` (the argument `what` of `fn`) as a name: not NULL, not empty, at most
 * BL_EXECUTOR_MAX_NAME_BYTES; its length into *len. */
int32_t ex_check_name(const char *fn, const char *what, const char *v, size_t *len);

/* ---- sockets (executor_net.c) ---- */

enum { IO_OK, IO_TIMEOUT, IO_EOF, IO_ERR };

static inline uint64_t ex_deadline_after(int64_t ms) { return bl__now() + (uint64_t)ms * NS_PER_MS; }

/* All n bytes by the deadline (bl__now() ns): an IO_* code, errno in *err on IO_ERR. */
int ex_send_all(int fd, const void *buf, size_t n, uint64_t deadline, int *err);
int ex_recv_all(int fd, void *buf, size_t n, uint64_t deadline, int *err);
/* Split "host:port" / "[v6]:port" into host and port (checked, not resolved). */
int32_t ex_parse_address(const char *address, char *host, size_t hostcap, char *port, size_t portcap);
/* Resolve and connect (non-blocking, by the deadline); TCP_NODELAY and SO_KEEPALIVE on. */
int32_t ex_dial(const char *address, uint64_t deadline, int64_t budget_ms, int *out);

/* ---- authentication (executor_auth.c) ---- */

/* Read the secret from `secret_file`, connect to `address` and run the handshake, all
 * within min(timeout_ms, BL_EXECUTOR_HANDSHAKE_TIMEOUT_MS); the authenticated socket in *fd.
 * forwarded: the tags cover no addresses (bl_executor_configure_forwarded). */
int32_t ex_connect_authenticated(const char *address, const char *secret_file, int64_t timeout_ms, int forwarded,
                                 int *fd);

/* ---- connections (executor_conn.c) ---- */

struct conn {
    char *address;
    int refs;           /* registry_mu: sessions using it */
    int linked;         /* registry_mu: in the registry (found by open) */
    int64_t timeout_ms; /* atomic: the per-call deadline */
    struct conn *next;  /* registry_mu */
    pthread_mutex_t mu; /* one request at a time; guards the fields below */
    int fd;             /* -1 once lost or closed */
    char lost[LOST_MAX]; /* why the connection ended */
    char **sent;        /* object names sent on this connection */
    size_t nsent, capsent;
    uint8_t *buf; /* request, then reply, of the request in progress */
    size_t cap;
};

struct bl_executor_session {
    uint64_t magic;
    struct conn *c;
};

#define CHECK_SESSION(s, fn)                                                                                 \
    do {                                                                                                     \
        if (!(s)) return bl__fail(BL_ESTATE, fn ": no session (NULL: its bl_executor_open failed)");        \
        if ((s)->magic != SESSION_MAGIC) return bl__fail(BL_ESTATE, fn ": not an open bl_executor_session"); \
    } while (0)

/* End the connection (with c->mu held): keep the reason for later calls, and fail with it. */
int32_t ex_conn_break(struct conn *c, int32_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Take the connection for one request (waiting for another request at most until the
 * deadline) and check it is still usable; the caller unlocks c->mu. */
int32_t ex_conn_enter(struct conn *c, uint64_t deadline, const char *fn);
/* Room for an n-byte message in c->buf. */
int32_t ex_reserve(struct conn *c, size_t n);
/* Send the request in c->buf[0..len) (header included) and read its reply into c->buf. */
int32_t ex_round_trip(struct conn *c, size_t len, const char *what, uint64_t deadline, uint16_t *type,
                      uint32_t *blen);
/* A reply of the wrong type or shape for `what` (an ERROR or CRASHED: the executor's failure). */
int32_t ex_unexpected_reply(struct conn *c, uint16_t type, uint32_t n, const char *what);

/* ---- signatures (executor_signature.c) ---- */

/* A checked signature: where its parts start, so marshalling can walk them again. */
struct sig {
    const char *text;
    const char *fields;   /* first field of a struct return; NULL for a single result or void */
    const char *params;   /* just after '(' */
    int64_t nparams, nresults;
    uint64_t result_bytes; /* the results' part of the results blob */
    uint64_t fixed_bytes;  /* the non-ptr parameters' part of the args blob */
};

int32_t ex_parse_signature(const char *fn, const char *text, struct sig *g);
/* The next type of a checked list at *p (and past the ',' after it). */
void ex_next_type(const char **p, uint64_t *size, int *is_ptr);

#endif
