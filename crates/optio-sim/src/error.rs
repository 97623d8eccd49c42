//! Why an experiment could not run.

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// A parameter is out of range or inconsistent.
    #[error("{parameter}: {reason}")]
    Parameter {
        /// The parameter (as spelt on the command line).
        parameter: &'static str,
        /// What is wrong and what to do.
        reason: String,
    },
    /// A map built for the experiment was refused.
    #[error("building the experiment's map: {0}")]
    Map(#[from] optio_placement::MapError),
    /// Input data (a trace, a map) could not be read.
    #[error("{0}")]
    Input(String),
    /// A plot could not be drawn.
    #[error("drawing {path}: {reason}")]
    Plot {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
}
