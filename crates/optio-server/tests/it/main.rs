//! optio-server through real sockets and real files: each test starts a server in-process on
//! an ephemeral loopback port over temporary directories.

#![allow(missing_docs)]

mod api;
mod choices;
mod connections;
mod durability;
mod epochs;
mod frames;
mod local;
mod permissions;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use optio_server::{DeviceConfig, Disk, Server, ServerConfig};

/// A server running in this process.
pub struct TestServer {
    pub addr: SocketAddr,
    pub dirs: Vec<PathBuf>,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

pub struct Options {
    pub devices: Vec<(u32, u64)>,
    pub map: Option<PathBuf>,
    pub disks: HashMap<u32, Arc<dyn Disk>>,
    pub max_object_bytes: u64,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_connections: usize,
    /// Verify requests against this keyring (none: authentication off).
    pub keyring: Option<PathBuf>,
    /// The local socket (none: no local reads).
    pub local_socket: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Options {
        let defaults = ServerConfig::default();
        Options {
            devices: vec![(0, 1 << 30)],
            map: None,
            disks: HashMap::new(),
            max_object_bytes: 1 << 20,
            header_timeout: defaults.header_timeout,
            body_timeout: defaults.body_timeout,
            idle_timeout: defaults.idle_timeout,
            max_connections: defaults.max_connections,
            keyring: None,
            local_socket: None,
        }
    }
}

impl TestServer {
    pub async fn start(root: &Path, options: Options) -> TestServer {
        optio_tls::install_crypto_provider();
        let devices: Vec<DeviceConfig> = options
            .devices
            .iter()
            .map(|(id, capacity)| DeviceConfig {
                id: *id,
                dir: root.join(format!("dev{id}")),
                capacity_bytes: *capacity,
            })
            .collect();
        let dirs = devices.iter().map(|d| d.dir.clone()).collect();
        let config = ServerConfig {
            devices,
            map: options.map.as_deref().map(optio_cluster::source::MapSource::file),
            max_object_bytes: options.max_object_bytes,
            disks: options.disks,
            header_timeout: options.header_timeout,
            body_timeout: options.body_timeout,
            idle_timeout: options.idle_timeout,
            max_connections: options.max_connections,
            keyring: options.keyring,
            local_socket: options.local_socket,
            ..ServerConfig::default()
        };
        let server = Server::bind(config).await.expect("server starts");
        let addr = server.local_addr();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .serve(async {
                    let _ = stopped.await;
                })
                .await
                .expect("serves");
        });
        TestServer { addr, dirs, http: reqwest::Client::new(), stop: Some(stop), task: Some(task) }
    }

    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn object(&self, device: u32, pool: u32, key: &str) -> String {
        self.url(&format!(
            "/v1/dev/{device}/objects/{pool}/{}",
            optio_proto::wire::percent_encode(key)
        ))
    }

    pub fn record(&self, device: u32, pool: u32, key: &str) -> String {
        self.url(&format!(
            "/v1/dev/{device}/choices/{pool}/{}",
            optio_proto::wire::percent_encode(key)
        ))
    }
}

/// The error kind and reason of an error answer.
pub async fn error_of(response: reqwest::Response) -> (u16, String, String) {
    let status = response.status().as_u16();
    let kind = response
        .headers()
        .get("x-optio-error")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body: serde_json::Value = response.json().await.expect("error bodies are JSON");
    (status, kind, body["reason"].as_str().unwrap_or("").to_string())
}

/// Waits for `condition` for at most `bound`.
pub async fn wait_until(bound: Duration, mut condition: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if condition().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// A one-device map file at `epoch`.
pub fn write_map(path: &Path, epoch: u64) {
    let text = format!(
        "format_version = 1\nepoch = {epoch}\n\n[[devices]]\nid = 0\ncapacity = \"1GiB\"\naddr = \"127.0.0.1:1\"\nlocation = {{ zone = \"z1\", host = \"h1\" }}\n"
    );
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, text).expect("write map");
    std::fs::rename(&temp, path).expect("rename map");
}

/// The keys a device's listing at `path` (`/v1/dev/…/objects/POOL?…`) returns, in order.
pub async fn listed_keys(server: &TestServer, path: &str) -> Vec<String> {
    let listing: serde_json::Value =
        server.http.get(server.url(path)).send().await.unwrap().json().await.unwrap();
    listing["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["key"].as_str().unwrap().to_string())
        .collect()
}
