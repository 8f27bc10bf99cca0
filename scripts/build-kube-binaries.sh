#!/usr/bin/env bash
# build-kube-binaries.sh builds the two servers the kubebackend tests start as
# child processes, from their Go modules (nothing is pulled but modules):
#
#   kube-apiserver  k8s.io/kubernetes (testimages/kubeapiserver, about 11.5
#                   CPU-minutes cold, a 170 MB binary)
#   etcd            go.etcd.io/etcd/server/v3 (testimages/etcd)
#
# Both are built with CGO_ENABLED=0 go build -trimpath into
# ~/.cache/fencing-test-bin/<hash>/, the hash covering the Go version and the
# modules' go.mod, go.sum and main.go files, so a second run rebuilds nothing.
# It prints the environment for the tests on stdout, and its progress on
# stderr:
#
#   eval "$(scripts/build-kube-binaries.sh)"
#   (cd kubebackend && go test ./...)
#
# Options: --force (rebuild even when the cache has the binaries).
set -euo pipefail

force=false
for arg in "$@"; do
	case $arg in
	--print-env) ;;
	--force) force=true ;;
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

hash=$(
	{
		go version
		cd "$images"
		sha256sum go.mod go.sum etcd/main.go kubeapiserver/go.mod kubeapiserver/go.sum kubeapiserver/main.go
	} | sha256sum | cut -c1-16
)
dir=${XDG_CACHE_HOME:-$HOME/.cache}/fencing-test-bin/$hash
mkdir -p "$dir"

# build builds package $2 of module directory $1 as $dir/$3, unless it is
# there already.
build() {
	if ! $force && [[ -x $dir/$3 ]]; then
		log "$3 is up to date ($dir/$3)"
		return
	fi
	log "building $3 in $1 (kube-apiserver takes about 11.5 CPU-minutes the first time)"
	local start=$SECONDS
	(cd "$1" && go build -trimpath -ldflags='-s -w' -o "$dir/$3.tmp" "$2")
	mv "$dir/$3.tmp" "$dir/$3"
	log "built $3 in $((SECONDS - start)) s"
}

build "$images" ./etcd etcd
build "$images/kubeapiserver" . kube-apiserver

echo "export FENCING_ETCD=$dir/etcd"
echo "export FENCING_KUBE_APISERVER=$dir/kube-apiserver"
