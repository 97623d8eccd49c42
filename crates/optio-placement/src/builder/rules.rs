//! Rules and choose_args, checked against the map being built ([`PartialMap`]).

use super::*;

/// The builder's own look-ups in the map being built: item references and names.
impl PartialMap<'_> {
    fn resolve(&self, subject: &Subject, item: &ItemRef) -> Result<ItemId, MapError> {
        let found = match item {
            ItemRef::Name(name) => self.names.get(name).copied(),
            ItemRef::Id(id) => match id.bucket() {
                Some(bucket) => self.bucket(bucket).map(|_| *id),
                None => self
                    .device_slots
                    .get(id.0 as usize)
                    .is_some_and(|s| *s != u32::MAX)
                    .then_some(*id),
            },
        };
        found.ok_or_else(|| {
            err(subject.clone(), Kind::UnknownReference { what: "item", name: item.to_string() })
        })
    }

    fn item_name(&self, item: ItemId) -> String {
        match item.bucket() {
            Some(bucket) => self.bucket(bucket).map(|b| b.name.clone()).unwrap_or_default(),
            None => self.devices[self.device_slots[item.0 as usize] as usize].name.clone(),
        }
    }
}

pub(super) fn build_rules(map: &PartialMap<'_>, specs: &[RuleSpec]) -> Result<Vec<Rule>, MapError> {
    if specs.len() > RULES_MAX {
        return Err(err(Subject::Map, Kind::TooMany { what: "rules", limit: RULES_MAX }));
    }
    let mut rules: Vec<Rule> = Vec::with_capacity(specs.len());
    for spec in specs {
        let subject = Subject::Rule(spec.name.clone());
        check_name(&subject, &spec.name)?;
        if let Some(other) = rules.iter().find(|r| r.id == spec.id) {
            return Err(err(
                subject,
                Kind::DuplicateId { id: spec.id.0.into(), other: format!("rule '{}'", other.name) },
            ));
        }
        if rules.iter().any(|r| r.name == spec.name) {
            return Err(err(subject, Kind::DuplicateName));
        }
        if spec.steps.len() > RULE_STEPS_MAX {
            return Err(err(
                subject,
                Kind::TooMany { what: "steps in a rule", limit: RULE_STEPS_MAX },
            ));
        }
        let mut steps = Vec::with_capacity(spec.steps.len());
        for step in &spec.steps {
            steps.push(match step {
                StepSpec::Noop => Step::Noop,
                StepSpec::Emit => Step::Emit,
                StepSpec::Set(set) => check_set_step(&subject, *set)?,
                StepSpec::Take { item, class } => {
                    let item = map.resolve(&subject, item)?;
                    match class {
                        None => Step::Take(item),
                        Some(class) => {
                            let name = format!("{}~{}", map.item_name(item), class);
                            let shadow = map.names.get(&name).copied().ok_or_else(|| {
                                err(
                                    subject.clone(),
                                    Kind::UnknownReference { what: "class", name: class.clone() },
                                )
                            })?;
                            Step::Take(shadow)
                        }
                    }
                }
                StepSpec::Choose { leaf, indep, num, type_name } => {
                    let type_id = map.type_id(&subject, type_name)?;
                    match (leaf, indep) {
                        (false, false) => Step::ChooseFirstn { num: *num, type_id },
                        (false, true) => Step::ChooseIndep { num: *num, type_id },
                        (true, false) => Step::ChooseleafFirstn { num: *num, type_id },
                        (true, true) => Step::ChooseleafIndep { num: *num, type_id },
                    }
                }
            });
        }
        rules.push(Rule {
            id: spec.id,
            name: spec.name.clone(),
            kind: spec.kind,
            min_size: spec.min_size,
            max_size: spec.max_size,
            steps,
        });
    }
    rules.sort_by_key(|r| r.id);
    Ok(rules)
}

/// Holds a rule's `set_*` steps to the limits of the tunables they override (see
/// [`check_tunables`]): a larger `set_chooseleaf_vary_r` would shift a 32-bit `r` by 32 or
/// more bits, and huge try counts make a mapping loop practically forever. Negative values
/// are kept: Ceph ignores them.
fn check_set_step(subject: &Subject, step: Step) -> Result<Step, MapError> {
    let (field, value, max) = match step {
        Step::SetChooseTries(v) => ("set_choose_tries", v, TRIES_MAX),
        Step::SetChooseleafTries(v) => ("set_chooseleaf_tries", v, TRIES_MAX),
        Step::SetChooseLocalTries(v) => ("set_choose_local_tries", v, TRIES_MAX),
        Step::SetChooseLocalFallbackTries(v) => ("set_choose_local_fallback_tries", v, TRIES_MAX),
        Step::SetChooseleafVaryR(v) => ("set_chooseleaf_vary_r", v, VARY_R_MAX),
        Step::SetChooseleafStable(v) => ("set_chooseleaf_stable", v, 1),
        other => return Ok(other),
    };
    if i64::from(value) > i64::from(max) {
        return Err(err(
            subject.clone(),
            Kind::OutOfRange { field, value: value.to_string(), reason: format!("at most {max}") },
        ));
    }
    Ok(step)
}

pub(super) fn build_choose_args(
    map: &PartialMap<'_>,
    specs: &[(i64, Vec<ChooseArgSpec>)],
) -> Result<Vec<ChooseArgs>, MapError> {
    let mut sets: Vec<ChooseArgs> = Vec::with_capacity(specs.len());
    for (id, args) in specs {
        let subject = Subject::ChooseArgs(*id);
        if sets.iter().any(|s| s.id == *id) {
            return Err(err(
                subject,
                Kind::DuplicateId { id: *id, other: "another choose_args".to_string() },
            ));
        }
        let mut resolved: Vec<ChooseArg> = Vec::with_capacity(args.len());
        let mut weights_total = 0usize;
        for arg in args {
            let item = map.resolve(&subject, &arg.bucket)?;
            let bucket_id = item.bucket().ok_or_else(|| {
                err(
                    subject.clone(),
                    Kind::UnknownReference { what: "bucket", name: arg.bucket.to_string() },
                )
            })?;
            let bucket = map.bucket(bucket_id).expect("resolved");
            let size = bucket.items.len();
            if arg.ids.as_ref().is_some_and(|ids| ids.len() != size)
                || arg.weight_set.iter().any(|ws| ws.len() != size)
            {
                return Err(err(
                    subject.clone(),
                    Kind::OutOfRange {
                        field: "weight_set/ids",
                        value: bucket.name.clone(),
                        reason: format!(
                            "bucket '{}' has {size} items; each weight set and id list needs exactly that many",
                            bucket.name
                        ),
                    },
                ));
            }
            weights_total = weights_total.saturating_add(size.saturating_mul(arg.weight_set.len()));
            if weights_total > CHOOSE_ARGS_WEIGHTS_MAX {
                return Err(err(
                    subject.clone(),
                    Kind::TooMany {
                        what: "weights in one choose_args set (positions × items, all buckets)",
                        limit: CHOOSE_ARGS_WEIGHTS_MAX,
                    },
                ));
            }
            if resolved.iter().any(|a| a.bucket == bucket_id) {
                return Err(err(
                    subject.clone(),
                    Kind::DuplicateId {
                        id: bucket_id.0.into(),
                        other: "another entry of this choose_args".to_string(),
                    },
                ));
            }
            resolved.push(ChooseArg {
                bucket: bucket_id,
                ids: arg.ids.clone(),
                weight_set: arg.weight_set.clone(),
            });
        }
        resolved.sort_by_key(|a| std::cmp::Reverse(a.bucket));
        sets.push(ChooseArgs { id: *id, args: resolved });
    }
    sets.sort_by_key(|s| s.id);
    Ok(sets)
}
