//! etcd as the cluster's catalog: reads, the compare-and-swap commit, and the
//! node's registration under a lease. Every call has quiver-etcd's deadline
//! (`ConnectOptions::default()`: 3 s), so a node whose etcd is gone answers
//! with a clear UNAVAILABLE instead of hanging.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use quiver_etcd::{
    Client, Compare, CompareResult, ConnectOptions, Credentials, Event, EventType, RequestOp, Tls,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::catalog::{
    IntentEntry, Keys, NodeEntry, ReadsEntry, RequestEntry, Settings, TableEntry,
};
use crate::error::{ClusterError, Result};

/// A catalog record and the etcd modification revision it was read at (0: absent).
#[derive(Debug, Clone)]
pub(crate) struct Versioned<T> {
    /// The record, `None` when the key is absent.
    pub(crate) value: Option<T>,
    /// The key's modification revision, 0 when absent.
    pub(crate) revision: i64,
}

/// What the catalog holds, as one read saw it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// Live nodes by id.
    pub(crate) nodes: BTreeMap<String, NodeEntry>,
    /// Tables by name, with their keys' revisions.
    pub(crate) tables: BTreeMap<String, (TableEntry, i64)>,
    /// Puts and repairs in flight, by key (`<node>/<id>`).
    pub(crate) intents: BTreeMap<String, IntentEntry>,
    /// What each node's readers hold, by node.
    pub(crate) reads: BTreeMap<String, ReadsEntry>,
    /// What is set for the whole cluster.
    pub(crate) settings: Settings,
    /// etcd's revision when it was read.
    pub(crate) revision: i64,
}

/// A change the catalog watch reports.
#[derive(Debug)]
pub(crate) enum Change {
    /// A node joined or left.
    Nodes,
    /// Table `name` was committed (its new entry) or deleted (`None`), at
    /// `revision`.
    Table {
        name: String,
        entry: Option<TableEntry>,
        revision: i64,
    },
}

impl Snapshot {
    /// Every partition a put or repair in flight is storing.
    pub(crate) fn intended(&self) -> HashSet<&str> {
        self.intents
            .values()
            .flat_map(|intent| &intent.partitions)
            .map(String::as_str)
            .collect()
    }

    /// The partitions whose copies on node `node` some node's readers hold
    /// (every copy of those an entry of an earlier build names).
    pub(crate) fn read_on<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a str> {
        self.reads.values().flat_map(move |reads| {
            let copies = reads
                .copies
                .iter()
                .filter(move |(_, holder)| holder == node)
                .map(|(partition, _)| partition.as_str());
            let names = reads
                .copies
                .is_empty()
                .then_some(&reads.partitions)
                .into_iter()
                .flatten()
                .map(String::as_str);
            copies.chain(names)
        })
    }
}

/// Why a lease's renewals stopped.
#[derive(Debug)]
pub(crate) enum LeaseEnd {
    /// etcd answered that the lease has expired: its keys are gone.
    Expired,
    /// etcd did not answer (it is down, restarting, or out of reach). The
    /// lease may well be alive: etcd keeps leases over a restart, and gives
    /// each its whole TTL again when a leader takes over.
    Unanswered(ClusterError),
}

fn ttl_duration(seconds: i64) -> Duration {
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

/// An intent this node wrote: its key, deleted by the commit it fences.
#[derive(Debug, Clone)]
pub(crate) struct Intent {
    pub(crate) key: String,
}

/// What else a commit checks and writes besides the tables.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Guard<'a> {
    /// The put's intent: it must still exist, and the commit deletes it.
    pub(crate) intent: Option<&'a Intent>,
    /// The put's request id and the lease its record lives under: no
    /// commit with that id may exist yet, and this one records it.
    pub(crate) request: Option<(&'a str, i64)>,
}

/// How a commit ended.
#[derive(Debug)]
pub(crate) enum Commit {
    /// Written.
    Done,
    /// Another commit changed a table first; nothing was written.
    Lost,
    /// A commit with the same request id came first; nothing was written.
    Repeated(RequestEntry),
}

/// Where the cluster's catalog is and how a node reaches it.
#[derive(Debug, Clone)]
pub struct EtcdConfig {
    /// etcd's client endpoints: `http://host:port`, or `https://host:port`
    /// with `tls`.
    pub endpoints: Vec<String>,
    /// The prefix of the cluster's keys.
    pub prefix: String,
    /// TLS to etcd: the CA of its certificate, and this node's certificate
    /// for an etcd that checks its clients'.
    pub tls: Option<Tls>,
    /// A user of etcd's authentication, when it is on.
    pub user: Option<Credentials>,
}

/// A connection to etcd and the cluster's keys in it.
#[derive(Debug, Clone)]
pub(crate) struct Etcd {
    client: Client,
    keys: Keys,
}

/// What a watch event under `tables` (the tables' prefix) says: a commit
/// or a delete; `None` for an entry that does not parse (logged).
fn table_change(event: &Event, tables: &str) -> Option<Change> {
    let kv = event.kv.as_ref()?;
    let key = String::from_utf8_lossy(&kv.key);
    let name = key.strip_prefix(tables)?.to_string();
    let entry = match event.r#type() {
        EventType::Delete => None,
        EventType::Put => match parse::<TableEntry>(&kv.key, &kv.value) {
            Ok(entry) => Some(entry),
            Err(e) => {
                tracing::warn!("catalog watch: {e}");
                return None;
            }
        },
    };
    Some(Change::Table {
        name,
        entry,
        revision: kv.mod_revision,
    })
}

fn parse<T: DeserializeOwned>(key: &[u8], value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| ClusterError::Malformed {
        key: String::from_utf8_lossy(key).into_owned(),
        detail: e.to_string(),
    })
}

pub(crate) fn json<T: Serialize>(value: &T) -> Vec<u8> {
    // Serializing these plain structs cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

impl Etcd {
    /// Connects to the etcd of `config`. The connection is made lazily by
    /// the client: a node starts while etcd is down and registers when it
    /// comes up.
    pub(crate) fn connect(config: &EtcdConfig) -> Result<Self> {
        let options = ConnectOptions {
            tls: config.tls.clone(),
            user: config.user.clone(),
            ..ConnectOptions::default()
        };
        let client = Client::connect(&config.endpoints, options)?;
        Ok(Self {
            client,
            keys: Keys::new(&config.prefix),
        })
    }

    /// Everything under the cluster's prefix: nodes, tables and intents,
    /// in one read, so at one revision (a partition moving from an intent
    /// to a table's version is seen in one or the other, never neither).
    pub(crate) async fn snapshot(&self) -> Result<Snapshot> {
        let (nodes, tables, intents) = (self.keys.nodes(), self.keys.tables(), self.keys.intents());
        let (reads, settings) = (self.keys.reads(), self.keys.settings());
        let (start, end) = self.keys.snapshot_range();
        let all = self.client.get_range(start, end).await?;
        let mut snapshot = Snapshot {
            revision: all.header.as_ref().map_or(0, |h| h.revision),
            ..Snapshot::default()
        };
        for kv in &all.kvs {
            let key = String::from_utf8_lossy(&kv.key);
            if key.starts_with(&nodes) {
                let node: NodeEntry = parse(&kv.key, &kv.value)?;
                snapshot.nodes.insert(node.id.clone(), node);
            } else if let Some(name) = key.strip_prefix(&tables) {
                let entry: TableEntry = parse(&kv.key, &kv.value)?;
                snapshot
                    .tables
                    .insert(name.to_string(), (entry, kv.mod_revision));
            } else if let Some(id) = key.strip_prefix(&intents) {
                let intent: IntentEntry = parse(&kv.key, &kv.value)?;
                snapshot.intents.insert(id.to_string(), intent);
            } else if let Some(node) = key.strip_prefix(&reads) {
                let held: ReadsEntry = parse(&kv.key, &kv.value)?;
                snapshot.reads.insert(node.to_string(), held);
            } else if key == settings {
                snapshot.settings = parse(&kv.key, &kv.value)?;
            }
        }
        Ok(snapshot)
    }

    /// What is set for the whole cluster (the defaults if nothing is).
    pub(crate) async fn settings(&self) -> Result<Settings> {
        match self.client.get(self.keys.settings()).await? {
            None => Ok(Settings::default()),
            Some(kv) => parse(&kv.key, &kv.value),
        }
    }

    /// Sets what is set for the whole cluster (no lease: it outlives every
    /// node).
    pub(crate) async fn set_settings(&self, settings: &Settings) -> Result<()> {
        self.client
            .put(self.keys.settings(), json(settings), 0)
            .await?;
        Ok(())
    }

    /// Records `intent` at `key` (from [`Etcd::intent_key`]) under
    /// `lease`: its partitions are not orphans while it lasts. Written
    /// before the first copy is sent.
    pub(crate) async fn intend(&self, key: &str, intent: &IntentEntry, lease: i64) -> Result<()> {
        self.client.put(key, json(intent), lease).await?;
        Ok(())
    }

    /// Records that node `node`'s readers hold `copies` (partition, node),
    /// under `lease` (the node's); none: the key is deleted.
    pub(crate) async fn hold_reads(
        &self,
        node: &str,
        copies: Vec<(String, String)>,
        lease: i64,
    ) -> Result<()> {
        let key = self.keys.reads_of(node);
        if copies.is_empty() {
            self.client.delete(key.as_str()).await?;
        } else {
            // `copies` come sorted: a partition's copies are next to each other.
            let mut partitions: Vec<String> = copies.iter().map(|(p, _)| p.clone()).collect();
            partitions.dedup();
            let entry = ReadsEntry { partitions, copies };
            self.client.put(key.as_str(), json(&entry), lease).await?;
        }
        Ok(())
    }

    /// Deletes an intent whose put failed (its partitions become orphans).
    pub(crate) async fn forget(&self, intent: &Intent) -> Result<()> {
        self.client.delete(intent.key.as_str()).await?;
        Ok(())
    }

    /// A new intent key of node `node`.
    pub(crate) fn intent_key(&self, node: &str) -> String {
        format!(
            "{}{}",
            self.keys.intents_of(node),
            uuid::Uuid::new_v4().simple()
        )
    }

    /// The key of intent `id` as [`Snapshot::intents`] has it (`<node>/<id>`).
    pub(crate) fn intent_at(&self, id: &str) -> String {
        format!("{}{id}", self.keys.intents())
    }

    /// Table `name`'s entry, read from etcd's leader (linearizable).
    pub(crate) async fn table(&self, name: &str) -> Result<Versioned<TableEntry>> {
        match self.client.get(self.keys.table(name)).await? {
            None => Ok(Versioned {
                value: None,
                revision: 0,
            }),
            Some(kv) => Ok(Versioned {
                value: Some(parse(&kv.key, &kv.value)?),
                revision: kv.mod_revision,
            }),
        }
    }

    /// Applies `writes` (table name, new entry or `None` to delete) if every
    /// table of `reads` still has the revision it was read at (0: absent),
    /// and what `guard` asks holds: the intent still exists (the same
    /// transaction deletes it), no commit has the request id yet (this one
    /// records it, with the version its first write, the put's table,
    /// publishes).
    /// [`ClusterError::Fenced`]: the intent is gone with this node's lease,
    /// so its partitions may have been dropped; nothing was written.
    pub(crate) async fn commit(
        &self,
        reads: &[(&str, i64)],
        writes: &[(&str, Option<&TableEntry>)],
        guard: Guard<'_>,
    ) -> Result<Commit> {
        let mut compares: Vec<Compare> = reads
            .iter()
            .map(|(name, revision)| {
                Compare::mod_revision(self.keys.table(name), CompareResult::Equal, *revision)
            })
            .collect();
        let mut ops: Vec<RequestOp> = writes
            .iter()
            .map(|(name, entry)| match entry {
                Some(entry) => RequestOp::put(self.keys.table(name), json(entry), 0),
                None => RequestOp::delete(self.keys.table(name)),
            })
            .collect();
        let mut otherwise = Vec::new();
        if let Some(intent) = guard.intent {
            compares.push(Compare::create_revision(
                intent.key.as_str(),
                CompareResult::Greater,
                0,
            ));
            ops.push(RequestOp::delete(intent.key.as_str()));
            otherwise.push(RequestOp::get(intent.key.as_str()));
        }
        let request_key = guard.request.map(|(id, _)| self.keys.written(id));
        if let (Some((_, lease)), Some(key), Some((table, Some(entry)))) =
            (guard.request, &request_key, writes.first())
        {
            let record = RequestEntry {
                table: (*table).to_string(),
                version: entry.version,
                rows: entry.rows,
                bytes: entry.bytes,
            };
            compares.push(Compare::create_revision(
                key.as_str(),
                CompareResult::Equal,
                0,
            ));
            ops.push(RequestOp::put(key.as_str(), json(&record), lease));
            otherwise.push(RequestOp::get(key.as_str()));
        }
        let answer = self.client.txn(compares, ops, otherwise).await?;
        if answer.succeeded {
            return Ok(Commit::Done);
        }
        if guard.intent.is_some() && answer.range(0).is_empty() {
            return Err(ClusterError::Fenced);
        }
        let recorded = answer.range(usize::from(guard.intent.is_some())).first();
        if request_key.is_some()
            && let Some(kv) = recorded
        {
            return Ok(Commit::Repeated(parse(&kv.key, &kv.value)?));
        }
        Ok(Commit::Lost)
    }

    /// A lease of `ttl` seconds for records that outlive no node in
    /// particular (the requests').
    pub(crate) async fn lease(&self, ttl: i64) -> Result<i64> {
        Ok(self.client.lease_grant(ttl).await?)
    }

    /// The cluster's secret, which signs the nodes' calls to each other: 32
    /// random bytes (in hex) made by the first node to ask, in one
    /// create-if-absent transaction, and read by every other. Whoever may
    /// read the cluster's keys in etcd may act as a node.
    pub(crate) async fn secret(&self) -> Result<Vec<u8>> {
        let key = self.keys.secret();
        let mut fresh = [0u8; 32];
        getrandom::fill(&mut fresh).map_err(|e| {
            ClusterError::Invalid(format!("no randomness for the cluster secret: {e}"))
        })?;
        let fresh: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
        match self.create(&key, fresh.as_bytes(), 0).await? {
            None => Ok(fresh.into_bytes()),
            Some(held) => Ok(held.value),
        }
    }

    /// Writes `value` at `key` under `lease` if the key is absent: `None`
    /// when written, else the key as it is (`Malformed` if it vanished
    /// between the two, which only a delete from outside can do).
    async fn create(
        &self,
        key: &str,
        value: &[u8],
        lease: i64,
    ) -> Result<Option<quiver_etcd::KeyValue>> {
        let answer = self
            .client
            .txn(
                vec![Compare::create_revision(key, CompareResult::Equal, 0)],
                vec![RequestOp::put(key, value, lease)],
                vec![RequestOp::get(key)],
            )
            .await?;
        if answer.succeeded {
            return Ok(None);
        }
        answer
            .range(0)
            .first()
            .cloned()
            .map(Some)
            .ok_or_else(|| ClusterError::Malformed {
                key: key.to_string(),
                detail: "the key vanished while it was created".into(),
            })
    }

    /// Registers `node` under a new lease of `ttl` seconds; returns the
    /// lease. Its key is created if absent, or taken over from `previous`
    /// (this process's lease before it was lost, whose key outlived it
    /// while etcd was away); held under any other lease, the id belongs to
    /// another live process: [`ClusterError::IdInUse`].
    pub(crate) async fn register(
        &self,
        node: &NodeEntry,
        ttl: i64,
        previous: Option<i64>,
    ) -> Result<i64> {
        let key = self.keys.node(&node.id);
        let lease = self.client.lease_grant(ttl).await?;
        let holder = match self.create(&key, &json(node), lease).await {
            Ok(None) => return Ok(lease),
            Ok(Some(holder)) => Some(holder),
            // Deleted between the compare and the read: its lease just ended.
            Err(ClusterError::Malformed { .. }) => None,
            Err(e) => return Err(e),
        };
        if let (Some(previous), Some(kv)) = (previous, &holder)
            && kv.lease == previous
        {
            let taken = self
                .client
                .txn(
                    vec![Compare::lease(key.as_str(), CompareResult::Equal, previous)],
                    vec![RequestOp::put(key.as_str(), json(node), lease)],
                    Vec::new(),
                )
                .await?;
            if taken.succeeded {
                return Ok(lease);
            }
        }
        if let Err(e) = self.client.lease_revoke(lease).await {
            tracing::debug!("revoking an unused lease: {e}");
        }
        let location = holder
            .and_then(|kv| parse::<NodeEntry>(&kv.key, &kv.value).ok())
            .map_or_else(|| "an unknown location".to_string(), |n| n.location);
        Err(ClusterError::IdInUse {
            id: node.id.clone(),
            location,
        })
    }

    /// Keeps `lease` alive until it cannot, telling `renewed` of every
    /// renewal etcd answers: when it was asked for and the TTL etcd named
    /// (the lease cannot end before the one plus the other).
    pub(crate) async fn keep_alive(
        &self,
        lease: i64,
        every: Duration,
        renewed: impl Fn(Instant, Duration),
    ) -> LeaseEnd {
        let mut asked = Instant::now();
        let mut keeper = match self.client.lease_keep_alive(lease).await {
            Ok(keeper) => keeper,
            Err(e) => return LeaseEnd::Unanswered(e.into()),
        };
        loop {
            match keeper.keep_alive().await {
                Ok(ttl) if ttl > 0 => renewed(asked, ttl_duration(ttl)),
                Ok(_) => return LeaseEnd::Expired,
                Err(e) => return LeaseEnd::Unanswered(e.into()),
            }
            tokio::time::sleep(every).await;
            asked = Instant::now();
        }
    }

    /// Renews `lease` once: the TTL etcd names, or `None` when etcd says it
    /// has expired.
    pub(crate) async fn renew(&self, lease: i64) -> Result<Option<Duration>> {
        let mut keeper = self.client.lease_keep_alive(lease).await?;
        let ttl = keeper.keep_alive().await?;
        Ok((ttl > 0).then(|| ttl_duration(ttl)))
    }

    /// Calls `changed` whenever a node joins or leaves or a table is
    /// committed, until a watch breaks: returns when etcd cannot be reached
    /// or cancels one.
    ///
    /// Two watches, of the nodes' keys and of the tables': the other keys
    /// (intents, what readers hold, request records) change several times
    /// per append and matter to no one at once. A table's change carries its
    /// new entry, so no one reads the catalog for it.
    pub(crate) async fn watch(&self, changed: impl Fn(Change)) -> ClusterError {
        let mut nodes = match self.client.watch_prefix(self.keys.nodes()).await {
            Ok(events) => events,
            Err(e) => return e.into(),
        };
        let tables = self.keys.tables();
        let mut committed = match self.client.watch_prefix(tables.as_str()).await {
            Ok(events) => events,
            Err(e) => return e.into(),
        };
        loop {
            // No time limit: a quiet cluster sends nothing for as long as it is quiet.
            let (answer, of_nodes) = tokio::select! {
                answer = nodes.message() => (answer, true),
                answer = committed.message() => (answer, false),
            };
            match answer {
                Ok(Some(answer)) if answer.canceled => {
                    return ClusterError::Catalog(format!(
                        "etcd cancelled the catalog watch: {}",
                        answer.cancel_reason
                    ));
                }
                Ok(Some(answer)) if of_nodes && !answer.events.is_empty() => {
                    changed(Change::Nodes);
                }
                Ok(Some(answer)) if !of_nodes => {
                    answer
                        .events
                        .iter()
                        .filter_map(|event| table_change(event, &tables))
                        .for_each(&changed);
                }
                Ok(Some(_)) => {}
                Ok(None) => return ClusterError::Catalog("etcd ended the catalog watch".into()),
                Err(e) => return ClusterError::from(e),
            }
        }
    }

    /// Discards etcd's history before `revision` ([`crate::history`]).
    pub(crate) async fn compact(&self, revision: i64) -> Result<()> {
        Ok(self.client.compact(revision).await?)
    }

    /// Ends `lease` now (a clean shutdown): the node leaves at once.
    pub(crate) async fn revoke(&self, lease: i64) -> Result<()> {
        Ok(self.client.lease_revoke(lease).await?)
    }
}
