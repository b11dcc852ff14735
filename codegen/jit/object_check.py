"""A structural check of object code before it is handed to the JIT linker, whose input junk crashes the
process: a second line after the disk cache's hash (:mod:`.jit.disk_cache`): a forged entry is rebuilt.

For ELF: a 64-bit little-endian relocatable file for the host's machine, a section header table inside the
file with entries of the standard size, and every section that occupies file space inside it.  Mach-O: the
64-bit magic and a header that fits.  A bundle (:mod:`.jit.module_split`): well formed, each part sound."""

from __future__ import annotations

import platform
import struct

from .module_split import BUNDLE_MAGIC, unbundle

_ELF_MAGIC = b"\x7fELF"
_MACHO_MAGIC = b"\xcf\xfa\xed\xfe"
_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21,
                 "riscv64": 243, "s390x": 22}
_SHT_NOBITS = 8


def object_is_sound(obj: bytes) -> bool:
    """True when ``obj`` is well-formed object code for this machine, or a bundle of such."""
    if not isinstance(obj, (bytes, bytearray)):
        return False
    if obj.startswith(BUNDLE_MAGIC):
        try:
            return all(object_is_sound(part) for part in unbundle(bytes(obj)))
        except ValueError:
            return False
    if obj.startswith(_ELF_MAGIC):
        return _elf_is_sound(bytes(obj))
    if obj.startswith(_MACHO_MAGIC):
        return len(obj) >= 32
    return False


def _elf_is_sound(obj: bytes) -> bool:
    if len(obj) < 64 or obj[4] != 2 or obj[5] != 1:  # ELFCLASS64, little-endian
        return False
    e_type, e_machine = struct.unpack_from("<HH", obj, 16)
    want = _ELF_MACHINES.get(platform.machine().lower())
    if e_type != 1 or (want is not None and e_machine != want):  # ET_REL for this CPU
        return False
    (e_shoff,) = struct.unpack_from("<Q", obj, 40)
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", obj, 58)
    if e_shentsize != 64 or e_shnum == 0 or e_shstrndx >= e_shnum:
        return False
    if e_shoff + e_shnum * 64 > len(obj):
        return False
    for k in range(e_shnum):
        base = e_shoff + 64 * k
        (sh_type,) = struct.unpack_from("<I", obj, base + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", obj, base + 24)
        if sh_type != _SHT_NOBITS and sh_offset + sh_size > len(obj):
            return False
    return True


_SHT_SYMTAB = 2
_STB_GLOBAL = 1


def undefined_symbols(obj: bytes) -> list[str]:
    """The global symbols sound ELF object code ``obj`` uses but does not define (what the JIT must
    resolve), weak ones left out; for Mach-O empty (not read)."""
    return [name for name, defined in _global_symbols(obj) if not defined]


def defined_symbols(obj: bytes) -> list[str]:
    """The global symbols sound ELF object code ``obj`` defines (empty for Mach-O: not read)."""
    return [name for name, defined in _global_symbols(obj) if defined]


def _global_symbols(obj: bytes) -> list[tuple[str, bool]]:
    if not obj.startswith(_ELF_MAGIC):
        return []
    (e_shoff,) = struct.unpack_from("<Q", obj, 40)
    (e_shnum,) = struct.unpack_from("<H", obj, 60)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, e_shoff + 64 * k) for k in range(e_shnum)]
    out = []
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != _SHT_SYMTAB or entsize < 24 or link >= e_shnum:
            continue
        strings = sections[link][4]
        for base in range(offset, offset + size - entsize + 1, entsize):
            st_name, st_info, _, st_shndx = struct.unpack_from("<IBBH", obj, base)
            if st_name and st_info >> 4 == _STB_GLOBAL:
                start = strings + st_name
                out.append((obj[start:obj.index(b"\0", start)].decode(), st_shndx != 0))
    return out
