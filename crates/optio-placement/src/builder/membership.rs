//! Elastic membership: the ranked servers and their versions.

use super::*;

/// The rank order: the listed devices, then every other device by id.
pub(super) fn membership_order(
    build: &Build,
    spec: Option<&MembershipSpec>,
) -> Result<Vec<DeviceId>, MapError> {
    let mut order: Vec<DeviceId> = Vec::with_capacity(build.devices.len());
    let mut ranked = vec![false; build.device_slots.len()];
    for item in spec.map_or(&[][..], |m| m.order.as_slice()) {
        let device = resolve_server(build, &Subject::Membership, item)?;
        if std::mem::replace(&mut ranked[device.0 as usize], true) {
            return Err(err(
                Subject::Membership,
                Kind::OutOfRange {
                    field: "order",
                    value: build.item_name(ItemId::from(device)),
                    reason: "ranks this device twice; list each server once".to_string(),
                },
            ));
        }
        order.push(device);
    }
    order.extend(build.devices.iter().map(|d| d.id).filter(|d| !ranked[d.0 as usize]));
    Ok(order)
}

/// A device named by a membership entry.
fn resolve_server(build: &Build, subject: &Subject, item: &ItemRef) -> Result<DeviceId, MapError> {
    let unknown = || {
        err(
            subject.clone(),
            Kind::UnknownReference { what: "device (server)", name: item.to_string() },
        )
    };
    let id = build.resolve_item(subject, item).map_err(|_| unknown())?;
    id.device().ok_or_else(unknown)
}

/// Resolves the membership versions; made with one full-power version when an elastic pool
/// needs ranks and the map has none.
pub(super) fn build_membership(
    build: &Build,
    order: Vec<DeviceId>,
    spec: Option<&MembershipSpec>,
    pools: &[Pool],
) -> Result<Option<Membership>, MapError> {
    let elastic: Vec<(&Pool, u32)> = pools
        .iter()
        .filter_map(|p| match p.engine_spec() {
            EngineSpec::Elastic(params) => Some((p, params.primaries)),
            _ => None,
        })
        .collect();
    if spec.is_none() && elastic.is_empty() {
        return Ok(None);
    }
    let n = crate::narrow::index32(order.len());
    let mut versions: Vec<MembershipVersion> = Vec::new();
    let specs = spec.map_or(&[][..], |m| m.versions.as_slice());
    if specs.len() > crate::engine::elastic::VERSIONS_MAX {
        return Err(err(
            Subject::Membership,
            Kind::TooMany {
                what: "membership versions",
                limit: crate::engine::elastic::VERSIONS_MAX,
            },
        ));
    }
    for version in specs {
        let resolved = resolve_version(build, version, versions.last(), n)?;
        versions.push(resolved);
    }
    if versions.is_empty() {
        versions.push(MembershipVersion { version: 1, active: ActiveSet::All });
    }
    let membership = Membership { order, versions };
    check_primaries_active(build, &membership, &elastic)?;
    Ok(Some(membership))
}

/// One membership version as given, numbered (one more than `previous` by default) and
/// resolved against the `n` ranked servers.
fn resolve_version(
    build: &Build,
    version: &VersionSpec,
    previous: Option<&MembershipVersion>,
    n: u32,
) -> Result<MembershipVersion, MapError> {
    let number = match (version.version, previous) {
        (Some(number), _) => number,
        (None, Some(previous)) => previous.version.saturating_add(1),
        (None, None) => 1,
    };
    let subject = Subject::Version(number);
    if let Some(previous) = previous
        && number <= previous.version
    {
        return Err(err(
            subject,
            Kind::OutOfRange {
                field: "version",
                value: number.to_string(),
                reason: format!(
                    "versions must increase; the previous one is {}: renumber or reorder them",
                    previous.version
                ),
            },
        ));
    }
    let active = match &version.active {
        ActiveSpec::All => ActiveSet::All,
        ActiveSpec::FirstRanks(k) => {
            if *k > n {
                return Err(err(
                    subject,
                    Kind::OutOfRange {
                        field: "active",
                        value: k.to_string(),
                        reason: format!("the map ranks {n} servers; use at most {n}"),
                    },
                ));
            }
            ActiveSet::FirstRanks(*k)
        }
        ActiveSpec::Devices(items) => {
            let mut devices = Vec::with_capacity(items.len());
            for item in items {
                devices.push(resolve_server(build, &subject, item)?);
            }
            devices.sort_unstable();
            if let Some(pair) = devices.windows(2).find(|p| p[0] == p[1]) {
                return Err(err(
                    subject,
                    Kind::OutOfRange {
                        field: "active",
                        value: build.item_name(ItemId::from(pair[0])),
                        reason: "names this server twice; list each once".to_string(),
                    },
                ));
            }
            ActiveSet::Devices(devices)
        }
    };
    Ok(MembershipVersion { version: number, active })
}

/// Every version keeps the primaries of every elastic pool active (they hold a copy of every
/// object).
fn check_primaries_active(
    build: &Build,
    membership: &Membership,
    elastic: &[(&Pool, u32)],
) -> Result<(), MapError> {
    for version in &membership.versions {
        for (pool, primaries) in elastic {
            for rank in 1..=*primaries {
                if !membership.is_active(version, rank) {
                    let device = membership.order[rank as usize - 1];
                    return Err(err(
                        Subject::Version(version.version),
                        Kind::OutOfRange {
                            field: "active",
                            value: build.item_name(ItemId::from(device)),
                            reason: format!(
                                "leaves '{}' (rank {rank}) inactive, but it is one of the {primaries} primaries of elastic pool '{}', which hold a copy of every object and stay active: keep ranks 1 to {primaries} active",
                                build.item_name(ItemId::from(device)),
                                pool.name
                            ),
                        },
                    ));
                }
            }
        }
    }
    Ok(())
}
