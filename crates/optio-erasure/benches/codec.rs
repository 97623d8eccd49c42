//! Encode and decode throughput of a 4 MiB object, for `4+2` and `8+3` with 64 KiB stripe
//! units: encoding (layout, parity, checksums), decoding with M data chunks lost (the worst
//! case: M data chunks rebuilt), decoding with all chunks (checksums and joining only), and,
//! as peers in the same run, `reed-solomon-simd` alone coding the same chunks (whole, and
//! in the segments `encode` uses) and decoding them whole.
//! Throughput is in object bytes. `cargo bench -p optio-erasure --bench codec`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use optio_erasure::{ENCODE_SEGMENT_BYTES, Profile, decode, encode};

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
        group.bench_function("peer: reed-solomon-simd encode alone, whole chunks", |b| {
            b.iter(|| {
                reed_solomon_simd::encode(shards.len(), m, black_box(&shards)).expect("encodes")
            })
        });
        group.bench_function("peer: reed-solomon-simd encode alone, segments", |b| {
            b.iter(|| {
                let chunk_bytes = shards[0].len();
                let mut parity = vec![vec![0u8; chunk_bytes]; m];
                for start in (0..chunk_bytes).step_by(ENCODE_SEGMENT_BYTES) {
                    let end = chunk_bytes.min(start + ENCODE_SEGMENT_BYTES);
                    let segments = shards.iter().map(|shard| &shard[start..end]);
                    let recovery =
                        reed_solomon_simd::encode(shards.len(), m, segments).expect("encodes");
                    for (out, bytes) in parity.iter_mut().zip(recovery) {
                        out[start..end].copy_from_slice(&bytes);
                    }
                }
                parity
            })
        });
        let k = usize::from(profile.k());
        let survivors: Vec<(usize, &[u8])> =
            (m..k).map(|index| (index, chunks[index].data())).collect();
        let parity: Vec<(usize, &[u8])> = (0..m).map(|j| (j, chunks[k + j].data())).collect();
        group.bench_function("peer: reed-solomon-simd decode alone, whole chunks", |b| {
            b.iter(|| {
                reed_solomon_simd::decode(k, m, black_box(survivors.clone()), parity.clone())
                    .expect("decodes")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, codec);
criterion_main!(benches);
