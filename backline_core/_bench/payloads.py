"""The requests a bench run sends and the replies it expects: a decoder's own
(``Decoder.bench_payloads``, a :class:`~backline_core._bench.protocols.PayloadGenerator`),
else random bytes answered by calling the function here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from .._bound_function import BoundFunction
from .._coprocessor_function import CoprocessorFunction
from .._errors import BacklineError
from .config import MAX_PAYLOAD_BYTES, PAYLOAD_TABLE, BenchConfig, check_floor


@dataclass(frozen=True, kw_only=True)
class PayloadSpec:
    """What a decoder's bench payloads are made for."""

    decoder_id: int
    #: ``--payload-bytes``: requests of another size are refused unless the bench was given a code
    #: (``--code``), whose syndromes set the size
    payload_bytes: int
    #: how many distinct requests to make (fewer is fine: the bench cycles through them)
    count: int
    seed: int
    #: ``--error-rate``, for payloads that are syndromes of random errors
    error_rate: float
    #: what the decoder's ``build()`` was given (``--decoder-param``; with ``--code``, ``hx`` and ``hz``)
    params: Mapping[str, Any]


@dataclass(frozen=True)
class BenchPayloads:
    """A decoder's requests (all one size) and, optionally, the replies it must give them."""

    requests: Sequence[bytes]
    replies: Sequence[bytes] | None = None


class PayloadTable(NamedTuple):
    """A run's requests and expected replies, each concatenated, as the native driver takes them."""

    requests: bytes
    replies: bytes
    reply_bytes: int


def random_payloads(function: CoprocessorFunction, spec: PayloadSpec) -> BenchPayloads:
    """Random requests of ``spec.payload_bytes`` (seeded): a decoder without payloads of its own."""
    rng = np.random.default_rng(spec.seed)
    return BenchPayloads([rng.integers(0, 256, spec.payload_bytes, dtype=np.uint8).tobytes()
                          for _ in range(spec.count)])


def index_payload(i: int, n: int) -> bytes:
    """The payload bl_bench_rounds sends for round i (see bench.c payload_for)."""
    return bytes(((i >> (8 * (b % 8))) & 0xFF) ^ (b // 8) & 0xFF for b in range(n))


def payload_table(cfg: BenchConfig, decoder: Any, function: CoprocessorFunction,
                  params: dict[str, Any]) -> PayloadTable | None:
    """The run's table from ``decoder``'s record (its ``bench_payloads``), checked: one request
    size, which is ``--payload-bytes`` (with ``--code``: sets it), fits a slot and the floor,
    one reply size, as many replies as requests; None for round-indexed echoed payloads."""
    spec = PayloadSpec(decoder_id=cfg.decoder_id, payload_bytes=cfg.payload_bytes, count=PAYLOAD_TABLE,
                       seed=cfg.seed, error_rate=cfg.error_rate, params=MappingProxyType(dict(params)))
    generate = getattr(decoder, "bench_payloads", None) or random_payloads
    made = generate(function, spec)
    if made is None:
        return None
    name = cfg.coprocessor_fn
    requests = [bytes(r) for r in made.requests]
    sizes = {len(r) for r in requests}
    if len(sizes) != 1 or 0 in sizes:
        raise BacklineError(f"decoder {name!r} made bench requests of sizes {sorted(sizes) or 'none'}; its "
                            "bench_payloads must give at least one, all of one size")
    size = sizes.pop()
    if size != cfg.payload_bytes and cfg.code is None:
        raise BacklineError(f"--coprocessor-fn {name} takes {size}-byte requests: use --payload-bytes {size}")
    if size > MAX_PAYLOAD_BYTES:
        raise BacklineError(f"--code {cfg.code}: its {size}-byte syndromes do not fit the largest slot's "
                            f"{MAX_PAYLOAD_BYTES}-byte payload")
    check_floor(size)
    if made.replies is not None:
        replies = [bytes(r) for r in made.replies]
        if len(replies) != len(requests):
            raise BacklineError(f"decoder {name!r} made {len(requests)} bench requests but {len(replies)} replies")
    else:
        with BoundFunction(function) as local:
            replies = [local(cfg.decoder_id, r) for r in requests]
    reply_sizes = {len(r) for r in replies}
    if len(reply_sizes) != 1:
        raise BacklineError(f"{function.name} gives replies of several sizes {sorted(reply_sizes)}; the bench needs "
                            "one size")
    cfg.payload_bytes = size
    table = PayloadTable(b"".join(requests), b"".join(replies), reply_sizes.pop())
    cfg.check_memory(len(table.requests) + len(table.replies))
    return table
