//! Proves that load, initialize, replace, compare-and-swap and apply behave the same on a
//! map file and on etcd: create-if-absent stores once, of two editors of one epoch exactly one
//! wins and the other gets a Conflict naming both epochs, every map stored records which
//! epochs marked its devices down and up, concurrent applies are all stored (a lost race is
//! applied again), a change below min_size is refused unless allowed, and etcd's keys are
//! readable.

use optio_cluster::{APPLY_ATTEMPTS_MAX, ApplyOptions, ClusterError, MapSource};
use optio_placement::{DeviceId, Epoch, MapChange, MovementSample, Weight};

use crate::support::{addr0, at_epoch, etcd, etcd_get, etcd_put, file_source, small_map};

async fn load_initialize_replace(source: &MapSource) {
    let error = source.load().await.expect_err("nothing stored yet");
    assert!(matches!(error, ClusterError::NoMap { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "no map stored at {}: start a cluster with `optio up --dir DIR` (`--etcd` for a map \
             in etcd), or give a map file",
            source.describe()
        )
    );
    assert_eq!(source.load_if_present().await.expect("absent is fine"), None);

    let first = small_map();
    assert!(source.initialize(&first).await.expect("initialize"), "the first one stores");
    assert!(!source.initialize(&at_epoch(&first, 9, "x")).await.expect("initialize"));
    // Stored with its devices' state epochs: up from its own epoch.
    let stored = first.clone().with_state_epochs(None);
    assert_eq!(source.load().await.expect("load"), stored, "the second initialize wrote nothing");

    let replaced = at_epoch(&first, 5, "r");
    source.replace(&replaced).await.expect("replace");
    let replaced = replaced.with_state_epochs(Some(&stored));
    assert_eq!(source.load().await.expect("load"), replaced);
    // Replace is unconditional, even backwards (`optio up` writing its map).
    source.replace(&at_epoch(&first, 4, "b")).await.expect("replace");
    assert_eq!(source.load().await.expect("load").epoch(), Epoch(4));
    source.replace(&replaced).await.expect("replace");
}

async fn compare_and_swap(source: &MapSource) {
    let base = source.load().await.expect("load");
    let epoch = base.epoch();
    let alice = at_epoch(&base, epoch.0 + 1, "alice");
    let bob = at_epoch(&base, epoch.0 + 1, "bob");
    source.compare_and_swap(epoch, &alice).await.expect("alice edited the current epoch");
    let error = source.compare_and_swap(epoch, &bob).await.expect_err("bob's epoch is gone");
    let ClusterError::Conflict { expected, found } = error else { panic!("{error:?}") };
    assert_eq!((expected, found), (epoch, Epoch(epoch.0 + 1)));
    assert_eq!(
        error_text(source, epoch, &bob).await,
        format!(
            "the map changed underneath you (now epoch {}, you edited epoch {}): re-read it and retry",
            epoch.0 + 1,
            epoch.0
        )
    );
    assert_eq!(addr0(&source.load().await.expect("load")), addr0(&alice), "bob wrote nothing");

    // The next map must be newer than the one it replaces.
    let stale = at_epoch(&base, epoch.0 + 1, "stale");
    let error = source.compare_and_swap(Epoch(epoch.0 + 1), &stale).await.expect_err("same epoch");
    assert!(matches!(error, ClusterError::Change(_)), "{error:?}");

    // Many editors at once, each from the same epoch: exactly one wins.
    let current = source.load().await.expect("load");
    let editors: Vec<_> = (0..8)
        .map(|i| {
            let source = source.clone();
            let next = at_epoch(&current, current.epoch().0 + 1, &format!("editor{i}"));
            let expected = current.epoch();
            tokio::spawn(async move { source.compare_and_swap(expected, &next).await })
        })
        .collect();
    let mut wins = 0;
    for editor in editors {
        match editor.await.expect("joined") {
            Ok(()) => wins += 1,
            Err(ClusterError::Conflict { expected, found }) => {
                assert_eq!((expected, found), (current.epoch(), Epoch(current.epoch().0 + 1)));
            }
            Err(other) => panic!("{other}"),
        }
    }
    assert_eq!(wins, 1, "exactly one of the concurrent editors wins");
}

/// A map made without `ClusterMap::apply` (a builder) is stored with the epochs that marked
/// its devices down and up, recorded against the map it replaces.
async fn state_epochs(source: &MapSource) {
    let base = source.load().await.expect("load");
    let device = |map: &optio_placement::ClusterMap| map.devices()[1].clone();
    assert!(device(&base).up && device(&base).up_from.is_some(), "{:?}", device(&base));
    let mut builder = base.to_builder();
    builder.epoch = Epoch(base.epoch().0 + 1);
    builder.devices[1].up = false;
    let down = builder.build().expect("valid");
    source.compare_and_swap(base.epoch(), &down).await.expect("swap");
    let stored = source.load().await.expect("load");
    assert_eq!(device(&stored).down_at, Some(down.epoch()), "marked down by this map");
    assert_eq!(device(&stored).up_from, device(&base).up_from, "up from where it was");
    assert!(!device(&stored).up);
    let mut builder = stored.to_builder();
    builder.epoch = Epoch(stored.epoch().0 + 1);
    builder.devices[1].up = true;
    source.compare_and_swap(stored.epoch(), &builder.build().expect("valid")).await.expect("swap");
    let up = source.load().await.expect("load");
    assert_eq!(device(&up).up_from, Some(up.epoch()), "marked up by this map");
    assert_eq!(device(&up).down_at, Some(down.epoch()));
    assert!(device(&up).may_have_been_down_since(base.epoch()));
    assert!(!up.devices()[0].may_have_been_down_since(base.epoch()), "device 0 stayed up");
}

async fn error_text(
    source: &MapSource,
    epoch: Epoch,
    next: &optio_placement::ClusterMap,
) -> String {
    source.compare_and_swap(epoch, next).await.expect_err("a conflict").to_string()
}

fn options(allow_below_min_size: bool) -> ApplyOptions {
    let sample = MovementSample { objects: 200, object_bytes: 4 << 20 };
    ApplyOptions::Judged { sample, allow_below_min_size }
}

fn set_out(device: u32) -> MapChange {
    MapChange::SetState { device: DeviceId(device), up: None, is_in: Some(false) }
}

async fn apply(source: &MapSource) {
    let before = source.load().await.expect("load");
    let change = MapChange::SetState { device: DeviceId(1), up: Some(false), is_in: None };
    let edit = source.apply(&change, options(false)).await.expect("apply");
    assert_eq!(edit.old, before);
    assert_eq!(edit.new.epoch(), Epoch(before.epoch().0 + 1));
    assert_eq!(edit.attempts, 1);
    assert!(!edit.new.device(DeviceId(1)).expect("device 1").up);
    assert_eq!(source.load().await.expect("load"), edit.new);

    let stored = edit.new;
    let refused = source.apply(&MapChange::RemoveDevice(DeviceId(99)), options(true)).await;
    let error = refused.expect_err("the change refused");
    assert!(matches!(error, ClusterError::Refused(_)), "{error:?}");
    assert!(error.to_string().starts_with("the change was refused: "), "{error}");
    assert_eq!(source.load().await.expect("load"), stored, "refused changes store nothing");
}

/// Editors applying changes at once all get theirs stored, each on the map the others left:
/// a lost race applies the change again instead of failing or overwriting.
async fn apply_races(source: &MapSource) {
    let before = source.load().await.expect("load");
    let editors: Vec<_> = (0..APPLY_ATTEMPTS_MAX)
        .map(|device| {
            let source = source.clone();
            let change =
                MapChange::SetReweight { device: DeviceId(device), reweight: Weight(0x8000) };
            tokio::spawn(async move { source.apply(&change, options(true)).await })
        })
        .collect();
    let mut epochs = Vec::new();
    for editor in editors {
        let edit = editor.await.expect("joined").expect("every editor's change is stored");
        assert_eq!(edit.new.epoch().0, edit.old.epoch().0 + 1);
        epochs.push(edit.new.epoch().0);
    }
    epochs.sort_unstable();
    let first = before.epoch().0 + 1;
    let expected: Vec<u64> = (first..first + u64::from(APPLY_ATTEMPTS_MAX)).collect();
    assert_eq!(epochs, expected, "one epoch each, none overwritten");
    let after = source.load().await.expect("load");
    for device in 0..APPLY_ATTEMPTS_MAX {
        assert_eq!(after.device(DeviceId(device)).expect("device").reweight, Weight(0x8000));
    }
}

/// The min_size judgement is the change report's: a change that leaves data with fewer copies
/// than a pool's min_size is refused unless allowed, one that only degrades it is stored.
async fn below_min_size(source: &MapSource) {
    // From the example map again (every device up, in, at full weight), at the next epoch.
    let stored = source.load().await.expect("load");
    source.replace(&at_epoch(&small_map(), stored.epoch().0 + 1, "")).await.expect("replace");
    // Zone z1 (devices 0-2) out, then z2 but its last device: every pool of size 3 across
    // three zones is degraded (2 copies), still writable (min_size 2).
    for device in [0, 1, 2, 3, 4] {
        let edit = source.apply(&set_out(device), options(false)).await;
        let edit = edit.unwrap_or_else(|e| panic!("device {device} out: {e}"));
        if device == 2 {
            let report = edit.report.expect("judged");
            let rbd = report.short_of_copies.iter().find(|p| p.name == "rbd");
            let rbd = rbd.expect("zone z1 out leaves rbd short of its size");
            assert_eq!((rbd.below_size, rbd.below_min_size), (rbd.sampled, 0), "{rbd:?}");
        }
    }
    let before = source.load().await.expect("load");
    let error = source.apply(&set_out(5), options(false)).await.expect_err("below min_size");
    assert!(matches!(error, ClusterError::BelowMinSize { .. }), "{error:?}");
    assert!(error.to_string().contains("'rbd'"), "{error}");
    assert_eq!(source.load().await.expect("load"), before, "nothing stored");
    let edit = source.apply(&set_out(5), options(true)).await.expect("allowed");
    assert!(edit.report.expect("judged").below_min_size());
}

async fn all(source: &MapSource) {
    load_initialize_replace(source).await;
    compare_and_swap(source).await;
    state_epochs(source).await;
    apply(source).await;
    apply_races(source).await;
    below_min_size(source).await;
}

#[tokio::test]
async fn a_map_file_loads_initializes_replaces_swaps_and_applies() {
    let (dir, source) = file_source();
    all(&source).await;
    assert!(dir.path().join("map.toml.lock").is_file(), "the lock file stays");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .filter(|name| name.contains(".tmp."))
        .collect();
    assert!(leftovers.is_empty(), "no temporary files left: {leftovers:?}");
}

#[tokio::test]
async fn a_map_file_in_a_new_directory_is_created_by_initialize() {
    let dir = tempfile::tempdir().expect("tempdir");
    let nested = dir.path().join("a/b");
    let source = MapSource::parse(&nested.display().to_string()).expect("a directory");
    assert!(source.initialize(&small_map()).await.expect("initialize"));
    assert!(nested.join("map.toml").is_file());
    // The synchronous functions read the same file.
    let map = optio_cluster::mapstore::load(&nested.join("map.toml")).expect("load");
    assert_eq!(map, small_map().with_state_epochs(None));
    let next =
        optio_cluster::mapstore::update(&nested.join("map.toml"), |b| b.devices[2].up = false)
            .expect("update");
    assert_eq!(source.load().await.expect("load"), next);
}

#[tokio::test]
async fn etcd_loads_initializes_replaces_swaps_and_applies() {
    let Some(etcd) = etcd() else { return };
    let source = MapSource::parse(&etcd.url()).expect("etcd");
    all(&source).await;

    // The layout: the map as Optio TOML and its epoch in decimal, side by side.
    let map = source.load().await.expect("load");
    let text = etcd_get(&etcd.endpoint(), "/optio/map").await.expect("the map key");
    assert_eq!(optio_mapfile::parse(&text).expect("Optio TOML"), map);
    let epoch = etcd_get(&etcd.endpoint(), "/optio/epoch").await.expect("the epoch key");
    assert_eq!(epoch, map.epoch().0.to_string());

    // Prefixes keep clusters apart.
    let other = MapSource::parse(&format!("{}/other", etcd.url())).expect("etcd");
    assert!(other.load_if_present().await.expect("load").is_none());
}

#[tokio::test]
async fn etcd_swaps_a_map_put_by_hand_and_heals_its_epoch_key() {
    let Some(etcd) = etcd() else { return };
    let source = MapSource::parse(&format!("{}/hand", etcd.url())).expect("etcd");
    let map = at_epoch(&small_map(), 3, "");
    // As `etcdctl put /hand/map < map.toml` would: no epoch key.
    etcd_put(&etcd.endpoint(), "/hand/map", &optio_mapfile::optio_toml::write(&map)).await;
    assert_eq!(source.load().await.expect("load"), map);
    let error = source
        .compare_and_swap(Epoch(2), &at_epoch(&map, 4, "x"))
        .await
        .expect_err("epoch 2 is not stored");
    assert!(matches!(error, ClusterError::Conflict { expected: Epoch(2), found: Epoch(3) }));
    source.compare_and_swap(Epoch(3), &at_epoch(&map, 4, "x")).await.expect("swap");
    assert_eq!(etcd_get(&etcd.endpoint(), "/hand/epoch").await.as_deref(), Some("4"));
    // An epoch key out of step (the map put by hand again at epoch 7) heals too.
    etcd_put(
        &etcd.endpoint(),
        "/hand/map",
        &optio_mapfile::optio_toml::write(&at_epoch(&map, 7, "")),
    )
    .await;
    source.compare_and_swap(Epoch(7), &at_epoch(&map, 8, "y")).await.expect("swap");
    assert_eq!(etcd_get(&etcd.endpoint(), "/hand/epoch").await.as_deref(), Some("8"));
    assert_eq!(source.load().await.expect("load").epoch(), Epoch(8));
}

/// A map of 5,000 devices with an incremental balanced pool (its state is most of the text):
/// over etcd's default 1.5 MiB request limit, stored and read back by the etcd Optio starts
/// (`--max-request-bytes` 10 MiB), and a change to it swaps in.
#[tokio::test]
async fn a_map_over_etcds_default_request_limit_is_stored() {
    let Some(etcd) = etcd() else { return };
    let source = MapSource::parse(&etcd.url()).expect("etcd");
    let mut builder = optio_placement::ClusterMapBuilder::new();
    for id in 0..5000u32 {
        let host = format!("host{}", id / 20);
        builder = builder.device(optio_placement::DeviceSpec::new(id).at(&[("host", &host)]));
    }
    let mut pool = optio_placement::PoolSpec::crush(1, "rbd", 4096, 2);
    pool.balance.balanced = optio_placement::BalanceMethod::Incremental;
    let map = builder
        .replicated_rule(0, "replicated_rule", "default", "host")
        .pool(pool)
        .build()
        .expect("a valid map");
    let text = optio_mapfile::optio_toml::write(&map);
    assert!(text.len() > 3 << 19, "{} bytes: over 1.5 MiB", text.len());
    assert!(source.initialize(&map).await.expect("stored"));
    let stored = source.load().await.expect("load");
    assert_eq!(stored, map.with_state_epochs(None), "stored with its state epochs");
    let map = stored;
    let change = optio_placement::change::MapChange::RemoveDevice(optio_placement::DeviceId(7));
    let next = map.apply(&change, map.epoch()).expect("applies");
    source.compare_and_swap(map.epoch(), &next).await.expect("swapped");
    assert_eq!(source.load().await.expect("load"), next);
}
