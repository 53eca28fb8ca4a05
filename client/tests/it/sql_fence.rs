//! The SQL fence against a real PostgreSQL (a private server per test, see
//! leadergroup_testenv::Postgres).

use std::time::Duration;

use leadergroup_client::{
    Epoch,
    fence::sql::{self, SqlFenceError},
};
use leadergroup_testenv::Postgres;
use tokio::time::Instant;
use tokio_postgres::{Client, NoTls};

/// Long enough for any answer of a working database.
const DEADLINE: Duration = Duration::from_secs(10);

fn epoch(n: u32) -> Epoch {
    Epoch::from(n)
}

async fn connect(pg: &Postgres) -> Client {
    let (client, connection) = tokio_postgres::connect(&pg.connection_string(), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// The protected write: one ledger entry, in the same transaction as the fence.
async fn append(db: &mut Client, e: Epoch, entry: &str) -> Result<(), SqlFenceError> {
    let tx = db.transaction().await.unwrap();
    sql::fence(&tx, "ledger", e, DEADLINE).await?;
    tx.execute(
        "INSERT INTO ledger (epoch, entry) VALUES ($1, $2)",
        &[&e.get(), &entry],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    Ok(())
}

async fn entries(db: &Client) -> Vec<(i64, String)> {
    db.query("SELECT epoch, entry FROM ledger ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

async fn fence_value(db: &Client) -> i64 {
    db.query_one(
        "SELECT epoch FROM leadergroup_fence WHERE name = 'ledger'",
        &[],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn stale_tokens_are_refused_in_the_writers_transaction() {
    let pg = Postgres::start().await.unwrap();
    let mut db = connect(&pg).await;
    sql::ensure_schema(&db).await.unwrap();
    sql::ensure_schema(&db).await.unwrap(); // idempotent
    db.batch_execute(
        "CREATE TABLE ledger (id serial PRIMARY KEY, epoch bigint NOT NULL, entry text NOT NULL)",
    )
    .await
    .unwrap();

    append(&mut db, epoch(5), "a").await.unwrap();
    let err = append(&mut db, epoch(3), "stale").await.unwrap_err();
    let stale = err.stale().expect("not a stale-token error");
    assert_eq!((stale.presented, stale.highest), (epoch(3), epoch(5)));
    let text = err.to_string();
    assert!(
        text.contains("\"ledger\"")
            && text.contains("epoch 3 was presented")
            && text.contains("epoch 5 has already been accepted"),
        "{text}"
    );
    append(&mut db, epoch(5), "b").await.unwrap(); // equal: the same leader again
    append(&mut db, epoch(6), "c").await.unwrap(); // higher: a successor
    assert_eq!(fence_value(&db).await, 6);

    // The fence is part of the transaction: raised and rolled back, it stays where it was.
    let tx = db.transaction().await.unwrap();
    sql::fence(&tx, "ledger", epoch(9), DEADLINE).await.unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(fence_value(&db).await, 6);
    append(&mut db, epoch(7), "d").await.unwrap();

    // The refused write left nothing behind.
    assert_eq!(
        entries(&db).await,
        [(5, "a"), (5, "b"), (6, "c"), (7, "d")].map(|(e, s)| (e, s.to_owned()))
    );
}

#[tokio::test]
async fn a_stale_writer_waits_for_the_newer_transaction_and_is_refused() {
    let pg = Postgres::start().await.unwrap();
    let mut new_leader = connect(&pg).await;
    let mut old_leader = connect(&pg).await;
    sql::ensure_schema(&new_leader).await.unwrap();
    new_leader
        .batch_execute("CREATE TABLE ledger (id serial PRIMARY KEY, epoch bigint NOT NULL, entry text NOT NULL)")
        .await
        .unwrap();
    append(&mut old_leader, epoch(1), "before").await.unwrap();

    // The new leader raises the fence to 2 and has not committed yet.
    let tx = new_leader.transaction().await.unwrap();
    sql::fence(&tx, "ledger", epoch(2), DEADLINE).await.unwrap();
    tx.execute("INSERT INTO ledger (epoch, entry) VALUES (2, 'new')", &[])
        .await
        .unwrap();

    // The old leader, still at epoch 1, tries to write meanwhile: it waits on the fence row...
    let old = tokio::spawn(async move {
        let result = append(&mut old_leader, epoch(1), "late").await;
        (result, old_leader)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !old.is_finished(),
        "the stale writer did not wait for the fence row"
    );
    // ...and once the new leader commits, it is refused with both epochs.
    tx.commit().await.unwrap();
    let (result, _old_leader) = tokio::time::timeout(Duration::from_secs(10), old)
        .await
        .unwrap()
        .unwrap();
    let stale = result
        .unwrap_err()
        .stale()
        .expect("not a stale-token error");
    assert_eq!((stale.presented, stale.highest), (epoch(1), epoch(2)));
    assert_eq!(
        entries(&new_leader).await,
        [(1, "before"), (2, "new")].map(|(e, s)| (e, s.to_owned()))
    );
}

#[tokio::test]
async fn a_fence_row_held_for_good_ends_the_write_at_its_deadline() {
    let pg = Postgres::start().await.unwrap();
    let mut holder = connect(&pg).await;
    let mut writer = connect(&pg).await;
    sql::ensure_schema(&holder).await.unwrap();
    writer
        .batch_execute("CREATE TABLE ledger (id serial PRIMARY KEY, epoch bigint NOT NULL, entry text NOT NULL)")
        .await
        .unwrap();
    append(&mut writer, epoch(1), "before").await.unwrap();

    // A writer that raised the fence and never ends its transaction (hung, not paused: the
    // session is not idle, so no idle timeout ends it) holds the row.
    let held = holder.transaction().await.unwrap();
    sql::fence(&held, "ledger", epoch(2), DEADLINE)
        .await
        .unwrap();

    let deadline = Duration::from_secs(1);
    let started = Instant::now();
    let tx = writer.transaction().await.unwrap();
    let result = tokio::time::timeout(DEADLINE, sql::fence(&tx, "ledger", epoch(3), deadline))
        .await
        .expect("the fence still waited on the row long after its deadline");
    let took = started.elapsed();
    let err = result.expect_err("the fence was raised past a row held by another transaction");
    assert!(
        matches!(err, SqlFenceError::Deadline { after, .. } if after == deadline),
        "{err}"
    );
    assert!(err.to_string().contains("no answer within 1s"), "{err}");
    assert!(
        took >= deadline && took < deadline + Duration::from_millis(500),
        "ended {took:?} after it started, for a deadline of {deadline:?}"
    );
    drop(tx);
    held.rollback().await.unwrap();
    assert_eq!(
        fence_value(&holder).await,
        1,
        "a fence raised without a commit"
    );
}
