//! Members added through the admin API, recorded in etcd.
//!
//! A member registered through any replica's admin API is written to
//! `{prefix}/members/{name}` (its spec as the API received it, credentials
//! included, as kube-apiserver keeps Secrets in etcd), created only when
//! absent. Every replica reads these records in its ownership loop: it
//! learns the member (so it serves and forwards to it) and takes part in
//! choosing its owner among all live replicas. A removal writes
//! `{prefix}/removals/{name}`; the member's owner (or the replica that
//! should own it, when nobody holds it) stops its watchers, commits its
//! objects' deletions under its fence, and only then deletes the record,
//! the removal mark and its owner key in one transaction: a removal whose
//! owner dies half-way is finished by the next owner.

use std::collections::BTreeMap;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};
use kubefold_store::shared::{SharedError, SharedFuture};

use crate::{prefix_end, unavailable, EtcdLog};

impl EtcdLog {
    /// The prefix of the recorded members.
    pub(crate) fn members_prefix(&self) -> Vec<u8> {
        self.key("members/")
    }

    /// The prefix of the removal marks.
    pub(crate) fn removals_prefix(&self) -> Vec<u8> {
        self.key("removals/")
    }

    fn member_key(&self, name: &str) -> Vec<u8> {
        self.key(&format!("members/{name}"))
    }

    fn removal_key(&self, name: &str) -> Vec<u8> {
        self.key(&format!("removals/{name}"))
    }

    /// Records member `name` with `spec` when no member of that name is
    /// recorded; whether it was written.
    pub(crate) fn record_member(&self, name: &str, spec: Vec<u8>) -> SharedFuture<bool> {
        let (client, key) = (self.client.clone(), self.member_key(name));
        self.on_runtime(async move {
            let txn = Txn::new().when(vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)]).and_then(vec![TxnOp::put(key, spec, None)]);
            Ok(client.kv_client().txn(txn).await.map_err(unavailable)?.succeeded())
        })
    }

    /// Marks recorded member `name` for removal; whether it is recorded.
    pub(crate) fn mark_removal(&self, name: &str) -> SharedFuture<bool> {
        let (client, key, mark) = (self.client.clone(), self.member_key(name), self.removal_key(name));
        self.on_runtime(async move {
            let txn = Txn::new().when(vec![Compare::create_revision(key, CompareOp::Greater, 0)]).and_then(vec![TxnOp::put(mark, Vec::new(), None)]);
            Ok(client.kv_client().txn(txn).await.map_err(unavailable)?.succeeded())
        })
    }

    /// Every recorded member's spec, by name.
    pub(crate) fn recorded_members(&self) -> SharedFuture<BTreeMap<String, Vec<u8>>> {
        let (client, prefix) = (self.client.clone(), self.members_prefix());
        self.on_runtime(async move {
            let options = GetOptions::new().with_range(prefix_end(&prefix));
            let response = client.kv_client().get(prefix.clone(), Some(options)).await.map_err(unavailable)?;
            Ok(response.kvs().iter().map(|kv| (String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned(), kv.value().to_vec())).collect())
        })
    }

    /// Runs `future` on the log's runtime (its client lives there).
    fn on_runtime<T: Send + 'static>(&self, future: impl std::future::Future<Output = Result<T, SharedError>> + Send + 'static) -> SharedFuture<T> {
        let task = self.spawn(future);
        Box::pin(async move { task.await.map_err(|e| unavailable(format!("the etcd client's task failed: {e}")))? })
    }

    /// After the owner committed a removed member's deletions: its record,
    /// removal mark and owner key go, if the owner key is still held under
    /// `lease`; whether they went.
    pub(crate) async fn finish_removal(&self, client: &etcd_client::Client, name: &str, lease: i64) -> Result<bool, SharedError> {
        let owner = self.owner_key(name);
        let txn = Txn::new().when(vec![Compare::lease(owner.clone(), CompareOp::Equal, lease)]).and_then(vec![
            TxnOp::delete(self.member_key(name), None),
            TxnOp::delete(self.removal_key(name), None),
            TxnOp::delete(owner, None),
        ]);
        let response = client.kv_client().txn(txn).await.map_err(unavailable)?;
        Ok(response.succeeded())
    }
}

/// The recorded members (name -> spec) and the names marked for removal,
/// from the answers of a range of each prefix.
pub(crate) fn read_records(members: &[u8], removals: &[u8], answers: [Option<TxnOpResponse>; 2]) -> (BTreeMap<String, Vec<u8>>, std::collections::BTreeSet<String>) {
    let [recorded, removing] = answers;
    let mut out = (BTreeMap::new(), std::collections::BTreeSet::new());
    if let Some(TxnOpResponse::Get(get)) = recorded {
        for kv in get.kvs() {
            out.0.insert(String::from_utf8_lossy(&kv.key()[members.len()..]).into_owned(), kv.value().to_vec());
        }
    }
    if let Some(TxnOpResponse::Get(get)) = removing {
        for kv in get.kvs() {
            out.1.insert(String::from_utf8_lossy(&kv.key()[removals.len()..]).into_owned());
        }
    }
    out
}
