//! The `tickgate` command line: thin dispatch to the modules that own each command.

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tickgate",
    version,
    about = "Market-data freshness gate and exactly-once fills consumer",
    after_help = "Output: results go to standard output, progress and diagnostics \
(logs, warnings, errors) to standard error.\n\
Exit status: 0 success; 1 failure at run time (or REJECT for `check`); \
2 a bad config, bad arguments or an error that stopped the command; \
3 (`fills apply`, `fills push`) events rejected or held."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the daemon from a config file.
    Run(tickgate::daemon::RunArgs),
    /// The daemon on loopback multicast with a built-in simulated provider.
    Demo(tickgate::daemon::DemoArgs),
    /// Ask the running daemon's gate socket about one symbol.
    Check(tickgate::gate::client::CheckArgs),
    /// A table of feeds and symbols from the running daemon.
    Status(tickgate::gate::client::StatusArgs),
    /// Replay a capture through the core (capture time is the clock).
    Replay(tickgate::replay::command::ReplayArgs),
    /// Write a synthetic provider's stream to a capture.
    Simulate(Box<tickgate::sim::simulate::SimulateArgs>),
    /// Write what a feed's lines receive to a pcap.
    Record(tickgate::capture::record::RecordArgs),
    /// The reliable lane's tools.
    #[command(subcommand)]
    Fills(FillsCommand),
}

#[derive(Debug, Subcommand)]
enum FillsCommand {
    /// Apply JSON-lines events from a file or standard input (-).
    #[command(after_help = "Exit status: 0 every event applied (or a duplicate); \
3 some events rejected or held (a BUST waiting for its FILL); 2 an error stopped the run.\n\
The summary goes to standard output, rejected lines to standard error.")]
    Apply(tickgate::fills::cli::ApplyArgs),
    /// Send a JSON-lines file to a tickgate HTTP endpoint, retrying safely.
    #[command(after_help = "Exit status: 0 every event applied (or a duplicate); \
3 some events rejected or held; 1 batches failed (dead-lettered) or unreadable lines; \
2 an error stopped the run.\n\
The summary goes to standard output, progress to standard error.")]
    Push(tickgate::fills::push::PushArgs),
    /// Consume events from a NATS JetStream stream (durable pull consumer).
    Consume(Box<tickgate::fills::nats::ConsumeArgs>),
    /// Consume events from a Kafka topic (offsets kept in the store).
    ConsumeKafka(Box<tickgate::fills::kafka::ConsumeKafkaArgs>),
}

fn main() {
    // The packaging command (`generate`, hidden) is added here rather than
    // to Cli, so that the man pages and completions written from Cli offer
    // only the commands users run.
    let matches = Cli::command()
        .subcommand(tickgate::manual::GenerateCommand::augment_subcommands(
            clap::Command::new("generate")
                .about("Man pages and shell completions (for packaging)")
                .subcommand_required(true)
                .hide(true),
        ))
        .try_get_matches()
        .unwrap_or_else(|e| usage_error(e));
    if let Some(("generate", m)) = matches.subcommand() {
        let what =
            tickgate::manual::GenerateCommand::from_arg_matches(m).unwrap_or_else(|e| e.exit());
        finish(tickgate::manual::generate_main(Cli::command(), what));
    }
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| usage_error(e));
    let result = match cli.command {
        Command::Run(a) => tickgate::daemon::run_main(a),
        Command::Demo(a) => tickgate::daemon::demo_main(a),
        Command::Check(a) => tickgate::gate::client::check_main(a),
        Command::Status(a) => tickgate::gate::client::status_main(a),
        Command::Replay(a) => tickgate::replay::command::main(a),
        Command::Simulate(a) => tickgate::sim::simulate::main(*a),
        Command::Record(a) => tickgate::capture::record::main(a),
        Command::Fills(FillsCommand::Apply(a)) => {
            tickgate::fills::cli::apply_main(a, tickgate::config::Config::fills_of_file)
        }
        Command::Fills(FillsCommand::Push(a)) => tickgate::fills::push::main(a),
        Command::Fills(FillsCommand::Consume(a)) => {
            tickgate::fills::nats::consume_main(*a, tickgate::config::Config::fills_section_of_file)
        }
        Command::Fills(FillsCommand::ConsumeKafka(a)) => {
            tickgate::fills::kafka::consume_kafka_main(*a)
        }
    };
    finish(result)
}

fn finish(result: anyhow::Result<i32>) -> ! {
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            tickgate::util::errors::say(format_args!(
                "tickgate: {}",
                tickgate::util::errors::chain(&e)
            ));
            std::process::exit(2);
        }
    }
}

/// A command-line error as every other error is said: one line,
/// `tickgate: ...`, exit 2 (help and --version as clap prints them).
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit()
    }
    tickgate::util::errors::say(format_args!("tickgate: {}", one_line(&e.to_string())));
    std::process::exit(2)
}

/// clap's message (`error: ...`, indented lists, `Usage: ...`, a tip)
/// on one line: the message, then the usage in brackets.
fn one_line(text: &str) -> String {
    let text = text.trim().strip_prefix("error: ").unwrap_or(text.trim());
    let (message, rest) = text.split_once("\n\nUsage: ").unwrap_or((text, ""));
    let usage = rest.lines().next().unwrap_or("").trim();
    let mut line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if !usage.is_empty() {
        line.push_str(&format!(" (usage: {usage}; --help for more)"));
    }
    line
}
