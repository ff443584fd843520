/*
 * backline/sdk/oob.h -- the out-of-band side of transports whose nodes are in other processes
 * or on other hosts: a TCP connection with deadlines and versioned handshake messages in
 * network byte order. Not part of the ABI: plugins compile backline_core/native/src/oob.c
 * into their own library (backline_core.build.plain_library(..., oob=True)), where it stays
 * private (-fvisibility=hidden), so each transport does this one way without a copy.
 *
 * Every handshake message starts with a 12-byte big-endian header: magic u32, version u16,
 * type u16, body bytes u32; each transport chooses its magic, version and message types.
 * Deadlines are absolute CLOCK_MONOTONIC nanoseconds (bl_oob_now_ns). Errors are a bl_status
 * with a message written into err (n bytes).
 */
#ifndef BACKLINE_OOB_H
#define BACKLINE_OOB_H

#include <backline/trust.h>

#include <stddef.h>
#include <stdint.h>

#define BL_OOB_HEADER_BYTES 12u
#define BL_OOB_MAX_BODY 4096u

/* Format a message into err and return rc. */
int32_t bl_oob_fail(char *err, size_t n, int32_t rc, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
uint64_t bl_oob_now_ns(void);

/* Big-endian fields. */
void bl_oob_put32(uint8_t *p, uint32_t v);
void bl_oob_put64(uint8_t *p, uint64_t v);
uint32_t bl_oob_get32(const uint8_t *p);
uint64_t bl_oob_get64(const uint8_t *p);
/* The printable start of bytes a foreign peer sent, for error messages. */
void bl_oob_printable(const uint8_t *p, size_t len, char *out, size_t n);

/* Listen on host:port (SO_REUSEADDR; a port in use is BL_EBUSY, an address not of this
 * machine BL_EINVAL); *fd is non-blocking. */
int32_t bl_oob_listen(const char *host, int port, int *fd, char *err, size_t n);
/* Dial host:port, retrying refusals until the deadline; TCP_NODELAY. The error of a dial
 * that found no listener names `transport` and how to start its coprocessor. */
int32_t bl_oob_dial(const char *host, int port, uint64_t deadline, const char *transport, int *fd, char *err,
                    size_t n);
/* Accept one connection if one is waiting: 1 accepted, 0 none, <0 error. */
int bl_oob_accept(int listen_fd, int *fd);
/* All of buf, or BL_ETIMEOUT / BL_EPEER ("closed", "broke") with the reason in err. */
int32_t bl_oob_send_all(int fd, const void *buf, size_t len, uint64_t deadline, char *err, size_t n);
int32_t bl_oob_recv_all(int fd, void *buf, size_t len, uint64_t deadline, char *err, size_t n);
/* 1 when the peer has closed (or reset) the connection, 0 while it is open. */
int bl_oob_peer_closed(int fd);

typedef struct bl_oob_header {
    uint32_t magic;
    uint16_t version, type;
    uint32_t body_bytes;
    char text[64]; /* the header's bytes made printable, to show what a foreign peer sent */
} bl_oob_header;
/* Header and body (len <= BL_OOB_MAX_BODY) in one send. */
int32_t bl_oob_send_msg(int fd, uint32_t magic, uint16_t version, uint16_t type, const uint8_t *body, uint32_t len,
                        uint64_t deadline, char *err, size_t n);
/* One header, decoded; bl_oob_recv_all's errors. The caller checks magic, version and type. */
int32_t bl_oob_recv_header(int fd, bl_oob_header *h, uint64_t deadline, char *err, size_t n);

/* ---- the trust kit (backline/trust.h): secrets, nonces and tags bound to the connection ----
 * libcrypto (OpenSSL 3) is dlopened at first use, so no library that compiles this kit needs
 * it to load. */

typedef struct bl_oob_secret {
    size_t len;
    uint8_t bytes[BL_TRUST_MAX_SECRET_BYTES + 2];
} bl_oob_secret;

/* The secret in the file at path: a regular file of this user, no group/other bits, 16..4096
 * bytes less one trailing newline. `what` ("for executor 127.0.0.1:9000") goes in errors. */
int32_t bl_oob_secret_read(const char *path, const char *what, bl_oob_secret *s, char *err, size_t n);
void bl_oob_secret_clear(bl_oob_secret *s);
int32_t bl_oob_nonce(uint8_t out[BL_TRUST_NONCE_BYTES], char *err, size_t n);

/* What one handshake's tags cover (backline/trust.h). */
typedef struct bl_oob_transcript {
    const char *protocol; /* "executor", "rdma", "ucx" */
    uint8_t server_nonce[BL_TRUST_NONCE_BYTES], client_nonce[BL_TRUST_NONCE_BYTES];
    uint8_t client[BL_TRUST_ADDRESS_BYTES], server[BL_TRUST_ADDRESS_BYTES];
    const uint8_t *context; /* what the client asks for; context_len <= BL_TRUST_MAX_CONTEXT_BYTES */
    size_t context_len;
} bl_oob_transcript;

/* The connection's two addresses into t->client and t->server; server_side: fd is the server's end. */
int32_t bl_oob_addresses(int fd, int server_side, bl_oob_transcript *t, char *err, size_t n);
/* HMAC-SHA256(secret, T(side)), side "client" or "server". */
int32_t bl_oob_tag(const bl_oob_secret *s, const char *side, const bl_oob_transcript *t,
                   uint8_t out[BL_TRUST_TAG_BYTES], char *err, size_t n);
/* 1 when the tags are equal (constant time). */
int bl_oob_tags_equal(const uint8_t *a, const uint8_t *b);

/* The handshakes a server has in progress (BL_TRUST_MAX_PENDING, BL_TRUST_MAX_PENDING_PER_PEER
 * from one address): the oldest of a peer, or of all, makes room for a new one. */
typedef struct bl_oob_pending {
    int fd; /* -1: a free entry */
    uint8_t peer[16];
    uint64_t since, deadline;
    uint8_t nonce[BL_TRUST_NONCE_BYTES];
    size_t got;                             /* bytes of the expected message received */
    uint8_t buf[BL_OOB_HEADER_BYTES + 512]; /* the expected message */
} bl_oob_pending;

typedef struct bl_oob_gate {
    bl_oob_pending entry[BL_TRUST_MAX_PENDING];
} bl_oob_gate;

void bl_oob_gate_init(bl_oob_gate *g);
/* An entry for the new connection fd (its deadline BL_TRUST_HANDSHAKE_TIMEOUT_MS from now, or
 * `deadline` if that is sooner); an entry it displaced is closed first. */
bl_oob_pending *bl_oob_gate_admit(bl_oob_gate *g, int fd, uint64_t deadline);
/* Forget the entry; close its fd if close_fd. */
void bl_oob_gate_drop(bl_oob_gate *g, bl_oob_pending *p, int close_fd);
/* Close every entry. */
void bl_oob_gate_clear(bl_oob_gate *g);

#endif
