//! Running the checker on a configuration, and its report.

use std::time::{Duration, Instant};

use std::fmt::Debug;
use std::hash::Hash;

use stateright::{Checker, HasDiscoveries, Model};

use crate::display;
use crate::model::LeaderGroupModel;
#[cfg(test)]
use crate::{model::Config, properties};

/// A model the checker runs and whose paths it prints: the Readiness model
/// ([`LeaderGroupModel`]) and the Heartbeat one ([`crate::heartbeat::HeartbeatModel`]).
pub trait Explained:
    Model<
        State: Hash + Debug + Clone + PartialEq + Send + Sync + 'static,
        Action: Debug + Clone + PartialEq + Send + Sync + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
    /// The configuration's name.
    fn config_name(&self) -> &'static str;
    /// A path as numbered API calls and events.
    fn explain(&self, states: &[Self::State], actions: &[Self::Action]) -> String;
    /// The property the configuration is known to break, if any: a search for the first
    /// counterexample looks for one to it (others met on the way are reported too).
    fn sought(&self) -> Option<&'static str> {
        None
    }
}

impl Explained for LeaderGroupModel {
    fn config_name(&self) -> &'static str {
        self.config.name
    }

    fn explain(&self, states: &[Self::State], actions: &[Self::Action]) -> String {
        display::path(self, states, actions)
    }
}

/// What one exhaustive run found.
/// The largest exhausted space searched again for shortest counterexamples.
const SHORTEST_PATH_STATES: usize = 2_000_000;

/// How the checker walks the space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Search {
    /// Depth first: its frontier stays small, where a breadth-first one holds millions of
    /// states in memory.
    DepthFirst,
    BreadthFirst,
    /// Breadth first, stopping at the first counterexample (to the configuration's sought
    /// property, if it names one): a shortest one, soon.
    FirstFailure,
}

pub struct Report {
    pub config: &'static str,
    pub unique_states: usize,
    pub states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Each property with a discovery: its name and the path, printed.
    pub discoveries: Vec<(&'static str, String)>,
    /// Whether every reachable state was visited (false: it stopped at the first failures).
    pub complete: bool,
    /// It stopped at the first counterexample (`Search::FirstFailure`), not at its time limit.
    pub stopped_at_first: bool,
}

impl Report {
    pub fn found(&self, property: &str) -> Option<&str> {
        self.discoveries
            .iter()
            .find(|(name, _)| *name == property)
            .map(|(_, path)| path.as_str())
    }
}

/// Explores `model` on `threads` as `search` says; with `progress`, prints the count so far to
/// stderr every few seconds. The counterexamples of a complete search are searched again breadth
/// first, so that each is a shortest one.
pub fn check<M>(
    model: M,
    threads: usize,
    search: Search,
    progress: bool,
    limit: Option<Duration>,
) -> Report
where
    M: Explained,
{
    let name = model.config_name();
    let started = Instant::now();
    let mut builder = model.clone().checker().threads(threads);
    if let Some(limit) = limit {
        builder = builder.timeout(limit);
    }
    let checker: Box<dyn Checker<M>> = match search {
        Search::DepthFirst => Box::new(builder.spawn_dfs()),
        Search::BreadthFirst => Box::new(builder.spawn_bfs()),
        Search::FirstFailure => {
            let until = match model.sought() {
                Some(property) => HasDiscoveries::AnyOf([property].into()),
                None => HasDiscoveries::AnyFailures,
            };
            Box::new(builder.finish_when(until).spawn_bfs())
        }
    };
    let mut reported = Instant::now();
    while progress && !checker.is_done() {
        // Polled often, so that a search that ends early is not timed to the next report.
        std::thread::sleep(Duration::from_millis(100));
        if reported.elapsed() >= Duration::from_secs(10) {
            reported = Instant::now();
            eprintln!(
                "  {:.0} s: {} unique states, depth {}",
                started.elapsed().as_secs_f64(),
                checker.unique_state_count(),
                checker.max_depth()
            );
        }
    }
    let checker = joined(checker);
    let elapsed = started.elapsed();
    if progress {
        let found: Vec<&str> = model
            .properties()
            .iter()
            .filter(|p| checker.discovery(p.name).is_some())
            .map(|p| p.name)
            .collect();
        eprintln!(
            "  explored in {:.0} s; discoveries (each searched again breadth first for a shortest path): {found:?}",
            elapsed.as_secs_f64()
        );
    }
    let first_failure = search == Search::FirstFailure
        && model
            .properties()
            .iter()
            .any(|p| p.expectation.discovery_is_failure() && checker.discovery(p.name).is_some());
    let timed_out = limit.is_some_and(|l| elapsed >= l);
    let complete = checker.is_done() && !timed_out && !first_failure;
    let mut discoveries = Vec::new();
    for property in model.properties() {
        if checker.discovery(property.name).is_none() {
            continue;
        }
        // The exhaustive run keeps the last path it met, not the shortest: a second run,
        // breadth first and stopping at the first, finds a shortest one.
        // Only on a space small enough to have been exhausted: breadth first, a large one fills
        // the memory (24 GB at 11 million states) before it ends. There the first run's path
        // stands.
        let searched_again = complete && search != Search::FirstFailure;
        let shortest = (searched_again && checker.unique_state_count() <= SHORTEST_PATH_STATES)
            .then(|| {
                let mut builder = model
                    .clone()
                    .checker()
                    .finish_when(HasDiscoveries::AnyOf([property.name].into()));
                if let Some(limit) = limit {
                    builder = builder.timeout(limit);
                }
                builder.spawn_bfs().join().discovery(property.name)
            })
            .flatten();
        if let Some(path) = shortest.or_else(|| checker.discovery(property.name)) {
            let states = path.clone().into_states();
            let actions = path.into_actions();
            let text = model.explain(&states, &actions);
            discoveries.push((property.name, text));
        }
    }
    Report {
        config: name,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        discoveries,
        complete,
        stopped_at_first: first_failure && !timed_out,
    }
}

/// The report as text.
pub fn render<M>(report: &Report, model: &M) -> String
where
    M: Explained,
{
    let mut out = format!(
        "configuration {}: {} unique states ({} generated), depth {}, {:.1} s{}\n",
        report.config,
        report.unique_states,
        report.states,
        report.max_depth,
        report.elapsed.as_secs_f64(),
        if report.complete {
            ", every state visited"
        } else if report.stopped_at_first {
            ", stopped at the first counterexample"
        } else {
            ", STOPPED before the end (time limit)"
        }
    );
    for property in model.properties() {
        let verdict = match (report.found(property.name), property.expectation) {
            (Some(_), stateright::Expectation::Sometimes) => "example found",
            (None, stateright::Expectation::Sometimes) => "NO EXAMPLE",
            (Some(_), _) => "COUNTEREXAMPLE",
            (None, _) if report.complete => "holds",
            (None, _) => "none found yet",
        };
        out.push_str(&format!("  {verdict:>14}: {}\n", property.name));
    }
    for (name, path) in &report.discoveries {
        let is_failure = model
            .properties()
            .iter()
            .any(|p| p.name == *name && p.expectation.discovery_is_failure());
        if is_failure {
            out.push_str(&format!("\ncounterexample to \"{name}\":\n{path}"));
        }
    }
    out
}

/// Waits for every thread of `checker`.
fn joined<M: Model>(mut checker: Box<dyn Checker<M>>) -> Box<dyn Checker<M>> {
    for handle in checker.handles() {
        // A checker thread that panicked leaves its part unexplored: the counts then say so.
        let _ = handle.join();
    }
    checker
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounded configuration of the unit-test suite, explored exhaustively: every property
    /// holds over every state. On the code before step 4's check listed every leader label of
    /// the namespace (when the group's barrier is not known up) and read the Lease afresh, it
    /// found two counterexamples, kept as the replays of `regressions`: a stale pod cache
    /// beside a leader label outside the selector (I1), and a promotion on a stale Lease cache
    /// (I3).
    #[test]
    fn exhaustive_check_holds() {
        let report = check(
            LeaderGroupModel::new(Config::selector()),
            2,
            Search::BreadthFirst,
            false,
            None,
        );
        println!(
            "{}",
            render(&report, &LeaderGroupModel::new(Config::selector()))
        );
        assert!(report.complete, "the checker stopped before the end");
        assert!(report.found(properties::I1).is_none());
        assert!(report.found(properties::I3).is_none());
        assert!(report.found(properties::CONSISTENT).is_none());
        assert!(report.found(properties::ORDER).is_none());
        assert!(report.found(properties::LEADS).is_some());
        assert!(report.found(properties::MOVES).is_some());
    }
}
