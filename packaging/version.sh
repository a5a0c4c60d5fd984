#!/bin/sh
# Prints the project's version: [workspace.package] version in Cargo.toml,
# the one place it is written.
awk '
  /^\[/ { in_ws = ($0 == "[workspace.package]") }
  in_ws && /^[[:space:]]*version[[:space:]]*=/ {
    sub(/^[^=]*=[[:space:]]*"/, ""); sub(/".*$/, ""); print; exit
  }
' "$(dirname "$0")/../Cargo.toml"
