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
