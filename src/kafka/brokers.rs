//! What weir needs of the brokers it writes transactions to.
//!
//! Kafka 3.6 added server-side checks of transactional writes (KIP-890
//! part 1, `transaction.partition.verification.enable`): before them, a
//! produce request delayed past its transaction's abort could open a new
//! transaction on the partition that nothing ever ends ("hanging"), and a
//! read_committed reader of that partition (a repartition topic in group
//! mode, a downstream consumer of a sink) stalls at its last stable offset
//! until an operator aborts it by hand. Brokers do not report their
//! version; the setting's presence is what 3.6 and later have, and its
//! value whether the checks are on.

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use tracing::{debug, warn};

use crate::config::Config;
use crate::error::{Result, WeirError};
use crate::kafka::REQUEST_TIMEOUT;

/// The broker setting whose presence marks Kafka 3.6 or later.
pub const VERIFICATION: &str = "transaction.partition.verification.enable";

/// What a broker's configuration says about transaction verification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    On,
    /// Present but set to something other than `true`.
    Off(String),
    /// Absent: the broker is older than Kafka 3.6.
    Missing,
}

/// Reads [`VERIFICATION`] out of a broker's described configuration.
pub fn verification<'a>(
    mut entries: impl Iterator<Item = (&'a str, Option<&'a str>)>,
) -> Verification {
    match entries.find(|(name, _)| *name == VERIFICATION) {
        None => Verification::Missing,
        Some((_, Some(v))) if v.eq_ignore_ascii_case("true") => Verification::On,
        Some((_, v)) => Verification::Off(v.unwrap_or("").to_string()),
    }
}

/// Each broker of the cluster and what its configuration says; a broker
/// that could not be described is left out.
pub fn brokers_verification(c: &Config) -> Result<Vec<(i32, Verification)>> {
    let admin: AdminClient<DefaultClientContext> = crate::kafka::base_config(c)
        .create()
        .map_err(|e| WeirError::kafka("create admin client", e))?;
    let ids: Vec<i32> = admin
        .inner()
        .fetch_metadata(None, REQUEST_TIMEOUT)
        .map_err(|e| WeirError::kafka("read cluster metadata", e))?
        .brokers()
        .iter()
        .map(|b| b.id())
        .collect();
    let specs: Vec<ResourceSpecifier<'_>> = ids
        .iter()
        .map(|id| ResourceSpecifier::Broker(*id))
        .collect();
    let opts = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let described = futures::executor::block_on(admin.describe_configs(&specs, &opts))
        .map_err(|e| WeirError::kafka("describe broker configs", e))?;
    let mut out = Vec::new();
    for (id, result) in ids.iter().zip(described) {
        match result {
            Ok(r) => out.push((*id, resource_verification(&r))),
            Err(e) => debug!(broker = id, error = ?e, "broker configuration not described"),
        }
    }
    Ok(out)
}

/// Warns, once at start, about every broker of the cluster that does not
/// verify transactional writes. A cluster that cannot be asked (no
/// DescribeConfigs permission, not reachable yet) is passed over in the
/// debug log: this is advice, not a gate (the brokers do not say their
/// version, and a missing permission must not stop a job).
pub fn warn_without_verification(c: &Config) {
    match brokers_verification(c) {
        Ok(brokers) => {
            for (id, v) in brokers {
                report(id, &v);
            }
        }
        Err(e) => debug!(error = %e.report(), "broker transaction-verification check skipped"),
    }
}

fn resource_verification(r: &rdkafka::admin::ConfigResource) -> Verification {
    verification(
        r.entries
            .iter()
            .map(|e| (e.name.as_str(), e.value.as_deref())),
    )
}

fn report(broker: i32, v: &Verification) {
    match v {
        Verification::On => {}
        Verification::Missing => warn!(
            broker,
            "broker {broker} is older than Apache Kafka 3.6 (it has no {VERIFICATION} setting): \
             it does not verify transactional writes, and a delayed write after an abort can \
             leave a hanging transaction that stalls read_committed readers of its partition \
             (repartition topics in group mode, consumers of the sinks). Upgrade to Kafka 3.6 \
             or later"
        ),
        Verification::Off(value) => warn!(
            broker,
            value = %value,
            "broker {broker} has {VERIFICATION} = {value:?}: it does not verify transactional \
             writes, and a delayed write after an abort can leave a hanging transaction that \
             stalls read_committed readers of its partition. Set it to true"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_without_the_setting_is_older_than_3_6() {
        let entries = [
            ("log.retention.hours", Some("168")),
            ("broker.id", Some("1")),
        ];
        assert_eq!(verification(entries.into_iter()), Verification::Missing);
    }

    #[test]
    fn the_setting_decides_whether_checks_are_on() {
        let on = [(VERIFICATION, Some("true"))];
        assert_eq!(verification(on.into_iter()), Verification::On);
        let off = [(VERIFICATION, Some("false"))];
        assert_eq!(
            verification(off.into_iter()),
            Verification::Off("false".into())
        );
    }
}
