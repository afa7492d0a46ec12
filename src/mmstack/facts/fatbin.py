"""Which SASS and PTX archs an ELF shared object (or a .whl/.conda/.tar.bz2 holding some) carries.

Reads the fatbin containers in the `.nv_fatbin` section without cuobjdump. Stdlib only (ELF headers through facts/elf.py):
this runs inside GPU environments and build sandboxes. Only headers are read (payloads are skipped
by seeking), so a multi-GB libtorch_cuda.so costs a few reads per entry.

Layout, decoded from objects built by nvcc 13.0 and cross-checked with
github.com/n-eiling/cuda-fatbin-decompression (fatbin-decompress.h) and github.com/jiegec/fatbinary:

  container header, 16 bytes: u32 magic 0xBA55ED50, u16 version (1), u16 header size (16),
      u64 size of the entries that follow. A section holds several containers back to back
      (one per translation unit, plus nvcc's device-link stub), 8-byte aligned.
  entry header, >= 64 bytes: u16 kind (1 PTX, 2 ELF/SASS, 8 LTO-IR), u16 ?, u32 header size
      (64/80/96/112/120: sm_100+ cubins and PTX carry options after the first 64 bytes),
      u64 stored payload size, u32 compressed size, u32 options offset, u16 minor, u16 major
      (code version: ELF 1.8, PTX ISA 9.0), u32 arch (80, 90, 100, 120), u32 name offset,
      u32 name length, u64 flags, u64 ?, u64 uncompressed size; payload follows the header.
  flags: 0x1 64-bit, 0x10 Linux host, 0x2000 compressed (LZ4-like, `-compress-mode=speed`),
      0x8000 compressed (zstd; nvcc 13 compresses PTX by default, SASS only with
      `-Xfatbin -compress-all`), 0x100000 arch-specific `sm_XXa`, 0x200000 family `sm_XXf`.

Each container is one bundle of kernels (a translation unit, or the device-link stub): the CUDA runtime
loads a kernel from its own bundle, so whether an object runs on a GPU is judged per bundle
(`ObjectListing.bundles`), not on the union of every bundle's archs. A bundle is named by its section
and byte offset ("`.nv_fatbin+8760`") and, where its SASS is stored uncompressed, by the kernels its
cubins define (their `.text.<kernel>` sections); a bundle whose cubins all define no kernel (a
device-link stub) holds nothing to run.

Arch names: the entry's arch number plus the 'a'/'f' flag, so `fatbin` prints `10.0f` and `12.0f`
where `cuobjdump --list-elf` prints `sm_100` and `sm_120`: cuobjdump drops the family suffix (its
ELF file names do not carry it); the same entry, read two ways.
"""

from __future__ import annotations

import io
import lzma
import os
import re
import shutil
import stat
import struct
import subprocess
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from mmstack.errors import BadInput
from mmstack.facts.elf import SHT_NOBITS, Elf, ElfError, glibc_of, glibc_version_key

_MAGIC = 0xBA55ED50
_CONTAINER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQIIHHIIIQQQ")  # the first 64 bytes of every entry header
_KINDS = {1: "ptx", 2: "sass", 8: "ltoir"}
_COMPRESSED = 0x2000 | 0x8000
_VARIANTS = ((0x100000, "a"), (0x200000, "f"))
# `.nv_fatbin` is what the CUDA runtime loads. `__nv_relfatbin` holds the relocatable (-rdc) inputs
# of the device link; it can carry PTX that never reaches `.nv_fatbin` (seen with nvcc 13 -rdc),
# so its entries are listed but do not count towards `sass`/`ptx`.
LOADED_SECTION = ".nv_fatbin"
_SECTIONS = (LOADED_SECTION, "__nv_relfatbin")
_SHARED_OBJECT = re.compile(r"\.so(\.\d+)*$")


@dataclass(frozen=True)
class FatbinEntry:
    kind: str  # "sass" | "ptx" | "ltoir"
    arch: str  # "9.0", "12.0", "9.0a", "10.0f"
    compressed: bool
    size: int  # bytes stored in the file (the compressed size when compressed)
    section: str = LOADED_SECTION
    bundle: int = 0  # byte offset of its container (its bundle) in the section
    kernels: tuple[str, ...] | None = None  # kernels an uncompressed cubin defines; None when not read


@dataclass(frozen=True)
class Bundle:
    """One fatbin container of the loaded section: the code of one translation unit (or a link stub)."""

    label: str  # ".nv_fatbin+8760"
    sass: tuple[str, ...]
    ptx: tuple[str, ...]
    kernels: tuple[str, ...]  # as far as read (compressed cubins are not)
    empty: bool  # every cubin was read and defines no kernel, and there is no PTX: nothing to run


def _arch_key(arch: str) -> tuple[int, int, str]:
    major, rest = arch.split(".")
    return int(major), int(rest[:1] or 0), rest[1:]


def _sorted(archs: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(archs), key=_arch_key))


@dataclass(frozen=True)
class ObjectListing:
    path: str  # the file, or "archive.whl!mmcv/_ext.so"
    entries: tuple[FatbinEntry, ...]
    glibc: str | None = None  # the newest GLIBC_x.y symbol version it needs: the oldest glibc it loads on

    def _archs(self, kind: str) -> tuple[str, ...]:
        return _sorted(e.arch for e in self.entries if e.kind == kind and e.section == LOADED_SECTION)

    @property
    def sass(self) -> tuple[str, ...]:
        return self._archs("sass")

    @property
    def ptx(self) -> tuple[str, ...]:
        return self._archs("ptx")

    @property
    def compressed(self) -> bool:
        return any(e.compressed for e in self.entries)

    @property
    def bundles(self) -> tuple[Bundle, ...]:
        """The loaded section's containers, in file order."""
        groups: dict[int, list[FatbinEntry]] = {}
        for e in self.entries:
            if e.section == LOADED_SECTION and e.kind in ("sass", "ptx"):
                groups.setdefault(e.bundle, []).append(e)
        out = []
        for offset, entries in groups.items():
            sass = [e for e in entries if e.kind == "sass"]
            kernels = sorted({k for e in sass for k in (e.kernels or ())})
            out.append(Bundle(
                label=f"{LOADED_SECTION}+{offset}",
                sass=_sorted(e.arch for e in sass),
                ptx=_sorted(e.arch for e in entries if e.kind == "ptx"),
                kernels=tuple(kernels),
                empty=bool(sass) and not kernels and all(e.kernels == () for e in sass)
                and not any(e.kind == "ptx" for e in entries),
            ))
        return tuple(out)


def _arch_name(sm: int, flags: int) -> str:
    suffix = "".join(letter for bit, letter in _VARIANTS if flags & bit)
    return f"{sm // 10}.{sm % 10}{suffix}"


def _read(stream: BinaryIO, offset: int, size: int, where: str) -> bytes:
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        raise BadInput(f"fatbin truncated at byte {offset}", source=where)
    return data


def _parse_section(stream: BinaryIO, start: int, size: int, name: str, where: str) -> list[FatbinEntry]:
    entries, pos, end = [], start, start + size
    while pos + _CONTAINER.size <= end:
        magic, _version, header_size, fat_size = _CONTAINER.unpack(_read(stream, pos, _CONTAINER.size, where))
        if magic != _MAGIC:
            if magic == 0:  # alignment padding between containers
                pos += 8
                continue
            raise BadInput(f"{name} has no fatbin magic at byte {pos - start} (found {magic:#x})", source=where)
        entry, container_end = pos + header_size, pos + header_size + fat_size
        if header_size < _CONTAINER.size or container_end > end:
            raise BadInput(f"{name} container at byte {pos - start} overruns the section", source=where)
        while entry + _ENTRY.size <= container_end:
            (kind, _, entry_header, stored, compressed_size, _, _, _, sm, _, _, flags, _, _) = _ENTRY.unpack(
                _read(stream, entry, _ENTRY.size, where)
            )
            if entry_header < _ENTRY.size:
                raise BadInput(f"{name} entry at byte {entry - start} has header size {entry_header}", source=where)
            compressed = bool(flags & _COMPRESSED)
            kind_name = _KINDS.get(kind, f"kind{kind}")
            entries.append(
                FatbinEntry(
                    kind=kind_name,
                    arch=_arch_name(sm, flags),
                    compressed=compressed,
                    size=compressed_size if compressed and compressed_size else stored,
                    section=name,
                    bundle=pos - start,
                    kernels=_kernels(stream, entry + entry_header, stored)
                    if kind_name == "sass" and not compressed else None,
                )
            )
            entry += entry_header + stored
        pos = (container_end + 7) & ~7
    return entries


_CUBIN_READ_LIMIT = 16 << 20  # larger cubins (libtorch's) are not read for kernel names


def _kernels(stream: BinaryIO, offset: int, size: int) -> tuple[str, ...] | None:
    """The kernels an uncompressed cubin defines (its `.text.<kernel>` sections); None if not read."""
    if size > _CUBIN_READ_LIMIT:
        return None
    stream.seek(offset)
    data = stream.read(size)
    if data[:4] != b"\x7fELF":
        return None
    try:
        sections = Elf(io.BytesIO(data)).sections()
    except (ElfError, struct.error, ValueError):
        return None
    return tuple(sorted(s.name[len(".text."):] for s in sections if s.name.startswith(".text.")))


def _list_elf(stream: BinaryIO, where: str) -> ObjectListing:
    try:
        elf = Elf(stream)
        sections = [(s.name, s.offset, s.size) for s in elf.sections()
                    if s.name in _SECTIONS and s.type != SHT_NOBITS]
        glibc = glibc_of(elf)
    except (ElfError, struct.error, ValueError) as exc:
        raise BadInput(f"malformed ELF file: {exc}", source=where) from exc
    entries = [e for name, offset, size in sections for e in _parse_section(stream, offset, size, name, where)]
    return ObjectListing(path=where, entries=tuple(entries), glibc=glibc)


def _list_member(fileobj: IO[bytes], where: str) -> ObjectListing | None:
    """Copy an archive member to a seekable temporary file and list it; None if it is not ELF."""
    with tempfile.TemporaryFile() as tmp:
        shutil.copyfileobj(fileobj, tmp, 1 << 20)
        tmp.seek(0)
        if tmp.read(4) != b"\x7fELF":
            return None
        return _list_elf(tmp, where)


# Decompression is bounded: an archive whose members unpack to more than UNPACK_RATIO times what it
# stores (and more than UNPACK_FLOOR) is refused before they are read. Real packages unpack to a few
# times their size (CUDA fatbins are stored compressed already); a bomb to thousands of times.
UNPACK_RATIO = 100
UNPACK_FLOOR = 64 << 20


def unpack_limit(packed: int) -> int:
    """The most bytes an archive member (or a whole archive) of `packed` stored bytes may unpack to."""
    return max(UNPACK_RATIO * packed, UNPACK_FLOOR)


def _hostile(where: str, unpacked: int, packed: int) -> BadInput:
    return BadInput(f"damaged or hostile package: unpacks to over {unpacked:,} bytes from {packed:,} stored "
                    f"(more than {UNPACK_RATIO}x and {UNPACK_FLOOR >> 20} MiB); nothing more was read",
                    fix="download or build it again from a source you trust", source=where)


def _list_tar(tar: tarfile.TarFile, prefix: str, packed: int, where: str) -> list[ObjectListing]:
    found = []
    limit, unpacked = unpack_limit(packed), 0
    for member in tar:  # streams: works on "r|" modes, so a .tar.zst pipe is never held in memory
        unpacked += max(member.size, 0)  # checked before the member's bytes are read (or skipped)
        if unpacked > limit:
            raise _hostile(where, unpacked, packed)
        if member.isfile() and _SHARED_OBJECT.search(member.name):
            fileobj = tar.extractfile(member)  # None only for members that are not regular files
            listing = _list_member(fileobj, f"{prefix}!{member.name}") if fileobj is not None else None
            if listing is not None:
                found.append(listing)
    return found


def _list_tar_zst(fileobj: IO[bytes], prefix: str, member: str, stored: int) -> list[ObjectListing]:
    """The shared objects in a .conda's pkg-*.tar.zst member; a corrupt stream is named as damage."""
    where = f"{prefix}!{member}"
    try:
        import zstandard  # optional: not a base dependency of mmstack
    except ImportError:
        pass  # fall back on the zstd command below
    else:
        try:
            with zstandard.ZstdDecompressor().stream_reader(fileobj) as raw, \
                    tarfile.open(fileobj=raw, mode="r|") as tar:
                return _list_tar(tar, prefix, stored, where)
        except (zstandard.ZstdError, tarfile.TarError, EOFError) as exc:
            raise _damaged(exc, where) from None
    if shutil.which("zstd") is None:
        raise BadInput("a .conda package needs zstd to read", fix="pip install zstandard", source=prefix)
    with tempfile.TemporaryFile() as packed, tempfile.TemporaryFile() as errors:
        shutil.copyfileobj(fileobj, packed, 1 << 20)
        packed.seek(0)
        error: Exception | None = None
        with subprocess.Popen(["zstd", "-dcq"], stdin=packed, stdout=subprocess.PIPE, stderr=errors) as proc:
            assert proc.stdout is not None
            try:
                with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                    found = _list_tar(tar, prefix, stored, where)
                while proc.stdout.read(1 << 20):  # the tar's padding: zstd ends without a broken pipe
                    pass
            except (tarfile.TarError, EOFError) as exc:
                found, error = [], exc
                proc.kill()
            except BadInput:
                proc.kill()
                raise
        # leaving the Popen block closed zstd's stdout and waited for it
        errors.seek(0)
        message = errors.read().decode(errors="replace").strip()
        if error is not None or proc.returncode:
            raise _damaged(message.splitlines()[-1] if message else error, where)
        return found


def _damaged(exc: object, where: str) -> BadInput:
    return BadInput(f"damaged: {exc}", fix="download or build the package again", source=where)


def _list_zip(path: IO[bytes], where: str, on_read: Callable[[int, int], None] | None = None) -> list[ObjectListing]:
    found = []
    with zipfile.ZipFile(path) as zf:
        members = [info for info in zf.infolist() if not info.is_dir()]
        total, done = sum(info.compress_size for info in members), 0
        for info in members:
            if on_read is not None:
                on_read(done, total)
            done += info.compress_size
            if re.fullmatch(r"pkg-.*\.tar\.zst", info.filename):  # a .conda package
                with zf.open(info) as inner:
                    found += _list_tar_zst(inner, where, info.filename, info.compress_size)
            elif _SHARED_OBJECT.search(info.filename):
                if info.file_size > unpack_limit(info.compress_size):  # zipfile reads no more than this size
                    raise _hostile(f"{where}!{info.filename}", info.file_size, info.compress_size)
                with zf.open(info) as member:
                    listing = _list_member(member, f"{where}!{info.filename}")
                if listing is not None:
                    found.append(listing)
        if on_read is not None:
            on_read(total, total)
    return found


_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
            (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
_ZERO_PROBE = 4096  # a file whose first bytes are all zero has no ELF, zip or tar header: damage


def _open_regular(path: Path, where: str) -> io.BufferedReader:
    """path opened for reading if it is a regular file. Opened without blocking (a FIFO with no
    writer would block open()) and checked on the open descriptor, so nothing else is read."""
    fix = "pass the path of an .so, .whl or .conda"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise BadInput("no such file", fix=fix, source=where) from None
    except IsADirectoryError:
        raise BadInput("is a directory", fix=fix, source=where) from None
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", source=where) from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        what = next((name for test, name in _SPECIAL if test(mode)), "a special file")
        raise BadInput(f"{what}, not a regular file", fix=fix, source=where)
    os.set_blocking(fd, True)
    return open(fd, "rb")  # the caller closes it


def list_fatbins(path: str | Path, *, on_read: Callable[[int, int], None] | None = None) -> list[ObjectListing]:
    """One listing per ELF object: the file itself, or each shared object inside a package.

    An object without a fatbin (a CPU build) gives a listing with no entries. `on_read(done, total)`
    (compressed bytes of a .whl's or .conda's members) before each member and at the end. Only a
    regular file is read; an empty one, one that starts with zeros, a zip without its end record
    and an archive that does not decompress are BadInput naming the damage.
    """
    path, where = Path(path), str(path)
    # The members are copied to temporary files. Python picks its temporary folder on first use by
    # writing and removing a probe file there (tempfile._get_default_tempdir): pick it now, before the
    # first on_read, so an interrupt that arrives once progress shows cannot leave that probe behind.
    tempfile.gettempdir()
    with _open_regular(path, where) as stream:
        try:
            head = stream.read(_ZERO_PROBE)
            if not head:
                raise BadInput("an empty file", fix="pass the path of an .so, .whl or .conda", source=where)
            if not head.strip(b"\0"):
                raise BadInput(f"damaged: all of its first {len(head)} bytes are zero (no ELF, zip or tar header)",
                               fix="download or build it again", source=where)
            stream.seek(0)
            if head[:4] == b"\x7fELF":
                return [_list_elf(stream, where)]
            if zipfile.is_zipfile(stream):
                stream.seek(0)
                return _list_zip(stream, where, on_read)
            if head[:4] == b"PK\x03\x04":
                raise BadInput("damaged: a zip archive (.whl/.conda) without its end record: truncated or corrupt",
                               fix="download or build it again", source=where)
            stream.seek(0)
            if tarfile.is_tarfile(stream):
                stream.seek(0)
                with tarfile.open(fileobj=stream, mode="r|*") as tar:
                    return _list_tar(tar, where, os.fstat(stream.fileno()).st_size, where)
        except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise _damaged(exc, where) from None
        except OSError as exc:
            if exc.errno is None:  # bz2/gzip: the data, not the file system
                raise _damaged(exc, where) from None
            raise BadInput(f"cannot read: {exc.strerror or exc}", source=where) from None
    raise BadInput(
        f"not an ELF object nor a .whl/.conda/.tar.bz2 package (starts with {head[:4]!r})",
        fix="pass a shared object (.so) or a package holding one",
        source=where,
    )


def summarize(listings: list[ObjectListing]) -> dict:
    """JSON-able: per file its SASS/PTX archs and entries, and the union over all files."""
    return {
        "files": [
            {
                "path": listing.path,
                "sass": list(listing.sass),
                "ptx": list(listing.ptx),
                "glibc": listing.glibc,
                "compressed": listing.compressed,
                "bundles": [
                    {"label": b.label, "sass": list(b.sass), "ptx": list(b.ptx), "kernels": list(b.kernels), "empty": b.empty}
                    for b in listing.bundles
                ],
                "entries": [
                    {"kind": e.kind, "arch": e.arch, "compressed": e.compressed, "size": e.size, "section": e.section}
                    for e in listing.entries
                ],
            }
            for listing in listings
        ],
        "sass": list(_sorted(a for listing in listings for a in listing.sass)),
        "ptx": list(_sorted(a for listing in listings for a in listing.ptx)),
        "glibc": glibc_floor(listings)[0],
    }


def glibc_floor(listings: list[ObjectListing]) -> tuple[str | None, str | None]:
    """The newest glibc any listed object needs, and the first object that needs it."""
    found = [(glibc_version_key(lst.glibc), lst.glibc, lst.path) for lst in listings if lst.glibc]
    if not found:
        return None, None
    _, version, path = max(found, key=lambda f: f[0])
    return version, path


def compare_to_arch_list(listings: list[ObjectListing], arch_list: str) -> list[str]:
    """What differs between the archs the objects carry and an arch list ("8.9", "9.0;12.0+PTX"):
    one line per missing or unexpected SASS/PTX arch; empty when they match exactly."""
    from mmstack.facts.arch import parse_arch_list

    want = parse_arch_list(arch_list, where="--expect")
    summary = summarize(listings)
    problems = []
    for kind in ("sass", "ptx"):
        expected = {str(t.arch) for t in want if t.kind == kind}
        got = set(summary[kind])
        for a in _sorted(expected - got):
            problems.append(f"{kind.upper()} {a} missing")
        for a in _sorted(got - expected):
            problems.append(f"{kind.upper()} {a} not in the list")
    return problems
