//! PostgreSQL 15 on loopback as a [`BenchSystem`].
//!
//! [`Postgres::start`] runs Debian's `initdb` on a fresh data directory
//! under the run's directory and starts `postgres` on a free loopback port
//! (TCP only on 127.0.0.1, plaintext, `trust` authentication for the
//! `bench` role); every setting, `fsync = on` and `synchronous_commit = on`
//! among them, at its default. PostgreSQL refuses to run as root, so as
//! root both run as the `postgres` user (the data directory is chowned to
//! it and its parent directories get o+x). Output goes to
//! `<dir>/postgres.log`.
//!
//! The workload is the seeds' fenced write, one transaction per write:
//! `SELECT holder, term, expires_at FROM lease WHERE name = $1 FOR UPDATE`
//! (client `i`'s own lease row, so clients do not queue on one lock), the
//! client checks holder, term and expiry, then
//! `UPDATE assignment SET term = $new, value = $v WHERE key = $k AND term =
//! $expected` (CAS: `expected` is the term from this client's last write of
//! the key, from the preload the first time, read again after a failure),
//! then `COMMIT`. An UPDATE that matches no row, or a failed lease check, is
//! a conflict.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use tokio_postgres::{NoTls, Statement};

use super::{value, BenchSystem, Versions, WriteError, UNKNOWN};
use local_cluster::process::{log_to, ChildProcess};

/// Debian's PostgreSQL 15 binaries.
pub const DEFAULT_BIN_DIR: &str = "/usr/lib/postgresql/15/bin";
/// The role the bench connects as (`trust`).
const ROLE: &str = "bench";
/// The term every lease row holds.
const LEASE_TERM: i64 = 1;

/// A running PostgreSQL server.
pub struct Postgres {
    /// `127.0.0.1:<port>`.
    pub addr: String,
    /// The port.
    pub port: u16,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Server log.
    pub log_path: PathBuf,
    child: ChildProcess,
}

/// The uid and gid of user `name`, if it exists.
fn user_ids(name: &str) -> Option<(u32, u32)> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: getpwnam returns NULL or a pointer to a static passwd record,
    // read at once before any other passwd call.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null, see above.
    unsafe { Some(((*pw).pw_uid, (*pw).pw_gid)) }
}

/// Adds o+x to `dir` (so another user can reach what lies below).
fn allow_traverse(dir: &Path) -> anyhow::Result<()> {
    let mut perm = std::fs::metadata(dir)
        .with_context(|| format!("stat {}", dir.display()))?
        .permissions();
    perm.set_mode(perm.mode() | 0o001);
    std::fs::set_permissions(dir, perm).with_context(|| format!("chmod {}", dir.display()))
}

impl Postgres {
    /// `initdb` + `postgres` under `dir`; waits (up to 30 s) until it
    /// accepts connections.
    ///
    /// # Errors
    /// When a binary is missing, `initdb` fails, or the server does not
    /// accept connections in time.
    pub async fn start(bin_dir: &Path, dir: &Path) -> anyhow::Result<Postgres> {
        let (initdb, postgres) = (bin_dir.join("initdb"), bin_dir.join("postgres"));
        for b in [&initdb, &postgres] {
            if !b.is_file() {
                bail!(
                    "{} not found: install Debian's postgresql-15 (scripts/bench.sh does)",
                    b.display()
                );
            }
        }
        let root = dir.join("pg");
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        // SAFETY: geteuid has no preconditions.
        let as_user = if unsafe { libc::geteuid() } == 0 {
            let ids = user_ids("postgres")
                .context("running as root and there is no `postgres` user to run PostgreSQL as")?;
            for d in dir.ancestors().take(3) {
                allow_traverse(d)?;
            }
            std::os::unix::fs::chown(&root, Some(ids.0), Some(ids.1))
                .with_context(|| format!("chown {}", root.display()))?;
            Some(ids)
        } else {
            None
        };
        let data_dir = root.join("data");
        let log_path = dir.join("postgres.log");
        let mut cmd = std::process::Command::new(&initdb);
        cmd.arg("-D")
            .arg(&data_dir)
            .args(["-U", ROLE, "-A", "trust", "-E", "UTF8"]);
        if let Some((uid, gid)) = as_user {
            cmd.uid(uid).gid(gid);
        }
        log_to(&mut cmd, &log_path)?;
        let status = cmd.status().context("running initdb")?;
        if !status.success() {
            bail!("initdb failed ({status}); see {}", log_path.display());
        }
        let port = testkit::ports::free_port();
        let mut cmd = std::process::Command::new(&postgres);
        cmd.arg("-D")
            .arg(&data_dir)
            .args(["-p", &port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-k")
            .arg(&root);
        if let Some((uid, gid)) = as_user {
            cmd.uid(uid).gid(gid);
        }
        log_to(&mut cmd, &log_path)?;
        let pg = Postgres {
            addr: format!("127.0.0.1:{port}"),
            port,
            data_dir,
            log_path,
            child: ChildProcess::default(),
        };
        pg.child.spawn(&mut cmd, "postgres")?;
        pg.wait_ready(Duration::from_secs(30)).await?;
        Ok(pg)
    }

    /// A new connection; its driver task runs until the client is dropped.
    ///
    /// # Errors
    /// When the server refuses or is unreachable.
    pub async fn connect(port: u16) -> anyhow::Result<tokio_postgres::Client> {
        let config =
            format!("host=127.0.0.1 port={port} user={ROLE} dbname=postgres connect_timeout=5");
        let (client, connection) = tokio_postgres::connect(&config, NoTls)
            .await
            .with_context(|| format!("connecting to PostgreSQL on port {port}"))?;
        tokio::spawn(async move {
            // The connection ends when its client is dropped; an error here
            // surfaces on the client's next call.
            let _ = connection.await;
        });
        Ok(client)
    }

    async fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            match Self::connect(self.port).await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(e.context(format!(
                        "PostgreSQL not ready within {within:?} (see {})",
                        self.log_path.display()
                    )))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Creates the tables, `keys` assignments at term 1 and one lease per
    /// client (up to `max_clients`), and returns the workload.
    ///
    /// # Errors
    /// When a statement fails.
    pub async fn system(&self, keys: usize, max_clients: usize) -> anyhow::Result<PgSystem> {
        let client = Self::connect(self.port).await?;
        let last_key = keys as i64 - 1;
        let last_client = max_clients as i64 - 1;
        client
            .batch_execute(&format!(
                "CREATE TABLE lease (name text PRIMARY KEY, holder text NOT NULL, term bigint NOT NULL, expires_at timestamptz NOT NULL);
                 CREATE TABLE assignment (key text PRIMARY KEY, term bigint NOT NULL, value bytea NOT NULL);
                 INSERT INTO assignment SELECT 'k' || lpad(g::text, 5, '0'), 1, decode(repeat('ab', 256), 'hex') FROM generate_series(0, {last_key}) g;
                 INSERT INTO lease SELECT 'c' || g, 'c' || g, {LEASE_TERM}, now() + interval '1 day' FROM generate_series(0, {last_client}) g;"
            ))
            .await
            .context("creating and loading the tables")?;
        // Alone: a multi-statement batch is one transaction, VACUUM refuses
        // to run in one.
        client
            .batch_execute("VACUUM ANALYZE")
            .await
            .context("VACUUM ANALYZE")?;
        let versions = Versions::new(keys);
        for k in 0..keys {
            versions.set(k, 1);
        }
        Ok(PgSystem {
            port: self.port,
            versions,
            postmaster: self.child.pid(),
        })
    }

    /// Fast shutdown (SIGINT), then `kill -9` if it has not exited within
    /// 10 s.
    pub async fn stop(&self) {
        if self.child.signal(libc::SIGINT).is_ok() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while !self.child.exited() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        self.child.kill9();
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.child.kill9();
    }
}

/// One client's connection and prepared statements.
pub struct PgClient {
    client: tokio_postgres::Client,
    lease: String,
    lock_lease: Statement,
    read_term: Statement,
    cas: Statement,
}

/// PostgreSQL's workload.
pub struct PgSystem {
    port: u16,
    versions: Versions,
    /// The postmaster; its children (one backend per client, the writer,
    /// the WAL writer, ...) are found when counted.
    postmaster: Option<i32>,
}

fn failed(what: &str, e: &tokio_postgres::Error) -> WriteError {
    WriteError::Failed(format!("{what}: {e}"))
}

impl PgSystem {
    async fn fenced_write(&self, c: &mut PgClient, key: usize) -> Result<u64, WriteError> {
        let name = format!("k{key:05}");
        let tx = c
            .client
            .transaction()
            .await
            .map_err(|e| failed("begin", &e))?;
        let row = tx
            .query_one(&c.lock_lease, &[&c.lease])
            .await
            .map_err(|e| failed("lock lease", &e))?;
        let holder: String = row.try_get(0).map_err(|e| failed("holder", &e))?;
        let term: i64 = row.try_get(1).map_err(|e| failed("term", &e))?;
        let expires_at: SystemTime = row.try_get(2).map_err(|e| failed("expires_at", &e))?;
        if holder != c.lease || term != LEASE_TERM || expires_at <= SystemTime::now() {
            return Err(WriteError::Conflict(format!(
                "lease {} held by {holder} at term {term}",
                c.lease
            )));
        }
        let mut expected = self.versions.get(key);
        if expected == UNKNOWN {
            let row = tx
                .query_one(&c.read_term, &[&name])
                .await
                .map_err(|e| failed("read term", &e))?;
            let t: i64 = row.try_get(0).map_err(|e| failed("term", &e))?;
            expected = u64::try_from(t).unwrap_or(0);
        }
        let expected = i64::try_from(expected).unwrap_or(i64::MAX);
        let new = expected.saturating_add(1);
        let updated = tx
            .execute(&c.cas, &[&new, &value(key), &name, &expected])
            .await
            .map_err(|e| failed("update", &e))?;
        if updated != 1 {
            return Err(WriteError::Conflict(format!(
                "assignment {name} is not at term {expected}"
            )));
        }
        tx.commit().await.map_err(|e| failed("commit", &e))?;
        Ok(u64::try_from(new).unwrap_or(UNKNOWN))
    }
}

impl BenchSystem for PgSystem {
    type Client = PgClient;

    fn name(&self) -> &'static str {
        "postgres"
    }

    fn server_pids(&self) -> Vec<i32> {
        let Some(postmaster) = self.postmaster else {
            return Vec::new();
        };
        let mut pids = vec![postmaster];
        pids.extend(children_of(postmaster));
        pids
    }

    async fn connect(&self, client: usize) -> anyhow::Result<PgClient> {
        let c = Postgres::connect(self.port).await?;
        let lock_lease = c
            .prepare("SELECT holder, term, expires_at FROM lease WHERE name = $1 FOR UPDATE")
            .await?;
        let read_term = c
            .prepare("SELECT term FROM assignment WHERE key = $1")
            .await?;
        let cas = c
            .prepare("UPDATE assignment SET term = $1, value = $2 WHERE key = $3 AND term = $4")
            .await?;
        Ok(PgClient {
            client: c,
            lease: format!("c{client}"),
            lock_lease,
            read_term,
            cas,
        })
    }

    async fn write(&self, client: &mut PgClient, key: usize) -> Result<(), WriteError> {
        match self.fenced_write(client, key).await {
            Ok(v) => {
                self.versions.set(key, v);
                Ok(())
            }
            Err(e) => {
                self.versions.set(key, UNKNOWN);
                Err(e)
            }
        }
    }
}

/// The processes whose parent is `parent` (from `/proc/<pid>/stat`).
fn children_of(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    // The fields after the parenthesised command name:
                    // state, then the parent's pid.
                    let (_, rest) = stat.rsplit_once(')')?;
                    rest.split_whitespace().nth(1)?.parse::<i32>().ok()
                })
                == Some(parent)
        })
        .collect()
}
