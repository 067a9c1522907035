//! Link settings that no attribute can express: on Linux, calls to zstd's context
//! constructors and destructors go to `src/core/sys/zstd_contexts.rs`, which keeps
//! contexts for reuse (`--wrap`: the linker resolves `ZSTD_createCCtx` to
//! `__wrap_ZSTD_createCCtx`, and `__real_ZSTD_createCCtx` to zstd's own).

fn main() {
    println!("cargo:rerun-if-changed=src/build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        for function in [
            "ZSTD_createCCtx",
            "ZSTD_freeCCtx",
            "ZSTD_createDCtx",
            "ZSTD_freeDCtx",
        ] {
            println!("cargo:rustc-link-arg=-Wl,--wrap={function}");
        }
    }
}
