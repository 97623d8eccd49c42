//! Proves the Redis dirty table against a real `redis-server` started by the test: FIFO order,
//! keys of any bytes round-trip; Redis down → pushes succeed into the spill, reads fail with a
//! clear error; Redis back → spilled entries drained in order, none lost; a restarted Redis
//! is reconnected to without spilling; foreign list elements and wrong types are reported.

use std::path::Path;
use std::time::{Duration, Instant};

use optio_cluster::dirty::{DirtyEntry, DirtyError, DirtyTable, RedisDirtyTable};
use optio_local::redis::{RedisServer, redis_available};

use crate::dirty_local::{check_fifo, entry, read_all};

/// How long a test waits for the background drain.
const DRAIN_WAIT: Duration = Duration::from_secs(15);

async fn open_redis(redis: &RedisServer, list: &str, dir: &Path) -> (DirtyTable, RedisDirtyTable) {
    let spec = format!("{}?list={list}", redis.url());
    let table = DirtyTable::open(Some(&spec), dir).await.expect("the Redis table opens");
    let DirtyTable::Redis(redis_table) = &table else { panic!("{spec} opened {table:?}") };
    let redis_table = redis_table.clone();
    (table, redis_table)
}

async fn raw_connection(redis: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(redis.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

fn assert_unreachable(result: Result<impl std::fmt::Debug, DirtyError>, redis: &RedisServer) {
    let error = result.expect_err("Redis is down");
    assert!(matches!(error, DirtyError::RedisUnreachable { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains(&format!("cannot reach Redis at {}", redis.url())), "{message}");
    assert!(message.contains("re-integration pauses until it returns"), "{message}");
}

#[tokio::test]
async fn redis_table_is_fifo_and_keeps_any_key() {
    if !redis_available() {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (table, _) = open_redis(&redis, "fifo", dir.path()).await;
    assert!(table.describe().starts_with("Redis list `fifo` at redis://127.0.0.1:"));
    check_fifo(&table).await;
    let odd = [" lead", "tab\there", "new\nline", "ünï😀", "\r\n", "ends with space "];
    let entries: Vec<_> = odd
        .iter()
        .enumerate()
        .map(|(i, key)| DirtyEntry {
            pool: u32::MAX - i as u32,
            key: key.to_string(),
            version: u64::MAX,
        })
        .collect();
    table.push(&entries).await.unwrap();
    assert_eq!(read_all(&table).await, entries);
    // The elements are compact: 13 bytes plus the key.
    let mut raw = raw_connection(&redis).await;
    let values: Vec<Vec<u8>> =
        redis::cmd("LRANGE").arg("fifo").arg(0).arg(0).query_async(&mut raw).await.unwrap();
    assert_eq!(values[0].len(), 13 + odd[0].len());
    // The default list key.
    let default = DirtyTable::open(Some(&redis.url()), dir.path()).await.unwrap();
    default.push(&[entry(1, 1)]).await.unwrap();
    let length: u64 = redis::cmd("LLEN").arg("optio:dirty").query_async(&mut raw).await.unwrap();
    assert_eq!(length, 1);
}

#[tokio::test]
async fn pushes_spill_while_redis_is_down_and_drain_in_order_when_it_returns() {
    if !redis_available() {
        return;
    }
    let mut redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (table, redis_table) = open_redis(&redis, "outage", dir.path()).await;
    let all: Vec<_> = (0..40).map(|seq| entry(seq as u32 % 3, seq)).collect();
    table.push(&all[..5]).await.unwrap();
    redis.stop().unwrap();

    for one in all[5..30].chunks(2) {
        table.push(one).await.expect("a push succeeds while Redis is down");
    }
    assert_eq!(redis_table.spill().len().await.unwrap(), 25);
    assert_unreachable(table.len().await, &redis);
    assert_unreachable(table.range(0, 10).await, &redis);
    assert_unreachable(table.pop_front(1).await, &redis);

    redis.restart().unwrap();
    // The background drain moves the spill to Redis without any further push.
    let deadline = Instant::now() + DRAIN_WAIT;
    while redis_table.spill().len().await.unwrap() > 0 {
        assert!(Instant::now() < deadline, "the spill was not drained within {DRAIN_WAIT:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    table.push(&all[30..]).await.unwrap();
    assert_eq!(read_all(&table).await, all, "every entry once, in push order");
}

#[tokio::test]
async fn a_table_opened_while_redis_is_down_spills_then_drains_on_read() {
    if !redis_available() {
        return;
    }
    let mut redis = RedisServer::start().unwrap();
    redis.stop().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (table, redis_table) = open_redis(&redis, "late", dir.path()).await;
    table.push(&[entry(1, 0), entry(1, 1)]).await.unwrap();
    assert_eq!(redis_table.spill().len().await.unwrap(), 2);
    redis.restart().unwrap();
    // A read drains first, so the re-integrator sees the spilled entries.
    assert_eq!(table.range(0, 10).await.unwrap(), [entry(1, 0), entry(1, 1)]);
    assert_eq!(redis_table.spill().len().await.unwrap(), 0);
    // A second table sharing the spill directory (another process) finds nothing to resend.
    let (other, _) = open_redis(&redis, "late", dir.path()).await;
    assert_eq!(other.len().await.unwrap(), 2);
}

#[tokio::test]
async fn a_restarted_redis_is_reconnected_to_without_spilling() {
    if !redis_available() {
        return;
    }
    let mut redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (table, redis_table) = open_redis(&redis, "restart", dir.path()).await;
    table.push(&[entry(1, 0)]).await.unwrap();
    redis.restart().unwrap();
    table.push(&[entry(1, 1)]).await.unwrap();
    assert_eq!(redis_table.spill().len().await.unwrap(), 0, "no spill: Redis answered");
    assert_eq!(table.range(0, 10).await.unwrap(), [entry(1, 0), entry(1, 1)]);
    // Killed (SIGKILL) and restarted: what it acknowledged is still there (appendfsync always).
    redis.kill().unwrap();
    redis.restart().unwrap();
    assert_eq!(table.len().await.unwrap(), 2);
}

#[tokio::test]
async fn foreign_elements_and_wrong_types_are_reported() {
    if !redis_available() {
        return;
    }
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (table, redis_table) = open_redis(&redis, "mixed", dir.path()).await;
    table.push(&[entry(1, 0)]).await.unwrap();
    let mut raw = raw_connection(&redis).await;
    let _: u64 =
        redis::cmd("RPUSH").arg("mixed").arg("not an entry").query_async(&mut raw).await.unwrap();
    let error = table.range(0, 10).await.unwrap_err();
    assert!(matches!(error, DirtyError::CorruptRedisEntry { position: 1, .. }), "{error:?}");
    assert!(error.to_string().contains("element 1 of Redis list `mixed`"), "{error}");

    // The list's key holds a string: reads say so; pushes are kept in the spill.
    let (table, redis_table_2) = open_redis(&redis, "string", dir.path()).await;
    let _: () = redis::cmd("SET").arg("string").arg("x").query_async(&mut raw).await.unwrap();
    let error = table.len().await.unwrap_err();
    assert!(matches!(error, DirtyError::Redis { .. }), "{error:?}");
    assert!(error.to_string().contains("WRONGTYPE"), "{error}");
    table.push(&[entry(1, 1)]).await.unwrap();
    assert_eq!(redis_table_2.spill().len().await.unwrap(), 1);
    drop(redis_table);
}

/// Redis with a password: none or a wrong one is a clear error when the table opens (not a
/// silent spill); the right one (here in the URL; in production from OPTIO_REDIS_PASSWORD or
/// OPTIO_REDIS_PASSWORD_FILE, never on a command line) works.
#[tokio::test]
async fn redis_credentials_are_checked_when_the_table_opens() {
    if !redis_available() {
        return;
    }
    let redis = RedisServer::start_with_password("s3cret").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let port = redis.port();
    for spec in [format!("redis://127.0.0.1:{port}"), format!("redis://:wrong@127.0.0.1:{port}")] {
        let error = DirtyTable::open(Some(&spec), dir.path()).await.expect_err("refused");
        let text = error.to_string();
        assert!(text.contains("refused the credentials"), "{text}");
        assert!(text.contains("OPTIO_REDIS_PASSWORD"), "{text}");
        assert!(!text.contains("wrong"), "the password is not echoed: {text}");
    }
    let spec = format!("redis://:s3cret@127.0.0.1:{port}?list=auth");
    let table = DirtyTable::open(Some(&spec), dir.path()).await.expect("the right password");
    assert!(!table.describe().contains("s3cret"), "{}", table.describe());
    check_fifo(&table).await;
}

/// A Redis that takes only TLS clients with a certificate (and a password): reached over
/// `rediss://` with the CA, the client certificate and the password; without the certificate,
/// or trusting another CA, nothing is pushed there (the table spills and says Redis is
/// unreachable).
#[tokio::test]
async fn redis_over_tls_with_a_client_certificate() {
    use optio_cluster::dirty::RedisAccess;
    use optio_local::redis::RedisTls;
    use optio_local::tls::Ca;
    if !redis_available() {
        return;
    }
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::open_or_create(certs.path()).unwrap();
    let server = ca.issue_server(certs.path(), "redis", "redis", &["127.0.0.1"]).unwrap();
    let client = ca.issue_client(certs.path(), "client", "optio").unwrap();
    let tls = RedisTls {
        cert: server.cert,
        key: server.key,
        ca: ca.cert_path.clone(),
        auth_clients: true,
    };
    let redis = RedisServer::start_tls(tls, Some("tls-s3cret")).unwrap();
    let url = redis.tls_url().expect("a TLS port");
    assert!(url.starts_with("rediss://"), "{url}");
    let dir = tempfile::tempdir().unwrap();
    let access = RedisAccess {
        password: Some("tls-s3cret".into()),
        ca: Some(ca.cert_path.clone()),
        identity: Some((client.cert.clone(), client.key.clone())),
    };
    let spec = format!("{url}?list=tls");
    let table = RedisDirtyTable::open_with(&spec, &dir.path().join("spill"), &access)
        .await
        .expect("the TLS table opens");
    let table = DirtyTable::Redis(table);
    check_fifo(&table).await;

    // A wrong password over TLS is refused at once, and not echoed.
    let wrong = RedisAccess { password: Some("nope-nope".into()), ..access.clone() };
    let error = RedisDirtyTable::open_with(&spec, &dir.path().join("spill2"), &wrong)
        .await
        .expect_err("a wrong password");
    let text = error.to_string();
    assert!(text.contains("refused the credentials") && !text.contains("nope-nope"), "{text}");

    // No client certificate, or another CA: Redis is not reached (reads fail clearly).
    let other = tempfile::tempdir().unwrap();
    let other_ca = Ca::open_or_create(other.path()).unwrap();
    for (name, access) in [
        ("no-cert", RedisAccess { identity: None, ..access.clone() }),
        ("wrong-ca", RedisAccess { ca: Some(other_ca.cert_path.clone()), ..access.clone() }),
    ] {
        let table = RedisDirtyTable::open_with(&spec, &dir.path().join(name), &access)
            .await
            .expect("opening does not need Redis");
        let error = DirtyTable::Redis(table).len().await.expect_err(name);
        assert!(matches!(error, DirtyError::RedisUnreachable { .. }), "{name}: {error:?}");
    }
}
