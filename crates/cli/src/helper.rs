//! The mount(8) helper: `fusebox` installed (linked) as
//! `/sbin/mount.fuse.fusebox-FS` serves `mount -t fuse.fusebox-FS SOURCE
//! DIR -o ...` and the fstab lines of that type; linked as
//! `/sbin/mount.fusebox` it serves `mount -t fusebox FS[:SOURCE] DIR`.
//!
//! mount(8) calls a helper as `mount.TYPE SPEC DIR [-sfnvrw] [-N NS]
//! [-o OPTIONS] [-t TYPE]`. The options are those of the fstab line:
//! mount(8)'s own (noauto, _netdev, x-systemd.*, ...) are dropped, `uid=`
//! and `gid=` name the user and group the mount belongs to, `fusebox
//! mount`'s flags are given as options (`transport=uring`,
//! `queue_depth=4`, `exclusive`), and the rest are `-o` options. The
//! helper then runs `fusebox mount`, which returns once the mount is
//! served and leaves the daemon running, as mount(8) expects.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;
use fusebox_registry::Source;

use crate::mount::MountArgs;

/// mount(8)'s exit statuses (see mount(8), "RETURN CODES").
const EXIT_USAGE: u8 = 1;
const EXIT_FAILURE: u8 = 32;

/// How the helper was called.
#[derive(Debug, PartialEq, Eq)]
pub enum Called {
    /// `mount.fusebox` (or `mount.fuse.fusebox`): the filesystem is named
    /// in the spec, `FS[:SOURCE]`.
    Generic(String),
    /// `mount.fuse.fusebox-FS`: the spec is FS's source.
    Named { helper: String, fs: String },
}

impl Called {
    fn helper(&self) -> &str {
        match self {
            Called::Generic(h) | Called::Named { helper: h, .. } => h,
        }
    }
}

/// Whether this process runs as a mount helper, from the name it was
/// called by.
pub fn called_as() -> Option<Called> {
    let argv0 = std::env::args_os().next()?;
    from_name(Path::new(&argv0).file_name()?.to_str()?)
}

fn from_name(name: &str) -> Option<Called> {
    if name == "mount.fusebox" || name == "mount.fuse.fusebox" {
        return Some(Called::Generic(name.to_string()));
    }
    let fs = name
        .strip_prefix("mount.fuse.fusebox-")
        .or_else(|| name.strip_prefix("mount.fusebox-"))?;
    Some(Called::Named {
        helper: name.to_string(),
        fs: fs.to_string(),
    })
}

/// Run as the helper; errors are one line on stderr, named after the
/// helper, as mount(8) shows them.
pub fn run(called: Called) -> anyhow::Result<()> {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let code = match plan(&called, &args) {
        Ok(Plan::Fake) => 0,
        Ok(Plan::Mount { argv, verbose }) => match mount(&argv, verbose) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("{}: {e}", called.helper());
                EXIT_FAILURE
            }
        },
        Err(HelperError { message, code }) => {
            eprintln!("{}: {message}", called.helper());
            code
        }
    };
    std::process::exit(code.into());
}

#[derive(Debug)]
struct HelperError {
    message: String,
    code: u8,
}

fn usage(message: impl Into<String>) -> HelperError {
    HelperError {
        message: message.into(),
        code: EXIT_USAGE,
    }
}

fn failure(message: impl Into<String>) -> HelperError {
    HelperError {
        message: message.into(),
        code: EXIT_FAILURE,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Plan {
    /// `-f`: check everything, mount nothing.
    Fake,
    /// Run `fusebox` with `argv` (starting with `mount`).
    Mount { argv: Vec<OsString>, verbose: bool },
}

/// Options that are mount(8)'s or systemd's, never the filesystem's.
fn userspace_only(key: &str) -> bool {
    matches!(
        key,
        "defaults"
            | "auto"
            | "noauto"
            | "user"
            | "nouser"
            | "users"
            | "nousers"
            | "owner"
            | "noowner"
            | "group"
            | "nogroup"
            | "nofail"
            | "_netdev"
            | "comment"
            | "helper"
            | "uhelper"
            | "loud"
            | "silent"
    ) || key.starts_with("x-")
}

/// Kernel mount flags libmount hands every helper that fusebox does not
/// set on a FUSE mount: the first group only restates the default, the
/// second is left out with a warning (FUSE mounts get relatime, no
/// lazytime, and follow symlinks).
fn vfs_flag_left_out(key: &str) -> Option<bool> {
    match key {
        "relatime" | "nomand" | "noiversion" | "symfollow" | "nolazytime" | "diratime" => {
            Some(false)
        }
        "norelatime" | "strictatime" | "nostrictatime" | "nodiratime" | "lazytime" | "iversion"
        | "mand" | "nosymfollow" => Some(true),
        _ => None,
    }
}

/// Turn the helper's command line into `fusebox mount`'s.
fn plan(called: &Called, args: &[OsString]) -> Result<Plan, HelperError> {
    let mut positional: Vec<OsString> = Vec::new();
    let mut options: Vec<String> = Vec::new();
    let (mut fake, mut sloppy, mut verbose) = (false, false, false);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let s = a.to_str().unwrap_or("");
        if s == "-h" || s == "--help" {
            return Err(usage(
                "mount(8)'s helper for fusebox: mount -t fuse.fusebox-FS SOURCE DIR [-o OPTIONS], or mount -t fusebox FS[:SOURCE] DIR; see mount.fusebox(8) and `fusebox mount --help`",
            ));
        }
        if s == "-V" || s == "--version" {
            return Err(usage(format!("fusebox {}", crate::VERSION)));
        }
        if !s.starts_with('-') || s == "-" {
            positional.push(a.clone());
            continue;
        }
        // Short flags may be grouped (-sv) and -o may hold its value (-oro).
        let mut chars = s[1..].chars();
        while let Some(c) = chars.next() {
            match c {
                'f' => fake = true,
                's' => sloppy = true,
                'v' => verbose = true,
                'n' => {}
                'r' => options.push("ro".into()),
                'w' => options.push("rw".into()),
                'o' | 't' | 'N' => {
                    let rest: String = chars.by_ref().collect();
                    let value = if rest.is_empty() {
                        it.next()
                            .and_then(|v| v.to_str())
                            .ok_or_else(|| usage(format!("-{c} needs a value")))?
                            .to_string()
                    } else {
                        rest
                    };
                    match c {
                        'o' => options.extend(split_options(&value)),
                        // The type only repeats what the helper's name says.
                        't' => {}
                        _ => {
                            return Err(usage(
                                "-N (mounting in another namespace) is not supported",
                            ))
                        }
                    }
                }
                other => return Err(usage(format!("unknown flag -{other}"))),
            }
        }
    }
    let [spec, dir] = positional.as_slice() else {
        return Err(usage("usage: SPEC DIR [-sfnvrw] [-o OPTIONS]"));
    };
    let spec_str = spec
        .to_str()
        .ok_or_else(|| usage("the spec is not valid UTF-8"))?;
    let (fs_name, source): (&str, Option<&str>) = match called {
        Called::Generic(_) => match spec_str.split_once(':') {
            Some((fs, src)) => (fs, Some(src)),
            None => (spec_str, None),
        },
        Called::Named { fs, .. } => (fs.as_str(), Some(spec_str)),
    };
    let fs = fusebox_registry::find_mountable(fs_name).map_err(|e| failure(e.to_string()))?;
    let fs_name = fs.name.to_string();
    let source = match (fs.source, source.filter(|s| !s.is_empty())) {
        (Source::LocalDir | Source::Remote | Source::Bucket, None) => {
            let (what, short) = fs.source_words().expect("has a source");
            return Err(failure(format!(
                "{fs_name} needs {what} (spec {fs_name}:{short})"
            )));
        }
        (Source::LocalDir, Some(src)) => {
            let p = PathBuf::from(src);
            match std::fs::metadata(&p) {
                Ok(m) if m.is_dir() => Some(p),
                Ok(_) => return Err(failure(format!("source {src} is not a directory"))),
                Err(e) => return Err(failure(format!("source {src}: {e}"))),
            }
        }
        // Checked by the filesystem when it connects.
        (Source::Remote | Source::Bucket, Some(src)) => Some(PathBuf::from(src)),
        (Source::None | Source::Profile, _) => None,
    };
    let dir = PathBuf::from(dir);
    if let Err(e) = std::fs::metadata(&dir) {
        return Err(failure(format!("mount point {}: {e}", dir.display())));
    }

    // `fusebox mount`'s flags, by long name, and whether each takes a value.
    let flags: Vec<(String, bool)> = MountArgs::augment_args(clap::Command::new("mount"))
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| Some((a.get_long()?.to_string(), a.get_action().takes_values())))
        .filter(|(l, _)| l != "foreground")
        .collect();
    let mut argv: Vec<OsString> = vec!["mount".into(), fs_name.clone().into()];
    if let Some(src) = &source {
        argv.push(src.clone().into());
    }
    argv.push(dir.into());
    let mut kept: Vec<String> = Vec::new();
    let (mut fsname, mut subtype) = (false, false);
    for opt in options {
        let (key, value) = match opt.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (opt.clone(), None),
        };
        if userspace_only(&key) {
            continue;
        }
        if let Some(warn) = vfs_flag_left_out(&key) {
            if warn {
                eprintln!(
                    "{}: {key} is not supported on a fusebox mount; left out",
                    called.helper()
                );
            }
            continue;
        }
        let long = key.replace('_', "-");
        if let Some((_, takes_value)) = flags.iter().find(|(l, _)| *l == long) {
            argv.push(format!("--{long}").into());
            match (takes_value, value) {
                (true, Some(v)) => argv.push(v.into()),
                (true, None) => {
                    return Err(usage(format!("option {key} needs a value ({key}=...)")))
                }
                (false, None) => {}
                (false, Some(_)) => return Err(usage(format!("option {key} takes no value"))),
            }
            continue;
        }
        let opt = match key.as_str() {
            // sshfs's uid=/gid= are the owner its files show.
            "uid" | "gid" if fs.owner_options => opt,
            "uid" => format!("user_id={}", value.unwrap_or_default()),
            "gid" => format!("group_id={}", value.unwrap_or_default()),
            _ => opt,
        };
        // Checked here, so that a mistake is one line before anything is
        // started; with -s (sloppy) an unknown option is left out.
        if let Err(e) = check_option(fs, &opt) {
            if sloppy {
                tracing::warn!("ignoring option {opt}: {e}");
                continue;
            }
            return Err(failure(e));
        }
        fsname |= opt.starts_with("fsname=");
        subtype |= opt.starts_with("subtype=");
        kept.push(opt);
    }
    // What mount(8) compares an fstab line with /proc/mounts by: the
    // spec, canonical when it is a path (as libmount makes the line's). A
    // spec with a comma cannot travel as one -o option: fusebox's own
    // name then (`mount -a` may mount such a line twice).
    if !fsname && !spec_str.contains(',') {
        let shown = match (&source, called) {
            (Some(src), Called::Named { .. }) if fs.source == Source::LocalDir => {
                std::fs::canonicalize(src)
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| spec_str.to_string())
            }
            _ => spec_str.to_string(),
        };
        kept.push(format!("fsname={shown}"));
    }
    if !subtype {
        kept.push(format!("subtype=fusebox-{fs_name}"));
    }
    for opt in kept {
        argv.push("-o".into());
        argv.push(opt.into());
    }
    // `fusebox mount` would refuse a bad flag value only after the helper
    // returned (and -f must not say yes to it): parse it here first.
    let mut full: Vec<OsString> = vec!["fusebox".into()];
    full.extend(argv.iter().cloned());
    if let Err(e) = <crate::Cli as clap::Parser>::try_parse_from(&full) {
        let rendered = e.render().to_string();
        let first = rendered.lines().next().unwrap_or_default();
        return Err(failure(first.trim_start_matches("error: ").to_string()));
    }
    if fake {
        return Ok(Plan::Fake);
    }
    Ok(Plan::Mount { argv, verbose })
}

/// One `-o` option as the filesystem would take it: sftpfs's own and
/// ssh's first, then fusebox's mount options.
fn check_option(fs: &fusebox_registry::Filesystem, opt: &str) -> Result<(), String> {
    if fs.id == fusebox_registry::FsId::Sftpfs {
        let (_, rest) =
            fusebox_sftpfs::SftpOptions::parse(&[opt.to_string()]).map_err(|e| e.to_string())?;
        if rest.is_empty() {
            return Ok(());
        }
    }
    if fs.id == fusebox_registry::FsId::Objfs {
        let (_, rest) =
            fusebox_objfs::ObjOptions::parse(&[opt.to_string()]).map_err(|e| e.to_string())?;
        if rest.is_empty() {
            return Ok(());
        }
    }
    fusebox::Options::default()
        .apply_one(opt)
        .map_err(|e| e.to_string())
}

/// Split an option list at commas; a value may not hold one (as in fstab).
fn split_options(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(String::from)
        .collect()
}

/// Run `fusebox mount` (which returns once the mount is served); its
/// error, however many lines anyhow made of it, becomes one.
fn mount(argv: &[OsString], verbose: bool) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating the fusebox binary: {e}"))?;
    let out = Command::new(exe)
        .args(argv)
        .env("RUST_BACKTRACE", "0")
        .env("RUST_LIB_BACKTRACE", "0")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("starting fusebox mount: {e}"))?;
    if out.status.success() {
        if verbose {
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
        return Ok(());
    }
    Err(one_line(&String::from_utf8_lossy(&out.stderr)))
}

/// `fusebox mount`'s error as one line: its own `fusebox: a: b` loses the
/// prefix; anyhow's "Error: a\n\nCaused by:\n    0: b\n    1: c" (a
/// panic's report, say) becomes "a: b: c".
fn one_line(report: &str) -> String {
    let parts: Vec<&str> = report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && *l != "Caused by:")
        .map(|l| {
            let l = l.strip_prefix("fusebox: ").unwrap_or(l);
            l.strip_prefix("Error: ").unwrap_or(l).trim_end_matches(':')
        })
        .map(|l| match l.split_once(": ") {
            Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
            _ => l,
        })
        .collect();
    let mut line = String::new();
    for p in parts {
        if line.contains(p) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(p);
    }
    if line.is_empty() {
        "fusebox mount failed and said nothing".into()
    } else {
        line
    }
}

/// The helper as mount(8) calls it, for its man page (mount.fusebox(8));
/// `plan` parses the arguments itself, as helpers must accept mount(8)'s
/// order and grouping.
pub fn command() -> clap::Command {
    use clap::{Arg, ArgAction};
    clap::Command::new("mount.fusebox")
        .version(env!("CARGO_PKG_VERSION"))
        .about("mount(8) helper for fusebox filesystems (also called as mount.fuse.fusebox-FS)")
        .long_about(format!(
            "Called by mount(8) for `mount -t fusebox FS[:SOURCE] DIR` (this name) and \
             `mount -t fuse.fusebox-FS SOURCE DIR` (mount.fuse.fusebox-FS, FS one of {}), and \
             for fstab lines of those types. It runs `fusebox mount`, which returns once the \
             mount is served and leaves the daemon running; umount(8) ends it.",
            fusebox_registry::names(|f| f.mounts)
        ))
        .disable_help_flag(true)
        .disable_version_flag(true)
        .arg(Arg::new("spec").required(true).value_name("SPEC").help(
            "FS[:SOURCE] for type fusebox; the source (a directory for stackfs and pathfs, [user@]host:[dir] for sftpfs) or any word for type fuse.fusebox-FS",
        ))
        .arg(Arg::new("dir").required(true).value_name("DIR").help("The mount point"))
        .arg(Arg::new("options").short('o').value_name("OPTIONS").help(
            "Comma-separated. mount(8)'s and systemd's own (defaults, noauto, user, nofail, _netdev, x-*, ...) are left to them; \
             fusebox mount's flags as options (transport=uring, queue_depth=4, exclusive, log_file=PATH, ...); \
             uid=N and gid=N: whose mount it is (the kernel's user_id/group_id); \
             everything else is a -o option of fusebox mount (allow_other, default_permissions, ro, attr_timeout=, passthrough, ...)",
        ))
        .arg(Arg::new("sloppy").short('s').action(ArgAction::SetTrue).help("Leave unknown options out instead of failing"))
        .arg(Arg::new("fake").short('f').action(ArgAction::SetTrue).help("Check everything, mount nothing"))
        .arg(Arg::new("no-mtab").short('n').action(ArgAction::SetTrue).help("Accepted; there is no mtab to write"))
        .arg(Arg::new("verbose").short('v').action(ArgAction::SetTrue).help("Print what fusebox mount said"))
        .arg(Arg::new("read-only").short('r').action(ArgAction::SetTrue).help("Mount read-only (ro)"))
        .arg(Arg::new("read-write").short('w').action(ArgAction::SetTrue).help("Mount read-write (rw)"))
        .arg(Arg::new("type").short('t').value_name("TYPE").help("Accepted; the name the helper was called by says the type"))
        .after_help(
            "EXIT STATUS: 0 mounted; 1 bad invocation; 32 the mount failed (one line on stderr says why; nothing is mounted).\n\
             FILES: /etc/fstab lines such as\n  /srv/src /srv/data fuse.fusebox-stackfs allow_other,transport=auto,nofail 0 0\n  memfs /mnt/mem fusebox noauto,x-systemd.automount 0 0",
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    fn argv(p: Plan) -> Vec<String> {
        match p {
            Plan::Mount { argv, .. } => {
                argv.into_iter().map(|a| a.into_string().unwrap()).collect()
            }
            Plan::Fake => panic!("fake"),
        }
    }

    #[test]
    fn helper_names_say_which_filesystem() {
        assert_eq!(
            from_name("mount.fuse.fusebox-stackfs"),
            Some(Called::Named {
                helper: "mount.fuse.fusebox-stackfs".into(),
                fs: "stackfs".into()
            })
        );
        assert!(matches!(
            from_name("mount.fusebox"),
            Some(Called::Generic(_))
        ));
        assert_eq!(from_name("fusebox"), None);
        assert_eq!(from_name("mount.fuse3"), None);
    }

    #[test]
    fn fstab_options_become_fusebox_mount_arguments() {
        let src = tempfile::tempdir().unwrap();
        let mnt = tempfile::tempdir().unwrap();
        let s = src.path().to_str().unwrap();
        let m = mnt.path().to_str().unwrap();
        let called = from_name("mount.fuse.fusebox-stackfs").unwrap();
        let plan = plan(
            &called,
            &os(&[
                s,
                m,
                "-n",
                "-o",
                "rw,noauto,_netdev,x-systemd.automount,allow_other,uid=1000,gid=100,transport=uring,queue_depth=4,exclusive,attr_timeout=2",
            ]),
        )
        .unwrap();
        assert_eq!(
            argv(plan),
            [
                "mount",
                "stackfs",
                s,
                m,
                "--transport",
                "uring",
                "--queue-depth",
                "4",
                "--exclusive",
                "-o",
                "rw",
                "-o",
                "allow_other",
                "-o",
                "user_id=1000",
                "-o",
                "group_id=100",
                "-o",
                "attr_timeout=2",
                "-o",
                &format!("fsname={s}"),
                "-o",
                "subtype=fusebox-stackfs",
            ]
        );
    }

    #[test]
    fn the_generic_helper_reads_the_filesystem_from_the_spec() {
        let mnt = tempfile::tempdir().unwrap();
        let m = mnt.path().to_str().unwrap();
        let called = from_name("mount.fusebox").unwrap();
        let plan = plan(&called, &os(&["memfs", m, "-o", "defaults"])).unwrap();
        assert_eq!(
            argv(plan),
            [
                "mount",
                "memfs",
                m,
                "-o",
                "fsname=memfs",
                "-o",
                "subtype=fusebox-memfs"
            ]
        );
        assert_eq!(plan_of(&called, &["memfs", m, "-f"]), Plan::Fake);
    }

    fn plan_of(called: &Called, a: &[&str]) -> Plan {
        plan(called, &os(a)).unwrap()
    }

    #[test]
    fn bad_input_is_one_line_each() {
        let mnt = tempfile::tempdir().unwrap();
        let m = mnt.path().to_str().unwrap();
        let generic = from_name("mount.fusebox").unwrap();
        let err = |c: &Called, a: &[&str]| plan(c, &os(a)).unwrap_err();
        let e = err(&generic, &["nosuchfs:/x", m]);
        assert!(
            e.message.contains("unknown filesystem \"nosuchfs\""),
            "{e:?}"
        );
        let e = err(&generic, &["stackfs", m]);
        assert!(e.message.contains("needs a source"), "{e:?}");
        let e = err(&generic, &["stackfs:/no/such/dir", m]);
        assert!(e.message.contains("source /no/such/dir"), "{e:?}");
        let e = err(&generic, &["memfs", m, "-o", "frobnicate"]);
        assert!(e.message.contains("frobnicate"), "{e:?}");
        // Sloppy: left out.
        assert!(plan(&generic, &os(&["memfs", m, "-s", "-o", "frobnicate"])).is_ok());
        let e = err(&generic, &["memfs", "/no/such/mnt"]);
        assert!(e.message.contains("mount point /no/such/mnt"), "{e:?}");
        for e in [
            err(&generic, &["memfs"]),
            err(&generic, &["memfs", m, "-x"]),
        ] {
            assert_eq!(e.code, EXIT_USAGE);
        }
        // A bad flag value fails here, -f (fake) included.
        let e = err(&generic, &["memfs", m, "-f", "-o", "queue_depth=abc"]);
        assert!(e.message.contains("abc"), "{e:?}");
        assert_eq!(e.code, EXIT_FAILURE);
    }

    #[test]
    fn kernel_flags_mount_hands_every_helper_are_taken_or_left_out() {
        let mnt = tempfile::tempdir().unwrap();
        let m = mnt.path().to_str().unwrap();
        let generic = from_name("mount.fusebox").unwrap();
        let plan = plan(
            &generic,
            &os(&[
                "memfs",
                m,
                "-o",
                "rw,relatime,nodiratime,noatime,nosuid,nodev,nousers,uhelper=udisks2",
            ]),
        )
        .unwrap();
        assert_eq!(
            argv(plan),
            [
                "mount",
                "memfs",
                m,
                "-o",
                "rw",
                "-o",
                "noatime",
                "-o",
                "nosuid",
                "-o",
                "nodev",
                "-o",
                "fsname=memfs",
                "-o",
                "subtype=fusebox-memfs",
            ]
        );
    }

    #[test]
    fn anyhow_reports_become_one_line() {
        assert_eq!(
            one_line("fusebox: mounting /mnt: mount(2) failed: Permission denied (os error 13)\n"),
            "mounting /mnt: mount(2) failed: Permission denied (os error 13)"
        );
        assert_eq!(
            one_line("Error: the daemon failed (exit status: 1):\nError: mounting /mnt\n\nCaused by:\n    0: mount(2) failed\n    1: Permission denied (os error 13)\n"),
            "the daemon failed (exit status: 1): mounting /mnt: mount(2) failed: Permission denied (os error 13)"
        );
    }
}
