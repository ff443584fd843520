"""``backline fpga``: the engine model and a look at its registers.

    backline fpga model [--window PATH ...]   run the HWHS engine model until SIGTERM/SIGINT
    backline fpga status [--window PATH]      the engine's state: FSM, counters, last RTT, errors, QPs

Exit status 0; 2 for any error, reported as one line on stderr, ``backline: error: ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from backline_core.sdk import Parser, run_command

from . import model
from .native import hwhs
from .window import WindowView

STATES = ("IDLE", "WQE_POST", "RING_SQ", "WAIT_RPL", "POLL_RPL", "JOIN", "DAT_TX", "NEXT", "GAP")


def _cmd_status(args: argparse.Namespace) -> int:
    h = hwhs()
    with WindowView(args.window) as win:
        info = h.HWHS_WIN_INFO
        r = lambda off: win.u32(h.HWHS_WIN_REGS + off)  # noqa: E731
        st = r(h.HWHS_STATUS)
        bits = [name for bit, name in ((h.HWHS_STATUS_BUSY, "busy"), (h.HWHS_STATUS_DONE, "done"),
                                       (h.HWHS_STATUS_REPLY_SEEN, "reply_seen"), (h.HWHS_STATUS_TIMEOUT, "timeout"),
                                       (h.HWHS_STATUS_AXI_ERR, "axi_err")) if st & bit]
        state = st & h.HWHS_STATUS_STATE_MASK
        error = win.text(info + h.HWHS_INFO_ERROR, 256)
        rtt = r(h.HWHS_RTT_LO) | r(h.HWHS_RTT_HI) << 32
        print(f"engine model pid {win.u32(info + h.HWHS_INFO_PID)}, device {win.device() or '(none)'}, "
              f"heartbeat {win.u32(info + h.HWHS_INFO_ALIVE)}")
        print(f"STATUS {st:#06x}: {STATES[state] if state < len(STATES) else state} {' '.join(bits)}".rstrip())
        print(f"ROUND_CNT {r(h.HWHS_ROUND_CNT)}  RING_IDX {r(h.HWHS_RING_IDX)}  RTT {rtt} cycles "
              f"({rtt * 1e6 / h.HWHS_CLOCK_HZ:.3f} us)")
        print(f"TRACE_CNT {r(h.HWHS_TRACE_CNT)}  TRACE_STS {r(h.HWHS_TRACE_STS):#x}  DEMO_STS {r(h.HWHS_DEMO_STS):#x}  "
              f"DEMO_ERR {r(h.HWHS_DEMO_ERR)}")
        print(f"ERR_CODE {r(h.HWHS_ERR_CODE)}" + (f": {error}" if error else ""))
        names = ("reset", "connecting", "ready", "error")
        for q in range(h.HWHS_QP_CONTEXTS):
            base = h.HWHS_WIN_ERNIC + h.ERNIC_QP_BLOCK + q * h.ERNIC_QP_STRIDE
            conf, qstate = win.u32(base + h.ERNIC_QP_CONF), win.u32(base + h.ERNIC_QP_STATE)
            if conf or qstate:
                print(f"ERNIC QP {q + 1}: QP_CONF {conf:#x} state {names[qstate] if qstate < 4 else qstate} "
                      f"verbs QPN {win.u32(base + h.ERNIC_QP_QPN)} SQ_PROD_IDX {win.u32(base + h.ERNIC_SQ_PROD_IDX)} "
                      f"CQ_HEAD_PTR {win.u32(base + h.ERNIC_CQ_HEAD_PTR)} received "
                      f"{win.u32(base + h.ERNIC_QP_RECV_CNT)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="backline fpga", description="The FPGA controller's engine model and registers.")
    sub = parser.add_subparsers(dest="cmd", required=True, parser_class=Parser)
    m = model.add_arguments(sub.add_parser("model", help="run the HWHS engine model until SIGTERM/SIGINT"))
    m.set_defaults(func=model.run)
    s = sub.add_parser("status", help="the engine's registers, decoded")
    s.add_argument("--window", default=model.DEFAULT_WINDOW, help=f"the window (default {model.DEFAULT_WINDOW})")
    s.set_defaults(func=_cmd_status)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``backline fpga ARGV`` and return its exit status."""
    return run_command(build_parser(), sys.argv[1:] if argv is None else argv)
