"""mmstack.facts.elf, the one ELF reader, against pyelftools on real shared objects."""

import glob
import os
import sys
from pathlib import Path

import pytest

from mmstack.facts import elf

elftools = pytest.importorskip("elftools", reason="pyelftools is the reference reader")
from elftools.elf.dynamic import DynamicSection  # noqa: E402
from elftools.elf.elffile import ELFFile  # noqa: E402


def _objects() -> list[str]:
    """Real ELF shared objects on this machine: python's extension modules and torch's libraries."""
    found = sorted(glob.glob(os.path.join(os.path.dirname(os.__file__), "lib-dynload", "*.so")))[:4]
    try:
        import torch

        found += sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "*.so*")))[:4]
    except ImportError:
        pass
    return found


OBJECTS = _objects()


@pytest.mark.skipif(not OBJECTS, reason="no shared objects found next to this python")
@pytest.mark.parametrize("path", OBJECTS, ids=lambda p: Path(p).name)
def test_agrees_with_pyelftools(path):
    with open(path, "rb") as f:
        ref = ELFFile(f)
        sections = [(s.name, s["sh_offset"], s["sh_size"]) for s in ref.iter_sections()]
        needed = [t.needed for s in ref.iter_sections() if isinstance(s, DynamicSection)
                  for t in s.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
        defined = sorted(sym.name for s in ref.iter_sections() if s.name == ".dynsym"
                         for sym in s.iter_symbols() if sym["st_shndx"] != "SHN_UNDEF")
    with open(path, "rb") as f:
        mine = elf.Elf(f)
        assert [(s.name, s.offset, s.size) for s in mine.sections()] == sections
        assert sorted(mine.defined_dynamic_symbols()) == defined
    assert elf.needed(path) == needed
    dyn = elf.dynamic(path)
    assert dyn is not None and dyn["needed"] == needed


def test_origin_is_resolved_in_runpath():
    with_runpath = [p for p in OBJECTS if (elf.dynamic(p) or {}).get("runpath")]
    if not with_runpath:
        pytest.skip("no object with a DT_RUNPATH here")
    for p in with_runpath:
        assert all("$ORIGIN" not in d and "${ORIGIN}" not in d for d in elf.dynamic(p)["runpath"])


def test_not_elf(tmp_path):
    text = tmp_path / "notes.so"
    text.write_text("not an ELF object\n" * 8)
    assert elf.dynamic(str(text)) is None
    with open(text, "rb") as f, pytest.raises(elf.ElfError, match="not an ELF file"):
        elf.Elf(f)


def test_truncated_header(tmp_path):
    stub = tmp_path / "stub.so"
    stub.write_bytes(b"\x7fELF\x02\x01")
    with open(stub, "rb") as f, pytest.raises(elf.ElfError, match="past the end"):
        elf.Elf(f)
    assert elf.dynamic(str(stub)) is None


def test_this_python_is_readable():
    exe = os.path.realpath(sys.executable)
    with open(exe, "rb") as f:
        head = f.read(4)
    if head != elf.MAGIC:
        pytest.skip(f"{exe} is not ELF")
    with open(exe, "rb") as f:
        assert any(s.name == ".text" for s in elf.Elf(f).sections())


@pytest.mark.skipif(not OBJECTS, reason="no shared objects found next to this python")
@pytest.mark.parametrize("path", OBJECTS, ids=lambda p: Path(p).name)
def test_version_needs_agree_with_pyelftools(path):
    from elftools.elf.gnuversions import GNUVerNeedSection

    with open(path, "rb") as f:
        ref = {}
        for sec in ELFFile(f).iter_sections():
            if isinstance(sec, GNUVerNeedSection):
                for verneed, auxes in sec.iter_versions():
                    ref.setdefault(verneed.name, []).extend(a.name for a in auxes)
        f.seek(0)
        ours = elf.Elf(f).version_needs()
    assert {k: sorted(v) for k, v in ours.items()} == {k: sorted(v) for k, v in ref.items()}


def _compile(tmp_path: Path, name: str, body: str) -> Path:
    """A real shared object made by this machine's gcc."""
    import shutil
    import subprocess

    if not shutil.which("gcc"):
        pytest.skip("no gcc on this machine")
    src = tmp_path / f"{name}.c"
    src.write_text(body)
    out = tmp_path / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", str(out), str(src)], check=True)
    return out


NEW_GLIBC = """
#include <sys/single_threaded.h>
int st(void) { return __libc_single_threaded; }   /* GLIBC_2.32 */
"""
OLD_GLIBC = """
#include <string.h>
int n(const char *s) { return (int) strlen(s); }  /* GLIBC_2.2.5 */
"""


def test_glibc_needed_is_the_newest_glibc_symbol_version(tmp_path):
    """issue 26: the real CPU _ext needed GLIBC_2.32 through __libc_single_threaded."""
    if elf.glibc_version_key(os.confstr("CS_GNU_LIBC_VERSION").split()[-1]) < (2, 32):
        pytest.skip("this glibc is older than 2.32")
    new = _compile(tmp_path, "new", NEW_GLIBC)
    assert elf.glibc_needed(str(new)) == "2.32"
    with open(new, "rb") as f:
        assert "GLIBC_2.32" in elf.Elf(f).version_needs()["libc.so.6"]
    assert elf.glibc_version_key(elf.glibc_needed(str(_compile(tmp_path, "old", OLD_GLIBC)))) < (2, 32)
    assert elf.glibc_needed(sys.executable if Path(sys.executable).suffix != ".so" else "/bin/sh")
    text = tmp_path / "not-elf.so"
    text.write_text("not an ELF file")
    assert elf.glibc_needed(str(text)) is None


@pytest.mark.parametrize("field", ["section name table size", "dynamic section size"])
def test_a_size_field_past_the_end_is_refused_before_it_is_read(tmp_path, field):
    """A damaged header claiming 1 TiB: refused against the file's size (it used to ask read() for
    the whole claim, a MemoryError, or read what was there)."""
    import struct

    src = Path(sys.executable).resolve()
    data = bytearray(src.read_bytes())
    with open(src, "rb") as f:
        e = elf.Elf(f)
        segments = e.segments()
    big = 1 << 40
    if field == "section name table size":
        shoff, shentsize, _, shstrndx = e._sh
        at = shoff + shstrndx * shentsize + 0x20  # sh_size of the name table's 64-bit header
        struct.pack_into("<Q", data, at, big)
        bad = tmp_path / "bad"
        bad.write_bytes(bytes(data))
        with open(bad, "rb") as f, pytest.raises(elf.ElfError, match=r"section name table at byte .* runs past the end"):
            elf.Elf(f).sections()
    else:
        phoff, phentsize, _ = e._ph
        (i,) = [k for k, seg in enumerate(segments) if seg[0] == elf.PT_DYNAMIC]
        struct.pack_into("<Q", data, phoff + i * phentsize + 0x20, big)  # p_filesz
        bad = tmp_path / "bad"
        bad.write_bytes(bytes(data))
        tags = elf.needed(str(bad))  # clamped to the file: the tags that are there are read
        assert tags == elf.needed(str(src))
