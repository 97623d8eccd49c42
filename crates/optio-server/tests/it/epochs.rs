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

/// A write admitted under epoch 3 whose body is still arriving when the map moves to epoch 4
/// is in a listing at epoch 4: the listing waits for it. (A device catching up lists its
/// peers at the epoch that marked it up; without the wait it missed such writes, which the
/// peer then acknowledged, and served stale reads.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_at_a_newer_epoch_waits_for_writes_admitted_under_older_ones() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let root = tempfile::tempdir().expect("temp dir");
    let map = root.path().join("map.toml");
    write_map(&map, 3);
    let server =
        TestServer::start(root.path(), Options { map: Some(map.clone()), ..Options::default() })
            .await;
    let mut slow = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = "PUT /v1/dev/0/objects/1/slow HTTP/1.1\r\nhost: optio\r\nx-optio-epoch: 3\r\n\
                content-length: 8\r\n\r\nhalf";
    slow.write_all(head.as_bytes()).await.unwrap();
    // Admitted under epoch 3; the rest of the body has not arrived.
    tokio::time::sleep(Duration::from_millis(500)).await;
    write_map(&map, 4);
    let listing = {
        let (http, url) = (server.http.clone(), server.url("/v1/dev/0/objects/1?tombstones=true"));
        tokio::spawn(async move {
            let answer = http.get(url).header("x-optio-epoch", "4").send().await.unwrap();
            assert_eq!(answer.status(), 200);
            let listing: serde_json::Value = answer.json().await.unwrap();
            let objects = listing["objects"].as_array().unwrap().clone();
            objects.iter().map(|o| o["key"].as_str().unwrap().to_string()).collect::<Vec<_>>()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!listing.is_finished(), "the listing waits for the write of epoch 3");
    slow.write_all(b"done").await.unwrap();
    let mut answer = [0u8; 12];
    slow.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"HTTP/1.1 201", "the write of epoch 3 is stored");
    let keys = tokio::time::timeout(Duration::from_secs(10), listing).await.unwrap().unwrap();
    assert_eq!(keys, ["slow"], "the listing shows the write it waited for");
    // A write of epoch 3 that arrives now is refused: the set of writes waited for drains.
    let url = server.object(0, 1, "late");
    let late = server.http.put(&url).header("x-optio-epoch", "3").body("v").send().await.unwrap();
    let (status, kind, _) = error_of(late).await;
    assert_eq!((status, kind.as_str()), (409, "stale-epoch"));
    server.stop().await;
}

/// A map with device 0 up and device 1 (nothing listens at its address) up or down.
fn write_pair_map(path: &std::path::Path, epoch: u64, second_up: bool) {
    let device = |id: u32, up: bool| {
        format!(
            "[[devices]]\nid = {id}\ncapacity = \"1GiB\"\naddr = \"127.0.0.1:1\"\nup = {up}\n\
             location = {{ zone = \"z1\", host = \"h{id}\" }}\n"
        )
    };
    let pool = "[[pools]]\nid = 1\nname = \"data\"\npg_num = 8\nsize = 1\n";
    let text = format!(
        "format_version = 1\nepoch = {epoch}\n\n{}{}{pool}",
        device(0, true),
        device(1, second_up)
    );
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, text).expect("write map");
    std::fs::rename(&temp, path).expect("rename map");
}

/// Maps skipped (an epoch gap) may have marked a device down, and writes gone around it: the
/// device catches up again before it serves reads. A map one epoch newer does not make it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_catches_up_again_after_maps_it_never_saw() {
    let root = tempfile::tempdir().expect("temp dir");
    let map = root.path().join("map.toml");
    write_pair_map(&map, 3, false);
    let server =
        TestServer::start(root.path(), Options { map: Some(map.clone()), ..Options::default() })
            .await;
    let url = server.object(0, 1, "k");
    let put = server.http.put(&url).header("x-optio-epoch", "3").body("v").send().await.unwrap();
    assert_eq!(put.status(), 201);
    // No peer is up: the device serves once it has looked at the map.
    let read = |epoch: &'static str| {
        let (http, url) = (server.http.clone(), url.clone());
        async move { http.get(&url).header("x-optio-epoch", epoch).send().await.unwrap() }
    };
    let serving = wait_until(Duration::from_secs(10), async || read("3").await.status() == 200);
    assert!(serving.await, "device 0 serves at epoch 3");
    // Epoch 4: device 1 comes up; nothing was skipped, device 0 keeps serving.
    write_pair_map(&map, 4, true);
    assert_eq!(read("4").await.status(), 200);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(read("4").await.status(), 200, "one epoch on: no catching up");
    // Epoch 6, and 5 never seen: device 0 catches up from device 1, which does not answer, so
    // it keeps refusing reads.
    write_pair_map(&map, 6, true);
    let refused =
        wait_until(Duration::from_secs(10), async || read("6").await.status() == 503).await;
    assert!(refused, "device 0 catches up after a gap in epochs");
    let (status, kind, _) = error_of(read("6").await).await;
    assert_eq!((status, kind.as_str()), (503, "recovering"));
    server.stop().await;
}
