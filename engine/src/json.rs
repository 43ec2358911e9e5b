//! Reading parsed JSON through one interface: serde_json's [`Value`], or a
//! [`Node`], the lighter tree [`crate::scan`] builds of an object's text at
//! ingest (strings borrowed from the text, members kept in a list: no key
//! is allocated or hashed, and a pod's row and fields read a few dozen of
//! them). Table rows and selectable fields are computed from either.

use std::borrow::Cow;

use serde_json::{Number, Value};

/// Read-only access to a parsed JSON value.
pub trait Json: Sized {
    /// An object's member (the last value of a repeated key, as serde_json reads it).
    fn get(&self, key: &str) -> Option<&Self>;
    /// An array's elements.
    fn as_array(&self) -> Option<&[Self]>;
    /// An object's members in order.
    fn members(&self) -> Option<Vec<(&str, &Self)>>;
    /// A string's text.
    fn as_str(&self) -> Option<&str>;
    /// A number that is an integer in `i64`'s range.
    fn as_i64(&self) -> Option<i64>;
    /// A boolean.
    fn as_bool(&self) -> Option<bool>;
    /// Whether the value is `null`.
    fn is_null(&self) -> bool;
    /// Whether the value is an object.
    fn is_object(&self) -> bool;
    /// The value as a serde_json [`Value`] (built, unless it is one).
    fn as_value(&self) -> Cow<'_, Value>;

    /// The value at a JSON pointer (RFC 6901: `~1` and `~0` escapes, array
    /// indexes without sign or leading zero), as [`Value::pointer`] finds
    /// it, without allocating unless a token has an escape.
    fn walk(&self, pointer: &str) -> Option<&Self> {
        if pointer.is_empty() {
            return Some(self);
        }
        let rest = pointer.strip_prefix('/')?;
        // Pointers are short: searched byte by byte (a `split` calls memchr
        // for each token).
        let escaped = rest.bytes().any(|b| b == b'~');
        let mut at = self;
        let mut start = 0;
        while start <= rest.len() {
            let end = rest.as_bytes()[start..].iter().position(|&b| b == b'/').map_or(rest.len(), |p| start + p);
            let token = &rest[start..end];
            start = end + 1;
            let token: Cow<'_, str> = if escaped { Cow::Owned(token.replace("~1", "/").replace("~0", "~")) } else { Cow::Borrowed(token) };
            at = match at.as_array() {
                Some(items) => {
                    if token.starts_with('+') || (token.len() > 1 && token.starts_with('0')) {
                        return None;
                    }
                    items.get(token.parse::<usize>().ok()?)?
                }
                None => at.get(&token)?,
            };
        }
        Some(at)
    }
}

impl Json for Value {
    fn get(&self, key: &str) -> Option<&Value> {
        self.as_object()?.get(key)
    }

    fn as_array(&self) -> Option<&[Value]> {
        Value::as_array(self).map(Vec::as_slice)
    }

    fn members(&self) -> Option<Vec<(&str, &Value)>> {
        Some(self.as_object()?.iter().map(|(k, v)| (k.as_str(), v)).collect())
    }

    fn as_str(&self) -> Option<&str> {
        Value::as_str(self)
    }

    fn as_i64(&self) -> Option<i64> {
        Value::as_i64(self)
    }

    fn as_bool(&self) -> Option<bool> {
        Value::as_bool(self)
    }

    fn is_null(&self) -> bool {
        Value::is_null(self)
    }

    fn is_object(&self) -> bool {
        Value::is_object(self)
    }

    fn as_value(&self) -> Cow<'_, Value> {
        Cow::Borrowed(self)
    }
}

/// A JSON value read from text: strings without escapes and member names
/// borrowed from it, an object's members in a list in their first place,
/// with the last value of a repeated key (as serde_json reads an object).
#[derive(Debug, Clone, PartialEq)]
pub enum Node<'a> {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A number, as serde_json decodes it.
    Number(Number),
    /// A string, borrowed from the text unless it has escapes.
    String(Cow<'a, str>),
    /// An array.
    Array(Vec<Node<'a>>),
    /// An object's members.
    Object(Vec<(Cow<'a, str>, Node<'a>)>),
}

impl Node<'_> {
    /// The same value as a serde_json [`Value`].
    pub fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Number(n) => Value::Number(n.clone()),
            Node::String(s) => Value::String(s.to_string()),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Object(members) => Value::Object(members.iter().map(|(k, v)| (k.to_string(), v.to_value())).collect()),
        }
    }
}

impl<'a> Node<'a> {
    /// Sets the member `key` of an object (added last when new); a value
    /// that is not an object is made an empty one first.
    pub fn set(&mut self, key: &'a str, value: Node<'a>) {
        if !matches!(self, Node::Object(_)) {
            *self = Node::Object(Vec::new());
        }
        let Node::Object(members) = self else { unreachable!("made an object above") };
        match members.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => members.push((Cow::Borrowed(key), value)),
        }
    }

    /// The member `key` of an object, added (as `null`) when missing.
    pub fn entry(&mut self, key: &'a str) -> Option<&mut Node<'a>> {
        let Node::Object(members) = self else { return None };
        let at = match members.iter().position(|(k, _)| k == key) {
            Some(at) => at,
            None => {
                members.push((Cow::Borrowed(key), Node::Null));
                members.len() - 1
            }
        };
        Some(&mut members[at].1)
    }
}

impl Json for Node<'_> {
    fn get(&self, key: &str) -> Option<&Self> {
        match self {
            Node::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&[Self]> {
        match self {
            Node::Array(items) => Some(items),
            _ => None,
        }
    }

    fn members(&self) -> Option<Vec<(&str, &Self)>> {
        match self {
            Node::Object(members) => Some(members.iter().map(|(k, v)| (k.as_ref(), v)).collect()),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Node::String(s) => Some(s),
            _ => None,
        }
    }

    fn as_i64(&self) -> Option<i64> {
        match self {
            Node::Number(n) => n.as_i64(),
            _ => None,
        }
    }

    fn as_bool(&self) -> Option<bool> {
        match self {
            Node::Bool(b) => Some(*b),
            _ => None,
        }
    }

    fn is_null(&self) -> bool {
        matches!(self, Node::Null)
    }

    fn is_object(&self) -> bool {
        matches!(self, Node::Object(_))
    }

    fn as_value(&self) -> Cow<'_, Value> {
        Cow::Owned(self.to_value())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn walk_finds_what_value_pointer_finds() {
        let value = json!({
            "a": {"b/c": [10, {"d~e": "x"}], "": {"": 1}},
            "list": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            "s": "text"
        });
        let pointers = [
            "", "/a", "/a/b~1c", "/a/b~1c/1/d~0e", "/a/b~1c/01", "/a/b~1c/+1", "/a/b~1c/-1", "/a/b~1c/2", "/list/10", "/list/010",
            "/a//", "/a/", "/s/0", "/missing", "a", "/list/1/x", "/a/b~1c/1/d~01e",
        ];
        let text = serde_json::to_vec(&value).unwrap();
        let node = crate::scan::prune(&text, &crate::table::Keep::All).unwrap();
        assert_eq!(node.to_value(), value);
        for pointer in pointers {
            assert_eq!(Json::walk(&value, pointer), value.pointer(pointer), "{pointer}");
            assert_eq!(Json::walk(&node, pointer).map(Node::to_value).as_ref(), value.pointer(pointer), "{pointer} of a node");
        }
    }
}
