//! Authentication: who a request is, as kube-apiserver decides it. A
//! verified client certificate (`--client-ca-file`: CN is the user, O the
//! groups, [`super::connection`]) wins over a bearer token from
//! `--token-auth-file`; a request with neither is `system:anonymous` in
//! `system:unauthenticated` when anonymous access is on, else 401. An
//! unknown bearer token is always 401. Authenticated users are also in
//! `system:authenticated`.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use actix_web::http::header::{HeaderMap, AUTHORIZATION};
use kubefold_engine::status::Status;
use tracing::{debug, warn};

use super::connection::PeerCertificate;
use super::{Error, Result, ANONYMOUS_USER, AUTHENTICATED_GROUP, UNAUTHENTICATED_GROUP};

/// A malformed line of a token file. Never contains the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TokenFileError {
    /// Line number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub reason: String,
}

/// The user a request was authenticated as; in the request extensions
/// (`req.extensions().get::<User>()`) of every request past the middleware.
/// On the open health paths only when the caller may see their details:
/// it authenticated, or authentication is off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    /// User name (the token file's user, the certificate's CN, or `system:anonymous`).
    pub name: String,
    /// UID from the token file; empty otherwise.
    pub uid: String,
    /// Groups, `system:authenticated` or `system:unauthenticated` included.
    pub groups: Vec<String>,
}

impl User {
    /// `system:anonymous` in `system:unauthenticated`.
    pub fn anonymous() -> User {
        User { name: ANONYMOUS_USER.to_string(), uid: String::new(), groups: vec![UNAUTHENTICATED_GROUP.to_string()] }
    }

    /// Whether the request carried no credential.
    pub fn is_anonymous(&self) -> bool {
        self.name == ANONYMOUS_USER
    }

    /// Whether the user is in `group`.
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }

    pub(crate) fn authenticated(name: String, uid: String, mut groups: Vec<String>) -> User {
        if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            groups.push(AUTHENTICATED_GROUP.to_string());
        }
        User { name, uid, groups }
    }
}

/// Who a request is, from its credentials: the configured authenticators.
#[derive(Debug)]
pub(crate) struct Authenticator {
    /// Token → user; `None` without a token file.
    pub(crate) tokens: Option<HashMap<String, User>>,
    /// Whether verified client certificates authenticate.
    pub(crate) client_certificates: bool,
    /// Whether requests without credentials are served as anonymous.
    pub(crate) anonymous: bool,
}

impl Authenticator {
    /// The user of a request with the connection's verified client
    /// `certificate` (if any) and `headers`; `None`: 401 Unauthorized.
    pub(crate) fn authenticate(&self, certificate: Option<&PeerCertificate>, headers: &HeaderMap) -> Option<User> {
        if self.client_certificates {
            if let Some(cert) = certificate {
                // As kube-apiserver: a certificate without CN authenticates nobody.
                if let Some(cn) = cert.common_name.as_ref().filter(|cn| !cn.is_empty()) {
                    return Some(User::authenticated(cn.clone(), String::new(), cert.organizations.clone()));
                }
            }
        }
        if let Some(tokens) = &self.tokens {
            if let Some(token) = bearer_token(headers) {
                return tokens.get(token).cloned();
            }
        }
        self.anonymous.then(User::anonymous)
    }
}

/// Parses a token file (`token,user,uid,"group1,group2"` per line, kube-apiserver's
/// format): a map from token to user. Blank lines and lines starting with `#`
/// are skipped; a malformed line, an empty token or user, or a token defined twice
/// is an error naming the line (never the token).
pub fn parse_token_file(text: &str) -> Result<HashMap<String, User>, TokenFileError> {
    let mut tokens: HashMap<String, User> = HashMap::new();
    let mut defined_on: HashMap<String, usize> = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let line_number = index + 1;
        let fail = |reason: String| TokenFileError { line: line_number, reason };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let fields = split_csv_line(line).map_err(|r| fail(r.to_string()))?;
        if fields.len() < 3 {
            return Err(fail(format!(
                "expected at least 3 columns (token,user,uid[,\"group1,group2\"]), found {}",
                fields.len()
            )));
        }
        if fields.len() > 4 {
            return Err(fail(format!(
                "expected at most 4 columns, found {}: quote the groups column (\"group1,group2\")",
                fields.len()
            )));
        }
        let token = &fields[0];
        if token.is_empty() {
            return Err(fail("empty token".to_string()));
        }
        if token.chars().any(char::is_whitespace) {
            return Err(fail("the token contains whitespace".to_string()));
        }
        let name = fields[1].trim();
        if name.is_empty() {
            return Err(fail("empty user name".to_string()));
        }
        if let Some(first) = defined_on.get(token) {
            return Err(fail(format!("the token is already defined on line {first}")));
        }
        let groups = fields
            .get(3)
            .map(|g| g.split(',').map(str::trim).filter(|g| !g.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        defined_on.insert(token.clone(), line_number);
        tokens.insert(token.clone(), User::authenticated(name.to_string(), fields[2].trim().to_string(), groups));
    }
    Ok(tokens)
}

/// Splits one CSV line into fields: `,` separates, a field may be quoted with
/// `"` (a quote inside written `""`), leading spaces of a field are dropped
/// (Go's csv reader with TrimLeadingSpace, as kube-apiserver reads it).
fn split_csv_line(line: &str) -> Result<Vec<String>, &'static str> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while matches!(chars.peek(), Some(' ' | '\t')) {
            chars.next();
        }
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("unterminated quoted field"),
                }
            }
            fields.push(field);
            match chars.next() {
                None => return Ok(fields),
                Some(',') => continue,
                Some(_) => return Err("unexpected text after a closing quote"),
            }
        }
        loop {
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => {
                    fields.push(field);
                    break;
                }
                Some('"') => return Err("a quote inside an unquoted field (quote the whole field)"),
                Some(c) => field.push(c),
            }
        }
    }
}

/// The bearer token of an `Authorization: Bearer <token>` header
/// (kube-apiserver's rules: scheme case-insensitive, empty token ignored).
pub(crate) fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let mut parts = value.splitn(3, ' ');
    let scheme = parts.next()?;
    let token = parts.next()?;
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

pub(crate) fn read_token_file(path: &Path) -> Result<HashMap<String, User>> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| Error::TokenFileUnreadable { path: path.to_path_buf(), source })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        if let Ok(meta) = std::fs::metadata(path) {
            // Group access is usual (root:kubefold 0640, a Kubernetes fsGroup); world access is not.
            if meta.permissions().mode() & 0o007 != 0 {
                warn!(path = %path.display(), mode = format!("{:o}", meta.permissions().mode() & 0o777), "Token file is accessible to every user; make it mode 0600 or 0640.");
            }
        }
    }
    let tokens = parse_token_file(&text).map_err(|source| Error::TokenFileInvalid { path: path.to_path_buf(), source })?;
    let users: HashSet<&str> = tokens.values().map(|u| u.name.as_str()).collect();
    debug!(path = %path.display(), tokens = tokens.len(), users = users.len(), "Token file read.");
    Ok(tokens)
}

/// 401 Unauthorized, as kube-apiserver answers a missing or bad credential.
pub fn unauthorized() -> Status {
    Status::new(401, "Unauthorized", "Unauthorized")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file_reads_kube_apiserver_format() {
        let text = "# comment\n\nt1,alice,1001,\"kubefold:viewers,team-a\"\n  t2, bob ,1002\nt3,carol,,\"\"\r\nt4,dave,1004,ops\n";
        let tokens = parse_token_file(text).unwrap();
        assert_eq!(tokens.len(), 4);
        assert_eq!(tokens["t1"].name, "alice");
        assert_eq!(tokens["t1"].uid, "1001");
        assert_eq!(tokens["t1"].groups, ["kubefold:viewers", "team-a", AUTHENTICATED_GROUP]);
        assert_eq!(tokens["t2"].name, "bob");
        assert_eq!(tokens["t2"].groups, [AUTHENTICATED_GROUP]);
        assert_eq!(tokens["t3"].uid, "");
        assert_eq!(tokens["t3"].groups, [AUTHENTICATED_GROUP]);
        assert_eq!(tokens["t4"].groups, ["ops", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn token_file_quotes_and_spaces() {
        let tokens = parse_token_file("\"t,1\",\"a \"\"b\"\"\",u, \" g1 , g2 \"").unwrap();
        let u = &tokens["t,1"];
        assert_eq!(u.name, "a \"b\"");
        assert_eq!(u.groups, ["g1", "g2", AUTHENTICATED_GROUP]);
    }

    #[test]
    fn token_file_errors_name_the_line_not_the_token() {
        let cases = [
            ("t1,alice,1\nsecret-token,bob\n", 2, "at least 3 columns"),
            ("# c\nsecret-token,alice,1,g1,g2\n", 2, "quote the groups"),
            (",alice,1\n", 1, "empty token"),
            ("secret-token,,1\n", 1, "empty user"),
            ("secret-token,alice,1\nsecret-token,bob,2\n", 2, "already defined on line 1"),
            ("secret-token,alice,1,\"g1,g2\n", 1, "unterminated"),
            ("secret-token,alice,1,\"g1\"x\n", 1, "after a closing quote"),
            ("secret-token,al\"ice,1\n", 1, "quote inside"),
            ("secret token,alice,1\n", 1, "whitespace"),
        ];
        for (text, line, reason) in cases {
            let err = parse_token_file(text).unwrap_err();
            assert_eq!(err.line, line, "{text:?}: {err}");
            assert!(err.reason.contains(reason), "{text:?}: {err}");
            assert!(!err.to_string().contains("secret"), "{text:?}: the error shows the token: {err}");
        }
    }

    #[test]
    fn bearer_tokens_follow_kube_apiserver() {
        let mut headers = HeaderMap::new();
        let mut with = |value: &str| {
            headers.insert(AUTHORIZATION, value.parse().unwrap());
            bearer_token(&headers).map(str::to_string)
        };
        assert_eq!(with("Bearer abc").as_deref(), Some("abc"));
        assert_eq!(with("bearer abc extra").as_deref(), Some("abc"));
        assert_eq!(with("  Bearer abc  ").as_deref(), Some("abc"));
        assert_eq!(with("Basic YWxpY2U6cHc="), None);
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("Bearer"), None);
    }
}
