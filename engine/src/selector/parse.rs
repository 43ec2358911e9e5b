//! The label selector language: the rules of label keys and values, the
//! tokens, and a recursive-descent parser over them.

use super::label::{Operator, Requirement};
use super::{RequirementError, Result, SelectorError};

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
pub(super) fn validate_label_key(key: &str) -> Result<(), RequirementError> {
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
pub(super) fn check_label_value(value: &str) -> Result<(), String> {
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
pub(super) enum Token<'a> {
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
pub(super) fn tokenize(input: &str) -> Vec<Token<'_>> {
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
pub(super) struct Parser<'a> {
    pub(super) tokens: Vec<Token<'a>>,
    pub(super) position: usize,
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

    pub(super) fn parse(mut self) -> Result<Vec<Requirement>> {
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


#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::LabelSelector;

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

}
