//! S3 stores on this machine for objfs's tests and benchmarks, all on
//! 127.0.0.1 and stopped on drop:
//! - [`FakeS3`]: one gofakes3 process (a real S3 server over HTTP, in Go,
//!   data in its memory: its bolt backend crashes on concurrent copies),
//!   for the tests that do not need a cluster;
//! - [`GarageCluster`]: Garage, three nodes with replication factor 3,
//!   each with its own S3 endpoint, for the cluster tests and the bench.
//!
//! Neither checks TLS; objfs talks plain HTTP to them, so callers clear
//! `AWS_CA_BUNDLE`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::remote::free_port;

/// The bucket every store here starts with.
pub const BUCKET: &str = "objfs";

/// Credentials the stores here accept (Garage imports them; gofakes3
/// takes any).
pub const ACCESS_KEY: &str = "GK0000000000000000000f0b0";
/// See [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "5ec2e7000000000000000000000000000000000000000000000000000000f0b0";

/// `name` from `$VAR`, then `PATH`, then the places scripts/setup.sh and
/// scripts/objfs-cluster.sh install to.
fn find_tool(var: &str, name: &str, fallbacks: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .chain(fallbacks.iter().map(PathBuf::from))
        .find(|p| p.is_file())
}

/// The gofakes3 binary, if installed.
pub fn gofakes3() -> Option<PathBuf> {
    find_tool("FUSEBOX_GOFAKES3", "gofakes3", &["/usr/local/bin/gofakes3"])
}

/// The garage binary, if installed.
pub fn garage() -> Option<PathBuf> {
    let cached = std::env::var_os("HOME")
        .map(|h| PathBuf::from(h).join(".cache/fusebox/garage/bin/garage"))
        .unwrap_or_default();
    find_tool(
        "FUSEBOX_GARAGE",
        "garage",
        &[
            cached.to_str().unwrap_or_default(),
            "/var/tmp/garage/bin/garage",
        ],
    )
}

/// The environment a program talking to these stores needs: our
/// credentials, no CA bundle (plain HTTP), no profile or IMDS lookups.
pub fn client_env(cmd: &mut Command) -> &mut Command {
    cmd.env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_CA_BUNDLE")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
}

fn wait_for_port(port: u16, limit: Duration, child: &mut Child, what: &str) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            bail!("{what} exited before listening: {st}");
        }
        if Instant::now() > deadline {
            bail!("{what} did not listen on port {port} within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One gofakes3 server with the bucket [`BUCKET`].
pub struct FakeS3 {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
    bin: PathBuf,
}

impl FakeS3 {
    /// Starts it with its data in `dir`.
    pub fn start(dir: &Path) -> Result<FakeS3> {
        let bin = gofakes3().context("gofakes3 is not installed (scripts/setup.sh installs it)")?;
        std::fs::create_dir_all(dir)?;
        let mut s = FakeS3 {
            child: None,
            port: free_port()?,
            log: dir.join("s3.log"),
            bin,
        };
        s.restart()?;
        Ok(s)
    }

    /// Starts it again (after [`stop`](Self::stop)) on the same port: a
    /// store back from an outage, with only the bucket (its memory is
    /// gone).
    pub fn restart(&mut self) -> Result<()> {
        self.stop();
        let log = std::fs::File::create(&self.log)?;
        let mut child = Command::new(&self.bin)
            .args(["-backend", "memory"])
            .args(["-host", &format!("127.0.0.1:{}", self.port)])
            .args(["-initialbucket", BUCKET])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting gofakes3")?;
        wait_for_port(self.port, Duration::from_secs(10), &mut child, "gofakes3")?;
        self.child = Some(child);
        Ok(())
    }

    /// Stops it (the store is down until [`restart`](Self::restart)).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for FakeS3 {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Three Garage nodes on loopback, replication factor 3, one zone, the
/// bucket [`BUCKET`] and the key [`ACCESS_KEY`]: scripts/garage-cluster.sh's
/// layout, started, stopped and failed through that script.
pub struct GarageCluster {
    dir: PathBuf,
    bin: PathBuf,
    endpoints: Vec<String>,
    admin_ports: Vec<u16>,
}

/// The admin API's and metrics' bearer token (loopback only), as the
/// script sets it.
const ADMIN_TOKEN: &str = "fusebox-objfs-test-admin";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/garage-cluster.sh")
}

impl GarageCluster {
    /// Starts the nodes with their data under `dir` and makes the layout,
    /// key and bucket. `rpc_timeout`: how long a node waits for another
    /// before failing a request (Garage's default is 300 s).
    pub fn start(dir: &Path, rpc_timeout: Duration) -> Result<GarageCluster> {
        let bin = garage().context(
            "garage is not installed (scripts/objfs-cluster.sh builds it with cargo install)",
        )?;
        let c = GarageCluster {
            dir: dir.to_path_buf(),
            bin,
            endpoints: Vec::new(),
            admin_ports: Vec::new(),
        };
        c.run(
            &["up"],
            &[(
                "GARAGE_RPC_TIMEOUT_MS",
                &rpc_timeout.as_millis().to_string(),
            )],
        )?;
        let ports = std::fs::read_to_string(dir.join("ports"))?;
        let value = |name: String| -> Result<u16> {
            ports
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.parse().ok())
                .with_context(|| format!("{name} missing from {}", dir.join("ports").display()))
        };
        let mut c = c;
        for n in 0..3 {
            c.endpoints.push(format!(
                "http://127.0.0.1:{}",
                value(format!("S3_PORT_{n}"))?
            ));
            c.admin_ports.push(value(format!("ADMIN_PORT_{n}"))?);
        }
        Ok(c)
    }

    fn run(&self, args: &[&str], env: &[(&str, &str)]) -> Result<()> {
        let mut cmd = Command::new("bash");
        cmd.arg(script())
            .arg(args[0])
            .arg(&self.dir)
            .args(&args[1..])
            .env("FUSEBOX_GARAGE", &self.bin)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().context("running scripts/garage-cluster.sh")?;
        if !out.status.success() {
            bail!(
                "garage-cluster.sh {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// Starts node `i` (again).
    pub fn start_node(&mut self, i: usize) -> Result<()> {
        self.run(&["node-up", &i.to_string()], &[])
    }

    /// Kills node `i` (SIGKILL: a machine lost, not a shutdown).
    pub fn kill_node(&mut self, i: usize) {
        if let Err(e) = self.run(&["node-down", &i.to_string()], &[]) {
            tracing::warn!("{e:#}");
        }
    }

    /// Node `i`'s S3 endpoint.
    pub fn endpoint(&self, i: usize) -> String {
        self.endpoints[i].clone()
    }

    /// S3 requests node `i` has served so far, by API operation name
    /// (its `api_s3_request_counter` metric).
    pub fn s3_requests(&self, i: usize) -> Result<std::collections::BTreeMap<String, u64>> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.admin_ports[i]))?;
        use std::io::{Read, Write};
        write!(
            s,
            "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\r\n"
        )?;
        let mut body = String::new();
        s.read_to_string(&mut body)?;
        let mut out = std::collections::BTreeMap::new();
        for line in body
            .lines()
            .filter(|l| l.starts_with("api_s3_request_counter{"))
        {
            let Some(name) = line
                .split("api_endpoint=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let n: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            *out.entry(name.to_string()).or_default() += n as u64;
        }
        Ok(out)
    }
}

impl Drop for GarageCluster {
    fn drop(&mut self) {
        if let Err(e) = self.run(&["down"], &[]) {
            tracing::warn!("{e:#}");
        }
    }
}
