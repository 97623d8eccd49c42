//! Proves that `--map` specs parse into the right source, and that bad ones are refused with a
//! message saying what is wrong and what to write instead.

use optio_cluster::{ClusterError, MapSource};

#[test]
fn etcd_urls_and_paths_give_their_source() {
    let etcd = MapSource::parse("etcd://127.0.0.1:2379").expect("etcd");
    assert!(matches!(etcd, MapSource::Etcd(_)));
    assert_eq!(etcd.describe(), "etcd://127.0.0.1:2379/optio");
    let prefixed = MapSource::parse("etcd://localhost:4001/prod/optio").expect("etcd");
    assert_eq!(prefixed.describe(), "etcd://localhost:4001/prod/optio");
    assert_eq!(MapSource::parse(&prefixed.describe()).expect("round trip"), prefixed);

    let dir = tempfile::tempdir().expect("tempdir");
    let source = MapSource::parse(&dir.path().display().to_string()).expect("a directory");
    assert_eq!(source.describe(), dir.path().join("map.toml").display().to_string());
    let file = dir.path().join("other.toml");
    assert_eq!(
        MapSource::parse(&file.display().to_string()).expect("a file"),
        MapSource::file(&file)
    );
}

#[test]
fn bad_specs_are_refused_clearly() {
    for (spec, says) in [
        ("", "it is empty"),
        ("http://127.0.0.1:2379", "unsupported scheme `http://`: use etcd://HOST:PORT[/prefix]"),
        ("etcds://127.0.0.1:2379", "etcds:// needs the CA that signed etcd's certificate"),
        ("etcdx://127.0.0.1:2379", "unsupported scheme `etcdx://`"),
        ("redis://h:6379", "unsupported scheme"),
        ("etcd://", "the host is missing"),
        ("etcd://:2379/optio", "the host is missing"),
        ("etcd://127.0.0.1:notaport", "`notaport` is not a port"),
        ("etcd://127.0.0.1:70000", "`70000` is not a port"),
        ("etcd://127.0.0.1:2379/a//b", "empty segment"),
        ("etcd://127.0.0.1:2379/a b", "contains ' '"),
    ] {
        let error = MapSource::parse(spec).expect_err(spec);
        assert!(
            matches!(error, ClusterError::BadSource { .. } | ClusterError::BadAccess { .. }),
            "{spec}: {error:?}"
        );
        let message = error.to_string();
        assert!(message.starts_with(&format!("invalid map source `{spec}`")), "{message}");
        assert!(message.contains(says), "{spec}: {message}");
    }
}
