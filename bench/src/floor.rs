//! Scenario `floor`: one Lease update with a resourceVersion precondition, back to back on the
//! same server; a handover's critical path is three of them in sequence.

use std::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::markdown::{Block, spread_row, spread_table};
use crate::results::Run;
use crate::scenario::{Context, Recorded, Scenario, measuring};
use leadergroup_testenv::stats::{Summary, summarize};

pub const FLOOR: Scenario = Scenario::of::<FloorResult>(
    "floor",
    "Lease updates back to back: the floor of any handover",
    |ctx| measuring(measure(ctx)),
);

/// `floor.json`.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct FloorResult {
    /// One Lease update with a resourceVersion precondition, each.
    pub samples_ms: Vec<f64>,
    pub summary: Option<Summary>,
}

impl Recorded for FloorResult {
    const FILE: &'static str = "floor";

    fn blocks(&self, _run: &Run) -> Vec<Block> {
        let table = spread_table(&["operation"])
            .with(spread_row(&["Lease CAS update"], self.summary.as_ref()));
        vec![Block::tables("floor", [table])]
    }
}

async fn measure(ctx: &Context) -> Result<FloorResult> {
    ctx.light().await?;
    let reps = ctx.pick(300, 20);
    tracing::info!("floor: {reps} Lease updates");
    let ns = leadergroup_testenv::namespace("bench-floor").await?;
    let api: Api<Lease> = ns.api();
    let spec = LeaseSpec {
        holder_identity: Some("bench".into()),
        lease_duration_seconds: Some(15),
        ..LeaseSpec::default()
    };
    let meta = ObjectMeta {
        name: Some("floor".into()),
        ..ObjectMeta::default()
    };
    let mut lease = Lease {
        metadata: meta,
        spec: Some(spec),
    };
    lease = api.create(&PostParams::default(), &lease).await?;
    let mut samples = Vec::with_capacity(reps);
    for i in 0..reps {
        if let Some(spec) = lease.spec.as_mut() {
            spec.lease_transitions = Some(i32::try_from(i).unwrap_or(i32::MAX));
        }
        let t0 = Instant::now();
        // replace sends the resourceVersion it holds: the compare-and-swap the protocol
        // uses.
        lease = api.replace("floor", &PostParams::default(), &lease).await?;
        samples.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(FloorResult {
        summary: summarize(&samples),
        samples_ms: samples,
    })
}
