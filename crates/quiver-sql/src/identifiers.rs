//! Identifiers as analysts write them: unquoted, they match a name whatever
//! its case; quoted, exactly.
//!
//! DataFusion either folds unquoted identifiers to lower case (so a column
//! stored as `VendorID` can only be named quoted) or, with that folding off
//! as quiver runs it, matches every identifier exactly (so `SELECT x.a FROM
//! (SELECT 1 AS a) X` fails). Users expect what DuckDB and most warehouses do:
//! case-insensitive and case-preserving. So before a statement is planned,
//! each unquoted identifier that is not the exact spelling of a name it may
//! refer to is replaced by the one name that matches it ignoring case:
//!
//! - tables and views (of the schemas the statement reads), common table
//!   expressions and the aliases of a `FROM` clause, for relation names and
//!   column qualifiers;
//! - the columns of those tables, the columns a CTE or subquery gives, and
//!   every alias of a `SELECT` list, for column names (`ORDER BY total`
//!   finds `AS Total`); a qualified column (`t.a`) is looked up among the
//!   columns of its own relation when they are known;
//! - schema names, for the parts before a table name.
//!
//! An identifier that is already the exact spelling of a name is left as
//! written, so a table with both `a` and `A` keeps both reachable; one that
//! matches several spellings and none exactly is refused with an error that
//! names them. Function names are DataFusion's own business: it matches them
//! ignoring case already. docs/protocol.md states the rule for users.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use datafusion::catalog::SchemaProvider;
use datafusion::execution::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::{CopyToSource, Statement};
use datafusion::sql::sqlparser::ast::{
    self, Expr, Ident, JoinConstraint, JoinOperator, ObjectName, ObjectNamePart, Query, Select,
    SelectItem, SelectItemQualifiedWildcardKind, SetExpr, TableFactor, Visit, VisitMut, Visitor,
    VisitorMut,
};

use crate::catalog::StoreSchema;
use crate::{Result, SqlError};

/// Plans `sql` in `state`, its unquoted identifiers matched to names as the
/// module docs say.
pub(crate) async fn plan(state: &SessionState, sql: &str) -> Result<LogicalPlan> {
    let dialect = state.config().options().sql_parser.dialect;
    let mut statement = state.sql_to_statement(sql, &dialect)?;
    let names = Names::of(state, &statement).await?;
    names.apply(&mut statement)?;
    Ok(state.statement_to_plan(statement).await?)
}

/// Names by their lower-case form, each with the spellings it has.
#[derive(Debug, Default, Clone)]
struct Spellings(HashMap<String, Vec<String>>);

impl Spellings {
    fn add(&mut self, name: &str) {
        let spellings = self.0.entry(name.to_lowercase()).or_default();
        if !spellings.iter().any(|s| s == name) {
            spellings.push(name.to_string());
        }
    }

    fn contains_ignoring_case(&self, name: &str) -> bool {
        self.0.contains_key(&name.to_lowercase())
    }

    /// The spelling `ident` stands for: itself if quoted, if it is a
    /// spelling, or if nothing matches (planning then says what is
    /// missing); the one spelling it matches ignoring case; an error if it
    /// matches several.
    fn resolve(&self, ident: &mut Ident, what: &str) -> Result<()> {
        if ident.quote_style.is_some() {
            return Ok(());
        }
        let Some(found) = self.0.get(&ident.value.to_lowercase()) else {
            return Ok(());
        };
        if found.contains(&ident.value) {
            return Ok(());
        }
        match found.as_slice() {
            [one] => {
                ident.value.clone_from(one);
                Ok(())
            }
            many => {
                let mut quoted: Vec<String> = many.iter().map(|s| format!("\"{s}\"")).collect();
                quoted.sort();
                Err(SqlError::invalid(format!(
                    "{what} {} is ambiguous: it matches {} ignoring case; quote the one meant",
                    ident.value,
                    quoted.join(" and ")
                )))
            }
        }
    }
}

/// What the identifiers of one statement may refer to.
#[derive(Debug, Default)]
struct Names {
    /// Tables, views, CTEs and aliases of `FROM` clauses.
    relations: Spellings,
    /// Schemas and catalogs.
    schemas: Spellings,
    /// Every column and `SELECT` alias.
    columns: Spellings,
    /// The columns of each relation whose columns are known, by its exact
    /// spelling.
    columns_of: HashMap<String, Spellings>,
}

impl Names {
    /// The names `statement` may refer to: its own aliases and CTEs, and
    /// the tables of the catalog it reads, with their columns.
    async fn of(state: &SessionState, statement: &Statement) -> Result<Self> {
        let mut aliases = Aliases::default();
        let _ = visit_statement(statement, &mut aliases);
        let mut names = Names {
            relations: aliases.relations,
            columns: aliases.columns,
            columns_of: aliases.columns_of,
            ..Names::default()
        };
        let catalogs = state.catalog_list();
        for catalog in catalogs.catalog_names() {
            names.schemas.add(&catalog);
            if let Some(catalog) = catalogs.catalog(&catalog) {
                for schema in catalog.schema_names() {
                    names.schemas.add(&schema);
                }
            }
        }
        // The tables each schema is asked for, by lower-case name: the
        // references as written, whatever their case.
        let mut wanted: HashMap<(String, String), HashSet<String>> = HashMap::new();
        let defaults = &state.config().options().catalog;
        for reference in state.resolve_table_references(statement)? {
            let table = reference.table().to_lowercase();
            let resolved = reference.resolve(&defaults.default_catalog, &defaults.default_schema);
            let (catalog, schema) = (resolved.catalog.to_string(), resolved.schema.to_string());
            let (catalog, schema) = (
                names.schema_spelling(&catalog)?,
                names.schema_spelling(&schema)?,
            );
            wanted.entry((catalog, schema)).or_default().insert(table);
        }
        for ((catalog, schema), tables) in wanted {
            let Some(provider) = catalogs.catalog(&catalog).and_then(|c| c.schema(&schema)) else {
                continue;
            };
            for (name, columns) in tables_named(provider, &tables).await? {
                names.relations.add(&name);
                let mut spellings = Spellings::default();
                for field in columns.fields() {
                    names.columns.add(field.name());
                    spellings.add(field.name());
                }
                names.columns_of.insert(name, spellings);
            }
        }
        // An alias has its table's columns.
        for (alias, table) in aliases.of_tables {
            let mut table = Ident::new(table);
            names.relations.resolve(&mut table, "table")?;
            if let Some(columns) = names.columns_of.get(&table.value).cloned() {
                names.columns_of.entry(alias).or_insert(columns);
            }
        }
        Ok(names)
    }

    fn schema_spelling(&self, name: &str) -> Result<String> {
        let mut ident = Ident::new(name);
        self.schemas.resolve(&mut ident, "schema")?;
        Ok(ident.value)
    }

    /// Rewrites the unquoted identifiers of `statement` to the spellings
    /// they match.
    fn apply(&self, statement: &mut Statement) -> Result<()> {
        match statement {
            Statement::Statement(statement) => {
                break_to_result(VisitMut::visit(statement.as_mut(), &mut Rewrite(self)))
            }
            Statement::CopyTo(copy) => match &mut copy.source {
                CopyToSource::Relation(name) => self.relation(name),
                CopyToSource::Query(query) => {
                    break_to_result(VisitMut::visit(query.as_mut(), &mut Rewrite(self)))
                }
            },
            Statement::Explain(explain) => self.apply(&mut explain.statement),
            Statement::CreateExternalTable(_) | Statement::Reset(_) => Ok(()),
        }
    }

    /// A table's name: its last part a relation, the parts before schemas.
    fn relation(&self, name: &mut ObjectName) -> Result<()> {
        let mut parts = idents_mut(name);
        if let Some(table) = parts.pop() {
            self.relations.resolve(table, "table")?;
        }
        for part in parts {
            self.schemas.resolve(part, "schema")?;
        }
        Ok(())
    }

    /// A column, plain or qualified (`t.a`, `s.t.a`), or a field of a
    /// struct column (`c.f`, left to DataFusion).
    fn column(&self, parts: &mut [Ident]) -> Result<()> {
        let Some((column, qualifier)) = parts.split_last_mut() else {
            return Ok(());
        };
        let Some((relation, schemas)) = qualifier.split_last_mut() else {
            return self.columns.resolve(column, "column");
        };
        if !self.relations.contains_ignoring_case(&relation.value)
            && schemas.is_empty()
            && self.columns.contains_ignoring_case(&relation.value)
        {
            // A struct column's field: the column is the first part.
            return self.columns.resolve(relation, "column");
        }
        self.relations.resolve(relation, "table")?;
        for part in schemas {
            self.schemas.resolve(part, "schema")?;
        }
        let columns = self
            .columns_of
            .get(&relation.value)
            .unwrap_or(&self.columns);
        columns.resolve(column, "column")
    }
}

/// The tables of `schema` whose lower-case names are in `wanted`, with
/// their columns. quiver's own schema lists its tables with their columns
/// at once; any other (`information_schema`, a stream's one table) is asked
/// table by table.
async fn tables_named(
    schema: Arc<dyn SchemaProvider>,
    wanted: &HashSet<String>,
) -> Result<Vec<(String, SchemaRef)>> {
    if let Some(store) = schema.downcast_ref::<StoreSchema>() {
        return Ok(store
            .tables()
            .into_iter()
            .filter(|(name, _, _)| wanted.contains(&name.to_lowercase()))
            .map(|(name, _, columns)| (name, columns))
            .collect());
    }
    let mut tables = Vec::new();
    for name in schema.table_names() {
        if wanted.contains(&name.to_lowercase())
            && let Some(table) = schema.table(&name).await?
        {
            tables.push((name, table.schema()));
        }
    }
    Ok(tables)
}

fn idents_mut(name: &mut ObjectName) -> Vec<&mut Ident> {
    name.0
        .iter_mut()
        .filter_map(|part| match part {
            ObjectNamePart::Identifier(ident) => Some(ident),
            ObjectNamePart::Function(_) => None,
        })
        .collect()
}

fn break_to_result(flow: ControlFlow<SqlError>) -> Result<()> {
    match flow {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(e) => Err(e),
    }
}

/// Visits the sqlparser statements inside a DataFusion statement.
fn visit_statement<V: Visitor>(statement: &Statement, visitor: &mut V) -> ControlFlow<V::Break> {
    match statement {
        Statement::Statement(statement) => Visit::visit(statement.as_ref(), visitor),
        Statement::CopyTo(copy) => match &copy.source {
            CopyToSource::Relation(_) => ControlFlow::Continue(()),
            CopyToSource::Query(query) => Visit::visit(query.as_ref(), visitor),
        },
        Statement::Explain(explain) => visit_statement(&explain.statement, visitor),
        Statement::CreateExternalTable(_) | Statement::Reset(_) => ControlFlow::Continue(()),
    }
}

/// The names a statement defines itself: CTEs, aliases of relations and of
/// `SELECT` items.
#[derive(Debug, Default)]
struct Aliases {
    relations: Spellings,
    columns: Spellings,
    columns_of: HashMap<String, Spellings>,
    /// Aliases of tables (`FROM trips AS t`), with the table as written.
    of_tables: Vec<(String, String)>,
}

impl Aliases {
    fn alias(&mut self, alias: &ast::TableAlias, columns: Option<Vec<String>>) {
        self.relations.add(&alias.name.value);
        let columns = if alias.columns.is_empty() {
            columns
        } else {
            Some(alias.columns.iter().map(|c| c.name.value.clone()).collect())
        };
        if let Some(columns) = columns {
            let mut spellings = Spellings::default();
            for column in &columns {
                self.columns.add(column);
                spellings.add(column);
            }
            self.columns_of.insert(alias.name.value.clone(), spellings);
        }
    }
}

impl Visitor for Aliases {
    type Break = ();

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
        if let Some(with) = &query.with {
            for cte in &with.cte_tables {
                self.alias(&cte.alias, output_names(&cte.query.body));
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, select: &Select) -> ControlFlow<()> {
        for item in &select.projection {
            if let SelectItem::ExprWithAlias { alias, .. } = item {
                self.columns.add(&alias.value);
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<()> {
        match factor {
            TableFactor::Table {
                name,
                alias: Some(alias),
                ..
            } => {
                self.alias(alias, None);
                if let Some(ObjectNamePart::Identifier(table)) = name.0.last() {
                    self.of_tables
                        .push((alias.name.value.clone(), table.value.clone()));
                }
            }
            TableFactor::Derived {
                subquery,
                alias: Some(alias),
                ..
            } => self.alias(alias, output_names(&subquery.body)),
            TableFactor::TableFunction {
                alias: Some(alias), ..
            }
            | TableFactor::Function {
                alias: Some(alias), ..
            }
            | TableFactor::UNNEST {
                alias: Some(alias), ..
            }
            | TableFactor::NestedJoin {
                alias: Some(alias), ..
            } => self.alias(alias, None),
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// The names of a query's columns, when its `SELECT` list says them all
/// (no `*`, every item a column or aliased).
fn output_names(body: &SetExpr) -> Option<Vec<String>> {
    match body {
        SetExpr::Select(select) => select
            .projection
            .iter()
            .map(|item| match item {
                SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.clone()),
                SelectItem::UnnamedExpr(Expr::Identifier(ident)) => Some(ident.value.clone()),
                SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) => {
                    parts.last().map(|ident| ident.value.clone())
                }
                _ => None,
            })
            .collect(),
        SetExpr::Query(query) => output_names(&query.body),
        SetExpr::SetOperation { left, .. } => output_names(left),
        _ => None,
    }
}

/// Rewrites identifiers in place; stops at the first ambiguous one.
struct Rewrite<'a>(&'a Names);

impl VisitorMut for Rewrite<'_> {
    type Break = SqlError;

    fn pre_visit_relation(&mut self, name: &mut ObjectName) -> ControlFlow<SqlError> {
        into_flow(self.0.relation(name))
    }

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<SqlError> {
        into_flow(match expr {
            Expr::Identifier(ident) => self.0.columns.resolve(ident, "column"),
            Expr::CompoundIdentifier(parts) => self.0.column(parts),
            _ => Ok(()),
        })
    }

    fn pre_visit_select(&mut self, select: &mut Select) -> ControlFlow<SqlError> {
        for item in &mut select.projection {
            if let SelectItem::QualifiedWildcard(
                SelectItemQualifiedWildcardKind::ObjectName(name),
                _,
            ) = item
                && let Err(e) = self.0.relation(name)
            {
                return ControlFlow::Break(e);
            }
        }
        for from in &mut select.from {
            for join in &mut from.joins {
                if let Some(JoinConstraint::Using(columns)) = constraint(&mut join.join_operator) {
                    for column in columns {
                        for ident in idents_mut(column) {
                            if let Err(e) = self.0.columns.resolve(ident, "column") {
                                return ControlFlow::Break(e);
                            }
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_statement(&mut self, statement: &mut ast::Statement) -> ControlFlow<SqlError> {
        if let ast::Statement::Insert(insert) = statement {
            let table = match &insert.table {
                ast::TableObject::TableName(name) => match name.0.last() {
                    Some(ObjectNamePart::Identifier(table)) => {
                        let mut table = table.clone();
                        if let Err(e) = self.0.relations.resolve(&mut table, "table") {
                            return ControlFlow::Break(e);
                        }
                        Some(table.value)
                    }
                    _ => None,
                },
                ast::TableObject::TableFunction(_) | ast::TableObject::TableQuery(_) => None,
            };
            let columns = table
                .and_then(|table| self.0.columns_of.get(&table))
                .unwrap_or(&self.0.columns);
            for column in &mut insert.columns {
                for ident in idents_mut(column) {
                    if let Err(e) = columns.resolve(ident, "column") {
                        return ControlFlow::Break(e);
                    }
                }
            }
        }
        ControlFlow::Continue(())
    }
}

fn into_flow(result: Result<()>) -> ControlFlow<SqlError> {
    match result {
        Ok(()) => ControlFlow::Continue(()),
        Err(e) => ControlFlow::Break(e),
    }
}

/// The constraint of a join that has one.
fn constraint(operator: &mut JoinOperator) -> Option<&mut JoinConstraint> {
    match operator {
        JoinOperator::Join(c)
        | JoinOperator::Inner(c)
        | JoinOperator::Left(c)
        | JoinOperator::LeftOuter(c)
        | JoinOperator::Right(c)
        | JoinOperator::RightOuter(c)
        | JoinOperator::FullOuter(c)
        | JoinOperator::CrossJoin(c)
        | JoinOperator::Semi(c)
        | JoinOperator::LeftSemi(c)
        | JoinOperator::RightSemi(c)
        | JoinOperator::Anti(c)
        | JoinOperator::LeftAnti(c)
        | JoinOperator::RightAnti(c)
        | JoinOperator::StraightJoin(c) => Some(c),
        _ => None,
    }
}
