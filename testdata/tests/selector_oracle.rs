//! The simulator's own label and field selectors (`sim::selector`,
//! `sim::fields`) against kubefold's engine (`kubefold_engine::selector`,
//! `kubefold_engine::fields`) on generated selectors, label sets, field sets
//! and objects: both accept the same selectors with the same messages, print
//! them alike, and select the same objects. The two are written apart, so a
//! bug in either shows here rather than hiding in every end-to-end test.

use std::collections::BTreeMap;

use kubefold_engine::selector as engine;
use kubefold_testdata::sim::{fields as sim_fields, selector as sim};
use proptest::prelude::*;
use serde_json::{json, Value};

/// Pieces label selectors are made of: keys and values valid and not,
/// keywords, every symbol, and separators.
const LABEL_PIECES: &[&str] = &[
    "a", "b", "app", "tier", "web", "x1", "in", "notin", "5", "12", "-3", "+4", "example.com/role", "Example.com/a",
    "a/b/c", "/x", "x/", "-a", "a-", "a_b.c", "é", "=", "==", "!=", "!", "(", ")", ",", ">", "<", " ", " ", "  ",
    "\t", "\\",
];

/// Pieces field selectors are made of.
const FIELD_PIECES: &[&str] = &[
    "metadata.name", "status.phase", "spec.nodeName", "a", "Running", "web-0", "", "=", "==", "!=", "!", ",", "\\",
    "\\,", "\\=", "\\\\", "\\x", " ", "é",
];

fn text_of(pieces: &'static [&'static str], max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(pieces), 0..max).prop_map(|parts| parts.concat())
}

/// Label sets over the keys and values the selectors use.
fn label_sets() -> impl Strategy<Value = Vec<BTreeMap<String, String>>> {
    let key = prop::sample::select(&["a", "b", "app", "tier", "x1", "in", "example.com/role", "a_b.c"][..]);
    let value = prop::sample::select(&["", "a", "b", "web", "5", "12", "-3", "+4", "6", "in", "99999999999999999999"][..]);
    let set = prop::collection::btree_map(key.prop_map(str::to_string), value.prop_map(str::to_string), 0..5);
    prop::collection::vec(set, 1..6)
}

fn field_sets() -> impl Strategy<Value = Vec<Vec<(String, String)>>> {
    let field = prop::sample::select(&["metadata.name", "status.phase", "spec.nodeName", "a"][..]);
    let value = prop::sample::select(&["", "Running", "web-0", "a", "a,b", "=", "\\", "x"][..]);
    let set = prop::collection::btree_map(field.prop_map(str::to_string), value.prop_map(str::to_string), 0..4)
        .prop_map(|m| m.into_iter().collect::<Vec<_>>());
    prop::collection::vec(set, 1..6)
}

/// Both label selector parsers on one input: the same answer.
fn same_label_selector(input: &str, label_sets: &[BTreeMap<String, String>]) -> Result<(), TestCaseError> {
    match (engine::LabelSelector::parse(input), sim::LabelSelector::parse(input)) {
        (Ok(theirs), Ok(ours)) => {
            prop_assert_eq!(theirs.to_string(), ours.to_string(), "printed form of {:?}", input);
            for labels in label_sets {
                let pairs: Vec<(String, String)> = labels.clone().into_iter().collect();
                prop_assert_eq!(theirs.matches_map(labels), ours.matches_map(labels), "{:?} on {:?}", input, labels);
                prop_assert_eq!(ours.matches_pairs(&pairs), ours.matches_map(labels));
            }
        }
        (Err(theirs), Err(ours)) => prop_assert_eq!(theirs.to_string(), ours.to_string(), "error of {:?}", input),
        (theirs, ours) => prop_assert!(false, "{:?}: engine {:?}, simulator {:?}", input, theirs, ours),
    }
    Ok(())
}

/// Both field selector parsers on one input: the same answer.
fn same_field_selector(input: &str, field_sets: &[Vec<(String, String)>]) -> Result<(), TestCaseError> {
    match (engine::FieldSelector::parse(input), sim::FieldSelector::parse(input)) {
        (Ok(theirs), Ok(ours)) => {
            prop_assert_eq!(theirs.to_string(), ours.to_string(), "printed form of {:?}", input);
            for fields in field_sets {
                prop_assert_eq!(theirs.matches_pairs(fields), ours.matches_pairs(fields), "{:?} on {:?}", input, fields);
            }
        }
        (Err(theirs), Err(ours)) => prop_assert_eq!(theirs.to_string(), ours.to_string(), "error of {:?}", input),
        (theirs, ours) => prop_assert!(false, "{:?}: engine {:?}, simulator {:?}", input, theirs, ours),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn label_selectors_agree(input in text_of(LABEL_PIECES, 12), sets in label_sets()) {
        same_label_selector(&input, &sets)?;
    }

    /// Selectors shaped like real ones (`k op v` joined by commas), so that
    /// most parse and matching is compared, not only the errors.
    #[test]
    fn well_formed_label_selectors_agree(
        requirements in prop::collection::vec(
            (
                prop::sample::select(&["", "!"][..]),
                prop::sample::select(&["a", "b", "app", "in", "example.com/role"][..]),
                prop::sample::select(&["", "=", "==", "!=", " in ", " notin ", ">", "<"][..]),
                prop::collection::vec(prop::sample::select(&["", "a", "web", "5", "6", "12"][..]), 1..4),
            ),
            0..4,
        ),
        sets in label_sets(),
    ) {
        let input = requirements
            .iter()
            .map(|(bang, key, op, values)| match *op {
                "" => format!("{bang}{key}"),
                " in " | " notin " => format!("{key}{op}({})", values.join(",")),
                _ => format!("{key}{op}{}", values[0]),
            })
            .collect::<Vec<_>>()
            .join(",");
        same_label_selector(&input, &sets)?;
    }

    #[test]
    fn field_selectors_agree(input in text_of(FIELD_PIECES, 10), sets in field_sets()) {
        same_field_selector(&input, &sets)?;
    }

    #[test]
    fn label_selector_objects_agree(
        match_labels in prop::collection::btree_map(
            prop::sample::select(&["a", "app", "-bad", "example.com/x"][..]),
            prop::sample::select(&["", "web", "x y"][..]),
            0..3,
        ),
        expressions in prop::collection::vec(
            (
                prop::sample::select(&["a", "app", "tier", ""][..]),
                prop::sample::select(&["In", "NotIn", "Exists", "DoesNotExist", "Gt", ""][..]),
                prop::option::of(prop::collection::vec(prop::sample::select(&["a", "web", "b", "-"][..]), 0..3)),
            ),
            0..3,
        ),
        sets in label_sets(),
    ) {
        let expressions: Vec<Value> = expressions
            .iter()
            .map(|(key, operator, values)| match values {
                Some(values) => json!({"key": key, "operator": operator, "values": values}),
                None => json!({"key": key, "operator": operator}),
            })
            .collect();
        let object = json!({"matchLabels": match_labels, "matchExpressions": expressions});
        match (engine::LabelSelector::from_label_selector(&object), sim::LabelSelector::from_object(&object)) {
            (Ok(theirs), Ok(ours)) => {
                prop_assert_eq!(theirs.to_string(), ours.to_string());
                for labels in &sets {
                    prop_assert_eq!(theirs.matches_map(labels), ours.matches_map(labels), "{} on {:?}", object, labels);
                }
            }
            (Err(theirs), Err(ours)) => prop_assert_eq!(theirs.to_string(), ours.to_string()),
            (theirs, ours) => prop_assert!(false, "{}: engine {:?}, simulator {:?}", object, theirs, ours),
        }
    }

    /// Which fields each built-in type accepts, and the message when not.
    #[test]
    fn field_names_are_validated_alike(
        fields in prop::collection::vec(
            prop::sample::select(&[
                "metadata.name", "metadata.namespace", "spec.nodeName", "status.phase", "status.podIP",
                "status.podIPs", "spec.host", "spec.unschedulable", "type", "source", "reason",
                "involvedObject.name", "status.replicas", "status.successful", "spec.clusterIP",
                "spec.signerName", "spec.bogus", "metadata.labels",
            ][..]),
            0..3,
        ),
    ) {
        let input = fields.iter().map(|f| format!("{f}=x")).collect::<Vec<_>>().join(",");
        let theirs = engine::FieldSelector::parse(&input).unwrap();
        let ours = sim::FieldSelector::parse(&input).unwrap();
        for resource in kubefold_engine::resources::builtin() {
            let engine_answer = kubefold_engine::fields::validate(&resource.group, &resource.plural, &theirs).map_err(|e| e.to_string());
            let sim_answer = sim_fields::validate(&resource.group, &resource.plural, &ours).map_err(|e| e.to_string());
            prop_assert_eq!(engine_answer, sim_answer, "{} of {}", input, resource.plural);
        }
    }

    /// The values of the selectable fields of generated objects of every
    /// type with selectable fields.
    #[test]
    fn extracted_fields_agree(
        values in prop::collection::vec(
            prop::sample::select(vec![
                json!("Running"), json!(""), json!(true), json!(false), json!(3), json!(-1), json!(2.5),
                json!(null), json!({"component": "kubelet"}), json!({"component": ""}),
                json!([{"ip": "10.0.0.1"}]), json!([]),
            ]),
            12,
        ),
        present in prop::collection::vec(any::<bool>(), 12),
    ) {
        let paths: [&[&str]; 12] = [
            &["spec", "nodeName"], &["spec", "hostNetwork"], &["status", "phase"], &["status", "podIP"],
            &["status", "podIPs"], &["spec", "unschedulable"], &["source"], &["reportingComponent"],
            &["status", "replicas"], &["status", "succeeded"], &["type"], &["involvedObject", "name"],
        ];
        let mut object = json!({"metadata": {"name": "o", "namespace": "ns"}});
        for ((path, value), present) in paths.iter().zip(&values).zip(&present) {
            if *present {
                let mut at = &mut object;
                for member in &path[..path.len() - 1] {
                    at = at.as_object_mut().unwrap().entry(member.to_string()).or_insert_with(|| json!({}));
                }
                at[path[path.len() - 1]] = value.clone();
            }
        }
        for resource in kubefold_engine::resources::builtin() {
            let mut theirs = kubefold_engine::fields::extract(&resource.group, &resource.plural, &object);
            let mut ours = sim_fields::extract(&resource.group, &resource.plural, &object);
            theirs.sort();
            ours.sort();
            prop_assert_eq!(theirs, ours, "{} of {}", object, resource.plural);
        }
    }
}

/// The examples of the Kubernetes docs pages, and the error messages the
/// simulator answers with, word for word.
#[test]
fn documented_examples_and_messages() {
    let sets = vec![
        BTreeMap::from([("environment".to_string(), "production".to_string()), ("tier".to_string(), "frontend".to_string())]),
        BTreeMap::from([("environment".to_string(), "qa".to_string())]),
        BTreeMap::from([("partition".to_string(), "customerA".to_string())]),
        BTreeMap::new(),
    ];
    for input in [
        "environment = production",
        "tier != frontend",
        "environment=production,tier!=frontend",
        "environment in (production, qa)",
        "tier notin (frontend, backend)",
        "partition",
        "!partition",
        "partition,environment notin (qa)",
    ] {
        let selector = sim::LabelSelector::parse(input).unwrap();
        assert!(!selector.is_empty());
        same_label_selector(input, &sets).unwrap();
    }
    let selector = sim::LabelSelector::parse("environment in (production, qa),tier notin (backend)").unwrap();
    assert_eq!(selector.to_string(), "environment in (production,qa),tier notin (backend)");
    assert!(selector.matches_map(&sets[0]));
    assert!(selector.matches_map(&sets[1]));
    assert!(!selector.matches_map(&sets[2]));
    let messages = [
        ("x in (", "unable to parse requirement: found '', expected: ',', ')' or identifier"),
        ("a,", "found '', expected: identifier after ','"),
        ("!a=b", "found '=', expected: ',' or 'end of string'"),
        ("=a", "found '=', expected: !, identifier, or 'end of string'"),
        ("x (a)", "unable to parse requirement: found '(', expected: in, notin, =, ==, !=, gt, lt"),
        ("/x", "unable to parse requirement: invalid label key \"/x\": prefix part must be non-empty"),
    ];
    for (input, message) in messages {
        assert_eq!(sim::LabelSelector::parse(input).unwrap_err().to_string(), message, "{input:?}");
        same_label_selector(input, &sets).unwrap();
    }
    let fields = vec![("metadata.name".to_string(), "web-0".to_string()), ("status.phase".to_string(), "Running".to_string())];
    for (input, selected) in
        [("status.phase=Running", true), ("metadata.namespace!=default", true), ("status.phase!=Running,spec.restartPolicy=Always", false)]
    {
        assert_eq!(sim::FieldSelector::parse(input).unwrap().matches_pairs(&fields), selected, "{input:?}");
        same_field_selector(input, std::slice::from_ref(&fields)).unwrap();
    }
    for (input, message) in [
        ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
        ("a!==b", "invalid field selector: unescaped character in value: ="),
        (r"a=b\!c", r"invalid field selector: invalid escape sequence: \!"),
    ] {
        assert_eq!(sim::FieldSelector::parse(input).unwrap_err().to_string(), message, "{input:?}");
        same_field_selector(input, std::slice::from_ref(&fields)).unwrap();
    }
}

/// The fields of the kubernetes/api fixtures and of the demo workload.
#[test]
fn fields_of_fixtures_and_the_demo_workload_agree() {
    let catalog = kubefold_engine::resources::builtin();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/kubernetes-api-testdata");
    let mut objects: Vec<Value> = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            objects.push(serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap());
        }
    }
    let cluster = kubefold_testdata::workload::Cluster::new("member1", 1, chrono::Utc::now());
    objects.extend(kubefold_testdata::workload::demo(&cluster));
    let mut compared = 0;
    for object in &objects {
        let (kind, api_version) = (object["kind"].as_str().unwrap_or(""), object["apiVersion"].as_str().unwrap_or(""));
        let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
        let Some(resource) = catalog.iter().find(|r| r.kind == kind && r.group == group) else {
            continue;
        };
        assert_eq!(
            kubefold_engine::fields::extract(&resource.group, &resource.plural, object),
            sim_fields::extract(&resource.group, &resource.plural, object),
            "{kind} {}",
            object["metadata"]["name"]
        );
        compared += 1;
    }
    assert!(compared > 20, "only {compared} objects compared");
}
