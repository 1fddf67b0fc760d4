use crate::driver::{BlkError, BlockDriver, Capabilities, Geometry};

/// Reads zeros, accepts and drops writes, trims and flushes at once: a
/// device that costs nothing, so what is measured is fusebox and the path
/// through the kernel.
pub struct NullDriver {
    geometry: Geometry,
}

impl NullDriver {
    pub fn new(geometry: Geometry) -> NullDriver {
        NullDriver { geometry }
    }
}

impl BlockDriver for NullDriver {
    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            write: true,
            flush: true,
            trim: true,
            trim_zeroes: true,
            write_zeroes: true,
            answers_later: false,
        }
    }

    fn read(&self, _: u64, buf: &mut [u8]) -> Result<(), BlkError> {
        buf.fill(0);
        Ok(())
    }

    fn write(&self, _: u64, _: &[u8]) -> Result<(), BlkError> {
        Ok(())
    }

    fn trim(&self, _: u64, _: u64) -> Result<(), BlkError> {
        Ok(())
    }

    fn write_zeroes(&self, _: u64, _: u64) -> Result<(), BlkError> {
        Ok(())
    }
}
