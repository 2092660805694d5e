//! How many feasible hosts a placement plugin is offered per group of alike
//! tasks (decision 0054). The narrowing itself is the placement engine's
//! (`paceline-placement`'s `narrow`); the registry only keeps the setting,
//! per slot and per version, as it keeps a version's deadline.

use serde::{Deserialize, Serialize};

/// Feasible hosts offered to a placement plugin per group of alike tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Candidates {
    /// A share of the feasible hosts that falls as the cluster grows, at
    /// least [`Candidates::FLOOR`] (every host below that), as
    /// kube-scheduler's `percentageOfNodesToScore`.
    #[default]
    Auto,
    /// Every feasible host: no narrowing (a policy that must see the whole
    /// cluster declares it).
    All,
    /// At most this many per group (raised when the group's tasks need
    /// more hosts to fit, and to keep preferred hosts).
    Count(u32),
}

impl Candidates {
    /// The fewest hosts `Auto` offers a group (every feasible host when
    /// there are fewer): kube-scheduler's `minFeasibleNodesToFind`.
    pub const FLOOR: usize = 100;

    /// Parses `auto`, `all` (or `0`) or a host count.
    pub fn parse(s: &str) -> Result<Candidates, String> {
        match s.trim() {
            "auto" => Ok(Candidates::Auto),
            "all" | "0" => Ok(Candidates::All),
            n => n
                .parse::<u32>()
                .map(Candidates::Count)
                .map_err(|_| format!("candidates must be `auto`, `all` (or 0) or a host count, not {n:?}")),
        }
    }

    /// How many of `feasible` hosts a group is offered at most, before the
    /// raises for the group's needs and preferred hosts.
    ///
    /// `Auto`: every host up to [`Candidates::FLOOR`]; above, `50 - n/125`
    /// percent of them, never under 5% nor under the floor (1,000 hosts:
    /// 420; 5,000: 500; 10,000: 500; 50,000: 2,500). Integers only.
    pub fn limit(self, feasible: usize) -> usize {
        match self {
            Candidates::All => feasible,
            Candidates::Count(0) => feasible,
            Candidates::Count(k) => (k as usize).min(feasible),
            Candidates::Auto => {
                if feasible <= Self::FLOOR {
                    return feasible;
                }
                let percent = 50usize.saturating_sub(feasible / 125).max(5);
                (feasible * percent / 100).max(Self::FLOOR).min(feasible)
            }
        }
    }
}

impl std::fmt::Display for Candidates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Candidates::Auto => f.write_str("auto"),
            Candidates::All | Candidates::Count(0) => f.write_str("all"),
            Candidates::Count(k) => write!(f, "{k}"),
        }
    }
}

impl std::str::FromStr for Candidates {
    type Err = String;
    fn from_str(s: &str) -> Result<Candidates, String> {
        Candidates::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_falls_with_cluster_size_and_keeps_the_floor() {
        assert_eq!(Candidates::Auto.limit(40), 40);
        assert_eq!(Candidates::Auto.limit(100), 100);
        assert_eq!(Candidates::Auto.limit(150), 100, "49% of 150 is under the floor");
        assert_eq!(Candidates::Auto.limit(1_000), 420);
        assert_eq!(Candidates::Auto.limit(10_000), 500);
        assert_eq!(Candidates::Auto.limit(50_000), 2_500);
        assert_eq!(Candidates::All.limit(10_000), 10_000);
        assert_eq!(Candidates::Count(300).limit(10_000), 300);
        assert_eq!(Candidates::Count(300).limit(30), 30);
    }

    #[test]
    fn parses_and_prints_each_form() {
        for (s, c) in [("auto", Candidates::Auto), ("all", Candidates::All), ("250", Candidates::Count(250))] {
            assert_eq!(Candidates::parse(s), Ok(c));
            assert_eq!(c.to_string(), s);
        }
        assert_eq!(Candidates::parse("0"), Ok(Candidates::All));
        assert!(Candidates::parse("-3").is_err());
        assert!(Candidates::parse("some").is_err());
    }
}
