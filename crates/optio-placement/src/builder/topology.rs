//! Types, devices and buckets: ids and names resolved, buckets derived from device
//! locations, parents linked, weights computed bottom-up, and Ceph's per-class shadow trees.

use super::*;

pub(super) fn build_types(types: &[BucketType]) -> Result<Vec<BucketType>, MapError> {
    let mut types: Vec<BucketType> = if types.is_empty() {
        DEFAULT_TYPES
            .iter()
            .map(|(id, name)| BucketType { id: TypeId(*id), name: name.to_string() })
            .collect()
    } else {
        types.to_vec()
    };
    types.sort_by_key(|t| t.id);
    for pair in types.windows(2) {
        if pair[0].id == pair[1].id {
            return Err(err(
                Subject::Type(pair[1].name.clone()),
                Kind::DuplicateId {
                    id: pair[1].id.0.into(),
                    other: format!("type '{}'", pair[0].name),
                },
            ));
        }
    }
    let mut seen = HashSet::new();
    for t in &types {
        check_name(&Subject::Type(t.name.clone()), &t.name)?;
        if !seen.insert(t.name.as_str()) {
            return Err(err(Subject::Type(t.name.clone()), Kind::DuplicateName));
        }
    }
    if types.first().map(|t| t.id) != Some(TypeId(0)) {
        return Err(err(
            Subject::Map,
            Kind::UnknownReference { what: "type", name: "0 (the device level)".to_string() },
        ));
    }
    Ok(types)
}

pub(super) fn add_devices(
    build: &mut Build,
    specs: &[DeviceSpec],
    epoch: Epoch,
) -> Result<(), MapError> {
    let mut order: Vec<usize> = (0..specs.len()).collect();
    order.sort_by_key(|&i| specs[i].id);
    let max_id = specs.iter().map(|d| d.id.0).max();
    if let Some(max_id) = max_id {
        if max_id >= DEVICE_ID_LIMIT {
            let spec = specs.iter().find(|d| d.id.0 == max_id).expect("max exists");
            return Err(err(
                Subject::Device(device_name(spec)),
                Kind::IdOutOfRange { id: max_id.into(), reason: "device ids are below 16777216" },
            ));
        }
        build.device_slots = vec![u32::MAX; max_id as usize + 1];
    }
    build.devices.reserve(specs.len());
    build.names.reserve(specs.len());
    for index in order {
        let spec = &specs[index];
        let name = device_name(spec);
        let subject = Subject::Device(name.clone());
        check_name(&subject, &name)?;
        let slot = &mut build.device_slots[spec.id.0 as usize];
        if *slot != u32::MAX {
            let other = build.devices[*slot as usize].name.clone();
            return Err(err(
                subject,
                Kind::DuplicateId { id: spec.id.0.into(), other: format!("device '{other}'") },
            ));
        }
        *slot = crate::narrow::index32(build.devices.len());
        if build.names.insert(name.clone(), ItemId(spec.id.0 as i32)).is_some() {
            return Err(err(subject, Kind::DuplicateName));
        }
        for (field, value) in
            [("reweight", spec.reweight), ("primary_affinity", spec.primary_affinity)]
        {
            if value.0 > 0x10000 {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field,
                        value: format!("{:.5}", value.as_f64()),
                        reason: "must be between 0 and 1".to_string(),
                    },
                ));
            }
        }
        for (field, value) in [("up_from", spec.up_from), ("down_at", spec.down_at)] {
            if let Some(value) = value.filter(|value| *value > epoch) {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field,
                        value: value.0.to_string(),
                        reason: format!(
                            "after the map's epoch {}: it names the map that changed the device's state, which is this map or an earlier one",
                            epoch.0
                        ),
                    },
                ));
            }
        }
        if let Some(class) = &spec.class {
            check_name(&subject, class)?;
            if !build.classes.contains(class) {
                build.classes.push(class.clone());
            }
        }
        let weight = match (spec.weight, spec.capacity_bytes) {
            (Some(weight), _) => weight,
            (None, Some(bytes)) => weight_from_capacity(bytes).ok_or_else(|| {
                err(
                    subject.clone(),
                    Kind::InvalidWeight {
                        value: format!("{bytes} bytes"),
                        reason: "the capacity in TiB does not fit a 16.16 weight",
                    },
                )
            })?,
            (None, None) => Weight::ONE,
        };
        let capacity_bytes = spec.capacity_bytes.unwrap_or_else(|| {
            u64::try_from((u128::from(weight.0) * u128::from(TIB)) >> 16)
                .expect("a 16.16 weight (below 2^16) times 1 TiB is below 2^56 bytes")
        });
        build.devices.push(Device {
            id: spec.id,
            name,
            class: spec.class.clone(),
            capacity_bytes,
            weight,
            bandwidth_mb_per_s: spec.bandwidth_mb_per_s,
            up: spec.up,
            is_in: spec.is_in,
            reweight: spec.reweight,
            primary_affinity: spec.primary_affinity,
            addr: spec.addr.clone(),
            up_from: spec.up_from,
            down_at: spec.down_at,
        });
    }
    Ok(())
}

fn device_name(spec: &DeviceSpec) -> String {
    if spec.name.is_empty() { format!("osd.{}", spec.id.0) } else { spec.name.clone() }
}

/// The 16.16 weight for a capacity, with 1.0 = 1 TiB (Ceph's convention).
pub fn weight_from_capacity(bytes: u64) -> Option<Weight> {
    let fixed = (u128::from(bytes) << 16) / u128::from(TIB);
    u32::try_from(fixed).ok().map(Weight)
}

pub(super) fn add_explicit_buckets(
    build: &mut Build,
    specs: &[BucketSpec],
) -> Result<(), MapError> {
    for spec in specs {
        if let Some(id) = spec.id {
            build.reserved.insert(id.0);
        }
        for (_, id) in &spec.class_ids {
            build.reserved.insert(id.0);
        }
    }
    // First create every bucket (so items can refer to buckets defined later), then items.
    let mut ids = Vec::with_capacity(specs.len());
    for spec in specs {
        let subject = Subject::Bucket(spec.name.clone());
        check_name(&subject, &spec.name)?;
        let type_id = build.type_by_name(&spec.type_name).ok_or_else(|| {
            err(
                subject.clone(),
                Kind::UnknownReference { what: "type", name: spec.type_name.clone() },
            )
        })?;
        if type_id == TypeId(0) {
            return Err(err(
                subject,
                Kind::OutOfRange {
                    field: "type",
                    value: spec.type_name.clone(),
                    reason: "type 0 is the device level; buckets need a higher type".to_string(),
                },
            ));
        }
        if spec.hash != 0 {
            return Err(err(
                subject,
                Kind::Unsupported {
                    feature: format!("hash {}", spec.hash),
                    hint: "use hash 0 (rjenkins1), the only hash Ceph defines",
                },
            ));
        }
        for (class, class_id) in &spec.class_ids {
            check_name(&subject, class)?;
            if class_id.0 >= 0 {
                return Err(err(
                    subject,
                    Kind::IdOutOfRange { id: class_id.0.into(), reason: "bucket ids are negative" },
                ));
            }
            if !build.classes.contains(class) {
                build.classes.push(class.clone());
            }
        }
        let id = match spec.id {
            Some(id) if id.0 >= 0 => {
                return Err(err(
                    subject,
                    Kind::IdOutOfRange { id: id.0.into(), reason: "bucket ids are negative" },
                ));
            }
            Some(id) => id,
            None => build.lowest_free_bucket_id(),
        };
        if spec.items.len() > BUCKET_ITEMS_MAX {
            return Err(err(
                subject,
                Kind::TooMany { what: "items in a bucket", limit: BUCKET_ITEMS_MAX },
            ));
        }
        build.insert_bucket(PendingBucket {
            bucket: Bucket {
                id,
                name: spec.name.clone(),
                type_id,
                alg: spec.alg,
                hash: spec.hash,
                items: Vec::with_capacity(spec.items.len()),
                weights: Vec::new(),
                shadow_of: None,
            },
            item_weights: Vec::with_capacity(spec.items.len()),
            class_ids: spec.class_ids.clone(),
        })?;
        ids.push(id);
    }
    for (spec, id) in specs.iter().zip(ids) {
        let subject = Subject::Bucket(spec.name.clone());
        let mut resolved = Vec::with_capacity(spec.items.len());
        for (item, weight) in &spec.items {
            let item_id = build.resolve_item(&subject, item)?;
            resolved.push((item_id, *weight));
        }
        let pending = build.bucket_mut(id);
        for (item, weight) in resolved {
            if pending.bucket.items.contains(&item) {
                return Err(err(
                    subject.clone(),
                    Kind::DuplicateId {
                        id: item.0.into(),
                        other: "another item of the same bucket".to_string(),
                    },
                ));
            }
            pending.bucket.items.push(item);
            pending.item_weights.push(weight);
        }
    }
    Ok(())
}

/// Creates the buckets named by device locations and links devices and buckets into them.
pub(super) fn derive_located_buckets(
    build: &mut Build,
    specs: &[DeviceSpec],
) -> Result<(), MapError> {
    let root_type = build.types.last().map(|t| t.id).expect("types are never empty");
    let mut linked: HashMap<ItemId, BucketId> = HashMap::new();
    for spec in specs.iter().filter(|d| !d.location.is_empty()) {
        let name = device_name(spec);
        let subject = Subject::Device(name.clone());
        let mut path: Vec<(TypeId, &str)> = Vec::with_capacity(spec.location.len() + 1);
        for (type_name, bucket_name) in &spec.location {
            let type_id = build.type_by_name(type_name).ok_or_else(|| {
                err(
                    subject.clone(),
                    Kind::UnknownReference { what: "type", name: type_name.clone() },
                )
            })?;
            if type_id == TypeId(0) {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field: "location",
                        value: type_name.clone(),
                        reason: "a location names buckets, not the device level".to_string(),
                    },
                ));
            }
            if path.iter().any(|(t, _)| *t == type_id) {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field: "location",
                        value: type_name.clone(),
                        reason: "each type may appear once in a location".to_string(),
                    },
                ));
            }
            check_name(&subject, bucket_name)?;
            path.push((type_id, bucket_name));
        }
        path.sort_by_key(|(t, _)| *t);
        if path.last().map(|(t, _)| *t) != Some(root_type) {
            path.push((root_type, DEFAULT_ROOT));
        }
        // Create missing buckets top-down so that the root gets the first free id.
        let mut ids = vec![BucketId(0); path.len()];
        for (level, (type_id, bucket_name)) in path.iter().enumerate().rev() {
            ids[level] = match build.names.get(*bucket_name) {
                Some(item) => {
                    let existing = item.bucket().ok_or_else(|| {
                        err(Subject::Bucket(bucket_name.to_string()), Kind::DuplicateName)
                    })?;
                    let existing_type = build.bucket_mut(existing).bucket.type_id;
                    if existing_type != *type_id {
                        return Err(err(
                            subject.clone(),
                            Kind::OutOfRange {
                                field: "location",
                                value: bucket_name.to_string(),
                                reason: format!(
                                    "bucket '{bucket_name}' already exists with type '{}'",
                                    build
                                        .types
                                        .iter()
                                        .find(|t| t.id == existing_type)
                                        .map_or("?", |t| t.name.as_str())
                                ),
                            },
                        ));
                    }
                    existing
                }
                None => {
                    let id = build.lowest_free_bucket_id();
                    build.insert_bucket(PendingBucket {
                        bucket: Bucket {
                            id,
                            name: bucket_name.to_string(),
                            type_id: *type_id,
                            alg: BucketAlg::Straw2,
                            hash: 0,
                            items: Vec::new(),
                            weights: Vec::new(),
                            shadow_of: None,
                        },
                        item_weights: Vec::new(),
                        class_ids: Vec::new(),
                    })?;
                    id
                }
            };
        }
        let mut child = ItemId(spec.id.0 as i32);
        for &parent in &ids {
            match linked.get(&child) {
                Some(existing) if *existing == parent => break,
                Some(existing) => {
                    let first = build.bucket_mut(*existing).bucket.name.clone();
                    let second = build.bucket_mut(parent).bucket.name.clone();
                    let who = build.item_name(child);
                    let subject =
                        if child.0 >= 0 { Subject::Device(who) } else { Subject::Bucket(who) };
                    return Err(err(subject, Kind::MultipleParents { first, second }));
                }
                None => {
                    linked.insert(child, parent);
                    let pending = build.bucket_mut(parent);
                    if !pending.bucket.items.contains(&child) {
                        pending.bucket.items.push(child);
                        pending.item_weights.push(None);
                    }
                }
            }
            child = ItemId(parent.0);
        }
    }
    Ok(())
}

type Parents = (Vec<Option<BucketId>>, Vec<Option<BucketId>>);

/// Finds each item's parent, refusing items with two parents and cycles.
pub(super) fn link_parents(build: &Build) -> Result<Parents, MapError> {
    let mut device_parent: Vec<Option<BucketId>> = vec![None; build.device_slots.len()];
    let mut bucket_parent: Vec<Option<BucketId>> = vec![None; build.buckets.len()];
    for pending in build.buckets.iter().flatten() {
        let parent = pending.bucket.id;
        for &item in &pending.bucket.items {
            let slot = match item.device() {
                Some(device) => &mut device_parent[device.0 as usize],
                None => &mut bucket_parent[BucketId(item.0).index()],
            };
            if let Some(first) = *slot {
                let who = build.item_name(item);
                let subject = if item.0 >= 0 { Subject::Device(who) } else { Subject::Bucket(who) };
                let first = build.item_name(ItemId(first.0));
                let second = pending.bucket.name.clone();
                let (first, second) =
                    if first <= second { (first, second) } else { (second, first) };
                return Err(err(subject, Kind::MultipleParents { first, second }));
            }
            *slot = Some(parent);
        }
    }
    // With one parent each, a cycle is a chain of parents that returns to its start.
    let mut state = vec![0u8; build.buckets.len()]; // 0 unvisited, 1 on path, 2 done
    for start in 0..build.buckets.len() {
        if build.buckets[start].is_none() || state[start] != 0 {
            continue;
        }
        let mut path = Vec::new();
        let mut current = Some(start);
        while let Some(index) = current {
            match state[index] {
                2 => break,
                1 => {
                    let cycle_start = path.iter().position(|&i| i == index).unwrap_or(0);
                    let names: Vec<String> = path[cycle_start..]
                        .iter()
                        .map(|&i| build.item_name(ItemId(BucketId::from_index(i).0)))
                        .collect();
                    return Err(err(
                        Subject::Bucket(names[0].clone()),
                        Kind::Cycle { path: names.join(" → ") },
                    ));
                }
                _ => {
                    state[index] = 1;
                    path.push(index);
                    current = bucket_parent[index].map(BucketId::index);
                }
            }
        }
        for index in path {
            state[index] = 2;
        }
    }
    check_depth(build, &bucket_parent)?;
    Ok((device_parent, bucket_parent))
}

/// Refuses hierarchies deeper than [`HIERARCHY_DEPTH_MAX`] (the parent links are acyclic).
fn check_depth(build: &Build, bucket_parent: &[Option<BucketId>]) -> Result<(), MapError> {
    let mut depth: Vec<usize> = vec![0; bucket_parent.len()]; // 0: not computed yet
    for start in 0..bucket_parent.len() {
        if build.buckets[start].is_none() || depth[start] != 0 {
            continue;
        }
        // Walk up to a bucket whose depth is known (or a root), then assign on the way down.
        let mut path = vec![start];
        let mut known = 0;
        while let Some(parent) = bucket_parent[*path.last().expect("not empty")] {
            let index = parent.index();
            if depth[index] != 0 {
                known = depth[index];
                break;
            }
            path.push(index);
        }
        for (offset, index) in path.iter().rev().enumerate() {
            depth[*index] = known + offset + 1;
            if depth[*index] > HIERARCHY_DEPTH_MAX {
                return Err(err(
                    Subject::Bucket(build.item_name(ItemId(BucketId::from_index(*index).0))),
                    Kind::TooMany {
                        what: "levels in the bucket hierarchy",
                        limit: HIERARCHY_DEPTH_MAX,
                    },
                ));
            }
        }
    }
    Ok(())
}

/// Fills in missing item weights bottom-up and checks sums.
pub(super) fn resolve_weights(
    build: &mut Build,
    device_parent: &[Option<BucketId>],
) -> Result<(), MapError> {
    // Devices take the weight given to them in their bucket, when one is given.
    for pending in build.buckets.iter().flatten() {
        for (item, weight) in pending.bucket.items.iter().zip(&pending.item_weights) {
            if let (Some(device), Some(weight)) = (item.device(), weight)
                && device_parent[device.0 as usize] == Some(pending.bucket.id)
            {
                let slot = build.device_slots[device.0 as usize] as usize;
                build.devices[slot].weight = *weight;
            }
        }
    }
    // Post-order over buckets: an explicit stack, as hierarchies can be deep.
    let count = build.buckets.len();
    let mut total: Vec<Option<Weight>> = vec![None; count];
    for start in 0..count {
        if build.buckets[start].is_none() || total[start].is_some() {
            continue;
        }
        let mut stack = vec![(start, false)];
        while let Some((index, children_done)) = stack.pop() {
            if total[index].is_some() {
                continue;
            }
            let pending = build.buckets[index].as_ref().expect("only existing buckets are pushed");
            if !children_done {
                stack.push((index, true));
                for (item, weight) in pending.bucket.items.iter().zip(&pending.item_weights) {
                    if let (Some(child), None) = (item.bucket(), weight)
                        && total[child.index()].is_none()
                    {
                        stack.push((child.index(), false));
                    }
                }
                continue;
            }
            let mut weights = Vec::with_capacity(pending.bucket.items.len());
            let mut sum: u64 = 0;
            for (item, weight) in pending.bucket.items.iter().zip(&pending.item_weights) {
                let weight = match (weight, item.device(), item.bucket()) {
                    (Some(weight), _, _) => *weight,
                    (None, Some(device), _) => {
                        build.devices[build.device_slots[device.0 as usize] as usize].weight
                    }
                    (None, None, Some(child)) => total[child.index()].expect("children first"),
                    (None, None, None) => unreachable!("an item is a device or a bucket"),
                };
                sum += u64::from(weight.0);
                weights.push(weight);
            }
            let name = pending.bucket.name.clone();
            let sum =
                u32::try_from(sum).map_err(|_| err(Subject::Bucket(name), Kind::WeightOverflow))?;
            total[index] = Some(Weight(sum));
            build.buckets[index].as_mut().expect("exists").bucket.weights = weights;
        }
    }
    Ok(())
}

pub(super) fn check_bucket_shape(bucket: &Bucket) -> Result<(), MapError> {
    if bucket.alg == BucketAlg::Uniform
        && let Some(first) = bucket.weights.first()
        && bucket.weights.iter().any(|w| w != first)
    {
        return Err(err(
            Subject::Bucket(bucket.name.clone()),
            Kind::BucketShape(
                "a uniform bucket needs items of equal weight; use straw2 for mixed weights",
            ),
        ));
    }
    if bucket.alg == BucketAlg::Linear
        && let Some(first) = bucket.weights.first()
        && bucket.weights.iter().any(|w| w != first)
    {
        return Err(err(
            Subject::Bucket(bucket.name.clone()),
            Kind::BucketShape(
                "a linear bucket (seed 002) needs items of equal weight; use straw2 for mixed weights",
            ),
        ));
    }
    Ok(())
}

/// Ceph's per-class shadow trees (`CrushWrapper::populate_classes`): for every root and every
/// class, a copy of the tree keeping only devices of that class, named `bucket~class`.
pub(super) fn build_shadow_trees(
    build: &mut Build,
    buckets: &mut Vec<Option<Bucket>>,
    bucket_parent: &[Option<BucketId>],
    class_ids: &BTreeMap<BucketId, Vec<(String, BucketId)>>,
) -> Result<(), MapError> {
    if build.classes.is_empty() {
        return Ok(());
    }
    let device_class: Vec<Option<usize>> = build
        .device_slots
        .iter()
        .map(|slot| {
            let device = build.devices.get(*slot as usize)?;
            let class = device.class.as_ref()?;
            build.classes.iter().position(|c| c == class)
        })
        .collect();
    let mut roots: Vec<BucketId> = buckets
        .iter()
        .flatten()
        .filter(|b| bucket_parent[b.id.index()].is_none())
        .map(|b| b.id)
        .collect();
    roots.sort();
    let classes = build.classes.clone();
    for root in roots {
        for (class_index, class) in classes.iter().enumerate() {
            clone_for_class(build, buckets, &device_class, class_ids, root, class_index, class)?;
        }
    }
    Ok(())
}

fn clone_for_class(
    build: &mut Build,
    buckets: &mut Vec<Option<Bucket>>,
    device_class: &[Option<usize>],
    class_ids: &BTreeMap<BucketId, Vec<(String, BucketId)>>,
    original: BucketId,
    class_index: usize,
    class: &str,
) -> Result<(BucketId, Weight), MapError> {
    let source = buckets[original.index()].as_ref().expect("original exists").clone();
    let name = format!("{}~{}", source.name, class);
    if let Some(existing) = build.names.get(&name) {
        let id = BucketId(existing.0);
        let weight = buckets[id.index()].as_ref().map(Bucket::weight).unwrap_or_default();
        return Ok((id, weight));
    }
    let mut items = Vec::new();
    let mut weights = Vec::new();
    for (item, weight) in source.items.iter().zip(&source.weights) {
        match item.device() {
            Some(device) => {
                if device_class.get(device.0 as usize).copied().flatten() == Some(class_index) {
                    items.push(*item);
                    weights.push(*weight);
                }
            }
            None => {
                let (clone, clone_weight) = clone_for_class(
                    build,
                    buckets,
                    device_class,
                    class_ids,
                    BucketId(item.0),
                    class_index,
                    class,
                )?;
                items.push(ItemId(clone.0));
                weights.push(clone_weight);
            }
        }
    }
    let given = class_ids
        .get(&original)
        .and_then(|ids| ids.iter().find(|(c, _)| c == class))
        .map(|(_, id)| *id);
    let id = match given {
        Some(id) => id,
        None => build.lowest_free_bucket_id(),
    };
    let bucket = Bucket {
        id,
        name: name.clone(),
        type_id: source.type_id,
        alg: source.alg,
        hash: source.hash,
        items,
        weights,
        shadow_of: Some((original, class.to_string())),
    };
    let weight = bucket.weight();
    let index = id.index();
    if index >= BUCKETS_MAX {
        return Err(err(
            Subject::Bucket(name),
            Kind::TooMany { what: "buckets", limit: BUCKETS_MAX },
        ));
    }
    if buckets.len() <= index {
        buckets.resize_with(index + 1, || None);
    }
    if let Some(other) = &buckets[index] {
        return Err(err(
            Subject::Bucket(source.name.clone()),
            Kind::DuplicateId { id: id.0.into(), other: format!("bucket '{}'", other.name) },
        ));
    }
    if build.names.insert(name.clone(), ItemId(id.0)).is_some() {
        return Err(err(Subject::Bucket(name), Kind::DuplicateName));
    }
    buckets[index] = Some(bucket);
    Ok((id, weight))
}
