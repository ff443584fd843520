/*
 * steane.h -- the Steane [[7,1,3]] code: the one source of its check matrix.
 *
 * bl_fn_steane's lookup table is derived from these rows when libbackline is compiled;
 * Python reads them through the cffi binding (backline_core.sdk's STEANE_H, STEANE_LOGICAL),
 * for the compiler's encode-steane pass, the bench's expected replies and the BP+OSD
 * plugin's named code "steane". Hx = Hz = H.
 *
 * Conventions: row r of H is a 7-bit mask, bit q set when qubit q is in check r; a syndrome
 * byte has bit r = check r; a correction byte has bit q = qubit q.
 * (Integer #defines only: the binding's cdef reads nothing else.)
 */
#ifndef BACKLINE_STEANE_H
#define BACKLINE_STEANE_H

#define BL_STEANE_QUBITS 7
#define BL_STEANE_CHECKS 3
#define BL_STEANE_CHECK0 15  /* 0b0001111: qubits 0 1 2 3 */
#define BL_STEANE_CHECK1 54  /* 0b0110110: qubits 1 2 4 5 */
#define BL_STEANE_CHECK2 108 /* 0b1101100: qubits 2 3 5 6 */
/* The support of the logical X and Z operators (Lx = Lz). */
#define BL_STEANE_LOGICAL 19 /* 0b0010011: qubits 0 1 4 */

#endif
