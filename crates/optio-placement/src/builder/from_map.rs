//! The way back: a map's own builder (`ClusterMap::to_builder`), so that a change is an edit
//! of what made the map.

use super::*;

/// The specs of `map`'s buckets (shadow buckets become their originals' class ids); a child
/// bucket's weight stays implicit when it is the child's total.
pub(super) fn bucket_specs(map: &ClusterMap) -> Vec<BucketSpec> {
    let mut shadow_ids: BTreeMap<BucketId, Vec<(String, BucketId)>> = BTreeMap::new();
    for bucket in map.buckets() {
        if let Some((original, class)) = &bucket.shadow_of {
            shadow_ids.entry(*original).or_default().push((class.clone(), bucket.id));
        }
    }
    let mut buckets: Vec<BucketSpec> = Vec::new();
    for bucket in map.buckets().filter(|b| b.shadow_of.is_none()) {
        let items = bucket
            .items
            .iter()
            .zip(&bucket.weights)
            .map(|(item, weight)| {
                // Keep a child bucket's weight implicit when it is the child's total, so
                // that edits below it propagate up as in Ceph.
                let implicit = match item.bucket() {
                    Some(child) => map.bucket(child).is_some_and(|c| c.weight() == *weight),
                    None => false,
                };
                (ItemRef::Id(*item), (!implicit).then_some(*weight))
            })
            .collect();
        let mut class_ids = shadow_ids.remove(&bucket.id).unwrap_or_default();
        class_ids.sort_by_key(|(class, _)| map.classes.iter().position(|c| c == class));
        buckets.push(BucketSpec {
            id: Some(bucket.id),
            name: bucket.name.clone(),
            type_name: map.type_name(bucket.type_id).unwrap_or_default().to_string(),
            alg: bucket.alg,
            hash: bucket.hash,
            items,
            class_ids,
        });
    }
    buckets
}

/// The spec of one of `map`'s pools, everything explicit.
pub(super) fn pool_spec(map: &ClusterMap, pool: &Pool) -> PoolSpec {
    PoolSpec {
        id: pool.id,
        name: pool.name.clone(),
        pg_num: pool.pg_num,
        pgp_num: Some(pool.pgp_num),
        size: pool.size,
        min_size: Some(pool.min_size),
        engine: match pool.engine_spec() {
            EngineSpec::Crush { rule } => {
                EngineRef::Crush(CrushSpec { rule: Some(RuleRef::Id(rule)) })
            }
            EngineSpec::Ring(params) => EngineRef::Ring(RingSpec {
                vnode_bytes: Some(params.vnode_bytes),
                failure_domain: params
                    .failure_domain
                    .and_then(|t| map.type_name(t))
                    .map(str::to_string),
            }),
            EngineSpec::Attributed(params) => EngineRef::Attributed(AttributedSpec {
                throttle_bytes: Some(params.throttle_bytes),
                sector_size: Some(params.sector_size),
                zone_type: map.type_name(params.zone_type).map(str::to_string),
                distinct_zones: params.distinct_zones,
                bandwidth_tolerance_percent: Some(params.bandwidth_tolerance_percent),
                sector_base: Some(pool.sector_base().to_vec()),
                selection: Some(params.selection),
            }),
            EngineSpec::Elastic(params) => EngineRef::Elastic(ElasticSpec {
                primaries: Some(params.primaries),
                scale: Some(params.scale),
            }),
        },
        hashpspool: pool.hashpspool,
        choice: pool.choice,
        balance: PoolBalanceSpec {
            state: pool.balance_state().cloned(),
            ..PoolBalanceSpec::from(pool.balance())
        },
        erasure: pool.erasure,
    }
}

/// The spec of a membership, every version numbered.
pub(super) fn membership_spec(m: &Membership) -> MembershipSpec {
    MembershipSpec {
        order: m.order.iter().map(|d| ItemRef::Id(ItemId::from(*d))).collect(),
        versions: m
            .versions
            .iter()
            .map(|v| VersionSpec {
                version: Some(v.version),
                active: match &v.active {
                    ActiveSet::All => ActiveSpec::All,
                    ActiveSet::FirstRanks(k) => ActiveSpec::FirstRanks(*k),
                    ActiveSet::Devices(devices) => ActiveSpec::Devices(
                        devices.iter().map(|d| ItemRef::Id(ItemId::from(*d))).collect(),
                    ),
                },
            })
            .collect(),
    }
}

impl ClusterMap {
    /// A builder holding this map's contents, to derive a changed map from.
    pub fn to_builder(&self) -> ClusterMapBuilder {
        ClusterMapBuilder::from_map(self)
    }
}

pub(super) fn step_to_spec(map: &ClusterMap, step: &Step) -> StepSpec {
    let type_name = |t: &TypeId| map.type_name(*t).unwrap_or_default().to_string();
    match step {
        Step::Noop => StepSpec::Noop,
        Step::Take(item) => match item.bucket().and_then(|b| map.bucket(b)) {
            Some(Bucket { shadow_of: Some((original, class)), .. }) => {
                StepSpec::Take { item: ItemRef::Id(ItemId(original.0)), class: Some(class.clone()) }
            }
            _ => StepSpec::Take { item: ItemRef::Id(*item), class: None },
        },
        Step::ChooseFirstn { num, type_id } => {
            StepSpec::Choose { leaf: false, indep: false, num: *num, type_name: type_name(type_id) }
        }
        Step::ChooseIndep { num, type_id } => {
            StepSpec::Choose { leaf: false, indep: true, num: *num, type_name: type_name(type_id) }
        }
        Step::ChooseleafFirstn { num, type_id } => {
            StepSpec::Choose { leaf: true, indep: false, num: *num, type_name: type_name(type_id) }
        }
        Step::ChooseleafIndep { num, type_id } => {
            StepSpec::Choose { leaf: true, indep: true, num: *num, type_name: type_name(type_id) }
        }
        Step::Emit => StepSpec::Emit,
        other => StepSpec::Set(*other),
    }
}
