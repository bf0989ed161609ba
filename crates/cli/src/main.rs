//! # nbraid: the command line
//!
//! Checks and explains array configs (`check`), shows where a volume's bytes live (`map`) and
//! creates arrays (`create`: member files and superblocks). It parses arguments and prints; the config rules
//! live in `nbraid_config`, the geometry in `nbraid_layout`. It does not contain the server:
//! `nbraid serve` runs the `nbraidd` binary installed beside it ([`serve`]).

/// mimalloc: see the workspace Cargo.toml (glibc's bins were ~10% of a RAID 5 write's CPU).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod apply;
mod as_started;
mod check;
mod create;
mod diagram;
mod events;
mod map;
mod meta_budget;
mod offline;
mod ops;
mod records;
mod roles;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use nbraid_assembly::error_text::error_text;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "nbraid",
    version,
    about = "Check and explain nbraid array configs, and operate a running daemon"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check a config and explain its volumes: level, spans, members, strip, data members,
    /// capacity, full-stripe width, fault tolerance.
    Check {
        /// The TOML config.
        file: PathBuf,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
        /// Draw the first stripes of every volume as a grid (member columns, D/P/Q cells).
        #[arg(long)]
        diagram: bool,
        /// Strip rows to draw with --diagram (default: one full parity rotation, at least 4).
        #[arg(long, value_name = "N", requires = "diagram")]
        rows: Option<u64>,
    },
    /// Compare a config with the running daemon's arrays and print the plan that gets them
    /// there (members added, level, strip, size; data moved, time at the rate, redundancy
    /// during the move), or why a change is not done online.
    Apply {
        /// The TOML config: the shape the arrays should have.
        file: PathBuf,
        /// Start the planned moves without asking.
        #[arg(long)]
        yes: bool,
        /// With --yes: write onto an added member although the disk write rule refuses it
        /// (it holds data or another array's records), as `nbraid add --force` does.
        #[arg(long, requires = "yes")]
        force: bool,
        /// Print the plan as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show the member extents behind a logical range of a volume.
    Map {
        /// The TOML config.
        file: PathBuf,
        /// The volume's name.
        volume: String,
        /// Logical byte offset: a size such as 1MiB or 4096B (a unit is needed, 0 aside).
        offset: String,
        /// Length: a size such as 64KiB (default: one block of the volume).
        length: Option<String>,
        /// Print the extents as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a config's arrays: member files that do not exist yet (sparse, at their size),
    /// then every volume's superblocks, syncing copies and parity (with a progress bar)
    /// unless the members are new or --assume-clean. Existing arrays are left alone.
    Create {
        /// The TOML config (or --config FILE).
        #[arg(required_unless_present = "config", conflicts_with = "config")]
        file: Option<PathBuf>,
        /// The TOML config.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Create only this volume.
        #[arg(long, value_name = "NAME")]
        volume: Option<String>,
        /// Trust the members to agree already (zero-filled): write superblocks, skip the sync.
        #[arg(long)]
        assume_clean: bool,
        /// Write onto members the disk write rule refuses (they hold data or another array's
        /// records, whose records are taken off), as `nbraid add --force` does.
        #[arg(long)]
        force: bool,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run the storage reviews' microbenchmarks on a volume, simulated members or NBD
    /// servers: a table, --json, --chart FILE.svg|png.
    Bench(Box<nbraid_bench::BenchArgs>),
    /// Serve every volume of a config over NBD (the same as `nbraidd --config FILE`).
    Serve {
        /// The TOML config.
        file: PathBuf,
        /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
        #[arg(long, default_value = "info")]
        log_level: String,
        /// Assemble VOLUME by force past its tolerance (see `nbraidd --help`). Repeatable.
        #[arg(long, value_name = "VOLUME")]
        force_assemble: Vec<String>,
    },
    /// Show the daemon's latest events (member failed, volume degraded, rebuild finished...);
    /// --follow streams them as they happen.
    Events(events::EventsArgs),
    /// Operate a running daemon (status, fail, scrub, pause, resume).
    #[command(flatten)]
    Ops(ops::OpsCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<String> = match cli.command {
        Command::Check {
            file,
            json,
            diagram,
            rows,
        } => check::run(&file, json, diagram, rows),
        Command::Apply {
            file,
            yes,
            force,
            json,
        } => apply::run(&file, yes, force, json),
        Command::Map {
            file,
            volume,
            offset,
            length,
            json,
        } => map::run(&file, &volume, &offset, length.as_deref(), json),
        Command::Create {
            file,
            config,
            volume,
            assume_clean,
            force,
            json,
        } => create::run(
            &file.or(config).expect("clap requires one"),
            volume.as_deref(),
            create::Asked {
                assume_clean,
                force,
                json,
            },
        ),
        Command::Bench(args) => nbraid_bench::run(&args),
        Command::Serve {
            file,
            log_level,
            force_assemble,
        } => serve(&file, &log_level, &force_assemble),
        Command::Events(args) => events::run(&args),
        Command::Ops(cmd) => ops::run(cmd),
    };
    match result {
        Ok(out) => {
            print_out(&out);
            ExitCode::SUCCESS
        }
        Err(e) => {
            if let Some(out) = e.downcast_ref::<check::JsonError>() {
                print_out(&out.0);
            }
            if let Some(out) = e.downcast_ref::<apply::NotStarted>() {
                print_out(&out.0);
            }
            if let Some(out) = e.downcast_ref::<check::WouldNotStart>() {
                print_out(&out.0);
            }
            if let Some(out) = e.downcast_ref::<ops::JsonFailure>() {
                print_out(&out.0);
            }
            if let Some(out) = e.downcast_ref::<ops::NotServing>() {
                print_out(&out.report);
            }
            eprintln!("error: {}", error_text(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Writes `out` to stdout; a closed pipe (`nbraid check ... | head`) is not an error.
fn print_out(out: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(out.as_bytes());
    // The error line follows on stderr: never on the report's last line.
    if !out.is_empty() && !out.ends_with('\n') {
        let _ = stdout.write_all(b"\n");
    }
    let _ = stdout.flush();
}

/// `nbraid serve`: replaces this process with `nbraidd --config FILE` (same pid, so signals and
/// process supervisors see the daemon itself). `nbraidd` is looked for beside this binary
/// (where cargo and `cargo install` put both), then in PATH.
fn serve(file: &std::path::Path, log_level: &str, force_assemble: &[String]) -> Result<String> {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().context("finding the nbraid binary")?;
    let beside = exe.with_file_name("nbraidd");
    let daemon = if beside.is_file() {
        beside
    } else {
        PathBuf::from("nbraidd")
    };
    let e = std::process::Command::new(&daemon)
        .arg("--config")
        .arg(file)
        .args(["--log-level", log_level])
        .args(
            force_assemble
                .iter()
                .flat_map(|v| ["--force-assemble", v.as_str()]),
        )
        .exec();
    Err(e).with_context(|| {
        format!(
            "running {} (nbraid serve runs nbraidd, the daemon binary: build it with              `cargo build --bin nbraidd` or install it beside nbraid or in PATH)",
            daemon.display()
        )
    })
}
