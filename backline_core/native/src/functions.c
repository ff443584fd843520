/* Built-in coprocessor functions. Both follow the one encoding of the project:
 * bit-packed little-endian in, bit-packed little-endian out. */
#include "backline/backline.h"
#include "backline/steane.h"

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

/* The syndrome of a flip of qubit q (column q of steane.h's H, bit r = check r), and the
 * minimum-weight correction of syndrome s: the one qubit whose column is s (H's columns are
 * distinct and nonzero), none for s = 0. Computed by the compiler from the header's rows. */
#define STEANE_COLUMN(q) ((((BL_STEANE_CHECK0 >> (q)) & 1u) << 0) | (((BL_STEANE_CHECK1 >> (q)) & 1u) << 1) | \
                          (((BL_STEANE_CHECK2 >> (q)) & 1u) << 2))
#define STEANE_FLIP(s, q) ((STEANE_COLUMN(q) == (s)) ? 1u << (q) : 0u)
#define STEANE_FIX(s) ((uint8_t)(STEANE_FLIP(s, 0) | STEANE_FLIP(s, 1) | STEANE_FLIP(s, 2) | STEANE_FLIP(s, 3) | \
                                 STEANE_FLIP(s, 4) | STEANE_FLIP(s, 5) | STEANE_FLIP(s, 6)))
_Static_assert(BL_STEANE_QUBITS == 7 && BL_STEANE_CHECKS == 3, "STEANE_FIX spells out 7 qubits and 3 checks");
static const uint8_t steane_fix[8] = {STEANE_FIX(0), STEANE_FIX(1), STEANE_FIX(2), STEANE_FIX(3),
                                      STEANE_FIX(4), STEANE_FIX(5), STEANE_FIX(6), STEANE_FIX(7)};

BL_API int32_t bl_fn_steane(void *ctx, uint32_t decoder_id, const uint8_t *in, uint32_t in_len,
                            uint8_t *out, uint32_t out_cap, uint32_t *out_len) {
    (void)ctx;
    (void)decoder_id;
    if (in_len != 1) return 2;   /* 3 syndrome bits pack into exactly one byte */
    if (in[0] & ~7u) return 3;   /* bits beyond the 3 checks must be zero */
    if (out_cap < 1) return 4;
    out[0] = steane_fix[in[0]];
    *out_len = 1;
    return 0;
}
