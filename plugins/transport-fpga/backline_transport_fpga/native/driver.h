/*
 * driver.h -- the HWHS engine and ERNIC queue-pair driver: everything it does is a 32-bit load
 * or store in the register window (hwhs.h) or a write into the DMA memory it is given. No
 * verbs, no sockets, nothing Linux-specific but CLOCK_MONOTONIC: the same source builds for the
 * board's aarch64 cores. On a board the window pointers come from mmaps of the hwhs and ERNIC
 * devices and a u-dma-buf; here from the engine model's window file (window.c).
 *
 * Every call that waits takes an absolute deadline (hwhs_now_ns() ns) and fails with
 * BL_ETIMEOUT past it; every failure writes one line into err.
 */
#ifndef BACKLINE_FPGA_DRIVER_H
#define BACKLINE_FPGA_DRIVER_H

#include "hwhs.h"
#include "wqe.h"

#include <backline/backline.h>

#include <stddef.h>
#include <stdint.h>

/* Where the driver finds the engine. `info` is the model's information block (NULL on a
 * board: no heartbeat to watch). */
typedef struct hwhs_window {
    volatile uint8_t *regs;        /* HWHS block (4 KiB) */
    volatile uint8_t *ernic;       /* ERNIC register space: global at +0, per-QP at +ERNIC_QP_BLOCK */
    volatile uint8_t *table;       /* syndrome table (HWHS_TABLE_BYTES) */
    const volatile uint16_t *trace; /* RTT trace (HWHS_TRACE_ENTRIES) */
    const volatile uint8_t *info;  /* model information block, or NULL */
    uint8_t *mem;                  /* DMA memory as this process sees it */
    uint64_t mem_bus;              /* its bus address */
    uint64_t mem_bytes;
} hwhs_window;

typedef struct hwhs_drv {
    hwhs_window w;
    uint64_t mem_used;    /* DMA memory handed out by hwhs_alloc (bump allocator) */
    uint32_t qpn;         /* ERNIC QP number in use (1..HWHS_QP_CONTEXTS) */
    uint32_t last_alive;  /* the model's heartbeat when last seen moving */
    uint64_t alive_seen_ns;
} hwhs_drv;

/* A region of DMA memory: its bus address and this process's pointer to it. */
typedef struct hwhs_buf {
    uint64_t bus;
    uint8_t *ptr;
    uint64_t bytes;
} hwhs_buf;

/* A registered memory region (ERNIC MR_*). */
typedef struct hwhs_mr {
    uint32_t lkey, rkey;
    uint64_t remote_base; /* what a peer writes at for the region's first byte */
} hwhs_mr;

/* The connection of one ERNIC queue pair (its per-QP registers). */
typedef struct hwhs_qp_config {
    uint32_t qpn;          /* ERNIC QP number, 1..8 */
    uint64_t sq_bus;       /* SQ ring: sq_depth entries of ERNIC_WQE_BYTES */
    uint32_t sq_depth;
    uint64_t cq_bus;       /* CQE ring (one u32 per SQ entry); 0: no CQEs */
    uint32_t rq_depth;     /* receive entries for incoming WRITE_WITH_IMM */
    uint32_t sq_psn, rq_psn;
    uint32_t dest_qpn;
    uint8_t dest_gid[16];
    uint32_t path_mtu;     /* enum ibv_mtu, 1 = 256 .. 5 = 4096 */
} hwhs_qp_config;

/* What the ERNIC says of itself and of an enabled QP (for the handshake's peer record). */
typedef struct hwhs_qp_local {
    uint32_t verbs_qpn;
    uint8_t gid[16];
    uint32_t active_mtu;
} hwhs_qp_local;

/* The staged WQE fields (HWHS WQE_* registers) and the ring it walks. */
typedef struct hwhs_wqe_config {
    uint32_t index;        /* WQE store slot, < HWHS_WQE_STORE */
    uint32_t qp_ref;       /* QP context, < HWHS_QP_CONTEXTS */
    uint32_t opcode;       /* HWHS WQE_OPCODE value (0 write, 1 read, 2 send, 3 write with immediate) */
    uint32_t xfer_len;
    uint32_t rkey;
    uint64_t remote_addr;
    uint64_t local_bus;
    uint16_t wrid;
} hwhs_wqe_config;

/* One round's geometry: the request ring (send buffer) and the reply ring. */
typedef struct hwhs_ring_config {
    uint64_t request_bus;  /* DBUF: slot i at request_bus + (i << stride_log2) */
    uint64_t reply_bus;    /* REPLY_BUF */
    uint32_t slots;        /* a power of two, <= 65535 */
    uint32_t stride_log2;  /* slot bytes = 1 << stride_log2, local, remote and reply alike */
    uint32_t seq_off;      /* REPLY_SEQ_OFF */
    uint32_t frame_bytes;  /* PAY_LEN */
    uint64_t reply_timeout_cycles;
    uint32_t flags;        /* HWHS_FLAG_* */
} hwhs_ring_config;

/* A paced (hw-loop) run. */
typedef struct hwhs_pacer {
    uint64_t freq;         /* base interval, cycles */
    uint32_t span;         /* jitter mask */
    uint32_t seed;         /* 0 = HWHS_DEFAULT_SEED */
    uint32_t count;        /* CMD_CNT */
    uint32_t decoder_id;   /* PATTERN & 0xff */
    const uint8_t *table;  /* entries of HWHS_TABLE_ENTRY bytes (hwhs.h) */
    uint32_t table_bytes;
} hwhs_pacer;

typedef struct hwhs_run_result {
    uint64_t rounds;       /* ROUND_CNT after the run, less before */
    uint32_t demo_err;
    uint32_t trace_cnt;
    int trace_full, trace_saturated, aborted;
    uint32_t status;       /* STATUS at the end */
    uint32_t err_code;     /* ERR_CODE at the end */
} hwhs_run_result;

uint64_t hwhs_now_ns(void);
/* 32-bit register access (volatile loads and stores with the ordering the engine needs). */
uint32_t hwhs_rd(const volatile uint8_t *block, uint32_t off);
void hwhs_wr(volatile uint8_t *block, uint32_t off, uint32_t v);

/* Take the engine: check the model's magic and version (when there is an info block), soft reset. */
int32_t hwhs_open(hwhs_drv *d, const hwhs_window *w, char *err, size_t n);
/* DMA memory for a ring or buffer, aligned to `align` (a power of two). */
int32_t hwhs_alloc(hwhs_drv *d, uint64_t bytes, uint64_t align, hwhs_buf *out, char *err, size_t n);
/* Whether the engine is still there: the model's heartbeat moved within the last second (always
 * 1 on a board). 0 writes why into err. */
int hwhs_alive(hwhs_drv *d, char *err, size_t n);

/* ERNIC: register [bus, bus + bytes) for local and remote write. */
int32_t hwhs_mr_register(hwhs_drv *d, uint64_t bus, uint64_t bytes, hwhs_mr *out, uint64_t deadline, char *err,
                         size_t n);
/* ERNIC: program QP c->qpn's queues and connection, enable it, wait until it is ready, then put it
 * into hardware-handshake mode in the reference driver's order (docs/transport-fpga.md). */
int32_t hwhs_qp_setup(hwhs_drv *d, const hwhs_qp_config *c, hwhs_qp_local *local, uint64_t deadline, char *err,
                      size_t n);
/* ERNIC: disable QP qpn (the model destroys its verbs queue pair). */
void hwhs_qp_disable(hwhs_drv *d, uint32_t qpn);
/* ERNIC, software posting (HW_HSK_DIS set: the PS owns the send queue): encode `w` into the next
 * SQ entry of the QP and ring SQ_PROD_IDX. */
int32_t hwhs_sw_post(hwhs_drv *d, uint32_t qpn, const hwhs_qp_config *c, const ernic_wqe *w, char *err, size_t n);

/* HWHS: commit QP context `ctx` (QP_NUM, SQBASE, SQ_DEPTH, then QPCTX_COMMIT). */
int32_t hwhs_qpctx_commit(hwhs_drv *d, uint32_t ctx, uint32_t qpn, uint64_t sq_bus, uint32_t sq_depth, char *err,
                          size_t n);
/* HWHS: stage the WQE fields and WQE_COMMIT them into the store. */
int32_t hwhs_wqe_commit(hwhs_drv *d, const hwhs_wqe_config *w, char *err, size_t n);
/* HWHS: the ring of WQE `index` (WQE_RING_CFG, WQE_RING_LEN, RING_RESET), the reply ring
 * (REPLY_BUF, REPLY_RING, REPLY_SEQ_OFF), DBUF, PAY_LEN, FLAGS, REPLY_TO, RUN_WQE_IDX,
 * TIMER_QP_SEL; then ROUND_CNT = rounds_before and RING_IDX = rounds_before mod slots. */
int32_t hwhs_ring_setup(hwhs_drv *d, uint32_t index, const hwhs_ring_config *r, uint64_t rounds_before, char *err,
                        size_t n);

/* sw-loop: one round. The caller has written the request slot (sequence number last, with
 * release order). kick: wait until the engine is not busy (deadline), then CTRL start. */
int32_t hwhs_kick(hwhs_drv *d, uint64_t deadline, char *err, size_t n);
/* Collect by polling the reply slot's sequence number (`seq_word`) until it is `seq`: BL_ETIMEOUT
 * "stuck" past the deadline, earlier errors the engine reports through STATUS. */
int32_t hwhs_wait_reply(hwhs_drv *d, const volatile uint64_t *seq_word, uint64_t seq, uint64_t deadline, char *err,
                        size_t n);
/* Collect by STATUS: done (BL_OK), timeout (BL_ETIMEOUT, the engine's ERR_CODE and text),
 * axi_err (BL_EBACKEND), or the deadline. */
int32_t hwhs_wait_status(hwhs_drv *d, uint64_t deadline, char *err, size_t n);
/* RTT_HI:RTT_LO of the last round, in cycles. */
uint64_t hwhs_rtt_cycles(hwhs_drv *d);
uint64_t hwhs_round_count(hwhs_drv *d);

/* hw-loop: program the pacer (FREQ, FREQ_SPAN, LFSR_SEED, CMD_CNT, PATTERN, the syndrome table,
 * DEMO_DEPTH), arm the trace (TRACE_CTRL clear then record), DEMO_CTRL start. */
int32_t hwhs_paced_start(hwhs_drv *d, const hwhs_pacer *p, char *err, size_t n);
/* Wait for DEMO_STS done (or the deadline, or a dead engine), then read ROUND_CNT, DEMO_ERR,
 * TRACE_CNT and TRACE_STS into r. BL_OK when the run finished; a timeout or axi_err of the
 * engine is returned as for hwhs_wait_status (r is filled either way). */
int32_t hwhs_paced_wait(hwhs_drv *d, uint64_t rounds_before, uint64_t deadline, hwhs_run_result *r, char *err,
                        size_t n);
/* Copy min(cap, TRACE_CNT) trace entries. */
uint64_t hwhs_trace_read(hwhs_drv *d, uint16_t *out, uint64_t cap);

/* CTRL abort / soft reset, then wait (deadline) for IDLE. */
int32_t hwhs_abort(hwhs_drv *d, uint64_t deadline, char *err, size_t n);
int32_t hwhs_soft_reset(hwhs_drv *d, uint64_t deadline, char *err, size_t n);

/* The engine's ERR_CODE as words ("start with no WQE committed"), and the model's text if any. */
void hwhs_engine_error(hwhs_drv *d, char *out, size_t n);

#endif
