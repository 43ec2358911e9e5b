//! What kubefold does not serve yet answers at once with a Kubernetes
//! `Status`, never by holding the connection: a streaming subresource
//! (`exec`, `attach`, `portforward`, `proxy`) that [`crate::stream_proxy`]
//! does not forward (those of pods, services and nodes) gets 405
//! MethodNotAllowed saying so, before any request body is waited for.

use kubefold_engine::status::Status;

/// Subresources that stream over an upgraded connection or proxy to what
/// runs in a member; [`crate::stream_proxy`] forwards those of pods,
/// services and nodes, the others are answered here.
pub const STREAMING_SUBRESOURCES: [&str; 4] = ["exec", "attach", "portforward", "proxy"];

/// The resource, name and subresource of a path naming a streaming
/// subresource (`[/clusters/{c}]/api/v1/namespaces/{ns}/pods/{name}/exec`,
/// `/api/v1/nodes/{name}/proxy/{rest...}`), if it does.
fn streaming_target(path: &str) -> Option<(&str, &str, &str)> {
    let segments: Vec<&str> = path.trim_end_matches('/').split('/').skip(1).collect();
    let rest = match segments.as_slice() {
        ["clusters", _, rest @ ..] => rest,
        rest => rest,
    };
    let tail = match rest {
        ["api", _, tail @ ..] => tail,
        ["apis", _, _, tail @ ..] => tail,
        _ => return None,
    };
    let (resource, name, sub) = match tail {
        ["namespaces", _, resource, name, sub, ..] => (*resource, *name, *sub),
        [resource, name, sub, ..] => (*resource, *name, *sub),
        _ => return None,
    };
    STREAMING_SUBRESOURCES.contains(&sub).then_some((resource, name, sub))
}

/// 405 MethodNotAllowed for a request to a streaming subresource, whatever
/// its method and headers; `None` for any other path.
pub fn streaming(path: &str) -> Option<Status> {
    let (resource, name, sub) = streaming_target(path)?;
    let message = format!(
        "{resource}/{sub} is not served by kubefold yet: streaming subresources (exec, attach, portforward, proxy) are not proxied to member clusters; connect to the member cluster directly"
    );
    Some(Status::new(405, "MethodNotAllowed", message).with_details("", resource, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_subresources_are_recognised_in_every_form() {
        for path in [
            "/api/v1/namespaces/default/pods/web-0_member1/exec",
            "/clusters/member1/api/v1/namespaces/default/pods/web-0/attach",
            "/api/v1/namespaces/default/pods/web-0/portforward",
            "/api/v1/namespaces/default/pods/web-0:8080/proxy/metrics",
            "/api/v1/namespaces/default/services/web:http/proxy/",
            "/api/v1/nodes/member1-node-1/proxy/stats/summary",
        ] {
            let status = streaming(path).unwrap_or_else(|| panic!("{path}"));
            assert_eq!((status.code, status.reason.as_str()), (405, "MethodNotAllowed"), "{path}");
            assert!(status.message.contains("connect to the member cluster directly"), "{path}");
        }
        for path in [
            "/api/v1/namespaces/default/pods/web-0/log",
            "/api/v1/namespaces/default/pods",
            "/api/v1/namespaces/exec",
            "/api/v1/namespaces/proxy/pods/x",
            "/apis/apps/v1/namespaces/a/deployments/d/scale",
            "/version",
        ] {
            assert!(streaming(path).is_none(), "{path}");
        }
        assert_eq!(streaming_target("/api/v1/namespaces/a/pods/p/exec"), Some(("pods", "p", "exec")));
    }
}
