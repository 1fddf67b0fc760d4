//! The readahead window a mount asks for is the one the kernel uses, below
//! the kernel's default (through INIT) and above it (through sysfs).

mod common;

use common::{test_options, TestMount};
use fusebox::transport::TransportKind::Classic;

fn read_ahead_kb(m: &TestMount) -> u32 {
    let id = fusebox::mount::fuse_mount_at(&m.mnt)
        .expect("the test mount in mountinfo")
        .connection;
    std::fs::read_to_string(format!("/sys/class/bdi/0:{id}/read_ahead_kb"))
        .expect("the mount's bdi in sysfs")
        .trim()
        .parse()
        .unwrap()
}

fn mounted_with_readahead(bytes: u32) -> TestMount {
    let mut o = test_options();
    o.apply(&format!("max_readahead={bytes}")).unwrap();
    TestMount::memfs_with(Classic, &o)
}

#[test]
fn readahead_window_below_the_kernel_default_comes_from_init() {
    assert_eq!(read_ahead_kb(&mounted_with_readahead(64 << 10)), 64);
}

#[test]
fn readahead_window_above_the_kernel_default_is_set_in_sysfs() {
    let plain = TestMount::memfs_on(Classic);
    let default_kb = read_ahead_kb(&plain);
    let asked_kb = default_kb * 8;
    assert_eq!(
        read_ahead_kb(&mounted_with_readahead(asked_kb << 10)),
        asked_kb
    );
    // Each mount has a window of its own.
    assert_eq!(read_ahead_kb(&plain), default_kb);
}
