//! `fuse_parse_cmdline` (both ABIs) and the help and version printers:
//! the common command line of low-level filesystems, on `fuse_opt_parse`.
//!
//! What it does (fuse_lowlevel.h, and Debian's library on the same
//! command lines in `tests/differential.rs`): `-f` foreground, `-s` single
//! thread, `-d` / `-o debug` debug and foreground (and kept for the
//! session), `-o clone_fd`, `-o max_idle_threads=N`, `-o max_threads=N`
//! (default 10; idle threads default to unlimited), `-h` / `--help`,
//! `-V` / `--version`; the one non-option is the mountpoint, made absolute
//! by realpath(3); a second is an error; unless `-o subtype=` or
//! `-o fsname=` was given, `-osubtype=<program name>` is appended.
//!
//! Soundness: `args` and `opts` are the caller's, valid per the header
//! (`opts` of the size its entry point implies); the option table below
//! names fields of [`FuseCmdlineOpts`] by `offset_of!`.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::mem::offset_of;
use std::ptr;

use super::opt::fuse_opt_add_arg;
use super::parse::fuse_opt_parse;
use super::versioned;
use crate::abi::{FuseArgs, FuseCmdlineOpts, FuseOpt};

const KEY_NONOPT: c_int = -2;
const KEY_KEEP: c_int = -3;
/// FUSE_OPT_KEY's offset: -1U.
const NO_OFFSET: c_ulong = u32::MAX as c_ulong;

struct Table([FuseOpt; 20]);
// SAFETY: the templates are 'static C string literals, never written.
unsafe impl Sync for Table {}

const fn set(templ: &'static CStr, offset: usize, value: c_int) -> FuseOpt {
    FuseOpt {
        templ: templ.as_ptr(),
        offset: offset as c_ulong,
        value,
    }
}

const fn key(templ: &'static CStr, value: c_int) -> FuseOpt {
    FuseOpt {
        templ: templ.as_ptr(),
        offset: NO_OFFSET,
        value,
    }
}

type O = FuseCmdlineOpts;
static OPTIONS: Table = Table([
    set(c"-h", offset_of!(O, show_help), 1),
    set(c"--help", offset_of!(O, show_help), 1),
    set(c"-V", offset_of!(O, show_version), 1),
    set(c"--version", offset_of!(O, show_version), 1),
    set(c"-d", offset_of!(O, debug), 1),
    set(c"debug", offset_of!(O, debug), 1),
    set(c"-d", offset_of!(O, foreground), 1),
    set(c"debug", offset_of!(O, foreground), 1),
    key(c"-d", KEY_KEEP),
    key(c"debug", KEY_KEEP),
    set(c"-f", offset_of!(O, foreground), 1),
    set(c"-s", offset_of!(O, singlethread), 1),
    set(c"clone_fd", offset_of!(O, clone_fd), 1),
    set(c"max_idle_threads=%u", offset_of!(O, max_idle_threads), 0),
    set(c"max_threads=%u", offset_of!(O, max_threads), 0),
    set(c"fsname=", offset_of!(O, nodefault_subtype), 1),
    key(c"fsname=", KEY_KEEP),
    set(c"subtype=", offset_of!(O, nodefault_subtype), 1),
    key(c"subtype=", KEY_KEEP),
    FuseOpt {
        templ: ptr::null(),
        offset: 0,
        value: 0,
    },
]);

/// The mountpoint (the one non-option), or an error for a second one;
/// everything else is kept.
unsafe extern "C" fn take_mountpoint(
    data: *mut c_void,
    arg: *const c_char,
    key: c_int,
    _out: *mut FuseArgs,
) -> c_int {
    if key != KEY_NONOPT {
        return 1;
    }
    // SAFETY: `data` is the FuseCmdlineOpts `parse` passes; `arg` a string.
    unsafe {
        let opts = &mut *data.cast::<FuseCmdlineOpts>();
        let shown = CStr::from_ptr(arg).to_string_lossy();
        if !opts.mountpoint.is_null() {
            super::log_error(&format!("fuse: invalid argument `{shown}'"));
            return -1;
        }
        let real = libc::realpath(arg, ptr::null_mut());
        if real.is_null() {
            let e = std::io::Error::last_os_error();
            super::log_error(&format!(
                "fuse: bad mount point `{shown}': {}",
                strerror(&e)
            ));
            return -1;
        }
        opts.mountpoint = real;
    }
    0
}

/// The C library's wording of an errno, as libfuse prints it.
fn strerror(e: &std::io::Error) -> String {
    let msg = e.to_string();
    // "No such file or directory (os error 2)" -> the C text.
    match msg.rfind(" (os error") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    }
}

/// What a command line without options gives.
fn defaults() -> FuseCmdlineOpts {
    FuseCmdlineOpts {
        singlethread: 0,
        foreground: 0,
        debug: 0,
        nodefault_subtype: 0,
        mountpoint: ptr::null_mut(),
        show_version: 0,
        show_help: 0,
        clone_fd: 0,
        max_idle_threads: u32::MAX,
        max_threads: 10,
    }
}

/// Parse into a full-size struct; the caller copies what its ABI has.
///
/// # Safety
/// `args` is a valid argument vector.
unsafe fn parse(args: *mut FuseArgs, opts: &mut FuseCmdlineOpts) -> c_int {
    *opts = defaults();
    // SAFETY: the table ends in a NULL template; `opts` is what its
    // offsets and take_mountpoint expect.
    let r = unsafe {
        fuse_opt_parse(
            args,
            (opts as *mut FuseCmdlineOpts).cast(),
            OPTIONS.0.as_ptr(),
            Some(take_mountpoint),
        )
    };
    if r == -1 {
        return -1;
    }
    if opts.nodefault_subtype == 0 {
        // SAFETY: a parsed vector has argv[0] (fuse_opt_parse keeps it).
        unsafe {
            let args = &mut *args;
            let prog = if args.argc > 0 {
                CStr::from_ptr(*args.argv).to_bytes()
            } else {
                b""
            };
            let base = prog.rsplit(|&b| b == b'/').next().unwrap_or(b"");
            let mut opt = b"-osubtype=".to_vec();
            opt.extend_from_slice(base);
            let opt = CString::new(opt).expect("from a C string");
            if fuse_opt_add_arg(args, opt.as_ptr()) == -1 {
                return -1;
            }
        }
    }
    0
}

/// `int fuse_parse_cmdline(struct fuse_args *, struct fuse_cmdline_opts *)`
/// as of 3.12 (with `max_threads`).
pub unsafe extern "C" fn fuse_parse_cmdline_312(
    args: *mut FuseArgs,
    opts: *mut FuseCmdlineOpts,
) -> c_int {
    // SAFETY: a 3.12 caller's struct is the full one.
    unsafe {
        let Some(opts) = opts.as_mut() else {
            return -1;
        };
        parse(args, opts)
    }
}

/// `fuse_parse_cmdline_312` as exported (see the note in mod.rs).
#[export_name = "fuse_parse_cmdline_312"]
pub unsafe extern "C" fn export_fuse_parse_cmdline_312(
    args: *mut FuseArgs,
    opts: *mut FuseCmdlineOpts,
) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_parse_cmdline_312(args, opts) }
}
versioned!(fuse_parse_cmdline_312, "FUSE_3.12");
versioned!(fuse_parse_cmdline_312 as "fuse_parse_cmdline@@FUSE_3.12");

/// The 3.0 ABI: the struct ends before `max_threads`.
#[no_mangle]
pub unsafe extern "C" fn fuse_parse_cmdline_30(
    args: *mut FuseArgs,
    opts: *mut FuseCmdlineOpts,
) -> c_int {
    if opts.is_null() {
        return -1;
    }
    let mut full = defaults();
    // SAFETY: `args` per the header; the caller's struct has the bytes
    // before `max_threads`, and only those are written.
    unsafe {
        let r = parse(args, &mut full);
        ptr::copy_nonoverlapping(
            (&full as *const FuseCmdlineOpts).cast::<u8>(),
            opts.cast::<u8>(),
            offset_of!(FuseCmdlineOpts, max_threads),
        );
        r
    }
}
versioned!(fuse_parse_cmdline_30, "FUSE_3.12");
versioned!(fuse_parse_cmdline_30 as "fuse_parse_cmdline@FUSE_3.0");

/// `void fuse_cmdline_help(void)`: what `fuse_parse_cmdline` understands.
pub extern "C" fn fuse_cmdline_help() {
    print!(
        "    -h   --help            print help\n\
         \x20   -V   --version         print version\n\
         \x20   -d   -o debug          enable debug output (implies -f)\n\
         \x20   -f                     foreground operation\n\
         \x20   -s                     disable multi-threaded operation\n\
         \x20   -o clone_fd            use separate fuse device fd for each thread\n\
         \x20                          (may improve performance)\n\
         \x20   -o max_idle_threads    the maximum number of idle worker threads\n\
         \x20                          allowed (default: unlimited)\n\
         \x20   -o max_threads         the maximum number of worker threads\n\
         \x20                          allowed (default: 10)\n"
    );
}

/// `fuse_cmdline_help` as exported (see the note in mod.rs).
#[export_name = "fuse_cmdline_help"]
pub extern "C" fn export_fuse_cmdline_help() {
    fuse_cmdline_help()
}
versioned!(fuse_cmdline_help, "FUSE_3.0");

/// `void fuse_lowlevel_help(void)`: the mount options a user may give.
pub extern "C" fn fuse_lowlevel_help() {
    print!(
        "    -o allow_other         allow access by all users\n\
         \x20   -o allow_root          allow access by root\n\
         \x20   -o auto_unmount        auto unmount on process termination\n"
    );
}

/// `fuse_lowlevel_help` as exported (see the note in mod.rs).
#[export_name = "fuse_lowlevel_help"]
pub extern "C" fn export_fuse_lowlevel_help() {
    fuse_lowlevel_help()
}
versioned!(fuse_lowlevel_help, "FUSE_3.0");

/// `void fuse_lowlevel_version(void)`.
pub extern "C" fn fuse_lowlevel_version() {
    println!(
        "using FUSE kernel interface version {}.{} (fusebox {})",
        7,
        45,
        env!("CARGO_PKG_VERSION")
    );
}

/// `fuse_lowlevel_version` as exported (see the note in mod.rs).
#[export_name = "fuse_lowlevel_version"]
pub extern "C" fn export_fuse_lowlevel_version() {
    fuse_lowlevel_version()
}
versioned!(fuse_lowlevel_version, "FUSE_3.0");
