//! A process's supplementary groups, for `fuse_req_getgroups` (the kernel
//! does not send them; libfuse reads them from /proc too).

use std::io;

/// The groups on the `Groups:` line of /proc/PID/status.
pub fn of_process(pid: u32) -> io::Result<Vec<libc::gid_t>> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_status(&status).ok_or_else(|| io::Error::from_raw_os_error(libc::EIO))
}

fn parse_status(status: &str) -> Option<Vec<libc::gid_t>> {
    let line = status.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    line.split_whitespace().map(|g| g.parse().ok()).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_the_groups_line() {
        assert_eq!(
            super::parse_status("Name:\tx\nGroups:\t4 24 27 \nNSpid:\t1\n"),
            Some(vec![4, 24, 27])
        );
        assert_eq!(super::parse_status("Groups:\t\n"), Some(vec![]));
        assert_eq!(super::parse_status("Name:\tx\n"), None);
        assert!(super::of_process(std::process::id()).is_ok());
    }
}
