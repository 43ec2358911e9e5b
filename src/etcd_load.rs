//! `kubefold etcd-raw-load` (hidden, with the `etcd` feature): the raw
//! etcd reference of the benchmarks (`ops/bench/run --etcd`). It reads
//! every key a replica wrote under a prefix of one etcd, groups them by the
//! revision they were written at (each group is one of kubefold's
//! transactions), and writes the same keys and values to another etcd, one
//! plain transaction per group (the head key added where the group lacks
//! it, as every kubefold transaction writes it): the same records in
//! transactions of the same shape, without kubefold's fencing comparisons,
//! its read-back or anything else, as fast as the client can. Prints one
//! JSON line: the transactions, keys, bytes and seconds of the writes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use kubefold_etcd::etcd_client::{Client, ConnectOptions, GetOptions, Txn, TxnOp};
use kubefold_etcd::prefix_end;

/// Flags of `kubefold etcd-raw-load`.
#[derive(clap::Args)]
pub struct RawLoadArgs {
    /// The etcd a replica wrote (client URL).
    #[arg(long)]
    from: String,
    /// The etcd to write the same transactions to (client URL); it should be empty.
    #[arg(long)]
    to: String,
    /// The prefix kubefold wrote under.
    #[arg(long, default_value = "/kubefold")]
    prefix: String,
    /// Writers at once, each taking every Nth transaction (1: one after
    /// another, as kubefold's fenced commits are).
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
}

/// One of kubefold's transactions: its keys and values.
type Group = Vec<(Vec<u8>, Vec<u8>)>;

/// Reads every key under `prefix` except the lease-bound ones (replicas
/// and owners), grouped by the revision that wrote them, in revision order.
async fn read_groups(client: &Client, prefix: &str) -> anyhow::Result<Vec<Group>> {
    let start = format!("{prefix}/").into_bytes();
    let end = prefix_end(&start);
    let skip = [format!("{prefix}/replicas/").into_bytes(), format!("{prefix}/owners/").into_bytes()];
    let mut kv = client.kv_client();
    let mut groups: BTreeMap<i64, Group> = BTreeMap::new();
    let mut from = start;
    let mut revision = 0;
    loop {
        let mut options = GetOptions::new().with_range(end.clone()).with_limit(1000);
        if revision > 0 {
            options = options.with_revision(revision);
        }
        let response = kv.get(from.clone(), Some(options)).await.context("reading the source etcd")?;
        if revision == 0 {
            revision = response.header().map_or(0, |h| h.revision());
        }
        for item in response.kvs() {
            if !skip.iter().any(|s| item.key().starts_with(s)) {
                groups.entry(item.mod_revision()).or_default().push((item.key().to_vec(), item.value().to_vec()));
            }
        }
        match response.kvs().last() {
            Some(last) if response.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => break,
        }
    }
    Ok(groups.into_values().collect())
}

/// What the transactions to write hold.
#[derive(Debug, Default, PartialEq)]
struct Totals {
    keys: usize,
    records: usize,
    bytes: usize,
    largest_ops: usize,
    largest_bytes: usize,
}

/// Adds the head key to every group without it (every kubefold
/// transaction writes it; only the last write of it is still in etcd),
/// valued as kubefold values it (`N RV`), and counts the keys, event
/// records and bytes.
fn complete(groups: &mut [Group], head: &[u8], events: &[u8]) -> Totals {
    let mut totals = Totals::default();
    for group in groups.iter_mut() {
        let n = group.iter().filter(|(k, _)| k.starts_with(events)).count();
        if !group.iter().any(|(k, _)| k == head) {
            group.push((head.to_vec(), format!("{n} 0").into_bytes()));
        }
        let size: usize = group.iter().map(|(k, v)| k.len() + v.len()).sum();
        totals.keys += group.len();
        totals.records += n;
        totals.bytes += size;
        totals.largest_ops = totals.largest_ops.max(group.len());
        totals.largest_bytes = totals.largest_bytes.max(size);
    }
    totals
}

/// Runs `kubefold etcd-raw-load`.
pub fn run(args: RawLoadArgs) -> anyhow::Result<()> {
    if args.concurrency == 0 {
        bail!("--concurrency must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    runtime.block_on(async move {
        let options = || ConnectOptions::new().with_connect_timeout(Duration::from_secs(5)).with_timeout(Duration::from_secs(30));
        let source = Client::connect([args.from.as_str()], Some(options())).await.with_context(|| format!("cannot reach etcd at {}", args.from))?;
        let target = Client::connect([args.to.as_str()], Some(options())).await.with_context(|| format!("cannot reach etcd at {}", args.to))?;
        let prefix = args.prefix.trim_end_matches('/').to_string();
        let head = format!("{prefix}/head").into_bytes();
        let events = format!("{prefix}/e/").into_bytes();
        let mut groups = read_groups(&source, &prefix).await?;
        if groups.is_empty() {
            bail!("no key under {prefix}/ in etcd at {}", args.from);
        }
        let totals = complete(&mut groups, &head, &events);
        let transactions = groups.len();
        // Each writer takes every Nth transaction, in order.
        let mut shares: Vec<Vec<Group>> = (0..args.concurrency).map(|_| Vec::new()).collect();
        for (i, group) in groups.into_iter().enumerate() {
            shares[i % args.concurrency].push(group);
        }
        let started = Instant::now();
        let writers: Vec<_> = shares
            .into_iter()
            .map(|share| {
                let mut kv = target.kv_client();
                tokio::spawn(async move {
                    for group in share {
                        let ops: Vec<TxnOp> = group.into_iter().map(|(k, v)| TxnOp::put(k, v, None)).collect();
                        kv.txn(Txn::new().and_then(ops)).await?;
                    }
                    Ok::<_, kubefold_etcd::etcd_client::Error>(())
                })
            })
            .collect();
        for writer in writers {
            writer.await.context("a writer failed")?.context("a transaction to the target etcd failed")?;
        }
        let seconds = started.elapsed().as_secs_f64();
        let line = serde_json::json!({
            "transactions": transactions,
            "keys": totals.keys,
            "records": totals.records,
            "bytes": totals.bytes,
            "largestTransactionOps": totals.largest_ops,
            "largestTransactionBytes": totals.largest_bytes,
            "concurrency": args.concurrency,
            "seconds": seconds,
        });
        println!("{line}");
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_transaction_gets_the_head_key_and_is_counted() {
        let kv = |k: &str, v: &str| (k.as_bytes().to_vec(), v.as_bytes().to_vec());
        let mut groups = vec![vec![kv("/k/e/a", "12345"), kv("/k/e/b", "1"), kv("/k/c/m", "9")], vec![kv("/k/e/c", "22"), kv("/k/head", "1 0")]];
        let totals = complete(&mut groups, b"/k/head", b"/k/e/");
        assert_eq!(groups[0].last(), Some(&kv("/k/head", "2 0")), "the head key a kubefold transaction writes, with its event count");
        assert_eq!(groups[1].len(), 2, "a group holding the head key keeps it once");
        assert_eq!((totals.keys, totals.records, totals.largest_ops), (6, 3, 4));
        assert_eq!(totals.bytes, groups.iter().flatten().map(|(k, v)| k.len() + v.len()).sum::<usize>());
        assert_eq!(totals.largest_bytes, 11 + 7 + 7 + 10);
    }
}
