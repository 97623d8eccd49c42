//! Optio's own map format: TOML, written for people (see `docs/map-format.md`).

mod parse;
mod reader;
mod write;

use optio_placement::ClusterMap;

use crate::error::ParseError;

/// The version of the format that [`write`] writes and [`parse`] reads.
pub const FORMAT_VERSION: u32 = 1;

/// Parses an Optio TOML map.
pub fn parse(text: &str) -> Result<ClusterMap, ParseError> {
    let (builder, lines) = parse::to_builder(text)?;
    builder.build().map_err(|error| lines.locate(error))
}

/// Writes `map` as Optio TOML; `parse(&write(map))` gives back an equal map.
pub fn write(map: &ClusterMap) -> String {
    write::write(map)
}
