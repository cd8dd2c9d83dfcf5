//! The Go version from `.go.buildinfo` (see Go's debug/buildinfo): a 32-byte header
//! starting with "\xff Go buildinf:", then either (Go 1.18+, flag bit 2) the version as a
//! varint-prefixed string, or (older) two pointers to Go string headers.

use crate::resolve::elf::ElfFile;

pub(crate) const MAGIC: &[u8; 14] = b"\xff Go buildinf:";
const HEADER: usize = 32;

/// Decodes the version from the buildinfo blob `b`. `read_at(vaddr, len)` reads memory of
/// the binary for the older pointer format.
pub(crate) fn parse<'a>(
    b: &[u8],
    read_at: impl Fn(u64, usize) -> Option<&'a [u8]>,
) -> Option<String> {
    if b.len() < HEADER || &b[..14] != MAGIC {
        return None;
    }
    let (ptr_size, flags) = (b[14] as usize, b[15]);
    let raw: Vec<u8> = if flags & 2 != 0 {
        let (len, n) = uvarint(&b[HEADER..])?;
        let start = HEADER + n;
        b.get(start..start.checked_add(usize::try_from(len).ok()?)?)?
            .to_vec()
    } else {
        if flags & 1 != 0 || !(ptr_size == 4 || ptr_size == 8) {
            return None; // big-endian or odd pointer size: not for this tool
        }
        let ptr = |d: &[u8], off: usize| -> Option<u64> {
            let s = d.get(off..off + ptr_size)?;
            Some(if ptr_size == 8 {
                u64::from_le_bytes(s.try_into().ok()?)
            } else {
                u32::from_le_bytes(s.try_into().ok()?) as u64
            })
        };
        let hdr_addr = ptr(b, 16)?;
        let hdr = read_at(hdr_addr, 2 * ptr_size)?;
        let (data, len) = (ptr(hdr, 0)?, ptr(hdr, ptr_size)?);
        if len == 0 || len > 256 {
            return None;
        }
        read_at(data, len as usize)?.to_vec()
    };
    let s = String::from_utf8(raw).ok()?;
    (!s.is_empty()).then_some(s)
}

fn uvarint(b: &[u8]) -> Option<(u64, usize)> {
    let mut x = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        x |= ((byte & 0x7f) as u64) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((x, i + 1));
        }
    }
    None
}

/// Finds the buildinfo blob by its magic at a 16-byte boundary of `data[start..end]`.
pub(crate) fn scan(data: &[u8], start: usize, end: usize) -> Option<usize> {
    let end = end.min(data.len());
    let mut off = start.next_multiple_of(16);
    while off + HEADER <= end {
        if data[off] == 0xff && &data[off..off + 14] == MAGIC {
            return Some(off);
        }
        off += 16;
    }
    None
}

/// Finds the buildinfo blob by its magic in the writable segments, where the Go linker
/// puts it (for binaries whose section headers were removed or renamed). Segments start
/// page-aligned in the file, so a 16-byte boundary of the file is one of memory.
pub(crate) fn scan_segments(elf: &ElfFile) -> Option<usize> {
    elf.loads().iter().filter(|l| l.writable).find_map(|l| {
        scan(
            elf.data(),
            l.offset as usize,
            (l.offset + l.filesz) as usize,
        )
    })
}
