//! What a program that knows nothing of fusebox gets from fusebox: the
//! `FUSEBOX_*` environment picks the transport, threads, polling and
//! statistics.
//!
//! | variable | values | default |
//! |---|---|---|
//! | `FUSEBOX_TRANSPORT` | `classic`, `uring`, `auto` | `classic` |
//! | `FUSEBOX_WORKERS` | serving threads of a multi-threaded loop | the program's max_threads (libfuse's 10) |
//! | `FUSEBOX_QUEUE_THREADS` | io_uring threads per CPU queue | workers / CPUs |
//! | `FUSEBOX_QUEUE_DEPTH` | io_uring entries per queue thread | 1 |
//! | `FUSEBOX_POLL` | io_uring wait: `off`, `spin=US`, `adaptive[=US]` | `adaptive` (as `fusebox mount`) |
//! | `FUSEBOX_PIN_QUEUES` | `0` leaves io_uring queue threads unpinned | pinned (each queue's first thread on its CPU) |
//! | `FUSEBOX_THREAD_POLICY` | `adaptive`, `normal`, `idle` (as `fusebox mount`) | `adaptive` as root, `normal` otherwise (adaptive needs CAP_SYS_NICE) |
//! | `FUSEBOX_STATS` | `0` turns the `fusebox stats` socket off | on |
//! | `FUSEBOX_OPTIONS` | more `-o` options, applied after the program's | none |
//! | `FUSEBOX_READDIRPLUS_LOOKUPS` | `0` keeps a high-level program's getattr out of READDIRPLUS (see `PathAdapter`) | on |
//! | `FUSEBOX_LOG` | a tracing filter for fusebox's own log (stderr) | `warn` |

use fusebox::transport::uring::PollPolicy;
use fusebox::SessionConfig;

/// A bad value: which variable, and why.
#[derive(Debug, PartialEq, Eq)]
pub struct EnvError {
    pub var: &'static str,
    pub reason: String,
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.var, self.reason)
    }
}

/// The session settings `get` (an environment lookup) describes.
pub fn session_config(get: impl Fn(&str) -> Option<String>) -> Result<SessionConfig, EnvError> {
    let mut cfg = SessionConfig::default();
    cfg.uring.poll = PollPolicy::parse("adaptive").expect("a valid policy");
    if !rustix::process::geteuid().is_root() {
        // Adaptive takes threads back from SCHED_IDLE, which needs
        // CAP_SYS_NICE; a user's program would only be warned about it.
        cfg.thread_policy = fusebox::session::ThreadPolicy::Normal;
    }
    if let Some(v) = get("FUSEBOX_TRANSPORT") {
        cfg.transport = v.parse().map_err(|reason| EnvError {
            var: "FUSEBOX_TRANSPORT",
            reason,
        })?;
    }
    if let Some(v) = get("FUSEBOX_WORKERS") {
        cfg.workers = v.parse().ok().filter(|&n| n > 0).ok_or(EnvError {
            var: "FUSEBOX_WORKERS",
            reason: format!("{v:?} is not a positive number"),
        })?;
    }
    if let Some(v) = get("FUSEBOX_QUEUE_THREADS") {
        cfg.uring.threads_per_queue = v.parse().ok().filter(|&n| n > 0).ok_or(EnvError {
            var: "FUSEBOX_QUEUE_THREADS",
            reason: format!("{v:?} is not a positive number"),
        })?;
    }
    if let Some(v) = get("FUSEBOX_QUEUE_DEPTH") {
        cfg.uring.depth = v.parse().ok().filter(|&n| n > 0).ok_or(EnvError {
            var: "FUSEBOX_QUEUE_DEPTH",
            reason: format!("{v:?} is not a positive number"),
        })?;
    }
    if let Some(v) = get("FUSEBOX_POLL") {
        cfg.uring.poll = PollPolicy::parse(&v).ok_or(EnvError {
            var: "FUSEBOX_POLL",
            reason: format!("{v:?}: use off, spin=US or adaptive[=US]"),
        })?;
    }
    if let Some(v) = get("FUSEBOX_THREAD_POLICY") {
        cfg.thread_policy = v.parse().map_err(|e: String| EnvError {
            var: "FUSEBOX_THREAD_POLICY",
            reason: e,
        })?;
    }
    if let Some(v) = get("FUSEBOX_STATS") {
        cfg.stats_socket = !is_off(&v);
    }
    if let Some(v) = get("FUSEBOX_PIN_QUEUES") {
        cfg.uring.pin = !is_off(&v);
    }
    Ok(cfg)
}

/// Whether a high-level program's entries listed without attributes may
/// be looked up by its getattr inside a READDIRPLUS, when the kernel shows
/// the program being served stats what it lists (fusebox's
/// `PathAdapter`; libfuse never does). Off for a filesystem whose getattr
/// costs far more than its listing.
pub fn readdirplus_lookups(get: impl Fn(&str) -> Option<String>) -> bool {
    get("FUSEBOX_READDIRPLUS_LOOKUPS").is_none_or(|v| !is_off(&v))
}

fn is_off(v: &str) -> bool {
    matches!(v, "0" | "off" | "no" | "false")
}

#[cfg(test)]
mod tests {
    use super::*;
    use fusebox::transport::TransportKind;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn reads_each_variable_and_rejects_bad_values() {
        let c = session_config(env(&[
            ("FUSEBOX_TRANSPORT", "uring"),
            ("FUSEBOX_WORKERS", "3"),
            ("FUSEBOX_POLL", "spin=20"),
            ("FUSEBOX_STATS", "0"),
            ("FUSEBOX_PIN_QUEUES", "off"),
        ]))
        .unwrap();
        assert!(!c.uring.pin);
        assert_eq!(c.transport, TransportKind::Uring);
        assert_eq!(c.workers, 3);
        assert!(!c.stats_socket);
        assert!(matches!(c.uring.poll, PollPolicy::Spin(d) if d.as_micros() == 20));
        let e = session_config(env(&[("FUSEBOX_WORKERS", "0")])).unwrap_err();
        assert_eq!(e.var, "FUSEBOX_WORKERS");
        let e = session_config(env(&[("FUSEBOX_TRANSPORT", "carrier-pigeon")])).unwrap_err();
        assert_eq!(e.var, "FUSEBOX_TRANSPORT");
        assert!(session_config(env(&[])).unwrap().stats_socket);
        assert!(readdirplus_lookups(env(&[])));
        assert!(!readdirplus_lookups(env(&[(
            "FUSEBOX_READDIRPLUS_LOOKUPS",
            "0"
        )])));
    }
}
