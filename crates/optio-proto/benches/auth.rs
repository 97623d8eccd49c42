//! What signing costs per request: signing a request, verifying it, and hashing a body.
//! `cargo bench -p optio-proto --bench auth`.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use optio_proto::auth::{Cap, Credentials, Entity, Key, Keyring, Signed, WINDOW_MS, content_hash};

fn auth(c: &mut Criterion) {
    let key = Key::generate().unwrap();
    let mut keyring = Keyring::new();
    keyring.insert(Entity {
        name: "client.b".into(),
        key: key.clone(),
        cap: Cap::Write,
        previous: None,
    });
    let credentials = Credentials { id: "client.b".into(), key };
    let headers = [
        ("x-optio-version", "1795656910223981"),
        ("x-optio-checksum", "0a1b2c3d"),
        ("x-optio-pg", "42"),
        ("x-optio-epoch", "7"),
    ];
    let path = "/v1/dev/3/objects/1/some/object/key";
    c.bench_function("sign a request", |b| {
        b.iter(|| credentials.sign("PUT", path, &headers, 1_000_000))
    });
    let value = credentials.sign("PUT", path, &headers, 1_000_000);
    c.bench_function("parse and verify a signature", |b| {
        b.iter(|| {
            let signed = Signed::parse(&value).unwrap();
            signed.verify(&keyring, "PUT", path, &headers, 1_000_000, WINDOW_MS).unwrap().cap
        })
    });
    let body = vec![7u8; 4 << 20];
    let mut group = c.benchmark_group("body hash");
    group.throughput(Throughput::Bytes(body.len() as u64));
    group.bench_function("BLAKE3 of 4 MiB", |b| b.iter(|| content_hash(&body)));
    group.finish();
}

criterion_group!(benches, auth);
criterion_main!(benches);
