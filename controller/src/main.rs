use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use pathpilot::cli::{
    Cli, Command, advise, create, ctl, daemon, exit_code, generate, handover, list, log,
    long_version, path, reload, remove, set, stat, top,
};

fn main() -> ExitCode {
    // Output piped into `head` ends quietly, as for other Unix tools.
    // SAFETY: resetting a signal disposition before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = match Cli::command()
        .version(long_version())
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(c) => c,
        Err(e) => usage_error(e),
    };
    let res = match cli.cmd {
        Command::Stat(a) => stat::run(a),
        Command::List(a) => list::run(a),
        Command::Create(a) => create::run(a),
        Command::Reload(a) => reload::run(a),
        Command::Set(a) => set::run(a),
        Command::Path(a) => path::run(a),
        Command::Remove(a) => remove::run(a),
        Command::Top(a) => top::run(a),
        Command::Daemon(a) => daemon::run(a),
        Command::Ctl(a) => ctl::run(a),
        Command::Log(a) => log::run(a),
        Command::Advise(a) => advise::run(a),
        Command::Takeover(a) => handover::takeover(a),
        Command::Handback(a) => handover::handback(a),
        Command::Generate(a) => generate::run(a),
    };
    match res {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the context chain joined, most general first.
            let msg: Vec<String> = e.chain().map(|c| c.to_string()).collect();
            eprintln!("pathpilot: error: {}", msg.join(": "));
            ExitCode::from(exit_code(&e))
        }
    }
}

/// A usage error is one line on stderr and exit 2, like every other
/// error; help and version (and help for a bare command) print as clap
/// does.
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let text = e.render().to_string();
    let parts: Vec<String> = text
        .split("\n\n")
        .map(str::trim)
        .filter(|p| {
            !p.is_empty() && !p.starts_with("Usage:") && !p.starts_with("For more information")
        })
        .map(|p| p.lines().map(str::trim).collect::<Vec<_>>().join(" "))
        .collect();
    let msg = parts.join("; ");
    eprintln!(
        "pathpilot: error: {} (see --help)",
        msg.strip_prefix("error: ").unwrap_or(&msg)
    );
    std::process::exit(2)
}
