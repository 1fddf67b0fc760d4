//! A remote end on this machine for the network filesystems' tests and
//! benchmarks: an OpenSSH server on loopback with throwaway keys
//! ([`Sshd`]), and a TCP proxy in front of it that adds delay, cuts
//! connections and plays dead ([`DelayProxy`]; this kernel has no netem).
//! Everything listens on 127.0.0.1 and is stopped on drop.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The name the test host key is known by, whatever port ssh dials (the
/// server's own or a proxy's).
pub const HOST_ALIAS: &str = "fusebox-test-sshd";

/// An sshd on 127.0.0.1 with its own host key, one user key for root (and
/// for whoever may read it), and an SFTP subsystem.
pub struct Sshd {
    child: Child,
    port: u16,
    dir: PathBuf,
}

/// How the server is set up.
#[derive(Clone, Debug, Default)]
pub struct SshdConfig {
    /// The `Subsystem sftp` command (default: OpenSSH's in-process
    /// internal-sftp).
    pub sftp_subsystem: Option<String>,
    /// Extra sshd_config lines.
    pub extra: String,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(path: &Path) -> Result<()> {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .context("running ssh-keygen (package openssh-client)")?;
    if !st.success() {
        bail!("ssh-keygen failed");
    }
    Ok(())
}

/// A free TCP port on loopback.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Sshd {
    /// Make keys and a config in `dir` (emptied first) and start sshd.
    pub fn start(dir: &Path, cfg: &SshdConfig) -> Result<Sshd> {
        if !Path::new("/usr/sbin/sshd").exists() {
            bail!("openssh-server is not installed (scripts/setup.sh installs it)");
        }
        if dir.exists() {
            std::fs::remove_dir_all(dir)?;
        }
        std::fs::create_dir_all(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        keygen(&dir.join("host"))?;
        keygen(&dir.join("user"))?;
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        std::fs::copy(dir.join("user.pub"), dir.join("authorized_keys"))?;
        let host_pub = std::fs::read_to_string(dir.join("host.pub"))?;
        let mut parts = host_pub.split_whitespace();
        let (kind, key) = (
            parts.next().context("host.pub")?,
            parts.next().context("host.pub")?,
        );
        std::fs::write(
            dir.join("known_hosts"),
            format!("{HOST_ALIAS} {kind} {key}\n"),
        )?;
        std::fs::write(dir.join("empty_known_hosts"), "")?;
        std::fs::create_dir_all("/run/sshd")?;
        let port = free_port()?;
        let subsystem = cfg.sftp_subsystem.as_deref().unwrap_or("internal-sftp");
        std::fs::write(
            dir.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n\
                 MaxStartups 100\nMaxSessions 100\n\
                 Subsystem sftp {subsystem}\n{}\n",
                dir.join("host").display(),
                dir.join("authorized_keys").display(),
                cfg.extra
            ),
        )?;
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(dir.join("sshd_config"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(dir.join("sshd.log"))?))
            .spawn()
            .context("starting sshd")?;
        let server = Sshd { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("sshd did not listen on port {port}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The user's private key.
    pub fn key(&self) -> PathBuf {
        self.dir.join("user")
    }

    /// A copy of the key owned by `uid` (ssh refuses a key file its user
    /// does not own alone), for an unprivileged user's ssh.
    pub fn key_for(&self, uid: u32, gid: u32) -> Result<PathBuf> {
        let p = self.dir.join(format!("user-{uid}"));
        std::fs::copy(self.key(), &p)?;
        std::os::unix::fs::chown(&p, Some(uid), Some(gid))?;
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        Ok(p)
    }

    /// ssh options (as `-o` takes them, comma-separated) that reach this
    /// server on `port` (its own, or a proxy's) with the throwaway key and
    /// the host key checked strictly against the one known_hosts line.
    pub fn ssh_options(&self, port: u16) -> String {
        self.ssh_options_with(port, &self.key(), &self.dir.join("known_hosts"))
    }

    /// The same with another key and known_hosts file (IdentityFile adds
    /// to a list in ssh: a wrong key must replace the right one, not
    /// follow it).
    pub fn ssh_options_with(&self, port: u16, key: &Path, known_hosts: &Path) -> String {
        format!(
            "IdentityFile={},IdentitiesOnly=yes,UserKnownHostsFile={},StrictHostKeyChecking=yes,\
             HostKeyAlias={HOST_ALIAS},GlobalKnownHostsFile=/dev/null,LogLevel=ERROR,Port={port}",
            key.display(),
            known_hosts.display(),
        )
    }
}

/// One direction of a proxied connection: what was read, with the time
/// it may be passed on.
struct Pipe {
    queue: Mutex<VecDeque<(Instant, Vec<u8>)>>,
    ready: Condvar,
    closed: AtomicBool,
}

struct ProxyState {
    /// Half the added round trip, in microseconds (each way).
    one_way_us: AtomicU64,
    /// New connections are refused (accepted and closed at once).
    refusing: AtomicBool,
    /// Nothing is passed on, either way, and new connections hang: a
    /// server (or link) that is gone without a word.
    silent: AtomicBool,
    /// Live connections: both sockets, to cut them.
    conns: Mutex<Vec<(TcpStream, TcpStream)>>,
    stop: AtomicBool,
    accepted: AtomicU64,
}

/// A TCP proxy on 127.0.0.1 to `127.0.0.1:target` that delays every byte
/// by half the added round trip in each direction (bandwidth unchanged),
/// and on request cuts connections, refuses new ones or goes silent.
pub struct DelayProxy {
    port: u16,
    state: Arc<ProxyState>,
}

impl DelayProxy {
    pub fn start(target: u16, added_rtt: Duration) -> Result<DelayProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(ProxyState {
            one_way_us: AtomicU64::new(added_rtt.as_micros() as u64 / 2),
            refusing: AtomicBool::new(false),
            silent: AtomicBool::new(false),
            conns: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
            accepted: AtomicU64::new(0),
        });
        let s = state.clone();
        std::thread::Builder::new()
            .name("delay-proxy".into())
            .spawn(move || {
                for client in listener.incoming() {
                    if s.stop.load(Ordering::Acquire) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    s.accepted.fetch_add(1, Ordering::Relaxed);
                    if s.refusing.load(Ordering::Acquire) {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    }
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                        let _ = client.shutdown(Shutdown::Both);
                        continue;
                    };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    if let (Ok(c), Ok(v)) = (client.try_clone(), server.try_clone()) {
                        s.conns
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push((c, v));
                    }
                    pump(&s, &client, &server);
                    pump(&s, &server, &client);
                }
            })?;
        Ok(DelayProxy { port, state })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn set_added_rtt(&self, rtt: Duration) {
        self.state
            .one_way_us
            .store(rtt.as_micros() as u64 / 2, Ordering::Relaxed);
    }

    /// Cut every live connection (both ends see a reset or an EOF).
    pub fn cut(&self) {
        let conns = std::mem::take(
            &mut *self
                .state
                .conns
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (a, b) in conns {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }

    /// Refuse new connections (or take them again).
    pub fn refuse(&self, on: bool) {
        self.state.refusing.store(on, Ordering::Release);
    }

    /// Pass nothing on, and let new connections hang (or stop).
    pub fn silence(&self, on: bool) {
        self.state.silent.store(on, Ordering::Release);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.state.accepted.load(Ordering::Relaxed)
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Release);
        self.cut();
        // Wake the accept loop so it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Start passing `from`'s bytes to `to`, each after the one-way delay:
/// a reader thread stamps what it reads, a writer thread sends it when due.
fn pump(state: &Arc<ProxyState>, from: &TcpStream, to: &TcpStream) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let pipe = Arc::new(Pipe {
        queue: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        closed: AtomicBool::new(false),
    });
    let (p, s) = (pipe.clone(), state.clone());
    let _ = std::thread::Builder::new()
        .name("delay-proxy-in".into())
        .spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if s.silent.load(Ordering::Acquire) {
                            continue;
                        }
                        let due = Instant::now()
                            + Duration::from_micros(s.one_way_us.load(Ordering::Relaxed));
                        p.queue
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push_back((due, buf[..n].to_vec()));
                        p.ready.notify_one();
                    }
                }
            }
            p.closed.store(true, Ordering::Release);
            p.ready.notify_one();
        });
    let _ = std::thread::Builder::new()
        .name("delay-proxy-out".into())
        .spawn(move || loop {
            let mut q = pipe.queue.lock().unwrap_or_else(PoisonError::into_inner);
            let (due, bytes) = loop {
                if let Some(front) = q.pop_front() {
                    break front;
                }
                if pipe.closed.load(Ordering::Acquire) {
                    let _ = to.shutdown(Shutdown::Write);
                    return;
                }
                q = pipe
                    .ready
                    .wait_timeout(q, Duration::from_millis(100))
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            };
            drop(q);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if to.write_all(&bytes).is_err() {
                return;
            }
        });
}

/// `fusebox sftp-relay DIR -- SERVER [ARGS]`, as an sshd's `Subsystem
/// sftp` command: runs the SFTP server and passes its stream through both
/// ways, counting the requests that go to it by type. The counts go to
/// DIR/PID.counts (every 100 ms while they change, and at the end), which
/// [`sftp_request_counts`] adds up: what each SFTP client (sshfs, rclone,
/// sftpfs) asked of the server, measured at the server, the same way for
/// all of them.
pub fn sftp_relay(counts_dir: &Path, server: &[String]) -> Result<()> {
    let (program, args) = server.split_first().context("no server program")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {program}"))?;
    let mut to_server = child.stdin.take().expect("piped");
    let mut from_server = child.stdout.take().expect("piped");
    let counts: Arc<Vec<AtomicU64>> = Arc::new((0..256).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let file = counts_dir.join(format!("{}.counts", std::process::id()));
    let write_counts = {
        let (counts, file) = (counts.clone(), file.clone());
        move || {
            let mut text = String::new();
            for (t, c) in counts.iter().enumerate() {
                let n = c.load(Ordering::Relaxed);
                if n > 0 {
                    let name = fusebox_sftpfs::wire::request_type_name(t as u8).unwrap_or("OTHER");
                    text.push_str(&format!("{name} {n}\n"));
                }
            }
            let tmp = file.with_extension("tmp");
            if std::fs::write(&tmp, text).is_ok() {
                let _ = std::fs::rename(&tmp, &file);
            }
        }
    };
    let flusher = {
        let (done, write_counts, counts) = (done.clone(), write_counts.clone(), counts.clone());
        std::thread::spawn(move || {
            let mut last = 0u64;
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(100));
                let total: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed)).sum();
                if total != last {
                    write_counts();
                    last = total;
                }
            }
        })
    };
    let out = std::thread::spawn(move || {
        let mut stdout = std::io::stdout().lock();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match from_server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if stdout
                        .write_all(&buf[..n])
                        .and_then(|()| stdout.flush())
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    // Requests: whole packets, counted by type, passed on.
    let mut stdin = std::io::BufReader::with_capacity(256 * 1024, std::io::stdin().lock());
    let mut packet = Vec::new();
    loop {
        let mut len = [0u8; 4];
        if stdin.read_exact(&mut len).is_err() {
            break;
        }
        let n = u32::from_be_bytes(len) as usize;
        packet.clear();
        packet.extend_from_slice(&len);
        packet.resize(4 + n, 0);
        if stdin.read_exact(&mut packet[4..]).is_err() {
            break;
        }
        if let Some(&t) = packet.get(4) {
            counts[t as usize].fetch_add(1, Ordering::Relaxed);
        }
        if to_server.write_all(&packet).is_err() {
            break;
        }
    }
    drop(to_server);
    let _ = child.wait();
    let _ = out.join();
    done.store(true, Ordering::Release);
    let _ = flusher.join();
    write_counts();
    Ok(())
}

/// The SFTP requests every relay writing to `dir` has counted, by type.
pub fn sftp_request_counts(dir: &Path) -> std::collections::BTreeMap<String, f64> {
    let mut total = std::collections::BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().extension().is_none_or(|x| x != "counts") {
            continue;
        }
        for line in std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
        {
            if let Some((name, n)) = line.split_once(' ') {
                *total.entry(name.to_string()).or_insert(0.0) += n.parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_delays_each_way_and_cuts() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = echo.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for s in echo.incoming() {
                let mut s = s.unwrap();
                std::thread::spawn(move || {
                    let mut b = [0u8; 1024];
                    while let Ok(n) = s.read(&mut b) {
                        if n == 0 || s.write_all(&b[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        let proxy = DelayProxy::start(port, Duration::from_millis(40)).unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port())).unwrap();
        let t = Instant::now();
        c.write_all(b"ping").unwrap();
        let mut b = [0u8; 4];
        c.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"ping");
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        proxy.cut();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(matches!(c.read(&mut b), Ok(0) | Err(_)));
    }
}
