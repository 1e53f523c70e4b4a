//! What flows on the data channels between subtasks.
//!
//! Data and control are two planes: these elements travel in order on the
//! bounded data channels, so a barrier never overtakes a record and is never
//! overtaken; triggers, acks and commit notices travel on the
//! Coordinator's own channels (`engine::single::coordinator`).

/// A checkpoint barrier: small and `Copy`, so that "stop with a final
/// checkpoint" is the ordinary checkpoint path with `then_stop` set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Barrier {
    pub checkpoint_id: u64,
    /// Wall-clock time of the trigger, milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The job stops after this checkpoint: sources send `EndOfStream` next.
    pub then_stop: bool,
}

/// One element on a data channel. Records travel in batches, because a
/// channel operation per record would cost more than the record's work.
#[derive(Debug, Clone, PartialEq)]
pub enum Element<T> {
    Records(Vec<T>),
    /// Event time has advanced to this watermark (ms) on this channel: no
    /// later record on it has a smaller timestamp (late ones aside).
    Watermark(i64),
    /// The channel's source went idle (true) or active again (false); an
    /// idle channel does not hold back the watermark of its readers.
    Idle(bool),
    Barrier(Barrier),
    EndOfStream,
}
