#!/usr/bin/env bash
# Drift check of the docs against the code (see scripts/check-docs.go for
# what it checks). Run from anywhere; prints one line per problem, exits 1
# if there is any. .ci/run calls it before the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run scripts/check-docs.go "$@"
