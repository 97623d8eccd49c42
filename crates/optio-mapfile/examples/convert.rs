//! Converts a map file between formats: `cargo run --example convert -- FORMAT FILE`, where
//! FORMAT is `text` (crushtool -d), `json` (crushtool --dump) or `toml` (Optio).

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(format), Some(path)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: convert text|json|toml FILE");
        return ExitCode::FAILURE;
    };
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("{path}: {error}");
            return ExitCode::FAILURE;
        }
    };
    let map = match optio_mapfile::parse(&text) {
        Ok(map) => map,
        Err(error) => {
            eprintln!("{path}:{error}");
            return ExitCode::FAILURE;
        }
    };
    let output = match format.as_str() {
        "text" => optio_mapfile::ceph_text::write(&map),
        "json" => optio_mapfile::ceph_json::write(&map),
        "toml" => Ok(optio_mapfile::optio_toml::write(&map)),
        other => {
            eprintln!("unknown format '{other}'; use text, json or toml");
            return ExitCode::FAILURE;
        }
    };
    match output {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("{path}: {error}");
            ExitCode::FAILURE
        }
    }
}
