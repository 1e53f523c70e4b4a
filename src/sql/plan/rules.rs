//! Rewrite rules over the bound plan, before it is lowered (`weir explain`
//! prints what they leave). The binder already does what needs the
//! parsed SQL: it folds constants (a WHERE that is TRUE whatever the row
//! makes no node), pushes a join's one-sided conjuncts below it, and
//! picks each sink's upsert key. What is left for rules is what only the
//! whole plan shows, chains of stateless nodes that several clauses (a
//! view's SELECT, then the query's; a WHERE, then a HAVING) put one after
//! another:
//!
//! - **merge filters**: a Filter read only by a Filter is one Filter, the
//!   two predicates both TRUE;
//! - **merge projections**: a Project read only by a Project is one map,
//!   the first's columns computed once per row and the second's over
//!   them; a column the second copies is the first's column;
//! - **drop identity projections**: a Project that copies its input's
//!   columns as they are (names and order) is no node.
//!
//! Each merged node keeps the uid of the later node (what the nodes after
//! it, and its metrics, name); the earlier node's uid goes. A restore
//! ignores stateless transforms that come or go
//! ([`crate::checkpoint::metadata::Topology::uid_difference`]), so a plan
//! these rules change still restores a checkpoint of the plan before.

use std::sync::Arc;

use super::filter::Filter;
use super::on_failure::OnFunctionFailure;
use super::project::Project;
use super::{LogicalPlan, Node, NodeId, Op, Rel};
use crate::dataflow::row::Value;

/// The plan after the rules.
pub fn rewrite(plan: LogicalPlan) -> LogicalPlan {
    merge_chains(drop_identities(plan))
}

/// `plan` without its identity projections: their readers read what
/// they read.
fn drop_identities(plan: LogicalPlan) -> LogicalPlan {
    let mut out = LogicalPlan::default();
    // Each node's id in `out` (a dropped node: the id of what it read).
    let mut moved: Vec<NodeId> = Vec::with_capacity(plan.nodes.len());
    for node in plan.nodes {
        let inputs: Vec<NodeId> = node.inputs.iter().map(|i| moved[*i]).collect();
        if let (Op::Project(p), [i]) = (&node.op, inputs.as_slice()) {
            if is_identity(p, &out.nodes[*i].rel) {
                moved.push(*i);
                continue;
            }
        }
        moved.push(push(&mut out, Node { inputs, ..node }));
    }
    out
}

/// `plan` with each Filter read only by a Filter merged into it, and each
/// Project read only by a Project.
fn merge_chains(plan: LogicalPlan) -> LogicalPlan {
    let mut readers = vec![0usize; plan.nodes.len()];
    for n in &plan.nodes {
        for i in &n.inputs {
            readers[*i] += 1;
        }
    }
    let mut out = LogicalPlan::default();
    let mut moved: Vec<NodeId> = Vec::with_capacity(plan.nodes.len());
    for node in plan.nodes {
        let inputs: Vec<NodeId> = node.inputs.iter().map(|i| moved[*i]).collect();
        // The node read is read by this one alone (a merged chain's
        // readers are its last node's).
        let alone = matches!(node.inputs.as_slice(), [i] if readers[*i] == 1);
        let below = inputs.first().copied();
        let mergeable = alone
            && below.is_some_and(|b| {
                matches!(
                    (&out.nodes[b].op, &node.op),
                    (Op::Filter(_), Op::Filter(_)) | (Op::Project(_), Op::Project(_))
                )
            });
        if !mergeable {
            moved.push(push(&mut out, Node { inputs, ..node }));
            continue;
        }
        let below = below.expect("a single input");
        let target = &mut out.nodes[below];
        let lower = std::mem::replace(&mut target.op, taken());
        target.op = match (lower, node.op) {
            (Op::Filter(a), Op::Filter(b)) => Op::Filter(merge_filters(a, b)),
            (Op::Project(a), Op::Project(b)) => Op::Project(merge_projections(a, b)),
            _ => unreachable!("checked above"),
        };
        target.uid = node.uid;
        target.rel = Rel {
            node: below,
            ..node.rel
        };
        moved.push(below);
    }
    out
}

/// Adds `node` to `plan`; returns its id.
fn push(plan: &mut LogicalPlan, node: Node) -> NodeId {
    let id = plan.nodes.len();
    plan.nodes.push(Node {
        rel: Rel {
            node: id,
            ..node.rel
        },
        ..node
    });
    id
}

/// What a node holds for the moment its op is being merged.
fn taken() -> Op {
    Op::Union(super::union::Union)
}

fn merge_filters(a: Filter, b: Filter) -> Filter {
    let (p, q) = (a.predicate, b.predicate);
    Filter {
        text: format!("{} AND {}", a.text, b.text),
        // SQL's WHERE keeps a row when the predicate is TRUE: both must be
        // (an error in either drops the row, as it did in its own node).
        predicate: Arc::new(move |v: &[Value]| match p(v)? {
            Value::Bool(true) => q(v),
            _ => Ok(Value::Bool(false)),
        }),
        on_failure: stricter(a.on_failure, b.on_failure),
    }
}

fn merge_projections(a: Project, b: Project) -> Project {
    // A column the second copies is the first's column (copied, or
    // computed from the input); what the second computes reads the
    // first's row.
    let copies_only = b.outputs.iter().all(|(from, _)| from.is_some());
    let over_updating = a.over_updating || b.over_updating;
    if copies_only {
        let outputs = b
            .outputs
            .iter()
            .map(|(from, _)| a.outputs[from.expect("a copy")].clone())
            .collect();
        return Project {
            schema: b.schema,
            outputs,
            over_updating,
            inner: a.inner,
            on_failure: stricter(a.on_failure, b.on_failure),
        };
    }
    Project {
        schema: b.schema,
        outputs: b.outputs,
        over_updating,
        on_failure: stricter(a.on_failure.clone(), b.on_failure),
        inner: Some(Box::new(Project {
            over_updating: false,
            ..a
        })),
    }
}

/// The policy of two merged nodes for a user-defined function's failure:
/// one that is not NULL, as each had in its own node.
fn stricter(a: OnFunctionFailure, b: OnFunctionFailure) -> OnFunctionFailure {
    if a == OnFunctionFailure::Null {
        b
    } else {
        a
    }
}

/// Whether `p` copies every column of `input` as it is.
fn is_identity(p: &Project, input: &Rel) -> bool {
    p.inner.is_none()
        && !p.over_updating
        && p.outputs.len() == input.columns.len()
        && p.outputs
            .iter()
            .enumerate()
            .all(|(i, (from, _))| *from == Some(i))
        && p.schema
            .fields
            .iter()
            .zip(&input.columns)
            .all(|(f, c)| f.name == c.name && f.data_type == c.ty)
}

#[cfg(test)]
mod tests {
    use super::super::union::Union;
    use super::*;
    use crate::dataflow::row::{DataType, Field, Schema};
    use crate::sql::expr::ScopeColumn;

    fn rel(columns: &[&str]) -> Rel {
        Rel {
            node: 0,
            columns: columns
                .iter()
                .map(|c| ScopeColumn {
                    name: c.to_string(),
                    qualifier: None,
                    ty: DataType::BigInt,
                })
                .collect(),
            updating: None,
            updated_by: None,
            time: None,
            source: None,
            window: None,
            window_end: None,
            timed: false,
        }
    }

    fn schema(columns: &[&str]) -> Schema {
        Schema::new(
            columns
                .iter()
                .map(|c| Field::new(c.to_string(), DataType::BigInt))
                .collect(),
        )
    }

    fn add(plan: &mut LogicalPlan, uid: &str, op: Op, inputs: &[NodeId], columns: &[&str]) {
        let id = plan.nodes.len();
        plan.nodes.push(Node {
            uid: uid.into(),
            op,
            inputs: inputs.to_vec(),
            rel: Rel {
                node: id,
                ..rel(columns)
            },
        });
    }

    fn greater(column: usize, than: i64) -> Filter {
        Filter {
            text: format!("c{column} > {than}"),
            predicate: Arc::new(move |v: &[Value]| {
                Ok(Value::Bool(v[column].as_int().is_some_and(|x| x > than)))
            }),
            on_failure: Default::default(),
        }
    }

    fn uids(plan: &LogicalPlan) -> Vec<(&str, Vec<NodeId>)> {
        plan.nodes
            .iter()
            .map(|n| (n.uid.as_str(), n.inputs.clone()))
            .collect()
    }

    #[test]
    fn chained_filters_and_projections_merge_and_identities_go() {
        let mut plan = LogicalPlan::default();
        add(&mut plan, "scan", Op::Union(Union), &[], &["a", "b"]);
        add(
            &mut plan,
            "where",
            Op::Filter(greater(0, 1)),
            &[0],
            &["a", "b"],
        );
        add(
            &mut plan,
            "having",
            Op::Filter(greater(1, 5)),
            &[1],
            &["a", "b"],
        );
        // b + a, then (that, a + 100): the second reads the first's row.
        let sum: Arc<crate::sql::expr::EvalFn> =
            Arc::new(|v: &[Value]| Ok(Value::Int(v[0].as_int().unwrap() + v[1].as_int().unwrap())));
        let first = Project {
            schema: schema(&["s", "a"]),
            outputs: vec![
                (None, sum),
                (Some(0), Arc::new(|_: &[Value]| Ok(Value::Null))),
            ],
            over_updating: false,
            inner: None,
            on_failure: Default::default(),
        };
        let plus: Arc<crate::sql::expr::EvalFn> =
            Arc::new(|v: &[Value]| Ok(Value::Int(v[1].as_int().unwrap() + 100)));
        let second = Project {
            schema: schema(&["s", "a100"]),
            outputs: vec![
                (Some(0), Arc::new(|_: &[Value]| Ok(Value::Null))),
                (None, plus),
            ],
            over_updating: false,
            inner: None,
            on_failure: Default::default(),
        };
        add(
            &mut plan,
            "view.select",
            Op::Project(first),
            &[2],
            &["s", "a"],
        );
        add(
            &mut plan,
            "q.select",
            Op::Project(second),
            &[3],
            &["s", "a100"],
        );
        let identity = Project {
            schema: schema(&["s", "a100"]),
            outputs: (0..2)
                .map(|i| (Some(i), Arc::new(|_: &[Value]| Ok(Value::Null)) as Arc<_>))
                .collect(),
            over_updating: false,
            inner: None,
            on_failure: Default::default(),
        };
        add(
            &mut plan,
            "q.star",
            Op::Project(identity),
            &[4],
            &["s", "a100"],
        );
        add(&mut plan, "sink", Op::Union(Union), &[5], &["s", "a100"]);
        let plan = rewrite(plan);
        assert_eq!(
            uids(&plan),
            [
                ("scan", vec![]),
                ("having", vec![0]),
                ("q.select", vec![1]),
                ("sink", vec![2])
            ]
        );
        let Op::Filter(f) = &plan.nodes[1].op else {
            panic!("a filter")
        };
        assert_eq!(f.text, "c0 > 1 AND c1 > 5");
        let pass = |a, b| (f.predicate)(&[Value::Int(a), Value::Int(b)]).unwrap();
        assert_eq!(pass(2, 6), Value::Bool(true));
        assert_eq!(pass(1, 6), Value::Bool(false));
        assert_eq!(pass(2, 5), Value::Bool(false));
        let Op::Project(p) = &plan.nodes[2].op else {
            panic!("a project")
        };
        assert_eq!(
            p.evaluate(&[Value::Int(3), Value::Int(4)]),
            vec![Value::Int(7), Value::Int(103)]
        );
    }

    #[test]
    fn a_node_read_twice_is_not_merged_into_either_reader() {
        let mut plan = LogicalPlan::default();
        add(&mut plan, "scan", Op::Union(Union), &[], &["a"]);
        add(&mut plan, "shared", Op::Filter(greater(0, 1)), &[0], &["a"]);
        add(&mut plan, "x", Op::Filter(greater(0, 2)), &[1], &["a"]);
        add(&mut plan, "y", Op::Filter(greater(0, 3)), &[1], &["a"]);
        let plan = rewrite(plan);
        assert_eq!(
            uids(&plan),
            [
                ("scan", vec![]),
                ("shared", vec![0]),
                ("x", vec![1]),
                ("y", vec![1])
            ]
        );
    }
}
