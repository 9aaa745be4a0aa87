//! Shared SSD cache management (work in progress).
