//! Durability: a flipped byte is detected on read and the replica quarantined; what a crash
//! leaves behind is never visible; a full device answers 507; a restart finds every object.

use std::sync::Arc;

use optio_server::{Disk, Fault, FaultyDisk};

use crate::{Options, TestServer, error_of, listed_keys};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_is_detected_and_quarantined() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let url = server.object(0, 1, "victim");
    assert_eq!(server.http.put(&url).body(vec![7u8; 4096]).send().await.unwrap().status(), 201);
    let file =
        optio_server::store::object_path(&server.dirs[0], optio_placement::PoolId(1), "victim");
    let mut bytes = std::fs::read(&file).expect("stored file");
    bytes[2000] ^= 0x20;
    std::fs::write(&file, &bytes).expect("damage");
    let (status, kind, reason) = error_of(server.http.get(&url).send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (500, "corrupt"), "{reason}");
    assert!(reason.contains("checksum"), "{reason}");
    assert!(!file.exists(), "moved to quarantine");
    let quarantined = std::fs::read_dir(server.dirs[0].join("quarantine")).unwrap().count();
    assert_eq!(quarantined, 1);
    assert_eq!(server.http.head(&url).send().await.unwrap().status(), 404, "forgotten");
    // A repair (a write of the same version) brings it back.
    assert_eq!(server.http.put(&url).body(vec![7u8; 4096]).send().await.unwrap().status(), 201);
    assert_eq!(server.http.get(&url).send().await.unwrap().bytes().await.unwrap().len(), 4096);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_finds_every_object_and_quarantines_damaged_headers() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    for i in 0..20 {
        let put = server
            .http
            .put(server.object(0, 3, &format!("k{i}")))
            .body(format!("value {i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(put.status(), 201);
    }
    let dir = server.dirs[0].clone();
    server.stop().await;
    let file = optio_server::store::object_path(&dir, optio_placement::PoolId(3), "k7");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[30] ^= 1; // inside the header
    std::fs::write(&file, &bytes).unwrap();
    std::fs::write(dir.join("tmp").join("99.1"), b"a torn write").unwrap();
    let server = TestServer::start(root.path(), Options::default()).await;
    for i in 0..20 {
        let status =
            server.http.get(server.object(0, 3, &format!("k{i}"))).send().await.unwrap().status();
        assert_eq!(status, if i == 7 { 404 } else { 200 }, "k{i}");
    }
    assert_eq!(std::fs::read_dir(dir.join("tmp")).unwrap().count(), 0, "leftovers removed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_rename_leaves_nothing_visible() {
    let root = tempfile::tempdir().expect("temp dir");
    let disk = Arc::new(FaultyDisk::new());
    let mut options = Options::default();
    options.disks.insert(0, disk.clone() as Arc<dyn Disk>);
    let server = TestServer::start(root.path(), options).await;
    let url = server.object(0, 1, "k");
    assert_eq!(
        server
            .http
            .put(&url)
            .header("x-optio-version", "1")
            .body("old")
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    disk.set_fault(Some(Fault::CrashBeforeRename));
    // Larger than the old file, so written aside and renamed over it (a write no larger is
    // written over the old file's content, with no rename: see the store's tests).
    let (status, kind, _) = error_of(
        server.http.put(&url).header("x-optio-version", "2").body("newer").send().await.unwrap(),
    )
    .await;
    assert_eq!((status, kind.as_str()), (500, "io"));
    disk.set_fault(None);
    assert_eq!(
        server.http.get(&url).send().await.unwrap().bytes().await.unwrap(),
        "old",
        "the old version stays whole"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_device_answers_507() {
    let root = tempfile::tempdir().expect("temp dir");
    let disk = Arc::new(FaultyDisk::new());
    let mut options = Options { devices: vec![(0, 64 << 10)], ..Options::default() };
    options.disks.insert(0, disk.clone() as Arc<dyn Disk>);
    let server = TestServer::start(root.path(), options).await;
    let mut stored = 0;
    for i in 0..10 {
        let response = server
            .http
            .put(server.object(0, 1, &format!("k{i}")))
            .body(vec![1u8; 16 << 10])
            .send()
            .await
            .unwrap();
        if response.status() == 201 {
            stored += 1;
            continue;
        }
        let (status, kind, reason) = error_of(response).await;
        assert_eq!((status, kind.as_str()), (507, "full"), "{reason}");
        assert!(reason.contains("full"), "{reason}");
    }
    assert_eq!(stored, 3, "64 KiB holds three 16 KiB objects with their headers");
    // The file system itself running out of space is a 507 too.
    assert_eq!(server.http.delete(server.object(0, 1, "k0")).send().await.unwrap().status(), 204);
    disk.set_fault(Some(Fault::Full));
    let (status, kind, _) =
        error_of(server.http.put(server.object(0, 1, "x")).body("x").send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (507, "full"));
    disk.set_fault(None);
    assert_eq!(
        server.http.put(server.object(0, 1, "x")).body("x").send().await.unwrap().status(),
        201
    );
    server.stop().await;
}

/// Issue 13, defect 2: a file replaced behind the server's back — an older version of the same
/// object, or a valid file of another key — is never served as the object; it is quarantined
/// and forgotten, so that a repair at the stored version is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_file_is_never_served_and_the_replica_can_be_repaired() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let put = |key: &'static str, version: &'static str, body: &'static str| {
        let request = server.http.put(server.object(0, 3, key)).header("x-optio-version", version);
        async move { request.body(body).send().await.unwrap().status().as_u16() }
    };
    let dir = server.dirs[0].clone();
    let file = |key: &str| optio_server::store::object_path(&dir, optio_placement::PoolId(3), key);

    assert_eq!(put("k", "10", "v1").await, 201);
    let v1 = std::fs::read(file("k")).unwrap();
    assert_eq!(put("k", "20", "v2").await, 201);
    std::fs::write(file("k"), &v1).unwrap(); // the old version planted back
    let (status, kind, reason) =
        error_of(server.http.get(server.object(0, 3, "k")).send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (500, "corrupt"), "never v1: {reason}");
    assert!(reason.contains("version 10 where version 20"), "{reason}");
    let head = server.http.head(server.object(0, 3, "k")).send().await.unwrap();
    assert_eq!(head.status(), 404, "the replica is forgotten, not announced");
    assert_eq!(put("k", "20", "v2").await, 201, "a repair at the stored version is taken");
    let get = server.http.get(server.object(0, 3, "k")).send().await.unwrap();
    assert_eq!(get.text().await.unwrap(), "v2");

    // A valid file of another key copied over a replica.
    assert_eq!(put("a", "5", "aaa").await, 201);
    assert_eq!(put("b", "6", "bbb").await, 201);
    std::fs::copy(file("a"), file("b")).unwrap();
    let (status, kind, reason) =
        error_of(server.http.get(server.object(0, 3, "b")).send().await.unwrap()).await;
    assert_eq!((status, kind.as_str()), (500, "corrupt"), "{reason}");
    assert!(reason.contains("key \"a\""), "{reason}");
    let keys = listed_keys(&server, "/v1/dev/0/objects/3").await;
    assert!(!keys.iter().any(|k| k == "b"), "the listing agrees: {keys:?}");
    assert_eq!(put("b", "6", "bbb").await, 201, "repaired");
    let get = server.http.get(server.object(0, 3, "b")).send().await.unwrap();
    assert_eq!(get.text().await.unwrap(), "bbb");
    server.stop().await;
}
