// Command etcd is the etcd server built from its Go module, for the local
// test image fencing-test/etcd (see scripts/build-test-images.sh).
//
// It is a build-only program: the fencing library never imports it, and its
// module (testimages/go.mod) is separate from the library's, so the
// library's users do not inherit its dependencies.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
