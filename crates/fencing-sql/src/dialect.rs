//! [`Dialect`]: which SQL database a pool talks to, the word every other
//! module of this crate branches on (so it imports none of them).

/// Which SQL database a [`Db`](crate::Db) talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

impl Dialect {
    /// The backend name used in errors.
    pub fn name(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }
}
