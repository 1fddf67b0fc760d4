//! fuse_opt.h's helpers on argument vectors and option lists, as plain
//! Rust on byte strings; `ffi::opt` moves them across the C boundary
//! (where strings are malloc'd, since C programs free(3) them).

/// `fuse_opt_add_opt`: `opt` appended to a comma separated list.
pub fn add_opt(list: Option<&[u8]>, opt: &[u8]) -> Vec<u8> {
    match list {
        None => opt.to_vec(),
        Some(l) => {
            let mut v = Vec::with_capacity(l.len() + 1 + opt.len());
            v.extend_from_slice(l);
            v.push(b',');
            v.extend_from_slice(opt);
            v
        }
    }
}

/// `fuse_opt_add_opt_escaped`: the same, with `,` and `\` escaped by a
/// backslash so that the option survives being split again.
pub fn add_opt_escaped(list: Option<&[u8]>, opt: &[u8]) -> Vec<u8> {
    let mut escaped = Vec::with_capacity(opt.len() * 2);
    for &b in opt {
        if b == b',' || b == b'\\' {
            escaped.push(b'\\');
        }
        escaped.push(b);
    }
    add_opt(list, &escaped)
}

/// How a template of `struct fuse_opt` matches an argument (fuse_opt.h):
/// "foo" and "-x" match only themselves; "foo=" and "foo=%s" match any
/// "foo=..." (the template up to and including `=`); "-x " and "-x %s"
/// match "-x" followed by anything (the parameter joined or, before
/// parsing joins it, separate). Returns where the parameter starts in
/// `arg` when it matches.
pub fn template_matches(templ: &[u8], arg: &[u8]) -> Option<usize> {
    let sep = templ
        .iter()
        .position(|&b| b == b'=')
        .or_else(|| templ.iter().position(|&b| b == b' '));
    if let Some(i) = sep {
        let rest = &templ[i + 1..];
        if rest.is_empty() || rest[0] == b'%' {
            let prefix = if templ[i] == b'=' { i + 1 } else { i };
            return arg.starts_with(&templ[..prefix]).then_some(prefix);
        }
    }
    (templ == arg).then_some(arg.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_lists_grow_with_commas_and_escape_them() {
        assert_eq!(add_opt(None, b"ro"), b"ro");
        assert_eq!(add_opt(Some(b"ro"), b"uid=1"), b"ro,uid=1");
        assert_eq!(add_opt_escaped(Some(b"ro"), b"a,b\\c"), b"ro,a\\,b\\\\c");
    }

    #[test]
    fn templates_match_as_fuse_opt_h_says() {
        assert_eq!(template_matches(b"ro", b"ro"), Some(2));
        assert_eq!(template_matches(b"ro", b"rox"), None);
        assert_eq!(template_matches(b"uid=%u", b"uid=12"), Some(4));
        assert_eq!(template_matches(b"uid=", b"uid=12"), Some(4));
        assert_eq!(template_matches(b"uid=", b"uid"), None);
        assert_eq!(template_matches(b"-x ", b"-xfoo"), Some(2));
        assert_eq!(template_matches(b"-x %s", b"-x"), Some(2));
        assert_eq!(template_matches(b"--foo=%s", b"--foo=bar"), Some(6));
        // A separator followed by text that is no format is literal.
        assert_eq!(template_matches(b"a=b", b"a=c"), None);
        assert_eq!(template_matches(b"a=b", b"a=b"), Some(3));
    }
}
