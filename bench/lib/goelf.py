"""A Go binary as bench/ret_sites.py reads it: its ELF sections, the Go version in
.go.buildinfo, its functions from .gopclntab (so stripped binaries work) and objdump's
decode of .text."""

import re
import struct
import subprocess

INSN = re.compile(r"^\s*([0-9a-f]+):\s*(.*?)\s*$")


def elf_sections(data):
    """Name -> (address, file offset, size) of every section of a 64-bit ELF file."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise SystemExit("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = heads[shstrndx][4]
    out = {}
    for h in heads:
        name = data[stroff + h[0]: data.index(b"\0", stroff + h[0])].decode()
        out[name] = (h[3], h[4], h[5])
    return out


def go_version(path):
    """The Go version recorded in .go.buildinfo (Go 1.18+ inline layout), or "?"."""
    with open(path, "rb") as f:
        data = f.read()
    secs = elf_sections(data)
    if ".go.buildinfo" not in secs:
        return "?"
    _, off, _ = secs[".go.buildinfo"]
    b = data[off: off + 4096]
    if not b.startswith(b"\xff Go buildinf:") or not b[15] & 2:
        return "?"
    n, shift, i = 0, 0, 32
    while True:
        c = b[i]
        n |= (c & 0x7F) << shift
        shift += 7
        i += 1
        if c < 0x80:
            break
    return b[i: i + n].decode()


def go_functions(path):
    """[(entry address, end address, name)] from .gopclntab (Go 1.18+ layout), sorted."""
    with open(path, "rb") as f:
        data = f.read()
    secs = elf_sections(data)
    if ".gopclntab" not in secs:
        raise SystemExit(f"{path}: no .gopclntab (not a Go binary, or Go < 1.18?)")
    _, off, size = secs[".gopclntab"]
    t = data[off: off + size]
    magic, = struct.unpack_from("<I", t, 0)
    if magic not in (0xFFFFFFF0, 0xFFFFFFF1):
        raise SystemExit(f"{path}: pclntab magic {magic:#x} is not Go 1.18+")
    nfunc, _nfiles, text_start, funcname_off, _cu, _file, _pctab, pcln_off = struct.unpack_from(
        "<8Q", t, 8)
    # Go 1.27 leaves textStart 0; .text starts at runtime.text either way.
    text = secs[".text"][0]
    if text_start not in (0, text):
        text = text_start
    funcs = []
    for i in range(nfunc + 1):
        entry_off, func_off = struct.unpack_from("<II", t, pcln_off + 8 * i)
        if i == nfunc:
            end = text + entry_off
            break
        name_off, = struct.unpack_from("<i", t, pcln_off + func_off + 4)
        n0 = funcname_off + name_off
        name = t[n0: t.index(b"\0", n0)].decode("utf-8", "replace")
        funcs.append([text + entry_off, None, name])
    for a, b in zip(funcs, funcs[1:]):
        a[1] = b[0]
    funcs[-1][1] = end
    return [tuple(f) for f in funcs]


def disassemble(path):
    """Yields (address, mnemonic, operands) for .text, in address order."""
    p = subprocess.Popen(
        ["objdump", "-d", "--no-show-raw-insn", "-w", "-j", ".text", path],
        stdout=subprocess.PIPE, text=True, bufsize=1 << 20)
    for line in p.stdout:
        m = INSN.match(line)
        if not m:
            continue
        text = m.group(2).split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.split(None, 1)
        mnem = parts[0]
        ops = parts[1].strip() if len(parts) > 1 else ""
        # Prefixes objdump prints as words of their own.
        while mnem in ("rex", "rex.W", "rex.B", "data16", "cs", "ds", "notrack", "bnd") and ops:
            parts = ops.split(None, 1)
            mnem = parts[0]
            ops = parts[1].strip() if len(parts) > 1 else ""
        yield int(m.group(1), 16), mnem, ops
    if p.wait() != 0:
        raise SystemExit(f"objdump failed on {path}")
