//! fuse_opt.h's argument-vector and option-list functions. Strings and
//! vectors the program may free(3) or that the library frees are
//! allocated with malloc(3).
//!
//! Soundness: every pointer comes from the C caller, who by fuse_opt.h's
//! contract passes a valid `struct fuse_args` (argv NULL terminated,
//! `argc` entries), NUL-terminated strings and an option array ending in
//! a NULL template. Each block below states what it relies on.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;

use super::versioned;
use crate::abi::{FuseArgs, FuseOpt};
use crate::args;

/// A malloc'd copy of `bytes` with a NUL; NULL when out of memory.
fn c_strdup(bytes: &[u8]) -> *mut c_char {
    // SAFETY: malloc of len + 1 bytes; the copy writes exactly len bytes
    // and the NUL within it, and only if the allocation succeeded.
    unsafe {
        let p = libc::malloc(bytes.len() + 1).cast::<u8>();
        if p.is_null() {
            return ptr::null_mut();
        }
        ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        *p.add(bytes.len()) = 0;
        p.cast()
    }
}

/// The bytes of a C string the caller passed (None for NULL).
///
/// # Safety
/// `s` is NULL or a NUL-terminated string that outlives the result.
unsafe fn bytes<'a>(s: *const c_char) -> Option<&'a [u8]> {
    // SAFETY: the caller's contract above.
    (!s.is_null()).then(|| unsafe { CStr::from_ptr(s) }.to_bytes())
}

/// Make `args` own a malloc'd vector with room for one more entry. A
/// vector the program built itself (`allocated == 0`, e.g.
/// `FUSE_ARGS_INIT(argc, argv)`) is copied first, so that freeing frees
/// only what the library allocated.
///
/// # Safety
/// `args` is a valid `struct fuse_args`.
unsafe fn make_room(args: &mut FuseArgs) -> bool {
    let argc = args.argc.max(0) as usize;
    if args.allocated == 0 {
        // SAFETY: a new vector of argc + 2 pointers; the old entries are
        // read from the caller's vector (argc valid strings) and copied.
        unsafe {
            let v = libc::calloc(argc + 2, size_of::<*mut c_char>()).cast::<*mut c_char>();
            if v.is_null() {
                return false;
            }
            for i in 0..argc {
                let s = *args.argv.add(i);
                let copy = c_strdup(bytes(s).unwrap_or_default());
                if copy.is_null() {
                    for j in 0..i {
                        libc::free((*v.add(j)).cast());
                    }
                    libc::free(v.cast());
                    return false;
                }
                *v.add(i) = copy;
            }
            args.argv = v;
            args.allocated = 1;
        }
        return true;
    }
    // SAFETY: argv was malloc'd by this library (allocated == 1); the
    // new size holds argc entries, the new one and the NULL.
    unsafe {
        let v = libc::realloc(args.argv.cast(), (argc + 2) * size_of::<*mut c_char>())
            .cast::<*mut c_char>();
        if v.is_null() {
            return false;
        }
        args.argv = v;
    }
    true
}

/// `int fuse_opt_add_arg(struct fuse_args *args, const char *arg)`.
pub unsafe extern "C" fn fuse_opt_add_arg(args: *mut FuseArgs, arg: *const c_char) -> c_int {
    // SAFETY: `args` and `arg` per fuse_opt.h: a valid struct and string.
    unsafe {
        let Some(args) = args.as_mut() else {
            return -1;
        };
        let argc = args.argc.max(0);
        fuse_opt_insert_arg(args, argc, arg)
    }
}

/// `fuse_opt_add_arg` as exported (see the note in mod.rs).
#[export_name = "fuse_opt_add_arg"]
pub unsafe extern "C" fn export_fuse_opt_add_arg(args: *mut FuseArgs, arg: *const c_char) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_opt_add_arg(args, arg) }
}
versioned!(fuse_opt_add_arg, "FUSE_3.0");

/// `int fuse_opt_insert_arg(struct fuse_args *args, int pos, const char *arg)`.
pub unsafe extern "C" fn fuse_opt_insert_arg(
    args: *mut FuseArgs,
    pos: c_int,
    arg: *const c_char,
) -> c_int {
    // SAFETY: per fuse_opt.h, `args` is a valid struct and `arg` a string;
    // after make_room the vector holds argc + 2 slots.
    unsafe {
        let (Some(args), Some(arg)) = (args.as_mut(), bytes(arg)) else {
            return -1;
        };
        let argc = args.argc.max(0);
        if pos < 0 || pos > argc {
            super::log_error(&format!(
                "fuse: fuse_opt_insert_arg: position {pos} outside 0..={argc}"
            ));
            return -1;
        }
        let copy = c_strdup(arg);
        if copy.is_null() {
            super::log_error("fuse: memory allocation failed");
            return -1;
        }
        if !make_room(args) {
            libc::free(copy.cast());
            super::log_error("fuse: memory allocation failed");
            return -1;
        }
        let (pos, argc) = (pos as usize, argc as usize);
        ptr::copy(args.argv.add(pos), args.argv.add(pos + 1), argc - pos);
        *args.argv.add(pos) = copy;
        *args.argv.add(argc + 1) = ptr::null_mut();
        args.argc += 1;
    }
    0
}

/// `fuse_opt_insert_arg` as exported (see the note in mod.rs).
#[export_name = "fuse_opt_insert_arg"]
pub unsafe extern "C" fn export_fuse_opt_insert_arg(
    args: *mut FuseArgs,
    pos: c_int,
    arg: *const c_char,
) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_opt_insert_arg(args, pos, arg) }
}
versioned!(fuse_opt_insert_arg, "FUSE_3.0");

/// `void fuse_opt_free_args(struct fuse_args *args)`: frees what the
/// library allocated; the struct itself is the caller's.
pub unsafe extern "C" fn fuse_opt_free_args(args: *mut FuseArgs) {
    // SAFETY: a valid struct per fuse_opt.h; an allocated vector holds
    // argc malloc'd strings.
    unsafe {
        let Some(args) = args.as_mut() else {
            return;
        };
        if args.allocated != 0 && !args.argv.is_null() {
            for i in 0..args.argc.max(0) as usize {
                libc::free((*args.argv.add(i)).cast());
            }
            libc::free(args.argv.cast());
        }
        args.argc = 0;
        args.argv = ptr::null_mut();
        args.allocated = 0;
    }
}

/// `fuse_opt_free_args` as exported (see the note in mod.rs).
#[export_name = "fuse_opt_free_args"]
pub unsafe extern "C" fn export_fuse_opt_free_args(args: *mut FuseArgs) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_opt_free_args(args) }
}
versioned!(fuse_opt_free_args, "FUSE_3.0");

/// Replace the malloc'd list at `*opts` by `grown`.
///
/// # Safety
/// `opts` points to NULL or to a malloc'd string.
unsafe fn replace_list(opts: *mut *mut c_char, grown: &[u8]) -> c_int {
    let copy = c_strdup(grown);
    if copy.is_null() {
        super::log_error("fuse: memory allocation failed");
        return -1;
    }
    // SAFETY: the caller's contract; the old list is ours to free.
    unsafe {
        libc::free((*opts).cast());
        *opts = copy;
    }
    0
}

/// `int fuse_opt_add_opt(char **opts, const char *opt)`.
pub unsafe extern "C" fn fuse_opt_add_opt(opts: *mut *mut c_char, opt: *const c_char) -> c_int {
    // SAFETY: per fuse_opt.h, `opts` points to NULL or a malloc'd list,
    // `opt` is a string.
    unsafe {
        let (false, Some(opt)) = (opts.is_null(), bytes(opt)) else {
            return -1;
        };
        let grown = args::add_opt(bytes(*opts), opt);
        replace_list(opts, &grown)
    }
}

/// `fuse_opt_add_opt` as exported (see the note in mod.rs).
#[export_name = "fuse_opt_add_opt"]
pub unsafe extern "C" fn export_fuse_opt_add_opt(
    opts: *mut *mut c_char,
    opt: *const c_char,
) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_opt_add_opt(opts, opt) }
}
versioned!(fuse_opt_add_opt, "FUSE_3.0");

/// `int fuse_opt_add_opt_escaped(char **opts, const char *opt)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_opt_add_opt_escaped(
    opts: *mut *mut c_char,
    opt: *const c_char,
) -> c_int {
    // SAFETY: as for fuse_opt_add_opt.
    unsafe {
        let (false, Some(opt)) = (opts.is_null(), bytes(opt)) else {
            return -1;
        };
        let grown = args::add_opt_escaped(bytes(*opts), opt);
        replace_list(opts, &grown)
    }
}
versioned!(fuse_opt_add_opt_escaped, "FUSE_3.0");

/// The entries of an option array with their templates, up to its
/// NULL-template end.
///
/// # Safety
/// `opts` is NULL or an array ending in an entry whose `templ` is NULL,
/// each template a string that outlives the iteration.
pub(super) unsafe fn entries<'a>(
    opts: *const FuseOpt,
) -> impl Iterator<Item = (FuseOpt, &'a [u8])> {
    let mut i = 0;
    std::iter::from_fn(move || {
        if opts.is_null() {
            return None;
        }
        // SAFETY: the caller's contract: entries up to the end marker.
        unsafe {
            let opt = *opts.add(i);
            let t = bytes(opt.templ)?;
            i += 1;
            Some((opt, t))
        }
    })
}

/// `int fuse_opt_match(const struct fuse_opt opts[], const char *opt)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_opt_match(opts: *const FuseOpt, opt: *const c_char) -> c_int {
    // SAFETY: per fuse_opt.h, an option array with its end marker and a
    // string.
    unsafe {
        let Some(opt) = bytes(opt) else {
            return 0;
        };
        entries(opts).any(|(_, t)| args::template_matches(t, opt).is_some()) as c_int
    }
}
versioned!(fuse_opt_match, "FUSE_3.0");
