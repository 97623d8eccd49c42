//! TOML maps.
use crate::ParseError;
use optio_placement::ClusterMap;
/// Parses.
pub fn parse(_text: &str) -> Result<ClusterMap, ParseError> {
    Err(ParseError::value(None, "toml", "not yet"))
}
/// Writes.
pub fn write(_map: &ClusterMap) -> String {
    String::new()
}
