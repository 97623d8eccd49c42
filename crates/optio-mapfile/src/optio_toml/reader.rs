//! Typed access to a spanned TOML document, with errors that name the line, the key and what
//! to write instead, and that refuse unknown keys (a typo must not silently become a default).

use std::ops::Range;

use optio_placement::Weight;
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::error::ParseError;

/// Converts byte offsets to 1-based lines.
pub(crate) struct Source {
    line_starts: Vec<usize>,
}

impl Source {
    pub(crate) fn new(text: &str) -> Source {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(at, _)| at + 1));
        Source { line_starts }
    }

    pub(crate) fn line(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|start| *start <= offset).max(1)
    }
}

/// A TOML value with where it is and what it is (for messages: `devices[3].weight`).
#[derive(Clone)]
pub(crate) struct Value<'t, 'i> {
    pub(crate) value: &'t DeValue<'i>,
    pub(crate) span: Range<usize>,
    pub(crate) path: String,
}

/// The shape of a value, for "expected …, found …" messages.
fn kind(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

impl<'t, 'i> Value<'t, 'i> {
    pub(crate) fn new(spanned: &'t Spanned<DeValue<'i>>, path: String) -> Value<'t, 'i> {
        Value { value: spanned.get_ref(), span: spanned.span(), path }
    }

    pub(crate) fn error(&self, source: &Source, reason: impl Into<String>) -> ParseError {
        ParseError::value(Some(source.line(self.span.start)), &self.path, reason)
    }

    /// The elements of an array, each with its path.
    pub(crate) fn elements(&self, source: &Source) -> Result<Vec<Value<'t, 'i>>, ParseError> {
        Ok(self
            .array(source)?
            .iter()
            .enumerate()
            .map(|(index, element)| Value::new(element, format!("{}[{index}]", self.path)))
            .collect())
    }

    /// The entries of a table, each with its key and path.
    pub(crate) fn entries(
        &self,
        source: &Source,
    ) -> Result<Vec<(&'t str, Value<'t, 'i>)>, ParseError> {
        Ok(self
            .table(source)?
            .iter()
            .map(|(key, value)| {
                let key: &'t str = key.get_ref();
                (key, Value::new(value, format!("{}.{key}", self.path)))
            })
            .collect())
    }

    /// The value as a table whose keys are checked.
    pub(crate) fn as_table(&self, source: &Source) -> Result<Table<'t, 'i>, ParseError> {
        Ok(Table::new(self.table(source)?, self.path.clone(), self.line(source)))
    }

    fn expected(&self, source: &Source, what: &str) -> ParseError {
        self.error(source, format!("expected {what}, found {}", kind(self.value)))
    }

    pub(crate) fn integer(&self, source: &Source) -> Result<i128, ParseError> {
        match self.value {
            DeValue::Integer(integer) => i128::from_str_radix(integer.as_str(), integer.radix())
                .map_err(|_| self.error(source, format!("{integer} is out of range"))),
            _ => Err(self.expected(source, "an integer")),
        }
    }

    /// An integer that must fit `T`; `range` says which values are allowed.
    pub(crate) fn int<T: TryFrom<i128>>(
        &self,
        source: &Source,
        range: &str,
    ) -> Result<T, ParseError> {
        let value = self.integer(source)?;
        T::try_from(value)
            .map_err(|_| self.error(source, format!("{value} is out of range ({range})")))
    }

    pub(crate) fn str(&self, source: &Source) -> Result<&'t str, ParseError> {
        match self.value {
            DeValue::String(text) => Ok(text.as_ref()),
            _ => Err(self.expected(source, "a string")),
        }
    }

    pub(crate) fn bool(&self, source: &Source) -> Result<bool, ParseError> {
        match self.value {
            DeValue::Boolean(value) => Ok(*value),
            _ => Err(self.expected(source, "true or false")),
        }
    }

    /// A number, integer or float.
    pub(crate) fn number(&self, source: &Source) -> Result<f64, ParseError> {
        match self.value {
            DeValue::Float(float) => float
                .as_str()
                .parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| self.error(source, format!("{float} is not a finite number"))),
            DeValue::Integer(_) => Ok(self.integer(source)? as f64),
            _ => Err(self.expected(source, "a number")),
        }
    }

    /// A 16.16 weight written as a decimal number (`1.0`, `3.638`), exact when written by
    /// Optio.
    pub(crate) fn weight(&self, source: &Source) -> Result<Weight, ParseError> {
        let value = self.number(source)?;
        Weight::from_f64(value).ok_or_else(|| {
            self.error(source, format!("{value} is not a weight: weights are 0 to 65535.99998"))
        })
    }

    /// A weight between 0 and 1 (reweight, primary affinity).
    pub(crate) fn fraction(&self, source: &Source) -> Result<Weight, ParseError> {
        let weight = self.weight(source)?;
        if weight > Weight::ONE {
            return Err(self.error(source, "must be between 0.0 and 1.0"));
        }
        Ok(weight)
    }

    pub(crate) fn array(&self, source: &Source) -> Result<&'t [Spanned<DeValue<'i>>], ParseError> {
        match self.value {
            DeValue::Array(array) => Ok(array.as_ref()),
            _ => Err(self.expected(source, "an array")),
        }
    }

    pub(crate) fn table(&self, source: &Source) -> Result<&'t DeTable<'i>, ParseError> {
        match self.value {
            DeValue::Table(table) => Ok(table),
            _ => Err(self.expected(source, "a table")),
        }
    }

    pub(crate) fn line(&self, source: &Source) -> usize {
        source.line(self.span.start)
    }
}

/// A table whose keys are read one by one; [`Table::finish`] refuses the keys nobody read.
pub(crate) struct Table<'t, 'i> {
    table: &'t DeTable<'i>,
    path: String,
    read: Vec<&'static str>,
    /// Where the table starts.
    pub(crate) line: usize,
}

impl<'t, 'i> Table<'t, 'i> {
    pub(crate) fn new(table: &'t DeTable<'i>, path: String, line: usize) -> Table<'t, 'i> {
        Table { table, path, read: Vec::new(), line }
    }

    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The value of `key`, if present.
    pub(crate) fn get(&mut self, key: &'static str) -> Option<Value<'t, 'i>> {
        self.read.push(key);
        let table: &'t DeTable<'i> = self.table;
        table.get(key).map(|value| Value::new(value, format!("{}.{key}", self.path)))
    }

    /// The value of `key`, which must be present.
    pub(crate) fn required(&mut self, key: &'static str) -> Result<Value<'t, 'i>, ParseError> {
        self.get(key).ok_or_else(|| {
            ParseError::value(Some(self.line), &self.path, format!("missing key '{key}'"))
        })
    }

    /// Refuses keys that were not read, suggesting the closest known one.
    pub(crate) fn finish(self, source: &Source) -> Result<(), ParseError> {
        for (key, _) in self.table.iter() {
            let name: &str = key.get_ref();
            if self.read.contains(&name) {
                continue;
            }
            let suggestion = self
                .read
                .iter()
                .map(|known| (edit_distance(name, known), *known))
                .filter(|(distance, _)| *distance <= 2)
                .min()
                .map(|(_, known)| format!(" (did you mean '{known}'?)"))
                .unwrap_or_default();
            return Err(ParseError::value(
                Some(source.line(key.span().start)),
                &self.path,
                format!(
                    "unknown key '{name}'{suggestion}; known keys here: {}",
                    self.read.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_from_offsets() {
        let source = Source::new("a\nbc\n\nd");
        assert_eq!(source.line(0), 1);
        assert_eq!(source.line(2), 2);
        assert_eq!(source.line(5), 3);
        assert_eq!(source.line(6), 4);
        assert_eq!(source.line(100), 4);
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("capacty", "capacity"), 1);
        assert_eq!(edit_distance("weight", "weight"), 0);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
