//! The page's generated parts: tables as data, written as Markdown between the markers
//! `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->` of docs/benchmarks.md, whose prose
//! is written by hand. Knows no scenario.

use std::collections::BTreeMap;

use leadergroup_testenv::stats::summarize;

use crate::error::{Error, Result};

/// A table: its column titles and its rows of cells.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with these columns.
    pub fn new(columns: &[&str]) -> Table {
        Table {
            columns: columns.iter().map(|c| (*c).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// This table with `cells` added as a row.
    pub fn with<S: Into<String>>(mut self, cells: impl IntoIterator<Item = S>) -> Table {
        self.row(cells);
        self
    }

    /// A table of `columns` with these rows.
    pub fn of<const N: usize>(
        columns: &[&str],
        rows: impl IntoIterator<Item = [String; N]>,
    ) -> Table {
        let mut table = Table::new(columns);
        table.rows.extend(rows.into_iter().map(Vec::from));
        table
    }

    /// A table of two columns, a row per (label, value).
    pub fn pairs(columns: [&str; 2], rows: impl IntoIterator<Item = (String, String)>) -> Table {
        Table::of(
            &columns,
            rows.into_iter().map(|(label, value)| [label, value]),
        )
    }

    /// Adds a target's row: what it is, what was measured, and whether it was met.
    pub fn target(&mut self, target: String, measured: String, ok: bool) {
        self.row([target, measured, met(ok).to_owned()]);
    }

    fn write(&self, out: &mut String) {
        let line = |cells: &[String]| format!("| {} |\n", cells.join(" | "));
        out.push_str(&line(&self.columns));
        out.push_str(&format!("|{}\n", "---|".repeat(self.columns.len())));
        for row in &self.rows {
            out.push_str(&line(row));
        }
    }
}

/// What the page holds between one pair of markers: tables, then notes (sentences that exist
/// only for some results, a failure or a warning, so they cannot be written by hand).
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub name: String,
    pub tables: Vec<Table>,
    pub notes: Vec<String>,
}

impl Block {
    /// A block of tables.
    pub fn tables(name: impl Into<String>, tables: impl IntoIterator<Item = Table>) -> Block {
        Block {
            name: name.into(),
            tables: tables.into_iter().collect(),
            notes: Vec::new(),
        }
    }

    /// This block with `notes` added after its tables.
    pub fn notes(mut self, notes: impl IntoIterator<Item = String>) -> Block {
        self.notes.extend(notes);
        self
    }

    /// The Markdown between the markers.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        for table in &self.tables {
            out.push('\n');
            table.write(&mut out);
        }
        for note in &self.notes {
            out.push_str(&format!("\n{note}\n"));
        }
        out
    }
}

fn markers(name: &str) -> (String, String) {
    (
        format!("<!-- bench:{name}:begin -->"),
        format!("<!-- bench:{name}:end -->"),
    )
}

/// `page` with every block's content in place of what stood between its markers.
pub fn splice(page: &str, blocks: &[Block]) -> Result<String> {
    let mut page = page.to_owned();
    for block in blocks {
        let (begin, end) = markers(&block.name);
        let span = page.find(&begin).and_then(|b| {
            let from = b + begin.len();
            page[from..].find(&end).map(|e| (from, from + e))
        });
        let Some((from, to)) = span else {
            return Err(Error::Markers(begin, end));
        };
        page.replace_range(from..to, &format!("{}\n", block.markdown()));
    }
    Ok(page)
}

/// Every block as it stands in a page, markers included: what `--only` prints and logs.
pub fn excerpt(blocks: &[Block]) -> String {
    blocks
        .iter()
        .map(|b| {
            let (begin, end) = markers(&b.name);
            format!("{begin}{}\n{end}\n", b.markdown())
        })
        .collect()
}

/// Milliseconds, with a precision that suits their size.
pub fn ms(v: f64) -> String {
    if !v.is_finite() {
        "did not converge".into()
    } else if v >= 10_000.0 {
        format!("{:.1} s", v / 1000.0)
    } else if v >= 100.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v:.1} ms")
    }
}

/// A table of latencies: the columns `lead`, then median, p99, min–max and n.
pub fn spread_table(lead: &[&str]) -> Table {
    Table::new(&[lead, &["median", "p99", "min–max", "n"]].concat())
}

/// A row of a [`spread_table`]: the cells `lead`, then the summary of `samples` ("–" without).
pub fn spread_row(lead: &[&str], samples: &[f64]) -> Vec<String> {
    let spread = match summarize(samples) {
        Some(s) => [
            ms(s.median_ms),
            ms(s.p99_ms),
            format!("{}–{}", ms(s.min_ms), ms(s.max_ms)),
            s.n.to_string(),
        ],
        None => ["–".into(), "–".into(), "–".into(), "0".into()],
    };
    lead.iter().map(|c| (*c).to_owned()).chain(spread).collect()
}

/// Requests by verb and resource, "VERB resource 0.12, ...".
pub fn counts(c: &BTreeMap<String, f64>) -> String {
    if c.is_empty() {
        return "none".into();
    }
    c.iter()
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A target's verdict.
pub fn met(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn blocks_replace_what_stood_between_their_markers() {
        let page = "# T\n\n<!-- bench:a:begin -->\nold\n<!-- bench:a:end -->\n\nprose\n";
        let block = Block::tables("a", [Table::new(&["x", "y"]).with(["1", "2"])])
            .notes(["**note**".to_owned()]);
        let spliced = splice(page, std::slice::from_ref(&block)).unwrap();
        assert_eq!(
            spliced,
            "# T\n\n<!-- bench:a:begin -->\n| x | y |\n|---|---|\n| 1 | 2 |\n\n**note**\n\n<!-- bench:a:end -->\n\nprose\n"
        );
        assert_eq!(splice(&spliced, &[block]).unwrap(), spliced);
        let missing = Block::tables("b", []);
        assert!(splice(page, &[missing]).is_err());
    }
}
