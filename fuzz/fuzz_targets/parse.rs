//! Any bytes the kernel (or an attacker with the device fd) could send go
//! through the parser and the dispatcher into a real filesystem: nothing
//! may panic. Replies go to a sink that checks their framing.
#![no_main]

use std::sync::{Arc, OnceLock};

use fusebox::dispatch::{Dispatcher, Worker};
use fusebox::protocol::{DataOut, Notifier, ParseConfig, ReplySink};
use fusebox::stats::WorkerStats;
use fusebox::Timeouts;
use fusebox_examples::MemFs;
use libfuzzer_sys::fuzz_target;

struct CheckFraming;

impl ReplySink for CheckFraming {
    fn send(&self, parts: &[&[u8]]) -> std::io::Result<()> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let declared = u32::from_le_bytes(parts[0][..4].try_into().unwrap()) as usize;
        assert_eq!(declared, total, "reply length field must match the bytes sent");
        Ok(())
    }
}

fn dispatcher() -> &'static Dispatcher<MemFs> {
    static D: OnceLock<Dispatcher<MemFs>> = OnceLock::new();
    D.get_or_init(|| {
        let notifier = Notifier::for_sink(Arc::new(CheckFraming));
        Dispatcher::new(Arc::new(MemFs::new(Timeouts::default())), ParseConfig::default(), notifier, 1)
    })
}

fuzz_target!(|data: &[u8]| {
    let mut w = Worker::new(DataOut::with_capacity(1 << 16), Arc::new(WorkerStats::new("fuzz")), 0);
    dispatcher().dispatch_contiguous(data, &mut w, &CheckFraming);
    let _ = fusebox::protocol::parse_contiguous(data, ParseConfig { setxattr_ext: true });
});
