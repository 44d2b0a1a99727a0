//! The order of a query's inner joins, chosen by the sizes of what they
//! join.
//!
//! DataFusion joins a query's tables in the order its `FROM` names them,
//! only swapping the two sides of each join by their sizes. TPC-H q21
//! names supplier, lineitem, orders and nation, and so joins all of
//! lineitem's late rows with supplier and orders before nation's filter,
//! which keeps one nation of 25, can drop any of them. [`JoinOrder`] takes
//! a tree of inner joins apart into its inputs and the conditions between
//! them, estimates each input's rows, and joins them again left-deep in
//! the order that makes the fewest intermediate rows (dynamic programming
//! over the sets of inputs, the C_out cost of Cluet and Moerkotte), each
//! condition in the first join that has its columns. The result is
//! projected back to the columns and order of the tree it replaces.
//!
//! Estimates come from the tables that give them ([`Estimated`]): stored
//! tables ([`StoredTable`]) and Parquet files in place ([`FileTable`]),
//! with exact row counts, minimums and maximums, and distinct values
//! estimated by HyperLogLog for the columns that joins and equality
//! filters use. An input whose rows cannot be estimated (a CSV file, a
//! cluster table) leaves its tree in DataFusion's order.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::catalog::TableProvider;
use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Column, JoinConstraint, JoinType, NullEquality, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::expr::InList;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    Between, BinaryExpr, Expr, Join, LogicalPlan, LogicalPlanBuilder, Operator, TableScan,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::file_table::FileTable;
use crate::table::StoredTable;

/// Selectivity of a condition the estimates cannot read.
const UNKNOWN: f64 = 1.0 / 3.0;
/// Selectivity of an equality on a column of unknown distinct values.
const EQUAL: f64 = 0.1;
/// The most inputs ordered by dynamic programming (2^n sets); a larger tree
/// keeps DataFusion's order.
const MOST_INPUTS: usize = 12;

/// What a table tells the estimates.
pub(crate) trait Estimated {
    /// The table's rows, when known.
    fn rows(&self) -> Option<u64>;
    /// The rows, nulls and range of the table's column `index`.
    fn column(&self, index: usize) -> Option<ColumnEstimate>;
    /// The distinct non-null values of column `index`, estimated: a pass
    /// over the column the first time, so asked only by the estimates that
    /// need it (join keys, equality filters).
    fn distinct(&self, index: usize) -> Option<u64>;
}

/// The estimates of a table that gives them.
fn estimated(provider: &dyn TableProvider) -> Option<&dyn Estimated> {
    if let Some(table) = provider.downcast_ref::<StoredTable>() {
        return Some(table);
    }
    provider
        .downcast_ref::<FileTable>()
        .map(|table| table as &dyn Estimated)
}

/// The optimizer rule (module docs).
#[derive(Debug, Default)]
pub(crate) struct JoinOrder;

impl OptimizerRule for JoinOrder {
    fn name(&self) -> &str {
        "quiver_join_order"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        reorder(plan)
    }
}

/// `plan` with every tree of three or more inner joins in it ordered.
fn reorder(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    if !is_inner_join(&plan) {
        return plan.map_children(reorder);
    }
    let mut tree = Tree::new(&plan);
    let mut changed = false;
    tree.inputs = std::mem::take(&mut tree.inputs)
        .into_iter()
        .map(|input| {
            let input = reorder(input)?;
            changed |= input.transformed;
            Ok(input.data)
        })
        .collect::<Result<Vec<_>>>()?;
    let Some(reads) = tree.reads() else {
        // A condition reads a column no input has (or two have): the tree
        // is left as it is, its joins ordered inside their inputs.
        return plan.map_children(reorder);
    };
    let identity: Vec<usize> = (0..tree.inputs.len()).collect();
    let order = tree
        .cheapest_order(&reads)
        .unwrap_or_else(|| identity.clone());
    if order == identity && tree.left_deep && !changed {
        return Ok(Transformed::no(plan));
    }
    match tree.joined_in_order(&plan, &reads, &order) {
        Ok(rebuilt) => Ok(Transformed::yes(rebuilt)),
        Err(e) => {
            tracing::debug!("joins left in their order: {e}");
            plan.map_children(reorder)
        }
    }
}

/// An inner join whose equalities do not match nulls: one that may be
/// taken apart and joined again in any order.
fn is_inner_join(plan: &LogicalPlan) -> bool {
    matches!(plan, LogicalPlan::Join(join)
        if join.join_type == JoinType::Inner
            && join.null_equality == NullEquality::NullEqualsNothing
            && !join.null_aware)
}

/// Whether a tree of inner joins is under `plan`, through the filters and
/// column-only projections that [`Tree::take_apart`] goes through.
fn joins_below(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::Filter(filter) if movable(&filter.predicate) => joins_below(&filter.input),
        LogicalPlan::Projection(projection) if only_columns(&projection.expr) => {
            joins_below(&projection.input)
        }
        _ => is_inner_join(plan),
    }
}

/// A condition that may be evaluated anywhere above the columns it reads:
/// no subquery, no reference to an outer query, not volatile.
fn movable(predicate: &Expr) -> bool {
    !predicate.is_volatile()
        && !predicate
            .exists(|e| {
                Ok(matches!(
                    e,
                    Expr::Exists(_)
                        | Expr::InSubquery(_)
                        | Expr::ScalarSubquery(_)
                        | Expr::SetComparison(_)
                        | Expr::OuterReferenceColumn(..)
                ))
            })
            .unwrap_or(true)
}

fn only_columns(exprs: &[Expr]) -> bool {
    exprs.iter().all(|e| matches!(e, Expr::Column(_)))
}

/// A tree of inner joins taken apart.
#[derive(Debug)]
struct Tree {
    /// What the joins join, left to right.
    inputs: Vec<LogicalPlan>,
    /// The join conditions and filters, as conjuncts.
    conditions: Vec<Expr>,
    /// Whether every join's right side was one input.
    left_deep: bool,
}

impl Tree {
    fn new(plan: &LogicalPlan) -> Self {
        let mut tree = Self {
            inputs: Vec::new(),
            conditions: Vec::new(),
            left_deep: true,
        };
        tree.take_apart(plan);
        tree
    }

    fn take_apart(&mut self, plan: &LogicalPlan) {
        match plan {
            LogicalPlan::Join(join) if is_inner_join(plan) => {
                self.take_apart(&join.left);
                let before = self.inputs.len();
                self.take_apart(&join.right);
                if self.inputs.len() - before > 1 {
                    self.left_deep = false;
                }
                self.conditions.extend(
                    join.on
                        .iter()
                        .map(|(left, right)| left.clone().eq(right.clone())),
                );
                if let Some(filter) = &join.filter {
                    self.conditions
                        .extend(split_conjunction(filter).into_iter().cloned());
                }
            }
            LogicalPlan::Filter(filter) if joins_below(plan) => {
                self.conditions
                    .extend(split_conjunction(&filter.predicate).into_iter().cloned());
                self.take_apart(&filter.input);
            }
            LogicalPlan::Projection(projection) if joins_below(plan) => {
                self.take_apart(&projection.input);
            }
            _ => self.inputs.push(plan.clone()),
        }
    }

    /// The inputs each condition reads, or `None` if a column of one is in
    /// no input or in several.
    fn reads(&self) -> Option<Vec<Vec<usize>>> {
        self.conditions.iter().map(|c| self.inputs_of(c)).collect()
    }

    /// The inputs a condition reads (indexes), or `None` when a column is
    /// in no input or in several.
    fn inputs_of(&self, condition: &Expr) -> Option<Vec<usize>> {
        let mut inputs = Vec::new();
        for column in condition.column_refs() {
            let mut holders = self
                .inputs
                .iter()
                .enumerate()
                .filter(|(_, input)| input.schema().has_column(column))
                .map(|(i, _)| i);
            let holder = holders.next()?;
            if holders.next().is_some() {
                return None;
            }
            if !inputs.contains(&holder) {
                inputs.push(holder);
            }
        }
        inputs.sort_unstable();
        Some(inputs)
    }

    /// The order of the inputs the estimates choose (their reads given
    /// by [`Tree::reads`]); `None` when there is nothing to order, too
    /// much, or an input's rows cannot be estimated.
    fn cheapest_order(&self, reads: &[Vec<usize>]) -> Option<Vec<usize>> {
        let n = self.inputs.len();
        if !(3..=MOST_INPUTS).contains(&n) {
            return None;
        }
        let rows = self
            .inputs
            .iter()
            .map(estimated_rows)
            .collect::<Option<Vec<f64>>>()?;
        let mut divisors: HashMap<(usize, usize), Divisor> = HashMap::new();
        for (condition, inputs) in self.conditions.iter().zip(reads) {
            let Some((left, right)) = equality(condition) else {
                continue;
            };
            let (Some(a), Some(b)) = (self.inputs_of(left), self.inputs_of(right)) else {
                continue;
            };
            if let ([a], [b], 2) = (a.as_slice(), b.as_slice(), inputs.len()) {
                let (a, b, left, right) = if a < b {
                    (*a, *b, left, right)
                } else {
                    (*b, *a, right, left)
                };
                divisors.entry((a, b)).or_default().add(
                    distinct(left, &self.inputs[a], rows[a]),
                    distinct(right, &self.inputs[b], rows[b]),
                );
            }
        }
        let mut edges: Vec<(usize, usize, f64)> = divisors
            .into_iter()
            .map(|((a, b), divisor)| (a, b, divisor.of(rows[a], rows[b])))
            .collect();
        edges.sort_by_key(|&(a, b, _)| (a, b));
        Some(cheapest_order(&rows, &edges))
    }

    /// The inputs joined left-deep in `order`, each condition in the first
    /// join that has all its columns, projected to `original`'s columns.
    fn joined_in_order(
        &self,
        original: &LogicalPlan,
        reads: &[Vec<usize>],
        order: &[usize],
    ) -> Result<LogicalPlan> {
        let mut placed = vec![false; self.conditions.len()];
        let mut joined = vec![order[0]];
        let mut plan = self.inputs[order[0]].clone();
        for &next in &order[1..] {
            joined.push(next);
            let mut on = Vec::new();
            let mut filters = Vec::new();
            for (i, condition) in self.conditions.iter().enumerate() {
                if placed[i] || !reads[i].iter().all(|r| joined.contains(r)) {
                    continue;
                }
                placed[i] = true;
                match self.join_keys(condition, next) {
                    Some(keys) => on.push(keys),
                    None => filters.push(condition.clone()),
                }
            }
            let join = Join::try_new(
                Arc::new(plan),
                Arc::new(self.inputs[next].clone()),
                on,
                conjunction(filters),
                JoinType::Inner,
                JoinConstraint::On,
                NullEquality::NullEqualsNothing,
                false,
            )?;
            plan = LogicalPlan::Join(join);
        }
        let columns = original.schema().columns().into_iter().map(Expr::Column);
        LogicalPlanBuilder::from(plan).project(columns)?.build()
    }

    /// `condition` as a join's keys, (the joined side's, `next`'s), when it
    /// is an equality between them.
    fn join_keys(&self, condition: &Expr, next: usize) -> Option<(Expr, Expr)> {
        let (left, right) = equality(condition)?;
        let (a, b) = (self.inputs_of(left)?, self.inputs_of(right)?);
        match (a.as_slice(), b.as_slice()) {
            ([a], [b]) if *b == next && *a != next => Some((left.clone(), right.clone())),
            ([a], [b]) if *a == next && *b != next => Some((right.clone(), left.clone())),
            _ => None,
        }
    }
}

/// The sides of `left = right`.
fn equality(condition: &Expr) -> Option<(&Expr, &Expr)> {
    match condition {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: Operator::Eq,
            right,
        }) => Some((left, right)),
        _ => None,
    }
}

/// What the equalities between two inputs divide the product of their rows
/// by: the larger of the two sides' distinct keys, a side's keys being its
/// columns' distinct values multiplied, at most its rows.
#[derive(Debug, Default)]
struct Divisor {
    left: Vec<f64>,
    right: Vec<f64>,
}

impl Divisor {
    fn add(&mut self, left: f64, right: f64) {
        self.left.push(left.max(1.0));
        self.right.push(right.max(1.0));
    }

    fn of(&self, left_rows: f64, right_rows: f64) -> f64 {
        let left: f64 = self.left.iter().product::<f64>().min(left_rows);
        let right: f64 = self.right.iter().product::<f64>().min(right_rows);
        left.max(right).max(1.0)
    }
}

/// The left-deep order of the inputs (their estimated `rows`, and
/// `edges` `(a, b, divisor)` between them) whose joins make the fewest rows
/// in all; of equal ones, the nearest to the inputs' own order.
fn cheapest_order(rows: &[f64], edges: &[(usize, usize, f64)]) -> Vec<usize> {
    let n = rows.len();
    let sets = 1usize << n;
    // ln of each set's estimated rows: its inputs' rows over the divisors
    // of the edges inside it.
    let size: Vec<f64> = (0..sets)
        .map(|set| {
            let rows: f64 = (0..n)
                .filter(|i| set & (1 << i) != 0)
                .map(|i| rows[i].max(1.0).ln())
                .sum();
            let divided: f64 = edges
                .iter()
                .filter(|&&(a, b, _)| set & (1 << a) != 0 && set & (1 << b) != 0)
                .map(|&(_, _, divisor)| divisor.ln())
                .sum();
            (rows - divided).max(0.0)
        })
        .collect();
    // The cheapest cost of each set, and its last input.
    let mut cost = vec![f64::INFINITY; sets];
    let mut last = vec![usize::MAX; sets];
    for i in 0..n {
        cost[1 << i] = 0.0;
        last[1 << i] = i;
    }
    for set in 1..sets {
        if set.count_ones() < 2 {
            continue;
        }
        // From the last input down: of equal costs, the later input is
        // joined last, as in the inputs' own order.
        for i in (0..n).rev() {
            if set & (1 << i) == 0 {
                continue;
            }
            let candidate = cost[set & !(1 << i)] + size[set].exp();
            if candidate < cost[set] {
                cost[set] = candidate;
                last[set] = i;
            }
        }
    }
    let mut order = Vec::with_capacity(n);
    let mut set = sets - 1;
    while set != 0 {
        order.push(last[set]);
        set &= !(1 << last[set]);
    }
    order.reverse();
    order
}

/// A stored table's scan under `plan`, through what keeps its rows' columns
/// as they are, and the table's index of `plan`'s column `index`.
fn source_column(plan: &LogicalPlan, index: usize) -> Option<(&TableScan, usize)> {
    match plan {
        LogicalPlan::TableScan(scan) => {
            let name = scan.projected_schema.field(index).name();
            let column = scan.source.schema().index_of(name).ok()?;
            Some((scan, column))
        }
        LogicalPlan::SubqueryAlias(alias) => source_column(&alias.input, index),
        LogicalPlan::Filter(filter) => source_column(&filter.input, index),
        LogicalPlan::Sort(sort) => source_column(&sort.input, index),
        LogicalPlan::Limit(limit) => source_column(&limit.input, index),
        LogicalPlan::Projection(projection) => {
            match projection.expr.get(index)?.clone().unalias() {
                Expr::Column(column) => {
                    let input = projection.input.schema().index_of_column(&column).ok()?;
                    source_column(&projection.input, input)
                }
                _ => None,
            }
        }
        _ => None,
    }
}

/// What the estimates know of one column of a table, but its distinct
/// values ([`Estimated::distinct`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ColumnEstimate {
    /// The table's rows.
    pub(crate) rows: f64,
    pub(crate) nulls: f64,
    /// The minimum and maximum, for a number, date or timestamp column
    /// whose maximum is above its minimum.
    pub(crate) range: Option<(f64, f64)>,
}

impl ColumnEstimate {
    /// From a table's `rows`, and a column's `nulls`, `min` and `max`.
    pub(crate) fn new(
        rows: u64,
        nulls: u64,
        min: Option<&ScalarValue>,
        max: Option<&ScalarValue>,
    ) -> Self {
        let range = match (min.and_then(number), max.and_then(number)) {
            (Some(low), Some(high)) if high > low => Some((low, high)),
            _ => None,
        };
        Self {
            rows: rows as f64,
            nulls: nulls as f64,
            range,
        }
    }
}

/// `f` of the table `column` of `plan` is read from, and the column's
/// index in it; `None` when that is not a table that gives estimates.
fn of_source<T>(
    plan: &LogicalPlan,
    column: &Column,
    f: impl FnOnce(&dyn Estimated, usize) -> Option<T>,
) -> Option<T> {
    let index = plan.schema().index_of_column(column).ok()?;
    let (scan, index) = source_column(plan, index)?;
    let provider = source_as_provider(&scan.source).ok()?;
    f(estimated(provider.as_ref())?, index)
}

fn column_estimate(plan: &LogicalPlan, column: &Column) -> Option<ColumnEstimate> {
    of_source(plan, column, |table, index| table.column(index))
}

/// The distinct values of `column` in its table, at least 1.
fn column_distinct(plan: &LogicalPlan, column: &Column) -> Option<f64> {
    of_source(plan, column, |table, index| table.distinct(index)).map(|d| (d as f64).max(1.0))
}

/// The distinct values of `expr` (a column, perhaps cast) in `plan`'s
/// rows, or else `rows` (`plan`'s estimated rows), and at most `rows`.
fn distinct(expr: &Expr, plan: &LogicalPlan, rows: f64) -> f64 {
    bare_column(expr)
        .and_then(|column| column_distinct(plan, column))
        .map_or(rows, |distinct| distinct.min(rows))
}

/// The column under casts and aliases.
fn bare_column(expr: &Expr) -> Option<&Column> {
    match expr {
        Expr::Column(column) => Some(column),
        Expr::Cast(cast) => bare_column(&cast.expr),
        Expr::TryCast(cast) => bare_column(&cast.expr),
        Expr::Alias(alias) => bare_column(&alias.expr),
        _ => None,
    }
}

/// A value as a number on its type's own scale, for the types whose
/// ranges are interpolated.
fn number(value: &ScalarValue) -> Option<f64> {
    Some(match value {
        ScalarValue::Int8(Some(v)) => f64::from(*v),
        ScalarValue::Int16(Some(v)) => f64::from(*v),
        ScalarValue::Int32(Some(v)) => f64::from(*v),
        ScalarValue::Int64(Some(v)) => *v as f64,
        ScalarValue::UInt8(Some(v)) => f64::from(*v),
        ScalarValue::UInt16(Some(v)) => f64::from(*v),
        ScalarValue::UInt32(Some(v)) => f64::from(*v),
        ScalarValue::UInt64(Some(v)) => *v as f64,
        ScalarValue::Float32(Some(v)) => f64::from(*v),
        ScalarValue::Float64(Some(v)) => *v,
        ScalarValue::Date32(Some(v)) => f64::from(*v),
        ScalarValue::Date64(Some(v)) => *v as f64,
        ScalarValue::Decimal128(Some(v), _, scale) => *v as f64 / 10f64.powi(i32::from(*scale)),
        ScalarValue::TimestampSecond(Some(v), _)
        | ScalarValue::TimestampMillisecond(Some(v), _)
        | ScalarValue::TimestampMicrosecond(Some(v), _)
        | ScalarValue::TimestampNanosecond(Some(v), _) => *v as f64,
        _ => return None,
    })
}

/// The rows `plan` gives, estimated; `None` where it reads what is not a
/// stored table.
fn estimated_rows(plan: &LogicalPlan) -> Option<f64> {
    let rows = match plan {
        LogicalPlan::TableScan(scan) => {
            let provider = source_as_provider(&scan.source).ok()?;
            let rows = estimated(provider.as_ref())?.rows()? as f64;
            // Filters pushed to a stored table or a file stay in the
            // `Filter` above its scan (pushed down inexactly), which
            // estimates them.
            scan.fetch.map_or(rows, |fetch| rows.min(fetch as f64))
        }
        LogicalPlan::Filter(filter) => {
            estimated_rows(&filter.input)? * selectivity(&filter.predicate, &filter.input)
        }
        LogicalPlan::Projection(projection) => estimated_rows(&projection.input)?,
        LogicalPlan::SubqueryAlias(alias) => estimated_rows(&alias.input)?,
        LogicalPlan::Sort(sort) => estimated_rows(&sort.input)?,
        LogicalPlan::Distinct(distinct) => estimated_rows(distinct.input())?,
        LogicalPlan::Limit(limit) => estimated_rows(&limit.input)?,
        LogicalPlan::Aggregate(aggregate) if aggregate.group_expr.is_empty() => 1.0,
        LogicalPlan::Aggregate(aggregate) => estimated_rows(&aggregate.input)?,
        LogicalPlan::Join(join) => {
            let left = estimated_rows(&join.left)?;
            let right = estimated_rows(&join.right)?;
            match join.join_type {
                JoinType::Inner => {
                    let mut divisor = Divisor::default();
                    for (l, r) in &join.on {
                        divisor.add(
                            distinct(l, &join.left, left),
                            distinct(r, &join.right, right),
                        );
                    }
                    left * right / divisor.of(left, right)
                }
                JoinType::Left | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => {
                    left
                }
                JoinType::Right
                | JoinType::RightSemi
                | JoinType::RightAnti
                | JoinType::RightMark => right,
                JoinType::Full => left + right,
            }
        }
        LogicalPlan::Union(union) => union
            .inputs
            .iter()
            .map(|input| estimated_rows(input))
            .sum::<Option<f64>>()?,
        _ => return None,
    };
    Some(rows.max(1.0))
}

/// The share of `plan`'s rows `predicate` keeps, estimated.
fn selectivity(predicate: &Expr, plan: &LogicalPlan) -> f64 {
    let share = match predicate {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => selectivity(left, plan) * selectivity(right, plan),
            Operator::Or => {
                let (a, b) = (selectivity(left, plan), selectivity(right, plan));
                a + b - a * b
            }
            Operator::Eq => equal(left, right, plan),
            Operator::NotEq => 1.0 - equal(left, right, plan),
            Operator::Lt | Operator::LtEq => compared(left, right, plan, true),
            Operator::Gt | Operator::GtEq => compared(left, right, plan, false),
            _ => UNKNOWN,
        },
        Expr::Not(inner) => 1.0 - selectivity(inner, plan),
        Expr::Between(Between {
            expr,
            negated,
            low,
            high,
        }) => {
            let share = match (literal(low), literal(high)) {
                (Some(low), Some(high)) => within(expr, plan, Some(low), Some(high)),
                _ => None,
            }
            .unwrap_or(UNKNOWN / 2.0);
            if *negated { 1.0 - share } else { share }
        }
        Expr::InList(InList {
            expr,
            list,
            negated,
        }) => {
            let share = (list.len() as f64 * equal_share(expr, plan)).min(1.0);
            if *negated { 1.0 - share } else { share }
        }
        Expr::Like(like) => {
            if like.negated {
                1.0 - EQUAL
            } else {
                EQUAL
            }
        }
        Expr::IsNull(expr) => null_share(expr, plan).unwrap_or(EQUAL),
        Expr::IsNotNull(expr) => 1.0 - null_share(expr, plan).unwrap_or(0.0),
        Expr::Literal(ScalarValue::Boolean(Some(true)), _) => 1.0,
        Expr::Literal(ScalarValue::Boolean(_), _) => 0.0,
        _ => UNKNOWN,
    };
    share.clamp(0.0, 1.0)
}

fn literal(expr: &Expr) -> Option<&ScalarValue> {
    match expr {
        Expr::Literal(value, _) => Some(value),
        _ => None,
    }
}

/// `left = right` where one side is a column and the other a value.
fn equal(left: &Expr, right: &Expr, plan: &LogicalPlan) -> f64 {
    match (literal(left), literal(right)) {
        (None, Some(_)) => equal_share(left, plan),
        (Some(_), None) => equal_share(right, plan),
        _ => EQUAL,
    }
}

/// The share of rows one value of `expr` keeps.
fn equal_share(expr: &Expr, plan: &LogicalPlan) -> f64 {
    bare_column(expr)
        .and_then(|column| column_distinct(plan, column))
        .map_or(EQUAL, |distinct| 1.0 / distinct)
}

/// `left < right` (`below`) or `left > right`, one side a column.
fn compared(left: &Expr, right: &Expr, plan: &LogicalPlan, below: bool) -> f64 {
    let share = match (literal(left), literal(right)) {
        (None, Some(value)) if below => within(left, plan, None, Some(value)),
        (None, Some(value)) => within(left, plan, Some(value), None),
        (Some(value), None) if below => within(right, plan, Some(value), None),
        (Some(value), None) => within(right, plan, None, Some(value)),
        _ => None,
    };
    share.unwrap_or(UNKNOWN)
}

/// The share of `expr`'s range (a column's, not cast) between `low` and
/// `high`.
fn within(
    expr: &Expr,
    plan: &LogicalPlan,
    low: Option<&ScalarValue>,
    high: Option<&ScalarValue>,
) -> Option<f64> {
    let Expr::Column(column) = expr else {
        return None;
    };
    let (min, max) = column_estimate(plan, column)?.range?;
    let low = low.map_or(Some(min), number)?.max(min);
    let high = high.map_or(Some(max), number)?.min(max);
    Some(((high - low) / (max - min)).clamp(0.0, 1.0))
}

fn null_share(expr: &Expr, plan: &LogicalPlan) -> Option<f64> {
    let estimate = column_estimate(plan, bare_column(expr)?)?;
    Some(estimate.nulls / estimate.rows.max(1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joins_the_small_filtered_input_first_and_never_a_cross_product_first() {
        // q21's shape: supplier (10,000), lineitem (2 M after its filter),
        // orders (500,000 after its filter), nation (1 after its filter);
        // supplier-lineitem on 10,000 keys, orders-lineitem on 1.5 M,
        // supplier-nation on 25.
        let rows = [10_000.0, 2_000_000.0, 500_000.0, 1.0];
        let edges = [(0, 1, 10_000.0), (1, 2, 1_500_000.0), (0, 3, 25.0)];
        assert_eq!(cheapest_order(&rows, &edges), vec![0, 3, 1, 2]);
    }

    #[test]
    fn keeps_the_order_it_is_given_when_no_order_is_cheaper() {
        let rows = [100.0, 100.0, 100.0];
        let edges = [(0, 1, 100.0), (1, 2, 100.0)];
        assert_eq!(cheapest_order(&rows, &edges), vec![0, 1, 2]);
    }

    #[test]
    fn a_key_divides_by_the_larger_side_of_distinct_values_at_most_the_rows() {
        let mut divisor = Divisor::default();
        divisor.add(200_000.0, 200_000.0);
        divisor.add(10_000.0, 10_000.0);
        // partsupp (800,000 rows) with lineitem (6 M rows) on two keys.
        assert_eq!(divisor.of(800_000.0, 6_000_000.0), 6_000_000.0);
    }
}
