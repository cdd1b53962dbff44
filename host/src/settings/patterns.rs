//! Choosing functions by name: the patterns `--only`, `--exclude`, `--off`, the
//! configuration file and `allocators` take, and the filter they make.

/// Which defined functions get probes (`--only`, `--exclude`, `WPROF_FILTER`, or the
/// configuration file's `include`/`exclude`): the others are part of their nearest probed
/// caller (see [`wprof_agent::Selection`]).
#[derive(Debug, Clone, Default)]
pub struct FunctionFilter {
    /// When not empty, only functions matching one of these get probes.
    pub only: Vec<FunctionPattern>,
    /// Functions matching one of these get none.
    pub exclude: Vec<FunctionPattern>,
}

/// One pattern of a [`FunctionFilter`].
#[derive(Debug, Clone)]
pub enum FunctionPattern {
    /// A glob matched against the whole name (`*`, `?`, `[abc]`, `{a,b}`).
    Glob(String, globset::GlobMatcher),
    /// `/REGEX/`: a regular expression found anywhere in the name.
    Regex(regex::Regex),
    /// `#N` or `#N-M`: function ids (indices in the module, imports counted).
    Ids(u32, u32),
}

impl FunctionPattern {
    /// Parses `#N`, `#N-M`, `/REGEX/` or a glob.
    pub fn parse(spec: &str) -> Result<Self, String> {
        if let Some(ids) = spec.strip_prefix('#') {
            let (a, b) = ids.split_once('-').unwrap_or((ids, ids));
            let id = |t: &str| {
                t.trim()
                    .parse::<u32>()
                    .map_err(|_| format!("{spec:?}: `#N` or `#N-M` takes function ids"))
            };
            let (a, b) = (id(a)?, id(b)?);
            if a > b {
                return Err(format!("{spec:?}: an empty range of ids"));
            }
            return Ok(Self::Ids(a, b));
        }
        if let Some(re) = spec.strip_prefix('/').and_then(|r| r.strip_suffix('/')) {
            return regex::Regex::new(re).map(Self::Regex).map_err(|e| {
                format!(
                    "{spec:?}: {}",
                    e.to_string().lines().last().unwrap_or_default()
                )
            });
        }
        if spec.is_empty() {
            return Err("an empty function pattern".to_string());
        }
        globset::Glob::new(spec)
            .map(|g| Self::Glob(spec.to_string(), g.compile_matcher()))
            .map_err(|e| format!("{spec:?}: {}", e.kind()))
    }

    /// The pattern as written.
    pub fn text(&self) -> String {
        match self {
            Self::Glob(text, _) => text.clone(),
            Self::Regex(re) => format!("/{}/", re.as_str()),
            Self::Ids(a, b) if a == b => format!("#{a}"),
            Self::Ids(a, b) => format!("#{a}-{b}"),
        }
    }

    /// Whether function `id` matches, named `name` by the module and `demangled` when that
    /// is a mangled name.
    pub fn matches(&self, id: u32, name: &str, demangled: Option<&str>) -> bool {
        let test = |n: &str| match self {
            Self::Glob(_, glob) => glob.is_match(n),
            Self::Regex(re) => re.is_match(n),
            Self::Ids(a, b) => (*a..=*b).contains(&id),
        };
        test(name) || demangled.is_some_and(test)
    }
}

impl FunctionFilter {
    /// Parses `WPROF_FILTER`'s value: patterns separated by commas, those excluded
    /// written `!PATTERN`.
    pub fn parse_list(list: &str) -> Result<Self, String> {
        let mut filter = Self::default();
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.strip_prefix('!') {
                Some(p) => filter.exclude.push(FunctionPattern::parse(p.trim())?),
                None => filter.only.push(FunctionPattern::parse(item)?),
            }
        }
        Ok(filter)
    }

    /// Whether every function gets probes.
    pub fn is_empty(&self) -> bool {
        self.only.is_empty() && self.exclude.is_empty()
    }

    /// The filter as one line (`--only` patterns, then `!`-prefixed `--exclude` ones).
    pub fn describe(&self) -> String {
        let only = self.only.iter().map(FunctionPattern::text);
        let exclude = self.exclude.iter().map(|p| format!("!{}", p.text()));
        only.chain(exclude).collect::<Vec<_>>().join(",")
    }

    /// The selection this filter names, its set yet to be computed (see
    /// [`FunctionFilter::excluded`]); `None` when every function gets probes.
    pub fn selection(&self) -> Option<wprof_agent::Selection> {
        (!self.is_empty()).then(|| {
            let mut h = blake3::Hasher::new();
            h.update(b"wprof function filter v1\0");
            h.update(self.describe().as_bytes());
            wprof_agent::Selection {
                spec: *h.finalize().as_bytes(),
                excluded: Default::default(),
                silent: false,
            }
        })
    }

    /// The ids of the defined functions (ids from `first_defined` on, `names` holding every
    /// function's name in id order, `shown` the name wprof shows where it differs: see
    /// [`crate::go_symbols::shown_names`]) this filter leaves without probes.
    pub fn excluded(
        &self,
        names: &[String],
        shown: &[Option<String>],
        first_defined: u32,
    ) -> std::collections::BTreeSet<u32> {
        (first_defined..names.len() as u32)
            .filter(|&id| {
                let name = &names[id as usize];
                let other = shown.get(id as usize).and_then(Option::as_deref);
                let matches = |p: &FunctionPattern| p.matches(id, name, other);
                let kept = self.only.is_empty() || self.only.iter().any(matches);
                !kept || self.exclude.iter().any(matches)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_filters() {
        let names: Vec<String> = ["fd_write", "main", "_Z3fooi", "bar_fast", "bar_slow"]
            .map(String::from)
            .to_vec();
        let shown = |names: &[String]| -> Vec<Option<String>> {
            names.iter().map(|n| crate::demangle::demangle(n)).collect()
        };
        let f = FunctionFilter::parse_list("bar_*, foo*, !bar_slow").unwrap();
        assert_eq!(f.describe(), "bar_*,foo*,!bar_slow");
        // `foo*` matches `_Z3fooi` demangled (`foo(int)`); the import is never excluded.
        assert_eq!(f.excluded(&names, &shown(&names), 1), [1, 4].into());
        let f = FunctionFilter::parse_list("!/^bar/,!#1").unwrap();
        assert_eq!(f.excluded(&names, &shown(&names), 1), [1, 3, 4].into());
        assert!(FunctionFilter::parse_list("")
            .unwrap()
            .selection()
            .is_none());
        let a = FunctionFilter::parse_list("main")
            .unwrap()
            .selection()
            .unwrap();
        let b = FunctionFilter::parse_list("!main")
            .unwrap()
            .selection()
            .unwrap();
        assert_ne!(a.spec, b.spec);
        for bad in ["#x", "#5-2", "/(/", "a[", "!"] {
            assert!(FunctionFilter::parse_list(bad).is_err(), "{bad}");
        }
    }
}
