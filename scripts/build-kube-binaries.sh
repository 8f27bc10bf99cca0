#!/usr/bin/env bash
# build-kube-binaries.sh builds the servers the tests start as child
# processes, from their Go modules (nothing is pulled but modules):
#
#   kube-apiserver  k8s.io/kubernetes (testimages/kubeapiserver, about 11.5
#                   CPU-minutes cold, a 170 MB binary), for kubebackend
#   etcd            go.etcd.io/etcd/server/v3 (testimages/etcd), for
#                   kube-apiserver and internal/testing/etcdtest
#   etcdutl         go.etcd.io/etcd/etcdutl/v3 (testimages/etcdutl, a module
#                   of its own), for etcdtest's snapshot restore
#   nats-server     github.com/nats-io/nats-server/v2 (testimages/natsserver,
#                   a module of its own naming it as a tool: about 1 minute
#                   cold), for natsbackend/natstest
#
# Each is built with CGO_ENABLED=0 go build -trimpath into
# ~/.cache/fencing-test-bin/<hash>/, the hash covering the Go version and the
# go.mod, go.sum and main.go files it is built from (etcd and kube-apiserver
# share one hash, etcdutl and nats-server have their own), so a second run rebuilds nothing. It
# prints the environment for the tests on stdout, and its progress on stderr:
#
#   eval "$(scripts/build-kube-binaries.sh)"
#   (cd kubebackend && go test ./...)
#
# Arguments name the binaries to build (default: all four); etcdtest builds
# etcd and etcdutl this way on first use when FENCING_ETCD or FENCING_ETCDUTL
# is not set, natstest nats-server when FENCING_NATS_SERVER is not set. Concurrent runs wait for each other (flock).
#
# Options: --force (rebuild even when the cache has the binaries).
set -euo pipefail

force=false
want=()
for arg in "$@"; do
	case $arg in
	--print-env) ;;
	--force) force=true ;;
	etcd | etcdutl | kube-apiserver | nats-server) want+=("$arg") ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*)
		echo "build-kube-binaries: unknown argument $arg (try --help)" >&2
		exit 2
		;;
	esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
images=$root/testimages
export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

log() { echo "build-kube-binaries: $*" >&2; }

if [[ ${#want[@]} -eq 0 ]]; then
	want=(etcd etcdutl kube-apiserver nats-server)
fi

# cachedir prints the cache directory of a build from the files given
# (relative to testimages/), the Go version included, and makes it.
cachedir() {
	local hash
	hash=$({
		go version
		cd "$images" && sha256sum "$@"
	} | sha256sum | cut -c1-16)
	echo "${XDG_CACHE_HOME:-$HOME/.cache}/fencing-test-bin/$hash"
	mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/fencing-test-bin/$hash"
}

# build builds package $3 of module directory $2 as $1, unless it is there
# already, holding a lock on $1.lock while it does.
build() {
	local out=$1 mod=$2 pkg=$3
	exec {lock}>"$out.lock"
	flock "$lock"
	if ! $force && [[ -x $out ]]; then
		log "$(basename "$out") is up to date ($out)"
	else
		log "building $(basename "$out") in $mod (kube-apiserver takes about 11.5 CPU-minutes the first time)"
		local start=$SECONDS
		(cd "$mod" && go build -trimpath -ldflags='-s -w' -o "$out.tmp" "$pkg")
		mv "$out.tmp" "$out"
		log "built $(basename "$out") in $((SECONDS - start)) s"
	fi
	exec {lock}>&-
}

for bin in "${want[@]}"; do
	case $bin in
	etcd | kube-apiserver)
		dir=$(cachedir go.mod go.sum etcd/main.go kubeapiserver/go.mod kubeapiserver/go.sum kubeapiserver/main.go)
		;;
	etcdutl) dir=$(cachedir etcdutl/go.mod etcdutl/go.sum) ;;
	nats-server) dir=$(cachedir natsserver/go.mod natsserver/go.sum) ;;
	esac
	case $bin in
	etcd)
		build "$dir/etcd" "$images" ./etcd
		echo "export FENCING_ETCD=$dir/etcd"
		;;
	etcdutl)
		build "$dir/etcdutl" "$images/etcdutl" go.etcd.io/etcd/etcdutl/v3
		echo "export FENCING_ETCDUTL=$dir/etcdutl"
		;;
	kube-apiserver)
		build "$dir/kube-apiserver" "$images/kubeapiserver" .
		echo "export FENCING_KUBE_APISERVER=$dir/kube-apiserver"
		;;
	nats-server)
		build "$dir/nats-server" "$images/natsserver" github.com/nats-io/nats-server/v2
		echo "export FENCING_NATS_SERVER=$dir/nats-server"
		;;
	esac
done
