//! Rule steps as words (`take default class ssd`, `chooseleaf firstn 0 type host`, `emit`),
//! shared by the Ceph text format and Optio's TOML, which writes steps the same way.

use optio_placement::{Bucket, ClusterMap, ItemRef, Step, StepSpec, TypeId};

use crate::error::ParseErrorKind;

/// Most words one step may have (`take NAME class CLASS` has 4); longer steps are errors.
pub(crate) const STEP_WORDS_MAX: usize = 8;

/// Every step keyword, for error messages.
const STEP_KEYWORDS: &str = "take, choose, chooseleaf, emit, noop, set_choose_tries, \
     set_chooseleaf_tries, set_choose_local_tries, set_choose_local_fallback_tries, \
     set_chooseleaf_vary_r or set_chooseleaf_stable";

fn syntax(expected: impl Into<String>, found: Option<&str>) -> ParseErrorKind {
    ParseErrorKind::Syntax {
        expected: expected.into(),
        found: match found {
            Some(word) => format!("'{word}'"),
            None => "the end of the step".to_string(),
        },
    }
}

fn integer(word: Option<&str>, what: &str) -> Result<i32, ParseErrorKind> {
    let word = word.ok_or_else(|| syntax(format!("{what} (an integer)"), None))?;
    word.parse::<i32>().map_err(|_| syntax(format!("{what} (an integer)"), Some(word)))
}

fn non_negative(word: Option<&str>, what: &str) -> Result<i32, ParseErrorKind> {
    let value = integer(word, what)?;
    if value < 0 {
        return Err(ParseErrorKind::Value {
            field: what.to_string(),
            reason: format!("{value} is negative; use 0 or more"),
        });
    }
    Ok(value)
}

fn name<'a>(word: Option<&'a str>, what: &str) -> Result<&'a str, ParseErrorKind> {
    match word {
        Some(word) if !matches!(word, "{" | "}" | "[" | "]") => Ok(word),
        other => Err(syntax(what, other)),
    }
}

/// Parses one step from its words (without the leading `step` of Ceph text).
pub(crate) fn parse_step(words: &[&str]) -> Result<StepSpec, ParseErrorKind> {
    let mut words = words.iter().copied();
    let keyword = words.next().ok_or_else(|| syntax(format!("a step: {STEP_KEYWORDS}"), None))?;
    let set = |step: fn(i32) -> Step, words: &mut dyn Iterator<Item = &str>| {
        non_negative(words.next(), keyword).map(|n| StepSpec::Set(step(n)))
    };
    let step = match keyword {
        "take" => {
            let item = name(words.next(), "the name of the bucket to take")?;
            let class = match words.next() {
                None => None,
                Some("class") => Some(name(words.next(), "a device class after 'class'")?),
                Some(other) => return Err(syntax("'class' or the end of the step", Some(other))),
            };
            StepSpec::Take {
                item: ItemRef::Name(item.to_string()),
                class: class.map(str::to_string),
            }
        }
        "choose" | "chooseleaf" => {
            let indep = match words.next() {
                Some("firstn") => false,
                Some("indep") => true,
                Some("msr") => return Err(msr_unsupported("choose msr")),
                other => return Err(syntax("'firstn' or 'indep'", other)),
            };
            let num = integer(words.next(), "the number of items to choose")?;
            match words.next() {
                Some("type") => {}
                other => return Err(syntax("'type'", other)),
            }
            let type_name = name(words.next(), "a bucket type name after 'type'")?;
            StepSpec::Choose {
                leaf: keyword == "chooseleaf",
                indep,
                num,
                type_name: type_name.to_string(),
            }
        }
        "emit" => StepSpec::Emit,
        "noop" => StepSpec::Noop,
        "set_choose_tries" => set(Step::SetChooseTries, &mut words)?,
        "set_chooseleaf_tries" => set(Step::SetChooseleafTries, &mut words)?,
        "set_choose_local_tries" => set(Step::SetChooseLocalTries, &mut words)?,
        "set_choose_local_fallback_tries" => set(Step::SetChooseLocalFallbackTries, &mut words)?,
        "set_chooseleaf_vary_r" => set(Step::SetChooseleafVaryR, &mut words)?,
        "set_chooseleaf_stable" => set(Step::SetChooseleafStable, &mut words)?,
        "set_msr_descents" | "set_msr_collision_tries" | "choose_msr" => {
            return Err(msr_unsupported(keyword));
        }
        other => return Err(syntax(format!("a step: {STEP_KEYWORDS}"), Some(other))),
    };
    match words.next() {
        None => Ok(step),
        Some(extra) => Err(syntax("the end of the step", Some(extra))),
    }
}

/// The error for Ceph 19's MSR rules and steps.
pub(crate) fn msr_unsupported(what: &str) -> ParseErrorKind {
    ParseErrorKind::Unsupported {
        feature: format!("'{what}' (an MSR rule: multi-step retry, Ceph 19+)"),
        hint: "rewrite the rule with 'choose'/'chooseleaf firstn|indep' steps".to_string(),
    }
}

/// Writes one step as words, naming items and types as `crushtool -d` does (a per-class
/// shadow bucket as `ORIGINAL class CLASS`).
pub(crate) fn format_step(map: &ClusterMap, step: &Step) -> String {
    let type_name = |id: &TypeId| match map.type_name(*id) {
        Some(name) => name.to_string(),
        None if id.0 == 0 => "device".to_string(),
        None => format!("type{}", id.0),
    };
    let choose = |verb: &str, mode: &str, num: &i32, id: &TypeId| {
        format!("{verb} {mode} {num} type {}", type_name(id))
    };
    match step {
        Step::Noop => "noop".to_string(),
        Step::Take(item) => match item.bucket().and_then(|b| map.bucket(b)) {
            Some(Bucket { shadow_of: Some((original, class)), .. }) => {
                format!("take {} class {class}", item_name(map, original.0))
            }
            _ => format!("take {}", item_name(map, item.0)),
        },
        Step::ChooseFirstn { num, type_id } => choose("choose", "firstn", num, type_id),
        Step::ChooseIndep { num, type_id } => choose("choose", "indep", num, type_id),
        Step::ChooseleafFirstn { num, type_id } => choose("chooseleaf", "firstn", num, type_id),
        Step::ChooseleafIndep { num, type_id } => choose("chooseleaf", "indep", num, type_id),
        Step::Emit => "emit".to_string(),
        Step::SetChooseTries(n) => format!("set_choose_tries {n}"),
        Step::SetChooseleafTries(n) => format!("set_chooseleaf_tries {n}"),
        Step::SetChooseLocalTries(n) => format!("set_choose_local_tries {n}"),
        Step::SetChooseLocalFallbackTries(n) => format!("set_choose_local_fallback_tries {n}"),
        Step::SetChooseleafVaryR(n) => format!("set_chooseleaf_vary_r {n}"),
        Step::SetChooseleafStable(n) => format!("set_chooseleaf_stable {n}"),
    }
}

/// An item's name as `crushtool -d` prints it (`device7`/`bucket3` when it has none).
pub(crate) fn item_name(map: &ClusterMap, id: i32) -> String {
    match map.item_name(optio_placement::ItemId(id)) {
        Some(name) => name.to_string(),
        None if id >= 0 => format!("device{id}"),
        None => format!("bucket{}", -1 - i64::from(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<&str> {
        text.split_whitespace().collect()
    }

    #[test]
    fn parses_every_step_form() {
        assert_eq!(
            parse_step(&words("take default class ssd")),
            Ok(StepSpec::Take { item: ItemRef::Name("default".into()), class: Some("ssd".into()) })
        );
        assert_eq!(
            parse_step(&words("chooseleaf indep -1 type host")),
            Ok(StepSpec::Choose { leaf: true, indep: true, num: -1, type_name: "host".into() })
        );
        assert_eq!(parse_step(&words("emit")), Ok(StepSpec::Emit));
        assert_eq!(
            parse_step(&words("set_chooseleaf_vary_r 1")),
            Ok(StepSpec::Set(Step::SetChooseleafVaryR(1)))
        );
    }

    #[test]
    fn refuses_malformed_steps() {
        for bad in [
            "",
            "take",
            "take a class",
            "take a b",
            "choose firstn x type host",
            "choose sometimes 1 type host",
            "chooseleaf firstn 0 host",
            "chooseleaf firstn 0 type",
            "emit now",
            "set_choose_tries -1",
            "set_choose_tries",
            "jump",
        ] {
            assert!(parse_step(&words(bad)).is_err(), "{bad:?}");
        }
        assert!(matches!(
            parse_step(&words("set_msr_descents 3")),
            Err(ParseErrorKind::Unsupported { .. })
        ));
    }
}
