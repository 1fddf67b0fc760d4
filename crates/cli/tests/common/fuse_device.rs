//! /dev/fuse opened to users for a test's duration: shared by the CLI's
//! tests and (through `#[path]`) the example filesystems' tests.

/// /dev/fuse open to every user while any holder lives (as on a desktop
/// distribution, where fusermount3 users reach it), its mode put back
/// after the last: tests in one binary run in parallel, and each saving
/// and restoring the mode on its own would leave it open when two overlap.
pub struct FuseDeviceOpen(());

static FUSE_DEVICE_HOLDERS: std::sync::Mutex<(usize, u32)> = std::sync::Mutex::new((0, 0));

impl FuseDeviceOpen {
    pub fn new() -> FuseDeviceOpen {
        use std::os::unix::fs::PermissionsExt;
        let mut held = FUSE_DEVICE_HOLDERS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if held.0 == 0 {
            held.1 = std::fs::metadata("/dev/fuse").unwrap().permissions().mode() & 0o7777;
            std::fs::set_permissions("/dev/fuse", std::fs::Permissions::from_mode(0o666)).unwrap();
        }
        held.0 += 1;
        FuseDeviceOpen(())
    }
}

impl Drop for FuseDeviceOpen {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        let mut held = FUSE_DEVICE_HOLDERS
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        held.0 -= 1;
        if held.0 == 0 {
            let mode = std::fs::Permissions::from_mode(held.1);
            let _ = std::fs::set_permissions("/dev/fuse", mode);
        }
    }
}
