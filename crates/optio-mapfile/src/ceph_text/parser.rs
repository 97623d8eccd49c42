//! Recursive-descent parser of the crushtool text format into a [`Document`]: the
//! declarations as written, with their lines, before any name is resolved.
//!
//! The grammar is crushtool's (`src/crush/grammar.h`), read a little more liberally: the lines
//! inside a bucket or a rule may come in any order, a bucket's `alg` defaults to straw2, a
//! rule's `min_size`/`max_size` default to 1/10 and its type may be a number, and `step noop`
//! (which `crushtool -d` writes but cannot read) is accepted.

use std::iter::Peekable;

use optio_placement::{BucketAlg, RuleKind, StepSpec, Weight};

use super::lexer::{Lexer, Token};
use crate::error::ParseError;
use crate::fixed::weight_from_text;
use crate::steps::{STEP_WORDS_MAX, msr_unsupported, parse_step};

/// A `tunable NAME VALUE` line.
pub(crate) struct TunableLine {
    pub(crate) name: String,
    pub(crate) value: u32,
    pub(crate) line: usize,
}

/// A `device ID NAME [class CLASS]` line.
pub(crate) struct DeviceLine {
    pub(crate) id: u32,
    pub(crate) name: String,
    pub(crate) class: Option<String>,
    pub(crate) line: usize,
}

/// A `type ID NAME` line.
pub(crate) struct TypeLine {
    pub(crate) id: u16,
    pub(crate) name: String,
    pub(crate) line: usize,
}

/// An `item NAME [weight W] [pos P]` line of a bucket.
pub(crate) struct ItemLine {
    pub(crate) name: String,
    pub(crate) weight: Option<Weight>,
    pub(crate) pos: Option<u32>,
    pub(crate) line: usize,
}

/// A `TYPE NAME { … }` bucket.
pub(crate) struct BucketDef {
    pub(crate) type_name: String,
    pub(crate) name: String,
    pub(crate) line: usize,
    /// `id N`.
    pub(crate) id: Option<i32>,
    /// `id N class C` lines.
    pub(crate) class_ids: Vec<(String, i32, usize)>,
    /// The id on the bucket's first line, if its first line is an `id` line (crushtool reserves
    /// exactly these before numbering buckets without ids).
    pub(crate) first_line_id: Option<i32>,
    pub(crate) alg: BucketAlg,
    pub(crate) hash: u8,
    pub(crate) items: Vec<ItemLine>,
}

/// A `rule [NAME] { … }`.
pub(crate) struct RuleDef {
    pub(crate) name: Option<String>,
    pub(crate) line: usize,
    pub(crate) id: u32,
    pub(crate) kind: RuleKind,
    pub(crate) min_size: u32,
    pub(crate) max_size: u32,
    pub(crate) steps: Vec<(StepSpec, usize)>,
}

/// One `{ bucket_id N … }` of a choose_args block.
pub(crate) struct ChooseArgDef {
    pub(crate) bucket_id: i32,
    pub(crate) weight_set: Vec<Vec<Weight>>,
    pub(crate) ids: Option<Vec<i32>>,
}

/// A `choose_args ID { … }` block.
pub(crate) struct ChooseArgsDef {
    pub(crate) id: i64,
    pub(crate) line: usize,
    pub(crate) args: Vec<ChooseArgDef>,
}

/// Everything a text map declares, in file order.
#[derive(Default)]
pub(crate) struct Document {
    pub(crate) tunables: Vec<TunableLine>,
    pub(crate) devices: Vec<DeviceLine>,
    pub(crate) types: Vec<TypeLine>,
    pub(crate) buckets: Vec<BucketDef>,
    pub(crate) rules: Vec<RuleDef>,
    pub(crate) choose_args: Vec<ChooseArgsDef>,
}

struct Parser<'a> {
    tokens: Peekable<Lexer<'a>>,
    /// The line of the last token taken (for errors at the end of the text).
    line: usize,
}

fn describe(token: Option<Token<'_>>) -> String {
    match token {
        Some(token) => format!("'{}'", token.text),
        None => "the end of the file".to_string(),
    }
}

fn is_word(text: &str) -> bool {
    !matches!(text, "{" | "}" | "[" | "]")
}

impl<'a> Parser<'a> {
    fn peek(&mut self) -> Option<Token<'a>> {
        self.tokens.peek().copied()
    }

    fn next(&mut self) -> Option<Token<'a>> {
        let token = self.tokens.next();
        if let Some(token) = token {
            self.line = token.line;
        }
        token
    }

    fn error_at(&self, token: Option<Token<'_>>, expected: impl Into<String>) -> ParseError {
        let line = token.map_or(self.line, |t| t.line);
        ParseError::syntax(Some(line), expected, describe(token))
    }

    fn expect(&mut self, text: &str, context: &str) -> Result<Token<'a>, ParseError> {
        match self.next() {
            Some(token) if token.text == text => Ok(token),
            other => Err(self.error_at(other, format!("'{text}' {context}"))),
        }
    }

    fn word(&mut self, what: &str) -> Result<Token<'a>, ParseError> {
        match self.next() {
            Some(token) if is_word(token.text) => Ok(token),
            other => Err(self.error_at(other, what.to_string())),
        }
    }

    fn number<T: std::str::FromStr>(&mut self, what: &str, range: &str) -> Result<T, ParseError> {
        let token = self.word(what)?;
        parse_number(token, what, range)
    }

    fn weight(&mut self, what: &str) -> Result<Weight, ParseError> {
        let token = self.word(what)?;
        weight_from_text(token.text).map_err(|error| {
            ParseError::value(
                Some(token.line),
                what,
                format!("'{}': {}", token.text, error.reason()),
            )
        })
    }

    fn document(&mut self) -> Result<Document, ParseError> {
        let mut document = Document::default();
        while let Some(token) = self.next() {
            // A bucket whose type is named like a keyword (`device d {`): crushtool's grammar
            // backtracks to a bucket there, since keyword lines never have `{` third.
            if matches!(token.text, "tunable" | "device" | "type") && self.third_is_brace() {
                document.buckets.push(self.bucket(token)?);
                continue;
            }
            match token.text {
                "tunable" => {
                    let name = self.word("a tunable name")?.text.to_string();
                    let value = self.number("the tunable's value", "0 to 4294967295")?;
                    document.tunables.push(TunableLine { name, value, line: token.line });
                }
                "device" => {
                    let id = self.number("a device id", "0 to 16777215")?;
                    let name = self.word("a device name")?.text.to_string();
                    let class = if self.peek().is_some_and(|t| t.text == "class") {
                        self.next();
                        Some(self.word("a device class after 'class'")?.text.to_string())
                    } else {
                        None
                    };
                    document.devices.push(DeviceLine { id, name, class, line: token.line });
                }
                "type" => {
                    let id = self.number("a type id", "0 to 65535")?;
                    let name = self.word("a type name")?.text.to_string();
                    document.types.push(TypeLine { id, name, line: token.line });
                }
                "rule" => document.rules.push(self.rule(token)?),
                "choose_args" => document.choose_args.push(self.choose_args(token)?),
                text if is_word(text) => document.buckets.push(self.bucket(token)?),
                _ => {
                    return Err(self.error_at(
                        Some(token),
                        "a 'tunable', 'device', 'type', bucket ('TYPE NAME {'), 'rule' or \
                         'choose_args' definition",
                    ));
                }
            }
        }
        Ok(document)
    }

    /// Whether the token after the next one is `{`.
    fn third_is_brace(&self) -> bool {
        let mut ahead = self.tokens.clone();
        ahead.next();
        ahead.next().is_some_and(|t| t.text == "{")
    }

    fn bucket(&mut self, type_token: Token<'a>) -> Result<BucketDef, ParseError> {
        let name = match self.next() {
            Some(token) if is_word(token.text) => token.text.to_string(),
            other => {
                return Err(self.error_at(
                    other,
                    format!(
                        "a bucket name after '{}' (a bucket is 'TYPE NAME {{ … }}'; other \
                         lines start with 'tunable', 'device', 'type', 'rule' or 'choose_args')",
                        type_token.text
                    ),
                ));
            }
        };
        self.expect("{", "to open the bucket")?;
        let mut bucket = BucketDef {
            type_name: type_token.text.to_string(),
            name,
            line: type_token.line,
            id: None,
            class_ids: Vec::new(),
            first_line_id: None,
            alg: BucketAlg::Straw2,
            hash: 0,
            items: Vec::new(),
        };
        let mut alg_line: Option<usize> = None;
        let mut first = true;
        loop {
            let token = self.next();
            let Some(token) = token else {
                return Err(self.error_at(None, format!("'}}' to close bucket '{}'", bucket.name)));
            };
            match token.text {
                "}" => break,
                "id" => {
                    let id: i32 = self.number("a bucket id", "-1 to -1048576")?;
                    if id >= 0 {
                        return Err(ParseError::value(
                            Some(token.line),
                            "id",
                            format!("bucket ids are negative (-1, -2, …); {id} is not"),
                        ));
                    }
                    if first {
                        bucket.first_line_id = Some(id);
                    }
                    if self.peek().is_some_and(|t| t.text == "class") {
                        self.next();
                        let class = self.word("a device class after 'class'")?.text.to_string();
                        if bucket.class_ids.iter().any(|(c, _, _)| *c == class) {
                            return Err(ParseError::value(
                                Some(token.line),
                                "id … class",
                                format!(
                                    "bucket '{}' has two ids for class '{class}'; keep one",
                                    bucket.name
                                ),
                            ));
                        }
                        bucket.class_ids.push((class, id, token.line));
                    } else if bucket.id.is_some() {
                        return Err(ParseError::value(
                            Some(token.line),
                            "id",
                            format!("bucket '{}' has two ids; keep one", bucket.name),
                        ));
                    } else {
                        bucket.id = Some(id);
                    }
                }
                "alg" => {
                    let alg = self.word("a bucket algorithm")?;
                    if alg_line.is_some() {
                        return Err(ParseError::value(
                            Some(token.line),
                            "alg",
                            format!("bucket '{}' has two 'alg' lines; keep one", bucket.name),
                        ));
                    }
                    // Ceph knows no `linear` buckets (an Optio extension): refused like any
                    // unknown name; Optio TOML can hold them.
                    bucket.alg = BucketAlg::from_name(alg.text)
                        .filter(|a| a.is_ceph())
                        .ok_or_else(|| {
                            ParseError::value(
                                Some(alg.line),
                                "alg",
                                format!(
                                    "unknown bucket algorithm '{}'; use straw2 (or uniform, list, \
                                 tree, straw)",
                                    alg.text
                                ),
                            )
                        })?;
                    alg_line = Some(token.line);
                }
                "hash" => {
                    let hash = self.word("a hash (0 or rjenkins1)")?;
                    bucket.hash = match hash.text {
                        "rjenkins1" => 0,
                        text => parse_number(hash, "hash", "0 (rjenkins1)").map_err(|_| {
                            ParseError::value(
                                Some(hash.line),
                                "hash",
                                format!("unknown hash '{text}'; use 0 (rjenkins1)"),
                            )
                        })?,
                    };
                }
                "item" => {
                    let name = self.word("an item name")?.text.to_string();
                    let mut item = ItemLine { name, weight: None, pos: None, line: token.line };
                    while let Some(next) = self.peek() {
                        match next.text {
                            "weight" if item.weight.is_none() => {
                                self.next();
                                item.weight = Some(self.weight("the item's weight")?);
                            }
                            "pos" if item.pos.is_none() => {
                                self.next();
                                item.pos =
                                    Some(self.number("the item's position", "0 to 1048575")?);
                            }
                            _ => break,
                        }
                    }
                    bucket.items.push(item);
                }
                _ => {
                    return Err(self.error_at(
                        Some(token),
                        format!("'id', 'alg', 'hash', 'item' or '}}' in bucket '{}'", bucket.name),
                    ));
                }
            }
            first = false;
        }
        Ok(bucket)
    }

    fn rule(&mut self, rule_token: Token<'a>) -> Result<RuleDef, ParseError> {
        let name = match self.next() {
            Some(token) if token.text == "{" => None,
            Some(token) if is_word(token.text) => {
                self.expect("{", "to open the rule")?;
                Some(token.text.to_string())
            }
            other => return Err(self.error_at(other, "a rule name or '{'")),
        };
        let mut id: Option<u32> = None;
        let mut kind: Option<RuleKind> = None;
        let mut min_size: Option<u32> = None;
        let mut max_size: Option<u32> = None;
        let mut steps = Vec::new();
        let label = name.clone().unwrap_or_default();
        loop {
            let Some(token) = self.next() else {
                return Err(self.error_at(None, format!("'}}' to close rule '{label}'")));
            };
            let duplicate = |what: &str| {
                ParseError::value(
                    Some(token.line),
                    what,
                    format!("rule '{label}' sets '{what}' twice; keep one"),
                )
            };
            match token.text {
                "}" => break,
                "id" | "ruleset" => {
                    if id.is_some() {
                        return Err(duplicate("id"));
                    }
                    id = Some(self.number("the rule id", "0 to 65535")?);
                }
                "type" => {
                    if kind.is_some() {
                        return Err(duplicate("type"));
                    }
                    let word = self.word("'replicated' or 'erasure'")?;
                    kind = Some(match word.text {
                        "replicated" => RuleKind::Replicated,
                        "erasure" => RuleKind::Erasure,
                        "msr_firstn" | "msr_indep" => {
                            return Err(ParseError::new(
                                Some(word.line),
                                msr_unsupported(&format!("type {}", word.text)),
                            ));
                        }
                        _ => {
                            let code: u8 =
                                parse_number(word, "rule type", "replicated, erasure or 0 to 255")?;
                            if code == 4 || code == 5 {
                                return Err(ParseError::new(
                                    Some(word.line),
                                    msr_unsupported(&format!("type {code}")),
                                ));
                            }
                            RuleKind::from_code(code)
                        }
                    });
                }
                "min_size" => {
                    if min_size.is_some() {
                        return Err(duplicate("min_size"));
                    }
                    min_size = Some(self.number("min_size", "0 to 4294967295")?);
                }
                "max_size" => {
                    if max_size.is_some() {
                        return Err(duplicate("max_size"));
                    }
                    max_size = Some(self.number("max_size", "0 to 4294967295")?);
                }
                "step" => {
                    let mut words: Vec<&str> = Vec::with_capacity(4);
                    while let Some(next) = self.peek() {
                        if next.text == "step" || !is_word(next.text) {
                            break;
                        }
                        if words.len() == STEP_WORDS_MAX {
                            return Err(self.error_at(Some(next), "the end of the step"));
                        }
                        words.push(next.text);
                        self.next();
                    }
                    let step = parse_step(&words)
                        .map_err(|kind| ParseError::new(Some(token.line), kind))?;
                    steps.push((step, token.line));
                }
                _ => {
                    return Err(self.error_at(
                        Some(token),
                        format!(
                            "'id', 'type', 'min_size', 'max_size', 'step' or '}}' in rule '{label}'"
                        ),
                    ));
                }
            }
        }
        let id = id.ok_or_else(|| {
            ParseError::value(
                Some(rule_token.line),
                "id",
                format!("rule '{label}' has no 'id' line; add 'id N'"),
            )
        })?;
        let kind = kind.ok_or_else(|| {
            ParseError::value(
                Some(rule_token.line),
                "type",
                format!(
                    "rule '{label}' has no 'type' line; add 'type replicated' or 'type erasure'"
                ),
            )
        })?;
        Ok(RuleDef {
            name,
            line: rule_token.line,
            id,
            kind,
            min_size: min_size.unwrap_or(1),
            max_size: max_size.unwrap_or(10),
            steps,
        })
    }

    fn choose_args(&mut self, block_token: Token<'a>) -> Result<ChooseArgsDef, ParseError> {
        let id_token =
            self.word("a choose_args id (a pool id, or 18446744073709551615 for the default set)")?;
        let id = crate::ceph_json::parse_choose_args_id(id_token.text).ok_or_else(|| {
            ParseError::value(
                Some(id_token.line),
                "choose_args",
                format!(
                    "'{}' is not a choose_args id; use a pool id, or -1 (written \
                     18446744073709551615) for the default set",
                    id_token.text
                ),
            )
        })?;
        self.expect("{", "to open the choose_args block")?;
        let mut args = Vec::new();
        loop {
            match self.next() {
                Some(token) if token.text == "}" => break,
                Some(token) if token.text == "{" => args.push(self.choose_arg()?),
                other => {
                    return Err(self.error_at(other, "'{' to start a bucket's choose_args, or '}'"));
                }
            }
        }
        Ok(ChooseArgsDef { id, line: block_token.line, args })
    }

    fn choose_arg(&mut self) -> Result<ChooseArgDef, ParseError> {
        self.expect("bucket_id", "to start a bucket's choose_args")?;
        let bucket_id: i32 = self.number("a bucket id", "-1 to -1048576")?;
        let mut arg = ChooseArgDef { bucket_id, weight_set: Vec::new(), ids: None };
        let mut seen_weight_set = false;
        loop {
            let Some(token) = self.next() else {
                return Err(self.error_at(None, "'}' to close the bucket's choose_args"));
            };
            match token.text {
                "}" => break,
                "weight_set" if !seen_weight_set => {
                    seen_weight_set = true;
                    self.expect("[", "after 'weight_set'")?;
                    loop {
                        match self.next() {
                            Some(t) if t.text == "]" => break,
                            Some(t) if t.text == "[" => {
                                let mut weights = Vec::new();
                                loop {
                                    match self.peek() {
                                        Some(t) if t.text == "]" => {
                                            self.next();
                                            break;
                                        }
                                        _ => weights.push(self.weight("a weight_set weight")?),
                                    }
                                }
                                arg.weight_set.push(weights);
                            }
                            other => {
                                return Err(self
                                    .error_at(other, "'[' to start a position's weights, or ']'"));
                            }
                        }
                    }
                }
                "ids" if arg.ids.is_none() => {
                    self.expect("[", "after 'ids'")?;
                    let mut ids = Vec::new();
                    loop {
                        match self.peek() {
                            Some(t) if t.text == "]" => {
                                self.next();
                                break;
                            }
                            _ => ids.push(self.number("an id", "-2147483648 to 2147483647")?),
                        }
                    }
                    arg.ids = Some(ids);
                }
                _ => {
                    return Err(self.error_at(Some(token), "'weight_set', 'ids' or '}'"));
                }
            }
        }
        Ok(arg)
    }
}

fn parse_number<T: std::str::FromStr>(
    token: Token<'_>,
    what: &str,
    range: &str,
) -> Result<T, ParseError> {
    token.text.parse::<T>().map_err(|_| {
        let is_integer = {
            let digits = token.text.strip_prefix('-').unwrap_or(token.text);
            !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
        };
        if is_integer {
            ParseError::value(
                Some(token.line),
                what,
                format!("{} is out of range ({range})", token.text),
            )
        } else {
            ParseError::syntax(
                Some(token.line),
                format!("{what} (an integer)"),
                format!("'{}'", token.text),
            )
        }
    })
}

/// Parses the declarations of a text map.
pub(crate) fn parse_document(text: &str) -> Result<Document, ParseError> {
    let mut parser = Parser { tokens: Lexer::new(text).peekable(), line: 1 };
    let document = parser.document();
    document.map_err(|mut error| {
        if error.line.is_none() {
            error.line = Some(parser.line);
        }
        error
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("device 0 osd.0\ndevice x osd.1\n", 2),
            ("device 0 osd.0\n\nhost h0 {\n id -1\n alg straw9\n}\n", 5),
            ("host h0 {\n id -1\n item osd.0 weight abc\n}\n", 3),
            ("host h0 {\n id -1\n", 2),
            ("rule r {\n id 0\n type replicated\n step chooseleaf firstn 0 host\n}\n", 4),
            ("rule r {\n type replicated\n step emit\n}\n", 1),
            ("}\n", 1),
            ("tunable choose_total_tries -5\n", 1),
        ];
        for (text, line) in cases {
            let error = parse_document(text).err().expect(text);
            assert_eq!(error.line, Some(line), "{text}: {error}");
        }
    }
}
