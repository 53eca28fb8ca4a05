//! A model checker of the transition protocol over the operator's own decision code.
//!
//! Every decision in the model is the operator's [`leadergroup_operator::election::decide`] on
//! Kubernetes objects built from the model's state, and a replica's barrier flag: its plan holds
//! every write of the pass, and the model owns only what is around it (the API server, requests
//! in flight, the replicas' passes, the user, time), so that a hole the checker finds is a hole
//! of the operator's code, not of a copy of it.

pub mod api;
pub mod display;
pub mod error;
pub mod finalizer;
pub mod ghost;
pub mod heartbeat;
pub mod model;
pub mod objects;
pub mod properties;
pub mod regressions;
pub mod replays;
pub mod replica;
pub mod run;
pub mod state;
pub mod user;

pub use model::{Action, Config, LeaderGroupModel};
pub use state::State;
