//! zstd contexts kept for reuse when a compressor or decompressor is dropped, instead of
//! freed and made anew for the next one (Linux only).
//!
//! Why: parquet-rs makes a zstd compressor and a decompressor (which the writer never
//! uses) for every column chunk it writes, and a 4,000-partition Parquet load writes
//! 40,000 column chunks. Making a context runs `cpuid` (zstd asks the CPU for BMI2 each
//! time), and on a virtual machine each `cpuid` traps to the hypervisor:
//! `ZSTD_createCCtx` and `ZSTD_createDCtx` were 8.8% of all samples of that load (`perf
//! record -a`), a third of the encoder threads' time. zstd's own advice is to reuse
//! contexts; a reset to defaults (`ZSTD_reset_session_and_parameters`, which also drops
//! any dictionary) makes a used context the same as a new one.
//!
//! How: the linker routes every call to the four functions below to the `__wrap_`
//! versions here (`--wrap`, set by `src/build.rs` for every target linked on Linux), and
//! `__real_…` reaches zstd's own. A dropped context is reset and kept by the thread
//! that dropped it, while its kept ones fit in a budget; the thread's next create takes
//! one back. A context that cannot be reset is freed. A 4,000-partition Parquet load of
//! 2,000,000 orders: 2.33 s and 4.02 CPU-seconds before, 2.02 s and 3.38 after (medians
//! of 6 alternated runs), peak RSS 488 and 492 MiB.
//!
//! What it relies on: every context freed through `ZSTD_freeCCtx` / `ZSTD_freeDCtx` came
//! from the plain constructors, with zstd's default allocator. A static context
//! (`ZSTD_initStatic*`) or one with a custom allocator (`ZSTD_create*_advanced`) must
//! never be kept and handed out again; no crate in the build makes either (zstd-safe
//! calls only `ZSTD_createCCtx` and `ZSTD_createDCtx`; checked 2026-12-07 by grepping
//! the dependencies' sources). A dependency that starts to must be checked here.

use std::cell::RefCell;
use std::ptr::NonNull;
use std::thread::LocalKey;

use zstd::zstd_safe::zstd_sys::{
    ZSTD_CCtx, ZSTD_CCtx_reset, ZSTD_DCtx, ZSTD_DCtx_reset, ZSTD_ResetDirective, ZSTD_isError,
    ZSTD_sizeof_CCtx, ZSTD_sizeof_DCtx,
};

/// Memory the compression contexts kept by one thread may hold in all. One that has
/// only seen pages of a few KiB holds tens of KiB; one that has streamed a file at level
/// 3 holds a few MiB and is kept only while it fits.
const KEEP_COMPRESSORS: usize = 8 << 20;

/// The same for decompression contexts (about 100 KiB each, more after streaming).
const KEEP_DECOMPRESSORS: usize = 2 << 20;

extern "C" {
    fn __real_ZSTD_createCCtx() -> *mut ZSTD_CCtx;
    fn __real_ZSTD_freeCCtx(cctx: *mut ZSTD_CCtx) -> usize;
    fn __real_ZSTD_createDCtx() -> *mut ZSTD_DCtx;
    fn __real_ZSTD_freeDCtx(dctx: *mut ZSTD_DCtx) -> usize;
}

/// A context no one uses, reset to defaults, and its size.
struct Kept<T>(NonNull<T>, usize);

/// Contexts of one kind kept for reuse by one thread, within a budget of bytes. Per
/// thread: no lock, and a context goes back to the thread (and core) that last used it.
/// One shelf behind a mutex for all threads was as fast (2.04 s against 2.02 s, median
/// of 6 alternated 4,000-partition Parquet loads) and peaked 5 MiB higher.
struct Shelf<T> {
    kept: Vec<Kept<T>>,
    bytes: usize,
    budget: usize,
    /// zstd's own destructor, for what the thread still keeps when it ends.
    free: unsafe extern "C" fn(*mut T) -> usize,
}

impl<T> Shelf<T> {
    const fn new(budget: usize, free: unsafe extern "C" fn(*mut T) -> usize) -> Self {
        Shelf {
            kept: Vec::new(),
            bytes: 0,
            budget,
            free,
        }
    }

    fn take(&mut self) -> Option<NonNull<T>> {
        let Kept(context, size) = self.kept.pop()?;
        self.bytes -= size;
        Some(context)
    }

    /// Keeps `context` (reset, of `size` bytes) if it fits in the budget; gives it back
    /// otherwise, for the caller to free.
    fn keep(&mut self, context: NonNull<T>, size: usize) -> Option<NonNull<T>> {
        if self.bytes + size > self.budget {
            return Some(context);
        }
        self.bytes += size;
        self.kept.push(Kept(context, size));
        None
    }
}

impl<T> Drop for Shelf<T> {
    fn drop(&mut self) {
        for Kept(context, _) in self.kept.drain(..) {
            // SAFETY: a kept context is owned by the shelf alone.
            unsafe { (self.free)(context.as_ptr()) };
        }
    }
}

thread_local! {
    static COMPRESSORS: RefCell<Shelf<ZSTD_CCtx>> =
        const { RefCell::new(Shelf::new(KEEP_COMPRESSORS, __real_ZSTD_freeCCtx)) };
    static DECOMPRESSORS: RefCell<Shelf<ZSTD_DCtx>> =
        const { RefCell::new(Shelf::new(KEEP_DECOMPRESSORS, __real_ZSTD_freeDCtx)) };
}

/// A context kept by this thread, or a new one from `make` (also while the thread ends
/// and its shelf is gone).
fn create<T: 'static>(
    shelf: &'static LocalKey<RefCell<Shelf<T>>>,
    make: unsafe extern "C" fn() -> *mut T,
) -> *mut T {
    let kept = shelf.try_with(|shelf| shelf.try_borrow_mut().ok().and_then(|mut s| s.take()));
    match kept.ok().flatten() {
        Some(context) => context.as_ptr(),
        // SAFETY: zstd's own constructor; it returns null when out of memory, which the
        // caller handles as it would from zstd.
        None => unsafe { make() },
    }
}

/// Resets `context` and keeps it on `shelf`, or frees it with `free` if it cannot be
/// reset or does not fit.
///
/// # Safety
/// `context` is null or a live context of the kind the functions take, which no one
/// uses after this call.
unsafe fn release<T: 'static>(
    shelf: &'static LocalKey<RefCell<Shelf<T>>>,
    context: *mut T,
    reset: unsafe extern "C" fn(*mut T, ZSTD_ResetDirective) -> usize,
    size: unsafe extern "C" fn(*const T) -> usize,
    free: unsafe extern "C" fn(*mut T) -> usize,
) -> usize {
    let Some(live) = NonNull::new(context) else {
        return 0;
    };
    // SAFETY: a live context (the caller's promise): reset reinitialises it, sizeof
    // reads it, ZSTD_isError only classifies a return code.
    let reset = unsafe {
        ZSTD_isError(reset(
            context,
            ZSTD_ResetDirective::ZSTD_reset_session_and_parameters,
        ))
    };
    let left = if reset == 0 {
        // SAFETY: as above.
        let bytes = unsafe { size(context) };
        shelf
            .try_with(|shelf| match shelf.try_borrow_mut() {
                Ok(mut shelf) => shelf.keep(live, bytes),
                Err(_) => Some(live),
            })
            .unwrap_or(Some(live))
    } else {
        Some(live)
    };
    match left {
        None => 0,
        // SAFETY: the caller gave the context up, and the shelf did not take it.
        Some(live) => unsafe { free(live.as_ptr()) },
    }
}

/// `ZSTD_createCCtx`: a compression context kept by this thread, or a new one.
#[no_mangle]
pub extern "C" fn __wrap_ZSTD_createCCtx() -> *mut ZSTD_CCtx {
    create(&COMPRESSORS, __real_ZSTD_createCCtx)
}

/// `ZSTD_freeCCtx`: keeps the context, reset to defaults, for the next create, or frees it.
///
/// # Safety
/// As `ZSTD_freeCCtx`: `cctx` is null or a context from `ZSTD_createCCtx` that no one
/// uses after this call.
#[no_mangle]
pub unsafe extern "C" fn __wrap_ZSTD_freeCCtx(cctx: *mut ZSTD_CCtx) -> usize {
    // SAFETY: the caller's promise.
    unsafe {
        release(
            &COMPRESSORS,
            cctx,
            ZSTD_CCtx_reset,
            ZSTD_sizeof_CCtx,
            __real_ZSTD_freeCCtx,
        )
    }
}

/// `ZSTD_createDCtx`: a decompression context kept by this thread, or a new one.
#[no_mangle]
pub extern "C" fn __wrap_ZSTD_createDCtx() -> *mut ZSTD_DCtx {
    create(&DECOMPRESSORS, __real_ZSTD_createDCtx)
}

/// `ZSTD_freeDCtx`: keeps the context, reset to defaults, for the next create, or frees it.
///
/// # Safety
/// As `ZSTD_freeDCtx`: `dctx` is null or a context from `ZSTD_createDCtx` that no one
/// uses after this call.
#[no_mangle]
pub unsafe extern "C" fn __wrap_ZSTD_freeDCtx(dctx: *mut ZSTD_DCtx) -> usize {
    // SAFETY: the caller's promise.
    unsafe {
        release(
            &DECOMPRESSORS,
            dctx,
            ZSTD_DCtx_reset,
            ZSTD_sizeof_DCtx,
            __real_ZSTD_freeDCtx,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Contexts are taken back (the wrap is linked into the test binary too) and a
    /// reused one compresses and decompresses as a new one: the same frames, byte for
    /// byte, at another level, and no trace of an earlier dictionary or parameter.
    #[test]
    fn a_reused_context_behaves_as_a_new_one() {
        let text: Vec<u8> = (0..20_000u32)
            .flat_map(|i| format!("{i},order-{},{}\n", i % 977, i % 13).into_bytes())
            .collect();
        let fresh = zstd::bulk::compress(&text, 3).expect("compress");
        let fresh_19 = zstd::bulk::compress(&text, 19).expect("compress");
        for _ in 0..3 {
            // A compressor with a dictionary and a checksum, dropped: its context is kept.
            let dict = zstd::dict::from_samples(&[&text[..40_000], &text[40_000..80_000]], 4096)
                .unwrap_or_else(|_| text[..4096].to_vec());
            let mut with_dict =
                zstd::bulk::Compressor::with_dictionary(1, &dict).expect("compressor");
            with_dict.include_checksum(true).expect("checksum");
            with_dict.compress(&text).expect("compress");
            drop(with_dict);
            // (assert!, not assert_eq!: a failure would print both frames whole)
            let again = zstd::bulk::compress(&text, 3).expect("compress");
            assert!(again == fresh, "a reused context made another frame");
            let again_19 = zstd::bulk::compress(&text, 19).expect("compress");
            assert!(again_19 == fresh_19, "a reused context made another frame");
            let mut streamed = zstd::stream::write::Encoder::new(Vec::new(), 3).expect("encoder");
            streamed.write_all(&text).expect("write");
            let frame = streamed.finish().expect("finish");
            let mut back = Vec::new();
            zstd::stream::read::Decoder::new(&frame[..])
                .expect("decoder")
                .read_to_end(&mut back)
                .expect("decode");
            assert!(back == text, "a reused context decoded another text");
            let decoded = zstd::bulk::decompress(&fresh, text.len()).expect("decompress");
            assert!(decoded == text, "a reused context decoded another text");
        }
    }

    #[test]
    fn the_shelf_keeps_contexts_within_its_budget_and_hands_each_out_once() {
        unsafe extern "C" fn forget(_: *mut u64) -> usize {
            0
        }
        let mut shelf: Shelf<u64> = Shelf::new(100, forget);
        let (mut a, mut b, mut c) = (1u64, 2u64, 3u64);
        let (a, b, c) = (
            NonNull::from(&mut a),
            NonNull::from(&mut b),
            NonNull::from(&mut c),
        );
        assert_eq!(shelf.keep(a, 60), None);
        assert_eq!(
            shelf.keep(b, 41),
            Some(b),
            "over the budget: the caller frees it"
        );
        assert_eq!(shelf.keep(c, 40), None);
        assert_eq!(shelf.bytes, 100);
        assert_eq!(shelf.take(), Some(c));
        assert_eq!(shelf.bytes, 60);
        assert_eq!(shelf.keep(b, 40), None);
        assert_eq!(shelf.take(), Some(b));
        assert_eq!(shelf.take(), Some(a));
        assert_eq!(shelf.take(), None);
        assert_eq!(shelf.bytes, 0);
    }

    /// How many contexts this thread keeps of each kind.
    fn kept() -> (usize, usize) {
        (
            COMPRESSORS.with(|shelf| shelf.borrow().kept.len()),
            DECOMPRESSORS.with(|shelf| shelf.borrow().kept.len()),
        )
    }

    #[test]
    fn a_thread_keeps_the_contexts_it_frees_and_gets_them_back() {
        let (compressors, decompressors) = kept();
        let cctx = __wrap_ZSTD_createCCtx();
        let dctx = __wrap_ZSTD_createDCtx();
        assert!(!cctx.is_null() && !dctx.is_null());
        // SAFETY: contexts from create, given up here.
        unsafe {
            assert_eq!(__wrap_ZSTD_freeCCtx(cctx), 0);
            assert_eq!(__wrap_ZSTD_freeDCtx(dctx), 0);
        }
        assert_eq!(
            kept(),
            (compressors + 1, decompressors + 1),
            "kept, not freed"
        );
        assert_eq!(__wrap_ZSTD_createCCtx(), cctx);
        assert_eq!(__wrap_ZSTD_createDCtx(), dctx);
        assert_eq!(kept(), (compressors, decompressors));
        // SAFETY: as above.
        unsafe {
            __wrap_ZSTD_freeCCtx(cctx);
            __wrap_ZSTD_freeDCtx(dctx);
        }
    }

    #[test]
    fn a_shelf_frees_what_it_keeps_when_its_thread_ends() {
        static FREED: AtomicUsize = AtomicUsize::new(0);
        unsafe extern "C" fn count(_: *mut u64) -> usize {
            FREED.fetch_add(1, Ordering::Relaxed);
            0
        }
        let (mut a, mut b) = (1u64, 2u64);
        let mut shelf: Shelf<u64> = Shelf::new(100, count);
        assert_eq!(shelf.keep(NonNull::from(&mut a), 10), None);
        assert_eq!(shelf.keep(NonNull::from(&mut b), 10), None);
        drop(shelf);
        assert_eq!(FREED.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn freeing_null_is_allowed_as_in_zstd() {
        // SAFETY: null is the one pointer ZSTD_free*Ctx documents as a no-op.
        unsafe {
            assert_eq!(__wrap_ZSTD_freeCCtx(std::ptr::null_mut()), 0);
            assert_eq!(__wrap_ZSTD_freeDCtx(std::ptr::null_mut()), 0);
        }
    }
}
