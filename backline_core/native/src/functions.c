/* Built-in coprocessor functions. Both follow the one encoding of the project:
 * bit-packed little-endian in, bit-packed little-endian out. */
#include "backline/backline.h"

#include <string.h>

BL_API int32_t bl_fn_echo(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len,
                          uint8_t *out, uint32_t out_cap, uint32_t *out_len) {
    (void)ctx;
    (void)decoder_id;
    if (in_len > out_cap) return 1;
    memcpy(out, in, in_len);
    *out_len = in_len;
    return 0;
}

/* Minimum-weight Steane table: index = s0<<2 | s1<<1 | s2 (check 0 most significant),
 * value = the qubit to flip, -1 for none. Hx = Hz, so one table serves X and Z. */
static const int8_t steane_table[8] = {-1, 6, 4, 5, 0, 3, 1, 2};

BL_API int32_t bl_fn_steane(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len,
                            uint8_t *out, uint32_t out_cap, uint32_t *out_len) {
    (void)ctx;
    (void)decoder_id;
    if (in_len != 1) return 2;   /* 3 syndrome bits pack into exactly one byte */
    if (in[0] & ~7u) return 3;   /* bits beyond the 3 checks must be zero */
    if (out_cap < 1) return 4;
    unsigned s = in[0];
    unsigned index = ((s & 1u) << 2) | (s & 2u) | ((s >> 2) & 1u);
    int q = steane_table[index];
    out[0] = q < 0 ? 0 : (uint8_t)(1u << q);
    *out_len = 1;
    return 0;
}
