//! Allocation of numbered resources a run holds exclusively: host ports from
//! the configured range.

use std::collections::BTreeSet;
use std::net::TcpListener;

/// A pool of numbers handed out one holder at a time.
#[derive(Debug)]
pub(crate) struct Pool {
    all: Vec<u32>,
    used: BTreeSet<u32>,
    /// Where the next search starts: recently freed ports (in TIME_WAIT,
    /// or still known to clients) are the last to be reused.
    cursor: usize,
    /// Skip numbers something outside the agent is bound to (ports only).
    probe_bind: bool,
}

impl Pool {
    pub(crate) fn ports(first: u16, last: u16) -> Self {
        Self { all: (u32::from(first)..=u32::from(last)).collect(), used: BTreeSet::new(), cursor: 0, probe_bind: true }
    }

    pub(crate) fn free(&self) -> usize {
        self.all.len() - self.used.len()
    }

    /// Takes `n` numbers, or none when fewer are free.
    pub(crate) fn take(&mut self, n: usize) -> Option<Vec<u32>> {
        if n == 0 {
            return Some(Vec::new());
        }
        let mut got = Vec::with_capacity(n);
        for step in 0..self.all.len() {
            let i = (self.cursor + step) % self.all.len();
            let candidate = self.all[i];
            if self.used.contains(&candidate) || got.contains(&candidate) {
                continue;
            }
            if self.probe_bind && TcpListener::bind(("0.0.0.0", candidate as u16)).is_err() {
                continue;
            }
            got.push(candidate);
            if got.len() == n {
                self.cursor = (i + 1) % self.all.len();
                self.used.extend(got.iter().copied());
                return Some(got);
            }
        }
        None
    }

    /// Takes exactly `numbers` (a gang member's ports, chosen by the
    /// manager), or none: the first one that is held, out of the range or
    /// bound by something else is the error.
    pub(crate) fn take_exact(&mut self, numbers: &[u32]) -> Result<(), u32> {
        for (i, &n) in numbers.iter().enumerate() {
            let taken = !self.all.contains(&n) || self.used.contains(&n) || numbers[..i].contains(&n);
            if taken || (self.probe_bind && TcpListener::bind(("0.0.0.0", n as u16)).is_err()) {
                return Err(n);
            }
        }
        self.used.extend(numbers.iter().copied());
        Ok(())
    }

    /// Marks numbers as held (a re-adopted run keeps what it had).
    pub(crate) fn hold(&mut self, numbers: impl IntoIterator<Item = u32>) {
        self.used.extend(numbers);
    }

    pub(crate) fn release(&mut self, numbers: impl IntoIterator<Item = u32>) {
        for n in numbers {
            self.used.remove(&n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_hands_out_a_held_number_twice() {
        let mut pool = Pool { all: (0..3).collect(), used: BTreeSet::new(), cursor: 0, probe_bind: false };
        let a = pool.take(2).unwrap_or_default();
        assert_eq!(a.len(), 2);
        assert!(pool.take(2).is_none());
        let b = pool.take(1).unwrap_or_default();
        assert!(!a.contains(&b[0]));
        pool.release(a);
        assert_eq!(pool.free(), 2);
    }

    #[test]
    fn exact_numbers_are_taken_all_or_none() {
        let mut pool = Pool { all: (10..15).collect(), used: BTreeSet::new(), cursor: 0, probe_bind: false };
        assert_eq!(pool.take_exact(&[14, 12]), Ok(()));
        assert_eq!(pool.take_exact(&[13, 14]), Err(14), "14 is held");
        assert_eq!(pool.take_exact(&[20]), Err(20), "out of the range");
        assert_eq!(pool.take_exact(&[11, 11]), Err(11), "twice");
        assert_eq!(pool.free(), 3, "a refused take holds nothing");
    }
}
