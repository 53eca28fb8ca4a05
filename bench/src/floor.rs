//! Scenario `floor`: one Lease update with a resourceVersion precondition, back to back on the
//! same server; a handover's critical path is three of them in sequence.

use std::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::error::Result;
use crate::markdown::{Block, spread_row, spread_table};
use crate::results::Record;
use crate::scenario::{Context, Measured, Scenario, measuring};

pub const FLOOR: Scenario = Scenario {
    name: "floor",
    help: "Lease updates back to back: the floor of any handover",
    files: &["floor"],
    in_full_run: true,
    measure: |ctx| measuring(measure(ctx)),
    render: |records| {
        let samples = records[0].values("", CASE, "ms");
        let table = spread_table(&["operation"]).with(spread_row(&[CASE], &samples));
        vec![Block::tables("floor", [table])]
    },
};

/// What is measured: one Lease update with a resourceVersion precondition, each sample.
pub const CASE: &str = "Lease CAS update";

async fn measure(ctx: &Context) -> Result<Measured> {
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
    let mut record = Record::default();
    record.add("", CASE, "ms", samples);
    Ok(Measured("floor", record))
}
