//! `TopN`: ROW_NUMBER() OVER (PARTITION BY ... ORDER BY ...) filtered by
//! its rank: the first N rows of each partition.

use super::{describe_ttl, names, Rel};
use crate::dataflow::ops::state_ttl::StateTtl;
use crate::dataflow::ops::top_n::TopNSpec;
use crate::dataflow::prelude::*;

pub struct TopN {
    pub partition: Vec<usize>,
    pub spec: TopNSpec,
    /// The rank's column name.
    pub rank_as: String,
    /// A running top-N's (a window's state goes when it fires).
    pub ttl: Option<StateTtl>,
}

impl TopN {
    pub fn describe(&self, input: &Rel) -> String {
        let order: Vec<String> = self
            .spec
            .order
            .iter()
            .map(|k| {
                format!(
                    "{}{}",
                    names(&input.columns, &[k.column]),
                    if k.descending { " DESC" } else { "" }
                )
            })
            .collect();
        format!(
            "TopN {} by ({}) order by ({}){}{}",
            self.spec.limit,
            names(&input.columns, &self.partition),
            order.join(", "),
            match (self.spec.window_end, self.spec.retract) {
                (Some(_), _) => ", per window",
                (None, true) => ", every row kept",
                (None, false) => "",
            },
            describe_ttl(&self.ttl)
        )
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        input
            .key_by_indexes(self.partition.clone())
            .with_state_ttl(self.ttl)
            .top_n(uid, self.spec.clone(), &self.rank_as)
    }
}
