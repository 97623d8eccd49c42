//! `crush_do_rule` and the bucket choice functions, bit-compatible with Ceph's `mapper.c`.
//!
//! Pure and allocation-free per call: the caller owns a [`CrushWork`] scratch area, as Ceph's
//! caller owns its workspace. Integer and fixed-point arithmetic only.

use super::compiled::{ChooseArgSlot, ChooseArgsRef, CompiledBucket, CompiledChooseArgs, CrushMap};
use super::hash::{hash32_2, hash32_3, hash32_4};
use super::straw2;
use crate::ids::{ITEM_NONE, RuleId};
use crate::map::{BucketAlg, Step};
use crate::narrow::{index32, low32};

/// Ceph's internal "not chosen yet" marker of positional choices.
const ITEM_UNDEF: i32 = 0x7fff_fffe;

/// Per-caller scratch space: the working vectors of `crush_do_rule` and the lazily built
/// permutations of uniform buckets (and of the legacy local-fallback search).
#[derive(Clone, Debug, Default)]
pub struct CrushWork {
    vectors: Vec<i32>,
    /// straw2 choices computed ahead for this call: (bucket id, r, item).
    memo: Vec<(i32, u32, i32)>,
    perm_x: Vec<u32>,
    perm_n: Vec<u32>,
    perm: Vec<u32>,
    touched: Vec<u32>,
}

impl CrushWork {
    /// Scratch space sized for `map`.
    pub fn new(map: &CrushMap) -> CrushWork {
        let mut work = CrushWork::default();
        work.fit(map);
        work
    }

    /// Grows the permutation tables to `map` when it may need them, so that any scratch
    /// (`CrushWork::default()`, or one made for another map) is safe to pass to `do_rule`.
    fn fit(&mut self, map: &CrushMap) {
        if map.needs_permutations
            && (self.perm_n.len() < map.buckets.len() || self.perm.len() < map.items.len())
        {
            self.perm_x.resize(map.buckets.len().max(self.perm_x.len()), 0);
            self.perm_n.resize(map.buckets.len().max(self.perm_n.len()), 0);
            self.perm.resize(map.items.len().max(self.perm.len()), 0);
        }
    }

    fn reset(&mut self, map: &CrushMap, result_max: usize) {
        self.fit(map);
        if self.vectors.len() < 3 * result_max {
            self.vectors.resize(3 * result_max, 0);
        }
        for index in self.touched.drain(..) {
            self.perm_n[index as usize] = 0;
        }
        self.memo.clear();
    }

    #[inline]
    fn memo_lookup(&self, bucket: i32, r: u32) -> Option<i32> {
        self.memo.iter().find(|(b, mr, _)| *b == bucket && *mr == r).map(|(_, _, item)| *item)
    }
}

/// Most choices computed ahead per firstn step.
const PREFETCH_MAX: usize = 48;

/// Computes ahead, level by level and several at once, the straw2 choices a firstn step will
/// make if no replica collides or is rejected (the usual case): every replica's descent from
/// the root and its leaf descent. A single bucket's hash chain is latency-bound; running the
/// replicas' chains side by side fills the vector units. `choose_firstn` then finds these
/// choices in the memo; a miss (after a collision or rejection) is computed as usual, so the
/// result never depends on this.
#[allow(clippy::too_many_arguments)]
fn prefetch_firstn(
    ctx: &Ctx<'_>,
    work: &mut CrushWork,
    root: &CompiledBucket,
    numrep: u32,
    type_id: u16,
    leaf: bool,
    tries: &Tries,
) {
    let map = ctx.map;
    // (bucket, r, replica, inside the leaf descent?)
    let mut frontier: Vec<(&CompiledBucket, u32, u32, bool)> = Vec::with_capacity(16);
    for rep in 0..numrep.min(16) {
        frontier.push((root, rep, rep, false));
    }
    let mut requests: Vec<straw2::Request<'_>> = Vec::with_capacity(16);
    let mut winners = [0i32; 16];
    for _level in 0..8 {
        requests.clear();
        let mut lanes = 0usize;
        frontier.retain(|(bucket, r, _, _)| {
            let eligible = bucket.alg == Some(BucketAlg::Straw2)
                && bucket.equal_weight != 0
                && bucket.size as usize <= straw2::EQUAL_WEIGHT_ITEMS_MAX
                && lanes + bucket.size as usize <= straw2::BATCH_LANES_MAX
                && work.memo.len() + requests.len() < PREFETCH_MAX;
            if eligible {
                let start = bucket.start as usize;
                requests.push(straw2::Request {
                    items: &map.items[start..start + bucket.size as usize],
                    weight: bucket.equal_weight,
                    r: *r,
                });
                lanes += bucket.size as usize;
            }
            eligible
        });
        if requests.len() < 2 {
            // One chain alone gains nothing over computing it when it is needed.
            return;
        }
        straw2::choose_equal_batch(map.simd, ctx.x, &requests, &mut winners);
        let mut next = Vec::with_capacity(frontier.len());
        for ((bucket, r, rep, inner), &item) in frontier.iter().zip(&winners) {
            work.memo.push((bucket.id, *r, item));
            let Some(child) = map.bucket(item) else { continue };
            if *inner || child.type_id != type_id {
                next.push((child, *r, *rep, *inner));
            } else if leaf {
                let sub_r = if tries.vary_r != 0 { r >> (tries.vary_r - 1) } else { 0 };
                let inner_rep = if tries.stable != 0 { 0 } else { *rep };
                next.push((child, inner_rep.wrapping_add(sub_r), *rep, true));
            }
        }
        frontier = next;
    }
}

struct Ctx<'a> {
    map: &'a CrushMap,
    weights: &'a [u32],
    x: u32,
    choose_args: Option<&'a CompiledChooseArgs>,
    /// The balance parameter of `linear` buckets (Optio extension; 16.16, ≥ 1.0).
    linear_param: u32,
}

/// Tunables in effect for one step (the map's, overridden by `set_*` steps).
#[derive(Clone, Copy)]
struct Tries {
    choose_tries: u32,
    recurse_tries: u32,
    local_retries: u32,
    local_fallback: u32,
    vary_r: u32,
    stable: u32,
}

impl CrushMap {
    /// Runs rule `rule` for input `x` (Ceph's `crush_do_rule`), writing at most
    /// `result.len()` items. `weights` is the reweight vector (16.16, indexed by device id;
    /// devices beyond its end are out). Returns how many entries were written; positional
    /// (indep) results hold [`ITEM_NONE`] holes. An unknown rule gives 0, as in Ceph.
    /// `choose_args` selects a weight set: see [`CrushMap::choose_args_for_pool`] (what an
    /// OSDMap uses; `crushtool --test` uses it with id 0) and [`CrushMap::choose_args_exact`].
    pub fn do_rule(
        &self,
        rule: RuleId,
        x: u32,
        result: &mut [i32],
        weights: &[u32],
        choose_args: Option<&ChooseArgsRef>,
        work: &mut CrushWork,
    ) -> usize {
        self.do_rule_linear(rule, x, result, weights, choose_args, 0x10000, work)
    }

    /// [`do_rule`](Self::do_rule) with the balance parameter `linear_param` (16.16 fixed
    /// point; below 1.0 is taken as 1.0) for the map's `linear` buckets (an Optio extension,
    /// seed 002). Maps without linear buckets map exactly as with `do_rule`, whatever the
    /// parameter.
    #[allow(clippy::too_many_arguments)]
    pub fn do_rule_linear(
        &self,
        rule: RuleId,
        x: u32,
        result: &mut [i32],
        weights: &[u32],
        choose_args: Option<&ChooseArgsRef>,
        linear_param: u32,
        work: &mut CrushWork,
    ) -> usize {
        let Some(Some(rule)) = self.rules.get(rule.0 as usize) else { return 0 };
        let result_max = result.len();
        // Ceph's `int result_max`; a result longer than i32::MAX entries (8 GiB) would be
        // filled to that many at most.
        let result_max_int = i32::try_from(result_max).unwrap_or(i32::MAX);
        work.reset(self, result_max);
        let ctx = Ctx {
            map: self,
            weights,
            x,
            choose_args: choose_args.map(|c| &c.0),
            linear_param: linear_param.max(0x10000),
        };
        let tunables = &self.tunables;
        let mut choose_tries = tunables.choose_total_tries + 1;
        let mut choose_leaf_tries = 0u32;
        let mut local_retries = tunables.choose_local_tries;
        let mut local_fallback = tunables.choose_local_fallback_tries;
        let mut vary_r = u32::from(tunables.chooseleaf_vary_r);
        let mut stable = u32::from(tunables.chooseleaf_stable);

        let mut vectors = std::mem::take(&mut work.vectors);
        let (w_and_o, c) = vectors.split_at_mut(2 * result_max);
        let (mut w, mut o) = w_and_o.split_at_mut(result_max);
        let c = &mut c[..result_max];
        let mut wsize = 0usize;
        let mut result_len = 0usize;

        for step in &rule.steps {
            match *step {
                Step::Take(item) => {
                    let valid = if item.0 >= 0 {
                        item.0 < self.max_devices
                    } else {
                        self.bucket(item.0).is_some()
                    };
                    if valid && result_max > 0 {
                        w[0] = item.0;
                        wsize = 1;
                    }
                }
                Step::SetChooseTries(n) if n > 0 => choose_tries = n as u32,
                Step::SetChooseleafTries(n) if n > 0 => choose_leaf_tries = n as u32,
                Step::SetChooseLocalTries(n) if n >= 0 => local_retries = n as u32,
                Step::SetChooseLocalFallbackTries(n) if n >= 0 => local_fallback = n as u32,
                Step::SetChooseleafVaryR(n) if n >= 0 => vary_r = n as u32,
                Step::SetChooseleafStable(n) if n >= 0 => stable = n as u32,
                Step::ChooseFirstn { num, type_id }
                | Step::ChooseleafFirstn { num, type_id }
                | Step::ChooseIndep { num, type_id }
                | Step::ChooseleafIndep { num, type_id } => {
                    if wsize == 0 {
                        continue;
                    }
                    let firstn =
                        matches!(step, Step::ChooseFirstn { .. } | Step::ChooseleafFirstn { .. });
                    let leaf = matches!(
                        step,
                        Step::ChooseleafFirstn { .. } | Step::ChooseleafIndep { .. }
                    );
                    let mut osize = 0usize;
                    for &entry in &w[..wsize] {
                        let mut numrep = num;
                        if numrep <= 0 {
                            numrep += result_max_int;
                            if numrep <= 0 {
                                continue;
                            }
                        }
                        let Some(bucket) = self.bucket(entry) else { continue };
                        if firstn {
                            let recurse_tries = if choose_leaf_tries > 0 {
                                choose_leaf_tries
                            } else if tunables.chooseleaf_descend_once != 0 {
                                1
                            } else {
                                choose_tries
                            };
                            let tries = Tries {
                                choose_tries,
                                recurse_tries,
                                local_retries,
                                local_fallback,
                                vary_r,
                                stable,
                            };
                            if ctx.choose_args.is_none() && numrep > 1 {
                                prefetch_firstn(
                                    &ctx,
                                    work,
                                    bucket,
                                    numrep as u32,
                                    type_id.0,
                                    leaf,
                                    &tries,
                                );
                            }
                            osize += choose_firstn(
                                &ctx,
                                work,
                                bucket,
                                numrep as u32,
                                type_id.0,
                                &mut o[osize..],
                                0,
                                u32::try_from(result_max - osize).unwrap_or(u32::MAX),
                                &tries,
                                leaf,
                                Some(&mut c[osize..]),
                                0,
                            ) as usize;
                        } else {
                            let out_size = (numrep as usize).min(result_max - osize);
                            let recurse_tries =
                                if choose_leaf_tries > 0 { choose_leaf_tries } else { 1 };
                            choose_indep(
                                &ctx,
                                work,
                                bucket,
                                u32::try_from(out_size).expect("at most numrep, a positive i32"),
                                numrep as u32,
                                type_id.0,
                                &mut o[osize..],
                                0,
                                choose_tries,
                                recurse_tries,
                                leaf,
                                Some(&mut c[osize..]),
                                0,
                            );
                            osize += out_size;
                        }
                    }
                    if leaf {
                        o[..osize].copy_from_slice(&c[..osize]);
                    }
                    std::mem::swap(&mut w, &mut o);
                    wsize = osize;
                }
                Step::Emit => {
                    for &item in &w[..wsize] {
                        if result_len >= result_max {
                            break;
                        }
                        result[result_len] = item;
                        result_len += 1;
                    }
                    wsize = 0;
                }
                _ => {}
            }
        }
        work.vectors = vectors;
        result_len
    }
}

/// `crush_choose_firstn`. `out` and `out2` start at the caller's segment; positions are
/// relative to them, as Ceph's pointer arithmetic makes them.
#[allow(clippy::too_many_arguments)]
fn choose_firstn(
    ctx: &Ctx<'_>,
    work: &mut CrushWork,
    bucket: &CompiledBucket,
    numrep: u32,
    type_id: u16,
    out: &mut [i32],
    mut outpos: u32,
    out_size: u32,
    tries: &Tries,
    recurse_to_leaf: bool,
    mut out2: Option<&mut [i32]>,
    parent_r: u32,
) -> u32 {
    let map = ctx.map;
    let mut count = out_size;
    let mut rep = if tries.stable != 0 { 0 } else { outpos };
    while rep < numrep && count > 0 {
        let mut ftotal: u32 = 0;
        let mut skip_rep = false;
        let mut item: i32;
        'descent: loop {
            let mut in_bucket = bucket;
            let mut flocal: u32 = 0;
            loop {
                let r = rep.wrapping_add(parent_r).wrapping_add(ftotal);
                let mut collide = false;
                let reject;
                let mut item_type = 0u16;
                if in_bucket.size == 0 {
                    reject = true;
                    item = 0;
                } else {
                    item = if tries.local_fallback > 0
                        && flocal >= (in_bucket.size >> 1)
                        && flocal > tries.local_fallback
                    {
                        perm_choose(map, work, in_bucket, ctx.x, r)
                    } else {
                        bucket_choose(ctx, work, in_bucket, r, outpos, ftotal)
                    };
                    if item >= map.max_devices {
                        skip_rep = true;
                        break 'descent;
                    }
                    if item < 0 {
                        match map.bucket(item) {
                            Some(child) => item_type = child.type_id,
                            None => {
                                skip_rep = true;
                                break 'descent;
                            }
                        }
                    }
                    if item_type != type_id {
                        match map.bucket(item) {
                            Some(child) if item < 0 => {
                                in_bucket = child;
                                continue;
                            }
                            _ => {
                                skip_rep = true;
                                break 'descent;
                            }
                        }
                    }
                    collide = out[..outpos as usize].contains(&item);
                    let mut rejected = false;
                    if !collide && recurse_to_leaf {
                        if item < 0 {
                            let sub_r = if tries.vary_r != 0 { r >> (tries.vary_r - 1) } else { 0 };
                            let child = map.bucket(item).expect("checked above");
                            let inner = Tries { choose_tries: tries.recurse_tries, ..*tries };
                            let out2 = out2.as_deref_mut().expect("leaf recursion has out2");
                            let got = choose_firstn(
                                ctx,
                                work,
                                child,
                                if tries.stable != 0 { 1 } else { outpos + 1 },
                                0,
                                out2,
                                outpos,
                                count,
                                &Tries { recurse_tries: 0, ..inner },
                                false,
                                None,
                                sub_r,
                            );
                            if got <= outpos {
                                rejected = true;
                            }
                        } else if let Some(out2) = out2.as_deref_mut() {
                            out2[outpos as usize] = item;
                        }
                    }
                    if !rejected && !collide && item_type == 0 {
                        rejected = is_out(ctx.weights, item, ctx.x);
                    }
                    reject = rejected;
                }
                if reject || collide {
                    ftotal += 1;
                    flocal += 1;
                    let retry_locally = (collide && flocal <= tries.local_retries)
                        || (tries.local_fallback > 0
                            && flocal <= in_bucket.size + tries.local_fallback);
                    if retry_locally {
                        continue;
                    }
                    if ftotal < tries.choose_tries {
                        continue 'descent;
                    }
                    skip_rep = true;
                }
                break 'descent;
            }
        }
        if !skip_rep {
            out[outpos as usize] = item;
            outpos += 1;
            count -= 1;
        }
        rep += 1;
    }
    outpos
}

/// `crush_choose_indep`: positional choices with `ITEM_NONE` holes.
#[allow(clippy::too_many_arguments)]
fn choose_indep(
    ctx: &Ctx<'_>,
    work: &mut CrushWork,
    bucket: &CompiledBucket,
    mut left: u32,
    numrep: u32,
    type_id: u16,
    out: &mut [i32],
    outpos: u32,
    tries: u32,
    recurse_tries: u32,
    recurse_to_leaf: bool,
    mut out2: Option<&mut [i32]>,
    parent_r: u32,
) {
    let map = ctx.map;
    let start = outpos as usize;
    let end = start + left as usize;
    for rep in start..end {
        out[rep] = ITEM_UNDEF;
        if let Some(out2) = out2.as_deref_mut() {
            out2[rep] = ITEM_UNDEF;
        }
    }
    let mut ftotal: u32 = 0;
    while left > 0 && ftotal < tries {
        for rep in start..end {
            if out[rep] != ITEM_UNDEF {
                continue;
            }
            let mut in_bucket = bucket;
            loop {
                let step = if in_bucket.alg == Some(BucketAlg::Uniform)
                    && in_bucket.size.is_multiple_of(numrep)
                {
                    numrep + 1
                } else {
                    numrep
                };
                // C: `rep` (an int) in unsigned arithmetic.
                let r = low32(rep as u64)
                    .wrapping_add(parent_r)
                    .wrapping_add(step.wrapping_mul(ftotal));
                if in_bucket.size == 0 {
                    break;
                }
                let item = bucket_choose(ctx, work, in_bucket, r, outpos, ftotal);
                if item >= map.max_devices {
                    out[rep] = ITEM_NONE;
                    if let Some(out2) = out2.as_deref_mut() {
                        out2[rep] = ITEM_NONE;
                    }
                    left -= 1;
                    break;
                }
                let item_type =
                    if item < 0 { map.bucket(item).map(|b| b.type_id) } else { Some(0) };
                if item_type != Some(type_id) {
                    match map.bucket(item) {
                        Some(child) if item < 0 => {
                            in_bucket = child;
                            continue;
                        }
                        _ => {
                            out[rep] = ITEM_NONE;
                            if let Some(out2) = out2.as_deref_mut() {
                                out2[rep] = ITEM_NONE;
                            }
                            left -= 1;
                            break;
                        }
                    }
                }
                if out[start..end].contains(&item) {
                    break;
                }
                if recurse_to_leaf {
                    let out2 = out2.as_deref_mut().expect("leaf recursion has out2");
                    if item < 0 {
                        let child = map.bucket(item).expect("checked above");
                        choose_indep(
                            ctx,
                            work,
                            child,
                            1,
                            numrep,
                            0,
                            out2,
                            low32(rep as u64),
                            recurse_tries,
                            0,
                            false,
                            None,
                            r,
                        );
                        if out2[rep] == ITEM_NONE {
                            break;
                        }
                    } else {
                        out2[rep] = item;
                    }
                }
                if item_type == Some(0) && is_out(ctx.weights, item, ctx.x) {
                    break;
                }
                out[rep] = item;
                left -= 1;
                break;
            }
        }
        ftotal += 1;
    }
    for rep in start..end {
        if out[rep] == ITEM_UNDEF {
            out[rep] = ITEM_NONE;
        }
        if let Some(out2) = out2.as_deref_mut()
            && out2[rep] == ITEM_UNDEF
        {
            out2[rep] = ITEM_NONE;
        }
    }
}

/// Ceph's `is_out`: the reweight vector, not the CRUSH weights, decides.
#[inline]
fn is_out(weights: &[u32], item: i32, x: u32) -> bool {
    let Some(&weight) = weights.get(item as usize) else { return true };
    if weight >= 0x10000 {
        return false;
    }
    if weight == 0 {
        return true;
    }
    (hash32_2(x, item as u32) & 0xffff) >= weight
}

#[inline]
/// `retries`: how many times this choose call has retried so far (only `linear` buckets use
/// it, an Optio extension; Ceph's algorithms see only `r`).
fn bucket_choose(
    ctx: &Ctx<'_>,
    work: &mut CrushWork,
    bucket: &CompiledBucket,
    r: u32,
    position: u32,
    retries: u32,
) -> i32 {
    let map = ctx.map;
    let x = ctx.x;
    let start = bucket.start as usize;
    let size = bucket.size as usize;
    let items = &map.items[start..start + size];
    match bucket.alg {
        Some(BucketAlg::Straw2) => {
            let slot = ctx
                .choose_args
                .and_then(|args| args.buckets.get(bucket_index(bucket.id)))
                .filter(|slot| slot.ids_start.is_some() || slot.positions > 0);
            match slot {
                None if bucket.equal_weight != 0 && size <= straw2::EQUAL_WEIGHT_ITEMS_MAX => {
                    match work.memo_lookup(bucket.id, r) {
                        Some(item) => item,
                        None => straw2::choose_equal(map.simd, items, bucket.equal_weight, x, r),
                    }
                }
                None => {
                    straw2::choose(map.simd, items, items, &map.weights[start..start + size], x, r)
                }
                Some(slot) => straw2_choose_args(
                    ctx.choose_args.expect("slot came from it"),
                    slot,
                    bucket,
                    map,
                    x,
                    r,
                    position,
                ),
            }
        }
        Some(BucketAlg::Uniform) => perm_choose(map, work, bucket, x, r),
        // Optio extension (seed 002): modulo selection of the key over the balance
        // parameter, stepping to the next item on each retry *of this choose call*. Not `r`:
        // `r` also counts the replica and the retries of the enclosing descent (host
        // collisions of chooseleaf), which would shift some PGs' residues and undo the
        // balance of the permutation. Callers never pass empty buckets.
        Some(BucketAlg::Linear) => {
            let _ = (r, position);
            let quotient = (u64::from(x) << 16) / u64::from(ctx.linear_param);
            let index = (quotient + u64::from(retries)) % size.max(1) as u64;
            items[usize::try_from(index).expect("an index below the bucket's size")]
        }
        Some(BucketAlg::List) => {
            let sums = &map.aux[bucket.aux_start as usize..bucket.aux_start as usize + size];
            let weights = &map.weights[start..start + size];
            for i in (0..size).rev() {
                let mut w = u64::from(hash32_4(x, items[i] as u32, r, bucket.id as u32) & 0xffff);
                w = (w * u64::from(sums[i])) >> 16;
                if w < u64::from(weights[i]) {
                    return items[i];
                }
            }
            items[0]
        }
        Some(BucketAlg::Tree) => {
            let nodes =
                &map.aux[bucket.aux_start as usize..(bucket.aux_start + bucket.num_nodes) as usize];
            let mut n = bucket.num_nodes >> 1;
            while n & 1 == 0 {
                let w = nodes[n as usize];
                let t = (u64::from(hash32_4(x, n, r, bucket.id as u32)) * u64::from(w)) >> 32;
                let h = super::compiled::tree_height(n);
                let left = n - (1 << (h - 1));
                n = if t < u64::from(nodes[left as usize]) { left } else { n + (1 << (h - 1)) };
            }
            items[(n >> 1) as usize]
        }
        Some(BucketAlg::Straw) => {
            let straws = &map.aux[bucket.aux_start as usize..bucket.aux_start as usize + size];
            let mut high = 0;
            let mut high_draw = 0u64;
            for i in 0..size {
                let draw =
                    u64::from(hash32_3(x, items[i] as u32, r) & 0xffff) * u64::from(straws[i]);
                if i == 0 || draw > high_draw {
                    high = i;
                    high_draw = draw;
                }
            }
            items[high]
        }
        None => items[0],
    }
}

fn bucket_index(id: i32) -> usize {
    crate::ids::BucketId(id).index()
}

fn straw2_choose_args(
    args: &CompiledChooseArgs,
    slot: &ChooseArgSlot,
    bucket: &CompiledBucket,
    map: &CrushMap,
    x: u32,
    r: u32,
    position: u32,
) -> i32 {
    let start = bucket.start as usize;
    let size = bucket.size as usize;
    let items = &map.items[start..start + size];
    let ids = match slot.ids_start {
        Some(ids_start) => &args.ids[ids_start as usize..ids_start as usize + size],
        None => items,
    };
    let weights = if slot.positions > 0 {
        let position = position.min(slot.positions - 1) as usize;
        let offset = slot.weights_start as usize + position * size;
        &args.weights[offset..offset + size]
    } else {
        &map.weights[start..start + size]
    };
    straw2::choose(map.simd, items, ids, weights, x, r)
}

/// Ceph's `bucket_perm_choose`: a lazily extended Fisher–Yates permutation per (bucket, x),
/// kept for the length of one `do_rule` call.
fn perm_choose(
    map: &CrushMap,
    work: &mut CrushWork,
    bucket: &CompiledBucket,
    x: u32,
    r: u32,
) -> i32 {
    let index = bucket_index(bucket.id);
    let size = bucket.size;
    let start = bucket.start as usize;
    let items = &map.items[start..start + size as usize];
    let perm = &mut work.perm[start..start + size as usize];
    let pr = r % size;
    if work.perm_n[index] == 0 {
        work.touched.push(index32(index));
    }
    if work.perm_x[index] != x || work.perm_n[index] == 0 {
        work.perm_x[index] = x;
        if pr == 0 {
            let s = hash32_3(x, bucket.id as u32, 0) % size;
            perm[0] = s;
            work.perm_n[index] = 0xffff;
            return items[s as usize];
        }
        for (i, p) in perm.iter_mut().enumerate() {
            *p = index32(i);
        }
        work.perm_n[index] = 0;
    } else if work.perm_n[index] == 0xffff {
        for (i, p) in perm.iter_mut().enumerate().skip(1) {
            *p = index32(i);
        }
        let first = perm[0] as usize;
        perm[first] = 0;
        work.perm_n[index] = 1;
    }
    while work.perm_n[index] <= pr {
        let p = work.perm_n[index];
        if p < size - 1 {
            let i = hash32_3(x, bucket.id as u32, p) % (size - p);
            if i != 0 {
                perm.swap((p + i) as usize, p as usize);
            }
        }
        work.perm_n[index] += 1;
    }
    items[perm[pr as usize] as usize]
}
