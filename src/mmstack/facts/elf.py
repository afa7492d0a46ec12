"""The one ELF reader: section headers, the dynamic section (DT_NEEDED, DT_RUNPATH, DT_RPATH) and
the dynamic symbols of a shared object, for 32/64-bit, little/big-endian ELF.

Its users: facts/fatbin.py (the `.nv_fatbin` sections), verify/ladder.py (how the ext gets
libstdc++) and the ladder's child (L3: which libraries the ext needs). The child loads this file
by path in the environment under test, where mmstack itself need not be importable: stdlib only,
no mmstack imports.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

MAGIC = b"\x7fELF"
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHT_GNU_VERNEED = 0x6FFFFFFE
PT_LOAD, PT_DYNAMIC = 1, 2
DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 1, 5, 15, 29


class ElfError(ValueError):
    """Not an ELF file, or one whose headers do not hold together."""


@dataclass(frozen=True)
class Section:
    name: str
    type: int
    offset: int
    size: int
    link: int
    entsize: int


class Elf:
    """The headers of an ELF file open for reading (the stream stays the caller's)."""

    def __init__(self, stream: BinaryIO):
        self._f = stream
        self._size = stream.seek(0, os.SEEK_END)  # every read is checked against it before it is made
        head = self._read(0, 64, "ELF header")
        if head[:4] != MAGIC or head[4] not in (1, 2) or head[5] not in (1, 2):
            raise ElfError(f"not an ELF file (starts with {head[:6]!r})")
        self.is64, self.endian = head[4] == 2, "<" if head[5] == 1 else ">"
        e = self.endian
        if self.is64:
            phoff, shoff = struct.unpack_from(e + "QQ", head, 0x20)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "HHHHH", head, 0x36)
        else:
            phoff, shoff = struct.unpack_from(e + "II", head, 0x1C)
            phentsize, phnum, shentsize, shnum, shstrndx = struct.unpack_from(e + "HHHHH", head, 0x2A)
        self._ph = (phoff, phentsize, phnum)
        self._sh = (shoff, shentsize, shnum, shstrndx)

    def _read(self, offset: int, size: int, what: str) -> bytes:
        """size bytes at offset; a header that points past the file's end is refused before any read,
        so a damaged size field never makes the reader allocate more than the file holds."""
        if offset < 0 or size < 0 or offset + size > self._size:
            raise ElfError(f"{what} at byte {offset} runs past the end of the file")
        self._f.seek(offset)
        data = self._f.read(size)
        if len(data) != size:
            raise ElfError(f"{what} at byte {offset} runs past the end of the file")
        return data

    def segments(self) -> list[tuple[int, int, int, int]]:
        """(p_type, p_offset, p_vaddr, p_filesz) per program header."""
        phoff, phentsize, phnum = self._ph
        if not phnum:
            return []
        table = self._read(phoff, phentsize * phnum, "program header table")
        out = []
        for i in range(phnum):
            if self.is64:
                p_type, _, offset, vaddr, _, filesz, _, _ = struct.unpack_from(self.endian + "IIQQQQQQ", table, i * phentsize)
            else:
                p_type, offset, vaddr, _, filesz, _, _, _ = struct.unpack_from(self.endian + "IIIIIIII", table, i * phentsize)
            out.append((p_type, offset, vaddr, filesz))
        return out

    def sections(self) -> list[Section]:
        shoff, shentsize, shnum, shstrndx = self._sh
        if not shoff or not shnum:
            return []
        table = self._read(shoff, shentsize * shnum, "section header table")
        raw = []
        for i in range(shnum):
            if self.is64:
                name, typ, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
                    self.endian + "IIQQQQIIQQ", table, i * shentsize)
            else:
                name, typ, _, _, offset, size, link, _, _, entsize = struct.unpack_from(
                    self.endian + "IIIIIIIIII", table, i * shentsize)
            raw.append((name, typ, offset, size, link, entsize))
        if shstrndx >= len(raw):
            raise ElfError(f"section name table index {shstrndx} is past the {len(raw)} sections")
        names = self._read(raw[shstrndx][2], raw[shstrndx][3], "section name table")
        return [Section(_cstr(names, n), typ, offset, size, link, entsize) for n, typ, offset, size, link, entsize in raw]

    def dynamic_tags(self) -> tuple[list[tuple[int, int]], int | None]:
        """The dynamic section's (tag, value) pairs up to DT_NULL, found through PT_DYNAMIC, and the
        file offset of its string table (DT_STRTAB mapped through the PT_LOAD segments)."""
        segs = self.segments()
        dynamic = next(((off, size) for t, off, _, size in segs if t == PT_DYNAMIC), None)
        if dynamic is None:
            return [], None
        fmt, step = (self.endian + "qQ", 16) if self.is64 else (self.endian + "iI", 8)
        raw = self._read(dynamic[0], min(dynamic[1], max(self._size - dynamic[0], 0)), "dynamic section")
        tags: list[tuple[int, int]] = []
        for i in range(0, len(raw) - step + 1, step):
            tag, val = struct.unpack_from(fmt, raw, i)
            if tag == 0:
                break
            tags.append((tag, val))
        strtab = next((v for t, v in tags if t == DT_STRTAB), None)
        if strtab is None:
            return tags, None
        loads = [(va, off, sz) for t, off, va, sz in segs if t == PT_LOAD]
        return tags, next((off + strtab - va for va, off, sz in loads if va <= strtab < va + sz), strtab)

    def string_at(self, offset: int) -> str:
        self._f.seek(offset)
        return self._f.read(4096).split(b"\0", 1)[0].decode("utf-8", "replace")

    def defined_dynamic_symbols(self) -> Iterator[str]:
        """Names of the symbols .dynsym defines (section index not SHN_UNDEF)."""
        sections = self.sections()
        for sec in sections:
            if sec.type != SHT_DYNSYM or sec.name != ".dynsym" or not sec.entsize:
                continue
            strtab = sections[sec.link]
            names = self._read(strtab.offset, strtab.size, "dynamic string table")
            table = self._read(sec.offset, sec.size, ".dynsym")
            for i in range(0, sec.size - sec.entsize + 1, sec.entsize):
                if self.is64:
                    name, _, _, shndx = struct.unpack_from(self.endian + "IBBH", table, i)
                else:
                    name, shndx = struct.unpack_from(self.endian + "I", table, i)[0], struct.unpack_from(self.endian + "H", table, i + 14)[0]
                if shndx != 0:
                    yield _cstr(names, name)


    def version_needs(self) -> dict[str, list[str]]:
        """.gnu.version_r: each needed library and the symbol versions it must define
        ({"libc.so.6": ["GLIBC_2.2.5", "GLIBC_2.32"], ...}); the same layout for 32 and 64 bit."""
        sections = self.sections()
        out: dict[str, list[str]] = {}
        for sec in sections:
            if sec.type != SHT_GNU_VERNEED or sec.link >= len(sections):
                continue
            strtab = sections[sec.link]
            names = self._read(strtab.offset, strtab.size, "version string table")
            table = self._read(sec.offset, sec.size, ".gnu.version_r")
            at = 0
            while at + 16 <= len(table):
                _, cnt, file, aux, nxt = struct.unpack_from(self.endian + "HHIII", table, at)
                versions = out.setdefault(_cstr(names, file), [])
                a = at + aux
                for _ in range(cnt):
                    if a + 16 > len(table):
                        raise ElfError(".gnu.version_r entry runs past its section")
                    _, _, _, name, anext = struct.unpack_from(self.endian + "IHHII", table, a)
                    versions.append(_cstr(names, name))
                    if not anext:
                        break
                    a += anext
                if not nxt:
                    break
                at += nxt
        return out


def glibc_version_key(version: str) -> tuple[int, ...]:
    """"GLIBC_2.32" or "2.32" -> (2, 32)."""
    return tuple(int(x) for x in version.removeprefix("GLIBC_").split(".") if x.isdigit())


def glibc_needed(path: str) -> str | None:
    """The newest GLIBC_x.y symbol version an ELF file needs from any library ("2.32"): the oldest
    glibc it loads on. None when it needs no versioned glibc symbol (or is no ELF)."""
    with open(path, "rb") as f:
        try:
            return glibc_of(Elf(f))
        except ElfError:
            return None


def glibc_of(elf: Elf) -> str | None:
    """glibc_needed for an ELF already open."""
    needs = elf.version_needs()
    versions = [v for vs in needs.values() for v in vs if v.startswith("GLIBC_") and glibc_version_key(v)]
    if not versions:
        return None
    return max(versions, key=glibc_version_key).removeprefix("GLIBC_")


def _cstr(table: bytes, at: int) -> str:
    end = table.find(b"\0", at)
    return table[at: end if end >= 0 else len(table)].decode("utf-8", "replace")


def dynamic(path: str) -> dict | None:
    """DT_NEEDED, DT_RUNPATH and DT_RPATH ($ORIGIN resolved) of a 64-bit little-endian ELF; None if
    it is not one."""
    with open(path, "rb") as f:
        head = f.read(64)
        if len(head) < 64 or head[:4] != MAGIC or head[4] != 2 or head[5] != 1:
            return None
        elf = Elf(f)
        tags, base = elf.dynamic_tags()
        if base is None:
            return {"needed": [], "runpath": [], "rpath": []}

        def paths(tag: int) -> list[str]:
            origin = os.path.dirname(os.path.realpath(path))
            found = []
            for t, v in tags:
                if t == tag:
                    found += [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin)
                              for d in elf.string_at(base + v).split(":") if d]
            return found

        return {"needed": [elf.string_at(base + v) for t, v in tags if t == DT_NEEDED],
                "runpath": paths(DT_RUNPATH), "rpath": paths(DT_RPATH)}


def needed(path: str) -> list[str]:
    """DT_NEEDED of any ELF (ElfError/OSError when it cannot be read)."""
    with open(path, "rb") as f:
        elf = Elf(f)
        tags, base = elf.dynamic_tags()
        return [elf.string_at(base + v) for t, v in tags if t == DT_NEEDED] if base is not None else []
