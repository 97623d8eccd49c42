//! TOML maps.
use crate::ParseError;
use optio_placement::ClusterMap;
/// Parses.
pub fn parse(_text: &str) -> Result<ClusterMap, ParseError> {
    todo!()
}
