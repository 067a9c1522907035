//! Notes for the person at the terminal, on stderr, unless `--quiet`.

/// Where notes go.
#[derive(Debug, Clone, Copy)]
pub struct Messages {
    pub quiet: bool,
}

impl Messages {
    /// A note for the person at the terminal (nothing with `--quiet`).
    pub fn note(&self, text: &str) {
        if !self.quiet {
            eprintln!("ingest: {text}");
        }
    }
}
