//! PROTOTYPE HARNESS (not for commit): the production incremental method through the builder.
#![allow(missing_docs, dead_code, clippy::all)]

#[cfg(test)]
mod tests {
    use crate::analysis::movement;
    use crate::builder::{ClusterMapBuilder, DeviceSpec, PoolSpec};
    use crate::ids::{PoolId, Weight};
    use crate::map::ClusterMap;
    use crate::placement::Placement;
    use crate::stats::Summary;
    use std::time::Instant;

    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Change {
        Add(u32),
        Remove(u32),
        Reweight(u32),
    }

    fn map(racks: u32, hosts: u32, osds: u32, change: Option<Change>, pg: u32, size: u32, base: Option<&ClusterMap>) -> ClusterMap {
        let mut b = ClusterMapBuilder::new();
        let n = racks.max(1) * hosts * osds;
        let loc = |host: u32| {
            let mut l = vec![("host".to_string(), format!("host{host}"))];
            if racks > 0 {
                l.push(("rack".to_string(), format!("rack{}", host / hosts)));
            }
            l
        };
        for id in 0..n {
            if change == Some(Change::Remove(id)) {
                continue;
            }
            let mut d = DeviceSpec::new(id);
            d.location = loc(id / osds);
            if change == Some(Change::Reweight(id)) {
                d.reweight = Weight(0x8000);
            }
            b.devices.push(d);
        }
        if let Some(Change::Add(h)) = change {
            let mut d = DeviceSpec::new(n);
            d.location = loc(h % (racks.max(1) * hosts));
            b.devices.push(d);
        }
        let mut pool = PoolSpec::crush(1, "pool", pg, size);
        pool.balance.incremental = true;
        pool.balance.state = base.and_then(|m| m.pool(PoolId(1)).unwrap().balance_state.clone());
        b.replicated_rule(0, "replicated_rule", "default", "host").pool(pool).build().expect("valid")
    }

    fn counts(map: &ClusterMap, placement: &Placement) -> Vec<f64> {
        let pool = placement.pool(PoolId(1)).unwrap();
        let mut counts = vec![0u64; map.max_devices() as usize];
        let mut scratch = placement.scratch();
        let mut set = crate::placement::ReplicaSet::new();
        for seed in 0..pool.pool().pg_num {
            pool.place(pool.pg_key(seed), &mut scratch, &mut set);
            for device in set.devices() {
                counts[device.0 as usize] += 1;
            }
        }
        map.devices().iter().filter(|d| d.is_usable()).map(|d| counts[d.id.0 as usize] as f64).collect()
    }

    fn env_usize(name: &str, default: usize) -> usize {
        std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    }

    #[test]
    #[ignore]
    fn proto6_sim() {
        let trials = env_usize("TRIALS", 5) as u32;
        let list = |name: &str, d: Vec<u32>| -> Vec<u32> {
            std::env::var(name).ok().map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(d)
        };
        let maps = list("MAPS", vec![40, 1000]);
        let pgs = list("PGS", vec![2048, 32768]);
        let sizes = list("SIZES", vec![2, 3]);
        for &mapn in &maps {
            let (racks, hosts, osds) = if mapn == 40 { (0, 4, 10) } else { (10, 10, 10) };
            let n = racks.max(1) * hosts * osds;
            let nh = racks.max(1) * hosts;
            for &pg in &pgs {
                for &size in &sizes {
                    let t0 = Instant::now();
                    let ma = map(racks, hosts, osds, None, pg, size, None);
                    let tb = t0.elapsed();
                    let t1 = Instant::now();
                    let pa = Placement::new(&ma).unwrap();
                    let tp = t1.elapsed();
                    let s = Summary::of(&counts(&ma, &pa));
                    let mut sums = [(0.0f64, 0.0f64); 3];
                    let mut after = 0.0f64;
                    let ti = Instant::now();
                    for trial in 0..trials {
                        let changes = [
                            Change::Add(trial.wrapping_mul(7) % nh),
                            Change::Remove((trial.wrapping_mul(37) + 3) % n),
                            Change::Reweight((trial.wrapping_mul(53) + 11) % n),
                        ];
                        for (j, ch) in changes.into_iter().enumerate() {
                            let mb = map(racks, hosts, osds, Some(ch), pg, size, Some(&ma));
                            let pb = Placement::new(&mb).unwrap();
                            let m = movement(&ma, &pa, &mb, &pb, pa.pool(PoolId(1)).unwrap(), pb.pool(PoolId(1)).unwrap(), 0, 1, &mut |_| {});
                            if std::env::var("DBG").is_ok() {
                                eprintln!("{ch:?}: moved {} min {:.1}", m.moved, m.minimum_copies());
                            }
                            sums[j].0 += m.moved as f64;
                            sums[j].1 += m.minimum_copies();
                            if !matches!(ch, Change::Reweight(_)) {
                                after = after.max(Summary::of(&counts(&mb, &pb)).stdev);
                            }
                        }
                    }
                    let tinc = ti.elapsed() / (3 * trials);
                    println!(
                        "{mapn:>5} {pg:>6} {size} stdev {:.2} max/mean {:.3} | add {:.2} rem {:.2} rw {:.2} | after {:.2} | build {:?} place {:?} change {:?}",
                        s.stdev, s.max_over_mean,
                        sums[0].0 / sums[0].1, sums[1].0 / sums[1].1, sums[2].0 / sums[2].1,
                        after, tb, tp, tinc
                    );
                }
            }
        }
    }
}
