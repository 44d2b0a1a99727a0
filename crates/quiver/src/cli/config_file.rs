//! `quiver serve --config FILE`: the serve flags from a TOML file, and
//! `--print-config`: the settings in force and where each came from.
//!
//! The file's keys are the flags' long names (`max-memory = "8GiB"`,
//! `table = ["taxi=/data/taxi"]`). A flag on the command line or its
//! `QUIVER_...` variable overrides the file; the file overrides the default.
//! A key that is no flag is an error naming it. The file's values go through
//! the flags' own parsers, so a bad value is reported as for the flag.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, CommandFactory, FromArgMatches};

use super::Cli;

/// Flags that say what to do rather than how to serve: not keys of the file.
const NOT_KEYS: [&str; 2] = ["config", "print-config"];

/// What the command line asks for.
#[derive(Debug)]
pub(crate) enum Invocation {
    /// Run the command.
    Run(Box<Cli>),
    /// Print this (`quiver serve --print-config`) and exit.
    Print(String),
}

/// Parses `args` (the program's name first) with serve's config file, if one
/// is named. Usage errors, `--help` and `--version` exit as clap does.
pub(crate) fn parse(mut args: Vec<OsString>) -> Result<Invocation, String> {
    let matches = get_matches(&args);
    let Some(("serve", serve)) = matches.subcommand() else {
        return Ok(Invocation::Run(Box::new(from_matches(&matches))));
    };
    let (matches, file) = match serve.get_one::<PathBuf>("config") {
        None => (matches, None),
        Some(path) => {
            let (extra, keys) = file_args(path, serve)?;
            args.extend(extra);
            (get_matches(&args), Some((path.clone(), keys)))
        }
    };
    let cli = from_matches(&matches);
    let Some(("serve", serve)) = matches.subcommand() else {
        unreachable!("the same arguments parsed as serve before");
    };
    if serve.get_flag("print_config") {
        return Ok(Invocation::Print(render(serve, file.as_ref())));
    }
    Ok(Invocation::Run(Box::new(cli)))
}

fn get_matches(args: &[OsString]) -> ArgMatches {
    Cli::command()
        .try_get_matches_from(args)
        .unwrap_or_else(|e| e.exit())
}

fn from_matches(matches: &ArgMatches) -> Cli {
    Cli::from_arg_matches(matches).unwrap_or_else(|e| e.exit())
}

/// `quiver serve`'s settings (its flags but the actions).
fn settings() -> Vec<Arg> {
    let cli = Cli::command();
    let Some(serve) = cli.find_subcommand("serve") else {
        return Vec::new();
    };
    serve
        .get_arguments()
        .filter(|a| a.get_long().is_some_and(|long| !NOT_KEYS.contains(&long)))
        .cloned()
        .collect()
}

/// The arguments that give the file's settings, for those neither on the
/// command line nor in the environment; and the keys they come from.
fn file_args(path: &Path, serve: &ArgMatches) -> Result<(Vec<OsString>, BTreeSet<String>), String> {
    let shown = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("--config {shown}: {e}"))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e| format!("--config {shown}: not TOML: {e}"))?;
    let settings = settings();
    let mut args = Vec::new();
    let mut from_file = BTreeSet::new();
    for (key, value) in &table {
        let Some(arg) = settings.iter().find(|a| a.get_long() == Some(key.as_str())) else {
            return Err(unknown_key(&shown.to_string(), key, &settings));
        };
        let overridden = matches!(
            serve.value_source(arg.get_id().as_str()),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        );
        if overridden {
            continue;
        }
        let bad = |what: &str| format!("--config {shown}: `{key}` must be {what}");
        match arg.get_action() {
            ArgAction::SetTrue => match value {
                toml::Value::Boolean(true) => args.push(format!("--{key}").into()),
                toml::Value::Boolean(false) => {}
                _ => return Err(bad("true or false")),
            },
            // `[s3.BUCKET]` blocks: `--s3 BUCKET.KEY=VALUE` each (a list of
            // those strings, as --print-config writes them, is taken too).
            ArgAction::Append if key == "s3" && value.is_table() => {
                let buckets = value.as_table().into_iter().flatten();
                for (bucket, block) in buckets {
                    let toml::Value::Table(block) = block else {
                        return Err(bad("`[s3.BUCKET]` blocks of settings"));
                    };
                    for (setting, value) in block {
                        let value = match value {
                            toml::Value::Boolean(b) => b.to_string(),
                            other => scalar(other)
                                .ok_or_else(|| bad("blocks of strings, numbers or booleans"))?,
                        };
                        args.push(format!("--s3={bucket}.{setting}={value}").into());
                    }
                }
            }
            ArgAction::Append => {
                let values = match value {
                    toml::Value::Array(values) => values.iter().collect(),
                    one => vec![one],
                };
                for value in values {
                    let value = scalar(value).ok_or_else(|| bad("a string or a list of them"))?;
                    args.push(format!("--{key}={value}").into());
                }
            }
            _ => {
                let value = scalar(value).ok_or_else(|| bad("a string or a number"))?;
                args.push(format!("--{key}={value}").into());
            }
        }
        from_file.insert(key.clone());
    }
    Ok((args, from_file))
}

/// A string or a number as the flag would take it.
fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Float(x) => Some(x.to_string()),
        _ => None,
    }
}

fn unknown_key(file: &str, key: &str, settings: &[Arg]) -> String {
    let mut message = if NOT_KEYS.contains(&key) {
        format!("--config {file}: `{key}` is given on the command line, not in the file")
    } else {
        format!("--config {file}: unknown key `{key}`")
    };
    let dashed = key.replace('_', "-");
    if dashed != key
        && settings
            .iter()
            .any(|a| a.get_long() == Some(dashed.as_str()))
    {
        message.push_str(&format!(" (did you mean `{dashed}`?)"));
    } else if !NOT_KEYS.contains(&key) {
        message.push_str(
            "; the keys are `quiver serve`'s flag names without the dashes in front \
             (`quiver serve --help`)",
        );
    }
    message
}

/// The settings in force as a TOML file that gives them, each with where it
/// came from.
fn render(serve: &ArgMatches, file: Option<&(PathBuf, BTreeSet<String>)>) -> String {
    let mut out = String::from("# quiver serve: the settings in force\n");
    if let Some((path, _)) = file {
        out.push_str(&format!("# --config {}\n", path.display()));
    }
    for arg in settings() {
        let Some(long) = arg.get_long() else {
            continue;
        };
        let id = arg.get_id().as_str();
        let values: Vec<String> = serve
            .get_raw(id)
            .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        let origin = match serve.value_source(id) {
            Some(ValueSource::CommandLine) => match file {
                Some((path, keys)) if keys.contains(long) => format!("{}", path.display()),
                _ => "command line".to_string(),
            },
            Some(ValueSource::EnvVariable) => arg
                .get_env()
                .map_or("environment".into(), |e| e.to_string_lossy().into_owned()),
            Some(ValueSource::DefaultValue) => "default".to_string(),
            _ => String::new(),
        };
        let value = match arg.get_action() {
            ArgAction::SetTrue => Some(toml::Value::Boolean(serve.get_flag(id))),
            ArgAction::Append if !values.is_empty() => Some(toml::Value::Array(
                values.into_iter().map(toml::Value::String).collect(),
            )),
            _ => values.into_iter().next().map(toml::Value::String),
        };
        match value {
            Some(value) => out.push_str(&format!("{long} = {value}  # {origin}\n")),
            None => out.push_str(&format!("# {long}: not set\n")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Command;

    fn write(text: &str) -> tempfile::NamedTempFile {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), text).unwrap();
        file
    }

    fn serve(file: &Path, extra: &[&str]) -> Result<Invocation, String> {
        let mut args: Vec<OsString> = vec!["quiver".into(), "serve".into()];
        args.push(format!("--config={}", file.display()).into());
        args.extend(extra.iter().map(OsString::from));
        parse(args)
    }

    fn serve_args(invocation: Invocation) -> crate::cli::ServeArgs {
        match invocation {
            Invocation::Run(cli) => match cli.command {
                Command::Serve(args) => args,
                other => panic!("not serve: {other:?}"),
            },
            Invocation::Print(text) => panic!("printed {text}"),
        }
    }

    #[test]
    fn the_file_sets_what_the_command_line_does_not() {
        let file = write(
            "listen = \"127.0.0.1:9999\"\nmax-memory = \"2GiB\"\npartitions = 4\n\
             table = [\"a=/x\", \"b=/y\"]\nquery-timeout = 1.5\n",
        );
        let args = serve_args(serve(file.path(), &["--partitions=2"]).unwrap());
        assert_eq!(args.listen.to_string(), "127.0.0.1:9999");
        assert_eq!(args.store.max_memory.unwrap().0, 2 << 30);
        assert_eq!(args.partitions, 2, "the command line overrides the file");
        assert_eq!(args.sql.tables.len(), 2);
        assert!((args.sql.query_timeout - 1.5).abs() < 1e-9);
    }

    #[test]
    fn s3_blocks_set_each_buckets_settings() {
        let file = write(
            "table = [\"trips=s3://lake.v2/trips/\"]\n\
             [s3.\"lake.v2\"]\nendpoint = \"http://127.0.0.1:8333\"\npath-style = true\n\
             region = \"eu-west-1\"\n",
        );
        let args = serve_args(serve(file.path(), &[]).unwrap());
        let options = args.sql.to_config().unwrap();
        let bucket = &options.object_stores.buckets["lake.v2"];
        assert_eq!(bucket.endpoint.as_deref(), Some("http://127.0.0.1:8333"));
        assert_eq!(bucket.path_style, Some(true));
        assert_eq!(bucket.region.as_deref(), Some("eu-west-1"));
        assert_eq!(args.sql.tables[0].1, "s3://lake.v2/trips/");
    }

    #[test]
    fn an_unknown_key_is_an_error_naming_it() {
        let file = write("max_memory = \"2GiB\"\n");
        let e = serve(file.path(), &[]).unwrap_err();
        assert!(e.contains("unknown key `max_memory`"), "{e}");
        assert!(e.contains("did you mean `max-memory`"), "{e}");
        let file = write("no-such-flag = 1\n");
        let e = serve(file.path(), &[]).unwrap_err();
        assert!(e.contains("unknown key `no-such-flag`"), "{e}");
        let file = write("config = \"/etc/quiver.toml\"\n");
        assert!(serve(file.path(), &[]).unwrap_err().contains("`config`"));
    }

    #[test]
    fn a_value_of_the_wrong_type_names_the_key() {
        let file = write("listen = [\"127.0.0.1:1\"]\n");
        let e = serve(file.path(), &[]).unwrap_err();
        assert!(e.contains("`listen` must be a string or a number"), "{e}");
        let file = write("listen = \n");
        assert!(serve(file.path(), &[]).unwrap_err().contains("not TOML"));
    }

    #[test]
    fn print_config_says_where_each_setting_came_from() {
        let file = write("max-memory = \"2GiB\"\nlog = \"debug\"\n");
        let Invocation::Print(text) =
            serve(file.path(), &["--print-config", "--log=warn"]).unwrap()
        else {
            panic!("did not print");
        };
        let path = file.path().display().to_string();
        assert!(
            text.contains(&format!("max-memory = \"2GiB\"  # {path}")),
            "{text}"
        );
        assert!(text.contains("log = \"warn\"  # command line"), "{text}");
        assert!(
            text.contains("listen = \"127.0.0.1:8815\"  # default"),
            "{text}"
        );
        assert!(text.contains("# advertise: not set"), "{text}");
        // What it prints is a config file that gives the same settings.
        let settings: toml::Table = text.parse().unwrap();
        assert_eq!(settings["max-memory"].as_str(), Some("2GiB"));
    }
}
