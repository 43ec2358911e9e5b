//! The web console (`/ui`) in a real browser: headless Chromium driven
//! through WebDriver (Debian's `chromium` and `chromium-driver`) against
//! kubefold over three demo members, with a bearer token. Skips, saying
//! what is missing, where the browser or its driver is not installed.
//!
//! With `KUBEFOLD_CONSOLE_SCREENSHOTS=DIR`, the fleet and search pages are
//! also saved as `DIR/console-fleet.png` and `DIR/console-search.png` (the
//! pictures of the README).

mod common;
mod webdriver;

use std::time::Duration;

use common::*;
use kubefold_testdata::sim::faults::{Faults, Offline, OfflineMode};
use serde_json::json;
use webdriver::Browser;

const ADMIN_TOKEN: &str = "console-admin-token";

fn phase(browser: &Browser, member: &str) -> String {
    browser.text(&format!("#members tr[data-member=\"{member}\"] .phase"))
}

fn screenshot(browser: &Browser, name: &str) {
    if let Ok(dir) = std::env::var("KUBEFOLD_CONSOLE_SCREENSHOTS") {
        browser.save_screenshot(&std::path::Path::new(&dir).join(name));
    }
}

/// The keys (`namespace/name`) of the search's result rows, in order.
fn result_keys(browser: &Browser) -> Vec<String> {
    browser
        .script("return [...document.querySelectorAll('#results tbody tr')].map((r) => r.dataset.key);", json!([]))
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn the_console_signs_in_shows_the_fleet_live_and_searches_every_cluster() {
    if let Some(missing) = webdriver::missing() {
        eprintln!("skipped: {missing}");
        return;
    }
    let members = demo_members(3, 0.0);
    let (dir, data) = data_dir();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, format!("{ADMIN_TOKEN},admin,1,kubefold:admins\n")).unwrap();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &["--token-auth-file", tokens.to_str().unwrap()]);
    let client = reqwest::blocking::Client::new();
    wait_for(Duration::from_secs(60), "kubefold ready", || {
        client.get(format!("{}/readyz", kf.url)).bearer_auth(ADMIN_TOKEN).send().is_ok_and(|r| r.status().is_success())
    });
    let browser = Browser::start(1280, 860);

    // Without a token: the sign-in form, and no fleet.
    browser.open(&format!("{}/ui", kf.url));
    browser.wait(Duration::from_secs(20), "the sign-in form", |b| b.script("return !document.getElementById('login').hidden;", json!([])) == json!(true));
    assert_eq!(browser.texts("#members tr[data-member]").len(), 0, "nothing is shown before signing in");

    // A wrong token is refused with a message saying so.
    browser.type_into("#token", "not-a-token");
    browser.click("#login-submit");
    browser.wait(Duration::from_secs(20), "the wrong token refused", |b| b.text("#login-error").contains("refused this token"));
    assert!(browser.text("#login-error").contains("401 Unauthorized"), "{}", browser.text("#login-error"));
    assert_eq!(browser.script("return sessionStorage.getItem('kubefold.token');", json!([])), json!(null), "a refused token is not kept");

    // The right one shows the fleet: three members, Synced.
    browser.type_into("#token", ADMIN_TOKEN);
    browser.click("#login-submit");
    browser.wait(Duration::from_secs(30), "three members Synced", |b| (1..=3).all(|i| phase(b, &format!("member{i}")) == "Synced"));
    assert!(browser.text("#who").contains("admin"), "{}", browser.text("#who"));
    let head: u64 = browser.text("#stats dd[data-stat=headResourceVersion]").parse().expect("the head resourceVersion is shown");
    assert!(head > 0);
    let pods: Vec<String> = browser.texts("#members tr[data-member=member1] td.types");
    assert!(pods[0].contains("pods "), "object counts per type: {pods:?}");
    browser.wait(Duration::from_secs(20), "the live stream", |b| b.text("#live").contains("live"));

    // A member that stops answering turns Stale, and Synced again, without a reload.
    browser.script("window.consoleLoaded = true;", json!([]));
    let member2 = &members[1].1;
    member2.set_faults(Faults { offline: Some(Offline { mode: OfflineMode::Refuse, for_ms: None }), ..Faults::default() });
    browser.wait(Duration::from_secs(30), "member2 Stale", |b| phase(b, "member2") == "Stale");
    assert!(!browser.text("#members tr[data-member=member2] td.error").is_empty(), "the last error is shown");
    assert_eq!(phase(&browser, "member1"), "Synced");
    member2.set_faults(Faults::default());
    browser.wait(Duration::from_secs(60), "member2 Synced again", |b| phase(b, "member2") == "Synced");
    assert_eq!(browser.script("return window.consoleLoaded === true;", json!([])), json!(true), "the page was not reloaded");
    screenshot(&browser, "console-fleet.png");
    browser.type_into("#member-filter", "member2");
    browser.wait(Duration::from_secs(10), "the fleet filtered by name", |b| b.texts("#members tbody tr").len() == 1);
    assert!(browser.text("#members tbody").contains("member2"));

    // A search for app=web lists pods of every cluster; the search is in the URL.
    browser.open(&format!("{}/ui/search?type=pods&labels=app%3Dweb", kf.url));
    browser.wait(Duration::from_secs(30), "pods of app=web", |b| b.texts("#results tbody tr").len() >= 6);
    let header = browser.texts("#results thead th");
    let cluster_column = header.iter().position(|h| h == "CLUSTER").expect("a CLUSTER column");
    let clusters: std::collections::BTreeSet<String> = browser
        .script("return [...document.querySelectorAll('#results tbody tr')].map((r) => r.cells[arguments[0]].innerText);", json!([cluster_column]))
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().to_string())
        .collect();
    assert!(clusters.len() >= 2, "pods of two clusters or more: {clusters:?}");
    assert!(browser.texts("#results tbody tr").iter().all(|row| row.contains("web-")), "only app=web pods");
    assert_eq!(browser.script("return document.getElementById('q-labels').value;", json!([])), json!("app=web"));

    // A pod created in a member appears without a reload.
    browser.script("window.searchLoaded = true;", json!([]));
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "console-new-pod", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx"}]}
    });
    let created = client
        .post(format!("{}/clusters/member3/api/v1/namespaces/default/pods", kf.url))
        .bearer_auth(ADMIN_TOKEN)
        .json(&pod)
        .send()
        .unwrap();
    assert!(created.status().is_success(), "create: {}", created.text().unwrap_or_default());
    browser.wait(Duration::from_secs(30), "the new pod listed", |b| b.texts("#results tbody tr").iter().any(|r| r.contains("console-new-pod")));
    assert_eq!(browser.script("return window.searchLoaded === true;", json!([])), json!(true), "the page was not reloaded");

    // A row opens the object as YAML, with its events.
    browser.click("#results tbody tr[data-name^=\"web-0_\"]");
    browser.wait(Duration::from_secs(20), "the object as YAML", |b| b.text("#object-yaml").contains("kind: Pod"));
    let yaml = browser.text("#object-yaml");
    assert!(yaml.contains("name: web-0_") && yaml.contains("app: web"), "{yaml}");
    let events = browser.texts("#object-events tbody tr");
    assert!(!events.is_empty(), "the pod's events are listed: {}", browser.text("#object"));
    screenshot(&browser, "console-search.png");

    // A pod deleted goes from the table, again without a reload.
    let deleted = client.delete(format!("{}/api/v1/namespaces/default/pods/console-new-pod_member3", kf.url)).bearer_auth(ADMIN_TOKEN).send().unwrap();
    assert!(deleted.status().is_success(), "delete: {}", deleted.text().unwrap_or_default());
    browser.wait(Duration::from_secs(30), "the deleted pod gone", |b| !b.texts("#results tbody tr").iter().any(|r| r.contains("console-new-pod")));
    assert!(browser.text("#search-status").starts_with("9 shown"), "{}", browser.text("#search-status"));
    assert_eq!(browser.script("return window.searchLoaded === true;", json!([])), json!(true), "the page was not reloaded");

    // Many results are paged with continue tokens, 50 rows a page.
    let names = result_keys;
    browser.open(&format!("{}/ui/search?type=events", kf.url));
    browser.wait(Duration::from_secs(30), "a page of events", |b| b.texts("#results tbody tr").len() == 50);
    let listed: serde_json::Value = client.get(format!("{}/api/v1/events", kf.url)).bearer_auth(ADMIN_TOKEN).send().unwrap().json().unwrap();
    let total = listed["items"].as_array().unwrap().len();
    assert!(total > 100, "enough events for several pages: {total}");
    let mut seen = std::collections::BTreeSet::new();
    seen.extend(names(&browser));
    for page in 2..=total.div_ceil(50) {
        browser.click("#next-page");
        browser.wait(Duration::from_secs(30), "the next page", |b| b.text("#search-status").contains(&format!("page {page}")));
        seen.extend(names(&browser));
    }
    assert_eq!(seen.len(), total, "every event once, over the pages");
    assert_eq!(browser.script("return document.getElementById('next-page').disabled;", json!([])), json!(true), "no page after the last");

    // Several namespaces, one after the other, and a name filter.
    browser.open(&format!("{}/ui/search?type=pods&namespaces=kube-system,default&name=web-1", kf.url));
    browser.wait(Duration::from_secs(30), "web-1 pods", |b| b.texts("#results tbody tr").len() == 3);
    assert!(names(&browser).iter().all(|k| k.starts_with("default/web-1_")), "{:?}", names(&browser));
    drop(browser);
    kf.stop();
}

/// The shell is served to anyone (it is the sign-in form); the fleet's data
/// is not: without a token, and with a wrong one, 401 as a Status.
#[test]
fn the_console_shell_is_public_and_its_data_is_not() {
    let members = demo_members(1, 0.0);
    let (dir, data) = data_dir();
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, format!("{ADMIN_TOKEN},admin,1,kubefold:admins\nviewer-token,viewer,2,kubefold:viewers\n")).unwrap();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &["--token-auth-file", tokens.to_str().unwrap()]);
    let client = reqwest::blocking::Client::new();
    let get = |path: &str, token: Option<&str>| {
        let mut request = client.get(format!("{}{path}", kf.url));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().unwrap();
        (response.status().as_u16(), response.text().unwrap())
    };
    let (code, shell) = get("/ui", None);
    assert_eq!(code, 200);
    assert!(shell.contains("login-form") && shell.contains("/ui/assets/console.js"));
    assert_eq!(get("/ui/assets/console.js", None).0, 200);
    for path in ["/ui/fleet", "/ui/fleet?watch=true"] {
        let (code, body) = get(path, None);
        assert_eq!(code, 401, "{path}: {body}");
        let status: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(get(path, Some("wrong")).0, 401, "{path} with a wrong token");
        // Viewers may search (the Kubernetes API), not read the fleet's admin data.
        assert_eq!(get(path, Some("viewer-token")).0, 403, "{path} as a viewer");
    }
    wait_for(Duration::from_secs(60), "member1 synced", || get("/ui/fleet", Some(ADMIN_TOKEN)).1.contains("<span class=\"phase\">Synced</span>"));
    let (code, page) = get("/ui/fleet", Some(ADMIN_TOKEN));
    assert_eq!(code, 200);
    assert!(page.contains("data-member=\"member1\""), "{page}");
}

/// A large fleet is paged, on the server and in the browser: 250 members
/// (unreachable ones: the table's size is what counts here).
#[test]
fn a_large_fleet_is_paged() {
    if let Some(missing) = webdriver::missing() {
        eprintln!("skipped: {missing}");
        return;
    }
    let dead = dead_port_url();
    let members: Vec<(String, String)> = (0..250).map(|i| (format!("m{i:03}"), dead.clone())).collect();
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &members, &[]);
    let (code, page) = kf.get("/ui/fleet?page=3");
    assert_eq!(code, 200);
    assert!(page.contains("Page 3 of 3") && page.contains("data-member=\"m249\"") && !page.contains("data-member=\"m199\""), "{page}");
    let browser = Browser::start(1280, 860);
    browser.open(&format!("{}/ui", kf.url));
    browser.wait(Duration::from_secs(30), "the first page", |b| b.text("#member-pager").contains("250 members · page 1 of 3"));
    assert_eq!(browser.texts("#members tbody tr").len(), 100);
    browser.click("#member-pager button[data-step=\"1\"]");
    browser.wait(Duration::from_secs(10), "the second page", |b| b.text("#member-pager").contains("page 2 of 3"));
    let rows = browser.texts("#members tbody tr td:first-child");
    assert_eq!((rows.len(), rows[0].as_str(), rows[99].as_str()), (100, "m100", "m199"));
    drop(browser);
    kf.stop();
}

/// 100,000 search results (two members of 50,000 load pods each) are read
/// a page at a time with continue tokens, never whole: each page holds 50
/// rows, the pages hold different pods, and a 1% label selector narrows
/// them to 1,000 (20 pages).
#[test]
fn a_hundred_thousand_results_are_paged() {
    if let Some(missing) = webdriver::missing() {
        eprintln!("skipped: {missing}");
        return;
    }
    let members: Vec<(String, kubefold_testdata::SimHandle)> = (1..=2)
        .map(|i| {
            let name = format!("member{i}");
            let sim = kubefold_testdata::start(kubefold_testdata::SimConfig { name: name.clone(), pods: 50_000, seed: i, ..Default::default() })
                .expect("simulator starts");
            (name, sim)
        })
        .collect();
    let (_dir, data) = data_dir();
    let kf = Kubefold::serve(&data, &cluster_flags(&members), &[]);
    // A debug build syncing 100,000 pods on a busy machine: minutes, not seconds.
    wait_for(Duration::from_secs(600), "kubefold ready with 100,000 pods", || kf.get("/readyz").0 == 200);
    // remainingItemCount is given only without selectors, as Kubernetes gives it.
    let listed = kf.get_json("/api/v1/pods?limit=1");
    let remaining = listed["metadata"]["remainingItemCount"].as_u64().expect("remainingItemCount");
    assert!(remaining >= 99_999, "kubefold holds the 100,000 load pods: {listed}");

    let keys = result_keys;
    let browser = Browser::start(1280, 860);
    browser.open(&format!("{}/ui/search?type=pods&labels=app%3Dload", kf.url));
    browser.wait(Duration::from_secs(60), "the first page of 100,000 pods", |b| b.text("#search-status").contains("page 1"));
    assert_eq!(keys(&browser).len(), 50);
    assert!(browser.text("#search-status").contains("more on the next page"), "{}", browser.text("#search-status"));
    let mut seen: std::collections::BTreeSet<String> = keys(&browser).into_iter().collect();
    for page in 2..=4 {
        browser.click("#next-page");
        browser.wait(Duration::from_secs(60), "the next page", |b| b.text("#search-status").contains(&format!("page {page}")));
        let page_keys = keys(&browser);
        assert_eq!(page_keys.len(), 50);
        seen.extend(page_keys);
    }
    assert_eq!(seen.len(), 200, "four pages, 200 different pods");
    browser.click("#prev-page");
    browser.wait(Duration::from_secs(60), "back to page 3", |b| b.text("#search-status").contains("page 3"));
    // The page holds only its rows: the browser never received the 100,000.
    let rows_in_document = browser.script("return document.querySelectorAll('tr').length;", json!([]));
    assert!(rows_in_document.as_u64().unwrap() <= 60, "{rows_in_document}");

    // shard=s7: 1,000 pods, 20 pages, the last one without a next.
    browser.open(&format!("{}/ui/search?type=pods&labels=shard%3Ds7", kf.url));
    browser.wait(Duration::from_secs(60), "the first page of shard s7", |b| b.text("#search-status").contains("page 1"));
    let mut shard: std::collections::BTreeSet<String> = keys(&browser).into_iter().collect();
    for page in 2..=20 {
        browser.click("#next-page");
        browser.wait(Duration::from_secs(60), "the next page", |b| b.text("#search-status").contains(&format!("page {page}")));
        shard.extend(keys(&browser));
    }
    assert_eq!(shard.len(), 1000, "every pod of shard s7 once, over the pages");
    assert_eq!(browser.script("return document.getElementById('next-page').disabled;", json!([])), json!(true), "no page after the last");
    drop(browser);
    kf.stop();
}

/// A fleet of 1,000 live members (one simulator process's fleet, 10,000
/// pods): the fleet page counts and pages them all Synced, the filter finds
/// one among the thousand, a member that churns is followed, and a search
/// over two named clusters lists only theirs.
#[test]
fn a_thousand_live_members_in_the_console() {
    use kubefold_testdata::sim::fleet::{self, FleetConfig};
    if let Some(missing) = webdriver::missing() {
        eprintln!("skipped: {missing}");
        return;
    }
    const MEMBERS: usize = 1_000;
    let fleet = fleet::start(FleetConfig {
        clusters: MEMBERS,
        pods: 10_000,
        member: kubefold_testdata::SimConfig { workload: kubefold_testdata::Workload::Empty, ..Default::default() },
        ..FleetConfig::default()
    })
    .expect("the fleet starts");
    let (tmp, data) = data_dir();
    let members_file = tmp.path().join("members");
    std::fs::write(&members_file, fleet.url_lines()).unwrap();
    let (_config_dir, config) = config_file("resources:\n  - resourceSelectors:\n      - {apiVersion: v1, kind: Pod}\n");
    let kf = Kubefold::serve(&data, &[], &["--config", &config, "--clusters-file", members_file.to_str().unwrap()]);
    wait_for(Duration::from_secs(600), "kubefold synced with 1,000 members", || kf.get("/readyz").0 == 200);

    // Rendered on the server: ten pages of 100, in the order of the names
    // (member1, member10, member100, member1000, member101, ...).
    let (code, page) = kf.get("/ui/fleet?page=10");
    assert_eq!(code, 200);
    assert!(page.contains("Page 10 of 10") && page.contains("data-member=\"member999\"") && !page.contains("data-member=\"member1000\""), "{}", &page[..page.len().min(2000)]);
    assert!(page.contains("<dd data-stat=\"synced\">1000</dd>"), "every member Synced");

    let browser = Browser::start(1280, 860);
    browser.open(&format!("{}/ui", kf.url));
    browser.wait(Duration::from_secs(60), "the first page of 1,000 members", |b| b.text("#member-pager").contains("1000 members · page 1 of 10"));
    let phases: Vec<String> = browser.texts("#members tbody tr .phase");
    assert_eq!(phases.len(), 100);
    assert!(phases.iter().all(|p| p == "Synced"), "{phases:?}");
    browser.type_into("#member-filter", "member777");
    browser.wait(Duration::from_secs(20), "one member among the thousand", |b| b.texts("#members tbody tr").len() == 1);
    assert_eq!(phase(&browser, "member777"), "Synced");
    let counts = browser.texts("#members tr[data-member=member777] td.types");
    assert!(counts[0].contains("pods 10"), "member777 holds its 10 pods: {counts:?}");

    // A search over two of the thousand lists their pods only.
    browser.open(&format!("{}/ui/search?type=pods&clusters=member500,member999", kf.url));
    browser.wait(Duration::from_secs(60), "the pods of two members", |b| b.texts("#results tbody tr").len() == 20);
    let keys = result_keys(&browser);
    assert!(keys.iter().all(|k| k.ends_with("_member500") || k.ends_with("_member999")), "{keys:?}");

    // A pod created in one member of the thousand appears without a reload.
    browser.script("window.searchLoaded = true;", json!([]));
    let member = &fleet.members()[998];
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "console-fleet-pod", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]}
    });
    let created = reqwest::blocking::Client::new().post(format!("{}/api/v1/namespaces/default/pods", member.url())).json(&pod).send().unwrap();
    assert!(created.status().is_success(), "create: {}", created.text().unwrap_or_default());
    browser.wait(Duration::from_secs(60), "the new pod listed", |b| b.texts("#results tbody tr").iter().any(|r| r.contains("console-fleet-pod")));
    assert_eq!(browser.script("return window.searchLoaded === true;", json!([])), json!(true), "the page was not reloaded");
    drop(browser);
    kf.stop();
}
