//! Label selectors: requirements, their canonical form, matching, and
//! the selector of a `metav1.LabelSelector` object.

use std::collections::BTreeMap;
use std::fmt;

use super::parse::{check_label_value, tokenize, validate_label_key, Parser};
use super::{RequirementError, Result};

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
    /// The [`label_bit`]s of the labels every match must have
    /// (`key=value`, `key==value`, `key in (value)`): an entry without all
    /// of them cannot match.
    pub fn required_label_bits(&self) -> u64 {
        self.requirements
            .iter()
            .filter_map(|r| match (&r.operator, r.values.as_slice()) {
                (Operator::Equals | Operator::DoubleEquals | Operator::In, [value]) => Some(label_bit(&r.key, value)),
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


/// The bit of `key=value` in an index entry's label bits
/// ([`crate::event::IndexEntry::may_have_labels`]).
pub fn label_bit(key: &str, value: &str) -> u64 {
    // FNV-1a over key, a separator no label key contains, and value.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes().chain(std::iter::once(b'=')).chain(value.bytes()) {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    1 << (hash >> 58)
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

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
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

}
