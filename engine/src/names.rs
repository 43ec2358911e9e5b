//! Qualified names: an object `web-0` of cluster `member1` is served as
//! `web-0_member1`.
//!
//! `_` cannot occur in a Kubernetes object name (DNS-1123 subdomain or label)
//! nor in a cluster name (DNS-1123 label), so the split at the last `_` is exact.

use serde::{Deserialize, Serialize};

/// The character that joins an object's name and its cluster.
pub const SEPARATOR: char = '_';

/// How object names are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NameStyle {
    /// `<name>_<cluster>`: unique across the fleet (the default).
    #[default]
    Qualified,
    /// Names unchanged; same-named objects of several clusters share a name.
    Original,
}

impl std::str::FromStr for NameStyle {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "qualified" => Ok(NameStyle::Qualified),
            "original" => Ok(NameStyle::Original),
            other => Err(format!("unknown name style {other:?}: expected qualified or original")),
        }
    }
}

/// `<name>_<cluster>`.
pub fn qualify(name: &str, cluster: &str) -> String {
    let mut out = String::with_capacity(name.len() + cluster.len() + 1);
    out.push_str(name);
    out.push(SEPARATOR);
    out.push_str(cluster);
    out
}

/// A name as a client wrote it in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestedName<'a> {
    /// `<name>_<cluster>`.
    Qualified {
        /// The member's own name of the object.
        name: &'a str,
        /// The owning cluster.
        cluster: &'a str,
    },
    /// A bare name, resolved against the index (unique, or ambiguous).
    Bare(&'a str),
}

/// Parses a name from a request path or body.
pub fn parse(requested: &str) -> RequestedName<'_> {
    match requested.rsplit_once(SEPARATOR) {
        Some((name, cluster)) if !name.is_empty() && !cluster.is_empty() => {
            RequestedName::Qualified { name, cluster }
        }
        _ => RequestedName::Bare(requested),
    }
}

/// Whether `cluster` is a valid cluster name: a DNS-1123 label (at most 63
/// lowercase alphanumerics or `-`, starting and ending alphanumeric).
pub fn is_valid_cluster_name(cluster: &str) -> bool {
    let bytes = cluster.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && bytes[0] != b'-'
        && bytes[bytes.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qualified_names_round_trip() {
        let q = qualify("web-0", "member1");
        assert_eq!(q, "web-0_member1");
        assert_eq!(parse(&q), RequestedName::Qualified { name: "web-0", cluster: "member1" });
        assert_eq!(parse("web-0"), RequestedName::Bare("web-0"));
    }

    #[test]
    fn longest_names_round_trip() {
        let name = format!("{}.{}", "a".repeat(126), "b".repeat(126));
        assert_eq!(name.len(), 253);
        let cluster = "c".repeat(63);
        assert!(is_valid_cluster_name(&cluster));
        let q = qualify(&name, &cluster);
        assert_eq!(parse(&q), RequestedName::Qualified { name: &name, cluster: &cluster });
    }

    #[test]
    fn degenerate_separators_are_bare() {
        assert_eq!(parse("_member1"), RequestedName::Bare("_member1"));
        assert_eq!(parse("web_"), RequestedName::Bare("web_"));
    }

    #[test]
    fn cluster_names_are_dns_labels() {
        assert!(is_valid_cluster_name("member-1"));
        assert!(!is_valid_cluster_name("Member1"));
        assert!(!is_valid_cluster_name("member_1"));
        assert!(!is_valid_cluster_name("-m"));
        assert!(!is_valid_cluster_name(&"c".repeat(64)));
    }
}
