//! Notes for the person at the terminal, on stderr, unless `--quiet`.

/// Where notes go.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Messages {
    pub(crate) quiet: bool,
}

impl Messages {
    /// A note for the person at the terminal (nothing with `--quiet`).
    pub(crate) fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("ingest: {text}");
        }
    }
}
