//! Damage of the record log found while serving, repaired while serving.
//!
//! What a damaged record costs: the index is in memory and intact, so the
//! current state of every object is still known, but for the one body the
//! record held when it was an object's current version. What is lost is
//! the log's history: a watch from before the damaged event cannot be
//! replayed past it, and a list at a resourceVersion whose state holds the
//! damaged version cannot be served. So, as after a compaction (which
//! Kubernetes clients expect and handle: 410 Expired, list again), the
//! compaction floor moves past the damage: to the event that superseded
//! the damaged version (the state there no longer holds it), or, when the
//! damaged version is an object's current one, to it at once and to the
//! object's rebuilt version once its member's type has been listed again
//! (the object comes back as a MODIFIED event at the head: the
//! resourceVersion only goes up). Compaction then removes the damaged
//! record from the log, so a later start finds nothing to repair; the
//! record log segment that held it is copied into a quarantine directory
//! first, named in the log.

use std::collections::HashSet;
use std::path::PathBuf;

use actix::{ActorFutureExt, AsyncContext, Context, Handler, Message, Recipient, WrapFuture};
use kubefold_engine::event::{IndexEntry, ObjectKey};
use kubefold_engine::index::Index;
use kubefold_store::{Damage, Store};
use tracing::{error, info, warn};

use super::Aggregator;
use crate::messages::Relist;

/// How often the aggregator looks for damage found by reads.
pub(super) const DAMAGE_CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Where the aggregator asks for a member's type to be listed again, to
/// rebuild an object whose current version was lost to storage damage (the
/// supervisor).
#[derive(Message)]
#[rtype(result = "()")]
pub struct SetRelister(pub Recipient<Relist>);

/// An object whose current version's record is damaged, waiting for its
/// member's list to rebuild it.
#[derive(Debug, Clone)]
pub(super) struct Rebuilding {
    /// The damaged version's resourceVersion.
    rv: u64,
    resource: String,
    key: ObjectKey,
}

/// What a repair does, found off the actor's thread.
struct Plan {
    /// The new compaction floor.
    floor: u64,
    /// The records repaired.
    damaged: Vec<Damage>,
    /// The objects whose current version is damaged.
    objects: Vec<Rebuilding>,
    /// Where the damaged segments were copied.
    quarantine: Option<PathBuf>,
}

/// Finds what repairing `damaged` takes (the objects it held the current
/// version of, the floor) and copies their segments into a quarantine
/// directory. `rebuilt_floor` is the floor objects rebuilt since the last
/// repair allow.
fn plan(store: &Store, live: &Index, damaged: Vec<Damage>, rebuilt_floor: u64) -> Result<Plan, kubefold_store::Error> {
    let rvs: HashSet<u64> = damaged.iter().map(|d| d.rv).collect();
    let mut objects = Vec::new();
    if !rvs.is_empty() {
        for resource in live.resource_keys() {
            for (key, entry) in live.range(&resource, None, None) {
                if rvs.contains(&entry.rv) {
                    objects.push(Rebuilding { rv: entry.rv, resource: resource.clone(), key: key.clone() });
                }
            }
        }
    }
    let mut floor = rebuilt_floor;
    for damage in &damaged {
        let at = if objects.iter().any(|o| o.rv == damage.rv) {
            damage.rv
        } else {
            match store.superseded_by(damage.rv) {
                Ok(Some(at)) => at,
                // The object's last event (a deletion): the state at it
                // does not hold the object.
                Ok(None) => damage.rv,
                // Another damaged record after it (noted, repaired next):
                // the whole history is given up.
                Err(_) => live.head_rv(),
            }
        };
        floor = floor.max(at);
    }
    let quarantine = match damaged.is_empty() {
        true => None,
        false => {
            let quarantine = store.create_quarantine()?;
            for damage in &damaged {
                store.quarantine_damage(damage, floor, &quarantine)?;
            }
            Some(quarantine)
        }
    };
    Ok(Plan { floor: floor.min(live.head_rv()), damaged, objects, quarantine })
}

impl Aggregator {
    /// Repairs the damage reads found since the last check, and moves the
    /// floor past objects rebuilt since; one repair at a time, its work
    /// off the actor's thread. (A replica over a shared log repairs its
    /// copy at its next start.)
    pub(super) fn check_damage(&mut self, ctx: &mut Context<Self>) {
        if self.repairing || self.shared.is_some() {
            return;
        }
        let index = self.reflector.index();
        let (rebuilt, waiting): (Vec<Rebuilding>, Vec<Rebuilding>) = std::mem::take(&mut self.rebuilding)
            .into_iter()
            .partition(|o| index.get(&o.resource, &o.key).is_none_or(|entry| entry.rv != o.rv));
        self.rebuilding = waiting;
        let rebuilt_floor = rebuilt.iter().filter_map(|o| index.get(&o.resource, &o.key).map(|e| e.rv)).max().unwrap_or(0);
        let damaged = self.store.take_damaged();
        if damaged.is_empty() && rebuilt.is_empty() {
            return;
        }
        self.repairing = true;
        let (store, live) = (self.store.clone(), index.clone());
        let planned = tokio::task::spawn_blocking(move || plan(&store, &live, damaged, rebuilt_floor));
        ctx.spawn(planned.into_actor(self).map(|result, this: &mut Aggregator, ctx| match result {
            Ok(Ok(plan)) => this.apply_repair(plan, ctx),
            Ok(Err(e)) => {
                this.repairing = false;
                error!(error = %e, "The repair of a damaged record failed; it is repaired at the next start.");
            }
            Err(_) => {
                this.repairing = false;
                error!("The repair thread failed.");
            }
        }));
    }

    /// Moves the floor, marks the damaged objects for rebuilding and asks
    /// for their lists, then compacts off the actor's thread.
    fn apply_repair(&mut self, plan: Plan, ctx: &mut Context<Self>) {
        let floor = plan.floor.max(self.fleet.compacted_rv());
        // Readers older than the floor get 410 from now on.
        self.publisher.set_compacted_rv(floor);
        let mut relists = HashSet::new();
        for object in plan.objects {
            // The member's list rewrites the object even when it did not
            // change there (the stored member RV no longer matches).
            let mut index = self.reflector.index().clone();
            let Some(entry) = index.get(&object.resource, &object.key).cloned().filter(|e| e.rv == object.rv) else { continue };
            let (labels, fields) = (entry.labels_owned(), entry.fields_owned());
            let marked = IndexEntry::new(entry.rv, "", entry.uid(), pairs(&labels), pairs(&fields));
            index.load(&object.resource, object.key.clone(), marked);
            self.reflector.restore_index(index);
            relists.insert((object.key.cluster.clone(), object.resource.clone()));
            self.rebuilding.push(object);
        }
        for (cluster, resource) in &relists {
            match &self.relister {
                Some(relister) => relister.do_send(Relist { cluster: cluster.clone(), resource: resource.clone() }),
                None => warn!(cluster = %cluster, resource = %resource, "No watcher to list the member again: the damaged object is rebuilt by its next change."),
            }
        }
        let (store, live) = (self.store.clone(), self.reflector.index().clone());
        let (damaged, quarantine) = (plan.damaged, plan.quarantine);
        let compacted = crate::background::run("store-compact", move || {
            let stats = store.compact(floor, &live)?;
            let left = store.settle_damage()?;
            Ok::<_, kubefold_store::Error>((stats, left))
        });
        ctx.spawn(compacted.into_actor(self).map(move |result, this: &mut Aggregator, _| {
            this.repairing = false;
            let rvs: Vec<u64> = damaged.iter().map(|d| d.rv).collect();
            let quarantine = quarantine.map(|q| q.display().to_string()).unwrap_or_default();
            let relisted: Vec<String> = relists.iter().map(|(c, r)| format!("{c}/{r}")).collect();
            match result {
                Ok(Ok((stats, left))) => {
                    metrics::gauge!("kubefold_compacted_resource_version").set(stats.floor as f64);
                    if !rvs.is_empty() {
                        error!(
                            damaged = ?rvs,
                            quarantine = %quarantine,
                            floor,
                            relisted = ?relisted,
                            "Damaged records repaired while serving: their segment was copied into the quarantine directory (keep it for analysis, \
                             delete it when done), the history up to the floor given up (older resourceVersions answer 410, clients list again), \
                             objects whose current version was damaged listed again from their members. Check the disk."
                        );
                    } else {
                        info!(floor, removed = stats.removed, "Objects lost to storage damage rebuilt from their members; their damaged records removed.");
                    }
                    if !left.is_empty() {
                        info!(waiting = ?left, "Damaged records kept until their objects are rebuilt from their members.");
                    }
                }
                Ok(Err(e)) => error!(error = %e, damaged = ?rvs, "The compaction past a damaged record failed; it is repaired at the next start."),
                Err(_) => error!("The compaction thread failed."),
            }
        }));
    }
}

/// Borrowed string pairs.
fn pairs(owned: &[(String, String)]) -> Vec<(&str, &str)> {
    owned.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

impl Handler<SetRelister> for Aggregator {
    type Result = ();

    fn handle(&mut self, msg: SetRelister, _ctx: &mut Self::Context) {
        self.relister = Some(msg.0);
    }
}
