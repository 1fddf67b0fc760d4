//! How sftpfs reaches the server: the system's `ssh`, run the way sshfs
//! runs it (`ssh -x -a -oClearAllForwardings=yes [OPTIONS] HOST -s sftp`),
//! so the user's ~/.ssh/config, known_hosts, agent, ProxyJump, identity
//! files and everything else OpenSSH reads apply unchanged; or, with
//! `directport`, a TCP connection straight to an SFTP server.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};

/// Where the SFTP stream comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// `ssh` (or `ssh_command`) to `host`, with the arguments sshfs would
    /// pass; the last argument names the subsystem or the server program.
    Ssh { argv: Vec<OsString> },
    /// `directport=PORT`: an SFTP server listening on `host:port`, no ssh.
    Direct { host: String, port: u16 },
}

/// An open stream: its two halves and what ends it.
pub struct Stream {
    pub reader: Box<dyn Read + Send>,
    pub writer: Box<dyn Write + Send>,
    pub closer: Box<dyn FnOnce() + Send>,
    /// What `ssh` printed on its standard error, its last lines: why a
    /// connection failed, in ssh's own words.
    pub stderr: Arc<StderrTail>,
}

/// The last lines a child wrote to stderr.
#[derive(Default)]
pub struct StderrTail(Mutex<VecDeque<String>>);

impl StderrTail {
    const KEEP: usize = 20;

    fn push(&self, line: String) {
        let mut q = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if q.len() == Self::KEEP {
            q.pop_front();
        }
        q.push_back(line);
    }

    /// The lines worth showing a user, joined: ssh's warnings about
    /// adding a host key and its debug chatter are left out.
    pub fn reason(&self) -> Option<String> {
        let q = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let lines: Vec<&str> = q
            .iter()
            .map(|l| l.trim())
            .filter(|l| {
                !l.is_empty()
                    && !l.starts_with("Warning: Permanently added")
                    && !l.starts_with("debug")
            })
            .collect();
        (!lines.is_empty()).then(|| lines.join("; "))
    }
}

impl Route {
    /// Open a stream. `spawn` is where a child process is started (see
    /// `sys::die_with_parent`).
    pub fn open(&self) -> io::Result<Stream> {
        match self {
            Route::Ssh { argv } => spawn_ssh(argv),
            Route::Direct { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port))?;
                s.set_nodelay(true)?;
                let r = s.try_clone()?;
                let c = s.try_clone()?;
                Ok(Stream {
                    reader: Box::new(r),
                    writer: Box::new(s),
                    closer: Box::new(move || {
                        let _ = c.shutdown(std::net::Shutdown::Both);
                    }),
                    stderr: Arc::default(),
                })
            }
        }
    }

    /// The command line, for messages.
    pub fn describe(&self) -> String {
        match self {
            Route::Ssh { argv } => argv
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
            Route::Direct { host, port } => format!("tcp {host}:{port}"),
        }
    }
}

fn spawn_ssh(argv: &[OsString]) -> io::Result<Stream> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| io::Error::other("empty ssh command"))?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    crate::sys::die_with_parent(&mut cmd);
    let mut child = cmd.spawn().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("starting {}: {e}", program.to_string_lossy()),
        )
    })?;
    let stdin = child.stdin.take().expect("piped");
    let stdout = child.stdout.take().expect("piped");
    widen_pipe_from_ssh(&stdout);
    let stderr = child.stderr.take().expect("piped");
    let tail = Arc::new(StderrTail::default());
    let t = tail.clone();
    std::thread::Builder::new()
        .name("sftpfs-ssh-stderr".into())
        .spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                tracing::warn!(target: "sftpfs::ssh", "{line}");
                t.push(line);
            }
        })?;
    let child = Arc::new(Mutex::new(Some(child)));
    let reaper = child.clone();
    Ok(Stream {
        reader: Box::new(stdout),
        writer: Box::new(stdin),
        closer: Box::new(move || {
            if let Some(mut c) = reaper.lock().unwrap_or_else(PoisonError::into_inner).take() {
                end_child(&mut c);
            }
        }),
        stderr: tail,
    })
}

/// The pipe from ssh as large as the system lets a user make it (1 MiB
/// by default). A 64 KiB pipe costs a wakeup of each side per 64 KiB
/// carried, and ssh, unable to write what it decrypted, grows its output
/// buffer 32 KiB at a time, copying it whole each time: a cold 1 MiB read
/// took 140 ms on loopback. Only this one: Linux counts pipe capacity
/// against each user (`pipe-user-pages-soft`, 64 MiB), and a user over it
/// gets 8 KiB pipes in every program; a mount's five connections hold
/// 5 MiB this way. Best effort: a user over the allowance keeps the
/// default size.
fn widen_pipe_from_ssh(fd: &impl std::os::fd::AsFd) {
    const WANT: usize = 1 << 20;
    let most = std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .unwrap_or(WANT);
    if let Err(e) = rustix::pipe::fcntl_setpipe_size(fd, WANT.min(most)) {
        tracing::debug!(error = %e, "the pipe to ssh keeps its default size");
    }
}

/// Kill and reap: ssh may hold a dead connection open for a long time.
fn end_child(c: &mut Child) {
    let _ = c.kill();
    let _ = c.wait();
}
