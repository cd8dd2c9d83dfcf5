//! `spec.ttlSeconds`: the operator deletes a ProbeSpec once it has lived that long, so an
//! ad-hoc trace ends even when whoever started it is gone (its `kubectl gprobe` killed, the
//! laptop closed). The deadline is counted from `metadata.creationTimestamp`, which the API
//! server sets: no client clock takes part.

use crate::error::Error;
use gprobe_crds::ProbeSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::{Client, ResourceExt};
use std::time::Duration;

/// When a ProbeSpec expires, seen at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No `ttlSeconds` (or no creation time yet): it stays until deleted.
    Never,
    /// It expires after this much more time.
    In(Duration),
    /// Its time is up: delete it.
    Expired,
}

/// Whether `spec` has expired at `now`.
pub fn expiry(spec: &ProbeSpec, now: &Time) -> Expiry {
    let (Some(ttl), Some(created)) = (
        spec.spec.ttl_seconds,
        spec.metadata.creation_timestamp.as_ref(),
    ) else {
        return Expiry::Never;
    };
    let lived_ms = now.0.as_millisecond() - created.0.as_millisecond();
    let left_ms = i64::from(ttl) * 1000 - lived_ms;
    if left_ms <= 0 {
        Expiry::Expired
    } else {
        Expiry::In(Duration::from_millis(left_ms as u64))
    }
}

/// The next reconciliation's delay: `regular`, or sooner if the spec expires before.
pub fn requeue_after(spec: &ProbeSpec, now: &Time, regular: Duration) -> Duration {
    match expiry(spec, now) {
        // A moment after the deadline: `now` is kept at whole seconds (controller::now).
        Expiry::In(left) => regular.min(left + Duration::from_secs(1)),
        Expiry::Never | Expiry::Expired => regular,
    }
}

/// Deletes the expired `spec`, only the very object seen (its uid): a spec created again
/// under the same name meanwhile is another trace. Already gone is done.
pub async fn delete_expired(client: &Client, spec: &ProbeSpec) -> Result<(), Error> {
    let namespace = spec.namespace().unwrap_or_default();
    let name = spec.name_any();
    let api: Api<ProbeSpec> = Api::namespaced(client.clone(), &namespace);
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: spec.uid(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        // 404: deleted meanwhile; 409: the uid differs, the name holds a new spec.
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(source) => Err(Error::DeleteExpired {
            namespace,
            name,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gprobe_crds::load_specs;
    use k8s_openapi::jiff::Timestamp;

    fn spec(ttl: Option<u32>, created: Option<i64>) -> ProbeSpec {
        let ttl = ttl
            .map(|t| format!("\n  ttlSeconds: {t}"))
            .unwrap_or_default();
        let text = format!(
            "apiVersion: gprobe.dev/v1alpha1\nkind: ProbeSpec\nmetadata: {{name: t, namespace: \
             shop}}\nspec:\n  selector: {{images: [x]}}\n  probes: [{{symbol: main.f}}]{ttl}\n"
        );
        let mut s = load_specs(&text, "t.yaml").unwrap().remove(0);
        s.metadata.creation_timestamp = created.map(|c| Time(Timestamp::from_second(c).unwrap()));
        s
    }

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    #[test]
    fn a_spec_expires_ttl_seconds_after_its_creation() {
        let s = spec(Some(30), Some(1_000));
        assert_eq!(expiry(&s, &at(1_000)), Expiry::In(Duration::from_secs(30)));
        assert_eq!(expiry(&s, &at(1_029)), Expiry::In(Duration::from_secs(1)));
        assert_eq!(expiry(&s, &at(1_030)), Expiry::Expired);
        assert_eq!(expiry(&s, &at(5_000)), Expiry::Expired);
    }

    #[test]
    fn without_ttl_or_creation_time_it_never_expires() {
        assert_eq!(
            expiry(&spec(None, Some(1_000)), &at(9_999_999)),
            Expiry::Never
        );
        assert_eq!(expiry(&spec(Some(1), None), &at(9_999_999)), Expiry::Never);
    }

    #[test]
    fn the_next_reconciliation_comes_just_after_the_expiry() {
        let regular = Duration::from_secs(300);
        let s = spec(Some(30), Some(1_000));
        assert_eq!(
            requeue_after(&s, &at(1_010), regular),
            Duration::from_secs(21)
        );
        let long = spec(Some(3_600), Some(1_000));
        assert_eq!(requeue_after(&long, &at(1_010), regular), regular);
        assert_eq!(
            requeue_after(&spec(None, Some(1)), &at(5), regular),
            regular
        );
    }
}
