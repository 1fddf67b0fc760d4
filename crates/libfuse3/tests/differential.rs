//! The drop-in against Debian's own libfuse3 3.14, by the same unchanged
//! binary: a C program compiled and linked against Debian's library (with
//! BIND_NOW, as Debian links its packages) runs once as linked and once
//! with the loader pointed at ours (`LD_LIBRARY_PATH`); for what is
//! implemented so far (fuse_opt.h's argument and option-list helpers) the
//! outputs must be the same. Also: every exported function carries its
//! libfuse symbol version, and the SONAME is libfuse3.so.3.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where cargo put the cdylib: beside this test in `deps` (where `cargo
/// test` builds it; the copy one level up is refreshed only by `cargo
/// build`).
fn built_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libfuse3.so");
    assert!(lib.exists(), "{} not built", lib.display());
    lib
}

const PROGRAM: &str = r#"
#define FUSE_USE_VERSION 314
#include <fuse.h>
#include <fuse_log.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void capture(enum fuse_log_level level, const char *fmt, va_list ap) {
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    printf("log level=%d: %s", level, line);
}

static void show(const char *what, struct fuse_args *a) {
    printf("%s: argc=%d allocated=%d [", what, a->argc, a->allocated);
    for (int i = 0; i < a->argc; i++) printf("%s\"%s\"", i ? ", " : "", a->argv[i]);
    printf("] end=%s\n", a->argv && a->argv[a->argc] == NULL ? "NULL" : "?");
}

int main(int argc, char **argv) {
    (void)argc; (void)argv;
    /* Built the way programs build one: from empty (libfuse asserts on
       adding to a vector it did not allocate; fusebox copies it). */
    struct fuse_args a = FUSE_ARGS_INIT(0, NULL);
    printf("add %d\n", fuse_opt_add_arg(&a, "prog"));
    printf("add %d\n", fuse_opt_add_arg(&a, "-f"));
    printf("add %d\n", fuse_opt_add_arg(&a, "mnt"));
    printf("add %d\n", fuse_opt_add_arg(&a, "-o"));
    printf("add %d\n", fuse_opt_add_arg(&a, "ro,uid=1"));
    printf("insert %d\n", fuse_opt_insert_arg(&a, 1, "-d"));
    printf("insert %d\n", fuse_opt_insert_arg(&a, 0, "first"));
    printf("insert %d\n", fuse_opt_insert_arg(&a, a.argc, "last"));
    show("args", &a);
    fuse_opt_free_args(&a);
    printf("freed: argc=%d argv=%s allocated=%d\n", a.argc, a.argv ? "set" : "NULL", a.allocated);
    struct fuse_args e = FUSE_ARGS_INIT(0, NULL);
    printf("add %d\n", fuse_opt_add_arg(&e, "only"));
    show("empty", &e);
    fuse_opt_free_args(&e);

    char *opts = NULL;
    printf("opt %d\n", fuse_opt_add_opt(&opts, "ro"));
    printf("opt %d\n", fuse_opt_add_opt(&opts, "uid=1"));
    printf("opt %d\n", fuse_opt_add_opt_escaped(&opts, "a,b\\c"));
    printf("opt %d\n", fuse_opt_add_opt(&opts, ""));
    printf("opts: %s\n", opts);
    free(opts);

    struct fuse_opt spec[] = {
        FUSE_OPT_KEY("ro", 1), FUSE_OPT_KEY("uid=%u", 2), FUSE_OPT_KEY("-x ", 3),
        FUSE_OPT_KEY("--name=", 4), FUSE_OPT_KEY("a=b", 5), FUSE_OPT_END
    };
    const char *probe[] = { "ro", "rw", "uid=12", "uid", "-xfoo", "-x", "-y",
                            "--name=z", "--name", "a=b", "a=c", "", NULL };
    for (int i = 0; probe[i]; i++) printf("match \"%s\" %d\n", probe[i], fuse_opt_match(spec, probe[i]));
    printf("match with no options %d\n", fuse_opt_match(NULL, "ro"));
    printf("version %d\n", fuse_version());

    /* The library's own error messages reach an installed log function. */
    fuse_set_log_func(capture);
    fuse_log(FUSE_LOG_INFO, "direct %d %s\n", 42, "text");
    struct fuse_args bad = FUSE_ARGS_INIT(0, NULL);
    fuse_opt_add_arg(&bad, "prog");
    fuse_opt_add_arg(&bad, "-o");
    printf("parse %d\n", fuse_opt_parse(&bad, NULL, NULL, NULL));
    fuse_opt_free_args(&bad);
    fuse_set_log_func(NULL);
    return 0;
}
"#;

/// fuse_opt_parse over many command lines: every option kind, the
/// processing function keeping, dropping, adding and failing, `--`, and
/// errors; what the struct and the vector look like after each.
const PARSE_PROGRAM: &str = r#"
#define FUSE_USE_VERSION 314
#include <fuse.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct conf { int ro; int debug; unsigned uid; unsigned long size; char *name; char *xval; int fg; int seen_key; };
enum { K_HELP = 10, K_VERBOSE, K_ADD, K_FAIL, K_DROP };

static int proc(void *data, const char *arg, int key, struct fuse_args *out) {
    struct conf *c = data;
    printf("  proc key=%d arg=\"%s\"\n", key, arg);
    switch (key) {
    case K_HELP: c->seen_key++; return 0;
    case K_VERBOSE: c->seen_key += 10; return 1;
    case K_ADD: fuse_opt_add_arg(out, "-added"); return 0;
    case K_FAIL: return -1;
    case K_DROP: return 0;
    case FUSE_OPT_KEY_NONOPT: return strcmp(arg, "dropme") ? 1 : 0;
    default: return 1;
    }
}

#define C(t, m, v) { t, offsetof(struct conf, m), v }
static const struct fuse_opt spec[] = {
    C("ro", ro, 1), C("-r", ro, 1), C("debug", debug, 1), C("-d", debug, 1),
    C("uid=%u", uid, 0), C("size=%lu", size, 0), C("--name=%s", name, 0), C("name=%s", name, 0),
    C("-x %s", xval, 0), C("-f", fg, 1),
    FUSE_OPT_KEY("-h", K_HELP), FUSE_OPT_KEY("--help", K_HELP), FUSE_OPT_KEY("verbose", K_VERBOSE),
    FUSE_OPT_KEY("-v", K_VERBOSE), FUSE_OPT_KEY("add", K_ADD), FUSE_OPT_KEY("fail", K_FAIL),
    FUSE_OPT_KEY("drop", K_DROP), FUSE_OPT_KEY("keep", FUSE_OPT_KEY_KEEP),
    FUSE_OPT_KEY("discard", FUSE_OPT_KEY_DISCARD), FUSE_OPT_KEY("-k", FUSE_OPT_KEY_KEEP),
    FUSE_OPT_END
};

static void run(int with_proc, int argc, const char **argv) {
    struct fuse_args a = FUSE_ARGS_INIT(0, NULL);
    for (int i = 0; i < argc; i++) fuse_opt_add_arg(&a, argv[i]);
    struct conf c; memset(&c, 0, sizeof c);
    printf("[");
    for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "", argv[i]);
    printf("]\n");
    int r = fuse_opt_parse(&a, &c, spec, with_proc ? proc : NULL);
    printf("  -> %d ro=%d debug=%d uid=%u size=%lu name=%s x=%s fg=%d keys=%d\n  out:", r, c.ro, c.debug,
           c.uid, c.size, c.name ? c.name : "(null)", c.xval ? c.xval : "(null)", c.fg, c.seen_key);
    for (int i = 0; i < a.argc; i++) printf(" \"%s\"", a.argv[i]);
    printf(" end=%s\n", a.argv == NULL ? "none" : a.argv[a.argc] == NULL ? "NULL" : "?");
    free(c.name); free(c.xval);
    fuse_opt_free_args(&a);
}

#define RUN(p, ...) do { const char *v[] = { __VA_ARGS__ }; run(p, sizeof v / sizeof *v, v); } while (0)

int main(void) {
    RUN(1, "prog", "-f", "mnt");
    RUN(1, "prog", "-o", "ro,uid=42,size=123456789012", "mnt", "-d");
    RUN(1, "prog", "-oro,unknown,other=1", "mnt");
    RUN(1, "prog", "-o", "name=a\\,b,verbose", "-o", "keep,discard,drop", "mnt");
    RUN(1, "prog", "--name=hello", "--name=again", "mnt");
    RUN(1, "prog", "-x", "sep", "-xjoined", "mnt");
    RUN(1, "prog", "-h", "--help", "-v", "-k", "mnt");
    RUN(1, "prog", "dropme", "keepme", "--", "-f", "-o", "ro");
    RUN(1, "prog", "mnt", "--");
    RUN(1, "prog", "-o", "add", "mnt");
    RUN(1, "prog", "-unknown", "--long-unknown=3", "mnt");
    RUN(1, "prog", "-o", "uid=notanumber", "mnt");
    RUN(1, "prog", "-o", "fail", "mnt");
    RUN(1, "prog", "mnt", "-o");
    RUN(1, "prog", "mnt", "-x");
    RUN(0, "prog", "-o", "ro,verbose,unknown", "-h", "a", "--", "b");
    RUN(1, "prog");
    RUN(1, "prog", "-o", "", "mnt");
    RUN(1, "prog", "-o", "ro,,debug", "mnt");
    int r = fuse_opt_parse(NULL, NULL, NULL, NULL);
    printf("null args -> %d\n", r);
    return 0;
}
"#;

/// `program` compiled and linked against Debian's libfuse3 (BIND_NOW),
/// and the directory in which ours is libfuse3.so.3.
fn build_against_debian(dir: &Path, name: &str, program: &str) -> (PathBuf, PathBuf) {
    let (src, exe) = (dir.join(format!("{name}.c")), dir.join(name));
    std::fs::write(&src, program).unwrap();
    let cc = Command::new("gcc")
        .args(["-I/usr/include/fuse3", "-Wl,-z,now", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lfuse3")
        .output()
        .expect("gcc (scripts/setup.sh installs it, with libfuse3-dev)");
    assert!(
        cc.status.success(),
        "{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let ours = dir.join("lib");
    if !ours.exists() {
        std::fs::create_dir(&ours).unwrap();
        std::fs::copy(built_library(), ours.join("libfuse3.so.3")).unwrap();
    }
    (exe, ours)
}

/// (stdout, stderr) of `exe` run in `cwd` on Debian's library, and on ours.
#[allow(clippy::type_complexity)]
fn both_in(exe: &Path, ours: &Path, cwd: &Path) -> ((String, String), (String, String)) {
    let run = |ld: Option<&Path>| {
        let mut c = Command::new(exe);
        c.current_dir(cwd).env_remove("LD_LIBRARY_PATH");
        if let Some(d) = ld {
            c.env("LD_LIBRARY_PATH", d);
        }
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "{:?}: {}",
            ld,
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    (run(None), run(Some(ours)))
}

/// stdout of `exe` on Debian's library, and on ours.
fn both(exe: &Path, ours: &Path) -> (String, String) {
    let (debian, fusebox) = both_in(exe, ours, Path::new("."));
    (debian.0, fusebox.0)
}

#[test]
fn fuse_opt_parse_gives_what_debians_gives_on_every_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (exe, ours) = build_against_debian(dir.path(), "parse", PARSE_PROGRAM);
    let (debian, fusebox) = both(&exe, &ours);
    assert!(debian.contains("uid=42 size=123456789012"), "{debian}");
    if fusebox != debian {
        let diff: Vec<String> = debian
            .lines()
            .zip(fusebox.lines())
            .filter(|(a, b)| a != b)
            .map(|(a, b)| format!("debian:  {a}\nfusebox: {b}"))
            .collect();
        panic!("fuse_opt_parse differs from Debian's:\n{}", diff.join("\n"));
    }
}

/// fuse_parse_cmdline on typical and broken command lines; compiled for
/// the 3.14 API (`fuse_parse_cmdline@@FUSE_3.12`) and the 3.0 one
/// (`fuse_parse_cmdline@FUSE_3.0`, whose struct has no `max_threads`).
const CMDLINE_PROGRAM: &str = r#"
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void run(int argc, const char **argv) {
    struct fuse_args a = FUSE_ARGS_INIT(0, NULL);
    for (int i = 0; i < argc; i++) fuse_opt_add_arg(&a, argv[i]);
    struct fuse_cmdline_opts o;
    memset(&o, 0x55, sizeof o);
    o.mountpoint = NULL;
    printf("[");
    for (int i = 0; i < argc; i++) printf("%s%s", i ? " " : "", argv[i]);
    printf("]\n");
    int r = fuse_parse_cmdline(&a, &o);
    printf("  -> %d st=%d fg=%d dbg=%d nods=%d mnt=%s ver=%d help=%d clone=%d idle=%u", r,
           o.singlethread, o.foreground, o.debug, o.nodefault_subtype,
           o.mountpoint ? o.mountpoint : "(null)", o.show_version, o.show_help, o.clone_fd,
           o.max_idle_threads);
#if FUSE_USE_VERSION >= 312
    printf(" max=%u", o.max_threads);
#endif
    printf("\n  out:");
    for (int i = 0; i < a.argc; i++) printf(" \"%s\"", a.argv[i]);
    printf("\n");
    free(o.mountpoint);
    fuse_opt_free_args(&a);
}
#define RUN(...) do { const char *v[] = { __VA_ARGS__ }; run(sizeof v / sizeof *v, v); } while (0)
int main(void) {
    RUN("/usr/bin/myfs", "mnt");
    RUN("myfs", "-f", "-s", "-d", "mnt");
    RUN("myfs", "-o", "debug,clone_fd,max_idle_threads=5,max_threads=7,allow_other", "mnt");
    RUN("myfs", "-o", "subtype=x", "mnt");
    RUN("myfs", "-o", "fsname=y", "mnt");
    RUN("myfs", "-h");
    RUN("myfs", "--help", "mnt");
    RUN("myfs", "-V");
    RUN("myfs", "--version");
    RUN("myfs", "a", "b");
    RUN("myfs");
    RUN("myfs", "-o", "max_threads=abc", "mnt");
    RUN("myfs", "--unknown", "-x", "mnt", "-oro");
    RUN("myfs", "mnt", "--", "extra");
    RUN("", "mnt");
    RUN("myfs", "missing");
    RUN("myfs", "-o", "max_idle_threads=-1", "mnt");
    return 0;
}
"#;

#[test]
fn fuse_parse_cmdline_gives_what_debians_gives_in_both_abis() {
    let dir = tempfile::tempdir().unwrap();
    // The mountpoints the command lines name, relative to the cwd.
    let work = dir.path().join("work");
    for d in ["mnt", "a", "b"] {
        std::fs::create_dir_all(work.join(d)).unwrap();
    }
    for (name, api) in [("cmdline314", "314"), ("cmdline30", "30")] {
        let program = format!("#define FUSE_USE_VERSION {api}\n{CMDLINE_PROGRAM}");
        let (exe, ours) = build_against_debian(dir.path(), name, &program);
        let (debian, fusebox) = both_in(&exe, &ours, &work);
        assert!(debian.0.contains("-osubtype=myfs"), "{}", debian.0);
        assert_eq!(
            fusebox.0, debian.0,
            "API {api}: stdout differs from Debian's"
        );
        assert_eq!(
            fusebox.1, debian.1,
            "API {api}: stderr differs from Debian's"
        );
    }
}

/// fuse_buf_size and fuse_buf_copy between memory and files, split
/// across buffers, at end of file, with a bad fd.
const BUF_PROGRAM: &str = r#"
#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void show(const char *what, ssize_t r, const char *mem, size_t n) {
    printf("%s: %zd [", what, r);
    for (size_t i = 0; i < n; i++) putchar(mem[i] ? mem[i] : '.');
    printf("]\n");
}

int main(void) {
    char a[] = "0123456789", b[] = "abcdefghij", out[32];
    /* Memory to memory across two source and three destination buffers. */
    struct { struct fuse_bufvec v; struct fuse_buf more[2]; } src = {
        .v = { .count = 2, .buf = {{ .size = 10, .mem = a }} }, .more = {{ .size = 10, .mem = b }} };
    memset(out, 0, sizeof out);
    struct { struct fuse_bufvec v; struct fuse_buf more[2]; } dst = {
        .v = { .count = 3, .buf = {{ .size = 7, .mem = out }} },
        .more = {{ .size = 5, .mem = out + 7 }, { .size = 20, .mem = out + 12 }} };
    src.v.off = 3;
    printf("size src %zu dst %zu\n", fuse_buf_size(&src.v), fuse_buf_size(&dst.v));
    ssize_t r = fuse_buf_copy(&dst.v, &src.v, 0);
    show("mem->mem", r, out, 32);
    printf("  src idx=%zu off=%zu dst idx=%zu off=%zu\n", src.v.idx, src.v.off, dst.v.idx, dst.v.off);

    char path[] = "/tmp/fusebox-buf-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    /* Memory to a file at a position. */
    struct fuse_bufvec m = FUSE_BUFVEC_INIT(10);
    m.buf[0].mem = a;
    struct fuse_bufvec f = FUSE_BUFVEC_INIT(10);
    f.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK | FUSE_BUF_FD_RETRY;
    f.buf[0].fd = fd;
    f.buf[0].pos = 5;
    r = fuse_buf_copy(&f, &m, 0);
    char back[32] = {0};
    ssize_t n = pread(fd, back, sizeof back, 0);
    show("mem->file", r, back, n > 0 ? n : 0);
    /* The file to memory, asking for more than there is. */
    struct fuse_bufvec f2 = FUSE_BUFVEC_INIT(100);
    f2.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    f2.buf[0].fd = fd;
    f2.buf[0].pos = 8;
    char big[100]; memset(big, 0, sizeof big);
    struct fuse_bufvec m2 = FUSE_BUFVEC_INIT(100);
    m2.buf[0].mem = big;
    r = fuse_buf_copy(&m2, &f2, 0);
    show("file->mem at EOF", r, big, 12);
    /* Without FD_SEEK: the fd's own offset. */
    lseek(fd, 2, SEEK_SET);
    struct fuse_bufvec f3 = FUSE_BUFVEC_INIT(4);
    f3.buf[0].flags = FUSE_BUF_IS_FD;
    f3.buf[0].fd = fd;
    char four[4];
    struct fuse_bufvec m3 = FUSE_BUFVEC_INIT(4);
    m3.buf[0].mem = four;
    r = fuse_buf_copy(&m3, &f3, 0);
    show("file->mem read", r, four, 4);
    printf("  offset now %ld\n", (long)lseek(fd, 0, SEEK_CUR));
    /* File to file. */
    char path2[] = "/tmp/fusebox-buf-XXXXXX";
    int fd2 = mkstemp(path2);
    unlink(path2);
    struct fuse_bufvec g = FUSE_BUFVEC_INIT(12);
    g.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    g.buf[0].fd = fd2;
    g.buf[0].pos = 1;
    struct fuse_bufvec f4 = FUSE_BUFVEC_INIT(12);
    f4.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    f4.buf[0].fd = fd;
    f4.buf[0].pos = 3;
    r = fuse_buf_copy(&g, &f4, FUSE_BUF_NO_SPLICE);
    memset(back, 0, sizeof back);
    n = pread(fd2, back, sizeof back, 0);
    show("file->file", r, back, n > 0 ? n : 0);
    /* A bad fd. */
    struct fuse_bufvec bad = FUSE_BUFVEC_INIT(4);
    bad.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
    bad.buf[0].fd = 999;
    printf("exhausted destination: %zd\n", fuse_buf_copy(&m3, &bad, 0));
    struct fuse_bufvec m4 = FUSE_BUFVEC_INIT(4);
    m4.buf[0].mem = four;
    r = fuse_buf_copy(&m4, &bad, 0);
    printf("bad fd: %zd\n", r);
    struct fuse_bufvec huge = FUSE_BUFVEC_INIT(SIZE_MAX);
    printf("size max %d\n", fuse_buf_size(&huge) == SIZE_MAX);
    struct fuse_bufvec empty = FUSE_BUFVEC_INIT(0);
    printf("empty copy %zd\n", fuse_buf_copy(&empty, &m, 0));
    return 0;
}
"#;

#[test]
fn fuse_buf_copy_moves_what_debians_moves() {
    let dir = tempfile::tempdir().unwrap();
    let (exe, ours) = build_against_debian(dir.path(), "buf", BUF_PROGRAM);
    let (debian, fusebox) = both(&exe, &ours);
    assert!(debian.contains("mem->file: 10"), "{debian}");
    assert_eq!(fusebox, debian, "fuse_buf_copy differs from Debian's");
}

#[test]
fn the_same_debian_built_program_gives_the_same_answers_on_both_libraries() {
    let dir = tempfile::tempdir().unwrap();
    let (exe, ours) = build_against_debian(dir.path(), "opts", PROGRAM);
    let (debian, fusebox) = both(&exe, &ours);
    // Which library answered: both report API 3.14; the loader shows it.
    let ldd = Command::new("ldd")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &ours)
        .output()
        .unwrap();
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.contains(&*ours.to_string_lossy()),
        "not loaded from ours:\n{ldd}"
    );
    assert!(debian.contains("opts: ro,uid=1,a\\,b\\\\c,"), "{debian}");
    assert_eq!(
        fusebox, debian,
        "fusebox's answers differ from Debian's libfuse3"
    );
}

#[test]
fn every_export_carries_its_libfuse_version_and_the_soname_is_libfuse3_so_3() {
    let lib = built_library();
    let out = Command::new("objdump")
        .arg("-T")
        .arg(&lib)
        .output()
        .unwrap();
    let ours = String::from_utf8_lossy(&out.stdout);
    let debian = Command::new("objdump")
        .args(["-T", "/usr/lib/x86_64-linux-gnu/libfuse3.so.3"])
        .output()
        .unwrap();
    let debian = String::from_utf8_lossy(&debian.stdout);
    // (name, version) of each function a table exports; "(FUSE_3.0)" is a
    // non-default version of the name.
    let exports = |table: &str| -> std::collections::BTreeSet<(String, String)> {
        table
            .lines()
            .filter(|l| l.contains(" g ") && l.contains(".text"))
            .filter_map(|l| {
                let mut f = l.split_whitespace().rev();
                let name = f.next()?;
                let version = f.next()?;
                (name.starts_with("fuse_") || name.starts_with("cuse_"))
                    .then(|| (name.to_string(), version.to_string()))
            })
            .collect()
    };
    let (ours, debian) = (exports(&ours), exports(&debian));
    // Every function Debian's exports, under every version it has: a
    // program linked with BIND_NOW against any of them starts.
    let missing: Vec<_> = debian.difference(&ours).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    // Every name we export has exactly the versions Debian's has.
    for (name, _) in &ours {
        let of = |set: &std::collections::BTreeSet<(String, String)>| -> Vec<String> {
            set.iter()
                .filter(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .collect()
        };
        assert_eq!(of(&ours), of(&debian), "versions of {name}");
    }
    let dynamic = Command::new("objdump")
        .arg("-p")
        .arg(&lib)
        .output()
        .unwrap();
    let dynamic = String::from_utf8_lossy(&dynamic.stdout);
    assert!(
        dynamic
            .lines()
            .any(|l| l.contains("SONAME") && l.contains("libfuse3.so.3")),
        "{dynamic}"
    );
}
