#!/usr/bin/env bash
# The exported API, held: api/ describes the exported API of every package
# users import (one feature a line, as the Go project's api/go1.*.txt;
# scripts/apilist.go writes it), and this check fails
#
#   - on an incompatible change: a line of api/ the code no longer has (a
#     name removed, or its signature, type, value, fields or methods changed);
#   - when api/ is stale with additions: the code exports a name api/ does
#     not list, so that api/ stays exact and a later removal shows;
#   - when api/ lost lines since BASE (default HEAD^, the commit before this
#     one; for a merge, the branch merged into) and CHANGELOG.md did not
#     change too: a break is released only with its line under Changed or
#     Removed saying how to move.
#
# Usage:
#   scripts/check-api.sh            check (.ci/run runs this after the docs step)
#   scripts/check-api.sh -w         rewrite api/ from the code: after adding or,
#                                   deliberately, breaking a name, and after a
#                                   merge; commit api/ (and, for a break,
#                                   CHANGELOG.md) with the change
#   scripts/check-api.sh -base REV  compare the history check against REV
set -euo pipefail
cd "$(dirname "$0")/.."

write=false
base=HEAD^
while [ $# -gt 0 ]; do
	case "$1" in
	-w) write=true ;;
	-base) base="$2"; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "check-api: unknown argument $1 (see scripts/check-api.sh -h)" >&2; exit 2 ;;
	esac
	shift
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go run scripts/apilist.go "$tmp/api"

if $write; then
	rm -rf api
	cp -r "$tmp/api" api
	echo "check-api: api/ rewritten from the code ($(cat api/*.txt api/*/*.txt | wc -l) lines)"
	if git rev-parse -q --verify "HEAD^{commit}" >/dev/null && git diff HEAD -- api/ | grep -q '^-pkg '; then
		echo "check-api: api/ lost lines since HEAD (an incompatible change): add a line to CHANGELOG.md under Changed or Removed saying how to move"
	fi
	exit 0
fi

lines() { find "$1" -name '*.txt' -print0 | sort -z | xargs -0 cat | LC_ALL=C sort; }
if [ -d api ]; then lines api >"$tmp/want"; else : >"$tmp/want"; fi
lines "$tmp/api" >"$tmp/got"
removed=$(LC_ALL=C comm -23 "$tmp/want" "$tmp/got")
added=$(LC_ALL=C comm -13 "$tmp/want" "$tmp/got")
status=0
if [ -n "$removed" ]; then
	echo "check-api: incompatible API change: api/ lists these, the code no longer has them (removed, or changed: see the added lines):"
	echo "$removed" | sed 's/^/  - /'
	status=1
fi
if [ -n "$added" ]; then
	echo "check-api: api/ is stale: the code exports these and api/ does not list them:"
	echo "$added" | sed 's/^/  + /'
	status=1
fi
if [ "$status" -ne 0 ]; then
	echo "check-api: if the change is meant, run scripts/check-api.sh -w and commit api/ with it;"
	echo "check-api: a removed or changed name also needs a CHANGELOG.md line under Changed or Removed, in the same commit"
	exit 1
fi
if ! diff -r -q api "$tmp/api" >/dev/null; then
	echo "check-api: api/'s files are not laid out as scripts/apilist.go writes them: run scripts/check-api.sh -w"
	exit 1
fi

if ! git rev-parse -q --verify "$base^{commit}" >/dev/null; then
	echo "check-api: api/ matches the code; no commit $base to compare with (shallow clone?): history check skipped"
	exit 0
fi
lost=$(git diff "$base" -- api/ | grep '^-pkg ' | sed 's/^-//' || true)
if [ -n "$lost" ] && git diff --quiet "$base" -- CHANGELOG.md; then
	echo "check-api: api/ lost these lines since $base, and CHANGELOG.md did not change with them:"
	echo "$lost" | sed 's/^/  - /'
	echo "check-api: an incompatible change needs a CHANGELOG.md line under Changed or Removed (how to move), in the same commit"
	exit 1
fi
echo "check-api: api/ matches the code ($(wc -l <"$tmp/got") lines)"
