/*
 * backline/sdk/dem_reply.h -- the reply of a decoder built from a detector error model or
 * from matrices: R e mod 2 for its error estimate e, bit-packed LSB first (bit i is bit i % 8
 * of byte i / 8). R's rows are the reply's bits (docs/decoders.md "Round layout"): the
 * observables, then, where the caller asked for them, the detectors the committed columns flip.
 * Python makes R (backline_core.sdk.reply_matrix) and its blob (encode_reply_map):
 *
 *   u32 bits | u32 columns | u32 nnz | u32 col_ptr[columns + 1] | u32 rows[nnz]   (little-endian)
 *
 * R in compressed-column form, so a sparse estimate costs one pass over its set columns.
 * Header-only: each decoder plugin compiles it in; not part of the ABI.
 */
#ifndef BACKLINE_SDK_DEM_REPLY_H
#define BACKLINE_SDK_DEM_REPLY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct bl_reply_map {
    uint32_t bits, columns, nnz;
    const uint32_t *col_ptr; /* columns + 1 entries, into rows */
    const uint32_t *rows;    /* reply bit of each entry, each < bits */
} bl_reply_map;

static inline uint32_t bl_reply_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Parse the blob at blob[0..len): the map points into it (it must be 4-byte aligned and outlive
 * the map). 0 and *consumed = its bytes, or -1 when it is malformed (nothing is set). */
static inline int bl_reply_map_parse(const uint8_t *blob, size_t len, bl_reply_map *map, size_t *consumed) {
    if (!blob || !map || len < 12 || ((uintptr_t)blob & 3u)) return -1;
    uint32_t bits = bl_reply_u32(blob), columns = bl_reply_u32(blob + 4), nnz = bl_reply_u32(blob + 8);
    if (bits == 0 || bits > (1u << 24) || columns == 0 || columns > (1u << 28)) return -1;
    size_t need = 12 + 4 * ((size_t)columns + 1) + 4 * (size_t)nnz;
    if (len < need) return -1;
    const uint32_t *col_ptr = (const uint32_t *)(blob + 12), *rows = col_ptr + columns + 1;
    if (col_ptr[0] != 0 || col_ptr[columns] != nnz) return -1;
    for (uint32_t j = 0; j < columns; j++)
        if (col_ptr[j] > col_ptr[j + 1]) return -1;
    for (uint32_t k = 0; k < nnz; k++)
        if (rows[k] >= bits) return -1;
    map->bits = bits, map->columns = columns, map->nnz = nnz, map->col_ptr = col_ptr, map->rows = rows;
    if (consumed) *consumed = need;
    return 0;
}

/* Bytes of a reply. */
static inline uint32_t bl_reply_bytes(const bl_reply_map *map) { return (map->bits + 7u) / 8u; }

/* out ^= R[:, col] (col < columns). */
static inline void bl_reply_add_column(const bl_reply_map *map, uint32_t col, uint8_t *out) {
    for (uint32_t k = map->col_ptr[col]; k < map->col_ptr[col + 1]; k++)
        out[map->rows[k] >> 3] ^= (uint8_t)(1u << (map->rows[k] & 7u));
}

/* out = R e for an estimate given as 0/1 bytes e[0..columns). */
static inline void bl_reply_from_bytes(const bl_reply_map *map, const uint8_t *e, uint8_t *out) {
    memset(out, 0, bl_reply_bytes(map));
    for (uint32_t j = 0; j < map->columns; j++)
        if (e[j]) bl_reply_add_column(map, j, out);
}

#endif
