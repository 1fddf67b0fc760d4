//! The shared library's identity: the SONAME Debian's binaries ask the
//! loader for, and the symbol version nodes of libfuse 3.14 (FUSE_3.0 ..
//! FUSE_3.12), to which `src/ffi` binds each exported function with a
//! `.symver` directive. The variadic logging functions are C
//! (`csrc/log.c`: stable Rust cannot define a variadic function).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
    println!("cargo:rerun-if-changed=libfuse3.map");
    println!("cargo:rerun-if-changed=csrc/log.c");
    cc::Build::new()
        .file("csrc/log.c")
        .warnings(true)
        .compile("fusebox_libfuse3_log");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfuse3.so.3");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/libfuse3.map");
}
