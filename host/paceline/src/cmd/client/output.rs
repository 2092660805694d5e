//! Printing answers: aligned plain-text tables for people, JSON and YAML
//! (rendered from the same `serde_json::Value`) for scripts.

use std::fmt::Write as _;

use serde_json::Value;

use super::Output;

/// Rows under a header, printed with each column padded to its widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|h| (*h).to_owned()).collect(), rows: Vec::new() }
    }

    /// Adds a row (cells beyond the header are kept; missing ones are blank).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as text, one line per row, no trailing spaces.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).chain([self.header.len()]).max().unwrap_or(0);
        let mut widths = vec![0; cols];
        for r in std::iter::once(&self.header).chain(&self.rows) {
            for (i, c) in r.iter().enumerate() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                if i > 0 {
                    line.push_str("  ");
                }
                let _ = write!(line, "{c:<w$}", w = widths[i]);
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `key: value` lines for one object, keys aligned.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let w = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    pairs.iter().map(|(k, v)| format!("{:<w$} {v}\n", format!("{k}:"))).collect()
}

/// Prints `value` as JSON or YAML, or the text `table` builds.
pub fn emit(output: Output, value: &Value, table: impl FnOnce() -> String) -> anyhow::Result<()> {
    match output {
        // JSON and YAML escape control characters themselves; text does not.
        Output::Table => print!("{}", super::render::printable(&table())),
        Output::Json => println!("{}", serde_json::to_string_pretty(value)?),
        Output::Yaml => print!("{}", serde_yaml::to_string(value)?),
    }
    Ok(())
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS` UTC; `-` for 0.
pub fn time(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, rem % 3600 / 60, rem % 60)
}

// Howard Hinnant's days → civil date; saves a date crate for one column.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A list of numbers as `0,1,2`; `-` when empty.
pub fn list<T: ToString>(v: &[T]) -> String {
    if v.is_empty() { "-".into() } else { v.iter().map(ToString::to_string).collect::<Vec<_>>().join(",") }
}

/// A map as `k=v k=v` in key order; `-` when empty.
pub fn pairs<K: std::fmt::Display, V: std::fmt::Display>(m: impl IntoIterator<Item = (K, V)>) -> String {
    let s = m.into_iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ");
    if s.is_empty() { "-".into() } else { s }
}

/// An empty string as `-`, so columns never look shifted.
pub fn or_dash(s: &str) -> String {
    if s.is_empty() { "-".into() } else { s.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_columns_and_trim_lines() {
        let mut t = Table::new(&["ID", "STATE"]);
        t.row(vec!["a-long-id".into(), "RUNNING".into()]);
        t.row(vec!["b".into(), "".into()]);
        assert_eq!(t.render(), "ID         STATE\na-long-id  RUNNING\nb\n");
    }

    #[test]
    fn times_are_utc_dates() {
        assert_eq!(time(0), "-");
        assert_eq!(time(1_700_000_000_000), "2023-11-14 22:13:20");
        assert_eq!(time(951_782_400_000), "2000-02-29 00:00:00");
    }
}
