//! Performance isolation (the GREM paper's Section II-B, its refs [10] and
//! [11]): the flash pool split into equal per-tenant reservations, each
//! filled at epoch ends with its own tenant's most popular bins, so that no
//! tenant can take another's flash.
//!
//! It is vFRM's machinery (1 MiB bins, lazy epochs, 128 KiB lines) with the
//! pool divided, which is how earlier versions of this crate modelled vFRM
//! itself; `vfrm` is now the paper's fair competition over one pool.

use super::vfrm::{Sharing, Vfrm};
use crate::{CacheError, PolicyConfig};

/// Performance isolation: vFRM with equal per-tenant reservations.
#[derive(Debug, Clone)]
pub struct Isolation;

impl Isolation {
    /// A cache of `cache_bytes` (whole bins of `cfg.bin_bytes`).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(cache_bytes: u64, cfg: &PolicyConfig) -> Result<Vfrm, CacheError> {
        Vfrm::with_sharing(cache_bytes, cfg, Sharing::PerTenant)
    }
}
