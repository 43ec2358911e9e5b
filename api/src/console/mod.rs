//! The web console under `/ui`, on kubefold's own listener.
//!
//! - [`fleet`]: `/ui/fleet`, the fleet page rendered on the server (members,
//!   their sync state and counts, the index's resource versions, the
//!   estimator endpoints), and `/ui/fleet?watch=true`, the same data as a
//!   live stream of JSON lines (a watch, long-running as any other).
//! - The page shell (`/ui`, `/ui/search`) and its script and style sheet,
//!   embedded in the binary: no CDN, no build step.
//!
//! The shell holds no data: it is served to anyone, before authentication,
//! so that a browser without credentials gets the sign-in form. Everything
//! it shows comes from requests that pass kubefold's authentication and
//! authorization like any other: the fleet page and stream (non-resource
//! paths, granted to `kubefold:admins` or by a configured rule), the admin
//! estimator watch, and the Kubernetes API itself (lists as Tables with
//! continue tokens, watches, gets and events) for search. The script sends
//! the bearer token kept in the tab's session storage as
//! `Authorization: Bearer`; a client certificate works as well.

pub mod fleet;

use actix_web::body::{EitherBody, MessageBody};
use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::{header, Method};
use actix_web::middleware::Next;
use actix_web::{web, HttpResponse};

/// The page shell: header, sign-in form and the view the script fills.
const SHELL: &str = include_str!("assets/shell.html");
/// The script of every page.
const SCRIPT: &str = include_str!("assets/console.js");
/// The style sheet of every page.
pub const STYLE: &str = include_str!("assets/console.css");

/// Paths of the shell and its assets: public, holding no data.
fn public_asset(path: &str) -> Option<(&'static str, &'static str)> {
    match path {
        "/ui" | "/ui/" | "/ui/search" => Some(("text/html; charset=utf-8", SHELL)),
        "/ui/assets/console.js" => Some(("text/javascript; charset=utf-8", SCRIPT)),
        "/ui/assets/console.css" => Some(("text/css; charset=utf-8", STYLE)),
        _ => None,
    }
}

/// Middleware (outermost) answering `GET` of the shell and its assets
/// before authentication; everything else goes on to the application.
pub async fn shell(
    req: ServiceRequest,
    next: Next<impl MessageBody + 'static>,
) -> Result<ServiceResponse<EitherBody<impl MessageBody>>, actix_web::Error> {
    let asset = (req.method() == Method::GET || req.method() == Method::HEAD).then(|| public_asset(req.path())).flatten();
    let Some((content_type, body)) = asset else {
        return Ok(next.call(req).await?.map_into_left_body());
    };
    let response = HttpResponse::Ok()
        .content_type(content_type)
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .insert_header(("X-Content-Type-Options", "nosniff"))
        .insert_header(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
        .body(body);
    Ok(req.into_response(response).map_into_right_body())
}

/// The console loads nothing from elsewhere and runs no inline script.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'";

/// Registers the console's authenticated routes.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/ui/fleet", web::get().to(fleet::page));
}

/// Escapes text for HTML element content and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_and_assets_are_public_and_nothing_else_is() {
        assert!(public_asset("/ui").is_some_and(|(t, b)| t.starts_with("text/html") && b.contains("login-form")));
        assert!(public_asset("/ui/search").is_some());
        assert!(public_asset("/ui/assets/console.js").is_some_and(|(t, _)| t.starts_with("text/javascript")));
        assert_eq!(public_asset("/ui/fleet"), None);
        assert_eq!(public_asset("/ui/assets/../fleet"), None);
        assert_eq!(public_asset("/api/v1/pods"), None);
    }

    #[test]
    fn assets_load_nothing_from_elsewhere() {
        for asset in [SHELL, SCRIPT, STYLE] {
            assert!(!asset.contains("http://") && !asset.contains("https://"), "an asset names another host");
        }
        assert!(!SHELL.contains("<script>"), "inline scripts are refused by the content security policy");
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
    }
}
