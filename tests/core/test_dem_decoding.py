"""The core's part of decoding a detector error model: the one DEM -> (H, O, priors)
conversion, the reply's layout, declared parameters, DecoderFunction and a Python function
that another process rebuilds from its context. Runs with only backline-core installed
(its test extra brings stim and sinter)."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
import stim

from backline_core import (BoundFunction, CoprocessorFunction, Decoder, DecoderFunction, InvalidArgumentError,
                           PlacementError, PluginError, check_matrices, dem_matrices, hookimpl, plugins)
from backline_core.sdk import REPLIES, encode_reply_map, object_schema, reply_bits, reply_matrix


def surface_dem(distance: int = 3, p: float = 0.01) -> stim.DetectorErrorModel:
    c = stim.Circuit.generated("surface_code:rotated_memory_z", distance=distance, rounds=distance,
                               after_clifford_depolarization=p, before_measure_flip_probability=p)
    return c.detector_error_model(decompose_errors=True)


# -- the conversion ---------------------------------------------------------------------------

def test_columns_merge_by_detector_set_in_first_appearance_order() -> None:
    dem = stim.DetectorErrorModel("""
        error(0.1) D1
        error(0.2) D0 D2 L0
        error(0.3) D1
        error(0) D3
        error(0.05) D0 ^ D2 L0
        detector D3
    """)
    m = dem_matrices(dem)
    assert m.h.tolist() == [[0, 1], [1, 0], [0, 1], [0, 0]]
    assert m.o.tolist() == [[0, 1]]
    # merged: p1 (1 - p2) + p2 (1 - p1); the components of "D0 ^ D2" XOR to {D0, D2}
    assert m.priors.tolist() == pytest.approx([0.1 * 0.7 + 0.3 * 0.9, 0.2 * 0.95 + 0.05 * 0.8])
    assert (m.num_detectors, m.num_observables, m.num_columns) == (4, 1, 2)


def test_a_merged_column_keeps_the_observables_of_its_most_probable_mechanism() -> None:
    m = dem_matrices(stim.DetectorErrorModel("error(0.1) D0 L0\nerror(0.2) D0\nerror(0.01) D0 L0"))
    assert m.o.tolist() == [[0]] and m.observable_conflicts == 2


def test_a_surface_code_dem_gives_every_mechanism_a_column() -> None:
    dem = surface_dem()
    m = dem_matrices(dem)
    assert m.h.shape == (dem.num_detectors, m.num_columns) and m.o.shape[0] == dem.num_observables
    assert len({tuple(col) for col in m.h.T}) == m.num_columns  # no two columns share a detector set
    assert ((m.priors > 0) & (m.priors < 1)).all()


@pytest.mark.parametrize("text, says", [
    ("error(0.1) L0", "no detectors"),
    ("error(0.1) D0\nerror(0.1) D1", "no observables"),
    ("error(0) D0 L0", "no error mechanism of nonzero probability"),
])
def test_a_dem_a_decoder_cannot_use_is_one_clear_error(text: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        dem_matrices(stim.DetectorErrorModel(text))


def test_explicit_matrices_are_checked() -> None:
    m = check_matrices([[1, 1, 0], [0, 1, 1]], [[1, 0, 0]], [0.1, 0.2, 0.3])
    assert m.priors.tolist() == [0.1, 0.2, 0.3]
    assert check_matrices([[1, 1]], [[1, 0]]).priors.tolist() == [0.01, 0.01]
    for args, says in [(([[1, 2]], [[1, 0]]), "only 0 and 1"), (([[1, 1]], [[1, 0, 0]]), "columns"),
                       (([[1, 1]], [[1, 0]], [0.5]), "2 columns"), (([[1, 1]], [[1, 0]], [0.5, 1.0]), r"\(0, 1\)"),
                       (([[1, 1]], np.zeros((0, 2))), "no observable"), (([1, 1], [[1, 0]]), "2-D")]:
        with pytest.raises(InvalidArgumentError, match=says):
            check_matrices(*args)


# -- the reply's layout -------------------------------------------------------------------------

def test_reply_matrix_stacks_observables_then_the_committed_detectors() -> None:
    m = check_matrices([[1, 1, 0], [0, 1, 1]], [[1, 0, 0]])
    assert reply_matrix(m).tolist() == [[1, 0, 0]]
    assert reply_matrix(m, "observables+detectors").tolist() == [[1, 0, 0], [1, 1, 0], [0, 1, 1]]
    assert reply_matrix(m, "observables+detectors", commit=[True, False, True]).tolist() == \
        [[1, 0, 0], [1, 0, 0], [0, 0, 1]]
    assert reply_bits(2, 1, "observables") == 1 and reply_bits(2, 1, "observables+detectors") == 3
    with pytest.raises(InvalidArgumentError, match="choose one of"):
        reply_matrix(m, "corrections")
    with pytest.raises(InvalidArgumentError, match="commit has 2 entries"):
        reply_matrix(m, commit=[True, False])
    assert REPLIES == ("observables", "observables+detectors")


def test_the_reply_map_blob_is_r_in_compressed_column_form() -> None:
    r = np.array([[1, 0, 1], [0, 0, 1]], dtype=np.uint8)
    blob = encode_reply_map(r)
    bits, columns, nnz = struct.unpack_from("<3I", blob)
    col_ptr = struct.unpack_from(f"<{columns + 1}I", blob, 12)
    rows = struct.unpack_from(f"<{nnz}I", blob, 12 + 4 * (columns + 1))
    assert (bits, columns, nnz, col_ptr, rows) == (2, 3, 3, (0, 1, 1, 3), (0, 0, 1))
    assert len(blob) == 12 + 4 * (columns + 1) + 4 * nnz


# -- declared parameters ------------------------------------------------------------------------

SCHEMA = object_schema({
    "depth": {"type": "integer", "default": 1, "minimum": 1, "maximum": 4, "description": "largest weight"},
    "rate": {"type": "number", "default": 0.1, "exclusiveMinimum": 0, "exclusiveMaximum": 1, "description": "p"},
    "method": {"type": "string", "default": "a", "enum": ["a", "b"], "description": "which"},
    "fast": {"type": "boolean", "default": False, "description": "go fast"},
})


def test_params_get_defaults_and_text_is_read_by_type() -> None:
    record = Decoder(name="toy", summary="t", build=lambda: None, schema=SCHEMA)
    assert record.check_params({}) == {"depth": 1, "rate": 0.1, "method": "a", "fast": False}
    assert record.check_params({"depth": "3", "rate": "0.5", "method": "b", "fast": "true"}) == \
        {"depth": 3, "rate": 0.5, "method": "b", "fast": True}


@pytest.mark.parametrize("params, says", [
    ({"dpeth": 2}, "unknown parameter 'dpeth'; its parameters: depth, fast, method, rate"),
    ({"depth": 9}, r"parameter depth=9: 9 is greater than the maximum of 4 \(largest weight\)"),
    ({"depth": "x"}, "parameter depth='x': 'x' is not of type 'integer'"),
    ({"depth": 1.5}, "is not of type 'integer'"),
    ({"rate": 1}, "parameter rate=1: 1 is greater than or equal to the maximum of 1"),
    ({"method": "c"}, "parameter method='c': 'c' is not one of"),
])
def test_bad_params_are_one_line_saying_which_and_why(params: dict[str, Any], says: str) -> None:
    record = Decoder(name="toy", summary="t", build=lambda: None, schema=SCHEMA)
    with pytest.raises(InvalidArgumentError, match=says) as info:
        record.check_params(params)
    assert "\n" not in str(info.value) and str(info.value).startswith("decoder 'toy': ")


def test_a_record_schema_without_defaults_is_refused() -> None:
    with pytest.raises(ValueError, match="declare no default"):
        Decoder(name="toy", summary="t", build=lambda: None,
                schema={"type": "object", "properties": {"x": {"type": "integer"}}})
    with pytest.raises(ValueError, match="JSON Schema object"):
        Decoder(name="toy", summary="t", build=lambda: None, schema={"type": "array"})
    with pytest.raises(ValueError, match="replies"):
        Decoder(name="toy", summary="t", build=lambda: None, replies=("corrections",))


# -- a decoder built from a DEM, in Python, rebuilt in another process from its context ----------

def _first_match(h: np.ndarray, o: np.ndarray, r: np.ndarray, syndromes: np.ndarray) -> np.ndarray:
    """Replies of the toy decoder: the first single column whose syndrome matches, else nothing."""
    cols = {tuple(col): j for j, col in reversed(list(enumerate(h.T)))}
    e = np.zeros((len(syndromes), h.shape[1]), dtype=np.uint8)
    for i, s in enumerate(syndromes):
        j = cols.get(tuple(s))
        if j is not None:
            e[i, j] = 1
    return (e.astype(np.int64) @ r.T.astype(np.int64) % 2).astype(np.uint8)


def toy_round(context: bytes):  # noqa: ANN201 - the python_init of the toy decoder
    spec = json.loads(context)
    h, o, r = (np.array(spec[k], dtype=np.uint8) for k in ("h", "o", "r"))

    def fn(decoder_id: int, payload: bytes) -> bytes:
        s = np.unpackbits(np.frombuffer(payload, np.uint8), count=h.shape[0], bitorder="little")
        return np.packbits(_first_match(h, o, r, s[None, :])[0], bitorder="little").tobytes()
    return fn


def _toy_from_matrices(m: Any, *, reply: str, weight: int) -> DecoderFunction:
    r = reply_matrix(m, reply)
    context = json.dumps({"h": m.h.tolist(), "o": m.o.tolist(), "r": r.tolist()}).encode()

    def batch(packed: np.ndarray) -> np.ndarray:
        s = np.unpackbits(packed, axis=1, count=m.num_detectors, bitorder="little")
        return np.packbits(_first_match(m.h, m.o, r, s), axis=1, bitorder="little")
    return DecoderFunction(name="toy", python_init=toy_round, context=context, num_detectors=m.num_detectors,
                           num_observables=m.num_observables, reply=reply, batch=batch)


class ToyDecoderPlugin:
    @hookimpl
    def backline_decoders(self) -> list[Decoder]:
        schema = object_schema({"weight": {"type": "integer", "default": 1, "minimum": 1, "maximum": 1,
                                           "description": "largest error weight"}})
        return [Decoder(name="toy-dem", summary="first single column", build=lambda: None, schema=schema,
                        from_matrices=_toy_from_matrices, from_dem=lambda dem, **kw: _toy_from_matrices(
                            dem_matrices(dem), **kw), replies=REPLIES)]


@pytest.fixture
def toy() -> Any:
    plugin = ToyDecoderPlugin()
    plugins.register(plugin)
    yield plugins.get("decoder", "toy-dem")
    plugins.unregister(plugin)


def test_a_decoder_built_from_a_dem_decodes_batches_and_rounds_alike(toy: Decoder) -> None:
    dem = surface_dem()
    fn = toy.build_from_dem(dem)
    assert (fn.num_detectors, fn.num_observables, fn.reply_bits) == (dem.num_detectors, 1, 1)
    dets, _ = dem.compile_sampler(seed=5).sample(200)[:2]
    flips = fn.decode_batch(dets)
    assert flips.shape == (200, 1) and flips.dtype == np.uint8
    packed = np.packbits(dets, axis=1, bitorder="little")
    assert (fn.decode_batch_packed(packed) == np.packbits(flips, axis=1, bitorder="little")).all()
    with BoundFunction(fn) as bound:
        rounds = [bound(0, row.tobytes()) for row in packed]
    assert rounds == [bytes(r) for r in np.packbits(flips, axis=1, bitorder="little")]


def test_the_detectors_reply_follows_the_observables(toy: Decoder) -> None:
    m = check_matrices([[1, 0, 1], [0, 1, 1]], [[0, 0, 1]])
    fn = toy.build_from_matrices(m.h, m.o, reply="observables+detectors")
    assert fn.reply_bits == 3
    # syndrome (1, 1) is column 2's: observable flipped, both detectors flipped
    assert fn.decode_batch(np.array([[1, 1], [1, 0], [0, 0]])).tolist() == [[1, 1, 1], [0, 1, 0], [0, 0, 0]]


def test_a_python_init_function_is_rebuilt_from_its_description(toy: Decoder) -> None:
    fn = toy.build_from_dem(surface_dem())
    described = json.loads(json.dumps(fn.to_dict()))
    assert described["python_init"].endswith(":toy_round") and "context" in described
    again = CoprocessorFunction.from_dict(described)
    payload = bytes((fn.num_detectors + 7) // 8)
    with BoundFunction(fn) as a, BoundFunction(again) as b:
        assert a(0, payload) == b(0, payload) == b"\0"


def test_bad_input_to_a_built_decoder_is_one_clear_error(toy: Decoder) -> None:
    dem = surface_dem()
    fn = toy.build_from_dem(dem)
    with pytest.raises(InvalidArgumentError, match=rf"shape \(shots, {dem.num_detectors}\)"):
        fn.decode_batch(np.zeros((3, dem.num_detectors + 1), dtype=np.uint8))
    with pytest.raises(InvalidArgumentError, match="only 0 and 1"):
        fn.decode_batch(np.full((3, dem.num_detectors), 2))
    with pytest.raises(InvalidArgumentError, match="bit-packed"):
        fn.decode_batch_packed(np.zeros((3, 1), dtype=np.uint8))
    with pytest.raises(InvalidArgumentError, match="unknown parameter 'depth'"):
        toy.build_from_dem(dem, depth=2)
    with pytest.raises(InvalidArgumentError, match="no observables"):
        toy.build_from_dem(stim.DetectorErrorModel("error(0.1) D0"))
    with pytest.raises(InvalidArgumentError, match="stim.DetectorErrorModel"):
        toy.build_from_dem("error(0.1) D0 L0")
    with pytest.raises(InvalidArgumentError, match="replies with 'observables' or"):
        toy.build_from_dem(dem, reply="corrections")


def test_padding_bits_past_the_last_detector_are_not_decoded(toy: Decoder) -> None:
    m = check_matrices([[1, 0], [0, 1], [1, 1]], [[1, 1]])
    fn = toy.build_from_matrices(m.h, m.o)
    clean, dirty = np.array([[0b001]], np.uint8), np.array([[0b11111001]], np.uint8)
    assert (fn.decode_batch_packed(clean) == fn.decode_batch_packed(dirty)).all()


def test_decoders_that_build_from_no_dem_say_which_do(toy: Decoder) -> None:
    with pytest.raises(InvalidArgumentError, match="does not build from a detector error model; those that do: "
                                                   ".*toy-dem"):
        plugins.get("decoder", "steane").build_from_dem(surface_dem())


def test_a_plugin_building_something_else_is_its_error() -> None:
    record = Decoder(name="bad", summary="t", build=lambda: None, from_dem=lambda dem, **kw: "not a function")
    with pytest.raises(PluginError, match="built str, not a DecoderFunction"):
        record.build_from_dem(surface_dem())


def test_decoder_function_checks_its_own_fields() -> None:
    with pytest.raises(PlacementError, match="num_detectors=0"):
        DecoderFunction(name="x", python=lambda d, p: p, num_detectors=0, num_observables=1)
    with pytest.raises(PlacementError, match="reply_bits=5 but its 'observables' reply has 1 bits"):
        DecoderFunction(name="x", python=lambda d, p: p, num_detectors=3, num_observables=1, reply_bits=5)
    with pytest.raises(PlacementError, match="python= .* or python_init="):
        CoprocessorFunction(name="x", python=lambda d, p: p, python_init=toy_round)
    with pytest.raises(PlacementError, match="context= goes with python_init="):
        CoprocessorFunction(name="x", python=lambda d, p: p, context=b"1")


def test_plugins_json_shows_a_decoders_schema(toy: Decoder) -> None:
    rows = {(r.kind, r.name): r for r in plugins.listing()}
    details = rows[("decoder", "toy-dem")].details
    assert details["schema"]["properties"]["weight"]["maximum"] == 1
    assert details["from_dem"] and details["from_matrices"] and details["replies"] == list(REPLIES)
    json.dumps(details)


# -- dem_reply.h: the C half of the reply, as decoder plugins compile it in ----------------------

DEM_REPLY_C = r"""
#include <stdlib.h>
#include <backline/sdk/dem_reply.h>
int reply(const uint8_t *blob, size_t len, const uint8_t *e, uint8_t *out, size_t *consumed) {
    uint32_t *copy = malloc(len + 4);  /* the map wants 4-byte alignment: a plugin copies its context */
    memcpy(copy, blob, len);
    bl_reply_map map;
    int rc = bl_reply_map_parse((const uint8_t *)copy, len, &map, consumed);
    if (rc == 0) bl_reply_from_bytes(&map, e, out);
    free(copy);
    return rc == 0 ? (int)bl_reply_bytes(&map) : -1;
}
"""


@pytest.fixture(scope="module")
def dem_reply(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import cffi

    from .conftest import compile_shared

    d = tmp_path_factory.mktemp("dem_reply")
    (d / "reply.c").write_text(DEM_REPLY_C)
    ffi = cffi.FFI()
    ffi.cdef("int reply(const uint8_t *blob, size_t len, const uint8_t *e, uint8_t *out, size_t *consumed);")
    return ffi, ffi.dlopen(str(compile_shared(d / "reply.c", d / "libreply.so")))


def _c_reply(dem_reply: Any, blob: bytes, e: np.ndarray) -> tuple[int, bytes, int]:
    ffi, lib = dem_reply
    out, consumed = ffi.new("uint8_t[]", 64), ffi.new("size_t *")
    n = lib.reply(blob, len(blob), ffi.from_buffer(np.ascontiguousarray(e, dtype=np.uint8)), out, consumed)
    return n, bytes(ffi.buffer(out, max(n, 0))), consumed[0]


def test_the_c_reply_equals_r_e_mod_2(dem_reply: Any) -> None:
    rng = np.random.default_rng(1)
    m = check_matrices(rng.integers(0, 2, (13, 40)), rng.integers(0, 2, (3, 40)))
    for reply in REPLIES:
        r = reply_matrix(m, reply, commit=rng.integers(0, 2, 40).astype(bool))
        blob = encode_reply_map(r)
        for _ in range(20):
            e = rng.integers(0, 2, 40).astype(np.uint8)
            n, got, consumed = _c_reply(dem_reply, blob, e)
            want = np.packbits((r.astype(int) @ e) % 2, bitorder="little").tobytes()
            assert (n, got, consumed) == (len(want), want, len(blob))


def test_a_malformed_reply_map_is_refused(dem_reply: Any) -> None:
    good = encode_reply_map(np.array([[1, 0, 1], [0, 1, 1]], np.uint8))
    bits, columns, nnz = struct.unpack_from("<3I", good)
    e = np.ones(3, np.uint8)
    assert _c_reply(dem_reply, good, e)[0] == 1
    bad_row = bytearray(good)
    struct.pack_into("<I", bad_row, len(good) - 4, 7)  # a reply bit past the last
    bad_ptr = bytearray(good)
    struct.pack_into("<I", bad_ptr, 12 + 4 * columns, nnz + 1)  # col_ptr's end is not nnz
    for blob in (good[:-1], good[:11], bytes(bad_row), bytes(bad_ptr), struct.pack("<3I", 0, 3, 0) + good[12:]):
        assert _c_reply(dem_reply, blob, e)[0] == -1
