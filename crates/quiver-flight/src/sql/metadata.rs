//! Flight SQL's catalog commands: catalogs, schemas, tables, table types,
//! SqlInfo, XDBC type info, and the key commands (quiver has no keys).

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use arrow::array::{ArrayData, RecordBatch, StringArray, make_array};
use arrow::datatypes::{DataType, Field, FieldRef, Fields, Schema, SchemaRef};
use arrow_flight::sql::metadata::{
    GetCatalogsBuilder, SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData,
    XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTables, CommandGetXdbcTypeInfo, Nullable,
    Searchable, SqlInfo, SqlNullOrdering, SqlOuterJoinsSupportLevel, SqlSupportedCaseSensitivity,
    SqlSupportedGroupBy, SqlSupportedSubqueries, SqlSupportedTransaction, SqlSupportedUnions,
    SqlSupportsConvert, SqlTransactionIsolationLevel, SupportedSqlGrammar, XdbcDataType,
    XdbcDatetimeSubcode,
};
use quiver_sql::{CATALOG, SCHEMA, SqlEngine, TableKind};

use crate::{Error, Result};

/// The server's SqlInfo answers: what it is and what SQL it supports.
pub(crate) static SQL_INFO: LazyLock<Result<SqlInfoData, String>> = LazyLock::new(|| {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "quiver");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    info.append(SqlInfo::FlightSqlServerArrowVersion, "59");
    info.append(SqlInfo::FlightSqlServerReadOnly, false);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::None as i32,
    );
    info.append(SqlInfo::FlightSqlServerCancel, true);
    info.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    info.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, false);
    info.append(SqlInfo::FlightSqlServerStatementTimeout, 0i32);
    info.append(SqlInfo::FlightSqlServerTransactionTimeout, 0i32);
    info.append(SqlInfo::SqlDdlCatalog, false);
    info.append(SqlInfo::SqlDdlSchema, false);
    info.append(SqlInfo::SqlDdlTable, true);
    info.append(
        SqlInfo::SqlIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32,
    );
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    info.append(
        SqlInfo::SqlQuotedIdentifierCase,
        SqlSupportedCaseSensitivity::SqlCaseSensitivityCaseInsensitive as i32,
    );
    info.append(SqlInfo::SqlAllTablesAreSelectable, true);
    info.append(
        SqlInfo::SqlNullOrdering,
        SqlNullOrdering::SqlNullsSortedHigh as i32,
    );
    info.append(SqlInfo::SqlSearchStringEscape, "\\");
    info.append(SqlInfo::SqlSupportsColumnAliasing, true);
    info.append(SqlInfo::SqlSchemaTerm, "schema");
    info.append(SqlInfo::SqlCatalogTerm, "catalog");
    info.append(SqlInfo::SqlCatalogAtStart, true);
    info.append(SqlInfo::SqlTransactionsSupported, false);
    info.append(SqlInfo::SqlBatchUpdatesSupported, false);
    append_sql_support(&mut info);
    append_limits(&mut info);
    info.build().map_err(|e| e.to_string())
});

/// A bitmask of the given bit positions (SqlInfo's "bitmask" values).
fn bits(positions: &[i32]) -> i32 {
    positions.iter().fold(0, |mask, bit| mask | (1 << bit))
}

/// What DataFusion's SQL supports, as the JDBC driver's `DatabaseMetaData`
/// asks it (`supportsGroupBy()`, `supportsOuterJoins()`, ...: the driver
/// fails with a `NullPointerException` on an entry the server leaves out).
fn append_sql_support(info: &mut SqlInfoDataBuilder) {
    use SqlInfo as I;
    // NULL + 1 is NULL.
    info.append(I::SqlNullPlusNullIsNull, true);
    info.append(I::SqlSupportsConvert, supported_casts());
    info.append(I::SqlSupportsTableCorrelationNames, true);
    info.append(I::SqlSupportsDifferentTableCorrelationNames, false);
    info.append(I::SqlSupportsExpressionsInOrderBy, true);
    info.append(I::SqlSupportsOrderByUnrelated, true);
    info.append(
        I::SqlSupportedGroupBy,
        bits(&[
            SqlSupportedGroupBy::SqlGroupByUnrelated as i32,
            SqlSupportedGroupBy::SqlGroupByBeyondSelect as i32,
        ]),
    );
    info.append(I::SqlSupportsLikeEscapeClause, true);
    info.append(I::SqlSupportsNonNullableColumns, true);
    info.append(
        I::SqlSupportedGrammar,
        bits(&[
            SupportedSqlGrammar::SqlMinimumGrammar as i32,
            SupportedSqlGrammar::SqlCoreGrammar as i32,
        ]),
    );
    // Bit 0: ANSI92_ENTRY_SQL (arrow-flight does not export the enum).
    info.append(I::SqlAnsi92SupportedLevel, bits(&[0]));
    // No keys, so no referential integrity.
    info.append(I::SqlSupportsIntegrityEnhancementFacility, false);
    info.append(
        I::SqlOuterJoinsSupportLevel,
        SqlOuterJoinsSupportLevel::SqlFullOuterJoins as i32,
    );
    info.append(I::SqlProcedureTerm, "procedure");
    info.append(I::SqlExtraNameCharacters, "");
    // No procedures, indexes or privileges to name a schema or catalog in.
    info.append(I::SqlSchemasSupportedActions, 0i32);
    info.append(I::SqlCatalogsSupportedActions, 0i32);
    info.append(I::SqlSupportedPositionedCommands, 0i32);
    info.append(I::SqlSelectForUpdateSupported, false);
    info.append(I::SqlStoredProceduresSupported, false);
    info.append(I::SqlStoredFunctionsUsingCallSyntaxSupported, false);
    info.append(
        I::SqlSupportedSubqueries,
        bits(&[
            SqlSupportedSubqueries::SqlSubqueriesInComparisons as i32,
            SqlSupportedSubqueries::SqlSubqueriesInExists as i32,
            SqlSupportedSubqueries::SqlSubqueriesInIns as i32,
        ]),
    );
    info.append(I::SqlCorrelatedSubqueriesSupported, true);
    info.append(
        I::SqlSupportedUnions,
        bits(&[
            SqlSupportedUnions::SqlUnion as i32,
            SqlSupportedUnions::SqlUnionAll as i32,
        ]),
    );
    info.append(
        I::SqlDefaultTransactionIsolation,
        SqlTransactionIsolationLevel::SqlTransactionNone as i64,
    );
    info.append(
        I::SqlSupportedTransactionsIsolationLevels,
        bits(&[SqlTransactionIsolationLevel::SqlTransactionNone as i32]),
    );
    info.append(I::SqlDataDefinitionCausesTransactionCommit, false);
    info.append(I::SqlDataDefinitionsInTransactionsIgnored, false);
    info.append(I::SqlSavepointsSupported, false);
    // Parameters are positional: `?` or `$1`.
    info.append(I::SqlNamedParametersSupported, false);
    info.append(I::SqlLocatorsUpdateCopy, false);
}

/// The limits JDBC's `getMax...()` ask: 0 is "no limit, or not known".
fn append_limits(info: &mut SqlInfoDataBuilder) {
    use SqlInfo as I;
    let name = i64::try_from(quiver_store::MAX_NAME_LEN).unwrap_or(i64::MAX);
    info.append(I::SqlMaxTableNameLength, name);
    for unlimited in [
        I::SqlMaxBinaryLiteralLength,
        I::SqlMaxCharLiteralLength,
        I::SqlMaxColumnNameLength,
        I::SqlMaxColumnsInGroupBy,
        I::SqlMaxColumnsInIndex,
        I::SqlMaxColumnsInOrderBy,
        I::SqlMaxColumnsInSelect,
        I::SqlMaxColumnsInTable,
        I::SqlMaxConnections,
        I::SqlMaxCursorNameLength,
        I::SqlMaxIndexLength,
        I::SqlDbSchemaNameLength,
        I::SqlMaxProcedureNameLength,
        I::SqlMaxCatalogNameLength,
        I::SqlMaxRowSize,
        I::SqlMaxStatementLength,
        I::SqlMaxStatements,
        I::SqlMaxTablesInSelect,
        I::SqlMaxUsernameLength,
    ] {
        info.append(unlimited, 0i64);
    }
    info.append(I::SqlMaxRowSizeIncludesBlobs, false);
}

/// The conversions `CAST` makes, by JDBC type (`SqlInfo::SqlSupportsConvert`):
/// numbers and text to and from each other; text to and from dates, times
/// and timestamps; timestamps to dates and times; text to binary.
fn supported_casts() -> BTreeMap<i32, Vec<i32>> {
    use SqlSupportsConvert as C;
    let numbers = [
        C::SqlConvertBigint,
        C::SqlConvertBit,
        C::SqlConvertDecimal,
        C::SqlConvertFloat,
        C::SqlConvertInteger,
        C::SqlConvertNumeric,
        C::SqlConvertReal,
        C::SqlConvertSmallint,
        C::SqlConvertTinyint,
    ];
    let text = [
        C::SqlConvertChar,
        C::SqlConvertLongvarchar,
        C::SqlConvertVarchar,
    ];
    let binary = [
        C::SqlConvertBinary,
        C::SqlConvertLongvarbinary,
        C::SqlConvertVarbinary,
    ];
    let times = [C::SqlConvertDate, C::SqlConvertTime, C::SqlConvertTimestamp];
    let ids = |kinds: &[&[C]]| -> Vec<i32> {
        let mut ids: Vec<i32> = kinds
            .iter()
            .flat_map(|k| k.iter().map(|c| *c as i32))
            .collect();
        ids.sort_unstable();
        ids
    };
    let mut casts = BTreeMap::new();
    for from in numbers {
        casts.insert(from as i32, ids(&[&numbers, &text]));
    }
    for from in text {
        casts.insert(from as i32, ids(&[&numbers, &text, &binary, &times]));
    }
    for from in binary {
        casts.insert(from as i32, ids(&[&binary, &text]));
    }
    casts.insert(
        C::SqlConvertDate as i32,
        ids(&[&text, &[C::SqlConvertDate, C::SqlConvertTimestamp]]),
    );
    casts.insert(
        C::SqlConvertTime as i32,
        ids(&[&text, &[C::SqlConvertTime]]),
    );
    casts.insert(C::SqlConvertTimestamp as i32, ids(&[&text, &times]));
    casts
}

/// The SQL types quiver's engine has, as GetXdbcTypeInfo lists them.
pub(crate) static XDBC_TYPES: LazyLock<Result<XdbcTypeInfoData, String>> = LazyLock::new(|| {
    let mut types = XdbcTypeInfoDataBuilder::new();
    let simple = |name: &str, data_type: XdbcDataType, size: Option<i32>| XdbcTypeInfo {
        type_name: name.to_string(),
        data_type,
        column_size: size,
        literal_prefix: None,
        literal_suffix: None,
        create_params: None,
        nullable: Nullable::NullabilityNullable,
        case_sensitive: false,
        searchable: Searchable::Full,
        unsigned_attribute: Some(false),
        fixed_prec_scale: false,
        auto_increment: Some(false),
        local_type_name: Some(name.to_string()),
        minimum_scale: None,
        maximum_scale: None,
        sql_data_type: data_type,
        datetime_subcode: None,
        num_prec_radix: None,
        interval_precision: None,
    };
    let quoted =
        |name: &str, data_type: XdbcDataType, subcode: Option<XdbcDatetimeSubcode>| XdbcTypeInfo {
            literal_prefix: Some("'".into()),
            literal_suffix: Some("'".into()),
            case_sensitive: true,
            datetime_subcode: subcode,
            ..simple(name, data_type, None)
        };
    types.append(simple("BOOLEAN", XdbcDataType::XdbcBit, Some(1)));
    types.append(simple("TINYINT", XdbcDataType::XdbcTinyint, Some(3)));
    types.append(simple("SMALLINT", XdbcDataType::XdbcSmallint, Some(5)));
    types.append(simple("INTEGER", XdbcDataType::XdbcInteger, Some(10)));
    types.append(simple("BIGINT", XdbcDataType::XdbcBigint, Some(19)));
    types.append(simple("REAL", XdbcDataType::XdbcReal, Some(24)));
    types.append(simple("DOUBLE", XdbcDataType::XdbcDouble, Some(53)));
    types.append(XdbcTypeInfo {
        create_params: Some(vec!["precision".into(), "scale".into()]),
        fixed_prec_scale: true,
        minimum_scale: Some(0),
        maximum_scale: Some(38),
        num_prec_radix: Some(10),
        ..simple("DECIMAL", XdbcDataType::XdbcDecimal, Some(38))
    });
    types.append(quoted("VARCHAR", XdbcDataType::XdbcVarchar, None));
    types.append(quoted("BYTEA", XdbcDataType::XdbcVarbinary, None));
    types.append(quoted(
        "DATE",
        XdbcDataType::XdbcDate, // XDBC_SUBCODE_DATE is an alias of 1, which prost names Year.
        Some(XdbcDatetimeSubcode::XdbcSubcodeYear),
    ));
    types.append(quoted(
        "TIME",
        XdbcDataType::XdbcTime,
        Some(XdbcDatetimeSubcode::XdbcSubcodeTime),
    ));
    types.append(quoted(
        "TIMESTAMP",
        XdbcDataType::XdbcTimestamp,
        Some(XdbcDatetimeSubcode::XdbcSubcodeTimestamp),
    ));
    types.build().map_err(|e| e.to_string())
});

fn built<T>(data: &'static LazyLock<Result<T, String>>) -> Result<&'static T> {
    data.as_ref().map_err(|e| Error::Internal(e.clone()))
}

/// GetCatalogs: the one catalog.
pub(crate) fn catalogs() -> Result<RecordBatch> {
    let mut builder = GetCatalogsBuilder::new();
    builder.append(CATALOG);
    Ok(builder.build()?)
}

/// GetDbSchemas: the one schema, if the filters match it.
pub(crate) fn db_schemas(command: CommandGetDbSchemas) -> Result<RecordBatch> {
    let mut builder = command.into_builder();
    builder.append(CATALOG, SCHEMA);
    Ok(builder.build()?)
}

/// GetTables: every table the filters match, with its schema if asked
/// (each column described by Flight SQL's column metadata).
pub(crate) fn tables(engine: &SqlEngine, command: CommandGetTables) -> Result<RecordBatch> {
    let mut builder = command.into_builder();
    for table in engine.tables() {
        builder.append(
            CATALOG,
            SCHEMA,
            &table.name,
            table.kind.table_type(),
            &described(&table.name, &table.schema),
        )?;
    }
    Ok(builder.build()?)
}

/// The SQL name of a column type: GetXdbcTypeInfo's names, DataFusion's for
/// unsigned integers and intervals (`None` for lists, structs, ...).
fn sql_type_name(data_type: &DataType) -> Option<&'static str> {
    Some(match data_type {
        DataType::Boolean => "BOOLEAN",
        DataType::Int8 => "TINYINT",
        DataType::Int16 => "SMALLINT",
        DataType::Int32 => "INTEGER",
        DataType::Int64 => "BIGINT",
        DataType::UInt8 => "TINYINT UNSIGNED",
        DataType::UInt16 => "SMALLINT UNSIGNED",
        DataType::UInt32 => "INTEGER UNSIGNED",
        DataType::UInt64 => "BIGINT UNSIGNED",
        DataType::Float16 | DataType::Float32 => "REAL",
        DataType::Float64 => "DOUBLE",
        DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => "DECIMAL",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR",
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BYTEA",
        DataType::Date32 | DataType::Date64 => "DATE",
        DataType::Time32(_) | DataType::Time64(_) => "TIME",
        DataType::Timestamp(..) => "TIMESTAMP",
        DataType::Interval(_) => "INTERVAL",
        DataType::Dictionary(_, values) => return sql_type_name(values),
        _ => return None,
    })
}

/// `schema` with Flight SQL's column metadata on each field (its table, SQL
/// type name, a decimal's precision and scale, not auto-incremented), as
/// the JDBC driver's `getColumns` and ADBC's `adbc_get_objects` read them.
fn described(table: &str, schema: &Schema) -> Schema {
    let fields = schema.fields().iter().map(|field| {
        let mut metadata = field.metadata().clone();
        let mut set = |key: &str, value: String| {
            metadata.insert(format!("ARROW:FLIGHT:SQL:{key}"), value);
        };
        set("CATALOG_NAME", CATALOG.into());
        set("DB_SCHEMA_NAME", SCHEMA.into());
        set("TABLE_NAME", table.into());
        if let Some(name) = sql_type_name(field.data_type()) {
            set("TYPE_NAME", name.into());
        }
        let decimal = match field.data_type() {
            DataType::Decimal32(p, s) | DataType::Decimal64(p, s) => Some((*p, *s)),
            DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => Some((*p, *s)),
            _ => None,
        };
        if let Some((precision, scale)) = decimal {
            set("PRECISION", precision.to_string());
            set("SCALE", scale.to_string());
        }
        set("IS_AUTO_INCREMENT", "0".into());
        Arc::new(field.as_ref().clone().with_metadata(metadata))
    });
    Schema::new_with_metadata(fields.collect::<Vec<_>>(), schema.metadata().clone())
}

/// The schema GetTables answers with.
pub(crate) fn tables_schema(command: CommandGetTables) -> SchemaRef {
    command.into_builder().schema()
}

/// GetTableTypes: stored tables, external tables, views.
pub(crate) fn table_types() -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new(
        "table_type",
        DataType::Utf8,
        false,
    )]));
    let types = StringArray::from_iter_values(TableKind::ALL.iter().map(|k| k.table_type()));
    Ok(RecordBatch::try_new(schema, vec![Arc::new(types)])?)
}

/// GetSqlInfo: the asked-for entries (all when none are named).
pub(crate) fn sql_info(command: CommandGetSqlInfo) -> Result<RecordBatch> {
    with_java_map_names(command.into_builder(built(&SQL_INFO)?).build()?)
}

/// The schema GetSqlInfo answers with.
pub(crate) fn sql_info_schema() -> Result<SchemaRef> {
    Ok(java_map_schema(&built(&SQL_INFO)?.schema()))
}

/// `data_type` with each map's entries named `key` and `value`, as Arrow's
/// format names them and Arrow Java reads them: arrow-rs names them `keys`
/// and `values`, and the JDBC driver then finds no entries in
/// SQL_SUPPORTS_CONVERT (`supportsConvert(from, to)` is always false).
fn java_map_type(data_type: &DataType) -> DataType {
    let inner = |field: &FieldRef| -> FieldRef {
        Arc::new(
            field
                .as_ref()
                .clone()
                .with_data_type(java_map_type(field.data_type())),
        )
    };
    match data_type {
        DataType::Map(entries, sorted) => {
            let DataType::Struct(fields) = entries.data_type() else {
                return data_type.clone();
            };
            let fields: Fields = fields
                .iter()
                .zip(["key", "value"])
                .map(|(field, name)| Arc::new(inner(field).as_ref().clone().with_name(name)))
                .collect();
            let entries = entries
                .as_ref()
                .clone()
                .with_data_type(DataType::Struct(fields));
            DataType::Map(Arc::new(entries), *sorted)
        }
        DataType::List(item) => DataType::List(inner(item)),
        DataType::Struct(fields) => DataType::Struct(fields.iter().map(inner).collect()),
        DataType::Union(fields, mode) => DataType::Union(
            fields
                .iter()
                .map(|(id, field)| (id, inner(field)))
                .collect(),
            *mode,
        ),
        other => other.clone(),
    }
}

fn java_map_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<FieldRef> = schema
        .fields()
        .iter()
        .map(|field| {
            Arc::new(
                field
                    .as_ref()
                    .clone()
                    .with_data_type(java_map_type(field.data_type())),
            )
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// `data` as `data_type`: the same buffers under another type of the same
/// layout (its children retyped to match).
fn retyped(data: ArrayData, data_type: DataType) -> Result<ArrayData> {
    let child_types: Vec<DataType> = match &data_type {
        DataType::Map(entries, _) => vec![entries.data_type().clone()],
        DataType::List(item) => vec![item.data_type().clone()],
        DataType::Struct(fields) => fields.iter().map(|f| f.data_type().clone()).collect(),
        DataType::Union(fields, _) => fields.iter().map(|(_, f)| f.data_type().clone()).collect(),
        _ => data
            .child_data()
            .iter()
            .map(|c| c.data_type().clone())
            .collect(),
    };
    let children = data
        .child_data()
        .iter()
        .cloned()
        .zip(child_types)
        .map(|(child, child_type)| retyped(child, child_type))
        .collect::<Result<Vec<_>>>()?;
    Ok(data
        .into_builder()
        .data_type(data_type)
        .child_data(children)
        .build()?)
}

fn with_java_map_names(batch: RecordBatch) -> Result<RecordBatch> {
    let schema = java_map_schema(&batch.schema());
    let columns = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(column, field)| {
            Ok(make_array(retyped(
                column.to_data(),
                field.data_type().clone(),
            )?))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// GetXdbcTypeInfo: the SQL types, or the one asked for.
pub(crate) fn xdbc_type_info(command: CommandGetXdbcTypeInfo) -> Result<RecordBatch> {
    Ok(command.into_builder(built(&XDBC_TYPES)?).build()?)
}

/// The schema GetXdbcTypeInfo answers with.
pub(crate) fn xdbc_type_info_schema() -> Result<SchemaRef> {
    Ok(built(&XDBC_TYPES)?.schema())
}

/// GetPrimaryKeys' schema (quiver's tables have no keys: always empty).
pub(crate) static PRIMARY_KEYS: LazyLock<SchemaRef> = LazyLock::new(|| {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_sequence", DataType::Int32, false),
        Field::new("key_name", DataType::Utf8, true),
    ]))
});

/// The schema of GetExportedKeys, GetImportedKeys and GetCrossReference
/// (always empty: quiver has no foreign keys).
pub(crate) static FOREIGN_KEYS: LazyLock<SchemaRef> = LazyLock::new(|| {
    let text = |name: &str, nullable| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
});
