package fencing

// IsGlobalDelegate exposes isGlobalDelegate to the tests of package
// fencing_test.
var IsGlobalDelegate = isGlobalDelegate
