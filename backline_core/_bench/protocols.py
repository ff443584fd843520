"""The bench's callbacks that plugin records supply, as types: a Transport's ``bench_floor``
and ``controller_bench``, a Decoder's ``bench_payloads`` (docs/plugins.md). Nothing here is
imported when a plugin loads: the records name these types for checkers only."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from .._coprocessor_function import CoprocessorFunction
    from .config import BenchConfig
    from .payloads import BenchPayloads, PayloadSpec, PayloadTable
    from .progress import Progress


@runtime_checkable
class BenchFloor(Protocol):
    """A transport's bare floor, timed in this process (``NativeFloor`` is one)."""

    #: its row in the report
    label: str
    #: what :meth:`reference` ran, or why it gave None
    reference_note: str | None

    def run(self, first: int, out: np.ndarray) -> None:
        """``len(out)`` rounds (numpy uint64, one round trip in ns each); raises if one is lost."""

    def pause(self) -> None:
        """Stop its far end (SIGSTOP), so that it and a spinning coprocessor never share a CPU."""

    def resume(self) -> None:
        """Continue its far end."""

    def reference(self) -> dict[str, Any] | None:
        """Another tool's figures for the same path (name, command, rounds, median_ns, p99_ns, ...), or None."""


class BenchFloorFactory(Protocol):
    """``Transport.bench_floor``: the floor of one run, a context manager that leaves nothing behind.

    ``init_args`` are the coprocessor's; with ``cfg.peer`` the floor's far end is the peer's
    (``cfg.peer_address()``), started there."""

    def __call__(self, cfg: BenchConfig, init_args: dict[str, Any]) -> AbstractContextManager[BenchFloor]: ...


@runtime_checkable
class ControllerBenchResult(Protocol):
    """What a controller's own bench returns; `backline bench` prints :meth:`text`."""

    lost: int
    mismatched: int

    def text(self) -> str:
        """The report."""

    def to_json(self) -> dict[str, Any]:
        """Its figures, for ``--json``."""


class ControllerBench(Protocol):
    """``Transport.controller_bench``: the whole run for a controller whose hardware times its
    rounds (``backline bench --controller-hardware H``). ``table`` is the run's payloads (None:
    the bench's own round-indexed payloads, echoed), ``out_bytes`` the reply size, ``init_args``
    the coprocessor's, ``progress`` where to say how far it got."""

    def __call__(self, cfg: BenchConfig, *, function: CoprocessorFunction, table: PayloadTable | None,
                 out_bytes: int, init_args: dict[str, Any], progress: Progress) -> ControllerBenchResult: ...


class PayloadGenerator(Protocol):
    """``Decoder.bench_payloads``: the requests `backline bench` sends ``function`` (built by
    the decoder's ``build(**spec.params)``), and perhaps the replies it must give.

    Replies left out (None) are computed by calling the function here, so the run checks what
    the transport delivered; give them when they can be computed independently of the
    function under test. Returning None instead of payloads means the bench's own
    round-indexed payloads, each answered by itself (an echo)."""

    def __call__(self, function: CoprocessorFunction, spec: PayloadSpec) -> BenchPayloads | None: ...
