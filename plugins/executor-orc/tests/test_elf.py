"""The ELF reader on objects llvmlite builds for several machines, and on broken input."""

from __future__ import annotations

import random

import llvmlite.binding as llvm
import pytest

from backline_executor_orc import elf

llvm.initialize_all_targets()
llvm.initialize_all_asmprinters()

IR = """
declare i32 @external_fn(i32)
declare extern_weak i32 @weak_fn()
@counter = global i64 0
@hidden_one = internal global i64 0
define i64 @add1(i64 %x) {
  %y = add i64 %x, 1
  ret i64 %y
}
define i32 @calls() {
  %a = call i32 @external_fn(i32 1)
  %p = icmp ne ptr @weak_fn, null
  br i1 %p, label %has, label %none
has:
  %b = call i32 @weak_fn()
  ret i32 %b
none:
  ret i32 %a
}
define internal i32 @local_helper() {
  ret i32 0
}
"""


def build(triple: str, text: str = IR) -> bytes:
    module = llvm.parse_assembly(text)
    module.triple = triple
    tm = llvm.Target.from_triple(triple).create_target_machine(reloc="pic", codemodel="default")
    return tm.emit_object(module)


@pytest.mark.parametrize("triple, machine", [
    ("x86_64-unknown-linux-gnu", elf.EM_X86_64),
    ("aarch64-unknown-linux-gnu", elf.EM_AARCH64),
    ("riscv64-unknown-linux-gnu", 243),
])
def test_objects(triple, machine):
    info = elf.read(build(triple))
    assert (info.elf_class, info.little_endian, info.type, info.machine) == (2, True, elf.ET_REL, machine)
    assert "external_fn" in info.undefined
    assert info.weak_undefined == ("weak_fn",)
    assert {"add1", "calls", "counter"} <= info.defined
    assert not {"hidden_one", "local_helper", "external_fn"} & info.defined


def test_machine_names():
    assert elf.read(build("aarch64-unknown-linux-gnu")).machine_name == "aarch64"
    assert elf.machine_name(62) == "x86-64"
    assert elf.machine_name(9999) == "machine 9999"


def test_big_endian_object():
    info = elf.read(build("powerpc64-unknown-linux-gnu"))
    assert not info.little_endian and info.machine == 21 and "add1" in info.defined


def test_32_bit_object():
    data = build("i386-unknown-linux-gnu")
    head = elf.read_header(data)
    assert (head.elf_class, head.machine) == (1, 3)
    with pytest.raises(ValueError, match="32-bit"):
        elf.read(data)


@pytest.mark.parametrize("data, match", [
    (b"", "not an ELF file"),
    (b"MZ\x90\x00" + b"\0" * 100, "not an ELF file"),
    (b"\x7fELF", "truncated"),
    (b"\x7fELF\x03\x01" + b"\0" * 60, "bad ELF class 3"),
    (b"\x7fELF\x02\x07" + b"\0" * 60, "bad ELF byte order 7"),
])
def test_not_elf(data, match):
    with pytest.raises(ValueError, match=match):
        elf.read(data)


def test_every_truncation_is_a_value_error():
    data = build("x86_64-unknown-linux-gnu")
    for n in range(len(data)):
        try:
            elf.read(data[:n])
        except ValueError:
            pass  # any other exception fails the test


def test_garbage_is_a_value_error_or_a_reading():
    """Random corruption of a real object: a reading or a ValueError, never another error."""
    data = build("x86_64-unknown-linux-gnu")
    rng = random.Random(1234)
    outcomes = {"read": 0, "refused": 0}
    for _ in range(2000):
        broken = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            broken[rng.randrange(len(broken))] = rng.randrange(256)
        if rng.random() < 0.3:  # aim at the header fields that carry offsets and counts
            broken[rng.randrange(0x28, 0x40)] = rng.randrange(256)
        try:
            elf.read(bytes(broken))
            outcomes["read"] += 1
        except ValueError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0


def test_huge_section_counts_do_not_hang():
    data = bytearray(build("x86_64-unknown-linux-gnu"))
    data[0x3C:0x3E] = (0xFFFF).to_bytes(2, "little")  # e_shnum
    with pytest.raises(ValueError, match="outside the file"):
        elf.read(bytes(data))
