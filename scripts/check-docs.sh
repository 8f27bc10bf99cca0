#!/usr/bin/env bash
# Drift check of the docs against the code (see scripts/check-docs.go for
# what it checks), and every Go snippet of README.md and docs/*.md
# type-checked against the code (scripts/check-snippets.go: how a fragment
# is wrapped, how a block names what it assumes or why it is skipped).
# Run from anywhere; prints one line per problem, exits 1 if there is any.
# .ci/run calls it before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run scripts/check-docs.go scripts/check-snippets.go "$@"
