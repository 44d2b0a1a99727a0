//! A real etcd on loopback for tests: Debian's `etcd-server`, or
//! `$ETCD_BIN`, with a temporary data directory, killed on drop.
//! scripts/test.sh installs etcd; without it a test says so and passes only
//! outside CI. Always built, not behind a feature: a feature only tests turned
//! on would compile this crate and the cluster's a second time for
//! `cargo test --workspace`.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Client, ConnectOptions};

/// A running etcd, killed on drop.
#[derive(Debug)]
pub struct TestEtcd {
    child: Child,
    /// How it was started, to start it again on the same data and ports.
    command: Vec<std::ffi::OsString>,
    /// Its client address, `127.0.0.1:PORT` (no scheme).
    pub endpoint: String,
    _dir: tempfile::TempDir,
}

impl Drop for TestEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port no one listens on now.
///
/// # Panics
/// When the system has no free port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free loopback port")
}

fn etcd_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ETCD_BIN") {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("etcd"))
            .find(|path| path.is_file())
    })
}

fn spawn(command: &[std::ffi::OsString]) -> Child {
    Command::new(&command[0])
        .args(&command[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd starts")
}

impl TestEtcd {
    /// etcd on loopback with `flags`, its client URL https when `tls`;
    /// `None` (outside CI only) when etcd is not installed.
    ///
    /// # Panics
    /// In CI when etcd is not installed, or when it cannot be started.
    pub fn start(tls: bool, flags: &[String]) -> Option<Self> {
        let Some(binary) = etcd_binary() else {
            assert!(
                std::env::var_os("CI").is_none(),
                "etcd is not installed: scripts/install-cluster-tools.sh installs it"
            );
            eprintln!("etcd not installed: skipped (scripts/install-cluster-tools.sh installs it)");
            return None;
        };
        let dir = tempfile::tempdir().expect("a temporary directory");
        let (client, peer) = (free_port(), free_port());
        let scheme = if tls { "https" } else { "http" };
        let client_url = format!("{scheme}://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut command = vec![
            binary.into_os_string(),
            "--name=quiver-etcd-test".into(),
            format!("--data-dir={}", dir.path().join("data").display()).into(),
            format!("--listen-client-urls={client_url}").into(),
            format!("--advertise-client-urls={client_url}").into(),
            format!("--listen-peer-urls={peer_url}").into(),
            format!("--initial-advertise-peer-urls={peer_url}").into(),
            format!("--initial-cluster=quiver-etcd-test={peer_url}").into(),
            "--log-level=error".into(),
        ];
        command.extend(flags.iter().map(Into::into));
        Some(Self {
            child: spawn(&command),
            command,
            endpoint: format!("127.0.0.1:{client}"),
            _dir: dir,
        })
    }

    /// Kills etcd (SIGKILL: it recovers from its write-ahead log when
    /// started again).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts etcd again on the same data and ports, after [`TestEtcd::kill`].
    ///
    /// # Panics
    /// When etcd cannot be started.
    pub fn start_again(&mut self) {
        self.child = spawn(&self.command);
    }

    /// A client with `options`, once etcd answers (within 20 s).
    ///
    /// # Panics
    /// When etcd does not answer in 20 s.
    pub async fn client(&self, options: ConnectOptions) -> Client {
        let client =
            Client::connect(std::slice::from_ref(&self.endpoint), options).expect("a client");
        let started = Instant::now();
        loop {
            match client.get("/probe").await {
                Ok(_) => return client,
                Err(_) if started.elapsed() < Duration::from_secs(20) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("etcd did not answer in 20 s: {e}"),
            }
        }
    }
}
