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
//!
//! - [`label`]: label selectors, their requirements and matching.
//! - [`parse`]: the label selector language: key and value rules, tokens, parser.
//! - [`field`]: field selectors, parsed, printed and matched.


pub mod field;
pub mod label;
pub mod parse;

pub use field::{FieldRequirement, FieldSelector};
pub use label::{label_bit, LabelSelector, Operator, Requirement};

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
