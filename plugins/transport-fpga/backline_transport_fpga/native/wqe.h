/*
 * wqe.h -- the ERNIC work-queue entry (PG332) as bytes: encode for whoever posts one (the driver's
 * software post, the engine model's WQE_POST state), decode for the ERNIC part of the model.
 * Field positions are hwhs.h's ERNIC_WQE_*; every multi-byte field is little-endian except the
 * immediate, which is kept as it goes on the wire (big-endian, as verbs' imm_data).
 */
#ifndef BACKLINE_FPGA_WQE_H
#define BACKLINE_FPGA_WQE_H

#include "hwhs.h"

#include <stdint.h>
#include <string.h>

typedef struct ernic_wqe {
    uint16_t wrid;
    uint64_t local_addr; /* bus address */
    uint32_t length;
    uint8_t opcode;      /* ERNIC_OP_* */
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t imm_be;     /* the immediate in network byte order (bytes 32..35 of the entry) */
} ernic_wqe;

static inline void ernic_put_le(uint8_t *p, uint64_t v, unsigned bytes) {
    for (unsigned i = 0; i < bytes; ++i) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t ernic_get_le(const uint8_t *p, unsigned bytes) {
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; ++i) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* The 64 bytes of `w`; reserved bits are zero. */
static inline void ernic_wqe_encode(const ernic_wqe *w, uint8_t out[ERNIC_WQE_BYTES]) {
    memset(out, 0, ERNIC_WQE_BYTES);
    ernic_put_le(out + ERNIC_WQE_WRID, w->wrid, 2);
    ernic_put_le(out + ERNIC_WQE_LADDR, w->local_addr, 8);
    ernic_put_le(out + ERNIC_WQE_LENGTH, w->length, 4);
    out[ERNIC_WQE_OPCODE] = w->opcode;
    ernic_put_le(out + ERNIC_WQE_RADDR, w->remote_addr, 8);
    ernic_put_le(out + ERNIC_WQE_RKEY, w->rkey, 4);
    memcpy(out + ERNIC_WQE_IMM, &w->imm_be, 4);
}

static inline void ernic_wqe_decode(const uint8_t in[ERNIC_WQE_BYTES], ernic_wqe *w) {
    w->wrid = (uint16_t)ernic_get_le(in + ERNIC_WQE_WRID, 2);
    w->local_addr = ernic_get_le(in + ERNIC_WQE_LADDR, 8);
    w->length = (uint32_t)ernic_get_le(in + ERNIC_WQE_LENGTH, 4);
    w->opcode = in[ERNIC_WQE_OPCODE];
    w->remote_addr = ernic_get_le(in + ERNIC_WQE_RADDR, 8);
    w->rkey = (uint32_t)ernic_get_le(in + ERNIC_WQE_RKEY, 4);
    memcpy(&w->imm_be, in + ERNIC_WQE_IMM, 4);
}

#endif
