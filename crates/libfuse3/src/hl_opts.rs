//! The options `fuse_new` takes for itself (libfuse's high-level library
//! options), taken out of the argument vector; what is left goes to the
//! session (`session_opts`), which rejects what nobody knows.

/// The high-level library's settings, as `struct fuse_config` starts
/// before the program's init callback may change it.
#[derive(Clone, Debug, PartialEq)]
pub struct LibOptions {
    pub debug: bool,
    pub kernel_cache: bool,
    pub auto_cache: bool,
    pub no_rofd_flush: bool,
    pub umask: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub entry_timeout: f64,
    pub negative_timeout: f64,
    pub attr_timeout: f64,
    pub ac_attr_timeout: Option<f64>,
    /// Seconds to keep forgotten nodes (-1: forever). Nodes are kept as
    /// long as the kernel holds them here; accepted for compatibility.
    pub remember: i32,
    pub modules: Option<String>,
}

impl Default for LibOptions {
    fn default() -> Self {
        LibOptions {
            debug: false,
            kernel_cache: false,
            auto_cache: false,
            no_rofd_flush: false,
            umask: None,
            uid: None,
            gid: None,
            entry_timeout: 1.0,
            negative_timeout: 0.0,
            attr_timeout: 1.0,
            ac_attr_timeout: None,
            remember: 0,
            modules: None,
        }
    }
}

/// The library's options out of `args` (without `argv[0]`); the rest, in
/// order, with the unconsumed `-o` items gathered into one `-o` list.
pub fn split(args: &[String]) -> Result<(LibOptions, Vec<String>), String> {
    let mut lib = LibOptions::default();
    let mut rest = Vec::new();
    let mut left_opts: Vec<String> = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let list = match a.as_str() {
            "-o" => match it.next() {
                Some(l) => l.clone(),
                None => return Err("fuse: missing argument after `-o'".into()),
            },
            s if s.starts_with("-o") => s[2..].to_string(),
            "-d" | "--debug" => {
                lib.debug = true;
                rest.push(a.clone());
                continue;
            }
            _ => {
                rest.push(a.clone());
                continue;
            }
        };
        for opt in crate::session_opts::split_list(&list) {
            if !take(&mut lib, &opt)? {
                left_opts.push(escape(&opt));
            }
        }
    }
    if !left_opts.is_empty() {
        rest.push("-o".into());
        rest.push(left_opts.join(","));
    }
    Ok((lib, rest))
}

fn escape(opt: &str) -> String {
    opt.replace('\\', "\\\\").replace(',', "\\,")
}

/// One option: true if the library took it.
fn take(lib: &mut LibOptions, opt: &str) -> Result<bool, String> {
    let bad = || format!("fuse: invalid parameter in option `{opt}'");
    let secs = |v: &str| v.parse::<f64>().map_err(|_| bad());
    let (name, value) = match opt.split_once('=') {
        Some((n, v)) => (n, Some(v)),
        None => (opt, None),
    };
    match (name, value) {
        ("debug", None) => {
            lib.debug = true;
            // The session sees it too (its own debug output).
            return Ok(false);
        }
        ("kernel_cache", None) => lib.kernel_cache = true,
        ("auto_cache", None) => lib.auto_cache = true,
        ("noauto_cache", None) => lib.auto_cache = false,
        ("no_rofd_flush", None) => lib.no_rofd_flush = true,
        ("umask", Some(v)) => lib.umask = Some(u32::from_str_radix(v, 8).map_err(|_| bad())?),
        ("uid", Some(v)) => lib.uid = Some(v.parse().map_err(|_| bad())?),
        ("gid", Some(v)) => lib.gid = Some(v.parse().map_err(|_| bad())?),
        ("entry_timeout", Some(v)) => lib.entry_timeout = secs(v)?,
        ("negative_timeout", Some(v)) => lib.negative_timeout = secs(v)?,
        ("attr_timeout", Some(v)) => lib.attr_timeout = secs(v)?,
        ("ac_attr_timeout", Some(v)) => lib.ac_attr_timeout = Some(secs(v)?),
        ("noforget", None) => lib.remember = -1,
        ("remember", Some(v)) => lib.remember = v.parse().map_err(|_| bad())?,
        ("modules", Some(v)) => lib.modules = Some(v.to_string()),
        _ => return Ok(false),
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(a: &[&str]) -> Vec<String> {
        a.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn takes_its_own_options_and_leaves_the_rest_in_order() {
        let (lib, rest) = split(&s(&[
            "-o",
            "kernel_cache,allow_other,umask=022,fsname=a\\,b",
            "-d",
            "-oattr_timeout=2.5,uid=7",
        ]))
        .unwrap();
        assert!(lib.kernel_cache && lib.debug);
        assert_eq!(lib.umask, Some(0o22));
        assert_eq!(lib.uid, Some(7));
        assert_eq!(lib.attr_timeout, 2.5);
        assert_eq!(rest, s(&["-d", "-o", "allow_other,fsname=a\\,b"]));
        assert!(split(&s(&["-o", "umask=9x"])).is_err());
        assert_eq!(split(&s(&[])).unwrap().1, Vec::<String>::new());
    }
}
