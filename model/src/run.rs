//! Running the checker on a configuration, and its report.

use std::time::{Duration, Instant};

use std::fmt::Debug;
use std::hash::Hash;

use stateright::{Checker, HasDiscoveries, Model};

use crate::display;
use crate::finalizer::LeaseOnDeletion;
#[cfg(test)]
use crate::model::Config;
use crate::model::LeaderGroupModel;
use crate::properties;

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
        self.expected()
    }
    /// The property the configuration is built to break: it runs code as it was before a fix,
    /// so a counterexample to it is its expected outcome, not a failure of the run (and a
    /// complete search without one is).
    fn expected(&self) -> Option<&'static str> {
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

    fn expected(&self) -> Option<&'static str> {
        // The finalizer as it was before epochs continued across a group's re-creation.
        (self.config.lease_on_deletion == LeaseOnDeletion::Deleted).then_some(properties::I3)
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
    /// Checker threads that panicked: each left part of the space unexplored.
    pub panicked: usize,
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
    let (checker, mut panicked) = joined(checker);
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
    // A thread that panicked closes the checker's job market: it is done, but not complete.
    let complete = checker.is_done() && !timed_out && !first_failure && panicked == 0;
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
                let (again, failed) = joined(Box::new(builder.spawn_bfs()));
                panicked += failed;
                again.discovery(property.name)
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
        panicked,
    }
}

/// What makes a run fail, each as a line: a counterexample to a property other than the one the
/// configuration is built to break, a checker thread that panicked, and a complete search that
/// did not find the counterexample the configuration is built to show. Empty: the run passed.
pub fn failures<M>(report: &Report, model: &M) -> Vec<String>
where
    M: Explained,
{
    let expected = model.expected();
    let mut out: Vec<String> = model
        .properties()
        .iter()
        .filter(|p| p.expectation.discovery_is_failure() && Some(p.name) != expected)
        .filter(|p| report.found(p.name).is_some())
        .map(|p| format!("counterexample to \"{}\"", p.name))
        .collect();
    if report.panicked > 0 {
        out.push(format!(
            "{} checker thread(s) panicked: part of the space is unexplored",
            report.panicked
        ));
    }
    if let Some(name) = expected
        && report.complete
        && report.found(name).is_none()
    {
        out.push(format!(
            "no counterexample to \"{name}\", which this configuration (the code before its fix) is built to show"
        ));
    }
    out
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
        if report.panicked > 0 {
            ", a checker thread PANICKED"
        } else if report.complete {
            ", every state visited"
        } else if report.stopped_at_first {
            ", stopped at the first counterexample"
        } else {
            ", STOPPED before the end (time limit)"
        }
    );
    let expected = model.expected();
    for property in model.properties() {
        let verdict = match (report.found(property.name), property.expectation) {
            (Some(_), stateright::Expectation::Sometimes) => "example found",
            (None, stateright::Expectation::Sometimes) => "NO EXAMPLE",
            (Some(_), _) if expected == Some(property.name) => "expected: found",
            (None, _) if expected == Some(property.name) && report.complete => "EXPECTED, NONE",
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
            let why = if expected == Some(*name) {
                " (expected: this configuration runs the code before its fix)"
            } else {
                ""
            };
            out.push_str(&format!("\ncounterexample to \"{name}\"{why}:\n{path}"));
        }
    }
    out
}

/// Waits for every thread of `checker`; with how many of them panicked (each left its part of
/// the space unexplored, and closed the checker for the others).
fn joined<M: Model>(mut checker: Box<dyn Checker<M>>) -> (Box<dyn Checker<M>>, usize) {
    let panicked = checker
        .handles()
        .into_iter()
        .map(|handle| handle.join())
        .filter(Result::is_err)
        .count();
    (checker, panicked)
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

#[cfg(test)]
mod exit_tests {
    //! What fails a run: the binary exits 1 when [`failures`] is not empty.

    use stateright::Property;

    use super::*;

    const BELOW: &str = "the counter stays below its limit";
    const REACHES: &str = "sometimes the counter reaches 2";

    /// A counter from 0 to 3: a model small enough to know every outcome of.
    #[derive(Clone)]
    struct Counter {
        limit: u8,
        /// A step to this value panics (a bug of the model's code).
        panics_at: Option<u8>,
        expected: Option<&'static str>,
    }

    impl Model for Counter {
        type State = u8;
        type Action = ();

        fn init_states(&self) -> Vec<u8> {
            vec![0]
        }

        fn actions(&self, state: &u8, actions: &mut Vec<()>) {
            if *state < 3 {
                actions.push(());
            }
        }

        fn next_state(&self, state: &u8, _: ()) -> Option<u8> {
            let next = state + 1;
            assert!(self.panics_at != Some(next), "the model's own bug");
            Some(next)
        }

        fn properties(&self) -> Vec<Property<Self>> {
            vec![
                Property::always(BELOW, |m: &Counter, s: &u8| *s < m.limit),
                Property::sometimes(REACHES, |_, s: &u8| *s == 2),
            ]
        }
    }

    impl Explained for Counter {
        fn config_name(&self) -> &'static str {
            "counter"
        }

        fn explain(&self, states: &[u8], _: &[()]) -> String {
            format!("{states:?}\n")
        }

        fn expected(&self) -> Option<&'static str> {
            self.expected
        }
    }

    fn run(model: Counter) -> (Report, Vec<String>) {
        let report = check(model.clone(), 2, Search::DepthFirst, false, None);
        println!("{}", render(&report, &model));
        let failures = failures(&report, &model);
        (report, failures)
    }

    #[test]
    fn a_model_that_holds_passes() {
        let (report, failures) = run(Counter {
            limit: 9,
            panics_at: None,
            expected: None,
        });
        assert!(report.complete);
        assert_eq!(failures, Vec::<String>::new());
    }

    #[test]
    fn an_unexpected_counterexample_fails() {
        let (_, failures) = run(Counter {
            limit: 2,
            panics_at: None,
            expected: None,
        });
        assert_eq!(failures, vec![format!("counterexample to \"{BELOW}\"")]);
    }

    /// A configuration of the code before a fix reports the hole it is built to show, and passes.
    #[test]
    fn the_expected_counterexample_passes() {
        let model = Counter {
            limit: 2,
            panics_at: None,
            expected: Some(BELOW),
        };
        let (report, failures) = run(model.clone());
        assert!(report.found(BELOW).is_some());
        assert_eq!(failures, Vec::<String>::new());
        assert!(render(&report, &model).contains("(expected: "));
    }

    /// ... and fails once it no longer shows it: the replay no longer reproduces the hole.
    #[test]
    fn an_expected_counterexample_not_found_fails() {
        let (_, failures) = run(Counter {
            limit: 9,
            panics_at: None,
            expected: Some(BELOW),
        });
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].starts_with("no counterexample"), "{failures:?}");
    }

    /// A checker thread that panicked closes the search for every thread: the run is
    /// incomplete and fails, though no property broke.
    #[test]
    fn a_checker_thread_that_panics_fails() {
        let (report, failures) = run(Counter {
            limit: 9,
            panics_at: Some(2),
            expected: None,
        });
        assert!(report.panicked > 0);
        assert!(!report.complete);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(failures[0].contains("panicked"), "{failures:?}");
    }
}
