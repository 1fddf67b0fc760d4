//! The direct suite's subjects: stackfs in direct mode (`fusebox run
//! --fs stackfs:BACKING --at DIR`), beside the same filesystem through the
//! kernel and native.
//!
//! In direct mode the filesystem lives in the process that makes the
//! calls, so the workload cannot run in the bench's own process as it does
//! for the other subjects: a worker does, `fusebox bench-worker`, started
//! under `fusebox run`. It runs the workload's untimed set-up and then the
//! workload itself, and prints the sample on its last line; what the
//! worker spends serving (the filesystem's own CPU) counts as the
//! workload's, since it is the same process.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::engine::{self, Sample};
use crate::results::SubjectInfo;
use crate::subject::{Mounted, Native, Subject};

/// How a workload is started inside a direct-mode process.
#[derive(Clone, Debug)]
pub struct DirectLaunch {
    pub fusebox_bin: PathBuf,
    pub suite: String,
    /// What `--fs` names (stackfs over the backing directory, sftpfs over
    /// the backing directory's server).
    pub spec: String,
    /// Extra `fusebox run` arguments (--intercept, --cache-entries, -o).
    pub args: Vec<String>,
}

/// stackfs in direct mode with `args`.
pub struct Direct {
    pub name: String,
    pub description: String,
    pub args: Vec<String>,
    pub fusebox_bin: PathBuf,
    pub suite: String,
}

impl Subject for Direct {
    fn info(&self) -> SubjectInfo {
        SubjectInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            is_fusebox: true,
            ..Default::default()
        }
    }

    /// A trial run: the preload library must be found, and the
    /// interception asked for must be available here (rewriting needs
    /// root).
    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        let at = workdir.join("direct-probe");
        let out = Command::new(&self.fusebox_bin)
            .arg("run")
            .args(&self.args)
            .args(["--fs", "nullfs", "--at"])
            .arg(&at)
            .args(["--", "true"])
            .output()
            .with_context(|| format!("running {}", self.fusebox_bin.display()))?;
        if !out.status.success() {
            bail!(
                "fusebox run --fs cannot run here: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        Ok(Mounted::direct(
            mnt,
            DirectLaunch {
                fusebox_bin: self.fusebox_bin.clone(),
                suite: self.suite.clone(),
                spec: format!("stackfs:{}", backing.display()),
                args: self.args.clone(),
            },
        ))
    }
}

/// native, stackfs through the kernel over both transports, and direct
/// mode: by rewriting (the default), without the metadata cache (the
/// measurement its default rests on) and by syscall user dispatch alone
/// (what a user without root gets).
pub fn subjects(fusebox_bin: &Path, suite: &str) -> Vec<Box<dyn Subject>> {
    let mut v: Vec<Box<dyn Subject>> = vec![Box::new(Native)];
    for (name, desc, transport) in [
        (
            "fusebox",
            "fusebox stackfs through the kernel, classic /dev/fuse",
            "classic",
        ),
        (
            "fusebox-uring",
            "fusebox stackfs through the kernel, FUSE-over-io_uring",
            "uring",
        ),
    ] {
        v.push(Box::new(crate::subject::Fusebox {
            name: name.into(),
            description: desc.into(),
            matches: None,
            fs: "stackfs".into(),
            args: ["--transport", transport, "-o", "allow_other"]
                .map(String::from)
                .to_vec(),
            takes_source: true,
            needs_uring: transport == "uring",
            binary: fusebox_bin.to_path_buf(),
            baseline: false,
        }));
    }
    for (name, desc, args) in [
        (
            "direct",
            "fusebox stackfs in direct mode: served inside the workload's process, call sites rewritten (the defaults)",
            &[][..],
        ),
        (
            "direct-nocache",
            "the same without the metadata cache (--cache-entries 0)",
            &["--cache-entries", "0"][..],
        ),
        (
            "direct-dispatch",
            "the same with syscall user dispatch catching every call, no rewriting (--intercept dispatch)",
            &["--intercept", "dispatch"][..],
        ),
    ] {
        v.push(Box::new(Direct {
            name: name.into(),
            description: desc.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            fusebox_bin: fusebox_bin.to_path_buf(),
            suite: suite.into(),
        }));
    }
    v
}

/// Run workload `name` of `suite` once in `dir` inside a direct-mode
/// process (`launch`), its set-up first.
pub fn run(launch: &DirectLaunch, name: &str, dir: &Path) -> Result<Sample> {
    let out = Command::new(&launch.fusebox_bin)
        .arg("run")
        .args(&launch.args)
        .arg("--fs")
        .arg(&launch.spec)
        .arg("--at")
        .arg(dir)
        .arg("--")
        .arg(&launch.fusebox_bin)
        .args([
            "bench-worker",
            "--suite",
            &launch.suite,
            "--workload",
            name,
            "--dir",
        ])
        .arg(dir)
        .output()
        .context("starting the direct-mode worker")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "direct-mode worker for {name} failed ({}): {}{}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    parse_sample(stdout.lines().last().unwrap_or_default())
        .with_context(|| format!("reading the worker's sample from {stdout:?}"))
}

const SAMPLE_PREFIX: &str = "sample";

fn format_sample(s: &Sample) -> String {
    let ops = s.ops.map_or("-".to_string(), |o| o.to_string());
    format!("{SAMPLE_PREFIX} {} {} {ops}", s.value, s.workload_cpu_s)
}

fn parse_sample(line: &str) -> Result<Sample> {
    let f: Vec<&str> = line.split_whitespace().collect();
    match f.as_slice() {
        [SAMPLE_PREFIX, value, cpu, ops] => Ok(Sample {
            value: value.parse()?,
            workload_cpu_s: cpu.parse()?,
            ops: if *ops == "-" {
                None
            } else {
                Some(ops.parse()?)
            },
        }),
        _ => bail!("not a sample line: {line:?}"),
    }
}

/// `fusebox bench-worker`: inside the direct-mode process, the workload's
/// set-up, then the workload; the sample goes to stdout.
pub fn worker(suite: &str, name: &str, dir: &Path) -> Result<()> {
    let suite = crate::workload::suite(suite).with_context(|| format!("no suite {suite}"))?;
    let w = suite
        .workloads
        .iter()
        .find(|w| w.name == name)
        .with_context(|| format!("no workload {name} in suite {}", suite.name))?;
    engine::populate(w, dir).with_context(|| format!("populating {}", dir.display()))?;
    let sample = engine::run(w, dir)?;
    println!("{}", format_sample(&sample));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_cross_the_process_boundary_unchanged() {
        for s in [
            Sample {
                value: 12345.678,
                workload_cpu_s: 0.25,
                ops: Some(10000.0),
            },
            Sample {
                value: 1.5,
                workload_cpu_s: 0.0,
                ops: None,
            },
        ] {
            let back = parse_sample(&format_sample(&s)).unwrap();
            assert_eq!(
                (back.value, back.workload_cpu_s, back.ops),
                (s.value, s.workload_cpu_s, s.ops)
            );
        }
        assert!(parse_sample("Error: something").is_err());
    }
}
