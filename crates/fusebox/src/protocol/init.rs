//! INIT negotiation.

use fusebox_abi as abi;
use fusebox_abi::flags::init as f;

use crate::error::Error;

/// What the kernel offers and what this session asks for. A filesystem may
/// adjust it in `Filesystem::init`; libfuse users know it as `fuse_conn_info`.
/// Serializable: a supervised mount keeps it for the servers after the
/// first, which never see INIT.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Connection {
    /// The minor protocol version in use (min of ours and the kernel's).
    pub proto_minor: u32,
    /// Capability flags the kernel offered.
    pub kernel_flags: u64,
    /// Flags we will ask for; only those the kernel offered take effect.
    pub want: u64,
    /// Flags the user turned off (`-o no_...`): `enable` leaves them off,
    /// so a mount option wins over a filesystem's own preference.
    pub refused: u64,
    /// Largest WRITE payload in bytes; the reply clamps it to 4 KiB..1 MiB.
    pub max_write: u32,
    /// Largest READ the kernel sends, as the `max_read` mount option set it.
    pub max_read: u32,
    /// Most readahead in bytes: the kernel's offer, lowered to what the
    /// session asked for.
    pub max_readahead: u32,
    /// Most background requests (readahead, writeback) the kernel keeps
    /// outstanding.
    pub max_background: u16,
    /// Outstanding background requests past which the kernel reports the
    /// mount congested.
    pub congestion_threshold: u16,
    /// Granularity of the filesystem's timestamps in nanoseconds (1: full
    /// precision).
    pub time_gran: u32,
    /// Passthrough stacking depth (1 for a filesystem over a local one).
    pub max_stack_depth: u32,
    /// Seconds before the kernel aborts an unanswered request; 0 = never.
    pub request_timeout: u16,
}

impl Connection {
    /// Whether the kernel offered `flag`, whatever is asked for.
    pub fn kernel_offers(&self, flag: u64) -> bool {
        self.kernel_flags & flag != 0
    }

    /// Ask for `flag`; returns whether it will be in force: the kernel
    /// offers it and the user did not refuse it.
    pub fn enable(&mut self, flag: u64) -> bool {
        if self.refused & flag != 0 {
            return false;
        }
        self.want |= flag;
        self.kernel_offers(flag)
    }

    /// Stop asking for `flag`.
    pub fn disable(&mut self, flag: u64) {
        self.want &= !flag;
    }

    /// Whether `flag` is in force after negotiation.
    pub fn has(&self, flag: u64) -> bool {
        self.want & self.kernel_flags & flag != 0
    }

    /// The flags in force, as names.
    pub fn flag_names(&self) -> Vec<&'static str> {
        let on = self.want & self.kernel_flags;
        f::NAMES
            .iter()
            .filter(|(b, _)| on & b != 0)
            .map(|(_, n)| *n)
            .collect()
    }
}

/// What a session asks for before the filesystem has its say.
#[derive(Clone, Debug)]
pub struct InitConfig {
    /// Largest WRITE payload asked for (`-o max_write`).
    pub max_write: u32,
    /// Largest READ, as the `max_read` mount option sets it.
    pub max_read: u32,
    /// Readahead in bytes (`-o max_readahead`); `None` takes the kernel's
    /// offer.
    pub max_readahead: Option<u32>,
    /// Background requests the kernel may keep outstanding.
    pub max_background: u16,
    /// Where congestion starts; `None` for three quarters of
    /// `max_background`.
    pub congestion_threshold: Option<u16>,
    /// INIT flags to ask for, before the filesystem has its say.
    pub want: u64,
    /// Flags the user turned off explicitly (see [`Connection::refused`]).
    pub refused: u64,
}

impl InitConfig {
    /// Ask for `flags` (undoing an earlier refusal).
    pub fn ask(&mut self, flags: u64) {
        self.want |= flags;
        self.refused &= !flags;
    }

    /// Never ask for `flags`, whatever the filesystem prefers.
    pub fn refuse(&mut self, flags: u64) {
        self.want &= !flags;
        self.refused |= flags;
    }
}

impl Default for InitConfig {
    fn default() -> Self {
        InitConfig {
            max_write: 1 << 20,
            max_read: 1 << 20,
            max_readahead: None,
            max_background: 64,
            congestion_threshold: None,
            // Not ATOMIC_O_TRUNC: with it the kernel sends O_TRUNC in OPEN
            // before it checks that nobody is executing the file, so an
            // O_RDONLY|O_TRUNC open of a running program truncates it and
            // still fails with ETXTBSY. Without it the kernel truncates with
            // a SETATTR after that check: two more round trips per O_TRUNC
            // open of an existing file (the SETATTR, and a GETXATTR
            // security.capability before the next write, since the reply
            // refreshes the attributes); `-o atomic_o_trunc` trades back.
            want: f::ASYNC_READ
                | f::BIG_WRITES
                | f::HAS_IOCTL_DIR
                | f::AUTO_INVAL_DATA
                | f::ASYNC_DIO
                | f::PARALLEL_DIROPS
                | f::MAX_PAGES
                | f::CACHE_SYMLINKS
                | f::DO_READDIRPLUS
                | f::READDIRPLUS_AUTO
                | f::SETXATTR_EXT
                | f::INIT_EXT
                | f::DIRECT_IO_ALLOW_MMAP,
            refused: 0,
        }
    }
}

/// The outcome of reading an INIT request.
pub enum InitStep {
    /// The kernel speaks a newer major version: answer with ours and wait
    /// for another INIT.
    Retry(abi::InitOut),
    /// Negotiation can go ahead at this minor version.
    Proceed(Connection),
}

/// First half of INIT: check versions and build the [`Connection`] the
/// filesystem will see.
pub fn begin(init: &abi::InitIn, cfg: &InitConfig) -> Result<InitStep, Error> {
    if init.major > abi::KERNEL_VERSION {
        return Ok(InitStep::Retry(abi::InitOut {
            major: abi::KERNEL_VERSION,
            minor: abi::KERNEL_MINOR_VERSION,
            ..Default::default()
        }));
    }
    if init.major < abi::KERNEL_VERSION || init.minor < abi::MIN_KERNEL_MINOR {
        return Err(Error::UnsupportedKernel {
            major: init.major,
            minor: init.minor,
            min: abi::MIN_KERNEL_MINOR,
        });
    }
    let mut kernel_flags = init.flags as u64;
    if kernel_flags & f::INIT_EXT != 0 {
        kernel_flags |= (init.flags2 as u64) << 32;
    }
    let max_readahead = cfg
        .max_readahead
        .map_or(init.max_readahead, |r| r.min(init.max_readahead));
    Ok(InitStep::Proceed(Connection {
        proto_minor: init.minor.min(abi::KERNEL_MINOR_VERSION),
        kernel_flags,
        want: cfg.want & !cfg.refused,
        refused: cfg.refused,
        max_write: cfg.max_write,
        max_read: cfg.max_read,
        max_readahead,
        max_background: cfg.max_background,
        congestion_threshold: cfg
            .congestion_threshold
            .unwrap_or(cfg.max_background * 3 / 4),
        time_gran: 1,
        max_stack_depth: 0,
        request_timeout: 0,
    }))
}

/// Second half: the reply, after the filesystem adjusted `conn`.
pub fn finish(conn: &mut Connection) -> abi::InitOut {
    let page = 4096u32;
    let max_write = conn.max_write.clamp(page, abi::MAX_MAX_PAGES * page);
    conn.max_write = max_write;
    // A filesystem may have set `want` directly; the user's no_ still wins.
    conn.want &= !conn.refused;
    let mut on = conn.want & conn.kernel_flags;
    if on & f::PASSTHROUGH != 0 && conn.max_stack_depth == 0 {
        conn.max_stack_depth = 1;
    }
    if on & f::PASSTHROUGH == 0 {
        conn.max_stack_depth = 0;
    } else {
        // The kernel refuses passthrough together with writeback cache.
        on &= !f::WRITEBACK_CACHE;
    }
    // INIT_EXT tells the kernel to read flags2; always set it when offered.
    if conn.kernel_flags & f::INIT_EXT != 0 {
        on |= f::INIT_EXT;
    }
    conn.want = on;
    abi::InitOut {
        major: abi::KERNEL_VERSION,
        minor: conn.proto_minor,
        max_readahead: conn.max_readahead,
        flags: on as u32,
        max_background: conn.max_background,
        congestion_threshold: conn.congestion_threshold,
        max_write,
        time_gran: conn.time_gran,
        max_pages: max_write.div_ceil(page) as u16,
        map_alignment: 0,
        flags2: (on >> 32) as u32,
        max_stack_depth: conn.max_stack_depth,
        request_timeout: if on & f::REQUEST_TIMEOUT != 0 {
            conn.request_timeout
        } else {
            0
        },
        unused: [0; 11],
    }
}

/// The reply length the kernel expects for its minor version.
pub fn reply_len(minor: u32) -> usize {
    if minor < 23 {
        abi::COMPAT_22_INIT_OUT_SIZE
    } else {
        size_of::<abi::InitOut>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(minor: u32, flags: u64) -> abi::InitIn {
        abi::InitIn {
            major: 7,
            minor,
            max_readahead: 131072,
            flags: flags as u32,
            flags2: (flags >> 32) as u32,
            unused: [0; 11],
        }
    }

    #[test]
    fn negotiates_down_to_the_kernel_minor() {
        let InitStep::Proceed(mut c) = begin(
            &kernel(31, f::ASYNC_READ | f::BIG_WRITES),
            &InitConfig::default(),
        )
        .unwrap() else {
            panic!("expected proceed")
        };
        let out = finish(&mut c);
        assert_eq!(out.minor, 31);
        assert_eq!(out.flags as u64, f::ASYNC_READ | f::BIG_WRITES);
        assert_eq!(out.flags2, 0, "no flags2 without INIT_EXT");
    }

    #[test]
    fn flags2_only_with_init_ext() {
        let offered = f::INIT_EXT | f::HAS_RESEND | f::PASSTHROUGH | f::WRITEBACK_CACHE;
        let InitStep::Proceed(mut c) = begin(&kernel(45, offered), &InitConfig::default()).unwrap()
        else {
            panic!()
        };
        c.enable(f::PASSTHROUGH);
        c.enable(f::WRITEBACK_CACHE);
        let out = finish(&mut c);
        assert_eq!(out.minor, 45);
        assert_ne!(out.flags as u64 & f::INIT_EXT, 0);
        assert_eq!(out.flags2 as u64, f::PASSTHROUGH >> 32);
        assert_eq!(
            out.flags as u64 & f::WRITEBACK_CACHE,
            0,
            "passthrough excludes writeback cache"
        );
        assert_eq!(out.max_stack_depth, 1);
    }

    #[test]
    fn refuses_old_and_retries_newer_major() {
        assert!(matches!(
            begin(&kernel(30, 0), &InitConfig::default()),
            Err(Error::UnsupportedKernel { .. })
        ));
        let mut k = kernel(0, 0);
        k.major = 8;
        assert!(
            matches!(begin(&k, &InitConfig::default()), Ok(InitStep::Retry(o)) if o.major == 7)
        );
    }

    #[test]
    fn a_refused_flag_stays_off_whatever_the_filesystem_asks() {
        let offered = f::HANDLE_KILLPRIV_V2 | f::WRITEBACK_CACHE;
        let mut cfg = InitConfig::default();
        cfg.refuse(f::HANDLE_KILLPRIV_V2);
        let InitStep::Proceed(mut c) = begin(&kernel(45, offered), &cfg).unwrap() else {
            panic!()
        };
        assert!(!c.enable(f::HANDLE_KILLPRIV_V2));
        assert!(c.enable(f::WRITEBACK_CACHE));
        let out = finish(&mut c);
        assert_eq!(out.flags as u64 & f::HANDLE_KILLPRIV_V2, 0);
        assert_ne!(out.flags as u64 & f::WRITEBACK_CACHE, 0);
    }
}
