use std::process::ExitCode;

use clap::Parser;
use pathpilot::cli::{
    Cli, Command, create, ctl, daemon, exit_code, list, log, path, reload, remove, set, stat, top,
};

fn main() -> ExitCode {
    // Output piped into `head` ends quietly, as for other Unix tools.
    // SAFETY: resetting a signal disposition before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
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
