//! The functions a server serves, as its workers' hellos describe them.

use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::{FunctionError, Result};

/// One function, as declared with `@quiver.functions.function`.
#[derive(Debug, Clone)]
pub struct FunctionSpec {
    /// Its name: an identifier, unique on the server.
    pub name: String,
    /// The module that defines it.
    pub module: String,
    /// What it does (the docstring's first paragraph unless given).
    pub description: String,
    /// Whether it takes and returns pandas DataFrames.
    pub pandas: bool,
    /// Whether it may be called from SQL.
    pub sql: bool,
    /// The declared input schema: every input must match it.
    pub input_schema: Option<SchemaRef>,
    /// The declared output schema: every result matches it.
    pub output_schema: Option<SchemaRef>,
    /// The hello's entry, as `list-functions` answers it.
    entry: Value,
}

/// One function in a worker's hello.
#[derive(Debug, Deserialize)]
pub(crate) struct Declared {
    name: String,
    module: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    pandas: bool,
    #[serde(default = "yes")]
    sql: bool,
    input_schema: Option<String>,
    output_schema: Option<String>,
}

fn yes() -> bool {
    true
}

impl FunctionSpec {
    pub(crate) fn from_declared(d: Declared) -> Result<Self> {
        let schema = |encoded: &Option<String>, which: &str| -> Result<Option<SchemaRef>> {
            let Some(encoded) = encoded else {
                return Ok(None);
            };
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| {
                    FunctionError::Startup(format!(
                        "function {}'s {which}: bad base64: {e}",
                        d.name
                    ))
                })?;
            let schema = arrow::ipc::convert::try_schema_from_ipc_buffer(&bytes).map_err(|e| {
                FunctionError::Startup(format!(
                    "function {}'s {which} is not an Arrow IPC schema: {e}",
                    d.name
                ))
            })?;
            Ok(Some(Arc::new(schema)))
        };
        let input_schema = schema(&d.input_schema, "input_schema")?;
        let output_schema = schema(&d.output_schema, "output_schema")?;
        let entry = json!({
            "name": d.name,
            "module": d.module,
            "description": d.description,
            "pandas": d.pandas,
            "sql": d.sql,
            "input_schema": d.input_schema,
            "output_schema": d.output_schema,
            "input_fields": input_schema.as_deref().map(fields),
            "output_fields": output_schema.as_deref().map(fields),
        });
        Ok(Self {
            name: d.name,
            module: d.module,
            description: d.description,
            pandas: d.pandas,
            sql: d.sql,
            input_schema,
            output_schema,
            entry,
        })
    }

    /// Checks `schema` against the declared input schema: the same field
    /// names and types, in order (nullability and metadata are not compared).
    pub fn check_input(&self, schema: &Schema) -> Result<()> {
        let Some(declared) = &self.input_schema else {
            return Ok(());
        };
        if same_shape(declared, schema) {
            return Ok(());
        }
        Err(FunctionError::SchemaMismatch(format!(
            "function {} takes ({}), but the input is ({})",
            self.name,
            fields(declared).join(", "),
            fields(schema).join(", ")
        )))
    }
}

/// Whether two schemas have the same field names and types, in order.
pub fn same_shape(a: &Schema, b: &Schema) -> bool {
    a.fields().len() == b.fields().len()
        && a.fields()
            .iter()
            .zip(b.fields())
            .all(|(x, y)| x.name() == y.name() && x.data_type() == y.data_type())
}

/// A schema's fields as `name: type` strings.
pub fn fields(schema: &Schema) -> Vec<String> {
    schema
        .fields()
        .iter()
        .map(|f| format!("{}: {}", f.name(), f.data_type()))
        .collect()
}

/// Every function served, fixed by the first worker's hello.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    functions: Vec<Arc<FunctionSpec>>,
    /// The hello's `functions` list as received, to compare later hellos with.
    declared: Value,
}

impl Registry {
    pub(crate) fn from_hello(declared: Value) -> Result<Self> {
        let list: Vec<Declared> = serde_json::from_value(declared.clone())
            .map_err(|e| FunctionError::Startup(format!("a malformed hello: {e}")))?;
        let mut functions: Vec<Arc<FunctionSpec>> = Vec::with_capacity(list.len());
        for d in list {
            if functions.iter().any(|f| f.name == d.name) {
                return Err(FunctionError::Startup(format!(
                    "two functions are named {}",
                    d.name
                )));
            }
            functions.push(Arc::new(FunctionSpec::from_declared(d)?));
        }
        Ok(Self {
            functions,
            declared,
        })
    }

    /// Whether a later worker's hello declares the same functions.
    pub(crate) fn same_as(&self, declared: &Value) -> bool {
        &self.declared == declared
    }

    /// The function named `name`.
    pub fn get(&self, name: &str) -> Result<&Arc<FunctionSpec>> {
        self.functions
            .iter()
            .find(|f| f.name == name)
            .ok_or_else(|| FunctionError::NotFound {
                name: name.to_string(),
                served: self.functions.iter().map(|f| f.name.clone()).collect(),
            })
    }

    /// Every function, in the order the modules declared them.
    pub fn functions(&self) -> &[Arc<FunctionSpec>] {
        &self.functions
    }

    /// The `functions` list of the `list-functions` action.
    pub fn entries(&self) -> Value {
        Value::Array(self.functions.iter().map(|f| f.entry.clone()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::{DataType, Field};
    use arrow::ipc::writer::{IpcDataGenerator, IpcWriteOptions};

    fn encoded(schema: &Schema) -> String {
        let data = IpcDataGenerator {}.schema_to_bytes_with_dictionary_tracker(
            schema,
            &mut arrow::ipc::writer::DictionaryTracker::new(false),
            &IpcWriteOptions::default(),
        );
        let mut bytes = vec![0xff, 0xff, 0xff, 0xff];
        bytes.extend((data.ipc_message.len() as u32).to_le_bytes());
        bytes.extend(&data.ipc_message);
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    fn input() -> Schema {
        Schema::new(vec![
            Field::new("a", DataType::Float64, true),
            Field::new("b", DataType::Float64, true),
        ])
    }

    fn registry() -> Registry {
        Registry::from_hello(json!([
            {"name": "score", "module": "m", "description": "d", "pandas": false, "sql": true,
             "input_schema": encoded(&input()), "output_schema": null},
            {"name": "clean", "module": "m", "input_schema": null, "output_schema": null},
        ]))
        .unwrap()
    }

    #[test]
    fn a_hello_gives_the_functions_and_their_schemas() {
        let r = registry();
        let score = r.get("score").unwrap();
        assert_eq!(score.input_schema.as_deref(), Some(&input()));
        assert!(score.output_schema.is_none());
        let entries = r.entries();
        assert_eq!(
            entries[0]["input_fields"],
            json!(["a: Float64", "b: Float64"])
        );
        assert_eq!(entries[1]["sql"], json!(true));
    }

    #[test]
    fn unknown_names_list_what_is_served() {
        let e = registry().get("nope").unwrap_err();
        assert_eq!(e.kind(), "FUNCTION_NOT_FOUND");
        assert!(e.to_string().contains("score, clean"), "{e}");
        let e = Registry::default().get("nope").unwrap_err();
        assert!(e.to_string().contains("--functions"), "{e}");
    }

    #[test]
    fn inputs_are_checked_by_name_and_type_not_nullability() {
        let r = registry();
        let score = r.get("score").unwrap();
        let relaxed = Schema::new(vec![
            Field::new("a", DataType::Float64, false),
            Field::new("b", DataType::Float64, false),
        ]);
        score.check_input(&relaxed).unwrap();
        let wrong = Schema::new(vec![Field::new("a", DataType::Float32, true)]);
        let e = score.check_input(&wrong).unwrap_err();
        assert_eq!(e.kind(), "SCHEMA_MISMATCH");
        assert!(e.to_string().contains("(a: Float32)"), "{e}");
        r.get("clean").unwrap().check_input(&wrong).unwrap();
    }

    #[test]
    fn duplicate_names_and_bad_schemas_refuse_to_start() {
        let dup = Registry::from_hello(json!([
            {"name": "f", "module": "a", "input_schema": null, "output_schema": null},
            {"name": "f", "module": "b", "input_schema": null, "output_schema": null},
        ]));
        assert!(dup.unwrap_err().to_string().contains("two functions"));
        let bad = Registry::from_hello(json!([
            {"name": "f", "module": "a", "input_schema": "AAAA", "output_schema": null},
        ]));
        assert!(matches!(bad, Err(FunctionError::Startup(_))));
    }
}
