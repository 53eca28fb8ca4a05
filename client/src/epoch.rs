//! The fencing token.

use std::{fmt, str::FromStr};

/// A group's fencing token: it grows by one at every change of leader and is never handed out
/// twice. A resource that accepts writes from leaders refuses an epoch lower than the highest it
/// has accepted (see [`crate::fence`]).
///
/// A newtype over `i64`, never negative: the operator writes the epoch as a decimal `i64` (the
/// Lease's `leadergroup.io/epoch` annotation and the LeaderGroup's `status.epoch`, an int64 as all
/// Kubernetes integers are), and PostgreSQL's `bigint` is signed too. With `i64` inside, every
/// epoch the operator can hand out is storable everywhere without a fallible conversion; a `u64`
/// would admit values above `i64::MAX` that neither side can hold. Negative values are refused
/// when an epoch is made ([`Epoch::new`], [`FromStr`]), so the order is the natural one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(i64);

impl Epoch {
    /// The epoch of a group that never had a leader.
    pub const ZERO: Epoch = Epoch(0);

    /// An epoch from its value; `None` when it is negative.
    pub const fn new(value: i64) -> Option<Epoch> {
        if value < 0 { None } else { Some(Epoch(value)) }
    }

    /// The value, as the operator writes it and as PostgreSQL's `bigint` holds it.
    pub const fn get(self) -> i64 {
        self.0
    }
}

impl From<u32> for Epoch {
    fn from(value: u32) -> Epoch {
        Epoch(i64::from(value))
    }
}

impl TryFrom<i64> for Epoch {
    type Error = ParseEpochError;

    fn try_from(value: i64) -> Result<Epoch, ParseEpochError> {
        Epoch::new(value).ok_or_else(|| ParseEpochError {
            input: value.to_string(),
            reason: "an epoch is never negative",
        })
    }
}

impl From<Epoch> for i64 {
    fn from(epoch: Epoch) -> i64 {
        epoch.0
    }
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A string that is not an epoch: the epoch is a decimal integer from 0 to `i64::MAX`, without a
/// sign, spaces or other characters.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{input:?} is not an epoch: {reason} (expected a decimal integer from 0 to 9223372036854775807)"
)]
pub struct ParseEpochError {
    /// What was parsed.
    pub input: String,
    /// Why it was refused.
    pub reason: &'static str,
}

impl FromStr for Epoch {
    type Err = ParseEpochError;

    fn from_str(s: &str) -> Result<Epoch, ParseEpochError> {
        let refuse = |reason| ParseEpochError {
            input: s.to_owned(),
            reason,
        };
        if s.is_empty() {
            return Err(refuse("it is empty"));
        }
        // i64's own parser accepts a leading '+' (and '-'): the operator never writes either.
        if !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(refuse("it holds a character that is not a decimal digit"));
        }
        s.parse::<i64>()
            .map(Epoch)
            .map_err(|_| refuse("it is too large"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_operator_writes() {
        assert_eq!("0".parse::<Epoch>(), Ok(Epoch::ZERO));
        assert_eq!("12".parse::<Epoch>().map(Epoch::get), Ok(12));
        assert_eq!(
            "9223372036854775807".parse::<Epoch>().map(Epoch::get),
            Ok(i64::MAX)
        );
        assert_eq!(Epoch::from(7u32).to_string(), "7");
    }

    #[test]
    fn refuses_anything_else_and_says_why() {
        for (input, reason) in [
            ("", "empty"),
            ("-1", "not a decimal digit"),
            ("+1", "not a decimal digit"),
            (" 1", "not a decimal digit"),
            ("1.0", "not a decimal digit"),
            ("x", "not a decimal digit"),
            ("9223372036854775808", "too large"),
        ] {
            let err = input.parse::<Epoch>().unwrap_err();
            let text = err.to_string();
            assert!(text.contains(reason), "{input:?}: {text}");
            assert!(text.contains(&format!("{input:?}")), "{input:?}: {text}");
        }
        assert!(Epoch::new(-1).is_none());
        assert!(
            Epoch::try_from(-5i64)
                .unwrap_err()
                .to_string()
                .contains("never negative")
        );
    }

    #[test]
    fn orders_by_value() {
        let mut epochs: Vec<Epoch> = [10u32, 9, 100].into_iter().map(Epoch::from).collect();
        epochs.sort();
        assert_eq!(epochs, [9u32, 10, 100].map(Epoch::from));
        assert!(Epoch::from(2u32) > Epoch::from(1u32));
    }
}
