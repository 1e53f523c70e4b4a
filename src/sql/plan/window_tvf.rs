//! `WindowTvf`: a window table function's rows, `TABLE(TUMBLE(TABLE t,
//! DESCRIPTOR(ts), size))` read without a GROUP BY: each row once per
//! window it falls in, with `window_start`, `window_end` and
//! `window_time` (the window's last millisecond) after its columns, as
//! Flink's window TVFs give them. A top-N or a join over these rows that
//! names the window is bounded by it.

use crate::dataflow::prelude::*;
use crate::window::assign::assign;

pub struct WindowTvf {
    pub spec: WindowSpec,
    /// The event-time column the windows are over.
    pub time: usize,
    pub schema: Schema,
}

impl WindowTvf {
    pub fn describe(&self) -> String {
        format!("WindowTvf {:?}", self.spec)
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let (spec, time) = (self.spec, self.time);
        input.flat_map(uid, self.schema.clone(), move |v, emit| {
            let Value::Timestamp(ts) = v[time] else {
                return; // No event time: in no window.
            };
            for w in assign(&spec, ts) {
                let mut row = Vec::with_capacity(v.len() + 4);
                row.extend_from_slice(v);
                row.push(Value::Timestamp(w.start));
                row.push(Value::Timestamp(w.end));
                row.push(Value::Timestamp(w.max_timestamp()));
                emit(row);
            }
        })
    }
}
