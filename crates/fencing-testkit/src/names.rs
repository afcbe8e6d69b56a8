//! Random names so runs never collide and can be cleaned up by prefix.

use rand::Rng;

/// A fresh prefix such as `ft-3f9a0c1b`, unique per call.
pub fn unique_prefix() -> String {
    format!("ft-{:08x}", rand::rng().random::<u32>())
}

/// A fresh name under a fresh prefix: `ft-3f9a0c1b/<what>`.
pub fn unique_name(what: &str) -> String {
    format!("{}/{what}", unique_prefix())
}
