//! The ledger: what the kernel holds of a filesystem, kept where a crash
//! cannot take it. The dispatcher tells it every node id the kernel is
//! given (a lookup reference) or gives back (FORGET), and every handle
//! opened or released; it keeps them in the state file with the
//! filesystem's own key for each node, so that the next server can find
//! every node and reopen every handle the kernel still uses.
//!
//! Entries are recorded before the reply that hands them to the kernel
//! leaves: a crash in between leaves a reference the kernel never got (a
//! node kept until unmount), never one it holds that the ledger lacks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use dashmap::mapref::entry::Entry as MapEntry;
use dashmap::DashMap;

use super::state::{HandleRecord, StateFile, MAX_KEY};
pub use crate::fs::recoverable::KeyChanges;
use crate::fs::recoverable::Rekey;
use crate::protocol::references::{Change, ReferenceBook};
use crate::types::NodeId;

type KeyFn = dyn Fn(NodeId) -> Option<Vec<u8>> + Send + Sync;

/// Slots of one table: freed ones are reused before new ones are taken.
pub(crate) struct Slots {
    free: Mutex<Vec<usize>>,
    next: AtomicUsize,
    cap: usize,
}

impl Slots {
    pub(crate) fn new(cap: usize) -> Slots {
        Slots {
            free: Mutex::new(Vec::new()),
            next: AtomicUsize::new(0),
            cap,
        }
    }

    pub(crate) fn take(&self) -> Option<usize> {
        if let Some(s) = self
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
        {
            return Some(s);
        }
        let s = self.next.fetch_add(1, Ordering::Relaxed);
        (s < self.cap).then_some(s)
    }

    pub(crate) fn give_back(&self, slot: usize) {
        self.free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(slot);
    }

    /// After a restore: `used` are taken, everything below the highest of
    /// them is free.
    pub(crate) fn rebuild(&self, used: &[usize]) {
        let top = used.iter().max().map_or(0, |m| m + 1);
        let mut taken = vec![false; top];
        for &u in used {
            taken[u] = true;
        }
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        *free = (0..top).rev().filter(|&s| !taken[s]).collect();
        self.next.store(top, Ordering::Relaxed);
    }
}

/// What the kernel holds of the filesystem, recorded in the state file as
/// it changes: each node with its lookup count and key, and each open
/// handle. A new server restores from it.
pub struct Ledger {
    state: Arc<StateFile>,
    key_of: Box<KeyFn>,
    nodes: DashMap<u64, usize>,
    node_slots: Slots,
    handles: DashMap<u64, usize>,
    handle_slots: Slots,
    pub(crate) journal_slots: Slots,
    full_warned: AtomicBool,
    /// Slot -> node id as restored (for `catch_up`).
    by_slot: Mutex<Vec<u64>>,
}

/// What `catch_up` found changed.
#[derive(Default)]
pub struct Catchup {
    /// Nodes the kernel no longer holds.
    pub gone: Vec<NodeId>,
    /// Nodes new or with another count: (id, key, nlookup).
    pub now: Vec<(NodeId, Vec<u8>, u64)>,
}

/// What a restore finds: the nodes the kernel still holds and the handles
/// still open.
pub struct Restored {
    /// Each node the kernel holds: its id, its key, its lookup count.
    pub nodes: Vec<(NodeId, Vec<u8>, u64)>,
    /// Each handle still open.
    pub handles: Vec<HandleRecord>,
}

impl Ledger {
    /// What a filesystem whose keys move reports changes through.
    pub(crate) fn key_changes(self: &Arc<Self>) -> KeyChanges {
        let weak: Weak<dyn Rekey> = Arc::downgrade(self) as Weak<dyn Rekey>;
        KeyChanges::new(weak)
    }
}

impl Rekey for Ledger {
    fn rekey(&self, node: NodeId) {
        Ledger::rekey(self, node);
    }
}

impl Ledger {
    /// `key_of` gives the filesystem's identity of a node (what it needs to
    /// find it again), or None if it cannot be found again.
    pub fn new(
        state: Arc<StateFile>,
        key_of: impl Fn(NodeId) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Ledger {
        let cap = state.capacity();
        Ledger {
            state,
            key_of: Box::new(key_of),
            nodes: DashMap::new(),
            node_slots: Slots::new(cap.nodes),
            handles: DashMap::new(),
            handle_slots: Slots::new(cap.handles),
            journal_slots: Slots::new(cap.journal),
            full_warned: AtomicBool::new(false),
            by_slot: Mutex::new(Vec::new()),
        }
    }

    /// The state file the ledger writes.
    pub fn state(&self) -> &Arc<StateFile> {
        &self.state
    }

    pub(crate) fn full(&self, what: &str) {
        if !self.full_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                what,
                "the recovery state file is full: what is opened from now on will not survive a crash"
            );
        }
    }

    /// The kernel was handed one more reference to `node`.
    pub fn looked_up(&self, node: u64) {
        if node == 0 || node == NodeId::ROOT.0 {
            return;
        }
        match self.nodes.entry(node) {
            MapEntry::Occupied(o) => {
                self.state.node_add(*o.get(), 1);
            }
            MapEntry::Vacant(v) => {
                let Some(key) = (self.key_of)(NodeId(node)) else {
                    tracing::debug!(node, "filesystem gave no recovery key for a node");
                    return;
                };
                if key.len() > MAX_KEY {
                    tracing::warn!(
                        node,
                        len = key.len(),
                        "recovery key too long; node will not survive a crash"
                    );
                    return;
                }
                let Some(slot) = self.node_slots.take() else {
                    self.full("nodes");
                    return;
                };
                self.state.node_put(slot, node, &key, 1);
                v.insert(slot);
            }
        }
    }

    /// `node`'s key changed (see [`KeyChanges`]): ask the filesystem again.
    /// Its key is read under the node's map entry, so a lookup or forget
    /// of the same node waits, and the newest key is the one kept.
    pub fn rekey(&self, node: NodeId) {
        let Some(slot) = self.nodes.get_mut(&node.0) else {
            return;
        };
        match (self.key_of)(node).filter(|k| k.len() <= MAX_KEY) {
            Some(key) => self.state.node_set_key(*slot, &key),
            // No key it could be found by any more: none at all, so a new
            // server does not restore it as whatever the old key now names.
            None => self.state.node_set_key(*slot, &[]),
        }
    }

    /// The kernel gave back `n` references to `node` (FORGET).
    pub fn forgot(&self, node: u64, n: u64) {
        let Some(slot) = self.nodes.get(&node).map(|s| *s) else {
            return;
        };
        let left = self.state.node_add(slot, -(n.min(i64::MAX as u64) as i64));
        if left == 0 {
            // Under the shard lock a lookup of the same node also takes:
            // a reference taken meanwhile keeps the node.
            let state = &self.state;
            if let Some((_, slot)) = self
                .nodes
                .remove_if(&node, |_, &slot| state.node_add(slot, 0) == 0)
            {
                self.state.node_clear(slot);
                self.node_slots.give_back(slot);
            }
        }
    }

    /// Record an open handle. A full state file is warned about once and
    /// the handle goes unrecorded (it cannot be restored).
    pub fn opened(&self, h: HandleRecord) {
        let Some(slot) = self.handle_slots.take() else {
            self.full("handles");
            return;
        };
        self.state.handle_put(slot, &h);
        if let Some(old) = self.handles.insert(h.fh, slot) {
            // A handle number reused while still recorded: the filesystem
            // gave out a number the kernel still holds, or one whose release
            // never came; keep the newest.
            self.state.handle_clear(old);
            self.handle_slots.give_back(old);
        }
    }

    /// Forget the handle `fh`: the kernel released it.
    pub fn released(&self, fh: u64) {
        if let Some((_, slot)) = self.handles.remove(&fh) {
            self.state.handle_clear(slot);
            self.handle_slots.give_back(slot);
        }
    }

    /// Read what an earlier generation recorded and take it over.
    pub fn restore(&self) -> Restored {
        let nodes = self.restore_nodes();
        Restored {
            nodes,
            handles: self.restore_handles(),
        }
    }

    /// The nodes part of `restore`; may run while the previous server
    /// still serves (an upgrade), `catch_up` then brings it up to date.
    pub fn restore_nodes(&self) -> Vec<(NodeId, Vec<u8>, u64)> {
        let nodes = self.state.nodes();
        let used: Vec<usize> = nodes.iter().map(|n| n.0).collect();
        self.node_slots.rebuild(&used);
        let mut by_slot = self.by_slot.lock().unwrap_or_else(PoisonError::into_inner);
        by_slot.clear();
        for (slot, id, _, _) in &nodes {
            self.nodes.insert(*id, *slot);
            if by_slot.len() <= *slot {
                by_slot.resize(slot + 1, 0);
            }
            by_slot[*slot] = *id;
        }
        nodes
            .into_iter()
            .map(|(_, id, key, n)| (NodeId(id), key, n))
            .collect()
    }

    /// After `restore_nodes` from a state the previous server went on
    /// changing: the slots changed since the sequence was `seen`, applied
    /// to the ledger, as what the filesystem must drop and (re)restore.
    pub fn catch_up(&self, seen: u64) -> Catchup {
        let changed = self.state.node_changes_since(seen);
        let mut by_slot = self.by_slot.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Catchup::default();
        for (slot, id, key, n) in changed {
            if by_slot.len() <= slot {
                by_slot.resize(slot + 1, 0);
            }
            let was = by_slot[slot];
            if was != 0 && was != id {
                // Only if no other slot took it over meanwhile.
                if self.nodes.remove_if(&was, |_, s| *s == slot).is_some() {
                    out.gone.push(NodeId(was));
                }
            }
            by_slot[slot] = id;
            if id != 0 {
                self.nodes.insert(id, slot);
                out.now.push((NodeId(id), key, n));
            }
        }
        let used: Vec<usize> = by_slot
            .iter()
            .enumerate()
            .filter(|(_, id)| **id != 0)
            .map(|(s, _)| s)
            .collect();
        self.node_slots.rebuild(&used);
        out
    }

    /// The handles and journal part of `restore` (after the previous
    /// server stopped).
    pub fn restore_handles(&self) -> Vec<HandleRecord> {
        let handles = self.state.handles();
        let used: Vec<usize> = handles.iter().map(|h| h.0).collect();
        self.handle_slots.rebuild(&used);
        for (slot, h) in &handles {
            self.handles.insert(h.fh, *slot);
        }
        // Journal records of the dead server stay until their requests come
        // back and are answered from them.
        self.journal_slots.rebuild(&self.state.journal_used());
        handles.into_iter().map(|(_, h)| h).collect()
    }

    /// The open(2) flags a recorded handle was opened with.
    pub fn handle_flags(&self, fh: u64) -> Option<u32> {
        let slot = *self.handles.get(&fh)?;
        Some(self.state.handle_flags(slot))
    }
}

impl ReferenceBook for Ledger {
    fn change(&self, change: Change) {
        match change {
            Change::LookedUp { node } => self.looked_up(node.0),
            Change::Forgot { node, count } => self.forgot(node.0, count),
            Change::Opened {
                fh,
                node,
                flags,
                backing_id,
                dir,
            } => self.opened(HandleRecord {
                fh: fh.0,
                node: node.0,
                flags,
                backing_id,
                dir,
            }),
            Change::Released { fh, .. } => self.released(fh.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recovery::state::Capacity;

    fn key(node: NodeId) -> Option<Vec<u8>> {
        (node.0 != 99).then(|| format!("key-{}", node.0).into_bytes())
    }

    fn table(cap: Capacity) -> (Ledger, Arc<StateFile>) {
        let state = Arc::new(StateFile::create(cap).unwrap());
        (Ledger::new(state.clone(), key), state)
    }

    /// What a later generation sees: the same memfd, mapped again.
    fn reopen(state: &StateFile) -> Ledger {
        let fd = state.fd().try_clone().unwrap();
        Ledger::new(Arc::new(StateFile::open(fd).unwrap()), key)
    }

    fn handle(fh: u64, node: u64) -> HandleRecord {
        HandleRecord {
            fh,
            node,
            flags: libc::O_RDWR as u32,
            backing_id: 0,
            dir: false,
        }
    }

    #[test]
    fn references_and_handles_survive_into_a_new_mapping() {
        let (l, state) = table(Capacity {
            nodes: 64,
            handles: 16,
            journal: 8,
        });
        for _ in 0..3 {
            l.looked_up(5);
        }
        l.looked_up(6);
        l.looked_up(7);
        l.looked_up(NodeId::ROOT.0); // the root is never counted
        l.looked_up(99); // no key: not recoverable, not recorded
        l.forgot(5, 1);
        l.forgot(6, 1); // gone
        l.opened(handle(10, 5));
        l.opened(handle(11, 7));
        l.released(10);

        let next = reopen(&state);
        let r = next.restore();
        let mut nodes: Vec<_> = r
            .nodes
            .iter()
            .map(|(n, k, c)| (n.0, k.clone(), *c))
            .collect();
        nodes.sort();
        assert_eq!(
            nodes,
            vec![(5, b"key-5".to_vec(), 2), (7, b"key-7".to_vec(), 1)]
        );
        assert_eq!(r.handles, vec![handle(11, 7)]);
        assert_eq!(state.totals().nodes, 2);

        // The new generation goes on from there: slots freed before are
        // reused, counts continue.
        next.forgot(5, 2);
        next.looked_up(8);
        next.released(11);
        let r = reopen(&state).restore();
        let ids: Vec<_> = r.nodes.iter().map(|(n, _, _)| n.0).collect();
        assert_eq!(ids.len(), 2, "{ids:?}");
        assert!(ids.contains(&7) && ids.contains(&8));
        assert!(r.handles.is_empty());
    }

    #[test]
    fn journal_records_are_found_by_unique_in_a_new_mapping() {
        use crate::recovery::state::Before;
        let (l, state) = table(Capacity {
            nodes: 4,
            handles: 4,
            journal: 4,
        });
        let a = l
            .journal_begin(100, fusebox_abi::Opcode::UNLINK, Before::Present { ino: 7 })
            .unwrap();
        let b = l
            .journal_begin(101, fusebox_abi::Opcode::MKDIR, Before::Absent)
            .unwrap();
        l.journal_done(b, &Err(crate::Errno::EEXIST));
        let c = l
            .journal_begin(102, fusebox_abi::Opcode::RMDIR, Before::Unknown)
            .unwrap();
        l.journal_release(c);
        let next = reopen(&state);
        next.restore();
        let s = next.state();
        let ra = s.journal_find(100).unwrap();
        assert_eq!(
            (ra.slot, ra.before, ra.done),
            (a, Before::Present { ino: 7 }, None)
        );
        let rb = s.journal_find(101).unwrap();
        assert_eq!(rb.done, Some((libc::EEXIST, vec![])));
        assert!(s.journal_find(102).is_none());
        // The two records still held are not handed out again.
        let d = next
            .journal_begin(103, fusebox_abi::Opcode::LINK, Before::Absent)
            .unwrap();
        assert!(d != a && d != b);
    }

    #[test]
    fn a_full_table_keeps_what_it_has() {
        let (l, state) = table(Capacity {
            nodes: 2,
            handles: 1,
            journal: 1,
        });
        for n in 2..6 {
            l.looked_up(n);
        }
        l.opened(handle(1, 2));
        l.opened(handle(2, 3));
        let r = reopen(&state).restore();
        assert_eq!(r.nodes.len(), 2);
        assert_eq!(r.handles.len(), 1);
    }
}
