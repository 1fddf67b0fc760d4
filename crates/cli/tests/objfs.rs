//! objfs end to end, against real S3 servers on loopback that each test
//! starts: gofakes3 (one process) for the filesystem's semantics, two
//! clients, its server killed and upgraded mid-write, a store that goes
//! down and comes back, and every way a mount can be refused; a Garage
//! cluster (three nodes, replication factor 3) for node failures, where
//! Garage is installed (scripts/objfs-cluster.sh builds it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fusebox_bench::objstore::{self, FakeS3, GarageCluster, BUCKET};

mod common;
use common::{is_mounted, snapshot, MountGuard, BIN};

/// A store, a scratch directory and a mount point (or several).
struct Setup {
    dir: tempfile::TempDir,
    s3: FakeS3,
}

impl Setup {
    fn start(tag: &str) -> Setup {
        let dir = common::scratch(&format!("objfs-{tag}"));
        let s3 = FakeS3::start(&dir.path().join("s3")).unwrap();
        Setup { dir, s3 }
    }

    fn path(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    /// Mounts the bucket at `name` with its own staging area.
    fn mount(&self, name: &str, extra: &str, args: &[&str]) -> MountGuard {
        mount_at(
            &self.s3.endpoint(),
            &self.path(name),
            &self.path(&format!("{name}-staging")),
            extra,
            args,
        )
    }
}

fn mount_cmd(endpoint: &str, mnt: &Path, staging: &Path, extra: &str, args: &[&str]) -> Command {
    mount_url_cmd(
        &format!("s3://{BUCKET}"),
        endpoint,
        mnt,
        staging,
        extra,
        args,
    )
}

fn mount_url_cmd(
    url: &str,
    endpoint: &str,
    mnt: &Path,
    staging: &Path,
    extra: &str,
    args: &[&str],
) -> Command {
    let mut o = format!("endpoint={endpoint},staging={}", staging.display());
    if !extra.is_empty() {
        o.push(',');
        o.push_str(extra);
    }
    let mut c = Command::new(BIN);
    objstore::client_env(&mut c);
    c.args(["mount", "objfs", url])
        .arg(mnt)
        .arg("-o")
        .arg(o)
        .args(args)
        .stdin(Stdio::null());
    c
}

fn mount_at(endpoint: &str, mnt: &Path, staging: &Path, extra: &str, args: &[&str]) -> MountGuard {
    let out = mount_cmd(endpoint, mnt, staging, extra, args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mount failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    let daemon: u32 = line
        .trim()
        .rsplit(' ')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {line:?}"));
    assert!(is_mounted(mnt));
    MountGuard {
        mnt: mnt.to_path_buf(),
        daemon,
    }
}

/// `sh -c script` in `dir` with a time limit: a hung mount fails the test
/// instead of hanging the suite.
fn sh_in(dir: &Path, script: &str, limit: u32) -> Output {
    Command::new("timeout")
        .arg(limit.to_string())
        .args(["sh", "-c", script])
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn sh_ok(dir: &Path, script: &str, limit: u32) -> String {
    let out = sh_in(dir, script, limit);
    assert!(
        out.status.success(),
        "{script}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A tree's files, links and directories with sizes, modes and contents'
/// checksums, one line each, sorted: two trees are the same when these
/// are.
fn tree(dir: &Path) -> String {
    sh_ok(
        dir,
        "find . -mindepth 1 \\( -type f -printf '%p f %s %m ' -exec sh -c 'sha256sum < \"$1\" | cut -c1-16' _ {} \\; \\) \
         -o \\( -type l -printf '%p l %l\\n' \\) -o \\( -type d -printf '%p d\\n' \\) | sort",
        120,
    )
}

/// What users do to files, run on the mount and on a native directory:
/// the same output and the same tree after.
const EVERYDAY: &str = r#"
set -e
echo one > a; echo two >> a; cat a
head -c 100000 /dev/zero | tr '\0' x > b; truncate -s 10 b; cat b; echo; truncate -s 20 b; od -c b | tail -2
chmod 640 a; stat -c %a a; chmod 755 b; stat -c %a b
cp a a.tmp; echo edited >> a.tmp; mv a.tmp a; cat a
mkdir -p d/e; echo deep > d/e/f; mv d d2; cat d2/e/f; ls d2
ln -s a sl; readlink sl; cat sl; ls -l sl | cut -c1
printf '%s\n' 1 2 3 > c; dd if=/dev/zero of=c bs=1 count=2 seek=1 conv=notrunc 2>/dev/null; od -c c | head -1
rm c; test ! -e c && echo gone
mkdir empty; rmdir empty; test ! -e empty && echo rmdir-ok
mkdir full; touch full/x; rmdir full 2>/dev/null || echo not-empty; rm full/x; rmdir full
touch -d '2020-01-02 03:04:05' a; stat -c %Y a
python3 - <<'PY'
import os
fd = os.open("excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
os.write(fd, b"first"); os.close(fd)
try:
    os.open("excl", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    print("second create succeeded")
except FileExistsError:
    print("EEXIST")
with open("rw", "w+b") as f:
    f.write(b"0123456789"); f.seek(3); f.write(b"abc"); f.seek(0); print(f.read())
# Two opens of one file, closed one at a time: the second writes on.
w = os.open("shared", os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
a = os.open("shared", os.O_WRONLY | os.O_APPEND)
os.write(w, b"one\n"); os.close(w)
os.write(a, b"two\n"); os.close(a)
print(open("shared").read(), end="")
PY
for i in 1 2 3 4 5; do echo $i > again; echo more >> again; done; cat again
"#;

#[test]
fn everyday_semantics_match_a_native_directory() {
    let s = Setup::start("everyday");
    let _g = s.mount("mnt", "", &[]);
    let native = s.path("native");
    let on_mount = sh_ok(&s.path("mnt"), EVERYDAY, 120);
    let on_native = sh_ok(&native, EVERYDAY, 60);
    assert_eq!(on_mount, on_native);
    assert_eq!(tree(&s.path("mnt")), tree(&native));
}

#[test]
fn what_objects_cannot_do_fails_at_once_with_its_errno() {
    let s = Setup::start("refused");
    let _g = s.mount("mnt", "", &[]);
    let mnt = s.path("mnt");
    let out = sh_ok(
        &mnt,
        "echo x > f; ln f hard 2>&1 | grep -c 'Operation not permitted'; \
         mkfifo p 2>&1 | grep -c 'Operation not permitted'; \
         python3 -c \"import os; os.rename('f','g')\"; touch f; \
         python3 -c \"import ctypes,os; l=ctypes.CDLL(None,use_errno=True); \
         r=l.renameat2(-100,b'g',-100,b'f',2); print(r, os.strerror(ctypes.get_errno()))\"; \
         touch f; python3 -c \"import ctypes,os; l=ctypes.CDLL(None,use_errno=True); \
         r=l.renameat2(-100,b'g',-100,b'f',1); print(r, os.strerror(ctypes.get_errno()))\"",
        60,
    );
    // link(2): EPERM; mknod of a FIFO: EPERM; RENAME_EXCHANGE: EINVAL;
    // RENAME_NOREPLACE over an existing name: EEXIST.
    assert_eq!(out, "1\n1\n-1 Invalid argument\n-1 File exists\n");
}

#[test]
fn a_source_tree_and_a_git_repository_survive_the_round_trip() {
    let s = Setup::start("trees");
    let _g = s.mount("mnt", "", &[]);
    let mnt = s.path("mnt");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fusebox/src");
    sh_ok(
        &mnt,
        &format!(
            "tar -C '{}' -cf - . | tar -xf - && mkdir ../unpacked && cd ../unpacked && tar -C '{}' -cf - . | tar -xf -",
            src.display(),
            src.display()
        ),
        300,
    );
    sh_ok(&mnt, "diff -r . ../unpacked", 120);
    // A repository with history, cloned into the mount, packed, checked.
    let repo = s.path("repo");
    sh_ok(
        &repo,
        "git init -q . && git config user.email t@e && git config user.name t && \
         for i in 1 2 3 4 5; do seq $i 500 > f$i; mkdir -p d$i; echo $i > d$i/g; git add -A; git commit -qm c$i; done",
        60,
    );
    let out = sh_ok(
        &mnt,
        &format!(
            "git clone -q '{}' clone && cd clone && git gc -q && git fsck --full 2>&1 && git log --oneline | wc -l && git status --short | wc -l",
            repo.display()
        ),
        300,
    );
    assert!(out.ends_with("5\n0\n"), "{out}");
}

#[test]
fn renaming_a_directory_of_a_thousand_files_moves_every_one() {
    let s = Setup::start("dirrename");
    let _g = s.mount("mnt", "upload=behind", &[]);
    let mnt = s.path("mnt");
    sh_ok(
        &mnt,
        "mkdir big && for i in $(seq 1 1000); do echo $i > big/f$i; done; sync",
        300,
    );
    let out = sh_ok(
        &mnt,
        "mv big moved && ls moved | wc -l && cat moved/f1 moved/f1000 && test ! -e big && echo old-gone",
        300,
    );
    assert_eq!(out, "1000\n1\n1000\nold-gone\n");
}

/// Until the mount has no upload pending; `what` if that takes longer
/// than `limit`.
fn wait_for_uploads(mnt: &Path, limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    while counter(mnt, "uploads.pending") > 0 {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The last lines of a daemon's log, for a failure's message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// `key: value` counters of the mount's filesystem.
fn counter(mnt: &Path, name: &str) -> u64 {
    snapshot(mnt)
        .filesystem
        .iter()
        .find(|c| c.name == name)
        .map_or(0, |c| c.value)
}

#[test]
fn two_clients_see_closed_files_whole_and_the_last_upload_wins() {
    let s = Setup::start("clients");
    let _a = s.mount("a", "cache_timeout=1,part_size=5M", &[]);
    let _b = s.mount("b", "cache_timeout=1,part_size=5M", &[]);
    let (a, b) = (s.path("a"), s.path("b"));
    let local = s.path("local");
    let sum = sh_ok(
        &local,
        "head -c 12000000 /dev/urandom > x && sha256sum < x",
        60,
    );
    sh_ok(&a, &format!("cp '{}/x' x", local.display()), 60);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(sh_ok(&b, "sha256sum < x", 60), sum);
    // Two writers of one key, at once: one whole file wins, never a mix.
    let one = sh_ok(
        &local,
        "head -c 11000000 /dev/urandom > one && sha256sum < one",
        60,
    );
    let two = sh_ok(
        &local,
        "head -c 13000000 /dev/urandom > two && sha256sum < two",
        60,
    );
    let wa = {
        let (a, l) = (a.clone(), local.clone());
        std::thread::spawn(move || sh_ok(&a, &format!("cat '{}/one' > w", l.display()), 60))
    };
    sh_ok(&b, &format!("cat '{}/two' > w", local.display()), 60);
    wa.join().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let seen_a = sh_ok(&a, "sha256sum < w", 60);
    let seen_b = sh_ok(&b, "sha256sum < w", 60);
    assert_eq!(seen_a, seen_b);
    assert!(seen_a == one || seen_a == two, "a mix: {seen_a}");
}

#[test]
fn o_excl_on_two_mounts_gives_one_eexist_where_the_store_puts_conditionally() {
    // gofakes3 honours If-None-Match: * (as AWS S3 does).
    let s = Setup::start("excl");
    let _a = s.mount("a", "", &[]);
    let _b = s.mount("b", "", &[]);
    let (a, b) = (s.path("a"), s.path("b"));
    let excl = "python3 -c \"import os\n\
try:\n    os.close(os.open('lock', os.O_CREAT | os.O_EXCL | os.O_WRONLY)); print('created')\n\
except FileExistsError: print('EEXIST')\"";
    // b has looked and found nothing (its kernel and objfs remember the
    // absence for the negative timeout): its create reaches the store.
    assert_eq!(sh_ok(&b, "test -e lock || echo absent", 30), "absent\n");
    assert_eq!(sh_ok(&a, excl, 30), "created\n");
    assert_eq!(sh_ok(&b, excl, 30), "EEXIST\n");
    assert_eq!(sh_ok(&a, excl, 30), "EEXIST\n");
}

#[test]
fn kill_and_upgrade_of_the_server_during_writes_lose_no_closed_file() {
    kill_and_upgrade_during_writes("", 3_000_000);
}

/// Files of more than two parts, streamed while written: a server
/// replaced mid-stream leaves each to go up whole.
#[test]
fn kill_and_upgrade_during_streamed_writes_lose_no_closed_file() {
    kill_and_upgrade_during_writes("part_size=5M", 12_000_000);
}

/// Closed files wait in the journal while servers are replaced: an
/// upgrade's next server takes it over only once the old one has stopped
/// uploading.
#[test]
fn kill_and_upgrade_with_uploads_behind_lose_no_closed_file() {
    kill_and_upgrade_during_writes("upload=behind,write_back=0.3", 3_000_000);
}

fn kill_and_upgrade_during_writes(options: &str, file_bytes: u64) {
    let s = Setup::start("replace");
    // The suite replaces the server four times; the bench's
    // objfs/replace-soak does it for a minute. FUSEBOX_OBJFS_REPLACEMENTS
    // makes this test a longer run, with the daemon's log kept.
    let replacements: u32 = std::env::var("FUSEBOX_OBJFS_REPLACEMENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    let log = s.dir.path().join("daemon.log");
    let log_arg = log.to_str().unwrap().to_owned();
    let _g = s.mount("mnt", options, &["--log-file", &log_arg]);
    let mnt = s.path("mnt");
    let local = s.path("local");
    sh_ok(
        &local,
        &format!("for i in $(seq 1 6); do head -c {file_bytes} /dev/urandom > f$i; done"),
        60,
    );
    // The writer copies rounds of six files until told to stop, so the
    // server is replaced four times mid-write however fast this host is.
    let stop = local.join("stop");
    let writer = {
        let (mnt, local) = (mnt.clone(), local.clone());
        std::thread::spawn(move || {
            sh_in(
                &mnt,
                &format!(
                    "l='{}'; round=0; while [ ! -e \"$l/stop\" ]; do round=$((round+1)); \
                     for i in $(seq 1 6); do cp \"$l/f$i\" r$round-$i || exit 1; done; done; echo $round",
                    local.display()
                ),
                300,
            )
        })
    };
    for replacement in 0..replacements {
        std::thread::sleep(Duration::from_millis(700));
        if replacement % 2 == 0 {
            // Between a restart and its status the server has no pid to
            // kill yet: try again.
            let deadline = Instant::now() + Duration::from_secs(20);
            while !common::kill_server_and_wait(&mnt) {
                assert!(Instant::now() < deadline, "no server to kill");
                std::thread::sleep(Duration::from_millis(50));
            }
        } else {
            common::upgrade(&mnt);
        }
    }
    std::fs::write(&stop, "").unwrap();
    let out = writer.join().unwrap();
    assert!(
        out.status.success(),
        "a write failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        log_tail(&log)
    );
    let rounds: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    wait_for_uploads(&mnt, Duration::from_secs(60), "uploads still pending");
    // A fresh client sees every file, whole.
    let _fresh = s.mount("fresh", "", &[]);
    let sums = |dir: &Path, names: &str| {
        sh_ok(
            dir,
            &format!("for f in {names}; do sha256sum < $f; done"),
            120,
        )
    };
    let expected = sums(&local, "f1 f2 f3 f4 f5 f6").repeat(rounds);
    let names: Vec<String> = (1..=rounds)
        .flat_map(|r| (1..=6).map(move |i| format!("r{r}-{i}")))
        .collect();
    assert_eq!(sums(&s.path("fresh"), &names.join(" ")), expected);
}

#[test]
fn a_store_down_for_a_while_loses_nothing_closed_and_uploads_resume() {
    let mut s = Setup::start("down");
    let _g = s.mount("mnt", "timeout=2", &[]);
    let mnt = s.path("mnt");
    sh_ok(&mnt, "mkdir d && echo before > d/before", 30);
    s.s3.stop();
    // Closed while the store is away: close succeeds, the journal keeps it.
    let sum = sh_ok(
        &mnt,
        "head -c 2000000 /dev/urandom > d/during && sha256sum < d/during",
        60,
    );
    assert!(counter(&mnt, "uploads.pending") >= 1);
    assert!(counter(&mnt, "uploads.pending_bytes") >= 2_000_000);
    // Reads of it come from the staging area meanwhile.
    assert_eq!(sh_ok(&mnt, "sha256sum < d/during", 30), sum);
    s.s3.restart().unwrap();
    wait_for_uploads(&mnt, Duration::from_secs(90), "the upload did not resume");
    let _fresh = s.mount("fresh", "", &[]);
    assert_eq!(sh_ok(&s.path("fresh"), "sha256sum < d/during", 30), sum);
}

#[test]
fn listing_costs_one_list_per_thousand_and_missing_names_one_request() {
    let s = Setup::start("counts");
    let _w = s.mount("w", "upload=behind", &[]);
    sh_ok(
        &s.path("w"),
        "mkdir many && cd many && for i in $(seq 1 2500); do : > f$i; done; sync",
        300,
    );
    wait_for_uploads(
        &s.path("w"),
        Duration::from_secs(120),
        "uploads still pending",
    );
    let _r = s.mount("r", "", &[]);
    let r = s.path("r");
    let before = |n: &str| counter(&r, &format!("s3.{n}"));
    let (lists, heads) = (before("LIST"), before("HEAD"));
    let out = sh_ok(&r, "ls -l many | grep -c ' f'", 120);
    assert_eq!(out, "2500\n");
    // The lookup of `many` itself is one listing; its 2,500 entries three.
    assert_eq!(before("LIST") - lists, 1 + 3);
    assert_eq!(before("HEAD") - heads, 0);
    // Missing names: at most one request each, then cached.
    let (lists, heads) = (before("LIST"), before("HEAD"));
    sh_in(&r, "stat nothing-here-1 nothing-here-2 2>/dev/null", 30);
    sh_in(&r, "stat nothing-here-1 nothing-here-2 2>/dev/null", 30);
    assert!(before("LIST") - lists + before("HEAD") - heads <= 2);
    // stat of every name, in a mount that has not listed the directory:
    // the second name lists it whole (three pages), the rest cost nothing.
    let _s = s.mount("s", "", &[]);
    let st = s.path("s");
    let count = |n: &str| counter(&st, &format!("s3.{n}"));
    let (lists, heads) = (count("LIST"), count("HEAD"));
    let stat_all = "/usr/bin/python3 -I -c \"import os\nprint(sum(os.stat('many/f%d' % i).st_size == 0 for i in range(1, 2501)))\"";
    assert_eq!(sh_ok(&st, stat_all, 120), "2500\n");
    let spent = count("LIST") - lists;
    assert!((4..=5).contains(&spent), "{spent} LISTs");
    assert_eq!(count("HEAD") - heads, 0);
    // What the listing cannot carry (a mode, a symlink) set through
    // another mount: attrs=head reads each object's own metadata.
    sh_ok(&s.path("w"), "chmod 750 many/f1 && ln -s f1 many/link", 30);
    let _h = s.mount("h", "attrs=head", &[]);
    let out = sh_ok(
        &s.path("h"),
        "stat -c %a many/f1 && readlink many/link && ls -l many | grep -c '^l'",
        60,
    );
    assert_eq!(out, "750\nf1\n1\n");
}

#[test]
fn a_file_renamed_before_its_upload_goes_up_once_under_its_final_name() {
    let s = Setup::start("writeback");
    let _w = s.mount("w", "upload=behind,write_back=5", &[]);
    let w = s.path("w");
    let count = |n: &str| counter(&w, &format!("s3.{n}"));
    // What editors and build tools do: write a temp file, then rename it
    // over the real name; and what tar and git do: create with O_EXCL
    // (exclusive within the mount when uploads are behind), write, then
    // set the mode.
    sh_ok(
        &w,
        "mkdir d && echo one > d/.x.tmp && mv d/.x.tmp d/x && echo two > d/.x.tmp && mv d/.x.tmp d/x \
         && echo y > d/y && chmod 640 d/y",
        30,
    );
    let excl = "/usr/bin/python3 -c \"import os\n\
fd = os.open('d/z', os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600); os.write(fd, b'z'); os.close(fd)\n\
try:\n    os.open('d/z', os.O_CREAT | os.O_EXCL | os.O_WRONLY)\n\
except FileExistsError: print('EEXIST')\"";
    assert_eq!(sh_ok(&w, excl, 30), "EEXIST\n");
    let (puts, deletes, copies) = (count("PUT"), count("DELETE"), count("COPY"));
    wait_for_uploads(&w, Duration::from_secs(60), "uploads still pending");
    assert_eq!(
        count("PUT") - puts,
        4,
        "one PUT each for d/ (the directory's marker, behind too), d/x, d/y and d/z"
    );
    assert_eq!((count("DELETE"), count("COPY")), (deletes, copies));
    let _r = s.mount("r", "attrs=head", &[]);
    let out = sh_ok(
        &s.path("r"),
        "ls -A d && cat d/x d/z && stat -c %a d/y d/z",
        30,
    );
    assert_eq!(out, "x\ny\nz\ntwo\nz640\n600\n");
}

/// With uploads behind, a directory's marker waits in the journal like a
/// file: mkdir and what tar does to a directory afterwards (chown, chmod,
/// utimes) are one PUT after `write_back`, none while the program runs; a
/// directory made and removed meanwhile costs nothing; a server killed
/// before the PUT leaves it to the next.
#[test]
fn directories_made_with_uploads_behind_go_up_once_and_survive_a_kill() {
    let s = Setup::start("dirs-behind");
    let _w = s.mount("w", "upload=behind,write_back=600,cache_timeout=0", &[]);
    let w = s.path("w");
    let count = |n: &str| counter(&w, &format!("s3.{n}"));
    sh_ok(
        &w,
        "mkdir -p a/b && echo x > a/b/x && chmod 700 a && touch -d @1000000000 a \
         && mkdir gone && rmdir gone && mkdir e && mv e f",
        30,
    );
    // Seen here at once (no cache: from the staging area), nothing sent.
    let out = sh_ok(
        &w,
        "stat -c '%n %a %Y' a && stat -c '%n %a' a/b f && ls",
        30,
    );
    assert_eq!(out, "a 700 1000000000\na/b 755\nf 755\na\nf\n");
    assert_eq!((count("PUT"), count("DELETE")), (0, 0));
    assert_eq!(counter(&w, "uploads.pending"), 4, "a/, a/b/, a/b/x, f/");
    // The server dies before any upload: the next one sends them.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !common::kill_server_and_wait(&w) {
        assert!(Instant::now() < deadline, "no server to kill");
        std::thread::sleep(Duration::from_millis(50));
    }
    wait_for_uploads(&w, Duration::from_secs(60), "uploads still pending");
    let _r = s.mount("r", "", &[]);
    let out = sh_ok(&s.path("r"), "ls && ls a a/b f && cat a/b/x", 30);
    assert_eq!(out, "a\nf\na:\nb\n\na/b:\nx\n\nf:\nx\n");
}

#[test]
fn a_listing_made_while_a_file_was_staged_shows_it_uploaded_and_touch_keeps_modes() {
    let s = Setup::start("listed");
    let _a = s.mount("a", "", &[]);
    sh_ok(
        &s.path("a"),
        "mkdir d && echo 1 > d/old && echo 1 > d/old2 && chmod 750 d/old d/old2",
        30,
    );
    let _b = s.mount("b", "upload=behind,write_back=0.5", &[]);
    let b = s.path("b");
    // The second name b asks about in d lists d, while `new` is staged only.
    sh_ok(&b, "echo 2 > d/new && stat d/nothing 2>/dev/null; true", 30);
    wait_for_uploads(&b, Duration::from_secs(60), "uploads still pending");
    assert_eq!(sh_ok(&b, "ls d", 30), "new\nold\nold2\n");
    // b knows `old` and `old2` from the listing only (default mode): a
    // touch (an open for writing) and a utime (a setattr) there keep the
    // mode a set.
    sh_ok(
        &b,
        "touch d/old && /usr/bin/python3 -c \"import os; os.utime('d/old2', (1, 1000000))\"",
        30,
    );
    let _c = s.mount("c", "attrs=head", &[]);
    let out = sh_ok(
        &s.path("c"),
        "stat -c %a d/old d/old2 && stat -c %Y d/old2",
        30,
    );
    assert_eq!(out, "750\n750\n1000000\n");
}

#[test]
fn a_file_written_in_order_goes_up_in_parts_while_it_is_written() {
    let s = Setup::start("stream");
    let _w = s.mount("w", "part_size=5M", &[]);
    let w = s.path("w");
    let local = s.path("local");
    let count = |n: &str| counter(&w, &format!("s3.{n}"));
    sh_ok(
        &local,
        "head -c 23000000 /dev/urandom > big && cp big big2 \
         && printf X | dd of=big2 bs=1 seek=100 conv=notrunc status=none",
        60,
    );
    // In order: its four whole parts go up while it is still open; a
    // chmod before close is copied onto the object. Written by a child
    // that waits to be told to close: a fork of this process while the
    // file is open would close a copy of it (FLUSH) on exec.
    let (ready, go) = (local.join("ready"), local.join("go"));
    let writer = {
        let (w, local) = (w.clone(), local.clone());
        std::thread::spawn(move || {
            sh_ok(
                &w,
                &format!(
                    "/usr/bin/python3 -c \"import os, time\n\
data = open('{0}/big', 'rb').read()\n\
fd = os.open('a', os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)\n\
for i in range(0, len(data), 1 << 20): os.write(fd, data[i:i + (1 << 20)])\n\
open('{0}/ready', 'w').close()\n\
while not os.path.exists('{0}/go'): time.sleep(0.02)\n\
os.fchmod(fd, 0o600); os.close(fd)\"",
                    local.display()
                ),
                120,
            )
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ready.exists() || count("UPLOAD_PART") < 4 {
        assert!(
            Instant::now() < deadline,
            "no part went up while the file was open"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(count("COMPLETE_MULTIPART"), 0, "completed before close");
    std::fs::write(&go, "").unwrap();
    writer.join().unwrap();
    // Rewritten below what was sent: not streamed, uploaded whole at close.
    let script = format!(
        "/usr/bin/python3 -c \"import os\n\
data = open('{0}/big', 'rb').read()\n\
fd = os.open('b', os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)\n\
for i in range(0, len(data), 1 << 20): os.write(fd, data[i:i + (1 << 20)])\n\
os.pwrite(fd, b'X', 100); os.close(fd)\"",
        local.display()
    );
    sh_ok(&w, &script, 120);
    assert_eq!(counter(&w, "uploads.streamed"), 1);
    assert_eq!(counter(&w, "uploads.pending"), 0);
    // Three uploads begun (a's stream, b's stream, b whole), two made;
    // b's stream is aborted in the store (in the background), leaving no
    // parts behind; a's mode is copied onto it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while count("ABORT_MULTIPART") < 1 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let made = [
        "CREATE_MULTIPART",
        "COMPLETE_MULTIPART",
        "ABORT_MULTIPART",
        "COPY",
    ]
    .map(count);
    assert_eq!(made, [3, 2, 1, 1]);
    let _r = s.mount("r", "attrs=head", &[]);
    let out = sh_ok(
        &s.path("r"),
        &format!(
            "cmp a '{0}/big' && cmp b '{0}/big2' && stat -c '%a %s' a b",
            local.display()
        ),
        60,
    );
    assert_eq!(out, "600 23000000\n644 23000000\n");
}

#[test]
fn unmount_sends_the_uploads_still_waiting_to_go_behind() {
    let s = Setup::start("drain");
    let w = s.mount("w", "upload=behind,write_back=600", &[]);
    sh_ok(&w.mnt, "mkdir d && seq 1 1000 > d/f && mkdir e", 30);
    // d/f, and the markers of d and e (behind too).
    assert_eq!(counter(&w.mnt, "uploads.pending"), 3);
    let out = Command::new(BIN)
        .arg("umount")
        .arg(&w.mnt)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while common::alive(w.daemon) {
        assert!(Instant::now() < deadline, "the daemon did not exit");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Another mount point: another staging area, so only the store has it.
    let _r = s.mount("r", "", &[]);
    assert_eq!(
        sh_ok(&s.path("r"), "wc -l < d/f && ls -d e", 30),
        "1000\ne\n"
    );
}

/// A command that must fail with one clear line and leave no mount.
fn refused(cmd: &mut Command, mnt: &Path, says: &str) {
    let out = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "succeeded: {err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains(says), "{err:?} lacks {says:?}");
    assert!(!is_mounted(mnt), "left a mount");
}

#[test]
fn bad_input_gets_one_clear_line_and_no_mount() {
    let s = Setup::start("bad");
    let mnt = s.path("mnt");
    let staging = s.path("staging");
    let ep = s.s3.endpoint();
    // A malformed URL.
    refused(
        &mut mount_url_cmd("s3:/objfs", &ep, &mnt, &staging, "", &[]),
        &mnt,
        "s3://BUCKET",
    );
    // A bucket that does not exist.
    refused(
        &mut mount_url_cmd("s3://no-such-bucket", &ep, &mnt, &staging, "", &[]),
        &mnt,
        "does not exist",
    );
    // An endpoint nobody listens on.
    let port = fusebox_bench::remote::free_port().unwrap();
    refused(
        &mut mount_cmd(
            &format!("http://127.0.0.1:{port}"),
            &mnt,
            &staging,
            "timeout=3",
            &[],
        ),
        &mnt,
        "unreachable",
    );
    // No credentials anywhere.
    let home = s.path("home");
    let mut c = mount_cmd(&s.s3.endpoint(), &mnt, &staging, "", &[]);
    c.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env("HOME", &home);
    refused(&mut c, &mnt, "credentials");
    drop(s);
}

/// The Garage cluster for a test, or `None` (recorded as skipped) where
/// Garage is not installed.
fn cluster(tag: &str) -> Option<(tempfile::TempDir, GarageCluster)> {
    if objstore::garage().is_none() {
        fusebox_test_support::skipped(
            Some(tag),
            "garage is not installed: scripts/objfs-cluster.sh builds it and runs these tests",
        );
        return None;
    }
    let dir = common::scratch(&format!("objfs-cluster-{tag}"));
    let c = GarageCluster::start(dir.path(), Duration::from_secs(3)).unwrap();
    Some((dir, c))
}

#[test]
fn cluster_one_node_lost_during_a_copy_and_a_listing_then_two() {
    let Some((dir, mut c)) = cluster("node loss") else {
        return;
    };
    let mnt = dir.path().join("mnt");
    let staging = dir.path().join("staging");
    std::fs::create_dir_all(&mnt).unwrap();
    // Wrong credentials (Garage checks them; gofakes3 takes any): one
    // clear line, no mount.
    let mut wrong = mount_cmd(&c.endpoint(0), &mnt, &staging, "timeout=8", &[]);
    wrong.env("AWS_SECRET_ACCESS_KEY", "0".repeat(64));
    refused(&mut wrong, &mnt, "access denied");
    let log = dir.path().join("objfs.log");
    let log_s = log.to_str().unwrap().to_owned();
    let g = mount_at(
        &c.endpoint(0),
        &mnt,
        &staging,
        "timeout=8",
        &["--log-file", &log_s],
    );
    let tail = || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    };
    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    // 200 MB in the suite; the issue's 1 GiB (1024) is a run of this test
    // with FUSEBOX_OBJFS_CLUSTER_COPY_MB set.
    let copy_mb: u64 = std::env::var("FUSEBOX_OBJFS_CLUSTER_COPY_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let sum = sh_ok(
        &local,
        &format!("head -c {}M /dev/urandom > big && sha256sum < big", copy_mb),
        120,
    );
    sh_ok(
        &mnt,
        "mkdir many && for i in $(seq 1 300); do : > many/f$i; done",
        120,
    );
    // One node of three dies mid-copy: quorum holds, both complete.
    let copy = {
        let (mnt, local) = (mnt.clone(), local.clone());
        std::thread::spawn(move || sh_in(&mnt, &format!("cp '{}/big' big", local.display()), 600))
    };
    std::thread::sleep(Duration::from_millis(800));
    c.kill_node(2);
    assert_eq!(sh_ok(&mnt, "ls many | wc -l", 60), "300\n");
    let out = copy.join().unwrap();
    assert!(
        out.status.success(),
        "copy: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        tail()
    );
    let out = sh_in(&mnt, "sha256sum < big", 120);
    assert!(
        out.status.success(),
        "read after a node loss: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        tail()
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), sum);
    // Two of three down: no quorum; requests fail with EIO in time.
    c.kill_node(1);
    let t = Instant::now();
    // The kernel's copy of the file's pages goes, so the read reaches
    // the store.
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    let out = sh_in(&mnt, "cat big 2>&1 >/dev/null || echo failed", 60);
    assert!(
        t.elapsed() < Duration::from_secs(40),
        "took {:?}",
        t.elapsed()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("Input/output error") || text.contains("failed"),
        "{text}"
    );
    // Nodes back: the same mount serves again.
    c.start_node(1).unwrap();
    c.start_node(2).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = sh_in(&mnt, "sha256sum < big", 120);
        if out.status.success() {
            assert_eq!(String::from_utf8_lossy(&out.stdout), sum);
            break;
        }
        assert!(Instant::now() < deadline, "the mount did not serve again");
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(g);
}

/// Objects above one CopyObject's limit (5 GiB in S3; lowered here with
/// `max_copy`) are renamed, chmodded and moved with their directory by
/// multipart copies, whole and with their metadata; smaller ones still
/// by one COPY. On Garage: gofakes3 has no UploadPartCopy.
#[test]
fn objects_too_large_for_one_copy_request_are_copied_in_parts() {
    let Some((dir, c)) = cluster("copy in parts") else {
        return;
    };
    let mnt = dir.path().join("mnt");
    let staging = dir.path().join("staging");
    std::fs::create_dir_all(&mnt).unwrap();
    let g = mount_at(
        &c.endpoint(0),
        &mnt,
        &staging,
        "part_size=5M,max_copy=5M,attrs=head,cache_timeout=0",
        &[],
    );
    let count = |n: &str| counter(&mnt, &format!("s3.{n}"));
    let local = dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    let sum = sh_ok(
        &local,
        "head -c 23000000 /dev/urandom > big && sha256sum < big",
        60,
    );
    sh_ok(
        &mnt,
        &format!(
            "mkdir d && cp '{0}/big' d/big && chmod 640 d/big && printf small > d/small",
            local.display()
        ),
        120,
    );
    wait_for_uploads(&mnt, Duration::from_secs(60), "uploads did not finish");
    let before = ["COPY", "UPLOAD_PART_COPY"].map(count);
    // A rename: 5 parts of 5 MB, the mode carried over from the source.
    sh_ok(&mnt, "mv d/big d/moved", 120);
    let after_rename = ["COPY", "UPLOAD_PART_COPY"].map(count);
    assert_eq!(after_rename[0], before[0], "a one-request copy was tried");
    assert_eq!(after_rename[1] - before[1], 5);
    // chmod: the object is copied onto itself with the new mode.
    sh_ok(&mnt, "chmod 600 d/moved", 120);
    assert_eq!(count("UPLOAD_PART_COPY") - after_rename[1], 5);
    // The directory: the large file in parts; the small one and the
    // directory's marker by one COPY each.
    sh_ok(&mnt, "mv d e", 120);
    assert_eq!(count("COPY") - after_rename[0], 2);
    assert_eq!(count("UPLOAD_PART_COPY") - after_rename[1], 10);
    assert_eq!(count("ABORT_MULTIPART"), 0);
    drop(g);
    // What another client sees: whole objects, metadata kept.
    let g = mount_at(&c.endpoint(1), &mnt, &staging, "attrs=head", &[]);
    let out = sh_ok(
        &mnt,
        "ls d 2>&1; sha256sum < e/moved && stat -c '%a %s' e/moved && cat e/small",
        60,
    );
    assert_eq!(
        out,
        format!("ls: cannot access 'd': No such file or directory\n{sum}600 23000000\nsmall")
    );
    drop(g);
}

#[test]
fn an_ordinary_user_mounts_through_fusermount3_writes_and_unmounts() {
    let _dev = fusebox_test_support::FuseDeviceOpen::new();
    let s = Setup::start("user");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(s.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let (mnt, staging) = (s.path("mnt"), s.path("staging"));
    for d in [&mnt, &staging] {
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    let opts = format!("endpoint={},staging={}", s.s3.endpoint(), staging.display());
    let mnt_s = mnt.to_str().unwrap();
    let vars = [
        ("AWS_ACCESS_KEY_ID", objstore::ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", objstore::SECRET_KEY),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];
    let out = common::as_nobody_with(
        &[BIN, "mount", "objfs", "s3://objfs", mnt_s, "-o", &opts],
        &vars,
    );
    assert!(
        out.status.success(),
        "mount as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let daemon: u32 = String::from_utf8_lossy(&out.stdout)
        .trim()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let g = MountGuard {
        mnt: mnt.clone(),
        daemon,
    };
    let status = std::fs::read_to_string(format!("/proc/{daemon}/status")).unwrap();
    assert!(status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.contains("65534")));
    let out = common::nobody_ok(&[
        "sh",
        "-c",
        &format!(
            "cd '{mnt_s}' && echo hi > f && mkdir d && mv f d/g && cat d/g && stat -c '%U %a' d/g"
        ),
    ]);
    assert_eq!(out, "hi\nnobody 644\n");
    common::nobody_ok(&[BIN, "umount", mnt_s]);
    assert!(!is_mounted(&mnt));
    drop(g);
}
