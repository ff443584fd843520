/*
 * hwhs.h -- the register window of the FPGA controller: the hardware-handshake (HWHS) engine's
 * 4 KiB AXI4-Lite block, the ERNIC (AMD PG332) register space it sits next to, and the 64-byte
 * ERNIC work-queue entry. The one source of these numbers for the driver (driver.c), the engine
 * model (model.c) and Python (through cffi: plain `#define NAME number` lines only).
 *
 * Offsets are bytes from the start of each block; every register is 32 bits, little-endian.
 * Names and offsets follow the reference board (backline-vpk120's hw_hs.h / rnic.h, as
 * recorded in docs/transport-fpga.md). Registers marked MODEL are this project's: the engine
 * model needs them where the board has fixed hardware (an rxe queue pair number, a GID, an MR
 * key the kernel chooses) or where the reference's bit-level behaviour is not public (the
 * error code behind STATUS.axi_err, the syndrome table's entry format). A driver for the board
 * does not write them; docs/transport-fpga.md lists each one.
 *
 * The window as the engine model lays it out (one shared-memory file; on a board the HWHS block,
 * the ERNIC space, the trace BRAM and the DMA memory are separate mappings, and the driver takes
 * a pointer to each):
 *   0x000000  HWHS registers (4 KiB)
 *   0x001000  MODEL information block (4 KiB, read-only to the driver)
 *   0x010000  syndrome table (hw-loop pacer's BRAM, 64 KiB)
 *   0x100000  ERNIC global registers
 *   0x180000  ERNIC per-QP registers, 0x100 bytes per QP, 8 QPs
 *   0x200000  RTT trace: 1,048,576 entries of 16 bits (2 MiB)
 *   0x400000  DMA memory (the board's DDR the driver is given): bus address HWHS_MEM_BUS_BASE + offset
 */
#ifndef BACKLINE_FPGA_HWHS_H
#define BACKLINE_FPGA_HWHS_H

/* ---- the model's window layout (byte offsets in the window file) ---- */
#define HWHS_WIN_REGS 0
#define HWHS_WIN_REGS_BYTES 4096
#define HWHS_WIN_INFO 4096
#define HWHS_WIN_TABLE 65536
#define HWHS_TABLE_BYTES 65536
#define HWHS_WIN_ERNIC 1048576
#define HWHS_WIN_TRACE 2097152
#define HWHS_WIN_MEM 4194304
/* Bus address of the first byte of DMA memory (what address registers and WQEs hold). */
#define HWHS_MEM_BUS_BASE 34359738368
#define HWHS_DEFAULT_MEM_BYTES 16777216

/* ---- MODEL information block (HWHS_WIN_INFO + ...): written once by the model ---- */
#define HWHS_INFO_MAGIC 0           /* u32 HWHS_MAGIC once the model is up */
#define HWHS_INFO_VERSION 4         /* u32 HWHS_MODEL_VERSION */
#define HWHS_INFO_MEM_BYTES 8       /* u64 bytes of DMA memory */
#define HWHS_INFO_PID 16            /* u32 the model's process id */
#define HWHS_INFO_ALIVE 20          /* u32 heartbeat: the model increments it at least every millisecond */
#define HWHS_INFO_CLOCK_HZ 24       /* u32 the engine clock, 200000000 */
#define HWHS_INFO_DEVICE 32         /* char[64] the verbs device the ERNIC part uses ("" = none yet) */
#define HWHS_INFO_ERROR 128         /* char[256] the text behind the last ERR_CODE */
#define HWHS_MAGIC 1112033367       /* "WHLB" little-endian: 'B' 'L' 'H' 'W' */
#define HWHS_MODEL_VERSION 1
#define HWHS_CLOCK_HZ 200000000

/* ---- HWHS registers (HWHS_WIN_REGS + ...) ---- */
#define HWHS_CTRL 0               /* W1P: bit0 start, bit1 abort, bit2 soft reset */
#define HWHS_STATUS 4             /* [3:0] FSM state, [4] busy, [5] done, [6] reply_seen, [7] timeout, [8] axi_err */
#define HWHS_QP_NUM 8             /* ERNIC QP number (the per-QP block is QP_NUM - 1) */
#define HWHS_PAY_LEN 12           /* frame bytes (<= 4096, multiple of 64): a hw-loop request frame */
#define HWHS_PATTERN 16           /* debug pattern: a hw-loop request's decoder_id is PATTERN & 0xff */
#define HWHS_DBUF_LO 20           /* local send buffer (request ring) bus address */
#define HWHS_DBUF_HI 24
#define HWHS_SQBASE_LO 28         /* SQ ring bus address */
#define HWHS_SQBASE_HI 32
#define HWHS_SQ_DEPTH 36          /* SQ ring entries */
#define HWHS_FLAGS 40             /* [0] repost_wqe, [2] complete_on_send, [3] reply_poll */
#define HWHS_REPLY_TO 48          /* reply timeout in core cycles (0 = forever) */
#define HWHS_ROUND_CNT 52         /* completed rounds (MODEL: writable while idle, to continue a sequence) */
#define HWHS_RTT_LO 56            /* cycles from the doorbell to the reply, last round */
#define HWHS_RTT_HI 60
#define HWHS_WQE_OPCODE 64        /* 0 write, 1 read, 2 send, 3 write with immediate (MODEL: imm = the round's seq) */
#define HWHS_WQE_XFER_LEN 68      /* bytes */
#define HWHS_WQE_RKEY 72
#define HWHS_WQE_VA_LO 76         /* remote address */
#define HWHS_WQE_VA_HI 80
#define HWHS_WQE_OFFS_LO 84       /* local address (bus) */
#define HWHS_WQE_OFFS_HI 88
#define HWHS_WQE_WRID 92          /* [15:0] */
#define HWHS_WQE_COMMIT 96        /* index | HWHS_REQ_COMMIT: store the staged WQE fields at WQE store[index] */
#define HWHS_RUN_WQE_IDX 100      /* which stored WQE a round sends */
#define HWHS_TIMER_QP_SEL 104     /* which QP's reply latches the RTT (must be the context's QP_NUM) */
#define HWHS_REPLY_BUF_LO 108     /* reply ring bus address */
#define HWHS_REPLY_BUF_HI 112
#define HWHS_REPLY_SEQ_OFF 116    /* byte offset of the u64 sequence number in a slot (request and reply) */
#define HWHS_QPCTX_COMMIT 124     /* [2:0] | HWHS_REQ_QPCTX: commit QP_NUM, SQBASE, SQ_DEPTH into context [2:0]; bit31 rebind */
#define HWHS_WQE_QP_REF 132       /* which QP context the staged WQE uses */
#define HWHS_WQE_RING_CFG 136     /* bit0 ring_en, [13:8] local stride log2, [21:16] remote stride log2 */
#define HWHS_WQE_RING_LEN 140     /* [15:0] buffers in the ring (a power of two) */
#define HWHS_RING_RESET 144       /* WQE index | HWHS_REQ_COMMIT: zero its ring index */
#define HWHS_REPLY_RING 148       /* [5:0] reply stride log2 (reply slot = ring index) */
#define HWHS_RING_IDX 152         /* MODEL: ring index of RUN_WQE_IDX's WQE; writable while idle */
#define HWHS_ERR_CODE 160         /* MODEL: why axi_err or timeout was set (HWHS_E_*); INFO_ERROR has the text */
#define HWHS_DEMO_CTRL 168        /* pacer: bit0 start (W1P), bit1 reset */
#define HWHS_FREQ_LO 172          /* pacer base interval in cycles */
#define HWHS_FREQ_HI 176
#define HWHS_DEMO_STS 180         /* bit0 done; MODEL: bit1 aborted */
#define HWHS_CMD_CNT 184          /* rounds one paced run sends */
#define HWHS_DEMO_ERR 188         /* reply compare errors */
#define HWHS_DEMO_DEPTH 192       /* syndrome table bytes (a multiple of HWHS_TABLE_ENTRY) */
#define HWHS_FREQ_SPAN 196        /* jitter mask (0 = fixed interval) */
#define HWHS_LFSR_SEED 200        /* jitter seed (0 = HWHS_DEFAULT_SEED) */
#define HWHS_TRACE_CTRL 204       /* bit0 clear (hold high = empty; drop to record) */
#define HWHS_TRACE_CNT 208        /* entries recorded */
#define HWHS_TRACE_STS 212        /* bit0 full, bit1 saturated (an entry clamped to 0xFFFF) */
#define HWHS_GAP_LOG 256          /* MODEL: the gap in cycles the pacer chose before round k, k < 64 (u32 each) */
#define HWHS_GAP_LOG_ENTRIES 64

#define HWHS_CTRL_START 1
#define HWHS_CTRL_ABORT 2
#define HWHS_CTRL_RESET 4
#define HWHS_STATUS_STATE_MASK 15
#define HWHS_STATUS_BUSY 16
#define HWHS_STATUS_DONE 32
#define HWHS_STATUS_REPLY_SEEN 64
#define HWHS_STATUS_TIMEOUT 128
#define HWHS_STATUS_AXI_ERR 256
#define HWHS_FLAG_REPOST_WQE 1
#define HWHS_FLAG_COMPLETE_ON_SEND 4
#define HWHS_FLAG_REPLY_POLL 8
#define HWHS_DEMO_START 1
#define HWHS_DEMO_RESET 2
#define HWHS_DEMO_DONE 1
#define HWHS_DEMO_ABORTED 2
#define HWHS_TRACE_CLEAR 1
#define HWHS_TRACE_FULL 1
#define HWHS_TRACE_SATURATED 2
#define HWHS_QPCTX_REBIND 2147483648
/* MODEL: a commit register is written with a request bit, and the model writes 0 into it once it
 * has acted (or refused: STATUS.axi_err with ERR_CODE), so the driver can wait for that: the model
 * cannot see a register written twice with the same value, as a PL register file sees its AXI
 * write strobe. WQE_COMMIT and RING_RESET: index | HWHS_REQ_COMMIT; QPCTX_COMMIT: ctx |
 * HWHS_REQ_QPCTX (| HWHS_QPCTX_REBIND). W1P registers (CTRL, DEMO_CTRL, MR_COMMIT) read 0 once the
 * model has taken them, with their effect (STATUS, DEMO_STS, MR_STATUS) already published. */
#define HWHS_REQ_COMMIT 2147483648
#define HWHS_REQ_QPCTX 1073741824
#define HWHS_WQE_STORE 16         /* stored WQEs */
#define HWHS_QP_CONTEXTS 8
#define HWHS_MAX_PAY_LEN 4096
#define HWHS_TRACE_ENTRIES 1048576
#define HWHS_TRACE_MAX 65535
#define HWHS_DEFAULT_SEED 1

/* FSM states (STATUS[3:0]; the paper's Fig. 8) */
#define HWHS_S_IDLE 0
#define HWHS_S_WQE_POST 1
#define HWHS_S_RING_SQ 2
#define HWHS_S_WAIT_RPL 3
#define HWHS_S_POLL_RPL 4
#define HWHS_S_JOIN 5
#define HWHS_S_DAT_TX 6
#define HWHS_S_NEXT 7
#define HWHS_S_GAP 8              /* hw-loop: the pacer's interval before the next round */

/* MODEL: ERR_CODE values */
#define HWHS_E_NONE 0
#define HWHS_E_NO_WQE 1           /* start with no WQE committed at RUN_WQE_IDX */
#define HWHS_E_NO_QPCTX 2         /* the WQE's QP context was never committed */
#define HWHS_E_QP_NOT_HWHS 3      /* the ERNIC QP is not enabled in hardware-handshake mode */
#define HWHS_E_BUSY 4             /* start (or a configuration write) while a round or paced run is in flight */
#define HWHS_E_ADDRESS 5          /* an address or length outside DMA memory, or a bad ring/stride setting */
#define HWHS_E_SEQ 6              /* the request slot's sequence number is not ROUND_CNT + 1 */
#define HWHS_E_REPLY_TIMEOUT 7    /* REPLY_TO passed before the reply (STATUS.timeout) */
#define HWHS_E_WQE_FAILED 8       /* the ERNIC completed the WQE with an error (STATUS.timeout: no reply will come) */
#define HWHS_E_CONFIG 9           /* a register value out of range (PAY_LEN, SQ_DEPTH, DEMO_DEPTH, ...) */
#define HWHS_E_TRACE_ARMED 10     /* MODEL: a paced run started while the trace was held clear */

/* MODEL: hw-loop syndrome table entry (HWHS_WIN_TABLE + k * HWHS_TABLE_ENTRY), little-endian:
 *   +0 u32 request payload bytes (<= 8)   +4 u32 expected reply payload bytes (<= 8)
 *   +8 u8[8] request payload              +16 u8[8] expected reply payload
 * Round k of a paced run sends entry k mod (DEMO_DEPTH / HWHS_TABLE_ENTRY). */
#define HWHS_TABLE_ENTRY 24
#define HWHS_TABLE_PAYLOAD_MAX 8

/* ---- ERNIC global registers (HWHS_WIN_ERNIC + ...) ---- */
#define ERNIC_GLOBAL_CONF 0           /* bit0 enable */
#define ERNIC_MR_ADDR_LO 2048         /* MODEL: memory registration (the PS's ibv_reg_mr, here by register) */
#define ERNIC_MR_ADDR_HI 2052         /*   bus address of the region */
#define ERNIC_MR_LEN_LO 2056
#define ERNIC_MR_LEN_HI 2060
#define ERNIC_MR_COMMIT 2064          /* W1P: register [ADDR, ADDR + LEN) for local and remote write */
#define ERNIC_MR_STATUS 2068          /* 0 idle, 1 busy, 2 done, 3 failed (INFO_ERROR) */
#define ERNIC_MR_LKEY 2072
#define ERNIC_MR_RKEY 2076
#define ERNIC_MR_REMOTE_LO 2080       /* the address a peer writes at for ADDR (the iova, or the model's VA) */
#define ERNIC_MR_REMOTE_HI 2084
#define ERNIC_LOCAL_GID 2112          /* MODEL: u8[16] the GID this ERNIC sends from (read-only) */
#define ERNIC_ACTIVE_MTU 2128         /* MODEL: enum ibv_mtu of its port (1 = 256 ... 5 = 4096) */
#define ERNIC_GID_INDEX 2132          /* MODEL: the GID index in use */

#define ERNIC_MR_IDLE 0
#define ERNIC_MR_BUSY 1
#define ERNIC_MR_DONE 2
#define ERNIC_MR_FAILED 3

/* ---- ERNIC per-QP registers (HWHS_WIN_ERNIC + 0x80000 + (qpn - 1) * 0x100 + ...) ---- */
#define ERNIC_QP_BLOCK 524288
#define ERNIC_QP_STRIDE 256
#define ERNIC_QP_CONF 0               /* bit0 QP enable, bit4 HW_HSK_DIS, bit5 CQE_EN, [10:8] path MTU (enum ibv_mtu - 1) */
#define ERNIC_QP_ADV_CONF 4           /* bit0 software override */
#define ERNIC_SNDQ_BUF_BASE_LO 16
#define ERNIC_SNDQ_BUF_BASE_HI 20
#define ERNIC_CQ_BUF_BASE_LO 24       /* CQE ring (CQE_EN), one u32 per SQ entry */
#define ERNIC_CQ_BUF_BASE_HI 28
#define ERNIC_CQ_DB_ADDR 40
#define ERNIC_CQ_HEAD_PTR 48          /* completions so far (mod 2^32) */
#define ERNIC_SQ_PROD_IDX 56          /* the SQ doorbell: WQEs posted (mod 2^32) */
#define ERNIC_QUEUE_DEPTH 60          /* [15:0] SQ depth, [31:16] RQ depth */
#define ERNIC_SQ_PSN 64               /* first PSN this QP sends */
#define ERNIC_RQ_PSN 68               /* first PSN it expects (the peer's SQ PSN) */
#define ERNIC_DEST_QP_CONF 72         /* [23:0] destination QP number */
#define ERNIC_DEST_GID 96             /* u8[16] destination GID (RoCE v2: the IPv6 or IPv4-mapped address) */
#define ERNIC_STAT_CUR_SQ_PTR 140     /* WQEs the ERNIC has taken from the SQ */
#define ERNIC_QP_STATE 224            /* MODEL: 0 reset, 1 connecting, 2 ready (RTS), 3 error (INFO_ERROR) */
#define ERNIC_QP_QPN 228              /* MODEL: the verbs QP number the peer addresses (the board's is qpn) */
#define ERNIC_QP_RECV_CNT 232         /* MODEL: incoming WRITE_IMMs taken */

#define ERNIC_QP_ENABLE 1
#define ERNIC_QP_HW_HSK_DIS 16
#define ERNIC_QP_CQE_EN 32
#define ERNIC_QP_PMTU_SHIFT 8
#define ERNIC_ADV_SW_OVERRIDE 1
#define ERNIC_QPS_RESET 0
#define ERNIC_QPS_CONNECTING 1
#define ERNIC_QPS_READY 2
#define ERNIC_QPS_ERROR 3

/* ---- the ERNIC work-queue entry (PG332): 64 bytes, bit i is bit (i % 8) of byte i / 8 ----
 *   [15:0] WRID   [95:32] local address   [127:96] length   [135:128] opcode
 *   [223:160] remote address   [255:224] remote key   [383:256] send data / immediate */
#define ERNIC_WQE_BYTES 64
#define ERNIC_WQE_WRID 0              /* byte offsets of the fields above */
#define ERNIC_WQE_LADDR 4
#define ERNIC_WQE_LENGTH 12
#define ERNIC_WQE_OPCODE 16
#define ERNIC_WQE_RADDR 20
#define ERNIC_WQE_RKEY 28
#define ERNIC_WQE_IMM 32
#define ERNIC_OP_WRITE 0
#define ERNIC_OP_WRITE_IMM 1
#define ERNIC_OP_SEND 2
#define ERNIC_OP_SEND_IMM 3
#define ERNIC_OP_READ 4
#define ERNIC_OP_SEND_INV 12
/* CQE: one u32, wrid[7:0] | opcode[23:16] | error[31:24] */
#define ERNIC_CQE_ERR_SHIFT 24

#endif
