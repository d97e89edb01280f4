//! The `tickgate` binary run as a user runs it: its exit code, standard
//! output and standard error (both UTF-8).

use std::process::Command;

pub fn tickgate(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tickgate"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}
