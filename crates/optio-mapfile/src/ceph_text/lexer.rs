//! Tokens of the crushtool text format: words and the brackets `{ } [ ]`, with line numbers.
//! `#` starts a comment that runs to the end of the line; any other run of characters that are
//! not white space or brackets is one word (crushtool's grammar is whitespace-separated too).

/// One token and the 1-based line it is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    pub(crate) text: &'a str,
    pub(crate) line: usize,
}

/// Streams the tokens of a text, without allocating.
#[derive(Clone)]
pub(crate) struct Lexer<'a> {
    text: &'a str,
    at: usize,
    line: usize,
}

impl<'a> Lexer<'a> {
    pub(crate) fn new(text: &'a str) -> Lexer<'a> {
        Lexer { text, at: 0, line: 1 }
    }
}

fn is_bracket(c: char) -> bool {
    matches!(c, '{' | '}' | '[' | ']')
}

impl<'a> Iterator for Lexer<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let rest = &self.text[self.at..];
        let mut chars = rest.char_indices().peekable();
        // Skip white space and comments.
        let start = loop {
            let (offset, c) = chars.next()?;
            match c {
                '\n' => self.line += 1,
                '#' => {
                    for (_, c) in chars.by_ref() {
                        if c == '\n' {
                            self.line += 1;
                            break;
                        }
                    }
                }
                c if c.is_whitespace() => {}
                _ => break offset,
            }
        };
        let first = rest[start..].chars().next().expect("a character starts here");
        let end = if is_bracket(first) {
            start + first.len_utf8()
        } else {
            rest[start..]
                .char_indices()
                .find(|(_, c)| c.is_whitespace() || is_bracket(*c) || *c == '#')
                .map_or(rest.len(), |(offset, _)| start + offset)
        };
        self.at += end;
        Some(Token { text: &rest[start..end], line: self.line })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_words_brackets_and_comments() {
        let text = "host h0{ # comment { here\n\tid -1\t\t# x\n item osd.0 weight 1.0}\n[ 1 2 ]";
        let tokens: Vec<(&str, usize)> = Lexer::new(text).map(|t| (t.text, t.line)).collect();
        assert_eq!(
            tokens,
            vec![
                ("host", 1),
                ("h0", 1),
                ("{", 1),
                ("id", 2),
                ("-1", 2),
                ("item", 3),
                ("osd.0", 3),
                ("weight", 3),
                ("1.0", 3),
                ("}", 3),
                ("[", 4),
                ("1", 4),
                ("2", 4),
                ("]", 4),
            ]
        );
    }

    #[test]
    fn handles_unicode_and_empty_input() {
        assert_eq!(Lexer::new("").count(), 0);
        assert_eq!(Lexer::new("# only a comment").count(), 0);
        let words: Vec<&str> = Lexer::new("é\u{a0}ü{").map(|t| t.text).collect();
        assert_eq!(words, vec!["é", "ü", "{"]);
    }
}
