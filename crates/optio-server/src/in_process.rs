//! A server's core in process, without a socket: the state [`Server::bind`](crate::Server::bind)
//! builds from a [`ServerConfig`] (devices, map, keyring), and the same router — guard,
//! decode, dispatch — serving one HTTP request at a time as a value. Its listening address,
//! TLS, local socket, connection limits and background tasks (following the map, moving
//! data, catching up, scrubbing, committing choice records on a timer) are not there: the
//! map is re-read when a request carries a newer epoch, or by [`InProcess::refresh_map`].
//! Catching up does not run either: a server that follows a map starts with every device
//! recovering (refusing reads) until [`InProcess::caught_up`] says it missed nothing.
//! Only the task that samples the machine's metrics and group-commits choice records runs
//! (until the value is dropped), as requests that defer a record's sync wait for it.
//!
//! For tests that run clients against real servers without processes or sockets (the
//! client's fault-injection tests put a fault-injecting transport around one of these per
//! server), and for embedding.
//!
//! ```no_run
//! # async fn example() -> Result<(), optio_server::ServerError> {
//! use optio_server::in_process::{Body, InProcess, http};
//! use optio_server::{DeviceConfig, ServerConfig};
//! let config = ServerConfig {
//!     devices: vec![DeviceConfig { id: 0, dir: "/tmp/optio/dev0".into(), capacity_bytes: 1 << 30 }],
//!     ..ServerConfig::default()
//! };
//! let core = InProcess::open(config).await?;
//! let request = http::Request::get("/health").body(Body::empty()).unwrap();
//! assert_eq!(core.serve(request).await.status(), 200);
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;

use tower_service::Service as _;

pub use axum::body::{Body, to_bytes};
pub use axum::http;

use crate::store::DeviceStore;
use crate::{ServerConfig, ServerError};

/// A server's state and router, serving requests handed to it as values.
pub struct InProcess {
    state: Arc<crate::serve::AppState>,
    router: axum::Router,
    background: tokio::task::JoinHandle<()>,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.background.abort();
    }
}

impl InProcess {
    /// Opens `config`'s devices and loads its map, as [`Server::bind`](crate::Server::bind)
    /// does; `listen`, `tls`, `local_socket` and the connection limits are not used.
    pub async fn open(config: ServerConfig) -> Result<InProcess, ServerError> {
        let (state, _transport) = crate::open_state(&config).await?;
        let state = Arc::new(state);
        let router = crate::http::router(state.clone());
        let background = tokio::spawn(crate::background(state.clone()));
        Ok(InProcess { state, router, background })
    }

    /// Serves one request through the server's router (authentication, decoding, epochs,
    /// dispatch), as a connection would hand it over.
    pub async fn serve(&self, request: http::Request<Body>) -> http::Response<Body> {
        let mut router = self.router.clone();
        match router.call(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        }
    }

    /// Reads the map from its source now and installs it if newer (what a server following
    /// its map does within the source's delivery time). Whether the epoch changed.
    pub async fn refresh_map(&self) -> Result<bool, crate::ServerError> {
        self.state.map.reload().await.map_err(crate::ServerError::Map)
    }

    /// Lets every device serve reads, as if it had caught up with its peers: the caller
    /// knows the devices missed no write (a fresh cluster, all of whose servers run in
    /// process), since no catch-up runs here to find out.
    pub fn caught_up(&self) {
        self.state.catchup.mark_all_caught_up();
    }

    /// The map epoch held.
    pub fn epoch(&self) -> u64 {
        self.state.map.epoch()
    }

    /// A device served here, to look at (or set up) what it stores directly.
    pub fn device(&self, id: u32) -> Option<Arc<DeviceStore>> {
        self.state.devices.get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use optio_net::{Call, Endpoint, Op};
    use optio_placement::PoolId;
    use optio_proto::ObjectVersion;

    use super::*;

    /// `call` as the HTTP transport sends it.
    fn request_of(call: &Call<'_>, body: Bytes) -> http::Request<Body> {
        let request = call.request();
        let mut builder =
            http::Request::builder().method(call.op.method().as_str()).uri(request.path());
        for (name, value) in request.headers() {
            builder = builder.header(name, value);
        }
        builder = builder.header(http::header::CONTENT_LENGTH, body.len());
        builder.body(Body::from(body)).unwrap()
    }

    #[tokio::test]
    async fn requests_are_served_by_the_router_without_a_socket() {
        let dir = tempfile::tempdir().unwrap();
        let device =
            crate::DeviceConfig { id: 3, dir: dir.path().join("dev3"), capacity_bytes: 1 << 20 };
        let config = ServerConfig { devices: vec![device], ..ServerConfig::default() };
        let core = InProcess::open(config).await.unwrap();
        let health =
            http::Request::get(optio_proto::route::HEALTH_PATH).body(Body::empty()).unwrap();
        assert_eq!(core.serve(health).await.status(), 200);
        // A write, decoded by the adapter and served as one from a connection is.
        let endpoint = Endpoint { device: 3, addr: "in-process".into() };
        let data = Bytes::from_static(b"hello");
        let checksum = optio_proto::checksum(&data);
        let put = Op::Put {
            key: "k",
            data: data.clone(),
            version: ObjectVersion(7),
            checksum,
            pg_seed: None,
        };
        let call = Call::new(&endpoint, PoolId(1), 0, put);
        let response = core.serve(request_of(&call, data)).await;
        assert!(response.status().is_success(), "{}", response.status());
        let stored = core.device(3).unwrap().info(PoolId(1), "k").unwrap();
        assert_eq!(stored.version, ObjectVersion(7));
        // A device this server does not serve is misdirected.
        let elsewhere = Endpoint { device: 4, addr: "in-process".into() };
        let probe = Call::new(&elsewhere, PoolId(1), 0, Op::Probe { key: "k", want_choice: false });
        let response = core.serve(request_of(&probe, Bytes::new())).await;
        assert_eq!(
            response.headers().get(optio_proto::wire::ERROR).unwrap(),
            optio_proto::ErrorKind::Misdirected.name()
        );
    }
}
