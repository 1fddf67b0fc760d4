//! The arguments `fuse_session_new` takes (what the program's own option
//! parsing left): `-o` lists, `-d`/`--debug`, and libfuse's low-level and
//! mount options, mapped onto fusebox's [`Options`]. Anything left over is
//! an error, as in libfuse: `fuse: unknown option(s): `-o foo'`.

use fusebox::abi::flags::init as k;
use fusebox::Options;

/// What the arguments say.
#[derive(Debug, Default)]
pub struct SessionArgs {
    pub options: Options,
    pub debug: bool,
    /// Kernel flags the user turned on or off with `-o`: they win over
    /// what the program's init callback wants.
    pub force_on: u64,
    pub force_off: u64,
    /// Accepted, with no effect on this library (said once on stderr).
    pub ignored: Vec<String>,
}

/// libfuse options that change nothing here, and why not.
const IGNORED: &[&str] = &[
    // fuse 2 leftovers libfuse 3 still accepts.
    "big_writes",
    "no_big_writes",
    "nonempty",
    // Splice is a daemon-side copy strategy; fusebox copies its own way.
    "splice_read",
    "no_splice_read",
    "splice_write",
    "no_splice_write",
    "splice_move",
    "no_splice_move",
    // Mount-table hints for mount(8) and systemd.
    "_netdev",
    "noauto",
    "auto",
    "user",
    "nouser",
    "users",
    "defaults",
    // The unmount helper fusermount3 runs for it when not root.
    "auto_unmount",
];

/// Parse `args` (without `argv[0]`).
pub fn parse(args: &[String]) -> Result<SessionArgs, String> {
    let mut out = SessionArgs::default();
    let mut unknown: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let list = match a.as_str() {
            "-d" | "--debug" => {
                out.debug = true;
                continue;
            }
            "-o" => match it.next() {
                Some(l) => l.as_str(),
                None => return Err("fuse: missing argument after `-o'".into()),
            },
            s if s.starts_with("-o") => &s[2..],
            other => {
                unknown.push(other.to_string());
                continue;
            }
        };
        for opt in split_list(list) {
            if !apply(&mut out, &opt) {
                unknown.push(format!("-o {opt}"));
            }
        }
    }
    match unknown.first() {
        Some(u) => Err(format!("fuse: unknown option(s): `{u}'")),
        None => Ok(out),
    }
}

/// A `-o` list split at commas, `\,` keeping a comma inside an option.
pub(crate) fn split_list(list: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = list.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    out.last_mut().expect("never empty").push(n);
                }
            }
            ',' => out.push(String::new()),
            c => out.last_mut().expect("never empty").push(c),
        }
    }
    out.retain(|o| !o.is_empty());
    out
}

/// One option; false if nobody knows it.
fn apply(out: &mut SessionArgs, opt: &str) -> bool {
    let (name, value) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    let mut flag = |on: bool, f: u64| {
        if on {
            out.force_on |= f;
            out.force_off &= !f;
        } else {
            out.force_off |= f;
            out.force_on &= !f;
        }
        true
    };
    match (name, value) {
        ("debug", None) => {
            out.debug = true;
            true
        }
        // libfuse's own flags for what INIT negotiates: decided after the
        // program's init callback, so they are kept apart.
        ("sync_read", None) => flag(false, k::ASYNC_READ),
        ("async_read", None) => flag(true, k::ASYNC_READ),
        ("atomic_o_trunc", None) => flag(true, k::ATOMIC_O_TRUNC),
        ("no_remote_lock", None) => flag(false, k::POSIX_LOCKS | k::FLOCK_LOCKS),
        ("no_remote_flock", None) => flag(false, k::FLOCK_LOCKS),
        ("no_remote_posix_lock", None) => flag(false, k::POSIX_LOCKS),
        ("auto_inval_data", None) => flag(true, k::AUTO_INVAL_DATA),
        ("no_auto_inval_data", None) => flag(false, k::AUTO_INVAL_DATA),
        ("async_dio", None) => flag(true, k::ASYNC_DIO),
        ("no_async_dio", None) => flag(false, k::ASYNC_DIO),
        ("writeback_cache", None) => flag(true, k::WRITEBACK_CACHE),
        ("no_writeback_cache", None) => flag(false, k::WRITEBACK_CACHE),
        ("readdirplus", Some("no")) => flag(false, k::DO_READDIRPLUS | k::READDIRPLUS_AUTO),
        ("readdirplus", Some("yes")) => {
            flag(true, k::DO_READDIRPLUS);
            flag(false, k::READDIRPLUS_AUTO)
        }
        ("readdirplus", Some("auto")) => flag(true, k::DO_READDIRPLUS | k::READDIRPLUS_AUTO),
        ("time_gran", Some(_)) | ("allow_root", None) | ("blkdev", None) => {
            // allow_root: served like allow_other, then refused to others
            // by the kernel's default_permissions? No: libfuse checks the
            // caller in the daemon. Not done here: say so.
            out.ignored.push(opt.to_string());
            true
        }
        (n, None) if IGNORED.contains(&n) => {
            out.ignored.push(opt.to_string());
            true
        }
        _ => out.options.apply_one(opt).is_ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_land_where_they_belong() {
        let s = parse(&args(&[
            "-o",
            "allow_other,fsname=a\\,b,max_write=65536",
            "-d",
            "-osync_read,big_writes",
        ]))
        .unwrap();
        assert!(s.debug);
        assert!(s.options.mount.allow_other);
        assert_eq!(s.options.mount.fsname.as_deref(), Some("a,b"));
        assert_eq!(s.options.init.max_write, 65536);
        assert_eq!(s.force_off, k::ASYNC_READ);
        assert_eq!(s.ignored, vec!["big_writes".to_string()]);
    }

    #[test]
    fn leftovers_are_errors_named_as_libfuse_names_them() {
        assert_eq!(
            parse(&args(&["-o", "frobnicate"])).unwrap_err(),
            "fuse: unknown option(s): `-o frobnicate'"
        );
        assert_eq!(
            parse(&args(&["/mnt"])).unwrap_err(),
            "fuse: unknown option(s): `/mnt'"
        );
        assert!(parse(&args(&["-o"])).is_err());
    }
}
