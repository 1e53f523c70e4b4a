//! Windows over event time: assignment and session merging.
//!
//! - [`assign`](mod@assign): the tumbling, hopping or session windows of a record.
//! - [`session`]: merging a key's sessions when a record's proto-window
//!   touches them.
//!
//! Windows are `[start, end)` in milliseconds of event time (see
//! [`crate::time`]).

pub mod assign;
pub mod session;

pub use assign::{assign, window_start, Window, WindowSpec};
pub use session::merge;
