"""A small ELF reader: what the executor checks before it links a shipped object.

Reads the header (class, byte order, type, machine) and, for 64-bit files, checks the
structure the linker trusts: the section table (every section inside the file, links and
infos naming real sections, entry sizes right), the string tables (NUL-terminated), every
symbol (its name in the string table, its section real, its value inside that section) and
every relocation (its symbol in the table, its type one the machine defines, its target
bytes inside the section it patches). It returns the undefined GLOBAL/WEAK symbols and the
defined global ones. Malformed input is a ValueError saying what is wrong, never a crash or
a hang: LLVM's linker aborts the process on some of what these checks refuse.

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
SHT_NULL, SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA = 0, 1, 2, 3, 4
SHT_NOBITS, SHT_REL, SHT_GROUP, SHT_SYMTAB_SHNDX = 8, 9, 17, 18
SHN_UNDEF = 0
SHN_LORESERVE, SHN_ABS, SHN_COMMON, SHN_XINDEX = 0xFF00, 0xFFF1, 0xFFF2, 0xFFFF
STB_LOCAL, STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE = 0, 1, 2, 10
STT_SECTION, STT_FILE = 3, 4
SHF_ALLOC, SHF_GROUP, SHF_COMPRESSED = 0x2, 0x200, 0x800
#: WRITE ALLOC EXECINSTR MERGE STRINGS INFO_LINK LINK_ORDER OS_NONCONFORMING GROUP TLS COMPRESSED,
#: GNU_RETAIN, x86-64's LARGE, EXCLUDE
_KNOWN_FLAGS = 0x1 | 0x2 | 0x4 | 0x10 | 0x20 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800 | 0x200000 \
    | 0x10000000 | 0x80000000
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
_RELA_BYTES, _REL_BYTES = 24, 16
_MAX_SYMBOLS = 1 << 22  # ~100 MB of symbol table: far beyond any object the executor accepts
_MAX_ALIGN = 1 << 16  # a section aligned beyond 64 KiB is corrupt (the linker would honour it)
_MAX_NOBITS = 1 << 28  # zero-filled sections (.bss) of 256 MiB in all: more is a corrupt size, not data

# The relocation types of a relocatable object the linker may meet, and the bytes each patches
# (0: none). Dynamic-only types (COPY, GLOB_DAT, JUMP_SLOT, RELATIVE, IRELATIVE) are not here.
_X86_64_RELOCATIONS = {
    0: 0, 1: 8, 2: 4, 3: 4, 4: 4, 9: 4, 10: 4, 11: 4, 12: 2, 13: 2, 14: 1, 15: 1, 16: 8, 17: 8, 18: 8, 19: 4,
    20: 4, 21: 4, 22: 4, 23: 4, 24: 8, 25: 8, 26: 4, 27: 8, 28: 8, 29: 8, 30: 8, 31: 8, 32: 4, 33: 8, 34: 4,
    35: 0, 41: 4, 42: 4,
}
_AARCH64_RELOCATIONS = {0: 0, **{t: 4 for t in range(257, 315)}, **{t: 4 for t in range(512, 574)},
                        257: 8, 259: 2, 260: 8, 262: 2, 307: 8}
RELOCATION_TYPES = {EM_X86_64: _X86_64_RELOCATIONS, EM_AARCH64: _AARCH64_RELOCATIONS}


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


@dataclass(frozen=True)
class _Section:
    index: int
    name: int
    type: int
    flags: int
    offset: int
    size: int
    link: int
    info: int
    align: int
    entsize: int

    def what(self) -> str:
        return f"section {self.index}"


def read(data: bytes) -> ElfInfo:
    """Header and symbols of an ELF64 file, its structure checked; ValueError (saying what is wrong) if malformed."""
    data = bytes(data)
    head = read_header(data)
    if len(data) < _HEADER_BYTES:
        raise ValueError(f"truncated ELF file: {len(data)} bytes, shorter than the {_HEADER_BYTES}-byte ELF64 header")
    if head.elf_class != 2:
        raise ValueError("a 32-bit ELF file; only ELF64 objects are read")
    try:
        return _Reader(data, head).read()
    except (struct.error, IndexError, OverflowError) as exc:  # a check missed: still a refusal, not a crash
        raise ValueError(f"corrupt ELF file: {exc}") from None


class _Reader:
    def __init__(self, data: bytes, head: ElfInfo) -> None:
        self.data, self.head = data, head
        self.end = "<" if head.little_endian else ">"
        self.sections: list[_Section] = []

    def u(self, fmt: str, offset: int) -> tuple:
        return struct.unpack_from(self.end + fmt, self.data, offset)

    def read(self) -> ElfInfo:
        data, head = self.data, self.head
        if data[6] != 1:
            raise ValueError(f"bad ELF identification version {data[6]} (expected 1)")
        (e_version,) = self.u("I", 20)
        if e_version != 1:
            raise ValueError(f"bad ELF version {e_version} (expected 1)")
        e_phoff, e_shoff, _flags, e_ehsize, _phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx = self.u(
            "QQIHHHHHH", 0x20)
        if e_ehsize != _HEADER_BYTES:
            raise ValueError(f"bad ELF64 header size {e_ehsize} (expected {_HEADER_BYTES})")
        if head.type == ET_REL and (e_phnum or e_phoff):
            raise ValueError(f"a relocatable object with a program header table ({e_phnum} entries): corrupt")
        if e_shoff == 0:
            if e_shnum or e_shstrndx:
                raise ValueError("the ELF header counts sections but gives no section header table")
            return head  # no section table, so no symbols
        if e_shentsize != _SECTION_BYTES:
            raise ValueError(f"bad ELF64 section header size {e_shentsize} (expected {_SECTION_BYTES})")
        _check_range(data, e_shoff, _SECTION_BYTES, "the section header table")
        null = self.section(e_shoff, 0)
        if e_shnum == 0:  # extended numbering: the count is section 0's sh_size
            e_shnum = null.size
        if e_shstrndx == SHN_XINDEX:
            e_shstrndx = null.link
        _check_range(data, e_shoff, e_shnum * _SECTION_BYTES, f"the section header table ({e_shnum} sections)")
        if (null.name or null.type != SHT_NULL or null.flags or null.offset or null.info or null.align
                or null.entsize or (null.size and e_shnum != null.size) or (null.link and e_shstrndx != null.link)):
            raise ValueError("section 0 is not the null section")
        self.sections = [null] + [self.section(e_shoff, i) for i in range(1, e_shnum)]
        shstrtab = None
        if e_shstrndx != SHN_UNDEF:
            if e_shstrndx >= e_shnum:
                raise ValueError(f"the section name table is section {e_shstrndx}, of {e_shnum}")
            shstrtab = self.strtab(e_shstrndx, "the section name table")
        nobits = 0
        grouped = self.grouped()
        for s in self.sections[1:]:
            unknown = s.flags & ~_KNOWN_FLAGS
            if unknown:
                raise ValueError(f"{s.what()} has unknown flags 0x{unknown:x}")
            if s.flags & SHF_COMPRESSED and s.flags & SHF_ALLOC:
                raise ValueError(f"{s.what()} is compressed and loaded: the linker cannot map it (build without "
                                 "compressed sections)")
            if s.flags & SHF_GROUP and s.index not in grouped:
                raise ValueError(f"{s.what()} is marked as a group member, and no section group holds it")
            if s.align > _MAX_ALIGN or s.align & (s.align - 1):
                raise ValueError(f"{s.what()} has alignment {s.align} (a power of two up to {_MAX_ALIGN} expected)")
            if s.type == SHT_NOBITS:
                nobits += s.size
            else:
                _check_range(data, s.offset, s.size, s.what())
            if shstrtab is not None:
                _string(shstrtab, s.name, f"the name of {s.what()}")
            if s.entsize and s.type in (SHT_SYMTAB, SHT_RELA, SHT_REL, SHT_GROUP, SHT_SYMTAB_SHNDX) \
                    and s.size % s.entsize:
                raise ValueError(f"{s.what()} is {s.size} bytes, not a whole number of {s.entsize}-byte entries")
        if nobits > _MAX_NOBITS:
            raise ValueError(f"zero-filled sections of {nobits} bytes in all, over the {_MAX_NOBITS} accepted")
        tables = [s for s in self.sections if s.type == SHT_SYMTAB]
        if len(tables) > 1:
            raise ValueError(f"{len(tables)} symbol tables (sections {', '.join(str(s.index) for s in tables)}); "
                             "an object has at most one")
        if not tables:
            for s in self.sections:
                if s.type in (SHT_RELA, SHT_REL, SHT_GROUP):
                    raise ValueError(f"{s.what()} needs a symbol table, and there is none")
            return head
        symtab = tables[0]
        names, symbols = self.symbols(symtab)
        for s in self.sections:
            if s.type in (SHT_RELA, SHT_REL):
                self.relocations(s, symtab, len(symbols))
            elif s.type == SHT_GROUP:
                self.group(s, symtab, len(symbols))
        undefined: list[str] = []
        weak_undefined: list[str] = []
        defined: set[str] = set()
        for name, binding, shndx in symbols[1:]:
            if binding not in (STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE) or not name:
                continue
            if shndx == SHN_UNDEF:
                (undefined if binding == STB_GLOBAL else weak_undefined).append(name)
            else:
                defined.add(name)
        del names
        return ElfInfo(
            elf_class=head.elf_class, little_endian=head.little_endian, type=head.type, machine=head.machine,
            undefined=tuple(dict.fromkeys(undefined)), weak_undefined=tuple(dict.fromkeys(weak_undefined)),
            defined=frozenset(defined),
        )

    def section(self, shoff: int, index: int) -> _Section:
        base = shoff + index * _SECTION_BYTES
        _check_range(self.data, base, _SECTION_BYTES, f"section header {index}")
        name, typ, flags, _addr, offset, size, link, info, align, entsize = self.u("IIQQQQIIQQ", base)
        return _Section(index, name, typ, flags, offset, size, link, info, align, entsize)

    def linked(self, s: _Section, index: int, what: str) -> _Section:
        if not 0 < index < len(self.sections):
            raise ValueError(f"{s.what()} links to {what} {index}, not a section (the object has "
                             f"{len(self.sections)})")
        return self.sections[index]

    def strtab(self, index: int, what: str) -> bytes:
        s = self.sections[index]
        if s.type != SHT_STRTAB:
            raise ValueError(f"{what} (section {index}) is not a string table (type {s.type})")
        _check_range(self.data, s.offset, s.size, f"{what} (section {index})")
        table = self.data[s.offset:s.offset + s.size]
        if table and table[-1] != 0:
            raise ValueError(f"{what} (section {index}) does not end with a NUL byte")
        return table

    def symbols(self, symtab: _Section) -> tuple[bytes, list[tuple[str, int, int]]]:
        """The symbol table's (name, binding, section index) entries, each checked."""
        if symtab.entsize != _SYMBOL_BYTES:
            raise ValueError(f"bad symbol table entry size {symtab.entsize} in section {symtab.index} "
                             f"(expected {_SYMBOL_BYTES})")
        strtab = self.strtab(self.linked(symtab, symtab.link, "string table").index,
                             f"the string table of the symbol table (section {symtab.index})")
        count = symtab.size // _SYMBOL_BYTES
        if count > _MAX_SYMBOLS:
            raise ValueError(f"the symbol table claims {count} symbols, more than {_MAX_SYMBOLS}")
        if count and self.data[symtab.offset:symtab.offset + _SYMBOL_BYTES] != bytes(_SYMBOL_BYTES):
            raise ValueError("symbol 0 is not the null symbol")
        if symtab.info > count:
            raise ValueError(f"the symbol table says its first global symbol is {symtab.info}, of {count}")
        xindex = [s for s in self.sections if s.type == SHT_SYMTAB_SHNDX and s.link == symtab.index]
        out: list[tuple[str, int, int]] = [("", STB_LOCAL, SHN_UNDEF)]
        for k in range(1, count):
            where = f"symbol {k}"
            st_name, st_info, _other, st_shndx, st_value, st_size = self.u("IBBHQQ", symtab.offset + k * _SYMBOL_BYTES)
            binding, kind = st_info >> 4, st_info & 0xF
            if binding not in (STB_LOCAL, STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE):
                raise ValueError(f"{where} has binding {binding}, which no linker knows")
            if kind > 6 and kind != 10:  # NOTYPE OBJECT FUNC SECTION FILE COMMON TLS, GNU_IFUNC
                raise ValueError(f"{where} has type {kind}, which no linker knows")
            if (binding == STB_LOCAL) != (k < symtab.info):
                raise ValueError(f"{where} is {'local' if binding == STB_LOCAL else 'global'} on the wrong side of "
                                 f"the symbol table's first global ({symtab.info})")
            name = _string(strtab, st_name, f"the name of {where}", utf8=True)
            if st_shndx == SHN_XINDEX:
                if len(xindex) != 1:
                    raise ValueError(f"{where} has an extended section index, and there is no SHT_SYMTAB_SHNDX table")
                x = xindex[0]
                _check_range(self.data, x.offset + 4 * k, 4, f"the extended section index of {where}")
                (st_shndx,) = self.u("I", x.offset + 4 * k)
            elif st_shndx >= SHN_LORESERVE:
                if st_shndx == SHN_COMMON:
                    if st_value & (st_value - 1) or st_value > _MAX_ALIGN:
                        raise ValueError(f"common {where} has alignment {st_value}")
                    if st_size > _MAX_NOBITS:
                        raise ValueError(f"common {where} is {st_size} bytes, over the {_MAX_NOBITS} accepted")
                elif st_shndx != SHN_ABS:
                    raise ValueError(f"{where} is in reserved section index 0x{st_shndx:04x}")
                out.append((name, binding, st_shndx))
                continue
            if st_shndx != SHN_UNDEF:
                if st_shndx >= len(self.sections):
                    raise ValueError(f"{where} is in section {st_shndx}, of {len(self.sections)}")
                target = self.sections[st_shndx]
                if self.head.machine not in RELOCATION_TYPES:
                    st_size = 0  # e.g. ppc64's function descriptors: a symbol's size is its code's, elsewhere
                if st_value > target.size or st_size > target.size - st_value:
                    raise ValueError(f"{where} (bytes {st_value}..{st_value + st_size}) lies outside its section "
                                     f"{st_shndx} ({target.size} bytes)")
            out.append((name, binding, st_shndx))
        return strtab, out

    def relocations(self, s: _Section, symtab: _Section, nsyms: int) -> None:
        entry = _RELA_BYTES if s.type == SHT_RELA else _REL_BYTES
        what = f"the relocation section {s.index}"
        if s.entsize != entry:
            raise ValueError(f"{what} has entries of {s.entsize} bytes (expected {entry})")
        if s.link != symtab.index:
            raise ValueError(f"{what} links to symbol table {s.link}, not the object's ({symtab.index})")
        target = self.linked(s, s.info, "target section")
        if target.type in (SHT_NOBITS, SHT_NULL) or target.index == s.index:
            raise ValueError(f"{what} patches section {target.index}, which has no bytes to patch")
        widths = RELOCATION_TYPES.get(self.head.machine)
        for k in range(s.size // entry):
            r_offset, r_info = self.u("QQ", s.offset + k * entry)
            sym, typ = r_info >> 32, r_info & 0xFFFFFFFF
            if sym >= nsyms:
                raise ValueError(f"relocation {k} of {what} names symbol {sym}, of {nsyms}")
            width = 1
            if widths is not None:
                if typ not in widths:
                    raise ValueError(f"relocation {k} of {what} has type {typ}, not a relocation of "
                                     f"{machine_name(self.head.machine)} objects")
                width = widths[typ]
            if r_offset > target.size or width > target.size - r_offset:
                raise ValueError(f"relocation {k} of {what} patches bytes {r_offset}..{r_offset + width} of "
                                 f"section {target.index}, which has {target.size}")

    def grouped(self) -> set[int]:
        """The sections some section group names (its members are checked by :meth:`group`)."""
        members: set[int] = set()
        for s in self.sections:
            if s.type == SHT_GROUP and s.entsize == 4:
                _check_range(self.data, s.offset, s.size, f"the section group {s.index}")
                members.update(self.u(f"{s.size // 4}I", s.offset)[1:])
        return members

    def group(self, s: _Section, symtab: _Section, nsyms: int) -> None:
        what = f"the section group {s.index}"
        if s.entsize != 4 or s.size < 4:
            raise ValueError(f"{what} has entries of {s.entsize} bytes and {s.size} bytes in all (4-byte words)")
        if s.link != symtab.index or s.info >= nsyms:
            raise ValueError(f"{what} names symbol {s.info} of table {s.link}, not one of the object's {nsyms}")
        for k in range(1, s.size // 4):
            (member,) = self.u("I", s.offset + 4 * k)
            if not 0 < member < len(self.sections):
                raise ValueError(f"{what} has member {member}, not a section")


def _check_range(data: bytes, offset: int, size: int, what: str) -> None:
    if offset < 0 or size < 0 or offset + size > len(data):
        raise ValueError(f"truncated or corrupt ELF file: {what} lies outside the file "
                         f"(bytes {offset}..{offset + size} of {len(data)})")


def _string(strtab: bytes, offset: int, what: str, *, utf8: bool = False) -> str:
    if offset >= len(strtab):
        if offset == 0:
            return ""  # an empty table: every name is empty
        raise ValueError(f"{what} lies outside its string table (offset {offset} of {len(strtab)})")
    stop = strtab.find(b"\0", offset)
    if stop < 0:
        raise ValueError(f"{what} is not NUL-terminated")
    try:
        return strtab[offset:stop].decode("utf-8", errors="strict" if utf8 else "replace")
    except UnicodeDecodeError:
        raise ValueError(f"{what} is not UTF-8") from None
