//! A small fsstress in the spirit of xfstests' (our own, model-checked):
//! each worker owns a directory of the mount and runs random namespace and
//! data operations in it, predicting every result from an in-memory model
//! of that directory. Any result the model did not predict (an error that
//! should not happen, a success that should have failed, data that differs)
//! is reported; at the end the model is compared with the directory as the
//! mount shows it and as the source shows it.
//!
//! The workers share nothing, so every outcome is determined, and a server
//! replaced under them must not change any of them.

use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// xorshift64*, reproducible from the seed printed on failure.
use fusebox_bench::Rng;

#[derive(Clone, Debug, PartialEq)]
enum Node {
    /// Contents are shared by hard links: the index into `files`.
    File(usize),
    Dir,
    Symlink(String),
}

struct Model {
    /// Relative path ("d1/f3") -> node; the worker's directory itself is "".
    tree: BTreeMap<String, Node>,
    files: Vec<Vec<u8>>,
}

impl Model {
    fn parent_is_dir(&self, p: &str) -> bool {
        match p.rsplit_once('/') {
            None => true,
            Some((dir, _)) => self.tree.get(dir) == Some(&Node::Dir),
        }
    }
    /// What making a new entry at `p` gives: EEXIST over anything,
    /// ENOENT without its directory.
    fn want_new(&self, p: &str) -> Result<(), ErrorKind> {
        if self.tree.contains_key(p) {
            Err(ErrorKind::AlreadyExists)
        } else if !self.parent_is_dir(p) {
            Err(ErrorKind::NotFound)
        } else {
            Ok(())
        }
    }
    fn children(&self, dir: &str) -> usize {
        let prefix = format!("{dir}/");
        self.tree.keys().filter(|k| k.starts_with(&prefix)).count()
    }
    fn file(&self, p: &str) -> Option<usize> {
        match self.tree.get(p) {
            Some(Node::File(i)) => Some(*i),
            _ => None,
        }
    }
}

/// Names come from a small set so that operations often meet existing
/// entries (EEXIST, replacement, ENOTEMPTY paths get exercised).
fn random_path(rng: &mut Rng) -> String {
    let name = format!("n{}", rng.below(6));
    match rng.below(3) {
        0 => name,
        _ => format!("d{}/{name}", rng.below(3)),
    }
}

fn random_dir(rng: &mut Rng) -> String {
    format!("d{}", rng.below(3))
}

fn bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn expect(what: &str, got: std::io::Result<()>, want: Result<(), ErrorKind>) -> Result<(), String> {
    match (&got, want) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Err(k)) if e.kind() == k => Ok(()),
        _ => Err(format!("{what}: got {got:?}, the model expected {want:?}")),
    }
}

/// One worker: random operations in `dir` until `stop`; returns the
/// operations run, or the first surprise.
pub fn worker(dir: PathBuf, seed: u64, stop: Arc<AtomicBool>) -> Result<u64, String> {
    std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
    let mut rng = Rng(seed | 1);
    let mut m = Model {
        tree: BTreeMap::new(),
        files: Vec::new(),
    };
    let at = |p: &str| dir.join(p);
    let mut ops = 0u64;
    while !stop.load(Ordering::Acquire) {
        ops += 1;
        let op = rng.below(12);
        let p = random_path(&mut rng);
        let r = match op {
            // Exclusive create with some data.
            0 => {
                let len = rng.below(9000) as usize;
                let data = bytes(&mut rng, len);
                let want = m.want_new(&p);
                let got = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(at(&p))
                    .and_then(|mut f| f.write_all(&data));
                if want.is_ok() && got.is_ok() {
                    m.files.push(data);
                    m.tree.insert(p.clone(), Node::File(m.files.len() - 1));
                }
                expect(&format!("create {p}"), got, want)
            }
            // Write at an offset (possibly past the end: a hole).
            1 | 2 => {
                let off = rng.below(12000) as usize;
                let len = 1 + rng.below(5000) as usize;
                let data = bytes(&mut rng, len);
                let append = op == 2;
                match m.file(&p) {
                    Some(i) => {
                        let got = (|| {
                            let mut f = std::fs::OpenOptions::new()
                                .write(true)
                                .append(append)
                                .open(at(&p))?;
                            if !append {
                                f.seek(SeekFrom::Start(off as u64))?;
                            }
                            f.write_all(&data)
                        })();
                        if got.is_ok() {
                            let c = &mut m.files[i];
                            let start = if append { c.len() } else { off };
                            if c.len() < start + data.len() {
                                c.resize(start + data.len(), 0);
                            }
                            c[start..start + data.len()].copy_from_slice(&data);
                        }
                        expect(&format!("write {p}"), got, Ok(()))
                    }
                    None => Ok(()),
                }
            }
            // Truncate.
            3 => match m.file(&p) {
                Some(i) => {
                    let len = rng.below(10000) as usize;
                    let got = std::fs::OpenOptions::new()
                        .write(true)
                        .open(at(&p))
                        .and_then(|f| f.set_len(len as u64));
                    if got.is_ok() {
                        m.files[i].resize(len, 0);
                    }
                    expect(&format!("truncate {p}"), got, Ok(()))
                }
                None => Ok(()),
            },
            // Rename a file or symlink onto a file, symlink or nothing.
            4 => {
                let to = random_path(&mut rng);
                match (m.tree.get(&p).cloned(), m.tree.get(&to).cloned()) {
                    (Some(n @ (Node::File(_) | Node::Symlink(_))), dst)
                        if m.parent_is_dir(&to) && dst != Some(Node::Dir) =>
                    {
                        let got = std::fs::rename(at(&p), at(&to));
                        // Two names of one file: rename(2) does nothing.
                        let same =
                            matches!((&n, &dst), (Node::File(a), Some(Node::File(b))) if a == b);
                        if got.is_ok() && !same && p != to {
                            m.tree.remove(&p);
                            m.tree.insert(to.clone(), n);
                        }
                        expect(&format!("rename {p} -> {to}"), got, Ok(()))
                    }
                    _ => Ok(()),
                }
            }
            // Rename a directory (and all below it) to a free top-level name.
            5 => {
                let from = random_dir(&mut rng);
                let to = format!("d{}", rng.below(3));
                if m.tree.get(&from) == Some(&Node::Dir) && !m.tree.contains_key(&to) {
                    let got = std::fs::rename(at(&from), at(&to));
                    if got.is_ok() {
                        let moved: Vec<(String, Node)> = m
                            .tree
                            .iter()
                            .filter(|(k, _)| *k == &from || k.starts_with(&format!("{from}/")))
                            .map(|(k, v)| (k.clone(), v.clone()))
                            .collect();
                        for (k, v) in moved {
                            m.tree.remove(&k);
                            m.tree.insert(format!("{to}{}", &k[from.len()..]), v);
                        }
                    }
                    expect(&format!("rename dir {from} -> {to}"), got, Ok(()))
                } else {
                    Ok(())
                }
            }
            // Hard link.
            6 => {
                let to = random_path(&mut rng);
                match m.file(&p) {
                    Some(i) => {
                        let want = m.want_new(&to);
                        let got = std::fs::hard_link(at(&p), at(&to));
                        if got.is_ok() && want.is_ok() {
                            m.tree.insert(to.clone(), Node::File(i));
                        }
                        expect(&format!("link {p} -> {to}"), got, want)
                    }
                    None => Ok(()),
                }
            }
            // Unlink.
            7 => {
                let want = match m.tree.get(&p) {
                    Some(Node::File(_) | Node::Symlink(_)) => Ok(()),
                    Some(Node::Dir) => Err(ErrorKind::IsADirectory),
                    None => Err(ErrorKind::NotFound),
                };
                let got = std::fs::remove_file(at(&p));
                if got.is_ok() && want.is_ok() {
                    m.tree.remove(&p);
                }
                expect(&format!("unlink {p}"), got, want)
            }
            // mkdir / rmdir of a top-level directory.
            8 => {
                let d = random_dir(&mut rng);
                if m.tree.contains_key(&d) {
                    let want = match m.tree.get(&d) {
                        Some(Node::Dir) if m.children(&d) > 0 => Err(ErrorKind::DirectoryNotEmpty),
                        Some(Node::Dir) => Ok(()),
                        _ => Err(ErrorKind::NotADirectory),
                    };
                    let got = std::fs::remove_dir(at(&d));
                    if got.is_ok() && want.is_ok() {
                        m.tree.remove(&d);
                    }
                    expect(&format!("rmdir {d}"), got, want)
                } else {
                    let got = std::fs::create_dir(at(&d));
                    if got.is_ok() {
                        m.tree.insert(d.clone(), Node::Dir);
                    }
                    expect(&format!("mkdir {d}"), got, Ok(()))
                }
            }
            // Symlink.
            9 => {
                let target = format!("t{}", rng.below(100));
                let want = m.want_new(&p);
                let got = std::os::unix::fs::symlink(&target, at(&p));
                if got.is_ok() && want.is_ok() {
                    m.tree.insert(p.clone(), Node::Symlink(target));
                }
                expect(&format!("symlink {p}"), got, want)
            }
            // Read a file back.
            10 => match m.file(&p) {
                Some(i) => {
                    let mut got = Vec::new();
                    match std::fs::File::open(at(&p)).and_then(|mut f| f.read_to_end(&mut got)) {
                        Ok(_) if got == m.files[i] => Ok(()),
                        Ok(_) => Err(format!(
                            "read {p}: {} bytes differ from the model's {}",
                            got.len(),
                            m.files[i].len()
                        )),
                        Err(e) => Err(format!("read {p}: {e}")),
                    }
                }
                None => Ok(()),
            },
            // List a directory.
            _ => {
                let d = if rng.below(2) == 0 {
                    String::new()
                } else {
                    random_dir(&mut rng)
                };
                if d.is_empty() || m.tree.get(&d) == Some(&Node::Dir) {
                    compare_dir(&m, &dir, &d)
                } else {
                    Ok(())
                }
            }
        };
        r.map_err(|e| format!("seed {seed}, operation {ops}: {e}"))?;
    }
    check_all(&m, &dir).map_err(|e| format!("seed {seed}, at the end: {e}"))?;
    Ok(ops)
}

/// Everything the model holds, as the mount shows it, and nothing more.
fn check_all(m: &Model, root: &Path) -> Result<(), String> {
    compare_dir(m, root, "")?;
    for (p, node) in &m.tree {
        match node {
            Node::Dir => compare_dir(m, root, p)?,
            Node::File(i) => {
                let got = std::fs::read(root.join(p)).map_err(|e| format!("read {p}: {e}"))?;
                if got != m.files[*i] {
                    return Err(format!("{p}: contents differ from the model"));
                }
            }
            Node::Symlink(t) => {
                let got =
                    std::fs::read_link(root.join(p)).map_err(|e| format!("readlink {p}: {e}"))?;
                if got != Path::new(t) {
                    return Err(format!("{p}: link to {got:?}, the model has {t:?}"));
                }
            }
        }
    }
    Ok(())
}

/// The names `rel` (a directory of the model) lists, against the mount's.
fn compare_dir(m: &Model, root: &Path, rel: &str) -> Result<(), String> {
    let prefix = if rel.is_empty() {
        String::new()
    } else {
        format!("{rel}/")
    };
    let want: Vec<String> = m
        .tree
        .keys()
        .filter_map(|k| k.strip_prefix(&prefix))
        .filter(|rest| !rest.is_empty() && !rest.contains('/'))
        .map(String::from)
        .collect();
    let mut got: Vec<String> = std::fs::read_dir(root.join(rel))
        .and_then(|it| {
            it.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .map_err(|e| format!("readdir {rel:?}: {e}"))?;
    got.sort();
    if got != want {
        return Err(format!("readdir {rel:?}: {got:?}, the model has {want:?}"));
    }
    Ok(())
}

/// The same tree under `a` and `b` (the mount and its source): names,
/// types, modes, link counts, sizes, contents and link targets. Returns
/// how many entries were compared.
pub fn same_tree(a: &Path, b: &Path) -> Result<usize, String> {
    let mut n = 0;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let list = |root: &Path| -> Result<Vec<String>, String> {
            let mut v: Vec<String> = std::fs::read_dir(root.join(&rel))
                .and_then(|it| {
                    it.map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                        .collect()
                })
                .map_err(|e| format!("{}: {e}", root.join(&rel).display()))?;
            v.sort();
            Ok(v)
        };
        let (la, lb) = (list(a)?, list(b)?);
        if la != lb {
            return Err(format!("{}: {la:?} vs {lb:?}", rel.display()));
        }
        for name in la {
            n += 1;
            let (pa, pb) = (a.join(&rel).join(&name), b.join(&rel).join(&name));
            let (ma, mb) = (
                std::fs::symlink_metadata(&pa).map_err(|e| e.to_string())?,
                std::fs::symlink_metadata(&pb).map_err(|e| e.to_string())?,
            );
            if ma.mode() != mb.mode()
                || ma.nlink() != mb.nlink()
                || (ma.is_file() && ma.len() != mb.len())
            {
                return Err(format!(
                    "{}: mode {:o}/{:o} links {}/{} size {}/{}",
                    pa.display(),
                    ma.mode(),
                    mb.mode(),
                    ma.nlink(),
                    mb.nlink(),
                    ma.len(),
                    mb.len()
                ));
            }
            if ma.is_dir() {
                stack.push(rel.join(&name));
            } else if ma.is_file() {
                if std::fs::read(&pa).map_err(|e| e.to_string())?
                    != std::fs::read(&pb).map_err(|e| e.to_string())?
                {
                    return Err(format!("{}: contents differ", pa.display()));
                }
            } else if ma.file_type().is_symlink()
                && std::fs::read_link(&pa).ok() != std::fs::read_link(&pb).ok()
            {
                return Err(format!("{}: link targets differ", pa.display()));
            }
        }
    }
    Ok(n)
}
