//! Progress of a long experiment, reported to whoever runs it (a progress bar, or nothing).

/// Progress of a long experiment: `total` steps announced once, then `advance`.
pub trait Progress {
    /// Announces the number of steps (may be called again for a new phase).
    fn start(&mut self, phase: &str, total: u64);
    /// Reports `steps` more steps done.
    fn advance(&mut self, steps: u64);
}

/// Progress that goes nowhere (tests, JSON output).
pub struct NoProgress;

impl Progress for NoProgress {
    fn start(&mut self, _phase: &str, _total: u64) {}
    fn advance(&mut self, _steps: u64) {}
}
