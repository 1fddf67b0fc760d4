//! Direct mode (`fusebox run --fs FS:SRC --at DIR -- PROGRAM`): real,
//! unmodified programs run with stackfs served inside their own processes
//! at a path that does not exist in the kernel, and what they print is
//! compared with the same script run on a native directory; the source
//! must then hold what the native directory holds. memfs, whose files
//! live in its process, is served to a run's processes by one server of
//! the run's: the same comparisons, and what sharing it must keep.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;

fn direct(fs: &str, at: &Path, program: &[&str]) -> Output {
    direct_with(&[], fs, at, program)
}

/// `fusebox run FLAGS --fs FS --at AT -- PROGRAM`, bounded in time (a
/// program waiting for something direct mode failed to give would hang the
/// suite).
fn direct_with(flags: &[&str], fs: &str, at: &Path, program: &[&str]) -> Output {
    Command::new("timeout")
        .args(["300", BIN, "run"])
        .args(flags)
        .args(["--fs", fs, "--at"])
        .arg(at)
        .arg("--")
        .args(program)
        .env("FUSEBOX_DIRECT_PRELOAD", direct_preload())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "status {:?}\n{}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
/// `bash -c SCRIPT bash ARG` on the native directory: what direct mode's
/// run of the same script must print.
fn script_natively(script: &str, arg: &str) -> Output {
    let want = Command::new("bash")
        .args(["-c", script, "bash", arg])
        .output()
        .unwrap();
    assert!(want.status.success(), "natively: {}", text(&want));
    want
}
/// `script` (`bash -c SCRIPT bash MOUNT`) in direct mode on each of
/// `filesystems` (a source directory each under `base`) prints `want`.
fn same_as_natively(base: &Path, filesystems: &[&str], script: &str, want: &Output) {
    for fs in filesystems {
        let src = base.join(format!("src-{fs}"));
        std::fs::create_dir_all(&src).unwrap();
        let spec = match *fs {
            "memfs" | "nullfs" => fs.to_string(),
            _ => format!("{fs}:{}", src.display()),
        };
        let at = base.join(format!("mnt-{fs}"));
        let got = direct(
            &spec,
            &at,
            &["bash", "-c", script, "bash", at.to_str().unwrap()],
        );
        assert_eq!(text(&got), text(want), "{fs}");
    }
}

/// Every entry under `root`: kind, mode, size and content.
fn tree(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut names: Vec<_> = std::fs::read_dir(root.join(&rel))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        for n in names {
            let rel = rel.join(&n);
            // git's objects and index, the database and the tar archive
            // carry times (and hashes of times): compared by what the
            // programs print about them instead.
            if rel.starts_with("proj/.git")
                || rel == Path::new("db.sqlite")
                || rel == Path::new("archive.tar")
            {
                out.push(format!("{} present", rel.display()));
                continue;
            }
            let p = root.join(&rel);
            let m = std::fs::symlink_metadata(&p).unwrap();
            use std::os::unix::fs::PermissionsExt;
            let mode = m.permissions().mode() & 0o7777;
            if m.is_dir() {
                out.push(format!("{} dir {mode:o}", rel.display()));
                stack.push(rel);
            } else if m.is_symlink() {
                out.push(format!(
                    "{} -> {}",
                    rel.display(),
                    std::fs::read_link(&p).unwrap().display()
                ));
            } else {
                let data = std::fs::read(&p).unwrap();
                let hash = data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
                    (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
                });
                out.push(format!(
                    "{} {mode:o} {} bytes {hash:016x}",
                    rel.display(),
                    data.len()
                ));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn real_programs_see_what_they_see_natively() {
    real_programs_compared_with_native(None);
}

/// The same with syscall user dispatch catching every call (no rewritten
/// sites): what a user without root gets.
#[test]
fn real_programs_see_what_they_see_natively_under_dispatch_alone() {
    real_programs_compared_with_native(Some("dispatch"));
}

fn real_programs_compared_with_native(intercept: Option<&str>) {
    let s = scratch("direct");
    let (src, native) = (s.path().join("src"), s.path().join("native"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&native).unwrap();
    // Never created: direct mode mounts nothing in the kernel.
    let at = s.path().join("mnt");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/direct/workload.sh");
    let script = script.to_str().unwrap();
    let fs = format!("stackfs:{}", src.display());
    let how = intercept.map_or(vec![], |i| vec!["--intercept", i]);
    let got = direct_with(&how, &fs, &at, &["bash", script, at.to_str().unwrap()]);
    let want = Command::new("bash")
        .args([script, native.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        want.status.success(),
        "the workload fails natively: {}",
        text(&want)
    );
    assert_eq!(text(&got), text(&want), "direct mode differs from native");
    assert!(
        !at.exists(),
        "direct mode made {} in the kernel",
        at.display()
    );
    assert_eq!(
        tree(&src),
        tree(&native),
        "the source differs from the native directory"
    );
}

/// Prints every entry under argv[1] as `tree` does (kind, mode, size and
/// a hash of the content), run inside the mount for memfs, which has no
/// source to look at from outside.
const TREE_PY: &str = r#"
import os, stat, sys, hashlib
root = sys.argv[1]
out = []
for d, dirs, files in os.walk(root):
    rel = os.path.relpath(d, root)
    for n in sorted(dirs + files):
        p = os.path.join(d, n)
        r = os.path.normpath(os.path.join(rel, n))
        if r.startswith("proj/.git") or r in ("db.sqlite", "archive.tar"):
            if r.count("/") <= 1:
                out.append(f"{r} present")
            continue
        st = os.lstat(p)
        mode = oct(stat.S_IMODE(st.st_mode))
        if stat.S_ISLNK(st.st_mode):
            out.append(f"{r} -> {os.readlink(p)}")
        elif stat.S_ISDIR(st.st_mode):
            out.append(f"{r} dir {mode}")
        else:
            h = hashlib.sha256(open(p, "rb").read()).hexdigest()[:16]
            out.append(f"{r} {mode} {st.st_size} bytes {h}")
    dirs[:] = [x for x in dirs if not os.path.normpath(os.path.join(rel, x)).startswith("proj/.git")]
print("\n".join(sorted(set(out))))
"#;

/// memfs keeps its files in its process: one instance for the whole run,
/// in the run's server, reached by every process (bash, its forks, the
/// programs they execute: git, sqlite3, tar, python3). The same workload
/// as on stackfs, compared with a native tmpfs directory (memfs sizes
/// directories as tmpfs does), then the tree the run left, listed from
/// inside the run.
#[test]
fn real_programs_see_what_they_see_natively_on_memfs() {
    let s = scratch("direct-memfs");
    let native = s.path().join("native");
    std::fs::create_dir_all(&native).unwrap();
    let at = s.path().join("mnt");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/direct/workload.sh");
    let script = script.to_str().unwrap();
    let run = |root: &Path| -> Vec<String> {
        vec![
            "bash".into(),
            "-c".into(),
            "set -o pipefail; bash \"$0\" \"$1\" | sed \"s|$1|ROOT|g\" && echo ---tree--- && python3 -c \"$2\" \"$1\"".into(),
            script.into(),
            root.to_str().unwrap().into(),
            TREE_PY.into(),
        ]
    };
    let got_cmd = run(&at);
    let got = direct(
        "memfs",
        &at,
        &got_cmd.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let want_cmd = run(&native);
    let want = Command::new(&want_cmd[0])
        .args(&want_cmd[1..])
        .output()
        .unwrap();
    assert!(
        want.status.success(),
        "the workload fails natively: {}",
        text(&want)
    );
    let got = text(&got);
    assert!(got.contains("\nproj/notes.txt 0o644 399 bytes "), "{got}");
    assert_eq!(got, text(&want), "direct mode on memfs differs from native");
    assert!(
        !at.exists(),
        "direct mode made {} in the kernel",
        at.display()
    );
    // The run's files went with its server: a new run starts empty.
    let again = direct("memfs", &at, &["ls", "-A", at.to_str().unwrap()]);
    assert_eq!(text(&again), "status Some(0)\n");
}

/// What the kernel does for a mount's processes the run's server does for
/// memfs's: a file open in a forked child stays readable after the parent
/// closed it and its name is gone (the handle is released once, by its
/// last holder), children and executed programs see each other's changes
/// at once, processes writing side by side lose nothing, and what a
/// killed process held is given back.
#[test]
fn memfs_is_one_filesystem_for_every_process_of_the_run() {
    let s = scratch("direct-memfs-shared");
    let at = s.path().join("mnt");
    let program = r#"
import os, subprocess, sys
at = sys.argv[1]
os.mkdir(f"{at}/d")
fd = os.open(f"{at}/d/gone", os.O_CREAT | os.O_RDWR, 0o644)
os.write(fd, b"still here")
os.unlink(f"{at}/d/gone")
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)  # until the parent closed its descriptor
    os.lseek(fd, 0, 0)
    print("child reads", os.read(fd, 100).decode(), flush=True)
    os.close(fd)
    open(f"{at}/d/from-child", "w").write("child wrote\n")
    os._exit(0)
os.close(r)
os.close(fd)
os.write(w, b"x")
os.waitpid(pid, 0)
print("parent sees", open(f"{at}/d/from-child").read().strip())
print("gone is", "listed" if "gone" in os.listdir(f"{at}/d") else "not listed")
# Executed programs, one after another, each seeing the last one's file.
subprocess.run(["sh", "-c", f"echo one > {at}/d/chain"], check=True)
subprocess.run(["sh", "-c", f"cat {at}/d/chain > {at}/d/chain2; echo two >> {at}/d/chain2"], check=True)
print(subprocess.run(["cat", f"{at}/d/chain2"], capture_output=True, text=True, check=True).stdout.replace("\n", " "))
# Four processes appending to one file through O_APPEND, 200 lines each.
kids = []
for i in range(4):
    p = os.fork()
    if p == 0:
        with open(f"{at}/d/log", "a") as f:
            for j in range(200):
                f.write(f"{i} {j}\n")
                f.flush()
        os._exit(0)
    kids.append(p)
for p in kids:
    os.waitpid(p, 0)
lines = open(f"{at}/d/log").read().splitlines()
print(len(lines), "lines,", len(set(lines)), "distinct")
print(sorted(os.listdir(f"{at}/d")))
# A process killed while it holds an unlinked file open: the server gives
# its handle and references back (it watches the process), and memfs
# frees the file's 4 MiB.
import signal, time
free = lambda: os.statvfs(at).f_bfree
before = free()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    fd = os.open(f"{at}/d/big", os.O_CREAT | os.O_RDWR, 0o644)
    os.write(fd, b"x" * (4 << 20))
    os.unlink(f"{at}/d/big")
    os.write(w, b"x")
    time.sleep(100)
    os._exit(0)
os.read(r, 1)
held = before - free()
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
deadline = time.time() + 10
while free() != before and time.time() < deadline:
    time.sleep(0.01)
print("held", held >= 1024, "freed", free() == before)
"#;
    let out = direct(
        "memfs",
        &at,
        &["python3", "-c", program, at.to_str().unwrap()],
    );
    assert_eq!(
        text(&out),
        "status Some(0)\nchild reads still here\nparent sees child wrote\ngone is not listed\none two \n800 lines, 800 distinct\n['chain', 'chain2', 'from-child', 'log']\nheld True freed True\n"
    );
}

#[test]
fn threads_forks_and_signals_keep_the_mount() {
    let s = scratch("direct-threads");
    let src = s.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    threads_forks_and_signals(&format!("stackfs:{}", src.display()), &s.path().join("mnt"));
    assert_eq!(
        std::fs::read_to_string(src.join("from-handler")).unwrap(),
        "handler ran\n"
    );
    assert_eq!(
        std::fs::read_to_string(src.join("t3"))
            .unwrap()
            .lines()
            .count(),
        200
    );
}

/// The same on memfs: each thread and child reaches the run's server on
/// connections of its own.
#[test]
fn threads_forks_and_signals_keep_the_mount_on_memfs() {
    let s = scratch("direct-threads-memfs");
    threads_forks_and_signals("memfs", &s.path().join("mnt"));
    // The fork hooks under syscall user dispatch alone (no rewriting).
    let s = scratch("direct-threads-memfs-sud");
    threads_forks_and_signals_with(&["--intercept", "dispatch"], "memfs", &s.path().join("mnt"));
}

fn threads_forks_and_signals(fs: &str, at: &Path) {
    threads_forks_and_signals_with(&[], fs, at)
}

fn threads_forks_and_signals_with(flags: &[&str], fs: &str, at: &Path) {
    let program = r#"
import os, signal, sys, threading
at = sys.argv[1]
# A multi-threaded writer: 8 threads, a file each, 200 appends each.
def writer(i):
    with open(f"{at}/t{i}", "a") as f:
        for j in range(200):
            f.write(f"{i} {j}\n")
            f.flush()
ts = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
print(sum(len(open(f"{at}/t{i}").readlines()) for i in range(8)))
# A forked child writes, the parent reads after it.
pid = os.fork()
if pid == 0:
    open(f"{at}/from-child", "w").write("child was here\n")
    os._exit(0)
os.waitpid(pid, 0)
print(open(f"{at}/from-child").read().strip())
# A signal during a blocking read: its handler writes into the mount.
class Woken(Exception):
    pass
def on_alarm(sig, frame):
    open(f"{at}/from-handler", "w").write("handler ran\n")
    raise Woken()
signal.signal(signal.SIGALRM, on_alarm)
r, w = os.pipe()
signal.setitimer(signal.ITIMER_REAL, 0.2)
try:
    os.read(r, 1)
except Woken:
    print("read interrupted")
print(open(f"{at}/from-handler").read().strip())
# A child started with its output in the mount (posix_spawn or vfork):
# it writes through the shared offset, the parent's table stays its own.
import subprocess
with open(f"{at}/spawned", "w") as f:
    subprocess.run(["echo", "from child"], stdout=f, check=True)
    f.write("parent\n")
print(open(f"{at}/spawned").read().strip().replace("\n", " + "))
"#;
    let out = direct_with(
        flags,
        fs,
        at,
        &["python3", "-c", program, at.to_str().unwrap()],
    );
    assert_eq!(
        text(&out),
        "status Some(0)\n1600\nchild was here\nread interrupted\nhandler ran\nfrom child + parent\n",
    );
}

/// Placeholders of closed files are reused (the pool), but never one
/// another process may still hold: a forked child keeps reading its file
/// through a descriptor the parent closed while the parent opens others,
/// and a descriptor handed across exec still names its file. The umask
/// and ids kept in memory follow the program's own umask and setegid
/// calls; a stat right after a write gives the written size.
#[test]
fn reused_placeholders_never_change_what_another_process_holds() {
    let s = scratch("direct-pool");
    let src = s.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let at = s.path().join("mnt");
    let program = r#"
import os, subprocess, sys
at = sys.argv[1]
for name, text in [("a", "alpha\n" * 100), ("b", "bravo\n" * 100), ("c", "charlie\n")]:
    with open(f"{at}/{name}", "w") as f:
        f.write(text)
    # A stat right after the close: the size just written.
    assert os.stat(f"{at}/{name}").st_size == len(text), name
# Open and close many files first, so the pool has placeholders to give.
for i in range(40):
    os.close(os.open(f"{at}/c", os.O_RDONLY))
fd = os.open(f"{at}/a", os.O_RDONLY)
os.read(fd, 6)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    os.read(r, 1)  # until the parent closed fd and opened others
    rest = os.read(fd, 1 << 16)
    ok = rest == b"alpha\n" * 99
    os._exit(0 if ok else 3)
os.close(fd)
others = [os.open(f"{at}/b", os.O_RDONLY) for _ in range(8)]
# (Were the child's placeholder among them, its offset would move to 3.)
for o in others:
    assert os.read(o, 3) == b"bra"
os.write(w, b"x")
_, status = os.waitpid(pid, 0)
print("child read its file:", os.waitstatus_to_exitcode(status) == 0)
for o in others:
    os.close(o)
# Across exec: the descriptor (not close-on-exec) still names file a, at
# the offset this process left it.
fd = os.open(f"{at}/a", os.O_RDONLY)
os.set_inheritable(fd, True)
os.read(fd, 12)
out = subprocess.run(["sh", "-c", f"head -c 6 <&{fd}"], pass_fds=(fd,),
                     capture_output=True, check=True)
print("exec'd program read:", out.stdout.decode().strip())
os.close(fd)
# The umask and the effective group as the program sets them.
os.umask(0o077)
open(f"{at}/private", "w").close()
os.umask(0o022)
open(f"{at}/public", "w").close()
os.setegid(1)
open(f"{at}/by-daemon-group", "w").close()
os.setegid(0)
for name in ["private", "public", "by-daemon-group"]:
    st = os.stat(f"{at}/{name}")
    print(name, oct(st.st_mode & 0o777), st.st_gid)
"#;
    let fs = format!("stackfs:{}", src.display());
    let out = direct(&fs, &at, &["python3", "-c", program, at.to_str().unwrap()]);
    assert_eq!(
        text(&out),
        "status Some(0)\nchild read its file: True\nexec'd program read: alpha\n\
         private 0o600 0\npublic 0o644 0\nby-daemon-group 0o644 1\n",
    );
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(src.join("private")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(src.join("by-daemon-group"))
            .unwrap()
            .gid(),
        1
    );
}

/// The metadata cache is per process: a change another process of the
/// run makes must still be seen at once (the shared epoch), by the shell
/// itself and by a Python process that stats, lets a child change the
/// file, and stats again; `--stats` reports the hits at the end.
#[test]
fn changes_by_other_processes_are_seen_through_the_metadata_cache() {
    let s = scratch("direct-cache");
    let src = s.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    let at = s.path().join("mnt");
    let script = format!(
        r#"cd {at}
touch f; chmod 644 f
for i in 1 2 3; do [ -x f ] && echo x || echo not-x; done
chmod 755 f
[ -x f ] && echo x || echo not-x
python3 -c '
import os, subprocess
for _ in range(3): os.stat("f")
print(oct(os.stat("f").st_mode & 0o777))
subprocess.run(["chmod", "600", "f"], check=True)
print(oct(os.stat("f").st_mode & 0o777))
subprocess.run(["sh", "-c", "echo more >> f"], check=True)
print(os.stat("f").st_size)
os.rename("f", "g")
print(os.path.exists("f"), os.path.exists("g"))
os.link("g", "hl")
for _ in range(3): os.stat("hl")
subprocess.run(["sh", "-c", "echo x >> g"], check=True)
print(os.stat("hl").st_size, os.stat("hl").st_nlink)
os.makedirs("a/b")
open("a/b/h", "w").close()
for _ in range(3): os.stat("a/b/h")
subprocess.run(["mv", "a", "c"], check=True)
print(os.path.exists("a/b/h"), os.path.exists("c/b/h"))
subprocess.run(["rm", "c/b/h"], check=True)
print(os.path.exists("c/b/h"), os.listdir("c/b"))
'
"#,
        at = at.display()
    );
    let fs = format!("stackfs:{}", src.display());
    let out = direct_with(&["--stats"], &fs, &at, &["bash", "-c", &script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "not-x\nnot-x\nnot-x\nx\n0o755\n0o600\n5\nFalse True\n7 2\nFalse True\nFalse []\n",
        "{}",
        text(&out)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let hits: u64 = err
        .split("metadata cache: ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no cache figures: {err}"));
    assert!(hits > 0, "the cache never answered: {err}");
}

/// posix_spawn's child shares its parent's memory (CLONE_VM) until it
/// executes: a chdir action into the mount, or out of it while the parent
/// works inside, is the child's alone, and the program it runs starts
/// there, also after a failed exec along PATH (Rust's and Go's Command
/// with a working directory do this).
#[test]
fn posix_spawn_children_start_where_their_chdir_action_says() {
    let s = scratch("direct-spawn");
    let src = s.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/f"), "hello\n").unwrap();
    let at = s.path().join("mnt");
    let script = format!(
        r#"
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def spawn(cwd, command):
    actions = ctypes.create_string_buffer(256)
    libc.posix_spawn_file_actions_init(actions)
    libc.posix_spawn_file_actions_addchdir_np(actions, cwd.encode())
    argv = (ctypes.c_char_p * 4)(b"/bin/sh", b"-c", command.encode(), None)
    env = [f"{{k}}={{v}}".encode() for k, v in os.environ.items()] + [None]
    envp = (ctypes.c_char_p * len(env))(*env)
    pid = ctypes.c_int()
    # posix_spawnp: sh searched along PATH, a failed exec first.
    err = libc.posix_spawnp(ctypes.byref(pid), b"sh", actions, None, argv, envp)
    assert err == 0, os.strerror(err)
    sys.stdout.flush()
    os.waitpid(pid.value, 0)
os.environ["PATH"] = "/nonexistent-dir:" + os.environ["PATH"]
spawn("{at}/sub", "pwd; cat f")
print(os.getcwd())
os.chdir("{at}/sub")
spawn("/", "pwd")
print(os.getcwd())
"#,
        at = at.display()
    );
    let fs = format!("stackfs:{}", src.display());
    let out = direct(&fs, &at, &["python3", "-c", &script]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "{at}/sub\nhello\n{cwd}\n/\n{at}/sub\n",
            at = at.display(),
            cwd = std::env::current_dir().unwrap().display()
        ),
        "{}",
        text(&out)
    );
}

/// A filesystem whose data is not in the kernel's page cache (timingfs)
/// gets direct mode's page cache by default: reads through it return what
/// reads without it return (unaligned, overlapping, past the end), and
/// repeated ones are answered from it.
#[test]
fn the_page_cache_answers_reads_as_the_filesystem_does() {
    let s = scratch("direct-pages");
    let at = s.path().join("mnt");
    let script = format!(
        r#"
import hashlib, os
f = os.open("{at}/file0", os.O_RDONLY)
size = os.fstat(f).st_size
h = hashlib.sha256()
for rnd in range(2):
    for off, n in [(0, 4096), (100, 10000), (4095, 2), (65536, 1 << 20), (3, 1), (size - 5000, 9000), (size, 10), (8192, 4096)]:
        h.update(os.pread(f, n, off))
    os.lseek(f, 12345, 0)
    h.update(os.read(f, 70000))
print(size, h.hexdigest())
"#,
        at = at.display()
    );
    let run = |pages: &str| {
        let flags = ["--stats", "--page-cache", pages];
        let out = direct_with(&flags, "timingfs:pmem", &at, &["python3", "-c", &script]);
        assert!(out.status.success(), "{}", text(&out));
        out
    };
    let (cached, uncached) = (run("1024"), run("0"));
    assert_eq!(
        String::from_utf8_lossy(&cached.stdout),
        String::from_utf8_lossy(&uncached.stdout)
    );
    let page_hits = |o: &Output| -> u64 {
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        err.split("page cache: ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no page cache figures: {err}"))
    };
    assert!(page_hits(&cached) > 0, "{}", text(&cached));
    assert_eq!(page_hits(&uncached), 0, "{}", text(&uncached));
}

/// A filesystem written to the async API (timingfs's, through
/// AsyncAdapter) is served in direct mode unchanged: each call a task the
/// calling thread waits for, also in a forked child (which has none of the
/// runtime's threads) and from threads; what it reads equals what the
/// synchronous timingfs reads.
#[test]
fn the_async_api_serves_direct_mode() {
    let s = scratch("direct-async");
    let at = s.path().join("mnt");
    let script = format!(
        r#"
import hashlib, os, threading
def digest():
    f = os.open("{at}/file0", os.O_RDONLY)
    h = hashlib.sha256()
    for off, n in [(0, 4096), (100, 10000), (65536, 300000)]:
        h.update(os.pread(f, n, off))
    os.close(f)
    return h.hexdigest()
print(sorted(os.listdir("{at}")), os.stat("{at}/file0").st_size, digest())
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(w, digest().encode())
    os._exit(0)
os.waitpid(pid, 0)
print("child", os.read(r, 100).decode() == digest())
out = []
ts = [threading.Thread(target=lambda: out.append(digest())) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print("threads", len(set(out)), out[0] == digest())
"#,
        at = at.display()
    );
    let run = |fs: &str| {
        // (A child waiting for a runtime thread it lacks would hang: the
        // run is bounded.)
        let out = direct_with(&["--page-cache", "0"], fs, &at, &["python3", "-c", &script]);
        assert!(out.status.success(), "{fs}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let (sync, asynchronous) = (run("timingfs:pmem"), run("timingfs-async:pmem"));
    assert_eq!(sync, asynchronous);
    assert!(
        sync.contains("child True") && sync.contains("threads 1 True"),
        "{sync}"
    );
}

#[test]
fn bad_direct_mode_input_gets_one_clear_line() {
    let s = scratch("direct-errors");
    let at = s.path().join("mnt");
    let cases: [(&str, PathBuf, &str); 3] = [
        (
            "nosuchfs:/tmp",
            at.clone(),
            "unknown filesystem \"nosuchfs\"",
        ),
        (
            "stackfs:/nonexistent-source",
            at.clone(),
            "source /nonexistent-source",
        ),
        ("nullfs", s.path().join("missing/mnt"), "is not a directory"),
    ];
    for (fs, at, want) in cases {
        let out = direct(fs, &at, &["true"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{fs}: succeeded");
        assert!(err.contains(want), "{fs}: {err}");
    }
}

#[test]
fn programs_run_from_a_served_one_are_served_the_same_mount() {
    let s = scratch("direct-exec");
    let src = s.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), "in the mount\n").unwrap();
    let at = s.path().join("mnt");
    let fs = format!("stackfs:{}", src.display());
    // Three execs deep, one of them adding a preload of the program's own,
    // every library is named once; after `env -i` the mount is still there.
    let script = format!(
        "LD_PRELOAD=\"libm.so.6 $LD_PRELOAD\" sh -c 'sh -c \"printenv LD_PRELOAD\"'; env -i /bin/cat {}/f",
        at.display()
    );
    // With a preload of the user's own beside ours (libc: already loaded).
    let out = Command::new(BIN)
        .args(["run", "--fs", &fs, "--at"])
        .arg(&at)
        .args(["--", "sh", "-c", &script])
        .env("FUSEBOX_DIRECT_PRELOAD", direct_preload())
        .env("LD_PRELOAD", "libc.so.6")
        .output()
        .unwrap();
    let text = text(&out);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.matches("libfusebox_direct_preload.so").count(),
        1,
        "{text}"
    );
    assert_eq!(text.matches("libc.so.6").count(), 1, "{text}");
    assert_eq!(text.matches("libm.so.6").count(), 1, "{text}");
    assert!(text.ends_with("in the mount\n"), "{text}");
}

/// Under the stock descriptor limit (1024, where the connections cannot
/// sit above 1100) and a tighter one, memfs's run works the same.
#[test]
fn memfs_runs_under_low_descriptor_limits() {
    let s = scratch("direct-memfs-limit");
    let at = s.path().join("mnt");
    let at = at.to_str().unwrap();
    for limit in [1024, 256] {
        let script = format!(
            "ulimit -n {limit} && exec timeout 120 {BIN} run --fs memfs --at {at} -- sh -c 'echo a > {at}/f; (cat {at}/f); mkdir {at}/d; ls {at}'"
        );
        let out = Command::new("sh")
            .args(["-c", &script])
            .env("FUSEBOX_DIRECT_PRELOAD", direct_preload())
            .output()
            .unwrap();
        assert_eq!(text(&out), "status Some(0)\na\nd\nf\n", "limit {limit}");
    }
}

/// The run's server killed under the program: calls on the mount fail with
/// EIO (no SIGPIPE kills the program, nothing hangs) and stderr says why,
/// once.
#[test]
fn a_dead_memfs_server_gives_eio_and_one_line() {
    let s = scratch("direct-memfs-dead");
    let at = s.path().join("mnt");
    let program = r#"
import os, re, signal, subprocess, sys, time
at = sys.argv[1]
open(f"{at}/f", "w").write("x")
# The server holds the door's other end: find it by the socket's peer.
door = os.environ["FUSEBOX_DIRECT_SERVER"]
ino = re.search(r"\d+", os.readlink(f"/proc/self/fd/{door}")).group()
server = None
for line in subprocess.run(["ss", "-xpn"], capture_output=True, text=True).stdout.splitlines():
    f = line.split()
    m = re.search(r"pid=(\d+)", line)
    if len(f) > 7 and f[7] == ino and m and int(m.group(1)) != os.getpid():
        server = int(m.group(1))
print("server found", server is not None)
os.kill(server, signal.SIGKILL)
time.sleep(0.2)
for attempt in (lambda: open(f"{at}/g", "w").write("y"), lambda: open(f"{at}/f").read()):
    try:
        attempt()
        print("served")
    except OSError as e:
        print(e.strerror)
"#;
    let out = direct(
        "memfs",
        &at,
        &["python3", "-c", program, at.to_str().unwrap()],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        (out.status.code(), stdout.as_ref()),
        (
            Some(0),
            "server found True\nInput/output error\nInput/output error\n"
        ),
        "{stderr}"
    );
    assert_eq!(
        stderr
            .matches("the run's filesystem server is unreachable")
            .count(),
        1,
        "{stderr}"
    );
}

/// Symlinks in the mount that lead out of it are followed there, as the
/// kernel's walk would: reading, stat-ing, listing and executing through
/// them, a Python venv (whose interpreter is a link to the system's), on
/// stackfs and on memfs, compared with a native directory.
#[test]
fn symlinks_out_of_the_mount_lead_where_they_point() {
    let s = scratch("direct-links-out");
    let native = s.path().join("native");
    std::fs::create_dir_all(&native).unwrap();
    let script = r#"
set -e
cd "$1"
ln -s /etc out
cat out/hostname
stat -c %F out/passwd
ls out/ | grep -c '^passwd$'
readlink -f out/hostname
test -r out/hostname && echo readable
ln -s /usr/bin/env myenv
./myenv echo run through a link
python3 -c "import os; print(os.path.exists('out/hosts'), os.path.realpath('out/hosts'))"
ln -s /nonexistent/x dangling
cat dangling 2>&1 | sed 's/.*: //' || true
python3 -m venv --without-pip venv
./venv/bin/python -c "import sys; print(sys.prefix.endswith('/venv'))"
ls venv/bin | sort
"#;
    let want = script_natively(script, native.to_str().unwrap());
    same_as_natively(s.path(), &["stackfs", "memfs"], script, &want);
}

/// `..` above the mount's root is the mount point's parent, as past a
/// kernel mount's root (before, it stayed at the root: `ls DIR/..` listed
/// DIR), and a trailing slash wants a directory, through a symlink (`stat
/// link-to-dir/` is the directory's), but never makes a call that removes
/// or makes the name follow one (`rmdir link/` must not remove the
/// directory it points to). stackfs and memfs against a native directory,
/// each beside the same sibling.
#[test]
fn dot_dot_and_trailing_slashes_walk_as_the_kernel_walks() {
    let s = scratch("direct-dotdot");
    let script = r#"
set -u
d="$1"
mkdir -p "$d" && cd "$d"
mkdir -p sub/deep && echo hi > a && ln -s sub dlink && ln -s a flink && ln -s missing dangling
echo sibling-data > ../sibling/data
cd sub/deep; ls ../.. | sort; cat ../../../sibling/data; cd "$d"
ls .. | sort | grep -v '^mnt'; cat ../sibling/data; stat -c %F .. ../sibling
python3 -c "import os; os.chdir('..'); print(sorted(e for e in os.listdir('.') if not e.startswith('mnt')))"
echo made > ../sibling/new; rm ../sibling/new; mkdir ../sibling/dir; rmdir ../sibling/dir; ls ../sibling
for p in dlink dlink/ sub/ flink flink/ a/ dangling dangling/ missing/; do
  printf '%s: ' "$p"; stat -c %F "$p" 2>&1 | sed 's/.*: //'
done
ls -ld dlink/ | cut -c1; ls dlink/
for c in 'rmdir dlink/' 'rm flink/' 'unlink flink/' 'rm -d dlink/' 'touch new/' 'ln -s a new/' 'mv a a2/' 'mkdir dangling/'; do
  printf '%s: ' "$c"; $c 2>&1 | sed 's/.*: //'; echo " rc=${PIPESTATUS[0]}"
done
mkdir newdir/ && mv newdir/ moved/ && ls -d moved
python3 - <<'PY'
import os
for f, fl in (('dlink/', os.O_RDONLY), ('a/', os.O_RDONLY), ('zz/', os.O_CREAT | os.O_WRONLY), ('sub/', os.O_CREAT | os.O_RDONLY)):
    try:
        os.close(os.open(f, fl)); print(f, 'opened')
    except OSError as e:
        print(f, os.strerror(e.errno))
try:
    os.readlink('dlink/')
except OSError as e:
    print('readlink dlink/:', os.strerror(e.errno))
PY
for c in 'stat -c %F a/.' 'stat -c %F a/..' 'rm sub/.' 'rmdir sub/.' 'rmdir sub/..' 'mv sub/. x' 'mkdir sub/.' 'touch a/.'; do
  printf '%s: ' "$c"; $c 2>&1 | sed 's/.*: //'; echo " rc=${PIPESTATUS[0]}"
done
[ -e a/. ] && echo "a/. exists" || echo "a/. does not"
echo x > ../sibling/out.tmp
python3 -c "import os; os.replace('../sibling/out.tmp', '../sibling/out'); os.link('../sibling/out', '../sibling/out2'); print(sorted(os.listdir('../sibling')))"
mv ../sibling/out2 ../sibling/out3; ls ../sibling | sort
name=$(basename "$d"); ls ../"$name"/.. | sort | grep -v '^mnt'
(cd .. && { rm "$name/a/" 2>&1 | sed 's/.*: //'; ls -d "$name/dlink/"; ls "$name/dlink/"; })
(cd .. && python3 - "$name" <<'PY'
import os, sys
for p, fl in ((sys.argv[1] + '/new/', os.O_CREAT | os.O_WRONLY), (sys.argv[1] + '/sub', os.O_CREAT | os.O_RDONLY), (sys.argv[1] + '/nodir/x/', os.O_CREAT | os.O_WRONLY), (sys.argv[1] + '/a/x/', os.O_CREAT | os.O_WRONLY)):
    try:
        os.close(os.open(p, fl)); print(p, 'opened')
    except OSError as e:
        print(p, e.strerror)
PY
)
ls -A | sort
"#;
    let native = s.path().join("native");
    // The same siblings as beside each mount: sibling, src.
    std::fs::create_dir_all(native.join("sibling")).unwrap();
    std::fs::create_dir_all(native.join("src")).unwrap();
    let want = script_natively(script, native.join("mnt").to_str().unwrap());
    for fs in ["stackfs", "memfs"] {
        let base = s.path().join(fs);
        std::fs::create_dir_all(base.join("sibling")).unwrap();
        std::fs::create_dir_all(base.join("src")).unwrap();
        let spec = match fs {
            "stackfs" => format!("stackfs:{}", base.join("src").display()),
            _ => fs.to_string(),
        };
        let at = base.join("mnt");
        let got = direct(
            &spec,
            &at,
            &["bash", "-c", script, "bash", at.to_str().unwrap()],
        );
        assert_eq!(text(&got), text(&want), "{fs}");
    }
}

/// open(2) with O_CREAT is one create in stackfs, without the lookup
/// before it (`Filesystem::create_opens_existing`): whatever the name holds
/// by then (a file, a directory, a symlink to a file, to a directory or to
/// nothing; with O_EXCL, O_TRUNC, O_NOFOLLOW) the program sees what it sees
/// natively, and the attributes remembered at close (the create's own,
/// for a file created write-only and left alone) are the file's.
#[test]
fn open_with_o_creat_answers_as_the_kernel_does() {
    let s = scratch("direct-ocreat");
    let script = r#"
set -u
mkdir -p "$1" && cd "$1"
python3 - <<'PY'
import os
def show(name, f):
    try:
        r = f()
    except OSError as e:
        r = os.strerror(e.errno)
    print(name, r)
def op(p, fl, data=None):
    fd = os.open(p, fl, 0o640)
    if data:
        os.write(fd, data)
    os.close(fd)
    st = os.lstat(p)
    return (oct(st.st_mode), st.st_size)
with open("exist", "w") as f:
    f.write("hello")
os.mkdir("dir"); os.symlink("exist", "lnk"); os.symlink("newtarget", "dangle"); os.symlink("dir", "dlnk")
W, C = os.O_WRONLY, os.O_CREAT
show("keep", lambda: op("exist", W | C, b"HE"))
show("content", lambda: open("exist").read())
show("trunc", lambda: op("exist", W | C | os.O_TRUNC))
show("excl", lambda: op("exist", W | C | os.O_EXCL))
show("dir", lambda: op("dir", W | C))
show("dir-rdonly", lambda: op("dir", os.O_RDONLY | C))
show("link", lambda: op("lnk", W | C, b"X"))
show("link-target", lambda: (os.stat("exist").st_size, open("exist").read()))
show("dangling", lambda: op("dangle", W | C, b"new"))
show("dangling-target", lambda: open("newtarget").read())
os.symlink(os.path.abspath("exist"), "abslnk")
show("absolute-link", lambda: (op("abslnk", W | C, b"Z")[0], open("exist").read()))
show("dir-link", lambda: op("dlnk", W | C))
show("link-excl", lambda: op("lnk", W | C | os.O_EXCL))
show("link-nofollow", lambda: op("lnk", W | C | os.O_NOFOLLOW))
show("in-dir", lambda: op("dir/x", os.O_RDWR | C, b"abc"))
show("via-dir-link", lambda: op("dlnk/y", os.O_RDWR | C, b"abcd"))
show("no-parent", lambda: op("nope/x", W | C))
show("file-parent", lambda: op("exist/x", W | C))
fd = os.open("rw", os.O_RDWR | C, 0o600)
os.write(fd, b"12345"); os.lseek(fd, 0, 0)
show("read-back", lambda: os.read(fd, 10))
os.close(fd)
show("rw", lambda: oct(os.stat("rw").st_mode))
PY
: > empty; stat -c '%n %s %a %h' empty
echo -n abc > written; stat -c '%n %s %a' written
touch -d 2001-02-03 dated; stat -c '%n %s %y' dated
ls -A | sort
"#;
    let native = s.path().join("native");
    let want = script_natively(script, native.to_str().unwrap());
    same_as_natively(s.path(), &["stackfs", "pathfs", "memfs"], script, &want);
    // A read through another descriptor moves the access time of a file
    // still open from its create (relatime: the first read after a
    // change): the close must not keep the create's. (Source filesystems
    // keep access times; memfs has its own rules.)
    let atime = r#"
set -u
mkdir -p "$1" && cd "$1"
exec 3>new; sleep 0.05; cat new; exec 3>&-
[ "$(stat -c %x new)" = "$(stat -c %y new)" ] && echo "atime unmoved" || echo "atime moved"
"#;
    let native = s.path().join("native-atime");
    let want = script_natively(atime, native.to_str().unwrap());
    assert!(text(&want).contains("atime moved"), "{}", text(&want));
    same_as_natively(&s.path().join("atime"), &["stackfs"], atime, &want);
}

/// The filesystem's own descriptors (stackfs's source root, its /proc
/// directory, node and open-file descriptors) share the program's table:
/// they are moved out of its way and left alone by its close, close_range
/// and dup2. Before, bash's `exec 3>/dev/null` put /dev/null where stackfs
/// kept its root (every later path in the mount failed: "Not a
/// directory"), and Python's subprocess, which closes every descriptor
/// before exec, could not run a program through a link in the mount.
#[test]
fn the_filesystems_descriptors_survive_what_programs_do_to_theirs() {
    let s = scratch("direct-kept-fds");
    let script = r#"
set -u
d="$1"
cd "$d"
mkdir -p sub && echo data > sub/f && ln -s /usr/bin/env runner
ls >/dev/null
exec 3>/dev/null 4>/dev/null 5>/dev/null 6>/dev/null 7>/dev/null
echo more > sub/g; cat sub/f sub/g; ls sub; mkdir made; ls
exec 3>&- 4>&- 5>&- 6>&- 7>&-
python3 - <<'PY'
import os, subprocess
print(subprocess.run(['./runner', 'echo', 'through a link'], capture_output=True, text=True).stdout, end='')
os.closerange(3, 4096)
for fd in range(3, 1100):
    try:
        os.close(fd)
    except OSError:
        pass
print(sorted(os.listdir('sub')), open('sub/g').read(), end='')
PY
"#;
    let native = s.path().join("native");
    std::fs::create_dir_all(&native).unwrap();
    let want = script_natively(script, native.to_str().unwrap());
    same_as_natively(s.path(), &["stackfs", "pathfs", "memfs"], script, &want);
}

/// A file's offset is its placeholder's, shared with a forked child and
/// dup'ed descriptors as the kernel shares it; while no other process
/// holds it, the process keeps the value it last set instead of asking
/// the kernel at each read and write: after a fork it must ask again.
#[test]
fn a_forked_childs_writes_move_the_offset_its_parent_sees() {
    let s = scratch("direct-offsets");
    let script = r#"
python3 - "$1" <<'PY'
import os, sys
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
fd = os.open(d + "/o", os.O_CREAT | os.O_RDWR | os.O_TRUNC, 0o644)
os.write(fd, b"a")
pid = os.fork()
if pid == 0:
    os.write(fd, b"b"); os.lseek(fd, 10, 0); os.write(fd, b"X"); os._exit(0)
os.waitpid(pid, 0)
os.write(fd, b"c")
print(os.lseek(fd, 0, 1))
fd2 = os.dup(fd); os.write(fd2, b"d"); print(os.lseek(fd, 0, 1))
os.lseek(fd, 0, 0); print(os.read(fd, 100))
PY
"#;
    let native = s.path().join("native");
    let want = script_natively(script, native.to_str().unwrap());
    same_as_natively(s.path(), &["stackfs", "memfs"], script, &want);
}

/// stackfs reaches the files behind its O_PATH descriptors through /proc
/// (to reopen them, chmod and utime them). A directory of /proc/self/fd
/// opened before a fork names the parent: a forked child that sets times
/// and modes by relative names must act on its own descriptors (it got
/// ENOENT from every utimensat while it went through its parent's).
#[test]
fn forked_children_set_times_and_modes_by_relative_names() {
    let s = scratch("direct-fork-names");
    let script = r#"
python3 - "$1" <<'PY'
import os, sys
d = sys.argv[1]
os.makedirs(d + "/w", exist_ok=True)
with open(d + "/w/old", "w") as f:
    f.write("parent\n")
def work(tag):
    os.chdir(d + "/w")
    with open("new-" + tag, "w") as f:
        f.write(tag + "\n")
    for name in ("new-" + tag, "old"):
        os.utime(name, (1000000 + len(tag), 2000000 + len(tag)))
        os.chmod(name, 0o640 if tag == "child" else 0o604)
        with open(name, "a") as f:
            f.write("more from " + tag + "\n")
    os.truncate("new-" + tag, 3)
    # Last, so no time of the run's own is printed.
    os.utime("new-" + tag, (3000000, 4000000 + len(tag)))
    os.utime("old", (5000000, 6000000 + len(tag)))
pid = os.fork()
if pid == 0:
    try:
        work("child")
        grandchild = os.fork()
        if grandchild == 0:
            work("grandchild")
            os._exit(0)
        _, status = os.waitpid(grandchild, 0)
        os._exit(status >> 8)
    except Exception as e:
        print("child:", e)
        os._exit(1)
_, status = os.waitpid(pid, 0)
print("child exited", status >> 8)
os.chdir(d + "/w")
for name in sorted(os.listdir(".")):
    st = os.stat(name)
    print(name, oct(st.st_mode & 0o7777), st.st_size, int(st.st_mtime), open(name).read().splitlines())
PY
"#;
    let native = s.path().join("native");
    let want = script_natively(script, native.to_str().unwrap());
    assert!(
        String::from_utf8_lossy(&want.stdout).contains("child exited 0"),
        "{}",
        text(&want)
    );
    same_as_natively(s.path(), &["stackfs", "memfs"], script, &want);
}

/// Unix sockets bound at paths in the mount: a server and its clients
/// (another process, by relative and absolute names, after a rename),
/// datagrams sent to a path, the addresses the kernel reports and the
/// errors of binding over a name and connecting to what is no socket.
#[test]
fn unix_sockets_bind_and_connect_at_paths_in_the_mount() {
    let s = scratch("direct-unix-sockets");
    let script = r#"
python3 - "$1" <<'PY'
import os, socket, stat, sys
d = sys.argv[1]
os.makedirs(d + "/s", exist_ok=True)
os.chdir(d + "/s")
os.umask(0o022)
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind("srv")
srv.listen(4)
print("bound", srv.getsockname())
st = os.lstat("srv")
print("node", stat.S_ISSOCK(st.st_mode), oct(st.st_mode & 0o7777))
sys.stdout.flush()
pid = os.fork()
if pid == 0:
    # What the child sees goes to the parent, which prints it: one order.
    for name in ("srv", d + "/s/srv"):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.connect(name)
        c.sendall(b"peer " + repr(c.getpeername()).encode() + b" via " + name.encode()[-5:])
        c.close()
    os._exit(0)
for _ in range(2):
    conn, addr = srv.accept()
    print("accepted", repr(addr), conn.recv(100))
    conn.close()
os.waitpid(pid, 0)
os.rename("srv", "moved")
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
c.connect("moved")
conn, _ = srv.accept()
c.sendall(b"after rename")
print("renamed", conn.recv(100))
for what, name in (("again", "moved"), ("over a file", "file")):
    open("file", "w").close()
    x = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        x.bind(name)
        print(what, "bound")
    except OSError as e:
        print(what, e.errno)
for name in ("file", "missing"):
    x = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        x.connect(name)
    except OSError as e:
        print("connect", name, e.errno)
dg = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
dg.bind("dgram")
tx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
tx.bind("sender")
tx.sendto(b"datagram", "dgram")
print("datagram", dg.recvfrom(100))
srv.close()
x = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    x.connect("moved")
except OSError as e:
    print("closed listener", e.errno)
os.unlink("moved")
print(sorted(os.listdir(".")))
PY
"#;
    let native = s.path().join("native");
    let want = script_natively(script, native.to_str().unwrap());
    same_as_natively(s.path(), &["stackfs", "memfs"], script, &want);
}
