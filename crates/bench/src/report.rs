//! Rendering a [`BenchResults`]: the terminal table, the Markdown report and
//! its SVG charts. The SVG is written by hand so the bench crate needs no
//! plotting dependency.
//!
//! Naming convention for thread sweeps: a workload whose name ends in
//! `-<N>th` (`rfuse/seq-rd-128k-4th`) is point N of the sweep named by
//! everything before that suffix (`rfuse/seq-rd-128k`). A thread count that
//! is not the last component (`vangoor/rnd-rd-4th-1f-4k`) makes no sweep. A
//! prefix with at least [`MIN_SWEEP_POINTS`] distinct thread counts gets a
//! line chart (1-vs-N pairs read well enough in the bar charts). The x value
//! is the workload's `threads` field, else the N of its name.
//!
//! Chart files: `charts/bar-<group>.svg`, `charts/sweep-<prefix, '/' as
//! '-'>.svg`, `charts/hist-<subject>.svg`.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use fusebox::stats::{OpSnapshot, Snapshot};

use crate::results::{median, BenchResults, SubjectInfo, SubjectRuns, WorkloadResult};

/// Fewest distinct thread counts that make a sweep chart.
pub const MIN_SWEEP_POINTS: usize = 3;
const NATIVE: &str = "native";
/// The terminal table abbreviates subject names past this width.
const MAX_WIDTH: usize = 160;
/// Okabe-Ito colour-blind-safe palette (its yellow, faint on white, swapped
/// for grey) plus two of Paul Tol's; see [`colours`].
const PALETTE: [&str; 10] = [
    "#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#999999", "#000000",
    "#882255", "#332288",
];

/// `write!` into a `String` cannot fail; this drops the `fmt::Result` in one place.
macro_rules! out {
    ($dst:expr, $($arg:tt)*) => {
        let _ = write!($dst, $($arg)*);
    };
}

// ---------------------------------------------------------------- helpers

fn available(r: &BenchResults) -> impl Iterator<Item = &SubjectInfo> {
    r.subjects.iter().filter(|s| s.unavailable.is_none())
}

/// Colours for one chart's subjects: a subject's own colour, by its index in
/// `subjects` so that it keeps it across charts, unless a subject before it in
/// this chart took that one (past ten subjects), then the next free one.
fn colours<'a>(r: &BenchResults, names: &[&'a str]) -> Vec<(&'a str, &'static str)> {
    let mut out: Vec<(&str, &str)> = vec![];
    for n in names {
        let i = r.subjects.iter().position(|s| s.name == *n).unwrap_or(0);
        let mut free = (0..PALETTE.len())
            .map(|k| PALETTE[(i + k) % PALETTE.len()])
            .filter(|c| out.iter().all(|(_, u)| u != c));
        out.push((n, free.next().unwrap_or(PALETTE[i % PALETTE.len()])));
    }
    out
}

fn colour_of(cs: &[(&str, &'static str)], name: &str) -> &'static str {
    cs.iter()
        .find(|(n, _)| *n == name)
        .map_or(PALETTE[0], |(_, c)| c)
}

/// Groups in order of first appearance.
fn groups(r: &BenchResults) -> Vec<&str> {
    let mut g: Vec<&str> = vec![];
    for w in &r.workloads {
        if !g.contains(&w.group.as_str()) {
            g.push(&w.group);
        }
    }
    g
}

/// `rfuse/seq-rd-128k-4th` -> (`rfuse/seq-rd-128k`, 4).
pub fn split_threads(name: &str) -> Option<(&str, u32)> {
    let (base, last) = name.rsplit_once('-')?;
    Some((base, last.strip_suffix("th")?.parse().ok()?))
}

/// Sweep prefixes (see the module doc), in order of first appearance.
pub fn sweep_prefixes(r: &BenchResults) -> Vec<String> {
    let mut seen: Vec<(&str, BTreeSet<u32>)> = vec![];
    for (base, t) in r
        .workloads
        .iter()
        .filter_map(|w| split_threads(&w.name).map(|(b, n)| (b, w.threads.unwrap_or(n))))
    {
        match seen.iter().position(|(b, _)| *b == base) {
            Some(i) => seen[i].1.extend([t]),
            None => seen.push((base, BTreeSet::from([t]))),
        }
    }
    seen.into_iter()
        .filter(|(_, ts)| ts.len() >= MIN_SWEEP_POINTS)
        .map(|(b, _)| b.to_string())
        .collect()
}

/// The points of a sweep, by thread count: workloads named `<prefix>-<N>th`.
fn sweep_members<'a>(r: &'a BenchResults, prefix: &str) -> Vec<(u32, &'a WorkloadResult)> {
    let prefix = prefix.trim_end_matches('-');
    let of = |w: &'a WorkloadResult| {
        split_threads(&w.name)
            .filter(|(b, _)| *b == prefix)
            .map(|(_, n)| (w.threads.unwrap_or(n), w))
    };
    let mut m: Vec<(u32, &WorkloadResult)> = r.workloads.iter().filter_map(of).collect();
    m.sort_by_key(|(t, _)| *t);
    m
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A Markdown table cell: no pipes, no line breaks, no HTML tags.
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
        .replace(['\n', '\r'], " ")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn thousands(v: f64, decimals: usize) -> String {
    let s = format!("{:.*}", decimals, v.abs());
    let (int, frac) = s
        .split_once('.')
        .map_or((s.as_str(), String::new()), |(i, f)| (i, format!(".{f}")));
    // Digits only (ASCII), so byte chunks are characters.
    let groups: Vec<&str> = int
        .as_bytes()
        .rchunks(3)
        .rev()
        .map(|c| std::str::from_utf8(c).unwrap_or("?"))
        .collect();
    format!(
        "{}{}{frac}",
        if v < 0.0 { "-" } else { "" },
        groups.join(",")
    )
}

/// ops/s as integers with thousands separators, microseconds with one decimal.
pub fn fmt_value(v: f64, unit: &str) -> String {
    thousands(v, if unit == "us" || v.abs() < 10.0 { 1 } else { 0 })
}

fn fmt_ratio(x: f64) -> String {
    format!("{x:.*}", if x < 0.1 { 3 } else { 2 })
}

fn fmt_opt<T>(v: Option<T>, f: impl Fn(T) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// `v` with a metric suffix and at most three significant digits.
fn fmt_si(v: f64, units: [&str; 4]) -> String {
    let (x, u) = [(1e9, units[3]), (1e6, units[2]), (1e3, units[1])]
        .into_iter()
        .find(|(m, _)| v.abs() >= *m)
        .map_or((v, units[0]), |(m, u)| (v / m, u));
    let s = if x.abs() >= 100.0 || x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    };
    format!("{}{u}", s.trim_end_matches(".0"))
}

fn fmt_ns(ns: u64) -> String {
    fmt_si(ns as f64, ["ns", "us", "ms", "s"])
}

// ---------------------------------------------------------------- summary rows

/// One workload in the first table.
struct Row<'a> {
    w: &'a WorkloadResult,
    medians: Vec<Option<f64>>,
    /// Column of the best fusebox subject, which the ratios are about.
    best_fb: Option<usize>,
    vs_native: Option<f64>,
    vs_peer: Option<f64>,
}

/// Rows that share a subject other than native (backing, nullfs, timingfs
/// workloads each have their own subjects) form one table with their own
/// columns, so one suite does not make a table of mostly empty columns.
struct Table<'a> {
    cols: Vec<&'a SubjectInfo>,
    rows: Vec<Row<'a>>,
}

fn summary_tables<'a>(r: &'a BenchResults) -> Vec<Table<'a>> {
    let avail: Vec<&SubjectInfo> = available(r).collect();
    let mut clusters: Vec<(BTreeSet<&str>, Vec<usize>)> = vec![];
    for (i, w) in r.workloads.iter().enumerate() {
        let own: BTreeSet<&str> = w
            .per_subject
            .iter()
            .map(|s| s.subject.as_str())
            .filter(|n| *n != NATIVE && avail.iter().any(|a| a.name == *n))
            .collect();
        let (mut set, mut rows) = (own.clone(), vec![i]);
        // Merge every cluster this row touches (a union-find by hand: the lists are short).
        let mut k = 0;
        while k < clusters.len() {
            if (!own.is_empty() && !clusters[k].0.is_disjoint(&own))
                || (own.is_empty() && clusters[k].0.is_empty())
            {
                let (s, rs) = clusters.remove(k);
                set.extend(s);
                rows.extend(rs);
            } else {
                k += 1;
            }
        }
        rows.sort_unstable();
        clusters.push((set, rows));
    }
    clusters.sort_by_key(|(_, rows)| rows[0]);
    let fb: Vec<&str> = avail
        .iter()
        .filter(|s| s.is_fusebox)
        .map(|s| s.name.as_str())
        .collect();
    let peers: Vec<&str> = avail
        .iter()
        .filter(|s| s.is_peer)
        .map(|s| s.name.as_str())
        .collect();
    clusters
        .into_iter()
        .map(|(set, idx)| {
            let ws: Vec<&WorkloadResult> = idx.iter().map(|&i| &r.workloads[i]).collect();
            let has_native = ws.iter().any(|w| w.subject(NATIVE).is_some());
            let cols: Vec<&SubjectInfo> = avail
                .iter()
                .copied()
                .filter(|s| set.contains(s.name.as_str()) || s.name == NATIVE && has_native)
                .collect();
            let row = |w: &'a WorkloadResult| {
                // best_peer picks the best median among any list of names.
                let best = w.best_peer(&fb);
                let medians = cols
                    .iter()
                    .map(|s| w.subject(&s.name).and_then(|x| x.median()))
                    .collect();
                let best_fb = best
                    .as_ref()
                    .and_then(|b| cols.iter().position(|s| s.name == *b));
                let vs_native = best.as_ref().and_then(|b| w.ratio_to(b, NATIVE));
                let vs_peer = best
                    .as_ref()
                    .and_then(|b| w.ratio_to(b, &w.best_peer(&peers)?));
                Row {
                    w,
                    medians,
                    best_fb,
                    vs_native,
                    vs_peer,
                }
            };
            Table {
                rows: ws.into_iter().map(row).collect(),
                cols,
            }
        })
        .collect()
}

/// Short subject names for a narrow terminal: `fusebox-uring-pt` -> `fb-ur-pt`.
const ABBREV: [(&str, &str); 5] = [
    ("fusebox", "fb"),
    ("uring", "ur"),
    ("nullfs", "nul"),
    ("adaptive", "ad"),
    ("timingfs", "tfs"),
];

fn abbrev(name: &str) -> String {
    name.split('-')
        .map(|p| ABBREV.iter().find(|(l, _)| *l == p).map_or(p, |(_, s)| s))
        .collect::<Vec<_>>()
        .join("-")
}

// ---------------------------------------------------------------- terminal

/// The first table the user sees: per workload, each subject's median and
/// the best fusebox subject's ratios to native and to the best peer.
pub fn terminal_table(r: &BenchResults) -> String {
    let mut s = String::new();
    let mut abbreviated = false;
    for t in summary_tables(r) {
        let several_fb = t.cols.iter().filter(|c| c.is_fusebox).count() > 1;
        let body: Vec<Vec<String>> = t
            .rows
            .iter()
            .map(|row| {
                let mut c = vec![row.w.name.clone(), row.w.unit.clone()];
                for (i, m) in row.medians.iter().enumerate() {
                    let mark = if !several_fb {
                        ""
                    } else if row.best_fb == Some(i) {
                        "*"
                    } else {
                        " "
                    };
                    c.push(fmt_opt(*m, |v| fmt_value(v, &row.w.unit)) + mark);
                }
                c.push(fmt_opt(row.vs_native, fmt_ratio));
                c.push(fmt_opt(row.vs_peer, fmt_ratio));
                c
            })
            .collect();
        let render = |short: bool| -> (String, usize) {
            let mut head = vec!["workload".to_string(), "unit".into()];
            head.extend(t.cols.iter().map(|c| {
                if short {
                    abbrev(&c.name)
                } else {
                    c.name.clone()
                }
            }));
            head.extend(["fusebox/native".into(), "fusebox/best peer".into()]);
            let table: Vec<&Vec<String>> = std::iter::once(&head).chain(&body).collect();
            let widths: Vec<usize> = (0..head.len())
                .map(|c| {
                    table
                        .iter()
                        .map(|r| r[c].chars().count())
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let total = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            let mut o = String::new();
            for (n, line) in table.iter().enumerate() {
                let cells: Vec<String> = line
                    .iter()
                    .zip(&widths)
                    .enumerate()
                    .map(|(c, (v, w))| {
                        if c < 2 {
                            format!("{v:<w$}")
                        } else {
                            format!("{v:>w$}")
                        }
                    })
                    .collect();
                o.push_str(cells.join("  ").trim_end());
                o.push('\n');
                if n == 0 {
                    o.push_str(&"-".repeat(total));
                    o.push('\n');
                }
            }
            (o, total)
        };
        let (mut text, width) = render(false);
        if width > MAX_WIDTH {
            text = render(true).0;
            abbreviated = true;
        }
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&text);
    }
    out!(s, "\nMedians of {} interleaved repetitions. Ratios: the best fusebox subject (* where several) to native and to the best peer; > 1 = better.\n", r.repetitions);
    let pairs = matched_pairs(r);
    if !pairs.is_empty() {
        s.push_str("\nMatched pairs: each fusebox subject against the peer configured alike (> 1 = fusebox better):\n");
        let width = pairs.iter().map(|p| p.w.name.len()).max().unwrap_or(0);
        let labels: Vec<String> = pairs
            .iter()
            .map(|p| format!("{} / {}", p.fusebox, p.peer))
            .collect();
        let label_w = labels.iter().map(String::len).max().unwrap_or(0);
        for (p, label) in pairs.iter().zip(&labels) {
            out!(
                s,
                "  {:<width$}  {:<label_w$}  {}\n",
                p.w.name,
                label,
                fmt_opt(p.ratio, fmt_ratio)
            );
        }
    }
    if abbreviated {
        let a: Vec<String> = ABBREV.iter().map(|(l, s)| format!("{s} = {l}")).collect();
        out!(s, "Abbreviations: {}.\n", a.join(", "));
    }
    for u in r.subjects.iter().filter(|s| s.unavailable.is_some()) {
        let why = u.unavailable.as_deref().unwrap_or_default();
        let line = why.lines().next().unwrap_or_default();
        out!(
            s,
            "Not measured: {}: {}\n",
            u.name,
            line.chars().take(120).collect::<String>()
        );
    }
    s
}

/// One workload's fusebox subject and the peer it is configured like.
struct Pair<'a> {
    w: &'a WorkloadResult,
    fusebox: &'a str,
    peer: &'a str,
    /// fusebox / peer, oriented so that > 1 is fusebox better.
    ratio: Option<f64>,
}

/// Every (workload, fusebox subject with `matches`) whose peer ran too.
fn matched_pairs(r: &BenchResults) -> Vec<Pair<'_>> {
    let mut out = vec![];
    for w in &r.workloads {
        for sub in available(r).filter(|s| s.is_fusebox) {
            let Some(peer) = sub.matches.as_deref() else {
                continue;
            };
            if w.subject(&sub.name).is_none() || w.subject(peer).is_none() {
                continue;
            }
            out.push(Pair {
                w,
                fusebox: &sub.name,
                peer,
                ratio: w.ratio_to(&sub.name, peer),
            });
        }
    }
    out
}

fn md_pairs(s: &mut String, r: &BenchResults) {
    let pairs = matched_pairs(r);
    if pairs.is_empty() {
        return;
    }
    s.push_str("## Matched pairs\n\nEach fusebox subject against the peer subject configured alike (the same caching, the same passthrough), medians of this run; > 1 = fusebox better.\n\n");
    s.push_str("| workload | unit | fusebox subject | peer subject | fusebox | peer | fusebox / peer |\n|---|---|---|---|---:|---:|---:|\n");
    for p in &pairs {
        let med = |name: &str| {
            fmt_opt(p.w.subject(name).and_then(|x| x.median()), |v| {
                fmt_value(v, &p.w.unit)
            })
        };
        out!(
            s,
            "| `{}` | {} | `{}` | `{}` | {} | {} | {} |\n",
            p.w.name,
            p.w.unit,
            p.fusebox,
            p.peer,
            med(p.fusebox),
            med(p.peer),
            fmt_opt(p.ratio, fmt_ratio)
        );
    }
    s.push('\n');
}

/// The sftp suite's targets, row by row: sftpfs through the kernel (the
/// better of its two transports) against sshfs, its tuned best and rclone,
/// and direct mode against the kernel path.
fn md_sftp_targets(s: &mut String, r: &BenchResults) {
    let rows: Vec<&WorkloadResult> = r
        .workloads
        .iter()
        .filter(|w| w.subject("sftpfs").is_some() && w.subject("sshfs").is_some())
        .collect();
    if rows.is_empty() {
        return;
    }
    s.push_str("## sftpfs against the tools users would run\n\nMedians of this run; > 1 = sftpfs better. `kernel` is the better of sftpfs over classic /dev/fuse and over io_uring; `direct` is direct mode with its caches, against that kernel path.\n\n");
    s.push_str("| workload | unit | kernel | kernel / sshfs | kernel / sshfs-tuned | kernel / rclone | direct / kernel |\n|---|---|---|---:|---:|---:|---:|\n");
    for w in rows {
        let kernel = ["sftpfs", "sftpfs-uring"]
            .into_iter()
            .filter(|n| w.subject(n).and_then(|x| x.median()).is_some())
            .max_by(|a, b| {
                let (x, y) = (
                    w.ratio_to(a, "sshfs").unwrap_or(0.0),
                    w.ratio_to(b, "sshfs").unwrap_or(0.0),
                );
                x.total_cmp(&y)
            })
            .unwrap_or("sftpfs");
        out!(
            s,
            "| `{}` | {} | `{kernel}` | {} | {} | {} | {} |\n",
            w.name,
            w.unit,
            fmt_opt(w.ratio_to(kernel, "sshfs"), fmt_ratio),
            fmt_opt(w.ratio_to(kernel, "sshfs-tuned"), fmt_ratio),
            fmt_opt(w.ratio_to(kernel, "rclone"), fmt_ratio),
            fmt_opt(w.ratio_to("sftpfs-direct", kernel), fmt_ratio),
        );
    }
    s.push('\n');
}

/// The columns of the requests table: a heading and the request kinds
/// it adds up; whatever no column names goes to "other".
type RequestColumns = &'static [(&'static str, &'static [&'static str])];

const SFTP_COLUMNS: RequestColumns = &[
    ("READ", &["READ"]),
    ("WRITE", &["WRITE"]),
    ("LSTAT, STAT, FSTAT", &["LSTAT", "STAT", "FSTAT"]),
    ("OPEN, OPENDIR", &["OPEN", "OPENDIR"]),
    ("READDIR", &["READDIR"]),
    ("SETSTAT", &["SETSTAT", "FSETSTAT"]),
];

/// Garage's names for the S3 API calls.
const S3_COLUMNS: RequestColumns = &[
    ("GET", &["GetObject"]),
    (
        "PUT, parts",
        &[
            "PutObject",
            "UploadPart",
            "CreateMultipartUpload",
            "CompleteMultipartUpload",
        ],
    ),
    ("HEAD", &["HeadObject"]),
    ("LIST", &["ListObjects", "ListObjectsV2"]),
    ("COPY", &["CopyObject", "UploadPartCopy"]),
    ("DELETE", &["DeleteObject", "DeleteObjects"]),
];

/// Requests counted outside the subjects (the sftp suite: at the SFTP
/// server; the objfs suite: at the S3 cluster), medians per repetition.
fn md_requests(s: &mut String, r: &BenchResults) {
    let rows: Vec<(&WorkloadResult, &SubjectRuns)> = r
        .workloads
        .iter()
        .flat_map(|w| w.per_subject.iter().map(move |x| (w, x)))
        .filter(|(_, x)| !x.requests.is_empty())
        .collect();
    if rows.is_empty() {
        return;
    }
    let columns = if r.suite == "objfs" {
        s.push_str("## Requests at the server\n\nS3 requests the cluster received per run, by API call, counted by Garage itself (its `api_s3_request_counter`, summed over the three nodes), medians over repetitions: the same count for every client. A multipart upload counts its create, parts and completion under PUT.\n\n");
        S3_COLUMNS
    } else {
        s.push_str("## Requests at the server\n\nSFTP requests the server received per run, by type, counted by the server's subsystem (a relay in front of OpenSSH's sftp-server), medians over repetitions: the same count for every client. Open and close include OPENDIR; reads and writes are READ and WRITE packets (each at most the server's 255 KiB).\n\n");
        SFTP_COLUMNS
    };
    s.push_str("| workload | subject | all |");
    for (head, _) in columns {
        out!(s, " {head} |");
    }
    s.push_str(" other |\n|---|---|---:|");
    for _ in columns {
        s.push_str("---:|");
    }
    s.push_str("---:|\n");
    let mut last = "";
    for (w, x) in rows {
        let head = if w.name != last {
            format!("`{}`", w.name)
        } else {
            String::new()
        };
        last = &w.name;
        let med = |names: &[&str]| -> f64 {
            let reps = x.values.len().max(1);
            let per_rep: Vec<f64> = (0..reps)
                .map(|i| {
                    names
                        .iter()
                        .map(|n| {
                            x.requests
                                .get(*n)
                                .and_then(|v| v.get(i))
                                .copied()
                                .unwrap_or(0.0)
                        })
                        .sum()
                })
                .collect();
            median(&per_rep).unwrap_or(0.0)
        };
        let all: Vec<&str> = x.requests.keys().map(String::as_str).collect();
        let other: Vec<&str> = all
            .iter()
            .copied()
            .filter(|k| !columns.iter().any(|(_, names)| names.contains(k)))
            .collect();
        out!(s, "| {head} | `{}` | {:.0} |", x.subject, med(&all));
        for (_, names) in columns {
            out!(s, " {:.0} |", med(names));
        }
        out!(s, " {:.0} |\n", med(&other));
    }
    s.push('\n');
}

/// objfs against s3fs, rclone (its better cache mode for the row) and
/// the bench's own client, with the targets.
fn md_objfs_targets(s: &mut String, r: &BenchResults) {
    let rows: Vec<&WorkloadResult> = r
        .workloads
        .iter()
        .filter(|w| w.subject("objfs").is_some() && w.subject("s3fs").is_some())
        .collect();
    if rows.is_empty() {
        return;
    }
    s.push_str("## objfs against the tools users would run\n\nMedians of this run; > 1 = objfs better. `rclone` is the better of its two cache modes for the row. `objfs-behind` is objfs with `upload=behind`, where a row writes: close returns before the upload, as rclone's does. Targets: every metadata row ≥ 2 x s3fs and ≥ 1.0 x rclone; sequential rows ≥ 1.5 x s3fs, ≥ 1.0 x rclone and ≥ 0.8 x the raw client.\n\n");
    s.push_str("| workload | unit | objfs / s3fs | objfs / rclone | objfs-behind / rclone | rclone mode | objfs / raw client |\n|---|---|---:|---:|---:|---|---:|\n");
    for w in rows {
        let rclone = ["rclone-writes", "rclone-full"]
            .into_iter()
            .filter_map(|n| Some((n, w.ratio_to("objfs", n)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let behind = rclone.and_then(|(mode, _)| w.ratio_to("objfs-behind", mode));
        out!(
            s,
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            w.name,
            w.unit,
            fmt_opt(w.ratio_to("objfs", "s3fs"), fmt_ratio),
            fmt_opt(rclone.map(|r| r.1), fmt_ratio),
            fmt_opt(behind, fmt_ratio),
            rclone.map_or("-".to_string(), |r| format!("`{}`", r.0)),
            fmt_opt(w.ratio_to("objfs", "raw-client"), fmt_ratio),
        );
    }
    s.push('\n');
}

/// The daemons' peak memory, where the suite records it.
fn md_memory(s: &mut String, r: &BenchResults) {
    let rows: Vec<(&WorkloadResult, &SubjectRuns)> = r
        .workloads
        .iter()
        .filter(|w| w.group == "objfs")
        .flat_map(|w| w.per_subject.iter().map(move |x| (w, x)))
        .filter(|(_, x)| !x.daemon_peak_rss_mib.is_empty())
        .collect();
    if rows.is_empty() {
        return;
    }
    s.push_str("## Memory\n\nThe daemon's peak resident memory during each run (a fresh mount per run: the high-water mark of each of its processes, summed), MiB: median and max over the repetitions.\n\n| workload | subject | peak RSS, median | max |\n|---|---|---:|---:|\n");
    let mut last = "";
    for (w, x) in rows {
        let head = if w.name != last {
            format!("`{}`", w.name)
        } else {
            String::new()
        };
        last = &w.name;
        let max = x
            .daemon_peak_rss_mib
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        out!(
            s,
            "| {head} | `{}` | {:.0} | {:.0} |\n",
            x.subject,
            median(&x.daemon_peak_rss_mib).unwrap_or(0.0),
            max
        );
    }
    s.push('\n');
}

/// CPU time and daemon context switches per operation, for workloads that
/// count their operations: where each subject's time goes, daemons side by
/// side.
fn md_cost_per_op(s: &mut String, r: &BenchResults) {
    let rows: Vec<(&WorkloadResult, &SubjectRuns)> = r
        .workloads
        .iter()
        .flat_map(|w| w.per_subject.iter().map(move |x| (w, x)))
        .filter(|(_, x)| !x.ops.is_empty() && x.subject != NATIVE)
        .collect();
    if rows.is_empty() {
        return;
    }
    s.push_str("## Cost per operation\n\nMedians over repetitions of (per repetition) CPU time and context switches divided by the operations done. Daemon: every thread of the serving process, user + system; its context switches are mostly the wake-ups it took to serve. Workload: fio's or the bench's own threads. Where both CPUs are saturated, daemon + workload CPU per operation is what decides throughput.\n\n");
    s.push_str("| workload | subject | daemon CPU us/op | workload CPU us/op | daemon context switches/op |\n|---|---|---:|---:|---:|\n");
    let mut last = "";
    for (w, x) in rows {
        let head = if w.name != last {
            format!("`{}`", w.name)
        } else {
            String::new()
        };
        last = &w.name;
        let us = |v: Option<f64>| fmt_opt(v, |c| format!("{:.2}", c * 1e6));
        out!(
            s,
            "| {head} | `{}` | {} | {} | {} |\n",
            x.subject,
            us(x.per_op(&x.daemon_cpu_s)),
            us(x.per_op(&x.workload_cpu_s)),
            fmt_opt(x.per_op(&x.daemon_ctx_switches), |c| format!("{c:.2}"))
        );
    }
    s.push('\n');
}

// ---------------------------------------------------------------- markdown

fn group_blurb(g: &str) -> &'static str {
    match g {
        "vangoor" => "Vangoor et al., *To FUSE or Not to FUSE* (FAST '17): fio random and sequential I/O at 4K..1M with 1 and N threads; file create/read/delete.",
        "rfuse" => "RFUSE (FAST '24): fio thread sweeps, FxMark metadata scalability, NullFS request latency.",
        "xfuse" => "XFUSE (ATC '21): random 4 KiB reads on TimingFS, which emulates a fast device's latency.",
        "macro" => "filebench personalities: fileserver, webserver, varmail.",
        "quick" => "One workload of each kind, short runs: the README's demo.",
        "peer" => "fusebox against libfuse's own FUSE-over-io_uring (passthrough_hp built from a libfuse source tree): fusebox configured like passthrough_hp (caching, passthrough) and in its best serving settings; the same fast-path workloads, and one GETATTR round trip with nothing cached. How to tell a row the kernel limits for both: compare it with the machine's round trip (Machine, above) and with the daemon CPU per operation (Cost per operation): a row whose time per request is the round trip plus the same daemon CPU on both sides has nothing left for a daemon to win. The per-request breakdown of both daemons and the rows it limits are in DESIGN.md, \"Against libfuse's io_uring\".",
        "later" => "Answering later: timingfs with 5 ms on every request (a remote server's round trip), N requests at once (N psync jobs, or one libaio job N deep; O_DIRECT 4 KiB reads, so each read is a request). `block`: the handler holds its thread, as with every synchronous FUSE library (2 classic workers, or 2 io_uring queue threads): the baseline. `token`: the handler takes its reply token and a timer thread answers. `async`: the async API, a tokio task per request. Attributes are cached (attr_timeout=3600, noatime): a GETATTR before a read would hold the libaio job's io_submit for 5 ms. Target: at least 0.8 x N / 5 ms requests/s for token and async.",
        "recovery" => "Replacing the server under a mounted filesystem: supervised stackfs and pathfs (the default of `fusebox mount stackfs|pathfs`), over classic /dev/fuse and over io_uring (where the supervisor holds the rings), with 10 or 100,000 files known to the kernel (each looked up through the mount, so each is a node the server hands over), a probe in a loop (a statx forced to the server, or a 4 KiB O_DIRECT pread), and the server replaced once per repetition, by `fusebox upgrade` or by SIGKILL (the supervisor starts the next server, which restores the nodes and open files and has the kernel resend what was unanswered). The value is the longest wait between two probe calls that repetition: the pause an application sees. Median of 7 repetitions; the spread's upper end is the max. Targets: upgrade pause under 20 ms, crash to serving under 200 ms with 100,000 inodes. The `steady-` rows are what supervision costs while nothing fails (the fast-path workloads, 4 KiB O_DIRECT reads and writes, create/stat/unlink of 15,000 files): stackfs and pathfs over classic /dev/fuse and over io_uring, supervised (the default; every lookup, open and release also goes into the ledger, every create and unlink is journaled with one more probe of its name; over io_uring each step of a ring entry is also recorded in its slot, and the supervisor's SQ thread issues the ring commands) and with `--no-recovery`.",
        "compat" => "Unchanged Debian programs on Debian's libfuse3 3.14 and on fusebox's drop-in libfuse3.so.3 (the same binary, the loader pointed at the drop-in with LD_LIBRARY_PATH), over classic /dev/fuse and io_uring: sshfs against OpenSSH on loopback serving the backing directory (list 10,000 files with lstat, read 1,000 4 KiB files, read a 1 GiB file), squashfuse over an uncompressed squashfs image of the backing directory (random 4 KiB O_DIRECT reads, list 10,000 files), fuse-overlayfs with the backing directory as its lower layer (create, stat, unlink 10,000 files). Ratios are against the same program on Debian's libfuse3. Goals: never slower, and at least 1.5x on metadata with io_uring.",
        "sftp" => "sftpfs (`fusebox mount sftpfs`) beside Debian's sshfs 3.7.3 (its defaults, and tuned: `max_read=65536,max_conns=4,kernel_cache`) and rclone 1.60 mount (`--vfs-cache-mode full`, its best), all over one OpenSSH server on loopback serving the backing directory, reached through a proxy that adds 0, 10 or 50 ms of round trip (the workload's name says which; this kernel has no netem). sftpfs runs through the kernel over classic /dev/fuse (supervised, the default) and io_uring, and in direct mode (`fusebox run --fs sftpfs:...`) with and without direct mode's caches. What takes a round trip per file is scaled down as the delay grows, so compare rates within a delay. The server's SFTP subsystem counts the requests each client sends (see the requests section). rclone in full cache mode writes to a local cache and uploads after close: its write rows measure its cache, not the link.",
        "direct" => "Direct mode (`fusebox run --fs stackfs:SRC --at DIR -- PROGRAM`): stackfs served inside the workload's own process, its system calls caught by rewritten call sites (zpoline's trampoline, sites found by syscall user dispatch), against the same stackfs through the kernel (classic and io_uring) and native tmpfs. The workload runs in a worker process started under `fusebox run`, so its CPU time includes the filesystem's. `direct-nocache` turns the metadata cache off (the measurement its default rests on); `direct-dispatch` catches every call by syscall user dispatch, as without root. Goals: metadata at least 0.7x native and at least 3x the kernel path; no row slower than the kernel path.",
        "objfs" => "objfs (`fusebox mount objfs`) beside Debian's s3fs 1.90 (its defaults) and rclone 1.60 mount (`--vfs-cache-mode writes` and `full`: the two modes in which it writes files as applications do), all on one bucket of a three-node Garage cluster (replication factor 3) on this machine, every client talking to the same node; and the bench's own S3 client, no filesystem, where a row is a listing or whole-object transfers: the limit. Before each run the bucket's copy of the workload's dataset is brought up to date (untimed, uncounted); each run mounts afresh. Sequential rows go once through 1 GiB (1 file, or 4 of 256 MiB); their rate is over the whole fio run, end fsync included, so an upload at close or fsync counts. rclone writes to its local cache and uploads after close, without waiting: its write rows measure its cache; `objfs-behind` (objfs with `upload=behind`, on the rows that write) is the like-for-like mode. S3 requests per subject are in the requests section; peak memory in the memory section.",
        _ => "",
    }
}

/// Links the charts `pick` accepts that are not placed yet.
fn link_charts(
    s: &mut String,
    charts: &[(String, String)],
    placed: &mut [bool],
    pick: impl Fn(&str) -> bool,
) {
    for (i, (file, alt)) in charts.iter().enumerate() {
        if !placed[i] && pick(file) {
            placed[i] = true;
            out!(s, "![{}](charts/{})\n\n", alt.replace(['[', ']'], ""), file);
        }
    }
}

fn latency_cells(o: &OpSnapshot) -> String {
    let q = |x| fmt_ns(o.quantile_ns(x));
    format!(
        "{} | {} | {} | {} | {} | {} |",
        thousands(o.count as f64, 0),
        o.errors,
        fmt_ns(o.mean_ns()),
        q(0.5),
        q(0.9),
        q(0.99)
    )
}

fn top_ops(snap: &Snapshot, n: usize) -> Vec<&str> {
    let mut ops: Vec<&OpSnapshot> = snap.ops.iter().filter(|o| o.count > 0).collect();
    ops.sort_by(|a, b| b.count.cmp(&a.count).then(a.name.cmp(&b.name)));
    ops.into_iter().take(n).map(|o| o.name.as_str()).collect()
}

/// One subject's statistics summed over all its workloads.
fn merged_stats(r: &BenchResults, subject: &str) -> Option<Snapshot> {
    merge(
        r.workloads
            .iter()
            .filter_map(|w| w.subject(subject)?.stats.as_ref()),
    )
}

/// Per-type totals (counts, errors, time, bins) of several snapshots, by type name.
fn merge<'a>(snaps: impl Iterator<Item = &'a Snapshot>) -> Option<Snapshot> {
    let mut acc: Option<Snapshot> = None;
    for st in snaps {
        let m = acc.get_or_insert_with(|| Snapshot {
            transport: st.transport.clone(),
            ..Default::default()
        });
        for o in &st.ops {
            let i = m
                .ops
                .iter()
                .position(|x| x.name == o.name)
                .unwrap_or_else(|| {
                    m.ops.push(OpSnapshot {
                        opcode: o.opcode,
                        name: o.name.clone(),
                        ..Default::default()
                    });
                    m.ops.len() - 1
                });
            let t = &mut m.ops[i];
            (t.count, t.errors, t.total_ns) = (
                t.count + o.count,
                t.errors + o.errors,
                t.total_ns + o.total_ns,
            );
            if t.bins.len() < o.bins.len() {
                t.bins.resize(o.bins.len(), 0);
            }
            t.bins.iter_mut().zip(&o.bins).for_each(|(a, b)| *a += b);
        }
    }
    acc
}

/// Per-type request counts (as in Vangoor et al.'s figures) and latency
/// percentiles of one fusebox subject over one group's workloads.
fn md_group_stats(s: &mut String, subject: &str, ws: &[&WorkloadResult]) {
    let snaps: Vec<(&WorkloadResult, &Snapshot)> = ws
        .iter()
        .filter_map(|w| Some((*w, w.subject(subject)?.stats.as_ref()?)))
        .collect();
    let Some(sum) = merge(snaps.iter().map(|(_, st)| *st)) else {
        return;
    };
    let top = top_ops(&sum, 6);
    out!(s, "### {subject}: requests per type\n\nSummed over the repetitions; the {} most frequent types of this group.\n\n", top.len());
    out!(
        s,
        "| workload | total | {} | other |\n|---|---:|{}---:|\n",
        top.join(" | "),
        "---:|".repeat(top.len())
    );
    for (w, st) in &snaps {
        let counts: Vec<u64> = top
            .iter()
            .map(|t| st.op(t).map_or(0, |o| o.count))
            .collect();
        let cols: Vec<String> = counts.iter().map(|&c| thousands(c as f64, 0)).collect();
        let other = st.total_requests() - counts.iter().sum::<u64>();
        out!(
            s,
            "| `{}` | {} | {} | {} |\n",
            w.name,
            thousands(st.total_requests() as f64, 0),
            cols.join(" | "),
            thousands(other as f64, 0)
        );
    }
    out!(s, "\n### {subject}: service time per type\n\nIn the daemon, per request; percentiles are the upper bounds of log2 bins.\n\n");
    s.push_str("| workload | type | count | errors | mean | p50 | p90 | p99 |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (w, st) in &snaps {
        for t in top_ops(st, 3) {
            if let Some(o) = st.op(t) {
                out!(s, "| `{}` | {} | {}\n", w.name, t, latency_cells(o));
            }
        }
    }
    s.push('\n');
}

/// The report: run and machine, subjects, the summary table, per-group
/// details, request statistics; `charts` are (file name in `charts/`, alt text).
pub fn markdown(r: &BenchResults, charts: &[(String, String)]) -> String {
    let mut s = String::new();
    let m = &r.machine;
    out!(
        s,
        "# fusebox bench: suite `{}` v{}\n\n",
        r.suite,
        r.suite_version
    );
    out!(s, "Run started {} from fusebox `{}`; {} interleaved repetitions per workload and subject (results schema {}).\n\n", r.started, m.fusebox_commit, r.repetitions, r.schema);
    s.push_str("## Machine\n\n| | |\n|---|---|\n");
    out!(
        s,
        "| kernel | {} |\n| CPU | {} ({} CPUs) |\n| memory | {:.1} GiB |\n",
        cell(&m.kernel),
        cell(&m.cpu_model),
        m.cpus,
        m.memory_gib
    );
    out!(
        s,
        "| backing store | {} |\n| fusebox commit | `{}` |\n",
        cell(&m.backing),
        cell(&m.fusebox_commit)
    );
    if let Some(rt) = &m.round_trip {
        let across = rt
            .cross_cpu_us
            .map_or_else(String::new, |us| format!(", {us:.1} us across two CPUs"));
        out!(
            s,
            "| process round trip | {:.1} us on one CPU{} (pipe ping-pong: what a FUSE request costs at least when application and daemon both block) |\n",
            rt.same_cpu_us,
            across
        );
    }
    s.push('\n');
    s.push_str("## Subjects\n\n| subject | kind | description | status |\n|---|---|---|---|\n");
    for sub in &r.subjects {
        let kind = if sub.is_fusebox {
            "fusebox"
        } else if sub.is_peer {
            "peer"
        } else {
            "baseline"
        };
        let status = sub.unavailable.as_ref().map_or_else(
            || "measured".to_string(),
            |why| format!("**unavailable**: {}", cell(why)),
        );
        out!(
            s,
            "| `{}` | {} | {} | {} |\n",
            sub.name,
            kind,
            cell(&sub.description),
            status
        );
    }
    s.push_str("\n## Summary\n\n");
    out!(s, "How to read: every number is the median of {} repetitions, interleaved (each repetition runs every subject once, in turn, so a drift of the machine hits all subjects alike); ", r.repetitions);
    s.push_str("the spread in the sections below is min..max over those repetitions. Ratios compare subjects measured in this one run on this machine and are oriented so that > 1 is better than the baseline ");
    s.push_str("(throughput: subject / baseline; latency in us: baseline / subject). \"fusebox\" in the ratio columns is the best fusebox subject of the row (in bold); the best peer is the best of libfuse (its io_uring mode built from source, and Debian's 3.14), fuser and go-fuse. ");
    s.push_str("Absolute numbers depend on the machine, kernel and backing store: quote ratios from one run, never a lone absolute number as a claim.\n\n");
    for t in summary_tables(r) {
        let names: Vec<String> = t.cols.iter().map(|c| format!("`{}`", c.name)).collect();
        out!(s, "| workload | unit | {} | fusebox/native | fusebox/best peer |\n|---|---|{}---:|---:|\n", names.join(" | "), "---:|".repeat(names.len()));
        for row in &t.rows {
            let value = |(i, m): (usize, &Option<f64>)| {
                let v = fmt_opt(*m, |v| fmt_value(v, &row.w.unit));
                if row.best_fb == Some(i) {
                    format!("**{v}**")
                } else {
                    v
                }
            };
            let cells: Vec<String> = row.medians.iter().enumerate().map(value).collect();
            out!(
                s,
                "| `{}` | {} | {} | {} | {} |\n",
                row.w.name,
                row.w.unit,
                cells.join(" | "),
                fmt_opt(row.vs_native, fmt_ratio),
                fmt_opt(row.vs_peer, fmt_ratio)
            );
        }
        s.push('\n');
    }
    md_pairs(&mut s, r);
    md_sftp_targets(&mut s, r);
    md_objfs_targets(&mut s, r);
    md_requests(&mut s, r);
    md_memory(&mut s, r);
    md_cost_per_op(&mut s, r);
    let mut placed = vec![false; charts.len()];
    let fusebox: Vec<&SubjectInfo> = available(r).filter(|s| s.is_fusebox).collect();
    for g in groups(r) {
        out!(s, "## {g}\n\n");
        if !group_blurb(g).is_empty() {
            out!(s, "{}\n\n", group_blurb(g));
        }
        let (bar, sweep) = (
            format!("bar-{}.svg", slug(g)),
            format!("sweep-{}-", slug(g)),
        );
        link_charts(&mut s, charts, &mut placed, |f| {
            f == bar || f.starts_with(&sweep)
        });
        s.push_str("| workload | subject | median | spread (min..max) | vs native | daemon CPU s/rep | workload CPU s/rep | error |\n|---|---|---:|---:|---:|---:|---:|---|\n");
        let ws: Vec<&WorkloadResult> = r.workloads.iter().filter(|w| w.group == g).collect();
        for w in &ws {
            for (i, runs) in w.per_subject.iter().enumerate() {
                let head = if i == 0 {
                    format!("`{}`<br>{}", w.name, cell(&w.description))
                } else {
                    String::new()
                };
                let med = fmt_opt(runs.median(), |v| {
                    format!("{} {}", fmt_value(v, &w.unit), w.unit)
                });
                let spread = fmt_opt(runs.spread(), |(a, b)| {
                    format!("{}..{}", fmt_value(a, &w.unit), fmt_value(b, &w.unit))
                });
                let cpu = |v: &[f64]| fmt_opt(median(v), |c| format!("{c:.2}"));
                let err = runs.error.as_deref().map(cell).unwrap_or_default();
                let vs = fmt_opt(w.ratio_to(&runs.subject, NATIVE), fmt_ratio);
                out!(
                    s,
                    "| {head} | `{}` | {med} | {spread} | {vs} | {} | {} | {err} |\n",
                    runs.subject,
                    cpu(&runs.daemon_cpu_s),
                    cpu(&runs.workload_cpu_s)
                );
            }
        }
        s.push('\n');
        for fb in &fusebox {
            md_group_stats(&mut s, &fb.name, &ws);
        }
    }
    let merged: Vec<(&str, Snapshot)> = fusebox
        .iter()
        .filter_map(|f| Some((f.name.as_str(), merged_stats(r, &f.name)?)))
        .collect();
    if !merged.is_empty() {
        s.push_str("## Request statistics over the whole run\n\nPer fusebox subject, summed over all its workloads; service time in the daemon, percentiles are log2-bin upper bounds.\n\n");
    }
    for (name, snap) in &merged {
        out!(s, "### {name}\n\n| type | count | errors | mean | p50 | p90 | p99 |\n|---|---:|---:|---:|---:|---:|---:|\n");
        for t in top_ops(snap, 10) {
            if let Some(o) = snap.op(t) {
                out!(s, "| {t} | {}\n", latency_cells(o));
            }
        }
        s.push('\n');
        let hist = format!("hist-{}.svg", slug(name));
        link_charts(&mut s, charts, &mut placed, |f| f == hist);
    }
    if placed.iter().any(|p| !p) {
        s.push_str("## Other charts\n\n");
        link_charts(&mut s, charts, &mut placed, |_| true);
    }
    s
}

// ---------------------------------------------------------------- SVG

fn svg_open(w: f64, h: f64, title: &str) -> String {
    let mut s = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w:.0}\" height=\"{h:.0}\" viewBox=\"0 0 {w:.0} {h:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n");
    out!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", esc(title));
    s
}

/// A legend row (wrapping past 790 px) from y; returns it and the y below it.
fn legend(cs: &[(&str, &str)], y: f64) -> (String, f64) {
    let (mut s, mut x, mut y) = (String::from("<g>\n"), 10.0, y);
    for (n, c) in cs {
        let w = 14.0 + 6.5 * n.chars().count() as f64 + 18.0;
        if x + w > 790.0 && x > 10.0 {
            (x, y) = (10.0, y + 16.0);
        }
        out!(s, "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{c}\"/><text x=\"{:.1}\" y=\"{y:.1}\">{}</text>\n", y - 9.0, x + 14.0, esc(n));
        x += w;
    }
    s.push_str("</g>\n");
    (s, y + 10.0)
}

/// A step of 1, 2 or 5 x 10^k giving about five ticks up to `max`; (step, axis top).
fn nice_axis(max: f64) -> (f64, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (1.0, 1.0);
    }
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = mag
        * [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .find(|f| raw / mag <= *f)
            .unwrap_or(10.0);
    (step, (max / step).ceil() * step)
}

/// Grouped horizontal bars, one per subject, for the workloads of `group`,
/// relative to native (or, where a group has no native runs, e.g. XFUSE's
/// TimingFS, to the first subject that has data) and oriented so > 1 is
/// better. The axis is logarithmic: ratios span 0.01 (metadata) to ~2, a
/// linear axis would flatten the small ones to slivers, and on a log axis a
/// factor looks the same either side of 1. Bars grow from the baseline line.
pub fn bar_chart_svg(r: &BenchResults, group: &str) -> Option<String> {
    let ws: Vec<&WorkloadResult> = r.workloads.iter().filter(|w| w.group == group).collect();
    let has = |w: &WorkloadResult, n: &str| w.subject(n).and_then(|x| x.median()).is_some();
    let base = if ws.iter().any(|w| has(w, NATIVE)) {
        NATIVE
    } else {
        available(r)
            .map(|s| s.name.as_str())
            .find(|n| ws.iter().any(|w| has(w, n)))?
    };
    let subs: Vec<&str> = available(r)
        .map(|s| s.name.as_str())
        .filter(|n| *n != base)
        .collect();
    let rows: Vec<(&WorkloadResult, Vec<(&str, f64)>)> = ws
        .iter()
        .map(|w| {
            (
                *w,
                subs.iter()
                    .filter_map(|n| Some((*n, w.ratio_to(n, base)?)))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, v)| !v.is_empty())
        .collect();
    let all = rows.iter().flat_map(|(_, v)| v.iter().map(|(_, x)| *x));
    let (min, max) = all.fold((1.0f64, 1.0f64), |(a, b), x| (a.min(x), b.max(x)));
    if rows.is_empty() {
        return None;
    }
    // From the 1-2-5 tick at or below the smallest ratio, to a little past 1 or the largest.
    let k = min.log10().floor().max(-6.0);
    let lmin = [5.0, 2.0, 1.0]
        .into_iter()
        .map(|m: f64| (m * 10f64.powf(k)).log10())
        .find(|l| *l <= min.log10() + 1e-9)
        .unwrap_or(k);
    let lmax = max.log10().max(0.0) + 0.1;
    let (x0, x1, bar, gap) = (220.0, 710.0, 11.0, 10.0);
    let x = |v: f64| x0 + (v.log10().clamp(lmin, lmax) - lmin) / (lmax - lmin) * (x1 - x0);
    let used: Vec<&str> = subs
        .iter()
        .copied()
        .filter(|n| rows.iter().any(|(_, v)| v.iter().any(|(m, _)| m == n)))
        .collect();
    let cs = colours(r, &used);
    let (leg, ly) = legend(&cs, 42.0);
    let top = ly + 22.0;
    let bottom = top
        + rows
            .iter()
            .map(|(_, v)| v.len() as f64 * bar + gap)
            .sum::<f64>();
    let title = format!("{group}: relative to {base} (log scale; > 1 = better than {base})");
    let mut s = svg_open(800.0, bottom + 46.0, &title);
    s.push_str(&leg);
    s.push_str("<g>\n");
    for k in lmin.floor() as i32..=lmax.ceil() as i32 {
        for m in [1.0, 2.0, 5.0] {
            let v = m * 10f64.powi(k);
            if v.log10() < lmin - 1e-9 || v.log10() > lmax + 1e-9 {
                continue;
            }
            let label = if k >= 0 {
                format!("{v:.0}")
            } else {
                format!("{v:.*}", (-k) as usize)
            };
            out!(s, "<line x1=\"{0:.1}\" y1=\"{top:.1}\" x2=\"{0:.1}\" y2=\"{bottom:.1}\" stroke=\"#e0e0e0\"/>", x(v));
            out!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{label}</text>\n",
                x(v),
                bottom + 14.0
            );
        }
    }
    s.push_str("</g>\n");
    out!(s, "<line x1=\"{0:.1}\" y1=\"{1:.1}\" x2=\"{0:.1}\" y2=\"{bottom:.1}\" stroke=\"#333\" stroke-dasharray=\"4 3\"/>", x(1.0), top - 6.0);
    out!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{} = 1</text>\n",
        x(1.0),
        top - 9.0,
        esc(base)
    );
    let mut y = top;
    for (w, v) in &rows {
        let h = v.len() as f64 * bar;
        let label = w.name.strip_prefix(&format!("{group}/")).unwrap_or(&w.name);
        let label: String = if label.chars().count() > 34 {
            label.chars().take(33).chain(['…']).collect()
        } else {
            label.into()
        };
        out!(
            s,
            "<g>\n<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            x0 - 8.0,
            y + h / 2.0 + 4.0,
            esc(&label)
        );
        for (j, (n, ratio)) in v.iter().enumerate() {
            let by = y + j as f64 * bar;
            let (a, b) = (x(1.0).min(x(*ratio)), x(1.0).max(x(*ratio)));
            out!(
                s,
                "<rect x=\"{a:.1}\" y=\"{by:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\">",
                (b - a).max(1.0),
                bar - 1.0,
                colour_of(&cs, n)
            );
            out!(
                s,
                "<title>{} on {}: {}</title></rect>",
                esc(n),
                esc(&w.name),
                fmt_ratio(*ratio)
            );
            out!(
                s,
                "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"9\">{}</text>\n",
                b + 4.0,
                by + bar - 2.0,
                fmt_ratio(*ratio)
            );
        }
        s.push_str("</g>\n");
        y += h + gap;
    }
    let (mid, b) = ((x0 + x1) / 2.0, esc(base));
    out!(s, "<text x=\"{mid:.1}\" y=\"{:.1}\" text-anchor=\"middle\">ratio of medians to {b} (throughput: subject / {b}; latency: {b} / subject)</text>\n", bottom + 34.0);
    s.push_str("</svg>\n");
    Some(s)
}

/// Lines over thread count (log2 x axis, so 1, 2, 4 .. 32 are evenly
/// spaced; linear y from 0) for the sweep `prefix` (workloads named
/// `<prefix>-<N>th`), one line per subject with data.
pub fn sweep_chart_svg(r: &BenchResults, prefix: &str) -> Option<String> {
    let members = sweep_members(r, prefix);
    let xs: BTreeSet<u32> = members.iter().map(|(t, _)| *t).collect();
    if xs.len() < 2 {
        return None;
    }
    let unit = members[0].1.unit.as_str();
    let lines: Vec<(&str, Vec<(u32, f64)>)> = available(r)
        .map(|s| {
            (
                s.name.as_str(),
                members
                    .iter()
                    .filter_map(|(t, w)| Some((*t, w.subject(&s.name)?.median()?)))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    let max = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, v)| *v))
        .fold(f64::NAN, f64::max);
    if lines.is_empty() {
        return None;
    }
    let (step, ymax) = nice_axis(max);
    let names: Vec<&str> = lines.iter().map(|(n, _)| *n).collect();
    let cs = colours(r, &names);
    let (leg, ly) = legend(&cs, 42.0);
    let (x0, x1, y0) = (80.0, 770.0, ly + 16.0);
    let y1 = y0 + 300.0;
    let (lo, hi) = (
        f64::from((*xs.first()?).max(1)).log2(),
        f64::from(*xs.last()?).log2(),
    );
    let span = if hi > lo { hi - lo } else { 1.0 };
    let px = |t: u32| x0 + (f64::from(t.max(1)).log2() - lo) / span * (x1 - x0);
    let py = |v: f64| y1 - v / ymax * (y1 - y0);
    let better = if unit == "us" { "lower" } else { "higher" };
    let mut s = svg_open(
        800.0,
        y1 + 50.0,
        &format!(
            "{}: median {unit} by thread count ({better} is better)",
            prefix.trim_end_matches('-')
        ),
    );
    s.push_str(&leg);
    s.push_str("<g>\n");
    for j in 0..=((ymax / step).round() as u32) {
        let v = f64::from(j) * step;
        out!(
            s,
            "<line x1=\"{x0}\" y1=\"{0:.1}\" x2=\"{x1}\" y2=\"{0:.1}\" stroke=\"#e0e0e0\"/>",
            py(v)
        );
        out!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            x0 - 6.0,
            py(v) + 4.0,
            fmt_si(v, ["", "k", "M", "G"])
        );
    }
    for t in &xs {
        out!(
            s,
            "<line x1=\"{0:.1}\" y1=\"{y0:.1}\" x2=\"{0:.1}\" y2=\"{y1:.1}\" stroke=\"#f0f0f0\"/>",
            px(*t)
        );
        out!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t}</text>\n",
            px(*t),
            y1 + 16.0
        );
    }
    s.push_str("</g>\n");
    out!(
        s,
        "<line x1=\"{x0}\" y1=\"{y1:.1}\" x2=\"{x1}\" y2=\"{y1:.1}\" stroke=\"#333\"/>\n"
    );
    out!(
        s,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">threads</text>\n",
        (x0 + x1) / 2.0,
        y1 + 36.0
    );
    let my = (y0 + y1) / 2.0;
    out!(s, "<text x=\"20\" y=\"{my:.1}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {my:.1})\">{}</text>\n", esc(unit));
    for (name, pts) in &lines {
        let c = colour_of(&cs, name);
        let path: Vec<String> = pts
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", px(*t), py(*v)))
            .collect();
        out!(
            s,
            "<g>\n<polyline points=\"{}\" fill=\"none\" stroke=\"{c}\" stroke-width=\"2\"/>\n",
            path.join(" ")
        );
        for (t, v) in pts {
            out!(s, "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{c}\"><title>{} at {t} threads: {} {}</title></circle>\n", px(*t), py(*v), esc(name), fmt_value(*v, unit), esc(unit));
        }
        s.push_str("</g>\n");
    }
    s.push_str("</svg>\n");
    Some(s)
}

/// Latency histograms of the request types `ops` (those `snap` has), one
/// panel each over a shared x axis of log2 bins (bin N = 2^(N+1)..2^(N+2)
/// ns); bar height is the share of that type's requests, scaled to its
/// fullest bin, so types with very different counts compare by shape.
pub fn histogram_svg(snap: &Snapshot, ops: &[&str]) -> Option<String> {
    let ops: Vec<&OpSnapshot> = ops
        .iter()
        .filter_map(|n| snap.op(n))
        .filter(|o| o.bins.iter().any(|&b| b > 0))
        .collect();
    let nonzero = |o: &&OpSnapshot| {
        o.bins
            .iter()
            .enumerate()
            .filter(|(_, b)| **b > 0)
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    let lo = ops
        .iter()
        .filter_map(|o| nonzero(o).first().copied())
        .min()?;
    let hi = ops
        .iter()
        .filter_map(|o| nonzero(o).last().copied())
        .max()?;
    let nb = hi - lo + 1;
    let (x0, x1, panel, head) = (70.0, 780.0, 70.0, 30.0);
    let bw = (x1 - x0) / nb as f64;
    let bottom_all = 36.0 + ops.len() as f64 * (panel + head);
    let mut title = String::from("Request service time by type");
    if !snap.mountpoint.is_empty() {
        out!(title, ": {}", snap.mountpoint);
    }
    if !snap.transport.is_empty() {
        out!(title, " ({})", snap.transport);
    }
    let mut s = svg_open(800.0, bottom_all + 44.0, &title);
    for (k, o) in ops.iter().enumerate() {
        let top = 36.0 + k as f64 * (panel + head) + head;
        let bottom = top + panel;
        let bins = |i: usize| o.bins.get(i).copied().unwrap_or(0);
        let peak = (lo..=hi).map(bins).max().unwrap_or(0).max(1) as f64;
        let total = o.bins.iter().sum::<u64>().max(1) as f64;
        out!(
            s,
            "<g>\n<text x=\"{x0}\" y=\"{:.1}\" font-weight=\"bold\">{}</text>",
            top - 8.0,
            esc(&o.name)
        );
        let q = |x| fmt_ns(o.quantile_ns(x));
        out!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\">{} requests, mean {}, p50 ≤ {}, p99 ≤ {}</text>\n",
            x0 + 8.0 * o.name.len() as f64 + 12.0,
            top - 8.0,
            thousands(o.count as f64, 0),
            fmt_ns(o.mean_ns()),
            q(0.5),
            q(0.99)
        );
        out!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"9\">{:.0}%</text>",
            x0 - 6.0,
            top + 8.0,
            peak / total * 100.0
        );
        out!(
            s,
            "<text x=\"{:.1}\" y=\"{bottom:.1}\" text-anchor=\"end\" font-size=\"9\">0</text>\n",
            x0 - 6.0
        );
        for i in lo..=hi {
            let n = bins(i);
            if n == 0 {
                continue;
            }
            let h = n as f64 / peak * panel;
            out!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{}\">",
                x0 + (i - lo) as f64 * bw + 1.0,
                bottom - h,
                (bw - 2.0).max(1.0),
                PALETTE[k % PALETTE.len()]
            );
            out!(
                s,
                "<title>{}..{}: {} ({:.1}%)</title></rect>\n",
                fmt_ns(1 << (i + 1)),
                fmt_ns(1 << (i + 2)),
                n,
                n as f64 / total * 100.0
            );
        }
        out!(s, "<line x1=\"{x0}\" y1=\"{bottom:.1}\" x2=\"{x1}\" y2=\"{bottom:.1}\" stroke=\"#333\"/>\n</g>\n");
    }
    // Bin boundaries: every one, or every other one when they would crowd.
    let every = if nb > 16 { 2 } else { 1 };
    s.push_str("<g>\n");
    for i in (lo..=hi + 1).step_by(every) {
        out!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>\n",
            x0 + (i - lo) as f64 * bw,
            bottom_all + 14.0,
            fmt_ns(1 << (i + 1))
        );
    }
    s.push_str("</g>\n");
    out!(s, "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">service time in the daemon (log2 bins); bar height: share of that type's requests</text>\n", (x0 + x1) / 2.0, bottom_all + 34.0);
    s.push_str("</svg>\n");
    Some(s)
}

// ---------------------------------------------------------------- files

/// Writes `results.json`, `charts/*.svg` and `report.md` into `dir`;
/// returns the path of `report.md`.
pub fn write_report(r: &BenchResults, dir: &Path) -> anyhow::Result<PathBuf> {
    let charts_dir = dir.join("charts");
    std::fs::create_dir_all(&charts_dir)
        .with_context(|| format!("creating {}", charts_dir.display()))?;
    let json = serde_json::to_string_pretty(r).context("serializing the results")? + "\n";
    std::fs::write(dir.join("results.json"), json)
        .with_context(|| format!("writing {}", dir.join("results.json").display()))?;
    let mut charts: Vec<(String, String)> = vec![];
    let mut put = |file: String, alt: String, svg: String| -> anyhow::Result<()> {
        let path = charts_dir.join(&file);
        std::fs::write(&path, svg).with_context(|| format!("writing {}", path.display()))?;
        charts.push((file, alt));
        Ok(())
    };
    for g in groups(r) {
        if let Some(svg) = bar_chart_svg(r, g) {
            put(
                format!("bar-{}.svg", slug(g)),
                format!("{g}: each subject's median relative to the baseline's"),
                svg,
            )?;
        }
    }
    for p in sweep_prefixes(r) {
        if let Some(svg) = sweep_chart_svg(r, &p) {
            put(
                format!("sweep-{}.svg", slug(&p)),
                format!("{p}: median by thread count"),
                svg,
            )?;
        }
    }
    for sub in available(r).filter(|s| s.is_fusebox) {
        if let Some(mut snap) = merged_stats(r, &sub.name) {
            // The title names the mountpoint; the merged snapshot has none.
            snap.mountpoint = format!("{}, all workloads", sub.name);
            if let Some(svg) = histogram_svg(&snap, &top_ops(&snap, 4)) {
                put(
                    format!("hist-{}.svg", slug(&sub.name)),
                    format!("{}: request service time by type", sub.name),
                    svg,
                )?;
            }
        }
    }
    let md = dir.join("report.md");
    std::fs::write(&md, markdown(r, &charts))
        .with_context(|| format!("writing {}", md.display()))?;
    Ok(md)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Machine, RoundTrip, SubjectRuns, SCHEMA};

    fn runs(subject: &str, values: &[f64]) -> SubjectRuns {
        SubjectRuns {
            subject: subject.into(),
            values: values.to_vec(),
            daemon_cpu_s: vec![0.5; values.len()],
            workload_cpu_s: vec![1.25; values.len()],
            ..Default::default()
        }
    }

    fn op(name: &str, bins: &[(usize, u64)]) -> OpSnapshot {
        let mut o = OpSnapshot {
            name: name.into(),
            bins: vec![0; fusebox::stats::BINS],
            ..Default::default()
        };
        for &(i, n) in bins {
            o.bins[i] = n;
            o.count += n;
            o.total_ns += n * (1 << (i + 1));
        }
        o
    }

    fn workload(
        name: &str,
        group: &str,
        unit: &str,
        threads: Option<u32>,
        per_subject: Vec<SubjectRuns>,
    ) -> WorkloadResult {
        WorkloadResult {
            name: name.into(),
            group: group.into(),
            description: format!("{name} | test"),
            unit: unit.into(),
            threads,
            per_subject,
        }
    }

    fn sample() -> BenchResults {
        let subject = |name: &str, fb, peer| SubjectInfo {
            name: name.into(),
            description: format!("{name} <desc>"),
            is_fusebox: fb,
            is_peer: peer,
            unavailable: None,
            matches: None,
        };
        let mut libfuse = subject("libfuse", false, true);
        libfuse.unavailable = Some("libfuse3-dev is not installed".into());
        let mut w = vec![];
        for (t, scale) in [(1, 1.0), (2, 1.8), (4, 3.0)] {
            let mut fb = runs("fusebox", &[500.0 * scale, 400.0 * scale, 600.0 * scale]);
            fb.stats = Some(Snapshot {
                transport: "classic".into(),
                ops: vec![op("READ", &[(10, 90), (12, 10)]), op("LOOKUP", &[(8, 5)])],
                ..Default::default()
            });
            let ps = vec![
                runs("native", &[2000.0 * scale]),
                runs("fuser", &[400.0 * scale]),
                fb,
            ];
            w.push(workload(
                &format!("rfuse/seq-rd-128k-{t}th"),
                "rfuse",
                "ops/s",
                Some(t),
                ps,
            ));
        }
        w.push(workload(
            "rfuse/nullfs-getattr-latency",
            "rfuse",
            "us",
            None,
            vec![
                runs("native", &[2.0]),
                runs("fusebox", &[8.0]),
                runs("fuser", &[10.0]),
            ],
        ));
        let mut failed = runs("fuser", &[]);
        failed.error = Some("mount failed".into());
        w.push(workload(
            "vangoor/a<b&c-1th-1f-4k",
            "vangoor",
            "ops/s",
            Some(1),
            vec![
                runs("native", &[1_234_567.0]),
                runs("fusebox", &[123_456.0]),
                failed,
            ],
        ));
        let machine = Machine {
            kernel: "6.14".into(),
            cpus: 8,
            fusebox_commit: "abc123".into(),
            round_trip: Some(RoundTrip {
                same_cpu_us: 6.15,
                cross_cpu_us: Some(11.09),
            }),
            ..Default::default()
        };
        let subjects = vec![
            subject("native", false, false),
            libfuse,
            subject("fuser", false, true),
            subject("fusebox", true, false),
        ];
        BenchResults {
            schema: SCHEMA,
            suite: "test".into(),
            suite_version: 1,
            started: "2026-01-01T00:00:00Z".into(),
            machine,
            repetitions: 3,
            subjects,
            workloads: w,
        }
    }

    /// XML-ish: starts and ends as an SVG, every tag closed in order, every
    /// `&` an entity.
    fn assert_svg(s: &str) {
        assert!(s.starts_with("<svg"), "{s}");
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<g>").count(), s.matches("</g>").count());
        let mut stack: Vec<&str> = vec![];
        let mut rest = s;
        while let Some(i) = rest.find('<') {
            let end = rest[i..].find('>').expect("unclosed tag") + i;
            let tag = &rest[i + 1..end];
            let name = tag
                .trim_start_matches('/')
                .split([' ', '/'])
                .next()
                .unwrap();
            assert!(
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
                "bad tag {tag:?}"
            );
            if tag.starts_with('/') {
                assert_eq!(stack.pop(), Some(name), "mismatched </{name}>");
            } else if !tag.ends_with('/') {
                stack.push(name);
            }
            rest = &rest[end + 1..];
        }
        assert!(stack.is_empty(), "unclosed {stack:?}");
        for (i, _) in s.match_indices('&') {
            assert!(
                ["&amp;", "&lt;", "&gt;", "&quot;"]
                    .iter()
                    .any(|e| s[i..].starts_with(e)),
                "raw & in {s}"
            );
        }
    }

    #[test]
    fn terminal_table_rows_ratios_and_gaps() {
        let r = sample();
        let t = terminal_table(&r);
        for w in &r.workloads {
            assert!(t.contains(&w.name), "{t}");
        }
        let line = |pat: &str| t.lines().find(|l| l.contains(pat)).unwrap().to_string();
        let ratios = |pat: &str| {
            line(pat)
                .split_whitespace()
                .rev()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ")
        };
        // 2 us native vs 8 us fusebox: 0.25; fuser at 10 us is the best peer: 1.25.
        assert_eq!(ratios("getattr"), "1.25 0.25", "{t}");
        // fuser failed: its cell shows "-", so does the ratio to the best peer.
        let v = line("vangoor/");
        assert!(v.contains("1,234,567") && v.contains("123,456"), "{v}");
        assert_eq!(v.split_whitespace().filter(|c| *c == "-").count(), 2, "{v}");
        assert_eq!(ratios("seq-rd-128k-2th"), "1.25 0.25", "{t}");
        assert!(t.contains("libfuse3-dev is not installed"));
        assert!(t.lines().all(|l| l.chars().count() <= MAX_WIDTH));
        assert!(
            !t.contains("libfuse  "),
            "unavailable subjects get no column: {t}"
        );
    }

    #[test]
    fn formatting() {
        assert_eq!(fmt_value(1234567.4, "ops/s"), "1,234,567");
        assert_eq!(fmt_value(12.345, "us"), "12.3");
        assert_eq!(fmt_value(1234.5, "us"), "1,234.5");
        assert_eq!(fmt_ns(1 << 12), "4.1us");
        assert_eq!(fmt_si(2_000_000.0, ["", "k", "M", "G"]), "2M");
        assert_eq!(abbrev("fusebox-nullfs-uring-adaptive"), "fb-nul-ur-ad");
        assert_eq!(nice_axis(9300.0), (2000.0, 10000.0));
        assert_eq!(
            split_threads("rfuse/seq-rd-128k-16th"),
            Some(("rfuse/seq-rd-128k", 16))
        );
        assert_eq!(split_threads("vangoor/rnd-rd-4th-1f-4k"), None);
        assert_eq!(esc("a<b&c>"), "a&lt;b&amp;c&gt;");
    }

    #[test]
    fn markdown_covers_subjects_groups_and_stats() {
        let r = sample();
        let md = markdown(
            &r,
            &[
                ("bar-rfuse.svg".into(), "rfuse [bars]".into()),
                ("extra.svg".into(), "extra".into()),
            ],
        );
        assert!(md.contains("libfuse3-dev is not installed") && md.contains("fuser &lt;desc&gt;"));
        assert!(
            md.contains("suite `test` v1") && md.contains("abc123") && md.contains("2026-01-01")
        );
        assert!(md.contains("| 0.25 | 1.25 |"), "{md}");
        assert!(
            md.contains("| process round trip | 6.2 us on one CPU, 11.1 us across two CPUs"),
            "{md}"
        );
        assert!(md.contains("## rfuse") && md.contains("## vangoor"));
        assert!(
            md.contains("![rfuse bars](charts/bar-rfuse.svg)")
                && md.contains("## Other charts\n\n![extra](charts/extra.svg)")
        );
        assert!(
            md.contains("median of 3 repetitions") && md.contains("never a lone absolute number")
        );
        assert!(
            md.contains("mount failed") && md.contains("| 0.50 | 1.25 |"),
            "CPU seconds per repetition"
        );
        assert!(
            md.contains("### fusebox: requests per type")
                && md.contains("| READ | LOOKUP | other |")
        );
        // 100 READs over 3 sweep points: 90 in bin 10, so p50 <= 2^12 ns.
        assert!(
            md.contains("| READ | 300 | 0 |") && md.contains("4.1us"),
            "{md}"
        );
        assert!(
            md.contains("latency \\| test"),
            "descriptions keep no raw pipe"
        );
    }

    #[test]
    fn svgs_are_well_formed_and_escaped() {
        let r = sample();
        let bars = bar_chart_svg(&r, "vangoor").unwrap();
        assert_svg(&bars);
        assert!(bars.contains("a&lt;b&amp;c-1th-1f-4k") && !bars.contains("a<b"));
        assert_svg(&bar_chart_svg(&r, "rfuse").unwrap());
        assert!(bar_chart_svg(&r, "nope").is_none());
        assert_eq!(sweep_prefixes(&r), vec!["rfuse/seq-rd-128k".to_string()]);
        let sweep = sweep_chart_svg(&r, "rfuse/seq-rd-128k").unwrap();
        assert_svg(&sweep);
        assert_eq!(
            sweep.matches("<polyline").count(),
            3,
            "native, fuser, fusebox"
        );
        assert_eq!(sweep_chart_svg(&r, "rfuse/seq-rd-128k-"), Some(sweep));
        assert!(sweep_chart_svg(&r, "rfuse/nope").is_none());
        let snap = merged_stats(&r, "fusebox").unwrap();
        assert_eq!(snap.op("READ").unwrap().count, 300);
        let hist = histogram_svg(&snap, &["READ", "LOOKUP", "WRITE"]).unwrap();
        assert_svg(&hist);
        assert!(hist.contains(">READ<") && hist.contains(">LOOKUP<") && !hist.contains("WRITE"));
        assert!(histogram_svg(&snap, &["WRITE"]).is_none());
    }

    #[test]
    fn write_report_writes_everything() {
        let r = sample();
        let dir = tempfile::tempdir().unwrap();
        let md = write_report(&r, dir.path()).unwrap();
        assert_eq!(md, dir.path().join("report.md"));
        let back: BenchResults = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("results.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(back, r);
        let text = std::fs::read_to_string(&md).unwrap();
        for f in [
            "bar-rfuse.svg",
            "bar-vangoor.svg",
            "sweep-rfuse-seq-rd-128k.svg",
            "hist-fusebox.svg",
        ] {
            assert_svg(&std::fs::read_to_string(dir.path().join("charts").join(f)).unwrap());
            assert!(text.contains(&format!("(charts/{f})")), "{f} not linked");
        }
        assert!(
            !text.contains("## Other charts"),
            "every chart placed in its section"
        );
    }

    #[test]
    fn matched_pairs_and_costs_per_operation_are_reported() {
        let mut r = sample();
        for s in &mut r.subjects {
            if s.name == "fusebox" {
                s.matches = Some("fuser".into());
            }
        }
        for w in &mut r.workloads {
            for x in &mut w.per_subject {
                x.ops = vec![1000.0; x.values.len()];
                x.daemon_cpu_s = vec![0.004; x.values.len()];
                x.daemon_ctx_switches = vec![3000.0; x.values.len()];
            }
        }
        let md = markdown(&r, &[]);
        assert!(md.contains("## Matched pairs"), "{md}");
        // Latency row: fuser 10 us, fusebox 8 us: fusebox / peer = 1.25.
        assert!(
            md.contains(
                "| `rfuse/nullfs-getattr-latency` | us | `fusebox` | `fuser` | 8.0 | 10.0 | 1.25 |"
            ),
            "{md}"
        );
        assert!(md.contains("## Cost per operation"), "{md}");
        // 0.004 s over 1,000 operations: 4 us and 3 switches each.
        assert!(md.contains("| 4.00 |") && md.contains("| 3.00 |"), "{md}");
        let t = terminal_table(&r);
        assert!(
            t.contains("Matched pairs") && t.contains("fusebox / fuser"),
            "{t}"
        );
    }
}
