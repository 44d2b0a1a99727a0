//! `quiver apply NAME --source T [--into U]`: a stored table through a
//! served function on the server, so the data never leaves it (DoExchange
//! with `{"apply": NAME, "source": T, ...}`). With `--into` the server stores
//! the results and the stream carries one metadata-only message, its
//! summary; without, the results stream back into `-o FILE` or are counted.

use arrow_flight::decode::DecodedPayload;
use arrow_flight::{FlightData, FlightDescriptor};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

use super::output::{Output, Received, do_exchange, receive};
use super::{ApplyArgs, CmdResult};
use crate::client::{Connector, describe};
use crate::commands::progress_bar;
use crate::files::Format;

pub(crate) async fn apply(connector: &Connector, args: ApplyArgs) -> CmdResult {
    let mut output = match &args.output {
        Some(path) => Output::file(path.clone(), Format::resolve(args.format, path)?),
        None => Output::Discard,
    };
    let bar = match &args.into {
        Some(into) => ProgressBar::new_spinner()
            .with_style(
                ProgressStyle::with_template("{spinner} {msg} {elapsed}").expect("valid template"),
            )
            .with_message(format!(
                "{} over '{}' into '{into}'",
                args.name, args.source
            )),
        None => progress_bar(None),
    };
    let result = call(connector, &command(&args), &mut output, &bar).await;
    bar.finish_and_clear();
    let received = match result {
        Ok(received) => received,
        Err(e) => {
            output.abandon().await;
            return Err(e);
        }
    };
    output.finish(received.schema.clone()).await?;
    println!("{}", report(&args, &received)?);
    Ok(())
}

/// The DoExchange command of `args`.
pub(super) fn command(args: &ApplyArgs) -> String {
    let mut command = json!({ "apply": args.name, "source": args.source });
    if let Some(into) = &args.into {
        command["into"] = json!(into);
        command["mode"] = json!(args.mode.unwrap_or(super::ApplyMode::Replace).as_str());
        if let Some(partitions) = args.partitions {
            command["partitions"] = json!(partitions);
        }
    }
    command.to_string()
}

/// Sends `command` (the request is its descriptor alone) and reads the
/// results into `output`; `bar` counts result rows.
pub(super) async fn call(
    connector: &Connector,
    command: &str,
    output: &mut Output,
    bar: &ProgressBar,
) -> Result<Received, Box<dyn std::error::Error>> {
    let request = FlightData::new().with_descriptor(FlightDescriptor::new_cmd(command.to_string()));
    let mut client = connector.connect_server().await?;
    let results = do_exchange(&mut client, futures::stream::iter([request]))
        .await
        .map_err(describe)?;
    receive(results, output, |message| {
        if let DecodedPayload::RecordBatch(batch) = &message.payload {
            bar.inc(batch.num_rows() as u64);
        }
    })
    .await
}

/// What `apply` prints: the server's summary (JSON, as sent) with `--into`,
/// else the rows written or counted.
pub(super) fn report(args: &ApplyArgs, received: &Received) -> Result<String, String> {
    if args.into.is_some() {
        let summary = received
            .summary
            .as_ref()
            .ok_or("the server ended the apply without its summary")?;
        serde_json::from_slice::<Value>(summary)
            .map_err(|e| format!("the apply's summary is not JSON: {e}"))?;
        return Ok(String::from_utf8_lossy(summary).into_owned());
    }
    Ok(match &args.output {
        Some(path) => format!(
            "wrote {} rows of {} over '{}' to {}",
            received.rows,
            args.name,
            args.source,
            path.display()
        ),
        None => format!(
            "{} over '{}': {} rows (not kept: --into TABLE stores them, -o FILE writes them)",
            args.name, args.source, received.rows
        ),
    })
}
