//! Where the devices fusebox serves are written down, so `fusebox blk
//! list`, `destroy`, `replace` and `stats` find them by name or by
//! device: one JSON file per device under /run/fusebox/blk, and a stable
//! name, /dev/fusebox/NAME, linking to the loop device.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const DIR: &str = "/run/fusebox/blk";
pub const LINK_DIR: &str = "/dev/fusebox";

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    pub name: String,
    /// /dev/loopN.
    pub device: PathBuf,
    pub loop_number: u32,
    /// The one-file FUSE mount the loop device reads and writes.
    pub mountpoint: PathBuf,
    /// The process holding the mount and the loop device (the supervisor,
    /// or the only process without recovery).
    pub pid: u32,
    /// When that process started (clock ticks after boot, /proc/PID/stat):
    /// with the pid, names the process even after the pid is reused.
    #[serde(default)]
    pub pid_start: u64,
    /// What serves it, e.g. "ram" or "file:/srv/disk.img".
    pub driver: String,
    pub size: u64,
    pub logical_block_size: u32,
    pub read_only: bool,
    /// Served under a supervisor (replaceable, recovers from a crash).
    pub supervised: bool,
    pub direct_io: bool,
    pub transport: String,
}

/// A device name: what /dev/fusebox/NAME and the registry file are called.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "bad device name {name:?}: letters, digits, '-', '_' and '.', at most 64, not starting with '.'"
        ))
    }
}

pub fn mountpoint_for(name: &str) -> PathBuf {
    Path::new(DIR).join(format!("{name}.mnt"))
}

pub fn link_for(name: &str) -> PathBuf {
    Path::new(LINK_DIR).join(name)
}

fn record_path(name: &str) -> PathBuf {
    Path::new(DIR).join(format!("{name}.json"))
}

impl Record {
    /// Write the record and the /dev/fusebox link.
    pub fn publish(&self) -> io::Result<()> {
        std::fs::create_dir_all(DIR)?;
        let tmp = Path::new(DIR).join(format!(".{}.json.tmp", self.name));
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, record_path(&self.name))?;
        std::fs::create_dir_all(LINK_DIR)?;
        let link = link_for(&self.name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&self.device, &link)
    }

    /// Remove the record and the link (if it still points at this device).
    pub fn withdraw(&self) {
        let link = link_for(&self.name);
        if std::fs::read_link(&link).is_ok_and(|t| t == self.device) {
            let _ = std::fs::remove_file(&link);
        }
        let _ = std::fs::remove_file(record_path(&self.name));
    }

    /// Whether the process serving it is alive: that pid, started when
    /// it did (a reused pid is another process, never signalled).
    pub fn alive(&self) -> bool {
        process_start(self.pid).is_some_and(|t| self.pid_start == 0 || t == self.pid_start)
    }
}

/// When process `pid` started, in clock ticks after boot (field 22 of
/// /proc/PID/stat); None if there is no such process or it is a zombie.
pub fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: count
    // from the last ')'.
    let mut rest = stat.rsplit_once(')')?.1.split_whitespace();
    if rest.next()? == "Z" {
        return None;
    }
    rest.nth(18)?.parse().ok()
}

pub fn list() -> Vec<Record> {
    let Ok(dir) = std::fs::read_dir(DIR) else {
        return Vec::new();
    };
    let mut v: Vec<Record> = dir
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

pub fn get(name: &str) -> Option<Record> {
    serde_json::from_slice(&std::fs::read(record_path(name)).ok()?).ok()
}

/// The device named `what`: a name, /dev/fusebox/NAME, /dev/loopN, or
/// its mountpoint.
pub fn find(what: &str) -> Option<Record> {
    if let Some(r) = get(what) {
        return Some(r);
    }
    let p = Path::new(what);
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    list().into_iter().find(|r| {
        r.device == real || r.mountpoint == real || link_for(&r.name) == p || r.device == p
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_record_with_another_start_is_not() {
        let me = std::process::id();
        let start = process_start(me).expect("our own /proc entry");
        let mut r = Record {
            name: "x".into(),
            device: "/dev/loop9".into(),
            loop_number: 9,
            mountpoint: "/nonexistent".into(),
            pid: me,
            pid_start: start,
            driver: "ram".into(),
            size: 4096,
            logical_block_size: 512,
            read_only: false,
            supervised: true,
            direct_io: true,
            transport: "classic".into(),
        };
        assert!(r.alive());
        // The same pid, started at another time: a reused pid.
        r.pid_start = start + 1;
        assert!(!r.alive());
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("data-1.img_2").is_ok());
        for bad in ["", ".hidden", "a/b", "a b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }
}
