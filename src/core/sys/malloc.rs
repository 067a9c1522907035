//! How the C allocator treats freed memory (glibc only). The binary's own allocations go
//! to mimalloc (`main.rs`); these settings still govern C libraries' (zstd's contexts)
//! and the library's when another program links it.
//!
//! By default glibc hands any freed block above a threshold (128 KiB, raised as large
//! blocks come and go) straight back to the kernel, and trims its heaps whenever 128 KiB
//! sit free at the top. A load allocates and frees the same large buffers all the time:
//! a Parquet part's writer holds pages and compressed column chunks, freed when the part
//! is finished and allocated again for the next checkpoint's part. Each time, the kernel
//! had to map and zero fresh pages, and unmapping shot down TLB entries on both cores.
//! Measured on the 1 GB benchmark (`--format parquet`): 200,000 page faults and 2.0 s of
//! system time by default, 110,000 and 1.4 s with these settings, for 30 MB more peak
//! memory. CSV loads, whose buffers are recycled already, did not change.

///
/// Parse workers (`--threads`) allocate batches and chunk buffers that other threads
/// free; with an arena per thread, each arena kept its own share of freed memory: peak
/// RSS of the 1 GB load grew from 37 MiB (one thread) to 67, 91 and 140 MiB at 2, 4
/// and 8 threads. Two arenas hold it to 57 MiB at 2 threads; allocations are per batch,
/// not per row, so contention on them does not show.
/// Keeps freed memory in the process for reuse: blocks up to 32 MiB come from the heap,
/// up to 256 MiB of free heap stays mapped, in at most two arenas. Call first thing in
/// `main`.
pub(crate) fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters, which glibc reads under its own
    // locks; it has no memory-safety preconditions. A value glibc refuses leaves the
    // default in place (it returns 0), which is harmless.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
