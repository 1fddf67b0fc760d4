//! `fuse_opt_parse`: libfuse's command line and `-o` option parsing, with
//! the semantics fuse_opt.h documents (and `tests/differential.rs`
//! compares with Debian's library on the same program):
//!
//! - `argv[0]` is kept; arguments not starting with `-`, and all after a
//!   `--`, are non-options (key `FUSE_OPT_KEY_NONOPT`);
//! - `-o a,b` and `-oa,b` are option lists, split at commas a backslash
//!   does not escape; each option is matched against the templates;
//!   kept options are collected and come back as one `-o list` right
//!   after `argv[0]`;
//! - every template an argument matches acts: set the int at `offset` to
//!   `value`, or convert the parameter with the template's format (`%s`
//!   allocates a copy and frees the previous string), or, for offset -1,
//!   call the processing function with `value` as the key;
//! - "-x " templates take their parameter joined or from the next
//!   argument, handed on joined ("-xparam");
//! - an argument no template matches goes to the processing function
//!   with `FUSE_OPT_KEY_OPT`; `FUSE_OPT_KEY_KEEP` and `_DISCARD` keep or
//!   drop without calling it; the function returns -1 (error), 0 (drop)
//!   or 1 (keep); a NULL function keeps everything;
//! - a trailing `--` with nothing after it is dropped.
//!
//! Soundness: all pointers come from the caller under fuse_opt.h's
//! contract: `args` a valid argument vector, `opts` an array ending in a
//! NULL template, `data` a struct in which each template's `offset` names
//! a variable of the type its format (or int, without one) implies.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr, CString};
use std::ptr;

use super::opt::{
    entries, fuse_opt_add_arg, fuse_opt_add_opt, fuse_opt_free_args, fuse_opt_insert_arg,
};
use super::versioned;
use crate::abi::{FuseArgs, FuseOpt};
use crate::args::template_matches;

const KEY_OPT: c_int = -1;
const KEY_NONOPT: c_int = -2;
pub(super) const KEY_KEEP: c_int = -3;
const KEY_DISCARD: c_int = -4;

pub(super) type ProcFn =
    unsafe extern "C" fn(*mut c_void, *const c_char, c_int, *mut FuseArgs) -> c_int;

struct Parse {
    data: *mut c_void,
    opts: *const FuseOpt,
    proc_: Option<ProcFn>,
    out: FuseArgs,
    /// The kept `-o` options, comma separated (malloc'd).
    optlist: *mut c_char,
    /// After a `--`: the output position just after it (0: none yet).
    nonopt: c_int,
}

/// Where an argument is going if kept: the argument vector, or the
/// collected `-o` list.
#[derive(Clone, Copy, PartialEq)]
enum Dest {
    Args,
    OptList,
}

impl Parse {
    /// Keep `arg` where it belongs.
    fn keep(&mut self, arg: &CStr, dest: Dest) -> c_int {
        // SAFETY: `out` and `optlist` are ours, in the shapes the
        // functions expect; `arg` is a NUL-terminated string.
        unsafe {
            match dest {
                Dest::Args => fuse_opt_add_arg(&mut self.out, arg.as_ptr()),
                Dest::OptList => fuse_opt_add_opt(&mut self.optlist, arg.as_ptr()),
            }
        }
    }

    /// The processing function's say on `arg` under `key`, then keep it
    /// if it says so.
    fn call_proc(&mut self, arg: &CStr, key: c_int, dest: Dest) -> c_int {
        if key == KEY_DISCARD {
            return 0;
        }
        if key != KEY_KEEP {
            if let Some(f) = self.proc_ {
                // SAFETY: the program's processing function, called as
                // fuse_opt.h documents, with our output vector.
                let r = unsafe { f(self.data, arg.as_ptr(), key, &mut self.out) };
                if r == -1 || r == 0 {
                    return r;
                }
            }
        }
        self.keep(arg, dest)
    }

    /// One template's action on `arg` (whose parameter starts at `param`).
    fn act(&mut self, opt: &FuseOpt, templ: &[u8], param: usize, arg: &CStr, dest: Dest) -> c_int {
        // FUSE_OPT_KEY writes -1U: 0xffffffff once widened to unsigned long.
        if opt.offset == c_ulong::from(u32::MAX) || opt.offset == c_ulong::MAX {
            return self.call_proc(arg, opt.value, dest);
        }
        // SAFETY: `data` + offset is the variable the program named.
        let var = unsafe { self.data.cast::<u8>().add(opt.offset as usize) };
        let format = templ
            .iter()
            .position(|&b| b == b'=' || b == b' ')
            .map(|i| &templ[i + 1..])
            .filter(|f| f.first() == Some(&b'%'));
        let Some(format) = format else {
            // SAFETY: without a format the variable is an int.
            unsafe { var.cast::<c_int>().write_unaligned(opt.value) };
            return 0;
        };
        let value = &arg.to_bytes()[param..];
        if format == b"%s" {
            let Ok(copy) = CString::new(value) else {
                return -1;
            };
            // SAFETY: a `%s` variable is a `char *`, NULL or malloc'd (the
            // program's initial value or an earlier parse's copy).
            unsafe {
                let slot = var.cast::<*mut c_char>();
                libc::free(slot.read_unaligned().cast());
                slot.write_unaligned(libc::strdup(copy.as_ptr()));
            }
            return 0;
        }
        let (Ok(fmt), Ok(value)) = (CString::new(format), CString::new(value)) else {
            return -1;
        };
        // SAFETY: sscanf with the program's own format into the variable
        // the program declared for it, as libfuse does.
        let n = unsafe { libc::sscanf(value.as_ptr(), fmt.as_ptr(), var) };
        if n != 1 {
            super::log_error(&format!(
                "fuse: invalid parameter in option `{}'",
                arg.to_string_lossy()
            ));
            return -1;
        }
        0
    }

    /// Every template `arg` matches acts; none: the processing function
    /// decides (`FUSE_OPT_KEY_OPT`). `rest` supplies the separate
    /// parameter of a "-x " template.
    fn option(
        &mut self,
        arg: &CStr,
        dest: Dest,
        rest: &mut dyn FnMut() -> Option<CString>,
    ) -> c_int {
        let mut matched = false;
        // SAFETY: an option array with its end marker (caller's contract).
        for (opt, templ) in unsafe { entries(self.opts) } {
            let Some(param) = template_matches(templ, arg.to_bytes()) else {
                continue;
            };
            matched = true;
            let sep_is_space = templ.get(param) == Some(&b' ');
            let r = if sep_is_space && arg.to_bytes().len() == param {
                // "-x" then the parameter as the next argument.
                let Some(next) = rest() else {
                    super::log_error(&format!(
                        "fuse: missing argument after `{}'",
                        arg.to_string_lossy()
                    ));
                    return -1;
                };
                let mut joined = arg.to_bytes().to_vec();
                joined.extend_from_slice(next.as_bytes());
                let joined = CString::new(joined).expect("two C strings joined");
                self.act(&opt, templ, param, &joined, dest)
            } else {
                self.act(&opt, templ, param, arg, dest)
            };
            if r == -1 {
                return -1;
            }
        }
        if matched {
            0
        } else {
            self.call_proc(arg, KEY_OPT, dest)
        }
    }

    /// `-o a,b\,c`: each option of the list.
    fn option_list(&mut self, list: &[u8]) -> c_int {
        let mut cur = Vec::new();
        let mut items = Vec::new();
        let mut bytes = list.iter();
        while let Some(&b) = bytes.next() {
            match b {
                b'\\' => {
                    if let Some(&n) = bytes.next() {
                        cur.push(n);
                    }
                }
                b',' => items.push(std::mem::take(&mut cur)),
                _ => cur.push(b),
            }
        }
        items.push(cur);
        for item in items {
            let Ok(item) = CString::new(item) else {
                return -1;
            };
            if self.option(&item, Dest::OptList, &mut || None) == -1 {
                return -1;
            }
        }
        0
    }
}

/// `int fuse_opt_parse(struct fuse_args *args, void *data,
/// const struct fuse_opt opts[], fuse_opt_proc_t proc)`.
pub unsafe extern "C" fn fuse_opt_parse(
    args: *mut FuseArgs,
    data: *mut c_void,
    opts: *const FuseOpt,
    proc_: Option<ProcFn>,
) -> c_int {
    // SAFETY: `args` is NULL or a valid vector (caller's contract).
    let Some(args) = (unsafe { args.as_mut() }) else {
        return 0;
    };
    if args.argc <= 0 || args.argv.is_null() {
        return 0;
    }
    // The caller's own strings, not copies: the processing function gets
    // these very pointers for non-options and "-x" options, as from
    // libfuse, and programs keep them (squashfuse_ll keeps its image
    // path). They stay valid as long as the caller's vector does: for
    // main()'s argv, for good.
    let input: Vec<&CStr> = (0..args.argc as usize)
        // SAFETY: argc valid strings, not freed before we return.
        .map(|i| unsafe { CStr::from_ptr(*args.argv.add(i)) })
        .collect();
    let mut p = Parse {
        data,
        opts,
        proc_,
        out: FuseArgs {
            argc: 0,
            argv: ptr::null_mut(),
            allocated: 0,
        },
        optlist: ptr::null_mut(),
        nonopt: 0,
    };
    let result = parse_all(&mut p, &input);
    // SAFETY: the list is ours (malloc'd or NULL).
    let free_list = |p: &mut Parse| unsafe { libc::free(p.optlist.cast()) };
    if result == -1 {
        free_list(&mut p);
        // SAFETY: our output vector.
        unsafe { fuse_opt_free_args(&mut p.out) };
        return -1;
    }
    // SAFETY: the output vector is ours and well formed; `args` is the
    // caller's, freed as fuse_opt_free_args would before taking ours.
    unsafe {
        if !p.optlist.is_null() {
            let ok = fuse_opt_insert_arg(&mut p.out, 1, c"-o".as_ptr()) == 0
                && fuse_opt_insert_arg(&mut p.out, 2, p.optlist) == 0;
            free_list(&mut p);
            if !ok {
                fuse_opt_free_args(&mut p.out);
                return -1;
            }
        }
        let last = p.out.argc - 1;
        if p.nonopt != 0
            && p.nonopt == p.out.argc
            && CStr::from_ptr(*p.out.argv.add(last as usize)).to_bytes() == b"--"
        {
            libc::free((*p.out.argv.add(last as usize)).cast());
            *p.out.argv.add(last as usize) = ptr::null_mut();
            p.out.argc -= 1;
        }
        fuse_opt_free_args(args);
        *args = p.out;
    }
    0
}

/// `fuse_opt_parse` as exported (see the note in mod.rs).
#[export_name = "fuse_opt_parse"]
pub unsafe extern "C" fn export_fuse_opt_parse(
    args: *mut FuseArgs,
    data: *mut c_void,
    opts: *const FuseOpt,
    proc_: Option<ProcFn>,
) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_opt_parse(args, data, opts, proc_) }
}
versioned!(fuse_opt_parse, "FUSE_3.0");

fn parse_all(p: &mut Parse, input: &[&CStr]) -> c_int {
    if p.keep(input[0], Dest::Args) == -1 {
        return -1;
    }
    let mut i = 1;
    while i < input.len() {
        let arg = input[i];
        i += 1;
        let b = arg.to_bytes();
        let r = if p.nonopt != 0 || b.first() != Some(&b'-') {
            p.call_proc(arg, KEY_NONOPT, Dest::Args)
        } else if b.get(1) == Some(&b'o') && b.len() > 2 {
            p.option_list(&b[2..])
        } else if b == b"-o" {
            match input.get(i) {
                Some(list) => {
                    i += 1;
                    p.option_list(list.to_bytes())
                }
                None => {
                    super::log_error("fuse: missing argument after `-o'");
                    -1
                }
            }
        } else if b == b"--" {
            let r = p.keep(arg, Dest::Args);
            p.nonopt = p.out.argc;
            r
        } else {
            let mut next = || {
                let n = input.get(i).map(|s| CString::from(*s));
                i += n.is_some() as usize;
                n
            };
            p.option(arg, Dest::Args, &mut next)
        };
        if r == -1 {
            return -1;
        }
    }
    0
}
