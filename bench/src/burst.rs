//! Scenario `burst`: every group's leader turns NotReady in one sweep, as when the node they sit
//! on fails; the clock starts with the sweep.

use std::time::SystemTime;

use crate::error::Result;
use crate::markdown::{Block, Table, ms, spread_row, spread_table};
use crate::observe::ms_between;
use crate::ours::Groups;
use crate::results::Record;
use crate::scenario::{Context, Measured, Scenario, measuring};

pub const BURST: Scenario = Scenario {
    name: "burst",
    help: "The burst of failed leaders",
    files: &["burst"],
    in_full_run: true,
    measure: |ctx| measuring(measure(ctx)),
    render: |records| blocks(&records[0]),
};

/// The setup, the latencies (every group's, and per burst the last one's), the sweeps and the
/// target.
fn blocks(burst: &Record) -> Vec<Block> {
    let groups = burst.number("", "", "groups");
    let setup = Table::new(&["groups", "run"]).with([
        groups.to_string(),
        format!("{} (`{}`)", burst.run.started_at, burst.run.command),
    ]);
    let (mut all, mut per_group, mut sweeps) = (Vec::new(), Vec::new(), Vec::new());
    for case in burst.cases() {
        let groups = burst.values("", case, "per_group_ms");
        all.push(groups.iter().copied().fold(0.0, f64::max));
        per_group.extend(groups);
        sweeps.push(ms(burst.number("", case, "sweep_ms")));
    }
    let latencies = spread_table(&["measure"])
        .with(spread_row(&["all re-led (per burst)"], &all))
        .with(spread_row(&["per group"], &per_group));
    let sweeps =
        Table::new(&["the sweep of status writes itself, per burst"]).with([sweeps.join(", ")]);
    let mut targets = Table::new(&["target", "measured", "met"]);
    if let Some(max) = all.iter().copied().reduce(f64::max) {
        let target = format!("burst of {groups}: all re-led within 1 s");
        targets.target(target, format!("max {}", ms(max)), max < 1000.0);
    }
    vec![
        Block::tables("burst", [setup, latencies, sweeps]),
        Block::tables("burst-targets", [targets]),
    ]
}

async fn measure(ctx: &Context) -> Result<Measured> {
    let light = ctx.light().await?;
    let (count, rounds) = ctx.pick((100, 3), (10, 1));
    tracing::info!("burst: {count} groups, {rounds} bursts");
    let (groups, op) = ctx
        .led_groups("bench-burst", count, "operator-burst.log")
        .await?;
    tokio::time::sleep(ctx.settle()).await;
    let mut record = Record::default();
    record.add("", "", "groups", count);
    for i in 1..=rounds {
        let (sweep_ms, per_group_ms) = one_burst(&groups).await?;
        record.add("", &format!("burst {i}"), "sweep_ms", sweep_ms);
        record.add("", &format!("burst {i}"), "per_group_ms", per_group_ms);
        tokio::time::sleep(ctx.settle()).await;
    }
    light.record(|run| run.double_leaders += groups.watch.double_leaders());
    drop(op);
    Ok(Measured("burst", record))
}

/// One burst: every leader NotReady in one sweep, until every group is led again; then the old
/// leaders Ready again (as followers). How long the sweep took, and per group the time from its
/// start to the new leader, ms.
async fn one_burst(groups: &Groups) -> Result<(f64, Vec<f64>)> {
    let old: Vec<(String, String)> = groups
        .names
        .iter()
        .filter_map(|g| groups.watch.leader(g).map(|l| (g.clone(), l.pod)))
        .collect();
    // Every old leader's Ready condition set to `ready`, in one sweep.
    let sweep = |ready| {
        let pods = old.iter().map(|(_, pod)| pod);
        futures::future::try_join_all(pods.map(move |pod| groups.kubelet.set_ready(pod, ready)))
    };
    let t0 = SystemTime::now();
    sweep(false).await?;
    let sweep_ms = ms_between(t0, SystemTime::now());
    let mut per_group_ms = Vec::new();
    for (g, pod) in &old {
        let new = groups
            .watch
            .wait_new_leader(g, Some(pod), crate::ours::BOUND)
            .await?;
        per_group_ms.push(ms_between(t0, new.at));
    }
    sweep(true).await?;
    Ok((sweep_ms, per_group_ms))
}
