//! SFTP status codes as errno values.
//!
//! Version 3 has eight codes; OpenSSH's server folds every errno but
//! ENOENT/ENOTDIR/ELOOP (NO_SUCH_FILE), EPERM/EACCES (PERMISSION_DENIED),
//! EINVAL/ENAMETOOLONG (BAD_MESSAGE) and ENOSYS (OP_UNSUPPORTED) into
//! FAILURE. Where the errno matters (EEXIST, ENOTEMPTY, EISDIR, ...), the
//! filesystem looks at the names involved after a FAILURE to say which
//! (see `fs::diagnose`); here is the plain mapping.

use fusebox::Errno;

use crate::wire::status;

pub fn status_errno(code: u32) -> Errno {
    match code {
        status::OK => Errno(0),
        status::EOF => Errno::ENODATA,
        status::NO_SUCH_FILE => Errno::ENOENT,
        status::PERMISSION_DENIED => Errno::EACCES,
        status::FAILURE => Errno::EPERM,
        // OpenSSH's code for EINVAL (and ENAMETOOLONG, caught before).
        status::BAD_MESSAGE => Errno::EINVAL,
        status::NO_CONNECTION => Errno(libc::ENOTCONN),
        status::CONNECTION_LOST => Errno(libc::ECONNABORTED),
        status::OP_UNSUPPORTED => Errno::EOPNOTSUPP,
        _ => Errno::EIO,
    }
}
