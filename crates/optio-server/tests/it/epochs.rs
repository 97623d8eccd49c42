//! Epochs: a request from a stale epoch is refused with the current one; a newer map file is
//! picked up; an epoch newer than any map the server can load is refused.

use std::time::Duration;

use crate::{Options, TestServer, error_of, wait_until, write_map};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_and_unknown_epochs_are_refused() {
    let root = tempfile::tempdir().expect("temp dir");
    let map = root.path().join("map.toml");
    write_map(&map, 3);
    let server =
        TestServer::start(root.path(), Options { map: Some(map.clone()), ..Options::default() })
            .await;
    let url = server.object(0, 1, "k");
    let ok = server.http.put(&url).header("x-optio-epoch", "3").body("v").send().await.unwrap();
    assert_eq!(ok.status(), 201);
    assert_eq!(ok.headers()["x-optio-epoch"], "3");

    let stale = server.http.get(&url).header("x-optio-epoch", "2").send().await.unwrap();
    assert_eq!(stale.headers()["x-optio-epoch"], "3", "the answer names the current epoch");
    let (status, kind, reason) = error_of(stale).await;
    assert_eq!((status, kind.as_str()), (409, "stale-epoch"));
    assert!(reason.contains("epoch 3"), "{reason}");

    let (status, kind, _) =
        error_of(server.http.get(&url).header("x-optio-epoch", "9").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (409, "unknown-epoch"));

    // A newer map: a request carrying it makes the server reload at once…
    write_map(&map, 4);
    let newer = server.http.get(&url).header("x-optio-epoch", "4").send().await.unwrap();
    assert_eq!(newer.status(), 200);
    // …and the poller picks up the next one by itself.
    write_map(&map, 5);
    let http = server.http.clone();
    let health = server.url("/health");
    let reached = wait_until(Duration::from_secs(10), async || {
        let body: serde_json::Value = http.get(&health).send().await.unwrap().json().await.unwrap();
        body["epoch"] == 5
    })
    .await;
    assert!(reached, "the server reloads the changed map file");
    let (status, kind, _) =
        error_of(server.http.get(&url).header("x-optio-epoch", "4").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (409, "stale-epoch"));
    server.stop().await;
}
