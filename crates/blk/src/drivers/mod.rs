//! The drivers fusebox ships: `ram` (memory that outlives the driver
//! process), `file` (an image file or partition, O_DIRECT), `null` (reads
//! zeros, drops writes: what the framework costs) and `timing` (a
//! simulated SSD or HDD, after BDUS and TimingFS).

mod backed;
mod null;
mod timing;

pub use backed::{create_memory, FileDriver, RamDriver};
pub use null::NullDriver;
pub use timing::{TimingDriver, TimingProfile};
