//! Delete and delete collection: graceful pod deletion, finalizers,
//! propagation to dependents, and the body a delete answers with.

use super::*;

/// The grace period a pod deletion gets (`podStrategy.CheckGracefulDelete`).
pub(super) fn pod_grace_period(pod: &Value, options: &DeleteOptions) -> i64 {
    let requested = options
        .grace_period_seconds
        .unwrap_or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64().unwrap_or(30));
    let unscheduled = pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
    let terminal = matches!(pod["status"]["phase"].as_str(), Some("Succeeded" | "Failed"));
    if unscheduled || terminal {
        0
    } else if requested < 0 {
        1
    } else {
        requested
    }
}

/// The body of a successful delete: the object, or a `Status` for types
/// whose registry does not return the deleted object.
pub(super) fn deleted_body(rt: &ResourceType, object: &Object, name: &str) -> Bytes {
    if returns_deleted_object(rt) {
        return object.bytes();
    }
    let mut details = json!({"name": name, "kind": rt.plural, "uid": object.uid()});
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    Bytes::from(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}).to_string(),
    )
}

/// DELETE of one object.
pub fn delete(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    name: &str,
    options: &DeleteOptions,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    let namespace = if rt.namespaced { namespace } else { None };
    let key = store::key(namespace, name);
    let existing = get(store, resource, namespace, name)?;
    check_preconditions(&rt, name, &existing, options.uid.as_deref(), options.resource_version.as_deref(), false)?;
    if opts.dry_run {
        return Ok(Written { code: 200, body: deleted_body(&rt, &existing, name) });
    }
    let mut object = existing.value();
    let meta = &object["metadata"];
    let being_deleted = meta["deletionTimestamp"].is_string();
    let finalizers = meta["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    let grace = if is(&rt, "", "pods") { pod_grace_period(&object, options) } else { 0 };
    let uid = existing.uid().into_owned();
    if being_deleted {
        // A repeated delete: a graceful pod deletion can be shortened to 0 (force).
        if is(&rt, "", "pods") && grace == 0 && !finalizers {
            let change = store.remove(resource, &key, object).ok_or_else(|| ApiError::Internal("object vanished".into()))?;
            return Ok(Written { code: 200, body: deleted_body(&rt, &change.object, name) });
        }
        return Ok(Written { code: 200, body: existing.bytes() });
    }
    let namespace_object = is(&rt, "", "namespaces");
    let foreground = options.propagation == Propagation::Foreground;
    if finalizers || grace > 0 || namespace_object || foreground {
        let deletion = opts.now + chrono::Duration::seconds(grace);
        {
            let meta = meta_mut(&mut object);
            meta.insert("deletionTimestamp".into(), json!(ts(deletion)));
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
            if foreground {
                let finalizers = meta.entry("finalizers").or_insert_with(|| json!([]));
                if let Some(list) = finalizers.as_array_mut() {
                    if !list.iter().any(|f| f == "foregroundDeletion") {
                        list.push(json!("foregroundDeletion"));
                    }
                }
            }
        }
        if namespace_object {
            object["status"]["phase"] = json!("Terminating");
        }
        let change = store.put(resource, &key, object);
        if namespace_object {
            store.schedule(Task::FinishNamespaceDeletion { name: name.into(), uid });
        } else if foreground {
            store.schedule(Task::ForegroundDeletion { resource, key, uid, namespace: namespace.map(str::to_string) });
        } else if grace > 0 && !finalizers {
            let after = KUBELET_DELETE_DELAY.min(Duration::from_secs(grace as u64));
            store.schedule(Task::FinishPodDeletion { resource, key, uid, after });
        }
        return Ok(Written { code: 200, body: change.object.bytes() });
    }
    let change = store.remove(resource, &key, object).ok_or_else(|| ApiError::Internal("object vanished".into()))?;
    store.schedule(Task::CollectDependents {
        namespace: namespace.map(str::to_string),
        owner_uid: uid,
        orphan: options.propagation == Propagation::Orphan,
    });
    Ok(Written { code: 200, body: deleted_body(&rt, &change.object, name) })
}

/// DELETE of a collection: deletes every selected object, answers with the
/// list of the objects as they were (`Store.DeleteCollection`).
pub fn delete_collection(
    store: &mut Store,
    resource: usize,
    namespace: Option<&str>,
    selectors: &crate::sim::list::ListOptions,
    options: &DeleteOptions,
    opts: &WriteOptions,
) -> Result<Written> {
    let rt = store.resource(resource).clone();
    let selected: Vec<Arc<Object>> = store
        .range(resource, &store::prefix(namespace))
        .filter(|(_, o)| selectors.matches(o))
        .map(|(_, o)| o.clone())
        .collect();
    let mut items = Vec::with_capacity(selected.len());
    for object in &selected {
        let value = object.value();
        let ns = meta_str(&value, "namespace").map(str::to_string);
        let name = meta_str(&value, "name").unwrap_or_default().to_string();
        match delete(store, resource, ns.as_deref(), &name, options, opts) {
            Ok(_) | Err(ApiError::NotFound { .. }) => {}
            Err(error) => return Err(error),
        }
        let mut item = bytes::BytesMut::new();
        object.write_list_item(&mut item);
        items.push(item.freeze());
    }
    let mut body = format!(
        "{{\"kind\":{},\"apiVersion\":{},\"metadata\":{{\"resourceVersion\":\"{}\"}},\"items\":[",
        json!(rt.list_kind()),
        json!(rt.api_version()),
        store.rv()
    )
    .into_bytes();
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(item);
    }
    body.extend_from_slice(b"]}");
    Ok(Written { code: 200, body: Bytes::from(body) })
}
