//! A module's function symbols, from its symbol tables (`.symtab`, `.dynsym`, a debug file's,
//! the MiniDebugInfo's), sorted by address, each name left in its file's bytes: the names
//! `symbols.rs` gives addresses that DWARF does not name. Which tables are read, and in which
//! order, is `symbols.rs`'s choice; parsing ELF is `object`'s.

use super::demangle::MAX_MANGLED;
use crate::program::modules::Image;
use object::{Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, SymbolKind};

/// How many symbols before the nearest one a lookup also tries (for symbols nested in others).
const MAX_SYMBOLS_BACK: usize = 16;

/// How far past a function symbol without a size (the C runtime's `__do_global_dtors_aux`,
/// hand-written assembly) a lookup names addresses by it, at most (and never past its section's
/// end).
const MAX_SIZELESS: u64 = 64 * 1024;

/// A module's function symbols, sorted by address; names stay in their files' bytes.
#[derive(Default)]
pub(super) struct Symbols {
    /// The files the names lie in (the module's, or a debug file's; also its MiniDebugInfo's).
    images: Vec<Image>,
    entries: Vec<Symbol>,
}

struct Symbol {
    address: u64,
    /// Where `sizeless`, how far it may reach: to its section's end, at most [`MAX_SIZELESS`].
    size: u64,
    /// The table gave it no size: it covers the addresses up to the next symbol, within `size`.
    sizeless: bool,
    /// Offset of the name in its image.
    name: usize,
    name_len: u32,
    /// Which of the images the name lies in.
    image: u32,
}

impl Symbols {
    /// The defined function symbols of `table`, read from `image` (parsed as `file`, whose
    /// sections bound its symbols without a size).
    pub(super) fn from_table<'data>(
        image: &Image,
        file: &object::File<'data>,
        table: Option<object::read::SymbolTable<'data, '_>>,
    ) -> Symbols {
        let Some(table) = table else {
            return Symbols::default();
        };
        let base = image.as_ptr() as usize;
        // (rank, symbol): at one address, sized symbols over sizeless ones, then globals over
        // weak symbols over locals.
        let mut entries: Vec<(u8, Symbol)> = table
            .symbols()
            .filter(|symbol| {
                symbol.kind() == SymbolKind::Text && symbol.is_definition() && symbol.address() != 0
            })
            .filter_map(|symbol| {
                let (address, sizeless) = (symbol.address(), symbol.size() == 0);
                let size = match sizeless {
                    false => symbol.size(),
                    true => {
                        let section = file.section_by_index(symbol.section_index()?).ok()?;
                        let end = section.address().checked_add(section.size())?;
                        (section.address() <= address && address < end)
                            .then(|| (end - address).min(MAX_SIZELESS))?
                    }
                };
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
                } + if sizeless { 3 } else { 0 };
                Some((
                    rank,
                    Symbol {
                        address,
                        size,
                        sizeless,
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

    /// The raw name of the symbol nearest at or below `svma` whose size covers it; where none
    /// does, the nearest symbol at or below it if that one has no size (it covers the addresses
    /// up to the next symbol, as perf and gdb take it, within its section and
    /// [`MAX_SIZELESS`]). A sample in
    /// the C runtime's `__do_global_dtors_aux`, sizeless in every table, at a program's exit,
    /// stayed `module+0x1366` in a MiniDebugInfo test (1 suite run in 4).
    pub(super) fn lookup(&self, svma: u64) -> Option<&[u8]> {
        let after = self
            .entries
            .partition_point(|symbol| symbol.address <= svma);
        let below = &self.entries[..after];
        let sized = (below.iter().rev().take(MAX_SYMBOLS_BACK))
            .find(|symbol| !symbol.sizeless && svma - symbol.address < symbol.size);
        let symbol = sized.or_else(|| {
            (below.last()).filter(|symbol| symbol.sizeless && svma - symbol.address < symbol.size)
        })?;
        let image = self.images.get(symbol.image as usize)?;
        image.get(symbol.name..symbol.name + symbol.name_len as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Symbols at (address, size; 0: none, reaching [`MAX_SIZELESS`]), named "s<address>" in one
    /// image.
    fn symbols(table: &[(u64, u64)]) -> Symbols {
        let mut names = Vec::new();
        let entries = (table.iter())
            .map(|&(address, size)| {
                let name = format!("s{address:x}");
                let symbol = Symbol {
                    address,
                    size: if size == 0 { MAX_SIZELESS } else { size },
                    sizeless: size == 0,
                    name: names.len(),
                    name_len: name.len() as u32,
                    image: 0,
                };
                names.extend_from_slice(name.as_bytes());
                symbol
            })
            .collect();
        Symbols {
            images: vec![Image::from_vec(names)],
            entries,
        }
    }

    fn name(symbols: &Symbols, svma: u64) -> Option<String> {
        (symbols.lookup(svma)).map(|name| String::from_utf8_lossy(name).into_owned())
    }

    #[test]
    fn a_sizeless_symbol_names_the_addresses_no_sized_one_covers_up_to_the_next() {
        // A sized function, a sizeless one, a sized one nested in a larger sized one, then a
        // sizeless one last.
        let symbols = symbols(&[
            (0x100, 0x20),
            (0x140, 0),
            (0x180, 0x80),
            (0x190, 0x10),
            (0x300, 0),
        ]);
        assert_eq!(name(&symbols, 0x110).as_deref(), Some("s100"));
        // Past the sized one's end: not its, nor the sizeless one's after it.
        assert_eq!(name(&symbols, 0x130), None);
        assert_eq!(name(&symbols, 0x140).as_deref(), Some("s140"));
        assert_eq!(name(&symbols, 0x166).as_deref(), Some("s140"));
        assert_eq!(name(&symbols, 0x195).as_deref(), Some("s190"));
        // Past the nested one, still in the one around it.
        assert_eq!(name(&symbols, 0x1a0).as_deref(), Some("s180"));
        // After the sized ones end, the nearest below has a size: nothing.
        assert_eq!(name(&symbols, 0x220), None);
        assert_eq!(
            name(&symbols, 0x300 + MAX_SIZELESS - 1).as_deref(),
            Some("s300")
        );
        assert_eq!(name(&symbols, 0x300 + MAX_SIZELESS), None);
        assert_eq!(name(&symbols, 0xff), None);
    }
}
