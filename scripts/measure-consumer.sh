#!/usr/bin/env bash
# measure-consumer.sh measures what a user's module downloads for the
# library, as a user would: a fresh module whose main.go imports only the
# root package and memorybackend, a replace to this checkout, an empty module
# cache, go mod tidy. It prints the modules whose go.mod tidy downloaded, the
# lines of go list -m all (the user's own module included), the module zips
# tidy downloaded, what it downloaded in MB (du -sm of the cache's
# download directory: the zips and go.mod files) and the whole module
# cache's size with the zips extracted:
#
#   scripts/measure-consumer.sh            # one line
#   scripts/measure-consumer.sh -v         # and go list -m all
#
# The module cache is a new temporary directory, removed at the end; the
# proxy is the one go env GOPROXY names.
set -euo pipefail

verbose=false
case ${1:-} in
-v) verbose=true ;;
"") ;;
*)
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit 2
	;;
esac

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
export GOMODCACHE=$work/modcache GOFLAGS=-modcacherw GOWORK=off
mkdir -p "$work/consumer"
cd "$work/consumer"
cat >go.mod <<EOF
module example.com/consumer

go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/')

require github.com/fencing-go/fencing v0.0.0-00010101000000-000000000000

replace github.com/fencing-go/fencing => $root
EOF
cat >main.go <<'EOF'
package main

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing-go/fencing"
	"github.com/fencing-go/fencing/memorybackend"
)

func main() {
	c := fencing.New(memorybackend.New())
	l, err := c.Grant(context.Background(), "k", time.Second)
	fmt.Println(l.Token, err)
}
EOF
go mod tidy >&2
all=$(go list -m all)
mods=$(find "$GOMODCACHE/cache/download" -name '*.mod' | wc -l)
zips=$(find "$GOMODCACHE/cache/download" -name '*.zip' | wc -l)
mb=$(du -sm "$GOMODCACHE/cache/download" | cut -f1)
total=$(du -sm "$GOMODCACHE" | cut -f1)
echo "$mods modules (go.mod files), $(echo "$all" | wc -l) in go list -m all, $zips zips, $mb MB downloaded ($total MB extracted)"
if $verbose; then
	echo "$all"
fi
