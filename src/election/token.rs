//! The chosen leader's fencing token. A token is minted only when no durable record already gives
//! that leader one nobody else was handed; otherwise the recorded one is restored, so that a Lease
//! deleted by hand or a crash between two steps of the protocol never hands a token out twice.

/// What the durable records and the pods say about the tokens handed out so far.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Issued<'a> {
    /// The leader the status records (step 2 of the protocol), and its epoch.
    pub status_leader: Option<&'a str>,
    pub status_epoch: i64,
    /// The holder the Lease commits (step 1), and its epoch; none and 0 without a Lease.
    pub lease_holder: Option<&'a str>,
    pub lease_epoch: i64,
    /// The highest token a pod marked for the group carries (step 5); 0 when none does.
    pub highest_pod_epoch: i64,
}

/// A fencing token for the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Token {
    /// The epoch.
    pub epoch: i64,
    /// True when this decision hands out a new token (the leader acquires the Lease now).
    pub minted: bool,
}

impl Token {
    /// The token of `leader` (None: nobody is eligible), given what was `issued` so far.
    pub fn for_leader(leader: Option<&str>, paused: bool, issued: &Issued<'_>) -> Token {
        let recorded = issued.lease_epoch.max(issued.status_epoch);
        let Some(leader) = leader else {
            // Nobody leads: the epoch stays until the next leader takes the next one.
            return Token::kept(recorded);
        };
        if issued.status_leader == Some(leader)
            && issued.status_epoch >= issued.lease_epoch
            && issued.status_epoch >= issued.highest_pod_epoch
        {
            // The status records the leader at this epoch (the Lease may be missing or behind).
            return Token::kept(issued.status_epoch);
        }
        if issued.lease_holder == Some(leader)
            && issued.lease_epoch > issued.status_epoch
            && issued.lease_epoch > issued.highest_pod_epoch
        {
            // Committed but never recorded (a crash between steps 1 and 2): the token was never
            // handed out, so it can be recorded now.
            return Token::kept(issued.lease_epoch);
        }
        if paused {
            return Token::kept(recorded);
        }
        // Above every durable record and every token a pod carries: never handed out before.
        Token {
            epoch: recorded.max(issued.highest_pod_epoch) + 1,
            minted: true,
        }
    }

    fn kept(epoch: i64) -> Token {
        Token {
            epoch,
            minted: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named case: the leader chosen, whether the group is paused, the records, the token.
    struct Row {
        case: &'static str,
        leader: Option<&'static str>,
        paused: bool,
        issued: Issued<'static>,
        epoch: i64,
        minted: bool,
    }

    /// The status records `leader` at `epoch`.
    fn status(leader: Option<&'static str>, epoch: i64) -> Issued<'static> {
        Issued {
            status_leader: leader,
            status_epoch: epoch,
            ..Issued::default()
        }
    }

    /// The Lease commits `holder` at `epoch`.
    fn lease(issued: Issued<'static>, holder: Option<&'static str>, epoch: i64) -> Issued<'static> {
        Issued {
            lease_holder: holder,
            lease_epoch: epoch,
            ..issued
        }
    }

    /// A pod marked for the group carries `epoch`.
    fn pods(issued: Issued<'static>, epoch: i64) -> Issued<'static> {
        Issued {
            highest_pod_epoch: epoch,
            ..issued
        }
    }

    fn rows() -> Vec<Row> {
        let row = |case, leader, paused, issued, epoch, minted| Row {
            case,
            leader,
            paused,
            issued,
            epoch,
            minted,
        };
        let converged = pods(lease(status(Some("a"), 4), Some("a"), 4), 4);
        vec![
            row(
                "first election",
                Some("a"),
                false,
                Issued::default(),
                1,
                true,
            ),
            row(
                "converged leader keeps its token",
                Some("a"),
                false,
                converged,
                4,
                false,
            ),
            row(
                "a change of leader mints the next",
                Some("b"),
                false,
                converged,
                5,
                true,
            ),
            row(
                "nobody eligible: the epoch stays",
                None,
                false,
                lease(status(Some("a"), 4), None, 4),
                4,
                false,
            ),
            row(
                "nobody eligible keeps the higher of status and Lease",
                None,
                false,
                pods(lease(status(None, 3), None, 5), 9),
                5,
                false,
            ),
            row(
                "after nobody, the next leader mints the next",
                Some("b"),
                false,
                pods(lease(status(None, 4), None, 4), 4),
                5,
                true,
            ),
            row(
                "Lease deleted by hand: the status restores the token",
                Some("a"),
                false,
                pods(status(Some("a"), 4), 4),
                4,
                false,
            ),
            row(
                "Lease deleted by hand and another leads: mints above the pods",
                Some("b"),
                false,
                pods(status(Some("a"), 4), 4),
                5,
                true,
            ),
            row(
                "Lease deleted by hand and the status is behind a pod: mints above it",
                Some("a"),
                false,
                pods(status(Some("a"), 4), 6),
                7,
                true,
            ),
            row(
                "status restores its leader over a Lease behind it",
                Some("a"),
                false,
                pods(lease(status(Some("a"), 5), Some("b"), 4), 5),
                5,
                false,
            ),
            row(
                "crash between steps 1 and 2: the committed token is recorded",
                Some("b"),
                false,
                pods(lease(status(Some("a"), 4), Some("b"), 5), 4),
                5,
                false,
            ),
            row(
                "committed but a pod already carries it: mints above it",
                Some("b"),
                false,
                pods(lease(status(Some("a"), 4), Some("b"), 5), 5),
                6,
                true,
            ),
            row(
                "the Lease commits another leader: mints above it",
                Some("c"),
                false,
                pods(lease(status(Some("a"), 4), Some("b"), 5), 4),
                6,
                true,
            ),
            row(
                "pod annotation higher than both records: mints above it",
                Some("a"),
                false,
                pods(lease(status(Some("a"), 4), Some("a"), 4), 7),
                8,
                true,
            ),
            row(
                "paused with a leader nobody recorded: no token is minted",
                Some("a"),
                true,
                pods(lease(status(None, 3), Some("a"), 3), 3),
                3,
                false,
            ),
            row(
                "the same, not paused: a token is minted",
                Some("a"),
                false,
                pods(lease(status(None, 3), Some("a"), 3), 3),
                4,
                true,
            ),
            row(
                "paused still restores a recorded token",
                Some("a"),
                true,
                converged,
                4,
                false,
            ),
            row(
                "paused with nobody: the epoch stays",
                None,
                true,
                lease(status(None, 4), None, 4),
                4,
                false,
            ),
        ]
    }

    #[test]
    fn a_token_is_restored_from_a_record_or_minted_above_every_record() {
        for r in rows() {
            assert_eq!(
                Token::for_leader(r.leader, r.paused, &r.issued),
                Token {
                    epoch: r.epoch,
                    minted: r.minted
                },
                "{}",
                r.case
            );
        }
    }
}
