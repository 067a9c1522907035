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

/// Into the first-level cache, the line at `address`: for a place about to be written
/// that holds no value yet, such as the end of a buffer's bytes. Any address will do,
/// even one past an allocation: nothing is read from it into the program.
#[inline(always)]
pub(crate) fn address_to_l1(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it reads nothing into the program and cannot
    // fault, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast::<i8>())
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
