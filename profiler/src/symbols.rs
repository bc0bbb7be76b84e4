//! Placeholder until the symbolizer lands: `module+0xoffset` names.

use crate::modules::Module;
use crate::profile::NativeFrame;

/// Turns addresses into frames.
pub struct Symbolizer {
    modules: Vec<Module>,
}

impl Symbolizer {
    /// A symbolizer over `modules`.
    pub fn new(modules: &[Module]) -> Symbolizer {
        Symbolizer {
            modules: modules.to_vec(),
        }
    }

    /// The frames at `address`.
    pub fn symbolize(&mut self, address: u64) -> Vec<NativeFrame> {
        let module = self.modules.iter().find(|m| m.range.contains(&address));
        let (function, module) = match module {
            Some(m) => (
                format!("{}+{:#x}", m.name, address.wrapping_sub(m.bias)),
                m.name.clone(),
            ),
            None => (format!("{address:#x}"), String::new()),
        };
        vec![NativeFrame {
            function,
            file: None,
            line: None,
            module,
            inlined: false,
        }]
    }
}
