//! Run `start` when the loader maps this library, before the program's
//! `main` and before it can start threads (interception covers the
//! threads created after it is installed).

#![allow(unsafe_code)]

extern "C" fn on_load() {
    super::start();
}

// SAFETY: an .init_array entry is a function the loader calls once, with
// no arguments, after relocating this library; `on_load` has that shape
// and touches nothing that needs the program's own initialisation.
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;

extern "C" fn on_exit() {
    super::at_exit();
}

/// Run `at_exit` when the program exits normally.
pub(crate) fn call_at_exit() {
    // SAFETY: registers a function of the shape atexit wants; it runs
    // once, at exit, on the exiting thread.
    unsafe {
        libc::atexit(on_exit);
    }
}
