//! The benchmark's results files, `bench/results/<name>.json`: one generic record of samples,
//! written by the bench and by the end-to-end traffic tests ([`crate::traffic_timings`]), read
//! by the bench to render the tables of docs/benchmarks.md.

use std::collections::BTreeMap;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Error, Result};

/// The commit `repo` is at (HEAD, "?" when git cannot say) and its tracked files that differ
/// from it: what a run measures, recorded with its results.
pub fn checkout(repo: &Path) -> (String, Vec<String>) {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())?;
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let commit = git(&["rev-parse", "HEAD"]).map_or_else(|| "?".into(), |c| c.trim().to_owned());
    let status = git(&["status", "--porcelain", "--untracked-files=no"]).unwrap_or_default();
    // Each line is "XY path".
    let changed = status.lines().filter_map(|l| l.get(3..)).map(str::to_owned);
    (commit, changed.collect())
}

/// A results file, `bench/results/<name>.json`: the record of the run that measured it (`R`),
/// then every sample, so that a reader can recompute any table from it.
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct Record<R> {
    #[serde(default)]
    pub run: R,
    pub samples: Vec<Sample>,
}

/// One figure: what was measured (`metric`, its unit in its name) of which system in which case
/// (either may be empty), and its value: a number, a repeated measurement's list, a text
/// (settings, a failure) or requests by verb and resource.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct Sample {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub system: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub case: String,
    pub metric: String,
    pub value: Value,
}

impl<R: Serialize + DeserializeOwned + Default> Record<R> {
    /// Reads the results file `path`; None when there is none (not measured yet).
    pub fn read(path: &Path) -> Result<Option<Record<R>>> {
        let reading = || Error::io(format!("reading {}", path.display()));
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(reading()(e)),
        };
        let record = serde_json::from_str(&text).map_err(|e| reading()(e.into()))?;
        Ok(Some(record))
    }

    /// Writes it to `path`, pretty, creating its folder if need be.
    pub fn write(&self, path: &Path) -> Result<()> {
        let writing = || Error::io(format!("writing {}", path.display()));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(writing())?;
        }
        let text = serde_json::to_string_pretty(self).map_err(|e| writing()(e.into()))?;
        std::fs::write(path, text + "\n").map_err(writing())
    }
}

impl Sample {
    fn is(&self, system: &str, case: &str, metric: &str) -> bool {
        self.system == system && self.case == case && self.metric == metric
    }
}

impl<R> Record<R> {
    /// Adds a sample, in place of one of the same system, case and metric.
    pub fn add(&mut self, system: &str, case: &str, metric: &str, value: impl Serialize) {
        // Numbers, texts, lists and maps with text keys always serialize.
        let value = serde_json::to_value(value).unwrap_or_default();
        if let Some(s) = self.samples.iter_mut().find(|s| s.is(system, case, metric)) {
            s.value = value;
            return;
        }
        let (system, case, metric) = (system.into(), case.into(), metric.into());
        self.samples.push(Sample {
            system,
            case,
            metric,
            value,
        });
    }

    fn get(&self, system: &str, case: &str, metric: &str) -> Option<&Value> {
        let sample = self.samples.iter().find(|s| s.is(system, case, metric));
        sample.map(|s| &s.value)
    }

    /// A number; NaN when there is none (null: not measured).
    pub fn number(&self, system: &str, case: &str, metric: &str) -> f64 {
        let value = self.get(system, case, metric);
        value.and_then(Value::as_f64).unwrap_or(f64::NAN)
    }

    /// A list of numbers (one number: a list of one).
    pub fn values(&self, system: &str, case: &str, metric: &str) -> Vec<f64> {
        match self.get(system, case, metric) {
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_f64).collect(),
            value => value.and_then(Value::as_f64).into_iter().collect(),
        }
    }

    /// The median of a list of numbers; NaN without any.
    pub fn median(&self, system: &str, case: &str, metric: &str) -> f64 {
        let summary = crate::stats::summarize(&self.values(system, case, metric));
        summary.map_or(f64::NAN, |s| s.median_ms)
    }

    /// A text, or a list of texts joined by "; "; None when there is none.
    pub fn text(&self, system: &str, case: &str, metric: &str) -> Option<String> {
        let texts = self.texts(system, case, metric);
        (!texts.is_empty()).then(|| texts.join("; "))
    }

    /// A list of texts (one text: a list of one).
    pub fn texts(&self, system: &str, case: &str, metric: &str) -> Vec<String> {
        match self.get(system, case, metric) {
            Some(Value::Array(list)) => list
                .iter()
                .filter_map(Value::as_str)
                .map(Into::into)
                .collect(),
            value => value
                .and_then(Value::as_str)
                .map(Into::into)
                .into_iter()
                .collect(),
        }
    }

    /// A map of numbers (requests by verb and resource).
    pub fn counts(&self, system: &str, case: &str, metric: &str) -> Option<BTreeMap<String, f64>> {
        let value = self.get(system, case, metric)?.clone();
        serde_json::from_value(value).ok()
    }

    /// The systems of `case`, in the order of their first sample.
    pub fn systems(&self, case: &str) -> Vec<&str> {
        let of_case = self
            .samples
            .iter()
            .filter(|s| s.case == case && !s.system.is_empty());
        distinct(of_case.map(|s| s.system.as_str()))
    }

    /// The cases (none empty), in the order of their first sample.
    pub fn cases(&self) -> Vec<&str> {
        let cases = self.samples.iter().map(|s| s.case.as_str());
        distinct(cases.filter(|c| !c.is_empty()))
    }

    /// The (system, case) pairs, in the order of their first sample.
    pub fn entries(&self) -> Vec<(&str, &str)> {
        distinct(
            self.samples
                .iter()
                .map(|s| (s.system.as_str(), s.case.as_str())),
        )
    }
}

/// `items` without repeats, in order.
fn distinct<T: PartialEq>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_are_read_back_by_system_case_and_metric_in_their_order() {
        let mut r: Record<()> = Record::default();
        r.add("b", "x", "ms", [3.0, 1.0, 2.0]);
        r.add("a", "x", "ms", 5.0);
        r.add("a", "y", "settings", "fast");
        r.add("a", "y", "failures", ["one", "two"]);
        r.add("b", "x", "ms", [4.0]);
        assert_eq!(
            r.values("b", "x", "ms"),
            [4.0],
            "a sample of the same key is replaced"
        );
        assert_eq!(r.values("a", "x", "ms"), [5.0]);
        assert!(r.number("a", "z", "ms").is_nan());
        assert_eq!(r.text("a", "y", "settings").as_deref(), Some("fast"));
        assert_eq!(r.texts("a", "y", "failures"), ["one", "two"]);
        assert_eq!(r.systems("x"), ["b", "a"]);
        assert_eq!(r.cases(), ["x", "y"]);
        assert_eq!(r.entries(), [("b", "x"), ("a", "x"), ("a", "y")]);
    }
}
