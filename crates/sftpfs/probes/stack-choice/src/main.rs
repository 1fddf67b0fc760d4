//! Which SFTP client stack should sftpfs stand on? This probe measures three
//! against the same OpenSSH server, file and access pattern, so that the
//! answer is a measurement rather than a guess:
//!
//! - `ours`: fusebox-sftpfs's own `Connection` over the system `ssh`
//!   (blocking callers, one reader thread, any number of requests in flight);
//! - `openssh-sftp-client`: async (tokio) SFTP over the same `ssh` child's
//!   pipes. The transport is identical to ours, so only the SFTP layer differs;
//! - `russh`: a pure-Rust SSH client carrying russh-sftp. Here the transport
//!   (key exchange, cipher, channel flow control) differs too.
//!
//! For each stack: `connect` is the median of 3 times to a ready SFTP session;
//! `stat` is 2,000 LSTATs one at a time (the latency of one request, µs);
//! `read` reads the whole file with 64 READs of the server's largest size in
//! flight (MB/s, 1 MB = 10^6 bytes), and the byte count is checked. The
//! stacks take turns, for 3 rounds, so that drift on a busy machine falls on
//! all of them alike. The medians are printed at the end.
//!
//! ```text
//! sftp-stack-choice --port P --key KEYFILE --known-hosts FILE --file /remote/big
//! ```
//! The user is root at 127.0.0.1, and the key must be ed25519 (russh is built
//! without RSA). Build it with `cargo build --release` in this directory. It
//! is a workspace of its own, so it has its own Cargo.lock and target/.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure, Context, Result};
use tokio::task::JoinSet;

const ROUNDS: usize = 3;
const CONNECTS: usize = 3;
const STATS: u32 = 2000;
const IN_FLIGHT: usize = 64;
/// How long one request may take before the run counts as broken.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The read size for a server that states no limits: SFTP's 32 KiB, which
/// every server accepts.
const DEFAULT_READ: u32 = 32 * 1024;
const USAGE: &str =
    "usage: sftp-stack-choice --port P --key KEYFILE --known-hosts FILE --file /remote/path";

struct Args {
    port: u16,
    key: String,
    known_hosts: String,
    file: String,
}

impl Args {
    fn parse() -> Result<Args> {
        let argv: Vec<String> = std::env::args().skip(1).collect();
        let known = ["--port", "--key", "--known-hosts", "--file"];
        let pairs: Vec<&[String]> = argv.chunks(2).collect();
        ensure!(pairs.iter().all(|p| p.len() == 2 && known.contains(&p[0].as_str())), "{USAGE}");
        let get = |name: &str| {
            let v = pairs.iter().find(|p| p[0] == name).map(|p| p[1].clone());
            v.ok_or_else(|| anyhow!("{name} is required\n{USAGE}"))
        };
        Ok(Args {
            port: get("--port")?.parse().context("--port")?,
            key: get("--key")?,
            known_hosts: get("--known-hosts")?,
            file: get("--file")?,
        })
    }

    /// The command line both ssh-based stacks run: ssh as sftpfs runs it,
    /// pinned to the test server and its host key.
    #[rustfmt::skip]
    fn ssh_argv(&self) -> Vec<OsString> {
        let (key, known, port) = (format!("-oIdentityFile={}", self.key),
            format!("-oUserKnownHostsFile={}", self.known_hosts), format!("-oPort={}", self.port));
        ["ssh", "-x", "-a", "-oClearAllForwardings=yes", "-oBatchMode=yes", key.as_str(),
         "-oIdentitiesOnly=yes", known.as_str(), "-oStrictHostKeyChecking=yes",
         "-oHostKeyAlias=fusebox-test-sshd", port.as_str(), "-l", "root", "127.0.0.1", "-s", "sftp"]
            .into_iter().map(OsString::from).collect()
    }
}

/// The READs that cover `[0, size)`: (offset, length), `chunk` bytes each.
/// A short reply is reported, not asked again: OpenSSH's sftp-server answers
/// each READ with one read(2), and that is never short for a regular file
/// that nobody is changing. So every stack gets exactly the file's bytes, or
/// the run says why not.
fn chunks(size: u64, chunk: u32) -> impl Iterator<Item = (u64, u32)> {
    let step = u64::from(chunk.max(1));
    (0..size).step_by(step as usize).map(move |o| (o, (size - o).min(step) as u32))
}

fn check(offset: u64, asked: u32, n: usize) -> Result<u64> {
    ensure!(n == asked as usize, "READ at {offset} returned {n} bytes of {asked}");
    Ok(n as u64)
}

/// The async stacks' read loop: one task per READ (made by `read`, which
/// returns the bytes it got), `IN_FLIGHT` at a time, and the total.
async fn pipeline<F, Fut>(size: u64, chunk: u32, read: F) -> Result<u64>
where
    F: Fn(u64, u32) -> Fut,
    Fut: Future<Output = Result<usize>> + Send + 'static,
{
    let (mut todo, mut flight, mut got) = (chunks(size, chunk), JoinSet::new(), 0);
    loop {
        // Top up to IN_FLIGHT requests, then take whichever answer comes first.
        for (offset, len) in todo.by_ref().take(IN_FLIGHT - flight.len()) {
            let f = read(offset, len);
            flight.spawn(async move { (offset, len, f.await) });
        }
        let Some(done) = flight.join_next().await else {
            break;
        };
        let (offset, len, n) = done?;
        got += check(offset, len, n?)?;
    }
    Ok(got)
}

struct Sample {
    connect_ms: f64,
    stat_us: f64,
    read_mbps: f64,
}

impl Sample {
    fn new(connects: &[Duration], stats: Duration, read: Duration, size: u64) -> Sample {
        Sample {
            connect_ms: median(connects.iter().map(|d| d.as_secs_f64() * 1e3).collect()),
            stat_us: stats.as_secs_f64() * 1e6 / f64::from(STATS),
            read_mbps: size as f64 / read.as_secs_f64() / 1e6,
        }
    }

    fn line(&self, stack: &str) -> String {
        format!(
            "stack={stack} connect_ms={:.1} stat_us={:.1} read_MBps={:.1}",
            self.connect_ms, self.stat_us, self.read_mbps
        )
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// What each stack supplies. `measure` does exactly the same with all three,
/// so any difference in the figures comes from the stack.
trait Stack {
    type Conn;
    /// To a session ready for requests (INIT done, limits asked).
    async fn connect(&self, a: &Args) -> Result<Self::Conn>;
    /// One LSTAT, waited for; the file's size.
    async fn lstat(&self, c: &mut Self::Conn, path: &str) -> Result<u64>;
    /// The whole file with `IN_FLIGHT` READs outstanding; the bytes received.
    async fn read_file(&self, c: &mut Self::Conn, path: &str, size: u64) -> Result<u64>;
    async fn close(&self, c: Self::Conn) -> Result<()>;
}

async fn measure<S: Stack>(s: &S, a: &Args, size: u64) -> Result<Sample> {
    let mut times = Vec::new();
    let mut last: Option<S::Conn> = None;
    for _ in 0..CONNECTS {
        if let Some(c) = last.take() {
            s.close(c).await?; // outside the timing
        }
        let t = Instant::now();
        last = Some(s.connect(a).await?);
        times.push(t.elapsed());
    }
    let mut c = last.expect("CONNECTS > 0");
    let (t, mut seen) = (Instant::now(), 0);
    for _ in 0..STATS {
        seen = s.lstat(&mut c, &a.file).await?;
    }
    let stats = t.elapsed();
    ensure!(seen == size, "LSTAT says {seen} bytes, expected {size}");
    let t = Instant::now();
    let got = s.read_file(&mut c, &a.file, size).await?;
    let read = t.elapsed();
    ensure!(got == size, "read {got} bytes, expected {size}");
    s.close(c).await?;
    Ok(Sample::new(&times, stats, read, size))
}

/// fusebox-sftpfs. Its calls block, and they run on the calling thread just
/// as sftpfs makes them; the `async` is only there to fit the trait.
mod ours {
    use super::*;
    use fusebox_sftpfs::connection::{Connection, Counts};
    use fusebox_sftpfs::ssh::{Route, Stream};
    use fusebox_sftpfs::wire::{pflags, Attrs, Reply, Request};

    pub struct Ours;

    fn deadline() -> Instant {
        Instant::now() + TIMEOUT
    }

    impl Stack for Ours {
        type Conn = Arc<Connection>;

        async fn connect(&self, a: &Args) -> Result<Arc<Connection>> {
            let Stream { reader, writer, closer, stderr } =
                Route::Ssh { argv: a.ssh_argv() }.open()?;
            Connection::start(reader, writer, closer, Arc::new(Counts::default()), deadline())
                .map_err(|e| anyhow!("{e} (ssh said: {})", stderr.reason().unwrap_or_default()))
        }

        async fn lstat(&self, c: &mut Arc<Connection>, path: &str) -> Result<u64> {
            match c.call(&Request::Lstat { path: path.as_bytes() }, deadline())? {
                Reply::Attrs(a) => a.size.ok_or_else(|| anyhow!("LSTAT {path}: no size")),
                r => bail!("LSTAT {path}: {r:?}"),
            }
        }

        async fn read_file(&self, c: &mut Arc<Connection>, path: &str, size: u64) -> Result<u64> {
            let open = Request::Open {
                path: path.as_bytes(),
                pflags: pflags::READ,
                attrs: Attrs::default(),
            };
            let handle = match c.call(&open, deadline())? {
                Reply::Handle(h) => h,
                r => bail!("OPEN {path}: {r:?}"),
            };
            let (mut todo, mut flight, mut got) =
                (chunks(size, c.info().max_read), VecDeque::new(), 0);
            loop {
                for (offset, len) in todo.by_ref().take(IN_FLIGHT - flight.len()) {
                    let read = Request::Read { handle: &handle[..], offset, len };
                    flight.push_back((offset, len, c.call_many(&[read]).remove(0)));
                }
                // Oldest first: OpenSSH answers in order, so waiting on the
                // front of the queue never leaves an answer unread for long.
                let Some((offset, len, waiter)) = flight.pop_front() else {
                    break;
                };
                match waiter.wait(deadline())? {
                    Reply::Data(d) => got += check(offset, len, d.len())?,
                    r => bail!("READ at {offset}: {r:?}"),
                }
            }
            c.call(&Request::Close { handle: &handle[..] }, deadline())?;
            Ok(got)
        }

        async fn close(&self, c: Arc<Connection>) -> Result<()> {
            c.die("done"); // kills its ssh
            Ok(())
        }
    }
}

/// openssh-sftp-client, over the pipes of the same `ssh` command that ours runs.
mod osc {
    use super::*;
    use bytes::BytesMut;
    use openssh_sftp_client::{fs::Fs, Sftp, SftpOptions};
    use std::{io::SeekFrom, pin::Pin, process::Stdio};
    use tokio::{io::AsyncSeek, process::Child};

    /// `chunk` is the READ size to ask for. `File::read` clamps it to the
    /// server's limits@openssh.com size, which the crate keeps private.
    pub struct Osc {
        pub chunk: u32,
    }

    pub struct Conn {
        sftp: Sftp,
        fs: Fs,
        child: Child,
    }

    impl Stack for Osc {
        type Conn = Conn;

        async fn connect(&self, a: &Args) -> Result<Conn> {
            let argv = a.ssh_argv();
            let mut child = tokio::process::Command::new(&argv[0])
                .args(&argv[1..])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()?;
            let (stdin, stdout) =
                (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"));
            // flush_interval 0 sends each request at once, as ours does; the
            // default (0.5 ms) can add that much to every request. 0.15.x
            // documents 0 as allowed (its flush task then runs without a timer).
            let sftp =
                Sftp::new(stdin, stdout, SftpOptions::new().flush_interval(Duration::ZERO)).await?;
            Ok(Conn { fs: sftp.fs(), sftp, child })
        }

        async fn lstat(&self, c: &mut Conn, path: &str) -> Result<u64> {
            let m = c.fs.symlink_metadata(path).await?; // LSTAT; metadata() would be STAT
            m.len().ok_or_else(|| anyhow!("LSTAT {path}: no size"))
        }

        async fn read_file(&self, c: &mut Conn, path: &str, size: u64) -> Result<u64> {
            let file = c.sftp.open(path).await?;
            let got = pipeline(size, self.chunk, |offset, len| {
                // A clone shares the remote handle but has its own offset: this
                // is how the crate keeps many reads of one file in flight.
                let mut f = file.clone();
                async move {
                    Pin::new(&mut f).start_seek(SeekFrom::Start(offset))?;
                    let data = f.read(len, BytesMut::with_capacity(len as usize)).await?;
                    anyhow::Ok(data.map_or(0, |d| d.len()))
                }
            })
            .await?;
            file.close().await?;
            Ok(got)
        }

        async fn close(&self, c: Conn) -> Result<()> {
            let Conn { sftp, fs, mut child } = c;
            drop(fs); // Sftp::close waits until every Fs and File is gone
            sftp.close().await?;
            let _ = child.kill().await;
            Ok(())
        }
    }
}

/// russh + russh-sftp: SSH implemented in Rust, over TCP, with no `ssh` process.
mod rs {
    use super::*;
    use russh::client::{self, Handle};
    use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
    use russh_sftp::{
        client::RawSftpSession,
        extensions::LIMITS,
        protocol::{FileAttributes, OpenFlags},
    };

    pub struct Russh {
        pub key: Arc<PrivateKey>,
    }

    /// Accepts any host key: the server is on loopback, and the ssh-based
    /// stacks check the same key against known_hosts.
    struct AnyHostKey;

    impl client::Handler for AnyHostKey {
        type Error = russh::Error;
        async fn check_server_key(
            &mut self,
            _: &PublicKeyOrCertificate,
        ) -> Result<bool, russh::Error> {
            Ok(true)
        }
    }

    pub struct Conn {
        ssh: Handle<AnyHostKey>,
        sftp: Arc<RawSftpSession>,
        max_read: u32,
    }

    impl Stack for Russh {
        type Conn = Conn;

        async fn connect(&self, a: &Args) -> Result<Conn> {
            // russh's defaults are already OpenSSH's (a 2 MiB channel window, 32 KiB
            // packets, chacha20-poly1305 first). Only TCP_NODELAY is turned on
            // (russh leaves it off), so Nagle's algorithm never holds back a request.
            let config = Arc::new(client::Config { nodelay: true, ..Default::default() });
            let mut ssh = client::connect(config, ("127.0.0.1", a.port), AnyHostKey).await?;
            let key = PrivateKeyWithHashAlg::new(self.key.clone(), None);
            ensure!(ssh.authenticate_publickey("root", key).await?.success(), "key refused");
            let channel = ssh.channel_open_session().await?;
            channel.request_subsystem(true, "sftp").await?;
            // This is the raw session. SftpSession::new sends the same INIT and
            // limits@openssh.com, but it keeps its raw session private, and
            // only the raw one lets us put 64 READs in flight at offsets we choose.
            let sftp = RawSftpSession::new(channel.into_stream());
            let mut max_read = DEFAULT_READ;
            if sftp.init().await?.extensions.contains_key(LIMITS) {
                // A reply can be no larger than russh-sftp takes in (its
                // Config's max_packet_len, 256 KiB by default).
                let cap = u64::from(russh_sftp::client::Config::default().max_packet_len) - 1024;
                match sftp.limits().await?.max_read_len {
                    0 => {}
                    n => max_read = n.min(cap) as u32,
                }
            }
            Ok(Conn { ssh, sftp: Arc::new(sftp), max_read })
        }

        async fn lstat(&self, c: &mut Conn, path: &str) -> Result<u64> {
            let attrs = c.sftp.lstat(path).await?.attrs;
            attrs.size.ok_or_else(|| anyhow!("LSTAT {path}: no size"))
        }

        async fn read_file(&self, c: &mut Conn, path: &str, size: u64) -> Result<u64> {
            let handle = c.sftp.open(path, OpenFlags::READ, FileAttributes::empty()).await?.handle;
            let got = pipeline(size, c.max_read, |offset, len| {
                let (sftp, h) = (c.sftp.clone(), handle.clone());
                async move { anyhow::Ok(sftp.read(h, offset, len).await?.data.len()) }
            })
            .await?;
            c.sftp.close(handle).await?;
            Ok(got)
        }

        async fn close(&self, c: Conn) -> Result<()> {
            c.sftp.close_session()?;
            c.ssh.disconnect(russh::Disconnect::ByApplication, "", "en").await?;
            Ok(())
        }
    }
}

fn main() -> Result<()> {
    let a = Args::parse()?;
    // Both async stacks run on tokio, with two workers (the machine has two
    // cores). The measuring code calls in from the main thread through
    // block_on, as a blocking caller (a FUSE request thread) would.
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    // Loaded once, outside any timing (ssh reads its key file while it connects).
    let key =
        russh::keys::load_secret_key(&a.key, None).with_context(|| format!("loading {}", a.key))?;
    let (ours, russh) = (ours::Ours, rs::Russh { key: Arc::new(key) });

    // The size that every stack must read exactly, and one whole untimed read
    // first, so that the server's page cache is warm for all three alike.
    let (size, chunk) = rt.block_on(async {
        let mut c = ours.connect(&a).await.context("warm-up connect")?;
        let size = ours.lstat(&mut c, &a.file).await?;
        ensure!(ours.read_file(&mut c, &a.file, size).await? == size, "warm-up read came up short");
        let chunk = c.info().max_read;
        ours.close(c).await?;
        anyhow::Ok((size, chunk))
    })?;
    let osc = osc::Osc { chunk };
    println!("# file={} bytes={size} max_read={chunk} stats={STATS} in_flight={IN_FLIGHT}", a.file);

    const STACKS: [&str; 3] = ["ours", "openssh-sftp-client", "russh"];
    let mut all: [Vec<Sample>; 3] = Default::default();
    for round in 1..=ROUNDS {
        for (i, name) in STACKS.iter().enumerate() {
            let r = match i {
                0 => rt.block_on(measure(&ours, &a, size)),
                1 => rt.block_on(measure(&osc, &a, size)),
                _ => rt.block_on(measure(&russh, &a, size)),
            };
            // If one stack fails, say so and go on: the others are still measured.
            match r {
                Ok(s) => {
                    println!("round={round} {}", s.line(name));
                    all[i].push(s);
                }
                Err(e) => println!("round={round} stack={name} error={e:#}"),
            }
        }
    }
    println!("# medians over the rounds that succeeded");
    for (name, samples) in STACKS.iter().zip(&all) {
        let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        let s = Sample {
            connect_ms: m(|s| s.connect_ms),
            stat_us: m(|s| s.stat_us),
            read_mbps: m(|s| s.read_mbps),
        };
        println!("{} rounds={}", s.line(name), samples.len());
    }
    Ok(())
}
