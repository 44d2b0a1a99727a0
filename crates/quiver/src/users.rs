//! `quiver user add` and `quiver user token`: editing the users file.

use std::io::BufRead;

use quiver_flight::auth::UsersFile;

use crate::cli::{UserAddArgs, UserCommand};

pub(crate) fn run(command: UserCommand) -> Result<(), Box<dyn std::error::Error>> {
    match command {
        UserCommand::Add(args) => add(args),
        UserCommand::Token(args) => token(args),
    }
}

/// Adds or updates a user; the password is the first line of stdin.
fn add(args: UserAddArgs) -> Result<(), Box<dyn std::error::Error>> {
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        eprint!(
            "password for {} (echoed; pipe it in to hide it): ",
            args.name
        );
    }
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let password = line.strip_suffix('\n').unwrap_or(&line);
    let password = password.strip_suffix('\r').unwrap_or(password);
    let mut file = UsersFile::load_or_default(&args.users)?;
    let existed = file.users.contains_key(&args.name);
    file.set_user(&args.name, args.role, password)?;
    file.save(&args.users)?;
    eprintln!(
        "{} user '{}' with the {} role in {}",
        if existed { "updated" } else { "added" },
        args.name,
        args.role,
        args.users.display()
    );
    Ok(())
}

/// Makes an API token and prints it on stdout.
fn token(args: UserAddArgs) -> Result<(), Box<dyn std::error::Error>> {
    let mut file = UsersFile::load_or_default(&args.users)?;
    let token = file.new_api_token(&args.name, args.role)?;
    file.save(&args.users)?;
    println!("{token}");
    eprintln!(
        "API token '{}' with the {} role added to {}; it is shown only this once",
        args.name,
        args.role,
        args.users.display()
    );
    Ok(())
}
