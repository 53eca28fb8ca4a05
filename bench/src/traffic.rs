//! Scenario `traffic`: from the fault to the new leader's first answer through the leader
//! Service's ClusterIP, per fault, kube-proxy setting and route. The end-to-end traffic tests
//! measure it (`make e2e-traffic-timings`, run by `make bench-e2e` once per kube-proxy setting)
//! and write `bench/results/traffic.json` ([`leadergroup_testenv::traffic_timings`]); the
//! bench only renders the table.

use leadergroup_testenv::traffic_timings::TrafficTimings;

use crate::error::Error;
use crate::markdown::{Block, Table};
use crate::scenario::{Measured, Scenario, measuring};

pub const TRAFFIC: Scenario = Scenario {
    name: "traffic",
    help: "The traffic path's table, from bench/results/traffic.json (measured by make e2e-traffic-timings)",
    files: &["traffic"],
    in_full_run: false,
    measure: |_| {
        measuring(async {
            Err::<Measured, _>(Error::Other(
                "the traffic timings are measured by the end-to-end tests: make e2e-traffic-timings (make bench-e2e runs it)".into(),
            ))
        })
    },
    render: |records| blocks(&TrafficTimings::of(&records[0])),
};

fn blocks(timings: &TrafficTimings) -> Vec<Block> {
    let columns = [
        "fault",
        "kube-proxy",
        "route",
        "new connections: to the new leader's first answer",
        "answers by a deposed pod",
        "keep-alive: to the new leader's first answer",
        "answers by a deposed pod",
        "load average",
    ];
    let goals = [
        "goal",
        "fault",
        "kube-proxy",
        "Label",
        "EndpointSlice",
        "agent proxy",
    ];
    let tables = [
        Table::of(&columns, timings.rows()),
        Table::of(&goals, timings.goals()),
    ];
    vec![Block::tables("traffic", tables)]
}
