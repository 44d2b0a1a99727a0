//! `quiver functions`: the served functions, from the `list-functions` action.

use std::fmt::Write as _;

use arrow_flight::Action;
use futures::TryStreamExt;
use serde_json::Value;

use super::{CmdResult, FunctionsArgs};
use crate::client::{Connector, describe};

pub(crate) async fn list(connector: &Connector, args: FunctionsArgs) -> CmdResult {
    let mut client = connector.connect_server().await?;
    let bodies: Vec<bytes::Bytes> = client
        .do_action(Action::new("list-functions", ""))
        .await
        .map_err(describe)?
        .try_collect()
        .await
        .map_err(describe)?;
    let body = bodies
        .first()
        .ok_or("the server answered list-functions with nothing")?;
    if args.json {
        println!("{}", String::from_utf8_lossy(body));
        return Ok(());
    }
    let listing: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the server's list-functions is not JSON: {e}"))?;
    print!("{}", render(&listing));
    Ok(())
}

/// One function per line, `name(input fields) -> (output fields)` (`any`
/// where no schema is declared), its description indented below; then the
/// workers.
pub(super) fn render(listing: &Value) -> String {
    let mut out = String::new();
    let functions = listing["functions"]
        .as_array()
        .map_or(&[][..], Vec::as_slice);
    if functions.is_empty() {
        out.push_str("no functions served (quiver serve --functions MODULE)\n");
    }
    for function in functions {
        let name = function["name"].as_str().unwrap_or("?");
        let input = fields(&function["input_fields"]);
        let output = match function["output_fields"].as_array() {
            Some(_) => format!("({})", fields(&function["output_fields"])),
            None => "any".to_string(),
        };
        let pandas = if function["pandas"].as_bool() == Some(true) {
            "  [pandas]"
        } else {
            ""
        };
        let _ = writeln!(out, "{name}({input}) -> {output}{pandas}");
        let description = function["description"].as_str().unwrap_or("");
        let description = description.split_whitespace().collect::<Vec<_>>().join(" ");
        if !description.is_empty() {
            let _ = writeln!(out, "    {description}");
        }
    }
    let workers = &listing["workers"];
    if let (Some(alive), Some(configured)) =
        (workers["alive"].as_u64(), workers["configured"].as_u64())
    {
        let _ = writeln!(out, "workers: {alive} of {configured} alive");
    }
    out
}

/// Fields as the server wrote them (`"fare_amount: double"`), joined; `any`
/// when undeclared.
fn fields(fields: &Value) -> String {
    match fields.as_array() {
        Some(list) => list
            .iter()
            .map(|f| f.as_str().map_or_else(|| f.to_string(), str::to_string))
            .collect::<Vec<_>>()
            .join(", "),
        None => "any".to_string(),
    }
}
