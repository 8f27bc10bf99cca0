// Package integration holds tests of the library over real servers that
// need more than the library's own module: the container suite
// (integration_test.go, testcontainers-go and the local Docker engine) and
// the tests of the Coordinator on every backend at once. It is a module of
// its own (integration/go.mod), so that what these tests import never
// enters the module graph of a program that imports the library; it has no
// API.
package integration
