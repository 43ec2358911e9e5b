//! etcd as the log shared by several replicas (`--etcd-servers`): connects
//! the fleet to it, and follows its watch into the aggregator. Built with
//! the `etcd` feature only (its client's build needs protoc); without it,
//! `--etcd-servers` is refused with one line saying how to build with it.

use std::sync::Arc;

use actix::Addr;
use kubefold_actors::aggregator::Aggregator;
use kubefold_actors::cluster::ClusterSpec;
use kubefold_actors::fleet::Fleet;
use kubefold_actors::supervisor::Supervisor;

use crate::config::EtcdConfig;

/// What follows the shared log once the aggregator runs.
#[cfg_attr(not(feature = "etcd"), allow(dead_code))]
pub struct Replica {
    #[cfg(feature = "etcd")]
    log: Arc<kubefold_etcd::EtcdLog>,
    /// The lease's time to live and the replica's id, if set.
    lease_ttl: std::time::Duration,
    replica_id: Option<String>,
    /// The ownership loop, once the members are known.
    #[cfg(feature = "etcd")]
    membership: std::sync::Mutex<Option<kubefold_etcd::Membership>>,
}

/// The store metadata naming the shared log a data dir is a copy of.
pub const SHARED_LOG_META: &str = "shared-log";

/// Connects to etcd (before the data dir is read: it is checked against it).
#[cfg(feature = "etcd")]
pub fn connect(config: &EtcdConfig) -> anyhow::Result<Replica> {
    let options = kubefold_etcd::EtcdOptions {
        servers: config.servers.clone(),
        prefix: config.prefix.clone(),
        ca_file: config.ca_file.clone(),
        cert_file: config.cert_file.clone(),
        key_file: config.key_file.clone(),
    };
    let log = kubefold_etcd::EtcdLog::connect(&options)?;
    Ok(Replica {
        log,
        lease_ttl: std::time::Duration::from_secs(config.lease_ttl_seconds),
        replica_id: config.replica_id.clone(),
        membership: std::sync::Mutex::new(None),
    })
}

/// Without the `etcd` feature: the one line that says how to get it.
#[cfg(not(feature = "etcd"))]
pub fn connect(config: &EtcdConfig) -> anyhow::Result<Replica> {
    supported().map(|()| Replica { lease_ttl: std::time::Duration::from_secs(config.lease_ttl_seconds), replica_id: config.replica_id.clone() })
}

/// Whether the data dir can be used as this log's copy: `Ok(None)` yes,
/// `Ok(Some(why))` it is a stale copy to rebuild from the log, `Err`
/// it must not be used with it (nothing is changed then).
pub fn check_copy(replica: &Replica, store: &kubefold_store::Store, head_rv: u64) -> anyhow::Result<Option<String>> {
    let identity = replica.identity();
    match store.meta(SHARED_LOG_META)? {
        Some(of) if of == identity.as_bytes() => {}
        Some(of) => return Ok(Some(format!("it is a copy of another log ({})", String::from_utf8_lossy(&of)))),
        None if head_rv > 0 => anyhow::bail!(
            "the data dir holds kubefold's own history (written without --etcd-servers): a replica on etcd needs an empty data dir (or one it used with this etcd before)"
        ),
        None => store.put_meta(SHARED_LOG_META, identity.as_bytes())?,
    }
    let floor = replica.compacted_rv()?;
    Ok((head_rv > 0 && head_rv < floor).then(|| format!("its head resourceVersion {head_rv} is older than the log's compaction floor {floor}")))
}

/// Whether this build can use etcd; refused with the one line that says
/// how to build it, before anything starts.
pub fn supported() -> anyhow::Result<()> {
    #[cfg(not(feature = "etcd"))]
    anyhow::bail!(
        "this kubefold was built without etcd support: build it with `cargo build --release --features etcd` (needs protoc, Debian's protobuf-compiler) to use --etcd-servers"
    );
    #[cfg(feature = "etcd")]
    Ok(())
}

impl Replica {
    /// Which log this is (the etcd cluster and prefix).
    pub fn identity(&self) -> String {
        #[cfg(feature = "etcd")]
        return self.log.identity();
        #[cfg(not(feature = "etcd"))]
        String::new()
    }

    /// The log's compaction floor.
    pub fn compacted_rv(&self) -> anyhow::Result<u64> {
        #[cfg(feature = "etcd")]
        return Ok(self.log.compacted_rv()?);
        #[cfg(not(feature = "etcd"))]
        Ok(0)
    }

    /// Makes `fleet` a replica over the log: its aggregator commits there
    /// and applies what it holds, consistent reads wait for its head.
    pub fn attach(&self, fleet: &Arc<Fleet>) {
        #[cfg(feature = "etcd")]
        {
            fleet.set_shared(self.log.clone());
            tracing::info!(log = %self.log.identity(), "Replica over etcd: batches are committed to etcd and applied from its watch.");
        }
        #[cfg(not(feature = "etcd"))]
        let _ = fleet;
    }

    /// Follows the shared log's watch into `aggregator` until it stops:
    /// each response's transactions are applied in order; on any error
    /// (etcd restarted or unreachable, a compacted revision, a failed local
    /// commit) the aggregator catches up with a range read, and the watch
    /// resumes after what it applied.
    pub fn follow(&self, aggregator: Addr<Aggregator>) {
        #[cfg(feature = "etcd")]
        {
            let log = self.log.clone();
            self.log.spawn(async move {
                use kubefold_actors::aggregator::{ApplyReplicated, CatchUp};
                use tracing::warn;
                let mut backoff = std::time::Duration::from_millis(200);
                let mut watch: Option<kubefold_etcd::LogWatch> = None;
                // The revision etcd's history was last compacted at, as a
                // watch that started before it was told: every catch-up
                // after that read the log at a later revision, so the watch
                // resumes from it at least (the log's head may be older:
                // etcd's revisions also count the replicas' other keys and
                // any other writer's).
                let mut compacted = 0u64;
                loop {
                    let Some(current) = watch.as_mut() else {
                        match aggregator.send(CatchUp).await {
                            Ok(Ok(revision)) => {
                                watch = Some(log.watch(revision.max(compacted.saturating_sub(1))));
                                backoff = std::time::Duration::from_millis(200);
                            }
                            Ok(Err(e)) => {
                                warn!(error = %e, "Catching up with etcd failed; trying again.");
                                tokio::time::sleep(backoff).await;
                                backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                            }
                            // The aggregator stopped: so does this.
                            Err(_) => return,
                        }
                        continue;
                    };
                    match current.next().await {
                        Ok(batches) if batches.is_empty() => {}
                        Ok(batches) => match aggregator.send(ApplyReplicated(batches)).await {
                            Ok(Ok(_)) => {}
                            Ok(Err(e)) => {
                                warn!(error = %e, "Applying etcd's transactions failed; catching up.");
                                watch = None;
                            }
                            Err(_) => return,
                        },
                        Err(_) if current.compacted_at() > compacted => {
                            compacted = current.compacted_at();
                            tracing::info!(
                                compacted_revision = compacted,
                                "etcd's history was compacted past the revision this replica watched from; catching up with a range read, then watching from the compaction."
                            );
                            watch = None;
                        }
                        Err(e) => {
                            warn!(error = %e, "The etcd watch failed; catching up, then watching again.");
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(std::time::Duration::from_secs(5));
                            watch = None;
                        }
                    }
                }
            });
        }
        #[cfg(not(feature = "etcd"))]
        let _ = aggregator;
    }
    /// Takes part in the ownership of `members` (this replica's configured
    /// members; all replicas are normally given the same list): registers
    /// under its lease and starts the watchers of the members it owns,
    /// taking over those of replicas that die and handing members to
    /// replicas that join. `address` is where it serves, for operators.
    pub fn own_members(&self, members: Vec<ClusterSpec>, address: std::net::SocketAddr, fleet: Arc<Fleet>, supervisor: Addr<Supervisor>, aggregator: Addr<Aggregator>) {
        #[cfg(feature = "etcd")]
        {
            let id = self.replica_id.clone().unwrap_or_else(|| format!("{}-{}", host_name(), address.port()));
            let options = kubefold_etcd::MembershipOptions {
                id: id.clone(),
                address: address.to_string(),
                ttl: self.lease_ttl,
                members: members.iter().map(|m| m.name.clone()).collect(),
            };
            tracing::info!(replica = %id, members = members.len(), lease_ttl_seconds = self.lease_ttl.as_secs(), "Members are owned through etcd leases.");
            let members = std::sync::Mutex::new(members.into_iter().map(|m| (m.name.clone(), m)).collect());
            let control = Arc::new(Control { members, fleet, supervisor, aggregator });
            let membership = kubefold_etcd::Membership::start(&self.log, options, control);
            *self.membership.lock().unwrap_or_else(|e| e.into_inner()) = Some(membership);
        }
        #[cfg(not(feature = "etcd"))]
        let _ = (members, address, fleet, supervisor, aggregator, self.lease_ttl, &self.replica_id);
    }

    /// At shutdown: stops the owned members' watchers and revokes the
    /// lease, so that the other replicas take them over at once.
    pub async fn resign(&self) {
        #[cfg(feature = "etcd")]
        {
            let membership = self.membership.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(membership) = membership {
                membership.resign().await;
            }
        }
    }
}

/// The host's name (`/proc/sys/kernel/hostname`, else `$HOSTNAME`).
#[cfg(feature = "etcd")]
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "kubefold".to_string())
}

/// The members' watchers as the ownership loop starts and stops them.
#[cfg(feature = "etcd")]
struct Control {
    /// The configured members and those recorded in etcd, learned.
    members: std::sync::Mutex<std::collections::BTreeMap<String, ClusterSpec>>,
    fleet: Arc<Fleet>,
    supervisor: Addr<Supervisor>,
    aggregator: Addr<Aggregator>,
}

#[cfg(feature = "etcd")]
impl kubefold_etcd::MemberControl for Control {
    fn take(&self, member: String) -> futures::future::BoxFuture<'static, ()> {
        let spec = self.members.lock().unwrap_or_else(|e| e.into_inner()).get(&member).cloned();
        let (fleet, supervisor, aggregator) = (self.fleet.clone(), self.supervisor.clone(), self.aggregator.clone());
        Box::pin(async move {
            let Some(spec) = spec else { return };
            use kubefold_actors::aggregator::CatchUp;
            // Everything the previous owner committed is applied first: its
            // last checkpoints are where the watchers resume.
            let mut delay = std::time::Duration::from_millis(100);
            loop {
                match aggregator.send(CatchUp).await {
                    Ok(Ok(_)) => break,
                    Ok(Err(e)) => {
                        tracing::warn!(cluster = %member, error = %e, "Catching up before taking a member over failed; trying again.");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(std::time::Duration::from_secs(2));
                    }
                    Err(_) => return,
                }
            }
            let checkpoints = match fleet.store().checkpoints_of(&member) {
                Ok(checkpoints) => checkpoints,
                Err(e) => {
                    tracing::error!(cluster = %member, error = %e, "Cannot read the member's checkpoints; its watchers list afresh.");
                    Default::default()
                }
            };
            tracing::info!(cluster = %member, checkpoints = checkpoints.len(), "Starting the watchers of a member this replica owns.");
            let _ = supervisor.send(kubefold_actors::supervisor::TakeCluster { spec, checkpoints }).await;
        })
    }

    fn release(&self, member: String) -> futures::future::BoxFuture<'static, ()> {
        let supervisor = self.supervisor.clone();
        Box::pin(async move {
            let _ = supervisor.send(kubefold_actors::supervisor::ReleaseCluster(member)).await;
        })
    }

    fn applied_revision(&self) -> u64 {
        self.fleet.shared_applied_revision()
    }

    fn learn(&self, member: String, spec: Vec<u8>) -> futures::future::BoxFuture<'static, ()> {
        let spec = match serde_json::from_slice::<ClusterSpec>(&spec) {
            Ok(spec) if spec.name == member => spec,
            Ok(spec) => {
                tracing::error!(cluster = %member, named = %spec.name, "A member recorded in etcd names another member; it is left out.");
                return Box::pin(async {});
            }
            Err(e) => {
                tracing::error!(cluster = %member, error = %e, "A member recorded in etcd cannot be read; it is left out.");
                return Box::pin(async {});
            }
        };
        self.members.lock().unwrap_or_else(|e| e.into_inner()).insert(member, spec.clone());
        let supervisor = self.supervisor.clone();
        Box::pin(async move {
            let _ = supervisor.send(kubefold_actors::supervisor::KnowCluster(spec)).await;
        })
    }

    fn forget(&self, member: String) -> futures::future::BoxFuture<'static, ()> {
        self.members.lock().unwrap_or_else(|e| e.into_inner()).remove(&member);
        let supervisor = self.supervisor.clone();
        Box::pin(async move {
            let _ = supervisor.send(kubefold_actors::supervisor::ForgetCluster(member)).await;
        })
    }

    fn remove(&self, member: String) -> futures::future::BoxFuture<'static, Result<(), String>> {
        let supervisor = self.supervisor.clone();
        self.members.lock().unwrap_or_else(|e| e.into_inner()).remove(&member);
        Box::pin(async move {
            let deleted = supervisor.send(kubefold_actors::supervisor::DropCluster(member.clone())).await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
            tracing::info!(cluster = %member, deleted, "A removed member's objects were deleted.");
            Ok(())
        })
    }
}

