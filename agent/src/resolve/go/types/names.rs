//! The names of a binary's dynamic types for the decoder ([`TypeNames`], a plan's table:
//! `plan/typenames.rs` says how the decoder uses it), read from its runtime type
//! descriptors and itabs.

use std::collections::HashMap;

use crate::plan::typenames::TypeNames;
use crate::resolve::binary::Binary;

impl TypeNames {
    /// Every type name of `bin` (empty for a non-Go binary). The descriptors are read on
    /// the first call for a [`Binary`] and kept with it.
    pub fn of(bin: &Binary) -> TypeNames {
        let idx = bin.desc_index();
        let mut names: HashMap<u64, Box<str>> = idx.strings.clone();
        // An itab stands for its dynamic type: a decoder given the raw first word of a
        // non-empty interface still finds a name (for itabs the binary holds; the
        // runtime makes others on the heap, which is why the BPF side follows the itab).
        for (&itab, &ty) in &idx.itabs {
            if let Some(n) = idx.strings.get(&ty) {
                names.insert(itab, n.clone());
            }
        }
        TypeNames::new(
            names,
            bin.elf
                .loads()
                .iter()
                .map(|l| (l.vaddr, l.offset, l.filesz))
                .collect(),
            idx.error_table(&bin.elf, bin.go_version()).clone(),
        )
    }
}
