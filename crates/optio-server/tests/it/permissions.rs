//! Data at rest: what a server writes is private to its user, and it does not start on a
//! device directory other local users can write.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use optio_server::{DeviceConfig, Server, ServerConfig};

use crate::{Options, TestServer};

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_records_and_markers_a_server_writes_are_private() {
    let root = tempfile::tempdir().expect("temp dir");
    let server = TestServer::start(root.path(), Options::default()).await;
    let put = server.http.put(server.object(0, 1, "k")).body("secret").send().await.unwrap();
    assert_eq!(put.status(), 201);
    let record = server
        .http
        .put(server.record(0, 1, "k"))
        .header("x-optio-choice", "0/2/1")
        .send()
        .await
        .unwrap();
    assert_eq!(record.status(), 201);
    let dir = server.dirs[0].clone();
    server.stop().await; // commits the records, leaves the clean-shutdown marker
    assert_eq!(mode_of(&dir), 0o700);
    for sub in ["objects", "tmp", "quarantine"] {
        assert_eq!(mode_of(&dir.join(sub)), 0o700, "{sub}");
    }
    let object = optio_server::store::object_path(&dir, optio_placement::PoolId(1), "k");
    assert_eq!(mode_of(&object), 0o600);
    assert_eq!(mode_of(object.parent().unwrap()), 0o700);
    for file in ["choices.log", "choices.clean", optio_server::store::LOCK_FILE] {
        assert_eq!(mode_of(&dir.join(file)), 0o600, "{file}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_does_not_start_on_a_device_directory_others_can_write() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("dev0");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = ServerConfig {
        devices: vec![DeviceConfig { id: 0, dir: dir.clone(), capacity_bytes: 1 << 30 }],
        ..ServerConfig::default()
    };
    let Err(error) = Server::bind(config).await else {
        panic!("a server started on a 0777 device directory");
    };
    let message = error.to_string();
    assert!(message.contains("cannot open device 0"), "{message}");
    assert!(message.contains(&format!("{} has mode 0777", dir.display())), "{message}");
    assert!(message.contains(&format!("chmod 700 {}", dir.display())), "{message}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "nothing written there");
}
