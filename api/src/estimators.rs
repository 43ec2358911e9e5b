//! Admin REST of the scheduler-estimator endpoints: `GET /admin/v1/estimators`
//! (the table as a JSON list), `GET /admin/v1/estimators/{cluster}` (one row,
//! or a 404 `Status`) and `GET /admin/v1/estimators?watch=true` (JSON lines:
//! the current table as `ADDED` events, then every change as `ADDED`,
//! `MODIFIED` or `DELETED`, the shape of a Kubernetes watch stream).
//!
//! Handlers translate only: they read the resolver's shared
//! [`Estimators`] handle, which the app carries as `web::Data<Estimators>`.

use std::time::Duration;

use actix_web::web::{self, Bytes};
use actix_web::{HttpRequest, HttpResponse};
use futures::StreamExt;
use kubefold_actors::resolver::{EstimatorEvent, EstimatorEventType, Estimators};
use kubefold_engine::status::Status;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::broadcast;

use crate::query::flag;
use crate::respond;

/// The resource name used in `Status` details.
const RESOURCE: &str = "estimators";

/// Registers the routes. The app must carry the table:
/// `.app_data(web::Data::from(estimators.clone()))` with an `Arc<Estimators>`.
pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/admin/v1/estimators", web::get().to(list))
        .route("/admin/v1/estimators/{cluster}", web::get().to(get));
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListQuery {
    #[serde(default)]
    watch: Option<String>,
    #[serde(default)]
    timeout_seconds: Option<String>,
}

fn parse_query(req: &HttpRequest) -> Result<(bool, Option<Duration>), Status> {
    let query: ListQuery =
        serde_urlencoded::from_str(req.query_string()).map_err(|e| Status::bad_request(format!("invalid query: {e}")))?;
    let watch = flag(&query.watch)?;
    let timeout = match query.timeout_seconds.as_deref() {
        None | Some("") => None,
        Some(text) => Some(Duration::from_secs(
            text.parse::<u64>().map_err(|_| Status::bad_request(format!("invalid timeoutSeconds {text:?}")))?,
        )),
    };
    Ok((watch, timeout))
}

/// `GET /admin/v1/estimators[?watch=true[&timeoutSeconds=N]]`.
pub async fn list(req: HttpRequest, estimators: web::Data<Estimators>) -> HttpResponse {
    match parse_query(&req) {
        Err(status) => respond::status(&status),
        Ok((true, timeout)) => watch(estimators.into_inner(), timeout),
        Ok((false, _)) => match serde_json::to_vec(&estimators.table()) {
            Ok(body) => respond::json_bytes(body),
            Err(e) => respond::status(&Status::internal(e.to_string())),
        },
    }
}

/// `GET /admin/v1/estimators/{cluster}`.
pub async fn get(path: web::Path<String>, estimators: web::Data<Estimators>) -> HttpResponse {
    let cluster = path.into_inner();
    match estimators.get(&cluster) {
        Some(row) => match serde_json::to_vec(&row) {
            Ok(body) => respond::json_bytes(body),
            Err(e) => respond::status(&Status::internal(e.to_string())),
        },
        None if !estimators.control_plane_synced() => respond::status(
            &Status::new(
                404,
                "NotFound",
                format!("{RESOURCE} \"{cluster}\" not found: the control plane's estimator Services are not listed yet"),
            )
            .with_details("", RESOURCE, &cluster),
        ),
        None => respond::status(&Status::not_found("", RESOURCE, &cluster)),
    }
}

fn line(event: &EstimatorEvent) -> Bytes {
    let mut bytes = serde_json::to_vec(event).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

fn error_line(status: &Status) -> Bytes {
    Bytes::from(format!("{}\n", json!({"type": "ERROR", "object": status.to_json()})))
}

/// The watch stream: the table as `ADDED`, then the changes, until the
/// client leaves, `timeout` passes, or the client falls so far behind that
/// changes were lost (then an `ERROR` line with a 410 `Status`, as a
/// Kubernetes watch ends; the client lists again).
fn watch(estimators: std::sync::Arc<Estimators>, timeout: Option<Duration>) -> HttpResponse {
    let (table, events) = estimators.watch();
    let initial = futures::stream::iter(
        table
            .into_iter()
            .map(|object| line(&EstimatorEvent { event_type: EstimatorEventType::Added, object }))
            .collect::<Vec<_>>(),
    );
    let live = futures::stream::unfold(Some(events), |state| async move {
        let mut events: broadcast::Receiver<EstimatorEvent> = state?;
        match events.recv().await {
            Ok(event) => Some((line(&event), Some(events))),
            Err(broadcast::error::RecvError::Lagged(n)) => {
                let status = Status::expired(format!("estimator watch fell {n} changes behind and was closed; list again"));
                Some((error_line(&status), None))
            }
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    let stream = initial.chain(live);
    let body = match timeout {
        Some(t) => stream.take_until(tokio::time::sleep(t)).boxed_local(),
        None => stream.boxed_local(),
    };
    HttpResponse::Ok()
        .content_type("application/json")
        .insert_header(("Cache-Control", "no-cache"))
        .streaming(body.map(Ok::<Bytes, actix_web::Error>))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use actix_web::body::MessageBody;
    use actix_web::{test, App};
    use kubefold_actors::fleet::Fleet;
    use kubefold_actors::resolver::{EstimatorConfig, EstimatorStatus, Resolver};
    use kubefold_engine::index::Index;
    use kubefold_engine::names::NameStyle;
    use kubefold_store::{Options, Store};
    use serde_json::Value;

    use super::*;

    fn resolver(dir: &std::path::Path, estimators: Arc<Estimators>) -> Resolver {
        let store = Store::open(dir, &Options::default()).unwrap();
        let fleet = Fleet::new(kubefold_engine::resources::builtin(), NameStyle::Qualified, store, Index::default(), 0);
        let config = EstimatorConfig {
            static_endpoints: [("member1".to_string(), "127.0.0.1:4000".to_string())].into(),
            ..EstimatorConfig::default()
        };
        Resolver::new(config, vec!["member1".into(), "member2".into()], estimators, fleet).unwrap()
    }

    /// Reads the next chunk of a streaming body.
    async fn next_chunk(body: &mut std::pin::Pin<Box<impl MessageBody>>) -> Option<Bytes> {
        let chunk = tokio::time::timeout(
            Duration::from_secs(5),
            futures::future::poll_fn(|cx| body.as_mut().poll_next(cx)),
        )
        .await
        .expect("a chunk within 5s");
        chunk.map(|r| r.map_err(|_| ()).expect("body chunk"))
    }

    #[actix_web::test]
    async fn list_get_404_and_watch() {
        let dir = tempfile::tempdir().unwrap();
        let estimators = Estimators::new();
        let mut resolver = resolver(dir.path(), estimators.clone());
        resolver.set_members(vec!["member1".into(), "member2".into()]);
        let app = test::init_service(App::new().app_data(web::Data::from(estimators.clone())).configure(configure)).await;

        let rows: Vec<EstimatorStatus> =
            test::call_and_read_body_json(&app, test::TestRequest::get().uri("/admin/v1/estimators").to_request()).await;
        let summary: Vec<(String, String)> = rows.iter().map(|r| (r.endpoint.cluster.clone(), r.endpoint.rule.to_string())).collect();
        assert_eq!(summary, vec![("member1".into(), "static".into()), ("member2".into(), "dnsFallback".into())]);

        let row: Value =
            test::call_and_read_body_json(&app, test::TestRequest::get().uri("/admin/v1/estimators/member1").to_request()).await;
        assert_eq!(row, json!({"cluster": "member1", "addresses": ["127.0.0.1:4000"], "rule": "static", "probe": null}));

        let resp = test::call_service(&app, test::TestRequest::get().uri("/admin/v1/estimators/nope").to_request()).await;
        assert_eq!(resp.status().as_u16(), 404);
        let status: Value = test::read_body_json(resp).await;
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "NotFound");
        assert_eq!(status["message"], "estimators \"nope\" not found");

        let resp = test::call_service(&app, test::TestRequest::get().uri("/admin/v1/estimators?watch=maybe").to_request()).await;
        assert_eq!(resp.status().as_u16(), 400);

        let resp = test::call_service(&app, test::TestRequest::get().uri("/admin/v1/estimators?watch=true").to_request()).await;
        assert_eq!(resp.status().as_u16(), 200);
        let mut body = Box::pin(resp.into_body());
        let first: Value = serde_json::from_slice(&next_chunk(&mut body).await.unwrap()).unwrap();
        assert_eq!((first["type"].as_str(), first["object"]["cluster"].as_str()), (Some("ADDED"), Some("member1")));
        let second: Value = serde_json::from_slice(&next_chunk(&mut body).await.unwrap()).unwrap();
        assert_eq!((second["type"].as_str(), second["object"]["cluster"].as_str()), (Some("ADDED"), Some("member2")));
        // A change after the watch started arrives as its own line.
        resolver.set_members(vec!["member1".into()]);
        let third = next_chunk(&mut body).await.unwrap();
        assert!(third.ends_with(b"\n"));
        let third: Value = serde_json::from_slice(&third).unwrap();
        assert_eq!((third["type"].as_str(), third["object"]["cluster"].as_str()), (Some("DELETED"), Some("member2")));
        drop(body);

        let resp = test::call_service(&app, test::TestRequest::get().uri("/admin/v1/estimators?watch=1&timeoutSeconds=1").to_request()).await;
        let mut body = Box::pin(resp.into_body());
        let only: Value = serde_json::from_slice(&next_chunk(&mut body).await.unwrap()).unwrap();
        assert_eq!(only["object"]["cluster"], "member1");
        assert!(next_chunk(&mut body).await.is_none(), "the stream ends after timeoutSeconds");
    }

    #[actix_web::test]
    async fn unknown_clusters_before_the_control_plane_is_listed_say_why() {
        let estimators = Estimators::new();
        let app = test::init_service(App::new().app_data(web::Data::from(estimators.clone())).configure(configure)).await;
        let resp = test::call_service(&app, test::TestRequest::get().uri("/admin/v1/estimators/member1").to_request()).await;
        assert_eq!(resp.status().as_u16(), 404);
        let status: Value = test::read_body_json(resp).await;
        assert_eq!(
            status["message"],
            "estimators \"member1\" not found: the control plane's estimator Services are not listed yet"
        );
        let rows: Vec<Value> =
            test::call_and_read_body_json(&app, test::TestRequest::get().uri("/admin/v1/estimators").to_request()).await;
        assert!(rows.is_empty());
    }
}
