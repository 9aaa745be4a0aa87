//! Process settings that make training these small models cheap.
//!
//! The models are tiny (tensors of a few hundred KiB), so candle's per-op costs
//! outweigh the arithmetic, and two of them come from the process, not the
//! model:
//!
//! * candle asks the OS for the CPU count on every matrix product unless
//!   `RAYON_NUM_THREADS` is set, and spreads tiny products over every core;
//!   one thread is what they want (and makes results independent of the core
//!   count);
//! * glibc serves allocations above its mmap threshold (128 KiB, raised only
//!   as big chunks are freed) with fresh mappings, and returns freed heap to
//!   the OS above its trim threshold: nearly every op's output then costs page
//!   faults and zeroing of new pages. A duration predictor's training period
//!   (17 sub-predictors, 5 Adam steps) took 28-30 ms per resource with glibc's
//!   defaults and 18-19 ms with the thresholds below (`scripts/bench-predict.sh`),
//!   for about 110 MB of resident memory in that benchmark either way.
//!
//! A library must not change these behind its caller's back, so binaries that
//! train (the daemon, `flexssd sim predict`, the benchmarks) call
//! [`tune_process_for_training`] once, at their start.

/// glibc keeps up to this much freed memory at the top of the heap instead of
/// returning it to the OS.
pub const TRIM_THRESHOLD: usize = 64 << 20;
/// Extra heap glibc asks the OS for when it grows the heap.
pub const TOP_PAD: usize = 16 << 20;
/// Allocations below this come from the heap, not from fresh mappings.
pub const MMAP_THRESHOLD: usize = 32 << 20;

/// Sets `RAYON_NUM_THREADS=1` unless the environment sets it, and (on glibc)
/// the allocator thresholds above. Call once at the start of `main`, before
/// any other thread is started (it changes the environment and the
/// process's allocator). Changes only speed and memory retention, never
/// results.
pub fn tune_process_for_training() {
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        // Before any other thread starts: nothing reads the environment
        // concurrently.
        std::env::set_var("RAYON_NUM_THREADS", "1");
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; the values are in
    // range for a 64-bit process.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD as libc::c_int);
        libc::mallopt(libc::M_TOP_PAD, TOP_PAD as libc::c_int);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}
