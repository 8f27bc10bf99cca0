#!/usr/bin/env bash
# build-test-images.sh builds the local container images that the
# integration tests (integration/integration_test.go) can use instead of the official
# ones, for machines that cannot pull from a registry:
#
#   fencing-test/etcd:<version>  etcd built from its Go module (testimages/etcd,
#                                CGO_ENABLED=0) in a scratch image laid out like
#                                gcr.io/etcd-development/etcd
#   fencing-test/redis:<major>   Debian's redis-server, its shared libraries and
#                                the dynamic loader in a scratch image laid out
#                                like the official redis image
#   fencing-test/postgres:<major> Debian's PostgreSQL server, its library and
#                                share directories, their shared libraries, the
#                                loader and dash as /bin/sh, in a scratch image
#                                laid out like the official postgres image
#
# It prints the environment for the tests on stdout, and its progress on stderr:
#
#   eval "$(scripts/build-test-images.sh)"
#   go test -run Integration -v .
#
# Options: --print-env (the default: print the exports), --force (rebuild
# every image even when it is up to date).
#
# An image is rebuilt only when its inputs changed: each image carries a label
# with a hash of everything it is built from, and a tag whose label matches is
# kept. Nothing is pulled (docker build runs without --pull, FROM scratch). The
# script installs Debian's redis-server and postgresql packages when they are
# missing.
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
		echo "build-test-images: unknown argument $arg (try --help)" >&2
		exit 2
		;;
	esac
done

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
images=$root/testimages
label=org.fencing-go.test-image.inputs
# The legacy builder needs no buildx plugin and handles FROM scratch.
export DOCKER_BUILDKIT=0 GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false" CGO_ENABLED=0

log() { echo "build-test-images: $*" >&2; }

if ! docker info >/dev/null 2>&1; then
	log "cannot reach a Docker engine (docker info failed)"
	exit 1
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

# inputs_hash prints one hash of the files named (paths relative to the
# current directory) and of stdin.
inputs_hash() {
	{ sha256sum -- "$@"; cat; } | sha256sum | cut -d' ' -f1
}

# up_to_date reports whether image $1 exists with inputs hash $2.
up_to_date() {
	! $force && [[ "$(docker image inspect -f "{{index .Config.Labels \"$label\"}}" "$1" 2>/dev/null)" == "$2" ]]
}

# build builds the context directory $1 as image $2 with inputs hash $3, and
# removes the image that the tag named before, unless something still uses it.
build() {
	local old
	old=$(docker image inspect -f '{{.Id}}' "$2" 2>/dev/null || true)
	docker build --quiet --label "$label=$3" --tag "$2" "$1" >&2
	log "built $2"
	if [[ -n $old && $old != "$(docker image inspect -f '{{.Id}}' "$2")" ]]; then
		docker image rm "$old" >/dev/null 2>&1 || true
	fi
}

script_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
go_version=$(go version)

# etcd.
etcd_version=$(cd "$images" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
etcd_tag=fencing-test/etcd:$etcd_version
etcd_hash=$(cd "$images" && printf '%s\n%s\n' "$go_version" "$script_hash" |
	inputs_hash go.mod go.sum etcd/main.go etcd/Dockerfile)
if up_to_date "$etcd_tag" "$etcd_hash"; then
	log "$etcd_tag is up to date"
else
	log "building $etcd_tag (go build of go.etcd.io/etcd/server/v3 takes a minute the first time)"
	mkdir -p "$ctx/etcd/rootfs/usr/local/bin" "$ctx/etcd/rootfs/tmp"
	chmod 1777 "$ctx/etcd/rootfs/tmp"
	(cd "$images" && go build -trimpath -ldflags='-s -w' -o "$ctx/etcd/rootfs/usr/local/bin/etcd" ./etcd)
	cp "$images/etcd/Dockerfile" "$ctx/etcd/"
	build "$ctx/etcd" "$etcd_tag" "$etcd_hash"
fi

# redis.
if ! command -v redis-server >/dev/null 2>&1 && [[ ! -x /usr/bin/redis-server ]]; then
	log "installing Debian's redis-server"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends redis-server >&2 ||
		{ apt-get update >&2 && apt-get install -y --no-install-recommends redis-server >&2; }
fi
redis_cmd=$(command -v redis-server || echo /usr/bin/redis-server)
# Debian's redis-server is a symlink to redis-check-rdb: one binary that acts
# on the name it is run as. The image runs it as redis-server.
redis_server=$(readlink -f "$redis_cmd")
redis_version=$("$redis_cmd" --version | sed -n 's/.* v=\([0-9.]*\).*/\1/p')
if [[ -z $redis_version ]]; then
	log "cannot read the version of $redis_cmd"
	exit 1
fi
redis_tag=fencing-test/redis:${redis_version%%.*}
# The shared libraries and the loader, as ldd names them (symlinks kept as
# names, their targets copied).
mapfile -t redis_libs < <(ldd "$redis_server" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}')
redis_hash=$( (cd "$images" && printf '%s\n%s\n%s\n' "$go_version" "$script_hash" "${redis_libs[*]}" &&
	sha256sum -- "$redis_server" "${redis_libs[@]}" | cut -d' ' -f1) |
	(cd "$images" && inputs_hash go.mod go.sum redis/main.go redis/Dockerfile))
if up_to_date "$redis_tag" "$redis_hash"; then
	log "$redis_tag is up to date"
else
	log "building $redis_tag from $redis_server ($redis_version)"
	rootfs=$ctx/redis/rootfs
	mkdir -p "$rootfs/usr/local/bin" "$rootfs/tmp" "$rootfs/data"
	chmod 1777 "$rootfs/tmp"
	cp "$redis_server" "$rootfs/usr/local/bin/redis-server"
	for lib in "${redis_libs[@]}"; do
		mkdir -p "$rootfs$(dirname "$lib")"
		cp -L "$lib" "$rootfs$lib"
	done
	(cd "$images" && go build -trimpath -ldflags='-s -w' -o "$rootfs/usr/local/bin/docker-entrypoint" ./redis)
	cp "$images/redis/Dockerfile" "$ctx/redis/"
	build "$ctx/redis" "$redis_tag" "$redis_hash"
fi

# postgres.
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)
if [[ -z $pg_bin ]]; then
	log "installing Debian's postgresql"
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y --no-install-recommends postgresql >&2 ||
		{ apt-get update >&2 && apt-get install -y --no-install-recommends postgresql >&2; }
	pg_bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
fi
pg_major=$(basename "$(dirname "$pg_bin")")
pg_lib=/usr/lib/postgresql/$pg_major/lib
pg_share=/usr/share/postgresql/$pg_major
pg_tag=fencing-test/postgres:$pg_major
sh_bin=$(readlink -f /bin/sh)
# The shared libraries of the server, initdb, the server's modules and the
# shell, and the loader.
mapfile -t pg_libs < <(ldd "$pg_bin/postgres" "$pg_bin/initdb" "$pg_lib"/*.so "$sh_bin" 2>/dev/null |
	awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $1 !~ /:$/ {print $1}' | sort -u)
pg_hash=$( (printf '%s\n%s\n%s\n' "$go_version" "$script_hash" "${pg_libs[*]}" &&
	sha256sum -- "$pg_bin/postgres" "$pg_bin/initdb" "$sh_bin" "${pg_libs[@]}" | cut -d' ' -f1) |
	(cd "$images" && inputs_hash go.mod go.sum postgres/main.go postgres/Dockerfile))
if up_to_date "$pg_tag" "$pg_hash"; then
	log "$pg_tag is up to date"
else
	log "building $pg_tag from $pg_bin"
	rootfs=$ctx/postgres/rootfs
	mkdir -p "$rootfs/usr/local/bin" "$rootfs/tmp" "$rootfs/bin" "$rootfs/etc" "$rootfs/var/lib/postgresql/data" \
		"$rootfs/usr/lib/postgresql/$pg_major/bin" "$rootfs/usr/share/zoneinfo/Etc" "$rootfs/var/run/postgresql"
	chmod 1777 "$rootfs/tmp"
	cp "$pg_bin/postgres" "$pg_bin/initdb" "$rootfs/usr/lib/postgresql/$pg_major/bin/"
	cp -a "$pg_lib" "$rootfs/usr/lib/postgresql/$pg_major/"
	mkdir -p "$rootfs$(dirname "$pg_share")"
	cp -aL "$pg_share" "$rootfs$pg_share"
	cp -L /usr/share/zoneinfo/UTC "$rootfs/usr/share/zoneinfo/UTC"
	cp -L /usr/share/zoneinfo/UTC "$rootfs/usr/share/zoneinfo/Etc/UTC"
	cp "$sh_bin" "$rootfs/bin/sh"
	for lib in "${pg_libs[@]}"; do
		mkdir -p "$rootfs$(dirname "$lib")"
		cp -L "$lib" "$rootfs$lib"
	done
	printf 'root:x:0:0::/root:/bin/sh\npostgres:x:999:999::/var/lib/postgresql:/bin/sh\n' >"$rootfs/etc/passwd"
	printf 'root:x:0:\npostgres:x:999:\n' >"$rootfs/etc/group"
	(cd "$images" && go build -trimpath -ldflags='-s -w' -o "$rootfs/usr/local/bin/docker-entrypoint" ./postgres)
	cp "$images/postgres/Dockerfile" "$ctx/postgres/"
	build "$ctx/postgres" "$pg_tag" "$pg_hash"
fi

echo "export FENCING_ETCD_IMAGE=$etcd_tag"
echo "export FENCING_POSTGRES_IMAGE=$pg_tag"
echo "export FENCING_REDIS_IMAGE=$redis_tag"
echo "export TESTCONTAINERS_RYUK_DISABLED=true"
