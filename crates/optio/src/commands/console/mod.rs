//! `optio console`: a web console and the admin API it uses (docs/console.md).
//!
//! Its own command rather than a part of `optio manager`: the manager acts for one cluster at a
//! time under a lease and stands by otherwise, while a console is wanted wherever an operator
//! is (a laptop with the cluster's map source and keyring, several at once, a read-only one
//! for a `read` entity); and a web server's attack surface is kept out of the process that
//! marks devices down and out. Both read and change the map through the same store, with a
//! compare-and-swap on its epoch, so they never overwrite each other.
//!
//! * [`session`]: logins against the cluster keyring, session cookies, CSRF tokens;
//! * [`api`]: `/api/v1/…`, JSON in the shapes of the CLI's `--json`;
//! * the page: one HTML, one script, one style sheet, built into the binary.

pub mod api;
pub mod compare;
pub mod judged;
pub mod rates;
pub mod scrape;
pub mod session;
pub mod storage;
pub mod throttle;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::live::LiveMap;
use api::Console;

/// The page, its script and its style sheet: served to anyone (they hold no data; the data
/// comes from the API after a login).
const PAGE_HTML: &str = include_str!("assets/index.html");
const PAGE_JS: &str = include_str!("assets/console.js");
const PAGE_CSS: &str = include_str!("assets/console.css");
/// The storage section's script (volumes, S3 users and buckets).
const STORAGE_JS: &str = include_str!("assets/storage.js");

/// The line `optio console` prints once it listens (what scripts and tests wait for).
pub const LISTENING_PREFIX: &str = "optio console listening on ";
/// Most connections served at once.
pub const CONNECTIONS_MAX: usize = 256;
/// Longest a request's headers may take to arrive.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a TLS handshake may take.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `optio console`.
#[derive(clap::Args, Debug)]
#[command(after_help = "Examples:
  optio console --cluster /tmp/optio --listen 127.0.0.1:8080
  optio console --map etcd://10.0.0.1:2379/optio --auth-keyring /etc/optio/keyring \\
      --listen 0.0.0.0:8443 --https-cert console.pem --https-key console.key

Log in with an entity of the cluster keyring and its key (the `key` of its key file, as
`optio auth add client.NAME --caps read|admin` wrote it): `admin` entities may change the
map, `read` ones only look. The API is described in docs/console-openapi.yaml.")]
pub struct Args {
    #[command(flatten)]
    pub live: LiveMap,
    /// Address to listen on (port 0: any free port; the line printed says which).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The cluster keyring logins are checked against (default: the cluster directory's
    /// `keyring`); it is read again when it changes.
    #[arg(long, value_name = "FILE")]
    pub auth_keyring: Option<PathBuf>,
    /// Serve HTTPS with this certificate chain (PEM; with --https-key). Session cookies are
    /// then `Secure`.
    #[arg(long, value_name = "FILE", requires = "https_key")]
    pub https_cert: Option<PathBuf>,
    /// The HTTPS certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "https_cert")]
    pub https_key: Option<PathBuf>,
    /// The pool of the S3 gateway's users and bucket records (`optio s3 --meta-pool`).
    #[arg(long, default_value = "data", value_name = "POOL")]
    pub s3_meta_pool: String,
    /// Refused logins from one client address within --login-refusal-window beyond which
    /// its logins are answered 429.
    #[arg(long, default_value_t = throttle::REFUSALS_MAX, value_name = "N", hide = true)]
    pub login_refusals_max: usize,
    /// The window refused logins are counted in (e.g. 60s).
    #[arg(long, default_value = "60s", value_parser = crate::output::parse_duration, hide = true)]
    pub login_refusal_window: Duration,
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// The console's routes.
pub fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(|| async { asset("text/html; charset=utf-8", PAGE_HTML) }))
        .route("/console.js", get(|| async { asset("text/javascript; charset=utf-8", PAGE_JS) }))
        .route("/console.css", get(|| async { asset("text/css; charset=utf-8", PAGE_CSS) }))
        .route("/storage.js", get(|| async { asset("text/javascript; charset=utf-8", STORAGE_JS) }))
        .route("/api/v1/login", post(api::login))
        .route("/api/v1/logout", post(api::logout))
        .route("/api/v1/session", get(api::session))
        .route("/api/v1/console", get(api::console_stats))
        .route("/api/v1/health", get(api::health_endpoint))
        .route("/api/v1/map", get(api::map_summary))
        .route("/api/v1/devices", get(api::devices))
        .route("/api/v1/servers", get(api::servers_endpoint))
        .route("/api/v1/pools", get(api::pools))
        .route("/api/v1/pools/compare", get(compare::compare))
        .route("/api/v1/whatif", post(api::what_if))
        .route("/api/v1/map/edit", post(api::edit))
        .route("/api/v1/volumes", get(storage::volumes).post(storage::volume_create))
        .route("/api/v1/volumes/resize", post(storage::volume_resize))
        .route("/api/v1/volumes/rm", post(storage::volume_rm))
        .route("/api/v1/s3", get(storage::s3))
        .route("/api/v1/s3/users", post(storage::s3_user_create))
        .route("/api/v1/s3/users/rotate", post(storage::s3_user_rotate))
        .route("/api/v1/s3/users/rm", post(storage::s3_user_rm))
        .fallback(|| async {
            (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "application/json")], "{\"error\":\"no such path: the API is under /api/v1/ (docs/console-openapi.yaml)\"}")
        })
        .layer(axum::extract::DefaultBodyLimit::max(api::BODY_BYTES_MAX))
        .with_state(console)
}

pub fn run(args: Args) -> Result<()> {
    crate::commands::init_logging("warn");
    // A what-if at 1,000 devices allocates and frees hundreds of MB: kept 30 s (unless
    // MIMALLOC_PURGE_DELAY says otherwise), the next one reuses it instead of faulting it in.
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        crate::output::keep_freed_memory_for(30_000);
    }
    let source = args.live.source()?;
    let transport = args.live.transport()?;
    let keyring = match (&args.auth_keyring, args.live.cluster_dir()) {
        (Some(path), _) => path.clone(),
        (None, Some(dir)) => dir.join(crate::commands::identity::KEYRING_FILE),
        (None, None) => anyhow::bail!(
            "which keyring are logins checked against? pass --auth-keyring FILE (the cluster keyring), or --cluster DIR"
        ),
    };
    let tls = match (&args.https_cert, &args.https_key) {
        (Some(cert), Some(key)) => Some(tokio_rustls::TlsAcceptor::from(Arc::new(
            optio_tls::server_config(cert, key, None).context("cannot serve HTTPS")?,
        ))),
        _ => None,
    };
    let sessions = session::Sessions::new(&keyring, tls.is_some())?;
    let runtime = crate::commands::runtime()?;
    runtime.block_on(async move {
        let map = source
            .load()
            .await
            .with_context(|| format!("cannot load the map from {}", source.describe()))?;
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        let cluster = args.live.cluster_dir().map(|dir| crate::commands::client::ClusterConn {
            cluster: Some(dir),
            dirty: None,
            identity: args.live.identity.identity(),
        });
        let console = Arc::new(
            Console::new(source, transport, sessions)
                .with_cluster(cluster, args.s3_meta_pool.clone())
                .with_login_limits(args.login_refusal_window, args.login_refusals_max),
        );
        tokio::spawn(console.clone().keep_warm());
        println!(
            "{LISTENING_PREFIX}{}://{addr}/ (map {} at epoch {})",
            if tls.is_some() { "https" } else { "http" },
            console.source().describe(),
            map.epoch()
        );
        use std::io::Write as _;
        std::io::stdout().flush().ok();
        serve(listener, tls, router(console)).await
    })
}

/// Serves `app` on `listener` (TLS first, with `tls`) until Ctrl-C.
async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
) -> Result<()> {
    let permits = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    tracing::warn!("optio console: accept: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        // The client's address, for the handlers that count by it (logins).
        let app = app.clone().layer(axum::Extension(axum::extract::ConnectInfo(peer)));
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let service = hyper_util::service::TowerToHyperService::new(app);
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
            match tls {
                None => {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = http.serve_connection(io, service).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = http.serve_connection(io, service).await;
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    /// The API's description, which must name every path the router serves and no other.
    const OPENAPI: &str = include_str!("../../../../../docs/console-openapi.yaml");

    #[test]
    fn the_openapi_file_describes_every_api_path_and_no_other() {
        let source = include_str!("mod.rs");
        let routed: std::collections::BTreeSet<String> = source
            .split(".route(\"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .filter(|path| path.starts_with("/api/"))
            .map(str::to_string)
            .collect();
        let described: std::collections::BTreeSet<String> = OPENAPI
            .lines()
            .filter_map(|line| line.strip_prefix("  /api/"))
            .filter_map(|rest| rest.strip_suffix(':'))
            .map(|rest| format!("/api/{rest}"))
            .collect();
        assert!(!routed.is_empty());
        assert_eq!(routed, described);
    }

    /// Every schema the description refers to is defined there, and the file holds neither
    /// tabs (YAML refuses them) nor the markers of a merge left half done.
    #[test]
    fn the_openapi_files_references_resolve_and_it_is_whole() {
        for (n, line) in OPENAPI.lines().enumerate() {
            assert!(!line.contains('\t'), "line {}: a tab", n + 1);
            for marker in ["<<<<<<<", "=======", ">>>>>>>"] {
                assert!(!line.starts_with(marker), "line {}: {marker}", n + 1);
            }
        }
        let defined: std::collections::BTreeSet<&str> = OPENAPI
            .split_once("\n  schemas:\n")
            .expect("components.schemas")
            .1
            .lines()
            .take_while(|line| line.is_empty() || line.starts_with("    "))
            .filter_map(|line| line.strip_prefix("    "))
            .filter(|rest| !rest.starts_with(' '))
            .filter_map(|rest| rest.strip_suffix(':'))
            .collect();
        assert!(defined.contains("Pool") && defined.contains("PoolUsage"), "{defined:?}");
        for reference in OPENAPI.split("#/components/schemas/").skip(1) {
            let name: String =
                reference.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
            assert!(defined.contains(name.as_str()), "{name} is referred to, not defined");
        }
    }

    #[test]
    fn the_page_fetches_nothing_from_elsewhere() {
        for (name, text) in [
            ("index.html", super::PAGE_HTML),
            ("console.js", super::PAGE_JS),
            ("console.css", super::PAGE_CSS),
            ("storage.js", super::STORAGE_JS),
        ] {
            // (The SVG namespace is a name the script gives the elements it makes, not an
            // address anything is fetched from.)
            let text = text.replace("\"http://www.w3.org/2000/svg\"", "");
            for needle in ["http://", "https://", "//cdn", "url(", "@import"] {
                assert!(!text.contains(needle), "{name} holds {needle}");
            }
        }
        assert!(super::PAGE_JS.contains("textContent") && !super::PAGE_JS.contains("innerHTML"));
        assert!(
            super::STORAGE_JS.contains("textContent") && !super::STORAGE_JS.contains("innerHTML")
        );
    }
}
