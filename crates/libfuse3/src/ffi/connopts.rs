//! `fuse_parse_conn_info_opts` and `fuse_apply_conn_info_opts`: the
//! connection options a program lets its user set (`-o max_write=`,
//! `-o writeback_cache`, ...), taken out of the argument vector and later
//! applied to `struct fuse_conn_info` in the program's init callback.
//!
//! Soundness: the vector is the program's (valid per fuse_opt.h); the
//! options struct is ours (Box), opaque to the program, freed by it with
//! free(3) in libfuse, so it is allocated with malloc here too.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use super::parse::{fuse_opt_parse, ProcFn};
use super::{log_error, versioned};
use crate::abi::{FuseArgs, FuseConnInfo, FuseOpt};
use crate::caps::cap;

/// The options libfuse's helper knows, each with its key.
const SPEC: &[(&CStr, c_int)] = &[
    (c"max_write=%u", 0),
    (c"max_readahead=%u", 1),
    (c"max_background=%u", 2),
    (c"congestion_threshold=%u", 3),
    (c"time_gran=%u", 4),
    (c"sync_read", 5),
    (c"async_read", 6),
    (c"atomic_o_trunc", 7),
    (c"no_remote_lock", 8),
    (c"no_remote_flock", 9),
    (c"no_remote_posix_lock", 10),
    (c"splice_write", 11),
    (c"no_splice_write", 12),
    (c"splice_move", 13),
    (c"no_splice_move", 14),
    (c"splice_read", 15),
    (c"no_splice_read", 16),
    (c"auto_inval_data", 17),
    (c"no_auto_inval_data", 18),
    (c"readdirplus=no", 19),
    (c"readdirplus=yes", 20),
    (c"readdirplus=auto", 21),
    (c"async_dio", 22),
    (c"no_async_dio", 23),
    (c"writeback_cache", 24),
    (c"no_writeback_cache", 25),
];

/// What `struct fuse_conn_info_opts *` points to: the options seen, in
/// order (a later one wins), with their numbers.
#[repr(C)]
pub struct ConnInfoOpts {
    count: usize,
    seen: [(c_int, c_uint); 64],
}

unsafe extern "C" fn record(
    data: *mut c_void,
    arg: *const c_char,
    key: c_int,
    _out: *mut FuseArgs,
) -> c_int {
    if key < 0 {
        return 1; // not ours: keep it for the session
    }
    // SAFETY: `data` is the ConnInfoOpts being filled; `arg` a C string.
    let (opts, arg) = unsafe { (&mut *(data as *mut ConnInfoOpts), CStr::from_ptr(arg)) };
    let value = arg
        .to_str()
        .ok()
        .and_then(|a| a.split_once('='))
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    if opts.count < opts.seen.len() {
        opts.seen[opts.count] = (key, value);
        opts.count += 1;
    }
    0
}

/// `struct fuse_conn_info_opts *fuse_parse_conn_info_opts(struct
/// fuse_args *args)`: NULL on a parse error (said on stderr).
#[no_mangle]
pub unsafe extern "C" fn fuse_parse_conn_info_opts(args: *mut FuseArgs) -> *mut ConnInfoOpts {
    // FUSE_OPT_KEY(templ, key): offset -1U (fuse_opt.h).
    let mut spec: Vec<FuseOpt> = SPEC
        .iter()
        .map(|&(t, key)| FuseOpt {
            templ: t.as_ptr(),
            offset: u32::MAX as libc::c_ulong,
            value: key,
        })
        .collect();
    spec.push(FuseOpt {
        templ: std::ptr::null(),
        offset: 0,
        value: 0,
    });
    // SAFETY: malloc'd (the program frees it with free(3)), zeroed.
    let opts = unsafe { libc::calloc(1, std::mem::size_of::<ConnInfoOpts>()) } as *mut ConnInfoOpts;
    if opts.is_null() {
        log_error("fuse: memory allocation failed");
        return opts;
    }
    let proc_: ProcFn = record;
    // SAFETY: the program's vector, our spec (terminated) and record.
    if unsafe { fuse_opt_parse(args, opts as *mut c_void, spec.as_ptr(), Some(proc_)) } == -1 {
        // SAFETY: ours, from calloc.
        unsafe { libc::free(opts as *mut c_void) };
        return std::ptr::null_mut();
    }
    opts
}
versioned!(fuse_parse_conn_info_opts, "FUSE_3.0");

/// `void fuse_apply_conn_info_opts(struct fuse_conn_info_opts *opts,
/// struct fuse_conn_info *conn)`: the options on `conn`, capabilities only
/// where the kernel has them.
#[no_mangle]
pub unsafe extern "C" fn fuse_apply_conn_info_opts(
    opts: *const ConnInfoOpts,
    conn: *mut FuseConnInfo,
) {
    // SAFETY: ours from fuse_parse_conn_info_opts, and the program's conn.
    let (Some(opts), Some(conn)) = (unsafe { opts.as_ref() }, unsafe { conn.as_mut() }) else {
        return;
    };
    for &(key, value) in &opts.seen[..opts.count.min(opts.seen.len())] {
        let mut want = |c: u32, on: bool| {
            if on {
                conn.want |= c & conn.capable;
            } else {
                conn.want &= !c;
            }
        };
        match key {
            0 => conn.max_write = value,
            1 => conn.max_readahead = value,
            2 => conn.max_background = value,
            3 => conn.congestion_threshold = value,
            4 => conn.time_gran = value,
            5 => want(cap::ASYNC_READ, false),
            6 => want(cap::ASYNC_READ, true),
            7 => want(cap::ATOMIC_O_TRUNC, true),
            8 => want(cap::POSIX_LOCKS | cap::FLOCK_LOCKS, false),
            9 => want(cap::FLOCK_LOCKS, false),
            10 => want(cap::POSIX_LOCKS, false),
            11 => want(cap::SPLICE_WRITE, true),
            12 => want(cap::SPLICE_WRITE, false),
            13 => want(cap::SPLICE_MOVE, true),
            14 => want(cap::SPLICE_MOVE, false),
            15 => want(cap::SPLICE_READ, true),
            16 => want(cap::SPLICE_READ, false),
            17 => want(cap::AUTO_INVAL_DATA, true),
            18 => want(cap::AUTO_INVAL_DATA, false),
            19 => want(cap::READDIRPLUS | cap::READDIRPLUS_AUTO, false),
            20 => {
                want(cap::READDIRPLUS, true);
                want(cap::READDIRPLUS_AUTO, false);
            }
            21 => want(cap::READDIRPLUS | cap::READDIRPLUS_AUTO, true),
            22 => want(cap::ASYNC_DIO, true),
            23 => want(cap::ASYNC_DIO, false),
            24 => want(cap::WRITEBACK_CACHE, true),
            25 => want(cap::WRITEBACK_CACHE, false),
            _ => {}
        }
    }
}
versioned!(fuse_apply_conn_info_opts, "FUSE_3.0");

/// `int fuse_open_channel(const char *mountpoint, const char *options)`:
/// mount (options as a `-o` list) and return the /dev/fuse fd, which then
/// belongs to the caller (the mount stays until unmounted by name).
#[no_mangle]
pub unsafe extern "C" fn fuse_open_channel(
    mountpoint: *const c_char,
    options: *const c_char,
) -> c_int {
    use std::os::fd::AsRawFd;
    if mountpoint.is_null() {
        return -1;
    }
    // SAFETY: NUL-terminated strings (NULL options: none).
    let (mnt, opts) = unsafe {
        (
            CStr::from_ptr(mountpoint).to_string_lossy().into_owned(),
            options
                .as_ref()
                .map(|o| CStr::from_ptr(o).to_string_lossy().into_owned()),
        )
    };
    let args: Vec<String> = opts
        .into_iter()
        .flat_map(|o| ["-o".to_string(), o])
        .collect();
    let parsed = match crate::session_opts::parse(&args) {
        Ok(p) => p,
        Err(msg) => {
            log_error(&msg);
            return -1;
        }
    };
    match fusebox::mount::Mount::new(std::path::Path::new(&mnt), &parsed.options.mount) {
        Ok(m) => {
            let fd = m.device().as_raw_fd();
            // The caller owns the fd and the mount from here on: never
            // closed or unmounted on our side.
            std::mem::forget(m);
            fd
        }
        Err(e) => {
            log_error(&format!("fuse: mounting {mnt}: {e}"));
            -1
        }
    }
}
versioned!(fuse_open_channel, "FUSE_3.3");
