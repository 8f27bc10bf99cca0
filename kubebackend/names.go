package kubebackend

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// hashedPrefix starts the name of a Lease whose key is not a usable object
// name. A key that starts with it is hashed too, so no key used verbatim
// can take a hashed key's name.
const hashedPrefix = "fencing.h."

// LeaseName returns the name of the Lease object that holds key: the key
// itself when it is a valid object name (a DNS subdomain: lower-case
// letters, digits, '-' and '.', at most 253 bytes) that does not start with
// "fencing.h.", so that a client-go LeaderElector and a fencing lease can
// share a Lease by its name; otherwise "fencing.h." and the hex SHA-256 of
// the key. Either way the key itself is stored on the Lease (an
// annotation), and a Lease whose stored key is another key is refused.
func LeaseName(key string) string {
	if !strings.HasPrefix(key, hashedPrefix) && len(validation.IsDNS1123Subdomain(key)) == 0 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// verbatim reports whether name is a key's name used as it is.
func verbatim(name string) bool { return !strings.HasPrefix(name, hashedPrefix) }
