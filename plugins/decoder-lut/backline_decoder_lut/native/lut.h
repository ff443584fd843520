/*
 * lut.h -- lookup-table decoding of one parity-check matrix H (detectors x columns), with the
 * rules of CUDA-Q QEC's single_error_lut / multi_error_lut (docs/decoder-lut.md).
 *
 * The table holds, for every nonzero syndrome that some error pattern of weight 1..depth
 * produces, the first such pattern: weights in increasing order, and within a weight the
 * column tuples in lexicographic order. A decode looks the syndrome up; a zero syndrome and
 * a miss both give the empty estimate (a miss is "not converged").
 *
 * Parameter blob (little-endian, every field 4-byte aligned):
 *   u32 magic LUT_MAGIC | u32 version | u32 depth | u32 detectors | u32 columns | u32 nnz
 *   | u64 max_table_bytes | u32 col_ptr[columns + 1] | u32 rows[nnz]       (H, column-compressed)
 *   | reply map (backline/sdk/dem_reply.h: R, reply = R e mod 2)
 * Syndromes arrive bit-packed LSB first, ceil(detectors / 8) bytes; replies leave the same way.
 */
#ifndef BACKLINE_LUT_H
#define BACKLINE_LUT_H

#include <stdint.h>

#include <backline/backline.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Decimal, so that cffi reads them (native.py declares this header to cffi). */
#define LUT_MAGIC 1414876226u /* 0x54554C42: the bytes "BLUT" as a little-endian u32 */
#define LUT_VERSION 1u
#define LUT_HEADER_BYTES 32u
#define LUT_MAX_DEPTH 6u

/* Return values of lut_fn other than 0 (the round's fn_status). */
enum {
    LUT_EWIDTH = 1, /* the payload is not ceil(detectors / 8) bytes */
    LUT_ECAP = 2,   /* out_cap is smaller than the reply */
};

typedef struct lut_table lut_table;

/* Upper bound of the bytes a table of this shape takes: sum_{w=1..depth} C(columns, w) patterns
 * (stored in *patterns, saturating at UINT64_MAX), entries at most min(patterns, 2^detectors - 1),
 * each a key of ceil(detectors / 64) words, `depth` column indices and its hash slots. */
BL_API uint64_t lut_estimate_bytes(uint32_t detectors, uint32_t columns, uint32_t depth, uint64_t *patterns);

/* Build the table from a parameter blob. NULL on error; lut_last_error() says why. A table whose
 * estimate exceeds the blob's max_table_bytes is refused before anything is allocated. */
BL_API lut_table *lut_create(const uint8_t *blob, uint64_t len);
BL_API void lut_free(lut_table *t);
BL_API const char *lut_last_error(void);
/* Distinct nonzero syndromes in the table. */
BL_API uint64_t lut_entries(const lut_table *t);
BL_API uint32_t lut_reply_bytes(const lut_table *t);

/* `shots` syndromes back to back (rows of ceil(detectors / 8) bytes) -> replies (rows of
 * lut_reply_bytes). converged: NULL, or `shots` bytes set to 1 (zero syndrome or table hit) or 0
 * (a miss, whose reply is R 0 = 0). Returns the number of misses. */
BL_API int64_t lut_decode_batch(const lut_table *t, const uint8_t *syndromes, uint64_t shots, uint8_t *replies,
                                uint8_t *converged);

/* The coprocessor function (backline.h's bl_fn_init / bl_coprocessor_fn / bl_fn_fini). */
BL_API int32_t lut_init(const uint8_t *params, uint64_t len, void **ctx);
BL_API void lut_fini(void *ctx);
BL_API int32_t lut_fn(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len, uint8_t *out,
                      uint32_t out_cap, uint32_t *out_len);

#ifdef __cplusplus
}
#endif
#endif
