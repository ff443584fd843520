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

#endif
