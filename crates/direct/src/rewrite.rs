//! The fast path of interception: call sites rewritten into direct calls,
//! in the style of zpoline (Yasukata et al., ATC '23) and lazypoline.
//!
//! A `syscall` instruction (`0f 05`) is replaced by `call *%rax` (`ff d0`),
//! the same two bytes long. With the system call number in rax, the call
//! lands at that address in a page mapped at virtual address 0 whose first
//! 512 bytes are `nop`s; they slide into a jump to
//! `fusebox_direct_trampoline_entry`, which saves the registers and the
//! extended (vector) state, runs the same dispatcher the SIGSYS handler
//! runs, and returns to the instruction after the site — about a function
//! call's cost instead of a signal's.
//!
//! Sites are found lazily, as lazypoline does: syscall user dispatch
//! (`sud.rs`) traps the first call from each site, which is thereby known
//! to be a real `syscall` instruction (no disassembly, no misread data in
//! code); the handler answers that call and rewrites the site for the next
//! ones. Code loaded or generated later is covered the same way, and what
//! is never rewritten (the vDSO, a site straddling a cache line) keeps
//! going through dispatch.
//!
//! Everything unsafe about rewriting is here: mapping page 0 (which needs
//! `vm.mmap_min_addr` at 0: set under a lock and restored at once), the
//! trampoline's code, the entry's register contract, and the two-byte
//! store into executable memory.

#![allow(unsafe_code)]

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::appmem;
use crate::intercept::InterceptError;
use crate::sud;

/// Call numbers the nop slide covers: every x86_64 system call (the table
/// ends below 470). Only sites whose number is fixed below this are
/// rewritten (`number_is_fixed`); a number above it at a site that is not
/// would slide on to a second jump at the page's end.
const SLIDE: usize = 0x200;
const PAGE: usize = 4096;
const MMAP_MIN_ADDR: &str = "/proc/sys/vm/mmap_min_addr";
/// Serialises the set-map-restore of `vm.mmap_min_addr` between processes
/// starting at once: without it, one would read the other's 0 as the
/// value to restore.
const MMAP_MIN_ADDR_LOCK: &str = "/dev/shm/fusebox-direct-mmap-min-addr.lock";

/// The registers as the entry saves them (pushed in reverse), then the red
/// zone it skips, then the return address `call *%rax` pushed.
#[repr(C)]
pub(crate) struct SavedRegs {
    pub rax: u64,
    pub rcx: u64,
    pub rdx: u64,
    pub rsi: u64,
    pub rdi: u64,
    pub r8: u64,
    pub r9: u64,
    pub r10: u64,
    pub r11: u64,
    pub rbx: u64,
    pub rbp: u64,
    pub r12: u64,
    pub r13: u64,
    pub r14: u64,
    pub r15: u64,
    red_zone: [u64; 15],
    /// Where the application goes on: the instruction after its site.
    pub resume: u64,
}

impl SavedRegs {
    /// The stack pointer at the site, as it was when the call was made.
    pub fn site_rsp(&self) -> u64 {
        std::ptr::addr_of!(self.resume) as u64 + 8
    }
}

/// Components of the extended state the entry saves (XCR0 less the AMX
/// tile components, which a process must ask for and XRSTOR would fault
/// on) and the bytes that takes; read once at `enable`.
static mut XSAVE_MASK: u64 = 0;
static mut XSAVE_BYTES: u64 = 0;
/// 1: the CPU has XSAVEC (compacted, saves only what is in use).
static mut HAS_XSAVEC: u8 = 0;

std::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl fusebox_direct_trampoline_entry",
    ".hidden fusebox_direct_trampoline_entry",
    "fusebox_direct_trampoline_entry:",
    // rt_sigreturn: the kernel finds the signal frame at the stack pointer
    // the application's handler returned with, i.e. above our return
    // address; it never comes back.
    "cmp rax, 15",
    "je 3f",
    // The call wrote into the top 8 bytes of the caller's red zone; keep
    // off the other 120.
    "lea rsp, [rsp - 120]",
    "push r15",
    "push r14",
    "push r13",
    "push r12",
    "push rbp",
    "push rbx",
    "push r11",
    "push r10",
    "push r9",
    "push r8",
    "push rdi",
    "push rsi",
    "push rdx",
    "push rcx",
    "push rax",
    "mov rbp, rsp",
    "sub rsp, qword ptr [rip + {xsave_bytes}]",
    "and rsp, -64",
    // XRSTOR faults unless the header's reserved bytes are zero.
    "xor eax, eax",
    "mov qword ptr [rsp + 512], rax",
    "mov qword ptr [rsp + 520], rax",
    "mov qword ptr [rsp + 528], rax",
    "mov qword ptr [rsp + 536], rax",
    "mov qword ptr [rsp + 544], rax",
    "mov qword ptr [rsp + 552], rax",
    "mov qword ptr [rsp + 560], rax",
    "mov qword ptr [rsp + 568], rax",
    "mov eax, dword ptr [rip + {xsave_mask}]",
    "xor edx, edx",
    "cmp byte ptr [rip + {has_xsavec}], 0",
    "je 1f",
    "xsavec64 [rsp]",
    "jmp 2f",
    "1:",
    "xsave64 [rsp]",
    "2:",
    "mov rdi, rbp",
    "call {dispatch}",
    "mov eax, dword ptr [rip + {xsave_mask}]",
    "xor edx, edx",
    "xrstor64 [rsp]",
    "mov rsp, rbp",
    "pop rax",
    "pop rcx",
    "pop rdx",
    "pop rsi",
    "pop rdi",
    "pop r8",
    "pop r9",
    "pop r10",
    "pop r11",
    "pop rbx",
    "pop rbp",
    "pop r12",
    "pop r13",
    "pop r14",
    "pop r15",
    "lea rsp, [rsp + 120]",
    "ret",
    "3:",
    "lea rdi, [rsp + 8]",
    "jmp fusebox_direct_sigreturn_at",
    dispatch = sym sud::on_trampoline,
    xsave_bytes = sym XSAVE_BYTES,
    xsave_mask = sym XSAVE_MASK,
    has_xsavec = sym HAS_XSAVEC,
);

extern "C" {
    fn fusebox_direct_trampoline_entry();
}

static ENABLED: AtomicBool = AtomicBool::new(false);
/// Held while a page is made writable and patched: two threads patching
/// the same page would otherwise take its write permission from under
/// each other.
static PATCHING: AtomicBool = AtomicBool::new(false);

pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Why this process could not map the trampoline, if it could not: page 0
/// needs vm.mmap_min_addr at 0, and only a user who may write that setting
/// (root) can put it there for a moment. None: it is 0, or may be made 0.
pub(crate) fn unavailable() -> Option<String> {
    let min_addr = std::fs::read_to_string(MMAP_MIN_ADDR).ok()?;
    let min_addr = min_addr.trim();
    if min_addr == "0" {
        return None;
    }
    match rustix::fs::access(MMAP_MIN_ADDR, rustix::fs::Access::WRITE_OK) {
        Ok(()) => None,
        Err(e) => Some(format!(
            "call-site rewriting maps a page at address 0, which needs vm.mmap_min_addr=0 \
             (it is {min_addr}, and this user may not change it: {e})"
        )),
    }
}

/// Map the trampoline and start rewriting sites as dispatch traps them.
pub(crate) fn enable() -> Result<(), InterceptError> {
    if enabled() {
        return Ok(());
    }
    read_xsave_layout()?;
    map_page_zero()?;
    ENABLED.store(true, Ordering::Relaxed);
    Ok(())
}

fn cpuid(leaf: u32, sub: u32) -> std::arch::x86_64::CpuidResult {
    // SAFETY: CPUID exists on every x86_64 CPU and only reads.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::__cpuid_count(leaf, sub)
    }
}

fn read_xsave_layout() -> Result<(), InterceptError> {
    const OSXSAVE: u32 = 1 << 27;
    if cpuid(1, 0).ecx & OSXSAVE == 0 {
        return Err(InterceptError::Rewrite(
            "this CPU or kernel has no XSAVE, which the rewritten path needs to keep the application's vector registers".into(),
        ));
    }
    let (lo, hi): (u32, u32);
    // SAFETY: XGETBV with ECX=0 reads XCR0; OSXSAVE (checked above) makes
    // it legal in user mode.
    unsafe {
        std::arch::asm!("xgetbv", in("ecx") 0, out("eax") lo, out("edx") hi,
            options(nomem, nostack, preserves_flags));
    }
    const AMX_TILES: u64 = 1 << 17 | 1 << 18;
    let mask = (u64::from(hi) << 32 | u64::from(lo)) & !AMX_TILES & 0xffff_ffff;
    let bytes = u64::from(cpuid(0xd, 0).ebx).max(576);
    let xsavec = u8::from(cpuid(0xd, 1).eax & 1 << 1 != 0);
    // SAFETY: written once here, before the trampoline exists, and only
    // read (by the entry) after.
    unsafe {
        XSAVE_MASK = mask;
        XSAVE_BYTES = bytes;
        HAS_XSAVEC = xsavec;
    }
    Ok(())
}

/// Page 0: `nop`s, then `movabs r11, entry; jmp r11` at `SLIDE`, more
/// `nop`s and the same jump at the end for the numbers above.
fn trampoline_code() -> [u8; PAGE] {
    let entry = (fusebox_direct_trampoline_entry as *const () as usize as u64).to_le_bytes();
    let mut jump = [0u8; 13];
    jump[..2].copy_from_slice(&[0x49, 0xbb]);
    jump[2..10].copy_from_slice(&entry);
    jump[10..].copy_from_slice(&[0x41, 0xff, 0xe3]);
    let mut page = [0x90u8; PAGE];
    page[SLIDE..SLIDE + jump.len()].copy_from_slice(&jump);
    page[PAGE - 16..PAGE - 16 + jump.len()].copy_from_slice(&jump);
    page[PAGE - 3..].copy_from_slice(&[0x0f, 0x0b, 0x90]);
    page
}

fn map_at_zero() -> std::io::Result<()> {
    // SAFETY: a new anonymous private mapping at a fixed address that
    // MAP_FIXED_NOREPLACE refuses to take from anything already there.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    if !p.is_null() {
        // An old kernel took the address as a hint.
        // SAFETY: the mapping just made, not shared with anything.
        unsafe { libc::munmap(p, PAGE) };
        return Err(std::io::Error::from_raw_os_error(libc::EPERM));
    }
    Ok(())
}

fn map_page_zero() -> Result<(), InterceptError> {
    if let Err(first) = map_at_zero() {
        if first.raw_os_error() != Some(libc::EPERM) && first.raw_os_error() != Some(libc::EACCES) {
            return Err(InterceptError::Rewrite(format!(
                "cannot map the trampoline at address 0: {first}"
            )));
        }
        with_mmap_min_addr_zero(map_at_zero)?;
    }
    let code = trampoline_code();
    // SAFETY: page 0 is the mapping made above, writable and ours alone
    // until the mprotect makes it executable. The copy is a plain `rep
    // movsb` rather than a Rust write: address 0 is this page, not a null
    // pointer, which Rust's pointer rules cannot express.
    unsafe {
        std::arch::asm!("rep movsb", inout("rdi") 0usize => _, inout("rsi") code.as_ptr() => _,
            inout("rcx") PAGE => _, options(nostack, preserves_flags));
        if libc::mprotect(std::ptr::null_mut(), PAGE, libc::PROT_EXEC) != 0 {
            let e = std::io::Error::last_os_error();
            libc::munmap(std::ptr::null_mut(), PAGE);
            return Err(InterceptError::Rewrite(format!(
                "cannot make the trampoline executable: {e}"
            )));
        }
    }
    Ok(())
}

/// Run `map` with `vm.mmap_min_addr` at 0, then put the old value back.
fn with_mmap_min_addr_zero(map: fn() -> std::io::Result<()>) -> Result<(), InterceptError> {
    let refused = |why: String| {
        InterceptError::Rewrite(format!(
            "the trampoline at address 0 needs vm.mmap_min_addr=0 for a moment, and {why}; \
             run as root, or use syscall user dispatch alone (slower): fusebox run --intercept dispatch, or FUSEBOX_DIRECT_INTERCEPT=dispatch"
        ))
    };
    // Read-only is enough for flock, so every user can take it whoever
    // made the file.
    let lock = std::fs::File::open(MMAP_MIN_ADDR_LOCK)
        .or_else(|_| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(MMAP_MIN_ADDR_LOCK)
        })
        .map_err(|e| refused(format!("{MMAP_MIN_ADDR_LOCK}: {e}")))?;
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| refused(format!("locking {MMAP_MIN_ADDR_LOCK}: {e}")))?;
    let mut old = String::new();
    std::fs::File::open(MMAP_MIN_ADDR)
        .and_then(|mut f| f.read_to_string(&mut old))
        .map_err(|e| refused(format!("{MMAP_MIN_ADDR}: {e}")))?;
    let old = old.trim().to_owned();
    let set = |v: &str| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(MMAP_MIN_ADDR)
            .and_then(|mut f| f.write_all(v.as_bytes()))
    };
    set("0").map_err(|e| {
        refused(format!(
            "it is {old} and this process may not change it ({e})"
        ))
    })?;
    let mapped = map();
    let restored = set(&old);
    drop(lock);
    mapped.map_err(|e| {
        InterceptError::Rewrite(format!("cannot map the trampoline at address 0: {e}"))
    })?;
    restored.map_err(|e| {
        InterceptError::Rewrite(format!("could not put vm.mmap_min_addr back to {old}: {e}"))
    })
}

/// In a forked child: the patch lock may have been held by a thread that
/// does not exist here.
pub(crate) fn after_fork() {
    PATCHING.store(false, Ordering::Relaxed);
}

/// Rewrite the `syscall` instruction that ends just before `after` (the
/// address dispatch reported) into `call *%rax`, if it can be done safely;
/// otherwise leave it to dispatch. Called from the SIGSYS handler, so it
/// makes raw system calls only and allocates nothing.
pub(crate) fn patch_site(after: usize) {
    if !enabled() || after < 2 {
        return;
    }
    let site = after - 2;
    // The two bytes must change in one store another core cannot see
    // half of: within one cache line.
    if site % 64 == 63 {
        return;
    }
    let mut bytes = [0u8; 2];
    if appmem::read(site as u64, &mut bytes).is_err() || bytes != [0x0f, 0x05] {
        return;
    }
    if !number_is_fixed(site) {
        return;
    }
    if PATCHING
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        // Another thread is patching; this site is caught again next time.
        return;
    }
    if let Some(prot) = rewritable_protection(site) {
        let page = (site & !(PAGE - 1)) as u64;
        let writable = prot & libc::PROT_WRITE != 0;
        let opened = writable
            || sud::raw_syscall(
                libc::SYS_mprotect,
                [page, PAGE as u64, (prot | libc::PROT_WRITE) as u64, 0, 0, 0],
            ) == 0;
        if opened {
            // SAFETY: `site` holds a `syscall` instruction (read above) in
            // an executable mapping that is writable now; the one 16-bit
            // store replaces it by an instruction of the same length, so
            // a thread running this code sees one or the other whole
            // (within a cache line, checked above).
            unsafe {
                std::ptr::write_unaligned(site as *mut u16, u16::from_le_bytes([0xff, 0xd0]))
            };
            if !writable {
                sud::raw_syscall(
                    libc::SYS_mprotect,
                    [page, PAGE as u64, prot as u64, 0, 0, 0],
                );
            }
        }
    }
    PATCHING.store(false, Ordering::Release);
}

/// Whether the call number at the `syscall` at `site` looks fixed: a `mov
/// $N, %eax` with N a system call number within the 16 bytes before it
/// (436 of glibc 2.36's 526 sites have it right before, 479 within 16
/// bytes). Sites that take the number from a register — glibc's
/// `syscall()`, Go's wrappers — may make any call, and a number of 512 or
/// more, or a negative one, would send `call *%rax` outside the
/// trampoline: those sites stay with dispatch, which answers anything.
fn number_is_fixed(site: usize) -> bool {
    let from = site.saturating_sub(16).max(site & !(PAGE - 1));
    let mut before = [0u8; 16];
    let before = &mut before[..site - from];
    if appmem::read(from as u64, before).is_err() {
        return false;
    }
    fixed_number_before(before)
}

fn fixed_number_before(before: &[u8]) -> bool {
    before
        .windows(5)
        .any(|w| w[0] == 0xb8 && u32::from_le_bytes([w[1], w[2], w[3], w[4]]) < SLIDE as u32)
}

/// The protection of the mapping holding `addr`, from /proc/self/maps, if
/// it is code we may rewrite: executable, not the vDSO or vsyscall page.
fn rewritable_protection(addr: usize) -> Option<i32> {
    let path = b"/proc/self/maps\0";
    let fd = sud::raw_syscall(
        libc::SYS_openat,
        [
            libc::AT_FDCWD as u64,
            path.as_ptr() as u64,
            (libc::O_RDONLY | libc::O_CLOEXEC) as u64,
            0,
            0,
            0,
        ],
    );
    if fd < 0 {
        return None;
    }
    let mut buf = [0u8; 4096];
    let mut filled = 0;
    let mut found = None;
    'read: loop {
        let n = sud::raw_syscall(
            libc::SYS_read,
            [
                fd as u64,
                buf[filled..].as_mut_ptr() as u64,
                (buf.len() - filled) as u64,
                0,
                0,
                0,
            ],
        );
        if n <= 0 {
            break;
        }
        filled += n as usize;
        let mut start = 0;
        while let Some(nl) = buf[start..filled].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + nl];
            start += nl + 1;
            if let Some(hit) = parse_maps_line(line, addr) {
                found = hit;
                break 'read;
            }
        }
        buf.copy_within(start..filled, 0);
        filled -= start;
        if filled == buf.len() {
            // A line longer than the buffer (a very long path): skip it.
            filled = 0;
        }
    }
    sud::raw_syscall(libc::SYS_close, [fd as u64, 0, 0, 0, 0, 0]);
    found
}

/// `Some(answer)` if this line's range holds `addr`.
fn parse_maps_line(line: &[u8], addr: usize) -> Option<Option<i32>> {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let range = fields.next()?;
    let perms = fields.next()?;
    let dash = range.iter().position(|&b| b == b'-')?;
    let start = hex(&range[..dash])?;
    let end = hex(&range[dash + 1..])?;
    if !(start..end).contains(&addr) {
        return None;
    }
    let name = fields.nth(3).unwrap_or(b"");
    if name.starts_with(b"[vdso]") || name.starts_with(b"[vsyscall]") || perms.len() < 3 {
        return Some(None);
    }
    let mut prot = 0;
    if perms[0] == b'r' {
        prot |= libc::PROT_READ;
    }
    if perms[1] == b'w' {
        prot |= libc::PROT_WRITE;
    }
    if perms[2] == b'x' {
        prot |= libc::PROT_EXEC;
    }
    Some((prot & libc::PROT_EXEC != 0).then_some(prot))
}

fn hex(s: &[u8]) -> Option<usize> {
    let mut v = 0usize;
    for &c in s {
        let d = (c as char).to_digit(16)?;
        v = v.checked_mul(16)?.checked_add(d as usize)?;
    }
    Some(v)
}

/// Whether `call` names application memory in page 0 that the kernel
/// would read: a path, or the data of a write. Without the trampoline the
/// page is unmapped and the kernel answers EFAULT (a null path); with it,
/// the kernel would read the trampoline's bytes, so these calls are
/// answered EFAULT here instead. (NULL where the call allows it — an
/// empty path with AT_EMPTY_PATH, utimensat's — is left to the kernel.)
// The libc names of system calls are lower case.
#[allow(non_upper_case_globals)]
pub(crate) fn reads_page_zero(nr: i64, a: &[u64; 6]) -> bool {
    use libc::*;
    let low = |i: usize| a[i] < PAGE as u64;
    let empty_path_ok = |flags: u64| flags & AT_EMPTY_PATH as u64 != 0;
    let path = |i: usize| low(i);
    let path_or_empty = |i: usize, flags: u64| low(i) && !(a[i] == 0 && empty_path_ok(flags));
    match nr {
        SYS_open | SYS_creat | SYS_stat | SYS_lstat | SYS_access | SYS_mkdir | SYS_rmdir
        | SYS_unlink | SYS_readlink | SYS_chmod | SYS_chown | SYS_lchown | SYS_truncate
        | SYS_mknod | SYS_chdir | SYS_chroot | SYS_execve | SYS_utime | SYS_utimes
        | SYS_statfs | SYS_setxattr | SYS_lsetxattr | SYS_getxattr | SYS_lgetxattr
        | SYS_listxattr | SYS_llistxattr | SYS_removexattr | SYS_lremovexattr
        | SYS_umount2 => path(0),
        SYS_rename | SYS_link | SYS_symlink => path(0) || path(1),
        SYS_openat | SYS_openat2 | SYS_faccessat | SYS_faccessat2 | SYS_mkdirat
        | SYS_unlinkat | SYS_readlinkat | SYS_fchmodat | SYS_mknodat | SYS_futimesat
        | SYS_inotify_add_watch => path(1),
        452 /* fchmodat2 */ => path_or_empty(1, a[3]),
        SYS_newfstatat => path_or_empty(1, a[3]),
        SYS_statx => path_or_empty(1, a[2]),
        SYS_fchownat => path_or_empty(1, a[4]),
        SYS_execveat => path_or_empty(1, a[4]),
        SYS_name_to_handle_at => path_or_empty(1, a[4]),
        SYS_utimensat => a[1] != 0 && low(1),
        SYS_renameat | SYS_renameat2 => path(1) || path(3),
        SYS_linkat => path_or_empty(1, a[4]) || path(3),
        SYS_symlinkat => path(0) || path(2),
        SYS_write | SYS_pwrite64 | SYS_sendto => a[2] != 0 && low(1),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines_give_the_protection_of_code_that_may_be_rewritten() {
        let libc_line = b"7f0000001000-7f0000003000 r-xp 00028000 08:01 1234   /usr/lib/x86_64-linux-gnu/libc.so.6";
        assert_eq!(
            parse_maps_line(libc_line, 0x7f0000002000),
            Some(Some(libc::PROT_READ | libc::PROT_EXEC))
        );
        assert_eq!(parse_maps_line(libc_line, 0x7f0000003000), None);
        let jit = b"10000-20000 rwxp 00000000 00:00 0 ";
        assert_eq!(
            parse_maps_line(jit, 0x10000),
            Some(Some(libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC))
        );
        let vdso = b"7ffd1000-7ffd3000 r-xp 00000000 00:00 0                          [vdso]";
        assert_eq!(parse_maps_line(vdso, 0x7ffd1000), Some(None));
        let data = b"1000-2000 rw-p 00000000 00:00 0 [heap]";
        assert_eq!(parse_maps_line(data, 0x1000), Some(None));
    }

    #[test]
    fn only_sites_with_a_fixed_number_are_rewritten() {
        // glibc's read(): mov $0x0,%eax; syscall.
        assert!(fixed_number_before(&[0x31, 0xc0, 0xb8, 0, 0, 0, 0]));
        // futex: mov $0xca,%eax; ...; xor $0x80,%sil; syscall.
        assert!(fixed_number_before(&[
            0xb8, 0xca, 0, 0, 0, 0x4c, 0x89, 0xd2, 0x40, 0x80, 0xf6, 0x80
        ]));
        // glibc's syscall(): the number from %rdi.
        assert!(!fixed_number_before(&[
            0x48, 0x89, 0xf8, 0x48, 0x89, 0xf7, 0x48, 0x89, 0xd6, 0x48, 0x89, 0xca, 0x4d, 0x89,
            0xc2, 0x4d
        ]));
        // A mov of something that is no call number.
        assert!(!fixed_number_before(&[0xb8, 0x00, 0x10, 0x00, 0x00]));
    }

    #[test]
    fn the_trampoline_slides_every_system_call_number_to_the_entry() {
        let code = trampoline_code();
        assert!(code[..SLIDE].iter().all(|&b| b == 0x90));
        assert_eq!(&code[SLIDE..SLIDE + 2], &[0x49, 0xbb]);
        assert_eq!(&code[SLIDE + 10..SLIDE + 13], &[0x41, 0xff, 0xe3]);
    }
}
