//! What TLS costs per byte with Optio's own configurations (`optio_tls`): 4 MiB moved
//! through an established rustls session in memory, sealed by one side and opened by the
//! other (AES-GCM plus rustls's copies), with no socket — the CPU a 4 MiB PUT or GET adds
//! per replica over TLS. `cargo bench -p optio-tls --bench tls`.

use std::io::{Read, Write};
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const OBJECT: usize = 4 << 20;

fn pair() -> (rustls::ClientConnection, rustls::ServerConnection, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let path = |name: &str, text: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let ca_path = path("ca.pem", ca.pem());
    let cert_path = path("cert.pem", cert.pem());
    let key_path = path("key.pem", key.serialize_pem());
    let client_config = optio_tls::client_config(&ca_path, None).unwrap();
    let server_config = optio_tls::server_config(&cert_path, &key_path, None).unwrap();
    let mut client =
        rustls::ClientConnection::new(Arc::new(client_config), "localhost".try_into().unwrap())
            .unwrap();
    let mut server = rustls::ServerConnection::new(Arc::new(server_config)).unwrap();
    let mut wire = Vec::new();
    while client.is_handshaking() || server.is_handshaking() {
        wire.clear();
        client.write_tls(&mut wire).unwrap();
        server.read_tls(&mut wire.as_slice()).unwrap();
        server.process_new_packets().unwrap();
        wire.clear();
        server.write_tls(&mut wire).unwrap();
        client.read_tls(&mut wire.as_slice()).unwrap();
        client.process_new_packets().unwrap();
    }
    (client, server, dir)
}

fn tls(c: &mut Criterion) {
    optio_tls::install_crypto_provider();
    let (mut client, mut server, _dir) = pair();
    let suite = client.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite()));
    let data = vec![0x5au8; OBJECT];
    let mut wire = Vec::with_capacity(OBJECT + OBJECT / 64);
    let mut out = vec![0u8; OBJECT];
    let mut group = c.benchmark_group("tls");
    group.throughput(Throughput::Bytes(OBJECT as u64));
    group.bench_function(format!("4 MiB sealed and opened ({})", suite.unwrap_or_default()), |b| {
        b.iter(|| {
            let mut sent = 0;
            let mut received = 0;
            while received < OBJECT {
                if sent < OBJECT {
                    sent += client.writer().write(&data[sent..]).unwrap();
                }
                wire.clear();
                while client.wants_write() {
                    client.write_tls(&mut wire).unwrap();
                }
                let mut slice = wire.as_slice();
                while !slice.is_empty() {
                    server.read_tls(&mut slice).unwrap();
                    server.process_new_packets().unwrap();
                    loop {
                        match server.reader().read(&mut out[received..]) {
                            Ok(0) => break,
                            Ok(n) => received += n,
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }
            assert_eq!(received, OBJECT);
        })
    });
    group.finish();
}

criterion_group!(benches, tls);
criterion_main!(benches);
