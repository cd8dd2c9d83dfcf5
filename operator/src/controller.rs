//! The ProbeSpec controller: validate, read the spec's ProbeAttachments, roll them up into
//! `ProbeSpec.status` (server-side apply on the status subresource), emit Events on
//! condition transitions.
//!
//! The ProbeAttachments come from the store of the controller's own watch of them, not from
//! a LIST per reconciliation: on 1,000 nodes a spec has 1,000 attachments, changing several
//! times a second, and one LIST of them per change is what saturated the API server first
//! (BENCHMARKS.md, "The operator under many agents' ProbeAttachments"). The same watch
//! triggers the owners' reconciliations after the store holds the change, so a
//! reconciliation always sees the change that triggered it. A spec's status is written at
//! most once per [`MIN_STATUS_INTERVAL`]: the changes of that second are rolled up together.
//!
//! No finalizer: deleting a ProbeSpec needs no work from the operator. Its ProbeAttachments
//! carry an owner reference to it, so the API server's garbage collector deletes them, and
//! each agent detaches its probes when the ProbeSpec leaves its watch. A finalizer would
//! only add a way for deletions to hang while the operator is down or being upgraded. So a
//! ProbeSpec that is being deleted is left alone.
//!
//! A ProbeSpec with `ttlSeconds` is deleted once they are up (expiry.rs), and reconciled
//! again just after that moment.

use crate::error::Error;
use crate::expiry::{delete_expired, expiry, requeue_after, Expiry};
use crate::rollup::{reason, roll_up, transitions, READY, VALID};
use crate::server::Probes;
use crate::validation::validate;
use futures::{stream, StreamExt};
use gprobe_crds::{
    probespec_label_value, ProbeAttachment, ProbeSpec, API_VERSION, PROBESPEC_LABEL,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{self as kube_controller, trigger_owners, trigger_self, Action};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{applier, watcher, WatchStreamExt};
use kube::{Client, Resource, ResourceExt};
use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// The server-side apply field manager of the status the operator writes.
pub const FIELD_MANAGER: &str = "gprobe-operator";
/// Every ProbeSpec is reconciled at least this often, even without a watch event.
pub const REQUEUE: Duration = Duration::from_secs(5 * 60);
/// First retry delay after a failed reconciliation; it doubles with each further failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(5);
/// Longest retry delay.
pub const BACKOFF_MAX: Duration = REQUEUE;
/// A ProbeSpec's status is written at most this often: the attachment changes that arrive
/// meanwhile are rolled up together into the next write.
pub const MIN_STATUS_INTERVAL: Duration = Duration::from_secs(1);
/// How long a reconciliation waits for the ProbeAttachments' watch to have listed them once
/// (right after the controller starts) before it fails and is retried.
pub const STORE_SYNC_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest Event note the API accepts.
const MAX_EVENT_NOTE: usize = 1024;

/// What every reconciliation shares.
pub struct Context {
    pub client: Client,
    pub recorder: Recorder,
    pub probes: Arc<Probes>,
    /// Consecutive failures per ProbeSpec (`namespace/name`), for the retry backoff.
    failures: Mutex<HashMap<String, u32>>,
    /// The ProbeAttachments as the running controller's watch keeps them ([`run`] sets it).
    /// `None` (no controller running: the unit tests) lists them from the API server.
    attachments: Mutex<Option<Store<ProbeAttachment>>>,
    /// When each ProbeSpec's status was last written, for [`MIN_STATUS_INTERVAL`].
    written: Mutex<HashMap<String, Instant>>,
}

impl Context {
    /// `instance` names this replica in Events (the pod name); `None` uses the controller name.
    pub fn new(client: Client, probes: Arc<Probes>, instance: Option<String>) -> Arc<Self> {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance,
        };
        Arc::new(Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            probes,
            failures: Mutex::default(),
            attachments: Mutex::default(),
            written: Mutex::default(),
        })
    }

    fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        self.failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn written(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
        self.written.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where reconciliations read the ProbeAttachments from: a watch's store, or (`None`)
    /// a LIST from the API server.
    pub(crate) fn set_attachments(&self, store: Option<Store<ProbeAttachment>>) {
        *self.attachments.lock().unwrap_or_else(|e| e.into_inner()) = store;
    }

    fn attachments(&self) -> Option<Store<ProbeAttachment>> {
        self.attachments
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

fn key(spec: &ProbeSpec) -> String {
    format!(
        "{}/{}",
        spec.namespace().unwrap_or_default(),
        spec.name_any()
    )
}

/// The retry delay after `failures` consecutive failures (1 or more): 5s, 10s, 20s, ...,
/// at most 5 minutes.
pub fn backoff_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1 << exp).min(BACKOFF_MAX)
}

/// The current time at whole seconds: what a `metav1.Time` keeps once stored, so that a
/// status read back compares equal to the one written.
fn now() -> Time {
    let secs = Timestamp::now().as_second();
    Time(Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// Reconciles one ProbeSpec. See the module documentation.
pub async fn reconcile(spec: Arc<ProbeSpec>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let result = reconcile_at(&spec, &ctx, &now()).await;
    ctx.probes.metrics.reconciled(started.elapsed());
    if result.is_ok() {
        ctx.failures().remove(&key(&spec));
    }
    result
}

/// [`reconcile`] with the time given (tests pin it).
pub async fn reconcile_at(spec: &ProbeSpec, ctx: &Context, now: &Time) -> Result<Action, Error> {
    let name = spec.name_any();
    if spec.metadata.deletion_timestamp.is_some() {
        ctx.written().remove(&key(spec));
        debug!(probespec = %name, "being deleted: nothing to do (attachments are garbage-collected)");
        return Ok(Action::await_change());
    }
    let namespace = spec
        .namespace()
        .ok_or_else(|| Error::NoNamespace { name: name.clone() })?;
    if expiry(spec, now) == Expiry::Expired {
        delete_expired(&ctx.client, spec).await?;
        ctx.written().remove(&key(spec));
        info!(probespec = %format!("{namespace}/{name}"), "deleted: its ttlSeconds are up");
        return Ok(Action::await_change());
    }
    // Reconciled again just after it expires, if that comes before the regular requeue.
    let requeue = Action::requeue(requeue_after(spec, now, REQUEUE));

    let issues = validate(spec);
    // At most one status write per MIN_STATUS_INTERVAL: wait for the rest of it. The
    // controller runs one reconciliation of a spec at a time and merges the triggers that
    // arrive meanwhile into the next one, so the changes of this wait are read below.
    let last = ctx.written().get(&key(spec)).copied();
    if let Some(wait) = last.and_then(|t| MIN_STATUS_INTERVAL.checked_sub(t.elapsed())) {
        tokio::time::sleep(wait).await;
    }
    let mine = match ctx.attachments() {
        Some(store) => from_store(&store, &namespace, &name).await?,
        None => list_attachments(ctx, &namespace, &name).await?,
    };

    let old = spec.status.as_ref();
    let new = roll_up(spec, &issues, &mine, now);
    if old == Some(&new) {
        debug!(probespec = %name, "status up to date");
        return Ok(requeue);
    }

    let specs: Api<ProbeSpec> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = Patch::Apply(serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "ProbeSpec",
        "status": new,
    }));
    specs
        .patch_status(&name, &PatchParams::apply(FIELD_MANAGER).force(), &patch)
        .await
        .map_err(|source| Error::PatchStatus {
            namespace: namespace.clone(),
            name: name.clone(),
            source,
        })?;
    ctx.written().insert(key(spec), Instant::now());
    info!(
        probespec = %format!("{namespace}/{name}"),
        nodes = new.nodes,
        attached = new.probes_attached,
        failed = new.probes_failed,
        "status updated"
    );

    let reference = spec.object_ref(&());
    for cond in transitions(old, &new) {
        let Some(event) = event_for(cond) else {
            continue;
        };
        // An Event is a notification, not state: failing to publish one must not fail (and
        // so repeat) the reconciliation whose status is already written.
        if let Err(e) = ctx.recorder.publish(&event, &reference).await {
            warn!(probespec = %name, error = %e, reason = %event.reason, "publishing an Event");
        }
    }
    Ok(requeue)
}

/// The attachments of ProbeSpec `namespace/name` in the controller's store, once the
/// store's watch has listed them.
async fn from_store(
    store: &Store<ProbeAttachment>,
    namespace: &str,
    name: &str,
) -> Result<Vec<ProbeAttachment>, Error> {
    match tokio::time::timeout(STORE_SYNC_TIMEOUT, store.wait_until_ready()).await {
        Ok(Ok(())) => {}
        _ => {
            return Err(Error::AttachmentsNotSynced {
                namespace: namespace.to_string(),
                name: name.to_string(),
                waited: STORE_SYNC_TIMEOUT,
            })
        }
    }
    let label = probespec_label_value(name);
    Ok(store
        .state_filter(|a| {
            a.metadata.namespace.as_deref() == Some(namespace)
                && a.labels().get(PROBESPEC_LABEL) == Some(&label)
                // The label value is hashed for long names: check the spec field too.
                && a.spec.probe_spec == name
        })
        .into_iter()
        .map(|a| (*a).clone())
        .collect())
}

/// The attachments of ProbeSpec `namespace/name`, listed from the API server (when no
/// controller's watch keeps them).
async fn list_attachments(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<Vec<ProbeAttachment>, Error> {
    let attachments: Api<ProbeAttachment> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!("{PROBESPEC_LABEL}={}", probespec_label_value(name));
    let list = attachments
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|source| Error::ListAttachments {
            namespace: namespace.to_string(),
            name: name.to_string(),
            source,
        })?;
    // The label value is hashed for long names: check the spec field too.
    Ok(list
        .items
        .into_iter()
        .filter(|a| a.spec.probe_spec == name)
        .collect())
}

fn note(message: &str) -> Option<String> {
    let mut s = message.to_string();
    if s.len() > MAX_EVENT_NOTE {
        let mut cut = MAX_EVENT_NOTE - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    Some(s)
}

/// The Event announcing that `cond` now holds, if it deserves one. Ready=False because the
/// spec is invalid gets none: the Valid=False Event already says so.
pub fn event_for(cond: &Condition) -> Option<Event> {
    let (type_, action) = match (cond.type_.as_str(), cond.status.as_str()) {
        (VALID, "True") => (EventType::Normal, "Validate"),
        (VALID, _) => (EventType::Warning, "Validate"),
        (READY, _) if cond.reason == reason::INVALID_SPEC => return None,
        (READY, _) if cond.reason == reason::ATTACH_ERRORS => (EventType::Warning, "RollUp"),
        (READY, _) => (EventType::Normal, "RollUp"),
        _ => return None,
    };
    Some(Event {
        type_,
        reason: cond.reason.clone(),
        note: note(&cond.message),
        action: action.to_string(),
        secondary: None,
    })
}

/// After a failed reconciliation: count it, log it, retry with exponential backoff.
pub fn error_policy(spec: Arc<ProbeSpec>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.probes.metrics.failed(error.metric_label());
    let failures = {
        let mut f = ctx.failures();
        let n = f.entry(key(&spec)).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = backoff_delay(failures);
    warn!(probespec = %key(&spec), error = %error, failures, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Runs the controller until `stop` resolves: ProbeSpecs in `namespace` (all namespaces when
/// `None`), and the labelled ProbeAttachments they own.
///
/// This is kube's `Controller::new(specs).owns(attachments)` built from its stable parts
/// (`applier`, `trigger_self`, `trigger_owners`), so that the ProbeAttachments' watch both
/// fills the store that reconciliations read and, after that, triggers their owners
/// (`Controller::owns` keeps its watch's objects to itself; `owns_stream` needs kube's
/// unstable-runtime feature).
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<&str>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let (specs, attachments): (Api<ProbeSpec>, Api<ProbeAttachment>) = match namespace {
        Some(ns) => (
            Api::namespaced(client.clone(), ns),
            Api::namespaced(client, ns),
        ),
        None => (Api::all(client.clone()), Api::all(client)),
    };
    let (spec_store, spec_writer) = reflector::store();
    let spec_triggers = trigger_self(
        watcher(specs, watcher::Config::default())
            .default_backoff()
            .reflect(spec_writer)
            .applied_objects(),
        (),
    );
    let (attachment_store, attachment_writer) = reflector::store();
    let attachment_triggers = trigger_owners(
        watcher(
            attachments,
            watcher::Config::default().labels(PROBESPEC_LABEL),
        )
        .default_backoff()
        // The roll-up never reads them: 10,000 attachments keep about half the memory.
        .modify(|a| a.managed_fields_mut().clear())
        .reflect(attachment_writer)
        .touched_objects(),
        (),
        (),
    );
    ctx.set_attachments(Some(attachment_store));
    // Stopping ends the triggers; the applier lets running reconciliations finish.
    let queue = stream::select(spec_triggers, attachment_triggers).take_until(stop);
    applier(
        |spec, ctx| Box::pin(reconcile(spec, ctx)),
        error_policy,
        ctx.clone(),
        spec_store,
        queue,
        kube_controller::Config::default(),
    )
    .for_each(|res| async move {
        match res {
            Ok((obj, _)) => debug!(probespec = %obj, "reconciled"),
            Err(e) => warn!(error = %e, "controller"),
        }
    })
    .await;
    ctx.set_attachments(None);
}

/// Runs the controller whenever `leading` is true, until `shutdown` turns true. Losing the
/// lead stops the controller (gracefully: running reconciliations finish); winning it
/// again starts a new one.
pub async fn supervise(
    ctx: Arc<Context>,
    namespace: Option<String>,
    mut leading: watch::Receiver<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        // Wait to lead, or for shutdown.
        loop {
            if *shutdown.borrow() {
                return;
            }
            if *leading.borrow() {
                break;
            }
            tokio::select! {
                r = leading.changed() => if r.is_err() { return },
                r = shutdown.changed() => if r.is_err() { return },
            }
        }
        ctx.probes.metrics.set_leader(true);
        info!("starting the ProbeSpec controller");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (mut l, mut s) = (leading.clone(), shutdown.clone());
        let watcher = tokio::spawn(async move {
            loop {
                if !*l.borrow() || *s.borrow() {
                    break;
                }
                tokio::select! {
                    r = l.changed() => if r.is_err() { break },
                    r = s.changed() => if r.is_err() { break },
                }
            }
            let _ = stop_tx.send(());
        });
        run(ctx.clone(), namespace.as_deref(), async move {
            let _ = stop_rx.await;
        })
        .await;
        watcher.abort();
        ctx.probes.metrics.set_leader(false);
        info!("ProbeSpec controller stopped");
        if *shutdown.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_five_minutes() {
        let d: Vec<u64> = [1, 2, 3, 4, 6, 7, 100]
            .iter()
            .map(|n| backoff_delay(*n).as_secs())
            .collect();
        assert_eq!(d, [5, 10, 20, 40, 160, 300, 300]);
    }

    #[test]
    fn events_follow_the_conditions() {
        let c = |type_: &str, status: &str, reason: &str| Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: "m".repeat(2000),
            observed_generation: None,
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
        };
        let e = event_for(&c(VALID, "False", "InvalidSpec")).unwrap();
        assert_eq!(
            (e.type_, e.reason.as_str()),
            (EventType::Warning, "InvalidSpec")
        );
        assert_eq!(e.note.unwrap().len(), MAX_EVENT_NOTE);
        assert!(event_for(&c(READY, "False", "InvalidSpec")).is_none());
        let e = event_for(&c(READY, "False", "AttachErrors")).unwrap();
        assert_eq!(e.type_, EventType::Warning);
        let e = event_for(&c(READY, "True", "Attached")).unwrap();
        assert_eq!((e.type_, e.action.as_str()), (EventType::Normal, "RollUp"));
    }
}
