//! Every struct a program shares with the library, size and field
//! offsets, against a C program compiled with Debian's libfuse3-dev (3.14)
//! headers: any difference fails. Also where GCC puts fuse_file_info's bit
//! fields, and the size of the 3.0 `fuse_cmdline_opts` prefix.

use std::mem::{offset_of, size_of};
use std::process::Command;

use fuse3::abi::*;

/// (C struct, Rust size, [(field, Rust offset)]) for each shared struct.
macro_rules! layouts {
    ($($c:literal => $t:ty { $($f:ident),* $(,)? })*) => {
        vec![$((
            $c,
            size_of::<$t>(),
            vec![$((stringify!($f), offset_of!($t, $f))),*],
        )),*]
    };
}

/// A struct's C name, size and (field, offset) list.
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

fn rust_side() -> Vec<Layout> {
    layouts! {
        "fuse_opt" => FuseOpt { templ, offset, value }
        "fuse_args" => FuseArgs { argc, argv, allocated }
        "fuse_file_info" => FuseFileInfo { flags, fh, lock_owner, poll_events }
        "fuse_loop_config_v1" => FuseLoopConfigV1 { clone_fd, max_idle_threads }
        "fuse_conn_info" => FuseConnInfo {
            proto_major, proto_minor, max_write, max_read, max_readahead, capable,
            want, max_background, congestion_threshold, time_gran, reserved,
        }
        "fuse_buf" => FuseBuf { size, flags, mem, fd, pos }
        "fuse_bufvec" => FuseBufvec { count, idx, off, buf }
        "fuse_config" => FuseConfig {
            set_gid, gid, set_uid, uid, set_mode, umask, entry_timeout,
            negative_timeout, attr_timeout, intr, intr_signal, remember,
            hard_remove, use_ino, readdir_ino, direct_io, kernel_cache,
            auto_cache, no_rofd_flush, ac_attr_timeout_set, ac_attr_timeout,
            nullpath_ok, show_help, modules, debug,
        }
        "fuse_operations" => FuseOperations {
            getattr, readlink, mknod, mkdir, unlink, rmdir, symlink, rename, link,
            chmod, chown, truncate, open, read, write, statfs, flush, release,
            fsync, setxattr, getxattr, listxattr, removexattr, opendir, readdir,
            releasedir, fsyncdir, init, destroy, access, create, lock, utimens,
            bmap, ioctl, poll, write_buf, read_buf, flock, fallocate,
            copy_file_range, lseek,
        }
        "fuse_lowlevel_ops" => FuseLowlevelOps {
            init, destroy, lookup, forget, getattr, setattr, readlink, mknod,
            mkdir, unlink, rmdir, symlink, rename, link, open, read, write, flush,
            release, fsync, opendir, readdir, releasedir, fsyncdir, statfs,
            setxattr, getxattr, listxattr, removexattr, access, create, getlk,
            setlk, bmap, ioctl, poll, write_buf, retrieve_reply, forget_multi,
            flock, fallocate, readdirplus, copy_file_range, lseek,
        }
        "fuse_entry_param" => FuseEntryParam { ino, generation, attr, attr_timeout, entry_timeout }
        "fuse_ctx" => FuseCtx { uid, gid, pid, umask }
        "fuse_context" => FuseContext { fuse, uid, gid, pid, private_data, umask }
        "fuse_forget_data" => FuseForgetData { ino, nlookup }
        "fuse_cmdline_opts" => FuseCmdlineOpts {
            singlethread, foreground, debug, nodefault_subtype, mountpoint,
            show_version, show_help, clone_fd, max_idle_threads, max_threads,
        }
    }
}

/// The C program: one line per struct and field, "name size|offset".
fn c_program(structs: &[Layout]) -> String {
    let mut c = String::from(
        "#define FUSE_USE_VERSION 314\n#include <stddef.h>\n#include <stdio.h>\n\
         #include <fuse.h>\n#include <fuse_lowlevel.h>\nint main(void) {\n",
    );
    for (s, _, fields) in structs {
        c += &format!("  printf(\"{s} %zu\\n\", sizeof(struct {s}));\n");
        for (f, _) in fields {
            c += &format!("  printf(\"{s}.{f} %zu\\n\", offsetof(struct {s}, {f}));\n");
        }
    }
    // fuse_file_info's bit fields: each set alone, the word read back.
    for bit in [
        "writepage",
        "direct_io",
        "keep_cache",
        "flush",
        "nonseekable",
        "flock_release",
        "cache_readdir",
        "noflush",
    ] {
        c += &format!(
            "  {{ struct fuse_file_info fi = {{0}}; unsigned w; fi.{bit} = 1; \
             memcpy(&w, (char *)&fi + sizeof(int), sizeof w); printf(\"bit.{bit} %u\\n\", w); }}\n"
        );
    }
    c += "  return 0;\n}\n";
    c.replace(
        "#include <stdio.h>",
        "#include <stdio.h>\n#include <string.h>",
    )
}

#[test]
fn every_shared_struct_matches_the_3_14_headers() {
    let structs = rust_side();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    std::fs::write(&src, c_program(&structs)).unwrap();
    let cc = Command::new("gcc")
        .args(["-I/usr/include/fuse3", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("gcc (scripts/setup.sh installs it, with libfuse3-dev)");
    assert!(
        cc.status.success(),
        "compiling against libfuse3-dev's headers: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let c: std::collections::HashMap<&str, usize> = text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k, v.parse().unwrap()))
        .collect();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (s, size, fields) in &structs {
        checked += 1;
        if c.get(s) != Some(size) {
            wrong.push(format!("sizeof(struct {s}): C {:?}, Rust {size}", c.get(s)));
        }
        for (f, off) in fields {
            checked += 1;
            let key = format!("{s}.{f}");
            if c.get(key.as_str()) != Some(off) {
                wrong.push(format!("{key}: C {:?}, Rust {off}", c.get(key.as_str())));
            }
        }
    }
    use file_info_bits::*;
    for (bit, value) in [
        ("writepage", WRITEPAGE),
        ("direct_io", DIRECT_IO),
        ("keep_cache", KEEP_CACHE),
        ("flush", FLUSH),
        ("nonseekable", NONSEEKABLE),
        ("flock_release", FLOCK_RELEASE),
        ("cache_readdir", CACHE_READDIR),
        ("noflush", NOFLUSH),
    ] {
        checked += 1;
        let key = format!("bit.{bit}");
        if c.get(key.as_str()) != Some(&(value as usize)) {
            wrong.push(format!("{key}: C {:?}, Rust {value}", c.get(key.as_str())));
        }
    }
    assert!(
        wrong.is_empty(),
        "layouts differ from the 3.14 headers:\n{}",
        wrong.join("\n")
    );
    assert!(checked >= 190, "only {checked} checks");
}
