//! The results schema: what one `fusebox bench` run measured. Written as
//! JSON (`results.json`) and rendered to the terminal table and the
//! Markdown report. `SCHEMA` changes whenever a field changes meaning.

use serde::{Deserialize, Serialize};

pub const SCHEMA: u32 = 1;

/// One run of a suite.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct BenchResults {
    pub schema: u32,
    /// Suite name and version (`quick`, 1): the same name and version always
    /// mean the same workloads with the same parameters.
    pub suite: String,
    pub suite_version: u32,
    /// RFC 3339 UTC time the run started.
    pub started: String,
    pub machine: Machine,
    /// Interleaved repetitions per workload and subject.
    pub repetitions: u32,
    pub subjects: Vec<SubjectInfo>,
    pub workloads: Vec<WorkloadResult>,
}

/// What the numbers were measured on.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub kernel: String,
    pub cpu_model: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub backing: String,
    /// `git describe` of the fusebox tree the run was built from.
    pub fusebox_commit: String,
    /// One blocking round trip between two processes (see `floor`);
    /// absent in runs from before it was measured or where it failed.
    pub round_trip: Option<RoundTrip>,
}

/// Pipe ping-pong between two processes, median of batch means.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct RoundTrip {
    /// Both processes pinned to one CPU: two context switches per trip.
    pub same_cpu_us: f64,
    /// On two CPUs: two wake-ups of a CPU that went idle (none with one CPU).
    pub cross_cpu_us: Option<f64>,
}

/// A filesystem under test.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SubjectInfo {
    /// Short stable name: `native`, `libfuse`, `fuser`, `go-fuse`,
    /// `fusebox`, `fusebox-uring`, `fusebox-uring-pt`, ...
    pub name: String,
    /// Human description: framework, version, configuration.
    pub description: String,
    /// Why it is not in the tables, when it could not be built or mounted.
    pub unavailable: Option<String>,
    /// Fusebox subjects have per-request statistics.
    pub is_fusebox: bool,
    /// Peer frameworks (libfuse, fuser, go-fuse), for "ratio to best peer".
    pub is_peer: bool,
    /// For a fusebox subject configured like a peer subject (the same
    /// caching, the same passthrough): that peer's name. The report sets
    /// such pairs side by side.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matches: Option<String>,
}

/// One workload across all subjects.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkloadResult {
    /// Stable name, e.g. `vangoor/rnd-rd-1th-1f-4k`.
    pub name: String,
    /// Which paper it comes from (`vangoor`, `rfuse`, `xfuse`, `macro`).
    pub group: String,
    pub description: String,
    /// Unit of `values`: "ops/s" (higher is better) or "us" (lower is better).
    pub unit: String,
    /// For thread sweeps: the number of threads (charts draw lines over it).
    pub threads: Option<u32>,
    pub per_subject: Vec<SubjectRuns>,
}

/// One subject's repetitions of one workload.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SubjectRuns {
    pub subject: String,
    /// One value per repetition, in run order.
    pub values: Vec<f64>,
    /// CPU seconds the daemon used per repetition (user + system).
    pub daemon_cpu_s: Vec<f64>,
    /// CPU seconds the workload itself used per repetition.
    pub workload_cpu_s: Vec<f64>,
    /// Operations per repetition, where the workload counts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ops: Vec<f64>,
    /// Context switches of the daemon's threads (voluntary and not) per
    /// repetition: mostly the wake-ups it took to serve the workload.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemon_ctx_switches: Vec<f64>,
    /// The daemon's peak resident memory per repetition, MiB (its
    /// processes' high-water marks, summed; the mount lives one run).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub daemon_peak_rss_mib: Vec<f64>,
    /// Set when a repetition failed; values then holds the ones that ran.
    pub error: Option<String>,
    /// Request counts and latency histograms (fusebox subjects), summed
    /// over the repetitions.
    pub stats: Option<fusebox::stats::Snapshot>,
    /// Requests counted outside the subject, by kind, one value per
    /// repetition (the sftp suite: SFTP requests the server received).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub requests: std::collections::BTreeMap<String, Vec<f64>>,
}

impl SubjectRuns {
    pub fn median(&self) -> Option<f64> {
        median(&self.values)
    }

    /// (min, max) across repetitions.
    pub fn spread(&self) -> Option<(f64, f64)> {
        let min = self.values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = self
            .values
            .iter()
            .copied()
            .fold(f64::NEG_INFINITY, f64::max);
        (!self.values.is_empty()).then_some((min, max))
    }
}

impl SubjectRuns {
    /// Median over repetitions of `per_rep[i] / ops[i]`, where both exist.
    pub fn per_op(&self, per_rep: &[f64]) -> Option<f64> {
        let v: Vec<f64> = per_rep
            .iter()
            .zip(&self.ops)
            .filter(|(_, &n)| n > 0.0)
            .map(|(x, n)| x / n)
            .collect();
        median(&v)
    }
}

pub fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

impl WorkloadResult {
    pub fn higher_is_better(&self) -> bool {
        self.unit != "us"
    }

    pub fn subject(&self, name: &str) -> Option<&SubjectRuns> {
        self.per_subject.iter().find(|s| s.subject == name)
    }

    /// `subject`'s median relative to native's, oriented so that > 1 is
    /// better than native (throughput: s/native; latency: native/s).
    pub fn ratio_to(&self, subject: &str, baseline: &str) -> Option<f64> {
        let s = self.subject(subject)?.median()?;
        let b = self.subject(baseline)?.median()?;
        if s <= 0.0 || b <= 0.0 {
            return None;
        }
        Some(if self.higher_is_better() {
            s / b
        } else {
            b / s
        })
    }

    /// The best peer's name by median.
    pub fn best_peer(&self, peers: &[&str]) -> Option<String> {
        let mut best: Option<(String, f64)> = None;
        for p in peers {
            if let Some(m) = self.subject(p).and_then(|s| s.median()) {
                let better = match &best {
                    None => true,
                    Some((_, b)) => {
                        if self.higher_is_better() {
                            m > *b
                        } else {
                            m < *b
                        }
                    }
                };
                if better {
                    best = Some((p.to_string(), m));
                }
            }
        }
        best.map(|(n, _)| n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reports in docs/ stay readable as the schema grows (new fields are
    /// optional); a change that breaks them must bump SCHEMA instead.
    #[test]
    fn published_results_still_parse() {
        let docs = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        let mut read = 0;
        for entry in std::fs::read_dir(&docs).unwrap() {
            let json = entry.unwrap().path().join("results.json");
            if let Ok(text) = std::fs::read_to_string(&json) {
                let r: BenchResults = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("{}: {e}", json.display()));
                assert_eq!(r.schema, SCHEMA, "{}", json.display());
                read += 1;
            }
        }
        assert!(read > 0, "no results.json under {}", docs.display());
    }

    fn runs(subject: &str, values: &[f64]) -> SubjectRuns {
        SubjectRuns {
            subject: subject.into(),
            values: values.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn medians_ratios_and_best_peer() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let w = WorkloadResult {
            unit: "ops/s".into(),
            per_subject: vec![
                runs("native", &[100.0, 110.0, 90.0]),
                runs("libfuse", &[10.0]),
                runs("fuser", &[20.0]),
                runs("fusebox", &[30.0]),
            ],
            ..Default::default()
        };
        assert_eq!(w.ratio_to("fusebox", "native"), Some(0.3));
        assert_eq!(
            w.best_peer(&["libfuse", "fuser", "go-fuse"]).as_deref(),
            Some("fuser")
        );
        let lat = WorkloadResult {
            unit: "us".into(),
            per_subject: vec![
                runs("native", &[2.0]),
                runs("fusebox", &[8.0]),
                runs("libfuse", &[10.0]),
                runs("fuser", &[9.0]),
            ],
            ..Default::default()
        };
        assert_eq!(lat.ratio_to("fusebox", "native"), Some(0.25));
        assert_eq!(
            lat.best_peer(&["libfuse", "fuser"]).as_deref(),
            Some("fuser")
        );
        assert_eq!(runs("x", &[3.0, 1.0]).spread(), Some((1.0, 3.0)));
    }

    #[test]
    fn json_round_trips() {
        let r = BenchResults {
            schema: SCHEMA,
            suite: "quick".into(),
            suite_version: 1,
            started: "2026-11-22T00:00:00Z".into(),
            machine: Machine::default(),
            repetitions: 3,
            subjects: vec![SubjectInfo {
                name: "native".into(),
                ..Default::default()
            }],
            workloads: vec![],
        };
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<BenchResults>(&j).unwrap(), r);
    }
}
