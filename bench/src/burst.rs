//! Scenario `burst`: every group's leader turns NotReady in one sweep, as when the node they sit
//! on fails; the clock starts with the sweep.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::markdown::{Block, Table, met, ms, spread_row, spread_table};
use crate::observe::ms_between;
use crate::ours::Groups;
use crate::results::Run;
use crate::scenario::{Context, Recorded, Scenario, measuring};
use leadergroup_testenv::stats::{Summary, summarize};

pub const BURST: Scenario =
    Scenario::of::<BurstResult>("burst", "The burst of failed leaders", |ctx| {
        measuring(measure(ctx))
    });

/// One burst.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct OneBurst {
    /// From the start of the sweep until the last group is led again.
    pub all_re_led_ms: f64,
    /// How long the sweep of NotReady reports itself took.
    pub sweep_ms: f64,
    /// Per group, from the start of the sweep.
    pub per_group_ms: Vec<f64>,
}

/// `burst.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct BurstResult {
    /// Groups per burst.
    pub groups: usize,
    pub bursts: Vec<OneBurst>,
    /// Per-group latencies over all bursts.
    pub per_group: Option<Summary>,
    /// All re-led, over the bursts.
    pub all_re_led: Option<Summary>,
}

impl Recorded for BurstResult {
    const FILE: &'static str = "burst";

    fn blocks(&self, run: &Run) -> Vec<Block> {
        let setup = Table::new(&["groups", "run"]).with([
            self.groups.to_string(),
            format!("{} (`{}`)", run.started_at, run.command),
        ]);
        let latencies = spread_table(&["measure"])
            .with(spread_row(
                &["all re-led (per burst)"],
                self.all_re_led.as_ref(),
            ))
            .with(spread_row(&["per group"], self.per_group.as_ref()));
        let sweeps: Vec<String> = self.bursts.iter().map(|b| ms(b.sweep_ms)).collect();
        let sweeps =
            Table::new(&["the sweep of status writes itself, per burst"]).with([sweeps.join(", ")]);
        let mut targets = Table::new(&["target", "measured", "met"]);
        if let Some(s) = &self.all_re_led {
            targets.row([
                format!("burst of {}: all re-led within 1 s", self.groups),
                format!("max {}", ms(s.max_ms)),
                met(s.max_ms < 1000.0).to_owned(),
            ]);
        }
        vec![
            Block::tables("burst", [setup, latencies, sweeps]),
            Block::tables("burst-targets", [targets]),
        ]
    }
}

async fn measure(ctx: &Context) -> Result<BurstResult> {
    let light = ctx.light().await?;
    let (count, rounds) = ctx.pick((100, 3), (10, 1));
    tracing::info!("burst: {count} groups, {rounds} bursts");
    let (groups, op) = ctx
        .led_groups("bench-burst", count, "operator-burst.log")
        .await?;
    tokio::time::sleep(ctx.settle()).await;
    let mut bursts = Vec::new();
    for _ in 0..rounds {
        bursts.push(one_burst(&groups).await?);
        tokio::time::sleep(ctx.settle()).await;
    }
    light.record(|run| run.double_leaders += groups.watch.double_leaders());
    drop(op);
    let per: Vec<f64> = bursts
        .iter()
        .flat_map(|b| b.per_group_ms.iter().copied())
        .collect();
    let all: Vec<f64> = bursts.iter().map(|b| b.all_re_led_ms).collect();
    Ok(BurstResult {
        groups: count,
        per_group: summarize(&per),
        all_re_led: summarize(&all),
        bursts,
    })
}

/// One burst: every leader NotReady in one sweep, until every group is led again; then the old
/// leaders Ready again (as followers).
async fn one_burst(groups: &Groups) -> Result<OneBurst> {
    let old: Vec<(String, String)> = groups
        .names
        .iter()
        .filter_map(|g| groups.leader(g).map(|l| (g.clone(), l.pod)))
        .collect();
    let t0 = SystemTime::now();
    futures::future::try_join_all(
        old.iter()
            .map(|(_, pod)| groups.kubelet.set_ready(pod, false)),
    )
    .await?;
    let sweep_ms = ms_between(t0, SystemTime::now());
    let mut per_group_ms = Vec::new();
    for (g, pod) in &old {
        let new = groups
            .watch
            .wait_new_leader(g, Some(pod), crate::ours::BOUND)
            .await?;
        per_group_ms.push(ms_between(t0, new.at));
    }
    futures::future::try_join_all(
        old.iter()
            .map(|(_, pod)| groups.kubelet.set_ready(pod, true)),
    )
    .await?;
    Ok(OneBurst {
        all_re_led_ms: per_group_ms.iter().copied().fold(0.0, f64::max),
        sweep_ms,
        per_group_ms,
    })
}
