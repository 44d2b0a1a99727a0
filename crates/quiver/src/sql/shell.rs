//! `quiver sql` with no statement: an interactive shell, as psql's and
//! duckdb's. Statements end with `;` and may span lines; lines starting with
//! `\` are the shell's own commands (`\d`, `\timing`, `\q`); the history is
//! kept across sessions.

use std::path::PathBuf;
use std::time::Instant;

use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use super::{CmdResult, Session, SqlFormat, timing};
use crate::cli::{LsArgs, NameArg};
use crate::client::Connector;

const HELP: &str = "\
  End a statement with ; (it may span lines). Ctrl-C drops the statement being typed,
  Ctrl-D or \\q leaves.
  \\d         list the tables: rows, size, columns
  \\d NAME    describe table NAME: schema, size, endpoints
  \\timing    print how long each statement takes (on/off)
  \\q         quit
  \\?         this help";

/// Runs the shell until `\q` or the end of input.
pub(super) async fn run(
    connector: &Connector,
    format: Option<SqlFormat>,
    mut timed: bool,
) -> CmdResult {
    let format = match format {
        None => SqlFormat::Table,
        Some(format @ (SqlFormat::Table | SqlFormat::Csv | SqlFormat::Json)) => format,
        Some(_) => return Err("the shell prints table, csv or json; for files use -o".into()),
    };
    let mut session = Session::connect(connector).await?;
    let mut editor = DefaultEditor::new()?;
    let history = history_file();
    if let Some(path) = &history {
        // None yet is fine.
        let _ = editor.load_history(path);
    }
    println!(
        "quiver sql on {}: end statements with ; (\\? for help, \\q to quit)",
        connector.server()
    );
    let mut statement = String::new();
    loop {
        let prompt = if statement.is_empty() {
            "quiver> "
        } else {
            "     -> "
        };
        // Reading the terminal blocks: the runtime moves its other work
        // (the connection's) off this thread meanwhile.
        let line = match tokio::task::block_in_place(|| editor.readline(prompt)) {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => {
                statement.clear();
                continue;
            }
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let trimmed = line.trim();
        if statement.is_empty() && trimmed.starts_with('\\') {
            let _ = editor.add_history_entry(trimmed);
            match meta(connector, trimmed, &mut timed).await {
                Ok(Flow::Quit) => break,
                Ok(Flow::Go) => {}
                Err(e) => eprintln!("ERROR: {e}"),
            }
            continue;
        }
        if statement.is_empty() && trimmed.is_empty() {
            continue;
        }
        statement.push_str(&line);
        statement.push('\n');
        if !statement.trim_end().ends_with(';') {
            continue;
        }
        let text = statement.trim().to_string();
        statement.clear();
        let _ = editor.add_history_entry(&text);
        let sql = text.trim_end_matches(';').trim();
        if sql.is_empty() {
            continue;
        }
        let started = Instant::now();
        match session.run(sql, &[], format, None).await {
            Ok(rows) if timed => println!("{}", timing(rows, started)),
            Ok(_) => {}
            Err(e) => eprintln!("ERROR: {e}"),
        }
    }
    if let Some(path) = &history
        && let Err(e) = editor.save_history(path)
    {
        eprintln!("note: the history was not saved to {}: {e}", path.display());
    }
    Ok(())
}

/// What the shell does after a command.
enum Flow {
    Go,
    Quit,
}

/// Runs the shell's own command `line` (starting with `\`).
async fn meta(connector: &Connector, line: &str, timed: &mut bool) -> CmdResult<Flow> {
    let mut words = line.split_whitespace();
    let command = words.next().unwrap_or_default();
    let argument = words.next();
    match (command, argument) {
        ("\\q" | "\\quit", _) => return Ok(Flow::Quit),
        ("\\?" | "\\h" | "\\help", _) => println!("{HELP}"),
        ("\\timing", _) => {
            *timed = match argument {
                Some("on") => true,
                Some("off") => false,
                _ => !*timed,
            };
            println!("Timing is {}.", if *timed { "on" } else { "off" });
        }
        ("\\d" | "\\dt", None) => {
            let args = LsArgs {
                prefix: String::new(),
                json: false,
            };
            crate::commands::ls(connector, args).await?;
        }
        ("\\d", Some(name)) => {
            let args = NameArg {
                name: name.to_string(),
            };
            crate::commands::info(connector, args).await?;
        }
        (other, _) => return Err(format!("unknown command {other}: \\? lists them").into()),
    }
    Ok(Flow::Go)
}

/// Where the history is kept: `$QUIVER_HISTORY`, else `~/.quiver_history`.
fn history_file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("QUIVER_HISTORY") {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".quiver_history"))
}
