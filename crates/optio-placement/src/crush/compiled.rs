//! The compiled form of a map's CRUSH part: flat arrays laid out for the mapper's hot loop,
//! plus everything the legacy bucket algorithms precompute (Ceph's `builder.c`).

use crate::ids::BucketId;
use crate::map::{BucketAlg, ClusterMap, Rule};
use crate::narrow::{index32, low32};
use crate::tunables::Tunables;

/// One bucket, with offsets into the shared arrays of [`CrushMap`].
#[derive(Clone, Debug, Default)]
pub(crate) struct CompiledBucket {
    pub(crate) id: i32,
    pub(crate) type_id: u16,
    pub(crate) alg: Option<BucketAlg>,
    pub(crate) size: u32,
    /// Start of this bucket's items and weights.
    pub(crate) start: u32,
    /// Start of this bucket's algorithm-specific values in `aux` (list: sum weights; tree:
    /// node weights; straw: straws).
    pub(crate) aux_start: u32,
    /// Tree buckets: number of nodes.
    pub(crate) num_nodes: u32,
    /// The weight every item has, when all items have the same non-zero weight (0 otherwise):
    /// straw2 then ranks by magnitude alone.
    pub(crate) equal_weight: u32,
}

/// A compiled choose_args set, as handed to [`CrushMap::do_rule`].
#[derive(Clone, Debug, Default)]
pub struct ChooseArgsRef(pub(crate) CompiledChooseArgs);

/// One set of choose_args, compiled: per bucket, optional ids and weight-set positions.
#[derive(Clone, Debug, Default)]
pub(crate) struct CompiledChooseArgs {
    /// Per bucket index: (ids start or u32::MAX, positions, weights start); empty = none.
    pub(crate) buckets: Vec<ChooseArgSlot>,
    pub(crate) ids: Vec<i32>,
    pub(crate) weights: Vec<u32>,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ChooseArgSlot {
    pub(crate) ids_start: Option<u32>,
    pub(crate) positions: u32,
    pub(crate) weights_start: u32,
}

/// A compiled CRUSH map: read-only, shared by every mapping call.
#[derive(Clone, Debug)]
pub struct CrushMap {
    pub(crate) buckets: Vec<Option<CompiledBucket>>,
    pub(crate) items: Vec<i32>,
    pub(crate) weights: Vec<u32>,
    pub(crate) aux: Vec<u32>,
    pub(crate) rules: Vec<Option<Rule>>,
    pub(crate) tunables: Tunables,
    pub(crate) max_devices: i32,
    /// Whether some mapping may need the per-call permutation scratch.
    pub(crate) needs_permutations: bool,
    pub(crate) choose_args: Vec<(i64, ChooseArgsRef)>,
    /// Vector instructions straw2 uses (the widest this CPU has, unless lowered).
    pub(crate) simd: super::Simd,
}

impl CrushMap {
    /// Compiles the CRUSH part of `map`.
    pub fn new(map: &ClusterMap) -> CrushMap {
        let tunables = *map.tunables();
        let mut compiled = CrushMap {
            buckets: vec![None; map.max_buckets() as usize],
            items: Vec::new(),
            weights: Vec::new(),
            aux: Vec::new(),
            rules: Vec::new(),
            tunables,
            max_devices: map.max_devices() as i32,
            needs_permutations: tunables.choose_local_fallback_tries > 0,
            choose_args: Vec::new(),
            simd: super::Simd::detect(),
        };
        // Offsets into `items` and `aux` fit 32 bits: a built map's buckets hold at most
        // 2 × DEVICE_ID_LIMIT + BUCKETS_MAX items (an item has one parent; a device also sits
        // in its class's shadow tree), and `aux` is at most twice as long as `items`.
        for bucket in map.buckets() {
            let start = index32(compiled.items.len());
            let aux_start = index32(compiled.aux.len());
            compiled.items.extend(bucket.items.iter().map(|item| item.0));
            compiled.weights.extend(bucket.weights.iter().map(|w| w.0));
            let weights: Vec<u32> = bucket.weights.iter().map(|w| w.0).collect();
            let mut num_nodes = 0;
            match bucket.alg {
                BucketAlg::List => compiled.aux.extend(list_sum_weights(&weights)),
                BucketAlg::Tree => {
                    let nodes = tree_node_weights(&weights);
                    num_nodes = index32(nodes.len());
                    compiled.aux.extend(nodes);
                }
                BucketAlg::Straw => {
                    compiled.aux.extend(straw_lengths(&weights, tunables.straw_calc_version))
                }
                BucketAlg::Uniform => compiled.needs_permutations = true,
                BucketAlg::Straw2 | BucketAlg::Linear => {}
            }
            compiled.buckets[bucket.id.index()] = Some(CompiledBucket {
                id: bucket.id.0,
                type_id: bucket.type_id.0,
                alg: Some(bucket.alg),
                size: index32(bucket.items.len()),
                start,
                aux_start,
                num_nodes,
                equal_weight: match weights.first() {
                    Some(&first) if first > 0 && weights.iter().all(|w| *w == first) => first,
                    _ => 0,
                },
            });
        }
        // A rule's `set_choose_local_fallback_tries` step turns on the permutation fallback
        // even when the tunable is 0.
        compiled.needs_permutations |=
            map.rules().iter().flat_map(|r| &r.steps).any(
                |step| matches!(step, crate::map::Step::SetChooseLocalFallbackTries(n) if *n > 0),
            );
        let rule_slots = map.rules().iter().map(|r| r.id.0 as usize + 1).max().unwrap_or(0);
        compiled.rules = vec![None; rule_slots];
        for rule in map.rules() {
            compiled.rules[rule.id.0 as usize] = Some(rule.clone());
        }
        for set in map.choose_args() {
            let mut args = CompiledChooseArgs {
                buckets: vec![ChooseArgSlot::default(); map.max_buckets() as usize],
                ..CompiledChooseArgs::default()
            };
            for arg in &set.args {
                let slot = &mut args.buckets[arg.bucket.index()];
                // Bounded: ids by the items of the map's buckets (each bucket once per set),
                // weights by CHOOSE_ARGS_WEIGHTS_MAX, which the builder checks.
                if let Some(ids) = &arg.ids {
                    slot.ids_start = Some(index32(args.ids.len()));
                    args.ids.extend(ids);
                }
                slot.positions = index32(arg.weight_set.len());
                slot.weights_start = index32(args.weights.len());
                for position in &arg.weight_set {
                    args.weights.extend(position.iter().map(|w| w.0));
                }
            }
            compiled.choose_args.push((set.id, ChooseArgsRef(args)));
        }
        compiled
    }

    /// Uses at most `simd` vector instructions (results never depend on it; for benchmarks).
    pub fn set_simd(&mut self, simd: super::Simd) {
        self.simd = simd.at_most();
    }

    /// The vector instructions in use.
    pub fn simd(&self) -> super::Simd {
        self.simd
    }

    /// The tunables the map was compiled with.
    pub fn tunables(&self) -> &Tunables {
        &self.tunables
    }

    /// Ceph's `max_devices`.
    pub fn max_devices(&self) -> i32 {
        self.max_devices
    }

    pub(crate) fn bucket(&self, id: i32) -> Option<&CompiledBucket> {
        if id >= 0 {
            return None;
        }
        self.buckets.get(BucketId(id).index())?.as_ref()
    }

    /// The choose_args set an OSDMap uses for `pool`: the pool's own, else the default (-1).
    pub fn choose_args_for_pool(&self, pool: i64) -> Option<&ChooseArgsRef> {
        self.choose_args_exact(pool).or_else(|| self.choose_args_exact(-1))
    }

    /// The choose_args set with exactly this id, no fallback.
    pub fn choose_args_exact(&self, id: i64) -> Option<&ChooseArgsRef> {
        self.choose_args.iter().find(|(set, _)| *set == id).map(|(_, args)| args)
    }
}

/// List buckets: `sum_weights[i]` = weight of items `0..=i`.
fn list_sum_weights(weights: &[u32]) -> Vec<u32> {
    let mut sum = 0u32;
    weights
        .iter()
        .map(|w| {
            sum = sum.wrapping_add(*w);
            sum
        })
        .collect()
}

/// Tree buckets: depth = ⌈log2 size⌉ + 1 levels, leaves at odd node numbers `2i + 1`.
fn tree_node_weights(weights: &[u32]) -> Vec<u32> {
    let size = index32(weights.len());
    let depth = tree_depth(size);
    let num_nodes = 1usize << depth;
    let mut nodes = vec![0u32; num_nodes];
    for (i, weight) in weights.iter().enumerate() {
        let mut node = ((index32(i) + 1) << 1) - 1;
        nodes[node as usize] = *weight;
        for _ in 1..depth {
            node = tree_parent(node);
            nodes[node as usize] = nodes[node as usize].wrapping_add(*weight);
        }
    }
    nodes
}

fn tree_depth(size: u32) -> u32 {
    if size == 0 {
        return 0;
    }
    let mut depth = 1;
    let mut t = size - 1;
    while t != 0 {
        t >>= 1;
        depth += 1;
    }
    depth
}

pub(crate) fn tree_height(n: u32) -> u32 {
    n.trailing_zeros()
}

fn tree_parent(n: u32) -> u32 {
    let h = tree_height(n);
    if n & (1 << (h + 1)) != 0 { n - (1 << h) } else { n + (1 << h) }
}

/// Straw (v1) buckets: Ceph's `crush_calc_straw`, floating point and all, for both
/// `straw_calc_version`s.
fn straw_lengths(weights: &[u32], calc_version: u8) -> Vec<u32> {
    let size = weights.len();
    let mut straws = vec![0u32; size];
    // Insertion sort by weight, ascending, stable.
    let mut reverse: Vec<usize> = Vec::with_capacity(size);
    for i in 0..size {
        let position =
            reverse.iter().position(|&j| weights[i] < weights[j]).unwrap_or(reverse.len());
        reverse.insert(position, i);
    }
    let mut numleft = size as i64;
    let mut straw: f64 = 1.0;
    let mut wbelow: f64 = 0.0;
    let mut lastw: f64 = 0.0;
    let mut i = 0;
    while i < size {
        if weights[reverse[i]] == 0 {
            straws[reverse[i]] = 0;
            i += 1;
            if calc_version >= 1 {
                numleft -= 1;
            }
            continue;
        }
        straws[reverse[i]] = straw_to_fixed(straw);
        i += 1;
        if i == size {
            break;
        }
        if calc_version == 0 {
            if weights[reverse[i]] == weights[reverse[i - 1]] {
                continue;
            }
            wbelow += (f64::from(weights[reverse[i - 1]]) - lastw) * numleft as f64;
            for j in i..size {
                if weights[reverse[j]] == weights[reverse[i]] {
                    numleft -= 1;
                } else {
                    break;
                }
            }
        } else {
            wbelow += (f64::from(weights[reverse[i - 1]]) - lastw) * numleft as f64;
            numleft -= 1;
        }
        // C: int * (u32 - u32) is computed in unsigned 32-bit arithmetic (the int converted
        // to u32, modulo 2³²).
        let difference = weights[reverse[i]].wrapping_sub(weights[reverse[i - 1]]);
        let wnext = f64::from(low32(numleft as u64).wrapping_mul(difference));
        let pbelow = wbelow / (wbelow + wnext);
        straw *= (1.0 / pbelow).powf(1.0 / numleft as f64);
        lastw = f64::from(weights[reverse[i - 1]]);
    }
    straws
}

/// C's `bucket->straws[i] = straw * 0x10000`: a double converted to `__u32`, the fraction
/// dropped. Straws grow from 1.0 by factors a bucket's weights bound; Rust's conversion
/// saturates where C's would be undefined.
#[allow(
    clippy::cast_possible_truncation,
    reason = "Ceph's double-to-__u32 conversion, kept bit-identical to crushtool"
)]
fn straw_to_fixed(straw: f64) -> u32 {
    (straw * 65536.0) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_layout_matches_ceph() {
        // 3 items: depth 3, 8 nodes, leaves at 1, 3, 5; root 4 holds the total.
        let nodes = tree_node_weights(&[10, 20, 30]);
        assert_eq!(nodes.len(), 8);
        assert_eq!((nodes[1], nodes[3], nodes[5]), (10, 20, 30));
        assert_eq!(nodes[2], 30);
        assert_eq!(nodes[4], 60);
    }

    #[test]
    fn equal_straws_are_one() {
        assert_eq!(straw_lengths(&[0x10000; 4], 1), vec![0x10000; 4]);
        assert_eq!(straw_lengths(&[0x10000; 4], 0), vec![0x10000; 4]);
    }
}
