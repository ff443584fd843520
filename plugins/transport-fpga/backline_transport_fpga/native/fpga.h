/*
 * fpga.h -- what libbackline_transport_fpga exports besides the backend entry: the engine's own
 * measurements and the hw-loop, for a controller session opened by the backend (looked up by
 * its session key), and the WQE encoder, for tests. Plain declarations: cffi reads this file.
 */
#ifndef BACKLINE_FPGA_H
#define BACKLINE_FPGA_H

#include <stdint.h>

/* A paced run (hw-loop) on the engine of controller session `key`. */
typedef struct bl_fpga_paced {
    uint64_t freq;          /* FREQ: base interval in cycles */
    uint32_t span;          /* FREQ_SPAN: jitter mask */
    uint32_t seed;          /* LFSR_SEED: 0 = 1 */
    uint32_t count;         /* CMD_CNT: rounds */
    uint32_t decoder_id;
    const uint8_t *table;   /* syndrome table entries (hwhs.h, HWHS_TABLE_ENTRY bytes each) */
    uint32_t table_bytes;
    uint64_t timeout_ms;    /* the whole run's deadline */
} bl_fpga_paced;

typedef struct bl_fpga_paced_result {
    uint64_t rounds;        /* rounds completed in this run */
    uint32_t demo_err;      /* DEMO_ERR: replies that differed from the table */
    uint32_t trace_cnt;     /* TRACE_CNT */
    int32_t trace_full;
    int32_t trace_saturated;
    int32_t aborted;
    uint32_t status;        /* STATUS at the end */
    uint32_t err_code;      /* ERR_CODE at the end */
} bl_fpga_paced_result;

/* The engine's WQE fields as the driver encodes them (ERNIC PG332 layout, wqe.h). */
typedef struct bl_fpga_wqe {
    uint16_t wrid;
    uint64_t local_addr;
    uint32_t length;
    uint8_t opcode;
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t imm;           /* host order; encoded big-endian */
} bl_fpga_wqe;

/* The reference driver's sw-loop, beside the core's round path: for each round, write the
 * request slot (header, payload k of the table, the sequence number last with release order),
 * kick (CTRL start), collect by polling the reply slot's sequence number (collect
 * BL_FPGA_COLLECT_SLOT: "stuck" past the deadline) or by STATUS (BL_FPGA_COLLECT_STATUS: done,
 * or timeout / axi_err as distinct errors), read RTT_HI:RTT_LO, compare the reply. */
#define BL_FPGA_COLLECT_SLOT 0
#define BL_FPGA_COLLECT_STATUS 1

typedef struct bl_fpga_sw {
    uint64_t rounds;
    int32_t collect;           /* BL_FPGA_COLLECT_* */
    uint32_t decoder_id;
    const uint8_t *payloads;   /* n_payloads requests of payload_bytes, cycled */
    uint32_t payload_bytes;
    uint32_t n_payloads;
    const uint8_t *expected;   /* the reply each request must get, expected_bytes each */
    uint32_t expected_bytes;
    uint64_t timeout_ms;       /* per round; 0: the session's timeout_ms */
} bl_fpga_sw;

typedef struct bl_fpga_sw_result {
    uint64_t done;             /* rounds answered */
    uint64_t mismatched;       /* replies that were not the expected one (or carried an error status) */
} bl_fpga_sw_result;

/* Run c->rounds such rounds on session `key`; cycles[k] and host_ns[k] (either may be NULL) get
 * round k's engine RTT and its time on this thread from the slot write to the collect. The first
 * failure ends the run with its status (r->done says how far it got). After it the session's
 * core rounds are over (the driver numbered its own): open a new session for more. */
int32_t bl_fpga_sw_rounds(const char *key, const bl_fpga_sw *c, uint64_t *cycles, uint64_t *host_ns,
                          bl_fpga_sw_result *r);

/* From now on, every round of session `key` stores the engine's RTT (RTT_HI:RTT_LO, cycles)
 * into buf[count] while count < cap (buf NULL: stop). The caller owns buf. */
int32_t bl_fpga_record_cycles(const char *key, uint64_t *buf, uint64_t cap);
/* Rounds recorded since arming (waits, at most timeout_ms, for the last round's RTT). */
uint64_t bl_fpga_recorded_cycles(const char *key);
/* Run a paced run to its end and copy up to trace_cap trace entries into trace. After it the
 * session's core rounds are over (the engine numbered its own): open a new session for more. */
int32_t bl_fpga_paced_run(const char *key, const bl_fpga_paced *p, bl_fpga_paced_result *r, uint16_t *trace,
                          uint64_t trace_cap);
/* Start a paced run and return at once (bl_fpga_paced_finish waits for it): for abort tests. */
int32_t bl_fpga_paced_start(const char *key, const bl_fpga_paced *p);
int32_t bl_fpga_paced_finish(const char *key, uint64_t timeout_ms, bl_fpga_paced_result *r, uint16_t *trace,
                             uint64_t trace_cap);
/* CTRL abort and CTRL soft reset of the session's engine (each waits for IDLE). */
int32_t bl_fpga_abort(const char *key);
int32_t bl_fpga_soft_reset(const char *key);
/* The calling thread's last bl_fpga_* error text. */
const char *bl_fpga_error(void);
/* The driver's WQE encoder (wqe.h), for a test that checks the bits independently. */
void bl_fpga_wqe_encode(const bl_fpga_wqe *w, uint8_t *out64);

#endif
