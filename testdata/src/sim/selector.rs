//! The simulator's own label and field selectors.
//!
//! kubefold implements selectors in its engine; the simulator must not share
//! that code, or a bug in it would be answered the same way by both sides of
//! every end-to-end test. This module is written afresh from the grammar of
//! the Kubernetes documentation, plainly (whole strings, one pass per step,
//! no speed tricks), with kube-apiserver's error messages:
//!
//! - "Labels and Selectors"
//!   <https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/>:
//!   the syntax of label keys and values, equality-based requirements
//!   (`=`, `==`, `!=`), set-based ones (`in`, `notin`, `key`, `!key`),
//!   requirements joined by `,` meaning AND, `!=` and `notin` also selecting
//!   objects without the label. kube-apiserver also reads `key>N` and
//!   `key<N` (integer comparisons), which this module accepts too.
//! - "Field Selectors"
//!   <https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/>:
//!   `field=value`, `field==value`, `field!=value`, joined by `,`; in a
//!   value `\`, `,` and `=` are written `\\`, `\,` and `\=`. A field an
//!   object lacks reads as the empty string.
//!
//! It uses only `std` and `serde_json`, so the fuzz target that compares it
//! with kubefold's engine (`fuzz/fuzz_targets/selector_oracle.rs`) compiles
//! this file as it is, without the rest of the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// A selector that does not parse; the text is kube-apiserver's message,
/// which the simulator answers with a 400 BadRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(pub String);

impl fmt::Display for SelectorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

/// A malformed requirement: kube-apiserver prefixes these with
/// `unable to parse requirement: `.
fn requirement_error(message: String) -> SelectorError {
    SelectorError(format!("unable to parse requirement: {message}"))
}

// ---------------------------------------------------------------------------
// Label keys and values ("Syntax and character set").

/// The rule of a label name and of the name part of a key, as
/// kube-apiserver words it.
const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
/// The rule of a label value.
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
/// The rule of a key's prefix, a DNS subdomain.
const PREFIX_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// "63 characters or less ... beginning and ending with an alphanumeric
/// character ([a-z0-9A-Z]) with dashes (-), underscores (_), dots (.), and
/// alphanumerics between" (the length is checked apart).
fn is_name(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    if chars.is_empty() {
        return false;
    }
    let first = chars[0];
    let last = chars[chars.len() - 1];
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && chars.iter().all(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_' || *c == '.')
}

/// A DNS subdomain: dot-separated labels of lowercase letters, digits and
/// `-`, each starting and ending with a letter or digit.
fn is_dns_subdomain(text: &str) -> bool {
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    text.split('.').all(|label| {
        let chars: Vec<char> = label.chars().collect();
        !chars.is_empty()
            && alphanumeric(chars[0])
            && alphanumeric(chars[chars.len() - 1])
            && chars.iter().all(|c| alphanumeric(*c) || *c == '-')
    })
}

/// "Valid label keys have two segments: an optional prefix and name,
/// separated by a slash (/)"; the prefix is a DNS subdomain of at most 253
/// characters, the name at most 63. All broken rules are listed, joined by `; `.
fn check_key(key: &str) -> Result<(), SelectorError> {
    let parts: Vec<&str> = key.split('/').collect();
    let mut broken: Vec<String> = Vec::new();
    let name = match parts.len() {
        1 => parts[0],
        2 => {
            let prefix = parts[0];
            if prefix.is_empty() {
                broken.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > 253 {
                    broken.push("prefix part must be no more than 253 bytes".to_string());
                }
                if !is_dns_subdomain(prefix) {
                    broken.push(format!("prefix part {PREFIX_RULE}"));
                }
            }
            parts[1]
        }
        _ => {
            return Err(requirement_error(format!(
                "invalid label key \"{key}\": a valid label key {NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )))
        }
    };
    if name.is_empty() {
        broken.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        broken.push("name part must be no more than 63 bytes".to_string());
    }
    if !is_name(name) {
        broken.push(format!("name part {NAME_RULE}"));
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(requirement_error(format!("invalid label key \"{key}\": {}", broken.join("; "))))
    }
}

/// "Valid label value: must be 63 characters or less (can be empty)", and
/// otherwise a name.
fn check_value(key: &str, value: &str) -> Result<(), SelectorError> {
    let mut broken: Vec<&str> = Vec::new();
    if value.len() > 63 {
        broken.push("must be no more than 63 bytes");
    }
    if !value.is_empty() && !is_name(value) {
        broken.push(VALUE_RULE);
    }
    if broken.is_empty() {
        Ok(())
    } else {
        Err(requirement_error(format!("invalid label value \"{value}\" for key \"{key}\": {}", broken.join("; "))))
    }
}

// ---------------------------------------------------------------------------
// Label selectors.

/// How a requirement compares a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    /// `key`: the label is set.
    Exists,
    /// `!key`: the label is not set.
    DoesNotExist,
    /// `key=value`.
    Equals,
    /// `key==value`, the same as `=`.
    DoubleEquals,
    /// `key!=value`: not set, or set to another value.
    NotEquals,
    /// `key in (a,b)`: set to one of the values.
    In,
    /// `key notin (a,b)`: not set, or set to none of the values.
    NotIn,
    /// `key>N`: set to an integer greater than N.
    GreaterThan,
    /// `key<N`: set to an integer less than N.
    LessThan,
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelRequirement {
    /// The label key.
    pub key: String,
    /// The comparison.
    pub op: LabelOp,
    /// The values compared with (none for `key` and `!key`).
    pub values: Vec<String>,
}

impl LabelRequirement {
    /// A requirement, checked as kube-apiserver checks one: the key, the
    /// number of values the operator takes, each value, integers for `>` and `<`.
    pub fn new(key: &str, op: LabelOp, values: Vec<String>) -> Result<LabelRequirement, SelectorError> {
        check_key(key)?;
        let wrong_count = match op {
            LabelOp::In | LabelOp::NotIn => (values.is_empty())
                .then_some("for 'in', 'notin' operators, values set can't be empty"),
            LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::NotEquals => {
                (values.len() != 1).then_some("exact-match compatibility requires one single value")
            }
            LabelOp::Exists | LabelOp::DoesNotExist => {
                (!values.is_empty()).then_some("values set must be empty for exists and does not exist")
            }
            LabelOp::GreaterThan | LabelOp::LessThan => {
                (values.len() != 1).then_some("for 'gt', 'lt' operators, exactly one value is required")
            }
        };
        if let Some(reason) = wrong_count {
            return Err(requirement_error(format!("invalid values for key \"{key}\": {reason}")));
        }
        for value in &values {
            check_value(key, value)?;
            if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) && value.parse::<i64>().is_err() {
                return Err(requirement_error(format!(
                    "invalid values for key \"{key}\": for 'gt', 'lt' operators, the value must be an integer, not \"{value}\""
                )));
            }
        }
        Ok(LabelRequirement { key: key.to_string(), op, values })
    }

    /// Whether an object whose label `key` is `label` (`None`: not set) meets it.
    pub fn matches(&self, label: Option<&str>) -> bool {
        let listed = |value: &str| self.values.iter().any(|v| v == value);
        match self.op {
            LabelOp::Exists => label.is_some(),
            LabelOp::DoesNotExist => label.is_none(),
            LabelOp::Equals | LabelOp::DoubleEquals | LabelOp::In => label.is_some_and(listed),
            LabelOp::NotEquals | LabelOp::NotIn => !label.is_some_and(listed),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let (Some(label), Some(bound)) = (label, self.values.first()) else {
                    return false;
                };
                match (label.parse::<i64>(), bound.parse::<i64>()) {
                    (Ok(label), Ok(bound)) if self.op == LabelOp::GreaterThan => label > bound,
                    (Ok(label), Ok(bound)) => label < bound,
                    _ => false,
                }
            }
        }
    }
}

impl fmt::Display for LabelRequirement {
    /// kube-apiserver's canonical form: values sorted, set values in parentheses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut values = self.values.clone();
        values.sort();
        let values = values.join(",");
        let key = &self.key;
        match self.op {
            LabelOp::Exists => write!(f, "{key}"),
            LabelOp::DoesNotExist => write!(f, "!{key}"),
            LabelOp::Equals => write!(f, "{key}={values}"),
            LabelOp::DoubleEquals => write!(f, "{key}=={values}"),
            LabelOp::NotEquals => write!(f, "{key}!={values}"),
            LabelOp::GreaterThan => write!(f, "{key}>{values}"),
            LabelOp::LessThan => write!(f, "{key}<{values}"),
            LabelOp::In => write!(f, "{key} in ({values})"),
            LabelOp::NotIn => write!(f, "{key} notin ({values})"),
        }
    }
}

/// A label selector: all its requirements must hold. Empty: selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// The requirements, ordered by key (as kube-apiserver orders them).
    pub requirements: Vec<LabelRequirement>,
}

/// A word or symbol of the label selector language.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// Text up to whitespace or a symbol (keys, values, `in`, `notin`).
    Word(String),
    /// One of `!=`, `==`, `=`, `!`, `(`, `)`, `,`, `>`, `<`.
    Symbol(&'static str),
    /// The end of the selector.
    End,
}

impl Token {
    /// The token as kube-apiserver quotes it in a message (`''` at the end).
    fn text(&self) -> &str {
        match self {
            Token::Word(word) => word,
            Token::Symbol(symbol) => symbol,
            Token::End => "",
        }
    }

    fn is(&self, symbol: &str) -> bool {
        matches!(self, Token::Symbol(s) if *s == symbol)
    }
}

/// Splits a label selector into words and symbols: whitespace separates,
/// `!=` and `==` are one symbol each.
fn tokens(input: &str) -> Vec<Token> {
    const SYMBOLS: [&str; 9] = ["!=", "==", "=", "!", "(", ")", ",", ">", "<"];
    let is_space = |c: char| matches!(c, ' ' | '\t' | '\r' | '\n');
    let is_symbol = |c: char| "=!(),><".contains(c);
    let mut out = Vec::new();
    let mut rest = input;
    loop {
        rest = rest.trim_start_matches(is_space);
        if rest.is_empty() {
            out.push(Token::End);
            return out;
        }
        if let Some(symbol) = SYMBOLS.iter().find(|s| rest.starts_with(**s)) {
            out.push(Token::Symbol(symbol));
            rest = &rest[symbol.len()..];
        } else {
            let end = rest.find(|c: char| is_space(c) || is_symbol(c)).unwrap_or(rest.len());
            out.push(Token::Word(rest[..end].to_string()));
            rest = &rest[end..];
        }
    }
}

/// Reads tokens front to back.
struct Reader {
    tokens: Vec<Token>,
    at: usize,
}

impl Reader {
    fn peek(&self) -> &Token {
        self.tokens.get(self.at).unwrap_or(&Token::End)
    }

    fn take(&mut self) -> Token {
        let token = self.peek().clone();
        self.at += 1;
        token
    }

    /// "found 'X', expected: ..." for the token at hand.
    fn unexpected(&self, expected: &str) -> String {
        format!("found '{}', expected: {expected}", self.peek().text())
    }
}

impl LabelSelector {
    /// Parses a `labelSelector` (`kubectl -l`); `""` selects everything.
    pub fn parse(input: &str) -> Result<LabelSelector, SelectorError> {
        let mut reader = Reader { tokens: tokens(input), at: 0 };
        let mut requirements = Vec::new();
        if *reader.peek() != Token::End {
            loop {
                if !matches!(reader.peek(), Token::Word(_)) && !reader.peek().is("!") {
                    let expected = if requirements.is_empty() { "!, identifier, or 'end of string'" } else { "identifier after ','" };
                    return Err(SelectorError(reader.unexpected(expected)));
                }
                requirements.push(Self::requirement(&mut reader)?);
                match reader.peek() {
                    Token::End => break,
                    t if t.is(",") => {
                        reader.take();
                    }
                    _ => return Err(SelectorError(reader.unexpected("',' or 'end of string'"))),
                }
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// One requirement: `!key`, `key`, `key OP value`, `key in|notin (values)`.
    fn requirement(reader: &mut Reader) -> Result<LabelRequirement, SelectorError> {
        if reader.peek().is("!") {
            reader.take();
            let Token::Word(key) = reader.peek().clone() else {
                return Err(requirement_error(reader.unexpected("identifier")));
            };
            reader.take();
            return LabelRequirement::new(&key, LabelOp::DoesNotExist, Vec::new());
        }
        let Token::Word(key) = reader.take() else {
            unreachable!("the caller saw a word");
        };
        check_key(&key)?;
        if *reader.peek() == Token::End || reader.peek().is(",") {
            return LabelRequirement::new(&key, LabelOp::Exists, Vec::new());
        }
        let op = match reader.peek() {
            Token::Word(word) if word == "in" => LabelOp::In,
            Token::Word(word) if word == "notin" => LabelOp::NotIn,
            Token::Symbol("=") => LabelOp::Equals,
            Token::Symbol("==") => LabelOp::DoubleEquals,
            Token::Symbol("!=") => LabelOp::NotEquals,
            Token::Symbol(">") => LabelOp::GreaterThan,
            Token::Symbol("<") => LabelOp::LessThan,
            _ => return Err(requirement_error(reader.unexpected("in, notin, =, ==, !=, gt, lt"))),
        };
        reader.take();
        let values = if matches!(op, LabelOp::In | LabelOp::NotIn) {
            Self::value_list(reader)?
        } else {
            vec![Self::single_value(reader)?]
        };
        LabelRequirement::new(&key, op, values)
    }

    /// The value after `=`, `==`, `!=`, `>`, `<`: a word, or empty when
    /// the requirement ends there (`key=`).
    fn single_value(reader: &mut Reader) -> Result<String, SelectorError> {
        match reader.peek().clone() {
            Token::End => Ok(String::new()),
            t if t.is(",") => Ok(String::new()),
            Token::Word(word) => {
                reader.take();
                Ok(word)
            }
            _ => Err(requirement_error(reader.unexpected("identifier"))),
        }
    }

    /// `( v1, v2, ... )`: comma-separated items, each a word or nothing (the
    /// empty value), so `()`, `(,)` and `(a,)` all hold `""`. Sorted, without
    /// repeats.
    fn value_list(reader: &mut Reader) -> Result<Vec<String>, SelectorError> {
        if !reader.peek().is("(") {
            return Err(requirement_error(reader.unexpected("'('")));
        }
        reader.take();
        let mut values = BTreeSet::new();
        match reader.peek() {
            t if t.is(")") => {
                reader.take();
                values.insert(String::new());
                return Ok(values.into_iter().collect());
            }
            Token::Word(_) => {}
            t if t.is(",") => {}
            _ => return Err(requirement_error(reader.unexpected("',', ')' or identifier"))),
        }
        // At the start of an item.
        loop {
            match reader.peek().clone() {
                Token::Word(word) => {
                    reader.take();
                    values.insert(word);
                    match reader.peek() {
                        t if t.is(",") => {
                            reader.take();
                        }
                        t if t.is(")") => {
                            reader.take();
                            break;
                        }
                        _ => return Err(requirement_error(reader.unexpected("',' or ')'"))),
                    }
                }
                t if t.is(",") => {
                    reader.take();
                    values.insert(String::new());
                }
                t if t.is(")") => {
                    reader.take();
                    values.insert(String::new());
                    break;
                }
                _ => return Err(requirement_error(reader.unexpected("',', or identifier"))),
            }
        }
        Ok(values.into_iter().collect())
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels` and
    /// `matchExpressions`, as a Deployment's `spec.selector`); `null` or `{}`
    /// selects everything.
    pub fn from_object(object: &serde_json::Value) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        if let Some(labels) = object.get("matchLabels").and_then(|m| m.as_object()) {
            for (key, value) in labels {
                let value = value.as_str().unwrap_or("").to_string();
                requirements.push(LabelRequirement::new(key, LabelOp::Equals, vec![value])?);
            }
        }
        if let Some(expressions) = object.get("matchExpressions").and_then(|e| e.as_array()) {
            for expression in expressions {
                let field = |name: &str| expression.get(name).and_then(|v| v.as_str()).unwrap_or("").to_string();
                let op = match field("operator").as_str() {
                    "In" => LabelOp::In,
                    "NotIn" => LabelOp::NotIn,
                    "Exists" => LabelOp::Exists,
                    "DoesNotExist" => LabelOp::DoesNotExist,
                    other => {
                        return Err(requirement_error(format!(
                            "found '{other}', expected: In, NotIn, Exists, DoesNotExist"
                        )))
                    }
                };
                let values: Vec<String> = match expression.get("values").and_then(|v| v.as_array()) {
                    Some(values) => values.iter().filter_map(|v| v.as_str()).map(str::to_string).collect(),
                    None => Vec::new(),
                };
                requirements.push(LabelRequirement::new(&field("key"), op, values)?);
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether it has no requirement (selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object with these labels is selected.
    pub fn matches_map(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
    }

    /// Whether an object with these `(key, value)` labels is selected.
    pub fn matches_pairs(&self, labels: &[(String, String)]) -> bool {
        self.requirements.iter().all(|r| {
            let label = labels.iter().find(|(key, _)| *key == r.key).map(|(_, value)| value.as_str());
            r.matches(label)
        })
    }
}

impl fmt::Display for LabelSelector {
    /// The requirements joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.requirements.iter().map(|r| r.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

// ---------------------------------------------------------------------------
// Field selectors.

/// One term of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldTerm {
    /// The field, e.g. `status.phase`.
    pub field: String,
    /// `!=` (rather than `=` or `==`).
    pub negated: bool,
    /// The value, with its escapes undone.
    pub value: String,
}

impl FieldTerm {
    /// Whether an object whose field is `value` (`""` when it lacks it) meets it.
    pub fn matches(&self, value: &str) -> bool {
        if self.negated {
            value != self.value
        } else {
            value == self.value
        }
    }
}

impl fmt::Display for FieldTerm {
    /// `field=value` or `field!=value`, `\`, `,` and `=` in the value escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let escaped = self.value.replace('\\', "\\\\").replace(',', "\\,").replace('=', "\\=");
        let op = if self.negated { "!=" } else { "=" };
        write!(f, "{}{op}{escaped}", self.field)
    }
}

/// A field selector: all its terms must hold. Empty: selects everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// The terms, ordered by their text as written (as kube-apiserver orders them).
    pub terms: Vec<FieldTerm>,
}

impl FieldSelector {
    /// Parses a `fieldSelector`; `""` selects everything. Terms are split at
    /// commas not escaped, empty terms are skipped, and each is split at its
    /// first `!=`, `==` or `=` (the field itself has no escapes).
    pub fn parse(input: &str) -> Result<FieldSelector, SelectorError> {
        let mut texts: Vec<String> = Vec::new();
        let mut current = String::new();
        let mut chars = input.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    current.push(c);
                    if let Some(next) = chars.next() {
                        current.push(next);
                    }
                }
                ',' => texts.push(std::mem::take(&mut current)),
                _ => current.push(c),
            }
        }
        texts.push(current);
        texts.sort();
        let mut terms = Vec::new();
        for text in texts.iter().filter(|t| !t.is_empty()) {
            let Some((field, negated, raw)) = split_term(text) else {
                return Err(SelectorError(format!("invalid selector: '{input}'; can't understand '{text}'")));
            };
            terms.push(FieldTerm { field: field.to_string(), negated, value: unescape(raw)? });
        }
        Ok(FieldSelector { terms })
    }

    /// Whether it has no term (selects everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether an object with these `(field, value)` pairs is selected; a
    /// field not among them reads as `""`.
    pub fn matches_pairs(&self, fields: &[(String, String)]) -> bool {
        self.terms.iter().all(|term| {
            let value = fields.iter().find(|(field, _)| *field == term.field).map(|(_, v)| v.as_str());
            term.matches(value.unwrap_or(""))
        })
    }
}

impl fmt::Display for FieldSelector {
    /// The terms joined by `,`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.terms.iter().map(|t| t.to_string()).collect();
        f.write_str(&parts.join(","))
    }
}

/// `(field, negated, value as written)` at the first operator of a term.
fn split_term(text: &str) -> Option<(&str, bool, &str)> {
    for (at, _) in text.char_indices() {
        let rest = &text[at..];
        if rest.starts_with("!=") {
            return Some((&text[..at], true, &rest[2..]));
        }
        if rest.starts_with("==") {
            return Some((&text[..at], false, &rest[2..]));
        }
        if rest.starts_with('=') {
            return Some((&text[..at], false, &rest[1..]));
        }
    }
    None
}

/// Undoes `\\`, `\,` and `\=`; any other escape, and a `,` or `=` not
/// escaped, is an error.
fn unescape(raw: &str) -> Result<String, SelectorError> {
    let mut value = String::new();
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(next) if next == '\\' || next == ',' || next == '=' => value.push(next),
                Some(next) => {
                    return Err(SelectorError(format!("invalid field selector: invalid escape sequence: \\{next}")))
                }
                None => return Err(SelectorError("invalid field selector: invalid escape sequence: \\".to_string())),
            },
            ',' | '=' => {
                return Err(SelectorError(format!("invalid field selector: unescaped character in value: {c}")))
            }
            _ => value.push(c),
        }
    }
    Ok(value)
}
