// Command kube-apiserver is the Kubernetes API server built from its Go
// module, for the kubebackend tests (see scripts/build-kube-binaries.sh).
//
// It is a build-only program: nothing in the fencing library imports it,
// and its module is separate from every other, so no user of the library
// inherits k8s.io/kubernetes.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
