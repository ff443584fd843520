"""Demos 2 and 2a of the paper: one explicitly written error-correction round of the
[[13, 1, 3]] hypergraph-product code ``hgp13``, decoded by BP+OSD on a coprocessor.

The user writes the physical circuit; Backline compiles it and sends the syndromes to a
coprocessor (``memcpy`` transport, a thread of this process) running BP+OSD generated from
the code's parity-check matrices (:func:`backline_decoder_bpod.css_bp_decoder`, min-sum,
10 iterations, OSD-0). Run it with ``python examples/explicit_decode_hgp13.py [--shots N]``.

The circuit (25 wires of ``default.clifford``, i.e. the stim simulator)
------------------------------------------------------------------------

Wires 0-12 are the 13 data qubits, 13-18 one ancilla per Z check (row of ``Hz``), 19-24 one
ancilla per X check (row of ``Hx``). Every ancilla is used once per shot, so none needs a
mid-circuit reset (each shot starts from ``|0...0>``).

1. **Encoding** (deterministic, no post-selection or Pauli frame). ``Hx`` is brought to
   reduced row echelon form over GF(2) (rank 6, pivot columns ``p_i``). Starting from
   ``|0>^13``, a Hadamard on each pivot ``p_i`` and a CNOT from ``p_i`` to every other qubit of
   row ``i`` prepares ``sum_{x in rowspace(Hx)} |x>``: every X check is +1 (the state is a
   uniform superposition over their span), every Z check is +1 (``Hz Hx^T = 0``) and so is
   the logical ``Z^lz`` (``lz`` is in ker(Hx)): the logical ``|0_L>``. A pivot column has a
   single 1 in the RREF, so no CNOT targets a pivot and the CNOTs commute. For ``|+_L>``
   (``basis="X"``) the same construction on ``Hz`` prepares the dual code's ``|0_L>``, and
   Hadamards on all 13 qubits map it to ``|+_L>`` of ``hgp13`` (X checks, Z checks and
   ``X^lx`` all +1). The alternative -- start in ``|0...0>`` and measure the X checks once --
   projects onto a code state only up to a random Z-type frame that the next round's
   syndrome would have to be compared against; the encoder avoids that.
2. **Errors.** Optional explicit single-qubit errors chosen by the QNode arguments
   (``x_err``/``z_err`` = data qubit to flip, -1 for none, applied with ``qml.cond`` on the
   argument) and/or circuit-level depolarizing noise ``p`` from ``Backline(noise=p)`` (the
   ``inject-noise`` pass: a depolarizing channel after every gate -- the encoder, the
   syndrome extraction, the corrections and the readout Hadamards included -- and a bit
   flip before every measurement). With noise, the logical qubit is then stored for
   ``idle`` time steps (a layer of identity gates on the data, each followed by the
   depolarizing channel; a ``qml.for_loop``, which stays a loop in the compiled program),
   the errors a memory round exists to remove.
3. **Syndrome extraction**, one round. Z checks: ``CNOT(data -> ancilla)`` for each qubit of
   the row, then measure the ancilla (detects X errors). X checks: ``H(ancilla)``,
   ``CNOT(ancilla -> data)``, ``H(ancilla)``, measure (detects Z errors). The check type
   that protects the prepared state goes last (Z checks for ``|0_L>``, X checks for
   ``|+_L>``), so it also catches the errors the other type's ancillas spread onto the data.
4. **Decoding** on the coprocessor. ``css_bp_decoder(hx, hz)`` serves ``decoder_id`` 0 with
   the ``Hx`` decoder and ``decoder_id`` 1 with the ``Hz`` decoder, each replying with the
   13-bit correction. So, as in the paper's listing, the X-check syndrome (``x_syn``, which
   flags Z errors) goes to decoder 0 and gives the **Z** correction, and the Z-check syndrome
   (``z_syn``, which flags X errors) goes to decoder 1 and gives the **X** correction.

   - demo 2: ``corr_z = decode(x_syn, decoder_id=0)``, ``corr_x = decode(z_syn, decoder_id=1)``;
   - demo 2a: what ``decode`` expands to, written as runtime calls into ``libbackline``:
     ``bl_session_get(0 /* controller */, "<coprocessor name>")``, then per syndrome
     ``bl_stage_payload(s, packed, 1, decoder_id)``, ``bl_post(s)`` and
     ``bl_collect(s, out, 2, NULL)``; the syndrome is bit-packed (bit ``i`` in byte ``i // 8``
     at bit ``i % 8``) with jax shifts and ors, and the reply unpacked the same way. The
     status of every call is returned with the samples and checked.
5. **Correction**: ``qml.cond(corr_x[q] & correct, qml.PauliX)`` and likewise ``PauliZ`` on
   each data qubit. ``correct`` is a QNode argument, so the uncorrected baseline runs the
   same compiled program (decodes included) without applying the corrections.
6. **Readout**: the data qubits are measured in the Z basis (``basis="Z"``) or, after a
   Hadamard on each, in the X basis (``basis="X"``). The logical outcome is computed in
   Python: ``lz . bits mod 2`` (resp. ``lx . bits``), with ``lx``, ``lz`` the code's logical
   operators; the prepared state has outcome 0, so any 1 is a logical error.

The script prints, per demo and basis, the logical error rate with and without the
correction, checks that every single-qubit X error (in the Z basis) and every single-qubit
Z error (in the X basis) is corrected, shows that demo 2 and demo 2a give identical
per-shot records on devices with the same seed, and reports the decode round-trip times
(``qnode.last_run.rtt_summary()``), the time per shot and the compile time.

One noisy round is not fault tolerant, so the corrected rate does not go to zero: errors
after the round (a readout flip on the support of the logical operator, noise on the
corrections), a flipped syndrome bit (one round cannot tell it from a data error: each
qubit of ``lz`` = {0, 3, 6} sits in a single Z check, so a flip of that check's bit draws a
correction on ``lz``, a logical error; likewise ``lx`` = {0, 1, 2} and the X checks) and
two-qubit errors remain. Without storage noise (``idle=0``) these
weigh as much as what the round removes; the idle steps make the comparison the memory
experiment the round is for.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import backline_compiler as bl
import jax.numpy as jnp
import numpy as np
import pennylane as qml

from backline_core import Controller, Coprocessor

#: The coprocessor's name: the placement's node and the key of its controller session.
COPROCESSOR = "bposd-hgp13"
IDLE_SPIN_US = 2000

# Demo 2a's runtime functions (backline/backline.h); role 0 is the controller.
ROLE_CONTROLLER = 0
GET_SESSION = bl.runtime_declare("bl_session_get", "(i32, str) -> ptr")
STAGE_PAYLOAD = bl.runtime_declare("bl_stage_payload", "(ptr, buf, u32, u32) -> i32")
POST = bl.runtime_declare("bl_post", "(ptr) -> i32")
COLLECT = bl.runtime_declare("bl_collect", "(ptr, out, u32, ptr) -> i32")

DEMOS = ("2", "2a")
BASES = ("Z", "X")


# ---- the code --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Code:
    """A CSS code with one logical qubit, laid out on wires: data ``0..n-1``, then one ancilla
    per Z check, then one per X check (for hgp13: 0..12, 13..18, 19..24)."""

    hx: np.ndarray
    hz: np.ndarray
    lx: np.ndarray  # logical X support (1-D)
    lz: np.ndarray  # logical Z support (1-D)

    @property
    def n(self) -> int:
        return self.hx.shape[1]

    @property
    def wires(self) -> int:
        return self.n + self.hz.shape[0] + self.hx.shape[0]

    def z_ancilla(self, r: int) -> int:
        return self.n + r

    def x_ancilla(self, r: int) -> int:
        return self.n + self.hz.shape[0] + r


def load_code(name: str = "hgp13") -> Code:
    """The named code of ``backline_decoder_bpod`` (its ``lx``/``lz``, else ``css_logicals``)."""
    from backline_decoder_bpod.codes import css_logicals, named_code

    c = named_code(name)
    lx, lz = (c.lx, c.lz) if c.lx is not None and c.lz is not None else css_logicals(c.hx, c.hz)
    if lx.shape[0] != 1:
        raise ValueError(f"{name}: this demo encodes one logical qubit, the code has k={lx.shape[0]}")
    return Code(np.asarray(c.hx, dtype=np.uint8), np.asarray(c.hz, dtype=np.uint8),
                np.asarray(lx[0], dtype=np.uint8), np.asarray(lz[0], dtype=np.uint8))


def rref_gf2(h: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Reduced row echelon form of ``h`` over GF(2): (its nonzero rows, their pivot columns)."""
    m = np.array(h, dtype=np.uint8) % 2
    pivots: list[int] = []
    r = 0
    for col in range(m.shape[1]):
        hits = np.flatnonzero(m[r:, col]) + r
        if hits.size == 0:
            continue
        m[[r, hits[0]]] = m[[hits[0], r]]
        for other in np.flatnonzero(m[:, col]):
            if other != r:
                m[other] ^= m[r]
        pivots.append(col)
        r += 1
        if r == m.shape[0]:
            break
    return m[:r], pivots


def encoder(h: np.ndarray) -> list[tuple[int, list[int]]]:
    """(pivot, CNOT targets) per row of RREF(h): prepares ``sum_{x in rowspace(h)} |x>`` from |0>."""
    rows, pivots = rref_gf2(h)
    return [(p, [int(q) for q in np.flatnonzero(row) if q != p]) for row, p in zip(rows, pivots)]


# ---- the circuit -------------------------------------------------------------------------------

def _prepare(code: Code, basis: str) -> None:
    """|0_L> (basis Z) or |+_L> (basis X); see the module docstring."""
    for pivot, targets in encoder(code.hx if basis == "Z" else code.hz):
        qml.Hadamard(pivot)
        for t in targets:
            qml.CNOT([pivot, t])
    if basis == "X":
        for q in range(code.n):
            qml.Hadamard(q)


def _measure_z_checks(code: Code) -> list[Any]:
    z_syn = []
    for r, row in enumerate(code.hz):
        a = code.z_ancilla(r)
        for q in np.flatnonzero(row):
            qml.CNOT([int(q), a])
        z_syn.append(qml.measure(a))
    return z_syn


def _measure_x_checks(code: Code) -> list[Any]:
    x_syn = []
    for r, row in enumerate(code.hx):
        a = code.x_ancilla(r)
        qml.Hadamard(a)
        for q in np.flatnonzero(row):
            qml.CNOT([a, int(q)])
        qml.Hadamard(a)
        x_syn.append(qml.measure(a))
    return x_syn


def _extract(code: Code, basis: str) -> tuple[list[Any], list[Any]]:
    """One round of stabilizer measurements: (x_syn: Hx rows, z_syn: Hz rows).

    The checks that see the errors the readout is sensitive to go last (Z checks for
    ``basis="Z"``), so that they also catch what the other type's extraction spreads onto
    the data (an X error on an X-check ancilla copies onto the data it targets)."""
    if basis == "Z":
        x_syn = _measure_x_checks(code)
        z_syn = _measure_z_checks(code)
    else:
        z_syn = _measure_z_checks(code)
        x_syn = _measure_x_checks(code)
    return x_syn, z_syn


def pack_bits(bits: Sequence[Any]) -> jnp.ndarray:
    """Bits (mid-circuit measurements or 0/1 values) -> bytes, bit i in byte i // 8 at bit i % 8."""
    out = []
    for byte in range((len(bits) + 7) // 8):
        acc = jnp.int32(0)
        for i in range(8 * byte, min(8 * byte + 8, len(bits))):
            acc = acc | ((jnp.asarray(bits[i]).astype(jnp.int32) & 1) << (i % 8))
        out.append(acc.astype(jnp.uint8))
    return jnp.stack(out)


def unpack_bits(buf: jnp.ndarray, n_bits: int) -> list[Any]:
    """The inverse of :func:`pack_bits` for ``n_bits`` bits (int32 0/1 each)."""
    return [(buf[i // 8].astype(jnp.int32) >> (i % 8)) & 1 for i in range(n_bits)]


def _decode_runtime(session: Any, syndrome: Sequence[Any], decoder_id: int, n_bits: int
                    ) -> tuple[list[Any], list[Any]]:
    """Demo 2a's round: stage, post, collect. Returns (correction bits, the three statuses)."""
    packed = pack_bits(syndrome)
    n_bytes = (n_bits + 7) // 8
    staged = bl.runtime_call(STAGE_PAYLOAD, session, packed, int(packed.shape[0]), decoder_id)
    posted = bl.runtime_call(POST, session)
    collected, reply = bl.runtime_call(COLLECT, session, n_bytes, None, out_bytes=n_bytes)
    return unpack_bits(reply, n_bits), [staged, posted, collected]


def device(code: Code, *, noise: float = 0.0, seed: int | None = None, runs_in: str = "thread") -> bl.Backline:
    """The placement: a stim controller and one CPU coprocessor running BP+OSD for ``code``."""
    from backline_decoder_bpod import css_bp_decoder

    ctrl = Controller(device=qml.device("default.clifford", wires=code.wires))
    cop = Coprocessor(name=COPROCESSOR, coprocessor_fn=css_bp_decoder(code.hx, code.hz),
                      runs_in=runs_in, init_args={"idle_spin_us": IDLE_SPIN_US})
    return bl.Backline(controller=ctrl, coprocessors=[cop], transport="memcpy", noise=noise, seed=seed)


@dataclass
class Round:
    """A compiled round: the qjit'd QNode and what it was built for."""

    qnode: Any
    demo: str
    basis: str
    code: Code
    shots: int
    noise: float
    idle: int


def build(demo: str = "2", *, basis: str = "Z", shots: int = 2000, noise: float = 0.0, idle: int = 0,
          seed: int | None = None, code: Code | None = None) -> Round:
    """The QNode of demo ``"2"`` (``decode``) or ``"2a"`` (runtime calls) on a fresh device.

    ``basis`` chooses |0_L> and a Z readout (``"Z"``) or |+_L> and an X readout (``"X"``);
    ``noise`` is the physical error rate, ``idle`` the storage steps before the round. Its
    arguments are ``(x_err, z_err, correct)``: the data qubit given an X / a Z error
    (-1: none) and whether the corrections are applied (1) or not (0). It returns the data
    qubits' samples, ``x_syn``, ``z_syn``, ``corr_x``, ``corr_z`` and, for demo 2a, the
    runtime calls' statuses. Two devices built with the same ``seed`` draw the same
    randomness run by run.
    """
    if demo not in DEMOS:
        raise ValueError(f"demo must be one of {DEMOS}, not {demo!r}")
    if basis not in BASES:
        raise ValueError(f"basis must be one of {BASES}, not {basis!r}")
    if not isinstance(idle, int) or idle < 0:
        raise ValueError(f"idle must be an int >= 0, not {idle!r}")
    code = code or load_code()
    n = code.n
    dev = device(code, noise=noise, seed=seed)
    (key,) = [node.name for node in dev.placement.coprocessors]

    @bl.qjit
    @qml.set_shots(shots)
    @qml.qnode(dev, mcm_method="one-shot")
    def round_(x_err, z_err, correct):
        _prepare(code, basis)
        for q in range(n):
            qml.cond(x_err == q, qml.PauliX)(wires=q)
            qml.cond(z_err == q, qml.PauliZ)(wires=q)
        if idle:
            @qml.for_loop(0, idle, 1)                    # storage: noise accumulates
            def _store(step):
                for q in range(n):
                    qml.Identity(q)

            _store()
        x_syn, z_syn = _extract(code, basis)
        if demo == "2":
            corr_z = bl.decode(x_syn, decoder_id=0)   # Hx syndrome -> Z correction
            corr_x = bl.decode(z_syn, decoder_id=1)   # Hz syndrome -> X correction
            statuses = []
        else:
            session = bl.runtime_call(GET_SESSION, ROLE_CONTROLLER, key)
            corr_z, st_z = _decode_runtime(session, x_syn, 0, n)
            corr_x, st_x = _decode_runtime(session, z_syn, 1, n)
            statuses = st_z + st_x
        for q in range(n):
            qml.cond((corr_x[q] == 1) & (correct == 1), qml.PauliX)(wires=q)
            qml.cond((corr_z[q] == 1) & (correct == 1), qml.PauliZ)(wires=q)
        if basis == "X":
            for q in range(n):
                qml.Hadamard(q)
        out = [qml.sample(wires=list(range(n))), qml.sample(x_syn), qml.sample(z_syn),
               qml.sample([corr_x[q] for q in range(n)]), qml.sample([corr_z[q] for q in range(n)])]
        if statuses:
            out.append(qml.sample(statuses))
        return tuple(out)

    return Round(round_, demo, basis, code, shots, float(noise), idle)


# ---- running it ----------------------------------------------------------------------------------

@dataclass
class Result:
    """One run of a :class:`Round`."""

    data: np.ndarray      # shots x 13 data-qubit outcomes (in the readout basis)
    x_syn: np.ndarray     # shots x 6
    z_syn: np.ndarray     # shots x 6
    corr_x: np.ndarray    # shots x 13
    corr_z: np.ndarray    # shots x 13
    logical: np.ndarray   # shots: logical outcome (0 = the prepared state)
    us_per_shot: float
    rtt: dict[str, dict[str, float]]
    rtt_text: str
    statuses: np.ndarray | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ler(self) -> float:
        return float(np.mean(self.logical))

    def record(self) -> np.ndarray:
        """Everything measured per shot, side by side (to compare runs shot by shot)."""
        return np.hstack([self.data, self.x_syn, self.z_syn, self.corr_x, self.corr_z])


def logical_outcomes(code: Code, basis: str, data: np.ndarray) -> np.ndarray:
    """Per shot, the logical Z (basis Z) or X (basis X) outcome of the data qubits' bits."""
    support = code.lz if basis == "Z" else code.lx
    return (np.asarray(data, dtype=np.int64) @ support.astype(np.int64)) % 2


def run(rnd: Round, *, x_err: int = -1, z_err: int = -1, correct: bool = True) -> Result:
    """Run the round once (``rnd.shots`` shots)."""
    out = [np.asarray(o) for o in rnd.qnode(x_err, z_err, int(bool(correct)))]
    data, x_syn, z_syn, corr_x, corr_z = (o.reshape(rnd.shots, -1) for o in out[:5])
    statuses = out[5].reshape(rnd.shots, -1) if len(out) > 5 else None
    if statuses is not None and statuses.any():
        bad = sorted({int(s) for s in statuses.ravel() if s})
        raise RuntimeError(f"demo 2a: a runtime call failed in {int((statuses != 0).any(axis=1).sum())} shots "
                           f"(statuses {bad})")
    stats = rnd.qnode.last_run
    return Result(data, x_syn, z_syn, corr_x, corr_z, logical_outcomes(rnd.code, rnd.basis, data),
                  stats.us_per_shot, stats.rtt_summary(), stats.rtt_text(), statuses,
                  dict(rnd.qnode.programs[0].timings))


def single_error_sweep(rnd: Round) -> dict[str, Any]:
    """Every single-qubit error the readout basis sees (X for basis Z, Z for basis X) on each
    data qubit, with and without the correction.

    Returns ``corrected_failures`` / ``uncorrected_failures`` (the qubits whose error left a
    logical error in some shot) and ``results`` (qubit -> (corrected, uncorrected) runs).
    """
    failed, flipped, results = [], [], {}
    for q in range(rnd.code.n):
        kw = {"x_err": q} if rnd.basis == "Z" else {"z_err": q}
        fixed, raw = run(rnd, **kw), run(rnd, correct=False, **kw)
        results[q] = (fixed, raw)
        if fixed.logical.any():
            failed.append(q)
        if raw.logical.any():
            flipped.append(q)
    return {"corrected_failures": failed, "uncorrected_failures": flipped, "results": results}


def same_records(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Whether two sweeps measured the same thing in every shot of every run."""
    return a["results"].keys() == b["results"].keys() and all(
        np.array_equal(x.record(), y.record())
        for q in a["results"] for x, y in zip(a["results"][q], b["results"][q]))


def _half_width(rate: float, shots: int) -> float:
    return 1.96 * math.sqrt(rate * (1 - rate) / max(shots, 1))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shots", type=int, default=2000, help="shots of the noisy runs (default 2000)")
    parser.add_argument("--noise", type=float, default=0.001, help="physical error rate (default 0.001)")
    parser.add_argument("--idle", type=int, default=10, help="storage steps before the noisy round (default 10)")
    parser.add_argument("--seed", type=int, default=2026, help="seed of both demos' devices (default 2026)")
    parser.add_argument("--sweep-shots", type=int, default=8, help="shots per single-qubit-error run (default 8)")
    args = parser.parse_args(argv)
    if args.shots < 1 or args.sweep_shots < 1:
        parser.error("--shots and --sweep-shots must be at least 1")
    if args.idle < 0:
        parser.error("--idle must be at least 0")
    t0 = time.perf_counter()
    code = load_code()
    ok = True
    print(f"hgp13: n={code.n}, {code.hx.shape[0]} X checks, {code.hz.shape[0]} Z checks, "
          f"lx={np.flatnonzero(code.lx).tolist()}, lz={np.flatnonzero(code.lz).tolist()}; "
          f"BP+OSD on coprocessor {COPROCESSOR!r} (thread, memcpy)")

    print(f"\n1. Single-qubit errors, no noise ({args.sweep_shots} shots per run, seed {args.seed})")
    for basis, kind in (("Z", "X"), ("X", "Z")):
        sweeps = {}
        for demo in DEMOS:
            sweep = sweeps[demo] = single_error_sweep(build(demo, basis=basis, shots=args.sweep_shots,
                                                            seed=args.seed, code=code))
            good = not sweep["corrected_failures"]
            ok &= good
            print(f"   demo {demo:<2} |{'0' if basis == 'Z' else '+'}_L>, {'an' if kind == 'X' else 'a'} {kind} error on each of the {code.n} "
                  f"qubits: corrected {code.n - len(sweep['corrected_failures'])}/{code.n}"
                  f"{'' if good else ' (failed on ' + str(sweep['corrected_failures']) + ')'}; uncorrected, "
                  f"a logical error on qubits {sweep['uncorrected_failures']}")
        same = same_records(sweeps["2"], sweeps["2a"])
        ok &= same
        print(f"   demo 2 and demo 2a, same seed: per-shot records {'identical' if same else 'DIFFER'}")

    print(f"\n2. Depolarizing noise p = {args.noise}, {args.idle} idle steps before the round, {args.shots} shots, "
          f"seed {args.seed}")
    for basis in BASES:
        results: dict[tuple[str, bool], Result] = {}
        for demo in DEMOS:
            rnd = build(demo, basis=basis, shots=args.shots, noise=args.noise, idle=args.idle, seed=args.seed,
                        code=code)
            for correct in (True, False):
                results[demo, correct] = run(rnd, correct=correct)
            fixed, raw = results[demo, True], results[demo, False]
            t = fixed.timings
            print(f"   demo {demo:<2} |{'0' if basis == 'Z' else '+'}_L>: logical error rate corrected "
                  f"{fixed.ler:.4f} ± {_half_width(fixed.ler, args.shots):.4f}, uncorrected {raw.ler:.4f} ± "
                  f"{_half_width(raw.ler, args.shots):.4f}")
            print(f"        trace {rnd.qnode.timings.get('trace_s', float('nan')) * 1e3:.0f} ms, "
                  f"compile {t.get('compile_s', float('nan')) * 1e3:.0f} ms (to IR "
                  f"{t.get('capture_to_ir_s', float('nan')) * 1e3:.0f}, passes {t.get('passes_s', float('nan')) * 1e3:.0f}, "
                  f"LLVM JIT {t.get('llvm_jit_s', float('nan')) * 1e3:.0f}); {fixed.us_per_shot:.1f} µs per shot; "
                  f"{fixed.rtt_text}")
            ok &= fixed.ler < raw.ler
        same = all(np.array_equal(results["2", c].record(), results["2a", c].record()) for c in (True, False))
        ok &= same
        print(f"   demo 2 and demo 2a, same seed: per-shot records {'identical' if same else 'DIFFER'} "
              f"({2 * args.shots} shots: data, syndromes, corrections)")
    print(f"\ndone in {time.perf_counter() - t0:.1f} s")
    if not ok:
        print("FAILED: see above", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
