//! What an object says about the file it is: s3fs's convention, which
//! s3fs reads and writes and rclone reads (its `mtime`).
//!
//! User metadata (`x-amz-meta-NAME`):
//! - `mode`: the whole `st_mode` in decimal (type bits and permissions);
//! - `uid`, `gid`: decimal;
//! - `mtime`, `ctime`, `atime`: seconds since the epoch, `SEC` or
//!   `SEC.NNNNNNNNN` where there are nanoseconds (rclone reads both; s3fs
//!   1.90 reads the seconds).
//!
//! Keys: a directory is a prefix; an empty directory is kept by a marker
//! object `NAME/` (Content-Type `application/x-directory`). A symlink is
//! an object whose mode says `S_IFLNK` and whose body is the target.
//! An object without metadata (written by another tool) is a regular file
//! of mode `0666 & !umask`, owned by whoever mounted, with the object's
//! Last-Modified as its times.

use std::collections::HashMap;

use fusebox::Timespec;

/// The Content-Type of a directory marker, as s3fs writes it.
pub const DIRECTORY_TYPE: &str = "application/x-directory";

/// A file's kind, permissions, owner and times as objects carry them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    /// `st_mode`, type bits included.
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Data last changed.
    pub mtime: Timespec,
    /// Attributes last changed.
    pub ctime: Timespec,
}

impl Meta {
    /// Reads s3fs's keys; `fallback` for each one missing or unreadable.
    pub fn from_headers(h: Option<&HashMap<String, String>>, fallback: Meta) -> Meta {
        let get = |k: &str| h.and_then(|h| h.get(k)).map(|s| s.trim());
        let int = |k: &str| get(k).and_then(|v| v.parse::<u32>().ok());
        let mode = int("mode").filter(|m| kind_of(*m).is_some());
        Meta {
            mode: mode.unwrap_or(fallback.mode),
            uid: int("uid").unwrap_or(fallback.uid),
            gid: int("gid").unwrap_or(fallback.gid),
            mtime: get("mtime").and_then(parse_time).unwrap_or(fallback.mtime),
            ctime: get("ctime").and_then(parse_time).unwrap_or(fallback.ctime),
        }
    }

    /// The metadata to store with an object.
    pub fn to_headers(&self) -> HashMap<String, String> {
        HashMap::from([
            ("mode".into(), self.mode.to_string()),
            ("uid".into(), self.uid.to_string()),
            ("gid".into(), self.gid.to_string()),
            ("mtime".into(), format_time(self.mtime)),
            ("ctime".into(), format_time(self.ctime)),
            ("atime".into(), format_time(self.mtime)),
        ])
    }

    /// The type bits of `mode`.
    pub fn kind(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
}

/// `mode`'s type bits if they name a kind objfs stores.
fn kind_of(mode: u32) -> Option<u32> {
    let k = mode & libc::S_IFMT;
    [libc::S_IFREG, libc::S_IFDIR, libc::S_IFLNK]
        .contains(&k)
        .then_some(k)
}

/// `SEC` or `SEC.FRACTION`.
pub fn parse_time(s: &str) -> Option<Timespec> {
    let (sec, frac) = s.split_once('.').unwrap_or((s, ""));
    let sec: i64 = sec.parse().ok()?;
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nsec = if frac.is_empty() {
        0
    } else {
        frac.parse::<u32>().ok()? * 10u32.pow(9 - frac.len() as u32)
    };
    Some(Timespec { sec, nsec })
}

/// `SEC`, or `SEC.NNNNNNNNN` when there are nanoseconds.
pub fn format_time(t: Timespec) -> String {
    if t.nsec == 0 {
        t.sec.to_string()
    } else {
        format!("{}.{:09}", t.sec, t.nsec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_back() {
        for t in [
            Timespec { sec: 0, nsec: 0 },
            Timespec {
                sec: 1_700_000_000,
                nsec: 5,
            },
            Timespec {
                sec: 1_700_000_000,
                nsec: 999_999_999,
            },
        ] {
            assert_eq!(parse_time(&format_time(t)), Some(t));
        }
        assert_eq!(
            parse_time("12.5"),
            Some(Timespec {
                sec: 12,
                nsec: 500_000_000
            })
        );
        assert_eq!(parse_time("x"), None);
        assert_eq!(parse_time("1.0000000001"), None);
    }

    #[test]
    fn s3fs_keys_round_trip_and_fall_back() {
        let fallback = Meta {
            mode: libc::S_IFREG | 0o644,
            uid: 1,
            gid: 2,
            mtime: Timespec { sec: 3, nsec: 0 },
            ctime: Timespec { sec: 3, nsec: 0 },
        };
        let m = Meta {
            mode: libc::S_IFLNK | 0o777,
            uid: 1000,
            gid: 100,
            mtime: Timespec {
                sec: 1_700_000_000,
                nsec: 42,
            },
            ctime: Timespec {
                sec: 1_700_000_001,
                nsec: 0,
            },
        };
        assert_eq!(Meta::from_headers(Some(&m.to_headers()), fallback), m);
        // s3fs writes "33188" for a 0644 file; a mode of no kind we store
        // (a FIFO) is not trusted.
        let h = HashMap::from([("mode".to_string(), "4532".to_string())]);
        assert_eq!(Meta::from_headers(Some(&h), fallback).mode, fallback.mode);
        let h = HashMap::from([("mode".to_string(), "33188".to_string())]);
        assert_eq!(
            Meta::from_headers(Some(&h), fallback).mode,
            libc::S_IFREG | 0o644
        );
        assert_eq!(Meta::from_headers(None, fallback), fallback);
    }
}
