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

/// One device of a map that records state epochs: id, address, up, `up_from`, `down_at`.
type Recorded<'a> = (u32, &'a str, bool, u64, Option<u64>);

/// A map of `devices` with their `up_from` and `down_at`, and one pool of one replica.
fn write_recorded_map(path: &std::path::Path, epoch: u64, devices: &[Recorded<'_>]) {
    let mut text = format!("format_version = 1\nepoch = {epoch}\n\n");
    for (id, addr, up, up_from, down_at) in devices {
        text += &format!(
            "[[devices]]\nid = {id}\ncapacity = \"1GiB\"\naddr = \"{addr}\"\nup = {up}\n\
             up_from = {up_from}\nlocation = {{ zone = \"z1\", host = \"h{id}\" }}\n"
        );
        if let Some(down_at) = down_at {
            text += &format!("down_at = {down_at}\n");
        }
    }
    text += "[[pools]]\nid = 1\nname = \"data\"\npg_num = 8\nsize = 1\n";
    let temp = path.with_extension("tmp");
    std::fs::write(&temp, text).expect("write map");
    std::fs::rename(&temp, path).expect("rename map");
}

/// Whether each of the server's devices refuses reads (catching up), by device id.
async fn recovering(server: &TestServer) -> Vec<(u64, bool)> {
    let status: serde_json::Value =
        server.http.get(server.url("/v1/status")).send().await.unwrap().json().await.unwrap();
    let devices = status["devices"].as_array().expect("devices").iter();
    devices
        .map(|d| (d["metrics"]["device"].as_u64().unwrap(), d["recovering"].as_bool().unwrap()))
        .collect()
}

/// A map that records which epochs marked each device down and up (`up_from`, `down_at`)
/// tells a server that skipped maps exactly which of its devices were marked down in them:
/// those catch up, the others serve on. (Before, a gap in epochs made every device catch up,
/// and when every server skipped maps at once no device served reads: `optio bench
/// elastic`'s "every replica is recovering".)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_maps_it_never_saw_only_a_device_they_marked_down_catches_up() {
    let root = tempfile::tempdir().expect("temp dir");
    let map = root.path().join("map.toml");
    let options = Options {
        devices: vec![(0, 1 << 30), (2, 1 << 30)],
        map: Some(map.clone()),
        ..Options::default()
    };
    let server = TestServer::start(root.path(), options).await;
    let here = server.addr.to_string();
    // Epoch 3: devices 0 and 2 (this server) up since epoch 1; device 1 (nothing listens at
    // its address) down.
    let nobody = "127.0.0.1:1";
    write_recorded_map(
        &map,
        3,
        &[(0, &here, true, 1, None), (1, nobody, false, 1, Some(3)), (2, &here, true, 1, None)],
    );
    let serving = wait_until(Duration::from_secs(10), async || {
        recovering(&server).await == [(0, false), (2, false)]
    });
    assert!(serving.await, "both devices serve at epoch 3: {:?}", recovering(&server).await);
    // Epoch 6, 4 and 5 never seen: device 2 was marked down at 4 and up at 5, device 1 up at
    // 5; device 0 stayed up. A read carrying epoch 6 makes the server load it at once.
    write_recorded_map(
        &map,
        6,
        &[(0, &here, true, 1, None), (1, nobody, true, 5, Some(3)), (2, &here, true, 5, Some(4))],
    );
    let url = server.object(2, 1, "k");
    let read = server.http.get(&url).header("x-optio-epoch", "6").send().await.unwrap();
    assert_ne!(read.status(), 409, "the server takes epoch 6");
    // Device 2 catches up from device 1, which does not answer: it keeps refusing reads. The
    // catch-up steps the devices in id order, so device 0 was looked at for epoch 6 first.
    let caught = wait_until(Duration::from_secs(10), async || {
        recovering(&server).await.contains(&(2, true))
    });
    assert!(caught.await, "device 2, marked down in a map never seen, catches up");
    assert_eq!(
        recovering(&server).await,
        [(0, false), (2, true)],
        "device 0, which no map marked down, serves on"
    );
    let (status, kind, _) =
        error_of(server.http.get(&url).header("x-optio-epoch", "6").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (503, "recovering"));
    server.stop().await;
}
