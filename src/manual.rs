//! The man pages and shell completions, written from the command line's
//! clap definitions (the same text as `--help`), for the Debian package:
//! `tickgate generate man DIR` and `tickgate generate completions DIR`
//! (hidden commands; `scripts/build-deb.sh` runs them before `cargo deb`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap_complete::Shell;

#[derive(Debug, clap::Subcommand)]
pub enum GenerateCommand {
    /// Write tickgate.1 and a page per subcommand (tickgate-run.1,
    /// tickgate-fills-apply.1, ...) into DIR.
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Write the bash (tickgate.bash), zsh (_tickgate) and fish
    /// (tickgate.fish) completions into DIR.
    Completions {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
}

/// Writes what `what` asks for, from `cmd` (the whole command line), and
/// prints each file written.
pub fn generate_main(cmd: clap::Command, what: GenerateCommand) -> anyhow::Result<i32> {
    let written = match what {
        GenerateCommand::Man { dir } => write_man_pages(cmd, &dir)?,
        GenerateCommand::Completions { dir } => write_completions(cmd, &dir)?,
    };
    for path in written {
        println!("{}", path.display());
    }
    Ok(0)
}

/// One page for the command and one for each visible subcommand, at any
/// depth; hidden commands (this one) get none.
pub fn write_man_pages(cmd: clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    fn each(
        cmd: clap::Command,
        source: &str,
        dir: &Path,
        out: &mut Vec<PathBuf>,
    ) -> std::io::Result<()> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            each(sub.clone(), source, dir, out)?;
        }
        let page = clap_mangen::Man::new(cmd).source(source).manual("tickgate");
        out.push(page.generate_to(dir)?);
        Ok(())
    }
    create(dir)?;
    // build() names each subcommand's page after its path (tickgate-fills-apply).
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    // Every page's footer names the program and its version, not only the top one's.
    let source = format!(
        "{} {}",
        cmd.get_name(),
        cmd.get_version().unwrap_or_default()
    );
    let mut out = Vec::new();
    each(cmd, source.trim_end(), dir, &mut out)
        .with_context(|| format!("writing man pages into {}", dir.display()))?;
    out.sort();
    Ok(out)
}

pub fn write_completions(mut cmd: clap::Command, dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    create(dir)?;
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut cmd, &name, dir)
            .with_context(|| format!("writing the {shell} completions into {}", dir.display()))?;
        out.push(path);
    }
    Ok(out)
}

fn create(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}
