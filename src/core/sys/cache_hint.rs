//! Cache prefetch hints: ask the CPU to start loading the cache line holding a value.
//! They change no program state and cannot fault; off x86-64 they do nothing.

/// Into the first-level cache, for a value read within a few dozen instructions.
#[inline(always)]
pub(crate) fn to_l1<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    hint::<{ std::arch::x86_64::_MM_HINT_T0 }, T>(value);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn hint<const LEVEL: i32, T>(value: &T) {
    // SAFETY: a prefetch is only a hint: it reads nothing into the program, cannot fault,
    // and the pointer comes from a live reference anyway.
    unsafe { std::arch::x86_64::_mm_prefetch::<LEVEL>((value as *const T).cast::<i8>()) }
}
