//! A module's function symbols, from its symbol tables (`.symtab`, `.dynsym`, a debug file's,
//! the MiniDebugInfo's), sorted by address, each name left in its file's bytes: the names
//! `symbols.rs` gives addresses that DWARF does not name. Which tables are read, and in which
//! order, is `symbols.rs`'s choice; parsing ELF is `object`'s.

use super::demangle::MAX_MANGLED;
use crate::program::modules::Image;
use object::{ObjectSymbol, ObjectSymbolTable, SymbolKind};

/// How many symbols before the nearest one a lookup also tries (for symbols nested in others).
const MAX_SYMBOLS_BACK: usize = 16;

/// A module's function symbols, sorted by address; names stay in their files' bytes.
#[derive(Default)]
pub(super) struct Symbols {
    /// The files the names lie in (the module's, or a debug file's; also its MiniDebugInfo's).
    images: Vec<Image>,
    entries: Vec<Symbol>,
}

struct Symbol {
    address: u64,
    size: u64,
    /// Offset of the name in its image.
    name: usize,
    name_len: u32,
    /// Which of the images the name lies in.
    image: u32,
}

impl Symbols {
    /// The defined function symbols of `table`, read from `image`.
    pub(super) fn from_table<'data>(
        image: &Image,
        table: Option<object::read::SymbolTable<'data, '_>>,
    ) -> Symbols {
        let Some(table) = table else {
            return Symbols::default();
        };
        let base = image.as_ptr() as usize;
        // (rank, symbol): at one address, globals win over weak symbols over locals.
        let mut entries: Vec<(u8, Symbol)> = table
            .symbols()
            .filter(|symbol| {
                symbol.kind() == SymbolKind::Text
                    && symbol.is_definition()
                    && symbol.size() > 0
                    && symbol.address() != 0
            })
            .filter_map(|symbol| {
                let name = symbol.name_bytes().ok()?;
                let at = (name.as_ptr() as usize).checked_sub(base)?;
                if name.is_empty() || at + name.len() > image.len() {
                    return None;
                }
                // (object's `is_global` is true for weak symbols too.)
                let rank = if symbol.is_weak() {
                    1
                } else if symbol.is_global() {
                    0
                } else {
                    2
                };
                Some((
                    rank,
                    Symbol {
                        address: symbol.address(),
                        size: symbol.size(),
                        name: at,
                        name_len: name.len().min(MAX_MANGLED) as u32,
                        image: 0,
                    },
                ))
            })
            .collect();
        entries.sort_unstable_by_key(|(rank, symbol)| (symbol.address, *rank));
        entries.dedup_by_key(|(_, symbol)| symbol.address);
        let entries: Vec<Symbol> = entries.into_iter().map(|(_, symbol)| symbol).collect();
        Symbols {
            images: if entries.is_empty() {
                Vec::new()
            } else {
                vec![image.clone()]
            },
            entries,
        }
    }

    /// These symbols and `other`'s: at an address both name, this table's symbol.
    pub(super) fn with(mut self, other: Symbols) -> Symbols {
        if other.is_empty() {
            return self;
        }
        let base = self.images.len() as u32;
        self.images.extend(other.images);
        let others = other.entries.into_iter().map(|symbol| Symbol {
            image: symbol.image + base,
            ..symbol
        });
        self.entries.extend(others);
        self.entries.sort_by_key(|symbol| symbol.address); // stable: this table's first
        self.entries.dedup_by_key(|symbol| symbol.address);
        self
    }

    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The raw name of the symbol nearest at or below `svma` whose size covers it.
    pub(super) fn lookup(&self, svma: u64) -> Option<&[u8]> {
        let after = self
            .entries
            .partition_point(|symbol| symbol.address <= svma);
        let symbol = self.entries[..after]
            .iter()
            .rev()
            .take(MAX_SYMBOLS_BACK)
            .find(|symbol| svma - symbol.address < symbol.size)?;
        let image = self.images.get(symbol.image as usize)?;
        image.get(symbol.name..symbol.name + symbol.name_len as usize)
    }
}
