//! Encode and decode throughput of a 4 MiB object, for `4+2` and `8+3` with 64 KiB stripe
//! units: encoding (layout, parity, checksums), decoding with M data chunks lost (the worst
//! case: M data chunks rebuilt), decoding with all chunks (checksums and joining only), and,
//! as the peer in the same run, `reed-solomon-simd` alone coding the same shards.
//! Throughput is in object bytes. `cargo bench -p optio-erasure --bench codec`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use optio_erasure::{Profile, decode, encode};

const OBJECT_BYTES: usize = 4 << 20;

fn codec(c: &mut Criterion) {
    let object: Vec<u8> =
        (0..OBJECT_BYTES).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    for text in ["4+2", "8+3"] {
        let profile: Profile = text.parse().expect("a valid profile");
        let mut group = c.benchmark_group(format!("{text} 4 MiB"));
        group.throughput(Throughput::Bytes(OBJECT_BYTES as u64));
        group.sample_size(20);
        group.measurement_time(Duration::from_secs(4));

        group.bench_function("encode", |b| b.iter(|| encode(profile, black_box(&object))));

        let chunks = encode(profile, &object).expect("encodes");
        let mut lost: Vec<_> = chunks.iter().map(|chunk| Some(chunk.view())).collect();
        for slot in lost.iter_mut().take(usize::from(profile.m())) {
            *slot = None;
        }
        group.bench_function("decode, M data chunks lost", |b| {
            b.iter(|| decode(profile, black_box(&lost)).expect("K intact"))
        });
        let all: Vec<_> = chunks.iter().map(|chunk| Some(chunk.view())).collect();
        group.bench_function("decode, all chunks", |b| {
            b.iter(|| decode(profile, black_box(&all)).expect("all intact"))
        });

        let shards: Vec<&[u8]> =
            chunks[..usize::from(profile.k())].iter().map(|chunk| chunk.data()).collect();
        let m = usize::from(profile.m());
        group.bench_function("peer: reed-solomon-simd encode alone", |b| {
            b.iter(|| {
                reed_solomon_simd::encode(shards.len(), m, black_box(&shards)).expect("encodes")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, codec);
criterion_main!(benches);
