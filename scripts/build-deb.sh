#!/usr/bin/env bash
# Builds the Debian package target/debian/tickgate_<version>-1_amd64.deb:
#   1. the release binary and the C library (cargo build --release),
#   2. the man pages and shell completions, written by that binary from its
#      clap definitions (`tickgate generate`), the pkg-config file and the
#      package changelog, into target/deb-assets/ (generated, not in git),
#   3. cargo deb --no-build (the package's layout: [package.metadata.deb]
#      in Cargo.toml).
# Needs cargo-deb: `cargo install cargo-deb --locked` (or CARGO_DEB=path).
# Prints the package's path last.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo_deb="${CARGO_DEB:-$(command -v cargo-deb || true)}"
if [ -z "$cargo_deb" ]; then
  echo "build-deb: cargo-deb not found: cargo install cargo-deb --locked (or set CARGO_DEB)" >&2
  exit 2
fi

version="$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
maintainer="$(sed -n 's/^maintainer = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
[ -n "$version" ] && [ -n "$maintainer" ] || { echo "build-deb: no version or maintainer in Cargo.toml" >&2; exit 2; }

cargo build --release --locked -p tickgate -p tickgate-c

assets=target/deb-assets
rm -rf "$assets"
target/release/tickgate generate man "$assets/man" >/dev/null
target/release/tickgate generate completions "$assets/completions" >/dev/null

# The C library lives in a private directory (no soname to version it by):
# pkg-config --cflags --libs tickgate gives the flags, rpath included.
cat >"$assets/tickgate.pc" <<EOF
prefix=/usr
includedir=\${prefix}/include
libdir=\${prefix}/lib/tickgate

Name: tickgate
Description: tickgate's pre-trade check from the shared state file (C ABI)
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ltickgate
EOF

# Debian wants a changelog in every package: this one names the commit
# built, dated by it so that two builds of a commit are the same.
if commit="$(git rev-parse --short=12 HEAD 2>/dev/null)"; then
  date="$(git log -1 --format=%aD HEAD)"
  dirty="$(git status --porcelain --untracked-files=no | grep -q . && echo ' with local changes' || true)"
else
  commit="an unknown commit"; date="$(date -R)"; dirty=""
fi
cat >"$assets/changelog" <<EOF
tickgate ($version-1) unstable; urgency=medium

  * Built from commit $commit$dirty.

 -- $maintainer  $date
EOF

# --strip: the release profile keeps line tables (for profiles and
# benchmarks); the package's binary and library carry no debug sections.
"$cargo_deb" --no-build --strip -p tickgate "$@" | tail -n1
