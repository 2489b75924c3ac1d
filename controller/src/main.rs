use std::process::ExitCode;

use clap::Parser;
use pathpilot::cli::{Cli, Command, exit_code, stat, top};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Command::Stat(a) => stat::run(a),
        Command::Top(a) => top::run(a),
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
