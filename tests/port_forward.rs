//! `kubectl port-forward` with kubectl 1.33, which tunnels SPDY/3.1 in a
//! WebSocket (`SPDY/3.1+portforward.k8s.io`): through kubefold (the
//! qualified name, and the member's under `/clusters/{c}`) and against the
//! simulator directly, an HTTP request through the forwarded port is
//! answered with the pod's name; a port nothing listens on gets kubelet's
//! error. kubefold passes the tunnel's bytes through.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn port_forward_fetches_the_pods_name_over_http() {
    if let Some(missing) = kubectl_missing(&["1.33"]) {
        println!("SKIPPED: {missing}");
        return;
    }
    let members = demo_members(1, 0.0);
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    kf.wait_ready();
    wait_for(Duration::from_secs(30), "web-1 running", || {
        kf.get("/api/v1/namespaces/default/pods/web-1_member1").1.contains("\"phase\":\"Running\"")
    });
    let bin = kubectl_version("1.33");
    let scoped = format!("{}/clusters/member1", kf.url);
    let sim = members[0].1.url();
    for (server, pod) in [(kf.url.as_str(), "pod/web-1_member1"), (scoped.as_str(), "pod/web-1"), (sim.as_str(), "pod/web-1")] {
        let forward = PortForward::start(&bin, server, &["-n", "default", pod, "0:80"]);
        assert!(forward.local_port.is_some(), "{server} {pod}: {}", forward.stderr.lock().unwrap());
        // Two connections, each its own pair of streams in the one session.
        for path in ["/", "/again"] {
            let (code, body) = forward.get(path);
            assert_eq!((code, body.as_str()), (200, "web-1\n"), "{server} {pod} {path}: {}", forward.stderr.lock().unwrap());
        }
    }
    // A port the pod does not declare: kubelet's refusal on the error stream.
    let forward = PortForward::start(&bin, &kf.url, &["-n", "default", "pod/web-1_member1", "0:81"]);
    assert!(forward.local_port.is_some(), "{}", forward.stderr.lock().unwrap());
    let (code, _) = forward.get("/");
    assert_ne!(code, 200);
    wait_for(Duration::from_secs(10), "kubectl's error naming the port", || {
        forward.stderr.lock().unwrap().contains("failed to connect to localhost:81 inside namespace")
    });
    drop(forward);
    kf.stop();
}
