/*
 * backline/sdk/cuqr.h -- NVIDIA CUDA-Q QEC's real-time decoding RPC ("CUQR"), as its public
 * sources define it (cuda-quantum realtime/docs/cudaq_realtime_message_protocol.md; cudaqx
 * decoder_rpc_wire_format.h). docs/cudaq-interop.md explains it; this header is the one place
 * its numbers live: C includes it, Python reads the numbers through cffi
 * (backline_core.sdk.cdef_from_header). Declarations and constants only; not part of the ABI.
 *
 * Every field is little-endian. A message fills one slot of the agreed slot size: the header,
 * then arg_len (request) or result_len (response) bytes, then padding.
 *
 *   request  (24 bytes): u32 magic CUQR_REQUEST_MAGIC | u32 function_id | u32 arg_len
 *                        | u32 request_id | u64 ptp_timestamp
 *   response (24 bytes): u32 magic CUQR_RESPONSE_MAGIC | i32 status | u32 result_len
 *                        | u32 request_id | u64 ptp_timestamp   (request_id, ptp_timestamp echoed)
 *
 * function_id is the FNV-1a 32-bit hash (offset basis CUQR_FNV_OFFSET, prime CUQR_FNV_PRIME)
 * of the handler's name; the three handlers:
 *
 *   enqueue_syndromes  args: i64 decoder_id | i64 counter | i64 syndrome_mapping_id
 *                            | i64 num_syndromes | ceil(num_syndromes / 8) bytes of bits
 *                      result: none (status OK once ingested)
 *   get_corrections    args: i64 decoder_id | i64 return_size | u8 reset   (17 bytes)
 *                      result: ceil(return_size / 8) bytes of observable flips
 *   reset_decoder      args: i64 decoder_id                                 (8 bytes)
 *                      result: none
 *
 * Bits are packed least significant first: bit i is bit i % 8 of byte i / 8.
 * The numbers are decimal so that cffi reads them (hexadecimal in the comments).
 */
#ifndef BACKLINE_SDK_CUQR_H
#define BACKLINE_SDK_CUQR_H

#include <stdint.h>

#define CUQR_REQUEST_MAGIC 1129664850u  /* 0x43555152, "CUQR" */
#define CUQR_RESPONSE_MAGIC 1129664851u /* 0x43555153, "CUQS" */
#define CUQR_HEADER_BYTES 24u

#define CUQR_FNV_OFFSET 2166136261u /* 0x811C9DC5 */
#define CUQR_FNV_PRIME 16777619u    /* 0x01000193 */
#define CUQR_FN_ENQUEUE_SYNDROMES 2128133762u /* 0x7ED8BE82, fnv1a("enqueue_syndromes") */
#define CUQR_FN_GET_CORRECTIONS 2284673953u   /* 0x882D5BA1, fnv1a("get_corrections") */
#define CUQR_FN_RESET_DECODER 2541377999u     /* 0x977A59CF, fnv1a("reset_decoder") */

#define CUQR_ENQUEUE_ARGS_BYTES 32u /* before the bits */
#define CUQR_GET_ARGS_BYTES 17u
#define CUQR_RESET_ARGS_BYTES 8u

/* response status (i32): positive is a handler's, negative the protocol's */
#define CUQR_OK 0
#define CUQR_INVALID_DECODER 1
#define CUQR_BAD_REQUEST 2
#define CUQR_INTERNAL_ERROR 3
#define CUQR_NOT_READY 4
#define CUQR_BUSY 5
#define CUQR_SYNDROMES_DROPPED 6

/* CUDA-Q's server: decoders at once, and its UDP transport's default ring */
#define CUQR_MAX_DECODERS 32
#define CUQR_DEFAULT_NUM_SLOTS 8
#define CUQR_DEFAULT_SLOT_SIZE 256
/* the largest slot a UDP datagram carries */
#define CUQR_MAX_SLOT_SIZE 65507

/* The headers as laid out on a little-endian host (no padding: every field is at its natural
 * alignment). */
typedef struct cuqr_request_header {
    uint32_t magic, function_id, arg_len, request_id;
    uint64_t ptp_timestamp;
} cuqr_request_header;

typedef struct cuqr_response_header {
    uint32_t magic;
    int32_t status;
    uint32_t result_len, request_id;
    uint64_t ptp_timestamp;
} cuqr_response_header;

#endif
