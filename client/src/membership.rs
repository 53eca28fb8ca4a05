//! [`Membership`]: the pod's role, kept confirmed with the API server.

use std::{future::Future, sync::Arc, time::Duration};

use k8s_openapi::api::{coordination::v1::Lease, core::v1::Pod};
use kube::{Api, Client};
use tokio::{
    sync::{mpsc, watch},
    task::JoinHandle,
    time::Instant,
};

use crate::{
    Epoch,
    belief::Belief,
    error::{MembershipError, Request},
    follow::{BACKOFF_MAX, BACKOFF_MIN, Report, follow},
    lease_writes::{renew, write_note},
    publication::{Gate, Note, Publication},
    role::{LeaseMarks, PodMarks, Renewed, Role},
};

/// The environment variables [`Membership::start_from_env`] reads (set them with the downward
/// API: `fieldRef: metadata.name` and `metadata.namespace`).
pub const POD_NAME_ENV: &str = "POD_NAME";
/// See [`POD_NAME_ENV`].
pub const POD_NAMESPACE_ENV: &str = "POD_NAMESPACE";
/// Optional: the group's name; without it, the pod's `leadergroup.io/group` annotation names it.
pub const GROUP_ENV: &str = "LEADERGROUP_GROUP";
/// Optional: the pod's UID (`fieldRef: metadata.uid`). Without it, the member belongs to the
/// first incarnation of the pod it sees; with it, a process that outlived its pod (run with a
/// kubeconfig, say) never leads for a pod created again under the name, even at its start.
pub const POD_UID_ENV: &str = "POD_UID";

/// An environment variable [`Membership::start_from_env`] needs is not set.
#[derive(Debug, thiserror::Error)]
#[error(
    "environment variable {0} is not set: outside a pod, set it by hand; in a pod, set it from \
     the downward API (env: - name: {0}, valueFrom: fieldRef: fieldPath: {field})",
    field = if *.0 == POD_NAME_ENV { "metadata.name" } else { "metadata.namespace" }
)]
pub struct MissingEnv(pub &'static str);

/// The role of one pod in its LeaderGroup, kept confirmed with the API server.
///
/// It follows only its own pod and its group's Lease, with the `get` and `watch` verbs (no
/// `list`), and publishes a [`Role`] that is [`Role::Leader`] only while both agree and the API
/// server confirmed it within two thirds of the Lease duration (see [`crate::role::decide`]).
///
/// Dropping it (or [`Membership::shutdown`]) stops it; its subscribers then see
/// [`Role::Unknown`].
pub struct Membership {
    role: Arc<watch::Sender<Role>>,
    publications: Arc<watch::Sender<Publication>>,
    /// Into the core: what the consumer acted on ([`Membership::start_gated`]).
    updates: mpsc::Sender<Update>,
    errors: watch::Receiver<Option<Arc<MembershipError>>>,
    /// A third of the Lease duration last seen.
    period: watch::Receiver<Duration>,
    core: JoinHandle<()>,
}

impl std::fmt::Debug for Membership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Membership")
            .field("publication", &*self.publications.borrow())
            .finish_non_exhaustive()
    }
}

impl Membership {
    /// Starts following pod `pod` in `namespace`. `group`: the LeaderGroup's name, or `None` to
    /// read it from the pod's `leadergroup.io/group` annotation once the operator has set it.
    ///
    /// Must be called within a Tokio runtime: it spawns its tasks there.
    ///
    /// The member belongs to the first incarnation of the pod it sees (its UID): a pod created
    /// again under the name is another member's, and this one reports `Follower` for it.
    pub fn start(
        client: Client,
        namespace: impl Into<String>,
        pod: impl Into<String>,
        group: Option<String>,
    ) -> Membership {
        Membership::start_for_uid(client, namespace, pod, None, group)
    }

    /// [`Membership::start`] for the pod incarnation of UID `uid` only (when given).
    pub fn start_for_uid(
        client: Client,
        namespace: impl Into<String>,
        pod: impl Into<String>,
        uid: Option<String>,
        group: Option<String>,
    ) -> Membership {
        Membership::launch(client, namespace.into(), pod.into(), uid, group, false)
    }

    /// [`Membership::start_for_uid`] for a member whose consumer acts on each publication after
    /// it is made (the agent: its files, its command): deposed, the member says it stepped down
    /// only once the consumer has said, with [`ActedOn::publication`], that it acted on the very
    /// publication the member makes then. Until then the operator keeps the successor waiting.
    pub fn start_gated(
        client: Client,
        namespace: impl Into<String>,
        pod: impl Into<String>,
        uid: Option<String>,
        group: Option<String>,
    ) -> Membership {
        Membership::launch(client, namespace.into(), pod.into(), uid, group, true)
    }

    /// A handle that tells this member which role its consumer acted on.
    pub fn acted_on(&self) -> ActedOn {
        ActedOn(self.updates.clone())
    }

    fn launch(
        client: Client,
        namespace: String,
        pod: String,
        uid: Option<String>,
        group: Option<String>,
        gated: bool,
    ) -> Membership {
        let (role, _) = watch::channel(Role::Unknown);
        let role = Arc::new(role);
        let (publications, _) = watch::channel(Publication::initial());
        let publications = Arc::new(publications);
        let (errors_tx, errors) = watch::channel(None);
        let (mut core, updates) = Core::new(
            client,
            namespace,
            pod,
            uid,
            group,
            (Arc::clone(&role), Arc::clone(&publications)),
            errors_tx,
        );
        core.gated = gated;
        Membership {
            updates: core.updates.clone(),
            role,
            publications,
            errors,
            period: core.period.subscribe(),
            core: tokio::spawn(core.run(updates)),
        }
    }

    /// [`Membership::start`] with the pod's name and namespace from the environment
    /// ([`POD_NAME_ENV`], [`POD_NAMESPACE_ENV`]) and the group from [`GROUP_ENV`] when set.
    pub fn start_from_env(client: Client) -> Result<Membership, MissingEnv> {
        let var = |name: &'static str| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .ok_or(MissingEnv(name))
        };
        let pod = var(POD_NAME_ENV)?;
        let namespace = var(POD_NAMESPACE_ENV)?;
        Ok(Membership::start_for_uid(
            client,
            namespace,
            pod,
            var(POD_UID_ENV).ok(),
            var(GROUP_ENV).ok(),
        ))
    }

    /// The role now.
    pub fn role(&self) -> Role {
        *self.role.borrow()
    }

    /// A receiver of every change of role (the current one is marked seen or not as with any
    /// `watch::Receiver`: call `borrow_and_update` first to wait for the next change only).
    pub fn subscribe(&self) -> watch::Receiver<Role> {
        self.role.subscribe()
    }

    /// A receiver of every publication: the role with its sequence number and, while leader,
    /// the instant it lapses unless confirmed again ([`Publication::valid_until`]). A consumer in
    /// another process (the agent's files and endpoint) passes the validity on, so that its
    /// reader stops at it even when the publisher is paused; a consumer in this process pauses
    /// with the member, and [`Membership::role`] is all it needs.
    pub fn publications(&self) -> watch::Receiver<Publication> {
        self.publications.subscribe()
    }

    /// Waits until this pod leads, and returns its fencing token.
    pub async fn wait_leader(&self) -> Epoch {
        let mut rx = self.subscribe();
        loop {
            if let Some(epoch) = rx.borrow_and_update().leader_epoch() {
                return epoch;
            }
            if rx.changed().await.is_err() {
                // Unreachable while `self` is borrowed (it holds the sender); never claim to lead.
                std::future::pending::<()>().await;
            }
        }
    }

    /// A future that resolves when the leadership held now is lost: with the new role, as soon
    /// as the role is anything but the [`Role::Leader`] at the epoch of the call (Follower,
    /// Unknown, or a later epoch: a new term is a new leadership). It resolves at once when this
    /// pod does not lead now. Race the work that must stop against it:
    ///
    /// ```no_run
    /// # async fn example(membership: &leadergroup_client::Membership) {
    /// let epoch = membership.wait_leader().await;
    /// let lost = membership.leader_context();
    /// tokio::select! {
    ///     role = lost => tracing::warn!(%role, "leadership lost: work stopped"),
    ///     () = async { /* the leader's work, presenting `epoch` to every write */ } => {}
    /// }
    /// # let _ = epoch; }
    /// ```
    ///
    /// It owns what it needs (`'static`): it may outlive a borrow of the Membership and resolves
    /// with [`Role::Unknown`] when the Membership stops.
    pub fn leader_context(&self) -> impl Future<Output = Role> + Send + 'static {
        let mut rx = self.subscribe();
        let held = *rx.borrow_and_update();
        async move {
            if !held.is_leader() {
                return held;
            }
            loop {
                if rx.changed().await.is_err() {
                    return Role::Unknown;
                }
                let now = *rx.borrow_and_update();
                if now != held {
                    return now;
                }
            }
        }
    }

    /// The deadline of one fenced write ([`crate::fence::write_deadline`]) for the Lease duration
    /// last seen ([`crate::role::DEFAULT_LEASE_DURATION`] before the Lease was read): pass it to
    /// [`crate::fence::replace_fenced`] and `fence::sql::fence`.
    pub fn write_deadline(&self) -> Duration {
        crate::fence::write_deadline(*self.period.borrow() * 3)
    }

    /// The problem that keeps the role from being confirmed now, if any (cleared once the
    /// failing request succeeds again).
    pub fn last_error(&self) -> Option<Arc<MembershipError>> {
        self.errors.borrow().clone()
    }

    /// A receiver of [`Membership::last_error`]'s changes.
    pub fn errors(&self) -> watch::Receiver<Option<Arc<MembershipError>>> {
        self.errors.clone()
    }

    /// Stops following; the role turns [`Role::Unknown`] for every subscriber.
    pub fn shutdown(self) {
        drop(self);
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.role.send_replace(Role::Unknown);
        self.publications
            .send_if_modified(|p| match p.next(Role::Unknown, None) {
                Some(next) => {
                    *p = next;
                    true
                }
                None => false,
            });
        self.core.abort();
    }
}

/// Aborts its task when dropped.
struct Task(JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

enum Update {
    Pod(Report<Pod>),
    /// From the follower of this group's Lease (reports of a previous group's are ignored).
    Lease(String, Report<Lease>),
    /// A renewal of the Lease (Heartbeat mode) answered.
    Renewal(Box<RenewalOutcome>),
    /// A note written in the Lease answered: the resourceVersion it was conditional on, and the
    /// Lease as written or why not.
    Noted(Option<String>, Box<Result<Lease, MembershipError>>),
    /// The consumer acted on the publication of this sequence number ([`ActedOn`]).
    ActedOn(u64),
}

/// Tells a gated member ([`Membership::start_gated`]) which role its consumer acted on last.
#[derive(Clone, Debug)]
pub struct ActedOn(mpsc::Sender<Update>);

impl ActedOn {
    /// The consumer acted on the publication of sequence number `seq` (its files written, its
    /// command run): if that is still the member's publication and not `Leader` at the epoch it
    /// is asked to step down from, the member says it stepped down. Call it in the order the
    /// publications came.
    pub async fn publication(&self, seq: u64) {
        // Fails only once the member has stopped: nothing is owed then.
        let _ = self.0.send(Update::ActedOn(seq)).await;
    }
}

/// How a renewal of the Lease went.
struct RenewalOutcome {
    /// The epoch it renewed at.
    epoch: Epoch,
    /// When it was sent: a renewal that landed counts from then.
    sent: Instant,
    /// The resourceVersion it was conditional on.
    from_version: Option<String>,
    /// The Lease as written, or why not.
    result: Result<Lease, MembershipError>,
}

/// The renewals of the Lease in Heartbeat mode: one at a time, every third of the duration.
#[derive(Default)]
struct Renewals {
    /// The one in flight.
    in_flight: Option<Task>,
    /// The last one that landed.
    landed: Option<Renewed>,
    /// After a failure: no new attempt before this.
    retry_at: Option<Instant>,
    /// A renewal was refused (409) at this resourceVersion: the next waits for a newer Lease.
    refused_at: Option<String>,
    /// The pause after the next failure.
    backoff: Option<Duration>,
}

/// The notes this member owes the operator in the Lease (its acknowledgement as holder, its
/// step-down as predecessor): one write at a time, and one per version of the Lease unless it
/// failed for a reason a retry can fix.
#[derive(Default)]
struct Notes {
    in_flight: Option<Task>,
    /// The resourceVersion the last attempt was conditional on, and when another attempt on that
    /// same version may be made.
    tried: Option<(Option<String>, Instant)>,
}

/// The task that owns the observation and decides the role.
struct Core {
    client: Client,
    namespace: String,
    pod: String,
    /// The group given by the caller; when `None`, `group` follows the pod's annotation.
    fixed_group: Option<String>,
    group: Option<String>,
    belief: Belief,
    role: Arc<watch::Sender<Role>>,
    publications: Arc<watch::Sender<Publication>>,
    errors: watch::Sender<Option<Arc<MembershipError>>>,
    pod_error: Option<Arc<MembershipError>>,
    lease_error: Option<Arc<MembershipError>>,
    /// A third of the Lease duration, for the followers.
    period: watch::Sender<Duration>,
    updates: mpsc::Sender<Update>,
    lease_task: Option<Task>,
    /// The Lease as last seen, whole: what a renewal is conditional on.
    lease_object: Option<Lease>,
    renewals: Renewals,
    renewal_error: Option<Arc<MembershipError>>,
    notes: Notes,
    note_error: Option<Arc<MembershipError>>,
    /// Step-downs wait for the consumer ([`Membership::start_gated`]).
    gated: bool,
    /// The publication the consumer acted on last.
    acted_on: Option<u64>,
}

impl Core {
    fn new(
        client: Client,
        namespace: String,
        pod: String,
        uid: Option<String>,
        group: Option<String>,
        // What it publishes: the role, and each publication.
        (role, publications): (Arc<watch::Sender<Role>>, Arc<watch::Sender<Publication>>),
        errors: watch::Sender<Option<Arc<MembershipError>>>,
    ) -> (Core, mpsc::Receiver<Update>) {
        let belief = Belief::new(pod.clone(), member_name(), group.is_some()).of_incarnation(uid);
        let (period, _) = watch::channel(belief.observation().lease_duration / 3);
        let (updates, rx) = mpsc::channel(16);
        (
            Core {
                client,
                namespace,
                pod,
                fixed_group: group.clone(),
                group,
                belief,
                role,
                publications,
                errors,
                pod_error: None,
                lease_error: None,
                period,
                updates,
                lease_task: None,
                lease_object: None,
                renewals: Renewals::default(),
                renewal_error: None,
                notes: Notes::default(),
                note_error: None,
                gated: false,
                acted_on: None,
            },
            rx,
        )
    }
}

impl Core {
    async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let (tx, period) = (self.updates.clone(), self.period.subscribe());
        let (pod_tx, mut pod_rx) = mpsc::channel(4);
        let _pod_task = Task(tokio::spawn(follow(
            pods,
            self.pod.clone(),
            self.namespace.clone(),
            "pods",
            period,
            pod_tx,
        )));
        // Forwards the pod's reports into the one queue the core reads.
        let _forward = Task(tokio::spawn(async move {
            while let Some(report) = pod_rx.recv().await {
                if tx.send(Update::Pod(report)).await.is_err() {
                    return;
                }
            }
        }));
        if let Some(group) = self.group.clone() {
            self.follow_lease(group);
        }
        loop {
            // Only a deadline still ahead: a lapsed role is Unknown already and stays so until
            // the next update.
            let now = Instant::now();
            let lapses_at = self.belief.observation().lapses_at().filter(|t| *t > now);
            let renew_at = self.next_renewal(now);
            let note_at = self.next_note(now);
            let update = tokio::select! {
                update = updates.recv() => update,
                () = sleep_until(lapses_at) => None,
                () = sleep_until(renew_at) => {
                    self.start_renewal();
                    None
                }
                () = sleep_until(note_at) => {
                    self.start_note();
                    None
                }
            };
            if let Some(update) = update {
                self.apply(update);
            }
            self.publish();
        }
    }

    fn follow_lease(&mut self, group: String) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let (lease_tx, mut lease_rx) = mpsc::channel(4);
        let follower = tokio::spawn(follow(
            leases,
            crate::wire::lease_name_for(&group),
            self.namespace.clone(),
            "leases.coordination.k8s.io",
            self.period.subscribe(),
            lease_tx,
        ));
        let tx = self.updates.clone();
        let forward = tokio::spawn(async move {
            // The forwarder owns the follower: aborting it drops the follower too.
            let _follower = Task(follower);
            while let Some(report) = lease_rx.recv().await {
                if tx.send(Update::Lease(group.clone(), report)).await.is_err() {
                    return;
                }
            }
        });
        self.lease_task = Some(Task(forward));
    }

    fn apply(&mut self, update: Update) {
        match update {
            Update::Pod(Report::Seen { state, at }) => {
                let marks = state.as_deref().map(PodMarks::of);
                if self.fixed_group.is_none() {
                    let group = marks.as_ref().and_then(|m| m.group.clone());
                    if group != self.group {
                        tracing::info!(pod = %self.pod, ?group, "the pod's group changed");
                        self.group = group.clone();
                        self.lease_task = None;
                        self.lease_object = None;
                        self.lease_error = None;
                        self.belief.group_changed(group.is_some());
                        if let Some(group) = group {
                            self.follow_lease(group);
                        }
                    }
                }
                self.belief.pod_seen(marks, at);
                self.set_error(Source::Pod, None);
            }
            Update::Pod(Report::Failed(error)) => {
                if error.is_forbidden() {
                    self.belief.pod_refused();
                }
                self.set_error(Source::Pod, Some(error));
            }
            Update::Lease(group, report) => {
                if self.group.as_ref() != Some(&group) {
                    return;
                }
                match report {
                    Report::Seen { state, at } => {
                        let marks = state.as_deref().map(LeaseMarks::of);
                        self.lease_object = state.map(|l| *l);
                        if let Some(duration) = marks.as_ref().and_then(|m| m.duration) {
                            self.period.send_if_modified(|p| {
                                let third = duration / 3;
                                let changed = *p != third;
                                *p = third;
                                changed
                            });
                        }
                        self.belief.lease_seen(marks, at);
                        self.set_error(Source::Lease, None);
                    }
                    Report::Failed(error) => {
                        if error.is_forbidden() {
                            self.belief.lease_refused();
                        }
                        self.set_error(Source::Lease, Some(error));
                    }
                }
            }
            Update::Renewal(outcome) => self.renewal_answered(*outcome),
            Update::Noted(from_version, result) => self.note_answered(from_version, *result),
            Update::ActedOn(seq) => self.acted_on = Some(seq),
        }
    }

    /// The note owed ([`Belief::note_owed`]), with the Lease to write it in.
    fn note_owed(&self, now: Instant) -> Option<(Note, &Lease)> {
        let gate = self.gated.then(|| Gate {
            published: *self.publications.borrow(),
            acted: self.acted_on,
        });
        let note = self.belief.note_owed(gate.as_ref(), now)?;
        Some((note, self.lease_object.as_ref()?))
    }

    /// When to write the note owed: at once, or after a failed attempt on this same version of
    /// the Lease, when that allows.
    fn next_note(&self, now: Instant) -> Option<Instant> {
        if self.notes.in_flight.is_some() {
            return None;
        }
        let (_, lease) = self.note_owed(now)?;
        match &self.notes.tried {
            Some((version, retry_at)) if *version == lease.metadata.resource_version => {
                Some(*retry_at)
            }
            _ => Some(now),
        }
    }

    fn start_note(&mut self) {
        let Some((note, lease)) = self.note_owed(Instant::now()) else {
            return;
        };
        let (lease, from_version, api, request) = self.lease_write(lease);
        let limit = *self.period.borrow();
        let updates = self.updates.clone();
        let member = self.belief.member().to_owned();
        tracing::info!(pod = %self.pod, %member, ?note, "writing in the Lease");
        self.notes.in_flight = Some(Task(tokio::spawn(async move {
            let result = write_note(api, lease, note, &member, limit, request).await;
            let _ = updates
                .send(Update::Noted(from_version, Box::new(result)))
                .await;
        })));
    }

    fn note_answered(
        &mut self,
        from_version: Option<String>,
        result: Result<Lease, MembershipError>,
    ) {
        self.notes.in_flight = None;
        let now = Instant::now();
        // Written, or the Lease changed since it was read (a newer version decides again), or
        // refused for good: not again on this version. Anything else: again after a pause.
        let retry_at = match &result {
            Err(e) if !e.is_conflict() && !e.is_forbidden() => now + BACKOFF_MAX,
            _ => now + Duration::from_secs(3600),
        };
        self.notes.tried = Some((from_version, retry_at));
        let error = result.err().filter(|e| !e.is_conflict()).map(Arc::new);
        self.set_error(Source::Note, error);
    }

    /// The epoch and the Lease to renew, when both the pod's marks and the Lease say this pod
    /// leads and the Lease asks it to renew.
    fn renewable(&self) -> Option<(Epoch, &Lease)> {
        let epoch = self.belief.observation().renewal_owed(&self.pod)?;
        Some((epoch, self.lease_object.as_ref()?))
    }

    /// When the next renewal is due: at once for a new epoch, a third of the duration after the
    /// last one that landed, later after a failure; none while one is in flight, or after a 409
    /// until a newer Lease is seen.
    fn next_renewal(&self, now: Instant) -> Option<Instant> {
        if self.renewals.in_flight.is_some() {
            return None;
        }
        let (epoch, lease) = self.renewable()?;
        if self.renewals.refused_at.is_some()
            && lease.metadata.resource_version == self.renewals.refused_at
        {
            return None;
        }
        let due = match self.renewals.landed {
            Some(r) if r.epoch == epoch => r.at + *self.period.borrow(),
            _ => now,
        };
        Some(self.renewals.retry_at.map_or(due, |retry| retry.max(due)))
    }

    /// What a write of `lease` (as last seen) needs: the Lease, the resourceVersion the write is
    /// conditional on, the API and the request, for errors.
    fn lease_write(&self, lease: &Lease) -> (Lease, Option<String>, Api<Lease>, Request) {
        let request = Request {
            verb: "update",
            resource: "leases.coordination.k8s.io",
            name: lease.metadata.name.clone().unwrap_or_default(),
            namespace: self.namespace.clone(),
        };
        let api = Api::namespaced(self.client.clone(), &self.namespace);
        (
            lease.clone(),
            lease.metadata.resource_version.clone(),
            api,
            request,
        )
    }

    fn start_renewal(&mut self) {
        let Some((epoch, lease)) = self.renewable() else {
            return;
        };
        let (lease, from_version, api, request) = self.lease_write(lease);
        let limit = *self.period.borrow();
        let updates = self.updates.clone();
        let sent = Instant::now();
        let member = self.belief.member().to_owned();
        self.renewals.in_flight = Some(Task(tokio::spawn(async move {
            let result = renew(api, lease, &member, limit, request).await;
            let outcome = RenewalOutcome {
                epoch,
                sent,
                from_version,
                result,
            };
            let _ = updates.send(Update::Renewal(Box::new(outcome))).await;
        })));
    }

    fn renewal_answered(&mut self, outcome: RenewalOutcome) {
        self.renewals.in_flight = None;
        match outcome.result {
            Ok(written) => {
                let landed = Renewed {
                    epoch: outcome.epoch,
                    at: outcome.sent,
                };
                self.renewals.landed = Some(landed);
                self.renewals.retry_at = None;
                self.renewals.backoff = None;
                self.belief.renewal_landed(outcome.epoch, outcome.sent);
                // The next renewal is conditional on this write, unless the watch already showed
                // a newer one.
                let current = self
                    .lease_object
                    .as_ref()
                    .and_then(|l| l.metadata.resource_version.clone());
                if current == outcome.from_version {
                    self.lease_object = Some(written);
                }
                self.set_error(Source::Renewal, None);
            }
            Err(error) => {
                if error.is_conflict() {
                    self.renewals.refused_at = outcome.from_version;
                    tracing::info!(pod = %self.pod, epoch = %outcome.epoch, "renewal refused: the Lease changed since it was read");
                } else {
                    let pause = if error.is_forbidden() {
                        BACKOFF_MAX
                    } else {
                        self.renewals.backoff.unwrap_or(BACKOFF_MIN)
                    };
                    self.renewals.retry_at = Some(Instant::now() + pause);
                    self.renewals.backoff = Some((pause * 2).min(BACKOFF_MAX));
                }
                self.set_error(Source::Renewal, Some(Arc::new(error)));
            }
        }
    }

    fn set_error(&mut self, source: Source, error: Option<Arc<MembershipError>>) {
        let slot = match source {
            Source::Pod => &mut self.pod_error,
            Source::Lease => &mut self.lease_error,
            Source::Renewal => &mut self.renewal_error,
            Source::Note => &mut self.note_error,
        };
        let same = match (slot.as_ref(), error.as_ref()) {
            (None, None) => true,
            (Some(a), Some(b)) => a.to_string() == b.to_string(),
            _ => false,
        };
        if !same {
            match &error {
                Some(e) if e.is_forbidden() => tracing::error!(pod = %self.pod, "{e}"),
                Some(e) => tracing::warn!(pod = %self.pod, "{e}"),
                None => {
                    tracing::info!(pod = %self.pod, request = ?slot.as_ref().map(|e| e.request().to_string()), "the request succeeds again")
                }
            }
        }
        *slot = error;
        let current = self
            .pod_error
            .clone()
            .or_else(|| self.lease_error.clone())
            .or_else(|| self.renewal_error.clone())
            .or_else(|| self.note_error.clone());
        self.errors.send_if_modified(|e| {
            let changed = match (e.as_ref(), current.as_ref()) {
                (None, None) => false,
                (Some(a), Some(b)) => !Arc::ptr_eq(a, b),
                _ => true,
            };
            *e = current;
            changed
        });
    }

    fn publish(&self) {
        let role = self.belief.role(Instant::now());
        // The publication first: a consumer of both never sees a role its publications lack.
        let lapses_at = self.belief.observation().lapses_at();
        self.publications
            .send_if_modified(|p| match p.next(role, lapses_at) {
                Some(next) => {
                    *p = next;
                    true
                }
                None => false,
            });
        self.role.send_if_modified(|r| {
            if *r == role {
                return false;
            }
            tracing::info!(pod = %self.pod, group = ?self.group, from = %r, to = %role, "role changed");
            *r = role;
            true
        });
    }
}

#[derive(Clone, Copy)]
enum Source {
    Pod,
    Lease,
    Renewal,
    Note,
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// A name of this process among its pod's members, random: two processes of one pod (an agent
/// and the application's own `Membership`) never share one, so the operator waits for each.
fn member_name() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    format!("m{:016x}", hasher.finish())
}
