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
