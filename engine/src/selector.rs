//! Label and field selectors, parsed and matched as kube-apiserver does.
//!
//! Label selectors follow the grammar of the Kubernetes docs page "Labels and
//! Selectors" (<https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/>)
//! and the behaviour of `k8s.io/apimachinery/pkg/labels/selector.go`:
//!
//! ```text
//! <selector>    ::= <requirement> | <requirement> "," <selector>
//! <requirement> ::= [!] KEY [ <set-based> | <exact-match> | <ordering> ]
//! <set-based>   ::= ( "in" | "notin" ) "(" <values> ")"
//! <values>      ::= VALUE | VALUE "," <values>      (VALUE may be empty)
//! <exact-match> ::= ( "=" | "==" | "!=" ) VALUE
//! <ordering>    ::= ( ">" | "<" ) INTEGER
//! ```
//!
//! Field selectors follow "Field Selectors"
//! (<https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/>)
//! and `k8s.io/apimachinery/pkg/fields/selector.go`: comma-separated terms
//! `field=value`, `field==value` or `field!=value`, where `\`, `,` and `=`
//! in a value are escaped with a backslash.
//!
//! Both parsers are pure functions over the input, a tokenizer walking a byte
//! cursor and a recursive-descent parser over its tokens.

use std::collections::BTreeMap;
use std::fmt;

/// Errors of parsing a label or field selector. Messages are those of
/// kube-apiserver, made readable where it prints Go internals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// One requirement of a label selector is malformed; the inner error says how.
    #[error("unable to parse requirement: {0}")]
    Requirement(RequirementError),
    /// A label selector has a token where another was expected (between requirements).
    #[error("found '{found}', expected: {expected}")]
    UnexpectedToken {
        /// The text found; empty at the end of the input.
        found: String,
        /// What the grammar allows at that point.
        expected: &'static str,
    },
    /// A field selector term has no `=`, `==` or `!=` operator.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    InvalidFieldTerm {
        /// The whole field selector.
        selector: String,
        /// The term that could not be split.
        term: String,
    },
    /// A field selector value has a backslash that does not escape `\`, `,` or `=`.
    #[error("invalid field selector: invalid escape sequence: {0}")]
    InvalidEscapeSequence(String),
    /// A field selector value has an unescaped `,` or `=`.
    #[error("invalid field selector: unescaped character in value: {0}")]
    UnescapedCharacter(char),
    /// A field selector uses a field the resource type cannot be selected by.
    #[error("field label not supported: {0}")]
    UnsupportedField(String),
    /// A field selector uses a field other than `metadata.name` and
    /// `metadata.namespace` on a type that registers no selectable fields.
    #[error(
        "\"{0}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
    )]
    UnknownField(String),
}

/// Why one label selector requirement is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// A token where the grammar expects another.
    #[error("found '{found}', expected: {expected}")]
    UnexpectedToken {
        /// The text found; empty at the end of the input.
        found: String,
        /// What the grammar allows at that point.
        expected: &'static str,
    },
    /// The key is not a valid label key (`[prefix/]name`).
    #[error("invalid label key \"{key}\": {reason}")]
    InvalidKey {
        /// The key as written.
        key: String,
        /// Every rule it breaks, joined by `; `.
        reason: String,
    },
    /// A value is not a valid label value.
    #[error("invalid label value \"{value}\" for key \"{key}\": {reason}")]
    InvalidValue {
        /// The key of the requirement.
        key: String,
        /// The value as written.
        value: String,
        /// Every rule it breaks, joined by `; `.
        reason: String,
    },
    /// The values do not fit the operator (their number, or not an integer for `>` and `<`).
    #[error("invalid values for key \"{key}\": {reason}")]
    InvalidValues {
        /// The key of the requirement.
        key: String,
        /// The rule broken.
        reason: String,
    },
}

impl From<RequirementError> for SelectorError {
    fn from(error: RequirementError) -> Self {
        SelectorError::Requirement(error)
    }
}

/// Result of selector parsing and validation.
pub type Result<T, E = SelectorError> = std::result::Result<T, E>;

/// The operator of a label selector requirement (`k8s.io/apimachinery/pkg/selection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `key=value`
    Equals,
    /// `key==value`, the same as `=`.
    DoubleEquals,
    /// `key!=value`; also matches objects without the label.
    NotEquals,
    /// `key in (a,b)`
    In,
    /// `key notin (a,b)`; also matches objects without the label.
    NotIn,
    /// `key`: the label is set, to any value.
    Exists,
    /// `!key`: the label is not set.
    DoesNotExist,
    /// `key>n`: the label is an integer greater than `n`.
    GreaterThan,
    /// `key<n`: the label is an integer less than `n`.
    LessThan,
}

impl Operator {
    /// The operator's name as Kubernetes spells it (`selection.Operator`):
    /// `=`, `==`, `!=`, `in`, `notin`, `exists`, `!`, `gt`, `lt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One requirement of a label selector: a key, an operator and its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// The label key, `[prefix/]name`.
    pub key: String,
    /// How the label's value is compared.
    pub operator: Operator,
    /// The values: one for `=`, `==`, `!=`, `>`, `<`; at least one for `in`
    /// and `notin` (the empty string is a value); none for `exists` and `!`.
    pub values: Vec<String>,
}

impl Requirement {
    /// A validated requirement, with the rules of apimachinery's
    /// `labels.NewRequirement`: a valid key, valid label values, and the
    /// number of values the operator takes (integers for `>` and `<`).
    pub fn new(
        key: impl Into<String>,
        operator: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, RequirementError> {
        let key = key.into();
        validate_label_key(&key)?;
        let count_error = match operator {
            Operator::In | Operator::NotIn if values.is_empty() => {
                Some("for 'in', 'notin' operators, values set can't be empty")
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals
                if values.len() != 1 =>
            {
                Some("exact-match compatibility requires one single value")
            }
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => {
                Some("values set must be empty for exists and does not exist")
            }
            Operator::GreaterThan | Operator::LessThan if values.len() != 1 => {
                Some("for 'gt', 'lt' operators, exactly one value is required")
            }
            _ => None,
        };
        if let Some(reason) = count_error {
            return Err(RequirementError::InvalidValues {
                key,
                reason: reason.to_string(),
            });
        }
        for value in &values {
            if let Err(reason) = check_label_value(value) {
                return Err(RequirementError::InvalidValue {
                    key,
                    value: value.clone(),
                    reason,
                });
            }
            if matches!(operator, Operator::GreaterThan | Operator::LessThan)
                && value.parse::<i64>().is_err()
            {
                return Err(RequirementError::InvalidValues {
                    key,
                    reason: format!(
                        "for 'gt', 'lt' operators, the value must be an integer, not \"{value}\""
                    ),
                });
            }
        }
        Ok(Requirement {
            key,
            operator,
            values,
        })
    }

    /// Whether a label value (`None` when the object has no such label)
    /// satisfies the requirement. As in Kubernetes, `!=` and `notin` match
    /// objects without the label, and `>`/`<` never match a missing or
    /// non-integer value.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        let has = |v: &str| self.values.iter().any(|x| x == v);
        match (self.operator, value) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, Some(v)) => has(v),
            (Operator::Equals | Operator::DoubleEquals | Operator::In, None) => false,
            (Operator::NotEquals | Operator::NotIn, Some(v)) => !has(v),
            (Operator::NotEquals | Operator::NotIn, None) => true,
            (Operator::Exists, v) => v.is_some(),
            (Operator::DoesNotExist, v) => v.is_none(),
            (Operator::GreaterThan | Operator::LessThan, None) => false,
            (Operator::GreaterThan | Operator::LessThan, Some(v)) => {
                let (Ok(actual), [bound]) = (v.parse::<i64>(), self.values.as_slice()) else {
                    return false;
                };
                let Ok(bound) = bound.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    actual > bound
                } else {
                    actual < bound
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// The canonical form of `Requirement.String()`: `!key`, `key`, `key=v`,
    /// `key in (a,b)` with values sorted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let separator = match self.operator {
            Operator::Exists => return f.write_str(&self.key),
            Operator::DoesNotExist => return write!(f, "!{}", self.key),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
        };
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        let values = values.join(",");
        if matches!(self.operator, Operator::In | Operator::NotIn) {
            write!(f, "{}{separator}({values})", self.key)
        } else {
            write!(f, "{}{separator}{values}", self.key)
        }
    }
}

/// A parsed label selector: the AND of its requirements, sorted by key.
/// The empty selector selects everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    /// The requirements, all of which must match.
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// The [`crate::event::label_bit`]s of the labels every match must have
    /// (`key=value`, `key==value`, `key in (value)`): an entry without all
    /// of them cannot match.
    pub fn required_label_bits(&self) -> u64 {
        self.requirements
            .iter()
            .filter_map(|r| match (&r.operator, r.values.as_slice()) {
                (Operator::Equals | Operator::DoubleEquals | Operator::In, [value]) => Some(crate::event::label_bit(&r.key, value)),
                _ => None,
            })
            .fold(0, |bits, bit| bits | bit)
    }

    /// Parses a `labelSelector` query parameter (`kubectl -l`) like
    /// `labels.Parse`. `""` selects everything.
    pub fn parse(input: &str) -> Result<LabelSelector> {
        let tokens = tokenize(input);
        let mut requirements = Parser {
            tokens,
            position: 0,
        }
        .parse()?;
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// The selector of a `metav1.LabelSelector` object (`matchLabels`,
    /// `matchExpressions`), as `metav1.LabelSelectorAsSelector` builds it.
    /// A `null` or empty object selects everything.
    pub fn from_label_selector(object: &serde_json::Value) -> Result<LabelSelector> {
        let mut requirements = Vec::new();
        if let Some(match_labels) = object
            .get("matchLabels")
            .and_then(serde_json::Value::as_object)
        {
            for (key, value) in match_labels {
                let value = value.as_str().unwrap_or_default().to_string();
                requirements.push(Requirement::new(
                    key.as_str(),
                    Operator::Equals,
                    vec![value],
                )?);
            }
        }
        if let Some(expressions) = object
            .get("matchExpressions")
            .and_then(serde_json::Value::as_array)
        {
            for expression in expressions {
                let text = |name: &str| {
                    expression
                        .get(name)
                        .and_then(serde_json::Value::as_str)
                        .unwrap_or_default()
                };
                let operator = match text("operator") {
                    "In" => Operator::In,
                    "NotIn" => Operator::NotIn,
                    "Exists" => Operator::Exists,
                    "DoesNotExist" => Operator::DoesNotExist,
                    other => {
                        return Err(RequirementError::UnexpectedToken {
                            found: other.to_string(),
                            expected: "In, NotIn, Exists, DoesNotExist",
                        }
                        .into())
                    }
                };
                let values = expression
                    .get("values")
                    .and_then(serde_json::Value::as_array)
                    .map(|values| {
                        values
                            .iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                requirements.push(Requirement::new(text("key"), operator, values)?);
            }
        }
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(LabelSelector { requirements })
    }

    /// Whether the selector has no requirement (selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object whose labels `get` looks up is selected.
    pub fn matches<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches_value(get(&r.key)))
    }

    /// Whether an object with these `(key, value)` labels is selected.
    pub fn matches_pairs(&self, labels: &[(String, String)]) -> bool {
        self.matches(|key| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        })
    }

    /// Whether an object with these labels is selected.
    pub fn matches_map(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches(|key| labels.get(key).map(String::as_str))
    }

    /// Removes and returns the requirements on `key` (kubefold uses this to
    /// take the `kubefold.io/cluster` search condition out of a selector).
    pub fn take_key(&mut self, key: &str) -> Vec<Requirement> {
        let (taken, kept) = std::mem::take(&mut self.requirements)
            .into_iter()
            .partition(|r| r.key == key);
        self.requirements = kept;
        taken
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical selector string, requirements joined by `,`, as
    /// `labels.Selector.String()` prints it.
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

/// Maximum length of a label value and of the name part of a label key.
const LABEL_NAME_MAX: usize = 63;
/// Maximum length of the DNS-subdomain prefix of a label key.
const DNS_SUBDOMAIN_MAX: usize = 253;
const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with \
     an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
     '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' \
     or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', \
     regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
     '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for \
     validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_label_name(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(first), Some(last)) => {
            first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`
fn is_dns_subdomain(s: &str) -> bool {
    let lower_alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    s.split('.').all(|label| {
        let bytes = label.as_bytes();
        match (bytes.first(), bytes.last()) {
            (Some(first), Some(last)) => {
                lower_alnum(first)
                    && lower_alnum(last)
                    && bytes.iter().all(|b| lower_alnum(b) || *b == b'-')
            }
            _ => false,
        }
    })
}

/// Label key validation (`content.IsLabelKey`): an optional DNS-subdomain
/// prefix of at most 253 characters and `/`, then a name of at most 63.
fn validate_label_key(key: &str) -> Result<(), RequirementError> {
    let mut errors = Vec::new();
    let name = match key.split('/').collect::<Vec<_>>().as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            } else {
                if prefix.len() > DNS_SUBDOMAIN_MAX {
                    errors.push(format!(
                        "prefix part must be no more than {DNS_SUBDOMAIN_MAX} bytes"
                    ));
                }
                if !is_dns_subdomain(prefix) {
                    errors.push(format!("prefix part {SUBDOMAIN_RULE}"));
                }
            }
            *name
        }
        _ => {
            return Err(RequirementError::InvalidKey {
                key: key.to_string(),
                reason: format!(
                    "a valid label key {NAME_RULE} with an optional DNS subdomain prefix and '/' \
                     (e.g. 'example.com/MyName')"
                ),
            })
        }
    };
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > LABEL_NAME_MAX {
        errors.push(format!(
            "name part must be no more than {LABEL_NAME_MAX} bytes"
        ));
    }
    if !is_label_name(name) {
        errors.push(format!("name part {NAME_RULE}"));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(RequirementError::InvalidKey {
            key: key.to_string(),
            reason: errors.join("; "),
        })
    }
}

/// Label value validation (`validation.IsValidLabelValue`): empty, or at
/// most 63 characters of the label-name alphabet.
fn check_label_value(value: &str) -> Result<(), String> {
    let mut errors = Vec::new();
    if value.len() > LABEL_NAME_MAX {
        errors.push(format!("must be no more than {LABEL_NAME_MAX} bytes"));
    }
    if !value.is_empty() && !is_label_name(value) {
        errors.push(VALUE_RULE.to_string());
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// A token of the label selector language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token<'a> {
    End,
    OpenPar,
    ClosedPar,
    Comma,
    /// `!`
    DoesNotExist,
    Equals,
    DoubleEquals,
    NotEquals,
    GreaterThan,
    LessThan,
    In,
    NotIn,
    Identifier(&'a str),
}

impl<'a> Token<'a> {
    /// The text of the token, as error messages quote it.
    fn literal(self) -> &'a str {
        match self {
            Token::End => "",
            Token::OpenPar => "(",
            Token::ClosedPar => ")",
            Token::Comma => ",",
            Token::DoesNotExist => "!",
            Token::Equals => "=",
            Token::DoubleEquals => "==",
            Token::NotEquals => "!=",
            Token::GreaterThan => ">",
            Token::LessThan => "<",
            Token::In => "in",
            Token::NotIn => "notin",
            Token::Identifier(s) => s,
        }
    }

    /// Where a key or value is expected, `in` and `notin` are plain words
    /// (`in in (notin)` is valid); this is apimachinery's `Values` context.
    fn as_value(self) -> Token<'a> {
        match self {
            Token::In => Token::Identifier("in"),
            Token::NotIn => Token::Identifier("notin"),
            other => other,
        }
    }
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special_symbol(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits a label selector into tokens, ending with [`Token::End`].
///
/// Like apimachinery's lexer: whitespace separates tokens; a run of special
/// symbols is read greedily (`!=`, `==`, then single symbols); anything else
/// up to whitespace or a special symbol is a word, `in`/`notin` being keywords.
fn tokenize(input: &str) -> Vec<Token<'_>> {
    let bytes = input.as_bytes();
    let mut tokens = Vec::new();
    let mut pos = 0;
    loop {
        while pos < bytes.len() && is_whitespace(bytes[pos]) {
            pos += 1;
        }
        let Some(&b) = bytes.get(pos) else {
            tokens.push(Token::End);
            return tokens;
        };
        if is_special_symbol(b) {
            let (token, len) = match (b, bytes.get(pos + 1)) {
                (b'!', Some(b'=')) => (Token::NotEquals, 2),
                (b'=', Some(b'=')) => (Token::DoubleEquals, 2),
                (b'!', _) => (Token::DoesNotExist, 1),
                (b'=', _) => (Token::Equals, 1),
                (b'(', _) => (Token::OpenPar, 1),
                (b')', _) => (Token::ClosedPar, 1),
                (b',', _) => (Token::Comma, 1),
                (b'>', _) => (Token::GreaterThan, 1),
                _ => (Token::LessThan, 1),
            };
            tokens.push(token);
            pos += len;
        } else {
            let start = pos;
            while pos < bytes.len() && !is_whitespace(bytes[pos]) && !is_special_symbol(bytes[pos])
            {
                pos += 1;
            }
            // Token boundaries are ASCII bytes, so this slice is on char boundaries.
            let word = &input[start..pos];
            tokens.push(match word {
                "in" => Token::In,
                "notin" => Token::NotIn,
                _ => Token::Identifier(word),
            });
        }
    }
}

/// Recursive-descent parser over the tokens of one label selector.
struct Parser<'a> {
    tokens: Vec<Token<'a>>,
    position: usize,
}

fn unexpected(found: Token<'_>, expected: &'static str) -> RequirementError {
    RequirementError::UnexpectedToken {
        found: found.literal().to_string(),
        expected,
    }
}

impl<'a> Parser<'a> {
    /// The next token, as a key or value (`in`/`notin` as words).
    fn peek_value(&self) -> Token<'a> {
        self.peek_raw().as_value()
    }

    fn peek_raw(&self) -> Token<'a> {
        self.tokens
            .get(self.position)
            .copied()
            .unwrap_or(Token::End)
    }

    /// Consumes the next token as it was scanned (keywords kept).
    fn next_raw(&mut self) -> Token<'a> {
        let token = self.peek_raw();
        if token != Token::End {
            self.position += 1;
        }
        token
    }

    /// Consumes the next token as a key or value.
    fn next_value(&mut self) -> Token<'a> {
        self.next_raw().as_value()
    }

    fn parse(mut self) -> Result<Vec<Requirement>> {
        let mut requirements = Vec::new();
        loop {
            match self.peek_value() {
                Token::Identifier(_) | Token::DoesNotExist => {
                    requirements.push(self.requirement()?);
                    match self.next_value() {
                        Token::End => return Ok(requirements),
                        Token::Comma => match self.peek_value() {
                            Token::Identifier(_) | Token::DoesNotExist => {}
                            found => {
                                return Err(SelectorError::UnexpectedToken {
                                    found: found.literal().to_string(),
                                    expected: "identifier after ','",
                                })
                            }
                        },
                        found => {
                            return Err(SelectorError::UnexpectedToken {
                                found: found.literal().to_string(),
                                expected: "',' or 'end of string'",
                            })
                        }
                    }
                }
                Token::End => return Ok(requirements),
                found => {
                    return Err(SelectorError::UnexpectedToken {
                        found: found.literal().to_string(),
                        expected: "!, identifier, or 'end of string'",
                    })
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, RequirementError> {
        let mut token = self.next_value();
        let negated = token == Token::DoesNotExist;
        if negated {
            token = self.next_value();
        }
        let Token::Identifier(key) = token else {
            return Err(unexpected(token, "identifier"));
        };
        validate_label_key(key)?;
        // `!key` is complete by itself: what follows must be `,` or the end,
        // which the caller checks (so `!a=b` fails on the `=`).
        if negated {
            return Requirement::new(key, Operator::DoesNotExist, Vec::new());
        }
        if matches!(self.peek_value(), Token::End | Token::Comma) {
            return Requirement::new(key, Operator::Exists, Vec::new());
        }
        let operator = match self.next_raw() {
            Token::In => Operator::In,
            Token::NotIn => Operator::NotIn,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::NotEquals => Operator::NotEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            found => return Err(unexpected(found, "in, notin, =, ==, !=, gt, lt")),
        };
        let values = match operator {
            Operator::In | Operator::NotIn => self.value_set()?,
            _ => vec![self.exact_value()?],
        };
        Requirement::new(key, operator, values)
    }

    /// `( a, b )`, returned sorted and without duplicates. Empty entries are
    /// the empty value, so `()`, `(,)` and `(a,)` all contain `""`.
    fn value_set(&mut self) -> Result<Vec<String>, RequirementError> {
        let open = self.next_value();
        if open != Token::OpenPar {
            return Err(unexpected(open, "'('"));
        }
        let mut values = std::collections::BTreeSet::new();
        match self.peek_value() {
            Token::ClosedPar => {
                self.next_value();
                values.insert(String::new());
            }
            Token::Identifier(_) | Token::Comma => loop {
                match self.next_value() {
                    Token::Identifier(value) => {
                        values.insert(value.to_string());
                        match self.peek_value() {
                            Token::Comma => {}
                            Token::ClosedPar => {
                                self.next_value();
                                break;
                            }
                            found => return Err(unexpected(found, "',' or ')'")),
                        }
                    }
                    Token::Comma => {
                        if values.is_empty() {
                            values.insert(String::new());
                        }
                        match self.peek_value() {
                            Token::ClosedPar => {
                                self.next_value();
                                values.insert(String::new());
                                break;
                            }
                            Token::Comma => {
                                values.insert(String::new());
                            }
                            _ => {}
                        }
                    }
                    found => return Err(unexpected(found, "',', or identifier")),
                }
            },
            found => return Err(unexpected(found, "',', ')' or identifier")),
        }
        Ok(values.into_iter().collect())
    }

    /// The value after `=`, `==`, `!=`, `>` or `<`; empty when the
    /// requirement ends there (`key=`).
    fn exact_value(&mut self) -> Result<String, RequirementError> {
        match self.peek_value() {
            Token::End | Token::Comma => Ok(String::new()),
            _ => match self.next_value() {
                Token::Identifier(value) => Ok(value.to_string()),
                found => Err(unexpected(found, "identifier")),
            },
        }
    }
}

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

    /// An entry that a selector matches always has the selector's required
    /// label bits, and entries ruled out by the bits do not match.
    #[test]
    fn required_label_bits_never_rule_out_a_match() {
        let label_sets: Vec<Vec<(&str, &str)>> = vec![
            vec![],
            vec![("app", "web")],
            vec![("app", "web"), ("shard", "s7"), ("tier", "")],
            vec![("app", "load"), ("shard", "s70"), ("version", "v1.3")],
            vec![("example.com/role", "db"), ("shard", "s7")],
        ];
        let selectors = [
            "", "app=web", "app==web", "shard in (s7)", "shard in (s7,s70)", "app=web,shard=s7", "tier=", "app!=web",
            "!tier", "shard notin (s7)", "example.com/role=db,shard=s7", "app", "app=load,version=v1.3",
        ];
        let mut ruled_out = 0;
        for labels in &label_sets {
            let entry = crate::event::IndexEntry::new(1, "", "", labels.iter().copied(), []);
            for text in selectors {
                let selector = LabelSelector::parse(text).unwrap();
                let matches = selector.matches(|key| entry.label(key));
                let may = entry.may_have_labels(selector.required_label_bits());
                assert!(may || !matches, "{text:?} on {labels:?}: ruled out a match");
                ruled_out += usize::from(!may);
            }
        }
        assert!(ruled_out > 10, "the bits rule out entries ({ruled_out})");
    }

    /// (selector, labels, selected)
    type MatchCase = (&'static str, &'static [(&'static str, &'static str)], bool);
    /// (input, canonical string, terms as (field, negated, value))
    type FieldCase = (
        &'static str,
        &'static str,
        &'static [(&'static str, bool, &'static str)],
    );

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn parses_valid_label_selectors_to_their_canonical_form() {
        // (input, canonical string as labels.Selector.String() prints it)
        let cases = [
            ("", ""),
            ("   \t", ""),
            // Examples of the "Labels and Selectors" docs page.
            ("environment = production", "environment=production"),
            ("tier != frontend", "tier!=frontend"),
            (
                "environment=production,tier!=frontend",
                "environment=production,tier!=frontend",
            ),
            (
                "environment in (production, qa)",
                "environment in (production,qa)",
            ),
            (
                "tier notin (frontend, backend)",
                "tier notin (backend,frontend)",
            ),
            ("partition", "partition"),
            ("!partition", "!partition"),
            (
                "partition,environment notin (qa)",
                "environment notin (qa),partition",
            ),
            (
                "environment,environment notin (frontend)",
                "environment,environment notin (frontend)",
            ),
            (
                "environment in (production),tier in (frontend)",
                "environment in (production),tier in (frontend)",
            ),
            // apimachinery behaviour.
            ("x==a", "x==a"),
            ("x=", "x="),
            ("x=,y=b", "x=,y=b"),
            ("x in (a,,b)", "x in (,a,b)"),
            ("x in (b,a,b)", "x in (a,b)"),
            ("x in ()", "x in ()"),
            ("x notin (,)", "x notin ()"),
            ("x notin (, a)", "x notin (,a)"),
            ("x>1", "x>1"),
            (
                "in in (in),notin notin (notin)",
                "in in (in),notin notin (notin)",
            ),
            ("example.com/app=web", "example.com/app=web"),
            (
                "kubefold.io/cluster in (member1, member2)",
                "kubefold.io/cluster in (member1,member2)",
            ),
            (" x  in  ( a , b ) , y ", "x in (a,b),y"),
            ("\tx\n=\ra", "x=a"),
            ("z=1,x=2,y", "x=2,y,z=1"),
            ("x=b,x=a", "x=b,x=a"),
            ("!x,y!=z", "!x,y!=z"),
        ];
        for (input, canonical) in cases {
            let selector = LabelSelector::parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(selector.to_string(), canonical, "input {input:?}");
        }
    }

    #[test]
    fn x_less_than_negative_is_rejected_like_kubernetes_as_label_value() {
        // "-1" is not a valid label value, so kube-apiserver rejects `x<-1`
        // although the integer parses. The canonical test above must not
        // contain it: check it here explicitly.
        let error = LabelSelector::parse("x<-1").unwrap_err();
        assert!(error
            .to_string()
            .starts_with("unable to parse requirement: invalid label value \"-1\" for key \"x\""));
    }

    #[test]
    fn parses_requirement_structure() {
        let selector = LabelSelector::parse("tier notin (frontend, backend),!canary,x>5").unwrap();
        assert_eq!(
            selector.requirements,
            vec![
                Requirement {
                    key: "canary".into(),
                    operator: Operator::DoesNotExist,
                    values: vec![]
                },
                Requirement {
                    key: "tier".into(),
                    operator: Operator::NotIn,
                    values: vec!["backend".into(), "frontend".into()],
                },
                Requirement {
                    key: "x".into(),
                    operator: Operator::GreaterThan,
                    values: vec!["5".into()]
                },
            ]
        );
        let empty_set = LabelSelector::parse("x in ()").unwrap();
        assert_eq!(empty_set.requirements[0].values, vec![String::new()]);
        assert!(LabelSelector::parse("").unwrap().is_empty());
        assert!(!LabelSelector::parse("a").unwrap().is_empty());
    }

    #[test]
    fn rejects_invalid_label_selectors_with_kubernetes_messages() {
        let ops = "in, notin, =, ==, !=, gt, lt";
        let cases: Vec<(&str, String)> = vec![
            ("x=a,", "found '', expected: identifier after ','".into()),
            ("x=a,,y", "found ',', expected: identifier after ','".into()),
            (",x", "found ',', expected: !, identifier, or 'end of string'".into()),
            ("(x)", "found '(', expected: !, identifier, or 'end of string'".into()),
            ("x=a b", "found 'b', expected: ',' or 'end of string'".into()),
            ("x=a=b", "found '=', expected: ',' or 'end of string'".into()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            ("a b", format!("unable to parse requirement: found 'b', expected: {ops}")),
            ("x (a)", format!("unable to parse requirement: found '(', expected: {ops}")),
            ("x !a", format!("unable to parse requirement: found '!', expected: {ops}")),
            ("!", "unable to parse requirement: found '', expected: identifier".into()),
            ("!!x", "unable to parse requirement: found '!', expected: identifier".into()),
            ("x=(a)", "unable to parse requirement: found '(', expected: identifier".into()),
            ("x in a", "unable to parse requirement: found 'a', expected: '('".into()),
            ("x notin", "unable to parse requirement: found '', expected: '('".into()),
            ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
            ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'".into()),
            ("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier".into()),
            ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier".into()),
            ("x in (", "unable to parse requirement: found '', expected: ',', ')' or identifier".into()),
            (
                "x>a",
                "unable to parse requirement: invalid values for key \"x\": for 'gt', 'lt' operators, \
                 the value must be an integer, not \"a\""
                    .into(),
            ),
            (
                "x<",
                "unable to parse requirement: invalid values for key \"x\": for 'gt', 'lt' operators, \
                 the value must be an integer, not \"\""
                    .into(),
            ),
            ("-x=a", format!("unable to parse requirement: invalid label key \"-x\": name part {NAME_RULE}")),
            ("/x", "unable to parse requirement: invalid label key \"/x\": prefix part must be non-empty".into()),
            (
                "Example.com/x",
                format!("unable to parse requirement: invalid label key \"Example.com/x\": prefix part {SUBDOMAIN_RULE}"),
            ),
            (
                "example.com/",
                format!(
                    "unable to parse requirement: invalid label key \"example.com/\": name part must be non-empty; \
                     name part {NAME_RULE}"
                ),
            ),
            (
                "a/b/c",
                format!(
                    "unable to parse requirement: invalid label key \"a/b/c\": a valid label key {NAME_RULE} \
                     with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
                ),
            ),
            ("x=a/b", format!("unable to parse requirement: invalid label value \"a/b\" for key \"x\": {VALUE_RULE}")),
            ("x in (a,-b)", format!("unable to parse requirement: invalid label value \"-b\" for key \"x\": {VALUE_RULE}")),
        ];
        for (input, message) in cases {
            match LabelSelector::parse(input) {
                Ok(selector) => panic!("{input:?} parsed as {selector}"),
                Err(error) => assert_eq!(error.to_string(), message, "input {input:?}"),
            }
        }
    }

    #[test]
    fn enforces_key_and_value_lengths() {
        let name63 = "a".repeat(63);
        let name64 = "a".repeat(64);
        let prefix253 = format!(
            "{}.{}.{}.{}",
            "b".repeat(63),
            "b".repeat(63),
            "b".repeat(63),
            "b".repeat(61)
        );
        assert_eq!(prefix253.len(), 253);
        let prefix254 = format!("{prefix253}b");
        assert!(LabelSelector::parse(&format!("{name63}={name63}")).is_ok());
        assert!(LabelSelector::parse(&format!("{prefix253}/{name63}")).is_ok());
        assert_eq!(
            LabelSelector::parse(&format!("{name64}=a")).unwrap_err().to_string(),
            format!("unable to parse requirement: invalid label key \"{name64}\": name part must be no more than 63 bytes")
        );
        assert_eq!(
            LabelSelector::parse(&format!("{prefix254}/a")).unwrap_err().to_string(),
            format!(
                "unable to parse requirement: invalid label key \"{prefix254}/a\": prefix part must be no more than 253 bytes"
            )
        );
        assert_eq!(
            LabelSelector::parse(&format!("a={name64}")).unwrap_err().to_string(),
            format!("unable to parse requirement: invalid label value \"{name64}\" for key \"a\": must be no more than 63 bytes")
        );
        // Non-ASCII is not in the label alphabet.
        assert!(LabelSelector::parse("é=a").is_err());
        assert!(LabelSelector::parse("a=é").is_err());
    }

    #[test]
    fn matches_like_kubernetes() {
        let cases: &[MatchCase] = &[
            ("", &[], true),
            ("", &[("a", "b")], true),
            (
                "environment=production",
                &[("environment", "production")],
                true,
            ),
            ("environment=production", &[("environment", "qa")], false),
            ("environment=production", &[], false),
            (
                "environment==production",
                &[("environment", "production")],
                true,
            ),
            // "tier != frontend" also selects resources without a tier label.
            ("tier!=frontend", &[("tier", "backend")], true),
            ("tier!=frontend", &[("tier", "frontend")], false),
            ("tier!=frontend", &[], true),
            (
                "environment in (production, qa)",
                &[("environment", "qa")],
                true,
            ),
            (
                "environment in (production, qa)",
                &[("environment", "dev")],
                false,
            ),
            ("environment in (production, qa)", &[], false),
            ("tier notin (frontend, backend)", &[("tier", "cache")], true),
            (
                "tier notin (frontend, backend)",
                &[("tier", "frontend")],
                false,
            ),
            ("tier notin (frontend, backend)", &[], true),
            ("partition", &[("partition", "")], true),
            ("partition", &[], false),
            ("!partition", &[], true),
            ("!partition", &[("partition", "a")], false),
            (
                "partition,environment notin (qa)",
                &[("partition", "x"), ("environment", "prod")],
                true,
            ),
            (
                "partition,environment notin (qa)",
                &[("partition", "x"), ("environment", "qa")],
                false,
            ),
            ("x=", &[("x", "")], true),
            ("x=", &[], false),
            ("x in ()", &[("x", "")], true),
            ("x in ()", &[("x", "a")], false),
            ("x>5", &[("x", "6")], true),
            ("x>5", &[("x", "5")], false),
            ("x>5", &[("x", "abc")], false),
            ("x>5", &[], false),
            ("x<5", &[("x", "-7")], true),
            ("x<5", &[("x", "+4")], true),
            ("x<5", &[("x", "5")], false),
            ("x=a,x=b", &[("x", "a")], false),
            (
                "kubefold.io/cluster=member1",
                &[("kubefold.io/cluster", "member1")],
                true,
            ),
        ];
        for (input, pairs, selected) in cases {
            let selector = LabelSelector::parse(input).unwrap();
            let map = labels(pairs);
            let vec: Vec<(String, String)> = map.clone().into_iter().collect();
            assert_eq!(
                selector.matches_map(&map),
                *selected,
                "{input:?} on {pairs:?}"
            );
            assert_eq!(
                selector.matches_pairs(&vec),
                *selected,
                "{input:?} on {pairs:?}"
            );
            assert_eq!(
                selector.matches(|k| map.get(k).map(String::as_str)),
                *selected,
                "{input:?} on {pairs:?}"
            );
        }
    }

    #[test]
    fn take_key_removes_the_cluster_condition() {
        let mut selector = LabelSelector::parse(
            "kubefold.io/cluster in (member1,member2),app=web,kubefold.io/cluster!=member3",
        )
        .unwrap();
        let taken = selector.take_key("kubefold.io/cluster");
        assert_eq!(selector.to_string(), "app=web");
        assert_eq!(taken.len(), 2);
        assert_eq!(
            taken[0].to_string(),
            "kubefold.io/cluster in (member1,member2)"
        );
        assert_eq!(taken[1].to_string(), "kubefold.io/cluster!=member3");
        assert!(taken[0].matches_value(Some("member2")));
        assert!(!taken[1].matches_value(Some("member3")));
        assert!(selector.take_key("absent").is_empty());
        assert_eq!(selector.to_string(), "app=web");
    }

    #[test]
    fn builds_selectors_from_label_selector_objects() {
        let object = serde_json::json!({
            "matchLabels": {"app": "web", "tier": "frontend"},
            "matchExpressions": [
                {"key": "env", "operator": "NotIn", "values": ["qa", "dev"]},
                {"key": "canary", "operator": "DoesNotExist"},
            ]
        });
        let selector = LabelSelector::from_label_selector(&object).unwrap();
        assert_eq!(
            selector.to_string(),
            "app=web,!canary,env notin (dev,qa),tier=frontend"
        );
        assert!(LabelSelector::from_label_selector(&serde_json::json!({}))
            .unwrap()
            .is_empty());
        let bad = serde_json::json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]});
        assert_eq!(
            LabelSelector::from_label_selector(&bad)
                .unwrap_err()
                .to_string(),
            "unable to parse requirement: found 'Gt', expected: In, NotIn, Exists, DoesNotExist"
        );
        let empty_in =
            serde_json::json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]});
        assert_eq!(
            LabelSelector::from_label_selector(&empty_in).unwrap_err().to_string(),
            "unable to parse requirement: invalid values for key \"a\": for 'in', 'notin' operators, values set can't be empty"
        );
    }

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
