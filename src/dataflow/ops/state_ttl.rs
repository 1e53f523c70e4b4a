//! State TTL on event time for the operators that hold a key's state
//! without end: running aggregates (and DISTINCT, MIN/MAX with every
//! value), running top-N, deduplication, a table's normalize, OVER kept
//! current (`[pipeline] state_ttl`; Flink's `table.exec.state.ttl`).
//!
//! Flink counts its TTL in processing time; weir counts it in event time,
//! as the join's TTL does, so that a replay after a crash expires exactly
//! what the first attempt expired: a key's state goes once the watermark
//! passes the latest event time the key was written at plus the TTL. It
//! is swept on timers [`StateTtl::sweep_every`] apart (one per key and
//! sweep, not one per row), so it goes up to that much later.
//!
//! As in Flink, nothing is emitted when state goes: what the operator
//! wrote stays written, and a row of the key after that starts from
//! nothing (an aggregate counts from zero, a deduplication lets the next
//! row pass, a normalize takes the next upsert as an insert). The TTL is
//! a bound on state for keys that go quiet, traded against exactness for
//! keys that come back after it; each key that goes is counted in
//! `weir_state_expired_total`.

use crate::dataflow::operator::Context;
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;
use crate::time::NO_TIMESTAMP;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateTtl {
    /// How long (ms of event time) a key's state outlives its last write.
    pub ttl: i64,
    /// The sweep's granularity (ms): expiry timers fall on its multiples.
    pub sweep_every: i64,
}

impl StateTtl {
    /// The tag of the expiry timers.
    pub const TAG: &'static [u8] = b"ttl";

    pub fn new(ttl: i64) -> Self {
        Self {
            ttl,
            sweep_every: super::join::SWEEP_EVERY_MS,
        }
    }

    /// The table that holds each key's latest write time, for operators
    /// whose own state does not hold it.
    pub fn table() -> TableSpec {
        TableSpec::value::<i64>("ttl")
    }

    /// The sweep at which state last written at `time` has expired: the
    /// first multiple of `sweep_every` after `time + ttl`.
    pub fn due(&self, time: i64) -> i64 {
        let every = self.sweep_every.max(1);
        time.saturating_add(self.ttl)
            .div_euclid(every)
            .saturating_add(1)
            .saturating_mul(every)
    }

    /// Notes that the current key's state was written at event time `time`
    /// (kept in `table`): a later expiry, and its timer when it falls on
    /// another sweep. A row without an event time changes nothing.
    pub fn touch(&self, ctx: &mut Context, table: Table, time: i64) -> Result<()> {
        if time == NO_TIMESTAMP {
            return Ok(());
        }
        let last = ctx.get::<i64>(table)?;
        if last.is_some_and(|l| l >= time) {
            return Ok(());
        }
        ctx.put(table, &time)?;
        let due = self.due(time);
        if last.map(|l| self.due(l)) != Some(due) {
            ctx.register_timer(due, Self::TAG)?;
        }
        Ok(())
    }

    /// The current key's state went by itself (a group's last row taken
    /// back, a table's row deleted): its expiry is not counted.
    pub fn forget(&self, ctx: &mut Context, table: Table) -> Result<()> {
        ctx.delete(table)
    }

    /// An operator's timer at `time` with `tag`, when the operator may
    /// have a TTL: whether it is the TTL's and the current key's state
    /// expired ([`StateTtl::expired`]).
    pub fn fired(
        ttl: Option<StateTtl>,
        ctx: &mut Context,
        table: Table,
        tag: &[u8],
        time: i64,
    ) -> Result<bool> {
        match ttl {
            Some(ttl) if tag == Self::TAG => ttl.expired(ctx, table, time),
            _ => Ok(false),
        }
    }

    /// On an expiry timer at `time` for the current key: whether its state
    /// has expired (its entry in `table` is then gone; the operator drops
    /// the rest and counts it). False when it was written again since.
    pub fn expired(&self, ctx: &mut Context, table: Table, time: i64) -> Result<bool> {
        match ctx.get::<i64>(table)? {
            Some(last) if self.due(last) <= time => {
                ctx.delete(table)?;
                ctx.count_expired(1);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_is_due_at_the_first_sweep_after_its_time_plus_the_ttl() {
        let t = StateTtl {
            ttl: 5_000,
            sweep_every: 1_000,
        };
        assert_eq!(t.due(0), 6_000);
        assert_eq!(t.due(999), 6_000);
        assert_eq!(t.due(1_000), 7_000);
        assert_eq!(t.due(-6_000), 0);
        assert_eq!(t.due(i64::MAX), i64::MAX);
    }
}
