//! The fence in PostgreSQL (feature `postgres`, with `tokio-postgres`): one row per group holds
//! the highest epoch accepted, and [`fence`] raises it in the caller's transaction, only if the
//! token is not lower. The row stays locked until that transaction ends, so a concurrent writer
//! with a lower token waits, then is refused; the caller's write commits or rolls back together
//! with the fence.
//!
//! ```no_run
//! # async fn example(db: &mut tokio_postgres::Client, epoch: leadergroup_client::Epoch) -> Result<(), Box<dyn std::error::Error>> {
//! use leadergroup_client::fence::sql;
//! sql::ensure_schema(&*db).await?;
//! let tx = db.transaction().await?;
//! let deadline = leadergroup_client::fence::write_deadline(std::time::Duration::from_secs(15));
//! sql::fence(&tx, "ledger-writer", epoch, deadline).await?; // refuses a stale epoch, naming both
//! tx.execute("INSERT INTO ledger (epoch, entry) VALUES ($1, $2)", &[&epoch.get(), &"..."]).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use tokio_postgres::{GenericClient, Transaction};

use super::StaleEpoch;
use crate::Epoch;

/// The fence table: a group's name, and the highest epoch accepted for it.
pub const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS leadergroup_fence (
    name  text   PRIMARY KEY,
    epoch bigint NOT NULL CHECK (epoch >= 0)
)";

/// Raises the group's fence row to `$2` only if it is not higher already, and returns the epoch
/// when it did; no row means the token is stale. The conflicting row is locked either way until
/// the transaction ends.
pub const RAISE: &str = "INSERT INTO leadergroup_fence AS fence (name, epoch) VALUES ($1, $2)
    ON CONFLICT (name) DO UPDATE SET epoch = EXCLUDED.epoch
    WHERE fence.epoch <= EXCLUDED.epoch
    RETURNING epoch";

/// Why [`fence`] refused.
#[derive(Debug, thiserror::Error)]
pub enum SqlFenceError {
    /// The token is lower than the highest accepted: roll back, this writer has been deposed.
    #[error("fence {name:?}: {stale}")]
    Stale {
        /// The fence row (the group's name).
        name: String,
        /// Both epochs.
        #[source]
        stale: StaleEpoch,
    },

    /// The database failed.
    #[error("fence {name:?}: {source}")]
    Postgres {
        /// The fence row.
        name: String,
        /// The cause.
        #[source]
        source: tokio_postgres::Error,
    },

    /// The database did not answer before the deadline (the fence row may be locked by a
    /// writer that does not end its transaction, or the connection went silent). Roll back (drop
    /// the transaction): nothing was raised that can commit. The statement may still be running
    /// on the server, keeping this connection busy until it ends: open another one.
    #[error(
        "fence {name:?}: no answer within {after:?} (the fenced write's deadline, two thirds of \
         the Lease duration); roll back, and write again on another connection after checking \
         the role"
    )]
    Deadline {
        /// The fence row.
        name: String,
        /// The deadline.
        after: Duration,
    },

    /// The row holds a negative epoch (written by something else than this crate).
    #[error("fence {name:?} holds {value}, which is not an epoch")]
    Corrupt {
        /// The fence row.
        name: String,
        /// What it holds.
        value: i64,
    },
}

impl SqlFenceError {
    /// Both epochs, when the token was refused as stale.
    pub fn stale(&self) -> Option<StaleEpoch> {
        match self {
            SqlFenceError::Stale { stale, .. } => Some(*stale),
            _ => None,
        }
    }
}

/// Creates the fence table unless it exists ([`SCHEMA`]). Run it once before the writers start
/// (two concurrent `CREATE TABLE IF NOT EXISTS` can still collide in PostgreSQL's catalog).
pub async fn ensure_schema<C: GenericClient>(client: &C) -> Result<(), tokio_postgres::Error> {
    client.batch_execute(SCHEMA).await
}

/// Checks and raises the fence of group `name` to `epoch` inside `tx`, the transaction that also
/// carries the protected write: a lower epoch than the highest accepted is refused with
/// [`SqlFenceError::Stale`] (roll back then); an equal or higher one is accepted and becomes the
/// highest once `tx` commits.
///
/// It ends within `deadline` (pass [`crate::Membership::write_deadline`], or
/// [`super::write_deadline`] of the group's Lease duration) with [`SqlFenceError::Deadline`]:
/// a row locked by a transaction that never ends, or a silent connection, would otherwise hold
/// the caller for good.
pub async fn fence(
    tx: &Transaction<'_>,
    name: &str,
    epoch: Epoch,
    deadline: Duration,
) -> Result<(), SqlFenceError> {
    tokio::time::timeout(deadline, raise(tx, name, epoch))
        .await
        .map_err(|_| SqlFenceError::Deadline {
            name: name.to_owned(),
            after: deadline,
        })?
}

/// [`fence`] without its deadline.
async fn raise(tx: &Transaction<'_>, name: &str, epoch: Epoch) -> Result<(), SqlFenceError> {
    let pg = |source| SqlFenceError::Postgres {
        name: name.to_owned(),
        source,
    };
    if tx
        .query_opt(RAISE, &[&name, &epoch.get()])
        .await
        .map_err(pg)?
        .is_some()
    {
        return Ok(());
    }
    // Refused: the row exists and is higher (and locked by the statement above, so this reads the
    // value that refused it).
    let value: i64 = tx
        .query_one(
            "SELECT epoch FROM leadergroup_fence WHERE name = $1",
            &[&name],
        )
        .await
        .map_err(pg)?
        .try_get(0)
        .map_err(pg)?;
    let highest = Epoch::new(value).ok_or_else(|| SqlFenceError::Corrupt {
        name: name.to_owned(),
        value,
    })?;
    Err(SqlFenceError::Stale {
        name: name.to_owned(),
        stale: StaleEpoch {
            presented: epoch,
            highest,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stale_token_names_both_epochs() {
        let err = SqlFenceError::Stale {
            name: "ledger".to_owned(),
            stale: StaleEpoch {
                presented: Epoch::from(3u32),
                highest: Epoch::from(5u32),
            },
        };
        let text = err.to_string();
        assert!(text.contains("\"ledger\""), "{text}");
        assert!(text.contains("epoch 3 was presented"), "{text}");
        assert!(text.contains("epoch 5 has already been accepted"), "{text}");
        assert_eq!(
            err.stale().map(|s| (s.presented.get(), s.highest.get())),
            Some((3, 5))
        );
    }
}
