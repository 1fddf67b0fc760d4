//! Remote owners as the mounting user sees them (sshfs's `idmap=`, `uid=`,
//! `gid=`), both ways: attributes coming in, chown going out.

use std::collections::HashMap;
use std::path::Path;

use crate::options::{IdMap, SftpOptions};

/// Maps ids between the server and this machine.
#[derive(Clone, Debug, Default)]
pub struct IdMapper {
    /// Remote id -> local id, and back.
    uid_in: HashMap<u32, u32>,
    uid_out: HashMap<u32, u32>,
    gid_in: HashMap<u32, u32>,
    gid_out: HashMap<u32, u32>,
    /// With idmap=file and nomap=error: an id with no line fails.
    strict: bool,
    /// uid=/gid=: every file shows these.
    force_uid: Option<u32>,
    force_gid: Option<u32>,
}

/// An id idmap=file has no line for (with nomap=error).
#[derive(Debug, thiserror::Error)]
#[error("{what} {id} has no mapping in the {what}file")]
pub struct Unmapped {
    pub what: &'static str,
    pub id: u32,
}

/// A uidfile/gidfile that cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("reading {path}: {why}")]
pub struct MapFileError {
    pub path: String,
    pub why: String,
}

impl IdMapper {
    /// Build from the options; `remote_ids` is the login user's (uid, gid)
    /// on the server (what idmap=user maps to the local user), `local` the
    /// mounting user's.
    pub fn new(
        o: &SftpOptions,
        remote_ids: Option<(u32, u32)>,
        local: (u32, u32),
    ) -> Result<IdMapper, MapFileError> {
        let mut m = IdMapper {
            force_uid: o.uid,
            force_gid: o.gid,
            ..IdMapper::default()
        };
        match &o.idmap {
            IdMap::None => {}
            IdMap::User => {
                if let Some((ru, rg)) = remote_ids {
                    m.pair_uid(ru, local.0);
                    m.pair_gid(rg, local.1);
                }
            }
            IdMap::File {
                uidfile,
                gidfile,
                ignore_missing,
            } => {
                m.strict = !ignore_missing;
                // Lines are `name:remote id`; the name is looked up here.
                if let Some(p) = uidfile {
                    for (name, remote) in read_map(p)? {
                        if let Some(local) = local_id(&name, "/etc/passwd") {
                            m.pair_uid(remote, local);
                        }
                    }
                }
                if let Some(p) = gidfile {
                    for (name, remote) in read_map(p)? {
                        if let Some(local) = local_id(&name, "/etc/group") {
                            m.pair_gid(remote, local);
                        }
                    }
                }
            }
        }
        Ok(m)
    }

    fn pair_uid(&mut self, remote: u32, local: u32) {
        self.uid_in.insert(remote, local);
        self.uid_out.insert(local, remote);
    }

    fn pair_gid(&mut self, remote: u32, local: u32) {
        self.gid_in.insert(remote, local);
        self.gid_out.insert(local, remote);
    }

    /// A remote (uid, gid) as shown here.
    pub fn incoming(&self, uid: u32, gid: u32) -> (u32, u32) {
        let u = self
            .force_uid
            .unwrap_or_else(|| *self.uid_in.get(&uid).unwrap_or(&uid));
        let g = self
            .force_gid
            .unwrap_or_else(|| *self.gid_in.get(&gid).unwrap_or(&gid));
        (u, g)
    }

    /// A local uid, as the server knows it (chown).
    pub fn outgoing_uid(&self, uid: u32) -> Result<u32, Unmapped> {
        match self.uid_out.get(&uid) {
            Some(r) => Ok(*r),
            None if self.strict => Err(Unmapped {
                what: "uid",
                id: uid,
            }),
            None => Ok(uid),
        }
    }

    pub fn outgoing_gid(&self, gid: u32) -> Result<u32, Unmapped> {
        match self.gid_out.get(&gid) {
            Some(r) => Ok(*r),
            None if self.strict => Err(Unmapped {
                what: "gid",
                id: gid,
            }),
            None => Ok(gid),
        }
    }
}

fn read_map(path: &Path) -> Result<Vec<(String, u32)>, MapFileError> {
    let err = |why: String| MapFileError {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let mut v = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, id) = line
            .split_once(':')
            .ok_or_else(|| err(format!("line {}: expected name:id", n + 1)))?;
        let id = id
            .trim()
            .parse()
            .map_err(|_| err(format!("line {}: {id:?} is not an id", n + 1)))?;
        v.push((name.trim().to_string(), id));
    }
    Ok(v)
}

/// The local id of `name` in a passwd- or group-format file.
fn local_id(name: &str, db: &str) -> Option<u32> {
    let text = std::fs::read_to_string(db).ok()?;
    text.lines().find_map(|l| {
        let mut f = l.split(':');
        (f.next()? == name).then_some(())?;
        f.next()?;
        f.next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idmap_user_maps_the_login_user_both_ways() {
        let o = SftpOptions {
            idmap: IdMap::User,
            ..SftpOptions::default()
        };
        let m = IdMapper::new(&o, Some((1001, 1002)), (500, 600)).unwrap();
        assert_eq!(m.incoming(1001, 1002), (500, 600));
        assert_eq!(m.incoming(7, 8), (7, 8));
        assert_eq!(m.outgoing_uid(500).unwrap(), 1001);
        assert_eq!(m.outgoing_gid(600).unwrap(), 1002);
        assert_eq!(m.outgoing_uid(9).unwrap(), 9);
    }

    #[test]
    fn uid_and_gid_options_win() {
        let o = SftpOptions {
            uid: Some(42),
            gid: Some(43),
            ..SftpOptions::default()
        };
        let m = IdMapper::new(&o, None, (0, 0)).unwrap();
        assert_eq!(m.incoming(1, 2), (42, 43));
    }

    #[test]
    fn idmap_file_reads_names_and_refuses_unmapped_ids() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("uids");
        std::fs::write(&f, "# remote ids\nroot:4000\n").unwrap();
        let o = SftpOptions {
            idmap: IdMap::File {
                uidfile: Some(f),
                gidfile: None,
                ignore_missing: false,
            },
            ..SftpOptions::default()
        };
        let m = IdMapper::new(&o, None, (0, 0)).unwrap();
        assert_eq!(m.incoming(4000, 5).0, 0);
        assert_eq!(m.outgoing_uid(0).unwrap(), 4000);
        assert!(m.outgoing_uid(12345).is_err());
    }
}
