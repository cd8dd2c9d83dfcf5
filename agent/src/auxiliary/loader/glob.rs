//! Which shared objects a probe's `library` names.

/// Which shared objects a probe's `library` glob names: a path glob when it holds a `/`,
/// else a glob on the file name.
#[derive(Debug, Clone)]
pub struct LibraryGlob {
    glob: gprobe_crds::glob::Glob,
    by_name: bool,
}

impl LibraryGlob {
    pub fn new(pattern: &str) -> Option<Self> {
        Some(Self {
            glob: gprobe_crds::glob::Glob::new(pattern).ok()?,
            by_name: !pattern.contains('/'),
        })
    }

    pub fn matches(&self, path: &std::path::Path) -> bool {
        if self.by_name {
            path.file_name()
                .is_some_and(|n| self.glob.matches(&n.to_string_lossy()))
        } else {
            self.glob.matches(&path.to_string_lossy())
        }
    }
}
