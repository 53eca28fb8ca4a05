//! The chosen leader's fencing token. A token is minted only when no durable record already gives
//! that leader one nobody else was handed; otherwise the recorded one is restored, so that a Lease
//! deleted by hand or a crash between two steps of the protocol never hands a token out twice.

/// What the durable records and the pods say about the tokens handed out so far.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Issued<'a> {
    /// The leader the status records (step 2 of the protocol).
    pub status_leader: Option<&'a str>,
    /// The epoch the status records.
    pub status_epoch: i64,
    /// The holder the Lease commits (step 1); none without a Lease.
    pub lease_holder: Option<&'a str>,
    /// The epoch the Lease commits; 0 without a Lease.
    pub lease_epoch: i64,
    /// The highest token a pod marked for the group carries (step 5); 0 when none does.
    pub highest_pod_epoch: i64,
    /// The holder the Lease names, even a pod created again since: its old incarnation held
    /// the Lease's epoch.
    pub lease_named: Option<&'a str>,
    /// Each pod marked for the group with the token it carries.
    pub pod_epochs: &'a [(String, i64)],
    /// The epoch of the Lease an earlier group of this name left; 0 when the group's Lease is its
    /// own or there is none. Every token up to it was handed out under this name.
    pub inherited_epoch: i64,
}

/// How far the Lease's epoch may run ahead of every token the group recorded or handed out. The
/// operator's own writes put it one ahead per commit that a crash kept from being recorded (between
/// steps 1 and 2), and each such crash is followed by a pass that records it; a gap wider than
/// this was written by someone else.
pub(super) const MAX_UNRECORDED_EPOCHS: i64 = 1000;

impl Issued<'_> {
    /// The highest token the status records, a pod carries, or an earlier group of the name
    /// left in the Lease. Every token the operator handed out is at most this: it records a token
    /// (step 2) before any pod carries it (step 5), and a deleted group's records end in its Lease.
    pub fn floor(&self) -> i64 {
        self.status_epoch
            .max(self.highest_pod_epoch)
            .max(self.inherited_epoch)
    }

    /// Whether the Lease names, or a pod carries, a pod other than `leader` at `epoch` or above.
    fn held_by_another(&self, leader: &str, epoch: i64) -> bool {
        let lease = self.lease_named.is_some_and(|h| h != leader) && self.lease_epoch >= epoch;
        lease
            || self
                .pod_epochs
                .iter()
                .any(|(pod, e)| pod != leader && *e >= epoch)
    }

    /// The Lease's epoch, when it is further above [`Issued::floor`] than the operator's own
    /// writes can put it ([`MAX_UNRECORDED_EPOCHS`]). Adopting it could exhaust the range (a
    /// forged `i64::MAX`), and going back below it could repeat a token if it was real: it is
    /// neither adopted nor overwritten.
    pub fn implausible_lease_epoch(&self) -> Option<ImplausibleEpoch> {
        let floor = self.floor();
        (self.lease_epoch.saturating_sub(floor) > MAX_UNRECORDED_EPOCHS).then_some(
            ImplausibleEpoch {
                lease: self.lease_epoch,
                floor,
            },
        )
    }
}

/// The Lease's epoch jumped above the records further than the operator ever writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ImplausibleEpoch {
    /// The Lease's epoch.
    pub lease: i64,
    /// The highest token the status records or a pod carries.
    pub floor: i64,
}

/// A fencing token for the leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Token {
    /// The epoch.
    pub epoch: i64,
    /// True when this decision hands out a new token (the leader acquires the Lease now).
    pub minted: bool,
}

/// No token can be minted: the highest one issued is the largest epoch there is. Saturating
/// would hand that token to a second pod, and wrapping would hand out a lower one; either
/// breaks the fence of every resource that accepted it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Exhausted {
    /// The highest token issued.
    pub highest: i64,
}

impl Token {
    /// The token of `leader` (None: nobody is eligible), given what was `issued` so far.
    pub fn for_leader(
        leader: Option<&str>,
        paused: bool,
        issued: &Issued<'_>,
    ) -> Result<Token, Exhausted> {
        let recorded = issued.lease_epoch.max(issued.status_epoch);
        let Some(leader) = leader else {
            // Nobody leads: the epoch stays until the next leader takes the next one.
            return Ok(Token::kept(recorded));
        };
        if issued.status_leader == Some(leader)
            && issued.status_epoch >= issued.lease_epoch
            && issued.status_epoch >= issued.highest_pod_epoch
            && !issued.held_by_another(leader, issued.status_epoch)
        {
            // The status records the leader at this epoch (the Lease may be missing or behind),
            // and nothing shows another pod holding it: the status may be patched by hand.
            return Ok(Token::kept(issued.status_epoch));
        }
        if issued.lease_holder == Some(leader)
            && issued.lease_epoch > issued.status_epoch
            && issued.lease_epoch > issued.highest_pod_epoch
            && issued.inherited_epoch == 0
        {
            // Committed but never recorded (a crash between steps 1 and 2): the token was never
            // handed out, so it can be recorded now. Not so in a Lease an earlier group of the
            // name left: that group may have handed it out.
            return Ok(Token::kept(issued.lease_epoch));
        }
        if paused {
            return Ok(Token::kept(recorded));
        }
        // Above every durable record and every token a pod carries: never handed out before.
        let highest = recorded.max(issued.highest_pod_epoch);
        let epoch = highest.checked_add(1).ok_or(Exhausted { highest })?;
        Ok(Token {
            epoch,
            minted: true,
        })
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

    /// A named case: the leader chosen, whether the group is paused, what was issued, the token.
    struct Row {
        case: &'static str,
        leader: Option<&'static str>,
        paused: bool,
        issued: Issued<'static>,
        token: Token,
    }

    /// The status records `leader` at `epoch` (and no Lease exists, nor a pod with a token).
    fn status(leader: Option<&'static str>, epoch: i64) -> Issued<'static> {
        Issued {
            status_leader: leader,
            status_epoch: epoch,
            ..Issued::default()
        }
    }

    impl Issued<'static> {
        /// The Lease commits `holder` at `epoch`.
        fn lease(self, holder: Option<&'static str>, epoch: i64) -> Self {
            Issued {
                lease_holder: holder,
                lease_named: holder,
                lease_epoch: epoch,
                ..self
            }
        }

        /// The Lease names `holder`, a pod created again since (so no holder counts).
        fn lease_of_replaced(self, holder: &'static str, epoch: i64) -> Self {
            Issued {
                lease_named: Some(holder),
                ..self.lease(None, epoch)
            }
        }

        /// Each pod marked for the group carries the token given; the highest counts too.
        fn carried(self, pods: &[(&str, i64)]) -> Self {
            let owned: Vec<(String, i64)> = pods.iter().map(|(p, e)| (p.to_string(), *e)).collect();
            Issued {
                pod_epochs: Box::leak(owned.into_boxed_slice()),
                ..self.pods(pods.iter().map(|(_, e)| *e).max().unwrap_or(0))
            }
        }

        /// The Lease was left by an earlier group of the name, at its epoch.
        fn inherited(self) -> Self {
            Issued {
                inherited_epoch: self.lease_epoch,
                ..self
            }
        }

        /// A pod marked for the group carries `epoch`, the highest of them.
        fn pods(self, epoch: i64) -> Self {
            Issued {
                highest_pod_epoch: epoch,
                ..self
            }
        }
    }

    fn minted(epoch: i64) -> Token {
        Token {
            epoch,
            minted: true,
        }
    }

    fn rows() -> Vec<Row> {
        let kept = Token::kept;
        let converged = status(Some("a"), 4).lease(Some("a"), 4).pods(4);
        vec![
            Row {
                case: "first election",
                leader: Some("a"),
                paused: false,
                issued: Issued::default(),
                token: minted(1),
            },
            Row {
                case: "a group created again: above the Lease its predecessor left",
                leader: Some("a"),
                paused: false,
                issued: Issued::default().lease(None, 6).inherited(),
                token: minted(7),
            },
            Row {
                case: "a group created again: its predecessor's holder gets a new token",
                leader: Some("a"),
                paused: false,
                issued: Issued::default().lease(Some("a"), 6).inherited(),
                token: minted(7),
            },
            Row {
                case: "converged leader keeps its token",
                leader: Some("a"),
                paused: false,
                issued: converged,
                token: kept(4),
            },
            Row {
                case: "a change of leader mints the next",
                leader: Some("b"),
                paused: false,
                issued: converged,
                token: minted(5),
            },
            Row {
                case: "nobody eligible: the epoch stays",
                leader: None,
                paused: false,
                issued: status(Some("a"), 4).lease(None, 4),
                token: kept(4),
            },
            Row {
                case: "nobody eligible keeps the higher of status and Lease",
                leader: None,
                paused: false,
                issued: status(None, 3).lease(None, 5).pods(9),
                token: kept(5),
            },
            Row {
                case: "after nobody, the next leader mints the next",
                leader: Some("b"),
                paused: false,
                issued: status(None, 4).lease(None, 4).pods(4),
                token: minted(5),
            },
            Row {
                case: "Lease deleted by hand: the status restores the token",
                leader: Some("a"),
                paused: false,
                issued: status(Some("a"), 4).pods(4),
                token: kept(4),
            },
            Row {
                case: "Lease deleted by hand and another pod leads: mints above the pods",
                leader: Some("b"),
                paused: false,
                issued: status(Some("a"), 4).pods(4),
                token: minted(5),
            },
            Row {
                case: "Lease deleted by hand and a pod is above the status: mints above it",
                leader: Some("a"),
                paused: false,
                issued: status(Some("a"), 4).pods(6),
                token: minted(7),
            },
            Row {
                case: "the status restores its leader over a Lease behind it",
                leader: Some("a"),
                paused: false,
                issued: status(Some("a"), 5).lease(Some("b"), 4).pods(5),
                token: kept(5),
            },
            Row {
                case: "a status patched to name another pod at the holder's epoch: mints above",
                leader: Some("b"),
                paused: false,
                issued: status(Some("b"), 4)
                    .lease(Some("a"), 4)
                    .carried(&[("a", 4)]),
                token: minted(5),
            },
            Row {
                case: "the same, the holder created again since: its old token is still spent",
                leader: Some("b"),
                paused: false,
                issued: status(Some("b"), 4).lease_of_replaced("a", 4),
                token: minted(5),
            },
            Row {
                case: "a status patched to name another pod, no Lease: the pod's token counts",
                leader: Some("b"),
                paused: false,
                issued: status(Some("b"), 4).carried(&[("a", 4)]),
                token: minted(5),
            },
            Row {
                case: "the status's leader carrying its own token keeps it",
                leader: Some("b"),
                paused: false,
                issued: status(Some("b"), 4).carried(&[("a", 3), ("b", 4)]),
                token: kept(4),
            },
            Row {
                case: "crash between steps 1 and 2: the committed token is recorded",
                leader: Some("b"),
                paused: false,
                issued: status(Some("a"), 4).lease(Some("b"), 5).pods(4),
                token: kept(5),
            },
            Row {
                case: "committed, but a pod already carries it: mints above it",
                leader: Some("b"),
                paused: false,
                issued: status(Some("a"), 4).lease(Some("b"), 5).pods(5),
                token: minted(6),
            },
            Row {
                case: "the Lease commits another pod: mints above it",
                leader: Some("c"),
                paused: false,
                issued: status(Some("a"), 4).lease(Some("b"), 5).pods(4),
                token: minted(6),
            },
            Row {
                case: "pod annotation higher than both records: mints above it",
                leader: Some("a"),
                paused: false,
                issued: converged.pods(7),
                token: minted(8),
            },
            Row {
                case: "paused with a leader nobody recorded: no token is minted",
                leader: Some("a"),
                paused: true,
                issued: status(None, 3).lease(Some("a"), 3).pods(3),
                token: kept(3),
            },
            Row {
                case: "the same, not paused: a token is minted",
                leader: Some("a"),
                paused: false,
                issued: status(None, 3).lease(Some("a"), 3).pods(3),
                token: minted(4),
            },
            Row {
                case: "paused still restores a recorded token",
                leader: Some("a"),
                paused: true,
                issued: converged,
                token: kept(4),
            },
            Row {
                case: "paused with nobody: the epoch stays",
                leader: None,
                paused: true,
                issued: status(None, 4).lease(None, 4),
                token: kept(4),
            },
        ]
    }

    #[test]
    fn a_token_is_restored_from_a_record_or_minted_above_every_record() {
        for row in rows() {
            assert_eq!(
                Token::for_leader(row.leader, row.paused, &row.issued),
                Ok(row.token),
                "{}",
                row.case
            );
        }
    }

    #[test]
    fn a_lease_epoch_is_implausible_beyond_the_records_plus_the_unrecorded_commits() {
        let at = |status_epoch, lease_epoch, pods| {
            status(Some("a"), status_epoch)
                .lease(Some("a"), lease_epoch)
                .pods(pods)
                .implausible_lease_epoch()
        };
        let jump = MAX_UNRECORDED_EPOCHS;
        assert_eq!(at(4, 4, 4), None, "converged");
        assert_eq!(at(4, 5, 4), None, "committed, not recorded yet");
        assert_eq!(
            at(4, 4 + jump, 4),
            None,
            "the widest gap the operator leaves"
        );
        assert_eq!(
            at(4, 5 + jump, 4),
            Some(ImplausibleEpoch {
                lease: 5 + jump,
                floor: 4
            })
        );
        assert_eq!(
            at(1, i64::MAX, 1),
            Some(ImplausibleEpoch {
                lease: i64::MAX,
                floor: 1
            }),
            "a forged top of the range"
        );
        assert_eq!(
            at(1, 1 + jump * 3, 1 + jump * 2),
            None,
            "a pod's token raises the floor"
        );
        assert_eq!(at(i64::MAX - 1, i64::MAX, 0), None, "recorded near the top");
        assert_eq!(
            at(-5, i64::MAX, 0),
            Some(ImplausibleEpoch {
                lease: i64::MAX,
                floor: 0
            }),
            "no overflow below zero"
        );
        assert_eq!(at(9, -3, 9), None, "a Lease behind the records is no jump");
    }

    #[test]
    fn a_lease_epoch_behind_the_records_never_repeats_a_token() {
        for forged in [i64::MIN, -1, 0, 3] {
            let issued = status(Some("a"), 4).lease(Some("a"), forged).pods(4);
            assert_eq!(
                Token::for_leader(Some("a"), false, &issued),
                Ok(Token::kept(4)),
                "the leader keeps its recorded token over a Lease at {forged}"
            );
            assert_eq!(
                Token::for_leader(Some("b"), false, &issued),
                Ok(minted(5)),
                "the next leader gets the next token over a Lease at {forged}"
            );
        }
    }

    #[test]
    fn the_largest_epoch_is_never_handed_to_a_second_pod() {
        let top = status(Some("a"), i64::MAX).lease(Some("a"), i64::MAX);
        assert_eq!(
            Token::for_leader(Some("a"), false, &top),
            Ok(Token::kept(i64::MAX)),
            "its holder keeps it"
        );
        assert_eq!(
            Token::for_leader(Some("b"), false, &top),
            Err(Exhausted { highest: i64::MAX }),
            "nobody else gets it, and nothing wraps"
        );
        let pod_at_top = status(Some("a"), 4).lease(Some("a"), 4).pods(i64::MAX);
        assert_eq!(
            Token::for_leader(Some("b"), false, &pod_at_top),
            Err(Exhausted { highest: i64::MAX })
        );
        assert_eq!(
            Token::for_leader(Some("b"), false, &status(None, i64::MAX - 1)),
            Ok(minted(i64::MAX)),
            "the largest epoch is minted once"
        );
        assert_eq!(
            Token::for_leader(None, false, &top),
            Ok(Token::kept(i64::MAX)),
            "nobody to elect needs no token"
        );
    }
}
