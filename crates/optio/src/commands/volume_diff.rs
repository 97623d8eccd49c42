//! `optio volume diff | export-diff | import-diff | du`: incremental backup of volumes and
//! the space their snapshots hold ([`optio_client::diff`], [`optio_client::diff_stream`]).

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use bytes::Bytes;
use futures_util::StreamExt;
use optio_client::diff_stream::{DiffHeader, DiffReader, DiffWriter, Record};
use optio_client::volume::{self, OpenOptions, Volume};

use crate::commands::client::ClusterConn;
use crate::output::{self, Table};

/// `optio volume diff`.
#[derive(clap::Args, Debug)]
pub struct DiffArgs {
    /// The end point: VOLUME (its head) or VOLUME@SNAPSHOT.
    pub spec: String,
    /// The start point: a snapshot of the same volume (default: an empty volume, so every
    /// allocated extent is listed).
    #[arg(long, value_name = "SNAP")]
    pub from_snap: Option<String>,
    /// JSON for scripts (docs/volumes.md gives its shape).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume export-diff`.
#[derive(clap::Args, Debug)]
pub struct ExportDiffArgs {
    /// The end point: VOLUME (its head; export a snapshot for a consistent copy) or
    /// VOLUME@SNAPSHOT.
    pub spec: String,
    /// Where to write the stream (`-`: standard output).
    pub file: PathBuf,
    /// The start point: a snapshot of the same volume (default: a full diff, from an empty
    /// volume).
    #[arg(long, value_name = "SNAP")]
    pub from_snap: Option<String>,
    /// Data objects read at once.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume import-diff`.
#[derive(clap::Args, Debug)]
pub struct ImportDiffArgs {
    /// The stream, written by `export-diff` (`-`: standard input). A file is checked whole
    /// before anything is written.
    pub file: PathBuf,
    /// The volume to apply it to (it must exist).
    pub name: String,
    /// Writes in flight.
    #[arg(long, default_value_t = 8)]
    pub parallel: usize,
    /// Take the lock even if another client holds it.
    #[arg(long)]
    pub break_lock: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// `optio volume du`.
#[derive(clap::Args, Debug)]
pub struct DuArgs {
    /// Volume name.
    pub name: String,
    /// JSON for scripts (docs/volumes.md gives its shape).
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub cluster: ClusterConn,
}

/// Splits `VOL[@SNAP]`.
fn parse_point(spec: &str) -> Result<(&str, Option<&str>)> {
    if spec.contains('@') {
        let (name, snap) = optio_client::snapshot::parse_spec(spec)?;
        return Ok((name, Some(snap)));
    }
    volume::validate_name(spec)?;
    Ok((spec, None))
}

fn check_from(from: Option<&str>) -> Result<()> {
    if let Some(from) = from
        && volume::validate_name(from).is_err()
    {
        bail!(
            "bad --from-snap '{from}': give the name of a snapshot of the same volume (without VOLUME@), as `optio volume snap ls` lists them"
        );
    }
    Ok(())
}

fn is_stdio(file: &Path) -> bool {
    file.as_os_str() == "-"
}

pub async fn diff(args: DiffArgs) -> Result<()> {
    let (name, snap) = parse_point(&args.spec)?;
    check_from(args.from_snap.as_deref())?;
    let client = args.cluster.connect().await?;
    let diff = optio_client::diff::diff(&client, name, snap, args.from_snap.as_deref()).await?;
    let extents = diff.extents();
    if args.json {
        let value = serde_json::json!({
            "volume": name,
            "from_snap": args.from_snap,
            "to_snap": snap,
            "size_bytes": diff.size_bytes,
            "object_size": diff.header.object_size,
            "granularity": "object",
            "extents": extents,
        });
        println!("{value}");
        return Ok(());
    }
    if extents.is_empty() {
        match &args.from_snap {
            Some(from) => println!("nothing changed between '{name}@{from}' and '{}'", args.spec),
            None => println!("'{}' has no allocated extent (it reads as zeros)", args.spec),
        }
        return Ok(());
    }
    let mut table = Table::new(&["offset", "length", "type"]).left(&[2]);
    for extent in &extents {
        table.row(vec![extent.offset.to_string(), extent.length.to_string(), extent.kind.into()]);
    }
    print!("{}", table.render());
    Ok(())
}

pub async fn export_diff(args: ExportDiffArgs) -> Result<()> {
    let (name, snap) = parse_point(&args.spec)?;
    check_from(args.from_snap.as_deref())?;
    let client = args.cluster.connect().await?;
    let plan = optio_client::diff::diff(&client, name, snap, args.from_snap.as_deref()).await?;
    let opened = Volume::open(
        &client,
        &args.spec,
        OpenOptions { read_only: true, ..OpenOptions::default() },
    )
    .await?;
    if opened.size() != plan.size_bytes {
        bail!(
            "volume '{}' was resized while the diff was made ({} bytes, then {}): export a snapshot (VOLUME@SNAPSHOT) for a consistent copy",
            args.spec,
            plan.size_bytes,
            opened.size()
        );
    }
    let stdout = is_stdio(&args.file);
    let out: Box<dyn Write> = if stdout {
        Box::new(BufWriter::with_capacity(1 << 20, std::io::stdout().lock()))
    } else {
        let file = std::fs::File::create(&args.file).with_context(|| {
            format!(
                "cannot create {}: check the directory exists and is writable",
                args.file.display()
            )
        })?;
        Box::new(BufWriter::with_capacity(1 << 20, file))
    };
    let header = DiffHeader {
        from_snap: args.from_snap.clone(),
        to_snap: snap.map(str::to_string),
        size_bytes: plan.size_bytes,
    };
    let result = write_stream(&opened, &plan, out, &header, args.parallel.max(1)).await;
    let (data_bytes, records) = match result {
        Ok(done) => done,
        Err(error) => {
            if !stdout {
                // Half a stream has no end record and would be refused anyway: leave none.
                let _ = std::fs::remove_file(&args.file);
            }
            return Err(error);
        }
    };
    eprintln!(
        "exported the diff of '{}' since {} to {} ({} records, {} of data)",
        args.spec,
        args.from_snap.as_deref().map_or("its creation".to_string(), |s| format!("'{s}'")),
        if stdout { "standard output".to_string() } else { args.file.display().to_string() },
        records,
        output::bytes(data_bytes as f64)
    );
    Ok(())
}

/// Writes the stream of `plan`, reading `parallel` data objects at once, in order; returns
/// the data bytes and records written.
async fn write_stream(
    opened: &Volume,
    plan: &optio_client::diff::Diff,
    out: Box<dyn Write>,
    header: &DiffHeader,
    parallel: usize,
) -> Result<(u64, u64)> {
    let mut writer = DiffWriter::new(out, header)?;
    let reads = futures_util::stream::iter(plan.objects.iter())
        .map(|object| async move {
            let data = if object.data {
                let data = opened.read(object.offset, object.length).await.with_context(|| {
                    format!("cannot read {} bytes at offset {}", object.length, object.offset)
                })?;
                Some(data)
            } else {
                None
            };
            anyhow::Ok((object, data))
        })
        .buffered(parallel);
    futures_util::pin_mut!(reads);
    let mut data_bytes = 0;
    while let Some(read) = reads.next().await {
        let (object, data) = read?;
        let Some(data) = data else {
            writer.zero(object.offset, object.length)?;
            continue;
        };
        for (within, len, zero) in runs(&data) {
            let offset = object.offset + within as u64;
            if zero {
                writer.zero(offset, len as u64)?;
            } else {
                writer.data(offset, &data[within..within + len])?;
                data_bytes += len as u64;
            }
        }
    }
    let records = writer.records();
    writer.finish().context("cannot finish the diff stream")?;
    Ok((data_bytes, records))
}

/// Zeros inside an object are sent as zero records by runs of this many bytes.
const ZERO_RUN_BYTES: usize = 64 << 10;

/// `data` as runs of `(start, length, all zeros)`, cut at [`ZERO_RUN_BYTES`] boundaries and
/// merged while of one kind.
fn runs(data: &[u8]) -> Vec<(usize, usize, bool)> {
    let mut out: Vec<(usize, usize, bool)> = Vec::new();
    for (i, chunk) in data.chunks(ZERO_RUN_BYTES).enumerate() {
        let zero = chunk.iter().all(|b| *b == 0);
        match out.last_mut() {
            Some(last) if last.2 == zero => last.1 += chunk.len(),
            _ => out.push((i * ZERO_RUN_BYTES, chunk.len(), zero)),
        }
    }
    out
}

pub async fn import_diff(args: ImportDiffArgs) -> Result<()> {
    volume::validate_name(&args.name)?;
    let stdin = is_stdio(&args.file);
    let source = if stdin { "standard input".to_string() } else { args.file.display().to_string() };
    let open_file = || -> Result<Box<dyn Read + Send>> {
        let file = std::fs::File::open(&args.file)
            .with_context(|| format!("cannot open {}", args.file.display()))?;
        Ok(Box::new(BufReader::with_capacity(1 << 20, file)))
    };
    if !stdin {
        // A file is checked whole first: a damaged one changes nothing.
        DiffReader::open(open_file()?)
            .and_then(DiffReader::verify)
            .with_context(|| format!("{source} is refused, nothing was written"))?;
    }
    let input: Box<dyn Read + Send> = if stdin {
        Box::new(BufReader::with_capacity(1 << 20, std::io::stdin()))
    } else {
        open_file()?
    };
    let mut reader = DiffReader::open(input)
        .with_context(|| format!("{source} is refused, nothing was written"))?;
    let stream = reader.header().clone();
    let client = args.cluster.connect().await?;
    let opened = Volume::open(
        &client,
        &args.name,
        OpenOptions { break_lock: args.break_lock, ..OpenOptions::default() },
    )
    .await?;
    let result = apply(&opened, &mut reader, &stream, &args, &source).await;
    let closed = opened.close().await;
    let (data_bytes, zero_bytes, records) = result?;
    closed?;
    if let Some(to) = &stream.to_snap {
        optio_client::snapshot::create(&client, &args.name, to).await.with_context(|| {
            format!(
                "the diff is applied, but its end snapshot '{}@{to}' could not be taken",
                args.name
            )
        })?;
    }
    println!(
        "applied {source} to volume '{}' ({records} records: {} of data, {} of zeros){}",
        args.name,
        output::bytes(data_bytes as f64),
        output::bytes(zero_bytes as f64),
        stream
            .to_snap
            .as_deref()
            .map_or(String::new(), |to| format!("; took snapshot '{}@{to}'", args.name))
    );
    Ok(())
}

/// Checks the stream against the open volume, resizes it, and writes every record.
async fn apply(
    opened: &std::sync::Arc<Volume>,
    reader: &mut DiffReader<Box<dyn Read + Send>>,
    stream: &DiffHeader,
    args: &ImportDiffArgs,
    source: &str,
) -> Result<(u64, u64, u64)> {
    let header = opened.header();
    let name = &args.name;
    if let Some(from) = &stream.from_snap
        && !header.snapshots.iter().any(|s| &s.name == from)
    {
        bail!(
            "volume '{name}' has no snapshot '{from}', which {source} starts from: import the diff that ends at '{from}' first (or a full one, exported without --from-snap); nothing was written"
        );
    }
    if let Some(to) = &stream.to_snap
        && header.snapshots.iter().any(|s| &s.name == to)
    {
        bail!(
            "volume '{name}' has a snapshot '{to}' already, where {source} ends: it was imported before (`optio volume snap rm {name}@{to}` to import it again); nothing was written"
        );
    }
    if header.size != stream.size_bytes {
        opened.resize(stream.size_bytes, true).await.with_context(|| {
            format!("cannot resize volume '{name}' to the stream's {} bytes", stream.size_bytes)
        })?;
    }
    let partly = || {
        format!(
            "{source} could not be applied whole: volume '{name}' may be partly updated; apply the whole stream again once the cause is fixed"
        )
    };
    type Write = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<(), volume::VolumeError>> + Send>,
    >;
    let mut pending: futures_util::stream::FuturesUnordered<Write> =
        futures_util::stream::FuturesUnordered::new();
    let (mut data_bytes, mut zero_bytes, mut records) = (0u64, 0u64, 0u64);
    loop {
        let record = reader.next_record().with_context(partly)?;
        let Some(record) = record else { break };
        while pending.len() >= args.parallel.max(1) {
            pending.next().await.expect("pending writes").with_context(partly)?;
        }
        let volume = opened.clone();
        records += 1;
        match record {
            Record::Data { offset, data } => {
                data_bytes += data.len() as u64;
                pending.push(Box::pin(async move {
                    volume.write(offset, Bytes::from(data), false).await
                }));
            }
            Record::Zero { offset, length } => {
                zero_bytes += length;
                pending.push(Box::pin(
                    async move { volume.write_zeroes(offset, length, false).await },
                ));
            }
        }
    }
    while let Some(result) = pending.next().await {
        result.with_context(partly)?;
    }
    opened.flush().await.with_context(partly)?;
    Ok((data_bytes, zero_bytes, records))
}

pub async fn du(args: DuArgs) -> Result<()> {
    volume::validate_name(&args.name)?;
    let client = args.cluster.connect().await?;
    let space = optio_client::diff::du(&client, &args.name).await?;
    if args.json {
        println!("{}", serde_json::to_value(&space).expect("space serializes"));
        return Ok(());
    }
    let mut table = Table::new(&["name", "provisioned", "used", "referenced"]).left(&[0]);
    for row in &space.rows {
        table.row(vec![
            row.name.clone(),
            output::bytes(row.provisioned_bytes as f64),
            output::bytes(row.used_bytes as f64),
            output::bytes(row.referenced_bytes as f64),
        ]);
    }
    table.row(vec![
        "<total>".into(),
        output::bytes(space.provisioned_bytes as f64),
        output::bytes(space.stored_bytes as f64),
        String::new(),
    ]);
    print!("{}", table.render());
    if space.unreferenced_bytes > 0 {
        println!(
            "{} kept for removed snapshots, not trimmed yet (the next `optio volume snap rm` trims them)",
            output::bytes(space.unreferenced_bytes as f64)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_inside_an_object_make_their_own_runs() {
        let run = ZERO_RUN_BYTES;
        let mut data = vec![0u8; 4 * run + 100];
        data[run + 5] = 1;
        data[2 * run] = 1;
        data[4 * run + 99] = 1;
        assert_eq!(
            runs(&data),
            [(0, run, true), (run, 2 * run, false), (3 * run, run, true), (4 * run, 100, false)]
        );
        assert_eq!(runs(&[0u8; 10]), [(0, 10, true)]);
        assert_eq!(runs(&[]), []);
    }
}
