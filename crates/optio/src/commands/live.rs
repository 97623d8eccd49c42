//! Where the live map is: `--map SOURCE` or `--cluster DIR`, for every command that reads or
//! edits the map a cluster runs on.

use std::path::PathBuf;

use anyhow::{Result, bail};
use optio_cluster::source::MapSource;

/// Where the live map is.
#[derive(clap::Args, Debug, Clone)]
pub struct LiveMap {
    /// The map: a map file, a cluster directory, or etcd://[USER@]HOST:PORT[/prefix] (etcds://
    /// for TLS; credentials from OPTIO_ETCD_PASSWORD(_FILE), OPTIO_ETCD_CA/CERT/KEY).
    #[arg(long, value_name = "SOURCE")]
    pub map: Option<String>,
    /// The cluster directory `optio up` printed (its map, in a file or in etcd).
    #[arg(long, env = "OPTIO_CLUSTER", value_name = "DIR")]
    pub cluster: Option<PathBuf>,
    #[command(flatten)]
    pub identity: crate::commands::identity::AdminIdentity,
}

impl LiveMap {
    /// The cluster directory, when the map is given as one.
    pub fn cluster_dir(&self) -> Option<PathBuf> {
        match (&self.map, &self.cluster) {
            (Some(spec), _) => Some(PathBuf::from(spec)).filter(|p| p.is_dir()),
            (None, dir) => dir.clone(),
        }
    }

    /// A transport signing as the command's identity.
    pub fn transport(&self) -> Result<optio_net::HttpTransport> {
        self.identity.identity().transport(self.cluster_dir().as_deref())
    }

    /// The map source named.
    pub fn source(&self) -> Result<MapSource> {
        match (&self.map, &self.cluster) {
            (Some(spec), _) => Ok(MapSource::parse(spec)?),
            (None, Some(dir)) => Ok(optio_cluster::dir::cluster_source(dir)?),
            (None, None) => bail!(
                "which map? pass --map FILE|DIR|etcd://HOST:PORT, or --cluster DIR (or set OPTIO_CLUSTER)"
            ),
        }
    }
}
