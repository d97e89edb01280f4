//! One line for an error and its causes, each said once.
//!
//! `format!("{e:#}")` of an `anyhow::Error` joins every link of the chain
//! with `": "`. Many library errors already put their source in their own
//! message (NATS, Kafka, `thiserror`'s `"...: {0}"` with `#[from]`), so the
//! chain then says the cause twice: `No such device (os error 19): No such
//! device (os error 19)`. [`chain`] leaves out a link whose text the link
//! before it already contains.

use std::fmt;

/// `{e:#}` without the repeats: see the module documentation.
pub fn chain(e: &anyhow::Error) -> Chain<'_> {
    Chain(e)
}

/// Displays an error chain, each cause once.
pub struct Chain<'a>(&'a anyhow::Error);

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut previous = String::new();
        let mut first = true;
        for link in self.0.chain() {
            let text = link.to_string();
            if !text.is_empty() && !previous.contains(&text) {
                if !first {
                    f.write_str(": ")?;
                }
                f.write_str(&text)?;
                first = false;
            }
            previous = text;
        }
        Ok(())
    }
}

/// Writes one line to standard error, and nothing (no panic, as
/// `eprintln!` would) when standard error is closed: a daemon whose log
/// pipe went away keeps running, and a command still exits with its own
/// status.
pub fn say(line: fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Like NATS's and Kafka's errors: the source in the message *and* as
    /// `source()`.
    #[derive(Debug)]
    struct SaysItsSource(std::io::Error);

    impl fmt::Display for SaysItsSource {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "joining the group: {}", self.0)
        }
    }

    impl std::error::Error for SaysItsSource {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_cause_once() {
        let io = std::io::Error::from_raw_os_error(19);
        let e = anyhow::Error::new(SaysItsSource(io)).context("feed itch-a");
        let plain = format!("{e:#}");
        let os = std::io::Error::from_raw_os_error(19).to_string();
        assert_eq!(plain.matches(&os).count(), 2, "{plain}");
        assert_eq!(
            chain(&e).to_string(),
            format!("feed itch-a: joining the group: {os}")
        );
        // A chain without repeats is `{:#}` unchanged.
        let e = anyhow::anyhow!("connection refused")
            .context("connecting to NATS")
            .context("fills lane");
        assert_eq!(chain(&e).to_string(), format!("{e:#}"));
        assert_eq!(
            chain(&anyhow::anyhow!("alone")).to_string(),
            "alone".to_owned()
        );
    }
}
