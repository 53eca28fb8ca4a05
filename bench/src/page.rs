//! docs/benchmarks.md: its prose is written by hand; the scenarios' blocks, rendered from
//! bench/results, are spliced in between their markers.

use std::path::Path;

use crate::error::{Error, Result};
use crate::markdown::{Block, excerpt as blocks_excerpt, splice};
use crate::results::Results;
use crate::scenario::Scenario;

/// Every block of `scenarios` from `results`.
fn blocks(scenarios: &[&Scenario], results: &Results) -> Result<Vec<Block>> {
    let mut all = Vec::new();
    for scenario in scenarios {
        all.extend((scenario.render)(results)?);
    }
    Ok(all)
}

/// Rewrites the tables of `<repo>/docs/benchmarks.md` from `<repo>/bench/results`.
pub fn rewrite(repo: &Path, scenarios: &[&Scenario]) -> Result<()> {
    let path = repo.join("docs/benchmarks.md");
    let page =
        std::fs::read_to_string(&path).map_err(Error::io(format!("reading {}", path.display())))?;
    let page = splice(&page, &blocks(scenarios, &Results::of(repo))?)?;
    std::fs::write(&path, page).map_err(Error::io(format!("writing {}", path.display())))?;
    tracing::info!("wrote the tables of docs/benchmarks.md from bench/results/*.json");
    Ok(())
}

/// The blocks of `scenarios`, as the page holds them.
pub fn excerpt(scenarios: &[&Scenario], results: &Results) -> Result<String> {
    Ok(blocks_excerpt(&blocks(scenarios, results)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The committed page holds exactly the tables the committed results render: a change of
    /// the rendering, or results committed without the page regenerated, fails here.
    #[test]
    fn the_committed_page_holds_the_committed_results_tables() {
        let repo = crate::repo_root();
        let page = std::fs::read_to_string(repo.join("docs/benchmarks.md")).unwrap();
        let blocks = blocks(crate::SCENARIOS, &Results::of(&repo)).unwrap();
        // Every block the page has markers for is rendered, and no other.
        let mut names: Vec<&str> = blocks.iter().map(|b| b.name.as_str()).collect();
        let mut marked: Vec<&str> = page
            .split("<!-- bench:")
            .skip(1)
            .filter_map(|rest| rest.split_once(":begin -->").map(|(name, _)| name))
            // The prose shows the markers' form with a placeholder.
            .filter(|name| *name != "NAME")
            .collect();
        names.sort_unstable();
        marked.sort_unstable();
        assert_eq!(names, marked);
        let regenerated = splice(&page, &blocks).unwrap();
        if regenerated != page {
            let diff: Vec<String> = page
                .lines()
                .zip(regenerated.lines())
                .filter(|(a, b)| a != b)
                .map(|(a, b)| format!("committed:   {a}\nregenerated: {b}"))
                .take(5)
                .collect();
            panic!(
                "docs/benchmarks.md differs from bench/results (`leadergroup-bench --only page` rewrites it):\n{}",
                diff.join("\n")
            );
        }
    }
}
