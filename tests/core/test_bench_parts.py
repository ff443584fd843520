"""The bench's parts that need no transport: the options derived from BenchConfig, the one
summary of a series, progress on a terminal and in a log, a decoder's payloads, and the
check of a transport's bench floor."""

from __future__ import annotations

import argparse
import dataclasses
import io

import numpy as np
import pytest

from backline_core._bench import config, payloads, runner
from backline_core._bench.config import BenchConfig
from backline_core._bench.progress import LOG_STEPS, Progress
from backline_core._bench.stats import PERCENTILES, summary
from backline_core._builtins import echo, steane, steane_bench_payloads
from backline_core._errors import BacklineError
from backline_core._hookspecs import Decoder
from backline_core._steane import STEANE_H


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    config.add_arguments(p)
    return p


# ---- the options are the fields -------------------------------------------------------------

def test_no_options_give_the_dataclass_defaults():
    assert config.from_args(parser().parse_args([])) == BenchConfig()


def test_every_field_has_an_option_that_sets_it():
    p = parser()
    dests = {a.dest for a in p._actions} - {"help"}
    assert dests == {f.name for f in dataclasses.fields(BenchConfig)}
    cfg = config.from_args(p.parse_args(["--rounds", "1e3", "--gap-span", "0x3ff", "--controller-cpu", "none",
                                         "--no-progress", "--decoder-param", "a=1", "--decoder-param", "b=2",
                                         "--transport-arg", "tls=shm", "--runs-in", "process"]))
    assert (cfg.rounds, cfg.gap_span, cfg.controller_cpu, cfg.progress) == (1000, 0x3FF, None, False)
    assert cfg.decoder_params == {"a": "1", "b": "2"} and cfg.transport_args == {"tls": "shm"}
    assert cfg.runs_in == "process"
    assert config.from_args(p.parse_args([])).decoder_params == {}  # a fresh dict each time, not a shared default


def test_a_malformed_key_value_option_names_itself():
    with pytest.raises(BacklineError, match="--decoder-param"):
        config.from_args(parser().parse_args(["--decoder-param", "novalue"]))


# ---- the one summary ------------------------------------------------------------------------

def test_summary_against_numpy():
    x = np.random.default_rng(5).exponential(1000.0, 10_001)
    s = summary(x, "ns")
    assert s["rounds"] == x.size
    assert s["mean_ns"] == pytest.approx(x.mean()) and s["std_ns"] == pytest.approx(x.std())
    assert (s["min_ns"], s["max_ns"], s["median_ns"]) == (x.min(), x.max(), np.median(x))
    for key, q in PERCENTILES:
        assert s[f"{key}_ns"] == pytest.approx(np.percentile(x, q))
    assert set(summary(x, "")) == {k.removesuffix("_ns") for k in s}
    assert summary(np.array([], dtype=np.uint64)) == {"rounds": 0}


def test_summary_of_unsigned_counts_is_exact_past_float32():
    s = summary(np.array([2**40, 2**40 + 2], dtype=np.uint64), "")
    assert s["mean"] == 2**40 + 1


# ---- progress -------------------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drive(stream: io.StringIO, total: int = 100_000, step: int = 500) -> str:
    p = Progress(stream, total)
    for done in range(step, total + 1, step):
        p.update(done)
    p.close()
    p.close()
    return stream.getvalue()


def test_progress_in_a_log_is_a_few_plain_lines():
    text = drive(io.StringIO())
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == LOG_STEPS and lines[-1].startswith("100,000/100,000 rounds")


def test_progress_on_a_terminal_redraws_one_line():
    text = drive(Terminal())
    assert text.count("\r") == 200 and text.endswith("\n") and text.count("\n") == 1
    assert "100.0%" in text.rsplit("\r", 1)[1]


def test_progress_notes_end_the_bar_and_nothing_without_a_stream():
    t = Terminal()
    p = Progress(t, 10)
    p.update(5)
    p.note("the pacer runs")
    p.close()
    assert t.getvalue().endswith("\nthe pacer runs\n")
    quiet = Progress(None, 10)
    quiet.update(10)
    quiet.note("x")
    quiet.close()  # nothing to write to, nothing raised


# ---- a decoder's payloads -------------------------------------------------------------------

def table(decoder: Decoder, fn, **cfg):
    c = BenchConfig(**{"coprocessor_fn": decoder.name, **cfg})
    return c, payloads.payload_table(c, decoder, fn, {})


def test_steane_payloads_are_every_syndrome_and_its_flip_from_the_matrix():
    record = Decoder(name="steane", summary="", build=steane, bench_payloads=steane_bench_payloads)
    _, t = table(record, steane(), payload_bytes=1)
    assert t.reply_bytes == 1 and len(t.requests) == 8
    h = np.array(STEANE_H, dtype=np.uint8)
    for s, fix in zip(t.requests, t.replies):
        flip = np.unpackbits(np.frombuffer(bytes([fix]), np.uint8), count=7, bitorder="little")
        syndrome = np.packbits((h @ flip) % 2, bitorder="little")[0]
        assert syndrome == s and flip.sum() == (s != 0)  # weight 1 for each nonzero syndrome


def test_a_decoders_request_size_must_be_the_payload_size():
    record = Decoder(name="steane", summary="", build=steane, bench_payloads=steane_bench_payloads)
    with pytest.raises(BacklineError, match="--coprocessor-fn steane takes 1-byte requests: use --payload-bytes 1"):
        table(record, steane(), payload_bytes=8)


def test_without_a_generator_the_replies_come_from_the_function():
    record = Decoder(name="echo", summary="", build=echo)
    _, t = table(record, echo(), payload_bytes=3)
    assert len(t.requests) == 3 * config.PAYLOAD_TABLE and t.requests == t.replies and t.reply_bytes == 3


@pytest.mark.parametrize("made, says", [
    (payloads.BenchPayloads([]), "at least one"),
    (payloads.BenchPayloads([b"a", b"bb"]), "sizes [1, 2]"),
    (payloads.BenchPayloads([b"a", b"b"], [b"x"]), "2 bench requests but 1 replies"),
    (payloads.BenchPayloads([b"a", b"b"], [b"x", b"yy"]), "several sizes"),
])
def test_a_generators_bad_payloads_are_refused(made, says):
    record = Decoder(name="odd", summary="", build=echo, bench_payloads=lambda fn, spec: made)
    with pytest.raises(BacklineError, match=says.replace("[", r"\[").replace("]", r"\]")):
        table(record, echo(), payload_bytes=1)


# ---- a transport's bench floor --------------------------------------------------------------

def test_a_floor_without_the_protocols_members_is_refused_naming_them():
    class Half:
        label = "half"

        def run(self, first, out):
            pass

    with pytest.raises(BacklineError, match=r"without pause, reference, reference_note, resume"):
        runner._checked_floor(BenchConfig(transport="x"), Half())
