//! Field selectors: terms `field=value`, `field==value`, `field!=value`,
//! parsed like `fields.ParseSelector`, printed escaped, and matched.

use std::fmt;

use super::{Result, SelectorError};

/// One term of a field selector: `field=value`, `field==value` (`negated`
/// false) or `field!=value` (`negated` true).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field path, e.g. `status.phase`.
    pub field: String,
    /// `!=` rather than `=`/`==`.
    pub negated: bool,
    /// The value, unescaped.
    pub value: String,
}

impl FieldRequirement {
    /// Whether a field value (`""` when the object lacks the field) satisfies the term.
    pub fn matches_value(&self, value: &str) -> bool {
        (self.value == value) != self.negated
    }
}

impl fmt::Display for FieldRequirement {
    /// `field=value` or `field!=value`, the value escaped (`fields.EscapeValue`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let operator = if self.negated { "!=" } else { "=" };
        write!(f, "{}{operator}", self.field)?;
        for c in self.value.chars() {
            if matches!(c, '\\' | ',' | '=') {
                f.write_str("\\")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

/// A parsed field selector: the AND of its terms. The empty selector selects everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    /// The terms, sorted by their text as written.
    pub requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses a `fieldSelector` query parameter like `fields.ParseSelector`:
    /// terms split at unescaped commas (empty terms ignored), each split at
    /// its first `!=`, `==` or `=`; the value is unescaped (`\\`, `\,`, `\=`).
    pub fn parse(input: &str) -> Result<FieldSelector> {
        let mut terms = split_terms(input);
        terms.sort_unstable();
        let mut requirements = Vec::with_capacity(terms.len());
        for term in terms.into_iter().filter(|t| !t.is_empty()) {
            let Some((field, negated, raw_value)) = split_term(term) else {
                return Err(SelectorError::InvalidFieldTerm {
                    selector: input.to_string(),
                    term: term.to_string(),
                });
            };
            requirements.push(FieldRequirement {
                field: field.to_string(),
                negated,
                value: unescape_value(raw_value)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// Whether the selector has no term (selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object whose selectable fields `get` looks up is selected.
    /// A missing field reads as `""`, as in kube-apiserver's `fields.Set`.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(get(&r.field).unwrap_or_default()))
    }

    /// Whether an object with these `(field, value)` pairs is selected.
    pub fn matches_pairs(&self, fields: &[(String, String)]) -> bool {
        self.matches(|field| {
            fields
                .iter()
                .find(|(f, _)| f == field)
                .map(|(_, v)| v.as_str())
        })
    }
}

impl fmt::Display for FieldSelector {
    /// The canonical selector string, terms joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, requirement) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{requirement}")?;
        }
        Ok(())
    }
}

/// Splits at commas not escaped by a backslash; escapes stay in the terms.
fn split_terms(input: &str) -> Vec<&str> {
    if input.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in input.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&input[start..i]);
            start = i + 1;
        }
    }
    terms.push(&input[start..]);
    terms
}

/// Splits a term at the first operator: `(field, negated, raw value)`.
/// The field has no escaping, so the first `!=`, `==` or `=` wins.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    term.char_indices().find_map(|(i, _)| {
        let rest = &term[i..];
        if let Some(value) = rest.strip_prefix("!=") {
            Some((&term[..i], true, value))
        } else if let Some(value) = rest.strip_prefix("==") {
            Some((&term[..i], false, value))
        } else {
            rest.strip_prefix('=')
                .map(|value| (&term[..i], false, value))
        }
    })
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes, and
/// `,` and `=` must be escaped.
fn unescape_value(raw: &str) -> Result<String> {
    let mut value = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(escaped @ ('\\' | ',' | '=')) => value.push(escaped),
                Some(other) => {
                    return Err(SelectorError::InvalidEscapeSequence(format!("\\{other}")))
                }
                None => return Err(SelectorError::InvalidEscapeSequence("\\".to_string())),
            },
            ',' | '=' => return Err(SelectorError::UnescapedCharacter(c)),
            _ => value.push(c),
        }
    }
    Ok(value)
}


#[cfg(test)]
mod tests {
    use super::*;

    /// (input, canonical string, terms as (field, negated, value))
    type FieldCase = (
        &'static str,
        &'static str,
        &'static [(&'static str, bool, &'static str)],
    );

    #[test]
    fn parses_field_selectors() {
        let cases: &[FieldCase] = &[
            ("", "", &[]),
            (",", "", &[]),
            // Examples of the "Field Selectors" docs page.
            (
                "status.phase=Running",
                "status.phase=Running",
                &[("status.phase", false, "Running")],
            ),
            (
                "metadata.namespace!=default",
                "metadata.namespace!=default",
                &[("metadata.namespace", true, "default")],
            ),
            (
                "status.phase!=Running,spec.restartPolicy=Always",
                "spec.restartPolicy=Always,status.phase!=Running",
                &[
                    ("spec.restartPolicy", false, "Always"),
                    ("status.phase", true, "Running"),
                ],
            ),
            // fields.ParseSelector behaviour.
            (
                "metadata.name==my-service",
                "metadata.name=my-service",
                &[("metadata.name", false, "my-service")],
            ),
            (
                "spec.nodeName=",
                "spec.nodeName=",
                &[("spec.nodeName", false, "")],
            ),
            (
                "a=b,,c=d",
                "a=b,c=d",
                &[("a", false, "b"), ("c", false, "d")],
            ),
            (r"a=b\,c", r"a=b\,c", &[("a", false, "b,c")]),
            (
                r"a=b\=c,d=e",
                r"a=b\=c,d=e",
                &[("a", false, "b=c"), ("d", false, "e")],
            ),
            (r"a=b\\c", r"a=b\\c", &[("a", false, r"b\c")]),
            ("a=b!c", "a=b!c", &[("a", false, "b!c")]),
            (" a = b ", " a = b ", &[(" a ", false, " b ")]),
            ("=x", "=x", &[("", false, "x")]),
        ];
        for (input, canonical, terms) in cases {
            let selector = FieldSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(selector.to_string(), *canonical, "input {input:?}");
            let expected: Vec<FieldRequirement> = terms
                .iter()
                .map(|(field, negated, value)| FieldRequirement {
                    field: field.to_string(),
                    negated: *negated,
                    value: value.to_string(),
                })
                .collect();
            assert_eq!(selector.requirements, expected, "input {input:?}");
        }
    }

    #[test]
    fn rejects_invalid_field_selectors() {
        let cases = [
            (
                "status.phase",
                "invalid selector: 'status.phase'; can't understand 'status.phase'",
            ),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            ("a!b", "invalid selector: 'a!b'; can't understand 'a!b'"),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: =",
            ),
            // The first operator wins: `!=`, leaving `=b` with an unescaped `=`.
            (
                "a!==b",
                "invalid field selector: unescaped character in value: =",
            ),
            (
                r"a=b\!c",
                r"invalid field selector: invalid escape sequence: \!",
            ),
            (
                r"a=b\",
                r"invalid field selector: invalid escape sequence: \",
            ),
        ];
        for (input, message) in cases {
            match FieldSelector::parse(input) {
                Ok(selector) => panic!("{input:?} parsed as {selector}"),
                Err(error) => assert_eq!(error.to_string(), message, "input {input:?}"),
            }
        }
    }

    #[test]
    fn field_selectors_read_missing_fields_as_empty() {
        let fields = vec![
            ("metadata.name".to_string(), "web-0".to_string()),
            ("status.phase".to_string(), "Running".to_string()),
        ];
        let cases = [
            ("", true),
            ("metadata.name=web-0", true),
            ("metadata.name=web-1", false),
            ("status.phase!=Running", false),
            ("status.phase!=Pending", true),
            ("status.phase=Running,metadata.name=web-0", true),
            ("status.phase=Running,metadata.name!=web-0", false),
            ("spec.nodeName=", true),
            ("spec.nodeName!=", false),
            ("spec.nodeName=node-1", false),
            ("spec.nodeName!=node-1", true),
        ];
        for (input, selected) in cases {
            let selector = FieldSelector::parse(input).unwrap();
            assert_eq!(selector.matches_pairs(&fields), selected, "{input:?}");
        }
    }
}
