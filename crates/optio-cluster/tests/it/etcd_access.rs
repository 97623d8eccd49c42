//! The map in an etcd that checks who calls: etcd's users and passwords (a token from
//! `auth/authenticate`, renewed when it expires), TLS with a CA, and client certificates.

use std::time::Duration;

use optio_cluster::MapSource;
use optio_cluster::etcd::{EtcdAccess, EtcdStore};
use optio_local::etcd::{EtcdOptions, EtcdServer, EtcdTls, EtcdUser, etcd_available};
use optio_local::tls::{Ca, Role};

use crate::support::{at_epoch, small_map};

/// Turns etcd's authentication on: `root` (password `root-pw`) and `optio` (password
/// `optio-pw`, read-write under `/optio/` only).
fn enable_auth(etcd: &EtcdServer) {
    let user = |name: &str, password: &str, prefix: Option<&str>| EtcdUser {
        name: name.into(),
        password: password.into(),
        prefix: prefix.map(String::from),
    };
    etcd.enable_auth(&[user("root", "root-pw", None), user("optio", "optio-pw", Some("/optio/"))])
        .expect("etcd's authentication is enabled");
}

fn with_password(password: &str) -> EtcdAccess {
    EtcdAccess { password: Some(password.to_string()), ..EtcdAccess::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_and_password_reach_an_etcd_that_checks_them() {
    if !etcd_available() {
        return;
    }
    let options = EtcdOptions { auth_token_ttl: Some(2), ..EtcdOptions::default() };
    let etcd = EtcdServer::start_with(options).expect("etcd starts");
    enable_auth(&etcd);
    let port = etcd.endpoint().rsplit(':').next().expect("a port").to_string();
    let url = |user: &str| format!("etcd://{user}127.0.0.1:{port}/optio");

    // Without a user, or with a wrong password: a clear error, nothing stored.
    let anonymous = MapSource::parse(&url("")).expect("a source");
    let error = anonymous.load_if_present().await.expect_err("no credentials").to_string();
    assert!(error.contains("OPTIO_ETCD_PASSWORD"), "{error}");
    let wrong = EtcdStore::parse_with(&url("optio@"), &with_password("nope")).expect("parses");
    let error = MapSource::Etcd(wrong).load_if_present().await.expect_err("wrong").to_string();
    assert!(error.contains("refused the credentials of the etcd user `optio`"), "{error}");
    assert!(!error.contains("nope"), "the password is never shown: {error}");
    let error = EtcdStore::parse_with(&url("optio@"), &EtcdAccess::default())
        .expect_err("no password")
        .to_string();
    assert!(error.contains("needs a password"), "{error}");

    // The right one: every operation works, and the source names its user (no password).
    let store = EtcdStore::parse_with(&url("optio@"), &with_password("optio-pw")).expect("parses");
    assert_eq!(store.describe(), url("optio@"));
    let source = MapSource::Etcd(store.clone());
    let map = small_map();
    assert!(source.initialize(&map).await.expect("initialize"));
    let mut watcher = source.watch_after(Some(map.epoch()));
    let next = at_epoch(&map, 2, "b");
    source.compare_and_swap(map.epoch(), &next).await.expect("swap");
    let seen = tokio::time::timeout(Duration::from_secs(10), watcher.next())
        .await
        .expect("the watch delivers")
        .expect("a map");
    assert_eq!(seen.epoch(), next.epoch());

    // The token expires after 2 s unused; the next call gets a new one.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(source.load().await.expect("a load after the token expired").epoch(), next.epoch());

    // The user may not touch keys outside its prefix: the error says how to grant it.
    let elsewhere = EtcdStore::parse_with(
        &format!("etcd://optio@127.0.0.1:{port}/other"),
        &with_password("optio-pw"),
    )
    .expect("parses");
    let error = MapSource::Etcd(elsewhere).initialize(&map).await.expect_err("denied").to_string();
    assert!(error.contains("permission denied") && error.contains("grant"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_client_certificates_reach_an_etcd_that_wants_them() {
    if !etcd_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = Ca::open_or_create(dir.path()).expect("a CA");
    // Server and client: etcd's gateway connects to etcd itself with its server certificate.
    let roles = [Role::Server, Role::Client];
    let server =
        ca.issue(dir.path(), "etcd", "etcd", &["127.0.0.1"], &roles).expect("a certificate");
    let client = ca.issue_client(dir.path(), "optio", "optio").expect("a client certificate");
    let tls = EtcdTls {
        cert: server.cert,
        key: server.key,
        ca: ca.cert_path.clone(),
        client_cert_auth: true,
    };
    let etcd = EtcdServer::start_with(EtcdOptions { tls: Some(tls), ..EtcdOptions::default() })
        .expect("etcd");
    let url = format!("{}/optio", etcd.url());
    assert!(url.starts_with("etcds://"), "{url}");

    let trusted = EtcdAccess {
        ca: Some(ca.cert_path.clone()),
        identity: Some((client.cert.clone(), client.key.clone())),
        ..EtcdAccess::default()
    };
    let source = MapSource::Etcd(EtcdStore::parse_with(&url, &trusted).expect("parses"));
    let map = small_map();
    assert!(source.initialize(&map).await.expect("initialize over TLS"));
    assert_eq!(source.load().await.expect("load over TLS").epoch(), map.epoch());
    let mut watcher = source.watch_after(Some(map.epoch()));
    source.compare_and_swap(map.epoch(), &at_epoch(&map, 2, "c")).await.expect("swap");
    let seen = tokio::time::timeout(Duration::from_secs(10), watcher.next())
        .await
        .expect("the watch delivers")
        .expect("a map");
    assert_eq!(seen.epoch().0, 2);

    // No client certificate: etcd refuses the handshake.
    let no_cert = EtcdAccess { ca: Some(ca.cert_path.clone()), ..EtcdAccess::default() };
    let source = MapSource::Etcd(EtcdStore::parse_with(&url, &no_cert).expect("parses"));
    source.load().await.expect_err("no client certificate");

    // Another CA: Optio refuses etcd's certificate.
    let other_dir = tempfile::tempdir().expect("tempdir");
    let other = Ca::open_or_create(other_dir.path()).expect("another CA");
    let wrong_ca = EtcdAccess { ca: Some(other.cert_path.clone()), ..trusted.clone() };
    let source = MapSource::Etcd(EtcdStore::parse_with(&url, &wrong_ca).expect("parses"));
    let error = source.load().await.expect_err("an unknown CA").to_string();
    assert!(error.to_lowercase().contains("certificate"), "{error}");

    // etcds:// without a CA: a clear error at once.
    let error = EtcdStore::parse_with(&url, &EtcdAccess::default()).expect_err("no CA").to_string();
    assert!(error.contains("OPTIO_ETCD_CA"), "{error}");
}
