"""CUDA-Q QEC's ``multi_decoder_config`` YAML as Backline decoders, and written back (docs/cudaq-interop.md).

A config is ``decoders: [{id, type, block_size, syndrome_size, H_sparse, O_sparse, D_sparse,
decoder_custom_args}]`` (optional ``transport:`` at the top, which names CUDA-Q's transport and is
ignored here). A sparse matrix is a flat list of column indices, each row ended by ``-1``. Each
type maps onto an installed Backline decoder (:data:`TYPES`); a parameter that means nothing to the
Backline decoder, or means something it does not do, is refused by name.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backline_core import DecoderFunction, InvalidArgumentError, plugins
from backline_core.sdk import dem_matrices, read_input_text

#: the most decoders one config may hold (CUDA-Q's server's limit)
MAX_DECODERS = 32
#: the largest config file read
MAX_CONFIG_BYTES = 256 << 20
#: CUDA-Q's decoder types that map onto Backline decoders
TYPES = ("single_error_lut", "multi_error_lut", "pymatching", "nv-qldpc-decoder", "sliding_window")
#: keys of one ``decoders:`` entry
_REQUIRED = ("id", "type", "block_size", "syndrome_size", "H_sparse", "O_sparse", "D_sparse")
_OPTIONAL = ("decoder_custom_args", "cuda_device_id", "dispatch")  # the last two place a GPU decoder: no meaning here
_UNSUPPORTED = {"dem_chunks": "per-round DEM pieces", "stim_dem_path": "a DEM file on CUDA-Q's server"}
#: nv-qldpc-decoder: its bp_method and osd_method numbers, Backline's names
_BP_METHODS = {0: "product_sum", 1: "min_sum"}
_OSD_METHODS = {1: "osd0", 2: "osd_e", 3: "osd_cs"}
#: nv-qldpc-decoder parameters that choose how it runs on a GPU, not what it decodes
_QLDPC_IGNORED = ("n_threads", "bp_batch_size", "osd_batch_size", "use_sparsity", "repeatable")
#: PyMatching's merge of parallel edges: what Backline's ``pymatching`` does (PyMatching's default)
_MERGE = ("smallest_weight", "smallest-weight")


@dataclass(frozen=True)
class DecoderConfig:
    """One entry of ``decoders:``, with the Backline decoder it maps to."""

    id: int
    type: str  #: CUDA-Q's type name, as in the YAML
    H: np.ndarray  #: (syndrome_size, block_size) 0/1 uint8
    O: np.ndarray  #: (observables, block_size) 0/1 uint8
    D: np.ndarray | None  #: (syndrome_size, measurements) 0/1 uint8; None: the measurements are the detectors
    decoder: str  #: the Backline decoder's name (for ``sliding_window``: the decoder of each window)
    params: dict[str, Any] = field(default_factory=dict)  #: its parameters
    priors: np.ndarray | None = None  #: per column of H (error_rate_vec), or None
    custom_args: dict[str, Any] = field(default_factory=dict)  #: ``decoder_custom_args`` as read
    #: ``sliding_window`` only: {"window", "commit", "syndromes_per_round"} (rounds, rounds, rows of H)
    window: dict[str, int] | None = None

    @property
    def block_size(self) -> int:
        return int(self.H.shape[1])

    @property
    def syndrome_size(self) -> int:
        return int(self.H.shape[0])

    @property
    def num_measurements(self) -> int:
        """Measurements a shot: D's columns (the syndrome size without D)."""
        return int(self.D.shape[1]) if self.D is not None else self.syndrome_size

    @property
    def num_observables(self) -> int:
        return int(self.O.shape[0])

    def build(self) -> Any:
        """A coprocessor function: a round's payload is the shot's packed detection events (LSB first),
        its reply the packed observable flips."""
        if self.window is not None:
            return sliding_window_function(self.H, self.O, self.priors, self.decoder, self.params, **self.window)
        return plugins.get("decoder", self.decoder).build_from_matrices(self.H, self.O, self.priors, **self.params)


# --- reading -------------------------------------------------------------------------------------------------------

def _fail(where: str, key: str, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"{where}: {key}: {what}")


def _int(value: Any, where: str, key: str, minimum: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise _fail(where, key, f"{value!r} must be a whole number, at least {minimum}")
    return value


def _sparse(value: Any, where: str, key: str, columns: int | None) -> list[list[int]]:
    """A ``-1``-terminated sparse list as rows of column indices (each < ``columns`` when given)."""
    if not isinstance(value, list):
        raise _fail(where, key, f"must be a list of column indices, each row ended by -1; got {type(value).__name__}")
    rows: list[list[int]] = []
    row: list[int] = []
    for i, v in enumerate(value):
        if not isinstance(v, int) or isinstance(v, bool) or v < -1:
            raise _fail(where, key, f"entry {i} is {v!r}: entries are column indices (0, 1, ...) or -1 to end a row")
        if v == -1:
            rows.append(row)
            row = []
            continue
        if columns is not None and v >= columns:
            raise _fail(where, key, f"row {len(rows)} names column {v}, but block_size is {columns} (columns "
                                    f"0..{columns - 1}): fix the index or block_size")
        if v in row:
            raise _fail(where, key, f"row {len(rows)} names column {v} twice")
        row.append(v)
    if row:
        raise _fail(where, key, f"the last row ({row[:5]}...) is not ended by -1: end every row with -1")
    return rows


def _dense(rows: list[list[int]], columns: int) -> np.ndarray:
    out = np.zeros((len(rows), columns), dtype=np.uint8)
    for r, cols in enumerate(rows):
        out[r, cols] = 1
    return out


def _priors(value: Any, where: str, key: str, columns: int) -> np.ndarray:
    if not isinstance(value, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        raise _fail(where, key, "must be a list of numbers, one probability per column of H")
    p = np.asarray(value, dtype=np.float64)
    if p.size != columns:
        raise _fail(where, key, f"has {p.size} entries but block_size is {columns}: give one per column of H")
    bad = np.flatnonzero(~(np.isfinite(p) & (p > 0) & (p < 1)))
    if bad.size:
        raise _fail(where, key, f"entry {int(bad[0])} is {float(p[bad[0]])!r}: each must be in (0, 1)")
    return p


def _check_args(args: dict[str, Any], known: tuple[str, ...], where: str, kind: str) -> None:
    for k in args:
        if k not in known:
            raise _fail(where, f"decoder_custom_args.{k}", f"unknown to {kind} here; known: "
                                                           f"{', '.join(known) or 'none'}")


def _choice(value: Any, choices: dict[int, str], where: str, key: str) -> str:
    if value not in choices or isinstance(value, bool):
        raise _fail(where, key, f"{value!r} is not supported; Backline maps "
                                + ", ".join(f"{k} ({v})" for k, v in choices.items()))
    return choices[value]


def _map_type(kind: str, args: dict[str, Any], where: str, columns: int,
              key: str = "decoder_custom_args") -> tuple[str, dict[str, Any], np.ndarray | None]:
    """(Backline decoder, its parameters, priors) of CUDA-Q type ``kind`` with ``args``."""
    if kind == "single_error_lut":
        _check_args(args, (), where, kind)
        return "lut", {"depth": 1}, None
    if kind == "multi_error_lut":
        _check_args(args, ("lut_error_depth",), where, kind)
        # CUDA-Q's own default depth when the key is absent is 1 (docs/decoder-lut.md)
        depth = _int(args.get("lut_error_depth", 1), where, f"{key}.lut_error_depth", 1)
        return "lut", {"depth": depth}, None
    if kind == "pymatching":
        _check_args(args, ("error_rate_vec", "merge_strategy"), where, kind)
        merge = args.get("merge_strategy", _MERGE[0])
        if merge not in _MERGE:
            raise _fail(where, f"{key}.merge_strategy", f"{merge!r} is not supported: Backline's pymatching merges "
                                                        "parallel edges by smallest_weight only")
        p = _priors(args["error_rate_vec"], where, f"{key}.error_rate_vec", columns) if "error_rate_vec" in args \
            else None
        return "pymatching", {}, p
    if kind == "nv-qldpc-decoder":
        known = ("use_osd", "max_iterations", "bp_method", "scale_factor", "osd_method", "osd_order",
                 "error_rate", "error_rate_vec", "proc_float", "iter_per_check", "clip_value", *_QLDPC_IGNORED)
        _check_args(args, known, where, kind + " (not mapped: composition, srelay_config, gamma0, gamma_dist, "
                                               "explicit_gammas, bp_seed, osd_init_method, opt_results)")
        use_osd = args.get("use_osd", False)
        if not isinstance(use_osd, bool):
            raise _fail(where, f"{key}.use_osd", f"{use_osd!r} must be true or false")
        # CUDA-Q's defaults where a key is absent: 30 iterations, sum-product, scale 1.0, OSD-0 of order 0
        params: dict[str, Any] = {
            "max_iter": _int(args.get("max_iterations", 30), where, f"{key}.max_iterations", 1),
            "bp_method": _choice(args.get("bp_method", 0), _BP_METHODS, where, f"{key}.bp_method"),
        }
        scale = args.get("scale_factor", 1.0)
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not 0 <= scale <= 1:
            raise _fail(where, f"{key}.scale_factor", f"{scale!r} must be a number in [0, 1] (0: adaptive)")
        params["ms_scaling_factor"] = float(scale)
        for name, default in (("proc_float", "fp64"), ("iter_per_check", 1), ("clip_value", 0)):
            if name in args and args[name] != default:
                raise _fail(where, f"{key}.{name}", f"{args[name]!r} is not supported: Backline's BP runs as with "
                                                    f"{name}={default!r} only")
        if use_osd:
            params["osd_method"] = _choice(args.get("osd_method", 1), _OSD_METHODS, where, f"{key}.osd_method")
            params["osd_order"] = _int(args.get("osd_order", 0), where, f"{key}.osd_order")
        if "error_rate_vec" in args:
            p = _priors(args["error_rate_vec"], where, f"{key}.error_rate_vec", columns)
        else:  # CUDA-Q's default prior is 0.001 a column
            rate = args.get("error_rate", 0.001)
            p = _priors([rate] * columns, where, f"{key}.error_rate", columns)
        return ("bposd" if use_osd else "bp"), params, p
    raise _fail(where, "type", f"{kind!r} is not a type Backline maps; known: {', '.join(TYPES)}")


def _entry(d: Any, index: int, source: str) -> DecoderConfig:
    where = f"{source}: decoders[{index}]"
    if not isinstance(d, dict):
        raise InvalidArgumentError(f"{where}: must be a mapping of id, type, block_size, ... ; got {type(d).__name__}")
    if "id" in d:
        where = f"{source}: decoder id {d['id']!r}"
    for key in d:
        if key in _UNSUPPORTED:
            raise _fail(where, key, f"{_UNSUPPORTED[key]} are not supported: give H_sparse, O_sparse and D_sparse")
        if key not in _REQUIRED and key not in _OPTIONAL:
            raise _fail(where, key, f"unknown key; known: {', '.join(_REQUIRED + _OPTIONAL)}")
    for key in _REQUIRED:
        if key not in d:
            raise _fail(where, key, "missing: every decoder needs " + ", ".join(_REQUIRED))
    ident = _int(d["id"], where, "id")
    kind = d["type"]
    if not isinstance(kind, str):
        raise _fail(where, "type", f"{kind!r} must be a type name; known: {', '.join(TYPES)}")
    cols = _int(d["block_size"], where, "block_size", 1)
    nrows = _int(d["syndrome_size"], where, "syndrome_size", 1)
    h_rows = _sparse(d["H_sparse"], where, "H_sparse", cols)
    if len(h_rows) != nrows:
        raise _fail(where, "H_sparse", f"has {len(h_rows)} rows but syndrome_size is {nrows}: they must agree")
    o_rows = _sparse(d["O_sparse"], where, "O_sparse", cols)
    if not o_rows:
        raise _fail(where, "O_sparse", "has no rows: Backline's decoders reply observable flips, so give at least one")
    d_rows = _sparse(d["D_sparse"], where, "D_sparse", None)
    dmat = None
    if d_rows:
        if len(d_rows) != nrows:
            raise _fail(where, "D_sparse", f"has {len(d_rows)} rows but syndrome_size is {nrows}: one row per detector")
        dmat = _dense(d_rows, max((max(r) for r in d_rows if r), default=-1) + 1)
    args = d.get("decoder_custom_args")
    args = {} if args is None else args
    if not isinstance(args, dict):
        raise _fail(where, "decoder_custom_args", f"must be a mapping of parameters, not {type(args).__name__}")
    h, o = _dense(h_rows, cols), _dense(o_rows, cols)
    window = None
    if kind == "sliding_window":
        known = ("window_size", "step_size", "num_syndromes_per_round", "inner_decoder_name", "inner_decoder_params",
                 "error_rate_vec", "num_boundary_syndromes", "straddle_start_round", "straddle_end_round")
        _check_args(args, known, where, kind)
        for k in ("error_rate_vec", "inner_decoder_name", "window_size", "step_size", "num_syndromes_per_round"):
            if k not in args:
                raise _fail(where, f"decoder_custom_args.{k}", "missing: sliding_window needs error_rate_vec, "
                                                               "inner_decoder_name, window_size, step_size and "
                                                               "num_syndromes_per_round")
        for k, default in (("num_boundary_syndromes", 0), ("straddle_start_round", False),
                           ("straddle_end_round", False)):
            if k in args and args[k] != default:
                raise _fail(where, f"decoder_custom_args.{k}", f"{args[k]!r} is not supported (only {default!r})")
        per = _int(args["num_syndromes_per_round"], where, "decoder_custom_args.num_syndromes_per_round", 1)
        if nrows % per:
            raise _fail(where, "decoder_custom_args.num_syndromes_per_round",
                        f"{per} does not divide syndrome_size {nrows}: every round must hold as many rows of H")
        window = {"window": _int(args["window_size"], where, "decoder_custom_args.window_size", 1),
                  "commit": _int(args["step_size"], where, "decoder_custom_args.step_size", 1),
                  "syndromes_per_round": per}
        inner = args["inner_decoder_name"]
        if inner == "sliding_window" or not isinstance(inner, str):
            raise _fail(where, "decoder_custom_args.inner_decoder_name",
                        f"{inner!r} is not a decoder of one window; known: {', '.join(TYPES[:-1])}")
        inner_args = args.get("inner_decoder_params") or {}
        if not isinstance(inner_args, dict):
            raise _fail(where, "decoder_custom_args.inner_decoder_params", "must be a mapping of parameters")
        inner_args = {k: v for k, v in inner_args.items() if k != "error_rate_vec"}  # the window's priors are given
        name, params, _ = _map_type(inner, inner_args, where, cols, "decoder_custom_args.inner_decoder_params")
        priors = _priors(args["error_rate_vec"], where, "decoder_custom_args.error_rate_vec", cols)
    else:
        name, params, priors = _map_type(kind, args, where, cols)
    return DecoderConfig(id=ident, type=kind, H=h, O=o, D=dmat, decoder=name, params=params, priors=priors,
                         custom_args=dict(args), window=window)


def load_config(text: str, *, source: str = "the config") -> list[DecoderConfig]:
    """The decoders of a ``multi_decoder_config`` YAML document; every error is one line naming the decoder."""
    import yaml

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidArgumentError(f"{source}: not YAML: {' '.join(str(exc).split())[:200]}") from None
    if not isinstance(doc, dict) or "decoders" not in doc:
        raise InvalidArgumentError(f"{source}: a multi_decoder_config needs a top-level 'decoders:' list")
    for key in doc:
        if key not in ("decoders", "transport"):
            raise InvalidArgumentError(f"{source}: {key}: unknown top-level key; known: decoders, transport")
    entries = doc["decoders"]
    if not isinstance(entries, list) or not entries:
        raise InvalidArgumentError(f"{source}: decoders: must be a non-empty list of decoders")
    if len(entries) > MAX_DECODERS:
        raise InvalidArgumentError(f"{source}: decoders: {len(entries)} decoders; a config holds at most "
                                   f"{MAX_DECODERS}: split it")
    out: list[DecoderConfig] = []
    seen: set[int] = set()
    for i, d in enumerate(entries):
        cfg = _entry(d, i, source)
        if cfg.id in seen:
            raise InvalidArgumentError(f"{source}: decoder id {cfg.id}: id: used twice; give each decoder its own id")
        seen.add(cfg.id)
        out.append(cfg)
    for cfg in out:
        if cfg.id >= len(out):  # CUDA-Q's server refuses such a config too
            raise InvalidArgumentError(f"{source}: decoder id {cfg.id}: id: the ids of {len(out)} decoders must be "
                                       f"0..{len(out) - 1}; renumber them")
    return out


def read_config(path: str) -> list[DecoderConfig]:
    """:func:`load_config` of the file ``path``."""
    return load_config(read_input_text(path, what="the decoder config", limit=MAX_CONFIG_BYTES), source=path)


# --- sliding windows as one coprocessor function --------------------------------------------------------------------

class _Windows:
    """A SlidingWindowDecoder over packed shots: the whole shot's detection events in, observable flips out."""

    def __init__(self, spec: dict[str, Any]) -> None:
        from ..windows import SlidingWindowDecoder

        h = np.zeros(spec["h_shape"], dtype=np.uint8)
        h[tuple(spec["h_nz"])] = 1
        o = np.zeros(spec["o_shape"], dtype=np.uint8)
        o[tuple(spec["o_nz"])] = 1
        rounds = np.arange(h.shape[0]) // spec["per"]
        self.sw = SlidingWindowDecoder.from_matrices(h, o, spec["priors"], rounds, spec["decoder"],
                                                     window=spec["window"], commit=spec["commit"], **spec["params"])
        self.detectors, self.observables = h.shape[0], o.shape[0]

    def batch(self, packed: np.ndarray) -> np.ndarray:
        dets = np.unpackbits(packed, axis=1, count=self.detectors, bitorder="little")
        return np.packbits(self.sw.decode_batch(dets), axis=1, bitorder="little")

    def __call__(self, decoder_id: int, payload: bytes) -> bytes:
        if len(payload) != (self.detectors + 7) // 8:
            raise ValueError(f"sliding_window: a round of {len(payload)} bytes; this decoder takes the whole shot's "
                             f"{self.detectors} detection events, {(self.detectors + 7) // 8} bytes")
        return self.batch(np.frombuffer(payload, dtype=np.uint8).reshape(1, -1)).tobytes()


def _windows_init(context: bytes) -> Any:
    """``python_init``: the window decoders rebuilt where the function is bound."""
    return _Windows(json.loads(context))


def sliding_window_function(h: Any, o: Any, priors: Any, decoder: str, params: dict[str, Any], *, window: int,
                            commit: int, syndromes_per_round: int) -> DecoderFunction:
    """Backline's sliding windows (docs/streaming.md) over rows ``r // syndromes_per_round`` as rounds, as one
    function whose round is a whole shot."""
    h, o = np.asarray(h, dtype=np.uint8), np.asarray(o, dtype=np.uint8)
    p = np.full(h.shape[1], 0.01) if priors is None else np.asarray(priors, dtype=np.float64)
    context = json.dumps({"h_shape": list(h.shape), "h_nz": [v.tolist() for v in np.nonzero(h)],
                          "o_shape": list(o.shape), "o_nz": [v.tolist() for v in np.nonzero(o)],
                          "priors": [float(x) for x in p], "decoder": decoder, "params": params, "window": window,
                          "commit": commit, "per": syndromes_per_round}).encode()
    here = _Windows(json.loads(context))  # builds (and so checks) every window decoder now
    return DecoderFunction(name="sliding_window", python_init=_windows_init, context=context,
                           num_detectors=here.detectors, num_observables=here.observables, batch=here.batch)


# --- writing --------------------------------------------------------------------------------------------------------

def _split_components(dem: Any) -> Any:
    """``dem`` with each component of a decomposed error as an error of its own (matching's edges)."""
    import stim

    lines = []
    for inst in dem.flattened():
        if inst.type != "error":
            lines.append(str(inst))
            continue
        parts: list[list[str]] = [[]]
        for t in inst.targets_copy():
            if t.is_separator():
                parts.append([])
            else:
                parts[-1].append(f"D{t.val}" if t.is_relative_detector_id() else f"L{t.val}")
        lines += [f"error({inst.args_copy()[0]!r}) " + " ".join(part) for part in parts if part]
    return stim.DetectorErrorModel("\n".join(lines))


def _as_dem(dem_or_circuit: Any, graphlike: bool) -> Any:
    import stim

    if isinstance(dem_or_circuit, stim.Circuit):
        try:
            return dem_or_circuit.detector_error_model(decompose_errors=graphlike)
        except ValueError as exc:
            raise InvalidArgumentError(f"stim cannot decompose this circuit's DEM for matching: "
                                       f"{str(exc).splitlines()[0]}") from None
    if isinstance(dem_or_circuit, stim.DetectorErrorModel):
        return dem_or_circuit
    raise InvalidArgumentError(f"expected a stim.Circuit or stim.DetectorErrorModel, not {type(dem_or_circuit).__name__}")


def _export_args(decoder: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """CUDA-Q's type and ``decoder_custom_args`` (without priors) of Backline decoder ``decoder``."""
    if decoder not in ("lut", "pymatching", "bposd", "bp"):
        raise InvalidArgumentError(f"decoder {decoder!r} has no CUDA-Q type; export one of lut, pymatching, bposd, bp")
    p = plugins.get("decoder", decoder).check_params(params)
    if decoder == "lut":
        # max_table_bytes is a memory limit here, not part of what the table decodes
        return ("single_error_lut", {}) if p["depth"] == 1 else ("multi_error_lut", {"lut_error_depth": p["depth"]})
    if decoder == "pymatching":
        if p["enable_correlations"]:
            raise InvalidArgumentError("pymatching: enable_correlations has no CUDA-Q counterpart; leave it false")
        return "pymatching", {"merge_strategy": "smallest_weight"}
    for k in ("error_rate", "channel_probs"):
        if p[k] is not None:
            raise InvalidArgumentError(f"{decoder}: {k} has no place in an export: the priors come from the DEM")
    if p["platform"] != "cpu":
        raise InvalidArgumentError(f"{decoder}: platform={p['platform']!r} has no CUDA-Q counterpart; leave it cpu")
    if p["max_iter"] == 0:
        raise InvalidArgumentError(f"{decoder}: max_iter=0 (n iterations) has no CUDA-Q counterpart; give a number")
    bp_names = {v: k for k, v in _BP_METHODS.items()}
    args: dict[str, Any] = {"use_osd": False, "max_iterations": p["max_iter"],
                            "bp_method": bp_names[p["bp_method"]], "scale_factor": float(p["ms_scaling_factor"])}
    if decoder == "bposd" and p["osd_method"] != "none":
        osd_names = {v: k for k, v in _OSD_METHODS.items()}
        args.update(use_osd=True, osd_method=osd_names[p["osd_method"]], osd_order=p["osd_order"])
    return "nv-qldpc-decoder", args


def _sparse_text(m: np.ndarray) -> str:
    flat = [x for row in m for x in (*np.flatnonzero(row).tolist(), -1)]
    return "[ " + ", ".join(map(str, flat)) + " ]" if flat else "[  ]"


def _value_text(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v) if math.isfinite(v) else str(v)
    if isinstance(v, list):
        return "[ " + ", ".join(_value_text(x) for x in v) + " ]"
    return str(v)


def export_config(dem_or_circuit: Any, decoder: str, *, params: dict[str, Any] | None = None, decoder_id: int = 0,
                  D: Any = None) -> str:
    """A ``multi_decoder_config`` YAML of one decoder: Backline's ``decoder`` with ``params`` (values or their
    text, read by the decoder's schema) as CUDA-Q's type.

    H, O and error_rate_vec are the core's ``dem_matrices`` of the DEM (for ``pymatching``: of the DEM's
    decomposition, each component an edge); ``D`` (detectors x measurements) defaults to the identity."""
    kind, args = _export_args(decoder, dict(params or {}))
    dem = _as_dem(dem_or_circuit, graphlike=decoder == "pymatching")
    m = dem_matrices(_split_components(dem) if decoder == "pymatching" else dem)
    if decoder == "pymatching" and (m.h.sum(axis=0) > 2).any():
        raise InvalidArgumentError("pymatching: the DEM has an error component with more than two detectors; "
                                   "make it with decompose_errors=True")
    dmat = np.eye(m.num_detectors, dtype=np.uint8) if D is None else np.asarray(D)
    if dmat.ndim != 2 or dmat.shape[0] != m.num_detectors or (dmat.size and not np.isin(dmat, (0, 1)).all()):
        raise InvalidArgumentError(f"D must be a 0/1 matrix of {m.num_detectors} rows (detectors x measurements), "
                                   f"got shape {dmat.shape}")
    _int(decoder_id, "export", "decoder_id")
    if kind != "single_error_lut" and kind != "multi_error_lut":  # CUDA-Q's LUTs take no priors
        args = {"error_rate_vec": [float(x) for x in m.priors], **args}
    lines = ["---", "decoders:"]
    fields = [("id", decoder_id), ("type", kind), ("block_size", m.num_columns), ("syndrome_size", m.num_detectors),
              ("H_sparse", _sparse_text(m.h)), ("O_sparse", _sparse_text(m.o)), ("D_sparse", _sparse_text(dmat))]
    for i, (k, v) in enumerate(fields):
        lines.append(f"{'  - ' if i == 0 else '    '}{k + ':':<16} {v}")
    if args:
        lines.append("    decoder_custom_args:")
        lines += [f"      {k + ':':<16} {_value_text(v)}" for k, v in args.items()]
    lines.append("...")
    return "\n".join(lines) + "\n"
