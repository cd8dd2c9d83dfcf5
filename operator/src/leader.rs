//! Leader election on a `coordination.k8s.io/v1` Lease, so that only one of several operator
//! replicas runs the controller.
//!
//! The Lease names its holder and when the holder last renewed it. A candidate takes the
//! Lease when it does not exist, when it has no holder, or when its holder has not renewed
//! it for `leaseDurationSeconds`; the holder renews it every few seconds. Every write is a
//! create or a replace carrying the `resourceVersion` that was read, so of two candidates
//! racing for the same Lease only one wins (the other gets 409 Conflict).
//!
//! Expiry compares the Lease's `renewTime` with this machine's clock, so it assumes the
//! replicas' clocks agree to well within the lease duration (NTP-synchronized nodes do).

use crate::error::LeaseError;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::Client;
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

/// How long a Lease stays valid without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the holder renews it (and a candidate retries).
pub const RENEW_PERIOD: Duration = Duration::from_secs(5);
/// How long the holder keeps leading while renewals fail with errors (not with conflicts,
/// which mean someone else holds the Lease): less than [`LEASE_DURATION`], so that it stops
/// before another replica may take over.
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// One candidate's handle on one Lease.
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    duration: Duration,
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaseLock {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            duration: LEASE_DURATION,
        }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn err(&self, action: &'static str) -> impl FnOnce(kube::Error) -> LeaseError + '_ {
        move |source| LeaseError::Api {
            action,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Whether a Lease held by someone else is free to take at `now`.
    fn expired(&self, spec: &LeaseSpec, now: Timestamp) -> bool {
        let holder = spec.holder_identity.as_deref().unwrap_or("");
        if holder.is_empty() {
            return true;
        }
        let Some(renewed) = spec.renew_time.as_ref().or(spec.acquire_time.as_ref()) else {
            return true;
        };
        let secs = spec
            .lease_duration_seconds
            .unwrap_or_else(|| self.duration_secs());
        renewed.0 + SignedDuration::from_secs(i64::from(secs)) < now
    }

    /// Takes or renews the Lease at `now`. `Ok(true)`: this candidate holds it until
    /// `now + 15s`. `Ok(false)`: someone else holds it, or won a race for it.
    pub async fn try_acquire_or_renew(&self, now: Timestamp) -> Result<bool, LeaseError> {
        let current = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(self.err("get"))?;
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    namespace: Some(self.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(e) if is_conflict(&e) => Ok(false),
                Err(e) => Err(self.err("create")(e)),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        if !mine {
            if !self.expired(spec, now) {
                return Ok(false);
            }
            spec.holder_identity = Some(self.identity.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(self.duration_secs());
        // `lease` carries the resourceVersion that was read: a replace after someone else's
        // write fails with 409 Conflict instead of overwriting it.
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(self.err(if mine { "renew" } else { "take over" })(e)),
        }
    }

    /// Gives the Lease up, if this candidate holds it, so that another replica can take it
    /// at once instead of waiting for it to expire.
    pub async fn release(&self) -> Result<(), LeaseError> {
        let Some(mut lease) = self
            .api
            .get_opt(&self.name)
            .await
            .map_err(self.err("get"))?
        else {
            return Ok(());
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(());
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(());
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_conflict(&e) => Ok(()),
            Err(e) => Err(self.err("release")(e)),
        }
    }
}

/// Campaigns for the Lease until `stop` turns true, publishing on `leading` whether this
/// replica leads. Leadership ends when a renewal finds the Lease taken, or when renewals
/// have failed with errors for [`RENEW_DEADLINE`]. On stop, releases the Lease if held:
/// stop the controller first, then this.
pub async fn campaign(
    lock: LeaseLock,
    leading: watch::Sender<bool>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last_renew: Option<tokio::time::Instant> = None;
    loop {
        if *stop.borrow() {
            break;
        }
        let was_leading = *leading.borrow();
        match lock.try_acquire_or_renew(Timestamp::now()).await {
            Ok(true) => {
                last_renew = Some(tokio::time::Instant::now());
                if !was_leading {
                    info!(identity = lock.identity(), "acquired the lease: leading");
                    leading.send_replace(true);
                }
            }
            Ok(false) => {
                if was_leading {
                    warn!(
                        identity = lock.identity(),
                        "lost the lease to another replica: stopping the controller"
                    );
                    leading.send_replace(false);
                }
            }
            Err(e) => {
                warn!(error = %e, "leader election");
                let overdue = last_renew.is_none_or(|t| t.elapsed() >= RENEW_DEADLINE);
                if was_leading && overdue {
                    warn!("could not renew the lease in time: stopping the controller");
                    leading.send_replace(false);
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RENEW_PERIOD) => {}
            changed = stop.changed() => {
                if changed.is_err() {
                    break; // the stop sender is gone: nobody can stop us any more
                }
            }
        }
    }
    if *leading.borrow() {
        leading.send_replace(false);
    }
    match lock.release().await {
        Ok(()) => info!("released the lease"),
        Err(e) => warn!(error = %e, "releasing the lease"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::{mock_client, status_error, verified, Step};
    use http::{Method, StatusCode};
    use serde_json::{json, Value};

    const NS: &str = "gprobe";
    const ME: &str = "operator-0";
    const LEASE: &str = "/apis/coordination.k8s.io/v1/namespaces/gprobe/leases/gprobe-operator";
    const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/gprobe/leases";

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + secs).unwrap()
    }

    fn lease(holder: Option<&str>, renewed: Timestamp, transitions: i32) -> Value {
        let spec = LeaseSpec {
            holder_identity: holder.map(Into::into),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(at(-100))),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        };
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "gprobe-operator", "namespace": NS, "resourceVersion": "42"},
               "spec": spec})
    }

    fn micro(t: Timestamp) -> Value {
        serde_json::to_value(MicroTime(t)).unwrap()
    }

    #[tokio::test]
    async fn acquires_a_lease_that_does_not_exist() {
        let (client, api) = mock_client();
        let server = api.run(vec![
            Step::new(Method::GET, LEASE)
                .reply(StatusCode::NOT_FOUND, status_error(404, "NotFound")),
            Step::new(Method::POST, LEASES).created(),
        ]);
        let lock = LeaseLock::new(client, NS, "gprobe-operator", ME);
        assert!(lock.try_acquire_or_renew(at(0)).await.unwrap());
        drop(lock);
        let seen = verified(server).await;
        let spec = &seen[1].body["spec"];
        assert_eq!(spec["holderIdentity"], ME);
        assert_eq!(spec["leaseDurationSeconds"], 15);
        assert_eq!(spec["renewTime"], micro(at(0)));
        assert_eq!(spec["leaseTransitions"], 0);
        assert_eq!(seen[1].body["metadata"]["name"], "gprobe-operator");
    }

    #[tokio::test]
    async fn does_not_take_a_fresh_lease_held_by_another() {
        let (client, api) = mock_client();
        let server = api.run(vec![Step::new(Method::GET, LEASE).ok(lease(
            Some("operator-1"),
            at(-3),
            1,
        ))]);
        let lock = LeaseLock::new(client, NS, "gprobe-operator", ME);
        assert!(!lock.try_acquire_or_renew(at(0)).await.unwrap());
        drop(lock);
        // No write followed the read.
        assert_eq!(verified(server).await.len(), 1);
    }

    #[tokio::test]
    async fn takes_over_an_expired_lease_with_optimistic_concurrency() {
        let (client, api) = mock_client();
        let server = api.run(vec![
            Step::new(Method::GET, LEASE).ok(lease(Some("operator-1"), at(-16), 1)),
            Step::new(Method::PUT, LEASE),
        ]);
        let lock = LeaseLock::new(client, NS, "gprobe-operator", ME);
        assert!(lock.try_acquire_or_renew(at(0)).await.unwrap());
        drop(lock);
        let seen = verified(server).await;
        let body = &seen[1].body;
        assert_eq!(
            body["metadata"]["resourceVersion"], "42",
            "the replace is conditional"
        );
        assert_eq!(body["spec"]["holderIdentity"], ME);
        assert_eq!(body["spec"]["leaseTransitions"], 2);
        assert_eq!(body["spec"]["acquireTime"], micro(at(0)));
        assert_eq!(body["spec"]["renewTime"], micro(at(0)));
    }

    #[tokio::test]
    async fn losing_the_race_for_an_expired_lease_is_not_an_error() {
        let (client, api) = mock_client();
        let server = api.run(vec![
            Step::new(Method::GET, LEASE).ok(lease(None, at(-1), 1)),
            Step::new(Method::PUT, LEASE)
                .reply(StatusCode::CONFLICT, status_error(409, "Conflict")),
        ]);
        let lock = LeaseLock::new(client, NS, "gprobe-operator", ME);
        assert!(!lock.try_acquire_or_renew(at(0)).await.unwrap());
        drop(lock);
        verified(server).await;
    }

    #[tokio::test]
    async fn renews_its_own_lease() {
        let (client, api) = mock_client();
        let server = api.run(vec![
            Step::new(Method::GET, LEASE).ok(lease(Some(ME), at(-5), 3)),
            Step::new(Method::PUT, LEASE),
        ]);
        let lock = LeaseLock::new(client, NS, "gprobe-operator", ME);
        assert!(lock.try_acquire_or_renew(at(0)).await.unwrap());
        drop(lock);
        let seen = verified(server).await;
        let spec = &seen[1].body["spec"];
        assert_eq!(spec["holderIdentity"], ME);
        assert_eq!(spec["renewTime"], micro(at(0)));
        assert_eq!(
            spec["acquireTime"],
            micro(at(-100)),
            "renewal keeps the acquire time"
        );
        assert_eq!(spec["leaseTransitions"], 3, "renewal is no transition");
    }

    #[tokio::test]
    async fn campaign_leads_then_releases_on_stop() {
        let (client, api) = mock_client();
        let server = api.run(vec![
            Step::new(Method::GET, LEASE)
                .reply(StatusCode::NOT_FOUND, status_error(404, "NotFound")),
            Step::new(Method::POST, LEASES).created(),
            Step::new(Method::GET, LEASE).ok(lease(Some(ME), at(0), 0)),
            Step::new(Method::PUT, LEASE),
        ]);
        let (leading_tx, mut leading) = watch::channel(false);
        let (stop_tx, stop) = watch::channel(false);
        let lock = LeaseLock::new(client, NS, "gprobe-operator", ME);
        let task = tokio::spawn(campaign(lock, leading_tx, stop));
        leading.wait_for(|l| *l).await.unwrap();
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert!(!*leading.borrow(), "not leading after stop");
        let seen = verified(server).await;
        let released = &seen[3].body["spec"];
        assert!(
            released.get("holderIdentity").is_none_or(Value::is_null),
            "{released}"
        );
        assert_eq!(released["leaseDurationSeconds"], 1);
    }

    /// Paused time: the renewal after [`RENEW_PERIOD`] comes at once.
    #[tokio::test(start_paused = true)]
    async fn campaign_stops_leading_when_another_replica_holds_the_lease() {
        let (client, api) = mock_client();
        // Renewed by operator-1 "now" (wall clock): fresh for 15 more seconds.
        let theirs = lease(Some("operator-1"), Timestamp::now(), 1);
        let server = api.run(vec![
            Step::new(Method::GET, LEASE)
                .reply(StatusCode::NOT_FOUND, status_error(404, "NotFound")),
            Step::new(Method::POST, LEASES).created(),
            Step::new(Method::GET, LEASE).ok(theirs.clone()),
            // Release on stop reads the Lease, sees it is not ours, and writes nothing.
            Step::new(Method::GET, LEASE).ok(theirs),
        ]);
        let (leading_tx, mut leading) = watch::channel(false);
        let (stop_tx, stop) = watch::channel(false);
        let lock = LeaseLock::new(client, NS, "gprobe-operator", ME);
        let task = tokio::spawn(campaign(lock, leading_tx, stop));
        leading.wait_for(|l| *l).await.unwrap();
        leading.wait_for(|l| !*l).await.unwrap();
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        assert_eq!(verified(server).await.len(), 4);
    }
}
