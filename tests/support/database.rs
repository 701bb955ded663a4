//! Where the test database server is, shared by the test binaries that need one.

/// The administrative connection URL of the test database server.
pub fn admin_url() -> String {
    std::env::var("TROVE_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://trove@127.0.0.1:55432/postgres".to_owned())
}

/// `admin` with its path (the database name) replaced by `db`, keeping any query string.
pub fn url_with_db(admin: &str, db: &str) -> String {
    let (base, query) = admin
        .split_once('?')
        .map_or((admin, None), |(b, q)| (b, Some(q)));
    let root = base.rsplit_once('/').map_or(base, |(root, _)| root);
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}
