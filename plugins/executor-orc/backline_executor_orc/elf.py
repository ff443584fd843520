"""A small ELF reader: what the executor checks before it links a shipped object.

Reads the header (class, byte order, type, machine) and, for 64-bit files, the symbol
table: the undefined GLOBAL/WEAK symbols and the defined global ones. Every offset is
bounds-checked, so malformed input is a ValueError, never a crash or a hang.

>>> from backline_executor_orc import elf
>>> elf.read(b"\\x7fELF")
Traceback (most recent call last):
...
ValueError: truncated ELF file: 4 bytes, shorter than the ELF header
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

ET_REL = 1
SHT_SYMTAB = 2
SHN_UNDEF = 0
SHN_XINDEX = 0xFFFF
STB_GLOBAL, STB_WEAK = 1, 2
EM_X86_64, EM_AARCH64 = 62, 183

#: e_machine -> a name for messages (the common ones; others print as "machine N").
MACHINE_NAMES = {
    2: "sparc", 3: "x86 (32-bit)", 8: "mips", 20: "ppc", 21: "ppc64", 22: "s390", 40: "arm (32-bit)",
    43: "sparcv9", 50: "ia64", EM_X86_64: "x86-64", EM_AARCH64: "aarch64", 243: "riscv", 258: "loongarch",
}
TYPE_NAMES = {0: "ET_NONE", 1: "ET_REL", 2: "ET_EXEC (an executable)", 3: "ET_DYN (a shared library)", 4: "ET_CORE"}
_HEADER_BYTES = 64
_SECTION_BYTES = 64
_SYMBOL_BYTES = 24
_MAX_SYMBOLS = 1 << 22  # ~100 MB of symbol table: far beyond any object the executor accepts


def machine_name(machine: int) -> str:
    """``"aarch64"`` for 183; ``"machine 9999"`` for a number not in :data:`MACHINE_NAMES`."""
    return MACHINE_NAMES.get(machine, f"machine {machine}")


@dataclass(frozen=True)
class ElfInfo:
    """What :func:`read` found. ``undefined``/``defined`` are empty unless the symbols were read."""

    elf_class: int  # 1 = 32-bit, 2 = 64-bit
    little_endian: bool
    type: int
    machine: int
    undefined: tuple[str, ...] = ()
    weak_undefined: tuple[str, ...] = ()
    defined: frozenset[str] = field(default_factory=frozenset)

    @property
    def machine_name(self) -> str:
        return machine_name(self.machine)


def read_header(data: bytes) -> ElfInfo:
    """Class, byte order, type and machine (read for 32- and 64-bit files alike)."""
    if data[:4] != b"\x7fELF":
        raise ValueError("not an ELF file: it does not start with the ELF magic \\x7fELF")
    if len(data) < 20:
        raise ValueError(f"truncated ELF file: {len(data)} bytes, shorter than the ELF header")
    elf_class, data_enc = data[4], data[5]
    if elf_class not in (1, 2):
        raise ValueError(f"bad ELF class {elf_class} (expected 1 for 32-bit or 2 for 64-bit)")
    if data_enc not in (1, 2):
        raise ValueError(f"bad ELF byte order {data_enc} (expected 1 for little- or 2 for big-endian)")
    end = "<" if data_enc == 1 else ">"
    e_type, e_machine = struct.unpack_from(end + "HH", data, 16)
    return ElfInfo(elf_class=elf_class, little_endian=data_enc == 1, type=e_type, machine=e_machine)


def read(data: bytes) -> ElfInfo:
    """Header and symbols of an ELF64 file; ValueError (saying what is wrong) on malformed input."""
    data = bytes(data)
    head = read_header(data)
    if len(data) < _HEADER_BYTES:
        raise ValueError(f"truncated ELF file: {len(data)} bytes, shorter than the {_HEADER_BYTES}-byte ELF64 header")
    if head.elf_class != 2:
        raise ValueError("a 32-bit ELF file; only ELF64 objects are read")
    end = "<" if head.little_endian else ">"
    (e_shoff,) = struct.unpack_from(end + "Q", data, 0x28)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from(end + "HHH", data, 0x3A)
    if e_shoff == 0:
        return head  # no section table, so no symbols
    if e_shentsize != _SECTION_BYTES:
        raise ValueError(f"bad ELF64 section header size {e_shentsize} (expected {_SECTION_BYTES})")
    _check_range(data, e_shoff, _SECTION_BYTES, "the section header table")
    if e_shnum == 0:  # extended numbering: the count is section 0's sh_size
        e_shnum = _section(data, end, e_shoff, 0)[3]
    _check_range(data, e_shoff, e_shnum * _SECTION_BYTES, f"the section header table ({e_shnum} sections)")

    undefined: list[str] = []
    weak_undefined: list[str] = []
    defined: set[str] = set()
    for index in range(e_shnum):
        sh_type, sh_offset, sh_size, sh_link, sh_entsize = _section(data, end, e_shoff, index)[1:6]
        if sh_type != SHT_SYMTAB:
            continue
        if sh_entsize != _SYMBOL_BYTES:
            raise ValueError(f"bad symbol table entry size {sh_entsize} in section {index} (expected {_SYMBOL_BYTES})")
        _check_range(data, sh_offset, sh_size, f"the symbol table (section {index})")
        if not 0 < sh_link < e_shnum:
            raise ValueError(f"the symbol table (section {index}) links to string table {sh_link}, not a section")
        str_off, str_size = _section(data, end, e_shoff, sh_link)[2:4]
        _check_range(data, str_off, str_size, f"the string table (section {sh_link})")
        strtab = data[str_off : str_off + str_size]
        count = sh_size // _SYMBOL_BYTES
        if count > _MAX_SYMBOLS:
            raise ValueError(f"the symbol table claims {count} symbols, more than {_MAX_SYMBOLS}")
        for k in range(1, count):  # symbol 0 is the null symbol
            st_name, st_info, _other, st_shndx = struct.unpack_from(end + "IBBH", data, sh_offset + k * _SYMBOL_BYTES)
            binding = st_info >> 4
            if binding not in (STB_GLOBAL, STB_WEAK) or st_name == 0:
                continue
            name = _string(strtab, st_name, sh_link)
            if st_shndx == SHN_UNDEF:
                (undefined if binding == STB_GLOBAL else weak_undefined).append(name)
            else:
                defined.add(name)
    return ElfInfo(
        elf_class=head.elf_class, little_endian=head.little_endian, type=head.type, machine=head.machine,
        undefined=tuple(dict.fromkeys(undefined)), weak_undefined=tuple(dict.fromkeys(weak_undefined)),
        defined=frozenset(defined),
    )


def _check_range(data: bytes, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > len(data):
        raise ValueError(f"truncated or corrupt ELF file: {what} lies outside the file "
                         f"(bytes {offset}..{offset + size} of {len(data)})")


def _section(data: bytes, end: str, shoff: int, index: int) -> tuple[int, int, int, int, int, int]:
    """(sh_name, sh_type, sh_offset, sh_size, sh_link, sh_entsize) of section ``index``."""
    base = shoff + index * _SECTION_BYTES
    _check_range(data, base, _SECTION_BYTES, f"section header {index}")
    sh_name, sh_type, _flags, _addr, sh_offset, sh_size, sh_link, _info, _align, sh_entsize = struct.unpack_from(
        end + "IIQQQQIIQQ", data, base
    )
    return sh_name, sh_type, sh_offset, sh_size, sh_link, sh_entsize


def _string(strtab: bytes, offset: int, section: int) -> str:
    if offset >= len(strtab):
        raise ValueError(f"a symbol name lies outside its string table (offset {offset} of {len(strtab)}, "
                         f"section {section})")
    stop = strtab.find(b"\0", offset)
    if stop < 0:
        raise ValueError(f"a symbol name in string table {section} is not NUL-terminated")
    return strtab[offset:stop].decode("utf-8", errors="replace")
