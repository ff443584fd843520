/*
 * backline/sdk/stream_frame.h -- the 12-byte header that starts every message on a byte
 * stream (TCP), and the big-endian integers such messages are made of: the executor
 * protocol (executor.h, docs/executor-protocol.md) and the handshakes of networked
 * transports (oob.h) share it. Not the ring's bl_frame_header (backline.h), which lives in
 * shared or registered memory and is little-endian.
 *
 *   offset 0: magic u32 | 4: version u16 | 6: type u16 | 8: body bytes u32   (big-endian)
 *
 * Each protocol chooses its magic, version and types, and checks them itself. Not part of
 * the ABI: native/src/stream_frame.c is compiled into libbackline and, with oob.c, into
 * each networked plugin's library (private there: -fvisibility=hidden).
 */
#ifndef BACKLINE_SDK_STREAM_FRAME_H
#define BACKLINE_SDK_STREAM_FRAME_H

#include <stdint.h>

#define BL_STREAM_HEADER_BYTES 12u

typedef struct bl_stream_header {
    uint32_t magic;
    uint16_t version, type;
    uint32_t body_bytes;
} bl_stream_header;

/* Big-endian fields at p. */
void bl_be_put16(uint8_t *p, uint16_t v);
void bl_be_put32(uint8_t *p, uint32_t v);
void bl_be_put64(uint8_t *p, uint64_t v);
uint16_t bl_be_get16(const uint8_t *p);
uint32_t bl_be_get32(const uint8_t *p);
uint64_t bl_be_get64(const uint8_t *p);

/* Encode a header into p[0..BL_STREAM_HEADER_BYTES). */
void bl_stream_header_put(uint8_t *p, uint32_t magic, uint16_t version, uint16_t type, uint32_t body_bytes);
/* Decode the header at p[0..BL_STREAM_HEADER_BYTES). */
bl_stream_header bl_stream_header_get(const uint8_t *p);

#endif
