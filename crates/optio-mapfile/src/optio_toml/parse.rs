//! Reads Optio TOML into a [`ClusterMapBuilder`] (the format is described in
//! `docs/map-format.md`).

use optio_placement::choice::{
    CHOICES_MAX, COMPOSITE_METRICS, COMPOSITE_WEIGHT_MAX, ChoiceSettings, POLICY_NAMES, PPM,
    PolicySpec,
};
use optio_placement::engine::balanced::incremental::{
    BalanceState, CLASSES, DOMAIN_PRICE_MAX, DeviceState, DomainState, PRICE_MAX, STATE_VERSION,
};
use optio_placement::params::erasure::{
    DEFAULT_STRIPE_UNIT_BYTES, ERASURE_CHUNKS_MAX, ErasureParams, STRIPE_UNIT_MAX_BYTES,
};
use optio_placement::{
    ActiveSpec, AttributedSpec, BalanceMethod, BucketAlg, BucketId, BucketSpec, BucketType,
    ChooseArgSpec, ClusterMapBuilder, CrushSpec, DeviceId, DeviceSpec, ElasticSpec, EngineRef,
    Epoch, ItemId, ItemRef, LINEAR_PARAM_ONE, LinearParamSpec, MembershipSpec, PoolBalanceSpec,
    PoolId, PoolSpec, PpsGenerator, RingSpec, RuleId, RuleKind, RuleRef, RuleSpec, SectorSelection,
    StepSpec, Subject, Tunables, TunablesProfile, TypeId, VersionSpec,
};
use toml::de::{DeTable, DeValue};

use super::FORMAT_VERSION;
use super::reader::{Source, Table, Value};
use crate::error::{Lines, ParseError, ParseErrorKind};
use crate::steps::{STEP_WORDS_MAX, parse_step};
use crate::units::{parse_bandwidth, parse_bytes};

/// Keys of `attributed` pools.
const ATTRIBUTED_KEYS: &[&str] = &[
    "throttle",
    "sector_size",
    "zone_type",
    "distinct_zones",
    "bandwidth_tolerance",
    "selection",
    "sector_base",
];
/// Keys of `elastic` pools.
const ELASTIC_KEYS: &[&str] = &["primaries", "scale"];

/// Name and id of the rule added to a map that has devices with locations but no `rules`.
pub(crate) const DEFAULT_RULE_NAME: &str = "replicated_rule";

struct Reader<'s> {
    source: &'s Source,
    lines: Lines,
    /// Buckets named by device locations, with the line of their first mention; recorded
    /// after explicit buckets so that errors point at a bucket's own table when it has one.
    located: Vec<(String, usize)>,
}

/// Reads the document; the builder is not validated yet.
pub(crate) fn to_builder(text: &str) -> Result<(ClusterMapBuilder, Lines), ParseError> {
    let source = Source::new(text);
    let root = DeTable::parse(text).map_err(|error| {
        let line = error.span().map(|span| source.line(span.start));
        ParseError::new(line, ParseErrorKind::Toml(error.message().to_string()))
    })?;
    let mut reader = Reader { source: &source, lines: Lines::default(), located: Vec::new() };
    let builder = reader.document(root.get_ref())?;
    Ok((builder, reader.lines))
}

impl Reader<'_> {
    /// The tables of an array of tables (`[[devices]]` or `devices = [ { … }, … ]`).
    fn tables<'t, 'i>(&self, value: &Value<'t, 'i>) -> Result<Vec<Table<'t, 'i>>, ParseError> {
        value.elements(self.source)?.iter().map(|element| element.as_table(self.source)).collect()
    }

    fn document(&mut self, root: &DeTable<'_>) -> Result<ClusterMapBuilder, ParseError> {
        let mut top = Table::new(root, "map".to_string(), 1);
        let mut builder = ClusterMapBuilder::new();
        if let Some(value) = top.get("format_version") {
            let version: u32 = value.int(self.source, "1")?;
            if version != FORMAT_VERSION {
                return Err(value.error(
                    self.source,
                    format!(
                        "this map has format_version {version}, this Optio reads version \
                         {FORMAT_VERSION}; use a newer Optio"
                    ),
                ));
            }
        }
        if let Some(value) = top.get("epoch") {
            builder.epoch = Epoch(value.int(self.source, "0 or more")?);
        }
        if let Some(value) = top.get("tunables") {
            builder.tunables = self.tunables(value.as_table(self.source)?)?;
        }
        if let Some(value) = top.get("types") {
            for table in self.tables(&value)? {
                builder.types.push(self.bucket_type(table)?);
            }
        }
        if let Some(value) = top.get("classes") {
            for element in value.elements(self.source)? {
                builder.classes.push(element.str(self.source)?.to_string());
            }
        }
        if let Some(value) = top.get("devices") {
            for table in self.tables(&value)? {
                builder.devices.push(self.device(table)?);
            }
        }
        if let Some(value) = top.get("buckets") {
            for table in self.tables(&value)? {
                builder.buckets.push(self.bucket(table)?);
            }
        }
        let rules = top.get("rules");
        if let Some(value) = &rules {
            for table in self.tables(value)? {
                builder.rules.push(self.rule(table)?);
            }
        }
        if let Some(value) = top.get("pools") {
            for table in self.tables(&value)? {
                builder.pools.push(self.pool(table)?);
            }
        }
        if let Some(value) = top.get("choose_args") {
            for table in self.tables(&value)? {
                builder.choose_args.push(self.choose_args(table)?);
            }
        }
        if let Some(value) = top.get("membership") {
            builder.membership = Some(self.membership(value.as_table(self.source)?)?);
        }
        top.finish(self.source)?;
        for (name, line) in std::mem::take(&mut self.located) {
            self.lines.record(Subject::Bucket(name), line);
        }
        if rules.is_none() {
            add_default_rule(&mut builder);
        }
        Ok(builder)
    }

    fn tunables(&mut self, mut table: Table<'_, '_>) -> Result<Tunables, ParseError> {
        let mut tunables = Tunables::optimal();
        if let Some(value) = table.get("profile") {
            let name = value.str(self.source)?;
            let profile = TunablesProfile::from_name(name).ok_or_else(|| {
                value.error(
                    self.source,
                    format!(
                        "unknown profile '{name}'; use optimal, jewel, hammer, firefly, bobtail \
                         or legacy"
                    ),
                )
            })?;
            tunables = profile.tunables();
        }
        for name in crate::ceph_text::TUNABLE_NAMES {
            let Some(value) = table.get(name) else { continue };
            self.lines.record(Subject::Tunable(name.to_string()), value.line(self.source));
            match name {
                "choose_local_tries" => {
                    tunables.choose_local_tries = value.int(self.source, "0 to 1000")?
                }
                "choose_local_fallback_tries" => {
                    tunables.choose_local_fallback_tries = value.int(self.source, "0 to 1000")?
                }
                "choose_total_tries" => {
                    tunables.choose_total_tries = value.int(self.source, "0 to 1000")?
                }
                "chooseleaf_descend_once" => {
                    tunables.chooseleaf_descend_once = value.int(self.source, "0 or 1")?
                }
                "chooseleaf_vary_r" => {
                    tunables.chooseleaf_vary_r = value.int(self.source, "0 to 32")?
                }
                "chooseleaf_stable" => {
                    tunables.chooseleaf_stable = value.int(self.source, "0 or 1")?
                }
                "straw_calc_version" => {
                    tunables.straw_calc_version = value.int(self.source, "0 or 1")?
                }
                _ => tunables.allowed_bucket_algs = value.int(self.source, "0 to 4294967295")?,
            }
        }
        table.finish(self.source)?;
        Ok(tunables)
    }

    fn bucket_type(&mut self, mut table: Table<'_, '_>) -> Result<BucketType, ParseError> {
        let id = table.required("id")?.int(self.source, "0 to 65535")?;
        let name = table.required("name")?.str(self.source)?.to_string();
        self.lines.record(Subject::Type(name.clone()), table.line);
        table.finish(self.source)?;
        Ok(BucketType { id: TypeId(id), name })
    }

    fn device(&mut self, mut table: Table<'_, '_>) -> Result<DeviceSpec, ParseError> {
        let id: u32 = table.required("id")?.int(self.source, "0 to 16777215")?;
        let mut device = DeviceSpec::new(id);
        if let Some(value) = table.get("name") {
            device.name = value.str(self.source)?.to_string();
        }
        let name = if device.name.is_empty() { format!("osd.{id}") } else { device.name.clone() };
        self.lines.record(Subject::Device(name), table.line);
        if let Some(value) = table.get("class") {
            device.class = Some(value.str(self.source)?.to_string());
        }
        if let Some(value) = table.get("capacity") {
            device.capacity_bytes = Some(self.bytes(value)?);
        }
        if let Some(value) = table.get("weight") {
            device.weight = Some(value.weight(self.source)?);
        }
        if let Some(value) = table.get("bandwidth") {
            device.bandwidth_mb_per_s = match value.value {
                DeValue::String(text) => parse_bandwidth(text)
                    .map_err(|reason| value.error(self.source, reason.to_string()))?,
                _ => value.int(self.source, "0 to 4294967295 MB/s")?,
            };
        }
        if let Some(value) = table.get("up") {
            device.up = value.bool(self.source)?;
        }
        if let Some(value) = table.get("in") {
            device.is_in = value.bool(self.source)?;
        }
        if let Some(value) = table.get("reweight") {
            device.reweight = value.fraction(self.source)?;
        }
        if let Some(value) = table.get("primary_affinity") {
            device.primary_affinity = value.fraction(self.source)?;
        }
        if let Some(value) = table.get("addr") {
            device.addr = Some(value.str(self.source)?.to_string());
        }
        if let Some(value) = table.get("up_from") {
            device.up_from = Some(Epoch(value.int(self.source, "an epoch, 0 or more")?));
        }
        if let Some(value) = table.get("down_at") {
            device.down_at = Some(Epoch(value.int(self.source, "an epoch, 0 or more")?));
        }
        if let Some(location) = table.get("location") {
            for (type_name, bucket) in location.entries(self.source)? {
                let bucket_name = bucket.str(self.source)?;
                self.located.push((bucket_name.to_string(), location.line(self.source)));
                device.location.push((type_name.to_string(), bucket_name.to_string()));
            }
        }
        table.finish(self.source)?;
        Ok(device)
    }

    fn bytes(&self, value: Value<'_, '_>) -> Result<u64, ParseError> {
        match value.value {
            DeValue::String(text) => {
                parse_bytes(text).map_err(|reason| value.error(self.source, reason.to_string()))
            }
            _ => value.int(self.source, "0 or more bytes"),
        }
    }

    fn item_ref(&self, value: Value<'_, '_>) -> Result<ItemRef, ParseError> {
        match value.value {
            DeValue::Integer(_) => {
                Ok(ItemRef::Id(ItemId(value.int(self.source, "a device or bucket id")?)))
            }
            DeValue::String(name) => Ok(ItemRef::Name(name.to_string())),
            _ => {
                Err(value.error(self.source, "expected an item name (a string) or id (an integer)"))
            }
        }
    }

    fn bucket(&mut self, mut table: Table<'_, '_>) -> Result<BucketSpec, ParseError> {
        let name = table.required("name")?.str(self.source)?.to_string();
        self.lines.record(Subject::Bucket(name.clone()), table.line);
        let type_name = table.required("type")?.str(self.source)?.to_string();
        let mut bucket = BucketSpec {
            id: None,
            name,
            type_name,
            alg: BucketAlg::Straw2,
            hash: 0,
            items: Vec::new(),
            class_ids: Vec::new(),
        };
        if let Some(value) = table.get("id") {
            bucket.id = Some(BucketId(value.int(self.source, "-1 to -1048576")?));
        }
        if let Some(value) = table.get("alg") {
            let alg = value.str(self.source)?;
            bucket.alg = BucketAlg::from_name(alg).ok_or_else(|| {
                value.error(
                    self.source,
                    format!(
                        "unknown algorithm '{alg}'; use straw2 (or uniform, list, tree, straw, or Optio's linear)"
                    ),
                )
            })?;
        }
        if let Some(value) = table.get("hash") {
            bucket.hash = value.int(self.source, "0 (rjenkins1)")?;
        }
        if let Some(value) = table.get("items") {
            for item in value.elements(self.source)? {
                bucket.items.push(match item.value {
                    DeValue::Table(_) => {
                        let mut inner = item.as_table(self.source)?;
                        let reference = match (inner.get("name"), inner.get("id")) {
                            (Some(value), None) | (None, Some(value)) => self.item_ref(value)?,
                            _ => {
                                return Err(item.error(
                                    self.source,
                                    "an item table needs exactly one of 'name' and 'id'",
                                ));
                            }
                        };
                        let weight = match inner.get("weight") {
                            Some(value) => Some(value.weight(self.source)?),
                            None => None,
                        };
                        inner.finish(self.source)?;
                        (reference, weight)
                    }
                    _ => (self.item_ref(item)?, None),
                });
            }
        }
        if let Some(value) = table.get("class_ids") {
            for (class, id) in value.entries(self.source)? {
                let id = id.int(self.source, "-1 to -1048576")?;
                bucket.class_ids.push((class.to_string(), BucketId(id)));
                self.lines.record(Subject::Bucket(format!("{}~{class}", bucket.name)), table.line);
            }
        }
        table.finish(self.source)?;
        Ok(bucket)
    }

    fn rule(&mut self, mut table: Table<'_, '_>) -> Result<RuleSpec, ParseError> {
        let id = table.required("id")?.int(self.source, "0 to 65535")?;
        let name = table.required("name")?.str(self.source)?.to_string();
        self.lines.record(Subject::Rule(name.clone()), table.line);
        let mut rule = RuleSpec {
            id: RuleId(id),
            name,
            kind: RuleKind::Replicated,
            min_size: 1,
            max_size: 10,
            steps: Vec::new(),
        };
        if let Some(value) = table.get("type") {
            rule.kind = match value.value {
                DeValue::String(kind) if kind == "replicated" => RuleKind::Replicated,
                DeValue::String(kind) if kind == "erasure" => RuleKind::Erasure,
                DeValue::Integer(_) => {
                    let code: u8 = value.int(self.source, "0 to 255")?;
                    if code == 4 || code == 5 {
                        return Err(ParseError::new(
                            Some(value.line(self.source)),
                            crate::steps::msr_unsupported(&format!("type {code}")),
                        ));
                    }
                    RuleKind::from_code(code)
                }
                _ => {
                    return Err(value
                        .error(self.source, "expected \"replicated\", \"erasure\" or a number"));
                }
            };
        }
        if let Some(value) = table.get("min_size") {
            rule.min_size = value.int(self.source, "0 to 4294967295")?;
        }
        if let Some(value) = table.get("max_size") {
            rule.max_size = value.int(self.source, "0 to 4294967295")?;
        }
        let steps = table.required("steps")?;
        for step in steps.elements(self.source)? {
            let text = step.str(self.source)?;
            // One word past the limit is enough for parse_step to refuse the step.
            let words: Vec<&str> = text.split_whitespace().take(STEP_WORDS_MAX + 1).collect();
            rule.steps.push(
                parse_step(&words)
                    .map_err(|kind| ParseError::new(Some(step.line(self.source)), kind))?,
            );
        }
        table.finish(self.source)?;
        Ok(rule)
    }

    fn pool(&mut self, mut table: Table<'_, '_>) -> Result<PoolSpec, ParseError> {
        let id = table.required("id")?.int(self.source, "0 to 4294967295")?;
        let name = table.required("name")?.str(self.source)?.to_string();
        self.lines.record(Subject::Pool(name.clone()), table.line);
        let (size, erasure) = self.pool_width(&mut table)?;
        let engine = match table.get("engine") {
            Some(value) => match value.str(self.source)? {
                "crush" => "crush",
                "ring" => "ring",
                "attributed" => "attributed",
                "elastic" => "elastic",
                other => {
                    return Err(value.error(
                        self.source,
                        format!(
                            "unknown engine '{other}'; use \"crush\", \"ring\", \"attributed\" or \"elastic\""
                        ),
                    ));
                }
            },
            None => "crush",
        };
        let pg_num = match table.get("pg_num") {
            Some(value) => value.int(self.source, "0 to 16777216")?,
            None if engine != "crush" => 0,
            None => {
                return Err(ParseError::value(
                    Some(table.line),
                    table.path(),
                    "missing key 'pg_num' (a crush pool needs placement groups, e.g. pg_num = 128)",
                ));
            }
        };
        let mut pool = PoolSpec {
            id: PoolId(id),
            name,
            pg_num,
            pgp_num: None,
            size,
            min_size: None,
            engine: EngineRef::Crush(CrushSpec { rule: None }),
            hashpspool: true,
            choice: ChoiceSettings::default(),
            balance: PoolBalanceSpec::default(),
            erasure,
        };
        if let Some(value) = table.get("pgp_num") {
            pool.pgp_num = Some(value.int(self.source, "0 to 16777216")?);
        }
        if let Some(value) = table.get("min_size") {
            pool.min_size = Some(value.int(self.source, "1 to size")?);
        }
        if let Some(value) = table.get("hashpspool") {
            pool.hashpspool = value.bool(self.source)?;
        }
        pool.choice = self.choice(&mut table)?;
        // Optio's balance extensions (not Ceph-compatible); the builder checks where they
        // apply.
        if let Some(value) = table.get("pps") {
            let name = value.str(self.source)?;
            pool.balance.pps = PpsGenerator::from_name(name).ok_or_else(|| {
                value.error(
                    self.source,
                    format!("unknown pps generator '{name}'; use \"ceph\" or \"congruential\""),
                )
            })?;
        }
        if let Some(value) = table.get("balance_param") {
            pool.balance.linear_param = match value.value {
                DeValue::String(text) if *text == "auto" => LinearParamSpec::Auto,
                DeValue::String(text) => {
                    return Err(value.error(
                        self.source,
                        format!(
                            "'{text}' is not a balance parameter; write a number ≥ 1.0 or \"auto\""
                        ),
                    ));
                }
                _ => {
                    let param = value.weight(self.source)?;
                    if param.0 < LINEAR_PARAM_ONE {
                        return Err(value.error(
                            self.source,
                            "the balance parameter must be at least 1.0 (a linear bucket divides the pps by it), or \"auto\"",
                        ));
                    }
                    LinearParamSpec::Fixed(param.0)
                }
            };
        }
        if let Some(value) = table.get("balanced") {
            match value.value {
                DeValue::String(text) if *text == "incremental" => {
                    pool.balance.balanced = BalanceMethod::Incremental
                }
                DeValue::String(text) => {
                    return Err(value.error(
                        self.source,
                        format!(
                            "'{text}' is not a balanced method; write true or false (the history-free method) or \"incremental\""
                        ),
                    ));
                }
                _ => {
                    if value.bool(self.source)? {
                        pool.balance.balanced = BalanceMethod::HistoryFree;
                    }
                }
            }
        }
        if let Some(value) = table.get("balance_state") {
            pool.balance.state = Some(self.balance_state(value.as_table(self.source)?)?);
        }
        let rule = table.get("rule");
        let vnode_bytes = table.get("vnode_bytes");
        let vnode_size = table.get("vnode_size");
        let failure_domain = table.get("failure_domain");
        // The attributed and elastic engines' keys, checked against the engine below.
        let mut engine_keys = Vec::new();
        for key in ATTRIBUTED_KEYS.iter().chain(ELASTIC_KEYS) {
            if let Some(value) = table.get(key) {
                engine_keys.push((*key, value));
            }
        }
        let misplaced = |key: &str, engine: &str| {
            ParseError::value(
                Some(table.line),
                table.path(),
                format!(
                    "'{key}' applies to {engine} pools only; remove it or set engine = \"{engine}\""
                ),
            )
        };
        let owner = |key: &str| {
            if ATTRIBUTED_KEYS.contains(&key) { "attributed" } else { "elastic" }
        };
        if let Some((key, _)) = engine_keys.iter().find(|(key, _)| owner(key) != engine) {
            return Err(misplaced(key, owner(key)));
        }
        if engine == "attributed" || engine == "elastic" {
            for (key, present) in [
                ("rule", rule.is_some()),
                ("vnode_bytes", vnode_bytes.is_some()),
                ("vnode_size", vnode_size.is_some()),
                ("failure_domain", failure_domain.is_some()),
            ] {
                if present {
                    return Err(ParseError::value(
                        Some(table.line),
                        table.path(),
                        format!(
                            "'{key}' does not apply to {engine} pools; remove it (see docs/map-format.md for the {engine} engine's keys)"
                        ),
                    ));
                }
            }
            pool.engine = if engine == "attributed" {
                self.attributed_engine(&engine_keys)?
            } else {
                self.elastic_engine(&engine_keys)?
            };
            table.finish(self.source)?;
            return Ok(pool);
        }
        pool.engine = if engine == "crush" {
            if vnode_bytes.is_some() {
                return Err(misplaced("vnode_bytes", "ring"));
            }
            if vnode_size.is_some() {
                return Err(misplaced("vnode_size", "ring"));
            }
            if failure_domain.is_some() {
                return Err(misplaced("failure_domain", "ring"));
            }
            let rule = match rule {
                Some(value) => Some(match value.value {
                    DeValue::Integer(_) => {
                        RuleRef::Id(RuleId(value.int(self.source, "a rule id")?))
                    }
                    _ => RuleRef::Name(value.str(self.source)?.to_string()),
                }),
                None => None,
            };
            EngineRef::Crush(CrushSpec { rule })
        } else {
            if rule.is_some() {
                return Err(misplaced("rule", "crush"));
            }
            let vnode_bytes = match (vnode_bytes, vnode_size) {
                (Some(_), Some(_)) => {
                    return Err(ParseError::value(
                        Some(table.line),
                        table.path(),
                        "give either vnode_bytes or vnode_size, not both",
                    ));
                }
                (Some(value), None) => Some(value.int(self.source, "1 or more")?),
                (None, Some(value)) => Some(self.bytes(value)?),
                (None, None) => None,
            };
            let failure_domain = match failure_domain {
                Some(value) => Some(value.str(self.source)?.to_string()),
                None => None,
            };
            EngineRef::Ring(RingSpec { vnode_bytes, failure_domain })
        };
        table.finish(self.source)?;
        Ok(pool)
    }

    /// A pool's width: `size` replicas, or `erasure = "K+M"` chunks (with an optional
    /// `stripe_unit`), whose size is K + M. The builder checks the profile's limits.
    fn pool_width(
        &self,
        table: &mut Table<'_, '_>,
    ) -> Result<(u32, Option<ErasureParams>), ParseError> {
        let Some(erasure) = table.get("erasure") else {
            if let Some(unit) = table.get("stripe_unit") {
                return Err(unit.error(
                    self.source,
                    "'stripe_unit' applies to erasure-coded pools only; remove it or add \
                     erasure = \"K+M\" (for example erasure = \"4+2\")",
                ));
            }
            return Ok((table.required("size")?.int(self.source, "1 to 32")?, None));
        };
        if let Some(size) = table.get("size") {
            return Err(size.error(
                self.source,
                "give either size (replicas) or erasure = \"K+M\" (chunks; the size is K+M), \
                 not both",
            ));
        }
        let text = erasure.str(self.source)?;
        let number = |part: &str| -> Option<u32> {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            // Only digits: a failure is an overflow, far above the builder's K+M limit.
            Some(part.parse::<u32>().unwrap_or(u32::MAX))
        };
        let (k, m) = text
            .split_once('+')
            .and_then(|(k, m)| Some((number(k)?, number(m)?)))
            .ok_or_else(|| {
                erasure.error(
                    self.source,
                    format!(
                        "erasure = \"{text}\" is not of the form \"K+M\" (K data and M parity \
                         chunks, for example \"4+2\" or \"8+3\")"
                    ),
                )
            })?;
        if k == u32::MAX || m == u32::MAX {
            return Err(erasure.error(
                self.source,
                format!(
                    "erasure = \"{text}\": K+M must be at most {ERASURE_CHUNKS_MAX} chunks; use \
                     fewer data or parity chunks"
                ),
            ));
        }
        let stripe_unit_bytes = match table.get("stripe_unit") {
            None => DEFAULT_STRIPE_UNIT_BYTES,
            Some(value) => {
                let bytes = self.bytes(value.clone())?;
                u32::try_from(bytes).map_err(|_| {
                    value.error(
                        self.source,
                        format!(
                            "a stripe unit of {bytes} bytes is too large: at most \
                             {STRIPE_UNIT_MAX_BYTES} bytes (16 MiB); the default is 64 KiB"
                        ),
                    )
                })?
            }
        };
        Ok((k.saturating_add(m), Some(ErasureParams { k, m, stripe_unit_bytes })))
    }

    /// A pool's `choices`, `policy`, `policy_weights` and `full_ratio`. Limits that depend on
    /// the pool (choices against pg_num, weights that mean nothing) are the builder's.
    fn choice(&self, table: &mut Table<'_, '_>) -> Result<ChoiceSettings, ParseError> {
        let mut choice = ChoiceSettings::default();
        if let Some(value) = table.get("choices") {
            choice.choices = value.int(self.source, &format!("1 to {CHOICES_MAX}"))?;
        }
        let weights = table.get("policy_weights");
        if let Some(value) = table.get("policy") {
            let name = value.str(self.source)?;
            choice.policy = PolicySpec::from_name(name).ok_or_else(|| {
                value.error(
                    self.source,
                    format!("unknown policy '{name}'; use one of {}", POLICY_NAMES.join(", ")),
                )
            })?;
        }
        match (&mut choice.policy, weights) {
            (PolicySpec::Composite(parsed), Some(value)) => {
                for (metric, weight) in value.entries(self.source)? {
                    let slot = parsed.get_mut(metric).ok_or_else(|| {
                        weight.error(
                            self.source,
                            format!(
                                "unknown metric '{metric}'; a composite weighs {}",
                                COMPOSITE_METRICS.join(", ")
                            ),
                        )
                    })?;
                    *slot = weight.int(self.source, &format!("0 to {COMPOSITE_WEIGHT_MAX}"))?;
                }
            }
            (PolicySpec::Composite(_), None) => {
                return Err(ParseError::value(
                    Some(table.line),
                    table.path(),
                    "policy = \"composite\" needs policy_weights, e.g. policy_weights = { space = 2, memory = 1 }",
                ));
            }
            (_, Some(value)) => {
                return Err(value.error(
                    self.source,
                    "'policy_weights' applies to policy = \"composite\" only; remove it or set that policy",
                ));
            }
            (_, None) => {}
        }
        if let Some(value) = table.get("full_ratio") {
            let ratio = value.number(self.source)?;
            let ppm = (ratio * f64::from(PPM)).round();
            if !(1.0..=f64::from(PPM)).contains(&ppm) {
                return Err(value.error(
                    self.source,
                    format!("full_ratio {ratio} must be above 0 and at most 1.0 (default 0.95)"),
                ));
            }
            choice.full_ppm = ppm as u32;
        }
        Ok(choice)
    }

    /// An attributed pool's parameters from its keys.
    fn attributed_engine(&self, keys: &[(&str, Value<'_, '_>)]) -> Result<EngineRef, ParseError> {
        let mut spec = AttributedSpec::default();
        let AttributedSpec {
            throttle_bytes,
            sector_size,
            zone_type,
            distinct_zones,
            bandwidth_tolerance_percent,
            sector_base,
            selection,
        } = &mut spec;
        for (key, value) in keys {
            match *key {
                "throttle" => *throttle_bytes = Some(self.bytes(value.clone())?),
                "sector_size" => *sector_size = Some(value.int(self.source, "1 to 65536")?),
                "zone_type" => *zone_type = Some(value.str(self.source)?.to_string()),
                "distinct_zones" => *distinct_zones = value.bool(self.source)?,
                "selection" => {
                    let name = value.str(self.source)?;
                    *selection = Some(SectorSelection::from_name(name).ok_or_else(|| {
                        value.error(
                            self.source,
                            format!("unknown selection '{name}'; use \"paper\" (the default) or \"rendezvous\""),
                        )
                    })?);
                }
                "bandwidth_tolerance" => {
                    *bandwidth_tolerance_percent =
                        Some(value.int(self.source, "0 to 10000 (percent)")?)
                }
                _ => {
                    let mut base = Vec::new();
                    for pair in value.elements(self.source)? {
                        let items = pair.elements(self.source)?;
                        let [device, count] = items.as_slice() else {
                            return Err(pair.error(
                                self.source,
                                "each entry is [device id, virtual nodes], e.g. [0, 4096]",
                            ));
                        };
                        base.push((
                            DeviceId(device.int(self.source, "a device id, 0 to 16777215")?),
                            count.int(self.source, "1 to 65536 virtual nodes")?,
                        ));
                    }
                    *sector_base = Some(base);
                }
            }
        }
        Ok(EngineRef::Attributed(spec))
    }

    /// `[pools.balance_state]`: an incremental balanced pool's state (written by Optio). Every
    /// entry is checked here, so that a damaged table is refused at its line; the builder
    /// checks the state against the pool (`balanced = "incremental"`) and the map.
    fn balance_state(&self, mut table: Table<'_, '_>) -> Result<BalanceState, ParseError> {
        let remove = "the table is written by Optio: remove it to balance the pool from scratch";
        let (table_line, path) = (table.line, table.path().to_string());
        let value = table.required("version")?;
        let version: u32 = value.int(self.source, &STATE_VERSION.to_string())?;
        if version != STATE_VERSION {
            return Err(value.error(
                self.source,
                format!(
                    "balance state version {version} is not supported (this Optio reads version {STATE_VERSION}); {remove}"
                ),
            ));
        }
        let value = table.required("classes")?;
        let classes: u64 = value.int(self.source, &CLASSES.to_string())?;
        if classes != CLASSES as u64 {
            return Err(value.error(
                self.source,
                format!("a balance state has {CLASSES} price classes, not {classes}; {remove}"),
            ));
        }
        let value = table.required("units")?;
        let units: u32 = value.int(self.source, "1 or more")?;
        if units == 0 {
            return Err(value.error(self.source, format!("units must be at least 1; {remove}")));
        }
        let value = table.required("size")?;
        let size: u32 = value.int(self.source, "1 or more")?;
        if size == 0 {
            return Err(value.error(self.source, format!("size must be at least 1; {remove}")));
        }
        let prices = |values: &[Value<'_, '_>], max: u64| -> Result<[u64; CLASSES], ParseError> {
            let mut out = [0u64; CLASSES];
            for (slot, value) in out.iter_mut().zip(values) {
                *slot = value.int(self.source, &format!("1 to {max}"))?;
                if *slot == 0 || *slot > max {
                    return Err(value.error(
                        self.source,
                        format!("price {slot} is out of range (1 to {max}); {remove}"),
                    ));
                }
            }
            Ok(out)
        };
        let mut domains: Vec<DomainState> = Vec::new();
        if let Some(list) = table.get("domains") {
            for entry in list.elements(self.source)? {
                let items = entry.elements(self.source)?;
                if items.len() != 1 + CLASSES {
                    return Err(entry.error(
                        self.source,
                        format!(
                            "a domain is [name, then {CLASSES} prices], found {} values; {remove}",
                            items.len()
                        ),
                    ));
                }
                let domain = DomainState {
                    name: items[0].str(self.source)?.to_string(),
                    prices: prices(&items[1..], DOMAIN_PRICE_MAX)?,
                };
                if let Some(last) = domains.last()
                    && last.name >= domain.name
                {
                    return Err(entry.error(
                        self.source,
                        format!(
                            "domains are sorted by name and listed once ('{}' after '{}'); {remove}",
                            domain.name, last.name
                        ),
                    ));
                }
                domains.push(domain);
            }
        }
        let mut devices: Vec<DeviceState> = Vec::new();
        if let Some(list) = table.get("devices") {
            for entry in list.elements(self.source)? {
                let items = entry.elements(self.source)?;
                if items.len() != 3 + CLASSES {
                    return Err(entry.error(
                        self.source,
                        format!(
                            "a device is [id, failure domain, weight (16.16), then {CLASSES} prices], found {} values; {remove}",
                            items.len()
                        ),
                    ));
                }
                let weight: u32 = items[2].int(self.source, "1 to 4294967295 (16.16)")?;
                if weight == 0 {
                    return Err(items[2].error(
                        self.source,
                        format!("a device in a balance state has a weight above 0; {remove}"),
                    ));
                }
                let device = DeviceState {
                    id: DeviceId(items[0].int(self.source, "a device id, 0 or more")?),
                    domain: items[1].str(self.source)?.to_string(),
                    weight,
                    prices: prices(&items[3..], PRICE_MAX)?,
                };
                if let Some(last) = devices.last()
                    && last.id >= device.id
                {
                    return Err(entry.error(
                        self.source,
                        format!(
                            "devices are sorted by id and listed once (device {} after {}); {remove}",
                            device.id.0, last.id.0
                        ),
                    ));
                }
                devices.push(device);
            }
        }
        table.finish(self.source)?;
        let state = BalanceState { units, size, devices, domains };
        // Everything `check` refuses was refused above, at its line; kept as the second place
        // the invariants are asserted.
        if let Err(why) = state.check() {
            return Err(ParseError::value(Some(table_line), &path, format!("{why}; {remove}")));
        }
        Ok(state)
    }

    /// An elastic pool's parameters from its keys.
    fn elastic_engine(&self, keys: &[(&str, Value<'_, '_>)]) -> Result<EngineRef, ParseError> {
        let (mut primaries, mut scale) = (None, None);
        for (key, value) in keys {
            match *key {
                "primaries" => {
                    primaries = Some(value.int(self.source, "1 to the number of servers")?)
                }
                _ => scale = Some(value.int(self.source, "1 to 4194304")?),
            }
        }
        Ok(EngineRef::Elastic(ElasticSpec { primaries, scale }))
    }

    /// `[membership]`: server ranks and versions.
    fn membership(&mut self, mut table: Table<'_, '_>) -> Result<MembershipSpec, ParseError> {
        self.lines.record(Subject::Membership, table.line);
        let mut membership = MembershipSpec::default();
        if let Some(value) = table.get("order") {
            for item in value.elements(self.source)? {
                membership.order.push(self.item_ref(item)?);
            }
        }
        if let Some(value) = table.get("versions") {
            let mut previous: Option<u64> = None;
            for mut version in self.tables(&value)? {
                let number = match version.get("version") {
                    Some(value) => Some(value.int(self.source, "0 or more")?),
                    None => None,
                };
                let effective =
                    number.unwrap_or_else(|| previous.map_or(1, |p| p.saturating_add(1)));
                previous = Some(effective);
                self.lines.record(Subject::Version(effective), version.line);
                let active = version.required("active")?;
                let active = match active.value {
                    DeValue::String(word) if word == "all" => ActiveSpec::All,
                    DeValue::Integer(_) => ActiveSpec::FirstRanks(
                        active.int(self.source, "0 to the number of servers")?,
                    ),
                    DeValue::Array(_) => {
                        let mut devices = Vec::new();
                        for item in active.elements(self.source)? {
                            devices.push(self.item_ref(item)?);
                        }
                        ActiveSpec::Devices(devices)
                    }
                    _ => {
                        return Err(active.error(
                            self.source,
                            "expected \"all\", a number of ranks (active = 8: ranks 1 to 8) or a list of devices",
                        ));
                    }
                };
                version.finish(self.source)?;
                membership.versions.push(VersionSpec { version: number, active });
            }
        }
        table.finish(self.source)?;
        Ok(membership)
    }

    fn choose_args(
        &mut self,
        mut table: Table<'_, '_>,
    ) -> Result<(i64, Vec<ChooseArgSpec>), ParseError> {
        let id: i64 =
            table.required("id")?.int(self.source, "a pool id, or -1 for the default set")?;
        self.lines.record(Subject::ChooseArgs(id), table.line);
        let mut args = Vec::new();
        if let Some(value) = table.get("buckets") {
            for mut entry in self.tables(&value)? {
                let bucket = self.item_ref(entry.required("bucket")?)?;
                let mut arg = ChooseArgSpec { bucket, ids: None, weight_set: Vec::new() };
                if let Some(value) = entry.get("ids") {
                    let mut ids = Vec::new();
                    for element in value.elements(self.source)? {
                        ids.push(element.int(self.source, "a 32-bit id")?);
                    }
                    arg.ids = Some(ids);
                }
                if let Some(value) = entry.get("weight_set") {
                    for position in value.elements(self.source)? {
                        let mut weights = Vec::new();
                        for weight in position.elements(self.source)? {
                            weights.push(weight.weight(self.source)?);
                        }
                        arg.weight_set.push(weights);
                    }
                }
                entry.finish(self.source)?;
                args.push(arg);
            }
        }
        table.finish(self.source)?;
        Ok((id, args))
    }
}

/// A map with located devices and no `rules` key gets Ceph's usual first rule:
/// `replicated_rule`: take the root of the first located device, choose leaves across the
/// lowest bucket type that locations use (`host` in the usual case), emit.
fn add_default_rule(builder: &mut ClusterMapBuilder) {
    let Some(first) = builder.devices.iter().find(|d| !d.location.is_empty()) else { return };
    let types = if builder.types.is_empty() {
        optio_placement::builder::DEFAULT_TYPES
            .iter()
            .map(|(id, name)| BucketType { id: TypeId(*id), name: name.to_string() })
            .collect()
    } else {
        builder.types.clone()
    };
    let type_id = |name: &str| types.iter().find(|t| t.name == name).map(|t| t.id);
    let Some(root_type) = types.iter().map(|t| t.id).max() else { return };
    let root = first
        .location
        .iter()
        .find(|(t, _)| type_id(t) == Some(root_type))
        .map_or(optio_placement::builder::DEFAULT_ROOT.to_string(), |(_, name)| name.clone());
    let lowest = builder
        .devices
        .iter()
        .flat_map(|d| d.location.iter())
        .filter_map(|(t, _)| type_id(t).map(|id| (id, t.clone())))
        .filter(|(id, _)| *id != root_type && id.0 > 0)
        .min();
    let failure_domain = match lowest {
        Some((_, name)) => name,
        None => return,
    };
    builder.rules.push(RuleSpec {
        id: RuleId(0),
        name: DEFAULT_RULE_NAME.to_string(),
        kind: RuleKind::Replicated,
        min_size: 1,
        max_size: 10,
        steps: vec![
            StepSpec::Take { item: ItemRef::Name(root), class: None },
            StepSpec::Choose { leaf: true, indep: false, num: 0, type_name: failure_domain },
            StepSpec::Emit,
        ],
    });
}
