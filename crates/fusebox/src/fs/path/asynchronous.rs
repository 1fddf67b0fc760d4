//! The path-level API with `async fn` methods: [`AsyncPathFilesystem`].
//! [`PathAdapter`] serves it at the inode level as an
//! [`AsyncFilesystem`], which [`AsyncAdapter`](crate::fs::AsyncAdapter)
//! runs: `AsyncAdapter::new(PathAdapter::new(fs))`. The node table is the
//! same as for [`PathFilesystem`], and is never locked across an `.await`.

use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;

use super::{
    dir_filler, is_dot_or_dotdot, plus_filler, unseen_release, without_attributes, PathAdapter,
    PathFilesystem, PlusFillerSend,
};
use crate::error::{Errno, FsResult};
use crate::fs::ops::*;
use crate::fs::AsyncFilesystem;
use crate::protocol::{Connection, DataOut, DirEntries, Notifier};
use crate::types::*;

/// A filesystem addressed by paths whose methods are `async fn`s: the
/// methods, paths and rules of [`PathFilesystem`] (read its documentation),
/// answered when the future completes. Serve it with
/// `AsyncAdapter::new(PathAdapter::new(fs))`.
#[allow(unused_variables)]
pub trait AsyncPathFilesystem: Send + Sync + 'static {
    /// As [`PathFilesystem::init`]; synchronous, it runs before the first
    /// request.
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        Ok(())
    }

    /// As [`PathFilesystem::destroy`].
    fn destroy(&self) {}

    /// See [`crate::fs::Filesystem::counters`].
    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        Vec::new()
    }

    /// As [`PathFilesystem::timeouts`].
    fn timeouts(&self) -> Timeouts {
        Timeouts::default()
    }

    /// Attributes of `path`; also the lookup.
    fn getattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: Option<FileHandle>,
    ) -> impl Future<Output = FsResult<FileAttr>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::setattr`].
    fn setattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        attr: &SetAttr,
    ) -> impl Future<Output = FsResult<FileAttr>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::readlink`].
    fn readlink(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::symlink`].
    fn symlink(
        &self,
        ctx: &Ctx<'_>,
        target: &OsStr,
        link_path: &Path,
    ) -> impl Future<Output = FsResult<FileAttr>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::mknod`].
    fn mknod(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Mknod,
    ) -> impl Future<Output = FsResult<FileAttr>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::mkdir`].
    fn mkdir(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Mkdir,
    ) -> impl Future<Output = FsResult<FileAttr>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::unlink`].
    fn unlink(&self, ctx: &Ctx<'_>, path: &Path) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::rmdir`].
    fn rmdir(&self, ctx: &Ctx<'_>, path: &Path) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::rename`].
    fn rename(
        &self,
        ctx: &Ctx<'_>,
        from: &Path,
        to: &Path,
        flags: u32,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::link`].
    fn link(
        &self,
        ctx: &Ctx<'_>,
        existing: &Path,
        new: &Path,
    ) -> impl Future<Output = FsResult<FileAttr>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::open`].
    fn open(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Open,
    ) -> impl Future<Output = FsResult<Opened>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::read`].
    fn read(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Read,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::write`].
    fn write(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Write<'_>,
    ) -> impl Future<Output = FsResult<u32>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::flush`].
    fn flush(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        lock_owner: u64,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::release`].
    fn release(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Release,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Ok(()) }
    }

    /// As [`PathFilesystem::fsync`].
    fn fsync(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        datasync: bool,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::opendir`].
    fn opendir(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Open,
    ) -> impl Future<Output = FsResult<Opened>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// Call `filler(name, kind, ino, next_offset)` per entry, as for
    /// [`PathFilesystem::readdir`].
    fn readdir(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut (dyn FnMut(&OsStr, FileType, u64, u64) -> bool + Send),
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// Call `filler(name, kind, ino, next_offset, attributes)` per entry,
    /// as for [`PathFilesystem::readdirplus`]; the default lists through
    /// `readdir`, without attributes.
    fn readdirplus(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut PlusFillerSend<'_>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async move {
            let mut plain = |name: &OsStr, kind, ino, next| filler(name, kind, ino, next, None);
            self.readdir(ctx, path, fh, offset, &mut plain).await
        }
    }

    /// As [`PathFilesystem::lookups_in_readdirplus`].
    fn lookups_in_readdirplus(&self) -> bool {
        true
    }

    /// As [`PathFilesystem::releasedir`].
    fn releasedir(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Release,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Ok(()) }
    }

    /// As [`PathFilesystem::fsyncdir`].
    fn fsyncdir(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        datasync: bool,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::statfs`].
    fn statfs(&self, ctx: &Ctx<'_>, path: &Path) -> impl Future<Output = FsResult<Statfs>> + Send {
        async {
            Ok(Statfs {
                namelen: 255,
                bsize: 512,
                frsize: 512,
                ..Default::default()
            })
        }
    }

    /// As [`PathFilesystem::setxattr`].
    fn setxattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Setxattr<'_>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::getxattr`].
    fn getxattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        name: &OsStr,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::listxattr`].
    fn listxattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        out: &mut DataOut<'static>,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::removexattr`].
    fn removexattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        name: &OsStr,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::access`].
    fn access(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        mask: i32,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::create`].
    fn create(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Create,
    ) -> impl Future<Output = FsResult<(FileAttr, Opened)>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::getlk`].
    fn getlk(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        lock: &Lock,
    ) -> impl Future<Output = FsResult<LockInfo>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::setlk`].
    fn setlk(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        lock: &Lock,
        sleep: bool,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::fallocate`].
    fn fallocate(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Fallocate,
    ) -> impl Future<Output = FsResult<()>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::lseek`].
    fn lseek(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Lseek,
    ) -> impl Future<Output = FsResult<u64>> + Send {
        async { Err(Errno::ENOSYS) }
    }

    /// As [`PathFilesystem::copy_file_range`].
    fn copy_file_range(
        &self,
        ctx: &Ctx<'_>,
        path_in: &Path,
        path_out: &Path,
        args: &CopyFileRange,
    ) -> impl Future<Output = FsResult<u64>> + Send {
        async { Err(Errno::ENOSYS) }
    }
}

/// The inode-level async API over the path table, as the synchronous
/// `Filesystem for PathAdapter` does it: paths are resolved and results
/// recorded with the table locked briefly, the filesystem is awaited with
/// it unlocked.
impl<P: AsyncPathFilesystem> AsyncFilesystem for PathAdapter<P> {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        self.fs.init(conn, notifier)?;
        self.negotiated(conn);
        Ok(())
    }

    fn destroy(&self) {
        self.fs.destroy()
    }

    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        self.fs.counters()
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        self.write().forget(node, nlookup);
    }

    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        let mut t = self.write();
        for (node, n) in nodes {
            t.forget(node, n);
        }
    }

    async fn lookup(&self, ctx: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        let t = self.fs.timeouts();
        if is_dot_or_dotdot(name) {
            let (node, path) = self.dots(parent, name == OsStr::new(".."))?;
            let attr = self.fs.getattr(ctx, &path, None).await?;
            return self.dots_entry(node, attr, &t);
        }
        let path = self.child_path(parent, name)?;
        match self.fs.getattr(ctx, &path, None).await {
            Ok(attr) => self.register(parent, name, attr, &t),
            Err(Errno::ENOENT) => self.not_found(parent, name, &t),
            Err(e) => Err(e),
        }
    }

    async fn getattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: Option<FileHandle>,
    ) -> FsResult<AttrReply> {
        let (path, fh) = self.read().path_with_fh(node, fh)?;
        let attr = self.fs.getattr(ctx, &path, fh).await?;
        Ok(AttrReply {
            attr,
            ttl: self.fs.timeouts().attr,
        })
    }

    async fn setattr(&self, ctx: &Ctx<'_>, node: NodeId, attr: &SetAttr) -> FsResult<AttrReply> {
        let (path, fh) = self.read().path_with_fh(node, attr.fh)?;
        let attr = SetAttr { fh, ..*attr };
        let attr = self.fs.setattr(ctx, &path, &attr).await?;
        Ok(AttrReply {
            attr,
            ttl: self.fs.timeouts().attr,
        })
    }

    async fn readlink(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        let path = self.path(node, false)?;
        self.fs.readlink(ctx, &path, out).await
    }

    async fn symlink(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        target: &OsStr,
    ) -> FsResult<Entry> {
        let path = self.child_path(parent, name)?;
        let attr = self.fs.symlink(ctx, target, &path).await?;
        self.register(parent, name, attr, &self.fs.timeouts())
    }

    async fn mknod(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Mknod,
    ) -> FsResult<Entry> {
        let path = self.child_path(parent, name)?;
        let attr = self.fs.mknod(ctx, &path, args).await?;
        self.register(parent, name, attr, &self.fs.timeouts())
    }

    async fn mkdir(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Mkdir,
    ) -> FsResult<Entry> {
        let path = self.child_path(parent, name)?;
        let attr = self.fs.mkdir(ctx, &path, args).await?;
        self.register(parent, name, attr, &self.fs.timeouts())
    }

    async fn unlink(&self, ctx: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<()> {
        let path = self.child_path(parent, name)?;
        self.fs.unlink(ctx, &path).await?;
        self.write().detach_name(parent, name);
        Ok(())
    }

    async fn rmdir(&self, ctx: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<()> {
        let path = self.child_path(parent, name)?;
        self.fs.rmdir(ctx, &path).await?;
        self.write().detach_name(parent, name);
        Ok(())
    }

    async fn rename(&self, ctx: &Ctx<'_>, args: &Rename<'_>) -> FsResult<()> {
        let from = self.child_path(args.parent, args.name)?;
        let to = self.child_path(args.new_parent, args.new_name)?;
        self.fs.rename(ctx, &from, &to, args.flags).await?;
        self.renamed(args);
        Ok(())
    }

    async fn link(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        let existing = self.path(node, false)?;
        let new = self.child_path(new_parent, new_name)?;
        let attr = self.fs.link(ctx, &existing, &new).await?;
        let id = self.write().link(node, new_parent, new_name, &attr)?;
        Ok(Entry::new(id, attr, &self.fs.timeouts()))
    }

    async fn open(&self, ctx: &Ctx<'_>, node: NodeId, args: &Open) -> FsResult<Opened> {
        let path = self.path(node, false)?;
        let opened = self.fs.open(ctx, &path, args).await?;
        self.write().opened(node, opened.fh);
        Ok(opened)
    }

    async fn read(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.fs.read(ctx, &path, args, out).await
    }

    async fn write(&self, ctx: &Ctx<'_>, node: NodeId, args: &Write<'_>) -> FsResult<u32> {
        let path = self.path(node, true)?;
        self.fs.write(ctx, &path, args).await
    }

    async fn flush(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        lock_owner: u64,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.fs.flush(ctx, &path, fh, lock_owner).await
    }

    async fn release(&self, ctx: &Ctx<'_>, node: NodeId, args: &Release) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.write().released(node, args.fh);
        self.fs.release(ctx, &path, args).await
    }

    async fn fsync(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        datasync: bool,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.fs.fsync(ctx, &path, fh, datasync).await
    }

    async fn opendir(&self, ctx: &Ctx<'_>, node: NodeId, args: &Open) -> FsResult<Opened> {
        let path = self.path(node, false)?;
        self.fs.opendir(ctx, &path, args).await
    }

    async fn readdir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        let mut filler = dir_filler(out, args.offset);
        self.fs
            .readdir(ctx, &path, args.fh, args.offset, &mut filler)
            .await
    }

    async fn readdirplus(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        let mut listed = Vec::new();
        {
            let mut filler = plus_filler(&mut listed, out.remaining(), args.offset);
            self.fs
                .readdirplus(ctx, &path, args.fh, args.offset, &mut filler)
                .await?;
        }
        // As the synchronous adapter: entries only under a directory that
        // still has its name; lookups only when the kernel shows they help.
        let named = self.still_at(node, &path);
        if named && self.plus_lookups(args.offset, self.fs.lookups_in_readdirplus()) {
            for l in without_attributes(&mut listed) {
                l.attr = self.fs.getattr(ctx, &path.join(&l.name), None).await.ok();
            }
        }
        let named = named && self.still_at(node, &path);
        let t = self.fs.timeouts();
        self.answer_plus(node, named, listed, false, &t, out);
        Ok(())
    }

    async fn releasedir(&self, ctx: &Ctx<'_>, node: NodeId, args: &Release) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.fs.releasedir(ctx, &path, args).await
    }

    async fn fsyncdir(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        fh: FileHandle,
        datasync: bool,
    ) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.fs.fsyncdir(ctx, &path, fh, datasync).await
    }

    async fn statfs(&self, ctx: &Ctx<'_>, node: NodeId) -> FsResult<Statfs> {
        let path = self.path(node, true)?;
        self.fs.statfs(ctx, &path).await
    }

    async fn setxattr(&self, ctx: &Ctx<'_>, node: NodeId, args: &Setxattr<'_>) -> FsResult<()> {
        let path = self.path(node, false)?;
        self.fs.setxattr(ctx, &path, args).await
    }

    async fn getxattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        name: &OsStr,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        let path = self.path(node, false)?;
        self.fs.getxattr(ctx, &path, name, out).await
    }

    async fn listxattr(
        &self,
        ctx: &Ctx<'_>,
        node: NodeId,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        let path = self.path(node, false)?;
        self.fs.listxattr(ctx, &path, out).await
    }

    async fn removexattr(&self, ctx: &Ctx<'_>, node: NodeId, name: &OsStr) -> FsResult<()> {
        let path = self.path(node, false)?;
        self.fs.removexattr(ctx, &path, name).await
    }

    async fn access(&self, ctx: &Ctx<'_>, node: NodeId, mask: i32) -> FsResult<()> {
        let path = self.path(node, false)?;
        self.fs.access(ctx, &path, mask).await
    }

    async fn create(
        &self,
        ctx: &Ctx<'_>,
        parent: NodeId,
        name: &OsStr,
        args: &Create,
    ) -> FsResult<(Entry, Opened)> {
        let path = self.child_path(parent, name)?;
        let (attr, opened) = self.fs.create(ctx, &path, args).await?;
        match self.register(parent, name, attr, &self.fs.timeouts()) {
            Ok(entry) => {
                self.write().opened(entry.node, opened.fh);
                Ok((entry, opened))
            }
            Err(e) => {
                let _ = self
                    .fs
                    .release(ctx, &path, &unseen_release(&opened, args))
                    .await;
                Err(e)
            }
        }
    }

    async fn getlk(&self, ctx: &Ctx<'_>, node: NodeId, lock: &Lock) -> FsResult<LockInfo> {
        let path = self.path(node, true)?;
        self.fs.getlk(ctx, &path, lock).await
    }

    async fn setlk(&self, ctx: &Ctx<'_>, node: NodeId, lock: &Lock, sleep: bool) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.fs.setlk(ctx, &path, lock, sleep).await
    }

    async fn fallocate(&self, ctx: &Ctx<'_>, node: NodeId, args: &Fallocate) -> FsResult<()> {
        let path = self.path(node, true)?;
        self.fs.fallocate(ctx, &path, args).await
    }

    async fn lseek(&self, ctx: &Ctx<'_>, node: NodeId, args: &Lseek) -> FsResult<u64> {
        let path = self.path(node, true)?;
        self.fs.lseek(ctx, &path, args).await
    }

    async fn copy_file_range(&self, ctx: &Ctx<'_>, args: &CopyFileRange) -> FsResult<u64> {
        let path_in = self.path(args.node_in, true)?;
        let path_out = self.path(args.node_out, true)?;
        self.fs
            .copy_file_range(ctx, &path_in, &path_out, args)
            .await
    }
}

/// Any [`PathFilesystem`] as an [`AsyncPathFilesystem`] whose futures are
/// ready at once (how the tests run the path-level suites through the async
/// path): `AsyncAdapter::new(PathAdapter::new(ReadyPath(fs)))`.
pub struct ReadyPath<P>(pub P);

impl<P: PathFilesystem> AsyncPathFilesystem for ReadyPath<P> {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        self.0.init(conn, notifier)
    }
    fn destroy(&self) {
        self.0.destroy()
    }
    fn counters(&self) -> Vec<crate::stats::FsCounter> {
        self.0.counters()
    }
    fn timeouts(&self) -> Timeouts {
        self.0.timeouts()
    }
    async fn getattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: Option<FileHandle>,
    ) -> FsResult<FileAttr> {
        self.0.getattr(ctx, path, fh)
    }
    async fn setattr(&self, ctx: &Ctx<'_>, path: &Path, attr: &SetAttr) -> FsResult<FileAttr> {
        self.0.setattr(ctx, path, attr)
    }
    async fn readlink(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.readlink(ctx, path, out)
    }
    async fn symlink(&self, ctx: &Ctx<'_>, target: &OsStr, link_path: &Path) -> FsResult<FileAttr> {
        self.0.symlink(ctx, target, link_path)
    }
    async fn mknod(&self, ctx: &Ctx<'_>, path: &Path, args: &Mknod) -> FsResult<FileAttr> {
        self.0.mknod(ctx, path, args)
    }
    async fn mkdir(&self, ctx: &Ctx<'_>, path: &Path, args: &Mkdir) -> FsResult<FileAttr> {
        self.0.mkdir(ctx, path, args)
    }
    async fn unlink(&self, ctx: &Ctx<'_>, path: &Path) -> FsResult<()> {
        self.0.unlink(ctx, path)
    }
    async fn rmdir(&self, ctx: &Ctx<'_>, path: &Path) -> FsResult<()> {
        self.0.rmdir(ctx, path)
    }
    async fn rename(&self, ctx: &Ctx<'_>, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        self.0.rename(ctx, from, to, flags)
    }
    async fn link(&self, ctx: &Ctx<'_>, existing: &Path, new: &Path) -> FsResult<FileAttr> {
        self.0.link(ctx, existing, new)
    }
    async fn open(&self, ctx: &Ctx<'_>, path: &Path, args: &Open) -> FsResult<Opened> {
        self.0.open(ctx, path, args)
    }
    async fn read(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Read,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.read(ctx, path, args, out)
    }
    async fn write(&self, ctx: &Ctx<'_>, path: &Path, args: &Write<'_>) -> FsResult<u32> {
        self.0.write(ctx, path, args)
    }
    async fn flush(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        lock_owner: u64,
    ) -> FsResult<()> {
        self.0.flush(ctx, path, fh, lock_owner)
    }
    async fn release(&self, ctx: &Ctx<'_>, path: &Path, args: &Release) -> FsResult<()> {
        self.0.release(ctx, path, args)
    }
    async fn fsync(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        datasync: bool,
    ) -> FsResult<()> {
        self.0.fsync(ctx, path, fh, datasync)
    }
    async fn opendir(&self, ctx: &Ctx<'_>, path: &Path, args: &Open) -> FsResult<Opened> {
        self.0.opendir(ctx, path, args)
    }
    async fn readdir(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut (dyn FnMut(&OsStr, FileType, u64, u64) -> bool + Send),
    ) -> FsResult<()> {
        self.0.readdir(ctx, path, fh, offset, filler)
    }
    async fn readdirplus(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut PlusFillerSend<'_>,
    ) -> FsResult<()> {
        self.0.readdirplus(ctx, path, fh, offset, filler)
    }
    fn lookups_in_readdirplus(&self) -> bool {
        self.0.lookups_in_readdirplus()
    }
    async fn releasedir(&self, ctx: &Ctx<'_>, path: &Path, args: &Release) -> FsResult<()> {
        self.0.releasedir(ctx, path, args)
    }
    async fn fsyncdir(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        fh: FileHandle,
        datasync: bool,
    ) -> FsResult<()> {
        self.0.fsyncdir(ctx, path, fh, datasync)
    }
    async fn statfs(&self, ctx: &Ctx<'_>, path: &Path) -> FsResult<Statfs> {
        self.0.statfs(ctx, path)
    }
    async fn setxattr(&self, ctx: &Ctx<'_>, path: &Path, args: &Setxattr<'_>) -> FsResult<()> {
        self.0.setxattr(ctx, path, args)
    }
    async fn getxattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        name: &OsStr,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.getxattr(ctx, path, name, out)
    }
    async fn listxattr(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        self.0.listxattr(ctx, path, out)
    }
    async fn removexattr(&self, ctx: &Ctx<'_>, path: &Path, name: &OsStr) -> FsResult<()> {
        self.0.removexattr(ctx, path, name)
    }
    async fn access(&self, ctx: &Ctx<'_>, path: &Path, mask: i32) -> FsResult<()> {
        self.0.access(ctx, path, mask)
    }
    async fn create(
        &self,
        ctx: &Ctx<'_>,
        path: &Path,
        args: &Create,
    ) -> FsResult<(FileAttr, Opened)> {
        self.0.create(ctx, path, args)
    }
    async fn getlk(&self, ctx: &Ctx<'_>, path: &Path, lock: &Lock) -> FsResult<LockInfo> {
        self.0.getlk(ctx, path, lock)
    }
    async fn setlk(&self, ctx: &Ctx<'_>, path: &Path, lock: &Lock, sleep: bool) -> FsResult<()> {
        self.0.setlk(ctx, path, lock, sleep)
    }
    async fn fallocate(&self, ctx: &Ctx<'_>, path: &Path, args: &Fallocate) -> FsResult<()> {
        self.0.fallocate(ctx, path, args)
    }
    async fn lseek(&self, ctx: &Ctx<'_>, path: &Path, args: &Lseek) -> FsResult<u64> {
        self.0.lseek(ctx, path, args)
    }
    async fn copy_file_range(
        &self,
        ctx: &Ctx<'_>,
        path_in: &Path,
        path_out: &Path,
        args: &CopyFileRange,
    ) -> FsResult<u64> {
        self.0.copy_file_range(ctx, path_in, path_out, args)
    }
}
