//! The client against a real etcd (Debian's `etcd-server`, or `$ETCD_BIN`)
//! on 127.0.0.1, with a temporary data directory. scripts/test.sh installs
//! etcd first; without it these tests say so and pass only outside CI.
#![allow(clippy::unwrap_used)] // test helpers: a failed unwrap is a failed test

use std::process::Command;
use std::time::{Duration, Instant};

use quiver_etcd::testing::{TestEtcd, free_port};
use quiver_etcd::{
    Client, Compare, CompareResult, ConnectOptions, Credentials, EtcdError, EventType, RequestOp,
    Tls,
};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};

type Etcd = TestEtcd;

/// etcd on loopback, or `None` (outside CI) when it is not installed.
fn start_etcd() -> Option<Etcd> {
    TestEtcd::start(false, &[])
}

/// etcd on loopback with `flags`, its client URL https when `tls`.
fn start_etcd_with(tls: bool, flags: &[String]) -> Option<Etcd> {
    TestEtcd::start(tls, flags)
}

/// A client of `etcd`, once etcd answers (within 20 s).
async fn client(etcd: &Etcd) -> Client {
    etcd.client(ConnectOptions::default()).await
}

/// A client of `etcd` with `options`, once etcd answers (within 20 s).
async fn client_with(etcd: &Etcd, options: ConnectOptions) -> Client {
    etcd.client(options).await
}

#[tokio::test]
async fn keys_are_written_read_by_key_and_prefix_and_deleted() {
    let Some(etcd) = start_etcd() else { return };
    let client = client(&etcd).await;
    client.put("/t/a", "1", 0).await.unwrap();
    client.put("/t/b", "2", 0).await.unwrap();
    client.put("/u/c", "3", 0).await.unwrap();

    let a = client.get("/t/a").await.unwrap().expect("/t/a was written");
    assert_eq!(
        (a.key.as_slice(), a.value.as_slice()),
        (&b"/t/a"[..], &b"1"[..])
    );
    assert!(client.get("/t/none").await.unwrap().is_none());

    let under_t = client.get_prefix("/t/").await.unwrap();
    let keys: Vec<&[u8]> = under_t.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, [&b"/t/a"[..], &b"/t/b"[..]]);
    let header = under_t.header.expect("a response header");
    assert!(header.revision >= a.mod_revision);

    assert_eq!(client.delete("/t/a").await.unwrap(), 1);
    assert_eq!(client.delete("/t/a").await.unwrap(), 0);
    assert!(client.get("/t/a").await.unwrap().is_none());
}

#[tokio::test]
async fn a_transaction_applies_only_while_its_comparisons_hold() {
    let Some(etcd) = start_etcd() else { return };
    let client = client(&etcd).await;

    // Create-if-absent: the first wins, the second reads the winner instead.
    let create = |value: &'static str| {
        client.txn(
            vec![Compare::create_revision("/id/n1", CompareResult::Equal, 0)],
            vec![RequestOp::put("/id/n1", value, 0)],
            vec![RequestOp::get("/id/n1")],
        )
    };
    assert!(create("first").await.unwrap().succeeded);
    let second = create("second").await.unwrap();
    assert!(!second.succeeded);
    assert_eq!(second.range(0)[0].value, b"first");

    // Compare-and-swap on the modification revision.
    let read = client.get("/id/n1").await.unwrap().unwrap();
    let swap = |value: &'static str| {
        client.txn(
            vec![Compare::mod_revision(
                "/id/n1",
                CompareResult::Equal,
                read.mod_revision,
            )],
            vec![RequestOp::put("/id/n1", value, 0)],
            vec![],
        )
    };
    assert!(swap("swapped").await.unwrap().succeeded);
    assert!(
        !swap("stale").await.unwrap().succeeded,
        "the revision moved on"
    );
    let value = client.get("/id/n1").await.unwrap().unwrap().value;
    assert_eq!(value, b"swapped");

    // A value comparison, and a delete in a transaction.
    let gone = client
        .txn(
            vec![Compare::value("/id/n1", CompareResult::Equal, "swapped")],
            vec![RequestOp::delete("/id/n1")],
            vec![],
        )
        .await
        .unwrap();
    assert!(gone.succeeded);
    assert!(client.get("/id/n1").await.unwrap().is_none());
}

#[tokio::test]
async fn a_lease_kept_alive_keeps_its_key_and_its_end_deletes_it() {
    let Some(etcd) = start_etcd() else { return };
    let client = client(&etcd).await;
    let lease = client.lease_grant(2).await.unwrap();
    client.put("/nodes/n1", "up", lease).await.unwrap();
    assert_eq!(client.get("/nodes/n1").await.unwrap().unwrap().lease, lease);

    // Kept alive past its TTL of 2 s: the key stays.
    let mut keeper = client.lease_keep_alive(lease).await.unwrap();
    for _ in 0..6 {
        assert!(keeper.keep_alive().await.unwrap() > 0);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(client.get("/nodes/n1").await.unwrap().is_some());

    client.lease_revoke(lease).await.unwrap();
    assert!(client.get("/nodes/n1").await.unwrap().is_none());
    assert_eq!(
        keeper.keep_alive().await.unwrap(),
        0,
        "a revoked lease has no time left"
    );
}

#[tokio::test]
async fn a_watch_sees_the_puts_and_deletes_under_its_prefix_only() {
    let Some(etcd) = start_etcd() else { return };
    let client = client(&etcd).await;
    let mut watcher = client.watch_prefix("/w/").await.unwrap();
    client.put("/elsewhere", "x", 0).await.unwrap();
    client.put("/w/a", "1", 0).await.unwrap();
    client.delete("/w/a").await.unwrap();

    let mut seen = Vec::new();
    while seen.len() < 2 {
        let answer = tokio::time::timeout(Duration::from_secs(10), watcher.message())
            .await
            .expect("events within 10 s")
            .unwrap()
            .expect("the watch goes on");
        for event in answer.events {
            let kv = event.kv.expect("an event's key");
            seen.push((event.r#type, kv.key));
        }
    }
    assert_eq!(
        seen,
        [
            (EventType::Put as i32, b"/w/a".to_vec()),
            (EventType::Delete as i32, b"/w/a".to_vec()),
        ]
    );
}

#[tokio::test]
async fn a_call_to_an_etcd_that_is_gone_fails_within_its_deadline() {
    let port = free_port();
    let options = ConnectOptions {
        request_timeout: Duration::from_millis(500),
        connect_timeout: Duration::from_millis(500),
        ..ConnectOptions::default()
    };
    let client = Client::connect(&[format!("127.0.0.1:{port}")], options).unwrap();
    let started = Instant::now();
    let error = client.get("/k").await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(
            error.code(),
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
        ),
        "{error}"
    );
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate it
/// signed, and a client certificate of another CA, as PEM files in `dir`.
struct Pki {
    ca: Vec<u8>,
    client: (Vec<u8>, Vec<u8>),
    rogue: (Vec<u8>, Vec<u8>),
    flags: Vec<String>,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

fn leaf(issuer: &CertifiedIssuer<'static, KeyPair>, names: &[&str]) -> (Vec<u8>, Vec<u8>) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(names)
        .unwrap()
        .signed_by(&key, issuer)
        .unwrap();
    (cert.pem().into_bytes(), key.serialize_pem().into_bytes())
}

impl Pki {
    fn new(dir: &std::path::Path) -> Self {
        let authority = ca("quiver-etcd test CA");
        let (server_cert, server_key) = leaf(&authority, &["127.0.0.1", "localhost"]);
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            path.display().to_string()
        };
        let flags = vec![
            format!("--cert-file={}", write("server.pem", &server_cert)),
            format!("--key-file={}", write("server.key", &server_key)),
            format!(
                "--trusted-ca-file={}",
                write("ca.pem", authority.pem().as_bytes())
            ),
            "--client-cert-auth".to_string(),
        ];
        Self {
            ca: authority.pem().into_bytes(),
            client: leaf(&authority, &["quiver-node"]),
            rogue: leaf(&ca("another CA"), &["quiver-node"]),
            flags,
        }
    }
}

fn quick(tls: Option<Tls>, user: Option<Credentials>) -> ConnectOptions {
    ConnectOptions {
        tls,
        user,
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(2),
        ..ConnectOptions::default()
    }
}

#[tokio::test]
async fn tls_with_client_certificates_reaches_etcd_and_other_certificates_do_not() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let Some(etcd) = start_etcd_with(true, &pki.flags) else {
        return;
    };
    let tls = |identity| Tls {
        ca: pki.ca.clone(),
        identity,
    };

    let client = client_with(&etcd, quick(Some(tls(Some(pki.client.clone()))), None)).await;
    client.put("/tls/a", "1", 0).await.unwrap();
    assert_eq!(client.get("/tls/a").await.unwrap().unwrap().value, b"1");

    // No client certificate, a certificate of another CA, plain http: all refused.
    for (what, options) in [
        ("no client certificate", quick(Some(tls(None)), None)),
        (
            "another CA's certificate",
            quick(Some(tls(Some(pki.rogue.clone()))), None),
        ),
    ] {
        let client = Client::connect(std::slice::from_ref(&etcd.endpoint), options).unwrap();
        client.get("/tls/a").await.expect_err(what);
    }
    let plain = format!("http://{}", etcd.endpoint);
    let client = Client::connect(&[plain], quick(None, None)).unwrap();
    assert!(
        client.get("/tls/a").await.is_err(),
        "plain http to a TLS etcd"
    );

    // A CA that did not sign etcd's certificate: the server is not trusted.
    let other_ca = ca("not etcd's CA").pem().into_bytes();
    let untrusting = Tls {
        ca: other_ca,
        identity: Some(pki.client.clone()),
    };
    let client = Client::connect(
        std::slice::from_ref(&etcd.endpoint),
        quick(Some(untrusting), None),
    )
    .unwrap();
    assert!(
        client.get("/tls/a").await.is_err(),
        "etcd's certificate was trusted"
    );
}

/// `etcdctl` on `etcd` with `args`, which must succeed.
fn etcdctl(etcd: &Etcd, args: &[&str]) {
    let endpoint = format!("--endpoints=http://{}", etcd.endpoint);
    let output = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(&endpoint)
        .args(args)
        .output()
        .expect("etcdctl runs (Debian's etcd-client; scripts/install-cluster-tools.sh)");
    assert!(
        output.status.success(),
        "etcdctl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn etcd_users_are_authenticated_and_a_token_that_expired_is_renewed() {
    // Tokens live 2 s here (etcd's default is 300 s).
    let Some(etcd) = start_etcd_with(false, &["--auth-token-ttl=2".to_string()]) else {
        return;
    };
    let _ = client(&etcd).await; // etcd answers
    etcdctl(&etcd, &["user", "add", "root:root-pw"]);
    etcdctl(&etcd, &["user", "add", "quiver:quiver-pw"]);
    etcdctl(&etcd, &["role", "add", "quiver"]);
    etcdctl(
        &etcd,
        &[
            "role",
            "grant-permission",
            "quiver",
            "--prefix=true",
            "readwrite",
            "/q/",
        ],
    );
    etcdctl(&etcd, &["user", "grant-role", "quiver", "quiver"]);
    etcdctl(&etcd, &["auth", "enable"]);

    let user = |password: &str| {
        Some(Credentials {
            name: "quiver".into(),
            password: password.into(),
        })
    };
    let client = Client::connect(
        std::slice::from_ref(&etcd.endpoint),
        quick(None, user("quiver-pw")),
    )
    .unwrap();
    client.put("/q/a", "1", 0).await.unwrap();
    assert_eq!(client.get("/q/a").await.unwrap().unwrap().value, b"1");
    // The role allows /q/ only.
    let denied = client.put("/elsewhere", "x", 0).await.unwrap_err();
    assert_eq!(denied.code(), tonic::Code::PermissionDenied, "{denied}");

    // The token expires; the next call gets a new one: a read, then a watch (which etcd
    // refuses by cancelling it, not with an error), then a lease.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(client.get("/q/a").await.unwrap().unwrap().value, b"1");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut watcher = client.watch_prefix("/q/").await.unwrap();
    client.put("/q/b", "2", 0).await.unwrap();
    let events = tokio::time::timeout(Duration::from_secs(10), watcher.message())
        .await
        .expect("an event within 10 s")
        .unwrap()
        .expect("the watch goes on");
    assert!(!events.canceled, "{}", events.cancel_reason);
    assert_eq!(events.events[0].kv.as_ref().unwrap().key, b"/q/b");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let lease = client.lease_grant(10).await.unwrap();
    let mut keeper = client.lease_keep_alive(lease).await.unwrap();
    assert!(keeper.keep_alive().await.unwrap() > 0);

    // A watch of keys the role does not reach is refused, after one new token.
    let refused = client.watch_prefix("/elsewhere/").await.unwrap_err();
    assert!(
        refused.to_string().contains("permission denied"),
        "{refused}"
    );

    // A wrong password, and no user at all.
    let wrong = Client::connect(
        std::slice::from_ref(&etcd.endpoint),
        quick(None, user("nope")),
    )
    .unwrap();
    let error = wrong.get("/q/a").await.unwrap_err();
    assert!(matches!(error, EtcdError::Auth(_)), "{error}");
    let anonymous =
        Client::connect(std::slice::from_ref(&etcd.endpoint), quick(None, None)).unwrap();
    assert!(
        anonymous.get("/q/a").await.is_err(),
        "an anonymous read of an etcd with auth on"
    );
}

/// Writes `count` values of 256 KiB to one key; compacts the history every
/// `compact_every` writes when given. The first error, if any.
async fn churn(client: &Client, count: usize, compact_every: Option<usize>) -> Option<EtcdError> {
    let value = vec![b'x'; 256 << 10];
    for i in 0..count {
        if let Err(e) = client.put("/churn", value.clone(), 0).await {
            return Some(e);
        }
        if compact_every.is_some_and(|every| (i + 1) % every == 0) {
            let now = client.get("/churn").await.unwrap().unwrap().mod_revision;
            if let Err(e) = client.compact(now).await {
                return Some(e);
            }
        }
    }
    None
}

#[tokio::test]
async fn compacting_the_history_keeps_a_busy_etcd_under_its_quota() {
    // 64 MiB of database: 400 writes of 256 KiB (100 MiB of history) pass it.
    let quota = ["--quota-backend-bytes=67108864".to_string()];
    let Some(etcd) = start_etcd_with(false, &quota) else {
        return;
    };
    let client = client(&etcd).await;
    // Compacted every 20 writes, the history never holds more than 5 MiB.
    assert!(churn(&client, 400, Some(20)).await.is_none());
    // Compacting to a revision already compacted is no error (several nodes may).
    let now = client.get("/churn").await.unwrap().unwrap().mod_revision;
    client.compact(now).await.unwrap();
    client.compact(now - 5).await.unwrap();
    // Left to grow, the same writes fill the quota and etcd refuses every write.
    let full = churn(&client, 400, None)
        .await
        .expect("the quota was reached");
    assert_eq!(full.code(), tonic::Code::ResourceExhausted, "{full}");
    assert!(
        full.to_string().contains("database space exceeded"),
        "{full}"
    );
}
