//! Creating the tables (and carrying earlier releases' guard marks into
//! them), and dropping them.

use fencing_core::Result;
use fencing_core::adapter::Call;

use super::{Db, on_pool};
use crate::error::map_error;

impl Db {
    /// Creates the three tables if they do not exist, and carries the marks
    /// that earlier releases' [`fence_transaction`](crate::fence_transaction)
    /// kept in the domains table into the records table (the higher mark
    /// wins; once carried, opening again writes nothing).
    ///
    /// # Errors
    /// [`Error::Backend`](fencing_core::Error::Backend) if the database
    /// refuses (e.g. no `CREATE` right).
    pub async fn create_tables(&self) -> Result<()> {
        for sql in crate::sql::create_tables(self.dialect(), &self.tables) {
            // Two processes creating the same table at once can collide in
            // PostgreSQL's catalog; the second attempt sees the table.
            let mut attempt = 0;
            loop {
                let result =
                    on_pool!(&self.pool, p => sqlx::query(&sql).execute(p).await.map(|_| ()));
                match result {
                    Ok(()) => break,
                    Err(_) if attempt == 0 => {
                        attempt += 1;
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    }
                    // `IF NOT EXISTS`: creating twice is creating once, so a
                    // lost answer is merely retried.
                    Err(e) => {
                        return Err(map_error(
                            self.dialect(),
                            e,
                            Call::idempotent("create tables"),
                        ));
                    }
                }
            }
        }
        self.carry_legacy_marks().await
    }

    /// One row at a time, each its own statement: a single `INSERT …
    /// SELECT` would lock many records at once, in an order that can
    /// deadlock with guarded transactions holding several of them.
    async fn carry_legacy_marks(&self) -> Result<()> {
        let d = self.dialect();
        let select = crate::sql::legacy_marks(d, &self.tables);
        let legacy: Vec<(String, i64)> =
            on_pool!(&self.pool, p => sqlx::query_as(&select).fetch_all(p).await)
                .map_err(|e| map_error(d, e, Call::read("read legacy fence-domain marks")))?;
        let carry = crate::sql::carry_legacy_mark(d, &self.tables);
        for (name, mark) in legacy {
            on_pool!(&self.pool, p => sqlx::query(&carry).bind(&name).bind(mark).execute(p).await.map(|_| ()))
                .map_err(|e| map_error(d, e, Call::write(&format!("carry the legacy mark of {name:?}"))))?;
        }
        Ok(())
    }

    /// Drops the three tables (for tests and clean-up).
    ///
    /// # Errors
    /// [`Error::Backend`](fencing_core::Error::Backend) if the database refuses.
    pub async fn drop_tables(&self) -> Result<()> {
        for table in [
            &self.tables.records,
            &self.tables.domains,
            &self.tables.leases,
        ] {
            let sql = format!("DROP TABLE IF EXISTS {table}");
            // `IF EXISTS`: dropping twice is dropping once.
            on_pool!(&self.pool, p => sqlx::query(&sql).execute(p).await.map(|_| ()))
                .map_err(|e| map_error(self.dialect(), e, Call::idempotent("drop tables")))?;
        }
        Ok(())
    }
}
