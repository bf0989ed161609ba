//! `nbraidd`: serves every volume of a TOML config as an NBD export.

use anyhow::Result;
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc: see the workspace Cargo.toml (glibc's bins were ~10% of a RAID 5 write's CPU).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "nbraidd", version, about = "Serve nbraid volumes over NBD")]
struct Args {
    /// The array config (TOML).
    #[arg(short, long)]
    config: PathBuf,
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it.
    #[arg(long, default_value = "info")]
    log_level: String,
    /// Check the config, print what it declares and exit without serving.
    #[arg(long)]
    check: bool,
    /// Assemble VOLUME by force when more members are out than it survives (mdadm
    /// --assemble --force): the freshest failed or stale members are taken back as current;
    /// bytes written after they dropped out may be stale on them. Repeatable.
    #[arg(long, value_name = "VOLUME")]
    force_assemble: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    nbraid_daemon::logging::init(&args.log_level);
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "nbraidd: error: {}",
                nbraid_assembly::error_text::error_text(e.as_ref())
            );
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<()> {
    if args.check {
        let config = nbraid_assembly::pins::load(&args.config)?;
        // A config the start would refuse fails the check (superblocks read, not locked;
        // remote members' through NBD, as the start reads them).
        let mut found = nbraid_assembly::preflight::preflight(&config);
        print!("{}", config.explain_refusing(&found.refused_volumes));
        // The certificates as the start loads them: a key that is not the certificate's,
        // a file that is not PEM, refuse the start as a missing file does.
        if let Err(e) = nbraid_daemon::serve::server_tls(&config) {
            let said = nbraid_assembly::error_text::error_text(e.as_ref());
            found.refusals.push(said);
        }
        found
            .warnings
            .extend(nbraid_daemon::serve::tls_warnings(&config));
        for w in &found.warnings {
            println!("warning: {w}");
        }
        if !found.refusals.is_empty() {
            anyhow::bail!("a start would fail: {}", found.refusals.join("; "));
        }
        return Ok(());
    }
    let opts = nbraid_assembly::assemble::StartOptions {
        force_assemble: args.force_assemble.clone(),
    };
    nbraid_daemon::serve::run_with(&args.config, &opts)
}
